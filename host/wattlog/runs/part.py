"""part.py - the runs as the collector's part (service.py builds it once): it hears which plug
sent readings, finds their runs as they come, and hands the collector what to publish.
(About 300 lines, one concern: the runs as the collector's part, as the loop and the MQTT thread
drive it.)

    runs = Runs(store, data_dir, options, tariff, tz, base_topic)
    runs.take(topic, payload)   # a listener: notes the plug and its newest slot; False
    for topic, payload, retain in runs.tick(): ...   # in the collector's loop, not on a
                                                      # commit: the new slots read through the
                                                      # storage interface, runs found
    runs.announce()             # on connect: Home Assistant discovery and each run state
    runs.close()                # the detectors' state saved (records.py)

Reading: each tick reads, for each plug heard since, the slots after its detector's cursor
up to its newest reading, through the storage interface (read(): the stored slots with the
pending ones laid over), so the readings that decide a run are used as soon as they are
taken, before any commit, and any storage engine that answers read() works unchanged. At
most MAX_SLOTS_PER_TICK slots a plug a tick (a day at 10 s): a plug's backlog is caught up
over several turns of the loop, never holding up an ack. A plug whose feed does not exist
yet (its first readings, before the first commit) waits for it. Slots come in order, but a
slot may be missing for a while and then come (a plug resending what a killed collector
never committed, a hole the collector asked for): reading stops before a missing slot until
it has stayed missing HOLE_WAIT_S (_settled), so a run is not cut by readings on their way.

A plug with no saved state (a new one, or data from before runs existed) starts
START_BACK_S before its newest reading; `wattlog rebuild` finds the runs of all its history.

Events (ha.py): run_started when a run is confirmed, run_finished when it is over, each once
(records.py's events.json is replaced before the tick's events go out, once a tick; a crash
between the two loses those events rather than sends them twice), and only for runs decided less than
options["event_max_age_s"] ago (default an hour): a week of readings resent after an outage,
or the demo's replayed day, fires no stale notifications. The run state (retained) is
published when it changes, the latest only.
"""

import logging
import struct
import time

import numpy as np

from wattlog.runs import ha
from wattlog.runs.detect import Detector
from wattlog.runs.learn import describe, thresholds
from wattlog.runs.measure import measure
from wattlog.runs.records import Records
from wattlog.store.feeds import NODE_ID
from wattnode import wire

log = logging.getLogger("wattlog")
MAX_SLOTS_PER_TICK = 8640
HOLE_WAIT_S = 60
START_BACK_S = 7 * 86400
EVENT_MAX_AGE_S = 3600
SAVE_EVERY_S = 6 * 3600
_T_S = struct.Struct("<I")  # a wire record's first field: its slot, seconds since 2020


def finished_run(run, measured, tariff):
    """A finished run as the log and every view hold it."""
    out = {"start": run["start"], "end": run["end"], "duration_s": run["end"] - run["start"],
           "kwh": None, "cost": None, "currency": tariff.currency if tariff else None,
           "peak_w": run["peak_w"]}
    if measured:
        out.update(kwh=measured["kwh"], cost=measured["cost"])
    return out


class Runs:
    def __init__(self, store, data_dir, options=None, tariff=None, tz="UTC",
                 base_topic="wattlog", ha_prefix="homeassistant", max_future_s=3600,
                 save_every_s=SAVE_EVERY_S, hole_wait_s=HOLE_WAIT_S, clock=time.time,
                 monotonic=time.monotonic):
        options = options or {}
        self.store = store
        self.records = Records(data_dir)
        self.plugs = options.get("plugs", {})
        self.events_on = options.get("events", True)
        self.event_max_age_s = options.get("event_max_age_s", EVENT_MAX_AGE_S)
        self.tariff, self.tz = tariff, tz
        self.base, self.prefix = base_topic, ha_prefix
        self.max_future_s = max_future_s
        self.save_every_s = save_every_s
        self.hole_wait_s = hole_wait_s
        self._hold = {}         # node -> (the slot missing, when first seen, slots seen then)
        self.clock, self.monotonic = clock, monotonic
        self._saved_at = monotonic()
        self.detectors = {}     # node -> Detector
        self.finished = {}      # node -> [finished runs], oldest first
        self._grids = {}        # node -> (entry, grid)
        self._newest = {}       # node -> unix time of its newest slot heard, to read up to
        self._changed = set()   # nodes whose detector moved since the last save
        self._announce = False
        self._started = False
        self._fresh = False     # events to publish this tick: the record is saved first
        self._said = {}         # node -> the run state last published
        self.published = self.records.events()
        for node in self.records.nodes():
            self._load(node)

    def _load(self, node):
        state = self.records.state(node)
        if state is not None and isinstance(state.get("interval"), int):
            self.detectors[node] = Detector(state["interval"], self.plugs.get(node), state)
        self.finished[node] = self.records.runs(node)

    # -- the listener ------------------------------------------------------------------------

    def topics(self):
        return [("%s/status" % self.prefix, 0)]  # Home Assistant back: announce again

    def take(self, topic, payload):
        if topic == "%s/status" % self.prefix:
            self._announce = self._announce or payload == b"online"
            return True
        if not topic.endswith("/readings") or len(payload) < wire.HEADER_SIZE + _T_S.size:
            return False
        node = topic.split("/")[-2]
        if NODE_ID.match(node):
            try:
                count = wire.decode_header(payload)[0]
            except wire.BatchError:
                return False
            last = wire.HEADER_SIZE + (count - 1) * wire.RECORD_SIZE
            if count and len(payload) >= last + _T_S.size:
                t = _T_S.unpack_from(payload, last)[0] + wire.EPOCH_UNIX
                self._newest[node] = max(self._newest.get(node, 0), t)
        return False

    # -- the loop ----------------------------------------------------------------------------

    def tick(self):
        """The runs of the slots heard since the last tick; [(topic, payload, retain)]."""
        out = []
        if not self._started:  # every plug with a power feed: what is stored since its
            self._started = True  # saved state (or the last START_BACK_S) is read first
            for entry in self.store.entries():
                if entry["channel"] == "power":
                    self._newest.setdefault(entry["node"], 0)
        if self._announce:
            self._announce = False
            out += self.announce()
        for node in list(self._newest):
            out += self._advance(node)
        if self._fresh:  # recorded before any of them goes out: once for the whole tick
            self._fresh = False
            self.records.save_events(self.published)
        if self.monotonic() - self._saved_at >= self.save_every_s:
            self.save()
        return out

    @property
    def behind(self):
        """Whether some plug has slots heard and not read yet (its feed made)."""
        return any(self.store.lookup("%s/power" % n) is not None for n in self._newest)

    def _grid(self, node):
        entry = self.store.lookup("%s/power" % node)
        if entry is None or entry.get("quarantined"):
            return None
        cached = self._grids.get(node)
        if cached is None or cached[0]["id"] != entry["id"]:
            cached = self._grids[node] = (entry, self.store.feed(entry))
        return cached

    def _advance(self, node):
        found = self._grid(node)
        if found is None:
            return []
        entry, grid = found
        iv = grid.interval
        upto = min(max(self._newest[node] + iv, grid.end()), int(self.clock()) +
                   self.max_future_s)
        det = self.detectors.get(node)
        if det is None or det.interval_s != iv or det.cursor is None:
            if det is not None:
                log.warning("%s's slots are now %d s: its runs are found afresh", node, iv)
            det = self.detectors[node] = Detector(iv, self.plugs.get(node))
            det.cursor = grid.time(grid.first_at(max(grid.start, upto - START_BACK_S)))
            self.finished.setdefault(node, [])
        first, stop = grid.slot(det.cursor), grid.slot(upto - 1) + 1
        if stop <= first:
            del self._newest[node]
            return []
        stop = min(stop, first + MAX_SLOTS_PER_TICK)
        values = self.store.read(entry, grid, first, stop)
        use = self._settled(node, first, values)
        if use == len(values) and stop >= grid.slot(upto - 1) + 1 or \
                not use and node not in self._hold:
            del self._newest[node]  # caught up, or waiting for readings: until heard again
        if not use:
            return []
        self._changed.add(node)
        return self._outcomes(node, det, det.feed(grid.time(first), values[:use]))

    def _settled(self, node, first, values):
        """How many of the slots read may be used now. Up to the last one with a reading (a
        later reading may still come for those after it); and a slot without one that later
        readings follow may be filled yet (the collector asks the plug to resend it): the
        slots stop there until it has been missing for hole_wait_s, then all that had come by
        the time it was first seen missing are used."""
        have = np.flatnonzero(~np.isnan(values))
        if not have.size:
            return 0
        last = int(have[-1]) + 1
        holes = np.flatnonzero(np.isnan(values[:last]))
        if not holes.size:
            self._hold.pop(node, None)
            return last
        hole, now = first + int(holes[0]), self.monotonic()
        held = self._hold.get(node)
        if held is None or held[0] != hole:
            self._hold[node] = (hole, now, first + last)
            return int(holes[0]) if self.hole_wait_s > 0 else self._settled(node, first, values)
        if now - held[1] < self.hole_wait_s:
            return int(holes[0])
        del self._hold[node]
        return min(held[2] - first, last)

    def _outcomes(self, node, det, outcomes):
        out, state = [], None
        now = self.clock()
        for what in outcomes:
            if what[0] == "state":
                state = what
            elif what[0] == "started":
                out += self._event(node, "run_started", what[1], now)
            else:
                run = what[1]
                measured = measure(self.store, node, run["start"], run["end"], self.tariff,
                                   self.tz)
                done = dict(finished_run(run, measured, self.tariff), decided=run["decided"])
                last = self.finished[node][-1]["start"] if self.finished.get(node) else None
                if self.records.append(node, {k: v for k, v in done.items()
                                              if k != "decided"}, last):
                    self.finished.setdefault(node, []).append(
                        {k: v for k, v in done.items() if k != "decided"})
                out += self._event(node, "run_finished", done, now)
        if state is not None and state[1] != self._said.get(node):
            self._said[node] = state[1]
            run = det.open_run()
            out.append(ha.run_state(self.base, node, state[1], state[2],
                                    run and run["start"], now))
        return out

    def _event(self, node, kind, run, now):
        """The event once: recorded first, published if it is fresh news."""
        key = "started" if kind == "run_started" else "finished"
        mine = self.published.setdefault(node, {})
        if mine.get(key) is not None and run["start"] <= mine[key]:
            return []
        mine[key] = run["start"]
        if not self.events_on or now - run["decided"] > self.event_max_age_s:
            return []  # recorded with the next event or save(): it goes out never anyway
        self._fresh = True
        return [ha.event(self.base, node, kind, run, now)]

    def announce(self):
        """Discovery for every plug with a power feed, and each known run state."""
        out = []
        nodes = sorted({e["node"] for e in self.store.entries() if e["channel"] == "power"})
        now = self.clock()
        for node in nodes:
            if self.events_on:
                out += ha.discovery(self.prefix, self.base, node)
            det = self.detectors.get(node)
            if det is not None:
                run = det.open_run()
                out.append(ha.run_state(self.base, node, det.state, None,
                                        run and run["start"], now))
                self._said[node] = det.state
        return out

    def save(self):
        """Each moved detector's state, replaced whole (records.py)."""
        self._saved_at = self.monotonic()
        for node in sorted(self._changed):
            try:
                self.records.save_state(node, self.detectors[node].to_json())
            except OSError as e:
                log.error("cannot save %s's runs state (%s); it is tried again later", node, e)
                return
        self._changed.clear()
        self.records.save_events(self.published)

    def close(self):
        self.save()

    # -- what the HTTP side reads (another thread: each read copies in one step) -------------

    def learned(self, node):
        """What was learned of a plug and the thresholds in use, with a sentence saying so."""
        det = self.detectors.get(node)
        result = det.learned.result if det else {}
        th = det.th if det else thresholds({}, self.plugs.get(node))
        return {"levels": dict(result), "thresholds": dict(th),
                "said": describe(node, result, th)}

    def plug_runs(self, node):
        """(finished runs, the run going on or None, its state)."""
        det = self.detectors.get(node)
        return (list(self.finished.get(node, ())), det and det.open_run(),
                det.state if det else None)

    def nodes(self):
        return sorted(set(self.detectors) | set(self.finished))
