"""influxd.py - a private InfluxDB 1.x (Debian's influxd) on free loopback ports, for the
benches that compare wattlog with it in the same run; and a wait for a process's log line.

    with influxd(work, "bench") as base:   # base: http://127.0.0.1:<port>, database made
        urllib.request.urlopen(base + "/write?db=bench&precision=s", data=...)

No reporting, no query log, no self-monitoring store: nothing but the bench's own work.
"""

import contextlib
import os
import subprocess
import time
import urllib.request

from broker import free_port

START_S = 30


@contextlib.contextmanager
def influxd(work, database):
    d = os.path.join(work, "influx")
    os.makedirs(d)
    conf = os.path.join(d, "influxdb.conf")
    port = free_port()
    with open(conf, "w") as f:
        f.write('reporting-disabled = true\nbind-address = "127.0.0.1:%d"\n'
                '[meta]\n  dir = "%s/meta"\n[data]\n  dir = "%s/data"\n  wal-dir = "%s/wal"\n'
                '  query-log-enabled = false\n[http]\n  bind-address = "127.0.0.1:%d"\n'
                '  log-enabled = false\n[monitor]\n  store-enabled = false\n'
                % (free_port(), d, d, d, port))
    proc = subprocess.Popen(["influxd", "-config", conf], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    base = "http://127.0.0.1:%d" % port
    try:
        deadline = time.monotonic() + START_S
        while True:
            try:
                urllib.request.urlopen(base + "/ping", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("influxd did not start")
                time.sleep(0.1)
        urllib.request.urlopen(urllib.request.Request(
            base + "/query", data=b"q=CREATE DATABASE " + database.encode(), method="POST"))
        yield base
    finally:
        proc.terminate()
        proc.wait(30)


def wait_logged(proc, log_path, text, timeout_s=30.0):
    """Wait until `text` appears in the log file a process writes; SystemExit if it ends or
    the time runs out first."""
    deadline = time.monotonic() + timeout_s
    while text not in open(log_path).read():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("%r never appeared: see %s" % (text, log_path))
        time.sleep(0.05)
