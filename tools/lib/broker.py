"""broker.py - a private mosquitto on a free loopback port, for the demo and the tests, set up
by `wattlog provision` as a real one is (host/wattlog/fleet/provision.py): provision's own
mosquitto.conf (no anonymous clients, each client id tied to its user name), password file and
ACL, plus what a test needs: no persistence, a log file, and test users.

    with Broker() as b:      # b.port; b.url: mqtt://wattlog-collector@127.0.0.1:<port>
        b.password_file(provision.COLLECTOR)   # a client's password file, for --password-file
        Broker.collector_password_file(b.url)  # the same, for whoever has only the url
        b.node_args("plug-1")  # provisions plug-1: ["--node-config", <its config.json>]
        b.client("me")         # a paho client logged in as a test user of its own
        b.client("ha", user=provision.HOMEASSISTANT)   # ... or as a provisioned user

Test users (TEST_USER, and wattlog-test-<name> made by client()) may read and write every
topic, so a test can watch everything and publish what no provisioned client could (garbage on
another node's topics). Each client() gets a user of its own because the broker, as
provisioned, gives each user one session: a second client of the same user takes the first
one's place.

It binds 127.0.0.1 only, keeps no persistence file, logs to <dir>/mosquitto.log, and is
stopped (SIGTERM, then SIGKILL after 5 s) when the block ends. It runs in a session of its
own: a Ctrl-C at the terminal reaches the whole foreground process group, and the program
that started the broker (tools/demo, pytest) stops what uses it before stopping it; a broker
gone first leaves a collector trying to reach it. Broker(..., die_with_parent=True) also
has it stopped (SIGTERM) when the thread that started it ends, the process with it, even by
SIGKILL (terminate_with_parent(): tools/demo's parts never outlive it). stop()/start()
restart it on the same port. It runs as the user who starts it (`user` in its config):
started as root, mosquitto would switch to the user "mosquitto", which cannot reach a test's
private temporary directory (tests/e2e/test_broker_security.py starts one as the README
says, dropping to it).
New users are provisioned while it runs: mosquitto rereads its password file and ACL on
SIGHUP, and says so in its log, which is what the wait is for.
"""

import ctypes
import getpass
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

from wattlog.store import durable
from wattlog.fleet import provision

TEST_USER = "wattlog-test"
_RELOADED = "Reloading config."
_RUNNING = " running"  # mosquitto's "mosquitto version 2.0.11 running", once it listens


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, timeout_s=10.0, proc=None):
    """Until something listens on 127.0.0.1:port; RuntimeError when proc (the server that
    should, mosquitto or nats-server) exits first, or after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            name = os.path.basename(str(proc.args[0] if isinstance(proc.args, (list, tuple))
                                        else proc.args).split()[0])
            raise RuntimeError("%s exited with status %d" % (name, proc.returncode))
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


def terminate_with_parent():
    """In a child (preexec_fn): SIGTERM when the thread that started it ends, the process
    with it, even by SIGKILL (Linux's PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def tester(name):
    """The test user for a client called `name`: wattlog-test-<name>, in user-name letters."""
    return "%s-%s" % (TEST_USER, re.sub(r"[^a-z0-9_-]", "-", name.lower()))


class PortTaken(RuntimeError):
    """mosquitto could not listen: another process took its port after free_port() chose it."""


class Broker:
    _collector_logins = {}  # url -> the collector's password file, for every Broker made

    @classmethod
    def collector_password_file(cls, url):
        """The collector's password file of the Broker whose url this is (None: no Broker's)."""
        return cls._collector_logins.get(url)

    def __init__(self, directory=None, port=None, extra_conf="", die_with_parent=False,
                 move_if_taken=False):
        self._preexec = terminate_with_parent if die_with_parent else None
        self.dir = directory or tempfile.mkdtemp(prefix="wattlog-mosq-")
        os.makedirs(self.dir, exist_ok=True)
        # move_if_taken: a port taken meanwhile is replaced at start (the files are made
        # again: for a caller that has not changed them nor told anyone the port)
        self._own_port = port is None and move_if_taken
        self.auth = os.path.join(self.dir, "auth")
        self.conf = os.path.join(self.dir, "mosquitto.conf")
        self.log = os.path.join(self.dir, "mosquitto.log")
        self.proc = None
        self._provisioning = threading.Lock()
        self._extra_conf = extra_conf
        self._configure(port or free_port())

    def _configure(self, port):
        """Provision for `port` and write mosquitto.conf."""
        self.port = port
        self.creds = self._provision([], [TEST_USER])
        self.url = provision.broker_url(provision.COLLECTOR, "127.0.0.1", self.port)
        Broker._collector_logins[self.url] = self.password_file(provision.COLLECTOR)
        with open(os.path.join(self.auth, "mosquitto.conf")) as f:
            conf = f.read()
        with open(self.conf, "w") as f:
            f.write("%s\n# tests only\nuser %s\npersistence false\nlog_dest file %s\n"
                    "log_type error\nlog_type warning\nlog_type notice\nlog_type information\n%s"
                    % (conf, getpass.getuser(), self.log, self._extra_conf))

    def _provision(self, nodes, test_users=()):
        """provision.py's files for `nodes` and everyone provisioned before, plus the test
        users, allowed everything; a running broker rereads them. One at a time: a test's
        threads may each start a plug or a client."""
        with self._provisioning:
            self.creds = self._provision_now(nodes, test_users)
            return self.creds

    def _provision_now(self, nodes, test_users):
        os.makedirs(self.auth, exist_ok=True)
        cred_path = os.path.join(self.auth, "credentials.json")
        creds = durable.read_json(cred_path) or {}
        for user in test_users:
            creds.setdefault(user, secrets.token_urlsafe(18))
        durable.write_json(cred_path, creds, mode=0o600)
        creds = provision.provision(self.auth, nodes, "127.0.0.1", self.port, listen="127.0.0.1",
                                    progress=lambda text: None)
        testers = [u for u in sorted(creds) if u == TEST_USER or u.startswith(TEST_USER + "-")]
        with open(os.path.join(self.auth, "acl"), "a") as f:
            f.write("\n# tests only\n" + "".join("user %s\ntopic readwrite #\n" % u
                                                  for u in testers))
        self._reload()
        return creds

    def _reload(self):
        """SIGHUP a running broker and wait until it has reread its files."""
        if self.proc is None or self.proc.poll() is not None:
            return
        before = self._log_text().count(_RELOADED)
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while self._log_text().count(_RELOADED) <= before:
            if time.monotonic() > deadline:
                raise RuntimeError("mosquitto did not reload its files within 10 s")
            time.sleep(0.01)

    def _log_text(self):
        try:
            with open(self.log) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def node_args(self, node_id):
        """Provision node_id (once) and return the simnode arguments that log it in: its
        provisioned config.json, whose password no command line shows."""
        if node_id not in self.creds:
            self.creds = self._provision([node_id])
        return ["--node-config", os.path.join(self.auth, "nodes", node_id, "config.json")]

    def password_file(self, user):
        """The password file provision writes for a client (collector, operator, HA)."""
        return provision.password_file(self.auth, user)

    def client(self, client_id, user=None):
        """A paho client (not yet connected) logged in as `user`, a provisioned user, or by
        default as a test user of its own, tester(client_id), made on first use."""
        import paho.mqtt.client as mqtt
        if user is None:
            user = tester(client_id)
            if user not in self.creds:
                self.creds = self._provision([], [user])
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id)
        c.username_pw_set(user, self.creds[user])
        return c

    def start(self):
        """Start mosquitto and wait until it says it runs: a port that another test's broker
        took meanwhile (tests run side by side) is an error here, not a connection to the
        wrong broker; before anyone was told this one's port (no start yet), another is
        taken instead."""
        for attempt in range(3):
            try:
                self._start()
                self._own_port = False  # told now: a restart keeps it
                return self
            except PortTaken:
                if not self._own_port or attempt == 2:
                    raise
                self._configure(free_port())

    def _start(self):
        before = self._log_text().count(_RUNNING)
        self.proc = subprocess.Popen([mosquitto_path(), "-c", self.conf],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True, preexec_fn=self._preexec)
        deadline = time.monotonic() + 10
        while self._log_text().count(_RUNNING) <= before:
            if self.proc.poll() is not None:
                said = self._log_text().strip().splitlines()[-1:]
                raise (PortTaken if "Address already in use" in str(said) else RuntimeError)(
                    "mosquitto exited with status %d: %s" % (self.proc.returncode, said))
            if time.monotonic() > deadline:
                raise RuntimeError("mosquitto did not start within 10 s")
            time.sleep(0.02)
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
