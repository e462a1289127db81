"""test_dashboard_written.py - the dashboard's views that need data no simulated plug could
make in seconds, in a real headless Chromium (dashrig.py): a week around a DST change with a
day/night tariff, 20 plugs, a run of the washer, and a broker or InfluxDB taken away. Each test
starts its own broker and collector (WrittenRig) over readings written with commit.py's
Committer, as the collector writes them; the module shares one browser. Each test ends on what
it waits for (bounded) and fails on any console error it did not expect. The live plugs' views
are test_dashboard.py.
"""

import json
import re
import shutil
import subprocess
import sys
import time

import pytest

from dashrig import DAY_S, DESKTOP, MARKS, PHONE, Chromium, Page, get_json
from helpers import REPO
from influxd import Influxd
from rig import Broker, Collector, Recorder, free_port

pytestmark = MARKS


@pytest.fixture(scope="module")
def chromium():
    c = Chromium()
    yield c
    c.close()


ZONE = "Europe/Berlin"


TARIFF_TOML = ('[tariff]\ncurrency = "EUR"\nday_price = 0.32\nnight_price = 0.22\n'
               'night_start = "22:00"\nnight_end = "06:00"\n')


TARIFF_ARG = "day=0.32,night=0.22,night_hours=22-06"   # the same, as wattlog energy takes it


TARIFF_PLUGS = ("kettle", "lamp")


def local_midnight(t, zone):
    import datetime
    d = datetime.datetime.fromtimestamp(t, zone)
    return int(d.replace(hour=0, minute=0, second=0, microsecond=0).timestamp())


def last_dst_day(zone, now):
    """The local midnight starting the latest day not 24 h long, at least five days ago (so
    the week around it ends before yesterday)."""
    import datetime
    day = datetime.datetime.fromtimestamp(now, zone).date() - datetime.timedelta(days=4)
    while True:
        day -= datetime.timedelta(days=1)
        a = int(datetime.datetime.combine(day, datetime.time(), zone).timestamp())
        b = int(datetime.datetime.combine(day + datetime.timedelta(days=1), datetime.time(),
                                          zone).timestamp())
        if b - a != DAY_S:
            return a


class WrittenRig:
    """A collector (its config file: `config`) over a data directory holding plugs' readings
    written with commit.py's Committer, as the collector writes them (a plug simulated this
    far back, or twenty of them, would take minutes): power_w(node, times) at the 10 s slots
    `times`, and an energy counter that sums it; each plug's retained status and state
    published as a plug does, so the collector knows them as plugs."""

    def __init__(self, work, nodes, times, power_w, config=""):
        import numpy as np
        from wattlog.store.commit import Committer
        from wattlog.complaints import Complaints
        self.now = int(time.time()) // 10 * 10
        self.data = work / "data"
        committer = Committer(str(self.data), Complaints())
        try:
            for node in nodes:
                power = power_w(node, times)
                energy = 3.0 + np.cumsum(power * 10 / 3.6e6)
                committer.commit({(node, "power"): (times, power),
                                  (node, "energy"): (times, energy)}, {node: 10}, {})
        finally:
            committer.close()
        self.broker = self.collector = None
        try:
            self.broker = Broker(str(work / "mosquitto")).start()
            with Recorder(self.broker, name="dashboard-written") as c:
                for k, node in enumerate(nodes):
                    c.publish("wattlog/%s/status" % node, "online", retain=True)
                    c.publish("wattlog/%s/state" % node, json.dumps(
                        {"time": self.now - 10, "power": 2.0 + k, "voltage": 230.0,
                         "current": 0.01, "energy": 3.0, "relay": "ON"}), retain=True)
            path = work / "wattlog.toml"
            path.write_text(config)
            self.collector = Collector(self.broker.url, self.data, config=path, listen=True)
            self.port, self.url = self.collector.port, self.collector.http_url + "/"
            self.wait_for("every plug listed", lambda: len(
                (self.call("/api/plugs") or {}).get("plugs", [])) >= len(nodes))
        except BaseException:
            self.close()
            raise

    def call(self, path):
        return get_json(self.url, path)

    def wait_for(self, what, check, timeout_s=60.0):
        """Until check() is truthy (its value), the collector still running."""
        return self.collector.wait_until(what, check, timeout_s)

    def close(self):
        if self.collector is not None:
            self.collector.stop()
        if self.broker is not None:
            self.broker.stop()


class TariffRig(WrittenRig):
    """WrittenRig with a day/night [tariff] and timezone Europe/Berlin: a kettle and a lamp,
    read for a week around the zone's latest DST change and for yesterday and today."""

    def __init__(self, work):
        import zoneinfo
        import numpy as np
        self.zone = zoneinfo.ZoneInfo(ZONE)
        now = int(time.time()) // 10 * 10
        self.dst = last_dst_day(self.zone, now)
        self.today = local_midnight(now, self.zone)
        self.week = (self.dst - 3 * DAY_S, self.dst + 4 * DAY_S)
        times = np.union1d(np.arange(self.week[0], self.week[1], 10),
                           np.arange(self.today - DAY_S, now, 10)).astype(np.int64)

        def power_w(node, t):
            if node == "kettle":  # 2 kW for 3 minutes every 2 hours, 2 W otherwise
                return np.where(t % 7200 < 180, 2000.0, 2.0)
            hour = t % DAY_S // 3600  # the lamp: 60 W from 17:00 to 01:00 UTC, 4 W by day
            return np.where((hour >= 17) | (hour < 1), 60.0, 4.0)
        super().__init__(work, TARIFF_PLUGS, times, power_w,
                         'timezone = "%s"\n%s' % (ZONE, TARIFF_TOML))

    def energy(self, by, start, end):
        """`wattlog energy` with the same tariff and zone: each line's words."""
        out = subprocess.run(
            [sys.executable, "-m", "wattlog.cli", "energy", "--data", str(self.data), "--by", by,
             "--timezone", ZONE, "--tariff", TARIFF_ARG, "--from", str(start), "--to", str(end)],
            capture_output=True, text=True, cwd=str(REPO), timeout=60)
        assert out.returncode == 0, out.stderr
        return [line.split() for line in out.stdout.splitlines()]


def energy_page_rows(p):
    """The energy table's body and foot rows, each as the words its cells hold."""
    return p.page.evaluate("""() => [...document.querySelectorAll(
        '#energy-table tbody tr, #energy-table tfoot tr')].map((tr) => [...tr.children]
        .map((c) => c.textContent.replace(/–/g, '-')).join(' ').split(/\\s+/))""")


def test_energy_cost_with_a_tariff_weeks_months_and_dst(chromium, tmp_path):
    """With a day/night tariff and the collector in Europe/Berlin: the energy view's kWh and
    cost per day equal `wattlog energy`'s for the week around the latest DST change (its
    23 or 25 h day labelled so); per week and per month the view equals `wattlog energy`
    too, and each week's and month's kWh is the sum of its days (the test's own sum of the
    day figures); each overview card's today and this month (kWh and cost) are `wattlog
    energy`'s. The week and month buttons switch the grouping."""
    t = TariffRig(tmp_path)
    p = Page(chromium)
    p.url = t.url
    try:
        start, end = t.week
        p.open("#energy?by=day&start=%d&end=%d" % (start, end))
        p.wait("() => document.querySelectorAll('#energy-table tbody tr').length === 7")
        cli_days = t.energy("day", start, end)
        assert energy_page_rows(p) == cli_days[1:-1]  # the days and the total, cost included
        head = p.page.evaluate("() => [...document.querySelectorAll('#energy-table thead th')]"
                               ".map((c) => c.textContent)")
        assert head == t.call("/api/energy?by=day&start=%d&end=%d" % (start, end))["cells"][
            "head"]  # the API's words for the columns, not the page's own
        assert any("(%dh)" % h in " ".join(r) for r in cli_days for h in (23, 25)), cli_days
        assert "0.22 EUR/kWh at night (22:00 to 06:00)" in p.text("#energy-note")
        p.shot("energy-tariff-desktop")
        for by in ("week", "month"):
            p.open("#energy?by=%s&start=%d&end=%d" % (by, start, end))
            p.wait("(by) => document.querySelector('[data-by=' + by + ']')"
                   ".getAttribute('aria-pressed') === 'true' && "
                   "document.querySelectorAll('#energy-table tfoot tr').length === 1 && "
                   "window.wattlog.energy && window.wattlog.energy.by === by", arg=by)
            assert energy_page_rows(p) == t.energy(by, start, end)[1:-1], by
            table = t.call("/api/energy?by=%s&start=%d&end=%d" % (by, start, end))
            for k, period in enumerate(table["periods"]):
                days = t.call("/api/energy?by=day&start=%d&end=%d" % (period["start"],
                                                                     period["end"]))
                assert days["periods"][0]["start"] == period["start"]
                assert days["periods"][-1]["end"] == period["end"]
                for plug, daily in zip(table["plugs"], days["plugs"]):
                    summed = sum(x for x in daily["kwh"] if x is not None)
                    assert abs(plug["kwh"][k] - summed) < 1e-6 * len(daily["kwh"]) + 1e-9, (
                        by, period["label"], plug["node"], plug["kwh"][k], summed)
        p.page.click("[data-by=day]")  # the buttons: the default range, per day
        p.wait("() => document.querySelector('[data-by=day]').getAttribute('aria-pressed') "
               "=== 'true' && window.wattlog.energy.by === 'day'")
        p.page.click("[data-by=week]")
        p.wait("() => window.wattlog.energy.by === 'week' && "
               "document.querySelectorAll('#bars .col').length >= 1")

        p.open()
        today = t.energy("day", t.today, t.now + 10)[-3]  # the last day: today
        month = t.energy("month", t.today, t.now + 10)[-3]
        n = len(TARIFF_PLUGS)
        for k, node in enumerate(TARIFF_PLUGS):  # a plug's kWh and cost, counted from the end
            kwh_at, cost_at = -2 - 2 * (n - k), -1 - 2 * (n - k)
            shown = p.wait("(n) => { const c = [...document.querySelectorAll('.card[data-node]')]"
                           ".find((c) => c.dataset.node === n); return c && /EUR/.test("
                           "c.querySelector('[data-field=today]').textContent) && "
                           "[c.querySelector('[data-field=today]').textContent, "
                           "c.querySelector('[data-field=month]').textContent]; }", arg=node)
            assert shown[0] == "%s kWh · %s EUR" % (today[kwh_at], today[cost_at]), shown
            assert shown[1] == "%s kWh · %s EUR" % (month[kwh_at], month[cost_at]), shown
        total = p.text(".card.total [data-field=today]")
        assert total == "%s kWh · %s EUR" % (today[-2], today[-1]), total
        p.shot("overview-tariff-desktop")
    finally:
        p.close()
        t.close()


TWENTY = ["kitchen-dishwasher-under-sink-%02d" % k if k % 4 == 0 else "plug-%02d" % k
          for k in range(20)]  # every fourth name as long as a node id may be (32)


def delta_e(a, b):
    """CIE76 colour difference of two sRGB colours (0-255 each): 2.3 is just noticeable;
    under ~10 two lines in a chart are easily taken for each other."""
    def lab(rgb):
        lin = [c / 255 / 12.92 if c / 255 <= 0.04045 else ((c / 255 + 0.055) / 1.055) ** 2.4
               for c in rgb]
        xyz = [sum(m * c for m, c in zip(row, lin)) / w for row, w in zip(
            ((0.4124, 0.3576, 0.1805), (0.2126, 0.7152, 0.0722), (0.0193, 0.1192, 0.9505)),
            (0.95047, 1.0, 1.08883))]
        f = [v ** (1 / 3) if v > 216 / 24389 else (24389 / 27 * v + 16) / 116 for v in xyz]
        return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])
    return sum((x - y) ** 2 for x, y in zip(lab(a), lab(b))) ** 0.5


NO_OVERFLOW = """() => {
  const doc = document.documentElement, cards = document.querySelector('#cards');
  const wide = [...document.querySelectorAll('main *')].filter((e) => e.offsetParent &&
    e.getBoundingClientRect().right > doc.clientWidth + 1 && !e.closest('.table-wrap'));
  return { page: doc.scrollWidth - doc.clientWidth, cards: cards.scrollWidth - cards.clientWidth,
           wide: wide.slice(0, 5).map((e) => e.tagName + '.' + e.className) };
}"""


def test_twenty_plugs_fit_and_stay_usable(chromium, tmp_path):
    """20 plugs (two days each; names up to 32 characters): every card filled, no sideways
    scrolling on a desktop nor on a phone, several plugs picked in the history's chooser,
    the energy bars and table list all 20 with 20 different colours, no console errors."""
    import numpy as np
    now = int(time.time()) // 10 * 10
    times = np.arange(now - 2 * DAY_S, now, 10, dtype=np.int64)
    t = WrittenRig(tmp_path, TWENTY, times, lambda node, ts: np.full(
        len(ts), 10.0 + 5 * TWENTY.index(node)))
    p = Page(chromium)
    p.url = t.url
    try:
        page = p.open()
        filled = """() => { const cards = [...document.querySelectorAll('.card[data-node]')]
          .filter((c) => c.dataset.node);
          return cards.length === 20 && cards.every((c) =>
            /W$/.test(c.querySelector('[data-field=power]').textContent) &&
            /kWh/.test(c.querySelector('[data-field=today]').textContent)); }"""
        p.wait(filled)
        for size, name in ((DESKTOP, "desktop"), (PHONE, "phone")):
            page.set_viewport_size(size)
            over = page.evaluate(NO_OVERFLOW)
            assert over["page"] <= 0 and over["cards"] <= 0 and not over["wide"], (name, over)
            p.shot("overview-20-plugs-" + name)
        page.set_viewport_size(DESKTOP)

        p.open("#history?feeds=%s&start=%d&end=now" % (TWENTY[0], now - 3600))
        p.wait("() => window.wattlogDrawn && window.wattlog.chart.series.length === 4")
        assert page.locator("#history-plugs input").count() == 20
        asked = len(p.requests)
        for node in (TWENTY[5], TWENTY[16]):
            page.locator("#history-plugs input[value='%s']" % node).check()
        want = [TWENTY[0], TWENTY[5], TWENTY[16]]
        labels = p.wait("(n) => window.wattlog.chart && window.wattlog.chart.series.length === "
                        "1 + 3 * n && window.wattlog.chart.series.filter((s, i) => i % 3 === 1)"
                        ".map((s) => s.label)", arg=len(want))
        assert sorted(labels) == sorted(want) and "feeds=" in page.url
        series = [u for m, u in p.requests[asked:] if "/api/series?" in u]
        assert series and series[-1].count("feed=") == 3, series  # one request, not a plug each
        page.set_viewport_size(PHONE)
        p.wait("() => window.wattlog.chart.width < 400")  # the chart follows the width
        over = page.evaluate(NO_OVERFLOW)
        assert over["page"] <= 0 and not over["wide"], over
        p.shot("history-20-plugs-phone")
        page.set_viewport_size(DESKTOP)

        p.open("#energy?by=day")
        p.wait("() => document.querySelectorAll('#bars-legend span').length === 20 && "
               "document.querySelectorAll('#energy-table tbody tr').length >= 2")
        legend = page.evaluate("""() => [...document.querySelectorAll('#bars-legend span')]
          .map((s) => [s.textContent, getComputedStyle(s.querySelector('i')).backgroundColor])""")
        assert sorted(n for n, _ in legend) == sorted(TWENTY)
        rgb = [tuple(int(x) for x in re.findall(r"\d+", c)[:3]) for _, c in legend]
        worst = min(delta_e(a, b) for i, a in enumerate(rgb) for b in rgb[i + 1:])
        assert worst >= 30, ("two plugs' colours are hard to tell apart", worst, legend)
        segs = page.evaluate("""() => [...document.querySelectorAll('#bars .col')].at(-2)
          .querySelectorAll('.seg').length""")
        assert segs == 20  # yesterday's bar: a segment per plug
        head = page.evaluate("() => [...document.querySelectorAll('#energy-table thead th')]"
                             ".map((c) => c.textContent)")
        assert [h for h in head if h.endswith(" kWh") and h != "total kWh"] == \
            [n + " kWh" for n in sorted(TWENTY)]
        p.shot("energy-20-plugs-desktop")
        page.set_viewport_size(PHONE)
        over = page.evaluate(NO_OVERFLOW)
        assert over["page"] <= 0 and not over["wide"], over  # the table scrolls in its box
        p.shot("energy-20-plugs-phone")
    finally:
        p.close()
        t.close()


CLOCK = r"\d\d:\d\d( [AP]M)?"   # a time of today as the browser's locale writes it


LIVE = """() => { const e = document.querySelector('#live'), css = getComputedStyle(document.documentElement);
  return { text: e.textContent, live: document.body.dataset.live,
           dot: getComputedStyle(e, '::before').color,
           green: css.getPropertyValue('--on').trim(), red: css.getPropertyValue('--bad').trim(),
           amber: css.getPropertyValue('--warn').trim() }; }"""


def rgb(hex_colour):
    """A CSS #rrggbb as getComputedStyle gives it."""
    return "rgb(%d, %d, %d)" % tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))


def link_cell(name):
    """JS: the Health view's cell saying the collector's link `name` (broker, influx)."""
    return ("() => { const td = document.querySelector('#collector-table [data-field=%s] td');"
            " return td && td.textContent; }" % name)


def one_plug_rig(tmp_path, config=""):
    """WrittenRig with one plug and an hour of its readings: a collector of its own, so its
    broker (and InfluxDB) can be taken away without the module's plugs noticing."""
    import numpy as np
    now = int(time.time()) // 10 * 10
    return WrittenRig(tmp_path, ["plug-a"], np.arange(now - 3600, now, 10, dtype=np.int64),
                      lambda node, ts: np.full(len(ts), 50.0), config)


def test_the_header_says_when_the_broker_is_unreachable(chromium, tmp_path):
    """The real mosquitto stops under a running collector and an open page: the header says
    in words that the broker is unreachable and since when, its dot turns from green to red,
    and the Health view says what the collector's tries meet; nothing scrolls sideways on a
    phone for the longer words. The broker starts again: by itself, the header says live,
    green, and Health says connected. /api/health says the same."""
    t = one_plug_rig(tmp_path)
    p = Page(chromium)
    p.url = t.url
    address = "127.0.0.1:%d" % t.broker.port
    try:
        p.open("#health")
        p.wait("() => document.body.dataset.live === '1'")
        cell = p.wait(link_cell("broker"))
        assert cell.startswith("connected to %s since " % address), cell
        live = p.page.evaluate(LIVE)
        assert live["text"] == "live" and live["dot"] == rgb(live["green"]), live

        t.broker.stop()
        p.wait("() => document.body.dataset.live === '0'")
        live = p.page.evaluate(LIVE)
        assert re.fullmatch(r"broker unreachable since %s" % CLOCK, live["text"]), live
        assert live["dot"] == rgb(live["red"]) != rgb(live["green"]), live
        cell = p.wait("() => { const td = document.querySelector("
                      "'#collector-table [data-field=broker] td');"
                      " return td && /Connection refused/.test(td.textContent) && td.textContent; }")
        assert re.fullmatch(r"unreachable since %s: cannot reach it \(Connection refused\)"
                            % CLOCK, cell), cell
        assert t.call("/api/health")["broker"]["state"] == "down"
        p.page.set_viewport_size({"width": 360, "height": 740})
        assert p.page.evaluate("() => document.scrollingElement.scrollWidth <= "
                               "document.scrollingElement.clientWidth")
        p.shot("broker-down-phone")
        p.page.set_viewport_size(DESKTOP)

        t.broker.start()
        p.wait("() => document.body.dataset.live === '1'", timeout_s=60)
        live = p.page.evaluate(LIVE)
        assert live["text"] == "live" and live["dot"] == rgb(live["green"]), live
        cell = p.wait("() => { const td = document.querySelector("
                      "'#collector-table [data-field=broker] td');"
                      " return td && /^connected/.test(td.textContent) && td.textContent; }")
        assert cell.startswith("connected to %s since " % address)
        assert t.call("/api/health")["broker"]["state"] == "up"
    finally:
        p.close(allowed=[r"ERR_INCOMPLETE_CHUNKED_ENCODING"])
        t.close()


@pytest.mark.skipif(shutil.which("influxd") is None,
                    reason="Debian's influxdb is not installed (tools/setup)")
def test_the_header_and_health_say_when_influxdb_is_unreachable(chromium, tmp_path):
    """The InfluxDB sink writes to a port where nothing answers: the header stays live (the
    page's data is fine) but says InfluxDB is unreachable, its dot amber, and the Health view
    says what the last write met. A real InfluxDB (Debian's influxd) starts on that port: the
    sink's next try goes through, and the header says live, green; Health says it writes
    there, with the points it sent."""
    port = free_port()
    t = one_plug_rig(tmp_path, '[influx]\nurl = "influx://127.0.0.1:%d/wattlog"\n' % port)
    p = Page(chromium)
    p.url = t.url
    db = None
    try:
        p.open("#health")
        p.wait("() => /InfluxDB unreachable/.test(document.querySelector('#live').textContent)")
        live = p.page.evaluate(LIVE)
        assert re.fullmatch(r"live · InfluxDB unreachable since %s" % CLOCK, live["text"]), live
        assert live["live"] == "1" and live["dot"] == rgb(live["amber"]), live
        cell = p.wait(link_cell("influx"))
        assert re.fullmatch(r"unreachable since %s: cannot write to InfluxDB at " % CLOCK +
                            r"http://127\.0\.0\.1:%d \(database wattlog\) \(.*refused.*\)" % port,
                            cell), cell
        db = Influxd(str(tmp_path), "wattlog", port=port).start()
        p.wait("() => document.querySelector('#live').textContent === 'live'", timeout_s=90)
        live = p.page.evaluate(LIVE)
        assert live["dot"] == rgb(live["green"]), live
        cell = p.wait("() => { const td = document.querySelector("
                      "'#collector-table [data-field=influx] td');"
                      " return td && /^writing/.test(td.textContent) && td.textContent; }")
        assert cell.startswith("writing to http://127.0.0.1:%d (database wattlog) since" % port)
        sink = t.call("/api/health")["influx"]
        assert sink["state"] == "up" and sink["sent_points"] > 0, sink
    finally:
        p.close()
        t.close()
        if db is not None:
            db.stop()


def test_runs_view_draws_a_run_and_its_kwh_and_cost_equal_wattlog_runs(chromium, tmp_path):
    """Three days of a washer (08:00 and 19:00) and a fridge, written as the collector writes
    them, with a flat tariff: the collector finds their runs itself at start-up. The Runs
    view lists the washer's runs with the very cells `wattlog runs` prints (start, end,
    duration, kWh, cost, peak W), the latest first; a tap on a run draws its power curve
    from before its start to after its end, its peak the run's; runs per week are listed;
    the fridge, which cycles, has its duty cycle per day. At desktop and phone width."""
    import numpy as np
    from wattnode.wire import EPOCH_UNIX
    from wattsim.profiles import Profile
    now = int(time.time()) // 10 * 10
    times = np.arange(now - 3 * DAY_S, now, 10, dtype=np.int64)
    specs = {"washer": "washer:0800+1900", "fridge": "fridge"}

    def power_w(node, ts):
        p, t0 = Profile(specs[node]), int(ts[0]) - EPOCH_UNIX
        dw = np.array([p.power_dw(t) for t in range(t0, t0 + 10 * len(ts))], dtype=float)
        return np.round(dw.reshape(-1, 10).mean(axis=1) / 10, 1)
    config = "[tariff]\nprice = 0.25\n"
    t = WrittenRig(tmp_path, list(specs), times, power_w, config)
    p = Page(chromium)
    p.url = t.url
    try:
        t.wait_for("the runs found", lambda: len(((t.call("/api/runs?plug=washer") or {})
                                                   .get("plugs") or [{"runs": []}])[0]["runs"]) >= 4)
        cli = json.loads(subprocess.run(
            [sys.executable, "-m", "wattlog.cli", "runs", "washer", "--json", "--data",
             str(t.data), "--config", str(tmp_path / "wattlog.toml")],
            capture_output=True, text=True, check=True, timeout=60).stdout)["plugs"][0]
        page = p.open("#runs?plug=washer")
        rows = p.wait("""() => { const r = [...document.querySelectorAll('#runs-table tbody tr')];
          return r.length && r.map((tr) => [...tr.children].map((td) => td.textContent)); }""")
        assert rows == cli["cells"][::-1] and all(re.fullmatch(r"\d+\.\d\d", c[4]) for c in rows)
        first = page.locator("#runs-table tbody tr").first
        start = int(first.get_attribute("data-start"))
        run = next(r for r in cli["runs"] if r["start"] == start)
        first.click()
        p.wait("(s) => window.wattlogRunDrawn === s", arg=start)
        drawn = page.evaluate("""() => { const u = window.wattlog.runChart;
          const ys = u.data[1].filter((v) => v != null);
          const c = u.ctx.getImageData(0, 0, u.ctx.canvas.width, u.ctx.canvas.height).data;
          let inked = 0; for (let i = 3; i < c.length; i += 4) if (c[i]) inked++;
          return { lo: u.data[0][0], hi: u.data[0][u.data[0].length - 1],
                   peak: Math.max(...ys), inked }; }""")
        assert drawn["lo"] < start and drawn["hi"] >= run["end"], drawn
        assert abs(drawn["peak"] - run["peak_w"]) < 0.1 and drawn["inked"] > 500, drawn
        assert "#runs?plug=washer&run=%d" % start in page.url
        weeks = page.locator("#runs-weeks tbody tr").count()
        assert weeks >= 1
        for size, name in ((DESKTOP, "desktop"), (PHONE, "phone")):
            page.set_viewport_size(size)
            p.shot("runs-" + name)
        page.set_viewport_size(DESKTOP)
        p.open("#runs?plug=fridge")
        days = p.wait("() => document.querySelectorAll('#runs-duty tbody tr').length")
        assert days >= 3
        assert "cycling" in p.text("#runs-said")
    finally:
        p.close()
        t.close()
