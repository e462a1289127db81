"""pgserver.py - a private PostgreSQL (Debian's, the newest /usr/lib/postgresql/*/bin) in a
temporary folder, on a free loopback port, for the cluster's tests, benches and tools/cluster.

    with PgServer(work) as pg:     # initdb, then pg_ctl start; pg.dsn: postgresql://...
        psycopg.connect(pg.dsn)    # the database "wattlog", owned by the user "wattlog"
    pg.stop(); pg.start()          # the same files and port: a test takes the database away

The port is picked free before the server listens, so another program (a test side by side)
may take it meanwhile: a first start() that finds it taken moves to another (no one has been
told it yet); a later one keeps it. A start that fails says why in the server's own words
(its log's error lines). NotInstalled (a RuntimeError) is what a caller may skip on.

PostgreSQL refuses to run as root: started by root, the server runs as the user "postgres"
(Debian's package makes it) or else "nobody", in a temporary folder of its own under /tmp
(which that user can reach; removed by close()). Authentication is scram-sha-256 with a password made here (kept in
pg.password_file, 0600), on 127.0.0.1 only; the socket lives in the same folder. Settings for
a test's server: no fsync is NOT set (the durability the collector relies on is the real one);
nothing of the collectors' leases either (each sets its own session's idle timeouts).
"""

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile

from broker import free_port

START_S = 60
PORT_TRIES = 3
PORT_TAKEN = "Address already in use"


class NotInstalled(RuntimeError):
    """No PostgreSQL on this machine (tools/setup installs it)."""


def bin_dir():
    base = "/usr/lib/postgresql"
    try:
        versions = sorted((v for v in os.listdir(base) if v.isdigit()), key=int)
    except FileNotFoundError:
        versions = []
    if not versions:
        raise NotInstalled("PostgreSQL is not installed: run tools/setup")
    return os.path.join(base, versions[-1], "bin")


def _runner():
    """(argv prefix, uid, gid) to run the server's programs as: ourselves, or a user of its own
    when we are root."""
    if os.geteuid() != 0:
        return [], os.getuid(), os.getgid()
    for name in ("postgres", "nobody"):
        try:
            user = pwd.getpwnam(name)
        except KeyError:
            continue
        return ["runuser", "-u", name, "--"], user.pw_uid, user.pw_gid
    raise RuntimeError("run as root, PostgreSQL needs a user of its own (postgres or nobody)")


class PgServer:
    def __init__(self, work=None, port=None, user="wattlog", database="wattlog"):
        """work: a folder for the server's files; by default (and always when the server runs
        as a user of its own, which must reach them) a temporary folder of its own."""
        self._as, uid, gid = _runner()
        if work is None or self._as:
            self.root = tempfile.mkdtemp(prefix="wattlog-pg-")
        else:
            self.root = os.path.join(str(work), "pg")
            os.makedirs(self.root, exist_ok=True)
        os.chmod(self.root, 0o755)
        self.data = os.path.join(self.root, "data")
        self.sock = os.path.join(self.root, "sock")
        self._own_port = port is None  # picked here: ours to change until the first start
        self._started = False
        self.user, self.database = user, database
        self.password = secrets.token_urlsafe(18)
        self.password_file = os.path.join(self.root, "db.password")
        fd = os.open(self.password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.password + "\n")
        self.log_path = os.path.join(self.sock, "postgres.log")  # the server's user writes it
        self.bin = bin_dir()
        for d in (self.data, self.sock):
            os.makedirs(d, mode=0o700, exist_ok=True)
            os.chown(d, uid, gid)
        pw = os.path.join(self.sock, "initpw")
        with open(pw, "w") as f:
            f.write(self.password + "\n")
        os.chown(pw, uid, gid)
        self._run("initdb", "-D", self.data, "-U", user, "--auth=scram-sha-256",
                  "--pwfile=" + pw, "-E", "UTF8", "--locale=C")
        os.unlink(pw)
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("listen_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\n"
                    "max_connections = 200\nshared_buffers = '128MB'\n" % self.sock)
        self._set_port(port or free_port())

    def _set_port(self, port):
        """Listen on port: postgresql.conf's last "port" line is the one that counts."""
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("port = %d\n" % port)
        self.port = port
        self.dsn = "postgresql://%s@127.0.0.1:%d/%s" % (self.user, port, self.database)

    def _run(self, program, *args, ok=()):
        done = subprocess.run(self._as + [os.path.join(self.bin, program)] + list(args),
                              capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, PGPASSWORD=self.password))
        said = (done.stderr or done.stdout).strip()
        if done.returncode != 0 and not any(words in said for words in ok):
            raise RuntimeError("%s failed: %s" % (program, said))
        return done

    def start(self):
        for tries in range(PORT_TRIES, 0, -1):
            seen = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
            done = self._run("pg_ctl", "-D", self.data, "-l", self.log_path, "-w", "-t",
                             str(START_S), "start", ok=("could not start server",))
            if done.returncode == 0:
                break
            said = self._log_errors(seen)
            if not (self._own_port and not self._started and tries > 1 and PORT_TAKEN in said):
                if not self._started:  # its folder goes: nobody will close() it
                    self.close()
                raise RuntimeError("PostgreSQL did not start on 127.0.0.1:%d: %s"
                                   % (self.port, said or "its log says nothing"))
            self._set_port(free_port())  # taken since it was picked: another, as the broker does
        self._started = True
        self._run("createdb", "-h", self.sock, "-p", str(self.port), "-U", self.user,
                  self.database, ok=("already exists",))
        return self

    def _log_errors(self, offset):
        """The error lines (FATAL, ERROR, could not ...) the server logged after offset (bytes),
        in one line."""
        try:
            with open(self.log_path, errors="replace") as f:
                f.seek(offset)
                lines = f.read().splitlines()
        except OSError:
            return ""
        bad = [ln.split("] ", 1)[-1].strip() for ln in lines  # less its time and pid
               if "FATAL" in ln or "ERROR" in ln or "could not" in ln]
        return "; ".join(bad[-3:])

    def stop(self, mode="fast"):
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            self._run("pg_ctl", "-D", self.data, "-m", mode, "-w", "stop")

    def connect_env(self):
        """The environment a client (psql, the collector) logs in with: the password file."""
        return dict(os.environ, PGPASSWORD=self.password)

    def close(self):
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

