"""test_repl.py - the REPL helpers: config edits are checked before they are saved, a
single-point calibration against a known load corrects a chip that reads 5 % high, the
relay and the ring can be looked at, and reboot(safe=True) leads into safe mode."""

import json
import os
import unittest

from wattnode import config as cfgfile, repl, safe, start
from wattnode.calib import Calibration
from wattnode.hw.sim import Board
from wattnode.node import Node
from wattnode.ring import Ring
from rig import board_file

FLASH = "/tmp/wattnode-repl-test"


def clean():
    try:
        os.mkdir(FLASH)
    except OSError:
        pass
    for name in os.listdir(FLASH):
        os.remove(FLASH + "/" + name)


class TestRepl(unittest.TestCase):
    def setUp(self):
        self.cwd = os.getcwd()
        board = board_file("devkit-cse7766")  # before chdir: the boards are found from here
        clean()
        os.chdir(FLASH)
        with open("board.json", "w") as f:
            json.dump(board, f)
        raw = {"node_id": "plug-r", "broker": {"host": "127.0.0.1", "port": 1, "password": "s3cret"},
               "sim": {"profile": "constant:1000", "start": 1795000000, "speed": 100000,
                       "faults": {"error": {"power": 1.05}}}}
        with open("config.json", "w") as f:
            json.dump(raw, f)
        problems = []
        cfg = cfgfile.load("config.json", problems)
        hw = Board(board, cfg, FLASH)
        start.node = Node(cfg, board, hw, problems, True, Ring(64))

    def tearDown(self):
        start.node = None
        os.chdir(self.cwd)

    def test_config_edits_are_checked_then_saved(self):
        self.assertEqual(repl.config("interval_s", 30), [])
        self.assertEqual(cfgfile.read_json("config.json", [])["interval_s"], 30)
        problems = repl.config("interval_s", "often")
        self.assertIn("interval_s must be a int", problems[0])
        self.assertEqual(cfgfile.read_json("config.json", [])["interval_s"], 30)
        self.assertEqual(repl.config()["broker"]["password"], "***")

    def test_single_point_calibration_corrects_a_chip_reading_high(self):
        cal = repl.calibrate(power=1000, seconds=20)
        self.assertTrue(abs(cal["power_gain"] - 1 / 1.05) < 0.003, cal)
        saved = cfgfile.read_json("config.json", [])["calibration"]
        self.assertEqual(saved["power_gain"], cal["power_gain"])
        node = start.node  # a node built with the saved calibration reads the true 1000 W
        from wattnode import meters
        cfg = cfgfile.load("config.json", [])
        meter = meters.create(node.hw.chip.board, node.hw, cfg, Calibration(cfg["calibration"]))
        clock = node.hw.clock
        for _ in range(60):
            clock._virt_ms += 200
            meter.poll()
        self.assertTrue(9950 <= meter.power_dw <= 10050, meter.power_dw)

    def test_multi_point_calibration_adds_a_point(self):
        cal = repl.calibrate(power=1000, point=True, seconds=10)
        self.assertEqual(len(cal["power_points"]), 1)
        self.assertTrue(1040 < cal["power_points"][0][0] < 1060)
        self.assertEqual(cal["power_gain"], 1.0)

    def test_relay_ring_readings_status(self):
        node = start.node
        self.assertEqual(repl.relay(False), False)
        self.assertFalse(node.controls.on)
        node.sampler.start(node.hw.clock.time_s(), node.hw.clock.ticks_ms())
        for _ in range(3):
            node.hw.clock._virt_ms = node.sampler.slot_end * 1000
            node.meter.poll()
            node.sampler.close(node.hw.clock.time_s(), node.hw.clock.ticks_ms())
        rows = repl.readings(2)
        self.assertEqual(len(rows), 2)
        self.assertEqual(rows[1][0] - rows[0][0], 10)
        repl.ring()
        repl.status()

    def test_reboot_into_safe_mode(self):
        try:
            repl.reboot(safe=True)
        except SystemExit as e:
            self.assertEqual(e.args[0], start.RESET_EXIT)
        self.assertEqual(safe.check("board.json"), "repl.reboot(safe=True) asked for it")
        self.assertEqual(safe.check("board.json"), None)  # the flag is used once
