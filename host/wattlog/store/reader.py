"""reader.py - the storage interface on PHPFina files, read side: a data directory as every
reader sees it (the HTTP side, emoncms's API, energy, metrics, the InfluxDB sink, the CLI).
The interface itself, what it promises and what each call answers, is stated in
store/__init__.py; this is its first engine.

    r = Reader.open("/var/lib/wattlog")    # StoreError in words (a damaged feeds.json ...)
    r.entries(); r.lookup("plug-1/power"); f = r.feed(entry)
    r.read(entry, f, first, stop)          # float32 slots, pending readings laid over
    r.series(entry, f, start, end, points) # buckets or raw slots (query.py)
    r.feeds(); r.plug_order(); r.nodes(); r.plug("plug-1"); r.status()

A Reader of its own (Reader.open) reads what the files hold: nothing is pending, the nodes'
state is commit.json's. The collector's Store (files.py) is a Reader over its live registry,
summaries and pending readings, so what the HTTP side answers includes what is not on disk
yet, and never holds a lock the commit path needs (each read copies what it needs in one
step: a list() of a list, a dict lookup).
"""

import os

import numpy as np

from wattlog.store import durable
from wattlog.store.commitfile import FILE as COMMIT_FILE, check_state
from wattlog.store.feeds import Registry, RegistryError
from wattlog.store.phpfina import Feed, FeedError
from wattlog.store.query import Engine
from wattlog.store.rollup import Summaries


class StoreError(Exception):
    """The store cannot be read as asked; the message says why and what to do."""


def node_row(node, d, last_batch=None):
    """A node's state as the interface gives it, from commit.json's shape (commitfile.py)."""
    return {"node": node, "boot": d.get("boot"), "boots": d.get("boots", 1 if d else 0),
            "acked_seq": d.get("seq"), "gaps": d.get("gaps", 0), "lost": d.get("lost", 0),
            "ring_drops": d.get("dropped", 0), "last_seen": d.get("last_seen"),
            "last_batch": last_batch}


class Reader:
    def __init__(self, data_dir, registry, summaries, stale=lambda fid: None):
        self.data_dir = data_dir
        self.feed_dir = os.path.join(data_dir, "phpfina")
        self._registry = registry
        self.summaries = summaries
        self.stale = stale  # feed id -> the lowest slot rewritten since the summaries' flush

    @classmethod
    def open(cls, data_dir):
        """The data directory as it is on disk; StoreError when it is not one."""
        if not os.path.isdir(data_dir):
            raise StoreError("%s is not a data directory (is the path right? `wattlog collect` "
                             "creates it; --data DIR or the config's data names another)"
                             % data_dir)
        try:
            registry = Registry(data_dir)
        except RegistryError as e:
            raise StoreError(str(e)) from None
        state = cls._commit_state(data_dir)
        stale = {int(k): v for k, v in state.get("stale", {}).items()}
        return cls(data_dir, registry, Summaries(data_dir), stale.get)

    @staticmethod
    def _commit_state(data_dir):
        """commit.json's object ({} before the first commit); StoreError if it is damaged."""
        path = os.path.join(data_dir, COMMIT_FILE)
        try:
            state = durable.read_json(path) or {"version": 1, "feeds": {}}
        except ValueError as e:
            raise StoreError("%s is unreadable: %s" % (path, e)) from None
        problem = check_state(state)
        if problem:
            raise StoreError("%s is damaged (%s); the collector keeps every feed as it is and "
                             "writes a new one at its next start" % (path, problem))
        return state

    # -- feeds -------------------------------------------------------------------------------

    def registry(self):
        return self._registry

    def entries(self, quarantined=False):
        """The feeds' registry entries ({"id", "node", "channel", "unit", "interval"}, and
        "quarantined": why, for one that cannot be read), in id order."""
        entries = list(self.registry().entries)
        return [e for e in entries if quarantined or not e.get("quarantined")]

    def lookup(self, name):
        """The entry of NODE/CHANNEL or a feed id (quarantined ones too), or None."""
        return self.registry().lookup(name)

    def feed(self, entry):
        """The entry's slots as a fixed grid (phpfina.Feed: start, interval, npoints(), end(),
        time(k), slot(t), first_at(t), read(first, stop), last_value()); FeedError."""
        return Feed.open(self.feed_dir, entry["id"])

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
                row["error"] = str(e)
                out.append(row)
                continue
            row.update(start=feed.start, end=feed.end(), points=n, committed_until=feed.end(),
                       last_time=None if last is None else feed.time(last[0]),
                       last_value=None if last is None else last[1])
            pend = self.pending(entry["node"], entry["channel"])
            if pend is not None:
                good = [(t, v) for t, v in zip(*pend) if v == v]
                if good:
                    t, v = max(good)
                    if row["last_time"] is None or t >= row["last_time"]:
                        row.update(last_time=int(t), last_value=float(v))
                    row["end"] = max(row["end"], int(t) + feed.interval)
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

    # -- state -------------------------------------------------------------------------------

    def nodes(self):
        """{node: its state}: boot, boots, acked_seq (this boot's records below it are on
        disk), gaps, lost (readings it made that never arrived), ring_drops, last_seen (its
        last good batch, unix s) and last_batch (the same, heard by this process)."""
        saved = self._commit_state(self.data_dir).get("nodes", {})
        return {node: node_row(node, d) for node, d in sorted(saved.items())}

    def plug(self, node):
        """nodes()[node], or None for a plug the store has not heard of."""
        return self.nodes().get(node)

    def status(self):
        """The store's health: data_dir, last_commit (unix s), disk free and size."""
        try:
            last_commit = int(os.stat(os.path.join(self.data_dir, COMMIT_FILE)).st_mtime)
        except OSError:
            last_commit = None
        out = {"data_dir": self.data_dir, "last_commit": last_commit}
        try:
            fs = os.statvfs(self.data_dir)
            out.update(disk_free_bytes=fs.f_bavail * fs.f_frsize,
                       disk_size_bytes=fs.f_blocks * fs.f_frsize)
        except OSError as e:
            out.update(disk_free_bytes=None, disk_error=e.strerror)
        return out
