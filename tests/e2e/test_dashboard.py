"""test_dashboard.py - the dashboard (host/wattlog/serve/web) in a real headless Chromium over
live plugs (dashrig.py): a real mosquitto, the real collector with its HTTP side and simulated
plugs running the real firmware (the seed's washer, fridge and heat pump, each backfilling the
last day as fast as it goes and then running in real time, plus a plug with a two-hour hole in
its data). The views that need data no simulated plug could make in seconds (a week around a
DST change with a tariff, 20 plugs, a run, a broker or InfluxDB taken away) are
test_dashboard_written.py.

One rig (broker, collector, plugs, browser) serves the module; each test opens its own page,
ends on what it waits for (bounded), and fails on any console error it did not expect.
Screenshots of each view at desktop and phone width go to build/dashboard/.

The collector stores into PHPFina files, as a Pi does; the tests marked both_stores run again
on a second rig whose collector stores into PostgreSQL (the cluster's store, store/postgres.py;
a private server, tools/lib/pgserver.py): the History view's drawing, the live overview and
its reconnection, and the energy view against `wattlog energy`.
"""

import json
import re
import time

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from dashrig import (CHROMIUM, DAY_S, DESKTOP, GAPPY, MARKS, PHONE, PLUGS, TOKEN, WEAK_RSSI, Page,
                     Rig, cli)
from helpers import pg_server
from rig import Recorder

pytestmark = MARKS
STORES = ("files", "postgresql")


def pytest_generate_tests(metafunc):
    """Every test runs on the rig storing into the files; those marked both_stores on the
    PostgreSQL one too (the module's tests are grouped by rig: one of each at a time)."""
    if "rig" in metafunc.fixturenames:
        both = metafunc.definition.get_closest_marker("both_stores") is not None
        metafunc.parametrize("rig", STORES if both else STORES[:1], indirect=True,
                             scope="module")


@pytest.fixture(scope="module")
def rig(request, tmp_path_factory):
    pg = pg_server() if request.param == "postgresql" else None
    r = None
    try:
        r = Rig(tmp_path_factory.mktemp("dashboard-" + request.param), store=pg)
        r.caught_up()
        yield r
    finally:
        if r is not None:
            r.close()
        if pg is not None:
            pg.close()


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


@pytest.mark.both_stores
def test_overview_shows_each_plugs_live_power_without_reload(rig):
    """Every plug has a card; each card follows the plug's own states (read here from the
    broker as another client) within two 10 s slots, with no reload; no console errors."""
    watch = Recorder(rig.broker, "wattlog/+/state", name="dashboard-watch")

    def heard(node):
        """(arrival, state) of each state the node published."""
        return [(m.at, json.loads(m[1])) for m in list(watch.seen)
                if m[0] == "wattlog/%s/state" % node]
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
                (s for t, s in heard(node) if t > loaded), None), 30)
            want = [watts(s["power"]) for t, s in heard(node) if s["time"] >= state["time"]]
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
        watch.close()
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


def colour_columns(p, colour, alone=None):
    """How many pixel columns of the chart's canvas hold the plug's line colour, and the
    column-by-column map (1: the colour is there). The line is 1 px, antialiased: where it
    runs between two rows each holds part of it, so a pixel counts from 40% coverage (the
    band, 20% of the colour, does not); the grid is hidden while the pixels are read (a line
    along a grid line, at a round number of watts, blends with it), and with `alone` (a
    plug's name) every other plug too (a line drawn over it, where the two cross or run at
    the same watts, would hide it: seen as a 2-column hole on a busy machine)."""
    return p.page.evaluate("""async ([hex, alone]) => {
      const u = window.wattlog.chart, c = u.ctx, w = u.ctx.canvas.width, h = u.ctx.canvas.height;
      const others = alone ? u.series.map((s, i) => i).filter((i) => i > 0 &&
        u.series[i].show && u.series[i].label.split(" ")[0] !== alone) : [];
      const grid = (show) => {
        for (const a of u.axes) a.grid.show = show;
        u.batch(() => { for (const i of others) u.setSeries(i, { show }, false); });
        u.redraw(false);
      };
      grid(false);
      await new Promise((r) => setTimeout(r, 0));
      const want = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
      const img = c.getImageData(0, 0, w, h).data, cols = new Array(w).fill(0);
      grid(true);
      for (let x = 0; x < w; x++) for (let y = 0; y < h; y++) {
        const k = (y * w + x) * 4;
        if (Math.abs(img[k] - want[0]) + Math.abs(img[k + 1] - want[1]) +
            Math.abs(img[k + 2] - want[2]) < 40 && img[k + 3] > 100) { cols[x] = 1; break; }
      }
      return { cols, dpr: devicePixelRatio, left: u.bbox.left, width: u.bbox.width,
               x0: u.scales.x.min, x1: u.scales.x.max };
    }""", [colour, alone])


@pytest.mark.both_stores
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
    """`wattlog energy --by day` over what the rig's collector stores."""
    return cli("energy", *rig.read_args(), "--by", "day", "--from", start, "--to", end)


@pytest.mark.both_stores
def test_energy_view_equals_wattlog_energy(rig):
    """The energy view's table is the API's cells for the same days (the page draws what the
    API answers, it formats nothing), `wattlog energy` prints the same (the days before today:
    all of them committed by now), and the bars stack those numbers. "The same" is for the
    same readings: just after midnight a reading of yesterday may still come (a resend, a
    batch in flight), so the CLI is compared with API answers read before and after it that
    agree with each other."""
    today = int(time.time()) // DAY_S * DAY_S   # the collector's zone here is UTC
    start, end = today - 2 * DAY_S, today
    rig.wait_for("yesterday committed", lambda: all(
        f["committed_until"] >= end for f in rig.call("/api/feeds")["feeds"]
        if f["channel"] == "energy" and f["node"] in PLUGS))

    def table():
        cells = rig.call("/api/energy?by=day&start=%d&end=%d" % (start, end))["cells"]
        return [cells["head"]] + cells["rows"] + [cells["total"]]

    def read_alike():
        """(the API's table, the CLI's lines) read with the same readings, or None."""
        before, cli, after = table(), cli_energy(rig, start, end), table()
        return before == after and (before, cli)

    api, cli = rig.wait_for("the days' readings settled (the API the same before and after "
                            "the CLI)", read_alike, 120)
    assert cli[:-1] == [" ".join("-" if c is None else c for c in row).split()
                        for row in api]  # the share is the CLI's last line
    p = Page(rig)
    try:
        p.open("#energy?by=day&start=%d&end=%d" % (start, end))
        p.wait("() => document.querySelectorAll('#energy-table tbody tr').length === 2")
        page_rows = p.page.evaluate("""() => [...document.querySelectorAll('#energy-table tr')]
            .map((tr) => [...tr.children].map((c) => c.textContent))""")
        assert page_rows == [["–" if c is None else c for c in row] for row in table()]
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


def test_health_shows_each_plugs_wifi_signal(rig):
    """The health view shows the Wi-Fi signal each plug reports in its state, in dBm; the
    fridge's -85 dBm is marked weak in red, and a sentence under the table names it and says
    what helps; the washer's -60 dBm is not."""
    rig.wait_for("the signals in the plugs' states", lambda: [
        (rig.call("/api/plugs/" + n) or {}).get("state", {}).get("rssi") for n in
        ("washer", "fridge")] == [-60, WEAK_RSSI])
    p = Page(rig)
    try:
        p.open("#health")
        p.wait("() => document.querySelectorAll('#plugs-table tbody tr').length >= 4")
        cell = """(n) => { const td = document.querySelector(
            '#plugs-table tr[data-node=' + n + '] [data-field=rssi]');
          return [td.textContent, getComputedStyle(td).color, td.classList.contains('warn')]; }"""
        washer, fridge = (p.page.evaluate(cell, n) for n in ("washer", "fridge"))
        assert washer[0] == "-60 dBm" and not washer[2], washer
        assert fridge[0] == "%d dBm (weak)" % WEAK_RSSI and fridge[2], fridge
        assert fridge[1] != washer[1]  # in the warning colour
        note = p.text("#signal-note")
        assert note.startswith("fridge (%d dBm) has a weak Wi-Fi signal" % WEAK_RSSI), note
        assert "washer" not in note
    finally:
        p.close()


def test_relay_switches_with_the_token_and_not_without(rig):
    """Without the token the switch is read-only, says only the relay's state and why it
    cannot switch, and clicking it sends nothing; with the token it says the state and the
    action apart ("On — switch off"), switches the plug, and the card shows the state the
    plug reports with the action that would undo it."""
    node = "fridge"
    p = Page(rig)
    try:
        p.open()
        p.wait(card_power(node))
        relay = p.page.locator(".card[data-node=%s] [data-field=relay]" % node)
        assert relay.inner_text() == "On"  # the state; no action it could not take
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
        shows = ("(t) => document.querySelector('.card[data-node=%s] [data-field=relay]')"
                 ".textContent === t" % node)
        p.wait(shows, arg="On — switch off")
        assert not relay.is_disabled()
        relay.click()
        p.wait(shows, arg="Off — switch on", timeout_s=30)
        assert [u for m, u in p.requests if m == "POST"] == [
            rig.url + "api/plugs/%s/relay" % node]
        assert rig.call("/api/plugs/" + node)["state"]["relay"] == "OFF"  # the plug says so
        relay.click()
        p.wait(shows, arg="On — switch off", timeout_s=30)
        assert rig.call("/api/plugs/" + node)["state"]["relay"] == "ON"
    finally:
        p.close()


def test_markup_from_the_api_is_shown_as_text_and_errors_as_sentences(rig):
    """A log line and a firmware string carrying markup (published as any client with access
    could) and an API error quoting a request are shown as text, never run; an error is a
    sentence in the page, not a blank chart."""
    evil = '<img src=x onerror="window.pwned=1">'
    with Recorder(rig.broker, name="dashboard-evil") as client:
        client.publish("wattlog/evil-1/log", "boot " + evil)
        client.publish("homeassistant/device/evil-1/config",
                       json.dumps({"dev": {"sw_version": evil[:32]}}))
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


@pytest.mark.both_stores
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


ZIGZAG = """async ([plugs, start, end, spike]) => {
  /* plugs x ~1540 buckets over [start, end), each plug's mean jumping up and down from one
     bucket to the next with a 200 W band around it (what a year of a plug with a daily
     cycle looks like in buckets of 5.7 h), drawn by the page's own drawChart; a spike to
     2 kW in the first plug's max halfway along. Then the same shifted a little, four times
     (zoom steps: the chart kept, its data replaced). ms: each draw to the frame showing it. */
  const h = await import('/web/history.js');
  const n = 1540, bucket = Math.floor((end - start) / n);
  const answers = (shift) => plugs.map((node, k) => {
    const time = [], mean = [], min = [], max = [];
    for (let i = 0; i < n; i++) {
      const m = 300 + 12 * k + 150 * Math.sin(2 * Math.PI * (i + shift) / 4.22);
      time.push(start + i * bucket); mean.push(m); min.push(m - 100); max.push(m + 100);
    }
    if (k === 0) max[n >> 1] = spike;
    return { time, mean, min, max, bucket_s: bucket, raw: false };
  });
  const painted = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  const view = { start, end, live: false, feeds: plugs };
  const ms = [];
  for (const shift of [0, 0.5, 1, 1.5, 2]) {
    const t0 = performance.now();
    h.drawChart(view, plugs, answers(shift));
    await painted();
    ms.push(performance.now() - t0);
  }
  return { ms, spikeAt: start + (n >> 1) * bucket, bucket };
}"""


def test_a_year_of_20_plugs_draws_each_band_with_its_spike(rig):
    """The chart of 20 plugs at about a point per pixel, each plug's mean zigzagging across
    much of the plot (a year of a daily cycle: the view the first zoom step leaves), is
    drawn, and its min-max band (one rectangle per pixel column: uPlot's clipped band fill
    over such a zigzag took 0.35-1.5 s a draw here) still shows a 2 kW spike the mean
    averages away. Synthetic answers through the page's own drawChart: the rig's plugs have
    a day of data, not a year. How long a draw takes is tools/bench/dashboard's figure (the
    times of this test's draws are printed, not asserted)."""
    p = Page(rig)
    try:
        now = int(time.time())
        start, end = now - 365 * DAY_S, now - 300
        p.open("#history?feeds=washer&start=%d&end=%d" % (start, end))
        p.wait("() => window.wattlogDrawn")
        plugs = ["zz-%02d" % k for k in range(20)]
        got = p.page.evaluate(ZIGZAG, [plugs, start, end, 2000])
        print("a year of 20 plugs: draw and paint %s ms" % got["ms"])
        colour = p.page.evaluate("() => window.wattlog.colors.get('zz-00')")
        band = p.page.evaluate("""([t, hex]) => {
          const u = window.wattlog.chart, x = Math.round(u.valToPos(t, 'x', true));
          const want = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
          const y0 = Math.round(u.valToPos(1900, 'y', true));
          const y1 = Math.round(u.valToPos(1000, 'y', true));
          const img = u.ctx.getImageData(x, y0, 1, y1 - y0).data;
          let tinted = 0;
          for (let k = 0; k < img.length; k += 4) {
            // the canvas is transparent where nothing is drawn; the band: the plug's colour
            const d = [0, 1, 2].map((c) => Math.abs(img[k + c] - want[c]));
            if (img[k + 3] > 0 && d[0] + d[1] + d[2] < 60) tinted++;
          }
          return { tinted, rows: y1 - y0 };
        }""", [got["spikeAt"], colour])
        assert band["rows"] > 20 and band["tinted"] >= 0.9 * band["rows"], band
        p.shot("history-zigzag-desktop")
    finally:
        p.close()


def test_plugs_whose_buckets_start_at_different_times_draw_whole_lines(rig):
    """Two plugs drawn together whose buckets start at different times: the gappy plug's
    feed began 21 h after the heat pump's, so over the last day the API gives it finer
    buckets (sized by the data in range) aligned to its own first slot. Each plug's line
    still runs on through the other's times (there it has no value, which is not a gap),
    and the gappy plug's own hole stays a hole."""
    p = Page(rig)
    try:
        feeds = sorted(["heatpump", GAPPY])
        start = int(time.time()) - DAY_S
        p.open("#history?feeds=%s&start=%d&end=now" % (",".join(feeds), start))
        drawn = p.wait("(s) => window.wattlogDrawn && window.wattlogDrawn.start === s && "
                       "window.wattlogDrawn", arg=start)
        union = p.page.evaluate("() => window.wattlog.chart.data[0].length")
        assert union > max(drawn["points"]), ("the two plugs' times interleave", drawn, union)
        px = {node: colour_columns(p, p.page.evaluate("(n) => window.wattlog.colors.get(n)",
                                                       node), alone=node) for node in feeds}

        def columns(node, t0, t1):
            def column(t):
                x = px[node]
                return int(x["left"] + (t - x["x0"]) / (x["x1"] - x["x0"]) * x["width"])
            return px[node]["cols"][column(t0):column(t1)]
        for node in feeds:  # where both have readings: the last hour, each line runs on
            live = columns(node, rig.gap_until + 600, time.time() - 600)
            assert live and sum(live) >= 0.9 * len(live), (node, sum(live), len(live))
        hole = columns(GAPPY, rig.gap_from + 2400, rig.gap_until - 1200)
        assert hole and not any(hole), "the gappy plug's own hole is still a hole"
        p.shot("history-two-plugs-desktop")
        # the gappy plug in coarser buckets than the heat pump's (as when its data spans more
        # of the view): heat pump times fall inside its hole, between its empty buckets
        inside = p.page.evaluate("""async ([start, from, until]) => {
          const h = await import('/web/history.js'), c = await import('/web/common.js');
          const ask = (node, points) => c.api('/api/series?feed=' + node + '/power&start=' +
            start + '&end=' + Math.floor(Date.now() / 1000) + '&points=' + points);
          const answers = [await ask('gappy', 60), await ask('heatpump', 1000)];
          h.drawChart(h.current(), ['gappy', 'heatpump'], answers);
          await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
          const own = new Set(answers[0].time);
          return answers[1].time.filter((t) => t > from + 600 && t < until - 600 &&
                                        !own.has(t)).length;
        }""", [start, rig.gap_from, rig.gap_until])
        assert inside > 10, inside
        px[GAPPY] = colour_columns(p, p.page.evaluate("() => window.wattlog.colors.get('gappy')"))
        hole = columns(GAPPY, rig.gap_from + 2400, rig.gap_until - 1200)
        assert hole and not any(hole), "the hole stays a hole with the other plug's times in it"
    finally:
        p.close()


def test_health_says_bytes_written_per_measured_day(rig):
    """The collector started minutes ago: Health shows today's bytes written as a partial
    day, with how much of it was measured, and no average (minutes after a start, scaled up
    to a day, would be mostly the start-up's work, not a day's); a sentence says what a
    partial day is. /api/health says the same."""
    h = rig.call("/api/health")
    assert [d["whole"] for d in h["written_per_day"]] == [False], h["written_per_day"]
    assert h["written_per_day_average"] is None
    p = Page(rig)
    try:
        p.open("#health")
        rows = p.wait("""() => { const rows = [...document.querySelectorAll('#collector-table tr')]
          .map((tr) => [...tr.children].map((c) => c.textContent));
          return rows.length > 3 && rows; }""")
        written = [r for r in rows if r[0].startswith("written")]
        assert len(written) == 1, rows
        assert re.fullmatch(r"written \d{4}-\d\d-\d\d", written[0][0]), written
        assert re.fullmatch(r"[\d.]+ [kMG]?B so far \(partial day: (\d+ h )?\d+ min measured\)",
                            written[0][1]), written
        assert not [r for r in rows if "average" in " ".join(r)], rows
        assert "A partial day is one it did not run through from midnight to midnight" in \
            p.text("#written-note")
    finally:
        p.close()


def test_each_plug_has_one_colour_in_every_view_and_after_a_reload(rig):
    """A plug's colour is the same on its Overview card, its name in the History's chooser
    and the Energy view's legend, whichever view a page opens first, and after a reload; a
    plug that has announced itself but stored nothing (a card, no bars, no line) moves no
    other plug's colour."""
    with Recorder(rig.broker, name="dashboard-announce") as client:
        client.publish("wattlog/aaa-announced/status", "online", retain=True)
    rig.wait_for("the announced plug", lambda: rig.call("/api/plugs/aaa-announced"))
    colours = {
        "#energy": ("document.querySelectorAll('#bars-legend span').length >= 4",
                    "[...document.querySelectorAll('#bars-legend span')].map((s) => "
                    "[s.textContent, getComputedStyle(s.querySelector('i')).backgroundColor])"),
        "#overview": ("document.querySelectorAll('.card[data-node=\"aaa-announced\"]').length",
                      "[...document.querySelectorAll('.card[data-node]')].filter((c) => "
                      "c.dataset.node).map((c) => [c.dataset.node, "
                      "getComputedStyle(c.querySelector('h3')).borderLeftColor])"),
        "#history": ("window.wattlogDrawn",
                     "[...document.querySelectorAll('#history-plugs label')].map((l) => "
                     "[l.textContent.trim(), getComputedStyle(l.querySelector('span')).color])"),
    }
    seen = {}
    for k, view in enumerate(("#energy", "#overview", "#history", "#energy")):
        p = Page(rig)   # a page of its own: the view it opens first is this one
        try:
            p.open(view)
            ready, read = colours[view]
            got = p.wait("() => (%s) && %s" % (ready, read))
            for node, colour in got:
                seen.setdefault(node, {})[k] = colour
        finally:
            p.close()
    for node in PLUGS + (GAPPY,):
        assert len(seen.get(node, ())) == 4 and len(set(seen[node].values())) == 1, (node, seen)
    others = {colour for n, v in seen.items() if n != "aaa-announced" for colour in v.values()}
    assert seen["aaa-announced"][1] not in others


BARS = """() => {
  const box = (e) => e.getBoundingClientRect();
  return {
    ticks: [...document.querySelectorAll('#bars-area .tick')].map((t) =>
      [t.textContent, box(t).top]),
    cols: [...document.querySelectorAll('#bars .col')].map((c) => {
      const segs = [...c.querySelectorAll('.seg')].map(box);
      return { left: box(c).left, right: box(c).right,
               top: Math.min(...segs.map((s) => s.top)), bottom: box(c).bottom }; }),
    dates: [...document.querySelectorAll('#bars .col')].map((c) => c.querySelector('.date'))
      .filter((d) => d && !d.hidden).map((d) => [d.textContent, box(d).left, box(d).right]),
  }; }"""


def test_energy_bars_have_a_kwh_axis_dates_and_values_on_hover_and_tap(rig):
    """The energy bars have a kWh axis (gridlines from 0 up at even steps, the top one at or
    above the largest total, each column as tall as its total on it), the date under each
    column (here both days fit), and a period's values under the chart: the latest at first,
    then the column hovered with a mouse or tapped on a phone, each plug's kWh as the table
    says it."""
    today = int(time.time()) // DAY_S * DAY_S
    start, end = today - 2 * DAY_S, today
    rig.wait_for("yesterday committed", lambda: all(
        f["committed_until"] >= end for f in rig.call("/api/feeds")["feeds"]
        if f["channel"] == "energy" and f["node"] in PLUGS))
    table = rig.call("/api/energy?by=day&start=%d&end=%d" % (start, end))
    totals = table["totals"]["kwh"]
    for viewport, touch in ((DESKTOP, False), (PHONE, True)):
        p = Page(rig, viewport, has_touch=touch)
        try:
            p.open("#energy?by=day&start=%d&end=%d" % (start, end))
            bars = p.wait("() => document.querySelectorAll('#bars .col').length === 2 && "
                          "(%s)()" % BARS)
            labels = [text for text, _ in bars["ticks"]]
            values = [float(text.split()[0]) for text in labels]
            assert values[0] == 0 and labels[-1].endswith(" kWh"), labels
            steps = {round(b - a, 6) for a, b in zip(values, values[1:])}
            assert len(steps) == 1 and 2 <= len(values) <= 8, labels
            assert values[-2] < max(x or 0 for x in totals) <= values[-1], (labels, totals)
            y0, y_top = bars["ticks"][0][1], bars["ticks"][-1][1]

            def y(kwh):
                return y0 - (y0 - y_top) * (kwh or 0) / values[-1]
            for col, total in zip(bars["cols"], totals):
                if total:
                    assert abs(col["top"] - y(total)) <= 2, (col, total, y(total))
            assert len(bars["dates"]) == 2, bars  # both days' dates fit
            for (text, left, right), col, period in zip(bars["dates"], bars["cols"],
                                                        table["periods"]):
                assert str(int(period["label"][8:10])) in text.split(), (text, period)
                assert col["left"] <= (left + right) / 2 <= col["right"], (text, col)

            last = table["periods"][1]["label"]
            assert p.text("#bars-value").startswith("%s: %.3f kWh" % (last, totals[1]))
            for k in (0, 1):  # each column in turn: its own values under the chart
                column = p.page.locator("#bars .col").nth(k)
                column.tap() if touch else column.hover()
                label = table["periods"][k]["label"]
                said = p.wait("(l) => { const t = document.querySelector('#bars-value')"
                              ".textContent; return t.startsWith(l + ':') && t; }", arg=label)
                if totals[k] is None:
                    assert said == label + ": – no readings", said
                    continue
                assert said.startswith("%s: %.3f kWh" % (label, totals[k])), said
                for plug in table["plugs"]:
                    if plug["kwh"][k] is not None:
                        assert "%s %.3f kWh" % (plug["node"], plug["kwh"][k]) in said, said
            p.shot("energy-value-" + ("phone" if touch else "desktop"))
        finally:
            p.close()


PHONE_VIEWS = (("#overview", "document.body.dataset.cards"),
               ("#history", "window.wattlogDrawn"),
               ("#energy", "document.querySelectorAll('#bars .col').length"),
               ("#health", "document.querySelectorAll('#plugs-table tbody tr').length >= 4"))


SIDEWAYS = """() => {
  const s = document.scrollingElement;
  return { page: s.scrollWidth - s.clientWidth,
           boxes: [...document.querySelectorAll('main .table-wrap')].filter((w) => w.offsetParent)
             .map((w) => { const cue = w.nextElementSibling;
               return [w.firstElementChild.id, w.scrollWidth > w.clientWidth + 1,
                       !!(cue && cue.classList.contains('scroll-cue') && cue.offsetParent)]; }) };
}"""


def test_nothing_scrolls_sideways_at_phone_widths(rig):
    """At 360 and 390 px, on a phone (its scrollbars take no room) and in a plain browser
    window (a page scrollbar takes 15 px), no view makes the page scroll sideways
    (document.scrollingElement's scrollWidth <= clientWidth). A table wider than its box
    says so beside it (the energy table, swiped); the Health view's plugs table is a stack of
    cards that needs no scrolling. In the window, the history chart follows its box when a
    page scrollbar comes after it drew (the page grown taller, as a long legend makes it)."""
    plain = rig.pw.chromium.launch(executable_path=CHROMIUM,
                                   args=["--no-sandbox", "--disable-gpu"],
                                   ignore_default_args=["--hide-scrollbars"])
    try:
        for browser, touch in ((rig.browser, True), (plain, False)):
            for width in (360, 390):
                p = Page(rig, {"width": width, "height": 740}, has_touch=touch, browser=browser)
                try:
                    p.open()
                    for view, ready in PHONE_VIEWS:
                        p.page.click("nav a[href='%s']" % view)
                        p.wait("() => %s" % ready)
                        # a box's cue follows its size from a ResizeObserver, a frame after
                        # the table or the page's scrollbar came: the cue is given that long
                        cued = "() => { const g = (%s)(); return g.boxes.every((b) => !b[1] " \
                               "|| b[2]); }" % SIDEWAYS
                        try:
                            p.wait(cued, timeout_s=5)
                        except PlaywrightTimeout:
                            pass  # the assertion below says which box has no cue
                        got = p.page.evaluate(SIDEWAYS)
                        where = (view, width, "phone" if touch else "window", got)
                        assert got["page"] <= 0, where
                        assert all(cue for _, over, cue in got["boxes"] if over), where
                        assert not [t for t, over, _ in got["boxes"] if over and
                                    t == "plugs-table"], where
                        if view == "#history" and not touch:
                            p.page.evaluate("() => { document.body.style.minHeight = "
                                            "(2 * innerHeight) + 'px'; }")
                            p.wait("() => document.scrollingElement.scrollWidth <= "
                                   "document.scrollingElement.clientWidth && "
                                   "innerWidth > document.scrollingElement.clientWidth",
                                   timeout_s=5)
                            p.page.evaluate("() => { document.body.style.minHeight = ''; }")
                finally:
                    p.close()
    finally:
        plain.close()
