"""migrate.py - how fast `wattlog migrate` copies a Pi's history into PostgreSQL.

A data directory of --plugs plugs x --days days of 10 s slots, all four channels, with the
gaps real data has (runs where a plug was away, single readings not measured), written as the
collector writes it (tools/lib/history.py), and a private PostgreSQL (Debian's, on a loopback
port: tools/lib/pgserver.py). Timed, in this process, through store/migrate.py as the verb runs
it:
1. the first copy (the database empty: each chunk COPYed straight into wl_readings): readings/s
   (a reading: a plug's slot, one row, its four channels side by side) and values/s (channel
   values), then the summaries brought up;
2. a run again: nothing to copy (how long it takes to find that out);
3. the same history once more over what the database holds (the marks removed: the path a
   plug already in the database takes, each chunk read back and compared, nothing written).
The database's size after the copy is printed beside the .dat files' size.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "lib"))

from history import write_history  # noqa: E402
from pgserver import PgServer  # noqa: E402
from wattlog.store.migrate import Source, Target, migrate  # noqa: E402

START = 1767225600  # 2026-01-01T00:00Z


def timed_run(data, pg):
    source, target = Source(data), Target(pg.dsn, pg.password)
    try:
        t0 = time.monotonic()
        done = migrate(source, target)
        return done, time.monotonic() - t0
    finally:
        source.close()
        target.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plugs", type=int, default=20)
    p.add_argument("--days", type=int, default=30)
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="wattlog-bench-migrate-")
    pg = None
    try:
        data = os.path.join(work, "data")
        t0 = time.monotonic()
        values = write_history(data, ["plug-%02d" % i for i in range(args.plugs)], START,
                               args.days * 8640, gaps=True)
        dat_bytes = sum(os.path.getsize(os.path.join(data, "phpfina", n))
                        for n in os.listdir(os.path.join(data, "phpfina")) if n.endswith(".dat"))
        print("%d plugs x %d days of 10 s slots: %d values, %.0f MB of .dat, written in %.0f s"
              % (args.plugs, args.days, values, dat_bytes / 1e6, time.monotonic() - t0),
              flush=True)
        pg = PgServer().start()
        done, _ = timed_run(data, pg)
        print("first copy: %d readings (%d values) in %.1f s: %.0f readings/s, %.0f values/s; "
              "summaries brought up in %.1f s" % (done.rows, done.values, done.copy_s,
                                                  done.rows / done.copy_s,
                                                  done.values / done.copy_s, done.summaries_s),
              flush=True)
        import psycopg
        with psycopg.connect(pg.dsn, password=pg.password, autocommit=True) as c:
            size = c.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        print("database: %.0f MB (the .dat files: %.0f MB)" % (size / 1e6, dat_bytes / 1e6))
        again, wall_s = timed_run(data, pg)
        print("a run again: %d slots to copy, done in %.2f s" % (again.slots, wall_s), flush=True)
        with psycopg.connect(pg.dsn, password=pg.password, autocommit=True) as c:
            c.execute("DELETE FROM wl_migrated")
        over, _ = timed_run(data, pg)
        print("compared again with what the database holds (read back, compared, nothing to "
              "write): %.0f slots/s" % (over.slots / over.copy_s))
    finally:
        if pg is not None:
            pg.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
