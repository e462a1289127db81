"""series.py - the HTTP side's reading of data: /api/feeds, /api/series (one feed, or up to
MAX_FEEDS over the same range), /api/series.csv and /api/energy. Each handler checks its
parameters (params.py) and asks the store (its interface: store/__init__.py); the answers are
the store's, formatted here.

A series is buckets (time, mean, min, max, count; null where a bucket has no data) or, when
the range holds no more slots than points, the raw slots ("raw": true; time and value).
Values are the shortest decimals that read back as the stored float32 (short()): a third of
the JSON, written three times as fast. The answer ends where the data does (readings not yet
committed included), with the bucket length of the range asked for, so a range far past the
data costs nothing.
"""

import functools

import numpy as np
import orjson
from aiohttp import web

from wattlog import energy
from wattlog.serve.params import ApiError, feed, param, shown, span, when, whole

MAX_POINTS = 100000   # query.Engine's bound: 100,000 raw slots is 11.5 days at 10 s
MAX_FEEDS = 50        # feeds in one series request
CSV_CHUNK_SLOTS = 50000


def add_routes(router, api):
    for path, handler in (("/api/feeds", feeds), ("/api/series", series),
                          ("/api/series.csv", series_csv), ("/api/energy", energy_table)):
        router.add_get(path, functools.partial(handler, api))


def answer(store, entry, grid, start, end, points):
    """The store's series, formatted for JSON: raw slots as "value" (mean = min = max: said
    once), numbers as their shortest float32 decimals."""
    out = store.series(entry, grid, start, end, points)
    if out["raw"]:
        out["value"] = short(out.pop("mean"))
        del out["min"], out["max"], out["count"]
    else:
        for key in ("mean", "min", "max"):
            out[key] = short(out[key])
    return out


async def feeds(api, request):
    return web.json_response({"feeds": api.store.feeds()})


async def series(api, request):
    names = request.query.getall("feed", [])
    if len(names) > 1:
        return _many(api, request, names)
    entry, grid = feed(request, api.store)
    start, end = span(request, api.tz)
    points = whole(request, "points", 1000, 1, MAX_POINTS)
    return web.json_response(answer(api.store, entry, grid, start, end, points), dumps=dumps)


def _many(api, request, names):
    """{"series": [...]}: each feed's answer over the same range and points, in order."""
    if len(names) > MAX_FEEDS:
        raise ApiError(400, "at most %d feeds in one request, not %d" % (MAX_FEEDS, len(names)))
    found = [feed(request, api.store, name) for name in names]
    start, end = span(request, api.tz)
    # MAX_POINTS in all, as for one feed: a request must not make the answer 50 times bigger
    points = whole(request, "points", 1000, 1, MAX_POINTS // len(names))
    return web.json_response({"series": [answer(api.store, entry, grid, start, end, points)
                                         for entry, grid in found]}, dumps=dumps)


async def series_csv(api, request):
    entry, grid = feed(request, api.store)
    start, end = span(request, api.tz)
    points = whole(request, "points", None, 1, MAX_POINTS)
    name = "%s-%s" % (entry["node"], entry["channel"])
    resp = web.StreamResponse(headers={
        "Content-Type": "text/csv; charset=utf-8",
        "Content-Disposition": 'attachment; filename="%s.csv"' % name})
    await resp.prepare(request)
    unit = "%s_%s" % (entry["channel"], entry["unit"])
    if points is not None:
        out = answer(api.store, entry, grid, start, end, points)
        await resp.write(csv_rows(out, unit, header=True))
    else:  # every raw slot, a chunk at a time: any length, little memory
        await resp.write(("time,%s\n" % unit).encode())
        step = CSV_CHUNK_SLOTS * grid.interval
        for lo in range(grid.time(grid.first_at(start)), end, step):
            out = answer(api.store, entry, grid, lo, min(lo + step, end), CSV_CHUNK_SLOTS)
            if not out["time"]:
                break
            await resp.write(csv_rows(out, unit, header=False))
    await resp.write_eof()
    return resp


async def energy_table(api, request):
    by = param(request, "by", "day")
    if by not in ("day", "week", "month", "year"):
        raise ApiError(400, "by must be day, week, month or year, not %s" % shown(by))
    start = when(request, "start", None, api.tz)
    end = when(request, "end", None, api.tz)
    if start is not None and end is not None and end <= start:
        raise ApiError(400, "start (%d) must come before end (%d)" % (start, end))
    call = functools.partial(energy.energy_table, api.store, by, api.timezone, api.tariff,
                             start=start, end=end)
    table = await api.loop.run_in_executor(None, call)
    table["cells"] = energy.cells(table)  # what every view shows: the page, the CLI, its CSV
    return web.json_response(table)


def short(values):
    """Values (None or NaN: no data) as the shortest decimals that read back as the same
    float32: what the .dat holds, exactly; a bucket's mean to float32's precision. JSON of a
    third of the size, written three times as fast as float64's 17 digits."""
    x = np.array(values, dtype=np.float64).astype(np.float32)
    want = x.astype(np.float64)
    out = want.copy()
    todo = np.isfinite(x) & (x != 0)
    mag = np.floor(np.log10(np.abs(np.where(todo, want, 1.0))))
    for digits in (4, 6, 7, 8, 9):  # 9 significant digits always read back as the float32
        k = np.clip(digits - 1 - mag, 0, 22)
        scale = 10.0 ** k
        near = np.rint(want * scale) / scale  # the double nearest to that decimal
        ok = todo & (near.astype(np.float32) == x)
        out[ok] = near[ok]
        todo &= ~ok
        if not todo.any():
            break
    listed = out.tolist()
    for i in np.flatnonzero(np.isnan(x)).tolist():
        listed[i] = None
    return listed


def dumps(obj):
    """JSON of an answer, by orjson: a day of raw slots (17,280 numbers) is JSON in a tenth of
    json.dumps's 3 ms. NaN never reaches it (values are None where there is no data)."""
    return orjson.dumps(obj).decode()


def csv_rows(out, unit, header):
    """A series answer as CSV lines: time,value for raw slots, else time,mean,min,max,count;
    an empty field where there is no data."""
    def text(v):
        return "" if v is None else repr(v)
    if out["raw"]:
        head = "time,%s\n" % unit
        rows = ("%d,%s\n" % (t, text(v)) for t, v in zip(out["time"], out["value"]))
    else:
        head = "time,mean_{0},min_{0},max_{0},count\n".format(unit)
        rows = ("%d,%s,%s,%s,%d\n" % (t, text(a), text(b), text(c), n) for t, a, b, c, n in
                zip(out["time"], out["mean"], out["min"], out["max"], out["count"]))
    return ((head if header else "") + "".join(rows)).encode()
