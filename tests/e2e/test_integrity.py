"""test_integrity.py - what was acknowledged survives what people do to a data directory, with a
real mosquitto holding the retained acks: a commit.json restored from a backup is caught by
the acks the plugs were given (nothing is cut), and the collector reads every retained ack the
broker holds before it decides anything."""

import json
import shutil
import time

import pytest

from helpers import aligned_past, wattlog
from rig import Recorder, summary, wait_until


def acked(data, node):
    try:
        state = json.loads((data / "commit.json").read_text())
    except (FileNotFoundError, ValueError):
        return None
    return state.get("nodes", {}).get(node, {}).get("seq")


@pytest.mark.realtime
def test_a_commit_json_restored_from_a_backup_cuts_nothing(broker, collectors, simnodes, tmp_path):
    """A plug's readings are committed and acknowledged; commit.json is then put back from an
    early backup while the collector is stopped. At the next start the broker's retained ack
    shows the plug was told more than the backup knows: the collector says so and keeps every
    stored slot (the old code cut everything past the backup's lengths). Live once caught up
    (a slot a second): the backup is taken between two of the collector's commits, in real
    time, and the plug then produces more than it covers."""
    data = tmp_path / "data"
    c = collectors(broker.url, data, commit_interval=1)
    c.wait_for("listening on")
    watch = Recorder(broker, "wattlog/bak-1/state", name="bak-watch")
    start = aligned_past(900)
    try:  # caught up as fast as it goes, then a slot a second, live
        node = simnodes(broker.port, "bak-1", "--profile", "constant:500", "--speed", "max",
                        "--start", start, "--then-realtime", "--interval", 1, "--batch-max", 8)
        wait_until("a first commit", lambda: acked(data, "bak-1"))
        backup = tmp_path / "commit.json.backup"
        shutil.copy(data / "commit.json", backup)
        early = acked(data, "bak-1")
        watch.wait(lambda: any(st["time"] >= start + early for st in watch.states("bak-1")),
                   "a reading past the backup's")
        node.stop()
    finally:
        watch.close()
    s = summary(node.output)
    wait_until("every reading acknowledged", lambda: acked(data, "bak-1") == s["produced"])
    assert c.stop() == 0
    assert early < s["produced"]
    shutil.copy(backup, data / "commit.json")

    c2 = collectors(broker.url, data, commit_interval=1)
    c2.wait_for("listening on")
    assert "older than what the plugs were told" in c2.log()
    assert "bak-1 was told seq %d" % s["produced"] in c2.log()
    rows = wattlog("export", "--fill", "--data", data, "--feed", "bak-1/power").splitlines()[1:]
    assert len(rows) == s["produced"] and all(r.endswith(",500") for r in rows)
    assert acked(data, "bak-1") == s["produced"]
    assert c2.stop() == 0


def test_the_collector_reads_every_retained_ack_before_it_decides(broker, collectors, tmp_path):
    """300 plugs' retained acks on the broker: the collector has all of them in hand when it
    checks its data (a marker it publishes after subscribing comes back after the retained
    messages)."""
    nodes = ["ret-%03d" % i for i in range(300)]
    with Recorder(broker, name="acks-writer") as writer:
        for i, node in enumerate(nodes):
            writer.publish("wattlog/%s/ack" % node, json.dumps(
                {"boot": 1000 + i, "seq": i, "time": int(time.time()), "commit": 1}),
                retain=True)
    data = tmp_path / "data"
    c = collectors(broker.url, data, commit_interval=1)
    c.wait_for("listening on")
    assert "the broker retains acks for 300 plugs" in c.log()
    assert c.stop() == 0


@pytest.mark.realtime
def test_an_acl_that_hides_the_acks_delays_the_start_but_does_not_stop_it(tmp_path, collectors,
                                                                          simnodes):
    """A broker whose ACL does not let the collector read <base>/+/ack (hand-made, or older
    than wattlog's): the marker never comes back, so after a bounded wait the collector starts
    anyway, saying in one line what the ACL lacks, and stores readings as before. Real time:
    that wait is the wall clock's."""
    import sys
    from helpers import REPO
    sys.path.insert(0, str(REPO / "tools" / "lib"))
    from broker import Broker
    from wattlog.fleet.provision import COLLECTOR
    b = Broker(str(tmp_path / "mosquitto"))
    acl = tmp_path / "mosquitto" / "auth" / "acl"
    acl.write_text(acl.read_text().replace("topic read wattlog/+/ack\n", "", 1))
    with b:
        data = tmp_path / "data"
        c = collectors(b.url, data, commit_interval=1, password_file=b.password_file(COLLECTOR))
        c.wait_for("listening on", timeout_s=40)
        assert "must let the user wattlog-collector read and write wattlog/+/ack" in c.log()
        node = simnodes(b.port, "acl-1", "--profile", "constant:500", "--speed", "max",
                        "--start", aligned_past(300), via=b)
        s = node.finish()
        wait_until("every reading stored", lambda: acked(data, "acl-1") == s["produced"])
        rows = wattlog("export", "--fill", "--data", data, "--feed", "acl-1/power").splitlines()[1:]
        assert len(rows) == s["produced"] and all(r.endswith(",500") for r in rows)
        assert c.stop() == 0
