"""mqttsock.py - bounds every socket operation umqtt.simple makes, and builds its client for
either umqtt.simple constructor (old: ssl=True, ssl_params; current: an SSLContext).

Why: umqtt.simple opens its socket inside connect() with no timeout (a broker that accepts
the TCP connection and never answers CONNACK blocks it forever), and its wait_msg() calls
setblocking(True) after the first byte of every packet, so the rest of a packet is read with
no timeout either. install() points umqtt.simple's `socket` module name at this module, so
connect() gets a BoundedSocket: a thin wrapper whose setblocking(True) means "block for at
most TIMEOUT_S", so no read or write can hang the node's loop (the watchdog would reset it).

Only the methods umqtt.simple and link.py call are forwarded. Calls through the wrapper
allocate nothing (MicroPython's method calls on an attribute do not make bound methods).
TLS: with the current umqtt.simple, its wrap_socket call reaches TLSWrap, which wraps the
raw socket and keeps the wrapper. With the old one (ssl=True), ussl wraps the raw socket
itself and the TLS socket keeps only the timeout set at creation.
"""

import socket as _socket
import sys

from micropython import const

TIMEOUT_S = const(5)
_tls = False  # the old API's ussl cannot wrap a Python object: hand it a raw socket


class BoundedSocket:
    def __init__(self, raw):
        self.raw = raw
        raw.settimeout(TIMEOUT_S)

    def connect(self, addr):
        self.raw.connect(addr)

    def setblocking(self, flag):
        self.raw.settimeout(TIMEOUT_S if flag else 0)

    def settimeout(self, t):
        self.raw.settimeout(t)

    def read(self, n):
        return self.raw.read(n)

    def readinto(self, buf, n):
        return self.raw.readinto(buf, n)

    def write(self, buf, a=-1, b=-1):
        """As a MicroPython stream: write(buf), write(buf, max_len), write(buf, off, max_len)."""
        if b >= 0:
            return self.raw.write(buf, a, b)
        if a >= 0:
            return self.raw.write(buf, a)
        return self.raw.write(buf)

    def close(self):
        self.raw.close()


def socket():
    raw = _socket.socket()
    if _tls:
        raw.settimeout(TIMEOUT_S)
        return raw
    return BoundedSocket(raw)


def getaddrinfo(host, port):
    return _socket.getaddrinfo(host, port)


class TLSWrap:
    """What the current umqtt.simple expects in ssl=: an object with wrap_socket()."""

    def __init__(self, context):
        self.context = context

    def wrap_socket(self, sock, server_hostname=None):
        sock.raw = self.context.wrap_socket(sock.raw, server_hostname=server_hostname)
        return sock


def install():
    import umqtt.simple
    umqtt.simple.socket = sys.modules[__name__]


def client(MQTTClient, client_id, broker, keepalive_s):
    """An MQTTClient for broker {host, port, user, password, ca}: TLS when `ca` (a PEM CA
    certificate file on the node) is set, verifying the broker's certificate against it."""
    global _tls
    user = broker.get("user") or None
    password = broker.get("password") or None
    ca = broker.get("ca")
    if not ca:
        return MQTTClient(client_id, broker["host"], port=broker["port"], user=user,
                          password=password, keepalive=keepalive_s)
    with open(ca, "rb") as f:
        cadata = f.read()
    try:  # the old constructor (umqtt.simple <= 1.3.4)
        c = MQTTClient(client_id, broker["host"], port=broker["port"], user=user,
                       password=password, keepalive=keepalive_s, ssl=True,
                       ssl_params={"cadata": cadata, "cert_reqs": 2,
                                   "server_hostname": broker["host"]})
        _tls = True
        return c
    except TypeError:  # the current one: an SSLContext-like object
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cadata=cadata)
        return MQTTClient(client_id, broker["host"], port=broker["port"], user=user,
                          password=password, keepalive=keepalive_s, ssl=TLSWrap(ctx))
