"""test_cluster.py - past one Pi, on real servers (README "Past one Pi"): a 3-node NATS
JetStream cluster with its MQTT gateway (configured as `wattlog provision --cluster` configures
it), a private PostgreSQL, three cluster collectors (`wattlog collect` with [cluster]), real-
firmware plugs (tools/simnode) and a hundred light CPython plugs (tools/lib/lightplug.py:
wattnode.wire's batches and acks, the firmware's rules of keeping and resending).

After each fault (a collector SIGKILLed, one paused past its lease and woken, a broker node
stopped, PostgreSQL stopped for 20 s) every plug's readings drain: stored = produced per plug,
each slot once with its value (the database's key is node and slot: a duplicate cannot exist;
a gap is a missing slot). Real time: servers, leases and resends run by the wall clock.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from broker import free_port
from helpers import REPO, aligned_past
from test_integrity import wait_until

pytestmark = [pytest.mark.xdist_group("cluster"), pytest.mark.realtime]
natscluster = pytest.importorskip("natscluster")
pgserver = pytest.importorskip("pgserver")
lightplug = pytest.importorskip("lightplug")
psycopg = pytest.importorskip("psycopg")

PARTITIONS = 8
COLLECTORS = 3
LIGHT = 100


class Cluster:
    """The servers, the collectors and the plugs of one module, each stopped at its end."""

    def __init__(self, work):
        from wattlog.fleet.provision import provision
        self.work = str(work)
        self.auth = os.path.join(self.work, "auth")
        self.light = ["light-%03d" % i for i in range(LIGHT)]
        self.creds = provision(self.auth, self.light + ["real-a", "real-b"], "127.0.0.1",
                               progress=lambda text: None)
        self.pg = pgserver.PgServer().start()
        self.nats = natscluster.NatsCluster(self.work, self.auth, self.creds, nodes=3,
                                            partitions=PARTITIONS).start()
        self.collectors = [None] * COLLECTORS
        self.ports = [free_port() for _ in range(COLLECTORS)]
        for i in range(COLLECTORS):
            self.start_collector(i)

    def config(self, i):
        path = os.path.join(self.work, "c%d.toml" % i)
        with open(path, "w") as f:
            f.write('broker = "mqtt://wattlog-collector@127.0.0.1:%d"\n'
                    'password_file = "%s"\ndata = "%s"\nstore = "%s"\n'
                    'store_password_file = "%s"\nstatus_interval = 2\n'
                    '[http]\nlisten = "127.0.0.1:%d"\n'
                    '[cluster]\nnats = [%s]\nmqtt = [%s]\npartitions = %d\nname = "c%d"\n'
                    % (self.nats.mqtt_ports[i % 3],
                       os.path.join(self.auth, "wattlog-collector.password"),
                       os.path.join(self.work, "c%d" % i), self.pg.dsn, self.pg.password_file,
                       self.ports[i], ", ".join('"%s"' % u for u in self.nats.nats_urls),
                       ", ".join('"mqtt://wattlog-collector@127.0.0.1:%d"' % p
                                 for p in self.nats.mqtt_ports), PARTITIONS, i))
        return path

    def start_collector(self, i):
        log = open(os.path.join(self.work, "c%d.log" % i), "a")
        self.collectors[i] = subprocess.Popen(
            [sys.executable, "-m", "wattlog.cli", "collect", "--config", self.config(i)],
            stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO))
        log.close()

    def log(self, i):
        with open(os.path.join(self.work, "c%d.log" % i)) as f:
            return f.read()

    def owners(self):
        """{partition: the collector's database pid} of the partitions' leases."""
        with psycopg.connect(self.pg.dsn, password=self.pg.password, autocommit=True) as c:
            from wattlog.store.postgres import PARTITIONS_KEY
            return dict(c.execute("SELECT objid::int, pid FROM pg_locks WHERE locktype = "
                                  "'advisory' AND classid = %s::oid AND granted",
                                  (PARTITIONS_KEY,)).fetchall())

    def stored(self):
        """{node: [slot, ...]} of every reading in the database, and their power (W)."""
        with psycopg.connect(self.pg.dsn, password=self.pg.password, autocommit=True) as c:
            rows = c.execute("SELECT n.node, r.slot, r.power FROM wl_readings r JOIN wl_nodes n"
                             " ON n.id = r.node_id ORDER BY n.node, r.slot").fetchall()
        out = {}
        for node, slot, power in rows:
            out.setdefault(node, []).append((slot, power))
        return out

    def close(self):
        for proc in self.collectors:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
        self.nats.stop()
        self.pg.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        wait_until("every partition owned, shared by the three", lambda: len(c.owners()) ==
                   PARTITIONS and len(set(c.owners().values())) == COLLECTORS, 60)
        yield c
    finally:
        c.close()


def light_round(cluster, start, readings=30):
    return lightplug.LightPlugs(cluster.creds, cluster.light, cluster.nats.mqtt_ports, start,
                                readings=readings, batch=3).start()


def test_every_plug_drains_and_every_reading_is_stored_once(cluster):
    """A hundred light plugs over the three gateways and two real-firmware plugs: every
    reading acknowledged to its plug only once it is in the database, each stored once."""
    start = aligned_past(3600)
    plugs = light_round(cluster, start)
    try:
        plugs.wait_acked(120)
    finally:
        plugs.stop()
    stored = cluster.stored()
    for node, plug in plugs.plugs.items():
        rows = stored[node]
        first = start // lightplug.INTERVAL_S
        assert [s - first for s, _ in rows] == list(range(plug.readings)), node
        assert [p for _, p in rows] == [float(k % 1000) for k in range(plug.readings)]
