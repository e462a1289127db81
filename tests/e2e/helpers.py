"""helpers.py - small things the end-to-end tests share that are no running part: the wattlog
CLI run once, slot-aligned times in the past, a secret file. The running parts (broker,
collector, recorder, simulated plug) are the rig package, tools/lib/rig."""

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "lib"))  # the rig; tools/lib is not a package
sys.path.append(str(REPO / "lib"))  # lib/wattsim: its profiles compute what the plugs send

from rig import SimPlug as SimNode, summary  # noqa: E402,F401  (test_cluster.py's names)


def wattlog(*argv):
    """Run the wattlog CLI; its standard output."""
    return subprocess.run([sys.executable, "-m", "wattlog.cli"] + [str(a) for a in argv],
                          capture_output=True, text=True, check=True, timeout=60).stdout


def aligned_past(seconds, interval=10):
    t = int(time.time()) - seconds
    return t - t % interval


def secret_file(path, text):
    """A secret (a token, a password) in a file created 0600 from the start, as wattlog
    provision makes them; its path."""
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    return str(path)


def pg_server():
    """A private PostgreSQL (tools/lib/pgserver.py), started; the test is skipped where none is
    installed."""
    import pytest
    pgserver = pytest.importorskip("pgserver")
    try:
        return pgserver.PgServer().start()
    except pgserver.NotInstalled as e:  # one that fails to start fails the test
        pytest.skip("%s" % e)
