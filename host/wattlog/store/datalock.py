"""datalock.py - one writer per data directory: an exclusive lock held for the process's life.

<data>/lock holds the PID of the process that writes the directory (the collector, or
`wattlog repair`). The lock is flock(2) on that file, so it goes when the process goes, even
by SIGKILL or a power cut: a stale PID in the file never keeps anyone out. Two collectors on
one directory would each create and extend the same feeds (shifted starts, false losses):
the second is refused with one line naming the first one's PID. Readers (feeds, export,
nodes) take no lock: they never write.
"""

import fcntl
import os

FILE = "lock"


class Locked(Exception):
    pass


def lock(data_dir, what="collector"):
    """Take the directory's lock; returns the open file descriptor, which holds it until it is
    closed or the process ends. Locked names the holder when another process has it."""
    path = os.path.join(data_dir, FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode("ascii", "replace").split()
        os.close(fd)
        raise Locked("%s is in use by another wattlog process (PID %s); stop it first: two "
                     "writers would corrupt the feeds" % (data_dir, holder[0] if holder
                                                         else "unknown")) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, ("%d %s\n" % (os.getpid(), what)).encode(), 0)
    return fd


def holder(data_dir):
    """The PID (text) of the process that writes `data_dir` now, or None when none does. It
    takes the lock shared for an instant, which a writer's exclusive lock refuses; it needs
    only read access to the lock file."""
    try:
        fd = os.open(os.path.join(data_dir, FILE), os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        said = os.pread(fd, 64, 0).decode("ascii", "replace").split()
        return said[0] if said else "unknown"
    finally:
        os.close(fd)
    return None
