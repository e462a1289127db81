"""node.py - the node program: one cooperative loop over meter, sampler, ring and link.
(About 580 lines, one concern: the loop and the callbacks the link hands it. What loads the update
package, and refuses an update the heap cannot take, stays here, outside the package it loads;
start-up's settling of the energy total and status(), which every view formats, need the loop's own
state.)

    meter.poll() -> when a slot has ended: sampler.close() appends its record to the ring and
    the state is published -> link.service() (connect, acks, commands, the next batch)
    -> Home Assistant discovery when the link came up -> a clean reboot when a command asked
    (early in a slot, so the next boot carries it on)
    -> clock.wait(next slot end, at most LOOP_MS)

Clock and hardware are injected (hw/), so the same loop runs on a plug, and on the unix port
with another hardware layer under a fast virtual clock. start.py builds it from config.json and
board.json; a bad config never stops it: it runs on defaults and reports the problems on the
log topic. The watchdog is fed on every pass of the loop.

The energy total it publishes never decreases (energy.py). After a power cut (or on a new
flash) it is not settled at boot: the node reads its own retained state back (link.py) and
settles when the collector answers "online" (with the last energy it holds for this plug), or
SETTLE_MS after connecting without an answer, or at once when it has no total of its own and
the broker retains no state of it (a new plug). Until then it publishes no state and sends no
readings, and keeps measuring; settling raises the records it holds to the resumed total.

status() is what the node is, knows and has done, as one flat dict of JSON values: the one
model every view formats (the info command's answer, the summary line a clean stop prints,
repl.status(), start.py's crash text). Its keys (None where not known yet):
  node board chip boot interval_s uptime_s    what runs, since when
  time time_from                              wall time (unix s) and where it came from
  first_slot last_slot                        unix s of this boot's first and newest slot
  power_w voltage_v current_a                 the newest slot's means (None: missing)
  energy_wh energy_from energy_settled flash_writes   the total and its checkpoints
  relay rssi_dbm                              "ON" / "OFF"; the Wi-Fi signal (None: unknown)
  capacity produced unacked unsent never_sent dropped   the ring, in readings (produced:
                                              sampled this boot; unacked and unsent count
                                              the flash and what was kept from before too)
  kept spill_readings spill_bytes spill_oldest_slot spill_capacity spill_dropped spill_torn
  spill_writes                                the flash spill (spill.py): readings kept from
                                              before this boot; on the flash now, in bytes,
                                              the oldest one's slot (unix s); how many it
                                              holds; dropped when full; damaged; segments
                                              written this boot
  link_up connects batches bytes_sent acks resends bad_acks last_error   the link
  broker                                      the broker it is on (or tries next), "host:port"
  commands bad_commands                       messages on cmd and relay/set; refused ones
  meter_faults heap_free                      {fault kind: count}; bytes
  broadlink broadlink_counts                  the SP3S protocol's mode; its counters (or None)
  version                                     the node code running (wattnode.__version__)
It allocates (a dict, floats): it is called rarely, never on the sampling path.
"""

import gc
import json
import os
import sys
import time
from binascii import hexlify

from wattnode import __version__, forget, meters, wire
from wattnode.calib import Calibration
from wattnode.clock import TimeKeeper
from wattnode.crashes import HEALTHY_S
from wattnode.energy import EnergyStore
from wattnode.link import Link
from wattnode.relay import CONNECTING, ERROR, ONLINE, Controls
from wattnode.sampler import Sampler

from micropython import const

LOOP_MS = const(100)
DRAIN_MS = const(30000)
SETTLE_MS = const(60000)
REBOOT_MARGIN_S = const(3)  # a clean reboot waits for the slot's end when it is this close
_STATE_MIN_MS = const(1000)


def make_meter(board, hw, cfg, meter_ok, problems):
    """The board's meter, or NoMeter (every slot missing) with the reason in `problems`."""
    chip = board.get("chip", "?")
    if meter_ok:
        try:
            return meters.create(board, hw, Calibration(cfg["calibration"]))
        except (ValueError, KeyError, TypeError, OSError) as e:
            problems.append("cannot start the %s meter (%s)" % (chip, e))
    problems.append("running without a meter: every slot is stored as missing until the "
                    "board file is fixed")
    return meters.NoMeter()


class Node:
    def __init__(self, cfg, board, hw, problems, meter_ok, ring, on_healthy=None,
                 config_path="config.json", spill_kib=0):
        """ring: the RAM ring, with the spill behind it (start.py makes both first), or
        without: then spill_kib is the flash the spill may take (0: none, RTC memory still
        keeps what a reset would lose)."""
        self.hw = hw
        self.cfg = cfg
        self.config_path = config_path
        self.mac_hex = hexlify(hw.mac()).decode()
        self.node_id = cfg["node_id"] or "plug-" + self.mac_hex
        self.board_name = board.get("name", "?")
        self.chip = board.get("chip", "?")
        self.ring = ring
        self.problems = problems
        self._on_healthy = on_healthy
        self.meter = make_meter(board, hw, cfg, meter_ok, problems)
        self.fault_log = meters.FaultLog(self.meter, "%s meter" % board.get("chip", "?"))
        self.metering = not isinstance(self.meter, meters.NoMeter)
        self.controls = Controls(board, hw, cfg["relay_power_on"])
        self.keeper = TimeKeeper(hw, cfg["ntp_host"] or None)
        if ring.behind is None:  # start.py makes it first; a test may not
            from wattnode import spillboot
            spillboot.behind(ring, hw.rtc, spill_kib, cfg["interval_s"], problems.append)
            del spillboot
            forget("spillboot")
        self.spill = ring.behind
        self.spill.say = self._problem
        self.energy = EnergyStore(hw.rtc, cfg["checkpoint_wh"], cfg["checkpoint_s"],
                                  image=self.spill.keep.image)
        wh, rem = self.energy.load()
        kept = None if self.energy.settled else self.spill.newest_kept(ring)
        if kept is not None:
            self.energy.offer(kept[0], kept[1], "kept")
        self.spill.paused = not self.energy.settled  # records on flash could not be raised
        self._max_power_w = board.get("meter", {}).get("max_power_w", 3680)
        self.sampler = Sampler(self.meter, self.ring, cfg["interval_s"], wh, rem)
        self.boot = int.from_bytes(hw.urandom(4), "little")
        self.link = Link(self.node_id, cfg, self.ring, cfg["interval_s"], self.boot, hw.urandom,
                         {"relay": self.on_relay, "cmd": self.on_cmd, "clock": self.on_clock,
                          "discovery": self.announce, "energy": self.on_energy,
                          "state": self.on_own_state, "ota": self.on_ota})
        self.link.read_state = self.link.hold = not self.energy.settled
        self._settle_ms = -1  # when the link came up with the total still unsettled
        self.stored_to_s = None  # the collector's newest slot of this plug (unix s; 0: none)
        self._heard_state = False  # the broker has sent what it retains of our state
        self.reboot_reason = None
        self._announced = 0  # link.connects when discovery was last sent
        self._boot_ticks = hw.clock.ticks_ms()
        self._state_ms = time.ticks_add(time.ticks_ms(), -_STATE_MIN_MS)
        self._first_slot = -1
        self._held = False
        self.commands = 0      # messages taken on cmd and relay/set
        self.bad_commands = 0  # of them refused (said on the log)
        self.broadlink = None  # the SP3S protocol (broadlink.py), imported only when it is on
        if cfg["broadlink"] != "off":
            self._start_broadlink(problems)
        self.updates = None  # the update work (ota.Work), loaded only while there is some
        self._updates_due = True  # the flash's update work is loaded on the loop's first pass

    def _begin(self, now, boot_ticks):
        """The wall time is known: start slotting (with the readings held since boot)."""
        clock = self.hw.clock
        held = None if self.keeper.source == "rtc" else boot_ticks
        self.sampler.start(now, clock.ticks_ms(), held)
        since_boot_s = time.ticks_diff(clock.ticks_ms(), boot_ticks) // 1000
        self._first_slot = (now - since_boot_s if held is not None else now) \
            // self.sampler.interval_s * self.sampler.interval_s
        self._held = held is not None
        if held is not None:
            self.problems.append("clock set from %s; readings since boot are stamped from %d"
                                 % (self.keeper.source, self._first_slot + wire.EPOCH_UNIX))
        self._say_energy(now)

    def _say_energy(self, now):
        """Where the total resumed from, and how much it may lack, once settled and the time
        is known (said once: the note goes)."""
        note = self.energy.note
        if note and now >= 0:
            self.energy.note = None
            note = "%s: at most %d Wh, %d s at up to %d W" % (
                note, self.energy.bound_wh(now, self._max_power_w), self.energy.since_s(now),
                self._max_power_w)
            if self.link.up:
                self.link.log(note)
            else:
                self.problems.append(note)

    def _problem(self, text):
        """Said on the log topic once the link is up (the spill's news: spill.py)."""
        self.problems.append(text)

    def settle(self):
        """The total's resume value is decided (energy.py): raise what was counted since boot
        to it, and let state and readings go."""
        self.spill.paused = False
        add = self.energy.settle(self.sampler.energy_wh, self.sampler.rem_dj)
        if add:
            self.sampler.raise_total(add)
        self.link.stop_reading_state()
        if self.sampler.last_slot >= 0:
            self.publish_state(True)
        self._say_energy(self.keeper.now())

    def _settle_when_due(self):
        """Settle when the link has been up SETTLE_MS without the collector's answer."""
        if not self.link.up:
            return
        now = time.ticks_ms()
        if self._settle_ms < 0:
            self._settle_ms = now
        elif time.ticks_diff(now, self._settle_ms) >= SETTLE_MS:
            self.link.log("no answer from the collector in %d s; the energy total resumes "
                          "without it" % (SETTLE_MS // 1000))
            self.settle()

    def run(self):
        clock = self.hw.clock
        keeper = self.keeper
        sampler = self.sampler
        boot_ticks = clock.ticks_ms()
        started = self._first_slot >= 0  # resumed (repl.start()): the slots carry on
        healthy_ticks = time.ticks_add(boot_ticks, HEALTHY_S * 1000)
        wdt = self.hw.watchdog(self.cfg["watchdog_s"] * 1000)
        while True:  # until a KeyboardInterrupt (Ctrl-C, or a clock that ends the run)
            wdt.feed()
            if self._updates_due:
                self._load_updates()
            self.meter.poll()
            keeper.service(self.hw.wifi_up())
            now = keeper.now()
            if not self.energy.settled:
                self._settle_when_due()
            if now < 0:  # no wall time yet: keep measuring, stamp nothing
                self._service(False)
                if self.reboot_reason:
                    self.reboot()
                clock.wait(clock.time_s() + 1, LOOP_MS, self.meter.poll_ms)
                continue
            if not started:
                self._begin(now, boot_ticks)
                started = True
            step = keeper.check_step()
            if step:
                self.link.log("the clock stepped by %+d s; slots stay in order, none repeated" % step)
            if now >= sampler.slot_end:
                if sampler.close(now, clock.ticks_ms()) > 1 and not self._held:
                    self.link.log("sampling was held up; slots before %d share one mean"
                                  % (now + wire.EPOCH_UNIX))
                self._held = False  # only the first close after a held start spans slots
                self.energy.slot(sampler.energy_wh, sampler.rem_dj, now)
                self.publish_state(False)
                news = self.fault_log.news(clock.ticks_ms())
                if news:
                    self.link.log(news)
            # a version on trial sends each reading at once: the collector's ack confirms it
            self._service(self.updates is not None and self.updates.on_trial())
            if self.link.up and self._announced != self.link.connects:
                self.announce()
            if self.reboot_reason and self._early_in_slot(now):
                self.reboot()
            ticks = clock.ticks_ms()
            if self.controls.poll(ticks):
                self.publish_state(True)
            self.controls.show(ERROR if not self.metering else ONLINE if self.link.up
                               else CONNECTING, ticks)
            if self._on_healthy and time.ticks_diff(clock.ticks_ms(), healthy_ticks) >= 0:
                self._on_healthy()  # ran HEALTHY_S without crashing: crashes no longer "in a row"
                self._on_healthy = None
            if self.problems and self.link.up:  # said once, when someone can hear it
                for p in self.problems:
                    self.link.log(p)
                self.problems = []
            clock.wait(sampler.slot_end, LOOP_MS, self.meter.poll_ms)

    def publish_state(self, force):
        if not self.energy.settled:
            return  # it could be lower than the last one published before a power cut
        now = time.ticks_ms()
        if not force and time.ticks_diff(now, self._state_ms) < _STATE_MIN_MS:
            return  # under a fast clock, do not flood the broker with retained states
        s = self.sampler
        power_w, voltage_v, current_a, energy_kwh = wire.units(s.power_dw, s.voltage_cv,
                                                               s.current_ma, s.energy_wh)
        if self.link.state({
            "time": s.last_slot + wire.EPOCH_UNIX,
            "power": power_w,
            "voltage": voltage_v,
            "current": current_a,
            "energy": energy_kwh,
            "relay": "ON" if self.controls.on else "OFF",
            "rssi": self.hw.rssi_dbm(),
        }):
            self._state_ms = now

    def on_relay(self, msg):
        self.commands += 1
        msg = msg.strip().upper()
        if msg in (b"ON", b"OFF", b"TOGGLE"):
            self.controls.set(not self.controls.on if msg == b"TOGGLE" else msg == b"ON")
            self.publish_state(True)
        else:
            self.bad_commands += 1
            self.link.log("relay/set: %r is not ON, OFF or TOGGLE; relay unchanged" % msg)

    def _start_broadlink(self, problems):
        """The SP3S protocol, or the reason it is not running in `problems`: the node runs on
        without it (a plug short of heap must not crash-loop for it)."""
        gc.collect()  # start-up's garbage: the module's code needs whole blocks
        try:
            from wattnode import broadlink
            bl = broadlink.Server(self.cfg["broadlink"], self.cfg["broadlink_port"],
                                  self.hw.mac(), self.node_id, self.hw.urandom,
                                  lambda: self.sampler.power_dw, lambda: self.controls.on,
                                  self.on_broadlink, lambda text: self.link.log(text))
            bl.open()
        except OSError as e:
            problems.append("cannot listen for Broadlink clients on UDP port %d (%s); running "
                            "without" % (self.cfg["broadlink_port"], e))
            return
        except MemoryError:
            problems.append("no heap left for the Broadlink protocol (about 10 KiB); running "
                            "without it")
            return
        self.broadlink = bl

    def on_broadlink(self, on, who):
        """A Broadlink client's set_power (control mode): the path of an MQTT relay/set."""
        was = self.controls.on
        self.on_relay(b"ON" if on else b"OFF")
        if self.controls.on != was:
            self.link.log("broadlink: %s switched the relay %s" % (who, "ON" if on else "OFF"))

    def on_cmd(self, msg):
        self.commands += 1
        try:
            done = _command(self, msg)
        except MemoryError:  # a full or fragmented heap: a command must not crash the plug
            done = None
        forget("commands", "config")
        if not done:
            self.bad_commands += 1
        if done is None:
            gc.collect()
            try:
                self.link.log("cmd: no heap left to carry it out (%d bytes free); nothing "
                              "changed, send it again later" % gc.mem_free())
            except MemoryError:
                pass

    def on_clock(self, t):
        """The collector's answer to "online" carries its clock (link.py)."""
        self.keeper.set_from_collector(t - wire.EPOCH_UNIX)  # _begin() says when it counts
        if self.keeper.disagreement_s:
            self.link.log("the collector's clock is %+d s from ours; ours is kept (set "
                          "ntp_host to correct it)" % self.keeper.disagreement_s)
            self.keeper.disagreement_s = 0

    def on_energy(self, wh, unix_s):
        """The rest of the collector's answer: the last energy total it holds for this plug
        (-1: none). Whatever it says, the total is settled now. unix_s is the slot of that
        total, its newest: a rollback's report counts the slots lost after it (ota/trial.py)."""
        self.stored_to_s = unix_s if wh >= 0 else 0
        if not self.energy.settled:
            if wh >= 0:
                self.energy.offer(wh, unix_s - wire.EPOCH_UNIX, "collector")
            self.settle()

    def on_own_state(self, msg):
        """Its own state as the broker retains it (the last one published before a reset or
        power cut), then None: the broker has sent what it has. A plug with no total of its
        own whose state the broker does not know is new: it settles (at 0) at once."""
        if self.energy.settled:
            return
        if msg is None:
            self._heard_state = True
            if self.energy.source == "none":
                self.settle()
            return
        try:
            state = json.loads(msg)
            kwh, t = state["energy"], state["time"]
            if not (isinstance(kwh, (int, float)) and isinstance(t, int)
                    and 0 <= kwh < 1000000):
                raise TypeError
        except (ValueError, TypeError, KeyError, AttributeError):
            self.link.log("its retained state %r is not one it publishes; ignored"
                          % bytes(msg[:64]))
            return
        self.energy.offer(int(kwh * 1000 + 0.5), t - wire.EPOCH_UNIX, "state")

    def _service(self, flush):
        """The loop's services, each pass: the link (connect, acks, commands, the next batch;
        at once with flush), the update work (ota.Work.service(); a MemoryError, the
        transfer's code for a manifest read on an earlier pass, refused as in on_ota()), the
        Broadlink protocol."""
        self.link.service(self.hw.wifi_up(), flush=flush)
        if self.updates is not None:
            try:
                if not self.updates.service(self.link.up):
                    self._drop_updates()
            except MemoryError:
                self._no_heap(self.updates.taken_id)
        if self.broadlink is not None:
            self.broadlink.service()

    def on_ota(self, topic, msg):
        """ota/manifest or ota/chunk, for the update package (ota.Work), loaded for it. A
        MemoryError is refused, not a crash: the running version is kept, said on the log
        and, for a manifest, at once on ota/status (wire.ota_refused: `wattlog ota` need not
        wait for its timeout); the trial under way, if any, runs on."""
        try:
            self._updates().message(topic, msg)
        except MemoryError:
            self._no_heap(wire.manifest_id(msg) if topic == self.link.t_ota_manifest else None)

    def _no_heap(self, uid):
        """An update the heap cannot take (uid: its manifest's id, to refuse on ota/status, or
        None for a chunk)."""
        if self.updates is not None and self.updates.trial is None:
            self._drop_updates()
        gc.collect()
        reason = "no heap left to take an update (%d bytes free)" % gc.mem_free()
        self.link.log("ota: %s; the running version is kept" % reason)
        if uid is not None:
            self.link.publish(self.link.t_ota_status,
                              wire.ota_refused(uid, __version__, reason), retain=True)

    def _updates(self):
        """The update package's Work (ota/), loaded for an update's work."""
        if self.updates is None:
            gc.collect()  # a module's code needs whole blocks
            from wattnode import ota
            self.updates = ota.Work((self.link, self.hw.clock, self.ring, self.sampler,
                                     self._reboot_for, self._boot_ticks, self._slots),
                                    self.cfg.get("ota_key"), self.node_id)
        return self.updates

    def _drop_updates(self):
        """The update package, all of it, out of the heap (its open file closed first)."""
        if self.updates is not None:
            self.updates.close()
        self.updates = None
        forget("ota")

    def _load_updates(self):
        """On the loop's first pass, start-up's garbage gone (the heap is at its fullest
        during start-up): the update work the flash holds (ota/resume.py). All of it lives in
        the ota/ folder: without one (a plug never updated) nothing is loaded. Without the
        heap even for the package, it is said, and the work waits for a later boot (a version
        on trial then goes back after boot.py's MAX_TRIAL_BOOTS boots); a MemoryError must not
        stop the loop (main.py would leave a plug at the REPL, not metering)."""
        self._updates_due = False
        if not _exists("ota"):
            return
        try:
            from wattnode.ota import resume
            work = resume.due()
            if work is None or not resume.load(self._updates(), work, self._problem):
                self._drop_updates()
            resume = None
            forget("ota.resume")
        except MemoryError:
            self._drop_updates()
            self.problems.append("no heap left for the update's work at start-up (%d bytes "
                                 "free)" % gc.mem_free())

    def _reboot_for(self, reason):
        """An update's reboot request: a clean reboot, early in a slot (run())."""
        self.reboot_reason = reason

    def _first(self):
        """This boot's first slot: the sampler's first record once there is one (a held start
        rounds the time since boot its own way: _begin's estimate could be a slot later)."""
        f = self.sampler.first_slot
        return f if f >= 0 else self._first_slot

    def _slots(self):
        """(the collector's newest slot of this plug, unix s: 0 none, None not heard yet;
        this boot's first slot, unix s, or None): what a rollback's report counts by."""
        return self.stored_to_s, _unix(self._first())

    def announce(self):
        """Home Assistant discovery (discovery.py), retained, and the node's status on its log
        topic as one "status {...}" line (as Tasmota says its INFO at boot): the collector's
        plug health then shows the firmware, the SP3S mode and the counters without anyone
        asking (an "info" command gets the same, fresh). Once per connection."""
        self._announced = self.link.connects  # once per connection, whatever happens
        try:
            from wattnode import discovery
            self.link.publish(
                discovery.topic(self.cfg["discovery_prefix"], self.node_id).encode(),
                discovery.payload(self.node_id, self.cfg["base_topic"], self.board_name,
                                  self.chip, self.mac_hex), retain=True, parts=True)
        except MemoryError:
            self.link.log("no heap left for Home Assistant discovery; it is tried again at "
                          "the next connection")
        forget("discovery")
        try:
            self.link.log("status " + json.dumps(self.status()))
        except MemoryError:
            pass  # the "info" command asks again; nothing depends on it

    def _early_in_slot(self, now):
        """A clean reboot waits until it is more than REBOOT_MARGIN_S before the slot's end
        (for slots long enough): the next boot then carries on the same slot, so a reboot
        (an update's switch, its rollback, a command) leaves no slot unmetered."""
        s = self.sampler
        return s.interval_s <= 2 * REBOOT_MARGIN_S or s.slot_end - now > REBOOT_MARGIN_S

    def uptime_s(self):
        return time.ticks_diff(self.hw.clock.ticks_ms(), self._boot_ticks) // 1000

    def reboot(self):
        """A clean reboot (commands.py): send what is unsent, checkpoint, say so, reset."""
        self.link.log("rebooting: %s" % self.reboot_reason)
        self.drain()
        self.hw.reset()

    def drain(self):
        """A clean stop (Ctrl-C on the unix port, a reboot): send what is unsent, for at most
        DRAIN_MS, say what happened, go offline. Records the
        collector has not acknowledged yet are with it (the broker acknowledged them)."""
        if not self.energy.settled and self._heard_state:
            self.settle()  # the collector has not answered: what the broker keeps will do
        if self.link.up:  # read what the broker sent: closing on unread bytes resets the
            self.link.service(True)  # connection, and the broker drops what we sent last
        deadline = time.ticks_add(time.ticks_ms(), DRAIN_MS)
        while self.energy.settled and self.ring.unsent() and \
                time.ticks_diff(deadline, time.ticks_ms()) > 0:
            self.link.service(self.hw.wifi_up(), flush=True)
            time.sleep_ms(5)
        if self.sampler.last_slot >= 0:  # a state with a slot's values, not an empty one
            self.publish_state(True)
        self.energy.checkpoint(self.sampler.energy_wh, self.sampler.rem_dj, self.hw.clock.time_s())
        gc.collect()  # the loop's garbage first: in a tight heap the status dict needs the room
        st = self.status()
        print("summary ", end="")
        json.dump(st, sys.stdout)  # written as it goes: the line is never whole in the heap
        print()
        if self.broadlink is not None:
            self.broadlink.close()
        self.link.close()

    def status(self):
        """The node's status (the module docstring lists the keys)."""
        self.sampler.sync()  # a close a Ctrl-C cut short: its last slot from the ring
        s, ring, link, energy = self.sampler, self.ring, self.link, self.energy
        now = self.keeper.now()
        power_w, voltage_v, current_a, _ = wire.units(s.power_dw, s.voltage_cv, s.current_ma,
                                                      wire.ENERGY_MISSING)
        sp = self.spill
        on_flash, flash_bytes, oldest = sp.held(ring)
        return {  # one literal: its table is allocated once, at its size (a tight heap)
            "node": self.node_id, "board": self.board_name, "chip": self.chip,
            "boot": self.boot, "interval_s": s.interval_s, "uptime_s": self.uptime_s(),
            "time": _unix(now), "time_from": self.keeper.source,
            "first_slot": _unix(self._first()), "last_slot": _unix(s.last_slot),
            "power_w": power_w, "voltage_v": voltage_v, "current_a": current_a,
            "energy_wh": s.energy_wh, "energy_from": energy.source,
            "energy_settled": energy.settled, "flash_writes": energy.writes,
            "relay": "ON" if self.controls.on else "OFF", "rssi_dbm": self.hw.rssi_dbm(),
            "capacity": ring.capacity, "produced": ring.next - ring.base,
            "unacked": ring.count(), "unsent": ring.unsent(),
            "never_sent": ring.next - link.sent_top, "dropped": ring.dropped,
            "link_up": link.up, "connects": link.connects, "batches": link.batches,
            "bytes_sent": link.bytes_sent, "acks": link.acks, "resends": link.resends,
            "bad_acks": link.bad_acks, "last_error": link.last_error, "broker": link.broker(),
            "commands": self.commands, "bad_commands": self.bad_commands,
            "meter_faults": dict(zip(meters.FAULTS, self.meter.faults)), "heap_free": gc.mem_free(),
            "broadlink": self.cfg["broadlink"],
            "broadlink_counts": self.broadlink.counts() if self.broadlink else None,
            "version": __version__,
            "kept": sp.kept, "spill_readings": on_flash, "spill_bytes": flash_bytes,
            "spill_oldest_slot": _unix(oldest), "spill_capacity": sp.capacity(),
            "spill_dropped": sp.dropped, "spill_torn": sp.torn, "spill_writes": sp.writes,
        }


def _command(node, msg):
    """commands.handle(), loaded for a command (most plugs rarely get one) in a frame of its
    own, so that nothing holds the module once Node.on_cmd() has forgotten it."""
    from wattnode import commands
    return commands.handle(node, msg)


def _exists(path):
    try:
        os.stat(path)
        return True
    except OSError:
        return False


def _unix(t_s):
    """A node time (seconds since the wire epoch, -1: none) as unix seconds, or None."""
    return t_s + wire.EPOCH_UNIX if t_s >= 0 else None
