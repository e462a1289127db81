"""phpfina.py - emoncms PHPFina fixed-interval feeds: the storage engine.

Format (emoncms Modules/feed/engine/PHPFina.php), two files per feed in one directory:

  <id>.meta   16 bytes, four little-endian uint32
                off  0   0            legacy feed id, always 0
                off  4   0            legacy npoints, always 0 (npoints comes from the .dat size)
                off  8   interval     seconds per slot, > 0
                off 12   start_time   unix seconds of slot 0; start_time % interval == 0
  <id>.dat    a bare array of little-endian IEEE-754 float32, one per slot, no header:
              slot k holds the value for start_time + k * interval; NaN = no data.
              npoints = size // 4; a 1-3 byte tail (a torn write) is ignored.

Timestamps are floored to the interval grid anchored at the unix epoch. Points before
start_time cannot be stored: a feed only grows forwards. Writing past the end pads the gap
with NaN in the same write.

Where this differs from emoncms, on purpose: .meta is written once, at creation, through a
temp file, fsync and rename (emoncms rewrites it in place and loses it to power cuts, emoncms
issue #1604); create() never replaces files it did not make (FeedExists) unless told to; a
write touches only the slots that have data: one pwrite per run of nearby slots inside the
file, and one block from the end of the file to the last new slot (the NaN padding PHPFina
needs), written in chunks so memory stays small whatever the gap. sync() makes it durable
(commit.py decides when).
"""

import os
import struct

import numpy as np

from wattlog.store import durable

_META = struct.Struct("<4I")
_VALUE = np.dtype("<f4")
VALUE_SIZE = _VALUE.itemsize
# Slots inside the file closer than this are written as one run (the stored values between
# them are read and written back): one system call instead of many, at most 1 KiB more.
_RUN_GAP_SLOTS = 256
_PAD_CHUNK_SLOTS = 1 << 16  # NaN padding past the end is written 256 KiB at a time


class FeedError(Exception):
    """A feed's files cannot be used; the message names the file and what is wrong."""

    def __init__(self, path, reason):
        super().__init__("%s: %s" % (path, reason))
        self.path = path
        self.reason = reason


class CorruptFeed(FeedError):
    pass


class FeedExists(FeedError):
    """create() found files of that id that it was not told it may replace."""


class Grid:
    """A feed's geometry: slot k is the time start + k * interval (start on the grid); an
    engine's feed gives start, interval and npoints() (the committed slots)."""

    def slot(self, t):
        """Slot index of unix time t (floored to the grid); negative before start."""
        return (int(t) - self.start) // self.interval

    def time(self, slot):
        return self.start + slot * self.interval

    def end(self):
        """Unix time just past the last stored slot."""
        return self.time(self.npoints())

    def first_at(self, t):
        """The first slot at or after unix time t (0 when t lies before the feed)."""
        return max(self.slot(t + self.interval - 1), 0)


class Feed(Grid):
    """One feed's files. Open with Feed.open() or make with Feed.create(); close() when done."""

    def __init__(self, directory, feed_id, interval, start):
        self.directory = directory
        self.id = feed_id
        self.interval = interval
        self.start = start
        self.meta_path = os.path.join(directory, "%d.meta" % feed_id)
        self.dat_path = os.path.join(directory, "%d.dat" % feed_id)
        self._fd = None

    # -- making and opening ------------------------------------------------------------------

    @classmethod
    def create(cls, directory, feed_id, interval, start, replace=False, sync_dir=True):
        """A new, empty feed whose slot 0 is the slot holding `start`. Files of that id that
        exist already are replaced only with replace=True (FeedExists otherwise: they may be
        another program's). Both files are on disk (fsynced, directory too unless sync_dir is
        False: then the caller fsyncs the directory once for many new feeds) on return."""
        if interval <= 0:
            raise ValueError("interval must be positive, not %r" % interval)
        feed = cls(directory, feed_id, interval, start - start % interval)
        if not replace:
            for path in (feed.meta_path, feed.dat_path):
                if os.path.exists(path):
                    raise FeedExists(path, "exists already; wattlog never writes over a feed "
                                     "it did not make")
        # the empty .dat needs no fsync of its own: the directory's fsync makes its name
        # durable, and the commit's fdatasync its contents
        os.close(os.open(feed.dat_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644))
        durable.write_bytes(feed.meta_path, _META.pack(0, 0, feed.interval, feed.start),
                            mode=0o644, sync_dir=sync_dir)
        return feed

    def remove(self):
        """Delete both files (a feed made by a commit that then failed)."""
        self.close()
        for path in (self.meta_path, self.dat_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    @classmethod
    def open(cls, directory, feed_id):
        """The feed's header, checked; CorruptFeed says which file is wrong and how."""
        meta_path = os.path.join(directory, "%d.meta" % feed_id)
        try:
            with open(meta_path, "rb") as f:
                raw = f.read(_META.size + 1)
        except FileNotFoundError:
            raise CorruptFeed(meta_path, "missing") from None
        if len(raw) != _META.size:
            raise CorruptFeed(meta_path, "is %d bytes, a PHPFina header is %d" % (len(raw), _META.size))
        _, _, interval, start = _META.unpack(raw)
        if interval == 0:
            raise CorruptFeed(meta_path, "interval is 0 (a zeroed header)")
        if start % interval:
            raise CorruptFeed(meta_path, "start_time %d is not a multiple of the interval %d"
                              % (start, interval))
        feed = cls(directory, feed_id, interval, start)
        if not os.path.exists(feed.dat_path):
            raise CorruptFeed(feed.dat_path, "missing")
        return feed

    # -- geometry ----------------------------------------------------------------------------

    def npoints(self):
        return os.stat(self.dat_path).st_size // VALUE_SIZE

    # -- reading -----------------------------------------------------------------------------

    def read(self, first, stop):
        """float32 values of slots [first, stop); NaN where nothing is stored."""
        first = max(first, 0)
        out = np.full(max(stop - first, 0), np.nan, dtype=_VALUE)
        have = min(stop, self.npoints()) - first
        if have > 0:
            with open(self.dat_path, "rb") as f:
                f.seek(first * VALUE_SIZE)
                raw = f.read(have * VALUE_SIZE)
            got = len(raw) // VALUE_SIZE
            out[:got] = np.frombuffer(raw[:got * VALUE_SIZE], dtype=_VALUE)
        return out

    def last_value(self, max_slots=1 << 18, before=None):
        """(slot, value) of the last slot that holds a value (not NaN), looking back at most
        max_slots slots from the end (or from slot `before`), a 4 KiB page at a time; None if
        there is none."""
        page = 4096 // VALUE_SIZE
        stop = self.npoints() if before is None else min(before, self.npoints())
        floor = max(stop - max_slots, 0)
        while stop > floor:
            first = max(stop - page, floor)
            block = self.read(first, stop)
            have = np.flatnonzero(~np.isnan(block))
            if have.size:
                return first + int(have[-1]), float(block[have[-1]])
            stop = first
        return None

    # -- writing -----------------------------------------------------------------------------

    def _handle(self):
        if self._fd is None:
            self._fd = os.open(self.dat_path, os.O_RDWR)
        return self._fd

    def update(self, points):
        """Store {slot: value}, or (slots, values) arrays in which a later value for a slot
        wins over an earlier one: one pwrite per run of slots inside the file (stored values
        between nearby slots kept), and one block from the end of the file to the last slot
        past it, the gap padded with NaN. Slots before slot 0 are refused (ValueError).
        Returns the bytes written."""
        if isinstance(points, dict):
            slots = np.fromiter(points.keys(), dtype=np.int64, count=len(points))
            values = np.fromiter(points.values(), dtype=np.float64, count=len(points))
        else:
            slots, values = points
        if not len(slots):
            return 0
        # sorted by slot; of several values for one slot, the last given wins
        rev_slots = slots[::-1]
        first = np.unique(rev_slots, return_index=True)[1]
        slots, values = rev_slots[first], values[::-1][first]
        if slots[0] < 0:
            raise ValueError("%s: slot %d is before the feed's start" % (self.dat_path, slots[0]))
        n = self.npoints()
        inside = int(np.searchsorted(slots, n))
        written = 0
        if inside:
            breaks = np.flatnonzero(np.diff(slots[:inside]) > _RUN_GAP_SLOTS) + 1
            for run_slots, run_values in zip(np.split(slots[:inside], breaks),
                                             np.split(values[:inside], breaks)):
                lo = int(run_slots[0])
                block = self.read(lo, int(run_slots[-1]) + 1)
                block[run_slots - lo] = run_values
                written += self._pwrite(block, lo)
        if inside < len(slots):  # past the end: NaN from the end of the file to each slot
            tail_slots, tail_values = slots[inside:], values[inside:]
            hi = int(tail_slots[-1]) + 1
            for lo in range(n, hi, _PAD_CHUNK_SLOTS):
                stop = min(lo + _PAD_CHUNK_SLOTS, hi)
                block = np.full(stop - lo, np.nan, dtype=_VALUE)
                a, b = np.searchsorted(tail_slots, (lo, stop))
                block[tail_slots[a:b] - lo] = tail_values[a:b]
                written += self._pwrite(block, lo)
        return written

    def _pwrite(self, block, first_slot):
        data = block.tobytes()
        written = os.pwrite(self._handle(), data, first_slot * VALUE_SIZE)
        if written != len(data):
            raise OSError("%s: short write (%d of %d bytes)" % (self.dat_path, written, len(data)))
        return written

    def sync(self):
        if self._fd is not None:
            os.fdatasync(self._fd)

    def truncate(self, npoints):
        os.truncate(self.dat_path, npoints * VALUE_SIZE)

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
