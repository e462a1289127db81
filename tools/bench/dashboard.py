"""dashboard.py - how fast the dashboard opens and zooms with 12 plugs of a year each, and how
many bytes its first load moves.

12 plugs, each a year of 10 s power and energy slots ending now (written straight to PHPFina
files with commit.py's Committer, as the collector writes them), a private mosquitto on which
each plug's retained status and state are published (so the collector knows them as plugs),
the real collector with its HTTP side, and Debian's chromium driven by Playwright. Printed:
- overview open: navigation start to every card filled (performance.now() in the page when
  the last card shows its power and today's kWh), a new browser context each run (a first
  visit: nothing cached), the median and the worst of the runs;
- first-load transfer: the bytes the browser received for the page and everything it loaded
  (Resource Timing transferSize: headers and gzip'd bodies), the live stream left out;
- zoom redraw: the history view of all 12 plugs over the year, zoomed in step by step (the +
  button, halving the span around the middle) down to minutes: per step, the click to the
  finer series drawn (fetch of 12 series included), the median and the worst.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "lib"))

from broker import Broker, free_port  # noqa: E402
from wattlog.commit import Committer  # noqa: E402
from wattlog.complaints import Complaints  # noqa: E402
from wattlog.provision import COLLECTOR  # noqa: E402

PLUGS = 12
YEAR_SLOTS = 365 * 8640
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def write_year(data, end):
    """12 plugs x (power, energy) x a year of 10 s slots ending at `end`."""
    start = end - YEAR_SLOTS * 10
    times = np.arange(start, end, 10, dtype=np.int64)
    committer = Committer(data, Complaints())
    try:
        for p in range(PLUGS):
            rnd = np.random.default_rng(p)
            t = np.arange(YEAR_SLOTS)
            power = 50 + 20 * p + 150 * (1 + np.sin(2 * np.pi * (t % 8640) / 8640)) \
                + rnd.normal(0, 20, YEAR_SLOTS).clip(-40, 40)
            energy = np.cumsum(power * 10 / 3.6e6)
            node = "plug-%02d" % p
            committer.commit({(node, "power"): (times, power),
                              (node, "energy"): (times, energy)}, {node: 10}, {})
            print("  wrote %s" % node, end="\r", flush=True)
    finally:
        committer.close()


def announce(broker, now):
    """Each plug's retained status and last state, as a plug publishes them."""
    c = broker.client("bench-dashboard")
    c.connect("127.0.0.1", broker.port)
    c.loop_start()
    for p in range(PLUGS):
        node = "plug-%02d" % p
        c.publish("wattlog/%s/status" % node, "online", qos=1, retain=True).wait_for_publish(10)
        c.publish("wattlog/%s/state" % node, json.dumps(
            {"time": now - 10, "power": 100.0 + p, "voltage": 230.0, "current": 0.5,
             "energy": 1.0, "relay": "ON"}), qos=1, retain=True).wait_for_publish(10)
    c.loop_stop()
    c.disconnect()


OPENED = """() => {
  const cards = [...document.querySelectorAll('.card[data-node]')].filter((c) => c.dataset.node);
  if (cards.length < %d) return null;
  for (const c of cards) {
    if (!/W$/.test(c.querySelector('[data-field=power]').textContent)) return null;
    if (!/kWh/.test(c.querySelector('[data-field=today]').textContent)) return null;
  }
  return performance.now();
}""" % PLUGS

TRANSFER = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const res = performance.getEntriesByType('resource').filter((r) => !r.name.includes('/api/stream'));
  return { total: nav.transferSize + res.reduce((s, r) => s + r.transferSize, 0),
           files: [[nav.name, nav.transferSize]].concat(res.map((r) => [r.name, r.transferSize])) };
}"""

ZOOM = """async () => {
  const before = window.wattlogDrawn;
  const t0 = performance.now();
  document.querySelector('[data-zoom="0.5"]').click();
  while (window.wattlogDrawn === before) await new Promise((r) => setTimeout(r, 2));
  return { ms: performance.now() - t0, span: window.wattlogDrawn.end - window.wattlogDrawn.start,
           bucket_s: window.wattlogDrawn.bucket_s[0], points: window.wattlogDrawn.points[0] };
}"""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=7, help="overview opens (default 7)")
    args = p.parse_args()
    from playwright.sync_api import sync_playwright
    work = tempfile.mkdtemp(prefix="wattlog-bench-dashboard-")
    broker = collector = None
    try:
        data = os.path.join(work, "data")
        now = int(time.time())
        t0 = time.monotonic()
        write_year(data, now - now % 10)
        print("%d plugs x a year of 10 s power and energy slots written in %.0f s"
              % (PLUGS, time.monotonic() - t0))
        broker = Broker(os.path.join(work, "mosquitto")).start()
        announce(broker, now)
        port = free_port()
        log = open(os.path.join(work, "collector.log"), "w")
        collector = subprocess.Popen(
            [sys.executable, "-m", "wattlog.cli", "collect", "--broker", broker.url,
             "--password-file", broker.password_file(COLLECTOR), "--data", data,
             "--listen", "127.0.0.1:%d" % port], stdout=log, stderr=subprocess.STDOUT)
        url = "http://127.0.0.1:%d/" % port
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(url + "api/plugs", timeout=5) as r:
                    if len(json.loads(r.read())["plugs"]) >= PLUGS:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or collector.poll() is not None:
                sys.exit("the collector did not come up: see %s" % log.name)
            time.sleep(0.2)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            opens, transfer = [], None
            for run in range(args.runs + 1):
                ctx = browser.new_context(viewport={"width": 1280, "height": 900})
                page = ctx.new_page()
                page.goto(url)
                ms = page.wait_for_function(OPENED, timeout=30000).json_value()
                if run == 0:
                    transfer = page.evaluate(TRANSFER)   # the first, untimed: warms the disk
                else:
                    opens.append(ms)
                ctx.close()
            print("overview open, navigation start to %d cards filled: median %.0f ms, worst "
                  "%.0f ms (%d runs, nothing cached)" % (PLUGS, statistics.median(opens),
                                                         max(opens), len(opens)))
            print("first-load transfer: %d bytes (%.1f kB)" % (transfer["total"],
                                                              transfer["total"] / 1000))
            for name, size in transfer["files"]:
                print("  %8d  %s" % (size, name.replace(url, "/")))
            ctx = browser.new_context(viewport={"width": 1280, "height": 900})
            page = ctx.new_page()
            page.goto(url + "#history?start=%d&end=now" % (now - 365 * 86400))
            page.wait_for_function("() => window.wattlogDrawn", timeout=60000)
            first = page.evaluate("() => window.wattlogDrawn")
            print("history of %d plugs over a year: %.0f ms to fetch and draw (%d points each, "
                  "buckets of %d s)" % (PLUGS, first["ms"], first["points"][0],
                                        first["bucket_s"][0]))
            steps = []
            while True:
                step = page.evaluate(ZOOM)
                steps.append(step["ms"])
                print("  zoom to %9.0f s: %6.0f ms (%d points, buckets of %d s)"
                      % (step["span"], step["ms"], step["points"], step["bucket_s"]))
                if step["span"] <= 600:
                    break
            print("zoom step redraw (click to finer series drawn, 12 series fetched): median "
                  "%.0f ms, worst %.0f ms over %d steps" % (statistics.median(steps),
                                                            max(steps), len(steps)))
            ctx.close()
            browser.close()
    finally:
        if collector is not None and collector.poll() is None:
            collector.terminate()
            collector.wait(60)
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
