"""sampler.py - one reading per interval slot, aligned to wall-clock multiples of the interval.

Slot k covers node seconds [k * interval_s, (k + 1) * interval_s). When the clock reaches the
end of a slot, close() ends the meter's measurement window and appends one record to the ring,
stamped with the slot start:
  power   window energy / window length (to the nearest 0.1 W): the slot's mean, so the stored
          series integrates to the meter's energy
  voltage, current   the meter's means over the window
  energy  the node's counter in Wh; the part below 1 Wh is carried in deci-joules, never lost
A window in which the meter gave no valid data yields a record whose values are missing, never
zero; energy the meter counted without a valid window (across a silent chip) still goes into
the counter. The first window after boot may be shorter than a slot; its mean is over what was
measured. If the loop was held up past more than one slot end, every slot the window spans
gets the window's mean (the energy counter stays exact), at most MAX_FILL of them; earlier
ones stay missing. Integers only, nothing allocated per sample.
"""

from wattnode import wire

from micropython import const

MAX_FILL = const(60)
_DJ_PER_WH = const(36000)
_U16_TOP = const(0xFFFE)


def _u16(value):
    if value < 0:
        return wire.U16_MISSING
    return value if value < _U16_TOP else _U16_TOP


class Sampler:
    def __init__(self, meter, ring, interval_s, energy_wh=0, rem_dj=0):
        self.meter = meter
        self.ring = ring
        self.interval_s = interval_s
        self.energy_wh = energy_wh
        self.rem_dj = rem_dj  # the part of the counter below 1 Wh
        self._from_s = 0
        self.slot_end = 0
        self.last_slot = -1  # the last closed slot's start and values, for the state topic
        self.power_dw = wire.POWER_MISSING
        self.voltage_cv = wire.U16_MISSING
        self.current_ma = wire.U16_MISSING
        self.ok = False

    def start(self, now_s):
        """Begin measuring at node time now_s (whole seconds since the wire epoch)."""
        self.meter.take()  # whatever the meter saw before now belongs to no slot
        self._from_s = now_s
        self.slot_end = (now_s // self.interval_s + 1) * self.interval_s

    def close(self, now_s):
        """Close every slot that has ended by now_s; returns how many records it appended."""
        iv = self.interval_s
        meter = self.meter
        self.ok = meter.take()
        span_s = now_s - self._from_s
        self.ok = self.ok and span_s > 0
        energy_dj = meter.win_energy_dj if self.ok else 0
        rem = self.rem_dj + energy_dj + meter.win_orphan_dj
        self.energy_wh += rem // _DJ_PER_WH
        self.rem_dj = rem % _DJ_PER_WH
        if self.ok:
            power_dw = (2 * energy_dj + span_s) // (2 * span_s)
            energy_wh = self.energy_wh
        else:
            power_dw = wire.POWER_MISSING
            energy_wh = wire.ENERGY_MISSING
        voltage_cv = _u16(meter.win_voltage_cv)
        current_ma = _u16(meter.win_current_ma)
        self.power_dw = power_dw
        self.voltage_cv = voltage_cv
        self.current_ma = current_ma
        last_start = (now_s // iv - 1) * iv
        n = (last_start - self.slot_end) // iv + 2
        if n > MAX_FILL:
            n = MAX_FILL
        t = last_start - (n - 1) * iv
        while t <= last_start:
            self.ring.append(t, power_dw, energy_wh, voltage_cv, current_ma)
            t += iv
        self._from_s = now_s
        self.slot_end = last_start + 2 * iv
        self.last_slot = last_start
        return n
