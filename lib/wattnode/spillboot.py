"""spillboot.py - the flash spill at start-up: what the boot before left on the flash and in RTC
memory becomes this boot's first readings. Loaded once, by start.py (right after the ring,
before the first sample), and forgotten after (wattnode.forget): a plug's heap keeps only
spill.py. It imports spill.py, never the other way round.

behind(ring, rtc, kib, interval_s, say): the spill behind the ring, made, then boot():
boot(sp, ring, interval_s)
- reads every file of the spill's folder (spill.py's layout), oldest first (file_numbers:
  the counter wraps at 65536), checking each segment (spill.read_segment); a damaged segment
  (torn by a power cut during a write, or corrupt) is never sent, its records counted
  (sp.torn) and said once; a damaged first segment before a sound second one is cut away
  (its file written again, once), a file with nothing sound deleted;
- lowers sp.max_files to what the file system has room for, spill.RESERVE_KIB left free
  (an update's staging), and drops the oldest files past it;
- numbers the records on the flash 0.. in this boot's seqs, then takes RTC memory's
  (keep.py) after them: into the RAM ring when their interval is this boot's (no flash
  written), else to flash as a segment of their own (a batch says its segment's interval);
  a file the collector had partly acknowledged comes back whole (duplicates, which the
  collector stores as the same);
- says what it kept (sp.kept), and sets the ring's first sample after it (ring.base).
"""

import os

from wattnode import spill, wire


def file_numbers(names):
    """The spill's file numbers among directory entries, oldest first: sorted, then turned so
    that the widest gap (where the counter wrapped, or ahead of the oldest) comes last."""
    nums = []
    for name in names:
        if len(name) == 4:
            try:
                nums.append(int(name, 16))
            except ValueError:
                pass
    nums.sort()
    if len(nums) < 2:
        return nums
    cut, widest = 0, nums[0] + 65536 - nums[-1]
    for i in range(1, len(nums)):
        if nums[i] - nums[i - 1] > widest:
            cut, widest = i, nums[i] - nums[i - 1]
    return nums[cut:] + nums[:cut]


def behind(ring, rtc, kib, interval_s, say):
    """The spill behind `ring`: kib of flash, RTC memory (keep.Keep) on the hardware layer's
    rtc, what the boot before left taken in. Made by start.py while the heap is still in one
    piece, right after the ring; the caller forgets this module after."""
    from wattnode import keep
    sp = spill.Spill(keep.Keep(rtc), kib * 1024 // spill.FILE_BYTES, say=say)
    ring.behind = sp
    boot(sp, ring, interval_s)
    return sp


def boot(sp, ring, interval_s):
    """Before the first sample: the records kept from before this boot become seqs 0.. of
    this one (flash first, then RTC memory); the ring's first sample follows them."""
    sp.now_interval_s = interval_s
    sp.buf = bytearray(spill.SEGMENT_BYTES)
    try:
        names = os.listdir(sp.folder)
    except OSError:
        names = []  # made at the first write
    found = []
    torn = 0
    for no in file_numbers(names):
        c1, c2, bad = _scan(sp, no)
        torn += bad
        if c1:
            found.append((no, c1, c2))
        else:
            _remove(sp, no)
    _room(sp, len(found))
    while len(found) > sp.max_files:  # a smaller spill than before: the oldest go
        torn += found[0][1] + found[0][2]
        _remove(sp, found.pop(0)[0])
    for no, c1, c2 in found:
        sp.add_file(no, c1, c2)
    on_flash = sp.next
    ring.first = ring.sent = 0
    ring.low = ring.next = on_flash
    iv, k = sp.keep.restore()
    buf, off = sp.keep.records()
    if k and iv == interval_s:  # into RAM, and RTC memory keeps them as this boot's
        for i in range(k):
            ring.put(buf, off + i * wire.RECORD_SIZE)
    elif k:  # another interval (it was changed): to flash, with theirs
        if sp.write(ring, iv, (memoryview(buf)[off:off + k * wire.RECORD_SIZE],)):
            ring.low = ring.next = sp.next
        else:
            torn += k
            k = 0
    sp.keep.clear(interval_s, ring.low)
    for seq in range(ring.low, ring.next):
        sp.keep.add(ring.buf, ring.offset(seq), seq)
    ring.base = sp.kept = ring.next
    if not found and sp.next == on_flash:  # nothing on the flash: no read buffer kept
        sp.first = sp.next = ring.low
        sp.buf = None
    sp.torn = torn
    if torn:
        sp.say("spill: %d readings kept on the flash were dropped, never sent: damaged (a "
               "segment torn by a power cut during a write, or corrupt), or beyond the "
               "spill's room" % torn)
    if sp.kept:
        sp.say("kept %d readings from before this boot (%d on the flash, %d in RTC memory): "
               "they are sent first" % (sp.kept, on_flash, k))


def _remove(sp, no):
    try:
        os.remove(sp.path(no))
    except OSError:
        pass  # a failing flash: it is out of the index all the same


def _scan(sp, no):
    """(records in segment 1, in segment 2, records in damaged segments) of file no. A
    damaged first segment before a sound second one is cut away: the file is written again
    with the second alone (once, at boot)."""
    counts = [0, 0]
    bad = 0
    path = sp.path(no)
    try:
        with open(path, "rb") as f:
            pos = 0
            for i in range(spill.FILE_SEGMENTS):
                n, iv, sound = spill.read_segment(f, pos, sp.buf)
                if not n:
                    break
                if sound:
                    counts[i] = n
                else:
                    bad += n
                if not iv:
                    break  # where it ends is not known: nothing after it can be found
                pos += spill.SEGMENT_HEADER + n * wire.RECORD_SIZE
    except OSError:
        return 0, 0, bad or 1
    if counts[1] and not counts[0]:  # buf holds the second segment
        try:
            with open(path, "wb") as f:
                f.write(memoryview(sp.buf)[0:spill.file_bytes(counts[1], 0)])
            counts = [counts[1], 0]
        except OSError:
            bad += counts[1]
            counts = [0, 0]
    return counts[0], counts[1], bad


def _room(sp, files):
    """Lower sp.max_files to what the file system holds, spill.RESERVE_KIB left free."""
    where = sp.folder[:sp.folder.rfind("/")] if "/" in sp.folder else "."
    try:
        st = os.statvfs(where)
        free = st[0] * st[4] - spill.RESERVE_KIB * 1024
    except (OSError, AttributeError):
        return
    fit = files + (free // spill.FILE_BYTES if free > 0 else 0)
    if fit < sp.max_files:
        sp.say("spill: the file system has room for %d of its %d files (%d KiB kept free for "
               "updates)" % (fit, sp.max_files, spill.RESERVE_KIB))
        sp.max_files = fit
