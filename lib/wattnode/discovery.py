"""discovery.py - Home Assistant MQTT device discovery for one plug.

Published retained on <prefix>/device/<node>/config (prefix "homeassistant" by default) when
the link comes up and again whenever Home Assistant says "online" on <prefix>/status (it has
restarted and forgotten). One device payload: `dev` (the plug), `o` (origin: wattlog),
availability from <base>/<node>/status, and `cmps`, keyed by component id, each with its
platform `p` and a `unique_id`:
  relay    switch: ON/OFF on <base>/<node>/relay/set, state from the retained state JSON
  power    sensor W, measurement      voltage  sensor V, measurement
  current  sensor A, measurement      energy   sensor kWh, total_increasing
  rssi     sensor dBm, the Wi-Fi signal (a diagnostic entity; null in the state when the
           radio cannot say, which Home Assistant shows as unknown)
The sensors read the retained state JSON (node.publish_state) with a value template.
Ids are namespaced (ID_PREFIX): the device's identifier is "wattlog_<node>" and each
unique_id "wattlog_<node>_<component>", so a plug named "kitchen" cannot collide with any
other MQTT device called kitchen. (Earlier firmware announced "<node>" and
"<node>_<component>": Home Assistant takes the new ids for new entities; the old ones stay,
unavailable, until removed, and keep their history: README, Home Assistant.)
Built when needed (about 1.5 KB in pieces, freed after sending), never kept in the heap.
"""

from wattnode import __version__ as VERSION

ID_PREFIX = "wattlog_"

_SENSORS = (
    # id, name, unit, device class, state class (the id is also the state JSON's field)
    ("power", "Power", "W", "power", "measurement"),
    ("voltage", "Voltage", "V", "voltage", "measurement"),
    ("current", "Current", "A", "current", "measurement"),
    ("energy", "Energy", "kWh", "energy", "total_increasing"),
)
# Written out rather than json.dumps() of nested dicts: one string, built piece by piece,
# costs the heap far less than six dicts and their keys (node ids and topics need no escaping:
# config.py allows only [a-z0-9_-] in them, and the base topic is the owner's own).
_SWITCH = ('"relay":{"p":"switch","unique_id":"%s%s_relay","name":"Relay",'
           '"command_topic":"%srelay/set","state_topic":"%sstate",'
           '"value_template":"{{ value_json.relay }}","payload_on":"ON","payload_off":"OFF",'
           '"state_on":"ON","state_off":"OFF"}')
_SENSOR = (',"%s":{"p":"sensor","unique_id":"%s%s_%s","name":"%s","state_topic":"%sstate",'
           '"value_template":"{{ value_json.%s }}","unit_of_measurement":"%s",'
           '"device_class":"%s","state_class":"%s"}')
_SIGNAL = (',"rssi":{"p":"sensor","unique_id":"%s%s_rssi","name":"Signal","state_topic":"%sstate",'
           '"value_template":"{{ value_json.rssi }}","unit_of_measurement":"dBm",'
           '"device_class":"signal_strength","state_class":"measurement",'
           '"entity_category":"diagnostic"}')
_DEVICE = ('{"dev":{"identifiers":["%s%s"],"name":"%s","manufacturer":"wattlog","model":"%s (%s)",'
           '"sw_version":"%s","connections":[["mac","%s"]]},'
           '"o":{"name":"wattlog","sw_version":"%s"},'
           '"availability_topic":"%sstatus","payload_available":"online",'
           '"payload_not_available":"offline","cmps":{')


def topic(prefix, node_id):
    return "%s/device/%s/config" % (prefix, node_id)


def payload(node_id, base, board_name, chip, mac_hex):
    """The payload as a list of strings of a few hundred bytes each: link.publish(parts=True)
    sends them one after the other, so no 1.5 KB block of heap is ever needed."""
    t = "%s/%s/" % (base, node_id)
    mac = ":".join(mac_hex[i:i + 2] for i in range(0, len(mac_hex), 2))
    parts = [_DEVICE % (ID_PREFIX, node_id, node_id, board_name.replace('"', "'"), chip, VERSION,
                        mac, VERSION, t),
             _SWITCH % (ID_PREFIX, node_id, t, t)]
    for cid, name, unit, dev_class, state_class in _SENSORS:
        parts.append(_SENSOR % (cid, ID_PREFIX, node_id, cid, name, t, cid, unit, dev_class,
                                state_class))
    parts.append(_SIGNAL % (ID_PREFIX, node_id, t))
    parts.append("}}")
    return parts
