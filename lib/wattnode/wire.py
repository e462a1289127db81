"""wire.py - the byte layout of a batch of readings, shared by the node and the collector.

A batch is one MQTT payload on wattlog/<node>/readings: a 24-byte header followed by `count`
16-byte records, all little-endian. The node's ring stores records exactly as they are sent,
so a batch is the header plus a slice of the ring.

Header (HEADER_SIZE = 24)
  off size type  field        meaning
   0   1   u8    version      VERSION (2); a decoder refuses any other
   1   1   u8    record_size  RECORD_SIZE (16); a decoder refuses any other
   2   2   u16   count        records that follow (1..MAX_COUNT)
   4   2   u16   interval_s   slot length in seconds, 1..3600
   6   2   u16   reserved     0
   8   4   u32   boot         random number drawn at each node boot
  12   4   u32   seq          sequence number of the first record (counts from 0 each boot)
  16   4   u32   dropped      records the node's ring overwrote unacknowledged since boot
  20   4   u32   held         oldest seq the node still holds: records below it are gone
                              from its ring (acknowledged, or dropped), so asking for them
                              again is pointless (the collector's gap accounting needs this)

Record (RECORD_SIZE = 16)
  off size type  field        meaning                                     missing value
   0   4   u32   t_s          slot start, seconds since 2020-01-01 00:00 UTC (EPOCH_UNIX)
   4   4   i32   power_dw     mean power over the slot, 0.1 W             POWER_MISSING
   8   4   u32   energy_wh    the node's energy counter at slot end, Wh   ENERGY_MISSING
  12   2   u16   voltage_cv   mean voltage over the slot, 0.01 V          U16_MISSING
  14   2   u16   current_ma   mean current over the slot, mA              U16_MISSING

Why integers and a 2020 epoch: on the ESP32 every float result and every int of 2**30 or more
is a heap object, so the node samples in fixed point and counts time from 2020 (2**30 s after
2020 is the year 2054). Power is the slot's mean (energy delta / slot length), so the stored
series integrates to the meter's energy.
"""

import struct

try:
    from micropython import const
except ImportError:  # CPython: the collector imports this module too
    def const(x):
        return x

VERSION = const(2)
HEADER_SIZE = const(24)
RECORD_SIZE = const(16)
MAX_COUNT = const(4096)
MAX_INTERVAL_S = const(3600)
EPOCH_UNIX = const(1577836800)  # 2020-01-01T00:00:00Z

POWER_MISSING = const(-2147483648)
ENERGY_MISSING = const(0xFFFFFFFF)
U16_MISSING = const(0xFFFF)

HEADER_FMT = "<BBHHHIIII"
RECORD_FMT = "<IiIHH"


class BatchError(ValueError):
    """A malformed batch: `kind` is one word (truncated, oversized, version, record-size,
    count, interval, held), str() says what is wrong in words."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def pack_header(buf, off, count, interval_s, boot, seq, dropped, held):
    struct.pack_into(HEADER_FMT, buf, off, VERSION, RECORD_SIZE, count, interval_s, 0,
                     boot, seq, dropped, held)


def pack_record(buf, off, t_s, power_dw, energy_wh, voltage_cv, current_ma):
    struct.pack_into(RECORD_FMT, buf, off, t_s, power_dw, energy_wh, voltage_cv, current_ma)


def decode_header(data):
    """(count, interval_s, boot, seq, dropped, held) of a whole batch; BatchError saying what
    is wrong."""
    n = len(data)
    if n < HEADER_SIZE:
        raise BatchError("truncated", "truncated: %d bytes, shorter than the %d-byte header"
                         % (n, HEADER_SIZE))
    version, rsize, count, interval_s, _, boot, seq, dropped, held = \
        struct.unpack_from(HEADER_FMT, data, 0)
    if version != VERSION:
        raise BatchError("version", "unknown format version %d (this collector reads version %d)"
                         % (version, VERSION))
    if rsize != RECORD_SIZE:
        raise BatchError("record-size", "record size %d, expected %d" % (rsize, RECORD_SIZE))
    if count < 1 or count > MAX_COUNT:
        raise BatchError("count", "record count %d outside 1..%d" % (count, MAX_COUNT))
    body = n - HEADER_SIZE
    if body != count * RECORD_SIZE:
        kind = "truncated" if body < count * RECORD_SIZE else "oversized"
        raise BatchError(kind, "%s: header says %d records (%d bytes) but %d bytes follow"
                         % (kind, count, count * RECORD_SIZE, body))
    if interval_s < 1 or interval_s > MAX_INTERVAL_S:
        raise BatchError("interval", "interval %d s outside 1..%d" % (interval_s, MAX_INTERVAL_S))
    if held > seq:
        raise BatchError("held", "the node says it holds nothing before seq %d, yet sends %d"
                         % (held, seq))
    return count, interval_s, boot, seq, dropped, held


def unpack_record(data, i):
    """(t_s, power_dw, energy_wh, voltage_cv, current_ma) of record i of a batch."""
    return struct.unpack_from(RECORD_FMT, data, HEADER_SIZE + i * RECORD_SIZE)
