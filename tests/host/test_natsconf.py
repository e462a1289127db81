"""test_natsconf.py - the partition a plug's readings go to, as nats-server's own mapping
puts them (fleet/natsconf.py's account mapping, {{partition(P,1)}}), is the one
natsconf.partition_of() computes in Python: the cluster collector subscribes to its leased
partitions by it, answers a plug's clock and reloads its state on takeover by it, so one plug
put in another partition than the Python says would go unanswered. Each P is a real
nats-server (Debian's; tools/setup installs it) started on loopback from node_config()'s text,
one node, published to by plain NATS with the subjects the MQTT gateway makes.
"""

import asyncio
import os
import shutil
import subprocess

import pytest

from broker import free_port, wait_for_port
from wattlog.fleet.natsconf import PARTITION_PREFIX, node_config, partition_of

nats = pytest.importorskip("nats")

# node ids a plug may have (ingest.NODE_ID: 1-32 of a-z, 0-9, _ and -): provision's, short
# ones, long ones, and enough of them that every partition is hit
NODES = (["plug-%d" % i for i in range(200)] + ["a", "z9", "_", "-", "washer", "fridge_2",
         "x" * 32, "0123456789abcdefghijklmnopqrstuv", "sp3s-kitchen", "light-007"])


def mapped(work, partitions):
    """{node: the partition nats-server mapped its readings to}, for every node of NODES."""
    peers = [("127.0.0.1", free_port(), free_port(), free_port())]
    users = '      {user: "probe", password: "probe-password-0123456789"}'
    conf = os.path.join(work, "nats-%d.conf" % partitions)
    text = node_config(0, peers, users, partitions, os.path.join(work, "js-%d" % partitions))
    # one node alone: its cluster line goes (JetStream refuses a cluster without routes); the
    # account and its mapping are provision's, as they are
    with open(conf, "w") as f:
        f.write("".join(line for line in text.splitlines(True) if not line.startswith("cluster")))
    log = open(os.path.join(work, "nats-%d.log" % partitions), "w")
    proc = subprocess.Popen(["nats-server", "-c", conf], stdout=log, stderr=subprocess.STDOUT)
    log.close()
    try:
        wait_for_port(peers[0][2], 30, proc)
        return asyncio.run(_probe("nats://127.0.0.1:%d" % peers[0][2]))
    finally:
        proc.terminate()
        proc.wait(15)


async def _probe(url):
    nc = await nats.connect(url, user="probe", password="probe-password-0123456789")
    got = {}
    done = asyncio.Event()

    async def on_message(msg):
        words = msg.subject.split(".")  # wlpart.<p>.wattlog.<node>.readings
        got[words[3]] = int(words[1])
        if len(got) == len(NODES):
            done.set()
    await nc.subscribe(PARTITION_PREFIX + ".>", cb=on_message)
    await nc.flush()
    for node in NODES:
        await nc.publish("wattlog.%s.readings" % node, b"")
    await asyncio.wait_for(done.wait(), 30)
    await nc.close()
    return got


@pytest.mark.skipif(shutil.which("nats-server") is None,
                    reason="no nats-server here: tools/setup installs it")
@pytest.mark.parametrize("partitions", [64, 7])
def test_nats_server_maps_each_plug_to_the_partition_python_computes(tmp_path, partitions):
    got = mapped(str(tmp_path), partitions)
    assert got == {node: partition_of(node, partitions) for node in NODES}
    assert len(set(got.values())) == partitions  # every partition used: the test sees them all
