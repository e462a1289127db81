"""hacheck.py - MQTT discovery messages checked by Home Assistant's own code: run with the
Python of .venv-ha (tools/setup makes it where a Python 3.13 exists: Home Assistant 2025.4.4,
tools/ha-requirements.txt), never imported by wattlog.

    .venv-ha/bin/python tools/lib/hacheck.py < messages.json   # [[topic, payload], ...]

prints [{"topic", "ok", "error"}, ...]: each message as Home Assistant's MQTT integration
takes it from the broker (homeassistant/components/mqtt/discovery.py): the discovery topic's
pattern, the JSON object, the abbreviations expanded, the origin checked, and for a device's
discovery its schema and each component merged with the device's shared options; then the
platform's own discovery schema: a sensor's and a switch's DISCOVERY_SCHEMA, a device
trigger's TRIGGER_DISCOVERY_SCHEMA. An error is Home Assistant's own message.
"""

import asyncio
import json
import sys
import tempfile

import voluptuous as vol
from homeassistant.components.mqtt import device_trigger, discovery, sensor, switch
from homeassistant.components.mqtt.schemas import DEVICE_DISCOVERY_SCHEMA
from homeassistant.core import HomeAssistant
from homeassistant.helpers import frame

PREFIX = "homeassistant/"
SCHEMAS = {"sensor": sensor.DISCOVERY_SCHEMA, "switch": switch.DISCOVERY_SCHEMA,
           "device_automation": device_trigger.TRIGGER_DISCOVERY_SCHEMA}


def platform(component, config):
    schema = SCHEMAS.get(component)
    if schema is None:
        raise vol.Invalid("wattlog does not check the %s platform here" % component)
    schema(config)


def check(topic, payload):
    if not topic.startswith(PREFIX):
        raise vol.Invalid("not under %s" % PREFIX)
    match = discovery.TOPIC_MATCHER.match(topic[len(PREFIX):])
    if not match:
        raise vol.Invalid("an illegal discovery topic")
    component = match.group("component")
    config = json.loads(payload)
    if not isinstance(config, dict):
        raise vol.Invalid("the payload is not a JSON object")
    discovery._replace_all_abbreviations(config)
    if component != "device":
        if not discovery._valid_origin_info(config):
            raise vol.Invalid("the origin is not valid")
        platform(component, config)
        return
    DEVICE_DISCOVERY_SCHEMA(config)
    for cid, comp in config["components"].items():
        comp = dict(comp)
        name = comp.pop("platform")
        comp["device"], comp["origin"] = config["device"], config.get("origin")
        discovery._merge_common_device_options(comp, config)
        try:
            platform(name, comp)
        except vol.Invalid as e:
            raise vol.Invalid("component %s: %s" % (cid, e)) from None


async def checked(messages, config_dir):
    """Each message checked inside a Home Assistant core (not started): its templates are
    validated as in a running one."""
    hass = HomeAssistant(config_dir)
    frame.async_setup(hass)
    out = []
    for topic, payload in messages:
        try:
            check(topic, payload)
            out.append({"topic": topic, "ok": True, "error": None})
        except (vol.Invalid, ValueError) as e:
            out.append({"topic": topic, "ok": False, "error": str(e)})
    return out


def main():
    with tempfile.TemporaryDirectory() as config_dir:
        out = asyncio.run(checked(json.load(sys.stdin), config_dir))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
