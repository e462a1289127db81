"""test_phpfina.py - feeds are byte-exact emoncms PHPFina files; bad files are named, not guessed."""

import errno
import math
import os
import struct

import numpy as np
import pytest

from wattlog.store.phpfina import CorruptFeed, Feed, FeedExists


def dat(feed):
    with open(feed.dat_path, "rb") as f:
        return f.read()


def test_create_writes_the_emoncms_header(tmp_path):
    """.meta is 16 bytes: 0, 0, interval, start (floored to the interval), little-endian."""
    feed = Feed.create(str(tmp_path), 7, 10, 1795170327)
    assert open(feed.meta_path, "rb").read() == struct.pack("<4I", 0, 0, 10, 1795170320)
    assert dat(feed) == b""
    assert Feed.open(str(tmp_path), 7).start == 1795170320


def test_update_pads_gaps_with_nan_in_one_block(tmp_path):
    """Writing slot 0 and slot 3 leaves NaN in 1 and 2; the file is float32 LE, nothing else."""
    feed = Feed.create(str(tmp_path), 1, 10, 1000)
    feed.update({0: 1.5, 3: -2.25})
    assert dat(feed) == struct.pack("<4f", 1.5, math.nan, math.nan, -2.25)
    assert feed.npoints() == 4


def test_update_inside_keeps_neighbours(tmp_path):
    """Rewriting slots 1 and 3 of 5 keeps 0, 2 and 4 as they were (idempotent resends)."""
    feed = Feed.create(str(tmp_path), 1, 10, 1000)
    feed.update({k: float(k) for k in range(5)})
    feed.update({1: 10.0, 3: 30.0})
    assert list(np.frombuffer(dat(feed), "<f4")) == [0.0, 10.0, 2.0, 30.0, 4.0]


def test_update_refuses_slots_before_the_start(tmp_path):
    feed = Feed.create(str(tmp_path), 1, 10, 1000)
    with pytest.raises(ValueError, match="before the feed's start"):
        feed.update({-1: 1.0})


def test_read_ignores_a_torn_tail_and_fills_nan_past_the_end(tmp_path):
    """A 1-3 byte tail from a torn write is not a point; reads past the end are NaN."""
    feed = Feed.create(str(tmp_path), 1, 10, 1000)
    feed.update({0: 1.0, 1: 2.0})
    with open(feed.dat_path, "ab") as f:
        f.write(b"\x01\x02")
    assert feed.npoints() == 2
    got = feed.read(0, 4)
    assert got[:2].tolist() == [1.0, 2.0] and np.isnan(got[2:]).all()
    feed.update({2: 3.0})  # the next write lands on the slot grid, over the torn bytes
    assert list(np.frombuffer(dat(feed), "<f4")) == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("meta, reason", [
    (None, "missing"),
    (b"", "is 0 bytes"),
    (b"\0" * 16, "interval is 0"),
    (struct.pack("<4I", 0, 0, 10, 1005), "not a multiple of the interval"),
    (struct.pack("<4I", 0, 0, 10, 1000) + b"x", "is 17 bytes"),
])
def test_bad_headers_are_named(tmp_path, meta, reason):
    """An unusable .meta raises CorruptFeed naming the file and the fault."""
    Feed.create(str(tmp_path), 3, 10, 1000)
    path = tmp_path / "3.meta"
    if meta is None:
        path.unlink()
    else:
        path.write_bytes(meta)
    with pytest.raises(CorruptFeed, match=reason) as e:
        Feed.open(str(tmp_path), 3)
    assert "3.meta" in str(e.value)


def test_missing_dat_is_named(tmp_path):
    Feed.create(str(tmp_path), 3, 10, 1000)
    (tmp_path / "3.dat").unlink()
    with pytest.raises(CorruptFeed, match="3.dat: missing"):
        Feed.open(str(tmp_path), 3)


def test_disk_full_raises_and_leaves_the_stored_points_as_they_were(tmp_path, monkeypatch):
    """ENOSPC part way through the write (the disk fills while the bytes past the end go out)
    surfaces as OSError; the points stored before are untouched (a write that reread and
    rewrote the stored span would change them here)."""
    feed = Feed.create(str(tmp_path), 1, 10, 1000)
    feed.update({k: float(k) for k in range(8)})
    before = dat(feed)
    real = os.pwrite

    def fills_up(fd, data, offset):
        real(fd, b"\xff" * (len(data) // 2), offset)  # what the disk took before it was full
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "pwrite", fills_up)
    with pytest.raises(OSError, match="No space"):
        feed.update({8: 8.0, 9: 9.0, 12: 12.0})
    assert dat(feed)[:len(before)] == before


def test_a_short_write_is_an_error_not_a_success(tmp_path, monkeypatch):
    """pwrite returning fewer bytes than asked (a full disk can do that) raises OSError naming
    the file, so the commit fails and nothing is acknowledged."""
    feed = Feed.create(str(tmp_path), 1, 10, 1000)
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, offset: real(fd, data[:4], offset))
    with pytest.raises(OSError, match=r"1.dat: short write \(4 of 12 bytes\)"):
        feed.update({0: 1.0, 1: 2.0, 2: 3.0})


def test_slot_arithmetic_floors_to_the_grid(tmp_path):
    feed = Feed.create(str(tmp_path), 1, 60, 1200)
    assert feed.slot(1200) == 0 and feed.slot(1259) == 0 and feed.slot(1260) == 1
    assert feed.slot(1199) == -1 and feed.time(2) == 1320


def test_update_writes_only_the_runs_that_have_data(tmp_path):
    """Slot 0 and the last slot of a year of 10 s slots: two 4-byte writes, not a rewrite of
    the 12 MB between them (a plug could make the collector read and rewrite whole files)."""
    feed = Feed.create(str(tmp_path), 1, 10, 1000)
    n = 365 * 8640
    feed.update({n - 1: 0.0})
    assert feed.update({0: 1.0, n - 1: 2.0}) == 8
    assert feed.update({5: 1.0, 7: 1.0, 300: 1.0}) == 12 + 4  # 5..7 one run, 300 another
    got = feed.read(0, 8)
    assert got[0] == 1.0 and got[5] == 1.0 and got[7] == 1.0 and np.isnan(got[6])
    assert feed.read(n - 1, n)[0] == 2.0


def test_create_never_replaces_files_it_did_not_make(tmp_path):
    (tmp_path / "4.meta").write_bytes(b"someone else's")
    with pytest.raises(FeedExists, match="4.meta: exists already"):
        Feed.create(str(tmp_path), 4, 10, 1000)
    assert (tmp_path / "4.meta").read_bytes() == b"someone else's"
