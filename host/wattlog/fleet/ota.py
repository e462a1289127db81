"""ota.py - `wattlog ota NODE... | --all [--parallel N]`: send a build of the node to plugs over
MQTT and wait until each has confirmed it (or rolled back), one line per plug at the end.
(About 390 lines, one concern: an update of a fleet as the operator sees it, its manifest and
serials, the plugs' answers, the progress and the table.)

The plug's side, the topics and the manifest are described in lib/wattnode/ota/. Here:
- the build is a folder laid out as tools/build's build/device: lib/wattnode/... (every file is
  sent, as "wattnode/...") and `version` (one line; else the version of lib/wattnode here);
- each plug's manifest is authenticated with its own key, nodes/<node>/ota.key in the
  provision directory (HMAC-SHA256 over the manifest's JSON bytes);
- each manifest carries a serial the plug must find above the last one it accepted, so a
  captured manifest cannot be replayed (next_serial()): max(the plug's last serial + 1, the
  seconds since 2020-01-01). The counter (nodes/<node>/ota.serial, beside ota.key, replaced
  atomically before the manifest is sent) keeps serials rising when the operator's clock
  goes back (a Pi without a clock battery boots with the time it last saved); the clock keeps
  them above what the plug has seen when the counter is lost or stale (the provision
  directory restored from a backup, or a second copy of it on another machine), where a
  counter alone would hand out serials the plug has seen and every update would be refused.
  Seconds since 2020 stay below 2**30 (a small int on a 32-bit plug) until 2054. A downgrade
  on purpose is just another update: the older build gets a new serial. A plug that still
  refuses ("its serial N is not above M") names its own last serial M: writing M into
  ota.serial moves the counter past it;
- the plug drives the transfer: it asks for (file, offset, n, k) on ota/req and this answers
  with up to k chunks; a plug that stops asking for TRANSFER_TIMEOUT_S has failed;
- the plug's ota/status says what happened (receiving, refused, switching, confirmed, rolled
  back); a message counts when it names this update's id (random per update), so a retained
  one from an earlier update does not, and one the plug published while the tool was
  reconnecting does, when it comes back with the subscription; a rollback's reason says the
  slots it lost ("lost");
- a plug hears a manifest only while it is connected (its session is clean: the broker keeps
  nothing for it while it is away), so one that was away when the manifest went out (a power
  cut, a reconnect) gets it again when it says "online" on its status topic, until it has
  answered (it subscribes before it says "online"). One that took the manifest before it
  went away resumes it from its flash and takes the same manifest again as "carry on". A plug
  that gives no answer in ANSWER_TIMEOUT_S fails with that reason, and that it is offline
  when its status topic says so (retained: known from the start);
- its own broker identity: the broker ties each client id to its user name
  (use_username_as_clientid, provision.py), so two clients of one user take each other's
  place; `wattlog plug` and the HTTP API's switching log in as wattlog-operator, and each
  `wattlog ota` as one of the update tool's logins, wattlog-operator-ota1..8 (provision.py
  makes them with the operator's password), the first no other `wattlog ota` holds (a lock
  file in the provision directory, held while it runs). So an operator's login beside an
  update, and a second update of other plugs, do not cut it off. A broker provisioned before
  those logins existed refuses them: the tool then says so and logs in as the operator
  itself. Whatever cuts the connection (a broker restart, a takeover), paho reconnects and
  the tool subscribes again on every connection; a plug's request lost meanwhile is asked
  again (lib/wattnode/ota/), and its ota/status, retained, comes back with the
  subscription (a retained status counts when it names this update's id);
- one MQTT connection for every plug of a run: --parallel N plugs at a time (default 1), and
  no new plug is started once one has failed, so a bad build stops at the first plug it
  breaks. In a run of more than one plug, one whose status topic says "offline" (retained:
  known as the tool connects) is not started ("offline, not started", at once: it neither
  waits ANSWER_TIMEOUT_S nor holds the plugs after it back) and does not stop the others;
  the exit status still says not every plug was updated.
"""

import fcntl
import hashlib
import hmac
import json
import os
import queue
import secrets
import struct
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from wattlog.fleet.provision import OPERATOR, OTA_USERS
from wattlog.fleet.session import Session, SessionError
from wattlog.mqtt import parse_broker, with_user
from wattlog.store import durable
from wattnode.wire import EPOCH_UNIX

TRANSFER_TIMEOUT_S = 60.0   # a plug that has not asked for a chunk this long has failed
ANSWER_TIMEOUT_S = 30.0     # for the plug's first answer to the manifest
REPORT_S = 120.0            # after the trial: a rollback's drain, reboot and reconnect
TRIAL_S = 120               # the trial a new version runs, its readings acknowledged
READY_S = 10.0              # for the broker to take the login and the subscriptions
OFFLINE = "offline, not started"
_CHUNK_HDR = struct.Struct("<HI")


class OtaError(Exception):
    pass


def load_build(folder):
    """(version, [(path, bytes)]) of a build folder (build/device)."""
    root = os.path.join(folder, "lib")
    files = []
    for d, _, names in sorted(os.walk(os.path.join(root, "wattnode"))):
        for name in sorted(names):
            path = os.path.join(d, name)
            with open(path, "rb") as f:
                files.append((os.path.relpath(path, root).replace(os.sep, "/"), f.read()))
    if not files:
        raise OtaError("%s holds no lib/wattnode: run tools/build, or give --build a folder "
                       "it made" % folder)
    try:
        with open(os.path.join(folder, "version")) as f:
            version = f.read().strip()
    except FileNotFoundError:
        from wattnode import __version__ as version
    return version, files


def serial_file(directory, node):
    return os.path.join(directory, "nodes", node, "ota.serial")


def next_serial(directory, node, now_s=None):
    """The serial for node's next manifest, kept (atomically) in the provision directory
    before it is used: max(last + 1, seconds since 2020)."""
    path = serial_file(directory, node)
    try:
        with open(path) as f:
            last = int(f.read())
    except FileNotFoundError:
        last = 0
    except (OSError, ValueError) as e:
        raise OtaError("%s is unreadable (%s): remove it (the next serial then comes from "
                       "the clock)" % (path, getattr(e, "strerror", None) or e)) from None
    serial = max(last + 1, int(time.time() if now_s is None else now_s) - EPOCH_UNIX)
    try:
        durable.write_bytes(path, b"%d\n" % serial, mode=0o600)
    except OSError as e:
        raise OtaError("cannot write %s (%s): no update is sent without its serial kept"
                       % (path, e.strerror)) from None
    return serial


def manifest(node, key_hex, version, files, serial, trial_s=TRIAL_S, uid=None):
    """The ota/manifest message for one plug, and its id."""
    uid = uid or secrets.token_hex(4)
    body = json.dumps({"id": uid, "node": node, "serial": serial, "version": version,
                       "trial_s": trial_s,
                       "total": sum(len(c) for _, c in files),
                       "files": [[p, len(c), hashlib.sha256(c).hexdigest()] for p, c in files]},
                      separators=(",", ":")).encode()
    mac = hmac.new(bytes.fromhex(key_hex), body, hashlib.sha256).hexdigest().encode()
    return mac + b"\n" + body, uid


def take_login(directory, url):
    """(broker URL, lock) for this run: with the operator's URL, the first of the update
    tool's logins (OTA_USERS) that no other `wattlog ota` holds, kept by an exclusive lock on
    <directory>/.ota-login-N.lock until the lock file closes (the process ends); any other
    user's URL as it is (lock None)."""
    if parse_broker(url)[2] != OPERATOR:
        return url, None
    for i, user in enumerate(OTA_USERS):
        path = os.path.join(directory, ".ota-login-%d.lock" % (i + 1))
        try:
            lock = open(os.open(path, os.O_RDWR | os.O_CREAT, 0o600), "r+b")
        except OSError as e:
            raise OtaError("cannot open %s (%s): `wattlog ota` needs to write the provision "
                           "directory" % (path, e.strerror)) from None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        return with_user(url, user), lock
    raise OtaError("%d `wattlog ota` run already, each with one of the update tool's %d broker "
                   "logins: wait for one to end" % (len(OTA_USERS), len(OTA_USERS)))


class Fleet:
    """One operator connection; messages routed to each plug's queue by topic."""

    def __init__(self, broker_url, password, ca, base, fallback_url=None, warn=None):
        """fallback_url: the login to use instead when the broker refuses broker_url's (a
        broker provisioned before the update tool had logins of its own); warn(text) says
        so."""
        self.base = base
        self.queues = {}
        self.online = {}  # node: its status topic says "online" (False: "offline")
        try:
            self._connect(broker_url, password, ca)
        except SessionError as e:
            if fallback_url is None or e.kind != "login":
                raise OtaError(str(e)) from None
            if warn is not None:
                warn("wattlog ota: the broker refused the update tool's login %s (provisioned "
                     "by an older wattlog? run `wattlog provision` again and give mosquitto its "
                     "new passwd and acl); logging in as %s, whose other logins (wattlog plug, "
                     "the dashboard's switches) interrupt this update for a moment"
                     % (parse_broker(broker_url)[2], parse_broker(fallback_url)[2]))
            try:
                self._connect(fallback_url, password, ca)
            except SessionError as e:
                raise OtaError(str(e)) from None

    def _connect(self, broker_url, password, ca):
        """The operator's session (session.py), subscribed on every connection (paho
        reconnects by itself): the plugs' status first, then what the updates need; once the
        second SUBACK is in, every plug's retained status is known."""
        self.session = Session(broker_url, "wattlog-ota-%d" % os.getpid(), password, ca,
                               READY_S, on_message=self._route)
        self.session.open()
        try:
            self.session.subscribe([("%s/+/status" % self.base, 1)])
            self.session.subscribe([("%s/+/%s" % (self.base, t), 1)
                                    for t in ("ota/req", "ota/status")])
        except SessionError:
            self.close()
            raise

    def _route(self, topic, payload, retain):
        parts = topic.split("/")
        if len(parts) < 3:
            return
        topic = "/".join(parts[2:])
        if topic == "status":  # retained too: it says whether the plug is online now
            self.online[parts[1]] = payload == b"online"
        q = self.queues.get(parts[1])
        # a retained ota/status counts when it names this update (update() checks the id):
        # after a reconnect it is the one the plug published meanwhile
        if q is not None and (not retain or topic == "ota/status"):
            q.put((topic, payload))

    def close(self):
        self.session.close()

    def update(self, node, key_hex, serial, version, files, trial_s, progress):
        """Update one plug with a manifest of this serial: a result dict (node, old, new,
        result, reason, bytes, seconds)."""
        q = self.queues[node] = queue.Queue()
        msg, uid = manifest(node, key_hex, version, files, serial, trial_s)
        t0 = time.monotonic()
        out = {"node": node, "old": "?", "new": version, "result": "failed", "reason": "",
               "bytes": len(msg), "seconds": 0.0}
        base = "%s/%s/" % (self.base, node)
        self.session.send(base + "ota/manifest", msg)
        total = sum(len(c) for _, c in files)
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        shown = -1
        answered = False
        try:
            while True:
                try:
                    topic, payload = q.get(timeout=max(0.1, deadline - time.monotonic()))
                except queue.Empty:
                    out["reason"] = self._silence(node, answered, shown)
                    return out
                if topic == "status":
                    if payload == b"online" and not answered:  # back: it missed the manifest
                        self.session.send(base + "ota/manifest", msg)
                        out["bytes"] += len(msg)
                        deadline = time.monotonic() + ANSWER_TIMEOUT_S
                    continue
                try:
                    m = json.loads(payload)
                    if not isinstance(m, dict) or m.get("id") != uid:
                        continue
                except ValueError:
                    continue
                answered = True
                if topic == "ota/req":
                    out["bytes"] += self._answer(base, files, m)
                    deadline = time.monotonic() + TRANSFER_TIMEOUT_S
                    done = sum(len(c) for _, c in files[:m.get("f", 0)]) + m.get("o", 0)
                    pct = done * 100 // max(total, 1)
                    if pct // 10 != shown // 10:
                        shown = pct
                        progress(node, done, total)
                    continue
                state = m.get("state")
                if isinstance(m.get("heap_max"), int):
                    out["heap_max"] = max(out.get("heap_max", 0), m["heap_max"])
                if m.get("running") and out["old"] == "?":
                    out["old"] = m["running"]
                if state == "receiving":
                    deadline = time.monotonic() + TRANSFER_TIMEOUT_S
                elif state == "switching":
                    progress(node, total, total)
                    shown = 100
                    # the trial, then a rollback's drain (node.DRAIN_MS), reboot and report
                    deadline = time.monotonic() + trial_s + REPORT_S
                elif state == "confirmed":
                    out["result"] = "confirmed"
                    return out
                elif state in ("refused", "rolled back"):
                    out["result"] = state
                    out["reason"] = m.get("reason") or ""
                    return out
        finally:
            out["seconds"] = round(time.monotonic() - t0, 1)
            del self.queues[node]

    def _silence(self, node, answered, shown):
        """Why an update ended without a word from the plug in time, in words."""
        if not answered:
            why = "no answer from the plug in %d s" % ANSWER_TIMEOUT_S
        elif shown < 100:
            why = "the plug stopped asking for chunks"
        else:
            why = "no confirmation in time"
        if self.online.get(node) is False:
            why += " (it is offline: its status topic says so)"
        return why

    def _answer(self, base, files, m):
        """The chunks a request asks for; bytes sent."""
        try:
            fi, off, n, k = int(m["f"]), int(m["o"]), int(m["n"]), int(m["k"])
        except (KeyError, TypeError, ValueError):
            return 0
        if not 0 <= fi < len(files) or not (0 < n <= 65536 and 0 < k <= 64):
            return 0
        content = files[fi][1]
        sent = 0
        for i in range(k):
            o = off + i * n
            if o >= len(content):
                break
            data = _CHUNK_HDR.pack(fi, o) + content[o:o + n]
            self.session.send(base + "ota/chunk", data)
            sent += len(data)
        return sent


def run(nodes, keys, serials, build, broker_url, password, ca=None, base="wattlog", parallel=1,
        trial_s=TRIAL_S, out=sys.stderr, directory=None):
    """Update `nodes` ({node: key hex} in keys; serials(node): the serial of its manifest,
    next_serial()), `parallel` at a time, none started after a failure. Returns the result
    dicts, in the order of `nodes` (skipped ones "not started", offline ones OFFLINE).
    directory: the provision directory, where the update tool's login is taken (take_login)."""
    version, files = load_build(build)
    url, login = take_login(directory, broker_url) if directory else (broker_url, None)
    lock = threading.Lock()
    failed = threading.Event()

    def progress(node, done, total):
        width = 30
        fill = done * width // max(total, 1)
        with lock:
            print("%-20s [%s%s] %3d%% %d/%d bytes" % (node, "#" * fill, "." * (width - fill),
                                                      done * 100 // max(total, 1), done, total),
                  file=out, flush=True)

    def warn(text):
        with lock:
            print(text, file=out, flush=True)
    try:
        fleet = Fleet(url, password, ca, base, broker_url if url != broker_url else None, warn)
    except OtaError:
        if login is not None:
            login.close()
        raise
    results = {}

    def one(node):
        if failed.is_set():
            results[node] = {"node": node, "old": "?", "new": version, "result": "not started",
                             "reason": "an earlier plug failed", "bytes": 0, "seconds": 0.0}
            return
        if len(nodes) > 1 and fleet.online.get(node) is False:
            results[node] = {"node": node, "old": "?", "new": version, "result": OFFLINE,
                             "reason": "", "bytes": 0, "seconds": 0.0}
            return
        r = fleet.update(node, keys[node], serials(node), version, files, trial_s, progress)
        results[node] = r
        if r["result"] != "confirmed":
            failed.set()
    try:
        with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            list(pool.map(one, nodes))
    finally:
        fleet.close()
        if login is not None:
            login.close()
    return [results[n] for n in nodes]


def table(results):
    """The result table: plug, old -> new version, result, bytes sent, seconds, and the plug's
    heap high-water mark during the update (KiB; "-" when it did not say)."""
    rows = [("plug", "version", "result", "bytes", "time s", "heap KiB")]
    for r in results:
        result = r["result"] + (": " + r["reason"] if r["reason"] else "")
        heap = "%.1f" % (r["heap_max"] / 1024) if r.get("heap_max") else "-"
        rows.append((r["node"], "%s -> %s" % (r["old"], r["new"]), result, str(r["bytes"]),
                     "%.1f" % r["seconds"], heap))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)
