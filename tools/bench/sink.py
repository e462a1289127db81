"""sink.py - the InfluxDB sink's cost: how fast it catches up from the files into InfluxDB 1.6,
and what it does to a plug's ack latency.

Both against Debian's influxd, started here on a loopback port with its own temporary
directories (tools/lib/influxd.py), and a data directory holding HISTORY: --plugs plugs'
four feeds of --slots 10 s slots each (made with commit.py, as a collector would have).

1. Catch-up: a Sink (host/wattlog/bridges/sink.py) in this process sends the whole history, batches
   of 5000 lines, timed from its first read to its last answer: points/s.
2. Ack latency, sink off and on, in the same run: a private mosquitto set up as `wattlog
   provision` sets it up (tools/lib/broker.py), `wattlog collect --commit-interval 1` on
   that data directory, and one plug (an MQTT session logged in as its node user) publishing
   a 16-reading batch every 0.1 s at QoS 1. A batch's latency is from its publish to the
   retained ack that covers it. First --seconds without --influx, then --seconds with
   --influx into a new database: the sink then sends the whole history again (a new target
   starts at the start of every feed) while the plug is being acked, the worst case for a
   collector sharing its process (and two cores) with it.
"""

import argparse
import os
import re
import shutil
import statistics
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "lib"))
sys.path.insert(0, os.path.join(REPO, "lib"))

import paho.mqtt.client as mqtt  # noqa: E402

from broker import Broker  # noqa: E402
from rig import Collector, scratch  # noqa: E402
from influxd import Influxd  # noqa: E402
from wattlog.store.commit import Committer  # noqa: E402
from wattlog.complaints import Complaints  # noqa: E402
from wattlog.bridges.influx import Schema, Target, Writer  # noqa: E402
from wattlog.store.nodes import parse_ack  # noqa: E402
from wattlog.bridges.sink import Sink  # noqa: E402
from wattlog.store import open_reader  # noqa: E402
from wattnode import wire  # noqa: E402

RECORDS = 16
EVERY_S = 0.1
PLUG = "lat-plug"


def history(data, plugs, slots):
    """plugs x 4 feeds x slots committed points ending an hour ago; the points made."""
    end = int(time.time()) - 3600
    start = end - slots * 10
    start -= start % 10
    committer = Committer(data, Complaints())
    try:
        for p in range(plugs):
            node = "hist-%02d" % p
            times = range(start, start + slots * 10, 10)
            feeds = {(node, ch): {t: base + (k % 97) * 0.5 for k, t in enumerate(times)}
                     for ch, base in (("power", 100.0 + p), ("voltage", 230.0),
                                      ("current", 0.5), ("energy", 1.0))}
            committer.commit(feeds, {node: 10}, {})
    finally:
        committer.close()
    return plugs * 4 * slots


def catch_up(data, db, points):
    sink = Sink(open_reader(data), data, Writer(Target("influx://127.0.0.1:%d/rate" % db.port)),
                Schema())
    db.query('CREATE DATABASE "rate"', db=None)
    t0 = time.monotonic()
    sent = sink.poll()
    elapsed = time.monotonic() - t0
    if sent != points:
        raise SystemExit("the sink sent %d points of %d" % (sent, points))
    return sent / elapsed, elapsed


class Plug:
    """One plug's MQTT session: a batch every EVERY_S, each batch's publish time kept, and
    the latency of each batch once a retained ack covers it."""

    def __init__(self, broker, password, start_t):
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=PLUG)
        self.client.username_pw_set(PLUG, password)
        self.client.on_message = self._on_ack
        self.client.connect("127.0.0.1", broker.port)
        self.client.subscribe("wattlog/%s/ack" % PLUG, 1)
        self.client.loop_start()
        self.seq = 0
        self.t = start_t
        self.boot = int(time.time()) & 0x7FFFFFFF
        self.sent = {}       # last seq + 1 of a batch -> its publish time
        self.latencies = []
        self.lock = threading.Lock()

    def _on_ack(self, client, userdata, msg):
        ack = parse_ack(msg.payload)
        now = time.monotonic()
        if ack is None or ack["boot"] != self.boot:
            return
        with self.lock:
            for end in [e for e in self.sent if e <= ack["seq"]]:
                self.latencies.append(now - self.sent.pop(end))

    def run(self, seconds):
        """Publish for `seconds`; the latencies (s) of the batches acked meanwhile and just
        after."""
        self.latencies = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            buf = bytearray(wire.HEADER_SIZE + wire.RECORD_SIZE * RECORDS)
            wire.pack_header(buf, 0, RECORDS, 10, self.boot, self.seq, 0, self.seq)
            for k in range(RECORDS):
                wire.pack_record(buf, wire.HEADER_SIZE + k * wire.RECORD_SIZE,
                                 self.t - wire.EPOCH_UNIX, 5000, 1000 + self.seq + k, 23000, 2100)
                self.t += 10
            self.seq += RECORDS
            with self.lock:
                self.sent[self.seq] = time.monotonic()
            self.client.publish("wattlog/%s/readings" % PLUG, bytes(buf), qos=1)
            time.sleep(EVERY_S)
        wait_until = time.monotonic() + 10
        while self.sent and time.monotonic() < wait_until:
            time.sleep(0.05)
        return list(self.latencies)

    def close(self):
        self.client.loop_stop()
        self.client.disconnect()


def collector(broker, data, log_path, extra=()):
    """`wattlog collect` committing every second (rig.Collector), listening; its process."""
    c = Collector(broker.url, data, commit_interval=1, status_interval=60, args=extra,
                  log_path=log_path)
    c.wait_for("listening on", 120)
    return c.proc


def summary(latencies):
    qs = statistics.quantiles(latencies, n=20)
    return statistics.mean(latencies), statistics.median(latencies), qs[18]


def ack_latency(work, data, db, seconds, password_file):
    broker = Broker(os.path.join(work, "mosquitto"))
    creds = broker._provision([PLUG])
    broker.start()
    start_t = int(time.time()) - 2 * 86400
    start_t -= start_t % 10
    plug = Plug(broker, creds[PLUG], start_t)
    rows = []
    try:
        for label, extra in (("sink off", []),
                             ("sink on", ["--influx", "influx://admin@127.0.0.1:%d/wattlog"
                                          % db.port, "--influx-password-file", password_file])):
            log_path = os.path.join(work, "collector-%s.log" % label.replace(" ", "-"))
            proc = collector(broker, data, log_path, extra)
            try:
                lat = plug.run(seconds)
            finally:
                proc.terminate()
                proc.wait(60)
            text = open(log_path).read()
            m = re.search(r"InfluxDB sink caught up: (\d+) points .* in ([\d.]+) s "
                          r"\((\d+) points/s\)", text)
            note = ""
            if extra:
                note = ("; the sink caught up on %s points in %s s (%s points/s) meanwhile"
                        % m.groups() if m else "; the sink was still catching up when it ended")
            rows.append((label, summary(lat), len(lat), note))
    finally:
        plug.close()
        broker.stop()
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plugs", type=int, default=10, help="plugs of history (4 feeds each)")
    p.add_argument("--slots", type=int, default=150000, help="10 s slots of history a feed")
    p.add_argument("--seconds", type=float, default=20.0, help="each latency phase")
    args = p.parse_args()
    if not shutil.which("influxd"):
        raise SystemExit("influxd is not installed (apt-get install influxdb)")
    with scratch("wattlog-bench-sink-") as work:
        data = os.path.join(work, "data")
        t0 = time.monotonic()
        points = history(data, args.plugs, args.slots)
        print("history: %d plugs x 4 feeds x %d slots = %d points (made in %.0f s)"
              % (args.plugs, args.slots, points, time.monotonic() - t0), flush=True)
        password = "bench-" + os.urandom(8).hex()
        pw_file = os.path.join(work, "influx.password")
        with os.fdopen(os.open(pw_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(password + "\n")
        with Influxd(os.path.join(work, "open"), "wattlog") as db:
            rate, elapsed = catch_up(data, db, points)
        print("catch-up  %9.0f points/s into InfluxDB 1.6 (%d points in %.1f s, batches of "
              "5000, one field a line)" % (rate, points, elapsed), flush=True)
        with Influxd(os.path.join(work, "auth"), "wattlog", user="admin",
                     password=password) as adb:
            rows = ack_latency(work, data, adb, args.seconds, pw_file)
        for label, (mean, median, p95), n, note in rows:
            print("ack latency, %-8s mean %4.0f ms, median %4.0f ms, p95 %4.0f ms (%d batches, "
                  "commit interval 1 s)%s" % (label, mean * 1e3, median * 1e3, p95 * 1e3, n,
                                               note), flush=True)
        off, on = rows[0][1][0], rows[1][1][0]
        print("the sink changes the mean ack latency by %+.1f %%" % (100 * (on / off - 1)))


if __name__ == "__main__":
    main()
