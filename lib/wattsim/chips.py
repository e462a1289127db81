"""chips.py - simulated metering chips: real frames and pulse trains from a load profile.

Each chip measures a Profile (profiles.py) on the node's virtual clock (clock.py), at millisecond
resolution, and speaks as the real chip does, so the drivers in meters/ parse on the unix port
exactly what they would parse on a plug:
  bl0937, hlw8012   CF pulses = energy / quantum on a counter; CF1 pulses at a rate set by the
                    voltage or current, chosen by the SEL pin, the old quantity lingering for
                    SETTLE_MS after a switch (as the real chip does)
  cse7766, hlw8032  a 24-byte frame every 50 ms into a 256-byte UART receive buffer, which
                    drops new bytes when full, like the ESP32's; CF pulse counter in the frame
  bl0942            a 23-byte reply to each 58 AA request, 24-bit CF_CNT inside

Faults, from sim.json's "faults" (tools/simnode --faults) or set on the chip by a test:
  noise_every N     stray bytes before every Nth frame or reply
  checksum_every N  every Nth frame or reply has a wrong checksum
  partial_every N   every Nth frame or reply is cut off half-way
  flags_every N     every Nth CSE7766 frame says 0xAA (uncalibrated) or 0xF8 (voltage cycle
                    out of range)
  silent            the chip sends nothing and counts nothing
  wrap              the chip's energy counter starts just short of its wrap
  storm_hz          the pulse counters see this extra rate (interference)
  error             {"power": 1.03, ...}: the chip reads that much high (for calibration)
The load, the counters and the UART buffer they are built from are in parts.py; the load
draws nothing while the plug's relay is open (board.SimRelay calls switch()).
"""

from wattsim.parts import SimCounter, SimUART, Truth, put24be, put24le

# the faults above and the JSON type each takes (tools/simnode checks --faults against them)
FAULTS = {"noise_every": int, "checksum_every": int, "partial_every": int, "flags_every": int,
          "silent": bool, "wrap": bool, "storm_hz": int, "error": dict}

SETTLE_MS = 300
CSE_FRAME_MS = 50
CSE_COEF = (191600, 16565, 5378000)  # voltage, current, power coefficients (Tasmota #6302)
BL0942_REPLY_MS = 30
BL0942_COUNT_UJ100 = 3600000000000 // 330461  # 1 kWh is 3.6e10 x 100 uJ and 3304.61 counts


class _Chip:
    def __init__(self, clock, profile, board, faults):
        self.clock = clock
        self.board = board
        self.truth = Truth(profile, clock.start_s, clock.time_ms(), faults.get("error", {}))
        self.silent = bool(faults.get("silent"))
        self.storm_hz = faults.get("storm_hz", 0)
        self.noise_every = faults.get("noise_every", 0)
        self.checksum_every = faults.get("checksum_every", 0)
        self.partial_every = faults.get("partial_every", 0)
        self.flags_every = faults.get("flags_every", 0)
        self.wrap = bool(faults.get("wrap"))
        self._storm_ms = clock.time_ms()
        self._storm_pulses = 0
        self._frozen = 0

    def _every(self, n, k):
        return n and k % n == n - 1

    def _storm(self, t_ms):
        if self.storm_hz:
            self._storm_pulses += self.storm_hz * (t_ms - self._storm_ms) // 1000
        self._storm_ms = t_ms
        return self._storm_pulses

    def pulses(self, quantum_uj100, offset):
        """The chip's energy counter now, in pulses of quantum_uj100; frozen while silent."""
        t = self.clock.time_ms()
        e = self.truth.energy_uj100(t)
        if not self.silent:
            self._frozen = e // quantum_uj100 + offset + self._storm(t)
        return self._frozen

    def switch(self, on):
        """The relay (board.SimRelay) powers the load or stops powering it, now."""
        self.truth.switch(on, self.clock.time_ms())

    def produce(self, uart):
        pass

    def on_write(self, uart, data):
        pass


class SimBL0937(_Chip):
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


class SimCSE7766(_Chip):
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


class SimBL0942(_Chip):
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


def create(chip, clock, profile, board, faults, pin):
    cls = {"bl0937": SimBL0937, "hlw8012": SimBL0937, "cse7766": SimCSE7766,
           "hlw8032": SimCSE7766, "bl0942": SimBL0942}.get(chip)
    if cls is None:
        raise ValueError("no simulated %r chip" % chip)
    return cls(clock, profile, board, faults, pin)
