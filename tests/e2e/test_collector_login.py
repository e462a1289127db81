"""test_collector_login.py - what the collector says when the broker will not keep it (issue 21
item 7), against a real mosquitto set up by `wattlog provision`:
- a wrong password: it names its user and the password file it read (never the password),
  once, while it goes on trying (it said only "refused the connection (Not authorized)");
- a second client logged in as wattlog-collector (a second collector): mosquitto closes the
  first one's working connection, which said only "lost the broker (Unspecified error)"
  every 30 s; the collector asks the broker's uptime after reconnecting, and a broker that did
  not restart means another client took the login: it says so;
- a broker restart is not taken for that.
Real time: reconnects back off by the wall clock."""

import re

import pytest

from helpers import secret_file
from rig import wait_until


def broker_log(broker):
    with open(broker.log) as f:
        return f.read()


@pytest.mark.realtime
def test_a_refused_login_names_the_user_and_the_password_file_once(broker, collectors,
                                                                     tmp_path):
    wrong = secret_file(tmp_path / "collector.password", "not-the-password")
    c = collectors(broker.url, tmp_path / "data", password_file=wrong)
    wait_until("three refused logins at the broker", lambda: len(re.findall(
        r"disconnected, not authori[sz]ed", broker_log(broker))) >= 3)
    said = [line for line in c.log().splitlines() if "refused the login" in line]
    assert len(said) == 1, c.log()
    assert ("refused the login of wattlog-collector: the password in %s is not the one the "
            "broker has for that user" % wrong) in said[0]
    assert "not-the-password" not in c.log()


@pytest.mark.realtime
def test_another_client_taking_the_login_is_named_and_a_broker_restart_is_not(
        broker, collectors, tmp_path):
    first = collectors(broker.url, tmp_path / "one", commit_interval=5)
    first.wait_for("listening on")
    second = collectors(broker.url, tmp_path / "two", commit_interval=5)
    taken = "another client logged in as wattlog-collector took this connection"
    wait_until("a collector saying its login was taken",
         lambda: taken in first.log() or taken in second.log())
    second.stop()
    lines = first.log().count("connected to")
    broker.stop()
    broker.start()
    wait_until("the first collector back", lambda: first.log().count("connected to") > lines)
    wait_until("its word on the restart", lambda: "the broker had restarted" in first.log())
    assert first.log().count(taken) == (1 if taken in first.log() else 0)
