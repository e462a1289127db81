"""recorder.py - a paho client that subscribes to topics and records every message, in the
order the broker delivered them, for a test to wait on:

    with Recorder(broker, "wattlog/plug-1/#") as rec:     # connected and subscribed here
        rec.wait(lambda: len(rec.states("plug-1")) >= 6, "six states")   # any condition
        payload, retain = rec.next("wattlog/plug-1/status", lambda p: p == b"online")
        rec.until("wattlog/plug-1/log", b"marker")   # everything before that message
        rec.publish("wattlog/plug-1/relay/set", "OFF")

It logs in as a test user of its own (Broker.client: allowed every topic) unless given a
provisioned user, and returns from the constructor only once the broker has accepted the
login and granted the subscriptions (a refused login fails there). mosquitto grants even a
subscription the ACL denies and then delivers nothing (REFERENCE.md), so a refusal shows as
what does not arrive before a marker: until() and sync().

Every message stays in `seen`; next(), get(), until() and drain() also move a cursor past
what they return, so successive calls read on in order.
"""

import itertools
import json
import os
import queue
import threading
import time

from broker import TEST_USER
from wattlog.mqtt import close

_names = itertools.count(1)  # each Recorder its own client id (and test user), from any thread


class Message(tuple):
    """(topic, payload bytes), with .retain and .at (time.monotonic() when it arrived):
    compares equal to a plain (topic, payload)."""

    def __new__(cls, topic, payload, retain=False):
        m = tuple.__new__(cls, (topic, payload))
        m.retain, m.at = retain, time.monotonic()
        return m


class Recorder:
    def __init__(self, broker, *topics, name=None, user=None, timeout_s=10.0):
        self.name = name or "rec-%d-%d" % (os.getpid(), next(_names))
        self.seen = []
        self._cursor = 0
        self._changed = threading.Condition()
        events = queue.Queue()
        self.c = broker.client(self.name, user=user)
        self.c.on_connect = lambda c, u, f, rc, p: events.put(rc)
        self.c.on_subscribe = lambda c, u, mid, rcs, p: events.put(rcs)
        self.c.on_message = self._on_message
        self.c.connect("127.0.0.1", broker.port)
        self.c.loop_start()
        try:
            rc = events.get(timeout=timeout_s)
            assert not rc.is_failure, "%s could not log in: %s" % (self.name, rc)
            if topics:
                self.c.subscribe([(t, 1) for t in topics])
                events.get(timeout=timeout_s)  # granted, even where the ACL denies
        except queue.Empty:
            self.close()
            raise AssertionError("%s: the broker did not answer within %.0f s"
                                 % (self.name, timeout_s)) from None
        except AssertionError:
            self.close()
            raise

    def _on_message(self, client, userdata, m):
        with self._changed:
            self.seen.append(Message(m.topic, m.payload, m.retain))
            self._changed.notify_all()

    # -- what arrived, as a whole --------------------------------------------------------

    def raw(self, topic):
        """The payloads seen on topic, as bytes."""
        with self._changed:
            return [p for t, p in self.seen if t == topic]

    def on(self, topic):
        """The payloads seen on topic, decoded."""
        return [p.decode() for p in self.raw(topic)]

    def states(self, node):
        """Every state the node published, as dicts."""
        return [json.loads(p) for p in self.on("wattlog/%s/state" % node)]

    def logs(self, node):
        return self.on("wattlog/%s/log" % node)

    def text(self):
        """Every payload seen, decoded, joined by " | " (to look for words in)."""
        with self._changed:
            return " | ".join(p.decode(errors="replace") for _, p in self.seen)

    def wait(self, condition, what="a condition", timeout_s=60.0):
        """Until condition() is truthy (checked at each message, and every 0.1 s); its value."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                value = condition()
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("%s within %.0f s; seen last: %s"
                                         % (what, timeout_s, self.seen[-5:]))
                self._changed.wait(min(left, 0.1))

    # -- reading on, in order ------------------------------------------------------------

    def get(self, timeout_s=10.0):
        """The next message past the cursor; queue.Empty if none comes within timeout_s."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._cursor >= len(self.seen):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise queue.Empty
                self._changed.wait(left)
            self._cursor += 1
            return self.seen[self._cursor - 1]

    def drain(self):
        """Every message past the cursor, now; the cursor then at the end."""
        with self._changed:
            out, self._cursor = self.seen[self._cursor:], len(self.seen)
            return out

    def next(self, topic, match=lambda p: True, timeout_s=15.0):
        """(payload, retain) of the next message on topic whose payload matches."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                m = self.get(max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("nothing on %s matching within %.0f s"
                                     % (topic, timeout_s)) from None
            if m[0] == topic and match(m[1]):
                return m[1], m.retain

    def until(self, topic, payload, timeout_s=10.0):
        """Every message that arrived before (topic, payload); fails if that never comes."""
        before, deadline = [], time.monotonic() + timeout_s
        while True:
            try:
                m = self.get(max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("%s %r never arrived; before it: %s"
                                     % (topic, payload, before)) from None
            if m == (topic, payload):
                return before
            before.append(m)

    # -- sending -------------------------------------------------------------------------

    def publish(self, topic, payload, retain=False, qos=1):
        self.c.publish(topic, payload, qos=qos, retain=retain).wait_for_publish(5)

    def sync(self, topic):
        """Every message that arrived before a marker sent here on `topic` (one subscribed
        to): with the retained messages, those come first."""
        self.publish(topic, b"marker")
        return self.until(topic, b"marker")

    def close(self):
        close(self.c)  # disconnect first: the network thread then ends at once, not after 1 s

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def taken(broker, timeout_s=60.0, node="test-marker", user=TEST_USER):
    """Once this returns, the collector has taken every message the broker held for it when it
    was called: it takes them in the order they came (all QoS 1) and answers a plug's "online",
    so its answer to a marker plug's (the broker's test user; or a plug that has ended, `node`
    logged in as its `user`, where the broker knows no test user) comes after them. For a test
    that stops the collector after a plug has sent its last batch."""
    ack = "wattlog/%s/ack" % node
    with Recorder(broker, ack, name="taken-%d-%d" % (os.getpid(), next(_names)),
                  user=user, timeout_s=timeout_s) as r:
        r.publish("wattlog/%s/status" % node, b"online")
        r.next(ack, timeout_s=timeout_s)
