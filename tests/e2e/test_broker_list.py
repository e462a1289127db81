"""test_broker_list.py - a plug that reaches any node of a broker cluster (issue 25 item 2): its
config.json's broker.host lists two mosquittos; the one it is on is stopped, and it reconnects
to the other, and the collector stores every slot (no gap). A config whose broker.host is one
string works as it always has.

The two brokers stand for a cluster's nodes, which share their messages: the second one, A,
is started here through tools/lib/broker.py as the `broker` fixture starts B, with B's
logins (a copy of its provisioning: the same plug password on both) and a mosquitto bridge to
B for wattlog/# both ways, so the collector on B hears the plug while it is on A and its acks
reach it there. The plug (the real firmware, tools/simnode) lists A first.
"""

import json
import os
import shutil
import threading

import pytest

from broker import TEST_USER, Broker
from faultload import stored_yet
from helpers import aligned_past
from rig import wait_until

INTERVAL = 10
NODE = "bl-1"


def stored_now(data):
    return stored_yet(data, NODE)


class Statuses:
    """The brokers the plug's status lines (said on its log at each connection) name, as a
    test user on `broker` hears them."""

    def __init__(self, broker):
        self.brokers = []
        self._lock = threading.Lock()
        self.c = broker.client("bl-watch")
        self.c.on_message = self._on_message
        self.c.connect("127.0.0.1", broker.port)
        self.c.subscribe("wattlog/%s/log" % NODE, 1)
        self.c.loop_start()

    def _on_message(self, client, userdata, m):
        if m.payload.startswith(b"status {"):
            with self._lock:
                self.brokers.append(json.loads(m.payload[7:])["broker"])

    def said(self, broker):
        with self._lock:
            return broker in self.brokers

    def close(self):
        self.c.loop_stop()
        self.c.disconnect()


def bridged_to(b, directory):
    """A second mosquitto with b's logins, bridged to b for wattlog/# (not started)."""
    os.makedirs(directory)
    shutil.copytree(b.auth, os.path.join(directory, "auth"))  # the same passwords
    a = Broker(directory, extra_conf=(
        "\nconnection to-b\naddress 127.0.0.1:%d\nremote_username %s\nremote_password %s\n"
        "topic wattlog/# both 1\ncleansession true\n" % (b.port, TEST_USER, b.creds[TEST_USER])))
    os.chmod(a.conf, 0o600)  # it holds the bridge's password
    return a


@pytest.mark.realtime  # a broker stopped under a plug that runs on the wall clock
def test_a_plug_moves_to_the_next_broker_when_its_own_stops_and_loses_no_slot(
        broker, collectors, simnodes, tmp_path):
    data = tmp_path / "data"
    args = broker.node_args(NODE)  # provisioned before the copy: A knows the plug too
    a = bridged_to(broker, str(tmp_path / "broker-a")).start()
    statuses = None
    try:
        c = collectors(broker.url, data, commit_interval=1)
        c.wait_for("listening on")
        statuses = Statuses(broker)
        start = aligned_past(600, INTERVAL)
        plug = simnodes(broker.port, NODE, "--broker",
                        "127.0.0.1:%d,127.0.0.1:%d" % (a.port, broker.port),
                        "--profile", "constant:500", "--interval", INTERVAL, "--speed", 10,
                        "--start", start, "--then-realtime", "--batch-max", 4, *args)
        wait_until("the plug on broker A, the first of its list",
                   lambda: statuses.said("127.0.0.1:%d" % a.port), 60)
        wait_until("slots stored through A", lambda: len(stored_now(data)) >= 5, 60)
        a.stop()
        wait_until("the plug on broker B once A stopped",
                   lambda: statuses.said("127.0.0.1:%d" % broker.port), 60)
        until = start + 50 * INTERVAL  # well past the switch (about slot 20)
        slots = range(start, until, INTERVAL)
        wait_until("every slot stored up to %d" % until,
                   lambda: all(t in stored_now(data) for t in slots), 90)
        assert all(stored_now(data)[t] == 500.0 for t in slots)
        plug.stop()
        assert "127.0.0.1:%d" % broker.port == json.loads(
            [line for line in plug.output.splitlines() if line.startswith("summary ")][-1][8:]
        )["broker"], plug.output
    finally:
        if statuses is not None:
            statuses.close()
        a.stop()


def test_one_broker_as_a_string_works_as_before(broker, collectors, simnodes, tmp_path):
    """The plug's config.json says broker.host as one string (simnode's --broker with one
    address): every slot stored, and its status names that broker."""
    data = tmp_path / "data"
    flash = tmp_path / "flash"
    c = collectors(broker.url, data, commit_interval=1)
    c.wait_for("listening on")
    start = aligned_past(3600, INTERVAL)
    plug = simnodes(broker.port, NODE, "--profile", "constant:500", "--interval", INTERVAL,
                    "--speed", "max", "--start", start, "--flash", str(flash))
    summary = plug.finish()
    with open(flash / "config.json") as f:
        assert json.load(f)["broker"]["host"] == "127.0.0.1"
    assert summary["broker"] == "127.0.0.1:%d" % broker.port
    assert summary["connects"] == 1 and summary["unsent"] == 0
    wait_until("every slot stored", lambda: all(
        t in stored_now(data) for t in range(start, start + 3600, INTERVAL)), 60)
