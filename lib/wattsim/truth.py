"""truth.py - what each simulated appliance of profiles.py did, by construction: its runs, and
the energy of any span. The tests' known truth, for the collector's run detection
(host/wattlog/runs/); no plug loads this module (CPython only).

    runs("washer", start_s, end_s)      [(run start, run end)] that lie inside [start, end)
    energy_kwh("washer", a, b)          what the profile drew over [a, b), exactly

Times are seconds since 2020-01-01 UTC (the wire epoch), as profiles.py's. A run is a span
where the appliance works, told apart from standby and off: a washer's or a dishwasher's
whole programme (its pauses, drying and last pump-out included), each compressor run of a
fridge and its defrost's heater and recovery run (the door light is not a run), the heat
pump's night and each daytime run, the tv's time on. A constant load has none.
"""

from wattsim import profiles
from wattsim.profiles import Profile

_DAY = 86400


def _daily(spans, start, end):
    """[(a, b)] of each (start of day offset, length) of `spans`, on every day, inside
    [start, end)."""
    out = []
    for day in range(start // _DAY - 1, end // _DAY + 1):
        for offset, length in spans(day):
            a = day * _DAY + offset
            if start <= a and a + length <= end:
                out.append((a, a + length))
    return sorted(out)


def _fridge(day):
    spans = []
    for k in range(36):
        a = k * 2400
        d = (day * _DAY + a - profiles.DEFROST_AT_S) % profiles.DEFROST_EVERY_S
        if d == 0:
            spans += [(a, 1200), (a + 2100, 1980)]
        elif d != 2400:
            spans.append((a, 720))
    return spans


def _heatpump(day):
    return [(23 * 3600, 8 * 3600 + 1200)] + [(h * 3600, 1200) for h in range(8, 23)]


def _tv(day):
    return [(19 * 3600, 3 * 3600 + 1800)] + ([(7 * 3600, 2700)] if day % 2 == 0 else [])


def _washer(day):
    return [(8 * 3600, profiles.WASHER_S)] + (
        [(17 * 3600 + 1800, profiles.WASHER_S)] if day % 2 else [])


def runs(spec, start, end):
    """The runs of the profile `spec` that lie wholly inside [start, end)."""
    name, _, arg = spec.partition(":")
    if name == "constant":
        return []
    starts = profiles.starts_of(name, arg)
    if starts:
        length = {"washer": profiles.WASHER_S, "dishwasher": profiles.DISHWASHER_S,
                  "tv": profiles.TV_S}[name]
        return _daily(lambda day: [(s, length) for s in starts], start, end)
    spans = {"washer": _washer, "fridge": _fridge, "heatpump": _heatpump, "tv": _tv,
             "dishwasher": lambda day: [(19 * 3600, profiles.DISHWASHER_S)]}[name]
    return _daily(spans, start, end)


def energy_kwh(spec, a, b):
    """The profile's energy over [a, b) in kWh: the sum of its per-second power."""
    p = Profile(spec)
    return sum(p.power_dw(t) for t in range(a, b)) / 36e6
