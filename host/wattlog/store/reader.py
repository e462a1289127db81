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

from wattlog.store import durable
from wattlog.store.commitfile import FILE as COMMIT_FILE, check_state
from wattlog.store.feeds import Registry, RegistryError
from wattlog.store.base import Interface, StoreError, node_row
from wattlog.store.phpfina import Feed
from wattlog.store.rollup import Summaries


class Reader(Interface):
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

    def committed(self):
        """(generation, {feed id: committed slots}): commit.json's commit number and lengths,
        as read now (the collector writes the slots first, then commit.json); StoreError."""
        state = self._commit_state(self.data_dir)
        return state.get("commit", 0), {int(k): v for k, v in state["feeds"].items()}

    # -- state -------------------------------------------------------------------------------

    def nodes(self):
        """{node: its state}: boot, boots, acked_seq (this boot's records below it are on
        disk), gaps, lost (readings it made that never arrived), ring_drops, last_seen (its
        last good batch, unix s) and last_batch (the same, heard by this process)."""
        saved = self._commit_state(self.data_dir).get("nodes", {})
        return {node: node_row(node, d) for node, d in sorted(saved.items())}

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
