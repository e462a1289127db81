"""test_sampler.py - one record per aligned slot; power is the slot's energy / length; the energy
counter carries sub-Wh parts; no data is recorded as missing, never as zero."""

import struct
import unittest

import micropython

from wattnode import wire
from wattnode.ring import Ring
from wattnode.sampler import Sampler
from wattsim.meter import SimMeter
from wattsim.profiles import Profile, voltage_cv
import scratch


class StepClock:
    """Node time the test sets by hand; the tick counter starts at 0 (small ints on a 32-bit
    port too, whatever t is)."""

    def __init__(self, t):
        self.t = t
        self._t0 = t

    def time_s(self):
        return self.t

    true_s = time_s

    def time_ms(self):
        return (self.t - self._t0) * 1000

    def ticks_ms(self):
        return ((self.t - self._t0) * 1000) & 0x3FFFFFFF


def records(ring):
    return [struct.unpack_from(wire.RECORD_FMT, ring.buf, ring.offset(s))
            for s in range(ring.first, ring.next)]


def rig(profile, start, capacity=8, interval=10, clock=None):
    """A started sampler measuring a simulated appliance, on a clock the test moves (a
    StepClock unless one is given)."""
    clock = clock or StepClock(start)
    meter = SimMeter(clock, profile)
    ring = Ring(capacity)
    s = Sampler(meter, ring, interval)
    s.start(start, clock.ticks_ms())
    return clock, meter, ring, s


def run(profile, start, slots, interval=10, poll_every=1):
    clock, meter, ring, s = rig(profile, start, max(slots * 2, 4), interval)
    while ring.next < slots:
        clock.t += poll_every
        meter.poll()
        if clock.t >= s.slot_end:
            s.close(clock.t, clock.ticks_ms())
    return records(ring), s


class MsClock:
    """Node time in ms the test moves, from t0 (unix-like seconds) on: the node's loop in
    real time wakes every LOOP_MS, within seconds."""

    def __init__(self, t0):
        self.t0 = t0
        self.ms = 0

    def time_s(self):
        return self.t0 + self.ms // 1000

    true_s = time_s

    def time_ms(self):
        return self.ms

    def ticks_ms(self):
        return self.ms & 0x3FFFFFFF


def run_ms(profile, start, slots, every_ms, interval=10):
    """run() polling every every_ms of node time, closing at each slot's end exactly (as the
    node's clock wait() makes it)."""
    clock, meter, ring, s = rig(profile, start, slots * 2, interval, MsClock(start))
    while ring.next < slots:
        end_ms = (s.slot_end - start) * 1000
        clock.ms = min(clock.ms + every_ms, end_ms)
        meter.poll()
        if clock.time_s() >= s.slot_end:
            s.close(clock.time_s(), clock.ticks_ms())
    return records(ring)


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

    def test_polls_within_a_second_count_each_second_once(self):
        """In real time the node's loop polls every LOOP_MS, so the meter sees parts of
        seconds: through the washer's drum (150 W for 12 s, 30 W for 8 s) polls every 100 ms
        or 700 ms give the records that whole-second polls give, each slot's mean voltage and
        current those of its own ten seconds (the first second of a window counted once)."""
        start = 8 * 3600 + 1700
        p = Profile("washer")
        runs = [run_ms("washer", start, 12, every_ms) for every_ms in (1000, 100, 700)]
        for t, _, _, volts, amps in runs[0]:
            v = [voltage_cv(x) for x in range(t, t + 10)]
            i = [p.current_ma(p.power_dw(x), y) for x, y in zip(range(t, t + 10), v)]
            self.assertEqual((volts, amps), ((sum(v) + 5) // 10, (sum(i) + 5) // 10))
        self.assertEqual(runs[1], runs[0])
        self.assertEqual(runs[2], runs[0])

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
        s.close(110, clock.ticks_ms())
        t, p, e, v, i = records(ring)[0]
        self.assertEqual((t, p, e, v, i), (100, wire.POWER_MISSING, wire.ENERGY_MISSING,
                                           wire.U16_MISSING, wire.U16_MISSING))

    def test_a_late_close_fills_each_slot_with_the_window_mean(self):
        """Closing 25 s late covers three slots; each gets the same mean, none is skipped."""
        clock, meter, ring, s = rig("constant:200", 0)
        clock.t = 30
        meter.poll()
        self.assertEqual(s.close(30, clock.ticks_ms()), 3)
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
            s.close(clock.t, clock.ticks_ms())
        failed = 0
        micropython.heap_lock()
        try:
            for _ in range(600):
                clock.t += 10
                meter.poll()
                s.close(clock.t, clock.ticks_ms())
        except MemoryError:
            failed = 1
        micropython.heap_unlock()
        self.assertEqual(failed, 0)
        self.assertEqual(ring.next, 603)


class Steppy(StepClock):
    """Physical time t (what the meter and the tick counter follow) and a wall clock that can
    be stepped or not yet known, as a plug's RTC before and after NTP."""

    def __init__(self, t):
        super().__init__(t)
        self.offset = 0     # wall = physical + offset

    def wall(self):
        return self.t + self.offset


def steppy_rig(watts=500, start=10000):
    clock = Steppy(start)
    meter = SimMeter(clock, "constant:%d" % watts)
    ring = Ring(512)
    return clock, meter, ring, Sampler(meter, ring, 10)


def tick(clock, meter, s, seconds):
    for _ in range(seconds):
        clock.t += 1
        meter.poll()
        if clock.wall() >= s.slot_end:
            s.close(clock.wall(), clock.ticks_ms())


class TestClockSteps(unittest.TestCase):
    def test_a_forward_step_gives_one_record_not_a_run_of_invented_slots(self):
        clock, meter, ring, s = steppy_rig()
        s.start(clock.wall(), clock.ticks_ms())
        tick(clock, meter, s, 60)
        before = ring.next
        clock.offset += 3600  # NTP corrects a clock that was an hour slow
        tick(clock, meter, s, 10)
        stamps = [r[0] for r in records(ring)]
        self.assertEqual(ring.next - before, 1)
        self.assertEqual(stamps[-1] - stamps[-2], 3610)
        self.assertEqual(records(ring)[-1][1], 5000)  # still 500 W: the window was 10 s long

    def test_a_backward_step_never_duplicates_and_loses_no_energy(self):
        clock, meter, ring, s = steppy_rig()
        s.start(clock.wall(), clock.ticks_ms())
        t0 = clock.ticks_ms()
        tick(clock, meter, s, 60)
        last = records(ring)[-1][0]
        clock.offset -= 45
        tick(clock, meter, s, 120)
        stamps = [r[0] for r in records(ring)]
        self.assertEqual(stamps, sorted(set(stamps)))  # strictly increasing: no duplicates
        after = [r for r in records(ring) if r[0] > last]
        self.assertEqual(after[0][1], 5000)            # the merged window's mean is still 500 W
        closed_s = (s._from_ticks - t0) // 1000      # up to the last close, every joule:
        self.assertEqual(s.energy_wh * 36000 + s.rem_dj, 5000 * closed_s)

    def test_readings_before_the_first_sync_are_stamped_once_time_is_known(self):
        """95 s of metering with no wall time, then NTP: the window since boot lands on the
        slots it covered, each with its mean, none invented before boot."""
        clock, meter, ring, s = steppy_rig()
        boot = clock.ticks_ms()
        meter.take()
        for _ in range(95):
            clock.t += 1
            meter.poll()
        clock.offset = 1795000003 - 1577836800 - clock.t  # the clock is set: wall is now known
        s.start(clock.wall(), clock.ticks_ms(), held_since=boot)
        self.assertEqual(s.close(clock.wall(), clock.ticks_ms()), 10)  # 8 s into a slot: 10 touched
        stamps = [r[0] for r in records(ring)]
        self.assertEqual(stamps[0], (clock.wall() - 95) // 10 * 10)
        self.assertEqual(stamps[-1], (clock.wall() // 10 - 1) * 10)
        self.assertEqual(set(r[1] for r in records(ring)), {5000})
        tick(clock, meter, s, 30)
        stamps = [r[0] for r in records(ring)]
        self.assertEqual(stamps, list(range(stamps[0], stamps[-1] + 1, 10)))  # no gap, no repeat


class TestTimeKeeper(unittest.TestCase):
    def board(self, **sim):
        from wattsim.board import Board
        sim.update(start=1795000000)
        return Board({"chip": "sim"}, sim=sim, flash_dir=scratch.DIR)

    def test_the_collector_s_clock_makes_an_unknown_time_known_and_nothing_more(self):
        from wattnode.clock import TimeKeeper
        now = 1795000000 - wire.EPOCH_UNIX
        hw = self.board(ntp_after_s=10 ** 9)
        k = TimeKeeper(hw, None)
        self.assertEqual((k.known, k.now()), (False, -1))
        self.assertTrue(k.set_from_collector(now))
        self.assertEqual((k.known, k.source, k.now()), (True, "collector", now))
        self.assertFalse(k.set_from_collector(now + 30))     # known: not stepped for 30 s
        self.assertEqual((k.now(), k.disagreement_s), (now, 0))
        self.assertFalse(k.set_from_collector(now + 86400))  # a day off: reported only
        self.assertEqual((k.now(), k.disagreement_s), (now, 86400))

    def test_with_an_ntp_server_the_collector_waits_its_turn(self):
        """NTP wakes at 95 s (answering the 120 s retry): the collector's time, which came at
        once, is not used. If NTP never answers, the collector's time is used after the grace,
        advanced by the wait."""
        from wattnode.clock import NTP_GRACE_S, TimeKeeper
        now = 1795000000 - wire.EPOCH_UNIX
        hw = self.board(ntp_after_s=95)
        k = TimeKeeper(hw, "ntp.lan")
        self.assertFalse(k.set_from_collector(now))
        self.assertFalse(k.known)
        for _ in range(NTP_GRACE_S + 10):
            hw.clock.advance_ms(1000)
            k.service(True)
        self.assertEqual((k.known, k.source), (True, "ntp"))
        hw = self.board(ntp_after_s=10 ** 9)
        k = TimeKeeper(hw, "ntp.lan")
        self.assertFalse(k.set_from_collector(now + 7))
        for _ in range(NTP_GRACE_S + 1):
            hw.clock.advance_ms(1000)
            k.service(True)
        self.assertEqual((k.known, k.source), (True, "collector"))
        self.assertEqual(k.now(), now + 7 + NTP_GRACE_S + 1)


class TestFirstSlot(unittest.TestCase):
    """The first slot after a boot covers only part of its interval, from the boot to the
    slot's end: its mean is the energy over that part's true length (milliseconds), within 1 %
    of a constant load however far into the slot and into its second the boot falls, on the
    simulated board and each simulated chip with its driver (which the node polls at its
    rhythm). It was +14 to +50 %: the span was rounded to whole seconds, and the simulated
    board counted the energy from the whole second before the boot."""

    def first_slot_w(self, board, boot_ms):
        from rig import Rig
        from wattnode import meters
        from wattnode.calib import Calibration
        r = Rig(board, "constant:1234.5")  # powered on at the start of a slot
        clock = r.clock
        clock.advance_ms(boot_ms)  # the node boots this far into the slot: its meter starts
        meter = meters.create(r.board, r.hw, Calibration())
        meter.poll()
        ring = Ring(4)
        s = Sampler(meter, ring, 10)
        s.start(clock.time_s(), clock.ticks_ms())
        step_ms = meter.poll_ms or 100  # the node's loop passes at least every LOOP_MS
        while ring.next == 0:
            clock.advance_ms(step_ms)
            meter.poll()
            if clock.time_s() >= s.slot_end:
                s.close(clock.time_s(), clock.ticks_ms())
        return records(ring)[0][1] / 10

    def test_the_first_slot_is_the_mean_over_its_true_length(self):
        for board in ("sim", "devkit-bl0937", "devkit-cse7766", "devkit-bl0942"):
            for boot_ms in (700, 3350, 6920):
                w = self.first_slot_w(board, boot_ms)
                self.assertTrue(abs(w - 1234.5) <= 12.345, "%s, boot at %d ms: %.1f W"
                                % (board, boot_ms, w))


class TestInterrupted(unittest.TestCase):
    def test_a_ctrl_c_between_two_records_repeats_no_slot(self):
        """A close that spans three slots (a loop held up) is cut by a KeyboardInterrupt after
        its first record (Ctrl-C at the REPL, or a simulated plug stopped mid-catch-up): the
        plug carries on (repl.start()), and the next close appends the slots that were not,
        none twice; last_slot is the last record appended, so a status's readings equal its
        slots (a status once said 2479 readings for 2478 slots)."""
        clock, meter, ring, s = rig("constant:500", 1795000000, capacity=16)
        real, calls = ring.append, [0]

        def append(*fields):
            real(*fields)
            calls[0] += 1
            if calls[0] == 2:
                raise KeyboardInterrupt
        ring.append = append
        clock.t += 10
        s.close(clock.t, clock.ticks_ms())   # slot ...000
        clock.t += 30
        with self.assertRaises(KeyboardInterrupt):
            s.close(clock.t, clock.ticks_ms())  # slots ...010, 020, 030: cut after 010
        s.sync()  # as a status does, at the REPL or as the plug stops
        self.assertEqual(s.last_slot, 1795000010)
        clock.t += 10
        s.close(clock.t, clock.ticks_ms())
        slots = [r[0] for r in records(ring)]
        self.assertEqual(slots, list(range(1795000000, 1795000050, 10)))
        self.assertEqual(ring.next - ring.base,
                         (s.last_slot - s.first_slot) // s.interval_s + 1)
