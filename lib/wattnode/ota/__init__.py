"""ota/ - over-the-air updates, the plug's side: take a new build over MQTT, verify it, switch
to it in one atomic step; the new version then tries itself and confirms it or rolls back by
itself (trial.py).

The package's parts, each loaded only when there is its work, so that an update fits a plug's
heap (a plug without PSRAM has little to spare):
  __init__  this: the notes, and Work, the node's one handle on an update
  resume    a boot's part: what update work the flash holds (due()) and loading it (the
            node asks at start-up, when there is an ota/ folder at all, and forgets it
            right after)
  manifest  the manifest's authentication and checks, loaded while a manifest is read and
            forgotten right after
  transfer  the transfer (a manifest came, or a transfer is staged on the flash)
  trial     a boot's work: a version on trial, its grace period, an outcome to report
  flash     the files they share (the paths, the pointer, the outcome, folders) and ota/status
A plug that is not updating loads none of them; a version on trial holds only this, trial and
flash, a plug taking an update only this, transfer and flash. While the transfer runs it holds
the manifest's header and its file list as three lists (paths, sizes, each sha256 as 32
bytes: compact()), not the message, its JSON text or a list per file. None of them imports
the node, and the node imports only this package (the contract the node and the collector
share about updates, the refusal a plug sends when it has no heap for the package at all, is
in wire.py).

Work, the node's one handle on an update, loads the parts as their work comes, drives them
from the node's loop and drops each once it is done:
    Work((link, clock, ring, sampler, reboot, boot_ticks, slots), hex_key, node_id)
    resume.load(work, due(), say)   the work the flash holds at a boot: trial.py for a trial, a
                     grace period or an outcome to report; transfer.py for a transfer to
                     resume (its staged manifest read by manifest.py first, and alone)
    message(t, msg)  ota/manifest or ota/chunk: a manifest is read by manifest.py (its checks,
                     the parsed JSON), which is then dropped, and its file list made compact
                     (compact()); unless a transfer is already under way, transfer.py is
                     loaded on the loop's next pass or at the next message (load()), once
                     the message, one large block, is gone: manifest.py and transfer.py are never
                     in the heap at once, nor the message and transfer.py's code
    on_trial()       a version on trial is being judged (the node then sends each reading at
                     once: the collector's ack confirms it)
    service(up)      each pass of the node's loop; False once no work is left (the node then
                     forgets the package)
A MemoryError in message() or service() (load(): taken_id names the update) drops what
could not be loaded (the trial under way is kept when only the transfer did not fit) and is
raised again: the node refuses the update. resume.load() says it (say(text): on the log once
the link is up). No part is handed the node: the link, the clock, the ring and the sampler
(what a trial is judged by), reboot(reason) (a clean reboot, when the loop can), the plug's
ota_key (hex) and id, the node's boot ticks and slots() (trial.py's).

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
is appended to the file on the flash and fed to the file's running sha256. Each chunk is read
from the socket into one buffer the transfer makes as it is loaded (mqtt.py's rx_buf),
not into a new 1 KiB block per message: in a plug's full heap, whose free room is small gaps,
such a block is often not there (the message was dropped, and the transfer stalled on it).
For the same reason the file being received stays open from its first chunk to its last
(opening it costs a block, 128 bytes on the unix port), flushed at each chunk's end: a whole
chunk allocates nothing, a transfer let go of closes it, and what reached the file stays there
for a resume.

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
Free flash: what staging takes on littlefs (manifest.flash_needed: whole blocks a file, four
a folder) plus FLASH_MARGIN must be free before a byte is written; the flash spill shares
that room (spill.RESERVE_KIB), so an update waits for an outage's readings to be sent.

Staged files: each is kept (renamed from .part) only once its sha256 matches, and every staged
file is hashed again when a transfer resumes after a reboot and right before the switch: a
file the flash altered since (a bit flipped while the plug was off) refuses the update as a
whole, with its name, and nothing switches.

Trial: after the switch the plug reboots (draining what it holds first, node.py's reboot()) into the
new version "on trial", which must run its whole trial_s in one boot, sampling, with its
readings acknowledged by the collector; it is then confirmed (the pointer says "grace", then
"ok" once it has run a while), otherwise rolled back to the previous version (trial.py).
boot.py rolls back a version on trial that crashed (the crash counter, crashes.py), failed
to start (ota/failed), was reset by the watchdog or has booted MAX_TRIAL_BOOTS times without
being confirmed, and one in its grace period that crash-loops. The previous version is kept.
"""

import gc

from wattnode import forget


class Work:
    def __init__(self, ports, hex_key, node_id):
        """ports: (link, clock, ring, sampler, reboot, boot_ticks, slots): what trial.Trial
        is handed, the transfer its first and fifth."""
        self.ports = ports
        self.hex_key = hex_key
        self.node_id = node_id
        self.transfer = None  # an update's transfer (transfer.Updater) while there is one
        self.taken = None     # a manifest read (manifest.take()'s) for a transfer not loaded yet
        self.taken_id = None  # its id, or "?": what the node refuses when the transfer cannot load
        self.trial = None     # a boot's work: a trial, an outcome to report (trial.Trial)

    def message(self, topic, msg):
        try:
            self.load()  # a manifest read on an earlier message and not yet passed on: first
            taken = None
            link = self.ports[0]
            if topic == link.t_ota_manifest:
                gc.collect()
                from wattnode.ota import manifest
                up = self.transfer
                taken = manifest.take(msg, self.hex_key, self.node_id,
                                      up.m["id"] if up is not None and up.m is not None
                                      else None)
                manifest = None
                forget("ota.manifest")
                if taken[1] is None and taken[0] is not None:
                    gc.collect()  # the checks' code gone: room for the compact file list
                    compact(taken[0])
                if self.transfer is None:
                    # the transfer's code is loaded on the loop's next pass (service()), once
                    # this message, one large block, is gone: its room is the code's
                    self.taken = taken
                    self.taken_id = taken[0]["id"] if taken[0] is not None else "?"
                    return
            if self.transfer is not None:  # a chunk with no transfer under way is dropped
                self.transfer.message(topic, msg, taken)
        except MemoryError:  # the heap cannot take an update now: the trial, if any, runs on
            self.close()
            self.transfer = self.taken = None
            self.drop()
            raise

    def load(self):
        """The transfer for a manifest read on an earlier pass (taken), handed it."""
        taken = self.taken
        if taken is None:
            return
        self.taken = None
        try:
            gc.collect()
            from wattnode.ota import transfer
            self.transfer = transfer.Updater(self.ports[0], self.ports[4])
        except MemoryError:
            self.transfer = None
            self.drop()
            raise
        self.transfer.message(self.ports[0].t_ota_manifest, None, taken)

    def on_trial(self):
        return self.trial is not None and self.trial.trial is not None

    def service(self, up):
        """Each part of an update's work is dropped once it has none left. A MemoryError
        (the transfer's code for a manifest read, taken_id) drops what could not be loaded
        and is raised again: the node refuses the update."""
        self.load()
        done = False
        work = self.trial
        if work is not None:
            if up:
                work.service()
            else:
                work.check_deadline()
            if not work.busy():
                self.trial = None
                done = True
        work = self.transfer
        if work is not None:
            if up:
                work.service()
            if not work.busy():
                self.transfer = None
                done = True
        if done:
            self.drop()
        return self.trial is not None or self.transfer is not None or self.taken is not None

    def close(self):
        """The transfer's open file closed, before the transfer is let go of (transfer.py)."""
        if self.transfer is not None:
            self.transfer.close()

    def drop(self):
        """Forget the parts no longer in use (the shared flash.py once none is)."""
        forget("ota.manifest")
        if self.transfer is None:
            self.ports[0].mq.rx_buf = None  # the transfer's chunk buffer goes too
            forget("ota.transfer")
        if self.trial is None:
            forget("ota.trial")
        if self.transfer is None and self.trial is None:
            forget("ota.flash")


def compact(m):
    """The parsed manifest m's file list ("files": a list of [path, size, sha256] lists, two
    blocks each) made what the transfer holds while it runs: "paths", "sizes" and "sha256",
    one list each (made at their exact size), of the same strings, numbers and 32-byte
    digests, in the order of "files" (transfer._file() reads them): 35 files hold about
    1.3 KiB less on the 64-bit port. No block bigger than one of these lists (the heap of a
    plug in use is full of small gaps), made once manifest.py is forgotten, in its code's
    gaps (the digests in one 1 KiB bytearray were refused in a 204 KiB test heap)."""
    files = m.pop("files")
    n = len(files)
    paths, sizes, digests = [None] * n, [0] * n, [None] * n
    for i in range(n):
        paths[i], sizes[i], digests[i] = files[i]
    m["paths"], m["sizes"], m["sha256"] = paths, sizes, digests
