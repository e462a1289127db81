"""detect.py - one plug's runs, found slot by slot as its power readings come, with nothing
read twice: a state machine fed the slots after its cursor, in order, whose whole state is
plain data (to_json) kept beside the summaries, so a restart goes on where it stopped.

    d = Detector(interval_s, plug_settings, state)     # state: to_json() of an earlier one
    for what in d.feed(first_slot_time, power_w):      # float array, NaN where no reading
        ...  # ("started", run), ("finished", run), ("state", "idle"|"running"|"paused", t)

A slot is active when its power is above stop_w (learn.py). A run:
  - begins at the first active slot after a quiet spell (a candidate), and is a run once it
    has reached start_w and lasted min_s: "started" is said then, with the candidate's start
    (so a washer's start is the valve's few watts, not the heating minutes later); a
    candidate quiet for CANDIDATE_QUIET_S without being confirmed was not a run (a door
    light, a blip);
  - goes on through slots below stop_w, or missing, for up to pause_s (a soak, a still
    drying): "paused" meanwhile;
  - has ended once pause_s has passed since its last active slot: "finished", its end the
    end of that slot.
A run is decided by the readings alone, so the live collector and `wattlog rebuild` find the
same runs in the same readings. Start and end are slot edges: each within a slot of the
appliance's own.

The thresholds come from learn.py, learned again every RELEARN_S of the readings' time (at
whole multiples of it; every RELEARN_OLD_S once the plug has a day of readings) from the
histograms the slots before filled (and from the owner's settings): a new plug's first run is
found while it goes on, its start where it began. Each slot
also counts towards the plug's cycling: the load coming back after QUIET_S.
"""

import numpy as np

from wattlog.runs.learn import QUIET_S, Learned, thresholds

CANDIDATE_QUIET_S = 120
RELEARN_S = 600         # while the plug has less than a day of readings
RELEARN_OLD_S = 3600    # after
IDLE, CANDIDATE, RUN = "idle", "candidate", "run"


class Detector:
    def __init__(self, interval_s, plug=None, state=None):
        state = state or {}
        self.interval_s = interval_s
        self.plug = plug or {}
        self.learned = Learned(state.get("learned"))
        self.cursor = state.get("cursor")          # unix time of the next slot to read
        self.phase = state.get("phase", IDLE)
        self.start = state.get("start")            # the candidate's or run's first slot
        self.last_end = state.get("last_end")      # end of its last active slot
        self.peak_w = state.get("peak_w")
        self.last_on_end = state.get("last_on_end", -10 ** 12)  # any active slot's end
        self.state = state.get("state", "idle")
        self.back = state.get("back", False)       # active again after a quiet spell
        self.th = thresholds(self.learned.result, self.plug)

    def to_json(self):
        return {"interval": self.interval_s, "cursor": self.cursor, "phase": self.phase,
                "start": self.start, "last_end": self.last_end, "peak_w": self.peak_w,
                "last_on_end": self.last_on_end, "state": self.state, "back": self.back,
                "learned": self.learned.to_json()}

    def open_run(self):
        """The run going on ({"start", "peak_w", "state"}), or None."""
        if self.phase != RUN:
            return None
        return {"start": self.start, "peak_w": self.peak_w, "state": self.state}

    def feed(self, t0, power_w):
        """The slots from t0 (the cursor, or the first slot ever), in order; what happened."""
        iv = self.interval_s
        values = np.asarray(power_w, dtype=np.float64)
        if self.cursor is not None and t0 != self.cursor:
            raise ValueError("slots from %d fed to a detector at %d" % (t0, self.cursor))
        out = []
        k = 0
        while k < len(values):
            t = t0 + k * iv
            period = RELEARN_S if self.learned.young() else RELEARN_OLD_S
            if t % period == 0:
                self.learned.relearn(t // 86400)
                self.th = thresholds(self.learned.result, self.plug)
            n = min(len(values) - k, (period - t % period + iv - 1) // iv)
            chunk = values[k:k + n]
            have = chunk[~np.isnan(chunk)]
            self.learned.add(t // 86400, have, iv)
            self._chunk(t, chunk, out)
            k += n
        self.cursor = t0 + len(values) * iv
        return out

    def _chunk(self, t0, values, out):
        """Slots within one relearning period (the thresholds hold still), taken a stretch of
        like slots (active, or not) at a time: a few numpy calls a stretch, none a slot."""
        stop = self.th["stop_w"]
        if stop is None:
            return
        with np.errstate(invalid="ignore"):
            active = values > stop
        if self.phase == IDLE and not active.any():
            return
        bounds = [0] + (np.flatnonzero(np.diff(active)) + 1).tolist() + [len(values)]
        iv = self.interval_s
        for a, b in zip(bounds[:-1], bounds[1:]):
            if active[a]:
                self._active(t0 + a * iv, values[a:b], out)
            else:
                self._quiet(t0 + a * iv, t0 + b * iv, out)

    def _active(self, t, seg, out):
        """A stretch of active slots from t."""
        iv, th = self.interval_s, self.th
        start_w = th["start_w"]
        if t - self.last_on_end >= QUIET_S:
            self.back = True
        if self.phase == IDLE:
            self.phase, self.start, self.peak_w = CANDIDATE, t, float(seg[0])
        ends = t + iv * np.arange(1, len(seg) + 1)        # each slot's end
        if start_w is not None:
            reached = np.flatnonzero(seg >= start_w)
            if self.back and reached.size:  # the load came back: a blip at a few watts does not
                self.back = False           # count
                self.learned.quiet_ended(int(ends[reached[0]] - iv) // 86400)
            if self.phase == CANDIDATE:
                peak = np.maximum(np.maximum.accumulate(seg), self.peak_w)
                ok = np.flatnonzero((peak >= start_w) & (ends - self.start >= th["min_s"]))
                if ok.size:
                    self.phase = RUN
                    out.append(("started", {"start": self.start, "decided": int(ends[ok[0]])}))
                    self._say("running", int(ends[ok[0]]), out)
        if self.phase == RUN:
            self._say("running", t + iv, out)
        self.peak_w = max(self.peak_w, float(seg.max()))
        self.last_end = self.last_on_end = int(ends[-1])

    def _quiet(self, ta, tb, out):
        """A stretch of slots [ta, tb) below stop_w or without a reading."""
        if self.phase == IDLE:
            return
        iv = self.interval_s
        wait = CANDIDATE_QUIET_S if self.phase == CANDIDATE else self.th["pause_s"]
        # the first slot t with t + iv - last_end > wait: the candidate or the run is over
        x = self.last_end + wait - iv
        over = ta if x < ta else ta + ((x - ta) // iv + 1) * iv
        if self.phase == CANDIDATE:
            if over < tb:
                self.phase = IDLE
            return
        if over > ta:
            self._say("paused", ta + iv, out)
        if over < tb:
            out.append(("finished", {"start": self.start, "end": self.last_end,
                                     "peak_w": round(self.peak_w, 1), "decided": over + iv}))
            self.phase = IDLE
            self._say("idle", over + iv, out)

    def _say(self, state, t, out):
        if state != self.state:
            self.state = state
            out.append(("state", state, t))
