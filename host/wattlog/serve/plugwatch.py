"""plugwatch.py - what the plugs publish, as the collector hears it: each plug's retained status
and state, its firmware version (from its Home Assistant discovery config), its last update's
result (its retained ota/status) and its last log lines, for the HTTP side's plug health, live
stream and metrics. The version and the update result are parsed by firmware.py, which keeps
them on disk for `wattlog nodes`.

The collector's MQTT thread calls take() for every message (it subscribes to topics());
readers on other threads get copies (snapshot()) made under a lock held only for the copy,
and listeners (the live stream) are called in the MQTT thread, so they must be quick.
An "info" answer on a plug's log topic, and the "status" line a plug says as it connects, are
its Node.status() (lib/wattnode/node.py): the keys in INFO_KEYS are kept. Meter fault lines ("<chip> meter: N frames with ...") are summed.
"""

import collections
import json
import re
import threading
import time

from wattlog.store.feeds import NODE_ID
from wattlog.fleet.firmware import parse_status, sw_version
from wattlog.listeners import Listeners

STATE_KEYS = ("time", "power", "voltage", "current", "energy", "relay", "rssi")
LOG_LINES = 20
LOG_CHARS = 2000  # of a log line kept: a plug's status line is about 1.2 KB
_FAULTS = re.compile(r"\S+ meter: (.*)")
# what a plug's "info" answer (its Node.status(), lib/wattnode/node.py) says that health shows
INFO_KEYS = ("boot", "uptime_s", "meter_faults", "capacity", "produced", "unacked", "unsent",
             "dropped", "connects", "batches", "acks", "resends", "bad_acks", "last_error",
             "link_up", "commands", "bad_commands", "heap_free", "broadlink", "version",
             "kept", "spill_readings", "spill_bytes", "spill_oldest_slot", "spill_capacity",
             "spill_dropped", "spill_torn")
# what a plug holds on its flash (lib/wattnode/spill.py), from its status: the spill_ keys
SPILL_KEYS = ("readings", "bytes", "oldest_slot", "capacity", "dropped", "torn")


def spill(info):
    """{"readings", "bytes", "oldest_slot" (unix s), "capacity", "dropped", "torn"} of a
    plug's flash spill, from its status (info); None when it has not said (older firmware)."""
    if not info or info.get("spill_readings") is None:
        return None
    return {k: info.get("spill_" + k) for k in SPILL_KEYS}


class PlugWatch:
    """The plugs' retained status, state and firmware version and their log lines, as the
    collector's MQTT client receives them (collector.py calls take() from its thread)."""

    def __init__(self, base_topic, ha_prefix="homeassistant"):
        self.base = base_topic
        self.ha = ha_prefix
        self._lock = threading.Lock()
        self._plugs = {}      # node -> {"status", "state", "firmware", "update", "info",
                              #          "faults", "fault_note", "log"}
        self._listeners = Listeners()  # fn(kind, node, data), in the MQTT thread: quick

    def topics(self):
        """What the collector subscribes to for this (QoS 0: only the latest matters)."""
        return [("%s/+/state" % self.base, 0), ("%s/+/log" % self.base, 0),
                ("%s/+/ota/status" % self.base, 0), ("%s/device/+/config" % self.ha, 0)]

    def take(self, topic, payload):
        """One message; True if it was one of ours (the collector need not look further).
        status messages are noted and left to the collector too."""
        if topic.startswith(self.ha + "/device/") and topic.endswith("/config"):
            node = topic[len(self.ha) + 8:-7]
            if NODE_ID.match(node):
                self._firmware(node, payload)
            return True
        if not topic.startswith(self.base + "/"):
            return False
        node, _, kind = topic[len(self.base) + 1:].partition("/")
        if kind not in ("state", "log", "status", "ota/status"):
            return False
        if NODE_ID.match(node):
            if kind == "ota/status":
                update = parse_status(payload)
                if update is not None:
                    with self._lock:
                        self._plug(node)["update"] = update
            elif kind == "state":
                self._state(node, payload)
            elif kind == "log":
                self._log(node, payload)
            else:
                self._note(node, "status", {"status": payload.decode("ascii", "replace")[:16]})
        return kind != "status"

    def _plug(self, node):
        return self._plugs.setdefault(node, {"status": None, "state": None, "firmware": None,
                                             "update": None, "info": None, "faults": 0,
                                             "fault_note": None,
                                             "log": collections.deque(maxlen=LOG_LINES)})

    def _note(self, node, kind, fields, event=None):
        with self._lock:
            plug = self._plug(node)
            plug.update(fields)
            online = plug["status"] == "online"
        self._listeners.call(kind, node, dict(event or fields, online=online))

    def _state(self, node, payload):
        try:
            state = json.loads(payload)
        except ValueError:
            return  # not a plug's state: the plug's own log says what it publishes
        if not isinstance(state, dict):
            return
        state = {k: state.get(k) for k in STATE_KEYS}
        self._note(node, "state", {"state": state, "heard": time.time()}, state)

    def _firmware(self, node, payload):
        version = sw_version(payload)
        if version is not None:
            with self._lock:
                self._plug(node)["firmware"] = version

    def _log(self, node, payload):
        text = payload.decode("utf-8", "replace")[:LOG_CHARS]
        fields = {}
        m = _FAULTS.match(text)
        if text.startswith(("info ", "status ")):  # an answer; what a plug says as it connects
            try:
                info = json.loads(text.split(" ", 1)[1].rsplit(" (id ", 1)[0])
            except ValueError:
                info = None
            if isinstance(info, dict):
                fields["info"] = {k: info.get(k) for k in INFO_KEYS}
        with self._lock:
            plug = self._plug(node)
            plug["log"].append((int(time.time()), text))
            plug.update(fields)
            if m:
                plug["faults"] += sum(int(n) for n in re.findall(r"(\d+) ", m.group(1)))
                plug["fault_note"] = text
        self._listeners.call("log", node, {"text": text})

    def snapshot(self, node=None):
        """{node: copy of what is known} (one node's copy, or None, with node=)."""
        with self._lock:
            if node is not None:
                plug = self._plugs.get(node)
                return None if plug is None else dict(plug, log=list(plug["log"]))
            return {n: dict(p, log=list(p["log"])) for n, p in self._plugs.items()}

    def listen(self, fn):
        self._listeners.add(fn)

    def unlisten(self, fn):
        self._listeners.remove(fn)
