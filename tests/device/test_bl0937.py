"""test_bl0937.py - the BL0937/HLW8012 driver counts CF pulses exactly, measures voltage and
current on CF1 with SEL switching and settling, honours the board's polarity, shows 0 W after
a long pause in pulses, and refuses silent chips and pulse storms."""

import unittest

from wattnode.meters import RATE, SILENT
from wattsim.profiles import Profile
from rig import Rig, allocates, board_file, close

QUANTUM_DJ = 18  # one CF pulse, 1.7066 J, rounded up


class TestBL0937(unittest.TestCase):
    def test_steady_load_energy_voltage_current(self):
        rig = Rig("devkit-bl0937", "constant:1000")
        rig.window(3000)
        ok, energy, truth = rig.window(10000)
        self.assertTrue(ok)
        self.assertTrue(abs(energy - truth) <= QUANTUM_DJ, (energy, truth))
        t = rig.clock.time_ms()
        self.assertTrue(close(rig.meter.win_voltage_cv, rig.chip.truth.voltage_cv(t), 0.01),
                        (rig.meter.win_voltage_cv, rig.chip.truth.voltage_cv(t)))
        self.assertTrue(close(rig.meter.win_current_ma, rig.chip.truth.current_ma(t), 0.01),
                        (rig.meter.win_current_ma, rig.chip.truth.current_ma(t)))
        self.assertTrue(close(rig.meter.power_dw, 10000, 0.01), rig.meter.power_dw)

    def test_every_sel_polarity(self):
        """BL0937 and HLW8012, SEL wired straight or inverted: voltage and current come out
        right in all four cases (read the wrong way round they differ by a factor of ~50)."""
        for chip in ("bl0937", "hlw8012"):
            for inverted in (False, True):
                board = board_file("devkit-bl0937", chip=chip, inverted={"sel": inverted})
                rig = Rig(board, "constant:2000")
                rig.window(3000)
                ok, energy, truth = rig.window(10000)
                t = rig.clock.time_ms()
                self.assertTrue(ok)
                self.assertTrue(close(rig.meter.win_voltage_cv, rig.chip.truth.voltage_cv(t), 0.01),
                                (chip, inverted, rig.meter.win_voltage_cv))
                self.assertTrue(close(rig.meter.win_current_ma, rig.chip.truth.current_ma(t), 0.01),
                                (chip, inverted, rig.meter.win_current_ma))

    def test_settling_keeps_voltage_pulses_out_of_the_current(self):
        """Polled every 50 ms, SEL switching every second: the current stays the current
        (the chip shows the old quantity for 300 ms after each switch)."""
        rig = Rig("devkit-bl0937", "constant:100")  # 0.43 A: 37 Hz against 1.4 kHz of voltage
        rig.window(3000, poll_ms=50)
        rig.window(10000, poll_ms=50)
        t = rig.clock.time_ms()
        self.assertTrue(close(rig.meter.win_current_ma, rig.chip.truth.current_ma(t), 0.02),
                        (rig.meter.win_current_ma, rig.chip.truth.current_ma(t)))

    def test_tiny_loads_are_counted_and_shown_as_zero_after_a_pause(self):
        """0.5 W is one pulse every 3.4 s: a minute's energy is right to a pulse. When the
        load stops, the shown power drops to 0 after 10 s without a pulse, not before."""
        rig = Rig("devkit-bl0937", "constant:0.5")
        rig.window(3000)
        ok, energy, truth = rig.window(60000)
        self.assertTrue(ok and abs(energy - truth) <= QUANTUM_DJ, (energy, truth))
        rig = Rig("devkit-bl0937", "constant:800")
        rig.run(5000)
        rig.chip.truth.profile = Profile("constant:0")
        rig.run(5000)
        self.assertTrue(rig.meter.power_dw > 7000)
        rig.run(6000)
        self.assertEqual(rig.meter.power_dw, 0)

    def test_silent_chip_is_missing(self):
        rig = Rig("devkit-bl0937", "constant:300")
        rig.window(3000)
        rig.chip.silent = True
        rig.run(2500)  # it falls silent in the middle of a slot...
        ok, energy, truth = rig.window(10000)  # ...and the next slot is missing, not 0 W
        self.assertEqual((ok, energy), (False, -1))
        self.assertTrue(rig.meter.faults[SILENT] >= 1)

    def test_pulse_storm_counts_nothing(self):
        """Interference at 50 kHz on both lines: a rate fault, the window is missing."""
        rig = Rig("devkit-bl0937", "constant:1000")
        rig.window(3000)
        rig.chip.storm_hz = 50000
        ok, energy, truth = rig.window(10000)
        self.assertEqual((ok, energy), (False, -1))
        self.assertTrue(rig.meter.faults[RATE] > 0)
        rig.chip.storm_hz = 0
        rig.window(2000)
        ok, energy, truth = rig.window(10000)
        self.assertTrue(ok and abs(energy - truth) <= QUANTUM_DJ, (energy, truth))

    def test_polling_allocates_nothing(self):
        rig = Rig("devkit-bl0937", "washer")
        rig.run(3000)
        self.assertFalse(allocates(lambda: rig.run(5000)))
