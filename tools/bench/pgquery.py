"""pgquery.py - how fast the PostgreSQL store answers a year of one plug's 10 s readings at any
zoom (issue 25: the year in 1000 points within 20 ms), beside the PHPFina files holding the
same readings.

The year is written as the collector writes it (tools/lib/history.py: every channel, a day's
shape with noise and gaps), copied into a private PostgreSQL by `wattlog migrate`'s code
(store/migrate.py; it brings the summaries up at its end, as the collector does every
summary_interval), then both engines answer through the same interface call the HTTP API
makes (Interface.series: query.Engine over the engine's feed and summaries). Per question:
ms warm, the median of --runs runs after one untimed. What makes the year fast is the
summaries: wl_summaries holds per node, level (64 .. 32768 slots) and bucket the count, mean,
min and max of each channel, so the year in ~1000 buckets reads about 6,000 rows of one level
by its primary key instead of 3.15 million readings.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "lib"))

from history import write_history  # noqa: E402
from pgserver import PgServer  # noqa: E402
from wattlog.store import open_reader  # noqa: E402
from wattlog.store.migrate import Source, Target, migrate  # noqa: E402
from wattlog.store.postgres import PgReader  # noqa: E402

START = 1735689600  # 2025-01-01T00:00Z
YEAR_SLOTS = 365 * 8640
QUESTIONS = (("the year in ~1000 points", 0, YEAR_SLOTS, 1000),
             ("a month in ~1000", 200 * 8640, 230 * 8640, 1000),
             ("a day, raw (8640)", 300 * 8640, 301 * 8640, 10000))


def ms(fn):
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def timed(fn, runs):
    """The median ms of `runs` runs, after one untimed (warm)."""
    fn()
    return statistics.median(ms(fn) for _ in range(runs))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=30)
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="wattlog-bench-pgquery-")
    try:
        data = os.path.join(work, "data")
        t0 = time.monotonic()
        write_history(data, ["plug-00"], START, YEAR_SLOTS, gaps=True)
        print("a year of one plug's 10 s slots written in %.0f s" % (time.monotonic() - t0),
              flush=True)
        with PgServer() as pg:
            ask(pg, data, args.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ask(pg, data, runs):
    source, target = Source(data), Target(pg.dsn, pg.password)
    try:
        done = migrate(source, target)
    finally:
        source.close()
        target.close()
    print("copied into PostgreSQL: %d readings in %.1f s, summaries in %.1f s"
          % (done.rows, done.copy_s, done.summaries_s), flush=True)
    engines = {"PostgreSQL": PgReader(pg.dsn, pg.password), "PHPFina": open_reader(data)}
    print("%-26s %14s %14s" % ("question (power)", "PostgreSQL ms", "PHPFina ms"))
    for name, a, b, points in QUESTIONS:
        taken = []
        for engine in engines.values():
            entry = engine.lookup("plug-00/power")
            feed = engine.feed(entry)
            taken.append(timed(lambda: engine.series(entry, feed, START + 10 * a,
                                                     START + 10 * b, points), runs))
        print("%-26s %14.2f %14.2f" % (name, taken[0], taken[1]), flush=True)
    readings, summaries = engines["PostgreSQL"].conns.query(
        "SELECT pg_total_relation_size('wl_readings'), "
        "pg_total_relation_size('wl_summaries')")[0]
    print("stored: wl_readings %.1f bytes a reading (with its key's index), wl_summaries "
          "%.1f" % (readings / done.rows, summaries / done.rows))


if __name__ == "__main__":
    main()
