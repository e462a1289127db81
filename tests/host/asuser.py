"""asuser.py - `wattlog` run as another user, for the tests that check what a user without
root is told: cli.main(argv) in a forked child that has dropped root for that user. It runs
the code this interpreter has loaded already (the interpreter's own files may lie under
/root, which the user may not enter)."""

import os
import sys


def run_as(user, argv):
    """(exit status, what it printed on stdout and stderr, in order) of cli.main(argv) run as
    `user` (a pwd entry)."""
    from wattlog import cli
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 0
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            os.dup2(write, 1)
            os.dup2(write, 2)
            sys.stdout = sys.stderr = os.fdopen(1, "w")
            cli.main(argv)
        except SystemExit as e:
            status = 1 if isinstance(e.code, str) else e.code or 0
            if isinstance(e.code, str):
                sys.stderr.write(e.code + "\n")
        finally:
            sys.stdout.flush()
            os._exit(status)
    os.close(write)
    with os.fdopen(read) as f:
        out = f.read()
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), out
