"""test_ota.py - over-the-air updates end to end: `wattlog ota` sends a build to simulated
plugs (the real firmware on the MicroPython unix port, its flash a folder) through the real
mosquitto with its ACL, and the plug verifies, switches, tries and confirms it, or refuses it
while it keeps metering. The plugs run live (after catching up as fast as they go): an update
is a real-time exchange (the trial waits for the collector's ack of a new reading), so these
tests are marked realtime."""

import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time

import pytest

from helpers import REPO, aligned_past, wattlog
from otabuilds import Builds
from otarun import info, live_plug, ota, ota_command, printed
from rig import Recorder, summaries, summary, taken
from wattlog.fleet.provision import OPERATOR

pytestmark = pytest.mark.realtime


@pytest.fixture(scope="module")
def builds(tmp_path_factory, built):
    """build/device as tools/build makes it (v1, what the plugs run: lib/wattnode), a copy, and
    variants of it (tools/lib/otabuilds.py): v2 (a version bump), v3 (its node.py raises at
    import), v4 (its link.py has a bad default: it connects to port 1, where no broker is).
    One tools/build for the whole run: the `built` fixture."""
    b = Builds(tmp_path_factory.mktemp("builds"), built / "device")
    return {"v1": b.base, "v2": b.variant("v2", "0.2.0-test"),
            "v3": b.failing("v3", "0.3.0-test", "import error"),
            "v4": b.failing("v4", "0.4.0-test", "bad broker")}


def power_cut(node, timeout_s=30.0):
    """SIGKILL the plug's firmware (a power cut) and wait for its simnode wrapper to end; the
    number of firmware processes it cut. A cut at the moment the plug reboots by itself (the
    switch, a rollback) can find the old firmware already exited but not yet reaped (its pid
    still listed, and a SIGKILL to it does nothing) or none at all, and the wrapper then boots
    the plug again: that boot is cut too, as the power would have been."""
    deadline = time.monotonic() + timeout_s
    cut = set()
    while node.proc.poll() is None:
        if time.monotonic() > deadline:
            raise AssertionError("the plug still ran %d s after its power cut:\n%s"
                                 % (timeout_s, printed(node)))
        try:
            pid = node.firmware_pid()
            os.kill(pid, signal.SIGKILL)
            cut.add(pid)
        except (OSError, IndexError):  # between two boots: no firmware, or one already gone
            pass
        try:
            node.proc.wait(0.5)
        except subprocess.TimeoutExpired:
            pass
    return len(cut)


def collected_plug(broker, collectors, simnodes, tmp_path, node_id):
    """A collector that commits each second and a live plug on a flash folder of tmp_path,
    answering; (the plug, its flash folder)."""
    c = collectors(broker.url, tmp_path / "data", commit_interval=1)
    c.wait_for("listening on")
    flash = str(tmp_path / "flash")
    node = live_plug(simnodes, broker, node_id, flash)
    info(broker, node, node_id)
    return node, flash


def test_an_update_is_verified_switched_tried_and_confirmed(broker, collectors, simnodes,
                                                             tmp_path, builds):
    """v1 -> v2 with the collector's default commit interval (300 s, longer than the trial:
    the collector commits what a plug on trial sends at once): the table says confirmed, the
    plug runs v2 (its info and `wattlog nodes` say so), and its readings are continuous across
    the switch: every slot from its first to its last stored, each once, and the energy total
    never goes down (v2 resumed it from v1's checkpoint)."""
    data = tmp_path / "data"
    c = collectors(broker.url, data)
    c.wait_for("listening on")
    flash = str(tmp_path / "flash")
    node = live_plug(simnodes, broker, "ota-1", flash)
    assert info(broker, node, "ota-1")["version"] == "0.1.0"
    _, out, err = ota(broker, builds["v2"], "ota-1")
    assert "0.1.0 -> 0.2.0-test" in out and "confirmed" in out, out
    assert "100%" in err  # the progress bar reached the end
    st = info(broker, node, "ota-1")
    assert st["version"] == "0.2.0-test"
    with open(os.path.join(flash, "ota", "boot")) as f:
        cur, prev, state = f.read().split()[:3]
    # confirmed: in its grace period (boot.py would send a crash loop back to the old one)
    assert state == "grace" and prev == "-" and os.path.isdir(os.path.join(flash, "ota", cur))
    line = nodes_row(data, "ota-1", lambda r: r["version"] == "0.2.0-test"
                     and (r["update"] or {}).get("state") == "confirmed")
    assert line.endswith(" 0.2.0-test  0.2.0-test confirmed"), line
    node.stop()
    s = summary(node.output)
    taken(broker)  # its last batches, at the broker when it ended
    assert c.stop() == 0
    rows = wattlog("export", "--fill", "--data", data, "--feed", "ota-1/power").splitlines()[1:]
    times = [int(r.split(",")[0]) for r in rows]
    assert all(r.endswith(",500") for r in rows), rows  # no slot missing, none twice
    assert times == list(range(times[0], times[-1] + 10, 10)) and times[-1] >= s["last_slot"]
    energy = [float(r.split(",")[1]) for r in wattlog(
        "export", "--data", data, "--feed", "ota-1/energy").splitlines()[1:]]
    assert energy == sorted(energy) and s["energy_from"] != "none"  # the total carried over


def nodes_row(data, node_id, done, timeout_s=20.0):
    """`wattlog nodes --data DATA --json` (the CLI, as an operator runs it) until node_id's
    row satisfies done(row) (the collector writes what the plug published as it hears it: a
    bounded wait); then the table's line for it."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = {r["node"]: r for r in json.loads(wattlog("nodes", "--data", data, "--json"))}
        row = rows.get(node_id)
        if row is not None and done(row):
            break
        if time.monotonic() > deadline:
            raise AssertionError("wattlog nodes never showed what %s did: %s" % (node_id, row))
        time.sleep(0.2)
    return next(line for line in wattlog("nodes", "--data", data).splitlines()
                if line.startswith(node_id + " "))


def test_a_version_that_fails_at_import_is_rolled_back_by_the_plug(broker, collectors,
                                                                    simnodes, tmp_path, builds):
    """v3 raises at import: the plug rolls back to what it ran by itself and says why, on its
    log and in `wattlog nodes` (the collector keeps what the plug reported): the version it
    runs and "rolled back from 0.3.0-test: it failed to start: ImportError(...)"; the table
    says rolled back, and the operator's command fails."""
    data = tmp_path / "data"
    c = collectors(broker.url, data, commit_interval=1)
    c.wait_for("listening on")
    node = live_plug(simnodes, broker, "ota-3", str(tmp_path / "flash"))
    log = Recorder(broker, "wattlog/ota-3/log")
    try:
        info(broker, node, "ota-3")
        rc, out, err = ota(broker, builds["v3"], "ota-3", check=False)
        assert rc == 1 and "rolled back" in out and "failed to start" in out, out + err
        said, _ = log.next("wattlog/ota-3/log", lambda p: b"rolled back" in p)
    finally:
        log.close()
    why = "it failed to start: ImportError('v3 is broken on purpose'"
    assert b"(version 0.3.0-test): " + why.encode() in said, said
    assert info(broker, node, "ota-3")["version"] == "0.1.0"
    line = nodes_row(data, "ota-3", lambda r: (r["update"] or {}).get("state") == "rolled back"
                     and r["version"] == "0.1.0")
    assert " 0.1.0 " in line and "rolled back from 0.3.0-test: " + why in line, line


def test_a_replayed_manifest_is_refused_and_a_downgrade_on_purpose_is_taken(
        broker, collectors, simnodes, tmp_path, builds):
    """A genuine manifest captured off the broker (v1 -> v2) is replayed after a newer update
    (the operator's downgrade back to v1, on purpose: a newer serial signs the older version,
    and it is confirmed): the plug refuses the replay for its serial, says why on its log and
    ota/status (and so in `wattlog nodes`), switches nothing and keeps running v1."""
    data = tmp_path / "data"
    node, flash = collected_plug(broker, collectors, simnodes, tmp_path, "ota-r")
    wire = Recorder(broker, "wattlog/ota-r/#")
    try:
        wire.next("wattlog/ota-r/status")  # the retained one: the subscription is in place
        _, out, _ = ota(broker, builds["v2"], "ota-r")
        assert "0.1.0 -> 0.2.0-test" in out and "confirmed" in out, out
        captured, _ = wire.next("wattlog/ota-r/ota/manifest")
        _, out, _ = ota(broker, builds["v1"], "ota-r")
        assert "0.2.0-test -> 0.1.0" in out and "confirmed" in out, out
        assert info(broker, node, "ota-r")["version"] == "0.1.0"
        with open(os.path.join(flash, "ota", "boot")) as f:
            pointer = f.read()
        uid = json.loads(captured[65:])["id"]
        with Recorder(broker, name="ota-replay", user=OPERATOR) as operator:
            operator.publish("wattlog/ota-r/ota/manifest", captured)
        said, _ = wire.next("wattlog/ota-r/log", lambda p: b"refused" in p)
        status, _ = wire.next("wattlog/ota-r/ota/status",
                              lambda p: json.loads(p)["state"] == "refused")
    finally:
        wire.close()
    status = json.loads(status)
    assert status["id"] == uid and "is not above" in status["reason"], status
    assert b"update %s refused: its serial" % uid.encode() in said, said
    with open(os.path.join(flash, "ota", "boot")) as f:
        assert f.read() == pointer  # nothing switched
    assert not os.path.exists(os.path.join(flash, "ota", "stage"))
    assert info(broker, node, "ota-r")["version"] == "0.1.0"
    line = nodes_row(data, "ota-r", lambda r: (r["update"] or {}).get("state") == "refused")
    assert "0.2.0-test refused: its serial" in line, line


def test_a_version_that_cannot_reach_the_broker_is_rolled_back_after_its_trial(
        broker, collectors, simnodes, tmp_path, builds):
    """v4 runs but never reaches the broker: no confirmation within its trial (30 s, the
    shortest), so the plug rolls back by itself and says why once it is back online."""
    data = tmp_path / "data"
    c = collectors(broker.url, data, commit_interval=1)
    c.wait_for("listening on")
    node = live_plug(simnodes, broker, "ota-4", str(tmp_path / "flash"))
    info(broker, node, "ota-4")
    rc, out, err = ota(broker, builds["v4"], "ota-4", check=False, extra=("--trial", "30"))
    assert rc == 1 and "rolled back" in out and "not confirmed within 30 s" in out, out + err
    assert info(broker, node, "ota-4")["version"] == "0.1.0"


def test_only_the_operator_may_publish_an_update(broker, simnodes):
    """The broker's ACL (wattlog provision): a plug's or Home Assistant's publish on a plug's
    ota/manifest is dropped; the operator's goes through. A watcher that may read everything
    sees only the operator's (each publish is at QoS 1, acknowledged before the next)."""
    from wattlog.fleet.provision import HOMEASSISTANT
    broker.node_args("ota-other")
    watcher = Recorder(broker, "wattlog/ota-a/ota/#")
    try:
        for user in ("ota-other", HOMEASSISTANT, OPERATOR):
            with Recorder(broker, name=user, user=user) as c:
                c.publish("wattlog/ota-a/ota/manifest", b"from " + user.encode())
        payload, _ = watcher.next("wattlog/ota-a/ota/manifest")
        assert payload == b"from " + OPERATOR.encode()
    finally:
        watcher.close()


def test_a_forged_manifest_is_refused_and_the_plug_keeps_metering(broker, simnodes, tmp_path,
                                                                   builds):
    """A plug whose key is not the one provisioned (what a forger would sign with) refuses the
    manifest before a byte is written; the operator's table says why; the plug meters on."""
    flash = str(tmp_path / "flash")
    node = live_plug(simnodes, broker, "ota-f", flash, "--config",
                     json.dumps({"ota_key": "ab" * 32}))
    refused_while_metering(broker, node, "ota-f", flash,
                           lambda: ota(broker, builds["v2"], "ota-f", check=False)[:2],
                           "HMAC does not match")


def test_a_fleet_stops_at_the_first_plug_that_fails_and_passes_an_offline_one_at_once(
        broker, collectors, simnodes, tmp_path, builds):
    """--all --parallel 1 over four plugs: the first is offline (its status, retained, says
    so: a power cut), the third refuses the update. The offline one is "offline, not
    started" at once (no byte sent, no wait: it waited 30 s for an answer that could not
    come, holding the others back), the second is updated, the fourth is not started after
    the refusal and keeps running what it ran; the exit status says not all were updated."""
    data = tmp_path / "data"
    c = collectors(broker.url, data, commit_interval=1)
    c.wait_for("listening on")
    nodes = {}
    wrong_key = ("--config", json.dumps({"ota_key": "cd" * 32}))
    for name, extra in (("fleet-0", ()), ("fleet-a", ()), ("fleet-b", wrong_key),
                        ("fleet-c", ())):
        nodes[name] = live_plug(simnodes, broker, name, str(tmp_path / name), *extra)
    for name, n in nodes.items():
        info(broker, n, name)
    watch = Recorder(broker, "wattlog/fleet-0/status")
    try:
        power_cut(nodes["fleet-0"])
        watch.next("wattlog/fleet-0/status", lambda p: p == b"offline")
    finally:
        watch.close()
    rc, out, _ = ota(broker, builds["v2"], "--all", check=False, extra=("--parallel", "1"))
    lines = {l.split()[0]: l for l in out.splitlines()[1:]}
    assert rc == 1 and "offline, not started" in lines["fleet-0"], out
    assert lines["fleet-0"].split()[-3:-1] == ["0", "0.0"], out  # no byte sent, no wait
    assert "confirmed" in lines["fleet-a"], out
    assert "refused" in lines["fleet-b"] and "not started" in lines["fleet-c"], out
    assert info(broker, nodes["fleet-c"], "fleet-c")["version"] == "0.1.0"
    assert not os.path.exists(str(tmp_path / "fleet-c" / "ota" / "boot"))


KILLS = 10  # the issue asks for at least 10
# 200 KiB, as test_pipeline's limited heap. Since the update became a package and the link
# took a broker list it needed 204: at 200 a fragmented heap dropped the update's chunks in
# about one run of two ("no heap for a 1030-byte message"); each chunk is now read into one
# buffer made as the transfer is loaded (issue 23). The manifest's parse (its JSON, about
# 10 KiB in small blocks) is the next tightest moment: no block bigger than a list of its
# files may be asked for then (one 1 KiB block for its digests was refused even at 204)
TIGHT_HEAP_KIB = int(os.environ.get("OTA_HEAP_KIB", 200))


def test_a_plug_killed_at_random_moments_of_an_update_always_boots_a_working_version(
        broker, collectors, simnodes, tmp_path, builds):
    """The firmware is killed (SIGKILL: a power cut) at a random moment of an update, KILLS
    times, each on a plug of its own, all updated by one `wattlog ota --parallel KILLS` (a
    confirmation takes a whole trial: one after the other they took minutes): half at a
    random moment from the plug's "receiving" (mostly the transfer), half at a random moment
    from its "switching" (the switch, the reboot and the trial), and started again on the
    same flash: every time it boots a version that answers (the old or the new one, never
    neither), and the update either resumes from the flash or is refused as a whole, and the
    tool hears how it ended; in the end one more update of them all confirms v2. The moments
    and outcomes are printed (build/test-results/ota-kills.txt)."""
    import random
    from concurrent.futures import ThreadPoolExecutor
    c = collectors(broker.url, tmp_path / "data", commit_interval=1)
    c.wait_for("listening on")
    rng = random.Random(14)
    moments = [("receiving", rng.uniform(0.2, 6.0)) if i % 2 == 0 else
               ("switching", rng.uniform(0.0, 30.0)) for i in range(KILLS)]
    names = ["ota-k%d" % i for i in range(KILLS)]
    nodes = [live_plug(simnodes, broker, name, str(tmp_path / name)) for name in names]
    for name, node in zip(names, nodes):
        info(broker, node, name)
    watch = Recorder(broker, "wattlog/+/ota/status")
    tool = subprocess.Popen(ota_command(broker, builds["v2"], *names,
                                        extra=("--parallel", str(KILLS))),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said = {state: {name: threading.Event() for name in names}
            for state in ("receiving", "switching")}

    def listen():
        while tool.poll() is None:
            try:
                topic, payload = watch.get(0.2)
            except queue.Empty:
                continue
            state = json.loads(payload).get("state")
            if state in said:
                said[state][topic.split("/")[1]].set()

    def one(i):
        since, delay_s = moments[i]
        # from the plug's own "receiving", not the tool's start: a tool slow to connect on a
        # busy machine found a plug cut before it offline, and rightly left it alone
        assert said[since][names[i]].wait(300), "%s never said %s" % (names[i], since)
        time.sleep(delay_s)  # the random moment itself, not a wait for a condition
        cuts = power_cut(nodes[i])
        # powered again, its clock at the present (a plug's RTC is lost: NTP gives the time),
        # not a minute back as a new simulated run starts: it would replay stored slots
        nodes[i] = live_plug(simnodes, broker, names[i], str(tmp_path / names[i]), "--start",
                             aligned_past(0))
        return info(broker, nodes[i], names[i])["version"], cuts
    listener = threading.Thread(target=listen)
    listener.start()
    try:
        with ThreadPoolExecutor(KILLS) as pool:
            booted = list(pool.map(one, range(KILLS)))  # re-raises the first failure
        out, err = tool.communicate(timeout=400)
    finally:
        if tool.poll() is None:
            tool.kill()
            tool.communicate()
        listener.join()
        watch.close()
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    outcomes = [(since, round(delay_s, 1), version,
                 " ".join(rows[name].split()[4:]) if name in rows else out + err)
                + (("cut again as it rebooted",) if cuts > 1 else ())
                for name, (since, delay_s), (version, cuts) in zip(names, moments, booted)]
    out_dir = REPO / "build" / "test-results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "ota-kills.txt").write_text(
        "kill moment s (from the plug's receiving or switching), version booted after, "
        "the tool's outcome (result, bytes, s, heap)\n" + "".join("%s\n" % (o,) for o in outcomes))
    for o in outcomes:
        assert o[2] in ("0.1.0", "0.2.0-test"), outcomes
        # the update carried on after the power cut to an outcome the plug reported
        assert any(w in o[3] for w in ("confirmed", "rolled back", "refused")), outcomes
    for name, node in zip(names, nodes):
        assert info(broker, node, name)["version"] in ("0.1.0", "0.2.0-test")
    _, out, _ = ota(broker, builds["v2"], "--all", extra=("--parallel", str(KILLS)))
    assert out.count("confirmed") == KILLS, out


def test_a_plug_away_when_the_update_goes_out_gets_it_once_it_is_back(
        broker, collectors, simnodes, tmp_path, builds):
    """A plug hears a manifest only while it is connected. Its power cut (its last will says
    "offline"): an update started now fails after its wait for an answer, and the table says
    the plug is offline. Another update started while it is off (its manifest seen on the
    wire, so lost to the plug), then the plug powered again: the tool sends the manifest again
    when the plug says "online", and the update is confirmed. (It waited 30 s for an answer
    that could not come: an update started a moment before a plug came back, as a busy Pi's
    slow start makes it, failed with "no answer from the plug".)"""
    node, flash = collected_plug(broker, collectors, simnodes, tmp_path, "ota-o")
    wire = Recorder(broker, "wattlog/ota-o/#")
    try:
        wire.next("wattlog/ota-o/status", lambda p: p == b"online")  # the retained one
        power_cut(node)
        wire.next("wattlog/ota-o/status", lambda p: p == b"offline")
        rc, out, _ = ota(broker, builds["v2"], "ota-o", check=False)
        assert rc == 1 and "no answer from the plug in 30 s (it is offline" in out, out
        wire.next("wattlog/ota-o/ota/manifest")  # that update's: the next one is the new one's
        tool = subprocess.Popen(ota_command(broker, builds["v2"], "ota-o"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wire.next("wattlog/ota-o/ota/manifest")
            node = live_plug(simnodes, broker, "ota-o", flash, "--start", aligned_past(0))
            out, err = tool.communicate(timeout=240)
        finally:
            if tool.poll() is None:
                tool.kill()
                tool.communicate()
    finally:
        wire.close()
    assert tool.returncode == 0 and "0.1.0 -> 0.2.0-test" in out and "confirmed" in out, \
        out + err
    assert info(broker, node, "ota-o")["version"] == "0.2.0-test"


def refused_while_metering(broker, node, node_id, flash, send, reason):
    """send() makes an update that must be refused with `reason` before any switch; the plug
    meters throughout (it produced readings since), runs what it ran, and has nothing staged."""
    before = info(broker, node, node_id)["produced"]
    rc, out = send()
    assert rc and "refused" in out and reason in out, out
    assert not os.path.exists(os.path.join(flash, "ota", "stage"))
    assert not os.path.exists(os.path.join(flash, "ota", "boot"))
    for _ in range(20):  # a slot is 10 s: a bounded wait for the next reading
        st = info(broker, node, node_id)
        assert st["version"] == "0.1.0", st
        if st["produced"] > before:
            return
        time.sleep(1)
    raise AssertionError("%s stopped metering: %d readings before, %d after" % (
        node_id, before, st["produced"]))


def test_a_flipped_byte_or_a_missing_file_is_refused_before_any_switch(broker, simnodes,
                                                                       tmp_path, builds):
    """A byte flipped in one chunk on its way (the operator's sender altered at the network
    seam) fails that file's sha256; a build without wattnode/__init__ is refused from its
    manifest. Both before any switch, while the plug meters."""
    from wattlog.fleet import ota as host_ota
    flash = str(tmp_path / "flash")
    node = live_plug(simnodes, broker, "ota-b", flash)
    info(broker, node, "ota-b")

    class Flipping(host_ota.Fleet):
        def _answer(self, base, files, m):
            if m.get("f") == 3 and m.get("o") == 0:
                content = bytearray(files[3][1])
                content[100] ^= 0x40
                files = files[:3] + [(files[3][0], bytes(content))] + files[4:]
            return super()._answer(base, files, m)

    def flipped():
        version, files = host_ota.load_build(builds["v2"])
        key = open(os.path.join(broker.auth, "nodes", "ota-b", "ota.key")).read().strip()
        fleet = Flipping(broker.url.replace("wattlog-collector", OPERATOR), open(
            broker.password_file(OPERATOR)).read().strip(), None, "wattlog")
        try:
            r = fleet.update("ota-b", key, host_ota.next_serial(broker.auth, "ota-b"), version,
                             files, 60, lambda *a: None)
        finally:
            fleet.close()
        return r["result"] != "confirmed", "%s: %s" % (r["result"], r["reason"])
    name = host_ota.load_build(builds["v2"])[1][3][0]
    refused_while_metering(broker, node, "ota-b", flash, flipped,
                           "%s does not match its sha256" % name)

    lacking = tmp_path / "lacking"
    shutil.copytree(builds["v2"], lacking)
    os.remove(lacking / "lib" / "wattnode" / "__init__.mpy")
    refused_while_metering(broker, node, "ota-b", flash,
                           lambda: ota(broker, lacking, "ota-b", check=False)[:2],
                           "lacks wattnode/__init__")


def test_an_update_the_flash_cannot_hold_is_refused_before_a_byte_is_written(
        broker, simnodes, tmp_path, builds):
    """The plug's flash is a real small file system (a 96 KiB tmpfs: about what is left
    free on a plug with a big ring file and crash log): the update does not fit with its
    margin, so it is refused from the manifest, and the plug meters on."""
    flash = tmp_path / "flash"
    flash.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(flash)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        node = live_plug(simnodes, broker, "ota-s", str(flash))
        info(broker, node, "ota-s")
        refused_while_metering(broker, node, "ota-s", str(flash),
                               lambda: ota(broker, builds["v2"], "ota-s", check=False)[:2],
                               "not enough flash")
        node.stop()
    finally:
        subprocess.run(["umount", "-l", str(flash)])


def test_an_update_fits_the_tight_heap(broker, collectors, simnodes, tmp_path, builds):
    """The node run from .mpy files in test_pipeline's limited heap (TIGHT_HEAP_KIB: 200 KiB
    unless OTA_HEAP_KIB says otherwise; its 48 KiB ring, a BL0937 driver) takes an update and
    confirms it. It needed 224 KiB, then 204 once start.py unloaded what only start-up
    needs, while the transfer was one module that kept the manifest as parsed JSON; now the
    transfer (ota/transfer.py), the manifest's checks (ota/manifest.py, unloaded once a
    manifest is read) and a boot's trial (ota/trial.py) are loaded apart, each chunk is read
    into one buffer the transfer made (not a new block per message, which a fragmented heap
    did not have in about one run of two), and a manifest that does not fit is refused on
    ota/status, not a crash (tests/device/test_short_heap.py). The plug's readiness
    and its new version come from its first state and its update's own ota/status, not from
    a command or its status line (a short heap may skip that line), once it has settled (its
    first state): an owner updates a running plug. A manifest refused "for want of heap" at
    23 KiB free, every time in a clone at /tmp/clone3 and never at /work/main (the path's
    length moved start-up's strings), until the manifest's parse collected first
    (ota/manifest.py). Kept in
    build/test-results: the tool's table (the live-heap high-water mark) and the heap free at
    rest after the update (the plug's summary as it stops)."""
    data = tmp_path / "data"
    c = collectors(broker.url, data, commit_interval=1)
    c.wait_for("listening on")
    live = Recorder(broker, "wattlog/ota-h/#")
    try:
        node = live_plug(simnodes, broker, "ota-h", str(tmp_path / "flash"), "--mpy",
                         "--heap-kib", TIGHT_HEAP_KIB, "--board", "devkit-bl0937")
        try:
            live.next("wattlog/ota-h/status", lambda p: p == b"online", timeout_s=60)
            live.next("wattlog/ota-h/state", timeout_s=60)
        except AssertionError:
            raise AssertionError("the plug never came online and settled:\n%s" % printed(node))
        rc, out, err = ota(broker, builds["v2"], "ota-h", check=False)
        if rc != 0 or "confirmed" not in out:
            raise AssertionError(out + err + "the plug printed:\n" + printed(node))
        status, _ = live.next("wattlog/ota-h/ota/status",
                              lambda p: json.loads(p)["state"] == "confirmed", timeout_s=30)
        assert json.loads(status)["running"] == "0.2.0-test"
    finally:
        live.close()
    rest = summaries(printed(node))[-1]["heap_free"]
    out_dir = REPO / "build" / "test-results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "ota-tight-heap.txt").write_text(
        "%sheap %d KiB; free at rest after the update: %d bytes\n" % (out, TIGHT_HEAP_KIB, rest))
