# boot.py - runs first at every reset, soft ones included, before main.py. It decides on safe
# mode (wattnode/safe.py: button held at boot, or 3 crashes in a row), keeps a watchdog armed
# before a soft reset from cutting the mpremote session that made it (main.py does not run
# from mpremote's raw REPL), and must itself never fail, so the REPL always comes up.
import micropython

# Let an exception raised in an interrupt handler (button, pulse counting) still be reported.
# The unix port has no interrupts and no such buffer.
if hasattr(micropython, "alloc_emergency_exception_buf"):
    micropython.alloc_emergency_exception_buf(100)

try:
    from wattnode import safe
    safe.check()
except Exception as e:  # a broken library must still leave the REPL reachable
    print("boot.py:", repr(e))
