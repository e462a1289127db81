"""demoview.py - what tools/demo shows of a run: the plugs as the broker hears them (Watch),
progress bars, and each plug's day as one line of block characters (plot).

Watch is a client like any other, logged in as a test user of its own: it counts the
readings in the batches (which only the collector may read, as provisioned) and keeps each
plug's latest state. plot() reads the stored feeds, after the collector has stopped.
"""

import json
import threading
import time

import numpy as np

from wattlog.store import open_reader
from wattnode import wire

DAY_S = 86400
BARS = " ▁▂▃▄▅▆▇█"


class Watch:
    """Listens on the broker like any other client: the plugs' states and readings."""

    def __init__(self, broker):
        self.states = {}
        self.readings = 0
        self.payload_bytes = 0
        self.lock = threading.Lock()
        # a test user of its own: it counts the readings, which only the collector may read
        self.c = broker.client("wattlog-demo-watch")
        self.c.on_message = self._on_message
        self.c.connect("127.0.0.1", broker.port)
        self.c.subscribe([("wattlog/+/state", 0), ("wattlog/+/readings", 0)])
        self.c.loop_start()

    def _on_message(self, client, userdata, msg):
        node, kind = msg.topic.split("/")[1], msg.topic.split("/")[-1]
        with self.lock:
            if kind == "state":
                try:
                    self.states[node] = json.loads(msg.payload)
                except ValueError:
                    pass
            else:
                try:
                    self.readings += wire.decode_header(msg.payload)[0]
                    self.payload_bytes += len(msg.payload)
                except ValueError:
                    pass

    def close(self):
        self.c.loop_stop()
        self.c.disconnect()


def progress_bar(fraction, width=20):
    done = int(round(max(0.0, min(1.0, fraction)) * width))
    return "#" * done + "-" * (width - done)


def sparkline(feed, start, buckets, bucket_s):
    values = feed.read(feed.slot(start), feed.slot(start + buckets * bucket_s))
    per = bucket_s // feed.interval
    means = []
    for k in range(buckets):
        chunk = values[k * per:(k + 1) * per]
        chunk = chunk[~np.isnan(chunk)]
        means.append(float(chunk.mean()) if len(chunk) else None)
    top = max((m for m in means if m is not None), default=0) or 1
    return "".join(" " if m is None else BARS[min(8, 1 + int(m / top * 7.999))] for m in means), top


def plot(data, nodes, now):
    store = open_reader(data)
    start = now - DAY_S
    start -= start % 1800
    print("\npower over the last 24 h, one column per 30 min, %s to %s UTC:"
          % (time.strftime("%Y-%m-%d %H:%M", time.gmtime(start)),
             time.strftime("%Y-%m-%d %H:%M", time.gmtime(now))))
    for node in nodes:
        entry = store.lookup(node + "/power")
        if entry is None:
            print("  %-10s (no data)" % node)
            continue
        line, top = sparkline(store.feed(entry), start, 48, 1800)
        print("  %-10s |%s| peak of the half-hour means %.0f W" % (node, line, top))
