"""test_bl0942.py - the BL0942 driver polls, parses 23-byte replies, integrates the chip's
power for fine-grained slots, and covers gaps with the exact 24-bit CF_CNT."""

import unittest

from wattnode.meters import CHECKSUM, PARTIAL, RATE, SILENT, SYNC
from wattnode.meters.bl0942 import COUNT_UJ100
from rig import START_UNIX, Rig, allocates, close

ONE_COUNT_DJ = COUNT_UJ100 // 1000 + 1


class TestBL0942(unittest.TestCase):
    def test_steady_load_values(self):
        """1 kW: the window's energy is the chip's power over 10 s; V, I and P are the chip's."""
        rig = Rig("devkit-bl0942", "constant:1000")
        rig.window(2000)
        ok, energy, truth = rig.window(10000)
        self.assertTrue(ok)
        self.assertTrue(close(energy, truth, 0.002), (energy, truth))
        t = rig.clock.time_ms()
        self.assertTrue(close(rig.meter.win_voltage_cv, rig.chip.truth.voltage_cv(t), 0.01))
        self.assertTrue(close(rig.meter.win_current_ma, rig.chip.truth.current_ma(t), 0.01))
        self.assertEqual(rig.meter.power_dw, 10000)

    def test_gen3_board_talks_9600(self):
        rig = Rig("shelly-plug-s-gen3", "constant:60")
        rig.window(2000)
        ok, energy, truth = rig.window(10000)
        self.assertTrue(ok and close(energy, truth, 0.002), (energy, truth))

    def test_power_varies_within_a_slot(self):
        """A washer program: integration follows the load second by second (10 s slots)."""
        rig = Rig("devkit-bl0942", "washer", start=START_UNIX // 86400 * 86400 + 8 * 3600 + 1500)
        rig.window(2000)
        worst = 0
        for _ in range(30):
            ok, energy, truth = rig.window(10000)
            self.assertTrue(ok)
            worst = max(worst, abs(energy - truth) * 1000 // max(truth, 1))
        # each slot within 5 %: the power register is sampled every 200 ms through the drum's
        # on/off steps, as on a real plug
        self.assertTrue(worst <= 50, worst)

    def check_fault(self, faults, kind, count_ok=True):
        rig = Rig("devkit-bl0942", "constant:2000", faults)
        rig.window(2000)
        ok, energy, truth = rig.window(10000)
        self.assertTrue(rig.meter.faults[kind] > 0, rig.meter.faults)
        self.assertTrue(ok, rig.meter.faults)
        self.assertTrue(close(energy, truth, 0.03), (faults, energy, truth))

    def test_noise_bytes_are_skipped(self):
        self.check_fault({"noise_every": 3}, SYNC)

    def test_bad_checksums_are_dropped(self):
        self.check_fault({"checksum_every": 4}, CHECKSUM)

    def test_partial_replies_are_dropped(self):
        self.check_fault({"partial_every": 5}, PARTIAL)

    def test_silent_chip_is_missing(self):
        rig = Rig("devkit-bl0942", "constant:500")
        rig.window(2000)
        rig.chip.silent = True
        ok, energy, truth = rig.window(10000)
        self.assertEqual((ok, energy), (False, -1))
        self.assertEqual(rig.meter.faults[SILENT], 1)
        rig.chip.silent = False
        self.assertFalse(rig.window(10000)[0])  # the silence ends in here
        ok, energy, truth = rig.window(10000)
        self.assertTrue(ok and close(energy, truth, 0.002))

    def test_gaps_are_covered_by_the_counter_across_its_wrap(self):
        """Polled only every 5 s (a busy node), with CF_CNT 3 counts short of its 24-bit wrap:
        the energy comes from the counter, within one count (1089 J) over 60 s."""
        rig = Rig("devkit-bl0942", "constant:2000", {"wrap": True})
        rig.window(2000)
        ok, energy, truth = rig.window(60000, poll_ms=5000)
        self.assertTrue(ok, rig.meter.faults)
        self.assertTrue(abs(energy - truth) <= ONE_COUNT_DJ, (energy, truth))

    def test_polling_allocates_nothing(self):
        rig = Rig("devkit-bl0942", "constant:1234", {"noise_every": 5, "checksum_every": 7})
        rig.run(3000)
        self.assertFalse(allocates(lambda: rig.run(5000)))

    def test_an_impossible_counter_jump_is_refused(self):
        rig = Rig("devkit-bl0942", "constant:1000")
        rig.window(2000)
        rig.chip.storm_hz = 50  # 50 counts/s of 1089 J: 54 kW
        ok, energy, truth = rig.window(5000)
        self.assertEqual((ok, energy), (False, -1))
        self.assertTrue(rig.meter.faults[RATE] > 0)
