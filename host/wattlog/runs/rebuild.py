"""rebuild.py - every plug's runs found again from its stored readings, from its first slot,
as the collector would have found them live (detect.py decides from the readings alone):
`wattlog rebuild` runs it after the summaries, with the collector stopped.

    rebuild(store, data_dir, options, tariff, tz, progress)   # {node: runs found}

The runs log and the detector's state of each plug are replaced whole (records.py); the
record of the events published is kept, so the collector publishes nothing again.
"""

from wattlog.runs.detect import Detector
from wattlog.runs.measure import measure
from wattlog.runs.part import finished_run
from wattlog.runs.records import Records
from wattlog.store.phpfina import FeedError

CHUNK_SLOTS = 8640 * 7  # a week at 10 s read at a time


def rebuild(store, data_dir, options=None, tariff=None, tz="UTC", progress=None):
    plugs = (options or {}).get("plugs", {})
    records = Records(data_dir)
    entries = [e for e in store.entries() if e["channel"] == "power"]
    found = {}
    for done, entry in enumerate(entries):
        node = entry["node"]
        try:
            grid = store.feed(entry)
            n = grid.npoints()
        except (OSError, FeedError):
            continue
        det = Detector(grid.interval, plugs.get(node))
        det.cursor = grid.start
        runs = []
        for lo in range(0, n, CHUNK_SLOTS):
            values = store.read(entry, grid, lo, min(lo + CHUNK_SLOTS, n))
            for what in det.feed(grid.time(lo), values):
                if what[0] == "finished":
                    run = what[1]
                    runs.append(finished_run(run, measure(store, node, run["start"], run["end"],
                                                          tariff, tz), tariff))
        records.replace_runs(node, runs)
        records.save_state(node, det.to_json())
        found[node] = len(runs)
        if progress:
            progress(done + 1, len(entries))
    return found
