"""ingest.py - how fast readings reach the disk, beside InfluxDB 1.6 taking the same readings.

wattlog: a private mosquitto set up as `wattlog provision` sets it up (tools/lib/broker.py),
`wattlog collect --commit-interval 1`, and N plugs (MQTT sessions logged in as their own node
users, on plain sockets) publishing pre-encoded 64-reading batches at QoS 1 as fast as the
broker takes them.
The clock runs from the first publish until commit.json acknowledges every reading of every
plug: that is readings on disk, fdatasync'ed, per second. Collector CPU (user + system, from
/proc/<pid>/stat) is divided by the readings. Each plug's readings are a fridge's: 80 W for 12
min of every 40, 2 W between, so the appliances' runs (host/wattlog/runs/) have cycles to find:
the collector runs once with them off ([runs] enabled = false) and once with them on, in turn,
and the difference in CPU per reading is what finding runs costs on the ingest path. (With
runs on, the collector has found every plug's runs once the last ack is out: its loop reads
the new slots of each plug heard after each pass, before the next commit.) The broker's per-client queue is raised for the
run (max_queued_messages): with the default 1000 it drops batches for a collector that falls
behind, which the real firmware sends again (lib/wattnode/link.py) but these bare publishers
do not.

InfluxDB 1.6 (Debian's influxdb, started here on a loopback port with its own temporary
directories): the same readings as line protocol, one line a reading with its four fields
(power, voltage, current, energy), tag node, second precision, posted to /write in batches
of 10,000, timed from the first post to the last answer. The bodies are encoded beforehand,
as the MQTT batches are.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import sys
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "lib"))
sys.path.insert(0, os.path.join(REPO, "lib"))

from broker import Broker  # noqa: E402
from influxd import influxd  # noqa: E402
from rawplugs import _packet, _string  # noqa: E402
from rig import Collector, scratch  # noqa: E402
from wattnode import wire  # noqa: E402

RECORDS = 64


def encode(nodes, batches, start):
    """{node: [payload, ...]} and the same readings as InfluxDB line-protocol bodies."""
    out = {}
    lines = []
    for n, node in enumerate(nodes):
        payloads = []
        for b in range(batches):
            buf = bytearray(wire.HEADER_SIZE + wire.RECORD_SIZE * RECORDS)
            seq = b * RECORDS
            wire.pack_header(buf, 0, RECORDS, 10, 1000 + n, seq, 0, seq)
            for k in range(RECORDS):
                t = start + 10 * (seq + k)
                on = (seq + k) % 240 < 72                 # a fridge's compressor
                p_dw, v_cv, i_ma, e_wh = (800 if on else 20) + n, 23000 + k, 2100 + k, 1000 + seq + k
                wire.pack_record(buf, wire.HEADER_SIZE + k * wire.RECORD_SIZE,
                                 t - wire.EPOCH_UNIX, p_dw, e_wh, v_cv, i_ma)
                lines.append("wattlog,node=%s power=%.1f,voltage=%.2f,current=%.3f,energy=%.3f %d"
                             % (node, p_dw / 10, v_cv / 100, i_ma / 1000, e_wh / 1000, t))
            payloads.append(bytes(buf))
        out[node] = payloads
    bodies = ["\n".join(lines[i:i + 10000]).encode() for i in range(0, len(lines), 10000)]
    return out, bodies


def connect_raw(port, node, password, payloads):
    """A plug's MQTT session on a plain socket: CONNECT answered, then the bytes of all its
    QoS 1 PUBLISH packets, built beforehand. (A Python MQTT client spends more CPU per message
    than the collector: it would be the bench's bottleneck, not the collector.)"""
    sock = socket.create_connection(("127.0.0.1", port))
    connect = (_string(b"MQTT") + bytes([4, 0xC2]) + (60).to_bytes(2, "big")
               + _string(node.encode()) + _string(node.encode())
               + _string(password.encode()))
    sock.sendall(_packet(0x10, connect))
    ack = sock.recv(4)
    if len(ack) != 4 or ack[0] != 0x20 or ack[3] != 0:
        raise SystemExit("the broker refused %s: %r" % (node, ack))
    topic = _string(("wattlog/%s/readings" % node).encode())
    stream = b"".join(_packet(0x32, topic + (i % 65535 + 1).to_bytes(2, "big") + p)
                      for i, p in enumerate(payloads))
    return sock, memoryview(stream)


def blast(streams):
    """Write every plug's packets as fast as the broker reads them; read (and drop) PUBACKs."""
    import selectors
    sel = selectors.DefaultSelector()
    left = {}
    for sock, data in streams.values():
        sock.setblocking(False)
        left[sock] = data
        sel.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
    while left:
        for key, events in sel.select(timeout=1):
            sock = key.fileobj
            if events & selectors.EVENT_READ:
                try:
                    sock.recv(65536)
                except BlockingIOError:
                    pass
            if events & selectors.EVENT_WRITE and sock in left:
                try:
                    sent = sock.send(left[sock][:262144])
                except BlockingIOError:
                    continue
                left[sock] = left[sock][sent:]
                if not len(left[sock]):
                    del left[sock]
                    sel.modify(sock, selectors.EVENT_READ)
    sel.close()
    for sock, _ in streams.values():
        # DISCONNECT, then read until the broker closes: closing a socket with PUBACKs unread
        # would reset the connection and throw away what the broker has not read yet
        sock.setblocking(True)
        sock.settimeout(600)
        sock.sendall(b"\xe0\x00")
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(65536):
            pass
        sock.close()


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def acked(data):
    try:
        with open(os.path.join(data, "commit.json")) as f:
            return {n: d["seq"] for n, d in json.load(f).get("nodes", {}).items()}
    except (FileNotFoundError, ValueError):
        return {}


def run_wattlog(payloads, work, wrap=(), runs=True):
    nodes = sorted(payloads)
    total = sum(len(p) for p in payloads.values()) * RECORDS
    broker = Broker(os.path.join(work, "mosquitto"),
                    extra_conf="max_queued_messages 1000000\nmax_inflight_messages 100\n")
    broker.creds = broker._provision(nodes)
    broker.start()
    data = os.path.join(work, "data")
    config = os.path.join(work, "wattlog.toml")
    with open(config, "w") as f:
        f.write("[runs]\nenabled = %s\n" % ("true" if runs else "false"))
    c = Collector(broker.url, data, config=config, commit_interval=1, status_interval=5,
                  wrap=wrap, log_path=os.path.join(work, "collector.log"))
    try:
        c.wait_for("listening on")
        streams = {node: connect_raw(broker.port, node, broker.creds[node], payloads[node])
                   for node in nodes}
        cpu0 = cpu_s(c.proc.pid)
        t0 = time.monotonic()
        sender = threading.Thread(target=blast, args=(streams,))
        sender.start()
        want = {n: len(payloads[n]) * RECORDS for n in nodes}
        deadline = time.monotonic() + 600
        while acked(data) != want:
            if time.monotonic() > deadline or not c.running():
                raise SystemExit("not all readings were acknowledged: see %s" % c.log_path)
            time.sleep(0.02)
        elapsed = time.monotonic() - t0
        cpu = cpu_s(c.proc.pid) - cpu0
        sender.join()
    finally:
        c.stop()
        broker.stop()
    found = 0
    if runs:
        runs_dir = os.path.join(data, "runs")
        for name in os.listdir(runs_dir) if os.path.isdir(runs_dir) else ():
            if name.endswith(".runs.jsonl"):
                with open(os.path.join(runs_dir, name)) as f:
                    found += sum(1 for _ in f)
    return total / elapsed, cpu / total * 1e6, elapsed, found


def run_influx(bodies, readings, work):
    with influxd(work, "bench") as base:
        t0 = time.monotonic()
        for body in bodies:
            urllib.request.urlopen(urllib.request.Request(
                base + "/write?db=bench&precision=s", data=body, method="POST"), timeout=120)
        elapsed = time.monotonic() - t0
    return readings / elapsed, elapsed


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plugs", type=int, default=50)
    p.add_argument("--batches", type=int, default=400, help="64-reading batches per plug")
    p.add_argument("--runs", type=int, default=3, help="runs of each (default 3): the median "
                   "is printed")
    p.add_argument("--no-influx", action="store_true", help="leave InfluxDB out")
    p.add_argument("--profile", metavar="FILE", help="run the collector under cProfile and "
                   "write its statistics here (pstats); skips InfluxDB")
    args = p.parse_args()
    nodes = ["bench-%02d" % i for i in range(args.plugs)]
    start = int(time.time()) - args.batches * RECORDS * 10 - 3600
    start -= start % 10
    payloads, bodies = encode(nodes, args.batches, start)
    readings = args.plugs * args.batches * RECORDS
    influx = shutil.which("influxd") and not args.profile and not args.no_influx
    with scratch("wattlog-bench-ingest-") as work:
        print("%d plugs x %d batches x %d readings = %d readings; %d runs of each, taken in "
              "turn (the machine's other work spreads over both)" % (
                  args.plugs, args.batches, RECORDS, readings, args.runs), flush=True)
        wrap = ["-m", "cProfile", "-o", args.profile] if args.profile else []
        ours, theirs, cost = [], [], {True: [], False: []}
        for run in range(args.runs):
            for runs in (False, True):
                where = os.path.join(work, "%d-%s" % (run, "runs" if runs else "plain"))
                os.makedirs(where)
                rate, us, elapsed, found = run_wattlog(payloads, where, wrap, runs)
                cost[runs].append(us)
                if runs:
                    ours.append(rate)
                print("  wattlog, runs %-3s %9.0f readings/s to disk (%.1f s), collector CPU "
                      "%.2f us/reading%s" % ("on" if runs else "off", rate, elapsed, us,
                                             ", %d runs found" % found if runs else ""),
                      flush=True)
            if influx:
                os.makedirs(os.path.join(work, str(run)))
                irate, ielapsed = run_influx(bodies, readings, os.path.join(work, str(run)))
                theirs.append(irate)
                print("  influxdb %9.0f readings/s (%.1f s, 1.6, 4 fields a line, batches of "
                      "10,000)" % (irate, ielapsed), flush=True)
        off, on = statistics.median(cost[False]), statistics.median(cost[True])
        print("collector CPU per reading, medians: runs off %.2f us, runs on %.2f us: finding "
              "runs costs %.2f us a reading (%+.0f %%)" % (off, on, on - off,
                                                         100 * (on - off) / off))
        print("wattlog  %9.0f readings/s (median)" % statistics.median(ours))
        if args.profile:
            print("profile: %s (python -m pstats; the figures above include cProfile's "
                  "overhead)" % args.profile)
        elif theirs:
            print("influxdb %9.0f readings/s (median)" % statistics.median(theirs))
            print("ratio    %9.2f  (wattlog / InfluxDB, medians)"
                  % (statistics.median(ours) / statistics.median(theirs)))
        elif args.no_influx or args.profile:
            print("influxdb: left out (--no-influx or --profile) - no comparison")
        else:
            print("influxdb: not installed (apt-get install influxdb) - no comparison")


if __name__ == "__main__":
    main()
