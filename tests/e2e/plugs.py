"""plugs.py - a live simulated plug and what the tests ask of it (test_control.py,
test_broadlink.py, test_refusals.py, test_demo.py): one at a constant 500 W caught up and
then live, its summary once it has handled what was sent to it, the MAC it takes."""

import hashlib
import json

from helpers import aligned_past
from rig import summary


def start_live(simnodes, broker, node_id, *extra):
    return simnodes(broker.port, node_id, "--profile", "constant:500", "--speed", "max",
                    "--start", aligned_past(60), "--then-realtime", *extra)


def stop_after_info(node, client, log, node_id):
    """The plug's summary once it has handled everything the test's client sent it before: an
    info command, sent last, is answered only after them (one client's messages reach the
    plug in order); then SIGTERM, a clean stop."""
    client.publish("wattlog/%s/cmd" % node_id, json.dumps({"cmd": "info"}))
    log.next("wattlog/%s/log" % node_id, lambda p: p.startswith(b"info "))
    node.stop()
    assert node.proc.returncode == 0, node.output
    return summary(node.output)


def sim_mac(node_id):
    """The MAC a simulated plug takes (lib/wattsim/board.py): 02, locally administered, then
    the first five bytes of the sha256 of its node id."""
    return b"\x02" + hashlib.sha256(node_id.encode()).digest()[:5]
