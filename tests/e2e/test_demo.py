"""test_demo.py - tools/demo says only what it measured (issue 10 item 10): no promised
duration it then misses, a progress bar that reaches its end, no line printed twice in a row,
and a clean run ends with exit status 0 and the feeds table. With --ota, `wattlog ota --all`
updates the demo's plugs (issue 14, "Done when"): each confirms the new build, and `wattlog
nodes` says so. Real time: the demo backfills for --backfill seconds and runs live for
--duration seconds of wall time, as a person sees it, and an update is a real-time exchange;
one demo run checks both, since each costs half a minute. While it runs, the dashboard at
the address it prints serves the page, and the API the page reads lists the demo's plugs
(issue 13, "Done when"; tests/e2e/test_dashboard.py drives the page itself in Chromium).

Issue 21 item 20: a Ctrl-C from the terminal (SIGINT to the demo's whole process group) stops
the plugs, then the collector (which commits what is pending), then the broker, a line for
each, and loses nothing; a run without --data starts on a clean ./demo-data, and one with
--data DIR goes on from what DIR holds without measuring a stored slot again; the demo's
simulated plugs are each a device of their own in Home Assistant (their own MAC), and one
whose relay is off draws nothing."""

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.request

import numpy as np
import pytest

from helpers import REPO, aligned_past, wattlog
from plugs import sim_mac
from rig import Recorder, taken
from wattlog.store import open_reader

STOPPED_S = 25  # a Ctrl-C'd demo has ended by then (a collector without its broker took 30 s)


@pytest.mark.realtime
def test_the_demo_says_what_it_measured_and_updates_its_plugs_over_the_air(tmp_path, built):
    shutil.copytree(built / "device", tmp_path / "build")  # tools/build's, made once a run
    proc = subprocess.Popen([str(REPO / "tools" / "demo"), "--nodes", "2", "--backfill", "8",
                             "--duration", "25", "--data", str(tmp_path / "data"), "--ota",
                             "--build", str(tmp_path / "build")],
                            env=dict(os.environ, TMPDIR=str(tmp_path)),  # its logs folder here
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in proc.stdout:  # ends when the demo does (its own --duration)
            lines.append(line.rstrip("\n"))
            url = re.search(r"the dashboard: (http://127\.0\.0\.1:\d+/)", line)
            if url:
                page_shows_the_plugs(url.group(1), {"washer", "fridge"})
        err = proc.stderr.read()
        assert proc.wait(timeout=240) == 0, "\n".join(lines) + err
    finally:
        if proc.poll() is None:
            proc.kill()
    table = lines.index("the update over the air ended:")
    rows = {line.split()[0]: line for line in lines[table + 2:table + 4]}
    assert set(rows) == {"washer", "fridge"}, lines[table:]
    assert all(row.split()[1:5] == ["0.1.0", "->", "0.1.0", "confirmed"]
               for row in rows.values()), lines[table:]
    nodes = lines.index("what each plug runs, and how its last update ended (wattlog nodes):")
    shown = {line.split()[0]: line for line in lines[nodes + 2:nodes + 4]}
    assert all(shown[n].split()[-3:] == ["0.1.0", "0.1.0", "confirmed"] for n in rows), \
        lines[nodes:]
    replay = next(line for line in lines if "the plugs replay the last 24 h" in line)
    assert "about" not in replay and "reach the present 8 s after the demo started" in replay
    done = next(i for i, line in enumerate(lines) if line.startswith("backfill done in"))
    assert "(measured from the start of the demo)" in lines[done]
    assert lines[done - 1].count("[####################]") == 2  # the bars end full
    status = [line for line in lines if line.startswith("  washer") or line.startswith("  fridge")]
    assert all(a != b for a, b in zip(status, status[1:]))
    assert any(line.split()[:2] == ["id", "node"] for line in lines)


def page_shows_the_plugs(url, names, timeout_s=60.0):
    """The page at url is served, and /api/plugs (what its overview reads) lists `names`
    with a state each, within timeout_s (the plugs are still catching up)."""
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/html")
        assert b"wattlog" in r.read()
    deadline = time.monotonic() + timeout_s
    plugs = None
    while True:
        try:
            with urllib.request.urlopen(url + "api/plugs", timeout=10) as r:
                plugs = {p["node"]: p for p in json.load(r)["plugs"]}
        except OSError as e:  # the demo ended first
            raise AssertionError("the dashboard stopped (%s) before it showed %s; it showed %s"
                                 % (e, sorted(names), plugs)) from None
        if names <= set(plugs) and all(plugs[n]["state"] for n in names):
            return
        assert time.monotonic() < deadline, plugs
        time.sleep(0.5)



class Demo:
    """tools/demo in a process group of its own, as a shell runs a foreground job (so a
    Ctrl-C can be sent the way a terminal sends it: to the whole group), in `cwd`, its logs
    folder under `cwd` too (TMPDIR); its output lines as they come."""

    def __init__(self, cwd, *args):
        self.lines = []
        self._new = queue.Queue()
        self.proc = subprocess.Popen([str(REPO / "tools" / "demo")] + [str(a) for a in args],
                                     cwd=str(cwd), env=dict(os.environ, TMPDIR=str(cwd)),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self._new.put(line)
        self._new.put(None)

    def wait_for(self, text, timeout_s=120.0):
        """The first line holding `text`, once it has come."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = [line for line in self.lines if text in line]
            if found:
                return found[0]
            try:
                if self._new.get(timeout=max(0.0, deadline - time.monotonic())) is None:
                    raise AssertionError("the demo ended without saying %r:\n%s"
                                         % (text, self.text()))
            except queue.Empty:
                raise AssertionError("the demo did not say %r within %.0f s:\n%s"
                                     % (text, timeout_s, self.text())) from None

    def ctrl_c(self):
        os.killpg(self.proc.pid, signal.SIGINT)

    def end(self, timeout_s):
        """Its exit status, once it has ended (killed, and the test failed, after timeout_s)."""
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise AssertionError("the demo had not ended %.0f s later:\n%s"
                                 % (timeout_s, self.text())) from None
        self.wait_for("look at the data", 10)  # its output is read to the end
        return rc

    def close(self):
        """If it still runs (a test failed), SIGTERM: it stops its parts in order."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)  # its parts get SIGTERM then
                self.proc.wait()

    def text(self):
        return "\n".join(self.lines)

    def kept(self):
        """{plug: readings it produced and did not drop}, from the line saying the plugs
        stopped (a plug drops its oldest when its memory fills faster than the collector
        acknowledges, as at the speed of a short --backfill on a busy machine)."""
        line = self.wait_for("  the plugs stopped in ", 0)
        return {n: int(k) - int(d or 0) for n, k, d in re.findall(
            r"(\w+) (\d+) readings?(?: \((\d+) dropped)?", line.split(": ", 1)[1])}


@pytest.fixture
def demos():
    """start(cwd, *args): a Demo, ended when the test ends, pass or fail."""
    started = []

    def start(cwd, *args):
        started.append(Demo(cwd, *args))
        return started[-1]
    yield start
    for demo in started:
        demo.close()


def stored(data, node):
    """The plug's stored power (W) and energy (kWh) slots, NaN where missing, from its first
    stored slot; and the unix time of that slot."""
    store = open_reader(str(data))
    out = []
    for channel in ("power", "energy"):
        feed = store.feed(store.lookup("%s/%s" % (node, channel)))
        values = feed.read(0, feed.npoints())
        first = int(np.flatnonzero(~np.isnan(values))[0])
        out.append((values[first:], feed.time(first)))
    (power, t), (energy, _) = out
    return power, energy, t


def rises(power, energy):
    """(what the energy counter rose by between neighbouring stored slots, what the stored
    power drew in the later slot of each pair, the runs of such pairs), in kWh: they agree to
    within the counter's 1 Wh rounding per run when no slot was measured twice."""
    pairs = ~np.isnan(power[1:]) & ~np.isnan(energy[1:]) & ~np.isnan(energy[:-1])
    rise = np.diff(energy.astype(float))[pairs].sum()
    drawn = power[1:].astype(float)[pairs].sum() * 10 / 3.6e6
    return float(rise), float(drawn), int(np.count_nonzero(np.diff(pairs.astype(int)) == 1)) + 1


def logs_of(demo):
    return demo.wait_for("  logs in ", 0).split("logs in ", 1)[1].split(";")[0]


@pytest.mark.realtime
def test_ctrl_c_stops_plugs_collector_broker_in_order_and_data_goes_on_from_there(tmp_path,
                                                                                 demos):
    """A Ctrl-C, sent as a terminal sends it (SIGINT to the demo's whole process group), once
    the plugs have caught up: the demo stops the plugs, then the collector, then mosquitto,
    saying each; the collector never lost its broker, and every reading a plug produced is
    stored (its final commit kept what was pending). (The broker took the terminal's SIGINT
    itself and went first; the collector then tried to reach it for 30 s.) A second run on
    the same --data goes on from there: each plug replays from the slot after its latest
    stored one, so the stored slots are the two runs' readings, none measured twice, and each
    energy counter rises by exactly what the stored power adds up to. (It replayed the whole
    day again over the stored one: the counter went on from the stored total and counted the
    day twice.) Real time: the demo's backfill and a Ctrl-C at a wall-clock moment."""
    data = tmp_path / "data"
    first = demos(tmp_path, "--nodes", 2, "--backfill", 8, "--data", data)
    first.wait_for("backfill done in")
    first.ctrl_c()
    assert first.end(STOPPED_S) == 0, first.text()
    lines = first.lines
    at = lines.index("stopping (Ctrl-C): the plugs, then the collector (final commit), then "
                     "mosquitto")
    assert lines[at + 1].startswith("  the plugs stopped in "), lines[at:]
    assert lines[at + 2].startswith("  the collector committed what was pending and stopped "
                                    "in "), lines[at:]
    assert lines[at + 3].startswith("  mosquitto stopped in "), lines[at:]
    with open(os.path.join(logs_of(first), "collector.log")) as f:
        log = f.read()
    assert "lost the broker" not in log and "cannot reach the broker" not in log, log
    produced = first.kept()
    assert set(produced) == {"washer", "fridge"}, produced
    for node, n in produced.items():
        power, energy, _ = stored(data, node)
        assert np.count_nonzero(~np.isnan(power)) == n, node

    second = demos(tmp_path, "--nodes", 2, "--backfill", 8, "--duration", 10, "--data", data)
    assert second.end(120) == 0, second.text()
    more = second.kept()
    assert set(more) == set(produced), second.text()  # each plug said what it produced
    for node in produced:
        power, energy, _ = stored(data, node)
        assert np.count_nonzero(~np.isnan(power)) == produced[node] + more[node], node
        assert np.all(np.diff(energy[~np.isnan(energy)]) >= 0), node
        rise_kwh, drawn_kwh, runs = rises(power, energy)
        assert abs(rise_kwh - drawn_kwh) <= 0.001 * (runs + 1), (node, rise_kwh, drawn_kwh)
    second.wait_for("  continuing in %s: each plug replays from the slot after its latest stored "
                    "one" % data, 0)


@pytest.mark.realtime
def test_a_run_without_data_starts_on_a_clean_demo_directory(tmp_path, demos):
    """Run twice in the same folder without --data, with two plugs, then with one: the
    second says it starts on a clean ./demo-data, and afterwards the folder holds its plug's
    readings only, the first run's second plug gone with the rest, the energy counter never
    going down. (It replayed the last 24 h over the first run's data, which stayed: a new
    plug's counter started at 0 again over the stored one.) Real time: two demo runs."""
    runs = []
    for nodes in (2, 1):
        demo = demos(tmp_path, "--nodes", nodes, "--backfill", 8, "--duration", 10)
        assert demo.end(120) == 0, demo.text()
        runs.append(demo)
    data = tmp_path / "demo-data"
    assert {e["node"] for e in open_reader(str(data)).entries()} == {"washer"}
    power, energy, first_slot = stored(data, "washer")
    assert np.count_nonzero(~np.isnan(power)) == runs[1].kept()["washer"]
    assert np.all(np.diff(energy[~np.isnan(energy)]) >= 0)
    assert not [line for line in runs[0].lines if "on a clean" in line]
    runs[1].wait_for("  on a clean ./demo-data: the previous run's data is removed", 0)
    began = re.search(r"the last 24 h \(from (\S+)Z\)", runs[1].wait_for("the plugs replay", 0))
    assert time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(first_slot)) == began.group(1)


def test_each_demo_plug_is_a_device_of_its_own_in_home_assistant(broker, simnodes):
    """Two simulated plugs announce different MACs in their retained discovery messages (the
    device's `connections`), each the locally administered one made from its node id. (Every
    simulated plug said 02:00:00:00:00:01: Home Assistant merges devices that share a
    connection, so all the demo's plugs became one.)"""
    names = ("washer", "fridge")
    for name in names:
        simnodes(broker.port, name, "--profile", name, "--speed", "max", "--start",
                 aligned_past(60), "--then-realtime")
    said = {}
    for name in names:  # a listener each: one's wait() drops what is not its topic
        listener = Recorder(broker, "homeassistant/device/%s/config" % name)
        try:
            said[name] = json.loads(listener.next("homeassistant/device/%s/config" % name)[0])
        finally:
            listener.close()
    macs = {name: said[name]["dev"]["connections"] for name in names}
    assert macs["washer"] != macs["fridge"], macs
    for name in names:
        assert macs[name] == [["mac", ":".join("%02x" % b for b in sim_mac(name))]], macs
        assert macs[name][0][1].startswith("02:")


@pytest.mark.realtime
def test_a_simulated_plug_whose_relay_is_off_draws_nothing(broker, collectors, simnodes,
                                                          tmp_path):
    """relay/set OFF over MQTT: within a couple of slots the plug's state says 0 W, and the
    power feed stores 0 W for the slots while it is off; ON brings the load back. (The
    simulated load kept drawing through an open relay: 83.7 W.) Real time: the switch is an
    exchange with a plug running live (1 s slots)."""
    collector = collectors(broker.url, tmp_path / "data", commit_interval=300)
    collector.wait_for("listening on")
    node = simnodes(broker.port, "lamp", "--profile", "constant:500", "--interval", 1,
                    "--speed", "max", "--start", aligned_past(60), "--then-realtime")
    live = Recorder(broker, "wattlog/lamp/#")
    try:
        live.next("wattlog/lamp/state", lambda p: json.loads(p)["power"] == 500.0)
        live.c.publish("wattlog/lamp/relay/set", "OFF", qos=1)
        off, _ = live.next("wattlog/lamp/state", lambda p: json.loads(p)["relay"] == "OFF")
        dark, _ = live.next("wattlog/lamp/state", lambda p: json.loads(p)["power"] == 0.0,
                            timeout_s=5)
        assert json.loads(dark)["relay"] == "OFF" and json.loads(dark)["current"] == 0.0
        live.c.publish("wattlog/lamp/relay/set", "ON", qos=1)
        live.next("wattlog/lamp/state", lambda p: json.loads(p)["relay"] == "ON"
                  and json.loads(p)["power"] == 500.0, timeout_s=5)
    finally:
        live.close()
    node.stop()
    taken(broker)  # its last batches, at the broker when it ended
    assert collector.stop() == 0
    rows = [line.split(",") for line in wattlog(
        "export", "--data", tmp_path / "data", "--feed", "lamp/power").splitlines()[1:]]
    watts = [float(v) for t, v in rows if v and int(t) >= json.loads(off)["time"]]
    # 1 s slots: all on, all off, or the switch's own slot, counted to the millisecond
    lit = "".join("1" if w == 500.0 else "0" if w == 0.0 else "p" for w in watts)
    assert re.fullmatch(r"1*p?0+p?1+", lit), watts  # on until the switch, off, then on again
    dark_slot = json.loads(dark)["time"]
    assert float(dict(rows)[str(dark_slot)]) == 0.0
