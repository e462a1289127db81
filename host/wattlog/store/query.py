"""query.py - a feed's values over any range at any zoom: buckets of mean, min, max and count,
or the raw slots, read from the summaries (rollup.py) where they are right and from the .dat
and the readings not yet committed where they are not. Knows nothing of HTTP.

series(feed, start, end, points):
  - the bucket length asked for is ceil(slots in the range / points) slots; 1 or less: the
    raw slots, exactly as stored (mean = min = max = the value, count 1 or 0);
  - otherwise buckets of a whole number of the coarsest summary level that fits (so a year
    in 1000 points gets ~1000 buckets of 6 x 512 slots), aligned to the feed's slot 0; a
    range with fewer slots than the smallest level is summarised from the raw slots;
  - everything at or past the first slot the summaries cannot vouch for (past their `upto`,
    rewritten since their last flush, or holding a pending reading) comes from the .dat with
    the pending readings laid over it, then summarised the same way: the right edge of a
    chart reaches the present, uncommitted readings included, and `committed_until` in the
    answer says where the committed part ends.
Times in the answer are bucket starts, unix seconds; values are None where a bucket has no
data (a gap is a gap, never a zero).
"""

import math

import numpy as np

from wattlog.store.rollup import ENTRY, LEVELS, combine, summarise


class QueryError(ValueError):
    """A question that cannot be answered as asked; the message says why, in words."""


def _none(values):
    return [None if math.isnan(v) else v for v in values.tolist()]


class Engine:
    def __init__(self, summaries, stale=lambda fid: None, pending=lambda node, channel: None):
        """summaries: rollup.Summaries; stale(fid) -> the lowest slot rewritten since the last
        flush, or None; pending(node, channel) -> (unix times, values) not yet committed, or
        None."""
        self.summaries = summaries
        self.stale = stale
        self.pending = pending

    def series(self, feed, entry, start, end, points):
        if not (isinstance(points, int) and 1 <= points <= 100000):
            raise QueryError("points must be a whole number from 1 to 100000, not %r" % (points,))
        if end <= start:
            raise QueryError("the end (%d) must come after the start (%d)" % (end, start))
        iv = feed.interval
        first = max((start - feed.start) // iv, 0)
        stop = max(-(-(end - feed.start) // iv), first)  # slots up to end, end itself out
        bucket = -(-(stop - first) // points)
        pend = self.pending(entry["node"], entry["channel"])
        if pend is not None and len(pend[0]):
            pslots = (np.asarray(pend[0], dtype=np.int64) - feed.start) // iv
            pvals = np.asarray(pend[1], dtype=np.float64)
            pkeep = pslots >= 0
            pslots, pvals = pslots[pkeep], pvals[pkeep]
        else:
            pslots = pvals = None
        committed = feed.npoints()
        out = {"feed": feed.id, "interval": iv, "committed_until": feed.time(committed)}
        if bucket <= 1:
            values = self._raw(feed, first, stop, pslots, pvals)
            out.update(bucket_s=iv, time=(feed.time(first) + iv * np.arange(stop - first)).tolist(),
                       mean=_none(values), min=_none(values), max=_none(values),
                       count=(~np.isnan(values)).astype(int).tolist())
            return out
        level = max([b for b in LEVELS if b <= bucket], default=None)
        size = bucket if level is None else bucket // level * level  # slots per answer bucket
        b0, b1 = first // size, -(-stop // size)
        if level is None:
            raw = self._raw(feed, b0 * size, b1 * size, pslots, pvals)
            entries = summarise(raw, size)
        else:
            entries = self._entries(feed, level, b0 * size // level, b1 * size // level,
                                    pslots, pvals)
            entries = combine(entries, size // level)
        out.update(bucket_s=size * iv, time=(feed.time(b0 * size) + size * iv
                                             * np.arange(b1 - b0)).tolist(),
                   mean=_none(entries["mean"]), min=_none(entries["min"]),
                   max=_none(entries["max"]), count=entries["count"].tolist())
        return out

    def _raw(self, feed, first, stop, pslots, pvals):
        """float32 slots [first, stop): the .dat, pending readings laid over it (NaN past)."""
        values = feed.read(first, stop)
        if pslots is not None:
            inside = (pslots >= first) & (pslots < stop)
            values[pslots[inside] - first] = pvals[inside]  # in arrival order: the last wins
        return values

    def _entries(self, feed, level, e0, e1, pslots, pvals):
        """Level entries [e0, e1): from the summary file below the first entry the summaries
        cannot vouch for, computed from the raw slots from there on."""
        trust = self.summaries.upto(feed)
        stale = self.stale(feed.id)
        if stale is not None:
            trust = min(trust, stale)
        if pslots is not None and len(pslots):
            trust = min(trust, int(pslots.min()))
        good = min(max(trust // level, e0), e1)
        parts = [self.summaries.read(feed.id, level, e0, good)]
        if len(parts[0]) < good - e0:  # a shorter file than state.json says: not believed
            good = e0
            parts = []
        if e1 > good:
            raw = self._raw(feed, good * level, e1 * level, pslots, pvals)
            parts.append(summarise(raw, level))
        return np.concatenate(parts) if parts else np.empty(0, dtype=ENTRY)
