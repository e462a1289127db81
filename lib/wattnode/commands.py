"""commands.py - the JSON commands a node takes on <base>/<node>/cmd; every one is answered on
<base>/<node>/log, a bad one with the reason, and a bad one never changes anything.

  {"cmd": "info"}                                  -> log "info {...}": node.status(), what
                                                      the node is, its ring, link, meter and
                                                      command counters
  {"cmd": "interval", "interval_s": 30}            -> checked, saved to config.json; the node
                                                      reboots to apply it
  {"cmd": "calibration", "calibration": {...}}     -> checked (calib.py), saved, reboot
  {"cmd": "reboot"}                                -> a clean reboot

A clean reboot is not done here: handle() runs inside the link's receive loop, so it only
sets node.reboot_reason; the node's loop then sends what is unsent, checkpoints the energy
total and resets (node.reboot()).
An optional "id" is echoed in the answer, so a tool can match answers to its commands. A
command is refused for what it would make wrong, not for what config.json already has wrong
(said at boot); no answer ever holds a secret's value (config.py names the key only).
handle() says whether the command was good: the node counts the bad ones (status()).
"""

import json

from wattnode import config


def _answer(node, cid, text):
    node.link.log(text if cid is None else "%s (id %s)" % (text, cid))


def handle(node, msg):
    """Answer one command; False if it was refused as bad (not a command, unknown, a value
    config.py refuses)."""
    try:
        c = json.loads(msg)
        name = c["cmd"]
        cid = c.get("id")
    except (ValueError, TypeError, KeyError, AttributeError):
        node.link.log("cmd: %r is not a command: send JSON like {\"cmd\": \"info\"}"
                      % bytes(msg[:64]))
        return False
    if name == "info":
        _answer(node, cid, "info " + json.dumps(node.status()))
    elif name == "reboot":
        _answer(node, cid, "cmd reboot: rebooting")
        node.reboot_reason = "asked to reboot"
    elif name in ("interval", "calibration"):
        key = "interval_s" if name == "interval" else "calibration"
        if key not in c:
            _answer(node, cid, "cmd %s: needs %r; nothing changed" % (name, key))
            return False
        return _save(node, cid, name, key, c[key])
    else:
        _answer(node, cid, "cmd: unknown command %r (info, interval, calibration, reboot); "
                           "nothing changed" % (name,))
        return False
    return True


def _save(node, cid, name, key, value):
    raw = config.read_json(node.config_path, [])
    raw[key] = value
    # what is wrong with this key's new value; the rest of config.json is not this
    # command's business (and was said at boot)
    said = config.about(config.check(raw, node.config_path)[1], key)
    if said:
        _answer(node, cid, "cmd %s: %s; nothing changed" % (name, "; ".join(said)))
        return False
    try:
        config.save(raw, node.config_path)
    except OSError as e:
        _answer(node, cid, "cmd %s: cannot write %s (%s); nothing changed"
                % (name, node.config_path, e))
        return True  # a good command the flash could not take
    _answer(node, cid, "cmd %s: saved %s = %s; rebooting to apply" % (name, key, json.dumps(value)))
    node.reboot_reason = "%s changed" % key
    return True
