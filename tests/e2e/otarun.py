"""otarun.py - an update as the OTA tests give it (test_ota.py, test_ota_trial.py): `wattlog
ota` as the operator, a live plug on a flash folder of its own, its answer to an info
command, and all it printed."""

import json
import os
import subprocess
import sys

from helpers import aligned_past
from rig import Recorder
from wattlog.fleet.provision import OPERATOR


def ota_command(broker, build, *nodes, extra=()):
    """The command line of `wattlog ota` as the operator (its password from a file)."""
    return [sys.executable, "-m", "wattlog.cli", "ota", *nodes, "--dir", broker.auth, "--build",
            str(build), "--broker", "mqtt://%s@127.0.0.1:%d" % (OPERATOR, broker.port),
            "--password-file", broker.password_file(OPERATOR), "--trial", "30", *extra]


def ota(broker, build, *nodes, check=True, extra=()):
    """`wattlog ota` as the operator; (exit status, stdout, stderr)."""
    p = subprocess.run(ota_command(broker, build, *nodes, extra=extra), capture_output=True,
                       text=True, timeout=240)
    if check:
        assert p.returncode == 0, p.stdout + p.stderr
    return p.returncode, p.stdout, p.stderr


def live_plug(simnodes, broker, node_id, flash, *extra):
    os.makedirs(flash, exist_ok=True)
    return simnodes(broker.port, node_id, "--profile", "constant:500", "--speed", "max",
                    "--start", aligned_past(60), "--then-realtime", "--batch-max", "1",
                    "--flash", flash, *extra)


def printed(node):
    """All a plug printed, stopped first if it still runs (it may have died on its own)."""
    if node.proc.poll() is None:
        node.stop()
    else:
        node.output = node.proc.communicate()[0]
    return node.output


def info(broker, node, node_id):
    """The plug's status, asked for with an info command until it answers (it may still be
    connecting: a bounded number of tries)."""
    log = Recorder(broker, "wattlog/%s/log" % node_id)
    try:
        for _ in range(20):
            log.c.publish("wattlog/%s/cmd" % node_id, json.dumps({"cmd": "info"}), qos=1)
            try:
                payload, _ = log.next("wattlog/%s/log" % node_id,
                                      lambda p: p.startswith(b"info "), timeout_s=3)
            except AssertionError:
                continue
            return json.loads(payload[5:])
        raise AssertionError("%s never answered info:\n%s" % (node_id, printed(node)))
    finally:
        log.close()
