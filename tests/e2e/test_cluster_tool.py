"""test_cluster_tool.py - tools/cluster, the cluster on one machine in one command (README
"Past one Pi"): it prints a dashboard's address, that collector's HTTP API lists every plug
and serves the real-firmware plug's readings (from the shared PostgreSQL), and a Ctrl-C
(SIGINT) stops everything it started: no process of it is left (the NATS nodes, the
collectors, the plugs, PostgreSQL, whose pg_ctl made it no child of the tool) and its folder
is gone. Meanwhile, a login that reads the plugs' acks sees each light plug acknowledged at
each commit after its batch (every 10 s here), not only when its ack is retained again (at most
once a minute, cluster.py): the acks go out live.
"""

import json
import os
import queue
import re
import signal
import subprocess
import threading
import urllib.request

import pytest
from wattnode import wire

from helpers import REPO
from proctree import descendants
from rig import wait_until
from wattlog.mqtt import close

pytestmark = [pytest.mark.xdist_group("cluster"), pytest.mark.realtime]
pytest.importorskip("natscluster")
pytest.importorskip("pgserver")
clustertool = pytest.importorskip("clustertool")
mqtt = pytest.importorskip("paho.mqtt.client")

LIGHT = 12


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.load(r)
    except (OSError, ValueError):
        return None


def test_one_command_runs_a_cluster_and_ctrl_c_stops_it_all():
    tool = subprocess.Popen([str(REPO / "tools" / "cluster"), "--light", str(LIGHT), "--real",
                             "1", "--partitions", "8", "--batch-s", "10"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines = queue.Queue()
    said = []

    def read():
        for line in tool.stdout:
            said.append(line)
            lines.put(line)
    threading.Thread(target=read, daemon=True).start()
    try:
        def dashboard():
            while not lines.empty():
                m = re.match(r"dashboard: (http://127\.0\.0\.1:\d+/)", lines.get())
                if m:
                    return m.group(1)
            assert tool.poll() is None, "".join(said)
            return None
        url = wait_until("the dashboard's address", dashboard, 240)
        work = re.search(r"files, logs and data in (\S+)", "".join(said)).group(1)
        pg_root = re.search(r"PostgreSQL on \S+ \((\S+)\)", "".join(said)).group(1)
        with open(os.path.join(pg_root, "data", "postmaster.pid")) as f:
            postgres = int(f.readline())
        plugs = {"real-0"} | {"light-%03d" % i for i in range(LIGHT)}
        listed = []

        def every_plug():
            listed[:] = [p["node"] for p in (get(url + "api/plugs") or {"plugs": []})["plugs"]]
            return plugs <= set(listed)
        try:
            wait_until("every plug listed", every_plug, 180)
        except AssertionError:
            raise AssertionError("not listed: %s; the tool said:\n%s"
                                 % (sorted(plugs - set(listed)), "".join(said))) from None
        wait_until("the real plug's readings stored", lambda: [
            f for f in (get(url + "api/feeds") or {"feeds": []})["feeds"]
            if f["node"] == "real-0" and f["channel"] == "power" and f["points"] > 0], 120)
        acks_seen(work, said)
        started = descendants(tool.pid) | {postgres}
        names = []
        for pid in started:
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    names.append(f.read().replace(b"\0", b" ").decode())
            except OSError:
                pass
        joined = "\n".join(names)
        assert joined.count("nats-server") == 3 and joined.count("wattlog.cli collect") == 3, \
            joined
        tool.send_signal(signal.SIGINT)
        assert tool.wait(180) == 0, "".join(said)
    finally:
        # a failed check: the tool still stops what it started
        clustertool.stop_process(tool, 180, signal.SIGINT)
    assert "stopped\n" in said, "".join(said)
    left = [pid for pid in started if alive(pid)]
    assert left == [], left
    assert not os.path.exists(work) and not os.path.exists(pg_root)


def acks_seen(work, said):
    """Three acks of one light plug, each for more of its readings, within 50 s: its batches
    come every 10 s and each commit acks them; a retained ack alone comes once a minute."""
    port = int(re.search(r"MQTT gateways on 127\.0\.0\.1:(\d+)", "".join(said)).group(1))
    with open(os.path.join(work, "auth", "wattlog-collector.password")) as f:
        password = f.read().strip()
    seqs = {}

    def on_message(client, userdata, msg):
        try:
            kind, ack = wire.parse_ack(msg.payload)
        except wire.AckError:
            return
        if kind == wire.ACK:
            seqs.setdefault(msg.topic.split("/")[1], set()).add(ack["seq"])
    watcher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="ack-watcher")
    watcher.username_pw_set("wattlog-collector", password)
    watcher.on_connect = lambda c, u, f, rc, p: c.subscribe("wattlog/+/ack", 0)
    watcher.on_message = on_message
    watcher.connect_async("127.0.0.1", port)
    watcher.loop_start()
    try:
        wait_until("a light plug acked three times", lambda: any(
            len(v) >= 3 for n, v in list(seqs.items()) if n.startswith("light-")), 50)
    finally:
        close(watcher)
