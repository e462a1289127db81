"""test_simclock.py - the simulated clock lands on deadlines exactly, runs fast from the past,
and ends (or turns real-time) when it reaches the present."""

import time
import unittest

from wattnode import wire
from wattnode.hw.sim import SimClock


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
        """From 20 s ago at 2000x the clock reaches the present within a few waits and ends."""
        c = SimClock(int(time.time()) - 20, speed=2000)
        for _ in range(200):
            if c.ended():
                break
            c.wait(c.time_s() + 1, 100)
        self.assertTrue(c.ended())
        self.assertTrue(abs(c.time_s() - wall_s()) <= 2)

    def test_then_realtime_carries_on_at_speed_one(self):
        c = SimClock(int(time.time()) - 20, speed=2000, then_realtime=True)
        for _ in range(200):
            if c.speed() == 1:
                break
            c.wait(c.time_s() + 1, 100)
        self.assertEqual(c.speed(), 1)
        self.assertFalse(c.ended())
        self.assertTrue(abs(c.time_s() - wall_s()) <= 2)

    def test_no_start_means_now_at_real_speed(self):
        c = SimClock()
        self.assertEqual(c.speed(), 1)
        self.assertTrue(abs(c.time_s() - wall_s()) <= 1)
