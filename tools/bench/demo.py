"""demo.py - how long tools/demo's backfill takes here: the README says "3 simulated plugs
replay the last 24 h in ~25 s".

Runs the default demo (3 plugs, --backfill 25) --runs times, each in a temporary folder and
stopped after --duration seconds, and prints what each run said: "backfill done in X s
(measured from the start of the demo)", the moment the last plug said its clock had reached
the present. Then the machine: CPU model and count, and the load average before and after,
since the plugs share the CPU with whatever else runs (a plug that falls behind catches up
without skipping, later).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def machine():
    with open("/proc/cpuinfo") as f:
        models = re.findall(r"^model name\s*:\s*(.+)$", f.read(), re.M)
    return "%d x %s" % (os.cpu_count(), models[0] if models else "unknown CPU")


def load():
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def main():
    p = argparse.ArgumentParser(prog="tools/bench/demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--duration", type=float, default=35.0,
                   help="stop each run after S seconds (default 35)")
    args = p.parse_args()
    print("%s; %s" % (machine(), load()), flush=True)
    took = []
    for k in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="wattlog-bench-demo-") as tmp:
            out = subprocess.run([os.path.join(REPO, "tools", "demo"), "--duration",
                                  str(args.duration)], cwd=tmp, env=dict(os.environ, TMPDIR=tmp),
                                 capture_output=True, text=True).stdout
        done = re.search(r"backfill done in ([0-9.]+) s", out)
        if done is None:
            sys.exit("tools/bench/demo: run %d never said its backfill was done:\n%s"
                     % (k + 1, out))
        took.append(float(done.group(1)))
        print("run %d: backfill done in %.1f s; %s" % (k + 1, took[-1], load()), flush=True)
    print("backfill: %.1f s to %.1f s over %d runs" % (min(took), max(took), len(took)))


if __name__ == "__main__":
    main()
