"""sampler.py - one reading per interval slot, aligned to wall-clock multiples of the interval.

Slot k covers node seconds [k * interval_s, (k + 1) * interval_s). When the clock reaches the
end of a slot, close() ends the meter's measurement window and appends one record to the ring,
stamped with the slot start:
  power   window energy / window length in milliseconds (to the nearest 0.1 W): the slot's
          mean, so the stored series integrates to the meter's energy; the first slot after a
          boot covers only the part of it after the boot, and its mean is over that part
  voltage, current   the meter's means over the window
  energy  the node's counter in Wh; the part below 1 Wh is carried in deci-joules, never lost
A window in which the meter gave no valid data yields a record whose values are missing, never
zero; energy the meter counted without a valid window (across a silent chip) still goes into
the counter.

Time: a window's length comes from the monotonic tick counter, never from the wall clock, and
its slots from where it really lies on the wall clock: [now - length, now]. So
  - a window that spans several slots (the loop was held up, or readings were held before
    the clock was first set: start(..., held_since=boot ticks)) gives each of them the
    window's mean, at most MAX_FILL of them; earlier ones stay missing (the energy counter
    stays exact);
  - a clock stepped forward yields one record in the new time, not a run of invented slots;
  - no record is ever stamped at or before the last one: after a step back, the window grows
    until the wall clock passes the last slot again (nothing is lost, nothing duplicated).
raise_total() adds to the counter, and to this boot's records in the ring, when the total turns
out to resume higher (energy.py: settled after a power cut, before any record was sent; the
spill writes none of them to flash before: spill.py).
Integers only, nothing allocated per sample.
"""

import struct
from time import ticks_diff

from wattnode import wire

from micropython import const

MAX_FILL = const(360)
_DJ_PER_WH = const(36000)
_U16_TOP = const(0xFFFE)
_MS_EXACT = const(1 << 19)  # windows up to 524 s: their mean from the exact length, in small ints


def _mean_dw(energy_dj, span_ms):
    """energy_dj / span_ms in 0.1 W (dJ / s = dW), rounded, in small ints on a 32-bit port:
    the remainder times 2000 stays below 2**30 for spans under _MS_EXACT; a longer window (a
    held-up loop spanning many slots) takes whole seconds, 0.1 % at most from its length."""
    if span_ms < _MS_EXACT:
        q = energy_dj // span_ms
        return q * 1000 + ((energy_dj - q * span_ms) * 2000 + span_ms) // (2 * span_ms)
    span_s = (span_ms + 500) // 1000
    return (2 * energy_dj + span_s) // (2 * span_s)


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
        self._from_ticks = 0
        self.slot_end = 0
        self.last_slot = -1  # the last closed slot's start and values, for the state topic
        self.first_slot = -1  # the first slot appended
        self._seq = -1        # ring.next after the last close's records (sync())
        self.power_dw = wire.POWER_MISSING
        self.voltage_cv = wire.U16_MISSING
        self.current_ma = wire.U16_MISSING
        self.ok = False

    def start(self, now_s, ticks, held_since=None):
        """Begin slotting at wall time now_s. With held_since (the ticks when the meter began
        measuring, before the clock was known) that window is kept and closed at once onto the
        slots it covered; otherwise whatever the meter saw before now belongs to no slot."""
        self._seq = self.ring.next
        if held_since is None:
            self.meter.take()
            self._from_ticks = ticks
            self.slot_end = (now_s // self.interval_s + 1) * self.interval_s
        else:
            self._from_ticks = held_since
            self.slot_end = now_s

    def close(self, now_s, ticks):
        """Close the window at wall time now_s; returns how many records it appended (0 when
        no slot after the last one has ended yet: the window goes on)."""
        iv = self.interval_s
        self.sync()
        span_ms = ticks_diff(ticks, self._from_ticks)
        span_s = (span_ms + 500) // 1000
        last_start = (now_s // iv - 1) * iv
        if last_start <= self.last_slot or span_s <= 0:
            self.slot_end = (now_s // iv + 1) * iv if last_start > self.last_slot \
                else self.last_slot + 2 * iv
            return 0
        first = (now_s - span_s) // iv * iv
        if first <= self.last_slot:
            first = self.last_slot + iv
        if last_start - first >= MAX_FILL * iv:
            first = last_start - (MAX_FILL - 1) * iv
        meter = self.meter
        self.ok = meter.take()
        energy_dj = meter.win_energy_dj if self.ok else 0
        rem = self.rem_dj + energy_dj + meter.win_orphan_dj
        self.energy_wh += rem // _DJ_PER_WH
        self.rem_dj = rem % _DJ_PER_WH
        if self.ok:
            power_dw = _mean_dw(energy_dj, span_ms)
            energy_wh = self.energy_wh
        else:
            power_dw = wire.POWER_MISSING
            energy_wh = wire.ENERGY_MISSING
        voltage_cv = _u16(meter.win_voltage_cv)
        current_ma = _u16(meter.win_current_ma)
        self.power_dw = power_dw
        self.voltage_cv = voltage_cv
        self.current_ma = current_ma
        if self.first_slot < 0:
            self.first_slot = first
        t = first
        while t <= last_start:
            self.ring.append(t, power_dw, energy_wh, voltage_cv, current_ma)
            t += iv
        self._seq = self.ring.next
        self._from_ticks = ticks
        self.slot_end = last_start + 2 * iv
        self.last_slot = last_start
        return (last_start - first) // iv + 1

    def sync(self):
        """After a close cut between or inside its appends (a Ctrl-C: a KeyboardInterrupt comes
        between any two bytecodes, and the plug carries on from the REPL, or stops and says
        its status): last_slot is the ring's newest record, so no slot is appended twice and
        a status's readings equal its slots (a plug of the fault suite stopped mid-catch-up said
        2479 of 2478). Nothing to do, and nothing allocated, otherwise."""
        ring = self.ring
        if self._seq != ring.next and self._seq >= 0:
            self.last_slot = struct.unpack_from("<I", ring.buf, ring.offset(ring.next - 1))[0]
            self._seq = ring.next

    def raise_total(self, add_wh):
        """Add add_wh to the counter and to every record of this boot the ring holds (the node
        sends none before its total is settled: energy.py; records kept from before this boot
        keep theirs). Once per boot at most; it allocates."""
        self.energy_wh += add_wh
        ring = self.ring
        for seq in range(ring.low if ring.low > ring.base else ring.base, ring.next):
            off = ring.offset(seq)
            t_s, power_dw, energy_wh, voltage_cv, current_ma = \
                struct.unpack_from(wire.RECORD_FMT, ring.buf, off)
            if energy_wh != wire.ENERGY_MISSING:
                wire.pack_record(ring.buf, off, t_s, power_dw, energy_wh + add_wh, voltage_cv,
                                 current_ma)
