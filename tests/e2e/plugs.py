"""plugs.py - a live simulated plug and what the tests ask of it (test_control.py,
test_broadlink.py, test_refusals.py, test_demo.py): one at a constant 500 W caught up and
then live, its summary once it has handled what was sent to it, its summary after a run
under a flood, the MAC it takes."""

import hashlib
import json
import threading
import time

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


def finish_flooded(node, send, limit=None, every=30, pause_s=0.005, timeout_s=90):
    """(the plug's summary, sends made) once its run ends by itself, flooded meanwhile by a
    thread that calls send(i) (the messages it sent: i counts them) as fast as it goes, with
    a pause_s breath every `every` messages (a bounded flood: the machine runs other work),
    until the run ends or `limit` messages went."""
    sent = [0]
    stop = threading.Event()

    def flood():
        while not stop.is_set() and node.proc.poll() is None and \
                (limit is None or sent[0] < limit):
            sent[0] += send(sent[0])
            if sent[0] % every == 0:
                time.sleep(pause_s)
    t = threading.Thread(target=flood)
    t.start()
    try:
        s = node.finish(timeout_s=timeout_s)
    finally:
        stop.set()
        t.join()
    return s, sent[0]
