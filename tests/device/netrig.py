"""netrig.py - the far end of a node's socket, for device tests: a loopback TCP connection
whose other end plays the broker, reads what the node wrote (whole MQTT packets, the payloads
of its PUBLISHes) and answers (PUBACKs, acks). Needs a socket: the 32-bit WebAssembly port has
none (rig.need_sockets() skips the test there)."""

import json
import select
import socket

from wattnode import wire

from rig import need_sockets

BOOT = 0x5EED  # the boot id Broker.batch() expects of the node's batches


def listener(ports=range(47100, 47200)):
    """A listening socket on the first free loopback port of `ports`: (socket, port). A port
    counts as free once it listens: with SO_REUSEADDR two sockets may bind one port (another
    test run beside this one, the same range), and only the first listen() takes it."""
    need_sockets()
    for port in ports:
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            srv.bind(socket.getaddrinfo("127.0.0.1", port)[0][-1])
            srv.listen(1)
            return srv, port
        except OSError:
            srv.close()
    raise OSError("no free TCP port in %r" % (ports,))


def free_udp_port(ports):
    """A loopback UDP port of `ports` no socket holds. The node's Broadlink server binds with
    SO_REUSEADDR, and two UDP sockets that both set it share a port on Linux, each datagram
    going to one of them: a test beside another test run (the same range) would then miss
    its own. A probe without it fails on a port held, and is closed before the test binds."""
    need_sockets()
    for port in ports:
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            probe.bind(socket.getaddrinfo("0.0.0.0", port)[0][-1])
            return port
        except OSError:
            continue
        finally:
            probe.close()
    raise OSError("no free UDP port in %r" % (ports,))


def loopback():
    """Both ends of a loopback TCP connection: (the node's, the broker's)."""
    srv, port = listener()
    client = socket.socket()
    client.connect(socket.getaddrinfo("127.0.0.1", port)[0][-1])
    server = srv.accept()[0]
    srv.close()
    return client, server


def read_exactly(sock, n):
    out = b""
    while len(out) < n:
        out += sock.read(n - len(out))
    return out


def packets(sock, wait_ms=300):
    """Every MQTT packet the node wrote, as (first byte, body), until none comes for wait_ms."""
    out = []
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    while poller.poll(wait_ms):
        first = sock.read(1)
        if not first:  # the node closed its socket
            break
        n = shift = 0
        while True:
            b = read_exactly(sock, 1)[0]
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        out.append((first[0], read_exactly(sock, n) if n else b""))
    return out


def publishes(pkts, topic):
    """Payloads of the PUBLISH packets on topic."""
    got = []
    for first, body in pkts:
        if first & 0xF0 == 0x30:
            tlen = body[0] << 8 | body[1]
            if body[2:2 + tlen] == topic:
                got.append(body[2 + tlen + (2 if first & 6 else 0):])
    return got


class Broker:
    """The far end of the node's socket."""

    def __init__(self, sock):
        self.sock = sock
        self.logs = []

    def publish(self):
        """The next PUBLISH from the node: (topic, packet id or None, payload). Log lines
        (QoS 0) are kept in self.logs and skipped."""
        while True:
            first = read_exactly(self.sock, 1)[0]
            n = shift = 0
            while True:
                b = read_exactly(self.sock, 1)[0]
                n |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            body = read_exactly(self.sock, n)
            tlen = body[0] << 8 | body[1]
            topic, rest = body[2:2 + tlen], body[2 + tlen:]
            if first & 6:
                return topic, rest[0] << 8 | rest[1], rest[2:]
            self.logs.append(rest)

    def batch(self):
        """The next batch: (seq, count, packet id)."""
        topic, pid, payload = self.publish()
        count, _, boot, seq, _, _ = wire.decode_header(payload)
        assert topic == b"wattlog/plug-1/readings" and boot == BOOT
        return seq, count, pid

    def puback(self, pid):
        self.sock.write(bytes((0x40, 2, pid >> 8, pid & 0xFF)))

    def ack(self, **fields):
        topic, payload = b"wattlog/plug-1/ack", json.dumps(fields).encode()
        n = 2 + len(topic) + len(payload)
        self.sock.write(bytes((0x30, n, 0, len(topic))) + topic + payload)
