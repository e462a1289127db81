"""base.py - what every engine of the storage interface shares (store/__init__.py states the
interface): the calls that need nothing but the engine's own few. An engine gives

    entries(quarantined=False)   its feeds' entries         lookup(name)   one of them
    feed(entry)                  the feed's grid (start, interval, npoints(), end(), time(k),
                                 slot(t), first_at(t), read(first, stop), last_value())
    pending(node, channel)       readings taken in, not committed yet (or None)
    summaries, stale(fid)        what query.Engine reads for buckets (rollup.Summaries' shape:
                                 upto(feed), read(fid, level, e0, e1)) and the lowest slot of a
                                 feed rewritten since its summaries were made (or None)
    nodes(), status()            plain data
and this gives read(), feeds(), plug_order(), series() and plug() over them, the same on every
engine.
"""

import numpy as np

from wattlog.store.phpfina import FeedError
from wattlog.store.query import Engine


class StoreError(Exception):
    """The store cannot be read as asked; the message says why and what to do."""


def node_row(node, d, last_batch=None):
    """A node's state as the interface gives it, from commit.json's shape (commitfile.py)."""
    return {"node": node, "boot": d.get("boot"), "boots": d.get("boots", 1 if d else 0),
            "acked_seq": d.get("seq"), "gaps": d.get("gaps", 0), "lost": d.get("lost", 0),
            "ring_drops": d.get("dropped", 0), "last_seen": d.get("last_seen"),
            "last_batch": last_batch}


class Interface:
    def pending(self, node, channel):
        """(unix times, values) of readings not committed yet: none for a Reader of its own."""
        return None

    def read(self, entry, feed, first, stop):
        """float32 values of slots [first, stop), NaN where there is none, the pending
        readings laid over what is stored (the last one of a slot wins)."""
        values = feed.read(first, stop)
        pend = self.pending(entry["node"], entry["channel"])
        if pend is not None and len(pend[0]):
            slots = (np.asarray(pend[0], dtype=np.int64) - feed.start) // feed.interval
            inside = (slots >= max(first, 0)) & (slots < stop)
            values[slots[inside] - max(first, 0)] = np.asarray(pend[1], dtype=np.float64)[inside]
        return values

    def feeds(self):
        """Each active feed with what it holds: start, end (just past its last slot, pending
        readings included), points and committed_until (on disk), last_time and last_value
        (the newest reading, pending or not); "error" instead for one that cannot be read."""
        out = []
        for entry in self.entries():
            row = dict(entry)
            try:
                feed = self.feed(entry)
                n = feed.npoints()
                last = feed.last_value()
            except (OSError, FeedError) as e:
                pend = self.pending(entry["node"], entry["channel"])
                if not (pend and isinstance(e, FeedError) and e.reason == "missing"):
                    row["error"] = str(e)
                    out.append(row)
                    continue
                # a feed being made: the commit that adds it to the registry writes its files
                # next; meanwhile it is its pending readings (files.Store, not yet on disk)
                iv = entry["interval"]
                start = int(min(pend[0])) // iv * iv
                row.update(start=start, end=start, points=0, committed_until=start,
                           last_time=None, last_value=None)
                _newest_pending(row, pend, iv)
                out.append(row)
                continue
            row.update(start=feed.start, end=feed.end(), points=n, committed_until=feed.end(),
                       last_time=None if last is None else feed.time(last[0]),
                       last_value=None if last is None else last[1])
            pend = self.pending(entry["node"], entry["channel"])
            if pend is not None:
                _newest_pending(row, pend, feed.interval)
            out.append(row)
        return out

    def plug_order(self):
        """Every plug with stored data, in the order its data was first stored (its feeds'
        smallest id: the registry's order, which never changes)."""
        out = []
        for entry in sorted(self.entries(), key=lambda e: e["id"]):
            if entry["node"] not in out:
                out.append(entry["node"])
        return out

    def series(self, entry, feed, start, end, points):
        """query.Engine's answer over [start, end), cut to where the data ends (pending
        readings included: no buckets of nothing past it, no memory spent on them), with the
        bucket length of the range asked for; numbers (None: no data), unformatted."""
        iv = feed.interval
        pend = self.pending(entry["node"], entry["channel"])
        data_end = feed.end()
        if pend is not None and len(pend[0]):
            data_end = max(data_end, int(max(pend[0])) + iv)
        upto = min(end, data_end)
        if upto <= max(start, feed.start):
            out = {"feed": feed.id, "interval": iv, "committed_until": feed.end(),
                   "bucket_s": iv, "time": [], "mean": [], "min": [], "max": [], "count": []}
        else:
            slots = -(-(end - max(start, feed.start)) // iv)
            bucket = max(-(-slots // points), 1)
            have = -(-(upto - max(start, feed.start)) // iv)
            engine = Engine(self.summaries, self.stale, lambda node, channel: pend)
            out = engine.series(feed, entry, start, upto, max(1, min(points, -(-have // bucket))))
        out.update(node=entry["node"], channel=entry["channel"], unit=entry["unit"],
                   start=start, end=end, raw=out["bucket_s"] == iv)
        return out

    def plug(self, node):
        """nodes()[node], or None for a plug the store has not heard of."""
        return self.nodes().get(node)


def _newest_pending(row, pend, interval_s):
    """A feeds() row's last reading and end moved on to its newest pending one, if newer."""
    good = [(t, v) for t, v in zip(*pend) if v == v]
    if good:
        t, v = max(good)
        if row["last_time"] is None or t >= row["last_time"]:
            row.update(last_time=int(t), last_value=float(v))
        row["end"] = max(row["end"], int(t) + interval_s)
