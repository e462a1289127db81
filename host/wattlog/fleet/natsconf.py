"""natsconf.py - the cluster's broker: a NATS JetStream cluster with its MQTT gateway
(nats-server 2.9, Debian's), configured from the same users and ACL `wattlog provision`
writes for mosquitto, so a plug's rights are the same on one Pi and in a cluster.

    text = node_config(i, peers, users, acl_text, partitions, store_dir)   # nats-<i>.conf
    READINGS_STREAM, partition_of(node, partitions), subject(topic)

One config per node: server_name, the client listener (the collectors' NATS connections), the
cluster routes to the other nodes, the MQTT gateway (the plugs, Home Assistant, the operator)
with stream_replicas set to the number of nodes (left out, nats-server counts the peers it
knows at start-up, may make replica-2 streams, and a node stop then times out every QoS 1
publish: REFERENCE.md), JetStream's store, and one account holding every user.

Topics and subjects: MQTT topic wattlog/plug-a/readings is NATS subject wattlog.plug-a.readings
(/ -> ., + -> *, # -> >). The account maps each plug's readings to a partition,
    wattlog.*.readings -> wlpart.{{partition(P,1)}}.wattlog.{{wildcard(1)}}.readings
(partition_of() computes the same: FNV-1a of the node id, modulo P), and the stream
READINGS_STREAM keeps wlpart.> on every node (work-queue retention: a message goes once it
is acknowledged, after its commit). A permission is checked against the subject as mapped, so
a plug may publish wlpart.*.wattlog.<itself>.readings and nothing else there.

Permissions come from the mosquitto ACL (provision.py's), user by user: `topic write T` and
`readwrite` allow publishing T's subject, `read` and `readwrite` subscribing to it.
wattlog-collector also gets what a JetStream consumer of READINGS_STREAM needs, and no more.
Every user but wattlog-collector may connect through the MQTT gateway only
(allowed_connection_types): the gateway delivers a QoS 1 subscription through internal
subjects ($MQTT.sub.>) its users must be allowed to read, which a plain NATS client could
otherwise read for other sessions.
Passwords are bcrypt hashes (cost 4: they are 144-bit random tokens, which no cost would make
guessable, and a thousand plugs log in at once after an outage).
"""

import re

READINGS_STREAM = "WLREADINGS"
PARTITION_PREFIX = "wlpart"
BCRYPT_COST = 4
ACCOUNT = "WATTLOG"
_JS_CONSUMER = ("$JS.API.INFO", "$JS.API.STREAM.INFO.%s" % READINGS_STREAM,
                "$JS.API.STREAM.CREATE.%s" % READINGS_STREAM,
                "$JS.API.STREAM.UPDATE.%s" % READINGS_STREAM,
                "$JS.API.CONSUMER.CREATE.%s.>" % READINGS_STREAM,
                "$JS.API.CONSUMER.DURABLE.CREATE.%s.>" % READINGS_STREAM,
                "$JS.API.CONSUMER.INFO.%s.>" % READINGS_STREAM,
                "$JS.API.CONSUMER.MSG.NEXT.%s.>" % READINGS_STREAM,
                "$JS.ACK.%s.>" % READINGS_STREAM)


def subject(topic):
    """The NATS subject of an MQTT topic (or topic filter)."""
    return ".".join({"+": "*", "#": ">"}.get(level, level) for level in topic.split("/"))


def fnv1a(text):
    h = 0x811C9DC5
    for byte in text.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def partition_of(node, partitions):
    """The partition nats-server maps a node's readings to ({{partition(P,1)}})."""
    return fnv1a(node) % partitions


def acl_rules(acl_text):
    """{user: [(access, topic)]} from a mosquitto ACL file's text (user blocks only)."""
    rules, user = {}, None
    for line in acl_text.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == "user":
            user = words[1]
            rules.setdefault(user, [])
        elif len(words) == 3 and words[0] == "topic" and user is not None:
            rules[user].append((words[1], words[2]))
    return rules


def permissions(user, rules, base, collector):
    """(publish allow, subscribe allow) subjects for one user."""
    pub, sub = [], []
    for access, topic in rules:
        s = subject(topic)
        if access in ("write", "readwrite"):
            pub.append(s)
            m = re.fullmatch(r"%s\.([^.]+)\.readings" % re.escape(base), s)
            if m:  # the readings as mapped to their partition (the account's mapping)
                pub.append("%s.*.%s" % (PARTITION_PREFIX, s))
        if access in ("read", "readwrite"):
            sub.append(s)
    if sub:  # the gateway delivers a QoS 1 subscription through a consumer of its own
        sub.append("$MQTT.sub.>")
    if user == collector:
        pub += list(_JS_CONSUMER)
        sub.append("_INBOX.>")
    return pub, sub


def _quoted(items):
    return "[%s]" % ", ".join('"%s"' % i for i in items)


def users_block(creds, acl_text, base, collector, hashed):
    """The account's users: each with its bcrypt hash (hashed(password)) and permissions."""
    rules = acl_rules(acl_text)
    out = []
    for user in sorted(rules):
        if user not in creds:
            continue
        pub, sub = permissions(user, rules[user], base, collector)
        kinds = ["STANDARD", "MQTT"] if user == collector else ["MQTT"]
        out.append('      {user: "%s", password: "%s", allowed_connection_types: %s, '
                   'permissions: {publish: {allow: %s}, subscribe: {allow: %s}}}'
                   % (user, hashed(creds[user]), _quoted(kinds), _quoted(pub), _quoted(sub)))
    return "\n".join(out)


def node_config(i, peers, users, partitions, store_dir, base="wattlog", tls=None):
    """nats-<i>.conf for node i of `peers` [(host, mqtt_port, client_port, route_port)]; tls:
    (cert, key, ca) paths for the MQTT gateway, or None."""
    host, mqtt_port, client_port, route_port = peers[i]
    routes = ", ".join('"nats-route://%s:%d"' % (h, r) for j, (h, _, _, r) in enumerate(peers)
                       if j != i)
    mqtt_tls = ("\n  tls { cert_file: \"%s\", key_file: \"%s\", ca_file: \"%s\" }" % tls
                if tls else "")
    return """# wattlog provision --cluster: node %(n)d of %(of)d (fleet/natsconf.py)
server_name: wattlog-%(n)d
listen: "%(host)s:%(client)d"
jetstream { store_dir: "%(store)s" }
cluster { name: wattlog, listen: "%(host)s:%(route)d", routes: [%(routes)s] }
mqtt { listen: "%(host)s:%(mqtt)d", stream_replicas: %(replicas)d%(tls)s }
accounts {
  %(account)s {
    jetstream: enabled
    mappings = { "%(base)s.*.readings": "%(prefix)s.{{partition(%(p)d,1)}}.%(base)s.{{wildcard(1)}}.readings" }
    users: [
%(users)s
    ]
  }
}
""" % {"n": i + 1, "of": len(peers), "host": host, "client": client_port, "store": store_dir,
       "route": route_port, "routes": routes, "mqtt": mqtt_port, "replicas": len(peers),
       "tls": mqtt_tls, "account": ACCOUNT, "base": base, "prefix": PARTITION_PREFIX,
       "p": partitions, "users": users}
