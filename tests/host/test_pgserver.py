"""test_pgserver.py - the private PostgreSQL the tests, benches and tools/cluster start
(tools/lib/pgserver.py): its port, picked free before it listens, may be taken meanwhile by
a test side by side; the first start moves to another, and a start that cannot succeed says
why in the server's words and leaves no folder behind. (A side-by-side run once skipped
test_pg_store for "pg_ctl failed: could not start server".)"""

import os
import socket

import pytest

pgserver = pytest.importorskip("pgserver")


def held_port():
    """A socket listening on a loopback port, as another program that took it."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def installed():
    try:
        pgserver.bin_dir()
    except pgserver.NotInstalled as e:
        pytest.skip("%s" % e)


def test_a_port_taken_before_the_first_start_is_replaced(monkeypatch):
    installed()
    with held_port() as taken:
        port = taken.getsockname()[1]
        picks = [port]
        real = pgserver.free_port
        monkeypatch.setattr(pgserver, "free_port", lambda: picks.pop() if picks else real())
        pg = pgserver.PgServer().start()
        try:
            assert pg.port != port and str(pg.port) in pg.dsn
            with socket.create_connection(("127.0.0.1", pg.port), timeout=10):
                pass  # the server listens where it says
        finally:
            pg.close()


def test_a_start_that_cannot_succeed_says_why_and_leaves_nothing(tmp_path):
    installed()
    with held_port() as taken:
        port = taken.getsockname()[1]
        pg = pgserver.PgServer(port=port)  # a port given is kept: the caller told others
        with pytest.raises(RuntimeError) as e:
            pg.start()
        said = str(e.value)
        assert "127.0.0.1:%d" % port in said and pgserver.PORT_TAKEN in said, said
        assert not os.path.exists(pg.root)
