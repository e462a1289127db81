"""test_pipeline.py - simulated plug -> mosquitto -> collector -> PHPFina files, end to end.

Three plugs (washer, fridge, heat pump) run the real firmware on the MicroPython unix port,
24 h of node time as fast as they go (simnode --speed max), into a real mosquitto and a real
collector; each run ends when its clock reaches the present and it has sent what it holds.
Afterwards every
slot each meter produced must be in the files, stamped on the slot grid, holding exactly the
value the meter measured - recomputed here from the load profile, independently of the node's
sampler - and the files must be the emoncms PHPFina layout byte for byte.
"""

import json
import struct
import time

import numpy as np
import pytest

from broker import Broker, free_port
from helpers import aligned_past, wattlog
from measured import INTERVAL, expected
from rig import Recorder, summary, taken

PROFILES = {"washer-1": "washer", "fridge-1": "fridge", "heatpump-1": "heatpump"}
def all_committed(data, produced):
    """Whether commit.json holds `produced[node]` slots of every node's power feed."""
    try:
        registry = json.loads((data / "feeds.json").read_text())["feeds"]
        committed = json.loads((data / "commit.json").read_text())["feeds"]
    except (OSError, ValueError):
        return False  # not written yet (or being replaced: it is renamed into place)
    ids = {e["node"]: str(e["id"]) for e in registry if e["channel"] == "power"}
    return all(committed.get(ids.get(nid), 0) >= n for nid, n in produced.items())


def test_every_slot_arrives_exactly(broker, collectors, simnodes, tmp_path):
    data = tmp_path / "data"
    collector = collectors(broker.url, data, commit_interval=5)
    collector.wait_for("listening on")
    start = aligned_past(86400)
    nodes = {nid: simnodes(broker.port, nid, "--profile", prof, "--speed", "max",
                           "--start", start, "--interval", INTERVAL)
             for nid, prof in PROFILES.items()}
    summaries = {nid: n.finish() for nid, n in nodes.items()}
    # a plug is done when the broker has its last batch (PUBACK); the collector may not have it
    # yet: wait (bounded) until its commits hold every plug's readings, then stop it
    deadline = time.monotonic() + 60
    while not all_committed(data, {nid: s["produced"] for nid, s in summaries.items()}):
        assert time.monotonic() < deadline, collector.log()
        time.sleep(0.2)
    assert collector.stop() == 0, collector.log()

    registry = json.loads((data / "feeds.json").read_text())["feeds"]
    committed = json.loads((data / "commit.json").read_text())["feeds"]
    for nid, s in summaries.items():
        assert s["first_slot"] == start and s["dropped"] == 0 and s["unsent"] == 0, s
        n = s["produced"]
        assert s["last_slot"] == start + (n - 1) * INTERVAL
        assert n >= 86400 // INTERVAL
        want = expected(PROFILES[nid], start, n)
        for channel, values in want.items():
            entry = next(e for e in registry if e["node"] == nid and e["channel"] == channel)
            meta = data / "phpfina" / ("%d.meta" % entry["id"])
            dat = data / "phpfina" / ("%d.dat" % entry["id"])
            assert meta.read_bytes() == struct.pack("<4I", 0, 0, INTERVAL, start), (nid, channel)
            assert committed[str(entry["id"])] == n
            got = np.frombuffer(dat.read_bytes(), dtype="<f4")
            bad = np.flatnonzero(got != values) if len(got) == n else []
            assert len(got) == n and not len(bad), (
                "%s/%s: %d slots stored of %d, first differences at %s"
                % (nid, channel, len(got), n, [(start + 10 * int(k), got[k], values[k]) for k in bad[:3]]))
            assert dat.read_bytes() == values.tobytes()


def test_export_prints_every_slot_with_its_value(broker, collectors, simnodes, tmp_path):
    """What `wattlog export` prints is what the meter produced, slot by slot."""
    data = tmp_path / "data"
    collector = collectors(broker.url, data, commit_interval=300)
    collector.wait_for("listening on")
    start = aligned_past(3 * 3600)
    s = simnodes(broker.port, "plug-a", "--profile", "washer", "--speed", "max",
                 "--start", start).finish()
    taken(broker)  # the plug's last batches, at the broker when it ended, taken
    assert collector.stop() == 0  # a clean stop commits what the 300 s interval still held
    rows = wattlog("export", "--fill", "--data", data, "--feed", "plug-a/power").splitlines()
    assert rows[0] == "time,power_W"
    want = expected("washer", start, s["produced"])["power"]
    assert [int(r.split(",")[0]) for r in rows[1:]] == [start + 10 * k for k in range(len(want))]
    assert [np.float32(r.split(",")[1]) for r in rows[1:]] == list(want)
    listing = wattlog("feeds", "--data", data)
    assert "plug-a  power    W     10s" in listing


def test_collector_started_before_its_broker_waits_for_it(collectors, simnodes, tmp_path):
    """A Pi that boots the collector before mosquitto: it retries quietly, then collects."""
    port = free_port()
    late = Broker(str(tmp_path / "mosquitto"), port=port)  # not started yet
    collector = collectors(late.url, tmp_path / "data", commit_interval=300)
    collector.wait_for("cannot reach the broker")
    assert collector.proc.poll() is None
    with late:
        collector.wait_for("listening on", timeout_s=40)
        start = aligned_past(600)
        s = simnodes(port, "late", "--start", start, "--speed", "max", via=late).finish()
        taken(late)
        assert collector.stop() == 0
    rows = wattlog("export", "--fill", "--data", tmp_path / "data", "--feed", "late/power").splitlines()
    assert len(rows) - 1 == s["produced"] and rows[1] == "%d,1000" % start


@pytest.mark.realtime
def test_a_plug_stopped_cleanly_sends_what_it_holds(broker, collectors, simnodes, tmp_path):
    """SIGTERM to a live plug (readings waiting for a fuller batch) sends them before it goes
    offline: every reading it produced reaches the files. In real time once caught up: the
    readings wait for a fuller batch for batch_wait_s (30 s) of real time, and the SIGTERM
    comes while they wait, after a slot measured live."""
    data = tmp_path / "data"
    collector = collectors(broker.url, data, commit_interval=300)
    collector.wait_for("listening on")
    watch = Recorder(broker, "wattlog/live/state", name="live-watch")
    start = aligned_past(120)
    live = int(time.time()) // INTERVAL * INTERVAL  # no slot from here on has ended yet
    try:
        node = simnodes(broker.port, "live", "--start", start, "--speed", "max",
                        "--then-realtime")
        watch.wait(lambda: any(st["time"] >= live for st in watch.states("live")),
                   "no live slot", timeout_s=40)
        node.stop()
    finally:
        watch.close()
    s = summary(node.output)
    assert s["unsent"] == 0 and s["produced"] >= 13, s
    assert collector.stop() == 0
    rows = wattlog("export", "--fill", "--data", data, "--feed", "live/power").splitlines()[1:]
    assert len(rows) == s["produced"] and all(r.endswith(",1000") for r in rows)


def test_the_node_runs_in_a_limited_heap(broker, collectors, simnodes, tmp_path, built):
    """The whole node with its 32 KiB ring and the spill behind it, a BL0937 driver and the
    simulated chip, run from the .mpy files a plug runs, in a 200 KiB heap (tools/bench/heap
    measures 184 KiB on this 64-bit port, where umqtt.simple is loaded as .mpy too; an ESP32
    has it frozen. The README gives the 32-bit figures)."""
    collector = collectors(broker.url, tmp_path / "data", commit_interval=300)
    collector.wait_for("listening on")
    s = simnodes(broker.port, "tight", "--mpy", "--heap-kib", 200, "--board", "devkit-bl0937",
                 "--profile", "washer", "--start", aligned_past(3600), "--speed", "max").finish()
    assert s["unsent"] == 0 and s["produced"] >= 360
    taken(broker)
    assert collector.stop() == 0
    rows = wattlog("export", "--fill", "--data", tmp_path / "data", "--feed", "tight/power").splitlines()
    assert len(rows) - 1 == s["produced"]
