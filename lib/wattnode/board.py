"""board.py - a plug's board file (boards/<plug>.json, board.json on the flash): read and check.

  name       "Shelly Plus Plug S"
  mcu        "esp32" | "esp32c3"
  hal        "esp32" (default): which hardware layer (hw/) drives it
  chip       "bl0937" | "hlw8012" | "cse7766" | "hlw8032" | "bl0942"
  verified   false until someone has checked the pins on a real plug
  pins       {"relay": 4, "button": 9, "led": 25, <the chip's pins>} GPIO numbers
             bl0937/hlw8012: sel, cf, cf1   cse7766/hlw8032: rx   bl0942: rx, tx
  inverted   {"button": true, "sel": true, ...}  pins whose active level is low
  pullup     ["button"]                          inputs that need the internal pull-up
  led        "gpio" | "ws2812"
  baud       UART speed (cse7766 4800; bl0942 4800 or 9600)
  meter      chip constants: bl0937/hlw8012 power_w_per_hz, voltage_v_per_hz,
             current_a_per_hz; any chip: max_power_w (above it, pulses are interference)
  ring_kib   RAM for the ring of readings (16 bytes each; 32 KiB is 5.7 h at 10 s: outages
             longer than that go to the spill, which takes the heap a bigger ring would)
  spill_kib  flash for the spill (spill.py): readings the ring must make room for while the
             collector does not acknowledge them, in 4 KiB files of 252 (1000 KiB: 7.3 days
             at 10 s); 0: none. The node takes less if the file system has less room.
  holds_days what the plug holds at the default 10 s, in days: the spill's readings (the
             ring's are on the flash too, but for the newest 126), or the ring's if it is the
             larger (the board's promise; tests/device/test_board.py checks it)

check() lists every problem in words and says whether the chip can be driven. A board that cannot meter (unknown chip, a chip pin
missing or impossible) still boots: the node runs without a meter, so every slot is stored as
missing, and it says why on its log topic - never a boot loop, never a made-up reading.
CHIP_PINS and MCU_PINS are the chips and MCUs it knows; a package that adds a hardware layer
or a chip driver (hw.LAYERS, meters.DRIVERS) adds its chips and MCUs here too.
"""

CHIP_PINS = {
    "bl0937": ("sel", "cf", "cf1"), "hlw8012": ("sel", "cf", "cf1"),
    "cse7766": ("rx",), "hlw8032": ("rx",), "bl0942": ("rx", "tx"),
}
CHIP_METER = {"bl0937": ("power_w_per_hz", "voltage_v_per_hz", "current_a_per_hz")}
CHIP_METER["hlw8012"] = CHIP_METER["bl0937"]
CHIP_BAUDS = {"cse7766": (4800,), "hlw8032": (4800,), "bl0942": (4800, 9600)}
# usable GPIOs per MCU, and the ones that can only be inputs
MCU_PINS = {"esp32": (range(0, 40), range(34, 40)), "esp32c3": (range(0, 22), range(0, 0))}
OUTPUTS = ("relay", "led", "sel", "tx")
KEYS = ("name", "mcu", "hal", "chip", "verified", "source", "pins", "inverted", "pullup", "led",
        "baud", "meter", "ring_kib", "spill_kib", "holds_days", "notes")
# (minimum, maximum, default) KiB; spill_kib in whole 4 KiB files
SIZES = {"ring_kib": (4, 96, 32), "spill_kib": (0, 4096, 1000)}


def check(board):
    """(problems in words, whether the metering chip can be driven)."""
    if not isinstance(board, dict):
        return ["the board file does not hold a JSON object"], False
    problems = []
    name = board.get("name", "?")
    chip = board.get("chip")
    meter_ok = chip in CHIP_PINS
    if not meter_ok:
        problems.append("board %r: chip %r is not one of %s"
                        % (name, chip, ", ".join(sorted(CHIP_PINS))))
    pins = board.get("pins")
    if not isinstance(pins, dict):
        return problems + ["board %r: \"pins\" must be an object of GPIO numbers" % name], False
    chip_pins = CHIP_PINS.get(chip, ())
    mcu = board.get("mcu", "esp32")
    usable, input_only = MCU_PINS.get(mcu, MCU_PINS["esp32"])
    seen = {}
    for role, gpio in pins.items():
        bad = None
        if not isinstance(gpio, int) or gpio not in usable:
            bad = "pin %s = %r is not a GPIO of the %s" % (role, gpio, mcu)
        elif role in OUTPUTS and gpio in input_only:
            bad = "pin %s = GPIO%d can only be an input on the %s" % (role, gpio, mcu)
        elif gpio in seen:
            bad = "GPIO%d is both %s and %s" % (gpio, seen[gpio], role)
        if bad:
            problems.append("board %r: %s" % (name, bad))
            meter_ok = meter_ok and role not in chip_pins
            continue
        seen[gpio] = role
    for role in chip_pins:
        if role not in pins:
            problems.append("board %r: a %s needs pin %r" % (name, chip, role))
            meter_ok = False
    meter = board.get("meter", {})
    for key in CHIP_METER.get(chip, ()):
        value = meter.get(key) if isinstance(meter, dict) else None
        if not isinstance(value, (int, float)) or value <= 0:
            problems.append("board %r: a %s needs meter.%s, a positive number" % (name, chip, key))
            meter_ok = False
    if chip in CHIP_BAUDS and board.get("baud", CHIP_BAUDS[chip][0]) not in CHIP_BAUDS[chip]:
        problems.append("board %r: a %s talks at %s baud, not %r"
                        % (name, chip, " or ".join(str(b) for b in CHIP_BAUDS[chip]), board.get("baud")))
        meter_ok = False
    if chip in ("bl0937", "hlw8012") and mcu == "esp32c3":
        problems.append("board %r: the ESP32-C3 has no hardware pulse counter; counted by "
                        "interrupts, pulses above a few hundred Hz are lost (energy reads low)" % name)
    for key in ("ring_kib", "spill_kib"):
        low, high, default = SIZES[key]
        kib = board.get(key, default)
        if kib != _kib(board, key):
            problems.append("board %r: %s = %r must be %d..%d%s; using %d"
                            % (name, key, kib, low, high,
                               ", a multiple of 4" if key == "spill_kib" else "", default))
    for key in board:
        if key not in KEYS:
            problems.append("board %r: key %r is unknown and ignored" % (name, key))
    return problems, meter_ok


def _kib(board, key):
    low, high, default = SIZES[key]
    kib = board.get(key, default)
    ok = isinstance(kib, int) and not isinstance(kib, bool) and low <= kib <= high and \
        (key != "spill_kib" or kib % 4 == 0)
    return kib if ok else default


def ring_kib(board):
    return _kib(board, "ring_kib")


def spill_kib(board):
    return _kib(board, "spill_kib")
