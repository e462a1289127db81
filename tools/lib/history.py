"""history.py - a data directory holding days or a year of plugs' readings without running the
plugs for it: written as the collector writes them (commit.py's Committer, whole numpy arrays,
a plug a commit), for the benches and tests that need a long history (tools/bench/dashboard,
tools/bench/migrate, tests/e2e/test_migrate.py).

    write_history(data, ["plug-00", ...], start, slots)       # every channel, a day's shape
    write_history(data, names, start, slots, channels=("power", "energy"), seeds=[0, 1])

A plug's power follows a day's sine with noise (its seed makes it its own), energy is its
running total in kWh, voltage and current follow. With gaps=True the data has what real data
has: runs of slots where the plug was away (every channel missing) and single slots where one
channel was not measured (the others are there). Each plug's state in commit.json is a plug's
that sent every slot of one boot (boot = its seed + 1, seq = the slots made).
"""

import numpy as np

from wattlog.complaints import Complaints
from wattlog.store.commit import Committer

CHANNELS = ("power", "voltage", "current", "energy")


def readings(seed, slots, interval=10, gaps=False):
    """{channel: float64 array of `slots` values} for the plug `seed` (NaN: not measured)."""
    rnd = np.random.default_rng(seed)
    t = np.arange(slots)
    per_day = 86400 // interval
    power = 50 + 20 * seed + 150 * (1 + np.sin(2 * np.pi * (t % per_day) / per_day)) \
        + rnd.normal(0, 20, slots).clip(-40, 40)
    energy = np.cumsum(power * interval / 3.6e6)
    voltage = 230 + rnd.normal(0, 1.5, slots).round(2)
    out = {"power": power.round(1), "voltage": voltage, "current": (power / voltage).round(3),
           "energy": energy.round(3)}
    if gaps:
        for first in rnd.integers(0, max(slots - 1, 1), max(slots // 20000, 1)):
            for values in out.values():  # the plug was away: nothing at all
                values[first:first + rnd.integers(1, 400)] = np.nan
        for channel in ("power", "voltage", "current"):  # one channel not measured
            out[channel][rnd.integers(0, slots, max(slots // 5000, 1))] = np.nan
    return out


def write_history(data, names, start, slots, interval=10, channels=CHANNELS, seeds=None,
                  gaps=False, progress=None):
    """Plugs `names` (seeds: their seeds, by default 0, 1, ...) x `channels` x `slots` slots
    from unix time `start` (on the interval's grid) committed into the data directory `data`;
    progress(name) after each plug. Returns the channel values made, non-NaN."""
    seeds = range(len(names)) if seeds is None else seeds
    times = start + interval * np.arange(slots, dtype=np.int64)
    committer = Committer(data, Complaints())
    made = 0
    try:
        for name, seed in zip(names, seeds):
            values = readings(seed, slots, interval, gaps)
            state = dict(committer.nodes)
            state[name] = {"boot": seed + 1, "seq": slots, "lost": 0, "gaps": 0, "dropped": 0,
                           "counted": 0, "boots": 1, "last_seen": int(times[-1])}
            committer.commit({(name, c): (times, values[c]) for c in channels},
                             {name: interval}, state)
            made += sum(int(np.count_nonzero(~np.isnan(values[c]))) for c in channels)
            if progress:
                progress(name)
    finally:
        committer.close(clean=True)
    return made
