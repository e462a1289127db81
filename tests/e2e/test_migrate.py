"""test_migrate.py - `wattlog migrate`, run as a user runs it: a single Pi's data directory
(written by the collector's own store, or by tools/lib/history.py as it commits) copied into
the cluster's PostgreSQL store (store/migrate.py), a private PostgreSQL a test (tools/lib/
pgserver.py, conftest.py's pg fixture). Compared through the storage interface on both
engines: every slot of every channel the very float32, the plugs' state, the same series at
every zoom, the same energy total for the clock answer; interrupted (Ctrl-C, SIGKILL) and run
again it goes on where it stopped, and ends the same; and each refusal is one sentence that
names what is wrong.
"""

import os
import re
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

from broker import free_port
from helpers import REPO, aligned_past
from history import write_history
from rig import wait_until

sys.path.insert(0, str(REPO / "tests" / "host"))

from batches import batch  # noqa: E402
from wattlog.complaints import Complaints  # noqa: E402
from wattlog.store import datalock, open_reader  # noqa: E402
from wattlog.store.files import Store  # noqa: E402


def db_reader(dsn, pg):
    from wattlog.store.postgres import PgReader
    return PgReader(dsn, pg.password)


def query(dsn, pg, sql, args=()):
    import psycopg
    with psycopg.connect(dsn, password=pg.password, autocommit=True) as c:
        return c.execute(sql, args).fetchall()


def migrate(data, dsn, pg, *more):
    """`wattlog migrate` as a user types it: the password from its file."""
    return subprocess.run([sys.executable, "-m", "wattlog.cli", "migrate", "--data", str(data),
                           "--to", dsn, "--store-password-file", pg.password_file] + list(more),
                          capture_output=True, text=True, timeout=600, cwd=str(REPO))


def records(start, interval, n, base, gone=range(0)):
    """(t, W, Wh, V, A) for n slots; None where the meter said nothing: power every 97th slot,
    voltage every 89th, every channel of slot 50; no record at all for the slots `gone` (the
    plug was away)."""
    out = []
    for k in range(n):
        if k in gone:
            continue
        if k == 50:
            out.append((start + interval * k, None, None, None, None))
            continue
        power = None if k % 97 == 5 else base + (k % 500) * 0.3
        volts = None if k % 89 == 3 else 229.0 + (k % 13) * 0.07
        out.append((start + interval * k, power, 1000 + 7 * k, volts, 0.001 * (k % 900)))
    return out


def write_pi(data, plugs):
    """plugs: {node: (interval, [(boot, records)])} through the collector's store: batches of
    64 records (seq from 0 each boot), committed, summaries flushed, a clean stop."""
    store = Store(str(data), Complaints())
    store.recover({})
    for node, (interval, boots) in plugs.items():
        for boot, recs in boots:
            for i in range(0, len(recs), 64):
                store.take("wattlog/%s/readings" % node, batch(recs[i:i + 64],
                                                                interval=interval, boot=boot,
                                                                seq=i))
            store.commit()
    store.flush_summaries()
    store.close(clean=True)


def a_pi(data, start):
    """Three plugs: plug-a rebooted half-way and away for 200 slots, plug-b starting later,
    plug-c every minute."""
    a = records(start, 10, 3000, 100.0, gone=range(1000, 1200))
    write_pi(data, {"plug-a": (10, [(7, a[:1700]), (8, a[1700:])]),
                    "plug-b": (10, [(3, records(start + 5000, 10, 2000, 2000.0))]),
                    "plug-c": (60, [(5, records(start, 60, 600, 40.0))])})


def assert_same(data, dsn, pg, ids_kept=True):
    """Every slot of every channel of the files' plugs the same float32 (NaN where none) in the
    database, through the interface of each engine; their state the same."""
    files, db = open_reader(str(data)), db_reader(dsn, pg)
    entries = files.entries()
    nodes = files.nodes()
    assert len([d for d in db.entries() if d["node"] in nodes]) == len(entries)
    for e in entries:
        d = db.lookup("%s/%s" % (e["node"], e["channel"]))
        assert d["interval"] == e["interval"] and (d["id"] == e["id"] or not ids_kept), (d, e)
        ff, fd = files.feed(e), db.feed(d)
        want = files.read(e, ff, 0, ff.npoints())
        got = db.read(d, fd, 0, fd.npoints())
        k0 = fd.slot(ff.start)  # the plug's grid starts at its first slot of any channel
        assert k0 >= 0 and np.isnan(got[:k0]).all() and np.isnan(got[k0 + len(want):]).all()
        got = got[k0:k0 + len(want)]
        assert np.array_equal(np.isnan(got), np.isnan(want)), e
        assert np.array_equal(got[~np.isnan(got)].view("<u4"), want[~np.isnan(want)].view("<u4")), e
    assert {node: st for node, st in db.nodes().items() if node in nodes} == nodes
    return files, db


def slots_with_readings(data):
    """How many (plug, slot) pairs of the files hold a reading in any channel."""
    files, n = open_reader(str(data)), 0
    for node in files.plug_order():
        held = set()
        for e in files.entries():
            if e["node"] == node:
                f = files.feed(e)
                held.update(f.start // f.interval + np.flatnonzero(~np.isnan(f.read(
                    0, f.npoints()))))
        n += len(held)
    return n


def test_every_slot_of_every_channel_is_copied_exactly(tmp_path, pg):
    """Three plugs written by the collector's store (missing readings in one channel, a slot
    with none, a plug away for 200 slots, a reboot, another plug every minute): after `wattlog
    migrate` the database holds every slot with the very float32 of the files, no row for a
    slot without any reading, NULL for a channel without one, the feed ids and the plugs'
    state (acked seq, boots) as the files have them; both engines answer the same series at
    every zoom and the same energy total for the plugs' clock answer; summaries brought up;
    a run again finds nothing to copy."""
    from wattlog.store.postgres import PgStore
    data, dsn, start = tmp_path / "data", pg.dsn, aligned_past(3 * 86400, 60)
    a_pi(data, start)
    done = migrate(data, dsn, pg)
    assert done.returncode == 0, done.stderr
    assert "every feed id kept" in done.stdout and "Traceback" not in done.stderr
    for node in ("plug-a", "plug-b", "plug-c"):
        assert "migrate: %s copied" % node in done.stderr
    files, db = assert_same(data, dsn, pg)
    assert files.nodes()["plug-a"]["boots"] == 2 and db.nodes()["plug-a"]["acked_seq"] == 1100
    assert query(dsn, pg, "SELECT count(*) FROM wl_readings")[0][0] == slots_with_readings(data)
    b_first = (start + 5000) // 10
    assert query(dsn, pg, "SELECT count(*) FROM wl_readings r JOIN wl_nodes n ON n.id = "
                 "r.node_id WHERE n.node = 'plug-b' AND slot = %s", (b_first + 50,)) == [(0,)]
    assert query(dsn, pg, "SELECT power, voltage IS NOT NULL, energy IS NOT NULL FROM "
                 "wl_readings r JOIN wl_nodes n ON n.id = r.node_id WHERE n.node = 'plug-b' AND "
                 "slot = %s", (b_first + 5,)) == [(None, True, True)]
    assert query(dsn, pg, "SELECT n.node, u.upto = n.top - n.first + 1 FROM wl_nodes n JOIN "
                 "wl_summary_upto u ON u.node_id = n.id ORDER BY 1") == \
        [("plug-a", True), ("plug-b", True), ("plug-c", True)]
    for name in ("plug-a/power", "plug-b/voltage", "plug-c/energy"):
        e, d = files.lookup(name), db.lookup(name)
        ff, fd = files.feed(e), db.feed(d)
        for points in (100000, 400, 60, 7):
            x = files.series(e, ff, ff.start, ff.end(), points)
            y = db.series(d, fd, ff.start, ff.end(), points)
            assert (x["bucket_s"], x["time"], x["count"]) == (y["bucket_s"], y["time"],
                                                              y["count"]), (name, points)
            for key in ("mean", "min", "max"):
                if x["raw"]:
                    assert x[key] == y[key], (name, key)
                assert np.allclose(np.array(x[key], dtype=float), np.array(y[key], dtype=float),
                                   rtol=1e-6, equal_nan=True), (name, points, key)
    pi = Store(str(data), Complaints())
    cluster = PgStore(dsn, pg.password, Complaints())
    try:
        for node in ("plug-a", "plug-b", "plug-c"):
            assert cluster.last_energy(node) == pi.last_energy(node) != {}
    finally:
        pi.close()
        cluster.close()
    again = migrate(data, dsn, pg)
    assert again.returncode == 0 and "nothing to copy" in again.stdout, again.stdout


def _as_at_a_terminal():
    """The child's Ctrl-C as a shell gives it: pytest-xdist's workers ignore SIGINT, and a
    Python started with SIGINT ignored keeps ignoring it (no KeyboardInterrupt); niced, so
    that on a busy machine the test reacts to its progress before the copy goes on."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.nice(19)


def interrupt_at(data, dsn, pg, percent, sig):
    """A run of `wattlog migrate` interrupted by `sig` once its progress says `percent`; (all
    it said on stderr, its exit status). The line is acted on by the thread that reads it
    (a whole run takes about 2 s here)."""
    proc = subprocess.Popen([sys.executable, "-m", "wattlog.cli", "migrate", "--data", str(data),
                             "--to", dsn, "--store-password-file", pg.password_file],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            cwd=str(REPO), preexec_fn=_as_at_a_terminal)
    said = []

    def read():
        sent = False
        for line in proc.stderr:
            said.append(line)
            m = re.match(r"migrate: (\d+)%", line)
            if not sent and m and int(m.group(1)) >= percent:
                proc.send_signal(sig)
                sent = True
    reader = threading.Thread(target=read)
    reader.start()
    try:
        status = proc.wait(180)
    finally:
        proc.kill()
        reader.join(60)
    return "".join(said), status


def copied(dsn, pg):
    return query(dsn, pg, "SELECT count(*) FROM wl_readings")[0][0]


@pytest.mark.realtime
def test_an_interrupted_migration_goes_on_where_it_stopped(tmp_path, pg):
    """Eight plugs x 20 days of 10 s history (gaps, missing readings) as it commits: a run
    stopped by Ctrl-C once its progress says 20% (it says so in one sentence, no traceback),
    a run again killed (SIGKILL) at its 30%, a third run to the end: the database then holds
    exactly the files, and each run copied only what the ones before had not (nothing is
    copied twice, nothing started over). A kill at a moment: the process is stopped while
    it copies, so this runs against the wall clock."""
    data, dsn = tmp_path / "data", pg.dsn
    write_history(str(data), ["plug-%d" % i for i in range(8)], aligned_past(30 * 86400),
                  20 * 8640, gaps=True)
    total = slots_with_readings(data)
    said, status = interrupt_at(data, dsn, pg, 20, signal.SIGINT)
    assert status == 1 and "Traceback" not in said, said
    assert "interrupted: what was copied stands; run this again" in said
    first = copied(dsn, pg)
    assert "plug-0 copied" in said  # 20% of eight plugs: the first one whole
    said, status = interrupt_at(data, dsn, pg, 30, signal.SIGKILL)
    assert status == -signal.SIGKILL, said
    assert "plug-0" not in said and "copied" in said, said  # it went on with what was left
    second = copied(dsn, pg)
    assert 0 < first < second < total, (first, second, total)
    done = migrate(data, dsn, pg)
    assert done.returncode == 0, done.stderr
    assert "plug-0" not in done.stderr and "plug-7 copied" in done.stderr, done.stderr
    m = re.search(r"copied (\d+) readings", done.stdout)
    assert m and int(m.group(1)) == total - second, (done.stdout, total, second)
    assert_same(data, dsn, pg)
    assert copied(dsn, pg) == total
    assert "nothing to copy" in migrate(data, dsn, pg).stdout


def test_feed_ids_are_kept_where_free_and_said_where_not(tmp_path, pg):
    """A database whose collector stored plug-z first (its feeds have ids 1-4): the files'
    plug-b keeps its ids 5-8, plug-a's 1-4 are taken, so it gets new ones and the run says
    which, for the emoncms API's URLs; the database's own next feeds get ids after them."""
    from wattlog.store.postgres import PgStore
    data, dsn, start = tmp_path / "data", pg.dsn, aligned_past(86400)
    write_pi(data, {"plug-a": (10, [(1, records(start, 10, 300, 10.0))]),
                    "plug-b": (10, [(1, records(start, 10, 300, 20.0))])})
    cluster = PgStore(dsn, pg.password, Complaints())
    cluster.recover({})
    cluster.take("wattlog/plug-z/readings", batch(records(start, 10, 30, 5.0)))
    cluster.commit()
    done = migrate(data, dsn, pg)
    assert done.returncode == 0, done.stderr
    assert "every feed id kept" not in done.stdout
    db = db_reader(dsn, pg)
    moved = {e["channel"]: e["id"] for e in db.entries() if e["node"] == "plug-a"}
    assert sorted(moved.values()) == [9, 10, 11, 12]
    was = open_reader(str(data)).lookup("plug-a/power")["id"]
    assert "plug-a/power is feed %d in the database (%d in the files" % (moved["power"], was) \
        in done.stdout
    assert {e["id"] for e in db.entries() if e["node"] == "plug-b"} == {5, 6, 7, 8}
    assert_same(data, dsn, pg, ids_kept=False)
    cluster.take("wattlog/plug-n/readings", batch(records(start, 10, 30, 5.0)))
    cluster.commit()
    assert {e["id"] for e in db.entries() if e["node"] == "plug-n"} == {13, 14, 15, 16}
    cluster.close()


def test_a_plug_the_cluster_took_over_first_keeps_the_newer_state(tmp_path, pg):
    """plug-a moved to the cluster before its history did: the cluster stored its last 100
    slots again (the plug resent what the Pi had not acknowledged) and 200 more, with a later
    acked seq. The history fills in below without a conflict, the slots both hold are the same,
    and the plug's state is the cluster's (said in a note), so its acks do not go back. What
    the cluster's InfluxDB sink takes for "something new was committed" changed, so it sends
    the history too."""
    from wattlog.store.postgres import PgStore
    data, dsn, start = tmp_path / "data", pg.dsn, aligned_past(86400)
    recs = records(start, 10, 1300, 300.0)
    write_pi(data, {"plug-a": (10, [(4, recs[:1000])])})
    cluster = PgStore(dsn, pg.password, Complaints())
    cluster.recover({})
    for i in range(900, 1300, 50):
        cluster.take("wattlog/plug-a/readings", batch(recs[i:i + 50], boot=4, seq=i))
    cluster.commit()
    cluster.close()
    seen = db_reader(dsn, pg).committed()[0]
    done = migrate(data, dsn, pg)
    assert done.returncode == 0, done.stderr
    db = db_reader(dsn, pg)
    assert db.committed()[0] > seen
    assert db.nodes()["plug-a"]["acked_seq"] == 1300
    assert "plug-a: the database's state of it is newer" in done.stdout
    ids = (db.lookup("plug-a/power")["id"], open_reader(str(data)).lookup("plug-a/power")["id"])
    assert "plug-a/power is feed %d in the database (%d in the files: the database had the " \
        "plug already)" % ids in done.stdout
    e = db.lookup("plug-a/power")
    f = db.feed(e)
    want = np.array([np.nan if r[1] is None else r[1] for r in recs], dtype="<f4")
    got = db.read(e, f, 0, f.npoints())
    assert f.start == start and np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[~np.isnan(got)], want[~np.isnan(want)])


def test_the_config_says_where_from_and_where_to(tmp_path, pg):
    """On a provisioned Pi the config names the data directory, the database and the password
    file: `wattlog migrate` alone copies everything."""
    data, config = tmp_path / "data", tmp_path / "wattlog.toml"
    a_pi(data, aligned_past(86400, 60))
    config.write_text('data = "%s"\nstore = "%s"\nstore_password_file = "%s"\n'
                      % (data, pg.dsn, pg.password_file))
    done = subprocess.run([sys.executable, "-m", "wattlog.cli", "migrate", "--config",
                           str(config)], capture_output=True, text=True, timeout=600,
                          cwd=str(REPO))
    assert done.returncode == 0 and "copied" in done.stdout, done.stderr
    assert_same(data, pg.dsn, pg)


def refused(done, status, *words):
    """One line on stderr, naming what it must, no traceback, the exit status given."""
    said = done.stderr.strip()
    assert done.returncode == status, (done.returncode, said)
    assert len(said.splitlines()) == 1 and said.startswith("wattlog migrate: "), said
    for w in words:
        assert w in said, (w, said)
    return said


def test_refuses_what_is_not_a_wattlog_data_directory(tmp_path, pg):
    """No such directory, and an emoncms directory (PHPFina files, no feeds.json): exit 2."""
    dsn = pg.dsn
    refused(migrate(tmp_path / "nowhere", dsn, pg), 2, str(tmp_path / "nowhere"),
            "not a data directory")
    emoncms = tmp_path / "emoncms"
    (emoncms / "phpfina").mkdir(parents=True)
    (emoncms / "phpfina" / "1.meta").write_bytes(bytes(8) + (10).to_bytes(4, "little")
                                                 + (1700000000).to_bytes(4, "little"))
    (emoncms / "phpfina" / "1.dat").write_bytes(bytes(40))
    refused(migrate(emoncms, dsn, pg), 2, str(emoncms), "not a wattlog data directory")


def test_refuses_a_database_it_cannot_reach_naming_its_host_not_the_password(tmp_path, pg):
    """Nothing listens on the port: one sentence with the host and port, without the
    password; a password in the URL itself is refused before anything is tried."""
    data = tmp_path / "data"
    a_pi(data, aligned_past(86400, 60))
    port = free_port()
    said = refused(migrate(data, "postgresql://wattlog@127.0.0.1:%d/wattlog" % port, pg), 1,
                   "127.0.0.1", str(port))
    assert pg.password not in said
    said = refused(migrate(data, "postgresql://wattlog:hunter2secret@127.0.0.1/wattlog", pg), 2,
                   "password")
    assert "hunter2secret" not in said


def test_refuses_while_the_collector_writes_the_data_directory(tmp_path, pg, broker,
                                                               collectors):
    """The collector runs on the data directory (it holds its lock): refused, naming its PID;
    the database is left as it was."""
    data, dsn = tmp_path / "data", pg.dsn
    a_pi(data, aligned_past(86400, 60))
    c = collectors(broker.url, data, commit_interval=1)
    wait_until("the collector holds the data directory",
               lambda: datalock.holder(str(data)) == str(c.proc.pid))
    refused(migrate(data, dsn, pg), 1, "being written by a wattlog collector",
            "PID %d" % c.proc.pid)
    assert query(dsn, pg, "SELECT count(*) FROM pg_tables WHERE tablename = 'wl_readings'") \
        == [(0,)]


def test_refuses_other_readings_for_the_same_plug_and_slot(tmp_path, pg):
    """Another Pi's plug-a (other readings in the same slots) into a database that holds this
    one's: refused, naming the plug, the channel and the time; the database's readings of it
    are still this Pi's."""
    dsn, start = pg.dsn, aligned_past(86400, 60)
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    a_pi(mine, start)
    write_pi(theirs, {"plug-a": (10, [(1, records(start, 10, 400, 555.0))])})
    assert migrate(mine, dsn, pg).returncode == 0
    refused(migrate(theirs, dsn, pg), 1, "other readings for plug-a", "power at")
    assert_same(mine, dsn, pg)


def test_refuses_a_plug_stored_at_another_interval(tmp_path, pg):
    """The files keep plug-c every 10 s, the database every 60 s: refused before anything is
    copied (the other plug of the files is not in the database either)."""
    dsn, start = pg.dsn, aligned_past(86400, 60)
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    a_pi(mine, start)
    write_pi(theirs, {"plug-x": (10, [(1, records(start, 10, 100, 1.0))]),
                      "plug-c": (10, [(1, records(start, 10, 100, 1.0))])})
    assert migrate(mine, dsn, pg).returncode == 0
    before = copied(dsn, pg)
    refused(migrate(theirs, dsn, pg), 1, "plug-c", "every 60 s in the database",
            "every 10 s in the files")
    assert copied(dsn, pg) == before
    assert db_reader(dsn, pg).lookup("plug-x/power") is None
