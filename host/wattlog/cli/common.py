"""common.py - what every verb of the wattlog command shares: the settings it runs from (the
config file with each flag given in its place), its errors (one line; UsageError for a value
given on the command line: exit status 2), passwords from files, and tables.
"""

import errno
import os
import sys

PASSWORD_ENV = "WATTLOG_MQTT_PASSWORD"


# Flags that stand for a setting of the config file (settings.py): flag dest -> Settings field
FLAG_SETTINGS = {"broker": "broker", "password_file": "password_file", "ca": "ca",
                 "data": "data_dir", "base_topic": "base_topic", "client_id": "client_id",
                 "commit_interval": "commit_interval_s", "summary_interval": "summary_interval_s",
                 "status_interval": "status_interval_s", "max_future": "max_future_s",
                 "max_age": "max_age_s", "listen": "http_listen",
                 "http_token_file": "http_token_file",
                 "operator_password_file": "operator_password_file", "influx": "influx_url",
                 "influx_schema": "influx_schema", "influx_password_file": "influx_password_file",
                 "influx_timeout": "influx_timeout_s", "timezone": "timezone",
                 "store": "store", "store_password_file": "store_password_file"}


class CliError(Exception):
    """The verb failed: one line saying why and what to do (exit status 1)."""


class UsageError(CliError):
    """A value given on the command line cannot be used: exit status 2, as argparse's."""
    status = 2


def command_settings(args, files=()):
    """What this verb runs from: the config file (settings.for_command: --config, else
    $WATTLOG_CONFIG, else /etc/wattlog/wattlog.toml when it is there) with every flag given in
    its place; `files`: the settings' files this verb reads, checked before anything starts."""
    from wattlog import settings
    s, note = settings.for_command(args.config, files)
    if note:
        print("wattlog %s: note: %s" % (args.verb, note), file=sys.stderr)
    flags = {field: getattr(args, dest) for dest, field in FLAG_SETTINGS.items()
             if getattr(args, dest, None) is not None}
    settings.check_files(settings.Settings(**{k: v for k, v in flags.items()
                                              if k in files}), files)  # "the command line"
    if getattr(args, "influx_name", None):  # --influx-name wins for the plug it names
        from wattlog.bridges.influx import InfluxError, parse_names
        try:
            flags["influx_names"] = dict(s.influx_names or {}, **parse_names(args.influx_name))
        except InfluxError as e:
            raise CliError(str(e)) from None
    return settings.override(s, **flags)


def data_dir(path):
    """path, if it is a directory (a data directory, or one `collect` may fill)."""
    if not os.path.isdir(path):
        raise CliError("%s is not a data directory (is the path right? `wattlog collect` "
                       "creates it; --data DIR or the config's data names another)" % path)
    return path


def data_path(args):
    """The data directory this verb reads: --data, else the config's, else /var/lib/wattlog."""
    return data_dir(command_settings(args).data_dir)


def reader(s):
    """The data the settings `s` name, through the storage interface (store/): the data
    directory's files, or the settings' PostgreSQL (its store key)."""
    from wattlog import service
    from wattlog.store.base import StoreError
    if not s.store:
        data_dir(s.data_dir)
    try:
        return service.reader(s)
    except (StoreError, ValueError, OSError) as e:
        raise CliError(str(e)) from None


def broker_password(password_file):
    """The broker password from `password_file` (its first line) or $WATTLOG_MQTT_PASSWORD;
    None: the URL's, if it has one. Errors name the file, never what is in it."""
    if not password_file:
        return os.environ.get(PASSWORD_ENV) or None
    try:
        with open(password_file, "rb") as f:
            password = f.readline().rstrip(b"\r\n").decode()
    except OSError as e:
        raise CliError("cannot read the password file %s (%s)"
                       % (password_file, e.strerror)) from None
    except UnicodeDecodeError:
        raise CliError("the password file %s is not UTF-8 text" % password_file) from None
    if not password:
        raise CliError("the password file %s is empty" % password_file)
    return password


def check_broker(url, password_file):
    """The broker URL checked and the password read before anything else happens."""
    from wattlog.mqtt import parse_broker, redact
    try:
        user = parse_broker(url)[2]
    except ValueError as e:
        raise CliError(str(e)) from None
    password = broker_password(password_file)
    if password is not None and user is None:
        raise CliError("broker %s names no user: give mqtt://USER@HOST[:PORT] with the password"
                       % redact(url))
    return password


def operator(args):
    """(Settings, broker URL, password) for a verb that logs in as wattlog-operator (plug,
    ota): --broker, else the config's broker as that user; --password-file, else the config's
    operator_password_file, else $WATTLOG_MQTT_PASSWORD."""
    from wattlog.mqtt import with_user
    from wattlog.fleet.provision import OPERATOR
    s = command_settings(args, ("ca", "operator_password_file"))
    url = args.broker or with_user(s.broker, OPERATOR)
    password_file = args.password_file or (None if args.broker else s.operator_password_file)
    return s, url, check_broker(url, password_file)


def provisioned_dir(s):
    """wattlog provision's directory: the config's (provision writes wattlog.toml there)."""
    from wattlog import settings
    return os.path.dirname(os.path.abspath(s.path or settings.DEFAULT_PATH))


class Progress:
    """A long verb's progress on stderr: on a terminal one line redrawn in place (a bar, the
    percent, what it is at); otherwise a plain line at each tenth done and at the end, so a
    log or a pipe gets a few lines, not thousands. note(line) says a line of its own."""

    def __init__(self, verb, stream=None):
        self.verb = verb
        self.out = stream or sys.stderr
        self.tty = self.out.isatty()
        self.said = None  # (tenth, what) last said on a plain line
        self.drawn = False  # a redrawn line is on the terminal

    def __call__(self, done, total, what):
        tenth = done * 10 // max(total, 1)
        if self.tty:
            bar = "#" * (done * 30 // max(total, 1))
            self.out.write("\r%s [%-30s] %3d%% %s\033[K" % (self.verb, bar,
                                                            done * 100 // max(total, 1), what))
            self.out.flush()
            self.drawn = True
        elif self.said is None or tenth > self.said[0] or (done == total and
                                                           what != self.said[1]):
            self.said = (tenth, what)
            self.out.write("%s: %d%% (%s)\n" % (self.verb, tenth * 10, what))
            self.out.flush()

    def note(self, line):
        self.out.write("%s%s: %s\n" % ("\r\033[K" if self.drawn else "", self.verb, line))
        self.drawn = False

    def close(self):
        """Ends a redrawn line (the shell's prompt then starts on a line of its own)."""
        if self.drawn:
            self.out.write("\n")
            self.drawn = False


def print_table(rows):
    """Rows of text as columns, left-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def os_error(e):
    """An OSError as one sentence that names the path and says what to do where we can."""
    what = e.strerror or str(e)
    path = " %s" % e.filename if e.filename else ""
    advice = {errno.EROFS: "the file system is read-only",
              errno.EACCES: "this user may not; run as the user that owns it, or fix its "
                            "permissions",
              errno.EPERM: "this user may not; run as the user that owns it, or fix its "
                           "permissions",
              errno.ENOSPC: "the disk is full; free some space",
              errno.ENOENT: "is the path right?"}.get(e.errno)
    return "cannot use%s: %s%s" % (path, what, "; " + advice if advice else "")
