"""provision.py - `wattlog provision`: credentials, ACL and node configs for a locked-down broker.

    wattlog provision --dir DIR --broker-host HOST [--port N] [--tls] NODE [NODE ...]

Writes into DIR (kept between runs: provisioning again adds nodes and keeps every existing
password, so configured plugs keep working):
  credentials.json     {user: password} for every user below (mode 0600; the only copy)
  passwd               mosquitto password file, hashed by mosquitto_passwd itself
  acl                  mosquitto ACL (below)
  mosquitto.conf       a listener that refuses anonymous clients and uses the two files
  nodes/<node>/config.json   what goes on the plug's flash (broker host, port, user, password)
  with --tls: ca.crt, ca.key (a CA made here, 10 years), server.crt, server.key (the broker,
  for --broker-host), the listener on 8883 with them, and "ca": "ca.crt" in the node configs
  (copy ca.crt onto the plug too).

Users and what the ACL lets them do (mosquitto's `pattern` lines put the user name in %u):
  <node>              write wattlog/<node>/# and homeassistant/device/<node>/config; read only
                      its own wattlog/<node>/relay/set, cmd and ack, and homeassistant/status
  wattlog-collector   read wattlog/#; write wattlog/+/ack (and nothing else)
  wattlog-operator    for Home Assistant and `wattlog plug`: read wattlog/# and
                      homeassistant/#, write wattlog/+/relay/set, wattlog/+/cmd, homeassistant/#
A node therefore cannot publish readings as another node nor switch another node's relay.
mosquitto acknowledges a denied publish and drops it (REFERENCE.md): denial is silent.
"""

import datetime
import ipaddress
import os
import secrets
import shutil
import subprocess

from wattlog import durable
from wattlog.ingest import NODE_ID

COLLECTOR = "wattlog-collector"
OPERATOR = "wattlog-operator"

ACL = """# wattlog ACL (wattlog provision): each node writes only under its own topics
user %(collector)s
topic read %(base)s/#
topic write %(base)s/+/ack

user %(operator)s
topic read %(base)s/#
topic write %(base)s/+/relay/set
topic write %(base)s/+/cmd
topic readwrite %(ha)s/#

# every other user is a node, named by its node id
pattern write %(base)s/%%u/#
pattern read %(base)s/%%u/relay/set
pattern read %(base)s/%%u/cmd
pattern read %(base)s/%%u/ack
pattern write %(ha)s/device/%%u/config
pattern read %(ha)s/status
"""


class ProvisionError(Exception):
    pass


def provision(directory, nodes, broker_host, port=None, tls=False, base="wattlog",
              ha_prefix="homeassistant", progress=print):
    """Returns {user: password} for everything provisioned so far."""
    for node in nodes:
        if not NODE_ID.match(node) or node in (COLLECTOR, OPERATOR):
            raise ProvisionError("%r is not a node id: 1-32 of a-z, 0-9, _ and -" % node)
    tool = shutil.which("mosquitto_passwd")
    if tool is None:
        raise ProvisionError("mosquitto_passwd is missing: install the mosquitto package")
    os.makedirs(directory, exist_ok=True)
    cred_path = os.path.join(directory, "credentials.json")
    try:
        creds = durable.read_json(cred_path) or {}
    except ValueError as e:
        raise ProvisionError("%s is unreadable (%s); fix or remove it" % (cred_path, e)) from None
    for user in [COLLECTOR, OPERATOR] + list(nodes):
        if user not in creds:
            creds[user] = secrets.token_urlsafe(18)
            progress("new user %s" % user)
    durable.write_json(cred_path, creds)
    os.chmod(cred_path, 0o600)

    passwd = os.path.join(directory, "passwd")
    tmp = passwd + ".tmp"
    open(tmp, "w").close()
    os.chmod(tmp, 0o600)
    for i, (user, password) in enumerate(sorted(creds.items())):
        subprocess.run([tool, "-b", tmp, user, password], check=True, capture_output=True)
        progress("hashing passwords: %d/%d" % (i + 1, len(creds)))
    os.replace(tmp, passwd)
    with open(os.path.join(directory, "acl"), "w") as f:
        f.write(ACL % {"collector": COLLECTOR, "operator": OPERATOR, "base": base, "ha": ha_prefix})

    port = port or (8883 if tls else 1883)
    listener = "listener %d\n" % port
    if tls:
        make_tls(directory, broker_host)
        listener += "cafile %s\ncertfile %s\nkeyfile %s\n" % tuple(
            os.path.join(os.path.abspath(directory), n) for n in ("ca.crt", "server.crt", "server.key"))
    with open(os.path.join(directory, "mosquitto.conf"), "w") as f:
        f.write("# wattlog provision: include this in /etc/mosquitto/conf.d/\n"
                "per_listener_settings false\nallow_anonymous false\npassword_file %s\n"
                "acl_file %s\n%s" % (os.path.abspath(passwd),
                                     os.path.abspath(os.path.join(directory, "acl")), listener))
    for node in nodes:
        node_dir = os.path.join(directory, "nodes", node)
        os.makedirs(node_dir, exist_ok=True)
        broker = {"host": broker_host, "port": port, "user": node, "password": creds[node],
                  "ca": "ca.crt" if tls else None}
        path = os.path.join(node_dir, "config.json")
        durable.write_json(path, {"node_id": node, "base_topic": base, "broker": broker})
        os.chmod(path, 0o600)
    return creds


def make_tls(directory, host):
    """A CA and a server certificate for `host` (a name or an IP address), made once."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    ca_crt, ca_key = os.path.join(directory, "ca.crt"), os.path.join(directory, "ca.key")
    now = datetime.datetime.now(datetime.timezone.utc)

    def write_key(path, key):
        with open(path, "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
        os.chmod(path, 0o600)

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
        write_key(ca_key, key)
        with open(ca_crt, "wb") as f:
            f.write(ca.public_bytes(serialization.Encoding.PEM))
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
    write_key(os.path.join(directory, "server.key"), server_key)
    with open(os.path.join(directory, "server.crt"), "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))


def broker_url(creds, user, host, port, tls=False):
    return "%s://%s:%s@%s:%d" % ("mqtts" if tls else "mqtt", user, creds[user], host, port)


def main_text(creds, directory, host, port, tls):
    return ("provisioned %d nodes in %s\n  broker config: %s/mosquitto.conf (include it in "
            "/etc/mosquitto/conf.d/ and restart mosquitto)\n  collector: wattlog collect "
            "--broker '%s'%s --data DATA\n  node configs: %s/nodes/<node>/config.json"
            % (len(creds) - 2, directory, directory, broker_url(creds, COLLECTOR, host, port, tls),
               " --ca %s/ca.crt" % directory if tls else "", directory))

