"""test_refusals.py - when the broker says no, every program says so in words (issue 10 item 8),
against a real mosquitto set up as `wattlog provision` sets it up: a plug whose login is
refused, `wattlog plug` with a user that may look but not switch, and a collector started
with a plug's credentials. (Before, each of them waited in silence or blamed the plug.)"""

import json
import os
import subprocess
import sys

import pytest

from helpers import aligned_past, wattlog
from plugs import start_live
from rig import Recorder, SimPlug
from wattlog.fleet.provision import OPERATOR


@pytest.mark.realtime
def test_a_plug_whose_login_is_refused_says_so(broker, tmp_path):
    """A wrong password in the plug's config.json: the node says once, in words, that the
    broker refused its login and which settings to check, and keeps metering. Paced (20x), not
    free-running: the plug's back-off between logins is real time, and its run must see
    several refusals to show that it says so once."""
    args = broker.node_args("badpass")
    config = json.loads(open(args[1]).read())
    config["broker"]["password"] = "not-the-password"
    wrong = tmp_path / "config.json"
    wrong.write_text(json.dumps(config))
    node = SimPlug(broker.port, "badpass", "--profile", "constant:500", "--speed", 20,
                   "--start", aligned_past(200), "--node-config", wrong)
    try:
        s = node.finish(timeout_s=60)
    finally:
        node.stop()
    said = [line for line in node.output.splitlines() if "refused this plug's login" in line
            and not line.startswith("summary ")]  # its status: the link's last error
    assert "refused this plug's login" in s["last_error"], s
    assert len(said) == 1 and "check broker.user and broker.password in config.json" in said[0]
    assert s["produced"] >= 19 and s["batches"] == 0


def test_wattlog_plug_with_a_user_that_may_not_switch_says_so(broker, simnodes, tmp_path):
    """A user whose ACL lets it read every topic but switch nothing: `wattlog plug on` ends at
    once with a line saying the broker refused (MQTT 5's "Not authorized"), instead of waiting
    and saying the plug did not confirm."""
    start_live(simnodes, broker, "refused-1")
    # its first state retained before anyone asks: `plug status` takes what is retained then
    # (on a busy machine the plug had not said one yet, and status said "relay ?")
    watch = Recorder(broker, "wattlog/refused-1/state", name="refusals-watch")
    try:
        watch.next("wattlog/refused-1/state", lambda p: json.loads(p).get("relay") == "ON", 60)
    finally:
        watch.close()
    viewer = "wattlog-test-viewer"
    broker.client("viewer")  # makes the user, allowed everything...
    acl = os.path.join(broker.auth, "acl")
    with open(acl) as f:
        text = f.read()
    with open(acl, "w") as f:  # ...then read only
        f.write(text.replace("user %s\ntopic readwrite #\n" % viewer, "user %s\ntopic read #\n"
                             % viewer))
    broker._reload()
    secret = tmp_path / "viewer.password"
    secret.write_text(broker.creds[viewer] + "\n")
    os.chmod(secret, 0o600)
    url = "mqtt://%s@127.0.0.1:%d" % (viewer, broker.port)
    assert "refused-1: relay ON" in wattlog("plug", "status", "refused-1", "--broker", url,
                                            "--password-file", secret)
    proc = subprocess.run([sys.executable, "-m", "wattlog.cli", "plug", "off", "refused-1",
                           "--broker", url, "--password-file", str(secret), "--timeout", "20"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "wattlog plug: the broker refused to let %s switch refused-1 (Not authorized): log in as "
        "%s, whose ACL allows it" % (viewer, OPERATOR)]


@pytest.mark.realtime
def test_a_collector_with_a_plugs_login_says_what_is_wrong(broker, collectors, tmp_path):
    """The collector started with a plug's user and password: the broker lets it log in and
    grants its subscriptions but delivers nothing; the start-up marker never comes back, and
    the log says which user cannot read the acks and what the collector's login is. Real
    time: the collector waits for its marker a bounded time of the wall clock."""
    args = broker.node_args("plug-y")
    password = json.loads(open(args[1]).read())["broker"]["password"]
    secret = tmp_path / "plug.password"
    secret.write_text(password + "\n")
    os.chmod(secret, 0o600)
    c = collectors("mqtt://plug-y@127.0.0.1:%d" % broker.port, tmp_path / "data",
                   password_file=secret)
    c.wait_for("must let the user plug-y read and write wattlog/+/ack (is that the collector's "
               "login, wattlog-collector?)", timeout_s=40)
