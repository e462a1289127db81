"""api.py - the collector's HTTP side: wattlog's JSON API (aiohttp), in a thread of its own.

    GET  /api                      the endpoints
    GET  /api/feeds                every feed: node, channel, unit, interval, first/last time,
                                   last value (readings not yet committed included)
    GET  /api/series?feed=&start=&end=&points=     mean/min/max/count buckets, or raw slots;
                                   feed= more than once (up to MAX_FEEDS): {"series": [an
                                   answer per feed, in order]}, one request for a chart of
                                   many plugs (the dashboard's)
    GET  /api/series.csv?feed=&start=&end=[&points=]   the same as CSV (raw slots without points)
    GET  /api/energy?by=day|week|month|year[&start=&end=]   kWh and cost per plug (energy.py)
    GET  /api/plugs, /api/plugs/<node>     plug health      GET /api/health   collector health
    GET  /api/stream               Server-Sent Events: every plug's state as it publishes it
    GET  /metrics                  Prometheus's text format (metrics.py); reading, like /api
    POST /api/plugs/<node>/relay   {"relay": "ON"|"OFF"|"TOGGLE"}     needs the token
    POST /api/plugs/<node>/cmd     {"cmd": "info"|"interval"|"calibration"|"reboot", ...}  token
    /emoncms/feed/...              emoncms's feed API (emoncms.py)
    /, /web/...                    the dashboard's page and files (web/page.py)

A series is buckets (time, mean, min, max, count; null where a bucket has no data) or, when
the range holds no more slots than points, the raw slots ("raw": true; time and value).
Values are the shortest decimals that read back as the stored float32 (_short): a third of
the JSON, written three times as fast. The answer ends where the data does (readings not yet
committed included), with the bucket length of the range asked for, so a range far past the
data costs nothing.

Threads: the collector's one thread drives MQTT, ingest and commits; this server runs its own
asyncio loop in another (Server.start/stop), so no request can delay a commit or an ack. It
takes no lock the collector holds over file I/O: what it needs of the collector's memory
(pending readings, node counters, the registry) it copies in one step each (single CPython
operations: a list() of a list, a dict lookup), and it reads the feed and summary files
itself, opening its own file objects. What the plugs publish (status, state, firmware
version, log lines) comes from plugwatch.PlugWatch, fed by the collector's MQTT thread.

Security: every action (relay, commands) needs the token, sent as `Authorization: Bearer
<token>` (a header: a page on another site cannot send it, and no CORS header is ever given),
compared with hmac.compare_digest. There is no default token: without a token file actions
are refused with a sentence saying how to make one. Reading is open unless read_open is
False. Actions go through the broker as wattlog-operator (provision.py), so the broker's ACL
still decides. Names from requests (feeds, nodes) are matched against their grammar and
looked up in the registry; only registry ids ever make a path. Every bad parameter is a 4xx
with {"error": "<one sentence>"}; an unexpected failure is a 500, logged, and the server
carries on.
"""

import argparse
import asyncio
import collections
import datetime
import functools
import hmac
import json
import logging
import os
import queue
import re
import secrets
import threading
import time
import zoneinfo

import numpy as np
import orjson
import paho.mqtt.client as mqtt
from aiohttp import web

from wattlog import emoncms, energy, plugwatch
from wattlog.web import page
from wattlog.feeds import NODE_ID, UNITS
from wattlog.metrics import Metrics
from wattlog.mqtt import client_for, parse_broker
from wattlog.phpfina import Feed, FeedError
from wattlog.provision import OPERATOR
from wattlog.query import Engine, QueryError
from wattlog.times import parse_time

log = logging.getLogger("wattlog")
MAX_POINTS = 100000          # query.Engine's bound: 100,000 raw slots is 11.5 days at 10 s
MAX_AHEAD_S = 86400          # an end further ahead than this is a mistake
MAX_PARAM = 64               # characters of any query parameter
MAX_FEEDS = 50               # feeds in one series request
CSV_CHUNK_SLOTS = 50000
ACTION_TIMEOUT_S = 10.0
COMMANDS = ("info", "interval", "calibration", "reboot")
RELAY = ("ON", "OFF", "TOGGLE")
SSE_QUEUE = 1000             # events a slow stream client may lag by before it is dropped
KEEPALIVE_S = 15.0


class ApiError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def _shown(text, limit=40):
    """A request's value as it may be quoted back: short, printable."""
    text = text if len(text) <= limit else text[:limit] + "..."
    return repr(text)


def read_first_line(path, what):
    """The first line of a secret file (a token, a password); ValueError naming the file,
    never its content."""
    try:
        with open(path, "rb") as f:
            text = f.readline().rstrip(b"\r\n").decode()
    except OSError as e:
        raise ValueError("cannot read the %s file %s (%s)" % (what, path, e.strerror)) from None
    except UnicodeDecodeError:
        raise ValueError("the %s file %s is not UTF-8 text" % (what, path)) from None
    if not text.strip():
        raise ValueError("the %s file %s is empty" % (what, path))
    return text.strip()


def _write_bytes():
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class WriteMeter:
    """This process's write_bytes (/proc/self/io: what it sent towards the disk, the data
    directory's commits and summaries nearly all of it) per day in the given zone, from samples
    taken every SAMPLE_S and at each health request; since this start only."""
    SAMPLE_S = 600
    DAYS = 14

    def __init__(self, tz):
        self.tz = tz
        self.started = time.time()
        self.first = self.last = _write_bytes()
        self.days = collections.OrderedDict()

    def sample(self, now=None):
        now = time.time() if now is None else now
        got = _write_bytes()
        if got is None or self.last is None:
            return
        day = datetime.datetime.fromtimestamp(now, self.tz).strftime("%Y-%m-%d")
        self.days[day] = self.days.get(day, 0) + got - self.last
        self.last = got
        while len(self.days) > self.DAYS:
            self.days.popitem(last=False)

    def report(self):
        self.sample()
        if self.first is None:
            return {"written_per_day": None, "note": "/proc/self/io is not readable here"}
        span = max(time.time() - self.started, 1.0)
        return {"written_per_day": dict(self.days), "written_since_start": self.last - self.first,
                "written_per_day_average": round((self.last - self.first) * 86400 / span)}


# -- the application --------------------------------------------------------------------------

class Api:
    """Handlers over a store.Store (the collector's) and a PlugWatch. Knows the collector only
    through them."""

    def __init__(self, store, watch, broker_url=None, ca=None, read_open=True, token=None,
                 operator_password=None, timezone="UTC", tariff=None, base_topic="wattlog"):
        self.store = store
        self.committer = store.committer
        self.data_dir = self.committer.data_dir
        self.feed_dir = self.committer.feed_dir
        self.watch = watch
        self.read_open = read_open
        self._token = token.encode() if token else None
        self.base = base_topic
        self.broker_url, self.ca = broker_url, ca
        self.operator_password = operator_password
        try:
            self.tz = zoneinfo.ZoneInfo(timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError("timezone %r is not a time zone: use a name such as Europe/Berlin "
                             "or UTC" % timezone) from None
        self.timezone = timezone
        self.tariff = energy.Tariff.from_settings(tariff)  # EnergyError: a ValueError
        self.writes = WriteMeter(self.tz)
        self.metrics = Metrics(store, watch, self.writes)  # .sink: set by whoever has one
        self.started = time.time()
        self.loop = None
        self._queues = set()        # one asyncio.Queue per open stream or waiting action
        self._acting = None         # asyncio.Lock: one operator login at a time
        self._sampler = None        # the task that samples write_bytes

    # -- plumbing ----------------------------------------------------------------------------

    def app(self):
        app = web.Application(middlewares=[self._errors], client_max_size=64 * 1024)
        r = app.router
        r.add_get("/api", self.index)
        r.add_get("/api/feeds", self.feeds)
        r.add_get("/api/series", self.series)
        r.add_get("/api/series.csv", self.series_csv)
        r.add_get("/api/energy", self.energy_table)
        r.add_get("/api/plugs", self.plugs)
        r.add_get("/api/plugs/{node}", self.plug)
        r.add_get("/api/health", self.health)
        r.add_get("/api/stream", self.stream)
        r.add_get("/metrics", self.prometheus)
        r.add_post("/api/plugs/{node}/relay", self.relay)
        r.add_post("/api/plugs/{node}/cmd", self.command)
        emoncms.add_routes(app, self.data_dir, timezone=self.timezone)
        page.add_routes(app)
        app.on_startup.append(self._started)
        app.on_shutdown.append(self._closing)
        return app

    async def _started(self, app):
        self.loop = asyncio.get_running_loop()
        self._acting = asyncio.Lock()
        self.watch.listen(self._from_mqtt)
        self._sampler = asyncio.ensure_future(self._sample_writes())

    async def _closing(self, app):
        self.watch.unlisten(self._from_mqtt)
        self._sampler.cancel()
        for q in list(self._queues):
            q.put_nowait(None)  # every open stream ends

    async def _sample_writes(self):
        while True:
            await asyncio.sleep(WriteMeter.SAMPLE_S)
            self.writes.sample()

    def _from_mqtt(self, kind, node, data):
        """Called in the collector's MQTT thread: hand the event to this loop, nothing more."""
        try:
            self.loop.call_soon_threadsafe(self._fan_out, (kind, node, data))
        except RuntimeError:
            pass  # the loop has closed: the server is stopping

    def _fan_out(self, event):
        for q in list(self._queues):
            try:
                q.put_nowait(event)
            except asyncio.QueueFull:
                q.overflowed = True

    def _subscribe(self):
        q = asyncio.Queue(SSE_QUEUE)
        q.overflowed = False
        self._queues.add(q)
        return q

    @web.middleware
    async def _errors(self, request, handler):
        try:
            if not self.read_open and request.method == "GET" and not page.is_page(request):
                self._authorize(request)  # the page's files hold no data: it asks for the token
            return await handler(request)
        except ApiError as e:
            headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else None
            return web.json_response({"error": str(e)}, status=e.status, headers=headers)
        except (QueryError, energy.EnergyError) as e:  # they say it in words
            return web.json_response({"error": str(e)}, status=400)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            what = {404: "there is no such endpoint; GET /api lists them",
                    405: "this endpoint does not take %s" % request.method,
                    413: "the request body is too large"}.get(e.status, e.reason)
            return web.json_response({"error": what}, status=e.status)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except OSError as e:  # a file that went away or cannot be read just now
            return web.json_response({"error": "cannot read %s now (%s)" % (
                os.path.basename(e.filename or "a file"), e.strerror or e)}, status=503)
        except Exception:  # one request failed; the server and the collector carry on
            log.exception("HTTP %s %s failed", request.method, request.path)
            return web.json_response({"error": "the server failed on this request; the "
                                      "collector's log says why"}, status=500)

    def _authorize(self, request):
        if self._token is None:
            raise ApiError(403, "no HTTP token is set, so this is refused: `wattlog provision` "
                           "makes one (http.token); give it to the collector with "
                           "--http-token-file or token_file in the [http] settings")
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise ApiError(401, "this needs the token: send the header "
                           "`Authorization: Bearer <token>`")
        if not hmac.compare_digest(given.strip().encode("utf-8", "replace"), self._token):
            raise ApiError(403, "the token is wrong")

    # -- parameters --------------------------------------------------------------------------

    @staticmethod
    def _param(request, key, default=None, text=None):
        """Parameter `key` (or the given text, one of its values), at most MAX_PARAM long."""
        text = request.query.get(key) if text is None else text
        if text is None or text == "":
            return default
        if len(text) > MAX_PARAM:
            raise ApiError(400, "%s is too long (%d characters; at most %d)"
                           % (key, len(text), MAX_PARAM))
        return text

    def _time(self, request, key, default):
        text = self._param(request, key)
        if text is None:
            return default
        try:
            t = parse_time(text, tz=self.tz)
        except argparse.ArgumentTypeError as e:  # times.py's sentence
            raise ApiError(400, "%s: %s" % (key, e)) from None
        except (ValueError, OverflowError):  # a date past what datetime can hold
            t = None
        if t is None or not 0 <= t < 1 << 32:
            raise ApiError(400, "%s %s is not a time from 1970 to 2106: use unix seconds, "
                           "now-24h or 2026-11-21T08:00" % (key, _shown(text)))
        return t

    @staticmethod
    def _int(request, key, default, lo, hi):
        text = Api._param(request, key)
        if text is None:
            return default
        if not re.fullmatch(r"\d{1,9}", text) or not lo <= int(text) <= hi:
            raise ApiError(400, "%s must be a whole number from %d to %d, not %s"
                           % (key, lo, hi, _shown(text)))
        return int(text)

    def _entry(self, request, given=None):
        """The registry entry of feed= (NODE/CHANNEL or an id; or `given`, one of several
        feed= values) and its Feed, opened here."""
        name = self._param(request, "feed", text=given)
        if name is None:
            raise ApiError(400, "give feed=NODE/CHANNEL (e.g. plug-1/power) or a feed id; "
                           "GET /api/feeds lists them")
        node, slash, channel = name.partition("/")
        if not (re.fullmatch(r"[0-9]{1,9}", name) or (slash and NODE_ID.match(node)
                                                        and channel in UNITS)):
            raise ApiError(400, "feed %s is not NODE/CHANNEL (a node id is 1-32 of a-z, 0-9, "
                           "_ and -; a channel one of %s) nor a feed id"
                           % (_shown(name), ", ".join(UNITS)))
        entry = self.committer.registry.lookup(name)
        if entry is None or entry.get("quarantined"):
            raise ApiError(404, "there is no feed %s%s; GET /api/feeds lists them" % (
                _shown(name), " (it is quarantined)" if entry else ""))
        try:
            return entry, Feed.open(self.feed_dir, entry["id"])
        except FeedError as e:
            raise ApiError(503, "feed %d cannot be read now (%s)" % (entry["id"], e.reason))

    def _node(self, request):
        node = request.match_info["node"]
        if not NODE_ID.match(node):
            raise ApiError(400, "%s is not a node id: 1-32 of a-z, 0-9, _ and -" % _shown(node))
        return node

    def _range(self, request):
        now = int(time.time())
        end = self._time(request, "end", now)
        start = self._time(request, "start", end - 86400)
        if end <= start:
            raise ApiError(400, "start (%d) must come before end (%d)" % (start, end))
        if end > now + MAX_AHEAD_S:
            raise ApiError(400, "end (%d) lies more than a day ahead of now" % end)
        return start, end

    # -- reading -----------------------------------------------------------------------------

    async def index(self, request):
        return web.json_response({"endpoints": [
            "GET /api/feeds", "GET /api/series?feed=&start=&end=&points=",
            "GET /api/series.csv?feed=&start=&end=[&points=]",
            "GET /api/energy?by=day|week|month|year&start=&end=", "GET /api/plugs",
            "GET /api/plugs/<node>", "GET /api/health", "GET /api/stream", "GET /metrics",
            "POST /api/plugs/<node>/relay", "POST /api/plugs/<node>/cmd"],
            "read_open": self.read_open, "actions": self._token is not None})

    def _pending_copy(self, entry):
        return self.store.pending(entry["node"], entry["channel"])

    async def feeds(self, request):
        out = []
        for entry in self.committer.registry.active():
            row = dict(entry)
            try:
                feed = Feed.open(self.feed_dir, entry["id"])
                n = feed.npoints()
                last = feed.last_value()
            except (OSError, FeedError) as e:
                row["error"] = str(e)
                out.append(row)
                continue
            row.update(start=feed.start, end=feed.end(), points=n, committed_until=feed.end(),
                       last_time=None if last is None else feed.time(last[0]),
                       last_value=None if last is None else last[1])
            pend = self._pending_copy(entry)
            if pend is not None:
                good = [(t, v) for t, v in zip(*pend) if v == v]
                if good:
                    t, v = max(good)
                    if row["last_time"] is None or t >= row["last_time"]:
                        row.update(last_time=int(t), last_value=float(v))
                    row["end"] = max(row["end"], int(t) + feed.interval)
            out.append(row)
        return web.json_response({"feeds": out})

    def _series(self, entry, feed, start, end, points, pend):
        """query.Engine's answer, its end cut to the data's (no buckets of nothing past it,
        and no memory spent on them) with the bucket length of the range asked for."""
        iv = feed.interval
        data_end = feed.end()
        if pend is not None and len(pend[0]):
            data_end = max(data_end, int(max(pend[0])) + iv)
        upto = min(end, data_end)
        engine = Engine(self.committer.summaries, lambda fid: self.committer.stale.get(fid),
                        lambda node, channel: pend)
        if upto <= max(start, feed.start):
            out = {"feed": feed.id, "interval": iv, "committed_until": feed.end(),
                   "bucket_s": iv, "time": [], "mean": [], "min": [], "max": [], "count": []}
        else:
            slots = -(-(end - max(start, feed.start)) // iv)
            bucket = max(-(-slots // points), 1)
            have = -(-(upto - max(start, feed.start)) // iv)
            out = engine.series(feed, entry, start, upto, max(1, min(points, -(-have // bucket))))
        out.update(node=entry["node"], channel=entry["channel"], unit=entry["unit"],
                   start=start, end=end, raw=out["bucket_s"] == iv)
        if out["raw"]:  # mean = min = max = the slot's value: said once
            out["value"] = _short(out.pop("mean"))
            del out["min"], out["max"], out["count"]
        else:
            for key in ("mean", "min", "max"):
                out[key] = _short(out[key])
        return out

    async def series(self, request):
        names = request.query.getall("feed", [])
        if len(names) > 1:
            return self._many_series(request, names)
        entry, feed = self._entry(request)
        start, end = self._range(request)
        points = self._int(request, "points", 1000, 1, MAX_POINTS)
        return web.json_response(self._series(entry, feed, start, end, points,
                                              self._pending_copy(entry)), dumps=_dumps)

    def _many_series(self, request, names):
        """{"series": [...]}: each feed's answer over the same range and points, in order."""
        if len(names) > MAX_FEEDS:
            raise ApiError(400, "at most %d feeds in one request, not %d" % (MAX_FEEDS,
                                                                             len(names)))
        entries = [self._entry(request, name) for name in names]
        start, end = self._range(request)
        # MAX_POINTS in all, as for one feed: a request must not make the answer 50 times bigger
        points = self._int(request, "points", 1000, 1, MAX_POINTS // len(names))
        return web.json_response({"series": [
            self._series(entry, feed, start, end, points, self._pending_copy(entry))
            for entry, feed in entries]}, dumps=_dumps)

    async def series_csv(self, request):
        entry, feed = self._entry(request)
        start, end = self._range(request)
        points = self._int(request, "points", None, 1, MAX_POINTS)
        pend = self._pending_copy(entry)
        name = "%s-%s" % (entry["node"], entry["channel"])
        resp = web.StreamResponse(headers={
            "Content-Type": "text/csv; charset=utf-8",
            "Content-Disposition": 'attachment; filename="%s.csv"' % name})
        await resp.prepare(request)
        unit = "%s_%s" % (entry["channel"], entry["unit"])
        if points is not None:
            out = self._series(entry, feed, start, end, points, pend)
            await resp.write(_csv_rows(out, unit, header=True))
        else:  # every raw slot, a chunk at a time: any length, little memory
            await resp.write(("time,%s\n" % unit).encode())
            step = CSV_CHUNK_SLOTS * feed.interval
            first = feed.time(max(feed.slot(start + feed.interval - 1), 0))
            for lo in range(first, end, step):
                out = self._series(entry, feed, lo, min(lo + step, end), CSV_CHUNK_SLOTS, pend)
                if not out["time"]:
                    break
                await resp.write(_csv_rows(out, unit, header=False))
        await resp.write_eof()
        return resp

    async def energy_table(self, request):
        by = self._param(request, "by", "day")
        if by not in ("day", "week", "month", "year"):
            raise ApiError(400, "by must be day, week, month or year, not %s" % _shown(by))
        start = self._time(request, "start", None)
        end = self._time(request, "end", None)
        if start is not None and end is not None and end <= start:
            raise ApiError(400, "start (%d) must come before end (%d)" % (start, end))
        call = functools.partial(energy.energy_table, self.data_dir, by, self.timezone,
                                 self.tariff, start=start, end=end, pending=self.store.pending)
        return web.json_response(await self.loop.run_in_executor(None, call))

    def _plug_health(self, node, seen):
        st = self.store.nodes.state.get(node) if self.store.nodes is not None else None
        out = {"node": node, "online": None, "status": None, "last_seen": None, "boot": None,
               "boots": None, "acked_seq": None, "gaps": None, "lost": None, "ring_drops": None,
               "meter_faults": None, "firmware": None, "update": None, "state": None,
               "broadlink": None, "spill": None}
        if st is not None:
            bs = st.boots_seen.get(st.boot)  # a copy-free read: the collector may switch boots
            out.update(last_seen=st.last_seen, boot="%08x" % st.boot, boots=st.boots,
                       acked_seq=None if bs is None else bs.acked, gaps=st.gaps, lost=st.lost,
                       ring_drops=st.dropped)
        if seen is not None:
            info = seen["info"] or {}
            out.update(broadlink=info.get("broadlink"),  # the SP3S protocol's mode, if asked
                       spill=plugwatch.spill(info),  # what it holds on its flash
                       status=seen["status"], online=seen["status"] == "online",
                       firmware=seen["firmware"], update=seen["update"],
                       state=seen["state"],
                       state_heard=None if seen.get("heard") is None else int(seen["heard"]),
                       meter_faults={"reported": seen["faults"], "last": seen["fault_note"],
                                     "counters": info.get("meter_faults")},
                       log=[{"time": t, "text": text} for t, text in seen["log"]])
        return out

    async def plugs(self, request):
        seen = self.watch.snapshot()
        known = set(seen) | set(list(self.store.nodes.state) if self.store.nodes else ())
        return web.json_response({"plugs": [self._plug_health(n, seen.get(n))
                                            for n in sorted(known)]})

    async def plug(self, request):
        node = self._node(request)
        seen = self.watch.snapshot(node)
        if seen is None and (self.store.nodes is None or node not in self.store.nodes.state):
            raise ApiError(404, "no plug %s has reported here; GET /api/plugs lists them"
                           % _shown(node))
        return web.json_response(self._plug_health(node, seen))

    async def health(self, request):
        ingest = self.store.ingest
        try:
            last_commit = int(os.stat(self.committer.path).st_mtime)
        except OSError:
            last_commit = None
        oldest = ingest.oldest
        states = list(self.store.nodes.state.values()) if self.store.nodes else []
        try:
            fs = os.statvfs(self.data_dir)
            disk = {"disk_free_bytes": fs.f_bavail * fs.f_frsize,
                    "disk_size_bytes": fs.f_blocks * fs.f_frsize}
        except OSError as e:
            disk = {"disk_free_bytes": None, "disk_error": e.strerror}
        out = {"data_dir": self.data_dir, "started": int(self.started),
               "uptime_s": int(time.time() - self.started),
               "ready": self.store.recovered, "last_commit": last_commit,
               "commits": self.committer.commits,
               "pending_points": sum(list(ingest.counts.values())),
               "pending_age_s": None if oldest is None else round(time.monotonic() - oldest, 1),
               "readings": ingest.readings, "lost_readings": sum(s.lost for s in states),
               "refused": dict(self.store.complaints.totals)}
        out.update(disk)
        out.update(self.writes.report())
        return web.json_response(out)

    async def prometheus(self, request):
        body, content_type = self.metrics.exposition(request.headers.get("Accept"))
        return web.Response(body=body, headers={"Content-Type": content_type})

    # -- the live stream ---------------------------------------------------------------------

    async def stream(self, request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        q = self._subscribe()
        try:
            for node, seen in sorted(self.watch.snapshot().items()):
                if seen["state"] is not None:
                    await resp.write(_event("state", dict(seen["state"], node=node,
                                                          online=seen["status"] == "online")))
            while True:
                try:
                    event = await asyncio.wait_for(q.get(), KEEPALIVE_S)
                except asyncio.TimeoutError:
                    await resp.write(b": keep-alive\n\n")
                    continue
                if event is None or q.overflowed:
                    break  # stopping, or a client too slow to keep up: it may reconnect
                kind, node, data = event
                if kind in ("state", "status"):
                    await resp.write(_event(kind, dict(data, node=node)))
        except ConnectionResetError:
            pass
        finally:
            self._queues.discard(q)
        return resp

    # -- actions -----------------------------------------------------------------------------

    async def _body(self, request):
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise ApiError(400, "the body must be a JSON object") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object")
        return body

    def _online(self, node):
        seen = self.watch.snapshot(node)
        if seen is None:
            raise ApiError(404, "no plug %s has reported here" % _shown(node))
        if seen["status"] != "online":
            raise ApiError(409, "%s is offline; it cannot be told anything now" % node)
        return seen

    async def _act(self, node, topic, payload, done):
        """Publish as the operator, then wait for the event done(kind, data) accepts."""
        if self.operator_password is None:
            raise ApiError(503, "this collector has no operator login, so it cannot switch or "
                           "command plugs: give it wattlog-operator's password file "
                           "(--operator-password-file; `wattlog provision` writes it)")
        q = self._subscribe()
        try:
            async with self._acting:
                await self.loop.run_in_executor(None, self._publish, topic, payload)
            deadline = self.loop.time() + ACTION_TIMEOUT_S
            while True:
                try:
                    event = await asyncio.wait_for(q.get(), max(deadline - self.loop.time(), 0))
                except asyncio.TimeoutError:
                    raise ApiError(504, "%s did not answer within %.0f s (if it never does: "
                                   "the collector's broker user must read %s/+/state and "
                                   "log; `wattlog provision` again updates the ACL)"
                                   % (node, ACTION_TIMEOUT_S, self.base))
                if event is None:
                    raise ApiError(503, "the collector is stopping")
                if event[1] == node and done(event[0], event[2]):
                    return event[2]
        finally:
            self._queues.discard(q)

    def _publish(self, topic, payload):
        """One QoS 1 publish as wattlog-operator (MQTT 5: a refusal by the ACL comes back in
        words); runs in a worker thread."""
        host, port = parse_broker(self.broker_url)[:2]
        url = "%s://%s@%s:%d" % ("mqtts" if self.broker_url.startswith("mqtts://") else "mqtt",
                                 OPERATOR, host, port)
        client, host, port = client_for(url, "wattlog-http", self.ca, self.operator_password,
                                        protocol=mqtt.MQTTv5)
        got = queue.Queue()
        client.on_connect = lambda c, u, f, rc, p: got.put(rc)
        client.on_publish = lambda c, u, mid, rc, p: got.put(rc)
        try:
            client.connect(host, port, keepalive=30)
        except OSError as e:
            raise ApiError(502, "cannot reach the broker at %s:%d (%s)" % (host, port, e)) from None
        client.loop_start()
        try:
            for step in ("log in", "publish"):
                try:
                    rc = got.get(timeout=ACTION_TIMEOUT_S)
                except queue.Empty:
                    raise ApiError(504, "the broker did not let %s %s within %.0f s"
                                   % (OPERATOR, step, ACTION_TIMEOUT_S)) from None
                if rc.is_failure:
                    raise ApiError(502 if step == "log in" else 403, "the broker refused to let "
                                   "%s %s on %s (%s)" % (OPERATOR, step, topic, rc))
                if step == "log in":
                    client.publish(topic, payload, qos=1)
        finally:
            client.disconnect()
            client.loop_stop()

    async def relay(self, request):
        self._authorize(request)
        node = self._node(request)
        want = str((await self._body(request)).get("relay", "")).upper()
        if want not in RELAY:
            raise ApiError(400, 'give {"relay": "ON"}, "OFF" or "TOGGLE"')
        before = (self._online(node)["state"] or {}).get("relay")
        expect = want if want != "TOGGLE" else ("OFF" if before == "ON" else "ON")
        state = await self._act(node, "%s/%s/relay/set" % (self.base, node), want,
                                lambda kind, d: kind == "state" and d.get("relay") == expect)
        return web.json_response({"node": node, "relay": expect, "state": state})

    async def command(self, request):
        self._authorize(request)
        node = self._node(request)
        body = await self._body(request)
        if body.get("cmd") not in COMMANDS:
            raise ApiError(400, "cmd must be one of %s" % ", ".join(COMMANDS))
        self._online(node)
        body["id"] = secrets.token_hex(4)
        mark = "(id %s)" % body["id"]
        said = await self._act(node, "%s/%s/cmd" % (self.base, node), json.dumps(body),
                               lambda kind, d: kind == "log" and d["text"].endswith(mark))
        return web.json_response({"node": node, "answer": said["text"][:-len(mark)].rstrip()})


def _short(values):
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


def _dumps(obj):
    """JSON of an answer, by orjson: a day of raw slots (17,280 numbers) is JSON in a tenth of
    json.dumps's 3 ms. NaN never reaches it (values are None where there is no data)."""
    return orjson.dumps(obj).decode()


def _csv_rows(out, unit, header):
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


def _event(kind, data):
    return ("event: %s\ndata: %s\n\n" % (kind, json.dumps(data))).encode()


# -- the thread -------------------------------------------------------------------------------

def parse_listen(text):
    """"HOST:PORT", "[v6]:PORT" or ":PORT" (127.0.0.1) -> (host, port); ValueError in words."""
    host, colon, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("listen %r is not HOST:PORT (e.g. 127.0.0.1:8080)" % text)
    return host, int(port)


class Server:
    """The API on its own thread and event loop. start() returns True once it listens (False
    after saying why it cannot); stop() ends the streams and the thread. on_failure() is called if the thread
    ever dies, so the collector stops loudly rather than serve nothing quietly."""

    def __init__(self, api, listen, on_failure=None):
        self.api = api
        self.host, self.port = parse_listen(listen)
        self.on_failure = on_failure
        self._thread = None
        self._loop = None
        self._ready = threading.Event()
        self._error = None

    def start(self):
        self._thread = threading.Thread(target=self._run, name="wattlog-http", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            self._error = "the HTTP API did not start within 30 s"
        if self._error is not None:
            log.error("%s", self._error)
            return False
        return True

    def _run(self):
        loop = self._loop = asyncio.new_event_loop()
        runner = web.AppRunner(self.api.app(), access_log=None, shutdown_timeout=2.0)
        try:
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, self.host, self.port)
            loop.run_until_complete(site.start())
            self.port = runner.addresses[0][1]
        except OSError as e:
            self._error = "the HTTP API cannot listen on %s:%d (%s)" % (
                self.host, self.port, e.strerror or e)
            self._ready.set()
            loop.run_until_complete(runner.cleanup())
            loop.close()
            return
        log.info("HTTP API on http://%s:%d/api (reading %s, actions %s)", self.host, self.port,
                 "open" if self.api.read_open else "with the token",
                 "with the token" if self.api._token else "refused: no token file")
        self._ready.set()
        try:
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
        except Exception:
            log.exception("the HTTP API failed")
            if self.on_failure:
                self.on_failure()
        finally:
            loop.close()

    def stop(self):
        if self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(15)


def serve(store, watch, listen, broker_url, ca=None, read_open=True, token_file=None,
          operator_password_file=None, timezone="UTC", tariff=None, base_topic="wattlog",
          on_failure=None):
    """The collector's HTTP side, made from its settings: secret files read now (ValueError
    naming a file that cannot be), not started."""
    token = read_first_line(token_file, "HTTP token") if token_file else None
    operator = read_first_line(operator_password_file, "operator password") \
        if operator_password_file else None
    api = Api(store, watch, broker_url, ca, read_open, token, operator, timezone, tariff,
              base_topic)
    return Server(api, listen, on_failure)
