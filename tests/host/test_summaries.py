"""test_summaries.py - the committer keeps the query summaries honest: a commit that rewrites
slots below them marks them stale (in commit.json, so a crash cannot forget it), a flush makes
them right again, a start after a stop that was not clean distrusts the last ring of slots, a
feed cut at start-up cuts its summaries, and `wattlog rebuild` makes them anew."""

import json

import numpy as np

from wattlog import cli
from wattlog.store.commit import Committer
from wattlog.complaints import Complaints
from wattlog.store.query import Engine
from wattlog.store.rollup import LEVELS

T0 = 1767225600
ENTRY = {"node": "n1", "channel": "power"}


def pts(n, t0=T0, value=1.0):
    return {("n1", "power"): (np.arange(n) * 10 + t0, np.full(n, value))}, {"n1": 10}


def test_a_commit_below_the_summaries_marks_them_stale_until_the_next_flush(tmp_path):
    c = Committer(str(tmp_path), Complaints())
    c.commit(*pts(5000))
    c.flush_summaries()
    feed = c.feeds[1]
    assert c.summaries.upto(feed) == 5000 - 5000 % LEVELS[0]
    c.commit(*pts(10, t0=T0 + 10 * 100, value=7.0))  # a late resend with other values
    assert c.stale == {1: 100}
    assert json.loads((tmp_path / "commit.json").read_text())["stale"] == {"1": 100}
    got = Engine(c.summaries, stale=c.stale.get).series(feed, ENTRY, T0, T0 + 50000, 5)
    assert got["max"][0] == 7.0  # the rewritten slots are read from the .dat
    c.flush_summaries()
    assert c.stale == {}
    got = Engine(c.summaries).series(feed, ENTRY, T0, T0 + 50000, 5)
    assert got["max"][0] == 7.0 and got["min"][0] == 1.0
    c.close(clean=True)


def test_a_stop_that_was_not_clean_distrusts_the_last_ring(tmp_path):
    c = Committer(str(tmp_path), Complaints())
    c.commit(*pts(20000))
    c.flush_summaries()
    c.close()  # not clean: a commit may have rewritten slots and died before commit.json
    c = Committer(str(tmp_path), Complaints())
    assert c.stale == {1: 20000 - 2 * 4096}
    c.close(clean=True)  # without a flush the stale mark stays in commit.json
    c = Committer(str(tmp_path), Complaints())
    assert c.stale == {1: 20000 - 2 * 4096}
    c.flush_summaries()
    c.close(clean=True)  # as the collector stops: commit, flush, then say it was clean
    c = Committer(str(tmp_path), Complaints())
    assert c.stale == {}
    c.close()


def test_rebuild_makes_deleted_or_cut_summaries_anew(tmp_path, capsys):
    c = Committer(str(tmp_path), Complaints())
    c.commit(*pts(40000))
    c.flush_summaries()
    good = {b: open(c.summaries.path(1, b), "rb").read() for b in LEVELS}
    c.close(clean=True)
    (tmp_path / "summaries" / "1.512").write_bytes(good[512][:100])
    (tmp_path / "summaries" / "1.64").unlink()
    cli.main(["rebuild", "--data", str(tmp_path)])
    assert "rebuilt the summaries of 1 feeds" in capsys.readouterr().out
    for b in LEVELS:
        assert (tmp_path / "summaries" / ("1.%d" % b)).read_bytes() == good[b]
