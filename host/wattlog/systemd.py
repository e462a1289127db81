"""systemd.py - the collector as a systemd service: the notify protocol, journal logging, and
`wattlog install-service`, which writes the unit (service.py builds the service itself).

The notify protocol (sd_notify(3), through the sdnotify package; nothing is sent where
$NOTIFY_SOCKET is unset, so the same collector runs by hand):
  READY=1      once the collector listens: the broker's retained acks are in and the data
               directory agrees with them (Collector.recover); `systemctl start` returns then
  WATCHDOG=1   from the collector's loop, every quarter of WatchdogSec ($WATCHDOG_USEC): a
               loop that hangs is killed and restarted by systemd. Timed on the monotonic
               clock: a Pi without a real-time clock steps its wall clock at boot
  STATUS=...   with each ping: plugs heard, readings pending, commits and the last one's time
               (`systemctl status wattlog` shows it)
  STOPPING=1   at SIGTERM, before the last commit
Timing is ours, not the library's (sdnotify only sends), so a wall-clock step cannot starve
the watchdog.

Journal: when stderr is the journal ($JOURNAL_STREAM names it), log lines carry no time stamp
(the journal adds its own) and start with their syslog priority (<3> error, <4> warning,
<6> info), so `journalctl -p warning -u wattlog` finds the problems.

Why `wattlog install-service` and not a unit file shipped under host/: the unit depends on
where wattlog is installed (ExecStart= needs the absolute path of this venv's `wattlog`) and on
the config (each file it names is handed over by systemd, one LoadCredential= line each); a
static file would need editing by hand in both places, and a wrong path fails only at boot.
The user `wattlog` is made too (useradd --system). The service user cannot read /etc/wattlog
(provision keeps it root's and mosquitto's): systemd reads the config and the files it names
as root and gives the service a private copy ($CREDENTIALS_DIRECTORY, settings.py), so the
collector reads its password, its token and the operator's password and nothing else there.
"""

import logging
import os
import pwd
import shlex
import subprocess
import sys
import time

import sdnotify

from wattlog import settings as settings_mod
from wattlog.store import durable

UNIT = "wattlog"
USER = "wattlog"
STATE_DIR = "/var/lib/wattlog"
UNIT_DIR = "/etc/systemd/system"
WATCHDOG_S = 120     # WatchdogSec: a commit on a slow SD card may take a while
PINGS_PER_WATCHDOG = 4
STATUS_EVERY_S = 30.0  # STATUS= lines when there is no watchdog
CONFIG_EXIT = 78     # sysexits' EX_CONFIG: a config that is refused is not restarted


class ServiceError(Exception):
    pass


class Notifier:
    """The notify protocol as the collector speaks it (module docstring)."""

    def __init__(self, clock=time.monotonic):
        self.enabled = bool(os.environ.get("NOTIFY_SOCKET"))
        self._sd = sdnotify.SystemdNotifier() if self.enabled else None  # reads it too
        self._clock = clock
        usec, pid = os.environ.get("WATCHDOG_USEC", ""), os.environ.get("WATCHDOG_PID", "")
        mine = not pid or pid == str(os.getpid())  # a watchdog meant for another process
        self.watchdog_s = int(usec) / 1e6 if usec.isdigit() and int(usec) and mine else None
        self.every_s = self.watchdog_s / PINGS_PER_WATCHDOG if self.watchdog_s else STATUS_EVERY_S
        self.ready = False
        self._sent_at = None
        self._commits, self._commit_time = 0, None

    def _send(self, *lines):
        if self.enabled:
            self._sd.notify("\n".join(lines) + "\n")
            self._sent_at = self._clock()

    def status(self, collector):
        """One line on the collector's state, for STATUS=."""
        if not self.ready:
            if not collector.connected:
                return "starting: connecting to the broker at %s:%d" % (collector.host,
                                                                       collector.port)
            return "starting: checking the data against the acks the broker retains"
        st = collector.store.status()
        commits = st["commits"]
        if commits != self._commits:
            self._commits, self._commit_time = commits, time.time()
        last = time.strftime(", the last at %H:%M:%S", time.localtime(self._commit_time)) \
            if self._commit_time else ""
        return "%s; %d plugs heard; %d readings pending; %d commits%s" % (
            "listening" if collector.connected else "broker lost, reconnecting",
            st["plugs_heard"], st["pending_points"], commits, last)

    def started(self, collector):
        """The collector listens: READY=1."""
        self.ready = True
        self._send("READY=1", "STATUS=" + self.status(collector))

    def tick(self, collector):
        """Called from the collector's loop: WATCHDOG=1 (once ready) and STATUS= when due."""
        if not self.enabled or (self._sent_at is not None
                                and self._clock() - self._sent_at < self.every_s):
            return
        status = "STATUS=" + self.status(collector)
        self._send(*(["WATCHDOG=1", status] if self.ready and self.watchdog_s else [status]))

    def stopping(self, collector):
        self._send("STOPPING=1", "STATUS=stopping: committing %d pending readings"
                   % collector.store.status()["pending_points"])


class _JournalFormatter(logging.Formatter):
    _PRIORITY = ((logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6))

    def format(self, record):
        priority = next((p for level, p in self._PRIORITY if record.levelno >= level), 7)
        return "<%d>%s" % (priority, super().format(record))


def to_journal(stream=sys.stderr, environ=os.environ):
    """True when `stream` is the journal's ($JOURNAL_STREAM holds its device and inode)."""
    try:
        dev, ino = environ.get("JOURNAL_STREAM", "").split(":")
        st = os.fstat(stream.fileno())
        return (st.st_dev, st.st_ino) == (int(dev), int(ino))
    except (ValueError, OSError, AttributeError):
        return False


def setup_logging(stream=sys.stderr):
    """The log on stderr: with the time in front, or, in the journal, with the priority."""
    handler = logging.StreamHandler(stream)
    if to_journal(stream):
        handler.setFormatter(_JournalFormatter("%(levelname)s %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])


def executable():
    """The command that runs this wattlog: the venv's `wattlog` script beside this Python."""
    script = os.path.join(os.path.dirname(sys.executable), "wattlog")
    if os.access(script, os.X_OK):
        return [script]
    return [sys.executable, "-m", "wattlog.cli"]


def credentials(s):
    """[(credential name, absolute path)] for the config and every file it names."""
    files = [("wattlog.toml", os.path.abspath(s.path))]
    for field in settings_mod.FILES:
        name = getattr(s, field)
        if name is not None:
            files.append((os.path.basename(name), os.path.abspath(name)))
    seen = {}
    for cred, path in files:
        if cred in seen and seen[cred] != path:
            raise ServiceError("%s and %s have the same file name, and the service gets each "
                               "file by its name: rename one" % (seen[cred], path))
        seen[cred] = path
    return sorted(seen.items())


def unit_text(s, command):
    """The unit file for the settings `s` (loaded from s.path) run by `command` (argv)."""
    if os.path.abspath(s.data_dir) != STATE_DIR:
        raise ServiceError("%s: the service keeps its data in %s (StateDirectory=, owned by "
                           "the user %s); set data = \"%s\" there, or mount your disk on it"
                           % (s.path, STATE_DIR, USER, STATE_DIR))
    for path in command + [p for _, p in credentials(s)]:
        if set(path) & set("%$\\\n") or not path.isprintable():
            raise ServiceError("%s: systemd reads %%, $ and \\ in a unit file as its own "
                               "(and no control character may be in it): move or rename it"
                               % path)
    home = any(command[0].startswith(d) for d in ("/home/", "/root/", "/run/user/"))
    load = "".join("LoadCredential=%s:%s\n" % (cred, path) for cred, path in credentials(s))
    return """# %(unit)s.service - written by `wattlog install-service --config %(config)s`;
# run it again after changing the config's file names or moving wattlog.
[Unit]
Description=wattlog collector: plug readings over MQTT into PHPFina files
Wants=network-online.target
After=network-online.target mosquitto.service

[Service]
Type=notify
NotifyAccess=main
# ${CREDENTIALS_DIRECTORY}: the service's private copy of the config (LoadCredential= below)
ExecStart=%(exec)s collect --config ${CREDENTIALS_DIRECTORY}/wattlog.toml
User=%(user)s
Group=%(user)s
# the config and each file it names, read by systemd as root: the service user may not read
# /etc/wattlog itself
%(load)sStateDirectory=%(unit)s
StateDirectoryMode=0750
ConfigurationDirectory=%(unit)s
ConfigurationDirectoryMode=0750
UMask=0027
WatchdogSec=%(watchdog)d
Restart=on-failure
RestartSec=5
# a refused config (exit %(config_exit)d) waits for you, not for a restart
RestartPreventExitStatus=%(config_exit)d
# start-up waits for the broker and may rebuild the query summaries (its progress is logged)
TimeoutStartSec=infinity
# a clean stop commits what is pending and writes the summaries
TimeoutStopSec=300
StandardOutput=journal
StandardError=journal
SyslogIdentifier=%(unit)s
ProtectSystem=strict
ProtectHome=%(protect_home)s
PrivateTmp=yes
PrivateDevices=yes
NoNewPrivileges=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
SystemCallArchitectures=native
CapabilityBoundingSet=

[Install]
WantedBy=multi-user.target
""" % {"unit": UNIT, "config": s.path, "exec": " ".join(shlex.quote(a) for a in command),
       "user": USER, "load": load, "watchdog": WATCHDOG_S, "config_exit": CONFIG_EXIT,
       "protect_home": "read-only" if home else "yes"}


def install(config, unit_dir=UNIT_DIR, progress=print, booted_dir="/run/systemd/system"):
    """Write the unit for `config`, make the user, enable and (re)start the service. Without
    systemd (booted_dir is how sd_booted(3) tells) nothing is changed: ServiceError says how
    to run the collector instead."""
    s = settings_mod.load(config)
    text = unit_text(s, executable())
    if os.geteuid() != 0:
        raise ServiceError("install-service writes %s and adds the user %s: run it as root "
                           "(sudo)" % (unit_dir, USER))
    if not os.path.isdir(booted_dir):
        raise ServiceError("this machine does not run systemd (a container, WSL or a NAS box?), "
                           "so there is no service to install and nothing was changed: run "
                           "`%s collect --config %s` in the foreground, or under the init system "
                           "this machine has (README: \"Without systemd\")"
                           % (" ".join(executable()), config))

    def do(*argv):
        done = subprocess.run(list(argv), capture_output=True, text=True)
        if done.returncode != 0:
            said = (done.stderr or "").strip().splitlines()
            raise ServiceError("%s failed: %s" % (" ".join(argv), said[-1] if said else
                                                  "exit status %d" % done.returncode))
    try:
        pwd.getpwnam(USER)
    except KeyError:
        do("useradd", "--system", "--user-group", "--home-dir", STATE_DIR, "--no-create-home",
           "--shell", "/usr/sbin/nologin", "--comment", "wattlog collector", USER)
        progress("made the system user %s" % USER)
    path = os.path.join(unit_dir, UNIT + ".service")
    durable.write_bytes(path, text.encode(), mode=0o644)
    progress("wrote %s" % path)
    do("systemctl", "daemon-reload")
    do("systemctl", "enable", UNIT)
    do("systemctl", "restart", "--no-block", UNIT)
    progress("starting: `systemctl status %s` shows how it is doing, `journalctl -u %s -f` its "
             "log" % (UNIT, UNIT))
