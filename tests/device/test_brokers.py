"""test_brokers.py - a plug that reaches any node of a broker cluster (issue 25 item 2):
config.json's broker.host a list of "host" or "host:port" (config.py), tried in turn by the
link (link.py): a failed connect or a lost connection moves to the next broker at once, and
the back-off a single broker has comes after a whole round; a bad entry is said, naming the
key, and left out, and the node still starts; one broker (a string) reconnects as it always
has. A real Node on the simulated board; its brokers are loopback ports where nothing listens
(the connection is refused), or a loopback socket that plays a broker and goes away."""

import json
import os
import time
import unittest

from wattnode import config
from wattnode.link import brokers
from wattnode.node import Node
from wattnode.ring import Ring
from wattsim.board import Board

from rig import board_file, fresh_dir, need_sockets
from netrig import loopback
import scratch

FLASH = scratch.DIR + "/brokers"
REFUSING = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]  # nothing listens there


def plug(host, port=1):
    """A node on a simulated plug whose config.json names `host` (a string or a list), and
    the problems its config had."""
    cwd = os.getcwd()
    fresh_dir(FLASH)
    os.chdir(FLASH)
    try:
        with open("config.json", "w") as f:
            json.dump({"node_id": "plug-b", "broker": {"host": host, "port": port}}, f)
        problems = []
        cfg = config.load("config.json", problems)
        board = board_file("sim")
        hw = Board(board, cfg, {"profile": "constant:1000", "start": 1795000000}, FLASH)
        return Node(cfg, board, hw, problems, True, Ring(16)), problems
    finally:
        os.chdir(cwd)


def due_in_ms(link):
    """How long until the link tries to connect again (<= 0: now)."""
    return time.ticks_diff(link._retry_ms, time.ticks_ms())


class TestBrokers(unittest.TestCase):
    def test_a_list_is_taken_and_a_bad_entry_is_said_and_left_out(self):
        node, problems = plug(["10.0.0.5", "10.0.0.6:1884", "mqtt-3.lan:1885", "10.0.0.8:x",
                               7, "a:99999"], 1883)
        self.assertEqual(node.link.brokers, [("10.0.0.5", 1883), ("10.0.0.6", 1884),
                                             ("mqtt-3.lan", 1885)])
        self.assertEqual(node.status()["broker"], "10.0.0.5:1883")
        self.assertEqual(problems, [
            "config.json: broker.host[3] = '10.0.0.8:x' is not \"host\" or \"host:port\" "
            "(port 1..65535); leaving it out",
            "config.json: broker.host[4] = 7 is not \"host\" or \"host:port\" (port 1..65535); "
            "leaving it out",
            "config.json: broker.host[5] = 'a:99999' is not \"host\" or \"host:port\" (port "
            "1..65535); leaving it out"])
        node, problems = plug([], 1883)  # nothing left: the default, and the node starts
        self.assertEqual(node.link.brokers, [("127.0.0.1", 1883)])
        self.assertEqual(problems, ["config.json: broker.host lists no broker; using "
                                    "'127.0.0.1'"])

    def test_a_failed_connect_tries_the_next_broker_at_once_and_a_round_backs_off(self):
        need_sockets()
        link = plug(REFUSING)[0].link
        tried = []
        for _ in range(3):  # one round: each broker in turn, none waited for
            self.assertTrue(due_in_ms(link) <= 0)
            tried.append(link.broker())
            link.service(True)
            self.assertFalse(link.up)
        self.assertEqual(tried, REFUSING)
        self.assertIn("127.0.0.1:3", link.last_error)
        self.assertEqual(link.broker(), REFUSING[0])  # the next round starts again at the first
        self.assertEqual(link._backoff_ms, 1000)  # after the round: the back-off of one broker
        self.assertTrue(due_in_ms(link) > 0)
        link.service(True)  # not due yet: nothing tried
        self.assertEqual(link.broker(), REFUSING[0])
        deadline = time.ticks_add(time.ticks_ms(), 5000)
        while link.broker() == REFUSING[0] and time.ticks_diff(deadline, time.ticks_ms()) > 0:
            link.service(True)
            time.sleep_ms(20)
        self.assertEqual(link.broker(), REFUSING[1])  # the back-off over: the second round
        link.service(True)
        link.service(True)
        self.assertEqual(link.broker(), REFUSING[0])
        self.assertEqual(link._backoff_ms, 2000)  # doubled per round, as for one broker

    def test_a_lost_connection_moves_to_the_next_broker(self):
        node = plug(REFUSING[:2])[0]
        link = node.link
        client, server = loopback()
        link.mq.attach(client)  # connected to the first, as connect() leaves it
        link.up = True
        server.close()  # the broker goes away
        deadline = time.ticks_add(time.ticks_ms(), 5000)
        while link.up and time.ticks_diff(deadline, time.ticks_ms()) > 0:
            link.service(True)
        self.assertFalse(link.up)
        self.assertEqual(link.broker(), REFUSING[1])
        self.assertTrue(due_in_ms(link) <= 0)  # tried at once
        self.assertEqual(link._backoff_ms, 0)

    def test_one_broker_reconnects_as_it_always_has(self):
        need_sockets()
        link = plug("127.0.0.1", 1)[0].link
        self.assertEqual(link.brokers, [("127.0.0.1", 1)])
        link.service(True)
        self.assertEqual(link.broker(), "127.0.0.1:1")
        self.assertEqual(link._backoff_ms, 1000)
        self.assertTrue(due_in_ms(link) > 0)  # every failure backs off: there is no other


if __name__ == "__main__":
    unittest.main()
