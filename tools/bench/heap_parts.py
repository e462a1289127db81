"""heap_parts.py - where the node's heap goes as it starts up (tools/bench/heap runs it on the
64-bit unix port and on the 32-bit WebAssembly port, loading the node's .mpy files).

Run from a flash folder holding config.json, board.json and sim.json (lib/wattsim's settings);
prints one line per part, the heap bytes in use after a garbage collection:
    ring                the ring of wire records (board "ring_kib")
    plug-modules        what a plug imports: the node, start.py (what main.py runs, which a
                        plug holds while it runs), its chip's driver, umqtt.simple
    spill-modules       of them, the flash spill's (spill.py, keep.py)
    simulator-modules   the simulator (lib/wattsim), plugged in as tools/simnode does, and
                        what its hardware layer and meter import (a plug has none): measured
                        after making them once and dropping them
    runtime-objects     the hardware layer's and the node's objects
    spill-at-rest       of them, the spill's: RTC memory's image, the index of its files
    spill-replaying     what sending from the flash adds: the read buffer, while the spill
                        holds readings (a batch from the flash, after an outage)
    total

Each part is a step of `mp32_steps` (tools/lib/mp32.mjs): the WebAssembly port collects garbage
only between steps, so each figure is read at the start of the step after its part.
"""

import gc
import sys

import os  # noqa: F401  what the port provides, in use before the node starts: not counted
import socket  # noqa: F401


def used():
    gc.collect()
    return gc.mem_alloc()


def steps():
    yield  # the garbage of starting this script is collected before anything is counted
    base = used()
    from wattnode import board as boardfile, config, forget, wire
    from wattnode.ring import Ring
    problems = []
    cfg = config.load("config.json", problems)
    board = config.read_json("board.json", problems)
    yield
    a = used()
    ring = Ring(boardfile.ring_kib(board) * 1024 // wire.RECORD_SIZE)
    yield
    b = used()
    from wattnode import keep, spill
    yield
    b_spill = used()
    from wattnode import hw as hal, link, meters, node, relay, energy, calib, sampler, start  # noqa: F401
    from umqtt import simple  # noqa: F401
    if board.get("chip") in ("bl0937", "hlw8012"):
        from wattnode.meters import bl0937  # noqa: F401
    elif board.get("chip") in ("cse7766", "hlw8032"):
        from wattnode.meters import cse7766  # noqa: F401
    elif board.get("chip") == "bl0942":
        from wattnode.meters import bl0942  # noqa: F401
    yield
    c = used()
    import wattsim
    wattsim.install()
    meters.create(board, hal.load(board, cfg), calib.Calibration())  # their modules stay
    yield
    d = used()
    hw = hal.load(board, cfg)
    n = node.Node(cfg, board, hw, problems, True, ring, spill_kib=boardfile.spill_kib(board))
    yield
    e = used()
    k = spill.Spill(keep.Keep(hw.rtc), boardfile.spill_kib(board) // 4, "spill-bench", len)
    yield
    f = used()
    r = Ring(256)
    r.behind = k
    from wattnode import spillboot
    spillboot.boot(k, r, 10)  # the node loads it for this, then forgets it
    spillboot = None
    forget("spillboot")
    for i in range(600):  # an outage longer than this small ring: the oldest are on flash
        r.append(i * 10, 5000, i, 23000, 2170)
    yield
    g = used()
    r.peek(64)  # the first batch comes from the flash
    yield
    h = used()
    print("part ring %d" % (b - a))
    print("part spill-modules %d" % (b_spill - b))
    print("part spill-at-rest %d" % (f - e))
    print("part spill-replaying %d" % (h - g))
    print("part plug-modules %d" % (c - b + a - base))
    print("part simulator-modules %d" % (d - c))
    print("part runtime-objects %d" % (e - d))
    print("part total %d" % (e - base))
    del n
    sys.exit(0)


if sys.platform == "webassembly":
    mp32_steps = steps()
else:
    for _ in steps():
        pass
