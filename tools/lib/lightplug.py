"""lightplug.py - many light plugs in one CPython process, for the cluster's tests and benches:
each speaks the plug's protocol (wattnode.wire's batches and acks, the firmware's MQTT topics
and will) with the rules the firmware keeps, and nothing else (no meter, no clock of its own):

  - it logs in as its own node user (wattlog provision's), says "online" (retained, its will
    "offline"), and publishes `readings` batches of its records at QoS 1;
  - it keeps every record until an ack {boot, seq} covers it (acks are retained: one that
    arrives at a reconnect frees what it covers), sends again from `resend` when asked, and
    sends again everything not covered after RESEND_S (the firmware: three commit intervals);
  - a reconnect sends again everything still held (its batches carry `held`: the oldest);
    a lost connection is made again to the next gateway in turn (the firmware's host list);
  - the clock answers it hears are kept (`clocks`), for a test to read.

Each LightPlugs is a new boot of its plugs (a boot number of its own): a round of readings
after another is not taken for one already acknowledged.

    plugs = LightPlugs(creds, ["plug-0", ...], mqtt_ports, start, readings=60, batch=3)
    plugs.start(); plugs.wait_acked(timeout_s=120); plugs.stop()
    plugs.produced(node) / plugs.acked(node)   # what was made / what the acks cover

Record k of a plug is slot start + 10 k with power (k % 1000) W, energy k Wh: what was stored
can be checked slot by slot. Each plug has one paho client (its own network thread); a few
hundred fit one process.
"""

import gc
import json
import random
import threading
import time

import paho.mqtt.client as mqtt

from wattnode import wire
from wattlog.mqtt import close

RESEND_S = 5.0
INTERVAL_S = 10


class LightPlug:
    def __init__(self, node, password, ports, start, readings, batch, base="wattlog"):
        self.node, self.base = node, base
        self.start, self.readings, self.batch = start, readings, batch
        self.boot = random.getrandbits(31) | 1
        self.made = 0          # records produced so far (seq = index)
        self.acked = 0         # records below this are freed
        self.sent = 0          # records handed to the broker so far
        self.sent_at = 0.0
        self.lock = threading.Lock()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=node)
        self.client.username_pw_set(node, password)
        self.client.will_set("%s/%s/status" % (base, node), b"offline", qos=1, retain=True)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.on_disconnect = self._on_disconnect
        self.client.on_publish = self._on_publish
        self.pubacks = 0       # PUBACKs received: the broker took a batch
        self.clocks = []       # the clock answers heard: {"time", "energy_wh", ...}
        self.ports = ports  # the gateways, the first one's first
        self.port = ports[0]

    def topic(self, leaf):
        return "%s/%s/%s" % (self.base, self.node, leaf)

    def _on_connect(self, client, userdata, flags, rc, properties):
        if rc.is_failure:
            return
        client.subscribe(self.topic("ack"), 0)  # as the firmware: QoS 0
        client.publish(self.topic("status"), b"online", qos=1, retain=True)
        with self.lock:
            self.sent = self.acked  # after a reconnect: everything held, again

    def _on_disconnect(self, client, userdata, flags, rc, properties):
        # the next gateway at the next attempt (connect_async only sets where to)
        self.port = self.ports[(self.ports.index(self.port) + 1) % len(self.ports)]
        client.connect_async("127.0.0.1", self.port, keepalive=30)

    def _on_publish(self, client, userdata, mid, rc, properties):
        self.pubacks += 1

    def _on_message(self, client, userdata, msg):
        try:
            kind, ack = wire.parse_ack(msg.payload)
        except wire.AckError:
            return
        with self.lock:
            if kind == wire.ACK and ack["boot"] == self.boot:
                self.acked = max(self.acked, min(ack["seq"], self.made))
                self.sent = max(self.sent, self.acked)
            elif kind == wire.RESEND and ack["boot"] == self.boot:
                self.sent = min(self.sent, max(ack["resend"], self.acked))
            elif kind == wire.CLOCK:  # kept, not acted on: no clock or energy of its own
                self.clocks.append(ack)

    def record(self, buf, off, k):
        wire.pack_record(buf, off, self.start + INTERVAL_S * k - wire.EPOCH_UNIX,
                         (k % 1000) * 10, k, 23000, 500)

    def step(self, now):
        """Make what is due, send what is unsent (a batch at a time), and again what no ack
        covered in RESEND_S."""
        with self.lock:
            if self.made < self.readings:
                self.made = min(self.made + self.batch, self.readings)
            if self.sent > self.acked and now - self.sent_at > RESEND_S:
                self.sent = self.acked
            todo = []
            while self.sent < self.made:
                n = min(self.batch, self.made - self.sent)
                todo.append((self.sent, n))
                self.sent += n
                self.sent_at = now
            held = self.acked
        for seq, n in todo:
            buf = bytearray(wire.HEADER_SIZE + wire.RECORD_SIZE * n)
            wire.pack_header(buf, 0, n, INTERVAL_S, self.boot, seq, 0, held)
            for i in range(n):
                self.record(buf, wire.HEADER_SIZE + wire.RECORD_SIZE * i, seq + i)
            self.client.publish(self.topic("readings"), bytes(buf), qos=1)


class LightPlugs:
    def __init__(self, creds, nodes, ports, start, readings=60, batch=3, step_s=0.05):
        """creds: {user: password}; ports: MQTT ports, the plugs spread over them in turn."""
        # paho closes a client's socket pair (made by loop_start) only when the client is
        # collected, and its select() takes no descriptor above 1023: the clients of rounds
        # stopped before (reference cycles with their threads) go now, before three new
        # descriptors a plug are made
        gc.collect()
        ports = list(ports)
        self.plugs = {n: LightPlug(n, creds[n], ports[i % len(ports):] + ports[:i % len(ports)],
                                   start, readings, batch) for i, n in enumerate(nodes)}
        self.step_s = step_s
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        for p in self.plugs.values():
            p.client.connect_async("127.0.0.1", p.port, keepalive=30)
            p.client.loop_start()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self.step_s):
            now = time.monotonic()
            for p in self.plugs.values():
                if p.client.is_connected():
                    p.step(now)

    def pubacks(self):
        """PUBACKs received by all the plugs so far."""
        return sum(p.pubacks for p in self.plugs.values())

    def produced(self, node):
        return self.plugs[node].made

    def acked(self, node):
        return self.plugs[node].acked

    def done(self):
        return all(p.made == p.readings and p.acked == p.readings
                   for p in self.plugs.values())

    def wait_acked(self, timeout_s=120):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.done():
                return True
            time.sleep(0.2)
        behind = {n: (p.made, p.acked) for n, p in self.plugs.items()
                  if p.acked < p.readings}
        raise AssertionError("light plugs not all acknowledged: %s"
                             % json.dumps(dict(list(behind.items())[:10])))

    def stop(self):
        self._stop.set()
        if self._thread:
            self._thread.join(5)
        for p in self.plugs.values():
            p.client.on_disconnect = None
            close(p.client)
