"""manifest.py - an update's manifest on the plug: authenticated by its HMAC, checked, and
taken (its serial above the last, no version on trial, room on the flash, staged) or refused
with a reason. The format and the rules are in the package's notes (__init__.py).

Loaded by the package's Work only to read a manifest (one that came, or the staged one after a reboot),
before the transfer's code (transfer.py) is loaded, and forgotten right after: the checks and their reasons are most of the update's code and a transfer needs none
of them, so the two are not in the heap together while the parsed JSON is. The manifest is
read in place (a memoryview of the message, not a copy) and kept with each sha256 as its 32
bytes, not 64 hex digits.
"""

import gc
import json
import os
from hashlib import sha256
from binascii import unhexlify

from micropython import const

from wattnode.ota.flash import DIR, STAGE, exists, makedirs, read_pointer, rmtree, running
from wattnode.wire import manifest_id

FLASH_MARGIN = const(16384)  # bytes left free on the flash after the staged files
MAX_FILES = const(64)
MAX_SIZE = const(1 << 29)    # sizes stay small ints on a 32-bit plug
MAX_SERIAL = const(0x3FFFFFFF)  # the largest small int on a 32-bit plug
SERIAL = "ota/serial"


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


def flash_free():
    """(bytes free, the block size): littlefs gives a file its own blocks."""
    st = os.statvfs(".")
    bsize = st[0] or 1
    return min(st[4], MAX_SIZE // bsize) * bsize, bsize


def flash_needed(files, bsize):
    """What staging the files takes on littlefs: each file its whole blocks, each folder four
    (as measured on littlefs v2: tests/device/test_ota.py), ota/ and the stage's own folders
    counted, and FLASH_MARGIN: the package's 92 KB took 248 KiB, so its bytes alone said far
    too little."""
    folders = ["ota", "ota/stage", "wattnode"]
    blocks = 0
    for f in files:
        blocks += (f[1] + bsize - 1) // bsize
        d = f[0][:f[0].rfind("/")]
        if d not in folders:
            folders.append(d)
    return (blocks + 4 * len(folders)) * bsize + FLASH_MARGIN


def _path_ok(path):
    if not isinstance(path, str) or not path.startswith("wattnode/") or ".." in path \
            or len(path) > 64 or not (path.endswith(".mpy") or path.endswith(".py")):
        return False
    for c in path:
        if c not in "abcdefghijklmnopqrstuvwxyz0123456789_/.":
            return False
    return True


def parse(msg, key, node_id):
    """The manifest dict from an ota/manifest message, each file's sha256 as its 32 bytes;
    Refused(reason) if it is not genuine or not well-formed. The JSON is read in place (a
    memoryview), not copied out of the message."""
    nl = msg.find(b"\n")
    if nl != 64:
        raise Refused("the manifest does not start with its HMAC")
    try:
        mac = unhexlify(msg[:64])
    except ValueError:
        raise Refused("the manifest's HMAC is not hex")
    body = memoryview(msg)[65:]
    if not key:
        raise Refused("this plug has no ota_key in config.json (wattlog provision makes one)")
    if not _same(hmac_sha256(key, body), mac):
        raise Refused("the manifest's HMAC does not match this plug's key (forged or for "
                      "another plug)")
    # the parse makes a small object per field and grows the file list: collect first, so
    # that what loading this module and checking the HMAC left behind is free whole blocks
    # (without it, in the tests' 200 KiB heap, the manifest was refused at 23 KiB free for
    # want of 512 contiguous bytes, or not, by where start-up's strings had landed: the
    # length of the repository's path decided it)
    gc.collect()
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
    init = False
    for i, f in enumerate(files):
        if not (isinstance(f, list) and len(f) == 3 and _path_ok(f[0])
                and isinstance(f[1], int) and 0 <= f[1] < MAX_SIZE and isinstance(f[2], str)
                and len(f[2]) == 64 and not any(files[j][0] == f[0] for j in range(i))):
            raise Refused("the manifest's file entry %r is not [wattnode/path, size, sha256]"
                          % (f,))
        try:
            f[2] = unhexlify(f[2])  # 32 bytes, not 64 characters, for the whole transfer
        except ValueError:
            raise Refused("the manifest's sha256 for %s is not hex" % f[0])
        init = init or f[0] in ("wattnode/__init__.mpy", "wattnode/__init__.py")
        s += f[1]
    if not init:
        raise Refused("the manifest's file set lacks wattnode/__init__")
    if not (isinstance(total, int) and total == s and total < MAX_SIZE):
        raise Refused("the manifest's total %r is not the sum of its files' sizes" % (total,))
    return m


def key(hex_key):
    """The plug's ota_key (config.json, 64 hex digits) as bytes; b"" when it has none or it
    is not hex."""
    try:
        return unhexlify(hex_key) if hex_key else b""
    except ValueError:
        return b""


def take(msg, hex_key, node_id, under_way):
    """The manifest `msg`, read before the transfer's code is loaded (under_way: the id of the
    transfer under way, or None): (m, None, False) once it is staged and its serial spent;
    (None, None, False) for the transfer under way sent again (it asks again from where the
    flash is); or (m, reason, abort): refused, m being what names the update (None when it
    names nothing) and abort whether the transfer under way ends with it."""
    try:
        m = parse(msg, key(hex_key), node_id)
    except Refused as e:
        uid = manifest_id(msg)  # found without parsing the JSON again
        return None if uid == "?" else {"id": uid, "version": "?", "total": None}, str(e), False
    if under_way == m["id"]:
        return None, None, False
    last = read_serial()
    if m["serial"] <= last:
        return m, ("its serial %d is not above %d, the last this plug accepted (a replayed or "
                   "stale manifest)" % (m["serial"], last)), False
    p = read_pointer()
    if p is not None and p[2] == "trial":
        return m, "version %s is still on trial" % running(), False
    rmtree(STAGE)
    _collect()
    free, bsize = flash_free()
    need = flash_needed(m["files"], bsize)
    if free < need:
        return m, ("not enough flash: %d bytes needed (%d of files in %d-byte blocks, with a "
                   "margin of %d), %d free; readings of an outage that fill the flash go "
                   "first: try again once the collector has them" % (
                       need, m["total"], bsize, FLASH_MARGIN, free)), True
    try:
        write_serial(m["serial"])  # before a byte is staged: this manifest is spent
        makedirs(STAGE)
        with open(STAGE + "/manifest", "wb") as f:
            f.write(msg)
    except OSError as e:
        return m, "cannot write the staging area (%r)" % e, True
    return m, None, False


def staged(hex_key, node_id):
    """The manifest of the transfer staged on the flash (after a reboot), or None: the stage
    is removed when it cannot be read or is no longer genuine."""
    try:
        with open(STAGE + "/manifest", "rb") as f:
            return parse(f.read(), key(hex_key), node_id)
    except (OSError, Refused):
        rmtree(STAGE)
        return None


def _collect():
    """Remove versions that are neither current nor previous (a switch cut short)."""
    p = read_pointer() or ["-", "-"]
    if not exists(DIR):
        os.mkdir(DIR)
    for e in list(os.ilistdir(DIR)):
        if e[1] == 0x4000 and e[0] not in (p[0], p[1], "stage"):
            rmtree(DIR + "/" + e[0])
