"""test_grafana_queries.py - every query of the Grafana dashboards in grafana/ runs and returns
data, against the real servers a user's Grafana would ask: Debian's InfluxDB 1.6 fed by the
collector's InfluxDB sink (default schema) and Debian's Prometheus scraping its /metrics.

The queries are taken out of the JSON files as Grafana would send them: the dashboard's
template variables substituted (the node variable's own query run first, for its values; the
time filter, intervals and range as Grafana writes them). A panel whose query cannot run (a
server's refusal), returns nothing, or still holds a variable after substitution fails the
test, naming the panel. Grafana itself is not needed: it only relays these queries.

One collector (configured by its config file's [influx] table, as the README says), two
plugs, one InfluxDB and one Prometheus serve the module (promrig.Rig); the plugs
start an hour in the past, catch up as fast as they go, then run in real time.
"""

import json
import re
import shutil
import sys
import time
import urllib.error

import pytest

from helpers import REPO
from promrig import PLUGS, Rig

sys.path.insert(0, str(REPO / "tools" / "lib"))
from influxd import Influxd  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None or
                                shutil.which("influxd") is None,
                                reason="Debian's prometheus and influxdb are needed (tools/setup)")
DASHBOARDS = REPO / "grafana"
RANGE_S = 2 * 3600       # the dashboard's time range in the test: the plugs' hour and more
WAIT_S = 90.0


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    work = tmp_path_factory.mktemp("grafana")
    db = Influxd(str(work), "wattlog").start()
    rig = None
    try:
        rig = Rig(work, config='[influx]\nurl = "influx://127.0.0.1:%d/wattlog"\n'
                               'schema = "default"\ntimeout = 5\n' % db.port)
        yield rig, db
    finally:
        if rig is not None:
            rig.close()
        db.stop()


def dashboard(name):
    return json.loads((DASHBOARDS / name).read_text())


def panels(dash):
    """Every panel with queries, rows' panels included, as (title, panel)."""
    out = []
    for p in dash["panels"]:
        out += [(q["title"], q) for q in p.get("panels", [])]
        if p["type"] != "row":
            out.append((p["title"], p))
    return out


def node_variable(dash):
    found = [v for v in dash["templating"]["list"] if v["name"] == "node"]
    assert len(found) == 1, "the dashboard has no node variable"
    return found[0]


def substitute(text, values):
    """The query as Grafana sends it; AssertionError if a variable is left in it."""
    for name, value in sorted(values.items(), key=lambda kv: -len(kv[0])):  # longest first
        text = text.replace("${%s}" % name, value).replace("$" + name, value)
    left = re.search(r"\$\{?\w+", text)
    assert left is None, "the variable %s is left in %r" % (left and left.group(), text)
    return text


def run_all(kind, dash, run):
    """Every target of every panel through run(target) (true: it returned data; or
    AssertionError with the server's words), until each returns data (bounded); a refusal
    fails at once, naming the panel. The number of queries run."""
    targets = []
    for title, p in panels(dash):
        assert p.get("targets"), "panel %r has no query" % title
        assert p["datasource"] == {"type": kind, "uid": "${datasource}"}, (title, p["datasource"])
        targets += [(title, t) for t in p["targets"]]
    deadline = time.monotonic() + WAIT_S
    while True:
        empty = []
        for title, target in targets:
            try:
                if not run(target):
                    empty.append(title)
            except AssertionError as e:
                raise AssertionError("panel %r: %s" % (title, e)) from None
        if not empty:
            return len(targets)
        if time.monotonic() > deadline:
            raise AssertionError("these panels' queries return no data: %s" % empty)
        time.sleep(1.0)


def test_every_prometheus_panel_query_returns_data(servers):
    """grafana/wattlog-prometheus.json: the node variable's label_values() lists both plugs;
    every panel's PromQL (instant or range, as the panel asks) runs and returns data."""
    rig, _ = servers
    prom = rig.prometheus
    dash = dashboard("wattlog-prometheus.json")
    var = node_variable(dash)["definition"]
    metric = re.fullmatch(r"label_values\((\w+), node\)", var).group(1)
    nodes = prom.wait("the node variable's values", lambda: (lambda got: got if set(got) ==
                      set(PLUGS) else None)(prom.api("label/node/values", **{"match[]": metric})))
    values = {"node": "(%s)" % "|".join(nodes), "datasource": "wattlog-prometheus",
              "__range": "%ds" % RANGE_S, "__rate_interval": "15s", "__interval": "5s"}

    def run(target):
        expr = substitute(target["expr"], values)
        now = time.time()
        if target.get("instant"):
            data = prom.api("query", query=expr, time=now)
        else:
            data = prom.api("query_range", query=expr, start=now - RANGE_S, end=now, step=5)
        series = data["result"]
        points = [v for s in series for _, v in ([s["value"]] if "value" in s else s["values"])]
        return [v for v in points if v not in ("NaN", "+Inf", "-Inf")]
    assert run_all("prometheus", dash, run) >= 12


def test_every_influxdb_panel_query_returns_data(servers):
    """grafana/wattlog-influxdb.json over what the sink wrote: the node variable's SHOW TAG
    VALUES lists both plugs; every panel's InfluxQL, with Grafana's $timeFilter and
    $__interval, runs and returns data for the plugs."""
    _, db = servers
    dash = dashboard("wattlog-influxdb.json")

    def ask(q):
        try:
            ans = db.query(q)
        except urllib.error.HTTPError as e:
            raise AssertionError("InfluxDB refused %r: %s" % (q, e.read().decode()))
        result = ans["results"][0]
        assert "error" not in result, "InfluxDB refused %r: %s" % (q, result["error"])
        return result.get("series", [])
    deadline = time.monotonic() + WAIT_S
    while True:
        nodes = sorted(v for s in ask(node_variable(dash)["query"]) for _, v in s["values"])
        if nodes == sorted(PLUGS):
            break
        assert time.monotonic() < deadline, "SHOW TAG VALUES gave %s" % nodes
        time.sleep(0.5)

    def run(target):
        now_ms = int(time.time() * 1000)
        values = {"node": "(%s)" % "|".join(nodes), "__interval": "10s",
                  "timeFilter": "time >= %dms and time <= %dms" % (now_ms - RANGE_S * 1000,
                                                                   now_ms),
                  "tag_node": "node"}
        q = substitute(target["query"], values)
        series = ask(q)
        per_node = {s.get("tags", {}).get("node") for s in series
                    if any(v is not None for row in s["values"] for v in row[1:])}
        return per_node == set(nodes)
    assert run_all("influxdb", dash, run) >= 5
