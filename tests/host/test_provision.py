"""test_provision.py - `wattlog provision` writes what mosquitto and the plugs need, keeps every
password when run again, and signs the broker's certificate with the CA it makes. (That the
broker then enforces the ACL is tested against a real mosquitto: tests/e2e/test_control.py.)"""

import json
import os

import pytest

from wattlog.provision import COLLECTOR, OPERATOR, ProvisionError, provision


def test_files_users_and_idempotence(tmp_path):
    d = str(tmp_path / "p")
    creds = provision(d, ["plug-a"], "192.168.1.10", progress=lambda t: None)
    assert set(creds) == {COLLECTOR, OPERATOR, "plug-a"}
    cfg = json.loads((tmp_path / "p" / "nodes" / "plug-a" / "config.json").read_text())
    assert cfg["broker"] == {"host": "192.168.1.10", "port": 1883, "user": "plug-a",
                             "password": creds["plug-a"], "ca": None}
    assert oct(os.stat(tmp_path / "p" / "credentials.json").st_mode & 0o777) == "0o600"
    passwd = (tmp_path / "p" / "passwd").read_text()
    assert all(line.split(":")[0] in creds for line in passwd.splitlines())
    assert creds["plug-a"] not in passwd  # hashed, never in clear
    acl = (tmp_path / "p" / "acl").read_text()
    assert "pattern write wattlog/%u/#" in acl and "pattern read wattlog/%u/ack" in acl
    assert "topic write wattlog/+/ack" in acl
    conf = (tmp_path / "p" / "mosquitto.conf").read_text()
    assert "allow_anonymous false" in conf and "listener 1883" in conf
    again = provision(d, ["plug-b"], "192.168.1.10", progress=lambda t: None)
    assert {k: again[k] for k in creds} == creds and "plug-b" in again


def test_bad_node_ids_are_refused(tmp_path):
    with pytest.raises(ProvisionError, match="not a node id"):
        provision(str(tmp_path), ["Kitchen Plug"], "h", progress=lambda t: None)
    with pytest.raises(ProvisionError, match="not a node id"):
        provision(str(tmp_path), [COLLECTOR], "h", progress=lambda t: None)


def test_tls_certificate_chains_to_the_ca(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    d = tmp_path / "t"
    provision(str(d), ["plug-a"], "192.168.1.10", tls=True, progress=lambda t: None)
    ca = x509.load_pem_x509_certificate((d / "ca.crt").read_bytes())
    server = x509.load_pem_x509_certificate((d / "server.crt").read_bytes())
    ca.public_key().verify(server.signature, server.tbs_certificate_bytes,
                           ec.ECDSA(server.signature_hash_algorithm))
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["192.168.1.10"]
    cfg = json.loads((d / "nodes" / "plug-a" / "config.json").read_text())
    assert cfg["broker"]["port"] == 8883 and cfg["broker"]["ca"] == "ca.crt"
    conf = (d / "mosquitto.conf").read_text()
    assert "listener 8883" in conf and "certfile" in conf
    before = (d / "ca.crt").read_bytes()
    provision(str(d), ["plug-b"], "192.168.1.10", tls=True, progress=lambda t: None)
    assert (d / "ca.crt").read_bytes() == before  # the plugs' CA stays the same
