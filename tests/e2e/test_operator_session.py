"""test_operator_session.py - `wattlog plug`, `wattlog ota` and the HTTP API's relay speak to the
plugs through one operator session (fleet/session.py), so a broker that refuses the login is
said in the same words by all three (issue 23 item 4: each had its own wording), against a
real mosquitto set up as `wattlog provision` sets it up."""

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

from rig import wait_until
from wattlog.fleet.provision import OPERATOR


TOKEN = "a-test-token-of-32-characters-xx"


def refused(port):
    return ("the broker at 127.0.0.1:%d refused the login of %s (Not authorized): check the "
            "user name and its password file" % (port, OPERATOR))


def heard(port):
    try:
        return urllib.request.urlopen("http://127.0.0.1:%d/api/plugs/any-plug" % port,
                                      timeout=10).read()
    except urllib.error.HTTPError as e:
        return e.read()


def run(*argv):
    proc = subprocess.run([sys.executable, "-m", "wattlog.cli", *map(str, argv)],
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stderr.strip().splitlines()


def test_a_wrong_operator_password_is_said_alike_by_plug_ota_and_the_http_relay(
        broker, collectors, built, tmp_path):
    """One plug, provisioned and "online" (its retained status, published by a test user):
    the operator's password is wrong in each of the three."""
    broker.node_args("any-plug")  # provisioned: its update key
    c = broker.client("publisher")
    c.connect("127.0.0.1", broker.port)
    c.loop_start()
    c.publish("wattlog/any-plug/status", "online", qos=1, retain=True).wait_for_publish(10)
    c.publish("wattlog/any-plug/state", json.dumps({"relay": "OFF"}), qos=1,
              retain=True).wait_for_publish(10)
    c.loop_stop()
    c.disconnect()
    wrong = tmp_path / "operator.password"
    wrong.write_text("not-the-password\n")
    os.chmod(wrong, 0o600)
    url = "mqtt://%s@127.0.0.1:%d" % (OPERATOR, broker.port)

    rc, said = run("plug", "on", "any-plug", "--broker", url, "--password-file", wrong)
    assert rc == 1 and said == ["wattlog plug: " + refused(broker.port)], said

    rc, said = run("ota", "any-plug", "--broker", url, "--password-file", wrong,
                   "--build", built / "device", "--dir", broker.auth)
    assert rc == 1 and said[-1] == "wattlog ota: " + refused(broker.port), said

    token = tmp_path / "http.token"
    token.write_text(TOKEN + "\n")
    os.chmod(token, 0o600)
    c = collectors(broker.url, tmp_path / "data", listen=True, args=(
        "--http-token-file", token, "--operator-password-file", wrong))
    c.wait_for("listening on")
    port = c.port
    # its retained status: heard at once
    wait_until("the plug heard online", lambda: b'"online"' in heard(port), 20)
    req = urllib.request.Request("http://127.0.0.1:%d/api/plugs/any-plug/relay" % port,
                                 data=json.dumps({"relay": "ON"}).encode(), method="POST",
                                 headers={"Authorization": "Bearer " + TOKEN})
    try:
        urllib.request.urlopen(req, timeout=30)
        raise AssertionError("the relay was switched with a refused login")
    except urllib.error.HTTPError as e:
        code, body = e.code, json.loads(e.read())
    assert code == 502 and body["error"] == refused(broker.port), body
