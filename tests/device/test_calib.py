"""test_calib.py - a piecewise-linear power correction makes one plug right at both ends of
its range, which a single gain cannot (Tasmota #4727, #6797, #14681)."""

import unittest

from wattnode.calib import ONE_Q12, Calibration, check, gain_from
from rig import Rig


class TestCalibration(unittest.TestCase):
    def test_interpolation_between_points_and_flat_beyond(self):
        c = Calibration({"power_points": [[62.4, 60.0], [1950.0, 2000.0]]})
        self.assertEqual(c.power_q12(300), c.power_q12(624))  # flat below the first point
        self.assertEqual(c.power_q12(624), int(60.0 / 62.4 * ONE_Q12 + 0.5))
        self.assertEqual(c.power_q12(19500), int(2000 / 1950 * ONE_Q12 + 0.5))
        self.assertEqual(c.power_q12(30000), c.power_q12(19500))  # flat above the last
        mid = c.power_q12((624 + 19500) // 2)
        self.assertTrue(abs(mid - (c.power_q12(624) + c.power_q12(19500)) / 2) <= 1)
        self.assertEqual(Calibration().power_q12(12345), ONE_Q12)

    def test_two_points_fix_both_ends_where_one_gain_cannot(self):
        """Chip error 1.04 at 60 W and 0.975 at 2 kW: with a single gain set at 2 kW the 60 W
        reading is 6.7 % high; with two points both are within 0.3 %."""
        def reading(cal, watts, err):
            rig = Rig("devkit-bl0937", "constant:%d" % watts, {"error": {"power": err}}, cal)
            rig.window(3000)
            ok, energy, truth = rig.window(30000)
            return energy / (truth / err)  # measured / true
        single = {"power_gain": 1 / 0.975}
        self.assertTrue(reading(single, 60, 1.04) > 1.06)
        points = {"power_points": [[62.4, 60], [1950, 2000]]}
        for watts, err in ((60, 1.04), (2000, 0.975)):
            self.assertTrue(abs(reading(points, watts, err) - 1) < 0.003, (watts, reading(points, watts, err)))

    def test_checks_and_single_point_gain(self):
        self.assertEqual(check({"power_gain": 1.02, "power_points": [[60, 61]]}), [])
        self.assertTrue(check({"power_gain": 3}))
        self.assertTrue(check({"power_points": [[0, 60]]}))
        self.assertTrue(check({"colour": 1}))
        self.assertAlmostEqual(gain_from(1050, 1000, 1.0), 1000 / 1050)
        self.assertRaises(ValueError, gain_from, 0, 1000, 1.0)
        self.assertRaises(ValueError, gain_from, 300, 1000, 1.0)  # a gain of 3.3: refused
