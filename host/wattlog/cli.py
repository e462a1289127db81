"""cli.py - the wattlog command: one function per verb; errors are one line that says what to do.

  wattlog collect --broker mqtt://USER@HOST:PORT --password-file FILE --data DIR
                  [--commit-interval S]
  wattlog feeds   --data DIR
  wattlog nodes   --data DIR
  wattlog plug    on|off|toggle|status NODE --broker mqtt://USER@HOST:PORT --password-file FILE
  wattlog provision --dir DIR --broker-host HOST [--port N] [--listen ADDR] [--tls] NODE...
Broker URLs: mqtt://... or, with TLS, mqtts://... and --ca CA.crt (wattlog provision makes one).
The broker password comes from --password-file or $WATTLOG_MQTT_PASSWORD, never from the
command line, where `ps` shows it (a password in the URL still works, but shows).
  wattlog export  --data DIR --feed NODE/CHANNEL|ID [--start T] [--end T] [--format csv|json]
  wattlog repair  --data DIR [--force]      rebuild a damaged feeds.json (phpfina/<id>.json)
  wattlog rebuild --data DIR                recompute the query summaries (summaries/)

Times (T) are unix seconds, an ISO 8601 date or date-time (UTC unless it names a zone), or a
time before now: now-24h, now-90m, now-7d (or --start=-24h).
"""

import argparse
import errno
import json
import logging
import os
import sys
import time

import numpy as np

from wattlog import __version__
from wattlog.commit import Committer, StartError
from wattlog.feeds import Registry, RegistryError
from wattlog.ingest import MAX_AGE_S
from wattlog.phpfina import FeedError, Feed
from wattlog.rollup import FLUSH_S
from wattlog.times import UTC, duration, iso, parse_time, zone

PASSWORD_ENV = "WATTLOG_MQTT_PASSWORD"


class CliError(Exception):
    pass


def _data_dir(path):
    if not os.path.isdir(path):
        raise CliError("%s is not a data directory (is the path right? `wattlog collect` "
                       "creates it)" % path)
    return path


def _registry(data):
    try:
        return Registry(_data_dir(data))
    except RegistryError as e:
        raise CliError(str(e)) from None


def _broker_password(args):
    """The broker password from --password-file (its first line) or $WATTLOG_MQTT_PASSWORD;
    None: the URL's, if it has one. Errors name the file, never what is in it."""
    if not args.password_file:
        return os.environ.get(PASSWORD_ENV) or None
    try:
        with open(args.password_file, "rb") as f:
            password = f.readline().rstrip(b"\r\n").decode()
    except OSError as e:
        raise CliError("cannot read the password file %s (%s)"
                       % (args.password_file, e.strerror)) from None
    except UnicodeDecodeError:
        raise CliError("the password file %s is not UTF-8 text" % args.password_file) from None
    if not password:
        raise CliError("the password file %s is empty" % args.password_file)
    return password


def _check_broker(args):
    """The broker URL checked and the password read before anything else happens."""
    from wattlog.mqtt import parse_broker, redact
    try:
        user = parse_broker(args.broker)[2]
    except ValueError as e:
        raise CliError(str(e)) from None
    password = _broker_password(args)
    if password is not None and user is None:
        raise CliError("broker %s names no user: give mqtt://USER@HOST[:PORT] with the password"
                       % redact(args.broker))
    return password


def cmd_collect(args):
    from wattlog.collector import Collector  # paho is only needed here
    password = _check_broker(args)
    os.makedirs(args.data, exist_ok=True)
    try:
        collector = Collector(args.data, args.broker, commit_interval_s=args.commit_interval,
                              base_topic=args.base_topic, client_id=args.client_id,
                              status_interval_s=args.status_interval,
                              max_future_s=args.max_future, max_age_s=args.max_age,
                              ca=args.ca, password=password,
                              summary_interval_s=args.summary_interval)
    except (ValueError, RegistryError, StartError) as e:
        raise CliError(str(e)) from None
    collector.run()
    if collector.failed:
        raise CliError("stopped: see the error above")


def cmd_feeds(args):
    registry = _registry(args.data)
    feed_dir = os.path.join(args.data, "phpfina")
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
        print("no feeds yet in %s" % args.data)
        return
    _print_table(rows)


def _print_table(rows):
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def cmd_nodes(args):
    """Per node, from commit.json: what is on disk and acknowledged, and what was lost."""
    from wattlog import durable
    from wattlog.commitfile import FILE, check_state
    path = os.path.join(_data_dir(args.data), FILE)
    try:
        state = durable.read_json(path) or {"version": 1, "feeds": {}}
    except ValueError as e:
        raise CliError("%s is unreadable: %s" % (path, e)) from None
    problem = check_state(state)
    if problem:
        raise CliError("%s is damaged (%s); the collector keeps every feed as it is and writes "
                       "a new one at its next start" % (path, problem))
    nodes = state.get("nodes", {})
    if not nodes:
        print("no node has been acknowledged yet in %s" % args.data)
        return
    rows = [("node", "last seen", "boot", "boots", "acked seq", "gaps", "lost readings",
             "ring drops")]
    for node, st in sorted(nodes.items()):
        rows.append((node, iso(st["last_seen"]) if st.get("last_seen") else "-",
                     "%08x" % st["boot"], str(st.get("boots", 1)), str(st["seq"]),
                     str(st.get("gaps", 0)), str(st.get("lost", 0)), str(st.get("dropped", 0))))
    _print_table(rows)


def cmd_repair(args):
    """Rebuild a damaged feeds.json from the feeds' sidecar files (feeds.py)."""
    from wattlog import datalock
    from wattlog.feeds import rebuild
    data = _data_dir(args.data)
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
    data = _data_dir(args.data)
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
    password = _check_broker(args)
    try:
        print(run(args.action, args.node, args.broker, args.base_topic, args.timeout, args.ca,
                  password))
    except (PlugError, ValueError) as e:
        raise CliError(str(e)) from None


def cmd_provision(args):
    from wattlog.provision import ProvisionError, main_text, provision, settings
    try:
        creds = provision(args.dir, args.nodes, args.broker_host, args.port, args.tls,
                          args.listen, progress=lambda text: print(text, file=sys.stderr))
    except ProvisionError as e:
        raise CliError(str(e)) from None
    used = settings(args.dir)
    print(main_text(creds, args.dir, used["broker_host"], used["port"], used["tls"],
                    used["listen"]))


def _value_text(v):
    """float32 in its shortest exact form; '' for NaN (no data)."""
    return "" if np.isnan(v) else np.format_float_positional(v, unique=True, trim="-")


def cmd_export(args):
    registry = _registry(args.data)
    entry = registry.lookup(args.feed)
    if entry is None:
        raise CliError("no feed %r in %s; `wattlog feeds --data %s` lists them"
                       % (args.feed, args.data, args.data))
    if entry.get("quarantined"):
        raise CliError("feed %s is quarantined: %s" % (args.feed, entry["quarantined"]))
    try:
        feed = Feed.open(os.path.join(args.data, "phpfina"), entry["id"])
    except FeedError as e:
        raise CliError(str(e)) from None
    try:
        start = feed.start if args.start is None else parse_time(args.start, tz=args.tz)
        end = feed.end() if args.end is None else parse_time(args.end, tz=args.tz)
    except argparse.ArgumentTypeError as e:
        raise CliError(str(e)) from None
    first = max(feed.slot(start + feed.interval - 1), 0)  # the first slot at or after start
    stop = max(feed.slot(end + feed.interval - 1), first)  # slots before end
    stop_stored = min(stop, feed.npoints())
    if stop_stored <= first:
        sys.stderr.write("export: no data from %s to %s; %s holds %s\n" % (
            iso(start, args.tz), iso(end, args.tz), args.feed,
            "nothing yet" if not feed.npoints() else "%s to %s" % (
                iso(feed.start, args.tz), iso(feed.time(feed.npoints() - 1), args.tz))))
    when = (lambda t: iso(int(t), args.tz)) if args.times == "iso" else (lambda t: "%d" % t)
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


def build_parser():
    p = argparse.ArgumentParser(prog="wattlog", description="Local power metering collector.")
    p.add_argument("--version", action="version", version="wattlog " + __version__)
    sub = p.add_subparsers(dest="verb", required=True)

    c = sub.add_parser("collect", help="receive readings over MQTT and store them")
    c.add_argument("--broker", default="mqtt://127.0.0.1:1883",
                   help="mqtt://[USER@]HOST[:PORT] (default %(default)s)")
    c.add_argument("--password-file", metavar="FILE",
                   help="the broker password (else $%s)" % PASSWORD_ENV)
    c.add_argument("--data", required=True, help="data directory (created if missing)")
    c.add_argument("--commit-interval", type=float, default=300.0, metavar="S",
                   help="seconds readings may wait in memory before they are written "
                        "(default %(default)s)")
    c.add_argument("--base-topic", default="wattlog")
    c.add_argument("--ca", help="CA certificate file for an mqtts:// broker")
    c.add_argument("--client-id", default="wattlog-collector")
    c.add_argument("--status-interval", type=float, default=60.0, metavar="S",
                   help="seconds between status lines in the log (default %(default)s)")
    c.add_argument("--max-future", type=int, default=3600, metavar="S",
                   help="refuse readings stamped more than S seconds ahead (default %(default)s)")
    c.add_argument("--summary-interval", type=duration, default=FLUSH_S, metavar="S",
                   help="how often the query summaries are written (default 6h; each write "
                        "is a page per feed and level, so rarely is kinder to an SD card)")
    c.add_argument("--max-age", type=duration, default=MAX_AGE_S, metavar="AGE",
                   help="refuse readings older than this: seconds or 36h, 7d (default 7d; never "
                        "less than a plug's ring holds)")
    c.set_defaults(func=cmd_collect)

    f = sub.add_parser("feeds", help="list the feeds in a data directory")
    f.add_argument("--data", required=True)
    f.set_defaults(func=cmd_feeds)

    n = sub.add_parser("nodes", help="per node: last seen, boot, acked seq, gaps, ring drops")
    n.add_argument("--data", required=True)
    n.set_defaults(func=cmd_nodes)

    g = sub.add_parser("plug", help="switch a plug or show its state")
    g.add_argument("action", choices=("on", "off", "toggle", "status"))
    g.add_argument("node", help="node id, e.g. plug-34ea34797bff")
    g.add_argument("--broker", default="mqtt://127.0.0.1:1883",
                   help="mqtt://[USER@]HOST[:PORT] (default %(default)s)")
    g.add_argument("--password-file", metavar="FILE",
                   help="the broker password (else $%s)" % PASSWORD_ENV)
    g.add_argument("--base-topic", default="wattlog")
    g.add_argument("--ca", help="CA certificate file for an mqtts:// broker")
    g.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="seconds to wait for the plug's answer (default %(default)s)")
    g.set_defaults(func=cmd_plug)

    v = sub.add_parser("provision", help="credentials, ACL, broker config and node configs")
    v.add_argument("--dir", required=True, help="where the files go (kept between runs)")
    v.add_argument("--broker-host", required=True, help="the broker's address, as plugs reach it")
    v.add_argument("--port", type=int, help="listener port (default 1883, 8883 with --tls)")
    v.add_argument("--listen", metavar="ADDR",
                   help="the address the broker listens on (default: all interfaces)")
    v.add_argument("--tls", action="store_true", help="make a CA and a server certificate")
    v.add_argument("nodes", nargs="+", metavar="NODE", help="node ids to provision")
    v.set_defaults(func=cmd_provision)

    r = sub.add_parser("repair", help="rebuild a damaged feeds.json from the feeds' own files")
    r.add_argument("--data", required=True)
    r.add_argument("--force", action="store_true", help="rebuild even if feeds.json reads well")
    r.set_defaults(func=cmd_repair)

    b = sub.add_parser("rebuild", help="recompute the query summaries from the feeds")
    b.add_argument("--data", required=True)
    b.set_defaults(func=cmd_rebuild)

    e = sub.add_parser("export", help="print one feed as CSV or JSON")
    e.add_argument("--data", required=True)
    e.add_argument("--feed", required=True, help="NODE/CHANNEL (e.g. plug-1/power) or a feed id")
    e.add_argument("--start", help="first time: now-24h, unix seconds, 2026-11-21T08:00 "
                                    "(default: the feed's start)")
    e.add_argument("--end", help="end time, exclusive: now, ... (default: the feed's end)")
    e.add_argument("--tz", type=zone, default=UTC, metavar="ZONE",
                   help="zone of times given without one, and of --times iso: a name such as "
                        "Europe/Berlin, UTC or local (default UTC)")
    e.add_argument("--times", choices=("unix", "iso"), default="unix",
                   help="print times as unix seconds or ISO 8601 with the zone's offset")
    e.add_argument("--format", choices=("csv", "json"), default="csv")
    e.set_defaults(func=cmd_export)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
    try:
        args.func(args)
    except CliError as e:
        sys.exit("wattlog %s: %s" % (args.verb, e))
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
