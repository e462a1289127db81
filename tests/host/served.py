"""served.py - the HTTP API on a real aiohttp server on a free loopback port over a real data
directory (store.Store: COMMITTED slots committed, PENDING more pending), asked with urllib;
shared by the host tests of the API, the page and the metrics."""

import json
import os
import urllib.error
import urllib.request

from batches import T0, batch
from wattlog.complaints import Complaints
from wattlog.serve.app import Api, Server, read_first_line
from wattlog.serve.plugwatch import PlugWatch
from wattlog.store.files import Store

TOKEN = "a-token-of-the-right-length-0123456789"
COMMITTED = 60     # slots committed; 40 more pending
PENDING = 40


def records(first, n):
    return [(T0 + 10 * (first + i), 100 + first + i, 1000 + first + i, 230.0, 0.5)
            for i in range(n)]


class Served:
    def __init__(self, tmp_path, token=TOKEN, read_open=True, operator=None, broker_link=None):
        self.store = Store(str(tmp_path / "data"), Complaints())
        self.store.recover({})
        self.store.take("wattlog/plug-1/readings", batch(records(0, COMMITTED)))
        self.store.commit()
        self.store.take("wattlog/plug-1/readings", batch(records(COMMITTED, PENDING),
                                                         seq=COMMITTED))
        self.watch = PlugWatch("wattlog")
        token_file = None
        if token is not None:
            token_file = str(tmp_path / "http.token")
            fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, (token + "\n").encode())
            os.close(fd)
        self.server = Server(Api(
            self.store, self.watch, broker_url="mqtt://u@127.0.0.1:9", read_open=read_open,
            token=read_first_line(token_file, "HTTP token") if token_file else None,
            operator_password=read_first_line(operator, "operator password") if operator
            else None, broker_link=broker_link), "127.0.0.1:0")
        assert self.server.start()

    def call(self, path, body=None, token=None):
        headers = {"Authorization": "Bearer " + token} if token is not None else {}
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.server.port, path),
                                     headers=headers,
                                     data=None if body is None else json.dumps(body).encode())
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, raw, kind = r.status, r.read(), r.headers["Content-Type"]
        except urllib.error.HTTPError as e:
            status, raw, kind = e.code, e.read(), e.headers["Content-Type"]
        return status, json.loads(raw) if "json" in kind else raw.decode()

    def close(self):
        self.server.stop()
        self.store.close()
