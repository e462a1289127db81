"""proctree.py - the processes below a process, read from /proc (each task's children list,
followed down): what a tool started, for a test that checks it stopped them all, or a bench
that sums their CPU."""

import os


def descendants(pid):
    """Every process below `pid` now (not pid itself)."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            for task in os.listdir("/proc/%d/task" % p):
                with open("/proc/%d/task/%s/children" % (p, task)) as f:
                    kids = [int(k) for k in f.read().split()]
                out.update(kids)
                todo += kids
        except OSError:
            continue  # it ended meanwhile
    return out
