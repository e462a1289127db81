"""ota.py - over-the-air updates, the plug's side: take a new build over MQTT, verify it, switch
to it in one atomic step, try it, and confirm it or roll back by itself.

Imported only when an update is under way (a manifest came, a transfer is staged, a version is
on trial, or there is an outcome to report): a plug that is not updating never loads it.

Topics under <base>/<node>/ (ACL: only wattlog-operator publishes the first two; the plug
reads only its own, publishes only its own):
  ota/manifest  operator -> plug   "<hmac hex>\\n<manifest JSON>"
  ota/chunk     operator -> plug   <file index u16 LE><offset u32 LE><up to n bytes>
  ota/req       plug -> operator   {"id", "f": file index, "o": offset, "n": CHUNK, "k": WINDOW}
  ota/status    plug -> operator   retained {"id", "state", "version", "running", "reason",
                                   "done", "total", "heap_max"}; state: receiving, refused,
                                   switching, confirmed, rolled back; heap_max: the most heap
                                   in use (gc.mem_alloc() after gc.collect()) after an OTA
                                   message, in bytes: the whole node's, not only the update's
Every refusal and outcome is also said in one sentence on the log topic.

The manifest (JSON): {"id": 8 hex, "node": node id, "serial": 1..2**30-1, "version": "0.2.0",
"trial_s": 30..3600, "total": bytes, "files": [[path, size, sha256 hex], ...]}. Paths are
inside the wattnode package ("wattnode/node.mpy"). Authenticated by HMAC-SHA256 over the exact
JSON bytes, with the plug's own key (config.json ota_key, 64 hex digits, made by `wattlog
provision`): the broker's ACL already keeps anyone else off the topic; the HMAC also refuses a
manifest the broker was tricked into passing, and one made for another plug ("node"). Chunks
need no MAC: each file's sha256 is in the authenticated manifest, and a file that does not
match it is discarded.
Replay: a genuine manifest stays genuine forever, so the plug keeps the highest serial it has
accepted (ota/serial) and refuses any manifest whose serial is not above it: an old update
replayed (a downgrade to a version with a known flaw, or the same update again) is refused with
a reason, and the running version is untouched. The serial is about replay, not versions: the
operator downgrades on purpose by signing the older version with a newer serial (`wattlog ota`
gives every manifest one, host/wattlog/ota.py says how). It is written (atomically) when a
manifest is accepted, before a byte of the transfer, and neither a reboot, a switch nor a
rollback touches it.

Flow control is the plug's: it asks for WINDOW chunks of CHUNK bytes from (file, offset) and
asks again (from where its flash is) when they have not all come in REQ_RETRY_MS, so a lost
chunk, a reconnect or a reboot only costs a request. No whole file is ever in RAM: each chunk
is appended to the file on the flash and fed to the file's running sha256.

Flash layout (the flash root; boot.py reads the pointer, main.py reports a failed start):
  ota/stage/manifest         the authenticated manifest of the transfer under way
  ota/stage/wattnode/X.part  a file being received; renamed to X once its sha256 matches
  ota/u<id>/                 an installed version (sys.path entry: ota/u<id>/wattnode/...);
                             ota/u<id>/version is its version string, for the reports
  ota/boot                   the pointer: "<current> <previous> <ok|trial> <boots> <trial_s>";
                             "-" is the version installed over USB (/lib); written to
                             ota/boot.tmp and renamed: a power cut leaves the old pointer or
                             the new one, so the plug boots the old version or the new one
  ota/failed                 main.py: why a version on trial failed to start
  ota/result                 an outcome to report once the link is up (JSON, as ota/status)
  ota/serial                 the highest manifest serial accepted (decimal; written to
                             ota/serial.tmp and renamed)
Free flash: the manifest's total plus FLASH_MARGIN must be free before a byte is written.

Trial: after the switch the plug reboots (draining what it holds first, node.reboot()) into the
new version "on trial". It is confirmed (the pointer says ok) once the link is up, a slot has
been sampled and the collector has acknowledged a reading of this boot (ring.first > 0), all
within trial_s; otherwise it rolls back to the previous version. boot.py rolls back a version
on trial that crashed (the crash counter start.py keeps) or failed to start (ota/failed), or
that has booted MAX_TRIAL_BOOTS times without being confirmed. The previous version is kept.
"""

import json
import os
import time
from hashlib import sha256
from binascii import hexlify, unhexlify

from micropython import const

CHUNK = const(1024)          # bytes per chunk: one MQTT message the heap takes easily
WINDOW = const(4)            # chunks asked for at once
REQ_RETRY_MS = const(3000)   # ask again when asked-for chunks have not all come
STALL_MS = const(120000)     # give up a transfer after this long without a byte
FLASH_MARGIN = const(16384)  # bytes left free on the flash after the staged files
MAX_FILES = const(64)
MAX_SIZE = const(1 << 29)    # sizes stay small ints on a 32-bit plug
MAX_SERIAL = const(0x3FFFFFFF)  # the largest small int on a 32-bit plug
DIR = "ota"
STAGE = "ota/stage"
POINTER = "ota/boot"
RESULT = "ota/result"
SERIAL = "ota/serial"
_HDR = const(6)


class Refused(Exception):
    pass


def hmac_sha256(key, msg):
    if len(key) > 64:
        key = sha256(key).digest()
    key = key + bytes(64 - len(key))
    inner = sha256(bytes(b ^ 0x36 for b in key))
    inner.update(msg)
    outer = sha256(bytes(b ^ 0x5C for b in key))
    outer.update(inner.digest())
    return outer.digest()


def _same(a, b):
    """Constant-time comparison of two byte strings."""
    if len(a) != len(b):
        return False
    d = 0
    for i in range(len(a)):
        d |= a[i] ^ b[i]
    return d == 0


def read_pointer():
    """[current, previous, state, boots, trial_s], or None (the USB-installed version)."""
    try:
        with open(POINTER) as f:
            p = f.read().split()
        return [p[0], p[1], p[2], int(p[3]), int(p[4])]
    except (OSError, ValueError, IndexError):
        return None


def write_pointer(cur, prev, state, boots=0, trial_s=0):
    with open(POINTER + ".tmp", "w") as f:
        f.write("%s %s %s %d %d\n" % (cur, prev, state, boots, trial_s))
    os.rename(POINTER + ".tmp", POINTER)


def read_serial():
    """The highest manifest serial this plug has accepted (0: none yet)."""
    try:
        with open(SERIAL) as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0


def write_serial(serial):
    with open(SERIAL + ".tmp", "w") as f:
        f.write("%d\n" % serial)
    os.rename(SERIAL + ".tmp", SERIAL)


def write_result(result):
    with open(RESULT + ".tmp", "w") as f:
        json.dump(result, f)
    os.rename(RESULT + ".tmp", RESULT)


def _exists(path):
    try:
        os.stat(path)
        return True
    except OSError:
        return False


def _makedirs(path):
    part = ""
    for name in path.split("/"):
        part = part + "/" + name if part else name
        if not _exists(part):
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


def flash_free():
    st = os.statvfs(".")
    bsize = st[0] or 1
    return min(st[4], MAX_SIZE // bsize) * bsize


def _path_ok(path):
    if not isinstance(path, str) or not path.startswith("wattnode/") or ".." in path \
            or len(path) > 64 or not (path.endswith(".mpy") or path.endswith(".py")):
        return False
    for c in path:
        if c not in "abcdefghijklmnopqrstuvwxyz0123456789_/.":
            return False
    return True


def parse_manifest(msg, key, node_id):
    """The manifest dict from an ota/manifest message; Refused(reason) if it is not genuine or
    not well-formed."""
    nl = msg.find(b"\n")
    if nl != 64:
        raise Refused("the manifest does not start with its HMAC")
    try:
        mac = unhexlify(msg[:64])
    except ValueError:
        raise Refused("the manifest's HMAC is not hex")
    body = msg[65:]
    if not key:
        raise Refused("this plug has no ota_key in config.json (wattlog provision makes one)")
    if not _same(hmac_sha256(key, body), mac):
        raise Refused("the manifest's HMAC does not match this plug's key (forged or for "
                      "another plug)")
    try:
        m = json.loads(body)
        files, total = m["files"], m["total"]
        uid, version, trial_s = m["id"], m["version"], m["trial_s"]
        node, serial = m["node"], m["serial"]
    except (ValueError, KeyError, TypeError):
        raise Refused("the manifest is not JSON with id, node, serial, version, trial_s, total, "
                      "files")
    if node != node_id:
        raise Refused("the manifest is for %r, not this plug" % (node,))
    if not (isinstance(serial, int) and 0 < serial <= MAX_SERIAL):
        raise Refused("the manifest's serial is not a whole number 1..%d" % MAX_SERIAL)
    if not (isinstance(uid, str) and len(uid) == 8 and all(c in "0123456789abcdef" for c in uid)):
        raise Refused("the manifest's id is not 8 hex digits")
    if not (isinstance(version, str) and 0 < len(version) <= 32):
        raise Refused("the manifest's version is not a short string")
    if not (isinstance(trial_s, int) and 30 <= trial_s <= 3600):
        raise Refused("the manifest's trial_s is not 30..3600")
    if not (isinstance(files, list) and 0 < len(files) <= MAX_FILES):
        raise Refused("the manifest lists no files, or more than %d" % MAX_FILES)
    s = 0
    seen = []
    for f in files:
        if not (isinstance(f, list) and len(f) == 3 and _path_ok(f[0]) and f[0] not in seen
                and isinstance(f[1], int) and 0 <= f[1] < MAX_SIZE and isinstance(f[2], str)
                and len(f[2]) == 64):
            raise Refused("the manifest's file entry %r is not [wattnode/path, size, sha256]"
                          % (f,))
        seen.append(f[0])
        s += f[1]
    if "wattnode/__init__.mpy" not in seen and "wattnode/__init__.py" not in seen:
        raise Refused("the manifest's file set lacks wattnode/__init__")
    if not (isinstance(total, int) and total == s and total < MAX_SIZE):
        raise Refused("the manifest's total %r is not the sum of its files' sizes" % (total,))
    return m


def _claimed(msg):
    """{"id": the id a refused manifest claims} when it has one, so the operator's tool can
    match the refusal to what it sent; None if it has none."""
    try:
        uid = json.loads(msg[65:])["id"]
    except (ValueError, KeyError, TypeError, IndexError):
        return None
    if isinstance(uid, str) and len(uid) == 8:
        return {"id": uid, "version": "?", "total": None}
    return None


class Updater:
    """One plug's OTA work, driven from the node's loop: service() each pass, message() for
    ota/manifest and ota/chunk."""

    def __init__(self, node):
        self.node = node
        self.link = node.link
        key = node.cfg.get("ota_key")
        try:
            self.key = unhexlify(key) if key else b""
        except ValueError:
            self.key = b""
        self.m = None         # the manifest of the transfer under way
        self.f = 0            # the file being received
        self.off = 0          # bytes of it on the flash
        self.h = None         # its running sha256
        self.done = 0         # bytes of the whole set on the flash
        self.asked_ms = 0
        self.asked = False
        self.asked_to = 0     # the offset the last request's chunks reach
        self.moved_ms = 0     # when a byte last came
        self.stale = 0        # chunks that were not the one expected
        self.refused = None   # the reason the last update was refused
        self.trial = None     # [cur, prev, state, boots, trial_s] while on trial
        self.trial_end = 0
        self.reported = False
        self.high_water = 0   # the most heap in use after an OTA message (after a collection)
        p = read_pointer()
        if p is not None and p[2] == "trial":
            self.trial = p
            self.trial_end = time.ticks_add(node.hw.clock.ticks_ms(), p[4] * 1000)
        if _exists(STAGE + "/manifest"):
            self._resume()

    def busy(self):
        return self.m is not None or self.trial is not None or not self.reported

    # -- messages ----------------------------------------------------------------------------

    def message(self, topic, msg):
        if topic == self.link.t_ota_manifest:
            self._on_manifest(msg)
        elif self.m is not None:
            self._on_chunk(msg)
        self._heap()

    def _on_manifest(self, msg):
        try:
            m = parse_manifest(msg, self.key, self.node.node_id)
        except Refused as e:
            self._refuse(_claimed(msg), str(e), abort=False)
            return
        if self.m is not None and self.m["id"] == m["id"]:
            self.asked = False  # the operator started again: ask from where the flash is
            return
        last = read_serial()
        if m["serial"] <= last:
            self._refuse(m, "its serial %d is not above %d, the last this plug accepted (a "
                            "replayed or stale manifest)" % (m["serial"], last), abort=False)
            return
        if self.trial is not None:
            self._refuse(m, "version %s is still on trial" % self._running(), abort=False)
            return
        rmtree(STAGE)
        self._collect()
        free = flash_free()
        if free < m["total"] + FLASH_MARGIN:
            self._refuse(m, "not enough flash: %d bytes needed (%d and a margin of %d), %d "
                            "free" % (m["total"] + FLASH_MARGIN, m["total"], FLASH_MARGIN, free))
            return
        try:
            write_serial(m["serial"])  # before a byte is staged: this manifest is spent
            _makedirs(STAGE)
            with open(STAGE + "/manifest", "wb") as f:
                f.write(msg)
        except OSError as e:
            self._refuse(m, "cannot write the staging area (%r)" % e)
            return
        self.m = m
        self.f = self.off = self.done = 0
        self._start_file()
        self.moved_ms = time.ticks_ms()
        self.link.log("ota: update %s to version %s accepted: %d files, %d bytes"
                      % (m["id"], m["version"], len(m["files"]), m["total"]))
        self._status("receiving", m)

    def _on_chunk(self, msg):
        if len(msg) <= _HDR:
            self._refuse(self.m, "a chunk of %d bytes has no data" % len(msg))
            return
        fi = msg[0] | msg[1] << 8
        off = msg[2] | msg[3] << 8 | msg[4] << 16 | msg[5] << 24
        if fi != self.f or off != self.off:
            self.stale += 1  # a resent or late chunk: the next request says where we are
            return
        name, size = self.m["files"][fi][:2]
        n = len(msg) - _HDR
        if n > CHUNK or off + n > size:
            self._refuse(self.m, "a chunk of %s runs past its %d bytes" % (name, size))
            return
        try:
            with open(STAGE + "/" + name + ".part", "ab") as f:
                f.write(memoryview(msg)[_HDR:])
        except OSError as e:
            self._refuse(self.m, "cannot write %s (%r)" % (name, e))
            return
        self.h.update(memoryview(msg)[_HDR:])
        self.off += n
        self.done += n
        self.moved_ms = time.ticks_ms()
        if self.off == size:
            self._file_done()
            self.asked = False
        elif self.off == self.asked_to:
            self.asked = False

    # -- transfer ----------------------------------------------------------------------------

    def _start_file(self):
        name, size = self.m["files"][self.f][:2]
        _makedirs(STAGE + "/" + name.rsplit("/", 1)[0])
        self.h = sha256()
        self.off = 0
        with open(STAGE + "/" + name + ".part", "wb"):
            pass
        if size == 0:  # nothing to ask for: check and move on at once
            self._file_done()

    def _file_done(self):
        """The file being received is whole: keep it if its sha256 matches, then the next."""
        name, _, digest = self.m["files"][self.f]
        if hexlify(self.h.digest()).decode() != digest:
            self._refuse(self.m, "%s does not match its sha256 in the manifest" % name)
            return
        os.rename(STAGE + "/" + name + ".part", STAGE + "/" + name)
        self.f += 1
        if self.f == len(self.m["files"]):
            self._switch()
        else:
            self._start_file()

    def _resume(self):
        """After a reboot: carry on from what the flash holds (whole files were verified
        before they were renamed; a .part file is hashed again as it is)."""
        try:
            with open(STAGE + "/manifest", "rb") as f:
                m = parse_manifest(f.read(), self.key, self.node.node_id)
        except (OSError, Refused):
            rmtree(STAGE)
            return
        self.m = m
        self.done = 0
        for i, (name, size, _) in enumerate(m["files"]):
            if _exists(STAGE + "/" + name):
                self.done += size
                continue
            self.f = i
            self.h = sha256()
            self.off = 0
            buf = bytearray(CHUNK)
            try:
                with open(STAGE + "/" + name + ".part", "rb") as f:
                    while True:
                        n = f.readinto(buf)
                        if not n:
                            break
                        self.h.update(memoryview(buf)[:n])
                        self.off += n
            except OSError:
                self._start_file()
            if self.off > size:
                self._start_file()
            self.done += self.off
            self.moved_ms = time.ticks_ms()
            if self.off == size:
                self._finish_resumed(name, size)
            return
        self.f = len(m["files"])
        self._switch()

    def _finish_resumed(self, name, size):
        """A .part file that was whole when the plug stopped: check it as a last chunk would."""
        self.off = size
        self._file_done()

    def service(self):
        """From the node's loop: ask for chunks, confirm or end a trial, report an outcome."""
        link = self.link
        if not link.up:
            return
        now = time.ticks_ms()
        if not self.reported:
            self._report()
        if self.m is not None:
            if time.ticks_diff(now, self.moved_ms) > STALL_MS:
                self._refuse(self.m, "no chunk for %d s" % (STALL_MS // 1000))
            elif not self.asked or time.ticks_diff(now, self.asked_ms) > REQ_RETRY_MS:
                self._ask(now)
        if self.trial is not None:
            self._check_trial()

    def _ask(self, now):
        m = self.m
        self.asked = True
        self.asked_ms = now
        size = m["files"][self.f][1]
        self.asked_to = min(size, self.off + CHUNK * WINDOW)
        link = self.link
        link.publish(link.t_ota_req, json.dumps(
            {"id": m["id"], "f": self.f, "o": self.off, "n": CHUNK, "k": WINDOW}))

    # -- the switch and the trial ------------------------------------------------------------

    def _switch(self):
        m = self.m
        name = "u" + m["id"]
        p = read_pointer() or ["-", "-", "ok", 0, 0]
        cur = p[0]
        target = DIR + "/" + name
        with open(STAGE + "/version", "w") as f:
            f.write(m["version"])
        rmtree(target)
        os.rename(STAGE, target)
        write_pointer(name, cur, "trial", 0, m["trial_s"])  # the one atomic step
        for e in list(os.ilistdir(DIR)):
            if e[1] == 0x4000 and e[0] not in (name, cur):
                rmtree(DIR + "/" + e[0])  # versions older than the previous one
        from wattnode.start import set_crash_count
        set_crash_count(0)
        self.m = None
        self.link.log("ota: update %s verified (%d bytes); switching from %s to %s, on trial "
                      "for %d s" % (m["id"], m["total"], self._running(), m["version"],
                                    m["trial_s"]))
        self._status("switching", m)
        self.node.reboot_reason = "update to version %s" % m["version"]

    def _check_trial(self):
        node = self.node
        if self.link.up and node.sampler.last_slot >= 0 and node.ring.first > 0:
            cur, prev = self.trial[0], self.trial[1]
            write_pointer(cur, prev, "ok")
            self.trial = None
            self.link.log("ota: version %s confirmed: reconnected, sampling, readings "
                          "acknowledged by the collector" % self._running())
            self._status("confirmed", uid=cur[1:], reason="")
        elif time.ticks_diff(node.hw.clock.ticks_ms(), self.trial_end) >= 0:
            self.rollback("not confirmed within %d s (link up: %s, sampled: %s, acked: %s)"
                          % (self.trial[4], self.link.up, node.sampler.last_slot >= 0,
                             node.ring.first > 0))

    def check_deadline(self):
        """While the link is down the trial's clock still runs (from the node's loop)."""
        if self.trial is not None and time.ticks_diff(self.node.hw.clock.ticks_ms(),
                                                      self.trial_end) >= 0:
            self.rollback("not confirmed within %d s (the link never came up)"
                          % self.trial[4])

    def rollback(self, reason):
        cur, prev = self.trial[0], self.trial[1]
        write_pointer(prev, "-", "ok")
        write_result({"id": cur[1:], "state": "rolled back", "version": self._running(),
                      "reason": reason})
        self.trial = None
        print("ota: rolling back from version %s: %s" % (self._running(), reason))
        self.node.reboot_reason = "rolling back an update: " + reason

    # -- reports -----------------------------------------------------------------------------

    def _report(self):
        """An outcome decided before this boot (by boot.py or a trial): said once."""
        self.reported = True
        try:
            with open(RESULT) as f:
                r = json.load(f)
        except (OSError, ValueError):
            return
        os.remove(RESULT)
        version = r.get("version")
        try:  # boot.py names the version it rolled back by its folder (u<id>)
            with open("%s/%s/version" % (DIR, version)) as f:
                version = f.read()
        except (OSError, TypeError):
            pass
        self.link.log("ota: update %s %s (version %s): %s; running version %s"
                      % (r.get("id"), r.get("state"), version, r.get("reason"),
                         self._running()))
        self._status(r.get("state"), uid=r.get("id"), reason=r.get("reason"),
                     version=version)

    def _refuse(self, m, reason, abort=True):
        """Say why an update (m: its manifest) is refused; abort: the transfer under way ends
        with it (False for a manifest refused before it touched anything)."""
        uid = m["id"] if m else None
        self.refused = reason
        self.link.log("ota: update %s refused: %s; version %s keeps running"
                      % (uid or "?", reason, self._running()))
        self._status("refused", m, reason=reason)
        if abort:
            self.m = None
            self.h = None
            rmtree(STAGE)

    def _status(self, state, m=None, uid=None, reason=None, version=None):
        link = self.link
        link.publish(link.t_ota_status, json.dumps({
            "id": uid or (m["id"] if m else None), "state": state,
            "version": version or (m["version"] if m else self._running()),
            "running": self._running(), "reason": reason, "done": self.done,
            "heap_max": self.high_water,
            "total": m.get("total") if m else None}), retain=True)

    def _running(self):
        import wattnode
        return wattnode.__version__

    def _collect(self):
        """Remove versions that are neither current nor previous (a switch cut short)."""
        p = read_pointer() or ["-", "-"]
        if not _exists(DIR):
            os.mkdir(DIR)
        for e in list(os.ilistdir(DIR)):
            if e[1] == 0x4000 and e[0] not in (p[0], p[1], "stage"):
                rmtree(DIR + "/" + e[0])

    def _heap(self):
        import gc
        gc.collect()  # what the update holds, not garbage waiting for a collection
        used = gc.mem_alloc()
        if used > self.high_water:
            self.high_water = used
