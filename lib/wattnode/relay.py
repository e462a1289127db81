"""relay.py - what a person touches and sees: the relay, the button, the LED.

Relay   board pin "relay" (active high unless "inverted"). At power-on it goes to config
        "relay_power_on": "off", "on" or "restore" (default): the last state set, which is kept
        in the small file RELAY_FILE - written only when the state changes, so a plug switched
        a few times a day costs a few flash writes a day (littlefs is power-fail safe).
Button  board pin "button" (usually inverted, with pull-up), polled every pass of the loop
        with a DEBOUNCE_MS debounce: a press shorter than LONG_MS toggles the relay. Holding
        it while the plug boots is boot.py's business (safe mode).
LED     "gpio": on = relay on while online; slow blink (1 Hz) while connecting; fast blink
        (4 Hz) when something is wrong (no meter, bad config).
        "ws2812": the same states in colour: green/dim red for relay on/off, blue blinking
        while connecting, red blinking on error.
"""

from time import ticks_diff

from micropython import const

RELAY_FILE = "relay.state"
DEBOUNCE_MS = const(30)
LONG_MS = const(3000)
CONNECTING = const(0)
ONLINE = const(1)
ERROR = const(2)
_COLOURS = {"on": (0, 40, 0), "off": (8, 0, 0), "connecting": (0, 0, 40), "error": (60, 0, 0),
            "dark": (0, 0, 0)}


class Controls:
    def __init__(self, board, hw, power_on="restore", state_dir="."):
        pins = board.get("pins", {})
        inverted = board.get("inverted", {})
        self._inv_relay = 1 if inverted.get("relay") else 0
        self._inv_button = 1 if inverted.get("button") else 0
        self._inv_led = 1 if inverted.get("led") else 0
        self._path = state_dir + "/" + RELAY_FILE
        on = power_on == "on" or (power_on == "restore" and self._saved())
        self.on = on
        self._relay = hw.output(pins["relay"], on ^ self._inv_relay) if "relay" in pins else None
        self._button = hw.input(pins["button"], "button" in board.get("pullup", ())) \
            if "button" in pins else None
        self._pixel = None
        self._led = None
        if "led" in pins:
            if board.get("led") == "ws2812":
                self._pixel = hw.pixel(pins["led"])
            else:
                self._led = hw.output(pins["led"], self._inv_led)
        self._pressed_ms = -1
        self._level = 0
        self._level_ms = 0
        self.presses = 0
        self.writes = 0

    def _saved(self):
        try:
            with open(self._path) as f:
                return f.read(1) == "1"
        except OSError:
            return True  # never set: a plug that comes back on is what people expect

    def set(self, on):
        """Switch the relay; True if it changed."""
        on = bool(on)
        if on == self.on:
            return False
        self.on = on
        if self._relay is not None:
            self._relay.value(on ^ self._inv_relay)
        try:
            with open(self._path, "w") as f:
                f.write("1" if on else "0")
            self.writes += 1
        except OSError:
            pass  # a full or broken flash must not stop the relay
        return True

    def poll(self, now_ms):
        """Read the button; True when a short press has just toggled the relay."""
        if self._button is None:
            return False
        level = self._button.value() ^ self._inv_button
        if level != self._level:
            self._level = level
            self._level_ms = now_ms
            return False
        if ticks_diff(now_ms, self._level_ms) < DEBOUNCE_MS:
            return False
        if level and self._pressed_ms < 0:
            self._pressed_ms = self._level_ms
        elif not level and self._pressed_ms >= 0:
            held = ticks_diff(self._level_ms, self._pressed_ms)
            self._pressed_ms = -1
            if held < LONG_MS:
                self.presses += 1
                self.set(not self.on)
                return True
        return False

    def show(self, status, now_ms):
        """Drive the LED for status CONNECTING, ONLINE or ERROR."""
        if status == ONLINE:
            lit, colour = self.on, "on" if self.on else "off"
        elif status == CONNECTING:
            lit, colour = (now_ms // 500) % 2 == 0, "connecting"
        else:
            lit, colour = (now_ms // 125) % 2 == 0, "error"
        if self._led is not None:
            self._led.value(lit ^ self._inv_led)
        elif self._pixel is not None:
            self._pixel.colour(_COLOURS[colour] if lit or status == ONLINE else _COLOURS["dark"])
