"""test_energy.py - the energy total resumes exactly after a reset (RTC memory), from the flash
checkpoint after a power cut (saying what may be missing), and the flash is written at most
every 100 Wh or 6 h, whichever comes later."""

import os
import unittest

from wattnode.energy import CHECKPOINT_FILE, EnergyStore
from wattnode.hw.sim import SimRTCMemory

DIR = "/tmp"
RTC = DIR + "/wattnode-test-rtc"


def clean():
    for p in (RTC, DIR + "/" + CHECKPOINT_FILE):
        try:
            os.remove(p)
        except OSError:
            pass


def store():
    return EnergyStore(SimRTCMemory(RTC), 100, 21600, DIR)


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
        self.assertEqual((s.source, s.note), ("none", None))

    def test_a_reset_resumes_exactly_from_rtc_memory(self):
        s = store()
        s.load()
        wh, rem, t = run(s, 500, 1, 0)
        again = store()
        self.assertEqual(again.load(), (wh, rem))
        self.assertEqual(again.source, "rtc")

    def test_a_power_cut_resumes_from_the_checkpoint_and_says_so(self):
        s = store()
        s.load()
        wh, rem, t = run(s, 2000, 13, 0)   # two checkpoints: at 6 h and at 12 h
        self.assertEqual(s.writes, 2)
        os.remove(RTC)                      # the power cut
        again = store()
        got_wh, _ = again.load()
        self.assertEqual(again.source, "checkpoint")
        self.assertEqual(got_wh, 2000 * (10 + 2 * 21600) // 3600)  # the second checkpoint
        self.assertIn("power cut", again.note)
        self.assertEqual(again.bound_wh(t, 3600), 3600 * (t - 10 - 2 * 21600) // 3600)

    def test_corrupt_rtc_memory_is_not_trusted(self):
        s = store()
        s.load()
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
            s = store()
            s.load()
            run(s, watts, 72, 0, slot_s=60)
            print("  flash writes in 3 days at %d W: %d (%.2f a day)" % (watts, s.writes, s.writes / 3))
            self.assertEqual(s.writes, want, watts)

    def test_controlled_reboot_checkpoints(self):
        s = store()
        s.load()
        wh, rem, t = run(s, 300, 1, 0)
        self.assertEqual(s.writes, 0)
        s.checkpoint(wh, rem, t)
        os.remove(RTC)
        again = store()
        self.assertEqual(again.load(), (wh, rem))
