# fakeboard_rom.py - the "ROM" of tools/lib/fakeboard.py's board: what an ESP32's MicroPython
# does before the REPL (ports/esp32/main.c, modules/_boot.py, modules/inisetup.py, 1.28),
# done by the unix port. fakeboard.py runs it, as exec(open(this file).read()), with
#     micropython -i -c ... FLASH_IMAGE BLOCK_SIZE main|nomain NOTIFY_FD MACHINE_DIR
# on the board's pseudo-terminal (-i leaves the unix port at its REPL afterwards), or with
#     micropython -c ... FLASH_IMAGE BLOCK_SIZE put LOCAL=REMOTE ...
# to write files into the flash.
#
# - the flash is FLASH_IMAGE, a file used as a block device (so it outlives this process: a
#   soft reset restarts the process); a blank one is formatted littlefs2 and gets only the
#   boot.py an ESP32 writes at its first boot (inisetup.py);
# - it is mounted at / in place of the host's filesystem, and sys.path is the ESP32's
#   ("", ".frozen", "/lib"): nothing of the host is left in sight;
# - boot.py runs, then main.py unless the board comes back from a soft reset in the raw REPL
#   ("nomain"), exactly as main.c does; an exception in either is printed and the REPL follows;
# - `machine` is the unix port's, extended by MACHINE_DIR/machine.py (imported before the host's
#   files go out of sight) with reset(), which, like SystemExit(3) from main.py (the simulated
#   plug's hw.reset(), wattsim.board.RESET_EXIT), asks fakeboard.py for a hard reset through
#   NOTIFY_FD:
#   one byte, H (hard) or S (soft: any other SystemExit), after which this process waits to be
#   replaced. A process cannot leave -i's REPL by itself otherwise.
# - a flash that holds the simulated plug (lib/wattsim) gets it plugged into the node first
#   (wattsim.install()), as an ESP32's firmware brings its own hardware modules;
# Names are cleaned up before the REPL, as far as MicroPython allows (an ESP32's REPL
# shows `bdev` from _boot.py too).

import sys
import time

import vfs

_RESET_EXIT = 3
_ARGS = sys.argv[1:]


def _ask(kind):
    _notify.write(kind)  # unbuffered (and flush() would fsync a pipe: EINVAL)
    while True:  # fakeboard.py replaces this process now
        time.sleep(1)


class _Flash:
    """A block device on a file: the extended interface VfsLfs2 uses (offsets, erase)."""

    def __init__(self, path, block_size):
        self._f = open(path, "r+b")
        self._bs = block_size
        self._f.seek(0, 2)
        self._blocks = self._f.tell() // block_size

    def readblocks(self, n, buf, off=0):
        self._f.seek(n * self._bs + off)
        self._f.readinto(buf)

    def writeblocks(self, n, buf, off=0):
        self._f.seek(n * self._bs + off)
        self._f.write(buf)

    def ioctl(self, op, arg):
        if op == 3:  # sync
            self._f.flush()
        if op == 4:  # block count
            return self._blocks
        if op == 5:  # block size
            return self._bs
        return 0     # init, deinit; erase: nothing to do, littlefs rewrites what it erases


def _mount(at):
    """The flash, formatted first if blank (with the boot.py inisetup.py writes)."""
    global bdev
    bdev = _Flash(_ARGS[0], int(_ARGS[1]))
    try:
        fs = vfs.VfsLfs2(bdev)
        fresh = False
    except OSError:
        print("Performing initial setup")
        vfs.VfsLfs2.mkfs(bdev)
        fs = vfs.VfsLfs2(bdev)
        fresh = True
    if at == "/":
        vfs.umount("/")
    vfs.mount(fs, at)
    if fresh:
        with open(at.rstrip("/") + "/boot.py", "w") as f:
            f.write("# This file is executed on every boot (including wake-boot from deepsleep)\n"
                    "#import esp\n#esp.osdebug(None)\n#import webrepl\n#webrepl.start()\n")


def _put(pairs):
    """put mode: LOCAL=REMOTE pairs into the flash, mounted at /flash beside the host's files."""
    import os
    _mount("/flash")
    for pair in pairs:
        local, remote = pair.split("=", 1)
        path = "/flash"
        for part in remote.split("/")[:-1]:
            path += "/" + part
            try:
                os.mkdir(path)
            except OSError:
                pass  # it exists; a real failure shows at the open() below
        with open(local, "rb") as src:
            data = src.read()
        with open("/flash/" + remote, "wb") as dst:
            dst.write(data)
    vfs.umount("/flash")


def _run(path):
    """Like pyexec_file_if_exists(); SystemExit means a reset, as on an ESP32."""
    try:
        with open(path) as f:
            source = f.read()
    except OSError:
        return
    try:
        exec(source, globals())
    except SystemExit as e:
        _ask(b"H" if e.args and e.args[0] == _RESET_EXIT else b"S")
    except BaseException as e:  # KeyboardInterrupt too: printed, then the REPL, as on an ESP32
        sys.print_exception(e)


if _ARGS[2] == "put":
    _put(_ARGS[3:])
    sys.exit(0)
_notify = open(int(_ARGS[3]), "wb")
sys.path[:] = [_ARGS[4]]  # fakeboard.py's machine.py: the built-in machine plus reset()
import machine  # noqa: E402
machine.ask = _ask
_mount("/")
import os  # noqa: E402
os.chdir("/")
sys.path[:] = ["", ".frozen", "/lib"]
try:
    import wattsim
    wattsim.install()
except ImportError:
    pass  # a plug's files only (tools/deploy's): nothing simulated to plug in
_run("boot.py")
if _ARGS[2] == "main":
    _run("main.py")
del _ARGS, _Flash, _mount, _put, _run, machine
