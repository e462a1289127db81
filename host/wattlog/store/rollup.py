"""rollup.py - multi-resolution summaries of a PHPFina feed, so a year answers in a few pages.

A feed's summaries are derived data: mean, min, max and the count of slots with data, per
bucket of LEVELS[k] slots, one file per level, rebuilt from the .dat whenever they cannot be
believed. The .dat stays the source of truth and byte-compatible with emoncms.

  <data>/summaries/<id>.<bucket slots>   little-endian records, one per complete bucket:
        off  size  type  field
         0    4    f32   mean of the slots with data (NaN when count is 0)
         4    4    f32   min
         8    4    f32   max
        12    4    u32   count of slots with data
  <data>/summaries/state.json   {"version": 1, "feeds": {"<id>": {"interval", "start",
                                 "upto"}}}: each level of feed <id> holds its complete buckets
                                 below slot `upto` (a multiple of LEVELS[0]), and they are right

Buckets are aligned to the feed's slot 0, so level k's entry j covers slots
[j * LEVELS[k], (j + 1) * LEVELS[k]). A query (query.py) reads the coarsest level that still
gives the buckets asked for, and the raw .dat only for what lies past `upto` or was written
since the last flush: a year of 10 s slots (3.15 M) in ~1000 buckets reads about 6,200 entries
of the 512-slot level, 98 KiB, where the .dat is 12.6 MB.

How summaries reach the disk without a page per feed per commit: commits do not touch them.
The committer notes, per feed, the lowest slot it has rewritten below `upto` (a late reading
that fills a hole) in commit.json's "stale" (stale_from()); queries treat everything from
there on as not summarised and read it raw. flush() - every FLUSH_S (6 h) and at shutdown -
recomputes the entries from min(stale, upto) up to the last complete bucket, writes them with
one pwrite per level file, fsyncs, and only then replaces state.json: a crash at any moment
leaves state.json describing entries that are on disk and right, and a commit.json whose
"stale" still covers whatever the flush did not finish. At 10 s slots and 5-minute commits a
feed's .dat gets 72 page writes in 6 h and its summaries 4 (one a level) plus state.json.
"""

import os

import numpy as np

from wattlog.store import durable

LEVELS = (64, 512, 4096, 32768)   # slots per bucket: 10 min 40 s .. 3 days 19 h at 10 s
ENTRY = np.dtype([("mean", "<f4"), ("min", "<f4"), ("max", "<f4"), ("count", "<u4")])
STATE = "state.json"
FLUSH_S = 6 * 3600
_CHUNK_SLOTS = LEVELS[-1] * 8     # a rebuild reads the .dat 1 MiB at a time (whole buckets)


def summarise(values, bucket):
    """Entries for whole buckets of float32 `values` (its length a multiple of `bucket`)."""
    shaped = values.reshape(-1, bucket)
    have = ~np.isnan(shaped)
    count = have.sum(axis=1)
    out = np.empty(len(shaped), dtype=ENTRY)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["mean"] = np.where(count, np.nansum(shaped, axis=1, dtype=np.float64) / count, np.nan)
    filled_lo = np.where(have, shaped, np.inf)
    filled_hi = np.where(have, shaped, -np.inf)
    out["min"] = np.where(count, filled_lo.min(axis=1), np.nan)
    out["max"] = np.where(count, filled_hi.max(axis=1), np.nan)
    out["count"] = count
    return out


def combine(entries, k):
    """Every k consecutive entries as one (the count-weighted mean; NaN where none has data)."""
    shaped = entries[: len(entries) // k * k].reshape(-1, k)
    count = shaped["count"].sum(axis=1)
    out = np.empty(len(shaped), dtype=ENTRY)
    weighted = np.where(shaped["count"] > 0,
                        shaped["mean"].astype(np.float64) * shaped["count"], 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["mean"] = np.where(count, weighted.sum(axis=1) / count, np.nan)
    out["min"] = np.where(count, np.nanmin(np.where(shaped["count"] > 0, shaped["min"], np.inf),
                                           axis=1), np.nan)
    out["max"] = np.where(count, np.nanmax(np.where(shaped["count"] > 0, shaped["max"], -np.inf),
                                           axis=1), np.nan)
    out["count"] = count
    return out


class Summaries:
    """The summaries of every feed in one data directory."""

    def __init__(self, data_dir):
        """Reads state.json; changes nothing (the folder is made at the first flush)."""
        self.dir = os.path.join(data_dir, "summaries")
        self.state = self._load()

    def _load(self):
        try:
            doc = durable.read_json(os.path.join(self.dir, STATE))
        except ValueError:
            return {}
        feeds = doc.get("feeds") if isinstance(doc, dict) else None
        if not isinstance(feeds, dict):
            return {}
        out = {}
        for fid, st in feeds.items():
            if (fid.isdigit() and isinstance(st, dict)
                    and all(isinstance(st.get(k), int) and st[k] >= 0
                            for k in ("interval", "start", "upto"))):
                out[int(fid)] = st
        return out

    def path(self, fid, bucket):
        return os.path.join(self.dir, "%d.%d" % (fid, bucket))

    def upto_noted(self, fid):
        """The `upto` state.json notes for a feed (no file is checked: for the commit path)."""
        return self.state.get(fid, {}).get("upto", 0)

    def upto(self, feed):
        """Slots of `feed` whose summaries are on disk and right: each level holds its complete
        buckets below it. 0 when its summaries belong to another feed of that id or a file is
        too short."""
        st = self.state.get(feed.id)
        if not st or st["interval"] != feed.interval or st["start"] != feed.start:
            return 0
        upto = st["upto"]
        for bucket in LEVELS:
            try:
                size = os.path.getsize(self.path(feed.id, bucket))
            except OSError:
                return 0
            if size < upto // bucket * ENTRY.itemsize:
                return 0
        return upto

    def read(self, fid, bucket, first, stop):
        """Entries [first, stop) of one level (fewer if the file is shorter)."""
        if stop <= first:
            return np.empty(0, dtype=ENTRY)
        with open(self.path(fid, bucket), "rb") as f:
            f.seek(first * ENTRY.itemsize)
            raw = f.read((stop - first) * ENTRY.itemsize)
        return np.frombuffer(raw[: len(raw) // ENTRY.itemsize * ENTRY.itemsize], dtype=ENTRY)

    def flush(self, feeds, stale=None, progress=None):
        """Bring every feed's summaries up to its last complete smallest bucket, recomputing
        from its stale slot (stale: {id: slot}) where that is lower, then replace state.json.
        progress(done, total) after each feed. Returns the bytes written."""
        stale = stale or {}
        written = 0
        state = dict(self.state)
        os.makedirs(self.dir, exist_ok=True)
        for n, feed in enumerate(feeds):
            have = self.upto(feed)
            npoints = feed.npoints()
            end = npoints - npoints % LEVELS[0]
            begin = min(have, stale.get(feed.id, have), end)
            written += self._compute(feed, begin, end)
            state[feed.id] = {"interval": feed.interval, "start": feed.start, "upto": end}
            if progress:
                progress(n + 1, len(feeds))
        self._save(state)
        return written

    def _save(self, state):
        durable.write_json(os.path.join(self.dir, STATE),
                           {"version": 1, "feeds": {str(k): v for k, v in sorted(state.items())}})
        self.state = state

    def _compute(self, feed, begin, end):
        """Each level's entries from the bucket holding slot `begin` to the last complete one
        below `end`, from the .dat; then each file cut there (what lay past it is no longer
        right) and fsynced. Each level writes only its own new entries: the raw slots are read
        from the start of the largest bucket, so a flush rewrites no page it need not."""
        written = 0
        fds = {b: os.open(self.path(feed.id, b), os.O_RDWR | os.O_CREAT, 0o644) for b in LEVELS}
        try:
            read_from = begin - begin % LEVELS[-1]
            for lo in range(read_from, end, _CHUNK_SLOTS):
                hi = min(lo + _CHUNK_SLOTS, end)
                values = feed.read(lo, hi)
                for bucket in LEVELS:
                    first = max(lo, begin - begin % bucket) // bucket  # entry to write first
                    stop = hi // bucket
                    if stop <= first:
                        continue
                    entries = summarise(values[: (stop - lo // bucket) * bucket], bucket)
                    data = entries[first - lo // bucket:].tobytes()
                    os.pwrite(fds[bucket], data, first * ENTRY.itemsize)
                    written += len(data)
            for bucket, fd in fds.items():
                os.ftruncate(fd, end // bucket * ENTRY.itemsize)
                os.fsync(fd)
        finally:
            for fd in fds.values():
                os.close(fd)
        return written

    def cut(self, fid, npoints):
        """A feed's .dat was cut to npoints (start-up): its summaries count only up to there."""
        st = self.state.get(fid)
        if st and st["upto"] > npoints:
            state = dict(self.state)
            state[fid] = dict(st, upto=npoints - npoints % LEVELS[0])
            self._save(state)
