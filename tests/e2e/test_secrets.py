"""test_secrets.py - no message a plug sends holds a secret (issue 10 item 2): with a Wi-Fi
password of the wrong type in its config.json, the plug names the key on its log topic, its
answers to commands and `info` and its crash log hold no password, and neither does what it
prints. Before, it said `config.json: wifi.password must be a str, not 87654321` on its log
topic, and the interval command's answer repeated it."""

import json

from helpers import aligned_past
from rig import Recorder

SECRET = "87654321"
CONFIG = json.dumps({"wifi": {"ssid": "home", "password": int(SECRET)}})


def test_no_message_log_answer_or_crash_log_holds_a_password(broker, simnodes, tmp_path):
    everything = Recorder(broker, "#", name="secret-watch")
    log = Recorder(broker, "wattlog/sec-1/#")
    try:
        node = simnodes(broker.port, "sec-1", "--profile", "constant:500", "--speed", "max",
                        "--start", aligned_past(60), "--then-realtime", "--config", CONFIG)
        said, _ = log.next("wattlog/sec-1/log", lambda p: b"wifi.password" in p)
        log.c.publish("wattlog/sec-1/cmd", json.dumps({"cmd": "interval", "interval_s": 30}),
                      qos=1)
        answer, _ = log.next("wattlog/sec-1/log", lambda p: p.startswith(b"cmd interval"))
        log.next("wattlog/sec-1/status", lambda p: p == b"offline")  # it reboots to apply it
        log.next("wattlog/sec-1/status", lambda p: p == b"online", timeout_s=20)
        log.c.publish("wattlog/sec-1/cmd", json.dumps({"cmd": "info"}), qos=1)
        log.next("wattlog/sec-1/log", lambda p: p.startswith(b"info {"))
        node.stop()
        flash = tmp_path / "flash"
        crashy = simnodes(broker.port, "sec-2", "--flash", flash, "--start", aligned_past(600),
                          "--speed", "max", "--crash-after", 30, "--config", CONFIG)
        crashy.proc.wait(120)
        printed = node.output + crashy.proc.stdout.read()
    finally:
        log.close()
        everything.close()
    assert said == b"config.json: wifi.password must be a str (the value given is a secret: " \
                   b"not shown); using ''"
    assert answer == b"cmd interval: saved interval_s = 30; rebooting to apply"
    crash_log = (flash / "crash.log").read_text()
    assert crash_log.count("crash at node time") == 3
    leaks = [(t, p) for t, p in everything.seen if SECRET.encode() in p]
    assert not leaks, leaks
    assert SECRET not in printed and SECRET not in crash_log
