"""heap.py - how much heap the whole node needs, measured on the unix port, and what that
means for an ESP32 without PSRAM (run by tools/bench/heap; takes a few minutes).

1. For the simulated meter and each chip driver, the smallest `micropython -X heapsize` with
   which tools/simnode --mpy runs a simulated hour into a private mosquitto and sends every
   reading (bisection, 2 KiB steps).
2. Where the heap goes (heap_parts.py): the ring, the modules a plug loads, the simulator's
   own modules (a plug has none), the objects the node creates.
3. The ESP32 estimate: the ring is the same bytes on both; everything else is counted at half,
   because the unix port is a 64-bit build (MicroPython's GC block is 4 words: 32 bytes here,
   16 on the ESP32, and every pointer is twice the size), and the simulator modules go.
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


def runs(port, board, kib):
    p = subprocess.run([os.path.join(REPO, "tools", "simnode"), "--id", "heap", "--broker",
                        "127.0.0.1:%d" % port, "--mpy", "--board", board, "--start", "now-3600",
                        "--speed", "2000" if board == "sim" else "300", "--heap-kib", str(kib)],
                       capture_output=True, text=True, timeout=600)
    return p.returncode == 0 and '"unsent": 0' in p.stdout


def smallest(port, board):
    lo, hi = 64, 256
    while hi - lo > 2:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if runs(port, board, mid) else (mid, hi)
    return hi


def parts(board):
    flash = tempfile.mkdtemp(prefix="wattnode-heap-")
    with open(os.path.join(REPO, "boards", board + ".json")) as f:
        b = json.load(f)
    b["hal"] = "sim"
    with open(os.path.join(flash, "board.json"), "w") as f:
        json.dump(b, f)
    with open(os.path.join(flash, "config.json"), "w") as f:
        json.dump({"node_id": "heap", "sim": {"profile": "washer"}}, f)
    env = dict(os.environ, MICROPYPATH=os.path.join(REPO, "build", "mpy"))
    out = subprocess.run(["micropython", os.path.join(REPO, "tools", "bench", "heap_parts.py")],
                         cwd=flash, env=env, capture_output=True, text=True, check=True).stdout
    return {line.split()[1]: int(line.split()[2]) for line in out.splitlines() if line.startswith("part ")}


def main():
    subprocess.run([os.path.join(REPO, "tools", "build")], check=True, stdout=subprocess.DEVNULL)
    print("whole node, 48 KiB ring, a simulated hour from .mpy (tools/simnode --mpy --heap-kib):")
    with Broker() as b:
        for board in BOARDS:
            print("  %-16s runs in %3d KiB of unix-port heap" % (board, smallest(b.port, board)), flush=True)
    print("where the heap goes at start-up (KiB, unix port) and the ESP32 estimate:")
    for board in BOARDS:
        p = parts(board)
        esp32 = p["ring"] + (p["plug-modules"] + p["runtime-objects"]) / 2
        print("  %-16s ring %.1f, plug modules %.1f, simulator modules %.1f, objects %.1f -> "
              "ESP32 about %.0f KiB (%.0f KiB with the modules frozen into the firmware)"
              % (board, p["ring"] / 1024, p["plug-modules"] / 1024, p["simulator-modules"] / 1024,
                 p["runtime-objects"] / 1024, esp32 / 1024,
                 (p["ring"] + p["runtime-objects"] / 2) / 1024))


if __name__ == "__main__":
    main()
