"""plug.py - `wattlog plug on|off|toggle|status NODE`: switch a plug or read its state over MQTT
(what the seed did with `broadlink_cli --turnon / --turnoff / --energy`, minus the cloud).

It reads the plug's retained <base>/<node>/status and state, publishes ON / OFF / TOGGLE on
<base>/<node>/relay/set, and waits for the state that shows the relay switched: a command is
done when the plug says so, not when it was sent. An offline plug, or one that does not
answer within the timeout, is an error (exit status 1) in words. It logs in as
wattlog-operator (provision.py), which may read status and state and publish relay/set and cmd.
Its MQTT 5 session is the operator's (session.py): a switch the ACL refuses is said in words
("Not authorized"), not taken for a plug that did not answer.
"""

import json
import os
import time

from wattlog.fleet.provision import OPERATOR
from wattlog.fleet.session import Session, SessionError


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
    # a broker set up by `wattlog provision` replaces this id with the user name
    # (wattlog-operator): two `wattlog plug` at once take each other's place
    session = Session(broker_url, "wattlog-plug-%d" % os.getpid(), password, ca, timeout_s)
    try:
        with session:
            return _talk(session, action, node, base, timeout_s)
    except SessionError as e:
        raise PlugError(str(e)) from None


def _talk(session, action, node, base, timeout_s):
    deadline = time.monotonic() + timeout_s
    status, state = None, None
    session.subscribe([(base + "status", 1), (base + "state", 1)])
    settle = min(deadline, time.monotonic() + 1.0)  # retained messages come at once
    while status is None or state is None:
        msg = session.next(settle)
        if msg is None:
            break
        status, state = _take(msg, base, status, state)
    if status is None and state is None:
        raise PlugError("no plug %r has ever reported on %s (is the node id right? may %s "
                        "read it? %s may)" % (node, base + "state", session.user, OPERATOR))
    online = status == b"online"
    if action == "status":
        return describe(node, state or {}, online)
    if not online:
        raise PlugError("%s is offline; the relay cannot be switched now" % node)
    before = (state or {}).get("relay")
    want = {"on": "ON", "off": "OFF"}.get(action) or ("OFF" if before == "ON" else "ON")
    session.publish(base + "relay/set", want if action != "toggle" else "TOGGLE",
                    what="switch " + node)
    while True:
        msg = session.next(deadline)
        if msg is None:
            raise PlugError("%s did not confirm relay %s within %.0f s" % (node, want, timeout_s))
        status, state = _take(msg, base, status, state)
        if state and state.get("relay") == want and msg[0] == base + "state":
            return describe(node, state, True)


def _take(msg, base, status, state):
    topic, payload = msg[:2]
    if topic == base + "status":
        return payload, state
    if topic == base + "state":
        try:
            return status, json.loads(payload)
        except ValueError:
            return status, state
    return status, state
