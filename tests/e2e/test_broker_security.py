"""test_broker_security.py - the broker as `wattlog provision` sets it up, against a real
mosquitto (issue 9 items 11-14): it starts as Debian starts it (as root, dropping to the user
mosquitto) and the collector and a plug work through it; no client can take another's
place; each user may do exactly what its program does; no password shows on a command line.

mosquitto acknowledges a denied publish and drops it, and grants a denied subscription and
delivers nothing (REFERENCE.md), so a refusal is shown by what does not arrive. A client's
messages reach a subscriber in the order it sent them, so "nothing arrived before the marker
that followed it" is the bounded wait that proves it.
"""

import json
import os
import pwd
import queue
import shutil
import subprocess
import tempfile

import pytest

from broker import free_port, mosquitto_path, wait_for_port
from helpers import aligned_past, wattlog
from rig import Collector, Recorder, SimPlug, taken
from wattlog.fleet.provision import COLLECTOR, HOMEASSISTANT, OPERATOR, password_file


def cmdline(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return f.read().decode().split("\0")


# -- item 11: the provisioned broker starts as the README says ------------------------------

class Provisioned:
    """A broker that `wattlog provision` configured, as Recorder logs in to it: as a plug, with
    the password from the plug's config.json (the broker knows no test user)."""

    def __init__(self, port, config_path):
        self.port = port
        with open(config_path) as f:
            self._password = json.load(f)["broker"]["password"]

    def client(self, client_id, user):
        import paho.mqtt.client as mqtt
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id)
        c.username_pw_set(user, self._password)
        return c


@pytest.mark.skipif(os.geteuid() != 0, reason="mosquitto drops privileges only when started "
                                              "as root; run the suite as root")
def test_the_provisioned_broker_starts_as_debian_starts_it(tmp_path):
    """`wattlog provision`, then mosquitto started as root with provision's mosquitto.conf and
    no `user` line, as the Debian service runs what the README puts in conf.d: it drops to the
    user mosquitto and must still read the password file and the ACL (the old 0600 root files
    made it exit: "Unable to open pwfile"). The collector and a plug then log in with what
    provision made and the plug's readings are stored."""
    try:
        broker_user = pwd.getpwnam("mosquitto")
    except KeyError:
        pytest.skip("no user mosquitto on this machine (the Debian package makes it)")
    parent = tempfile.mkdtemp(prefix="wattlog-etc-")  # reachable by mosquitto, unlike tmp_path
    os.chmod(parent, 0o755)
    d = os.path.join(parent, "wattlog")
    port = free_port()
    proc = collector = None
    try:
        out = wattlog("provision", "--dir", d, "--broker-host", "127.0.0.1", "--port", port,
                      "--listen", "127.0.0.1", "plug-r")
        assert "cannot read these files yet" not in out
        stderr = open(os.path.join(parent, "mosquitto.stderr"), "w+")
        proc = subprocess.Popen([mosquitto_path(), "-c", os.path.join(d, "mosquitto.conf")],
                                stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            wait_for_port(port, proc=proc)
        except RuntimeError as e:
            stderr.seek(0)
            raise AssertionError("%s: %s" % (e, stderr.read())) from None
        with open("/proc/%d/status" % proc.pid) as f:
            uids = [line.split()[1:] for line in f if line.startswith("Uid:")][0]
        assert set(uids) == {str(broker_user.pw_uid)}  # it did drop to mosquitto
        collector = Collector("mqtt://%s@127.0.0.1:%d" % (COLLECTOR, port), tmp_path / "data",
                              password_file=password_file(d, COLLECTOR))
        collector.wait_for("listening on")
        start = aligned_past(300)
        s = SimPlug(port, "plug-r", "--node-config",
                    os.path.join(d, "nodes", "plug-r", "config.json"), "--profile",
                    "constant:300", "--speed", "max", "--start", start).finish()
        taken(Provisioned(port, os.path.join(d, "nodes", "plug-r", "config.json")),
              node="plug-r", user="plug-r")  # its last batches, at the broker when it ended
        assert collector.stop() == 0
        rows = wattlog("export", "--fill", "--data", tmp_path / "data", "--feed", "plug-r/power").split()
        assert len(rows) - 1 == s["produced"] >= 29 and rows[1] == "%d,300" % start
    finally:
        if collector is not None:
            collector.kill()
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(parent)


# -- item 12: no client takes another's place ----------------------------------------------

def test_a_plug_cannot_knock_the_collector_off(broker, collectors, tmp_path):
    """A plug logging in with the client id `wattlog-collector` gets a session of its own (the
    broker uses its user name as its id) and the collector stays connected, answering that
    plug's "online" with its clock. With client ids free, the collector was knocked off."""
    c = collectors(broker.url, tmp_path / "data", commit_interval=300)
    c.wait_for("listening on")
    broker.node_args("imposter")
    imposter = Recorder(broker, "wattlog/imposter/ack", name="wattlog-collector", user="imposter")
    try:
        imposter.publish("wattlog/imposter/status", b"online", retain=True)
        try:
            topic, answer = imposter.get(10)
        except queue.Empty:
            raise AssertionError("the collector never answered; its log:\n" + c.log()) from None
        assert topic == "wattlog/imposter/ack" and json.loads(answer)["clock"] is True
    finally:
        imposter.close()
    assert "lost the broker" not in c.log()
    with open(broker.log) as f:
        assert "as imposter (" in f.read()  # its id was replaced by its user name


# -- item 13: each user may do exactly what its program does --------------------------------

def test_a_plug_cannot_ack_its_own_readings_nor_command_itself(broker):
    """A plug may not publish on its own ack topic (a retained ack would free its readings
    before the collector has them), relay/set or cmd (the old `wattlog/%u/#` let it)."""
    broker.node_args("selfish")
    watch = Recorder(broker, "wattlog/#", name="watch-selfish")
    plug = Recorder(broker, name="selfish", user="selfish")
    plug.publish("wattlog/selfish/ack", json.dumps({"boot": 1, "seq": 10 ** 6, "time": 1}),
                 retain=True)
    plug.publish("wattlog/selfish/relay/set", b"OFF")
    plug.publish("wattlog/selfish/cmd", b'{"cmd": "reboot"}')
    plug.publish("wattlog/selfish/log", b"marker")  # allowed: it follows the three refused
    assert watch.until("wattlog/selfish/log", b"marker") == []
    late = Recorder(broker, "wattlog/selfish/#", name="late-selfish")
    assert late.sync("wattlog/selfish/probe") == []  # no retained ack either
    for s in (watch, plug, late):
        s.close()


ALL = ["wattlog/p1/" + k for k in ("readings", "status", "state", "log", "ack", "cmd",
                                    "relay/set")] + ["homeassistant/status"]


def _reads(broker, user, marker, topics=ALL):
    """`user` subscribes to every topic of `topics`; a test user publishes on each, then on
    `marker`: what `user` received before the marker."""
    reader = Recorder(broker, *topics, name="reader-" + user, user=user)
    writer = Recorder(broker, name="writer-" + user)
    for topic in topics:
        writer.publish(topic, b"x")
    writer.publish(marker, b"marker")
    got = reader.until(marker, b"marker")
    reader.close()
    writer.close()
    return [topic for topic, _ in got]


def _writes(broker, user, marker, topics=ALL):
    """`user` publishes on every topic of `topics` (the ack retained), then on `marker`: what
    a test user watching everything received before the marker."""
    watch = Recorder(broker, "#", name="watch-" + user)
    writer = Recorder(broker, name="writer-" + user, user=user)
    for topic in topics:
        writer.publish(topic, b"x", retain=topic.endswith("/ack"))
    writer.publish(marker, b"marker")
    got = watch.until(marker, b"marker")
    watch.close()
    writer.close()
    return [topic for topic, _ in got]


def test_the_collector_reads_readings_status_and_acks_and_writes_acks(broker):
    """It reads state and log too, for its HTTP API (plug health, the live stream); it may
    not read cmd nor relay/set (the old ACL let it read wattlog/#)."""
    assert _reads(broker, COLLECTOR, "wattlog/p1/ack") == [
        "wattlog/p1/readings", "wattlog/p1/status", "wattlog/p1/state", "wattlog/p1/log",
        "wattlog/p1/ack", "homeassistant/status"]
    assert _writes(broker, COLLECTOR, "wattlog/p2/ack") == ["wattlog/p1/ack"]


RUNS = ["wattlog/p1/event", "wattlog/p1/run",
        "homeassistant/device_automation/p1/run_started/config",
        "homeassistant/device_automation/p1/run_finished/config",
        "homeassistant/sensor/p1/run_state/config"]
NOT_RUNS = ["homeassistant/device/p1/config", "homeassistant/device_automation/p1/other/config",
            "homeassistant/sensor/p1/power/config", "homeassistant/switch/p1/run_state/config",
            "wattlog/p1/state", "wattlog/p1/events"]


def test_the_collector_writes_the_runs_topics_and_no_more(broker):
    """The appliances' runs (runs/ha.py): the collector publishes each plug's events, run
    state and the discovery of its run triggers and sensor, and nothing beside them (not a
    plug's own device, another trigger or sensor, its state); Home Assistant reads events and
    run state; a plug can forge neither."""
    assert _writes(broker, COLLECTOR, "wattlog/p2/ack", RUNS + NOT_RUNS) == RUNS
    assert _reads(broker, HOMEASSISTANT, "homeassistant/status",
                  RUNS[:2] + ["homeassistant/status"]) == RUNS[:2] + ["homeassistant/status"]
    broker.node_args("p1")
    assert _writes(broker, "p1", "wattlog/p1/log", RUNS[:2]) == []


def test_the_operator_reads_status_and_state_and_writes_relay_and_cmd(broker):
    """`wattlog plug` reads status and state and publishes relay/set and cmd; it may not read
    readings, log, acks, commands or Home Assistant's topics (the old ACL let it read
    wattlog/# and homeassistant/#) nor publish acks or readings."""
    assert _reads(broker, OPERATOR, "wattlog/p1/state") == ["wattlog/p1/status",
                                                            "wattlog/p1/state"]
    assert _writes(broker, OPERATOR, "wattlog/p2/cmd") == ["wattlog/p1/cmd",
                                                           "wattlog/p1/relay/set"]


def test_home_assistant_switches_but_sends_no_commands(broker):
    """Home Assistant logs in as its own user: it reads status and state, switches relays,
    owns homeassistant/#, and may not send commands (the old shared operator user could)."""
    assert _reads(broker, HOMEASSISTANT, "homeassistant/status") == [
        "wattlog/p1/status", "wattlog/p1/state", "homeassistant/status"]
    assert _writes(broker, HOMEASSISTANT, "wattlog/p2/relay/set") == [
        "wattlog/p1/relay/set", "homeassistant/status"]


# -- item 14: no password on a command line ----------------------------------------------

def test_no_password_on_any_command_line(broker, collectors, simnodes, tmp_path):
    """What `ps` shows of a running collector, simnode and the firmware under it holds no
    password (the broker URL carried the collector's, simnode had --password=); the plug's
    config.json on its simulated flash is 0600."""
    c = collectors(broker.url, tmp_path / "data", commit_interval=300)
    c.wait_for("listening on")
    flash = tmp_path / "flash"
    node = simnodes(broker.port, "quiet", "--flash", flash, "--profile", "constant:100",
                    "--then-realtime")
    seen = Recorder(broker, "wattlog/quiet/status")
    try:
        seen.next("wattlog/quiet/status", lambda p: p == b"online")
    finally:
        seen.close()
    argv = {"collector": cmdline(c.proc.pid), "simnode": cmdline(node.proc.pid),
            "firmware": cmdline(node.firmware_pid())}
    for name, args in argv.items():
        leaked = [user for user, password in broker.creds.items()
                  if any(password in a for a in args)]
        assert not leaked, (name, leaked)
    assert "--password-file" in argv["collector"] and "--node-config" in argv["simnode"]
    assert (flash / "config.json").stat().st_mode & 0o777 == 0o600
