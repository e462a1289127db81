"""usocket.py - the name umqtt.simple imports: the same no-sockets module as socket.py."""

from socket import *  # noqa: F401,F403
