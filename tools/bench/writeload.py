"""writeload.py - what the collector costs an SD card: bytes written per stored reading.

Sped-up plugs (tools/simnode, the real firmware, this tree's for both runs) send to a private
mosquitto; the collector of this tree, then of an older commit (a temporary git worktree),
commits every COMMIT_S seconds. The plugs run SPEED times faster than real time, so each
commit holds what 300 s of real readings hold, as a Pi's default commits do; the summaries
(rollup.py) are flushed every 72 commits, as 6 h is to 5 min. The figure is the collector's
write_bytes (/proc/<pid>/io: what it sent towards the disk, the page cache's accounting)
read just before it is stopped, divided by the readings committed. The shutdown's own writes
are left out: this is the steady load.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "lib"))

from broker import Broker  # noqa: E402
from rig import Collector  # noqa: E402

COMMIT_S = 2.0
SPEED = 150            # 15 readings a second a plug: 300 s of readings in each 2 s commit
FLUSH_S = COMMIT_S * 72


def write_bytes(pid):
    with open("/proc/%d/io" % pid) as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])


def stored(data):
    with open(os.path.join(data, "commit.json")) as f:
        return sum(json.load(f)["feeds"].values())


def sped_up_plugs(broker, plugs, seconds, speed=SPEED):
    """`plugs` simulated plugs (load-0, ...) whose clocks start far enough back to send
    readings, `speed` times real time, for `seconds` of wall time and more."""
    start = int(time.time()) - int(seconds * speed) - 600
    start -= start % 10
    return [subprocess.Popen(
        [os.path.join(REPO, "tools", "simnode"), "--id", "load-%d" % i, "--broker",
         "127.0.0.1:%d" % broker.port, "--profile", "washer", "--speed", str(speed),
         "--start", str(start)] + broker.node_args("load-%d" % i),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(plugs)]


def stop(procs):
    """SIGTERM to each, then wait for each (a minute at most)."""
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(60)


def run(tree, work, plugs, seconds):
    broker = Broker(os.path.join(work, "mosquitto"))
    broker.start()
    data = os.path.join(work, "data")
    helptext = subprocess.run([sys.executable, "-m", "wattlog.cli", "collect", "--help"],
                              capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH="%s/host:%s/lib" % (tree, tree))).stdout
    extra = ["--summary-interval", str(FLUSH_S)] if "--summary-interval" in helptext else []
    c = Collector(broker.url, data, commit_interval=COMMIT_S, status_interval=60, args=extra,
                  log_path=os.path.join(work, "collector.log"),
                  env=dict(os.environ, PYTHONPATH="%s/host:%s/lib" % (tree, tree)))
    collector = c.proc
    nodes = []
    try:
        c.wait_for("listening on")
        nodes = sped_up_plugs(broker, plugs, seconds)
        time.sleep(seconds)  # the load is what a span of time costs: this bench runs that span
        written = write_bytes(collector.pid)
        points = stored(data)
    finally:
        stop(nodes)
        stop([collector])
        broker.stop()
    return written, points


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="7fbf0ce", help="the commit to compare with")
    p.add_argument("--plugs", type=int, default=3)
    p.add_argument("--seconds", type=float, default=300, help="wall seconds a run lasts")
    args = p.parse_args()
    base = tempfile.mkdtemp(prefix="wattlog-base-")
    subprocess.run(["git", "worktree", "add", "--detach", base, args.base], cwd=REPO, check=True,
                   capture_output=True)
    try:
        rows = []
        for label, tree in ((args.base[:7], base), ("this", REPO)):
            work = tempfile.mkdtemp(prefix="wattlog-bench-writeload-")
            try:
                written, points = run(tree, work, args.plugs, args.seconds)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            rows.append((label, written, points))
            print("%-8s %10d bytes written for %8d stored points: %6.1f bytes a point"
                  % (label, written, points, written / points), flush=True)
        (_, w0, p0), (_, w1, p1) = rows
        print("this tree writes %+.1f %% per stored point" % (100 * ((w1 / p1) / (w0 / p0) - 1)))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", base], cwd=REPO, check=False)


if __name__ == "__main__":
    main()
