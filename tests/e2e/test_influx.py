"""test_influx.py - the InfluxDB sink against Debian's InfluxDB 1.6 (influxd started here on a
free loopback port, with auth on and the password in a file): every committed point reaches
it exactly once with the file's value through an InfluxDB outage and a SIGKILLed collector,
in the default and the sp3s schema, and the SP3S setup's Grafana query draws the plug's
power; an InfluxDB that never answers, or answers 500 or 401, holds up no commit and no ack,
is said once (not once a try), and is caught up with once a real InfluxDB answers there.

Real time, not free-running: InfluxDB is stopped and started, the collector killed, and the
bad servers answer (or not) while the plugs produce, each timed in wall time; the plugs run
at 100x (ten readings a second each), as in test_faults.py.
"""

import json
import re
import shutil
import socket
import sys
import threading
import time

import numpy as np
import pytest

from faultload import finish, start_plugs, watts
from helpers import REPO, secret_file
from rig import Collector, wait_until
from wattlog.store.feeds import Registry
from wattlog.store.phpfina import Feed

sys.path.insert(0, str(REPO / "tools" / "lib"))
from influxd import Influxd  # noqa: E402

pytestmark = [pytest.mark.realtime,
              pytest.mark.skipif(shutil.which("influxd") is None,
                                 reason="Debian's influxdb is not installed (tools/setup)")]
USER = "wattlog"
PASSWORD = "influx-secret-7f3a"
SP3S_NAMES = {"inf-a": "Washing machine, left"}  # escaped on the way: a space and a comma


def committed_points(data):
    """{(node, channel): {slot time: float32 value}} of every committed slot holding a value."""
    lengths = json.loads((data / "commit.json").read_text())["feeds"]
    registry = Registry(str(data))
    out = {}
    for fid, n in lengths.items():
        e = registry.lookup(fid)
        feed = Feed.open(str(data / "phpfina"), int(fid))
        values = feed.read(0, n)
        keep = np.flatnonzero(~np.isnan(values))
        out[(e["node"], e["channel"])] = {feed.time(int(i)): values[i] for i in keep}
    return out


def influx_points(db, measurement, field, where=""):
    """[(time, value)] of a series, every row InfluxDB returns (duplicates would show)."""
    ans = db.query('SELECT "%s" FROM "%s"%s' % (field, measurement.replace('"', '\\"'), where))
    series = ans["results"][0].get("series", [])
    return [(t, v) for s in series for t, v in s["values"]]


def in_influx(db, schema, key):
    node, channel = key
    if schema == "sp3s":
        return influx_points(db, SP3S_NAMES.get(node, node), "usage")
    return influx_points(db, channel, "value", " WHERE \"node\" = '%s'" % node)


def compare(db, schema, data):
    """(points compared, [mismatch descriptions]) between the files and InfluxDB."""
    files = committed_points(data)
    wrong, total = [], 0
    for key, want in sorted(files.items()):
        if schema == "sp3s" and key[1] != "power":
            continue
        rows = in_influx(db, schema, key)
        have = {t: v for t, v in rows}
        total += len(want)
        if len(rows) != len(have):
            wrong.append("%s: %d rows for %d times" % (key, len(rows), len(have)))
        missing = sorted(set(want) - set(have))
        extra = sorted(set(have) - set(want))
        off = [t for t in want if t in have and np.float32(have[t]) != want[t]]
        if missing or extra or off:
            wrong.append("%s: %d missing (e.g. %s), %d extra, %d with another value"
                         % (key, len(missing), missing[:3], len(extra), len(off)))
    return total, wrong


def wait_for_influx(db, schema, data, timeout_s=120.0):
    """Until InfluxDB holds exactly what the files hold (bounded); the points compared."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            total, wrong = compare(db, schema, data)
        except OSError:
            total, wrong = 0, ["InfluxDB is not answering"]
        if not wrong and total:
            return total
        if time.monotonic() > deadline:
            raise AssertionError("InfluxDB never matched the files: %s" % wrong[:6])
        time.sleep(0.5)


def wait_stored(data, names, outs, timeout_s=60.0):
    """Until every reading the plugs produced is committed (the last commit comes up to one
    commit interval after the plugs stop)."""
    want = {}
    for name, out in zip(names, outs):
        s = [json.loads(line[8:]) for line in out.splitlines() if line.startswith("summary ")][-1]
        want[name] = s["last_slot"]
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            have = committed_points(data)
        except (OSError, ValueError):
            have = {}
        if all(want[n] in have.get((n, "power"), {}) for n in names):
            return
        assert time.monotonic() < deadline, "the last readings were never committed"
        time.sleep(0.2)


@pytest.mark.parametrize("schema", ["default", "sp3s"])
def test_every_committed_point_reaches_influxdb_once(broker, simnodes, tmp_path, schema):
    """InfluxDB stopped once the sink has written to it, the collector SIGKILLed once it has
    found InfluxDB away and started again, InfluxDB started again once the new collector has
    found it away too: afterwards InfluxDB holds every committed slot of every feed the schema carries,
    once, with the file's float32 value, and nothing else; the SP3S panel's query (and, in the
    default schema, the README's) draws each plug's power."""
    data = tmp_path / "data"
    db = Influxd(str(tmp_path), "wattlog", user=USER, password=PASSWORD).start()
    started = []
    try:
        pw = secret_file(tmp_path / "influx.password", PASSWORD)
        flags = ["--influx", "influx://%s@127.0.0.1:%d/wattlog?rp=autogen" % (USER, db.port),
                 "--influx-password-file", pw, "--influx-schema", schema]
        for node, name in SP3S_NAMES.items():
            flags += ["--influx-name", "%s=%s" % (node, name)]
        c = Collector(broker.url, data, commit_interval=3, args=flags)
        started.append(c)
        c.wait_for("InfluxDB sink: ")
        names = ["inf-a", "inf-b", "inf-c"]
        plugs = start_plugs(simnodes, broker.port, names, 30)
        wait_until("the sink's first points in InfluxDB",
                   lambda: db.query("SHOW MEASUREMENTS")["results"][0].get("series"),
                   timeout_s=60)
        db.stop()
        c.wait_for("cannot write to InfluxDB", timeout_s=60)
        c.kill()      # the sink's cursor is behind: InfluxDB has been away since
        c.restart()   # the same command, its log appended
        c.wait_for("listening on")
        c.wait_for("cannot write to InfluxDB", timeout_s=60)  # it has more to write, and cannot
        db.start()
        outs = finish(plugs)
        wait_stored(data, names, outs)
        total = wait_for_influx(db, schema, data)
        log = c.log()
        assert PASSWORD not in log
        assert re.search(r"cannot write to InfluxDB at http://127\.0\.0\.1:%d \(database "
                         r"wattlog, retention policy autogen\)" % db.port, log), log[-3000:]
        assert "answers again" in log
        if schema == "default":  # the README's panel: every plug from one query
            ans = db.query('SELECT mean("value") FROM "power" WHERE time > now() - 1h '
                           'GROUP BY time(1m), "node"')
            drawn = {s["tags"]["node"]: {v for _, v in s["values"] if v is not None}
                     for s in ans["results"][0]["series"]}
            assert drawn == {node: {float(watts(i))} for i, node in enumerate(names)}, drawn
        if schema == "sp3s":
            for i, node in enumerate(names):
                name = SP3S_NAMES.get(node, node).replace('"', '\\"')
                ans = db.query('SELECT mean("usage") FROM "%s" WHERE time > now() - 1h '
                               'GROUP BY time(1m)' % name)
                means = [v for _, v in ans["results"][0]["series"][0]["values"] if v is not None]
                assert len(means) >= 45 and set(means) == {float(watts(i))}, (node, means[:5])
        print("\ninflux %s: %d committed points compared, all in InfluxDB once"
              % (schema, total))
        assert c.stop() == 0
    finally:
        for c in started:
            c.kill()
        db.stop()


class BadInflux:
    """A server on a loopback port that takes connections and, by `mode`, never answers
    ("hang": reads the request and keeps the connection), or answers 500 or 401. Counts the
    requests per mode."""

    def __init__(self, port):
        self.mode = "hang"
        self.requests = {}
        self.sock = socket.create_server(("127.0.0.1", port))
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.closed = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn):
        buf = b""
        try:
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
                head, sep, rest = buf.partition(b"\r\n\r\n")
                if not sep:
                    continue
                m = re.search(rb"(?i)content-length: *(\d+)", head)
                length = int(m.group(1)) if m else 0
                if len(rest) < length:
                    continue
                buf = rest[length:]
                mode = self.mode
                self.requests[mode] = self.requests.get(mode, 0) + 1
                if mode == "hang":
                    continue
                status = {"500": b"500 Internal Server Error", "401": b"401 Unauthorized"}[mode]
                body = b'{"error":"%s"}' % mode.encode()
                conn.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n" % len(body) + body)
        except OSError:
            return

    def close(self):
        """The port free at once, for InfluxDB to listen on: close() alone leaves the socket
        listening while a thread is blocked in its accept() (Linux keeps it until the call
        returns), and InfluxDB's bind then failed unless a connection had come meanwhile
        (side by side with another suite, it had not: "address already in use")."""
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() (EINVAL)
        except OSError:
            pass
        self.sock.close()
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()


def commit_times(log):
    """Wall times (s) of the collector's commit lines."""
    out = []
    for line in log.splitlines():
        m = re.match(r"(\d+-\d+-\d+ \d+:\d+:\d+),(\d+) INFO commit \(", line)
        if m:
            out.append(time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))
                       + int(m.group(2)) / 1000)
    return out


def test_a_server_that_never_answers_or_refuses_holds_up_nothing(broker, simnodes, tmp_path):
    """InfluxDB's port answered by a server that answers 500 (until tried twice), then 401
    (until tried twice), then takes the request and never answers (until the sink's 10 s
    timeout has run out and been said), then by a real InfluxDB: the collector commits and
    acks at its pace throughout (commit interval 2 s: no gap as long as the timeout), each
    failure is said once in one sentence, and once InfluxDB answers, everything committed
    reaches it. (Each mode had a fixed span, 7 s, 7 s, 14 s: on a machine running two test
    suites the sink had not tried the 500 server once in its 7 s.)"""
    data = tmp_path / "data"
    bad = BadInflux(0)
    db = Influxd(str(tmp_path), "wattlog", user=USER, password=PASSWORD, port=bad.port)
    pw = secret_file(tmp_path / "influx.password", PASSWORD)
    flags = ["--influx", "influx://%s@127.0.0.1:%d/wattlog" % (USER, bad.port),
             "--influx-password-file", pw]  # and the default timeout, 10 s
    c = Collector(broker.url, data, commit_interval=2, args=flags)
    try:
        c.wait_for("listening on")
        names = ["bad-a", "bad-b", "bad-c"]
        plugs = start_plugs(simnodes, broker.port, names, 40)
        began = time.time()
        tried = bad.requests.get
        for mode, enough in (("500", lambda: tried("500", 0) >= 2),
                             ("401", lambda: tried("401", 0) >= 2),
                             ("hang", lambda: "did not answer within 10 s" in c.log())):
            bad.mode = mode
            c.wait_until("the sink's tries at the %s server" % mode, enough, 120)
        bad.close()
        ended = time.time()
        db.start()
        outs = finish(plugs)
        wait_stored(data, names, outs)
        total = wait_for_influx(db, "default", data)
        log = c.log()
        times = [t for t in commit_times(log) if began <= t <= ended]
        gaps = np.diff(times)
        # the plugs' batches make a commit every ~3.2 s; one that waited on the sink's 10 s
        # timeout would leave a gap of more than 10 s
        assert len(times) >= 5 and gaps.max() < 9.5, (times, gaps)
        for mode, said in (("hang", "did not answer within 10 s"), ("500", "answered 500"),
                           ("401", "answered 401 Unauthorized: check the user (wattlog)")):
            # tried again and again (a hung request takes 10 s), and said once
            assert bad.requests.get(mode, 0) >= (1 if mode == "hang" else 2), (mode, bad.requests)
            assert log.count(said) == 1, (said, log[-4000:])
        assert PASSWORD not in log
        print("\nbad InfluxDB: %d commits in %.0f s, longest gap %.1f s; requests %s; then "
              "%d points caught up" % (len(times), ended - began, gaps.max(), bad.requests,
                                       total))
        assert c.stop() == 0
    finally:
        c.kill()
        bad.close()
        db.stop()
