"""test_ota.py - over-the-air updates on the plug (the package wattnode/ota/: its Work, which
the node holds, and the parts it loads, transfer.py, manifest.py, trial.py, flash.py;
firmware/boot.py): a manifest is taken only with this plug's HMAC;
every file is checked against its sha256 before anything switches; the update holds only the
part it needs; a flipped byte, a forged manifest, a missing __init__ or too little flash
is refused with the running version untouched; the switch is one pointer write; a transfer
cut by a reboot resumes from the flash; a version on trial is confirmed once readings are
acknowledged, rolled back when it crashed, failed to start or outlived its trial, by boot.py
before anything of it is imported. A real Node on the simulated board, its flash a folder."""

import gc
import json
import os
import select
import sys
import time
import unittest
import micropython
from binascii import hexlify
from hashlib import sha256

from wattnode import config, forget
from wattnode.crashes import HEALTHY_S
from wattnode.node import Node
from wattnode.ota import flash as otaflash
from wattnode.ota import manifest as otamanifest, transfer
from wattnode.ring import Ring
from wattsim.board import Board

from rig import HERE, board_file, fresh_dir, need_sockets
from netrig import loopback
import scratch

FLASH = scratch.DIR + "/ota"
START = 1795000000
KEY = "11" * 32


def firmware(name):
    """A file of firmware/ (not copied to the 32-bit port's file system: skipped there)."""
    try:
        with open(HERE + "/../../firmware/" + name) as f:
            return f.read()
    except OSError:
        raise unittest.SkipTest("firmware/%s is not on this port's file system" % name)


def manifest(files, uid="0a0b0c0d", key=KEY, node="plug-ota", trial_s=60, total=None,
             version="9.9.9", serial=1000):
    """An ota/manifest message for {path: content}, as `wattlog ota` makes it."""
    entries = [[p, len(c), hexlify(sha256(c).digest()).decode()] for p, c in files]
    body = json.dumps({"id": uid, "node": node, "serial": serial, "version": version,
                       "trial_s": trial_s,
                       "total": sum(e[1] for e in entries) if total is None else total,
                       "files": entries}).encode()
    mac = hexlify(otamanifest.hmac_sha256(bytes.fromhex(key) if hasattr(bytes, "fromhex")
                                  else bytes(int(key[i:i + 2], 16) for i in range(0, 64, 2)),
                                  body))
    return mac + b"\n" + body


def chunk(fi, off, data):
    return bytes((fi & 255, fi >> 8, off & 255, off >> 8 & 255, off >> 16 & 255,
                  off >> 24 & 255)) + data


ALL_PARTS = ("ota.transfer", "ota.manifest", "ota.trial", "ota.resume", "ota.flash", "ota")


def loaded():
    """The update package's modules in sys.modules (without "wattnode.")."""
    return sorted(m[9:] for m in sys.modules if m == "wattnode.ota" or
                  m.startswith("wattnode.ota."))


FILES = [("wattnode/__init__.py", b'__version__ = "9.9.9"\n'),
         ("wattnode/extra.py", bytes(range(256)) * 9)]   # 2304 bytes: three chunks


class TestOta(unittest.TestCase):
    def setUp(self):
        self.cwd = os.getcwd()
        otaflash.rmtree(FLASH + "/ota")  # fresh_dir() removes files only
        fresh_dir(FLASH)
        os.chdir(FLASH)
        self.node = self.make_node()

    def tearDown(self):
        os.chdir(self.cwd)

    def make_node(self, key=KEY):
        with open("config.json", "w") as f:
            json.dump({"node_id": "plug-ota", "ota_key": key,
                       "broker": {"host": "127.0.0.1", "port": 1}}, f)
        problems = []
        cfg = config.load("config.json", problems)
        board = board_file("sim")
        hw = Board(board, cfg, {"profile": "constant:1000", "start": START}, FLASH)
        node = Node(cfg, board, hw, problems, True, Ring(16))
        node._load_updates()  # as the loop's first pass does
        return node

    def send(self, msg, topic="manifest"):
        """msg on ota/<topic>; a manifest's transfer is then loaded, as the node's loop does
        first on its next pass (Work.service())."""
        t = self.node.link.t_ota_manifest if topic == "manifest" else self.node.link.t_ota_chunk
        self.node.on_ota(t, msg)
        if self.node.updates is not None:
            self.node.updates.load()

    def transfer(self, files, flip=None):
        """Send every chunk in order, as the operator answers the plug's requests."""
        for fi, (_, content) in enumerate(files):
            for off in range(0, len(content), transfer.CHUNK):
                data = bytearray(content[off:off + transfer.CHUNK])
                if flip == (fi, off):
                    data[7] ^= 1
                self.send(chunk(fi, off, bytes(data)), "chunk")
                if self.node.updates.transfer.m is None:
                    return

    def test_a_verified_update_switches_by_the_pointer_and_keeps_the_previous(self):
        self.send(manifest(FILES))
        self.assertIsNone(self.node.updates.transfer.refused)
        self.assertEqual(otaflash.read_pointer(), None)  # nothing switched while receiving
        self.transfer(FILES)
        self.assertEqual(otaflash.read_pointer(), ["u0a0b0c0d", "-", "trial", 0, 60])
        with open("ota/u0a0b0c0d/wattnode/extra.py", "rb") as f:
            self.assertEqual(f.read(), FILES[1][1])
        self.assertEqual(self.node.reboot_reason, "update to version 9.9.9")
        self.assertFalse("stage" in os.listdir("ota"))

    def test_a_flipped_byte_is_refused_before_any_switch(self):
        self.send(manifest(FILES))
        self.transfer(FILES, flip=(1, 1024))
        self.assertIn("wattnode/extra.py does not match its sha256", self.node.updates.transfer.refused)
        self.assertIsNone(otaflash.read_pointer())
        self.assertIsNone(self.node.reboot_reason)
        self.assertFalse("stage" in os.listdir("ota"))

    def test_a_forged_or_foreign_manifest_is_refused(self):
        self.send(manifest(FILES, key="22" * 32))
        self.assertIn("HMAC does not match", self.node.updates.transfer.refused)
        self.send(manifest(FILES, node="plug-other"))
        self.assertIn("not this plug", self.node.updates.transfer.refused)
        genuine = manifest(FILES)
        self.send(genuine.replace(b"9.9.9", b"6.6.6"))  # altered after signing
        self.assertIn("HMAC does not match", self.node.updates.transfer.refused)
        self.assertIsNone(self.node.updates.transfer.m)
        for junk in (b"", b"x" * 70, b"\n" * 100, b"zz" * 32 + b"\n{}"):
            self.send(junk)
            self.assertIsNotNone(self.node.updates.transfer.refused)
        self.assertIsNone(otaflash.read_pointer())

    def test_a_plug_without_a_key_takes_no_update(self):
        self.node = self.make_node(key=None)
        self.send(manifest(FILES))
        self.assertIn("no ota_key", self.node.updates.transfer.refused)

    def test_a_set_without_init_or_a_wrong_total_is_refused(self):
        self.send(manifest(FILES[1:]))
        self.assertIn("lacks wattnode/__init__", self.node.updates.transfer.refused)
        self.send(manifest(FILES, total=5))
        self.assertIn("not the sum", self.node.updates.transfer.refused)
        self.send(manifest([("../boot.py", b"x"), FILES[0]]))
        self.assertIn("is not [wattnode/path", self.node.updates.transfer.refused)

    def test_too_little_flash_is_refused_before_a_byte_is_written(self):
        big = (1 << 29) - 3000  # more than the flash check ever counts as free
        entries = FILES + [("wattnode/big.py", b"")]
        msg = manifest(entries)
        m = json.loads(msg[65:])
        m["files"][2][1] = big
        m["total"] += big
        body = json.dumps(m).encode()
        self.send(hexlify(otamanifest.hmac_sha256(b"\x11" * 32, body)) + b"\n" + body)
        self.assertIn("not enough flash", self.node.updates.transfer.refused)
        self.assertFalse("stage" in os.listdir("ota"))

    def test_a_manifest_sent_again_before_the_loop_passes_is_the_transfer_under_way(self):
        """The transfer's code is loaded on the loop's pass after a manifest; the same
        manifest again before that pass (the operator resending it) is the transfer under
        way, as it is once that code is loaded, not a replay refused for its serial."""
        msg = manifest(FILES)
        self.node.on_ota(self.node.link.t_ota_manifest, msg)  # no loop pass in between
        self.node.on_ota(self.node.link.t_ota_manifest, msg)
        up = self.node.updates.transfer
        self.assertIsNone(up.refused)
        self.assertEqual(up.m["id"], "0a0b0c0d")
        self.transfer(FILES)
        self.assertIsNone(up.refused)
        self.assertEqual(otaflash.read_pointer()[:3], ["u0a0b0c0d", "-", "trial"])

    def test_a_chunk_is_taken_whole_in_a_heap_without_a_free_kib(self):
        """Each chunk comes from the socket into the buffer the transfer made as it was
        loaded (mqtt.py's rx_buf), not into a new 1 KiB block, and is written to the file
        the transfer holds open: with the heap locked (not a byte to spare, as in a plug's
        heap during an update), a 1030-byte chunk is taken whole and written, none dropped
        (it was dropped, "no heap for a 1030-byte message", and the update stalled:
        tests/e2e/test_ota.py's tight heap failed about every other run; later each chunk
        still made a tuple and opened its file, 128 bytes, which a fragmented heap without
        a free KiB could not always give). Once the update package is dropped, the client
        holds the buffer no more."""
        need_sockets()
        client, server = loopback()
        try:
            node = self.node
            node.link.mq.attach(client)  # as connect() leaves it
            node.link.up = True
            self.send(manifest(FILES))
            self.send(chunk(0, 0, FILES[0][1]), "chunk")
            up = node.updates.transfer
            data = FILES[1][1]
            body = node.link.t_ota_chunk + chunk(1, 0, data[:transfer.CHUNK])
            n = 2 + len(body)  # QoS 0: the topic's length, topic and payload
            server.write(bytes((0x30, n & 0x7F | 0x80, n >> 7, 0, len(node.link.t_ota_chunk)))
                         + body)
            poller = select.poll()
            poller.register(client, select.POLLIN)
            self.assertTrue(poller.poll(2000), "nothing reached the node")
            time.sleep_ms(20)  # the rest of what was written in one go
            micropython.heap_lock()
            try:
                node.link.service(True)
            finally:
                micropython.heap_unlock()
            self.assertEqual((node.link.mq.dropped_in, up.refused, up.f, up.off),
                             (0, None, 1, transfer.CHUNK))
            with open("ota/stage/wattnode/extra.py.part", "rb") as f:
                self.assertEqual(f.read(), data[:transfer.CHUNK])
            up.refuse(up.m, "the test ends it")
            node._service(False)  # the loop's next pass: the transfer is over
            self.assertIsNone(node.updates)
            self.assertTrue(node.link.mq.rx_buf is None, "the client still holds the chunk buffer")
        finally:
            client.close()
            server.close()

    def test_a_transfer_let_go_of_closes_the_file_it_was_writing(self):
        """The file being received stays open across its chunks (opening it for each chunk
        needed heap a tight one could not always give): a transfer the node lets go of (for
        want of heap, on_ota's MemoryError; or refused) closes it, or each would keep a file
        handle until the plug reset. What it held stays on the flash for the resume."""
        def closed(f):
            try:
                f.write(b"x")
            except (ValueError, OSError):  # "I/O operation on closed file"
                return True
            return False

        self.send(manifest(FILES))
        self.send(chunk(0, 0, FILES[0][1]), "chunk")  # file 0 whole: file 1 opened for its chunks
        self.send(chunk(1, 0, FILES[1][1][:transfer.CHUNK]), "chunk")
        f = self.node.updates.transfer.fh
        self.assertIsNotNone(f)
        self.node._no_heap(None)  # what on_ota does with a MemoryError
        self.assertIsNone(self.node.updates)
        self.assertTrue(closed(f))
        with open("ota/stage/wattnode/extra.py.part", "rb") as part:
            self.assertEqual(part.read(), FILES[1][1][:transfer.CHUNK])
        self.send(manifest(FILES, uid="0a0b0c0e", serial=1001))  # a new one, refused mid-file
        up = self.node.updates.transfer
        self.send(chunk(0, 0, FILES[0][1]), "chunk")
        f = up.fh
        self.assertIsNotNone(f)
        up.refuse(up.m, "the test refuses it")
        self.assertTrue(closed(f))

    def test_a_transfer_cut_by_a_reboot_resumes_from_the_flash(self):
        self.send(manifest(FILES))
        self.send(chunk(0, 0, FILES[0][1]), "chunk")
        self.send(chunk(1, 0, FILES[1][1][:1024]), "chunk")
        self.node = self.make_node()  # a reboot: a new node finds the staged transfer
        up = self.node.updates.transfer
        self.assertEqual((up.f, up.off, up.done), (1, 1024, len(FILES[0][1]) + 1024))
        self.send(chunk(1, 0, FILES[1][1][:1024]), "chunk")  # a late copy: ignored
        self.assertEqual(up.stale, 1)
        self.send(chunk(1, 1024, FILES[1][1][1024:2048]), "chunk")
        self.send(chunk(1, 2048, FILES[1][1][2048:]), "chunk")
        self.assertIsNone(up.refused)
        self.assertEqual(otaflash.read_pointer()[:3], ["u0a0b0c0d", "-", "trial"])

    def flip(self, path, at=7):
        with open(path, "rb") as f:
            data = bytearray(f.read())
        data[at] ^= 1
        with open(path, "wb") as f:
            f.write(data)

    def test_a_staged_file_altered_while_the_plug_was_off_is_refused_at_resume(self):
        """Cut mid-transfer, a byte of a file already verified and staged flipped on the
        flash, powered on: the resumed transfer hashes every staged file again and refuses
        the update (once its link is up to say so); nothing switches, the stage is gone."""
        files = FILES + [("wattnode/more.py", bytes(range(200)) * 3)]
        self.send(manifest(files))
        self.send(chunk(0, 0, files[0][1]), "chunk")
        self.send(chunk(1, 0, files[1][1][:1024]), "chunk")
        self.send(chunk(1, 1024, files[1][1][1024:2048]), "chunk")
        self.send(chunk(1, 2048, files[1][1][2048:]), "chunk")  # extra.py whole: verified
        self.flip("ota/stage/wattnode/extra.py")
        self.node = self.make_node()  # the power comes back
        up = self.node.updates.transfer
        self.assertIsNone(otaflash.read_pointer())
        self.connect(self.node)
        up.service()
        self.assertIn("wattnode/extra.py changed on the flash after it was verified",
                      up.refused)
        self.assertIn(b"refused", self.sent())
        self.assertIsNone(otaflash.read_pointer())
        self.assertFalse("stage" in os.listdir("ota"))
        self.assertIsNone(self.node.reboot_reason)

    def test_a_staged_file_altered_before_the_switch_is_refused(self):
        """A file verified and staged, then altered on the flash while the rest comes in: the
        check right before the pointer moves refuses the update."""
        self.send(manifest(FILES))
        self.send(chunk(0, 0, FILES[0][1]), "chunk")
        self.flip("ota/stage/wattnode/__init__.py", at=2)
        for off in range(0, len(FILES[1][1]), transfer.CHUNK):
            self.send(chunk(1, off, FILES[1][1][off:off + transfer.CHUNK]), "chunk")
        self.assertIn("wattnode/__init__.py changed on the flash after it was verified",
                      self.node.updates.transfer.refused)
        self.assertIsNone(otaflash.read_pointer())
        self.assertIsNone(self.node.reboot_reason)
        self.assertFalse("stage" in os.listdir("ota"))

    def confirm(self):
        """The version on trial confirmed, as a trial's ack does (the pointer says ok)."""
        p = otaflash.read_pointer()
        otaflash.write_pointer(p[0], p[1], "ok")

    def test_a_replayed_genuine_manifest_is_refused_and_a_newer_serial_may_downgrade(self):
        """A manifest captured off the wire (genuine: the plug's key signed it) is refused
        once a manifest with a higher serial was accepted, across reboots and a rollback,
        with nothing switched; a newer serial signing an older version (a downgrade on
        purpose) is taken."""
        old = manifest(FILES, uid="00000001", serial=1000, version="9.9.9")
        self.send(old)
        self.transfer(FILES)
        self.confirm()
        newer = [("wattnode/__init__.py", b'__version__ = "9.9.10"\n')]
        self.node = self.make_node()  # rebooted into 9.9.9
        self.send(manifest(newer, uid="00000002", serial=1001, version="9.9.10"))
        self.transfer(newer)
        self.assertEqual(otaflash.read_pointer()[:3], ["u00000002", "u00000001", "trial"])
        self.confirm()
        for _ in range(2):  # after a reboot too: the serial is on the flash
            self.node = self.make_node()
            self.send(old)
            self.assertIn("serial 1000 is not above 1001", self.node.updates.transfer.refused)
            self.assertIsNone(self.node.updates.transfer.m)
            self.assertEqual(otaflash.read_pointer()[:3], ["u00000002", "u00000001", "ok"])
            self.assertFalse("stage" in os.listdir("ota"))
        self.assertIn("u00000002", os.listdir("ota"))
        downgrade = manifest(FILES, uid="00000003", serial=1002, version="9.9.9")  # on purpose
        self.send(downgrade)
        self.assertIsNotNone(self.node.updates.transfer.m)
        self.transfer(FILES)
        self.assertEqual(otaflash.read_pointer()[:3], ["u00000003", "u00000002", "trial"])
        self.assertEqual(self.node.reboot_reason, "update to version 9.9.9")
        self.node = self.make_node()  # the trial runs out: rolled back to u00000002
        self.node.hw.clock.advance_ms(61000)
        self.node.updates.trial.check_deadline()
        self.assertEqual(otaflash.read_pointer()[:3], ["u00000002", "-", "ok"])
        self.node = self.make_node()
        self.send(downgrade)  # spent, though it was rolled back
        self.assertIn("serial 1002 is not above 1002", self.node.updates.transfer.refused)
        self.assertEqual(otaflash.read_pointer()[:3], ["u00000002", "-", "ok"])

    def test_a_replay_during_a_transfer_leaves_the_transfer_alone(self):
        """A refused manifest does not cut the transfer under way."""
        self.send(manifest(FILES, uid="00000005", serial=5))
        self.send(chunk(0, 0, FILES[0][1]), "chunk")
        self.send(manifest(FILES, uid="00000004", serial=4))
        self.assertIn("serial 4 is not above 5", self.node.updates.transfer.refused)
        self.assertEqual(self.node.updates.transfer.m["id"], "00000005")
        self.node.updates.transfer.refused = None
        self.transfer(FILES)  # the first file's chunk again is stale: ignored
        self.assertIsNone(self.node.updates.transfer.refused)
        self.assertEqual(otaflash.read_pointer()[0], "u00000005")

    def test_a_manifest_without_a_serial_is_refused(self):
        msg = manifest(FILES)
        body = json.loads(msg[65:])
        del body["serial"]
        body = json.dumps(body).encode()
        self.send(hexlify(otamanifest.hmac_sha256(b"\x11" * 32, body)) + b"\n" + body)
        self.assertIn("serial", self.node.updates.transfer.refused)
        self.assertIsNone(self.node.updates.transfer.m)

    def connect(self, node):
        """The node's link as connect() leaves it, on a loopback socket; the server end, read
        by sent()."""
        client, server = loopback()
        node.link.mq.attach(client)
        node.link.up = True
        server.setblocking(False)
        self.sockets = (client, server)
        return server

    def sent(self):
        try:
            return self.sockets[1].read(8192) or b""
        finally:
            for s in self.sockets:
                s.close()

    def test_a_rollback_by_boot_py_is_reported_with_the_version_it_rolled_back(self):
        """boot.py knows a version only by its folder (u<id>); the report on ota/status and
        the log names the version (what `wattlog nodes` shows: "rolled back from 9.9.9"), and
        counts the slots lost between the last one the collector holds (its answer to
        "online") and this boot's first: what the collector counts as lost."""
        self.send(manifest(FILES))
        self.transfer(FILES)
        otaflash.write_pointer("-", "-", "ok")  # as boot.py leaves it after a failed start
        otaflash.write_result({"id": "0a0b0c0d", "state": "rolled back", "version": "u0a0b0c0d",
                          "reason": "it failed to start: ImportError('x')"})
        node = self.make_node()
        self.connect(node)
        node._begin(node.keeper.now(), node.hw.clock.ticks_ms())
        node.sampler.last_slot = node._first_slot
        node.updates.trial.service()
        self.assertIsNotNone(node.updates.trial.result)  # waits for the collector's answer
        first = node.status()["first_slot"]
        node.on_energy(1000, first - 70)  # 6 slots between its newest slot and this boot's
        node.updates.trial.service()
        self.assertIsNone(node.updates.trial.result)
        sent = self.sent()
        self.assertIn(b"rolled back", sent)
        self.assertIn(b"9.9.9", sent)
        self.assertFalse(b"u0a0b0c0d" in sent)
        self.assertIn(b'"lost": 6', sent)
        self.assertIn(b"6 slots between %d and %d (unix s) neither stored nor kept"
                      % (first - 70, first), sent)
        self.assertFalse(otaflash.exists("ota/result"))

    def test_a_rollback_is_reported_without_a_count_when_the_collector_does_not_answer(self):
        otaflash.makedirs("ota")
        otaflash.write_result({"id": "0a0b0c0d", "state": "rolled back", "version": "u0a0b0c0d",
                               "reason": "it crashed"})
        node = self.make_node()
        self.connect(node)
        node.updates.trial.service()
        self.assertIsNotNone(node.updates.trial.result)
        node.hw.clock.advance_ms(31000)
        node.updates.trial.service()
        self.assertIsNone(node.updates.trial.result)
        sent = self.sent()
        self.assertIn(b"rolled back", sent)
        self.assertFalse(b'"lost"' in sent)

    def boot(self):
        """Run firmware/boot.py's choice of version as a plug's boot does; the sys.path it
        leaves is undone after."""
        path = list(sys.path)
        exec(self.boot_py, {"__name__": "boot"})
        chosen = sys.path[0]
        sys.path[:] = path
        return chosen

    def boot_setup(self):
        os.chdir(self.cwd)
        self.boot_py = firmware("boot.py")
        os.chdir(FLASH)
        os.mkdir("ota")

    def test_boot_counts_trial_boots_and_rolls_back_a_crash_or_failed_start(self):
        self.boot_setup()
        otaflash.write_pointer("u00000002", "u00000001", "trial", 0, 60)
        self.assertEqual(self.boot(), "ota/u00000002")
        self.assertEqual(otaflash.read_pointer()[3], 1)
        with open("crashes", "w") as f:
            f.write("1")
        self.rolled_back(self.boot(), "u00000001", "00000002", "crashed")
        otaflash.write_pointer("u00000003", "u00000001", "trial", 1, 60)
        with open("ota/failed", "w") as f:
            f.write("ImportError('no module named x')")
        self.assertEqual(self.boot(), "ota/u00000001")
        with open("ota/result") as f:
            self.assertIn("failed to start: ImportError", json.load(f)["reason"])
        otaflash.write_pointer("u00000003", "-", "trial", 3, 60)
        self.assertNotEqual(self.boot(), "ota/u00000003")  # rolled back to /lib
        self.assertEqual(otaflash.read_pointer()[0], "-")

    def rolled_back(self, chosen, prev, uid, says):
        """boot.py chose `prev` after rolling back update `uid`, saying why in ota/result."""
        self.assertEqual(chosen, "ota/" + prev)
        self.assertEqual(otaflash.read_pointer(), [prev, "-", "ok", 0, 0])
        with open("ota/result") as f:
            r = json.load(f)
        self.assertEqual((r["id"], r["state"]), (uid, "rolled back"))
        self.assertIn(says, r["reason"])

    def reset_by(self, cause):
        """machine.reset_cause() says `cause` while boot.py runs (machine.WDT_RESET is 3, as
        on an ESP32); the unix port's own machine module has no reset_cause."""
        class Machine:
            WDT_RESET = 3
            SOFT_RESET = 5

            def reset_cause(self):
                return cause
        sys.modules["machine"] = Machine()

    def tearDownMachine(self):
        sys.modules.pop("machine", None)

    def test_boot_rolls_back_a_version_on_trial_the_watchdog_reset(self):
        """A hung version: the watchdog's reset fails its trial at once, not after
        MAX_TRIAL_BOOTS watchdog periods; any other reset (a power cut) lets it carry on."""
        self.boot_setup()
        try:
            otaflash.write_pointer("u00000002", "u00000001", "trial", 1, 60)
            self.reset_by(5)
            self.assertEqual(self.boot(), "ota/u00000002")
            self.reset_by(3)
            chosen = self.boot()
        finally:
            self.tearDownMachine()
        self.rolled_back(chosen, "u00000001", "00000002", "the watchdog reset it")

    def test_boot_sends_a_crash_loop_in_the_grace_period_back_not_to_safe_mode(self):
        """Confirmed, then crashing: in its grace period a crash loop (3 in a row, a watchdog
        reset counting as one) goes back to the previous version and clears the crash count,
        so safe mode (3 crashes) is not entered; fewer crashes, or after the grace period,
        change nothing."""
        self.boot_setup()
        otaflash.write_pointer("u00000002", "u00000001", "grace", 0, 60)
        for crashes in (0, 2):
            with open("crashes", "w") as f:
                f.write(str(crashes))
            self.assertEqual(self.boot(), "ota/u00000002")
            self.assertEqual(otaflash.read_pointer()[2], "grace")
        try:
            self.reset_by(3)  # the third in a row
            chosen = self.boot()
        finally:
            self.tearDownMachine()
        self.rolled_back(chosen, "u00000001", "00000002",
                         "crashed 3 times in a row after it was confirmed")
        with open("crashes") as f:
            self.assertEqual(f.read(), "0")
        otaflash.write_pointer("u00000002", "u00000001", "ok", 0, 0)
        with open("crashes", "w") as f:
            f.write("3")
        self.assertEqual(self.boot(), "ota/u00000002")  # past its grace: safe mode's turn

    def test_a_transfer_holds_only_the_transfer_and_a_compact_manifest(self):
        """Once a manifest of a whole build (26 files) is taken, the update holds the
        transfer's code, the chunks' buffer (1 KiB, made once instead of a block per chunk
        message) and the file list as three lists with 32-byte digests: the manifest's checks
        (ota/manifest.py) are unloaded, and the parsed JSON's hex digests and its list per
        file are gone. Held, loaded from source on the 64-bit port: 16,480 bytes, under 16.5
        KiB, with the file being received open from its first chunk to its last (16,096 while
        each chunk opened it again: 128 bytes and a tuple a chunk, which a tight heap could not
        always give; 14.4 KiB without the chunks' buffer, 14.8 with a list per file; 20.1 KiB
        while the transfer was one module keeping the parsed JSON; 13.1 KiB before the node's
        update handling moved into the package, whose Work the node now loads with it)."""
        if sys.platform == "webassembly":
            raise unittest.SkipTest("the WebAssembly port collects garbage only between the "
                                    "steps of its JavaScript host, not in gc.collect()")
        files = [("wattnode/__init__.py", b'__version__ = "9.9.9"\n')] + [
            ("wattnode/module%02d.mpy" % i, bytes([i]) * 3000) for i in range(25)]
        msg = manifest(files)
        forget(*ALL_PARTS)
        gc.collect()
        before = gc.mem_alloc()
        self.send(msg)
        self.assertIsNone(self.node.updates.transfer.refused)
        self.assertEqual(len(self.node.updates.transfer.m["sizes"]), 26)
        self.assertFalse("wattnode.ota.manifest" in sys.modules)
        gc.collect()
        held = gc.mem_alloc() - before
        self.assertTrue(held < 16.5 * 1024, held)

    def test_a_boot_on_trial_loads_only_the_trial(self):
        """A version on trial holds the trial's few KiB (and the package's work and flash
        files), not the transfer nor the checks; a plug with no update work holds nothing of
        the package, and drops it all once the trial's work is done."""
        forget(*ALL_PARTS)
        self.make_node()
        self.assertEqual(loaded(), [])
        os.mkdir("ota")
        otaflash.write_pointer("u00000002", "u00000001", "trial", 1, 60)
        node = self.make_node()
        self.assertIsNotNone(node.updates.trial)
        self.assertIsNone(node.updates.transfer)
        self.assertEqual(loaded(), ["ota", "ota.flash", "ota.trial"])
        otaflash.write_pointer("u00000002", "u00000001", "grace", 0, 0)
        node.updates.trial.trial = None  # as a confirmation leaves it, past its grace period
        node.updates.trial.grace = None
        node._service(False)
        self.assertIsNone(node.updates)
        self.assertEqual(loaded(), [])

    def acked(self, node, n):
        """n more readings made, sent and acknowledged by the collector."""
        ring = node.ring
        for _ in range(n):
            ring.append(0, 0, 0, 0, 0)
        ring.sent_to(ring.next)
        ring.release(ring.next)

    def test_a_trial_is_confirmed_only_at_its_end_then_has_a_grace_period(self):
        """An acknowledged reading does not confirm a version at once: it must run its whole
        trial (a version that crashes after its first ack is then rolled back by boot.py).
        At the end it is confirmed ("grace"), said on ota/status; after crashes.HEALTHY_S it is
        "ok"."""
        os.mkdir("ota")
        otaflash.write_pointer("u00000002", "u00000001", "trial", 1, 60)
        node = self.make_node()
        up = node.updates.trial
        self.connect(node)
        node.sampler.last_slot = 10
        self.acked(node, 1)
        up.service()
        self.assertEqual(otaflash.read_pointer()[2], "trial")  # 59 s still to run
        node.hw.clock.advance_ms(45000)
        up.service()  # the last 30 s begin: what it has made by now must be acknowledged
        self.acked(node, 3)
        node.hw.clock.advance_ms(15000)
        up.service()
        self.assertEqual(otaflash.read_pointer(), ["u00000002", "u00000001", "grace", 0, 0])
        self.assertIsNone(node.reboot_reason)
        self.assertIn(b"confirmed", self.sent())
        self.assertTrue(up.busy())
        node.hw.clock.advance_ms(HEALTHY_S * 1000)
        up.check_deadline()
        self.assertEqual(otaflash.read_pointer(), ["u00000002", "u00000001", "ok", 0, 0])
        self.assertFalse(up.busy())
        otaflash.write_pointer("u00000002", "u00000001", "grace")
        node = self.make_node()  # confirmed, and another update switches during the grace
        otaflash.write_pointer("u00000003", "u00000002", "trial", 0, 60)
        node.hw.clock.advance_ms(HEALTHY_S * 1000)
        node.updates.trial.check_deadline()
        self.assertEqual(otaflash.read_pointer(), ["u00000003", "u00000002", "trial", 0, 60])

    def test_a_trial_whose_readings_go_unacknowledged_is_rolled_back_at_its_end(self):
        """Acknowledged at first, then its readings no longer are (a PUBACK frees nothing:
        they stay in its ring): rolled back at the end, saying so; a trial with no ack at all
        likewise."""
        os.mkdir("ota")
        for first_acked in (1, 0):
            if first_acked == 0:  # a plug of its own: not the readings the first one kept
                os.remove(".rtc-memory")  # (RTC memory, spill.py: a power cut empties it)
            otaflash.write_pointer("u00000003", "u00000002", "trial", 1, 60)
            node = self.make_node()
            node.sampler.last_slot = 10
            self.acked(node, first_acked)
            node.hw.clock.advance_ms(20000)
            for _ in range(4):
                node.ring.append(0, 0, 0, 0, 0)
            node.ring.sent_to(node.ring.next)  # the broker's PUBACK
            self.assertEqual(node.ring.count(), 4)
            node.hw.clock.advance_ms(10000)
            node.updates.trial.check_deadline()  # its last 30 s: those 4 are due by the end
            node.hw.clock.advance_ms(31000)
            node.updates.trial.check_deadline()
            self.assertEqual(otaflash.read_pointer(), ["u00000002", "-", "ok", 0, 0])
            self.assertIn("rolling back", node.reboot_reason)
            with open("ota/result") as f:
                reason = json.load(f)["reason"]
            self.assertIn("not confirmed within 60 s", reason)
            self.assertIn("acknowledged by the collector: %d of %d" % (first_acked,
                                                                       first_acked + 4), reason)
