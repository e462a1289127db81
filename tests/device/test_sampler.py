"""test_sampler.py - one record per aligned slot; power is the slot's energy / length; the energy
counter carries sub-Wh parts; no data is recorded as missing, never as zero."""

import struct
import unittest

import micropython

from wattnode import wire
from wattnode.meters.sim import SimMeter
from wattnode.profiles import Profile, voltage_cv
from wattnode.ring import Ring
from wattnode.sampler import Sampler


class StepClock:
    """Node time the test sets by hand."""

    def __init__(self, t):
        self.t = t

    def time_s(self):
        return self.t


def records(ring):
    return [struct.unpack_from(wire.RECORD_FMT, ring.buf, ring.offset(s))
            for s in range(ring.first, ring.next)]


def rig(profile, start, capacity=8, interval=10):
    """A started sampler measuring a simulated appliance, on a clock the test moves."""
    clock = StepClock(start)
    meter = SimMeter(clock, profile)
    ring = Ring(capacity)
    s = Sampler(meter, ring, interval)
    s.start(start)
    return clock, meter, ring, s


def run(profile, start, slots, interval=10, poll_every=1):
    clock, meter, ring, s = rig(profile, start, max(slots * 2, 4), interval)
    while ring.next < slots:
        clock.t += poll_every
        meter.poll()
        if clock.t >= s.slot_end:
            s.close(clock.t)
    return records(ring), s


class TestSampler(unittest.TestCase):
    def test_slots_are_aligned_and_hold_the_mean(self):
        """A constant 1234.5 W load gives 12345 dW in every slot, stamped at multiples of 10 s."""
        recs, _ = run("constant:1234.5", 1000, 5)
        self.assertEqual([r[0] for r in recs], [1000, 1010, 1020, 1030, 1040])
        self.assertEqual([r[1] for r in recs], [12345] * 5)

    def test_power_is_energy_over_slot_length_whatever_the_polling(self):
        """Polling every 3 s instead of every 1 s changes nothing: each slot's power is the
        mean of the profile's per-second power over exactly that slot."""
        start = 8 * 3600  # the washer's program starts: power changes within slots
        fine, _ = run("washer", start, 30, poll_every=1)
        p = Profile("washer")
        for t, power_dw, _, volts, _ in fine:
            want = sum(p.power_dw(x) for x in range(t, t + 10))
            self.assertEqual(power_dw, (2 * want + 10) // 20)
            self.assertEqual(volts, (sum(voltage_cv(x) for x in range(t, t + 10)) + 5) // 10)
        coarse, _ = run("washer", start, 30, interval=10, poll_every=5)
        self.assertEqual(coarse, fine)

    def test_energy_counter_carries_parts_of_a_wh(self):
        """1000 W for 10 s is 2.78 Wh: after 36 slots the counter shows exactly 100 Wh, and the
        per-slot counter never runs ahead of the energy measured."""
        recs, s = run("constant:1000", 0, 36)
        self.assertEqual(recs[-1][2], 100)
        for k, r in enumerate(recs):
            self.assertEqual(r[2], (k + 1) * 100000 // 36000)
        self.assertEqual(s.energy_wh, 100)

    def test_a_window_without_meter_data_is_missing_not_zero(self):
        """If the meter saw nothing in a slot, every value of that record is the missing mark."""
        clock, meter, ring, s = rig("constant:500", 100)
        clock.t = 110  # the clock moved but the meter was never polled: no observations
        s.close(110)
        t, p, e, v, i = records(ring)[0]
        self.assertEqual((t, p, e, v, i), (100, wire.POWER_MISSING, wire.ENERGY_MISSING,
                                           wire.U16_MISSING, wire.U16_MISSING))

    def test_a_late_close_fills_each_slot_with_the_window_mean(self):
        """Closing 25 s late covers three slots; each gets the same mean, none is skipped."""
        clock, meter, ring, s = rig("constant:200", 0)
        clock.t = 30
        meter.poll()
        self.assertEqual(s.close(30), 3)
        self.assertEqual([(r[0], r[1]) for r in records(ring)], [(0, 2000), (10, 2000), (20, 2000)])
        self.assertEqual(s.slot_end, 40)

    def test_a_partial_first_slot_is_the_mean_of_what_was_measured(self):
        """Starting 4 s into a slot, the first record is stamped at the slot start and holds
        the mean over the 6 s measured, not 6/10 of it."""
        recs, _ = run("constant:100", 1004, 2)
        self.assertEqual([(r[0], r[1]) for r in recs], [(1000, 1000), (1010, 1000)])

    def test_sampling_allocates_nothing(self):
        """Steady-state sampling - meter poll, slot close, ring append - runs with the heap
        locked, through a washer program. (The unix port's small ints are 63-bit, so this
        cannot see the ESP32's 31-bit limit; the sampler keeps every quantity below 2**30 by
        design: times from 2020, energy in dJ per window, the counter in Wh.)"""
        clock, meter, ring, s = rig("washer", 8 * 3600)
        for _ in range(3):  # first slots: attribute stores that happen once
            clock.t += 10
            meter.poll()
            s.close(clock.t)
        failed = 0
        micropython.heap_lock()
        try:
            for _ in range(600):
                clock.t += 10
                meter.poll()
                s.close(clock.t)
        except MemoryError:
            failed = 1
        micropython.heap_unlock()
        self.assertEqual(failed, 0)
        self.assertEqual(ring.next, 603)
