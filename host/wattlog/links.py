"""links.py - the state of a link the collector depends on: its broker, and InfluxDB when the
sink is on. /api/health and the live stream (api.py) report it; the dashboard's header and
Health view say it in words and colour.

    link = Link("127.0.0.1:1883")        # "starting": nothing tried yet, since now
    link.up()                            # "up" since now
    link.down("cannot reach ... (Connection refused)")   # "down" since now, with the reason
    link.down("...")                     # still down since then; the reason is the latest
    link.elsewhere("another collector of the cluster sends")   # another process uses it
    link.status()    # {"state": "starting"|"up"|"down"|"elsewhere", "since": unix s,
                     #  "address": ..., "reason": "..." (down and elsewhere only)}
    link.listen(fn)  # fn(status) on each change, in the owner's thread: it must be quick

Design notes:
- One writer: the thread that owns the link (the collector's MQTT thread for the broker,
  the sink's thread for InfluxDB) calls up() and down(). The status is a dict replaced
  whole, never changed in place, so a reader on another thread (the HTTP side) takes it in
  one step and never sees half an update.
- `since` is when the state began: a link that keeps failing stays down since its first
  failure, while its reason follows the latest attempt (a broker that stopped, then
  refuses connections, then refuses the login says each in turn).
- The clock is injected (clock=, unix seconds).
"""

import time

from wattlog.listeners import Listeners


class Link:
    def __init__(self, address, clock=time.time):
        self.clock = clock
        self._status = {"state": "starting", "since": int(clock()), "address": address}
        self._listeners = Listeners()

    def status(self):
        return self._status

    def up(self):
        if self._status["state"] != "up":
            self._set({"state": "up", "since": int(self.clock()),
                       "address": self._status["address"]})

    def down(self, reason):
        was = self._status
        if was["state"] == "down" and was["reason"] == reason:
            return
        since = was["since"] if was["state"] == "down" else int(self.clock())
        self._set({"state": "down", "since": since, "address": was["address"],
                   "reason": reason})

    def elsewhere(self, reason):
        """Not this process's to use now: another one does the work (a cluster's InfluxDB sink
        runs in one collector at a time; the others say so)."""
        was = self._status
        if was["state"] != "elsewhere":
            self._set({"state": "elsewhere", "since": int(self.clock()),
                       "address": was["address"], "reason": reason})

    def _set(self, status):
        self._status = status
        self._listeners.call(status)

    def listen(self, fn):
        self._listeners.add(fn)

    def unlisten(self, fn):
        self._listeners.remove(fn)
