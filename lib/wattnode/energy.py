"""energy.py - the energy total that survives resets and power cuts without wearing the flash.

RTC memory  (survives soft and watchdog resets, not a power cut) holds the total after every
            slot, 16 bytes: u16 magic "WE", u16 version 1, u32 Wh, u32 sub-Wh remainder in dJ,
            u32 check = (Wh + 7 * remainder + magic) mod 2**30. Writing it costs no flash.
Flash       CHECKPOINT_FILE holds {"wh", "rem_dj", "time", "writes"}; it is replaced (temp file
            then rename: littlefs makes that power-safe) when BOTH the total has grown by
            every_wh (default 100 Wh) AND every_s (default 6 h) have passed since the last one -
            "at most every 0.1 kWh or 6 h, whichever comes later" - and at every controlled
            reboot. So flash sees at most 4 writes a day, whatever the load, and none at all
            for a plug that draws nothing. `writes` counts them, for ever.
At boot     a valid RTC total is exact: resume from it. Otherwise (a power cut, or the first
            boot) resume from the checkpoint and say what may be missing: the energy used
            between the checkpoint and the cut, at most max_power_w times that time. (The
            collector's energy feed still has every slot the plug sent before the cut.)
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


class EnergyStore:
    def __init__(self, rtc, every_wh=100, every_s=21600, state_dir="."):
        self._rtc = rtc
        self._buf = bytearray(_RTC_SIZE)
        self._path = state_dir + "/" + CHECKPOINT_FILE
        self.every_wh = every_wh
        self.every_s = every_s
        self.writes = 0
        self._ck_wh = 0
        self._ck_s = -1
        self.source = None
        self.note = None

    def _check(self, wh, rem):
        return (wh + 7 * rem + _MAGIC) & _MASK

    def load(self):
        """(Wh, remainder dJ) to resume from; sets `source` and, after a power cut, `note`."""
        ck = self._read_checkpoint()
        if ck:
            self._ck_wh, self._ck_s, self.writes = ck["wh"], ck["time"], ck["writes"]
        raw = self._rtc.read()
        if len(raw) >= _RTC_SIZE:
            magic, version, wh, rem, check = struct.unpack_from(_RTC_FMT, raw, 0)
            if magic == _MAGIC and version == 1 and check == self._check(wh, rem) and wh >= self._ck_wh:
                self.source = "rtc"
                return wh, rem
        if not ck:
            self.source = "none"
            return 0, 0
        self.source = "checkpoint"
        self.note = ("power cut: the energy total resumed from the flash checkpoint (%.3f kWh); "
                     "what was used between that checkpoint and the cut is not in the total"
                     % (ck["wh"] / 1000))
        return ck["wh"], ck.get("rem_dj", 0)

    def since_checkpoint_s(self, now_s):
        return now_s - self._ck_s if self._ck_s >= 0 and now_s >= self._ck_s else 0

    def bound_wh(self, now_s, max_power_w):
        """At most how much the resumed total can lack, once the clock is known."""
        if self.source != "checkpoint":
            return 0
        return max_power_w * self.since_checkpoint_s(now_s) // 3600

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

    def slot(self, wh, rem, now_s):
        """After every slot: the RTC copy always, the flash checkpoint when it is due."""
        struct.pack_into(_RTC_FMT, self._buf, 0, _MAGIC, 1, wh, rem, self._check(wh, rem))
        self._rtc.write(self._buf)
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
