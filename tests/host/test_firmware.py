"""test_firmware.py - each plug's firmware version and last update result (firmware.py) are kept
in <data>/firmware.json, written only when one of them changes (never per message: a plug
announces its version at every connection), and `wattlog nodes` shows them beside what
commit.json says; bad reports are counted, and a plug's text is printable and bounded."""

import json
import os

import pytest

from batches import T0
from wattlog import cli
from wattlog.fleet import firmware
from wattlog.store.commit import Committer
from wattlog.complaints import Complaints


def config(version):
    return json.dumps({"dev": {"identifiers": ["wattlog_p"], "sw_version": version},
                       "cmps": {}}).encode()


def status(state, version, reason=None, uid="0a0b0c0d", **more):
    return json.dumps(dict({"id": uid, "state": state, "version": version, "running": "0.1.0",
                            "reason": reason, "done": 100, "total": 100, "heap_max": 1},
                           **more)).encode()


def test_the_file_is_written_only_when_a_version_or_a_result_changes(tmp_path):
    ticks = iter(range(1795000000, 1795000100))
    rec = firmware.Firmware(str(tmp_path), clock=lambda: next(ticks))  # a second a message
    for _ in range(3):  # three connections, one version: one write
        assert rec.take("homeassistant/device/plug-a/config", config("0.1.0"))
    assert rec.writes == 1
    for state in ("receiving", "switching", "switching", "confirmed", "confirmed"):
        assert rec.take("wattlog/plug-a/ota/status", status(state, "0.2.0"))
    assert rec.writes == 4  # receiving, switching, confirmed: a repeat changes nothing
    rec.take("homeassistant/device/plug-a/config", config("0.2.0"))
    assert rec.writes == 5
    again = firmware.Firmware(str(tmp_path))  # a restarted collector hears the retained ones
    again.take("homeassistant/device/plug-a/config", config("0.2.0"))
    again.take("wattlog/plug-a/ota/status", status("confirmed", "0.2.0"))
    assert again.writes == 0
    kept = firmware.read(str(tmp_path))["plug-a"]
    assert kept["firmware"] == "0.2.0" and kept["update"]["state"] == "confirmed"
    assert firmware.describe(kept["update"]) == "0.2.0 confirmed"


def test_bad_reports_are_counted_and_a_plugs_text_is_printable_and_bounded(tmp_path):
    complaints = Complaints()
    rec = firmware.Firmware(str(tmp_path), complaints=complaints)
    for junk in (b"{", b"[1]", json.dumps({"state": "exploded"}).encode(), b"\xff\xfe"):
        assert rec.take("wattlog/plug-a/ota/status", junk)
    assert complaints.totals == {"bad-ota-status": 4} and rec.writes == 0
    rec.take("wattlog/plug-a/ota/status", status("rolled back", "0.3.0\x1b[2J",
                                                 "it failed\n" + "x" * 1000))
    u = rec.get("plug-a")["update"]
    assert u["version"] == "0.3.0 [2J" and len(u["reason"]) == firmware.REASON_CHARS
    assert firmware.describe(u).startswith("rolled back from 0.3.0 [2J: it failed x")
    rec.take("wattlog/plug-a/ota/status", b"")  # a cleared retained status: no change
    rec.take("wattlog/Not A Node/ota/status", status("confirmed", "1"))
    assert rec.get("plug-a")["update"]["state"] == "rolled back"
    assert list(firmware.read(str(tmp_path))) == ["plug-a"]


@pytest.fixture
def data(tmp_path):
    c = Committer(str(tmp_path), Complaints())
    c.commit({("plug-1", "power"): {T0: 100.5}}, {"plug-1": 10})
    c.close()
    return str(tmp_path)


def test_nodes_shows_the_version_and_the_last_update(data, capsys):
    rec = firmware.Firmware(data)
    rec.take("homeassistant/device/plug-1/config", config("0.1.0"))
    rec.take("wattlog/plug-1/ota/status", status(
        "rolled back", "0.3.0", "it failed to start: ImportError('v3 is broken on purpose')"))
    rec.take("homeassistant/device/plug-2/config", config("0.2.0"))  # no reading acked yet
    rec.take("wattlog/plug-2/ota/status", status("confirmed", "0.2.0"))
    cli.main(["nodes", "--data", data])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-2:] == ["version", "update"]
    assert lines[1].startswith("plug-1") and " 0.1.0 " in lines[1]
    assert lines[1].endswith("rolled back from 0.3.0: it failed to start: "
                             "ImportError('v3 is broken on purpose')")
    assert lines[2].split() == ["plug-2", "-", "-", "0", "-", "0", "0", "0", "-", "0.2.0",
                                "0.2.0", "confirmed"]  # "-": on flash, no collector to ask
    cli.main(["nodes", "--data", data, "--json"])
    found = json.loads(capsys.readouterr().out)
    assert found[0]["version"] == "0.1.0" and found[0]["update"]["state"] == "rolled back"
    assert found[1]["acked_seq"] is None and found[1]["update"]["version"] == "0.2.0"


def test_a_damaged_firmware_file_is_one_line_and_the_collector_starts_afresh(data, capsys):
    with open(os.path.join(data, firmware.FILE), "w") as f:
        f.write('{"version": 1, "nodes": []}')
    with pytest.raises(SystemExit) as e:
        cli.main(["nodes", "--data", data])
    assert "firmware.json is not a firmware record" in str(e.value)
    rec = firmware.Firmware(data)
    rec.take("homeassistant/device/plug-1/config", config("0.1.0"))
    assert firmware.read(data) == {"plug-1": {"firmware": "0.1.0", "update": None}}


def test_the_http_api_carries_the_last_update(tmp_path):
    """/api/plugs/<node> and /api/plugs give the plug's last update result as it reported it
    on ota/status (through plugwatch.py), beside its firmware version."""
    from served import Served
    s = Served(tmp_path)
    try:
        s.watch.take("homeassistant/device/plug-1/config", config("0.1.0"))
        s.watch.take("wattlog/plug-1/ota/status", status("rolled back", "0.3.0", "it crashed"))
        code, plug = s.call("/api/plugs/plug-1")
        assert code == 200 and plug["firmware"] == "0.1.0"
        assert {k: plug["update"][k] for k in ("state", "version", "reason")} == {
            "state": "rolled back", "version": "0.3.0", "reason": "it crashed"}
        code, plugs = s.call("/api/plugs")
        assert plugs["plugs"][0]["update"]["state"] == "rolled back"
    finally:
        s.close()


def test_a_plug_is_on_trial_from_its_switch_until_its_verdict_or_the_longest_trial(tmp_path):
    """What the collector commits at once (collector.py): readings of a plug whose new version
    waits for an ack, never of one confirmed, rolled back or silent for longer than a trial."""
    now = [1795000000]
    rec = firmware.Firmware(str(tmp_path), clock=lambda: now[0])
    assert not rec.on_trial("plug-a")
    rec.take("wattlog/plug-a/ota/status", status("switching", "0.2.0"))
    assert rec.on_trial("plug-a") and not rec.on_trial("plug-b")
    now[0] += firmware.TRIAL_MAX_S
    assert not rec.on_trial("plug-a")
    rec.take("wattlog/plug-a/ota/status", status("switching", "0.3.0", uid="0a0b0c0e"))
    assert rec.on_trial("plug-a")
    rec.take("wattlog/plug-a/ota/status", status("confirmed", "0.3.0", uid="0a0b0c0e"))
    assert not rec.on_trial("plug-a")


def test_the_slots_a_rollback_lost_count_once_as_the_plugs_lost_readings(data, capsys):
    """A plug's rollback report says how many slots the failed version cost ("lost", counted
    by the plug: lib/wattnode/ota/trial.py). The collector counts them once, as heard live,
    in the plug's lost readings and gaps (`wattlog nodes`, written with the next commit), not
    again for the same report retained, nor when a restarted collector hears it, nor for a
    report that is not a count."""
    from wattlog.store.nodes import Nodes
    complaints = Complaints()
    nodes = Nodes({}, complaints)
    nodes.batch("plug-1", 7, 0, 1, 0, 0)  # the plug has sent a reading: the collector knows it
    heard = []

    def on_lost(node, lost, update):
        heard.append((node, lost))
        nodes.lost_in_rollback(node, lost, update["version"])
    rec = firmware.Firmware(data, on_lost=on_lost)
    report = status("rolled back", "0.3.0", "the watchdog reset it; 7 slots between ...",
                    lost=7)
    for _ in range(2):
        rec.take("wattlog/plug-1/ota/status", report)
    rec.take("wattlog/plug-2/ota/status", status("rolled back", "0.3.0", lost=-1))
    rec.take("wattlog/plug-2/ota/status", status("rolled back", "0.4.0", lost="7"))
    firmware.Firmware(data, on_lost=on_lost).take("wattlog/plug-1/ota/status", report)
    assert heard == [("plug-1", 7)]
    assert complaints.totals == {"gap": 7}
    c = Committer(data, Complaints())
    c.commit({("plug-1", "power"): {T0 + 10: 100.5}}, {"plug-1": 10},
             nodes.to_json(nodes.snapshot()))
    c.close()
    cli.main(["nodes", "--data", data, "--json"])
    row = json.loads(capsys.readouterr().out)[0]
    assert (row["node"], row["lost"], row["gaps"]) == ("plug-1", 7, 1)
    assert row["update"]["lost"] == 7
