"""dashboard.py - how fast the dashboard opens and zooms with 12 plugs (or 20, or both: --plugs
12,20) of a year each, and how many bytes its first load moves.

N plugs, each a year of 10 s power and energy slots ending now (written straight to PHPFina
files as the collector writes them: tools/lib/history.py), a private mosquitto on which
each plug's retained status and state are published (so the collector knows them as plugs),
the real collector with its HTTP side, and Debian's chromium driven by Playwright. Printed,
for each number of plugs (--plugs 12,20: the 12 first, then 8 more written into the same data
directory and the collector started again; a table of both at the end):
- overview open: navigation start to every card filled (performance.now() in the page when
  the last card shows its power and today's kWh), a new browser context each run (a first
  visit: nothing cached), the median and the worst of the runs;
- first-load transfer: the bytes the browser received for the page and everything it loaded
  (Resource Timing transferSize: headers and gzip'd bodies), the live stream left out;
- history open: the history view of all the plugs over the year, navigation start to the
  frame that shows the chart painted;
- zoom redraw: from there, zoomed in step by step (the + button, halving the span around the
  middle) down to minutes: per step, the click to the frame that shows the finer series
  (fetch of every plug's series, draw and the canvas's rasterisation: a requestAnimationFrame
  then a task after the chart changed), with the fetch's share; the first step (out of the
  year view, the costliest to rasterise) on its own, the median and the worst.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "lib"))

from broker import Broker, free_port  # noqa: E402
from rig import Collector  # noqa: E402
from history import write_history  # noqa: E402

YEAR_SLOTS = 365 * 8640
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def write_year(data, end, plugs):
    """Plugs plug-NN for NN in `plugs` x (power, energy) x a year of 10 s slots ending at
    `end` (tools/lib/history.py: a day's shape, each plug its own)."""
    write_history(data, ["plug-%02d" % p for p in plugs], end - YEAR_SLOTS * 10, YEAR_SLOTS,
                  channels=("power", "energy"), seeds=plugs,
                  progress=lambda node: print("  wrote %s" % node, end="\r", flush=True))


def announce(broker, now, plugs):
    """Each plug's retained status and last state, as a plug publishes them."""
    c = broker.client("bench-dashboard")
    c.connect("127.0.0.1", broker.port)
    c.loop_start()
    for p in plugs:
        node = "plug-%02d" % p
        c.publish("wattlog/%s/status" % node, "online", qos=1, retain=True).wait_for_publish(10)
        c.publish("wattlog/%s/state" % node, json.dumps(
            {"time": now - 10, "power": 100.0 + p, "voltage": 230.0, "current": 0.5,
             "energy": 1.0, "relay": "ON"}), qos=1, retain=True).wait_for_publish(10)
    c.loop_stop()
    c.disconnect()


OPENED = """(n) => {
  const cards = [...document.querySelectorAll('.card[data-node]')].filter((c) => c.dataset.node);
  if (cards.length < n) return null;
  for (const c of cards) {
    if (!/W$/.test(c.querySelector('[data-field=power]').textContent)) return null;
    if (!/kWh/.test(c.querySelector('[data-field=today]').textContent)) return null;
  }
  return performance.now();
}"""

TRANSFER = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const res = performance.getEntriesByType('resource').filter((r) => !r.name.includes('/api/stream'));
  return { total: nav.transferSize + res.reduce((s, r) => s + r.transferSize, 0),
           files: [[nav.name, nav.transferSize]].concat(res.map((r) => [r.name, r.transferSize])) };
}"""

PAINTED = "new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)))"

HISTORY = """async () => {
  while (!window.wattlogDrawn) await new Promise((r) => setTimeout(r, 2));
  await %s;
  return { ms: performance.now(), points: window.wattlogDrawn.points[0],
           bucket_s: window.wattlogDrawn.bucket_s[0] };
}""" % PAINTED

ZOOM = """async () => {
  const before = window.wattlogDrawn;
  const t0 = performance.now();
  document.querySelector('[data-zoom="0.5"]').click();
  while (window.wattlogDrawn === before) await new Promise((r) => setTimeout(r, 2));
  await %s;
  const d = window.wattlogDrawn;
  return { ms: performance.now() - t0, fetch_ms: d.fetch_ms, span: d.end - d.start,
           bucket_s: d.bucket_s[0], points: d.points[0] };
}""" % PAINTED


def wait_for_plugs(url, n, collector, log, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url + "api/plugs", timeout=5) as r:
                if len(json.loads(r.read())["plugs"]) >= n:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline or collector.poll() is not None:
            sys.exit("the collector did not come up: see %s" % log)
        time.sleep(0.2)


def measure(browser, url, n, runs, now):
    """The figures for n plugs, printed as they come; a dict of them."""
    out = {"plugs": n}
    opens, transfer = [], None
    for run in range(runs + 1):
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        page = ctx.new_page()
        page.goto(url)
        ms = page.wait_for_function(OPENED, arg=n, timeout=30000).json_value()
        if run == 0:
            transfer = page.evaluate(TRANSFER)   # the first, untimed: warms the disk
        else:
            opens.append(ms)
        ctx.close()
    out.update(open_ms=statistics.median(opens), open_worst_ms=max(opens),
               transfer=transfer["total"])
    print("overview open, navigation start to %d cards filled: median %.0f ms, worst %.0f ms "
          "(%d runs, nothing cached)" % (n, out["open_ms"], out["open_worst_ms"], len(opens)))
    print("first-load transfer: %d bytes (%.1f kB)" % (transfer["total"], transfer["total"] / 1000))
    for name, size in transfer["files"]:
        print("  %8d  %s" % (size, name.replace(url, "/")))
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    page.goto(url + "#history?start=%d&end=now" % (now - 365 * 86400))
    first = page.evaluate(HISTORY)
    out["history_ms"] = first["ms"]
    print("history of %d plugs over a year: %.0f ms from navigation start to the chart painted "
          "(%d points each, buckets of %d s)" % (n, first["ms"], first["points"],
                                                 first["bucket_s"]))
    steps = []
    while True:
        step = page.evaluate(ZOOM)
        steps.append(step)
        print("  zoom to %9.0f s: %6.0f ms, fetch %4.0f ms (%d points, buckets of %d s)"
              % (step["span"], step["ms"], step["fetch_ms"], step["points"], step["bucket_s"]))
        if step["span"] <= 600:
            break
    ctx.close()
    ms = [s["ms"] for s in steps]
    out.update(zoom_first_ms=ms[0], zoom_ms=statistics.median(ms), zoom_worst_ms=max(ms),
               fetch_ms=statistics.median(s["fetch_ms"] for s in steps), steps=len(ms))
    print("zoom step redraw (click to the finer series painted, %d series fetched): first step "
          "(out of the year) %.0f ms, median %.0f ms, worst %.0f ms over %d steps (the fetch's "
          "median share %.0f ms)" % (n, out["zoom_first_ms"], out["zoom_ms"], out["zoom_worst_ms"],
                                     out["steps"], out["fetch_ms"]))
    return out


ROWS = (("overview open, median (ms)", "open_ms"), ("overview open, worst (ms)", "open_worst_ms"),
        ("first-load transfer (kB)", "transfer"), ("history of a year painted (ms)", "history_ms"),
        ("first zoom step, out of the year (ms)", "zoom_first_ms"),
        ("zoom step, median (ms)", "zoom_ms"), ("zoom step, worst (ms)", "zoom_worst_ms"),
        ("zoom step's fetch, median (ms)", "fetch_ms"))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=7, help="overview opens (default 7)")
    p.add_argument("--plugs", default="12", help="numbers of plugs, comma-separated, each "
                   "measured in turn (default 12; 12,20 prints both side by side)")
    args = p.parse_args()
    try:
        counts = sorted({int(x) for x in args.plugs.split(",")})
    except ValueError:
        sys.exit("--plugs %r is not numbers of plugs such as 12 or 12,20" % args.plugs)
    if not counts or counts[0] < 1 or counts[-1] > 100:
        sys.exit("--plugs: from 1 to 100 plugs, not %r" % args.plugs)
    from playwright.sync_api import sync_playwright
    work = tempfile.mkdtemp(prefix="wattlog-bench-dashboard-")
    broker = collector = None
    results = []
    try:
        data = os.path.join(work, "data")
        now = int(time.time())
        broker = Broker(os.path.join(work, "mosquitto")).start()
        written = 0
        for n in counts:
            t0 = time.monotonic()
            write_year(data, now - now % 10, range(written, n))
            print("%d plugs x a year of 10 s power and energy slots written in %.0f s"
                  % (n - written, time.monotonic() - t0))
            announce(broker, now, range(written, n))
            written = n
            port = free_port()
            log = os.path.join(work, "collector-%d.log" % n)
            c = Collector(broker.url, data, commit_interval=300, status_interval=60, listen=port,
                          log_path=log)  # its own defaults
            collector = c.proc
            url = "http://127.0.0.1:%d/" % port
            wait_for_plugs(url, n, collector, log)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                results.append(measure(browser, url, n, args.runs, now))
                browser.close()
            collector.terminate()
            collector.wait(60)
            collector = None
        if len(results) > 1:
            print("\n%-40s" % "plugs" + "".join("%10d" % r["plugs"] for r in results))
            for label, key in ROWS:  # bytes as kB
                print("%-40s" % label + "".join("%10.1f" % (r[key] / 1000) if key == "transfer"
                                                  else "%10.0f" % r[key] for r in results))
    finally:
        if collector is not None and collector.poll() is None:
            collector.terminate()
            collector.wait(60)
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
