"""conftest.py - what every host and end-to-end test shares: no test reads this machine's own
configuration.

Every `wattlog` verb reads /etc/wattlog/wattlog.toml when it is there (settings.py): on a
machine that runs wattlog (the README's Pi install on the machine that runs the tests), a test
would otherwise take that machine's broker, data directory, time zone and tariff. Each test
session points $WATTLOG_CONFIG, which every verb reads before the default, at an empty config
in its own temporary folder (every key its default); tests that want a config give --config,
or set it for themselves. The processes the tests start inherit it.
"""

import os
import shutil
import tempfile

_made = []


def pytest_configure(config):
    folder = tempfile.mkdtemp(prefix="wattlog-test-config-")
    _made.append(folder)
    path = os.path.join(folder, "wattlog.toml")
    with open(path, "w") as f:
        f.write("# tests/conftest.py: an empty config (every key its default) in place of "
                "/etc/wattlog's\n")
    os.environ["WATTLOG_CONFIG"] = path


def pytest_unconfigure(config):
    for folder in _made:
        shutil.rmtree(folder, ignore_errors=True)
