"""bl0942.py - a simulated BL0942 (chips.py): a 23-byte reply to each 58 AA request, the
24-bit CF_CNT inside.
"""

from wattsim.chips import Chip
from wattsim.parts import SimUART, put24le

BL0942_REPLY_MS = 30
BL0942_COUNT_UJ100 = 3600000000000 // 330461  # 1 kWh is 3.6e10 x 100 uJ and 3304.61 counts


class SimBL0942(Chip):
    def __init__(self, clock, profile, board, faults, pin):
        super().__init__(clock, profile, board, faults)
        self.baud = board.get("baud", 4800)
        self._packet = bytearray(23)
        self._due_ms = -1
        self._k = 0
        self._noise = b"\x00\xff\x17"
        self._offset = 0x1000000 - 3 if self.wrap else 77

    def uart(self, rx, tx, baud, parity):
        return SimUART(self, garbled=baud != self.baud or parity is not None)  # it talks 8N1

    def on_write(self, uart, data):
        if len(data) == 2 and data[0] == 0x58 and data[1] == 0xAA and not self.silent:
            self._due_ms = self.clock.time_ms() + BL0942_REPLY_MS

    def produce(self, uart):
        t = self.clock.time_ms()
        if self._due_ms < 0 or t < self._due_ms:
            return
        self._due_ms = -1
        k = self._k
        self._k += 1
        if self._every(self.noise_every, k):
            uart.push(self._noise, 3)
        p = self._packet
        tr = self.truth
        p[0] = 0x55
        i_rms = _times_251213_over_1000(tr.current_ma(t))
        put24le(p, 1, i_rms)
        put24le(p, 4, tr.voltage_cv(t) * 15873 // 100)
        put24le(p, 7, i_rms)
        put24le(p, 10, (tr.power_dw(t) * 596 // 10) & 0xFFFFFF)
        put24le(p, 13, self.pulses(BL0942_COUNT_UJ100, self._offset) & 0xFFFFFF)
        p[16] = 20000 & 0xFF  # FREQ: 10**6 / 50 Hz
        p[17] = 20000 >> 8
        for j in range(18, 22):
            p[j] = 0
        total = 0x58
        for j in range(22):
            total += p[j]
        p[22] = (~total + (1 if self._every(self.checksum_every, k) else 0)) & 0xFF
        uart.push(p, 10 if self._every(self.partial_every, k) else 23)


def _times_251213_over_1000(current_ma):
    """current_ma * 251213 // 1000 (the BL0942's current register), exactly, in small ints."""
    return current_ma * 251 + current_ma * 213 // 1000
