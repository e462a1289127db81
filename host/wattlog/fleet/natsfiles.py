"""natsfiles.py - `wattlog provision --cluster`: the files of a 3-node NATS JetStream cluster
with its MQTT gateway (README "Past one Pi"), beside the single Pi's (mosquittofiles.py):

  nats-<i>.conf        node i's config (natsconf.py): /etc/nats-server.conf on that machine
                       (Debian's nats-server runs it as the user nats), its JetStream files in
                       <nats store>/wattlog-<i>. The users and their
                       permissions are the mosquitto ACL's (logins.py), the passwords bcrypt
                       hashes; no user without a password, so anonymous clients are refused
                       on every port; with --tls the MQTT gateway serves TLS only, with the
                       certificate tls.py signs for every node's address (0600: copy each to
                       its node)
  wattlog-cluster.toml a cluster collector's settings (made once, then yours): the NATS nodes,
                       the gateways, the partitions, the shared PostgreSQL
and each plug's config.json gets its broker's host as the list of the gateways' "host:port",
tried in turn.

A node is given as HOST[:MQTT[:NATS[:ROUTE]]]: its MQTT gateway's port (default the broker's
port, 1883 or 8883 with --tls), its client port for the collectors (4222) and its route port
for the other nodes (6222). Three machines need only their addresses; three nodes on one
machine (tools/cluster, the tests) give every port.
"""

import os

from wattlog.fleet.collectorconf import broker_url, collector_config
from wattlog.fleet.logins import COLLECTOR, ProvisionError, create_once
from wattlog.fleet.natsconf import BCRYPT_COST, node_config, users_block
from wattlog.store import durable

NATS_CLIENT_PORT = 4222
NATS_ROUTE_PORT = 6222
CLUSTER_CONFIG_FILE = "wattlog-cluster.toml"
DEFAULT_STORE = "postgresql://wattlog@127.0.0.1:5432/wattlog"


def parse_nodes(text, mqtt_port):
    """[(host, mqtt, client, route)] from "HOST[:MQTT[:NATS[:ROUTE]]],...", or ProvisionError."""
    entries = [e.strip() for e in (text.split(",") if isinstance(text, str) else text)]
    peers = []
    for entry in entries:
        words = entry.split(":")
        ports = words[1:]
        if not words[0] or len(ports) > 3 or not all(p.isdigit() and 0 < int(p) < 65536
                                                        for p in ports):
            raise ProvisionError("--cluster %r: each node is HOST[:MQTT[:NATS[:ROUTE]]], e.g. "
                                 "10.0.0.1,10.0.0.2,10.0.0.3" % entry)
        given = [int(p) for p in ports]
        defaults = [mqtt_port, NATS_CLIENT_PORT, NATS_ROUTE_PORT]
        peers.append((words[0],) + tuple(given + defaults[len(given):]))
    if len(peers) < 3 or len(set(peers)) != len(peers):
        raise ProvisionError("--cluster needs three or more different nodes (a JetStream "
                             "cluster of fewer cannot lose one), got %d" % len(set(peers)))
    return peers


def node_spec(peer):
    """HOST:MQTT:NATS:ROUTE, as provision.json remembers a node."""
    return "%s:%d:%d:%d" % peer


def gateways(peers):
    """The MQTT gateways as a plug's config.json lists them: "host:port" each."""
    return ["%s:%d" % (host, mqtt) for host, mqtt, _, _ in peers]


def _hashed(password):
    import bcrypt
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_COST)).decode()


def write_cluster(directory, peers, creds, acl, partitions, store_dir, base, tls, progress):
    """nats-<i>.conf for every node (0600) and, once, wattlog-cluster.toml."""
    progress("hashing %d passwords for the NATS cluster" % len(creds))
    users = users_block(creds, acl, base, COLLECTOR, _hashed)
    d = os.path.abspath(directory)
    files = tuple(os.path.join(d, n) for n in ("server.crt", "server.key", "ca.crt"))
    for i in range(len(peers)):
        text = node_config(i, peers, users, partitions,
                           os.path.join(store_dir, "wattlog-%d" % (i + 1)), base,
                           tls=files if tls else None)
        durable.write_bytes(os.path.join(directory, "nats-%d.conf" % (i + 1)), text.encode(),
                            mode=0o600)
    path = os.path.join(directory, CLUSTER_CONFIG_FILE)
    urls = [broker_url(COLLECTOR, host, mqtt, tls) for host, mqtt, _, _ in peers]
    top = ('store = "%s"  # the shared PostgreSQL: set its address\n'
           'store_password_file = "db.password"  # its password (0600), made by you\n'
           % DEFAULT_STORE)
    table = ("\n[cluster]                    # README \"Past one Pi\"\nnats = [%s]\nmqtt = [%s]\n"
             "partitions = %d              # as nats-<i>.conf maps them: the same everywhere\n"
             "lease = \"10s\"                # silent this long, a collector's partitions move\n"
             % (", ".join('"nats://%s:%d"' % (h, c) for h, _, c, _ in peers),
                ", ".join('"%s"' % u for u in urls), partitions))
    text = collector_config(path, urls[0], tls, base, top, table)
    if create_once(path, text.encode()):
        progress("a cluster collector's settings in %s: set its store" % path)
