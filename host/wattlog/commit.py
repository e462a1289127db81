"""commit.py - the commit protocol: pending points become durable feed data, in one order.

  1. for every dirty feed: one pwrite of its pending slots (phpfina.Feed.update), fdatasync
  2. replace <data>/commit.json atomically (durable.py): the committed length of every feed
  3. only then may anything be acknowledged (the caller publishes acks after commit() returns)

commit.json  {"version": 1, "time": <unix>, "feeds": {"<id>": <npoints>, ...},
              "nodes": {"<node>": {"boot", "seq" (acknowledged), "lost", "gaps", ...}}}
(nodes.py owns the "nodes" entries; they are written in the same atomic replace as the
lengths, so an ack never says more than the files hold.)

At start-up (recover) every .dat is cut back to its committed length: whatever lies past it was
never acknowledged. A feed whose files are unreadable is moved to <data>/quarantine/ and
marked so in the registry, with an error that names the file; new readings for that node and
channel start a new feed. Nothing is dropped silently.
A new feed is created at its first commit, with slot 0 at its earliest pending point; later
points before a feed's slot 0 cannot be stored and are counted.
"""

import logging
import os
import time

from wattlog import durable
from wattlog.feeds import Registry
from wattlog.phpfina import CorruptFeed, Feed

log = logging.getLogger("wattlog")
FILE = "commit.json"


class Committer:
    def __init__(self, data_dir, complaints, clock=time.time):
        self.data_dir = data_dir
        self.feed_dir = os.path.join(data_dir, "phpfina")
        os.makedirs(self.feed_dir, exist_ok=True)
        self.path = os.path.join(data_dir, FILE)
        self.complain = complaints
        self.clock = clock
        self.registry = Registry(data_dir)
        self.feeds = {}       # id -> open Feed
        self.committed = {}   # id -> committed npoints
        self.nodes = {}
        self.commits = 0
        self._recover()

    # -- start-up ----------------------------------------------------------------------------

    def _recover(self):
        try:
            state = durable.read_json(self.path)
        except ValueError as e:
            log.error("%s is unreadable (%s): keeping every feed as it is on disk", self.path, e)
            state = None
        trusted = state is not None
        state = state or {}
        lengths = state.get("feeds", {})
        self.nodes = state.get("nodes", {})
        for entry in self.registry.active():
            fid = entry["id"]
            try:
                feed = Feed.open(self.feed_dir, fid)
            except CorruptFeed as e:
                self._quarantine(entry, str(e))
                continue
            have = feed.npoints()
            want = int(lengths.get(str(fid), 0)) if trusted else have
            if have > want:
                log.info("feed %d (%s/%s): cutting %d uncommitted slots past the last commit",
                         fid, entry["node"], entry["channel"], have - want)
            elif have < want:
                log.error("feed %d (%s/%s): %s holds %d slots but %d were committed; it was cut "
                          "short outside wattlog", fid, entry["node"], entry["channel"],
                          feed.dat_path, have, want)
                want = have
            if os.path.getsize(feed.dat_path) != want * 4:
                feed.truncate(want)  # also drops a torn 1-3 byte tail
            self.feeds[fid] = feed
            self.committed[fid] = want

    def _quarantine(self, entry, reason):
        qdir = os.path.join(self.data_dir, "quarantine")
        os.makedirs(qdir, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self.clock()))
        for ext in ("meta", "dat"):
            src = os.path.join(self.feed_dir, "%d.%s" % (entry["id"], ext))
            if os.path.exists(src):
                os.replace(src, os.path.join(qdir, "%d.%s.%s" % (entry["id"], stamp, ext)))
        log.error("feed %d (%s/%s) quarantined in %s: %s; new readings go to a new feed",
                  entry["id"], entry["node"], entry["channel"], qdir, reason)
        self.registry.quarantine(entry, reason)

    # -- the commit --------------------------------------------------------------------------

    def _feed_for(self, node, channel, interval, first_t):
        entry = self.registry.find(node, channel)
        if entry is None:
            # files first, then the registry: a crash in between leaves files under an id the
            # registry does not know, which the next create() of that id replaces
            feed = Feed.create(self.feed_dir, self.registry.next_id(), interval, first_t)
            self.registry.add(feed.id, node, channel, interval)
            self.feeds[feed.id] = feed
            self.committed[feed.id] = 0
            log.info("new feed %d: %s/%s every %d s from %s", feed.id, node, channel, interval,
                     time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(feed.start)))
            return feed
        feed = self.feeds[entry["id"]]
        if self.committed[feed.id] == 0 and first_t < feed.start:
            feed.close()  # still empty: move slot 0 back rather than refuse the points
            feed = self.feeds[feed.id] = Feed.create(self.feed_dir, feed.id, feed.interval, first_t)
        return feed

    def commit(self, pending, intervals, nodes=None):
        """Write {(node, channel): {unix time: value}} durably, with `nodes` (nodes.py) in
        commit.json; returns (feeds, points, bytes)."""
        written = []
        points = nbytes = 0
        for (node, channel), values in sorted(pending.items()):
            feed = self._feed_for(node, channel, intervals[node], min(values))
            slots = {}
            early = 0
            for t, v in values.items():
                slot = feed.slot(t)
                if slot < 0:
                    early += 1
                else:
                    slots[slot] = v
            if early:
                self.complain("before-start", "dropped %d %s/%s points older than the feed's "
                              "first slot" % (early, node, channel), early)
            nbytes += feed.update(slots)
            points += len(slots)
            written.append(feed)
        for feed in written:
            feed.sync()
        for feed in written:
            self.committed[feed.id] = feed.npoints()
        if nodes is not None:
            self.nodes = nodes
        self._save()
        self.commits += 1
        return len(written), points, nbytes

    def _save(self):
        durable.write_json(self.path, {
            "version": 1, "time": int(self.clock()),
            "feeds": {str(fid): n for fid, n in sorted(self.committed.items())},
            "nodes": self.nodes})

    def close(self):
        for feed in self.feeds.values():
            feed.close()
