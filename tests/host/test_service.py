"""test_service.py - the collector as a systemd service (systemd.py): the unit that
`wattlog install-service` writes passes `systemd-analyze verify` with nothing to say, the
notify protocol's messages reach a real unix datagram socket at the pace systemd needs, and
log lines bound for the journal carry a priority and no time stamp of their own.

The collector's whole run under the protocol, through a real mosquitto, is
tests/e2e/test_settings_service.py."""

import logging
import os
import pathlib
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile

import pytest

from asuser import run_as
from wattlog import settings, systemd
from wattlog.service import build
from wattlog.settings import Settings

needs_systemd_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                           reason="systemd-analyze is not installed")


def write_config(tmp_path, data="/var/lib/wattlog", extra=""):
    (tmp_path / "wattlog-collector.password").write_text("pw\n")
    (tmp_path / "wattlog-operator.password").write_text("op\n")
    (tmp_path / "http.token").write_text("t" * 43 + "\n")
    path = tmp_path / "wattlog.toml"
    path.write_text('broker = "mqtt://wattlog-collector@127.0.0.1:1883"\n'
                    'password_file = "wattlog-collector.password"\ndata = "%s"\n%s'
                    '[http]\nlisten = "127.0.0.1:8080"\ntoken_file = "http.token"\n'
                    'operator_password_file = "wattlog-operator.password"\n' % (data, extra))
    return str(path)


def install_service(*argv):
    return subprocess.run([sys.executable, "-m", "wattlog.cli", "install-service"] + list(argv),
                          capture_output=True, text=True, timeout=60)


@needs_systemd_analyze
def test_the_unit_passes_systemd_analyze_verify_without_a_warning(tmp_path):
    """The unit for this venv's wattlog (ExecStart must name an executable that exists), its own
    user, the data in StateDirectory=, the sandbox the issue asks for, Type=notify with a
    watchdog, and each file the config names handed over by systemd: verify exits 0 and says
    nothing (it only warns, exit 0, about a misspelt key or a bad value)."""
    done = install_service("--config", write_config(tmp_path), "--print")
    assert done.returncode == 0 and not done.stderr, done
    unit = tmp_path / "wattlog.service"
    unit.write_text(done.stdout)
    lines = set(done.stdout.splitlines())
    exe = os.path.join(os.path.dirname(sys.executable), "wattlog")
    assert "ExecStart=%s collect --config ${CREDENTIALS_DIRECTORY}/wattlog.toml" % exe in lines
    for line in ("Type=notify", "User=wattlog", "StateDirectory=wattlog",
                 "ConfigurationDirectory=wattlog", "ProtectSystem=strict", "ProtectHome=yes",
                 "NoNewPrivileges=yes", "PrivateTmp=yes", "Restart=on-failure",
                 "WatchdogSec=%d" % systemd.WATCHDOG_S,
                 "RestartPreventExitStatus=%d" % systemd.CONFIG_EXIT,
                 "LoadCredential=wattlog.toml:%s/wattlog.toml" % tmp_path,
                 "LoadCredential=wattlog-collector.password:%s/wattlog-collector.password"
                 % tmp_path,
                 "LoadCredential=http.token:%s/http.token" % tmp_path,
                 "LoadCredential=wattlog-operator.password:%s/wattlog-operator.password"
                 % tmp_path):
        assert line in lines, line
    verify = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                            text=True, timeout=60)
    assert verify.returncode == 0 and not (verify.stdout + verify.stderr).strip(), verify


def test_install_service_refuses_what_the_service_could_not_use(tmp_path):
    """A data directory the service may not write (only StateDirectory= is writable under
    ProtectSystem=strict), two files of one name (each credential is named by its file name),
    a path systemd would read as a specifier (%) or a variable ($): one line each, nothing
    written."""
    done = install_service("--config", write_config(tmp_path, data="/srv/wattlog"), "--print")
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and not done.stdout, done
    assert "keeps its data in /var/lib/wattlog (StateDirectory=" in done.stderr, done.stderr
    (tmp_path / "ca").mkdir()
    (tmp_path / "ca" / "http.token").write_text("cert\n")
    done = install_service("--config", write_config(tmp_path, extra='ca = "ca/http.token"\n'),
                           "--print")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done
    assert "have the same file name" in done.stderr, done.stderr
    odd = tmp_path / "100%"
    odd.mkdir()
    done = install_service("--config", write_config(odd), "--print")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done
    assert "systemd reads %, $ and \\ in a unit file as its own" in done.stderr, done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to become another user")
def test_install_service_needs_root_and_says_so():
    """Run by a user who cannot add users nor write /etc/systemd/system (here: nobody), it
    says to run it as root, in one line, and changes nothing."""
    public = pathlib.Path(tempfile.mkdtemp(prefix="wattlog-service-"))
    try:
        public.chmod(0o755)
        path = write_config(public)
        for f in public.iterdir():
            f.chmod(0o644)
        status, err = run_as(pwd.getpwnam("nobody"), ["install-service", "--config", path])
    finally:
        shutil.rmtree(public)
    assert (status, err) == (1, "wattlog install-service: install-service writes "
                                "/etc/systemd/system and adds the user wattlog: run it as root "
                                "(sudo)\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="install-service needs root to get that far")
def test_without_systemd_install_service_changes_nothing_and_says_what_to_run(tmp_path,
                                                                             monkeypatch):
    """Issue 21 item 4: it made the user, wrote the unit, then failed on `systemctl
    daemon-reload` with no hint. On a machine that runs no systemd (sd_booted: no
    /run/systemd/system) it refuses before it changes anything, in one line naming the
    command that runs the collector instead. The commands it would run (useradd, systemctl)
    are recorded here, never run: should the refusal break, this machine keeps its users."""
    path = write_config(tmp_path)
    units = tmp_path / "units"
    units.mkdir()
    ran = []
    monkeypatch.setattr(systemd.subprocess, "run", lambda argv, **kw: ran.append(argv) or
                        subprocess.CompletedProcess(argv, 0, "", ""))
    monkeypatch.setattr(systemd.pwd, "getpwnam", lambda name: None)  # as if the user existed
    with pytest.raises(systemd.ServiceError) as e:
        systemd.install(path, unit_dir=str(units), booted_dir=str(tmp_path / "not-booted"))
    assert str(e.value) == (
        "this machine does not run systemd (a container, WSL or a NAS box?), so there is no "
        "service to install and nothing was changed: run `%s collect --config %s` in the "
        "foreground, or under the init system this machine has (README: \"Without systemd\")"
        % (" ".join(systemd.executable()), path))
    assert not list(units.iterdir()) and ran == []


class NotifySocket:
    def __init__(self, monkeypatch):
        self.dir = tempfile.mkdtemp(prefix="wn")
        self.path = os.path.join(self.dir, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0)
        monkeypatch.setenv("NOTIFY_SOCKET", self.path)

    def received(self):
        """Every datagram waiting, as {field: value} each."""
        out = []
        while True:
            try:
                data = self.sock.recv(4096)
            except BlockingIOError:
                return out
            out.append(dict(line.split("=", 1) for line in data.decode().splitlines()))

    def close(self):
        self.sock.close()
        shutil.rmtree(self.dir)


@pytest.fixture
def collector(tmp_path):
    c = build(Settings(data_dir=str(tmp_path / "data"), broker="mqtt://127.0.0.1:1"))
    yield c  # never connects here
    c.store.close()


@pytest.fixture
def notify(monkeypatch):
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    s = NotifySocket(monkeypatch)
    yield s
    s.close()


def test_ready_watchdog_status_and_stopping_reach_the_socket_at_their_pace(
        collector, notify, monkeypatch):
    """Before READY=1 only STATUS= says what start-up waits for; after it, WATCHDOG=1 goes
    with each STATUS= every quarter of $WATCHDOG_USEC of the monotonic clock, and not on every
    pass of the loop (which runs every 0.2 s or faster); STOPPING=1 at the end."""
    monkeypatch.setenv("WATCHDOG_USEC", "8000000")
    now = [100.0]
    n = systemd.Notifier(clock=lambda: now[0])
    assert n.every_s == 2.0
    n.tick(collector)
    assert notify.received() == [{"STATUS": "starting: connecting to the broker at "
                                            "127.0.0.1:1"}]
    n.started(collector)
    assert notify.received() == [{"READY": "1", "STATUS": "broker lost, reconnecting; 0 plugs "
                                                          "heard; 0 readings pending; 0 commits"}]
    for step in range(9):  # 0.2 s apart: 1.8 s, less than a quarter of the watchdog
        now[0] += 0.2
        n.tick(collector)
    assert notify.received() == []
    now[0] += 0.2
    n.tick(collector)
    assert [m.get("WATCHDOG") for m in notify.received()] == ["1"]
    now[0] += 1.0
    n.tick(collector)
    assert notify.received() == []
    n.stopping(collector)
    assert notify.received() == [{"STOPPING": "1",
                                  "STATUS": "stopping: committing 0 pending readings"}]


def test_no_watchdog_for_another_process_and_nothing_without_a_socket(collector, notify,
                                                                     monkeypatch):
    """$WATCHDOG_PID naming another process means the watchdog is not ours: STATUS= only.
    Without $NOTIFY_SOCKET (run by hand) nothing is sent at all."""
    monkeypatch.setenv("WATCHDOG_USEC", "8000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))
    now = [100.0]
    n = systemd.Notifier(clock=lambda: now[0])
    assert n.watchdog_s is None
    n.started(collector)
    now[0] += systemd.STATUS_EVERY_S
    n.tick(collector)
    assert [m.get("WATCHDOG") for m in notify.received()] == [None, None]
    monkeypatch.delenv("NOTIFY_SOCKET")
    quiet = systemd.Notifier()
    quiet.started(collector)
    quiet.tick(collector)
    quiet.stopping(collector)
    assert not quiet.enabled and notify.received() == []


def test_log_lines_for_the_journal_carry_a_priority_and_no_time(tmp_path, monkeypatch):
    """With stderr the journal's stream ($JOURNAL_STREAM holds its device and inode), the
    journal adds the time, so the line has none; its syslog priority leads it. Any other
    stream (a file, a terminal, $JOURNAL_STREAM left over from a parent) keeps the time."""
    out = tmp_path / "log"
    root = logging.getLogger()
    saved = root.handlers[:]
    with open(out, "w") as f:
        st = os.fstat(f.fileno())
        try:
            for stream_id in ("%d:%d" % (st.st_dev, st.st_ino), "%d:%d" % (st.st_dev,
                                                                          st.st_ino + 1)):
                monkeypatch.setenv("JOURNAL_STREAM", stream_id)
                root.handlers = []
                systemd.setup_logging(f)
                logging.getLogger("wattlog").warning("disk nearly full")
                logging.getLogger("wattlog").info("commit")
                f.flush()
        finally:
            root.handlers = saved
    lines = out.read_text().splitlines()
    assert lines[:2] == ["<4>WARNING disk nearly full", "<6>INFO commit"], lines
    assert lines[2].endswith(" WARNING disk nearly full") and lines[2][:2] == "20", lines


def test_settings_checked_by_install_service_are_the_collectors(tmp_path):
    """install-service refuses a config the collector would refuse, with the same line."""
    path = write_config(tmp_path, extra='timezone = "Mars/Olympus"\n')
    done = install_service("--config", path, "--print")
    with pytest.raises(settings.SettingsError) as e:
        settings.load(path)
    assert done.returncode == systemd.CONFIG_EXIT
    assert done.stderr == "wattlog install-service: %s\n" % e.value
