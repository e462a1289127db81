"""emoncms.py - emoncms's feed API over wattlog's data directory, so that emoncms apps and
scripts read wattlog unchanged: feed/list.json, get.json, aget.json, getmeta.json,
timevalue.json, value.json, fetch.json, data.json and average.json, under a prefix
(add_routes(app, store, prefix="/emoncms")), over the storage interface (store/). Read only.

Feeds as emoncms shows them: id = wattlog's feed id, tag = the node, name = the channel, engine
5 (PHPFina), public, user 1; fields are strings as emoncms's Redis cache gives them, time and
value the feed's last slot (emoncms's PHPFina lastvalue()).

feed/data.json and average.json answer what emoncms's own PHP answers for the same data, byte
for byte: emonfeed.py says how, phpnum.py and phpdate.py how PHP writes and reads.

Nothing from a request reaches the store unchecked: an id is parsed as an int and must be an
active feed the store lists before its slots are read.
"""

import asyncio
import math
import re

from aiohttp import web

from wattlog.serve import phpdate
from wattlog.serve.emonfeed import BadRequest, Meta, get_data, lastvalue
from wattlog.serve.phpnum import is_numeric, php_int, php_json, php_round, php_truthy
from wattlog.store.phpfina import FeedError


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
