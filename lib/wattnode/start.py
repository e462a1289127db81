"""start.py - start-up and crash handling: what firmware/main.py runs.

Order matters for memory: config.json and board.json are read and the ring is allocated
first, while the heap is still in one piece (the ring is one block of ring_kib KiB), and only
then are the big modules imported. The node then runs under the watchdog.

When the loop dies of an exception, the traceback goes to CRASH_LOG on the flash (at most
CRASH_LOG_MAX bytes: older entries are dropped, so a crash loop cannot wear or fill the
flash), the crash counter in CRASHES_FILE goes up, the energy total is checkpointed and the
plug resets. After 3 crashes in a row boot.py keeps the app from starting (safe mode, see
safe.py); the counter goes back to 0 once the node has run node.HEALTHY_S without crashing.
"""

import gc
import io
import sys

from wattnode import board as boardfile, config, wire
from wattnode.ring import Ring

CRASH_LOG = "crash.log"
CRASH_LOG_MAX = 4096
CRASHES_FILE = "crashes"
RESET_EXIT = 3  # the unix port's exit status for "reset me" (tools/simnode restarts it)
node = None     # the running node, for the REPL helpers (repl.py)


def crash_count():
    try:
        with open(CRASHES_FILE) as f:
            return int(f.read() or 0)
    except (OSError, ValueError):
        return 0


def set_crash_count(n):
    try:
        with open(CRASHES_FILE, "w") as f:
            f.write(str(n))
    except OSError:
        pass


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
    problems = []
    cfg = config.load(config_path, problems)
    board = config.read_json(board_path, problems)
    board_problems, meter_ok = boardfile.check(board)
    problems.extend(board_problems)
    gc.collect()
    ring = Ring(boardfile.ring_kib(board) * 1024 // wire.RECORD_SIZE)  # while the heap is whole
    from wattnode import hw as hal
    from wattnode.node import Node
    hw = hal.load(board, cfg)
    global node
    node = Node(cfg, board, hw, problems, meter_ok, ring, lambda: set_crash_count(0), config_path)
    print("wattnode %s: board %r, interval %d s, ring %d records"
          % (node.node_id, board.get("name"), cfg["interval_s"], ring.capacity))
    try:
        node.run()
    except KeyboardInterrupt:
        node.drain()
    except Exception as e:  # the loop must not die quietly: record it, then reset
        out = io.StringIO()
        sys.print_exception(e, out)
        text = ("crash at node time %d after %d readings from slot %d, %d of them unsent (%d "
                "never sent):\n%s") % (hw.clock.time_s(), ring.next,
                                       node._first_slot + wire.EPOCH_UNIX, ring.unsent(),
                                       ring.next - node.link.sent_top, out.getvalue())
        print(text)
        log_crash(text)
        set_crash_count(crash_count() + 1)
        node.energy.checkpoint(node.sampler.energy_wh, node.sampler.rem_dj, hw.clock.time_s())
        hw.reset()
