"""bl0937.py - a simulated BL0937 or HLW8012 (chips.py): CF pulses = energy / quantum on a
counter; CF1 pulses at a rate set by the voltage or the current, chosen by the SEL pin, the
old quantity lingering for SETTLE_MS after a switch (as the real chip does).
"""

from wattsim.chips import Chip
from wattsim.parts import SimCounter

SETTLE_MS = 300


class SimBL0937(Chip):
    def __init__(self, clock, profile, board, faults, pin):
        super().__init__(clock, profile, board, faults)
        meter = board["meter"]
        pins = board["pins"]
        self._cf_pin = pins["cf"]
        self._cf1_pin = pins["cf1"]
        self._sel = pin(pins["sel"])
        level = 1 if board["chip"] == "bl0937" else 0
        self._sel_voltage = level ^ (1 if board.get("inverted", {}).get("sel") else 0)
        self._cf_uj100 = int(meter["power_w_per_hz"] * 10000 + 0.5)
        self._k_v = int(meter["voltage_v_per_hz"] * 100000 + 0.5)   # cV x ms per CF1 pulse
        self._k_i = int(meter["current_a_per_hz"] * 1000000 + 0.5)  # mA x ms per CF1 pulse
        now = clock.time_ms()
        self._cf1_ms = now
        self._cf1_acc = 0
        self._cf1 = 0
        self._shows_voltage = self._sel.value() == self._sel_voltage
        self._switch_ms = -1  # when SEL last asked for the other quantity, -1 if it has not

    def counter(self, pin, _pin_obj):
        if pin == self._cf_pin:
            return SimCounter(self._cf_count)
        if pin == self._cf1_pin:
            return SimCounter(self._cf1_count)
        raise ValueError("GPIO%d is neither CF nor CF1 on this board" % pin)

    def _cf_count(self):
        return self.pulses(self._cf_uj100, 0)

    def _cf1_count(self):
        t = self.clock.time_ms()
        if (self._sel.value() == self._sel_voltage) == self._shows_voltage:
            self._switch_ms = -1
        elif self._switch_ms < 0:
            self._switch_ms = t  # the chip starts to follow SEL: the old quantity lingers
        elif t - self._switch_ms >= SETTLE_MS:
            self._shows_voltage = not self._shows_voltage
            self._switch_ms = -1
        dt = t - self._cf1_ms
        self._cf1_ms = t
        if self.silent or dt <= 0:
            return self._cf1
        if self._shows_voltage:
            self._cf1_acc += self.truth.voltage_cv(t) * dt
            k = self._k_v
        else:
            self._cf1_acc += self.truth.current_ma(t) * dt
            k = self._k_i
        self._cf1 += self._cf1_acc // k + self.storm_hz * dt // 1000
        self._cf1_acc %= k
        return self._cf1
