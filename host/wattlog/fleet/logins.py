"""logins.py - who logs in to the broker and what each may do: the users `wattlog provision`
makes, their passwords (credentials.json) and the ACL that gives each user exactly what its
program uses. mosquitto reads the ACL as it is (mosquittofiles.py); a NATS cluster's
permissions are derived from the same text (natsconf.py), so a plug's rights are the same on
one Pi and in a cluster.

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

import os
import secrets

from wattlog.store import durable

COLLECTOR = "wattlog-collector"
OPERATOR = "wattlog-operator"
HOMEASSISTANT = "homeassistant"
CLIENTS = (COLLECTOR, OPERATOR, HOMEASSISTANT)
OTA_USERS = tuple("%s-ota%d" % (OPERATOR, i) for i in range(1, 9))  # `wattlog ota`'s logins
NOT_NODES = CLIENTS + OTA_USERS  # every user in credentials.json but these is a node

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


def credentials(directory, users, progress):
    """{user: password} from credentials.json, with a new password for each of `users` it
    lacks (and the update tool's logins, the operator's); written back 0600, and the three
    programs' password files with it."""
    path = os.path.join(directory, "credentials.json")
    try:
        creds = durable.read_json(path) or {}
    except ValueError as e:
        raise ProvisionError("%s is unreadable (%s); fix or remove it" % (path, e)) from None
    for user in list(CLIENTS) + list(users):
        if user not in creds:
            creds[user] = secrets.token_urlsafe(18)
            progress("new user %s" % user)
    for user in OTA_USERS:
        creds[user] = creds[OPERATOR]
    durable.write_json(path, creds, mode=0o600)
    for user in CLIENTS:
        durable.write_bytes(password_file(directory, user), (creds[user] + "\n").encode(),
                            mode=0o600)
    return creds


def nodes_of(creds):
    """The plugs among the users, sorted."""
    return sorted(u for u in creds if u not in NOT_NODES)


def acl_text(creds, base="wattlog", ha_prefix="homeassistant"):
    """The mosquitto ACL for every user in `creds`."""
    names = {"collector": COLLECTOR, "operator": OPERATOR, "homeassistant": HOMEASSISTANT,
             "base": base, "ha": ha_prefix}
    names["ota"] = "".join(OTA_ACL % dict(names, user=user) for user in OTA_USERS)
    return ACL % names + "".join(NODE_ACL % dict(names, node=node) for node in nodes_of(creds))


def password_file(directory, user):
    return os.path.join(directory, "%s.password" % user)


def create_once(path, data):
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
