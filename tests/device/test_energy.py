"""test_energy.py - the energy total resumes exactly after a reset (RTC memory); after a power
cut from the highest of the flash checkpoint, the plug's retained state and the collector's
total (saying what may be missing), never lower than what was published; and the flash is
written at most every 100 Wh or 6 h, whichever comes later."""

import os
import unittest

from wattnode.energy import CHECKPOINT_FILE, EnergyStore
from wattsim.board import SimRTCMemory
import scratch

DIR = scratch.DIR
RTC = DIR + "/wattnode-test-rtc"


def clean():
    for p in (RTC, DIR + "/" + CHECKPOINT_FILE):
        try:
            os.remove(p)
        except OSError:
            pass


def store():
    return EnergyStore(SimRTCMemory(RTC), 100, 21600, DIR)


def settled():
    """A store as the node has it once its total is settled (nothing else heard)."""
    s = store()
    wh, rem = s.load()
    s.settle(wh, rem)
    return s


def run(s, watts, hours, t0, wh=0, rem=0, slot_s=10):
    """Feed slots of a constant load; returns (wh, rem, t)."""
    per_slot_dj = watts * 10 * slot_s
    t = t0
    for _ in range(int(hours * 3600) // slot_s):
        t += slot_s
        rem += per_slot_dj
        wh += rem // 36000
        rem %= 36000
        s.slot(wh, rem, t)
    return wh, rem, t


class TestEnergy(unittest.TestCase):
    def setUp(self):
        clean()

    def test_first_boot_starts_at_zero(self):
        s = store()
        self.assertEqual(s.load(), (0, 0))
        self.assertEqual((s.source, s.settled), ("none", False))  # the broker may know it
        self.assertEqual(s.settle(0, 0), 0)
        self.assertEqual((s.source, s.note, s.settled), ("none", None, True))

    def test_a_reset_resumes_exactly_from_rtc_memory(self):
        s = settled()
        wh, rem, t = run(s, 500, 1, 0)
        again = store()
        self.assertEqual(again.load(), (wh, rem))
        self.assertEqual((again.source, again.settled), ("rtc", True))
        self.assertEqual(again.settle(wh, rem), 0)

    def test_a_power_cut_resumes_from_the_checkpoint_and_says_so(self):
        s = settled()
        wh, rem, t = run(s, 2000, 13, 0)   # two checkpoints: at 6 h and at 12 h
        self.assertEqual(s.writes, 2)
        os.remove(RTC)                      # the power cut
        again = store()
        got_wh, got_rem = again.load()
        self.assertEqual((again.source, again.settled), ("checkpoint", False))
        self.assertEqual(got_wh, 2000 * (10 + 2 * 21600) // 3600)  # the second checkpoint
        self.assertEqual(again.settle(got_wh, got_rem), 0)  # nothing higher was heard of
        self.assertIn("power cut", again.note)
        self.assertIn("flash checkpoint", again.note)
        self.assertEqual(again.bound_wh(t, 3600), 3600 * (t - 10 - 2 * 21600) // 3600)

    def test_a_power_cut_resumes_from_the_highest_total_published_before(self):
        """3 kW for 8 h: the checkpoint holds the total at 6 h (18 kWh), the broker the last
        state (24 kWh), the collector a batch older. The node counted 50 Wh since boot before
        it heard them: it goes on from the state's total plus those 50 Wh, and the bound runs
        from the state's time, not the checkpoint's."""
        s = settled()
        wh, rem, t = run(s, 3000, 8, 0)
        ck_wh = 3000 * (10 + 21600) // 3600
        os.remove(RTC)
        again = store()
        own, own_rem = again.load()
        self.assertEqual(own, ck_wh)
        again.offer(wh - 20, t - 30, "collector")
        again.offer(wh, t, "state")
        again.offer(wh - 5, t - 10, "collector")  # lower: changes nothing
        add = again.settle(own + 50, own_rem)
        self.assertEqual(own + 50 + add, wh + 50)
        self.assertEqual(again.source, "state")
        self.assertIn("its last state", again.note)
        self.assertEqual(again.bound_wh(t + 60, 3600), 60)
        again.offer(wh * 2, t, "collector")  # too late: settled
        self.assertEqual((again.source, again.settle(wh, 0)), ("state", 0))
        third = store()                   # a reset now: RTC memory has the raised total
        self.assertEqual(third.load(), (wh + 50, own_rem))

    def test_nothing_counts_as_exact_before_it_is_settled(self):
        """Slots before settling write no RTC memory: a reset then is still a power cut, not
        a resume from a total that may lie below what was published."""
        s = settled()
        run(s, 3000, 7, 0)
        os.remove(RTC)
        again = store()
        own, rem = again.load()
        run(again, 3000, 1, 7 * 3600, own, rem)
        self.assertEqual(again.writes, 1)
        third = store()
        third.load()
        self.assertEqual((third.source, third.settled), ("checkpoint", False))

    def test_corrupt_rtc_memory_is_not_trusted(self):
        s = settled()
        run(s, 2000, 7, 0)
        with open(RTC, "r+b") as f:
            f.seek(5)
            f.write(b"\x99")
        again = store()
        again.load()
        self.assertEqual(again.source, "checkpoint")

    def test_flash_writes_per_day(self):
        """The closing note's figures: over three days, a checkpoint every 6 h at 100 W and at
        2 kW (11 writes: the timer starts at the first slot, 60 s in), every 10 h at 10 W
        (100 Wh takes 10 h), none at 0 W."""
        for watts, want in ((100, 11), (2000, 11), (10, 7), (0, 0)):
            clean()
            s = settled()
            run(s, watts, 72, 0, slot_s=60)
            print("  flash writes in 3 days at %d W: %d (%.2f a day)" % (watts, s.writes, s.writes / 3))
            self.assertEqual(s.writes, want, watts)

    def test_controlled_reboot_checkpoints(self):
        s = settled()
        wh, rem, t = run(s, 300, 1, 0)
        self.assertEqual(s.writes, 0)
        s.checkpoint(wh, rem, t)
        os.remove(RTC)
        again = store()
        self.assertEqual(again.load(), (wh, rem))
