"""broker.py - a private mosquitto on a free loopback port, for the demo and the tests, locked
down as `wattlog provision` locks a real one down: no anonymous clients, a user per node, the
ACL (host/wattlog/provision.py).

    with Broker() as b:        # b.port; b.url: the collector's mqtt://USER:PASS@127.0.0.1:<port>
        b.node_args("plug-1")  # provisions plug-1: ["--user", "plug-1", "--password=..."]
        b.client("me")         # a paho client with the operator's credentials (HA, wattlog plug)
It binds 127.0.0.1 only, keeps no persistence file, logs to <dir>/mosquitto.log, and is
stopped (SIGTERM, then SIGKILL after 5 s) when the block ends. stop()/start() restart it on
the same port. New nodes are provisioned while it runs: mosquitto rereads its password file
and ACL on SIGHUP.
"""

import getpass
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from wattlog import durable, provision

TEST_USER = "wattlog-test"


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
        self.auth = os.path.join(self.dir, "auth")
        self.creds = self._provision([])
        self.url = provision.broker_url(self.creds, provision.COLLECTOR, "127.0.0.1", self.port)
        self.conf = os.path.join(self.dir, "mosquitto.conf")
        self.log = os.path.join(self.dir, "mosquitto.log")
        with open(self.conf, "w") as f:
            # `user`: run as root, mosquitto would switch to the user "mosquitto", which cannot
            # read the 0600 password file made here nor write the log
            f.write("user %s\n" % getpass.getuser())
            f.write("per_listener_settings false\nallow_anonymous false\npassword_file %s\n"
                    "acl_file %s\nlistener %d 127.0.0.1\npersistence false\n"
                    "log_dest file %s\nlog_type error\nlog_type warning\nlog_type notice\n%s"
                    % (os.path.join(self.auth, "passwd"), os.path.join(self.auth, "acl"),
                       self.port, self.log, extra_conf))
        self.proc = None

    def _provision(self, nodes):
        """provision.py's files, plus TEST_USER: allowed everything, so a test can publish
        what no provisioned client could (garbage on another node's topics)."""
        os.makedirs(self.auth, exist_ok=True)
        cred_path = os.path.join(self.auth, "credentials.json")
        creds = durable.read_json(cred_path) or {}
        creds.setdefault(TEST_USER, secrets.token_urlsafe(18))
        durable.write_json(cred_path, creds)
        creds = provision.provision(self.auth, nodes, "127.0.0.1", self.port,
                                    progress=lambda text: None)
        with open(os.path.join(self.auth, "acl"), "a") as f:
            f.write("\n# tests only\nuser %s\ntopic readwrite #\n" % TEST_USER)
        return creds

    def node_args(self, node_id):
        """Provision node_id (once) and return the simnode arguments that log it in."""
        if node_id not in self.creds:
            self.creds = self._provision([node_id])
            if self.proc and self.proc.poll() is None:
                self.proc.send_signal(signal.SIGHUP)  # reread the password file and ACL
                time.sleep(0.2)
        # --password=X: a generated password may start with "-", which argparse would take
        # for an option
        return ["--user", node_id, "--password=" + self.creds[node_id]]

    def client(self, client_id, user=provision.OPERATOR):
        """A paho client (not yet connected) with a provisioned user's credentials."""
        import paho.mqtt.client as mqtt
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id)
        c.username_pw_set(user, self.creds[user])
        return c

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
