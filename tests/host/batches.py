"""batches.py - build wire batches for host tests, with wattnode.wire itself."""

from wattnode import wire

T0 = 1795170000  # a unix time on the 10 s grid


def batch(records, interval=10, boot=1, seq=0, dropped=0, held=None):
    """records: (unix t, power W, energy Wh, voltage V, current A); None marks missing."""
    buf = bytearray(wire.HEADER_SIZE + wire.RECORD_SIZE * len(records))
    wire.pack_header(buf, 0, len(records), interval, boot, seq, dropped, seq if held is None else held)
    for i, (t, p, e, v, a) in enumerate(records):
        wire.pack_record(buf, wire.HEADER_SIZE + i * wire.RECORD_SIZE, t - wire.EPOCH_UNIX,
                         wire.POWER_MISSING if p is None else round(p * 10),
                         wire.ENERGY_MISSING if e is None else e,
                         wire.U16_MISSING if v is None else round(v * 100),
                         wire.U16_MISSING if a is None else round(a * 1000))
    return bytes(buf)
