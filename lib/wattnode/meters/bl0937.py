"""meters/bl0937.py - BL0937 and HLW8012: pulse-output metering chips.

Plugs: Shelly Plus Plug S, Nous A8T (BL0937); older Sonoff POW and many Tuya plugs (HLW8012).
Bus: no bus, three pins.
  CF   pulse rate proportional to active power; each pulse is a fixed quantum of energy
       (board "meter.power_w_per_hz": W per Hz = J per pulse; Tasmota's BL0937 default 1.7066)
  CF1  pulse rate proportional to voltage (V/Hz, default 0.1603) or current (A/Hz, 0.01155)
  SEL  chooses what CF1 shows: BL0937 SEL=1 voltage, SEL=0 current; HLW8012 the other way;
       a board may invert SEL again in its wiring ("inverted": {"sel": true})
A 2 kW load gives about 1.2 kHz on CF: both CF and CF1 are counted in hardware (PCNT through
the hardware layer; Pin.irq loses edges at kHz rates on the ESP32), and the driver reads how
many pulses came since the last poll. Energy is exact: pulses x quantum, remainder carried.

Quirks, with their evidence
- After SEL changes, CF1 keeps showing the old quantity for a while (datasheet; Tasmota and
  ESPHome wait): CF1 pulses of the first SETTLE_MS after a switch are thrown away.
- At very low power CF pulses are 10 s or more apart (1 W is one pulse per 1.7 s): the shown
  power falls to 0 after ZERO_MS without a pulse (Tasmota does the same at 10 s); energy does
  not depend on it, the pulses are counted whenever they come.
- The chip has no "I am alive" signal but its pulses: a voltage phase with no CF1 pulse at all
  means the chip is silent (mains is always there while the plug runs), and invalidates the
  window. A burst faster than the plug can meter (interference, a loose pin) is a "rate" fault
  and its pulses are not counted.
"""

from time import ticks_diff

from micropython import const

from wattnode.meters import RATE, SILENT, Meter

SETTLE_MS = const(300)
MEASURE_MS = const(700)
ZERO_MS = const(10000)
_POWER_WINDOW_MS = const(1000)
_CURRENT = const(0)
_VOLTAGE = const(1)


class BL0937(Meter):
    poll_ms = 200

    def __init__(self, board, hw, cal):
        super().__init__(hw, cal)
        pins = board["pins"]
        meter = board["meter"]
        inverted = board.get("inverted", {})
        self._cf = hw.counter(pins["cf"])
        self._cf1 = hw.counter(pins["cf1"])
        self._sel = hw.output(pins["sel"], 0)
        level = 1 if board["chip"] == "bl0937" else 0
        self._sel_voltage = level ^ (1 if inverted.get("sel") else 0)
        # 100 uJ per CF pulse; cV and mA per (CF1 pulse per ms); gains folded in
        self._cf_uj100 = int(meter["power_w_per_hz"] * 10000 * cal.power_gain + 0.5)
        self._v_k = int(meter["voltage_v_per_hz"] * 100000 * cal.voltage_gain + 0.5)
        self._i_k = int(meter["current_a_per_hz"] * 1000000 * cal.current_gain + 0.5)
        max_w = meter.get("max_power_w", 6000)
        self._max_cf_hz = int(max_w / meter["power_w_per_hz"]) + 1
        self._max_cf1_hz = int(max(400 / meter["voltage_v_per_hz"],
                                   40 / meter["current_a_per_hz"])) + 1
        now = self._clock.ticks_ms()
        self._last_ms = now
        self._pulse_ms = now       # when the last CF pulse came
        self._pw_start_ms = now    # window for the shown power
        self._pw_pulses = 0
        self.power_dw = 0
        self._mode = _VOLTAGE
        self._phase_ms = now
        self._measure_ms = now
        self._settled = False
        self._cf1_pulses = 0
        self._switch(now, _VOLTAGE)

    def _switch(self, now, mode):
        self._mode = mode
        self._sel.value(self._sel_voltage if mode == _VOLTAGE else 1 - self._sel_voltage)
        self._cf1.take()
        self._phase_ms = now
        self._settled = False
        self._cf1_pulses = 0

    def poll(self):
        now = self._clock.ticks_ms()
        dt = ticks_diff(now, self._last_ms)
        if dt <= 0:
            return
        self._last_ms = now
        n = self._cf.take()
        if n * 1000 > self._max_cf_hz * dt:
            self.fault(RATE)  # a burst no load can cause: count nothing from it
        else:
            self._count(n, now)
        self._cf1_poll(now)

    def _count(self, n, now):
        if n:
            self._pulse_ms = now
            self._pw_pulses += n
        span = ticks_diff(now, self._pw_start_ms)
        if span >= _POWER_WINDOW_MS and self._pw_pulses:
            self.power_dw = self._pw_pulses * self._cf_uj100 // span  # 100 uJ/ms = 0.1 W
            self._pw_start_ms = now
            self._pw_pulses = 0
        elif ticks_diff(now, self._pulse_ms) > ZERO_MS:
            self.power_dw = 0
            self._pw_start_ms = now
        e = self.to_dj(n, self._cf_uj100)
        self._add(self._cal.scale(e, self._cal.power_q12(self.power_dw)), -1, -1)

    def _cf1_poll(self, now):
        m = self._cf1.take()
        if not self._settled:
            if ticks_diff(now, self._phase_ms) >= SETTLE_MS:
                self._settled = True  # pulses so far belonged to the previous quantity
                self._measure_ms = now
            return
        self._cf1_pulses += m
        span = ticks_diff(now, self._measure_ms)
        if span < MEASURE_MS:
            return
        n = self._cf1_pulses
        if n * 1000 > self._max_cf1_hz * span:
            self.fault(RATE)
        elif self._mode == _VOLTAGE:
            if n == 0:
                self.fault(SILENT)
            else:
                self._add(-1, n * self._v_k // span, -1)
        else:
            self._add(-1, -1, n * self._i_k // span)
        self._switch(now, _CURRENT if self._mode == _VOLTAGE else _VOLTAGE)
