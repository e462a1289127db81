"""faultload.py - the fault suite's load (test_faults.py; test_influx.py and test_stall.py use
it too): plugs at constant loads of their own (500, 750, 1000 W...: a reading in another
plug's feed would show) paced at SPEED times real time, run to their end, and what the
collector stored of them. ROWS_FILE is where each fault scenario adds its row of the
produced / stored / lost table conftest.py prints."""

import os
import time

import numpy as np

from helpers import REPO
from wattlog.store.feeds import Registry
from wattlog.store.phpfina import Feed, FeedError

SPEED = 100
INTERVAL = 10
# One JSON line per scenario: (scenario, produced, stored, lost, seconds). A file, not a list:
# the scenarios may run in other processes (pytest-xdist); conftest.py prints the table.
ROWS_FILE = REPO / "build" / "test-results" / "fault-rows.jsonl"


def stored(data, node):
    """{slot time: watts} of every slot of node's power feed that holds a value."""
    entry = Registry(str(data)).find(node, "power")
    if entry is None:
        return {}
    feed = Feed.open(os.path.join(str(data), "phpfina"), entry["id"])
    values = feed.read(0, feed.npoints())
    return {feed.time(i): float(v) for i, v in enumerate(values) if not np.isnan(v)}


def stored_yet(data, node):
    """stored(), while the collector runs: {} while it is still making the node's feeds."""
    try:
        return stored(data, node)
    except (FeedError, OSError, ValueError):
        return {}


def storing(data, names):
    """Whether the collector has stored readings of every plug named: read while it writes,
    so a feed it is creating at that moment (in feeds.json, its .meta not there yet) counts
    as nothing stored yet."""
    try:
        return all(stored(data, node) for node in names)
    except (FeedError, OSError, ValueError):
        return False


def start_plugs(simnodes, port, names, seconds, *extra, speed=SPEED):
    start = int(time.time()) - seconds * speed
    start -= start % INTERVAL
    return [simnodes(port, name, "--profile", "constant:%d" % (500 + 250 * i), "--speed", speed,
                     "--start", start, "--batch-max", 16, *extra)
            for i, name in enumerate(names)]


def finish(plugs, timeout_s=120):
    outs = []
    deadline = time.monotonic() + timeout_s
    for p in plugs:
        try:
            out, _ = p.proc.communicate(timeout=max(1, deadline - time.monotonic()))
        except Exception:
            p.proc.kill()
            out, _ = p.proc.communicate()
            raise AssertionError("a plug did not finish:\n" + out[-3000:])
        p.output = out
        assert p.proc.returncode == 0, out[-3000:]
        outs.append(out)
    return outs


def watts(i):
    return 500 + 250 * i
