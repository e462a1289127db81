"""commitfile.py - <data>/commit.json: what was committed and acknowledged, and whether to
believe it.

  {"version": 1, "commit": <number>, "time": <unix s>, "clean": <true after a clean stop>,
   "feeds": {"<feed id>": <committed npoints>, ...},
   "stale": {"<feed id>": <the lowest slot rewritten below its summaries since they were
                          last flushed (rollup.py)>, ...},
   "nodes": {"<node>": {"boot": <u32>, "seq": <acknowledged, u32>, "lost", "gaps", "dropped",
                        "counted", "boots": <counts>, "last_seen": <unix s or null>}}}

commit.py writes it atomically after every commit (the "nodes" entries are nodes.py's, in the
same replace as the lengths, so an ack never says more than the files hold). `commit` counts
commits, and every ack the collector publishes carries it: the acks the broker retains then
say which commit.json the plugs last heard of. check_state() reads the whole shape before
anything is done with it; newer_acks() says what the retained acks know that it does not (a
file restored from a backup, rolled back, or written by an older run).
"""

import time

from wattlog.store.feeds import NODE_ID

FILE = "commit.json"
_U32 = 1 << 32


def when(t):
    """Unix seconds as people read them in a log."""
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(t))


def count(v, low=0, high=None):
    """v is a whole number (not a bool) in [low, high)."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= low and (high is None or v < high)


def check_state(doc):
    """None if commit.json's object `doc` has the whole shape above, else a sentence saying
    what is wrong with it."""
    if not isinstance(doc, dict):
        return "it is %s, not an object" % type(doc).__name__
    if doc.get("version") != 1:
        return "its version is %r, not 1" % (doc.get("version"),)
    if not count(doc.get("commit", 0)) or not count(doc.get("time", 0)):
        return "its commit number or time is not a whole number"
    feeds, nodes = doc.get("feeds"), doc.get("nodes", {})
    if not isinstance(feeds, dict):
        return "its \"feeds\" is not an object of feed lengths"
    for fid, n in feeds.items():
        if not fid.isdigit() or not count(n):
            return "feed %r has the length %r" % (fid, n)
    if not isinstance(nodes, dict):
        return "its \"nodes\" is not an object"
    stale = doc.get("stale", {})
    if not isinstance(stale, dict) or not all(k.isdigit() and count(v) for k, v in stale.items()):
        return "its \"stale\" is not an object of slot numbers"
    if not isinstance(doc.get("clean", False), bool):
        return "its \"clean\" is not true or false"
    for node, d in nodes.items():
        if not NODE_ID.match(node) or not isinstance(d, dict):
            return "the entry for node %r is not a node's state" % node
        if not count(d.get("boot"), 0, _U32) or not count(d.get("seq"), 0, _U32):
            return "node %s has the boot/seq %r/%r" % (node, d.get("boot"), d.get("seq"))
        for key in ("lost", "gaps", "dropped", "boots"):
            if not count(d.get(key, 0)):
                return "node %s has %s %r" % (node, key, d.get(key))
        if d.get("last_seen") is not None and not count(d["last_seen"]):
            return "node %s has last_seen %r" % (node, d["last_seen"])
    return None


def newer_acks(state, acks):
    """The retained acks (node -> ack) that commit.json `state` does not account for: acks of a
    later commit, or of seqs past what it says it acknowledged. [sentence per node]."""
    gen = state.get("commit", 0)
    nodes = state.get("nodes", {})
    out = []
    for node, ack in sorted(acks.items()):
        mine = nodes.get(node)
        if count(ack.get("commit")) and ack["commit"] > gen:
            out.append("%s was told seq %d of boot %08x by commit %d" % (
                node, ack["seq"], ack["boot"], ack["commit"]))
        elif mine is None:
            out.append("%s was told seq %d of boot %08x, and commit.json does not know it"
                       % (node, ack["seq"], ack["boot"]))
        elif mine["boot"] == ack["boot"] and ack["seq"] > mine["seq"]:
            out.append("%s was told seq %d of boot %08x, commit.json says %d"
                       % (node, ack["seq"], ack["boot"], mine["seq"]))
        elif mine["boot"] != ack["boot"] and ack.get("time", 0) > state.get("time", 0):
            out.append("%s was told seq %d of boot %08x at %s, after commit.json was written"
                       % (node, ack["seq"], ack["boot"], when(ack["time"])))
    return out
