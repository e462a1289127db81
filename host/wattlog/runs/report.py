"""report.py - the runs as every view shows them: `wattlog runs` prints it, GET /api/runs
answers it, the dashboard's Runs view draws it (it formats nothing: each run's cells are
here, as energy.cells() is for the energy table).

    report(plugs, store, tz, since, until)   # {"plugs": [one plug's runs, ...]}
    text(answer)                              # what `wattlog runs` prints

One plug's runs: {"node", "said" (what was learned, a sentence), "levels", "thresholds",
"state" (idle | running | paused | null), "open" (the run going on: {"start", "peak_w"}),
"runs" (finished, in [since, until), oldest first: start, end, duration_s, kwh, cost,
currency, peak_w), "cells" (each run as text: start, end, duration, kWh, cost, peak W),
"weeks" (ISO weeks in the zone: runs, kWh, cost), "duty" (cycling appliances only, else
null)}.

The duty cycle (a fridge's, a freezer's, any plug that cycles: learn.py) is the share of a
local day its runs took, over the time the day has readings (a day with readings for less
than half of it has none). A day is flagged when its duty is above its plug's normal: the
median of the 28 days before it (days with readings for at least 80 % of them; 7 such days
at least) by more than 5 percentage points and by more than three robust standard
deviations of those days (1.4826 x their median absolute deviation): a steady fridge is not
flagged for a warm afternoon, a door left ajar or a failing seal shows in a day. The trend is
the least-squares slope of the last 28 days' duty, in percentage points a week.
"""

import datetime
import zoneinfo

import numpy as np

from wattlog.periods import periods

BASELINE_DAYS = 28
BASELINE_MIN_DAYS = 7
DUTY_DAYS = 56
MIN_STEP = 0.05
MAD_SIGMAS = 3.0


def _zone(tz):
    return datetime.timezone.utc if tz in ("UTC", "utc", "Z") else zoneinfo.ZoneInfo(tz)


def when(t, zone):
    return datetime.datetime.fromtimestamp(t, zone).strftime("%Y-%m-%d %H:%M")


def duration(s):
    h, m = divmod(int(round(s / 60.0)), 60)
    return "%d h %02d min" % (h, m) if h else "%d min" % m


def cells(run, zone):
    """A run as the text every view shows: start, end, duration, kWh, cost, peak W."""
    return [when(run["start"], zone), when(run["end"], zone), duration(run["duration_s"]),
            "-" if run["kwh"] is None else "%.3f" % run["kwh"],
            "-" if run["cost"] is None else "%.2f" % run["cost"],
            "-" if run["peak_w"] is None else "%.0f" % run["peak_w"]]


def weeks(runs, zone):
    """Runs, kWh and cost per ISO week (local), oldest first, weeks without runs left out."""
    out = {}
    for r in runs:
        year, week, _ = datetime.datetime.fromtimestamp(r["start"], zone).isocalendar()
        row = out.setdefault((year, week), {"week": "%d-W%02d" % (year, week), "runs": 0,
                                            "kwh": 0.0, "cost": None})
        row["runs"] += 1
        row["kwh"] = round(row["kwh"] + (r["kwh"] or 0.0), 6)
        if r["cost"] is not None:
            row["cost"] = round((row["cost"] or 0.0) + r["cost"], 6)
    return [out[k] for k in sorted(out)]


def duty(store, node, runs, tz, now):
    """{"days": [{"day", "start", "duty", "coverage", "normal", "flagged"}], "trend_pp_week",
    "flagged": [days]} over the last DUTY_DAYS local days (readings through the interface)."""
    entry = store.lookup("%s/power" % node)
    if entry is None:
        return None
    grid = store.feed(entry)
    zone = _zone(tz)
    spans = periods("day", zone, max(grid.start, now - DUTY_DAYS * 86400), now)
    if not spans:
        return None
    first, stop = grid.slot(spans[0][0]), grid.slot(spans[-1][1] - 1) + 1
    have = ~np.isnan(np.asarray(store.read(entry, grid, first, stop)))
    days = []
    for a, b, label in spans:
        lo, hi = grid.slot(a) - first, grid.slot(b - 1) + 1 - first
        seen_s = float(np.count_nonzero(have[max(lo, 0):max(hi, 0)])) * grid.interval
        on_s = sum(max(0, min(r["end"], b) - max(r["start"], a)) for r in runs)
        coverage = seen_s / (b - a)
        days.append({"day": label, "start": a, "coverage": round(coverage, 3),
                     "duty": round(min(on_s / seen_s, 1.0), 4) if coverage >= 0.5 else None,
                     "normal": None, "flagged": False})
    for k, d in enumerate(days):
        before = [x["duty"] for x in days[max(0, k - BASELINE_DAYS):k]
                  if x["duty"] is not None and x["coverage"] >= 0.8]
        if len(before) < BASELINE_MIN_DAYS or d["duty"] is None:
            continue
        normal = float(np.median(before))
        spread = 1.4826 * float(np.median(np.abs(np.array(before) - normal)))
        d["normal"] = round(normal, 4)
        d["flagged"] = d["duty"] > normal + max(MIN_STEP, MAD_SIGMAS * spread)
    recent = [(k, d["duty"]) for k, d in enumerate(days[-BASELINE_DAYS:]) if d["duty"] is not None]
    trend = None
    if len(recent) >= BASELINE_MIN_DAYS:
        x, y = np.array([k for k, _ in recent], float), np.array([v for _, v in recent])
        trend = round(float(np.polyfit(x, y, 1)[0]) * 7 * 100, 2)
    return {"days": days, "trend_pp_week": trend,
            "flagged": [d["day"] for d in days if d["flagged"]]}


def plug_report(node, runs, open_run, state, learned, store, tz, since, until, now):
    zone = _zone(tz)
    shown = [r for r in runs if (since is None or r["start"] >= since) and
             (until is None or r["start"] < until)]
    cycling = learned["thresholds"].get("cycling")
    return {"node": node, "said": learned["said"], "levels": learned["levels"],
            "thresholds": learned["thresholds"], "state": state, "open": open_run,
            "runs": shown, "cells": [cells(r, zone) for r in shown],
            "weeks": weeks(shown, zone),
            "duty": duty(store, node, runs, tz, now) if cycling else None}


def health(sources, store, tz, node, now=None):
    """What plug health says of a plug's runs: {"state", "kind", "cycling", "flagged" (the
    last DUTY_DAYS days whose duty cycle was above its normal), "note" (a sentence, or
    None)}."""
    import time
    now = int(time.time()) if now is None else now
    runs, open_run, state = sources.plug_runs(node)
    th = sources.learned(node)["thresholds"]
    flagged = []
    if th.get("cycling"):
        days = duty(store, node, runs, tz, now)
        flagged = days["flagged"] if days else []
    note = None
    if flagged:
        note = ("%s ran more than its normal on %s: a door left open, a failing seal or a "
                "tired compressor shows there first" % (node, ", ".join(flagged[-3:])))
    return {"state": state, "kind": th.get("kind"), "cycling": bool(th.get("cycling")),
            "flagged": flagged, "note": note}


HEAD = ["start", "end", "duration", "kWh", "cost", "peak W"]


def text(answer):
    """`wattlog runs`'s output: per plug what was learned, its runs, its weeks, its duty."""
    out = []
    for plug in answer["plugs"]:
        out.append(plug["said"])
        if plug["state"] in ("running", "paused") and plug["open"]:
            out.append("  %s since %s" % (plug["state"], when(plug["open"]["start"],
                                                                _zone(answer["timezone"]))))
        rows = [HEAD] + plug["cells"]
        if len(rows) == 1:
            out.append("  no runs%s" % (" in that range" if answer.get("since") else " yet"))
        else:
            widths = [max(len(r[i]) for r in rows) for i in range(len(HEAD))]
            for r in rows:
                out.append("  " + "  ".join(c.rjust(w) if i >= 3 else c.ljust(w)
                                            for i, (c, w) in enumerate(zip(r, widths))).rstrip())
            total = sum(r["kwh"] or 0 for r in plug["runs"])
            costs = [r["cost"] for r in plug["runs"] if r["cost"] is not None]
            out.append("  %d runs, %.3f kWh%s" % (len(plug["runs"]), total, ", %.2f %s" % (
                sum(costs), plug["runs"][0]["currency"]) if costs else ""))
        if plug["duty"] and plug["duty"]["flagged"]:
            out.append("  duty cycle above its normal on %s" % ", ".join(plug["duty"]["flagged"]))
        out.append("")
    return "\n".join(out).rstrip()


def report(sources, store, tz="UTC", since=None, until=None, now=None, node=None):
    """The answer for every plug `sources` knows (or the one `node`). sources: the live part
    (part.Runs) or the files (records.Saved) - both have nodes(),
    plug_runs(node) and learned(node)."""
    import time
    now = int(time.time()) if now is None else now
    nodes = [node] if node is not None else sources.nodes()
    plugs = []
    for n in nodes:
        runs, open_run, state = sources.plug_runs(n)
        plugs.append(plug_report(n, runs, open_run, state, sources.learned(n), store, tz,
                                 since, until, now))
    return {"timezone": tz, "since": since, "until": until, "plugs": plugs}
