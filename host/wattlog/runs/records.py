"""records.py - the runs as derived data in <data>/runs/, beside the summaries: rebuilt from
the feeds by `wattlog rebuild`, never written on the commit's path.

  <node>.runs.jsonl   the plug's finished runs, one JSON object a line, in time order:
                      {"start", "end", "duration_s", "kwh", "cost", "currency", "peak_w"}
                      (unix s; cost null without a tariff). A line is appended as each run
                      finishes (a few a day; a fridge's ~40), never rewritten but by a
                      rebuild, so an SD card sees one small append per run.
  <node>.state.json   where the plug's detector is (detect.py's to_json: its cursor, the run
                      going on, the histograms it learns from), replaced whole (durable.py)
                      every summary interval and at a clean stop.
  events.json         per plug, the start of the last run whose run_started and whose
                      run_finished were published ({"started", "finished"}), replaced whole
                      before each event goes out: an event is published once, whatever
                      restarts.

After a crash the state is older than the log: the detector goes on from its cursor, reads
again what it had read (the slots are on disk, or resent by the plugs) and finds the same
runs; a run that starts at or before the last one logged is not logged again. A log line cut
short by a crash is skipped when read.
"""

import json
import logging
import os

from wattlog.store import durable

log = logging.getLogger("wattlog")
DIR = "runs"
EVENTS = "events.json"


class Records:
    def __init__(self, data_dir):
        self.dir = os.path.join(data_dir, DIR)

    def _path(self, node, suffix):
        return os.path.join(self.dir, node + suffix)

    def nodes(self):
        """The plugs that have a state or a log here."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        return sorted({n.rsplit(".", 2)[0] for n in names
                       if n.endswith(".state.json") or n.endswith(".runs.jsonl")})

    def runs(self, node):
        """The plug's finished runs, oldest first."""
        out = []
        try:
            with open(self._path(node, ".runs.jsonl")) as f:
                for line in f:
                    try:
                        run = json.loads(line)
                    except ValueError:
                        continue  # a line cut short by a crash
                    if isinstance(run, dict) and isinstance(run.get("start"), int):
                        out.append(run)
        except FileNotFoundError:
            pass
        return out

    def append(self, node, run, last_start):
        """Log a finished run unless one as late is logged (last_start); True if logged."""
        if last_start is not None and run["start"] <= last_start:
            return False
        os.makedirs(self.dir, exist_ok=True)
        with open(self._path(node, ".runs.jsonl"), "a") as f:
            f.write(json.dumps(run, sort_keys=True) + "\n")
        return True

    def replace_runs(self, node, runs):
        """The whole log at once (a rebuild)."""
        os.makedirs(self.dir, exist_ok=True)
        durable.write_bytes(self._path(node, ".runs.jsonl"), "".join(
            json.dumps(r, sort_keys=True) + "\n" for r in runs).encode())

    def state(self, node):
        """The detector's saved state, or None; a damaged one is said and ignored."""
        path = self._path(node, ".state.json")
        try:
            return durable.read_json(path)
        except ValueError as e:
            log.warning("%s is unreadable (%s): %s's runs start afresh from its readings",
                        path, e, node)
            return None

    def save_state(self, node, state):
        os.makedirs(self.dir, exist_ok=True)
        durable.write_bytes(self._path(node, ".state.json"),
                            json.dumps(state, separators=(",", ":")).encode())

    def events(self):
        try:
            got = durable.read_json(os.path.join(self.dir, EVENTS))
        except ValueError as e:
            log.warning("%s is unreadable (%s): events of runs already going on may be "
                        "published again", os.path.join(self.dir, EVENTS), e)
            got = None
        return got if isinstance(got, dict) else {}

    def save_events(self, events):
        os.makedirs(self.dir, exist_ok=True)
        durable.write_json(os.path.join(self.dir, EVENTS), events)


class Saved(Records):
    """The runs as the files hold them, for a reader without the collector (`wattlog
    runs`): the same calls as the live part (part.Runs) that report.py reads."""

    def __init__(self, data_dir, plugs=None):
        super().__init__(data_dir)
        self.plugs = plugs or {}

    def plug_runs(self, node):
        state = self.state(node) or {}
        run = None
        if state.get("phase") == "run":
            run = {"start": state.get("start"), "peak_w": state.get("peak_w"),
                   "state": state.get("state")}
        return self.runs(node), run, state.get("state")

    def learned(self, node):
        from wattlog.runs.learn import describe, thresholds
        result = ((self.state(node) or {}).get("learned") or {}).get("result") or {}
        th = thresholds(result, self.plugs.get(node))
        return {"levels": result, "thresholds": th, "said": describe(node, result, th)}
