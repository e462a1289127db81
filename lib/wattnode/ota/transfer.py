"""transfer.py - an update's transfer on the plug: ask for the chunks of each file the
manifest lists, append them to the flash, check each file's sha256, and switch to the new
version in one atomic step (the pointer), then ask for a reboot into its trial (trial.py).

Loaded by the package's Work only while a transfer is under way (a manifest was taken: manifest.py, which
is unloaded before this is loaded; or one is staged on the flash after a reboot). It is handed
the link and a reboot request, not the node. The topics, the flow control, the flash layout
and the rules are in the package's notes (__init__.py).
"""

import json
import os
import time
from hashlib import sha256

from micropython import const

from wattnode.crashes import set_crash_count
from wattnode.ota.flash import (DIR, STAGE, exists, makedirs, read_pointer, rmtree, running,
                                status, write_pointer)

CHUNK = const(1024)          # bytes per chunk: one MQTT message the heap takes easily
WINDOW = const(4)            # chunks asked for at once
REQ_RETRY_MS = const(3000)   # ask again when asked-for chunks have not all come
STALL_MS = const(120000)     # give up a transfer after this long without a byte
_HDR = const(6)


class Updater:
    """One plug's transfer, driven from the node's loop (the package's Work): service() each pass while
    the link is up, message() for ota/manifest and ota/chunk; busy() while a transfer is
    under way."""

    def __init__(self, link, reboot, staged=None):
        """reboot(reason): asks the node for a clean reboot (the switch's); staged: the
        manifest of a transfer the flash holds (manifest.staged), resumed."""
        self.buf = bytearray(_HDR + CHUNK)  # first, while the heap has room for one block
        self.view = memoryview(self.buf)     # each chunk is read into it (mqtt.py's rx_buf),
        self.data = self.view[_HDR:]         # until the package's Work drops it: a whole
        mq = link.mq                         # chunk is this view, its data this slice
        mq.rx_topic, mq.rx_buf = link.t_ota_chunk, self.view
        self.link = link
        self.reboot = reboot
        self.m = None         # the manifest of the transfer under way
        self.f = 0            # the file being received
        self.off = 0          # bytes of it on the flash
        self.h = None         # its running sha256
        self.part = None      # its path on the flash while it is received (.part)
        self.fh = None        # that file, open from its first chunk to its last
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
        """taken: for ota/manifest, what manifest.take() made of it."""
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
                      % (m["id"], m["version"], len(m["sizes"]), m["total"]))
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
        size = self.m["sizes"][fi]  # not _file(): a whole chunk allocates nothing, not a tuple
        n = len(msg) - _HDR
        if n > CHUNK or off + n > size:
            self.refuse(self.m, "a chunk of %s runs past its %d bytes" % (_file(self.m, fi)[0],
                                                                          size))
            return
        data = self.data if msg is self.view else msg[_HDR:]  # a whole chunk: no allocation
        try:
            if self.fh is None:  # opened once a file (an open allocates: 128 bytes on unix)
                self.fh = open(self.part, "ab")
            self.fh.write(data)
            self.fh.flush()  # on the flash at the chunk's end, as a close made it: resumable
        except OSError as e:
            self.refuse(self.m, "cannot write %s (%r)" % (_file(self.m, fi)[0], e))
            return
        self.h.update(data)
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
        entry = _file(self.m, self.f)
        name = entry[0]
        makedirs(STAGE + "/" + name.rsplit("/", 1)[0])
        self.h = sha256()
        self.off = 0
        self.part = STAGE + "/" + name + ".part"
        self.close()
        self.fh = open(self.part, "wb")  # made empty, and open for the file's chunks
        if entry[1] == 0:  # nothing to ask for: check and move on at once
            self._file_done()

    def _file_done(self):
        """The file being received is whole: keep it if its sha256 matches, then the next."""
        self.close()  # its chunks are all on the flash: closed, so it can be renamed
        entry = _file(self.m, self.f)
        name = entry[0]
        if self.h.digest() != entry[2]:
            self.refuse(self.m, "%s does not match its sha256 in the manifest" % name)
            return
        os.rename(self.part, STAGE + "/" + name)
        self.f += 1
        if self.f == len(self.m["sizes"]):
            self._switch()
        else:
            self._start_file()

    def _resume(self, m):
        """After a reboot: carry on from what the flash holds. Whole files are hashed again
        (the flash may have altered one since it was verified: the update is then refused,
        once the link is up to say so); a .part file is hashed as it is."""
        self.m = m
        self.done = 0
        for i in range(len(m["sizes"])):
            name, size, _ = _file(m, i)
            if exists(STAGE + "/" + name):
                self.done += size
                continue
            self.f = i
            self.part = STAGE + "/" + name + ".part"
            try:
                self.h, self.off = _hash(self.part, self.buf)
            except OSError:
                self._start_file()
            if self.off > size:
                self._start_file()
            self.done += self.off
            break
        else:
            self.f = len(m["sizes"])
        self.moved_ms = time.ticks_ms()
        self.pending = self._altered()
        if self.pending is None and self.f < len(m["sizes"]) and \
                self.off == m["sizes"][self.f]:
            self._file_done()  # whole when the plug stopped: checked as a last chunk is
        elif self.pending is None and self.f == len(m["sizes"]):
            self._switch()

    def _altered(self):
        """Why the update must be refused because a staged file no longer matches its sha256
        (the flash altered it since it was verified), or None."""
        m = self.m
        for i in range(self.f):
            name, size, digest = _file(m, i)
            try:
                h, n = _hash(STAGE + "/" + name, self.buf)
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
        size = m["sizes"][self.f]
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
        set_crash_count(0)
        self.m = None
        self.link.log("ota: update %s verified (%d bytes); switching from %s to %s, on trial "
                      "for %d s" % (m["id"], m["total"], running(), m["version"],
                                    m["trial_s"]))
        self._status("switching", m)
        self.reboot("update to version %s" % m["version"])

    # -- reports -----------------------------------------------------------------------------

    def refuse(self, m, reason, abort=True):
        """Say why an update (m: its manifest) is refused; abort: the transfer under way ends
        with it (False for a manifest refused before it touched anything)."""
        self.refused = reason
        self.link.log("ota: update %s refused: %s; version %s keeps running"
                      % (m["id"] if m else "?", reason, running()))
        self._status("refused", m, reason)
        if abort:
            self.close()
            self.m = None
            self.h = None
            rmtree(STAGE)

    def close(self):
        """The file being received closed, if it is open (what it holds stays on the flash: a
        transfer dropped for want of heap, or cut by a reboot, resumes from it)."""
        if self.fh is not None:
            try:
                self.fh.close()
            finally:
                self.fh = None

    def _status(self, state, m, reason=None):
        status(self.link, state, m["id"] if m else None, m["version"] if m else None, reason,
               self.done, m["total"] if m else None, self.high_water)

    def _heap(self):
        import gc
        gc.collect()  # what the update holds, not garbage waiting for a collection
        used = gc.mem_alloc()
        if used > self.high_water:
            self.high_water = used


def _file(m, i):
    """(path, size, sha256's 32 bytes) of the manifest's file i (the package's compact())."""
    return m["paths"][i], m["sizes"][i], m["sha256"][i]


def _hash(path, buf):
    """(the running sha256 of the file at path, its length), read into buf: the chunks'
    buffer (a chunk in it is on the flash and hashed before a file's end is checked)."""
    h = sha256()
    n = 0
    with open(path, "rb") as f:
        while True:
            k = f.readinto(buf)
            if not k:
                return h, n
            h.update(memoryview(buf)[:k])
            n += k
