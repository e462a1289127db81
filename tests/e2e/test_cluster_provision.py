"""test_cluster_provision.py - `wattlog provision --cluster` writes a NATS JetStream cluster
that runs as written and is as strict as the single Pi's mosquitto (fleet/natsfiles.py): the
three nodes start from the files provision wrote (nats-server, Debian's), a plug's login may
publish and read only its own topics, anonymous and plain-text clients are refused, and each
plug's config.json names every node's MQTT gateway as "host:port", tried in turn.
"""

import asyncio
import json
import os
import subprocess
import sys

import pytest

from broker import free_port
from helpers import REPO
from rig import wait_until
from wattlog.mqtt import close

pytestmark = [pytest.mark.xdist_group("cluster")]
natscluster = pytest.importorskip("natscluster")
mqtt = pytest.importorskip("paho.mqtt.client")


class Login:
    """One MQTT client over TLS (or not), what it received, and how its connection went: a
    refusal (CONNACK) or a connection dropped before any CONNACK (paho tries again: a gateway
    still making its session streams drops the first ones)."""

    def __init__(self, auth, port, user, password, tls=True):
        self.got, self.refused, self.dropped, self.connected = [], None, 0, False
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=user or "anon")
        if user is not None:
            self.client.username_pw_set(user, password)
        if tls:
            self.client.tls_set(ca_certs=os.path.join(auth, "ca.crt"))
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_message = lambda c, u, m: self.got.append((m.topic, m.payload))
        self.client.connect_async("127.0.0.1", port)
        self.client.loop_start()

    def _on_connect(self, client, userdata, flags, rc, properties):
        if rc.is_failure:
            self.refused = str(rc)
        else:
            self.connected = True

    def _on_disconnect(self, client, userdata, flags, rc, properties):
        if not self.connected:
            self.dropped += 1

    def subscribe(self, topic):
        done = []
        self.client.on_subscribe = lambda c, u, mid, rcs, p: done.append(rcs)
        self.client.subscribe(topic, 0)
        wait_until("the subscription to %s" % topic, lambda: done, 30)

    def close(self):
        close(self.client)


@pytest.fixture(scope="module")
def provisioned(tmp_path_factory):
    work = tmp_path_factory.mktemp("natsprov")
    auth = str(work / "auth")
    specs = ",".join("127.0.0.1:%d:%d:%d" % (free_port(), free_port(), free_port())
                     for _ in range(3))
    done = subprocess.run([sys.executable, "-m", "wattlog.cli", "provision", "--dir", auth,
                           "--cluster", specs, "--partitions", "8", "--nats-store",
                           str(work / "js"), "--tls", "plug-a", "plug-b"],
                          capture_output=True, text=True, cwd=str(REPO), timeout=120)
    assert done.returncode == 0, done.stderr
    with open(os.path.join(auth, "credentials.json")) as f:
        creds = json.load(f)
    assert not [p for p in creds.values() if p in done.stdout + done.stderr]
    cluster = natscluster.NatsCluster.provisioned(work, auth).start()
    try:
        yield auth, creds, cluster, specs
    finally:
        cluster.stop()


def test_plugs_list_every_gateway(provisioned):
    auth, creds, cluster, specs = provisioned
    with open(os.path.join(auth, "nodes", "plug-a", "config.json")) as f:
        broker = json.load(f)["broker"]
    assert broker["host"] == ["127.0.0.1:%d" % p for p in cluster.mqtt_ports]
    assert (broker["user"], broker["password"], broker["ca"]) == ("plug-a", creds["plug-a"],
                                                                 "ca.crt")
    for i in range(3):
        assert oct(os.stat(os.path.join(auth, "nats-%d.conf" % (i + 1))).st_mode & 0o777) \
            == "0o600"


def test_a_plug_reaches_only_its_own_topics(provisioned):
    """plug-a, on node 1, tries plug-b's status, relay and acks; plug-b (node 3) and the
    collector (node 2) see none of it, and plug-a sees no ack meant for plug-b, while its own
    status (sent after) and plug-b's ack arrive."""
    auth, creds, cluster, _ = provisioned
    ports = cluster.mqtt_ports
    collector = Login(auth, ports[1], "wattlog-collector", creds["wattlog-collector"])
    plug_b = Login(auth, ports[2], "plug-b", creds["plug-b"])
    plug_a = Login(auth, ports[0], "plug-a", creds["plug-a"])
    try:
        for login in (collector, plug_b, plug_a):
            wait_until("the login", lambda: login.connected or login.refused, 60)
            assert login.connected, login.refused
        collector.subscribe("wattlog/+/status")
        for leaf in ("relay/set", "cmd", "ack"):  # as the firmware: one topic at a time
            plug_b.subscribe("wattlog/plug-b/" + leaf)
        plug_a.subscribe("wattlog/plug-b/ack")
        plug_a.subscribe("wattlog/plug-a/ack")
        for topic in ("wattlog/plug-b/status", "wattlog/plug-b/relay/set", "wattlog/plug-b/ack",
                      "wattlog/plug-b/cmd"):
            plug_a.client.publish(topic, b"forged", qos=1)
        plug_a.client.publish("wattlog/plug-a/status", b"marker", qos=1)
        collector.client.publish("wattlog/plug-b/ack", b"for-b", qos=1)
        collector.client.publish("wattlog/plug-a/ack", b"for-a", qos=1)
        wait_until("plug-a's own status at the collector",
                   lambda: ("wattlog/plug-a/status", b"marker") in collector.got, 30)
        wait_until("plug-b's ack at plug-b", lambda: ("wattlog/plug-b/ack", b"for-b")
                   in plug_b.got, 30)
        wait_until("plug-a's ack at plug-a", lambda: ("wattlog/plug-a/ack", b"for-a")
                   in plug_a.got, 30)
        assert [m for m in collector.got + plug_b.got if m[1] == b"forged"] == []
        assert ("wattlog/plug-b/ack", b"for-b") not in plug_a.got
    finally:
        for login in (collector, plug_b, plug_a):
            login.close()


def test_anonymous_wrong_password_and_plain_text_are_refused(provisioned):
    auth, creds, cluster, _ = provisioned
    tries = {"anonymous": Login(auth, cluster.mqtt_ports[0], None, None),
             "a wrong password": Login(auth, cluster.mqtt_ports[1], "plug-a", "not-it"),
             "plain text": Login(auth, cluster.mqtt_ports[2], "plug-a", creds["plug-a"],
                                 tls=False)}
    try:
        for what, login in tries.items():
            wait_until("%s refused" % what, lambda: login.connected or login.refused or
                       login.dropped >= 3, 60)
            assert not login.connected, what
    finally:
        for login in tries.values():
            login.close()

    async def nats_login(**kw):
        import nats
        from nats.errors import Error as NatsError
        try:
            nc = await nats.connect(cluster.nats_urls[0], connect_timeout=5,
                                    allow_reconnect=False, **kw)
        except (NatsError, OSError) as e:
            return str(e)
        await nc.close()
        return None
    assert "Authorization" in asyncio.run(nats_login())
    assert "Authorization" in asyncio.run(nats_login(user="plug-a", password=creds["plug-a"]))
    assert asyncio.run(nats_login(user="wattlog-collector",
                                  password=creds["wattlog-collector"])) is None
