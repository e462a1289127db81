"""test_complaints.py - bad input is said at once, then at most once a minute per kind, with
the number of cases folded in; nothing is left unsaid."""

import logging

from wattlog.complaints import Complaints


def test_rate_limited_per_kind_with_counts(caplog):
    now = [0.0]
    c = Complaints(every_s=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        c("bad-batch", "first")
        for i in range(5):
            now[0] += 1
            c("bad-batch", "again %d" % i)
        c("future", "other kind")
        assert [r.message for r in caplog.records] == ["first", "other kind"]
        now[0] = 61
        c.flush()
        assert caplog.records[-1].message == "again 4 (5 cases like this since the last report)"
        c.flush()  # nothing more to say
        assert len(caplog.records) == 3
    assert c.totals == {"bad-batch": 6, "future": 1}
