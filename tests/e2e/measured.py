"""measured.py - what a simulated plug's meter measures, recomputed from its load profile
(lib/wattsim) independently of the node's sampler: the values the stored feeds must hold,
for the pipeline tests over the files and over PostgreSQL."""

import numpy as np

from wattnode import wire
from wattsim.profiles import Profile, voltage_cv

INTERVAL = 10


def expected(profile, first_slot, n):
    """Per channel, the float32 values the meter produced for n slots from first_slot (unix)."""
    p = Profile(profile)
    out = {"power": [], "voltage": [], "current": [], "energy": []}
    total_dj = 0
    for k in range(n):
        a = first_slot - wire.EPOCH_UNIX + k * INTERVAL
        watts = [p.power_dw(t) for t in range(a, a + INTERVAL)]
        volts = [voltage_cv(t) for t in range(a, a + INTERVAL)]
        amps = [p.current_ma(w, v) for w, v in zip(watts, volts)]
        total_dj += sum(watts)
        out["power"].append(((2 * sum(watts) + INTERVAL) // (2 * INTERVAL)) / 10)
        out["voltage"].append(((sum(volts) + INTERVAL // 2) // INTERVAL) / 100)
        out["current"].append(((sum(amps) + INTERVAL // 2) // INTERVAL) / 1000)
        out["energy"].append((total_dj // 36000) / 1000)
    return {ch: np.array(v, dtype="<f4") for ch, v in out.items()}
