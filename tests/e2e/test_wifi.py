"""test_wifi.py - a plug's Wi-Fi, simulated as a plug's radio behaves (simnode --wifi: the
networks in range; the plug joins only the one its config.json names): a plug whose config
names no Wi-Fi says so on its console at every boot, since the console is all such a plug has
(issue 21 item 1: a provisioned plug had no Wi-Fi and nothing said why); one whose config
names a network in range joins it and reaches the broker; one that names another network
never connects."""

import json
import os
import select
import time

from helpers import aligned_past
from rig import Recorder

NO_WIFI = "config.json has no wifi.ssid: this plug cannot join a network nor reach its broker"


def read_until(node, done, timeout_s=60):
    """The node's output until done(output) holds (bounded); the output. Then the node is
    killed: one that cannot reach its broker would wait out its drain at a clean stop."""
    out, deadline, fd = "", time.monotonic() + timeout_s, node.proc.stdout.fileno()
    while time.monotonic() < deadline and not done(out):
        if select.select([fd], [], [], 0.5)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out += chunk.decode(errors="replace")
    node.proc.kill()
    assert done(out), out
    return out


def crashes(out):
    """The status each crash printed (a reboot follows each)."""
    return [json.loads(line[len("crash "):]) for line in out.splitlines()
            if line.startswith("crash {")]


def test_a_plug_without_wifi_says_so_at_every_boot(broker, simnodes):
    """Two boots (the simulated crash reboots it), two lines saying what is missing and how to
    give it; it never connects."""
    node = simnodes(broker.port, "nowifi", "--wifi", "home", "--speed", "60",
                    "--start", aligned_past(3600), "--crash-after", "30")
    out = read_until(node, lambda out: len(crashes(out)) >= 2 and out.count(NO_WIFI) >= 2)
    boots = out.split("simnode: the node reset itself")
    assert all(NO_WIFI in boot for boot in boots[:2]), out
    assert "wattlog provision --wifi-ssid NAME" in out
    assert all(c["connects"] == 0 and c["rssi_dbm"] is None for c in crashes(out)), out


def test_a_plug_joins_only_the_network_its_config_names(broker, simnodes):
    """The network in range: it connects (its retained status says online). Another one: it
    never connects, and says nothing about a missing Wi-Fi (it has one)."""
    watch = Recorder(broker, "wattlog/+/status", name="wifi-watch")
    joins = simnodes(broker.port, "joins", "--wifi", "home,guest", "--config",
                     '{"wifi": {"ssid": "home", "password": "correct horse"}}',
                     "--speed", "max", "--start", aligned_past(300))
    elsewhere = simnodes(broker.port, "elsewhere", "--wifi", "home", "--config",
                         '{"wifi": {"ssid": "neighbour", "password": "correct horse"}}',
                         "--speed", "60", "--start", aligned_past(3600), "--crash-after", "30")
    watch.wait(lambda: ("wattlog/joins/status", b"online") in watch.seen, "joins online", 60)
    out = read_until(elsewhere, lambda out: crashes(out))
    assert NO_WIFI not in out and crashes(out)[0]["connects"] == 0
    assert ("wattlog/elsewhere/status", b"online") not in watch.seen
    watch.close()
    joins.stop()
