"""machine.py - the simulated plug's machine module: the unix port's own, plus reset_cause()
and its constants, as an ESP32's MicroPython has them, so that firmware/boot.py can tell a
watchdog reset from the others on the simulator as it does on a plug.

tools/simnode puts this folder first on MICROPYPATH (MicroPython lets a machine.py found first
extend the built-in module, as tools/fakeboard's does). The cause is the simulated board's
register: wattsim/board.py writes it into RESET_CAUSE_FILE in the flash folder as it resets
the plug (WDT_RESET when its watchdog starved, SOFT_RESET when the node asked, as an ESP32's
machine.reset() reads back), and tools/simnode removes it before a power-on: no file reads
PWRON_RESET. It imports nothing of wattnode or wattsim: boot.py reads it before the version
it chooses is on sys.path.
"""

import sys as _sys

_path = _sys.path
_sys.path = []
from machine import *  # noqa: E402,F403  (the built-in module: nothing else is on the path)
_sys.path = _path
del _path

PWRON_RESET = 1
HARD_RESET = 2
WDT_RESET = 3
DEEPSLEEP_RESET = 4
SOFT_RESET = 5
RESET_CAUSE_FILE = ".reset-cause"  # wattsim/board.py writes it


def reset_cause():
    try:
        with open(RESET_CAUSE_FILE) as f:
            return int(f.read())
    except (OSError, ValueError):
        return PWRON_RESET


# Not kept in sys.modules: boot.py reads the cause once and lets the module go, as the plug's
# built-in machine costs no heap (the tight-heap tests run the simulator in a plug's heap).
_sys.modules.pop(__name__, None)
del _sys
