"""ota.py - over-the-air updates, the plug's side: take a new build over MQTT, verify it, switch
to it in one atomic step; the new version then tries itself and confirms it or rolls back by
itself (otatrial.py).

Four modules, each loaded only when there is its work, so that an update fits a plug's heap:
ota.py, the transfer (a manifest came, or a transfer is staged on the flash); otamanifest.py,
the manifest's authentication and checks, loaded while a manifest is read and forgotten right
after; otatrial.py, a boot's work (a version on trial, an outcome to report); otaflash.py, the
files they share. A plug that is not updating loads none of them. While the transfer runs it
holds the manifest's header and its file list with each sha256 as 32 bytes, not the message
or its JSON text.

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
gives every manifest one, host/wattlog/fleet/ota.py says how). It is written (atomically) when a
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

Staged files: each is kept (renamed from .part) only once its sha256 matches, and every staged
file is hashed again when a transfer resumes after a reboot and right before the switch: a
file the flash altered since (a bit flipped while the plug was off) refuses the update as a
whole, with its name, and nothing switches.

Trial: after the switch the plug reboots (draining what it holds first, node.reboot()) into the
new version "on trial", which must run its whole trial_s in one boot, sampling, with its
readings acknowledged by the collector; it is then confirmed (the pointer says "grace", then
"ok" once it has run a while), otherwise rolled back to the previous version (otatrial.py).
boot.py rolls back a version on trial that crashed (the crash counter start.py keeps), failed
to start (ota/failed), was reset by the watchdog or has booted MAX_TRIAL_BOOTS times without
being confirmed, and one in its grace period that crash-loops. The previous version is kept.
"""

import json
import os
import time
from hashlib import sha256

from micropython import const

from wattnode.otaflash import (DIR, STAGE, exists, makedirs, read_pointer, rmtree, running,
                               status, write_pointer)

CHUNK = const(1024)          # bytes per chunk: one MQTT message the heap takes easily
WINDOW = const(4)            # chunks asked for at once
REQ_RETRY_MS = const(3000)   # ask again when asked-for chunks have not all come
STALL_MS = const(120000)     # give up a transfer after this long without a byte
_HDR = const(6)


class Updater:
    """One plug's transfer, driven from the node's loop: service() each pass while the link is
    up, message() for ota/manifest and ota/chunk; busy() while a transfer is under way."""

    def __init__(self, node, staged=None):
        """staged: the manifest of a transfer the flash holds (otamanifest.staged), resumed."""
        self.node = node
        self.link = node.link
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
        self.high_water = 0   # the most heap in use after an OTA message (after a collection)
        self.pending = None   # a refusal found while the link was down (a resumed transfer)
        if staged is not None:
            self._resume(staged)

    def busy(self):
        return self.m is not None

    # -- messages ----------------------------------------------------------------------------

    def message(self, topic, msg, taken=None):
        """taken: for ota/manifest, what otamanifest.take() made of it."""
        if topic == self.link.t_ota_manifest:
            self._on_manifest(taken)
        elif self.m is not None:
            self._on_chunk(msg)
        self._heap()

    def _on_manifest(self, taken):
        m, reason, abort = taken
        if reason is not None:
            self.refuse(m, reason, abort)
            return
        if m is None:
            self.asked = False  # the operator started again: ask from where the flash is
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
            self.refuse(self.m, "a chunk of %d bytes has no data" % len(msg))
            return
        fi = msg[0] | msg[1] << 8
        off = msg[2] | msg[3] << 8 | msg[4] << 16 | msg[5] << 24
        if fi != self.f or off != self.off:
            self.stale += 1  # a resent or late chunk: the next request says where we are
            return
        entry = self.m["files"][fi]
        name = entry[0]
        size = entry[1]
        n = len(msg) - _HDR
        if n > CHUNK or off + n > size:
            self.refuse(self.m, "a chunk of %s runs past its %d bytes" % (name, size))
            return
        try:
            with open(STAGE + "/" + name + ".part", "ab") as f:
                f.write(memoryview(msg)[_HDR:])
        except OSError as e:
            self.refuse(self.m, "cannot write %s (%r)" % (name, e))
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
        entry = self.m["files"][self.f]
        name = entry[0]
        makedirs(STAGE + "/" + name.rsplit("/", 1)[0])
        self.h = sha256()
        self.off = 0
        with open(STAGE + "/" + name + ".part", "wb"):
            pass
        if entry[1] == 0:  # nothing to ask for: check and move on at once
            self._file_done()

    def _file_done(self):
        """The file being received is whole: keep it if its sha256 matches, then the next."""
        entry = self.m["files"][self.f]
        name = entry[0]
        if self.h.digest() != entry[2]:
            self.refuse(self.m, "%s does not match its sha256 in the manifest" % name)
            return
        os.rename(STAGE + "/" + name + ".part", STAGE + "/" + name)
        self.f += 1
        if self.f == len(self.m["files"]):
            self._switch()
        else:
            self._start_file()

    def _resume(self, m):
        """After a reboot: carry on from what the flash holds. Whole files are hashed again
        (the flash may have altered one since it was verified: the update is then refused,
        once the link is up to say so); a .part file is hashed as it is."""
        self.m = m
        self.done = 0
        for i, (name, size, _) in enumerate(m["files"]):
            if exists(STAGE + "/" + name):
                self.done += size
                continue
            self.f = i
            try:
                self.h, self.off = _hash(STAGE + "/" + name + ".part")
            except OSError:
                self._start_file()
            if self.off > size:
                self._start_file()
            self.done += self.off
            break
        else:
            self.f = len(m["files"])
        self.moved_ms = time.ticks_ms()
        self.pending = self._altered()
        if self.pending is None and self.f < len(m["files"]) and \
                self.off == m["files"][self.f][1]:
            self._file_done()  # whole when the plug stopped: checked as a last chunk is
        elif self.pending is None and self.f == len(m["files"]):
            self._switch()

    def _altered(self):
        """Why the update must be refused because a staged file no longer matches its sha256
        (the flash altered it since it was verified), or None."""
        m = self.m
        for name, size, digest in m["files"][:self.f]:
            try:
                h, n = _hash(STAGE + "/" + name)
            except OSError:
                h, n = None, -1
            if n != size or h.digest() != digest:
                return "%s changed on the flash after it was verified (its sha256 no longer " \
                       "matches the manifest)" % name
        return None

    def service(self):
        """From the node's loop while the link is up: ask for chunks, give up a stalled
        transfer."""
        if self.m is None:
            return
        if self.pending is not None:  # found as the transfer resumed, said now the link is up
            self.refuse(self.m, self.pending)
            self.pending = None
            return
        now = time.ticks_ms()
        if time.ticks_diff(now, self.moved_ms) > STALL_MS:
            self.refuse(self.m, "no chunk for %d s" % (STALL_MS // 1000))
        elif not self.asked or time.ticks_diff(now, self.asked_ms) > REQ_RETRY_MS:
            self._ask(now)

    def _ask(self, now):
        m = self.m
        self.asked = True
        self.asked_ms = now
        size = m["files"][self.f][1]
        self.asked_to = min(size, self.off + CHUNK * WINDOW)
        link = self.link
        link.publish(link.t_ota_req, json.dumps(
            {"id": m["id"], "f": self.f, "o": self.off, "n": CHUNK, "k": WINDOW}))

    # -- the switch --------------------------------------------------------------------------

    def _switch(self):
        m = self.m
        why = self._altered()  # every staged file once more, right before the pointer moves
        if why is not None:
            self.refuse(m, why)
            return
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
                      "for %d s" % (m["id"], m["total"], running(), m["version"],
                                    m["trial_s"]))
        self._status("switching", m)
        self.node.reboot_reason = "update to version %s" % m["version"]

    # -- reports -----------------------------------------------------------------------------

    def refuse(self, m, reason, abort=True):
        """Say why an update (m: its manifest) is refused; abort: the transfer under way ends
        with it (False for a manifest refused before it touched anything)."""
        self.refused = reason
        self.link.log("ota: update %s refused: %s; version %s keeps running"
                      % (m["id"] if m else "?", reason, running()))
        self._status("refused", m, reason)
        if abort:
            self.m = None
            self.h = None
            rmtree(STAGE)

    def _status(self, state, m, reason=None):
        status(self.link, state, m["id"] if m else None, m["version"] if m else None, reason,
               self.done, m["total"] if m else None, self.high_water)

    def _heap(self):
        import gc
        gc.collect()  # what the update holds, not garbage waiting for a collection
        used = gc.mem_alloc()
        if used > self.high_water:
            self.high_water = used


def _hash(path):
    """(the running sha256 of the file at path, its length), read CHUNK bytes at a time."""
    h = sha256()
    n = 0
    buf = bytearray(CHUNK)
    with open(path, "rb") as f:
        while True:
            k = f.readinto(buf)
            if not k:
                return h, n
            h.update(memoryview(buf)[:k])
            n += k
