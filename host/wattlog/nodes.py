"""nodes.py - per node: which readings the collector has, what it may acknowledge, what is lost.

A node numbers its records from 0 at every boot (a random boot id); a batch header carries
boot, seq of its first record, count, the node's ring drops and `held`, the oldest record the
node still holds (lib/wattnode/wire.py). Per node and boot this module keeps

  have     every record below it is here (pending or on disk) or known to be gone
  ranges   records received above `have`, as sorted, merged [start, end) pairs
  acked    `have` at the last commit: what the retained ack told the node

and so knows:
- a hole (records missing between `have` and a later range) the node still holds: ask for it
  again ({"resend": have} on the ack topic, at most every RESEND_AFTER_S per hole), so a
  collector crash, a broker restart or a lost queue costs nothing;
- a hole below `held`: the node no longer has those records (its ring dropped them while
  nothing could be sent): count it as a gap, say so once, and move on, so acks never stall;
- a new boot id: the node rebooted; records of the old boot that never arrived were lost in
  the node's RAM (the node reports that number on its log topic).

The ack is {"boot", "seq": have, "time"}, published retained only after a commit made every
record below `have` durable (collector.py). The state is saved in commit.json with the feeds'
lengths, so a restarted collector acknowledges exactly what is on disk.
"""

import time

RESEND_AFTER_S = 5.0


class NodeState:
    __slots__ = ("boot", "have", "ranges", "acked", "lost", "gaps", "dropped", "boots",
                 "last_seen", "asked_from", "asked_at", "dirty")

    def __init__(self, boot, have=0, acked=0):
        self.boot = boot
        self.have = have
        self.ranges = []
        self.acked = acked
        self.lost = 0
        self.gaps = 0
        self.dropped = 0
        self.boots = 1
        self.last_seen = None
        self.asked_from = -1
        self.asked_at = 0.0
        self.dirty = False

    def to_json(self):
        return {"boot": self.boot, "seq": self.acked, "lost": self.lost, "gaps": self.gaps,
                "dropped": self.dropped, "boots": self.boots, "last_seen": self.last_seen}

    @classmethod
    def from_json(cls, d):
        st = cls(int(d["boot"]), int(d["seq"]), int(d["seq"]))
        st.lost, st.gaps = int(d.get("lost", 0)), int(d.get("gaps", 0))
        st.dropped, st.boots = int(d.get("dropped", 0)), int(d.get("boots", 1))
        st.last_seen = d.get("last_seen")
        return st


def _covered(ranges, lo, hi):
    """How many of the records in [lo, hi) the ranges hold."""
    return sum(max(0, min(b, hi) - max(a, lo)) for a, b in ranges)


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
        if st is None or st.boot != boot:
            fresh = NodeState(boot)
            if st is not None:
                fresh.lost, fresh.gaps, fresh.boots = st.lost, st.gaps, st.boots + 1
                self.complain("rebooted", "%s rebooted (boot %08x after %08x); readings it had "
                              "not sent before that were lost with its memory (its log says how "
                              "many)" % (node, boot, st.boot))
            st = self.state[node] = fresh
        st.dropped = dropped
        st.last_seen = int(self.clock())
        st.dirty = True
        if held > st.have:  # the node no longer has [have, held): what we lack there is gone
            gone = held - st.have - _covered(st.ranges, st.have, held)
            if gone:
                st.lost += gone
                st.gaps += 1
                self.complain("gap", "%s: %d readings (seq %d..%d of boot %08x) never arrived "
                              "and the plug no longer holds them (it reports %d dropped from its "
                              "full memory)" % (node, gone, st.have, held - 1, boot, dropped), gone)
            st.have = held
        self._add(st, seq, seq + count)
        if st.ranges:  # a hole at [have, ranges[0][0]) that the node still holds
            now = self.monotonic()
            if st.asked_from != st.have or now - st.asked_at >= RESEND_AFTER_S:
                st.asked_from, st.asked_at = st.have, now
                self.resends.append((node, boot, st.acked, st.have))

    @staticmethod
    def _add(st, lo, hi):
        """Merge [lo, hi) into the ranges, then move `have` over every range it reaches."""
        out = []
        for a, b in sorted(st.ranges + [[max(lo, st.have), hi]]):
            if b <= st.have:
                continue
            if out and a <= out[-1][1]:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        while out and out[0][0] <= st.have:
            st.have = max(st.have, out.pop(0)[1])
        st.ranges = out

    def snapshot(self):
        """Before a commit: {node: have} for every node heard from since the last one; what
        the commit makes durable and what its acks may then say."""
        return {node: st.have for node, st in self.state.items() if st.dirty}

    def confirm(self, snapshot):
        """After the commit: the acks to publish, [(node, {"boot", "seq", "time"})]."""
        acks = []
        for node, have in sorted(snapshot.items()):
            st = self.state[node]
            st.acked = have
            st.dirty = st.have != have  # more came in meanwhile? (not in one thread, but cheap)
            acks.append((node, {"boot": st.boot, "seq": have, "time": int(self.clock())}))
        return acks

    def to_json(self, snapshot=None):
        """For commit.json: each node's acked seq as it will be once this commit is done."""
        out = {}
        for node, st in sorted(self.state.items()):
            d = st.to_json()
            if snapshot and node in snapshot:
                d["seq"] = snapshot[node]
            out[node] = d
        return out
