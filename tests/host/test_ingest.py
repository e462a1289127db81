"""test_ingest.py - readings are decoded into units; every kind of bad input is counted and
said in words, and the good readings travelling with it are kept."""

import logging
import math

import pytest

from batches import T0, batch
from wattlog.complaints import Complaints
from wattlog.store.ingest import PLUG_RECORDS_MAX, RING_RECORDS_MAX, Ingest, feeds


@pytest.fixture
def ingest():
    return Ingest(Complaints(), lambda node: None, clock=lambda: T0 + 3600)


def test_a_batch_becomes_points_in_units(ingest):
    assert ingest.handle("wattlog/plug-1/readings",
                         batch([(T0, 1234.5, 2001, 230.12, 5.364), (T0 + 10, None, None, None, None)])) == 2
    def p(channel):
        return ingest.points("plug-1", channel)
    assert p("power")[T0] == 1234.5
    assert p("voltage")[T0] == pytest.approx(230.12)
    assert p("current")[T0] == pytest.approx(5.364)
    assert p("energy")[T0] == pytest.approx(2.001)
    assert all(math.isnan(p(c)[T0 + 10]) for c in ("power", "voltage", "current", "energy"))
    assert ingest.intervals["plug-1"] == 10 and ingest.oldest is not None


@pytest.mark.parametrize("topic", ["wattlog/Plug/readings", "wattlog/a b/readings",
                                   "wattlog/%s/readings" % ("x" * 33), "wattlog/a.b/readings",
                                   "readings", "wattlog//readings"])
def test_bad_node_ids_are_refused(ingest, topic, caplog):
    with caplog.at_level(logging.WARNING):
        assert ingest.handle(topic, batch([(T0, 1, 1, 230, 1)])) == 0
    assert ingest.complain.totals == {"bad-node": 1}
    assert "a node id is 1-32 characters" in caplog.text
    assert ingest.pending == {}


@pytest.mark.parametrize("payload, kind, words", [
    (b"", "truncated", "truncated: 0 bytes"),
    (b"garbage!" * 3, "version", "unknown format version 103"),
    (batch([(T0, 1, 1, 230, 1)])[:-3], "truncated", "truncated: header says 1 records"),
    (batch([(T0, 1, 1, 230, 1)]) + b"\0", "oversized", "oversized"),
    (b"\x09" + batch([(T0, 1, 1, 230, 1)])[1:], "version", "unknown format version 9"),
])
def test_malformed_batches_are_refused_in_words(ingest, payload, kind, words, caplog):
    with caplog.at_level(logging.WARNING):
        assert ingest.handle("wattlog/n/readings", payload) == 0
    assert ingest.complain.totals == {"batch-" + kind: 1}
    assert "ignored a batch from n: " in caplog.text and words in caplog.text


def test_bad_records_are_dropped_and_good_ones_kept(ingest, caplog):
    """One batch: a good reading, a misaligned one, one from the far future, one with an
    impossible power: the good one and the plausible channels are kept."""
    with caplog.at_level(logging.WARNING):
        kept = ingest.handle("wattlog/n/readings", batch([
            (T0, 100, 5, 230, 0.5), (T0 + 15, 100, 5, 230, 0.5),
            (T0 + 86400 * 30, 100, 5, 230, 0.5), (T0 + 20, 60000, 6, 231, 0.5)]))
    assert kept == 2
    assert ingest.complain.totals == {"misaligned": 1, "future": 1, "implausible": 1}
    power = ingest.points("n", "power")
    assert power[T0] == 100 and math.isnan(power[T0 + 20]) and len(power) == 2
    assert ingest.points("n", "voltage")[T0 + 20] == 231
    for words in ("not a multiple of its 10 s interval", "ahead of this computer's clock",
                  "no plug measures that"):
        assert words in caplog.text


def test_an_interval_change_is_stored_on_the_feeds_grid(caplog):
    ingest = Ingest(Complaints(), lambda node: 60, clock=lambda: T0 + 3600)
    with caplog.at_level(logging.WARNING):
        assert ingest.handle("wattlog/n/readings", batch([(T0 + 30, 5, 1, 230, 0.1)], interval=10)) == 1
    assert list(ingest.points("n", "power")) == [T0]  # T0 is on the 60 s grid
    assert "storing them on the feeds' grid" in caplog.text


def test_duplicates_are_idempotent(ingest):
    b = batch([(T0, 100, 5, 230, 0.5), (T0 + 10, 200, 6, 230, 0.9)])
    ingest.handle("wattlog/n/readings", b)
    ingest.handle("wattlog/n/readings", b)
    assert ingest.points("n", "power") == {T0: 100, T0 + 10: 200}


def test_restore_after_a_failed_commit_keeps_newer_points(ingest):
    ingest.handle("wattlog/n/readings", batch([(T0, 100, 5, 230, 0.5)]))
    pending, intervals = ingest.take()
    ingest.handle("wattlog/n/readings", batch([(T0, 111, 5, 230, 0.5), (T0 + 10, 5, 5, 230, 0.1)]))
    ingest.restore(pending, intervals)
    assert ingest.points("n", "power") == {T0: 111, T0 + 10: 5}


def test_a_reading_older_than_any_plug_could_hold_is_refused_and_counted(tmp_path, caplog):
    """One 56-byte batch from a new node, one record stamped 2020 and one now: the old one is
    refused (counted as too-old), so the node's feeds start now and the commit writes a few
    bytes, not 87 MB of NaN per channel (the old code made four 87 MB files)."""
    from wattlog.store.commit import Committer
    now = T0 + 3600
    ing = Ingest(Complaints(), lambda node: None, clock=lambda: now)
    with caplog.at_level(logging.WARNING):
        assert ing.handle("wattlog/new-1/readings",
                          batch([(1577836800, 5, 1, 230, 0.1), (now - 10, 6, 2, 230, 0.1)])) == 1
    assert ing.complain.totals == {"too-old": 1} and "2020-01-01" in caplog.text
    c = Committer(str(tmp_path), Complaints())
    pending, intervals = ing.take()
    assert c.commit(feeds(pending), intervals)[2] == 16  # four channels, one float each
    assert sum(p.stat().st_size for p in (tmp_path / "phpfina").glob("*.dat")) == 16
    c.close()


def test_the_age_limit_is_never_shorter_than_what_a_plug_holds(caplog):
    """With --max-age 1h, a plug on 1-minute slots may still send what its RAM ring and its
    largest flash spill hold (PLUG_RECORDS_MAX slots back, half a year), but not more; and a
    plug back after a week without its collector (10 s slots) gets its oldest reading stored
    under the default limit."""
    from wattnode import board, spill
    assert PLUG_RECORDS_MAX >= RING_RECORDS_MAX + \
        board.SIZES["spill_kib"][1] * 1024 // spill.FILE_BYTES * spill.FILE_RECORDS
    now = T0 - T0 % 60
    ing = Ingest(Complaints(), lambda node: None, max_age_s=3600, clock=lambda: now)
    held = now - (PLUG_RECORDS_MAX - 100) * 60
    assert ing.handle("wattlog/m/readings", batch([(held, 5, 1, 230, 0.1)], interval=60)) == 1
    assert ing.handle("wattlog/m/readings",
                      batch([(held - 200 * 60, 5, 1, 230, 0.1)], interval=60, seq=1)) == 0
    ing = Ingest(Complaints(), lambda node: None, clock=lambda: T0)
    assert ing.handle("wattlog/w/readings",
                      batch([(T0 - 7 * 86400 - 3 * 3600, 5, 1, 230, 0.1)])) == 1


def test_whole_batch_decoding_matches_the_wire_format_record_by_record():
    """The numpy decoding (ingest.RECORD over the payload) against wattnode.wire's own
    unpack_record, on random records with every missing marker and edge value."""
    import random
    from wattnode import wire
    rnd = random.Random(9)
    now = T0 + 3600
    ing = Ingest(Complaints(), lambda node: None, clock=lambda: now)
    recs = []
    for k in range(500):
        recs.append((T0 - 10 * k,
                     rnd.choice([None, 0.0, -0.1, 49999.9, round(rnd.uniform(-100, 4000), 1)]),
                     rnd.choice([None, 0, 4294967294, rnd.randrange(0, 10 ** 7)]),
                     rnd.choice([None, 0.0, 499.99, round(rnd.uniform(200, 250), 2)]),
                     rnd.choice([None, 0.0, 65.534, round(rnd.uniform(0, 16), 3)])))
    payload = batch(recs)
    assert ing.handle("wattlog/n/readings", payload) == 500
    got = {ch: ing.points("n", ch) for ch in ("power", "voltage", "current", "energy")}
    for i in range(500):
        t_s, p, e, v, a = wire.unpack_record(payload, i)
        t = t_s + wire.EPOCH_UNIX
        for ch, raw, missing, scale in (("power", p, wire.POWER_MISSING, 10),
                                        ("voltage", v, wire.U16_MISSING, 100),
                                        ("current", a, wire.U16_MISSING, 1000),
                                        ("energy", e, wire.ENERGY_MISSING, 1000)):
            want = math.nan if raw == missing else raw / scale
            assert (math.isnan(got[ch][t]) and math.isnan(want)) or got[ch][t] == want, (ch, i)
