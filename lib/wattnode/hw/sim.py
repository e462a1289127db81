"""hw/sim.py - the simulated board: a virtual clock, a relay in memory, a network that is up.

SimClock runs node time `speed` times faster than real time from `start` (unix seconds, in
the past), so hours of readings take seconds. Node time is virtual: wait() advances it to
exactly the deadline the node asked for, pacing itself against real time, so a slot closes at
exactly its end whatever the host's load; when the node falls behind, it catches up without
sleeping rather than skipping. When node time reaches the real time, the clock either ends the
run (ended() turns True) or, with then_realtime, carries on at real speed.
Unix port only: it reads the host clock with time.time() (a float, so it allocates).
"""

import os
import time

from wattnode import wire


class SimClock:
    def __init__(self, start_unix=None, speed=1, then_realtime=False):
        wall_ms = self._wall_ms()
        start_ms = wall_ms if start_unix is None else (int(start_unix) - wire.EPOCH_UNIX) * 1000
        self._virt_ms = start_ms
        self._speed = max(1, int(speed)) if start_ms < wall_ms else 1
        self._then_realtime = then_realtime
        self._ended = False
        self._anchor()

    @staticmethod
    def _wall_ms():
        return int((time.time() - wire.EPOCH_UNIX) * 1000)

    def _anchor(self):
        self._anchor_virt_ms = self._virt_ms
        self._anchor_real = time.ticks_ms()

    def time_s(self):
        return self._virt_ms // 1000

    def speed(self):
        return self._speed

    def ended(self):
        return self._ended

    def wait(self, deadline_s, max_ms):
        deadline_ms = deadline_s * 1000
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
    def __init__(self, value=0):
        self._value = value

    def value(self, v=None):
        if v is None:
            return self._value
        self._value = 1 if v else 0


class Board:
    def __init__(self, board, cfg):
        sim = cfg.get("sim", {})
        self.clock = SimClock(sim.get("start"), sim.get("speed", 1), sim.get("then_realtime", False))
        self.relay = SimPin(1)

    def wifi_up(self):
        return True

    def mac(self):
        return b"\x02\x00\x00\x00\x00\x01"  # a locally administered address

    def urandom(self, n):
        return os.urandom(n)
