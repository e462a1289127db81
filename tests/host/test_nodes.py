"""test_nodes.py - what the collector may acknowledge to a node, what it asks for again and
what it counts as lost (wattlog.store.nodes), batch by batch."""

from wattlog.complaints import Complaints
from wattlog.store.nodes import MAX_RANGES, RESEND_AFTER_S, Nodes


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def make(saved=None):
    mono = Clock()
    return Nodes(saved or {}, Complaints(), clock=lambda: 1795170000, monotonic=mono), mono


def ack_seq(nodes):
    return {n: a["seq"] for n, a in nodes.confirm(nodes.snapshot())}


def test_in_order_batches_are_acked_up_to_the_last_record():
    n, _ = make()
    n.batch("a", 7, 0, 64, 0, 0)
    n.batch("a", 7, 64, 10, 0, 0)
    assert n.resends == []
    assert ack_seq(n) == {"a": 74}
    assert ack_seq(n) == {}  # nothing new heard: no ack to send


def test_duplicates_and_overlaps_change_nothing():
    n, _ = make()
    n.batch("a", 7, 0, 64, 0, 0)
    n.batch("a", 7, 0, 64, 0, 0)     # sent again after a reconnect
    n.batch("a", 7, 32, 64, 0, 0)    # overlapping
    cur = n.state["a"].cur
    assert (cur.have, cur.starts, n.resends) == (96, [], [])


def test_a_hole_the_node_still_holds_is_asked_for_and_blocks_the_ack():
    n, mono = make()
    n.batch("a", 7, 0, 10, 0, 0)
    n.batch("a", 7, 20, 10, 0, 0)   # 10..19 missing (a collector crash took them)
    assert n.resends == [("a", 7, 0, 10)]
    n.batch("a", 7, 30, 10, 0, 0)   # the queue behind the hole: not asked again at once
    assert len(n.resends) == 1
    mono.t += RESEND_AFTER_S
    n.batch("a", 7, 40, 10, 0, 0)   # still missing after a while: asked again
    assert len(n.resends) == 2
    assert ack_seq(n) == {"a": 10}  # never past the hole
    n.batch("a", 7, 10, 10, 0, 0)   # the resend fills it
    assert ack_seq(n) == {"a": 50}
    assert (n.state["a"].lost, n.state["a"].gaps) == (0, 0)


def test_records_the_node_no_longer_holds_are_counted_lost_once():
    n, _ = make()
    n.batch("a", 7, 0, 10, 0, 0)
    # a long outage: the ring dropped 10..24 before they could be sent; it holds 25 onward
    n.batch("a", 7, 25, 10, 15, 25)
    st = n.state["a"]
    assert (st.cur.have, st.lost, st.gaps, st.dropped, n.resends) == (35, 15, 1, 15, [])
    n.batch("a", 7, 35, 5, 15, 25)
    assert (st.lost, st.gaps) == (15, 1)
    assert ack_seq(n) == {"a": 40}


def test_a_partly_received_stretch_counts_only_what_is_missing():
    n, _ = make()
    n.batch("a", 7, 0, 10, 0, 0)
    n.batch("a", 7, 20, 5, 0, 0)    # 10..19 missing, 20..24 here
    n.batch("a", 7, 28, 7, 13, 28)  # the node dropped 13 (10..19, 25..27) and holds 28 on
    st = n.state["a"]
    assert (st.cur.have, st.lost) == (35, 13)


def test_a_reboot_starts_a_new_count_and_keeps_the_totals():
    n, _ = make()
    n.batch("a", 7, 0, 10, 0, 0)
    n.batch("a", 7, 20, 10, 10, 20)
    n.batch("a", 9, 0, 5, 0, 0)     # new boot id
    st = n.state["a"]
    assert (st.boot, st.cur.have, st.boots, st.lost, st.gaps) == (9, 5, 2, 10, 1)
    assert n.confirm(n.snapshot(), 12) == [("a", {"boot": 9, "seq": 5, "time": 1795170000,
                                                  "commit": 12})]


def test_a_restarted_collector_resumes_from_what_commit_json_says():
    n, _ = make()
    n.batch("a", 7, 0, 40, 0, 0)
    snap = n.snapshot()
    saved = n.to_json(snap)         # what the commit writes, before the acks go out
    n2, _ = make(saved)
    assert (n2.state["a"].boot, n2.state["a"].cur.have, n2.state["a"].cur.acked) == (7, 40, 40)
    n2.batch("a", 7, 60, 10, 0, 40)  # 40..59 reached the crashed collector only: ask again
    assert n2.resends == [("a", 7, 40, 40)]


def test_an_unreadable_saved_entry_is_reported_and_started_afresh():
    complaints = Complaints()
    n = Nodes({"a": {"boot": "x"}, "b": {"boot": 3, "seq": 5}}, complaints)
    assert set(n.state) == {"b"}
    assert complaints.totals == {"commit-state": 1}


def test_losses_count_only_what_the_plug_says_it_dropped():
    """A hole below `held` is lost only as far as the plug's own ring-drop count explains it;
    the rest (acknowledged by a collector state now gone, or a batch no plug sent) is said but
    not counted (the old code counted every such hole, 90 million 'lost' after a flood)."""
    n, _ = make()
    n.batch("a", 7, 0, 10, 0, 0)
    n.batch("a", 7, 50, 10, 4, 50)   # 10..49 gone, but the plug says it dropped only 4
    st = n.state["a"]
    assert (st.lost, st.gaps, st.cur.have) == (4, 1, 60)
    assert n.complain.totals["skipped"] == 36
    n.batch("a", 7, 60, 10, 4, 60)   # the same 4 drops are not counted twice
    assert st.lost == 4


def test_forged_batches_of_other_boots_neither_reset_nor_inflate_the_count():
    """A flood of batches with other boot ids and a large `held` (what a replaying or hostile
    client sends on a plug's topic): no loss is counted that the batch's own drop count does
    not explain, and when the real boot's batches come back they go on from where they were,
    acknowledged as before (the old code reset the node's state at every foreign boot and
    counted its `held` as lost)."""
    n, _ = make()
    n.batch("a", 7, 0, 100, 0, 0)
    for boot in range(1000, 1020):
        n.batch("a", boot, 5000, 10, 0, 5000)
        n.batch("a", 7, 100, 1, 0, 0)
    st = n.state["a"]
    assert st.lost == 0 and st.boots_seen[7].have == 101 and st.boot == 7
    assert ack_seq(n) == {"a": 101}
    n.batch("a", 7, 101, 10, 0, 0)
    assert ack_seq(n) == {"a": 111} and n.state["a"].lost == 0


def test_a_replayed_batch_of_an_earlier_boot_does_not_restart_its_count():
    n, _ = make()
    n.batch("a", 7, 0, 10, 0, 0)
    n.batch("a", 9, 0, 10, 0, 0)    # rebooted
    n.batch("a", 7, 0, 10, 0, 0)    # a replay of the first boot's batch
    n.batch("a", 9, 10, 10, 0, 0)
    st = n.state["a"]
    assert (st.boots, st.lost, st.boots_seen[9].have, st.boots_seen[7].have) == (2, 0, 20, 10)
    assert n.complain.totals.get("old-boot") == 2  # the replay, and the switch back to 9


def test_scattered_sequence_numbers_are_bounded_per_node():
    """One-record batches with seq 1, 3, 5, ...: the ranges a node may have open are bounded
    (MAX_RANGES), so neither memory nor the per-batch cost grows without end (the old code
    re-sorted every stored range on every batch: 22 s of CPU for 8,000 batches); once the
    records between arrive, everything is acknowledged."""
    n, _ = make()
    for k in range(MAX_RANGES + 500):
        n.batch("a", 7, 2 * k + 1, 1, 0, 0)
    cur = n.state["a"].cur
    assert len(cur.starts) == MAX_RANGES and n.complain.totals["scattered"] == 500
    for k in range(MAX_RANGES + 1):
        n.batch("a", 7, 2 * k, 1, 0, 0)
    assert cur.have == 2 * MAX_RANGES + 1 and cur.starts == []


def test_ranges_match_a_plain_set_model_under_random_batches():
    """The bisection bookkeeping against the obvious model: a set of every seq received."""
    import random
    rnd = random.Random(5)
    for trial in range(50):
        n, _ = make()
        got = set()
        held = 0
        for _ in range(200):
            seq = rnd.randrange(0, 400)
            count = rnd.randrange(1, 12)
            if rnd.random() < 0.05:
                held = max(held, min(seq, held + rnd.randrange(0, 30)))  # never goes back
            n.batch("a", 7, seq, count, 10 ** 6, held)
            got.update(range(seq, seq + count))
            cur = n.state["a"].cur
            base = held
            while base in got:
                base += 1
            assert cur.have == base, (trial, seq, count, held)
            above = sorted(s for s in got if s > cur.have)
            flat = [s for a, b in zip(cur.starts, cur.ends) for s in range(a, b)]
            assert flat == above
