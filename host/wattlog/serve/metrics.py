"""metrics.py - the collector's Prometheus metrics (GET /metrics on the HTTP side, plugs.py),
read from the collector's state when Prometheus scrapes, never counted on the way.

    m = Metrics(store, watch, writes, sink)   # a prometheus_client collector over the store's
                                        # status() and nodes(), a plugwatch.PlugWatch, a
                                        # diskwrites.WriteMeter and the InfluxDB sink, if any
    body, content_type = m.exposition(request.headers.get("Accept"))

Per plug (label node):
    wattlog_plug_power_watts                   gauge    from the plug's retained state
    wattlog_plug_voltage_volts                 gauge      (<base>/<node>/state: what the
    wattlog_plug_current_amperes               gauge       plug last published)
    wattlog_plug_energy_kwh_total              counter  the plug's own energy total
    wattlog_plug_online                        gauge    1 online, 0 offline (its last will)
    wattlog_plug_last_seen_timestamp_seconds   gauge    unix time of its last good batch
    wattlog_plug_lost_readings_total           counter  readings it made that never arrived
Per collector:
    wattlog_readings_total, wattlog_batches_total       counters  taken in since start
    wattlog_refused_total{kind}                 counter  bad input by kind (complaints.py)
    wattlog_commits_total                       counter
    wattlog_commit_duration_seconds             summary  _count and _sum of the commits
    wattlog_pending_points                      gauge    taken in, not committed yet
    wattlog_disk_written_bytes_total            counter  this process's write_bytes
                                                         (/proc/self/io) since it started
    wattlog_influx_behind_points                gauge    committed slots the InfluxDB sink
    wattlog_influx_sent_points_total            counter    has not sent yet / has sent
    process_*                                            prometheus_client's, for the process

Design notes:
- Scrape-time reads, not instrumented updates: the readings path does not get one
  instruction slower for metrics, and there is nothing to keep in step. Each value is a copy
  made in one step (an int attribute, dict(), list() of a dict: single CPython operations),
  as api.py's handlers read the collector's memory; the plugs' state comes from
  PlugWatch.snapshot() under its own short lock.
- The energy counter is what the plug publishes: the firmware never publishes a total lower
  than one it published before (lib/wattnode/node.py publishes only a settled total), so it
  is monotonic as a Prometheus counter must be; a new plug under an old name starts again from
  its own total, which rate() and increase() take as a counter reset.
- A plug's gauges appear once it has published a state; a value it did not send is left out
  rather than given as 0. The collector's own counters start at 0 at each of its starts (as
  Prometheus expects of a process); a plug's lost readings are kept in commit.json.
- Names follow Prometheus's conventions: base units in the name (watts, volts, amperes,
  seconds, bytes; energy in kWh, the unit plugs and Home Assistant use), _total on counters,
  the label `node` for the plug.
- Its own CollectorRegistry per Metrics (no module-global state): two collectors in one
  process (tests) never collide.
"""

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.exposition import choose_encoder

_PLUG_GAUGES = (("power", "wattlog_plug_power_watts", "Power the plug last published, W"),
                ("voltage", "wattlog_plug_voltage_volts", "Mains voltage the plug last "
                                                          "published, V"),
                ("current", "wattlog_plug_current_amperes", "Current the plug last "
                                                            "published, A"))


def _number(value):
    """A plug's published value as a float, or None if it is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if value - value == 0 else None  # NaN and inf are not numbers to publish


class Metrics:
    """A prometheus_client custom collector over the collector's parts (module docstring)."""

    def __init__(self, store, watch, writes=None, sink=None):
        self.store = store    # its interface (store/__init__.py): status() and nodes()
        self.watch = watch
        self.writes = writes  # diskwrites.WriteMeter: this process's write_bytes since it started
        self.sink = sink      # the InfluxDB sink (bridges/sink.py), if it is on
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        ProcessCollector(registry=self.registry)

    def exposition(self, accept=None):
        """(body bytes, Content-Type) for a scrape that sent this Accept header (the text
        format, or OpenMetrics when Prometheus asks for it)."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

    def collect(self):
        yield from self._plugs()
        yield from self._collector()
        yield from self._sink()

    def _plugs(self):
        gauges = {key: GaugeMetricFamily(name, text, labels=["node"])
                  for key, name, text in _PLUG_GAUGES}
        energy = CounterMetricFamily("wattlog_plug_energy_kwh", "Energy total the plug last "
                                     "published, kWh", labels=["node"])
        online = GaugeMetricFamily("wattlog_plug_online", "1 if the plug says it is online, "
                                   "0 if offline (its last will)", labels=["node"])
        seen = GaugeMetricFamily("wattlog_plug_last_seen_timestamp_seconds", "Unix time of "
                                 "the plug's last good readings batch", labels=["node"])
        lost = CounterMetricFamily("wattlog_plug_lost_readings", "Readings the plug made that "
                                   "never arrived", labels=["node"])
        plugs = self.watch.snapshot() if self.watch is not None else {}
        for node, plug in sorted(plugs.items()):
            state = plug["state"] or {}
            for key, family in gauges.items():
                value = _number(state.get(key))
                if value is not None:
                    family.add_metric([node], value)
            kwh = _number(state.get("energy"))
            if kwh is not None and kwh >= 0:
                energy.add_metric([node], kwh)
            if plug["status"] in ("online", "offline"):
                online.add_metric([node], 1.0 if plug["status"] == "online" else 0.0)
        for node, st in self.store.nodes().items():
            if st["last_batch"] is not None:
                seen.add_metric([node], float(st["last_batch"]))
            if st["boot"] is not None:
                lost.add_metric([node], float(st["lost"]))
        yield from gauges.values()
        yield from (energy, online, seen, lost)

    def _collector(self):
        st = self.store.status()
        yield CounterMetricFamily("wattlog_readings", "Readings taken in since the collector "
                                  "started", value=st["readings"])
        yield CounterMetricFamily("wattlog_batches", "Readings batches taken in since the "
                                  "collector started", value=st["batches"])
        refused = CounterMetricFamily("wattlog_refused", "Bad input refused, by kind "
                                      "(the collector's log says each kind in words)",
                                      labels=["kind"])
        for kind, n in sorted(st["refused"].items()):
            refused.add_metric([kind], n)
        yield refused
        yield CounterMetricFamily("wattlog_commits", "Commits since the collector started",
                                  value=st["commits"])
        yield SummaryMetricFamily("wattlog_commit_duration_seconds", "Time the commits took "
                                  "(writes, fdatasync, commit.json)",
                                  count_value=st["commits"], sum_value=st["commit_s"])
        yield GaugeMetricFamily("wattlog_pending_points", "Points taken in and not committed "
                                "yet", value=st["pending_points"])
        writes = self.writes
        if writes is not None:
            writes.sample()
            if writes.first is not None and writes.last is not None:
                yield CounterMetricFamily("wattlog_disk_written_bytes", "Bytes this process "
                                          "sent towards the disk since it started "
                                          "(/proc/self/io)", value=writes.last - writes.first)

    def _sink(self):
        sink = self.sink
        if sink is None:
            return
        yield GaugeMetricFamily("wattlog_influx_behind_points", "Committed slots the "
                                "InfluxDB sink has not sent yet", value=sink.behind)
        yield CounterMetricFamily("wattlog_influx_sent_points", "Points the InfluxDB sink "
                                  "has written since the collector started", value=sink.sent)
