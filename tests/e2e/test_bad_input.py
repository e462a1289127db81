"""test_bad_input.py - whatever arrives on the readings topics, the collector keeps running,
keeps every good reading, and says what it refused in words, once per kind."""

import sys

from helpers import REPO, aligned_past, wattlog
from broker import TEST_USER
from rig import Recorder, taken

sys.path.insert(0, str(REPO / "tests" / "host"))
from batches import batch  # noqa: E402


def publisher(broker):
    """A client allowed to publish anything (the broker's test user): what a misconfigured
    broker, or a buggy plug before its ACL, could let through."""
    return Recorder(broker, name="bad-input-test", user=TEST_USER)


def test_bad_input_is_counted_and_good_readings_kept(broker, collectors, tmp_path):
    data = tmp_path / "data"
    collector = collectors(broker.url, data, commit_interval=300)
    collector.wait_for("listening on")
    t = aligned_past(600)
    good = batch([(t, 100, 1, 230, 0.5), (t + 10, 200, 2, 230, 0.9)])
    cases = [
        ("wattlog/Kitchen/readings", good, "a node id is 1-32 characters"),
        ("wattlog/n1/readings", good[:-5], "truncated: header says 2 records"),
        ("wattlog/n1/readings", good[:4] + b"\0\0" + good[6:], "interval 0 s outside 1..3600"),
        ("wattlog/n1/readings", good + b"extra", "oversized: header says 2 records"),
        ("wattlog/n1/readings", b"\x07" + good[1:], "unknown format version 7"),
        ("wattlog/n1/readings", batch([(t + 86400 * 3, 1, 1, 230, 0.1)]), "ahead of this computer's clock"),
        ("wattlog/n1/readings", batch([(t + 3, 1, 1, 230, 0.1)]), "not a multiple of its 10 s interval"),
        ("wattlog/n1/readings", batch([(t + 20, 99999, 3, 230, 1)]), "no plug measures that"),
    ]
    pub = publisher(broker)
    try:
        for topic, payload, _ in cases + cases:  # every kind twice: said once a minute
            pub.publish(topic, payload)
        pub.publish("wattlog/a/b/readings", good)  # '/' in the id
        pub.publish("wattlog/n1/readings", good)
    finally:
        pub.close()
    taken(broker)  # every case handled (the first pass's last complaint was not enough)
    assert collector.proc.poll() is None, "the collector died:\n" + collector.log()
    assert collector.stop() == 0
    log = collector.log()
    for _, _, words in cases:
        assert log.count(words) == 1, (words, log)
    assert ("refused so far: bad-node 2, batch-interval 2, batch-oversized 2, batch-truncated 2, "
            "batch-version 2, future 2, implausible 2, misaligned 2") in log
    rows = wattlog("export", "--fill", "--data", data, "--feed", "n1/power").splitlines()[1:]
    assert rows == ["%d,100" % t, "%d,200" % (t + 10), "%d," % (t + 20)]  # 99999 W -> no data
    listing = wattlog("feeds", "--data", data)
    assert "Kitchen" not in listing and " a " not in listing
