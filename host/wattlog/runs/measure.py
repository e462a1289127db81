"""measure.py - what a run used: its kWh, cost and peak W, read through the storage interface
(store/__init__.py) when it has finished, so any engine that answers read() measures runs.

kWh is the sum of the run's slot powers times the slot length: a slot's power is the mean of
its energy over the slot (the node's promise), so this is the energy the meter counted, at
0.1 W resolution (the plug's energy counter has 1 Wh steps: 6 % of a fridge's 16 Wh run).
Slots without a reading inside the run are filled: across up to INTERPOLATE_SLOTS from the
readings on both sides, linearly; across a longer gap, with what the plug's energy counter
says it counted over the gap (`<node>/energy`), else the mean of the two sides. A slot lost
just before or after the run may have held its start or end (the run's edge is its last slot
with a reading): half of the edge slot's energy is counted for it.

Cost: the tariff's price per kWh (periods.Tariff), a day/night tariff slot by slot in the
config's time zone; None without a tariff.
"""

import datetime
import zoneinfo

import numpy as np

from wattlog.energy import INTERPOLATE_SLOTS
from wattlog.periods import _is_night, night_edges


def _zone(tz):
    return datetime.timezone.utc if tz in ("UTC", "utc", "Z", None) else zoneinfo.ZoneInfo(tz)


def fill(power_w, counter_kwh, interval_s):
    """Per-slot energy (kWh) of the slots [power_w]: missing slots filled as the docstring
    says. counter_kwh: the energy counter over the same slots and the one before (None if
    the plug has no counter feed)."""
    p = np.asarray(power_w, dtype=np.float64)
    e = p * interval_s / 3.6e6
    missing = np.isnan(p)
    if not missing.any():
        return e
    have = np.flatnonzero(~missing)
    if not have.size:
        return np.zeros(len(p))
    k = 0
    while k < len(p):
        if not missing[k]:
            k += 1
            continue
        j = k
        while j < len(p) and missing[j]:
            j += 1
        left = p[k - 1] if k else p[j] if j < len(p) else 0.0
        right = p[j] if j < len(p) else left
        n = j - k
        counted = None
        if n > INTERPOLATE_SLOTS and counter_kwh is not None:
            a, b = counter_kwh[k], counter_kwh[j] if j < len(p) else np.nan  # slot k-1, j-1
            if a == a and b == b and b >= a:
                counted = b - a
        if counted is not None:
            e[k:j] = counted / n
        else:
            steps = np.arange(1, n + 1) / (n + 1.0)
            e[k:j] = (left + (right - left) * steps) * interval_s / 3.6e6
        k = j
    return e


def measure(store, node, start, end, tariff=None, tz="UTC"):
    """{"kwh", "cost", "peak_w"} of the run [start, end) of `node` (unix s, slot edges);
    None when its power feed cannot be read."""
    entry = store.lookup("%s/power" % node)
    if entry is None:
        return None
    grid = store.feed(entry)
    iv = grid.interval
    first, stop = grid.slot(start), grid.slot(end)
    around = np.asarray(store.read(entry, grid, first - 1, stop + 1), dtype=np.float64)
    if first == 0:
        around = np.concatenate(([0.0], around))  # nothing before the feed's first slot
    power = around[1:-1]
    counter = None
    if np.isnan(power).any():
        energy = store.lookup("%s/energy" % node)
        if energy is not None:
            egrid = store.feed(energy)
            lo = egrid.slot(start) - 1
            counter = np.asarray(store.read(energy, egrid, lo, lo + len(power) + 1),
                                 dtype=np.float64)
    e = fill(power, counter, iv)
    # a slot lost just outside the run: the appliance may have started or stopped in it
    for outside, edge in ((around[0], 0), (around[-1], -1)):
        if len(e) and np.isnan(outside):
            e[edge] *= 1.5
    kwh = float(e.sum())
    out = {"kwh": round(kwh, 6), "cost": None,
           "peak_w": None if np.isnan(power).all() else round(float(np.nanmax(power)), 1)}
    if tariff is not None:
        out["cost"] = round(cost(e, start, iv, tariff, tz), 6)
    return out


def cost(slot_kwh, start, interval_s, tariff, tz):
    """The price of each slot's energy: flat, or by the day/night window each slot starts in."""
    total = float(np.sum(slot_kwh))
    if not tariff.split:
        return total * tariff.price
    zone = _zone(tz)
    times = start + interval_s * np.arange(len(slot_kwh), dtype=np.int64)
    end = int(times[-1]) + interval_s if len(times) else start
    edges = night_edges(tariff, zone, start, end)
    last = np.searchsorted(np.array([t for t, _ in edges], dtype=np.int64), times,
                           side="right") - 1               # the last edge at or before each
    begins = np.array([b for _, b in edges] + [False], dtype=bool)
    night = np.where(last >= 0, begins[last], _is_night(tariff, zone, start))
    return float(np.sum(np.where(night, tariff.night_price, tariff.day_price) * slot_kwh))
