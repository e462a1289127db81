"""test_robustness.py - the node never boot-loops: a crash is logged to flash and the plug
restarts; three crashes in a row leave it in safe mode; a broken config.json runs on defaults
and says what is wrong on the log topic. The plugs run as fast as they go (simnode --speed
max) and each test ends when its plug's run has: the one that must follow the collector's
real clock says why it runs in real time."""

import json
import os

import pytest

from helpers import aligned_past, wattlog
from rig import Recorder, taken


def test_crashes_restart_then_safe_mode(broker, simnodes, tmp_path):
    flash = tmp_path / "flash"
    node = simnodes(broker.port, "crashy", "--flash", flash, "--start", aligned_past(3600),
                    "--speed", "max", "--crash-after", 60)
    node.proc.wait(120)
    out = node.proc.stdout.read()
    assert node.proc.returncode == 0, out
    assert out.count("simnode: the node reset itself") == 3
    assert "safe mode: the node crashed 3 times in a row" in out
    log = (flash / "crash.log").read_text()
    assert log.count("crash at node time") == 3
    assert "simulated crash" in log
    assert (flash / "crashes").read_text() == "0"  # cleared: the next reset tries the app again
    assert json.loads((flash / "energy.json").read_text())["writes"] == 3  # a checkpoint per crash


def test_a_broken_config_runs_on_defaults_and_says_why(broker, simnodes):
    c = Recorder(broker, "wattlog/odd/log", name="robust-test")
    try:
        node = simnodes(broker.port, "odd", "--start", aligned_past(600), "--speed", "max",
                        "--config", json.dumps({"interval_s": "ten", "colour": "red",
                                                "calibration": {"power_gain": 9}}))
        s = node.finish()
        said = ("interval_s must be a int, not 'ten'; using 10", "config key 'colour' is unknown",
                "power_gain = 9", "running uncalibrated")
        c.wait(lambda: all(w in c.text() for w in said), "the plug's words about its config",
               10)  # it said them before it ended
    finally:
        c.close()
    assert s["interval_s"] == 10 and s["produced"] >= 60  # ran, on the default interval


def test_readings_before_the_clock_is_set_are_stamped_once_it_is(broker, collectors, simnodes,
                                                                  tmp_path):
    """A plug after a power cut: RTC at 2000-01-01, the LAN's NTP server answers only after
    95 s. Nothing is stamped by the unset clock; once NTP answers, the readings since boot
    land on the slots they were measured in, and every later slot follows without a gap."""
    collector = collectors(broker.url, tmp_path / "data", commit_interval=300)
    collector.wait_for("listening on")
    start = aligned_past(900)
    s = simnodes(broker.port, "late-clock", "--start", start, "--speed", "max", "--profile",
                 "constant:750", "--ntp-after", 95).finish()
    taken(broker)  # its last batches, at the broker when it ended
    assert collector.stop() == 0
    rows = wattlog("export", "--fill", "--data", tmp_path / "data", "--feed", "late-clock/power").splitlines()[1:]
    times = [int(r.split(",")[0]) for r in rows]
    assert times[0] == start and times == list(range(start, times[-1] + 1, 10))
    assert all(r.endswith(",750") for r in rows)
    assert len(rows) == s["produced"]


def test_the_energy_total_survives_a_reset_and_a_power_cut(broker, simnodes, tmp_path):
    """The same plug three times: a first run ends cleanly (a flash checkpoint); after a reset
    the total resumes from RTC memory; after a power cut from the checkpoint, and the plug
    says on its log how much it may be missing."""
    flash = tmp_path / "flash"
    c = Recorder(broker, "wattlog/steady/log", "wattlog/steady/status", name="energy-test")
    try:
        run = lambda *extra: simnodes(broker.port, "steady", "--flash", flash, "--profile",
                                      "constant:2000", "--start", aligned_past(1800),
                                      "--speed", "max", *extra).finish()
        first = run()
        assert first["energy_from"] == "none" and first["energy_wh"] >= 990
        again = run()  # RTC memory kept: a reset, not a power cut
        assert again["energy_from"] == "rtc" and again["energy_wh"] >= 2 * 990
        cut = run("--power-cut")
        assert cut["energy_from"] == "checkpoint"
        assert cut["energy_wh"] >= again["energy_wh"]  # the clean stop checkpointed it
        c.wait(lambda: c.on("wattlog/steady/status").count("offline") >= 3,
               "each run's \"offline\"", 10)  # a run's "offline" comes after all else it said
    finally:
        c.close()
    said = [p for p in c.on("wattlog/steady/log") if p.startswith("power cut")]
    assert len(said) == 1 and "at most" in said[0] and "Wh" in said[0], c.seen


def started_at(pid):
    """When process pid started, in unix seconds (/proc: clock ticks after the system booted)."""
    with open("/proc/%d/stat" % pid) as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/stat") as f:
        booted = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    return booted + ticks / os.sysconf("SC_CLK_TCK")


@pytest.mark.realtime
def test_a_plug_without_ntp_takes_the_collector_s_clock(broker, collectors, simnodes, tmp_path):
    """RTC unset and no NTP server on the LAN: the collector answers the plug's "online" with
    its clock, and the plug's readings are stamped by it - aligned, one per second here, and
    starting within a second or two of when the plug (its firmware's process) started. In real
    time: the collector's clock is the wall clock, and so is the time the readings must be
    stamped with."""
    collector = collectors(broker.url, tmp_path / "data", commit_interval=300)
    collector.wait_for("listening on")
    watch = Recorder(broker, "wattlog/no-ntp/state", name="no-ntp-watch")
    try:
        node = simnodes(broker.port, "no-ntp", "--rtc-unset", "--interval", 1, "--profile",
                        "constant:500")
        watch.wait(lambda: len(watch.states("no-ntp")) >= 6, "six slots stamped")
        began = started_at(node.firmware_pid())
        node.stop()
    finally:
        watch.close()
    assert "log: clock set from collector; readings since boot are stamped" in node.output
    assert collector.stop() == 0
    rows = wattlog("export", "--fill", "--data", tmp_path / "data", "--feed", "no-ntp/power").splitlines()[1:]
    times = [int(r.split(",")[0]) for r in rows]
    assert len(rows) >= 5 and times == list(range(times[0], times[-1] + 1))
    assert abs(times[0] - began) <= 2
    assert all(r.endswith(",500") for r in rows[1:])  # the first second may be partly measured
