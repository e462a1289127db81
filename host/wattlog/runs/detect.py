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
whole multiples of it) from the histograms the slots before filled (and from the owner's
settings): a new plug's first run is found while it goes on, its start where it began. Each slot
also counts towards the plug's cycling: the load coming back after QUIET_S.
"""

import numpy as np

from wattlog.runs.learn import QUIET_S, Learned, thresholds

CANDIDATE_QUIET_S = 120
RELEARN_S = 600
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
            if t % RELEARN_S == 0:
                self.learned.relearn(t // 86400)
                self.th = thresholds(self.learned.result, self.plug)
            n = min(len(values) - k, (RELEARN_S - t % RELEARN_S + iv - 1) // iv)
            chunk = values[k:k + n]
            have = chunk[~np.isnan(chunk)]
            self.learned.add(t // 86400, have, iv)
            self._chunk(t, chunk, out)
            k += n
        self.cursor = t0 + len(values) * iv
        return out

    def _chunk(self, t0, values, out):
        """Slots within one RELEARN_S: the thresholds hold still."""
        iv = self.interval_s
        stop = self.th["stop_w"]
        if stop is None:
            return
        with np.errstate(invalid="ignore"):
            active = values > stop
        if self.phase == IDLE and not active.any():
            return
        if self.phase == RUN and active.all():
            self.last_end = self.last_on_end = t0 + len(values) * iv
            self.peak_w = max(self.peak_w, float(values.max()))
            self._say("running", t0 + len(values) * iv, out)
            return
        for k, on in enumerate(active.tolist()):
            self._slot(t0 + k * iv, float(values[k]), on, out)

    def _slot(self, t, v, on, out):
        iv, th = self.interval_s, self.th
        if on:
            if t - self.last_on_end >= QUIET_S:
                self.back = True
            if self.back and th["start_w"] is not None and v >= th["start_w"]:
                self.back = False  # the load came back: a blip at a few watts does not count
                self.learned.quiet_ended(t // 86400)
            self.last_on_end = self.last_end = t + iv
            if self.phase == IDLE:
                self.phase, self.start, self.peak_w = CANDIDATE, t, v
            else:
                self.peak_w = max(self.peak_w, v)
            if self.phase == CANDIDATE and th["start_w"] is not None and \
                    self.peak_w >= th["start_w"] and t + iv - self.start >= th["min_s"]:
                self.phase = RUN
                out.append(("started", {"start": self.start, "decided": t + iv}))
            if self.phase == RUN:
                self._say("running", t + iv, out)
            return
        if self.phase == CANDIDATE and t + iv - self.last_end > CANDIDATE_QUIET_S:
            self.phase = IDLE
        elif self.phase == RUN:
            if t + iv - self.last_end > th["pause_s"]:
                out.append(("finished", {"start": self.start, "end": self.last_end,
                                         "peak_w": round(self.peak_w, 1), "decided": t + iv}))
                self.phase = IDLE
                self._say("idle", t + iv, out)
            else:
                self._say("paused", t + iv, out)

    def _say(self, state, t, out):
        if state != self.state:
            self.state = state
            out.append(("state", state, t))
