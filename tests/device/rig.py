"""rig.py - a real board file with a simulated chip, its driver, and a clock the test moves.
Importing it plugs the simulator (lib/wattsim) into the node, as tools/simnode does."""

import gc
import json
import sys

import micropython
import unittest

import wattsim
from wattnode import meters
from wattnode.calib import Calibration
from wattsim.board import Board

import os
import scratch

wattsim.install()

HERE = __file__.rsplit("/", 1)[0] if "/" in __file__ else "."
HERE = HERE if HERE.startswith("/") else os.getcwd() + "/" + HERE
BOARDS = HERE + "/../../boards/"
START_UNIX = 1795000000  # node time starts here (a multiple of 10 s)


def board_file(name, **changes):
    with open(BOARDS + name + ".json") as f:
        board = json.load(f)
    board.update(changes)
    board["hal"] = "sim"
    return board


class Rig:
    def __init__(self, board, profile="constant:1000", faults=None, cal=None, start=START_UNIX):
        self.board = board_file(board) if isinstance(board, str) else board
        sim = {"profile": profile, "start": start, "speed": 1, "faults": faults or {}}
        self.hw = Board(self.board, sim=sim, flash_dir=scratch.DIR)
        self.clock = self.hw.clock
        self.chip = self.hw.chip
        self.meter = meters.create(self.board, self.hw, Calibration(cal))

    def run(self, ms, poll_ms=200):
        """Advance node time by ms, polling the driver every poll_ms."""
        end = self.clock.time_ms() + ms
        while self.clock.time_ms() < end:
            self.clock.advance_ms(min(poll_ms, end - self.clock.time_ms()))
            self.meter.poll()

    def window(self, ms, poll_ms=200):
        """One measurement window of ms; (take() result, window energy in dJ, truth in dJ)."""
        self.meter.take()
        e0 = self.chip.truth.energy_uj100(self.clock.time_ms())
        self.run(ms, poll_ms)
        ok = self.meter.take()
        truth = (self.chip.truth.energy_uj100(self.clock.time_ms()) - e0) // 1000
        return ok, self.meter.win_energy_dj, truth


def need_sockets():
    """Skips the calling test where the port has no sockets (the WebAssembly port that
    tools/lib/mp32.mjs runs: the device tests' 32-bit target), saying so."""
    if sys.platform == "webassembly":
        raise unittest.SkipTest("needs a socket; the 32-bit WebAssembly port has none")


def close(a, b, rel):
    return abs(a - b) <= abs(b) * rel


def allocates(fn):
    """True if fn() needs the heap: it runs with the heap locked. (A no-argument callable:
    a call with *args would itself allocate.)"""
    micropython.heap_lock()
    try:
        fn()
        return False
    except MemoryError:
        return True
    finally:
        micropython.heap_unlock()


def fresh_dir(path):
    """An empty folder at path (made if missing), as a plug's flash root for a test."""
    try:
        os.mkdir(path)
    except OSError:
        pass
    for name in os.listdir(path):
        os.remove(path + "/" + name)


def fill_heap(free_bytes):
    """Blocks that leave about free_bytes of the heap free, as on a plug with little left:
    filled until allocations fail (the collector has run then: no garbage is left to be
    freed later, as there would be after filling to a gc.mem_free() figure), down to 16-byte
    blocks for the holes, then let go of until free_bytes are free. Skips the calling test on
    the WebAssembly port, whose heap grows and is collected only between its host's steps."""
    if sys.platform == "webassembly":
        raise unittest.SkipTest("the 32-bit WebAssembly port's heap cannot be filled to a "
                                "figure (it grows, and is collected only between steps)")
    hold = [None] * 16384  # made first: no garbage of its own as it fills
    n = 0
    for size in (4096, 256, 16):
        while n < len(hold):
            try:
                hold[n] = bytearray(size)
            except MemoryError:
                break
            n += 1
    gc.collect()
    while n and gc.mem_free() < free_bytes:
        n -= 1
        hold[n] = None
        gc.collect()
    return hold

