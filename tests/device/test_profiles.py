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

    def test_washer_pauses_mid_programme_at_a_display_s_watts(self):
        """A 6 min soak and a 4 min pause after the drain, at 1.2 W (the display on, the drum
        still): above the 0.8 W standby, far below the drum's 30-150 W."""
        t0 = DAY0 + 8 * 3600
        self.assertTrue(1.0 <= mean_w("washer", t0 + 2700, t0 + 3060) <= 1.4)
        self.assertTrue(1.0 <= mean_w("washer", t0 + 4440, t0 + 4680) <= 1.4)
        self.assertTrue(30 < mean_w("washer", t0 + 3060, t0 + 4380) < 150)

    def test_start_times_move_a_programme(self):
        """"washer:0930+1400" runs the programme at 09:30 and 14:00 every day instead."""
        for a, b in ((0, 180), (300, 1500), (5500, 6200)):
            for start in (9 * 3600 + 1800, 14 * 3600):
                moved = mean_w("washer:0930+1400", DAY0 + start + a, DAY0 + start + b)
                self.assertTrue(abs(moved - mean_w("washer", DAY0 + 8 * 3600 + a,
                                                   DAY0 + 8 * 3600 + b)) < 5)
        self.assertEqual(mean_w("washer:0930+1400", DAY0 + 8 * 3600, DAY0 + 9 * 3600), 0.8)
        self.assertRaises(ValueError, Profile, "washer:930")
        self.assertRaises(ValueError, Profile, "fridge:0930")

    def test_dishwasher_heats_then_dries_long_at_low_power(self):
        """19:00: ~1930 W heating, then a long drying phase: 3 W for 25 min and 0.5 W for 10
        min, then a last pump-out; 0.5 W standby."""
        t0 = DAY0 + 19 * 3600
        self.assertTrue(1900 < mean_w("dishwasher", t0 + 60, t0 + 780) < 1960)
        self.assertTrue(2.5 < mean_w("dishwasher", t0 + 6720, t0 + 8220) < 3.5)
        self.assertTrue(mean_w("dishwasher", t0 + 8220, t0 + 8820) < 1)
        self.assertTrue(40 < mean_w("dishwasher", t0 + 8820, t0 + 8880) < 50)
        self.assertTrue(mean_w("dishwasher", t0 + 8880, t0 + 9880) < 1)

    def test_fridge_runs_30_percent_at_about_80_w_and_defrosts_every_8_h(self):
        """Its compressor at ~80 W, 12 min of every 40; three defrosts a day at 02:00, 10:00
        and 18:00: a 150 W heater for 20 min, 15 min of dripping at 2 W, a 33 min recovery
        run; the door light adds ~25 W mid-way between runs, only from 06:00 to 23:00."""
        self.assertTrue(75 < mean_w("fridge", DAY0 + 2400 + 2, DAY0 + 2400 + 720) < 85)
        for hour in (2, 10, 18):
            t = DAY0 + hour * 3600
            self.assertTrue(145 < mean_w("fridge", t, t + 1200) < 155)
            self.assertEqual(mean_w("fridge", t + 1200, t + 2100), 2)
            self.assertTrue(75 < mean_w("fridge", t + 2102, t + 4080) < 95)
        p = Profile("fridge")
        doors = night_doors = 0
        for t in range(DAY0, DAY0 + 86400):
            w = p.power_dw(t)
            if t % 2400 >= 1000 and (t - DAY0 - 7200) % 28800 >= 4800 and w > 100:
                doors += 1
                if not 6 * 3600 <= t % 86400 < 23 * 3600:
                    night_doors += 1
        self.assertTrue(doors > 20)
        self.assertEqual(night_doors, 0)

    def test_tv_is_on_for_hours_and_stands_by_at_1_w(self):
        t0 = DAY0 + 19 * 3600
        self.assertTrue(75 < mean_w("tv", t0, t0 + 12600) < 105)
        self.assertTrue(0.7 < mean_w("tv", DAY0 + 12 * 3600, DAY0 + 13 * 3600) < 1.3)

    def test_heatpump_full_power_late_evening_and_700_w_through_the_night(self):
        t0 = DAY0
        self.assertTrue(1200 < mean_w("heatpump", t0 + 23 * 3600 + 1200, t0 + 86400) < 1300)
        self.assertTrue(650 < mean_w("heatpump", t0 + 2 * 3600, t0 + 6 * 3600) < 750)
        self.assertTrue(mean_w("heatpump", t0 + 23 * 3600, t0 + 23 * 3600 + 60) < 200)

    def test_constant_and_errors(self):
        self.assertEqual(Profile("constant").power_dw(0), 10000)
        self.assertEqual(Profile("constant:1500.5").power_dw(123), 15005)
        for bad in ("kettle", "washer:2", "heatpump:0800", "constant:abc"):
            self.assertRaises(ValueError, Profile, bad)

    def test_voltage_and_current_are_plausible(self):
        """Voltage stays within 230 V +- 3.5 V; current follows P / (V * power factor)."""
        vs = [voltage_cv(t) for t in range(DAY0, DAY0 + 7200)]
        self.assertTrue(22650 <= min(vs) and max(vs) <= 23350)
        p = Profile("washer")
        self.assertEqual(p.current_ma(22000, 23000), 9760)  # 2200 W / (230 V * 0.98)
