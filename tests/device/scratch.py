"""scratch.py - the device tests' own folder for the files they make (a plug's flash, a config),
so that two test runs side by side never share one: tools/test makes a fresh one per run and
names it in WATTNODE_TEST_DIR (tools/lib/testrun.py); run by hand, /tmp/wattnode-device-tests.
The 32-bit port has no getenv: its file system is its own, in memory."""

import os

DIR = (os.getenv("WATTNODE_TEST_DIR") if hasattr(os, "getenv") else None) or \
    "/tmp/wattnode-device-tests"
try:
    os.mkdir(DIR)
except OSError:
    pass  # there already
