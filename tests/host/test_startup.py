"""test_startup.py - what the collector does with the data directory it is given, before it
stores anything: what was acknowledged is never cut (a stale, damaged or missing commit.json is
not obeyed; the retained acks say what the plugs were told), unreadable feeds are quarantined,
one writer per directory, never another program's feed files, a damaged registry repaired by
one command, and a start-up that fails changes no file."""

import hashlib
import json
import logging
import os
import struct
import subprocess
import sys

import pytest

from batches import T0
from wattlog import cli
from wattlog.store.commit import Committer, StartError
from wattlog.complaints import Complaints
from wattlog.store.feeds import RegistryError


def points(node, n, t0=T0, channel="power"):
    return {(node, channel): {t0 + 10 * k: float(k) for k in range(n)}}, {node: 10}


def floats(path):
    data = path.read_bytes()
    return list(struct.unpack("<%df" % (len(data) // 4), data))


def committed(data, *commits):
    """Run commits of (node, n slots, t0) through a Committer and close it; commit.json's nodes
    get {boot 7, seq = slots so far}, as the collector writes them."""
    c = Committer(str(data), Complaints())
    seqs = {}
    for node, n, t0 in commits:
        seqs[node] = seqs.get(node, 0) + n
        c.commit(*points(node, n, t0), nodes={k: {"boot": 7, "seq": v} for k, v in seqs.items()})
    c.close()


def tree(path):
    """Every file under path with its bytes' hash (the lock file aside)."""
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            if name != "lock":
                out[os.path.relpath(full, path)] = hashlib.sha256(open(full, "rb").read()).hexdigest()
    return out


def start(data, acks=None):
    c = Committer(str(data), Complaints(), recover=False)
    c.recover(acks or {})
    return c


# -- cutting only what was never acknowledged -------------------------------------------------

def test_start_up_cuts_what_was_never_committed(tmp_path, caplog):
    """Slots written after the last commit.json (a crash between pwrite and the rename) are
    cut at start-up: they were never acknowledged, and the retained acks agree."""
    committed(tmp_path, ("n1", 3, T0))
    with open(tmp_path / "phpfina" / "1.dat", "ab") as f:
        f.write(struct.pack("<2f", 7.0, 8.0) + b"\x01")
    with caplog.at_level(logging.INFO):
        c = start(tmp_path, {"n1": {"boot": 7, "seq": 3, "commit": 1}})
    assert floats(tmp_path / "phpfina" / "1.dat") == [0.0, 1.0, 2.0]
    assert c.committed == {1: 3}
    assert "cutting 2 uncommitted slots" in caplog.text
    c.close()


def test_a_commit_json_restored_from_a_backup_cuts_nothing(tmp_path, caplog):
    """commit.json is put back from an older backup while the feeds go on: the broker's
    retained ack (from a later commit) shows the plugs were told more, so nothing is cut, the
    collector says so as an error, keeps the old file aside and records the feeds as they are.
    (The old code cut every slot past the backup's lengths: 384 acknowledged slots a plug.)"""
    committed(tmp_path, ("n1", 3, T0))
    backup = (tmp_path / "commit.json").read_text()
    committed(tmp_path, ("n1", 3, T0), ("n1", 384, T0 + 30))
    (tmp_path / "commit.json").write_text(backup)
    with caplog.at_level(logging.ERROR):
        c = start(tmp_path, {"n1": {"boot": 7, "seq": 387, "commit": 3, "time": T0}})
    assert len(floats(tmp_path / "phpfina" / "1.dat")) == 387
    assert c.committed == {1: 387}
    assert "older than what the plugs were told" in caplog.text and "nothing is cut" in caplog.text
    assert [p.name for p in tmp_path.glob("commit.json.stale-*")]
    state = json.loads((tmp_path / "commit.json").read_text())
    assert state["feeds"] == {"1": 387} and state["nodes"]["n1"]["seq"] == 387
    assert state["commit"] >= 3  # so the same retained acks do not look newer next time
    c.close()
    c = start(tmp_path, {"n1": {"boot": 7, "seq": 387, "commit": 3, "time": T0}})
    assert c.committed == {1: 387}
    c.close()


def test_legacy_acks_without_a_commit_number_still_show_a_stale_commit_json(tmp_path):
    committed(tmp_path, ("n1", 3, T0))
    backup = (tmp_path / "commit.json").read_text()
    committed(tmp_path, ("n1", 3, T0), ("n1", 5, T0 + 30))
    (tmp_path / "commit.json").write_text(backup)
    c = start(tmp_path, {"n1": {"boot": 7, "seq": 8}})
    assert c.committed == {1: 8}
    c.close()


@pytest.mark.parametrize("content", [
    "[1, 2]", '{"feeds": {}, "nodes": "x"}', '{"version": 1, "feeds": {"1": "x"}}',
    '{"version": 1, "feeds": {"1": -4}}', '{"version": 1, "feeds": {"1": 3}, "nodes": {"n1": {}}}',
    '{"version": 1, "feeds": {"1": 3}, "nodes": {"n1": {"boot": "x", "seq": 1}}}',
    '{"version": 2, "feeds": {}}', "{truncated", ""])
def test_a_commit_json_of_the_wrong_shape_cuts_nothing_and_never_crashes(tmp_path, caplog,
                                                                          content):
    """Whatever commit.json holds, start-up reads all of it before it touches a data file; a
    file it cannot believe is kept aside, every feed is kept as it is on disk, and the
    collector starts. (The old code cut all feeds to 0 bytes on {"nodes": "x"}, then crashed;
    [1, 2] and a length of "x" crashed it with a traceback.)"""
    committed(tmp_path, ("n1", 3, T0), ("n2", 4, T0))
    (tmp_path / "commit.json").write_text(content)
    with caplog.at_level(logging.ERROR):
        c = start(tmp_path)
    assert sorted(c.committed.values()) == [3, 4]
    assert [len(floats(p)) for p in sorted((tmp_path / "phpfina").glob("*.dat"))] == [3, 4]
    assert "damaged" in caplog.text and "nothing is cut" in caplog.text
    assert list(tmp_path.glob("commit.json.damaged-*"))
    c.close()


def test_a_missing_commit_json_cuts_nothing(tmp_path, caplog):
    committed(tmp_path, ("n1", 3, T0))
    (tmp_path / "commit.json").unlink()
    with caplog.at_level(logging.ERROR):
        c = start(tmp_path)
    assert c.committed == {1: 3} and "missing" in caplog.text
    c.close()


def test_a_file_cut_short_outside_wattlog_is_reported(tmp_path, caplog):
    committed(tmp_path, ("n1", 3, T0))
    os.truncate(tmp_path / "phpfina" / "1.dat", 4)
    with caplog.at_level(logging.ERROR):
        c = start(tmp_path)
    assert c.committed == {1: 1}
    assert "holds 1 slots but 3 were committed" in caplog.text
    c.close()


def test_unreadable_feed_is_quarantined_and_replaced(tmp_path, caplog):
    """A zeroed .meta (emoncms's classic power-cut damage) moves the feed to quarantine/, with
    an error naming the file; new readings for that node and channel start feed 2."""
    committed(tmp_path, ("n1", 3, T0))
    (tmp_path / "phpfina" / "1.meta").write_bytes(b"\0" * 16)
    with caplog.at_level(logging.ERROR):
        c = start(tmp_path)
    assert "1.meta: interval is 0" in caplog.text and "quarantined" in caplog.text
    assert sorted(p.suffix for p in (tmp_path / "quarantine").iterdir()) == [".dat", ".json", ".meta"]
    c.commit(*points("n1", 2, t0=T0 + 100))
    assert c.registry.find("n1", "power")["id"] == 2
    assert c.registry.entries[0]["quarantined"].endswith("interval is 0 (a zeroed header)")
    c.close()


def test_a_feed_made_but_never_committed_is_made_again(tmp_path):
    """A crash after feeds.json listed a new feed and before its files were made: the next
    start makes them when the feed gets points, instead of quarantining an empty feed."""
    committed(tmp_path, ("n1", 3, T0))
    (tmp_path / "phpfina" / "1.meta").unlink()
    (tmp_path / "phpfina" / "1.dat").unlink()
    state = json.loads((tmp_path / "commit.json").read_text())
    state["feeds"] = {}
    (tmp_path / "commit.json").write_text(json.dumps(state))
    c = start(tmp_path)
    c.commit(*points("n1", 2))
    assert floats(tmp_path / "phpfina" / "1.dat") == [0.0, 1.0] and not (tmp_path / "quarantine").exists()
    c.close()


# -- one writer, and only of its own files ----------------------------------------------------

def test_a_second_collector_on_the_same_directory_is_refused(tmp_path):
    """One line that names the PID of the collector that has the directory, and exit status 1,
    before the second one touches anything (two collectors re-created each other's feeds)."""
    committed(tmp_path, ("n1", 3, T0))
    first = Committer(str(tmp_path), Complaints())
    before = tree(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "wattlog.cli", "collect", "--broker",
                           "mqtt://127.0.0.1:1", "--data", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "wattlog collect: %s is in use by another wattlog process (PID %d); stop it first: two "
        "writers would corrupt the feeds" % (tmp_path, os.getpid())]
    assert tree(tmp_path) == before
    first.close()
    Committer(str(tmp_path), Complaints()).close()  # free again once the first has gone


def test_someone_elses_phpfina_files_are_never_touched(tmp_path):
    """Pointed at emoncms's data directory (phpfina/1.meta, 1.dat there already), the collector
    refuses to start, saying what it found, and changes no file (the old code's "new feed 1"
    replaced emoncms's feed 1)."""
    feed_dir = tmp_path / "phpfina"
    feed_dir.mkdir()
    (feed_dir / "1.meta").write_bytes(struct.pack("<4I", 0, 0, 10, T0))
    (feed_dir / "1.dat").write_bytes(struct.pack("<3f", 1.0, 2.0, 3.0))
    (feed_dir / "17.meta").write_bytes(struct.pack("<4I", 0, 0, 60, T0))
    before = tree(tmp_path)
    with pytest.raises(StartError, match=r"feed files wattlog did not make \(1.dat, 1.meta, "
                                         r"17.meta\).*emoncms.*--data"):
        Committer(str(tmp_path), Complaints())
    assert tree(tmp_path) == before


def test_feed_files_that_appear_later_are_skipped_not_overwritten(tmp_path):
    """Files of the next free id that appear while the collector runs: the new feed takes
    another id."""
    c = Committer(str(tmp_path), Complaints())
    c.commit(*points("n1", 1))
    (tmp_path / "phpfina" / "2.meta").write_bytes(b"theirs")
    c.commit(*points("n2", 1))
    assert c.registry.find("n2", "power")["id"] == 3
    assert (tmp_path / "phpfina" / "2.meta").read_bytes() == b"theirs"
    c.close()


# -- the registry -----------------------------------------------------------------------------

def test_a_damaged_registry_costs_one_repair_command(tmp_path, capsys):
    """feeds.json cut in half: start-up refuses with a line that names `wattlog repair`, which
    rebuilds the registry from the feeds' sidecars (every id, node, channel and interval as it
    was, quarantined feeds still quarantined); then the collector starts and the data is all
    there."""
    committed(tmp_path, ("n1", 3, T0), ("n2", 4, T0))
    c = Committer(str(tmp_path), Complaints())
    c._quarantine(c.registry.find("n1", "power"), "test")
    c.commit(*points("n1", 2, T0 + 1000))
    c.close()
    good = json.loads((tmp_path / "feeds.json").read_text())
    raw = (tmp_path / "feeds.json").read_bytes()
    (tmp_path / "feeds.json").write_bytes(raw[:len(raw) // 2])
    before = tree(tmp_path)
    with pytest.raises(RegistryError, match="wattlog repair --data"):
        Committer(str(tmp_path), Complaints())
    assert tree(tmp_path) == before
    cli.main(["repair", "--data", str(tmp_path)])
    out = capsys.readouterr().out
    assert "rebuilt" in out and "2 nodes" in out
    rebuilt = json.loads((tmp_path / "feeds.json").read_text())
    strip = [{k: v for k, v in e.items() if k != "quarantined"} for e in good["feeds"]]
    assert [{k: v for k, v in e.items() if k != "quarantined"} for e in rebuilt["feeds"]] == strip
    assert [bool(e.get("quarantined")) for e in rebuilt["feeds"]] == \
        [bool(e.get("quarantined")) for e in good["feeds"]]
    c = Committer(str(tmp_path), Complaints())
    assert sorted(c.committed.values()) == [2, 4]
    c.close()


def test_sidecars_missing_from_an_older_wattlog_are_written_at_start_up(tmp_path):
    committed(tmp_path, ("n1", 1, T0))
    for p in (tmp_path / "phpfina").glob("*.json"):
        p.unlink()
    start(tmp_path).close()
    assert json.loads((tmp_path / "phpfina" / "1.json").read_text())["node"] == "n1"


def test_a_start_up_that_fails_leaves_every_file_as_it_found_it(tmp_path):
    """A corrupt feed (to be quarantined), a stale tail (to be cut) and a feeds.json with one bad
    entry: the registry check fails first, and nothing has been moved or cut."""
    committed(tmp_path, ("n1", 3, T0), ("n2", 3, T0))
    with open(tmp_path / "phpfina" / "1.dat", "ab") as f:
        f.write(struct.pack("<f", 9.0))
    (tmp_path / "phpfina" / "2.meta").write_bytes(b"\0" * 16)
    reg = json.loads((tmp_path / "feeds.json").read_text())
    reg["feeds"][1]["interval"] = "ten"
    (tmp_path / "feeds.json").write_text(json.dumps(reg))
    before = tree(tmp_path)
    with pytest.raises(RegistryError, match="feed 2's interval 'ten'"):
        Committer(str(tmp_path), Complaints())
    assert tree(tmp_path) == before
