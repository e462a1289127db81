"""test_simclock.py - the simulated clock lands on deadlines exactly, runs fast (or free) from
the past, and ends (or turns real-time) when it reaches the present; free-running, it waits
for the world: paced while the plug's link is down or its energy total unsettled, holding
while the collector has all but an eighth of the RAM ring to acknowledge - unless it has
acknowledged nothing for ACK_PATIENCE_MS (it is away: the spill takes the readings)."""

import time
import unittest

from wattnode import config, start, wire
from wattnode.node import Node
from wattnode.ring import Ring
from wattsim.board import Board
from wattsim.clock import ACK_PATIENCE_MS, FREE, FREE_FALLBACK, RunEnded, SimClock
from rig import board_file, fresh_dir
import scratch

FLASH = scratch.DIR + "/simclock"


def wall_s():
    return int(time.time()) - wire.EPOCH_UNIX


class TestSimClock(unittest.TestCase):
    def test_wait_lands_exactly_on_the_deadline(self):
        """However the host is loaded, node time after wait() is the deadline itself."""
        c = SimClock(int(time.time()) - 3600, speed=100000)
        t = c.time_s()
        for k in range(1, 50):
            c.wait(t + 10 * k, 100)
            self.assertEqual(c.time_s(), t + 10 * k)

    def test_a_short_budget_advances_part_way(self):
        """With a real-time budget too short to reach the deadline, time advances but stays
        before it, so the node loop gets control back in time."""
        c = SimClock(int(time.time()) - 86400, speed=10)
        t = c.time_s()
        c.wait(t + 3600, 5)
        self.assertTrue(t <= c.time_s() < t + 3600)

    def test_fast_run_ends_at_real_time(self):
        """From 20 s ago at 2000x the clock reaches the present within a few waits and ends
        the run as Ctrl-C does (a KeyboardInterrupt: the node sends what it holds first)."""
        c = SimClock(int(time.time()) - 20, speed=2000)
        with self.assertRaises(RunEnded):
            for _ in range(200):
                c.wait(c.time_s() + 1, 100)
        self.assertTrue(c.ended and isinstance(RunEnded(), KeyboardInterrupt))
        self.assertTrue(abs(c.time_s() - wall_s()) <= 2)

    def test_then_realtime_carries_on_at_speed_one(self):
        c = SimClock(int(time.time()) - 20, speed=2000, then_realtime=True)
        for _ in range(200):
            if c.speed() == 1:
                break
            c.wait(c.time_s() + 1, 100)
        self.assertEqual(c.speed(), 1)
        self.assertFalse(c.ended)
        self.assertTrue(abs(c.time_s() - wall_s()) <= 2)

    def test_no_start_means_now_at_real_speed(self):
        c = SimClock()
        self.assertEqual(c.speed(), 1)
        self.assertTrue(abs(c.time_s() - wall_s()) <= 1)

    def test_free_running_jumps_to_each_deadline_without_sleeping(self):
        """A day of 10 s slots takes no real time to speak of (paced at the demo's 3600x it
        takes 24 s), each wait landing on its deadline; then the run ends at the present, or
        with then_realtime goes on at real speed."""
        c = SimClock(int(time.time()) - 86400, speed=FREE)
        t = c.time_s()
        began = time.ticks_ms()
        with self.assertRaises(RunEnded):
            for k in range(1, 8700):
                c.wait(t + 10 * k, 100)
                self.assertEqual(c.time_s(), t + 10 * k)
        self.assertTrue(k >= 8639 and abs(c.time_s() - wall_s()) <= 10, k)
        self.assertTrue(time.ticks_diff(time.ticks_ms(), began) < 8000)
        c = SimClock(int(time.time()) - 86400, speed=FREE, then_realtime=True)
        while c.speed() == FREE:
            c.wait(c.time_s() + 10, 100)
        self.assertEqual(c.speed(), 1)
        self.assertTrue(abs(c.time_s() - wall_s()) <= 2)

    def test_free_running_waits_for_the_network_and_the_collector(self):
        """While the node's link is up and all but an eighth of its ring is unacknowledged,
        node time does not move (real time does, HOLD_MS a wait); an ack that frees the ring
        lets it jump on, and so does a collector that has acknowledged nothing for
        ACK_PATIENCE_MS (away: the readings go to the spill). With the link down it runs on,
        whatever the ring holds (a plug in an outage), but paced (FREE_FALLBACK): a wait of a
        10 s slot's end takes real time."""
        board = board_file("sim")
        cfg = config.check({"node_id": "plug-h", "broker": {"host": "127.0.0.1", "port": 1}})[0]
        fresh_dir(FLASH)
        hw = Board(board, cfg, {"start": int(time.time()) - 3600, "speed": FREE}, FLASH)
        node = Node(cfg, board, hw, [], True, Ring(16))
        node.energy.settle(0, 0)  # a new plug: nothing to resume
        clock = hw.clock
        start.node = node
        try:
            for k in range(14):
                node.ring.append(k, 0, 0, 0, 0)
            node.link.up = True
            t = clock.time_s()
            for _ in range(3):
                clock.wait(t + 10, 100)
            self.assertEqual(clock.time_s(), t)  # held: 14 of 16 await an ack
            node.ring.release(1)
            clock.wait(t + 10, 100)
            self.assertEqual(clock.time_s(), t + 10)  # 13 of 16: on at once
            for k in range(14, 17):
                node.ring.append(k, 0, 0, 0, 0)
            clock.wait(t + 20, 100)
            self.assertEqual(clock.time_s(), t + 10)  # held again: 16 of 16
            clock._acks[1] = time.ticks_add(time.ticks_ms(), -ACK_PATIENCE_MS)
            clock.wait(t + 20, 100)
            self.assertEqual(clock.time_s(), t + 20)  # no ack for so long: the collector is away
            node.link.up = False
            began = time.ticks_ms()
            while clock.time_s() < t + 30:
                clock.wait(t + 30, 100)
            self.assertEqual(clock.time_s(), t + 30)  # no link: nothing to wait for...
            self.assertTrue(time.ticks_diff(time.ticks_ms(), began) >= 10000 // FREE_FALLBACK)
        finally:
            start.node = None
