"""wait.py - the one bounded wait every rig part and test uses: poll a predicate until it is
truthy and return that value, or fail saying what was waited for and what was seen last."""

import time


def wait_until(what, predicate, timeout_s=60.0, poll_s=0.1, alive=None):
    """predicate() until it is truthy (its value), for at most timeout_s; alive(), when given,
    is called between polls and raises when what the wait depends on has died."""
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError("waited %.0f s for %s (last: %r)" % (timeout_s, what, last))
        if alive is not None:
            alive()
        time.sleep(poll_s)


def wait_answer(what, ask, ok, timeout_s=120.0, poll_s=0.3, more=None):
    """ask() (an HTTP call, say; OSError: not listening yet) until ok(its answer), for at most
    timeout_s; the answer. Failing, it says what was asked, the last answer and more()."""
    deadline = time.monotonic() + timeout_s
    got = None
    while time.monotonic() < deadline:
        try:
            got = ask()
            if ok(got):
                return got
        except OSError:
            pass
        time.sleep(poll_s)
    raise AssertionError("%s never answered as wanted: %s%s" % (
        what, str(got)[:2000], "\n" + more() if more else ""))
