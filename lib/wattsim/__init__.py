"""wattsim - the simulated plug: wattnode's real firmware on the MicroPython unix port with a
simulated board, metering chip, load and clock. A plug never imports this package; nothing in
wattnode names it.

    import wattsim
    wattsim.install()      what a launcher does before the firmware runs

install() adds the simulator to the tables through which wattnode finds a plug's parts, the
same entry points the ESP32 layer and the chip drivers use:
    hw.LAYERS["sim"]        a board file's "hal": "sim" -> wattsim.board.Board, the hardware
                            layer (pins, UART, pulse counters, watchdog, RTC memory, NTP,
                            reset) on a virtual clock (clock.py)
    meters.DRIVERS["sim"]   a board file's "chip": "sim" -> wattsim.meter, a meter that
                            measures its load profile exactly (boards/sim.json)
    board.CHIP_PINS["sim"], board.MCU_PINS["unix"]   what the node's board check knows
A board file that names a real chip keeps its chip: wattsim.chips simulates it down to the
frames and pulses its driver reads.

Why tables filled by a launcher rather than modules named in the board file: board files stay
short data that the node checks and explains in words (a plug given the simulator's board file
says chip 'sim' is not one it knows, and runs without a meter), a plug never imports a module
because a file named it, and the simulation is plugged in at one place per way of running it:
tools/simnode's launch line, tools/fakeboard's ROM, the device tests' rig.

The simulated world's settings are not the plug's: they live in sim.json beside config.json
(tools/simnode writes it; board.py reads it): load profile, clock (start, speed or "max",
then_realtime), chip faults, when NTP answers, when the loop crashes, whether a REPL follows
Ctrl-C. Modules: board, clock, chips and parts (the metering chips: bl0937, cse7766 and
bl0942, one per family, imported for a board that has it), meter, profiles (loads).
"""


def install():
    """Plug the simulator into wattnode's tables (idempotent)."""
    from wattnode import board, hw, meters
    hw.LAYERS["sim"] = "wattsim.board"
    meters.DRIVERS["sim"] = ("wattsim.meter", "create")
    board.CHIP_PINS["sim"] = ()
    board.MCU_PINS["unix"] = (range(0, 64), range(0, 0))
