"""chips.py - simulated metering chips: real frames and pulse trains from a load profile.

One module per chip family, loaded only for a board that has it (the simulator shares the
plug's heap, and a plug carries one chip): bl0937.py, cse7766.py, bl0942.py beside this one,
which holds what they share (Chip: the load, the faults, the energy counter) and create().

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
draws nothing while the plug's relay is open (the board calls its Truth's switch()).
"""

from wattsim.parts import Truth

# the faults above and the JSON type each takes (tools/simnode checks --faults against them)
FAULTS = {"noise_every": int, "checksum_every": int, "partial_every": int, "flags_every": int,
          "silent": bool, "wrap": bool, "storm_hz": int, "error": dict}
# chip name -> (module, class), imported when a board has that chip
_CHIPS = {"bl0937": ("wattsim.bl0937", "SimBL0937"),
          "hlw8012": ("wattsim.bl0937", "SimBL0937"),
          "cse7766": ("wattsim.cse7766", "SimCSE7766"),
          "hlw8032": ("wattsim.cse7766", "SimCSE7766"),
          "bl0942": ("wattsim.bl0942", "SimBL0942")}


class Chip:
    """What every simulated chip has: the load it measures (truth), its faults, and its
    energy counter (pulses())."""

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

    def produce(self, uart):
        pass

    def on_write(self, uart, data):
        pass


def create(chip, clock, profile, board, faults, pin):
    """The simulated `chip` of a board, its module imported now."""
    found = _CHIPS.get(chip)
    if found is None:
        raise ValueError("no simulated %r chip" % chip)
    module, name = found
    cls = getattr(__import__(module, None, None, (name,)), name)
    return cls(clock, profile, board, faults, pin)
