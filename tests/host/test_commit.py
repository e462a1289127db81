"""test_commit.py - commits are durable and ordered; a failed commit (disk full, I/O error, on a
real full file system too) changes nothing in memory, loses nothing and is retried; many new
feeds cost one registry write."""

import errno
import json
import os
import struct
import subprocess

import pytest

from batches import T0, batch
from wattlog.store import durable
from wattlog.service import build
from wattlog.settings import Settings
from wattlog.store.commit import Committer
from wattlog.complaints import Complaints


def points(node, n, t0=T0, value=lambda k: float(k), channel="power"):
    return {(node, channel): {t0 + 10 * k: value(k) for k in range(n)}}, {node: 10}


def load_commit(path):
    return json.loads((path / "commit.json").read_text())


def floats(path):
    data = path.read_bytes()
    return list(struct.unpack("<%df" % (len(data) // 4), data))


def offline_collector(data):
    """A collector with no broker, started as if the broker held no retained acks."""
    col = build(Settings(data_dir=str(data), broker="mqtt://127.0.0.1:1"))
    col.recover({})
    return col


def test_commit_writes_feeds_then_records_their_length(tmp_path):
    c = Committer(str(tmp_path), Complaints())
    assert c.commit(*points("n1", 3)) == (1, 3, 12)
    entry = c.registry.find("n1", "power")
    assert entry == {"id": 1, "node": "n1", "channel": "power", "unit": "W", "interval": 10}
    assert floats(tmp_path / "phpfina" / "1.dat") == [0.0, 1.0, 2.0]
    assert (tmp_path / "phpfina" / "1.meta").read_bytes() == struct.pack("<4I", 0, 0, 10, T0)
    state = load_commit(tmp_path)
    assert (state["feeds"], state["commit"]) == ({"1": 3}, 1)
    registry = json.loads((tmp_path / "feeds.json").read_text())
    assert registry["feeds"] == [entry] and registry["last_id"] == 1
    assert json.loads((tmp_path / "phpfina" / "1.json").read_text()) == entry  # the sidecar
    c.close()


def test_points_before_a_feeds_start_are_counted(tmp_path):
    c = Committer(str(tmp_path), Complaints())
    c.commit(*points("n1", 3))
    c.commit(*points("n1", 2, t0=T0 - 100))
    assert c.complain.totals == {"before-start": 2}
    assert floats(tmp_path / "phpfina" / "1.dat") == [0.0, 1.0, 2.0]
    c.close()


def test_a_still_empty_feed_moves_its_start_back(tmp_path):
    c = Committer(str(tmp_path), Complaints())
    c.commit(*points("n1", 1))
    c.close()
    os.truncate(tmp_path / "phpfina" / "1.dat", 0)
    (tmp_path / "commit.json").unlink()
    c = Committer(str(tmp_path), Complaints())
    c.commit(*points("n1", 2, t0=T0 - 20))
    assert (tmp_path / "phpfina" / "1.meta").read_bytes() == struct.pack("<4I", 0, 0, 10, T0 - 20)
    assert floats(tmp_path / "phpfina" / "1.dat") == [0.0, 1.0]
    c.close()


def test_disk_errors_at_fsync_lose_nothing(tmp_path, monkeypatch):
    """fdatasync fails (EIO): the commit is reported failed, commit.json is untouched, the
    points stay pending, and the next commit writes them."""
    col = offline_collector(tmp_path)
    col.store.ingest.handle("wattlog/n1/readings", batch([(T0, 5, 1, 230, 0.1)]))
    col.commit("test")
    col.store.ingest.handle("wattlog/n1/readings", batch([(T0 + 10, 6, 1, 230, 0.1)]))
    real = os.fdatasync

    def broken(fd):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(os, "fdatasync", broken)
    col.commit("test")
    assert load_commit(tmp_path)["feeds"]["1"] == 1
    assert col.store.ingest.points("n1", "power") == {T0 + 10: 6.0}
    monkeypatch.setattr(os, "fdatasync", real)
    col.commit("test")
    assert load_commit(tmp_path)["feeds"]["1"] == 2
    power = col.store.committer.registry.find("n1", "power")["id"]
    assert floats(tmp_path / "phpfina" / ("%d.dat" % power)) == [5.0, 6.0]
    col.store.committer.close()


def memory_state(col):
    c = col.store.committer
    return (json.dumps(c.registry.entries, sort_keys=True), sorted(c.feeds),
            dict(c.committed), json.dumps(c.nodes, sort_keys=True), c.generation,
            json.dumps(col.store.nodes_state.to_json(), sort_keys=True))


@pytest.mark.parametrize("where", ["feeds.json", "sidecar", "new feed", "pwrite", "commit.json"])
def test_a_commit_that_creates_feeds_and_fails_changes_nothing_in_memory(tmp_path, monkeypatch,
                                                                         where):
    """ENOSPC at each step of a commit that makes new feeds: the commit fails, every bit of
    in-memory state is as before it (the old code kept the new registry entry, and the retry
    died with a KeyError), nothing is acknowledged, and the retry stores every point."""
    col = offline_collector(tmp_path)
    col.store.ingest.handle("wattlog/n1/readings", batch([(T0, 5, 1, 230, 0.1)]))
    col.commit("test")
    col.store.ingest.handle("wattlog/n2/readings", batch([(T0, 7, 1, 231, 0.2)]))
    col.store.ingest.handle("wattlog/n1/readings", batch([(T0 + 10, 6, 1, 230, 0.1)], seq=1))
    before = memory_state(col)
    full = OSError(errno.ENOSPC, "No space left on device")
    real_write_json, real_open, real_pwrite, real_meta = durable.write_json, open, os.pwrite, None

    def failing_write_json(path, obj, *a, **kw):
        if os.path.basename(path) == where:
            raise full
        return real_write_json(path, obj, *a, **kw)

    def failing_open(path, *a, **kw):
        name = os.path.basename(str(path))
        if where == "sidecar" and name.endswith(".json") and "phpfina" in str(path):
            raise full
        return real_open(path, *a, **kw)

    real_write_bytes = durable.write_bytes

    def failing_write_bytes(path, data, *a, **kw):
        if where == "new feed" and path.endswith(".meta"):
            raise full
        return real_write_bytes(path, data, *a, **kw)

    def failing_pwrite(fd, data, offset):
        raise full
    monkeypatch.setattr(durable, "write_json", failing_write_json)
    monkeypatch.setattr(durable, "write_bytes", failing_write_bytes)
    monkeypatch.setattr("builtins.open", failing_open)
    if where == "pwrite":
        monkeypatch.setattr(os, "pwrite", failing_pwrite)
    col.commit("test")
    assert memory_state(col) == before
    assert load_commit(tmp_path)["commit"] == 1
    assert sorted(col.store.ingest.pending) == ["n1", "n2"]
    assert col.store.ingest.points("n2", "voltage") == {T0: 231.0}
    monkeypatch.undo()
    col.commit("test")
    reg = col.store.committer.registry
    assert floats(tmp_path / "phpfina" / ("%d.dat" % reg.find("n1", "power")["id"])) == [5.0, 6.0]
    assert floats(tmp_path / "phpfina" / ("%d.dat" % reg.find("n2", "power")["id"])) == [7.0]
    assert load_commit(tmp_path)["nodes"]["n2"]["seq"] == 1
    col.store.committer.close()
    # and what is on disk is what the next start-up believes
    c = Committer(str(tmp_path), Complaints())
    assert c.committed == {e["id"]: 2 if e["node"] == "n1" else 1 for e in c.registry.active()}
    c.close()


@pytest.fixture
def small_fs(tmp_path):
    """A real 8 MiB tmpfs, so the disk really is full (root only)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if proc.returncode:
        pytest.skip("cannot mount a tmpfs here (%s): needs root" % proc.stderr.strip())
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_really_full_disk_loses_nothing_and_the_retry_stores_it_all(small_fs):
    """On a full tmpfs, a commit that makes feeds for many new plugs fails (ENOSPC somewhere:
    the registry, a sidecar, a .meta, a pwrite); the collector keeps running with the points in
    memory; once space is freed the next commit stores every point of every plug."""
    data = small_fs / "data"
    col = offline_collector(data)
    filler = small_fs / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    nodes = ["plug-%02d" % i for i in range(40)]
    for i, node in enumerate(nodes):
        col.store.ingest.handle("wattlog/%s/readings" % node,
                          batch([(T0 + 10 * k, 100 + i, k, 230, 0.5) for k in range(50)]))
    before = memory_state(col)
    col.commit("test")
    assert memory_state(col) == before
    assert len(col.store.ingest.pending) == len(nodes)
    filler.unlink()
    col.commit("test")
    assert not col.store.ingest.pending
    reg = col.store.committer.registry
    for i, node in enumerate(nodes):
        assert floats(data / "phpfina" / ("%d.dat" % reg.find(node, "power")["id"])) == [100.0 + i] * 50
    assert {n: d["seq"] for n, d in load_commit(data)["nodes"].items()} == {n: 50 for n in nodes}
    col.store.committer.close()


def test_many_new_plugs_cost_one_registry_write_per_commit(tmp_path, monkeypatch):
    """250 new plugs (1000 feeds) in one commit: feeds.json is written once, not once per feed
    (the old code rewrote and fsynced the whole, growing file 1000 times)."""
    saves = []
    real = durable.write_json

    def counting(path, obj, *a, **kw):
        saves.append(os.path.basename(path))
        return real(path, obj, *a, **kw)
    monkeypatch.setattr(durable, "write_json", counting)
    c = Committer(str(tmp_path), Complaints())
    pending, intervals = {}, {}
    for i in range(250):
        for ch in ("power", "voltage", "current", "energy"):
            p, iv = points("p%03d" % i, 2, channel=ch)
            pending.update(p)
            intervals.update(iv)
    assert c.commit(pending, intervals)[0] == 1000
    assert saves.count("feeds.json") == 1 and saves.count("commit.json") == 1
    assert len(c.registry.active()) == 1000
    c.close()
