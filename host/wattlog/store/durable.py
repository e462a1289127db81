"""durable.py - replace a small file so that a crash leaves the old or the new, never half, and
a secret is never readable by anyone else, not even for an instant.

write temp file in the same directory -> fsync it -> rename over the target -> fsync the
directory (the rename itself is only durable once the directory is).

The temp file is created with its final mode (os.open with O_EXCL and `mode`, after removing
a stale temp file left by a crash, whose mode could be anything): a secret is written with
mode 0o600 and never passes through 0o644. `group` (a gid) is given to the temp file before
it is renamed, for the files a service of that group must read (provision.py): the file is
created for its owner only, and gets the group's bits only once it belongs to that group.
"""

import json
import os


def fsync_dir(path):
    """Make the names in a directory durable (a rename or a new file is only durable once its
    directory is)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create(path, mode):
    """A new file opened for writing, created with `mode` (less the umask): any file already
    at `path` is removed first, so no old file's mode is inherited."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode), "wb")


def write_bytes(path, data, mode=0o666, group=None, sync_dir=True):
    tmp = path + ".tmp"
    with create(tmp, mode if group is None else mode & 0o700) as f:  # the group's bits once
        f.write(data)                                                # the group is right
    install(tmp, path, mode, group, sync_dir)


def install(tmp, path, mode, group=None, sync_dir=True):
    """Give the finished temp file `group` (and `mode` again: the umask may have taken the
    group's bits), fsync it, rename it over `path`, fsync the directory (unless sync_dir is
    False: then the caller does, once for many files)."""
    fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if group is not None:
            os.fchown(fd, -1, group)
            os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync_dir:
        fsync_dir(os.path.dirname(os.path.abspath(path)))


def write_json(path, obj, mode=0o666, group=None):
    write_bytes(path, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode(), mode, group)


def read_json(path):
    """The file's object, or None when it does not exist; ValueError if it is not JSON."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
