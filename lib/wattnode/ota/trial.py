"""trial.py - an update's work at a boot: the trial of a new version (confirmed at its end,
or rolled back), its grace period once confirmed, and the report of an outcome decided before
this boot (a rollback by boot.py or by a trial, a confirmation said while the link was down).

The rules (the package's notes say the same):
- trial: the new version runs its whole trial (trial_s from this boot) in one boot. At its end
  it is confirmed if it has sampled and the collector has acknowledged its readings: at least
  one, and every one it made before the trial's last ACK_LAG_S. Otherwise it rolls back here
  (a version that publishes its readings where the collector never hears them, one that
  never reaches the broker); boot.py rolls back one that crashed, failed to start, was reset
  by the watchdog or booted MAX_TRIAL_BOOTS times (power cuts) unconfirmed. Its records are
  freed only by the collector's ack, as always: a PUBACK only says the broker took them;
- grace: once confirmed, the pointer says "grace" until the version has run
  crashes.HEALTHY_S in one boot (the time after which its crashes no longer count as "in a row"); meanwhile
  boot.py sends a crash loop back to the previous version, still on the flash, instead of
  into safe mode; then "ok";
- report: an outcome decided before this boot (ota/result) is said once the link is up, on the
  log and ota/status. A rollback's report waits (at most REPORT_WAIT_MS) for the collector's
  answer to "online", which says the last slot it holds, and for this boot's first slot
  (the node's `slots()`). The records the rolled-back boot made and the collector had not
  acknowledged were kept across the reset (keep.py, spill.py) and are sent now; the slots
  after the collector's last one that are neither held nor this boot's were neither stored
  nor kept, and their number goes with the report ("lost" on ota/status), so the collector
  counts them as lost.

Loaded by the package's Work only when a boot has such work (ota/boot says "trial" or "grace", or
ota/result is there), apart from the transfer (transfer.py): a version on trial holds only
this, a few KiB, while it proves it can meter, and a plug taking an update holds only the
transfer. Unloaded once its work is done. It is handed what it judges by (the link, the clock,
the ring and the sampler) and a reboot request, not the node.
"""

import json
import os
import struct
import time

from micropython import const

from wattnode.crashes import HEALTHY_S
from wattnode.ota.flash import (DIR, RESULT, read_pointer, running, status, write_pointer,
                                write_result)
from wattnode.wire import EPOCH_UNIX

ACK_LAG_S = const(30)          # the readings of a trial's last 30 s may still await their ack
REPORT_WAIT_MS = const(30000)  # a rollback's report waits this long for what it counts


class Trial:
    """A boot's update work, driven from the node's loop: service() while the link is up,
    check_deadline() while it is down; busy() until there is none left."""

    def __init__(self, link, clock, ring, sampler, reboot, boot_ticks, slots):
        """reboot(reason): asks the node for a clean reboot; boot_ticks: the clock's ticks_ms()
        when the node started (its uptime); slots(): (the collector's newest slot of this plug,
        unix s, from its answer to "online": 0 when it holds none, None until it answers;
        this boot's first slot, unix s, or None until the wall time is known)."""
        self.link = link
        self.clock = clock
        self.ring = ring
        self.sampler = sampler
        self.reboot = reboot
        self.boot_ticks = boot_ticks
        self.slots = slots
        self.trial = None     # [cur, prev, state, boots, trial_s] while on trial
        self.grace = None     # the same while confirmed, in its grace period
        self.trial_end = 0
        self._must_ack = -1   # ring.next as the trial's last ACK_LAG_S began
        self._up_ms = -1      # when the link was first up with a rollback to report
        self._kept = _kept_slots(ring)  # (oldest, newest) slot kept from before, unix s
        p = read_pointer()
        if p is not None and p[2] == "trial":
            self.trial = p
            self.trial_end = time.ticks_add(clock.ticks_ms(), p[4] * 1000)
        elif p is not None and p[2] == "grace":
            self.grace = p
        try:
            with open(RESULT) as f:
                self.result = json.load(f)  # an outcome to report
        except (OSError, ValueError):
            self.result = None

    def busy(self):
        return self.trial is not None or self.grace is not None or self.result is not None

    def service(self):
        if self.trial is not None:
            self._check_trial()
        if self.result is not None:
            self._report()
        self._check_grace()

    def check_deadline(self):
        """While the link is down the trial's clock still runs (from the node's loop)."""
        if self.trial is not None:
            self._check_trial()
        self._check_grace()

    def _check_trial(self):
        ring = self.ring
        left_ms = time.ticks_diff(self.trial_end, self.clock.ticks_ms())
        if self._must_ack < 0 and left_ms <= ACK_LAG_S * 1000:
            self._must_ack = ring.next
        if left_ms > 0:
            return
        sampled = self.sampler.last_slot >= 0
        # ring.base: readings kept from before the reboot (spill.py) are not this boot's
        if sampled and not ring.dropped and ring.first > ring.base and \
                ring.first >= self._must_ack:
            self._confirm()
        else:
            self.rollback("not confirmed within %d s (link up: %s, sampled: %s, readings "
                          "acknowledged by the collector: %d of %d, %d needed)"
                          % (self.trial[4], self.link.up, sampled, ring.first - ring.dropped,
                             ring.next, max(1, self._must_ack)))

    def _confirm(self):
        cur, prev = self.trial[0], self.trial[1]
        write_pointer(cur, prev, "grace")
        self.grace = self.trial
        self.trial = None
        self.result = {"id": cur[1:], "state": "confirmed", "version": running(),
                       "reason": ""}
        write_result(self.result)  # said once the link is up, if it is down now
        self.link.log("ota: version %s confirmed: it ran its %d s trial, sampling, its readings "
                      "acknowledged by the collector" % (running(), self.grace[4]))

    def _check_grace(self):
        uptime_s = time.ticks_diff(self.clock.ticks_ms(), self.boot_ticks) // 1000
        if self.grace is not None and uptime_s >= HEALTHY_S:
            p = read_pointer()  # not if an update switched meanwhile (its reboot is due)
            if p is not None and p[:3] == [self.grace[0], self.grace[1], "grace"]:
                write_pointer(p[0], p[1], "ok")
            self.grace = None

    def rollback(self, reason):
        cur, prev = self.trial[0], self.trial[1]
        write_pointer(prev, "-", "ok")
        write_result({"id": cur[1:], "state": "rolled back", "version": running(),
                      "reason": reason})
        self.trial = None
        ring = self.ring
        print("ota: rolling back from version %s: %s; %d readings the collector has not "
              "acknowledged are kept across the reboot for the previous version to send"
              % (running(), reason, ring.count()))
        self.reboot("rolling back an update: " + reason)

    def _report(self):
        """The outcome in self.result, said once, on the log and ota/status; a rollback's with
        the slots it lost, once they can be counted."""
        r = self.result
        lost = None
        if r.get("state") == "rolled back":
            now = self.clock.ticks_ms()
            if self._up_ms < 0:
                self._up_ms = now
            stored, first = self.slots()
            if stored is None:
                first = None
            if first is None and time.ticks_diff(now, self._up_ms) < REPORT_WAIT_MS:
                return
            if first is not None and stored:
                lost = _lost(stored, self._kept, first, self.sampler.interval_s)
        self.result = None
        try:
            os.remove(RESULT)
        except OSError:
            pass
        version = r.get("version")
        try:  # boot.py names the version it rolled back by its folder (u<id>)
            with open("%s/%s/version" % (DIR, version)) as f:
                version = f.read()
        except (OSError, TypeError):
            pass
        reason = r.get("reason") or ""
        if lost is not None:
            reason += ("; %d slot%s between %d and %d (unix s) neither stored nor kept"
                       % (lost, "" if lost == 1 else "s", stored, first)) if lost \
                else "; no slot lost"
        self.link.log("ota: update %s %s (version %s)%s; running version %s"
                      % (r.get("id"), r.get("state"), version, ": " + reason if reason else "",
                         running()))
        status(self.link, r.get("state"), r.get("id"), version, reason, lost=lost)


def _kept_slots(ring):
    """(oldest, newest) unix s of the records kept from the boot before (ring.base of them,
    oldest first; keep.py puts the newest into RAM), or None: read when the trial starts,
    before any is acknowledged."""
    if ring.base <= ring.first or ring.base - 1 < ring.low:
        return None
    newest = struct.unpack_from("<I", ring.buf, ring.offset(ring.base - 1))[0]
    if ring.first >= ring.low:
        oldest = struct.unpack_from("<I", ring.buf, ring.offset(ring.first))[0]
    else:  # on the flash (spill.py)
        oldest = ring.behind.held(ring)[2]
        if oldest < 0:
            return None
    return oldest + EPOCH_UNIX, newest + EPOCH_UNIX


def _lost(stored, kept, first, interval_s):
    """Slots after `stored` (the collector's newest) and before `first` (this boot's) that no
    record holds: before the kept ones, and between them and this boot's."""
    def gap(a, b):
        return (b - a) // interval_s - 1 if b - a > interval_s else 0
    if kept is None:
        return gap(stored, first)
    oldest, newest = kept
    return (gap(stored, oldest) if oldest > stored else 0) + gap(max(stored, newest), first)
