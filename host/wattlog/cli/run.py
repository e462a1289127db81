"""run.py - the verbs that run the collector: collect (the service, built by service.py from
the settings), install-service (systemd.py), influx backfill (bridges/sink.py).
"""

import argparse
import os
import time

from wattlog.cli.common import CliError, Progress, check_broker, command_settings
from wattlog.store.base import StoreError
from wattlog.store.commit import StartError
from wattlog.store.feeds import RegistryError
from wattlog.store.phpfina import FeedError
from wattlog.times import parse_time


def cmd_collect(args):
    from wattlog import service, settings
    from wattlog.bridges.influx import InfluxError
    from wattlog.store.postgres import StoreUnavailable
    s = command_settings(args, settings.FILES)
    if s.path is None and args.data is None:
        raise CliError("no config file at %s: give --config FILE (`wattlog provision` writes "
                       "one) or --data DIR" % settings.config_path()[0])
    password = check_broker(s.broker, s.password_file)
    os.makedirs(s.data_dir, exist_ok=True)
    try:
        collector = service.build(s, password)
    except (ValueError, RegistryError, StartError, InfluxError, StoreUnavailable) as e:
        raise CliError(str(e)) from None
    collector.run()
    if collector.failed:
        raise CliError("stopped: see the error above")


def cmd_influx_backfill(args):
    """Every committed point from --since on into InfluxDB, with a progress bar (sink.py)."""
    from wattlog import service
    from wattlog.bridges.influx import InfluxError, WriteFailed
    from wattlog.bridges.sink import backfill
    s = command_settings(args, ("influx_password_file",))
    if not s.influx_url:
        raise CliError("no InfluxDB to send to: give --influx URL, or an [influx] table in %s"
                       % (s.path or "the config file"))
    try:
        writer, schema = service.influx(s)
    except InfluxError as e:
        raise CliError(str(e)) from None
    try:
        since = parse_time(args.since) if args.since else None
    except argparse.ArgumentTypeError as e:
        raise CliError(str(e)) from None
    try:
        store = service.reader(s)  # the data directory's files, or the config's PostgreSQL
    except StoreError as e:
        raise CliError(str(e)) from None
    shown = Progress("backfill")
    t0 = time.monotonic()
    try:
        sent = backfill(store, writer, schema, since,
                        lambda done, total, sent: shown(done, total, "%d points" % sent))
    except WriteFailed as e:
        raise CliError("%s; run it again (points already sent are only written again)" % e) \
            from None
    except (RegistryError, FeedError, StoreError, ValueError, OSError) as e:
        raise CliError(str(e)) from None
    finally:
        shown.close()
    print("sent %d points to %s in %.1f s (schema %s)" % (sent, writer.target,
                                                        time.monotonic() - t0, schema.name))


def cmd_install_service(args):
    """The systemd unit for the config, its user, enabled and started (systemd.py)."""
    from wattlog import settings, systemd
    path = settings.config_path(args.config)[0]
    try:
        if args.print:
            print(systemd.unit_text(settings.load(path), systemd.executable()), end="")
        else:
            systemd.install(path)
    except systemd.ServiceError as e:
        raise CliError(str(e)) from None


def influx_flags(p, required=False):
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
