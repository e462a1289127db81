"""periods.py - the calendar and the prices energy is counted in (energy.py): local periods
(days from midnight to midnight in a zone, 23 or 25 hours on the days clocks change, ISO weeks
from Monday, calendar months and years) and tariffs (a flat price per kWh, or day and night
prices with the night's local hours, 22:00-06:00, which may span midnight: each period is cut
at the night's edges and each part priced by its window).

    t = Tariff.parse("day=0.32,night=0.22,night_hours=22-06")   # or .from_settings([tariff])
    periods("day", zoneinfo.ZoneInfo("Europe/Berlin"), start, end)  # [(start, end, label)]
    night_edges(t, zone, start, end)                                # [(unix s, is night)]
"""

import dataclasses
import datetime
import math
import re
import zoneinfo


PERIODS = ("day", "week", "month", "year")
MAX_PERIODS = 20000
_CLOCK = re.compile(r"([01]?\d|2[0-3])(?::([0-5]\d))?\Z")


class EnergyError(ValueError):
    """A question or a tariff that cannot be used as given; the message says why, in words."""


def _minutes(text, key):
    if isinstance(text, datetime.time):  # TOML's unquoted 22:00:00
        return text.hour * 60 + text.minute
    m = _CLOCK.match(str(text).strip())
    if not m:
        raise EnergyError("tariff %s %r is not a time of day such as 22:00" % (key, text))
    return int(m.group(1)) * 60 + int(m.group(2) or 0)


def _price(value, key):
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        raise EnergyError("tariff %s %r is not a price (a number, 0 or more, per kWh)"
                          % (key, value))
    return float(value)


@dataclasses.dataclass(frozen=True)
class Tariff:
    """A flat price per kWh (price), or day and night prices with the night's local start and
    end in minutes after midnight (the night may span midnight)."""
    currency: str = "EUR"
    price: float | None = None
    day_price: float | None = None
    night_price: float | None = None
    night_start_min: int | None = None
    night_end_min: int | None = None

    @property
    def split(self):
        return self.price is None

    def describe(self):
        if not self.split:
            return {"currency": self.currency, "price": self.price}
        return {"currency": self.currency, "day_price": self.day_price,
                "night_price": self.night_price,
                "night_start": "%02d:%02d" % divmod(self.night_start_min, 60),
                "night_end": "%02d:%02d" % divmod(self.night_end_min, 60)}

    @classmethod
    def from_settings(cls, d):
        """The [tariff] table of the config file (settings.py) -> Tariff, or None without one.
        Keys: currency, and price, or day_price, night_price, night_start, night_end."""
        if d is None:
            return None
        if not isinstance(d, dict):
            raise EnergyError("[tariff] is not a table")
        known = ("currency", "price", "day_price", "night_price", "night_start", "night_end")
        for key in d:
            if key not in known:
                raise EnergyError("tariff key %r is unknown: use %s" % (key, ", ".join(known)))
        currency = d.get("currency", "EUR")
        if not isinstance(currency, str) or not 0 < len(currency) <= 8:
            raise EnergyError("tariff currency %r is not a short name such as EUR" % (currency,))
        split_keys = ("day_price", "night_price", "night_start", "night_end")
        if "price" in d:
            extra = [k for k in split_keys if k in d]
            if extra:
                raise EnergyError("tariff has both price and %s: give a flat price or day/night "
                                  "prices, not both" % extra[0])
            return cls(currency, price=_price(d["price"], "price"))
        missing = [k for k in split_keys if k not in d]
        if len(missing) == len(split_keys):
            raise EnergyError("tariff has no price: give price, or day_price, night_price, "
                              "night_start and night_end")
        if missing:
            raise EnergyError("tariff lacks %s (a day/night tariff needs day_price, "
                              "night_price, night_start and night_end)" % missing[0])
        start = _minutes(d["night_start"], "night_start")
        end = _minutes(d["night_end"], "night_end")
        if start == end:
            raise EnergyError("tariff night_start and night_end are both %s: the night would "
                              "be empty or the whole day" % d["night_start"])
        return cls(currency, day_price=_price(d["day_price"], "day_price"),
                   night_price=_price(d["night_price"], "night_price"),
                   night_start_min=start, night_end_min=end)

    @classmethod
    def parse(cls, text, currency="EUR"):
        """The command line's form: "0.30" (flat), or "day=0.32,night=0.22,night_hours=22-06"
        (hours as 22-06 or 22:30-06:00)."""
        text = text.strip()
        try:
            return cls.from_settings({"currency": currency, "price": float(text)})
        except ValueError:
            pass
        d = {"currency": currency}
        names = {"day": "day_price", "night": "night_price"}
        for part in text.split(","):
            key, eq, value = part.partition("=")
            key = key.strip()
            if not eq:
                raise EnergyError("tariff %r: use 0.30, or day=0.32,night=0.22,night_hours=22-06"
                                  % text)
            if key == "night_hours":
                lo, dash, hi = value.partition("-")
                if not dash:
                    raise EnergyError("tariff night_hours %r: use start-end such as 22-06"
                                      % value)
                d["night_start"], d["night_end"] = lo, hi
            elif key in names:
                try:
                    d[names[key]] = float(value)
                except ValueError:
                    raise EnergyError("tariff %s price %r is not a number" % (key, value)) from None
            else:
                raise EnergyError("tariff %r: %r is not day, night or night_hours" % (text, key))
        return cls.from_settings(d)


def _zone(tz):
    if tz in ("UTC", "utc", "Z"):
        return datetime.timezone.utc
    try:
        return zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
        raise EnergyError("%r is not a time zone: use a name such as Europe/Berlin or UTC"
                          % (tz,)) from None


def local_midnight(day, zone):
    return int(datetime.datetime(day.year, day.month, day.day, tzinfo=zone).timestamp())


def _period_start(day, by):
    if by == "week":
        return day - datetime.timedelta(days=day.weekday())
    if by == "month":
        return day.replace(day=1)
    if by == "year":
        return day.replace(month=1, day=1)
    return day


def next_period(day, by):
    if by == "day":
        return day + datetime.timedelta(days=1)
    if by == "week":
        return day + datetime.timedelta(days=7)
    if by == "month":
        return (day.replace(day=28) + datetime.timedelta(days=4)).replace(day=1)
    return day.replace(year=day.year + 1)


def _label(day, by):
    if by == "week":
        year, week, _ = day.isocalendar()
        return "%d-W%02d" % (year, week)
    return day.isoformat()[:{"day": 10, "month": 7, "year": 4}[by]]


def periods(by, zone, start, end):
    """[(start, end, label)] of the local periods that cover unix [start, end)."""
    day = _period_start(datetime.datetime.fromtimestamp(start, zone).date(), by)
    out = []
    while True:
        nxt = next_period(day, by)
        t0, t1 = local_midnight(day, zone), local_midnight(nxt, zone)
        if t0 >= end:
            break
        out.append((t0, t1, _label(day, by)))
        if len(out) > MAX_PERIODS:
            raise EnergyError("that is more than %d %ss: ask for a shorter range or a longer "
                              "period" % (MAX_PERIODS, by))
        day = nxt
    return out


def night_edges(tariff, zone, start, end):
    """Sorted unix times in [start, end] where the night begins or ends, and for each time
    whether the night begins there."""
    day = datetime.datetime.fromtimestamp(start, zone).date() - datetime.timedelta(days=1)
    last = datetime.datetime.fromtimestamp(end, zone).date() + datetime.timedelta(days=1)
    edges = []
    while day <= last:
        for minute, begins in ((tariff.night_start_min, True), (tariff.night_end_min, False)):
            local = datetime.datetime(day.year, day.month, day.day, minute // 60, minute % 60,
                                      tzinfo=zone)
            t = int(local.timestamp())
            if start <= t <= end:
                edges.append((t, begins))
        day += datetime.timedelta(days=1)
    edges.sort()
    return edges


def _is_night(tariff, zone, t):
    local = datetime.datetime.fromtimestamp(t, zone)
    minute = local.hour * 60 + local.minute
    lo, hi = tariff.night_start_min, tariff.night_end_min
    return lo <= minute < hi if lo < hi else minute >= lo or minute < hi
