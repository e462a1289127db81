"""terminal.py - a program run on a pseudo-terminal, as a person runs it, answering its password
prompts; for the provisioning tests here and tests/e2e/test_pi_install.py."""

import os
import time


def at_a_terminal(argv, answers, env=None):
    """Run argv on a pseudo-terminal, answering each password prompt in turn; (exit status,
    everything the terminal showed)."""
    import pty
    import select
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(argv[0], argv, os.environ if env is None else env)
    shown, answers, answered = b"", list(answers), 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not select.select([fd], [], [], 1)[0]:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child has gone: EIO on Linux
            break
        if not chunk:
            break
        shown += chunk
        if answers and shown[answered:].rstrip().endswith(b":"):  # a new prompt
            os.write(fd, answers.pop(0).encode() + b"\n")
            answered = len(shown)
    else:
        os.kill(pid, 9)  # it never ended: the assertions below say what it showed
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), shown.decode(errors="replace")
