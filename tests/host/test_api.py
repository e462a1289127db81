"""test_api.py - the HTTP API's own parts (serve/) without a broker: a real aiohttp server on a
free loopback port over a real data directory (store.Store, readings committed and pending),
asked with urllib; PlugWatch fed the bytes plugs publish. The API against real plugs through a
real mosquitto is tests/e2e/test_api.py."""

import json
import time
import urllib.error
import urllib.request

import pytest

import numpy as np

from batches import T0, batch
from served import COMMITTED, PENDING, TOKEN, Served, records
from wattlog.serve import series
from wattlog.serve.app import Api, Server, parse_listen, read_first_line
from wattlog.links import Link
from wattlog.serve.plugwatch import STATE_KEYS, PlugWatch
from wattlog.store.query import Engine

@pytest.fixture
def served(tmp_path):
    s = Served(tmp_path)
    yield s
    s.close()


def test_series_lays_pending_readings_over_the_committed_ones(served):
    """The raw slots of a range: what is on disk, then what waits for the next commit, with
    committed_until between them; the CSV says the same."""
    status, out = served.call("/api/series?feed=plug-1/power&start=%d&end=%d&points=1000"
                              % (T0, T0 + 1000))
    assert status == 200 and out["bucket_s"] == 10
    assert out["committed_until"] == T0 + 10 * COMMITTED
    assert out["time"] == list(range(T0, T0 + 1000, 10))
    assert out["raw"] is True and out["value"] == [100.0 + i for i in range(COMMITTED + PENDING)]
    status, csv = served.call("/api/series.csv?feed=plug-1/power&start=%d&end=%d"
                              % (T0 + 570, T0 + 620))
    assert csv.splitlines() == ["time,power_W"] + ["%d,%s" % (T0 + 10 * k, 100.0 + k)
                                                   for k in range(57, 62)]
    status, feeds = served.call("/api/feeds")
    power = next(f for f in feeds["feeds"] if f["channel"] == "power")
    assert power["last_value"] == 100.0 + COMMITTED + PENDING - 1
    assert power["last_time"] == T0 + 10 * (COMMITTED + PENDING - 1)


def test_series_buckets_are_the_engines_and_stop_where_the_data_does(served):
    """Buckets come from query.Engine unchanged; a range reaching past the data gets buckets
    of the length asked for up to the data's end, none of nothing after it."""
    entry = served.store.committer.registry.find("plug-1", "power")
    feed = served.store.committer.feeds[entry["id"]]
    want = Engine(served.store.committer.summaries,
                  pending=served.store.pending).series(feed, entry, T0, T0 + 1000, 10)
    status, out = served.call("/api/series?feed=%d&start=%d&end=%d&points=10"
                              % (entry["id"], T0, T0 + 1000))
    assert want["bucket_s"] == 100 and out["raw"] is False
    assert {k: out[k] for k in ("time", "count", "committed_until", "bucket_s")} == \
        {k: want[k] for k in ("time", "count", "committed_until", "bucket_s")}
    for key in ("mean", "min", "max"):  # given to float32's precision, shortest
        assert np.array_equal(np.float32(out[key]), np.float32(want[key])), key
    status, out = served.call("/api/series?feed=plug-1/power&start=%d&end=%d&points=20"
                              % (T0, T0 + 2000))
    assert out["bucket_s"] == 100 and out["time"] == list(range(T0, T0 + 1000, 100))
    assert out["count"] == [10] * 10 and out["end"] == T0 + 2000
    status, out = served.call("/api/series?feed=plug-1/power&start=%d&end=now&points=100000"
                              % (T0 + 5000))
    assert status == 200 and out["time"] == [] and out["committed_until"] == T0 + 600


def test_series_of_several_feeds_in_one_request(served):
    """feed= given more than once: {"series": [...]}, each answer the one its own request
    gets (one request for a chart of many plugs); a wrong name among them, or more than
    MAX_FEEDS, is a 400 sentence."""
    rng = "&start=%d&end=%d&points=7" % (T0, T0 + 1000)
    names = ["plug-1/power", "plug-1/voltage", "plug-1/power"]
    status, out = served.call("/api/series?" + "&".join("feed=" + n for n in names) + rng)
    assert status == 200 and len(out["series"]) == 3
    for name, got in zip(names, out["series"]):
        assert got == served.call("/api/series?feed=" + name + rng)[1]
    assert [s["channel"] for s in out["series"]] == ["power", "voltage", "power"]
    status, out = served.call("/api/series?feed=plug-1/power&feed=plug-1/nope" + rng)
    assert status == 400 and out["error"].startswith("feed 'plug-1/nope' is not NODE/CHANNEL")
    status, out = served.call("/api/series?" + "&".join(["feed=plug-1/power"] * (
        series.MAX_FEEDS + 1)) + rng)
    assert status == 400 and out["error"] == "at most %d feeds in one request, not %d" % (
        series.MAX_FEEDS, series.MAX_FEEDS + 1)
    # MAX_POINTS in all, not per feed: a request cannot make an answer 50 times bigger
    status, out = served.call("/api/series?" + "&".join(["feed=plug-1/power"] * 4) +
                              "&start=%d&end=%d&points=%d" % (T0, T0 + 1000, series.MAX_POINTS // 4 + 1))
    assert status == 400 and "points" in out["error"], out


def test_energy_and_emoncms_are_mounted(served):
    """/api/energy is energy.energy_table for this data directory (pending readings
    included); emoncms's feed API answers under /emoncms."""
    from wattlog import energy
    status, out = served.call("/api/energy?by=day&start=%d&end=%d" % (T0 - 86400, T0 + 86400))
    want = energy.energy_table(served.store, "day", "UTC", None, T0 - 86400, T0 + 86400)
    want["cells"] = energy.cells(want)  # the text every view shows (the page, the CLI)
    assert status == 200 and out == json.loads(json.dumps(want))
    assert out["plugs"][0]["total_kwh"] == 0.099  # 1000 Wh .. 1099 Wh: the pending ones too
    status, listed = served.call("/emoncms/feed/list.json")
    assert status == 200 and sorted(f["name"] for f in listed) == [
        "current", "energy", "power", "voltage"]


BAD = [
    ("/api/series?feed=..%2F..%2Fetc%2Fpasswd", 400, "is not NODE/CHANNEL"),
    ("/api/series?feed=plug-1%2Fpower%00", 400, "is not NODE/CHANNEL"),
    ("/api/series?feed=%C0%AF%2Fpower", 400, "is not NODE/CHANNEL"),
    ("/api/series?feed=" + "x" * 300, 400, "too long"),
    ("/api/series?feed=1.0", 400, "is not NODE/CHANNEL"),
    ("/api/series?feed=77", 404, "there is no feed '77'"),
    ("/api/series?feed=plug-1/power&start=%d&end=%d" % (T0 + 10, T0), 400, "must come before"),
    ("/api/series?feed=plug-1/power&start=inf", 400, "is not a time"),
    ("/api/series?feed=plug-1/power&start=1e9", 400, "is not a time"),
    ("/api/series?feed=plug-1/power&end=9999-12-31", 400, "from 1970 to 2106"),
    ("/api/series?feed=plug-1/power&points=100001", 400, "from 1 to 100000"),
    ("/api/series?feed=plug-1/power&points=NaN", 400, "from 1 to 100000"),
    ("/api/series?feed=plug-1/power&points=2.5", 400, "from 1 to 100000"),
    ("/api/energy?by=fortnight", 400, "by must be"),
    ("/api/plugs/PLUG", 400, "is not a node id"),
    ("/api/nowhere", 404, "GET /api lists them"),
]


def test_bad_parameters_get_a_4xx_with_one_sentence(served):
    """Out-of-range, malformed and hostile parameters: refused in one sentence each; the
    server answers normally afterwards."""
    for path, status, words in BAD:
        got, out = served.call(path)
        assert (got, words in out.get("error", "")) == (status, True), (path, got, out)
        assert "\n" not in out["error"]
    assert served.call("/api/health")[0] == 200


def test_a_damaged_feed_is_a_sentence_not_a_failure(served, tmp_path):
    """A feed whose header is unreadable: 503 naming the feed; other feeds still answer."""
    entry = served.store.committer.registry.find("plug-1", "voltage")
    with open(tmp_path / "data" / "phpfina" / ("%d.meta" % entry["id"]), "wb") as f:
        f.write(b"\0" * 16)
    status, out = served.call("/api/series?feed=plug-1/voltage")
    assert status == 503 and "feed %d cannot be read now" % entry["id"] in out["error"]
    assert served.call("/api/series?feed=plug-1/power")[0] == 200


def test_actions_need_the_token(served):
    """No header: 401 saying which header; a wrong token: 403; the right one gets past the
    check (to the plug lookup: this plug never reported)."""
    path = "/api/plugs/plug-1/relay"
    status, out = served.call(path, {"relay": "ON"})
    assert status == 401 and "Authorization: Bearer <token>" in out["error"]
    for wrong in (TOKEN[:-1], TOKEN + "0", TOKEN.upper(), "\u00e9" + TOKEN[1:]):
        assert served.call(path, {"relay": "ON"}, token=wrong) == (403, {"error": "the token is wrong"})
    status, out = served.call(path, {"relay": "ON"}, token=TOKEN)
    assert status == 404 and "no plug 'plug-1' has reported" in out["error"]


def test_without_a_token_file_actions_are_refused_saying_how_to_make_one(tmp_path):
    """No default token exists: whatever is sent, actions are refused, and the sentence says
    that `wattlog provision` makes one."""
    s = Served(tmp_path, token=None)
    try:
        for token in (None, "", "None", TOKEN):
            status, out = s.call("/api/plugs/plug-1/relay", {"relay": "ON"}, token=token)
            assert status == 403 and "`wattlog provision` makes one" in out["error"], token
        assert s.call("/api/series?feed=plug-1/power")[0] == 200  # reading is open here
    finally:
        s.close()


def test_closed_reading_needs_the_token_too(tmp_path):
    s = Served(tmp_path, read_open=False)
    try:
        assert s.call("/api/feeds")[0] == 401
        assert s.call("/api/feeds", token="nope")[0] == 403
        assert s.call("/api/feeds", token=TOKEN)[0] == 200
    finally:
        s.close()


def test_relay_without_an_operator_login_says_so(served):
    """Actions go through the broker as wattlog-operator: without its password file the
    collector says what to give it."""
    served.watch.take("wattlog/plug-1/status", b"online")
    status, out = served.call("/api/plugs/plug-1/relay", {"relay": "OFF"}, token=TOKEN)
    assert status == 503 and "--operator-password-file" in out["error"]


def test_plug_watch_reads_what_plugs_publish():
    """State, status, firmware (Home Assistant's retained config), meter faults (the plug's
    log sentences and its info answer); garbage is ignored; readings, acks and status stay the
    collector's."""
    w = PlugWatch("wattlog")
    heard = []
    w.listen(lambda kind, node, data: heard.append((kind, node, data)))
    assert w.take("wattlog/p1/status", b"online") is False  # the collector answers it too
    state = {"time": T0, "power": 12.5, "voltage": 230.1, "current": 0.06, "energy": 1.5,
             "relay": "ON", "rssi": -67, "extra": "x" * 100}
    assert w.take("wattlog/p1/state", json.dumps(state).encode()) is True
    assert w.take("wattlog/p1/state", b"\xff not json") is True
    assert w.take("wattlog/../state", b"{}") is True
    config = {"dev": {"identifiers": ["wattlog_p1"], "sw_version": "0.9.1"}, "cmps": {}}
    assert w.take("homeassistant/device/p1/config", json.dumps(config).encode()) is True
    w.take("wattlog/p1/log", b"bl0942 meter: 3 frames with a bad checksum, 2 stray bytes skipped")
    w.take("wattlog/p1/log", b'info {"node": "p1", "boot": 7, "meter_faults": {"checksum": 3}, '
           b'"unacked": 12, "connects": 2} (id 9)')
    assert w.take("wattlog/p1/readings", b"..") is False
    assert w.take("wattlog/p1/ack", b"{}") is False
    p = w.snapshot("p1")
    assert p["status"] == "online" and p["firmware"] == "0.9.1"
    assert p["state"] == {k: state[k] for k in STATE_KEYS}
    assert p["faults"] == 5 and p["info"]["meter_faults"] == {"checksum": 3}
    assert (p["info"]["unacked"], p["info"]["connects"]) == (12, 2)  # the node's status keys
    assert w.snapshot("..") is None and set(w.snapshot()) == {"p1"}
    kinds = [(k, n) for k, n, _ in heard]
    assert kinds == [("status", "p1"), ("state", "p1"), ("log", "p1"), ("log", "p1")]
    assert heard[1][2]["online"] is True and heard[1][2]["power"] == 12.5


def test_listen_addresses():
    assert parse_listen("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert parse_listen(":8080") == ("127.0.0.1", 8080)
    assert parse_listen("[::1]:80") == ("::1", 80)
    for bad in ("8080", "host:", "host:http", "h:70000"):
        with pytest.raises(ValueError, match="is not HOST:PORT"):
            parse_listen(bad)


def test_a_port_in_use_is_said_and_start_returns_false(tmp_path, caplog):
    s = Served(tmp_path)
    try:
        other = Server(Api(s.store, PlugWatch("wattlog")), "127.0.0.1:%d" % s.server.port)
        assert other.start() is False
        assert "cannot listen on 127.0.0.1:%d" % s.server.port in caplog.text
    finally:
        s.close()


def test_secret_files_are_checked_at_start_and_never_quoted(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    for path, words in ((tmp_path / "missing", "cannot read the HTTP token file"),
                        (empty, "is empty")):
        with pytest.raises(ValueError, match=words):
            read_first_line(str(path), "HTTP token")
    secret = tmp_path / "latin1"
    secret.write_bytes(b"s\xe9cret\n")
    with pytest.raises(ValueError) as e:
        read_first_line(str(secret), "HTTP token")
    assert "cret" not in str(e.value).replace(str(secret), "")
    ok = tmp_path / "ok"
    ok.write_text(" tok \n")
    assert read_first_line(str(ok), "HTTP token") == "tok"


def test_the_stream_sends_states_and_ends_when_the_server_stops(served):
    """A live stream gets each plug's latest state at once, then each new one; stopping the
    collector ends open streams at once rather than waiting for them (a stop under systemd
    must not hang on a browser tab)."""
    served.watch.take("wattlog/p1/state", b'{"time": 1, "power": 5.0, "relay": "ON"}')
    resp = urllib.request.urlopen("http://127.0.0.1:%d/api/stream" % served.server.port,
                                  timeout=10)
    assert resp.headers["Content-Type"] == "text/event-stream"
    assert next_event(resp) == ("links", {"broker": None, "influx": None})
    assert resp.readline() == b"event: state\n"
    assert json.loads(resp.readline()[6:])["power"] == 5.0 and resp.readline() == b"\n"
    served.watch.take("wattlog/p1/state", b'{"time": 2, "power": 6.0, "relay": "OFF"}')
    assert resp.readline() == b"event: state\n"
    got = json.loads(resp.readline()[6:])
    assert (got["node"], got["power"], got["relay"], got["online"]) == ("p1", 6.0, "OFF", False)
    t0 = time.monotonic()
    served.server.stop()
    assert time.monotonic() - t0 < 1.0  # not the 2 s aiohttp would wait for the handler
    assert resp.read() == b"\n"  # the end of the last event, then the end of the stream


def next_event(resp):
    """(kind, data) of the next Server-Sent Event on an open stream."""
    kind = resp.readline().decode().rstrip("\n").partition("event: ")[2]
    data = json.loads(resp.readline().decode()[len("data: "):])
    assert resp.readline() == b"\n"
    return kind, data


def test_health_and_the_stream_say_the_broker_link_and_writes_per_measured_day(tmp_path):
    """/api/health says the collector's link to the broker: starting, down since the first
    failure with the latest reason, up again; the live stream sends the links first and again
    on each change. Bytes written: right after a start, one day, partial, and no average
    (a few minutes scaled up to a day would be mostly the start-up)."""
    clock = [1795170000.0]
    link = Link("127.0.0.1:1883", clock=lambda: clock[0])
    s = Served(tmp_path, broker_link=link)
    try:
        status, h = s.call("/api/health")
        assert status == 200 and h["influx"] is None
        assert h["broker"]["state"] == "starting" and h["broker"]["address"] == "127.0.0.1:1883"
        [day] = h["written_per_day"]
        assert day["whole"] is False and 0 <= day["measured_s"] < 600
        assert h["written_per_day_average"] is None

        resp = urllib.request.urlopen("http://127.0.0.1:%d/api/stream" % s.server.port,
                                      timeout=10)
        assert next_event(resp) == ("links", {"broker": link.status(), "influx": None})
        clock[0] += 60
        link.down("the connection was lost (Unspecified error)")
        kind, got = next_event(resp)
        assert kind == "links" and got["broker"]["state"] == "down"
        assert got["broker"]["since"] == clock[0]
        clock[0] += 30  # tried again, and again
        link.down("cannot reach it (Connection refused)")
        kind, got = next_event(resp)
        assert got["broker"] == {"state": "down", "since": clock[0] - 30,
                                 "address": "127.0.0.1:1883",
                                 "reason": "cannot reach it (Connection refused)"}
        assert s.call("/api/health")[1]["broker"] == got["broker"]
        clock[0] += 30
        link.up()
        kind, got = next_event(resp)
        assert got["broker"] == {"state": "up", "since": clock[0], "address": "127.0.0.1:1883"}
        resp.close()
    finally:
        s.close()


def test_the_index_lists_the_plugs_in_the_order_their_data_was_first_stored(served):
    """GET /api names every plug with stored data in the order the collector first stored
    it (the dashboard's colours go by it): a plug that came later comes after, whatever its
    name."""
    served.store.take("wattlog/a-later-plug/readings", batch(records(0, 5)))
    served.store.commit()
    status, out = served.call("/api")
    assert status == 200 and out["plugs"] == ["plug-1", "a-later-plug"]


def test_plug_health_and_nodes_say_what_a_plug_holds_on_its_flash(served, tmp_path, capsys):
    """What a plug's spill holds (lib/wattnode/spill.py), from the status line it says as it
    connects: plug health shows it, and `wattlog nodes`, which reads files, asks the running
    collector for it (commit.json cannot know it)."""
    from wattlog import cli
    served.watch.take("wattlog/plug-1/log", (
        'status {"node": "plug-1", "kept": 0, "spill_readings": 4032, "spill_bytes": 65024, '
        '"spill_oldest_slot": %d, "spill_capacity": 60480, "spill_dropped": 0, '
        '"spill_torn": 126}' % T0).encode())
    want = {"readings": 4032, "bytes": 65024, "oldest_slot": T0, "capacity": 60480,
            "dropped": 0, "torn": 126}
    status, plug = served.call("/api/plugs/plug-1")
    assert status == 200 and plug["spill"] == want
    config = tmp_path / "wattlog.toml"
    config.write_text('data = "%s"\n[http]\nlisten = "127.0.0.1:%d"\ntoken_file = "%s"\n'
                      % (tmp_path / "data", served.server.port, tmp_path / "http.token"))
    cli.main(["nodes", "--config", str(config), "--json"])
    assert json.loads(capsys.readouterr().out)[0]["spill"] == want
    cli.main(["nodes", "--config", str(config)])
    assert "4032 since 20" in capsys.readouterr().out.splitlines()[1]
