"""query.py - how fast a year of 10 s data answers at any zoom, beside InfluxDB 1.6.

One feed of a year of 10 s slots (3.15 M, 12.6 MB; a daily load shape with noise and a few
gaps), and separately 12 such feeds as a dashboard asks for them. Questions: the year in ~1000
buckets of mean/min/max, a month in ~1000, a day raw. Per question: ms warm (the median of
repeated runs, after one untimed run), and bytes read (/proc/self/io rchar: what the query
asked the kernel for, page cache or not). InfluxDB 1.6 (Debian's influxdb, started here on a
loopback port) gets the same year of points and answers the same questions with
SELECT mean(v), min(v), max(v) ... GROUP BY time(<the same bucket>), over HTTP from this
process; its ms include the HTTP round trip, and the ratio says how many times longer it took.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "bench"))
sys.path.insert(0, os.path.join(REPO, "tools", "lib"))

from influxd import influxd  # noqa: E402
from wattlog.store.phpfina import Feed  # noqa: E402
from wattlog.store.query import Engine  # noqa: E402
from wattlog.store.rollup import Summaries  # noqa: E402

YEAR_SLOTS = 365 * 8640
START = 1735689600  # 2025-01-01T00:00Z


def year_of_data(seed):
    rnd = np.random.default_rng(seed)
    t = np.arange(YEAR_SLOTS)
    day = 300 + 250 * np.sin(2 * np.pi * (t % 8640) / 8640)
    values = (day + rnd.normal(0, 60, YEAR_SLOTS)).astype(np.float32)
    for gap in rnd.integers(0, YEAR_SLOTS - 2000, 20):
        values[gap:gap + rnd.integers(10, 2000)] = np.nan
    return values


def rchar():
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])


def timed(fn, runs):
    fn()
    before = rchar()
    fn()
    read = rchar() - before
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), read


QUESTIONS = (("year in ~1000 buckets", 0, YEAR_SLOTS, 1000),
             ("a month in ~1000", 200 * 8640, 230 * 8640, 1000),
             ("a day, raw", 300 * 8640, 301 * 8640, 10000))


def influx(values, work):
    with influxd(work, "bench") as base:
        have = np.flatnonzero(~np.isnan(values))
        t0 = time.monotonic()
        for i in range(0, len(have), 10000):
            idx = have[i:i + 10000]
            body = "\n".join("p v=%.1f %d" % (values[k], START + 10 * k) for k in idx).encode()
            urllib.request.urlopen(urllib.request.Request(
                base + "/write?db=bench&precision=s", data=body), timeout=120)
        print("influxdb: loaded %d points in %.0f s" % (len(have), time.monotonic() - t0),
              flush=True)
        out = {}
        for name, a, b, points in QUESTIONS:
            bucket_s = max(10, -(-(b - a) // points) * 10)
            q = ("SELECT mean(v), min(v), max(v) FROM p WHERE time >= %ds AND time < %ds "
                 "GROUP BY time(%ds)" % (START + 10 * a, START + 10 * b, bucket_s))
            if bucket_s == 10:
                q = "SELECT v FROM p WHERE time >= %ds AND time < %ds" % (START + 10 * a,
                                                                        START + 10 * b)
            url = base + "/query?" + urllib.parse.urlencode({"db": "bench", "q": q})
            out[name] = timed(lambda: urllib.request.urlopen(url, timeout=120).read(), 5)[0]
        return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--no-influx", action="store_true")
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="wattlog-bench-query-")
    try:
        os.makedirs(os.path.join(work, "phpfina"))
        feeds, data = [], []
        for fid in range(1, 13):
            feed = Feed.create(os.path.join(work, "phpfina"), fid, 10, START)
            values = year_of_data(fid)
            feed.update((np.arange(YEAR_SLOTS), values.astype(np.float64)))
            feed.sync()
            feeds.append(feed)
            data.append(values)
        summaries = Summaries(work)
        t0 = time.monotonic()
        summaries.flush(feeds)
        print("12 feeds x a year of 10 s slots; summaries built in %.1f s, %.1f MB beside "
              "%.1f MB of .dat" % (time.monotonic() - t0, sum(
                  os.path.getsize(os.path.join(summaries.dir, n)) for n in
                  os.listdir(summaries.dir)) / 1e6, 12 * YEAR_SLOTS * 4 / 1e6), flush=True)
        engine = Engine(summaries)
        entry = {"node": "bench", "channel": "power"}
        results = {}
        print("%-24s %12s %14s %16s" % ("question", "1 feed ms", "bytes read", "12 feeds ms"))
        for name, a, b, points in QUESTIONS:
            start, end = START + 10 * a, START + 10 * b
            one = timed(lambda: engine.series(feeds[0], entry, start, end, points), args.runs)
            twelve = timed(lambda: [engine.series(f, entry, start, end, points) for f in feeds],
                           max(5, args.runs // 5))
            results[name] = one[0]
            print("%-24s %12.2f %14d %16.2f" % (name, one[0], one[1], twelve[0]), flush=True)
        if not args.no_influx and shutil.which("influxd"):
            inf = influx(data[0], work)
            print("%-24s %12s %14s %8s" % ("question", "wattlog ms", "InfluxDB ms", "ratio"))
            for name, *_ in QUESTIONS:
                print("%-24s %12.2f %14.1f %7.0fx" % (name, results[name], inf[name],
                                                     inf[name] / results[name]))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
