"""test_metrics.py - the collector's Prometheus metrics (metrics.py) as a scrape sees them: a
real aiohttp server (api.py) on a free loopback port over a real data directory (store.Store,
readings committed and pending), PlugWatch fed the bytes a plug publishes, and the answer
parsed with prometheus_client's own parsers. Names, types, labels and values; the token rule
reading follows; the InfluxDB sink's lag. A real Prometheus scraping a real collector is
tests/e2e/test_prometheus.py."""

import json
import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families
from prometheus_client.parser import text_string_to_metric_families

from batches import T0
from served import COMMITTED, PENDING, TOKEN, Served
from wattlog.bridges.influx import Schema, Target, WriteFailed, Writer
from wattlog.bridges.sink import Sink

STATE = {"time": T0, "power": 512.5, "voltage": 229.9, "current": 2.23, "energy": 12.345,
         "relay": "ON"}
# name -> type, every family a collector with a plug, a refusal and a sink shows
FAMILIES = {
    "wattlog_plug_power_watts": "gauge", "wattlog_plug_voltage_volts": "gauge",
    "wattlog_plug_current_amperes": "gauge", "wattlog_plug_energy_kwh": "counter",
    "wattlog_plug_online": "gauge", "wattlog_plug_last_seen_timestamp_seconds": "gauge",
    "wattlog_plug_lost_readings": "counter", "wattlog_readings": "counter",
    "wattlog_batches": "counter", "wattlog_refused": "counter", "wattlog_commits": "counter",
    "wattlog_commit_duration_seconds": "summary", "wattlog_pending_points": "gauge",
    "wattlog_disk_written_bytes": "counter", "wattlog_influx_behind_points": "gauge",
    "wattlog_influx_sent_points": "counter",
}


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Scraped(Served):
    """test_api's served directory (readings committed and pending, the token), with a
    refused message and what two plugs published."""

    def __init__(self, tmp_path, read_open=True):
        super().__init__(tmp_path, read_open=read_open)
        self.store.take("wattlog/BAD NODE/readings", b"\x00")  # refused: bad-node
        self.watch.take("wattlog/plug-1/state", json.dumps(STATE).encode())
        self.watch.take("wattlog/plug-1/status", b"online")
        self.watch.take("wattlog/plug-2/status", b"offline")

    def get(self, path="/metrics", token=None, accept=None):
        headers = {"Authorization": "Bearer " + token} if token else {}
        if accept:
            headers["Accept"] = accept
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.server.port, path),
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.headers["Content-Type"], r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers["Content-Type"], e.read().decode()

    def families(self, **kw):
        status, kind, text = self.get(**kw)
        assert status == 200 and kind.startswith("text/plain; version=0.0.4"), (status, kind)
        return {f.name: f for f in text_string_to_metric_families(text)}


@pytest.fixture
def scraped(tmp_path):
    s = Scraped(tmp_path)
    yield s
    s.close()


def value(family, suffix="", **labels):
    found = [s.value for s in family.samples
             if s.name == family.name + suffix and s.labels == labels]
    assert len(found) == 1, (family.name + suffix, labels, family.samples)
    return found[0]


def with_sink(scraped):
    """A real Sink towards a port nothing listens on, after one pass that could not write:
    it knows how far behind it is."""
    sink = Sink(scraped.store, scraped.store.committer.data_dir, Writer(Target(
        "influx://127.0.0.1:%d/wattlog" % closed_port()), None, 2.0), Schema())
    with pytest.raises(WriteFailed):
        sink.poll()
    scraped.server.api.metrics.sink = sink
    return sink


def test_every_metric_has_its_conventional_name_type_and_labels(scraped):
    """Units in the names, counters in _total, the label node on every per-plug metric, kind
    on the refusals; nothing but wattlog_* and prometheus_client's process_*."""
    with_sink(scraped)
    families = scraped.families()
    assert {n: f.type for n, f in families.items() if n in FAMILIES} == FAMILIES
    assert all(n.startswith(("wattlog_", "process_")) for n in families), sorted(families)
    for name, family in families.items():
        for sample in family.samples:
            if family.type == "counter":
                assert sample.name in (name + "_total", name + "_created"), sample
            if name.startswith("wattlog_plug_"):
                assert set(sample.labels) == {"node"}, sample
    assert set(s.labels["kind"] for s in families["wattlog_refused"].samples) == {"bad-node"}


def test_the_values_are_the_collectors_state_at_scrape_time(scraped):
    """What the plug last published, its status, its last batch; the collector's readings,
    refusals, commits and pending points, as they stand when Prometheus asks."""
    f = scraped.families()
    assert value(f["wattlog_plug_power_watts"], node="plug-1") == STATE["power"]
    assert value(f["wattlog_plug_voltage_volts"], node="plug-1") == STATE["voltage"]
    assert value(f["wattlog_plug_current_amperes"], node="plug-1") == STATE["current"]
    assert value(f["wattlog_plug_energy_kwh"], "_total", node="plug-1") == STATE["energy"]
    assert value(f["wattlog_plug_online"], node="plug-1") == 1.0
    assert value(f["wattlog_plug_online"], node="plug-2") == 0.0
    assert value(f["wattlog_plug_last_seen_timestamp_seconds"], node="plug-1") == \
        scraped.store.ingest.last_seen["plug-1"]
    assert value(f["wattlog_plug_lost_readings"], "_total", node="plug-1") == 0
    assert value(f["wattlog_readings"], "_total") == COMMITTED + PENDING
    assert value(f["wattlog_batches"], "_total") == 2
    assert value(f["wattlog_refused"], "_total", kind="bad-node") == 1
    assert value(f["wattlog_commits"], "_total") == 1
    assert value(f["wattlog_commit_duration_seconds"], "_count") == 1
    assert 0 < value(f["wattlog_commit_duration_seconds"], "_sum") < 60
    assert value(f["wattlog_pending_points"]) == PENDING
    assert "wattlog_influx_behind_points" not in f  # no sink, no sink metrics
    scraped.store.commit()  # read again at the next scrape, not kept from the first
    f = scraped.families()
    assert value(f["wattlog_commits"], "_total") == 2
    assert value(f["wattlog_pending_points"]) == 0


def test_the_influx_sinks_lag_is_the_committed_slots_it_has_not_sent(scraped):
    """An InfluxDB that cannot be reached: every committed slot of every channel is behind,
    nothing sent."""
    sink = with_sink(scraped)
    f = scraped.families()
    assert value(f["wattlog_influx_behind_points"]) == sink.behind == COMMITTED * 4
    assert value(f["wattlog_influx_sent_points"], "_total") == 0


def test_openmetrics_is_given_to_a_scraper_that_asks_for_it(scraped):
    """Prometheus asks for OpenMetrics first: it gets it, and it parses as OpenMetrics."""
    status, kind, text = scraped.get(accept="application/openmetrics-text; version=1.0.0")
    assert status == 200 and kind.startswith("application/openmetrics-text"), kind
    families = {f.name: f for f in om_families(text)}
    assert value(families["wattlog_plug_power_watts"], node="plug-1") == STATE["power"]


def test_metrics_need_the_token_when_reading_does(tmp_path):
    """http read_open = false: /metrics is reading, so it needs the token like /api does."""
    s = Scraped(tmp_path, read_open=False)
    try:
        assert s.get()[0] == 401
        assert s.get(token="wrong-token-wrong-token-000")[0] == 403
        status, kind, text = s.get(token=TOKEN)
        assert status == 200 and "wattlog_readings_total 100.0" in text
    finally:
        s.close()
