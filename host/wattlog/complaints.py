"""complaints.py - count bad input by kind and say so in plain words, at most once a minute each.

The collector never stops over what a node or the network sends: it counts it here, logs the
first case of each kind at once, and folds later ones into one line per kind per minute
(flush(), called from the collector's loop, says what a quiet minute left unsaid).
"""

import logging
import time

log = logging.getLogger("wattlog")


class Complaints:
    def __init__(self, every_s=60.0, clock=time.monotonic):
        self.totals = {}
        self._every_s = every_s
        self._clock = clock
        self._said = {}     # kind -> when it was last logged
        self._unsaid = {}   # kind -> [cases not yet reported, the latest message]

    def __call__(self, kind, message, n=1):
        self.totals[kind] = self.totals.get(kind, 0) + n
        held = self._unsaid.setdefault(kind, [0, message])
        held[0] += n
        held[1] = message
        self._say_if_due(kind, self._clock())

    def _say_if_due(self, kind, now):
        last = self._said.get(kind)
        if last is not None and now - last < self._every_s:
            return
        n, message = self._unsaid.pop(kind)
        log.warning("%s", message if n == 1 else "%s (%d cases like this since the last report)"
                    % (message, n))
        self._said[kind] = now

    def flush(self):
        now = self._clock()
        for kind in list(self._unsaid):
            self._say_if_due(kind, now)
