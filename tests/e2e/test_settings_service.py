"""test_settings_service.py - the collector as the service runs it: from its config file alone
(`wattlog collect --config FILE`, no other flag), with systemd's notify socket and journal.

A real mosquitto (provisioned, ACL on), a real plug on the MicroPython unix port, and the
collector in its own process given what systemd gives a Type=notify service: $NOTIFY_SOCKET (a
unix datagram socket this test binds and reads, as systemd does), $WATCHDOG_USEC and
$JOURNAL_STREAM (the device and inode of its stderr). systemd itself is not running here: the
test plays its part of the protocol.
"""

import os
import re
import signal
import socket
import tempfile
import time

from helpers import aligned_past, wattlog
from rig import Collector

WATCHDOG_USEC = 2_000_000  # 2 s: the collector pings every 0.5 s


class NotifySocket:
    """The service manager's end of sd_notify(3): a bound unix datagram socket."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="wn")  # a short path: sun_path holds 108 bytes
        self.path = os.path.join(self.dir, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.messages = []  # (monotonic time, {"READY": "1", ...}) per datagram

    def wait_for(self, key, value=None, timeout_s=30.0, proc=None):
        """The next message (its time, its fields) holding key (=value), waiting at most
        timeout_s; sooner an error if `proc` has ended and sends nothing more."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.sock.settimeout(0.5)
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                if proc is not None and proc.poll() is not None:
                    break
                continue
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if line)
            self.messages.append((time.monotonic(), fields))
            if key in fields and (value is None or fields[key] == value):
                return self.messages[-1]
        raise AssertionError("no %s=%s on the notify socket; got %r"
                             % (key, value or "*", self.messages))

    def close(self):
        self.sock.close()
        os.unlink(self.path)
        os.rmdir(self.dir)


def write_config(tmp_path, broker, data):
    """What `wattlog provision` writes, pointed at the test's broker and data directory."""
    config = tmp_path / "wattlog.toml"
    password = os.path.basename(broker.password_file("wattlog-collector"))
    os.symlink(broker.password_file("wattlog-collector"), tmp_path / password)
    config.write_text('broker = "%s"\npassword_file = "%s"\ndata = "%s"\ncommit_interval = 1\n'
                      'status_interval = 2\ntimezone = "Europe/Berlin"\n'
                      % (broker.url, password, data))
    return config


def test_a_collector_from_its_config_alone_tells_systemd_it_is_ready_alive_and_stopping(
        broker, simnodes, tmp_path):
    """`wattlog collect --config FILE` and nothing else logs in with the config's password file,
    stores a plug's readings in the config's data directory and commits at its interval; it
    sends READY=1 once it listens (not before: the log says "listening on" first), WATCHDOG=1
    every quarter of $WATCHDOG_USEC from its loop, STATUS= lines with the pending and commit
    figures, and STOPPING=1 at SIGTERM; into the journal (stderr matching $JOURNAL_STREAM) its
    lines carry their syslog priority and no time stamp of their own."""
    data = tmp_path / "data"
    config = write_config(tmp_path, broker, data)
    notify = NotifySocket()
    log_path = tmp_path / "journal.log"
    log_path.touch()  # the collector's stderr: this file, as journald's stream is to systemd
    st = os.stat(log_path)
    env = dict(os.environ, NOTIFY_SOCKET=notify.path, WATCHDOG_USEC=str(WATCHDOG_USEC),
               JOURNAL_STREAM="%d:%d" % (st.st_dev, st.st_ino))
    collector = Collector(config=config, log_path=log_path, env=env)
    proc = collector.proc
    try:
        ready_at, ready = notify.wait_for("READY", "1", proc=proc)
        journal = log_path.read_text()
        assert "listening on wattlog/+/readings" in journal, journal
        assert ready["STATUS"].startswith("listening;"), ready
        pings = [notify.wait_for("WATCHDOG", "1", proc=proc)[0] for _ in range(3)]
        gaps = [b - a for a, b in zip([ready_at] + pings, pings)]
        assert all(0.3 < gap < WATCHDOG_USEC / 1e6 for gap in gaps), gaps  # paced, in time

        node = simnodes(broker.port, "plug-cfg", "--profile", "constant:100", "--speed", "max",
                        "--start", aligned_past(3600), "--interval", 10)
        node.finish()
        status = ""
        while "1 plugs heard" not in status or not int(re.search(r"(\d+) commits", status)[1]):
            status = notify.wait_for("STATUS", proc=proc)[1]["STATUS"]
        assert re.search(r"; \d+ readings pending; \d+ commits, the last at \d\d:\d\d:\d\d$",
                         status), status

        proc.send_signal(signal.SIGTERM)
        _, stopping = notify.wait_for("STOPPING", "1", proc=proc)
        assert stopping["STATUS"].startswith("stopping: committing"), stopping
        assert proc.wait(30) == 0, log_path.read_text()
    finally:
        collector.kill()
        notify.close()
    feeds = wattlog("feeds", "--data", data)
    assert "plug-cfg" in feeds and "power" in feeds, feeds
    lines = log_path.read_text().splitlines()
    assert lines and all(line.startswith(("<6>INFO ", "<4>WARNING ", "<3>ERROR "))
                         for line in lines), lines[:5]
    assert not [line for line in lines if re.search(r"\d\d:\d\d:\d\d[,.]\d", line)], lines[:5]
