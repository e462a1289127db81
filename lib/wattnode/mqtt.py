"""mqtt.py - the node's MQTT client: umqtt.simple's MQTTClient, subclassed where a plug's single
loop needs more, as micropython-lib's own umqtt.robust extends it. Nothing in umqtt.simple is
patched; nothing here is module state.
(About 390 lines: one client, umqtt.simple's, with what a plug's single loop needs of it: a non-
blocking publish from the ring, whole packets of any kind read in one place, bounded socket
operations.)

What umqtt.simple (1.3.4 here; a newer one is frozen into ESP32 firmware) does that a loop that
must never stall cannot use, and what the overrides do instead:
- connect() opens its socket with no timeout, and wait_msg() calls setblocking(True) after each
  packet's first byte. Here connect() sets timeout_s on the TCP socket (`raw`) before it
  connects and it stays there: the TLS handshake, the CONNACK and every later read and write
  give up after it (OSError); check_msg() sets it to 0 for a packet's first byte only. (A TLS
  socket has no settimeout(): the TCP socket under it carries it.)
- TLS as either constructor takes it: ssl=True with ssl_params (ssl/ussl.wrap_socket, firmware
  without SSLContext) or ssl=an SSLContext; each client's own, no module switch (client()).
- 1.3.4's wait_msg() returns None after a PUBLISH, as for "nothing waiting", and leaves a
  PUBACK's or SUBACK's body on the socket. Here check_msg()/wait_msg() read one whole packet of
  any kind and return its type byte: PUBLISH (0x30-0x3F: the callback has it, a QoS 1 one is
  PUBACKed), PUBACK, SUBACK, UNSUBACK (packet id in `ack_pid`, a SUBACK's return codes in
  granted[:granted_n]) or PINGRESP; check_msg() returns None only when nothing has come. Any
  other packet raises MQTTException.
- publish(qos=1) and subscribe() wait for their ack with no bound. Here publish(),
  publish_from(), subscribe() (one topic or several in one packet) and unsubscribe() send and
  return; the packet id is `pid`, and the caller matches the ack that check_msg() reports.
- publish_from(topic, head, buf, off, n) sends head + buf[off:off + n] from the caller's
  buffers, framed in buffers made once: a batch straight from the ring, with no copy and no
  allocation (tests/device/test_memory.py, test_mqtt.py).
- umqtt.simple reads every payload into a new bytes object. Here the messages on `rx_topic`
  (bytes) are read into `rx_buf`, a memoryview of a buffer the caller made once (an update's
  chunks, ota/transfer.py), while it is set: the callback gets rx_buf itself when the payload
  fills it, else a slice of it, valid until it returns, and its topic is rx_topic itself
  (read into a buffer made once: a whole chunk allocates nothing here), so a plug whose heap
  is full of small gaps takes them all the same (a payload larger than rx_buf is read as any
  other). Two attributes, not a method: the client's code is in every plug's heap, and this
  is for a transfer's while.
- No keepalive. keep_alive(now) pings when nothing came for a quarter of the keepalive or
  nothing went for half of it, and is False once the broker has said nothing for a whole
  keepalive: it answers every PINGREQ, so the connection is gone even while writes succeed.
  rx_ms is when the last packet came, tx_ms when the last one went.
Every call may raise OSError (a timeout, a closed connection) or MQTTException (a refused
login, the CONNACK code in args[0]; a packet no broker sends): ERRORS. The caller closes and
connects again (link.py). Strings go out as UTF-8, their lengths counted in bytes.
"""

import socket
import time

from micropython import const
from umqtt.simple import MQTTClient, MQTTException

TIMEOUT_S = const(5)
ERRORS = (OSError, MQTTException)
_MAX_TOPICS = const(8)  # per (UN)SUBSCRIBE: a SUBACK's return codes fit in `granted`
_PUBLISH = const(0x30)
_PUBACK = const(0x40)
_SUBSCRIBE = const(0x82)
_SUBACK = const(0x90)
_UNSUBSCRIBE = const(0xA2)
_UNSUBACK = const(0xB0)
_PINGRESP = const(0xD0)


def _utf8(s):
    return s.encode() if isinstance(s, str) else s


class Client(MQTTClient):
    def __init__(self, client_id, server, port=0, user=None, password=None, keepalive=0,
                 ssl=False, ssl_params={}, timeout_s=TIMEOUT_S):
        super().__init__(client_id, server, port, user, password, keepalive, ssl, ssl_params)
        self.timeout_s = timeout_s
        self.raw = None          # the TCP socket (under `sock` when it is TLS)
        self.ack_pid = 0         # the packet id of the last PUBACK, SUBACK or UNSUBACK
        self.granted = bytearray(_MAX_TOPICS)
        self.granted_n = 0
        self.rx_ms = self.tx_ms = self._ping_ms = 0
        self._fixed = bytearray(5)  # a fixed header: type, remaining length (1-4 bytes)
        self._two = bytearray(2)    # a length or packet id, big-endian
        self._one = bytearray(1)
        self._puback = bytearray(b"\x40\x02\0\0")
        self._skip = bytearray(64)  # what a message the heap cannot take is read through, and
        # a topic that may be rx_topic (_topic())
        self.rx_topic = None        # messages on this topic are read into rx_buf, if set
        self.rx_buf = None
        self.dropped_in = 0         # PUBLISHes read and dropped: no heap for their payload
        self.dropped_in_bytes = 0   # the last one's size
        self.dropped_in_topic = b""  # and topic

    # -- the connection ----------------------------------------------------------------------

    def attach(self, sock, raw=None):
        """Talk over `sock`, a connected stream (raw: the TCP socket under it, if it is TLS),
        with timeout_s on it."""
        self.sock = sock
        self.raw = raw or sock
        self.raw.settimeout(self.timeout_s)
        self.rx_ms = self.tx_ms = self._ping_ms = time.ticks_ms()

    def connect(self, clean_session=True):
        """Open the connection and log in, each step bounded by timeout_s; the CONNACK's
        session-present flag. MQTTException(code) when the broker refuses the login."""
        self.close()
        raw = socket.socket()
        self.attach(raw)  # close() closes it if what follows fails
        raw.connect(socket.getaddrinfo(self.server, self.port)[0][-1])
        if self.ssl:
            self.attach(self._wrap(raw), raw)
        return self._login(clean_session)

    def _login(self, clean_session):
        """CONNECT on the open connection, then its CONNACK."""
        cid, user, pswd = _utf8(self.client_id), _utf8(self.user), _utf8(self.pswd)
        will, will_msg = _utf8(self.lw_topic), _utf8(self.lw_msg)
        flags = 2 if clean_session else 0
        size = 12 + len(cid)
        if will:
            flags |= 4 | self.lw_qos << 3 | self.lw_retain << 5
            size += 4 + len(will) + len(will_msg)
        if user:
            flags |= 0x80
            size += 2 + len(user)
            if pswd:
                flags |= 0x40
                size += 2 + len(pswd)
        self.sock.write(self._fixed, self._frame(0x10, size))
        self.sock.write(b"\0\x04MQTT\x04")
        self.sock.write(bytes((flags, self.keepalive >> 8, self.keepalive & 0xFF)))
        self._send_str(cid)
        if will:
            self._send_str(will)
            self._send_str(will_msg)
        if user:
            self._send_str(user)
            if pswd:
                self._send_str(pswd)
        ack = bytearray(4)
        self._read(ack, 4)
        if ack[0] != 0x20 or ack[1] != 2:
            raise MQTTException("the broker's answer is not a CONNACK")
        if ack[3]:
            raise MQTTException(ack[3])
        self.rx_ms = self.tx_ms = self._ping_ms = time.ticks_ms()
        return ack[2] & 1

    def _wrap(self, raw):
        try:
            if self.ssl is True:  # the old form: ssl_params for wrap_socket
                try:
                    from ssl import wrap_socket
                except ImportError:
                    from ussl import wrap_socket
                return wrap_socket(raw, **self.ssl_params)
            return self.ssl.wrap_socket(raw, server_hostname=self.server)
        except ValueError as e:  # MicroPython's mbedtls: a certificate that does not verify
            raise OSError("TLS: %s" % e)

    def close(self):
        """Close the socket, if any, with no DISCONNECT: the broker publishes the will."""
        sock = self.sock
        self.sock = self.raw = None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    # -- sending: never waits for an answer ---------------------------------------------------

    def _frame(self, first, remaining):
        """The fixed header into self._fixed: the type byte, then the remaining length in
        7-bit groups, low first. Returns its length."""
        fixed = self._fixed
        fixed[0] = first
        i = 1
        while remaining > 0x7F:
            fixed[i] = (remaining & 0x7F) | 0x80
            remaining >>= 7
            i += 1
        fixed[i] = remaining
        return i + 1

    def _send_str(self, s):
        s = _utf8(s)
        two = self._two
        two[0] = len(s) >> 8
        two[1] = len(s) & 0xFF
        self.sock.write(two)
        self.sock.write(s)

    def _send_pid(self):
        """The next packet id (1..65535; 0 is none) into `pid`, and onto the socket."""
        self.pid = self.pid % 0xFFFF + 1
        two = self._two
        two[0] = self.pid >> 8
        two[1] = self.pid & 0xFF
        self.sock.write(two)

    def publish_from(self, topic, head, buf, off, n, retain=False, qos=1):
        """One PUBLISH (QoS 0 or 1) on topic (bytes) of head + buf[off:off + n] (head: bytes,
        or None), not waiting for the PUBACK; at QoS 1 its packet id is `pid` afterwards.
        Allocates nothing. Returns the packet's length in bytes."""
        size = 2 + len(topic) + n + (2 if qos else 0) + (len(head) if head is not None else 0)
        k = self._frame(_PUBLISH | qos << 1 | retain, size)
        self.sock.write(self._fixed, k)
        self._send_str(topic)
        if qos:
            self._send_pid()
        if head is not None:
            self.sock.write(head)
        self.sock.write(buf, off, n)
        self.tx_ms = time.ticks_ms()
        return k + size

    def publish(self, topic, msg, retain=False, qos=0):
        """As umqtt.simple's, but QoS 1 does not wait: check_msg() reports the PUBACK of `pid`."""
        msg = _utf8(msg)
        self.publish_from(_utf8(topic), None, msg, 0, len(msg), retain, qos)

    def publish_parts(self, topic, parts, retain=False):
        """One QoS 0 PUBLISH whose payload is `parts` (str or bytes) one after the other:
        a large message without a large block of heap."""
        size = 2 + len(topic)
        for p in parts:
            size += len(_utf8(p))
        self.sock.write(self._fixed, self._frame(_PUBLISH | retain, size))
        self._send_str(topic)
        for p in parts:
            self.sock.write(p)
        self.tx_ms = time.ticks_ms()

    def _subunsub(self, first, topics, qos):
        if type(topics) is not tuple:
            topics = (topics,)
        if len(topics) > _MAX_TOPICS:
            raise ValueError("at most %d topics at a time" % _MAX_TOPICS)
        size = 2
        for t in topics:
            size += 2 + len(t) + (first == _SUBSCRIBE)
        self.sock.write(self._fixed, self._frame(first, size))
        self._send_pid()
        for t in topics:
            self._send_str(t)
            if first == _SUBSCRIBE:
                self.sock.write(bytes((qos,)))
        self.tx_ms = time.ticks_ms()
        return self.pid

    def subscribe(self, topic, qos=0):
        """One SUBSCRIBE for a topic (bytes), or a tuple of them; its packet id (check_msg()
        reports the SUBACK)."""
        return self._subunsub(_SUBSCRIBE, topic, qos)

    def unsubscribe(self, topic):
        return self._subunsub(_UNSUBSCRIBE, topic, 0)

    def ping(self):
        self.sock.write(b"\xc0\0")
        self.tx_ms = self._ping_ms = time.ticks_ms()

    def keep_alive(self, now):
        """Ping when due (now: time.ticks_ms()); False when the broker has said nothing for
        a whole keepalive."""
        if not self.keepalive:
            return True
        keepalive_ms = self.keepalive * 1000
        quiet_ms = time.ticks_diff(now, self.rx_ms)
        if quiet_ms > keepalive_ms:
            return False
        if quiet_ms > keepalive_ms >> 2 and \
                time.ticks_diff(now, self._ping_ms) > keepalive_ms >> 2 or \
                time.ticks_diff(now, self.tx_ms) > keepalive_ms >> 1:
            self.ping()
        return True

    # -- receiving ---------------------------------------------------------------------------

    def check_msg(self):
        """The next packet if one has come (see wait_msg()); None at once if none has."""
        raw = self.raw
        raw.settimeout(0)
        try:
            got = self.sock.readinto(self._one, 1)
        finally:
            raw.settimeout(self.timeout_s)
        return None if got is None else self.wait_msg(got)

    def wait_msg(self, got=-1):
        """One whole packet from the broker, waiting at most timeout_s for it: its type byte;
        a PUBLISH is handed to the callback first. (got: check_msg() has its first byte.)"""
        if got < 0:
            got = self.sock.readinto(self._one, 1)
        if not got:
            raise OSError("the broker closed the connection")
        op = self._one[0]
        n = self._recv_len()
        self.rx_ms = time.ticks_ms()
        if op & 0xF0 == _PUBLISH:
            self._publish_in(op, n)
        elif (op == _PUBACK or op == _UNSUBACK) and n == 2 or \
                op == _SUBACK and 2 < n <= 2 + _MAX_TOPICS:
            self._read(self._two, 2)
            self.ack_pid = self._two[0] << 8 | self._two[1]
            if op == _SUBACK:
                self.granted_n = n - 2
                self._read(self.granted, n - 2)
        elif op != _PINGRESP or n:
            raise MQTTException("the broker sent a packet of type 0x%02x, %d bytes long"
                                % (op, n))
        return op

    def _publish_in(self, op, n):
        self._read(self._two, 2)
        topic_len = self._two[0] << 8 | self._two[1]
        n -= 2 + topic_len
        topic = self._topic(topic_len)
        if op & 6:
            if op & 6 != 2:
                raise MQTTException("a QoS 2 PUBLISH, though nothing was subscribed at QoS 2")
            self._read(self._two, 2)
            self._puback[2] = self._two[0]
            self._puback[3] = self._two[1]
            n -= 2
        if n < 0:
            raise MQTTException("a PUBLISH shorter than its topic")
        rx = self.rx_buf
        if rx is not None and n <= len(rx) and topic is self.rx_topic:
            self._read(rx, n)
            msg = rx if n == len(rx) else rx[:n]
        else:
            try:
                msg = self._take(n)
            except MemoryError:  # read through it, so the connection stays in step: no crash
                msg = None
                self._drop_in(topic, n)
        if msg is not None:
            self.cb(topic, msg)
        if op & 6 and self.sock is not None:  # the callback may have closed the connection
            self.sock.write(self._puback)
            self.tx_ms = time.ticks_ms()

    def _recv_len(self):
        """A remaining length: up to 4 bytes of 7 bits, low first."""
        n = shift = 0
        one = self._one
        while True:
            self._read(one, 1)
            n |= (one[0] & 0x7F) << shift
            if not one[0] & 0x80:
                return n
            shift += 7
            if shift > 21:
                raise MQTTException("a remaining length longer than 4 bytes")

    def _read(self, buf, n):
        """Exactly n bytes into buf (within timeout_s)."""
        if self.sock.readinto(buf, n) != n:
            raise OSError("the broker closed the connection")

    def _drop_in(self, topic, n):
        """Read and drop n bytes of a payload the heap could not take (link.py says so)."""
        left = n
        while left:
            k = left if left < 32 else 32
            self._read(self._skip, k)
            left -= k
        self.dropped_in += 1
        self.dropped_in_bytes = n
        self.dropped_in_topic = topic

    def _topic(self, k):
        """A PUBLISH's topic of k bytes: rx_topic itself when it is that one (read into _skip,
        no allocation), else a new bytes object."""
        want = self.rx_topic
        buf = self._skip
        if want is None or k != len(want) or k > len(buf):
            return self._take(k)
        self._read(buf, k)
        for i in range(k):
            if buf[i] != want[i]:
                return bytes(buf[:k])
        return want

    def _take(self, n):
        data = self.sock.read(n)
        if data is None or len(data) != n:
            raise OSError("the broker closed the connection")
        return data


def client(client_id, broker, keepalive_s):
    """A Client for broker {host, port, user, password, ca}: TLS when `ca` (a PEM CA
    certificate file on the node) is set, verifying the broker's certificate against it, with
    an SSLContext where the firmware has one, else the old ssl=True form."""
    user = broker.get("user") or None
    password = broker.get("password") or None
    ca = broker.get("ca")
    if not ca:
        return Client(client_id, broker["host"], broker["port"], user, password, keepalive_s)
    with open(ca, "rb") as f:
        cadata = f.read()
    try:
        import ssl
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    except (ImportError, AttributeError):  # MicroPython before 1.23: ussl.wrap_socket
        return Client(client_id, broker["host"], broker["port"], user, password, keepalive_s,
                      True, {"cadata": cadata, "cert_reqs": 2, "server_hostname": broker["host"]})
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cadata=cadata)
    return Client(client_id, broker["host"], broker["port"], user, password, keepalive_s,
                  context)
