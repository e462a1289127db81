"""helpers.py - processes for the end-to-end tests: the collector, simulated plugs, the CLI.
Every wait is bounded."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class Collector:
    """`wattlog collect` in its own process, logging to a file; the broker password comes
    from password_file, as the README says, never on the command line."""

    def __init__(self, url, data, commit_interval=300, password_file=None, args=()):
        self.data = str(data)
        self.log_path = self.data + ".log"
        self._log = open(self.log_path, "w")
        login = ["--password-file", str(password_file)] if password_file else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "wattlog.cli", "collect", "--broker", url] + login
            + ["--data", self.data, "--commit-interval", str(commit_interval),
               "--status-interval", "2"] + [str(a) for a in args],
            stdout=self._log, stderr=subprocess.STDOUT)

    def wait_for(self, text, timeout_s=20.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.log():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError("collector log never said %r:\n%s" % (text, self.log()))

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        """SIGTERM, as systemd sends it; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        finally:
            self._log.close()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


class SimNode:
    """tools/simnode: the real firmware on the unix port with a simulated plug."""

    def __init__(self, port, node_id, *args):
        self.proc = subprocess.Popen(
            [str(REPO / "tools" / "simnode"), "--id", node_id, "--broker", "127.0.0.1:%d" % port]
            + [str(a) for a in args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.output = ""

    def finish(self, timeout_s=120):
        """Wait for the node to end by itself; its summary line as a dict."""
        try:
            self.output, _ = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.output, _ = self.proc.communicate()
            raise AssertionError("simnode did not finish in %d s:\n%s" % (timeout_s, self.output))
        assert self.proc.returncode == 0, self.output
        return summary(self.output)

    def firmware_pid(self):
        """The MicroPython process (a child of the simnode wrapper)."""
        with open("/proc/%d/task/%d/children" % (self.proc.pid, self.proc.pid)) as f:
            return int(f.read().split()[0])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.output = self.proc.communicate(timeout=45)[0]
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.output = self.proc.communicate()[0]


def summaries(output):
    """Every summary line a node printed (one per clean stop or clean reboot), as dicts."""
    return [json.loads(line[len("summary "):]) for line in output.splitlines()
            if line.startswith("summary ")]


def summary(output):
    """The summary of the node's last run."""
    found = summaries(output)
    if not found:
        raise AssertionError("no summary line in node output:\n%s" % output)
    return found[-1]


def wattlog(*argv):
    """Run the wattlog CLI; its standard output."""
    return subprocess.run([sys.executable, "-m", "wattlog.cli"] + [str(a) for a in argv],
                          capture_output=True, text=True, check=True, timeout=60).stdout


def aligned_past(seconds, interval=10):
    t = int(time.time()) - seconds
    return t - t % interval


def secret_file(path, text):
    """A secret (a token, a password) in a file created 0600 from the start, as wattlog
    provision makes them; its path."""
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    return str(path)
