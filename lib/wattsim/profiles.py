"""profiles.py - load profiles for simulated plugs: the appliances people put a metering plug
under, shaped on the seed's own SP3S measurements and on recorded curves of real ones.

A profile is a pure function of time: power_dw(t_s) gives the power in 0.1 W during second t_s
(seconds since 2020-01-01 UTC, the wire epoch), with integer arithmetic only, every value
below 2**30 and nothing allocated (the sampler runs it with the heap locked), so MicroPython
on the simulated plug (64- or 32-bit) and CPython in the tests compute the very same values
and a test can say exactly what every slot must hold. Times of day are UTC. What each
appliance's runs are, by construction, is in truth.py (the tests' known truth; no plug loads
it).

  washer      1 h 45 min programme daily at 08:00 (and 17:30 on odd days): fill, ~2200 W
              heating for 25 min, tumbling at 30-150 W with a 6 min soak and a 4 min pause
              after the drain at 1.2 W (the display on, the drum still), rinse, ~500 W spin at
              the end; 0.8 W standby
  dishwasher  2 h 28 min programme daily at 19:00, shaped on a recorded one: fill, ~1930 W
              heating, ~65 W circulation with drain dips, two more heatings, then a long
              low-power drying phase (3 W for 25 min, 0.5 W for 10 min) and a last pump-out;
              0.5 W standby
  fridge      ~80 W compressor on 12 min of every 40 (30 %), 2 W off, a 300 W start surge,
              short ~25 W door-light spikes mid-way between runs from 06:00 to 23:00, and a
              defrost every 8 h (02:00, 10:00, 18:00): a 150 W heater for 20 min, 15 min of
              dripping, a 33 min recovery run
  heatpump    ramps to ~1250 W from 23:00, ~700 W through the cold night (01:30-06:30), short
              ~400 W runs in the first 20 min of each hour by day, 15 W standby
  tv          on 19:00-22:30 daily and 07:00-07:45 on even days at 75-105 W (the picture
              changes each minute), 1 W standby
  constant    a flat load: "constant" is 1000 W, "constant:1500.5" is 1500.5 W

washer, dishwasher and tv take their own start times instead: "washer:0930+1400" runs the
programme every day at 09:30 and 14:00 UTC (a tv then stays on 3 h), so a test can put a run
where it needs one.

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


WASHER_S = 6300       # one washer programme
DISHWASHER_S = 8880   # one dishwasher programme
TV_S = 3 * 3600       # a tv session at a start time given in the spec
PAUSE_DW = 12         # a washer paused mid-programme: the display on, the drum still


def _drum(p, t, hi, lo):
    """The drum turns 12 s, rests 8 s."""
    return (hi if p % 20 < 12 else lo) + _noise(t, 40)


def _washer_program(p, t):
    if p < 180:           # filling: valve and electronics
        return 80 + _noise(t, 5)
    if p < 1680:          # heating the water
        return 22000 + _noise(t, 300)
    if p < 2700:          # washing
        return _drum(p, t, 1500, 300)
    if p < 3060:          # soaking: a 6 min pause
        return PAUSE_DW + _noise(t, 2)
    if p < 4380:
        return _drum(p, t, 1500, 300)
    if p < 4440:          # draining
        return 300 + _noise(t, 20)
    if p < 4680:          # a 4 min pause before the rinse
        return PAUSE_DW + _noise(t, 2)
    if p < 5400:          # rinsing: drum plus drain pump
        return _drum(p, t, 1200, 400)
    if p < 5460:          # spin-up
        return 2000 + (p - 5400) * 50 + _noise(t, 50)
    if p < 6240:          # spinning
        return 5000 + _noise(t, 150)
    return 800 + _noise(t, 30)  # spin-down and door lock


def _dishwasher_program(p, t):
    if p < 60:            # filling
        return 600 + _noise(t, 30)
    if p < 780 or 2520 <= p < 3720 or 5280 <= p < 6480:   # heating the water
        return 19300 + _noise(t, 150)
    if p < 1500 or 1560 <= p < 2520 or 3720 <= p < 5220:  # the circulation pump
        return 650 + _noise(t, 40)
    if p < 1530 or 5220 <= p < 5280 or 6660 <= p < 6720:  # draining
        return 220 + _noise(t, 10)
    if p < 1560:
        return 100 + _noise(t, 10)
    if p < 6660 or 8220 <= p < 8820:  # still: the electronics only, as in standby
        return 5 + _noise(t, 1)
    if p < 8220:          # drying: 3 W for 25 min
        return 30 + _noise(t, 3)
    return 450 + _noise(t, 30)  # the last pump-out


def _scheduled(t, starts, length, program, standby):
    """A programme that runs `length` s from each time of day in `starts` (it may go past
    midnight)."""
    sod = t % _DAY
    for start in starts:
        p = (sod - start) % _DAY
        if p < length:
            return program(p, t)
    return standby


def washer(t, starts):
    if starts:
        return _scheduled(t, starts, WASHER_S, _washer_program, 8)
    day, sod = t // _DAY, t % _DAY
    for start in (8 * 3600, 17 * 3600 + 1800):
        if start > 8 * 3600 and day % 2 == 0:
            continue
        p = sod - start
        if 0 <= p < WASHER_S:
            return _washer_program(p, t)
    return 8


def dishwasher(t, starts):
    return _scheduled(t, starts or (19 * 3600,), DISHWASHER_S, _dishwasher_program,
                      5 + _noise(t, 1))


def _tv_on(p, t):
    return 900 + _hash(t // 60 + 5) % 300 - 150 + _noise(t, 30)


def tv(t, starts):
    if starts:
        return _scheduled(t, starts, TV_S, _tv_on, 10 + _noise(t, 3))
    sod = t % _DAY
    if 19 * 3600 <= sod < 22 * 3600 + 1800 or (
            (t // _DAY) % 2 == 0 and 7 * 3600 <= sod < 7 * 3600 + 2700):
        return _tv_on(0, t)
    return 10 + _noise(t, 3)


DEFROST_EVERY_S = 28800   # 8 h; each defrost takes the place of two compressor cycles
DEFROST_AT_S = 7200       # 02:00, 10:00, 18:00


def _compressor(p, t):
    return 3000 if p < 2 else 850 - p * 70 // 720 + _noise(t, 10)


def fridge(t, starts):
    d = (t - DEFROST_AT_S) % DEFROST_EVERY_S
    if d < 4800:                       # a defrost
        if d < 1200:                   # the heater
            return 1500 + _noise(t, 20)
        if 2100 <= d < 4080:           # the long recovery run after the dripping
            return _compressor((d - 2100) * 720 // 1980, t) + 50
        return 20
    p = t % 2400
    if p < 720:
        return _compressor(p, t)
    power = 20
    if 6 * 3600 <= t % _DAY < 23 * 3600:
        cycle = t // 2400               # one chance in three of the door, mid-way between runs
        h = _hash(cycle + 99)
        if h % 3 == 0:
            opened = cycle * 2400 + 1100 + h % 900
            if opened <= t < opened + 20 + h % 40:
                power += 250
    return power


def heatpump(t, starts):
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


_POWER_FACTOR_PCT = {"washer": 98, "dishwasher": 97, "fridge": 80, "heatpump": 95, "tv": 90,
                     "constant": 100}
_FUNCS = {"washer": washer, "dishwasher": dishwasher, "fridge": fridge, "heatpump": heatpump,
          "tv": tv}
_SCHEDULED = ("washer", "dishwasher", "tv")
NAMES = ("washer", "dishwasher", "fridge", "heatpump", "tv", "constant")


def starts_of(name, arg):
    """The times of day (s) "0930+1400" names, for a profile that takes them; ValueError."""
    if not arg:
        return ()
    if name not in _SCHEDULED:
        raise ValueError("profile %r takes no argument" % name)
    out = []
    for hhmm in arg.split("+"):
        if len(hhmm) != 4 or not hhmm.isdigit() or int(hhmm[:2]) > 23 or int(hhmm[2:]) > 59:
            raise ValueError("profile %s:%s: give start times as HHMM+HHMM (UTC)" % (name, arg))
        out.append(int(hhmm[:2]) * 3600 + int(hhmm[2:]) * 60)
    return tuple(out)


class Profile:
    """One simulated appliance: power_dw(t), voltage_cv(t), current_ma(t) for second t."""

    def __init__(self, spec):
        name, _, arg = spec.partition(":")
        if name not in _POWER_FACTOR_PCT:
            raise ValueError("unknown profile %r; known: %s" % (spec, ", ".join(NAMES)))
        self.name = name
        self._pf_pct = _POWER_FACTOR_PCT[name]
        self._starts = ()
        if name == "constant":
            watts, _, tenths = (arg or "1000").partition(".")
            self._constant_dw = int(watts) * 10 + (int(tenths[:1]) if tenths else 0)
            self._fn = self._constant
        else:
            self._starts = starts_of(name, arg)
            self._fn = _FUNCS[name]

    def _constant(self, t, starts):
        return self._constant_dw

    def power_dw(self, t):
        return self._fn(t, self._starts)

    def current_ma(self, power_dw, voltage_cv):
        """power_dw * 10**6 // (voltage_cv * power factor %), exactly, with every intermediate
        a small int for loads up to 10.7 kW."""
        scaled = power_dw * 10000
        q = scaled // voltage_cv  # not divmod(): its tuple would be a heap object
        return (q * 100 + (scaled - q * voltage_cv) * 100 // voltage_cv) // self._pf_pct
