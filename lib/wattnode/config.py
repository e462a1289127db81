"""config.py - the node's config.json and board file: read them, fill defaults, say what is wrong.

config.json, on the flash root:
  node_id     "plug-34ea34797bff"  [a-z0-9_-], 1-32 characters; default: "plug-" + the MAC
  base_topic  "wattlog"            MQTT topics are <base_topic>/<node_id>/...
  broker      {"host": "192.168.1.10", "port": 1883, "user": null, "password": null,
               "ca": null}         ca: a PEM CA file on the flash turns TLS on (wattlog provision)
              host is one broker, or a list of them, each "host" or "host:port" (port: 1..65535;
              without one, broker.port; host: a name or an IPv4 address), e.g. ["10.0.0.5",
              "10.0.0.6:1884", "mqtt-3.lan"]: the nodes of a broker cluster. The link tries them
              in turn (link.py): on a failed connect or a lost connection the next one, at
              once, and after a whole round, the back-off one broker has. The same login (user,
              password, ca) goes to each. A bad entry is reported and left out; a list with
              none left falls back to the default host. check() gives a list as (host, port)
              pairs, broker.port where the entry names none.
  discovery_prefix "homeassistant" Home Assistant's MQTT discovery prefix
  wifi        {"ssid": "", "password": ""}
  interval_s  10                   slot length, 1..3600
  batch_max   64                   records per MQTT batch, 1..1024
  batch_wait_s 30                  longest a reading waits for its batch to fill, 0..600
  ack_timeout_s 0                  readings the broker accepted and the collector has not
                                   acknowledged after this long are sent again, 0..28800;
                                   0: three of the collector's commit intervals (link.py)
  relay_power_on "restore"         relay at power-on: "off", "on", or "restore" the last state
  checkpoint_wh 100, checkpoint_s 21600   flash checkpoint of the energy total: at most every
                                   100 Wh or 6 h, whichever comes later (see energy.py)
  watchdog_s  60                   the plug resets if the loop stalls this long, 10..600
  ntp_host    ""                   an NTP server on the LAN (the Pi, the router); without one
                                   the plug takes the collector's clock from its acks
  calibration {"voltage_gain": 1.0, "current_gain": 1.0, "power_gain": 1.0,
               "power_points": [[measured_w, true_w], ...]}   see calib.py
  broadlink   "off"                answer the Broadlink SP3S local protocol (broadlink.py):
                                   "off", "read" or "control" (anyone on the LAN can switch)
  broadlink_port 80                its UDP port, 1..65535
  ota_key     null                 64 hex digits: the key that authenticates update manifests
                                   (ota/); `wattlog provision` makes one per plug. Secret.
board.json, on the flash root: a copy of boards/<plug>.json (name, hal, chip, pins, ring_kib).

A value of the wrong type or out of range is replaced by its default and reported; an
unreadable file counts as empty. The node always starts: it reports the problems on its log
topic instead of boot-looping. check() reports each problem as a tuple (FILE, KEY, WHAT,
FALLBACK), e.g. ("config.json", "interval_s", "interval_s = 0 is outside 1..3600", "using
10"): WHAT names the key and what is wrong with its value, FALLBACK what the node does
instead. Each view words them its own way: say() for the boot log and the REPL
("config.json: interval_s = 0 is outside 1..3600; using 10"; load() gives its problems so),
about() for an edit of one key (commands.py: WHAT, then "nothing changed"). A secret's value
(a key named like password, key, token or secret: wifi.password, broker.password) is never in
a problem: its key and what is wrong are. broker.user, broker.password and broker.ca are
strings or null.
"""

import json

from wattnode import calib

DEFAULTS = {
    "node_id": None,
    "base_topic": "wattlog",
    "broker": {"host": "127.0.0.1", "port": 1883, "user": None, "password": None, "ca": None},
    "discovery_prefix": "homeassistant",
    "wifi": {"ssid": "", "password": ""},
    "interval_s": 10,
    "batch_max": 64,
    "batch_wait_s": 30,
    "ack_timeout_s": 0,
    "relay_power_on": "restore",
    "checkpoint_wh": 100,
    "checkpoint_s": 21600,
    "watchdog_s": 60,
    "ntp_host": "",
    "calibration": {},
    "broadlink": "off",
    "broadlink_port": 80,
    "ota_key": None,
}
_RANGES = {"interval_s": (1, 3600), "batch_max": (1, 1024), "batch_wait_s": (0, 600),
           "ack_timeout_s": (0, 28800),
           "checkpoint_wh": (1, 100000), "checkpoint_s": (60, 604800), "watchdog_s": (10, 600),
           "broadlink_port": (1, 65535)}
_CHOICES = {"relay_power_on": ("off", "on", "restore"),
            "broadlink": ("off", "read", "control")}
_STR_OR_NULL = ("broker.user", "broker.password", "broker.ca", "ota_key")
_SECRET_WORDS = ("password", "key", "token", "secret")
_ID_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_-"


def valid_node_id(s):
    if not isinstance(s, str) or not 1 <= len(s) <= 32:
        return False
    for c in s:
        if c not in _ID_CHARS:
            return False
    return True


def read_json(path, problems):
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError:
        problems.append("%s is missing" % path)
        return {}
    except ValueError:
        problems.append("%s is not valid JSON" % path)
        return {}
    if not isinstance(data, dict):
        problems.append("%s does not hold a JSON object" % path)
        return {}
    return data


def save(raw, path="config.json"):
    """Replace config.json with `raw` (already checked): a new file, then a rename, so a
    power cut leaves the old file or the new one, never half of one."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(raw, f)
    import os
    os.rename(tmp, path)


def _secret(key):
    """True for a key whose value must never be shown (the last part of a dotted key)."""
    leaf = key.rsplit(".", 1)[-1].lower()
    for word in _SECRET_WORDS:
        if word in leaf:
            return True
    return False


def say(problem):
    """A check() problem in words: '<file>: <what>; <fallback>'."""
    path, _, what, fallback = problem
    return "%s: %s; %s" % (path, what, fallback)


def _wrong(key, value, should):
    """'<key> must be <should>, not <value>', the value left out for a secret."""
    if _secret(key):
        return "%s must be %s (the value given is a secret: not shown)" % (key, should)
    return "%s must be %s, not %r" % (key, should, value)


def host_port(entry):
    """(host, port) of a broker.host list entry, "host" or "host:port" (port 0: none given),
    or None when it is neither."""
    if not isinstance(entry, str) or not entry or " " in entry:
        return None
    cut = entry.rfind(":")
    if cut < 0:
        return entry, 0
    port = entry[cut + 1:]
    if cut == 0 or ":" in entry[:cut] or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return entry[:cut], int(port)


def _hosts(path, key, value, default, problems):
    """A broker.host list as the link takes it: a (host, port) pair for each good entry (port
    0 until check() puts broker.port there); each bad one reported and left out; the default
    host when none is left."""
    good = []
    for i, entry in enumerate(value):
        pair = host_port(entry)
        if pair is None:
            problems.append((path, key, "%s[%d] = %r is not \"host\" or \"host:port\" (port "
                             "1..65535)" % (key, i, entry), "leaving it out"))
        else:
            good.append(pair)
    if not good:
        problems.append((path, key, "%s lists no broker" % key, "using %r" % (default,)))
        return default
    return good


def _check(path, key, value, default, problems):
    if key == "broker.host" and isinstance(value, list):
        return _hosts(path, key, value, default, problems)
    if default is None:
        if key in _STR_OR_NULL and value is not None and not isinstance(value, str):
            problems.append((path, key, _wrong(key, value, "a string or null"), "using null"))
            return None
        return value
    if isinstance(default, dict):
        if not isinstance(value, dict):
            problems.append((path, key, "%s must be an object" % key, "using defaults"))
            return dict(default)
        merged = dict(default)
        for k in value:
            merged[k] = _check(path, key + "." + k, value[k], default.get(k), problems) \
                if k in default else value[k]
        return merged
    if type(value) is not type(default):
        problems.append((path, key, _wrong(key, value, "a " + type(default).__name__),
                         "using %r" % (default,)))
        return default
    choices = _CHOICES.get(key)
    if choices and value not in choices:
        problems.append((path, key, "%s = %r must be one of %s" % (key, value, ", ".join(choices)),
                         "using %r" % (default,)))
        return default
    lo_hi = _RANGES.get(key)
    if lo_hi and not lo_hi[0] <= value <= lo_hi[1]:
        problems.append((path, key, "%s = %r is outside %d..%d" % (key, value, lo_hi[0], lo_hi[1]),
                         "using %r" % (default,)))
        return default
    return value


def load(path, problems):
    """config.json with defaults filled in; appends what was wrong to `problems`, in words."""
    cfg, found = check(read_json(path, problems), path)
    for p in found:
        problems.append(say(p))
    return cfg


def no_wifi(cfg, path="config.json"):
    """The sentence a plug says at every boot when its config names no Wi-Fi (it can never
    reach the broker), and tools/deploy's reason to refuse the config; None when it has one."""
    if cfg["wifi"]["ssid"]:
        return None
    return ("%s has no wifi.ssid: this plug cannot join a network nor reach its broker; give it "
            "one: wattlog provision --wifi-ssid NAME, then deploy the config it writes, or "
            "repl.wifi(\"NAME\", \"PASSWORD\") at the REPL" % path)


def about(problems, key):
    """The WHAT of each check() problem with `key` (or a key inside it: broker.port for
    broker): what an edit of that one key would make wrong."""
    inside = key + "."
    return [what for _, k, what, _ in problems if k == key or k.startswith(inside)]


def check(raw, path="config.json"):
    """(config, problems): a config dict checked and completed with defaults, and what was
    wrong as (FILE, KEY, WHAT, FALLBACK) tuples (repl.config() and commands check edits so)."""
    problems = []
    cfg = {}
    for key in DEFAULTS:
        cfg[key] = _check(path, key, raw[key], DEFAULTS[key], problems) if key in raw \
            else (dict(DEFAULTS[key]) if isinstance(DEFAULTS[key], dict) else DEFAULTS[key])
    for key in raw:
        if key not in DEFAULTS:
            problems.append((path, key, "config key %r is unknown" % key, "ignored"))
    if cfg["node_id"] is not None and not valid_node_id(cfg["node_id"]):
        problems.append((path, "node_id", "node_id %r must be 1-32 of a-z 0-9 _ -"
                         % (cfg["node_id"],), "using the MAC-derived id"))
        cfg["node_id"] = None
    broker = cfg["broker"]
    if not isinstance(broker["host"], str):
        broker["host"] = [(h, p or broker["port"]) for h, p in broker["host"]]
    for b in calib.check(cfg["calibration"]):
        problems.append((path, "calibration", b, "running uncalibrated"))
        cfg["calibration"] = {}
    return cfg, problems
