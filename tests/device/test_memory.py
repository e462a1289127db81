"""test_memory.py - publishing a batch allocates nothing: the PUBLISH packet is framed in
preallocated buffers and the records go from the ring to the socket without a copy."""

import unittest

import micropython

from wattnode import wire
from wattnode.link import Link
from wattnode.ring import Ring

from netrig import loopback, read_exactly


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
