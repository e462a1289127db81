"""wattnode - the node library of wattlog: MicroPython firmware for metering plugs."""
