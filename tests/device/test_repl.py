"""test_repl.py - the REPL helpers: config edits are checked before they are saved, a
single-point calibration against a known load corrects a chip that reads 5 % high, the
relay and the ring can be looked at, and reboot(safe=True) leads into safe mode. Stopped for
the REPL (start.stopped(), what Ctrl-C does on a plug), the node's watchdog holds for
start.REPL_HOLD_S of node time, not its watchdog_s, and then resets the plug; a calibration
at the prompt leaves the energy total whole. (Ctrl-C itself, mpremote and repl.start() run
against the real firmware in tests/e2e/test_mpremote.py.)"""

import json
import os
import struct
import time
import unittest

from wattnode import config as cfgfile, repl, safe, start, wire
from wattnode.calib import Calibration
from wattsim.board import RESET_EXIT, Board
from wattnode.node import Node
from wattnode.ring import Ring
from rig import board_file, fresh_dir
import scratch

FLASH = scratch.DIR + "/repl"


class TestRepl(unittest.TestCase):
    def setUp(self):
        self.cwd = os.getcwd()
        board = board_file("devkit-cse7766")  # before chdir: the boards are found from here
        fresh_dir(FLASH)
        os.chdir(FLASH)
        with open("board.json", "w") as f:
            json.dump(board, f)
        raw = {"node_id": "plug-r", "broker": {"host": "127.0.0.1", "port": 1, "password": "s3cret"},
               "watchdog_s": 10}
        sim = {"profile": "constant:1000", "start": 1795000000, "speed": 100000,
               "faults": {"error": {"power": 1.05}}, "repl": True}
        with open("config.json", "w") as f:
            json.dump(raw, f)
        problems = []
        cfg = cfgfile.load("config.json", problems)
        hw = Board(board, cfg, sim, FLASH)
        start.node = Node(cfg, board, hw, problems, True, Ring(64))

    def tearDown(self):
        start.node = None
        start._hold = None
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
        meter = meters.create(node.hw.chip.board, node.hw, Calibration(cfg["calibration"]))
        clock = node.hw.clock
        for _ in range(60):
            clock.advance_ms(200)
            meter.poll()
        self.assertTrue(9950 <= meter.power_dw <= 10050, meter.power_dw)

    def test_multi_point_calibration_adds_a_point(self):
        cal = repl.calibrate(power=1000, point=True, seconds=10)
        self.assertEqual(len(cal["power_points"]), 1)
        self.assertTrue(1040 < cal["power_points"][0][0] < 1060)
        self.assertEqual(cal["power_gain"], 1.0)

    def slots(self, n):
        """n slots as the loop closes them (started first if need be)."""
        node = start.node
        if not node.sampler.slot_end:
            node.sampler.start(node.hw.clock.time_s(), node.hw.clock.ticks_ms())
        for _ in range(n):
            clock = node.hw.clock
            clock.advance_ms((node.sampler.slot_end - clock.time_s()) * 1000)
            node.meter.poll()
            node.sampler.close(node.hw.clock.time_s(), node.hw.clock.ticks_ms())

    def pass_time(self, seconds):
        """Node time passing at the prompt, 10 s at a time: only the clock's wait() moves it
        on (and checks the watchdog, as each wait begins)."""
        clock = start.node.hw.clock
        end = clock.time_s() + seconds
        while clock.time_s() < end:
            clock.wait(min(end, clock.time_s() + 10), 50)

    def test_relay_ring_readings_status(self):
        node = start.node
        self.assertEqual(repl.relay(False), False)
        self.assertFalse(node.controls.on)
        self.slots(3)
        rows = repl.readings(2)
        self.assertEqual(len(rows), 2)
        self.assertEqual(rows[1][0] - rows[0][0], 10)
        repl.ring()
        repl.status()
        repl.status(json=True)

    def test_reboot_into_safe_mode(self):
        try:
            repl.reboot(safe=True)
        except SystemExit as e:
            self.assertEqual(e.args[0], RESET_EXIT)
        self.assertEqual(safe.check("board.json"), "repl.reboot(safe=True) asked for it")
        self.assertEqual(safe.check("board.json"), None)  # the flag is used once

    def test_stopped_at_the_prompt_the_watchdog_holds_then_resets(self):
        node = start.node
        self.slots(3)
        node.hw.watchdog(10 * 1000).feed()  # as node.run() arms it (watchdog_s 10)
        t = time.ticks_ms()
        start.stopped(node)
        self.assertTrue(time.ticks_diff(time.ticks_ms(), t) < 1000)
        self.assertEqual((node.ring.count(), node.ring.next), (3, 3))
        try:
            repl.calibrate(power=1000, seconds=12)  # 14 s: longer than watchdog_s
            self.pass_time(start.REPL_HOLD_S - 60)
            repl.status()  # someone is there: the hold starts again
            self.pass_time(start.REPL_HOLD_S - 60)
        except SystemExit:  # (unittest would let it end the whole run)
            self.fail("the watchdog reset the plug during the session")
        try:  # left alone: the plug resets
            self.pass_time(120)
            self.fail("the plug did not reset")
        except SystemExit as e:
            self.assertEqual(e.args[0], RESET_EXIT)

    def test_a_starved_watchdog_resets_the_simulated_plug(self):
        wdt = start.node.hw.watchdog(10 * 1000)
        try:
            for _ in range(5):
                self.pass_time(9)
                wdt.feed()
            start.node.hw.watchdog(60 * 1000)  # re-armed with a longer timeout, as on an ESP32
            self.pass_time(50)
        except SystemExit:
            self.fail("a fed watchdog reset the plug")
        with self.assertRaises(SystemExit):
            self.pass_time(30)

    def test_a_calibration_at_the_prompt_keeps_the_energy_total(self):
        """The meter's windows that calibrate() measures are the node's: their energy goes into
        the total, and the slots after the calibration are measured over their own time."""
        node = start.node
        s = node.sampler
        self.slots(3)
        clock = node.hw.clock
        before_dj = s.energy_wh * 36000 + s.rem_dj
        t0 = clock.time_ms()
        start.stopped(node)
        try:
            repl.calibrate(power=1000, seconds=20)
        except SystemExit:
            self.fail("the watchdog reset the plug during the calibration")
        records = node.ring.next
        self.slots(2)
        self.assertEqual(node.ring.next, records + 2)
        for seq in (records, records + 1):  # 1050 W: the chip reads 5 % high, as it did
            power_dw = struct.unpack_from(wire.RECORD_FMT, node.ring.buf, node.ring.offset(seq))[1]
            self.assertTrue(10450 <= power_dw <= 10550, power_dw)
        counted_dj = s.energy_wh * 36000 + s.rem_dj - before_dj
        truth_dj = (clock.time_ms() - t0) * 10500 // 1000
        self.assertTrue(abs(counted_dj - truth_dj) <= 10500, (counted_dj, truth_dj))
