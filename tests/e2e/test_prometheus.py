"""test_prometheus.py - Debian's Prometheus scrapes the collector's /metrics (metrics.py) as a
user's Prometheus would: a real `wattlog collect --listen` on a free loopback port, two real
simulated plugs (the firmware on the MicroPython unix port) sending through a real mosquitto
with the provisioned ACL, and a real `prometheus` started here on another free loopback port,
scraping every second. PromQL through Prometheus's HTTP API then gives each plug's power and a
rate of readings. One collector, its plugs and one Prometheus serve the module.

The collector is configured as the README's Prometheus part says of a closed HTTP side:
`read_open = false`, so Prometheus sends the token (authorization: credentials_file). The
plugs start an hour in the past and catch up as fast as they go, then run in real time,
so readings keep arriving while Prometheus scrapes; the collector commits every 2 s.
The rig is promrig.py, which test_grafana_queries.py uses too.
"""

import shutil

import pytest

from promrig import PLUGS, Rig

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None,
                                reason="Debian's prometheus is not installed (tools/setup)")


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    r = Rig(tmp_path_factory.mktemp("prometheus"))
    try:
        yield r
    finally:
        r.close()


def by_node(result):
    return {dict(labels).get("node"): v for labels, v in result.items()}


def test_promql_gives_each_plugs_power(rig):
    """`wattlog_plug_power_watts` through Prometheus: one series per plug, labelled with its
    node id, at the power the plug draws."""
    prom = rig.prometheus

    def powers():
        got = by_node(prom.query("wattlog_plug_power_watts"))
        return got if set(got) == set(PLUGS) else None
    got = prom.wait("both plugs' power in Prometheus", powers)
    for node, watts in PLUGS.items():
        assert abs(got[node] - watts) <= 0.02 * watts, got
    up = prom.query('up{job="wattlog"}')
    assert list(up.values()) == [1.0], up  # the scrape itself succeeds, with the token


def test_promql_gives_a_rate_of_readings(rig):
    """rate() over the collector's readings counter is positive while the plugs send, and
    the per-plug energy counter rises (a counter Prometheus can take increase() of)."""
    prom = rig.prometheus
    rate = prom.wait("a positive rate of readings", lambda: [
        v for v in prom.query("rate(wattlog_readings_total[30s])").values() if v > 0])
    assert rate[0] > 0
    rises = prom.wait("every plug's energy rising", lambda: (lambda got: got if set(got) == set(
        PLUGS) and all(v > 0 for v in got.values()) else None)(by_node(
            prom.query("increase(wattlog_plug_energy_kwh_total[1m])"))))
    assert set(rises) == set(PLUGS)
