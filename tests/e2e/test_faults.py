"""test_faults.py - the fault suite: no reading is lost to any single failure.

Three or more simulated plugs (the real firmware, 100x clock: ten readings a second each)
send to a real mosquitto while the failures happen; the collector commits every few seconds.
After each scenario every reading the plugs produced must be in the PHPFina files exactly
once, with its value - except, accounted for precisely, what a crashed plug had not sent and
what a full ring dropped (which the plug and the collector both report). Each scenario adds a
row to the produced / stored / lost table printed at the end of the run (conftest.py).

Plugs draw a different constant load each (500, 750, 1000 W...), so a reading that landed
in another plug's feed would show.

Real time, not free-running (simnode --speed max): each failure is timed in wall time (a
SIGKILL, a broker restart, a link cut) and must land while the plugs are producing and
sending, and the plug's and the collector's own timeouts (PUBACK, acks, back-off) are real
time too.
"""

import json
import os
import random
import signal
import time

import numpy as np
import pytest

from helpers import REPO, summaries, wattlog
from netcut import Relay
from wattlog.store.feeds import Registry
from wattlog.store.phpfina import Feed

pytestmark = pytest.mark.realtime

SPEED = 100
INTERVAL = 10
# One JSON line per scenario: (scenario, produced, stored, lost, seconds). A file, not a list:
# the scenarios may run in other processes (pytest-xdist); conftest.py prints the table.
ROWS_FILE = REPO / "build" / "test-results" / "fault-rows.jsonl"


def stored(data, node):
    """{slot time: watts} of every slot of node's power feed that holds a value."""
    entry = Registry(str(data)).find(node, "power")
    if entry is None:
        return {}
    feed = Feed.open(os.path.join(str(data), "phpfina"), entry["id"])
    values = feed.read(0, feed.npoints())
    return {feed.time(i): float(v) for i, v in enumerate(values) if not np.isnan(v)}


def crashes(output):
    """The node's status at each crash of one simnode (the "crash {...}" line start.py
    prints after the crash text)."""
    return [json.loads(line[len("crash "):]) for line in output.splitlines()
            if line.startswith("crash {")]


def runs_of(output):
    """[(first slot, readings, unsent, never sent)] for every boot of one simnode, from its
    status: at a crash (crash lines), or at a clean end (summaries: nothing unsent)."""
    out = []
    for line in output.splitlines():
        if line.startswith("crash {"):
            s = json.loads(line[len("crash "):])
            out.append((s["first_slot"], s["produced"], s["unsent"], s["never_sent"]))
        elif line.startswith("summary "):
            s = json.loads(line[len("summary "):])
            assert s["produced"] == (s["last_slot"] - s["first_slot"]) // INTERVAL + 1, s
            out.append((s["first_slot"], s["produced"], s["unsent"], s["unsent"]))
    return out


def account(scenario, data, nodes, began, allowed_lost=None):
    """Check every node's feed against what it produced; add the scenario's table row.
    allowed_lost(node, boot_index, lost, run) -> None raises when a loss is not accounted for;
    without it nothing may be lost."""
    produced = kept = lost = 0
    for node, watts, proc_output in nodes:
        have = stored(data, node)
        runs = runs_of(proc_output)
        assert runs, proc_output[-3000:]
        slots = set()
        for i, run in enumerate(runs):
            first, n, unsent, never = run
            mine = set(range(first, first + n * INTERVAL, INTERVAL))
            missing = mine - set(have)
            if allowed_lost is None:
                assert not missing, "%s lost %d readings of boot %d, e.g. %s" % (
                    node, len(missing), i, sorted(missing)[:5])
            else:
                allowed_lost(node, i, len(missing), run)
            produced += n
            lost += len(missing)
            slots |= mine
        extra = set(have) - slots
        assert not extra, "%s has %d slots it never produced, e.g. %s" % (node, len(extra), sorted(extra)[:5])
        wrong = {t: v for t, v in have.items() if v != watts}
        assert not wrong, "%s: values not its %d W: %s" % (node, watts, list(wrong.items())[:5])
        kept += len(have)
    ROWS_FILE.parent.mkdir(parents=True, exist_ok=True)
    with open(ROWS_FILE, "a") as f:  # one short write: lines from several processes stay whole
        f.write(json.dumps([scenario, produced, kept, lost, time.monotonic() - began]) + "\n")
    assert kept + lost == produced
    return produced, kept, lost


def start_plugs(simnodes, port, names, seconds, *extra, speed=SPEED):
    start = int(time.time()) - seconds * speed
    start -= start % INTERVAL
    return [simnodes(port, name, "--profile", "constant:%d" % (500 + 250 * i), "--speed", speed,
                     "--start", start, "--batch-max", 16, *extra)
            for i, name in enumerate(names)]


def finish(plugs, timeout_s=120):
    outs = []
    deadline = time.monotonic() + timeout_s
    for p in plugs:
        try:
            out, _ = p.proc.communicate(timeout=max(1, deadline - time.monotonic()))
        except Exception:
            p.proc.kill()
            out, _ = p.proc.communicate()
            raise AssertionError("a plug did not finish:\n" + out[-3000:])
        p.output = out
        assert p.proc.returncode == 0, out[-3000:]
        outs.append(out)
    return outs


def watts(i):
    return 500 + 250 * i


def test_collector_killed_at_random_ten_times(broker, collectors, simnodes, tmp_path):
    began = time.monotonic()
    data = tmp_path / "data"
    rng = random.Random(4)
    c = collectors(broker.url, data, commit_interval=5)
    c.wait_for("listening on")
    names = ["kill-a", "kill-b", "kill-c"]
    plugs = start_plugs(simnodes, broker.port, names, 55)
    for k in range(10):
        time.sleep(rng.uniform(1.0, 4.0))  # always shorter than the commit interval
        c.kill()
        c = collectors(broker.url, data, commit_interval=5)
        c.wait_for("listening on")
    outs = finish(plugs)
    assert c.stop() == 0
    account("collector SIGKILLed 10x", data,
            [(n, watts(i), o) for i, (n, o) in enumerate(zip(names, outs))], began)
    for p in plugs:
        s = summaries(p.output)[-1]
        assert s["acks"] > 0 and s["resends"] > 0 and s["bad_acks"] == 0, s


def test_broker_stopped_and_restarted(broker, collectors, simnodes, tmp_path):
    began = time.monotonic()
    data = tmp_path / "data"
    c = collectors(broker.url, data, commit_interval=5)
    c.wait_for("listening on")
    names = ["brk-a", "brk-b", "brk-c"]
    plugs = start_plugs(simnodes, broker.port, names, 40)
    time.sleep(10)
    broker.stop()       # no persistence: queued batches and retained acks are gone
    time.sleep(4)
    broker.start()
    outs = finish(plugs)
    assert c.stop() == 0
    account("broker restarted", data,
            [(n, watts(i), o) for i, (n, o) in enumerate(zip(names, outs))], began)
    assert "lost the broker" in c.log()


def test_link_cut_longer_than_the_commit_interval(broker, collectors, simnodes, tmp_path):
    began = time.monotonic()
    data = tmp_path / "data"
    c = collectors(broker.url, data, commit_interval=5)
    c.wait_for("listening on")
    names = ["cut-a", "cut-b", "cut-c"]
    with Relay(broker.port) as relay:
        plugs = start_plugs(simnodes, relay.port, names, 55)
        time.sleep(8)
        relay.cut()     # silent, as Wi-Fi fails: no RST, no FIN
        time.sleep(20)  # > commit interval, > the 15 s PUBACK timeout, < the ring (307 s)
        relay.heal()
        outs = finish(plugs)
    assert c.stop() == 0
    account("node-broker link cut 20 s", data,
            [(n, watts(i), o) for i, (n, o) in enumerate(zip(names, outs))], began)
    for o in outs:
        assert "no PUBACK for a batch" in o or "cannot connect" in o, o[-2000:]


def test_nodes_rebooted_cleanly_and_by_crash(broker, collectors, simnodes, tmp_path):
    """A reboot command drains first: nothing lost. A crash loses at most the readings the
    plug had not got acknowledged by the broker, and at least those it never sent; the crash
    log says both numbers."""
    began = time.monotonic()
    data = tmp_path / "data"
    c = collectors(broker.url, data, commit_interval=5)
    c.wait_for("listening on")
    names = ["boot-a", "boot-b", "boot-c"]
    plugs = start_plugs(simnodes, broker.port, names[:2], 40)
    plugs += start_plugs(simnodes, broker.port, names[2:], 40, "--crash-after", 1500)
    time.sleep(10)
    cmd = broker.client("faults-cmd")
    cmd.connect("127.0.0.1", broker.port)
    cmd.loop_start()
    cmd.publish("wattlog/boot-a/cmd", json.dumps({"cmd": "reboot"}), qos=1).wait_for_publish(5)
    time.sleep(1)
    cmd.loop_stop()
    cmd.disconnect()
    outs = finish(plugs)
    assert c.stop() == 0
    assert len(summaries(outs[0])) == 2, outs[0][-3000:]  # rebooted once, cleanly
    crashed = len(crashes(outs[2]))
    assert crashed >= 2, outs[2][-3000:]

    def crash_losses(node, boot, lost, run):
        first, n, unsent, never = run
        assert never <= lost <= unsent, (node, boot, lost, run)

    produced, kept, lost = account(
        "node rebooted (boot-a by command, boot-c crashed %dx)" % crashed,
        data, [(n, 500 + 250 * (i if i < 2 else 0), o)
               for i, (n, o) in enumerate(zip(names, outs))], began, crash_losses)
    nodes = json.loads(wattlog("nodes", "--data", data, "--json"))
    boots = {n["node"]: n["boots"] for n in nodes}
    assert boots == {"boot-a": 2, "boot-b": 1, "boot-c": crashed + 1}, nodes


def test_an_outage_longer_than_the_ring(broker, collectors, simnodes, tmp_path):
    """A 4 KiB ring (the smallest) holds 256 readings, 12.8 s at 200x; a 25 s cut overflows it.
    The plug
    drops its oldest readings and says how many; the collector counts the same gap; every
    other reading is stored."""
    began = time.monotonic()
    data = tmp_path / "data"
    c = collectors(broker.url, data, commit_interval=2)
    c.wait_for("listening on")
    names = ["ring-a", "ring-b", "ring-c"]
    with Relay(broker.port) as relay:
        plugs = start_plugs(simnodes, relay.port, names, 50, "--ring-kib", 4, speed=200)
        time.sleep(8)
        relay.cut()
        time.sleep(25)
        relay.heal()
        outs = finish(plugs)
    assert c.stop() == 0
    reported = {}

    def dropped_only(node, boot, lost, run):
        reported[node] = lost

    account("outage longer than the ring", data,
            [(n, watts(i), o) for i, (n, o) in enumerate(zip(names, outs))], began, dropped_only)
    state = json.loads((data / "commit.json").read_text())["nodes"]
    for n, o in zip(names, outs):
        s = summaries(o)[-1]
        assert reported[n] > 0, "the cut should have overflowed %s's ring" % n
        assert reported[n] <= s["dropped"], (n, reported[n], s)  # only what the ring dropped
        assert state[n]["lost"] == reported[n], (n, state[n], reported[n])  # counted exactly
        assert state[n]["gaps"] >= 1
