"""store - the storage side, behind one interface: readings in, acks out, and every read of
the data (the HTTP API, emoncms's API, energy, metrics, the InfluxDB sink's walk, the CLI).

Words:
- A reading is one slot of one plug's channel (power W, voltage V, current A, energy kWh): a
  float (NaN: none) at the slot's start, unix seconds, on the feed's fixed grid.
- A feed is one plug's channel: an id, node, channel, unit, and a grid (start, interval): slot
  k is the time start + k * interval. Its entry is {"id", "node", "channel", "unit",
  "interval"} (and "quarantined": why, for a feed whose files could not be read).
- Committed: on disk (written and fsynced) and recorded as such; a plug is acknowledged only
  what is committed. Pending: taken in, not committed yet; reads include it, so a chart's right
  edge is the present, and the answers say where the committed part ends (committed_until).
- A series answer: {"feed", "node", "channel", "unit", "interval", "start", "end",
  "committed_until", "bucket_s", "raw", "time": [bucket starts], "mean", "min", "max",
  "count"}: buckets of bucket_s seconds (raw: bucket_s is the interval, each bucket one slot),
  None where a bucket has no data, ending where the data ends (query.py).

The interface (reader.py states each call; files.py adds what the collector's store has):
    entries(quarantined=False)  lookup(name)  feed(entry) -> the grid: start, interval,
        npoints(), end(), time(k), slot(t), first_at(t), read(first, stop), last_value()
    read(entry, feed, first, stop)   slots with the pending readings laid over
    pending(node, channel)           (times, values) not committed yet, or None
    series(entry, feed, start, end, points)
    feeds()  plug_order()  nodes()  plug(node)  status()      plain data (status: data_dir,
        last_commit, and the room: disk_free_bytes for files, database_bytes for a database)
    committed()  (generation, {feed id: committed slots}): what is committed and nothing
        else; generation changes with each commit (what a follower of committed data, the
        InfluxDB sink, looks at before it reads the feeds)
Writing (the collector's Store only): recover(acks), take(topic, payload), resends(),
commit() -> acks to publish, last_energy(node), flush_summaries(), close().

Engines: the PHPFina files (reader.py's Reader, files.py's Store), and PostgreSQL
(postgres.py's PgReader and PgStore) for the cluster; both run the same suite
(tests/host/test_store_interface.py). What they share is in base.py and writer.py.
"""


def open_reader(data_dir):
    """The data in `data_dir` as it is on disk (reader.Reader); reader.StoreError in words."""
    from wattlog.store.reader import Reader
    return Reader.open(data_dir)
