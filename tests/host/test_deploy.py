"""test_deploy.py - tools/deploy checks the board file and config.json with the node's own
checks before anything touches a plug, and plans every file with its place on the flash."""

import json
import subprocess

from test_build import REPO


def deploy(tmp_path, board, cfg):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return subprocess.run([str(REPO / "tools" / "deploy"), "--port", "/dev/null", "--board", board,
                           "--config", str(path), "--dry-run"], capture_output=True, text=True,
                          timeout=300)


def test_a_good_plan(tmp_path):
    done = deploy(tmp_path, "nous-a8t", {"node_id": "desk", "broker": {"host": "10.0.0.2"}})
    assert done.returncode == 0, done.stderr
    planned = [line.split()[-1] for line in done.stdout.splitlines() if line.startswith("  [")]
    assert planned[:4] == ["board.json", "config.json", "boot.py", "main.py"]
    assert "lib/wattnode/meters/bl0937.mpy" in planned
    assert not any("sim" in p or "profiles" in p or "manifest" in p for p in planned)


def test_bad_input_stops_the_deploy_with_reasons(tmp_path):
    done = deploy(tmp_path, "sim", {"interval_s": 0, "node_id": "Bad Id"})
    assert done.returncode != 0
    for words in ("for the simulator, not a plug", "interval_s = 0 is outside 1..3600",
                  "node_id 'Bad Id' must be 1-32 of a-z 0-9 _ -"):
        assert words in done.stderr
    assert "[ 1/" not in done.stdout
    done = deploy(tmp_path, "no-such-plug", {})
    assert "no board 'no-such-plug'; boards/ has" in done.stderr
