"""cse7766.py - a simulated CSE7766 or HLW8032 (chips.py): a 24-byte frame every 50 ms into a
256-byte UART receive buffer, which drops new bytes when full, like the ESP32's; the CF pulse
counter in the frame.
"""

from wattsim.chips import Chip
from wattsim.parts import SimUART, put24be

CSE_FRAME_MS = 50
CSE_COEF = (191600, 16565, 5378000)  # voltage, current, power coefficients (Tasmota #6302)


class SimCSE7766(Chip):
    def __init__(self, clock, profile, board, faults, pin):
        super().__init__(clock, profile, board, faults)
        self._frame = bytearray(24)
        self._noise = b"\x13\x37\x00"
        self._next_k = clock.time_ms() // CSE_FRAME_MS + 1
        self._uj100 = CSE_COEF[2] // 100
        self._offset = 0x10000 - 40 if self.wrap else 0x1234

    def uart(self, rx, tx, baud, parity):
        return SimUART(self, garbled=baud != 4800 or parity != "even")  # it talks 4800 8E1

    def produce(self, uart):
        now_k = self.clock.time_ms() // CSE_FRAME_MS
        k = self._next_k
        while k <= now_k and uart.free() >= 24 and not self.silent:
            if self._every(self.noise_every, k):
                uart.push(self._noise, 3)
            n = self._build(k * CSE_FRAME_MS, k)
            uart.push(self._frame, n)
            k += 1
        self._next_k = now_k + 1  # frames that found the buffer full are lost, as on the plug

    def _build(self, t, k):
        f = self._frame
        tr = self.truth
        v, i, p = tr.voltage_cv(t), tr.current_ma(t), tr.power_dw(t)
        vc, ic, pc = CSE_COEF
        f[0] = 0x55
        f[1] = 0x5A
        adj = 0x41
        put24be(f, 2, vc)
        put24be(f, 5, vc * 100 // max(v, 1))
        put24be(f, 8, ic)
        put24be(f, 11, ic * 1000 // max(i, 1) if i >= 50 else 0xFFFFFF)
        if i >= 50:
            adj |= 0x20
        put24be(f, 14, pc)
        if p >= 50:
            put24be(f, 17, pc * 10 // p)
            adj |= 0x10
        else:
            put24be(f, 17, 0xFFFFFF)
            f[0] = 0xF2  # power cycle out of range: below what the chip measures
        f[20] = adj
        cf = (self.pulses(self._uj100, self._offset)) & 0xFFFF
        f[21] = cf >> 8
        f[22] = cf & 0xFF
        if self._every(self.flags_every, k):
            f[0] = 0xAA if k // max(self.flags_every, 1) % 2 else 0xF8
        total = 0
        for j in range(2, 23):
            total += f[j]
        f[23] = (total + (1 if self._every(self.checksum_every, k) else 0)) & 0xFF
        return 11 if self._every(self.partial_every, k) else 24
