"""test_api.py - the collector's HTTP API (api.py) as a user's browser or script meets it: a
real `wattlog collect --listen` on a free loopback port, a real simulated plug (the firmware on
the MicroPython unix port) sending through a real mosquitto with the provisioned ACL, and
plain urllib requests. One collector and one plug serve the whole module (starting them is
most of the cost); each test ends on what it waits for, with a bound.

The plug starts 3.3 h in the past and catches up as fast as it goes, then runs in real time
(a batch every 2 s rather than 30, so the series reaches the present sooner):
its first 1024 readings make a full page, which the collector commits at once; the rest wait
for the 300 s commit interval, so they are pending, not committed, while the tests run.
"""

import json
import queue
import threading
import time
import urllib.error
import urllib.request
from http.client import HTTPConnection

import pytest

from helpers import aligned_past, secret_file
from rig import Broker, Collector, SimPlug
from wattlog.fleet.provision import OPERATOR
from wattnode import __version__

NODE = "api-1"
PAST_S = 12000         # 1200 slots: a full page committed, the rest pending
TOKEN = "t0ken-for-the-api-test-0123456789"


class Rig:
    def __init__(self, work):
        self.broker = Broker(str(work / "mosquitto")).start()
        self.collector = self.plug = None
        try:
            self._start(work)
        except BaseException:  # a collector that never listened: stop what did start
            self.close()
            raise

    def _start(self, work):
        self.data = work / "data"
        self.token_file = secret_file(work / "http.token", TOKEN)
        self.collector = Collector(self.broker.url, self.data, listen=True, args=[
            "--http-token-file", self.token_file,
            "--operator-password-file", self.broker.password_file(OPERATOR)])
        self.port, self.url = self.collector.port, self.collector.http_url
        self.collector.wait_for("listening on")
        self.start = aligned_past(PAST_S)
        self.plug = SimPlug(self.broker.port, NODE, "--profile", "constant:500", "--speed",
                            "max", "--start", self.start, "--then-realtime", "--config",
                            json.dumps({"batch_wait_s": 2}), broker=self.broker)

    def call(self, path, body=None, token=TOKEN, method=None):
        """(status, decoded JSON or text) of one request, with the token unless told (so it
        reads whether or not reading is open)."""
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if token is not None:
            headers["Authorization"] = "Bearer " + token
        req = urllib.request.Request(self.url + path, method=method, headers=headers,
                                     data=None if body is None else json.dumps(body).encode())
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, raw, kind = r.status, r.read(), r.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            status, raw, kind = e.code, e.read(), e.headers.get("Content-Type", "")
        return status, json.loads(raw) if "json" in kind else raw.decode()

    def wait_for(self, what, check, timeout_s=60.0):
        """Until check() is truthy (its value), the collector still running."""
        return self.collector.wait_until(what, check, timeout_s)

    def close(self):
        if self.plug is not None:
            self.plug.stop()
        if self.collector is not None:
            self.collector.stop()
        self.broker.stop()


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    r = Rig(tmp_path_factory.mktemp("api"))
    try:
        yield r
    finally:
        r.close()


def caught_up(rig):
    """The plug's readings reach the present (within two slots) in the series."""
    status, out = rig.call("/api/series?feed=%s/power&start=%d&end=now&points=100000"
                           % (NODE, rig.start))
    if status != 200:
        return None
    have = [t for t, v in zip(out["time"], out["value"]) if v is not None]
    return out if have and have[-1] >= time.time() - 30 else None


def test_series_reaches_the_present_with_readings_not_yet_committed(rig):
    """A chart has no hole at its right edge: the slots past what is committed hold the
    pending readings, and the answer says where the committed part ends."""
    out = rig.wait_for("the plug caught up", lambda: caught_up(rig))
    committed = out["committed_until"]
    values = dict(zip(out["time"], out["value"]))
    last = max(t for t, v in values.items() if v is not None)
    assert rig.start + 1000 * 10 <= committed < last, (committed, last)  # a page committed
    assert out["bucket_s"] == 10 and out["raw"] is True and out["unit"] == "W"
    span = range(rig.start, last + 10, 10)
    assert [values[t] for t in span] == [500.0] * len(span)  # not one hole, nor past committed
    assert sum(1 for t in span if t >= committed) >= 100
    status, health = rig.call("/api/health")
    assert status == 200 and health["pending_points"] > 0 and health["last_commit"]
    assert health["disk_free_bytes"] > 0 and health["lost_readings"] == 0
    # the collector's link to its broker; no InfluxDB sink here; today's bytes, partial
    assert health["broker"]["state"] == "up" and health["influx"] is None
    assert health["broker"]["address"] == "127.0.0.1:%d" % rig.broker.port
    assert [d["whole"] for d in health["written_per_day"]] == [False]
    assert health["written_per_day_average"] is None

    status, csv = rig.call("/api/series.csv?feed=%s/power&start=%d&end=%d"
                           % (NODE, committed - 50, committed + 50))
    rows = csv.splitlines()
    assert status == 200 and rows[0] == "time,power_W"
    assert rows[1:] == ["%d,500.0" % t for t in range(committed - 50, committed + 50, 10)]


def test_plug_health_tells_firmware_online_and_acks(rig):
    """What a person checks when a plug misbehaves, from the plug's own retained messages and
    the collector's counters."""
    def healthy():
        status, plug = rig.call("/api/plugs/" + NODE)
        return plug if status == 200 and plug["acked_seq"] and plug["firmware"] \
            and plug["broadlink"] else None
    plug = rig.wait_for("plug health", healthy)  # what it says as it connects: nobody asked
    assert plug["online"] is True and plug["firmware"] == __version__
    assert plug["broadlink"] == "off" and plug["meter_faults"]["counters"] is not None
    assert plug["spill"]["capacity"] == 250 * 252 and plug["spill"]["torn"] == 0  # its flash
    assert plug["boots"] == 1 and plug["acked_seq"] >= 1024 and plug["ring_drops"] == 0
    assert plug["gaps"] == 0 and plug["lost"] == 0 and plug["state"]["power"] == 500.0
    status, feeds = rig.call("/api/feeds")
    power = next(f for f in feeds["feeds"] if f["node"] == NODE and f["channel"] == "power")
    assert power["unit"] == "W" and power["interval"] == 10 and power["start"] == rig.start
    # the last value is at least the last committed slot's (past it while some are pending)
    assert power["last_value"] == 500.0
    assert power["last_time"] >= power["committed_until"] - power["interval"]


class Stream:
    """GET /api/stream read line by line in a thread: its events in a queue."""

    def __init__(self, rig):
        self.events = queue.Queue()
        self.resp = urllib.request.urlopen(urllib.request.Request(
            rig.url + "/api/stream", headers={"Authorization": "Bearer " + TOKEN}), timeout=60)
        assert self.resp.headers["Content-Type"].startswith("text/event-stream")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        kind = None
        try:
            for line in self.resp:
                line = line.decode().rstrip("\n")
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    self.events.put((kind, json.loads(line[6:])))
        except (OSError, ValueError, AttributeError):
            pass  # close() shut the response under it (http.client then has no file: None)

    def wait(self, match, timeout_s=20.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=0.2)
            except queue.Empty:
                continue
            if match(*event):
                return event
        raise AssertionError("no matching event within %.0f s" % timeout_s)

    def close(self):
        self.resp.close()


def test_relay_needs_the_token_and_reaches_the_plug_live_on_the_stream(rig):
    """An action without the token, or with a wrong one, is refused in words; with it the
    plug switches (through the broker, as wattlog-operator) and the live stream shows the
    plug's own state saying so."""
    rig.wait_for("the plug online with a state",
                 lambda: rig.call("/api/plugs/" + NODE)[1].get("state") is not None
                 and rig.call("/api/plugs/" + NODE)[1]["online"])
    path = "/api/plugs/%s/relay" % NODE
    status, out = rig.call(path, {"relay": "OFF"}, token=None)
    assert status == 401 and "Authorization: Bearer" in out["error"]
    status, out = rig.call(path, {"relay": "OFF"}, token=TOKEN + "x")
    assert status == 403 and out["error"] == "the token is wrong"
    status, out = rig.call(path, {"relay": "OFF"}, token="")
    assert status == 401
    assert rig.call("/api/plugs/" + NODE)[1]["state"]["relay"] == "ON"  # nothing switched

    stream = Stream(rig)
    try:
        stream.wait(lambda kind, d: kind == "links" and d["broker"]["state"] == "up")  # first
        stream.wait(lambda kind, d: kind == "state" and d["node"] == NODE)  # what it holds now
        status, out = rig.call(path, {"relay": "OFF"}, token=TOKEN)
        assert status == 200 and out["relay"] == "OFF" and out["state"]["relay"] == "OFF", out
        stream.wait(lambda kind, d: kind == "state" and d["node"] == NODE
                    and d["relay"] == "OFF" and d["online"] is True)
        status, out = rig.call(path, {"relay": "TOGGLE"}, token=TOKEN)
        assert status == 200 and out["relay"] == "ON"
        stream.wait(lambda kind, d: kind == "state" and d["node"] == NODE and d["relay"] == "ON")
    finally:
        stream.close()

    status, out = rig.call("/api/plugs/%s/cmd" % NODE, {"cmd": "info"}, token=TOKEN)
    assert status == 200 and out["answer"].startswith("info "), out
    assert json.loads(out["answer"][5:])["node"] == NODE
    status, plug = rig.call("/api/plugs/" + NODE)  # what the answer said, in plug health
    assert status == 200 and plug["broadlink"] == "off", plug
    status, out = rig.call("/api/plugs/%s/cmd" % NODE, {"cmd": "reboot"}, token=None)
    assert status == 401


BAD = [
    # (request path, status, words the sentence must hold)
    ("/api/series?feed=../../../etc/passwd", 400, "is not NODE/CHANNEL"),
    ("/api/series?feed=..%2F..%2Fphpfina%2F1", 400, "is not NODE/CHANNEL"),
    ("/api/series?feed=api-1%2Fpower%00", 400, "is not NODE/CHANNEL"),
    ("/api/series?feed=%FF%FE%2Fpower", 400, "is not NODE/CHANNEL"),
    ("/api/series?feed=" + "a" * 5000, 400, "too long"),
    ("/api/series?feed=999999", 404, "there is no feed"),
    ("/api/series?feed=nobody/power", 404, "there is no feed"),
    ("/api/series?feed=api-1/power&start=now&end=now-1h", 400, "must come before end"),
    ("/api/series?feed=api-1/power&start=nan", 400, "is not a time"),
    ("/api/series?feed=api-1/power&start=1900-01-01", 400, "from 1970 to 2106"),
    ("/api/series?feed=api-1/power&start=99999999999999999999", 400, "from 1970 to 2106"),
    ("/api/series?feed=api-1/power&end=now%2B30d", 400, "more than a day ahead"),
    ("/api/series?feed=api-1/power&start=now-365d&points=3153600", 400, "from 1 to 100000"),
    ("/api/series?feed=api-1/power&points=0", 400, "from 1 to 100000"),
    ("/api/series?feed=api-1/power&points=-3", 400, "from 1 to 100000"),
    ("/api/series?feed=api-1/power&points=1e3", 400, "from 1 to 100000"),
    ("/api/series.csv?feed=..%2Fcommit.json", 400, "is not NODE/CHANNEL"),
    ("/api/energy?by=hour", 400, "by must be"),
    ("/api/plugs/..%2F..%2Fetc", 400, "is not a node id"),
    ("/api/plugs/%FF", 400, "is not a node id"),
    ("/api/plugs/nobody", 404, "no plug"),
    ("/api/../../etc/passwd", 404, "no such endpoint"),
    ("/api/series/../../commit.json", 404, "no such endpoint"),
]


def test_bad_requests_get_one_sentence_and_the_collector_carries_on(rig):
    """Every bad parameter (path traversal, NUL, long and non-UTF-8 names, times out of range,
    a year of raw points, wrong types) is a 4xx with one sentence; no file outside the
    registry is read, and the collector keeps collecting."""
    rig.wait_for("the feeds", lambda: rig.call("/api/series?feed=%s/power" % NODE)[0] == 200)
    before = rig.call("/api/health")[1]["readings"]
    for path, status, words in BAD:
        conn = HTTPConnection("127.0.0.1", rig.port, timeout=30)
        conn.request("GET", path, headers={"Authorization": "Bearer " + TOKEN})  # path as given
        resp = conn.getresponse()
        body = json.loads(resp.read())
        conn.close()
        assert (resp.status, words in body["error"]) == (status, True), (path, resp.status, body)
        assert "\n" not in body["error"] and "root:" not in body["error"], body
    path = "/api/plugs/%s/relay" % NODE
    for body in ([1, 2], "ON", {"relay": "SIDEWAYS"}, {"relay": None}):
        status, out = rig.call(path, body, token=TOKEN)
        assert status == 400 and out["error"], (body, out)
    status, out = rig.call(path, None, token=TOKEN, method="POST")
    assert status == 400 and "JSON object" in out["error"]
    status, out = rig.call("/api/plugs/%s/cmd" % NODE, {"cmd": "format-flash"}, token=TOKEN)
    assert status == 400 and "cmd must be one of" in out["error"]
    rig.wait_for("more readings after the bad requests",
                 lambda: rig.call("/api/health")[1]["readings"] > before)
    assert rig.collector.running()
