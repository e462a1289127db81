"""wear.py - what the plug's flash wears, measured: the node's own ring, spill, RTC memory and
energy checkpoints on littlefs v2 over a simulated 4 MB ESP32 flash that counts every program
and erase (lib/wattsim/flash.py), driven slot by slot for a year of node time. Run by
tools/bench/wear on the MicroPython unix port (its VfsLfs2 is the ESP32's littlefs code).

    tools/bench/wear [--months N]      (default 12: a year, about 5 minutes)

1. The file system as a plug has it: the 1920 KiB littlefs of a 4 MB ESP32, holding what
   tools/deploy puts there (build/device: boot.py, main.py, lib/) and two more copies of the
   node as over-the-air updates keep them (ota/u<id>/: the running and the previous
   version). What they take is printed, and what an update's staging takes: the spill
   (the board's spill_kib, and spill.RESERVE_KIB left free) must fit beside them; the staging
   shares the spill's room (an update is refused while an outage's readings fill it).
2. The plug of boards/shelly-plus-plug-s.json (its ring_kib and spill_kib). Each month of
   30 days: a week without the collector (7 x 8640 slots, no ack: the spill
   writes a segment every 126 slots), then the collector back (every reading sent, oldest
   first from the flash, acknowledged as it commits: the spill's files deleted), then 23
   days of normal running (an ack every 30 slots: the collector's 5 min commits). The energy
   total at 500 W is checkpointed as energy.py does (at most every 6 h and 100 Wh).
3. Printed: bytes programmed and blocks erased per day of normal running and per outage;
   over the run, the erases of the most erased block and the mean per block, and the years
   a block lasts at 100,000 erase cycles with an outage every month.
"""

import json
import os
import sys

from wattnode import board, spill, spillboot
from wattnode.energy import EnergyStore
from wattnode.keep import Keep
from wattnode.ring import Ring
from wattnode.spill import Spill
from wattsim.board import MemoryRTC
from wattsim.flash import Flash

SLOTS_PER_DAY = 8640          # 10 s slots
OUTAGE_DAYS = 7
MONTH_DAYS = 30
ACK_EVERY = 30                # slots between acks in normal running (5 min commits)
BOARD = "boards/shelly-plus-plug-s.json"
# what else a plug keeps on its flash (name, bytes at most): config, board, energy checkpoint,
# crash log and counter, update pointer, serial and result
SMALL_FILES = (("config.json", 900), ("board.json", 1200), ("energy.json", 80),
               ("crash.log", 4096), ("crashes", 2), ("ota/boot", 40), ("ota/serial", 12),
               ("ota/result", 300))
ENDURANCE = 100000
BUILD = "build/device"


def copy_tree(src, dst):
    """src (a folder of the host) into dst on the flash; bytes copied."""
    try:
        os.mkdir(dst)
    except OSError:
        pass
    n = 0
    for name in os.listdir(src):
        s, d = src + "/" + name, dst + "/" + name
        if os.stat(s)[0] & 0x4000:
            n += copy_tree(s, d)
        else:
            with open(s, "rb") as f:
                data = f.read()
            with open(d, "wb") as f:
                f.write(data)
            n += len(data)
    return n


def remove_tree(path):
    if os.stat(path)[0] & 0x4000:
        for name in os.listdir(path):
            remove_tree(path + "/" + name)
        os.rmdir(path)
    else:
        os.remove(path)


def used_kib():
    st = os.statvfs("/flash")
    return (st[2] - st[3]) * st[0] // 1024


class Plug:
    """The node's parts that touch the flash, wired as node.py wires them."""

    def __init__(self):
        rtc = MemoryRTC()  # what survives a reset is not this bench's business
        keep = Keep(rtc)
        self.energy = EnergyStore(rtc, 100, 21600, "/flash", image=keep.image)
        self.energy.load()
        self.energy.settle(0, 0)
        with open(BOARD) as f:
            b = json.load(f)
        self.ring = Ring(board.ring_kib(b) * 1024 // 16)
        self.spill = Spill(keep, board.spill_kib(b) // 4, "/flash/spill", print)
        self.ring.behind = self.spill
        spillboot.boot(self.spill, self.ring, 10)
        self.slot = 0

    def run(self, slots, ack_every=0):
        ring, energy = self.ring, self.energy
        for _ in range(slots):
            t = self.slot * 10
            wh = self.slot * 500 * 10 // 3600
            ring.append(t, 5000, wh, 23000, 2170)
            energy.slot(wh, 0, t)
            self.slot += 1
            if ack_every and self.slot % ack_every == 0:
                ring.sent_to(ring.next)
                ring.release(ring.next)

    def replay(self, batches_per_ack=64):
        """The collector back: everything sent, oldest first, acked every few batches."""
        ring = self.ring
        ring.rewind(ring.first)
        k = 0
        while ring.unsent():
            n = ring.peek(64)
            ring.sent_to(ring.sent + n)
            k += 1
            if k % batches_per_ack == 0:
                ring.release(ring.sent)
        ring.release(ring.next)


def main():
    months = int(sys.argv[sys.argv.index("--months") + 1]) if "--months" in sys.argv else 12
    if months < 1:
        sys.exit("tools/bench/wear: --months takes a whole number of at least 1")
    flash = Flash()
    flash.mount("/flash")
    node_bytes = copy_tree(BUILD, "/flash")
    node_kib = used_kib()
    for uid in ("u00000001", "u00000002"):  # the running and the previous update
        copy_tree(BUILD + "/lib", "/flash/ota")
        os.rename("/flash/ota/wattnode", "/flash/ota/" + uid)
    for name, size in SMALL_FILES:
        with open("/flash/" + name, "wb") as f:
            f.write(bytes(size))
    all_kib = used_kib()
    copy_tree(BUILD + "/lib", "/flash/ota/stage")  # an update's staging, at its fullest
    staging_kib = used_kib() - all_kib
    total_kib = flash.blocks * flash.block_size // 1024
    with open(BOARD) as f:
        spill_kib = board.spill_kib(json.load(f))
    print("file system: %d KiB littlefs; the node's files (%d bytes) take %d KiB; with two update "
          "versions and the plug's small files %d KiB; free beside them %d KiB: the board's "
          "spill, %d KiB, and spill.RESERVE_KIB, %d (an update's staging, %d KiB, shares the "
          "spill's room: it fits when the spill is empty, as when the collector answers)"
          % (total_kib, node_bytes, node_kib, all_kib, total_kib - all_kib, spill_kib,
             spill.RESERVE_KIB, staging_kib))
    remove_tree("/flash/ota/stage")  # the update is done: the year runs beside the two versions
    base = list(flash.erases)
    plug = Plug()
    normal = [0, 0, 0]    # days, bytes, erases
    outage = [0, 0, 0]    # outages, bytes, erases (the replay's deletes included)
    for month in range(months):
        b0, e0 = flash.counts()
        plug.run(OUTAGE_DAYS * SLOTS_PER_DAY)
        held, size, _ = plug.spill.held(plug.ring)
        plug.replay()
        b1, e1 = flash.counts()
        outage[0] += 1
        outage[1] += b1 - b0
        outage[2] += e1 - e0
        plug.run((MONTH_DAYS - OUTAGE_DAYS) * SLOTS_PER_DAY, ACK_EVERY)
        b2, e2 = flash.counts()
        normal[0] += MONTH_DAYS - OUTAGE_DAYS
        normal[1] += b2 - b1
        normal[2] += e2 - e1
        print("month %2d: outage of %d days: %d readings on the flash in %d KiB of files, %d "
              "segments written in all, %d dropped; %d KiB programmed, %d blocks erased; then "
              "%d days normal: %d bytes, %d erases" % (
                  month + 1, OUTAGE_DAYS, held, size // 1024, plug.spill.writes,
                  plug.ring.dropped, (b1 - b0) // 1024, e1 - e0, MONTH_DAYS - OUTAGE_DAYS,
                  b2 - b1, e2 - e1))
    worn = [flash.erases[i] - base[i] for i in range(flash.blocks)]
    days = months * MONTH_DAYS
    most = max(worn)
    per_year = most * 365 / days
    print("normal running (collector up): %.0f bytes programmed and %.2f blocks erased a day "
          "(energy checkpoints; the spill writes nothing)"
          % (normal[1] / normal[0], normal[2] / normal[0]))
    print("a %d-day outage and its replay: %.0f KiB programmed (%.0f KiB a day), %.0f blocks "
          "erased (%.0f a day)" % (OUTAGE_DAYS, outage[1] / outage[0] / 1024,
                                  outage[1] / outage[0] / 1024 / OUTAGE_DAYS,
                                  outage[2] / outage[0], outage[2] / outage[0] / OUTAGE_DAYS))
    print("over %d days with an outage a month: the most erased block %d times, the mean %.1f "
          "(%d blocks erased at least once); %.1f erases a year for the most erased block: "
          "%.0f years to %d cycles" % (days, most, sum(worn) / len(worn),
                                       sum(1 for w in worn if w), per_year,
                                       ENDURANCE / per_year if per_year else float("inf"),
                                       ENDURANCE))


main()
