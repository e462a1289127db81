"""spill.py - the flash behind the RAM ring: a week without the collector, and nothing sampled
lost to a reset.
(About 390 lines, one concern: the spill's files, segments and their checks; what only a boot needs
is spillboot.py, loaded then and forgotten.)

Contract (the ring calls it as ring.behind; ring.py's seq addressing)
- Held records are one run [ring.first, ring.next): the oldest on flash, the newest in RAM,
  the two overlapping or touching. The spill holds [first, next) in whole segments.
- Records in RAM only and not acknowledged are mirrored in RTC memory (keep.py, at most
  SEGMENT_RECORDS = keep.CAPACITY = 126 of them). When that many wait, appended() writes them
  to flash as one segment. So nothing is written while the collector acknowledges within 126
  slots (21 min at 10 s; it acks every commit, 5 min by default), and a reset that keeps power
  loses nothing: what is not on flash is in RTC memory. A power cut loses at most the records
  not on flash yet: SEGMENT_RECORDS slots (21 min at 10 s), while the flash takes writes.
- appended() (per sample) copies one record to RTC memory and allocates nothing; a segment
  write (every 126 samples, in an outage only) and load() (sending from flash) allocate.
- load(ring, seq, max_n) reads the segment holding seq into `buf` for the link: the batch is
  a slice of it, and carries the segment's interval (`interval_s`). An ack (release) deletes
  every file whose records are all acknowledged.
- Full (max_files files, or the file system says ENOSPC): the oldest file goes, its records
  dropped and counted (ring.lose), never the newest. A write that fails otherwise (a flash
  error) leaves the records in RAM, said once on the log, and is tried again a segment later;
  should the RAM then overflow, the records it drops (and the older ones on flash: the run
  stays one run) are counted as the ring counts its drops.
- Before the first sample spillboot.behind() (loaded for it, then forgotten) makes the spill
  and takes what the boot before left on the flash and in RTC memory, oldest first, as this boot's seqs 0.. (`kept`);
  records of damaged segments are never sent, and counted (`torn`).
- `paused` (set while the energy total is not settled: energy.py) holds segment writes back:
  such records could not be raised after.

Files: SPILL_DIR/<4 hex digits>, numbered by a counter modulo 65536 (at most max_files live:
spillboot.py finds the oldest). A file holds at most FILE_SEGMENTS segments in
at most FILE_BYTES: one littlefs block, since littlefs gives each file blocks of its own. The
second segment is appended, and littlefs copies a partly written block into a fresh one to
append to it: a file costs 2 block erases and about 6 KiB programmed for 252 readings, plus
the directory's metadata commits (tools/bench/wear measures it on littlefs).

Segment (SEGMENT_HEADER = 16 bytes, then count records of wire.py's 16 bytes), little-endian
  off size type  field
   0   2   u16   magic        "SG"
   2   1   u8    version      1
   3   1   u8    record_size  16
   4   2   u16   count        1..SEGMENT_RECORDS
   6   2   u16   interval_s   of its records: a batch from it says this interval
   8   4   u32   reserved     0
  12   4   u32   crc          CRC-32 (binascii.crc32) of bytes 0..11, then of the records
"""

import os
import struct
from array import array
from binascii import crc32

from wattnode import wire

try:
    from micropython import const
except ImportError:  # CPython: the tests read a flash folder with it
    def const(x):
        return x

SPILL_DIR = "spill"
SEGMENT_HEADER = const(16)
SEGMENT_RECORDS = const(126)   # keep.CAPACITY: what RTC memory holds
FILE_SEGMENTS = const(2)
FILE_RECORDS = const(252)      # FILE_SEGMENTS * SEGMENT_RECORDS
FILE_BYTES = const(4096)       # a littlefs block on an ESP32
RESERVE_KIB = const(32)        # file system space the spill leaves free: the plug's small files
# (config, energy checkpoints, the update pointer). An update's staging shares the spill's
# room: its manifest is refused while an outage's readings fill the flash (ota/manifest.py),
# and is taken once they are sent; with a third copy of the node on the flash after two
# updates, a reserve of the staging's 248 KiB left 233 of the spill's 250 files (6.8 days;
# tools/bench/wear measures what each takes on littlefs)
SEGMENT_BYTES = const(2032)    # SEGMENT_HEADER + SEGMENT_RECORDS * 16: the read buffer
_MAGIC = const(0x4753)         # "SG"
_HDR_FMT = "<HBBHHII"
_ENOSPC = const(28)
_SAID_FULL = const(1)
_SAID_WRITE = const(2)
_SAID_HEAP = const(4)


def file_bytes(c1, c2):
    """The size of a file holding segments of c1 and c2 (0: none) records."""
    return (SEGMENT_HEADER + 16 * c1) + (SEGMENT_HEADER + 16 * c2 if c2 else 0)


def read_segment(f, pos, buf):
    """The segment at byte pos of the open file f, read into buf (SEGMENT_BYTES, records at
    buf[16:]): (count, interval_s, sound). (0, 0, False) at the end of the file; a damaged
    one is not sound: count is what its header claims, or what the rest of the file could
    hold when the header itself is damaged (interval_s 0: where it ends is not known)."""
    f.seek(pos)
    mv = memoryview(buf)
    got = f.readinto(mv[0:SEGMENT_HEADER])
    if not got:
        return 0, 0, False
    magic, version, rsize, count, interval_s, _, crc = struct.unpack_from(_HDR_FMT, buf, 0) \
        if got == SEGMENT_HEADER else (0, 0, 0, 0, 0, 0, 0)
    if magic != _MAGIC or version != 1 or rsize != wire.RECORD_SIZE or \
            not 1 <= count <= SEGMENT_RECORDS or not 1 <= interval_s <= wire.MAX_INTERVAL_S:
        rest = len(f.read()) // wire.RECORD_SIZE
        return (rest if 1 <= rest <= SEGMENT_RECORDS else 1), 0, False
    n = count * wire.RECORD_SIZE
    got = f.readinto(mv[SEGMENT_HEADER:SEGMENT_HEADER + n])
    sound = got == n and crc32(mv[SEGMENT_HEADER:SEGMENT_HEADER + n], crc32(mv[0:12])) == crc
    return count, interval_s, sound


class Spill:
    def __init__(self, keep, max_files, folder=SPILL_DIR, say=print):
        """keep: keep.Keep (RTC memory); max_files: the most files the spill may hold (the
        board's spill_kib in blocks; spillboot lowers it to what the file system has room
        for); say(text): a problem, said once on the log topic."""
        self.keep = keep
        self.max_files = max_files
        self._slots = max_files if max_files else 1
        self.folder = folder
        self.say = say
        self._no = array("H", bytes(2 * self._slots))  # the files, a ring of entries:
        self._c1 = bytearray(self._slots)               # number, records in segment 1, 2
        self._c2 = bytearray(self._slots)
        self._head = 0
        self._n = 0
        self._last_no = -1
        self._full_last = True  # the newest file takes no more segments
        self.first = 0          # records [first, next) are on flash
        self.next = 0
        self.interval_s = 0     # of the segment in buf (load())
        self.now_interval_s = 1
        self.buf = None         # the read buffer, allocated when the flash is read
        self.off = 0
        self._loaded = -1       # which segment buf holds: file number * 2 + segment
        self._hdr = bytearray(SEGMENT_HEADER)
        self._retry_at = 0
        self._said = 0
        self.paused = False
        self.writes = 0         # segments written this boot
        self.dropped = 0        # records dropped to make room this boot
        self.torn = 0           # records in damaged segments: never sent
        self.kept = 0           # records kept from before this boot (flash and RTC memory)

    # -- the index of files ------------------------------------------------------------------

    def path(self, no):
        return "%s/%04x" % (self.folder, no)

    def _at(self, k):
        """The index slot of the k-th file, oldest first."""
        return (self._head + k) % self._slots

    def add_file(self, no, c1, c2):
        """File no, holding segments of c1 and c2 (0: none) records, is the newest."""
        i = self._at(self._n)
        self._no[i] = no
        self._c1[i] = c1
        self._c2[i] = c2
        self._n += 1
        self._last_no = no
        self._full_last = c2 > 0 or file_bytes(c1, SEGMENT_RECORDS) > FILE_BYTES
        self.next += c1 + c2

    def _remove_oldest(self):
        """Delete the oldest file; the seq just past its records."""
        h = self._head
        end = self.first + self._c1[h] + self._c2[h]
        try:
            os.remove(self.path(self._no[h]))
        except OSError:
            pass  # gone already, or a failing flash: out of the index either way
        if self._loaded >> 1 == self._no[h]:
            self._loaded = -1
        self._head = (h + 1) % self._slots
        self._n -= 1
        self.first = end
        if not self._n:
            self.first = self.next
            self._full_last = True
            self.buf = None  # the read buffer goes back to the heap until it is needed
            self._said &= ~_SAID_FULL
        return end

    def holds(self, seq):
        return self._n > 0 and self.first <= seq < self.next

    # -- the ring's side ---------------------------------------------------------------------

    def appended(self, ring):
        """After each sample: RTC memory keeps it; a segment goes to flash when as many wait
        as RTC memory holds. Allocation-free but for the write."""
        seq = ring.next - 1
        self.keep.add(ring.buf, ring.offset(seq), seq)
        start = self.next if self._n and self.next > ring.first else ring.first
        if ring.next - start >= SEGMENT_RECORDS and ring.next >= self._retry_at and \
                self.max_files and not self.paused:
            self._flush(ring, start)

    def _flush(self, ring, start):
        """Write what RAM alone holds, [start, ring.next), in segments."""
        if not self._n:
            self.first = self.next = start
        cap = ring.capacity
        mv = memoryview(ring.buf)
        while start < ring.next:
            n = ring.next - start
            if n > SEGMENT_RECORDS:
                n = SEGMENT_RECORDS
            a = ring.offset(start)
            n1 = cap - start % cap
            if n1 >= n:
                parts = (mv[a:a + n * wire.RECORD_SIZE],)
            else:
                parts = (mv[a:a + n1 * wire.RECORD_SIZE], mv[0:(n - n1) * wire.RECORD_SIZE])
            if not self.write(ring, self.now_interval_s, parts):
                self._retry_at = ring.next + SEGMENT_RECORDS
                break
            start += n
        self.keep.drop_below(self.next)

    def write(self, ring, interval_s, parts):
        """One segment of the records in parts (memoryviews of whole records) at self.next:
        True when it is on flash."""
        n = 0
        for p in parts:
            n += len(p) // wire.RECORD_SIZE
        hdr = self._hdr
        struct.pack_into(_HDR_FMT, hdr, 0, _MAGIC, 1, wire.RECORD_SIZE, n, interval_s, 0, 0)
        crc = crc32(memoryview(hdr)[0:12])
        for p in parts:
            crc = crc32(p, crc)
        struct.pack_into("<I", hdr, 12, crc)
        for attempt in range(2):
            last = self._at(self._n - 1) if self._n else 0
            append = self._n and not self._full_last and \
                file_bytes(self._c1[last], n) <= FILE_BYTES
            if not append and self._n >= self.max_files and not self._drop_oldest(ring):
                return self._failed("it has no room (%d files)" % self.max_files)
            no = self._no[last] if append else (self._last_no + 1) & 0xFFFF
            if not self._n:
                try:
                    os.mkdir(self.folder)
                except OSError:
                    pass  # there already; if it cannot be made, open() says why
            try:
                with open(self.path(no), "ab" if append else "wb") as f:
                    f.write(hdr)
                    for p in parts:
                        f.write(p)
            except OSError as e:
                if append:
                    self._full_last = True  # its tail may be torn: the boot scan drops it
                else:
                    try:
                        os.remove(self.path(no))
                    except OSError:
                        pass
                if e.args and e.args[0] == _ENOSPC and attempt == 0 and self._n and \
                        self._drop_oldest(ring):
                    continue
                return self._failed(repr(e))
            except MemoryError:
                return self._failed("no heap to open a file")
            if append:
                self._c2[last] = n
                self._full_last = True
                self.next += n
            else:
                self.add_file(no, n, 0)
            self.writes += 1
            self._said &= ~_SAID_WRITE
            return True
        return False

    def _failed(self, why):
        if not self._said & _SAID_WRITE:
            self._said |= _SAID_WRITE
            self.say("spill: cannot write to the flash (%s): readings stay in RAM, the newest "
                     "126 in RTC memory; tried again every 126" % why)
        return False

    def _drop_oldest(self, ring):
        """Make room: the oldest file goes; its records not in RAM are dropped, counted."""
        if not self._n:
            return False
        end = self._remove_oldest()
        upto = end if end < ring.low else ring.low
        if upto > ring.first:
            self.dropped += upto - ring.first
            ring.lose(upto)
            if not self._said & _SAID_FULL:
                self._said |= _SAID_FULL
                self.say("spill: the flash is full (%d files): the oldest readings are "
                         "dropped and counted" % self.max_files)
        return True

    def release(self, upto):
        """Records below upto are acknowledged (or lost): files wholly below go."""
        while self._n:
            h = self._head
            if self.first + self._c1[h] + self._c2[h] > upto:
                break
            self._remove_oldest()
        self.keep.drop_below(upto)

    def _find(self, seq):
        """Where record seq lies on flash: (index slot, first seq of its segment, segment 0
        or 1, its byte offset in the file, its records), or None."""
        s = self.first
        for k in range(self._n):
            i = self._at(k)
            c1 = self._c1[i]
            if seq < s + c1:
                return i, s, 0, 0, c1
            if seq < s + c1 + self._c2[i]:
                return i, s + c1, 1, file_bytes(c1, 0), self._c2[i]
            s += c1 + self._c2[i]
        return None

    def load(self, ring, seq, max_n):
        """Records from seq (on flash) for a batch: n >= 1 of them at buf[off:], with
        interval_s; 0 when their segment was damaged (dropped: ring.lose); -1 when there is
        no heap for the read buffer now."""
        at = self._find(seq)
        if at is None:
            ring.lose(seq + 1)  # not held: cannot happen while the run is one run
            return 0
        i, s, seg, pos, cnt = at
        key = self._no[i] * 2 + seg
        if key != self._loaded:
            if self.buf is None:
                try:
                    self.buf = bytearray(SEGMENT_BYTES)
                except MemoryError:
                    if not self._said & _SAID_HEAP:
                        self._said |= _SAID_HEAP
                        self.say("spill: no heap for its 2 KiB read buffer: readings on the "
                                 "flash wait")
                    return -1
            try:
                with open(self.path(self._no[i]), "rb") as f:
                    n, iv, sound = read_segment(f, pos, self.buf)
            except OSError:
                sound = False
            if not sound or n != cnt:
                self._loaded = -1
                self.torn += cnt
                self.say("spill: a segment of %d readings failed its check when read back: "
                         "dropped, with the readings before it" % cnt)
                self.release(s + cnt)
                ring.lose(s + cnt)
                return 0
            self._loaded = key
            self.interval_s = iv
        self.off = SEGMENT_HEADER + (seq - s) * wire.RECORD_SIZE
        n = s + cnt - seq
        return n if n < max_n else max_n

    def newest_kept(self, ring):
        """(energy Wh, slot in wire s) of the newest record on flash, or None (none there, it
        is damaged, or its energy is missing): after a power cut, an outage's readings never
        sent may hold a higher total than any the node published (energy.py). Reads the flash."""
        if not self.holds(self.next - 1) or self.load(ring, self.next - 1, 1) <= 0:
            return None
        t_s, _, wh, _, _ = struct.unpack_from(wire.RECORD_FMT, self.buf, self.off)
        return None if wh == wire.ENERGY_MISSING else (wh, t_s)

    # -- what it holds -----------------------------------------------------------------------

    def capacity(self):
        """The readings it may hold."""
        return self.max_files * FILE_RECORDS

    def held(self, ring):
        """(readings on flash not acknowledged, bytes of its files, the oldest one's slot in
        wire s or -1): for Node.status(). Reads a record from the flash; allocates."""
        size = 0
        for k in range(self._n):
            i = self._at(k)
            size += file_bytes(self._c1[i], self._c2[i])
        start = self.first if self.first > ring.first else ring.first
        held = self.next - start if self._n and self.next > start else 0
        slot = -1
        at = self._find(start) if held else None
        if at is not None:
            try:
                with open(self.path(self._no[at[0]]), "rb") as f:
                    f.seek(at[3] + SEGMENT_HEADER + (start - at[1]) * wire.RECORD_SIZE)
                    slot = struct.unpack("<I", f.read(4))[0]
            except (OSError, ValueError):
                pass
        return held, size, slot
