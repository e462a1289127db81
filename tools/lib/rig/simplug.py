"""simplug.py - a simulated plug: tools/simnode (tools/lib/simnode.py) in its own process, the
real firmware on the MicroPython unix port with lib/wattsim in place of the hardware. Its
output is kept; summary() reads the line a node prints when it stops cleanly."""

import json
import signal
import subprocess
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))


class SimPlug:
    def __init__(self, port, node_id, *args, broker=None):
        """tools/simnode --id node_id --broker 127.0.0.1:port ARGS; given the Broker, logged in
        with its provisioned config (broker.node_args)."""
        login = broker.node_args(node_id) if broker is not None else []
        self.node_id = node_id
        self.proc = subprocess.Popen(
            [os.path.join(REPO, "tools", "simnode"), "--id", node_id,
             "--broker", "127.0.0.1:%d" % port] + [str(a) for a in args] + login,
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
        """SIGTERM: the node says "offline", sends what it holds and prints its summary."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.output = self.proc.communicate(timeout=45)[0]
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.output = self.proc.communicate()[0]


def summaries(output):
    """Every summary line a node printed (one per clean stop or clean reboot), as dicts; only
    whole lines: a node still running may be in the middle of writing its line."""
    return [json.loads(line[len("summary "):]) for line in output.splitlines(keepends=True)
            if line.startswith("summary ") and line.endswith("\n")]


def summary(output):
    """The summary of the node's last run."""
    found = summaries(output)
    if not found:
        raise AssertionError("no summary line in node output:\n%s" % output)
    return found[-1]
