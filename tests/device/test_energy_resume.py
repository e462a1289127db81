"""test_energy_resume.py - after a power cut the node publishes no energy total lower than the
last one it published before (issue 10 item 1): it holds its state and readings until its
total is settled, resumes from the highest of its flash checkpoint, its own state retained by
the broker and the collector's total, and raises the readings it took meanwhile to match.
A real Node on the simulated board; its link's socket is a loopback whose far end plays the
broker, so every byte the node sends is seen."""

import json
import os
import select
import time
import unittest

from wattnode import config, node as nodemod, wire
from wattnode.energy import EnergyStore
from wattsim.board import Board
from wattnode.link import Link
from wattnode.node import Node
from wattnode.ring import Ring

from rig import board_file, fresh_dir, need_sockets
from netrig import loopback, packets, publishes
import scratch

FLASH = scratch.DIR + "/resume"
START = 1795000000                 # node time, unix seconds (a multiple of 10)
CUT_WH = 24011                     # the last total published before the cut
CHECKPOINT_WH = 18008              # the flash checkpoint, 2 h older


def batch_energies(pkts):
    got = []
    for payload in publishes(pkts, b"wattlog/plug-1/readings"):
        count = wire.decode_header(payload)[0]
        got += [wire.unpack_record(payload, i)[2] for i in range(count)]
    return got


class TestEnergyResume(unittest.TestCase):
    def setUp(self):
        need_sockets()
        self.cwd = os.getcwd()
        self.board = board_file("sim")
        fresh_dir(FLASH)
        os.chdir(FLASH)

    def tearDown(self):
        os.chdir(self.cwd)
        for s in (self.client, self.server):
            s.close()

    def boot(self, checkpoint_wh=None):
        """A node booting as after a power cut (no RTC memory), with the flash checkpoint
        written 2 h ago, or none; its link up on the loopback."""
        if checkpoint_wh is not None:
            with open("energy.json", "w") as f:
                json.dump({"wh": checkpoint_wh, "rem_dj": 0, "writes": 1,
                           "time": START - wire.EPOCH_UNIX - 7200}, f)
        cfg = config.check({"node_id": "plug-1", "broker": {"host": "127.0.0.1", "port": 1}})[0]
        hw = Board(self.board, cfg, {"profile": "constant:3000", "start": START}, FLASH)
        node = Node(cfg, self.board, hw, [], True, Ring(64))
        self.client, self.server = loopback()
        self.server.settimeout(2)
        node.link.mq.attach(self.client)
        node.link.up = True
        self.clock = node.hw.clock
        node._begin(node.keeper.now(), self.clock.ticks_ms())
        return node

    def measure(self, node, seconds):
        """The loop's sampling part, second by second: slots closed, state published."""
        for _ in range(seconds):
            self.clock.advance_ms(1000)
            node.meter.poll()
            now = node.keeper.now()
            if now >= node.sampler.slot_end:
                node.sampler.close(now, self.clock.ticks_ms())
                node.energy.slot(node.sampler.energy_wh, node.sampler.rem_dj, now)
                node.publish_state(True)
            node.link.service(True, flush=True)  # at once: no batch may wait unseen

    def state(self, wh, unix_s):
        return json.dumps({"time": unix_s, "power": 3000.0, "voltage": 230.0, "current": 13.0,
                           "energy": wh / 1000, "relay": "ON"}).encode()

    def test_nothing_lower_goes_out_and_the_total_resumes_from_the_highest(self):
        """3 kW, cut 2 h after the last checkpoint (18.008 kWh) at 24.011 kWh. A minute
        measured before the broker and the collector are heard: no state, no batch. Then the
        retained state (24.011) and the collector's older total (23.990): the total goes on
        from 24.011 plus the minute, the held readings are raised to match, and every total
        published after is at least 24.011."""
        node = self.boot(CHECKPOINT_WH)
        self.assertEqual((node.energy.source, node.link.hold, node.link.read_state),
                         ("checkpoint", True, True))
        self.measure(node, 60)
        held = node.ring.next
        counted = node.sampler.energy_wh - CHECKPOINT_WH
        self.assertTrue(held >= 5 and 45 <= counted <= 55, (held, counted))
        before = packets(self.server)
        self.assertEqual(publishes(before, b"wattlog/plug-1/state"), [])
        self.assertEqual(batch_energies(before), [])
        node.on_own_state(self.state(CUT_WH, START - 10))
        node.on_own_state(None)                      # the broker has no more: wait on
        self.assertFalse(node.energy.settled)
        node.on_energy(CUT_WH - 21, START - 40)     # the collector's answer settles it
        self.assertEqual(node.sampler.energy_wh, CUT_WH + counted)
        self.assertEqual(node.status()["energy_from"], "state")
        self.measure(node, 20)
        after = packets(self.server)
        states = [json.loads(p)["energy"] for p in publishes(after, b"wattlog/plug-1/state")]
        energies = batch_energies(after)
        self.assertTrue(states and min(states) >= CUT_WH / 1000, states)
        self.assertEqual(len(energies), held)  # the held ones, in the batch now in flight
        self.assertTrue(energies[0] > CUT_WH and energies == sorted(energies), energies)
        unsubscribe = [b[2:] for first, b in after if first == 0xA2]  # after the packet id
        self.assertEqual(unsubscribe, [b"\x00\x14wattlog/plug-1/state"])
        logs = publishes(after, b"wattlog/plug-1/log")
        said = [m for m in logs if m.startswith(b"power cut: the energy total resumed from "
                                                b"its last state the broker retained (24.011")]
        self.assertEqual(len(said), 1, logs)
        # from the state's time (10 s before boot, 60 s measured), not the checkpoint's
        self.assertIn(b"at most %d Wh, 70 s at up to 3680 W" % (3680 * 70 // 3600), said[0])

    def test_a_new_plug_starts_at_zero_once_the_broker_shows_it_has_no_state(self):
        node = self.boot()
        self.assertEqual((node.energy.source, node.energy.settled), ("none", False))
        self.measure(node, 30)
        node.on_own_state(None)
        self.assertTrue(node.energy.settled)
        self.assertFalse(node.link.hold)
        self.measure(node, 10)
        self.assertTrue(publishes(packets(self.server), b"wattlog/plug-1/state"))

    def test_a_reflashed_plug_resumes_from_its_retained_state(self):
        """No total of its own (a new flash) but the broker retains its state: it waits for
        the collector, and resumes from the state when SETTLE_MS pass without an answer."""
        node = self.boot()
        self.measure(node, 30)
        node.on_own_state(self.state(5000, START))
        node.on_own_state(None)
        node._settle_when_due()                       # the link is up: the wait starts
        self.assertFalse(node.energy.settled)
        node._settle_ms = time.ticks_add(time.ticks_ms(), -nodemod.SETTLE_MS)
        node._settle_when_due()
        self.assertTrue(node.energy.settled)
        self.assertTrue(node.sampler.energy_wh >= 5000)
        logs = publishes(packets(self.server), b"wattlog/plug-1/log")
        self.assertTrue([m for m in logs if b"no answer from the collector in 60 s" in m], logs)
        self.assertTrue([m for m in logs if m.startswith(b"no total on this flash")], logs)

    def test_a_clean_stop_before_anything_was_heard_sends_nothing_lower(self):
        """Stopped before the broker said anything: it sends nothing, writes no energy total
        to RTC memory (the next boot is still unsettled; keep.py's readings are there) and
        checkpoints what it counted, a lower bound."""
        node = self.boot(CHECKPOINT_WH)
        self.measure(node, 30)
        node.drain()
        pkts = packets(self.server)
        self.assertEqual(publishes(pkts, b"wattlog/plug-1/state"), [])
        self.assertEqual(batch_energies(pkts), [])
        again = EnergyStore(Board(self.board, sim={}, flash_dir=".").rtc)
        again.load()
        self.assertEqual((again.source, again.settled), ("checkpoint", False))
        with open("energy.json") as f:
            self.assertTrue(json.load(f)["wh"] > CHECKPOINT_WH)


class TestOwnStateSubscription(unittest.TestCase):
    """The link's side: its own state is subscribed first, so the broker's retained state
    comes before the main SUBACK; after stop_reading_state() it is unsubscribed and no
    longer handed on; the collector's clock answer carries its energy total."""

    def setUp(self):
        self.client, self.server = loopback()
        self.server.settimeout(2)
        self.heard = []
        cfg = {"base_topic": "wattlog", "broker": {"host": "127.0.0.1", "port": 1, "user": None,
                                                   "password": None},
               "discovery_prefix": "homeassistant", "batch_max": 8, "batch_wait_s": 0}
        self.link = Link("plug-1", cfg, Ring(16), 10, 1, lambda n: b"\x00" * n,
                         {"clock": self.heard.append, "state": self.heard.append,
                          "energy": lambda wh, t: self.heard.append((wh, t))})
        self.link.mq.attach(self.client)
        self.link.up = True
        self.link.read_state = self.link.hold = True
        self.link._sub_pid = 1  # as _connect() leaves it (the state's SUBSCRIBE is 2 here)

    def tearDown(self):
        self.client.close()
        self.server.close()

    def deliver(self, data):
        """The broker writes data; the node's loop runs once (one pass takes in every packet
        that has come, up to 16)."""
        self.server.write(data)
        poller = select.poll()
        poller.register(self.client, select.POLLIN)
        self.assertTrue(poller.poll(2000))
        self.link.service(True)
        self.assertTrue(self.link.up, self.link.last_error)

    def publish(self, topic, payload):
        n = 2 + len(topic) + len(payload)
        return bytes((0x31, n, 0, len(topic))) + topic + payload

    def test_the_retained_state_then_the_main_suback_then_unsubscribed(self):
        t = b"wattlog/plug-1/state"
        self.deliver(b"\x90\x03\x00\x02\x00" + self.publish(t, b'{"energy": 1.5}')
                     + b"\x90\x06\x00\x01\x00\x00\x00\x00")
        self.assertEqual(self.heard, [b'{"energy": 1.5}', None])
        self.link.stop_reading_state()
        unsubscribed = [b[2:] for first, b in packets(self.server) if first == 0xA2]
        self.assertIn(b"\x00\x14" + t, unsubscribed)  # after the packet id
        self.assertFalse(self.link.hold)
        self.deliver(b"\xb0\x02\x00\x03" + self.publish(t, b'{"energy": 1.6}'))
        self.assertEqual(len(self.heard), 2)  # its own echo is not handed on

    def test_the_clock_answer_carries_the_collector_s_energy(self):
        ack = b'{"time": 1700000000, "clock": true, "commit_s": 5, "energy_wh": 24011, ' \
              b'"energy_time": 1699999990}'
        self.deliver(self.publish(b"wattlog/plug-1/ack", ack))
        self.assertEqual(self.heard, [1700000000, (24011, 1699999990)])
        self.deliver(self.publish(b"wattlog/plug-1/ack", b'{"time": 1700000000, "clock": true}'))
        self.assertEqual(self.heard[2:], [1700000000, (-1, 0)])  # it holds none: -1
        for bad in (b'"x"', b"-5", b"2147483648"):
            self.deliver(self.publish(b"wattlog/plug-1/ack",
                                      b'{"time": 1, "clock": true, "energy_wh": ' + bad + b"}"))
        self.assertEqual((len(self.heard), self.link.bad_acks), (4, 3))
