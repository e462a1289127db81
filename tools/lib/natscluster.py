"""natscluster.py - a private NATS JetStream cluster (Debian's nats-server) on loopback ports,
for the cluster's tests, benches and tools/cluster, configured as `wattlog provision
--cluster` configures one (host/wattlog/fleet/natsconf.py): each node with its MQTT gateway,
the users and ACL of a provisioned directory, the partition mapping.

    with NatsCluster(work, auth_dir, creds, nodes=3, partitions=8) as c:
        c.mqtt_ports, c.nats_urls        # where plugs and collectors connect
    NatsCluster.provisioned(work, auth_dir)   # the nodes `wattlog provision --cluster` wrote
        c.stop(1); c.start(1)            # one node away and back (same files, same ports)

Each node logs to <work>/nats-<i>.log; start() waits until every node listens and the cluster
has a JetStream meta leader (a stream made before that fails).
"""

import json
import os
import signal
import socket
import subprocess
import time

from broker import free_port, wait_for_port

START_S = 30


def _hashed(password):
    import bcrypt
    from wattlog.fleet.natsconf import BCRYPT_COST
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_COST)).decode()


class NatsCluster:
    def __init__(self, work, auth_dir, creds, nodes=3, partitions=8, base="wattlog",
                 extra_users=()):
        """auth_dir: a provisioned directory (its acl); creds: {user: password}; extra_users:
        users allowed everything (a test's watchers)."""
        from wattlog.fleet.natsconf import node_config, users_block
        from wattlog.fleet.provision import COLLECTOR
        self.dir = os.path.join(str(work), "nats")
        os.makedirs(self.dir, exist_ok=True)
        self.peers = [("127.0.0.1", free_port(), free_port(), free_port()) for _ in range(nodes)]
        with open(os.path.join(auth_dir, "acl")) as f:
            acl = f.read()
        acl += "".join("\nuser %s\ntopic readwrite #\n" % u for u in extra_users)
        users = users_block(creds, acl, base, COLLECTOR, _hashed)
        self.confs = []
        for i in range(nodes):
            path = os.path.join(self.dir, "nats-%d.conf" % (i + 1))
            with open(path, "w") as f:
                f.write(node_config(i, self.peers, users, partitions,
                                    os.path.join(self.dir, "js-%d" % (i + 1)), base))
            self.confs.append(path)
        self.procs = [None] * nodes
        self.partitions = partitions

    @classmethod
    def provisioned(cls, work, auth_dir):
        """The cluster as `wattlog provision --cluster` wrote it in auth_dir: its nats-<i>.conf
        run as they are, its nodes' ports from provision.json."""
        with open(os.path.join(auth_dir, "provision.json")) as f:
            saved = json.load(f)
        self = cls.__new__(cls)
        self.dir = os.path.join(str(work), "nats")
        os.makedirs(self.dir, exist_ok=True)
        self.peers = [tuple([spec.split(":")[0]] + [int(p) for p in spec.split(":")[1:]])
                      for spec in saved["cluster"]]
        self.confs = [os.path.join(auth_dir, "nats-%d.conf" % (i + 1))
                      for i in range(len(self.peers))]
        self.procs = [None] * len(self.peers)
        self.partitions = saved["partitions"]
        return self

    @property
    def mqtt_ports(self):
        return [p[1] for p in self.peers]

    @property
    def nats_urls(self):
        return ["nats://127.0.0.1:%d" % p[2] for p in self.peers]

    def start(self, i=None):
        for k in range(len(self.peers)) if i is None else [i]:
            log = open(os.path.join(self.dir, "nats-%d.log" % (k + 1)), "a")
            self.procs[k] = subprocess.Popen(["nats-server", "-c", self.confs[k]], stdout=log,
                                             stderr=subprocess.STDOUT, start_new_session=True,
                                             preexec_fn=getattr(self, "preexec", None))
            log.close()
        for k in range(len(self.peers)) if i is None else [i]:
            wait_for_port(self.peers[k][1], START_S, self.procs[k])
            wait_for_port(self.peers[k][2], START_S, self.procs[k])
        self._wait_meta_leader()
        return self

    def _wait_meta_leader(self):
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            for k, proc in enumerate(self.procs):
                if proc is None or proc.poll() is not None:
                    continue
                with open(os.path.join(self.dir, "nats-%d.log" % (k + 1))) as f:
                    text = f.read()
                if "JetStream cluster new metadata leader" in text or \
                        "Self is new JetStream cluster metadata leader" in text:
                    return
            time.sleep(0.1)
        raise RuntimeError("the NATS cluster has no JetStream leader after %d s" % START_S)

    def stop(self, i=None):
        for k in range(len(self.peers)) if i is None else [i]:
            proc = self.procs[k]
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            self.procs[k] = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def reachable(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False
