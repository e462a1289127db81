"""feeds.py - the feed registry: <data>/feeds.json maps feed ids to node, channel, unit, interval.

  {"version": 1, "last_id": 8,
   "feeds": [{"id": 1, "node": "plug-34ea34797bff", "channel": "power", "unit": "W",
              "interval": 10}, ...]}

Each node has one feed per channel (CHANNELS). Ids are never reused: `last_id` is the highest
id ever handed out (even by a commit that failed), a quarantined feed keeps its entry, marked
"quarantined", and new readings for that node and channel go to a new feed.

The registry is what makes a .meta/.dat pair wattlog's: the collector never creates over,
truncates or writes to feed files the registry does not list (foreign_files() finds them; a
data directory holding another program's PHPFina files, emoncms's for one, is refused).

Redundancy: every feed also has a sidecar, phpfina/<id>.json, holding its own entry, written
once when the feed is made (and rewritten at start-up if missing). feeds.json is replaced
atomically (durable.py) once per commit that adds feeds, and when a feed is quarantined; if it
is damaged anyway, `wattlog repair` rebuilds it from the sidecars (rebuild()): a damaged
registry costs a command, not the data. Sidecars are not fsynced one by one: feeds.json is the
durable copy, and start-up rewrites any sidecar a power cut lost.
"""

import json
import os
import re

from wattlog.store import durable

CHANNELS = (("power", "W"), ("voltage", "V"), ("current", "A"), ("energy", "kWh"))
UNITS = dict(CHANNELS)
FILE = "feeds.json"
NODE_ID = re.compile(r"[a-z0-9_-]{1,32}\Z")
_FEED_FILE = re.compile(r"(\d+)\.(meta|dat|json)\Z")


class RegistryError(Exception):
    pass


def _check_entry(e, where):
    """The entry as the registry keeps it; RegistryError naming what is wrong."""
    if not isinstance(e, dict):
        raise RegistryError("%s: an entry is %s, not an object" % (where, type(e).__name__))
    problem = None
    if not isinstance(e.get("id"), int) or isinstance(e.get("id"), bool) or e["id"] < 1:
        problem = "its id %r is not a positive whole number" % (e.get("id"),)
    elif not isinstance(e.get("node"), str) or not NODE_ID.match(e["node"]):
        problem = "feed %d's node %r is not a node id" % (e["id"], e.get("node"))
    elif e.get("channel") not in UNITS:
        problem = "feed %d's channel %r is not one of %s" % (e["id"], e.get("channel"),
                                                            ", ".join(UNITS))
    elif not isinstance(e.get("interval"), int) or not 0 < e["interval"] <= 86400:
        problem = "feed %d's interval %r is not 1..86400 seconds" % (e["id"], e.get("interval"))
    elif "quarantined" in e and not isinstance(e["quarantined"], str):
        problem = "feed %d's quarantine note is not text" % e["id"]
    if problem:
        raise RegistryError("%s: %s" % (where, problem))
    out = {"id": e["id"], "node": e["node"], "channel": e["channel"],
           "unit": UNITS[e["channel"]], "interval": e["interval"]}
    if "quarantined" in e:
        out["quarantined"] = e["quarantined"]
    return out


class Registry:
    def __init__(self, data_dir, entries=None, last_id=0):
        """Load <data_dir>/feeds.json (RegistryError, saying what to do, when it is damaged);
        with `entries`, a registry of those instead (rebuild())."""
        self.data_dir = data_dir
        self.path = os.path.join(data_dir, FILE)
        self.feed_dir = os.path.join(data_dir, "phpfina")
        if entries is None:
            entries, last_id = self._load()
        self.entries = entries
        self.last_id = max([last_id] + [e["id"] for e in entries])
        self._index()

    def _load(self):
        hint = ("; `wattlog repair --data %s` rebuilds it from the feeds' own files"
                % self.data_dir)
        try:
            doc = durable.read_json(self.path)
        except ValueError as e:
            raise RegistryError("%s is damaged (%s)%s" % (self.path, e, hint)) from None
        if doc is None:
            return [], 0
        if not isinstance(doc, dict) or not isinstance(doc.get("feeds"), list):
            raise RegistryError("%s is damaged (no list of feeds)%s" % (self.path, hint))
        last_id = doc.get("last_id", 0)
        if not isinstance(last_id, int):
            raise RegistryError("%s is damaged (last_id %r)%s" % (self.path, last_id, hint))
        try:
            entries = [_check_entry(e, self.path) for e in doc["feeds"]]
        except RegistryError as e:
            raise RegistryError("%s is damaged (%s)%s" % (self.path, str(e).split(": ", 1)[1],
                                                           hint)) from None
        ids = [e["id"] for e in entries]
        if len(set(ids)) != len(ids):
            raise RegistryError("%s is damaged (a feed id is listed twice)%s" % (self.path, hint))
        return entries, last_id

    def _index(self):
        self._by_id = {e["id"]: e for e in self.entries}
        self._active = {(e["node"], e["channel"]): e for e in self.entries
                        if not e.get("quarantined")}

    def active(self):
        return [e for e in self.entries if not e.get("quarantined")]

    def find(self, node, channel):
        return self._active.get((node, channel))

    def lookup(self, name):
        """The active entry for "node/channel" or a feed id; None if there is none."""
        if name.isdigit():
            return self._by_id.get(int(name))
        node, _, channel = name.partition("/")
        return self.find(node, channel)

    def owns(self, feed_id):
        return feed_id in self._by_id

    # -- changes: in memory until save() -----------------------------------------------------

    def add(self, node, channel, interval):
        """A new entry under the next id no file uses yet. Kept in memory: save() writes it."""
        feed_id = self.last_id + 1
        while any(os.path.exists(os.path.join(self.feed_dir, "%d.%s" % (feed_id, ext)))
                  for ext in ("meta", "dat")):
            feed_id += 1  # someone else's files: never written over
        self.last_id = feed_id
        entry = {"id": feed_id, "node": node, "channel": channel, "unit": UNITS[channel],
                 "interval": interval}
        self.entries.append(entry)
        self._index()
        return entry

    def quarantine(self, entry, reason):
        entry["quarantined"] = reason
        self._index()
        self.save()

    def state(self):
        """Everything but last_id (ids are never handed out twice, even after a rollback).
        A commit only appends entries, so a copy of the list is the whole state."""
        return list(self.entries)

    def restore(self, state):
        self.entries = state
        self._index()

    def save(self):
        durable.write_json(self.path, {"version": 1, "last_id": self.last_id,
                                       "feeds": self.entries})

    # -- redundancy --------------------------------------------------------------------------

    def sidecar_path(self, feed_id):
        return os.path.join(self.feed_dir, "%d.json" % feed_id)

    def write_sidecar(self, entry):
        """phpfina/<id>.json: the feed's own entry, for rebuild(). Not fsynced (see above)."""
        with open(self.sidecar_path(entry["id"]), "w") as f:
            json.dump({k: v for k, v in entry.items() if k != "quarantined"}, f, sort_keys=True)
            f.write("\n")

    def heal_sidecars(self):
        """Rewrite the sidecars of active feeds that lack one (a power cut, an older wattlog);
        returns how many."""
        missing = [e for e in self.active() if not os.path.exists(self.sidecar_path(e["id"]))]
        for e in missing:
            self.write_sidecar(e)
        return len(missing)

    def foreign_files(self):
        """Feed files in phpfina/ that are not wattlog's: no registry entry, no sidecar, and an
        id wattlog never handed out. Sorted names."""
        try:
            names = os.listdir(self.feed_dir)
        except FileNotFoundError:
            return []
        ours = set(self._by_id)
        sidecars = {int(m.group(1)) for m in map(_FEED_FILE.match, names)
                    if m and m.group(2) == "json"}
        out = []
        for name in names:
            m = _FEED_FILE.match(name)
            if m and m.group(2) != "json":
                fid = int(m.group(1))
                if fid not in ours and fid not in sidecars and fid > self.last_id:
                    out.append(name)
        return sorted(out, key=lambda n: (int(n.split(".")[0]), n))


def rebuild(data_dir):
    """A registry made from the sidecars in phpfina/ (active feeds) and quarantine/ (feeds
    quarantined earlier), checked as feeds.json is; (registry, [sentences about what was odd])."""
    notes = []
    entries = {}
    for sub, quarantined in (("quarantine", True), ("phpfina", False)):
        directory = os.path.join(data_dir, sub)
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            continue
        for name in names:
            if not name.endswith(".json") or name.endswith(".tmp"):
                continue
            path = os.path.join(directory, name)
            try:
                with open(path) as f:
                    entry = _check_entry(json.load(f), path)
            except (OSError, ValueError, RegistryError) as e:
                notes.append("%s is unreadable (%s); that feed is left out" % (path, e))
                continue
            if quarantined:
                entry["quarantined"] = "quarantined before the registry was rebuilt (%s)" % name
            entries[entry["id"]] = entry  # an active sidecar wins over a quarantined one
    registry = Registry(data_dir, sorted(entries.values(), key=lambda e: e["id"]))
    seen = {}
    for e in registry.active():
        key = (e["node"], e["channel"])
        if key in seen:
            notes.append("feeds %d and %d both claim %s/%s; %d is kept active, %d quarantined"
                         % (seen[key], e["id"], e["node"], e["channel"], e["id"], seen[key]))
            registry._by_id[seen[key]]["quarantined"] = "a newer feed took over its channel"
        seen[key] = e["id"]
    for name in registry.foreign_files():
        notes.append("phpfina/%s has no sidecar: it is not listed (move it away if it is not "
                     "wattlog's)" % name)
    registry._index()
    return registry, notes
