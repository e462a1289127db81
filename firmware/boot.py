# boot.py - runs first at every reset, before main.py.
import micropython

# Let an exception raised in an interrupt handler (button, pulse counting) still be reported.
# The unix port, which runs the simulated plugs, has no interrupts and no such buffer.
if hasattr(micropython, "alloc_emergency_exception_buf"):
    micropython.alloc_emergency_exception_buf(100)
