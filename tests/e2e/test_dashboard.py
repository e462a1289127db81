"""test_dashboard.py - the dashboard (host/wattlog/web) in a real headless Chromium: Debian's
`chromium`, driven by Playwright for Python pointed at that browser (executable_path; nothing
downloads a browser build). Against a real mosquitto, the real collector with its HTTP side
and simulated plugs running the real firmware: the seed's washer, fridge and heat pump, each
backfilling the last day as fast as it goes and then running in real time, plus a plug with a
two-hour hole in its data.

One rig (broker, collector, plugs, browser) serves the whole module; each test opens its own
page, ends on what it waits for (bounded), and fails on any console error it did not expect.
Screenshots of each view at desktop and phone width go to build/dashboard/.

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

import pytest

from broker import Broker, free_port
import test_api
from helpers import REPO, SimNode, aligned_past, secret_file
from wattlog.provision import COLLECTOR, OPERATOR

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = [pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                 reason="Debian's chromium is not installed: run tools/setup"),
              pytest.mark.xdist_group("dashboard")]  # one rig, given --dist loadgroup

TOKEN = "t0ken-for-the-dashboard-test-42"
PLUGS = ("washer", "fridge", "heatpump")
GAPPY = "gappy"
DAY_S = 86400
SHOTS = REPO / "build" / "dashboard"
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


class Rig:
    def __init__(self, work):
        try:
            self._build(work)
        except BaseException:  # a part that never came up: stop the parts that did
            self.close()
            raise

    def _build(self, work):
        self.work = work
        self.broker = Broker(str(work / "mosquitto")).start()
        self.data = work / "data"
        self.token_file = secret_file(work / "http.token", TOKEN)
        self.port = free_port()
        self.url = "http://127.0.0.1:%d/" % self.port
        self.proc = None
        self.start_collector()
        self.start = aligned_past(DAY_S)
        self.plugs = [SimNode(self.broker.port, name, "--profile", name, "--speed", "max",
                              "--start", self.start, "--then-realtime",
                              *self.broker.node_args(name)) for name in PLUGS]
        # the gappy plug: 20 minutes from 3 h ago, then nothing until 1 h ago, then live
        self.gap_from = aligned_past(3 * 3600)
        self.gap_until = aligned_past(3600)
        first = SimNode(self.broker.port, GAPPY, "--profile", "constant:300", "--speed", "60",
                        "--start", self.gap_from, *self.broker.node_args(GAPPY))
        self.wait_for("the gappy plug's first stretch", lambda: self.feed_last(GAPPY, "power")
                      >= self.gap_from + 1200, timeout_s=60)
        first.stop()
        self.plugs.append(SimNode(self.broker.port, GAPPY, "--profile", "constant:300",
                                  "--speed", "max", "--start", self.gap_until, "--then-realtime",
                                  *self.broker.node_args(GAPPY)))
        self.pw = playwright.sync_playwright().start()
        self.browser = self.pw.chromium.launch(executable_path=CHROMIUM,
                                               args=["--no-sandbox", "--disable-gpu"])

    def start_collector(self):
        self.log_path = self.work / "collector.log"
        self._log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "wattlog.cli", "collect", "--broker", self.broker.url,
             "--password-file", self.broker.password_file(COLLECTOR), "--data", str(self.data),
             "--commit-interval", "10", "--status-interval", "2",
             "--listen", "127.0.0.1:%d" % self.port, "--http-token-file", str(self.token_file),
             "--operator-password-file", self.broker.password_file(OPERATOR)],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=str(REPO))
        self.wait_for("the collector's HTTP side", lambda: self.call("/api") is not None)

    def stop_collector(self):
        self.proc.terminate()
        self.proc.wait(30)
        self._log.close()

    def call(self, path):
        import urllib.error
        import urllib.request
        req = urllib.request.Request(self.url.rstrip("/") + path,
                                     headers={"Authorization": "Bearer " + TOKEN})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read())
        except (urllib.error.URLError, OSError):
            return None

    def feed_last(self, node, channel):
        feeds = self.call("/api/feeds") or {"feeds": []}
        return max([f.get("last_time") or 0 for f in feeds["feeds"]
                    if f["node"] == node and f["channel"] == channel] or [0])

    wait_for = test_api.Rig.wait_for  # until check() is truthy, the collector still running

    def caught_up(self):
        """Every plug's readings reach the present."""
        self.wait_for("the plugs caught up", lambda: all(
            self.feed_last(n, "power") >= time.time() - 40 for n in PLUGS + (GAPPY,)), 180)

    def close(self):
        for attr in ("browser", "pw"):
            obj = getattr(self, attr, None)
            if obj is not None:
                obj.close() if attr == "browser" else obj.stop()
        for p in getattr(self, "plugs", []):
            p.stop()
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            self.stop_collector()
        if getattr(self, "broker", None) is not None:
            self.broker.stop()


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    r = None
    try:
        r = Rig(tmp_path_factory.mktemp("dashboard"))
        r.caught_up()
        yield r
    finally:
        if r is not None:
            r.close()


class Page:
    """A browser page on the dashboard with its console errors and requests recorded."""

    def __init__(self, rig, viewport=DESKTOP, has_touch=False):
        self.context = rig.browser.new_context(viewport=viewport, has_touch=has_touch)
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


def watts(w):
    """app.js's watts()."""
    return "%.2f kW" % (w / 1000) if abs(w) >= 1000 else "%.1f W" % w


def card_power(node):
    """JS: the power the node's card shows."""
    return ("() => { const c = [...document.querySelectorAll('.card[data-node]')]"
            ".find((c) => c.dataset.node === %s); return c && "
            "c.querySelector('[data-field=power]').textContent; }" % json.dumps(node))


CARD_SHOWS = """([node, want]) => {
  const c = [...document.querySelectorAll('.card[data-node]')].find((c) => c.dataset.node === node);
  const v = c && c.querySelector('[data-field=power]').textContent;
  return want.includes(v) && v; }"""


def test_overview_shows_each_plugs_live_power_without_reload(rig):
    """Every plug has a card; each card follows the plug's own states (read here from the
    broker as another client) within two 10 s slots, with no reload; no console errors."""
    seen = {}
    watch = rig.broker.client("dashboard-watch")
    watch.on_message = lambda c, u, m: seen.setdefault(m.topic.split("/")[1], []).append(
        (time.monotonic(), json.loads(m.payload)))
    watch.connect("127.0.0.1", rig.broker.port)
    watch.subscribe("wattlog/+/state")
    watch.loop_start()
    p = Page(rig)
    try:
        page = p.open()
        p.wait("() => document.body.dataset.cards && document.body.dataset.live === '1'")
        shown = {n: p.wait(card_power(n)) for n in PLUGS + (GAPPY,)}
        assert all(re.fullmatch(r"[\d.]+ k?W", v) for v in shown.values()), shown
        loaded = time.monotonic()
        navigations = []
        page.on("framenavigated", lambda f: navigations.append(f.url))
        for node in PLUGS:
            # a state the plug publishes after the page loaded: the card shows it within 20 s
            state = rig.wait_for("a new state from " + node, lambda: next(
                (s for t, s in seen.get(node, []) if t > loaded), None), 30)
            want = [watts(s["power"]) for t, s in seen[node] if s["time"] >= state["time"]]
            got = p.wait(CARD_SHOWS, arg=[node, want], timeout_s=20)
            assert got in want
        assert not navigations, navigations  # no reload
        assert "online" in p.text(".card[data-node='washer'] [data-field=status]")
        total = p.text(".card.total [data-field=status]")
        assert re.match(r"\d+ of \d+ plugs online", total), total
        p.shot("overview-desktop")
        page.set_viewport_size(PHONE)
        p.shot("overview-phone")
        columns = page.evaluate("() => getComputedStyle(document.querySelector('#cards'))"
                                ".gridTemplateColumns.split(' ').length")
        assert columns == 1  # one column of cards on a phone
        page.emulate_media(color_scheme="dark")
        background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
        assert sum(int(x) for x in re.findall(r"\d+", background)[:3]) < 150, background
        p.shot("overview-phone-dark")
    finally:
        watch.loop_stop()
        watch.disconnect()
        p.close()


def chart_probe():
    """JS: the drawn chart's data for the first plug and whether pixels of its colour show."""
    return """() => {
      const u = window.wattlog && window.wattlog.chart;
      if (!u || !window.wattlogDrawn) return null;
      const ys = u.data[1], xs = u.data[0];
      return { n: xs.length, first: xs[0], last: xs[xs.length - 1], step: xs[1] - xs[0],
               values: Array.from(ys).filter((v) => v != null).length,
               drawn: window.wattlogDrawn, label: u.series[1].label };
    }"""


def colour_columns(p, colour):
    """How many pixel columns of the chart's canvas hold the plug's line colour, and the
    column-by-column map (1: the colour is there)."""
    return p.page.evaluate("""(hex) => {
      const u = window.wattlog.chart, c = u.ctx, w = u.ctx.canvas.width, h = u.ctx.canvas.height;
      const want = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
      const img = c.getImageData(0, 0, w, h).data, cols = new Array(w).fill(0);
      for (let x = 0; x < w; x++) for (let y = 0; y < h; y++) {
        const k = (y * w + x) * 4;
        if (Math.abs(img[k] - want[0]) + Math.abs(img[k + 1] - want[1]) +
            Math.abs(img[k + 2] - want[2]) < 40 && img[k + 3] > 200) { cols[x] = 1; break; }
      }
      return { cols, dpr: devicePixelRatio, left: u.bbox.left, width: u.bbox.width,
               x0: u.scales.x.min, x1: u.scales.x.max };
    }""", colour)


def test_history_draws_zooms_finer_and_leaves_gaps(rig):
    """The chart draws the plug's data (the pixels of its colour across the day), a zoom from
    a day to ten minutes asks the API for a finer series and draws it, and the gappy plug's
    two empty hours stay empty (no line across, no zero)."""
    p = Page(rig)
    try:
        now = int(time.time())
        p.open("#history?feeds=heatpump&start=%d&end=now" % (now - DAY_S))
        day = p.wait(chart_probe())
        assert day["label"] == "heatpump" and day["drawn"]["raw"] == [False]
        assert day["drawn"]["bucket_s"][0] >= 60 and day["values"] >= 500, day
        assert day["last"] >= time.time() - 200  # the right edge reaches the present
        colour = p.page.evaluate("() => window.wattlog.colors.get('heatpump')")
        px = colour_columns(p, colour)
        plot = px["cols"][int(px["left"]):int(px["left"] + px["width"])]
        assert sum(plot) > 0.9 * len(plot), "the line covers the day"
        p.shot("history-desktop")

        asked = len([u for m, u in p.requests if "/api/series?" in u])
        chart = p.page.locator("#chart")
        chart.focus()
        for _ in range(7):  # + zooms in by half around the middle: a day -> 11 min
            before = p.page.evaluate("() => window.wattlogDrawn")
            chart.press("+")
            p.wait("(b) => window.wattlogDrawn && window.wattlogDrawn !== null && "
                   "window.wattlogDrawn.end - window.wattlogDrawn.start < "
                   "(b.end - b.start) * 0.75", arg=before)
        fine = p.wait(chart_probe())
        assert fine["drawn"]["end"] - fine["drawn"]["start"] <= 700, fine
        assert fine["drawn"]["raw"] == [True] and fine["drawn"]["bucket_s"] == [10]
        assert fine["step"] == 10 and fine["values"] >= 30  # the chart holds the 10 s slots
        assert day["step"] >= 60
        series = [u for m, u in p.requests if "/api/series?" in u]
        assert len(series) >= asked + 7
        assert "#history?" in p.page.url and "start=" in p.page.url  # the URL has the view
        p.page.go_back()
        back = p.wait("(s) => window.wattlogDrawn && window.wattlogDrawn.start < s && "
                      "window.wattlogDrawn", arg=fine["drawn"]["start"])
        assert back["end"] - back["start"] > fine["drawn"]["end"] - fine["drawn"]["start"]

        p.open("#history?feeds=%s&start=%d&end=now" % (GAPPY, rig.gap_from - 600))
        p.wait("() => window.wattlogDrawn && window.wattlogDrawn.start === %d && "
               "window.wattlog.chart.series[1].label === %s" % (rig.gap_from - 600,
                                                               json.dumps(GAPPY)))
        data = p.page.evaluate("() => ({x: Array.from(window.wattlog.chart.data[0]), "
                               "y: window.wattlog.chart.data[1]})")
        holes = [t for t, v in zip(data["x"], data["y"]) if v is None
                 and rig.gap_from + 1800 <= t < rig.gap_until - 600]
        assert holes, "the two hours without readings are null, not zero"
        assert all(v != 0 for v in data["y"] if v is not None)
        colour = p.page.evaluate("() => window.wattlog.colors.get(%s)" % json.dumps(GAPPY))
        px = colour_columns(p, colour)
        dpr = px["dpr"]

        def column(t):
            return int(px["left"] + (t - px["x0"]) / (px["x1"] - px["x0"]) * px["width"])
        inside = px["cols"][column(rig.gap_from + 2400):column(rig.gap_until - 1200)]
        assert inside and not any(inside), "no line across the gap (dpr %s)" % dpr
        assert any(px["cols"][column(rig.gap_until + 300):column(time.time() - 300)])
        p.shot("history-gap-desktop")
        p.page.set_viewport_size(PHONE)
        p.wait("() => window.wattlog.chart.width < 400")
        p.shot("history-phone")
    finally:
        p.close()


def touch(cdp, kind, xs, y):
    cdp.send("Input.dispatchTouchEvent", {"type": kind, "touchPoints": [
        {"x": x, "y": y, "id": i} for i, x in enumerate(xs)]})


def test_history_on_a_phone_pinches_and_swipes(rig):
    """On a touch screen two fingers spreading zoom in (a finer series), one finger swiping
    to the right goes back in time. Touches are sent as the browser's own input events."""
    p = Page(rig, viewport=PHONE, has_touch=True)
    try:
        now = int(time.time())
        p.open("#history?feeds=fridge&start=%d&end=now" % (now - DAY_S))
        day = p.wait("() => window.wattlogDrawn")
        box = p.page.locator("#chart .u-over").bounding_box()
        cdp = p.context.new_cdp_session(p.page)
        y, mid = box["y"] + box["height"] / 2, box["x"] + box["width"] / 2
        touch(cdp, "touchStart", [mid - 20, mid + 20], y)
        touch(cdp, "touchMove", [mid - 80, mid + 80], y)
        touch(cdp, "touchEnd", [], y)
        pinched = p.wait("(d) => window.wattlogDrawn.start !== d.start && window.wattlogDrawn",
                         arg=day)
        span = pinched["end"] - pinched["start"]
        assert span <= (day["end"] - day["start"]) / 3 and pinched["bucket_s"][0] < day["bucket_s"][0]
        touch(cdp, "touchStart", [mid - 60], y)
        touch(cdp, "touchMove", [mid + 60], y)
        touch(cdp, "touchEnd", [], y)
        swiped = p.wait("(d) => window.wattlogDrawn.start < d.start && window.wattlogDrawn",
                        arg=pinched)
        assert swiped["end"] - swiped["start"] == span
    finally:
        p.close()


def cli_energy(rig, start, end):
    out = subprocess.run([sys.executable, "-m", "wattlog.cli", "energy", "--data", str(rig.data),
                          "--by", "day", "--from", str(start), "--to", str(end)],
                         capture_output=True, text=True, cwd=str(REPO), timeout=60)
    assert out.returncode == 0, out.stderr
    return [line.split() for line in out.stdout.splitlines()]


def test_energy_view_equals_wattlog_energy(rig):
    """The energy view's kWh per day per plug are `wattlog energy`'s for the same days (the
    days before today: all of them committed by now), and the bars stack those numbers."""
    today = int(time.time()) // DAY_S * DAY_S   # the collector's zone here is UTC
    start, end = today - 2 * DAY_S, today
    rig.wait_for("yesterday committed", lambda: all(
        f["committed_until"] >= end for f in rig.call("/api/feeds")["feeds"]
        if f["channel"] == "energy" and f["node"] in PLUGS))
    p = Page(rig)
    try:
        p.open("#energy?by=day&start=%d&end=%d" % (start, end))
        p.wait("() => document.querySelectorAll('#energy-table tbody tr').length === 2")
        page_rows = p.page.evaluate("""() => [...document.querySelectorAll('#energy-table tr')]
            .map((tr) => [...tr.children].map((c) => c.textContent))""")
        cli = cli_energy(rig, start, end)
        assert cli[0] == page_rows[0][0:1] + sum(([c.split()[0], "kWh"] for c in page_rows[0][1:]), [])
        for mine, theirs in zip(page_rows[1:], cli[1:-1]):
            assert [c.replace("–", "-") for c in mine] == theirs
        assert any(float(c) > 0 for c in page_rows[2][1:] if c != "–")
        heights = p.page.evaluate("""() => [...document.querySelectorAll('#bars .seg')]
            .map((s) => [s.dataset.node, parseFloat(s.dataset.kwh), s.getBoundingClientRect().height])""")
        assert heights and all(h > 0 for _, _, h in heights)
        big = max(heights, key=lambda r: r[1])
        small = min(heights, key=lambda r: r[1])
        px_per_kwh = big[2] / big[1]  # heights follow kWh: the smallest bar within 2 px of it
        assert abs(small[2] - small[1] * px_per_kwh) < 2, (big, small)
        with p.page.expect_download() as got:
            p.page.click("#energy-csv")
        csv = open(got.value.path()).read().splitlines()
        assert csv[0].startswith("day,") and len(csv) == 4  # head, 2 days, total
        p.shot("energy-desktop")
        p.page.set_viewport_size(PHONE)
        p.shot("energy-phone")
        p.open("#health")
        p.wait("() => document.querySelectorAll('#plugs-table tbody tr').length >= 4")
        row = p.page.evaluate("""() => [...document.querySelectorAll('#plugs-table tbody tr')]
            .find((r) => r.dataset.node === 'washer').textContent""")
        assert re.search(r"\d+\.\d+\.\d+", row), row  # the firmware version
        assert "last commit" in p.text("#collector-table")
        p.shot("health-phone")
        p.page.set_viewport_size(DESKTOP)
        p.shot("health-desktop")
    finally:
        p.close()


def test_relay_switches_with_the_token_and_not_without(rig):
    """Without the token the switch is read-only, says why, and clicking it sends nothing;
    with the token it switches the plug, and the card shows the state the plug reports."""
    node = "fridge"
    p = Page(rig)
    try:
        p.open()
        p.wait(card_power(node))
        relay = p.page.locator(".card[data-node=%s] [data-field=relay]" % node)
        relay.click(force=True)
        # a request the page makes after the click has come back: one the click made would
        # be recorded before it
        assert p.page.evaluate("() => fetch('/api').then((r) => r.status)") == 200
        assert not [u for m, u in p.requests if m == "POST"]
        assert rig.call("/api/plugs/" + node)["state"]["relay"] == "ON"
        assert relay.is_disabled()
        assert "needs the collector's token" in p.text("#control-note")

        p.page.click("#token-button")
        p.page.fill("#token-input", TOKEN)
        p.page.click("#token-form button[type=submit]")
        p.wait("() => !document.querySelector('.card[data-node=%s] [data-field=relay]').disabled"
               % node)
        relay.click()
        p.wait("() => document.querySelector('.card[data-node=%s] [data-field=relay]')"
               ".textContent === 'relay off'" % node, timeout_s=30)
        assert [u for m, u in p.requests if m == "POST"] == [
            rig.url + "api/plugs/%s/relay" % node]
        assert rig.call("/api/plugs/" + node)["state"]["relay"] == "OFF"  # the plug says so
        relay.click()
        p.wait("() => document.querySelector('.card[data-node=%s] [data-field=relay]')"
               ".textContent === 'relay on'" % node, timeout_s=30)
    finally:
        p.close()


def test_markup_from_the_api_is_shown_as_text_and_errors_as_sentences(rig):
    """A log line and a firmware string carrying markup (published as any client with access
    could) and an API error quoting a request are shown as text, never run; an error is a
    sentence in the page, not a blank chart."""
    evil = '<img src=x onerror="window.pwned=1">'
    client = rig.broker.client("dashboard-evil")
    client.connect("127.0.0.1", rig.broker.port)
    client.loop_start()
    client.publish("wattlog/evil-1/log", "boot " + evil, qos=1).wait_for_publish(10)
    client.publish("homeassistant/device/evil-1/config",
                   json.dumps({"dev": {"sw_version": evil[:32]}}), qos=1).wait_for_publish(10)
    client.loop_stop()
    client.disconnect()
    rig.wait_for("the log line", lambda: (rig.call("/api/plugs/evil-1") or {}).get("log"))
    p = Page(rig)
    try:
        p.open("#health")
        p.wait("() => [...document.querySelectorAll('#plug-logs pre')].some("
               "(e) => e.textContent.includes('onerror'))")
        assert p.page.locator("#plug-logs pre img, #plugs-table img").count() == 0
        assert evil in p.page.locator("#plug-logs").text_content()
        p.open("#history?feeds=%s&start=now-1h&end=now" % evil.replace('"', ""))
        error = p.wait("() => !document.querySelector('#error').hidden && "
                       "document.querySelector('#error').textContent")
        assert error.startswith("Cannot draw the history: Feed '<img src=x") and error.endswith(".")
        assert p.page.locator("main img").count() == 0
        assert p.page.evaluate("() => window.pwned") is None
        p.shot("error-desktop")
    finally:
        p.close(allowed=[r"status of 400"])


def test_live_stream_reconnects_after_a_collector_restart(rig):
    """The collector restarts (SIGTERM, then started again on the same port): the page says
    it is reconnecting, then follows the plugs again by itself, without a reload."""
    p = Page(rig)
    try:
        p.open()
        p.wait("() => document.body.dataset.live === '1' && document.body.dataset.cards")
        rig.stop_collector()
        p.wait("() => document.body.dataset.live === '0'")
        assert "reconnecting" in p.text("#live")
        rig.start_collector()
        p.wait("() => document.body.dataset.live === '1'", timeout_s=30)
        marker = p.page.evaluate("() => window.wattlog.plugs.get('heatpump').state_heard")
        p.wait("(m) => window.wattlog.plugs.get('heatpump').state_heard > m", arg=marker,
               timeout_s=30)
    finally:
        p.close(allowed=[r"ERR_CONNECTION_REFUSED", r"ERR_EMPTY_RESPONSE",
                         r"ERR_INCOMPLETE_CHUNKED_ENCODING", r"status of 50\d"])
