"""safe.py - safe mode: the node app does not start, so mpremote can always get in.

boot.py calls check() at every boot; main.py starts the node only when `reason` is None.
Safe mode is entered when
  - repl.reboot(safe=True) asked for it (the file SAFE_FLAG, removed as it is read),
  - the board's button is held down while the plug boots (pressed throughout HOLD_MS), or
  - the node crashed MAX_CRASHES times in a row (start.py counts crashes in a file and logs
    them to crash.log); the count is then cleared, so the next reset tries the app again.
    A version just confirmed by an update is sent back to the previous one instead (boot.py,
    which runs first: its grace period, wattnode/ota/trial.py).
On the unix port there is no button to read (machine has no Pin): only the crash rule applies.

It also keeps mpremote's sessions alive: after a soft reset (mpremote makes one before any
command not preceded by `resume`), a plug's watchdog armed by the node is still counting while
main.py does not run (mpremote stays in its raw REPL), so check() has the hardware layer
re-arm it to start.REPL_HOLD_S (hw/esp32.py hold_after_soft_reset); other hardware layers'
watchdogs (the unix port's) end with their process.
"""

import os
import time

from wattnode import config
from wattnode.crashes import crash_count, set_crash_count
from wattnode.start import REPL_HOLD_S

MAX_CRASHES = 3
SAFE_FLAG = "safe"
HOLD_MS = 1000
reason = None


def _button_held(board):
    try:
        from machine import Pin
    except ImportError:
        return False
    pins = board.get("pins", {})
    if not isinstance(pins.get("button"), int):
        return False
    pin = Pin(pins["button"], Pin.IN, Pin.PULL_UP if "button" in board.get("pullup", ()) else None)
    active = 0 if board.get("inverted", {}).get("button") else 1
    start = time.ticks_ms()
    while time.ticks_diff(time.ticks_ms(), start) < HOLD_MS:
        if pin.value() != active:
            return False
        time.sleep_ms(20)
    return True


def check(board_path="board.json"):
    global reason
    reason = None
    board = config.read_json(board_path, [])
    crashes = crash_count()
    try:
        os.remove(SAFE_FLAG)
        reason = "repl.reboot(safe=True) asked for it"
    except OSError:
        if crashes >= MAX_CRASHES:
            set_crash_count(0)
            reason = ("the node crashed %d times in a row (see crash.log); fix it over "
                      "mpremote, then reset" % crashes)
        elif _button_held(board):
            reason = "the button was held at boot"
    _keep_watchdog(board)
    return reason


def _keep_watchdog(board):
    if board.get("hal", "esp32") != "esp32":
        return  # another layer's watchdog (the unix port's) ends with its process
    try:
        from wattnode.hw.esp32 import hold_after_soft_reset
    except ImportError:
        return  # a plug's files on the unix port (tools/fakeboard): no ESP32 watchdog there
    hold_after_soft_reset(REPL_HOLD_S * 1000)
