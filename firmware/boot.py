# boot.py - runs first at every reset, soft ones included, before main.py. It chooses the
# version of the node to run (over-the-air updates, wattnode/ota/), decides on safe mode
# (wattnode/safe.py: button held at boot, or 3 crashes in a row), keeps a watchdog armed
# before a soft reset from cutting the mpremote session that made it (main.py does not run
# from mpremote's raw REPL), and must itself never fail, so the REPL always comes up.
#
# The version: ota/boot (the pointer, one line "<current> <previous> <ok|trial|grace> <boots>
# <trial_s>") names a folder ota/<current> put first on sys.path; without a pointer, or with
# "-", the version installed over USB in /lib runs. A version on trial is rolled back to the
# previous one here when it crashed (the crash counter), failed to start (ota/failed, written
# by main.py), was reset by the watchdog (machine.reset_cause(): its loop stopped) or has
# booted MAX_TRIAL_BOOTS times unconfirmed. A confirmed version is in its grace period
# ("grace") until it has run a while (wattnode/ota/trial.py): a crash loop then
# (MAX_GRACE_CRASHES crashes in a row, a watchdog reset counting as one) sends it back to
# the previous version, which is still on the flash, rather than into safe mode. ota/result
# then says why, and the node reports it once its link is up (naming the version by its
# folder: the node's ota/trial.py turns that into the version string).
#
# The fixed loader: this file and main.py are installed once, over USB, and never updated over
# the air, as ESP-IDF's OTA never replaces its second-stage bootloader. They decide which
# version runs and roll back one that cannot start, so they must not depend on any version
# (the version on trial may fail at import) and a bad update must never be able to replace
# them: a plug with a broken loader could only be repaired over USB, which on mains is never.
# Everything that may need fixing lives in the versioned wattnode package (safe mode's
# conditions in wattnode/safe.py, starting the node in wattnode/start.py, the transfer, the
# trial and the reports in wattnode/ota/); what stays here is only choosing a folder, the
# trial's three rollback conditions and calling safe.check(). The contract with the versions
# is therefore frozen: ota/boot's one-line format above, ota/failed, ota/result's keys and the
# crash counter file `crashes` (wattnode/crashes.py); a new version's ota/ must keep writing
# and reading them.
import micropython
import sys

MAX_TRIAL_BOOTS = 3
MAX_GRACE_CRASHES = 3  # what would be safe mode (wattnode/safe.py), in a version's grace period

# Let an exception raised in an interrupt handler (button, pulse counting) still be reported.
# The unix port has no interrupts and no such buffer.
if hasattr(micropython, "alloc_emergency_exception_buf"):
    micropython.alloc_emergency_exception_buf(100)


def _watchdog_reset():
    """True when the watchdog reset the plug (its loop stopped feeding it); False on a port
    whose machine module cannot say (the unix port's has no reset_cause)."""
    try:
        import machine
        return machine.reset_cause() == machine.WDT_RESET
    except (ImportError, AttributeError):
        return False


def _crashes():
    try:
        with open("crashes") as f:
            return int(f.read() or 0)
    except (OSError, ValueError):
        return 0


def _ota_choose():
    import os
    try:
        with open("ota/boot") as f:
            cur, prev, state, boots, trial_s = f.read().split()
        boots = int(boots)
    except (OSError, ValueError):
        return
    why = None
    line = None
    if state == "trial":
        try:
            with open("ota/failed") as f:
                why = "it failed to start: " + f.read()
            os.remove("ota/failed")
        except OSError:
            pass
        if why is None and _crashes() > 0:
            why = "it crashed (see crash.log)"
        if why is None and _watchdog_reset():
            why = "the watchdog reset it: its loop stopped"
        if why is None and boots >= MAX_TRIAL_BOOTS:
            why = "it booted %d times without being confirmed" % boots
        if why is None:
            line = "%s %s trial %d %s\n" % (cur, prev, boots + 1, trial_s)
    elif state == "grace":
        crashes = _crashes()
        if _watchdog_reset():
            crashes += 1
            with open("crashes", "w") as f:
                f.write(str(crashes))
        if crashes >= MAX_GRACE_CRASHES:
            why = ("it crashed %d times in a row after it was confirmed (see crash.log; a "
                   "watchdog reset counts as a crash)" % crashes)
    if why is not None:
        line = "%s - ok 0 0\n" % prev
        with open("ota/result.tmp", "w") as f:
            f.write('{"id": "%s", "state": "rolled back", "version": "%s", "reason": "%s"}'
                    % (cur[1:], cur, why.replace('"', "'").replace("\n", " ")))
        os.rename("ota/result.tmp", "ota/result")
        with open("crashes", "w") as f:
            f.write("0")
        print("boot.py: rolled back from %s to %s: %s" % (cur, prev, why))
        cur = prev
    if line is not None:
        with open("ota/boot.tmp", "w") as f:
            f.write(line)
        os.rename("ota/boot.tmp", "ota/boot")
    if cur != "-":
        sys.path.insert(0, "ota/" + cur)


try:
    _ota_choose()
except Exception as e:  # a damaged pointer must still leave the REPL reachable
    print("boot.py: choosing the version:", repr(e))
del _ota_choose, _watchdog_reset, _crashes  # main.py shares this namespace: let them go

try:
    from wattnode import safe
    safe.check()
except Exception as e:  # a broken library must still leave the REPL reachable
    print("boot.py:", repr(e))
