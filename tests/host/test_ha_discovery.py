"""test_ha_discovery.py - what wattlog announces to Home Assistant passes Home Assistant's own
discovery checks (tools/lib/hacheck.py, run by the Python of .venv-ha: Home Assistant
2025.4.4, which tools/setup installs where a Python 3.13 exists): the run triggers and
run-state sensor the collector publishes for each plug (runs/ha.py), and the device a plug
publishes itself (lib/wattnode/discovery.py).
"""

import json
import os
import subprocess

import pytest

from wattlog.runs import ha
from wattnode import discovery

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HA_PYTHON = os.path.join(REPO, ".venv-ha", "bin", "python")

pytestmark = pytest.mark.skipif(
    not os.path.exists(HA_PYTHON), reason="no Home Assistant here: tools/setup installs it in "
    ".venv-ha where a Python 3.13 exists")


def checked(messages):
    """{topic: None, or Home Assistant's words for what it refuses}."""
    done = subprocess.run([HA_PYTHON, os.path.join(REPO, "tools", "lib", "hacheck.py")],
                          input=json.dumps(messages), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return {r["topic"]: r["error"] for r in json.loads(done.stdout)}


def test_the_run_triggers_and_sensor_and_the_plug_s_device_pass():
    """Every discovery message wattlog sends is taken: the two device triggers and the
    sensor of a plug named with a dash, on the plug's device, and the plug's own device."""
    messages = [[t, p] for t, p, retain in ha.discovery("homeassistant", "wattlog", "dish-1")]
    assert [t for t, _ in messages] == ha.topics("homeassistant", "dish-1")
    messages.append([discovery.topic("homeassistant", "dish-1"), "".join(
        discovery.payload("dish-1", "wattlog", "Shelly Plus Plug S", "BL0937", "0211223344ff"))])
    assert checked(messages) == {t: None for t, _ in messages}


def test_a_message_home_assistant_refuses_is_seen():
    """The check can fail: a trigger without its topic, a sensor whose state class does not
    go with an enum, and a discovery topic with a dot are each refused, in HA's words."""
    trigger, _, sensor = ha.discovery("homeassistant", "wattlog", "dish-1")
    no_topic = json.loads(trigger[1])
    del no_topic["topic"]
    measured = dict(json.loads(sensor[1]), state_class="measurement")
    got = checked([[trigger[0], json.dumps(no_topic)], [sensor[0], json.dumps(measured)],
                   ["homeassistant/sensor/dish.1/run_state/config", sensor[1]]])
    assert "required key not provided @ data['topic']" in got[trigger[0]]
    assert got[sensor[0]] is not None
    assert got["homeassistant/sensor/dish.1/run_state/config"] == "an illegal discovery topic"
