"""board.py - the simulated board: the hardware layer of wattnode/hw for a board file whose
"hal" is "sim" (wattsim.install() registers it), on the MicroPython unix port.

Board emulates any board file: its meter pins and UART are wired to a simulated chip
(chips.py) that measures the load profile the simulation's settings name, with their faults;
a board whose chip is "sim" gets the exact meter (meter.py) instead. The settings come from
sim.json in the flash folder (tools/simnode writes it), or from the `sim` argument in tests:
  profile        "washer", "dishwasher", "fridge", "heatpump", "tv" (each may take
                 start times: "washer:0930+1400"), "constant[:W]" (profiles.py)
  start, speed, then_realtime   the clock (clock.py): unix seconds; N or "max"
  faults         the simulated chip's faults (chips.FAULTS)
  crash_after_s  the loop raises after that much node time, to exercise crash handling
  ack_patience_s how long a free-running clock waits for a silent collector's ack before it
                 takes the collector for away and runs on into the spill (clock.py; default
                 ACK_PATIENCE_MS): shorter for a test whose collector is away on purpose
  rssi_dbm       the Wi-Fi signal the plug reports (default -60 dBm; null: it cannot say)
  wifi           the simulated Wi-Fi: the SSIDs in range (["home"]); the plug joins only
                 when its config.json names one of them, as a plug's radio does (and says at
                 every boot when it names none: wattnode/start.py). Without it the network
                 is the host's, always up
  mac            its Wi-Fi MAC, 12 hex digits (default DEFAULT_MAC); tools/simnode gives each
                 plug its own (simnode.mac_for: from its node id)
  ntp_after_s    the RTC starts unset (as after a power cut) and the LAN's NTP server answers
                 only after that much node time
  repl           true: a Ctrl-C hands the plug to the REPL, as on a plug (tools/fakeboard);
                 false: Ctrl-C ends the process (tools/simnode), and the node sends first.
                 The end of a run (clock.RunEnded) is no Ctrl-C at a REPL: the node sends
                 first either way (repl reads False once the clock has ended the run)
The relay (the board's "relay" pin) switches the load: while it is open the simulated meter
or chip sees 0 W and 0 A (the voltage stays: the chip measures the mains before the relay),
as a plug's does. Before the contacts move, whatever integrates the load (`loads`: meter.py's
meter, a chip's Truth) catches up with the present, so a slot switched half-way holds what
was drawn until the switch. The relay is closed until the node drives its pin (a test that
drives a meter alone measures the load); a board without one powers its load all the time.
A simulated plug's MAC is the settings' "mac": tools/simnode gives each plug its own, as real
plugs have (Home Assistant's discovery names the device by it, and merges devices that share
one); the MicroPython side only reads it, so that making it costs the plug's heap nothing.
RTC memory lives in a file that survives a reset (the process restarting) but not a power cut
(simnode --power-cut deletes it). The watchdog counts node time and resets the plug when
starved (SimWatchdog). A reset ends the process with RESET_EXIT, which tools/simnode and
tools/fakeboard take as "boot it again"; the world's clock goes on: the node time reached is
kept in CLOCK_FILE for the next boot of a free-running plug. Why it reset is kept in
RESET_CAUSE_FILE, the register machine.reset_cause() reads on the simulator (rom/machine.py:
firmware/boot.py rolls back a version on trial that the watchdog reset).
"""

import json
import os
import sys
from binascii import unhexlify

from wattnode import wire
from wattsim.clock import ACK_PATIENCE_MS, SimClock

RESET_EXIT = 3  # the process's exit status for "reset me" (tools/simnode, tools/fakeboard)
RTC_BYTES = 2048  # machine.RTC().memory() on an ESP32 (MICROPY_HW_RTC_USER_MEM_MAX)
SETTINGS_FILE = "sim.json"
CLOCK_FILE = ".sim-clock"  # true unix seconds reached when the plug last reset
DEFAULT_MAC = "020000000001"
RESET_CAUSE_FILE = ".reset-cause"  # rom/machine.py reads it: machine.reset_cause()
WDT_RESET = 3   # machine.WDT_RESET
SOFT_RESET = 5  # machine.SOFT_RESET: what an ESP32 reads after machine.reset()


class SimPin:
    """A GPIO: what the node writes, the simulated chip reads (SEL), and the other way round.
    `moved` (the relay's) hears each new level before the pin takes it."""

    def __init__(self, value=0, moved=None):
        self._value = value
        self._moved = moved

    def value(self, v=None):
        if v is None:
            return self._value
        v = 1 if v else 0
        if v != self._value and self._moved:
            self._moved(v)
        self._value = v

    def on(self):
        self.value(1)

    def off(self):
        self.value(0)


class SimPixel:
    """One WS2812 LED."""

    def __init__(self):
        self.rgb = (0, 0, 0)

    def colour(self, rgb):
        self.rgb = rgb


class SimRTCMemory:
    """machine.RTC().memory(): kept in a file, so it survives the node process restarting;
    at most RTC_BYTES, as on an ESP32 (a longer buffer: ValueError, as there).
    The node writes it after every slot: the file stays open and each write replaces its
    bytes in place, with no flush (which syncs the disk: a free-running plug would spend half
    its time there); the kernel has them at once, so a killed process loses nothing."""

    def __init__(self, path):
        self.path = path
        self._f = None
        self._n = -1

    def read(self):
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except OSError:
            return b""

    def write(self, data):
        if len(data) > RTC_BYTES:
            raise ValueError("buffer too long")
        if self._f is None or len(data) != self._n:  # first, or a size that truncates
            if self._f is not None:
                self._f.close()
            self._f = open(self.path, "wb")
            self._n = len(data)
        self._f.seek(0)
        self._f.write(data)


class MemoryRTC:
    """machine.RTC().memory() in RAM, for benches and tests that need no reset to outlive."""

    def __init__(self):
        self.data = b""

    def read(self):
        return self.data

    def write(self, data):
        if len(data) > RTC_BYTES:
            raise ValueError("buffer too long")
        self.data = bytes(data)


class SimWatchdog:
    """machine.WDT in node time, one per plug: a new one re-arms it with its own timeout, as on
    an ESP32. The clock checks it as each wait() begins, not within a wait (the node's loop
    feeds it before each wait, and a wait may jump a whole slot of node time where a plug's
    loop would feed it every LOOP_MS): unfed for more than timeout_ms of node time by then,
    the plug resets (reset())."""

    def __init__(self, clock, timeout_ms, reset):
        self.timeout_ms = timeout_ms
        self.feeds = 0
        self._clock = clock
        self._reset = reset
        self._fed_ms = clock.time_ms()
        clock.watchdog = self

    def feed(self):
        self.feeds += 1
        self._fed_ms = self._clock.time_ms()

    def check(self):
        starved_ms = self._clock.time_ms() - self._fed_ms
        if starved_ms > self.timeout_ms:
            print("watchdog: not fed for %d ms of node time (timeout %d ms): the plug resets"
                  % (starved_ms, self.timeout_ms))
            self._reset()


def read_settings(path):
    """sim.json: the simulation's settings; {} when there is none, and when it is unusable,
    said in one line."""
    try:
        with open(path) as f:
            settings = json.load(f)
    except OSError:
        return {}
    except ValueError:
        settings = None
    if not isinstance(settings, dict):
        print("wattsim: %s does not hold a JSON object; simulating with defaults" % path)
        return {}
    return settings


class Board:
    def __init__(self, board, cfg=None, sim=None, flash_dir="."):
        if sim is None:
            sim = read_settings(flash_dir + "/" + SETTINGS_FILE)
        self._flash_dir = flash_dir
        self._repl = bool(sim.get("repl"))
        self._rssi_dbm = sim.get("rssi_dbm", -60)  # the Wi-Fi signal the plug reports
        in_range = sim.get("wifi")
        self.wireless = in_range is not None
        self._joined = not self.wireless or (cfg or {}).get("wifi", {}).get("ssid") in in_range
        self._mac_hex = sim.get("mac", DEFAULT_MAC)
        self.profile = sim.get("profile", "constant")
        self.clock = SimClock(sim.get("start"), sim.get("speed", 1),
                              sim.get("then_realtime", False), sim.get("crash_after_s"),
                              "ntp_after_s" in sim,
                              sim.get("ack_patience_s", ACK_PATIENCE_MS // 1000) * 1000)
        self._ntp_ms = None
        if "ntp_after_s" in sim:  # the RTC starts unset; NTP answers after that much time
            self._ntp_ms = self.clock.time_ms() + sim["ntp_after_s"] * 1000
        self.pins = {}
        self.loads = []  # what the relay powers: each told switch(on, t_ms) before it moves
        pin = board.get("pins", {}).get("relay")
        if pin is not None:  # closed until the node drives it
            inv = 1 if board.get("inverted", {}).get("relay") else 0
            self.pins[pin] = SimPin(1 ^ inv, lambda level: self._switch(level ^ inv))
        self.chip = None
        chip = board.get("chip")
        if chip and chip != "sim":
            from wattsim.chips import create
            self.chip = create(chip, self.clock, self.profile, board, sim.get("faults", {}),
                               self.pin)
            self.loads.append(self.chip.truth)
        self.rtc = SimRTCMemory(os.getenv("WATTNODE_RTC") or flash_dir + "/.rtc-memory")

    @property
    def repl(self):
        """True when a REPL follows Ctrl-C, as on a plug (start.stopped())."""
        return self._repl and not self.clock.ended

    def pin(self, number, value=None):
        """The simulated GPIO `number`, shared by the node and the simulated chip."""
        p = self.pins.get(number)
        if p is None:
            p = self.pins[number] = SimPin(0 if value is None else value)
        elif value is not None:
            p.value(value)
        return p

    def _switch(self, on):
        for load in self.loads:
            load.switch(on, self.clock.time_ms())

    def output(self, number, value):
        return self.pin(number, value)

    def input(self, number, pull_up=False):
        return self.pin(number, 1 if pull_up else None)

    def pixel(self, number):
        return SimPixel()

    def uart(self, rx, tx, baud, parity):
        return self.chip.uart(rx, tx, baud, parity)

    def counter(self, pin):
        return self.chip.counter(pin, self.pin(pin))

    def watchdog(self, timeout_ms):
        return SimWatchdog(self.clock, timeout_ms, lambda: self._reset(WDT_RESET))

    def wifi_up(self):
        return self._joined

    def rssi_dbm(self):
        return self._rssi_dbm if self._joined else None

    def ntp(self, host):
        """Set the RTC from the LAN's NTP server; OSError when it does not answer (yet)."""
        if self._ntp_ms is not None and self.clock.time_ms() < self._ntp_ms:
            raise OSError("no answer from NTP server %s" % host)
        self.clock.set_time(self.clock.true_s())

    def mac(self):
        return unhexlify(self._mac_hex)

    def urandom(self, n):
        return os.urandom(n)

    def reset(self, soft=False):
        """The process ends with RESET_EXIT; tools/simnode starts it again, like a plug
        rebooting (RTC memory, in its file, survives; a power cut deletes it)."""
        self._reset(SOFT_RESET)

    def _reset(self, cause):
        for name, text in ((CLOCK_FILE, str(self.clock.true_s() + wire.EPOCH_UNIX)),
                           (RESET_CAUSE_FILE, str(cause))):
            try:
                with open(self._flash_dir + "/" + name, "w") as f:
                    f.write(text)
            except OSError:
                pass  # a paced run's next boot goes by the wall clock anyway; boot.py then
                # reads a power-on
        sys.exit(RESET_EXIT)
