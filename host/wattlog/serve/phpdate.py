"""phpdate.py - PHP's DateTime as emoncms's feed API uses it (PHP 8.2, timelib 2022), so that
wattlog's emoncms answers land on the same seconds as emoncms's: a zone as new DateTimeZone()
reads it, a request's time as DateTime::modify() reads it from now, and the local-time walk of
emoncms's daily, weekly, monthly and annual intervals. Only the emoncms API uses this module:
wattlog's own times (times.py) mean what they say.

What PHP does that Python's datetime does not, each checked against php-cli 8.2:
  - A DateTime is an instant; modify() changes its local wall time and finds the instant again,
    and the next modify() starts from the local time of that instant. So when a local midnight
    does not exist (Asia/Beirut 2026-03-29 00:00, the clocks go to 01:00), "+1 day" lands on
    01:00 and every later "+1 day" stays at 01:00 (Date below keeps the wall time, as PHP).
  - A local time the clocks skip is moved forward by the gap (02:30 -> 03:30). A local time
    that occurs twice is read with the offset the DateTime had before, as timelib's
    do_adjust_timezone() (tm2unixtime.c) decides: it looks at the zone's offset at the local
    time read as UTC, at that minus the offset, and, when the DateTime was in DST, 2 h around
    it (Zone.instant below follows its steps). Python's fold=0 gives the earlier one always.
  - modify() ignores a zone in its string: "2026-03-10T08:00-05:00" is 08:00 in the
    DateTime's zone; except "1970-01-01T00:00:00+00:00" (or -00:00, +0000, +00), which PHP
    takes for "@0" and answers 0.
  - A date without a time keeps the time of day the DateTime had (now's, in emoncms).
  - "now-24h" and "-24h" are "now" followed by a time zone (-24 hours, then the military zone
    "h"), which modify() ignores: both are now. PHP reads such a zone as [+-], an hour 0-24 and
    optionally minutes 0-59: -24, -25 (2:05), -130 (1:30), -2359; it fails on "now-360h" and
    "-3600s" (no such zone; emoncms would answer with a PHP warning), and on decimals.
  - new DateTimeZone() takes IANA names in any case (europe/berlin), UTC offsets (+01:00,
    +0100, +01, +1, -5:30, +01:00:30, GMT+1, up to 99:59), and abbreviations; of these
    CET, EET, MET, WET, EST, HST, MST, GMT, UCT, UTC are fixed offsets (CET is +01:00 in
    summer too). Other abbreviations (CEST, PST) and a few malformed offsets PHP still takes
    (+01::00, +100:00) are refused here.
Times outside years 1 to 9999 are refused (Python's datetime ends there).
"""

import datetime
import functools
import re
import zoneinfo

EPOCH = datetime.datetime(1970, 1, 1)
_DAY_S = 86400
# PHP's abbreviation zones that are also IANA names: fixed offsets, no DST (php-cli 8.2)
_ABBREVIATIONS = {"utc": 0, "gmt": 0, "uct": 0, "z": 0, "wet": 0, "cet": 3600, "met": 3600,
                  "eet": 7200, "est": -18000, "mst": -25200, "hst": -36000}
_OFFSET = re.compile(r"(?:GMT)?([+-])([0-9:]+)\Z")
# an hour 0-24, then optionally minutes 0-59 (or hh:mm:ss): the zone modify() reads and ignores
_TZ_CORRECTION = re.compile(r"([01]?[0-9]|2[0-4])(:?[0-5]?[0-9])?\Z"
                            r"|([01][0-9]|2[0-4])(:[0-5][0-9]){2}\Z")
_RELATIVE = re.compile(r"(now)?([+-])(\d+(?:\.\d*)?)([smhd])?\Z", re.IGNORECASE)
_ISO = re.compile(r"(\d{4})-(\d{2})-(\d{2})"
                  r"(?:(?:[Tt]| +)(\d{1,2}):(\d{2})(?::(\d{2})(\.\d*)?)?|[Tt](\d{1,2}))?"
                  r"(?: *([Zz]|[+-][0-9:]+))?\Z")


class PhpDateError(ValueError):
    """A zone or time PHP would not take, or wattlog does not: the message says which."""


# -- zones ---------------------------------------------------------------------------------------

class Zone:
    """A zone as DateTimeZone holds it: a fixed offset (offset_s) or an IANA zone (tz)."""

    def __init__(self, offset_s=None, tz=None):
        self.offset_s, self.tz = offset_s, tz

    def offset(self, t):
        """(UTC offset in s, in DST) at unix time t."""
        if self.tz is None:
            return self.offset_s, False
        local = _python(lambda: datetime.datetime.fromtimestamp(t, self.tz))
        return int(local.utcoffset().total_seconds()), bool(local.dst())

    def wall(self, t):
        """The local wall time (naive) at unix time t."""
        return _python(lambda: EPOCH + datetime.timedelta(seconds=t + self.offset(t)[0]))

    def period_start(self, t):
        """When the zone's (offset, DST) last changed at or before t; far back (3 days) if not
        within 2 days, which is as good for the comparisons instant() makes within hours."""
        here = self.offset(t)
        for back_h in range(1, 49):
            if self.offset(t - 3600 * back_h) != here:
                lo, hi = t - 3600 * back_h, t - 3600 * (back_h - 1)
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    lo, hi = (mid, hi) if self.offset(mid) != here else (lo, mid)
                return hi
        return t - 3 * _DAY_S

    def instant(self, sse, dst_before):
        """The unix time of local wall time `sse` (seconds since 1970-01-01 00:00, read as if
        UTC), for a DateTime whose DST flag was dst_before: timelib's do_adjust_timezone()."""
        if self.tz is None:
            return sse - self.offset_s
        current, current_dst = self.offset(sse)
        after, _ = self.offset(sse - current)
        actual, actual_at = after, None
        if current == after:
            # the DateTime was in DST and the zone, read at sse, is not (east of UTC), or the
            # other way round (west): look 2 h back or ahead for the offset it left
            if current >= 0 and dst_before and not current_dst:
                probe = sse - current - 7200
                other, _ = self.offset(probe)
                if other != after and sse - other < self.period_start(sse - current):
                    actual, actual_at = other, probe
            elif current <= 0 and current_dst and not dst_before:
                probe = sse - current + 7200
                other, _ = self.offset(probe)
                if other != after and sse - other >= self.period_start(probe):
                    actual, actual_at = other, probe
        if actual == current:
            return sse - current
        start = self.period_start(actual_at if actual_at is not None else sse - current)
        in_transition = start + (current - actual) <= sse - actual < start
        return sse - (current if in_transition else actual)


@functools.lru_cache(maxsize=None)
def _iana_names():
    return {name.lower(): name for name in zoneinfo.available_timezones()}


def _offset_s(body):
    """UTC offset in s of the digits and colons after the sign, as timelib reads them."""
    fields = None
    if len(body) in (1, 2) and body.isdigit():
        fields = (body, "0", "0")
    elif len(body) in (3, 4) and body[1] == ":":
        fields = (body[0], body[2:], "0")
    elif len(body) in (3, 4) and body[2] == ":":
        fields = (body[:2], body[3:], "0")
    elif len(body) in (3, 4):
        fields = (body[:-2], body[-2:], "0")
    elif len(body) == 5 and body[2] == ":":
        fields = (body[:2], body[3:], "0")
    elif len(body) == 6:
        fields = (body[:2], body[2:4], body[4:])
    elif len(body) == 8 and body[2] == body[5] == ":":
        fields = (body[:2], body[3:5], body[6:])
    if fields is None or not all(f.isdigit() for f in fields):
        return None
    h, m, s = map(int, fields)
    total = 3600 * h + 60 * m + s
    return total if total < 100 * 3600 else None


@functools.lru_cache(maxsize=256)
def zone(name):
    """new DateTimeZone(name) for the spellings described above; PhpDateError otherwise."""
    text = name.lstrip(" \t")
    m = _OFFSET.match(text)
    if m:
        offset = _offset_s(m.group(2))
        if offset is not None:
            return Zone(offset_s=-offset if m.group(1) == "-" else offset)
    elif text.lower() in _ABBREVIATIONS:
        return Zone(offset_s=_ABBREVIATIONS[text.lower()])
    elif text.lower() in _iana_names():
        return Zone(tz=zoneinfo.ZoneInfo(_iana_names()[text.lower()]))
    raise PhpDateError("timezone %r is not a time zone: use a name such as Europe/Berlin or an "
                       "offset such as +01:00" % name)


# -- instants and wall times ---------------------------------------------------------------------

def _python(make):
    try:
        return make()
    except (OverflowError, ValueError, OSError):
        raise PhpDateError("that time is outside the years 1 to 9999") from None


def _sse(y, m, d, hh=0, mm=0, ss=0):
    """Seconds of a wall time counted as if UTC; days, hours and seconds past their range
    carry over (2026-02-30 is March 2nd, 24:00 the next day), as in PHP."""
    y, m = y + (m - 1) // 12, (m - 1) % 12 + 1
    days = _python(lambda: datetime.date(y, m, 1).toordinal()) + d - 1 - EPOCH.toordinal()
    return days * _DAY_S + hh * 3600 + mm * 60 + ss


def _sse_of(wall):
    return _sse(wall.year, wall.month, wall.day, wall.hour, wall.minute, wall.second)


class Date:
    """A PHP DateTime in a zone: an instant (ts); each change reads its wall time, changes that
    and finds the instant again, as modify() does."""

    def __init__(self, zone_, ts):
        self.zone, self.ts = zone_, int(ts)

    @property
    def wall(self):
        return self.zone.wall(self.ts)

    def set_wall(self, sse):
        self.ts = self.zone.instant(sse, self.zone.offset(self.ts)[1])
        return self

    def midnight(self, days_on=0):
        """modify("midnight"), or "tomorrow midnight" with days_on=1."""
        w = self.wall
        return self.set_wall(_sse(w.year, w.month, w.day + days_on))

    def monday(self, after_today=False):
        """modify("this monday"): today if a Monday, else the next one; "next monday": the
        next one after today. Both at 00:00."""
        w = self.wall
        days = (7 - w.weekday()) % 7 or (7 if after_today else 0)
        return self.set_wall(_sse(w.year, w.month, w.day + days))

    def first_day(self, month_on=0, of_year=False):
        """modify("first day of this/next month") or "first day of january this/next year"
        (month_on 0 or 1 month, or year with of_year); the time of day stays."""
        w = self.wall
        year, month = (w.year + month_on, 1) if of_year else (w.year, w.month + month_on)
        return self.set_wall(_sse(year, month, 1, w.hour, w.minute, w.second))

    def add(self, period):
        """modify("+1 day"), "+1 week", "+1 month" (Jan 31 + 1 month = Mar 3), "+1 year"."""
        w = self.wall
        y, m, d = w.year, w.month, w.day
        if period == "day":
            d += 1
        elif period == "week":
            d += 7
        elif period == "month":
            m += 1
        else:
            y += 1
        return self.set_wall(_sse(y, m, d, w.hour, w.minute, w.second))

    def iso8601(self):
        """format("c"): 2026-03-29T01:00:00+03:00 (an offset's seconds dropped, as PHP)."""
        offset = self.zone.offset(self.ts)[0]
        sign = "-" if offset < 0 else "+"
        return "%s%s%02d:%02d" % (self.wall.isoformat(), sign, abs(offset) // 3600,
                                  abs(offset) % 3600 // 60)

    def excel(self):
        """format("d/m/Y H:i:s")."""
        w = self.wall
        return "%02d/%02d/%04d %02d:%02d:%02d" % (w.day, w.month, w.year, w.hour, w.minute,
                                                  w.second)


# -- a request's time ----------------------------------------------------------------------------

def modify(text, zone_, now):
    """The unix time emoncms's convert_time() makes of a non-numeric time: DateTime::modify(text)
    on a DateTime at `now` in the zone; PhpDateError for a string this module does not take
    or PHP fails on."""
    date = Date(zone_, now)
    body = text.strip(" \t")
    if body.lower() == "now":
        return date.ts
    relative = _RELATIVE.match(body)
    if relative:
        digits = relative.group(3)
        if not _TZ_CORRECTION.match(digits):
            raise PhpDateError("%r: emoncms's PHP cannot read it (it reads now-24h as now and a "
                               "time zone, and fails on this one): use unix seconds" % text)
        return date.ts
    iso = _ISO.match(body)
    if not iso or (iso.group(9) and iso.group(9) not in "Zz"
                   and not _TZ_CORRECTION.match(iso.group(9)[1:])):
        raise PhpDateError("%r is not a time here: use unix seconds or milliseconds, now or an "
                           "ISO date such as 2026-03-10T08:00" % text)
    y, mo, d = (int(iso.group(k)) for k in (1, 2, 3))
    hour = iso.group(4) or iso.group(8)
    if mo > 12 or d > 31 or (hour is not None and (int(hour) > 24 or int(iso.group(6) or 0) > 60
                                                  or int(iso.group(5) or 0) > 59)) or \
            (iso.group(7) and len(hour) < 2):
        raise PhpDateError("%r is not a date PHP takes" % text)
    wall = date.wall
    fields = (y, mo, d) + ((wall.hour, wall.minute, wall.second) if hour is None else
                           (int(hour), int(iso.group(5) or 0), int(iso.group(6) or 0)))
    offset = iso.group(9)
    if hour is not None and fields == (1970, 1, 1, 0, 0, 0) and iso.group(7) in (None, ".") \
            and offset and offset not in "Zz" and not offset[1:].strip("0:"):
        return 0  # PHP takes a zero offset at the epoch for "@0" and leaves the zone
    try:
        return date.set_wall(_sse(*fields)).ts
    except PhpDateError as e:
        raise PhpDateError("%r: %s" % (text, e)) from None
