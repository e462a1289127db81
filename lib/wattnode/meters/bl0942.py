"""meters/bl0942.py - BL0942: a metering chip polled over a UART.

Plugs: Shelly Plug S Gen3 (ESP32-C3, 9600 baud).
Bus: UART 8N1, 4800 baud by default, 9600 on the Shelly Plug S Gen3 (board "baud"). The node
sends 58 AA ("read all"); the chip answers with 23 bytes, fields 24-bit little-endian:

  55 | I_RMS | V_RMS | I_FAST_RMS | WATT | CF_CNT | FREQ | 00 | STATUS | 00 | 00 | checksum
  0    1-3     4-6     7-9          10-12  13-15    16-17  18   19       20   21   22
  WATT is signed; FREQ 16 bits; checksum = ~(0x58 + sum of bytes 0..21) & 0xFF, the request's
  address byte included.

Conversions (ESPHome bl0942 and the datasheet's reference circuit): P = WATT / 596 W,
V = V_RMS / 15873.36 V, I = I_RMS / 251213.46 A, f = 10**6 / FREQ Hz; one CF_CNT count is
3600000 / 3304.61 = 1089.4 J (0.3 Wh), and the 24-bit counter wraps after 5077 kWh.

Energy: a count is 0.3 Wh, too coarse for 10 s slots (60 W for 10 s is half a count), so a
window's energy integrates the chip's own averaged WATT over the time between replies. Where
replies stopped for more than GAP_MS (the node was busy, the line was noisy) the CF_CNT delta,
exact and wrap-safe, covers the stretch instead (a count is 1.09e7 x 100 uJ, so a gap of more
than ~100 counts makes a big integer: an allocation, rare and still correct).
The first reply after the driver starts has no CF_CNT to compare with: its energy is WATT over
the time since the first request (a boot's first slot is then its true mean, not short of the
first 200 ms).
Quirks: a reply that does not come within REPLY_MS is "partial" (some bytes) or counts towards
"silent" (none); no good reply for SILENT_MS invalidates the window, and energy counted across
the silence goes to the total only.
"""

from time import ticks_diff

from micropython import const

from wattnode.meters import CHECKSUM, PARTIAL, RATE, SILENT, SYNC, Meter

PACKET = const(23)
REPLY_MS = const(150)
GAP_MS = const(2000)
SILENT_MS = const(1000)
COUNT_UJ100 = const(10893872)  # 3600000 / 3304.61 = 1089.3872 J per CF_CNT count, in 100 uJ


def _u24le(p, i):
    return p[i] | p[i + 1] << 8 | p[i + 2] << 16


class BL0942(Meter):
    poll_ms = 200

    def __init__(self, board, hw, cal):
        super().__init__(hw, cal)
        pins = board["pins"]
        self._uart = hw.uart(pins["rx"], pins["tx"], board.get("baud", 4800), None)
        self._request = b"\x58\xaa"
        self._pkt = bytearray(PACKET)
        self._one = bytearray(1)
        self._n = 0
        self._waiting = False
        now = self._clock.ticks_ms()
        self._sent_ms = now
        self._good_ms = now
        self._cf_last = -1
        self._asked = False
        self._silent = False
        self._count_uj100 = cal.scale(COUNT_UJ100, cal.power_q12_gain)
        self._max_w = board.get("meter", {}).get("max_power_w", 6000)
        self.replies = 0

    def poll(self):
        now = self._clock.ticks_ms()
        if self._waiting:
            self._receive(now)
            if self._waiting and ticks_diff(now, self._sent_ms) > REPLY_MS:
                if self._n:
                    self.faults[PARTIAL] += 1
                self._waiting = False
        if not self._waiting:
            while self._uart.any():  # stray bytes between replies
                self._uart.readinto(self._one)
                self.faults[SYNC] += 1
            self._uart.write(self._request)
            self._sent_ms = now
            if not self._asked:  # the first reply's energy counts from the first request
                self._asked = True
                self._good_ms = now
            self._waiting = True
            self._n = 0
        if ticks_diff(now, self._good_ms) > SILENT_MS:
            if not self._silent:
                self._silent = True
                self.fault(SILENT)
            self._invalid = True

    def _receive(self, now):
        p = self._pkt
        one = self._one
        while self._uart.any() and self._n < PACKET:
            self._uart.readinto(one)
            if self._n == 0 and one[0] != 0x55:
                self.faults[SYNC] += 1
                continue
            p[self._n] = one[0]
            self._n += 1
        if self._n < PACKET:
            return
        self._waiting = False
        total = 0x58
        for i in range(PACKET - 1):
            total += p[i]
        if (~total) & 0xFF != p[PACKET - 1]:
            self.faults[CHECKSUM] += 1
            return
        self._parse(now)

    def _parse(self, now):
        p = self._pkt
        cal = self._cal
        watt = _u24le(p, 10)
        if watt & 0x800000:
            watt -= 0x1000000
        cf = _u24le(p, 13)
        self.replies += 1
        self.power_dw = cal.scale(watt * 10 // 596, cal.power_q12_gain)
        v = cal.scale(_u24le(p, 4) * 100 // 15873, cal.voltage_q12)
        i = cal.scale(_u24le(p, 1) * 100 // 25121, cal.current_q12)
        dt = ticks_diff(now, self._good_ms)
        self._good_ms = now
        if self._cf_last < 0:  # the first reply: from its request on, WATT is all there is
            self._cf_last = cf
            if not self._silent:
                power = self.power_dw if self.power_dw >= 0 else -self.power_dw
                self._add(cal.scale(self.to_dj(dt, power), cal.power_q12(power)), v, i)
            return
        counts = (cf - self._cf_last) & 0xFFFFFF
        self._cf_last = cf
        if counts * self._count_uj100 > self._max_w * 10 * (dt + 1000):  # W x ms = 10 x 100 uJ
            self.fault(RATE)
            return
        power = self.power_dw if self.power_dw >= 0 else -self.power_dw
        if dt <= GAP_MS and not self._silent:
            energy = self.to_dj(dt, power)  # power in 0.1 W for dt ms: 100 uJ per ms per dW
        else:
            energy = self.to_dj(counts, self._count_uj100)
        if self._silent:  # the window is only partly covered: it stays invalid
            self._silent = False
            self._invalid = True
            self._orphan(energy)
            return
        self._add(cal.scale(energy, cal.power_q12(power)), v, i)
