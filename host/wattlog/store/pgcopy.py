"""pgcopy.py - a plug's readings in PostgreSQL's binary COPY format, laid out by numpy a chunk
at a time (store/migrate.py's copy; text COPY or a row at a time in Python is many times
slower), both ways: into wl_readings (node_id, slot, power, voltage, current, energy) and back.

The format (PostgreSQL's "COPY ... (FORMAT BINARY)"): the header HEAD (the signature, flags 0,
no extension), then per row a field count (int16) and each field as its length (int32) and
its bytes, all big-endian, a NULL as the length -1 alone; the trailer TAIL (-1, int16). A row
of ours is 50 bytes laid out at once (ROW) for a whole chunk, then the 4 value bytes of each
NULL are left out; read back, NULL comes as NaN (COALESCE in the query), so every row is the
same 42 bytes (HELD) and numpy reads them where they lie.

    data = rows(node_id, lo, block)     # block: float32 [channel, slot], slot lo first
    block = held(cursor, node_id, lo, hi)
"""

import struct

import numpy as np

from wattlog.store.postgres import CHANNELS  # wl_readings' value columns, in order

_VALUES = [(name, kind) for c in CHANNELS for name, kind in ((c + "_len", ">i4"), (c, ">f4"))]
ROW = np.dtype([("fields", ">i2"), ("node_len", ">i4"), ("node_id", ">i4"), ("slot_len", ">i4"),
                ("slot", ">i4")] + _VALUES)
HELD = np.dtype([("fields", ">i2"), ("slot_len", ">i4"), ("slot", ">i4")] + _VALUES)
HEAD = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
TAIL = struct.pack(">h", -1)


def rows(node_id, lo, block):
    """Binary COPY data of the slots of `block` (slot lo first) that hold a reading, NULL where
    a channel has none."""
    present = ~np.isnan(block)
    slots = np.flatnonzero(present.any(axis=0))
    out = np.zeros(len(slots), dtype=ROW)
    out["fields"] = 2 + len(CHANNELS)
    keep = np.ones((len(slots), ROW.itemsize), dtype=bool)  # a NULL is its length alone
    for name in ("node", "slot"):
        out[name + "_len"] = 4
    out["node_id"] = node_id
    out["slot"] = lo + slots
    for i, channel in enumerate(CHANNELS):
        out[channel] = block[i, slots]
        null = ~present[i, slots]
        out[channel + "_len"] = np.where(null, -1, 4)
        at = ROW.fields[channel][1]
        keep[null, at:at + 4] = False
    data = out.view(np.uint8).reshape(len(slots), ROW.itemsize)[keep]
    return HEAD + data.tobytes() + TAIL


def held(cur, node_id, lo, hi):
    """float32 [channel, slot] of what the database holds of slots lo..hi, NaN where none."""
    got = bytearray()
    with cur.copy("COPY (SELECT slot, %s FROM wl_readings WHERE node_id = %%s AND slot >= %%s "
                  "AND slot < %%s) TO STDOUT (FORMAT BINARY)" % ", ".join(
                      "COALESCE(%s, 'NaN')" % c for c in CHANNELS), (node_id, lo, hi)) as copy:
        for part in copy:
            got += part
    found = np.frombuffer(got, dtype=HELD, offset=len(HEAD),
                          count=(len(got) - len(HEAD) - len(TAIL)) // HELD.itemsize)
    out = np.full((len(CHANNELS), hi - lo), np.nan, dtype="<f4")
    for i, channel in enumerate(CHANNELS):
        out[i, found["slot"] - lo] = found[channel]
    return out
