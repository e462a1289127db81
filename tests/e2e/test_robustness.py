"""test_robustness.py - the node never boot-loops: a crash is logged to flash and the plug
restarts; three crashes in a row leave it in safe mode; a broken config.json runs on defaults
and says what is wrong on the log topic."""

import json
import time

import paho.mqtt.client as mqtt

from helpers import aligned_past


def test_crashes_restart_then_safe_mode(broker, simnodes, tmp_path):
    flash = tmp_path / "flash"
    node = simnodes(broker.port, "crashy", "--flash", flash, "--start", aligned_past(3600),
                    "--speed", 100, "--crash-after", 60)
    node.proc.wait(120)
    out = node.proc.stdout.read()
    assert node.proc.returncode == 0, out
    assert out.count("simnode: the node reset itself") == 3
    assert "safe mode: the node crashed 3 times in a row" in out
    log = (flash / "crash.log").read_text()
    assert log.count("crash at node time") == 3
    assert "simulated crash" in log
    assert (flash / "crashes").read_text() == "0"  # cleared: the next reset tries the app again
    assert json.loads((flash / "energy.json").read_text())["writes"] == 3  # a checkpoint per crash


def test_a_broken_config_runs_on_defaults_and_says_why(broker, simnodes):
    seen = []
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="robust-test")
    c.on_message = lambda cl, u, m: seen.append((m.topic, m.payload.decode()))
    c.connect("127.0.0.1", broker.port)
    c.subscribe("wattlog/odd/log")
    c.loop_start()
    try:
        node = simnodes(broker.port, "odd", "--start", aligned_past(600), "--speed", 50,
                        "--config", json.dumps({"interval_s": "ten", "colour": "red",
                                                "calibration": {"power_gain": 9}}))
        s = node.finish()
        time.sleep(0.5)
    finally:
        c.loop_stop()
        c.disconnect()
    assert s["interval_s"] == 10 and s["produced"] >= 60  # ran, on the default interval
    logs = [p for t, p in seen if t == "wattlog/odd/log"]
    text = " | ".join(logs)
    assert "interval_s must be a int, not 'ten'; using 10" in text
    assert "config key 'colour' is unknown" in text
    assert "power_gain = 9" in text and "running uncalibrated" in text
