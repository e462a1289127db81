"""provision.py - `wattlog provision`: credentials, ACL and node configs for a locked-down broker.

    wattlog provision [--dir DIR] [--broker-host HOST] [--wifi-ssid NAME [--wifi-password-file F]]
                      [--ntp-host HOST] [--port N] [--listen ADDR] [--tls]
                      [--cluster HOST,HOST,HOST [--partitions P] [--nats-store DIR]] NODE...

Writes into DIR (kept between runs: provisioning again adds nodes and keeps every existing
password, so configured plugs keep working; provision.json remembers the broker's address,
port, listen address, TLS, the Wi-Fi's name and the time server, so a later run need not
repeat them):
  credentials.json     {user: password} for every user (0600; the only complete copy;
                       logins.py says who they are and what the ACL lets each do)
  <client>.password    the password of wattlog-collector, wattlog-operator and homeassistant,
                       one file each (0600), for --password-file and Home Assistant
  passwd, acl, mosquitto.conf   mosquitto's files (mosquittofiles.py): a listener (all
                       interfaces, or --listen ADDR) that refuses anonymous clients and ties
                       each client id to its user name
  nodes/<node>/config.json, ota.key   what goes on the plug's flash (plugconfig.py)
  wifi.password        the Wi-Fi's password (0600), from --wifi-password-file or the prompt:
                       never from the command line, where `ps` shows it
  http.token           the token the HTTP API's actions (relay, commands) need (0600)
  wattlog.toml         the collector's settings (collectorconf.py). Both are made once and
                       then kept: no token or password is ever a default, and an edited config
                       is never overwritten
  with --tls: ca.crt, ca.key, server.crt, server.key (tls.py), the listener on 8883 with them,
  and "ca": "ca.crt" in the node configs (copy ca.crt onto the plug too).
  with --cluster: nats-<i>.conf for each NATS node and wattlog-cluster.toml (natsfiles.py),
  and each plug's broker host the list of the nodes' MQTT gateways ("host:port").

This module only orders the steps and remembers the settings; each kind of file has its own.
"""

import os
import secrets
import shlex

from wattlog.fleet.collectorconf import (CONFIG_FILE, TOKEN_FILE, broker_url, collector_config,
                                         collector_host)
from wattlog.fleet.logins import (CLIENTS, COLLECTOR, HOMEASSISTANT, NOT_NODES, OPERATOR,
                                  OTA_USERS, ProvisionError, acl_text, create_once, credentials,
                                  nodes_of, password_file)
from wattlog.fleet.natsfiles import (CLUSTER_CONFIG_FILE, gateways, node_spec, parse_nodes,
                                     write_cluster)
from wattlog.fleet.mosquittofiles import (BROKER_GROUP, broker_access_command, broker_gid,
                                          mosquitto_conf, passwd_tool, share_dir, write_passwd)
from wattlog.fleet.plugconfig import (BROADLINK_MODES, WIFI_PASSWORD_FILE, ota_key_file,
                                      read_ota_key, read_wifi, write_node)
from wattlog.fleet.tls import make_tls
from wattlog.store import durable
from wattlog.store.feeds import NODE_ID

# what other modules take from here: the users, the files, the errors
__all__ = ["CLIENTS", "COLLECTOR", "HOMEASSISTANT", "OPERATOR", "OTA_USERS", "NOT_NODES",
           "ProvisionError", "password_file", "broker_gid", "broker_access_command",
           "make_tls", "ota_key_file", "read_ota_key", "broker_url", "collector_config",
           "provision", "settings", "main_text", "CONFIG_FILE", "TOKEN_FILE"]


def _address(value, flag, example):
    if not value or not value.strip() or any(c.isspace() for c in value):
        raise ProvisionError("%s %r is not an address: give the name or IP address %s"
                             % (flag, value, example))


def _check(directory, nodes, broker_host, ntp_host, wifi, broadlink):
    """Every argument checked before anything is written."""
    if broadlink not in (None,) + BROADLINK_MODES:
        raise ProvisionError("--broadlink %r must be off, read or control" % broadlink)
    if broker_host is None:
        raise ProvisionError("give --broker-host: the name or IP address the plugs reach the "
                             "broker (this machine) at, e.g. 192.168.1.10")
    _address(broker_host, "--broker-host", "the plugs reach the broker at, e.g. 192.168.1.10")
    if ntp_host is not None:
        _address(ntp_host, "--ntp-host", "of a time server on your LAN, e.g. 192.168.1.1")
    if wifi is not None and (not wifi[0] or len(wifi[0].encode()) > 32):
        raise ProvisionError("--wifi-ssid %r is not a Wi-Fi name: 1 to 32 bytes" % wifi[0])
    if wifi is not None and wifi[1] and not 8 <= len(wifi[1].encode()) <= 63:
        raise ProvisionError("the Wi-Fi password has %d characters: WPA needs 8 to 63 (or none, "
                             "for an open network)" % len(wifi[1]))
    for node in nodes:
        if not NODE_ID.match(node) or node in NOT_NODES:
            raise ProvisionError("%r is not a node id: 1-32 of a-z, 0-9, _ and - (and not %s)"
                                 % (node, ", ".join(NOT_NODES)))
    if os.path.isdir(directory) and os.listdir(directory) and not os.path.exists(
            os.path.join(directory, "credentials.json")):
        raise ProvisionError("%s holds other files and no credentials.json: give provision a "
                             "directory of its own (e.g. /etc/wattlog)" % directory)


def provision(directory, nodes, broker_host=None, port=None, tls=False, listen=None,
              base="wattlog", ha_prefix="homeassistant", progress=print, broadlink=None,
              wifi=None, ntp_host=None, cluster=None, partitions=None, nats_store=None):
    """Returns {user: password} for everything provisioned so far. The broker's address, port,
    listen address, TLS, the Wi-Fi's name and the time server are remembered (provision.json):
    a later run without them keeps them, and one that changes them rewrites every plug's
    config.json and says so. wifi: (ssid, password) for every plug (the password is kept in
    wifi.password, 0600); ntp_host: the plugs' time server (default: the broker's host, the Pi:
    no plug needs the internet). broadlink ("off", "read" or "control": the plug's SP3S
    protocol, wattnode/broadlink.py) is set in the named plugs' config.json; without it each
    keeps the mode its config.json has. cluster: the NATS nodes, "HOST[:MQTT[:NATS[:ROUTE]]]"
    each (natsfiles.py; the broker's host defaults to the first's), with `partitions` (64)
    and their JetStream store `nats_store`."""
    saved = _saved(directory)
    cluster = cluster if cluster is not None else saved.get("cluster")
    first = parse_nodes(cluster, 1883)[0][0] if cluster else None  # checked before writing
    if first and broker_host is None and not saved.get("broker_host"):
        broker_host = first
    if partitions is not None and not 1 <= partitions <= 4096:
        raise ProvisionError("--partitions %d: give a whole number from 1 to 4096 (the "
                             "collectors' [cluster] partitions)" % partitions)
    broker_host = saved.get("broker_host") if broker_host is None else broker_host
    _check(directory, nodes, broker_host, ntp_host, wifi, broadlink)
    tool = passwd_tool()
    os.makedirs(directory, mode=0o700, exist_ok=True)
    gid = share_dir(directory)
    shared = 0o640 if gid is not None else 0o600
    creds = credentials(directory, nodes, progress)
    if create_once(os.path.join(directory, TOKEN_FILE),
                   (secrets.token_urlsafe(32) + "\n").encode()):
        progress("new HTTP token in %s" % os.path.join(directory, TOKEN_FILE))
    write_passwd(tool, os.path.join(directory, "passwd"), creds, shared, gid, progress)
    durable.write_bytes(os.path.join(directory, "acl"), acl_text(creds, base, ha_prefix).encode(),
                        mode=shared, group=gid)

    tls = tls or bool(saved.get("tls"))
    port = port or saved.get("port") or (8883 if tls else 1883)
    listen = listen or saved.get("listen")
    ntp_host = ntp_host or saved.get("ntp_host") or broker_host
    peers = parse_nodes(cluster, port) if cluster else None
    more = {}
    if peers:
        more = {"cluster": [node_spec(p) for p in peers],
                "partitions": partitions or saved.get("partitions") or 64,
                "nats_store": nats_store or saved.get("nats_store") or NATS_STORE}
    nodes, ssid, moved = _remembered(directory, saved, nodes, creds, progress, wifi,
                                     broker_host=broker_host, port=port, tls=tls, listen=listen,
                                     ntp_host=ntp_host, **more)
    if tls:
        make_tls(directory, broker_host, gid, [p[0] for p in peers or ()])
    durable.write_bytes(os.path.join(directory, "mosquitto.conf"),
                        mosquitto_conf(directory, port, listen, tls).encode(), mode=shared,
                        group=gid)
    os.makedirs(os.path.join(directory, "nodes"), mode=0o700, exist_ok=True)
    for node in nodes:
        broker = {"host": gateways(peers) if peers else broker_host, "port": port,
                  "user": node, "password": creds[node],
                  "ca": "ca.crt" if tls else None}
        write_node(directory, node, broker, base, ntp_host, ssid, broadlink)
    config = os.path.join(directory, CONFIG_FILE)
    url = broker_url(COLLECTOR, collector_host(broker_host, listen, tls), port, tls)
    if not create_once(config, collector_config(config, url, tls, base).encode()) and moved:
        progress("%s is yours and is kept as it is: set broker = \"%s\" in it" % (config, url))
    if peers:
        write_cluster(directory, peers, creds, acl_text(creds, base, ha_prefix),
                      more["partitions"], more["nats_store"], base, tls, progress)
    return creds


_FIELD = {"port": "port", "broker host": "broker_host", "time server": "ntp_host",
          "cluster's nodes": "cluster"}
NATS_STORE = "/var/lib/nats/wattlog"  # each node's JetStream files (the user nats's)


def _remembered(directory, saved, nodes, creds, progress, wifi, **now):
    """provision.json written with `now` (and the Wi-Fi's name); returns (the nodes whose
    config.json is written: every plug's when what they hold changed, the Wi-Fi's name,
    which of the broker's port and host moved)."""
    wifi_path = os.path.join(directory, WIFI_PASSWORD_FILE)
    if wifi is not None:
        wifi_changed = wifi[0] != saved.get("wifi_ssid") or wifi[1] != read_wifi(wifi_path)
        durable.write_bytes(wifi_path, (wifi[1] + "\n").encode(), mode=0o600)
        ssid = wifi[0]
    else:
        wifi_changed, ssid = False, saved.get("wifi_ssid")
    moved = [k for k in ("port", "broker host", "cluster's nodes")
             if saved.get(_FIELD[k], now.get(_FIELD[k])) != now.get(_FIELD[k])]
    changed = moved + ["time server"] * (saved.get("ntp_host", now["ntp_host"]) !=
                                         now["ntp_host"]) + ["Wi-Fi"] * wifi_changed
    if saved and "ntp_host" not in saved:  # provisioned by a wattlog that set no time server
        changed.append("time server")
    durable.write_json(os.path.join(directory, "provision.json"), dict(now, wifi_ssid=ssid),
                       mode=0o600)
    plugs = set(nodes_of(creds))
    if changed and plugs - set(nodes):
        nodes = sorted(set(nodes) | plugs)
        progress("the %s changed: every plug's config.json is rewritten; copy each to its plug "
                 "again" % " and ".join(changed))
    if ssid is None:
        progress("no Wi-Fi for the plugs yet: their config.json has none, so a plug could "
                 "never join a network (tools/deploy refuses it); run provision again with "
                 "--wifi-ssid NAME")
    return nodes, ssid, moved


def _saved(directory):
    """What provision.json remembers ({} before the first run, or when it is unreadable)."""
    try:
        saved = durable.read_json(os.path.join(directory, "provision.json")) or {}
    except ValueError:
        return {}
    return saved if isinstance(saved, dict) else {}


def settings(directory):
    """What provision.json remembers: broker_host, port, tls, listen, wifi_ssid, ntp_host."""
    return durable.read_json(os.path.join(directory, "provision.json"))


def main_text(creds, directory, program, systemd=None):
    """What to do next, as commands that run as printed: `program` is the full path of the
    wattlog that runs (sudo's PATH does not hold a venv's bin); without systemd (a container,
    WSL, some NAS boxes) the broker and the collector are started by hand. Names the password
    files, never shows a password."""
    used = settings(directory)
    systemd = os.path.isdir("/run/systemd/system") if systemd is None else systemd
    config = shlex.quote(os.path.join(directory, CONFIG_FILE))
    wattlog = shlex.quote(program)
    broker_conf = shlex.quote(os.path.join(directory, "mosquitto.conf"))
    nodes = len([u for u in creds if u not in NOT_NODES])
    lines = ["provisioned %d plugs in %s" % (nodes, directory)]
    if systemd:
        lines += ["  broker: sudo cp %s /etc/mosquitto/conf.d/wattlog.conf && sudo systemctl "
                  "restart mosquitto" % broker_conf,
                  "  collector, as a service: sudo %s install-service --config %s"
                  % (wattlog, config)]
    else:
        lines += ["  this machine runs no systemd: start the broker and the collector yourself "
                  "(README: \"Without systemd\")",
                  "  broker: sudo cp %s /etc/mosquitto/conf.d/wattlog.conf && sudo install -d -o "
                  "mosquitto -g mosquitto /run/mosquitto && sudo mosquitto -c "
                  "/etc/mosquitto/mosquitto.conf -d" % broker_conf,
                  "  collector: sudo %s collect --config %s" % (wattlog, config)]
    lines += ["  the collector's settings: %s (yours to edit)" % config,
              "  HTTP token (for relay switching and commands): %s"
              % os.path.join(directory, TOKEN_FILE),
              "  switching: sudo %s plug status NODE" % wattlog,
              "  Home Assistant: MQTT user %s, password in %s"
              % (HOMEASSISTANT, password_file(directory, HOMEASSISTANT)),
              "  plug configs: %s (Wi-Fi %s, time server %s)"
              % (os.path.join(directory, "nodes", "<plug>", "config.json"),
                 repr(used["wifi_ssid"]) if used.get("wifi_ssid") else "NOT SET",
                 used.get("ntp_host"))]
    if used.get("cluster"):
        lines += ["  NATS cluster: copy %s to node i as /etc/nats-server.conf (JetStream in %s, "
                  "owned by the user nats), then sudo systemctl restart nats-server on each"
                  % (os.path.join(directory, "nats-<i>.conf"), used.get("nats_store")),
                  "  cluster collectors: %s (set its store; README \"Past one Pi\")"
                  % os.path.join(directory, CLUSTER_CONFIG_FILE)]
    command = broker_access_command(directory)
    if command:
        lines.append("  mosquitto (group %s) cannot read these files yet; as root, run:\n%s"
                     % (BROKER_GROUP, command))
    return "\n".join(lines)
