"""clustertool.py - a whole cluster on one machine, in one command (issue 25 item 6; README
"Past one Pi"):

    tools/cluster [--light N] [--real N] [--collectors N] [--partitions P] [--batch-s S] [--keep]

`wattlog provision --cluster` in a temporary folder (three NATS nodes on free loopback ports,
the plugs' logins and permissions), the three nats-server nodes from the files it wrote
(natscluster.py), a private PostgreSQL (pgserver.py: initdb and pg_ctl in a folder of its
own; run by root, as the user postgres), the collectors (`wattlog collect` with a [cluster]
table, each serving the HTTP API and the dashboard on a port of its own: any one shows every
plug, as they share the database), then the plugs: --real plugs running the real firmware
(tools/simnode, with the config.json provision wrote them: the three gateways, tried in turn;
replaying the last 2 h at full speed, then in real time) and --light light CPython plugs
(lightplug.py: wattnode.wire's batches, one every 30 s of three 10 s readings; --batch-s 10:
one reading every 10 s, each acked at the next commit).

It prints each dashboard's address ("dashboard: http://..."), a status line a minute, and
runs until Ctrl-C (or SIGTERM); then it stops, a line each, the plugs, the collectors (each
commits what it holds), the NATS nodes and PostgreSQL, and removes the folder (--keep keeps
it, with every log). The servers and the collectors run in sessions of their own, so that a
Ctrl-C reaches only this tool, which stops them in order; the nodes and the collectors get
SIGTERM should the tool itself die.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from broker import free_port, terminate_with_parent
from lightplug import LightPlugs
from natscluster import NatsCluster
from pgserver import PgServer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROFILES = ("washer", "heatpump", "fridge")
STATUS_S = 60
READY_S = 120


def collector_config(work, auth, i, nats, pg, http_port, partitions):
    """cN.toml: the collector's settings, as wattlog-cluster.toml has them, with this run's
    database and ports."""
    path = os.path.join(work, "c%d.toml" % i)
    with open(path, "w") as f:
        f.write('broker = "mqtt://wattlog-collector@127.0.0.1:%d"\npassword_file = "%s"\n'
                'data = "%s"\nstore = "%s"\nstore_password_file = "%s"\n'
                '[http]\nlisten = "127.0.0.1:%d"\ntoken_file = "%s"\n'
                '[cluster]\nnats = [%s]\nmqtt = [%s]\npartitions = %d\nname = "c%d"\n'
                % (nats.mqtt_ports[i % len(nats.mqtt_ports)],
                   os.path.join(auth, "wattlog-collector.password"),
                   os.path.join(work, "c%d" % i), pg.dsn, pg.password_file, http_port,
                   os.path.join(auth, "http.token"),
                   ", ".join('"%s"' % u for u in nats.nats_urls),
                   ", ".join('"mqtt://wattlog-collector@127.0.0.1:%d"' % p
                             for p in nats.mqtt_ports), partitions, i))
    return path


def spawn(argv, log_path, **kw):
    """A process in a session of its own (Ctrl-C is ours to pass on), SIGTERMed if we die."""
    with open(log_path, "a") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                start_new_session=True, preexec_fn=terminate_with_parent, **kw)


def last_line(path):
    """The last line a log holds that says something ("" if none): not the collector's
    closing "stopped: see the error above", but that error."""
    try:
        with open(path, errors="replace") as f:
            lines = [line for line in f.read().strip().splitlines()
                     if "see the error above" not in line]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def start_collector(i, work, auth, nats, pg, partitions, tries=3):
    """Collector i on a free port, once it answers: (its process, its port). One that
    ends before it answers (its port taken by another program meanwhile: the port is picked
    before the collector listens on it) is said, with its log's last line, and started again
    on another port."""
    log_path = os.path.join(work, "c%d.log" % i)
    for attempt in range(tries):
        port = free_port()
        config = collector_config(work, auth, i, nats, pg, port, partitions)
        proc = spawn([sys.executable, "-m", "wattlog.cli", "collect",
                      "--config", config], log_path, env=pg.connect_env())
        deadline = time.monotonic() + READY_S
        while proc.poll() is None and plugs_listed(port) is None and \
                time.monotonic() < deadline:
            time.sleep(0.2)
        if proc.poll() is None:
            return proc, port
        print("  collector c%d ended (exit status %d: %s)%s" % (
            i, proc.returncode, last_line(log_path),
            "; starting it again on another port" if attempt < tries - 1 else ""), flush=True)
    raise SystemExit("collector c%d did not start: see %s" % (i, log_path))


def plugs_listed(port):
    """The node ids /api/plugs lists, or None while the collector does not answer."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/api/plugs" % port, timeout=5) as r:
            return [p["node"] for p in json.load(r)["plugs"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stop_process(proc, timeout_s=60, sig=signal.SIGTERM):
    """`sig` (nothing, if it ended), then SIGKILL after timeout_s; its exit status."""
    proc.send_signal(sig)  # Popen sends nothing to a process it has seen end
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def main(argv=None):
    p = argparse.ArgumentParser(prog="tools/cluster", description=__doc__.split("\n\n")[0])
    p.add_argument("--light", type=int, default=30, help="light CPython plugs (default 30)")
    p.add_argument("--real", type=int, default=3, help="real-firmware plugs (default 3)")
    p.add_argument("--collectors", type=int, default=3, help="collectors (default 3)")
    p.add_argument("--partitions", type=int, default=16, help="partitions (default 16)")
    p.add_argument("--batch-s", type=int, default=30, choices=(10, 20, 30),
                   help="a light plug's batch: every 30 s (default), 20 or 10")
    p.add_argument("--keep", action="store_true", help="keep the folder (its logs) at the end")
    args = p.parse_args(argv)
    for name in ("light", "real", "collectors", "partitions"):
        if getattr(args, name) < (1 if name in ("collectors", "partitions") else 0):
            p.error("--%s %d is too few" % (name, getattr(args, name)))
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    from wattlog.fleet.provision import provision
    work = tempfile.mkdtemp(prefix="wattlog-cluster-")
    auth = os.path.join(work, "auth")
    real = ["real-%d" % i for i in range(args.real)]
    light = ["light-%03d" % i for i in range(args.light)]
    specs = ",".join("127.0.0.1:%d:%d:%d" % (free_port(), free_port(), free_port())
                     for _ in range(3))
    creds = provision(auth, real + light, cluster=specs, partitions=args.partitions,
                      nats_store=os.path.join(work, "js"), progress=lambda text: None)
    print("wattlog cluster: files, logs and data in %s" % work, flush=True)
    pg = nats = lights = None
    collectors, simnodes = [], []
    try:
        pg = PgServer().start()
        print("  PostgreSQL on 127.0.0.1:%d (%s)" % (pg.port, pg.root), flush=True)
        nats = NatsCluster.provisioned(work, auth)
        nats.preexec = terminate_with_parent
        nats.start()
        print("  NATS JetStream: MQTT gateways on 127.0.0.1:%s; clients on %s"
              % (",".join(map(str, nats.mqtt_ports)), ", ".join(nats.nats_urls)), flush=True)
        ports = []
        for i in range(args.collectors):
            proc, port = start_collector(i, work, auth, nats, pg, args.partitions)
            collectors.append(proc)
            ports.append(port)
        print("  %d collectors: logs in %s" % (args.collectors,
                                               os.path.join(work, "c<i>.log")), flush=True)
        start = int(time.time()) // 10 * 10
        for i, node in enumerate(real):
            config = os.path.join(auth, "nodes", node, "config.json")
            with open(config) as f:  # every gateway, as provision wrote it: tried in turn
                gateways = ",".join(json.load(f)["broker"]["host"])
            simnodes.append(spawn(
                [os.path.join(REPO, "tools", "simnode"), "--id", node, "--broker", gateways,
                 "--node-config", config, "--profile", PROFILES[i % len(PROFILES)], "--speed",
                 "max", "--start", str(start - 7200), "--then-realtime"],
                os.path.join(work, "%s.log" % node)))
        lights = LightPlugs(creds, light, nats.mqtt_ports, start - 30, readings=10 ** 7,
                            batch=args.batch_s // 10, step_s=args.batch_s).start() \
            if light else None
        print("  plugs: %d real-firmware (tools/simnode), %d light" % (len(real), len(light)),
              flush=True)
        deadline = time.monotonic() + READY_S
        while not stopping.is_set() and time.monotonic() < deadline:
            listed = plugs_listed(ports[0])
            if listed is not None and set(real + light) <= set(listed):
                break
            stopping.wait(1)
        for i, port in enumerate(ports):
            print("dashboard: http://127.0.0.1:%d/  (collector c%d)" % (port, i), flush=True)
        print("running; Ctrl-C stops everything", flush=True)
        while not stopping.wait(STATUS_S):
            listed = plugs_listed(ports[0]) or []
            live = sum(c.poll() is None for c in collectors)
            print("  %d plugs listed, %d of %d collectors running"
                  % (len(listed), live, len(collectors)), flush=True)
    finally:
        print("stopping: the plugs, the collectors (each commits), NATS, PostgreSQL", flush=True)
        began = time.monotonic()
        if lights is not None:
            lights.stop()
        for proc in simnodes:
            stop_process(proc, 45)
        print("  the plugs stopped in %.1f s" % (time.monotonic() - began), flush=True)
        began = time.monotonic()
        for proc in collectors:
            proc.send_signal(signal.SIGTERM)
        codes = [stop_process(proc) for proc in collectors]
        print("  the collectors stopped in %.1f s (exit status %s)"
              % (time.monotonic() - began, ",".join(map(str, codes))), flush=True)
        if nats is not None:
            nats.stop()
            print("  NATS stopped", flush=True)
        if pg is not None:
            pg.stop()
            pg.close()
            print("  PostgreSQL stopped", flush=True)
        if args.keep:
            print("kept %s" % work, flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
        print("stopped", flush=True)


if __name__ == "__main__":
    main()
