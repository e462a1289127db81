"""clock.py - virtual time for a simulated plug: the clock of its hardware layer (wattnode/hw).

Node time is virtual: wait() advances it to exactly the deadline the node asked for, so a slot
closes at exactly its end whatever the host's load. Two ways to run from `start` (unix
seconds, in the past):
  paced, speed N   N times faster than real time: wait() sleeps so that node time keeps pace
                   with the wall clock; a node that falls behind catches up without sleeping
                   rather than skipping. For what happens against real time (a broker
                   restarted, a link cut, a process killed at a wall-clock moment).
  free, "max"      as fast as the loop goes: wait() jumps to the deadline at once, while the
                   node keeps up with the world. The broker, the collector and the network
                   still work in real time, so while the node's link is down or its energy
                   total unsettled (connecting, waiting for the collector's answer, an
                   outage) it runs paced at FREE_FALLBACK (1000x): a connection that takes
                   50 ms costs 5 slots, not hours of them, and a run whose plug never gets
                   through still ends soon. While all but an eighth of its RAM ring awaits the
                   collector's ack node time holds (sleeping HOLD_MS a wait), as a collector
                   that commits every few seconds would otherwise see hours of readings pile
                   up between two commits and go to the flash spill (or be dropped) - unless
                   the collector has acknowledged nothing for ack_patience_ms of real time
                   (ACK_PATIENCE_MS unless sim.json's ack_patience_s says): then it is away
                   (an outage), and node time runs on into the spill. For tests that end on
                   a condition.
When node time reaches the present the run ends - RunEnded, a KeyboardInterrupt, so it ends as
Ctrl-C ends tools/simnode's run: the node sends what it holds first (start.stopped) - or, with
then_realtime, carries on at real speed. Either way it says so once on standard output
(PRESENT_LINE; a clock that starts at the present says it at once): tools/demo hears there
when each plug has caught up, which the plug's state says only after the next slot, up to a
slot of real time later.

Time bases, each a small int (below 2**30 on a 32-bit port) for 12 days of node time:
  time_ms()    node ms since the run began: what the chips and the watchdog count
  ticks_ms()   the same, masked as time.ticks_ms() is (a plug's tick counter starts at boot)
  true_s()     true time in seconds since the wire epoch: what the loads follow
  time_s()     what the plug's RTC says: true time plus its error (unset: it reads
               2000-01-01, as after a power cut, until set_time())
crash_after_s makes wait() raise after that much node time (crash handling); the plug's
watchdog (board.SimWatchdog) is checked as each wait() begins.
Unix port only: it reads the host clock with time.time() (a float, so it allocates).
"""

import time

from wattnode import start, wire

TICKS_MASK = 0x3FFFFFFF  # time.ticks_diff() works modulo 2**30 on every port
UNSET_RTC_S = -631152000  # 2000-01-01, what an ESP32's RTC reads after a power cut
FREE = "max"
FREE_FALLBACK = 1000  # a free-running clock's speed while the node waits for the network
HOLD_MS = 5
PRESENT_LINE = "wattsim: node time reached the present; real time from here"
ACK_PATIENCE_MS = 30000  # no ack for this long (real time): the collector is away


class RunEnded(KeyboardInterrupt):
    """Node time reached the present: the simulated run ends, as Ctrl-C ends it."""


def _wall_s():
    """The host's time in seconds since the wire epoch (a float)."""
    return time.time() - wire.EPOCH_UNIX


class SimClock:
    def __init__(self, start_unix=None, speed=1, then_realtime=False, crash_after_s=None,
                 unset=False, ack_patience_ms=ACK_PATIENCE_MS):
        now = _wall_s()
        self.start_s = int(now) if start_unix is None else int(start_unix) - wire.EPOCH_UNIX
        self._ms = int((now - self.start_s) * 1000) if start_unix is None else 0
        if speed != FREE and not isinstance(speed, int):
            raise ValueError("the clock's speed must be a whole number or %r, not %r"
                             % (FREE, speed))
        past = self.start_s < int(now)
        self.free = past and speed == FREE
        self._speed = FREE_FALLBACK if self.free else max(1, int(speed)) if past else 1
        self._then_realtime = then_realtime
        self._crash_ms = None if crash_after_s is None else crash_after_s * 1000
        self._rtc_s = UNSET_RTC_S - self.start_s if unset else 0
        self.watchdog = None  # the plug's SimWatchdog, once armed: checked as time moves on
        self._acks = [-1, time.ticks_ms()]  # when the node last heard an ack (real ticks)
        self._patience_ms = ack_patience_ms
        self.ended = False    # the run has reached the present and ended (RunEnded)
        self._anchor()
        if then_realtime and not past:
            print(PRESENT_LINE)  # there from the start

    def _anchor(self):
        self._anchor_ms = self._ms
        self._anchor_real = time.ticks_ms()

    def _wall_ms(self):
        """The host's time in ms since the run began."""
        return int((_wall_s() - self.start_s) * 1000)

    def time_s(self):
        return self.start_s + self._ms // 1000 + self._rtc_s

    def set_time(self, wire_s):
        self._rtc_s = wire_s - self.start_s - self._ms // 1000

    def time_ms(self):
        return self._ms

    def true_s(self):
        return self.start_s + self._ms // 1000

    def ticks_ms(self):
        return self._ms & TICKS_MASK

    def speed(self):
        """N when paced, FREE when free-running."""
        return FREE if self.free else self._speed

    def advance_ms(self, ms):
        """Move node time on by ms at once (tests: a clock they drive by hand)."""
        self._ms += ms

    def wait(self, deadline_s, max_ms, poll_ms=0):
        """Until node time reaches deadline_s (RTC time), or poll_ms of node time pass (if
        given), or max_ms of real time pass, whichever comes first."""
        if self._crash_ms is not None and self._ms >= self._crash_ms:
            raise RuntimeError("simulated crash (sim.json crash_after_s)")
        if self.watchdog is not None:
            self.watchdog.check()
        target = (deadline_s - self._rtc_s - self.start_s) * 1000
        if poll_ms and self._ms + poll_ms < target:
            target = self._ms + poll_ms
        if target <= self._ms:
            return
        world = _waiting_for_the_world(self._acks, self._patience_ms) if self.free else _PACE
        if world == _HOLD:
            time.sleep_ms(HOLD_MS if HOLD_MS < max_ms else max_ms)
            self._anchor()
            return
        if world == _NONE:
            self._ms = target
            self._anchor()
        else:
            elapsed = time.ticks_diff(time.ticks_ms(), self._anchor_real)
            wait_ms = (target - self._anchor_ms) // self._speed - elapsed
            if wait_ms <= max_ms:
                if wait_ms > 0:
                    time.sleep_ms(wait_ms)
                self._ms = target
            else:
                time.sleep_ms(max_ms)
                self._ms = self._anchor_ms + (elapsed + max_ms) * self._speed
        if self._speed > 1:
            self._at_the_present()

    def _at_the_present(self):
        """Once node time has reached the wall clock: end the run, or carry on at real speed."""
        wall_ms = self._wall_ms()
        if self._ms < wall_ms:
            return
        if not self._then_realtime:
            self.ended = True
            raise RunEnded()
        self.free = False
        self._speed = 1
        self._ms = wall_ms
        self._anchor()
        print(PRESENT_LINE)


_NONE = 0
_PACE = 1
_HOLD = 2


def _waiting_for_the_world(acks, patience_ms):
    """What a free-running clock does for the running node (start.node, the node that
    firmware/main.py runs, as the REPL helpers find it): _PACE while its link is down or its
    energy total unsettled, _HOLD while all but an eighth of its RAM ring awaits the
    collector's ack and the collector acknowledged something in the last patience_ms,
    else _NONE. acks: the clock's [the node's ack count when it last changed, real ticks
    then], kept up to date here."""
    node = start.node
    if node is None:
        return _NONE
    now = time.ticks_ms()
    if node.link.acks != acks[0]:
        acks[0], acks[1] = node.link.acks, now
    if not node.link.up or not node.energy.settled:
        return _PACE
    ring = node.ring
    if ring.in_ram() + ring.capacity // 8 < ring.capacity or \
            time.ticks_diff(now, acks[1]) >= patience_ms:
        return _NONE
    return _HOLD
