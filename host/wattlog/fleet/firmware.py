"""firmware.py - each plug's firmware version and the result of its last over-the-air update,
as the plugs publish them, kept in <data>/firmware.json for `wattlog nodes` (and the HTTP
API's plug health, through plugwatch.py, which shares the parsers here).

What a plug publishes (lib/wattnode):
  homeassistant/device/<node>/config   retained, at every connection: "dev": {"sw_version"}
  wattlog/<node>/ota/status            retained, at each step of an update (lib/wattnode/ota/):
                                       {"id", "state", "version", "running", "reason", ...};
                                       a rollback's report also has "lost": the slots of the
                                       failed version that were neither stored nor kept
                                       (lib/wattnode/ota/trial.py)

<data>/firmware.json (written by the collector, replaced atomically by durable.py):
  {"version": 1, "nodes": {"<node>": {"firmware": "0.2.0" or null,
                                      "update": {"id", "state", "version", "reason",
                                                 "time": unix s the collector heard it} or null}}}

SD card: the file is written only when a plug's version or update result changes (a new
version announced, an update accepted, switched, confirmed, rolled back or refused), never per
reading or per connection: a plug that reconnects announces the same version, which changes
nothing. It is derived data: missing or damaged, it is rebuilt from what the broker retains
(said once in the log). Text from a plug is cut to a bounded length and stripped of control
characters before it is kept, since `wattlog nodes` prints it to a terminal.

A plug on trial (its last report "switching": it rebooted into a new version, which it
confirms only if the collector acknowledges the readings of its whole trial) would otherwise
wait for the next commit, up to the commit interval (300 s by default), longer than the trial
(120 s by default): on_trial() tells the collector to commit what such a plug sends at once
(collector.py), for at most TRIAL_MAX_S after the switch. An update costs a commit a reading
for its trial (12 for the default trial at 10 s).

A rollback whose report says it lost slots ("lost") is handed to on_lost(node, lost, update)
once, as the report is first heard (not again for the retained copy a restarted collector
hears, which firmware.json already holds): the collector counts them as lost readings of the
plug (nodes.py), beside those its own holes show.
"""

import json
import logging
import os
import threading
import time

from wattlog.store import durable
from wattlog.store.feeds import NODE_ID

log = logging.getLogger("wattlog")
FILE = "firmware.json"
STATES = ("receiving", "refused", "switching", "confirmed", "rolled back")
TRIAL_MAX_S = 3600 + 600   # the longest trial (lib/wattnode/ota/), its drain and reboot
VERSION_CHARS = 32
REASON_CHARS = 300
MAX_LOST = 1 << 30  # slots: what a plug could count (a small int on a 32-bit plug)


def _text(v, limit):
    """A plug's string, printable and bounded; None if it is not a string."""
    if not isinstance(v, str):
        return None
    return "".join(c if c.isprintable() else " " for c in v[:limit])


def sw_version(payload):
    """The firmware version in a Home Assistant device discovery config, or None."""
    try:
        return _text(json.loads(payload)["dev"]["sw_version"], VERSION_CHARS)
    except (ValueError, KeyError, TypeError):
        return None


def parse_status(payload, now=None):
    """A plug's ota/status -> {"id", "state", "version", "reason", "time"}, or None when it is
    not an update report (an empty payload included: a cleared retained status)."""
    try:
        m = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(m, dict) or m.get("state") not in STATES:
        return None
    lost = m.get("lost")
    return {"id": _text(m.get("id"), 8), "state": m["state"],
            "version": _text(m.get("version"), VERSION_CHARS),
            "reason": _text(m.get("reason"), REASON_CHARS) or "",
            "time": int(time.time() if now is None else now),
            "lost": lost if isinstance(lost, int) and 0 <= lost < MAX_LOST else None}


def describe(update):
    """One line for people: "0.2.0 confirmed", "rolled back from 0.3.0: it failed to start:
    ImportError(...)", "0.3.0 refused: ...", "receiving 0.3.0", "switching to 0.3.0"."""
    if not update:
        return "-"
    state, version, reason = update.get("state"), update.get("version") or "?", \
        update.get("reason")
    text = {"confirmed": "%s confirmed", "rolled back": "rolled back from %s",
            "refused": "%s refused", "receiving": "receiving %s",
            "switching": "switching to %s (on trial)"}.get(state, "%s " + str(state)) % version
    return text + (": " + reason if reason and state in ("rolled back", "refused") else "")


def read(data_dir):
    """{node: {"firmware", "update"}} from <data>/firmware.json; {} when there is none;
    ValueError naming the file when it is not what the collector writes."""
    path = os.path.join(data_dir, FILE)
    doc = durable.read_json(path)
    if doc is None:
        return {}
    nodes = doc.get("nodes") if isinstance(doc, dict) and doc.get("version") == 1 else None
    if not isinstance(nodes, dict) or not all(
            NODE_ID.match(n) and isinstance(d, dict) for n, d in nodes.items()):
        raise ValueError("%s is not a firmware record (version 1, nodes)" % path)
    return {n: {"firmware": _text(d.get("firmware"), VERSION_CHARS),
                "update": d.get("update") if isinstance(d.get("update"), dict) else None}
            for n, d in nodes.items()}


class Firmware:
    """The collector's record: take() every message of topics(); the file is replaced when a
    plug's version or update result changes. get() is safe from other threads."""

    def __init__(self, data_dir, base_topic="wattlog", ha_prefix="homeassistant",
                 complaints=None, clock=time.time, on_lost=None):
        self.path = os.path.join(data_dir, FILE)
        self.clock = clock
        self.base = base_topic
        self.ha = ha_prefix
        self.complaints = complaints
        self.on_lost = on_lost
        self.writes = 0
        self._lock = threading.Lock()
        self._dirty = False
        try:
            self._nodes = read(data_dir)
        except (ValueError, OSError) as e:
            log.warning("%s; it is made again from what the plugs announce", e)
            self._nodes = {}

    def topics(self):
        """(topic, QoS) to subscribe to; both are retained, so a start hears the latest."""
        return [("%s/device/+/config" % self.ha, 0), ("%s/+/ota/status" % self.base, 0)]

    def take(self, topic, payload):
        """One message; True if it was one of topics() (the collector need not look further;
        plugwatch.py takes a discovery config too, for the HTTP API)."""
        if topic.startswith(self.ha + "/device/") and topic.endswith("/config"):
            node = topic[len(self.ha) + 8:-7]
            version = sw_version(payload) if NODE_ID.match(node) else None
            if version is not None:
                self._set(node, "firmware", version)
            return True
        if not (topic.startswith(self.base + "/") and topic.endswith("/ota/status")):
            return False
        node = topic[len(self.base) + 1:-11]
        if not NODE_ID.match(node) or not payload:
            return True
        update = parse_status(payload, self.clock())
        if update is None:
            if self.complaints is not None:
                self.complaints("bad-ota-status", "ignored a message on %s that is not an "
                                "update report ({\"state\": one of %s})"
                                % (topic, ", ".join(STATES)))
            return True
        old = self.get(node)["update"] or {}
        if any(old.get(k) != update[k] for k in ("id", "state", "version", "reason")):
            self._set(node, "update", update)
            if update["lost"] and self.on_lost is not None:
                self.on_lost(node, update["lost"], update)
        return True

    def on_trial(self, node):
        """True while node's new version waits for an acknowledged reading to be confirmed."""
        with self._lock:
            update = (self._nodes.get(node) or {}).get("update") or {}
        return update.get("state") == "switching" and \
            self.clock() - (update.get("time") or 0) < TRIAL_MAX_S

    def get(self, node):
        with self._lock:
            d = self._nodes.get(node) or {"firmware": None, "update": None}
            return dict(d)

    def _set(self, node, key, value):
        with self._lock:
            d = self._nodes.setdefault(node, {"firmware": None, "update": None})
            if d[key] == value and not self._dirty:
                return
            d[key] = value
            doc = {"version": 1, "nodes": {n: dict(v) for n, v in self._nodes.items()}}
        try:
            durable.write_json(self.path, doc)
            self._dirty = False
            self.writes += 1
        except OSError as e:
            self._dirty = True  # written with the next change
            log.error("cannot write %s (%s); %s's firmware %s is kept in memory until the "
                      "next change", self.path, e.strerror, node, key)
