"""meter.py - a meter that measures a simulated appliance exactly: the driver of chip "sim".

Covers: the simulated board (boards/sim.json). Each poll integrates the profile (profiles.py)
from the previous poll up to the clock's millisecond of true time (the load follows true time,
whatever the plug's RTC says; its power is constant through each true second): a window's
energy is exactly the profile's power over the window's true milliseconds, whatever the
polling rhythm, so a window of whole seconds (every slot but a boot's first) holds exactly
the sum of the profile's per-second power, and the first one, from a boot in the middle of a
second, only what came after the boot. The energy below a deci-joule is carried to the next
poll, never lost. The mean voltage and current are the means of the per-second values of the
seconds the window completed, each counted once however many polls a second took (or of the
second it began in, for a window that completed none: take() adds it). That exactness is
what lets the end-to-end tests compute every stored slot independently. While the plug's
relay is open (the board calls switch()) the load draws nothing: 0 W and 0 A at the mains
voltage; the time before a switch is counted in the old state, from its millisecond on in the
new one.
"""

from wattnode.meters import Meter
from wattsim.profiles import Profile, voltage_cv


class SimMeter(Meter):
    poll_ms = 0  # exact at any polling rhythm: polled at slot ends only, so fast runs stay fast

    def __init__(self, clock, profile):
        super().__init__()
        self._clock = clock
        self.profile = Profile(profile)
        self.powered = True
        self._ms = clock.time_ms()  # node ms integrated up to
        self._rem = 0               # energy below 1 dJ carried, in 0.1 W x ms
        self._began_cv = -1  # the voltage and current of the second the window began in,
        self._began_ma = -1  # while it has completed no second (-1: none)

    def switch(self, on, t_ms):
        """The relay powers the load (on) or not, from the present millisecond."""
        self.poll()
        self.powered = on

    def poll(self):
        now = self._clock.time_ms()
        start_s = self._clock.true_s() - now // 1000  # the true second of node ms 0
        ms = self._ms
        while ms < now:
            s = ms // 1000
            end = (s + 1) * 1000 if (s + 1) * 1000 < now else now
            p = self.profile.power_dw(start_s + s) if self.powered else 0
            e = self._rem + p * (end - ms)  # p (0.1 W) for 1000 ms is p deci-joules
            self._rem = e % 1000
            v = voltage_cv(start_s + s)
            if end % 1000 == 0:  # a second completed: its values, once
                self._add(e // 1000, v, self.profile.current_ma(p, v))
            else:  # a part: its energy; its values only when it completes (a later poll)
                self._add(e // 1000, -1, -1)
                if not self._v_n and self._began_cv < 0:
                    self._began_cv = v
                    self._began_ma = self.profile.current_ma(p, v)
            self.power_dw = p
            ms = end
        self._ms = ms

    def take(self):
        if not self._v_n and self._began_cv >= 0:  # within one second: the one it began in
            self._add(-1, self._began_cv, self._began_ma)
        self._began_cv = self._began_ma = -1
        return super().take()


def create(board, hw, cal):
    """meters.DRIVERS["sim"]: the simulated board's profile, measured on its clock, powered
    through its relay."""
    meter = SimMeter(hw.clock, hw.profile)
    hw.loads.append(meter)
    return meter
