"""emonfeed.py - emoncms's feed data, emulated: what Modules/feed/feed_model.php get_data() and
Modules/feed/engine/PHPFina.php get_data_combined() answer for a feed (emoncms.py serves it).

Reimplemented from reading them, for the same grid of slots:
  - start and end: unix seconds, or milliseconds when larger than 1e11 (then * 0.001), cut to
    whole seconds toward zero, or a string DateTime::modify() reads from now in `timezone`
    (phpdate: now; ISO dates, their zone ignored, a date alone keeping now's time of day;
    now-24h and -24h, which PHP reads as now); the end is inclusive: points at start,
    start + interval, ... while <= end; a start between slots reads the slot it falls in
    (floored) and is stamped with the time asked for; slots outside the feed are null.
  - interval: seconds (0 or less: (end - start) / 800, rounded), `original` (the feed's own),
    or daily, weekly, monthly, annual aligned to local midnights in `timezone` (weekly from
    the Monday on or after the start's day, as PHP's "this monday"), walked in local time as
    PHP's DateTime walks them (phpdate: after a midnight the clocks skip, at 01:00); `mode` is
    its old name. The zone is read as PHP's DateTimeZone reads it, and only where emoncms
    reads it (calendar intervals, string times, excel and iso8601 times).
    limitinterval=1 raises it to the feed's interval and rounds it to a multiple of it.
  - average=1: the mean of the non-null slots of [point, next point) (feed/average.json is
    average=1); else the value of the slot each point falls in. skipmissing=1 drops nulls.
  - delta=1 (a cumulative kWh feed -> kWh per interval): the end moves to the interval after
    it, each point becomes the next one minus it, the last value fills the interval it falls
    in; dp=N rounds values (PHP's round(): half away from zero after rounding to 15 digits).
  - timeformat unixms (the default), unix, excel (d/m/Y H:i:s), iso8601, notime.
  - more than 20000 points (emoncms's max_datapoints) is refused with emoncms's message; ids=
    several feeds gives [{"feedid", "data"}].
Numbers are written as PHP's json_encode writes them (10 not 10.0, 1.0e-5), so the bytes match.
Errors emoncms answers with a body of its own ({"success": false, "message": ...}, "missing
start parameter") are answered the same way (HTTP 200, as emoncms does). Where emoncms would
loop for ever, run out of memory or fail inside PHP, or where wattlog offers less, the answer
is HTTP 400 with {"success": false, "message": one sentence}: an interval word emoncms does
not know (it would step 1 s at a time), more than 80000 points (interval=original over years),
delta with interval=original or with a calendar interval and notime (PHP TypeErrors), a time
zone phpdate does not take where one is needed (emoncms fails there too), PHP date strings
other than those above (or ones PHP fails on: now-360h), times outside years 1 to 9999, csv=1,
split=.
A start and end within the same second (1.25 to 1.75) get the engine's own "request end time
before start time"; emoncms itself never answers that one (its unixms formatting loops).
"""

import math
import time

import numpy as np

from wattlog.serve import phpdate
from wattlog.serve.phpnum import is_numeric, php_int, php_round, php_round_dp, php_truthy

MAX_DATAPOINTS = 20000  # emoncms default-settings.ini


# emoncms counts points only for a numeric interval, and from a rounded interval; beyond this
# many (interval=original over years, daily over centuries) wattlog refuses rather than loop
_MAX_POINTS = 4 * MAX_DATAPOINTS
CALENDAR = ("daily", "weekly", "monthly", "annual")
_PERIOD = dict(zip(CALENDAR, ("day", "week", "month", "year")))
TIMEFORMATS = ("unix", "unixms", "excel", "iso8601", "notime")


class BadRequest(Exception):
    """A request emoncms has no answer of its own for: HTTP 400, one sentence."""


class Meta:
    """PHPFina get_meta(): interval, start_time, npoints, end_time."""

    def __init__(self, feed):
        self.feed = feed
        self.interval = feed.interval
        self.start_time = feed.start
        self.npoints = feed.npoints()
        self.end_time = max(self.start_time + self.interval * (self.npoints - 1), 0)

    def empty(self):
        """emoncms's get_meta() returns false for a feed with a start but no points."""
        return self.start_time > 0 and self.npoints == 0


def _calendar(start, end, interval, zone):
    """Local aligned division starts up to end and the end of each, as PHP DateTime modify()
    walks them from start: midnight, then this monday / first day of this month / of january,
    then +1 day (week, month, year) from each, in local wall time: where a midnight does not
    exist, the walk goes on at 01:00 (see phpdate)."""
    date = phpdate.Date(zone, start).midnight()
    if interval == "weekly":
        date.monday()
    elif interval == "monthly":
        date.first_day()
    elif interval == "annual":
        date.first_day(of_year=True)
    by = _PERIOD[interval]
    starts, ends = [], []
    t = date.ts
    while t <= end:
        if len(starts) > _MAX_POINTS:
            raise BadRequest("that asks for more than %d points: ask for a shorter range"
                             % _MAX_POINTS)
        starts.append(t)
        t = date.add(by).ts
        ends.append(t)
    return np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64)


def get_data_combined(meta, start, end, interval, average, zone, timeformat, skipmissing,
                      limitinterval):
    """PHPFina get_data_combined(): [[time, value], ...] (values only with notime), or
    emoncms's {"success": false} when the end is not after the start, or False (no points)."""
    start, end = int(start), int(end)
    skipmissing, limitinterval = php_int(skipmissing), php_int(limitinterval)
    if end <= start:
        return {"success": False, "message": "request end time before start time"}
    if meta.empty():
        return False
    if interval == "original":
        interval = meta.interval
    if interval in CALENDAR:
        starts, ends = _calendar(start, end, interval, phpdate.zone(zone))
    else:
        interval = int(interval) if not isinstance(interval, str) else php_int(interval)
        interval = max(interval, 1)
        if limitinterval:
            interval = max(interval, meta.interval)
            interval = php_round(interval / meta.interval) * meta.interval
        if interval <= meta.interval:
            average = False  # one slot per point at most: emoncms reads the slot, no mean
        count = (end - start) // interval + 1
        if count > _MAX_POINTS:
            raise BadRequest("that asks for %d points, more than %d: ask for a longer interval "
                             "or a shorter range" % (count, _MAX_POINTS))
        starts = start + interval * np.arange(count, dtype=np.int64)
        ends = starts + interval
    iv, st, n = meta.interval, meta.start_time, meta.npoints
    pos = (starts - st) // iv
    values = []
    if average:
        pos_end = np.clip((ends - st) // iv, 0, n)
        pos = np.clip(pos, 0, n)
        lo, hi = (int(pos.min()), int(pos_end.max())) if len(pos) else (0, 0)
        block = meta.feed.read(lo, hi).astype(np.float64)
        for a, b in zip((pos - lo).tolist(), (pos_end - lo).tolist()):
            part = block[a:b]
            part = part[~np.isnan(part)]
            # PHP adds one value at a time from 0: a cumulative sum, not numpy's pairwise sum
            values.append(float(np.cumsum(np.concatenate(([0.0], part)))[-1]) / len(part)
                          if len(part) else None)
    else:
        inside = (starts >= st) & (starts <= meta.end_time)
        got = np.full(len(starts), np.nan)
        if inside.any():
            lo, hi = int(pos[inside].min()), int(pos[inside].max()) + 1
            block = meta.feed.read(lo, hi).astype(np.float64)
            got[inside] = block[pos[inside] - lo]
        values = [None if math.isnan(v) else v for v in got.tolist()]
    keep_nulls = skipmissing == 0
    notime = timeformat == "notime"
    return [v if notime else [t, v] for t, v in zip(starts.tolist(), values)
            if v is not None or keep_nulls]


def convert_time(text, zone_name, now):
    """Seconds (a float, as emoncms keeps it) from unix seconds or ms, or DateTime::modify() of
    the text from `now` in the zone (now, ISO dates: see phpdate)."""
    if not is_numeric(text):
        return float(phpdate.modify(text, phpdate.zone(zone_name), now))
    t = float(text)
    if not math.isfinite(t) or abs(t) > 1e16:
        raise BadRequest("%r is not a time: use unix seconds or milliseconds" % text)
    return t * 0.001 if t / 1e9 > 100 else t


def _delta_end(end, interval, zone_name):
    """delta_mode_next_interval(): tomorrow midnight, then next monday / first day of next
    month / of january next year; or the next multiple of a numeric interval."""
    if interval in CALENDAR:
        date = phpdate.Date(phpdate.zone(zone_name), int(end)).midnight(days_on=1)
        if interval == "weekly":
            date.monday(after_today=True)
        elif interval == "monthly":
            date.first_day(month_on=1)
        elif interval == "annual":
            date.first_day(month_on=1, of_year=True)
        return date.ts
    return math.floor(end / interval) * interval + interval


def _delta(data, last, notime, start, interval):
    """delta_mode_convert(): each value becomes the next minus it; the feed's last value fills
    the slot after the interval it lies in; the last point goes."""
    time = last["time"]
    for i in range(len(data) - 1):
        if notime:
            t0, t1 = start + i * interval, start + (i + 1) * interval
            if data[i + 1] is None and time is not None and t0 < time <= t1:
                data[i + 1] = last["value"]
            data[i] = None if data[i] is None or data[i + 1] is None else data[i + 1] - data[i]
        else:
            if data[i + 1][1] is None and time is not None and data[i][0] < time <= data[i + 1][0]:
                data[i + 1][1] = last["value"]
            data[i][1] = (None if data[i][1] is None or data[i + 1][1] is None
                          else data[i + 1][1] - data[i][1])
    if data:
        data.pop()
    return data


def _format_times(data, timeformat, zone_name):
    if not data or timeformat in ("unix", "notime"):
        return data
    zone = phpdate.zone(zone_name) if timeformat != "unixms" else None
    for row in data:
        if timeformat == "unixms":
            row[0] *= 1000
        else:
            date = phpdate.Date(zone, row[0])
            row[0] = date.excel() if timeformat == "excel" else date.iso8601()
    return data


def lastvalue(meta):
    """PHPFina lastvalue(): the last slot's time and value (None when it holds no data)."""
    if not meta.npoints:
        return {"time": None, "value": None}
    v = float(meta.feed.read(meta.npoints - 1, meta.npoints)[0])
    return {"time": meta.end_time, "value": None if math.isnan(v) else v}


def get_data(meta, q, default_zone):
    """feed_model.php get_data() for one feed, `q` the request's parameters (strings)."""
    zone = q["timezone"] if "timezone" in q else default_zone
    interval = q.get("mode", q.get("interval", "0"))
    timeformat = q.get("timeformat", "unixms")
    delta, dp = q.get("delta"), q.get("dp", "-1")
    if q.get("csv") not in (None, "0", "") or "split" in q:
        raise BadRequest("csv and split are not offered here: use `wattlog export`")
    if interval not in CALENDAR and interval != "original" and not is_numeric(interval):
        raise BadRequest("interval %r is not seconds, original, daily, weekly, monthly or "
                         "annual" % interval)
    now = time.time()  # one moment for both (PHP reads the clock twice, a tick apart at worst)
    start = convert_time(q["start"], zone, now)
    end = convert_time(q["end"], zone, now)
    if end <= start:
        return {"success": False, "message": "Request end time before start time"}
    if is_numeric(interval) and float(interval) < 1:
        interval = php_round((end - start) / 800)
    elif is_numeric(interval):
        interval = float(interval)
    if php_truthy(delta):
        if interval == "original" or (timeformat == "notime" and isinstance(interval, str)):
            raise BadRequest("delta needs a number of seconds as the interval here (with "
                             "interval=original, or daily... with notime, emoncms fails)")
        end = _delta_end(end, interval, zone)
    if not isinstance(interval, str):
        if interval < 1:
            return {"success": False, "message": "Invalid interval"}
        req_dp = php_round((end - start) / interval)
        if req_dp > MAX_DATAPOINTS:
            return {"success": False, "message":
                    "request datapoint limit reached (%d), increase request interval or reduce "
                    "time range, requested datapoints = %d" % (MAX_DATAPOINTS, req_dp)}
    if timeformat not in TIMEFORMATS:
        return {"success": False, "message": "Invalid time format"}
    data = get_data_combined(meta, start, end, interval, php_truthy(q.get("average")), zone,
                             timeformat, q.get("skipmissing", "0"), q.get("limitinterval", "0"))
    if not isinstance(data, list):
        return data
    notime = timeformat == "notime"
    if php_truthy(delta):
        data = _delta(data, lastvalue(meta), notime, start, interval)
    if not is_numeric(dp) or float(dp) != -1:  # PHP: $dp != -1
        places = php_int(dp)
        for i, row in enumerate(data):
            if notime and row is not None:
                data[i] = php_round_dp(row, places)
            elif not notime and row[1] is not None:
                row[1] = php_round_dp(row[1], places)
    return _format_times(data, timeformat, zone)
