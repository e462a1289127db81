"""test_control.py - controlling plugs and what cannot be forged, against the real broker with
its ACL: commands and their answers, `wattlog plug`, Home Assistant discovery, forged acks,
a flood of commands, anonymous and cross-node access refused, a broker that never answers.
Plugs catch up as fast as they go (simnode --speed max), then run live where a test talks to
them; each test ends on what it waits for."""

import json
import queue
import socket
import subprocess
import threading
import time

import pytest

from helpers import aligned_past, wattlog
from plugs import finish_flooded, start_live, stop_after_info
from rig import Recorder, wait_until
from wattlog.fleet.provision import OPERATOR

FLOOD_MIN = 200  # garbage commands a flooded plug takes in, at least: one a slot of its run

# What Home Assistant requires of a device discovery payload (REFERENCE.md) and of the
# components wattlog announces.
DEVICE_KEYS = {"dev", "o", "cmps"}
DEV_KEYS = {"identifiers", "name"}
SWITCH_KEYS = {"p", "unique_id", "command_topic", "state_topic", "payload_on", "payload_off"}
SENSOR_KEYS = {"p", "unique_id", "state_topic", "value_template", "unit_of_measurement",
               "device_class", "state_class"}
SENSORS = {"power": ("W", "measurement"), "voltage": ("V", "measurement"),
           "current": ("A", "measurement"), "energy": ("kWh", "total_increasing"),
           "rssi": ("dBm", "measurement")}


def test_home_assistant_discovery_is_complete_and_resent(broker, simnodes):
    ha = Recorder(broker, "homeassistant/device/#")
    state = Recorder(broker, "wattlog/ha-1/state")
    try:
        start_live(simnodes, broker, "ha-1", "--rssi", "-71")
        payload, _ = ha.next("homeassistant/device/ha-1/config")
        d = json.loads(payload)
        assert DEVICE_KEYS <= set(d) and DEV_KEYS <= set(d["dev"]) and d["o"]["name"]
        assert d["availability_topic"] == "wattlog/ha-1/status"
        relay = d["cmps"]["relay"]
        assert SWITCH_KEYS <= set(relay) and relay["p"] == "switch"
        assert relay["command_topic"] == "wattlog/ha-1/relay/set"
        for cid, (unit, state_class) in SENSORS.items():
            c = d["cmps"][cid]
            assert SENSOR_KEYS <= set(c), (cid, set(c))
            assert (c["p"], c["unit_of_measurement"], c["state_class"]) == ("sensor", unit, state_class)
            assert c["value_template"] == "{{ value_json.%s }}" % cid
        # the Wi-Fi signal: a diagnostic entity, read from the state as the others are
        assert (d["cmps"]["rssi"]["device_class"], d["cmps"]["rssi"]["entity_category"]) == (
            "signal_strength", "diagnostic")
        assert json.loads(state.next("wattlog/ha-1/state")[0])["rssi"] == -71
        ids = [c["unique_id"] for c in d["cmps"].values()]
        assert len(set(ids)) == len(ids)
        # namespaced: no collision with another MQTT device called ha-1 (issue 10 item 6)
        assert d["dev"]["identifiers"] == ["wattlog_ha-1"]
        assert sorted(ids) == sorted("wattlog_ha-1_" + cid for cid in d["cmps"])
        late = Recorder(broker, "homeassistant/device/ha-1/config")
        assert late.next("homeassistant/device/ha-1/config")[1] is True  # retained
        late.close()
        ha.c.publish("homeassistant/status", "online", qos=1)  # HA restarted: announce again
        ha.next("homeassistant/device/ha-1/config", timeout_s=10)
    finally:
        ha.close()
        state.close()


def test_commands_are_answered_and_bad_ones_change_nothing(broker, simnodes, tmp_path):
    flash = tmp_path / "flash"
    node = start_live(simnodes, broker, "cmd-1", "--flash", flash)
    log = Recorder(broker, "wattlog/cmd-1/#")
    try:
        log.next("wattlog/cmd-1/status", lambda p: p == b"online")
        log.next("wattlog/cmd-1/log", lambda p: p.startswith(b"status "))  # said as it connects:
        # its start-up (and its subscriptions, made before "online") is done
        before = (flash / "config.json").read_text()
        bad = [b"not json", b"[1, 2]", json.dumps({"cmd": "explode"}).encode(),
               json.dumps({"cmd": "interval", "interval_s": 0}).encode(),
               json.dumps({"cmd": "interval"}).encode(),
               json.dumps({"cmd": "calibration", "calibration": {"power_gain": 9}}).encode()]
        answers = [b"is not a command", b"is not a command", b"unknown command",
                   b"outside 1..3600; nothing changed", b"needs 'interval_s'",
                   b"power_gain = 9 must be a number"]
        for msg, answer in zip(bad, answers):
            log.c.publish("wattlog/cmd-1/cmd", msg, qos=1)
            got, _ = log.next("wattlog/cmd-1/log", lambda p, a=answer: a in p)
        assert (flash / "config.json").read_text() == before  # nothing changed
        log.c.publish("wattlog/cmd-1/cmd", json.dumps({"cmd": "info", "id": 7}), qos=1)
        got, _ = log.next("wattlog/cmd-1/log", lambda p: p.startswith(b"info "))
        info = json.loads(got[5:].rsplit(b" (id", 1)[0])
        assert info["node"] == "cmd-1" and info["interval_s"] == 10 and b"(id 7)" in got
        assert info["capacity"] == 2048 and info["connects"] >= 1  # the 32 KiB RAM ring
        assert (info["spill_capacity"], info["spill_readings"]) == (250 * 252, 0)  # its flash
        assert info["commands"] == len(bad) + 1 and info["bad_commands"] == len(bad)
        log.c.publish("wattlog/cmd-1/cmd", json.dumps({"cmd": "interval", "interval_s": 30}), qos=1)
        log.next("wattlog/cmd-1/log", lambda p: b"saved interval_s = 30; rebooting" in p)
        log.next("wattlog/cmd-1/status", lambda p: p == b"online", timeout_s=20)  # back up
        assert json.loads((flash / "config.json").read_text())["interval_s"] == 30
        log.c.publish("wattlog/cmd-1/cmd", json.dumps({"cmd": "info"}), qos=1)
        got, _ = log.next("wattlog/cmd-1/log", lambda p: p.startswith(b"info "), timeout_s=20)
        assert json.loads(got[5:])["interval_s"] == 30
    finally:
        log.close()
    node.stop()
    assert "simnode: the node reset itself" in node.output


def test_wattlog_plug_switches_and_reads_a_plug(broker, simnodes):
    """As the README says: the operator's user, its password from provision's file. Once
    switched on again, the plug's status reaches the load's 500 W at its first whole slot (a
    slot the relay was open for part of holds what was drawn in it: less)."""
    start_live(simnodes, broker, "cli-1")
    Recorder(broker, "wattlog/cli-1/state").next("wattlog/cli-1/state")
    login = ["--broker", "mqtt://%s@127.0.0.1:%d" % (OPERATOR, broker.port),
             "--password-file", broker.password_file(OPERATOR)]
    out = wattlog("plug", "off", "cli-1", *login)
    assert out.startswith("cli-1: relay OFF")
    out = wattlog("plug", "toggle", "cli-1", *login)
    assert out.startswith("cli-1: relay ON")
    wait_until("a whole slot at 500 W after the relay closed", lambda: "500.0 W" in wattlog(
        "plug", "status", "cli-1", *login), 40, poll_s=1.0)
    with pytest.raises(subprocess.CalledProcessError) as e:
        wattlog("plug", "on", "no-such-plug", "--timeout", 2, *login)
    assert "no plug 'no-such-plug' has ever reported" in e.value.stderr


def forged(broker, simnodes, node_id):
    """A live plug sending small batches, a forger who reads them (a test user: it may
    publish anything) and a recorder of the plug's log: (forger, log, plug)."""
    spy = Recorder(broker, "wattlog/%s/readings" % node_id, name="forger-" + node_id)
    log = Recorder(broker, "wattlog/%s/log" % node_id)
    node = simnodes(broker.port, node_id, "--profile", "constant:500", "--speed", "max",
                    "--start", aligned_past(1800), "--then-realtime", "--batch-max", 8)
    return spy, log, node


def test_forged_and_malformed_acks_free_nothing(broker, simnodes):
    """No collector runs. Garbage acks and an ack for another boot free nothing; then a good
    ack for the plug's real boot (read from its first batch) frees exactly what it says, so
    the refusals above ran against code that does free (with only wrong boots, a node that
    never freed anything would pass too). A test user publishes them: it may publish anything."""
    from wattnode import wire
    spy, log, node = forged(broker, simnodes, "forge")
    try:
        spy.wait(lambda: spy.seen, "the plug's first batch", 30)
        count, _, boot, seq, _, _ = wire.decode_header(spy.seen[0][1])
        for payload in (b"\xff\xfe", b"[]", b'{"boot": "x", "seq": 1}',
                        json.dumps({"boot": (boot + 1) % 2 ** 32, "seq": seq + count})):
            spy.publish("wattlog/forge/ack", payload)
        log.next("wattlog/forge/log", lambda p: b"is not what the collector sends" in p)
        spy.publish("wattlog/forge/ack", json.dumps({"boot": boot, "seq": seq + count}))
        s = stop_after_info(node, spy, log, "forge")
    finally:
        spy.close()
        log.close()
    assert s["bad_acks"] == 3 and s["acks"] == 1  # the other boot's ack: ignored, not bad
    assert s["unacked"] == s["produced"] - (seq + count)  # only what the good ack covered


def test_forged_ack_for_the_right_boot_but_past_what_was_sent(broker, simnodes):
    """The boot id is random; a forger who read it from a batch still cannot free readings
    the node has not sent: a seq past them is refused."""
    from wattnode import wire
    spy, log, node = forged(broker, simnodes, "forge2")
    try:
        spy.wait(lambda: spy.seen, "the plug's first batch", 20)
        boot = wire.decode_header(spy.seen[0][1])[2]
        spy.publish("wattlog/forge2/ack", json.dumps({"boot": boot, "seq": 10 ** 6}))
        spy.publish("wattlog/forge2/ack", json.dumps({"boot": boot, "seq": 0, "resend": 10 ** 6}))
        s = stop_after_info(node, spy, log, "forge2")
    finally:
        spy.close()
        log.close()
    assert s["bad_acks"] == 2 and s["unacked"] == s["produced"], s


def test_a_command_flood_does_not_starve_sampling(broker, collectors, simnodes, tmp_path):
    """A flood of garbage commands and relay switches while the plug runs 2000 s of node time
    as fast as it goes: every slot is produced and stored. A loop the flood starved (one that
    took in packets for as long as they came) would not get its run done within the bound.
    The flood reached the plug: its status counts at least FLOOD_MIN of it, every one refused
    (here about 40 % of what was sent reaches it before its run ends)."""
    data = tmp_path / "data"
    c = collectors(broker.url, data, commit_interval=5)
    c.wait_for("listening on")
    node = simnodes(broker.port, "flood", "--profile", "constant:500", "--speed", "max",
                    "--start", aligned_past(2000))
    flooder = Recorder(broker, name="flooder")

    def send(i):
        flooder.c.publish("wattlog/flood/cmd", b"garbage %d" % i)  # QoS 0, unawaited
        flooder.c.publish("wattlog/flood/relay/set", b"MAYBE")
        return 2
    try:
        s, sent = finish_flooded(node, send, every=100, pause_s=0.01)
    finally:
        flooder.close()
    assert c.stop() == 0
    rows = wattlog("export", "--fill", "--data", data, "--feed", "flood/power").splitlines()
    assert s["produced"] >= 199 and len(rows) - 1 == s["produced"]
    assert all(r.endswith(",500") for r in rows[1:])
    assert s["commands"] == s["bad_commands"] <= sent, s  # all of it garbage, all refused
    assert s["bad_commands"] >= FLOOD_MIN, (sent, s)  # the flood reached the node


def test_the_acl_refuses_anonymous_and_cross_node_access(broker, simnodes):
    import paho.mqtt.client as mqtt
    anon = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="anon")
    refused = []
    anon.on_connect = lambda c, u, f, rc, p: refused.append(rc.is_failure)
    anon.connect("127.0.0.1", broker.port)
    anon.loop_start()
    deadline = time.monotonic() + 5
    while not refused and time.monotonic() < deadline:
        time.sleep(0.05)
    anon.loop_stop()
    assert refused == [True]

    start_live(simnodes, broker, "victim", "--interval", 1)  # live, a state every second
    broker.node_args("mallory")
    watch = Recorder(broker, "wattlog/#")
    mallory = Recorder(broker, name="mallory", user="mallory")
    try:
        watch.next("wattlog/victim/state", lambda p: json.loads(p)["relay"] == "ON")
        mallory.publish("wattlog/victim/readings", b"\x02\x10forged")
        mallory.publish("wattlog/victim/relay/set", b"OFF")
        mallory.publish("wattlog/mallory/readings", b"own topic")
        watch.next("wattlog/mallory/readings")  # its own topic passes: the ACL is what stops it
        seen = []
        deadline = time.monotonic() + 15
        while not [m for m in seen if m[0] == "wattlog/victim/state"]:  # one after the switch
            assert time.monotonic() < deadline, seen
            try:
                seen.append(watch.get(0.2))
            except queue.Empty:
                pass
        assert not [m for m in seen if m[0] == "wattlog/victim/readings" and b"forged" in m[1]]
        assert not [m for m in seen if m[0] == "wattlog/victim/relay/set"]
        state = [json.loads(m[1]) for m in seen if m[0] == "wattlog/victim/state"]
        assert state and all(s["relay"] == "ON" for s in state)
    finally:
        mallory.close()
        watch.close()


def test_a_broker_that_never_answers_does_not_stop_the_plug(simnodes, broker):
    """A listener that accepts and says nothing (no CONNACK, ever): umqtt.simple alone would
    wait forever; the plug times out, backs off, keeps sampling and finishes its run."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    held = []
    stop = threading.Event()

    def accept():
        silent.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(silent.accept()[0])
            except OSError:
                pass
    t = threading.Thread(target=accept)
    t.start()
    try:
        node = simnodes(port, "mute", "--profile", "constant:500", "--speed", "max",
                        "--start", aligned_past(400))
        s = node.finish(timeout_s=60)
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        silent.close()
    assert held, "the plug never tried to connect"
    assert s["produced"] >= 39 and s["batches"] == 0 and s["unsent"] == s["produced"]


def test_tls_listener_with_the_provisioned_ca(tmp_path):
    """The collector's client (client_for) reaches a TLS listener made with `wattlog provision
    --tls`, verifying the broker against the CA it made, and refuses a broker it cannot verify."""
    import queue
    import ssl
    from broker import Broker, free_port
    from wattlog.mqtt import client_for
    from wattlog.fleet.provision import make_tls
    tls_dir = tmp_path / "tls"
    tls_dir.mkdir()
    make_tls(str(tls_dir), "127.0.0.1")
    port = free_port()
    extra = ("listener %d 127.0.0.1\nuse_username_as_clientid true\ncafile %s\ncertfile %s\n"
             "keyfile %s\n" % (port, tls_dir / "ca.crt", tls_dir / "server.crt", tls_dir / "server.key"))
    with Broker(str(tmp_path / "mosquitto"), extra_conf=extra) as b:
        url = "mqtts://%s@127.0.0.1:%d" % (OPERATOR, port)
        results = []
        for ca in (str(tls_dir / "ca.crt"), None):
            client, host, p = client_for(url, "tls-test", ca, b.creds[OPERATOR])
            got = queue.Queue()
            client.on_connect = lambda c, u, f, rc, pr: got.put(not rc.is_failure)
            try:
                client.connect(host, p)
            except ssl.SSLError:  # certificate verify failed: not our CA
                results.append(False)
                continue
            client.loop_start()
            results.append(got.get(timeout=5))
            client.loop_stop()
            client.disconnect()
        assert results == [True, False]
