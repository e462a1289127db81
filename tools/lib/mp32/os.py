"""os.py - the WebAssembly port's os, plus what the node's code and tests use that it lacks
(tools/lib/mp32.mjs puts this folder on sys.path; the port's built-in os stays underneath).

    getenv(name)   as on the unix port: node's environment, handed over by the runner
    urandom(n)     as on an ESP32: n random bytes (the port seeds random from the host)
"""

from uos import *  # noqa: F401,F403  (the port's own os: listdir, stat, remove, ...)

import random

_environ = {}  # filled in by tools/lib/mp32.mjs before the script starts


def getenv(name, default=None):
    return _environ.get(name, default)


def urandom(n):
    return bytes(random.getrandbits(8) for _ in range(n))
