"""times.py - the times and durations people type, and the times wattlog prints. One parser for
every command (the wattlog CLI and tools/simnode).

A time is any of
  now, now-24h, now-90m, now-7d, now+1h, -24h, -3600   relative to now (s, m, h, d; s if none)
  1795170000                                          unix seconds
  2026-11-21, 2026-11-21T08:00, 2026-11-21 08:00:30   ISO 8601 in the zone given (UTC unless
                                                      --tz says otherwise)
  2026-11-21T08:00+01:00, 2026-11-21T07:00Z           ISO 8601 with its own zone
A zone is an IANA name (Europe/Berlin), UTC, or "local" (this computer's zone). Times are
printed as unix seconds or ISO 8601 with the zone's offset (2026-11-21T08:00:00+01:00).
"""

import argparse
import datetime
import re
import time
import zoneinfo

_RELATIVE = re.compile(r"(?:now)?(?:([-+])(\d+(?:\.\d+)?)([smhd]?))?\Z")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
UTC = datetime.timezone.utc
STORABLE_S = (0, 1 << 32)  # what a feed can hold: PHPFina's times are 32-bit unix seconds


def zone(name):
    """A tzinfo for --tz: an IANA name, UTC, or local."""
    if name in ("UTC", "utc", "Z"):
        return UTC
    if name == "local":
        return datetime.datetime.now().astimezone().tzinfo
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise argparse.ArgumentTypeError("%r is not a time zone: use a name such as "
                                         "Europe/Berlin, UTC, or local" % name) from None


def parse_time(text, now=None, tz=UTC):
    """Unix seconds (int) of a time as described above; ArgumentTypeError in words if it is
    none of them."""
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return int(text.partition(".")[0])
    m = _RELATIVE.match(text)
    if m and text:
        base = time.time() if now is None else now
        if m.group(1) is None:
            return int(base)
        step = float(m.group(2)) * _UNIT_S[m.group(3)]
        return int(base - step if m.group(1) == "-" else base + step)
    try:
        dt = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            "%r is not a time: use now, now-24h, unix seconds or 2026-11-21T08:00" % text) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=tz)
    return int(dt.timestamp())


def storable_time(text, what, tz=UTC):
    """parse_time(), for a time a feed can hold (1970 to 2106); ArgumentTypeError in words,
    naming `what` (e.g. --start)."""
    try:
        t = parse_time(text, tz=tz)
    except (OverflowError, ValueError):  # a date past what datetime can hold
        t = None
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError("%s: %s" % (what, e)) from None
    if t is None or not STORABLE_S[0] <= t < STORABLE_S[1]:
        raise argparse.ArgumentTypeError("%s %s is not a time a feed can hold (1970 to 2106): "
                                         "use unix seconds, now-24h or 2026-11-21T08:00"
                                         % (what, text.strip()[:40]))
    return t


def duration(text):
    """Seconds of 90, 90s, 15m, 36h or 7d."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError("%r is not a duration: use seconds or 90m, 36h, 7d" % text)
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def iso(t, tz=UTC):
    """ISO 8601 with the zone's offset (Z for UTC)."""
    text = datetime.datetime.fromtimestamp(t, tz).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") and tz is UTC else text
