"""test_secrets.py - no message holds a secret's value (issue 10 item 2): a config.json whose
Wi-Fi or MQTT password is of the wrong type is reported by its key only, on boot and in the
answer to a command, and `info` shows none; the command itself is judged on what it changes.
A real Node on the simulated board; its link's socket is a loopback, so every byte it
publishes is seen."""

import json
import os
import unittest

from wattnode import config
from wattsim.board import Board
from wattnode.node import Node
from wattnode.ring import Ring

from rig import board_file, fresh_dir
from netrig import loopback, packets, publishes
import scratch

FLASH = scratch.DIR + "/secrets"
WIFI_SECRET = 87654321
BROKER_SECRET = 13572468


class TestSecrets(unittest.TestCase):
    def test_config_problems_name_a_secret_s_key_never_its_value(self):
        cfg, problems = config.check({"wifi": {"ssid": "home", "password": WIFI_SECRET},
                                      "broker": {"host": "10.0.0.2", "password": BROKER_SECRET,
                                                 "user": ["plug"]},
                                      "interval_s": "ten"})
        text = " | ".join(config.say(p) for p in problems)
        self.assertFalse(str(WIFI_SECRET) in repr(problems))  # in no field either
        self.assertFalse(str(BROKER_SECRET) in repr(problems))
        self.assertFalse(str(WIFI_SECRET) in text)
        self.assertFalse(str(BROKER_SECRET) in text)
        self.assertIn("wifi.password must be a str (the value given is a secret: not shown)",
                      text)
        self.assertIn("broker.password must be a string or null (the value given is a secret",
                      text)
        self.assertIn("broker.user must be a string or null, not ['plug']", text)
        self.assertIn("interval_s must be a int, not 'ten'", text)  # not a secret: shown
        self.assertEqual((cfg["wifi"]["password"], cfg["broker"]["password"]), ("", None))

    def test_boot_log_and_command_answers_hold_no_secret(self):
        cwd = os.getcwd()
        board = board_file("sim")
        fresh_dir(FLASH)
        os.chdir(FLASH)
        client, server = loopback()
        try:
            with open("config.json", "w") as f:
                json.dump({"node_id": "plug-s", "wifi": {"ssid": "home", "password": WIFI_SECRET},
                           "broker": {"host": "127.0.0.1", "port": 1, "user": "plug-s",
                                      "password": BROKER_SECRET}}, f)
            problems = []
            cfg = config.load("config.json", problems)
            hw = Board(board, cfg, {"profile": "constant:100", "start": 1795000000}, FLASH)
            node = Node(cfg, board, hw, problems, True, Ring(16))
            node.link.mq.attach(client)
            node.link.up = True
            for p in node.problems:  # what the loop says once the link is up
                node.link.log(p)
            node.on_cmd(b'{"cmd": "interval", "interval_s": 30, "id": 1}')
            node.on_cmd(b'{"cmd": "interval", "interval_s": 0, "id": 2}')
            node.on_cmd(b'{"cmd": "info"}')
            logs = publishes(packets(server), b"wattlog/plug-s/log")
            text = b" | ".join(logs)
            self.assertIn(b"wifi.password must be a str", text)
            self.assertIn(b"cmd interval: saved interval_s = 30; rebooting to apply (id 1)", text)
            self.assertIn(b"cmd interval: interval_s = 0 is outside 1..3600; nothing changed "
                          b"(id 2)", text)
            self.assertTrue([m for m in logs if m.startswith(b"info {")], logs)
            for secret in (WIFI_SECRET, BROKER_SECRET):
                self.assertFalse(str(secret).encode() in text)
        finally:
            client.close()
            server.close()
            os.chdir(cwd)
