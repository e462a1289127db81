"""test_short_heap.py - a plug short of heap: what only start-up needs is unloaded and its
heap given back (wattnode.forget), and an optional part that does not fit (the Broadlink
protocol, an update's work at start-up, an update's manifest) is done without, said once,
and never stops the plug metering. The heap is filled until a few KiB are left."""

import gc
import json
import os
import sys
import unittest

from wattnode import config, forget
from wattnode.node import Node
from wattnode.ring import Ring
from wattsim.board import Board

from rig import board_file, fill_heap, fresh_dir, need_sockets
from netrig import loopback, packets, publishes
import scratch

FLASH = scratch.DIR + "/short-heap"


def _plug(flash):
    """A node on a simulated plug, its config.json written in the current folder (flash)."""
    with open("config.json", "w") as f:
        json.dump({"node_id": "plug-m", "broker": {"host": "127.0.0.1", "port": 1}}, f)
    board = board_file("sim")
    problems = []
    cfg = config.load("config.json", problems)
    hw = Board(board, cfg, {"profile": "constant:1000", "start": 1795000000}, flash)
    return Node(cfg, board, hw, problems, True, Ring(16)), hw, cfg, problems


def _load_config_interval_s():
    from wattnode import config as again  # in a frame of its own: nothing keeps it after
    return again.DEFAULTS["interval_s"]


class TestShortOfHeap(unittest.TestCase):
    def test_forget_gives_a_module_s_heap_back(self):
        """What start.py unloads after start-up (config.py, the biggest) is heap again once
        forgotten, and comes back whole at the next import (a command loads it again)."""
        if sys.platform == "webassembly":
            raise unittest.SkipTest("the WebAssembly port collects garbage only between the "
                                    "steps of its JavaScript host, not in gc.collect()")
        forget("config")
        gc.collect()
        before = gc.mem_alloc()
        self.assertEqual(_load_config_interval_s(), 10)
        gc.collect()
        loaded = gc.mem_alloc() - before
        forget("config")
        gc.collect()
        left = gc.mem_alloc() - before
        self.assertTrue(loaded > 4096 and left < loaded // 8, (loaded, left))

    def test_update_work_short_of_heap_does_not_stop_the_start(self):
        """A plug on trial after an update (ota/boot says so) whose heap cannot take the trial's
        work (ota/trial.py) on the loop's first pass does not crash: it reboots so that
        boot.py can roll the unconfirmed version back, saying why."""
        need_sockets()
        cwd = os.getcwd()
        flash = FLASH + "-ota"
        try:
            for name in os.listdir(flash + "/ota"):  # a run before this one's
                os.remove(flash + "/ota/" + name)
            os.rmdir(flash + "/ota")
        except OSError:
            pass
        fresh_dir(flash)
        os.chdir(flash)
        try:
            os.mkdir("ota")
            node, _, _, problems = _plug(flash)
            with open("ota/boot", "w") as f:
                f.write("u00000002 - trial 1 60\n")
            forget("ota")
            from wattnode.ota import resume  # noqa: F401  what says there is a trial fits
            hold = fill_heap(3072)  # no room for the trial's work (ota/trial.py, a few KiB)
            i = len(hold)
            while i:  # one 256-byte block let go: room to read ota/boot, not for a module
                i -= 1
                if hold[i] is not None and len(hold[i]) == 256:
                    hold[i] = None
                    break
            node._load_updates()  # the loop's first pass, start-up's garbage gone: no room
            hold = None
            gc.collect()
            self.assertIsNone(node.updates)
            self.assertIn("no heap left for the update's work at start-up", problems[-1])
            self.assertEqual(node.reboot_reason, "the update on trial cannot be confirmed "
                                                 "without heap")
        finally:
            os.chdir(cwd)

    def test_broadlink_short_of_heap_leaves_the_node_metering(self):
        """A plug whose heap cannot take the Broadlink protocol (about 10 KiB: its code, its
        buffers) runs on without it and says why, instead of crashing into safe mode. The
        heap is filled until 3 KiB are free, as on a plug with a big ring and little left."""
        need_sockets()
        cwd = os.getcwd()
        fresh_dir(FLASH)
        os.chdir(FLASH)
        try:
            node, hw, cfg, _ = _plug(FLASH)
            forget("broadlink")  # another test may have loaded it
            cfg["broadlink"] = "read"
            said = []
            hold = fill_heap(3072)
            node._start_broadlink(said)
            hold = None
            gc.collect()
            self.assertIsNone(node.broadlink)
            self.assertEqual(said, ["no heap left for the Broadlink protocol (about 10 KiB); "
                                    "running without it"])
            node._begin(node.keeper.now(), hw.clock.ticks_ms())  # and it meters on
            hw.clock.advance_ms((node.sampler.slot_end - hw.clock.time_s()) * 1000)
            node.meter.poll()
            node.sampler.close(node.keeper.now(), hw.clock.ticks_ms())
            self.assertEqual((node.ring.next, node.status()["power_w"]), (1, 1000.0))
        finally:
            os.chdir(cwd)

    def test_a_manifest_without_heap_is_refused_at_once_with_the_reason(self):
        """A manifest that comes when the heap cannot take the update's code is refused on ota/status,
        under the update's id, so `wattlog ota` says why at once instead of waiting for its
        timeout; the node runs on."""
        def short(node, manifest):
            hold = fill_heap(6144)
            node.on_ota(node.link.t_ota_manifest, manifest)
            hold = None
        self.refused_without_heap("0a0b0c0d", short)

    def test_a_transfer_without_heap_on_the_next_pass_is_refused_under_its_id(self):
        """A manifest is read when it comes; the transfer's code is loaded on the loop's next
        pass, once the message is gone. When the heap cannot take it then, the update is
        refused all the same, on ota/status under the update's id, and the node runs on."""
        def short(node, manifest):
            node.on_ota(node.link.t_ota_manifest, manifest)
            self.assertTrue(node.updates.taken is not None)  # read; its transfer not loaded yet
            hold = fill_heap(2048)
            node._service(False)  # the loop's next pass
            hold = None
        self.refused_without_heap("0a0b0c0e", short)

    def refused_without_heap(self, uid, short):
        """short(node, manifest) runs the plug out of heap for the update `uid`: refused on
        ota/status with the reason, the update package dropped."""
        need_sockets()
        cwd = os.getcwd()
        fresh_dir(FLASH)
        os.chdir(FLASH)
        client, server = loopback()
        try:
            node = _plug(FLASH)[0]
            node.link.mq.attach(client)
            node.link.up = True
            forget("ota")
            short(node, b'00ff\n{"id": "%s", "node": "plug-m", "serial": 7}' % uid.encode())
            gc.collect()
            self.assertIsNone(node.updates)
            status = publishes(packets(server), b"wattlog/plug-m/ota/status")
            self.assertEqual(len(status), 1, status)
            s = json.loads(status[0])
            self.assertEqual((s["id"], s["state"]), (uid, "refused"))
            self.assertIn("no heap left to take an update", s["reason"])
        finally:
            client.close()
            server.close()
            os.chdir(cwd)

    def test_a_command_without_heap_changes_nothing_and_the_plug_runs_on(self):
        """An `info` command coming when the heap is full or in pieces (it once crashed a
        plug in the limited heap right after it connected) is refused in words, counted,
        and the node carries on."""
        cwd = os.getcwd()
        fresh_dir(FLASH)
        os.chdir(FLASH)
        try:
            node = _plug(FLASH)[0]
            forget("commands", "config")
            hold = fill_heap(1024)
            node.on_cmd(b'{"cmd": "info"}')
            hold = None
            gc.collect()
            self.assertEqual((node.commands, node.bad_commands), (1, 1))
            node.on_cmd(b'{"cmd": "info"}')  # with heap again: answered
            self.assertEqual((node.commands, node.bad_commands), (2, 1))
        finally:
            os.chdir(cwd)
