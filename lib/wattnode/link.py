"""link.py - the node's MQTT link, on umqtt.simple; the only place that (re)connects.

Topics under <base>/<node>/: status (retained "online"; the broker publishes the retained
last will "offline" when the node vanishes), state (retained JSON after each slot), readings
(QoS 1 binary batches, wire.py), log (plain-words events), relay/set (ON / OFF / TOGGLE),
ack (from the collector; subscribed before "online" is said, so the collector's answer to it,
which carries its clock, cannot be missed).

Design notes
- umqtt.simple does connect, subscribe, ping and incoming messages. Batches are framed here:
  umqtt's publish() allocates a packet per call and waits for its PUBACK with no bound, while
  a batch must go straight from the ring (sock.write(buf, off, n), no copy, no allocation) and
  its PUBACK must be awaited without stopping the loop. One batch is in flight at a time.
- A batch goes out when batch_max records are waiting or the oldest has waited batch_wait_s
  (real time): fuller batches cost fewer bytes per reading, and the live view comes from the
  state topic, not from the readings.
- Freeing: the records of a batch leave the ring when the broker acknowledges it (PUBACK).
  If the link drops first they stay and are sent again after reconnecting, so a batch may
  arrive twice; the collector's writes are idempotent.
- Every call into umqtt.simple may raise (OSError, and MQTTException, AssertionError or
  IndexError on a garbled reply): service() catches them in one place and calls _drop(),
  which is idempotent. Reconnects back off exponentially (1 s .. 60 s) with jitter.
- umqtt's wait_msg() puts the socket back in blocking mode after each read; _rearm() gives it
  its timeout again so no write or read can hang the loop for longer than SOCKET_TIMEOUT_S.
"""

import json
import time

from umqtt.simple import MQTTClient, MQTTException

from wattnode import wire

from micropython import const

KEEPALIVE_S = const(60)
SOCKET_TIMEOUT_S = const(5)
PUBACK_TIMEOUT_MS = const(15000)
_BACKOFF_MIN_MS = const(1000)
_BACKOFF_MAX_MS = const(60000)
_PUBLISH_QOS1 = const(0x32)
_PUBACK = const(0x40)
_MAX_PACKETS_PER_SERVICE = const(16)
_ERRORS = (OSError, MQTTException, AssertionError, IndexError)


class Link:
    def __init__(self, node_id, cfg, ring, interval_s, boot, random_bytes, on_relay=None,
                 on_ack=None):
        base = "%s/%s/" % (cfg["base_topic"], node_id)
        self.t_status = (base + "status").encode()
        self.t_state = (base + "state").encode()
        self.t_log = (base + "log").encode()
        self.t_relay_set = (base + "relay/set").encode()
        self.t_ack = (base + "ack").encode()
        readings = (base + "readings").encode()
        self._topic = bytearray(2 + len(readings))  # length-prefixed, ready to write
        self._topic[0] = len(readings) >> 8
        self._topic[1] = len(readings) & 0xFF
        self._topic[2:] = readings
        broker = cfg["broker"]
        self.mq = MQTTClient(node_id, broker["host"], port=broker["port"], user=broker["user"],
                             password=broker["password"], keepalive=KEEPALIVE_S)
        self.mq.set_last_will(self.t_status, b"offline", retain=True, qos=1)
        self.mq.set_callback(self._on_message)
        self.ring = ring
        self.interval_s = interval_s
        self.boot = boot
        self.batch_max = cfg["batch_max"]
        self.batch_wait_ms = cfg["batch_wait_s"] * 1000
        self._waiting_since_ms = -1
        self._random = random_bytes
        self._on_relay = on_relay
        self._on_ack = on_ack
        self._fixed = bytearray(5)
        self._pid = bytearray(2)
        self._hdr = bytearray(wire.HEADER_SIZE)
        self._rx = bytearray(3)
        self.up = False
        self.connects = 0
        self.batches = 0
        self.bytes_sent = 0
        self.last_error = None
        self._inflight_n = 0
        self._inflight_seq = 0
        self._inflight_pid = 0
        self._sent_ms = 0
        self._last_tx_ms = 0
        self._retry_ms = 0
        self._backoff_ms = 0

    # -- connection --------------------------------------------------------------------------

    def _connect(self):
        self.mq.connect()
        self.up = True
        self._rearm()
        self.mq.subscribe(self.t_relay_set)
        self.mq.subscribe(self.t_ack)
        self.mq.publish(self.t_status, b"online", retain=True)
        self._rearm()
        self._last_tx_ms = time.ticks_ms()
        self._backoff_ms = 0
        self.connects += 1

    def _drop(self, reason):
        if self.mq.sock is not None:
            try:
                self.mq.sock.close()
            except OSError:
                pass
        self.mq.sock = None
        was_up = self.up
        self.up = False
        self._inflight_n = 0
        self.last_error = reason
        b = self._backoff_ms * 2 if self._backoff_ms else _BACKOFF_MIN_MS
        self._backoff_ms = b if b < _BACKOFF_MAX_MS else _BACKOFF_MAX_MS
        jitter = self._random(1)[0] * self._backoff_ms // 512  # up to half the back-off
        self._retry_ms = time.ticks_add(time.ticks_ms(), self._backoff_ms + jitter)
        if was_up:
            print("link: connection lost:", reason)

    def _rearm(self):
        self.mq.sock.settimeout(SOCKET_TIMEOUT_S)

    # -- the loop's entry point --------------------------------------------------------------

    def service(self, wifi_up, flush=False):
        """Connect when due, take in what the broker sent, send the next batch when it is due
        (at once with flush). Never raises."""
        if not self.up:
            if not wifi_up or time.ticks_diff(time.ticks_ms(), self._retry_ms) < 0:
                return
            try:
                self._connect()
            except _ERRORS as e:
                self._drop("cannot connect to %s:%d (%r)" % (self.mq.server, self.mq.port, e))
                return
        try:
            self._receive()
            now = time.ticks_ms()
            if self._inflight_n:
                if time.ticks_diff(now, self._sent_ms) > PUBACK_TIMEOUT_MS:
                    self._drop("no PUBACK for a batch within %d ms" % PUBACK_TIMEOUT_MS)
                    return
            elif self._batch_due(now, flush):
                self._send_batch()
            if time.ticks_diff(now, self._last_tx_ms) > KEEPALIVE_S * 500:
                self.mq.ping()
                self._last_tx_ms = now
        except _ERRORS as e:
            self._drop(repr(e))

    def _receive(self):
        for _ in range(_MAX_PACKETS_PER_SERVICE):
            op = self.mq.check_msg()  # PUBLISH and PINGRESP are handled inside, returning None
            self._rearm()
            if op is None:  # nothing waiting, or umqtt handled a PUBLISH or PINGRESP itself
                return
            if op != _PUBACK:
                raise OSError("unexpected MQTT packet type 0x%02x" % op)
            if self.mq.sock.readinto(self._rx, 3) != 3 or self._rx[0] != 2:
                raise OSError("malformed PUBACK")
            pid = self._rx[1] << 8 | self._rx[2]
            if self._inflight_n and pid == self._inflight_pid:
                self.ring.release(self._inflight_seq + self._inflight_n)
                self._inflight_n = 0

    def _batch_due(self, now, flush):
        waiting = self.ring.count()
        if not waiting:
            self._waiting_since_ms = -1
            return False
        if self._waiting_since_ms < 0:
            self._waiting_since_ms = now
        if flush or waiting >= self.batch_max or \
                time.ticks_diff(now, self._waiting_since_ms) >= self.batch_wait_ms:
            self._waiting_since_ms = -1
            return True
        return False

    def _send_batch(self):
        ring = self.ring
        n = ring.peek(self.batch_max)
        seq = ring.first
        wire.pack_header(self._hdr, 0, n, self.interval_s, self.boot, seq, ring.dropped)
        body = n * wire.RECORD_SIZE
        remaining = len(self._topic) + 2 + wire.HEADER_SIZE + body
        fixed = self._fixed
        fixed[0] = _PUBLISH_QOS1
        i = 1
        while remaining > 0x7F:
            fixed[i] = (remaining & 0x7F) | 0x80
            remaining >>= 7
            i += 1
        fixed[i] = remaining
        pid = self.mq.pid % 0xFFFF + 1  # share umqtt's counter; packet id 0 is not allowed
        self.mq.pid = pid
        self._pid[0] = pid >> 8
        self._pid[1] = pid & 0xFF
        sock = self.mq.sock
        sock.write(fixed, i + 1)
        sock.write(self._topic)
        sock.write(self._pid)
        sock.write(self._hdr)
        sock.write(ring.buf, ring.offset(seq), body)
        now = time.ticks_ms()
        self._inflight_n = n
        self._inflight_seq = seq
        self._inflight_pid = pid
        self._sent_ms = now
        self._last_tx_ms = now
        self.batches += 1
        self.bytes_sent += i + 1 + len(self._topic) + 2 + wire.HEADER_SIZE + body

    # -- small messages ----------------------------------------------------------------------

    def publish(self, topic, payload, retain=False):
        """QoS 0 (a QoS 1 publish through umqtt would swallow our batch's PUBACK)."""
        if not self.up:
            return False
        try:
            self.mq.publish(topic, payload, retain)
            self._last_tx_ms = time.ticks_ms()
            return True
        except _ERRORS as e:
            self._drop(repr(e))
            return False

    def log(self, message):
        print("log:", message)
        self.publish(self.t_log, message.encode())

    def state(self, fields):
        return self.publish(self.t_state, json.dumps(fields).encode(), retain=True)

    def close(self):
        if self.up:
            self.publish(self.t_status, b"offline", retain=True)
            try:
                self.mq.disconnect()
            except _ERRORS:
                pass
        self.up = False

    def _on_message(self, topic, msg):
        if topic == self.t_relay_set and self._on_relay is not None:
            self._on_relay(msg)
        elif topic == self.t_ack and self._on_ack is not None:
            self._on_ack(msg)
