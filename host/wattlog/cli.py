"""cli.py - the wattlog command: one function per verb; errors are one line that says what to do.

Every verb reads the config file: --config FILE, else the one $WATTLOG_CONFIG names, else
/etc/wattlog/wattlog.toml when it is there (settings.py); a flag given wins over it, and what
neither says is the default. So on a provisioned Pi no verb needs a flag the config holds:

  wattlog collect [--broker URL] [--password-file F] [--data DIR] [--commit-interval S]
                  [--listen HOST:PORT] [--influx URL ...] ...   the service (collector.py)
  wattlog influx backfill [--since T] [--influx URL ...]   send what is there to InfluxDB
  wattlog install-service [--print]             the systemd unit and its user (service.py)
  wattlog feeds | nodes [--json] | repair [--force] | rebuild        [--data DIR]
  wattlog export  --feed NODE/CHANNEL|ID [--start T] [--end T] [--fill] [--format csv|json]
  wattlog energy  [--by day|week|month|year] [--from T] [--to T] [--timezone ZONE]
                  [--tariff 0.30 | day=0.32,night=0.22,night_hours=22-06]   (energy.py)
  wattlog plug    on|off|toggle|status NODE     as wattlog-operator (plug.py)
  wattlog ota     NODE...|--all [--parallel N] [--build DIR]   as wattlog-operator (ota.py)
  wattlog provision [--dir DIR] [--broker-host HOST] [--wifi-ssid NAME] ... NODE...
Broker URLs: mqtt://... or, with TLS, mqtts://... and --ca CA.crt (wattlog provision makes one).
Passwords come from files (--password-file, the config's), or $WATTLOG_MQTT_PASSWORD, never
from the command line, where `ps` shows it (a password in a URL still works, but shows).

Times (T) are unix seconds, an ISO 8601 date or date-time (in the config's timezone, else UTC,
unless it names a zone), or a time before now: now-24h, now-90m, now-7d (or --start=-24h).
Exit status: 0 done, 1 failed (one line says why and what to do), 2 a value given on the
command line cannot be used, 78 the config file is refused.
"""

import argparse
import errno
import json
import os
import sys
import time

import numpy as np

from wattlog import __version__
from wattlog.commit import Committer, StartError
from wattlog.feeds import Registry, RegistryError
from wattlog.phpfina import FeedError, Feed
from wattlog.settings import CONFIG_ENV, DEFAULT_PATH
from wattlog.times import duration, iso, parse_time, storable_time, zone

PASSWORD_ENV = "WATTLOG_MQTT_PASSWORD"


class CliError(Exception):
    pass


# Flags that stand for a setting of the config file (settings.py): flag dest -> Settings field
FLAG_SETTINGS = {"broker": "broker", "password_file": "password_file", "ca": "ca",
                 "data": "data_dir", "base_topic": "base_topic", "client_id": "client_id",
                 "commit_interval": "commit_interval_s", "summary_interval": "summary_interval_s",
                 "status_interval": "status_interval_s", "max_future": "max_future_s",
                 "max_age": "max_age_s", "listen": "http_listen",
                 "http_token_file": "http_token_file",
                 "operator_password_file": "operator_password_file", "influx": "influx_url",
                 "influx_schema": "influx_schema", "influx_password_file": "influx_password_file",
                 "influx_timeout": "influx_timeout_s", "timezone": "timezone"}


def _settings(args, files=()):
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
        from wattlog.influx import InfluxError, parse_names
        try:
            flags["influx_names"] = dict(s.influx_names or {}, **parse_names(args.influx_name))
        except InfluxError as e:
            raise CliError(str(e)) from None
    return settings.override(s, **flags)


def _data_dir(path):
    if not os.path.isdir(path):
        raise CliError("%s is not a data directory (is the path right? `wattlog collect` "
                       "creates it; --data DIR or the config's data names another)" % path)
    return path


def _data(args):
    """The data directory this verb reads: --data, else the config's, else /var/lib/wattlog."""
    return _data_dir(_settings(args).data_dir)


def _registry(data):
    try:
        return Registry(_data_dir(data))
    except RegistryError as e:
        raise CliError(str(e)) from None


def _broker_password(password_file):
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


def _check_broker(url, password_file):
    """The broker URL checked and the password read before anything else happens."""
    from wattlog.mqtt import parse_broker, redact
    try:
        user = parse_broker(url)[2]
    except ValueError as e:
        raise CliError(str(e)) from None
    password = _broker_password(password_file)
    if password is not None and user is None:
        raise CliError("broker %s names no user: give mqtt://USER@HOST[:PORT] with the password"
                       % redact(url))
    return password


def _operator(args):
    """(Settings, broker URL, password) for a verb that logs in as wattlog-operator (plug,
    ota): --broker, else the config's broker as that user; --password-file, else the config's
    operator_password_file, else $WATTLOG_MQTT_PASSWORD."""
    from wattlog.mqtt import with_user
    from wattlog.provision import OPERATOR
    s = _settings(args, ("ca", "operator_password_file"))
    url = args.broker or with_user(s.broker, OPERATOR)
    password_file = args.password_file or (None if args.broker else s.operator_password_file)
    return s, url, _check_broker(url, password_file)


def cmd_collect(args):
    from wattlog import settings
    from wattlog.collector import Collector  # paho is only needed here
    s = _settings(args, settings.FILES)
    if s.path is None and args.data is None:
        raise CliError("no config file at %s: give --config FILE (`wattlog provision` writes "
                       "one) or --data DIR" % settings.config_path()[0])
    password = _check_broker(s.broker, s.password_file)
    os.makedirs(s.data_dir, exist_ok=True)
    try:
        collector = Collector(s.data_dir, s.broker, commit_interval_s=s.commit_interval_s,
                              base_topic=s.base_topic, client_id=s.client_id,
                              status_interval_s=s.status_interval_s,
                              max_future_s=s.max_future_s, max_age_s=s.max_age_s,
                              ca=s.ca, password=password, password_file=s.password_file,
                              summary_interval_s=s.summary_interval_s,
                              http_listen=s.http_listen, http_read_open=s.http_read_open,
                              http_token_file=s.http_token_file,
                              operator_password_file=s.operator_password_file,
                              timezone=s.timezone, tariff=s.tariff,
                              sink=_influx_sink(s))
    except (ValueError, RegistryError, StartError) as e:
        raise CliError(str(e)) from None
    if collector.http is not None:  # the sink's lag and points sent in /metrics
        collector.http.api.metrics.sink = collector.sink
    collector.run()
    if collector.failed:
        raise CliError("stopped: see the error above")


def _influx(s):
    """(Writer, Schema) from the settings' influx_* (the [influx] table, each --influx flag
    given in its place: influx.py); CliError in words."""
    from wattlog.influx import TIMEOUT_S, InfluxError, configure
    try:
        return configure(s.influx_url, s.influx_schema or "default", s.influx_password_file,
                         s.influx_names or {}, s.influx_timeout_s or TIMEOUT_S)
    except InfluxError as e:
        raise CliError(str(e)) from None


def _influx_sink(s):
    """The InfluxDB sink the collector starts, or None without an InfluxDB URL."""
    if not s.influx_url:
        return None
    from wattlog.sink import Sink
    writer, schema = _influx(s)
    return Sink(s.data_dir, writer, schema, horizon_s=s.max_age_s + 3600)


def cmd_influx_backfill(args):
    """Every committed point from --since on into InfluxDB, with a progress bar (sink.py)."""
    from wattlog.influx import WriteFailed
    from wattlog.sink import backfill
    s = _settings(args, ("influx_password_file",))
    data = _data_dir(s.data_dir)
    if not s.influx_url:
        raise CliError("no InfluxDB to send to: give --influx URL, or an [influx] table in %s"
                       % (s.path or "the config file"))
    writer, schema = _influx(s)
    try:
        since = parse_time(args.since) if args.since else None
    except argparse.ArgumentTypeError as e:
        raise CliError(str(e)) from None
    tty = sys.stderr.isatty()
    said = [-1, 0]  # the tenth and the points last said

    def progress(done, total, sent):
        tenth = done * 10 // max(total, 1)
        if tty:
            bar = "#" * (done * 30 // max(total, 1))
            sys.stderr.write("\rbackfill [%-30s] %3d%% %d points" % (bar, done * 100 // max(total, 1),
                                                                     sent))
        elif tenth > said[0] or (done == total and sent > said[1]):  # and the last batch
            said[:] = [tenth, sent]
            sys.stderr.write("backfill: %d%% (%d points)\n" % (tenth * 10, sent))
    t0 = time.monotonic()
    try:
        sent = backfill(data, writer, schema, since, progress)
    except WriteFailed as e:
        raise CliError("%s; run it again (points already sent are only written again)" % e) \
            from None
    except (RegistryError, FeedError, ValueError) as e:
        raise CliError(str(e)) from None
    finally:
        if tty:
            sys.stderr.write("\n")
    print("sent %d points to %s in %.1f s (schema %s)" % (sent, writer.target,
                                                        time.monotonic() - t0, schema.name))


def _influx_flags(p, required=False):
    p.add_argument("--influx", required=required, metavar="URL",
                   help="InfluxDB to follow the files into: influx://[USER@]HOST[:PORT]/DATABASE"
                        "[?rp=POLICY] (1.x) or influxv2://HOST[:PORT]/ORG/BUCKET (2.x, 3.x); "
                        "influxs:// and influxv2s:// for HTTPS")
    p.add_argument("--influx-schema", choices=("default", "sp3s"),
                   help="default (the default): measurement per channel, tag node, field "
                        "value; sp3s: measurement = plug name, field usage = power W (the "
                        "SP3S setup's)")
    p.add_argument("--influx-password-file", metavar="FILE",
                   help="the 1.x user's password, or the 2.x/3.x token (first line)")
    p.add_argument("--influx-name", action="append", default=[], metavar="NODE=MEASUREMENT",
                   help="sp3s: the measurement a plug writes to (default its node id)")
    p.add_argument("--influx-timeout", type=float, metavar="S",
                   help="seconds to wait for InfluxDB's answer (default 10)")


def cmd_install_service(args):
    """The systemd unit for the config, its user, enabled and started (service.py)."""
    from wattlog import service, settings
    path = settings.config_path(args.config)[0]
    try:
        if args.print:
            print(service.unit_text(settings.load(path), service.executable()), end="")
        else:
            service.install(path)
    except service.ServiceError as e:
        raise CliError(str(e)) from None


def cmd_feeds(args):
    data = _data(args)
    registry = _registry(data)
    feed_dir = os.path.join(data, "phpfina")
    rows = [("id", "node", "channel", "unit", "interval", "start", "end", "points")]
    for e in registry.entries:
        if e.get("quarantined"):
            rows.append((str(e["id"]), e["node"], e["channel"], e["unit"], "%ds" % e["interval"],
                         "quarantined:", e["quarantined"], ""))
            continue
        try:
            feed = Feed.open(feed_dir, e["id"])
            n = feed.npoints()
            rows.append((str(e["id"]), e["node"], e["channel"], e["unit"], "%ds" % feed.interval,
                         iso(feed.start), iso(feed.time(n - 1)) if n else "-", str(n)))
        except FeedError as err:
            rows.append((str(e["id"]), e["node"], e["channel"], e["unit"], "%ds" % e["interval"],
                         "unreadable:", err.reason, ""))
    if len(rows) == 1:
        print("no feeds yet in %s" % data)
        return
    _print_table(rows)


def _print_table(rows):
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def cmd_nodes(args):
    """Per node, from commit.json: what is on disk and acknowledged, and what was lost; from
    firmware.json: the version it runs and its last over-the-air update's result."""
    from wattlog import durable, firmware
    from wattlog.commitfile import FILE, check_state
    data = _data(args)
    path = os.path.join(data, FILE)
    try:
        state = durable.read_json(path) or {"version": 1, "feeds": {}}
    except ValueError as e:
        raise CliError("%s is unreadable: %s" % (path, e)) from None
    problem = check_state(state)
    if problem:
        raise CliError("%s is damaged (%s); the collector keeps every feed as it is and writes "
                       "a new one at its next start" % (path, problem))
    try:
        versions = firmware.read(data)
    except ValueError as e:
        raise CliError("%s; the collector makes it again from what the plugs announce"
                       % e) from None
    acked = state.get("nodes", {})
    found = []
    for node in sorted(set(acked) | set(versions)):
        st = acked.get(node, {})
        fw = versions.get(node) or {"firmware": None, "update": None}
        found.append({"node": node, "last_seen": st.get("last_seen"), "boot": st.get("boot"),
                      "boots": st.get("boots", 1 if st else 0), "acked_seq": st.get("seq"),
                      "gaps": st.get("gaps", 0), "lost": st.get("lost", 0),
                      "ring_drops": st.get("dropped", 0), "version": fw["firmware"],
                      "update": fw["update"]})
    if args.json:  # the table's columns, for programs: unix seconds, whole numbers
        print(json.dumps(found))
        return
    if not found:
        print("no node has been acknowledged yet in %s" % data)
        return
    rows = [("node", "last seen", "boot", "boots", "acked seq", "gaps", "lost readings",
             "ring drops", "version", "update")]
    for n in found:
        rows.append((n["node"], iso(n["last_seen"]) if n["last_seen"] else "-",
                     "-" if n["boot"] is None else "%08x" % n["boot"], str(n["boots"]),
                     "-" if n["acked_seq"] is None else str(n["acked_seq"]), str(n["gaps"]),
                     str(n["lost"]), str(n["ring_drops"]), n["version"] or "-",
                     firmware.describe(n["update"])))
    _print_table(rows)


def cmd_repair(args):
    """Rebuild a damaged feeds.json from the feeds' sidecar files (feeds.py)."""
    from wattlog import datalock
    from wattlog.feeds import rebuild
    data = _data(args)
    try:
        lock = datalock.lock(data, "repair")
    except datalock.Locked as e:
        raise CliError(str(e)) from None
    try:
        try:
            Registry(data)
            if not args.force:
                print("%s is sound: nothing to repair (--force rebuilds it anyway)"
                      % os.path.join(data, "feeds.json"))
                return
        except RegistryError as e:
            print("%s" % e)
        registry, notes = rebuild(data)
        for note in notes:
            print("note: " + note)
        if not registry.entries:
            raise CliError("no feed sidecars (phpfina/<id>.json) in %s: nothing to rebuild "
                           "from; restore feeds.json from a backup" % data)
        old = registry.path
        if os.path.exists(old):
            kept = "%s.damaged-%s" % (old, time.strftime("%Y%m%dT%H%M%S", time.gmtime()))
            os.replace(old, kept)
            print("kept the old registry as %s" % kept)
        registry.save()
        active = registry.active()
        print("rebuilt %s: %d feeds of %d nodes (%d quarantined)"
              % (old, len(active), len({e["node"] for e in active}),
                 len(registry.entries) - len(active)))
    finally:
        os.close(lock)


def cmd_rebuild(args):
    """Recompute every feed's query summaries from its .dat (rollup.py), with progress."""
    from wattlog.complaints import Complaints
    data = _data(args)
    try:
        committer = Committer(data, Complaints())
    except (RegistryError, StartError) as e:
        raise CliError(str(e)) from None
    try:
        committer.stale = {fid: 0 for fid in committer.feeds}
        tty = sys.stderr.isatty()

        def progress(done, total):
            if tty or done == total:
                sys.stderr.write("%srebuild: %d/%d feeds%s" % ("\r" if tty else "", done, total,
                                                              "" if tty and done < total else "\n"))
        written = committer.flush_summaries(progress)
    finally:
        committer.close()
    print("rebuilt the summaries of %d feeds in %s (%d bytes)"
          % (len(committer.feeds), os.path.join(data, "summaries"), written))


def cmd_plug(args):
    from wattlog.plug import PlugError, run  # paho is only needed here
    s, url, password = _operator(args)
    try:
        print(run(args.action, args.node, url, s.base_topic, args.timeout, s.ca, password))
    except (PlugError, ValueError) as e:
        raise CliError(str(e)) from None


def cmd_ota(args):
    import glob
    import subprocess
    from wattlog.ota import OtaError, next_serial, run, table
    from wattlog.provision import ProvisionError, read_ota_key
    s, url, password = _operator(args)
    where = args.dir or _provisioned_dir(s)
    nodes = sorted(os.path.basename(os.path.dirname(p)) for p in
                   glob.glob(os.path.join(where, "nodes", "*", "ota.key"))) \
        if args.all else args.nodes
    if not nodes:
        raise CliError("no plugs to update: name them, or --all with plugs provisioned in %s"
                       % where)
    build = args.build
    if build is None:
        tool = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))), "tools", "build")
        if subprocess.call([tool]) != 0:
            raise CliError("tools/build failed: the node does not compile; nothing was sent")
        build = os.path.join(os.path.dirname(os.path.dirname(tool)), "build", "device")
    try:
        keys = {n: read_ota_key(where, n) for n in nodes}
        results = run(nodes, keys, lambda node: next_serial(where, node), build, url,
                      password, s.ca, s.base_topic, args.parallel, args.trial, directory=where)
    except (OtaError, ProvisionError, ValueError) as e:
        raise CliError(str(e)) from None
    print(table(results))
    bad = [r["node"] for r in results if r["result"] != "confirmed"]
    if bad:
        raise CliError("%d of %d plugs not updated (%s): they run the version they ran"
                       % (len(bad), len(results), ", ".join(bad)))


def _provisioned_dir(s):
    """wattlog provision's directory: the config's (provision writes wattlog.toml there)."""
    from wattlog import settings
    return os.path.dirname(os.path.abspath(s.path or settings.DEFAULT_PATH))


def cmd_provision(args):
    from wattlog import settings
    from wattlog.provision import ProvisionError, main_text, provision
    from wattlog.service import executable
    directory = args.dir or os.path.dirname(os.path.abspath(settings.config_path(args.config)[0]))
    try:
        creds = provision(directory, args.nodes, args.broker_host, args.port, args.tls,
                          args.listen, progress=lambda text: print(text, file=sys.stderr),
                          broadlink=args.broadlink, wifi=_wifi(args), ntp_host=args.ntp_host)
    except ProvisionError as e:
        raise CliError(str(e)) from None
    print(main_text(creds, directory, " ".join(executable())))


def _wifi(args):
    """(ssid, password) from --wifi-ssid and --wifi-password-file or, in a terminal, a prompt
    (twice: a mistyped password is a plug that never joins); None without --wifi-ssid."""
    if args.wifi_ssid is None:
        if args.wifi_password_file:
            raise CliError("--wifi-password-file needs --wifi-ssid NAME: the network it is for")
        return None
    if args.wifi_password_file:
        try:
            with open(args.wifi_password_file, "rb") as f:
                return args.wifi_ssid, f.readline().rstrip(b"\r\n").decode()
        except OSError as e:
            raise CliError("cannot read the Wi-Fi password file %s (%s)"
                           % (args.wifi_password_file, e.strerror)) from None
        except UnicodeDecodeError:
            raise CliError("the Wi-Fi password file %s is not UTF-8 text"
                           % args.wifi_password_file) from None
    if not sys.stdin.isatty():
        raise CliError("--wifi-ssid %s needs its password: give --wifi-password-file FILE (the "
                       "first line; an empty one for an open network), or run provision in a "
                       "terminal to be asked" % args.wifi_ssid)
    import getpass
    first = getpass.getpass("Wi-Fi password for %s (empty for an open network): "
                            % args.wifi_ssid)
    if getpass.getpass("again: ") != first:
        raise CliError("the two Wi-Fi passwords differ: nothing was changed; run it again")
    return args.wifi_ssid, first


def _value_text(v):
    """float32 in its shortest exact form; '' for NaN (no data)."""
    return "" if np.isnan(v) else np.format_float_positional(v, unique=True, trim="-")


class UsageError(CliError):
    """A value given on the command line cannot be used: exit status 2, as argparse's."""
    status = 2


def cmd_export(args):
    s = _settings(args)
    data = _data_dir(s.data_dir)
    tz = args.tz or zone(s.timezone)
    registry = _registry(data)
    entry = registry.lookup(args.feed)
    if entry is None:
        raise CliError("no feed %r in %s; `wattlog feeds` lists them" % (args.feed, data))
    if entry.get("quarantined"):
        raise CliError("feed %s is quarantined: %s" % (args.feed, entry["quarantined"]))
    try:
        feed = Feed.open(os.path.join(data, "phpfina"), entry["id"])
    except FeedError as e:
        raise CliError(str(e)) from None
    try:
        start = feed.start if args.start is None else storable_time(args.start, "--start", tz)
        end = feed.end() if args.end is None else storable_time(args.end, "--end", tz)
    except argparse.ArgumentTypeError as e:
        raise UsageError(str(e)) from None
    if args.start is not None and args.end is not None and end <= start:
        raise UsageError("--start %s is not before --end %s: nothing lies between them"
                         % (iso(start, tz), iso(end, tz)))
    first = max(feed.slot(start + feed.interval - 1), 0)  # the first slot at or after start
    stop = max(feed.slot(end + feed.interval - 1), first)  # slots before end
    if not args.fill:  # past the stored slots there is nothing to print
        stop = max(min(stop, feed.npoints()), first)
    if min(stop, feed.npoints()) <= first:
        sys.stderr.write("export: no data from %s to %s; %s holds %s\n" % (
            iso(start, tz), iso(end, tz), args.feed,
            "nothing yet" if not feed.npoints() else "%s to %s" % (
                iso(feed.start, tz), iso(feed.time(feed.npoints() - 1), tz))))
    _write_export(feed, entry, first, stop, args, tz)


def _write_export(feed, entry, first, stop, args, tz):
    """The slots first..stop as CSV or JSON on stdout: those with data, or with --fill every
    one (empty, or null, where there is none); a progress line on a terminal."""
    when = (lambda t: iso(int(t), tz)) if args.times == "iso" else (lambda t: "%d" % t)
    out = sys.stdout
    progress = sys.stderr.isatty() and stop - first > 200000
    chunk = 50000
    if args.format == "json":
        out.write('{"feed": %d, "node": %s, "channel": %s, "unit": %s, "interval": %d, "data": ['
                  % (feed.id, json.dumps(entry["node"]), json.dumps(entry["channel"]),
                     json.dumps(entry["unit"]), feed.interval))
    else:
        out.write("time,%s_%s\n" % (entry["channel"], entry["unit"]))
    sep = ""
    for lo in range(first, stop, chunk):
        hi = min(lo + chunk, stop)
        values = feed.read(lo, hi)
        times = feed.time(lo) + feed.interval * np.arange(hi - lo)
        if not args.fill:
            keep = ~np.isnan(values)
            times, values = times[keep], values[keep]
        if args.format == "json":
            for t, v in zip(times, values):
                text = _value_text(v)
                out.write('%s[%s, %s]' % (sep, when(t) if args.times == "unix" else
                                          json.dumps(when(t)), text or "null"))
                sep = ", "
        else:
            out.write("".join("%s,%s\n" % (when(t), _value_text(v)) for t, v in zip(times, values)))
        if progress:
            sys.stderr.write("\rexport: %3.0f%%" % (100.0 * (hi - first) / (stop - first)))
    if args.format == "json":
        out.write("]}\n")
    if progress:
        sys.stderr.write("\rexport: done      \n")


def cmd_energy(args):
    """kWh (and cost) per plug per local period, with totals: energy.energy_table, printed. The
    config's timezone and [tariff] count unless a flag says otherwise. When the config's
    collector serves HTTP, the table is its /api/energy: the readings it holds in memory, not
    yet committed, count too, so both say the same at the same moment."""
    from wattlog.energy import EnergyError, Tariff, energy_table
    s = _settings(args)
    data = _data_dir(s.data_dir)
    try:
        tariff = Tariff.parse(args.tariff, args.currency) if args.tariff else \
            Tariff.from_settings(s.tariff) if s.tariff else None
        tz = zone(s.timezone)
        start = storable_time(args.start, "--from", tz) if args.start else None
        end = storable_time(args.end, "--to", tz) if args.end else None
    except (EnergyError, argparse.ArgumentTypeError) as e:
        raise UsageError(str(e)) from None
    if start is not None and end is not None and end <= start:
        raise UsageError("--from %s is not before --to %s" % (iso(start, tz), iso(end, tz)))
    table = None
    if s.http_listen and not args.tariff and not args.timezone:
        table = _collector_energy(s, data, args.by, start, end)
    if table is None:
        try:
            table = energy_table(data, args.by, s.timezone, tariff, start, end)
        except EnergyError as e:
            raise CliError(str(e)) from None
    for note in table["notes"]:
        print("note: " + note, file=sys.stderr)
    if not table["plugs"]:
        print("no energy feeds yet in %s" % data)
        return
    print(energy_text(table))


def _collector_energy(s, data, by, start, end):
    """The running collector's /api/energy for the same question, or None when no collector
    writes `data` (then the files hold everything). A collector that runs but does not answer
    is said in a note: the figures then lack what it has not committed."""
    import urllib.error
    import urllib.parse
    import urllib.request
    from wattlog import datalock
    if datalock.holder(data) is None:
        return None
    host, _, port = s.http_listen.rpartition(":")
    host = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]", "::": "[::1]"}.get(host, host)
    query = urllib.parse.urlencode([("by", by)] + [(k, v) for k, v in (("start", start),
                                                                        ("end", end)) if v])
    request = urllib.request.Request("http://%s:%s/api/energy?%s" % (host, port, query))
    if s.http_token_file:
        try:
            with open(s.http_token_file) as f:
                request.add_header("Authorization", "Bearer " + f.readline().strip())
        except OSError:
            pass  # reading may be open; if not, the answer says so below
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.load(answer)
    except (OSError, ValueError) as e:
        print("note: the collector writing %s did not answer at %s (%s): the readings it has "
              "not committed yet are not counted" % (data, s.http_listen,
                                                      getattr(e, "reason", e)), file=sys.stderr)
        return None


def energy_text(table):
    """The table as text: a row per period, kWh (and cost) per plug, then the totals."""
    def num(x, digits):
        return "-" if x is None else "%.*f" % (digits, x)
    cost = table["tariff"] is not None
    head = [table["by"]]
    for plug in table["plugs"]:
        head += [plug["node"] + " kWh"] + ([table["tariff"]["currency"]] if cost else [])
    head += ["total kWh"] + (["total " + table["tariff"]["currency"]] if cost else [])
    rows = [head]
    lines = table["plugs"] + [dict(table["totals"], node="total")]
    for k, period in enumerate(table["periods"]):
        row = [period["label"] + ("" if period["hours"] in (24, 168) or table["by"] in
                                  ("month", "year") else " (%gh)" % period["hours"])]
        for line in lines:
            row.append(num(line["kwh"][k], 3))
            if cost:
                row.append(num(line["cost"][k], 2))
        rows.append(row)
    total = ["total"]
    for line in lines:
        total.append(num(line["total_kwh"], 3))
        if cost:
            total.append(num(line["total_cost"], 2))
    rows.append(total)
    share = ["share"] + sum(([num(None if p["total_share"] is None else 100 * p["total_share"],
                                  1) + "%"] + ([""] if cost else []) for p in table["plugs"]), [])
    rows.append(share + [""] * (len(head) - len(share)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip()
                     for r in rows)


def _broker_options(p):
    """--broker, --password-file, --base-topic, --ca: a verb that logs in as wattlog-operator."""
    p.add_argument("--broker", help="mqtt://[USER@]HOST[:PORT] (default: the config's broker, "
                                    "as wattlog-operator)")
    p.add_argument("--password-file", metavar="FILE",
                   help="wattlog-operator's broker password (default: the config's "
                        "operator_password_file, else $%s)" % PASSWORD_ENV)
    p.add_argument("--base-topic", help="(default: the config's, else wattlog)")
    p.add_argument("--ca", help="CA certificate file for an mqtts:// broker (default: the "
                                "config's)")


def _data_option(p):
    p.add_argument("--data", metavar="DIR",
                   help="the data directory (default: the config's data, else /var/lib/wattlog)")


def build_parser():
    p = argparse.ArgumentParser(
        prog="wattlog", description="Local power metering collector. Every verb reads the "
        "config file (--config, else $%s, else %s when it is there); a flag given wins."
        % (CONFIG_ENV, DEFAULT_PATH))
    p.add_argument("--version", action="version", version="wattlog " + __version__)
    config = argparse.ArgumentParser(add_help=False)
    config.add_argument("--config", metavar="FILE",
                        help="the settings file (default: $%s, else %s; `wattlog provision` "
                             "writes it)" % (CONFIG_ENV, DEFAULT_PATH))
    sub = p.add_subparsers(dest="verb", required=True)

    def verb(name, func, **kw):
        v = sub.add_parser(name, parents=[config], **kw)
        v.set_defaults(func=func)
        return v

    c = verb("collect", cmd_collect, help="receive readings over MQTT and store them",
             description="Every setting comes from its flag if given, else from the config "
                         "file, else from its default.")
    c.add_argument("--broker", help="mqtt://[USER@]HOST[:PORT] (default mqtt://127.0.0.1:1883)")
    c.add_argument("--password-file", metavar="FILE",
                   help="the broker password (else $%s)" % PASSWORD_ENV)
    c.add_argument("--data", help="data directory (created if missing; needed without a "
                                   "config file)")
    c.add_argument("--commit-interval", type=float, metavar="S",
                   help="seconds readings may wait in memory before they are written "
                        "(default 300)")
    c.add_argument("--base-topic", help="(default wattlog)")
    c.add_argument("--ca", help="CA certificate file for an mqtts:// broker")
    c.add_argument("--client-id", help="(default wattlog-collector)")
    c.add_argument("--status-interval", type=float, metavar="S",
                   help="seconds between status lines in the log (default 60)")
    c.add_argument("--max-future", type=int, metavar="S",
                   help="refuse readings stamped more than S seconds ahead (default 3600)")
    c.add_argument("--summary-interval", type=duration, metavar="S",
                   help="how often the query summaries are written (default 6h; each write "
                        "is a page per feed and level, so rarely is kinder to an SD card)")
    c.add_argument("--max-age", type=duration, metavar="AGE",
                   help="refuse readings older than this: seconds or 36h, 7d (default 7d; never "
                        "less than a plug's ring holds)")
    c.add_argument("--listen", metavar="HOST:PORT",
                   help="serve the HTTP API there (e.g. 127.0.0.1:8080; default: no HTTP)")
    c.add_argument("--http-token-file", metavar="FILE",
                   help="the token HTTP actions (relay, commands) need (`wattlog provision` "
                        "makes one); without it they are refused")
    c.add_argument("--operator-password-file", metavar="FILE",
                   help="wattlog-operator's broker password: HTTP actions log in as it")
    _influx_flags(c)

    x = sub.add_parser("influx", help="InfluxDB: send what the data directory holds already")
    xb = x.add_subparsers(dest="influx_verb", required=True).add_parser(
        "backfill", parents=[config],
        help="send every committed point (from --since on) to InfluxDB")
    _data_option(xb)
    xb.add_argument("--since", metavar="T", help="first time: now-30d, unix seconds, "
                                                "2026-11-01 (default: each feed's start)")
    _influx_flags(xb)
    xb.set_defaults(func=cmd_influx_backfill)

    i = verb("install-service", cmd_install_service,
             help="run the collector as a systemd service (the config's)")
    i.add_argument("--print", action="store_true", help="print the unit and change nothing")

    _data_option(verb("feeds", cmd_feeds, help="list the feeds in a data directory"))

    n = verb("nodes", cmd_nodes, help="per node: last seen, boot, acked seq, gaps, ring drops, "
                                      "firmware version, last update")
    _data_option(n)
    n.add_argument("--json", action="store_true", help="a JSON list, one object per node")

    g = verb("plug", cmd_plug, help="switch a plug or show its state")
    g.add_argument("action", choices=("on", "off", "toggle", "status"))
    g.add_argument("node", help="node id, e.g. plug-34ea34797bff")
    _broker_options(g)
    g.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="seconds to wait for the plug's answer (default %(default)s)")

    o = verb("ota", cmd_ota, help="update plugs over the air (verified, tried, rolled back)")
    o.add_argument("nodes", nargs="*", metavar="NODE", help="node ids to update")
    o.add_argument("--all", action="store_true", help="every provisioned plug")
    o.add_argument("--parallel", type=int, default=1, metavar="N",
                   help="plugs updated at a time (default 1); none starts after a failure")
    o.add_argument("--dir", help="wattlog provision's directory: the plugs' update keys "
                                 "(default: the config's directory, /etc/wattlog)")
    o.add_argument("--build", metavar="DIR",
                   help="a folder tools/build made (default: run tools/build, use build/device)")
    o.add_argument("--trial", type=int, default=120, metavar="S",
                   help="seconds the new version must run, sampling, its readings acknowledged, "
                        "before it is confirmed (30..3600)")
    _broker_options(o)

    v = verb("provision", cmd_provision,
             help="credentials, ACL, broker config and node configs")
    v.add_argument("--dir", help="where the files go, kept between runs (default: the config's "
                                 "directory, /etc/wattlog)")
    v.add_argument("--broker-host", help="the broker's address, as plugs reach it (needed the "
                                         "first time; kept after)")
    v.add_argument("--wifi-ssid", metavar="NAME", help="the Wi-Fi the plugs join (kept after)")
    v.add_argument("--wifi-password-file", metavar="FILE",
                   help="its password, the first line (default: asked in the terminal)")
    v.add_argument("--ntp-host", metavar="HOST",
                   help="the plugs' time server (default: the broker's host)")
    v.add_argument("--port", type=int, help="listener port (default 1883, 8883 with --tls)")
    v.add_argument("--listen", metavar="ADDR",
                   help="the address the broker listens on (default: all interfaces)")
    v.add_argument("--tls", action="store_true", help="make a CA and a server certificate")
    v.add_argument("--broadlink", choices=("off", "read", "control"),
                   help="the plugs answer the Broadlink SP3S protocol: read, or control (anyone "
                        "on the LAN can then switch them); default: as their config.json has it")
    v.add_argument("nodes", nargs="*", metavar="NODE", help="node ids to provision")

    r = verb("repair", cmd_repair,
             help="rebuild a damaged feeds.json from the feeds' own files")
    _data_option(r)
    r.add_argument("--force", action="store_true", help="rebuild even if feeds.json reads well")

    _data_option(verb("rebuild", cmd_rebuild,
                      help="recompute the query summaries from the feeds"))

    w = verb("energy", cmd_energy, help="kWh and cost per plug per day, week, month or year")
    _data_option(w)
    w.add_argument("--by", choices=("day", "week", "month", "year"), default="day")
    w.add_argument("--tariff", metavar="PRICES",
                   help="a price per kWh (0.30), or day=0.32,night=0.22,night_hours=22-06 "
                        "(default: the config's [tariff])")
    w.add_argument("--currency", default="EUR", help="the --tariff's currency (default EUR)")
    w.add_argument("--timezone", metavar="ZONE",
                   help="the zone whose days count, e.g. Europe/Berlin (default: the config's, "
                        "else UTC)")
    w.add_argument("--from", dest="start", metavar="T",
                   help="first time (default: the first reading); periods cover it whole")
    w.add_argument("--to", dest="end", metavar="T", help="end time, exclusive (default: now)")

    e = verb("export", cmd_export, help="print one feed as CSV or JSON")
    _data_option(e)
    e.add_argument("--feed", required=True, help="NODE/CHANNEL (e.g. plug-1/power) or a feed id")
    e.add_argument("--start", help="first time: now-24h, unix seconds, 2026-11-21T08:00 "
                                    "(default: the feed's start)")
    e.add_argument("--end", help="end time, exclusive: now, ... (default: the feed's end)")
    e.add_argument("--tz", type=zone, metavar="ZONE",
                   help="zone of times given without one, and of --times iso: a name such as "
                        "Europe/Berlin, UTC or local (default: the config's timezone, else UTC)")
    e.add_argument("--times", choices=("unix", "iso"), default="unix",
                   help="print times as unix seconds or ISO 8601 with the zone's offset")
    e.add_argument("--format", choices=("csv", "json"), default="csv")
    e.add_argument("--fill", action="store_true",
                   help="a row for every slot of the range, empty where there is no data "
                        "(default: only the slots with data)")
    return p


def main(argv=None):
    from wattlog.service import CONFIG_EXIT, setup_logging
    from wattlog.settings import SettingsError
    args = build_parser().parse_args(argv)
    setup_logging()
    try:
        args.func(args)
    except UsageError as e:
        print("wattlog %s: %s" % (args.verb, e), file=sys.stderr)
        sys.exit(UsageError.status)
    except CliError as e:
        sys.exit("wattlog %s: %s" % (args.verb, e))
    except SettingsError as e:  # a refused config: systemd does not restart the service
        print("wattlog %s: %s" % (args.verb, e), file=sys.stderr)
        sys.exit(CONFIG_EXIT)
    except BrokenPipeError:
        sys.stderr.close()  # `wattlog export ... | head` is not an error
    except OSError as e:  # a file or directory the command cannot use: say which, in words
        sys.exit("wattlog %s: %s" % (args.verb, os_error(e)))
    return 0


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


if __name__ == "__main__":
    sys.exit(main())
