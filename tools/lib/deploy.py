"""deploy.py - put the node on a plug with mpremote: tools/deploy --port PORT --board NAME --config FILE
                                                                [--broadlink off|read|control]

1. the port is checked first: with no device there it says so in one line, naming the USB
   serial ports that do exist (`mpremote connect list`);
2. tools/build compiles the node (build/device/: boot.py, main.py, lib/wattnode/*.mpy);
3. the board file (boards/NAME.json) and your config.json are checked here, with the node's
   own checks (wattnode.board, wattnode.config): a board that cannot meter, a config with
   problems or without a Wi-Fi (wifi.ssid: the plug could never be reached but over USB)
   stops the deploy, with the reasons, before anything touches the plug;
4. one mpremote session (its soft reset stops a running node) makes every folder the files go
   to, parents first (a freshly flashed ESP32's littlefs holds only boot.py: MicroPython's
   inisetup.py), copies each file, one line of progress per file (mpremote's cp skips a file
   whose hash matches), then resets the plug. board.json and config.json go to the flash
   root, the library to /lib.
Any failure ends the deploy with one line: the step or file, and what the plug or mpremote
answered (a full flash, a missing folder), with exit status 1. --dry-run does 2 and 3 and
prints the plan. umqtt.simple is frozen into the ESP32 MicroPython firmware: not copied.
"""

import argparse
import grp
import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "lib"))

from wattnode import board as boardfile, config  # noqa: E402  (the node's own checks)

# mpremote's shortcuts: a0 = /dev/ttyACM0, u0 = /dev/ttyUSB0, c0 = COM0
_SHORT = {"a": "/dev/ttyACM", "u": "/dev/ttyUSB", "c": "COM"}
# Run on the plug: every folder, parents first; one that is there already is fine (EEXIST).
_MKDIRS = """import os
for d in %r:
    try:
        os.mkdir(d)
    except OSError as e:
        if e.errno != 17:
            raise
"""
STATUS = ('mpremote connect %s resume exec "from wattnode import repl; repl.status()" '
          'exec --no-follow "repl.start()"')


def plan(board_name, config_path):
    """[(local file, path on the plug)] and the problems found, in words."""
    problems = []
    board_path = os.path.join(REPO, "boards", board_name + ".json")
    if not os.path.exists(board_path):
        names = sorted(n[:-5] for n in os.listdir(os.path.join(REPO, "boards")) if n.endswith(".json"))
        return [], ["no board %r; boards/ has %s" % (board_name, ", ".join(names))]
    with open(board_path) as f:
        board = json.load(f)
    board_problems, meter_ok = boardfile.check(board)
    if board.get("hal", "esp32") != "esp32":
        board_problems.append("board %r is for the simulator, not a plug" % board_name)
        meter_ok = False
    if not meter_ok:
        problems.extend(board_problems)
    no_wifi = config.no_wifi(config.load(config_path, problems), config_path)
    if no_wifi:  # such a plug could never be reached again but over USB
        problems.append(no_wifi)
    files = [(board_path, ":board.json"), (config_path, ":config.json")]
    device = os.path.join(REPO, "build", "device")
    for root, _, names in sorted(os.walk(device)):
        for name in sorted(names):
            local = os.path.join(root, name)
            files.append((local, ":" + os.path.relpath(local, device)))
    return files, problems


def with_broadlink(config_path, mode):
    """A copy of config.json with "broadlink" set, in a private temporary folder: created
    0600 (it holds the broker password), gone when the process ends."""
    import atexit
    import shutil
    import tempfile
    try:
        with open(config_path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("deploy: cannot read %s (%s)" % (config_path, e))
    if not isinstance(cfg, dict):
        sys.exit("deploy: %s does not hold a JSON object" % config_path)
    cfg["broadlink"] = mode
    folder = tempfile.mkdtemp(prefix="wattlog-deploy-")
    atexit.register(shutil.rmtree, folder, True)
    path = os.path.join(folder, "config.json")
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        json.dump(cfg, f)
    return path


def folders(files):
    """Every folder the files go to, each after its parent: lib, lib/wattnode, ..."""
    out = set()
    for _, dst in files:
        parts = dst[1:].split("/")[:-1]
        for i in range(1, len(parts) + 1):
            out.add("/".join(parts[:i]))
    return sorted(out, key=lambda d: (d.count("/"), d))


def resolve_port(port):
    m = re.fullmatch(r"([acu])(\d+)", port)
    if m:
        return _SHORT[m.group(1)] + m.group(2)
    return port[len("port:"):] if port.startswith("port:") else port


def usb_serial_ports():
    """["/dev/ttyUSB0 (Silicon Labs CP2102 ...)"] from `mpremote connect list`; built-in UARTs
    (no USB vendor id) are left out: a plug is never on one."""
    done = subprocess.run(["mpremote", "connect", "list"], capture_output=True, text=True,
                          timeout=30)
    ports = []
    for line in done.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] != "0000:0000":
            what = " ".join(f for f in fields[3:] if f != "None")
            ports.append("%s (%s)" % (fields[0], what) if what else fields[0])
    return ports


def port_problem(port):
    """A sentence if no plug can be at port; None if mpremote may try it."""
    if not port.startswith("/dev/"):
        return None  # COM3, rfc2217://, socket://: mpremote says what it finds there
    if not os.path.exists(port):
        ports = usb_serial_ports()
        return ("no device at %s (is the plug connected, with a USB cable that carries data?); "
                % port + ("serial ports here: " + ", ".join(ports) if ports
                          else "no USB serial port is connected"))
    if not os.access(port, os.R_OK | os.W_OK):
        group = grp.getgrgid(os.stat(port).st_gid).gr_name
        return ("%s is there but you may not open it: join its group (sudo usermod -aG %s "
                "$USER, then log in again)" % (port, group))
    return None


def copy(port, files):
    """One mpremote session: folders, files (a progress line each), reset. None, or the
    failure in one line."""
    cmd = ["mpremote", "connect", port, "exec", _MKDIRS % (folders(files),)]
    for src, dst in files:
        cmd += ["+", "fs", "cp", src, dst]
    cmd += ["+", "reset"]
    step = "reaching the plug and making its folders"
    said = []
    done = unchanged = 0
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        line = line.rstrip()
        if line.startswith("cp ") and done < len(files):
            done += 1
            dst = files[done - 1][1][1:]
            step = "copying " + dst
            print("  [%2d/%d] %s" % (done, len(files), dst), flush=True)
        elif line.startswith("Up to date: "):
            unchanged += 1
        elif line:
            said.append(line)
    if proc.wait() != 0:
        answer = said[-1] if said else "mpremote ended with status %d" % proc.returncode
        if answer.startswith("mpremote: "):
            answer = answer[len("mpremote: "):]
        return "%s failed: %s" % (step, answer)
    if unchanged:
        print("deploy: %d of the files were on the plug already, unchanged" % unchanged)
    return None


def main():
    p = argparse.ArgumentParser(prog="tools/deploy", description=__doc__.split("\n\n")[0])
    p.add_argument("--port", required=True,
                   help="serial port, e.g. /dev/ttyUSB0 (or mpremote's u0, a0)")
    p.add_argument("--board", required=True, help="a board file name from boards/")
    p.add_argument("--config", required=True, help="the plug's config.json")
    p.add_argument("--dry-run", action="store_true", help="check and print the plan only")
    p.add_argument("--broadlink", choices=("off", "read", "control"),
                   help="set config.json's broadlink mode on the plug (the SP3S protocol; "
                        "control lets anyone on the LAN switch it)")
    args = p.parse_args()
    if args.broadlink:
        args.config = with_broadlink(args.config, args.broadlink)
    port = resolve_port(args.port)
    if not args.dry_run:
        problem = port_problem(port)
        if problem:
            sys.exit("deploy: " + problem)
    if subprocess.run([os.path.join(REPO, "tools", "build")]).returncode != 0:
        sys.exit("deploy: tools/build failed (see above); nothing was copied")
    files, problems = plan(args.board, args.config)
    if problems:
        sys.exit("deploy: not deploying:\n  " + "\n  ".join(problems))
    print("deploy: %d files to %s%s" % (len(files), port, " (dry run)" if args.dry_run else ""))
    if args.dry_run:
        for i, (_, dst) in enumerate(files, 1):
            print("  [%2d/%d] %s" % (i, len(files), dst[1:]))
        return
    failure = copy(port, files)
    if failure:
        sys.exit("deploy: " + failure)
    print("deploy: done; the plug is restarting. Its output: mpremote connect %s repl "
          "(Ctrl-] leaves it running). Its state:\n  %s" % (port, STATUS % port))


if __name__ == "__main__":
    main()
