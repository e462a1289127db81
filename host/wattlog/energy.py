"""energy.py - kWh and cost per plug per day, week, month or year in the user's time zone, from
each plug's energy counter feed (`<node>/energy`, kWh), with each plug's share of the total.
Knows nothing of HTTP: the API and `wattlog energy` print what energy_table() returns.

The counter. A record stamped with slot start s carries the counter as the slot ended, so a
reading says "the counter was v at time s + interval". Within a plug's life the counter never
decreases; a decrease is taken as a reset (a new plug under the old id, a wiped flash) and
counting goes on from the new value: the drop adds nothing, the new value is the new baseline.

The counter at a boundary T (a period's start or end, or a tariff window's edge), from the last
reading at or before T (p) and the first after it (n):
  - a reading at T exactly: its value;
  - p and n at most INTERPOLATE_SLOTS slots apart: interpolated linearly between them;
  - farther apart (an outage): p's value, so the energy of the whole gap is counted where the
    next reading lands (the period and tariff window holding n);
  - no p (before the plug's first reading): the first reading's value; no n: p's.
A period's energy is the counter at its end minus the counter at its start. A period in which
no reading lands (no reading time in (start, end]) is null, never zero: it has no data.

Periods and tariffs are periods.py's: local days, ISO weeks, months, years; each period's
energy is split at the night's edges with the same boundary rule, and priced by window.

The readings come through the storage interface (store/__init__.py): the collector's store
lays its pending readings (not yet committed) over the stored slots, a Reader of a data
directory has none.
"""

import math
import time

import numpy as np

from wattlog.periods import PERIODS, EnergyError, _is_night, _zone, night_edges, periods
from wattlog.store import open_reader
from wattlog.store.phpfina import FeedError
from wattlog.store.base import StoreError

INTERPOLATE_SLOTS = 6          # "a few slots": a minute at 10 s
_LOOKBACK_SLOTS = 1 << 20      # how far back to look for the reading before a range (4 months)
_DIGITS = 6                    # kWh and cost rounded to a millionth in the table








# -- local calendar ---------------------------------------------------------------------------













# -- one plug's counter ----------------------------------------------------------------------

class Counter:
    """A plug's readings over a range as (reading times, monotone energy): the counter with
    resets taken out, so that energy between two times is a difference."""

    def __init__(self, store, entry, feed, start, end):
        iv = feed.interval
        first = max(feed.slot(start) - 1, 0)            # the reading that ends at start
        stop = max(feed.slot(end) + INTERPOLATE_SLOTS + 1, first)
        values = store.read(entry, feed, first, stop)   # float32: half the memory of a year
        have = ~np.isnan(values)
        slots = first + np.flatnonzero(have)
        vals = values[have].astype(np.float64)
        before = feed.last_value(_LOOKBACK_SLOTS, before=first) if first > 0 else None
        if before is not None:
            slots = np.concatenate(([before[0]], slots))
            vals = np.concatenate(([before[1]], vals))
        self.times = feed.time(slots) + iv              # the counter's time: the slot's end
        steps = np.diff(vals)
        self.resets = int(np.count_nonzero(steps < 0))
        self.energy = np.concatenate(([0.0], np.cumsum(np.where(steps < 0, 0.0, steps))))
        self.max_gap_s = INTERPOLATE_SLOTS * iv

    def at(self, boundaries):
        """The monotone energy at each unix time in `boundaries` (the rule in the docstring)."""
        b = np.asarray(boundaries, dtype=np.int64)
        t, e = self.times, self.energy
        if not len(t):
            return np.full(len(b), np.nan)
        n = np.searchsorted(t, b, side="right")        # first reading after each boundary
        p = np.clip(n - 1, 0, len(t) - 1)
        nn = np.clip(n, 0, len(t) - 1)
        out = np.where(n == 0, e[0], e[p])
        gap = t[nn] - t[p]
        interp = (n > 0) & (n < len(t)) & (gap <= self.max_gap_s) & (gap > 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.where(interp, (b - t[p]) / np.where(gap > 0, gap, 1), 0.0)
        return np.where(interp, e[p] + frac * (e[nn] - e[p]), out)

    def lands(self, starts, ends):
        """Whether a reading time lies in (start, end] for each pair."""
        a = np.searchsorted(self.times, np.asarray(starts, dtype=np.int64), side="right")
        b = np.searchsorted(self.times, np.asarray(ends, dtype=np.int64), side="right")
        return b > a


# -- the table --------------------------------------------------------------------------------

def _r(x):
    return None if x is None or math.isnan(x) else round(float(x), _DIGITS)


def energy_table(store, by="day", tz="UTC", tariff=None, start=None, end=None, now=None):
    """kWh (and cost) per plug per local period, each plug's share of the total, and totals.
    store: the storage interface (or a data directory's path, read as it is on disk).
    start/end: unix seconds (end exclusive); by default from the first reading to now. The
    periods cover the range whole (the first starts at or before start)."""
    if by not in PERIODS:
        raise EnergyError("by must be one of %s, not %r" % (", ".join(PERIODS), by))
    zone = _zone(tz)
    for name, value in (("start", start), ("end", end), ("now", now)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 0 <= value < 1 << 36):
            raise EnergyError("%s must be unix seconds, not %r" % (name, value))
    now = int(time.time()) if now is None else now
    if isinstance(store, str):
        try:
            store = open_reader(store)
        except StoreError as e:
            raise EnergyError(str(e)) from None
    plugs, notes = [], []
    for entry in sorted(store.entries(), key=lambda e: e["node"]):
        if entry["channel"] != "energy":
            continue
        try:
            plugs.append((entry, store.feed(entry)))
        except FeedError as e:
            notes.append("%s's energy feed is unreadable (%s); it is left out"
                         % (entry["node"], e))
    if start is None:
        firsts = [f.start for _, f in plugs if f.npoints()]
        start = min(firsts) if firsts else now
    if end is None:
        end = max(now, start + 1)
    if end <= start:
        raise EnergyError("the end (%d) must come after the start (%d)" % (end, start))
    spans = periods(by, zone, start, end)
    p0 = np.array([s[0] for s in spans], dtype=np.int64)
    p1 = np.array([s[1] for s in spans], dtype=np.int64)
    lo, hi = int(p0[0]), int(p1[-1])
    # segments: the periods cut at the night's edges; each is priced by its window
    edges = sorted(set(p0.tolist()) | {hi} |
                   ({t for t, _ in night_edges(tariff, zone, lo, hi)}
                    if tariff is not None and tariff.split else set()))
    edges = np.array(edges, dtype=np.int64)
    seg_period = np.searchsorted(p1, edges[:-1], side="right")
    if tariff is None:
        seg_price = None
        seg_night = np.zeros(len(edges) - 1, dtype=bool)
    elif tariff.split:
        seg_night = np.array([_is_night(tariff, zone, int(t)) for t in edges[:-1]], dtype=bool)
        seg_price = np.where(seg_night, tariff.night_price, tariff.day_price)
    else:
        seg_night = np.zeros(len(edges) - 1, dtype=bool)
        seg_price = np.full(len(edges) - 1, tariff.price)

    rows = []
    kwh_all = np.full((len(plugs), len(spans)), np.nan)
    for i, (entry, feed) in enumerate(plugs):
        counter = Counter(store, entry, feed, lo, hi)
        if counter.resets:
            notes.append("%s's energy counter went down %d time%s in this range: counted as a "
                         "reset, from the new value on" % (entry["node"], counter.resets,
                                                           "" if counter.resets == 1 else "s"))
        at = counter.at(edges)
        seg = np.diff(at)
        have = counter.lands(p0, p1) if len(counter.times) else np.zeros(len(spans), bool)
        kwh = np.bincount(seg_period, weights=np.nan_to_num(seg), minlength=len(spans))
        kwh = np.where(have, kwh, np.nan)
        kwh_all[i] = kwh
        row = {"node": entry["node"], "feed": entry["id"], "kwh": [_r(x) for x in kwh]}
        if tariff is not None:
            cost = np.bincount(seg_period, weights=np.nan_to_num(seg) * seg_price,
                               minlength=len(spans))
            row["cost"] = [_r(x) for x in np.where(have, cost, np.nan)]
            if tariff.split:
                for name, mask in (("night", seg_night), ("day", ~seg_night)):
                    part = np.bincount(seg_period, weights=np.nan_to_num(seg) * mask,
                                       minlength=len(spans))
                    row["kwh_" + name] = [_r(x) for x in np.where(have, part, np.nan)]
            row["total_cost"] = _r(np.nansum(np.where(have, cost, np.nan))) if have.any() else None
        row["total_kwh"] = _r(np.nansum(kwh)) if have.any() else None
        rows.append(row)

    totals = {"kwh": [], "total_kwh": None}
    with np.errstate(invalid="ignore", divide="ignore"):
        have_any = ~np.all(np.isnan(kwh_all), axis=0) if len(plugs) else np.zeros(len(spans), bool)
        total = np.where(have_any, np.nansum(kwh_all, axis=0), np.nan) if len(plugs) \
            else np.full(len(spans), np.nan)
        grand = float(np.nansum(total)) if have_any.any() else None
        for i, row in enumerate(rows):
            share = np.where(total > 0, np.nan_to_num(kwh_all[i]) / total, np.nan)
            row["share"] = [_r(x) for x in np.where(np.isnan(kwh_all[i]), np.nan, share)]
            row["total_share"] = (_r(row["total_kwh"] / grand) if row["total_kwh"] is not None
                                  and grand else None)
    totals["kwh"] = [_r(x) for x in total]
    totals["total_kwh"] = _r(grand) if grand is not None else None
    if tariff is not None:
        costs = [r["cost"] for r in rows]
        totals["cost"] = [_r(sum(c[k] for c in costs if c[k] is not None))
                          if have_any[k] else None for k in range(len(spans))]
        totals["total_cost"] = (_r(sum(r["total_cost"] for r in rows
                                       if r["total_cost"] is not None))
                                if grand is not None else None)
    return {"by": by, "timezone": tz, "unit": "kWh",
            "tariff": tariff.describe() if tariff is not None else None,
            "start": lo, "end": hi,
            "periods": [{"start": a, "end": b, "label": label, "hours": (b - a) / 3600}
                        for a, b, label in spans],
            "plugs": rows, "totals": totals, "notes": notes}


def cells(table):
    """The table as text cells, the one formatting every view shows: {"head", "rows" (one a
    period: its label, with its hours on a day or week of 23 or 25 hours, then kWh and cost
    per plug and in total), "total", "share"}; a number is kWh to 3 decimals, money to 2, a
    share in percent to 1, None where there is no data (`wattlog energy` prints "-", the
    page a dash, its CSV nothing)."""
    def num(x, digits):
        return None if x is None else "%.*f" % (digits, x)
    cost = table["tariff"] is not None
    money = [table["tariff"]["currency"]] if cost else []
    head = [table["by"]]
    for plug in table["plugs"]:
        head += [plug["node"] + " kWh"] + money
    head += ["total kWh"] + ["total " + m for m in money]
    lines = table["plugs"] + [dict(table["totals"], node="total")]
    rows = []
    for k, period in enumerate(table["periods"]):
        row = [period["label"] + ("" if period["hours"] in (24, 168) or table["by"] in
                                  ("month", "year") else " (%gh)" % period["hours"])]
        for line in lines:
            row += [num(line["kwh"][k], 3)] + ([num(line["cost"][k], 2)] if cost else [])
        rows.append(row)
    total = ["total"]
    for line in lines:
        total += [num(line["total_kwh"], 3)] + ([num(line["total_cost"], 2)] if cost else [])
    share = ["share"]
    for plug in table["plugs"]:
        part = plug["total_share"]
        share += [None if part is None else num(100 * part, 1) + "%"] + [""] * cost
    share += [""] * (len(head) - len(share))
    return {"head": head, "rows": rows, "total": total, "share": share}
