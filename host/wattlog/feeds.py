"""feeds.py - the feed registry: <data>/feeds.json maps feed ids to node, channel, unit, interval.

  {"version": 1, "feeds": [{"id": 1, "node": "plug-34ea34797bff", "channel": "power",
                            "unit": "W", "interval": 10}, ...]}

Each node has one feed per channel (CHANNELS). Ids are never reused: a quarantined feed keeps
its entry, marked "quarantined", and new readings for that node and channel go to a new feed.
The registry is replaced atomically (durable.py) whenever a feed is added or quarantined.
"""

import os

from wattlog import durable

CHANNELS = (("power", "W"), ("voltage", "V"), ("current", "A"), ("energy", "kWh"))
UNITS = dict(CHANNELS)
FILE = "feeds.json"


class RegistryError(Exception):
    pass


class Registry:
    def __init__(self, data_dir):
        self.path = os.path.join(data_dir, FILE)
        try:
            doc = durable.read_json(self.path)
        except ValueError as e:
            raise RegistryError("%s is not valid JSON (%s); restore it from a backup or move it "
                                "away to start a new registry" % (self.path, e)) from None
        self.entries = list((doc or {}).get("feeds", []))

    def active(self):
        return [e for e in self.entries if not e.get("quarantined")]

    def find(self, node, channel):
        for e in self.entries:
            if e["node"] == node and e["channel"] == channel and not e.get("quarantined"):
                return e
        return None

    def lookup(self, name):
        """The active entry for "node/channel" or a feed id; None if there is none."""
        if name.isdigit():
            return next((e for e in self.entries if e["id"] == int(name)), None)
        node, _, channel = name.partition("/")
        return self.find(node, channel)

    def next_id(self):
        return max((e["id"] for e in self.entries), default=0) + 1

    def add(self, feed_id, node, channel, interval):
        entry = {"id": feed_id, "node": node, "channel": channel, "unit": UNITS[channel],
                 "interval": interval}
        self.entries.append(entry)
        self.save()
        return entry

    def quarantine(self, entry, reason):
        entry["quarantined"] = reason
        self.save()

    def save(self):
        durable.write_json(self.path, {"version": 1, "feeds": self.entries})
