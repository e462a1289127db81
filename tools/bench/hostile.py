"""hostile.py - what one hostile plug costs the collector, this tree beside an older commit.

Each scenario runs in a fresh process (so peak memory is its own) against the collector's own
ingest, node accounting and commit code, with a real data directory on disk; the figures come
from the kernel (/proc/self/io write_bytes, /proc/self/status VmHWM) and the process clock.

  old-batch    one 56-byte batch from a new node id: a record stamped 2020-01-01, one now
  scattered-N  N one-record batches with seq 1, 3, 5, ..., held 0 (each leaves a hole)
  contiguous-N N one-record batches with seq 0, 1, 2, ... (the same work without holes)
  new-ids-N    N new node ids, one batch each, then one commit

The older commit is checked out into a temporary git worktree and run with the same driver.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIOS = ["old-batch", "scattered-2000", "scattered-8000", "contiguous-8000",
             "new-ids-250", "new-ids-1000"]

DRIVER = r'''
import json, os, sys, tempfile, time
from wattlog.store.commit import Committer
from wattlog.complaints import Complaints
from wattlog.store.ingest import Ingest
from wattlog.store.nodes import Nodes
from wattnode import wire
import logging
logging.disable(logging.WARNING)

def batch(records, seq=0, boot=1, held=None):
    buf = bytearray(wire.HEADER_SIZE + wire.RECORD_SIZE * len(records))
    wire.pack_header(buf, 0, len(records), 10, boot, seq, 0, seq if held is None else held)
    for i, t in enumerate(records):
        wire.pack_record(buf, wire.HEADER_SIZE + i * wire.RECORD_SIZE, t - wire.EPOCH_UNIX,
                         5000, 1, 23000, 2000)
    return bytes(buf)

def io_written():
    for line in open("/proc/self/io"):
        if line.startswith("write_bytes:"):
            return int(line.split()[1])

def hwm_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

name, data = sys.argv[1], sys.argv[2]
complaints = Complaints()
c = Committer(data, complaints)
nodes = Nodes({}, complaints)
def interval(node):
    e = c.registry.find(node, "power")
    return e["interval"] if e else None
ing = Ingest(complaints, interval, nodes)
now = int(time.time()); now -= now % 10
w0, hwm0, cpu0, t0 = io_written(), hwm_kib(), time.process_time(), time.monotonic()
kind, _, n = name.rpartition("-")
if name == "old-batch":
    ing.handle("wattlog/evil/readings", batch([1577836800, now - 10]))
elif kind in ("scattered", "contiguous"):
    step = 2 if kind == "scattered" else 1
    for k in range(int(n)):
        seq = step * k + (1 if kind == "scattered" else 0)
        ing.handle("wattlog/evil/readings", batch([now - 10 * (int(n) * 2 - seq)], seq=seq,
                                                  held=0))
        nodes.resends.clear()
else:
    for k in range(int(n)):
        ing.handle("wattlog/id-%04d/readings" % k, batch([now - 10]))
ingest_cpu = time.process_time() - cpu0
t1 = time.monotonic()
pending, intervals = ing.take()
snap = nodes.snapshot()
c.commit(pending, intervals, nodes.to_json(snap))
commit_s = time.monotonic() - t1
c.close()
print(json.dumps({"written_kib": (io_written() - w0) / 1024, "peak_rss_growth_mib":
                  (hwm_kib() - hwm0) / 1024, "cpu_s": time.process_time() - cpu0,
                  "ingest_cpu_s": ingest_cpu, "commit_s": commit_s,
                  "wall_s": time.monotonic() - t0}))
'''


def run(tree, scenario):
    env = dict(os.environ, PYTHONPATH="%s/host:%s/lib" % (tree, tree))
    with tempfile.TemporaryDirectory(prefix="wattlog-bench-", dir=os.environ.get("BENCH_DIR")) as d:
        proc = subprocess.run([sys.executable, "-c", DRIVER, scenario, d], env=env,
                              capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1]}
    return json.loads(proc.stdout)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="531eba9", help="the commit to compare with")
    p.add_argument("--only", nargs="*", choices=SCENARIOS, help="scenarios to run")
    args = p.parse_args()
    base = tempfile.mkdtemp(prefix="wattlog-base-")
    subprocess.run(["git", "worktree", "add", "--detach", base, args.base], cwd=REPO,
                   check=True, capture_output=True)
    try:
        print("%-16s %-7s %12s %14s %9s %11s %10s" % ("scenario", "tree", "written KiB",
                                                     "peak RSS +MiB", "CPU s", "ingest CPU s",
                                                     "commit s"))
        for scenario in args.only or SCENARIOS:
            for label, tree in ((args.base[:7], base), ("this", REPO)):
                r = run(tree, scenario)
                if "error" in r:
                    print("%-16s %-7s failed: %s" % (scenario, label, r["error"]))
                    continue
                print("%-16s %-7s %12.1f %14.1f %9.2f %11.2f %10.2f" % (
                    scenario, label, r["written_kib"], r["peak_rss_growth_mib"], r["cpu_s"],
                    r["ingest_cpu_s"], r["commit_s"]), flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", base], cwd=REPO, check=False)


if __name__ == "__main__":
    main()
