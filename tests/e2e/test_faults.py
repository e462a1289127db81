"""test_faults.py - the fault suite: no reading is lost to any single failure.

Three or more simulated plugs (the real firmware, 100x clock: ten readings a second each)
send to a real mosquitto while the failures happen; the collector commits every few seconds.
After each scenario every reading the plugs produced must be in the PHPFina files exactly
once, with its value - except, accounted for precisely, what a full spill dropped (which the
plug and the collector both report), what a power cut took before it reached the flash (at
most what RTC memory held: the stated bound) and a damaged segment (which the plug counts).
Each scenario adds a row to the produced / stored / lost table printed at the end of the run
(conftest.py).

Plugs draw a different constant load each (500, 750, 1000 W...), so a reading that landed
in another plug's feed would show.

Real time, not free-running (simnode --speed max), where each failure is timed in wall time
(a SIGKILL, a broker restart, a link cut) and must land while the plugs are producing and
sending, and the plug's and the collector's own timeouts (PUBACK, acks, back-off) are real
time too. The outages of days (the flash spill: lib/wattnode/spill.py) run free: they are
node time, and the test acts on what the plug says (its state's time, its spill's files).
"""

import json
import os
import random
import signal
import struct
import time

import pytest

from faultload import (INTERVAL, ROWS_FILE, finish, start_plugs, stored, stored_yet, storing,
                       watts)
from helpers import aligned_past, wattlog
from netcut import Relay
from rig import Recorder, summaries, taken, wait_until
from wattnode import spill, spillboot, wire
from wattnode.keep import Keep

pytestmark = pytest.mark.realtime

def crashes(output):
    """The node's status at each crash of one simnode (the "crash {...}" line start.py
    prints after the crash text)."""
    return [json.loads(line[len("crash "):]) for line in output.splitlines()
            if line.startswith("crash {")]


def runs_of(output):
    """[(first slot, readings, unsent, never sent)] for every boot of one simnode, from its
    status: at a crash (crash lines), or at a clean end (summaries: nothing unsent)."""
    out = []
    for line in output.splitlines():
        if line.startswith("crash {"):
            s = json.loads(line[len("crash "):])
            out.append((s["first_slot"], s["produced"], s["unsent"], s["never_sent"]))
        elif line.startswith("summary "):
            s = json.loads(line[len("summary "):])
            assert s["produced"] == (s["last_slot"] - s["first_slot"]) // INTERVAL + 1, \
                "%s\n%s" % (json.dumps(s), output[-4000:])  # the boot's whole story if not
            out.append((s["first_slot"], s["produced"], s["unsent"], s["unsent"]))
    return out


def account(scenario, data, nodes, began, allowed_lost=None):
    """Check every node's feed against what it produced; add the scenario's table row.
    nodes: (node, watts, its simnode's output, or its runs as runs_of() gives them).
    allowed_lost(node, boot_index, lost, run) -> None raises when a loss is not accounted for;
    without it nothing may be lost."""
    produced = kept = lost = 0
    for node, watts, proc_output in nodes:
        have = stored(data, node)
        runs = runs_of(proc_output) if isinstance(proc_output, str) else proc_output
        assert runs, proc_output[-3000:]
        slots = set()
        for i, run in enumerate(runs):
            first, n, unsent, never = run
            mine = set(range(first, first + n * INTERVAL, INTERVAL))
            missing = mine - set(have)
            if allowed_lost is None:
                assert not missing, "%s lost %d readings of boot %d, e.g. %s (at its end " \
                    "the plug said %d unsent, %d never sent)" % (
                        node, len(missing), i, sorted(missing)[:5], unsent, never)
            else:
                allowed_lost(node, i, len(missing), run)
            produced += n
            lost += len(missing)
            slots |= mine
        extra = set(have) - slots
        assert not extra, "%s has %d slots it never produced, e.g. %s" % (node, len(extra), sorted(extra)[:5])
        wrong = {t: v for t, v in have.items() if v != watts}
        assert not wrong, "%s: values not its %d W: %s" % (node, watts, list(wrong.items())[:5])
        kept += len(have)
    ROWS_FILE.parent.mkdir(parents=True, exist_ok=True)
    with open(ROWS_FILE, "a") as f:  # one short write: lines from several processes stay whole
        f.write(json.dumps([scenario, produced, kept, lost, time.monotonic() - began]) + "\n")
    assert kept + lost == produced
    return produced, kept, lost


def test_collector_killed_at_random_ten_times(broker, collectors, simnodes, tmp_path):
    """The collector SIGKILLed ten times at random moments while three plugs send (each kill
    shorter after the start than the commit interval, so it takes uncommitted readings with
    it): the plugs send again what no ack covered, and every reading is stored once. The
    plugs run on in real time until the last collector has it all: on a busy machine the
    kills (each collector slow to start) outlasted their 55 s, and a plug that has ended
    cannot send again what only the killed collectors had heard."""
    began = time.monotonic()
    rng = random.Random(4)
    data, c = collector_up(broker, collectors, tmp_path, 5)
    names = ["kill-a", "kill-b", "kill-c"]
    plugs = start_plugs(simnodes, broker.port, names, 55, "--then-realtime")
    for k in range(10):
        time.sleep(rng.uniform(1.0, 4.0))  # always shorter than the commit interval
        c.kill()
        c = collectors(broker.url, data, commit_interval=5)
        c.wait_for("listening on")

    def caught_up(node):  # stored without a hole up to a minute ago
        have = stored_yet(data, node)
        return have and all_stored(data, node, min(have), int(time.time()) - 60)
    c.wait_until("every plug's readings stored", lambda: all(caught_up(n) for n in names), 300)
    for p in plugs:
        p.stop()  # SIGTERM: it sends what it holds and says what it produced
    taken(broker)
    assert c.stop() == 0
    account("collector SIGKILLed 10x", data,
            [(n, watts(i), p.output) for i, (n, p) in enumerate(zip(names, plugs))], began)
    for p in plugs:
        s = summaries(p.output)[-1]
        assert s["acks"] > 0 and s["resends"] > 0 and s["bad_acks"] == 0, s


def test_broker_stopped_and_restarted(broker, collectors, simnodes, tmp_path):
    """mosquitto stopped while three plugs send and the collector has stored some of each,
    then started again (no persistence: queued batches and retained acks are gone): every
    reading is stored once, and the collector says it lost the broker."""
    began = time.monotonic()
    data, c = collector_up(broker, collectors, tmp_path, 5)
    names = ["brk-a", "brk-b", "brk-c"]
    plugs = start_plugs(simnodes, broker.port, names, 40)
    wait_until("some readings of every plug stored", lambda: storing(data, names))
    broker.stop()       # no persistence: queued batches and retained acks are gone
    time.sleep(4)       # the outage itself: plugs hold their readings, the collector retries
    broker.start()
    outs = finish(plugs)
    taken(broker)  # the plugs' last batches, at the broker when they ended
    assert c.stop() == 0
    account("broker restarted", data,
            [(n, watts(i), o) for i, (n, o) in enumerate(zip(names, outs))], began)
    assert "lost the broker" in c.log()


def test_link_cut_longer_than_the_commit_interval(broker, collectors, simnodes, tmp_path):
    """The plugs' link to the broker cut silently (no RST, no FIN, as Wi-Fi fails) for 20 s,
    longer than the commit interval and the plug's PUBACK timeout, once some of each plug's
    readings are stored: the plugs notice, hold their readings, and every one is stored once
    the link heals."""
    began = time.monotonic()
    data, c = collector_up(broker, collectors, tmp_path, 5)
    names = ["cut-a", "cut-b", "cut-c"]
    with Relay(broker.port) as relay:
        plugs = start_plugs(simnodes, relay.port, names, 55)
        wait_until("some readings of every plug stored", lambda: storing(data, names))
        relay.cut()     # silent, as Wi-Fi fails: no RST, no FIN
        time.sleep(20)  # > commit interval, > the 15 s PUBACK timeout, < the ring (307 s)
        relay.heal()
        outs = finish(plugs)
    taken(broker)  # the plugs' last batches, at the broker when they ended
    assert c.stop() == 0
    account("node-broker link cut 20 s", data,
            [(n, watts(i), o) for i, (n, o) in enumerate(zip(names, outs))], began)
    for o in outs:
        assert "no PUBACK for a batch" in o or "cannot connect" in o, o[-2000:]


def test_nodes_rebooted_cleanly_and_by_crash(broker, collectors, simnodes, tmp_path):
    """A reboot command drains first; a crash resets the plug at once. Neither loses a
    reading: what the flash does not hold is in RTC memory (lib/wattnode/keep.py), and the next
    boot sends it first (before the spill, 13 readings were lost here)."""
    began = time.monotonic()
    data, c = collector_up(broker, collectors, tmp_path, 5)
    names = ["boot-a", "boot-b", "boot-c"]
    plugs = start_plugs(simnodes, broker.port, names[:2], 40)
    plugs += start_plugs(simnodes, broker.port, names[2:], 40, "--crash-after", 1500)
    wait_until("some readings of every plug stored", lambda: storing(data, names))
    with Recorder(broker, name="faults-cmd") as cmd:
        cmd.publish("wattlog/boot-a/cmd", json.dumps({"cmd": "reboot"}))
    outs = finish(plugs)
    taken(broker)  # the plugs' last batches, at the broker when they ended
    assert c.stop() == 0
    assert len(summaries(outs[0])) == 2, outs[0][-3000:]  # rebooted once, cleanly
    crashed = crashes(outs[2])
    assert len(crashed) >= 2, outs[2][-3000:]
    account("node rebooted (boot-a by command, boot-c crashed %dx)" % len(crashed),
            data, [(n, 500 + 250 * (i if i < 2 else 0), o)
                   for i, (n, o) in enumerate(zip(names, outs))], began)
    after = crashed[1:] + summaries(outs[2])  # each boot after a crash kept what it held
    assert all(s["kept"] > 0 for s in after), [s["kept"] for s in after]
    assert sum(s["unsent"] for s in crashed) > 0  # so a crash had readings at stake
    nodes = json.loads(wattlog("nodes", "--data", data, "--json"))
    boots = {n["node"]: n["boots"] for n in nodes}
    assert boots == {"boot-a": 2, "boot-b": 1, "boot-c": len(crashed) + 1}, nodes


def collector_up(broker, collectors, tmp_path, commit_interval):
    """The collector on tmp_path/data, listening: (data, the collector)."""
    data = tmp_path / "data"
    c = collectors(broker.url, data, commit_interval=commit_interval)
    c.wait_for("listening on")
    return data, c


def test_an_outage_longer_than_ring_and_spill(broker, collectors, simnodes, tmp_path):
    """A 4 KiB ring (256 readings) and a 4 KiB spill (one file, 252), at 200x; a 30 s cut
    (600 readings) fills both. The plug drops only its oldest readings and says how many;
    the collector counts the same gap; every other reading is stored."""
    began = time.monotonic()
    data, c = collector_up(broker, collectors, tmp_path, 2)
    names = ["full-a", "full-b", "full-c"]
    with Relay(broker.port) as relay:
        plugs = start_plugs(simnodes, relay.port, names, 55, "--ring-kib", 4, "--spill-kib", 4,
                            speed=200)
        wait_until("some readings of every plug stored", lambda: storing(data, names))
        relay.cut()
        time.sleep(30)  # the outage itself: 600 readings at 200x, more than ring and spill
        relay.heal()
        outs = finish(plugs)
    taken(broker)  # the plugs' last batches, at the broker when they ended
    assert c.stop() == 0
    reported = {}
    missing = {}

    def dropped_only(node, boot, lost, run):
        reported[node] = lost
        first, n, _, _ = run
        missing[node] = set(range(first, first + n * INTERVAL, INTERVAL)) - set(stored(data, node))

    account("spill full (outage longer than ring and spill)", data,
            [(n, watts(i), o) for i, (n, o) in enumerate(zip(names, outs))], began, dropped_only)
    state = json.loads((data / "commit.json").read_text())["nodes"]
    for n, o in zip(names, outs):
        s = summaries(o)[-1]
        assert reported[n] > 0 and s["spill_dropped"] > 0, (n, reported[n], s)
        assert reported[n] <= s["dropped"], (n, reported[n], s)  # only what the plug dropped
        # the plug drops its oldest held readings, one run, and counts them; while it is
        # still full after the cut heals (200x on a busy machine: draining slower than it
        # samples), a spilled file it drops may hold readings it had just sent, stored but
        # not yet acknowledged: so what is missing lies within the run it counts (seen in CI:
        # 21 stored among 465 slots at the end of the run), not always as one run
        m = sorted(missing[n])
        assert m[-1] - m[0] < s["dropped"] * INTERVAL, (n, s["dropped"], m[:3], m[-3:])
        assert state[n]["lost"] == reported[n], (n, state[n], reported[n])  # counted exactly
        assert state[n]["gaps"] >= 1


# -- outages of days: free-running plugs, the flash spill --------------------------------------

WEEK_S = 7 * 86400
PATIENCE_S = 3  # the collector is away on purpose: no need to wait wattsim's 30 s to tell


def spill_files(flash):
    """The plug's spill files, oldest first (lib/wattnode/spill.py's names)."""
    folder = flash / spill.SPILL_DIR
    names = os.listdir(folder) if folder.is_dir() else []
    return [folder / ("%04x" % no) for no in spillboot.file_numbers(names)]


class FileRTC:
    """A simulated plug's RTC memory, read from its file (lib/wattsim/board.py)."""

    def __init__(self, path):
        self.path = path

    def read(self):
        return self.path.read_bytes() if self.path.exists() else b""

    def write(self, data):
        raise AssertionError("a test only reads a plug's RTC memory")


def spilled_newest(flash):
    """The newest slot (unix s) in the plug's newest spill file's sound segments, or None: how
    far a plug whose collector is away has got, read off its flash as it writes (a segment
    being written fails its check and is not read)."""
    files = spill_files(flash)
    if not files:
        return None
    seg = bytearray(spill.SEGMENT_HEADER + spill.SEGMENT_RECORDS * 16)
    newest = None
    with open(files[-1], "rb") as f:
        pos = 0
        while True:
            n, _, sound = spill.read_segment(f, pos, seg)
            if not sound:
                break
            newest = struct.unpack_from("<I", seg, 16 * n)[0] + wire.EPOCH_UNIX
            pos += 16 + 16 * n
    return newest


def held_at_a_stop(flash):
    """What a stopped plug held: (its newest slot, unix s; the readings RTC memory alone
    held, which a power cut takes)."""
    keep = Keep(FileRTC(flash / ".rtc-memory"))
    _, count = keep.restore()
    buf, off = keep.records()
    newest = [struct.unpack_from("<I", buf, off + 16 * (count - 1))[0] + wire.EPOCH_UNIX] \
        if count else []
    on_flash = spilled_newest(flash)
    return max(newest + ([on_flash] if on_flash is not None else [])), count


def tear_the_newest_segment(flash):
    """Cut the newest file short in its last segment, as a reset during its write leaves it on
    a file system that commits what was written (littlefs would keep the file as it was
    before the write; a corrupt flash can do worse): the slots (unix s) of its readings.
    A newest file with no whole segment is the kill's own doing (it came during that file's
    first write, on a busy machine): it goes, as if the kill had come just before, and the
    one before it is torn (RTC memory, which the kill keeps, still holds its readings)."""
    seg = bytearray(spill.SEGMENT_HEADER + spill.SEGMENT_RECORDS * 16)
    last = None
    while last is None:
        newest = spill_files(flash)[-1]
        with open(newest, "rb") as f:
            pos = 0
            while True:
                n, _, sound = spill.read_segment(f, pos, seg)
                if not sound:
                    break
                last = (pos, n, [struct.unpack_from("<I", seg, 16 + 16 * i)[0] +
                                 wire.EPOCH_UNIX for i in range(n)])
                pos += 16 + 16 * n
        if last is None:
            os.remove(newest)
    pos, n, slots = last
    with open(newest, "r+b") as f:
        f.truncate(pos + 16 + 16 * (n // 2))
    return set(slots)


def all_stored(data, node, first, until, lost=()):
    """Whether the node's power feed holds every slot from first to until (unix s) but those
    in `lost`, as the running collector has them."""
    have = stored_yet(data, node)
    return all(t in have or t in lost for t in range(first, until, INTERVAL))


def outage(broker, collectors, simnodes, data, flash, node, days, ahead_h, cut=False):
    """A free-running plug from `days` + ahead_h hours ago, its collector up until the plug's
    first readings are on disk, then down until the plug's flash holds `days` more of node
    time (and then, with cut, the plug killed at once: SIGKILL): (the plug, its start, the
    node time the collector last stored, the node time then). The flash says how far the plug
    has got, not its state: a state is said at most once a second of real time, which may be
    hours of node time. Before it is down the plug runs ahead of what is stored by up to its
    RAM ring (5.7 h), held there by wattsim.clock; once it is down the plug's clock waits
    PATIENCE_S of real time for an ack before it takes the collector for away."""
    start = aligned_past(int(days * 86400) + ahead_h * 3600)
    c = collectors(broker.url, data, commit_interval=5)
    c.wait_for("listening on")
    plug = simnodes(broker.port, node, "--profile", "constant:500", "--speed", "max",
                    "--start", start, "--then-realtime", "--flash", flash,
                    "--ack-patience", PATIENCE_S)
    wait_until("the first readings stored", lambda: stored_yet(data, node), 60)
    c.kill()
    down = max(stored(data, node))
    wait_until("%s days of node time without the collector on the flash" % days,
               lambda: (spilled_newest(flash) or 0) >= down + days * 86400, 300)
    if cut:
        os.kill(plug.firmware_pid(), signal.SIGKILL)
        plug.proc.wait(30)
    return plug, start, down, spilled_newest(flash)


def back(broker, collectors, data, node, first, held, lost=(), plug=None):
    """The collector back (then `plug` started, if given): every slot from first on that the
    plug has made is stored, but `lost`, up to a state the plug says after its slot `held`
    (the newest it held when the collector came back: the state the broker retains may be
    far older, said before the outage raced); the collector."""
    c = collectors(broker.url, data, commit_interval=5)
    c.wait_for("listening on")
    watch = Recorder(broker, "wattlog/%s/state" % node, name=node + "-back")

    def caught_up():
        states = watch.states(node)
        if not states or states[-1]["time"] <= held:
            return False
        return all_stored(data, node, first, states[-1]["time"] - 60, lost)

    try:
        if plug is not None:
            plug = plug()
        wait_until("every reading of the outage stored", caught_up, 400)
    finally:
        watch.close()
    return c, plug


def test_the_collector_down_for_a_week(broker, collectors, simnodes, tmp_path):
    """7 days of node time at 10 s without the collector (60,480 readings; the plug's spill
    holds 7.3 days): then every reading is stored, none dropped (though the broker may have
    queued some for the collector, the plug must not drop them). The
    plug starts 7 days and 4 h ago, so the outage cannot outrun its spill while the collector
    comes back."""
    began = time.monotonic()
    data, flash = tmp_path / "data", tmp_path / "flash"
    plug, start, down, up = outage(broker, collectors, simnodes, data, flash, "week", 7, 4)
    c, _ = back(broker, collectors, data, "week", start, up)
    plug.stop()
    taken(broker)  # its last batches, at the broker when it ended
    assert c.stop() == 0
    s = summaries(plug.output)[-1]
    account("collector down 7 days of node time (10 s)", data, [("week", 500, plug.output)],
            began)
    assert up - down >= WEEK_S, (down, up)
    assert s["dropped"] == 0 and s["spill_writes"] >= WEEK_S // INTERVAL // spill.SEGMENT_RECORDS


def test_a_power_cut_during_a_long_outage(broker, collectors, simnodes, tmp_path):
    """A day without the collector, then the power goes (SIGKILL, RTC memory gone) and comes
    back 10 min later: lost are at most the readings RTC memory alone held - the stated bound,
    a segment's worth (126 slots, 21 min at 10 s) - and every other one is stored."""
    began = time.monotonic()
    data, flash = tmp_path / "data", tmp_path / "flash"
    start = outage(broker, collectors, simnodes, data, flash, "cut", 1, 12, cut=True)[1]
    newest, in_rtc = held_at_a_stop(flash)  # the power cut: RTC memory goes below
    again_at = newest + 600
    assert again_at < time.time() - 3600  # it was cut before it reached the present
    at_risk = set(range(newest - (in_rtc - 1) * INTERVAL, newest + INTERVAL, INTERVAL))
    c, plug2 = back(broker, collectors, data, "cut", start, again_at, at_risk | set(
        range(newest + INTERVAL, again_at, INTERVAL)), lambda: simnodes(
        broker.port, "cut", "--profile", "constant:500", "--speed", "max", "--start", again_at,
        "--then-realtime", "--flash", flash, "--power-cut"))
    plug2.stop()
    taken(broker)  # its last batches, at the broker when it ended
    assert c.stop() == 0
    cut_run = (start, (newest - start) // INTERVAL + 1, 0, 0)

    def bounded(node, boot, lost, run):
        assert lost <= (in_rtc if boot == 0 else 0), (boot, lost, in_rtc)

    account("power cut during a long outage (lost <= %d)" % in_rtc, data,
            [("cut", 500, [cut_run] + runs_of(plug2.output))], began, bounded)
    assert in_rtc <= spill.SEGMENT_RECORDS
    assert summaries(plug2.output)[-1]["kept"] > 5000
    assert all_stored(data, "cut", start, newest - (in_rtc - 1) * INTERVAL)  # all but those


def test_a_torn_segment(broker, collectors, simnodes, tmp_path):
    """Half a day without the collector; the plug resets (SIGKILL, RTC memory kept: the
    watchdog) during a segment's write, which is left torn. Nothing wrong is stored (account:
    every value is the plug's, at slots it made), and the readings lost are exactly those of
    the torn segment, which the plug counts (spill_torn) and says."""
    began = time.monotonic()
    data, flash = tmp_path / "data", tmp_path / "flash"
    start = outage(broker, collectors, simnodes, data, flash, "torn", 0.5, 12, cut=True)[1]
    newest, _ = held_at_a_stop(flash)
    torn = tear_the_newest_segment(flash)
    again_at = newest + INTERVAL
    c, plug2 = back(broker, collectors, data, "torn", start, again_at, torn, lambda: simnodes(
        broker.port, "torn", "--profile", "constant:500", "--speed", "max", "--start",
        again_at, "--then-realtime", "--flash", flash))
    plug2.stop()
    taken(broker)  # its last batches, at the broker when it ended
    assert c.stop() == 0
    s = summaries(plug2.output)[-1]
    first_run = (start, (newest - start) // INTERVAL + 1, 0, 0)
    lost_slots = {}

    def counted(node, boot, lost, run):
        lost_slots[boot] = lost

    account("a torn segment (%d readings)" % len(torn), data,
            [("torn", 500, [first_run] + runs_of(plug2.output))], began, counted)
    assert lost_slots == {0: len(torn), 1: 0}
    assert s["spill_torn"] == len(torn) > 0
    assert not torn & set(stored(data, "torn"))
    assert "dropped, never sent" in plug2.output
