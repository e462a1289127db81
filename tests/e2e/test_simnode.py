"""test_simnode.py - tools/simnode does what its options say (issue 10 items 5, 7, 9): --faults
reaches the simulated chip (a silent chip's slots are stored as missing, not as 1502.9 W), a
fault it does not know, JSON that is not JSON and a board that does not exist each end with
one line naming the value and what it can be, and --start reads times as the wattlog CLI does
(one parser: wattlog/times.py)."""

import subprocess
import time

import pytest

import simnode
from helpers import REPO, aligned_past, wattlog
from rig import Recorder, taken
from wattlog.times import parse_time


def test_a_silent_chip_stores_missing_slots(broker, collectors, simnodes, tmp_path):
    """A CSE7766 plug whose chip sends nothing: every slot of its power feed is missing, and
    the plug says why on its log. (--faults used to be written after config.json: the chip
    kept reporting the load, 1502.9 W.)"""
    log = Recorder(broker, "wattlog/mute/log", name="faults-test")
    collector = collectors(broker.url, tmp_path / "data", commit_interval=300)
    collector.wait_for("listening on")
    try:
        s = simnodes(broker.port, "mute", "--board", "devkit-cse7766", "--faults",
                     '{"silent": true}', "--profile", "constant:1500", "--start",
                     aligned_past(600), "--speed", "max").finish()
        taken(broker)  # its last batches, at the broker when it ended
        assert collector.stop() == 0
    finally:
        log.close()
    rows = wattlog("export", "--fill", "--data", tmp_path / "data", "--feed", "mute/power").splitlines()[1:]
    assert s["produced"] >= 50 and len(rows) == s["produced"]
    assert all(r.endswith(",") for r in rows), rows[:3]  # missing, never a value
    said = log.on("wattlog/mute/log")
    assert [m for m in said if "silent" in m], said


def run_simnode(*args):
    return subprocess.run([str(REPO / "tools" / "simnode"), "--id", "x", "--broker",
                           "127.0.0.1:1"] + list(args), capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("args, says", [
    (["--board", "devkit-cse7766", "--faults", '{"nosie_every": 5}'],
     "unknown fault 'nosie_every'; the faults are checksum_every, error, flags_every, "
     "noise_every, partial_every, silent, storm_hz, wrap"),
    (["--board", "devkit-cse7766", "--faults", "not json"], "'not json' is not JSON"),
    (["--board", "devkit-cse7766", "--faults", '{"silent": 1}'],
     "fault 'silent' takes true or false, not 1"),
    (["--faults", '{"silent": true}'], "--faults needs a board whose chip is simulated"),
    (["--board", "nosuch"], "no board 'nosuch' in %s/boards; the boards are athom-plug-v3, "
                            "devkit-bl0937" % REPO),
    (["--start", "yesterday"], "'yesterday' is not a time"),
    (["--speed", "fast"], "--speed takes a whole number >= 1 or max, not 'fast'"),
    (["--speed", "0"], "--speed takes a whole number >= 1 or max, not '0'"),
])
def test_a_bad_option_ends_with_one_line(args, says):
    done = run_simnode(*args)
    assert done.returncode != 0 and done.stdout == ""
    assert says in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("text", ["now-24h", "-24h", "now", "1795000000",
                                  "2026-11-21T08:00+01:00", "2026-11-21T07:00Z", "2026-11-21"])
def test_start_takes_what_the_cli_takes(text):
    got = simnode.parse(["--id", "x", "--broker", "h:1", "--start=" + text]).start
    assert abs(got - parse_time(text)) <= 1 and isinstance(got, int)
    assert abs(parse_time("-24h") - (time.time() - 86400)) <= 1


def test_the_provisioned_config_is_the_plugs_config(broker, tmp_path):
    """--node-config is the plug's whole config.json as `wattlog provision` made it: a plug
    provisioned with --broadlink read answers the SP3S protocol in read mode (its status says
    so), with no --config repeating it. (simnode took only the login, key and Wi-Fi from it:
    the plug ran with Broadlink off.)"""
    import socket
    from wattlog.fleet import provision
    from rig import SimPlug
    args = broker.node_args("bl-prov")
    provision.provision(broker.auth, ["bl-prov"], "127.0.0.1", broker.port, listen="127.0.0.1",
                        broadlink="read", progress=lambda text: None)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    node = SimPlug(broker.port, "bl-prov", "--speed", "max", "--start", aligned_past(60),
                   "--config", '{"broadlink_port": %d}' % port, *args)
    s = node.finish()
    assert s["broadlink"] == "read" and s["broadlink_counts"] is not None, s
