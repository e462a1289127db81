"""ingest.py - the MQTT edge: a readings batch -> wattnode.wire decode -> checks -> pending.

Topic <base>/<node>/readings; payload a wire batch (lib/wattnode/wire.py states the bytes).
Each record becomes one point per channel at unix time EPOCH_UNIX + t_s: power W, voltage V,
current A, energy kWh; a value the node marked missing becomes NaN (no data, never zero).

Refused, counted and said in plain words by kind (complaints.py), never fatal; the good
readings of a batch are kept whatever else it holds:
  bad-node     node id outside [a-z0-9_-]{1,32}: the whole message
  batch-*      truncated, oversized, unknown version, bad count or interval: the whole batch
               (one kind each: batch-truncated, batch-oversized, batch-version, batch-held, ...)
  misaligned   a slot time that is not a multiple of the batch's interval: that record
  future       a slot time more than max_future_s ahead of this computer's clock: that record
  too-old      a slot time more than max_age_s behind it: that record. A plug holds at most
               PLUG_RECORDS_MAX readings (a 64 KiB RAM ring and a 4 MiB flash spill,
               lib/wattnode/spill.py; boards/*.json have less), and a broker keeps a plug's
               batches for as long as the collector is away, so the default is a week, and
               never less than what a plug holds at the batch's interval (30 days at 10 s).
               Without this bound one batch stamped 2020 would make a new feed start in 2020:
               87 MB of NaN padding per channel at 10 s.
  implausible  a value no plug can measure (|P| > 50 kW, V > 500 V): that channel is NaN
  interval     a batch interval unlike the node's feeds: kept, on the feeds' grid

A batch is decoded whole: numpy reads the records in place (RECORD, the same bytes as
wire.RECORD_FMT) and every check is one array operation, so a 64-record batch costs a few
dozen numpy calls, not 64 times the Python of one record - the collector keeps ahead of
InfluxDB on the same readings (tools/bench/ingest). Each kind of refusal is counted per
record and said once per batch, with its first case.

Pending points wait here, per node, as the arrays of the batches that brought them (slot
times, and power, voltage, current, energy side by side), until commit.py writes them; take()
hands them over as (times, values) per (node, channel), in arrival order (a later value for
the same slot wins). Each decoded batch's boot, seq, count, ring drops and `held` go to
nodes.py, which decides what the node may be acknowledged and what to ask for again.
"""

import time

import numpy as np

from wattlog.store.feeds import CHANNELS, NODE_ID
from wattlog.store.nodes import Nodes
from wattnode import wire

MAX_POWER_W = 50000.0
MAX_VOLTAGE_V = 500.0
MAX_AGE_S = 7 * 86400
RING_RECORDS_MAX = 4096
# and the largest spill (lib/wattnode/board.py, spill.py): 4096 KiB in files of 252 readings
PLUG_RECORDS_MAX = RING_RECORDS_MAX + 4096 // 4 * 252
NAN = float("nan")
# wire.RECORD_FMT ("<IiIHH") as a numpy record: the batch's records are read where they lie
RECORD = np.dtype([("t_s", "<u4"), ("power_dw", "<i4"), ("energy_wh", "<u4"),
                   ("voltage_cv", "<u2"), ("current_ma", "<u2")])
# the pending value arrays' columns, in feeds.CHANNELS' order: (field, missing, raw units
# per unit), wire's table
_FIELDS = wire.FIELDS


CHANNEL_INDEX = {name: i for i, (name, _) in enumerate(CHANNELS)}  # a column of _FIELDS each


def _when(t):
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(int(t)))


class Ingest:
    def __init__(self, complaints, feed_interval, nodes=None, max_future_s=3600,
                 max_age_s=MAX_AGE_S, clock=time.time, monotonic=time.monotonic):
        """feed_interval(node) -> the interval of the node's existing feeds, or None;
        nodes: the collector's nodes.Nodes (a fresh one when not given)."""
        self.complain = complaints
        self.nodes = nodes if nodes is not None else Nodes({}, complaints, clock, monotonic)
        self.feed_interval = feed_interval
        self.max_future_s = max_future_s
        self.max_age_s = max_age_s
        self.clock = clock
        self.monotonic = monotonic
        self.pending = {}    # node -> [(slot times int64[n], values float64[n, 4]), ...]
        self.counts = {}     # node -> points pending (duplicates included)
        self.intervals = {}  # node -> interval of its pending points
        self.oldest = None   # monotonic time the oldest pending point arrived
        self.readings = 0
        self.batches = 0
        self.last_seen = {}  # node -> unix time of its last good batch

    def handle(self, topic, payload):
        """Take one readings message; returns the number of records kept."""
        node = topic.split("/")[-2] if topic.count("/") >= 2 else ""
        if not NODE_ID.match(node):
            self.complain("bad-node", "ignored a message on %r: a node id is 1-32 characters of "
                          "a-z, 0-9, _ and -" % topic)
            return 0
        try:
            count, interval, boot, seq, dropped, held = wire.decode_header(payload)
        except wire.BatchError as e:
            self.complain("batch-" + e.kind, "ignored a batch from %s: %s" % (node, e))
            return 0
        grid = self.feed_interval(node) or self.intervals.get(node) or interval
        if grid != interval:
            self.complain("interval", "%s sends %d s readings but its feeds hold %d s slots; "
                          "storing them on the feeds' grid" % (node, interval, grid))
        recs = np.frombuffer(payload, RECORD, count, wire.HEADER_SIZE)
        kept = self._points(node, recs, interval, grid)
        self.nodes.batch(node, boot, seq, count, dropped, held)
        if kept:
            self.intervals.setdefault(node, grid)
            self.last_seen[node] = self.clock()
            if self.oldest is None:
                self.oldest = self.monotonic()
        self.readings += kept
        self.batches += 1
        return kept

    def _points(self, node, recs, interval, grid):
        """Check the batch's records as arrays, pend the good ones; how many were kept."""
        now = self.clock()
        t = recs["t_s"].astype(np.int64) + wire.EPOCH_UNIX
        keep = np.ones(len(recs), dtype=bool)
        earliest = now - max(self.max_age_s, PLUG_RECORDS_MAX * interval)
        for kind, bad, words in (
                ("misaligned", (t - wire.EPOCH_UNIX) % interval != 0,
                 "at %%s: not a multiple of its %d s interval" % interval),
                ("future", t > now + self.max_future_s,
                 "stamped %%s, more than %d s ahead of this computer's clock; is the plug's "
                 "clock right?" % self.max_future_s),
                ("too-old", t < earliest,
                 "stamped %%s, older than a plug or the broker can hold it (limit: %.0f days, "
                 "--max-age)" % ((now - earliest) / 86400))):
            bad &= keep
            n = int(np.count_nonzero(bad))
            if n:
                keep &= ~bad
                self.complain(kind, "ignored %s from %s %s" % (
                    "a reading" if n == 1 else "%d readings" % n, node,
                    words % _when(t[np.argmax(bad)])), n)
        if not keep.all():
            recs, t = recs[keep], t[keep]
        n = len(recs)
        if not n:
            return 0
        values = np.empty((n, 4))
        for i, (field, missing, scale) in enumerate(_FIELDS):
            raw = recs[field]
            values[:, i] = raw / scale
            values[raw == missing, i] = NAN
        wild = (np.abs(values[:, 0]) > MAX_POWER_W) | (values[:, 1] > MAX_VOLTAGE_V)
        if wild.any():
            first = int(np.argmax(wild))
            self.complain("implausible", "%s reported %.1f W at %.2f V at %s%s; no plug "
                          "measures that, stored as no data" % (
                              node, values[first, 0], values[first, 1], _when(t[first]),
                              "" if wild.sum() == 1 else " (and %d more)" % (wild.sum() - 1)),
                          int(wild.sum()))
            values[np.abs(values[:, 0]) > MAX_POWER_W, 0] = NAN
            values[values[:, 1] > MAX_VOLTAGE_V, 1] = NAN
        self.pending.setdefault(node, []).append((t - t % grid, values))
        self.counts[node] = self.counts.get(node, 0) + n
        return n

    def largest(self):
        """Points pending for the node with the most (an upper bound on any feed's)."""
        return max(self.counts.values(), default=0)

    def points(self, node, channel, pending=None):
        """{slot time: value} pending for one feed, later values winning (for people, tests
        and queries; commits use take()); `pending`: chunks take() handed out instead."""
        i = CHANNEL_INDEX[channel]
        out = {}
        for times, values in list((self.pending if pending is None else pending).get(node, ())):
            out.update(zip(times.tolist(), values[:, i].tolist()))
        return out

    def restore(self, pending, intervals):
        """Put back what a failed commit took (take()'s chunks); points that arrived since
        win over it."""
        for node, chunks in pending.items():
            self.pending[node] = chunks + self.pending.get(node, [])
            self.counts[node] = sum(len(times) for times, _ in self.pending[node])
        for node, interval in intervals.items():
            self.intervals.setdefault(node, interval)
        if self.oldest is None:
            self.oldest = self.monotonic()

    def take(self):
        """Hand the pending points to a commit and start afresh: ({node: chunks},
        {node: interval}); feeds() turns the chunks into what Committer.commit takes."""
        pending, intervals = self.pending, self.intervals
        self.pending, self.counts, self.intervals, self.oldest = {}, {}, {}, None
        return pending, intervals


def feeds(pending):
    """take()'s chunks -> {(node, channel): (slot times, values)}, arrival order kept."""
    out = {}
    for node, chunks in pending.items():
        times = np.concatenate([c[0] for c in chunks])
        values = np.concatenate([c[1] for c in chunks])
        for channel, i in CHANNEL_INDEX.items():
            out[(node, channel)] = (times, values[:, i])
    return out
