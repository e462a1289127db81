"""hw/esp32.py - the hardware layer on a real ESP32 or ESP32-C3 plug (machine, network, esp32).

Only a plug imports this module (board "hal": "esp32"); it has not yet run on hardware here:
tools/build compiles it, the drivers above it are tested against emulated chips.

Clock    the RTC: time.time() counts seconds from 2000-01-01, the wire epoch is 2020-01-01
         (EPOCH_2000_TO_2020 between them); set_time() through machine.RTC().datetime();
         ntp() with ntptime and the LAN host from config (ntptime's default is a public pool).
Pins     machine.Pin; active-low wiring is the callers' business (board "inverted").
UART     machine.UART(id, baudrate, bits=8, parity=0 (even) or None, stop=1, rx=, tx=, rxbuf=256).
Counter  machine.Counter (MicroPython >= 1.26) on a PCNT unit, read with value(0): the count
         since the last read, atomically, so it never grows into a big integer. The ESP32-C3
         has no PCNT: there a Pin.irq counter stands in - ESP32 pin interrupts are soft, run
         through a scheduler queue of 8, and lose edges above a few hundred Hz (a BL0937's CF1
         runs at ~1.4 kHz), so board.check() warns about pulse chips on a C3.
RTC mem  machine.RTC().memory(): 2 KiB that survive soft and watchdog resets, not power cuts.
Wi-Fi    network.WLAN(STA_IF) with config "wifi": {"ssid", "password"}; wifi_up() reconnects
         at most every WIFI_RETRY_MS.
Watchdog machine.WDT: the task watchdog, one per chip; it cannot be stopped, and it survives
         a soft reset (not a hard one). Creating it again re-arms it with the new timeout
         (MicroPython 1.28 ports/esp32/machine_wdt.c calls esp_task_wdt_reconfigure; the
         timeout is a uint32_t of ms): so a node stopped at the REPL is kept alive
         (start.stopped()), and so is an mpremote session after a soft reset
         (hold_after_soft_reset()). Neither is tested on hardware here.
REPL     Ctrl-C at the serial REPL (or mpremote entering its raw REPL) hands the plug to the
         REPL: repl = True.
"""

import os
import time

import machine
import network

EPOCH_2000_TO_2020 = 631152000
WIFI_RETRY_MS = 10000
FILTER_NS = 5000  # PCNT glitch filter: CF pulses are tens of microseconds wide


class Clock:
    def time_s(self):
        return time.time() - EPOCH_2000_TO_2020

    def ticks_ms(self):
        return time.ticks_ms()

    def set_time(self, wire_s):
        t = time.gmtime(wire_s + EPOCH_2000_TO_2020)
        machine.RTC().datetime((t[0], t[1], t[2], t[6], t[3], t[4], t[5], 0))

    def wait(self, deadline_s, max_ms, poll_ms=0):
        ms = (deadline_s - self.time_s()) * 1000
        if poll_ms and poll_ms < ms:
            ms = poll_ms
        if max_ms < ms:
            ms = max_ms
        if ms > 0:
            time.sleep_ms(ms)


class _PulseCounter:
    def __init__(self, unit, pin):
        self._c = machine.Counter(unit, machine.Pin(pin, machine.Pin.IN),
                                  edge=machine.Counter.RISING, filter_ns=FILTER_NS)
        self._c.value(0)

    def take(self):
        return self._c.value(0)


class _IrqCounter:
    """For chips without PCNT (ESP32-C3): loses edges at kHz rates, see the module notes."""

    def __init__(self, pin):
        self._n = 0
        self._pin = machine.Pin(pin, machine.Pin.IN)
        self._pin.irq(self._edge, machine.Pin.IRQ_RISING)

    def _edge(self, pin):
        self._n += 1

    def take(self):
        state = machine.disable_irq()
        n = self._n
        self._n = 0
        machine.enable_irq(state)
        return n


class _RTCMemory:
    def __init__(self):
        self._rtc = machine.RTC()

    def read(self):
        return self._rtc.memory()

    def write(self, data):
        self._rtc.memory(data)


class _Pixel:
    def __init__(self, pin):
        import neopixel
        self._np = neopixel.NeoPixel(machine.Pin(pin), 1)

    def colour(self, rgb):
        self._np[0] = rgb
        self._np.write()


def watchdog(timeout_ms):
    return machine.WDT(timeout=timeout_ms)


def hold_after_soft_reset(hold_ms):
    """boot.py, at every boot: after a soft reset (mpremote makes one before any command not
    preceded by `resume`, then stays in its raw REPL, where main.py does not run), the
    watchdog a node armed is still counting and nobody feeds it. Re-arm it to hold_ms (or arm
    it, if no node ran before: there is no asking whether it runs): the session goes on, and
    unless main.py starts the node first, the plug resets hold_ms later and meters again."""
    if machine.reset_cause() == machine.SOFT_RESET:
        watchdog(hold_ms).feed()


class Board:
    repl = True
    wireless = True

    def __init__(self, board, cfg):
        self.clock = Clock()
        self.rtc = _RTCMemory()
        self._counters = 0
        self._uarts = 0
        self._wifi = cfg.get("wifi", {})
        self._wlan = network.WLAN(network.STA_IF)
        self._wlan.active(True)
        self._wifi_ms = time.ticks_add(time.ticks_ms(), -WIFI_RETRY_MS)

    def output(self, number, value):
        return machine.Pin(number, machine.Pin.OUT, value=1 if value else 0)

    def input(self, number, pull_up=False):
        return machine.Pin(number, machine.Pin.IN, machine.Pin.PULL_UP if pull_up else None)

    def pixel(self, number):
        return _Pixel(number)

    def uart(self, rx, tx, baud, parity):
        self._uarts += 1  # UART0 is the REPL's; the meter gets UART1 (then 2)
        kw = {"rx": rx, "tx": tx} if tx is not None else {"rx": rx}
        return machine.UART(self._uarts, baudrate=baud, bits=8, parity=0 if parity == "even" else None,
                            stop=1, rxbuf=256, timeout=0, **kw)

    def counter(self, pin):
        if hasattr(machine, "Counter"):
            unit = self._counters
            self._counters += 1
            return _PulseCounter(unit, pin)
        return _IrqCounter(pin)

    def watchdog(self, timeout_ms):
        return watchdog(timeout_ms)

    def wifi_up(self):
        if self._wlan.isconnected():
            return True
        ssid = self._wifi.get("ssid")
        if ssid and time.ticks_diff(time.ticks_ms(), self._wifi_ms) >= WIFI_RETRY_MS:
            self._wifi_ms = time.ticks_ms()
            try:
                self._wlan.connect(ssid, self._wifi.get("password", ""))
            except OSError:
                pass  # tried again in WIFI_RETRY_MS
        return False

    def rssi_dbm(self):
        # WLAN.status("rssi") raises OSError when the station is not connected to an AP
        if not self._wlan.isconnected():
            return None
        try:
            return self._wlan.status("rssi")
        except (OSError, ValueError):
            return None

    def ntp(self, host):
        import ntptime
        ntptime.host = host
        ntptime.settime()  # OSError when the server does not answer (1 s timeout)

    def mac(self):
        return self._wlan.config("mac")

    def urandom(self, n):
        return os.urandom(n)

    def reset(self, soft=False):
        if soft:
            machine.soft_reset()
        machine.reset()
