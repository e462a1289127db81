"""commands.py - the JSON commands a node takes on <base>/<node>/cmd; every one is answered on
<base>/<node>/log, a bad one with the reason, and a bad one never changes anything.

  {"cmd": "info"}                                  -> log "info {...}": what the node is,
                                                      its ring, link and meter counters
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
"""

import gc
import json

from wattnode import config, wire


def _answer(node, cid, text):
    node.link.log(text if cid is None else "%s (id %s)" % (text, cid))


def handle(node, msg):
    try:
        c = json.loads(msg)
        name = c["cmd"]
        cid = c.get("id")
    except (ValueError, TypeError, KeyError, AttributeError):
        node.link.log("cmd: %r is not a command: send JSON like {\"cmd\": \"info\"}"
                      % bytes(msg[:64]))
        return
    if name == "info":
        _answer(node, cid, "info " + json.dumps(info(node)))
    elif name == "reboot":
        _answer(node, cid, "cmd reboot: rebooting")
        node.reboot_reason = "asked to reboot"
    elif name in ("interval", "calibration"):
        key = "interval_s" if name == "interval" else "calibration"
        if key not in c:
            _answer(node, cid, "cmd %s: needs %r; nothing changed" % (name, key))
            return
        _save(node, cid, name, key, c[key])
    else:
        _answer(node, cid, "cmd: unknown command %r (info, interval, calibration, reboot); "
                           "nothing changed" % (name,))


def _save(node, cid, name, key, value):
    raw = config.read_json(node.config_path, [])
    already = []
    config.load_dict(raw, already)  # not this command's business (and said at boot)
    raw[key] = value
    problems = []
    config.load_dict(raw, problems)
    problems = [p for p in problems if p not in already]
    if problems:  # config.py says what it would fall back to; a command changes nothing
        said = []
        for p in problems:
            p = p[13:] if p.startswith("config.json: ") else p
            for tail in ("; using", "; running"):
                if tail in p:
                    p = p[:p.index(tail)]
            said.append(p)
        _answer(node, cid, "cmd %s: %s; nothing changed" % (name, "; ".join(said)))
        return
    try:
        config.save(raw, node.config_path)
    except OSError as e:
        _answer(node, cid, "cmd %s: cannot write %s (%s); nothing changed"
                % (name, node.config_path, e))
        return
    _answer(node, cid, "cmd %s: saved %s = %s; rebooting to apply" % (name, key, json.dumps(value)))
    node.reboot_reason = "%s changed" % key


def info(node):
    ring, link, s = node.ring, node.link, node.sampler
    return {
        "node": node.node_id, "board": node.board_name, "chip": node.chip,
        "interval_s": s.interval_s, "boot": node.boot,
        "uptime_s": node.uptime_s(), "time_from": node.keeper.source,
        "time": node.keeper.now() + wire.EPOCH_UNIX if node.keeper.now() >= 0 else None,
        "relay": "ON" if node.controls.on else "OFF", "energy_wh": s.energy_wh,
        "energy_from": node.energy.source, "energy_settled": node.energy.settled,
        "ring": {"capacity": ring.capacity, "held": ring.count(), "unsent": ring.unsent(),
                 "dropped": ring.dropped, "produced": ring.next},
        "link": {"connects": link.connects, "batches": link.batches, "acks": link.acks,
                 "resends": link.resends, "bad_acks": link.bad_acks},
        "meter_faults": node.meter.faults, "heap_free": gc.mem_free(),
    }
