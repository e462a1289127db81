"""test_cse7766.py - the CSE7766 driver reads real captured frames, counts energy exactly from
the chip's pulse counter, and turns every fault into a count, never into a wrong value."""

import json
import unittest
from binascii import unhexlify

from wattnode.meters import CHECKSUM, FLAGS, PARTIAL, RATE, SILENT, SYNC, FaultLog
from rig import HERE, Rig, allocates, close

VECTORS = HERE + "/../vectors/cse7766.json"


class TestCSE7766(unittest.TestCase):
    def test_captured_frames_decode_to_the_datasheet_values(self):
        """Frames captured on Sonoff POW R2 plugs: checksum accepted, values as the formulas
        give them, header F2 read as zero power."""
        with open(VECTORS) as f:
            frames = json.load(f)["frames"]
        for v in frames:  # each from its own plug: a rig each
            rig = Rig("devkit-cse7766", faults={"silent": True})
            raw = unhexlify(v["hex"])
            rig.meter._uart.push(raw, len(raw))
            rig.meter.poll()
            self.assertEqual((rig.meter.voltage_cv, rig.meter.current_ma, rig.meter.power_dw,
                              rig.meter._cf_last), (v["voltage_cv"], v["current_ma"],
                                                     v["power_dw"], v["cf"]), v["source"])
            m = rig.meter.faults
            self.assertEqual((m[CHECKSUM], m[SYNC], m[PARTIAL], m[FLAGS]), (0, 0, 0, 0))

    def test_steady_load_energy_is_exact(self):
        """1 kW for 10 s: the window holds the chip's energy to one pulse (5.4 J), and the
        mean voltage and current are the chip's."""
        rig = Rig("devkit-cse7766", "constant:1000")
        rig.window(2000)
        ok, energy, truth = rig.window(10000)
        self.assertTrue(ok)
        self.assertTrue(abs(energy - truth) <= 54, (energy, truth))
        t = rig.clock.time_ms()
        self.assertTrue(close(rig.meter.win_voltage_cv, rig.chip.truth.voltage_cv(t), 0.02))
        self.assertTrue(close(rig.meter.win_current_ma, rig.chip.truth.current_ma(t), 0.02))
        self.assertEqual(rig.meter.power_dw, 10000)

    def check_fault_keeps_energy(self, faults, kind):
        rig = Rig("devkit-cse7766", "constant:2000", faults)
        rig.window(2000)
        ok, energy, truth = rig.window(10000)
        self.assertTrue(ok, rig.meter.faults)
        self.assertTrue(abs(energy - truth) <= 54, (faults, energy, truth))
        self.assertTrue(rig.meter.faults[kind] > 0, rig.meter.faults)
        return rig

    def test_noise_bytes_are_skipped(self):
        self.check_fault_keeps_energy({"noise_every": 3}, SYNC)

    def test_bad_checksums_are_dropped(self):
        self.check_fault_keeps_energy({"checksum_every": 4}, CHECKSUM)

    def test_partial_frames_are_dropped_and_the_next_frame_found(self):
        rig = self.check_fault_keeps_energy({"partial_every": 5}, PARTIAL)
        self.assertEqual(rig.meter.faults[CHECKSUM], 0)  # recognised as cut off, not corrupt

    def test_uncalibrated_and_error_headers_are_ignored(self):
        self.check_fault_keeps_energy({"flags_every": 5}, FLAGS)

    def test_counter_wrap(self):
        """The 16-bit pulse counter starts 40 short of its wrap: energy stays exact across it."""
        rig = Rig("devkit-cse7766", "constant:3000", {"wrap": True})
        rig.window(1000)
        ok, energy, truth = rig.window(10000)
        self.assertTrue(ok and abs(energy - truth) <= 54, (energy, truth))

    def test_silent_chip_is_missing_and_its_energy_goes_to_the_total(self):
        """A silent spell: its windows are missing, not zero; pulses counted across it reach
        the energy total (orphan energy) but no slot's power."""
        rig = Rig("devkit-cse7766", "constant:1500")
        rig.window(2000)
        ok, energy, truth = rig.window(10000)
        self.assertTrue(ok)
        total, want = 0, 0
        rig.chip.silent = True
        ok, energy, truth = rig.window(10000)
        self.assertEqual((ok, energy), (False, -1))
        want += truth
        total += rig.meter.win_orphan_dj
        self.assertEqual(rig.meter.faults[SILENT], 1)
        rig.chip.silent = False
        ok, energy, truth = rig.window(10000)  # the silence ends in this window
        self.assertFalse(ok)
        want += truth
        total += rig.meter.win_orphan_dj
        ok, energy, truth = rig.window(10000)
        self.assertTrue(ok and abs(energy - truth) <= 54)
        self.assertTrue(abs(total - want) <= 54, (total, want))

    def test_below_5_w_power_is_zero_and_energy_still_counted(self):
        rig = Rig("devkit-cse7766", "constant:3")
        rig.window(2000)
        ok, energy, truth = rig.window(60000)
        self.assertTrue(ok)
        self.assertEqual(rig.meter.power_dw, 0)
        self.assertTrue(abs(energy - truth) <= 54, (energy, truth))

    def test_polling_allocates_nothing(self):
        rig = Rig("devkit-cse7766", "constant:2500", {"noise_every": 7, "checksum_every": 11})
        rig.run(3000)
        self.assertFalse(allocates(lambda: rig.run(5000)))
        # the fault log runs after every slot: nothing new to say costs no allocation
        quiet = Rig("devkit-cse7766", "constant:2500")
        log = FaultLog(quiet.meter, "cse7766 meter")
        quiet.run(3000)
        t = quiet.clock.ticks_ms() + FaultLog.EVERY_MS
        self.assertFalse(allocates(lambda: log.news(t)))
        self.assertEqual(log.news(t), None)

    def test_an_impossible_counter_jump_is_refused(self):
        """The pulse counter races (interference on the chip's counter): a rate fault, the
        window is missing, and the total is not inflated."""
        rig = Rig("devkit-cse7766", "constant:1000")
        rig.window(2000)
        rig.chip.storm_hz = 20000  # 20000 pulses/s of 5.4 J: 100 kW, through a 16 A plug
        ok, energy, truth = rig.window(5000)
        self.assertEqual((ok, energy), (False, -1))
        self.assertTrue(rig.meter.faults[RATE] > 0)
        self.assertEqual(rig.meter.win_orphan_dj, 0)
