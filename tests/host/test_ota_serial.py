"""test_ota_serial.py - the serial every update manifest carries (host/wattlog/fleet/ota.py), which a
plug must find above the last it accepted: it rises with every manifest even when the
operator's clock goes back, and still rises above what a plug has seen when the counter file
is lost or older (it never falls below the seconds since 2020); it is kept 0600 beside the
plug's key before it is used, and is signed with the rest of the manifest."""

import hashlib
import hmac
import json
import os
import stat

import pytest

from wattlog.fleet import ota
from wattnode.wire import EPOCH_UNIX

NOW = EPOCH_UNIX + 200_000_000


def test_serials_rise_when_the_clock_goes_back_and_survive_a_lost_counter(tmp_path):
    d = str(tmp_path)
    os.makedirs(os.path.join(d, "nodes", "plug-a"))
    first = ota.next_serial(d, "plug-a", now_s=NOW)
    assert first == NOW - EPOCH_UNIX
    assert ota.next_serial(d, "plug-a", now_s=NOW) == first + 1  # same second
    assert ota.next_serial(d, "plug-a", now_s=NOW - 86400) == first + 2  # the clock went back
    path = ota.serial_file(d, "plug-a")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    os.remove(path)  # the provision directory restored without it
    assert ota.next_serial(d, "plug-a", now_s=NOW + 60) == first + 60


def test_an_unreadable_counter_is_one_sentence_and_nothing_is_sent(tmp_path):
    d = str(tmp_path)
    os.makedirs(os.path.join(d, "nodes", "plug-a"))
    with open(ota.serial_file(d, "plug-a"), "w") as f:
        f.write("twelve")
    with pytest.raises(ota.OtaError, match="ota.serial is unreadable"):
        ota.next_serial(d, "plug-a", now_s=NOW)


def test_the_serial_is_signed_with_the_manifest():
    key = "11" * 32
    msg, uid = ota.manifest("plug-a", key, "0.2.0", [("wattnode/__init__.mpy", b"x")], 42)
    mac, body = msg.split(b"\n", 1)
    assert json.loads(body)["serial"] == 42 and json.loads(body)["id"] == uid
    assert mac.decode() == hmac.new(bytes.fromhex(key), body, hashlib.sha256).hexdigest()


def test_each_wattlog_ota_at_once_takes_a_broker_login_of_its_own(tmp_path):
    """The broker ties a client id to its user: two `wattlog ota` as one user would take each
    other's place. Each run takes the first of the update tool's logins no other run holds (a
    lock file, 0600, in the provision directory), until every one is taken: then it says so.
    A run that ends frees its login; a URL naming another user is used as it is."""
    from wattlog.fleet.provision import OPERATOR, OTA_USERS
    url = "mqtt://%s@127.0.0.1:1883" % OPERATOR
    held = [ota.take_login(str(tmp_path), url) for _ in OTA_USERS]
    assert [u for u, _ in held] == ["mqtt://%s@127.0.0.1:1883" % u for u in OTA_USERS]
    with pytest.raises(ota.OtaError, match="%d `wattlog ota` run already" % len(OTA_USERS)):
        ota.take_login(str(tmp_path), url)
    held[2][1].close()  # that run ended
    again, lock = ota.take_login(str(tmp_path), url)
    assert again == held[2][0]
    assert stat.S_IMODE(os.stat(lock.name).st_mode) == 0o600
    assert ota.take_login(str(tmp_path), "mqtt://someone@127.0.0.1:1883") == (
        "mqtt://someone@127.0.0.1:1883", None)
