"""emoncms.py - emoncms's feed API over wattlog's data directory, so that emoncms apps and
scripts read wattlog unchanged: feed/list.json, get.json, aget.json, getmeta.json,
timevalue.json, value.json, fetch.json, data.json and average.json, under a prefix
(add_routes(app, data_dir, prefix="/emoncms")). Read only.

Feeds as emoncms shows them: id = wattlog's feed id, tag = the node, name = the channel, engine
5 (PHPFina), public, user 1; fields are strings as emoncms's Redis cache gives them, time and
value the feed's last slot (emoncms's PHPFina lastvalue()).

feed/data.json answers what emoncms's Modules/feed/feed_model.php get_data() and
Modules/feed/engine/PHPFina.php get_data_combined() answer for the same files, reimplemented
here from reading them:
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

Nothing from a request reaches the file system unchecked: an id is parsed as an int and must
be an active feed in feeds.json before a path is made from it.
"""

import asyncio
import decimal
import json
import math
import re
import time

import numpy as np
from aiohttp import web

from wattlog.serve import phpdate
from wattlog.store.phpfina import FeedError

MAX_DATAPOINTS = 20000  # emoncms default-settings.ini
# emoncms counts points only for a numeric interval, and from a rounded interval; beyond this
# many (interval=original over years, daily over centuries) wattlog refuses rather than loop
_MAX_POINTS = 4 * MAX_DATAPOINTS
CALENDAR = ("daily", "weekly", "monthly", "annual")
_PERIOD = dict(zip(CALENDAR, ("day", "week", "month", "year")))
TIMEFORMATS = ("unix", "unixms", "excel", "iso8601", "notime")
_NUMERIC = re.compile(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*\Z")
_LEADING = re.compile(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


class BadRequest(Exception):
    """A request emoncms has no answer of its own for: HTTP 400, one sentence."""


# -- PHP's ways with numbers --------------------------------------------------------------------

def php_float_text(x):
    """A float as PHP's json_encode writes it (serialize_precision -1): the shortest digits
    that read back, no ".0" on whole numbers, exponent form below 1e-4 and from 1e17."""
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    sign = "-" if x < 0 else ""
    t = decimal.Decimal(repr(abs(x))).as_tuple()
    digits = "".join(map(str, t.digits))
    decpt = len(digits) + t.exponent           # value = 0.<digits> * 10**decpt
    digits = digits.rstrip("0") or "0"
    if decpt < -3 or decpt > 17:
        exp = decpt - 1
        return "%s%s.%se%s%d" % (sign, digits[0], digits[1:] or "0", "-" if exp < 0 else "+",
                                 abs(exp))
    if decpt <= 0:
        return "%s0.%s%s" % (sign, "0" * -decpt, digits)
    if len(digits) <= decpt:
        return sign + digits + "0" * (decpt - len(digits))
    return "%s%s.%s" % (sign, digits[:decpt], digits[decpt:])


def php_json(obj):
    """json_encode($obj) with PHP's default flags (floats as above, "/" escaped)."""
    if obj is None:
        return "null"
    if obj is True:
        return "true"
    if obj is False:
        return "false"
    if isinstance(obj, int):
        return str(obj)
    if isinstance(obj, float):
        return php_float_text(obj) if math.isfinite(obj) else "null"
    if isinstance(obj, str):
        return json.dumps(obj).replace("/", "\\/")
    if isinstance(obj, dict):
        return "{%s}" % ",".join("%s:%s" % (php_json(str(k)), php_json(v)) for k, v in obj.items())
    return "[%s]" % ",".join(php_json(v) for v in obj)


def php_round(x):
    """PHP's round(): half away from zero."""
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def php_round_dp(x, places):
    """PHP 8.2's round($x, $places): pre-rounded to 15 significant digits, then half away
    from zero at `places`."""
    if x == 0 or not math.isfinite(x):
        return x
    magnitude = math.floor(math.log10(abs(x)))
    precise = 14 - magnitude
    d = decimal.Decimal(repr(x))
    if not (precise > places and precise - 15 < places):
        if abs(x * 10.0 ** places) >= 1e15:
            return x
    else:
        d = d.quantize(decimal.Decimal(1).scaleb(-precise), rounding=decimal.ROUND_HALF_UP)
    return float(d.quantize(decimal.Decimal(1).scaleb(-places), rounding=decimal.ROUND_HALF_UP))


def is_numeric(text):
    return isinstance(text, str) and bool(_NUMERIC.match(text))


def php_int(text):
    """(int)$text: the leading number, cut toward zero; 0 if there is none."""
    m = _LEADING.match(text or "")
    if not m:
        return 0
    value = float(m.group(0))
    return int(value) if math.isfinite(value) and abs(value) < 2 ** 63 else 0


def php_truthy(text):
    return text not in (None, "", "0")


# -- the engine ------------------------------------------------------------------------------

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


# -- feed_model.php get_data() -------------------------------------------------------------------

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


# -- HTTP ------------------------------------------------------------------------------------

class Source:
    """The store's feeds as emoncms feeds: the store's entries read for each request (the
    collector may add feeds), and a feed's grid opened only for an id it lists."""

    def __init__(self, store):
        self.store = store

    def entries(self):
        return {e["id"]: e for e in self.store.entries()}

    def meta(self, feed_id):
        """Meta of an active feed, None if there is none or it cannot be read."""
        entry = self.store.lookup(str(feed_id))
        if entry is None or entry.get("quarantined"):
            return None
        try:
            return Meta(self.store.feed(entry))
        except (FeedError, OSError):
            return None

    def row(self, entry, with_meta=False):
        meta = self.meta(entry["id"])
        size = 16 + 4 * meta.npoints if meta else 0  # the .meta and the float32 .dat
        last = lastvalue(meta) if meta else {"time": None, "value": None}
        row = {"id": str(entry["id"]), "userid": "1", "name": entry["channel"],
               "tag": entry["node"], "public": "1", "size": str(size), "engine": "5",
               "processList": "", "unit": entry["unit"], "time": last["time"],
               "value": last["value"]}
        if with_meta and meta and not meta.empty():
            row.update(start_time=meta.start_time, end_time=meta.end_time,
                       interval=meta.interval, npoints=meta.npoints)
        return row


def _feed_id(text):
    """emoncms's (int) of an id; ids are positive."""
    return php_int(text)


def _query(request):
    """The request's parameters, the last of repeated ones winning (as PHP's $_GET)."""
    q = {}
    for key, value in request.query.items():
        q[key] = value
    return q


def _reply(obj, status=200):
    return web.Response(text=php_json(obj), status=status, content_type="application/json")


def add_routes(app, store, prefix="/emoncms", timezone="UTC"):
    """Register emoncms's read-only feed API over the store's feeds (its interface: store/)
    under `prefix`; `timezone` stands in for the emoncms user's zone (the default of the
    timezone parameter)."""
    source = Source(store)
    no_feed = {"success": False, "message": "Feed does not exist"}

    async def handle(request):
        """Files are read in a worker thread: a long average never holds up the event loop."""
        action = request.match_info["action"]
        q = _query(request)
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(None, _answer, action, q)
        except (BadRequest, phpdate.PhpDateError) as e:
            return _reply({"success": False, "message": str(e)}, status=400)

    def _answer(action, q):
        entries = source.entries()
        if action in ("list", "listwithmeta"):
            meta = action == "listwithmeta" or php_int(q.get("meta", "0")) != 0
            return _reply([source.row(e, meta) for _, e in sorted(entries.items())])
        if action == "fetch":
            out = []
            for text in (q.get("ids") or "").split(","):
                fid = _feed_id(text)
                out.append(source.row(entries[fid])["value"] if fid in entries else False)
            return _reply(out)
        if action in ("data", "average"):
            return _data(action, q, entries)
        fid = _feed_id(q.get("id"))
        if fid not in entries:
            return _reply(no_feed)
        entry = entries[fid]
        if action == "get":
            field = re.sub(r"[^\w\s\-]", "", q.get("field") or "", flags=re.ASCII)
            if not q.get("field"):
                return _reply({"success": False, "message": "Missing field parameter"})
            return _reply(source.row(entry).get(field, False))
        if action == "aget":
            return _reply(source.row(entry))
        meta = source.meta(fid)
        if action == "timevalue":
            return _reply(lastvalue(meta) if meta else {"time": None, "value": None})
        if action == "getmeta":
            if meta is None or meta.empty():
                return _reply(False)
            return _reply({"id": fid, "interval": meta.interval, "start_time": meta.start_time,
                           "npoints": meta.npoints, "end_time": meta.end_time})
        if action == "value":
            t = q.get("time")
            if not php_truthy(t):
                return _reply(lastvalue(meta)["value"] if meta else None)
            if not is_numeric(t):
                raise BadRequest("time %r is not unix seconds" % t)
            if meta is None or not meta.npoints:
                return _reply(False)
            pos = php_round((php_int(t) - meta.start_time) / meta.interval)
            if 0 <= pos < meta.npoints:
                v = float(meta.feed.read(pos, pos + 1)[0])
                return _reply(None if math.isnan(v) else v)
            return _reply(None)
        raise web.HTTPNotFound(text=php_json({"success": False, "message":
                                              "feed/%s.json is not offered here" % action}),
                               content_type="application/json")

    def _data(action, q, entries):
        for key in ("start", "end"):
            if key not in q:
                return web.Response(text="missing %s parameter" % key, content_type="text/plain")
        if "id" in q:
            ids, singular = q["id"].split(","), True
        elif "ids" in q:
            ids, singular = q["ids"].split(","), False
        else:
            return _reply({"success": False, "message": "no ids given"})
        averages = q["average"].split(",") if "average" in q else []
        deltas = q["delta"].split(",") if "delta" in q else []
        average = "1" if action == "average" else "0"
        missing, results = [], []
        for index, text in enumerate(ids):
            fid = _feed_id(text)
            if fid not in entries:
                missing.append(fid)
                continue
            if index < len(averages) and php_truthy(averages[index]):
                average = averages[index]
            delta = deltas[index] if index < len(deltas) else (deltas[0] if deltas else "0")
            meta = source.meta(fid)
            one = dict(q, average=average, delta=delta)
            results.append({"feedid": text, "data": get_data(meta, one, timezone)
                            if meta else False})
        if missing:
            if len(missing) == 1:
                return _reply({"success": False, "message": "feed %d does not exist" % missing[0],
                               "feeds": missing})
            return _reply({"success": False, "message": "%d feeds do not exist" % len(missing),
                           "feeds": missing})
        if singular and len(results) == 1:
            return _reply(results[0]["data"])
        return _reply(results)

    app.router.add_get(prefix.rstrip("/") + "/feed/{action:[a-z]+}.json", handle)
