"""test_status.py - one status model: Node.status() is what every view shows (the info
command's answer, the summary a clean stop prints, repl.status(), the crash text), its values
are the node's own (ring, link, sampler, in wire units), it is plain JSON, and it counts the
commands the node took and refused. A command is refused for what it would make wrong in its
own key, whatever else config.json has wrong."""

import json
import os
import unittest

from wattnode import config, start, wire
from wattnode.node import Node
from wattnode.ring import Ring
from wattsim.board import Board

from rig import board_file, fresh_dir, need_sockets
import scratch

FLASH = scratch.DIR + "/status"
START = 1795000000


class TestStatus(unittest.TestCase):
    def setUp(self):
        self.cwd = os.getcwd()
        board = board_file("sim")
        fresh_dir(FLASH)
        os.chdir(FLASH)
        self.write_config({"node_id": "plug-st", "interval_s": 0, "colour": "red",
                           "broker": {"host": "127.0.0.1", "port": 1}})
        problems = []
        cfg = config.load("config.json", problems)
        hw = Board(board, cfg, {"profile": "constant:1000", "start": START}, FLASH)
        self.node = Node(cfg, board, hw, problems, True, Ring(16))
        self.clock = hw.clock

    def tearDown(self):
        os.chdir(self.cwd)

    def write_config(self, raw):
        with open("config.json", "w") as f:
            json.dump(raw, f)

    def slots(self, n):
        """n slots as the loop closes them, from the node's first."""
        node = self.node
        node._begin(node.keeper.now(), self.clock.ticks_ms())
        for _ in range(n):
            self.clock.advance_ms((node.sampler.slot_end - self.clock.time_s()) * 1000)
            node.meter.poll()
            node.sampler.close(node.keeper.now(), self.clock.ticks_ms())

    def test_status_is_the_node_s_own_counters_as_json(self):
        """After 3 slots of a 1000 W load, nothing sent: status() says so in plain JSON, its
        values in wire units (as wire.units gives them), the ring's counts as the ring has
        them, its slots in unix seconds."""
        node = self.node
        self.slots(3)
        st = node.status()
        self.assertEqual(json.loads(json.dumps(st)), st)
        s = node.sampler
        self.assertEqual((st["node"], st["interval_s"], st["capacity"]), ("plug-st", 10, 16))
        self.assertEqual((st["produced"], st["unacked"], st["unsent"], st["never_sent"],
                          st["dropped"]), (3, 3, 3, 3, 0))
        self.assertEqual(st["last_slot"] - st["first_slot"], 20)
        self.assertEqual(st["last_slot"], s.last_slot + wire.EPOCH_UNIX)
        self.assertEqual([st["power_w"], st["voltage_v"], st["current_a"]],
                         list(wire.units(s.power_dw, s.voltage_cv, s.current_ma, 0)[:3]))
        self.assertTrue(999 <= st["power_w"] <= 1001, st)
        self.assertEqual((st["link_up"], st["batches"], st["relay"]), (False, 0, "ON"))
        self.assertEqual(sorted(st["meter_faults"]), sorted(["checksum", "sync", "partial",
                                                             "silent", "rate", "flags"]))
        self.assertEqual((st["commands"], st["bad_commands"]), (0, 0))

    def test_a_node_that_has_no_slot_yet_says_none(self):
        st = self.node.status()
        self.assertEqual((st["first_slot"], st["last_slot"], st["power_w"]), (None, None, None))
        self.assertEqual(st["produced"], 0)

    def test_the_crash_text_says_the_status_counts(self):
        """start.crash_text: the readings at stake in words (from status()), and the status."""
        self.slots(2)
        try:
            raise ValueError("boom")
        except ValueError as e:
            text, line = start.crash_text(self.node, e)
        st = json.loads(line[len("crash "):])
        self.assertEqual(st["produced"], 2)
        self.assertIn("after 2 readings from slot %d; 2 held, 2 of them unsent (2 never sent), "
                      "kept across the reset" % st["first_slot"], text)
        self.assertIn("ValueError: boom", text)

    def test_commands_and_refusals_are_counted(self):
        node = self.node
        node.on_relay(b"MAYBE")
        node.on_relay(b"off")
        node.on_cmd(b"garbage")
        node.on_cmd(b'{"cmd": "explode"}')
        node.on_cmd(b'{"cmd": "info"}')
        st = node.status()
        self.assertEqual((st["commands"], st["bad_commands"], st["relay"]), (5, 3, "OFF"))

    def test_a_command_is_refused_for_its_own_key_whatever_else_is_wrong(self):
        """config.json already has interval_s 0 and an unknown key (said at boot). Setting
        interval_s to 0 again is refused: it would leave it wrong (it was saved, and the plug
        rebooted to apply it, when only new problems counted); setting it to 30 is saved,
        the unknown key notwithstanding."""
        node = self.node
        before = config.read_json("config.json", [])
        node.on_cmd(b'{"cmd": "interval", "interval_s": 0}')
        self.assertEqual((node.reboot_reason, node.bad_commands), (None, 1))
        self.assertEqual(config.read_json("config.json", []), before)
        node.on_cmd(b'{"cmd": "interval", "interval_s": 30}')
        self.assertEqual((node.reboot_reason, node.bad_commands), ("interval_s changed", 1))
        self.assertEqual(config.read_json("config.json", [])["interval_s"], 30)


    def test_the_info_answer_is_the_status(self):
        """The info command's answer on the log topic is status(), counters included."""
        need_sockets()
        from netrig import loopback, packets, publishes
        client, server = loopback()
        try:
            node = self.node
            node.link.mq.attach(client)
            node.link.up = True
            node.on_cmd(b"not json")
            node.on_cmd(b'{"cmd": "info", "id": 4}')
            logs = publishes(packets(server), b"wattlog/plug-st/log")
            info = [m for m in logs if m.startswith(b"info {")]
            self.assertEqual(len(info), 1, logs)
            self.assertTrue(info[0].endswith(b" (id 4)"), info)
            got = json.loads(info[0][5:-len(b" (id 4)")])
            self.assertEqual(sorted(got), sorted(node.status()))
            self.assertEqual((got["node"], got["commands"], got["bad_commands"], got["link_up"]),
                             ("plug-st", 2, 1, True))
        finally:
            client.close()
            server.close()
