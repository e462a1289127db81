"""meter.py - a meter that measures a simulated appliance exactly: the driver of chip "sim".

Covers: the simulated board (boards/sim.json). Each poll integrates the profile (profiles.py)
second by second from the previous poll up to the clock's current whole second of true time
(the load follows true time, whatever the plug's RTC says), so a window's energy is exactly
the sum of the profile's per-second power over it, whatever the polling rhythm, and the mean
voltage and current are the means of the per-second values. That exactness is what lets the
end-to-end tests compute every stored slot independently. While the plug's relay is open
(the board calls switch()) the load draws nothing: 0 W and 0 A at the mains voltage;
the seconds before a switch are counted in the old state first, the second it happens in and
those after in the new one.
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
        self._t = clock.true_s()

    def switch(self, on, t_ms):
        """The relay powers the load (on) or not, from the present second."""
        self.poll()
        self.powered = on

    def poll(self):
        now = self._clock.true_s()
        t = self._t
        while t < now:
            p = self.profile.power_dw(t) if self.powered else 0
            v = voltage_cv(t)
            i = self.profile.current_ma(p, v)
            self._add(p, v, i)  # p (0.1 W) for one second is p deci-joules
            self.power_dw = p
            t += 1
        self._t = t


def create(board, hw, cal):
    """meters.DRIVERS["sim"]: the simulated board's profile, measured on its clock, powered
    through its relay."""
    meter = SimMeter(hw.clock, hw.profile)
    hw.loads.append(meter)
    return meter
