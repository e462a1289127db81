"""test_imports.py - the import graph (tools/lib/importgraph.py) of the collector (host/wattlog)
and the node (lib/wattnode), read from the source: no import circle on either side, lazy
imports inside functions included (on the node a circle also keeps both modules in the heap:
neither can be forgotten), and the collector's layers run one way. This is how tools/test
runs the check (tools/test host)."""

import pathlib
import re

import importgraph  # tools/lib, on the path by tests/host/conftest.py

TESTS = pathlib.Path(__file__).resolve().parents[1]


def test_neither_side_has_an_import_circle_and_the_layers_run_one_way():
    edges = importgraph.graph()
    assert any(name.startswith("wattnode.ota.") for name in edges), sorted(edges)
    circles = importgraph.circles(edges)
    assert circles == [], "import circles: %s" % circles
    assert importgraph.layering(edges) == []


def test_an_import_inside_a_function_is_an_arrow(tmp_path):
    """`from package import module` in a function's body closes a circle as a top-level
    import does (node.py's lazy imports of the update's parts once did)."""
    (tmp_path / "a.py").write_text("import gc\n\n\ndef later():\n    from pkg import b\n"
                                   "    return b\n")
    (tmp_path / "b.py").write_text("from pkg.a import later\n")
    known = {"pkg": None, "pkg.a": str(tmp_path / "a.py"), "pkg.b": str(tmp_path / "b.py")}
    edges = {name: importgraph.imports(name, path, known)
             for name, path in known.items() if path}
    assert edges == {"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}}
    assert importgraph.circles(edges) == [["pkg.a", "pkg.b"]]


def test_no_test_module_imports_another():
    """What tests share lives in modules of their own (tests/device/rig.py and netrig.py,
    tests/host/served.py, tests/e2e/plugs.py ..., tools/lib/rig), never in another test
    module: a test module is what the runners collect, and one imported by another runs its
    import-time set-up twice and ties the two together."""
    found = []
    for path in sorted(TESTS.rglob("test_*.py")):
        for no, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"\s*(from|import)\s+test_\w+", line):
                found.append("%s:%d: %s" % (path.relative_to(TESTS), no, line.strip()))
    assert found == [], "test modules that import another:\n" + "\n".join(found)
