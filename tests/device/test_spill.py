"""test_spill.py - the flash spill behind the RAM ring (spill.py) and RTC memory's journal
(keep.py): nothing is written while the collector acknowledges; an outage longer than the
ring goes to flash and comes back oldest first, record for record; a full spill drops only the
oldest and counts them; a reset that keeps power loses nothing, a power cut at most what was
not on flash yet; a damaged segment is never sent; a flash that refuses writes leaves the node
metering. The plug's parts as the node wires them: a Ring, a Spill with its Keep, the
simulated board's RTC memory (a file), a folder as the flash."""

import gc
import os
import struct
import unittest

import micropython

from wattnode import keep as keepmod, spill as spillmod, wire
from wattnode.keep import Keep
from wattnode.ring import Ring
from wattnode.spill import FILE_RECORDS, SEGMENT_RECORDS, Spill
from wattnode.spillboot import boot, file_numbers
from wattsim.board import MemoryRTC, SimRTCMemory
import scratch

FLASH = scratch.DIR + "/spill"
RTC = FLASH + "/.rtc-memory"
FOLDER = FLASH + "/spill"
INTERVAL_S = 10


def empty(path):
    """Remove path and all below it (a plug's flash folder from an earlier test)."""
    try:
        names = os.listdir(path)
    except OSError:
        try:
            os.remove(path)
        except OSError:
            pass
        return
    for name in names:
        empty(path + "/" + name)
    os.rmdir(path)


def record(i):
    """The fields of test record i: its slot, and values that tell it from every other."""
    return (i * INTERVAL_S, 1000 + i, 50000 + i, 23000 + i % 100, 4000 + i % 1000)


def runs(sent):
    """Records as they were sent, told as runs of test record numbers [(first, last), ...]; a
    record whose fields are not test record i's is a run ("wrong", i) of its own."""
    out = []
    for fields in sent:
        i = fields[0] // INTERVAL_S
        if fields != record(i):
            out.append(("wrong", i))
        elif out and out[-1][0] != "wrong" and out[-1][1] == i - 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


def send(ring, ack=True):
    """Every record the ring holds, as the link would send it, oldest first: [(interval,
    fields)]; with ack, each batch is acknowledged as the collector would, once sent."""
    ring.rewind(ring.first)
    out = []
    while ring.unsent():
        n = ring.peek(64)
        for k in range(n):
            out.append((ring.src_interval_s or INTERVAL_S,
                        struct.unpack_from(wire.RECORD_FMT, ring.src,
                                           ring.src_off + k * wire.RECORD_SIZE)))
        ring.sent_to(ring.sent + n)
        if ack:
            ring.release(ring.sent)
    return out


class Plug:
    """A ring with the spill behind it, as Node wires them; boot() as at start-up."""

    def __init__(self, ring_records=256, files=16, interval_s=INTERVAL_S, rtc_path=RTC):
        self.said = []
        self.rtc = SimRTCMemory(rtc_path)
        self.keep = Keep(self.rtc)
        self.ring = Ring(ring_records)
        self.spill = Spill(self.keep, files, FOLDER, self.said.append)
        self.ring.behind = self.spill
        boot(self.spill, self.ring, interval_s)

    def sample(self, first, n):
        """Append records first..first+n-1; how many appends said a record was lost."""
        lost = 0
        for i in range(first, first + n):
            lost += self.ring.append(*record(i))
        return lost

    def send_all(self, ack=True):
        return send(self.ring, ack)


class TestSpill(unittest.TestCase):
    def setUp(self):
        empty(FLASH)
        os.mkdir(FLASH)

    def tearDown(self):
        empty(FLASH)

    def test_nothing_is_written_while_the_collector_acknowledges(self):
        """A collector that acknowledges every 30 slots (its 5 min commits at 10 s): 2000
        slots, no segment written, no folder made; only RTC memory follows each slot."""
        p = Plug()
        for k in range(0, 2000, 30):
            p.sample(k, 30)
            p.ring.sent_to(p.ring.next)
            p.ring.release(p.ring.next)
        self.assertEqual((p.spill.writes, p.ring.dropped), (0, 0))
        self.assertFalse("spill" in os.listdir(FLASH))

    def test_an_outage_longer_than_the_ring_comes_back_from_flash_oldest_first(self):
        """1000 slots without an ack in a 256-record ring: nothing dropped; sending gives all
        1000 records in order, the oldest read from flash; acks free the files."""
        p = Plug()
        self.assertEqual(p.sample(0, 1000), 0)
        self.assertEqual((p.ring.first, p.ring.dropped), (0, 0))
        self.assertEqual(p.spill.writes, 1000 // SEGMENT_RECORDS)
        self.assertTrue(p.ring.low > 0)  # the oldest are on flash only
        self.assertEqual(runs(f for _, f in p.send_all()), [(0, 999)])
        self.assertEqual(os.listdir(FOLDER), [])

    def test_a_full_spill_drops_only_the_oldest_and_counts_them(self):
        """2 files (504 records) and a 256-record ring, 2000 slots without an ack: the held
        readings are the newest, one run; the dropped ones are exactly the oldest, counted."""
        p = Plug(files=2)
        lost = p.sample(0, 2000)
        ring = p.ring
        self.assertEqual(lost, 0)  # the ring made room; the spill dropped (not the newest)
        self.assertEqual(ring.dropped, ring.first)
        self.assertEqual(p.spill.dropped, ring.first)
        self.assertTrue(ring.first > 0 and ring.count() > FILE_RECORDS + ring.capacity // 2)
        first = ring.first
        self.assertEqual(runs(f for _, f in p.send_all()), [(first, 1999)])
        self.assertEqual(len(p.said), 1)
        self.assertIn("the flash is full", p.said[0])

    def test_a_reset_that_keeps_power_loses_nothing(self):
        """Held records on flash and in RTC memory only (not a segment's worth): after a reset
        the next boot holds them all, numbered from 0, and sends them first (the acknowledged
        ones of a file it still holds come again: duplicates, which the collector takes)."""
        p = Plug()
        p.sample(0, 300)
        p.ring.release(40)  # the collector had 0..39, in the first file
        again = Plug()
        self.assertEqual((again.ring.first, again.ring.base, again.spill.kept), (0, 300, 300))
        again.sample(300, 5)
        self.assertEqual(runs(f for _, f in again.send_all()), [(0, 304)])
        self.assertIn("kept 300 readings from before this boot (252 on the flash, 48 in RTC "
                      "memory)", again.said[-1])

    def test_a_power_cut_loses_at_most_what_was_not_on_flash(self):
        """RTC memory gone: the next boot has what was on flash; what it lost is less than a
        segment (the stated bound: SEGMENT_RECORDS slots)."""
        p = Plug()
        p.sample(0, 300)
        on_flash = p.spill.next
        os.remove(RTC)
        again = Plug()
        self.assertEqual(runs(f for _, f in again.send_all()), [(0, on_flash - 1)])
        self.assertTrue(0 < 300 - on_flash < SEGMENT_RECORDS)

    def test_a_torn_segment_is_never_sent_and_is_counted(self):
        """A file cut short in its second segment (a power cut during the write, on a file
        system without littlefs's atomic commit) and one with a flipped record byte: at boot
        both segments are dropped and counted, every other record comes back."""
        p = Plug()
        p.sample(0, 4 * SEGMENT_RECORDS)
        names = sorted(os.listdir(FOLDER))
        self.assertEqual(len(names), 2)
        first, second = FOLDER + "/" + names[0], FOLDER + "/" + names[1]
        with open(first, "rb") as f:
            data = bytearray(f.read())
        data[16 + 5 * 16 + 4] ^= 0x01  # segment 1, record 5's power
        with open(first, "wb") as f:
            f.write(data)
        size = os.stat(second)[6]
        with open(second, "rb") as f:
            data = f.read()
        with open(second, "wb") as f:
            f.write(data[:size - 100])
        os.remove(RTC)  # a power cut
        again = Plug()
        self.assertEqual(again.spill.torn, 2 * SEGMENT_RECORDS)
        self.assertEqual(runs(f for _, f in again.send_all()),
                         [(SEGMENT_RECORDS, 3 * SEGMENT_RECORDS - 1)])
        self.assertIn("dropped, never sent", again.said[0])

    def test_a_flash_that_refuses_writes_leaves_the_node_metering(self):
        """The spill folder cannot be made (a file is in its way): the node says so once,
        keeps sampling, RTC memory keeps the newest records, and only what the full RAM ring
        must drop is dropped and counted."""
        with open(FOLDER, "w") as f:
            f.write("in the way")
        p = Plug()
        lost = p.sample(0, 1000)
        self.assertEqual((lost, p.ring.dropped, p.ring.first), (1000 - 256, 1000 - 256, 744))
        self.assertEqual(len(p.said), 1)
        self.assertIn("cannot write to the flash", p.said[0])
        self.assertEqual(runs(f for _, f in p.send_all(ack=False)), [(744, 999)])
        self.assertEqual(p.keep.count, keepmod.CAPACITY)

    def test_a_write_that_fails_midway_is_said_once_and_nothing_torn_is_sent(self):
        """The flash fails in the middle of segments' writes (EIO after a header is written:
        a worn block, a brown-out), twice in a row, then works again: the plug says it once,
        keeps the readings in RAM (and the newest in RTC memory), tries again SEGMENT_RECORDS
        later, and what it sends afterwards is every reading once, oldest first: none lost,
        none torn, none twice."""
        real_open = spillmod.__dict__.get("open", open)
        failing = [2]  # writes that fail

        class Torn:  # a file whose second write (the records, after the header) fails
            def __init__(self, path, mode):
                self.f, self.n = real_open(path, mode), 0

            def write(self, data):
                self.n += 1
                if self.n == 2:
                    failing[0] -= 1
                    raise OSError(5)  # EIO
                return self.f.write(data)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()

        p = Plug(ring_records=3 * 128)      # RAM holds what two failed writes leave to it
        p.sample(0, SEGMENT_RECORDS)        # one segment on the flash
        spillmod.open = lambda path, mode: Torn(path, mode) if failing[0] else \
            real_open(path, mode)
        try:  # two writes fail, the third writes what RAM held; then 5 more segments: what
            # is sent at the end comes from the flash but for the ring's last 384
            lost = p.sample(SEGMENT_RECORDS, 1200 - SEGMENT_RECORDS)
        finally:
            del spillmod.open
        self.assertEqual((lost, p.ring.dropped, failing[0]), (0, 0, 0))
        self.assertEqual(len(p.said), 1)
        self.assertIn("cannot write to the flash (OSError(5", p.said[0])
        self.assertEqual(runs(f for _, f in p.send_all()), [(0, 1199)])

    def test_readings_from_before_an_interval_change_keep_their_interval(self):
        """RTC memory's readings taken at 10 s, the next boot at 30 s: they go to flash with
        their interval, and their batches say 10 s."""
        p = Plug()
        p.sample(0, 20)
        again = Plug(interval_s=30)
        sent = again.send_all()
        self.assertEqual(({iv for iv, _ in sent}, runs(f for _, f in sent)), ({10}, [(0, 19)]))

    def test_sampling_allocates_nothing_until_a_segment_is_written(self):
        """append, with the spill behind the ring, runs with the heap locked (RTC memory is
        written, no flash) for the slots between two segment writes."""
        p = Plug()
        p.sample(0, 1)
        failed = 0
        micropython.heap_lock()
        try:
            for i in range(1, SEGMENT_RECORDS - 1):
                p.ring.append(i * INTERVAL_S, i, i, 23000, 100)
        except MemoryError:
            failed = 1
        micropython.heap_unlock()
        self.assertEqual((failed, p.spill.writes), (0, 0))

    def test_file_numbers_come_oldest_first_across_the_wrap(self):
        self.assertEqual(file_numbers(["fffe", "0001", "ffff", "0000", "x", "12345"]),
                         [0xFFFE, 0xFFFF, 0, 1])
        self.assertEqual(file_numbers(["0003", "0002"]), [2, 3])


class TestKeep(unittest.TestCase):
    def setUp(self):
        empty(FLASH)
        os.mkdir(FLASH)

    def tearDown(self):
        empty(FLASH)

    def test_a_foreign_or_damaged_image_restores_nothing(self):
        """RTC memory holding what another firmware left, or a journal with one byte changed,
        restores nothing; an intact one restores its records in order."""
        rtc = SimRTCMemory(RTC)
        k = Keep(rtc)
        k.clear(10, 0)
        buf = bytearray(16 * 200)
        for i in range(200):
            wire.pack_record(buf, 16 * i, *record(i))
            k.add(buf, 16 * i, i)
        self.assertEqual(Keep(rtc).restore(), (10, keepmod.CAPACITY))
        again = Keep(rtc)
        again.restore()
        img, off = again.records()
        self.assertEqual(runs(struct.unpack_from(wire.RECORD_FMT, img, off + 16 * i)
                              for i in range(keepmod.CAPACITY)),
                         [(200 - keepmod.CAPACITY, 199)])
        raw = bytearray(rtc.read())
        raw[keepmod.JOURNAL_OFF + keepmod.HEADER_SIZE + 7] ^= 0x40
        rtc.write(raw)
        self.assertEqual(Keep(rtc).restore(), (0, 0))
        rtc.write(bytes(range(256)) * 8)
        self.assertEqual(Keep(rtc).restore(), (0, 0))

    def test_the_image_fits_rtc_memory(self):
        self.assertEqual(keepmod.JOURNAL_OFF + keepmod.HEADER_SIZE
                         + keepmod.CAPACITY * wire.RECORD_SIZE, keepmod.RTC_BYTES)
        self.assertEqual(spillmod.SEGMENT_RECORDS, keepmod.CAPACITY)


class TestOnLittlefs(unittest.TestCase):
    """The spill on littlefs as an ESP32 mounts it, over a simulated flash that counts every
    program and erase (lib/wattsim/flash.py; tools/bench/wear measures a year on it)."""

    def setUp(self):
        import vfs
        if not hasattr(vfs, "VfsLfs2"):
            raise unittest.SkipTest("needs littlefs (vfs.VfsLfs2): the unix port has it, the "
                                    "32-bit WebAssembly port has not")
        from wattsim.flash import Flash
        gc.collect()  # the earlier tests' garbage: the flash is one block of heap
        self.flash = Flash(blocks=88)
        self.flash.mount("/lfs")
        self.said = []
        self.ring = Ring(256)
        self.spill = Spill(Keep(MemoryRTC()), 16, "/lfs/spill", self.said.append)
        self.ring.behind = self.spill
        boot(self.spill, self.ring, INTERVAL_S)

    def tearDown(self):
        import vfs
        vfs.umount("/lfs")

    def test_normal_running_programs_and_erases_nothing(self):
        """A day of slots, the collector acknowledging every 30: the flash is not touched."""
        before = self.flash.counts()
        for k in range(0, 8640, 30):
            for i in range(k, k + 30):
                self.ring.append(*record(i))
            self.ring.sent_to(self.ring.next)
            self.ring.release(self.ring.next)
        self.assertEqual(self.flash.counts(), before)

    def test_an_updates_flash_check_counts_at_least_what_staging_takes(self):
        """The free-flash check of an update's manifest (ota/manifest.py) counts what staging
        takes on littlefs: whole blocks a file, four a folder. By bytes alone it asked for 108
        KB where the package's staging took 248 KiB (tools/bench/wear), and a transfer started
        on a flash an outage had filled would run out half-way."""
        from wattnode.ota import manifest as otamanifest
        # a package's shape: small modules, some just over a block, four folders
        sizes = [254, 299, 329, 892, 1030, 1096, 1145, 1227, 1264, 1287, 2052, 2132, 3152,
                 3777, 3867, 4116, 4182, 4287, 5408, 6075, 9372]
        folders = ["wattnode", "wattnode/ota", "wattnode/meters", "wattnode/hw"]
        files = [["%s/m%d.mpy" % (folders[i % 4], i), n, b""] for i, n in enumerate(sizes)]

        def free():
            st = os.statvfs("/lfs")
            return st[0] * st[4], st[0]
        before, bsize = free()
        for d in ("/lfs/ota", "/lfs/ota/stage") + tuple("/lfs/ota/stage/" + f for f in folders):
            os.mkdir(d)
        for path, n, _ in files:
            with open("/lfs/ota/stage/" + path, "wb") as f:
                f.write(bytes(n))
        taken = before - free()[0]
        need = otamanifest.flash_needed(files, bsize)
        self.assertTrue(taken <= need - otamanifest.FLASH_MARGIN, (taken, need))
        self.assertTrue(taken > 2 * sum(sizes), (taken, sum(sizes)))  # bytes alone: too few

    def test_a_full_file_system_drops_only_the_oldest(self):
        """The file system fills under the spill (an update's staging takes what was free at
        boot): ENOSPC, the oldest file goes, counted; the newest readings are all held."""
        with open("/lfs/staging", "wb") as f:
            f.write(bytes(88 * 4096 - 48 * 1024))
        lost = 0
        for i in range(3000):
            lost += self.ring.append(*record(i))
        ring = self.ring
        self.assertEqual((lost, ring.dropped), (0, self.spill.dropped))
        self.assertTrue(ring.dropped > 0 and self.spill.writes > 3000 // SEGMENT_RECORDS - 2)
        self.assertTrue(self.spill.held(ring)[1] < 16 * 4096)  # ENOSPC, not max_files
        first = ring.first
        self.assertEqual(runs(f for _, f in send(ring)), [(first, 2999)])
        self.assertEqual(self.said, ["spill: the flash is full (16 files): the oldest readings "
                                     "are dropped and counted"])
