"""test_broadlink.py - a wattlog plug answers the Broadlink SP3S local protocol (config
"broadlink", lib/wattnode/broadlink.py) to the real python-broadlink 0.19.0 the seed's scripts
use: the node runs on the MicroPython unix port (tools/simnode) with the module on a free
loopback UDP port, logged in to a real mosquitto. read mode reads and never switches; control
mode switches through the relay/set path; a reboot expires sessions; a flood of datagrams
does not starve sampling and auth is rate-limited; "off" listens on nothing."""

import json
import socket
import threading
import time

import broadlink
import pytest
from broadlink import exceptions as blerr

from helpers import aligned_past, wattlog
from plugs import finish_flooded, sim_mac, stop_after_info
from rig import Recorder

AUTH_BURST, AUTH_PER_S = 3, 2  # broadlink.py's AUTH_BURST and 1000 // AUTH_EVERY_MS
# test_pipeline.py's limited heap: broadlink "read" (9.8 KiB on this 64-bit port: the module
# 8.1, the server's buffers 1.3, socket and poller 0.3) fits in it since start.py unloads what
# only start-up needs; measured: runs with it from 191 KiB, without it at 189 (it needed 212).
# tests/device/test_memory.py: a plug with no heap for it meters on without it.
HEAP_KIB = 200


def free_udp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_bound(port, timeout_s=30.0):
    """Until something on this machine has UDP `port` bound (/proc/net/udp): a datagram sent
    before is lost without a word, and python-broadlink only retries a second later."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with open("/proc/net/udp") as f:
            if any(line.split()[1].endswith(":%04X" % port) for line in list(f)[1:]):
                return
        time.sleep(0.01)
    raise AssertionError("nothing bound UDP port %d within %.0f s" % (port, timeout_s))


def start(simnodes, broker, node_id, mode, port, *extra):
    return simnodes(broker.port, node_id, "--profile", "constant:500", "--speed", "max",
                    "--start", aligned_past(60), "--then-realtime",
                    "--config", json.dumps({"broadlink": mode, "broadlink_port": port}), *extra)


def watched(simnodes, broker, node_id, mode):
    """A plug in this Broadlink mode on a free UDP port, and a recorder of its topics:
    (port, plug, recorder)."""
    port = free_udp_port()
    return (port, start(simnodes, broker, node_id, mode, port),
            Recorder(broker, "wattlog/%s/#" % node_id))


def state(log, node_id, match=lambda s: True):
    payload, _ = log.next("wattlog/%s/state" % node_id, lambda p: match(json.loads(p)))
    return json.loads(payload)


def test_read_mode_reads_power_and_relay_and_refuses_set_power(broker, simnodes):
    port, node, log = watched(simnodes, broker, "bl-read", "read")
    try:
        st = state(log, "bl-read")
        dev = broadlink.hello("127.0.0.1", port=port, timeout=5)  # discovery, as --device would be
        assert isinstance(dev, broadlink.sp3s) and dev.devtype == 0x947A
        assert dev.mac.hex() == sim_mac("bl-read").hex() and dev.name == "bl-read"
        assert dev.auth()
        assert abs(dev.get_energy() - st["power"]) <= 0.01 and st["power"] == 500.0
        assert dev.check_power() is (st["relay"] == "ON")
        assert dev.get_fwversion() == 100  # wattnode 0.1.0
        with pytest.raises(blerr.CommandNotSupportedError):
            dev.set_power(not dev.check_power())
        same = broadlink.gendevice(0x947A, ("127.0.0.1", port), dev.mac)  # the seed's way
        same.auth()
        assert same.get_energy() == 500.0
        s = stop_after_info(node, log, log, "bl-read")
    finally:
        log.close()
    assert s["relay"] == st["relay"] and s["commands"] == 1  # the info: set_power moved nothing
    assert s["broadlink"] == "read" and s["broadlink_counts"]["auths"] == 2


def test_control_mode_switches_through_the_relay_path_and_says_who(broker, simnodes):
    port = free_udp_port()
    start(simnodes, broker, "bl-ctl", "control", port)
    log = Recorder(broker, "wattlog/bl-ctl/#")
    try:
        assert state(log, "bl-ctl")["relay"] == "ON"
        dev = broadlink.sp3s(("127.0.0.1", port), sim_mac("bl-ctl"), 0x947A, timeout=5)
        dev.auth()
        dev.set_power(False)
        assert state(log, "bl-ctl", lambda s: s["relay"] == "OFF")
        said, _ = log.next("wattlog/bl-ctl/log", lambda p: p.startswith(b"broadlink: "))
        assert said.startswith(b"broadlink: 127.0.0.1:") and said.endswith(b"switched the relay OFF")
        assert dev.check_power() is False
        dev.set_power(True)
        assert state(log, "bl-ctl", lambda s: s["relay"] == "ON")
        assert dev.check_power() is True
    finally:
        log.close()


def test_a_reboot_expires_sessions_and_the_client_authenticates_again(broker, simnodes):
    port, node, log = watched(simnodes, broker, "bl-boot", "read")
    try:
        before = state(log, "bl-boot")
        dev = broadlink.sp3s(("127.0.0.1", port), sim_mac("bl-boot"), 0x947A, timeout=5)
        dev.auth()
        assert dev.get_energy() == 500.0
        log.c.publish("wattlog/bl-boot/cmd", json.dumps({"cmd": "reboot"}), qos=1)
        log.next("wattlog/bl-boot/log", lambda p: b"rebooting" in p)
        log.next("wattlog/bl-boot/status", lambda p: p == b"online", timeout_s=30)
        with pytest.raises(blerr.AuthorizationError) as e:
            dev.get_energy()
        assert e.value.errno == -7  # "Control key is expired"
        dev.auth()
        state(log, "bl-boot", lambda s: s["time"] > before["time"])  # a slot of this boot
        assert dev.get_energy() == 500.0
    finally:
        log.close()
    node.stop()
    assert "simnode: the node reset itself" in node.output


def auth_datagram(dev):
    """python-broadlink's auth request, as Device.auth() and send_packet() make it."""
    payload = bytearray(0x50)
    payload[0x04:0x14] = [0x31] * 16
    payload[0x1E] = 0x01
    payload[0x2D] = 0x01
    payload[0x30:0x36] = b"Test 1"
    packet = bytearray(0x38)
    packet[0x00:0x08] = bytes.fromhex("5aa5aa555aa5aa55")
    packet[0x24:0x26] = (0x947A).to_bytes(2, "little")
    packet[0x26:0x28] = (0x65).to_bytes(2, "little")
    packet[0x2A:0x30] = dev.mac[::-1]
    packet[0x34:0x36] = (sum(payload, 0xBEAF) & 0xFFFF).to_bytes(2, "little")
    packet.extend(dev.encrypt(payload))
    packet[0x20:0x22] = (sum(packet, 0xBEAF) & 0xFFFF).to_bytes(2, "little")
    return bytes(packet)


FLOOD = 60000  # datagrams: a third garbage, a third hellos, a third auth requests


def test_a_datagram_flood_does_not_starve_sampling_and_auth_is_rate_limited(
        broker, collectors, simnodes, tmp_path):
    """20000 s of node time as fast as the loop goes, under a bounded loopback flood of
    malformed datagrams, hellos and auth requests: every slot is produced and stored, the
    node answered at most AUTH_BURST + AUTH_PER_S a second of auths."""
    data = tmp_path / "data"
    c = collectors(broker.url, data, commit_interval=5)
    c.wait_for("listening on")
    port = free_udp_port()
    node = simnodes(broker.port, "bl-flood", "--profile", "constant:500", "--speed", "max",
                    "--start", aligned_past(20000),
                    "--config", json.dumps({"broadlink": "read", "broadlink_port": port}))
    dev = broadlink.sp3s(("127.0.0.1", port), sim_mac("bl-flood"), 0x947A)
    hello = bytearray(0x30)  # python-broadlink's discovery datagram
    hello[0x26] = 6
    hello[0x20:0x22] = (sum(hello, 0xBEAF) & 0xFFFF).to_bytes(2, "little")
    kinds = [b"\x5a\xa5\xaa\x55" * 30, bytes(hello), auth_datagram(dev)]
    began = time.monotonic()

    def send(i):
        try:
            sock.sendto(kinds[i % 3], ("127.0.0.1", port))
        except OSError:
            pass  # nothing bound yet (port unreachable) or a full buffer
        return 1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        s, sent = finish_flooded(node, send, limit=FLOOD)
    elapsed_s = time.monotonic() - began
    assert c.stop() == 0
    rows = wattlog("export", "--fill", "--data", data, "--feed", "bl-flood/power").splitlines()
    assert s["produced"] >= 1999 and len(rows) - 1 == s["produced"]
    assert all(r.endswith(",500") for r in rows[1:])
    counts = s["broadlink_counts"]
    print("flood: %d datagrams sent in %.1f s; the node took %s" % (sent, elapsed_s, counts))
    assert counts["requests"] >= 300, counts  # the flood reached it
    assert counts["dropped"] >= 100 and counts["auth_limited"] >= 100, counts
    assert counts["auths"] <= AUTH_BURST + AUTH_PER_S * elapsed_s + 1, counts


def test_off_listens_on_nothing(broker, simnodes):
    port, node, log = watched(simnodes, broker, "bl-off", "off")
    try:
        state(log, "bl-off")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(5)
            s.connect(("127.0.0.1", port))
            s.send(bytes(0x30))
            with pytest.raises(ConnectionRefusedError):  # the kernel: no socket on that port
                s.recv(256)
        s = stop_after_info(node, log, log, "bl-off")
    finally:
        log.close()
    assert s["broadlink"] == "off" and s["broadlink_counts"] is None


def tight_run(broker, collectors, simnodes, tmp_path, node_id, heap_kib, reader):
    """test_pipeline.py's limited-heap run (the .mpy files a plug runs, a 32 KiB ring, a
    BL0937), four hours of node time, with broadlink "read" on and, when `reader`, a client
    reading the power all along once the port is bound. Every slot is stored; returns the
    node's summary, the powers read and the node's output."""
    collector = collectors(broker.url, tmp_path / node_id, commit_interval=300)
    collector.wait_for("listening on")
    port = free_udp_port()
    node = simnodes(broker.port, node_id, "--mpy", "--heap-kib", heap_kib, "--board",
                    "devkit-bl0937", "--profile", "washer", "--start", aligned_past(4 * 3600),
                    "--speed", "max",
                    "--config", json.dumps({"broadlink": "read", "broadlink_port": port}))
    read = []

    def client():
        dev = broadlink.sp3s(("127.0.0.1", port), sim_mac(node_id), 0x947A, timeout=2)
        while node.proc.poll() is None:
            try:
                if dev.id == 0:
                    dev.auth()
                read.append(dev.get_energy())
            except (blerr.BroadlinkException, OSError):
                time.sleep(0.05)  # no slot yet
    t = threading.Thread(target=client)
    if reader:
        wait_bound(port)
        t.start()
    try:
        s = node.finish()
    finally:
        if reader:
            t.join()
    assert s["unsent"] == 0 and s["produced"] >= 1440
    assert collector.stop() == 0
    rows = wattlog("export", "--fill", "--data", tmp_path / node_id, "--feed", node_id + "/power").splitlines()
    assert len(rows) - 1 == s["produced"]
    return s, read, node.output


def test_broadlink_in_the_limited_heap(broker, collectors, simnodes, tmp_path, built):
    """In the limited heap of test_pipeline.py, the node with broadlink on answers a client
    all along its run (the .mpy files: the `built` fixture)."""
    s, read, output = tight_run(broker, collectors, simnodes, tmp_path, "tight-bl", HEAP_KIB, True)
    print("limited heap: %d get_energy answered; counts %s" % (len(read), s["broadlink_counts"]))
    assert read and s["broadlink_counts"]["requests"] >= len(read), output
    assert "no heap left" not in output and "crash" not in output


def test_provision_and_deploy_set_the_mode(tmp_path):
    """`wattlog provision --broadlink` writes the mode into the named plugs' config.json and a
    later run without it keeps it; `tools/deploy --broadlink` copies a config.json with the
    mode set, created 0600 (it holds the broker password)."""
    import os
    import deploy
    from wattnode import config
    d = tmp_path / "prov"
    wattlog("provision", "--dir", d, "--broker-host", "192.168.1.10", "--broadlink", "control",
            "plug-a")
    wattlog("provision", "--dir", d, "--broker-host", "192.168.1.10", "plug-a", "plug-b")
    a = json.loads((d / "nodes" / "plug-a" / "config.json").read_text())
    b = json.loads((d / "nodes" / "plug-b" / "config.json").read_text())
    assert a["broadlink"] == "control" and "broadlink" not in b
    assert config.check(a)[1] == []  # the node takes it as it is
    path = deploy.with_broadlink(str(d / "nodes" / "plug-a" / "config.json"), "read")
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert json.loads(open(path).read()) == dict(a, broadlink="read")
