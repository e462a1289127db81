"""broker.py - a private mosquitto on a free loopback port, for the demo and the tests.

    with Broker() as b:        # b.port; b.url == "mqtt://127.0.0.1:<port>"
        ...
It binds 127.0.0.1 only, keeps no persistence file, logs to <dir>/mosquitto.log, and is
stopped (SIGTERM, then SIGKILL after 5 s) when the block ends. stop()/start() restart it on
the same port.
"""

import os
import shutil
import socket
import subprocess
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, timeout_s=10.0, proc=None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("mosquitto exited with status %d" % proc.returncode)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("nothing listens on 127.0.0.1:%d after %.0f s" % (port, timeout_s))


def mosquitto_path():
    path = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if not os.path.exists(path):
        raise RuntimeError("mosquitto is not installed; run tools/setup")
    return path


class Broker:
    def __init__(self, directory=None, port=None, extra_conf=""):
        self.dir = directory or tempfile.mkdtemp(prefix="wattlog-mosq-")
        os.makedirs(self.dir, exist_ok=True)
        self.port = port or free_port()
        self.url = "mqtt://127.0.0.1:%d" % self.port
        self.conf = os.path.join(self.dir, "mosquitto.conf")
        self.log = os.path.join(self.dir, "mosquitto.log")
        with open(self.conf, "w") as f:
            f.write("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\n"
                    "log_dest file %s\nlog_type error\nlog_type warning\nlog_type notice\n%s"
                    % (self.port, self.log, extra_conf))
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([mosquitto_path(), "-c", self.conf],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, proc=self.proc)
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
