"""test_pg_store.py - the collector storing into PostgreSQL (`store = "postgresql://..."`, the
cluster's store, store/postgres.py) behind a real mosquitto, with real-firmware plugs: every
slot the meters produced is in the database with exactly the value measured (recomputed from
the load profile, as test_pipeline.py does for the files); the collector stopped by SIGKILL
mid-run loses nothing (the plugs send again what no ack covered); the HTTP API, emoncms's API
and `wattlog export` read it as they read the files. A private PostgreSQL on a loopback port
(tools/lib/pgserver.py)."""

import json
import subprocess
import sys
import urllib.request

import numpy as np
import pytest

from helpers import REPO, aligned_past
from measured import INTERVAL, expected
from rig import Collector, summary, wait_answer

pytest.importorskip("pgserver")


def call(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=30) as r:
        body = r.read()
    return json.loads(body) if body[:1] in b"[{" else body.decode()


def wait_api(port, path, ok, timeout_s=120):
    return wait_answer(path, lambda: call(port, path), ok, timeout_s)


@pytest.mark.realtime
def test_postgresql_keeps_every_slot_exactly_through_a_kill(broker, simnodes, tmp_path, pg):
    """Two plugs, three hours of node time each as fast as they go and then live, into a
    collector that is SIGKILLed while they run and started again (the plugs send again what
    no ack covered): every slot stored with the value measured;
    the API's feeds and raw series, emoncms's data.json and `wattlog export` agree with it."""
    c = Collector(broker.url, tmp_path / "data", commit_interval=1, store=pg, listen=True)
    port = c.port
    wait_api(port, "/api/health", lambda got: got["ready"])  # its session holds the readings
    start = aligned_past(3 * 3600)
    plugs = {"washer-1": "washer", "heatpump-1": "heatpump"}
    nodes = {nid: simnodes(broker.port, nid, "--profile", prof, "--speed", "max", "--start",
                           start, "--interval", INTERVAL, "--then-realtime")
             for nid, prof in plugs.items()}
    wait_api(port, "/api/feeds", lambda got: sum(f["points"] or 0 for f in got["feeds"]) > 200)
    c.kill()  # a power cut of the collector's machine: what it had not committed is resent
    c.restart()  # on the same port, its log appended
    try:
        live = aligned_past(0) + 2 * INTERVAL  # a few slots measured live, in real time
        for nid in plugs:  # caught up with the present, through the kill, and on live
            wait_api(port, "/api/plugs/%s" % nid, lambda got: got["acked_seq"] is not None and
                     got["state"] and got["state"]["time"] >= live)
        for n in nodes.values():
            n.stop()  # it sends what it holds, then says what it produced
        summaries = {nid: summary(n.output) for nid, n in nodes.items()}
        served = {}  # per plug and channel, the values the API serves
        for nid, s in summaries.items():
            wait_api(port, "/api/plugs/%s" % nid,
                     lambda got, n=s["produced"]: got["acked_seq"] is not None and
                     got["acked_seq"] >= n)
        for nid, s in summaries.items():
            n = s["produced"]
            assert s["first_slot"] == start and s["dropped"] == 0, s
            want = expected(plugs[nid], start, n)
            served[nid] = {}
            for channel, values in want.items():
                got = call(port, "/api/series?feed=%s/%s&start=%d&end=%d&points=100000"
                           % (nid, channel, start, start + n * INTERVAL))
                assert got["raw"] and got["time"] == [start + INTERVAL * k for k in range(n)]
                # exact to the last slot too: the live ones are polled within seconds (the
                # simulated meter counts each second once, test_sampler.py)
                stored = np.array(got["value"], dtype="<f4")
                off = np.flatnonzero(stored != values).tolist()
                assert off == [], (nid, channel, n, off[:5], stored[off[:5]], values[off[:5]])
                served[nid][channel] = list(stored)
            feed = call(port, "/emoncms/feed/list.json")
            fid = next(f["id"] for f in feed if f["tag"] == nid and f["name"] == "power")
            rows = call(port, "/emoncms/feed/data.json?id=%s&start=%d&end=%d&interval=10"
                        % (fid, start * 1000, (start + 10 * (n - 1)) * 1000))
            assert [np.float32(v) for _, v in rows] == served[nid]["power"]
    finally:
        c.stop(60)
    out = subprocess.run([sys.executable, "-m", "wattlog.cli", "export", "--store", pg.dsn,
                          "--store-password-file", pg.password_file, "--feed",
                          "washer-1/energy", "--start", str(start)],
                         capture_output=True, text=True, timeout=60, cwd=str(REPO))
    assert out.returncode == 0, out.stderr
    rows = out.stdout.splitlines()[1:]
    assert [np.float32(r.split(",")[1]) for r in rows] == served["washer-1"]["energy"]
