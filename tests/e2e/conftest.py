"""conftest.py - end-to-end fixtures: a private mosquitto on a free loopback port with
authentication and the ACL on (tools/lib/broker.py), and the collector and simulated plugs
(the rig package, tools/lib/rig), each stopped when its test ends, pass or fail.

Most plugs run as fast as they go (simnode --speed max) and a test ends on a condition. A test
that must run against the wall clock (a broker restarted, a process killed at a moment, a
real-time bound) is marked @pytest.mark.realtime and says why in its docstring; those take the
longest, so they are collected first: run side by side (pytest-xdist, one test at a time to
each worker: tools/lib/testrun.py), they start first and the quick ones fill in around them."""

import fcntl
import json
import subprocess

import pytest

from helpers import REPO, pg_server  # first: it puts tools/lib (the rig) on sys.path
from faultload import ROWS_FILE
from rig import Broker, Collector, SimPlug


@pytest.fixture(scope="session")
def built(tmp_path_factory, worker_id):
    """tools/build, once for the whole run: every test that runs the .mpy files (simnode
    --mpy) or copies build/device shares one build. Two builds side by side would delete each
    other's build/ under the plugs that run from it, so the first worker to get here builds,
    under a lock the others wait on (their base temp dirs share a parent, one per run)."""
    if worker_id == "master":  # not under xdist: nobody else builds
        _build()
        return REPO / "build"
    root = tmp_path_factory.getbasetemp().parent
    with open(root / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "build.done").exists():
            _build()
            (root / "build.done").write_text("built\n")
    return REPO / "build"


def _build():
    done = subprocess.run([str(REPO / "tools" / "build")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, "tools/build failed:\n" + done.stdout + done.stderr


@pytest.fixture
def broker(tmp_path):
    with Broker(str(tmp_path / "mosquitto"), move_if_taken=True) as b:
        yield b


@pytest.fixture
def pg():
    """A private PostgreSQL for one test, removed after it."""
    server = pg_server()
    yield server
    server.close()


@pytest.fixture
def collectors():
    """start(url, data, **kw): rig.Collector(url, data, **kw), `wattlog collect` (kw:
    commit_interval, password_file, store, listen, args...), killed when the test ends; for
    the url of a Broker it logs in with that broker's collector password file."""
    started = []

    def start(url, data, **kw):
        c = Collector(url, data, **kw)
        started.append(c)
        return c
    yield start
    for c in started:
        c.kill()


@pytest.fixture
def simnodes(broker):
    """start(port, node_id, *args, via=broker): a simulated plug logged in with its own
    credentials, provisioned on `via` (the test's broker unless it runs another)."""
    started = []

    def start(port, node_id, *args, via=None):
        n = SimPlug(port, node_id, *args, broker=via or broker)
        started.append(n)
        return n
    yield start
    for n in started:
        n.stop()


def pytest_configure(config):
    config.addinivalue_line("markers", "realtime: runs against the wall clock (its docstring says "
                                       "why); collected first")
    config.addinivalue_line("markers", "both_stores: a dashboard test that also runs on a collector "
                                       "storing into PostgreSQL (test_dashboard.py)")


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.get_closest_marker("realtime") is None)  # stable


def pytest_sessionstart(session):
    """A new run starts a new fault table (in the main process, not in pytest-xdist's workers)."""
    if not hasattr(session.config, "workerinput") and ROWS_FILE.exists():
        ROWS_FILE.unlink()


def pytest_terminal_summary(terminalreporter):
    """The fault suite's table (test_faults.py, faultload.py), also kept in build/test-results/faults.txt."""
    if not ROWS_FILE.exists():
        return
    rows = sorted(json.loads(line) for line in ROWS_FILE.read_text().splitlines())
    lines = ["%-58s %9s %9s %6s %7s" % ("fault scenario", "produced", "stored", "lost", "time s")]
    for scenario, produced, stored, lost, seconds in rows:
        lines.append("%-58s %9d %9d %6d %7.0f" % (scenario, produced, stored, lost, seconds))
    terminalreporter.write_sep("-", "fault suite: readings produced / stored / lost")
    for line in lines:
        terminalreporter.write_line(line)
    out = REPO / "build" / "test-results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "faults.txt").write_text("\n".join(lines) + "\n")
