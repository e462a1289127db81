"""deploy.py - put the node on a plug with mpremote: tools/deploy --port PORT --board NAME --config FILE

1. tools/build compiles the node (build/device/: boot.py, main.py, lib/wattnode/*.mpy);
2. the board file (boards/NAME.json) and your config.json are checked here first, with the
   node's own checks (wattnode.board, wattnode.config): a board that cannot meter or a config
   with problems stops the deploy, with the reasons, before anything touches the plug;
3. every file is copied with `mpremote connect PORT cp`, one line of progress per file
   (board.json and config.json go to the flash root, the library to /lib);
4. the plug is reset. --dry-run does 1 and 2 and prints the plan.
umqtt.simple is frozen into the ESP32 MicroPython firmware, so it is not copied.
"""

import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "lib"))

from wattnode import board as boardfile, config  # noqa: E402  (the node's own checks)


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
    config.load(config_path, problems)
    files = [(board_path, ":board.json"), (config_path, ":config.json")]
    device = os.path.join(REPO, "build", "device")
    for root, _, names in sorted(os.walk(device)):
        for name in sorted(names):
            local = os.path.join(root, name)
            files.append((local, ":" + os.path.relpath(local, device)))
    return files, problems


def main():
    p = argparse.ArgumentParser(prog="tools/deploy", description=__doc__.split("\n\n")[0])
    p.add_argument("--port", required=True, help="serial port, e.g. /dev/ttyUSB0 (or mpremote's a0)")
    p.add_argument("--board", required=True, help="a board file name from boards/")
    p.add_argument("--config", required=True, help="the plug's config.json")
    p.add_argument("--dry-run", action="store_true", help="check and print the plan only")
    args = p.parse_args()
    subprocess.run([os.path.join(REPO, "tools", "build")], check=True)
    files, problems = plan(args.board, args.config)
    if problems:
        sys.exit("deploy: not deploying:\n  " + "\n  ".join(problems))
    dirs = sorted({os.path.dirname(dst[1:]) for _, dst in files if os.path.dirname(dst[1:])})
    print("deploy: %d files to %s%s" % (len(files), args.port, " (dry run)" if args.dry_run else ""))
    for d in dirs:
        if not args.dry_run:
            subprocess.run(["mpremote", "connect", args.port, "fs", "mkdir", ":" + d],
                           capture_output=True)  # "exists" is fine
    for i, (src, dst) in enumerate(files, 1):
        print("  [%2d/%d] %s" % (i, len(files), dst[1:]), flush=True)
        if not args.dry_run:
            subprocess.run(["mpremote", "connect", args.port, "fs", "cp", src, dst], check=True,
                           stdout=subprocess.DEVNULL)
    if not args.dry_run:
        subprocess.run(["mpremote", "connect", args.port, "reset"], check=True)
        print("deploy: done; the plug is restarting. Watch it with:\n  mpremote connect %s exec "
              "\"from wattnode import repl; repl.status()\"" % args.port)


if __name__ == "__main__":
    main()
