"""commit.py - the commit protocol: pending points become durable feed data, in one order.
(About 350 lines: the protocol and the start-up recovery that undoes a half-done one are one
contract, and are read together.)

  1. feeds the commit needs that do not exist yet: their entries into feeds.json (one atomic
     replace per commit, however many), then their files (one directory fsync for all)
  2. for every dirty feed: its pending slots written (phpfina.Feed.update), fdatasync (up to
     SYNC_THREADS at once: the file system folds them into fewer journal commits)
  3. replace <data>/commit.json atomically (durable.py): the committed length of every feed
  4. only then may anything be acknowledged (the caller publishes acks after commit() returns)

commit.json's bytes and what may be believed of it: commitfile.py.

A commit that fails (disk full, I/O error) raises OSError and leaves every bit of in-memory
state as it was before it: registry entries it added, feeds it made (their files are removed
again), lengths, node state. Ids it handed out are not handed out again.

Start-up, in two steps, so that nothing is touched before everything has been checked:
- Committer(): takes the data directory's lock (datalock.py), reads and checks feeds.json,
  commit.json and every feed's header, refuses a directory holding feed files that are not
  wattlog's. It changes no file (a start-up that fails leaves every file as it found it).
- recover(acks): with the retained acks the broker holds (what the plugs were told), decides
  whether commit.json can be believed. It is believed when it is well-formed and no retained
  ack is newer than it; then whatever lies past a feed's committed length was never
  acknowledged and is cut (the plugs send it again). A damaged commit.json, or one older than
  the acks (restored from a backup, rolled back), is not obeyed: every feed is kept as it is
  on disk, the file is kept beside as commit.json.<why>-<time>, and the collector says so as
  an error. A feed whose files are unreadable is moved to <data>/quarantine/ and marked so in
  the registry, with an error that names the file; new readings for that node and channel go
  to a new feed. A feed that was made but never committed and whose files are gone is simply
  made again. Nothing is dropped silently.
A new feed has slot 0 at its earliest pending point; later points before a feed's slot 0
cannot be stored and are counted.
"""

import concurrent.futures
import logging
import os
import time

import numpy as np

from wattlog.store import datalock, durable
from wattlog.store.commitfile import FILE, check_state, count, newer_acks, when
from wattlog.store.feeds import Registry
from wattlog.store.durable import fsync_dir
from wattlog.store.ingest import RING_RECORDS_MAX
from wattlog.store.phpfina import VALUE_SIZE, CorruptFeed, Feed
from wattlog.store.rollup import Summaries

log = logging.getLogger("wattlog")
SYNC_THREADS = 8


class StartError(Exception):
    """The data directory cannot be used as it is; the message says what to do."""


def _arrays(points):
    """(slot times, values) arrays from a commit's input: those arrays already (ingest.feeds())
    or {unix time: value} (tools and tests)."""
    if isinstance(points, dict):
        return (np.fromiter(points.keys(), dtype=np.int64, count=len(points)),
                np.fromiter(points.values(), dtype=np.float64, count=len(points)))
    times, values = points
    return np.asarray(times, dtype=np.int64), np.asarray(values, dtype=np.float64)


class Committer:
    def __init__(self, data_dir, complaints, clock=time.time, recover=True):
        """Lock and check the data directory (StartError, or RegistryError from feeds.py, says
        what is wrong; no file is changed). With recover=True (tools, tests) recover() runs at
        once without retained acks; the collector passes False and calls it when it has them."""
        self.data_dir = data_dir
        self.feed_dir = os.path.join(data_dir, "phpfina")
        self.path = os.path.join(data_dir, FILE)
        self.complain = complaints
        self.clock = clock
        os.makedirs(self.feed_dir, exist_ok=True)
        try:
            self._lock = datalock.lock(data_dir)
        except datalock.Locked as e:
            raise StartError(str(e)) from None
        try:
            self._survey()
        except BaseException:
            os.close(self._lock)
            raise
        self._syncers = concurrent.futures.ThreadPoolExecutor(SYNC_THREADS, "fdatasync")
        self.summaries = Summaries(data_dir)
        self.stale = {}       # id -> lowest slot rewritten below its summaries since a flush
        self.feeds = {}       # id -> open Feed
        self.committed = {}   # id -> committed npoints
        self.nodes = {}
        self.commits = 0
        self.commit_s = 0.0   # the time those commits took (metrics.py)
        self.recovered = False
        if recover:
            self.recover({})

    # -- start-up ----------------------------------------------------------------------------

    def _survey(self):
        """Read and check everything; change nothing."""
        self.registry = Registry(self.data_dir)
        foreign = self.registry.foreign_files()
        if foreign:
            raise StartError(
                "%s holds feed files wattlog did not make (%s%s): it looks like another "
                "program's data (emoncms keeps its feeds in a phpfina/ folder too). Give "
                "wattlog a directory of its own with --data, or move those files away"
                % (self.feed_dir, ", ".join(foreign[:4]), ", ..." if len(foreign) > 4 else ""))
        self.problem = None
        try:
            self.state = durable.read_json(self.path)
        except ValueError as e:
            self.state, self.problem = None, "it is not JSON (%s)" % e
        if self.state is not None:
            self.problem = check_state(self.state)
            if self.problem:
                self.state = None
        lengths = (self.state or {}).get("feeds", {})
        self._opened, self._unborn, self._broken = {}, [], []
        for entry in self.registry.active():
            fid = entry["id"]
            try:
                self._opened[fid] = Feed.open(self.feed_dir, fid)
            except CorruptFeed as e:
                dat = os.path.join(self.feed_dir, "%d.dat" % fid)
                size = os.path.getsize(dat) if os.path.exists(dat) else 0
                if size == 0 and lengths.get(str(fid), 0) == 0:
                    self._unborn.append(fid)  # made, never committed: made again when needed
                else:
                    self._broken.append((entry, str(e)))

    def recover(self, acks):
        """Make the files agree with what was acknowledged. acks: {node: {"boot", "seq",
        "commit"?}} retained on the broker ({} when there are none or no broker is asked)."""
        state, why = self.state, None
        if self.problem:
            why = "damaged"
            log.error("%s is damaged (%s): not obeying it; every feed is kept as it is on disk "
                      "and nothing is cut", self.path, self.problem)
        elif state is not None:
            newer = newer_acks(state, acks)
            if newer:
                why = "stale"
                log.error("%s (commit %d of %s) is older than what the plugs were told: %s. It "
                          "was restored from a backup or rolled back; not obeying it: every feed "
                          "is kept as it is on disk and nothing is cut", self.path,
                          state.get("commit", 0), when(state.get("time", 0)), "; ".join(newer))
        elif self._opened:
            why = "missing"
            log.error("%s is missing: every feed is kept as it is on disk and nothing is cut",
                      self.path)
        trusted = why is None and state is not None
        lengths = state["feeds"] if trusted else {}
        for entry, reason in self._broken:
            self._quarantine(entry, reason)
        for fid, feed in self._opened.items():
            entry = self.registry.lookup(str(fid))
            have = feed.npoints()
            want = lengths.get(str(fid), 0) if trusted else have
            if have > want:
                log.info("feed %d (%s/%s): cutting %d uncommitted slots past the last commit",
                         fid, entry["node"], entry["channel"], have - want)
            elif have < want:
                log.error("feed %d (%s/%s): %s holds %d slots but %d were committed; it was cut "
                          "short outside wattlog", fid, entry["node"], entry["channel"],
                          feed.dat_path, have, want)
                want = have
            if os.path.getsize(feed.dat_path) != want * VALUE_SIZE:
                feed.truncate(want)  # also drops a torn 1-3 byte tail: never a whole value
                self.summaries.cut(fid, want)
            self.feeds[fid] = feed
            self.committed[fid] = want
        # what the summaries may not vouch for (rollup.py): what commit.json says was
        # rewritten; after a stop that was not clean also what a commit may have rewritten
        # without reaching commit.json (a plug's resends reach back at most a ring)
        if trusted:
            self.stale = {int(k): v for k, v in state.get("stale", {}).items()}
        if not trusted or not state.get("clean"):
            for fid in self.feeds:
                back = max(self.committed[fid] - 2 * RING_RECORDS_MAX, 0)
                self.stale[fid] = min(self.stale.get(fid, back), back) if trusted else 0
        self.nodes = dict(state["nodes"]) if state is not None and why != "damaged" else {}
        self.generation = max([(state or {}).get("commit", 0)] +
                              [a["commit"] for a in acks.values() if count(a.get("commit"))])
        for node, ack in acks.items():  # what the plugs were told is what they freed
            mine = self.nodes.get(node)
            if mine is None or mine["boot"] != ack["boot"] or mine["seq"] < ack["seq"]:
                self.nodes[node] = dict(mine or {}, boot=ack["boot"], seq=ack["seq"])
        healed = self.registry.heal_sidecars()
        if healed:
            log.info("wrote the missing sidecar files of %d feeds (phpfina/<id>.json)", healed)
        if why and os.path.exists(self.path):
            kept = "%s.%s-%s" % (self.path, why, time.strftime("%Y%m%dT%H%M%S",
                                                             time.gmtime(self.clock())))
            os.replace(self.path, kept)
            log.error("kept the old file as %s; a new one records the feeds as they are", kept)
        if why:
            self._save()
        self.recovered = True
        self.state = self._opened = None

    def _quarantine(self, entry, reason):
        qdir = os.path.join(self.data_dir, "quarantine")
        os.makedirs(qdir, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self.clock()))
        for ext in ("meta", "dat", "json"):
            src = os.path.join(self.feed_dir, "%d.%s" % (entry["id"], ext))
            if os.path.exists(src):
                os.replace(src, os.path.join(qdir, "%d.%s.%s" % (entry["id"], stamp, ext)))
        log.error("feed %d (%s/%s) quarantined in %s: %s; new readings go to a new feed",
                  entry["id"], entry["node"], entry["channel"], qdir, reason)
        self.registry.quarantine(entry, reason)

    # -- the commit --------------------------------------------------------------------------

    def _feed_for(self, entry, first_t, made):
        """The open feed of a registry entry, made now if it has no files yet (appended to
        `made`), or made again with an earlier slot 0 while nothing of it is committed."""
        fid = entry["id"]
        feed = self.feeds.get(fid)
        if feed is not None and (self.committed[fid] or first_t >= feed.start):
            return feed
        if feed is not None:
            feed.close()  # still empty: move slot 0 back rather than refuse the points
        # an entry the registry lists (now or from an earlier commit that failed) owns its id:
        # files of that id are its own and may be replaced; any other id was checked free
        feed = Feed.create(self.feed_dir, fid, entry["interval"], first_t, replace=True,
                           sync_dir=False)
        made.append(feed)
        self.feeds[fid] = feed
        self.committed[fid] = 0
        log.info("new feed %d: %s/%s every %d s from %s", fid, entry["node"],
                     entry["channel"], entry["interval"], when(feed.start))
        return feed

    def commit(self, pending, intervals, nodes=None):
        """Write {(node, channel): (unix times, values)} (ingest.feeds(); or {unix time: value})
        durably, the last value for a slot winning, with `nodes` (nodes.py) in commit.json;
        returns (feeds, distinct points, bytes). OSError: nothing changed in memory."""
        if not self.recovered:
            raise RuntimeError("commit() before recover()")
        before = (self.registry.state(), dict(self.feeds), dict(self.committed), self.nodes,
                  self.generation)
        made, sidecars = [], []
        try:
            return self._commit(pending, intervals, nodes, made, sidecars)
        except BaseException:
            for feed in made:
                try:
                    feed.remove()
                except OSError:
                    pass  # an empty file under an id never handed out again: harmless
            for path in sidecars:
                try:
                    os.unlink(path)
                except OSError:
                    pass
            registry, self.feeds, self.committed, self.nodes, self.generation = before
            self.registry.restore(registry)
            for feed in made:  # its files are gone: made again by the next commit
                old = self.feeds.pop(feed.id, None)
                if old is not None:
                    old.close()
            raise

    def _commit(self, pending, intervals, nodes, made, sidecars):
        started = time.monotonic()
        plan, added = [], []
        stale = dict(self.stale)
        for (node, channel), values in sorted(pending.items()):
            values = _arrays(values)
            entry = self.registry.find(node, channel)
            if entry is None:
                entry = self.registry.add(node, channel, intervals[node])
                added.append(entry)
            plan.append((entry, values))
        if added:
            self.registry.save()  # once, however many feeds are new
            for entry in added:
                sidecars.append(self.registry.sidecar_path(entry["id"]))
                self.registry.write_sidecar(entry)
        written = []
        points = nbytes = 0
        for entry, (times, values) in plan:
            feed = self._feed_for(entry, int(times.min()), made)
            slots = (times - feed.start) // feed.interval
            early = int(np.count_nonzero(slots < 0))
            if early:
                self.complain("before-start", "dropped %d %s/%s points older than the feed's "
                              "first slot" % (early, entry["node"], entry["channel"]), early)
                slots, values = slots[slots >= 0], values[slots >= 0]
            nbytes += feed.update((slots, values))
            if len(slots) and slots.min() < self.summaries.upto_noted(feed.id):
                stale[feed.id] = min(stale.get(feed.id, feed.npoints()), int(slots.min()))
            points += len(np.unique(slots))
            written.append(feed)
        if made:
            fsync_dir(self.feed_dir)  # the new files' names, once for all of them
        # fdatasync releases the GIL: several at once let the file system fold them into
        # fewer journal commits (200 feeds: a fraction of the time one after another), and
        # list() re-raises the first error, so a failure is the commit's as before
        list(self._syncers.map(Feed.sync, written))
        committed = dict(self.committed)
        for feed in written:
            committed[feed.id] = feed.npoints()
        self.generation += 1
        if nodes is not None:
            self.nodes = nodes
        self._save(committed, stale)
        self.committed, self.stale = committed, stale
        self.commits += 1
        self.commit_s += time.monotonic() - started
        return len(written), points, nbytes

    def _save(self, committed=None, stale=None, clean=False):
        committed = self.committed if committed is None else committed
        stale = self.stale if stale is None else stale
        doc = {"version": 1, "commit": self.generation, "time": int(self.clock()),
               "feeds": {str(fid): n for fid, n in sorted(committed.items())},
               "nodes": self.nodes}
        if stale:
            doc["stale"] = {str(fid): n for fid, n in sorted(stale.items())}
        if clean:
            doc["clean"] = True
        durable.write_json(self.path, doc)

    # -- summaries ---------------------------------------------------------------------------

    def flush_summaries(self, progress=None, whole=False):
        """Bring the summaries up to the committed data (rollup.py); returns bytes written.
        whole=True: every feed's from its first slot (`wattlog rebuild`). What was stale is
        not any more, but commit.json says so only at its next write: until then a restart
        recomputes it again (harmless)."""
        stale = {fid: 0 for fid in self.feeds} if whole else self.stale
        written = self.summaries.flush([self.feeds[fid] for fid in sorted(self.feeds)],
                                       stale, progress)
        self.stale = {}
        return written

    def interval(self, node):
        """A known node's slot length (its power feed's interval), or None."""
        entry = self.registry.find(node, "power")
        return entry["interval"] if entry else None

    def close(self, clean=False):
        """Release everything; clean=True (a clean stop, after the last commit): commit.json
        says so, so the next start need not distrust the summaries' last ring of slots."""
        if clean and self.recovered:
            self._save(clean=True)
        self._syncers.shutdown()
        for feed in self.feeds.values():
            feed.close()
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
