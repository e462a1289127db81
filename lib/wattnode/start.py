"""start.py - start-up, Ctrl-C and crash handling: what firmware/main.py runs.

Order matters for memory: config.json and board.json are read and the ring is allocated
first, while the heap is still in one piece (the ring is one block of ring_kib KiB), then the
spill behind it (its RTC image and index; spillboot.behind() loads what the boot before kept,
and spillboot.py goes again), and only then are the big modules imported. What only start-up needs (config.py, board.py, and safe.py,
which boot.py ran) is unloaded before that (wattnode.forget): about 20 KiB of a 64-bit heap
that the node's run, an update or the Broadlink protocol can use. The node then runs under
the watchdog.

Ctrl-C (at a plug's serial REPL, or mpremote entering its raw REPL) stops the node for the
REPL at once: nothing is sent (mpremote gives up on the raw REPL after about 10 s, and a
broker out of reach could hold a drain for DRAIN_MS), the readings stay in the RAM ring (the
energy total in RTC memory, as after every slot), and the link says "offline". The watchdog,
which cannot be stopped on an ESP32, is re-armed first, to REPL_HOLD_S, and renewed by every
repl helper: a session is never cut, and a plug left at the prompt resets itself REPL_HOLD_S
later and meters again. repl.start() carries on with the same node: ring, energy, relay.
Where no REPL follows (a hardware layer with repl False: the unix port's process then ends)
the node sends what it holds first.

When the loop dies of an exception, the traceback goes to CRASH_LOG on the flash (at most
CRASH_LOG_MAX bytes: older entries are dropped, so a crash loop cannot wear or fill the
flash), the crash counter in CRASHES_FILE goes up, the energy total is checkpointed and the
plug resets. The readings it held are not lost: what the flash does not hold is in RTC memory
(keep.py), and the next boot sends it first (spill.py). After 3 crashes in a row boot.py
keeps the app from starting (safe mode, see safe.py); the counter (crashes.py) goes back to 0
once the node has run crashes.HEALTHY_S without crashing.
"""

import gc
import io
import json
import sys

from wattnode import forget, wire
from wattnode.crashes import crash_count, set_crash_count
from wattnode.ring import Ring

CRASH_LOG = "crash.log"
CRASH_LOG_MAX = 4096
REPL_HOLD_S = 1800  # how long a plug stopped at the REPL waits for repl.start() before it resets
node = None     # the running node, for the REPL helpers (repl.py)
_hold = None    # the watchdog re-armed to REPL_HOLD_S while the node is stopped


def log_crash(text):
    """Append text to CRASH_LOG, keeping only its last CRASH_LOG_MAX bytes."""
    try:
        try:
            with open(CRASH_LOG) as f:
                old = f.read()
        except OSError:
            old = ""
        new = (old + text)[-CRASH_LOG_MAX:]
        with open(CRASH_LOG, "w") as f:
            f.write(new)
    except OSError:
        pass


def main(config_path="config.json", board_path="board.json"):
    from wattnode import board as boardfile, config
    problems = []
    cfg = config.load(config_path, problems)
    board = config.read_json(board_path, problems)
    board_problems, meter_ok = boardfile.check(board)
    problems.extend(board_problems)
    ring_kib = boardfile.ring_kib(board)
    spill_kib = boardfile.spill_kib(board)
    no_wifi = config.no_wifi(cfg, config_path)
    del boardfile, config
    forget("board", "config", "safe")
    gc.collect()
    ring = Ring(ring_kib * 1024 // wire.RECORD_SIZE)  # while the heap is whole
    from wattnode import hw as hal, spillboot
    hw = hal.load(board, cfg)
    spillboot.behind(ring, hw.rtc, spill_kib, cfg["interval_s"], problems.append)  # and its buffers
    del spillboot
    forget("spillboot")
    gc.collect()  # the spill's start-up work is gone before the node's modules come
    from wattnode.node import Node
    if no_wifi and hw.wireless:  # said at every boot: the console is all such a plug has
        print("wattnode: " + no_wifi)
        problems.append(no_wifi)
    global node
    node = Node(cfg, board, hw, problems, meter_ok, ring, lambda: set_crash_count(0), config_path)
    print("wattnode %s: board %r, interval %d s, ring %d records, spill %d, kept %d"
          % (node.node_id, board.get("name"), cfg["interval_s"], ring.capacity,
             node.spill.capacity(), ring.next))
    run(node)


def run(node):
    """Run the node until Ctrl-C (then stopped()) or a crash (logged, then the plug resets)."""
    global _hold
    _hold = None
    try:
        node.run()
    except KeyboardInterrupt:
        stopped(node)
    except Exception as e:  # the loop must not die quietly: record it, then reset
        hw = node.hw
        try:
            text, line = crash_text(node, e)
        except MemoryError:  # whatever happens, the plug must log what it can and reset
            text, line = "crash: no heap left to describe it", None
        print(text)
        if line:
            print(line)
        log_crash(text)
        set_crash_count(crash_count() + 1)
        node.energy.checkpoint(node.sampler.energy_wh, node.sampler.rem_dj, hw.clock.time_s())
        hw.reset()


def crash_text(node, e):
    """(what CRASH_LOG keeps of a crash: the readings at stake, in words, and the traceback;
    the same for programs: "crash " and node.status() as JSON, or None without the heap)."""
    now_s = node.hw.clock.time_s()
    gc.collect()  # the dead loop's garbage: room for the status (a MemoryError may be why)
    try:
        out = io.StringIO()
        sys.print_exception(e, out)
    except MemoryError:  # the traceback at least reaches the console, if not the log
        sys.print_exception(e)
        return "crash at node time %d: %r (no heap left for its traceback)" % (now_s, e), None
    try:
        st = node.status()
        line = "crash " + json.dumps(st)
    except MemoryError:
        return "crash at node time %d (no heap left to count its readings):\n%s" % (
            now_s, out.getvalue()), None
    return ("crash at node time %d after %d readings from slot %s; %d held, %d of them unsent "
            "(%d never sent), kept across the reset by RTC memory and the flash:\n%s") % (
                now_s, st["produced"], st["first_slot"], st["unacked"], st["unsent"],
                st["never_sent"], out.getvalue()), line


def stopped(node):
    """Ctrl-C: hand the plug to the REPL at once, or drain first if the process ends."""
    global _hold
    if not node.hw.repl:
        node.drain()
        return
    _hold = node.hw.watchdog(REPL_HOLD_S * 1000)  # first: nothing after this can cut the session
    _hold.feed()
    try:
        node.link.close()
    except KeyboardInterrupt:
        pass  # a second Ctrl-C: the prompt comes all the same
    ring = node.ring
    print("wattnode: stopped; %d readings kept in RAM (%d not sent yet). repl.start() carries "
          "on; left like this the plug resets in %d min" % (ring.count(), ring.unsent(),
                                                          REPL_HOLD_S // 60))


def hold():
    """At the REPL: the plug waits REPL_HOLD_S more before it resets itself (repl.py)."""
    if _hold is not None:
        _hold.feed()
