"""cluster.py - past one Pi, measured: the cluster's path (3 NATS JetStream nodes with their
MQTT gateways, 3 cluster collectors, one PostgreSQL) beside the single Pi's (mosquitto, one
collector, PHPFina files), in one run, under the same plugs (README "Past one Pi").

Both are set up from one `wattlog provision --cluster` (the mosquitto files and the NATS
nodes' files, the same users and permissions). The plugs (tools/lib/rawplugs.py) are N
sessions on plain sockets, each its node's login, subscribed to its acks, publishing 30 s
batches (3 readings) at QoS 1. For each path:
  connect       the seconds until every plug's CONNACK and SUBACK
  end to end    every plug sends --batches batches as fast as they are taken; the clock runs
                from the first write to the last plug's last ack (an ack is sent only once
                the readings are durable: fdatasync'ed files, a committed transaction), so
                batches/s and readings/s are stored and acknowledged; CPU (user + system, from
                /proc/<pid>/stat) of the broker's processes, the collectors' and the database's
                (the postmaster and its backends) over that span, per batch
  latency       --paced-rate batches/s for --paced-s seconds: each batch's time from its
                write to the first ack that covers it, p50 and p99 (the collectors commit
                every second)
  takeover      the cluster only: one collector SIGKILLed; the seconds until the others hold
                its partitions' leases
  stored        bytes per reading on disk: the PHPFina files, or wl_readings with its index
                (and the summaries, which are brought up off the commit's path)
The single Pi's collector commits every second here (its default is 300 s) and finds no runs
([runs] enabled = false), as the cluster collector does not.
"""

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "lib"))
sys.path.insert(0, os.path.join(REPO, "lib"))

from broker import free_port, mosquitto_path, wait_for_port  # noqa: E402
from clustertool import collector_config  # noqa: E402
from influxd import wait_logged  # noqa: E402
from natscluster import NatsCluster  # noqa: E402
from pgserver import PgServer  # noqa: E402
from proctree import descendants  # noqa: E402
from rawplugs import RECORDS, RawPlugs  # noqa: E402
from wattlog.fleet.provision import provision  # noqa: E402
from wattlog.store.postgres import PARTITIONS_KEY  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pids):
    """User + system CPU seconds of the processes (and of their children waited for)."""
    total = 0.0
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(v) for v in fields[11:15]) / TICK
    return total


def tree(pid):
    """pid and every process below it."""
    return [pid] + sorted(descendants(pid))


def du(path):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def measure(plugs, roles, args):
    """connect, end to end and latency through `plugs`; roles: {name: () -> [pid]}."""
    out = {"connect_s": plugs.connect()}
    before = {r: cpu_s(pids()) for r, pids in roles.items()}
    elapsed = plugs.run(args.batches)
    batches = args.batches * len(plugs.plugs)
    out.update(batches_s=batches / elapsed, readings_s=batches * RECORDS / elapsed,
               seconds=elapsed, acks_batch=plugs.acks() / batches)
    for role, pids in roles.items():
        out["cpu_" + role] = (cpu_s(pids()) - before[role]) / batches * 1e3  # ms a batch
    count = max(1, int(args.paced_rate * args.paced_s / len(plugs.plugs)))
    before = {r: cpu_s(pids()) for r, pids in roles.items()}
    paced_s = plugs.run(count, rate=args.paced_rate)
    out["paced_batches_s"] = count * len(plugs.plugs) / paced_s
    for role, pids in roles.items():
        out["paced_cpu_" + role] = (cpu_s(pids()) - before[role]) / (count * len(plugs.plugs)) * 1e3
    out["paced_acks_batch"] = plugs.acks() / (count * len(plugs.plugs))
    lat = sorted(plugs.latencies_s)
    out["p50_ms"] = 1e3 * statistics.median(lat)
    out["p99_ms"] = 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    out["readings"] = (args.batches + count) * RECORDS * len(plugs.plugs)
    return out


def single(work, auth, creds, nodes, port, args):
    conf = os.path.join(work, "mosquitto.conf")
    with open(os.path.join(auth, "mosquitto.conf")) as f:
        text = f.read()
    with open(conf, "w") as f:
        f.write(text + "user %s\npersistence false\nmax_queued_messages 1000000\n"
                "max_inflight_messages 100\nmax_connections -1\n" % os.environ.get(
                    "USER", "root"))
    broker = subprocess.Popen([mosquitto_path(), "-c", conf], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    data = os.path.join(work, "data")
    config = os.path.join(work, "single.toml")
    with open(config, "w") as f:
        f.write('broker = "mqtt://wattlog-collector@127.0.0.1:%d"\npassword_file = "%s"\n'
                'data = "%s"\ncommit_interval = 1\nstatus_interval = 10\n[runs]\n'
                'enabled = false\n' % (port, os.path.join(auth, "wattlog-collector.password"),
                                       data))
    log = os.path.join(work, "single.log")
    collector = None
    try:
        wait_for_port(port, 10, broker)
        with open(log, "w") as f:
            collector = subprocess.Popen([sys.executable, "-m", "wattlog.cli", "collect",
                                          "--config", config], stdout=f, stderr=f, cwd=REPO)
        wait_logged(collector, log, "listening on")
        plugs = RawPlugs(creds, nodes, [port], args.start)
        out = measure(plugs, {"broker": lambda: [broker.pid],
                              "collector": lambda: [collector.pid], "db": lambda: []}, args)
        plugs.close()
    finally:
        for proc in (collector, broker):
            if proc is not None:
                proc.terminate()
                proc.wait(60)
    out["bytes_reading"] = du(data) / out["readings"]
    return out


def owners(pg):
    import psycopg
    with psycopg.connect(pg.dsn, password=pg.password, autocommit=True) as c:
        return dict(c.execute(
            "SELECT l.objid::int, a.application_name FROM pg_locks l JOIN pg_stat_activity a "
            "ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.classid = %s::oid AND "
            "l.granted", (PARTITIONS_KEY,)).fetchall())


def clustered(work, auth, creds, nodes, args):
    pg = PgServer().start()
    nats = NatsCluster.provisioned(work, auth).start()
    collectors = []
    try:
        with open(os.path.join(pg.data, "postmaster.pid")) as f:
            postmaster = int(f.readline())
        for i in range(3):
            config = collector_config(work, auth, i, nats, pg, free_port(), args.partitions)
            with open(os.path.join(work, "c%d.log" % i), "w") as f:
                collectors.append(subprocess.Popen(
                    [sys.executable, "-m", "wattlog.cli", "collect", "--config", config],
                    stdout=f, stderr=f, cwd=REPO, env=pg.connect_env()))
        deadline = time.monotonic() + 120
        while not (len(owners(pg)) == args.partitions and
                   len(set(owners(pg).values())) == 3):
            if time.monotonic() > deadline:
                raise SystemExit("the collectors did not share the partitions: see %s" % work)
            time.sleep(0.2)
        plugs = RawPlugs(creds, nodes, nats.mqtt_ports, args.start)
        out = measure(plugs, {"broker": lambda: [p.pid for p in nats.procs],
                              "collector": lambda: [c.pid for c in collectors],
                              "db": lambda: tree(postmaster)}, args)
        plugs.close()
        victim = collectors[0]
        t0 = time.monotonic()
        victim.send_signal(signal.SIGKILL)
        while True:
            held = owners(pg)
            if len(held) == args.partitions and not any(n.endswith(" c0") or n == "c0"
                                                        for n in held.values()):
                break
            if time.monotonic() - t0 > 60:
                raise SystemExit("no takeover within 60 s: see %s" % work)
            time.sleep(0.02)
        out["takeover_s"] = time.monotonic() - t0
        import psycopg
        with psycopg.connect(pg.dsn, password=pg.password, autocommit=True) as c:
            rows = c.execute("SELECT count(*) FROM wl_readings").fetchone()[0]
            size = c.execute("SELECT pg_total_relation_size('wl_readings')").fetchone()[0]
            summ = c.execute("SELECT pg_total_relation_size('wl_summaries')").fetchone()[0]
        out["bytes_reading"] = size / rows
        out["summary_bytes_reading"] = summ / rows
        out["rows"] = rows
    finally:
        for c in collectors:
            c.terminate()
        for c in collectors:
            c.wait(60)
        nats.stop()
        pg.close()
    return out


ROWS = (("connect_s", "%d plugs connected, subscribed (s)", "%.2f"),
        ("batches_s", "end to end with acks: batches/s", "%.0f"),
        ("readings_s", "end to end with acks: readings/s", "%.0f"),
        ("acks_batch", "  acks received per batch", "%.2f"),
        ("paced_batches_s", "paced: batches/s, first write to last ack", "%.0f"),
        ("paced_acks_batch", "  acks received per batch", "%.2f"),
        ("p50_ms", "ack latency p50 (ms) at the paced rate", "%.0f"),
        ("p99_ms", "ack latency p99 (ms) at the paced rate", "%.0f"),
        ("cpu_broker", "broker CPU per batch (ms)", "%.3f"),
        ("cpu_collector", "collector CPU per batch (ms)", "%.3f"),
        ("cpu_db", "database CPU per batch (ms)", "%.3f"),
        ("paced_cpu_broker", "paced: broker CPU per batch (ms)", "%.3f"),
        ("paced_cpu_collector", "paced: collector CPU per batch (ms)", "%.3f"),
        ("paced_cpu_db", "paced: database CPU per batch (ms)", "%.3f"),
        ("bytes_reading", "bytes per reading stored", "%.1f"),
        ("takeover_s", "takeover after a collector's SIGKILL (s)", "%.2f"))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plugs", type=int, default=1000)
    p.add_argument("--batches", type=int, default=30, help="batches per plug, end to end")
    p.add_argument("--paced-rate", type=float, default=1000, help="batches/s for the latency")
    p.add_argument("--paced-s", type=float, default=10)
    p.add_argument("--partitions", type=int, default=64)
    p.add_argument("--only", choices=("single", "cluster"), help="one path only")
    args = p.parse_args()
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    args.start = (int(time.time()) - 3 * 86400) // 10 * 10
    work = tempfile.mkdtemp(prefix="wattlog-bench-cluster-")
    auth = os.path.join(work, "auth")
    nodes = ["plug-%04d" % i for i in range(args.plugs)]
    port = free_port()
    specs = ",".join("127.0.0.1:%d:%d:%d" % (free_port(), free_port(), free_port())
                     for _ in range(3))
    print("provisioning %d plugs (one provision for both paths) ..." % args.plugs, flush=True)
    creds = provision(auth, nodes, "127.0.0.1", port, listen="127.0.0.1", cluster=specs,
                      partitions=args.partitions, nats_store=os.path.join(work, "js"),
                      progress=lambda text: None)
    results = {}
    try:
        if args.only != "cluster":
            print("single Pi: mosquitto, one collector, PHPFina ...", flush=True)
            os.makedirs(os.path.join(work, "single"))
            results["single Pi"] = single(os.path.join(work, "single"), auth, creds, nodes,
                                          port, args)
        if args.only != "single":
            print("cluster: 3 NATS nodes, 3 collectors, PostgreSQL ...", flush=True)
            results["cluster"] = clustered(work, auth, creds, nodes, args)
    except BaseException:
        print("kept %s for a look" % work)
        raise
    print("\n%d plugs, %d batches each end to end (%d readings a batch), then %.0f batches/s "
          "for %.0f s; %d partitions" % (args.plugs, args.batches, RECORDS, args.paced_rate,
                                         args.paced_s, args.partitions))
    names = list(results)
    print("%-46s" % "" + "".join("%14s" % n for n in names))
    for key, label, fmt in ROWS:
        print("%-46s" % (label % args.plugs if "%d" in label else label) + "".join(
            "%14s" % (fmt % results[n][key] if key in results[n] else "-") for n in names))
    if "cluster" in results:
        print("(cluster: the summaries add %.1f bytes a reading once brought up; %d rows)"
              % (results["cluster"]["summary_bytes_reading"], results["cluster"]["rows"]))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
