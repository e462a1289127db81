"""demoplugs.py - tools/demo's simulated plugs: where each one's clock starts, how fast it
runs, and the plug itself (tools/simnode) with its output.

A plug replays from 24 h ago, or, in a data directory that holds slots of that day already
(tools/demo --data), from the slot after its latest stored one: no slot is measured twice. Its
clock runs at the speed that brings it to the present at the moment the demo aims for
(speed_for), and it says on its output when it gets there (wattsim's PRESENT_LINE): that is
when the demo counts it caught up, at once (its state says so only after the next slot of
real time). Its flash is <data>/demo-plugs/<plug>, kept for the next run on that directory, so
that it goes on as the same plug (its energy total, its relay, an update it took).
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

from broker import terminate_with_parent
from wattlog.store import open_reader
from wattlog.store.phpfina import FeedError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.append(os.path.join(REPO, "lib"))  # the simulator's line for "caught up"

from wattsim.clock import PRESENT_LINE  # noqa: E402

PLUG_FLASH = "demo-plugs"  # <data>/demo-plugs/<plug>: each plug's flash
DAY_S = 86400
INTERVAL_S = 10
PLUG_STOP_S = 40  # a plug sends what it holds for up to 30 s (wattnode.node.DRAIN_MS), then
                  # stops; killed after this (at 20 s, a busy machine's plug was killed draining)


def day_ago(now):
    """The start of the slot 24 h before the one that holds unix time `now`."""
    return now - now % INTERVAL_S - DAY_S


def replay_starts(data, names, now):
    """Where each plug's clock starts: 24 h ago, or, in a data directory that holds slots of
    that day already (--data), the slot after its latest stored one: no slot measured twice.
    Read once the collector has started (it has cut what was never committed by then)."""
    present = now - now % INTERVAL_S
    starts = {}
    store = open_reader(data)
    for name in names:
        start = day_ago(now)
        entry = store.lookup(name + "/power")
        if entry is not None:
            try:
                feed = store.feed(entry)
                last = feed.last_value(max_slots=DAY_S // feed.interval + 1)
            except FeedError:
                last = None  # the collector says what is wrong with it, in its log
            if last is not None:
                start = min(max(start, feed.time(last[0]) + feed.interval), present)
        starts[name] = start
    return starts


def speed_for(start, at, arrive):
    """The clock speed that takes a plug launched at `at`, its clock at `start`, to the
    present at `arrive`: (at - start) s of node time made up in (arrive - at) s of real time,
    so speed - 1 = (at - start) / (arrive - at). At least 2: a clock behind the present at
    speed 1 would never catch up."""
    return max(2, int(round((at - start) / max(1.0, arrive - at))) + 1)


def replay_line(plugs, now, data, arrive_s):
    """What the plugs replay, at what speed, and when they are set to reach the present."""
    when = ("set to reach the present %.0f s after the demo started, then run in real time"
            % arrive_s)
    first = day_ago(now)
    if all(p.start == first for p in plugs.values()):
        return "  the plugs replay the last 24 h (from %s) at %dx, %s" % (
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(first)),
            next(iter(plugs.values())).speed, when)
    each = ", ".join("%s from %s at %dx" % (p.name, time.strftime("%H:%M:%SZ",
                                                                  time.gmtime(p.start)), p.speed)
                     for p in plugs.values())
    return ("  continuing in %s: each plug replays from the slot after its latest stored one "
            "(%s), %s" % (data, each, when))


class Plug:
    """One simulated plug: tools/simnode in a session of its own, its output read as it comes
    into <logs>/<name>.log (a pipe nobody reads would stop the plug once full), for the line
    that says its clock reached the present and for the summary line of each clean stop."""

    def __init__(self, name, profile, start, speed, broker, data, logs):
        self.name = name
        self.start = start
        self.speed = speed
        self.caught_up = None  # time.time() when it said its clock had reached the present
        self.summaries = []    # node.status() of each clean stop (a reboot's too)
        self.log_path = os.path.join(logs, name + ".log")
        self.proc = subprocess.Popen(
            [os.path.join(REPO, "tools", "simnode"), "--id", name, "--broker",
             "127.0.0.1:%d" % broker.port, "--profile", profile, "--speed", str(speed),
             "--start", str(start), "--then-realtime",
             "--flash", os.path.join(data, PLUG_FLASH, name)] + broker.node_args(name),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
            preexec_fn=terminate_with_parent)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        with open(self.log_path, "w") as log:
            for line in self.proc.stdout:
                log.write(line)
                log.flush()
                if line.startswith(PRESENT_LINE) and self.caught_up is None:
                    self.caught_up = time.time()
                elif line.startswith("summary "):
                    try:
                        self.summaries.append(json.loads(line[len("summary "):]))
                    except ValueError:
                        pass  # cut short: the log keeps it

    def interrupt(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # simnode: the node sends what it holds, stops

    def finish(self, deadline):
        """Wait for it to stop, until time.monotonic() reaches `deadline` (then kill it);
        (True if it stopped cleanly with nothing unsent, how it ended in a few words)."""
        try:
            self.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self._reader.join(5)
            return False, "%s killed after %d s (see %s)" % (self.name, PLUG_STOP_S,
                                                             self.log_path)
        self._reader.join(5)
        if not self.summaries:
            return False, "%s ended without its summary (see %s)" % (self.name, self.log_path)
        unsent = self.summaries[-1]["never_sent"]
        n = self.produced()
        dropped = sum(s["dropped"] for s in self.summaries)
        return not unsent, "%s %d reading%s%s%s" % (
            self.name, n, "" if n == 1 else "s",
            " (%d dropped: its memory filled faster than the collector acknowledged)" % dropped
            if dropped else "", " (%d never sent)" % unsent if unsent else "")

    def produced(self):
        return sum(s["produced"] for s in self.summaries)
