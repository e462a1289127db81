# manifest.py - for freezing wattnode into a MicroPython firmware build (micropython-lib style):
#     make -C ports/esp32 BOARD=ESP32_GENERIC FROZEN_MANIFEST=/path/to/board-manifest.py
# with a board manifest that does include("$(PORT_DIR)/boards/manifest.py") and includes this
# file. Frozen, the node's bytecode lives in flash instead of the heap: about 39 KiB of heap
# with the 32 KiB ring instead of about 116 KiB loaded from .mpy files (tools/bench/heap).
# Every module of the package is frozen, as tools/build puts every one in build/device: the
# package holds only what a plug runs. Only this file is left out (package() without files
# would freeze it too); the version is __init__.py's __version__, the one place it is written.
# MicroPython's manifestfile.py runs this file with its own folder as the working directory.
import os

with open("__init__.py") as f:
    version = next(line.split('"')[1] for line in f if line.startswith("__version__ = "))
modules = []
for folder, _, names in os.walk("."):
    for name in names:
        path = os.path.relpath(os.path.join(folder, name), ".")
        if name.endswith(".py") and path != "manifest.py":
            modules.append(path)

metadata(version=version, description="wattlog node: metering plug firmware")
require("umqtt.simple")
package("wattnode", files=sorted(modules), base_path="..", opt=3)
