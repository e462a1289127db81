"""parts.py - what the simulated chips are made of: the load they measure (Truth), a hardware
pulse counter (SimCounter), and a UART as the driver sees it (SimUART).

Integers only, so the drivers' no-allocation tests can run against them: times are node ms
since the run began (clock.time_ms()), small ints on a 32-bit port too; energies are too
once a run has counted more than 2**30 x 100 uJ (30 Wh), which only long runs do.
"""

from wattsim.profiles import Profile, voltage_cv


class Truth:
    """What the load really does at node time t_ms: power, voltage, current, and the energy
    since `start_ms`. origin_s is the true second (since the wire epoch) at t_ms = 0: the
    profile is a function of true time. While the relay is open (switch()) it draws nothing:
    0 W, 0 A; the voltage is the mains'."""

    def __init__(self, profile, origin_s, start_ms, error):
        self.profile = Profile(profile)
        self._origin_s = origin_s
        self._err_p = int(error.get("power", 1.0) * 4096)
        self._err_v = int(error.get("voltage", 1.0) * 4096)
        self._err_i = int(error.get("current", 1.0) * 4096)
        self.powered = True
        s = start_ms // 1000
        self._s = s
        self._acc = -self._p(s) * (start_ms % 1000)  # so that energy(start_ms) == 0

    def _p(self, s):
        if not self.powered:
            return 0
        return self.profile.power_dw(self._origin_s + s) * self._err_p >> 12

    def switch(self, on, t_ms):
        """The relay powers the load (on) or not from t_ms: the energy drawn until then keeps
        the old state, to the millisecond."""
        s = t_ms // 1000
        self.energy_uj100(t_ms)  # the whole seconds before s, in the old state
        before = self._p(s)
        self.powered = on
        self._acc += (before - self._p(s)) * (t_ms % 1000)  # second s: the old power until t_ms

    def power_dw(self, t_ms):
        return self._p(t_ms // 1000)

    def voltage_cv(self, t_ms):
        return voltage_cv(self._origin_s + t_ms // 1000) * self._err_v >> 12

    def current_ma(self, t_ms):
        if not self.powered:
            return 0
        s = self._origin_s + t_ms // 1000
        return self.profile.current_ma(self.profile.power_dw(s), voltage_cv(s)) * self._err_i >> 12

    def energy_uj100(self, t_ms):
        """Energy since start in 100 uJ (0.1 W for 1 ms); t_ms must not go backwards."""
        s = t_ms // 1000
        while self._s < s:
            self._acc += self._p(self._s) * 1000
            self._s += 1
        return self._acc + self._p(s) * (t_ms % 1000)


class SimCounter:
    """A hardware pulse counter: take() returns the pulses since the previous take()."""

    def __init__(self, source):
        self._source = source
        self._last = source()

    def take(self):
        c = self._source()
        n = c - self._last
        self._last = c
        return n


class SimUART:
    """A UART as the driver sees it: a receive buffer filled by the chip, writes to the chip.
    Opened with settings the chip does not use (a board file that does not match the plug),
    it receives what a real UART would: garbled bytes, and the chip never hears a request."""

    def __init__(self, chip, rxbuf=256, garbled=False):
        self._chip = chip
        self._buf = bytearray(rxbuf)
        self._n = 0
        self.dropped = 0
        self.garbled = garbled

    def push(self, data, length):
        for i in range(length):
            if self._n < len(self._buf):
                self._buf[self._n] = (data[i] * 37 + 11) & 0xFF if self.garbled else data[i]
                self._n += 1
            else:
                self.dropped += 1

    def free(self):
        return len(self._buf) - self._n

    def any(self):
        self._chip.produce(self)
        return self._n

    def readinto(self, buf, nbytes=None):
        self._chip.produce(self)
        n = min(len(buf) if nbytes is None else nbytes, self._n)
        for i in range(n):
            buf[i] = self._buf[i]
        for i in range(self._n - n):
            self._buf[i] = self._buf[n + i]
        self._n -= n
        return n

    def write(self, data):
        if not self.garbled:
            self._chip.on_write(self, data)
        return len(data)


def put24be(f, i, v):
    f[i] = v >> 16 & 0xFF
    f[i + 1] = v >> 8 & 0xFF
    f[i + 2] = v & 0xFF


def put24le(f, i, v):
    f[i] = v & 0xFF
    f[i + 1] = v >> 8 & 0xFF
    f[i + 2] = v >> 16 & 0xFF
