"""test_runs.py - an appliance's runs end to end: the real firmware on a simulated washer
(tools/simnode), the real mosquitto with provision's ACL, the real collector finding the run
as the readings come, killed in the middle of the wash and started again; what Home
Assistant would hear (the events, the run state, the discovery of the triggers and the
sensor) and what `wattlog runs` prints, against what the washer really did
(lib/wattsim/truth.py).

The plug runs as fast as the collector acknowledges (--speed max) with a small ring, so it
waits for the collector's acks every half ring (42 min of readings): killed, the collector
leaves the plug holding what it had not acknowledged, and the wash's end can only reach the
collector that comes next.
"""

import json
import os
import sys

from helpers import aligned_past, wattlog
from rig import Recorder
from wattnode import wire

sys.path.append(os.path.join(os.path.dirname(__file__), "..", "..", "lib"))
from wattsim import truth  # noqa: E402

NODE = "washer-e"
WASH_BEFORE_NOW_S = 2 * 3600 + 1200   # the wash began 2 h 20 min ago: it ended 35 min ago


def test_a_wash_is_found_and_announced_once_across_a_collector_killed_mid_run(
        broker, collectors, simnodes, tmp_path):
    """The run is found from the plug's readings, its start and end within a slot of the
    washer's and its kWh within 1 %; run_started and run_finished reach the broker once
    each, though the collector that announced the start was killed mid-wash and the next
    one read the wash again from the start; the run state is retained, and so is the
    discovery of the two triggers and the sensor on the plug's device."""
    start = aligned_past(WASH_BEFORE_NOW_S + 80 * 60)       # 80 min of standby first
    wash = aligned_past(WASH_BEFORE_NOW_S, 60)
    spec = "washer:%s" % wire_hhmm(wash)
    config = tmp_path / "wattlog.toml"
    config.write_text('[tariff]\nprice = 0.30\n[runs]\nevent_max_age = "4h"\n')
    events = Recorder(broker, "wattlog/%s/event" % NODE)
    state = Recorder(broker, "wattlog/%s/run" % NODE)
    try:
        first = collectors(broker.url, tmp_path / "data", commit_interval=2,
                           args=["--config", config])
        first.wait_for("listening on")
        node = simnodes(broker.port, NODE, "--profile", spec, "--speed", "max", "--start",
                        start, "--ring-kib", "8")
        state.next("wattlog/%s/run" % NODE, lambda p: json.loads(p)["state"] == "running",
                   timeout_s=120)
        first.kill()                                        # mid-wash: SIGKILL
        second = collectors(broker.url, tmp_path / "data", commit_interval=2,
                            args=["--config", config])
        said = until(events, lambda p: json.loads(p)["event"] == "run_finished", 180)
        node.finish(timeout_s=180)
        assert second.stop() == 0
        said += events.drain()
        for topic in ("homeassistant/device_automation/%s/run_started/config" % NODE,
                      "homeassistant/device_automation/%s/run_finished/config" % NODE,
                      "homeassistant/sensor/%s/run_state/config" % NODE,
                      "wattlog/%s/run" % NODE):
            late = Recorder(broker, topic)
            assert late.next(topic)[1] is True              # retained
            late.close()
    finally:
        events.close()
        state.close()
    assert not any(m.retain for m in said)
    said = [json.loads(p) for _, p in said]
    assert [e["event"] for e in said] == ["run_started", "run_finished"], said
    made, = truth.runs(spec, start - wire.EPOCH_UNIX, start - wire.EPOCH_UNIX + 5 * 3600)
    made_kwh = truth.energy_kwh(spec, *made)
    answer = json.loads(wattlog("runs", NODE, "--json", "--data", tmp_path / "data",
                                "--config", config))
    run, = answer["plugs"][0]["runs"]
    assert abs(run["start"] - (made[0] + wire.EPOCH_UNIX)) <= 10
    assert abs(run["end"] - (made[1] + wire.EPOCH_UNIX)) <= 10
    assert abs(run["kwh"] - made_kwh) / made_kwh < 0.01
    assert abs(run["cost"] - run["kwh"] * 0.30) < 1e-6
    finished = said[1]
    assert (finished["start"], finished["end"], finished["kwh"], finished["cost"]) == (
        run["start"], run["end"], run["kwh"], run["cost"])


def wire_hhmm(t):
    """The UTC time of day of unix time t as a profile's HHMM."""
    return "%02d%02d" % (t % 86400 // 3600, t % 3600 // 60)


def until(listener, match, timeout_s):
    """Every message the listener gets until one matches (that one included)."""
    import queue
    import time
    out, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            got = listener.get(0.2)
        except queue.Empty:
            continue
        out.append(got)
        if match(got[1]):
            return out
    raise AssertionError("no match within %.0f s; heard %s" % (timeout_s, out))
