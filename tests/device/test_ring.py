"""test_ring.py - the ring keeps records in order, batches them as slices, drops the oldest when
full (and says so), and allocates nothing on its hot path."""

import struct
import unittest

import micropython

from wattnode import wire
from wattnode.ring import Ring


def rec(ring, seq):
    return struct.unpack_from(wire.RECORD_FMT, ring.buf, ring.offset(seq))


class TestRing(unittest.TestCase):
    def test_append_then_release(self):
        """Records come out in order with their fields; release frees exactly up to a seq."""
        r = Ring(8)
        for i in range(5):
            self.assertFalse(r.append(10 * i, i, 100 + i, 23000, 500))
        self.assertEqual(r.count(), 5)
        self.assertEqual(rec(r, 3), (30, 3, 103, 23000, 500))
        r.release(2)
        self.assertEqual((r.first, r.count()), (2, 3))
        r.release(1)  # already freed: nothing happens
        self.assertEqual(r.first, 2)
        r.release(99)  # beyond what exists: frees only what exists
        self.assertEqual((r.first, r.count()), (5, 0))

    def test_batch_is_a_contiguous_slice_up_to_the_buffer_end(self):
        """peek stops at max_n and at the end of the buffer; the next batch wraps to the start."""
        r = Ring(8)
        for i in range(6):
            r.append(i, 0, 0, 0, 0)
        r.release(5)
        for i in range(6, 11):
            r.append(i, 0, 0, 0, 0)  # seqs 5..10: 5,6,7 at the end, 8,9,10 wrapped
        self.assertEqual(r.peek(100), 3)
        self.assertEqual(r.peek(2), 2)
        off = r.offset(r.first)
        batch = bytes(r.buf[off:off + 3 * wire.RECORD_SIZE])
        self.assertEqual([struct.unpack_from(wire.RECORD_FMT, batch, 16 * i)[0] for i in range(3)],
                         [5, 6, 7])
        r.release(8)
        self.assertEqual(r.offset(r.first), 0)
        self.assertEqual(r.peek(100), 3)

    def test_sent_records_stay_until_released(self):
        """Sending moves `sent`, not `first`: a sent record is held until the collector's ack
        releases it; rewind resends from an earlier seq but never from a freed one."""
        r = Ring(8)
        for i in range(6):
            r.append(i, 0, 0, 0, 0)
        self.assertEqual((r.peek(4), r.offset(r.sent)), (4, 0))
        r.sent_to(4)
        self.assertEqual((r.first, r.sent, r.unsent(), r.count()), (0, 4, 2, 6))
        self.assertEqual(r.peek(100), 2)
        r.release(3)                 # the collector has 0..2 on disk
        r.rewind(1)                  # asked again from 1: 1 and 2 are gone, so from 3
        self.assertEqual((r.first, r.sent), (3, 3))
        r.sent_to(99)                # never beyond what exists
        self.assertEqual(r.sent, 6)
        r.rewind(5)
        self.assertEqual(r.sent, 5)
        r.release(6)                 # an ack past `sent` (sent before a reconnect) moves it on
        self.assertEqual((r.first, r.sent, r.unsent()), (6, 6, 0))

    def test_full_ring_drops_unsent_records_too(self):
        """A full ring drops its oldest record whether or not it was sent, and `sent` follows."""
        r = Ring(4)
        for i in range(6):
            r.append(i, 0, 0, 0, 0)
        self.assertEqual((r.first, r.sent, r.unsent()), (2, 2, 4))
        r.sent_to(5)
        r.append(6, 0, 0, 0, 0)
        r.append(7, 0, 0, 0, 0)
        self.assertEqual((r.first, r.sent, r.dropped), (4, 5, 4))

    def test_full_ring_drops_the_oldest_and_counts(self):
        """When full, append overwrites the oldest record, returns True and counts the drop."""
        r = Ring(4)
        dropped = [r.append(i, 0, 0, 0, 0) for i in range(6)]
        self.assertEqual(dropped, [False] * 4 + [True] * 2)
        self.assertEqual((r.dropped, r.first, r.count()), (2, 2, 4))
        self.assertEqual([rec(r, s)[0] for s in range(r.first, r.next)], [2, 3, 4, 5])

    def test_hot_path_allocates_nothing(self):
        """append, peek, offset, count and release run with the heap locked."""
        r = Ring(16)
        r.append(1, 2, 3, 4, 5)
        errors = 0
        micropython.heap_lock()
        try:
            for i in range(40):
                r.append(i * 10, -i, i, 23000, 100)
                if r.peek(8) and r.count() > 10:
                    r.sent_to(r.sent + r.peek(8))
                    r.rewind(r.sent - 1)
                    r.release(r.first + 2 + r.offset(0))
        except MemoryError:
            errors = 1
        micropython.heap_unlock()
        self.assertEqual(errors, 0)
