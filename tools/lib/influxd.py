"""influxd.py - a private InfluxDB 1.x (Debian's influxd) on free loopback ports, for the
benches that compare wattlog with it and the tests of the InfluxDB sink; and a wait for a
process's log line.

    with influxd(work, "bench") as base:   # base: http://127.0.0.1:<port>, database made
        urllib.request.urlopen(base + "/write?db=bench&precision=s", data=...)

    db = Influxd(work, "wattlog", user="admin", password="...")   # auth-enabled, that admin
    db.start(); db.query("SELECT ...") -> the JSON answer; db.stop(); db.start()  # same port,
    db.port; db.base                                                # same files

No reporting, no query log, no self-monitoring store: nothing but the bench's own work.
stop() is SIGTERM (influxd flushes its WAL and ends), start() the same files and ports again,
so a test can take InfluxDB away and bring it back.
"""

import base64
import contextlib
import json
import os
import subprocess
import time
import urllib.parse
import urllib.request

from broker import free_port

START_S = 30


class Influxd:
    def __init__(self, work, database, user=None, password=None, port=None):
        self.dir = os.path.join(work, "influx")
        os.makedirs(self.dir)
        self.database = database
        self.user, self.password = user, password
        self.port = port or free_port()
        self.base = "http://127.0.0.1:%d" % self.port
        self.log_path = os.path.join(self.dir, "influxd.log")
        self.conf = os.path.join(self.dir, "influxdb.conf")
        d = self.dir
        with open(self.conf, "w") as f:
            f.write('reporting-disabled = true\nbind-address = "127.0.0.1:%d"\n'
                    '[meta]\n  dir = "%s/meta"\n[data]\n  dir = "%s/data"\n  wal-dir = "%s/wal"\n'
                    '  query-log-enabled = false\n[http]\n  bind-address = "127.0.0.1:%d"\n'
                    '  log-enabled = false\n  auth-enabled = %s\n[monitor]\n'
                    '  store-enabled = false\n'
                    % (free_port(), d, d, d, self.port, "true" if user else "false"))
        self.proc = None
        self._made = False

    def start(self):
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(["influxd", "-config", self.conf], stdout=log,
                                     stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + START_S
        while True:
            try:
                urllib.request.urlopen(self.base + "/ping", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise SystemExit("influxd did not start: see %s" % self.log_path)
                time.sleep(0.1)
        if not self._made:
            if self.user:  # the first user may be made without logging in; an admin
                self.query("CREATE USER \"%s\" WITH PASSWORD '%s' WITH ALL PRIVILEGES"
                           % (self.user, self.password), auth=False)
            self.query("CREATE DATABASE \"%s\"" % self.database, db=None)
            self._made = True
        return self

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)

    def query(self, q, db="", auth=True, epoch="s"):
        """The JSON answer to an InfluxQL statement (POST /query), in db (default: ours)."""
        params = {"q": q, "epoch": epoch}
        if db is not None:
            params["db"] = db or self.database
        req = urllib.request.Request(self.base + "/query", method="POST",
                                     data=urllib.parse.urlencode(params).encode())
        if auth and self.user:
            req.add_header("Authorization", "Basic " + base64.b64encode(
                ("%s:%s" % (self.user, self.password)).encode()).decode())
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.load(resp)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


@contextlib.contextmanager
def influxd(work, database):
    with Influxd(work, database) as db:
        yield db.base


def wait_logged(proc, log_path, text, timeout_s=30.0):
    """Wait until `text` appears in the log file a process writes; SystemExit if it ends or
    the time runs out first."""
    deadline = time.monotonic() + timeout_s
    while text not in open(log_path).read():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("%r never appeared: see %s" % (text, log_path))
        time.sleep(0.05)
