"""nodes.py - per node: which readings the collector has, what it may acknowledge, what is lost.

A node numbers its records from 0 at every boot (a random boot id); a batch header carries
boot, seq of its first record, count, the node's ring drops and `held`, the oldest record the
node still holds (lib/wattnode/wire.py). Per node and boot this module keeps

  have     every record below it is here (pending or on disk) or known to be gone
  ranges   records received above `have`, as sorted, disjoint [start, end) pairs in two
           lists searched by bisection: a batch costs O(log n), however scattered the seqs
           (at most MAX_RANGES; a node that scatters more is not a plug: its batches are
           stored but not counted until it sends the records between)
  acked    `have` at the last commit: what the retained ack told the node

and so knows:
- a hole (records missing between `have` and a later range) the node still holds: ask for it
  again ({"resend": have} on the ack topic, at most every RESEND_AFTER_S per hole), so a
  collector crash, a broker restart or a lost queue costs nothing;
- a hole below `held`: the node no longer has those records. They count as lost only as far
  as the node's own ring-drop count explains them (a plug that says it dropped 8 readings
  lost at most 8); the rest were acknowledged before by a collector whose state is gone, or
  the batch is not what a plug sends: said once, never counted as lost. Then `have` moves on
  to `held`, so acks never stall;
- a new boot id: the node rebooted; records of the old boot that never arrived were lost in
  the node's RAM (the node reports that number on its log topic). The last BOOTS_KEPT boots
  are remembered, so a stray batch of an earlier boot (a replay) switches back to that boot's
  count instead of starting it again from zero.

The ack is {"boot", "seq": have, "time", "commit"}, published retained only after a commit
made every record below `have` durable (collector.py); `commit` is that commit's number
(commit.py), so the acks a broker retains say which commit.json the plugs last heard of. The
state is saved in commit.json with the feeds' lengths, so a restarted collector acknowledges
exactly what is on disk.
"""

import bisect
import time

from wattnode import wire

RESEND_AFTER_S = 5.0
MAX_RANGES = 4096   # a plug holds at most 4096 records (a 64 KiB ring), so at most 2048 holes
BOOTS_KEPT = 4


def parse_ack(payload):
    """A retained ack as the collector publishes it (wire.py's ACK) -> {"boot", "seq",
    "time"?, "commit"?}, or None if it is not one."""
    try:
        kind, ack = wire.parse_ack(payload)
    except wire.AckError:
        return None
    return {k: ack[k] for k in ("boot", "seq", "time", "commit") if k in ack} \
        if kind == wire.ACK else None


class BootState:
    """One boot of a node: what has arrived, what was acknowledged."""
    __slots__ = ("boot", "have", "starts", "ends", "acked", "counted", "asked_from", "asked_at")

    def __init__(self, boot, have=0, counted=0):
        self.boot = boot
        self.have = have
        self.starts = []   # ranges above `have`: starts[i] < ends[i] < starts[i + 1]
        self.ends = []
        self.acked = have
        self.counted = counted  # of this boot's ring drops, how many are counted as lost
        self.asked_from = -1
        self.asked_at = 0.0

    def add(self, lo, hi):
        """Merge [lo, hi) in, then move `have` over the range it reaches. False if that would
        make more than MAX_RANGES ranges."""
        lo = max(lo, self.have)
        if hi <= lo:
            return True
        starts, ends = self.starts, self.ends
        i = bisect.bisect_left(ends, lo)     # first range ending at or after lo: touches it
        j = bisect.bisect_right(starts, hi)  # ranges starting at or before hi: touch it too
        if i < j:
            lo, hi = min(lo, starts[i]), max(hi, ends[j - 1])
        elif len(starts) >= MAX_RANGES and lo > self.have:
            return False
        starts[i:j] = [lo]
        ends[i:j] = [hi]
        if starts[0] <= self.have:
            self.have = ends[0]
            del starts[0], ends[0]
        return True

    def covered(self, lo, hi):
        """How many of the records in [lo, hi) the ranges hold."""
        i = bisect.bisect_right(self.ends, lo)
        j = bisect.bisect_left(self.starts, hi)
        return sum(max(0, min(b, hi) - max(a, lo))
                   for a, b in zip(self.starts[i:j], self.ends[i:j]))

    def move_to(self, held):
        """`have` jumps to `held`: ranges below it are dropped, one reaching it is taken in."""
        self.have = held
        k = bisect.bisect_right(self.ends, held)
        del self.starts[:k], self.ends[:k]
        if self.starts and self.starts[0] <= held:
            self.have = self.ends[0]
            del self.starts[0], self.ends[0]


class NodeState:
    __slots__ = ("boot", "boots_seen", "lost", "gaps", "dropped", "boots", "last_seen", "dirty")

    def __init__(self, boot, have=0, counted=0):
        self.boots_seen = {}   # boot id -> BootState, oldest first, at most BOOTS_KEPT
        self.switch(boot, have, counted)
        self.lost = 0
        self.gaps = 0
        self.dropped = 0
        self.boots = 1
        self.last_seen = None
        self.dirty = False

    @property
    def cur(self):
        return self.boots_seen[self.boot]

    def switch(self, boot, have=0, counted=0):
        """Make `boot` current; True if it was never seen (a reboot)."""
        self.boot = boot
        bs = self.boots_seen.pop(boot, None)
        new = bs is None
        self.boots_seen[boot] = bs if bs is not None else BootState(boot, have, counted)
        while len(self.boots_seen) > BOOTS_KEPT:
            del self.boots_seen[next(iter(self.boots_seen))]
        return new

    def to_json(self):
        cur = self.cur
        return {"boot": self.boot, "seq": cur.acked, "lost": self.lost, "gaps": self.gaps,
                "dropped": self.dropped, "counted": cur.counted, "boots": self.boots,
                "last_seen": self.last_seen}

    @classmethod
    def from_json(cls, d):
        dropped = int(d.get("dropped", 0))
        st = cls(int(d["boot"]), int(d["seq"]), int(d.get("counted", dropped)))
        st.lost, st.gaps = int(d.get("lost", 0)), int(d.get("gaps", 0))
        st.dropped, st.boots = dropped, int(d.get("boots", 1))
        st.last_seen = d.get("last_seen")
        return st


class Nodes:
    def __init__(self, saved, complaints, clock=time.time, monotonic=time.monotonic):
        """saved: commit.json's "nodes" ({} on a first start)."""
        self.complain = complaints
        self.clock = clock
        self.monotonic = monotonic
        self.state = {}
        for node, d in (saved or {}).items():
            try:
                self.state[node] = NodeState.from_json(d)
            except (KeyError, TypeError, ValueError):
                self.complain("commit-state", "commit.json's entry for %s is unreadable; its "
                              "next batches start a fresh count" % node)
        self.resends = []  # (node, boot, acked, resend_from): asked for by batch()

    def batch(self, node, boot, seq, count, dropped, held):
        """Take note of a batch that was decoded (its records are pending now)."""
        st = self.state.get(node)
        if st is None:
            st = self.state[node] = NodeState(boot)
        elif st.boot != boot:
            old = st.boot
            if st.switch(boot):
                st.boots += 1
                self.complain("rebooted", "%s rebooted (boot %08x after %08x); readings it had "
                              "not sent before that were lost with its memory (its log says how "
                              "many)" % (node, boot, old))
            else:
                self.complain("old-boot", "%s sent a batch of boot %08x after one of boot %08x, "
                              "which it had sent before (a replayed batch?); each is counted "
                              "with its own boot" % (node, boot, old))
        cur = st.cur
        st.dropped = dropped
        st.last_seen = int(self.clock())
        st.dirty = True
        if held > cur.have:  # the node no longer has [have, held)
            self._gone(node, st, cur, held, dropped)
        if not cur.add(seq, seq + count):
            self.complain("scattered", "%s sends records so scattered (%d separate runs) that "
                          "no plug's memory could hold them; they are stored, but not counted "
                          "until the records between arrive" % (node, MAX_RANGES))
        if cur.starts:  # a hole at [have, starts[0]) that the node still holds
            now = self.monotonic()
            if cur.asked_from != cur.have or now - cur.asked_at >= RESEND_AFTER_S:
                cur.asked_from, cur.asked_at = cur.have, now
                self.resends.append((node, boot, cur.acked, cur.have))

    def _gone(self, node, st, cur, held, dropped):
        """Records [have, held) the node no longer holds: lost as far as its drops explain."""
        missing = held - cur.have - cur.covered(cur.have, held)
        lost = min(missing, max(0, dropped - cur.counted))
        if lost:
            cur.counted += lost
            st.lost += lost
            st.gaps += 1
            self.complain("gap", "%s: %d readings (seq %d..%d of boot %08x) never arrived and the "
                          "plug no longer holds them (it reports %d dropped from its full memory)"
                          % (node, lost, cur.have, held - 1, cur.boot, dropped), lost)
        if missing > lost:
            self.complain("skipped", "%s no longer holds %d readings (seq %d..%d of boot %08x) "
                          "that never arrived here, though its ring drops do not explain them: "
                          "acknowledged by an earlier collector state, or not sent by a plug; "
                          "not counted as lost" % (node, missing - lost, cur.have, held - 1,
                                                  cur.boot), missing - lost)
        cur.move_to(held)

    def lost_in_rollback(self, node, lost, version):
        """A plug's report of `lost` slots that a rolled-back update cost it (firmware.py): the
        failed version's readings it could not keep and the time it metered nothing. They
        count as lost readings and one gap; written with the next commit."""
        st = self.state.get(node)
        if st is not None:
            st.lost += lost
            st.gaps += 1
            st.dirty = True
        self.complain("gap", "%s: %d readings lost while version %s was tried and rolled back "
                      "(the plug counted them)" % (node, lost, version), lost)

    def snapshot(self):
        """Before a commit: {node: (boot, have)} for every node heard from since the last one;
        what the commit makes durable and what its acks may then say."""
        return {node: (st.boot, st.cur.have) for node, st in self.state.items() if st.dirty}

    def confirm(self, snapshot, commit=0):
        """After the commit number `commit`: the acks to publish, [(node, {"boot", "seq",
        "time", "commit"})]."""
        acks = []
        for node, (boot, have) in sorted(snapshot.items()):
            st = self.state[node]
            bs = st.boots_seen.get(boot)
            if bs is not None:
                bs.acked = have
            st.dirty = st.boot != boot or st.cur.have != have  # more came in meanwhile?
            acks.append((node, {"boot": boot, "seq": have, "time": int(self.clock()),
                                "commit": commit}))
        return acks

    def to_json(self, snapshot=None):
        """For commit.json: each node's acked seq as it will be once this commit is done."""
        out = {}
        for node, st in sorted(self.state.items()):
            d = st.to_json()
            if snapshot and node in snapshot and snapshot[node][0] == st.boot:
                d["seq"] = snapshot[node][1]
            out[node] = d
        return out
