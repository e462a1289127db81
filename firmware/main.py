# main.py - starts the node (wattnode/start.py), unless boot.py chose safe mode.
# Kept thin: everything lives in /lib/wattnode (or the version boot.py chose, ota/<version>),
# which can be updated without touching this file. A version on trial (over-the-air update)
# that cannot even start (an import error) is not left at the REPL: main.py writes why to
# ota/failed and resets, and boot.py rolls it back. Like boot.py, the fixed loader: installed
# over USB once and never updated over the air (boot.py says why).
import sys

try:
    from wattnode import safe
    if safe.reason:
        print("safe mode:", safe.reason)
        print("the node is not running; connect with mpremote")
    else:
        del safe  # boot.py's too (one namespace): start.py unloads it, nothing may hold it
        from wattnode import start
        start.main()
except Exception as e:  # only a failed start reaches here (start.py handles the loop's crashes)
    try:
        with open("ota/boot") as f:
            trial = " trial " in f.read()
    except OSError:
        trial = False
    if not trial:
        raise
    sys.print_exception(e)
    with open("ota/failed", "w") as f:
        f.write(repr(e)[:200])
    import machine
    if hasattr(machine, "reset"):
        machine.reset()
    sys.exit(3)  # on the unix port a launcher takes exit status 3 as a reset (start.py's)
