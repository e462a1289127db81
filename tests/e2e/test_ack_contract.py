"""test_ack_contract.py - every ack the collector publishes is one the node takes
(lib/wattnode/wire.py's ack table, parsed by the same wire.parse_ack the node runs), through a
real mosquitto: the clock answer to "online", the resend request for a hole, and the retained
ack of a commit. A test user plays the plug."""

import sys
import time

from helpers import REPO
from rig import Recorder
from wattlog.store.nodes import parse_ack
from wattnode import wire

sys.path.insert(0, str(REPO / "tests" / "host"))
from batches import batch  # noqa: E402

NODE = "ackplug"
ACK_TOPIC = "wattlog/%s/ack" % NODE


def next_ack(session, timeout_s=15.0):
    """The next message on the node's ack topic: its payload (bytes)."""
    return session.next(ACK_TOPIC, timeout_s=timeout_s)[0]


def test_a_collector_committing_once_a_day_or_less_still_gives_the_node_its_clock(
        broker, collectors, tmp_path):
    """A collector whose commit interval is longer than a day (the node refuses a commit_s
    over 86400 as not what a collector sends: before, such a collector's plugs got no clock
    and no energy total at all) answers "online" with a commit_s of a day; a hole in a
    node's batches is asked for with a RESEND; the commit at shutdown leaves a retained ACK
    that the node and the collector's own start-up both read."""
    c = collectors(broker.url, tmp_path / "data", commit_interval=100000)
    c.wait_for("listening on")
    plug = Recorder(broker, ACK_TOPIC, name=NODE)
    try:
        plug.publish("wattlog/%s/status" % NODE, b"online", retain=True)
        kind, ack = wire.parse_ack(next_ack(plug))
        assert (kind, ack["commit_s"]) == (wire.CLOCK, 86400)
        assert abs(ack["time"] - time.time()) < 60

        t0 = (int(time.time()) - 600) // 10 * 10  # records 5..7 of boot 7: 0..4 still held
        records = [(t0 + 10 * k, 100.0, 5 + k, 230.0, 0.5) for k in range(3)]
        plug.publish("wattlog/%s/readings" % NODE, batch(records, boot=7, seq=5, held=0))
        kind, ack = wire.parse_ack(next_ack(plug))
        assert kind == wire.RESEND and (ack["boot"], ack["seq"], ack["resend"]) == (7, 0, 0)

        assert c.stop() == 0  # the commit at shutdown acknowledges what it holds
        payload = next_ack(plug)
        kind, ack = wire.parse_ack(payload)
        assert kind == wire.ACK and (ack["boot"], ack["seq"]) == (7, 0) and ack["commit"] >= 1
        assert parse_ack(payload) == {k: ack[k] for k in ("boot", "seq", "time", "commit")}
    finally:
        plug.close()
