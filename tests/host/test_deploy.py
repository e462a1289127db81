"""test_deploy.py - tools/deploy checks the board file and config.json with the node's own
checks before anything touches a plug, and plans every file with its place on the flash; on a
freshly flashed board (tools/fakeboard: littlefs holding only boot.py, driven by the real
mpremote) it makes every folder and copies every file byte for byte, again and again; a full
flash or a missing device ends it with one line, never a traceback."""

import hashlib
import json
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "lib"))

from fakeboard import FakeBoard  # noqa: E402

MPREMOTE = str(REPO / ".venv" / "bin" / "mpremote")
CONFIG = {"node_id": "desk", "broker": {"host": "10.0.0.2"},
          "wifi": {"ssid": "home", "password": "correct horse"}}


def deploy(tmp_path, board, cfg, port="/dev/null", dry_run=True):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return subprocess.run([str(REPO / "tools" / "deploy"), "--port", port, "--board", board,
                           "--config", str(path)] + (["--dry-run"] if dry_run else []),
                          capture_output=True, text=True, timeout=300)


def planned(out):
    """The paths the progress lines name, in order."""
    return [line.split()[-1] for line in out.splitlines() if line.startswith("  [")]


def on_the_board(port, paths):
    """{path: sha256 hex} of each file, read on the board through mpremote (no soft reset)."""
    script = ("import hashlib, binascii\nfor p in %r:\n    with open(p, 'rb') as f:\n"
              "        print(p, binascii.hexlify(hashlib.sha256(f.read()).digest()).decode())"
              % (paths,))
    done = subprocess.run([MPREMOTE, "connect", port, "resume", "exec", script],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(line.split() for line in done.stdout.splitlines() if line.strip())


def local_file(tmp_path, board, path):
    if path == "board.json":
        return REPO / "boards" / (board + ".json")
    if path == "config.json":
        return tmp_path / "config.json"
    return REPO / "build" / "device" / path


def test_a_good_plan(tmp_path):
    done = deploy(tmp_path, "nous-a8t", CONFIG)
    assert done.returncode == 0, done.stderr
    planned = [line.split()[-1] for line in done.stdout.splitlines() if line.startswith("  [")]
    assert planned[:4] == ["board.json", "config.json", "boot.py", "main.py"]
    assert "lib/wattnode/meters/bl0937.mpy" in planned
    assert "lib/wattnode/ota/manifest.mpy" in planned  # the update's, not the one below
    assert not any("sim" in p or "profiles" in p or p.startswith("lib/wattnode/manifest.")
                   for p in planned)  # the freeze manifest is for building firmware, not a plug


def test_a_config_without_wifi_is_refused_naming_the_key(tmp_path):
    """A plug whose config names no Wi-Fi could never reach its broker again (issue 21 item
    1): the deploy, dry run included, refuses it in one sentence naming wifi.ssid and how to
    give it one, and copies nothing."""
    cfg = {k: v for k, v in CONFIG.items() if k != "wifi"}
    for config in (cfg, dict(cfg, wifi={"ssid": "", "password": ""})):
        done = deploy(tmp_path, "nous-a8t", config)
        assert done.returncode != 0
        assert "config.json has no wifi.ssid: this plug cannot join a network" in done.stderr
        assert "wattlog provision --wifi-ssid NAME" in done.stderr
        assert "[ 1/" not in done.stdout


def test_bad_input_stops_the_deploy_with_reasons(tmp_path):
    done = deploy(tmp_path, "sim", {"interval_s": 0, "node_id": "Bad Id"})
    assert done.returncode != 0
    for words in ("for the simulator, not a plug", "interval_s = 0 is outside 1..3600",
                  "node_id 'Bad Id' must be 1-32 of a-z 0-9 _ -"):
        assert words in done.stderr
    assert "[ 1/" not in done.stdout
    done = deploy(tmp_path, "no-such-plug", {})
    assert "no board 'no-such-plug'; boards/ has" in done.stderr


def test_deploy_to_a_freshly_flashed_board(tmp_path):
    """Its flash holds only boot.py, as MicroPython's first boot leaves it: every folder is
    made, every file arrives byte for byte, the board is reset; a second deploy finds them
    all there (the folders too) and copies nothing."""
    with FakeBoard(str(tmp_path / "flash.img")) as board:
        done = deploy(tmp_path, "nous-a8t", CONFIG, port=board.port, dry_run=False)
        assert done.returncode == 0, done.stdout + done.stderr + board.output()
        paths = planned(done.stdout)
        shipped = [f for f in (REPO / "build" / "device").rglob("*") if f.is_file()]
        assert len(paths) == len(shipped) + 2  # and the plug's config.json and board.json
        assert "lib/wattnode/meters/bl0937.mpy" in paths and "config.json" in paths
        deadline = time.monotonic() + 10
        while board.resets[-1:] != ["hard"]:  # mpremote's reset, at the end (100 ms later)
            assert time.monotonic() < deadline, (board.resets, board.output())
            time.sleep(0.05)
        got = on_the_board(board.port, paths)
        for path in paths:
            want = hashlib.sha256(local_file(tmp_path, "nous-a8t", path).read_bytes()).hexdigest()
            assert got.get(path) == want, path
        again = deploy(tmp_path, "nous-a8t", CONFIG, port=board.port, dry_run=False)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "deploy: %d of the files were on the plug already, unchanged" % len(paths) \
            in again.stdout


def test_a_full_flash_is_said_in_one_line(tmp_path):
    """What the board answers (no space left) is shown with the file it concerned."""
    with FakeBoard(str(tmp_path / "flash.img"), flash_kib=64) as board:
        done = deploy(tmp_path, "nous-a8t", CONFIG, port=board.port, dry_run=False)
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    last = done.stderr.strip().splitlines()
    assert len(last) == 1 and last[0].startswith("deploy: copying lib/wattnode/"), done.stderr
    assert last[0].endswith("No space left on device."), done.stderr


def test_no_device_is_said_in_one_line(tmp_path):
    """With nothing at the port: one line saying so (and which USB serial ports there are),
    before anything is built."""
    done = deploy(tmp_path, "nous-a8t", CONFIG, port="/dev/ttyUSB97", dry_run=False)
    assert done.returncode != 0 and "build:" not in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("deploy: no device at /dev/ttyUSB97 (is the plug connected"), lines
    assert lines[0].endswith("no USB serial port is connected") or "serial ports here: " in lines[0]
    shortcut = deploy(tmp_path, "nous-a8t", CONFIG, port="u97", dry_run=False)
    assert shortcut.stderr.startswith("deploy: no device at /dev/ttyUSB97 "), shortcut.stderr
