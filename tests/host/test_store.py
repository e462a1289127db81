"""test_store.py - the storage side's one promise to the collector service: commit() hands back
acks only for what is on disk, a failed commit hands back none and keeps every point, and a
hole in what a plug sent is asked for again."""

import errno
import json
import os

import pytest

from batches import T0, batch
from wattlog.complaints import Complaints
from wattlog.store.files import Store
from wattnode import wire


def store_at(path):
    s = Store(str(path), Complaints())
    s.recover({})
    return s


def readings(node, seq, n, held=0):
    return "wattlog/%s/readings" % node, batch(
        [(T0 + 10 * (seq + k), 5 + k, 1, 230, 0.1) for k in range(n)], seq=seq, held=held)


def on_disk(path):
    return json.loads((path / "commit.json").read_text())


def test_acks_say_what_is_on_disk_and_only_for_plugs_heard_from(tmp_path):
    s = store_at(tmp_path)
    s.take(*readings("n1", 0, 3))
    s.take(*readings("n2", 0, 2))
    done = s.commit()
    acks = {node: (seq, wire.parse_ack(payload)) for node, seq, payload in done.acks}
    assert sorted(acks) == ["n1", "n2"]
    for node, n in (("n1", 3), ("n2", 2)):
        seq, (kind, ack) = acks[node]
        assert (seq, kind, ack["seq"], ack["boot"]) == (n, wire.ACK, n, 1)
        assert ack["commit"] == on_disk(tmp_path)["commit"]
        power = s.committer.registry.find(node, "power")["id"]
        assert on_disk(tmp_path)["feeds"][str(power)] == n  # what the ack says is there
    s.take(*readings("n1", 3, 1))
    done = s.commit()
    assert [(node, seq) for node, seq, _ in done.acks] == [("n1", 4)]
    assert s.commit() is None  # nothing pending: nothing written, nothing acked
    s.close()


def test_a_failed_commit_acks_nothing_and_keeps_every_point(tmp_path, monkeypatch):
    s = store_at(tmp_path)
    s.take(*readings("n1", 0, 3))

    def broken(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", broken)
    with pytest.raises(OSError):
        s.commit()
    assert not (tmp_path / "commit.json").exists() or on_disk(tmp_path)["feeds"] == {}
    assert s.pending("n1", "power") == ([T0, T0 + 10, T0 + 20], [5.0, 6.0, 7.0])
    monkeypatch.setattr(os, "fdatasync", real)
    done = s.commit()
    assert [(node, seq) for node, seq, _ in done.acks] == [("n1", 3)]
    assert s.pending("n1", "power") is None
    s.close()


def test_a_hole_is_asked_for_again_once(tmp_path):
    s = store_at(tmp_path)
    s.take(*readings("n1", 0, 2))
    s.take(*readings("n1", 5, 1))
    asked = s.resends()
    assert len(asked) == 1 and asked[0][0] == "n1"
    kind, ack = wire.parse_ack(asked[0][1])
    assert (kind, ack["seq"], ack["resend"]) == (wire.RESEND, 0, 2)  # nothing acked yet; 2 on
    assert not s.resends()
    s.close()


def test_points_being_committed_are_still_pending_until_they_are_on_disk(tmp_path, monkeypatch):
    """The HTTP side asks for pending readings from its own thread; a question that comes
    while a commit writes (here: during its fdatasync) still sees them, so a chart's right
    edge has no hole of one commit's length."""
    s = store_at(tmp_path)
    s.take(*readings("n1", 0, 3))
    seen = []
    real = os.fdatasync

    def sync_and_look(fd):
        seen.append(s.pending("n1", "power"))
        real(fd)
    monkeypatch.setattr(os, "fdatasync", sync_and_look)
    s.commit()
    assert seen and all(p == ([T0, T0 + 10, T0 + 20], [5.0, 6.0, 7.0]) for p in seen), seen
    assert s.pending("n1", "power") is None  # on disk now: no longer pending
    s.close()
