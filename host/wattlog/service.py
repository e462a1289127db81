"""service.py - the one place that builds the collector service from its settings.

    collector = build(settings, password)   # every part made once, nothing started
    collector.run()                         # until SIGTERM/SIGINT (collector.py)

The parts, each made here and nowhere else, and handed to what uses them:
  store      the storage side: the data directory's files (store/files.py), locked and
             checked, or the settings' PostgreSQL (store/postgres.py)
  firmware   each plug's version and last update (fleet/firmware.py), a listener
  watch      what the plugs publish, as heard (serve/plugwatch.py), a listener; with HTTP only
  link       the collector's link to the broker (links.py): /api/health, the page's header
  sink       the InfluxDB sink (bridges/sink.py), with [influx] only
  runs       the appliances' runs (runs/part.py), a listener the collector's loop ticks;
             unless [runs] enabled = false
  http       the HTTP side (serve/app.py: Api over the store, watch, links, sink and runs),
             with [http] listen only; its secret files read now
With [cluster] the collector is cluster.py's (NATS partitions under leases, into the shared
PostgreSQL), made of the same parts.
A listener has one small shape: topics() to subscribe to, take(topic, payload) -> whether the
message was its own. Nothing here reaches into a part after it is made.
"""

import collections
import os

from wattlog.complaints import Complaints
from wattlog.links import Link
from wattlog.mqtt import parse_broker

Parts = collections.namedtuple("Parts", "store complaints firmware watch link sink http runs")


def build(s, password=None):
    """The collector for the settings `s` (settings.Settings; password: the broker's, read
    from its file by the caller). ValueError (or a subclass: a registry, a start-up or an
    InfluxDB problem) says in words what cannot be built; nothing is left open then."""
    from wattlog.collector import Collector
    from wattlog.fleet.firmware import Firmware
    complaints = Complaints()
    store = open_store(s, complaints)
    try:
        host, port = parse_broker(s.broker)[:2]
        link = Link("%s:%d" % (host, port))
        influx_sink = sink(s, store)
        appliances = runs(s, store)
        watch = http = None
        if s.http_listen:
            from wattlog.serve.plugwatch import PlugWatch
            watch = PlugWatch(s.base_topic)
            http = _http(s, store, watch, link, influx_sink, appliances)
        os.makedirs(s.data_dir, exist_ok=True)  # this collector's own records (firmware)
        firmware = Firmware(s.data_dir, s.base_topic, complaints=complaints,
                            on_lost=store.lost_in_rollback)
        parts = Parts(store, complaints, firmware, watch, link, influx_sink, http, appliances)
        if s.cluster_nats:
            from wattlog.cluster import ClusterCollector
            return ClusterCollector(s, password, parts)
        return Collector(s, password, parts)
    except BaseException:
        store.close()
        raise


def open_store(s, complaints):
    """The collector's store: the PHPFina files in the data directory (locked and checked,
    nothing changed yet), or the settings' PostgreSQL (store/postgres.py)."""
    if s.store:
        from wattlog.serve.app import read_first_line
        from wattlog.store.postgres import PgStore
        password = read_first_line(s.store_password_file, "database password") \
            if s.store_password_file else None
        # the writer's session named after the collector (a cluster's: its leases' holder)
        return PgStore(s.store, password, complaints, s.max_future_s, s.max_age_s,
                       name="wattlog %s" % (s.cluster_name or "collector"))
    from wattlog.store.files import Store
    return Store(s.data_dir, complaints, s.max_future_s, s.max_age_s)


def reader(s):
    """The data as it is, through the storage interface: the data directory's files, or the
    settings' PostgreSQL. StoreError in words."""
    if s.store:
        from wattlog.serve.app import read_first_line
        from wattlog.store.postgres import PgReader
        password = read_first_line(s.store_password_file, "database password") \
            if s.store_password_file else None
        return PgReader(s.store, password)
    from wattlog.store import open_reader
    return open_reader(s.data_dir)


def influx(s):
    """(Writer, Schema) of the settings' influx_* (the [influx] table, each --influx flag in
    its place: bridges/influx.py); InfluxError in words."""
    from wattlog.bridges.influx import TIMEOUT_S, configure
    return configure(s.influx_url, s.influx_schema or "default", s.influx_password_file,
                     s.influx_names or {}, s.influx_timeout_s or TIMEOUT_S)


def sink(s, store):
    """The InfluxDB sink of the settings' [influx], following the store's committed data
    (either engine), its cursor in the collector's data directory; a cluster's collectors
    keep it in the database (one of them sends: cluster.py), as "influx"; or None."""
    if not s.influx_url:
        return None
    from wattlog.bridges.sink import Sink
    writer, schema = influx(s)
    cursor = None
    if s.cluster_nats:
        from wattlog.store.postgres import PgDocument
        cursor = PgDocument(store.conns, "influx")
    return Sink(store, s.data_dir, writer, schema, horizon_s=s.max_age_s + 3600, cursor=cursor)


def runs(s, store):
    """The runs part (runs/part.py) of the settings' [runs], or None when it is off, and in a
    cluster's collectors, which do not find runs yet (each would need the runs of the plugs
    of its partitions only, their detectors' state in the database, handed over with them)."""
    options = s.runs or {}
    if not options.get("enabled", True) or s.cluster_nats:
        return None
    from wattlog.periods import Tariff
    from wattlog.runs.part import SAVE_EVERY_S, Runs
    return Runs(store, s.data_dir, options, Tariff.from_settings(s.tariff), s.timezone,
                s.base_topic, max_future_s=s.max_future_s,
                save_every_s=min(s.summary_interval_s, SAVE_EVERY_S))


def _http(s, store, watch, link, sink, appliances=None):
    """The HTTP side, not started: its token and the operator's password read now."""
    from wattlog.serve.app import Api, Server, read_first_line
    token = read_first_line(s.http_token_file, "HTTP token") if s.http_token_file else None
    operator = read_first_line(s.operator_password_file, "operator password") \
        if s.operator_password_file else None
    api = Api(store, watch, broker_url=s.broker, ca=s.ca, read_open=s.http_read_open,
              token=token, operator_password=operator, timezone=s.timezone, tariff=s.tariff,
              base_topic=s.base_topic, broker_link=link, sink=sink, runs=appliances)
    return Server(api, s.http_listen)
