"""demo.py - the whole system on one machine: simulated plugs -> mosquitto -> collector -> feeds.

    tools/demo [--nodes N] [--duration S] [--backfill S] [--data DIR] [--ota [--build DIR]]

Starts a private mosquitto on a free loopback port (authentication and ACL on, as
wattlog provision sets a real one up), the collector writing to ./demo-data, and
N simulated plugs (washer, fridge, heat pump, in turn) running the real firmware on the
MicroPython unix port. The plugs backfill the last 24 h at high speed (--backfill seconds of
real time), then carry on in real time. The collector serves its HTTP API and the dashboard
on a free loopback port, whose address it prints (the token the page asks for to switch a
relay is in a file made 0600 in the logs directory). It shows their progress, and stops
everything in order - plugs, collector (final commit), broker - after --duration seconds or
on Ctrl-C.
Then it lists the feeds, plots each plug's power over the day, and says how to look further.

With --ota, once the plugs have caught up it updates them all over the air, as an owner
updates real plugs (README, "Updates over the air"): `wattlog ota --all` as wattlog-operator
with the demo's provision directory, every plug at once, the build from tools/build (or
--build DIR). Each plug takes the files, switches, reboots into the new build on trial and
confirms it once it has run its trial (30 s, the shortest) with its readings acknowledged by
the collector; the demo prints the table,
then (at the end) `wattlog nodes`, whose version and update columns say what each plug runs
and how its update ended. It runs until the update is over even when --duration passes first,
and ends with exit status 1 if a plug did not confirm. Progress: ota.log in the logs folder.
"""

import argparse
import json
import os
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from broker import Broker, free_port
from wattlog.feeds import Registry
from wattlog.provision import COLLECTOR, OPERATOR
from wattlog.phpfina import Feed
from wattnode import wire

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROFILES = ("washer", "fridge", "heatpump")
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
    registry = Registry(data)
    start = now - DAY_S
    start -= start % 1800
    print("\npower over the last 24 h, one column per 30 min, %s to %s UTC:"
          % (time.strftime("%Y-%m-%d %H:%M", time.gmtime(start)),
             time.strftime("%Y-%m-%d %H:%M", time.gmtime(now))))
    for node in nodes:
        entry = registry.find(node, "power")
        if entry is None:
            print("  %-10s (no data)" % node)
            continue
        line, top = sparkline(Feed.open(os.path.join(data, "phpfina"), entry["id"]), start, 48, 1800)
        print("  %-10s |%s| peak of the half-hour means %.0f W" % (node, line, top))


def wait_for_line(path, text, proc, timeout_s=30.0):
    """Plugs must not publish before the collector subscribes: the broker keeps nothing for a
    subscriber that does not exist yet."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        with open(path) as f:
            if text in f.read():
                return
        time.sleep(0.1)
    with open(path) as f:
        sys.exit("tools/demo: the collector did not start:\n" + f.read())


def stop_all(nodes, collector, broker):
    for p in nodes.values():
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    outputs = {}
    for name, p in nodes.items():
        try:
            outputs[name] = p.communicate(timeout=20)[0]
        except subprocess.TimeoutExpired:
            p.kill()
            outputs[name] = p.communicate()[0]
    if collector.poll() is None:
        collector.send_signal(signal.SIGTERM)
    try:
        collector.wait(60)
    except subprocess.TimeoutExpired:
        collector.kill()
    broker.stop()
    return outputs


def start_update(broker, args, logs, parallel):
    """`wattlog ota --all` against the demo's plugs, as their owner runs it: the operator's
    login and the plugs' update keys from the demo's provision directory (broker.auth)."""
    build = ["--build", args.build] if args.build else []
    print("updating every plug over the air: wattlog ota --all --parallel %d (progress in %s)"
          % (parallel, os.path.join(logs, "ota.log")), flush=True)
    # the shortest trial: the new version must run it whole before it is confirmed
    return subprocess.Popen(
        [sys.executable, "-m", "wattlog.cli", "ota", "--all", "--parallel", str(parallel),
         "--trial", "30", "--dir", broker.auth, "--broker",
         "mqtt://%s@127.0.0.1:%d" % (OPERATOR, broker.port),
         "--password-file", broker.password_file(OPERATOR)] + build,
        stdout=subprocess.PIPE, stderr=open(os.path.join(logs, "ota.log"), "w"), text=True,
        start_new_session=True)


def main():
    p = argparse.ArgumentParser(prog="tools/demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=3, help="simulated plugs (default 3)")
    p.add_argument("--duration", type=float, help="stop after S seconds (default: on Ctrl-C)")
    p.add_argument("--backfill", type=float, default=25.0,
                   help="real seconds to replay the last 24 h in (default 25)")
    p.add_argument("--data", default="demo-data", help="data directory (default ./demo-data)")
    p.add_argument("--ota", action="store_true",
                   help="once caught up, update every plug over the air (wattlog ota --all)")
    p.add_argument("--build", metavar="DIR",
                   help="with --ota: a folder tools/build made (default: run tools/build)")
    args = p.parse_args()
    if args.nodes < 1:
        p.error("--nodes must be at least 1")

    logs = tempfile.mkdtemp(prefix="wattlog-demo-")
    broker = Broker(os.path.join(logs, "mosquitto")).start()
    names = [PROFILES[i % 3] + ("" if i < 3 else "-%d" % (i // 3 + 1)) for i in range(args.nodes)]
    speed = max(1, int(DAY_S / args.backfill))
    began = time.time()
    start = int(began) - DAY_S
    start -= start % 10
    print("wattlog demo: mosquitto on 127.0.0.1:%d, the collector writing to %s, %d simulated plugs"
          % (broker.port, os.path.abspath(args.data), args.nodes))
    print("  the plugs replay the last 24 h at %dx, then run in real time (a plug's clock "
          "reaches the present %.0f s after it starts)" % (speed, DAY_S / (speed - 1)))
    print("  logs in %s; %s" % (logs, "stopping after %.0f s" % args.duration if args.duration
                                 else "Ctrl-C stops everything"))

    # the dashboard: the collector's HTTP side on a free loopback port, its token in a file
    # made 0600 from the start (the page asks for it once, to switch relays)
    http_port = free_port()
    token_file = os.path.join(logs, "http.token")
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, (secrets.token_urlsafe(24) + "\n").encode())
    os.close(fd)
    collector = subprocess.Popen(
        [sys.executable, "-m", "wattlog.cli", "collect", "--broker", broker.url,
         "--password-file", broker.password_file(COLLECTOR), "--data", args.data,
         "--commit-interval", "60", "--status-interval", "10",
         "--listen", "127.0.0.1:%d" % http_port, "--http-token-file", token_file,
         "--operator-password-file", broker.password_file(OPERATOR)],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(logs, "collector.log"), "w"),
        start_new_session=True)
    wait_for_line(os.path.join(logs, "collector.log"), "listening on", collector)
    print("  the dashboard: http://127.0.0.1:%d/  (to switch relays, give it the token in %s)"
          % (http_port, token_file), flush=True)
    watch = Watch(broker)
    nodes = {}
    for i, name in enumerate(names):
        nodes[name] = subprocess.Popen(
            [os.path.join(REPO, "tools", "simnode"), "--id", name, "--broker",
             "127.0.0.1:%d" % broker.port, "--profile", PROFILES[i % 3], "--speed", str(speed),
             "--start", str(start), "--then-realtime"] + broker.node_args(name),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    stop = queue.Queue()
    signal.signal(signal.SIGINT, lambda *a: stop.put("Ctrl-C"))
    signal.signal(signal.SIGTERM, lambda *a: stop.put("SIGTERM"))
    tty = sys.stdout.isatty()
    update = None  # wattlog ota, once the plugs have caught up (--ota)
    updated = None  # its exit status
    backfill_done = None
    last_print = 0.0
    last_line = None
    why = None
    while why is None:
        try:
            why = stop.get(timeout=0.5)
            break
        except queue.Empty:
            pass
        now = time.time()
        if update is not None and updated is None and update.poll() is not None:
            updated = update.returncode
            print("%sthe update over the air %s:\n%s" % (
                "\n" if tty else "", "ended" if updated == 0 else "FAILED",
                "".join("    " + line for line in update.stdout.read().splitlines(True))),
                flush=True)
        if args.duration and now - began >= args.duration and (update is None or updated
                                                               is not None):
            why = "%.0f s passed" % args.duration
            break
        dead = [n for n, proc in nodes.items() if proc.poll() is not None]
        if dead or collector.poll() is not None:
            why = "a process ended early: %s" % ", ".join(dead or ["the collector"])
            break
        with watch.lock:
            states = dict(watch.states)
            readings = watch.readings
        # a plug has caught up when its latest slot is the one before the present (the
        # state of a slot comes once the slot has ended)
        caught_up = [n for n in names if states.get(n, {}).get("time", 0) >= now - 2 * 10 - 1]
        finishing = backfill_done is None and len(caught_up) == len(names)
        if now - last_print < (1 if tty else 5) and not (tty and backfill_done is None) \
                and not finishing:
            continue
        last_print = now
        parts = []
        for n in names:
            st = states.get(n, {})
            t = st.get("time", start)
            power = st.get("power")
            done = 1.0 if finishing else (t - start) / (now - start)
            parts.append("%s %s %s %s" % (
                n, "" if backfill_done else "[%s]" % progress_bar(done),
                time.strftime("%H:%MZ", time.gmtime(t)),
                "-" if power is None else "%.1f W" % power))
        line = "  " + " | ".join(parts) + "  (%d readings)" % readings
        if line != last_line:  # the same line again says nothing new
            last_line = line
            print(("\r" + line) if tty else line, end="" if tty else "\n", flush=True)
        if finishing:
            backfill_done = now
            print("%sbackfill done in %.1f s (measured from the start of the demo): %d readings "
                  "arrived, %.0f readings/s" % ("\n" if tty else "", now - began, readings,
                                               readings / (now - began)))
            if args.ota:
                update = start_update(broker, args, logs, len(names))

    print("%sstopping (%s): the plugs, then the collector (final commit), then mosquitto"
          % ("\n" if tty else "", why))
    with watch.lock:
        readings, payload = watch.readings, watch.payload_bytes
    watch.close()
    if update is not None and update.poll() is None:
        update.terminate()  # stopped before the update ended (Ctrl-C): the plugs finish it
        update.wait()
    outputs = stop_all(nodes, collector, broker)
    elapsed = time.time() - began
    sent = produced = 0
    for name, out in outputs.items():
        for line in out.splitlines():
            if line.startswith("summary "):
                s = json.loads(line[8:])
                sent += s["bytes_sent"]
                produced += s["produced"]
    print("\n%d readings in %.0f s (%.0f readings/s over the whole run); on the wire %.1f bytes "
          "per reading in MQTT packets (%.1f in batch payloads)"
          % (readings, elapsed, readings / elapsed, sent / max(produced, 1), payload / max(readings, 1)))
    print()
    subprocess.run([sys.executable, "-m", "wattlog.cli", "feeds", "--data", args.data])
    plot(args.data, names, int(time.time()))
    if args.ota:
        print("\nwhat each plug runs, and how its last update ended (wattlog nodes):")
        subprocess.run([sys.executable, "-m", "wattlog.cli", "nodes", "--data", args.data])
    wl = os.path.relpath(shutil.which("wattlog") or "wattlog")
    print("\nlook at the data:\n  %s feeds --data %s\n  %s export --data %s --feed %s/power "
          "--start=-2h\n  collector log: %s" % (wl, args.data, wl, args.data, names[0],
                                              os.path.join(logs, "collector.log")))
    if args.ota and updated != 0:
        print("\nthe update over the air %s: see %s" % (
            "never started (the plugs did not catch up)" if update is None
            else "did not finish" if updated is None else "failed",
            os.path.join(logs, "ota.log")))
        return 1
    return 0 if why and not why.startswith("a process ended early") else 1


if __name__ == "__main__":
    sys.exit(main())
