"""crashes.py - the crash counter: how many times in a row the node has crashed.

start.py counts a crash (the loop died of an exception) and clears the count once the node
has run HEALTHY_S in one boot without crashing; safe.py enters safe mode after MAX_CRASHES of
them in a row; firmware/boot.py reads the same file to roll back a version on trial that
crashed, and one in its grace period that crash-loops (ota/trial.py ends the grace period
after HEALTHY_S). The file's format (a decimal number, CRASHES_FILE at the flash root) is
frozen: boot.py, installed once over USB, reads it as it is.

A module of its own, small and imported by all of them, so that none of them imports another
for it (the update's transfer clears it at a switch).
"""

HEALTHY_S = 600  # a node that has run this long in one boot no longer crashes "in a row"
CRASHES_FILE = "crashes"


def crash_count():
    try:
        with open(CRASHES_FILE) as f:
            return int(f.read() or 0)
    except (OSError, ValueError):
        return 0


def set_crash_count(n):
    try:
        with open(CRASHES_FILE, "w") as f:
            f.write(str(n))
    except OSError:
        pass
