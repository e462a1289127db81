"""test_store_interface.py - the storage interface (store/__init__.py), tested through its
calls only, on every engine: what a reading, a feed's grid, "committed", "pending" and a series
answer are, as every reader (the HTTP side, emoncms's API, energy, metrics, the CLI) relies on
them. An engine is a fixture param: the data is written through the collector's write path
(take, commit) and read back as the engine gives it. A new engine (PostgreSQL) adds a param
and must pass the same suite.

Engines here:
  phpfina-collector  the collector's Store: two plugs, 60 slots committed, 20 more pending
  phpfina-reader     the same data directory read from disk by a Reader of its own, after the
                     collector stopped (what `wattlog feeds/export/energy/nodes` see): the
                     pending readings were never committed, so they are not there
  postgres-collector, postgres-reader   the same on PostgreSQL (store/postgres.py), each test
                     in a database of its own on one private server (tools/lib/pgserver.py)
Summaries are brought up to date after the first commit, as the collector's loop does.
"""

import math

import numpy as np
import pytest

from batches import T0, batch
from wattlog.complaints import Complaints
from wattlog.store import open_reader
from wattlog.store.files import Store

COMMITTED, PENDING = 60, 20


def records(node_base, first, n):
    """(t, W, Wh, V, A) per slot; slot 7 has no power reading (None: missing)."""
    return [(T0 + 10 * (first + i), None if first + i == 7 else node_base + first + i,
             1000 + first + i, 230.0, 0.5) for i in range(n)]


def write(store):
    store.recover({})
    for node, base in (("plug-a", 100), ("plug-b", 2000)):
        store.take("wattlog/%s/readings" % node, batch(records(base, 0, COMMITTED)))
    store.commit()
    store.flush_summaries()
    for node, base in (("plug-a", 100), ("plug-b", 2000)):
        store.take("wattlog/%s/readings" % node, batch(records(base, COMMITTED, PENDING),
                                                       seq=COMMITTED))
    return store


@pytest.fixture(params=["phpfina-collector", "phpfina-reader", "postgres-collector",
                        "postgres-reader"])
def engine(request, tmp_path):
    """(the store's interface, how many slots it holds past the committed ones)."""
    if request.param.startswith("phpfina"):
        store = write(Store(str(tmp_path / "data"), Complaints()))
        reader = lambda: open_reader(str(tmp_path / "data"))  # noqa: E731
    else:
        from wattlog.store.postgres import PgReader, PgStore
        dsn, password = request.getfixturevalue("pg_database")
        store = write(PgStore(dsn, password, Complaints()))
        reader = lambda: PgReader(dsn, password)  # noqa: E731
    if request.param.endswith("collector"):
        yield store, PENDING
        store.close()
    else:
        store.close()  # a stop without its last commit: what was pending was never written
        yield reader(), 0


def power(node, slot):
    """What plug `node` measured in `slot` (None: nothing)."""
    return None if slot == 7 else (100 if node == "plug-a" else 2000) + slot


def test_entries_and_lookup_name_each_feed_once(engine):
    store, _ = engine
    entries = store.entries()
    assert sorted((e["node"], e["channel"], e["unit"], e["interval"]) for e in entries) == \
        sorted((n, c, u, 10) for n in ("plug-a", "plug-b") for c, u in
               (("power", "W"), ("voltage", "V"), ("current", "A"), ("energy", "kWh")))
    assert len({e["id"] for e in entries}) == len(entries)
    for e in entries:
        assert store.lookup("%s/%s" % (e["node"], e["channel"])) == e
        assert store.lookup(str(e["id"])) == e
    assert store.lookup("nobody/power") is None and store.lookup("99999") is None
    assert store.plug_order() == ["plug-a", "plug-b"]  # the order their data came


def test_a_feed_is_a_fixed_grid_of_committed_slots(engine):
    """start on the interval's grid; time(k) and slot(t) inverse; first_at(t) the first slot at
    or after t; npoints and end() what is committed; read() NaN where nothing is stored."""
    store, _ = engine
    entry = store.lookup("plug-a/power")
    feed = store.feed(entry)
    assert feed.interval == 10 and feed.start % 10 == 0 and feed.start == T0
    assert feed.npoints() == COMMITTED and feed.end() == T0 + 10 * COMMITTED
    for k in (0, 1, 59, 100):
        assert feed.slot(feed.time(k)) == k and feed.slot(feed.time(k) + 9) == k
    assert (feed.first_at(T0), feed.first_at(T0 + 1), feed.first_at(T0 - 100)) == (0, 1, 0)
    values = feed.read(0, COMMITTED + 5)
    assert len(values) == COMMITTED + 5
    for k, v in enumerate(values):
        want = power("plug-a", k) if k < COMMITTED else None
        assert (math.isnan(v) if want is None else v == np.float32(want)), (k, v)
    assert feed.last_value() == (COMMITTED - 1, float(np.float32(power("plug-a",
                                                                     COMMITTED - 1))))


def test_read_lays_the_pending_readings_over_the_committed_ones(engine):
    store, pending = engine
    entry = store.lookup("plug-b/power")
    feed = store.feed(entry)
    values = store.read(entry, feed, COMMITTED - 2, COMMITTED + PENDING + 2)
    for i, v in enumerate(values):
        k = COMMITTED - 2 + i
        want = power("plug-b", k) if k < COMMITTED + pending else None
        assert (math.isnan(v) if want is None else v == np.float32(want)), (k, v)
    assert (store.pending("plug-b", "power") is None) == (pending == 0)


def test_feeds_say_what_each_holds_pending_included(engine):
    store, pending = engine
    rows = {(r["node"], r["channel"]): r for r in store.feeds()}
    row = rows[("plug-a", "power")]
    assert (row["start"], row["points"], row["committed_until"]) == \
        (T0, COMMITTED, T0 + 10 * COMMITTED)
    last = COMMITTED + pending - 1
    assert row["end"] == T0 + 10 * (last + 1)
    assert (row["last_time"], row["last_value"]) == (T0 + 10 * last, power("plug-a", last))


def test_a_series_is_raw_slots_or_buckets_ending_where_the_data_does(engine):
    """Few slots: raw, one per slot, None where missing. More slots than points: buckets of
    mean, min, max and count of the slots in them. Either way it ends where the data does,
    and committed_until says where the committed part ends."""
    store, pending = engine
    entry = store.lookup("plug-a/power")
    feed = store.feed(entry)
    stop = COMMITTED + pending
    raw = store.series(entry, feed, T0, T0 + 10 * (stop + 50), 1000)
    assert raw["raw"] and raw["bucket_s"] == 10 and raw["committed_until"] == T0 + 600
    assert raw["time"] == [T0 + 10 * k for k in range(stop)]
    assert raw["mean"] == [None if power("plug-a", k) is None else
                           float(np.float32(power("plug-a", k))) for k in range(stop)]
    buckets = store.series(entry, feed, T0, T0 + 10 * stop, 4)
    size = -(-stop // 4)
    assert not buckets["raw"] and buckets["bucket_s"] == 10 * size
    for b, t in enumerate(buckets["time"]):
        slots = [k for k in range(b * size, min((b + 1) * size, stop))
                 if power("plug-a", k) is not None]
        assert t == T0 + 10 * b * size and buckets["count"][b] == len(slots)
        assert buckets["min"][b] == power("plug-a", slots[0])
        assert buckets["max"][b] == power("plug-a", slots[-1])
        assert buckets["mean"][b] == pytest.approx(np.mean([power("plug-a", k)
                                                            for k in slots]), rel=1e-6)
    empty = store.series(entry, feed, T0 + 10 * (stop + 10), T0 + 10 * (stop + 20), 100)
    assert empty["time"] == [] and empty["node"] == "plug-a" and empty["unit"] == "W"


def test_nodes_and_plug_say_what_each_plug_was_acknowledged(engine):
    store, _ = engine
    nodes = store.nodes()
    assert sorted(nodes) == ["plug-a", "plug-b"]
    for node, st in nodes.items():
        assert st == store.plug(node)
        assert (st["node"], st["boot"], st["acked_seq"], st["lost"], st["ring_drops"]) == \
            (node, 1, COMMITTED, 0, 0)
    assert store.plug("nobody") is None


def test_status_is_plain_data(engine):
    store, _ = engine
    st = store.status()
    assert st["data_dir"] and isinstance(st["last_commit"], int)
    assert max(st.get("disk_free_bytes") or 0, st.get("database_bytes") or 0) > 0  # its room


def test_both_engines_answer_the_same_series_from_their_summaries(tmp_path, pg_database):
    """Two days of readings (17,280 slots, a few missing) committed into each engine, their
    summaries brought up to date: every zoom, from raw slots to buckets of several summary
    levels, gives the same answer on the files and on PostgreSQL (float32 precision)."""
    from wattlog.store.postgres import PgStore
    slots = 2 * 8640
    rng = np.random.default_rng(7)
    watts = rng.uniform(0, 2500, slots)
    stores = [Store(str(tmp_path / "data"), Complaints()),
              PgStore(*pg_database, Complaints())]
    for store in stores:
        store.recover({})
        for first in range(0, slots, 64):
            store.take("wattlog/p/readings", batch(
                [(T0 + 10 * k, None if k % 997 == 5 else float(watts[k]), 1000 + k, 230.0, 0.5)
                 for k in range(first, min(first + 64, slots))], seq=first))
        store.commit()
        store.flush_summaries()
    answers = []
    for store in stores:
        entry = store.lookup("p/power")
        feed = store.feed(entry)
        answers.append([store.series(entry, feed, T0 + 130, T0 + 10 * slots, points)
                        for points in (20000, 500, 60, 7)])
    for files, pg in zip(*answers):
        assert (files["bucket_s"], files["time"], files["count"]) == \
            (pg["bucket_s"], pg["time"], pg["count"])
        for key in ("mean", "min", "max"):
            assert np.allclose(np.array(files[key], dtype=float), np.array(pg[key], dtype=float),
                               rtol=1e-6, equal_nan=True), key
    assert {a["bucket_s"] for a in answers[0]} == {10, 350, 2560, 20480}  # raw, 35 slots,
    # 4 x level 64, 4 x level 512: the summaries answer the last two
    for store in stores:
        store.close()


def test_postgresql_takes_an_earlier_batch_that_arrives_late(pg_database):
    """A cluster delivers each partition in order, but a handover can bring an earlier batch
    after a later one: PostgreSQL stores it (the files' feeds cannot grow backwards and drop
    it, counted), the grid's first slot moves back, and the summaries follow."""
    from wattlog.store.postgres import PgStore
    store = PgStore(*pg_database, Complaints())
    store.recover({})
    store.take("wattlog/p/readings", batch(records(100, 200, 100), seq=200))
    store.commit()
    store.flush_summaries()
    store.take("wattlog/p/readings", batch(records(100, 0, 200), seq=0))
    store.commit()
    store.flush_summaries()
    entry = store.lookup("p/power")
    feed = store.feed(entry)
    assert feed.start == T0 and feed.npoints() == 300
    assert list(store.read(entry, feed, 195, 205)) == [np.float32(power("plug-a", k))
                                                       for k in range(195, 205)]
    buckets = store.series(entry, feed, T0, T0 + 3000, 3)
    size = buckets["bucket_s"] // 10
    values = store.read(entry, feed, 0, 300)
    assert not buckets["raw"] and buckets["count"] == [
        int(np.count_nonzero(~np.isnan(values[k:k + size]))) for k in range(0, 300, size)]
    assert buckets["count"][0] == size - 1  # slot 7 has no power reading
    store.close()



@pytest.mark.parametrize("engine_name", ["phpfina", "postgres"])
def test_a_batch_delivered_again_changes_nothing_and_one_resent_longer_adds_its_new_slots(
        engine_name, tmp_path, request):
    """Idempotent on every engine: a batch delivered twice (a redelivery after a collector's
    death, a resend after a reconnect) changes no slot and no ack; a batch resent after a
    reconnect with more records than the first time (same boot, same first seq: a key of
    node, boot and seq alone would skip it for ever) stores its new slots and is acked to
    its end."""
    if engine_name == "phpfina":
        store = Store(str(tmp_path / "data"), Complaints())
    else:
        from wattlog.store.postgres import PgStore
        store = PgStore(*request.getfixturevalue("pg_database"), Complaints())
    store.recover({})

    def commit(payload):
        store.take("wattlog/p/readings", payload)
        done = store.commit()
        return {node: seq for node, seq, _ in done.acks} if done else {}

    def held():
        entry = store.lookup("p/power")
        feed = store.feed(entry)
        return feed.start, np.asarray(store.read(entry, feed, 0, feed.npoints()))

    def same(a, b):
        return a[0] == b[0] and np.array_equal(a[1], b[1], equal_nan=True)

    assert commit(batch(records(100, 0, 30))) == {"p": 30}
    first = held()
    assert commit(batch(records(100, 0, 30))) in ({}, {"p": 30})
    assert same(held(), first)
    assert commit(batch(records(100, 0, 45))) == {"p": 45}
    longer = held()
    assert same((longer[0], longer[1][:30]), first) and longer[0] == T0 and \
        list(longer[1][30:]) == [np.float32(100 + k) for k in range(30, 45)]
    assert commit(batch(records(100, 20, 25), seq=20)) in ({}, {"p": 45})
    assert same(held(), longer)
    store.close()


def test_a_feed_being_made_is_its_pending_readings_not_an_error(tmp_path):
    """A commit adds a new plug's feeds to the registry, then writes their files: in between,
    the HTTP side's /api/feeds saw an entry without files and answered "error" with no
    last_time (test_pi_install hit it). The collector's store shows such a feed as what it
    holds: its pending readings. (The window is made here by removing the files of a feed
    whose readings are pending.)"""
    store = write(Store(str(tmp_path / "data"), Complaints()))
    store.take("wattlog/plug-c/readings", batch(records(5000, 0, 3)))
    store.commit()
    store.take("wattlog/plug-c/readings", batch(records(5000, 3, 3), seq=3))
    entry = store.lookup("plug-c/power")
    for ext in ("meta", "dat"):
        (tmp_path / "data" / "phpfina" / ("%d.%s" % (entry["id"], ext))).unlink()
    rows = {(r["node"], r["channel"]): r for r in store.feeds()}
    row = rows[("plug-c", "power")]
    assert "error" not in row, row
    assert (row["last_time"], row["last_value"]) == (T0 + 10 * 5, 5005), row
    assert row["end"] == T0 + 10 * 6 and row["points"] == 0, row
    store.close()


def test_committed_says_what_is_committed_and_nothing_pending(engine):
    """committed(): each feed's committed slots (its grid's npoints), never the pending ones,
    and a generation that a commit changes: what a follower of committed data reads first."""
    store, pending = engine
    generation, lengths = store.committed()
    assert lengths == {e["id"]: COMMITTED for e in store.entries()}
    for e in store.entries():
        assert store.feed(e).npoints() == lengths[e["id"]]
    if pending:  # the collector's: commit what it holds, and the generation moves on
        store.commit()
        later, lengths = store.committed()
        assert later != generation
        assert lengths == {e["id"]: COMMITTED + PENDING for e in store.entries()}
