"""plug.py - `wattlog plug on|off|toggle|status NODE`: switch a plug or read its state over MQTT
(what the seed did with `broadlink_cli --turnon / --turnoff / --energy`, minus the cloud).

It reads the plug's retained <base>/<node>/status and state, publishes ON / OFF / TOGGLE on
<base>/<node>/relay/set, and waits for the state that shows the relay switched: a command is
done when the plug says so, not when it was sent. An offline plug, or one that does not
answer within the timeout, is an error (exit status 1) in words. It logs in as
wattlog-operator (provision.py), which may read status and state and publish relay/set and cmd.
It speaks MQTT 5, whose PUBACK carries a reason: a switch the ACL refuses is said in words
("Not authorized"), not taken for a plug that did not answer.
"""

import json
import os
import queue
import time

import paho.mqtt.client as mqtt

from wattlog.mqtt import client_for, parse_broker


class PlugError(Exception):
    pass


def describe(node, state, online):
    def num(key, fmt):
        v = state.get(key)
        return "-" if v is None else fmt % v
    return "%s: relay %s, %s W, %s V, %s A, %s kWh at %s%s" % (
        node, state.get("relay", "?"), num("power", "%.1f"), num("voltage", "%.1f"),
        num("current", "%.3f"), num("energy", "%.3f"),
        time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(state["time"])) if state.get("time")
        else "?", "" if online else " (offline: last known state)")


def run(action, node, broker_url, base_topic="wattlog", timeout_s=10.0, ca=None, password=None):
    base = "%s/%s/" % (base_topic, node)
    got = queue.Queue()
    # a broker set up by `wattlog provision` replaces this id with the user name
    # (wattlog-operator): two `wattlog plug` at once take each other's place
    # MQTT 5: a publish the ACL refuses comes back "Not authorized" (3.1.1 says nothing)
    client, host, port = client_for(broker_url, "wattlog-plug-%d" % os.getpid(), ca, password,
                                    protocol=mqtt.MQTTv5)
    user = parse_broker(broker_url)[2]
    client.on_message = lambda c, u, m: got.put((m.topic, m.payload))
    client.on_connect = lambda c, u, f, rc, p: got.put(("connect", rc))
    client.on_publish = lambda c, u, mid, rc, p: got.put(("published", rc))
    try:
        client.connect(host, port, keepalive=30)
    except OSError as e:
        raise PlugError("cannot reach the broker at %s:%d (%s)" % (host, port, e)) from None
    client.loop_start()
    try:
        return _talk(client, got, action, node, base, timeout_s, user)
    finally:
        client.loop_stop()
        client.disconnect()


def _talk(client, got, action, node, base, timeout_s, user):
    deadline = time.monotonic() + timeout_s
    status, state = None, None

    def next_message():
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            return got.get(timeout=left)
        except queue.Empty:
            return None

    msg = next_message()
    if msg is None:
        raise PlugError("the broker did not answer within %.0f s" % timeout_s)
    if msg[1].is_failure:
        raise PlugError("the broker refused the login of %s (%s): check the user name and the "
                        "password file" % (user or "an anonymous client", msg[1]))
    client.subscribe([(base + "status", 1), (base + "state", 1)])
    settle = time.monotonic() + min(1.0, timeout_s)  # retained messages come at once
    while (status is None or state is None) and time.monotonic() < settle:
        msg = next_message()
        if msg is None:
            break
        status, state = _take(msg, base, status, state)
    if status is None and state is None:
        raise PlugError("no plug %r has ever reported on %s (is the node id right? may %s "
                        "read it? wattlog-operator may)" % (node, base + "state", user))
    online = status == b"online"
    if action == "status":
        return describe(node, state or {}, online)
    if not online:
        raise PlugError("%s is offline; the relay cannot be switched now" % node)
    before = (state or {}).get("relay")
    want = {"on": "ON", "off": "OFF"}.get(action) or ("OFF" if before == "ON" else "ON")
    client.publish(base + "relay/set", want if action != "toggle" else "TOGGLE", qos=1)
    while True:
        msg = next_message()
        if msg is None:
            raise PlugError("%s did not confirm relay %s within %.0f s" % (node, want, timeout_s))
        if msg[0] == "published" and msg[1].is_failure:
            raise PlugError("the broker refused to let %s switch %s (%s): log in as "
                            "wattlog-operator, whose ACL allows it" % (user, node, msg[1]))
        status, state = _take(msg, base, status, state)
        if state and state.get("relay") == want and msg[0] == base + "state":
            return describe(node, state, True)


def _take(msg, base, status, state):
    topic, payload = msg
    if topic == base + "status":
        return payload, state
    if topic == base + "state":
        try:
            return status, json.loads(payload)
        except ValueError:
            return status, state
    return status, state
