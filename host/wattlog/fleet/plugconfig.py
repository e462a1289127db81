"""plugconfig.py - what goes on a plug's flash, as `wattlog provision` writes it:
nodes/<node>/config.json (Wi-Fi, the broker, its login, the time server, the update key, the
Broadlink mode) and nodes/<node>/ota.key, each 0600.

The broker's host is one address ("192.168.1.10") on a single Pi; for a cluster it is a list
of "host:port" strings, the MQTT gateways the plug tries in turn (wattnode's link). The
Wi-Fi's password is kept in wifi.password (0600) and copied into each config; the update key
(64 hex digits) is made once per plug: `wattlog ota` authenticates each update's manifest
with it (HMAC-SHA256).
"""

import os
import secrets

from wattlog.fleet.logins import ProvisionError, create_once
from wattlog.store import durable

WIFI_PASSWORD_FILE = "wifi.password"
BROADLINK_MODES = ("off", "read", "control")


def read_wifi(path):
    """The Wi-Fi password kept in `path` ('' for an open network, None when there is none)."""
    try:
        with open(path, "rb") as f:
            return f.readline().rstrip(b"\r\n").decode()
    except (OSError, UnicodeDecodeError):
        return None


def kept_broadlink(path):
    """The broadlink mode a plug's config.json already has (None: none, or unreadable)."""
    try:
        mode = (durable.read_json(path) or {}).get("broadlink")
    except (ValueError, AttributeError):
        return None
    return mode if mode in BROADLINK_MODES else None


def write_node(directory, node, broker, base, ntp_host, ssid, broadlink):
    """nodes/<node>/config.json (and its ota.key, made once). broker: the config's "broker"
    object; ssid: the Wi-Fi's name (None: none yet); broadlink: a mode, or None to keep the
    config's."""
    node_dir = os.path.join(directory, "nodes", node)
    os.makedirs(node_dir, mode=0o700, exist_ok=True)
    create_once(ota_key_file(directory, node), (secrets.token_hex(32) + "\n").encode())
    node_config = {"node_id": node, "base_topic": base, "broker": broker,
                   "ntp_host": ntp_host, "ota_key": read_ota_key(directory, node)}
    if ssid is not None:
        node_config["wifi"] = {"ssid": ssid,
                               "password": read_wifi(os.path.join(directory,
                                                                  WIFI_PASSWORD_FILE))}
    mode = broadlink or kept_broadlink(os.path.join(node_dir, "config.json"))
    if mode:
        node_config["broadlink"] = mode
    durable.write_json(os.path.join(node_dir, "config.json"), node_config, mode=0o600)


def ota_key_file(directory, node):
    return os.path.join(directory, "nodes", node, "ota.key")


def read_ota_key(directory, node):
    """The plug's update key (hex), or ProvisionError naming the file."""
    path = ota_key_file(directory, node)
    try:
        with open(path) as f:
            key = f.read().strip()
    except OSError as e:
        raise ProvisionError("cannot read %s (%s): run wattlog provision for %s"
                             % (path, e.strerror, node)) from None
    if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
        raise ProvisionError("%s is not 64 hex digits: remove it and run wattlog provision "
                             "for %s" % (path, node))
    return key
