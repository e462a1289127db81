"""test_link_acks.py - the node sends again what the broker accepted but the collector's acks
do not cover (issue 9 item 10: mosquitto PUBACKs a batch it then drops for a collector whose
queue is full). The link runs against a loopback socket that plays the broker: it reads the
node's PUBLISH packets, answers PUBACKs and delivers acks; the clock of the ack timeout is
passed in, so no test waits."""

import json
import select
import time
import unittest

import micropython

from wattnode import wire
from wattnode.link import Link
from wattnode.ring import Ring

from netrig import BOOT, Broker, loopback

CFG = {"base_topic": "wattlog", "broker": {"host": "127.0.0.1", "port": 1, "user": None,
                                           "password": None},
       "discovery_prefix": "homeassistant", "batch_max": 8, "batch_wait_s": 600}


class TestLinkAcks(unittest.TestCase):
    def setUp(self):
        self.client, server = loopback()
        server.settimeout(2)  # a batch that does not come fails the test, never hangs it
        self.broker = Broker(server)
        self.ring = Ring(64)
        self.clock = []
        handlers = {"clock": self.clock.append}
        self.link = self.make_link(dict(CFG), handlers)
        for i in range(8):
            self.ring.append(i * 10, i, i, 23000, 100)

    def make_link(self, cfg, handlers):
        link = Link("plug-1", cfg, self.ring, 10, BOOT, lambda n: b"\x00" * n, handlers)
        link.mq.attach(self.client)  # as connect() leaves it
        link.up = True
        return link

    def tearDown(self):
        self.client.close()
        self.broker.sock.close()

    def service(self):
        """One pass of the node's loop over the link; it must not have dropped the link."""
        self.link.service(True)
        self.assertTrue(self.link.up, self.link.last_error)

    def deliver(self):
        """Once what the broker wrote has reached the node's socket (at most 2 s), one pass."""
        poller = select.poll()
        poller.register(self.client, select.POLLIN)
        self.assertTrue(poller.poll(2000), "nothing reached the node")
        self.service()

    def send_and_accept(self):
        """The link sends its due batch and the broker PUBACKs it: (seq, count)."""
        self.service()
        seq, count, pid = self.broker.batch()
        self.broker.puback(pid)
        self.deliver()
        return seq, count

    def ack(self, **fields):
        self.broker.ack(**fields)
        self.deliver()

    def lacking_logs(self):
        return [m for m in self.broker.logs if b"the collector lacks readings" in m]

    def test_a_commit_ack_that_repeats_its_seq_sends_accepted_records_again(self):
        """The broker accepted records 0..7; two commits ack only 4: the node sends 4..7 again
        at once (though 4 records are fewer than batch_max and batch_wait_s is 10 minutes),
        says so once on its log topic, and frees nothing it should not."""
        self.assertEqual(self.send_and_accept(), (0, 8))
        self.ack(boot=BOOT, seq=4, time=1)
        self.assertEqual((self.ring.first, self.ring.sent), (4, 8))
        self.ack(boot=BOOT, seq=4, time=2)       # a commit went by without 4..7
        self.assertEqual(self.ring.sent, 4)
        self.assertEqual(self.send_and_accept(), (4, 4))
        self.assertEqual(len(self.lacking_logs()), 1)
        self.assertIn(b"from seq 4 that the broker accepted (a commit went by without them)",
                      self.lacking_logs()[0])
        self.ack(boot=BOOT, seq=4, time=3)       # the resend came after that commit: wait one
        self.assertEqual(self.ring.sent, 8)
        self.ack(boot=BOOT, seq=4, time=4)       # and another commit without them: again
        self.assertEqual(self.ring.sent, 4)
        self.assertEqual(self.send_and_accept(), (4, 4))
        self.assertEqual(len(self.lacking_logs()), 1)  # said once, not per rewind
        self.ack(boot=BOOT, seq=8, time=5)
        self.assertEqual((self.ring.first, self.ring.sent, self.link.resends), (8, 8, 2))

    def test_repeated_acks_alone_send_nothing_again(self):
        """A repeated seq is a stall only if the broker had accepted records from it before
        the previous ack came; a resend request is no commit."""
        self.ack(boot=BOOT, seq=0, time=1)
        self.assertEqual(self.send_and_accept(), (0, 8))   # accepted after that ack
        self.ack(boot=BOOT, seq=0, time=2)
        self.assertEqual(self.ring.sent, 8)
        self.ack(boot=BOOT, seq=0, resend=0, time=3)      # asked: rewound, as always
        self.assertEqual((self.ring.sent, self.link.resends), (0, 1))
        self.assertEqual(self.send_and_accept(), (0, 8))
        self.ack(boot=BOOT, seq=0, resend=0, time=3)      # asked again: no commit either
        self.assertEqual(self.send_and_accept(), (0, 8))
        self.ack(boot=BOOT, seq=8, time=4)
        self.ack(boot=BOOT, seq=8, time=5)
        self.assertEqual((self.ring.first, self.ring.sent, self.link.resends), (8, 8, 2))
        self.assertEqual(self.lacking_logs(), [])

    def test_accepted_records_without_an_ack_are_sent_again_after_three_commit_intervals(self):
        """The collector says it commits every 5 s: records the broker accepted and nobody
        acknowledged are sent again after 15 s, then after 30 s, 60 s, ... (16 x at most);
        an ack that frees records brings the wait back to 15 s. Checking allocates nothing."""
        self.ack(time=1700000000, clock=True, commit_s=5)
        self.assertEqual((self.clock, self.link.ack_timeout_ms), ([1700000000], 15000))
        self.assertEqual(self.send_and_accept(), (0, 8))
        since = self.link._unacked_ms
        failed = 0
        micropython.heap_lock()
        try:
            self.link._check_acks(time.ticks_add(since, 15000))
        except MemoryError:
            failed = 1
        micropython.heap_unlock()
        self.assertEqual((failed, self.ring.sent), (0, 8))
        self.link._check_acks(time.ticks_add(since, 15001))
        self.assertEqual(self.ring.sent, 0)
        self.assertEqual(self.send_and_accept(), (0, 8))  # at once, though batch_wait_s is 600
        self.assertIn(b"(no ack for them in 15 s)", self.lacking_logs()[0])
        since = self.link._unacked_ms
        self.link._check_acks(time.ticks_add(since, 30000))
        self.assertEqual(self.ring.sent, 8)               # the wait has doubled
        self.link._check_acks(time.ticks_add(since, 30001))
        self.assertEqual(self.ring.sent, 0)
        self.assertEqual(self.send_and_accept(), (0, 8))
        for _ in range(6):                                # at most 16 x 15 s
            self.link._check_acks(time.ticks_add(self.link._unacked_ms, 16 * 15000 + 1))
            self.assertEqual(self.ring.sent, 0)
            self.assertEqual(self.send_and_accept(), (0, 8))
        self.assertEqual(len(self.lacking_logs()), 1)
        self.ack(boot=BOOT, seq=4, time=2)                # the collector is storing again
        since = self.link._unacked_ms
        self.assertEqual(self.link._ack_backoff, 0)
        self.link._check_acks(time.ticks_add(since, 15001))
        self.assertEqual(self.send_and_accept(), (4, 4))
        self.assertEqual(len(self.lacking_logs()), 2)     # a new stall is said again

    def test_the_ack_timeout_comes_from_the_collector_or_the_config(self):
        """Until the collector says its commit interval the timeout is 900 s; ack_timeout_s
        in config.json wins over what the collector says; a clock answer with a commit_s
        that is not a number of seconds is refused whole (counted, said on the log)."""
        self.assertEqual(self.link.ack_timeout_ms, 900000)
        self.ack(time=1700000000, clock=True, commit_s=300)
        self.assertEqual(self.link.ack_timeout_ms, 900000)
        self.ack(time=1700000000, clock=True, commit_s=86400)
        self.assertEqual(self.link.ack_timeout_ms, 28800000)  # at most 8 h
        self.ack(time=1700000001, clock=True, commit_s="300")
        self.ack(time=1700000002, clock=True, commit_s=-5)
        self.assertEqual((self.clock, self.link.bad_acks), ([1700000000] * 2, 2))
        fixed = self.make_link(dict(CFG, ack_timeout_s=60), {"clock": self.clock.append})
        self.assertEqual(fixed.ack_timeout_ms, 60000)
        fixed._on_ack(json.dumps({"time": 1700000003, "clock": True, "commit_s": 5}).encode())
        self.assertEqual(fixed.ack_timeout_ms, 60000)
