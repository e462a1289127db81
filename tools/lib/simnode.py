"""simnode.py - run the real node firmware on the MicroPython unix port with a simulated plug.

    tools/simnode --id ID --broker HOST:PORT[,HOST:PORT...] [--node-config FILE] [--profile NAME]
                  [--interval S] [--speed X|max] [--start TIME] [--then-realtime] [--flash DIR]
                  [--board NAME [--faults JSON]] [--ring-kib K] [--spill-kib K]

It writes into a flash folder (a temporary one unless --flash names one) the plug's
config.json and board.json (boards/sim.json, or the --board named, its "hal" set to "sim"),
and sim.json, the simulated world (lib/wattsim: load profile, clock, chip faults, and the
plug's MAC, its own: mac_for(), from its node id). Then it runs firmware/boot.py and
firmware/main.py there exactly as a plug does, with lib/ (the node and the simulator) and the
MicroPython libraries on MICROPYPATH, after plugging the simulator into the node
(wattsim.install(): the board's "hal": "sim" and "chip": "sim" resolve to it).

With --speed X the node's clock runs X times faster than real time from --start (a time in
the past); --speed max runs it as fast as the loop goes (waiting only while half the ring
awaits the collector's ack: lib/wattsim/clock.py), for runs that need no real-time interplay.
The node stops by itself when its clock reaches real time (after sending what it holds), or
carries on in real time with --then-realtime. SIGINT or SIGTERM stops the node cleanly (it
says "offline" and prints its summary line: "summary " and node.status() as JSON; a crash
prints "crash " and the same after its crash text). When the firmware resets itself (after a
crash) it is started again, as a plug reboots, at the node time the run has reached;
--power-cut starts it as after a power cut (its RTC memory gone).

--start takes what the wattlog CLI takes (wattlog/times.py): now-24h, -24h, unix seconds, ISO
8601. --faults names faults of the simulated chip (lib/wattsim/chips.py FAULTS), so it
needs a --board whose chip is simulated (boards/sim.json measures its profile exactly). A bad
argument ends with one line saying what is wrong, never a traceback.

--node-config is the config.json that `wattlog provision` made for the plug
(nodes/<node>/config.json): it is the plug's config, as it would be on a plug's flash (its
broker user and password, update key, Wi-Fi, Broadlink mode, ...; with TLS, the ca.crt beside
it goes on the flash too), except what the simulation decides: the broker's address and port
(--broker; several, comma-separated, make broker.host their list), the slot length (--interval) and the time server (only --ntp-after simulates one).
A password or key is therefore never an argument, where `ps` would show it. The config.json
in the flash folder holds it too, so it is created 0600. --config is merged in last.

Each run powers the plug on: machine.reset_cause() reads a power-on at its first boot, and
what the simulated board says at each later one (lib/wattsim/rom/machine.py).
"""

import argparse
import ctypes
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from wattlog.store import durable
from wattlog.times import parse_time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.append(os.path.join(REPO, "lib"))  # the simulator's settings and names, read here too

from wattsim.board import CLOCK_FILE, RESET_CAUSE_FILE, RESET_EXIT, SETTINGS_FILE  # noqa: E402
from wattsim.chips import FAULTS  # noqa: E402
from wattsim.clock import FREE  # noqa: E402

BOARDS = os.path.join(REPO, "boards")
MAX_RESETS = 10


class Parser(argparse.ArgumentParser):
    def error(self, message):
        """One line, not the usage block: what is wrong, and where the rest is."""
        self.exit(2, "%s: %s; see %s --help\n" % (self.prog, message, self.prog))


def json_object(text):
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError("%r is not JSON (%s)" % (text, e)) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("%r is not a JSON object {...}" % text)
    return value


_TAKES = {int: "a whole number >= 0", bool: "true or false",
          dict: '{"power": 1.03, ...} (factors for power, voltage, current)'}


def _fault_fits(kind, value):
    if kind is bool:
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, kind):
        return False
    if kind is int:
        return value >= 0
    return all(k in ("power", "voltage", "current") and isinstance(f, (int, float))
               and not isinstance(f, bool) and f > 0 for k, f in value.items())


def faults(text):
    """The simulated chip's faults: known keys only, each of its type."""
    value = json_object(text)
    for key, v in value.items():
        kind = FAULTS.get(key)
        if kind is None:
            raise argparse.ArgumentTypeError("unknown fault %r; the faults are %s"
                                             % (key, ", ".join(sorted(FAULTS))))
        if not _fault_fits(kind, v):
            raise argparse.ArgumentTypeError("fault %r takes %s, not %s"
                                             % (key, _TAKES[kind], json.dumps(v)))
    return value


def speed(text):
    """A whole number >= 1, or max (free-running)."""
    if text == FREE:
        return FREE
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError("--speed takes a whole number >= 1 or %s, not %r"
                                         % (FREE, text))
    return int(text)


def board_name(name):
    names = sorted(f[:-5] for f in os.listdir(BOARDS) if f.endswith(".json"))
    if name not in names:
        raise argparse.ArgumentTypeError("no board %r in %s; the boards are %s"
                                         % (name, BOARDS, ", ".join(names)))
    return name


def broker_addr(text):
    """[(host, port)] of --broker: HOST:PORT, or several, comma-separated (a broker cluster's
    nodes: the plug's broker.host becomes their list, tried in turn)."""
    addrs = []
    for one in text.split(","):
        host, _, port = one.rpartition(":")
        if not host or not port.isdigit():
            raise argparse.ArgumentTypeError("--broker takes HOST:PORT[,HOST:PORT...], e.g. "
                                             "127.0.0.1:1883")
        addrs.append((host, int(port)))
    return addrs


def node_config(path):
    """A provisioned node config.json as a dict, with the path it came from (never printed:
    it holds a password)."""
    try:
        with open(path) as f:
            cfg = json.load(f)
        if not isinstance(cfg["broker"]["user"], str):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError):
        raise argparse.ArgumentTypeError(
            "%s is not a node config made by wattlog provision (nodes/<node>/config.json)"
            % path) from None
    return dict(cfg, _path=path)


def parser():
    p = Parser(prog="tools/simnode", description=__doc__.split("\n\n")[0])
    p.add_argument("--id", required=True, help="node id, [a-z0-9_-]{1,32}")
    p.add_argument("--broker", required=True, type=broker_addr, help="HOST:PORT[,HOST:PORT...]")
    p.add_argument("--node-config", metavar="FILE", type=node_config,
                   help="the node's provisioned config.json: the plug's config (its broker login, "
                        "update key, Broadlink mode, ...)")
    p.add_argument("--profile", default="constant",
                   help="washer, dishwasher, fridge, heatpump, tv (each may take start times, UTC: "
                        "washer:0930+1400), constant or constant:WATTS (default constant)")
    p.add_argument("--interval", type=int, default=10, help="slot length in seconds (default 10)")
    p.add_argument("--speed", type=speed, default=1,
                   help="clock speed factor (default 1), or max: as fast as the loop goes")
    p.add_argument("--start", type=parse_time,
                   help="node clock start: now-24h, -24h, unix seconds or ISO 8601")
    p.add_argument("--then-realtime", action="store_true",
                   help="after catching up with real time, carry on in real time")
    p.add_argument("--batch-max", type=int, help="records per batch")
    p.add_argument("--ring-kib", type=int, help="ring size in KiB (default: the board's)")
    p.add_argument("--spill-kib", type=int,
                   help="flash for the spill in KiB, a multiple of 4 (default: the board's)")
    p.add_argument("--flash", help="folder to use as the node's flash (default: a temporary one)")
    p.add_argument("--heap-kib", type=int, help="limit the MicroPython heap (micropython -X heapsize)")
    p.add_argument("--ntp-after", type=int, metavar="S",
                   help="start with the RTC unset, as after a power cut; the LAN's NTP server "
                        "answers after S seconds of node time")
    p.add_argument("--rtc-unset", action="store_true",
                   help="start with the RTC unset and no NTP server: the time must come from "
                        "the collector (use without --start: the collector's clock is real)")
    p.add_argument("--crash-after", type=int, metavar="S",
                   help="make the node's loop raise after S seconds of node time (crash handling)")
    p.add_argument("--ack-patience", type=int, metavar="S",
                   help="under --speed max, how long the clock waits for a silent collector's "
                        "ack before it takes it for away and runs on into the spill (default 30)")
    p.add_argument("--config", default={}, type=json_object,
                   help="JSON merged into config.json as it is, unchecked (to test bad configs)")
    p.add_argument("--mpy", action="store_true",
                   help="run the .mpy files tools/build made (build/mpy), as a plug runs them")
    p.add_argument("--power-cut", action="store_true",
                   help="start as after a power cut: RTC memory in the flash folder is lost")
    p.add_argument("--board", default="sim", type=board_name,
                   help="a board file name from boards/ (default sim); its chip is simulated")
    p.add_argument("--wifi", metavar="SSID[,SSID]", type=lambda t: t.split(","),
                   help="simulate the plug's Wi-Fi: the networks in range; it joins only one "
                        "its config names (--node-config's wifi), and says at every boot when "
                        "it names none (default: the host's network, always up)")
    p.add_argument("--rssi", type=int, metavar="DBM",
                   help="the Wi-Fi signal the plug reports, in dBm (default -60)")
    p.add_argument("--faults", default={}, type=faults,
                   help='simulated chip faults as JSON, e.g. \'{"noise_every": 5}\' (%s)'
                        % ", ".join(sorted(FAULTS)))
    return p


def parse(argv=None):
    p = parser()
    args = p.parse_args(argv)
    if args.faults and args.board == "sim":
        p.error("--faults needs a board whose chip is simulated, e.g. --board devkit-cse7766 "
                "(the sim board measures its profile exactly, without a chip)")
    return args


def mac_for(node_id):
    """A simulated plug's MAC, as 12 hex digits: 02 (locally administered), then the first
    five bytes of the sha256 of its node id: each plug has its own, as real plugs do."""
    return "02" + hashlib.sha256(node_id.encode()).hexdigest()[:10]


def write_flash(flash, args):
    cfg = dict(args.node_config or {"broker": {"user": None, "password": None}})
    path = cfg.pop("_path", None)
    cfg.pop("ntp_host", None)  # the simulated world's: --ntp-after
    cfg.update({"node_id": args.id, "interval_s": args.interval, "ota_key": cfg.get("ota_key"),
                "broker": dict(cfg["broker"], host=args.broker[0][0], port=args.broker[0][1])})
    if len(args.broker) > 1:
        cfg["broker"]["host"] = ["%s:%d" % addr for addr in args.broker]
    ca = cfg["broker"].get("ca")
    if ca and path:  # provisioned with TLS: the plug holds the CA beside its config
        shutil.copy(os.path.join(os.path.dirname(path), "..", "..", ca), os.path.join(flash, ca))
    sim = {"profile": args.profile, "speed": args.speed, "start": args.start,
           "then_realtime": args.then_realtime}
    if args.batch_max:
        cfg["batch_max"] = args.batch_max
    for flag, key in (("crash_after", "crash_after_s"), ("ack_patience", "ack_patience_s"),
                      ("ntp_after", "ntp_after_s"),
                      ("faults", "faults"), ("rssi", "rssi_dbm"), ("wifi", "wifi")):
        if getattr(args, flag) is not None:  # given: the simulator's setting
            sim[key] = getattr(args, flag)
    if args.ntp_after is not None:
        cfg["ntp_host"] = "ntp.lan"
    if args.rtc_unset:
        sim["ntp_after_s"] = 10 ** 9  # unset RTC; no NTP server is configured
    sim["mac"] = mac_for(args.id)
    cfg.update(args.config)
    durable.write_json(os.path.join(flash, "config.json"), cfg, mode=0o600)  # holds a password
    durable.write_json(os.path.join(flash, SETTINGS_FILE), sim)
    with open(os.path.join(BOARDS, args.board + ".json")) as f:
        board = json.load(f)
    board["hal"] = "sim"  # any board runs on the simulator: pins, UART and chip simulated
    if args.ring_kib:
        board["ring_kib"] = args.ring_kib
    if args.spill_kib is not None:
        board["spill_kib"] = args.spill_kib
    with open(os.path.join(flash, "board.json"), "w") as f:
        json.dump(board, f, indent=1)


def resume_clock(flash, args, launched):
    """A reset does not stop the world's clock: the node boots again at the node time the run
    has reached (the simulated clock counts from sim.json's start, so move it on): by the wall
    clock for a paced run (never past the present, where a paced clock stops or goes on in
    real time), where the firmware left it (CLOCK_FILE) for a free-running one."""
    if args.speed == FREE:
        try:
            with open(os.path.join(flash, CLOCK_FILE)) as f:
                start = int(f.read())
        except (OSError, ValueError):
            return  # it never got to reset itself: nothing to resume from
    else:
        start = min(args.start + int((time.time() - launched) * args.speed), int(time.time()))
    path = os.path.join(flash, SETTINGS_FILE)
    with open(path) as f:
        sim = json.load(f)
    sim["start"] = start
    durable.write_json(path, sim)


def _die_with_parent():
    """In the child: if this wrapper dies, even by SIGKILL, the node dies too (Linux)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def main():
    args = parse()
    flash = args.flash or tempfile.mkdtemp(prefix="wattnode-%s-" % args.id)
    os.makedirs(flash, exist_ok=True)
    write_flash(flash, args)
    fw = os.path.join(REPO, "firmware")
    # boot.py first: it chooses the node's version (an update's, ota/<version> on the flash)
    # before anything imports wattnode; the simulator is plugged into that version
    launch = ("exec(open(%r).read()); import wattsim; wattsim.install(); exec(open(%r).read())"
              % (os.path.join(fw, "boot.py"), os.path.join(fw, "main.py")))
    # first the simulated board's machine module (lib/wattsim/rom): boot.py reads its reset cause
    libs = [os.path.join(REPO, "lib", "wattsim", "rom")] + (
        [os.path.join(REPO, "build", "mpy")] if args.mpy
        else [os.path.join(REPO, "lib"), os.path.join(REPO, ".mplib")])
    env = dict(os.environ, MICROPYPATH=":".join(libs))
    heap = ["-X", "heapsize=%dK" % args.heap_kib] if args.heap_kib else []
    # this run powers the plug on: its reset cause is a power-on (and its RTC memory is
    # gone, with --power-cut)
    for name in [RESET_CAUSE_FILE] + [".rtc-memory"] * args.power_cut:
        try:
            os.remove(os.path.join(flash, name))
        except FileNotFoundError:
            pass
    stopping = []
    current = []

    def forward(signum, frame):
        stopping.append(signum)
        if current and current[0].poll() is None:
            current[0].send_signal(signal.SIGINT)  # the unix port turns SIGINT into KeyboardInterrupt
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    launched = time.time()
    for boot in range(MAX_RESETS + 1):
        if boot and args.start is not None:
            resume_clock(flash, args, launched)
        # its own process group: a Ctrl-C reaches it once, through forward(), not twice
        proc = subprocess.Popen(["micropython"] + heap + ["-c", launch], cwd=flash, env=env,
                                start_new_session=True, preexec_fn=_die_with_parent)
        current[:] = [proc]
        rc = proc.wait()
        if rc != RESET_EXIT or stopping:
            break
        print("simnode: the node reset itself; booting it again", flush=True)
    if not args.flash:
        shutil.rmtree(flash, ignore_errors=True)
    sys.exit(rc)


if __name__ == "__main__":
    main()
