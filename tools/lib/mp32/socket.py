"""socket.py - the WebAssembly port has no sockets: this module says so.

Modules that only import socket (umqtt.simple does so at load, the node's link through it)
load as they would on a plug; making a socket raises OSError(EOPNOTSUPP), as a port without
networking would. Tests that need a socket skip themselves on this port and say so
(tests/device/rig.py need_sockets()). Put on sys.path by tools/lib/mp32.mjs only.
"""

import errno

AF_INET = 2
SOCK_STREAM = 1
SOL_SOCKET = 1
SO_REUSEADDR = 4
IPPROTO_TCP = 6


def _none(*args, **kwargs):
    raise OSError(errno.EOPNOTSUPP)


socket = getaddrinfo = _none
