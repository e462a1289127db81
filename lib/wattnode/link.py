"""link.py - the node's MQTT link, on umqtt.simple; the only place that (re)connects.

Topics under <base>/<node>/: status (retained "online"; the broker publishes the retained
last will "offline" when the node vanishes), state (retained JSON after each slot), readings
(QoS 1 binary batches, wire.py), log (plain-words events), relay/set (ON / OFF / TOGGLE), cmd
(JSON commands), ack (from the collector); and homeassistant/status (Home Assistant's
"online" asks for discovery again). All are subscribed, in one SUBSCRIBE, before "online" is
said, so the collector's answer to it cannot be missed. While `read_state` is set (the node's
energy total is not settled yet: energy.py) its own state topic is subscribed too, in a
SUBSCRIBE of its own sent just before (so its retained state, if the broker has one, comes
before the main SUBACK, which the "state" handler then hears as None), and unsubscribed by
stop_reading_state(); until then `hold` keeps batches back.

Store and forward (DESIGN.md, "the one idea")
- A batch is the run of ring records from `ring.sent`; the broker's PUBACK moves `sent` on.
  Records stay in the ring until the collector's ack says they are on its disk:
      {"boot": B, "seq": S, "time": T}   retained, after a commit: records below S are stored
      {"boot": B, "seq": S, "resend": R} not retained: the collector lacks records from R
      {"time": T, "clock": true, "commit_s": C[, "energy_wh": E, "energy_time": TE]}
                                         not retained, the answer to "online": the
                                         collector's clock (clock.py), commit interval and
                                         the last energy total it holds for this node
                                         (energy.py), true at unix time TE
  An ack for another boot is the previous boot's (retained) and means nothing now. An ack
  past what was ever sent, or one that is not this JSON, frees nothing and is reported.
- A PUBACK says the broker has a batch, not that the collector will get it: mosquitto drops
  a message for a subscriber whose queue is full (max_queued_messages) and still PUBACKs
  the publisher, and the collector can ask for a hole only when a later batch shows it. So
  the ring is rewound to send again what the broker accepted but the collector's acks do
  not cover (the collector writes duplicates idempotently; a rewind frees nothing):
    * after every (re)connect, to its oldest held record (the broker may have lost it all);
    * when the collector asks (resend);
    * when a commit's ack repeats the previous one's seq S although records from S had been
      accepted by the broker before that previous ack came: a whole commit went by
      without them;
    * when accepted records have had no ack for ack_timeout_s (config; by default 3 commit
      intervals as the collector states them, ACK_TIMEOUT_DEFAULT_S until it has), to the
      oldest held record; the wait doubles after each such rewind that brings no ack, up to
      16 times the timeout, so a collector that is away for long is not flooded with copies.
  The log topic says it once when the collector starts to lack accepted records, not for
  every rewind.
- A batch goes out when batch_max records are waiting or the oldest has waited batch_wait_s
  (real time): fuller batches cost fewer bytes per reading, and the live view comes from the
  state topic, not from the readings. Records sent before (after a rewind) go out at once.
  One batch is in flight at a time.

Design notes
- umqtt.simple does connect, ping, small publishes and incoming messages. Batches are framed
  here: umqtt's publish() allocates a packet per call and waits for its PUBACK with no bound,
  while a batch must go straight from the ring (sock.write(buf, off, n), no copy, no
  allocation) and its PUBACK must be awaited without stopping the loop. SUBSCRIBE is framed
  here too, so connecting never waits on a SUBACK.
- Every socket operation is bounded (mqttsock.py); a batch whose PUBACK does not come within
  PUBACK_TIMEOUT_MS drops the connection. Every call into umqtt.simple may raise (OSError,
  and MQTTException, AssertionError or IndexError on a garbled reply): service() catches them
  in one place and calls _drop(), which is idempotent. Reconnects back off exponentially
  (1 s .. 60 s) with jitter; the hardware layer reconnects Wi-Fi.
"""

import json
import time

from umqtt.simple import MQTTClient, MQTTException

from wattnode import mqttsock, wire

from micropython import const

KEEPALIVE_S = const(60)
PUBACK_TIMEOUT_MS = const(15000)
ACK_TIMEOUT_DEFAULT_S = const(900)  # until the collector states its commit interval
ACK_TIMEOUT_MAX_S = const(28800)    # x16 in ms stays below 2**29: a small int, a ticks_diff
_ACK_TIMEOUT_COMMITS = const(3)     # the ack timeout in the collector's commit intervals
_ACK_BACKOFF_MAX = const(4)         # the wait doubles at most 4 times: 16 x the timeout
_COMMIT_S_MAX = const(86400)
_ASKED = const(0)            # why a rewind: the collector asked
_SEEN_IN_ACKS = const(1)     # a commit's ack repeated the last one's seq
_SEEN_BY_TIMEOUT = const(2)  # no ack within the ack timeout
_BACKOFF_MIN_MS = const(1000)
_BACKOFF_MAX_MS = const(60000)
_PUBLISH_QOS1 = const(0x32)
_PUBACK = const(0x40)
_SUBACK = const(0x90)
_UNSUBACK = const(0xB0)
_MAX_PACKETS_PER_SERVICE = const(16)
_ERRORS = (OSError, MQTTException, AssertionError, IndexError)


def _subscribe_packet(topics, pid=1, first=0x82):
    """One SUBSCRIBE (QoS 0 each) for all topics, built once; first=0xA2: an UNSUBSCRIBE."""
    body = bytearray(b"\0") + bytes((pid,))
    for t in topics:
        body += bytes((len(t) >> 8, len(t) & 0xFF)) + t + (b"\0" if first == 0x82 else b"")
    assert len(body) < 0x4000
    n = len(body)
    head = bytes((first, n & 0x7F | 0x80, n >> 7)) if n > 0x7F else bytes((first, n))
    return bytes(head) + body


class Link:
    def __init__(self, node_id, cfg, ring, interval_s, boot, random_bytes, handlers):
        """handlers: {"relay": f(msg), "cmd": f(msg), "clock": f(unix s), "discovery": f(),
        "energy": f(Wh or -1, unix s), "state": f(msg or None)}, each called from service();
        "energy" and "state" are optional."""
        base = "%s/%s/" % (cfg["base_topic"], node_id)
        self.t_status = (base + "status").encode()
        self.t_state = (base + "state").encode()
        self.t_log = (base + "log").encode()
        self.t_relay_set = (base + "relay/set").encode()
        self.t_cmd = (base + "cmd").encode()
        self.t_ack = (base + "ack").encode()
        self.t_ha_status = (cfg["discovery_prefix"] + "/status").encode()
        self._subscribe = _subscribe_packet((self.t_relay_set, self.t_cmd, self.t_ack,
                                             self.t_ha_status))
        self._sub_state = _subscribe_packet((self.t_state,), 2)
        self._unsub_state = _subscribe_packet((self.t_state,), 3, 0xA2)
        self.read_state = False    # subscribe to its own retained state (energy.py)
        self._state_suback = False  # the next SUBACK is that subscription's
        self.hold = False          # send no batch (the energy total is not settled)
        readings = (base + "readings").encode()
        self._topic = bytearray(2 + len(readings))  # length-prefixed, ready to write
        self._topic[0] = len(readings) >> 8
        self._topic[1] = len(readings) & 0xFF
        self._topic[2:] = readings
        mqttsock.install()
        self.mq = mqttsock.client(MQTTClient, node_id, cfg["broker"], KEEPALIVE_S)
        self.mq.set_last_will(self.t_status, b"offline", retain=True, qos=1)
        self.mq.set_callback(self._on_message)
        self.ring = ring
        self.interval_s = interval_s
        self.boot = boot
        self.batch_max = cfg["batch_max"]
        self.batch_wait_ms = cfg["batch_wait_s"] * 1000
        self._waiting_since_ms = -1
        self._ack_timeout_fixed = cfg.get("ack_timeout_s", 0) > 0
        self.ack_timeout_ms = (cfg.get("ack_timeout_s", 0) or ACK_TIMEOUT_DEFAULT_S) * 1000
        self._ack_backoff = 0      # rewinds for want of an ack since the last ack that freed
        self._unacked_ms = -1      # since when accepted records have waited for an ack
        self._ack_seq = -1         # the seq of the last commit ack heard on this connection
        self._sent_at_ack = 0      # ring.sent when it came: accepted before it
        self._lacking = False      # said on the log that the collector lacks accepted records
        self._random = random_bytes
        self._handlers = handlers
        self._fixed = bytearray(5)
        self._pid = bytearray(2)
        self._hdr = bytearray(wire.HEADER_SIZE)
        self._rx = bytearray(8)
        self.up = False
        self.connects = 0
        self.batches = 0
        self.bytes_sent = 0
        self.acks = 0
        self.resends = 0  # rewinds to send again what the collector lacks (asked or seen)
        self.bad_acks = 0
        self.sent_top = 0  # highest seq + 1 ever put on the wire this boot
        self.last_error = None
        self._connect_said = None
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
        self._state_suback = self.read_state
        if self.read_state:
            self.mq.sock.write(self._sub_state)
        self.mq.sock.write(self._subscribe)
        self.mq.publish(self.t_status, b"online", retain=True)
        self.ring.rewind(self.ring.first)  # the broker may have lost what it had: send it again
        self._unacked_ms = -1
        self._ack_seq = -1  # the retained ack comes again now: it is no second commit
        self._last_tx_ms = time.ticks_ms()
        self._backoff_ms = 0
        self.connects += 1
        self._connect_said = None

    def _connect_failed(self, e):
        """Why a connect failed, in words; printed when it differs from the last time (a
        refused login would otherwise retry in silence for ever)."""
        code = e.args[0] if isinstance(e, MQTTException) and e.args else None
        if code in (4, 5):  # CONNACK: bad user name or password / not authorized
            why = ("the broker at %s:%d refused this plug's login (%s): check broker.user and "
                   "broker.password in config.json" % (self.mq.server, self.mq.port,
                   "bad user name or password" if code == 4 else "not authorized"))
        else:
            why = "cannot connect to %s:%d (%r)" % (self.mq.server, self.mq.port, e)
        if why != self._connect_said:
            self._connect_said = why
            print("link:", why)
        return why

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
                self._drop(self._connect_failed(e))
                return
        try:
            self._receive()
            now = time.ticks_ms()
            if self._inflight_n:
                if time.ticks_diff(now, self._sent_ms) > PUBACK_TIMEOUT_MS:
                    self._drop("no PUBACK for a batch within %d ms" % PUBACK_TIMEOUT_MS)
                    return
            elif self.up:
                self._check_acks(now)
                if not self.hold and self._batch_due(now, flush):
                    self._send_batch()
            if self.up and time.ticks_diff(now, self._last_tx_ms) > KEEPALIVE_S * 500:
                self.mq.ping()
                self._last_tx_ms = now
        except _ERRORS as e:
            self._drop(repr(e))

    def _receive(self):
        rx = self._rx
        for _ in range(_MAX_PACKETS_PER_SERVICE):
            if not self.up:  # a handler dropped the link (a reboot command)
                return
            op = self.mq.check_msg()  # PUBLISH and PINGRESP are handled inside
            if op is None or op & 0xF0 == 0x30:  # nothing waiting, or a PUBLISH umqtt handled
                if op is None:
                    return
                continue
            if op == _PUBACK:
                if self.mq.sock.readinto(rx, 3) != 3 or rx[0] != 2:
                    raise OSError("malformed PUBACK")
                pid = rx[1] << 8 | rx[2]
                if self._inflight_n and pid == self._inflight_pid:
                    if self.ring.sent == self._inflight_seq:  # not rewound meanwhile
                        self.ring.sent_to(self._inflight_seq + self._inflight_n)
                        if self._unacked_ms < 0:
                            self._unacked_ms = time.ticks_ms()
                    self._inflight_n = 0
            elif op == _SUBACK and self._state_suback:  # its own state's comes first
                self._state_suback = False
                if self.mq.sock.readinto(rx, 4) != 4 or rx[0] != 3:
                    raise OSError("malformed SUBACK")
            elif op == _SUBACK:
                if self.mq.sock.readinto(rx, 7) != 7 or rx[0] != 6:  # 4 topics: 6 bytes
                    raise OSError("malformed SUBACK")
                if rx[3] == 0x80 or rx[4] == 0x80 or rx[5] == 0x80 or rx[6] == 0x80:
                    self.log("the broker refused a subscription (relay/set, cmd, ack, %s): "
                             "check this node's ACL" % self.t_ha_status.decode())
                if self.read_state:  # its retained state, if the broker has one, came before
                    self._handlers["state"](None)
            elif op == _UNSUBACK:
                if self.mq.sock.readinto(rx, 3) != 3 or rx[0] != 2:
                    raise OSError("malformed UNSUBACK")
            else:
                raise OSError("unexpected MQTT packet type 0x%02x" % op)

    def _batch_due(self, now, flush):
        waiting = self.ring.unsent()
        if not waiting:
            self._waiting_since_ms = -1
            return False
        if self._waiting_since_ms < 0:
            self._waiting_since_ms = now
        if flush or waiting >= self.batch_max or self.ring.sent < self.sent_top or \
                time.ticks_diff(now, self._waiting_since_ms) >= self.batch_wait_ms:
            self._waiting_since_ms = -1
            return True
        return False

    def _send_batch(self):
        ring = self.ring
        n = ring.peek(self.batch_max)
        seq = ring.sent
        wire.pack_header(self._hdr, 0, n, self.interval_s, self.boot, seq, ring.dropped,
                         ring.first)
        body = n * wire.RECORD_SIZE
        size = self._fix_header(_PUBLISH_QOS1, len(self._topic) + 2 + wire.HEADER_SIZE + body)
        pid = self.mq.pid % 0xFFFF + 1  # share umqtt's counter; packet id 0 is not allowed
        self.mq.pid = pid
        self._pid[0] = pid >> 8
        self._pid[1] = pid & 0xFF
        sock = self.mq.sock
        sock.write(self._fixed, size)
        sock.write(self._topic)
        sock.write(self._pid)
        sock.write(self._hdr)
        sock.write(ring.buf, ring.offset(seq), body)
        now = time.ticks_ms()
        self._inflight_n = n
        self._inflight_seq = seq
        self._inflight_pid = pid
        if seq + n > self.sent_top:
            self.sent_top = seq + n
        self._sent_ms = now
        self._last_tx_ms = now
        self.batches += 1
        self.bytes_sent += size + len(self._topic) + 2 + wire.HEADER_SIZE + body

    def _fix_header(self, first, remaining):
        """MQTT's fixed header into self._fixed: the packet type byte, then the remaining
        length in 7-bit groups, low first. Returns its length."""
        fixed = self._fixed
        fixed[0] = first
        i = 1
        while remaining > 0x7F:
            fixed[i] = (remaining & 0x7F) | 0x80
            remaining >>= 7
            i += 1
        fixed[i] = remaining
        return i + 1

    # -- acks --------------------------------------------------------------------------------

    def _on_ack(self, msg):
        try:
            ack = json.loads(msg)
            if ack.get("clock") is True:
                self._on_clock(ack)
                return
            boot, seq, resend = ack["boot"], ack["seq"], ack.get("resend", -1)
            if not (isinstance(boot, int) and isinstance(seq, int) and isinstance(resend, int)):
                raise TypeError
        except (ValueError, TypeError, KeyError, AttributeError):
            self._bad_ack("%r is not what the collector sends" % bytes(msg[:64]))
            return
        if boot != self.boot:
            return  # the retained ack of an earlier boot of this node
        if seq < 0 or seq > self.sent_top or resend > self.sent_top:
            self._bad_ack("seq %d / resend %d is past what this node has sent (%d)"
                          % (seq, resend, self.sent_top))
            return
        ring = self.ring
        freed = seq > ring.first
        ring.release(seq)
        self.acks += 1
        if freed:  # the collector is storing: wait a whole timeout again before doubting it
            self._ack_backoff = 0
            self._lacking = False
            self._unacked_ms = time.ticks_ms() if ring.sent > ring.first else -1
        if resend >= 0:
            self._rewind(resend, _ASKED)
            return
        if seq == self._ack_seq and self._sent_at_ack > seq:
            self._rewind(seq, _SEEN_IN_ACKS)
        self._ack_seq = seq
        self._sent_at_ack = ring.sent

    def _on_clock(self, ack):
        t, commit_s = ack["time"], ack.get("commit_s", 0)
        energy_wh, energy_time = ack.get("energy_wh", -1), ack.get("energy_time", 0)
        if not (isinstance(t, int) and isinstance(commit_s, int) and isinstance(energy_wh, int)
                and isinstance(energy_time, int)) or not 0 <= commit_s <= _COMMIT_S_MAX or \
                not -1 <= energy_wh < 0x3FFFFFFF:
            raise TypeError
        if commit_s and not self._ack_timeout_fixed:
            self.ack_timeout_ms = min(_ACK_TIMEOUT_COMMITS * commit_s, ACK_TIMEOUT_MAX_S) * 1000
        self._handlers["clock"](t)
        if "energy" in self._handlers:
            self._handlers["energy"](energy_wh, energy_time)

    def _check_acks(self, now):
        """From service(), allocation-free: rewind when accepted records have waited for an
        ack longer than the ack timeout (doubled after each fruitless try)."""
        if self._unacked_ms < 0 or time.ticks_diff(now, self._unacked_ms) <= \
                self.ack_timeout_ms << self._ack_backoff:
            return
        self._rewind(self.ring.first, _SEEN_BY_TIMEOUT)
        if self._ack_backoff < _ACK_BACKOFF_MAX:
            self._ack_backoff += 1

    def _rewind(self, seq, why):
        """Send again from seq: the collector lacks it. why: _ASKED, or how the node saw it
        itself (then said on the log once, until an ack frees records again)."""
        ring = self.ring
        if why != _ASKED and not self._lacking:
            self._lacking = True
            if why == _SEEN_IN_ACKS:
                reason = "a commit went by without them"
            else:
                reason = "no ack for them in %d s" % (self.ack_timeout_ms // 1000)
            self.log("the collector lacks readings from seq %d that the broker accepted (%s); "
                     "sending them again" % (max(seq, ring.first), reason))
        ring.rewind(seq)
        self._inflight_n = 0  # its PUBACK must not move `sent` past the rewound records
        self._unacked_ms = -1  # the resend's PUBACK starts the wait again
        self.resends += 1

    def _bad_ack(self, why):
        self.bad_acks += 1
        n = self.bad_acks
        if n & (n - 1) == 0:  # the 1st, 2nd, 4th, 8th, ...: said, without flooding the log
            self.log("ack: %s; nothing freed (%d such so far)" % (why, n))

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

    def publish_parts(self, topic, parts, retain=False):
        """One QoS 0 PUBLISH whose payload is the concatenation of `parts` (strings), written
        piece by piece: a large message without a large block of heap."""
        if not self.up:
            return False
        n = 2 + len(topic)
        for p in parts:
            n += len(p)
        size = self._fix_header(0x31 if retain else 0x30, n)
        try:
            sock = self.mq.sock
            sock.write(self._fixed, size)
            sock.write(bytes((len(topic) >> 8, len(topic) & 0xFF)))
            sock.write(topic)
            for p in parts:
                sock.write(p)
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

    def stop_reading_state(self):
        """The energy total is settled: its own state is read no more (batches go again)."""
        self.hold = False
        if self.read_state and self.up:
            try:
                self.mq.sock.write(self._unsub_state)
                self._last_tx_ms = time.ticks_ms()
            except _ERRORS as e:
                self._drop(repr(e))
        self.read_state = False

    def _on_message(self, topic, msg):
        if topic == self.t_ack:
            self._on_ack(msg)
        elif topic == self.t_relay_set:
            self._handlers["relay"](msg)
        elif topic == self.t_cmd:
            self._handlers["cmd"](msg)
        elif topic == self.t_ha_status and msg == b"online":
            self._handlers["discovery"]()
        elif topic == self.t_state and self.read_state:
            self._handlers["state"](msg)
