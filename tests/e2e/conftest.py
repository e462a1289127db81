"""conftest.py - end-to-end fixtures: a private mosquitto on a free loopback port, and the
collector and simulated plugs (helpers.py), each stopped when its test ends, pass or fail."""

import sys

import pytest

from helpers import REPO, Collector, SimNode

sys.path.insert(0, str(REPO / "tools" / "lib"))

from broker import Broker  # noqa: E402  (tools/lib is not a package)


@pytest.fixture
def broker(tmp_path):
    with Broker(str(tmp_path / "mosquitto")) as b:
        yield b


@pytest.fixture
def collectors():
    started = []

    def start(url, data, **kw):
        c = Collector(url, data, **kw)
        started.append(c)
        return c
    yield start
    for c in started:
        c.kill()


@pytest.fixture
def simnodes():
    started = []

    def start(port, node_id, *args):
        n = SimNode(port, node_id, *args)
        started.append(n)
        return n
    yield start
    for n in started:
        n.stop()
