"""writer.py - the storage interface's write side, the same on every engine: readings in,
acks out. The engine gives a committer (the PHPFina files' commit.py, or PostgreSQL's) and
its read side (base.Interface); this does the rest, in one order:

    store.recover(retained_acks)          # the store made to agree with what plugs were told
    store.take(topic, payload)            # one readings message: decoded, checked, pending
    store.resends()                       # the RESEND requests those messages called for
    done = store.commit()                 # pending -> durable; done.acks: what to publish
    store.status(); store.nodes()         # plain data for health, metrics, systemd

Inside, three parts, each with one concern: ingest.py (payloads -> pending points), nodes.py
(what each plug sent, so what it may be told), the committer (pending points -> durable data
and the nodes' state, in one step). commit() runs them in the one order that makes an ack
true: note what each plug's acks may say (the state its batches reached), write the points and
that state durably, then, only after the write has returned, hand back the acks, as
wattnode.wire's ACK payloads ready to publish (retained). A commit that fails raises OSError
with every pending point put back and no ack made: nothing was acknowledged, nothing is lost.

A committer has: commit(feed points, intervals, nodes' state) -> (feeds, points, bytes);
recover(acks); nodes (the saved nodes' state); generation; clock(); commits; commit_s;
interval(node) (a known node's slot length, or None); flush_summaries(progress);
close(clean).
"""

import collections
import logging
import time

from wattlog.store.base import node_row
from wattlog.store.ingest import MAX_AGE_S, Ingest
from wattlog.store.ingest import feeds as ingest_feeds
from wattlog.store.nodes import Nodes
from wattlog.store.phpfina import FeedError
from wattnode import wire

log = logging.getLogger("wattlog")

Done = collections.namedtuple("Done", "acks feeds points bytes")
"""A commit that succeeded: acks [(node, seq, ACK payload)], seq being what the ack says is
durable below; the feeds written, the distinct points, the bytes."""


class Writer:
    """The write side over self.committer; mixed into an engine's Store with its Interface."""

    def __init__(self, complaints, max_future_s=3600, max_age_s=MAX_AGE_S):
        self.complaints = complaints
        self.nodes_state = None  # nodes.Nodes, once recover() has run: the saved state first
        self._lost_held = []     # rollbacks' lost slots heard before recover(): counted after it
        self.ingest = Ingest(complaints, self.committer.interval, Nodes({}, complaints),
                             max_future_s=max_future_s, max_age_s=max_age_s)
        self._taken = None  # what a commit in progress took from ingest: pending()

    @property
    def recovered(self):
        return self.nodes_state is not None

    def recover(self, acks):
        """The broker's retained acks are known: make the store agree with them (the
        committer's recover). OSError: nothing past that point was changed."""
        self.committer.recover(acks)
        self.nodes_state = self.ingest.nodes = Nodes(self.committer.nodes, self.complaints)
        for lost in self._lost_held:
            self.nodes_state.lost_in_rollback(*lost)
        self._lost_held = []

    def lost_in_rollback(self, node, lost, update):
        """A plug's rollback report (fleet/firmware.py's on_lost): the slots its failed
        version cost count as the plug's lost readings (nodes.py); one heard before recover()
        is counted once the saved state is loaded."""
        if self.recovered:
            self.nodes_state.lost_in_rollback(node, lost, update["version"])
        else:
            self._lost_held.append((node, lost, update["version"]))

    def take(self, topic, payload):
        """One readings message; the number of readings kept."""
        return self.ingest.handle(topic, payload)

    def resends(self):
        """[(node, RESEND payload)] the messages taken since the last call asked for."""
        if not self.nodes_state.resends:
            return ()  # nearly always: once per message, kept cheap
        out = [(node, wire.encode_resend(boot, acked, resend, int(self.committer.clock())))
               for node, boot, acked, resend in self.nodes_state.resends]
        self.nodes_state.resends.clear()
        return out

    def commit(self):
        """Make what is pending durable; a Done, or None when nothing was pending. OSError:
        the commit failed and everything it took is pending again."""
        self._taken = self.ingest.pending  # still seen by pending() until on disk
        pending, intervals = self.ingest.take()
        if not pending:
            self._taken = None
            return None
        snapshot = self.nodes_state.snapshot()
        try:
            feeds, points, nbytes = self.committer.commit(ingest_feeds(pending), intervals,
                                                          self.nodes_state.to_json(snapshot))
        except OSError:
            self.ingest.restore(pending, intervals)
            raise
        finally:
            self._taken = None
        acks = [(node, a["seq"], wire.encode_ack(a["boot"], a["seq"], a["time"], a["commit"]))
                for node, a in self.nodes_state.confirm(snapshot, self.committer.generation)]
        return Done(acks, feeds, points, nbytes)

    def pending(self, node, channel):
        """(unix times, values) of one feed not committed yet (query.Engine's `pending`).
        Safe from another thread (the HTTP side): while a commit writes what it took, those
        points are still seen here, so a chart's right edge never has a hole. The order
        matters: ingest's pending first, then what a commit took (set before it takes)."""
        points = self.ingest.points(node, channel)
        taken = self._taken
        if taken is not None:
            points = {**self.ingest.points(node, channel, taken), **points}
        return (list(points), list(points.values())) if points else None

    def last_energy(self, node):
        """{"energy_wh", "energy_time"}: the largest energy total of the node held here,
        pending or on disk (its feed's last value), and its slot's unix time; {} if none."""
        held = [(kwh, t) for t, kwh in self.ingest.points(node, "energy").items()
                if kwh == kwh]  # not NaN
        entry = self.lookup(node + "/energy")
        if entry is not None and not entry.get("quarantined"):
            try:
                feed = self.feed(entry)
                last = feed.last_value()
            except (OSError, FeedError) as e:
                log.warning("cannot read %s's last energy total (%s)", node, e)
                last = None
            if last is not None:
                held.append((last[1], feed.time(last[0])))
        if not held:
            return {}
        kwh, t = max(held)
        wh = round(kwh * 1000)
        return {"energy_wh": wh, "energy_time": int(t)} if 0 <= wh < 1 << 30 else {}

    def discard_pending(self):
        """Forget what is pending (a cluster's collector that lost its leases: another one
        has those readings from the broker again); the number of readings dropped here."""
        pending, _ = self.ingest.take()
        return sum(len(c[0]) for chunks in pending.values() for c in chunks)

    def reload_nodes(self, states):
        """{node: saved state}: take each as the node's state (a partition just taken over:
        its nodes' acks moved on under another collector)."""
        fresh = Nodes(states, self.complaints)
        for node in states:
            if node in fresh.state:
                self.nodes_state.state[node] = fresh.state[node]

    def forget_nodes(self, nodes):
        """Stop keeping these nodes' state here (a cluster's partition let go: its new owner
        keeps it, and reads go to the database)."""
        for node in nodes:
            self.nodes_state.state.pop(node, None)

    def oldest_pending(self):
        """When (time.monotonic()) the oldest pending reading was taken in, or None."""
        return self.ingest.oldest

    def fullest_pending(self):
        """The most readings pending for one feed (a commit is due at a page's worth)."""
        return self.ingest.largest()

    def nodes(self):
        """Every node this collector knows: its state as commit.json will hold it, and when
        its last batch arrived here."""
        heard = dict(self.ingest.last_seen)
        states = dict(self.nodes_state.state) if self.nodes_state is not None else {}
        out = {node: node_row(node, _live(st), heard.get(node))
               for node, st in sorted(states.items())}
        for node in sorted(set(heard) - set(out)):
            out[node] = node_row(node, {}, heard[node])
        return out

    def status(self):
        """The store's health as plain data (what /api/health, /metrics and systemd say):
        ready (the files agree with the broker's retained acks), commits, commit_s (their
        time), pending_points, pending_age_s (how long the oldest has waited), readings,
        batches, plugs_heard, lost_readings, refused (bad input by kind), with Reader's."""
        ingest = self.ingest
        oldest = ingest.oldest
        states = list(self.nodes_state.state.values()) if self.nodes_state else []
        out = self.stored_status()
        out.update(ready=self.recovered, commits=self.committer.commits,
                   commit_s=self.committer.commit_s,
                   pending_points=sum(list(ingest.counts.values())),
                   plugs_pending=len(ingest.pending),
                   pending_age_s=None if oldest is None else round(time.monotonic() - oldest, 1),
                   readings=ingest.readings, batches=ingest.batches,
                   plugs_heard=len(ingest.last_seen),
                   lost_readings=sum(s.lost for s in states),
                   refused=dict(self.complaints.totals))
        return out

    def flush_summaries(self, progress=None):
        """The summaries up to what is committed (rollup.py's, or the engine's own); bytes
        written. OSError: tried again later, queries read the raw slots meanwhile."""
        return self.committer.flush_summaries(progress)

    def close(self, clean=False):
        self.committer.close(clean=clean)


def _live(st):
    """A NodeState in commit.json's shape, read from another thread (the HTTP side's) while
    the collector may switch its boot: a copy-free read that never fails half-way."""
    bs = st.boots_seen.get(st.boot)
    return {"boot": st.boot, "seq": None if bs is None else bs.acked, "lost": st.lost,
            "gaps": st.gaps, "dropped": st.dropped, "boots": st.boots,
            "last_seen": st.last_seen}
