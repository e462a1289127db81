"""link.py - the node's MQTT link: store and forward over mqtt.py's client; the only place that
(re)connects.
(About 470 lines, one concern: store and forward over one connection, with its acks, resends,
broker list and back-off; the node's loop reaches the network only through it.)

Topics under <base>/<node>/: status (retained "online"; the broker publishes the retained
last will "offline" when the node vanishes), state (retained JSON after each slot), readings
(QoS 1 binary batches, wire.py), log (plain-words events), relay/set (ON / OFF / TOGGLE), cmd
(JSON commands), ack (from the collector), ota/manifest and ota/chunk in, ota/req and
ota/status out (over-the-air updates, ota/); and homeassistant/status (Home Assistant's
"online" asks for discovery again). All are subscribed, in one SUBSCRIBE, before "online" is
said, so the collector's answer to it cannot be missed. While `read_state` is set (the node's
energy total is not settled yet: energy.py) its own state topic is subscribed too, in a
SUBSCRIBE of its own sent just before (so its retained state, if the broker has one, comes
before the main SUBACK, which the "state" handler then hears as None), and unsubscribed by
stop_reading_state(); until then `hold` keeps batches back. SUBACKs are told apart by packet id.

Store and forward (DESIGN.md, "the one idea")
- A batch is the run of ring records from `ring.sent` (ring.py: from the RAM ring, or from the
  flash spill behind it, oldest first, with the interval its segment says; spill.py); the
  broker's PUBACK moves `sent` on.
  Records stay in the ring until the collector's ack says they are on its disk. The acks
  (wire.py's table, parsed by wire.parse_ack): ACK, retained, after a commit: records below
  seq are stored; RESEND: the collector lacks records from resend; CLOCK, the answer to
  "online": the collector's clock (clock.py), commit interval and the last energy total it
  holds for this node (energy.py). An ack for another boot is the previous boot's (retained)
  and means nothing now. An ack past what was ever sent, or one that is not what the
  collector sends, frees nothing and is counted (bad_acks) and said on the log.
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
- The MQTT protocol is mqtt.py's (umqtt.simple, subclassed): every socket operation bounded,
  nothing waits for an answer; a batch goes from the ring with publish_from() (no copy, no
  allocation), and its PUBACK is matched by packet id as check_msg() reports it. One service()
  pass takes in up to _MAX_PACKETS_PER_SERVICE packets of any kind (PUBLISH, PUBACK, SUBACK,
  ...), so several commands are handled in one pass and a flood cannot starve sampling.
- A batch whose PUBACK does not come within PUBACK_TIMEOUT_MS, or a broker that has said
  nothing for KEEPALIVE_S (the client pings it when it is quiet), drops the connection. Every
  call into the client may raise (mqtt.ERRORS): service() catches them in one place and calls
  _drop(), which is idempotent. Reconnects back off exponentially (1 s .. 60 s) with jitter;
  the hardware layer reconnects Wi-Fi.
- Several brokers (config.json's broker.host a list: the nodes of a broker cluster, `brokers`
  as (host, port) pairs, the same login to each): a failed connect or a lost connection moves
  to the next one, tried at once; the back-off above comes after a whole round of them failed
  (it doubles per round), and a connection resets the round. The link stays on the broker it
  reached: `broker` ("host:port") is in the node's status, which the node says on its log at
  each connection. With one broker it reconnects to it as it always has.
"""

import json
import time

from wattnode import mqtt, wire

from micropython import const

KEEPALIVE_S = const(60)
PUBACK_TIMEOUT_MS = const(15000)
ACK_TIMEOUT_DEFAULT_S = const(900)  # until the collector states its commit interval
ACK_TIMEOUT_MAX_S = const(28800)    # x16 in ms stays below 2**29: a small int, a ticks_diff
_ACK_TIMEOUT_COMMITS = const(3)     # the ack timeout in the collector's commit intervals
_ACK_BACKOFF_MAX = const(4)         # the wait doubles at most 4 times: 16 x the timeout
_ASKED = const(0)            # why a rewind: the collector asked
_SEEN_IN_ACKS = const(1)     # a commit's ack repeated the last one's seq
_SEEN_BY_TIMEOUT = const(2)  # no ack within the ack timeout
_BACKOFF_MIN_MS = const(1000)
_BACKOFF_MAX_MS = const(60000)
_PUBACK = const(0x40)
_SUBACK = const(0x90)
_REFUSED = const(0x80)  # a SUBACK's return code for a subscription the broker refused
_MAX_PACKETS_PER_SERVICE = const(16)


class Link:
    def __init__(self, node_id, cfg, ring, interval_s, boot, random_bytes, handlers):
        """handlers: {"relay": f(msg), "cmd": f(msg), "clock": f(unix s), "discovery": f(),
        "energy": f(Wh or -1, unix s), "state": f(msg or None), "ota": f(topic, msg)}, each
        called from service(); "energy", "state" and "ota" are optional."""
        base = "%s/%s/" % (cfg["base_topic"], node_id)
        self.t_status = (base + "status").encode()
        self.t_state = (base + "state").encode()
        self.t_log = (base + "log").encode()
        self.t_relay_set = (base + "relay/set").encode()
        self.t_cmd = (base + "cmd").encode()
        self.t_ack = (base + "ack").encode()
        self.t_ha_status = (cfg["discovery_prefix"] + "/status").encode()
        self.t_readings = (base + "readings").encode()
        self.t_ota_manifest = (base + "ota/manifest").encode()  # over-the-air updates: ota.py
        self.t_ota_chunk = (base + "ota/chunk").encode()
        self.t_ota_req = (base + "ota/req").encode()
        self.t_ota_status = (base + "ota/status").encode()
        self._topics = (self.t_relay_set, self.t_cmd, self.t_ack, self.t_ha_status,
                        self.t_ota_manifest, self.t_ota_chunk)
        self._sub_pid = -1         # the packet id of the SUBSCRIBE for self._topics
        self.read_state = False    # subscribe to its own retained state (energy.py)
        self.hold = False          # send no batch (the energy total is not settled)
        self.brokers = brokers(cfg["broker"])
        self.mq = mqtt.client(node_id, cfg["broker"], KEEPALIVE_S)
        self._at = -1
        self._round_left = 0
        self._next_broker()  # a list's first (the client took broker.host as it is)
        self._at = 0               # the broker in use: self.brokers[self._at]
        self._round_left = len(self.brokers)  # brokers this round may still try
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
        self._hdr = bytearray(wire.HEADER_SIZE)
        self.up = False
        self.connects = 0
        self.batches = 0
        self.bytes_sent = 0
        self._dropped_in_said = 0  # mq.dropped_in when it was last said (_say_dropped_in)
        self._dropped_in_ms = 0
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
        self._retry_ms = 0
        self._backoff_ms = 0

    # -- connection --------------------------------------------------------------------------

    def _connect(self):
        mq = self.mq
        mq.connect()
        self.up = True
        if self.read_state:
            mq.subscribe(self.t_state)
        self._sub_pid = mq.subscribe(self._topics)
        mq.publish(self.t_status, b"online", retain=True)
        self.ring.rewind(self.ring.first)  # the broker may have lost what it had: send it again
        self._unacked_ms = -1
        self._ack_seq = -1  # the retained ack comes again now: it is no second commit
        self._backoff_ms = 0
        self.connects += 1
        self._connect_said = None
        self._round_left = len(self.brokers)

    def broker(self):
        """The broker in use (or tried next), "host:port"."""
        return "%s:%d" % (self.mq.server, self.mq.port)

    def _next_broker(self):
        """After a failure with several brokers: the next one, and True while this round has
        one left to try at once; False (the back-off is due) after a whole round, or with one
        broker."""
        n = len(self.brokers)
        if n == 1:
            return False  # mqtt.client() took its host and port
        self._at = (self._at + 1) % n
        mq = self.mq
        mq.server, mq.port = self.brokers[self._at]
        if mq.ssl is True:  # the old TLS form names the host it verifies in its parameters
            mq.ssl_params["server_hostname"] = mq.server
        self._round_left -= 1
        if self._round_left > 0:
            return True
        self._round_left = n
        return False

    def _connect_failed(self, e):
        """Why a connect failed, in words; printed when it differs from the last time (a
        refused login would otherwise retry in silence for ever)."""
        code = e.args[0] if isinstance(e, mqtt.MQTTException) and e.args else None
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
        self.mq.close()
        was_up = self.up
        self.up = False
        self._inflight_n = 0
        self.last_error = reason
        if self._next_broker():
            self._retry_ms = time.ticks_ms()  # the next broker of this round, at once
        else:
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
            except mqtt.ERRORS as e:
                self._drop(self._connect_failed(e))
                return
        try:
            self._receive()
            if self.mq.dropped_in != self._dropped_in_said:
                self._say_dropped_in()
            now = time.ticks_ms()
            if self._inflight_n:
                if time.ticks_diff(now, self._sent_ms) > PUBACK_TIMEOUT_MS:
                    self._drop("no PUBACK for a batch within %d ms" % PUBACK_TIMEOUT_MS)
                    return
            elif self.up:
                self._check_acks(now)
                if not self.hold and self._batch_due(now, flush):
                    self._send_batch()
            if self.up and not self.mq.keep_alive(now):
                self._drop("nothing from the broker in %d s" % KEEPALIVE_S)
        except mqtt.ERRORS as e:
            self._drop(repr(e))

    def _receive(self):
        """Every packet that has come, up to _MAX_PACKETS_PER_SERVICE of them, whatever their
        kind: PUBLISHes go to _on_message inside check_msg()."""
        mq = self.mq
        for _ in range(_MAX_PACKETS_PER_SERVICE):
            if not self.up:  # a handler dropped the link (a reboot command)
                return
            op = mq.check_msg()
            if op is None:
                return
            if op == _PUBACK and self._inflight_n and mq.ack_pid == self._inflight_pid:
                if self.ring.sent == self._inflight_seq:  # not rewound meanwhile
                    self.ring.sent_to(self._inflight_seq + self._inflight_n)
                    if self._unacked_ms < 0:
                        self._unacked_ms = time.ticks_ms()
                self._inflight_n = 0
            elif op == _SUBACK and mq.ack_pid == self._sub_pid:
                for i in range(mq.granted_n):
                    if mq.granted[i] == _REFUSED:
                        self.log("the broker refused a subscription (relay/set, cmd, ack, %s): "
                                 "check this node's ACL" % self.t_ha_status.decode())
                        break
                if self.read_state:  # its retained state, if the broker has one, came before
                    self._handlers["state"](None)

    def _say_dropped_in(self):
        """Messages the heap could not take (mqtt.py reads them through): said at most once
        a minute, with how many there have been."""
        now = time.ticks_ms()
        if self._dropped_in_said and time.ticks_diff(now, self._dropped_in_ms) < 60000:
            return
        mq = self.mq
        self._dropped_in_said = mq.dropped_in
        self._dropped_in_ms = now
        try:
            self.log("no heap for a %d-byte message on %s: dropped (%d so far); the plug "
                     "runs on" % (mq.dropped_in_bytes, mq.dropped_in_topic.decode(),
                                  mq.dropped_in))
        except MemoryError:
            pass

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
        if not n:
            return  # records on the flash that cannot be read in now: the next pass tries
        seq = ring.sent
        wire.pack_header(self._hdr, 0, n, ring.src_interval_s or self.interval_s, self.boot,
                         seq, ring.dropped, ring.first)
        self.bytes_sent += self.mq.publish_from(self.t_readings, self._hdr, ring.src,
                                                ring.src_off, n * wire.RECORD_SIZE)
        self._inflight_n = n
        self._inflight_seq = seq
        self._inflight_pid = self.mq.pid
        if seq + n > self.sent_top:
            self.sent_top = seq + n
        self._sent_ms = time.ticks_ms()
        self.batches += 1

    # -- acks --------------------------------------------------------------------------------

    def _on_ack(self, msg):
        try:
            kind, ack = wire.parse_ack(msg)
        except wire.AckError as e:
            self._bad_ack("%r is not what the collector sends (%s)" % (bytes(msg[:64]), e))
            return
        if kind == wire.CLOCK:
            self._on_clock(ack)
            return
        boot, seq, resend = ack["boot"], ack["seq"], ack.get("resend", -1)
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
        commit_s = ack.get("commit_s", 0)
        if commit_s and not self._ack_timeout_fixed:
            self.ack_timeout_ms = min(_ACK_TIMEOUT_COMMITS * commit_s, ACK_TIMEOUT_MAX_S) * 1000
        self._handlers["clock"](ack["time"])
        if "energy" in self._handlers:  # -1: the collector holds no total for this node
            self._handlers["energy"](ack.get("energy_wh", -1), ack.get("energy_time", 0))

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

    def publish(self, topic, payload, retain=False, parts=False):
        """QoS 0: nothing to wait for. False (and the link dropped) if it could not be sent.
        parts: the payload is a list of strings, sent as one message written piece by piece
        (a large message without a large block of heap)."""
        if not self.up:
            return False
        try:
            if parts:
                self.mq.publish_parts(topic, payload, retain)
            else:
                self.mq.publish(topic, payload, retain)
            return True
        except mqtt.ERRORS as e:
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
            except mqtt.ERRORS:
                pass
        self.up = False

    def stop_reading_state(self):
        """The energy total is settled: its own state is read no more (batches go again)."""
        self.hold = False
        if self.read_state and self.up:
            try:
                self.mq.unsubscribe(self.t_state)
            except mqtt.ERRORS as e:
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
        elif (topic == self.t_ota_manifest or topic == self.t_ota_chunk) and \
                "ota" in self._handlers:
            self._handlers["ota"](topic, msg)


def brokers(broker):
    """The (host, port) pairs the link tries in turn: broker["host"], one host (on
    broker["port"]), or the list of them config.py makes."""
    host = broker["host"]
    return [(host, broker["port"])] if isinstance(host, str) else host
