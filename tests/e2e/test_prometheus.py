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
Rig and Prometheus are also used by test_grafana_queries.py.
"""

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from broker import Broker, free_port
from helpers import REPO, aligned_past, secret_file
from rig import Collector, SimPlug
from wattlog.fleet.provision import COLLECTOR

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None,
                                reason="Debian's prometheus is not installed (tools/setup)")
PLUGS = {"prom-a": 500, "prom-b": 750}   # node -> constant W
TOKEN = "a-token-prometheus-sends-0123456789"
START_S = 30


class Prometheus:
    """A private `prometheus` on a free loopback port scraping `targets` every second, its
    data in `work` (the package's own service is never used)."""

    def __init__(self, work, targets, token_file=None):
        self.dir = os.path.join(str(work), "prometheus")
        os.makedirs(self.dir)
        self.port = free_port()
        self.base = "http://127.0.0.1:%d" % self.port
        self.log_path = os.path.join(self.dir, "prometheus.log")
        conf = os.path.join(self.dir, "prometheus.yml")
        with open(conf, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: wattlog\n    static_configs:\n"
                    "      - targets: [%s]\n" % ", ".join("'%s'" % t for t in targets))
            if token_file:  # as the README says for read_open = false
                f.write("    authorization:\n      credentials_file: %s\n" % token_file)
        log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            ["prometheus", "--config.file=" + conf, "--storage.tsdb.path=" + self.dir + "/data",
             "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
        log.close()
        deadline = time.monotonic() + START_S
        while True:
            try:
                urllib.request.urlopen(self.base + "/-/ready", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise AssertionError("prometheus did not start:\n" + open(self.log_path).read())
                time.sleep(0.1)

    def api(self, path, **params):
        """The data of one HTTP API call (GET /api/v1/<path>); AssertionError with
        Prometheus's own words if it refuses."""
        url = "%s/api/v1/%s?%s" % (self.base, path, urllib.parse.urlencode(params, doseq=True))
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                out = json.load(r)
        except urllib.error.HTTPError as e:
            out = json.load(e)
        if out.get("status") != "success":
            raise AssertionError("Prometheus refused %s: %s" % (params, out.get("error")))
        return out["data"]

    def query(self, expr):
        """{frozenset(labels): value} of an instant query."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return {frozenset(r["metric"].items()): float(r["value"][1]) for r in data["result"]}

    def wait(self, what, check, timeout_s=60.0):
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            last = check()
            if last:
                return last
            assert self.proc.poll() is None, open(self.log_path).read()
            time.sleep(0.25)
        raise AssertionError("%s never came true (last: %r)" % (what, last))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class ConfigCollector(Collector):
    """`wattlog collect --config FILE`, as helpers.Collector runs it otherwise."""

    def __init__(self, config_path, data):
        self.data = str(data)
        self.log_path = self.data + ".log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "wattlog.cli", "collect", "--config", str(config_path)],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=str(REPO))


class Rig:
    """mosquitto, `wattlog collect` with its HTTP side (given `config`: TOML lines added to
    its config file, e.g. an [influx] table), the plugs, and Prometheus scraping it."""

    def __init__(self, work, config=""):
        self.collector = self.prometheus = None
        self.plugs = []
        self.broker = Broker(str(work / "mosquitto")).start()
        try:
            self._start(work, config)
        except BaseException:
            self.close()  # nothing started is left running
            raise

    def _start(self, work, config):
        self.port = free_port()
        token_file = secret_file(work / "http.token", TOKEN)
        conf = work / "wattlog.toml"
        conf.write_text('broker = "%s"\npassword_file = "%s"\ndata = "%s"\n'
                        'commit_interval = 2\nstatus_interval = 2\n[http]\nlisten = '
                        '"127.0.0.1:%d"\nread_open = false\ntoken_file = "http.token"\n%s'
                        % (self.broker.url, self.broker.password_file(COLLECTOR), work / "data",
                           self.port, config))
        self.collector = ConfigCollector(conf, work / "data")
        self.collector.wait_for("listening on", 30)
        start = aligned_past(3600)
        self.plugs = [SimPlug(self.broker.port, node, "--profile", "constant:%d" % watts,
                              "--speed", "max", "--start", start, "--then-realtime",
                              "--config", json.dumps({"batch_wait_s": 1}),
                              *self.broker.node_args(node))
                      for node, watts in PLUGS.items()]
        self.prometheus = Prometheus(work, ["127.0.0.1:%d" % self.port], token_file)

    def close(self):
        if self.prometheus is not None:
            self.prometheus.stop()
        for p in self.plugs:
            p.stop()
        if self.collector is not None:
            self.collector.stop()
        self.broker.stop()


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
