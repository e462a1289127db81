"""provision.py - `wattlog provision`: credentials, ACL and node configs for a locked-down broker.

    wattlog provision [--dir DIR] [--broker-host HOST] [--wifi-ssid NAME [--wifi-password-file F]]
                      [--ntp-host HOST] [--port N] [--listen ADDR] [--tls] NODE...

Writes into DIR (kept between runs: provisioning again adds nodes and keeps every existing
password, so configured plugs keep working; provision.json remembers the broker's address,
port, listen address, TLS, the Wi-Fi's name and the time server, so a later run need not
repeat them):
  credentials.json     {user: password} for every user below (0600; the only complete copy)
  <client>.password    the password of wattlog-collector, wattlog-operator and homeassistant,
                       one file each (0600), for --password-file and Home Assistant
  passwd               mosquitto password file, hashed by `mosquitto_passwd -U`
  acl                  mosquitto ACL (below)
  mosquitto.conf       a listener (all interfaces, or --listen ADDR) that refuses anonymous
                       clients, ties each client id to its user name and uses the two files
  nodes/<node>/config.json   what goes on the plug's flash (Wi-Fi, broker host, port, user,
                       password, ntp_host, ota_key)
  wifi.password        the Wi-Fi's password (0600), from --wifi-password-file or the prompt:
                       never from the command line, where `ps` shows it
  nodes/<node>/ota.key the plug's update key (64 hex digits, 0600, made once): `wattlog ota`
                       authenticates each update's manifest with it (HMAC-SHA256)
  http.token           the token the HTTP API's actions (relay, commands) need (0600)
  wattlog.toml         the collector's settings (settings.py): the broker's URL, its password
                       file, the HTTP side; relative paths, so systemd can hand the files over
                       (service.py). Both are made once and then kept: no token or password
                       is ever a default, and an edited config is never overwritten
  with --tls: ca.crt, ca.key (a CA made here, 10 years), server.crt, server.key (the broker,
  for --broker-host), the listener on 8883 with them, and "ca": "ca.crt" in the node configs
  (copy ca.crt onto the plug too).

Who reads what: Debian's mosquitto starts as root and drops to the user `mosquitto` before it
reads its files. Where a group `mosquitto` exists, DIR is 0750 and passwd, acl,
mosquitto.conf, server.key, server.crt and ca.crt are 0640, group mosquitto; every other
secret (credentials.json, *.password, node configs, ca.key) is 0600, owner only. Each file is
created with its final mode (durable.py), never widened after the fact. Not root and not in
the group, provision cannot give the files to the group: broker_access_command() is the one
line to run as root.

`use_username_as_clientid` makes the broker replace each client's id with its user name, so
no client can take over another's session (a plug connecting as `wattlog-collector` would
otherwise knock the collector off). Two clients logged in as one user take each other's
place: hence a user per program, and the update tool's own logins (below), one per `wattlog
ota` running at once, so that an operator's login beside an update or a second update does
not cut one off. They share the operator's password (credentials.json repeats it; the
operator's password file serves them all): they are the operator, as the update tool.

Users and what the ACL lets them do, each exactly what it uses (a `user` block each: every
user in credentials.json but the three programs' is a node):
  <node>              write wattlog/<node>/status, state, readings, log, ota/req, ota/status
                      and homeassistant/device/<node>/config; read wattlog/<node>/relay/set,
                      cmd, ack, state (its own, after a power cut), ota/manifest, ota/chunk
                      and homeassistant/status
  wattlog-collector   read wattlog/+/readings, status and ack (the retained acks, at start-up);
                      write wattlog/+/ack; read wattlog/+/ota/status and
                      homeassistant/device/+/config (each plug's version and last update,
                      for `wattlog nodes`: firmware.py); for its HTTP API (api.py) read
                      wattlog/+/state and log; read $SYS/broker/uptime (was a lost connection
                      a broker restart, or another client logged in as it? collector.py);
                      for the appliances' runs (runs/ha.py) write wattlog/+/event and run and
                      exactly the three discovery topics of a plug's run triggers and
                      run-state sensor, read homeassistant/status
  wattlog-operator    `wattlog plug`: read wattlog/+/status and state; write wattlog/+/relay/set
                      and wattlog/+/cmd; `wattlog ota`: write wattlog/+/ota/manifest and
                      ota/chunk, read wattlog/+/ota/req and ota/status (kept for a `wattlog
                      ota` whose broker lacks the logins below)
  wattlog-operator-ota1 .. -ota8   `wattlog ota` (fleet/ota.py takes the first free
                      one): read wattlog/+/status, ota/req and ota/status; write
                      wattlog/+/ota/manifest and ota/chunk
  homeassistant       read wattlog/+/status, state, event and run; write wattlog/+/relay/set;
                      readwrite
                      homeassistant/# (discovery, its own status)
A node therefore cannot publish readings as another node, switch another node's relay, nor
free its own readings with an ack of its own. mosquitto acknowledges a denied publish and
drops it, and grants a denied subscription and delivers nothing (REFERENCE.md): denial is
silent.
"""

import datetime
import grp
import ipaddress
import os
import secrets
import shlex
import shutil
import subprocess
import zoneinfo

from wattlog.store import durable
from wattlog.store.feeds import NODE_ID

COLLECTOR = "wattlog-collector"
OPERATOR = "wattlog-operator"
HOMEASSISTANT = "homeassistant"
CLIENTS = (COLLECTOR, OPERATOR, HOMEASSISTANT)
OTA_USERS = tuple("%s-ota%d" % (OPERATOR, i) for i in range(1, 9))  # `wattlog ota`'s logins
NOT_NODES = CLIENTS + OTA_USERS  # every user in credentials.json but these is a node
BROKER_GROUP = "mosquitto"
TOKEN_FILE = "http.token"
CONFIG_FILE = "wattlog.toml"
BROKER_FILES = ("passwd", "acl", "mosquitto.conf")  # what mosquitto reads, with the TLS files
TLS_BROKER_FILES = ("server.key", "server.crt", "ca.crt")
WIFI_PASSWORD_FILE = "wifi.password"

ACL = """# wattlog ACL (wattlog provision): each user may do exactly what its program does
user %(collector)s
topic read %(base)s/+/readings
topic read %(base)s/+/status
topic read %(base)s/+/ack
topic write %(base)s/+/ack
topic read %(base)s/+/state
topic read %(base)s/+/log
topic read %(base)s/+/ota/status
topic read %(ha)s/device/+/config
topic read $SYS/broker/uptime
topic write %(base)s/+/event
topic write %(base)s/+/run
topic write %(ha)s/device_automation/+/run_started/config
topic write %(ha)s/device_automation/+/run_finished/config
topic write %(ha)s/sensor/+/run_state/config
topic read %(ha)s/status

user %(operator)s
topic read %(base)s/+/status
topic read %(base)s/+/state
topic write %(base)s/+/relay/set
topic write %(base)s/+/cmd
topic write %(base)s/+/ota/manifest
topic write %(base)s/+/ota/chunk
topic read %(base)s/+/ota/req
topic read %(base)s/+/ota/status

%(ota)suser %(homeassistant)s
topic read %(base)s/+/status
topic read %(base)s/+/state
topic read %(base)s/+/event
topic read %(base)s/+/run
topic write %(base)s/+/relay/set
topic readwrite %(ha)s/#

# one block per node, named by its node id
"""

OTA_ACL = """user %(user)s
topic read %(base)s/+/status
topic write %(base)s/+/ota/manifest
topic write %(base)s/+/ota/chunk
topic read %(base)s/+/ota/req
topic read %(base)s/+/ota/status

"""

# one block per node (not `pattern` lines: a pattern applies to every user, the three above too)
NODE_ACL = """user %(node)s
topic write %(base)s/%(node)s/status
topic write %(base)s/%(node)s/state
topic write %(base)s/%(node)s/readings
topic write %(base)s/%(node)s/log
topic write %(base)s/%(node)s/ota/req
topic write %(base)s/%(node)s/ota/status
topic write %(ha)s/device/%(node)s/config
topic read %(base)s/%(node)s/relay/set
topic read %(base)s/%(node)s/cmd
topic read %(base)s/%(node)s/ack
topic read %(base)s/%(node)s/state
topic read %(base)s/%(node)s/ota/manifest
topic read %(base)s/%(node)s/ota/chunk
topic read %(ha)s/status

"""


class ProvisionError(Exception):
    pass


def broker_gid():
    """The gid of the group mosquitto runs as, or None where there is no such group."""
    try:
        return grp.getgrnam(BROKER_GROUP).gr_gid
    except KeyError:
        return None


def _share_dir(directory):
    """DIR 0750 group mosquitto when that can be done; returns the gid the broker's files
    get (None: owner only, 0600)."""
    gid = broker_gid()
    if gid is not None:
        try:
            os.chown(directory, -1, gid)
            os.chmod(directory, 0o750)
            return gid
        except PermissionError:
            pass
    os.chmod(directory, 0o700)
    return None


def _address(value, flag, example):
    if not value or not value.strip() or any(c.isspace() for c in value):
        raise ProvisionError("%s %r is not an address: give the name or IP address %s"
                             % (flag, value, example))


def provision(directory, nodes, broker_host=None, port=None, tls=False, listen=None,
              base="wattlog", ha_prefix="homeassistant", progress=print, broadlink=None,
              wifi=None, ntp_host=None):
    """Returns {user: password} for everything provisioned so far. The broker's address, port,
    listen address, TLS, the Wi-Fi's name and the time server are remembered (provision.json):
    a later run without them keeps them, and one that changes them rewrites every plug's
    config.json and says so. wifi: (ssid, password) for every plug (the password is kept in
    wifi.password, 0600); ntp_host: the plugs' time server (default: the broker's host, the Pi:
    no plug needs the internet). broadlink ("off", "read" or "control": the plug's SP3S
    protocol, wattnode/broadlink.py) is set in the named plugs' config.json; without it each
    keeps the mode its config.json has."""
    if broadlink not in (None, "off", "read", "control"):
        raise ProvisionError("--broadlink %r must be off, read or control" % broadlink)
    saved = _saved(directory)
    broker_host = saved.get("broker_host") if broker_host is None else broker_host
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
    tool = shutil.which("mosquitto_passwd")
    if tool is None:
        raise ProvisionError("mosquitto_passwd is missing: install the mosquitto package")
    if os.path.isdir(directory) and os.listdir(directory) and not os.path.exists(
            os.path.join(directory, "credentials.json")):
        raise ProvisionError("%s holds other files and no credentials.json: give provision a "
                             "directory of its own (e.g. /etc/wattlog)" % directory)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    gid = _share_dir(directory)
    shared = 0o640 if gid is not None else 0o600
    cred_path = os.path.join(directory, "credentials.json")
    try:
        creds = durable.read_json(cred_path) or {}
    except ValueError as e:
        raise ProvisionError("%s is unreadable (%s); fix or remove it" % (cred_path, e)) from None
    for user in list(CLIENTS) + list(nodes):
        if user not in creds:
            creds[user] = secrets.token_urlsafe(18)
            progress("new user %s" % user)
    for user in OTA_USERS:
        creds[user] = creds[OPERATOR]
    durable.write_json(cred_path, creds, mode=0o600)
    for user in CLIENTS:
        durable.write_bytes(password_file(directory, user), (creds[user] + "\n").encode(),
                            mode=0o600)
    if _create_once(os.path.join(directory, TOKEN_FILE),
                    (secrets.token_urlsafe(32) + "\n").encode()):
        progress("new HTTP token in %s" % os.path.join(directory, TOKEN_FILE))
    _write_passwd(tool, os.path.join(directory, "passwd"), creds, shared, gid, progress)
    names = {"collector": COLLECTOR, "operator": OPERATOR, "homeassistant": HOMEASSISTANT,
             "base": base, "ha": ha_prefix}
    names["ota"] = "".join(OTA_ACL % dict(names, user=user) for user in OTA_USERS)
    acl = ACL % names + "".join(NODE_ACL % dict(names, node=user) for user in sorted(creds)
                                if user not in NOT_NODES)
    durable.write_bytes(os.path.join(directory, "acl"), acl.encode(), mode=shared, group=gid)

    tls = tls or bool(saved.get("tls"))
    port = port or saved.get("port") or (8883 if tls else 1883)
    listen = listen or saved.get("listen")
    ntp_host = ntp_host or saved.get("ntp_host") or broker_host
    wifi_path = os.path.join(directory, WIFI_PASSWORD_FILE)
    if wifi is not None:
        wifi_changed = wifi[0] != saved.get("wifi_ssid") or wifi[1] != _read_wifi(wifi_path)
        durable.write_bytes(wifi_path, (wifi[1] + "\n").encode(), mode=0o600)
        ssid = wifi[0]
    else:
        wifi_changed, ssid = False, saved.get("wifi_ssid")
    moved = [k for k, v in (("port", port), ("broker host", broker_host))
             if saved.get(_FIELD[k], v) != v]
    changed = moved + ["time server"] * (saved.get("ntp_host", ntp_host) != ntp_host) \
        + ["Wi-Fi"] * wifi_changed
    if saved and "ntp_host" not in saved:  # provisioned by a wattlog that set no time server
        changed.append("time server")
    durable.write_json(os.path.join(directory, "provision.json"),
                       {"broker_host": broker_host, "port": port, "tls": tls, "listen": listen,
                        "wifi_ssid": ssid, "ntp_host": ntp_host}, mode=0o600)
    plugs = {u for u in creds if u not in NOT_NODES}
    if changed and plugs - set(nodes):
        nodes = sorted(set(nodes) | plugs)
        progress("the %s changed: every plug's config.json is rewritten; copy each to its plug "
                 "again" % " and ".join(changed))
    if ssid is None:
        progress("no Wi-Fi for the plugs yet: their config.json has none, so a plug could "
                 "never join a network (tools/deploy refuses it); run provision again with "
                 "--wifi-ssid NAME")
    if tls:
        make_tls(directory, broker_host, gid)
    durable.write_bytes(os.path.join(directory, "mosquitto.conf"),
                        _mosquitto_conf(directory, port, listen, tls).encode(), mode=shared,
                        group=gid)
    os.makedirs(os.path.join(directory, "nodes"), mode=0o700, exist_ok=True)
    for node in nodes:
        node_dir = os.path.join(directory, "nodes", node)
        os.makedirs(node_dir, mode=0o700, exist_ok=True)
        broker = {"host": broker_host, "port": port, "user": node, "password": creds[node],
                  "ca": "ca.crt" if tls else None}
        _create_once(ota_key_file(directory, node), (secrets.token_hex(32) + "\n").encode())
        node_config = {"node_id": node, "base_topic": base, "broker": broker,
                       "ntp_host": ntp_host, "ota_key": read_ota_key(directory, node)}
        if ssid is not None:
            node_config["wifi"] = {"ssid": ssid, "password": _read_wifi(wifi_path)}
        mode = broadlink or _kept_broadlink(os.path.join(node_dir, "config.json"))
        if mode:
            node_config["broadlink"] = mode
        durable.write_json(os.path.join(node_dir, "config.json"), node_config, mode=0o600)
    config = os.path.join(directory, CONFIG_FILE)
    url = broker_url(COLLECTOR, _collector_host(broker_host, listen, tls), port, tls)
    if not _create_once(config, collector_config(config, url, tls, base).encode()) and moved:
        progress("%s is yours and is kept as it is: set broker = \"%s\" in it" % (config, url))
    return creds


_FIELD = {"port": "port", "broker host": "broker_host", "time server": "ntp_host"}


def _saved(directory):
    """What provision.json remembers ({} before the first run, or when it is unreadable)."""
    try:
        saved = durable.read_json(os.path.join(directory, "provision.json")) or {}
    except ValueError:
        return {}
    return saved if isinstance(saved, dict) else {}


def _read_wifi(path):
    """The Wi-Fi password kept in `path` ('' for an open network, None when there is none)."""
    try:
        with open(path, "rb") as f:
            return f.readline().rstrip(b"\r\n").decode()
    except (OSError, UnicodeDecodeError):
        return None


def _kept_broadlink(path):
    """The broadlink mode a plug's config.json already has (None: none, or unreadable)."""
    try:
        mode = (durable.read_json(path) or {}).get("broadlink")
    except (ValueError, AttributeError):
        return None
    return mode if mode in ("off", "read", "control") else None


def _create_once(path, data):
    """A new file at `path` (0600 from the start), complete or not at all; False, and the file
    left alone, if there is one already."""
    tmp = path + ".new"
    with durable.create(tmp, 0o600) as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)  # fails if path exists: never a half-written or replaced file
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    durable.fsync_dir(os.path.dirname(os.path.abspath(path)))
    return True


def _local_zone():
    """This machine's IANA zone name (from /etc/localtime), or UTC."""
    name = os.path.realpath("/etc/localtime").partition("/zoneinfo/")[2]
    try:
        zoneinfo.ZoneInfo(name)
        return name
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return "UTC"


def collector_config(path, url, tls, base="wattlog"):
    """wattlog.toml for a collector that logs in as wattlog-collector (settings.py)."""
    return """# wattlog.toml - the collector's settings: wattlog collect --config %(path)s
# Written once by `wattlog provision`; yours to edit, it is never rewritten. Every key may be
# left out (settings.py lists them and their defaults); a command-line flag wins over it.
# Relative file names are read from this file's directory. After changing which files it
# names, run `sudo wattlog install-service --config %(path)s` again.
broker = "%(url)s"
password_file = "%(password)s"
%(ca)sbase_topic = "%(base)s"
data = "/var/lib/wattlog"
commit_interval = 300        # seconds readings may wait in memory before they are written
summary_interval = "6h"      # how often the query summaries are written
timezone = "%(zone)s"      # whose days, weeks and months the energy figures count

[http]
listen = "127.0.0.1:8080"    # "0.0.0.0:8080" serves the LAN
read_open = true             # reading needs no token (think twice on the LAN); actions do
token_file = "%(token)s"
operator_password_file = "%(operator)s"  # relay switching logs in as wattlog-operator

# [tariff]                   # for the cost of the energy figures
# currency = "EUR"
# price = 0.30               # per kWh; or day and night prices:
# day_price = 0.32
# night_price = 0.22
# night_start = "22:00"
# night_end = "06:00"
""" % {"path": os.path.abspath(path), "url": url,
       "password": os.path.basename(password_file("", COLLECTOR)),
       "ca": 'ca = "ca.crt"\n' if tls else "", "base": base, "zone": _local_zone(),
       "token": TOKEN_FILE, "operator": os.path.basename(password_file("", OPERATOR))}


def _collector_host(host, listen, tls):
    """The broker's address as a client on this machine uses it: the listen address when the
    broker listens on one address only (without TLS: a certificate names broker_host)."""
    if listen and not tls and listen not in ("0.0.0.0", "::"):
        return listen
    return host


def _mosquitto_conf(directory, port, listen, tls):
    """Global options first; use_username_as_clientid is a listener option, so it follows the
    listener line (before any listener, it would open a default listener on port 1883)."""
    path = os.path.abspath(directory)
    conf = ("# wattlog provision: copy this into /etc/mosquitto/conf.d/ and restart mosquitto\n"
            "per_listener_settings false\nallow_anonymous false\npassword_file %s\n"
            "acl_file %s\nlistener %d%s\nuse_username_as_clientid true\n"
            % (os.path.join(path, "passwd"), os.path.join(path, "acl"), port,
               " " + listen if listen else ""))
    if tls:
        conf += "cafile %s\ncertfile %s\nkeyfile %s\n" % tuple(
            os.path.join(path, n) for n in ("ca.crt", "server.crt", "server.key"))
    return conf


def _write_passwd(tool, path, creds, mode, gid, progress):
    """The clear passwords go into a 0600 temp file that `mosquitto_passwd -U` hashes in
    place: no password ever appears on a command line."""
    tmp = path + ".tmp"
    with durable.create(tmp, 0o600) as f:
        f.write("".join("%s:%s\n" % kv for kv in sorted(creds.items())).encode())
    progress("hashing %d passwords" % len(creds))
    done = subprocess.run([tool, "-U", tmp], capture_output=True, text=True)
    if done.returncode != 0:
        os.unlink(tmp)
        raise ProvisionError("mosquitto_passwd -U failed: %s"
                             % (done.stderr.strip() or "exit status %d" % done.returncode))
    durable.install(tmp, path, mode, gid)


def settings(directory):
    """What provision.json remembers: broker_host, port, tls, listen, wifi_ssid, ntp_host."""
    return durable.read_json(os.path.join(directory, "provision.json"))


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


def password_file(directory, user):
    return os.path.join(directory, "%s.password" % user)


def broker_access_command(directory):
    """The one command line (for root) that lets the group mosquitto read what the broker
    needs in `directory`, or None when it can already (or there is no such group)."""
    gid = broker_gid()
    if gid is None:
        return None
    paths = [directory] + [os.path.join(directory, n) for n in BROKER_FILES + TLS_BROKER_FILES
                           if os.path.exists(os.path.join(directory, n))]

    def readable(path):
        st = os.stat(path)
        need = 0o050 if os.path.isdir(path) else 0o040  # a directory: read and search
        return st.st_gid == gid and st.st_mode & need == need
    if all(readable(p) for p in paths):
        return None
    quoted = " ".join(shlex.quote(p) for p in paths)
    return "sudo chgrp %s %s && sudo chmod g+rX %s" % (BROKER_GROUP, quoted, quoted)


def make_tls(directory, host, gid=None):
    """A CA and a server certificate for `host` (a name or an IP address), made once. The CA's
    key stays 0600; the broker's key and certificates go to group `gid` (0640) if given."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    ca_crt, ca_key = os.path.join(directory, "ca.crt"), os.path.join(directory, "ca.key")
    now = datetime.datetime.now(datetime.timezone.utc)
    shared = 0o640 if gid is not None else 0o600

    def pem_key(key):
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    if os.path.exists(ca_crt) and os.path.exists(ca_key):
        with open(ca_key, "rb") as f:
            key = serialization.load_pem_private_key(f.read(), None)
        with open(ca_crt, "rb") as f:
            ca = x509.load_pem_x509_certificate(f.read())
    else:
        key = ec.generate_private_key(ec.SECP256R1())
        ca = (x509.CertificateBuilder().subject_name(name("wattlog CA")).issuer_name(name("wattlog CA"))
              .public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=3650))
              .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
              .sign(key, hashes.SHA256()))
        durable.write_bytes(ca_key, pem_key(key), mode=0o600)
    durable.write_bytes(ca_crt, ca.public_bytes(serialization.Encoding.PEM), mode=shared,
                        group=gid)
    try:
        san = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        san = x509.DNSName(host)
    server_key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(name(host)).issuer_name(ca.subject)
            .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .sign(key, hashes.SHA256()))
    durable.write_bytes(os.path.join(directory, "server.key"), pem_key(server_key), mode=shared,
                        group=gid)
    durable.write_bytes(os.path.join(directory, "server.crt"),
                        cert.public_bytes(serialization.Encoding.PEM), mode=shared, group=gid)


def broker_url(user, host, port, tls=False):
    """The URL a client gives as --broker; the password goes in a file, never in here."""
    return "%s://%s@%s:%d" % ("mqtts" if tls else "mqtt", user, host, port)


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
    command = broker_access_command(directory)
    if command:
        lines.append("  mosquitto (group %s) cannot read these files yet; as root, run:\n%s"
                     % (BROKER_GROUP, command))
    return "\n".join(lines)
