# manifest.py - for freezing wattnode into a MicroPython firmware build (micropython-lib style):
#     make -C ports/esp32 BOARD=ESP32_GENERIC FROZEN_MANIFEST=/path/to/board-manifest.py
# with a board manifest that does include("$(PORT_DIR)/boards/manifest.py") and includes this
# file. Frozen, the node's bytecode lives in flash instead of the heap: about 51 KiB of heap
# with the 48 KiB ring instead of about 77 KiB loaded from .mpy files (tools/bench/heap).
# The simulator's modules (hw/sim*.py, meters/sim.py, profiles.py) are left
# out, as tools/build leaves them out of build/device: a plug never imports them.
metadata(version="0.1.0", description="wattlog node: metering plug firmware")
require("umqtt.simple")
package(
    "wattnode",
    files=(
        "__init__.py", "board.py", "calib.py", "clock.py", "commands.py", "config.py",
        "discovery.py", "energy.py", "link.py", "mqttsock.py", "node.py", "relay.py", "repl.py", "ring.py", "safe.py", "sampler.py", "start.py",
        "wire.py", "hw/__init__.py", "hw/esp32.py", "meters/__init__.py",
        "meters/bl0937.py", "meters/bl0942.py", "meters/cse7766.py",
    ),
    base_path="..",
    opt=3,
)
