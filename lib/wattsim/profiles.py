"""profiles.py - load profiles for simulated plugs, shaped on the seed's own SP3S measurements.

A profile is a pure function of time: power_dw(t_s) gives the power in 0.1 W during second t_s
(seconds since 2020-01-01 UTC, the wire epoch), with integer arithmetic only, every value
below 2**30, so MicroPython on the simulated plug (64- or 32-bit) and CPython in the tests
compute the very same values and a test can say exactly what every slot must hold. Times of
day are UTC.

  washer     1 h 45 min program daily at 08:00 (and 17:30 on odd days): fill, ~2200 W heating
             for 25 min, tumbling at 30-150 W, rinse, ~500 W spin at the end; 0.8 W standby
  fridge     ~80 W compressor on 12 min of every 40 (30 %), 2 W off, a 300 W start surge, and
             short ~25 W door-light spikes at odd moments between 06:00 and 23:00
  heatpump   ramps to ~1250 W from 23:00, ~700 W through the cold night (01:30-06:30), short
             ~400 W runs during the day, 15 W standby
  constant   a flat load: "constant" is 1000 W, "constant:1500.5" is 1500.5 W

Voltage wanders around 230 V (a step every 5 min within +-3 V, plus +-0.2 V per second);
current follows from power, voltage and the appliance's power factor.
"""

_DAY = 86400


def _round(h, k):
    h = (h * 0x5BD1 + k) & 0x7FFF  # h and 0x5BD1 below 2**15: the product below 2**30
    return h ^ h >> 7


def _hash(x):
    """A deterministic scramble of x (0 <= x < 2**30) to 0..2**30-1, the same on every Python:
    four rounds of a Feistel network on two 15-bit halves, so every intermediate is a small
    int even on a 32-bit port (a heap-locked test of a 32-bit build allocates nothing)."""
    lo = x & 0x7FFF
    hi = x >> 15 & 0x7FFF
    lo ^= _round(hi, 0x1D3)
    hi ^= _round(lo, 0x2F1)
    lo ^= _round(hi, 0x0B7)
    hi ^= _round(lo, 0x3C9)
    return hi << 15 | lo


def _noise(t, amp):
    return _hash(t) % (2 * amp + 1) - amp


def voltage_cv(t):
    return 23000 + _hash(t // 300 + 7) % 601 - 300 + _noise(t, 20)


def _washer_program(p, t):
    if p < 180:           # filling: valve and electronics
        return 80 + _noise(t, 5)
    if p < 1680:          # heating the water
        return 22000 + _noise(t, 300)
    if p < 4500:          # washing: the drum turns 12 s, rests 8 s
        return (1500 if p % 20 < 12 else 300) + _noise(t, 40)
    if p < 5400:          # rinsing: drum plus drain pump
        return (1200 if p % 20 < 12 else 400) + _noise(t, 40)
    if p < 5460:          # spin-up
        return 2000 + (p - 5400) * 50 + _noise(t, 50)
    if p < 6240:          # spinning
        return 5000 + _noise(t, 150)
    return 800 + _noise(t, 30)  # spin-down and door lock


def washer(t):
    day, sod = t // _DAY, t % _DAY
    for start in (8 * 3600, 17 * 3600 + 1800):
        if start > 8 * 3600 and day % 2 == 0:
            continue
        p = sod - start
        if 0 <= p < 6300:
            return _washer_program(p, t)
    return 8


def fridge(t):
    sod = t % _DAY
    p = t % 2400
    power = 20
    if p < 720:
        power = 3000 if p < 2 else 850 - p * 70 // 720 + _noise(t, 10)
    if 6 * 3600 <= sod < 23 * 3600:
        window = t // 900                  # each quarter hour, one chance in eight of a door
        h = _hash(window + 99)
        if h % 8 == 0:
            opened = window * 900 + h % 600
            if opened <= t < opened + 20 + h % 40:
                power += 250
    return power


def heatpump(t):
    sod = t % _DAY
    if sod >= 23 * 3600:                       # evening ramp to full power
        ramp = sod - 23 * 3600
        base = 500 + ramp * 12000 // 900 if ramp < 900 else 12500
        return base + _noise(t, 300)
    if sod < 5400:
        return 12500 + _noise(t, 300)
    if sod < 6 * 3600 + 1800:                  # the cold night
        return 7000 + _noise(t, 400)
    if sod < 7 * 3600:                         # morning ramp down
        return 7000 - (sod - 6 * 3600 - 1800) * 4000 // 1800 + _noise(t, 100)
    if (sod // 1200) % 3 == 0:                 # short daytime runs
        return 4000 + _noise(t, 200)
    return 150 + _noise(t, 5)


_POWER_FACTOR_PCT = {"washer": 98, "fridge": 80, "heatpump": 95, "constant": 100}
_FUNCS = {"washer": washer, "fridge": fridge, "heatpump": heatpump}
NAMES = ("washer", "fridge", "heatpump", "constant")


class Profile:
    """One simulated appliance: power_dw(t), voltage_cv(t), current_ma(t) for second t."""

    def __init__(self, spec):
        name, _, arg = spec.partition(":")
        if name not in _POWER_FACTOR_PCT:
            raise ValueError("unknown profile %r; known: %s" % (spec, ", ".join(NAMES)))
        self.name = name
        self._pf_pct = _POWER_FACTOR_PCT[name]
        if name == "constant":
            watts, _, tenths = (arg or "1000").partition(".")
            self._constant_dw = int(watts) * 10 + (int(tenths[:1]) if tenths else 0)
            self._fn = self._constant
        else:
            if arg:
                raise ValueError("profile %r takes no argument" % name)
            self._fn = _FUNCS[name]

    def _constant(self, t):
        return self._constant_dw

    def power_dw(self, t):
        return self._fn(t)

    def current_ma(self, power_dw, voltage_cv):
        """power_dw * 10**6 // (voltage_cv * power factor %), exactly, with every intermediate
        a small int for loads up to 10.7 kW."""
        scaled = power_dw * 10000
        q = scaled // voltage_cv  # not divmod(): its tuple would be a heap object
        return (q * 100 + (scaled - q * voltage_cv) * 100 // voltage_cv) // self._pf_pct
