"""rawplugs.py - a thousand plugs' MQTT sessions on plain sockets in one thread, for benches
that must load a broker and the collectors harder than Python MQTT clients could (paho spends
more CPU per message than the collector does): each plug logs in as its own node user,
subscribes to its ack topic (QoS 0, as the firmware), publishes pre-encoded `readings`
batches at QoS 1 (wattnode.wire, 3 records of 10 s: a plug's 30 s batch) and reads its
PUBACKs and acks. An ack {boot, seq} covers every batch below seq: the time from a batch's
write to the first ack covering it is its ack latency.

    plugs = RawPlugs(creds, nodes, ports, start)      # ports: the gateways, plugs spread over them
    connect_s = plugs.connect()                        # until every CONNACK and SUBACK
    elapsed_s = plugs.run(batches, rate=None)          # None: as fast as the broker takes them
    plugs.latencies_s                                  # one per batch
    plugs.acks()                                       # acks of this round received
"""

import random
import selectors
import socket
import time

from wattnode import wire

RECORDS = 3
INTERVAL_S = 10


def _string(b):
    return len(b).to_bytes(2, "big") + b


def _packet(first, body):
    n, head = len(body), bytearray([first])
    while True:
        byte, n = n & 0x7F, n >> 7
        head.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(head) + body


class Plug:
    def __init__(self, node, password, port, start):
        self.node, self.password, self.port, self.start = node, password, port, start
        self.sock, self.inbuf, self.out = None, b"", b""
        self.connacked = self.subacked = False
        self.boot, self.acked, self.sent_at, self.pubacks, self.acks = 0, 0, [], 0, 0

    def batches(self, first, count):
        """The PUBLISH packets of batches first .. first + count - 1 of a new boot."""
        self.boot = random.getrandbits(31) | 1
        self.acked, self.sent_at, self.first, self.acks = 0, [], first, 0
        topic = _string(("wattlog/%s/readings" % self.node).encode())
        out = []
        for b in range(count):
            buf = bytearray(wire.HEADER_SIZE + wire.RECORD_SIZE * RECORDS)
            seq = b * RECORDS
            wire.pack_header(buf, 0, RECORDS, INTERVAL_S, self.boot, seq, 0, seq)
            for k in range(RECORDS):
                slot = first + seq + k
                wire.pack_record(buf, wire.HEADER_SIZE + k * wire.RECORD_SIZE,
                                 self.start + INTERVAL_S * slot - wire.EPOCH_UNIX,
                                 (slot % 1000) * 10, slot, 23000, 500)
            out.append(_packet(0x32, topic + (b % 65535 + 1).to_bytes(2, "big") + bytes(buf)))
        return out

    def take(self, data, now, latencies):
        """Read what came: CONNACK, SUBACK, PUBACKs, acks (PUBLISH)."""
        buf = self.inbuf + data
        i = 0
        while len(buf) - i >= 2:
            n, shift, j = 0, 0, i + 1
            while j < len(buf) and buf[j] & 0x80:  # the remaining length, 7 bits a byte
                n |= (buf[j] & 0x7F) << shift
                shift, j = shift + 7, j + 1
            if j >= len(buf) or len(buf) - j - 1 < (n | buf[j] << shift):
                break
            n |= buf[j] << shift
            first, body = buf[i], buf[j + 1:j + 1 + n]
            i = j + 1 + n
            kind = first >> 4
            if kind == 2:
                if body[1] != 0:
                    raise SystemExit("the broker refused %s (%d)" % (self.node, body[1]))
                self.connacked = True
            elif kind == 9:
                self.subacked = True
            elif kind == 4:
                self.pubacks += 1
            elif kind == 3:  # an ack: topic, a packet id at QoS 1 or 2, the payload
                skip = 2 + int.from_bytes(body[:2], "big") + (2 if first & 0x06 else 0)
                self._ack(body[skip:], now, latencies)
        self.inbuf = buf[i:]

    def _ack(self, payload, now, latencies):
        try:
            kind, ack = wire.parse_ack(payload)
        except wire.AckError:
            return
        if kind != wire.ACK or ack["boot"] != self.boot:
            return
        self.acks += 1
        covered = ack["seq"] // RECORDS
        while self.acked < covered and self.acked < len(self.sent_at):
            latencies.append(now - self.sent_at[self.acked])
            self.acked += 1


class RawPlugs:
    def __init__(self, creds, nodes, ports, start):
        self.plugs = [Plug(n, creds[n], ports[i % len(ports)], start)
                      for i, n in enumerate(nodes)]
        self.sel = selectors.DefaultSelector()
        self.latencies_s = []
        self.round = 0

    def connect(self, timeout_s=120):
        """Every plug's session, logged in and subscribed; returns the seconds it took."""
        t0 = time.monotonic()
        for p in self.plugs:
            p.sock = socket.create_connection(("127.0.0.1", p.port))
            p.sock.setblocking(False)
            connect = (_string(b"MQTT") + bytes([4, 0xC2]) + (300).to_bytes(2, "big")
                       + _string(p.node.encode()) + _string(p.node.encode())
                       + _string(p.password.encode()))
            p.out = _packet(0x10, connect) + _packet(
                0x82, (1).to_bytes(2, "big") + _string(("wattlog/%s/ack" % p.node).encode())
                + b"\x00")
            self.sel.register(p.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, p)
        self._pump(lambda: all(p.subacked for p in self.plugs), t0 + timeout_s)
        return time.monotonic() - t0

    def _pump(self, done, deadline, feed=None):
        while not done():
            if time.monotonic() > deadline:
                raise SystemExit("rawplugs: not done in time (%d of %d plugs acked all)"
                                 % (sum(p.acked == len(p.sent_at) for p in self.plugs),
                                    len(self.plugs)))
            if feed is not None:
                feed()
            for key, events in self.sel.select(timeout=0.005):
                p = key.data
                if events & selectors.EVENT_READ:
                    try:
                        data = p.sock.recv(262144)
                    except BlockingIOError:
                        data = None
                    if data == b"":
                        raise SystemExit("the broker closed %s's connection" % p.node)
                    if data:
                        p.take(data, time.monotonic(), self.latencies_s)
                if events & selectors.EVENT_WRITE and p.out:
                    try:
                        sent = p.sock.send(p.out)
                    except BlockingIOError:
                        continue
                    p.out = p.out[sent:]
                self.sel.modify(p.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE
                                                                if p.out else 0), p)

    def run(self, batches, rate=None, timeout_s=600):
        """`batches` batches from each plug (a new boot; slots after the last round's), at
        `rate` batches/s in all (None: as fast as they are taken); returns the seconds from
        the first write to the last plug's last ack."""
        packets = [p.batches(self.round * batches * RECORDS, batches) for p in self.plugs]
        self.round += 1
        self.latencies_s = []
        order = [(b, k) for b in range(batches) for k in range(len(self.plugs))]
        t0 = time.monotonic()
        state = {"next": 0}

        def feed():
            now = time.monotonic()
            due = len(order) if rate is None else min(len(order), int((now - t0) * rate) + 1)
            while state["next"] < due:
                b, k = order[state["next"]]
                p = self.plugs[k]
                p.out += packets[k][b]
                p.sent_at.append(now)
                self.sel.modify(p.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, p)
                state["next"] += 1
        self._pump(lambda: state["next"] == len(order) and all(
            p.acked == batches for p in self.plugs), t0 + timeout_s, feed)
        return time.monotonic() - t0

    def acks(self):
        return sum(p.acks for p in self.plugs)

    def close(self):
        for p in self.plugs:
            self.sel.unregister(p.sock)
            p.sock.close()
        self.sel.close()
