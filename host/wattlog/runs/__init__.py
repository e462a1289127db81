"""runs - what each appliance did: the runs of a washer, a dishwasher, a tv, the cycles of a
fridge or a heat pump, found from each plug's own readings with no threshold to type.

Derived data, like the summaries: read from the feeds through the storage interface
(store/__init__.py), so any engine behind it works; found as readings arrive, never on the
commit's path; kept in <data>/runs/ and rebuilt by `wattlog rebuild`.

  learn.py    the plug's levels from the distribution of its readings; the thresholds
  detect.py   one plug's runs, slot by slot, its state plain data
  measure.py  a finished run's kWh, cost and peak
  records.py  <data>/runs/: the runs logs, the detectors' state, the events published
  part.py     the collector's part: hears readings, finds runs, hands over what to publish
  ha.py       the MQTT events, the run state, Home Assistant's device triggers and sensor
  report.py   the runs as every view shows them (`wattlog runs`, /api/runs, the page)
  rebuild.py  every plug's runs from its first slot (`wattlog rebuild`)

The config's [runs] table (settings.py; check() here):
    [runs]
    enabled = true              # find runs (default); false: none of this runs
    events = true               # publish events, run state and discovery (default)
    event_max_age = "1h"        # no event for a run decided longer ago (a backlog)
    [runs.washer]               # a plug: its kind, and any threshold to set by hand
    kind = "washer"             # washer, dishwasher, fridge or other
    start_w = 100               # a run reaches this (W)
    stop_w = 3                  # a run is over below this (W) ...
    pause = "20m"               # ... after this long
    min_duration = "2m"         # a run lasts at least this long
"""

from wattlog.runs.learn import check_plug
from wattlog.store.feeds import NODE_ID

_TOP = {"enabled": "true or false", "events": "true or false",
        "event_max_age": "seconds, or a duration such as 1h"}


def check(table, duration):
    """The [runs] table -> {"enabled", "events", "event_max_age_s", "plugs": {node:
    settings}}; ValueError naming the key. duration(value) -> seconds or None."""
    if not isinstance(table, dict):
        raise ValueError("runs must be a table ([runs])")
    out = {"enabled": True, "events": True, "plugs": {}}
    for key, value in table.items():
        if isinstance(value, dict):
            if not NODE_ID.match(key):
                raise ValueError("[runs.%s]: a plug's table is named by its node id (1-32 of "
                                 "a-z, 0-9, _ and -)" % key)
            out["plugs"][key] = check_plug(key, value, duration)
        elif key in ("enabled", "events"):
            if not isinstance(value, bool):
                raise ValueError("runs.%s must be %s" % (key, _TOP[key]))
            out[key] = value
        elif key == "event_max_age":
            seconds = duration(value)
            if seconds is None:
                raise ValueError("runs.event_max_age must be %s" % _TOP[key])
            out["event_max_age_s"] = seconds
        else:
            raise ValueError("runs.%s is not a setting (known: %s, and a table per plug)"
                             % (key, ", ".join(sorted(_TOP))))
    return out
