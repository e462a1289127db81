"""promrig.py - the rig of test_prometheus.py and test_grafana_queries.py: mosquitto, `wattlog
collect --config FILE` with its HTTP side closed (read_open = false: Prometheus sends the
token, as the README's Prometheus part says), two plugs at constant loads caught up and then
live, and Debian's Prometheus, a private one on a free loopback port scraping every second."""

import json
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

from broker import Broker, free_port
from helpers import aligned_past, secret_file
from rig import Collector, SimPlug
from wattlog.fleet.provision import COLLECTOR

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
        self.collector = Collector(config=conf, log_path=work / "data.log")
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
