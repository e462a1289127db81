"""learn.py - what a plug's own readings say about its appliance: its standby level, its
working level, whether it cycles; and from those, the thresholds a run is found with
(detect.py), with the owner's kind and overrides from the config's [runs] table.

The distribution. Every slot's power goes into a histogram of log10(W), BINS_PER_DECADE bins
a decade from 0.1 W to 50 kW (a bin below for 0.1 W or less: off), one histogram per UTC day,
the last LEARN_DAYS days kept. The levels are learned again every 10 minutes of the data's
time (every hour once there is a day of it: detect.py calls relearn()), from the days kept, so the same readings give the same
thresholds whether they arrive live or are read again by `wattlog rebuild`.

  split     Otsu's threshold on the log histogram (the split that makes the two classes most
            apart): standby and off below it, working above it
  standby   the most populated bin below the split
  working   the median of the slots above the split
  valid     working at least MIN_RATIO times standby and MIN_STEP_W above it, with at least
            MIN_WORKING_SLOTS slots above the split: a plug that only ever sits at its standby
            (noise around a few watts, a relay that is off) has no working level and no runs

  cycling   the load comes back (reaches start_w) after a quiet spell (QUIET_S under the stop
            level) at least CYCLING_PER_DAY times a day over the last 7 days observed, and
            has done so CYCLING_PER_DAY times at least (a fridge, a freezer, a heat pump by
            day, after its first hours; a washer, a dishwasher, a tv come back a few times a
            day, and a wash's two pauses in its first hours do not make it cycle)

Thresholds (each can be set in the config instead, per plug):
  stop_w    the level a run is over below: max(1.6 x standby, standby + 1 W)
  start_w   the level a run must reach, so a blip at a few watts is not one: max(working / 2,
            2 x stop_w). A fridge's door light (~25 W over its 2 W) stays below its 40 W
  pause_s   how long a run may stay below stop_w and go on: 3 min for a cycling appliance (or
            kind = "fridge"), 20 min otherwise (a wash's soak, a dishwasher's still drying),
            30 min for kind = "dishwasher"
  min_s     a run lasts at least this long (60 s)
"""

import math

import numpy as np

BINS_PER_DECADE = 20
LOW_W = 0.1
HIGH_W = 50000.0
NBINS = 1 + int(math.ceil(math.log10(HIGH_W / LOW_W) * BINS_PER_DECADE))
LEARN_DAYS = 28
MIN_LEARN_S = 3600          # an hour of readings before anything is learned
MIN_RATIO = 4.0
MIN_STEP_W = 5.0
MIN_WORKING_SLOTS = 6
QUIET_S = 180
CYCLING_PER_DAY = 12
CYCLING_DAYS = 7
MIN_OBSERVED_S = 2 * 3600   # cycling is judged on 2 h of readings at least
KINDS = ("washer", "dishwasher", "fridge", "other")
PAUSE_S = {"fridge": 180, "dishwasher": 1800}
PAUSE_CYCLING_S = 180
PAUSE_DEFAULT_S = 1200
MIN_RUN_S = 60
# [runs.<plug>] keys and what each must be
PLUG_KEYS = {"kind": "one of " + ", ".join(KINDS),
             "start_w": "watts, a number above 0", "stop_w": "watts, a number above 0",
             "pause": "seconds, or a duration such as 10m", "min_duration": "seconds, or a "
             "duration such as 90s"}


def bins(power_w):
    """Histogram bin of each power (NaN must be taken out first)."""
    p = np.maximum(np.asarray(power_w, dtype=np.float64), LOW_W)
    k = np.floor(np.log10(p / LOW_W) * BINS_PER_DECADE).astype(np.int64) + 1
    k[p <= LOW_W] = 0
    return np.clip(k, 0, NBINS - 1)


def centre_w(k):
    """The power at a bin's middle (0 for the bin of off)."""
    return 0.0 if k == 0 else LOW_W * 10 ** ((k - 0.5) / BINS_PER_DECADE)


def levels(hist):
    """{"standby_w", "working_w", "valid", "slots"} from a histogram (counts per bin)."""
    hist = np.asarray(hist, dtype=np.float64)
    total = hist.sum()
    out = {"standby_w": None, "working_w": None, "valid": False, "slots": int(total)}
    if total <= 0:
        return out
    x = np.arange(NBINS, dtype=np.float64)
    w0 = np.cumsum(hist)
    m0 = np.cumsum(hist * x)
    w1 = total - w0
    with np.errstate(invalid="ignore", divide="ignore"):
        between = np.where((w0 > 0) & (w1 > 0),
                           w0 * w1 * (m0 / w0 - (m0[-1] - m0) / w1) ** 2, -1.0)
    split = int(np.argmax(between)) + 1  # bins below `split` are standby and off
    if between.max() <= 0:
        out["standby_w"] = centre_w(int(np.argmax(hist)))
        return out
    low, high = hist[:split], hist[split:]
    standby = centre_w(int(np.argmax(low)))
    half = np.searchsorted(np.cumsum(high), high.sum() / 2.0)
    working = centre_w(split + int(half))
    out.update(standby_w=round(standby, 2), working_w=round(working, 1),
               valid=bool(high.sum() >= MIN_WORKING_SLOTS and working >= standby * MIN_RATIO
                          and working >= standby + MIN_STEP_W))
    return out


class Learned:
    """A plug's days of readings (histograms, quiet spells ended) and what they say."""

    def __init__(self, state=None):
        state = state or {}
        self.days = {int(d): np.asarray(h, dtype=np.int64)
                     for d, h in state.get("days", {}).items()}
        self.starts = {int(d): n for d, n in state.get("starts", {}).items()}
        self.seen_s = {int(d): n for d, n in state.get("seen_s", {}).items()}
        self.result = state.get("result") or levels(np.zeros(NBINS))
        self.result.setdefault("cycling", False)
        self._past = None  # (day, the histograms of the days before it, summed)

    def to_json(self):
        return {"days": {str(d): h.tolist() for d, h in self.days.items()},
                "starts": {str(d): n for d, n in self.starts.items()},
                "seen_s": {str(d): n for d, n in self.seen_s.items()},
                "result": self.result}

    def add(self, day, power_w, interval_s):
        """The slots with data of one UTC day (day = unix // 86400)."""
        if not len(power_w):
            return
        h = self.days.get(day)
        if h is None:
            h = self.days[day] = np.zeros(NBINS, dtype=np.int64)
            for old in [d for d in self.days if d <= day - LEARN_DAYS]:
                del self.days[old]
        h += np.bincount(bins(power_w), minlength=NBINS)
        self.seen_s[day] = self.seen_s.get(day, 0) + len(power_w) * interval_s
        for old in [d for d in self.seen_s if d <= day - LEARN_DAYS]:
            self.seen_s.pop(old)
            self.starts.pop(old, None)

    def young(self):
        """Less than a day of readings: learned again more often (detect.py)."""
        return sum(self.seen_s.values()) < 86400

    def quiet_ended(self, day):
        """The load came back after a quiet spell (QUIET_S below the stop level)."""
        self.starts[day] = self.starts.get(day, 0) + 1

    def relearn(self, day):
        """The levels from the days kept, up to `day` (detect.py: every 10 min of readings)."""
        if self._past is None or self._past[0] != day:  # the days before: summed once a day
            self._past = (day, sum((h for d, h in self.days.items() if d != day),
                                   np.zeros(NBINS, dtype=np.int64)))
        today = self.days.get(day)
        total = self._past[1] if today is None else self._past[1] + today
        seen = sum(self.seen_s.values())
        if seen < MIN_LEARN_S:
            self.result = dict(levels(np.zeros(NBINS)), cycling=False)
            return
        result = levels(total)
        recent = [d for d in self.seen_s if d > day - CYCLING_DAYS]
        observed = sum(self.seen_s[d] for d in recent)
        came_back = sum(self.starts.get(d, 0) for d in recent)
        result["cycling"] = bool(observed >= MIN_OBSERVED_S and came_back >= CYCLING_PER_DAY
                                 and came_back * 86400.0 / observed >= CYCLING_PER_DAY)
        result["per_day"] = round(came_back * 86400.0 / observed, 1) if observed else None
        self.result = result


def thresholds(result, plug=None):
    """{"stop_w", "start_w", "pause_s", "min_s", "kind", "cycling", "set": [keys the owner
    set]} from the learned levels and the owner's [runs.<plug>] table; start_w None: nothing
    learned yet and nothing set, so no run can be found."""
    plug = plug or {}
    standby, working = result.get("standby_w"), result.get("working_w")
    kind = plug.get("kind")
    stop = plug.get("stop_w")
    if stop is None and standby is not None:
        stop = max(standby * 1.6, standby + 1.0)
    start = plug.get("start_w")
    if start is None and result.get("valid") and stop is not None:
        start = max(working / 2.0, 2.0 * stop)
    if stop is None and start is not None:
        stop = start / 2.0
    cycling = kind == "fridge" or (kind is None and bool(result.get("cycling")))
    pause = plug.get("pause_s")
    if pause is None:
        pause = PAUSE_S.get(kind) or (PAUSE_CYCLING_S if cycling else PAUSE_DEFAULT_S)
    return {"stop_w": None if stop is None else round(stop, 2),
            "start_w": None if start is None else round(start, 1),
            "pause_s": pause, "min_s": plug.get("min_s", MIN_RUN_S), "kind": kind or "other",
            "cycling": cycling, "set": sorted(plug)}


def describe(node, result, th):
    """What was learned and what is used, in one sentence for people."""
    if th["start_w"] is None:
        if result.get("standby_w") is None:
            return ("%s: not enough readings yet to know its levels (an hour at least)" % node)
        return ("%s: standby %s W, no working level seen yet: no runs until it works"
                % (node, _w(result["standby_w"])))
    learned = "standby %s W, working %s W%s" % (
        _w(result.get("standby_w")), _w(result.get("working_w")),
        ", cycling" if result.get("cycling") else "")
    mins = th["pause_s"] / 60.0
    return ("%s (%s): %s; a run starts above %s W%s and ends after %s min below %s W%s"
            % (node, th["kind"], learned, _w(th["start_w"]), " (set)" if "start_w" in th["set"]
               else "", "%g" % mins, _w(th["stop_w"]),
               " (set: %s)" % ", ".join(th["set"]) if th["set"] else ""))


def _w(x):
    return "-" if x is None else "%g" % round(x, 1 if x >= 10 else 2)


def check_plug(node, table, duration):
    """A [runs.<plug>] table checked -> {"kind", "start_w", "stop_w", "pause_s", "min_s"};
    ValueError naming the key. duration: the config's reader of "10m"-style seconds."""
    if not isinstance(table, dict):
        raise ValueError("runs.%s must be a table ([runs.%s])" % (node, node))
    out = {}
    for key, value in table.items():
        if key not in PLUG_KEYS:
            raise ValueError("runs.%s.%s is not a setting (known: %s)"
                             % (node, key, ", ".join(sorted(PLUG_KEYS))))
        if key == "kind":
            if value not in KINDS:
                raise ValueError("runs.%s.kind must be %s, not %r"
                                 % (node, PLUG_KEYS["kind"], value))
            out["kind"] = value
            continue
        if key in ("start_w", "stop_w"):
            good = not isinstance(value, bool) and isinstance(value, (int, float)) \
                and math.isfinite(value) and value > 0
            if not good:
                raise ValueError("runs.%s.%s must be %s" % (node, key, PLUG_KEYS[key]))
            out[key] = float(value)
            continue
        seconds = duration(value)
        if seconds is None:
            raise ValueError("runs.%s.%s must be %s" % (node, key, PLUG_KEYS[key]))
        out["pause_s" if key == "pause" else "min_s"] = seconds
    if "start_w" in out and "stop_w" in out and out["stop_w"] >= out["start_w"]:
        raise ValueError("runs.%s.stop_w (%g W) must be below start_w (%g W)"
                         % (node, out["stop_w"], out["start_w"]))
    return out
