"""test_stall.py - what the broker accepted but never delivered to the collector is sent again,
though the plug has nothing newer to send (issue 9 item 10, "an unexplained stall").

The cause, reproduced: mosquitto PUBACKs a QoS 1 publish once it has routed it, not once the
subscriber has it; when the collector's queue is full (max_inflight_messages +
max_queued_messages; a flood of replayed batches fills it) it drops the message for the
collector silently ("Outgoing messages are being dropped" in its log). The plug took the
PUBACK as delivery, and the collector asks for a hole only when a later batch shows it; so a
dropped last batch waited until the plug sent something newer (up to batch_wait_s, or a whole
batch_max of slots), while replays kept the collector acknowledging the same seq at every
commit.

Here the broker's queues are tiny and the collector is SIGSTOPped while a plug catches up at
high speed, so the broker drops the plug's later batches after PUBACKing them; then the
collector runs again. The plug has hourly slots and a 10-minute batch_wait_s, so it has
nothing newer to send for at least 10 minutes: each test gives it BOUND_S to get every slot
the broker accepted (a watching subscriber sees them) stored, which only a resend can do.
"""

import json
import os
import signal
import time

import pytest

from broker import Broker
from faultload import stored, stored_yet
from helpers import aligned_past
from rig import Recorder, wait_until
from wattlog.fleet.provision import COLLECTOR
from wattnode import wire

pytestmark = pytest.mark.realtime  # the SIGSTOP and the plug's ack timeout: see drop_the_tail

INTERVAL = 3600
SPEED = 36000       # 10 slots a second: real time matters here (see drop_the_tail)
BATCH_MAX = 4
SLOTS = 101         # caught up with 1 (or 2) slots unsent: the next batch is >= 2 h away
BOUND_S = 60        # far below the 600 s batch_wait_s that is the soonest the plug sends anew
SMALL_QUEUES = "max_inflight_messages 2\nmax_queued_messages 2\n"
DROPPED = "Outgoing messages are being dropped for client %s" % COLLECTOR


def batches(watch):
    """(seq, count, payload) of every batch the broker routed to the watcher (a test user: it
    reads the readings topic like the collector, but never stops)."""
    out = []
    for topic, payload in list(watch.seen):
        if topic.endswith("/readings"):
            count, _, _, seq, _, _ = wire.decode_header(payload)
            out.append((seq, count, payload))
    return out


def sent_top(watch):
    return max((seq + count for seq, count, _ in batches(watch)), default=0)


def read(path):
    with open(path) as f:
        return f.read()


def drop_the_tail(tmp_path, collectors, simnodes, node, config, while_stopped=None):
    """Run a plug against a broker with tiny queues, the collector stopped from the plug's
    first batch until the plug has caught up; returns (broker, plug, watcher, data, slots
    the broker accepted), the collector running again. Paced, not free-running: the SIGSTOP
    must land between the plug's first batch and the rest, in real time, and the plug's ack
    timeout is real time too."""
    b = Broker(str(tmp_path / "mosquitto-small"), extra_conf=SMALL_QUEUES).start()
    try:
        data = tmp_path / "data"
        c = collectors(b.url, data, commit_interval=2, password_file=b.password_file(COLLECTOR))
        c.wait_for("listening on")
        watch = Recorder(b, "wattlog/%s/#" % node, name="watch-" + node)
        start = aligned_past(SLOTS * INTERVAL, INTERVAL)
        plug = simnodes(b.port, node, "--profile", "constant:500", "--interval", INTERVAL,
                        "--speed", SPEED, "--start", start, "--then-realtime",
                        "--batch-max", BATCH_MAX,
                        "--config", json.dumps(dict(config, batch_wait_s=600)), via=b)
        wait_until("the plug's first batch", lambda: batches(watch), 30)
        os.kill(c.proc.pid, signal.SIGSTOP)
        try:
            def whole_batches():  # of the slots closed by now, those in whole batches
                produced = (int(time.time()) // INTERVAL * INTERVAL - start) // INTERVAL
                return produced - produced % BATCH_MAX
            wait_until("the plug catching up", lambda: sent_top(watch) >= whole_batches(), 60)
            wait_until("mosquitto dropping for the collector", lambda: DROPPED in read(b.log),
                       10)
        finally:
            os.kill(c.proc.pid, signal.SIGCONT)
        accepted = {start + i * INTERVAL for i in range(sent_top(watch))}
        return b, plug, watch, data, accepted
    except BaseException:
        b.stop()
        raise


def end(broker, plug, watch):
    """Stop the plug while its broker is up (else it spends its drain time trying), then
    the rest."""
    plug.stop()
    watch.close()
    broker.stop()


def wait_stored(data, node, accepted):
    """Every accepted slot stored within BOUND_S of the collector running again."""
    deadline = time.monotonic() + BOUND_S
    while True:
        missing = accepted - set(stored_yet(data, node))  # read while the collector writes
        if not missing:
            return
        if time.monotonic() > deadline:
            raise AssertionError("%d of the %d slots the broker accepted are not stored %d s "
                                 "after the collector runs again, e.g. %s"
                                 % (len(missing), len(accepted), BOUND_S, sorted(missing)[:3]))
        time.sleep(0.2)


def lacking_said(watch, node):
    """The plug's log line saying it sends again what the collector lacks, or None."""
    return next((line for line in watch.logs(node) if "the collector lacks readings" in line),
                None)


def test_a_dropped_last_batch_is_sent_again_when_no_ack_comes(tmp_path, collectors, simnodes):
    """The collector says it commits every 2 s (its answer to "online"); records the broker
    accepted and no ack covers are sent again after 3 commit intervals."""
    b, plug, watch, data, accepted = drop_the_tail(tmp_path, collectors, simnodes, "stall-t", {})
    try:
        wait_stored(data, "stall-t", accepted)
        assert "no ack for them in 6 s" in (lacking_said(watch, "stall-t") or "")
    finally:
        end(b, plug, watch)


def test_replays_do_not_hide_a_dropped_batch(tmp_path, collectors, simnodes):
    """As it happened: replayed batches keep the collector acknowledging the same seq at
    every commit. The plug's ack timeout is an hour here, so only the repeated acks can tell
    it that a commit went by without records the broker had accepted."""
    b, plug, watch, data, accepted = drop_the_tail(tmp_path, collectors, simnodes, "stall-r",
                                                   {"ack_timeout_s": 3600})
    replayer = Recorder(b, name="replay-stall-r")
    old = batches(watch)[0][2]
    try:
        deadline = time.monotonic() + BOUND_S
        while accepted - set(stored_yet(data, "stall-r")) and time.monotonic() < deadline:
            replayer.publish("wattlog/stall-r/readings", old)
            time.sleep(0.3)  # the pace of the replays, until the bounded loop ends
        wait_stored(data, "stall-r", accepted)
        assert "a commit went by without them" in (lacking_said(watch, "stall-r") or "")
    finally:
        replayer.close()
        end(b, plug, watch)
