"""test_commit.py - commits are durable and ordered; start-up cuts what was never committed and
quarantines what cannot be read, saying so; a failed commit loses nothing."""

import errno
import json
import logging
import os
import struct

from batches import T0, batch
from wattlog.collector import Collector
from wattlog.commit import Committer
from wattlog.complaints import Complaints


def points(node, n, t0=T0, value=lambda k: float(k)):
    return {(node, "power"): {t0 + 10 * k: value(k) for k in range(n)}}, {node: 10}


def load_commit(tmp_path):
    return json.loads((tmp_path / "commit.json").read_text())


def floats(path):
    data = path.read_bytes()
    return list(struct.unpack("<%df" % (len(data) // 4), data))


def test_commit_writes_feeds_then_records_their_length(tmp_path):
    c = Committer(str(tmp_path), Complaints())
    assert c.commit(*points("n1", 3)) == (1, 3, 12)
    entry = c.registry.find("n1", "power")
    assert entry == {"id": 1, "node": "n1", "channel": "power", "unit": "W", "interval": 10}
    assert floats(tmp_path / "phpfina" / "1.dat") == [0.0, 1.0, 2.0]
    assert (tmp_path / "phpfina" / "1.meta").read_bytes() == struct.pack("<4I", 0, 0, 10, T0)
    assert load_commit(tmp_path)["feeds"] == {"1": 3}
    assert json.loads((tmp_path / "feeds.json").read_text())["feeds"] == [entry]


def test_start_up_cuts_what_was_never_committed(tmp_path, caplog):
    """Slots written after the last commit.json (a crash between pwrite and the rename) are
    cut at start-up: they were never acknowledged."""
    Committer(str(tmp_path), Complaints()).commit(*points("n1", 3))
    with open(tmp_path / "phpfina" / "1.dat", "ab") as f:
        f.write(struct.pack("<2f", 7.0, 8.0) + b"\x01")
    with caplog.at_level(logging.INFO):
        c = Committer(str(tmp_path), Complaints())
    assert floats(tmp_path / "phpfina" / "1.dat") == [0.0, 1.0, 2.0]
    assert c.committed == {1: 3}
    assert "cutting 2 uncommitted slots" in caplog.text


def test_a_file_cut_short_outside_wattlog_is_reported(tmp_path, caplog):
    Committer(str(tmp_path), Complaints()).commit(*points("n1", 3))
    os.truncate(tmp_path / "phpfina" / "1.dat", 4)
    with caplog.at_level(logging.ERROR):
        c = Committer(str(tmp_path), Complaints())
    assert c.committed == {1: 1}
    assert "holds 1 slots but 3 were committed" in caplog.text


def test_unreadable_feed_is_quarantined_and_replaced(tmp_path, caplog):
    """A zeroed .meta (emoncms's classic power-cut damage) moves the feed to quarantine/, with
    an error naming the file; new readings for that node and channel start feed 2."""
    Committer(str(tmp_path), Complaints()).commit(*points("n1", 3))
    (tmp_path / "phpfina" / "1.meta").write_bytes(b"\0" * 16)
    with caplog.at_level(logging.ERROR):
        c = Committer(str(tmp_path), Complaints())
    assert "1.meta: interval is 0" in caplog.text and "quarantined" in caplog.text
    assert sorted(p.suffix for p in (tmp_path / "quarantine").iterdir()) == [".dat", ".meta"]
    c.commit(*points("n1", 2, t0=T0 + 100))
    assert c.registry.find("n1", "power")["id"] == 2
    assert c.registry.entries[0]["quarantined"].endswith("interval is 0 (a zeroed header)")


def test_unreadable_commit_json_keeps_every_feed(tmp_path, caplog):
    Committer(str(tmp_path), Complaints()).commit(*points("n1", 3))
    (tmp_path / "commit.json").write_text("{truncated")
    with caplog.at_level(logging.ERROR):
        c = Committer(str(tmp_path), Complaints())
    assert c.committed == {1: 3}
    assert "keeping every feed as it is on disk" in caplog.text


def test_points_before_a_feeds_start_are_counted(tmp_path):
    c = Committer(str(tmp_path), Complaints())
    c.commit(*points("n1", 3))
    c.commit(*points("n1", 2, t0=T0 - 100))
    assert c.complain.totals == {"before-start": 2}
    assert floats(tmp_path / "phpfina" / "1.dat") == [0.0, 1.0, 2.0]


def test_disk_errors_at_fsync_lose_nothing(tmp_path, monkeypatch):
    """fdatasync fails (EIO): the commit is reported failed, commit.json is untouched, the
    points stay pending, and the next commit writes them."""
    col = Collector(str(tmp_path), "mqtt://127.0.0.1:1", commit_interval_s=300)
    col.ingest.handle("wattlog/n1/readings", batch([(T0, 5, 1, 230, 0.1)]))
    col.commit("test")
    col.ingest.handle("wattlog/n1/readings", batch([(T0 + 10, 6, 1, 230, 0.1)]))
    real = os.fdatasync

    def broken(fd):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(os, "fdatasync", broken)
    col.commit("test")
    assert load_commit(tmp_path)["feeds"]["1"] == 1
    assert col.ingest.pending[("n1", "power")] == {T0 + 10: 6.0}
    monkeypatch.setattr(os, "fdatasync", real)
    col.commit("test")
    assert load_commit(tmp_path)["feeds"]["1"] == 2
    power = col.committer.registry.find("n1", "power")["id"]
    assert floats(tmp_path / "phpfina" / ("%d.dat" % power)) == [5.0, 6.0]
    col.committer.close()


def test_a_still_empty_feed_moves_its_start_back(tmp_path):
    c = Committer(str(tmp_path), Complaints())
    c.commit(*points("n1", 1))
    os.truncate(tmp_path / "phpfina" / "1.dat", 0)
    (tmp_path / "commit.json").unlink()
    c = Committer(str(tmp_path), Complaints())
    c.commit(*points("n1", 2, t0=T0 - 20))
    assert (tmp_path / "phpfina" / "1.meta").read_bytes() == struct.pack("<4I", 0, 0, 10, T0 - 20)
    assert floats(tmp_path / "phpfina" / "1.dat") == [0.0, 1.0]
