"""repl.py - maintenance at the REPL, in the spirit of Tasmota's console.

    mpremote connect PORT resume exec "from wattnode import repl; repl.status()" \
        exec --no-follow "repl.start()"

`resume` matters: without it mpremote soft-resets the plug first, which empties the RAM ring
and leaves the node stopped. Entering the raw REPL sends Ctrl-C, which stops the node
(start.stopped(): at once, readings kept, watchdog held for start.REPL_HOLD_S); the second exec
carries on with it. At an interactive prompt (`mpremote connect PORT`, Ctrl-C) the same holds:
every helper here renews the hold, and start() carries on.

The helpers work in safe mode and after Ctrl-C has stopped the node: they read config.json,
board.json and the state files on the flash and, when the node has run in this session, its
live state (start.node: the ring, the meter, the relay).
  status(json=False)          what the node is, knows and last did, in words; with json=True
                              one line "status {...}" for programs: the node's status()
                              (node.py lists its keys; none but "node" when it has not run)
                              with "crashes" and "config" (the config problems, in words)
  start()                     carry on with the stopped node: its ring, energy and relay as
                              they were (Ctrl-C stops it again)
  relay(on=None)              show or switch the relay (the state is kept for "restore")
  readings(n=10)              the newest n readings in the ring
  ring()                      how full the ring is
  calibrate(power=, voltage=, current=, point=False, seconds=10)
                              measure a known resistive load for `seconds` and set the gain
                              (point=True adds a multi-point power correction point instead)
  config(key=None, value=None)  show the config, or one key, or set one key (checked first)
  wifi(ssid=None, password=None)  scan, or save and join a network
  reboot(safe=False)          checkpoint the energy total and reset (into safe mode if asked)
"""

import json as _json
import os
import time

from wattnode import calib, config as cfgfile, wire

from wattnode.safe import SAFE_FLAG

CONFIG = "config.json"
BOARD = "board.json"
WARMUP_MS = 2000


def _node():
    from wattnode import start
    start.hold()  # someone is at the REPL: a stopped plug waits REPL_HOLD_S more
    return start.node


def start():
    node = _node()
    if node is None:
        print("the node has not run in this session (safe mode?); machine.reset() starts it")
        return
    from wattnode import start as boot
    print("wattnode: carrying on; Ctrl-C stops it again")
    boot.run(node)


def _cfg():
    problems = []
    return cfgfile.load(CONFIG, problems), problems


def _board():
    return cfgfile.read_json(BOARD, [])


def status(json=False):
    cfg, problems = _cfg()
    board = _board()
    node = _node()
    from wattnode.crashes import crash_count
    free = _mem_free()  # collected first: what is free, not what is not collected yet
    st = node.status() if node else {"node": cfg["node_id"], "heap_free": free}
    st["crashes"] = crash_count()
    st["config"] = problems
    if json:
        print("status " + _json.dumps(st))
        return
    print("node       %s" % (st["node"] or "(from the MAC)"))
    print("board      %s, chip %s%s" % (board.get("name"), board.get("chip"),
                                         "" if board.get("verified") else " (pins unverified)"))
    from wattnode.link import brokers
    print("broker     %s, every %d s" % (", ".join("%s:%d" % b for b in brokers(cfg["broker"])),
                                         cfg["interval_s"]))
    if node:
        print("time       %s (%s)" % (st["time"] or "not known yet", st["time_from"]))
        print("last slot  %s W, %s V, %s A at %s" % (st["power_w"], st["voltage_v"],
                                                     st["current_a"], st["last_slot"]))
        print("energy     %.3f kWh (resumed from %s), %d flash checkpoints"
              % (st["energy_wh"] / 1000, st["energy_from"], st["flash_writes"]))
        print("relay      %s" % st["relay"])
        print("link       %s, %d connects, %d batches, last error %s"
              % ("up" if st["link_up"] else "down", st["connects"], st["batches"],
                 st["last_error"]))
        print("commands   %d, %d of them refused" % (st["commands"], st["bad_commands"]))
        faults = st["meter_faults"]
        from wattnode.meters import FAULTS
        print("meter      %s" % ", ".join("%s %d" % (k, faults[k]) for k in FAULTS))
        print(_ring_line(st))
    else:
        print("the node has not run in this session (safe mode, or before start)")
    print("crashes    %d in a row%s" % (st["crashes"], "; see crash.log" if _exists("crash.log")
                                        else ""))
    for p in problems:
        print("config     " + p)
    print("memory     %d bytes free" % st["heap_free"])


def _mem_free():
    import gc
    gc.collect()
    return gc.mem_free()


def _exists(path):
    try:
        os.stat(path)
        return True
    except OSError:
        return False


def relay(on=None):
    node = _node()
    if node is None:
        print("the node is not running; start it or reset the plug")
        return None
    if on is not None:
        node.controls.set(on)
    print("relay", "ON" if node.controls.on else "OFF")
    return node.controls.on


def _ring_line(st):
    iv = st["interval_s"]
    return ("ring       %d readings held, %d dropped since boot; in RAM up to %d (%.1f h at %d "
            "s), on the flash %d of %d (%d bytes), %d kept from before this boot"
            % (st["unacked"], st["dropped"], st["capacity"], st["capacity"] * iv / 3600, iv,
               st["spill_readings"], st["spill_capacity"], st["spill_bytes"], st["kept"]))


def ring():
    node = _node()
    if node is None:
        print("the node has not run in this session: the ring is empty")
        return
    print(_ring_line(node.status()))


def readings(n=10):
    node = _node()
    if node is None or not node.ring.count():
        print("no readings in the ring")
        return []
    import struct
    r = node.ring
    out = []
    print("time         power W   voltage V  current A  energy kWh")
    for seq in range(max(r.low, r.next - n), r.next):  # those in RAM
        t, p, e, v, i = struct.unpack_from(wire.RECORD_FMT, r.buf, r.offset(seq))
        row = (t + wire.EPOCH_UNIX,) + wire.units(p, v, i, e)
        out.append(row)
        print("%d  %9s  %9s  %9s  %10s" % row)
    return out


def config(key=None, value=None):
    _node()
    cfg, problems = _cfg()
    if key is None:
        shown = dict(cfg)
        for secret in ("broker", "wifi"):
            if shown.get(secret, {}).get("password"):
                shown[secret] = dict(shown[secret], password="***")
        print(_json.dumps(shown))
        return shown
    if value is None:
        print(_json.dumps(cfg.get(key)))
        return cfg.get(key)
    raw = cfgfile.read_json(CONFIG, [])
    raw[key] = value
    checked, problems = cfgfile.check(raw, CONFIG)
    said = cfgfile.about(problems, key)  # the rest of config.json was said at boot
    if said:
        print("not saved: " + "; ".join(said))
        return said
    cfgfile.save(raw, CONFIG)
    print("saved %s = %s; reboot() to apply" % (key, _json.dumps(checked[key])))
    return []


def calibrate(power=None, voltage=None, current=None, point=False, seconds=10):
    """With a known resistive load (a kettle, a heater, an incandescent bulb) on the plug."""
    node = _node()
    if node is None:
        print("the node is not running: calibration needs its meter (reset, then Ctrl-C)")
        return None
    meter = node.meter
    clock = node.hw.clock

    def measure(ms):
        end = time.ticks_add(clock.ticks_ms(), ms)
        while time.ticks_diff(end, clock.ticks_ms()) > 0:
            _node()  # however long the window, the plug does not reset under it
            meter.poll()
            clock.wait(clock.time_s() + 1, 50, meter.poll_ms or 200)
        meter.poll()

    measure(WARMUP_MS)  # drivers need a frame or two before they count (CSE7766, BL0942)
    meter.take()
    taken_dj = _counted(meter)
    start = clock.ticks_ms()
    measure(seconds * 1000)
    span_s = time.ticks_diff(clock.ticks_ms(), start) / 1000
    ok = meter.take()
    measured = {"power": meter.win_energy_dj / 10 / span_s, "voltage": meter.win_voltage_cv / 100,
                "current": meter.win_current_ma / 1000}
    _give_back(node, taken_dj + _counted(meter))
    if not ok:
        print("the meter gave no valid data; nothing changed")
        return None
    raw = cfgfile.read_json(CONFIG, [])
    cal = dict(calib.DEFAULTS)
    cal.update(raw.get("calibration", {}))
    for name, true in (("power", power), ("voltage", voltage), ("current", current)):
        if true is None:
            continue
        if name == "power" and point:
            cal["power_points"] = sorted(cal["power_points"] + [[round(measured[name], 1), true]])
        else:
            cal[name + "_gain"] = round(calib.gain_from(measured[name], true, cal[name + "_gain"]), 5)
        print("%s: measured %.3f, true %.3f" % (name, measured[name], true))
    bad = calib.check(cal)
    if bad:
        print("not saved: " + "; ".join(bad))
        return None
    raw["calibration"] = cal
    cfgfile.save(raw, CONFIG)
    print("saved calibration %s; reboot() to apply" % _json.dumps(cal))
    return cal


def _counted(meter):
    """The energy the last take() closed, valid window or not (0.1 J; -1 means none)."""
    return max(meter.win_energy_dj, 0) + meter.win_orphan_dj


def _give_back(node, energy_dj):
    """calibrate() took the meter's windows from the stopped node: the energy they counted goes
    into its total, and its measuring window starts again now, so the slots since its last one
    stay missing rather than share a mean that lacks the calibration's energy."""
    s = node.sampler
    now = node.keeper.now()
    if s.slot_end and now >= 0:  # slotting had begun: a fresh window from now
        s.start(now, node.hw.clock.ticks_ms())  # its take() closes one more window
        energy_dj += _counted(node.meter)
    s.rem_dj += energy_dj


def wifi(ssid=None, password=None):
    _node()
    try:
        import network
    except ImportError:
        print("no Wi-Fi on this port (its network is the host's, always up)")
        return None
    wlan = network.WLAN(network.STA_IF)
    wlan.active(True)
    if ssid is None:
        nets = sorted(wlan.scan(), key=lambda n: -n[3])
        for n in nets:
            print("%-32s channel %2d  %d dBm" % (n[0].decode(), n[2], n[3]))
        return nets
    config("wifi", {"ssid": ssid, "password": password or ""})
    wlan.connect(ssid, password or "")
    print("joining %s..." % ssid)
    return True


def reboot(safe=False):
    node = _node()
    if node is not None:
        s = node.sampler
        node.energy.checkpoint(s.energy_wh, s.rem_dj, node.hw.clock.time_s())
    if safe:
        with open(SAFE_FLAG, "w") as f:
            f.write("1")
    from wattnode import hw as hal
    (node.hw if node else hal.load(_board(), _cfg()[0])).reset()
