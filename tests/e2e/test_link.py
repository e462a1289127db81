"""test_link.py - what a plug shows on MQTT, as Home Assistant and people see it: retained
"online" and state, the relay obeying relay/set, bad commands answered on log, and the broker
announcing "offline" (the last will) when a plug dies without a word."""

import json
import os
import signal

from helpers import aligned_past
from rig import Recorder


def test_status_state_relay_and_last_will(broker, simnodes):
    node = simnodes(broker.port, "plug-l", "--profile", "constant:500", "--speed", "max",
                    "--start", aligned_past(60), "--then-realtime")
    live = Recorder(broker, "wattlog/plug-l/#")
    try:
        live.next("wattlog/plug-l/status", lambda p: p == b"online")
        state, _ = live.next("wattlog/plug-l/state")
        fields = json.loads(state)
        assert set(fields) == {"time", "power", "voltage", "current", "energy", "relay", "rssi"}
        assert fields["power"] == 500.0 and fields["relay"] == "ON" and fields["time"] % 10 == 0

        late = Recorder(broker, "wattlog/plug-l/+")  # a newcomer sees the retained ones
        assert late.next("wattlog/plug-l/status")[1] is True
        assert late.next("wattlog/plug-l/state")[1] is True
        late.close()

        live.c.publish("wattlog/plug-l/relay/set", "OFF", qos=1)
        live.next("wattlog/plug-l/state", lambda p: json.loads(p)["relay"] == "OFF")
        live.c.publish("wattlog/plug-l/relay/set", "toggle", qos=1)
        live.next("wattlog/plug-l/state", lambda p: json.loads(p)["relay"] == "ON")
        live.c.publish("wattlog/plug-l/relay/set", "MAYBE", qos=1)
        live.next("wattlog/plug-l/log", lambda p: b"is not ON, OFF or TOGGLE; relay unchanged" in p)

        os.kill(node.firmware_pid(), signal.SIGKILL)  # no goodbye: the broker speaks for it
        live.next("wattlog/plug-l/status", lambda p: p == b"offline")
        late = Recorder(broker, "wattlog/plug-l/status")
        assert late.next("wattlog/plug-l/status") == (b"offline", True)
        late.close()
    finally:
        live.close()
