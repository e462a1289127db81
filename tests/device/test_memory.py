"""test_memory.py - publishing a batch allocates nothing: the PUBLISH packet is framed in
preallocated buffers and the records go from the ring to the socket without a copy. A plug
short of heap for an optional part (the Broadlink protocol) meters on without it."""

import gc
import json
import os
import socket
import sys
import unittest

import micropython

from wattnode import config, forget, wire
from wattnode.link import Link
from wattnode.node import Node
from wattnode.ring import Ring
from wattsim.board import Board

from rig import board_file, fresh_dir, need_sockets

FLASH = "/tmp/wattnode-memory-test"


def listener(ports=range(47100, 47200)):
    """A listening socket on the first free loopback port of `ports`: (socket, port)."""
    need_sockets()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    for port in ports:
        try:
            srv.bind(socket.getaddrinfo("127.0.0.1", port)[0][-1])
            break
        except OSError:
            continue
    srv.listen(1)
    return srv, port


def loopback():
    """Both ends of a loopback TCP connection: (the node's, the broker's)."""
    srv, port = listener()
    client = socket.socket()
    client.connect(socket.getaddrinfo("127.0.0.1", port)[0][-1])
    server = srv.accept()[0]
    srv.close()
    return client, server


def read_exactly(sock, n):
    out = b""
    while len(out) < n:
        out += sock.read(n - len(out))
    return out


class TestMemory(unittest.TestCase):
    def test_batch_publish_allocates_nothing_and_frames_a_valid_publish(self):
        client, server = loopback()
        cfg = {"base_topic": "wattlog", "broker": {"host": "127.0.0.1", "port": 1, "user": None,
                                                  "password": None}, "batch_max": 64, "batch_wait_s": 0,
               "discovery_prefix": "homeassistant"}
        ring = Ring(128)
        link = Link("plug-1", cfg, ring, 10, 0xBEEF, lambda n: b"\x00" * n, {})
        link.mq.attach(client)  # as connect() leaves it
        link.up = True
        for i in range(100):
            ring.append(i * 10, i, i, 23000, 100)
        link._send_batch()  # the first call stores attributes for the first time
        read_exactly(server, 3 + 2 + len("wattlog/plug-1/readings") + 2 + wire.HEADER_SIZE + 64 * 16)
        ring.sent_to(ring.sent + link._inflight_n)  # as the PUBACK would
        ring.release(ring.sent)                     # as the collector's ack would
        link._inflight_n = 0
        failed = 0
        micropython.heap_lock()
        try:
            link._send_batch()
        except MemoryError:
            failed = 1
        micropython.heap_unlock()
        self.assertEqual(failed, 0)
        topic = b"wattlog/plug-1/readings"
        head = read_exactly(server, 1)
        self.assertEqual(head[0], 0x32)  # PUBLISH, QoS 1
        size = read_exactly(server, 2)
        remaining = (size[0] & 0x7F) | size[1] << 7
        body = read_exactly(server, remaining)
        self.assertEqual(body[:2 + len(topic)], bytes([0, len(topic)]) + topic)
        payload = body[2 + len(topic) + 2:]
        self.assertEqual(wire.decode_header(payload), (36, 10, 0xBEEF, 64, 0, 64))
        self.assertEqual(wire.unpack_record(payload, 0), (640, 64, 64, 23000, 100))
        client.close()
        server.close()


def _fill_heap(free=3072):
    """Blocks that leave about `free` bytes of the heap, as on a plug with little left."""
    hold = []
    gc.collect()
    while gc.mem_free() > free:
        try:
            hold.append(bytearray(256))
        except MemoryError:
            break
    return hold


def _load_config_interval_s():
    from wattnode import config as again  # in a frame of its own: nothing keeps it after
    return again.DEFAULTS["interval_s"]


class TestShortOfHeap(unittest.TestCase):
    def test_forget_gives_a_module_s_heap_back(self):
        """What start.py unloads after start-up (config.py, the biggest) is heap again once
        forgotten, and comes back whole at the next import (a command loads it again)."""
        if sys.platform == "webassembly":
            raise unittest.SkipTest("the WebAssembly port collects garbage only between the "
                                    "steps of its JavaScript host, not in gc.collect()")
        forget("config")
        gc.collect()
        before = gc.mem_alloc()
        self.assertEqual(_load_config_interval_s(), 10)
        gc.collect()
        loaded = gc.mem_alloc() - before
        forget("config")
        gc.collect()
        left = gc.mem_alloc() - before
        self.assertTrue(loaded > 4096 and left < loaded // 8, (loaded, left))

    def test_update_work_short_of_heap_does_not_stop_the_start(self):
        """A plug on trial after an update (ota/boot says so) whose heap cannot take ota.py at
        start-up still starts and meters; the loop tries once more, and then, still short,
        reboots so that boot.py can roll the unconfirmed version back, saying why."""
        need_sockets()
        cwd = os.getcwd()
        flash = FLASH + "-ota"
        try:
            for name in os.listdir(flash + "/ota"):  # a run before this one's
                os.remove(flash + "/ota/" + name)
            os.rmdir(flash + "/ota")
        except OSError:
            pass
        fresh_dir(flash)
        os.chdir(flash)
        try:
            os.mkdir("ota")
            with open("config.json", "w") as f:
                json.dump({"node_id": "plug-m", "broker": {"host": "127.0.0.1", "port": 1}}, f)
            board = board_file("sim")
            problems = []
            cfg = config.load("config.json", problems)
            hw = Board(board, cfg, {"profile": "constant:1000", "start": 1795000000}, flash)
            Node(cfg, board, hw, [], True, Ring(16))  # what a node imports, loaded as on a plug
            with open("ota/boot", "w") as f:
                f.write("u00000002 - trial 1 60\n")
            forget("ota")
            hold = _fill_heap(12288)  # room for the node's objects, not for ota.py too
            node = Node(cfg, board, hw, problems, True, Ring(16))
            self.assertEqual((node.ota, node._ota_due), (None, "trial"))  # not a failed start
            node._load_ota(node._ota_due, False)  # the loop's first pass: still no room
            hold = None
            gc.collect()
            self.assertIsNone(node.ota)
            self.assertIn("no heap left for the update's work at start-up", problems[-1])
            self.assertEqual(node.reboot_reason, "the update on trial cannot be confirmed "
                                                 "without heap")
        finally:
            os.chdir(cwd)

    def test_broadlink_short_of_heap_leaves_the_node_metering(self):
        """A plug whose heap cannot take the Broadlink protocol (about 10 KiB: its code, its
        buffers) runs on without it and says why, instead of crashing into safe mode. The
        heap is filled until 3 KiB are free, as on a plug with a big ring and little left."""
        need_sockets()
        cwd = os.getcwd()
        fresh_dir(FLASH)
        os.chdir(FLASH)
        try:
            with open("config.json", "w") as f:
                json.dump({"node_id": "plug-m", "broker": {"host": "127.0.0.1", "port": 1}}, f)
            board = board_file("sim")
            problems = []
            cfg = config.load("config.json", problems)
            hw = Board(board, cfg, {"profile": "constant:1000", "start": 1795000000}, FLASH)
            node = Node(cfg, board, hw, problems, True, Ring(16))
            forget("broadlink")  # another test may have loaded it
            cfg["broadlink"] = "read"
            said = []
            hold = _fill_heap()
            node._start_broadlink(said)
            hold = None
            gc.collect()
            self.assertIsNone(node.broadlink)
            self.assertEqual(said, ["no heap left for the Broadlink protocol (about 10 KiB); "
                                    "running without it"])
            node._begin(node.keeper.now(), hw.clock.ticks_ms())  # and it meters on
            hw.clock.advance_ms((node.sampler.slot_end - hw.clock.time_s()) * 1000)
            node.meter.poll()
            node.sampler.close(node.keeper.now(), hw.clock.ticks_ms())
            self.assertEqual((node.ring.next, node.status()["power_w"]), (1, 1000.0))
        finally:
            os.chdir(cwd)
