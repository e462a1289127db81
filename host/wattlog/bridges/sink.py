"""sink.py - the InfluxDB sink: follows what the collector has committed and writes it to
InfluxDB (influx.py), in its own thread, with its own durable cursor, losing nothing. (About
400 lines: the follower and the backfill share one walk over the committed slots.)

    sink = Sink(store, data_dir, Writer(Target(url), secret), Schema("sp3s"))
    sink.start()        # the collector calls it once its files agree with the acks
    sink.stop()         # at exit: what was not sent yet is sent at the next start
    backfill(reader, writer, schema, since=t, progress=f)   # `wattlog influx backfill`

What it follows: the committed slots of every feed, never the pending points, read through
the storage interface (store/__init__.py: committed(), entries(), feed(entry) and its
read()), so a point reaches InfluxDB only once it is on disk (or in the database) and
acknowledged, the store stays the source of truth, and either engine is followed alike: the
PHPFina files (commit.json's lengths) or PostgreSQL.

The cursor, <data>/influx.json (the collector's own directory, whichever engine it stores
into; a cluster's collectors keep it in the database instead, where the next one to send
finds it: postgres.PgDocument), replaced atomically (durable.py) at the end of every pass and
every CURSOR_EVERY_S while catching up:

    {"version": 1, "targets": {"<Target.key>": {"feeds": {"<feed id>": {
        "next": <first slot not sent yet>, "start": <the grid's slot 0, unix s>,
        "holes": [[first slot, stop slot, values seen in it], ...]}}}}}

Slots count from the grid's start. A PHPFina grid never moves; PostgreSQL's moves back when an
older reading arrives late (postgres.py): the cursor then moves with it, and the slots before
the old start become a hole to look at (a cursor without "start", written before it was kept,
is taken to be on today's grid).

On an SD card that is one small file replaced per commit (every 5 min by default), beside
commit.json. One entry per target and schema: a new InfluxDB, or a new schema, gets
everything from the start of every feed. A point is sent before the cursor passes it, and a
write is idempotent (same series, same time: InfluxDB keeps one point), so a crash between
the write and the cursor's update only writes some points again. `holes` are runs of empty
(NaN) slots already passed: a late reading (a plug asked to send a hole again) can fill one
below the committed length, so each pass that sees a new commit counts the values in each
hole and, when there are more, sends the whole run again. Holes older than the collector
accepts readings (horizon_s: its max_age) can never fill and are forgotten; nearby holes are
merged into one run, at most MAX_HOLES per feed, so the file stays small. A backup of the
data directory holds the cursor with the feeds; feeds found shorter than the cursor (restored
without it) are sent from their end on.

Timing: the sink looks at commit.json every poll_s; a pass sends batches of batch_points
lines until it has caught up. A write that fails (InfluxDB down, slow, never answering,
answering 500 or 401) is retried with back-off (1 s doubling to BACKOFF_MAX_S, from 1 s again
when what is wrong changes); what is wrong is said at once in one sentence, then at most once
a minute (complaints.py). The collector's thread never waits for any of it: committing and
acking go on at their pace. Points InfluxDB refuses outright (400: a field type conflict) are
said and skipped. The first pass, and the first after a failure, say how many points they
sent and how fast ("caught up"). The sink's link (links.py: up after a write that went
through, down since the first that failed, with the latest failure's sentence) is in
/api/health and the dashboard's header.
"""

import logging
import os
import threading
import time

import numpy as np

from wattlog.bridges.influx import WriteFailed
from wattlog.complaints import Complaints
from wattlog.links import Link
from wattlog.store import durable
from wattlog.store.base import StoreError
from wattlog.store.feeds import RegistryError
from wattlog.store.ingest import MAX_AGE_S
from wattlog.store.phpfina import FeedError

log = logging.getLogger("wattlog")
FILE = "influx.json"
BATCH_POINTS = 5000
CURSOR_EVERY_S = 5.0
BACKOFF_MAX_S = 30.0
MAX_HOLES = 64
MERGE_GAP_SLOTS = 64
# backfill gives up at once on these: a person must fix the user, the password or the database
_FOR_A_PERSON = ("influx-http-401", "influx-http-403", "influx-http-404")


def _feeds(store, lengths, schema, unreadable=None):
    """[(feed, series, committed length)] for the committed feeds the schema carries, by id,
    through the storage interface. A feed that cannot be read (being quarantined) raises
    FeedError, or, with unreadable(error), is left out."""
    out = []
    for entry in store.entries():
        n = lengths.get(entry["id"])
        series = n is not None and schema.series(entry["node"], entry["channel"])
        if not series:
            continue
        try:
            out.append((store.feed(entry), series, n))
        except FeedError as e:
            if unreadable is None:
                raise
            unreadable(e)
    return out


def _times(feed, first, stop):
    """Unix times of slots [first, stop)."""
    return feed.time(first) + np.arange(stop - first, dtype=np.int64) * feed.interval


def _nan_runs(values, first):
    """[[lo, hi, 0]] of the runs of non-finite values in a block starting at slot `first`."""
    bad = np.concatenate(([False], ~np.isfinite(values), [False]))
    edges = np.flatnonzero(np.diff(bad.astype(np.int8)))
    return [[first + int(a), first + int(b), 0] for a, b in zip(edges[::2], edges[1::2])]


def tidy(holes, oldest_slot):
    """Holes sorted, those wholly before oldest_slot dropped, nearby ones merged (the values
    between them counted in), at most MAX_HOLES."""
    holes = sorted(h for h in holes if h[1] > oldest_slot)
    out = []
    for h in holes:
        if out and h[0] - out[-1][1] < MERGE_GAP_SLOTS:
            last = out[-1]
            out[-1] = [last[0], h[1], last[2] + h[2] + h[0] - last[1]]
        else:
            out.append(list(h))
    while len(out) > MAX_HOLES:
        i = min(range(len(out) - 1), key=lambda k: out[k + 1][0] - out[k][1])
        a, b = out[i], out.pop(i + 1)
        out[i] = [a[0], b[1], a[2] + b[2] + b[0] - a[1]]
    return out


class CursorFile:
    """The cursor's place on one machine: <data>/influx.json, replaced atomically."""

    def __init__(self, data_dir):
        self.path = os.path.join(data_dir, FILE)

    def __str__(self):
        return self.path

    def read(self):
        """The document, or None; ValueError: it is damaged."""
        return durable.read_json(self.path)

    def write(self, doc):
        durable.write_json(self.path, doc, mode=0o644)


class Sink:
    def __init__(self, store, data_dir, writer, schema, batch_points=BATCH_POINTS, poll_s=1.0,
                 horizon_s=MAX_AGE_S + 3600, clock=time.time, cursor=None):
        """store: what it follows (the storage interface); data_dir: where its cursor lives,
        unless `cursor` is another place for it (read(), write(doc): a cluster's is in its
        database, postgres.PgDocument, so that whichever collector sends goes on from it)."""
        self.store = store
        self.writer = writer
        self.schema = schema
        self.batch_points = batch_points
        self.poll_s = poll_s
        self.horizon_s = horizon_s
        self.clock = clock
        self.place = cursor or CursorFile(data_dir)
        self.key = writer.target.key(schema)
        self.complaints = Complaints()
        self.link = Link(str(writer.target))  # up after a write went through (links.py)
        self.sent = 0       # points written since start
        self.behind = 0     # committed slots not sent yet (the sink's lag, in slots)
        self.cursor = None  # {feed id (str): {"next", "holes"}}, loaded by load()
        self._doc = None
        self._seen = None   # the commit number the last whole pass reached
        self._saved_at = 0.0
        self._dirty = False
        self._failing = False
        self._catching_up = True  # the first pass, and the first after a failure, say how it went
        self._stop = threading.Event()
        self._thread = None

    # -- the cursor ----------------------------------------------------------------------------

    def load(self):
        try:
            doc = self.place.read()
        except ValueError as e:
            log.error("%s is damaged (%s): the InfluxDB sink starts again from the start of "
                      "every feed (points already there are only written again)", self.place, e)
            doc = None
        if not isinstance(doc, dict) or not isinstance(doc.get("targets"), dict):
            doc = {"version": 1, "targets": {}}
        self._doc = doc
        mine = doc["targets"].setdefault(self.key, {"feeds": {}})
        self.cursor = mine["feeds"]
        self._saved_at = time.monotonic()

    def save(self):
        self.place.write(self._doc)
        self._saved_at = time.monotonic()
        self._dirty = False

    # -- a pass ------------------------------------------------------------------------------

    def poll(self):
        """Send what is committed and not sent yet, until caught up (or stopped); the points
        sent. WriteFailed: what was sent before it is in the cursor."""
        if self.cursor is None:
            self.load()
        generation, lengths = self.store.committed()
        if generation == self._seen:
            return 0
        t0, sent0 = time.monotonic(), self.sent
        work = _feeds(self.store, lengths, self.schema, lambda e: self.complaints(
            "influx-feed", "the InfluxDB sink leaves out a feed it cannot read (%s)" % e))
        self.behind = sum(max(n - self.cursor.get(str(f.id), {}).get("next", 0), 0)
                          for f, _, n in work)
        lines, applies = [], []
        for feed, series, n in work:
            for piece_lines, apply in self._pieces(feed, series, n):
                lines += piece_lines
                applies.append(apply)
                if len(lines) >= self.batch_points:
                    self._send(lines, applies)
                    lines, applies = [], []
                    if self._stop.is_set():
                        return self.sent - sent0
        self._send(lines, applies)
        if self._dirty:
            self.save()
        self._seen = generation
        sent = self.sent - sent0
        if sent and self._catching_up:
            self._catching_up = False
            took = time.monotonic() - t0
            log.info("InfluxDB sink caught up: %d points to %s in %.1f s (%.0f points/s)",
                     sent, self.writer.target, took, sent / max(took, 1e-9))
        return sent

    def _pieces(self, feed, series, n):
        """(lines, apply) for one feed: the holes that filled, then the slots past the cursor,
        a batch's worth at a time. apply() moves the cursor once the lines are written."""
        cur = self.cursor.setdefault(str(feed.id), {"next": 0, "holes": []})
        self._on_grid(cur, feed)
        oldest = feed.slot(self.clock() - self.horizon_s)
        if cur["next"] > n:  # the files were cut below the cursor (a restored backup)
            log.warning("feed %d holds %d slots, the InfluxDB sink had sent %d: sending from "
                        "there again", feed.id, n, cur["next"])
            cur["next"], self._dirty = n, True
        kept = tidy([h if h[1] <= n else [h[0], n, 0] for h in cur["holes"] if h[0] < n],
                    oldest)  # a hole cut short is looked at again whole
        if kept != cur["holes"]:
            cur["holes"], self._dirty = kept, True
        lines, holes = [], []
        for lo, hi, have in cur["holes"]:
            values = feed.read(lo, hi)
            if int(np.isfinite(values).sum()) > have:  # filled since: the run again, whole
                lines += self.schema.lines(series, _times(feed, lo, hi), values)
                holes += _nan_runs(values, lo)
            else:
                holes.append([lo, hi, have])
        if lines:
            yield lines, self._refill(cur, holes, oldest)
        pos = cur["next"]
        while pos < n:
            stop = min(pos + self.batch_points, n)
            values = feed.read(pos, stop)
            yield (self.schema.lines(series, _times(feed, pos, stop), values),
                   self._advance(cur, stop, _nan_runs(values, pos), oldest))
            pos = stop

    def _on_grid(self, cur, feed):
        """The cursor counted on the feed's grid as it is now: a start that moved back puts
        the cursor as many slots further, and the slots before the old start are a hole to
        look at. A cursor without a start (kept before it was) is on today's grid."""
        start = cur.get("start")
        if start == feed.start:
            return
        if start is not None:
            shift = (start - feed.start) // feed.interval
            if shift > 0:
                cur["next"] += shift
                cur["holes"] = [[0, shift, 0]] + [[lo + shift, hi + shift, have]
                                                  for lo, hi, have in cur["holes"]]
            else:  # a grid that moved forward: no engine does it; send it all again
                cur["next"], cur["holes"] = 0, []
        cur["start"] = feed.start
        self._dirty = True

    def _refill(self, cur, holes, oldest):
        def apply():
            cur["holes"] = tidy(holes, oldest)
            self._dirty = True
        return apply

    def _advance(self, cur, stop, runs, oldest):
        def apply():
            self.behind = max(self.behind - (stop - cur["next"]), 0)
            cur["next"] = stop
            if runs:
                cur["holes"] = tidy(cur["holes"] + runs, oldest)
            self._dirty = True
        return apply

    def _send(self, lines, applies):
        if lines:
            try:
                self.writer.write(lines)
            except WriteFailed as e:
                if e.retry:
                    raise
                self.complaints(e.kind, "%s; %d points left out" % (e, len(lines)))
            else:
                self.sent += len(lines)
                self.link.up()
                if self._failing:
                    self._failing = False
                    log.info("InfluxDB at %s answers again: catching up", self.writer.target)
        for apply in applies:
            apply()
        if self._dirty and time.monotonic() - self._saved_at >= CURSOR_EVERY_S:
            self.save()

    # -- the thread ----------------------------------------------------------------------------

    def start(self):
        log.info("InfluxDB sink: %s, schema %s, cursor in %s", self.writer.target,
                 self.schema.name, self.place)
        self._stop.clear()
        self.cursor = self._seen = None  # read again: another collector may have moved it
        self._catching_up = True
        self._thread = threading.Thread(target=self._run, name="influx-sink", daemon=True)
        self._thread.start()

    def running(self):
        """Its thread is still at work (stop() waits for it only a little)."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout_s=1.0):
        """Ask the thread to end, and wait for it a little: a write in flight is not waited
        for (its points are sent again at the next start)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self):
        backoff_s, failed = 0.0, None
        while not self._stop.is_set():
            wait_s = self.poll_s
            try:
                self.poll()
                backoff_s, failed = 0.0, None
            except WriteFailed as e:
                self.writer.close()
                self.link.down(str(e))
                self._failing = self._catching_up = True
                if e.kind != failed:  # something else is wrong now: try again soon
                    backoff_s, failed = 0.0, e.kind
                backoff_s = min(max(backoff_s * 2, 1.0), BACKOFF_MAX_S)
                wait_s = backoff_s
                self.complaints(e.kind, "%s; %d points wait for it, trying again in %.0f s"
                                % (e, self.behind, backoff_s))
            except (OSError, ValueError, RegistryError, FeedError, StoreError) as e:
                wait_s = BACKOFF_MAX_S
                self.complaints("influx-read", "the InfluxDB sink cannot read the data (%s); "
                                "trying again in %.0f s" % (e, wait_s))
            except Exception:  # a bug: said with its traceback, and the sink starts over
                wait_s = BACKOFF_MAX_S
                log.exception("the InfluxDB sink failed; it starts again in %.0f s", wait_s)
                self.cursor = self._seen = None
            self.complaints.flush()
            self._stop.wait(wait_s)


def backfill(store, writer, schema, since=None, progress=None, batch_points=BATCH_POINTS,
             tries=4):
    """Send every committed point of `store` (the storage interface) from `since` (unix s;
    None: each feed's start) to the end, whatever the cursor says (rewriting a point is
    harmless). progress(done slots, all slots, points sent). Returns the points sent;
    WriteFailed after `tries` failed tries (at once for a refusal only a person can fix:
    401, 403, 404)."""
    _, lengths = store.committed()
    work = []
    for feed, series, n in _feeds(store, lengths, schema):
        first = 0 if since is None else min(feed.first_at(since), n)
        work.append((feed, series, first, n))
    total = sum(n - first for _, _, first, n in work)
    done = sent = 0
    lines = []

    def flush():
        for attempt in range(tries):
            try:
                writer.write(lines)
                return
            except WriteFailed as e:
                writer.close()
                if not e.retry or e.kind in _FOR_A_PERSON or attempt == tries - 1:
                    raise
                time.sleep(2 ** attempt)

    for feed, series, first, n in work:
        for pos in range(first, n, batch_points):
            stop = min(pos + batch_points, n)
            values = feed.read(pos, stop)
            lines += schema.lines(series, _times(feed, pos, stop), values)
            done += stop - pos
            if len(lines) >= batch_points:
                flush()
                sent += len(lines)
                lines = []
            if progress:
                progress(done, total, sent)
    if lines:
        flush()
        sent += len(lines)
    if progress:
        progress(done, total, sent)
    return sent
