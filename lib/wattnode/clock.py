"""clock.py - the node's wall time: never guessed, set from the LAN, steps noticed.

A reading is never stamped by an unset clock. After a power cut the ESP32's RTC restarts at
2000-01-01, so any time before VALID_FROM_S counts as unknown; after a soft or watchdog reset
the RTC kept running and the time is known at once.
Sources, in order of trust:
  ntp        config "ntp_host": a server on the LAN (a plug firewalled off the internet has no
             pool server; MicroPython's ntptime defaults to one). Tried every RETRY_S until it
             answers, then every RESYNC_S.
  collector  the collector's clock, carried in its answer to the plug's "online"
             (set_from_collector): a fallback that only makes an unknown time known. With an
             NTP server configured it waits NTP_GRACE_S after boot for NTP to answer first,
             then uses the collector's time advanced by the ticks since it came. A known clock
             that disagrees with it by more than DISAGREE_S is reported, never stepped
             (`disagreement_s`): correcting drift is NTP's job.
Until the time is known the meter keeps measuring and the sampler waits: the window since
boot is stamped onto the right slots once the time is known (sampler.start(held_since=...)).
A step - the wall clock moving more than STEP_S away from the tick counter, as when NTP
corrects a drifted RTC - is reported by check_step(); the sampler never writes duplicate or
backward slots whatever the clock does.
"""

from time import ticks_add, ticks_diff

from micropython import const

VALID_FROM_S = const(126230400)  # 2024-01-01 in seconds since 2020: earlier = unset RTC
RETRY_S = const(30)
RESYNC_S = const(3600)
STEP_S = const(2)
NTP_GRACE_S = const(150)  # five NTP attempts RETRY_S apart
DISAGREE_S = const(60)


class TimeKeeper:
    def __init__(self, hw, ntp_host=None):
        self._hw = hw
        self._clock = hw.clock
        self._ntp_host = ntp_host
        self.known = self._clock.time_s() >= VALID_FROM_S
        self.source = "rtc" if self.known else None
        self.syncs = 0
        self.disagreement_s = 0
        self._boot_ms = self._clock.ticks_ms()
        self._pending_s = -1      # a collector time waiting for NTP's grace to end
        self._pending_ms = 0
        self._next_ntp_ms = self._clock.ticks_ms()
        self._last_wall = self._clock.time_s()
        self._last_ticks = self._clock.ticks_ms()

    def now(self):
        """Wall time in seconds since the wire epoch, or -1 while it is unknown."""
        return self._clock.time_s() if self.known else -1

    def service(self, wifi_up):
        """Ask the NTP server when it is due; when NTP has had its grace and the time is
        still unknown, take the collector's time that waited for it (advanced by the ticks
        since it came). True when this call made the time known."""
        ticks = self._clock.ticks_ms()
        if self._ntp_host and wifi_up and ticks_diff(ticks, self._next_ntp_ms) >= 0:
            if self._ntp(ticks):
                return True
        if not self.known and self._pending_s >= 0 and self._grace_over(ticks):
            return self._from_collector(self._pending_s + ticks_diff(ticks, self._pending_ms) // 1000)
        return False

    def _ntp(self, ticks):
        was = self.known
        try:
            self._hw.ntp(self._ntp_host)
        except OSError:
            self._next_ntp_ms = ticks_add(ticks, RETRY_S * 1000)
            return False
        self.syncs += 1
        self.known = True
        self.source = "ntp"
        self._pending_s = -1
        self._next_ntp_ms = ticks_add(ticks, RESYNC_S * 1000)
        if not was:
            self._rebase()  # the jump from an unset RTC is not a step
        return not was

    def _grace_over(self, ticks):
        return not self._ntp_host or ticks_diff(ticks, self._boot_ms) >= NTP_GRACE_S * 1000

    def set_from_collector(self, wire_s):
        """The collector's clock; True when it made the time known."""
        if wire_s < VALID_FROM_S:
            return False
        if self.known:
            diff = wire_s - self._clock.time_s()
            if diff > DISAGREE_S or diff < -DISAGREE_S:
                self.disagreement_s = diff
            return False
        ticks = self._clock.ticks_ms()
        if not self._grace_over(ticks):
            self._pending_s = wire_s
            self._pending_ms = ticks
            return False
        return self._from_collector(wire_s)

    def _from_collector(self, wire_s):
        self._clock.set_time(wire_s)
        self.known = True
        self.source = "collector"
        self._pending_s = -1
        self._rebase()
        return True

    def _rebase(self):
        self._last_wall = self._clock.time_s()
        self._last_ticks = self._clock.ticks_ms()

    def check_step(self):
        """Seconds the wall clock jumped since the last call (0 if it kept pace)."""
        wall = self._clock.time_s()
        ticks = self._clock.ticks_ms()
        step = (wall - self._last_wall) - (ticks_diff(ticks, self._last_ticks) + 500) // 1000
        self._last_wall = wall
        self._last_ticks = ticks
        return step if self.known and (step > STEP_S or step < -STEP_S) else 0
