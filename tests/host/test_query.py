"""test_query.py - the query engine answers from summaries exactly what a scan of the raw
slots would (mean, min, max, count per bucket; gaps as None), at any range and zoom, with
readings not yet committed at the right edge, and never from summaries that are stale,
cut short or belong to another feed."""

import math
import os

import numpy as np
import pytest

from wattlog.store.phpfina import Feed
from wattlog.store.query import Engine, QueryError
from wattlog.store.rollup import LEVELS, Summaries

START = 1767225600  # 2026-01-01T00:00Z, on the 10 s grid


def make_feed(tmp_path, n=200000, seed=3):
    rnd = np.random.default_rng(seed)
    os.makedirs(tmp_path / "phpfina", exist_ok=True)
    feed = Feed.create(str(tmp_path / "phpfina"), 1, 10, START)
    values = rnd.normal(500, 200, n).astype(np.float32)
    values[rnd.random(n) < 0.05] = np.nan           # scattered missing slots
    values[50000:53000] = np.nan                     # an outage: a whole gap
    feed.update((np.arange(n), values.astype(np.float64)))
    return feed, values


ENTRY = {"node": "n1", "channel": "power"}


def brute(values, feed, start, end, points, pending=None):
    """The answer by scanning raw slots: the reference the engine must match."""
    iv = feed.interval
    first = max((start - feed.start) // iv, 0)
    stop = max(-(-(end - feed.start) // iv), first)
    bucket = -(-(stop - first) // points)
    level = max([b for b in LEVELS if b <= bucket], default=None)
    size = max(1, bucket if level is None else bucket // level * level)
    b0, b1 = first // size, -(-stop // size)
    full = np.full(max(stop, len(values), b1 * size) + 1, np.nan, dtype=np.float32)
    full[:len(values)] = values
    for t, v in (pending or {}).items():
        full[(t - feed.start) // iv] = v
    if bucket <= 1:
        return full[first:stop]
    return full[b0 * size:b1 * size].reshape(-1, size)


def check(got, ref):
    if ref.ndim == 1:
        assert len(got["mean"]) == len(ref)
        for g, r in zip(got["mean"], ref):
            assert (g is None and math.isnan(r)) or g == float(r)
        return
    assert len(got["mean"]) == len(ref)
    for i, row in enumerate(ref):
        have = row[~np.isnan(row)]
        if not len(have):
            assert got["mean"][i] is None and got["count"][i] == 0
            continue
        assert got["count"][i] == len(have)
        assert got["min"][i] == float(have.min()) and got["max"][i] == float(have.max())
        assert got["mean"][i] == pytest.approx(float(have.astype(np.float64).mean()), rel=1e-5)


@pytest.mark.parametrize("span_slots, points", [
    (200000, 1000), (200000, 300), (200000, 37), (70000, 1000), (5000, 1000), (900, 1000),
    (3000, 50), (200000, 1), (120, 10)])
def test_buckets_match_a_scan_of_the_raw_slots(tmp_path, span_slots, points):
    feed, values = make_feed(tmp_path)
    s = Summaries(str(tmp_path))
    s.flush([feed])
    engine = Engine(s)
    for offset in (0, 777, 123456 % max(1, 200000 - span_slots)):
        start = START + offset * 10 + 3
        end = start + span_slots * 10
        check(engine.series(feed, ENTRY, start, end, points), brute(values, feed, start, end, points))


def test_raw_slots_come_back_exactly_as_stored(tmp_path):
    feed, values = make_feed(tmp_path)
    s = Summaries(str(tmp_path))
    s.flush([feed])
    got = Engine(s).series(feed, ENTRY, START + 10 * 1000, START + 10 * 1500, 1000)
    assert got["bucket_s"] == 10 and got["time"][0] == START + 10 * 1000
    ref = values[1000:1500]
    assert all((g is None and math.isnan(r)) or g == float(r) for g, r in zip(got["mean"], ref))


def test_pending_readings_reach_the_right_edge_and_late_ones_are_not_hidden(tmp_path):
    """Readings not yet committed show at the end; one that fills a hole deep inside the
    summarised span is counted too (its buckets come from the raw slots)."""
    feed, values = make_feed(tmp_path)
    s = Summaries(str(tmp_path))
    s.flush([feed])
    n = len(values)
    pending = {START + 10 * (n + k): 1000.0 + k for k in range(50)}
    pending[START + 10 * 51000] = 77.0  # inside the outage
    times = np.array(sorted(pending), dtype=np.int64)
    engine = Engine(s, pending=lambda node, ch: (times, np.array([pending[t] for t in times])))
    end = START + 10 * (n + 60)
    got = engine.series(feed, ENTRY, START, end, 400)
    check(got, brute(values, feed, START, end, 400, pending))
    assert got["committed_until"] == START + 10 * n


def test_stale_summaries_are_not_believed(tmp_path):
    """A commit rewrote slots after the last flush (stale from there): the answer follows the
    .dat, not the summary; so does one whose summary files were cut short or deleted, or
    whose state belongs to another feed of the same id."""
    feed, values = make_feed(tmp_path)
    s = Summaries(str(tmp_path))
    s.flush([feed])
    values[1000:9000] = 5.0
    feed.update((np.arange(1000, 9000), np.full(8000, 5.0)))
    got = Engine(s, stale=lambda fid: 1000).series(feed, ENTRY, START, START + 10 * 100000, 100)
    check(got, brute(values, feed, START, START + 10 * 100000, 100))
    wrong = Engine(s).series(feed, ENTRY, START, START + 10 * 100000, 100)
    assert wrong["mean"][2] != got["mean"][2]  # without the stale mark the summary is old
    with open(s.path(1, 512), "r+b") as f:
        f.truncate(100)
    check(Engine(s).series(feed, ENTRY, START, START + 10 * 100000, 100),
          brute(values, feed, START, START + 10 * 100000, 100))
    s.state[1]["start"] = START - 10
    assert s.upto(feed) == 0


def test_flush_writes_only_new_entries_and_keeps_them_right(tmp_path):
    """Flushing again after more slots were appended rewrites only the new entries (a few
    pages, not the whole summary) and gives what a rebuild from nothing gives."""
    feed, values = make_feed(tmp_path, n=100000)
    s = Summaries(str(tmp_path))
    s.flush([feed])
    more = np.arange(100000, 102160)
    feed.update((more, np.full(len(more), 42.0)))
    written = s.flush([feed])
    assert written <= sum((2160 // b + 2) * 16 for b in LEVELS)
    again = Summaries(str(tmp_path / "rebuilt"))
    again.dir = str(tmp_path / "rebuilt")
    os.makedirs(again.dir, exist_ok=True)
    again.flush([feed])
    for b in LEVELS:
        assert open(s.path(1, b), "rb").read() == open(again.path(1, b), "rb").read()


@pytest.mark.parametrize("start, end, points, words", [
    (START + 100, START, 10, "must come after the start"),
    (START, START + 100, 0, "points must be a whole number"),
    (START, START + 100, 10 ** 9, "points must be a whole number"),
])
def test_bad_questions_are_refused_in_words(tmp_path, start, end, points, words):
    feed, _ = make_feed(tmp_path, n=1000)
    with pytest.raises(QueryError, match=words):
        Engine(Summaries(str(tmp_path))).series(feed, ENTRY, start, end, points)


def test_a_feed_cut_at_start_up_is_summarised_only_up_to_its_new_end(tmp_path):
    feed, values = make_feed(tmp_path, n=100000)
    s = Summaries(str(tmp_path))
    s.flush([feed])
    feed.truncate(60000)
    s.cut(1, 60000)
    assert Summaries(str(tmp_path)).upto(feed) == 60000 - 60000 % LEVELS[0]
    feed.update((np.arange(60000, 70000), np.full(10000, 3.0)))
    values = np.concatenate([values[:60000], np.full(10000, 3.0, dtype=np.float32)])
    check(Engine(s).series(feed, ENTRY, START, START + 700000, 100),
          brute(values, feed, START, START + 700000, 100))
