"""demo.py - the whole system on one machine: simulated plugs -> mosquitto -> collector -> feeds.

    tools/demo [--nodes N] [--duration S] [--backfill S] [--data DIR] [--ota [--build DIR]]

Starts a private mosquitto on a free loopback port (authentication and ACL on, as
wattlog provision sets a real one up), the collector writing to ./demo-data, and
N simulated plugs (washer, fridge, heat pump, in turn) running the real firmware on the
MicroPython unix port. The plugs backfill the last 24 h at high speed, each at the speed that
brings its clock to the present --backfill seconds after the demo started, then carry on in
real time; a plug says on its output when its clock has reached the present (wattsim's
PRESENT_LINE), which is when the demo counts it caught up. The collector serves its HTTP API
and the dashboard on a free loopback port, whose address it prints (the token the page asks
for to switch a relay is in a file made 0600 in the logs directory). It shows their
progress, and stops everything in order after --duration seconds or on Ctrl-C: the plugs
(each sends what it holds), then the collector (it commits what is pending), then the broker,
a line for each. Then it lists the feeds, plots each plug's power over the day, and says how
to look further.

Each run starts on a clean ./demo-data (the previous run's is removed, and the demo says so):
a plug replaying a day over the same day already stored would make its energy counter go
back and count the day twice. --data DIR keeps what is in DIR and goes on from it: each plug
replays from the slot after its latest stored one (at most the last 24 h), so no slot is
measured twice. Each plug's flash is kept in DIR/demo-plugs/<plug>, so a plug goes on as the
same plug: its energy total (a plug on a new flash, with a new broker that retains nothing of
it, would count from 0 again), its relay, an update it took.

A Ctrl-C from the terminal reaches the whole foreground process group; the broker, the
collector and the plugs each run in a session of their own, so that only the demo hears it
and stops them in order (a broker gone first would leave the collector trying to reach it).
Should the demo itself die, even by SIGKILL, each gets SIGTERM (broker.terminate_with_parent):
none outlives it.

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
import os
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from broker import Broker, terminate_with_parent
from demoplugs import PLUG_STOP_S, Plug, replay_line, replay_starts, speed_for
from demoview import Watch, plot, progress_bar
from rig import Collector, taken
from wattlog.store import datalock
from wattlog.fleet.provision import OPERATOR

PROFILES = ("washer", "fridge", "heatpump")
DEFAULT_DATA = "demo-data"
COLLECTOR_STOP_S = 60  # its final commit: a slow disk takes seconds
TAKEN_S = 20  # for the collector to take what the broker held for it when the plugs stopped


def wait_for_line(path, text, proc, stop, timeout_s=30.0):
    """Plugs must not publish before the collector subscribes: the broker keeps nothing for a
    subscriber that does not exist yet. True once its log says `text`; False if a stop was
    asked for meanwhile; None if it ended or did not say it in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None and stop.empty():
        with open(path) as f:
            if text in f.read():
                return True
        time.sleep(0.1)
    return False if not stop.empty() else None


def clean(path):
    """A run without --data starts on an empty ./demo-data: the previous run's goes, once it
    is known to be a wattlog data directory that no collector writes. True if there was one."""
    if not os.path.exists(path):
        return False
    if not os.path.isdir(path) or (os.listdir(path)
                                   and not os.path.exists(os.path.join(path, datalock.FILE))):
        sys.exit("tools/demo: %s is not a wattlog data directory (it has no %r file); move it "
                 "away, or give --data DIR" % (path, datalock.FILE))
    try:
        fd = datalock.lock(path, "tools/demo")
    except datalock.Locked as e:
        sys.exit("tools/demo: %s" % e)
    except OSError as e:
        sys.exit("tools/demo: cannot lock %s to remove it (%s)" % (path, e.strerror))
    try:
        shutil.rmtree(path)
    except OSError as e:
        sys.exit("tools/demo: cannot remove the previous run's %s (%s)" % (e.filename or path,
                                                                          e.strerror))
    finally:
        os.close(fd)
    return True


def collector_ended(rc):
    """How the collector ended, from its exit status after SIGTERM, in a few words."""
    if rc == 0:
        return "committed what was pending and stopped"
    if rc == -signal.SIGKILL:
        return "was killed: its final commit took longer than %d s" % COLLECTOR_STOP_S
    if rc < 0:
        return "ended by %s" % signal.Signals(-rc).name
    return "ended with status %d (see collector.log)" % rc


def stop_all(plugs, collector, broker):
    """The plugs, then the collector, then the broker, a line for each: each part stops while
    what it needs still runs (a plug sends what it holds through the broker; the collector
    commits it, then acknowledges through the broker). A plug is done sending once the broker
    has its last batch, which may not have reached the collector yet: the collector stops
    once it has taken what the broker held for it (rig.taken(), within TAKEN_S), or its final
    commit would miss the plugs' last readings, and the broker would go with them."""
    began = time.monotonic()
    for p in plugs.values():
        p.interrupt()
    ended = [p.finish(began + PLUG_STOP_S) for p in plugs.values()]
    if ended:
        print("  the plugs stopped in %.1f s%s: %s" % (
            time.monotonic() - began, ", each after sending what it held"
            if all(clean for clean, _ in ended) else "", ", ".join(said for _, said in ended)),
            flush=True)
    began = time.monotonic()
    if collector.poll() is None:
        try:
            taken(broker, TAKEN_S)
        except (AssertionError, OSError, queue.Empty) as e:  # stuck: its final commit all the same
            print("  the collector did not take the plugs' last batches within %d s (%s); "
                  "stopping it all the same" % (TAKEN_S, e), flush=True)
        collector.send_signal(signal.SIGTERM)
        try:
            collector.wait(COLLECTOR_STOP_S)
        except subprocess.TimeoutExpired:
            collector.kill()
            collector.wait()
    print("  the collector %s in %.1f s" % (collector_ended(collector.returncode),
                                            time.monotonic() - began), flush=True)
    began = time.monotonic()
    broker.stop()
    print("  mosquitto stopped in %.1f s" % (time.monotonic() - began), flush=True)


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
        start_new_session=True, preexec_fn=terminate_with_parent)


def parse_args():
    p = argparse.ArgumentParser(prog="tools/demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=3, help="simulated plugs (default 3)")
    p.add_argument("--duration", type=float, help="stop after S seconds (default: on Ctrl-C)")
    p.add_argument("--backfill", type=float, default=25.0,
                   help="real seconds from the demo's start until the plugs have replayed the "
                        "last 24 h (default 25)")
    p.add_argument("--data", help="data directory to go on from (default: a clean ./%s)"
                   % DEFAULT_DATA)
    p.add_argument("--ota", action="store_true",
                   help="once caught up, update every plug over the air (wattlog ota --all)")
    p.add_argument("--build", metavar="DIR",
                   help="with --ota: a folder tools/build made (default: run tools/build)")
    args = p.parse_args()
    if args.nodes < 1:
        p.error("--nodes must be at least 1")
    return args


def start_collector(broker, data, logs):
    """`wattlog collect` (rig.Collector) in a session of its own, with the HTTP side (the
    dashboard) on a free loopback port and its token in a file made 0600 from the start (the
    page asks for it once, to switch relays); (process, port, token file)."""
    token_file = os.path.join(logs, "http.token")
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, (secrets.token_urlsafe(24) + "\n").encode())
    os.close(fd)
    c = Collector(broker.url, data, commit_interval=60, status_interval=10, listen=True,
                  log_path=os.path.join(logs, "collector.log"), new_session=True,
                  preexec_fn=terminate_with_parent,
                  args=["--http-token-file", token_file,
                        "--operator-password-file", broker.password_file(OPERATOR)])
    return c.proc, c.port, token_file


def run(args, plugs, collector, broker, watch, began, stop, logs):
    """Progress until --duration passes, Ctrl-C or SIGTERM, or a process ends; (why it
    stopped, the update's process or None, its exit status or None)."""
    tty = sys.stdout.isatty()
    update = None  # wattlog ota, once the plugs have caught up (--ota)
    updated = None  # its exit status
    backfill_done = None
    last_print = 0.0
    last_line = None
    while True:
        try:
            return stop.get(timeout=0.5), update, updated
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
            return "%.0f s passed" % args.duration, update, updated
        dead = [n for n, p in plugs.items() if p.proc.poll() is not None]
        if dead or collector.poll() is not None:
            return ("a process ended early: %s" % ", ".join(dead or ["the collector"]),
                    update, updated)
        with watch.lock:
            states = dict(watch.states)
            readings = watch.readings
        finishing = backfill_done is None and all(p.caught_up for p in plugs.values())
        if now - last_print < (1 if tty else 5) and not (tty and backfill_done is None) \
                and not finishing:
            continue
        last_print = now
        parts = []
        for n, p in plugs.items():
            st = states.get(n, {})
            t = st.get("time", p.start)
            power = st.get("power")
            done = 1.0 if p.caught_up else (t - p.start) / max(now - p.start, 1)
            parts.append("%s %s %s %s" % (
                n, "" if backfill_done else "[%s]" % progress_bar(done),
                time.strftime("%H:%MZ", time.gmtime(t)),
                "-" if power is None else "%.1f W" % power))
        line = "  " + " | ".join(parts) + "  (%d readings)" % readings
        if line != last_line:  # the same line again says nothing new
            last_line = line
            print(("\r" + line) if tty else line, end="" if tty else "\n", flush=True)
        if finishing:
            backfill_done = max(p.caught_up for p in plugs.values())
            print("%sbackfill done in %.1f s (measured from the start of the demo): %d readings "
                  "arrived, %.0f readings/s" % ("\n" if tty else "", backfill_done - began,
                                               readings, readings / (now - began)), flush=True)
            if args.ota:
                update = start_update(broker, args, logs, len(plugs))


def report(args, data, plugs, names, began, readings, payload, logs, update, updated):
    """What was stored and how to look further; the exit status of an --ota run."""
    elapsed = time.time() - began
    produced = sum(p.produced() for p in plugs.values())
    sent = sum(s["bytes_sent"] for p in plugs.values() for s in p.summaries)
    print("\n%d readings in %.0f s (%.0f readings/s over the whole run); on the wire %.1f bytes "
          "per reading in MQTT packets (%.1f in batch payloads)"
          % (readings, elapsed, readings / elapsed, sent / max(produced, 1),
             payload / max(readings, 1)))
    print(flush=True)
    subprocess.run([sys.executable, "-m", "wattlog.cli", "feeds", "--data", data])
    plot(data, names, int(time.time()))
    if args.ota:
        print("\nwhat each plug runs, and how its last update ended (wattlog nodes):", flush=True)
        subprocess.run([sys.executable, "-m", "wattlog.cli", "nodes", "--data", data])
    wl = os.path.relpath(shutil.which("wattlog") or "wattlog")
    print("\nlook at the data:\n  %s feeds --data %s\n  %s export --data %s --feed %s/power "
          "--start=-2h\n  logs: %s (collector.log, a log per plug)"
          % (wl, data, wl, data, names[0], logs))
    if args.ota and updated != 0:
        print("\nthe update over the air %s: see %s" % (
            "never started (the plugs did not catch up)" if update is None
            else "did not finish" if updated is None else "failed",
            os.path.join(logs, "ota.log")))
        return 1
    return 0


def main():
    args = parse_args()
    began = time.time()
    # Ctrl-C and SIGTERM only ask: the demo stops its parts in order, whenever it comes
    stop = queue.Queue()
    signal.signal(signal.SIGINT, lambda *a: stop.put("Ctrl-C"))
    signal.signal(signal.SIGTERM, lambda *a: stop.put("SIGTERM"))
    data = args.data or DEFAULT_DATA
    cleaned = args.data is None and clean(data)
    logs = tempfile.mkdtemp(prefix="wattlog-demo-")
    broker = Broker(os.path.join(logs, "mosquitto"), die_with_parent=True).start()
    names = [PROFILES[i % 3] + ("" if i < 3 else "-%d" % (i // 3 + 1)) for i in range(args.nodes)]
    print("wattlog demo: mosquitto on 127.0.0.1:%d, the collector writing to %s, %d simulated "
          "plug%s" % (broker.port, os.path.abspath(data), args.nodes,
                      "" if args.nodes == 1 else "s"))
    if cleaned:
        print("  on a clean ./%s: the previous run's data is removed (--data DIR keeps a run's "
              "data and goes on from it)" % data)
    print("  logs in %s; %s" % (logs, "stopping after %.0f s" % args.duration if args.duration
                                 else "Ctrl-C stops everything"), flush=True)
    collector, http_port, token_file = start_collector(broker, data, logs)
    plugs = {}
    watch = None
    log = os.path.join(logs, "collector.log")
    up = wait_for_line(log, "listening on", collector, stop)
    if up is None:
        if collector.poll() is None:
            collector.kill()
        broker.stop()
        with open(log) as f:
            sys.exit("tools/demo: the collector did not start:\n" + f.read())
    if up:
        print("  the dashboard: http://127.0.0.1:%d/  (to switch relays, give it the token in %s)"
              % (http_port, token_file), flush=True)
        watch = Watch(broker)
        at = time.time()
        starts = replay_starts(data, names, int(at))
        for i, name in enumerate(names):
            plugs[name] = Plug(name, PROFILES[i % 3], starts[name],
                               speed_for(starts[name], at, began + args.backfill), broker,
                               data, logs)
        print(replay_line(plugs, int(at), data, args.backfill), flush=True)
        why, update, updated = run(args, plugs, collector, broker, watch, began, stop, logs)
    else:
        why, update, updated = stop.get(), None, None
    print("%sstopping (%s): the plugs, then the collector (final commit), then mosquitto"
          % ("\n" if sys.stdout.isatty() else "", why), flush=True)
    readings = payload = 0
    if watch is not None:
        with watch.lock:
            readings, payload = watch.readings, watch.payload_bytes
        watch.close()
    if update is not None and update.poll() is None:
        update.terminate()  # stopped before the update ended (Ctrl-C): the plugs finish it
        update.wait()
    stop_all(plugs, collector, broker)
    status = report(args, data, plugs, names, began, readings, payload, logs, update, updated)
    return status if not why.startswith("a process ended early") else 1


if __name__ == "__main__":
    sys.exit(main())
