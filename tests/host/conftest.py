"""conftest.py - what host tests share: one private PostgreSQL for the session (tools/lib/
pgserver.py), and a database of its own for each test that asks for one. Without PostgreSQL
(tools/setup installs it) the tests that need it are skipped, saying why.
"""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools" / "lib"))


@pytest.fixture(scope="session")
def pg_server():
    """A private PostgreSQL on a free loopback port, for the whole session."""
    pgserver = pytest.importorskip("pgserver")
    try:
        server = pgserver.PgServer().start()
    except pgserver.NotInstalled as e:  # one that fails to start fails the tests
        pytest.skip("%s" % e)
    yield server
    server.close()


@pytest.fixture
def pg_database(request, pg_server):
    """(dsn, password) of a database made empty for this test on the session's server."""
    import psycopg
    name = "t%d" % (abs(hash(request.node.nodeid)) % 10 ** 9)
    with psycopg.connect(pg_server.dsn, password=pg_server.password, autocommit=True) as c:
        c.execute('DROP DATABASE IF EXISTS "%s"' % name)
        c.execute('CREATE DATABASE "%s"' % name)
    return pg_server.dsn.rsplit("/", 1)[0] + "/" + name, pg_server.password
