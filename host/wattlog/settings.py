"""settings.py - the collector's one config file (/etc/wattlog/wattlog.toml), read and checked.
(About 430 lines: one table of keys, each with its check and its words.)

    s = load("/etc/wattlog/wattlog.toml")   # a frozen Settings; SettingsError: one line
    s = Settings()                          # no file: every default
    s = override(s, commit_interval_s=60)   # a command-line flag wins (None: not given)
    s, note = for_command(given, files)     # what every `wattlog` verb runs from: --config,
                                            # else $WATTLOG_CONFIG, else DEFAULT_PATH if there

The file (TOML, read with tomllib) and its keys, every one optional:

    broker = "mqtt://wattlog-collector@192.168.1.10:1883"   broker            mqtt[s]:// URL
    password_file = "wattlog-collector.password"            password_file     the broker's
    ca = "ca.crt"                                           ca                for mqtts://
    data = "/var/lib/wattlog"                               data_dir
    base_topic = "wattlog"   client_id = "wattlog-collector"
    commit_interval = 300    summary_interval = "6h"        *_interval_s      seconds, or a
    status_interval = 60     max_future = 3600              max_future_s      duration: 90s,
    max_age = "7d"                                          max_age_s         15m, 36h, 7d
    timezone = "Europe/Berlin"                              timezone          IANA name, UTC
    store = "postgresql://wattlog@db.lan:5432/wattlog"      store             None: PHPFina
    store_password_file = "db.password"                     store_password_file   files
    [http]
    listen = "127.0.0.1:8080"                               http_listen       None: no HTTP
    read_open = true                                        http_read_open    (default true)
    token_file = "http.token"                               http_token_file
    operator_password_file = "wattlog-operator.password"    operator_password_file
    [tariff]                                                tariff            the table as
    currency = "EUR"  price = 0.30  (or day_price, night_price, night_start, night_end)
                                                            read, checked by energy.py
    [runs]                                                  runs              checked by
    enabled = true  events = true  [runs.washer] kind = "washer"  ...         runs/__init__.py
    [cluster]                                               (cluster.py: past one Pi)
    nats = ["nats://n1.lan:4222", "nats://n2.lan:4222"]     cluster_nats      its NATS nodes
    mqtt = ["mqtt://wattlog-collector@n1.lan"]              cluster_mqtt      its gateways
    partitions = 64   name = "pi-3"                         cluster_partitions, cluster_name
    lease = "10s"                                           cluster_lease_s   silent this
                                                            long, a collector's leases end
    [influx]                                                (sink.py, influx.py; what the
    url = "influx://wattlog@127.0.0.1:8086/wattlog"         influx_url         --influx*
    schema = "sp3s"                                         influx_schema      flags set)
    password_file = "influx.password"                       influx_password_file
    timeout = 10                                            influx_timeout_s
    [influx.names]                                          influx_names      {node: name}
    plug-1 = "Washing machine"        (sp3s: the measurement a plug writes to)

Design notes:
- Everything is checked before the collector touches anything: an unknown key (a typo would
  otherwise be a setting silently not set), a wrong type, a time zone zoneinfo does not know,
  a credentials file that cannot be read. Each refusal is one SettingsError line naming the
  file and the key, never a traceback, and never a value that could be a secret (wrong types
  are named by their type, not shown).
- Secrets are never in this file, only paths to them: `ps` shows a command line, and this
  file is often shared when asking for help. A relative path is read from the config file's
  directory, so provision's wattlog.toml names its neighbours (wattlog-collector.password).
- Every verb reads the config (for_command): the one given with --config, else the one
  $WATTLOG_CONFIG names, else /etc/wattlog/wattlog.toml. A file given either way must load;
  the default one is skipped when it does not exist (a machine without provision's files runs
  on flags and defaults) and, when this user may not read it (/etc/wattlog is root's), the
  verb runs on its flags and says once, in a note, that the config's settings are not used.
  A verb checks only the files it uses (a `wattlog feeds` needs no broker password).
- Under systemd (`wattlog install-service`), the service user may not read /etc/wattlog at
  all: systemd reads the config and each file it names as root and hands them over
  (LoadCredential=, one credential per file, named by its file name). A config loaded from
  $CREDENTIALS_DIRECTORY therefore reads each of its files from there, by file name.
"""

import argparse
import dataclasses
import math
import os
import zoneinfo

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, from its own package
    import tomli as tomllib

from wattlog.store.feeds import NODE_ID
from wattlog.store.ingest import MAX_AGE_S
from wattlog.store.rollup import FLUSH_S
from wattlog.times import duration

TOKEN_MIN_CHARS = 16
DEFAULT_PATH = "/etc/wattlog/wattlog.toml"
CONFIG_ENV = "WATTLOG_CONFIG"


class SettingsError(ValueError):
    """The config cannot be used; the message is one line naming the file and the key."""


@dataclasses.dataclass(frozen=True)
class Settings:
    broker: str = "mqtt://127.0.0.1:1883"
    password_file: str | None = None
    ca: str | None = None
    data_dir: str = "/var/lib/wattlog"
    base_topic: str = "wattlog"
    client_id: str = "wattlog-collector"
    commit_interval_s: float = 300.0
    summary_interval_s: float = float(FLUSH_S)
    status_interval_s: float = 60.0
    max_future_s: int = 3600
    max_age_s: float = float(MAX_AGE_S)
    timezone: str = "UTC"
    http_listen: str | None = None
    http_read_open: bool = True  # as api.py: reading open, actions need the token
    http_token_file: str | None = None
    operator_password_file: str | None = None
    tariff: dict | None = None
    influx_url: str | None = None  # None: no InfluxDB sink
    influx_schema: str | None = None  # None: influx.py's default
    influx_password_file: str | None = None
    influx_timeout_s: float | None = None  # None: influx.py's TIMEOUT_S
    influx_names: dict | None = None
    store: str | None = None  # None: PHPFina files in data_dir; else a postgresql:// URL
    store_password_file: str | None = None
    cluster_nats: tuple | None = None  # [cluster] nats: None is one collector, no cluster
    cluster_mqtt: tuple | None = None  # [cluster] mqtt: the gateways to try (default: broker)
    cluster_partitions: int = 64
    cluster_name: str | None = None    # this collector's name (default: host and PID)
    cluster_lease_s: float = 10.0      # a collector silent this long loses its partitions
    runs: dict | None = None  # the [runs] table, checked by runs/__init__.py (None: defaults)
    path: str | None = None  # the file these came from (None: defaults and flags only)


def _text(value):
    return value if isinstance(value, str) and value.strip() and "\0" not in value else None


def _seconds(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = duration(value)
        except argparse.ArgumentTypeError:
            return None
    if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def _flag(value):
    return value if isinstance(value, bool) else None


def _zone(value):
    if not isinstance(value, str):
        return None
    if value in ("UTC", "utc", "Z"):
        return "UTC"
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None
    return value


def _listen(value):
    """HOST:PORT or [IPv6]:PORT."""
    if not isinstance(value, str):
        return None
    host, colon, port = value.rpartition(":")
    if not colon or not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return value


# TOML key -> (Settings field, checker returning the value or None, what it must be)
_SECONDS = "seconds (a number, or a duration such as 90s, 15m, 36h, 7d)"
_KEYS = {
    "broker": ("broker", _text, "an mqtt:// or mqtts:// URL"),
    "password_file": ("password_file", _text, "a file name"),
    "ca": ("ca", _text, "a file name"),
    "data": ("data_dir", _text, "a directory"),
    "base_topic": ("base_topic", _text, "a topic such as wattlog"),
    "client_id": ("client_id", _text, "a client id"),
    "commit_interval": ("commit_interval_s", _seconds, _SECONDS),
    "summary_interval": ("summary_interval_s", _seconds, _SECONDS),
    "status_interval": ("status_interval_s", _seconds, _SECONDS),
    "max_future": ("max_future_s", _seconds, _SECONDS),
    "max_age": ("max_age_s", _seconds, _SECONDS),
    "timezone": ("timezone", _zone, "a time zone such as Europe/Berlin or UTC"),
    "store": ("store", lambda v: v if _text(v) and v.split("://")[0] in ("postgresql",
                                                                      "postgres")
              and "@" in v and ":" not in v.split("://", 1)[1].split("@")[0] else None,
              "a PostgreSQL URL such as postgresql://wattlog@db.lan:5432/wattlog (its password "
              "in store_password_file, never in the URL)"),
    "store_password_file": ("store_password_file", _text, "a file name"),
}
_HTTP_KEYS = {
    "listen": ("http_listen", _listen, "HOST:PORT, such as 127.0.0.1:8080 or 0.0.0.0:8080"),
    "read_open": ("http_read_open", _flag, "true or false"),
    "token_file": ("http_token_file", _text, "a file name"),
    "operator_password_file": ("operator_password_file", _text, "a file name"),
}
def _urls(scheme):
    def check(value):
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list) and value and all(
                _text(v) and v.split("://")[0] in scheme for v in value):
            return tuple(value)
        return None
    return check


def _partitions(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and \
        1 <= value <= 4096 else None


def _lease(value):
    # above twice the collector's heartbeat (cluster.REBALANCE_S: 2 s), so a live one keeps it
    value = _seconds(value)
    return value if value is not None and 5 <= value <= 3600 else None


_CLUSTER_KEYS = {
    "nats": ("cluster_nats", _urls(("nats", "tls")),
             "a list of NATS URLs such as [\"nats://n1.lan:4222\", \"nats://n2.lan:4222\"]"),
    "mqtt": ("cluster_mqtt", _urls(("mqtt", "mqtts")),
             "a list of MQTT URLs of the gateways, such as [\"mqtt://wattlog-collector@n1.lan\"]"),
    "partitions": ("cluster_partitions", _partitions, "a whole number from 1 to 4096"),
    "name": ("cluster_name", _text, "a name for this collector"),
    "lease": ("cluster_lease_s", _lease, "a duration from 5 s to 1 h such as \"10s\""),
}
_INFLUX_KEYS = {
    "url": ("influx_url", _text, "an InfluxDB URL such as influx://HOST:8086/DATABASE"),
    "schema": ("influx_schema", _text, "default or sp3s"),
    "password_file": ("influx_password_file", _text, "a file name"),
    "timeout": ("influx_timeout_s", _seconds, _SECONDS),
    "names": ("influx_names", lambda v: v if isinstance(v, dict) else None,
              "a table ([influx.names]) of NODE = \"measurement\""),
}
FILES = ("password_file", "ca", "http_token_file", "operator_password_file",
         "influx_password_file", "store_password_file")  # read at start
_SECRET_FILES = ("password_file", "http_token_file", "operator_password_file",
                 "influx_password_file", "store_password_file")


def _kind(value):
    """A TOML value's type in words (the value itself is never shown: it may be a secret)."""
    for types, words in ((bool, "true/false"), (str, "text"), (int, "a whole number"),
                         (float, "a number"), (dict, "a table"), (list, "a list")):
        if isinstance(value, types):
            return words
    return "a date or time"


def _take(table, keys, where, path, out):
    for key, value in table.items():
        if key not in keys:
            raise SettingsError("%s: unknown key %r%s (known: %s)" % (
                path, where + key, "" if not where else " in [%s]" % where.rstrip("."),
                ", ".join(sorted(keys))))
        field, check, must = keys[key]
        checked = check(value)
        if checked is None:
            if isinstance(value, str) and check is _zone:
                raise SettingsError("%s: %s %r is not a time zone: use a name such as "
                                    "Europe/Berlin, or UTC" % (path, where + key, value))
            raise SettingsError("%s: %s must be %s, not %s"
                                % (path, where + key, must, _kind(value)))
        out[field] = checked


def config_path(given=None):
    """(path, given): the config file a verb reads (module docstring) and whether the user
    named it (--config or $WATTLOG_CONFIG) rather than it being the default."""
    if given:
        return given, True
    named = os.environ.get(CONFIG_ENV, "").strip()
    return (named, True) if named else (DEFAULT_PATH, False)


def for_command(given=None, files=FILES):
    """(Settings, note) for a `wattlog` verb: the config file it reads (config_path), with only
    `files` (fields of FILES) checked; Settings() when the default file is not there. note is
    a sentence when the default file exists but this user may not read it (the verb then runs
    on its flags and the defaults), else None."""
    path, named = config_path(given)
    if not named:
        try:
            with open(path, "rb"):
                pass
        except FileNotFoundError:
            return Settings(), None
        except OSError as e:
            return Settings(), ("%s cannot be read (%s), so its settings are not used: run as "
                                "root (sudo), or give --config FILE" % (path, e.strerror))
    return load(path, files), None


def load(path, files=FILES):
    """The Settings in the TOML file at `path`, checked (module docstring); SettingsError.
    `files`: the fields of FILES whose files must be readable (default: all of them)."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as e:
        raise SettingsError("cannot read the config file %s (%s)" % (path, e.strerror)) from None
    except tomllib.TOMLDecodeError as e:
        raise SettingsError("%s is not valid TOML: %s" % (path, e)) from None
    except UnicodeDecodeError:
        raise SettingsError("%s is not UTF-8 text" % path) from None
    values = {}
    _take({k: v for k, v in doc.items() if k not in ("http", "tariff", "influx", "cluster",
                                                        "runs")},
          dict(_KEYS, http=None, tariff=None, influx=None, cluster=None, runs=None), "", path,
          values)
    for table in ("http", "tariff", "influx", "cluster", "runs"):
        if table in doc and not isinstance(doc[table], dict):
            raise SettingsError("%s: %s must be a table ([%s]), not %s"
                                % (path, table, table, _kind(doc[table])))
    _take(doc.get("http", {}), _HTTP_KEYS, "http.", path, values)
    _take(doc.get("cluster", {}), _CLUSTER_KEYS, "cluster.", path, values)
    if "cluster" in doc and ("cluster_nats" not in values or "store" not in values):
        raise SettingsError("%s: [cluster] needs nats = [...] and, at the top, store = "
                            "\"postgresql://...\": a cluster's collectors share one database"
                            % path)
    if "influx" in doc:
        _influx(doc["influx"], path, values)
    if "tariff" in doc:
        from wattlog.periods import EnergyError, Tariff  # its checks, its words
        try:
            Tariff.from_settings(doc["tariff"])
        except EnergyError as e:
            raise SettingsError("%s: %s" % (path, e)) from None
        values["tariff"] = dict(doc["tariff"])
    if "runs" in doc:
        from wattlog.runs import check  # its checks, its words
        try:
            values["runs"] = check(doc["runs"], _seconds)
        except ValueError as e:
            raise SettingsError("%s: %s" % (path, e)) from None
    if "max_future_s" in values:
        values["max_future_s"] = int(values["max_future_s"])
    if "broker" in values:
        from wattlog.mqtt import parse_broker  # its message shows the URL without a password
        try:
            parse_broker(values["broker"])
        except ValueError as e:
            raise SettingsError("%s: %s" % (path, e)) from None
    _resolve(values, path)
    settings = Settings(path=path, **values)
    check_files(settings, files)
    return settings


def _influx(table, path, values):
    """The [influx] table into values, checked by influx.py's own rules (its words)."""
    _take(table, _INFLUX_KEYS, "influx.", path, values)
    if "influx_url" not in values:
        raise SettingsError("%s: [influx] has no url: give url = \"influx://HOST:8086/DATABASE"
                            "\" (or leave the table out)" % path)
    names = values.get("influx_names", {})
    for node, name in names.items():
        if not NODE_ID.match(node) or _text(name) is None or "\n" in name:
            raise SettingsError("%s: influx.names.%s must be a node id (1-32 of a-z, 0-9, _ and "
                                "-) = a measurement name (one line of text)" % (path, node))
    from wattlog.bridges.influx import InfluxError, Schema, Target  # its checks, its words
    try:
        Target(values["influx_url"])
        Schema(values.get("influx_schema", "default"), names)
    except InfluxError as e:
        raise SettingsError("%s: influx: %s" % (path, e)) from None
    if "influx_names" in values:
        values["influx_names"] = dict(names)


def _resolve(values, path):
    """Relative paths from the config's directory; under systemd, its files from
    $CREDENTIALS_DIRECTORY by file name (module docstring)."""
    home = os.path.dirname(os.path.abspath(path))
    credentials = os.environ.get("CREDENTIALS_DIRECTORY")
    from_credentials = credentials and os.path.realpath(home) == os.path.realpath(credentials)
    for field in FILES + ("data_dir",):
        if field in values:
            if from_credentials and field != "data_dir":
                values[field] = os.path.join(home, os.path.basename(values[field]))
            else:
                values[field] = os.path.join(home, os.path.expanduser(values[field]))


def _key(field):
    """The TOML key of a Settings field, as the file spells it."""
    for keys, where in ((_KEYS, ""), (_HTTP_KEYS, "http."), (_INFLUX_KEYS, "influx."),
                        (_CLUSTER_KEYS, "cluster.")):
        for key, (name, _, _) in keys.items():
            if name == field:
                return where + key
    return field


def check_files(settings, files=FILES):
    """Every file the settings name (of the fields `files`) can be read, and a secret file
    holds a secret (its first line, not empty; a token at least TOKEN_MIN_CHARS long);
    SettingsError names the key."""
    where = settings.path or "the command line"
    for field in files:
        name = getattr(settings, field)
        if name is None:
            continue
        try:
            with open(name, "rb") as f:
                first = f.readline()
        except OSError as e:
            raise SettingsError("%s: %s %s cannot be read (%s)"
                                % (where, _key(field), name, e.strerror)) from None
        if field not in _SECRET_FILES:
            continue
        try:
            secret = first.rstrip(b"\r\n").decode()
        except UnicodeDecodeError:
            raise SettingsError("%s: %s %s is not UTF-8 text" % (where, _key(field), name)) from None
        if not secret.strip():
            raise SettingsError("%s: %s %s is empty" % (where, _key(field), name))
        if field == "http_token_file" and len(secret) < TOKEN_MIN_CHARS:
            raise SettingsError("%s: %s %s holds a token shorter than %d characters: make one "
                                "with wattlog provision" % (where, _key(field), name,
                                                            TOKEN_MIN_CHARS))


def override(settings, **flags):
    """The settings with every flag that was given (not None) in place of the file's value."""
    return dataclasses.replace(settings, **{k: v for k, v in flags.items() if v is not None})

