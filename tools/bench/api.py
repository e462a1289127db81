"""api.py - what the HTTP API costs: ms per request over loopback beside query.Engine called
directly, and whether a storm of requests delays the collector's commits and acks.

1. Latency. One feed of a year of 10 s slots (tools/bench/query.py's data), committed through
   the real commit path and summarised, served by serve/app.py on a loopback port in this process;
   the same three questions as tools/bench/query (the year in ~1000 buckets, a month in
   ~1000, a day raw) asked through HTTP on one keep-alive connection (http.client) and of
   Engine.series directly. Median ms of repeated runs after a warm-up; "added" is the
   difference: routing, parameter checks, JSON encoding and the HTTP round trip.

2. Commits under load. A real `wattlog collect --listen` with sped-up plugs (tools/simnode, as
   tools/bench/writeload runs them: SPEED times real time, a commit every COMMIT_S), watched by
   an MQTT client that sees every readings batch and every retained ack. First a quiet span,
   then the same span while a separate process sends a bounded loop of loopback requests at
   RATE a second (series of a live plug, with its pending readings, and health) over several
   keep-alive connections. Per span: commits, the commit delay (how long after it was due -
   the commit interval after the first batch that waited for it - the ack of a commit came)
   and the ack latency (from a batch's arrival to the ack covering it), median / p95 / max.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.client import HTTPConnection

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "bench"))
sys.path.insert(0, os.path.join(REPO, "tools", "lib"))

from broker import Broker  # noqa: E402
from query import QUESTIONS, START, YEAR_SLOTS, year_of_data  # noqa: E402
from writeload import COMMIT_S, SPEED, sped_up_plugs, stop  # noqa: E402
from rig import Collector  # noqa: E402
from wattlog.serve.app import Api, Server  # noqa: E402
from wattlog.complaints import Complaints  # noqa: E402
from wattlog.serve.plugwatch import PlugWatch  # noqa: E402
from wattlog.store.query import Engine  # noqa: E402
from wattlog.store.files import Store  # noqa: E402
from wattnode import wire  # noqa: E402
from wattlog.mqtt import close  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"


def median_ms(fn, runs):
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def latency(runs):
    work = tempfile.mkdtemp(prefix="wattlog-bench-api-")
    try:
        store = Store(work, Complaints())
        store.recover({})
        values = year_of_data(1)
        times = START + 10 * np.arange(YEAR_SLOTS)
        store.committer.commit({("bench", "power"): (times, values.astype(np.float64))},
                               {"bench": 10})
        store.flush_summaries()
        entry = store.committer.registry.find("bench", "power")
        feed = store.committer.feeds[entry["id"]]
        engine = Engine(store.committer.summaries, lambda fid: None, store.pending)
        server = Server(Api(store, PlugWatch("wattlog"), broker_url="mqtt://u@127.0.0.1:9"), "127.0.0.1:0")
        if not server.start():
            raise SystemExit("the API did not start")
        conn = HTTPConnection("127.0.0.1", server.port)

        def get(path):
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise SystemExit("%s: %d %s" % (path, resp.status, body[:200]))
            return body

        print("%-24s %10s %10s %10s %12s" % ("question", "direct ms", "HTTP ms", "added ms",
                                            "answer bytes"))
        for name, a, b, points in QUESTIONS:
            start, end = START + 10 * a, START + 10 * b
            direct = median_ms(lambda: engine.series(feed, entry, start, end, points), runs)
            path = "/api/series?feed=bench/power&start=%d&end=%d&points=%d" % (start, end, points)
            http = median_ms(lambda: get(path), runs)
            print("%-24s %10.2f %10.2f %10.2f %12d" % (name, direct, http, http - direct,
                                                       len(get(path))), flush=True)
        conn.close()
        server.stop()
        store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- commits under load -----------------------------------------------------------------------

class Watcher:
    """Every readings batch and every ack, with the time this process saw it."""

    def __init__(self, broker):
        self.batches = []   # (seen, node, boot, seq + count)
        self.acks = []      # (seen, node, boot, seq, commit)
        self.lock = threading.Lock()
        self.c = broker.client("bench-api-watch")
        self.c.on_message = self._message
        self.c.connect("127.0.0.1", broker.port)
        self.c.subscribe([("wattlog/+/readings", 1), ("wattlog/+/ack", 1)])
        self.c.loop_start()

    def _message(self, client, userdata, msg):
        now = time.monotonic()
        node = msg.topic.split("/")[1]
        if msg.topic.endswith("/readings"):
            try:
                count, _, boot, seq, _, _ = wire.decode_header(msg.payload)
            except wire.BatchError:
                return
            with self.lock:
                self.batches.append((now, node, boot, seq + count))
        elif msg.retain is False:
            try:
                ack = json.loads(msg.payload)
            except ValueError:
                return
            if "seq" in ack and "resend" not in ack and "commit" in ack:
                with self.lock:
                    self.acks.append((now, node, ack["boot"], ack["seq"], ack["commit"]))

    def span(self, t0, t1):
        """(commit delays, ack latencies) in seconds for what arrived in [t0, t1)."""
        with self.lock:
            batches = [b for b in self.batches if t0 <= b[0] < t1]
            acks = sorted(a for a in self.acks if t0 <= a[0] < t1 + 3 * COMMIT_S)
        first_ack = {}
        for seen, node, boot, seq, commit in acks:
            first_ack.setdefault(commit, seen)
        commits = sorted(first_ack.items())
        delays = []
        for (_, before), (_, at) in zip(commits, commits[1:]):
            waiting = [b[0] for b in batches if b[0] > before]
            if waiting and before >= t0 and at < t1:
                delays.append(max(at - (min(waiting) + COMMIT_S), 0.0))
        latencies = []
        for seen, node, boot, top in batches:
            covered = [a[0] for a in acks if a[1] == node and a[2] == boot and a[3] >= top
                       and a[0] >= seen]
            if covered:
                latencies.append(min(covered) - seen)
        return delays, latencies


def stats(values):
    if not values:
        return "-"
    v = sorted(values)
    return "%.0f / %.0f / %.0f" % (1000 * v[len(v) // 2], 1000 * v[int(len(v) * 0.95)],
                                   1000 * v[-1])


LOAD = r"""
import asyncio, sys, time
import aiohttp
url, token, rate, seconds, conns = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
paths = ["/api/series?feed=load-0/power&start=now-1h&points=1000", "/api/health",
         "/api/series?feed=load-1/power&start=now-6h&points=500"]
async def main():
    done = [0, 0]
    total = int(rate * seconds)
    t0 = time.monotonic()
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer " + token},
                                     connector=aiohttp.TCPConnector(limit=conns)) as s:
        async def worker(k):
            for i in range(k, total, conns):
                wait = t0 + i / rate - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                async with s.get(url + paths[i % len(paths)]) as r:
                    await r.read()
                    done[r.status != 200] += 1
        await asyncio.gather(*(worker(k) for k in range(conns)))
    span = time.monotonic() - t0
    print("%d requests (%d not 200) in %.1f s: %.0f a second" % (sum(done), done[1], span, sum(done) / span))
asyncio.run(main())
"""


def under_load(plugs, seconds, rate, conns):
    work = tempfile.mkdtemp(prefix="wattlog-bench-api-load-")
    broker = Broker(os.path.join(work, "mosquitto")).start()
    token_file = os.path.join(work, "http.token")
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, (TOKEN + "\n").encode())
    os.close(fd)
    c = Collector(broker.url, os.path.join(work, "data"), commit_interval=COMMIT_S,
                  status_interval=60, listen=True, args=["--http-token-file", token_file],
                  log_path=os.path.join(work, "collector.log"))
    port, collector = c.port, c.proc
    nodes = []
    watcher = None
    try:
        c.wait_for("listening on")
        watcher = Watcher(broker)
        nodes = sped_up_plugs(broker, plugs, 2 * seconds + 3 * COMMIT_S, SPEED)
        time.sleep(COMMIT_S * 3)  # the plugs connected and sending: the spans measure a steady state
        quiet0 = time.monotonic()
        time.sleep(seconds)  # this span is the measurement: the plugs' readings in real time
        quiet1 = loud0 = time.monotonic()
        load = subprocess.run([sys.executable, "-c", LOAD, "http://127.0.0.1:%d" % port, TOKEN,
                               str(rate), str(seconds), str(conns)],
                              capture_output=True, text=True)
        loud1 = time.monotonic()
        print("load: " + (load.stdout.strip() or load.stderr.strip()[-300:]))
        rows = []
        for label, t0, t1 in (("quiet", quiet0, quiet1), ("%d req/s" % rate, loud0, loud1)):
            delays, latencies = watcher.span(t0, t1)
            rows.append((label, len(delays), stats(delays), len(latencies), stats(latencies)))
        print("%-12s %8s %26s %8s %26s" % ("span", "commits", "commit delay ms (p50/95/max)",
                                           "batches", "ack latency ms (p50/95/max)"))
        for row in rows:
            print("%-12s %8d %26s %8d %26s" % row)
    finally:
        if watcher is not None:
            close(watcher.c)
        stop(nodes)
        stop([collector])
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=50, help="requests per question (latency)")
    p.add_argument("--plugs", type=int, default=3)
    p.add_argument("--seconds", type=float, default=60, help="each span of the load part")
    p.add_argument("--rate", type=float, default=1000, help="requests a second")
    p.add_argument("--connections", type=int, default=8)
    p.add_argument("--skip-latency", action="store_true")
    p.add_argument("--skip-load", action="store_true")
    args = p.parse_args()
    if not args.skip_latency:
        latency(args.runs)
    if not args.skip_load:
        under_load(args.plugs, args.seconds, args.rate, args.connections)


if __name__ == "__main__":
    main()
