"""appliances.py - simulated appliances' readings for host tests, as a plug would send them:
wattsim's profiles (the same per-second power the simulated plug measures) averaged into
10 s slots, with a meter's noise and lost slots if asked, packed in wire batches and taken by
the collector's Store; and what the appliance really did (wattsim/truth.py) in unix times.
"""

import functools
import os
import sys

import numpy as np

sys.path.append(os.path.join(os.path.dirname(__file__), "..", "..", "lib"))  # lib/wattsim

from batches import batch
from wattnode import wire
from wattsim import truth  # noqa: E402
from wattsim.profiles import Profile  # noqa: E402

IV = 10
EPOCH = wire.EPOCH_UNIX


@functools.lru_cache(maxsize=64)
def _day_dw(spec, day):
    """The profile's per-second power (0.1 W) over one UTC day (day: unix // 86400)."""
    p = Profile(spec)
    a = day * 86400 - EPOCH
    return np.array([p.power_dw(t) for t in range(a, a + 86400)], dtype=np.float64)


def slots_w(spec, start, end, rng=None, missing=0.0):
    """Mean power (W) of each 10 s slot of [start, end) (unix, whole days' grid), with a
    meter's noise (1 % of the reading and 0.05 W, normal) and a share of slots lost (NaN)."""
    days = range(start // 86400, (end - 1) // 86400 + 1)
    dw = np.concatenate([_day_dw(spec, d) for d in days])
    lo = start - days[0] * 86400
    w = dw[lo:lo + end - start].reshape(-1, IV).mean(axis=1) / 10.0
    if rng is not None:
        w = np.maximum(w + rng.normal(0.0, 1.0, len(w)) * (0.01 * w + 0.05), 0.0)
        w[rng.random(len(w)) < missing] = np.nan
    return np.round(w, 1)


def send(store, node, start, w, seq=0, per_batch=64, take=None):
    """Slot powers from `start` as the plug's batches; the energy counter (Wh) counts them.
    take(topic, payload): also given each batch (a runs part); returns the next seq."""
    energy_wh = np.cumsum(np.nan_to_num(w) * IV / 3600.0)
    topic = "wattlog/%s/readings" % node
    for k in range(0, len(w), per_batch):
        recs = [(start + IV * i, None if np.isnan(w[i]) else float(w[i]),
                 None if np.isnan(w[i]) else int(energy_wh[i]), 230.0, 0.5)
                for i in range(k, min(k + per_batch, len(w)))]
        payload = batch(recs, seq=seq + k)
        store.take(topic, payload)
        if take is not None:
            take(topic, payload)
    return seq + len(w)


def truth_runs(spec, start, end):
    """[(start, end, kWh)] the appliance really ran inside [start, end), unix seconds."""
    return [(a + EPOCH, b + EPOCH, truth.energy_kwh(spec, a, b))
            for a, b in truth.runs(spec, start - EPOCH, end - EPOCH)]
