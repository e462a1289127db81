"""cli - the wattlog command: the parser and main() here, one function per verb in run.py,
data.py and plugs.py; errors are one line that says what to do (common.py).

Every verb reads the config file: --config FILE, else the one $WATTLOG_CONFIG names, else
/etc/wattlog/wattlog.toml when it is there (settings.py); a flag given wins over it, and what
neither says is the default. So on a provisioned Pi no verb needs a flag the config holds:

  wattlog collect [--broker URL] [--password-file F] [--data DIR] [--commit-interval S]
                  [--listen HOST:PORT] [--influx URL ...] ...   the service (collector.py)
  wattlog influx backfill [--since T] [--influx URL ...]   send what is there to InfluxDB
  wattlog install-service [--print]             the systemd unit and its user (systemd.py)
  wattlog feeds | nodes [--json] | repair [--force] | rebuild        [--data DIR]
  wattlog migrate [--data DIR] --to postgresql://USER@HOST/DB [--store-password-file F]
                                                a Pi's history into PostgreSQL (migrate.py)
  wattlog export  --feed NODE/CHANNEL|ID [--start T] [--end T] [--fill] [--format csv|json]
  wattlog runs    [PLUG] [--since T] [--until T] [--json]   each appliance's runs (runs/)
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
import sys

from wattlog import __version__
from wattlog.cli.common import PASSWORD_ENV, CliError, UsageError, os_error
from wattlog.cli.data import (cmd_energy, cmd_export, cmd_feeds, cmd_nodes, cmd_rebuild,
                              cmd_repair, cmd_runs)
from wattlog.cli.migrate import cmd_migrate
from wattlog.cli.plugs import cmd_ota, cmd_plug, cmd_provision
from wattlog.cli.run import cmd_collect, cmd_influx_backfill, cmd_install_service, influx_flags
from wattlog.settings import CONFIG_ENV, DEFAULT_PATH
from wattlog.times import duration, zone


def broker_options(p):
    """--broker, --password-file, --base-topic, --ca: a verb that logs in as wattlog-operator."""
    p.add_argument("--broker", help="mqtt://[USER@]HOST[:PORT] (default: the config's broker, "
                                    "as wattlog-operator)")
    p.add_argument("--password-file", metavar="FILE",
                   help="wattlog-operator's broker password (default: the config's "
                        "operator_password_file, else $%s)" % PASSWORD_ENV)
    p.add_argument("--base-topic", help="(default: the config's, else wattlog)")
    p.add_argument("--ca", help="CA certificate file for an mqtts:// broker (default: the "
                                "config's)")


def data_option(p):
    """--data, and --store for the cluster's PostgreSQL: where a verb reads the data."""
    p.add_argument("--data", metavar="DIR",
                   help="the data directory (default: the config's data, else /var/lib/wattlog)")
    store_options(p)


def store_options(p):
    p.add_argument("--store", metavar="URL",
                   help="the data in PostgreSQL (postgresql://USER@HOST:PORT/DATABASE) rather "
                        "than PHPFina files in --data (default: the config's store)")
    p.add_argument("--store-password-file", metavar="FILE",
                   help="the database user's password (its first line)")


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
    store_options(c)
    influx_flags(c)

    x = sub.add_parser("influx", help="InfluxDB: send what the data directory holds already")
    xb = x.add_subparsers(dest="influx_verb", required=True).add_parser(
        "backfill", parents=[config],
        help="send every committed point (from --since on) to InfluxDB")
    data_option(xb)
    xb.add_argument("--since", metavar="T", help="first time: now-30d, unix seconds, "
                                                "2026-11-01 (default: each feed's start)")
    influx_flags(xb)
    xb.set_defaults(func=cmd_influx_backfill)

    i = verb("install-service", cmd_install_service,
             help="run the collector as a systemd service (the config's)")
    i.add_argument("--print", action="store_true", help="print the unit and change nothing")

    data_option(verb("feeds", cmd_feeds, help="list the feeds in a data directory"))

    n = verb("nodes", cmd_nodes, help="per node: last seen, boot, acked seq, gaps, ring drops, "
                                      "firmware version, last update")
    data_option(n)
    n.add_argument("--json", action="store_true", help="a JSON list, one object per node")

    g = verb("plug", cmd_plug, help="switch a plug or show its state")
    g.add_argument("action", choices=("on", "off", "toggle", "status"))
    g.add_argument("node", help="node id, e.g. plug-34ea34797bff")
    broker_options(g)
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
    broker_options(o)

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
    v.add_argument("--cluster", metavar="HOST,HOST,HOST",
                   help="a NATS JetStream cluster instead of one mosquitto: its nodes, each "
                        "HOST[:MQTT[:NATS[:ROUTE]]] (README \"Past one Pi\"; kept after)")
    v.add_argument("--partitions", type=int, metavar="P",
                   help="with --cluster: the readings' partitions (default 64; kept after)")
    v.add_argument("--nats-store", metavar="DIR",
                   help="with --cluster: each node's JetStream folder (default "
                        "/var/lib/nats/wattlog; kept after)")
    v.add_argument("--broadlink", choices=("off", "read", "control"),
                   help="the plugs answer the Broadlink SP3S protocol: read, or control (anyone "
                        "on the LAN can then switch them); default: as their config.json has it")
    v.add_argument("nodes", nargs="*", metavar="NODE", help="node ids to provision")

    r = verb("repair", cmd_repair,
             help="rebuild a damaged feeds.json from the feeds' own files")
    data_option(r)
    r.add_argument("--force", action="store_true", help="rebuild even if feeds.json reads well")

    data_option(verb("rebuild", cmd_rebuild,
                      help="recompute the query summaries and the runs from the feeds"))

    u = verb("runs", cmd_runs, help="what each appliance did: its runs, kWh and cost each, "
                                    "runs per week, a fridge's duty cycle")
    data_option(u)
    u.add_argument("plug", nargs="?", help="one plug (default: every plug)")
    u.add_argument("--since", metavar="T", help="runs that start at or after T: now-7d, "
                                                 "2026-11-01 (default: all)")
    u.add_argument("--until", metavar="T", help="runs that start before T (default: all)")
    u.add_argument("--json", action="store_true", help="the answer /api/runs gives")

    m = verb("migrate", cmd_migrate,
             help="copy a Pi's whole history into the cluster's PostgreSQL (stop the collector "
                  "first; run again, it goes on where it stopped)")
    m.add_argument("--data", metavar="DIR",
                   help="the data directory (default: the config's data, else /var/lib/wattlog)")
    m.add_argument("--to", dest="store", metavar="URL",
                   help="postgresql://USER@HOST[:PORT]/DATABASE (default: the config's store)")
    m.add_argument("--store-password-file", metavar="FILE",
                   help="the database user's password, its first line (default: the config's "
                        "store_password_file)")

    w = verb("energy", cmd_energy, help="kWh and cost per plug per day, week, month or year")
    data_option(w)
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
    data_option(e)
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
    from wattlog.systemd import CONFIG_EXIT, setup_logging
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
