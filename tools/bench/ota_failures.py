"""ota_failures.py - what a bad update costs: for each way a new version can fail once it runs
(tools/lib/otabuilds.py: it crashes 20 s after boot, fills its heap at about 45 s, hangs at
20 s, publishes its readings to a wrong topic), the time from `wattlog ota` starting to the
plug saying "rolled back", whether and when the plug meters again, and the slots lost.

Each kind runs as an owner's update would: `wattlog provision`'s broker (tools/lib/broker.py),
`wattlog collect` at its default commit interval (300 s), a simulated plug at a constant 500 W
(tools/simnode: the real firmware, live after catching up), `wattlog ota` with its default
120 s trial (--trial to change it). The run ends when the plug has metered two slots on the
previous version again, or stopped for good (safe mode: its firmware exits), or BOUND_S after
the update began. Then the plug and the collector stop (the collector commits), and the power
feed is read back with `wattlog export --fill`: slots lost are the empty slots from the last
slot before the update to the last one stored. "counted" is what the collector counts as lost
for the plug (`wattlog nodes`: lost readings) and what the plug said it lost ("lost" in its
ota/status).

    tools/bench/ota_failures [--trial S] [--kinds crash,leak,hang,wrong-topic]

About 4 minutes a kind, one after the other (they run in real time).
"""

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "lib"))

from broker import Broker  # noqa: E402
from rig import Collector, SimPlug  # noqa: E402
from otabuilds import Builds  # noqa: E402
from wattlog.fleet.provision import OPERATOR  # noqa: E402
from wattlog.mqtt import close  # noqa: E402

BOUND_S = 420
NODE = "bench-ota"
INTERVAL_S = 10


def wattlog(*argv, check=True):
    return subprocess.run([sys.executable, "-m", "wattlog.cli"] + [str(a) for a in argv],
                          capture_output=True, text=True, check=check, timeout=120).stdout


class Watch:
    """Every message on the plug's topics, with the time it came."""

    def __init__(self, broker):
        self.q = queue.Queue()
        self.c = broker.client("ota-bench-watch")
        self.c.on_message = lambda c, u, m: self.q.put((time.time(), m.topic.split("/", 2)[2],
                                                        m.payload, m.retain))
        self.c.connect("127.0.0.1", broker.port)
        self.c.subscribe("wattlog/%s/#" % NODE, qos=1)
        self.c.loop_start()

    def next(self, timeout_s):
        try:
            return self.q.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def ask_info(self):
        self.c.publish("wattlog/%s/cmd" % NODE, json.dumps({"cmd": "info"}), qos=1)

    def close(self):
        close(self.c)


def one(kind, trial_s, builds, work):
    build = builds.failing(kind.replace(" ", "-"), "0.5.0-bench", kind)
    with Broker(os.path.join(work, "mosquitto")) as b:
        data = os.path.join(work, "data")
        collector = Collector(b.url, data, log_path=os.path.join(work, "collector.log"))
        start = int(time.time()) - 60
        flash = os.path.join(work, "flash")
        os.makedirs(flash)
        plug = SimPlug(b.port, NODE, "--profile", "constant:500", "--speed", "max", "--start",
                       start - start % INTERVAL_S, "--then-realtime", "--flash", flash,
                       broker=b).proc
        watch = Watch(b)
        try:
            return _update(kind, trial_s, b, build, watch, plug, data)
        finally:
            watch.close()
            if plug.poll() is None:
                plug.send_signal(signal.SIGTERM)
            plug.communicate(timeout=60)
            collector.stop(60)


def _update(kind, trial_s, b, build, watch, plug, data):
    deadline = time.time() + 60
    while True:  # the plug is up and has sent a state: it meters
        m = watch.next(1.0)
        if m and m[1] == "state" and not m[3]:
            break
        if time.time() > deadline:
            raise RuntimeError("the plug never came up")
    t0 = time.time()
    tool = subprocess.Popen(
        [sys.executable, "-m", "wattlog.cli", "ota", NODE, "--dir", b.auth, "--build", build,
         "--broker", "mqtt://%s@127.0.0.1:%d" % (OPERATOR, b.port), "--password-file",
         b.password_file(OPERATOR), "--trial", str(trial_s)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    row = {"kind": kind, "tool": None, "confirmed_s": None, "rolled_back_s": None,
           "reason": None, "said_lost": None, "metering_again_s": None, "safe_mode_s": None}
    states_after = 0
    while time.time() < t0 + BOUND_S:
        m = watch.next(0.5)
        if tool.poll() is not None and row["tool"] is None:
            out = tool.communicate()[0]
            row["tool"] = " ".join(next((l for l in out.splitlines() if l.startswith(NODE)),
                                        out).split()[4:])
        if plug.poll() is not None:
            row["safe_mode_s"] = round(time.time() - t0)  # its firmware ended: safe mode
            break
        if m is None:
            continue
        when, topic, payload, retained = m
        if retained:
            continue
        if topic == "ota/status":
            st = json.loads(payload)
            if st["state"] == "confirmed" and row["confirmed_s"] is None:
                row["confirmed_s"] = round(when - t0, 1)
            if st["state"] == "rolled back" and row["rolled_back_s"] is None:
                row["rolled_back_s"] = round(when - t0, 1)
                row["reason"] = st.get("reason")
                row["said_lost"] = st.get("lost")
        elif topic == "state" and row["rolled_back_s"] is not None:
            states_after += 1
            if states_after == 1:
                row["metering_again_s"] = round(when - t0)
            if states_after >= 2 and row["tool"] is not None:
                break
    row["end_s"] = round(time.time() - t0)
    first = int(t0) - int(t0) % INTERVAL_S - INTERVAL_S
    if plug.poll() is None:
        plug.send_signal(signal.SIGTERM)
        plug.communicate(timeout=60)
    return row, first, data


def lost_slots(data, first, end):
    """(empty slots, slots) of the power feed from `first`: up to the last one stored, or up
    to `end` (unix s) for a plug that stopped metering; and the collector's count of lost."""
    rows = wattlog("export", "--fill", "--data", data, "--feed", NODE + "/power", "--start",
                   first, "--end", end or int(time.time())).splitlines()[1:]
    values = [r.split(",")[1] for r in rows]
    while end is None and values and values[-1] == "":
        values.pop()  # after the last stored slot: not lost, not there yet
    nodes = {n["node"]: n for n in json.loads(wattlog("nodes", "--data", data, "--json"))}
    return values.count(""), len(values), (nodes.get(NODE) or {}).get("lost")


def main():
    p = argparse.ArgumentParser(prog="tools/bench/ota_failures")
    p.add_argument("--trial", type=int, default=120)
    p.add_argument("--kinds", default="crash,leak,hang,wrong-topic")
    args = p.parse_args()
    subprocess.run([os.path.join(REPO, "tools", "build")], check=True, capture_output=True)
    root = tempfile.mkdtemp(prefix="ota-bench-")
    builds = Builds(os.path.join(root, "builds"), os.path.join(REPO, "build", "device"))
    print("%-12s %-38s %9s %11s %9s %9s %6s %8s" % ("failure", "wattlog ota said", "confirmed",
                                                    "rolled back", "metering", "safe mode",
                                                    "lost", "counted"))
    for kind in args.kinds.split(","):
        kind = kind.replace("-", " ")
        work = os.path.join(root, kind.replace(" ", "-"))
        os.makedirs(work)
        row, first, data = one(kind, args.trial, builds, work)
        lost, slots, counted = lost_slots(data, first, first + INTERVAL_S + row["end_s"]
                                          if row["safe_mode_s"] is not None else None)

        def s(v):
            return "-" if v is None else "%s s" % v
        print("%-12s %-38s %9s %11s %9s %9s %6s %8s" % (
            kind, (row["tool"] or "?")[:38], s(row["confirmed_s"]), s(row["rolled_back_s"]),
            s(row["metering_again_s"]), s(row["safe_mode_s"]), "%d/%d" % (lost, slots),
            "%s/%s" % (counted, row["said_lost"])), flush=True)
        if row["reason"]:
            print("    reason: %s" % row["reason"], flush=True)


if __name__ == "__main__":
    main()
