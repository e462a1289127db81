"""durable.py - replace a small JSON file so that a crash leaves the old or the new, never half.

write temp file in the same directory -> fsync it -> rename over the target -> fsync the
directory (the rename itself is only durable once the directory is).
"""

import json
import os

from wattlog.phpfina import fsync_dir


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def read_json(path):
    """The file's object, or None when it does not exist; ValueError if it is not JSON."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
