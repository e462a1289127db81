"""meters/cse7766.py - CSE7766 and HLW8032: metering chips that stream frames on a UART.

Plugs: Sonoff POW Origin / Elite 16A (ESP32), Athom Smart Plug V3 (ESP32-C3).
Bus: UART RX only (the chip never listens), 4800 baud 8E1, about 20 frames a second.
Frame, 24 bytes, fields 24-bit big-endian; captured on a Sonoff POW R2 (Tasmota #6302):

  55 5A 02EC70 00035D 0040B5 006C4E 520FD0 00A421 F2  6F14  D8
  |  |  |      |      |      |      |      |      |   |     checksum: sum of bytes 2..22
  |  |  |      |      |      |      |      |      |   CF pulse counter, 16 bits, wraps
  |  |  |      |      |      |      |      |      adj: bit6 V, bit5 I, bit4 P valid
  |  |  |      |      |      |      |      power cycle      P = 5378000 / 42017 = 128.0 W
  |  |  |      |      |      |      power coefficient
  |  |  |      |      |      current cycle      I = 16565 / 27726 = 0.597 A
  |  |  |      |      current coefficient
  |  |  |      voltage cycle       V = 191600 / 861 = 222.5 V
  |  |  voltage coefficient (factory calibration, the same in every frame)
  |  0x5A, the second sync byte
  header: 0x55 normal; 0xAA chip not calibrated; 0xFx error bits: 3 voltage cycle, 2 current
          cycle out of range, 0 coefficient storage broken (the frame is invalid); bit 1 power
          cycle out of range: power is 0 (below about 5 W)

Energy: each CF pulse is power_coefficient / 10**6 J (5.38 J above; the captured counter
advances ~25 pulses/s at 128 W). Counting pulses makes energy exact even when frames are
lost, as long as the 16-bit counter does not wrap twice between two good frames (95 s at 3.7 kW).

Quirks, with their evidence
- The stream has no gaps between frames worth trusting; a frame is recognised by 55|AA|Fx
  then 5A and a matching checksum. After a bad checksum the driver looks for a header inside
  the bytes it already has (a cut-off frame followed by a good one), as Tasmota resyncs.
- ESPHome drops a half frame when 500 ms pass without a byte; so do we (a "partial" fault).
- No good frame for SILENT_MS means the chip (or the RX wire) is silent: the window is invalid,
  and the pulses counted across the silence go to the total only, not to any slot's power.
"""

from time import ticks_diff

from micropython import const

from wattnode.meters import CHECKSUM, FLAGS, PARTIAL, RATE, SILENT, SYNC, Meter

FRAME = const(24)
SILENT_MS = const(1000)
_STALE_MS = const(500)
_CHUNK = const(32)
_MAX_CHUNKS = const(16)


def _u24(f, i):
    return f[i] << 16 | f[i + 1] << 8 | f[i + 2]


def _is_header(b):
    return b == 0x55 or b == 0xAA or b & 0xF0 == 0xF0


class CSE7766(Meter):
    poll_ms = 200

    def __init__(self, board, hw, cal):
        super().__init__(hw, cal)
        pins = board["pins"]
        self._uart = hw.uart(pins["rx"], pins.get("tx"), board.get("baud", 4800), "even")
        self._frame = bytearray(FRAME)
        self._chunk = bytearray(_CHUNK)
        self._n = 0
        self._cf_last = -1
        now = self._clock.ticks_ms()
        self._byte_ms = now
        self._good_ms = now
        self._silent = False
        self.frames = 0
        self._max_w = board.get("meter", {}).get("max_power_w", 6000)

    def poll(self):
        now = self._clock.ticks_ms()
        if self._uart.any() and self._n and ticks_diff(now, self._byte_ms) > _STALE_MS:
            self.faults[PARTIAL] += 1  # half a frame, then a pause: it will never complete
            self._n = 0
        for _ in range(_MAX_CHUNKS):  # drain the buffer, so the newest frames are the ones read
            if not self._uart.any():
                break
            got = self._uart.readinto(self._chunk)
            self._byte_ms = now
            for i in range(got):
                self._feed(self._chunk[i], now)
        if ticks_diff(now, self._good_ms) > SILENT_MS:
            if not self._silent:
                self._silent = True
                self.fault(SILENT)
            self._invalid = True

    def _feed(self, b, now):
        f = self._frame
        n = self._n
        if n == 0 and not _is_header(b):
            self.faults[SYNC] += 1
            return
        if n == 1 and b != 0x5A:
            self.faults[SYNC] += 1
            self._n = 1 if _is_header(b) else 0
            f[0] = b
            return
        f[n] = b
        n += 1
        if n < FRAME:
            self._n = n
            return
        total = 0
        for i in range(2, FRAME - 1):
            total += f[i]
        if total & 0xFF == f[FRAME - 1]:
            self._n = 0
            self._parse(now)
        else:
            self._resync()

    def _resync(self):
        """A bad checksum: keep the bytes from the next 55|AA|Fx 5A inside the frame, if any."""
        f = self._frame
        for i in range(1, FRAME):
            if _is_header(f[i]) and (i == FRAME - 1 or f[i + 1] == 0x5A):
                self.faults[PARTIAL] += 1  # a frame was cut short by the next one
                for j in range(FRAME - i):
                    f[j] = f[i + j]
                self._n = FRAME - i
                return
        self.faults[CHECKSUM] += 1
        self._n = 0

    def _parse(self, now):
        f = self._frame
        header = f[0]
        if header == 0xAA or (header & 0xF0 == 0xF0 and header & 0x0D):
            self.faults[FLAGS] += 1  # uncalibrated or damaged: nothing in it can be trusted
            return
        cal = self._cal
        adj = f[20]
        cf = f[21] << 8 | f[22]
        self.frames += 1
        since_good = ticks_diff(now, self._good_ms)
        self._good_ms = now
        if header & 0xF0 == 0xF0 or not adj & 0x10:
            self.power_dw = 0  # power cycle out of range: below what the chip measures
        else:
            self.power_dw = cal.scale(_u24(f, 14) * 10 // max(_u24(f, 17), 1), cal.power_q12_gain)
        v = cal.scale(_u24(f, 2) * 100 // max(_u24(f, 5), 1), cal.voltage_q12) if adj & 0x40 else -1
        i = cal.scale(_u24(f, 8) * 1000 // max(_u24(f, 11), 1), cal.current_q12) if adj & 0x20 else -1
        if self._cf_last < 0:  # the first frame only sets where the pulse count starts
            self._cf_last = cf
            self._add(-1, v, i)
            return
        pulses = (cf - self._cf_last) & 0xFFFF
        self._cf_last = cf
        uj100 = cal.scale(_u24(f, 14) // 100, cal.power_q12_gain)  # 100 uJ per pulse
        if pulses * uj100 > self._max_w * 10 * (since_good + 1000):  # W x ms = 10 x 100 uJ
            self.fault(RATE)  # more energy than the plug can pass: a corrupt counter
            return
        energy = self.to_dj(pulses, uj100)
        if self._silent:  # the window is only partly covered: it stays invalid
            self._silent = False
            self._invalid = True
            self._orphan(energy)  # pulses counted while we heard nothing: total only
            return
        self._add(cal.scale(energy, cal.power_q12(self.power_dw)), v, i)
