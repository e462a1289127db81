"""test_mqtt.py - the node's MQTT client (wattnode.mqtt, umqtt.simple subclassed) and the link's
use of it, against a loopback socket that plays the broker byte for byte.

What is pinned: one service() pass takes in every packet that has come, of any kind, up to 16
(umqtt.simple 1.3.4's wait_msg() returns None after a PUBLISH, which the old link took for
"nothing more": one command a pass, a PUBACK behind a PUBLISH left for the next pass); the link
is judged alive by what it hears, not by what it sends; no socket operation waits longer than
the client's timeout; strings are framed by their UTF-8 length; the loop's idle pass, a PUBACK
and the next batch allocate nothing. A test whose code under test lost its timeout would hang:
that hang (the runner's bound) is its failure."""

import gc
import select
import time
import unittest

import micropython

from wattnode import mqtt
from wattnode.link import KEEPALIVE_S, Link
from wattnode.ring import Ring

from netrig import BOOT, Broker, listener, loopback, packets, publishes
from rig import fill_heap

CFG = {"base_topic": "wattlog", "broker": {"host": "127.0.0.1", "port": 1, "user": None,
                                           "password": None},
       "discovery_prefix": "homeassistant", "batch_max": 8, "batch_wait_s": 0}
CMD = b"wattlog/plug-1/cmd"
RELAY = b"wattlog/plug-1/relay/set"


def publish(topic, payload, qos=0, pid=0):
    """A PUBLISH packet as a broker sends it (remaining length below 128)."""
    body = bytes((len(topic) >> 8, len(topic) & 0xFF)) + topic + \
        (bytes((pid >> 8, pid & 0xFF)) if qos else b"") + payload
    return bytes((0x30 | qos << 1, len(body))) + body


def puback(pid):
    return bytes((0x40, 2, pid >> 8, pid & 0xFF))


class LinkOnLoopback(unittest.TestCase):
    def setUp(self):
        self.client, self.server = loopback()
        self.server.settimeout(2)  # what does not come fails the test, never hangs it
        self.cmds, self.relays = [], []
        self.ring = Ring(64)
        self.link = Link("plug-1", dict(CFG), self.ring, 10, BOOT, lambda n: b"\x00" * n,
                         {"cmd": self.cmds.append, "relay": self.relays.append,
                          "clock": lambda t: None})
        self.link.mq.attach(self.client)  # as connect() leaves it
        self.link.up = True
        self.broker = Broker(self.server)

    def tearDown(self):
        self.client.close()
        self.server.close()

    def arrive(self, data):
        """The broker writes data; returns once it has reached the node's socket."""
        self.server.write(data)
        poller = select.poll()
        poller.register(self.client, select.POLLIN)
        self.assertTrue(poller.poll(2000), "nothing reached the node")
        time.sleep_ms(20)  # the rest of what was written in one go

    def service(self):
        self.link.service(True)
        self.assertTrue(self.link.up, self.link.last_error)

    def next_batch(self):
        """The node's next batch: (packet id, seq, count)."""
        seq, count, pid = self.broker.batch()
        return pid, seq, count


class TestOnePassTakesInEverything(LinkOnLoopback):
    def test_several_commands_waiting_are_handled_in_one_pass(self):
        """A PINGRESP, three commands and a relay switch wait at the broker's end: one pass
        of the loop handles them all (the old link handled one, the PINGRESP ended its pass)."""
        self.arrive(b"\xd0\x00" + publish(CMD, b'{"cmd": "info", "id": 1}')
                    + publish(CMD, b'{"cmd": "info", "id": 2}') + publish(RELAY, b"OFF")
                    + publish(CMD, b'{"cmd": "info", "id": 3}', qos=1, pid=77))
        self.service()
        self.assertEqual(len(self.cmds), 3)
        self.assertEqual(self.relays, [b"OFF"])
        self.assertIn((0x40, b"\x00\x4d"), packets(self.server))  # the QoS 1 one's PUBACK

    def test_a_command_before_a_puback_holds_up_neither(self):
        """A batch is in flight; a command arrives, then its PUBACK: in one pass the command
        is handled, the PUBACK moves the ring on and the next batch goes out."""
        for i in range(16):
            self.ring.append(i * 10, i, i, 23000, 100)
        self.service()
        pid, seq, count = self.next_batch()
        self.assertEqual((seq, count), (0, 8))
        self.arrive(publish(CMD, b'{"cmd": "info"}') + puback(pid))
        self.service()
        self.assertEqual((len(self.cmds), self.ring.sent), (1, 8))
        pid2, seq, count = self.next_batch()
        self.assertEqual((seq, count), (8, 8))
        self.assertNotEqual(pid2, pid)

    def test_a_flood_is_taken_in_sixteen_packets_a_pass(self):
        """20 commands at once: 16 in the first pass, so sampling is never starved, the other
        4 in the next."""
        self.arrive(b"".join(publish(CMD, b"x%d" % i) for i in range(20)))
        self.service()
        self.assertEqual(len(self.cmds), 16)
        self.service()
        self.assertEqual(self.cmds, [b"x%d" % i for i in range(20)])

    def test_a_message_the_heap_cannot_take_is_dropped_and_the_link_stays_in_step(self):
        """A 3000-byte QoS 1 command comes while the heap has about 2 KiB left: it is read
        through and dropped (its PUBACK sent: the broker must not send it again), the log
        says so once, and the small command behind it is taken whole (the old client raised
        MemoryError out of the loop: the plug crashed and reset)."""
        big = bytes((0, len(CMD))) + CMD + b"\x00\x09" + b"x" * 3000  # topic, packet id 9
        n = len(big)
        self.arrive(bytes((0x32, n & 0x7F | 0x80, n >> 7)) + big + publish(CMD, b"small"))
        hold = fill_heap(2048)
        try:
            self.service()
        finally:
            hold = None
            gc.collect()
        self.assertEqual(self.cmds, [b"small"])
        self.assertEqual(self.link.mq.dropped_in, 1)
        got = packets(self.server)
        self.assertIn((0x40, b"\x00\x09"), got)
        logs = publishes(got, b"wattlog/plug-1/log")
        self.assertEqual(logs, [b"no heap for a 3000-byte message on wattlog/plug-1/cmd: "
                                b"dropped (1 so far); the plug runs on"])

    def test_a_refused_subscription_is_said_on_the_log(self):
        """The SUBACK of the node's SUBSCRIBE (told from others by its packet id) refuses one
        of the four topics: the log says so, naming the ACL; another SUBACK is not it."""
        self.link._sub_pid = 7  # as _connect() leaves it
        self.arrive(b"\x90\x06\x00\x08\x00\x80\x00\x00" + b"\x90\x06\x00\x07\x00\x00\x80\x00")
        self.service()
        logs = publishes(packets(self.server), b"wattlog/plug-1/log")
        self.assertEqual(len(logs), 1, logs)
        self.assertIn(b"the broker refused a subscription (relay/set, cmd, ack, "
                      b"homeassistant/status): check this node's ACL", logs[0])


class TestLiveness(LinkOnLoopback):
    def test_a_broker_that_says_nothing_for_a_keepalive_is_dropped_though_sending_works(self):
        """The node sent a moment ago (writes succeed: the broker's TCP end is open), but
        nothing came back for 61 s: the connection is dropped, by what was heard."""
        now = time.ticks_ms()
        self.link.mq.tx_ms = now
        self.link.mq.rx_ms = time.ticks_add(now, -(KEEPALIVE_S * 1000 + 1000))
        self.link.service(True)
        self.assertFalse(self.link.up)
        self.assertEqual(self.link.last_error, "nothing from the broker in %d s" % KEEPALIVE_S)

    def test_a_quiet_broker_is_pinged_though_the_node_keeps_sending_and_its_answer_counts(self):
        """Nothing heard for 16 s while the node keeps publishing: it pings (once), and the
        PINGRESP makes the broker heard again."""
        now = time.ticks_ms()
        mq = self.link.mq
        mq.tx_ms = now
        mq.rx_ms = mq._ping_ms = time.ticks_add(now, -16000)
        self.service()
        self.service()
        self.assertEqual([p for p in packets(self.server) if p[0] == 0xC0], [(0xC0, b"")])
        self.arrive(b"\xd0\x00")
        self.service()
        self.assertTrue(time.ticks_diff(time.ticks_ms(), mq.rx_ms) < 1000)

    def test_a_packet_cut_off_midway_times_out(self):
        """The broker sends the first bytes of a PUBLISH and no more: the read gives up after
        the client's timeout (umqtt.simple's would wait for ever) and the link drops."""
        self.link.mq.timeout_s = 1
        self.link.mq.raw.settimeout(1)
        self.arrive(b"\x30\x20\x00")
        t0 = time.ticks_ms()
        self.link.service(True)
        self.assertFalse(self.link.up)
        self.assertTrue(time.ticks_diff(time.ticks_ms(), t0) < 2500)


class TestNoAllocation(LinkOnLoopback):
    def test_an_idle_pass_a_puback_and_the_next_batch_allocate_nothing(self):
        """The loop calls service() many times a second: an idle pass, a pass that takes in a
        PUBACK and sends the next batch from the ring, allocate nothing."""
        for i in range(24):
            self.ring.append(i * 10, i, i, 23000, 100)
        self.service()  # the first batch; attributes stored for the first time
        pid, _, _ = self.next_batch()
        self.arrive(puback(pid))
        self.service()
        pid, _, _ = self.next_batch()
        self.service()  # idle: the PUBACK has not come
        self.arrive(puback(pid))
        failed = []
        for _ in range(2):  # a PUBACK and the next batch, then an idle pass
            micropython.heap_lock()
            try:
                self.link.service(True)
            except MemoryError as e:
                failed.append(e)
            micropython.heap_unlock()
        self.assertEqual((failed, self.link.up, self.ring.sent), ([], True, 16))
        self.assertEqual(self.next_batch()[1:], (16, 8))


class TestClient(unittest.TestCase):
    def setUp(self):
        self.client, self.server = loopback()
        self.server.settimeout(2)
        self.mq = mqtt.Client("plug-é", "127.0.0.1", 1, "plug", "pässwörd", 60)
        self.mq.attach(self.client)

    def tearDown(self):
        self.client.close()
        self.server.close()
        if hasattr(self, "srv"):
            self.srv.close()

    def test_strings_are_framed_by_their_utf8_length(self):
        """A topic, a message and the parts of a long message with non-ASCII letters (a
        board's name) go out with lengths counted in bytes, so the broker reads them whole."""
        self.mq.publish("wattlog/plug-1/log", "Büro: 23 °C")
        parts = ['{"name": "Steckdose Büro"', ', "model": "Nous A8T – Flur"}']
        self.mq.publish_parts(b"homeassistant/device/plug-1/config", parts, retain=True)
        got = packets(self.server)
        self.assertEqual(publishes(got, b"wattlog/plug-1/log"), ["Büro: 23 °C".encode()])
        self.assertEqual(publishes(got, b"homeassistant/device/plug-1/config"),
                         ["".join(parts).encode()])
        self.assertEqual([p[0] for p in got], [0x30, 0x31])

    def test_the_login_is_framed_in_utf8_and_a_refusal_gives_its_code(self):
        """The CONNECT (connect() sends it once the connection is open) carries client id,
        will, user and password at their byte lengths; a CONNACK that refuses raises
        MQTTException with its code (link.py says which, in words)."""
        self.mq.set_last_will(b"wattlog/plug-1/status", b"offline", retain=True, qos=1)
        self.server.write(b"\x20\x02\x00\x05")  # not authorized
        code = None
        try:
            self.mq._login(True)
        except mqtt.MQTTException as e:
            code = e.args[0]
        self.assertEqual(code, 5)
        first, body = packets(self.server)[0]
        self.assertEqual((first, body[:10]), (0x10, b"\x00\x04MQTT\x04\xee\x00\x3c"))
        fields, at = [], 10
        while at < len(body):
            n = body[at] << 8 | body[at + 1]
            fields.append(body[at + 2:at + 2 + n])
            at += 2 + n
        self.assertEqual(fields, ["plug-é".encode(), b"wattlog/plug-1/status", b"offline",
                                  b"plug", "pässwörd".encode()])

    def test_packet_ids_wrap_past_65535_to_1(self):
        self.mq.pid = 0xFFFF
        self.mq.publish_from(b"t", None, b"x", 0, 1)
        self.assertEqual(self.mq.pid, 1)
        self.assertEqual(packets(self.server)[0], (0x32, b"\x00\x01t\x00\x01x"))

    def test_a_broker_that_never_answers_connect_is_given_up_on(self):
        """The TCP connection is accepted (by the listen backlog) and no CONNACK ever comes:
        connect() raises OSError after the client's timeout."""
        self.srv, port = listener(range(47200, 47300))
        mq = mqtt.Client("plug-1", "127.0.0.1", port, keepalive=60, timeout_s=1)
        t0 = time.ticks_ms()
        with self.assertRaises(OSError):
            mq.connect()
        self.assertTrue(time.ticks_diff(time.ticks_ms(), t0) < 2500)
        mq.close()
