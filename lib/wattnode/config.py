"""config.py - the node's config.json and board file: read them, fill defaults, say what is wrong.

config.json, on the flash root:
  node_id     "plug-34ea34797bff"  [a-z0-9_-], 1-32 characters; default: "plug-" + the MAC
  base_topic  "wattlog"            MQTT topics are <base_topic>/<node_id>/...
  broker      {"host": "192.168.1.10", "port": 1883, "user": null, "password": null,
               "ca": null}         ca: a PEM CA file on the flash turns TLS on (wattlog provision)
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
board.json, on the flash root: a copy of boards/<plug>.json (name, hal, chip, pins, ring_kib).

A value of the wrong type or out of range is replaced by its default and reported in words; an
unreadable file counts as empty. The node always starts: it reports the problems on its log
topic instead of boot-looping. A secret's value (a key named like password, key, token or
secret: wifi.password, broker.password) is never in a problem: its key and what is wrong are.
broker.user, broker.password and broker.ca are strings or null.
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
}
_RANGES = {"interval_s": (1, 3600), "batch_max": (1, 1024), "batch_wait_s": (0, 600),
           "ack_timeout_s": (0, 28800),
           "checkpoint_wh": (1, 100000), "checkpoint_s": (60, 604800), "watchdog_s": (10, 600)}
_CHOICES = {"relay_power_on": ("off", "on", "restore")}
_STR_OR_NULL = ("broker.user", "broker.password", "broker.ca")
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


def _wrong(key, value, should):
    """'<key> must be <should>, not <value>', the value left out for a secret."""
    if _secret(key):
        return "%s must be %s (the value given is a secret: not shown)" % (key, should)
    return "%s must be %s, not %r" % (key, should, value)


def _check(key, value, default, problems):
    if default is None:
        if key in _STR_OR_NULL and value is not None and not isinstance(value, str):
            problems.append(_wrong(key, value, "a string or null") + "; using null")
            return None
        return value
    if isinstance(default, dict):
        if not isinstance(value, dict):
            problems.append("%s must be an object; using defaults" % key)
            return dict(default)
        merged = dict(default)
        for k in value:
            merged[k] = _check(key + "." + k, value[k], default.get(k), problems) \
                if k in default else value[k]
        return merged
    if type(value) is not type(default):
        problems.append(_wrong(key, value, "a " + type(default).__name__) + "; using %r"
                        % (default,))
        return default
    choices = _CHOICES.get(key)
    if choices and value not in choices:
        problems.append("%s = %r must be one of %s; using %r" % (key, value, ", ".join(choices), default))
        return default
    lo_hi = _RANGES.get(key)
    if lo_hi and not lo_hi[0] <= value <= lo_hi[1]:
        problems.append("%s = %r is outside %d..%d; using %r" % (key, value, lo_hi[0], lo_hi[1], default))
        return default
    return value


def load(path, problems):
    """config.json with defaults filled in; appends what was wrong to `problems`."""
    return load_dict(read_json(path, problems), problems)


def load_dict(raw, problems):
    """A config dict checked and completed with defaults (repl.config() checks edits so)."""
    found = []
    cfg = _load_dict(raw, found)
    problems.extend("config.json: " + p for p in found)
    return cfg


def _load_dict(raw, problems):
    cfg = {}
    for key in DEFAULTS:
        cfg[key] = _check(key, raw[key], DEFAULTS[key], problems) if key in raw \
            else (dict(DEFAULTS[key]) if isinstance(DEFAULTS[key], dict) else DEFAULTS[key])
    for key in raw:
        if key not in DEFAULTS:
            problems.append("config key %r is unknown and ignored" % key)
    if cfg["node_id"] is not None and not valid_node_id(cfg["node_id"]):
        problems.append("node_id %r must be 1-32 of a-z 0-9 _ -; using the MAC-derived id"
                        % (cfg["node_id"],))
        cfg["node_id"] = None
    bad = calib.check(cfg["calibration"])
    if bad:
        problems.extend(b + "; running uncalibrated" for b in bad)
        cfg["calibration"] = {}
    return cfg
