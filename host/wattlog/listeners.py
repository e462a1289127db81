"""listeners.py - callbacks one thread registers and another calls: how the HTTP side hears
of what the collector's threads learn (plugwatch.py: what the plugs publish; links.py: the
broker's and InfluxDB's links).

    heard = Listeners()
    heard.add(fn)            # from any thread
    heard.call(kind, data)   # in the caller's thread: each fn must be quick
    heard.remove(fn)

The list is copied under a lock for each call, so a listener added or removed meanwhile
neither breaks the loop nor is called half-way.
"""

import threading


class Listeners:
    def __init__(self):
        self._lock = threading.Lock()
        self._fns = []

    def add(self, fn):
        with self._lock:
            self._fns.append(fn)

    def remove(self, fn):
        with self._lock:
            if fn in self._fns:
                self._fns.remove(fn)

    def call(self, *args):
        with self._lock:
            fns = list(self._fns)
        for fn in fns:
            fn(*args)
