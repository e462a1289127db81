"""test_emoncms.py - emoncms's feed API served by wattlog answers what emoncms answers for the
same PHPFina files: feed/data.json against a literal, slot-by-slot reading of PHPFina.php's
get_data_combined() and feed_model.php's get_data() (start between slots floored, end
inclusive, average, skipmissing, limitinterval, an interval larger than the feed's, daily /
weekly / monthly in a zone with DST, delta, dp, every timeformat); times and zones as emoncms's
PHP reads them (days that start at 01:00 after a midnight the clocks skip, ISO times with their
zone ignored, a date alone at now's time of day, now-24h as now, PHP's zone spellings) against
answers printed by emoncms's PHP; and, where php-cli and an emoncms source tree are at hand,
byte for byte against emoncms's own PHP engine run on the same files. The data directory is made by the collector's own commit path (Committer), and
the API is a real aiohttp server on a loopback port; ids, ../, NUL and long names are refused
without touching a file.

The PHP comparison needs `php` (tools/setup installs php-cli) and WATTLOG_EMONCMS_SRC: an
emoncms checkout, or its git directory (emoncms is AGPL and not vendored here).
"""

import asyncio
import datetime
import json
import math
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zoneinfo

import numpy as np
import pytest
from aiohttp import web

from wattlog.store.commit import Committer
from wattlog.complaints import Complaints
from wattlog.serve.emoncms import add_routes
from wattlog.serve.phpnum import php_float_text
from wattlog.store import open_reader

BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")
T0 = int(datetime.datetime(2026, 3, 27, 13, 0, tzinfo=BERLIN).timestamp())  # on the 10 s grid
N = 4 * 8640 + 3000  # over the spring DST change, into April
YEAR0 = int(datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc).timestamp())
YEAR_N = 6 * 24 * 365


def make_data(data_dir):
    """Two plugs through the collector's commit path: power with holes, and an energy counter
    with a 2-hour outage; a third feed (voltage) with a different interval (60 s); a fourth
    (plug-y's energy counter) every 10 minutes through 2026, in steps of 1/8 kWh (exact in
    float32, so answers are short), for the DST changes of zones all over the world."""
    rnd = np.random.default_rng(12)
    t = T0 + 10 * np.arange(N)
    power = rnd.normal(300, 120, N).round(1)
    power[rnd.random(N) < 0.05] = np.nan
    power[5000:5400] = np.nan
    energy = np.cumsum(rnd.integers(0, 3, N)) / 1000.0 + 12.5
    energy[20000:20720] = np.nan
    c = Committer(str(data_dir), Complaints())
    c.commit({("plug-a", "power"): (t, power), ("plug-a", "energy"): (t, energy)},
             {"plug-a": 10})
    tv = T0 + 60 * np.arange(N // 6)
    c.commit({("plug-b", "voltage"): (tv, rnd.normal(230, 2, len(tv)).round(2))}, {"plug-b": 60})
    ty = YEAR0 + 600 * np.arange(YEAR_N)
    c.commit({("plug-y", "energy"): (ty, np.cumsum(rnd.integers(0, 3, YEAR_N)) * 0.125)},
             {"plug-y": 600})
    c.close(clean=True)
    feeds = json.loads((data_dir / "feeds.json").read_text())["feeds"]
    return {(f["node"], f["channel"]): f["id"] for f in feeds}


class Server:
    """The emoncms routes on a real aiohttp server on a free loopback port, in a thread."""

    def __init__(self, data_dir, timezone="Europe/Berlin", reader=None):
        self.loop = asyncio.new_event_loop()
        app = web.Application()
        add_routes(app, reader or open_reader(str(data_dir)), timezone=timezone)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def get(self, path, raw=None, **params):
        url = "http://127.0.0.1:%d/emoncms/%s?%s" % (self.port, path,
                                                     raw or urllib.parse.urlencode(params))
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def close(self):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module", params=["phpfina", "postgresql"])
def served(request, tmp_path_factory):
    """(the server, the data directory, {(node, channel): feed id}). Served from the files, or
    from PostgreSQL (the cluster's store, store/postgres.py) holding the same feeds, ids and
    values, copied by `wattlog migrate`'s own code into a private server
    (tools/lib/pgserver.py): every answer below must be the same from either."""
    data = tmp_path_factory.mktemp("emoncms")
    ids = make_data(data)
    pg = reader = None
    if request.param == "postgresql":
        pg, reader = migrated(data)
    server = Server(data, reader=reader)
    yield server, data, ids
    server.close()
    if pg is not None:
        pg.close()


def migrated(data):
    """(a private PostgreSQL holding what `data` holds, a PgReader on it); skipped where
    PostgreSQL is not installed."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools" / "lib"))
    pgserver = pytest.importorskip("pgserver")
    from wattlog.store.migrate import Source, Target, migrate
    from wattlog.store.postgres import PgReader
    try:
        pg = pgserver.PgServer().start()
    except pgserver.NotInstalled as e:  # one that fails to start fails the test
        pytest.skip("%s" % e)
    source, target = Source(str(data)), Target(pg.dsn, pg.password)
    try:
        migrate(source, target)
    finally:
        source.close()
        target.close()
    return pg, PgReader(pg.dsn, pg.password)


# -- a literal reading of emoncms's PHP, one slot and one point at a time ---------------------

def read_meta(data, fid):
    raw = (data / "phpfina" / ("%d.meta" % fid)).read_bytes()
    _, _, interval, start_time = struct.unpack("<4I", raw)
    dat = (data / "phpfina" / ("%d.dat" % fid)).read_bytes()
    npoints = len(dat) // 4
    return interval, start_time, npoints, start_time + interval * (npoints - 1), dat


def slot(dat, pos):
    return struct.unpack_from("<f", dat, 4 * pos)[0]


def php_modify_walk(start, end, interval, zone):
    """DateTime: setTimestamp(start), modify("midnight"), this monday / first day of ..., then
    +1 day/week/month/year while <= end."""
    d = datetime.datetime.fromtimestamp(start, zone).replace(hour=0, minute=0, second=0)
    if interval == "weekly":
        while d.weekday() != 0:
            d = (d + datetime.timedelta(days=1)).replace(hour=0)
    elif interval == "monthly":
        d = d.replace(day=1)
    elif interval == "annual":
        d = d.replace(month=1, day=1)
    out = []
    while True:
        t = int(datetime.datetime(d.year, d.month, d.day, tzinfo=zone).timestamp())
        if t > end:
            return out
        y, m, day = d.year, d.month, d.day
        if interval == "daily":
            nd = datetime.date(y, m, day) + datetime.timedelta(days=1)
        elif interval == "weekly":
            nd = datetime.date(y, m, day) + datetime.timedelta(days=7)
        elif interval == "monthly":
            nd = datetime.date(y + m // 12, m % 12 + 1, 1)
        else:
            nd = datetime.date(y + 1, 1, 1)
        out.append((t, int(datetime.datetime(nd.year, nd.month, nd.day, tzinfo=zone).timestamp())))
        d = datetime.datetime(nd.year, nd.month, nd.day)


def reference(data, fid, start, end, interval, average=False, skipmissing=0, limitinterval=0,
              timeformat="unixms", zone=BERLIN):
    """get_data() + get_data_combined() as the PHP reads, for numeric start/end in seconds."""
    if interval == 0:
        interval = math.floor((end - start) / 800 + 0.5)
    iv, st, npoints, end_time, dat = read_meta(data, fid)
    start, end = int(start), int(end)
    if interval in ("daily", "weekly", "monthly", "annual"):
        divisions = php_modify_walk(start, end, interval, zone)
    else:
        interval = int(interval)
        if limitinterval:
            interval = max(interval, iv)
            interval = math.floor(interval / iv + 0.5) * iv
        if interval <= iv:
            average = False
        divisions, t = [], start
        while t <= end:
            divisions.append((t, t + interval))
            t += interval
    out = []
    for a, b in divisions:
        value = None
        pos = (a - st) // iv
        if average:
            total, n = 0, 0
            pe = min(max((b - st) // iv, 0), npoints)
            for k in range(min(max(pos, 0), npoints), pe):
                v = slot(dat, k)
                if not math.isnan(v):
                    total += v
                    n += 1
            if n:
                value = 1.0 * total / n
        elif st <= a <= end_time:
            v = slot(dat, pos)
            value = None if math.isnan(v) else v
        if value is not None or skipmissing == 0:
            out.append(value if timeformat == "notime" else [a, value])
    if timeformat == "unixms":
        out = [[a * 1000, v] for a, v in out]
    elif timeformat in ("excel", "iso8601"):
        fmt = "%d/%m/%Y %H:%M:%S" if timeformat == "excel" else None
        out = [[datetime.datetime.fromtimestamp(a, zone).strftime(fmt) if fmt else
                datetime.datetime.fromtimestamp(a, zone).isoformat(), v] for a, v in out]
    return out


def php_text(obj):
    """PHP's json_encode as the reference writes it (floats via the module's formatter,
    itself checked against PHP below)."""
    if isinstance(obj, list):
        return "[" + ",".join(php_text(v) for v in obj) + "]"
    if isinstance(obj, float):
        return php_float_text(obj)
    return json.dumps(obj).replace("/", "\\/")


def first_difference(got, want):
    """Where two long answers part, in a line."""
    k = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
    return "lengths %d, %d; from byte %d: got %r, want %r" % (
        len(got), len(want), k, got[max(k - 40, 0):k + 60], want[max(k - 40, 0):k + 60])


S = T0 + 3 * 3600 + 7          # between slots
CASES = [
    # (query, reference kwargs); start/end in seconds unless given in ms
    (dict(start=S, end=S + 3600, interval=10), dict(start=S, end=S + 3600, interval=10)),
    (dict(start=S * 1000, end=(S + 600) * 1000, interval=10, timeformat="unix"),
     dict(start=S, end=S + 600, interval=10, timeformat="unix")),
    (dict(start=S, end=S + 600, interval=10, timeformat="notime"),
     dict(start=S, end=S + 600, interval=10, timeformat="notime")),
    (dict(start=S, end=S + 86400, interval=300, average=1),
     dict(start=S, end=S + 86400, interval=300, average=True)),
    (dict(start=S, end=S + 86400, interval=300),
     dict(start=S, end=S + 86400, interval=300)),
    (dict(start=S, end=S + 86400, interval=7, limitinterval=1, average=1),
     dict(start=S, end=S + 86400, interval=7, limitinterval=1, average=True)),
    (dict(start=S, end=S + 7200, interval=3),
     dict(start=S, end=S + 7200, interval=3)),
    (dict(start=T0 + 49000, end=T0 + 58000, interval=60, skipmissing=1),
     dict(start=T0 + 49000, end=T0 + 58000, interval=60, skipmissing=1)),
    (dict(start=T0 - 3600, end=T0 + 600, interval=60),
     dict(start=T0 - 3600, end=T0 + 600, interval=60)),
    (dict(start=T0 - 86400 * 3, end=T0 + 86400 * 7, interval="daily", average=1),
     dict(start=T0 - 86400 * 3, end=T0 + 86400 * 7, interval="daily", average=True)),
    (dict(start=T0, end=T0 + 86400 * 6, interval="daily", timeformat="iso8601"),
     dict(start=T0, end=T0 + 86400 * 6, interval="daily", timeformat="iso8601")),
    (dict(start=T0, end=T0 + 86400 * 30, interval="weekly", average=1, timeformat="excel"),
     dict(start=T0, end=T0 + 86400 * 30, interval="weekly", average=True, timeformat="excel")),
    (dict(start=T0 - 86400 * 40, end=T0 + 86400 * 30, mode="monthly", average=1),
     dict(start=T0 - 86400 * 40, end=T0 + 86400 * 30, interval="monthly", average=True)),
    (dict(start=S, end=S + 86400 * 4, interval=0, average=1),
     dict(start=S, end=S + 86400 * 4, interval=0, average=True)),
    (dict(start=S, end=S + 86400 * 2, interval=3600, average=1, timeformat="notime",
          skipmissing=1),
     dict(start=S, end=S + 86400 * 2, interval=3600, average=True, timeformat="notime",
          skipmissing=1)),
]


@pytest.mark.parametrize("query, ref", CASES, ids=[str(i) for i in range(len(CASES))])
def test_data_json_answers_what_phpfina_php_reads(served, query, ref):
    """Each parameter case gives, byte for byte, the JSON of a slot-by-slot reading of the
    PHP engine: the same points, times, values, nulls and number spelling."""
    server, data, ids = served
    for fid in (ids[("plug-a", "power")], ids[("plug-b", "voltage")]):
        status, body = server.get("feed/data.json", id=fid, **query)
        assert status == 200, body
        want = php_text(reference(data, fid, **ref))
        same = body == want  # not in the assert: pytest's diff of 400 KB takes minutes
        assert same, first_difference(body, want)


def test_end_is_inclusive_and_a_start_between_slots_is_floored(served):
    """emoncms's own promises, spelled out: the point at `end` is there, and a start 7 s into a
    slot carries that slot's value under the time asked for."""
    server, data, ids = served
    fid = ids[("plug-a", "power")]
    iv, st, npoints, end_time, dat = read_meta(data, fid)
    got = json.loads(server.get("feed/data.json", id=fid, start=S, end=S + 100, interval=10,
                                timeformat="unix")[1])
    assert [p[0] for p in got] == list(range(S, S + 101, 10))
    want = slot(dat, (S - st) // iv)
    assert got[0][1] == (None if math.isnan(want) else want)


def test_feed_list_get_value_and_meta(served):
    server, data, ids = served
    fid = ids[("plug-a", "energy")]
    iv, st, npoints, end_time, dat = read_meta(data, fid)
    feeds = json.loads(server.get("feed/list.json", meta=1)[1])
    row = [f for f in feeds if f["id"] == str(fid)][0]
    assert (row["tag"], row["name"], row["engine"], row["unit"]) == ("plug-a", "energy", "5", "kWh")
    assert (row["start_time"], row["interval"], row["npoints"], row["end_time"]) == \
        (st, iv, npoints, end_time)
    assert row["time"] == end_time and row["value"] == slot(dat, npoints - 1)
    assert json.loads(server.get("feed/get.json", id=fid, field="tag")[1]) == "plug-a"
    assert json.loads(server.get("feed/value.json", id=fid)[1]) == slot(dat, npoints - 1)
    pid = ids[("plug-a", "power")]
    piv, pst, _, _, pdat = read_meta(data, pid)
    k = next(k for k in range(100) if slot(pdat, k) != slot(pdat, k + 1)
             and not math.isnan(slot(pdat, k + 1)))
    assert json.loads(server.get("feed/value.json", id=pid, time=pst + piv * k + 6)[1]) == \
        slot(pdat, k + 1)  # emoncms rounds to the nearest slot here
    assert json.loads(server.get("feed/getmeta.json", id=fid)[1]) == {
        "id": fid, "interval": iv, "start_time": st, "npoints": npoints, "end_time": end_time}
    assert json.loads(server.get("feed/fetch.json", ids="%d,999" % fid)[1]) == \
        [slot(dat, npoints - 1), False]


def test_several_feeds_and_average_json_answer_as_emoncms_does(served):
    """ids=a,b gives [{"feedid": "a", "data": ...}, ...], each as asked alone; feed/average.json
    is data.json with average=1."""
    server, data, ids = served
    a, b = ids[("plug-a", "power")], ids[("plug-b", "voltage")]
    q = dict(start=S, end=S + 7200, interval=600)
    both = json.loads(server.get("feed/data.json", ids="%d,%d" % (a, b), **q)[1])
    assert both == [{"feedid": str(fid), "data": json.loads(
        server.get("feed/data.json", id=fid, **q)[1])} for fid in (a, b)]
    assert server.get("feed/average.json", id=a, **q)[1] == \
        server.get("feed/data.json", id=a, average=1, **q)[1]
    assert server.get("feed/average.json", id=a, **q)[1] != \
        server.get("feed/data.json", id=a, **q)[1]


def test_delta_turns_a_kwh_counter_into_kwh_per_day(served):
    """delta=1 with interval=daily: the counter at each local midnight, differenced; a day
    whose midnight falls in no data is null."""
    server, data, ids = served
    fid = ids[("plug-a", "energy")]
    iv, st, npoints, end_time, dat = read_meta(data, fid)
    got = json.loads(server.get("feed/data.json", id=fid, start=T0, end=T0 + 3 * 86400,
                                interval="daily", delta=1, timeformat="unix")[1])
    days = php_modify_walk(T0, T0 + 4 * 86400, "daily", BERLIN)
    values = [slot(dat, (a - st) // iv) if st <= a <= end_time else None for a, _ in days]
    for i, (a, _) in enumerate(days[:len(got)]):
        nxt = values[i + 1] if i + 1 < len(values) else None
        want = None if values[i] is None or nxt is None else nxt - values[i]
        assert got[i] == [a, want]


@pytest.mark.parametrize("params, status, words", [
    (dict(id=1, end=2), 200, "missing start parameter"),
    (dict(id=999, start=1, end=2), 200, "feed 999 does not exist"),
    (dict(id="../1", start=1, end=2), 200, "feed 0 does not exist"),
    (dict(id="1\x00", start=T0, end=T0 + 60, interval=10), 200, "[["),
    (dict(id="x" * 5000, start=1, end=2), 200, "does not exist"),
    (dict(id=1, start=5, end=2), 200, "Request end time before start time"),
    (dict(id=1, start=T0, end=T0 + 86400 * 365, interval=1), 200, "datapoint limit reached"),
    (dict(id=1, start=T0, end=T0 + 60, interval=10, timeformat="xml"), 200, "Invalid time format"),
    (dict(id=1, start=T0, end=T0 + 60, interval="hourly"), 400, "is not seconds"),
    (dict(id=1, start="next tuesday", end=T0), 400, "is not a time"),
    (dict(id=1, start=T0, end=T0 + 60, interval=10, timezone="Mars/Olympus", timeformat="excel"),
     400, "is not a time zone"),
    (dict(id=1, start=T0, end="1e400"), 400, "is not a time"),
    (dict(id=1, start=T0 + 0.25, end=T0 + 0.75, interval=10), 200,
     "request end time before start time"),
    (dict(id=1, start=T0, end=T0 + 3600, interval="original", delta=1), 400, "delta needs"),
])
def test_bad_parameters_get_emoncms_errors_or_one_sentence(served, params, status, words):
    server, data, ids = served
    got_status, body = server.get("feed/data.json", **params)
    assert got_status == status and words in body, body
    if status == 400:
        assert json.loads(body)["success"] is False


def test_ids_never_reach_the_file_system_unchecked(served, monkeypatch):
    """An id that is not an active feed in feeds.json opens no file, whatever it spells."""
    server, data, ids = served
    opened = []
    real_open = open

    def watching(path, *a, **kw):
        opened.append(str(path))
        return real_open(path, *a, **kw)
    monkeypatch.setattr("builtins.open", watching)
    for bad in ("../../etc/passwd", "0", "-1", "99", "1/../2", "9" * 400, "1" + "0" * 30):
        server.get("feed/value.json", id=bad)
        server.get("feed/getmeta.json", id=bad)
    for raw in ("id=%FF%FE", "id=%00", "id=..%2F..%2Fetc%2Fpasswd%00"):
        assert server.get("feed/getmeta.json", raw=raw)[0] == 200
    allowed = {"%d.%s" % (fid, ext) for fid in ids.values() for ext in ("meta", "dat")}
    assert {os.path.basename(p) for p in opened if "phpfina" in p} <= allowed, opened


# -- times and zones as emoncms's PHP reads them (wattlog.serve.phpdate) ------------------------------
# Each expected answer below was printed by emoncms's own feed_model.php and PHPFina.php (emoncms
# commit ef6464555de99671e25bee5bb4b92733e6468a1c, php-cli 8.2.36) run on the files make_data()
# writes; test_data_json_is_byte_for_byte_emoncms_own_php runs the same queries through that PHP
# again when WATTLOG_EMONCMS_SRC is set.

BEIRUT_DAYS = dict(start=1774562400, end=1774994400, interval="daily", timezone="Asia/Beirut",
                   timeformat="iso8601")   # 2026-03-27 00:00 to 2026-04-01 01:00 in Beirut
HAVANA_DAYS = dict(start=1772773200, end=1773205200, interval="daily", timezone="America/Havana",
                   timeformat="iso8601")   # 2026-03-06 00:00 to 2026-03-11 01:00 in Havana
MIDNIGHT_GAP = [
    (BEIRUT_DAYS,
     '[["2026-03-27T00:00:00+02:00",1511.375],["2026-03-28T00:00:00+02:00",1527.5],'
     '["2026-03-29T01:00:00+03:00",1543.5],["2026-03-30T01:00:00+03:00",1561.75],'
     '["2026-03-31T01:00:00+03:00",1581.75],["2026-04-01T01:00:00+03:00",1600.5]]'),
    (dict(BEIRUT_DAYS, delta=1),
     '[["2026-03-27T00:00:00+02:00",16.125],["2026-03-28T00:00:00+02:00",16],'
     '["2026-03-29T01:00:00+03:00",18.25],["2026-03-30T01:00:00+03:00",20],'
     '["2026-03-31T01:00:00+03:00",18.75]]'),
    (HAVANA_DAYS,
     '[["2026-03-06T00:00:00-05:00",1145.375],["2026-03-07T00:00:00-05:00",1162.75],'
     '["2026-03-08T01:00:00-04:00",1181.25],["2026-03-09T01:00:00-04:00",1199.5],'
     '["2026-03-10T01:00:00-04:00",1215.125],["2026-03-11T01:00:00-04:00",1231.5]]'),
    (dict(HAVANA_DAYS, delta=1),
     '[["2026-03-06T00:00:00-05:00",17.375],["2026-03-07T00:00:00-05:00",18.5],'
     '["2026-03-08T01:00:00-04:00",18.25],["2026-03-09T01:00:00-04:00",15.625],'
     '["2026-03-10T01:00:00-04:00",16.375]]'),
]


@pytest.mark.parametrize("query, want", MIDNIGHT_GAP, ids=["beirut", "beirut-delta", "havana",
                                                           "havana-delta"])
def test_daily_after_a_midnight_the_clocks_skip_goes_on_at_one(served, query, want):
    """Where the clocks go from 23:59 to 01:00 (Beirut 2026-03-29, Havana 2026-03-08), PHP's
    DateTime walks on from 01:00 ("+1 day" keeps the wall time it landed on), so every later day
    starts at 01:00; with delta=1 the end moves to a midnight, before the last 01:00, and the
    answer has one point fewer. Both as emoncms's PHP answers them (see above)."""
    server, data, ids = served
    status, body = server.get("feed/data.json", id=ids[("plug-y", "energy")], **query)
    assert (status, body) == (200, want)


def test_a_start_on_a_day_whose_midnight_comes_twice_takes_the_later_one(served):
    """Havana's clocks go back from 01:00 to 00:00 on 2026-11-01: from 10:00 that day (standard
    time), PHP's "midnight" is the second 00:00 (-05:00), as the DateTime was in standard time
    (Python's fold=0 would take the first)."""
    server, data, ids = served
    status, body = server.get("feed/data.json", id=ids[("plug-y", "energy")], start=1793545200,
                              end=1793545200 + 2 * 86400, interval="daily",
                              timezone="America/Havana", timeformat="iso8601")
    assert (status, body) == (200, '[["2026-11-01T00:00:00-05:00",5449.5],'
                              '["2026-11-02T00:00:00-05:00",5466.875],'
                              '["2026-11-03T00:00:00-05:00",5484.5]]')


def test_an_iso_time_is_read_in_the_request_zone_whatever_zone_it_names(served):
    """emoncms hands the time to DateTime::modify(), which ignores a zone in the string:
    08:00-05:00 and 10:00Z are 08:00 and 10:00 in Europe/Berlin (07:00 and 09:00 UTC)."""
    server, data, ids = served
    status, body = server.get("feed/data.json", id=ids[("plug-a", "energy")], interval=3600,
                              start="2026-03-28T08:00-05:00", end="2026-03-28T10:00Z",
                              timezone="Europe/Berlin", timeformat="unix")
    assert (status, body) == (200, "[[1774681200,19.218000411987305],[1774684800,"
                              "19.573999404907227],[1774688400,19.94700050354004]]")


def test_a_date_alone_keeps_the_time_of_day_of_now(served):
    """A date without a time changes only the date of emoncms's DateTime (now): the range
    starts at today's time of day on that date (daily points still fall on midnights)."""
    server, data, ids = served
    fid = ids[("plug-a", "energy")]
    status, body = server.get("feed/data.json", id=fid, start="2026-03-28", end="2026-03-30",
                              interval="daily", timezone="Europe/Berlin", timeformat="unix")
    assert (status, body) == (200, "[[1774652400,16.395000457763672],[1774738800,"
                              "25.020999908447266],[1774821600,33.19900131225586]]")
    before = time.time()
    status, body = server.get("feed/data.json", id=fid, start="2026-03-28",
                              end="2026-03-29T23:59:59", interval=3600, timezone="UTC",
                              timeformat="unix")
    after = time.time()
    first_s = json.loads(body)[0][0] - int(datetime.datetime(
        2026, 3, 28, tzinfo=datetime.timezone.utc).timestamp())
    low_s, high_s = int(before) % 86400, int(after) % 86400
    assert low_s <= first_s <= high_s if low_s <= high_s else not high_s < first_s < low_s, \
        (first_s, low_s, high_s)


@pytest.mark.parametrize("start", ["now-24h", "-24h", "now+1h", "NOW-7d"])
def test_now_minus_24h_is_now_as_php_reads_it(served, start):
    """PHP reads "now-24h" as now and a time zone ("-24" hours, then the military zone "h"),
    and modify() ignores the zone: emoncms answers start=now-24h&end=now with its "end before
    start" message, and so does wattlog."""
    server, data, ids = served
    assert server.get("feed/data.json", id=ids[("plug-a", "power")], start=start, end="now") == \
        (200, '{"success":false,"message":"Request end time before start time"}')


def test_a_relative_time_php_fails_on_is_refused(served):
    """"-360h" is no time zone PHP knows: modify() fails (emoncms would print a PHP warning into
    its answer); wattlog answers 400 and a sentence."""
    server, data, ids = served
    status, body = server.get("feed/data.json", id=ids[("plug-a", "power")], start="now-360h",
                              end="now")
    assert status == 400 and "use unix seconds" in json.loads(body)["message"], body


ZONE_SPELLINGS = [
    ("europe/berlin",
     '[["2026-03-26T00:00:00+01:00",1491.625],["2026-03-27T00:00:00+01:00",1511.625],'
     '["2026-03-28T00:00:00+01:00",1528.25],["2026-03-29T00:00:00+01:00",1544.375],'
     '["2026-03-30T00:00:00+02:00",1561.75],["2026-03-31T00:00:00+02:00",1581.75],'
     '["2026-04-01T00:00:00+02:00",1600.5]]'),
    ("+01:00",
     '[["2026-03-26T00:00:00+01:00",1491.625],["2026-03-27T00:00:00+01:00",1511.625],'
     '["2026-03-28T00:00:00+01:00",1528.25],["2026-03-29T00:00:00+01:00",1544.375],'
     '["2026-03-30T00:00:00+01:00",1562.5],["2026-03-31T00:00:00+01:00",1582.625]]'),
]


@pytest.mark.parametrize("zone, want", ZONE_SPELLINGS, ids=["lower-case", "offset"])
def test_zone_spellings_php_takes_are_answered(served, zone, want):
    """PHP's DateTimeZone takes IANA names in any case and UTC offsets; a fixed offset has no
    DST (the days stay on +01:00 midnights)."""
    server, data, ids = served
    status, body = server.get("feed/data.json", id=ids[("plug-y", "energy")],
                              **dict(BEIRUT_DAYS, timezone=zone))
    assert (status, body) == (200, want)


def test_a_zone_is_only_read_where_emoncms_reads_it(served):
    """emoncms makes a DateTimeZone only for calendar intervals, string times and excel or
    iso8601 times: an unknown zone does not matter elsewhere, and is a 400 there."""
    server, data, ids = served
    fid = ids[("plug-a", "energy")]
    query = dict(start=1774681200, end=1774688400, interval=3600, timezone="Mars/Olympus")
    assert server.get("feed/data.json", id=fid, timeformat="unix", **query) == (200, (
        "[[1774681200,19.218000411987305],[1774684800,19.573999404907227],"
        "[1774688400,19.94700050354004]]"))
    status, body = server.get("feed/data.json", id=fid, timeformat="iso8601", **query)
    assert status == 400 and "is not a time zone" in json.loads(body)["message"], body


# -- emoncms's own PHP on the same files --------------------------------------------------------

HARNESS = r"""<?php
// Runs emoncms's feed model and PHPFina engine (from the source tree given) on a PHPFina
// directory; emoncms's Redis cache is stood in for by an array (it only caches feed rows).
define('EMONCMS_EXEC', 1);
chdir($argv[1]);
require "Lib/enum.php";
class EmonLogger { function __construct($f) {} function info($m) {} function warn($m) {}
                   function error($m) {} }
class ArrayRedis {
    public $h = array();
    function exists($k) { return isset($this->h[$k]); }
    function hget($k, $f) { return isset($this->h[$k][$f]) ? $this->h[$k][$f] : false; }
    function hExists($k, $f) { return isset($this->h[$k][$f]); }
    function hmget($k, $fs) { $o = array(); foreach ($fs as $f) $o[$f] = $this->hget($k, $f); return $o; }
    function hMset($k, $a) { foreach ($a as $f => $v) $this->h[$k][$f] = $v; return true; }
}
require "Modules/feed/feed_model.php";
$redis = new ArrayRedis();
foreach (json_decode($argv[3]) as $id) $redis->h["feed:$id"] = array('id' => $id, 'engine' => 5);
$feed = new Feed(null, $redis, array('max_datapoints' => 20000, 'redisbuffer' => array('enabled' => false),
                                     'phpfina' => array('datadir' => $argv[2] . "/")));
while (($line = fgets(STDIN)) !== false) {
    $q = json_decode($line, true);
    $id = $q['id']; unset($q['id']);
    $g = function ($k, $d) use ($q) { return isset($q[$k]) ? (string) $q[$k] : $d; };
    $interval = $g('interval', 0);
    if (isset($q['mode'])) $interval = $q['mode'];
    $r = $feed->get_data($id, $g('start', null), $g('end', null), $interval, $g('average', 0),
                         $g('timezone', 'Europe/Berlin'), $g('timeformat', 'unixms'), 0,
                         $g('skipmissing', 0), $g('limitinterval', 0), $g('delta', 0), $g('dp', -1));
    print json_encode($r) . "\n";
}
"""


def emoncms_source(tmp_path):
    src = os.environ.get("WATTLOG_EMONCMS_SRC")
    if not shutil.which("php"):
        pytest.skip("php is not installed (tools/setup installs php-cli)")
    if not src:
        pytest.skip("WATTLOG_EMONCMS_SRC is not set: point it at an emoncms checkout (or its "
                    "git directory) to compare with emoncms's own PHPFina.php")
    if os.path.exists(os.path.join(src, "Modules", "feed", "engine", "PHPFina.php")):
        return src
    out = tmp_path / "emoncms"
    out.mkdir()
    tar = subprocess.run(["git", "--git-dir", src, "archive", "HEAD", "Lib/enum.php",
                          "Modules/feed"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=tar, check=True)
    return str(out)


PHP_CASES = [q for q, _ in CASES] + [
    dict(start=T0, end=T0 + 86400 * 5, interval="daily", delta=1),
    dict(start=T0, end=T0 + 86400 * 5, interval="daily", delta=1, dp=2),
    dict(start=S, end=S + 86400, interval=900, delta=1, timeformat="notime", dp=1),
    dict(start=S, end=S + 86400 * 3, interval=1800, average=1, dp=3),
    dict(start=S, end=S + 3600, interval=10, dp=0),
    dict(start=S, end=S + 86400 * 3, interval=1800, average=1, dp="x"),
    dict(start=T0, end=T0 + 86400 * 20, interval="weekly", delta=1, timeformat="iso8601"),
    dict(start=T0 - 86400 * 40, end=T0 + 86400 * 9, interval="monthly", delta=1),
    dict(start=T0 - 86400 * 400, end=T0 + 86400 * 9, interval="annual", average=1),
    dict(start=S, end=S + 600, interval="original"),
    dict(start=T0 - 7200 + 3, end=T0 + 7200, interval=45, average=1),
    dict(start=S, end=S + 86400, interval=7, limitinterval=1),
    dict(start=S, end=S + 86400 * 2, interval=3600, average=1, dp=-2),
    dict(start=S, end=S + 86400, interval=3600, average=1, skipmissing=1, timeformat="excel",
         timezone="UTC"),
    dict(start=T0 + 6 * 86400, end=T0 + 9 * 86400, interval=600, average=1, skipmissing=1),
    dict(start=S, end=S + 50, interval=0),
    dict(start=S, end=S + 86400 * 400, interval=60),
    dict(start=S, end=S + 60, interval=10, timeformat="xml"),
    dict(start=S + 60, end=S),
    dict(start=S * 1000 + 999, end=S * 1000 + 999 + 3600 * 1000, interval=60, average=1),
] + [q for q, _ in MIDNIGHT_GAP] + [dict(BEIRUT_DAYS, timezone=z) for z, _ in ZONE_SPELLINGS] + [
    dict(start="2026-03-28T08:00-05:00", end="2026-03-28T10:00Z", interval=3600),
    dict(start="2026-03-28", end="2026-03-30", interval="daily", timeformat="unix"),
    dict(start="now-24h", end="now"),
    dict(start="-24h", end="now"),
    dict(start=1774681200, end=1774688400, interval=3600, timezone="Mars/Olympus"),
    # the year through DST changes at midnight, and a start on a day whose midnight is twice
    dict(start=YEAR0, end=YEAR0 + 364 * 86400, interval="daily", delta=1, timezone="Asia/Beirut"),
    dict(start=YEAR0, end=YEAR0 + 364 * 86400, interval="weekly", average=1,
         timezone="America/Havana", timeformat="iso8601"),
    dict(start=YEAR0, end=YEAR0 + 364 * 86400, interval="monthly", delta=1,
         timezone="America/Santiago", timeformat="excel"),
    dict(start=1793545200, end=1793545200 + 5 * 86400, interval="daily", timezone="America/Havana",
         timeformat="iso8601"),
    dict(start=1792924200, end=1792924200 + 20 * 86400, interval="daily", average=1,
         timezone="Atlantic/Azores", timeformat="iso8601"),
]


def test_data_json_is_byte_for_byte_emoncms_own_php(served, tmp_path):
    """emoncms's feed_model.php and PHPFina.php, run by php-cli on the same files, print the
    same bytes as wattlog's feed/data.json for every case (delta, dp, calendar intervals in
    Europe/Berlin over the DST change, bad intervals and ranges included)."""
    src = emoncms_source(tmp_path)
    server, data, ids = served
    fids = sorted(ids.values())
    script = tmp_path / "harness.php"
    script.write_text(HARNESS)
    lines = []
    for fid in fids:
        for q in PHP_CASES:
            lines.append(dict(q, id=fid))
    out = subprocess.run(["php", "-d", "error_reporting=0", str(script), src,
                          str(data / "phpfina"), json.dumps(fids)],
                         input="".join(json.dumps(q) + "\n" for q in lines),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    answers = out.stdout.splitlines()
    assert len(answers) == len(lines)
    differ = []
    for q, want in zip(lines, answers):
        fid = q.pop("id")
        status, body = server.get("feed/data.json", id=fid, **q)
        if body != want:
            differ.append((fid, q, first_difference(body, want)))
    assert not differ, differ[:3]


def test_number_spelling_is_php_json_encode(tmp_path):
    """php_float_text spells floats as PHP's json_encode does, checked against php itself."""
    if not shutil.which("php"):
        pytest.skip("php is not installed (tools/setup installs php-cli)")
    rnd = np.random.default_rng(5)
    values = [10.0, 0.1, 1e-5, 0.0001, 1.5e17, 1e16, 1e17, 123456789012345678.0, -0.0, 1 / 3,
              2.5e-5, -7.25, 5e-324, 1.7976931348623157e308]
    values += [float(v) for v in rnd.normal(0, 1, 200).astype(np.float32)]
    values += [float(v) for v in (10.0 ** rnd.uniform(-9, 20, 200)) * rnd.choice([-1, 1], 200)]
    out = subprocess.run(["php", "-r", "foreach (json_decode(file_get_contents('php://stdin')) "
                          "as $h) print json_encode(unpack('E', hex2bin($h))[1]) . \"\\n\";"],
                         input=json.dumps([struct.pack(">d", v).hex() for v in values]),
                         capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.splitlines() == [php_float_text(v) for v in values]
