"""test_board.py - every shipped board file passes the schema check; broken ones are named in
words, and a board that cannot meter still boots, storing every slot as missing."""

import json
import os
import unittest

from wattnode import board, meters, spill, wire
from wattnode.node import make_meter
from rig import BOARDS
import scratch


def load(name):
    with open(BOARDS + name) as f:
        return json.load(f)


class TestBoards(unittest.TestCase):
    def test_shipped_boards_are_valid(self):
        names = [n for n in os.listdir(BOARDS) if n.endswith(".json")]
        self.assertTrue(len(names) >= 9)
        for name in names:
            b = load(name)
            self.assertEqual(board.check(b), ([], True), name)
            if b.get("hal", "esp32") != "sim":
                self.assertEqual(b["verified"], False, name)  # nobody has checked them on a plug

    def test_each_board_says_the_days_it_holds_and_holds_a_week(self):
        """holds_days is what the plug holds at 10 s: its flash spill's readings (spill.py: 4 KiB
        files of 252; the RAM ring's are on the flash too, but for the newest 126), or its
        ring's if that is the larger; at least 7 days on every board."""
        for name in os.listdir(BOARDS):
            b = load(name)
            readings = max(board.ring_kib(b) * 1024 // wire.RECORD_SIZE,
                           board.spill_kib(b) * 1024 // spill.FILE_BYTES * spill.FILE_RECORDS)
            self.assertEqual(b["holds_days"], round(readings * 10 / 86400, 1), name)
            self.assertTrue(readings >= 7 * 8640, name)

    def test_the_issue_s_plugs_are_there(self):
        chips = {load(n)["name"]: load(n)["chip"] for n in os.listdir(BOARDS)}
        for name, chip in (("Shelly Plus Plug S", "bl0937"), ("Sonoff POW Origin / Elite 16A", "cse7766"),
                           ("Athom Smart Plug V3", "cse7766"), ("Shelly Plug S Gen3", "bl0942"),
                           ("Nous A8T", "bl0937")):
            self.assertEqual(chips.get(name), chip, name)
        for chip in ("bl0937", "cse7766", "bl0942"):
            self.assertTrue("devkit-%s.json" % chip in os.listdir(BOARDS))

    def test_problems_are_named(self):
        problems, ok = board.check({"name": "x", "mcu": "esp32", "chip": "bl0937",
                                    "pins": {"relay": 34, "sel": 5, "cf": 5, "cf1": 99},
                                    "meter": {"power_w_per_hz": 1.7}, "colour": 1})
        self.assertFalse(ok)
        text = " | ".join(problems)
        for words in ("relay = GPIO34 can only be an input", "GPIO5 is both", "cf1 = 99 is not a GPIO",
                      "needs meter.voltage_v_per_hz", "key 'colour' is unknown"):
            self.assertIn(words, text)
        problems, ok = board.check({"name": "y", "chip": "cse7766", "pins": {"relay": 4},
                                    "baud": 9600})
        self.assertFalse(ok)
        self.assertIn("needs pin 'rx'", problems[0])
        self.assertIn("talks at 4800 baud, not 9600", problems[1])
        self.assertEqual(board.check({"name": "z", "chip": "ade7953", "pins": {}})[1], False)
        self.assertEqual(board.check([1, 2]), (["the board file does not hold a JSON object"], False))
        problems, ok = board.check({"name": "s", "chip": "cse7766", "pins": {"rx": 16},
                                    "spill_kib": 1023, "ring_kib": True})
        self.assertEqual(problems, ["board 's': ring_kib = True must be 4..96; using 32",
                                    "board 's': spill_kib = 1023 must be 0..4096, a multiple of "
                                    "4; using 1000"])
        self.assertEqual((board.spill_kib({"spill_kib": 1023}), board.spill_kib({"spill_kib": 0})),
                         (1000, 0))

    def test_a_relay_pin_problem_does_not_stop_metering(self):
        problems, ok = board.check({"name": "x", "chip": "cse7766", "pins": {"relay": 34, "rx": 16}})
        self.assertTrue(ok)
        self.assertEqual(len(problems), 1)

    def test_a_board_that_cannot_meter_gets_no_meter(self):
        problems = []
        m = make_meter({"chip": "ade7953"}, None, {}, False, problems)
        self.assertTrue(isinstance(m, meters.NoMeter))
        m.poll()
        self.assertFalse(m.take())
        self.assertIn("every slot is stored as missing", problems[-1])


class TestMismatch(unittest.TestCase):
    def test_a_board_file_for_the_wrong_chip_stores_nothing_wrong(self):
        """The board file says CSE7766 but the plug carries a BL0942 on those pins: the driver
        hears garbled bytes and no frames; every window is missing, and the fault log says
        so in words."""
        from wattnode.calib import Calibration
        from wattsim.board import Board
        from rig import board_file
        real = board_file("devkit-bl0942")
        wrong = board_file("devkit-cse7766")  # rx 16 as well
        hw = Board(real, sim={"profile": "constant:1000", "start": 1795000000}, flash_dir=scratch.DIR)
        meter = meters.create(wrong, hw, Calibration())
        log = meters.FaultLog(meter, "cse7766 meter")
        meter.take()
        for _ in range(100):
            hw.clock.advance_ms(200)
            meter.poll()
        self.assertFalse(meter.take())
        self.assertEqual(meter.win_energy_dj, -1)
        news = log.news(hw.clock.ticks_ms())
        self.assertIn("silent spells (slots stored as missing)", news)
        self.assertEqual(log.news(hw.clock.ticks_ms()), None)  # once a minute, not more
