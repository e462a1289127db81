"""mosquittofiles.py - what a single Pi's mosquitto reads, as `wattlog provision` writes it:
passwd (hashed by `mosquitto_passwd -U`), the ACL (logins.py) and mosquitto.conf, and who may
read them.

Who reads what: Debian's mosquitto starts as root and drops to the user `mosquitto` before it
reads its files. Where a group `mosquitto` exists, DIR is 0750 and passwd, acl,
mosquitto.conf, server.key, server.crt and ca.crt are 0640, group mosquitto; every other
secret (credentials.json, *.password, node configs, ca.key) is 0600, owner only. Each file is
created with its final mode (durable.py), never widened after the fact. Not root and not in
the group, provision cannot give the files to the group: broker_access_command() is the one
line to run as root.
"""

import grp
import os
import shlex
import shutil
import subprocess

from wattlog.fleet.logins import ProvisionError
from wattlog.store import durable

BROKER_GROUP = "mosquitto"
BROKER_FILES = ("passwd", "acl", "mosquitto.conf")  # what mosquitto reads, with the TLS files
TLS_BROKER_FILES = ("server.key", "server.crt", "ca.crt")


def broker_gid():
    """The gid of the group mosquitto runs as, or None where there is no such group."""
    try:
        return grp.getgrnam(BROKER_GROUP).gr_gid
    except KeyError:
        return None


def share_dir(directory):
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


def passwd_tool():
    tool = shutil.which("mosquitto_passwd")
    if tool is None:
        raise ProvisionError("mosquitto_passwd is missing: install the mosquitto package")
    return tool


def write_passwd(tool, path, creds, mode, gid, progress):
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


def mosquitto_conf(directory, port, listen, tls):
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
