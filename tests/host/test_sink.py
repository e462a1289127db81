"""test_sink.py - the InfluxDB sink (sink.py, influx.py) against a small real HTTP server that
keeps what it is sent: names are escaped as InfluxDB's line protocol wants, empty slots are
never written, the cursor only passes points InfluxDB has taken and survives a restart, a slot
filled late below the committed length is still sent, backfill starts where it is told.
(Against a real InfluxDB 1.6: tests/e2e/test_influx.py.)"""

import http.server
import json
import threading
import time

import numpy as np
import pytest

from batches import T0
from wattlog.store.commit import Committer
from wattlog.complaints import Complaints
from wattlog.bridges.influx import InfluxError, Schema, Target, WriteFailed, Writer, configure
from wattlog.bridges.sink import FILE, Sink, backfill, tidy
from wattlog.store import open_reader


class Receiver:
    """An HTTP server on a free loopback port: keeps every body POSTed to it and answers
    with `status` (204: taken)."""

    def __init__(self):
        self.bodies = []
        self.requests = []  # (path, Authorization header)
        self.status = 204
        self.on_request = None
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                owner.requests.append((self.path, self.headers.get("Authorization")))
                if owner.status == 204:
                    owner.bodies.append(body.decode())
                if owner.on_request:  # before the answer: the sink acts on it at once
                    owner.on_request()
                self.send_response(owner.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def lines(self):
        return [line for body in self.bodies for line in body.split("\n")]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def commit(data, node, channel, points):
    c = Committer(str(data), Complaints())
    try:
        c.commit({(node, channel): points}, {node: 10}, {})
    finally:
        c.close()


def sink(data, receiver, schema="default", **kw):
    return Sink(open_reader(str(data)), str(data),
                Writer(Target("influx://127.0.0.1:%d/wattlog" % receiver.port)),
                Schema(schema, kw.pop("names", None)), **kw)


def test_line_protocol_escapes_measurements_and_tags():
    """A plug named "Washing machine, left" in the sp3s schema, and tag values with the
    characters line protocol treats specially, are escaped, so InfluxDB reads one series."""
    sp3s = Schema("sp3s", {"plug-a": "Washing machine, left"})
    assert sp3s.series("plug-a", "power") == "Washing\\ machine\\,\\ left usage="
    assert sp3s.series("plug-b", "power") == "plug-b usage="
    assert sp3s.series("plug-a", "voltage") is None  # sp3s carries power only
    default = Schema()
    assert default.series("a b,c=d", "power") == "power,node=a\\ b\\,c\\=d value="
    lines = Schema.lines("power,node=a value=", np.array([T0, T0 + 10]),
                         np.array([229.99, 512.5], dtype=np.float32))
    assert lines == ["power,node=a value=229.99 %d" % T0, "power,node=a value=512.5 %d" % (T0 + 10)]


def test_urls_and_secrets(tmp_path):
    """The URL forms the README gives; a password in the URL is refused, naming no secret."""
    v1 = Target("influx://grafana@db.lan:8087/home?rp=year")
    assert (v1.host, v1.port, v1.user, v1.database, v1.rp) == \
        ("db.lan", 8087, "grafana", "home", "year")
    assert v1.path == "/write?db=home&precision=s&rp=year"
    v2 = Target("influxv2s://db.lan/acme/power")
    assert v2.tls and v2.path == "/api/v2/write?org=acme&bucket=power&precision=s"
    with pytest.raises(InfluxError) as e:
        Target("influx://u:hunter2@db.lan/home")
    assert "hunter2" not in str(e.value)
    with pytest.raises(InfluxError, match="needs a token"):
        configure("influxv2://db.lan/acme/power")
    secret = tmp_path / "token"
    secret.write_text("tok-123\n")
    writer, schema = configure("influxv2://db.lan/acme/power", "sp3s", str(secret))
    assert writer.headers["Authorization"] == "Token tok-123" and schema.name == "sp3s"


def test_what_goes_over_the_wire_to_1x_and_2x(tmp_path, receiver):
    """1.x: /write with db, rp and precision=s, the password as basic auth; 2.x/3.x:
    /api/v2/write with org and bucket, the token in its header; neither in the URL."""
    data = tmp_path / "data"
    commit(data, "plug-a", "power", {T0: 100.0})
    secret = tmp_path / "secret"
    secret.write_text("pa:ss word\n")
    for url in ("influx://grafana@127.0.0.1:%d/home?rp=year" % receiver.port,
                "influxv2://127.0.0.1:%d/acme/power" % receiver.port):
        writer, schema = configure(url, "default", str(secret))
        Sink(open_reader(str(data)), str(data), writer, schema).poll()
    assert receiver.requests == [
        ("/write?db=home&precision=s&rp=year", "Basic Z3JhZmFuYTpwYTpzcyB3b3Jk"),
        ("/api/v2/write?org=acme&bucket=power&precision=s", "Token pa:ss word")]
    assert receiver.lines() == ["power,node=plug-a value=100.0 %d" % T0] * 2


def test_nan_slots_are_never_written(tmp_path, receiver):
    """Empty slots (NaN) are left out; every stored value goes out once, at its slot's time."""
    data = tmp_path / "data"
    pts = {T0 + 10 * k: float(k) + 0.5 for k in range(100) if k % 3}
    commit(data, "plug-a", "power", pts)
    s = sink(data, receiver)
    assert s.poll() == len(pts)
    got = {int(line.rsplit(" ", 1)[1]): float(line.split("value=")[1].split(" ")[0])
           for line in receiver.lines()}
    assert len(receiver.lines()) == len(pts)
    assert got == pts
    assert not any("nan" in line.lower() for line in receiver.lines())


def test_the_cursor_survives_a_restart_and_passes_only_what_was_taken(tmp_path, receiver):
    """A new sink on the same directory sends only what is new; a write InfluxDB did not take
    (500) does not move the cursor, and the same sink sends those points again; a sink stopped
    between a write and the cursor's update leaves a cursor from which the next one sends
    all that is left (what it had written perhaps again, which InfluxDB takes as one)."""
    data = tmp_path / "data"
    commit(data, "plug-a", "power", {T0 + 10 * k: 1.0 for k in range(50)})
    assert sink(data, receiver).poll() == 50
    cursor = json.loads((data / FILE).read_text())
    (entry,) = cursor["targets"].values()
    assert entry["feeds"]["1"]["next"] == 50
    assert sink(data, receiver).poll() == 0          # restarted: nothing again

    commit(data, "plug-a", "power", {T0 + 10 * k: 2.0 for k in range(50, 80)})
    receiver.status = 500
    s = sink(data, receiver)
    with pytest.raises(WriteFailed, match="answered 500"):
        s.poll()
    assert s.behind == 30                             # its lag, for the collector to show
    receiver.status = 204
    before = len(receiver.lines())
    assert s.poll() == 30                             # the same sink tries them all again
    assert s.behind == 0
    assert len(receiver.lines()) - before == 30

    commit(data, "plug-a", "power", {T0 + 10 * k: 3.0 for k in range(80, 110)})
    before = len(receiver.lines())
    s = sink(data, receiver, batch_points=10)
    receiver.on_request = s._stop.set                # stopped right after the first write
    s.poll()
    receiver.on_request = None
    assert len(receiver.lines()) - before == 10
    again = sink(data, receiver)        # the cursor saved is at most what was written:
    assert again.poll() in (20, 30)     # all that is left, and perhaps the first 10 again
    times = {int(line.rsplit(" ", 1)[1]) for line in receiver.lines()[before:]}
    assert times == {T0 + 10 * k for k in range(80, 110)}


def test_a_slot_filled_late_below_the_committed_length_is_sent(tmp_path, receiver):
    """A plug sends a hole again after later readings were committed: that slot lies below
    the cursor, and still reaches InfluxDB."""
    data = tmp_path / "data"
    commit(data, "plug-a", "power", {T0 + 10 * k: 7.0 for k in range(20) if k != 5})
    s = sink(data, receiver, clock=lambda: T0 + 3600)
    assert s.poll() == 19
    commit(data, "plug-a", "power", {T0 + 50: 7.0})
    assert s.poll() >= 1
    assert "power,node=plug-a value=7.0 %d" % (T0 + 50) in receiver.lines()
    (entry,) = json.loads((data / FILE).read_text())["targets"].values()
    assert entry["feeds"]["1"]["holes"] == []        # nothing left to look at


def test_holes_stay_few_and_old_ones_are_forgotten():
    holes = [[k * 200, k * 200 + 1, 0] for k in range(200)]
    kept = tidy(holes, 100 * 200)
    assert len(kept) <= 64 and kept[0][0] >= 100 * 200 and kept[-1][1] == 199 * 200 + 1
    assert sum(h[1] - h[0] - h[2] for h in kept) == 100  # every empty slot still covered


def test_a_new_schema_is_a_new_cursor(tmp_path, receiver):
    """The sp3s schema (power only, measurement = the plug's name) gets everything from the
    start, even when the default schema has sent it all before."""
    data = tmp_path / "data"
    commit(data, "plug-a", "power", {T0 + 10 * k: 3.0 for k in range(10)})
    commit(data, "plug-a", "voltage", {T0 + 10 * k: 230.0 for k in range(10)})
    assert sink(data, receiver).poll() == 20
    assert sink(data, receiver, "sp3s", names={"plug-a": "washer"}).poll() == 10
    assert receiver.lines()[-1] == "washer usage=3.0 %d" % (T0 + 90)


def test_backfill_from_a_time(tmp_path, receiver):
    """backfill --since sends the slots at and after that time, and says how far it got."""
    data = tmp_path / "data"
    commit(data, "plug-a", "power", {T0 + 10 * k: float(k) for k in range(1000)})
    seen = []
    writer = Writer(Target("influx://127.0.0.1:%d/wattlog" % receiver.port))
    sent = backfill(open_reader(str(data)), writer, Schema(), since=T0 + 9005, batch_points=40,
                    progress=lambda *a: seen.append(a))
    assert sent == 99
    assert sorted(int(line.rsplit(" ", 1)[1]) for line in receiver.lines()) == \
        [T0 + 10 * k for k in range(901, 1000)]
    assert seen[-1] == (99, 99, 99)


def test_backfill_command_and_its_refusals(tmp_path, receiver, capsys):
    """`wattlog influx backfill` sends the history with progress and says what it did; a bad
    URL, a password in it, or a server that refuses ends in one line naming no secret."""
    from wattlog import cli
    data = tmp_path / "data"
    commit(data, "plug-a", "power", {T0 + 10 * k: 1.5 for k in range(300)})
    url = "influx://127.0.0.1:%d/wattlog" % receiver.port
    cli.main(["influx", "backfill", "--data", str(data), "--influx", url,
              "--influx-schema", "sp3s", "--influx-name", "plug-a=Kühlschrank Keller"])
    out, err = capsys.readouterr()
    assert "sent 300 points to http://127.0.0.1:%d (database wattlog)" % receiver.port in out
    assert "backfill: 100% (300 points)" in err
    assert receiver.lines()[0] == "Kühlschrank\\ Keller usage=1.5 %d" % T0
    for argv, said in ((["--influx", "influx://u:hunter2@127.0.0.1/db"], "holds a password"),
                       (["--influx", "http://127.0.0.1/db"], "is not an InfluxDB URL"),
                       (["--influx", url, "--influx-name", "plug-a"], "is not NODE=MEASUREMENT")):
        with pytest.raises(SystemExit) as e:
            cli.main(["influx", "backfill", "--data", str(data)] + argv)
        assert said in str(e.value) and "hunter2" not in str(e.value)
    receiver.status = 401
    with pytest.raises(SystemExit) as e:
        cli.main(["influx", "backfill", "--data", str(data), "--influx", url])
    assert "answered 401" in str(e.value) and "run it again" in str(e.value)


def test_an_unreadable_feed_holds_up_no_other(tmp_path, receiver, caplog):
    """A feed whose header is damaged (the collector quarantines it at its next start) is
    left out and said; the other feeds are still sent."""
    data = tmp_path / "data"
    commit(data, "plug-a", "power", {T0 + 10 * k: 1.0 for k in range(10)})
    commit(data, "plug-b", "power", {T0 + 10 * k: 2.0 for k in range(10)})
    (data / "phpfina" / "1.meta").write_bytes(b"\0" * 16)
    assert sink(data, receiver).poll() == 10
    assert {line.split(" ")[0] for line in receiver.lines()} == {"power,node=plug-b"}
    assert "leaves out a feed it cannot read" in caplog.text and "1.meta" in caplog.text


def test_files_cut_below_the_cursor_are_followed_again(tmp_path, receiver, caplog):
    """Feeds cut below what the sink had sent (commit.json and the feeds restored from a
    backup, its cursor not): the sink says so and sends what is written there from then on,
    not only what lies past its old cursor."""
    data = tmp_path / "data"
    commit(data, "plug-a", "power", {T0 + 10 * k: 1.0 for k in range(50)})
    assert sink(data, receiver).poll() == 50
    state = json.loads((data / "commit.json").read_text())
    state["feeds"]["1"] = 30
    state["commit"] += 1
    (data / "commit.json").write_text(json.dumps(state))
    (data / "phpfina" / "1.dat").write_bytes((data / "phpfina" / "1.dat").read_bytes()[:120])
    s = sink(data, receiver)
    assert s.poll() == 0
    commit(data, "plug-a", "power", {T0 + 10 * k: 4.0 for k in range(30, 60)})
    assert s.poll() == 30
    assert receiver.lines()[-30] == "power,node=plug-a value=4.0 %d" % (T0 + 300)
    assert "the InfluxDB sink had sent 50" in caplog.text


def wait_until(check, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "never came true"
        time.sleep(0.02)


def test_the_sinks_link_says_whether_influxdb_takes_its_writes(tmp_path, receiver):
    """The sink's link (for /api/health and the dashboard): starting until a write went
    through or failed; down since the first failed write with its sentence; up again once
    InfluxDB takes the points."""
    data = tmp_path / "data"
    commit(data, "plug-a", "power", {T0 + 10 * k: 1.0 for k in range(50)})
    receiver.status = 500
    s = sink(data, receiver, poll_s=0.05)
    assert s.link.status()["state"] == "starting"
    s.start()
    try:
        wait_until(lambda: s.link.status()["state"] == "down")
        down = s.link.status()
        assert "answered 500" in down["reason"] and down["address"] == str(s.writer.target)
        receiver.status = 204
        wait_until(lambda: s.link.status()["state"] == "up")
        assert s.sent == 50 and s.link.status()["since"] >= down["since"]
    finally:
        s.stop()


def test_the_sink_follows_a_postgresql_store_and_its_grid_moving_back(tmp_path, receiver,
                                                                     pg_database):
    """The sink reads through the storage interface, so it follows a collector storing into
    PostgreSQL as it follows the files: every committed slot is sent, the cursor in the
    collector's own directory. When an earlier batch arrives late (a cluster's handover) the
    plug's grid starts earlier: those slots are sent too, and nothing is sent twice."""
    from batches import batch
    from wattlog.store.postgres import PgStore

    def recs(first, n):
        return [(T0 + 10 * k, 100.0 + k, 1000 + k, 230.0, 0.5) for k in range(first, first + n)]

    store = PgStore(*pg_database, Complaints())
    try:
        store.recover({})
        store.take("wattlog/p/readings", batch(recs(200, 100), seq=200))
        store.commit()
        follower = Sink(store, str(tmp_path), Writer(Target(
            "influx://127.0.0.1:%d/wattlog" % receiver.port)), Schema("sp3s"),
            horizon_s=40 * 86400)  # T0's readings are days old: holes that old still fill
        assert follower.poll() == 100
        assert follower.poll() == 0  # nothing new committed
        store.take("wattlog/p/readings", batch(recs(0, 200), seq=0))
        store.commit()
        assert follower.poll() == 200
        sent = [line for body in receiver.bodies for line in body.splitlines()]
        assert sorted(int(line.rsplit(" ", 1)[1]) for line in sent) == \
            [T0 + 10 * k for k in range(300)]  # each slot once, the late ones too
        assert "p usage=100.0 %d" % T0 in sent
        cursor = json.loads((tmp_path / FILE).read_text())["targets"]
        (feeds,) = [t["feeds"] for t in cursor.values()]
        assert list(feeds.values()) == [{"next": 300, "start": T0, "holes": []}]
    finally:
        store.close()


def test_a_cluster_s_sink_goes_on_where_the_last_collector_s_cursor_left_off(
        tmp_path, receiver, pg_database):
    """A cluster's collectors keep the sink's cursor in the database (wl_docs "influx"): the
    collector that takes the sink's duty over from another goes on where the other's cursor
    was, from its own directory (which holds no cursor), sending nothing twice."""
    from batches import batch
    from wattlog.store.postgres import PgDocument, PgStore

    def recs(first, n):
        return [(T0 + 10 * k, 100.0 + k, 1000 + k, 230.0, 0.5) for k in range(first, first + n)]

    def follower(store, own_dir):
        return Sink(store, str(own_dir), Writer(Target("influx://127.0.0.1:%d/wattlog"
                                                       % receiver.port)), Schema("sp3s"),
                    horizon_s=40 * 86400, cursor=PgDocument(store.conns, "influx"))

    store = PgStore(*pg_database, Complaints())
    try:
        store.recover({})
        store.take("wattlog/p/readings", batch(recs(0, 100)))
        store.commit()
        (tmp_path / "c0").mkdir()
        (tmp_path / "c1").mkdir()
        assert follower(store, tmp_path / "c0").poll() == 100
        store.take("wattlog/p/readings", batch(recs(100, 50), seq=100))
        store.commit()
        assert follower(store, tmp_path / "c1").poll() == 50  # not 150: the cursor went on
        sent = [line for body in receiver.bodies for line in body.splitlines()]
        assert sorted(int(line.rsplit(" ", 1)[1]) for line in sent) == \
            [T0 + 10 * k for k in range(150)]
        assert not (tmp_path / "c0" / FILE).exists() and not (tmp_path / "c1" / FILE).exists()
        doc = PgDocument(store.conns, "influx").read()
        (feeds,) = [t["feeds"] for t in doc["targets"].values()]
        assert list(feeds.values()) == [{"next": 150, "start": T0, "holes": []}]
    finally:
        store.close()


def test_a_commit_that_shows_after_the_sink_looked_is_sent(tmp_path, receiver, pg_database):
    """A cluster's collectors commit side by side, and the sink may look while one of their
    transactions is half done. What it takes for "something new was committed" must show with
    the rows, not before them: here a collector's commit is held mid-transaction (another
    session holds wl_meta's row; the commit waits for it, as it waits for another collector's
    commit), the sink looks, the commit ends: the sink's next look sends its readings. (A
    sequence's number, as the commit number was, shows before the rows; the sink then found
    nothing new after the commit and never sent those readings.)"""
    import psycopg
    from batches import batch
    from wattlog.store.postgres import PgStore

    def recs(first, n):
        return [(T0 + 10 * k, 100.0 + k, 1000 + k, 230.0, 0.5) for k in range(first, first + n)]

    dsn, password = pg_database
    store = PgStore(dsn, password, Complaints())
    holder = psycopg.connect(dsn, password=password)
    try:
        store.recover({})
        store.take("wattlog/p/readings", batch(recs(0, 100)))
        store.commit()
        follower = Sink(store, str(tmp_path), Writer(Target(
            "influx://127.0.0.1:%d/wattlog" % receiver.port)), Schema("sp3s"),
            horizon_s=40 * 86400)
        assert follower.poll() == 100
        holder.execute("SELECT * FROM wl_meta FOR UPDATE")  # held until holder.commit()
        store.take("wattlog/p/readings", batch(recs(100, 50), seq=100))
        committing = threading.Thread(target=store.commit)
        committing.start()
        wait_until(lambda: holder.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND "
            "wait_event_type = 'Lock'").fetchone()[0] == 1)
        assert follower.poll() == 0  # the commit is not done: nothing of it shows
        holder.commit()
        committing.join(20)
        assert not committing.is_alive()
        assert follower.poll() == 50
        sent = [line for body in receiver.bodies for line in body.splitlines()]
        assert sorted(int(line.rsplit(" ", 1)[1]) for line in sent) == \
            [T0 + 10 * k for k in range(150)]
    finally:
        holder.close()
        store.close()
