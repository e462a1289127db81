"""energy.py - the energy total: never published lower than before, without wearing the flash.

The promise: the total a plug publishes (state topic, readings) never decreases, across
resets, power cuts, crashes and updates (Home Assistant's total_increasing counts a drop as a
meter reset and adds the whole total again).

RTC memory  (survives soft and watchdog resets, not a power cut) holds the total after every
            slot, in the first 16 bytes of the RTC image it shares with keep.py: u16 magic
            "WE", u16 version 1, u32 Wh, u32 sub-Wh remainder in dJ, u32 check = (Wh + 7 *
            remainder + magic) mod 2**30. Writing it costs no flash. It
            is written only once the total is settled (below), so a valid copy is exact.
Flash       CHECKPOINT_FILE holds {"wh", "rem_dj", "time", "writes"}; it is replaced (temp file
            then rename: littlefs makes that power-safe) when BOTH the total has grown by
            every_wh (default 100 Wh) AND every_s (default 6 h) have passed since the last one -
            "at most every 0.1 kWh or 6 h, whichever comes later" - and at every controlled
            reboot or crash. So flash sees at most 4 writes a day, whatever the load, and none
            at all for a plug that draws nothing. `writes` counts them, for ever. A checkpoint
            is only ever a lower bound of the total, so one written before settling is safe.
At boot     a valid RTC total is exact: resume from it, settled at once. Otherwise (a power
            cut, a new flash) the node's own value (the checkpoint, or 0) may lie below what it
            published before the cut, so it is not settled: offer() takes higher totals this
            node published before, as they arrive (node.py): its last state, which the broker
            retains, and the last energy the collector holds for it (its answer to "online");
            and at boot the newest of its own readings kept on the flash (spill.py): those of
            an outage, never sent, are newer than either.
            settle() then resumes from the highest of them; the energy counted since boot is
            added on top. Until then the node publishes no state and sends no readings (it
            keeps measuring; node.py raises the records in the ring when it settles), so
            nothing lower ever goes out. `note` says, after a power cut, where the total came
            from; bound_wh() how much it may lack: what was used between that value and the
            cut, at most max_power_w times the time since it.
Integers only, below 2**30 (Wh), nothing allocated per slot.
"""

import json
import os
import struct

from micropython import const

CHECKPOINT_FILE = "energy.json"
_MAGIC = const(0x5745)
_RTC_FMT = "<HHIII"
_RTC_SIZE = const(16)
_MASK = const(0x3FFFFFFF)
ORIGINS = {"checkpoint": "the flash checkpoint", "state": "its last state the broker retained",
           "collector": "the collector's energy feed",
           "kept": "its newest reading kept on the flash"}


class EnergyStore:
    def __init__(self, rtc, every_wh=100, every_s=21600, state_dir=".", image=None):
        """image: the RTC image shared with keep.py (its first 16 bytes are the total's);
        without one, RTC memory holds the total alone."""
        self._rtc = rtc
        self._buf = image if image is not None else bytearray(_RTC_SIZE)
        self._path = state_dir + "/" + CHECKPOINT_FILE
        self.every_wh = every_wh
        self.every_s = every_s
        self.writes = 0
        self._ck_wh = 0
        self._ck_s = -1
        self.source = None    # where the total resumed from: rtc, none, or a key of ORIGINS
        self.settled = False  # the resume value is decided: the total may be published
        self.note = None
        self._loaded_wh = 0   # what load() returned: the node counts on from it
        self._best_wh = 0     # the highest total heard of so far, and when it was true
        self._best_s = -1
        self._had_checkpoint = False

    def _check(self, wh, rem):
        return (wh + 7 * rem + _MAGIC) & _MASK

    def load(self):
        """(Wh, remainder dJ) to count on from; sets `source` and `settled`."""
        ck = self._read_checkpoint()
        self._had_checkpoint = ck is not None
        if ck:
            self._ck_wh, self._ck_s, self.writes = ck["wh"], ck["time"], ck["writes"]
        raw = self._rtc.read()
        if len(raw) >= _RTC_SIZE:
            magic, version, wh, rem, check = struct.unpack_from(_RTC_FMT, raw, 0)
            if magic == _MAGIC and version == 1 and check == self._check(wh, rem) and wh >= self._ck_wh:
                self.source = "rtc"
                self.settled = True
                return wh, rem
        if not ck:
            self.source = "none"
            return 0, 0
        self.source = "checkpoint"
        self._loaded_wh = self._best_wh = ck["wh"]
        self._best_s = ck["time"]
        return ck["wh"], ck.get("rem_dj", 0)

    def offer(self, wh, wire_s, origin):
        """A total this node published before, true at wire time wire_s (origin: "state",
        "kept" or "collector"); kept if it is the highest so far. Ignored once settled."""
        if not self.settled and wh > self._best_wh:
            self._best_wh, self._best_s, self.source = wh, wire_s, origin

    def settle(self, wh, rem):
        """Decide: the Wh to add to the node's total `wh` (counted on from load()'s value) so
        that it resumes from the highest total offered. Writes RTC memory; sets `note`."""
        if self.settled:
            return 0
        self.settled = True
        add = self._best_wh - self._loaded_wh if self._best_wh > self._loaded_wh else 0
        if self.source != "none":
            self.note = ("%s: the energy total resumed from %s (%.3f kWh); what was used "
                         "between then and the cut is not in the total"
                         % ("power cut" if self._had_checkpoint else "no total on this flash",
                            ORIGINS[self.source], self._best_wh / 1000))
        self._remember(wh + add, rem)
        return add

    def since_s(self, now_s):
        """Seconds since the resumed total was true (0 when it is exact or unknown)."""
        return now_s - self._best_s if self.source in ORIGINS and 0 <= self._best_s <= now_s \
            else 0

    def bound_wh(self, now_s, max_power_w):
        """At most how much the resumed total can lack, once the clock is known."""
        return max_power_w * self.since_s(now_s) // 3600

    def _read_checkpoint(self):
        try:
            with open(self._path) as f:
                ck = json.load(f)
            if isinstance(ck.get("wh"), int) and isinstance(ck.get("time"), int):
                ck.setdefault("writes", 0)
                return ck
        except (OSError, ValueError, AttributeError):
            pass
        return None

    def _remember(self, wh, rem):
        struct.pack_into(_RTC_FMT, self._buf, 0, _MAGIC, 1, wh, rem, self._check(wh, rem))
        self._rtc.write(self._buf)

    def slot(self, wh, rem, now_s):
        """After every slot: the RTC copy always (once settled), the flash checkpoint when it
        is due."""
        if not self.settled:
            return
        self._remember(wh, rem)
        if self._ck_s < 0:
            self._ck_s = now_s  # the first slot after boot starts the clock for checkpoints
        elif wh - self._ck_wh >= self.every_wh and now_s - self._ck_s >= self.every_s:
            self.checkpoint(wh, rem, now_s)

    def checkpoint(self, wh, rem, now_s):
        self.writes += 1
        tmp = self._path + ".tmp"
        try:
            with open(tmp, "w") as f:
                json.dump({"wh": wh, "rem_dj": rem, "time": now_s, "writes": self.writes}, f)
            os.rename(tmp, self._path)
        except OSError:
            self.writes -= 1  # a full or failing flash: the RTC copy still holds the total
            return False
        self._ck_wh = wh
        self._ck_s = now_s
        return True
