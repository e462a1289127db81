"""meters - the one interface every metering-chip driver offers the sampler.

    meter.poll()     read what the chip has sent or counted since the last poll; cheap, called
                     on every pass of the node loop (at least every LOOP_MS on a plug)
    meter.take()     close the measurement window that began at the previous take() and
                     return True if the chip gave valid data in it; afterwards
                       win_energy_dj   energy in the window, 0.1 J (= 0.1 W for 1 s), or -1
                       win_voltage_cv  mean voltage, 0.01 V, or -1
                       win_current_ma  mean current, mA, or -1
    power_dw, voltage_cv, current_ma   the latest instantaneous values, -1 when unknown

Drivers accumulate with _add() in the units above, integers only: no allocation per poll,
and every quantity stays below 2**30 for windows up to an hour at 3.7 kW.
Chip name -> driver module, imported only when a board asks for it (see create()).
"""


class Meter:
    def __init__(self):
        self.power_dw = -1
        self.voltage_cv = -1
        self.current_ma = -1
        self.win_energy_dj = -1
        self.win_voltage_cv = -1
        self.win_current_ma = -1
        self._energy_dj = 0
        self._energy_n = 0
        self._v_sum = 0
        self._v_n = 0
        self._i_sum = 0
        self._i_n = 0

    def _add(self, energy_dj, voltage_cv, current_ma):
        """One observation; pass -1 for what the chip did not validly report."""
        if energy_dj >= 0:
            self._energy_dj += energy_dj
            self._energy_n += 1
        if voltage_cv >= 0:
            self._v_sum += voltage_cv
            self._v_n += 1
            self.voltage_cv = voltage_cv
        if current_ma >= 0:
            self._i_sum += current_ma
            self._i_n += 1
            self.current_ma = current_ma

    def take(self):
        self.win_energy_dj = self._energy_dj if self._energy_n else -1
        self.win_voltage_cv = (self._v_sum + self._v_n // 2) // self._v_n if self._v_n else -1
        self.win_current_ma = (self._i_sum + self._i_n // 2) // self._i_n if self._i_n else -1
        self._energy_dj = self._energy_n = 0
        self._v_sum = self._v_n = self._i_sum = self._i_n = 0
        return self.win_energy_dj >= 0

    def poll(self):
        raise NotImplementedError


def create(board, hw, cfg):
    """The driver for board["chip"]."""
    chip = board.get("chip")
    if chip == "sim":
        from wattnode.meters.sim import SimMeter
        return SimMeter(hw.clock, cfg.get("sim", {}).get("profile", "constant"))
    raise ValueError("board %r: no driver for chip %r" % (board.get("name"), chip))
