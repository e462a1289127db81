"""calib.py - calibration: gains from a known load, and a piecewise-linear power correction.

config.json "calibration":
  {"voltage_gain": 1.0, "current_gain": 1.0, "power_gain": 1.0,
   "power_points": [[measured_w, true_w], ...]}

Single point (what Tasmota's PowerSet/VoltageSet/CurrentSet do): with a known resistive load
on the plug, say the true power, voltage or current; the gain becomes gain * true / measured.
Multi-point: pairs (measured W, true W) at several loads - say a 60 W bulb and a 2 kW heater -
give a correction factor true/measured that is interpolated linearly in measured power between
the points and held flat beyond them, so one plug can be right at both ends of its range,
which one gain cannot (Tasmota #4727, #6797, #14681). Points are measured with the gains
already applied, so the two layers compose.

On the node everything is Q12 fixed point (4096 = 1.0): gains are folded into the drivers'
constants at start-up, and power_q12()/scale() run per poll without allocating.
"""

try:
    from micropython import const
except ImportError:
    def const(x):
        return x

ONE_Q12 = const(4096)
GAIN_MIN = 0.5
GAIN_MAX = 2.0
MAX_POINTS = const(8)
DEFAULTS = {"voltage_gain": 1.0, "current_gain": 1.0, "power_gain": 1.0, "power_points": []}


def check(cal):
    """What is wrong with a calibration dict, in words (an empty list if nothing)."""
    problems = []
    if not isinstance(cal, dict):
        return ["calibration must be an object"]
    for key in cal:
        if key not in DEFAULTS:
            problems.append("calibration key %r is unknown" % key)
    for key in ("voltage_gain", "current_gain", "power_gain"):
        g = cal.get(key, 1.0)
        if not isinstance(g, (int, float)) or not GAIN_MIN <= g <= GAIN_MAX:
            problems.append("calibration %s = %r must be a number in %.1f..%.1f"
                            % (key, g, GAIN_MIN, GAIN_MAX))
    points = cal.get("power_points", [])
    if not isinstance(points, list) or len(points) > MAX_POINTS:
        problems.append("calibration power_points must be a list of at most %d [measured W, "
                        "true W] pairs" % MAX_POINTS)
        return problems
    for p in points:
        ok = isinstance(p, list) and len(p) == 2 and all(isinstance(x, (int, float)) for x in p)
        if not ok or p[0] <= 0 or p[1] <= 0 or not GAIN_MIN <= p[1] / p[0] <= GAIN_MAX:
            problems.append("calibration point %r must be [measured W, true W], both positive, "
                            "true/measured in %.1f..%.1f" % (p, GAIN_MIN, GAIN_MAX))
    return problems


def q12(x):
    return int(x * ONE_Q12 + 0.5)


class Calibration:
    def __init__(self, cal=None):
        cal = cal if cal and not check(cal) else DEFAULTS
        self.cal = cal
        self.voltage_gain = cal.get("voltage_gain", 1.0)
        self.current_gain = cal.get("current_gain", 1.0)
        self.power_gain = cal.get("power_gain", 1.0)
        self.voltage_q12 = q12(self.voltage_gain)
        self.current_q12 = q12(self.current_gain)
        self.power_q12_gain = q12(self.power_gain)
        points = sorted(cal.get("power_points", []))
        self._at_dw = [int(m * 10) for m, _ in points]          # measured power, 0.1 W
        self._f_q12 = [q12(t / m) for m, t in points]           # true / measured there

    def power_q12(self, power_dw):
        """The correction factor at measured power power_dw (Q12); 4096 with no points."""
        at = self._at_dw
        f = self._f_q12
        n = len(at)
        if n == 0:
            return ONE_Q12
        if power_dw <= at[0]:
            return f[0]
        for i in range(1, n):
            if power_dw <= at[i]:
                span = at[i] - at[i - 1]
                return f[i - 1] + (f[i] - f[i - 1]) * (power_dw - at[i - 1]) // span if span else f[i]
        return f[n - 1]

    def scale(self, value, gain_q12):
        return (value * gain_q12 + 2048) >> 12


def gain_from(measured, true, old_gain):
    """The new gain after a single-point calibration (floats: runs once, from the REPL)."""
    if measured <= 0:
        raise ValueError("nothing measured to calibrate against: is the load switched on?")
    gain = old_gain * true / measured
    if not GAIN_MIN <= gain <= GAIN_MAX:
        raise ValueError("that would make the gain %.3f, outside %.1f..%.1f: check the load "
                         "and the value you gave" % (gain, GAIN_MIN, GAIN_MAX))
    return gain
