"""dashrig.py - what the dashboard's browser tests (test_dashboard.py over live plugs,
test_dashboard_written.py over written readings) run the page in: Debian's `chromium` driven
by Playwright for Python pointed at that browser (executable_path; nothing downloads a browser
build), and the live rig: a real mosquitto, the real collector with its HTTP side (storing into
the files, or into a private PostgreSQL: the cluster's store) and simulated plugs running the
real firmware: the seed's washer, fridge and heat pump, each backfilling the last day as fast
as it goes and then running in real time, plus a plug with a two-hour hole in its data.

Why Playwright rather than raw DevTools Protocol: its waits (selectors, functions) and event
hooks (console, requests) are the test's whole vocabulary; raw CDP would need a page of
plumbing for each. `page.evaluate` runs through DevTools, so the page's strict
Content-Security-Policy stays on for everything the page itself does.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from helpers import REPO, aligned_past, secret_file
from rig import Broker, Collector, SimPlug
from wattlog.fleet.provision import OPERATOR

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
MARKS = [pytest.mark.skipif(not os.path.exists(CHROMIUM),
                            reason="Debian's chromium is not installed: run tools/setup"),
         pytest.mark.xdist_group("dashboard")]  # one rig a module, given --dist loadgroup

TOKEN = "t0ken-for-the-dashboard-test-42"
PLUGS = ("washer", "fridge", "heatpump")
GAPPY = "gappy"
WEAK_RSSI = -85          # the fridge's Wi-Fi signal (dBm); the others report the default, -60
DAY_S = 86400
SHOTS = REPO / "build" / "dashboard"
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


def get_json(url, path):
    """The JSON answer of GET url+path with the token; None while nothing answers."""
    req = urllib.request.Request(url.rstrip("/") + path,
                                 headers={"Authorization": "Bearer " + TOKEN})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, OSError):
        return None


class Chromium:
    """Playwright and one headless Chromium, for a module's pages."""

    def __init__(self):
        self.pw = playwright.sync_playwright().start()
        try:
            self.browser = self.pw.chromium.launch(executable_path=CHROMIUM,
                                                   args=["--no-sandbox", "--disable-gpu"])
        except BaseException:
            self.pw.stop()
            raise
        self.url = None

    def close(self):
        self.browser.close()
        self.pw.stop()


class Rig:
    """Broker, collector (store: a PgServer to store into, or None: the files), the plugs and
    the browser; close() stops whatever started, in the reverse order."""

    def __init__(self, work, store=None):
        self.broker = self.collector = self.chromium = None
        self.plugs = []
        try:
            self._build(work, store)
        except BaseException:  # a part that never came up: stop the parts that did
            self.close()
            raise

    def _build(self, work, store):
        self.store = store
        self.broker = Broker(str(work / "mosquitto"), move_if_taken=True).start()
        self.data = work / "data"
        token_file = secret_file(work / "http.token", TOKEN)
        self.collector = Collector(self.broker.url, self.data, commit_interval=10,
                                   store=store, listen=True, args=[
                                       "--http-token-file", token_file,
                                       "--operator-password-file",
                                       self.broker.password_file(OPERATOR)])
        self.url = self.collector.http_url + "/"
        self.wait_for("the collector's HTTP side", lambda: self.call("/api") is not None)
        self.start = aligned_past(DAY_S)
        self.plugs = [SimPlug(self.broker.port, name, "--profile", name, "--speed", "max",
                              "--start", self.start, "--then-realtime",
                              *(("--rssi", str(WEAK_RSSI)) if name == "fridge" else ()),
                              broker=self.broker) for name in PLUGS]
        # the gappy plug: 20 minutes from 3 h ago, then nothing until 1 h ago, then live
        self.gap_from = aligned_past(3 * 3600)
        self.gap_until = aligned_past(3600)
        first = SimPlug(self.broker.port, GAPPY, "--profile", "constant:300", "--speed", "60",
                        "--start", self.gap_from, broker=self.broker)
        self.wait_for("the gappy plug's first stretch", lambda: self.feed_last(GAPPY, "power")
                      >= self.gap_from + 1200, timeout_s=60)
        first.stop()
        self.plugs.append(SimPlug(self.broker.port, GAPPY, "--profile", "constant:300",
                                  "--speed", "max", "--start", self.gap_until, "--then-realtime",
                                  broker=self.broker))
        self.chromium = Chromium()
        self.pw, self.browser = self.chromium.pw, self.chromium.browser

    def start_collector(self):
        """The collector again, on the same port and data, after stop_collector()."""
        self.collector.restart()
        self.wait_for("the collector's HTTP side", lambda: self.call("/api") is not None)

    def stop_collector(self):
        self.collector.stop()

    def call(self, path):
        return get_json(self.url, path)

    def feed_last(self, node, channel):
        feeds = self.call("/api/feeds") or {"feeds": []}
        return max([f.get("last_time") or 0 for f in feeds["feeds"]
                    if f["node"] == node and f["channel"] == channel] or [0])

    def wait_for(self, what, check, timeout_s=60.0):
        """Until check() is truthy (its value), the collector still running."""
        return self.collector.wait_until(what, check, timeout_s)

    def caught_up(self):
        """Every plug's readings reach the present."""
        self.wait_for("the plugs caught up", lambda: all(
            self.feed_last(n, "power") >= time.time() - 40 for n in PLUGS + (GAPPY,)), 180)

    def read_args(self):
        """How a `wattlog` verb reads what this collector stores."""
        if self.store is None:
            return ["--data", str(self.data)]
        return ["--store", self.store.dsn, "--store-password-file", self.store.password_file]

    def close(self):
        if self.chromium is not None:
            self.chromium.close()
        for p in self.plugs:
            p.stop()
        if self.collector is not None and self.collector.running():
            self.collector.stop()
        if self.broker is not None:
            self.broker.stop()


def cli(*argv):
    """`wattlog ARGV`: each line of its output as its words."""
    out = subprocess.run([sys.executable, "-m", "wattlog.cli"] + [str(a) for a in argv],
                         capture_output=True, text=True, cwd=str(REPO), timeout=60)
    assert out.returncode == 0, out.stderr
    return [line.split() for line in out.stdout.splitlines()]


class Page:
    """A browser page on the dashboard with its console errors and requests recorded; `rig`:
    anything with a .browser and the .url of the dashboard (a Rig, a Chromium)."""

    def __init__(self, rig, viewport=DESKTOP, has_touch=False, browser=None):
        self.context = (browser or rig.browser).new_context(viewport=viewport,
                                                            has_touch=has_touch)
        self.page = self.context.new_page()
        self.errors = []
        self.requests = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append("uncaught: %s" % e))
        self.page.on("request", lambda r: self.requests.append((r.method, r.url)))
        self.url = rig.url

    def open(self, fragment=""):
        self.page.goto(self.url + fragment)
        return self.page

    def wait(self, js, arg=None, timeout_s=20.0):
        """Until the function (JS source) returns something truthy; that value."""
        return self.page.wait_for_function(js, arg=arg, timeout=timeout_s * 1000).json_value()

    def text(self, selector):
        return self.page.locator(selector).inner_text()

    def shot(self, name):
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SHOTS / (name + ".png")), full_page=True)

    def close(self, allowed=()):
        self.context.close()
        unexpected = [e for e in self.errors if not any(re.search(a, e) for a in allowed)]
        assert not unexpected, unexpected
