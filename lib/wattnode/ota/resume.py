"""resume.py - the update work a boot takes up: what the flash holds (due()) and loading it
into the node's Work (load()). Loaded by the node once, on its loop's first pass, when there
is an ota/ folder at all, and forgotten right after: a boot's only, it is not in the heap
while a transfer or a trial runs.
"""

import gc

from wattnode import forget
from wattnode.ota import compact
from wattnode.ota.flash import POINTER, RESULT, STAGED, exists


def due():
    """The update work the flash holds for this boot: "trial" (a version on trial), "grace"
    (a version in its grace period), "work" (an outcome to report, a transfer to resume) or
    None."""
    try:
        with open(POINTER) as f:
            state = f.read().split()[2]
        if state in ("trial", "grace"):
            return state
    except (OSError, IndexError):
        pass
    if exists(RESULT) or exists(STAGED):
        return "work"
    return None


def load(w, work, say):
    """The update work `work` (due()'s) loaded into w (the package's Work); False without the
    heap for it: said (say(text)), and a version on trial, which cannot be confirmed then,
    asks for a reboot, so that boot.py rolls it back after its unconfirmed boots."""
    gc.collect()  # a module's code needs whole blocks
    try:
        if work != "work" or exists(RESULT):
            from wattnode.ota import trial
            w.trial = trial.Trial(*w.ports)
        if exists(STAGED):
            from wattnode.ota import manifest  # first and alone, as in message()
            staged = manifest.staged(w.hex_key, w.node_id)
            manifest = None
            forget("ota.manifest")
            if staged is not None:
                gc.collect()
                compact(staged)
                from wattnode.ota import transfer
                w.transfer = transfer.Updater(w.ports[0], w.ports[4], staged)
        return True
    except MemoryError:
        w.transfer = w.trial = None
        w.drop()
    say("no heap left for the update's work at start-up (%d bytes free)%s"
        % (gc.mem_free(), "; rebooting: the version on trial is not confirmed"
           if work == "trial" else ""))
    if work == "trial":
        w.ports[4]("the update on trial cannot be confirmed without heap")
    return False
