"""tls.py - `wattlog provision --tls`: a CA made here (10 years) and a server certificate for
the broker's address, signed by it. The plugs get ca.crt (config.json's "ca"), the broker
(mosquitto, or each NATS node's MQTT gateway) server.crt and server.key; ca.key stays 0600,
owner only, and is made once, so provisioning again signs with the same CA and no plug needs
a new ca.crt.
"""

import datetime
import ipaddress
import os

from wattlog.store import durable


def make_tls(directory, host, gid=None, more_hosts=()):
    """A CA and a server certificate for `host` (a name or an IP address) and `more_hosts`,
    made once. The CA's key stays 0600; the broker's key and certificates go to group `gid`
    (0640) if given."""
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
    sans = []
    for h in [host] + [h for h in more_hosts if h != host]:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    server_key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(name(host)).issuer_name(ca.subject)
            .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .sign(key, hashes.SHA256()))
    durable.write_bytes(os.path.join(directory, "server.key"), pem_key(server_key), mode=shared,
                        group=gid)
    durable.write_bytes(os.path.join(directory, "server.crt"),
                        cert.public_bytes(serialization.Encoding.PEM), mode=shared, group=gid)
