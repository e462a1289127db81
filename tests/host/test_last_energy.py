"""test_last_energy.py - the last energy total the collector holds for a plug, which it hands
the plug with its clock answer (a plug back from a power cut resumes from it, issue 10 item 1):
the largest of what is pending and of the feed's last stored value; Feed.last_value() finds
that value whatever NaN follows it."""

import math

from batches import T0, batch
from wattlog.service import build
from wattlog.settings import Settings
from wattlog.store.phpfina import Feed


def test_the_last_value_past_a_tail_of_missing_slots(tmp_path):
    feed = Feed.create(str(tmp_path), 1, 10, 1000)
    assert feed.last_value() is None  # empty
    feed.update({0: 24.011, 3: 24.019, 3000: math.nan})  # a NaN tail longer than a page
    slot, value = feed.last_value()
    assert (slot, feed.time(slot)) == (3, 1030) and abs(value - 24.019) < 1e-5
    assert feed.last_value(max_slots=2000) is None  # looks back no further than told
    feed.close()


def test_the_clock_answer_s_energy_is_the_largest_held_pending_or_stored(tmp_path):
    col = build(Settings(data_dir=str(tmp_path / "data"), broker="mqtt://127.0.0.1:1"))
    col.recover({})
    assert col.store.last_energy("p1") == {}  # a plug it never heard of
    col.store.ingest.handle("wattlog/p1/readings", batch([(T0, 3000, 24011, 230, 13),
                                                     (T0 + 10, None, None, None, None)]))
    assert col.store.last_energy("p1") == {"energy_wh": 24011, "energy_time": T0}  # pending
    col.commit("test")
    col.store.ingest.handle("wattlog/p1/readings", batch([(T0 + 20, None, None, None, None)], seq=2))
    assert col.store.last_energy("p1") == {"energy_wh": 24011, "energy_time": T0}  # on disk
    col.store.ingest.handle("wattlog/p1/readings", batch([(T0 + 30, 3000, 24019, 230, 13)], seq=3))
    assert col.store.last_energy("p1") == {"energy_wh": 24019, "energy_time": T0 + 30}
    col.store.committer.close()
