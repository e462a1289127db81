"""test_provision.py - `wattlog provision` writes what mosquitto and the plugs need, keeps every
password when run again, signs the broker's certificate with the CA it makes, lets the group
mosquitto read exactly the broker's files, creates every secret 0600 from the start and never
prints a password. (That the broker then starts as Debian starts it and enforces the ACL is
tested against a real mosquitto: tests/e2e/test_broker_security.py.)"""

import builtins
import grp
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from asuser import run_as
from terminal import at_a_terminal
from wattlog import cli
from wattlog.fleet.provision import (CLIENTS, COLLECTOR, HOMEASSISTANT, OPERATOR, OTA_USERS,
                                     ProvisionError, broker_access_command, broker_gid,
                                     main_text, password_file, provision)
from wattnode import config

SECRETS = ("credentials.json", "wattlog-collector.password", "wattlog-operator.password",
           "homeassistant.password", "ca.key", "config.json", "provision.json", "wifi.password")
WIFI = ("home", "correct horse")
BROKER_READS = ("passwd", "acl", "mosquitto.conf", "server.key", "server.crt", "ca.crt")
# created whole (0600) and then kept, not replaced
MADE_ONCE = ("http.token", "wattlog.toml", "ota.key")
needs_group = pytest.mark.skipif(broker_gid() is None, reason="no group mosquitto here")


def quiet(*args, **kw):
    return provision(*args, progress=lambda t: None, **kw)


def test_files_users_and_idempotence(tmp_path):
    d = str(tmp_path / "p")
    creds = quiet(d, ["plug-a"], "192.168.1.10")
    assert set(creds) == {COLLECTOR, OPERATOR, HOMEASSISTANT, "plug-a"} | set(OTA_USERS)
    assert {creds[u] for u in OTA_USERS} == {creds[OPERATOR]}  # the operator, as `wattlog ota`
    cfg = json.loads((tmp_path / "p" / "nodes" / "plug-a" / "config.json").read_text())
    assert cfg["broker"] == {"host": "192.168.1.10", "port": 1883, "user": "plug-a",
                             "password": creds["plug-a"], "ca": None}
    for user in CLIENTS:
        assert open(password_file(d, user)).read() == creds[user] + "\n"
    passwd = (tmp_path / "p" / "passwd").read_text()
    assert sorted(line.split(":")[0] for line in passwd.splitlines()) == sorted(creds)
    assert not [p for p in creds.values() if p in passwd]  # hashed, never in clear
    conf = (tmp_path / "p" / "mosquitto.conf").read_text()
    assert "allow_anonymous false" in conf
    assert "listener 1883\nuse_username_as_clientid true\n" in conf  # a listener option
    again = quiet(d, ["plug-b"], "192.168.1.10")
    assert {k: again[k] for k in creds} == creds and "plug-b" in again


def test_listen_address(tmp_path):
    quiet(str(tmp_path / "p"), ["plug-a"], "192.168.1.10", port=1999, listen="127.0.0.1")
    assert "listener 1999 127.0.0.1\n" in (tmp_path / "p" / "mosquitto.conf").read_text()


def test_bad_node_ids_and_foreign_directories_are_refused(tmp_path):
    for bad in ("Kitchen Plug", COLLECTOR, OPERATOR, HOMEASSISTANT, OTA_USERS[0]):
        with pytest.raises(ProvisionError, match="not a node id"):
            quiet(str(tmp_path / "p"), [bad], "h")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text("root:x:0:0\n")
    with pytest.raises(ProvisionError, match="holds other files and no credentials.json"):
        quiet(str(tmp_path / "etc"), ["plug-a"], "h")
    assert oct((tmp_path / "etc").stat().st_mode & 0o777) == "0o755"  # left alone


def test_tls_certificate_chains_to_the_ca(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    d = tmp_path / "t"
    quiet(str(d), ["plug-a"], "192.168.1.10", tls=True)
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
    quiet(str(d), ["plug-b"], "192.168.1.10", tls=True)
    assert (d / "ca.crt").read_bytes() == before  # the plugs' CA stays the same


def _modes(d):
    out = {}
    for root, dirs, files in os.walk(d):
        for name in dirs + files:
            st = os.stat(os.path.join(root, name))
            out[os.path.relpath(os.path.join(root, name), d)] = (st.st_mode & 0o777, st.st_gid)
    return out


@needs_group
def test_the_broker_group_reads_the_broker_files_and_nothing_else(tmp_path):
    """Debian's mosquitto drops to the user mosquitto before it reads passwd and acl (issue 9
    item 11): DIR 0750 and the broker's files 0640, group mosquitto; every secret 0600, owner
    only; nodes/ 0700."""
    d = tmp_path / "p"
    quiet(str(d), ["plug-a"], "192.168.1.10", tls=True, wifi=WIFI)
    gid = broker_gid()
    modes = _modes(d)
    assert (d.stat().st_mode & 0o777, d.stat().st_gid) == (0o750, gid)
    for name in BROKER_READS:
        assert modes.pop(name) == (0o640, gid), name
    assert modes.pop("nodes")[0] == modes.pop("nodes/plug-a")[0] == 0o700
    assert {name: mode for name, (mode, _) in modes.items()} == {
        name: 0o600 for name in modes}, modes  # the rest: secrets, owner only
    assert set(os.path.basename(n) for n in modes) == set(SECRETS + MADE_ONCE)
    assert broker_access_command(str(d)) is None


def test_every_file_is_created_with_its_final_mode(tmp_path, monkeypatch):
    """With the umask at 0, each file's mode at creation and at its rename into place is what
    provision asked for: no secret (credentials, password files, node configs, keys, the
    password file before it is hashed) is ever readable by anyone else, not even for the
    instant before a chmod (the old code made credentials.json.tmp 0644 and chmod'ed after)."""
    d = tmp_path / "p"
    created, renamed = {}, {}
    real_open, real_os_open, real_replace = builtins.open, os.open, os.replace

    def note(path):
        path = os.fspath(path)
        if str(d) in os.path.abspath(path) and os.path.relpath(path, d) not in created:
            created[os.path.relpath(path, d)] = os.stat(path).st_mode & 0o777

    def spy_open(path, mode="r", *a, **kw):
        f = real_open(path, mode, *a, **kw)
        if isinstance(path, (str, os.PathLike)) and set(mode) & set("wax"):
            note(path)
        return f

    def spy_os_open(path, flags, *a, **kw):
        fd = real_os_open(path, flags, *a, **kw)
        if flags & os.O_CREAT:
            note(path)
        return fd

    def spy_replace(src, dst, *a, **kw):
        st = os.stat(src)
        renamed[os.path.relpath(dst, d)] = (st.st_mode & 0o777, st.st_gid)
        return real_replace(src, dst, *a, **kw)
    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(os, "open", spy_os_open)
    monkeypatch.setattr(os, "replace", spy_replace)
    old = os.umask(0)
    try:
        quiet(str(d), ["plug-a"], "192.168.1.10", tls=True, wifi=WIFI)
        quiet(str(d), ["plug-b"], "192.168.1.10", tls=True, wifi=WIFI)  # again, over them
    finally:
        os.umask(old)
    assert created and all(mode == 0o600 for mode in created.values()), created
    for name, (mode, gid) in renamed.items():
        if os.path.basename(name) in SECRETS:
            assert mode == 0o600, (name, oct(mode))
        else:
            assert os.path.basename(name) in BROKER_READS, name
            assert (mode, gid) in ((0o600, os.getgid()), (0o640, broker_gid())), (name, oct(mode))
    assert {os.path.basename(n) for n in renamed} == set(SECRETS + BROKER_READS)


def test_provision_prints_no_password(tmp_path, capsys):
    """Its closing text names the password files and how to use them (issue 9 item 14: it
    used to show the collector's URL with the password)."""
    d = str(tmp_path / "p")
    cli.main(["provision", "--dir", d, "--broker-host", "192.168.1.10", "--tls", "plug-a"])
    out = capsys.readouterr()
    creds = json.loads((tmp_path / "p" / "credentials.json").read_text())
    assert not [p for p in creds.values() if p in out.out + out.err]
    assert "--config %s/wattlog.toml" % d in out.out
    assert password_file(d, HOMEASSISTANT) in out.out


def test_the_printed_commands_name_the_program_that_runs(tmp_path):
    """sudo's PATH does not hold a venv's bin (/opt/wattlog/bin): every command provision
    prints names the wattlog that runs by its full path (issue 21 item 5), with systemd the
    service and without it the broker and the collector started by hand (item 4)."""
    d = str(tmp_path / "p")
    provision(d, ["plug-a"], "192.168.1.10", progress=lambda text: None)
    creds = json.loads((tmp_path / "p" / "credentials.json").read_text())
    program = "/opt/wattlog/bin/wattlog"
    text = main_text(creds, d, program, systemd=True)
    assert "sudo %s install-service --config %s/wattlog.toml" % (program, d) in text
    assert "sudo systemctl restart mosquitto" in text
    assert "sudo %s plug status NODE" % program in text
    text = main_text(creds, d, program, systemd=False)
    assert "this machine runs no systemd" in text and "systemctl" not in text
    assert "sudo %s collect --config %s/wattlog.toml" % (program, d) in text
    assert "sudo install -d -o mosquitto -g mosquitto /run/mosquitto && sudo mosquitto -c " \
           "/etc/mosquitto/mosquitto.conf -d" in text
    assert not [line for line in text.splitlines() if " wattlog " in line]  # never a bare name


def test_the_wifi_goes_into_every_plug_and_its_password_only_into_0600_files(tmp_path, capsys):
    """--wifi-ssid with the password from a file (never the command line): every plug's
    config.json gets it, and ntp_host the broker's host (the Pi: no plug needs the internet
    for its clock); a later run without it keeps it, and a plug added then gets it too; the
    password is never printed (issue 21 item 1)."""
    d = tmp_path / "p"
    secret = tmp_path / "wifi.txt"
    secret.write_text("correct horse battery\n")
    cli.main(["provision", "--dir", str(d), "--broker-host", "192.168.1.10", "--wifi-ssid",
              "home net", "--wifi-password-file", str(secret), "plug-a"])
    cli.main(["provision", "--dir", str(d), "plug-b"])  # the broker's host and Wi-Fi are kept
    out = capsys.readouterr()
    assert "correct horse" not in out.out + out.err and "Wi-Fi 'home net'" in out.out
    for node in ("plug-a", "plug-b"):
        cfg = json.loads((d / "nodes" / node / "config.json").read_text())
        assert cfg["wifi"] == {"ssid": "home net", "password": "correct horse battery"}
        assert cfg["ntp_host"] == "192.168.1.10" and cfg["broker"]["host"] == "192.168.1.10"
        assert config.no_wifi(config.check(cfg)[0]) is None  # what the plug and deploy check
    assert (d / "wifi.password").stat().st_mode & 0o777 == 0o600
    cli.main(["provision", "--dir", str(d), "--ntp-host", "192.168.1.1"])
    assert "time server changed" in capsys.readouterr().err
    assert json.loads((d / "nodes" / "plug-a" / "config.json").read_text())["ntp_host"] == \
        "192.168.1.1"


def test_wifi_given_later_reaches_the_plugs_provisioned_before(tmp_path, capsys):
    """An owner who provisioned before (no Wi-Fi, and no time server: an earlier wattlog)
    and now gives the Wi-Fi names no plug: every plug's config.json gets it, and says so."""
    d = tmp_path / "p"
    cli.main(["provision", "--dir", str(d), "--broker-host", "10.0.0.2", "plug-a", "plug-b"])
    saved = json.loads((d / "provision.json").read_text())
    del saved["ntp_host"], saved["wifi_ssid"]  # as an earlier wattlog left it
    (d / "provision.json").write_text(json.dumps(saved))
    secret = tmp_path / "wifi.txt"
    secret.write_text("correct horse battery\n")
    capsys.readouterr()
    cli.main(["provision", "--dir", str(d), "--wifi-ssid", "home", "--wifi-password-file",
              str(secret)])
    assert "the Wi-Fi and time server changed: every plug's config.json is rewritten" in \
        capsys.readouterr().err
    for node in ("plug-a", "plug-b"):
        cfg = json.loads((d / "nodes" / node / "config.json").read_text())
        assert cfg["wifi"]["ssid"] == "home" and cfg["ntp_host"] == "10.0.0.2"


def test_without_wifi_provision_says_the_plugs_have_none(tmp_path, capsys):
    d = tmp_path / "p"
    cli.main(["provision", "--dir", str(d), "--broker-host", "10.0.0.2", "plug-a"])
    out = capsys.readouterr()
    assert "no Wi-Fi for the plugs yet" in out.err and "Wi-Fi NOT SET" in out.out
    cfg = json.loads((d / "nodes" / "plug-a" / "config.json").read_text())
    assert "wifi" not in cfg and cfg["ntp_host"] == "10.0.0.2"
    assert config.no_wifi(config.check(cfg)[0]).startswith("config.json has no wifi.ssid")


def test_a_wifi_password_is_read_from_a_file_or_asked_never_taken_from_the_command_line(
        tmp_path):
    """No terminal and no file: one line saying how to give it. In a terminal it is asked
    twice (a mistyped password is a plug that never joins), and two different answers
    change nothing."""
    d = tmp_path / "p"
    argv = [sys.executable, "-m", "wattlog.cli", "provision", "--dir", str(d),
            "--broker-host", "10.0.0.2", "--wifi-ssid", "home", "plug-a"]
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=60)
    assert done.returncode == 1 and done.stderr.splitlines() == [
        "wattlog provision: --wifi-ssid home needs its password: give --wifi-password-file FILE "
        "(the first line; an empty one for an open network), or run provision in a terminal to "
        "be asked"]
    assert not d.exists()
    status, said = at_a_terminal(argv, ["wrong password 1", "wrong password 2"])
    assert status == 1 and "the two Wi-Fi passwords differ: nothing was changed" in said
    assert not d.exists()
    status, said = at_a_terminal(argv, ["typed at the prompt", "typed at the prompt"])
    assert status == 0, said
    assert "typed at the prompt" not in said  # getpass does not echo it
    cfg = json.loads((d / "nodes" / "plug-a" / "config.json").read_text())
    assert cfg["wifi"] == {"ssid": "home", "password": "typed at the prompt"}


@pytest.fixture
def public_tmp():
    """A temporary directory other users can reach (pytest's tmp_path lies under a 0700 one)."""
    path = tempfile.mkdtemp(prefix="wattlog-provision-")
    os.chmod(path, 0o755)
    yield Path(path)
    shutil.rmtree(path)


@needs_group
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to become another user")
def test_without_root_it_says_the_one_command_to_run(public_tmp):
    """Run by a user who may not give files to the group mosquitto (here: nobody),
    provision keeps the broker's files owner-only and prints the one command line that lets
    mosquitto read them; that line, run as root, does."""
    nobody = pwd.getpwnam("nobody")
    d = public_tmp / "home" / "p"
    d.parent.mkdir()
    os.chown(d.parent, nobody.pw_uid, nobody.pw_gid)
    _, out = run_as(nobody, ["provision", "--dir", str(d), "--broker-host", "h", "plug-a"])
    commands = [line for line in out.splitlines() if line.startswith("sudo ")]
    assert len(commands) == 1, out
    assert "mosquitto (group mosquitto) cannot read these files yet; as root, run:" in out
    assert {name: mode for name, (mode, gid) in _modes(d).items() if name in BROKER_READS} == {
        "passwd": 0o600, "acl": 0o600, "mosquitto.conf": 0o600}
    assert broker_access_command(str(d)) == commands[0]
    subprocess.run(commands[0].replace("sudo ", ""), shell=True, check=True)
    assert broker_access_command(str(d)) is None
    assert grp.getgrgid(os.stat(d / "passwd").st_gid).gr_name == "mosquitto"


def test_a_later_run_keeps_the_port_and_a_changed_one_rewrites_every_plug(tmp_path):
    """Run again without --port, provision keeps the port the first run chose (the old code
    rewrote the listener to 1883 while the earlier plugs kept the old port); a run that
    changes it rewrites every plug's config.json and says so."""
    d = tmp_path / "p"
    said = []
    provision(str(d), ["plug-a"], "10.0.0.1", port=1884, progress=said.append)
    provision(str(d), ["plug-b"], "10.0.0.1", progress=said.append)

    def port(node):
        return json.loads((d / "nodes" / node / "config.json").read_text())["broker"]["port"]
    assert "listener 1884" in (d / "mosquitto.conf").read_text()
    assert (port("plug-a"), port("plug-b")) == (1884, 1884)
    provision(str(d), ["plug-c"], "10.0.0.1", port=1999, progress=said.append)
    assert (port("plug-a"), port("plug-b"), port("plug-c")) == (1999, 1999, 1999)
    assert any("the port changed" in s and "copy each to its plug again" in s for s in said)


@pytest.mark.parametrize("host", ["", " ", "two words"])
def test_an_empty_broker_host_is_refused(tmp_path, host):
    with pytest.raises(ProvisionError, match="is not an address"):
        provision(str(tmp_path / "p"), ["plug-a"], host, progress=lambda t: None)


def test_cluster_nodes_are_checked_remembered_and_reach_every_plug(tmp_path):
    """--cluster: fewer than three nodes or a malformed one is refused before anything is
    written; the nodes are kept for later runs; new nodes rewrite every plug's host list."""
    d = str(tmp_path / "p")
    for bad, why in (("10.0.0.1,10.0.0.2", "three or more"), ("10.0.0.1,10.0.0.2,h:x", "HOST")):
        with pytest.raises(ProvisionError, match=why):
            quiet(d, ["plug-a"], cluster=bad)
    assert not os.path.exists(d)
    quiet(d, ["plug-a"], cluster="10.0.0.1,10.0.0.2,10.0.0.3:1999")
    quiet(d, ["plug-b"])

    def hosts(node):
        return json.loads((tmp_path / "p" / "nodes" / node / "config.json").read_text()
                          )["broker"]["host"]
    assert hosts("plug-a") == hosts("plug-b") == ["10.0.0.1:1883", "10.0.0.2:1883",
                                                  "10.0.0.3:1999"]
    assert all((tmp_path / "p" / ("nats-%d.conf" % i)).exists() for i in (1, 2, 3))
    quiet(d, [], cluster="10.0.0.4,10.0.0.5,10.0.0.6")
    assert hosts("plug-a") == hosts("plug-b") == ["10.0.0.%d:1883" % i for i in (4, 5, 6)]
