"""meters - the one interface every metering-chip driver offers the sampler.

    meter.poll()     read what the chip has sent or counted since the last poll; cheap, called
                     at least every POLL_MS of node time on a plug (poll_ms; 0 = at slot ends)
    meter.take()     close the measurement window that began at the previous take() and
                     return True if the chip gave valid data throughout it; afterwards
                       win_energy_dj   energy in the window, 0.1 J (= 0.1 W for 1 s), or -1
                       win_voltage_cv  mean voltage, 0.01 V, or -1
                       win_current_ma  mean current, mA, or -1
                       win_orphan_dj   energy the chip counted that belongs to no valid
                                       window (across a silent spell): for the total only
    power_dw, voltage_cv, current_ma   the latest instantaneous values, -1 when unknown
    faults           counts per kind, FAULTS[i] names faults[i]; never reset

Drivers count energy in their chip's native quanta and convert with to_dj(), which carries
the remainder, so nothing is lost to rounding; calibration (calib.py) is folded into the
quantum and the gains. Integers only, every quantity below 2**30: no allocation per poll.
A window in which the chip fell silent, reported an error or an impossible rate is invalid:
its slot is stored as missing, never as a wrong value.
DRIVERS maps a board file's chip name to (module, name of a callable (board, hw, cal) ->
meter), the module imported only when a board asks for it (create()); another package may add
its chips to it before the node starts.
"""

from time import ticks_diff

from micropython import const

FAULTS = ("checksum", "sync", "partial", "silent", "rate", "flags")
CHECKSUM = const(0)
SYNC = const(1)
PARTIAL = const(2)
SILENT = const(3)
RATE = const(4)
FLAGS = const(5)
_UJ100_PER_DJ = const(1000)  # 0.1 J = 1000 x 100 uJ


class Meter:
    poll_ms = 200

    def __init__(self, hw=None, cal=None):
        self._clock = hw.clock if hw is not None else None
        self._cal = cal
        self.power_dw = -1
        self.voltage_cv = -1
        self.current_ma = -1
        self.win_energy_dj = -1
        self.win_voltage_cv = -1
        self.win_current_ma = -1
        self.win_orphan_dj = 0
        self.faults = [0] * len(FAULTS)
        self._energy_dj = 0
        self._energy_n = 0
        self._orphan_dj = 0
        self._v_sum = 0
        self._v_n = 0
        self._i_sum = 0
        self._i_n = 0
        self._invalid = False
        self._rem_uj100 = 0

    def fault(self, kind):
        self.faults[kind] += 1
        self._invalid = True

    def to_dj(self, quanta, uj100_per_quantum):
        """Energy of `quanta` chip quanta in 0.1 J, the remainder carried to the next call."""
        e = self._rem_uj100 + quanta * uj100_per_quantum
        self._rem_uj100 = e % _UJ100_PER_DJ
        return e // _UJ100_PER_DJ

    def _add(self, energy_dj, voltage_cv, current_ma):
        """One observation; pass -1 for what the chip did not validly report."""
        if energy_dj >= 0:
            self._energy_dj += energy_dj
            self._energy_n += 1
        if voltage_cv >= 0:
            self._v_sum += voltage_cv
            self._v_n += 1
            self.voltage_cv = voltage_cv
        if current_ma >= 0:
            self._i_sum += current_ma
            self._i_n += 1
            self.current_ma = current_ma

    def _orphan(self, energy_dj):
        self._orphan_dj += energy_dj

    def take(self):
        ok = self._energy_n > 0 and not self._invalid
        if ok:
            self.win_energy_dj = self._energy_dj
            self.win_orphan_dj = self._orphan_dj
        else:  # the window's energy still counts towards the total
            self.win_energy_dj = -1
            self.win_orphan_dj = self._orphan_dj + self._energy_dj
        self.win_voltage_cv = (self._v_sum + self._v_n // 2) // self._v_n if ok and self._v_n else -1
        self.win_current_ma = (self._i_sum + self._i_n // 2) // self._i_n if ok and self._i_n else -1
        self._energy_dj = self._energy_n = self._orphan_dj = 0
        self._v_sum = self._v_n = self._i_sum = self._i_n = 0
        self._invalid = False
        return ok

    def poll(self):
        raise NotImplementedError


class NoMeter(Meter):
    """What a board that cannot meter gets: every window is missing, nothing is made up."""
    poll_ms = 1000

    def poll(self):
        pass


_WORDS = ("frames with a bad checksum", "stray bytes skipped", "cut-off frames",
          "silent spells (slots stored as missing)",
          "bursts of impossible pulse rates (slots stored as missing)",
          "frames the chip flagged as uncalibrated or faulty")


class FaultLog:
    """Says in words what a meter's fault counters did, at most once per EVERY_MS."""
    EVERY_MS = 60000

    def __init__(self, meter, what):
        self._meter = meter
        self._what = what
        self._seen = list(meter.faults)
        self._said_ms = None

    def news(self, now_ms):
        """A sentence about the faults since the last one, or None (allocates only then:
        it is called after every slot)."""
        if self._said_ms is not None and ticks_diff(now_ms, self._said_ms) < self.EVERY_MS:
            return None
        faults = self._meter.faults
        seen = self._seen
        for i in range(len(faults)):
            if faults[i] != seen[i]:
                break
        else:
            return None
        parts = []  # a loop, not a comprehension: that would put faults and seen in heap
        for i in range(len(faults)):  # cells on every call, news or not
            if faults[i] != seen[i]:
                parts.append("%d %s" % (faults[i] - seen[i], _WORDS[i]))
        self._seen = list(faults)
        self._said_ms = now_ms
        return "%s: %s" % (self._what, ", ".join(parts))


DRIVERS = {
    "bl0937": ("wattnode.meters.bl0937", "BL0937"),
    "hlw8012": ("wattnode.meters.bl0937", "BL0937"),
    "cse7766": ("wattnode.meters.cse7766", "CSE7766"),
    "hlw8032": ("wattnode.meters.cse7766", "CSE7766"),
    "bl0942": ("wattnode.meters.bl0942", "BL0942"),
}


def create(board, hw, cal):
    """The driver for board["chip"], wired to the board's pins through the hardware layer."""
    chip = board["chip"]
    driver = DRIVERS.get(chip)
    if driver is None:
        raise ValueError("board %r: no driver for chip %r" % (board.get("name"), chip))
    module, name = driver
    return getattr(__import__(module, None, None, (name,)), name)(board, hw, cal)
