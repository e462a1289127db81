"""test_nodes.py - what the collector may acknowledge to a node, what it asks for again and
what it counts as lost (wattlog.nodes), batch by batch."""

from wattlog.complaints import Complaints
from wattlog.nodes import RESEND_AFTER_S, Nodes


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
    assert (n.state["a"].have, n.state["a"].ranges, n.resends) == (96, [], [])


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
    assert (st.have, st.lost, st.gaps, st.dropped, n.resends) == (35, 15, 1, 15, [])
    n.batch("a", 7, 35, 5, 15, 25)
    assert (st.lost, st.gaps) == (15, 1)
    assert ack_seq(n) == {"a": 40}


def test_a_partly_received_stretch_counts_only_what_is_missing():
    n, _ = make()
    n.batch("a", 7, 0, 10, 0, 0)
    n.batch("a", 7, 20, 5, 0, 0)    # 10..19 missing, 20..24 here
    n.batch("a", 7, 28, 7, 8, 28)   # the node dropped up to 27: 10..19 and 25..27 are gone
    st = n.state["a"]
    assert (st.have, st.lost) == (35, 13)


def test_a_reboot_starts_a_new_count_and_keeps_the_totals():
    n, _ = make()
    n.batch("a", 7, 0, 10, 0, 0)
    n.batch("a", 7, 20, 10, 10, 20)
    n.batch("a", 9, 0, 5, 0, 0)     # new boot id
    st = n.state["a"]
    assert (st.boot, st.have, st.boots, st.lost, st.gaps) == (9, 5, 2, 10, 1)
    assert n.confirm(n.snapshot()) == [("a", {"boot": 9, "seq": 5, "time": 1795170000})]


def test_a_restarted_collector_resumes_from_what_commit_json_says():
    n, _ = make()
    n.batch("a", 7, 0, 40, 0, 0)
    snap = n.snapshot()
    saved = n.to_json(snap)         # what the commit writes, before the acks go out
    n2, _ = make(saved)
    assert (n2.state["a"].boot, n2.state["a"].have, n2.state["a"].acked) == (7, 40, 40)
    n2.batch("a", 7, 60, 10, 0, 40)  # 40..59 reached the crashed collector only: ask again
    assert n2.resends == [("a", 7, 40, 40)]


def test_an_unreadable_saved_entry_is_reported_and_started_afresh():
    complaints = Complaints()
    n = Nodes({"a": {"boot": "x"}, "b": {"boot": 3, "seq": 5}}, complaints)
    assert set(n.state) == {"b"}
    assert complaints.totals == {"commit-state": 1}
