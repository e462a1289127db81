"""ha.py - the runs on MQTT: the events, the run state, and Home Assistant's discovery of both
(device triggers and a sensor on the plug's own device), as (topic, payload, retain) for the
collector to publish.

  <base>/<node>/event   not retained, QoS 1, JSON:
      {"event": "run_started", "node", "start", "time"}
      {"event": "run_finished", "node", "start", "end", "duration_s", "kwh", "cost",
       "currency", "peak_w", "time"}      (unix s; cost and currency null without a tariff)
  <base>/<node>/run     retained, JSON: {"state": "idle"|"running"|"paused", "since",
                        "start" (the run's, or null), "time"}

Discovery, component by component (a plug publishes its own device on
<prefix>/device/<node>/config; the collector never writes that topic), each retained:
  <prefix>/device_automation/<node>/run_started/config    trigger: type run_started
  <prefix>/device_automation/<node>/run_finished/config   trigger: type run_finished
  <prefix>/sensor/<node>/run_state/config                 enum sensor: idle, running, paused
Each names the plug's device by its identifier (wattlog_<node>, lib/wattnode/discovery.py),
so Home Assistant puts them on the plug's device page: "the washer finished" is a
notification picked there, no YAML. The sensor is available while the plug is (its status).
The broker's ACL lets wattlog-collector write exactly these topics (fleet/provision.py).
"""

import json

from wattlog import __version__

ID_PREFIX = "wattlog_"  # lib/wattnode/discovery.py's: the plug's device identifier
EVENTS = ("run_started", "run_finished")
STATES = ("idle", "running", "paused")


def event(base, node, kind, run, now):
    """The event message for a run that started or finished."""
    body = {"event": kind, "node": node, "start": run["start"], "time": int(now)}
    if kind == "run_finished":
        body.update({k: run.get(k) for k in ("end", "duration_s", "kwh", "cost", "currency",
                                             "peak_w")})
    return ("%s/%s/event" % (base, node), json.dumps(body, sort_keys=True), False)


def run_state(base, node, state, since, start, now):
    """The retained run state."""
    return ("%s/%s/run" % (base, node), json.dumps(
        {"state": state, "since": since, "start": start, "time": int(now)}, sort_keys=True),
        True)


def topics(prefix, node):
    """The discovery topics the collector publishes for a plug."""
    return ["%s/device_automation/%s/%s/config" % (prefix, node, kind) for kind in EVENTS] + \
        ["%s/sensor/%s/run_state/config" % (prefix, node)]


def discovery(prefix, base, node):
    """[(topic, payload, retain)]: the plug's run triggers and run-state sensor."""
    device = {"identifiers": [ID_PREFIX + node]}
    origin = {"name": "wattlog", "sw_version": __version__}
    out = []
    for kind in EVENTS:
        out.append({"automation_type": "trigger", "topic": "%s/%s/event" % (base, node),
                    "type": kind, "subtype": "run", "payload": kind,
                    "value_template": "{{ value_json.event }}", "device": device,
                    "origin": origin})
    out.append({"name": "Run", "unique_id": "%s%s_run_state" % (ID_PREFIX, node),
                "state_topic": "%s/%s/run" % (base, node),
                "value_template": "{{ value_json.state }}", "device_class": "enum",
                "options": list(STATES), "icon": "mdi:washing-machine",
                "json_attributes_topic": "%s/%s/run" % (base, node),
                "availability_topic": "%s/%s/status" % (base, node),
                "payload_available": "online", "payload_not_available": "offline",
                "device": device, "origin": origin})
    return [(topic, json.dumps(body, sort_keys=True), True)
            for topic, body in zip(topics(prefix, node), out)]
