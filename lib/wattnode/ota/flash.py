"""flash.py - the update files on the plug's flash that the parts of an update share: the
pointer (ota/boot), the outcome to report (ota/result), making and removing folders, and the
one ota/status message. The transfer (transfer.py, with manifest.py while it reads a
manifest) and a boot's trial and report (trial.py) are loaded separately, each only when
there is such work, and share only this small module.

The layout, the topics and the trial's rules are described in the package's notes
(__init__.py). firmware/boot.py reads and writes the same files (ota/boot's one-line format, ota/result's keys), so they are frozen:
a new version must keep writing and reading them as they are.
"""

import json
import os

DIR = "ota"
STAGE = "ota/stage"
STAGED = "ota/stage/manifest"
POINTER = "ota/boot"
RESULT = "ota/result"


def exists(path):
    try:
        os.stat(path)
        return True
    except OSError:
        return False


def read_pointer():
    """[current, previous, state, boots, trial_s], or None (the USB-installed version)."""
    try:
        with open(POINTER) as f:
            p = f.read().split()
        return [p[0], p[1], p[2], int(p[3]), int(p[4])]
    except (OSError, ValueError, IndexError):
        return None


def write_pointer(cur, prev, state, boots=0, trial_s=0):
    """The one atomic step of a switch or a rollback: written beside it, then renamed."""
    with open(POINTER + ".tmp", "w") as f:
        f.write("%s %s %s %d %d\n" % (cur, prev, state, boots, trial_s))
    os.rename(POINTER + ".tmp", POINTER)


def write_result(result):
    with open(RESULT + ".tmp", "w") as f:
        json.dump(result, f)
    os.rename(RESULT + ".tmp", RESULT)


def makedirs(path):
    part = ""
    for name in path.split("/"):
        part = part + "/" + name if part else name
        if not exists(part):
            os.mkdir(part)


def rmtree(path):
    try:
        entries = list(os.ilistdir(path))
    except OSError:
        return
    for e in entries:
        sub = path + "/" + e[0]
        if e[1] == 0x4000:
            rmtree(sub)
        else:
            os.remove(sub)
    os.rmdir(path)


def running():
    import wattnode
    return wattnode.__version__


def status(link, state, uid, version, reason=None, done=0, total=None, heap_max=0, lost=None):
    """ota/status (retained): where an update stands; `wattlog ota` and `wattlog nodes` read
    it. heap_max: the most heap in use after an OTA message (transfer.py); lost: the slots a
    rollback lost (trial.py), which the collector counts."""
    msg = {"id": uid, "state": state, "version": version or running(), "running": running(),
           "reason": reason, "done": done, "heap_max": heap_max, "total": total}
    if lost is not None:
        msg["lost"] = lost
    link.publish(link.t_ota_status, json.dumps(msg), retain=True)
