"""test_link.py - what a plug shows on MQTT, as Home Assistant and people see it: retained
"online" and state, the relay obeying relay/set, bad commands answered on log, and the broker
announcing "offline" (the last will) when a plug dies without a word."""

import itertools
import json
import os
import queue
import signal
import time

from helpers import aligned_past


class Listener:
    count = itertools.count(1)  # each its own client id (and test user), from any thread

    def __init__(self, broker, topic):
        self.q = queue.Queue()
        self.c = broker.client("link-test-%d-%d" % (os.getpid(), next(Listener.count)))
        self.c.on_message = lambda c, u, m: self.q.put((m.topic, m.payload, m.retain))
        self.c.connect("127.0.0.1", broker.port)
        self.c.subscribe(topic, qos=1)
        self.c.loop_start()

    def wait(self, topic, match=lambda p: True, timeout_s=15.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                t, payload, retain = self.q.get(timeout=0.2)
            except queue.Empty:
                continue
            if t == topic and match(payload):
                return payload, retain
        raise AssertionError("nothing on %s matching within %.0f s" % (topic, timeout_s))

    def close(self):
        self.c.disconnect()  # first: the network thread then ends at once, not after 1 s
        self.c.loop_stop()


def test_status_state_relay_and_last_will(broker, simnodes):
    node = simnodes(broker.port, "plug-l", "--profile", "constant:500", "--speed", "max",
                    "--start", aligned_past(60), "--then-realtime")
    live = Listener(broker, "wattlog/plug-l/#")
    try:
        live.wait("wattlog/plug-l/status", lambda p: p == b"online")
        state, _ = live.wait("wattlog/plug-l/state")
        fields = json.loads(state)
        assert set(fields) == {"time", "power", "voltage", "current", "energy", "relay", "rssi"}
        assert fields["power"] == 500.0 and fields["relay"] == "ON" and fields["time"] % 10 == 0

        late = Listener(broker, "wattlog/plug-l/+")  # a newcomer sees the retained ones
        assert late.wait("wattlog/plug-l/status")[1] is True
        assert late.wait("wattlog/plug-l/state")[1] is True
        late.close()

        live.c.publish("wattlog/plug-l/relay/set", "OFF", qos=1)
        live.wait("wattlog/plug-l/state", lambda p: json.loads(p)["relay"] == "OFF")
        live.c.publish("wattlog/plug-l/relay/set", "toggle", qos=1)
        live.wait("wattlog/plug-l/state", lambda p: json.loads(p)["relay"] == "ON")
        live.c.publish("wattlog/plug-l/relay/set", "MAYBE", qos=1)
        live.wait("wattlog/plug-l/log", lambda p: b"is not ON, OFF or TOGGLE; relay unchanged" in p)

        os.kill(node.firmware_pid(), signal.SIGKILL)  # no goodbye: the broker speaks for it
        live.wait("wattlog/plug-l/status", lambda p: p == b"offline")
        late = Listener(broker, "wattlog/plug-l/status")
        assert late.wait("wattlog/plug-l/status") == (b"offline", True)
        late.close()
    finally:
        live.close()
