"""otatrial.py - an update's work at a boot: the trial of a new version (confirmed, or rolled
back at its deadline) and the report of an outcome decided before this boot (a rollback by
boot.py or by a trial). The rules of the trial are in ota.py's notes.

Loaded only when a boot has such work (ota/boot says "trial", or ota/result is there), apart
from the transfer (ota.py): a version on trial holds only this, a few KiB, while it proves it
can meter, and a plug taking an update holds only the transfer. Unloaded once its work is
done (node.py).
"""

import json
import os
import time

from wattnode.otaflash import (DIR, RESULT, read_pointer, running, status, write_pointer,
                               write_result)


class Trial:
    """A boot's update work, driven from the node's loop: service() while the link is up,
    check_deadline() while it is down; busy() until there is none left."""

    def __init__(self, node):
        self.node = node
        self.link = node.link
        self.trial = None     # [cur, prev, state, boots, trial_s] while on trial
        self.trial_end = 0
        self.reported = False
        p = read_pointer()
        if p is not None and p[2] == "trial":
            self.trial = p
            self.trial_end = time.ticks_add(node.hw.clock.ticks_ms(), p[4] * 1000)

    def busy(self):
        return self.trial is not None or not self.reported

    def service(self):
        if not self.link.up:
            return
        if not self.reported:
            self._report()
        if self.trial is not None:
            self._check_trial()

    def _check_trial(self):
        node = self.node
        if self.link.up and node.sampler.last_slot >= 0 and node.ring.first > node.ring.base:
            cur, prev = self.trial[0], self.trial[1]
            write_pointer(cur, prev, "ok")
            self.trial = None
            self.link.log("ota: version %s confirmed: reconnected, sampling, readings "
                          "acknowledged by the collector" % running())
            status(self.link, "confirmed", cur[1:], None, "")
        elif time.ticks_diff(node.hw.clock.ticks_ms(), self.trial_end) >= 0:
            self.rollback("not confirmed within %d s (link up: %s, sampled: %s, acked: %s)"
                          % (self.trial[4], self.link.up, node.sampler.last_slot >= 0,
                             node.ring.first > node.ring.base))

    def check_deadline(self):
        """While the link is down the trial's clock still runs (from the node's loop)."""
        if self.trial is not None and time.ticks_diff(self.node.hw.clock.ticks_ms(),
                                                      self.trial_end) >= 0:
            self.rollback("not confirmed within %d s (the link never came up)"
                          % self.trial[4])

    def rollback(self, reason):
        cur, prev = self.trial[0], self.trial[1]
        write_pointer(prev, "-", "ok")
        write_result({"id": cur[1:], "state": "rolled back", "version": running(),
                      "reason": reason})
        self.trial = None
        print("ota: rolling back from version %s: %s" % (running(), reason))
        self.node.reboot_reason = "rolling back an update: " + reason

    def _report(self):
        """An outcome decided before this boot: said once, on the log and ota/status."""
        self.reported = True
        try:
            with open(RESULT) as f:
                r = json.load(f)
        except (OSError, ValueError):
            return
        os.remove(RESULT)
        version = r.get("version")
        try:  # boot.py names the version it rolled back by its folder (u<id>)
            with open("%s/%s/version" % (DIR, version)) as f:
                version = f.read()
        except (OSError, TypeError):
            pass
        self.link.log("ota: update %s %s (version %s): %s; running version %s"
                      % (r.get("id"), r.get("state"), version, r.get("reason"), running()))
        status(self.link, r.get("state"), r.get("id"), version, r.get("reason"))
