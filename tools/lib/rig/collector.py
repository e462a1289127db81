"""collector.py - `wattlog collect` in its own process, as the README runs it, for a test, a
bench or the demo.

    c = Collector(broker.url, data, commit_interval=1)       # from flags
    c = Collector(config="wattlog.toml")                      # from a config file alone
    c = Collector(broker.url, data, store=pg, listen=True)    # into PostgreSQL, with HTTP
    c.wait_for("listening on"); c.http_url; c.log(); c.stop() -> its exit status

The broker password comes from a password file (by default the one the Broker of that url
wrote for the collector), never from the command line; so does PostgreSQL's (store: a
tools/lib/pgserver.PgServer, or anything with .dsn and .password_file). The log (stdout and
stderr) goes to a file, <data>.log unless told; restart() starts the same command again,
appending to it, and wait_for() reads only what the newest process wrote.
"""

import os
import signal
import subprocess
import sys

from broker import Broker, free_port
from rig.wait import wait_until


class Collector:
    def __init__(self, url=None, data=None, commit_interval=None, password_file=None, args=(),
                 *, config=None, store=None, listen=None, status_interval=None, log_path=None,
                 wrap=(), env=None, cwd=None, new_session=False, preexec_fn=None, start=True):
        """url, data: --broker and --data, with --commit-interval (default 300) and
        --status-interval (default 2); config: --config FILE first, then only the flags given.
        listen: True (a free loopback port) or a port: --listen 127.0.0.1:PORT. store:
        PostgreSQL instead of the files. wrap: a command to run the collector under (a
        profiler). args: more flags, last. env, cwd, new_session (a session of its own: a
        Ctrl-C at the terminal does not reach it) and preexec_fn go to its Popen."""
        argv = []
        if config is not None:
            argv += ["--config", str(config)]
        if url is not None:
            password_file = password_file or Broker.collector_password_file(url)
            argv += ["--broker", url] + (["--password-file", str(password_file)]
                                         if password_file else [])
        if data is not None:
            argv += ["--data", str(data)]
        if config is None:  # flags alone: the tests' pace unless told
            commit_interval = 300 if commit_interval is None else commit_interval
            status_interval = 2 if status_interval is None else status_interval
        if commit_interval is not None:
            argv += ["--commit-interval", str(commit_interval)]
        if status_interval is not None:
            argv += ["--status-interval", str(status_interval)]
        if store is not None:
            argv += ["--store", store.dsn, "--store-password-file", store.password_file]
        self.port = None
        if listen:
            self.port = free_port() if listen is True else int(listen)
            argv += ["--listen", "127.0.0.1:%d" % self.port]
        self.http_url = "http://127.0.0.1:%d" % self.port if self.port else None
        self.data = None if data is None else str(data)
        self.argv = ([sys.executable] + [str(w) for w in wrap] + ["-m", "wattlog.cli", "collect"]
                     + argv + [str(a) for a in args])
        self.log_path = str(log_path or (self.data + ".log" if self.data else
                                         os.path.splitext(str(config))[0] + ".log"))
        self._popen = dict(env=env, cwd=cwd, start_new_session=new_session,
                           preexec_fn=preexec_fn)
        self.proc = self._log = None
        self._since = 0
        open(self.log_path, "w").close()
        if start:
            self.start()

    def start(self):
        """Start the process (again, after stop() or kill(): the same command, the log appended)."""
        self._since = os.path.getsize(self.log_path)
        self._log = open(self.log_path, "a")
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                     **self._popen)
        return self

    restart = start

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def _newest(self):
        with open(self.log_path) as f:
            f.seek(self._since)
            return f.read()

    def alive(self):
        """Raises (with the log) if the process has ended."""
        if self.proc.poll() is not None:
            raise AssertionError("the collector exited with status %d:\n%s"
                                 % (self.proc.returncode, self.log()))

    def wait_for(self, text, timeout_s=20.0):
        """Until the newest process's log says text; fails at once if it exits first."""
        try:
            wait_until("the collector's log to say %r" % text, lambda: text in self._newest(),
                       timeout_s, poll_s=0.05, alive=self.alive)
        except AssertionError:
            raise AssertionError("collector log never said %r:\n%s" % (text, self.log())) from None

    def wait_until(self, what, predicate, timeout_s=60.0, poll_s=0.2):
        """rig.wait_until, failing at once (with the log) if the collector dies meanwhile."""
        return wait_until(what, predicate, timeout_s, poll_s, alive=self.alive)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s=30):
        """SIGTERM, as systemd sends it; the exit status."""
        if self.running():
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        finally:
            self._log.close()

    def kill(self):
        """SIGKILL (a power cut of its machine, or the end of a test that failed)."""
        if self.running():
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()
            self._log.close()
        return self.proc.returncode if self.proc is not None else None
