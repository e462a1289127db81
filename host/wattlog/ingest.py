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
               RING_RECORDS_MAX readings (a 64 KiB ring; boards/*.json have 48 KiB at most),
               but a broker keeps a plug's batches for as long as the collector is away, so
               the default is a week, and never less than the ring's span at the batch's
               interval. Without this bound one batch stamped 2020 would make a new feed
               start in 2020: 87 MB of NaN padding per channel at 10 s.
  implausible  a value no plug can measure (|P| > 50 kW, V > 500 V): that channel is NaN
  interval     a batch interval unlike the node's feeds: kept, on the feeds' grid

Pending points wait here, per (node, channel), until commit.py writes them. Each decoded
batch's boot, seq, count, ring drops and `held` go to nodes.py, which decides what the node
may be acknowledged and what to ask for again.
"""

import time

from wattlog.feeds import NODE_ID
from wattlog.nodes import Nodes
from wattnode import wire
MAX_POWER_W = 50000.0
MAX_VOLTAGE_V = 500.0
MAX_AGE_S = 7 * 86400
RING_RECORDS_MAX = 4096
NAN = float("nan")


def _when(t):
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(t))


def _scaled(raw, missing, scale):
    return NAN if raw == missing else raw / scale


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
        self.pending = {}    # (node, channel) -> {unix time: value}
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
        now = self.clock()
        latest = now + self.max_future_s
        earliest = now - max(self.max_age_s, RING_RECORDS_MAX * interval)
        kept = 0
        for i in range(count):
            t_s, power_dw, energy_wh, voltage_cv, current_ma = wire.unpack_record(payload, i)
            if t_s % interval:
                self.complain("misaligned", "ignored a reading from %s at %s: not a multiple "
                              "of its %d s interval" % (node, _when(t_s + wire.EPOCH_UNIX), interval))
                continue
            t = t_s + wire.EPOCH_UNIX
            if t > latest:
                self.complain("future", "ignored a reading from %s stamped %s, more than %d s "
                              "ahead of this computer's clock; is the plug's clock right?"
                              % (node, _when(t), self.max_future_s))
                continue
            if t < earliest:
                self.complain("too-old", "ignored a reading from %s stamped %s, older than a "
                              "plug or the broker can hold it (limit: %.0f days, --max-age)"
                              % (node, _when(t), (now - earliest) / 86400))
                continue
            power = _scaled(power_dw, wire.POWER_MISSING, 10)
            voltage = _scaled(voltage_cv, wire.U16_MISSING, 100)
            if abs(power) > MAX_POWER_W or voltage > MAX_VOLTAGE_V:
                self.complain("implausible", "%s reported %.1f W at %.2f V at %s; no plug "
                              "measures that, stored as no data" % (node, power, voltage, _when(t)))
                power = NAN if abs(power) > MAX_POWER_W else power
                voltage = NAN if voltage > MAX_VOLTAGE_V else voltage
            slot_t = t - t % grid
            self._put(node, "power", slot_t, power)
            self._put(node, "voltage", slot_t, voltage)
            self._put(node, "current", slot_t, _scaled(current_ma, wire.U16_MISSING, 1000))
            self._put(node, "energy", slot_t, _scaled(energy_wh, wire.ENERGY_MISSING, 1000))
            kept += 1
        self.nodes.batch(node, boot, seq, count, dropped, held)
        if kept:
            self.intervals.setdefault(node, grid)
            self.last_seen[node] = self.clock()
            if self.oldest is None:
                self.oldest = self.monotonic()
        self.readings += kept
        self.batches += 1
        return kept

    def _put(self, node, channel, t, value):
        self.pending.setdefault((node, channel), {})[t] = value

    def largest(self):
        """Points pending in the fullest feed buffer."""
        return max((len(p) for p in self.pending.values()), default=0)

    def restore(self, pending, intervals):
        """Put back what a failed commit took; points that arrived since win over it."""
        for key, points in pending.items():
            newer = self.pending.get(key, {})
            self.pending[key] = points
            points.update(newer)
        for node, interval in intervals.items():
            self.intervals.setdefault(node, interval)
        if self.oldest is None:
            self.oldest = self.monotonic()

    def take(self):
        """Hand the pending points to a commit and start afresh."""
        pending, intervals = self.pending, self.intervals
        self.pending, self.intervals, self.oldest = {}, {}, None
        return pending, intervals
