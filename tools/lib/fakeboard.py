"""fakeboard.py - an ESP32-like MicroPython board on a pseudo-terminal: mpremote and tools/deploy
without a plug.

    tools/fakeboard [--flash FILE] [--put LOCAL=REMOTE ...] [--node CONFIG]
        prints its port (/dev/pts/N) and runs until Ctrl-C; --node puts the node on it, as
        source, with a simulated plug (lib/wattsim): the README's mpremote commands work
        against it
    with FakeBoard(flash_path, files) as board:                  (tests; files: firmware_files())
        subprocess.run(["mpremote", "connect", board.port, ...])  or  Terminal(board.port)

The board is the MicroPython unix port (.venv's `micropython`) running fakeboard_rom.py on a
pseudo-terminal of its own; a relay thread passes bytes between that terminal and a second one,
`port`, which mpremote opens as its serial port. Its filesystem is littlefs2 in a flash image
file (FLASH_KIB, 4 KiB blocks, as on an ESP32).

Like an ESP32 with MicroPython 1.28 (ports/esp32/main.c, modules/_boot.py, inisetup.py):
- a blank flash is formatted littlefs2 and holds only boot.py; nothing else is in sight;
- power-on and machine.reset() (mpremote's `reset`) run boot.py, then main.py, then the REPL;
- a soft reset (Ctrl-D at the friendly or the raw REPL, as mpremote does before a command not
  preceded by `resume`) prints "MPY: soft reboot", runs boot.py, and runs main.py only if it
  came from the friendly REPL: from the raw REPL it comes back to the raw REPL, as main.c does;
- Ctrl-C while code runs raises KeyboardInterrupt, and at a prompt it is just a character, as
  the ESP32's UART driver does it: the relay sends SIGINT while the unix port has its handler
  installed (it does only while code runs), since the unix port's own terminal handling misses
  code that mpremote sends by raw paste (it runs in raw terminal mode);
- what the board prints while no one has the port open is dropped, as a UART's output is;
  while the port is open, output waits up to HOST_WAIT_S for the reader, as a USB-serial
  bridge's buffers and the host's tty buffer hold it, and only then is dropped (a partial
  write used to drop the rest at once: a busy machine's mpremote lost the end of a line).

Where it differs, and why:
- a soft reset replaces the unix-port process, because its REPL ends the process on Ctrl-D
  (PYEXEC_FORCED_EXIT) where an ESP32 loops back; the flash image is a file, so it survives.
  A hard reset (machine.reset(), SystemExit(3) from main.py = the simulated plug's reset, or
  the REPL ending with exit status 3) replaces it too, starting from the friendly REPL;
- the unix port prints "\n" where an ESP32 prints "\r\n" (mpremote takes both), and two
  Ctrl-C in quick succession kill it (its SIGINT handler exits on the second);
- there is no machine.WDT, Timer or Pin: a node runs here on its simulated board (hal "sim"),
  which the ROM plugs in (wattsim.install()) when the flash holds lib/wattsim, as an ESP32's
  firmware brings its own hardware modules.
"""

import argparse
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import termios
import threading
import time
import tty

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
ROM = os.path.join(HERE, "fakeboard_rom.py")
_LAUNCH = "exec(open(%r).read())" % ROM  # read before the rom hides the host's files
FLASH_KIB = 2048
BLOCK_SIZE = 4096
HOST_WAIT_S = 2.0  # how long the board's output waits for a reader that has the port open
RESET_EXIT = 3      # wattsim.board.RESET_EXIT: the REPL ended asking for a hard reset
_TICK_S = 0.02


# The board's machine module: the unix port's, extended (MicroPython lets a machine.py found
# first extend the built-in one), plus reset(), which fakeboard_rom.py's ask() carries out.
MACHINE_PY = """import sys
_path = sys.path
sys.path = []
from machine import *
sys.path = _path
del _path, sys
ask = None


def reset():
    ask(b"H")
"""


def _micropython():
    return shutil.which("micropython") or os.path.join(REPO, ".venv", "bin", "micropython")


def _catches_sigint(pid):
    """True while the unix port runs code: it installs its SIGINT handler only then (the
    ESP32's UART driver likewise takes Ctrl-C as an interrupt only while code runs)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    except OSError:
        pass
    return False


class FakeBoard:
    def __init__(self, flash, files=None, flash_kib=FLASH_KIB, heap_kib=None):
        """flash: the image file (made blank if missing); files: {path on the board: local
        file or bytes} written into it before the board starts, as if flashed with it."""
        self.flash = flash
        self.heap_kib = heap_kib
        self.port = None
        self.resets = []          # "soft" / "hard", in order: what the board went through
        self._log = bytearray()   # everything the board printed
        self._lock = threading.Lock()
        self._proc = None
        self._raw = False         # the REPL mode the board was last put in (Ctrl-A / Ctrl-B)
        self._connected = False   # someone has the port open (else reading it fails: EIO)
        self._stop = threading.Event()
        self._thread = None
        self._home = tempfile.mkdtemp(prefix="fakeboard-")  # history file, machine.py
        with open(os.path.join(self._home, "machine.py"), "w") as f:
            f.write(MACHINE_PY)
        if not os.path.exists(flash):
            with open(flash, "wb") as f:
                f.truncate(flash_kib * 1024)
        if files:
            self.put(files)

    # -- the flash, while the board is off ------------------------------------------------------

    def put(self, files):
        """Write {path on the board: local file, or bytes} into the flash image (the board
        must be off)."""
        if self._proc is not None:
            raise RuntimeError("fakeboard: put() while the board runs would corrupt its flash")
        pairs = []
        for i, (dst, src) in enumerate(sorted(files.items())):
            if isinstance(src, bytes):
                path = os.path.join(self._home, "put-%d" % i)
                with open(path, "wb") as f:
                    f.write(src)
                src = path
            pairs.append("%s=%s" % (os.path.abspath(src), dst.lstrip("/")))
        done = subprocess.run([_micropython(), "-c", _LAUNCH, self.flash, str(BLOCK_SIZE),
                               "put"] + pairs, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError("fakeboard: could not write the flash: " + done.stdout + done.stderr)

    # -- power -----------------------------------------------------------------------------------

    def start(self):
        host, slave = os.openpty()
        tty.setraw(slave)
        self.port = os.ttyname(slave)
        os.close(slave)  # mpremote opens it; until then the master reads EIO
        os.set_blocking(host, False)
        self._host = host
        self._board, self._board_slave = os.openpty()
        tty.setraw(self._board_slave)  # a UART: bytes pass as they are, both ways
        os.set_blocking(self._board, False)
        self._notify_r, self._notify_w = os.pipe()
        self._boot(main=True)
        self._thread = threading.Thread(target=self._relay, name="fakeboard", daemon=True)
        self._thread.start()
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._stop.set()
        if self._thread:
            self._thread.join(5)
            self._kill()
            for fd in (self._host, self._board, self._board_slave, self._notify_r,
                       self._notify_w):
                os.close(fd)
        shutil.rmtree(self._home, ignore_errors=True)

    def output(self):
        """Everything the board has printed so far (for messages when a test fails)."""
        with self._lock:
            return self._log.decode("utf-8", "replace")

    def _boot(self, main):
        heap = ["-X", "heapsize=%dK" % self.heap_kib] if self.heap_kib else []
        env = dict(os.environ, HOME=self._home)
        env.pop("MICROPYPATH", None)  # the board's sys.path is its own flash
        self._proc = subprocess.Popen(
            [_micropython()] + heap + ["-i", "-c", _LAUNCH, self.flash, str(BLOCK_SIZE),
                                        "main" if main else "nomain", str(self._notify_w),
                                        self._home],
            stdin=self._board_slave, stdout=self._board_slave, stderr=self._board_slave,
            pass_fds=(self._notify_w,), env=env, start_new_session=True)

    def _kill(self):
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def _reset(self, kind):
        """Replace the board's process, as an ESP32 reboots (see the module notes)."""
        self._kill()
        self.resets.append(kind)
        if kind == "soft":
            self._from_board(b"MPY: soft reboot\r\n")
        else:
            self._raw = False
            termios.tcflush(self._board_slave, termios.TCIFLUSH)  # a reset clears the UART
        self._boot(main=not self._raw)
        if self._raw:
            os.write(self._board, b"\x01")  # back into the raw REPL, where main.c leaves it

    # -- the relay ---------------------------------------------------------------------------

    def _from_board(self, data):
        with self._lock:
            self._log += data
        if not self._connected:
            return  # no one listening: a UART's output is lost too
        deadline = time.monotonic() + HOST_WAIT_S
        while data:
            try:
                data = data[os.write(self._host, data):]
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([], [self._host], [], left)[1]:
                    return  # not read for HOST_WAIT_S: dropped, as a UART would
            except OSError:
                return  # the reader has gone

    def _relay(self):
        while not self._stop.is_set():
            watch = [self._board, self._notify_r] + ([self._host] if self._connected else [])
            ready, _, _ = select.select(watch, [], [], _TICK_S)
            if self._notify_r in ready:
                kind = os.read(self._notify_r, 1)
                self._reset("hard" if kind == b"H" else "soft")
                continue
            if self._board in ready:
                try:
                    self._from_board(os.read(self._board, 4096))
                except (BlockingIOError, OSError):
                    pass
            try:
                data = os.read(self._host, 4096)
                self._connected = True
            except BlockingIOError:
                data = b""
                self._connected = True
            except OSError:  # EIO: nobody has the port open
                data = b""
                self._connected = False
            if data:
                self._to_board(data)
            if self._proc.poll() is not None:
                self._drain_board()
                self._reset("hard" if self._proc.returncode == RESET_EXIT else "soft")

    def _to_board(self, data):
        """Bytes for the board; Ctrl-C interrupts running code (the unix port's own terminal
        handling misses code that mpremote runs by raw paste: it stays in raw mode)."""
        for b in data:
            if b == 1:
                self._raw = True
            elif b == 2:
                self._raw = False
        while data:
            at = data.find(b"\x03")
            if at < 0 or not _catches_sigint(self._proc.pid):
                os.write(self._board, data)
                return
            os.write(self._board, data[:at])
            os.kill(self._proc.pid, signal.SIGINT)
            data = data[at + 1:]

    def _drain_board(self):
        while True:
            try:
                data = os.read(self._board, 4096)
            except (BlockingIOError, OSError):
                return
            if not data:
                return
            self._from_board(data)


def firmware_files(config_path, board="sim", sim=None):
    """{path on the board: local file or bytes} for the node as source, simulator included,
    with boards/BOARD.json as board.json (hal "sim"), config_path as config.json and the
    simulation's settings `sim` as sim.json (lib/wattsim/board.py; "repl": true unless they
    say otherwise): a flash that runs the real firmware on a simulated plug, from littlefs, as
    a deployed plug does."""
    files = {"boot.py": os.path.join(REPO, "firmware", "boot.py"),
             "main.py": os.path.join(REPO, "firmware", "main.py"),
             "config.json": config_path,
             "sim.json": json.dumps(dict({"repl": True}, **(sim or {}))).encode(),
             "lib/umqtt/simple.py": os.path.join(REPO, ".mplib", "umqtt", "simple.py")}
    lib = os.path.join(REPO, "lib")
    for package in ("wattnode", "wattsim"):
        for root, _, names in os.walk(os.path.join(lib, package)):
            for name in names:
                if name.endswith(".py"):
                    local = os.path.join(root, name)
                    files["lib/" + os.path.relpath(local, lib)] = local
    with open(os.path.join(REPO, "boards", board + ".json")) as f:
        spec = json.load(f)
    spec["hal"] = "sim"
    files["board.json"] = json.dumps(spec).encode()
    return files


class Terminal:
    """The port as a person's terminal (or mpremote's serial line) sees it: raw bytes."""

    def __init__(self, port):
        self.fd = os.open(port, os.O_RDWR | os.O_NOCTTY)
        tty.setraw(self.fd)
        self.seen = bytearray()

    def write(self, data):
        os.write(self.fd, data)

    def expect(self, text, timeout_s):
        """Read until `text` (bytes) arrives (in what an earlier expect() left, or later): the
        bytes up to and including it. AssertionError if it does not come within timeout_s."""
        deadline = time.monotonic() + timeout_s
        while True:
            at = self.seen.find(text)
            if at >= 0:
                end = at + len(text)
                got, self.seen = bytes(self.seen[:end]), self.seen[end:]
                return got
            left = deadline - time.monotonic()
            if left <= 0:
                seen = bytes(self.seen).decode("utf-8", "replace")
                raise AssertionError("the board did not print %r within %s s; it printed:\n%s"
                                     % (text, timeout_s, seen))
            ready, _, _ = select.select([self.fd], [], [], min(left, 0.1))
            if ready:
                self.seen += os.read(self.fd, 4096)

    def close(self):
        os.close(self.fd)


def main():
    p = argparse.ArgumentParser(prog="tools/fakeboard", description=__doc__.split("\n\n")[0])
    p.add_argument("--flash", help="the flash image file (default: a new, blank one)")
    p.add_argument("--put", action="append", default=[], metavar="LOCAL=REMOTE",
                   help="write a local file into the flash before the board starts")
    p.add_argument("--node", metavar="CONFIG",
                   help="put the node (as source) on the flash with a simulated plug and this "
                        "config.json; its \"sim\" object, if any, is the simulation's settings "
                        "(sim.json, as tools/simnode writes it; Ctrl-C hands the node to the "
                        "REPL, as on a plug)")
    args = p.parse_args()
    flash = args.flash or os.path.join(tempfile.mkdtemp(prefix="fakeboard-flash-"), "flash.img")
    files = {}
    if args.node:
        try:
            with open(args.node) as f:
                cfg = json.load(f)
            sim = dict(cfg.pop("sim", {}), repl=True)
        except (OSError, ValueError, AttributeError, TypeError):
            sys.exit("tools/fakeboard: --node takes a config.json holding a JSON object (its "
                     "\"sim\" an object too); %s is not one" % args.node)
        files = firmware_files(args.node, sim=sim)
        files["config.json"] = json.dumps(cfg).encode()
    for item in args.put:
        local, _, remote = item.partition("=")
        if not remote or not os.path.isfile(local):
            sys.exit("tools/fakeboard: --put takes LOCAL=REMOTE with an existing local file, "
                     "not %r" % item)
        files[remote] = local
    board = FakeBoard(flash, files)
    board.start()
    print("fakeboard: %s (flash %s); Ctrl-C stops it" % (board.port, flash), flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGINT, lambda *a: stopped.set())
    signal.signal(signal.SIGTERM, lambda *a: stopped.set())
    stopped.wait()
    board.close()
    if not args.flash:
        shutil.rmtree(os.path.dirname(flash), ignore_errors=True)


if __name__ == "__main__":
    main()
