"""test_profiles.py - the simulated appliances have the shapes the seed measured on its SP3S."""

import unittest

from wattsim.profiles import Profile, voltage_cv

DAY0 = 2500 * 86400  # a UTC midnight (2026-11-04), an even day


def mean_w(profile, a, b):
    p = Profile(profile)
    return sum(p.power_dw(t) for t in range(a, b)) / (b - a) / 10


class TestProfiles(unittest.TestCase):
    def test_washer_heats_then_spins_within_one_hour_45(self):
        """08:00 program: ~2200 W heating early on, ~500 W spin at the end, standby after 1 h 45."""
        t0 = DAY0 + 8 * 3600
        self.assertTrue(2100 < mean_w("washer", t0 + 300, t0 + 1500) < 2300)
        self.assertTrue(450 < mean_w("washer", t0 + 5500, t0 + 6200) < 550)
        self.assertTrue(mean_w("washer", t0 + 6300, t0 + 7200) < 1)
        self.assertTrue(mean_w("washer", t0 - 3600, t0) < 1)

    def test_fridge_runs_30_percent_at_about_80_w_with_door_spikes_by_day(self):
        """Over a day the compressor runs ~30 % of the time at ~80 W; the door light adds
        short spikes, only between 06:00 and 23:00."""
        p = Profile("fridge")
        on = doors = night_doors = 0
        on_sum = 0
        for t in range(DAY0, DAY0 + 86400):
            w = p.power_dw(t)
            phase = t % 2400
            if phase < 720:
                on += 1
                if 2 <= phase and w < 1000:
                    on_sum += w if w < 950 else w - 250
            elif w > 100:
                doors += 1
                if not 6 * 3600 <= t % 86400 < 23 * 3600:
                    night_doors += 1
        self.assertTrue(0.28 < on / 86400 < 0.32)
        self.assertTrue(75 < on_sum / (on - 2 * 36) / 10 < 85)
        self.assertTrue(doors > 20)
        self.assertEqual(night_doors, 0)

    def test_heatpump_full_power_late_evening_and_700_w_through_the_night(self):
        t0 = DAY0
        self.assertTrue(1200 < mean_w("heatpump", t0 + 23 * 3600 + 1200, t0 + 86400) < 1300)
        self.assertTrue(650 < mean_w("heatpump", t0 + 2 * 3600, t0 + 6 * 3600) < 750)
        self.assertTrue(mean_w("heatpump", t0 + 23 * 3600, t0 + 23 * 3600 + 60) < 200)

    def test_constant_and_errors(self):
        self.assertEqual(Profile("constant").power_dw(0), 10000)
        self.assertEqual(Profile("constant:1500.5").power_dw(123), 15005)
        for bad in ("kettle", "washer:2", "constant:abc"):
            self.assertRaises(ValueError, Profile, bad)

    def test_voltage_and_current_are_plausible(self):
        """Voltage stays within 230 V +- 3.5 V; current follows P / (V * power factor)."""
        vs = [voltage_cv(t) for t in range(DAY0, DAY0 + 7200)]
        self.assertTrue(22650 <= min(vs) and max(vs) <= 23350)
        p = Profile("washer")
        self.assertEqual(p.current_ma(22000, 23000), 9760)  # 2200 W / (230 V * 0.98)
