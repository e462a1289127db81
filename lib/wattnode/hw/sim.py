"""hw/sim.py - the simulated board: the hardware layer of hw/__init__.py on the unix port.

SimClock runs node time `speed` times faster than real time from `start` (unix seconds, in
the past), so hours of readings take seconds. Node time is virtual: wait() advances it to
exactly the deadline the node asked for, pacing itself against real time, so a slot closes at
exactly its end whatever the host's load; when the node falls behind, it catches up without
sleeping rather than skipping. When node time reaches the real time, the clock either ends the
run (ended() turns True) or, with then_realtime, carries on at real speed. ticks_ms() counts
node time, so drivers measure pulse rates in node time at any speed.

Board emulates any board file: its meter pins and UART are wired to a simulated chip
(hw/simchips.py) that measures the load profile named in config.json ("sim": {"profile"}),
with the faults named there ("sim": {"faults": {...}}); "crash_after_s" makes the loop raise
after that much node time, to exercise crash handling; "ntp_after_s" starts the RTC unset
(as after a power cut) with an NTP server that answers only after that much node time. RTC memory lives in a file that
survives a reset (the process restarting) but not a power cut (simnode --power-cut deletes it).
The watchdog counts node time and resets the plug when starved (SimWatchdog). "repl": true
makes a Ctrl-C hand the plug to the REPL as on a plug (tools/fakeboard); without it Ctrl-C is
how tools/simnode ends the process, and the node drains first.
Unix port only: it reads the host clock with time.time() (a float, so it allocates).
"""

import os
import time

from wattnode import wire

TICKS_MASK = 0x3FFFFFFF  # time.ticks_diff() works modulo 2**30 on every port


class SimClock:
    def __init__(self, start_unix=None, speed=1, then_realtime=False, crash_after_s=None,
                 unset=False):
        wall_ms = self._wall_ms()
        start_ms = wall_ms if start_unix is None else (int(start_unix) - wire.EPOCH_UNIX) * 1000
        self._virt_ms = start_ms
        self._speed = max(1, int(speed)) if start_ms < wall_ms else 1
        self._then_realtime = then_realtime
        self._ended = False
        self.watchdog = None  # the plug's SimWatchdog, once armed: checked as time moves on
        self._crash_ms = None if crash_after_s is None else start_ms + crash_after_s * 1000
        # the RTC's error: an ESP32 after a power cut reads 2000-01-01 until its time is set
        self._rtc_ms = -631152000000 - start_ms if unset else 0
        self._anchor()

    @staticmethod
    def _wall_ms():
        return int((time.time() - wire.EPOCH_UNIX) * 1000)

    def _anchor(self):
        self._anchor_virt_ms = self._virt_ms
        self._anchor_real = time.ticks_ms()

    def time_s(self):
        """What the plug's RTC says, in seconds since the wire epoch."""
        return (self._virt_ms + self._rtc_ms) // 1000

    def set_time(self, wire_s):
        self._rtc_ms = wire_s * 1000 - self._virt_ms

    def time_ms(self):
        """True time in ms since the wire epoch (a big int: simulation only)."""
        return self._virt_ms

    def true_s(self):
        """True time in seconds: what simulated loads follow, whatever the RTC says."""
        return self._virt_ms // 1000

    def ticks_ms(self):
        return self._virt_ms & TICKS_MASK

    def speed(self):
        return self._speed

    def ended(self):
        return self._ended

    def wait(self, deadline_s, max_ms, poll_ms=0):
        """Until node time reaches deadline_s, or poll_ms of node time pass (if given), or
        max_ms of real time pass, whichever comes first."""
        if self._crash_ms is not None and self._virt_ms >= self._crash_ms:
            raise RuntimeError("simulated crash (sim.crash_after_s)")
        if self.watchdog is not None:
            self.watchdog.check()
        deadline_ms = deadline_s * 1000 - self._rtc_ms
        if poll_ms and self._virt_ms + poll_ms < deadline_ms:
            deadline_ms = self._virt_ms + poll_ms
        if deadline_ms <= self._virt_ms:
            return
        elapsed = time.ticks_diff(time.ticks_ms(), self._anchor_real)
        wait_ms = (deadline_ms - self._anchor_virt_ms) // self._speed - elapsed
        if wait_ms <= max_ms:
            if wait_ms > 0:
                time.sleep_ms(wait_ms)
            self._virt_ms = deadline_ms
        else:
            time.sleep_ms(max_ms)
            self._virt_ms = self._anchor_virt_ms + (elapsed + max_ms) * self._speed
        if self._speed > 1:
            wall_ms = self._wall_ms()
            if self._virt_ms >= wall_ms:
                if self._then_realtime:
                    self._speed = 1
                    self._virt_ms = wall_ms
                    self._anchor()
                else:
                    self._ended = True


class SimPin:
    """A GPIO: what the node writes, the simulated chip reads (SEL), and the other way round."""

    def __init__(self, value=0):
        self._value = value

    def value(self, v=None):
        if v is None:
            return self._value
        self._value = 1 if v else 0

    def on(self):
        self._value = 1

    def off(self):
        self._value = 0


class SimPixel:
    """One WS2812 LED."""

    def __init__(self):
        self.rgb = (0, 0, 0)

    def colour(self, rgb):
        self.rgb = rgb


class SimRTCMemory:
    """machine.RTC().memory(): kept in a file, so it survives the node process restarting."""

    def __init__(self, path):
        self.path = path

    def read(self):
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except OSError:
            return b""

    def write(self, data):
        with open(self.path, "wb") as f:
            f.write(data)


class SimWatchdog:
    """machine.WDT in node time, one per plug: a new one re-arms it with its own timeout, as on
    an ESP32. The clock checks it as each wait() begins, not within a wait (the node's loop
    feeds it before each wait, and a wait may jump a whole slot of node time where a plug's
    loop would feed it every LOOP_MS): unfed for more than timeout_ms of node time by then,
    the plug resets (reset())."""

    def __init__(self, clock, timeout_ms, reset):
        self.timeout_ms = timeout_ms
        self.feeds = 0
        self._clock = clock
        self._reset = reset
        self._fed_ms = clock.time_ms()
        clock.watchdog = self

    def feed(self):
        self.feeds += 1
        self._fed_ms = self._clock.time_ms()

    def check(self):
        starved_ms = self._clock.time_ms() - self._fed_ms
        if starved_ms > self.timeout_ms:
            print("watchdog: not fed for %d ms of node time (timeout %d ms): the plug resets"
                  % (starved_ms, self.timeout_ms))
            self._reset()


class Board:
    def __init__(self, board, cfg, flash_dir="."):
        sim = cfg.get("sim", {})
        self.repl = bool(sim.get("repl"))  # a REPL follows Ctrl-C, as on a plug (start.stopped())
        self.clock = SimClock(sim.get("start"), sim.get("speed", 1), sim.get("then_realtime", False),
                              sim.get("crash_after_s"), "ntp_after_s" in sim)
        self._ntp_ms = None
        if "ntp_after_s" in sim:  # the RTC starts unset; NTP answers after that much time
            self._ntp_ms = self.clock.time_ms() + sim["ntp_after_s"] * 1000
        self.pins = {}
        self.chip = None
        chip = board.get("chip")
        if chip and chip != "sim":
            from wattnode.hw.simchips import create
            self.chip = create(chip, self.clock, sim.get("profile", "constant"),
                               board, sim.get("faults", {}), self.pin)
        self.rtc = SimRTCMemory(os.getenv("WATTNODE_RTC") or flash_dir + "/.rtc-memory")

    def pin(self, number, value=None):
        """The simulated GPIO `number`, shared by the node and the simulated chip."""
        p = self.pins.get(number)
        if p is None:
            p = self.pins[number] = SimPin(0 if value is None else value)
        elif value is not None:
            p.value(value)
        return p

    def output(self, number, value):
        return self.pin(number, value)

    def input(self, number, pull_up=False):
        return self.pin(number, 1 if pull_up else None)

    def pixel(self, number):
        return SimPixel()

    def uart(self, rx, tx, baud, parity):
        return self.chip.uart(rx, tx, baud, parity)

    def counter(self, pin):
        return self.chip.counter(pin, self.pin(pin))

    def watchdog(self, timeout_ms):
        return SimWatchdog(self.clock, timeout_ms, self.reset)

    def wifi_up(self):
        return True

    def ntp(self, host):
        """Set the RTC from the LAN's NTP server; OSError when it does not answer (yet)."""
        if self._ntp_ms is not None and self.clock.time_ms() < self._ntp_ms:
            raise OSError("no answer from NTP server %s" % host)
        self.clock.set_time(self.clock.time_ms() // 1000)

    def mac(self):
        return b"\x02\x00\x00\x00\x00\x01"  # a locally administered address

    def urandom(self, n):
        return os.urandom(n)

    def reset(self, soft=False):
        """The process ends with start.RESET_EXIT; tools/simnode starts it again, like a
        plug rebooting (RTC memory, in its file, survives; a power cut deletes it)."""
        import sys
        from wattnode.start import RESET_EXIT
        sys.exit(RESET_EXIT)
