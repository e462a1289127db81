"""heap_parts.py - where the node's heap goes, on the MicroPython unix port (tools/bench/heap).

Run from a flash folder holding config.json and board.json; prints one line per part:
heap bytes in use after gc.collect(), measured as the node starts up.
"""

import gc
import sys


def used():
    gc.collect()
    return gc.mem_alloc()


base = used()
from wattnode import board as boardfile, config, wire  # noqa: E402
from wattnode.ring import Ring  # noqa: E402
problems = []
cfg = config.load("config.json", problems)
board = config.read_json("board.json", problems)
a = used()
ring = Ring(boardfile.ring_kib(board) * 1024 // wire.RECORD_SIZE)
b = used()
from wattnode import hw as hal, link, meters, node, relay, energy, calib, sampler  # noqa: E402,F401
from umqtt import simple  # noqa: E402,F401
if board.get("chip") in ("bl0937", "hlw8012"):
    from wattnode.meters import bl0937  # noqa: F401
elif board.get("chip") in ("cse7766", "hlw8032"):
    from wattnode.meters import cse7766  # noqa: F401
elif board.get("chip") == "bl0942":
    from wattnode.meters import bl0942  # noqa: F401
c = used()
from wattnode.hw import sim, simchips  # noqa: E402,F401
from wattnode import profiles  # noqa: E402,F401
d = used()
hw = hal.load(board, cfg)
n = node.Node(cfg, board, hw, problems, True, ring)
e = used()
print("part ring %d" % (b - a))
print("part plug-modules %d" % (c - b + a - base))
print("part simulator-modules %d" % (d - c))
print("part runtime-objects %d" % (e - d))
print("part total %d" % (e - base))
sys.exit(0)
