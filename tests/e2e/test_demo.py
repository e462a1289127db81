"""test_demo.py - tools/demo says only what it measured (issue 10 item 10): no promised
duration it then misses, a progress bar that reaches its end, no line printed twice in a row,
and a clean run ends with exit status 0 and the feeds table. With --ota, `wattlog ota --all`
updates the demo's plugs (issue 14, "Done when"): each confirms the new build, and `wattlog
nodes` says so. Real time: the demo backfills for --backfill seconds and runs live for
--duration seconds of wall time, as a person sees it, and an update is a real-time exchange;
one demo run checks both, since each costs half a minute. While it runs, the dashboard at
the address it prints serves the page, and the API the page reads lists the demo's plugs
(issue 13, "Done when"; tests/e2e/test_dashboard.py drives the page itself in Chromium)."""

import json
import re
import shutil
import subprocess
import time
import urllib.request

import pytest

from helpers import REPO


@pytest.mark.realtime
def test_the_demo_says_what_it_measured_and_updates_its_plugs_over_the_air(tmp_path, built):
    shutil.copytree(built / "device", tmp_path / "build")  # tools/build's, made once a run
    proc = subprocess.Popen([str(REPO / "tools" / "demo"), "--nodes", "2", "--backfill", "8",
                             "--duration", "25", "--data", str(tmp_path / "data"), "--ota",
                             "--build", str(tmp_path / "build")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in proc.stdout:  # ends when the demo does (its own --duration)
            lines.append(line.rstrip("\n"))
            url = re.search(r"the dashboard: (http://127\.0\.0\.1:\d+/)", line)
            if url:
                page_shows_the_plugs(url.group(1), {"washer", "fridge"})
        err = proc.stderr.read()
        assert proc.wait(timeout=240) == 0, "\n".join(lines) + err
    finally:
        if proc.poll() is None:
            proc.kill()
    table = lines.index("the update over the air ended:")
    rows = {line.split()[0]: line for line in lines[table + 2:table + 4]}
    assert set(rows) == {"washer", "fridge"}, lines[table:]
    assert all(row.split()[1:5] == ["0.1.0", "->", "0.1.0", "confirmed"]
               for row in rows.values()), lines[table:]
    nodes = lines.index("what each plug runs, and how its last update ended (wattlog nodes):")
    shown = {line.split()[0]: line for line in lines[nodes + 2:nodes + 4]}
    assert all(shown[n].split()[-3:] == ["0.1.0", "0.1.0", "confirmed"] for n in rows), \
        lines[nodes:]
    assert "about" not in lines[1] and "reaches the present 8 s after it starts" in lines[1]
    done = next(i for i, line in enumerate(lines) if line.startswith("backfill done in"))
    assert "(measured from the start of the demo)" in lines[done]
    assert lines[done - 1].count("[####################]") == 2  # the bars end full
    status = [line for line in lines if line.startswith("  washer") or line.startswith("  fridge")]
    assert all(a != b for a, b in zip(status, status[1:]))
    assert any(line.split()[:2] == ["id", "node"] for line in lines)


def page_shows_the_plugs(url, names, timeout_s=60.0):
    """The page at url is served, and /api/plugs (what its overview reads) lists `names`
    with a state each, within timeout_s (the plugs are still catching up)."""
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/html")
        assert b"wattlog" in r.read()
    deadline = time.monotonic() + timeout_s
    plugs = None
    while True:
        try:
            with urllib.request.urlopen(url + "api/plugs", timeout=10) as r:
                plugs = {p["node"]: p for p in json.load(r)["plugs"]}
        except OSError as e:  # the demo ended first
            raise AssertionError("the dashboard stopped (%s) before it showed %s; it showed %s"
                                 % (e, sorted(names), plugs)) from None
        if names <= set(plugs) and all(plugs[n]["state"] for n in names):
            return
        assert time.monotonic() < deadline, plugs
        time.sleep(0.5)

