"""keep.py - the readings not on flash yet, kept in RTC memory: a reset that keeps power (a
crash, the watchdog, a soft reset, a reboot by command or by an update) loses none of them.

Contract
- RTC memory (the hardware layer's rtc: read(), write(buf); machine.RTC().memory() on an
  ESP32: RTC_BYTES, 2 KiB, kept across every reset but a power cut) holds one image, shared:
  energy.py's 16 bytes at 0 (the energy total), this journal from JOURNAL_OFF. The image is
  one bytearray in RAM, loaded at boot; memory(buf) replaces the whole of RTC memory, so every
  write writes the whole image (a 2 KiB copy, no flash).
- The journal mirrors the newest records the collector has not acknowledged and the flash
  does not hold (spill.py): at most CAPACITY (126) of them, records [lo, lo + count) of the
  ring, record seq at slot seq % CAPACITY. The spill writes them to flash before there are
  more, so after a watchdog reset, when no code of ours could save anything, they are here.
  Should the flash refuse them, add() keeps the newest CAPACITY: older ones are then in RAM
  only (spill.py says so once).
- add() copies one record and writes the image: no allocation, no flash. drop_below() lets
  records go (on flash now, or acknowledged).
- At boot restore() puts the journal of the boot before in order at the front of the record
  area (records(): image, offset, count) with its interval; clear() starts an empty one.
- A check covers the header and the records (a byte sum, kept up to date record by record:
  a CRC per slot would allocate on a 32-bit port). A power cut empties RTC memory (MicroPython
  then reads b""); an image from another firmware or torn by a reset mid-write fails the check,
  and nothing is restored from it.

Journal header at JOURNAL_OFF (HEADER_SIZE = 16), little-endian
  off size type  field
   0   2   u16   magic      "WK"
   2   1   u8    version    1
   3   1   u8    capacity   CAPACITY
   4   2   u16   interval_s of the records
   6   2   u16   count      records held, 0..capacity
   8   4   u32   lo         seq of the oldest (this boot's numbering)
  12   4   u32   check      (magic + interval_s + count + lo + the records' bytes) mod 2**30
Records (16 bytes each, wire.py's layout) follow from JOURNAL_OFF + HEADER_SIZE.
"""

import struct

from wattnode import wire

try:
    from micropython import const
except ImportError:  # CPython: the tests read a plug's RTC memory with it
    def const(x):
        return x

RTC_BYTES = const(2048)    # machine.RTC().memory() on an ESP32 (MICROPY_HW_RTC_USER_MEM_MAX)
JOURNAL_OFF = const(16)    # energy.py's 16 bytes come first
HEADER_SIZE = const(16)
CAPACITY = const(126)      # (RTC_BYTES - JOURNAL_OFF - HEADER_SIZE) // wire.RECORD_SIZE
_RECORDS = const(32)       # JOURNAL_OFF + HEADER_SIZE: where slot 0 lies in the image
_MAGIC = const(0x4B57)     # "WK"
_VERSION = const(1)
_MASK = const(0x3FFFFFFF)
_FMT = "<HBBHHII"


def record_sum(buf, off):
    """The sum of a record's 16 bytes (allocation-free)."""
    s = 0
    for i in range(off, off + wire.RECORD_SIZE):
        s += buf[i]
    return s


class Keep:
    def __init__(self, rtc, image=None):
        """image: the RTC image (RTC_BYTES) shared with energy.py; loaded here from RTC memory,
        so nothing written before restore() can overwrite the last boot's journal."""
        self._rtc = rtc
        self.image = image if image is not None else bytearray(RTC_BYTES)
        raw = rtc.read()
        n = len(raw) if len(raw) < RTC_BYTES else RTC_BYTES
        self.image[:n] = raw[:n]
        self.interval_s = 0
        self.count = 0
        self.lo = 0
        self._sum = 0

    def _write(self):
        struct.pack_into(_FMT, self.image, JOURNAL_OFF, _MAGIC, _VERSION, CAPACITY,
                         self.interval_s, self.count, self.lo,
                         (_MAGIC + self.interval_s + self.count + self.lo + self._sum) & _MASK)
        self._rtc.write(self.image)

    def restore(self):
        """The journal the boot before left: (interval_s, count), its records moved in order
        to records(); (0, 0) when there is none (a power cut, a new plug) or it fails its
        check. Allocates (once, at boot)."""
        magic, version, capacity, interval_s, count, lo, check = \
            struct.unpack_from(_FMT, self.image, JOURNAL_OFF)
        if magic != _MAGIC or version != _VERSION or capacity != CAPACITY or \
                count > CAPACITY or not 1 <= interval_s <= wire.MAX_INTERVAL_S:
            return 0, 0
        s = 0
        for k in range(count):
            s += record_sum(self.image, self._off(lo + k))
        if (magic + interval_s + count + lo + s) & _MASK != check:
            return 0, 0
        ordered = b"".join(bytes(self.image[self._off(lo + k):self._off(lo + k) + 16])
                           for k in range(count))
        self.image[_RECORDS:_RECORDS + len(ordered)] = ordered
        return interval_s, count

    def records(self):
        """(buffer, offset) of the records restore() put in order."""
        return self.image, _RECORDS

    def clear(self, interval_s, seq):
        """An empty journal whose next record is seq, for records of interval_s."""
        self.interval_s = interval_s
        self.count = 0
        self.lo = seq
        self._sum = 0
        self._write()

    def _off(self, seq):
        return _RECORDS + (seq % CAPACITY) * wire.RECORD_SIZE

    def add(self, buf, off, seq):
        """Record seq, at buf[off:off + 16], is the newest: keep it (and only the newest
        CAPACITY). A seq that does not follow the last one starts the journal over."""
        if seq != self.lo + self.count:
            self.lo = seq
            self.count = 0
            self._sum = 0
        if self.count == CAPACITY:  # the flash refused the oldest: it is in RAM only now
            self._sum -= record_sum(self.image, self._off(self.lo))
            self.lo += 1
            self.count -= 1
        dst = self._off(seq)
        img = self.image
        for i in range(wire.RECORD_SIZE):
            img[dst + i] = buf[off + i]
        self._sum += record_sum(img, dst)
        self.count += 1
        self._write()

    def drop_below(self, seq):
        """Records below seq are on flash or acknowledged: they leave."""
        if seq <= self.lo:
            return
        end = self.lo + self.count
        if seq > end:
            seq = end
        while self.lo < seq:
            self._sum -= record_sum(self.image, self._off(self.lo))
            self.lo += 1
            self.count -= 1
        if self.count == 0:
            self._sum = 0
            self.lo = seq
        self._write()
