"""flash.py - a plug's flash as littlefs on an ESP32 sees it, with every program and erase
counted: what tools/bench/wear and the spill's device tests measure wear on.

On an ESP32, MicroPython mounts littlefs v2 (vfs.VfsLfs2, its default read, program and
lookahead sizes) on the "vfs" partition, an esp32.Partition: a block device with 4 KiB
blocks whose extended interface littlefs drives - readblocks(n, buf, off),
writeblocks(n, buf, off) (a program: flash bits go from 1 to 0 only) and ioctl(6, n) (erase
block n: all bits to 1). Flash wears by erases: about 100,000 per block (REFERENCE.md).

Flash is that device on the unix port, over a bytearray: the same littlefs code (MicroPython's
extmod, the ESP32's) makes the same calls, and Flash counts them: `programmed` (bytes),
`erases` (per block, an array, and `erased` in all). It refuses what
would wear a real flash unseen: programming bytes not erased since they were last programmed
(ValueError: littlefs never does it). mount(path) formats it (as a blank ESP32's
inisetup.py does) and mounts it there.

Unix port only (vfs.VfsLfs2); the node never imports it.
"""

from array import array

import vfs

BLOCK_SIZE = 4096
FS_BLOCKS = 480  # 1920 KiB: a 4 MB ESP32 with MicroPython's partitions-4MiBplus


class Flash:
    def __init__(self, blocks=FS_BLOCKS, block_size=BLOCK_SIZE):
        self.block_size = block_size
        self.blocks = blocks
        self.data = bytearray(b"\xff" * (blocks * block_size))
        self._erased = b"\xff" * block_size
        self.erases = array("I", bytes(4 * blocks))
        self.erased = 0
        self.programmed = 0
        self.programs = 0

    def readblocks(self, n, buf, off=0):
        a = n * self.block_size + off
        buf[:] = self.data[a:a + len(buf)]

    def writeblocks(self, n, buf, off=0):
        a = n * self.block_size + off
        if self.data[a:a + len(buf)] != self._erased[:len(buf)]:
            raise ValueError("block %d: programming bytes at %d not erased since" % (n, off))
        self.data[a:a + len(buf)] = buf
        self.programmed += len(buf)
        self.programs += 1

    def ioctl(self, op, arg):
        if op == 4:
            return self.blocks
        if op == 5:
            return self.block_size
        if op == 6:
            a = arg * self.block_size
            self.data[a:a + self.block_size] = self._erased
            self.erases[arg] += 1
            self.erased += 1
        return 0

    def mount(self, path):
        vfs.VfsLfs2.mkfs(self)
        vfs.mount(vfs.VfsLfs2(self), path)

    def counts(self):
        """(bytes programmed, blocks erased) so far."""
        return self.programmed, self.erased
