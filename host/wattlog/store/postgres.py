"""postgres.py - the storage interface on PostgreSQL (15, Debian's): the cluster's shared store,
the second engine beside the PHPFina files. Everything that reads the store (the HTTP API, the
dashboard, emoncms's API, energy, metrics, the sink, the CLI) reads it through the same calls
(store/__init__.py), and tests/host/test_store_interface.py runs on both.
(About 580 lines: one engine, as phpfina.py + commit.py + reader.py are the other: the reader, the
committer with its leases, and the summaries share one connection and one schema, which splitting
would spread over modules that must change together.)

    store = PgStore(dsn, password, complaints)      # the collector's: readings in, acks out
    store.recover(acks); store.take(topic, payload); done = store.commit()
    reader = PgReader(dsn, password)                # what the database holds, read

Tables (schema made here, idempotently, by the first store that connects):
  wl_nodes     id, node (unique), interval (s), first and top (the first and the last slot
               written, as slot numbers on the epoch's grid: unix s / interval), state (jsonb:
               commit.json's entry for the node, nodes.py: boot, acked seq, losses). The
               interface's grid starts at `first`: an older reading that arrives late (the
               cluster delivers each partition in order, but a handover can bring an earlier
               batch after a later one) moves it back, as PHPFina's files never can
  wl_feeds     id (the feed ids the API and emoncms show), node_id, channel, unit
  wl_readings  node_id, slot (on the epoch's grid), power, voltage, current, energy (real:
               float32, as a PHPFina
               .dat holds them; NULL where a channel has no reading); key (node_id, slot).
               One row a reading: a plug's four channels share its grid. A row written again
               (a batch redelivered, or resent with more records) is the same row: storing is
               idempotent, and new slots are simply new rows
  wl_summaries node_id, level (rollup.LEVELS: 64 .. 32768 slots), k (bucket k from the
               node's first slot), and per channel count, mean, min, max: what query.Engine
               reads for a
               long range (a year at 10 s in 1000 points reads about 6,000 rows of level 512)
  wl_summary_upto  node_id, upto: the slots below it (counted from the first) are
               summarised (a commit that writes below it moves it back down, one that moves
               the first slot back drops them all); derived data, brought up by
               flush_summaries(),
               never on the commit's path, so a query past it reads the readings themselves
  wl_commits   a sequence: each commit's number, carried by its acks (commitfile.py's role)
  wl_meta      last_commit: when the last commit was made (unix s); commits: how many
               commits (and migrated chunks) have changed the readings, counted in their own
               transactions, so it changes when their rows show, and is what committed() says
               (a sequence cannot be: nextval shows at once, before its transaction's rows,
               and a reader that took that number without the rows would never look again)
  wl_docs      key, doc (jsonb): a small document a part keeps in the database rather than in
               one collector's directory, so that another collector can take its duty over
               (the InfluxDB sink's cursor in a cluster: "influx")

A commit is one transaction: readings (COPY into a staging table, then one INSERT ... ON
CONFLICT), the nodes' grid and state (the states that changed in one UPDATE, not a statement
a plug); only after it returns does writer.py publish the acks.
A database that cannot be reached fails the commit with StoreUnavailable (an OSError): the
readings stay pending and the commit is tried again, as a full disk is for the files.
Connections: the writer's own; each reading thread (the HTTP side's) one of its own.
"""

import json
import threading
import time

import numpy as np

from wattlog.store.base import Interface, StoreError, node_row
from wattlog.store.ingest import CHANNEL_INDEX, MAX_AGE_S
from wattlog.store.phpfina import FeedError, Grid
from wattlog.store.rollup import ENTRY, LEVELS
from wattlog.store.writer import Writer

CHANNELS = tuple(CHANNEL_INDEX)  # power, voltage, current, energy: wl_readings' columns
UNITS = {"power": "W", "voltage": "V", "current": "A", "energy": "kWh"}

SCHEMA = """
CREATE TABLE IF NOT EXISTS wl_nodes (
    id serial PRIMARY KEY, node text NOT NULL UNIQUE, interval integer NOT NULL,
    first integer NOT NULL, top integer NOT NULL, state jsonb);
CREATE TABLE IF NOT EXISTS wl_feeds (
    id serial PRIMARY KEY, node_id integer NOT NULL REFERENCES wl_nodes (id),
    channel text NOT NULL, unit text NOT NULL, UNIQUE (node_id, channel));
CREATE TABLE IF NOT EXISTS wl_readings (
    node_id integer NOT NULL, slot integer NOT NULL, power real, voltage real, current real,
    energy real, PRIMARY KEY (node_id, slot));
CREATE TABLE IF NOT EXISTS wl_summaries (
    node_id integer NOT NULL, level integer NOT NULL, k integer NOT NULL,
    %s, PRIMARY KEY (node_id, level, k));
CREATE TABLE IF NOT EXISTS wl_summary_upto (
    node_id integer PRIMARY KEY, upto integer NOT NULL);
CREATE SEQUENCE IF NOT EXISTS wl_commits;
CREATE TABLE IF NOT EXISTS wl_meta (key text PRIMARY KEY, value bigint NOT NULL);
CREATE TABLE IF NOT EXISTS wl_docs (key text PRIMARY KEY, doc jsonb NOT NULL);
""" % ", ".join("%s_n integer, %s_mean real, %s_min real, %s_max real" % (c, c, c, c)
                for c in CHANNELS)


class StoreUnavailable(OSError):
    """The database did not take a commit (down, unreachable, refusing): nothing of it stands."""


class LeaseLost(StoreUnavailable):
    """The session that held this collector's leases is gone (killed, timed out while the
    collector was paused, the server restarted): others may own its partitions now."""


MEMBERS_KEY = 0x776C6D00     # pg_advisory_lock(MEMBERS_KEY, i): collector i is alive
PARTITIONS_KEY = 0x776C7000  # pg_advisory_lock(PARTITIONS_KEY, p): partition p is owned
MAX_MEMBERS = 1024
COUNT_COMMIT = ("INSERT INTO wl_meta VALUES ('commits', 1) ON CONFLICT (key) DO UPDATE SET "
                "value = wl_meta.value + 1")  # a transaction's last statement: held briefly
SCHEMA_KEY = 0x776C7300      # pg_advisory_xact_lock: one collector makes the tables at a time
DUTIES_KEY = 0x776C6400      # pg_advisory_lock(DUTIES_KEY, d): duty d is done by its holder
SINK_DUTY = 1                # the InfluxDB sink: one collector of a cluster sends


def _connect(dsn, password, autocommit, name="wattlog"):
    import psycopg
    try:  # the name is what pg_stat_activity and pg_locks' sessions show
        return psycopg.connect(dsn, password=password, autocommit=autocommit, connect_timeout=10,
                               application_name=name)
    except psycopg.Error as e:
        raise StoreUnavailable("cannot reach the database %s (%s)"
                               % (dsn, str(e).strip().splitlines()[0])) from None


class Connections:
    """One connection per thread (psycopg's connections are not for two threads at once),
    made when first asked for, made again after the database was away."""

    def __init__(self, dsn, password):
        self.dsn, self.password = dsn, password
        self._local = threading.local()

    def get(self):
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = self._local.conn = _connect(self.dsn, self.password, autocommit=True)
        return conn

    def query(self, sql, args=()):
        """The rows of one query, in a connection of this thread's (made again once when the
        server closed it: idle_session_timeout, a restart); StoreUnavailable."""
        import psycopg
        for attempt in (1, 2):
            try:
                return self.get().execute(sql, args).fetchall()
            except psycopg.OperationalError as e:
                self._local.conn = None
                if attempt == 2:
                    raise StoreUnavailable("the database %s did not answer (%s)"
                                           % (self.dsn, str(e).strip().splitlines()[0])) from None


class PgFeed(Grid):
    """One channel of one plug as a fixed grid (the interface's feed): slot k is the time
    start + k * interval; npoints() the committed slots of the plug."""

    def __init__(self, conns, entry, node_id, first, top, interval):
        self.conns = conns
        self.id = entry["id"]
        self.channel = entry["channel"]
        self.node_id = node_id
        self.base = first  # the grid's slot 0, as a slot number on the epoch's grid
        self.start, self.interval = first * interval, interval
        self._npoints = top - first + 1

    def npoints(self):
        return self._npoints

    def read(self, first, stop):
        first = max(first, 0)
        out = np.full(max(stop - first, 0), np.nan, dtype="<f4")
        if stop <= first:
            return out
        rows = self.conns.query(
            "SELECT slot, %s FROM wl_readings WHERE node_id = %%s AND slot >= %%s AND slot < %%s"
            " AND %s IS NOT NULL" % (self.channel, self.channel),
            (self.node_id, self.base + first, self.base + stop))
        if rows:
            got = np.array(rows, dtype=np.float64)
            out[got[:, 0].astype(np.int64) - self.base - first] = got[:, 1]
        return out

    def last_value(self, max_slots=1 << 18, before=None):
        stop = self.npoints() if before is None else min(before, self.npoints())
        rows = self.conns.query(
            "SELECT slot, %s FROM wl_readings WHERE node_id = %%s AND slot < %%s AND slot >= %%s"
            " AND %s IS NOT NULL ORDER BY slot DESC LIMIT 1" % (self.channel, self.channel),
            (self.node_id, self.base + stop, self.base + max(stop - max_slots, 0)))
        return (int(rows[0][0]) - self.base, float(rows[0][1])) if rows else None


class PgSummaries:
    """rollup.Summaries' two reading calls over wl_summaries (query.Engine's `summaries`)."""

    def __init__(self, conns):
        self.conns = conns

    def upto(self, feed):
        rows = self.conns.query("SELECT upto FROM wl_summary_upto WHERE node_id = %s",
                                (feed.node_id,))
        return min(rows[0][0], feed.npoints()) if rows else 0

    def read(self, fid, level, first, stop):
        out = np.zeros(max(stop - first, 0), dtype=ENTRY)
        out["mean"] = out["min"] = out["max"] = np.nan
        if stop <= first:
            return out
        c = self._channel(fid)
        rows = self.conns.query(
            "SELECT s.k, s.{0}_n, s.{0}_mean, s.{0}_min, s.{0}_max FROM wl_summaries s "
            "JOIN wl_feeds f ON f.node_id = s.node_id WHERE f.id = %s AND s.level = %s "
            "AND s.k >= %s AND s.k < %s AND s.{0}_n > 0".format(c[1]), (fid, level, first, stop))
        for k, n, mean, lo, hi in rows:
            out[k - first] = (mean, lo, hi, n)
        return out

    def _channel(self, fid):
        rows = self.conns.query("SELECT node_id, channel FROM wl_feeds WHERE id = %s", (fid,))
        if not rows or rows[0][1] not in CHANNELS:
            raise StoreError("feed %d is not in the database" % fid)
        return rows[0]


class PgReader(Interface):
    """What the database holds, read through the storage interface."""

    def __init__(self, dsn, password=None, conns=None):
        self.dsn = dsn
        self.data_dir = dsn  # where the data lives, as /api/health says it (no password)
        self.conns = conns or Connections(dsn, password)
        self.summaries = PgSummaries(self.conns)
        self.stale = lambda fid: None  # wl_summary_upto says it: summaries below it are right

    def entries(self, quarantined=False):
        return [{"id": fid, "node": node, "channel": channel, "unit": unit, "interval": iv}
                for fid, node, channel, unit, iv in self.conns.query(
                    "SELECT f.id, n.node, f.channel, f.unit, n.interval FROM wl_feeds f "
                    "JOIN wl_nodes n ON n.id = f.node_id ORDER BY f.id")]

    def lookup(self, name):
        node, slash, channel = name.partition("/")
        if slash:
            where, args = "n.node = %s AND f.channel = %s", (node, channel)
        elif name.isdigit() and len(name) <= 9:
            where, args = "f.id = %s", (int(name),)
        else:
            return None
        rows = self.conns.query("SELECT f.id, n.node, f.channel, f.unit, n.interval FROM "
                                "wl_feeds f JOIN wl_nodes n ON n.id = f.node_id WHERE " + where,
                                args)
        if not rows:
            return None
        fid, node, channel, unit, iv = rows[0]
        return {"id": fid, "node": node, "channel": channel, "unit": unit, "interval": iv}

    def feed(self, entry):
        rows = self.conns.query("SELECT n.id, n.first, n.top, n.interval FROM wl_feeds f "
                                "JOIN wl_nodes n ON n.id = f.node_id WHERE f.id = %s",
                                (entry["id"],))
        if not rows:
            raise FeedError("feed %d" % entry["id"], "is not in the database")
        return PgFeed(self.conns, entry, *rows[0])

    def nodes(self):
        return {node: node_row(node, state or {}) for node, state in self.conns.query(
            "SELECT node, state FROM wl_nodes ORDER BY node")}

    def committed(self):
        """(the commits so far, {feed id: its plug's slots}), in one statement, so one
        snapshot: the count (wl_meta's commits) shows with the rows it counts. Every row is
        committed, so a feed's length is its plug's grid, first to top (PgFeed.npoints())."""
        rows = self.conns.query("SELECT (SELECT COALESCE(max(value), 0) FROM wl_meta WHERE key "
                                "= 'commits'), f.id, n.top - n.first + 1 FROM wl_nodes n RIGHT "
                                "JOIN wl_feeds f ON f.node_id = n.id")
        generation = rows[0][0] if rows else 0
        return generation, {fid: n for _, fid, n in rows if fid is not None}

    def stored_status(self):
        """data_dir (the database, without a password), last_commit (unix s) and the
        database's size (its disk is the server's business)."""
        rows = self.conns.query("SELECT pg_database_size(current_database()), (SELECT value "
                                "FROM wl_meta WHERE key = 'last_commit')")
        return {"data_dir": self.dsn, "last_commit": rows[0][1],
                "database_bytes": int(rows[0][0]), "disk_free_bytes": None}

    def status(self):
        return self.stored_status()


class PgDocument:
    """A JSON document kept in wl_docs under `key`, read and replaced whole (the InfluxDB
    sink's cursor in a cluster: whichever collector sends goes on from it)."""

    def __init__(self, conns, key):
        self.conns, self.key = conns, key

    def __str__(self):
        return "the database's wl_docs %r" % self.key

    def read(self):
        """The document, or None when there is none yet; StoreUnavailable."""
        rows = self.conns.query("SELECT doc FROM wl_docs WHERE key = %s", (self.key,))
        return rows[0][0] if rows else None

    def write(self, doc):
        self.conns.query("INSERT INTO wl_docs VALUES (%s, %s::jsonb) ON CONFLICT (key) DO "
                         "UPDATE SET doc = EXCLUDED.doc RETURNING 1", (self.key, json.dumps(doc)))


class PgCommitter:
    """The commit protocol on PostgreSQL (writer.py's committer): one transaction a commit."""

    def __init__(self, dsn, password, complaints, clock=time.time, name="wattlog"):
        self.dsn, self.password, self.name = dsn, password, name
        self.complain = complaints
        self.clock = clock
        self._conn = None
        self.fenced = False  # leases on this connection (the cluster): never made again
        import psycopg
        try:
            with self.conn.transaction():  # one at a time: IF NOT EXISTS does not race safely
                self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_KEY,))
                self.conn.execute(SCHEMA)
        except psycopg.Error as e:
            raise StoreUnavailable("the database %s refused wattlog's tables (%s)"
                                   % (dsn, str(e).strip().splitlines()[0])) from None
        self.nodes = {}
        self.generation = 0
        self.commits = 0
        self.commit_s = 0.0
        self.recovered = False
        self._grid = {}   # node -> (id, interval): a plug's slot length never changes
        self._unknown = set()  # nodes the database did not hold at the last look (a plug's
                               # first batches: not a query each until the commit makes it)
        self._saved = {}  # node -> the state last written: only changes are written

    @property
    def conn(self):
        """The writer's connection, made again when the server closed it (a restart, its
        idle_session_timeout): a commit on a dead one fails; the next one reconnects."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            if self.fenced and self._conn is not None:
                raise LeaseLost("the database session holding this collector's leases is gone")
            self._conn = _connect(self.dsn, self.password, autocommit=False, name=self.name)
        return self._conn

    # -- leases (the cluster: cluster.py) ------------------------------------------------------
    # Session-level advisory locks on the writer's own connection: they die with it (the
    # collector killed, its session ended by idle_session_timeout while it was paused), and a
    # commit can only happen on the session that holds them, so a collector that lost its
    # partitions can write nothing: the database is the fence.

    def _one(self, sql, args=()):
        import psycopg
        try:
            row = self.conn.execute(sql, args).fetchone()
            self.conn.commit()
            return row[0]
        except psycopg.Error as e:
            if self.fenced:
                raise LeaseLost("the database session holding the leases failed (%s)"
                                % str(e).strip().splitlines()[0]) from None
            raise StoreUnavailable(str(e).strip().splitlines()[0]) from None

    def join(self, lease_s):
        """Become a member (fenced from now on); this collector's member number. The session
        ends (and its leases with it) when it is left idle for lease_s, or held in an open
        transaction that long: the server's timeouts, set on this session only, are what
        fence a paused collector out."""
        self.fenced = True
        ms = int(lease_s * 1000)
        self._one("SELECT set_config('idle_session_timeout', %s, false), set_config("
                  "'idle_in_transaction_session_timeout', %s, false)", (str(ms), str(ms)))
        for i in range(MAX_MEMBERS):
            if self._one("SELECT pg_try_advisory_lock(%s, %s)", (MEMBERS_KEY, i)):
                return i
        raise StoreUnavailable("%d collectors share this database already" % MAX_MEMBERS)

    def members(self):
        """How many collectors are alive (hold a member lock)."""
        return self._one("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND "
                         "classid = %s::oid AND granted", (MEMBERS_KEY,))

    def take_lease(self, partition):
        return self._one("SELECT pg_try_advisory_lock(%s, %s)", (PARTITIONS_KEY, partition))

    def owned_elsewhere(self):
        """The partitions some other session owns."""
        import psycopg
        try:
            rows = self.conn.execute(
                "SELECT objid::int FROM pg_locks WHERE locktype = 'advisory' AND classid = "
                "%s::oid AND granted AND pid <> pg_backend_pid()", (PARTITIONS_KEY,)).fetchall()
            self.conn.commit()
        except psycopg.Error as e:
            raise LeaseLost("the database session holding the leases failed (%s)"
                            % str(e).strip().splitlines()[0]) from None
        return {r for r, in rows}

    def release(self, partition):
        self._one("SELECT pg_advisory_unlock(%s, %s)", (PARTITIONS_KEY, partition))

    def take_duty(self, duty):
        """A duty one collector of the cluster does (SINK_DUTY): True when this session holds
        it now; it ends with the session, as the partitions' leases do."""
        return self._one("SELECT pg_try_advisory_lock(%s, %s)", (DUTIES_KEY, duty))

    def reset(self):
        """After LeaseLost: a fresh session at the next use (not fenced until join())."""
        self._conn, self.fenced = None, False

    def node_names(self):
        rows = self.conn.execute("SELECT node FROM wl_nodes").fetchall()
        self.conn.commit()
        return [node for node, in rows]

    def states(self, nodes):
        """The saved state of each of `nodes` (those the database has one for)."""
        rows = self.conn.execute("SELECT node, state FROM wl_nodes WHERE node = ANY(%s) AND "
                                 "state IS NOT NULL", (list(nodes),)).fetchall()
        self.conn.commit()
        self._saved.update({node: json.dumps(state, sort_keys=True) for node, state in rows})
        return dict(rows)

    def interval(self, node):
        """A known node's slot length, or None (unknown, or the database away: the batch's
        own then; the commit maps it onto the node's grid)."""
        import psycopg
        grid = self._grid.get(node)
        if grid is None and node not in self._unknown:
            try:
                grid = self._load_grid(node)
                self.conn.rollback()
            except (psycopg.Error, StoreUnavailable):
                return None
            if grid is None:  # asked again after the next commit, which may make it
                self._unknown.add(node)
        return grid[1] if grid else None

    def recover(self, acks):
        """The nodes' state as the database holds it (a transaction either happened or did
        not: nothing to cut); what the plugs still hold is sent again."""
        rows = self.conn.execute("SELECT node, state FROM wl_nodes WHERE state IS NOT NULL"
                                 ).fetchall()
        self.generation = self.conn.execute("SELECT last_value FROM wl_commits").fetchone()[0]
        self.conn.rollback()
        self.nodes = {node: state for node, state in rows}
        self._saved = {node: json.dumps(state, sort_keys=True) for node, state in rows}
        self.recovered = True

    def commit(self, pending, intervals, nodes=None):
        """{(node, channel): (unix times, values)} and the nodes' state, in one transaction;
        (feeds, points, bytes). StoreUnavailable: nothing of it was stored."""
        import psycopg
        started = time.monotonic()
        try:
            with self.conn.transaction():
                rows, feeds = self._rows(pending, intervals)
                with self.conn.cursor() as cur:
                    cur.execute("CREATE TEMP TABLE IF NOT EXISTS wl_stage (node_id integer, "
                                "slot integer, power real, voltage real, current real, "
                                "energy real) ON COMMIT DELETE ROWS")
                    with cur.copy("COPY wl_stage FROM STDIN") as copy:
                        for row in rows:
                            copy.write_row(row)
                    cur.execute(
                        "INSERT INTO wl_readings SELECT DISTINCT ON (node_id, slot) * FROM "
                        "wl_stage ORDER BY node_id, slot ON CONFLICT (node_id, slot) DO UPDATE "
                        "SET " + ", ".join("%s = COALESCE(EXCLUDED.%s, wl_readings.%s)"
                                           % (c, c, c) for c in CHANNELS))
                    # the summaries below a rewritten slot are not right any more; all of
                    # them, where the first slot moved back (their buckets count from it)
                    cur.execute("INSERT INTO wl_summary_upto SELECT s.node_id, CASE WHEN "
                                "s.lo < n.first THEN 0 ELSE s.lo - n.first END FROM (SELECT "
                                "node_id, min(slot) AS lo FROM wl_stage GROUP BY node_id) s "
                                "JOIN wl_nodes n ON n.id = s.node_id ON CONFLICT (node_id) DO "
                                "UPDATE SET upto = LEAST(wl_summary_upto.upto, EXCLUDED.upto)")
                    cur.execute("DELETE FROM wl_summaries w USING (SELECT node_id, min(slot) "
                                "AS lo FROM wl_stage GROUP BY node_id) s, wl_nodes n WHERE "
                                "w.node_id = s.node_id AND n.id = s.node_id AND s.lo < n.first")
                    cur.execute("UPDATE wl_nodes n SET first = LEAST(n.first, s.lo), top = "
                                "GREATEST(n.top, s.hi) FROM (SELECT node_id, min(slot) AS lo, "
                                "max(slot) AS hi FROM wl_stage GROUP BY node_id) s WHERE n.id = "
                                "s.node_id")
                    changed = self._changed(nodes or {})
                    if changed:  # one statement for them all, not a round trip a plug
                        cur.execute("UPDATE wl_nodes n SET state = s.state FROM unnest("
                                    "%s::text[], %s::jsonb[]) AS s (node, state) WHERE n.node "
                                    "= s.node", (list(changed), list(changed.values())))
                    generation = cur.execute("SELECT nextval('wl_commits')").fetchone()[0]
                    cur.execute("INSERT INTO wl_meta VALUES ('last_commit', %s) ON CONFLICT "
                                "(key) DO UPDATE SET value = EXCLUDED.value",
                                (int(self.clock()),))
                    cur.execute(COUNT_COMMIT)
        except psycopg.Error as e:
            kind = LeaseLost if self.fenced and (self._conn.closed or self._conn.broken) \
                else StoreUnavailable
            raise kind("the database %s did not take the commit (%s)"
                       % (self.dsn, str(e).strip().splitlines()[0])) from None
        self._saved.update(changed)
        self._unknown.clear()
        self.nodes = dict(nodes) if nodes is not None else self.nodes
        self.generation = generation
        self.commits += 1
        self.commit_s += time.monotonic() - started
        return feeds, len(rows), 24 * len(rows)

    def _changed(self, nodes):
        out = {}
        for node, state in nodes.items():
            text = json.dumps(state, sort_keys=True)
            if self._saved.get(node) != text:
                out[node] = text
        return out

    def _rows(self, pending, intervals):
        """(rows for wl_stage, feeds written): a row a slot of each plug, its channels side by
        side, the slot numbered on the epoch's grid."""
        by_node = {}
        for (node, channel), (times, values) in pending.items():
            by_node.setdefault(node, {})[channel] = (np.asarray(times, dtype=np.int64),
                                                     np.asarray(values, dtype=np.float64))
        rows, feeds = [], 0
        for node, channels in sorted(by_node.items()):
            times = next(iter(channels.values()))[0]
            node_id, iv = self._grid_for(node, int(times.min()), intervals[node])
            feeds += len(channels)
            # the channels side by side as the float32 the columns hold (NaN: no reading)
            table = np.full((len(times), len(CHANNELS)), np.nan, dtype=np.float32)
            for i, c in enumerate(CHANNELS):
                if c in channels:
                    table[:, i] = channels[c][1]
            for slot, values in zip((times // iv).tolist(), table.astype(np.float64).tolist()):
                rows.append([node_id, slot] + [None if x != x else x for x in values])
        return rows, feeds

    def _grid_for(self, node, first_t, interval):
        """(node id, interval): the node's row, made with its four feeds the first time."""
        grid = self._grid.get(node) or self._load_grid(node)
        if grid is None:
            slot = first_t // interval
            node_id = self.conn.execute(
                "INSERT INTO wl_nodes (node, interval, first, top) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (node) DO UPDATE SET node = EXCLUDED.node RETURNING id",
                (node, interval, slot, slot)).fetchone()[0]
            for c in CHANNELS:
                self.conn.execute("INSERT INTO wl_feeds (node_id, channel, unit) VALUES "
                                  "(%s, %s, %s) ON CONFLICT DO NOTHING", (node_id, c, UNITS[c]))
            grid = self._load_grid(node)
        return grid

    def _load_grid(self, node):
        rows = self.conn.execute("SELECT id, interval FROM wl_nodes WHERE node = %s",
                                 (node,)).fetchall()
        if rows:
            self._grid[node] = tuple(rows[0])
        return self._grid.get(node)

    def flush_summaries(self, progress=None):
        """Every node's summaries up to its committed slots, from where wl_summary_upto says
        they stopped being right: level 64 from the readings, each level above from the one
        below. Returns the rows written."""
        import psycopg
        written = 0
        try:
            with self.conn.transaction():
                todo = self.conn.execute(
                    "SELECT n.id, COALESCE(u.upto, 0), n.first, n.top FROM wl_nodes n LEFT JOIN "
                    "wl_summary_upto u ON u.node_id = n.id WHERE COALESCE(u.upto, 0) < "
                    "n.top - n.first + 1").fetchall()
                for i, (node_id, upto, first, top) in enumerate(todo):
                    written += self._summarise(node_id, upto, first, top - first + 1)
                    if progress:
                        progress(i + 1, len(todo))
        except psycopg.Error as e:
            raise StoreUnavailable("the database %s did not take the summaries (%s)"
                                   % (self.dsn, str(e).strip().splitlines()[0])) from None
        return written

    def _summarise(self, node_id, upto, base, npoints):
        """One node's summaries from its slot `upto` (counted from its first, `base`) on."""
        cols = ", ".join("%s_n, %s_mean, %s_min, %s_max" % (c, c, c, c) for c in CHANNELS)
        update = ", ".join("%s = EXCLUDED.%s" % (x, x) for x in cols.split(", "))
        first = upto // LEVELS[0] * LEVELS[0]
        raw = ", ".join("count(%s), avg(%s), min(%s), max(%s)" % (c, c, c, c) for c in CHANNELS)
        n = self.conn.execute(
            "INSERT INTO wl_summaries (node_id, level, k, %s) SELECT node_id, %d, (slot - %%s) "
            "/ %d, %s FROM wl_readings WHERE node_id = %%s AND slot >= %%s GROUP BY 1, 3 "
            "ON CONFLICT (node_id, level, k) DO UPDATE SET %s"
            % (cols, LEVELS[0], LEVELS[0], raw, update), (base, node_id, base + first)).rowcount
        for below, level in zip(LEVELS, LEVELS[1:]):
            k = level // below
            agg = ", ".join("sum({0}_n), sum({0}_mean * {0}_n) / NULLIF(sum({0}_n), 0), "
                            "min({0}_min), max({0}_max)".format(c) for c in CHANNELS)
            n += self.conn.execute(
                "INSERT INTO wl_summaries (node_id, level, k, %s) SELECT node_id, %d, k / %d, %s "
                "FROM wl_summaries WHERE node_id = %%s AND level = %d AND k >= %%s "
                "GROUP BY node_id, k / %d ON CONFLICT (node_id, level, k) DO UPDATE SET %s"
                % (cols, level, k, agg, below, k, update),
                (node_id, first // below // k * k)).rowcount
        self.conn.execute("INSERT INTO wl_summary_upto VALUES (%s, %s) ON CONFLICT (node_id) "
                          "DO UPDATE SET upto = EXCLUDED.upto", (node_id, npoints))
        return n

    def close(self, clean=False):
        if self._conn is not None:
            self._conn.close()


class PgStore(Writer, PgReader):
    """The collector's store on PostgreSQL: writer.py's write path over PgCommitter, read
    through the interface with the readings not committed yet laid over."""

    def __init__(self, dsn, password, complaints, max_future_s=3600, max_age_s=MAX_AGE_S,
                 name="wattlog"):
        self.committer = PgCommitter(dsn, password, complaints, name=name)
        PgReader.__init__(self, dsn, password)
        Writer.__init__(self, complaints, max_future_s, max_age_s)

    def stored_status(self):
        return PgReader.stored_status(self)

    def status(self):
        return Writer.status(self)

    def nodes(self):
        """The database's state of every node, this collector's live one over it for the
        nodes it keeps (a cluster's collector keeps its partitions' nodes only)."""
        out = PgReader.nodes(self)
        out.update(Writer.nodes(self))
        return out
