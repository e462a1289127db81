"""heap.py - how much heap the whole node needs: measured on the 64-bit unix port and on a 32-bit
MicroPython (the WebAssembly port, tools/lib/mp32.mjs), as an ESP32 without PSRAM would need it
(run by tools/bench/heap; takes a few minutes).

1. For the simulated meter and each chip driver, the smallest `micropython -X heapsize` with
   which tools/simnode --mpy runs a simulated hour into a private mosquitto and sends every
   reading (bisection, 2 KiB steps). Unix port only: the WebAssembly port has no sockets.
2. Where the heap goes as the node starts (heap_parts.py, loading the .mpy files tools/build
   makes), on both ports side by side: the ring, the modules a plug loads, the simulator's own
   modules (a plug has none), the objects the node creates.
   The flash spill's share of it (spill.py, keep.py): its modules, its objects at rest (RTC
   memory's image, the index of its files) and what sending from the flash adds.
3. What a plug needs at start-up: the 32-bit figures without the simulator's modules (an ESP32
   is 32-bit: 4-byte pointers, 16-byte GC blocks, 31-bit small ints), and with the modules
   frozen into the firmware (their code then stays in flash): the ring and the objects.
   The run needs more than the start: the 64-bit port's margin between its start and step 1's
   figure is printed beside it.
"""

import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
from broker import Broker  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BOARDS = ("sim", "devkit-bl0937", "devkit-cse7766", "devkit-bl0942")


def runs(broker, board, kib):
    p = subprocess.run([os.path.join(REPO, "tools", "simnode"), "--id", "heap", "--broker",
                        "127.0.0.1:%d" % broker.port, "--mpy", "--board", board, "--start", "now-3600",
                        "--speed", "2000" if board == "sim" else "300", "--heap-kib", str(kib)]
                       + broker.node_args("heap"), capture_output=True, text=True, timeout=600)
    return p.returncode == 0 and '"unsent": 0' in p.stdout


def smallest(broker, board):
    lo, hi = 64, 256
    while hi - lo > 2:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if runs(broker, board, mid) else (mid, hi)
    return hi


def parts(board, port):
    """heap_parts.py's figures (bytes) for board, on port "64" (unix) or "32" (WebAssembly)."""
    flash = tempfile.mkdtemp(prefix="wattnode-heap-")
    with open(os.path.join(REPO, "boards", board + ".json")) as f:
        b = json.load(f)
    b["hal"] = "sim"
    with open(os.path.join(flash, "board.json"), "w") as f:
        json.dump(b, f)
    with open(os.path.join(flash, "config.json"), "w") as f:
        json.dump({"node_id": "heap"}, f)
    with open(os.path.join(flash, "sim.json"), "w") as f:
        json.dump({"profile": "washer"}, f)
    env = dict(os.environ, MICROPYPATH=os.path.join(REPO, "build", "mpy"))
    script = os.path.join(REPO, "tools", "bench", "heap_parts.py")
    cmd = (["micropython", script] if port == "64" else
           ["node", os.path.join(REPO, "tools", "lib", "mp32.mjs"), "--copy", flash, script])
    out = subprocess.run(cmd, cwd=flash, env=env, capture_output=True, text=True, check=True).stdout
    return {line.split()[1]: int(line.split()[2]) for line in out.splitlines() if line.startswith("part ")}


def kib(n):
    return n / 1024


def main():
    subprocess.run([os.path.join(REPO, "tools", "build")], check=True, stdout=subprocess.DEVNULL)
    print("whole node, the board's ring, a simulated hour from .mpy (tools/simnode --mpy "
          "--heap-kib; no collector: the spill writes):")
    whole = {}
    with Broker() as b:
        for board in BOARDS:
            whole[board] = smallest(b, board)
            print("  %-16s runs in %3d KiB of unix-port heap" % (board, whole[board]), flush=True)
    print("where the heap goes at start-up, KiB, 64-bit unix port | 32-bit WebAssembly port:")
    print("  %-16s %-31s | %s" % ("", "ring  plug  sim  objects  total", "ring  plug  sim  objects  total"))
    plug = {}
    for board in BOARDS:
        p64, p32 = parts(board, "64"), parts(board, "32")
        cols = []
        for p in (p64, p32):
            cols.append("%4.1f  %4.1f  %4.1f  %4.1f  %6.1f" % tuple(kib(p[k]) for k in (
                "ring", "plug-modules", "simulator-modules", "runtime-objects", "total")))
        print("  %-16s %-31s | %s" % (board, cols[0], cols[1]), flush=True)
        plug[board] = (p64, p32)
    print("the flash spill's share, KiB, 64-bit | 32-bit: its modules; its objects at rest; "
          "what replaying from the flash adds")
    for board in BOARDS:
        p64, p32 = plug[board]
        print("  %-16s %s" % (board, " | ".join(
            "%4.1f  %4.1f  %4.1f" % tuple(kib(p[k]) for k in ("spill-modules", "spill-at-rest",
                                                              "spill-replaying"))
            for p in (p64, p32))), flush=True)
    print("a plug at start-up (32-bit, no simulator), loading .mpy | modules frozen into the firmware;")
    print("and the 64-bit run's need beyond the 64-bit start-up:")
    for board in BOARDS:
        p64, p32 = plug[board]
        mpy = p32["ring"] + p32["plug-modules"] + p32["runtime-objects"]
        frozen = p32["ring"] + p32["runtime-objects"]
        print("  %-16s %5.1f KiB | %5.1f KiB;  the run needs %4.1f KiB more than the start (64-bit)"
              % (board, kib(mpy), kib(frozen), whole[board] - kib(p64["total"])))


if __name__ == "__main__":
    main()
