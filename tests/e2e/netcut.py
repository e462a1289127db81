"""netcut.py - a TCP relay between simulated plugs and the broker that can cut the network the
way Wi-Fi fails: silently. During a cut every byte in either direction vanishes and new
connections are accepted but never answered (no RST, no FIN), so the plug must notice by its
own timeouts (no PUBACK, no CONNACK); when the cut heals, the stalled connections are closed
(their TCP state would have timed out) and new ones pass again.

    with Relay(broker_port) as relay:   # relay.port: give it to the plugs
        relay.cut(); ...; relay.heal()
"""

import selectors
import socket
import threading


class Relay:
    def __init__(self, upstream_port):
        self.upstream = ("127.0.0.1", upstream_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ, None)
        self.peer = {}        # socket -> its partner (None while cut)
        self.down = False
        self.lock = threading.Lock()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping = True
        self.thread.join(5)
        for s in list(self.peer):
            s.close()
        self.listener.close()

    def cut(self):
        with self.lock:
            self.down = True

    def heal(self):
        with self.lock:
            self.down = False
            for s in list(self.peer):
                self._close(s)

    def _close(self, s):
        partner = self.peer.pop(s, None)
        try:
            self.sel.unregister(s)
        except (KeyError, ValueError):
            pass
        s.close()
        if partner is not None and partner in self.peer:
            self._close(partner)

    def _accept(self):
        client, _ = self.listener.accept()
        client.setblocking(False)
        if self.down:
            self.peer[client] = None  # held open, never answered
        else:
            try:
                server = socket.create_connection(self.upstream, timeout=2)
            except OSError:
                client.close()
                return
            server.setblocking(False)
            self.peer[client], self.peer[server] = server, client
            self.sel.register(server, selectors.EVENT_READ, None)
        self.sel.register(client, selectors.EVENT_READ, None)

    def _run(self):
        while not self.stopping:
            for key, _ in self.sel.select(timeout=0.1):
                with self.lock:
                    s = key.fileobj
                    if s is self.listener:
                        self._accept()
                        continue
                    if s not in self.peer:
                        continue
                    try:
                        data = s.recv(65536)
                    except OSError:
                        data = b""
                    if not data:
                        self._close(s)
                    elif not self.down and self.peer[s] is not None:
                        try:
                            self.peer[s].sendall(data)
                        except OSError:
                            self._close(s)
                    # while down: the bytes vanish
