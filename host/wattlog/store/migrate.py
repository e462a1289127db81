"""migrate.py - a single Pi's whole history copied into the PostgreSQL store, exactly
(`wattlog migrate`): from the PHPFina engine (reader.py, phpfina.py, commit.json) into the
other one (postgres.py), so that a home install moves up to the cluster with its past.
(About 390 lines, one concern: one copy, its refusals and its resumption, which must agree with
each other.)

    source = Source("/var/lib/wattlog")        # checked and locked; Refused in words
    target = Target(dsn, password)             # reached, its tables made
    done = migrate(source, target, progress)   # progress(Step) as it goes
    source.close(); target.close()

What is copied, per plug (a node of the directory's active feeds):
  - every stored slot of its four channels, the very float32 (a NaN, PHPFina's "no reading",
    is NULL; a slot where no channel has a reading is no row);
  - its grid: the interval, and `first`/`top` as slots on the epoch's grid (a feed's
    start_time // interval + k), as the database's own commits number them;
  - its feed ids (emoncms's API users have them in their URLs), unless the database gave an
    id to another plug's feed already: that one gets a new id, and Done.moved says which;
  - its state (commit.json's entry: boot, acknowledged seq, losses), so its acks go on where
    they were; unless the database holds a newer one (the plug moved to the cluster before
    its history did): that one is kept, and Done.notes says so. Its energy total goes on by
    itself: the clock answer's comes from the last stored energy slot (writer.last_energy);
then the summaries are brought up (flush_summaries), so a year's chart reads summaries.

How:
  - the data directory is locked as the collector locks it (datalock.py) for the whole run: a
    collector writing it is refused, and none can start meanwhile;
  - every plug's grid and feed rows are made first, in one transaction: a plug whose interval
    differs from the database's refuses the run before anything is copied;
  - a plug is then copied CHUNK_SLOTS slots at a time, each chunk one transaction: the .dat
    files read with numpy, the slots that hold a reading laid out by numpy as one binary COPY
    (pgcopy.py) straight into wl_readings, and the plug's mark moved on: wl_migrated (node, source, upto),
    the next slot to copy (on the epoch's grid) from that source. Killed anywhere, a run
    again starts at that slot: nothing is stored twice (the key is (node_id, slot)) and
    nothing done is done again; a run after a whole one finds nothing to copy. The source is
    a fingerprint of the plug in the files (its grid, its first slots, commit.json's commit
    number): another Pi's plug of the same name, or these files after the collector wrote
    more, do not go by the mark but are compared from the start (below);
  - where the database holds slots of the chunk already (the cluster took the plug over
    before, a run stopped by a database error), they are read back (a binary COPY too) and
    must agree: where both hold a value it is the same value, else the run stops (Refused,
    naming the plug, channel and time) before that chunk is written; where one side has
    none, the value there is kept, and only the rows that change are written (an upsert).
    Written: the rows and values the database did not hold.
"""

import collections
import hashlib
import json
import os
import time

import numpy as np

from wattlog.complaints import Complaints
from wattlog.store import datalock, pgcopy
from wattlog.store.base import StoreError
from wattlog.store.commitfile import when
from wattlog.store.feeds import FILE as REGISTRY_FILE
from wattlog.store.phpfina import FeedError
from wattlog.store.postgres import (CHANNELS, COUNT_COMMIT, SCHEMA_KEY, UNITS, PgCommitter,
                                    StoreUnavailable)
from wattlog.store.reader import Reader

CHUNK_SLOTS = 1 << 16  # a transaction: 65,536 slots (7.6 days at 10 s), 3.3 MB to COPY
FINGERPRINT_SLOTS = 1024  # of each channel, with the grid and the commit number: the source
MARKS = ("CREATE TABLE IF NOT EXISTS wl_migrated (node text PRIMARY KEY, source text NOT NULL, "
         "upto integer NOT NULL)")

_STAGE = ("CREATE TEMP TABLE IF NOT EXISTS wl_migrate_stage (node_id integer, slot integer, "
          "%s) ON COMMIT DELETE ROWS" % ", ".join("%s real" % c for c in CHANNELS))

Step = collections.namedtuple("Step", "node plug plugs slots_done slots done total rows")
"""Progress: plug `node` (the plug-th of `plugs`), slots_done of its `slots` to copy; done of
all `total`; rows: the rows written so far."""

Done = collections.namedtuple("Done", "plugs rows values slots copy_s summaries_s moved notes")
"""A run: the plugs, rows (a plug's slot with any reading) and values (its channels' readings)
written, slots looked at, the seconds the copy and the summaries took, moved [(node,
channel, feed id in the files, its id in the database, why)], notes [sentences]."""


class Refused(Exception):
    """The run cannot go on; one sentence saying why and what to do (never a password).
    usage: the data directory given cannot be used (the command line's fault)."""

    def __init__(self, message, usage=False):
        super().__init__(message)
        self.usage = usage


Plug = collections.namedtuple("Plug", "node interval first top feeds ids state source")
"""A plug of the data directory: interval (s), first and top (its slots on the epoch's grid),
feeds {channel: phpfina.Feed} (those holding slots), ids {channel: feed id}, state (commit.json's
entry, or None), source (its fingerprint: _fingerprint())."""


class Source:
    """A data directory to copy from, checked, and locked while the run lasts."""

    def __init__(self, data_dir):
        self.data_dir = data_dir
        if not os.path.isdir(data_dir):
            raise Refused("%s is not a data directory (is the path right? --data DIR or the "
                          "config's data names another)" % data_dir, usage=True)
        if not os.path.exists(os.path.join(data_dir, REGISTRY_FILE)):
            raise Refused("%s is not a wattlog data directory: it has no %s (an emoncms "
                          "directory's feeds are not wattlog's to copy)"
                          % (data_dir, REGISTRY_FILE), usage=True)
        self._lock = _lock(data_dir)
        try:
            reader = Reader.open(data_dir)
            self.state = reader._commit_state(data_dir)
            self.plugs, self.notes = _plugs(reader, self.state.get("nodes", {}),
                                            self.state.get("commit", 0))
        except StoreError as e:
            self.close()
            raise Refused(str(e)) from None
        except BaseException:
            self.close()
            raise

    def close(self):
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


def _lock(data_dir):
    """The directory's lock (datalock.py), or None where this user may not take it (a
    read-only copy) and no process holds it; Refused while a collector writes there."""
    try:
        return datalock.lock(data_dir, "migrate")
    except datalock.Locked:
        pid = datalock.holder(data_dir) or "unknown"
    except OSError:  # may not write the lock file: nobody may hold it either
        pid = datalock.holder(data_dir)
        if pid is None:
            return None
    raise Refused("%s is being written by a wattlog collector (PID %s): stop it first "
                  "(systemctl stop wattlog), or what it writes during the copy is left "
                  "behind" % (data_dir, pid))


def _plugs(reader, states, commit):
    """([Plug], [notes]) of the directory's active feeds; commit: commit.json's number."""
    notes = []
    quarantined = [e for e in reader.entries(quarantined=True) if e.get("quarantined")]
    if quarantined:
        notes.append("%d quarantined feeds (%s) are not copied: their files could not be read"
                     % (len(quarantined), ", ".join(str(e["id"]) for e in quarantined[:6])))
    by_node = {}
    for entry in reader.entries():
        by_node.setdefault(entry["node"], []).append(entry)
    plugs = []
    for node, entries in by_node.items():
        try:
            feeds = {e["channel"]: reader.feed(e) for e in entries}
        except FeedError as e:
            raise Refused("%s; start the collector once (it quarantines a feed it cannot "
                          "read) and run this again" % e) from None
        intervals = sorted({f.interval for f in feeds.values()})
        if len(intervals) > 1:
            raise Refused("%s's feeds have different intervals (%s s): the database keeps one "
                          "grid a plug" % (node, ", ".join(map(str, intervals))))
        iv = intervals[0]
        held = {c: f for c, f in feeds.items() if f.npoints()}
        if not held:
            notes.append("%s has no stored slot: nothing of it is copied" % node)
            continue
        plugs.append(Plug(node, iv, min(f.start // iv for f in held.values()),
                          max(f.start // iv + f.npoints() - 1 for f in held.values()), held,
                          {e["channel"]: e["id"] for e in entries}, states.get(node),
                          _fingerprint(node, iv, held, commit)))
    return plugs, notes


def _fingerprint(node, interval, feeds, commit):
    """The plug as these files hold it, in a few bytes of text: its grid, each channel's first
    slots and the commit number (it moves on with every commit the collector makes)."""
    digest = hashlib.sha256(("%s %d %d" % (node, interval, commit)).encode())
    for channel, feed in sorted(feeds.items()):
        digest.update(("%s %d " % (channel, feed.start)).encode())
        digest.update(feed.read(0, FINGERPRINT_SLOTS).tobytes())
    return digest.hexdigest()[:32]


class Target:
    """The PostgreSQL store to copy into: reached, its tables made (postgres.py's own)."""

    def __init__(self, dsn, password):
        self.dsn = dsn
        self.committer = PgCommitter(dsn, password, Complaints())  # StoreUnavailable
        self.conn = self.committer.conn

    def close(self):
        self.committer.close()


def migrate(source, target, progress=None, chunk_slots=CHUNK_SLOTS):
    """Copy every plug of `source` into `target` (module docstring); a Done. Refused: the run
    stopped, what it copied stands (run it again to go on)."""
    import psycopg
    notes, moved = list(source.notes), []
    try:
        starts = _prepare(target.conn, source.plugs, moved)
        total = sum(max(p.top + 1 - starts[p.node][1], 0) for p in source.plugs)
        began, rows, values, done = time.monotonic(), 0, 0, 0
        for i, plug in enumerate(source.plugs):
            node_id, start = starts[plug.node]
            for lo in range(start, plug.top + 1, chunk_slots):
                hi = min(lo + chunk_slots, plug.top + 1)
                n, v = _copy_chunk(target.conn, plug, node_id, lo, hi)
                rows, values, done = rows + n, values + v, done + hi - lo
                if progress:
                    progress(Step(plug.node, i + 1, len(source.plugs), hi - start,
                                  plug.top + 1 - start, done, total, rows))
        copy_s = time.monotonic() - began
        for plug in source.plugs:
            note = _state(target.conn, plug, starts[plug.node][0])
            if note:
                notes.append(note)
        _last_commit(target.conn, source.state.get("time"))
        began = time.monotonic()
        target.committer.flush_summaries()
        summaries_s = time.monotonic() - began
    except psycopg.Error as e:
        raise Refused("the database %s failed during the copy (%s); what was copied stands: "
                      "run this again to go on" % (target.dsn, str(e).strip().splitlines()[0])) \
            from None
    except StoreUnavailable as e:
        raise Refused("%s; what was copied stands: run this again to go on" % e) from None
    return Done(len(source.plugs), rows, values, total, copy_s, summaries_s, moved, notes)


def _prepare(conn, plugs, moved):
    """Every plug's node row (its grid) and feed rows, in one transaction; {node: (node id,
    the first slot still to copy)}. Refused on an interval that differs from the database's."""
    starts, unnumbered = {}, []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_KEY,))  # as postgres.py
        conn.execute(MARKS)
        conn.execute("LOCK TABLE wl_nodes, wl_feeds IN SHARE ROW EXCLUSIVE MODE")
        taken = {fid for fid, in conn.execute("SELECT id FROM wl_feeds").fetchall()}
        for plug in plugs:
            node_id = _node_row(conn, plug)
            have = dict(conn.execute("SELECT channel, id FROM wl_feeds WHERE node_id = %s",
                                     (node_id,)).fetchall())
            for channel in CHANNELS:
                want = plug.ids.get(channel)
                if channel in have:
                    if want is not None and have[channel] != want:
                        moved.append((plug.node, channel, want, have[channel],
                                      "the database had the plug already"))
                elif want is not None and want not in taken:  # the files' id kept
                    conn.execute("INSERT INTO wl_feeds (id, node_id, channel, unit) VALUES "
                                 "(%s, %s, %s, %s)", (want, node_id, channel, UNITS[channel]))
                    taken.add(want)
                else:
                    unnumbered.append((plug.node, node_id, channel, want))
            mark = conn.execute("SELECT upto FROM wl_migrated WHERE node = %s AND source = %s",
                                (plug.node, plug.source)).fetchone()
            starts[plug.node] = (node_id, plug.first if mark is None else max(mark[0],
                                                                              plug.first))
        # the ids given by hand above are not to be handed out by the sequence
        conn.execute("SELECT setval('wl_feeds_id_seq', GREATEST((SELECT max(id) FROM "
                     "wl_feeds), (SELECT last_value FROM wl_feeds_id_seq)))")
        for node, node_id, channel, want in unnumbered:
            fid = conn.execute("INSERT INTO wl_feeds (node_id, channel, unit) VALUES (%s, %s, "
                               "%s) RETURNING id", (node_id, channel, UNITS[channel])).fetchone()[0]
            if want is not None:
                moved.append((node, channel, want, fid,
                              "the database had given that id to another feed"))
    return starts


def _node_row(conn, plug):
    """The plug's node id: its row made, or the database's row made to take in its slots."""
    row = conn.execute("SELECT id, interval, first FROM wl_nodes WHERE node = %s",
                       (plug.node,)).fetchone()
    if row is None:
        return conn.execute("INSERT INTO wl_nodes (node, interval, first, top) VALUES (%s, %s, "
                            "%s, %s) RETURNING id", (plug.node, plug.interval, plug.first,
                                                     plug.top)).fetchone()[0]
    node_id, interval, first = row
    if interval != plug.interval:
        raise Refused("%s is stored every %d s in the database and every %d s in the files: "
                      "one plug keeps one grid, so nothing was copied"
                      % (plug.node, interval, plug.interval))
    if plug.first < first:  # its summaries count from `first`: made anew
        conn.execute("DELETE FROM wl_summaries WHERE node_id = %s", (node_id,))
        conn.execute("DELETE FROM wl_summary_upto WHERE node_id = %s", (node_id,))
    conn.execute("UPDATE wl_nodes SET first = LEAST(first, %s), top = GREATEST(top, %s) WHERE "
                 "id = %s", (plug.first, plug.top, node_id))
    return node_id


def _block(plug, lo, hi):
    """float32 [channel, slot] of the plug's slots lo..hi (epoch grid), NaN where none."""
    block = np.full((len(CHANNELS), hi - lo), np.nan, dtype="<f4")
    for i, channel in enumerate(CHANNELS):
        feed = plug.feeds.get(channel)
        if feed is None:
            continue
        base = feed.start // feed.interval
        first = max(lo - base, 0)
        values = feed.read(first, hi - base)
        block[i, first + base - lo:first + base - lo + len(values)] = values
    return block


def _copy_chunk(conn, plug, node_id, lo, hi):
    """Slots lo..hi of one plug in one transaction, with the mark moved on to hi; (rows,
    values) written. Where the database holds none of those slots yet (a first run), COPYed
    straight into wl_readings; else compared with what it holds (Refused where it holds
    another value), and only the rows it lacks or that fill one of its NULLs written."""
    block = _block(plug, lo, hi)
    present = ~np.isnan(block)
    with conn.transaction():
        with conn.cursor() as cur:
            if not cur.execute("SELECT EXISTS (SELECT 1 FROM wl_readings WHERE node_id = %s AND "
                               "slot >= %s AND slot < %s)", (node_id, lo, hi)).fetchone()[0]:
                with cur.copy("COPY wl_readings FROM STDIN (FORMAT BINARY)") as copy:
                    copy.write(pgcopy.rows(node_id, lo, block))
                written = present
            else:
                held = pgcopy.held(cur, node_id, lo, hi)
                _agree(plug, lo, block, held)
                written = present & np.isnan(held)
                fills = written.any(axis=0)  # the rows to write, merged
                merged = np.where(fills, np.where(np.isnan(held), block, held), np.nan)
                cur.execute(_STAGE)
                with cur.copy("COPY wl_migrate_stage FROM STDIN (FORMAT BINARY)") as copy:
                    copy.write(pgcopy.rows(node_id, lo, merged.astype("<f4")))
                cur.execute("INSERT INTO wl_readings SELECT * FROM wl_migrate_stage ON CONFLICT "
                            "(node_id, slot) DO UPDATE SET " + ", ".join(
                                "%s = EXCLUDED.%s" % (c, c) for c in CHANNELS))
            # summaries above the slots written here are not right any more (postgres.py)
            cur.execute("UPDATE wl_summary_upto u SET upto = LEAST(u.upto, %s - n.first) FROM "
                        "wl_nodes n WHERE n.id = u.node_id AND u.node_id = %s", (lo, node_id))
            cur.execute("INSERT INTO wl_migrated VALUES (%s, %s, %s) ON CONFLICT (node) DO "
                        "UPDATE SET source = EXCLUDED.source, upto = EXCLUDED.upto",
                        (plug.node, plug.source, hi))
            cur.execute(COUNT_COMMIT)  # a cluster's sink looks again
    return int(np.count_nonzero(written.any(axis=0))), int(np.count_nonzero(written))


def _agree(plug, lo, block, held):
    """Refused if the files hold a value in a slot where the database holds another."""
    differ = ~np.isnan(block) & ~np.isnan(held) & (block != held)
    if not differ.any():
        return
    k = int(np.flatnonzero(differ.any(axis=0))[0])
    channel = int(np.flatnonzero(differ[:, k])[0])
    raise Refused("the database already holds other readings for %s (%s at %s: %s there, "
                  "%s in the files), so nothing of %s from there on was copied: is it another "
                  "plug of the same name, or another database?"
                  % (plug.node, CHANNELS[channel], when((lo + k) * plug.interval),
                     held[channel, k], block[channel, k], plug.node))


def _newer(mine, theirs):
    """Whether the files' state `mine` of a plug is newer than the database's `theirs`."""
    if theirs is None:
        return True
    if mine.get("boot") == theirs.get("boot") and mine.get("seq") != theirs.get("seq"):
        return mine.get("seq", 0) > theirs.get("seq", 0)
    return (mine.get("last_seen") or 0) > (theirs.get("last_seen") or 0)


def _state(conn, plug, node_id):
    """The plug's state into its node row, unless the database's is newer (a note then)."""
    if plug.state is None:
        return None
    with conn.transaction():
        theirs = conn.execute("SELECT state FROM wl_nodes WHERE id = %s FOR UPDATE",
                              (node_id,)).fetchone()[0]
        if theirs == plug.state:
            return None
        if _newer(plug.state, theirs):
            conn.execute("UPDATE wl_nodes SET state = %s WHERE id = %s",
                         (json.dumps(plug.state, sort_keys=True), node_id))
            return None
    return ("%s: the database's state of it is newer than the files' (acknowledged up to seq "
            "%s of boot %08x there): kept" % (plug.node, theirs.get("seq"),
                                                theirs.get("boot", 0)))


def _last_commit(conn, t):
    """wl_meta's last_commit not older than the files' last commit (/api/health says it)."""
    if t:
        with conn.transaction():
            conn.execute("INSERT INTO wl_meta VALUES ('last_commit', %s) ON CONFLICT (key) DO "
                         "UPDATE SET value = GREATEST(wl_meta.value, EXCLUDED.value)", (t,))
