"""cluster.py - a collector of a cluster (README "Past one Pi"): readings from a NATS JetStream
cluster's partitions into the shared PostgreSQL, acks to the plugs (live over NATS, retained
through the MQTT gateway). Any number run side by side; any one may die.
(About 450 lines, one concern: a cluster collector's loop, its leases and its acks; the parts it
shares with the single Pi's collector, the store, the HTTP side and the InfluxDB sink, are
service.py's.)

    plugs --MQTT--> NATS (3 nodes): wattlog.<node>.readings mapped to wlpart.<p>.<...>
            collectors: each owns a fair share of the P partitions, by lease
            --> PostgreSQL (store/postgres.py: one transaction a group commit)
            --> ack {boot, seq} on wattlog/<node>/ack once durable there (live, and retained)

Leases: each collector joins (an advisory lock of its own number on its database session),
counts the live ones, and holds about P / live partitions, each by an advisory lock on the
same session; it commits on that session only, and uses it at least every REBALANCE_S. A
collector killed, or paused longer than its lease ([cluster] lease: the session's
idle_session_timeout, set by it), loses its session and with it every lease: the others
take its partitions within a few seconds, and the woken one can write nothing (its commit
fails on the dead session: LeaseLost), forgets what it held unacknowledged (the broker hands
it to the new owner again) and joins afresh. A stop commits first, then lets its leases go.

Each owned partition has a pull consumer (durable wlp<p>, filtered on its subjects, explicit
acks, ACK_WAIT_S): a message is acknowledged to JetStream only after its readings are
committed, so a collector that dies has its messages delivered again to the next owner
(stored twice is stored once: the database's writes are idempotent). Explicit it must be: a
work-queue stream refuses AckAll (one ack for all below it), which would also acknowledge
what the partition's previous owner was handed and never committed. The consumers keep
their state in memory (replicated on the three nodes like the stream, but never written to
their disks: the nodes writing each consumer's state file after its acks took about 8% of
their CPU in a profile of tools/bench/cluster): should all three nodes restart at once, a
consumer starts again at the stream's first message, and the work-queue stream holds only
what no collector acknowledged, so that is what is delivered again; nothing is lost.

What a commit allows is acknowledged to the plugs as on one Pi (writer.py), retained, over
MQTT; a plug's "online" is answered (the clock, and its energy total from the database) by
the collector that owns its partition.

Acks, live and retained: each commit's ack for a plug goes out live on the plug's ack subject
over this collector's NATS connection (the gateway delivers it to the plug's MQTT
subscription; a plain NATS message costs the cluster next to nothing), and, at most every
RETAIN_S per plug and for every plug whose partition is let go or when the collector stops,
as a retained MQTT message through the gateway, which stores it in a replicated stream: that
costs the cluster about 2 ms of CPU (tools/bench/cluster), more than the batch itself. A plug
that reconnects therefore finds a retained ack at most RETAIN_S old: it sends again what came
after it, which the database stores once (its writes are idempotent), and the next commit
acks it all.

The InfluxDB sink ([influx]) runs in one collector at a time: the one holding the sink's duty,
a lease like a partition's (postgres.SINK_DUTY), taken by whichever collector finds it free at
a rebalance. It follows the whole database, and its cursor is in the database too, so the
next holder goes on where the last one left off; what a dead holder wrote but had not yet
recorded in the cursor is written again, and InfluxDB keeps one point a series and time. The
other collectors' /api/health says another collector writes.

Threads: the asyncio loop (NATS, takes, commits, leases: the store is only touched there);
paho's network thread for MQTT (acks out, statuses in; a status is handed to the loop).
"""

import asyncio
import logging
import math
import os
import signal
import socket
import time

from wattlog.fleet.natsconf import PARTITION_PREFIX, READINGS_STREAM, partition_of, subject
from wattlog.mqtt import client_for, close, parse_broker
from wattlog.store.ingest import NODE_ID
from wattlog.store.postgres import SINK_DUTY, LeaseLost, StoreUnavailable
from wattlog.systemd import Notifier
from wattnode import wire

log = logging.getLogger("wattlog")
ACK_WAIT_S = 10         # a message not acknowledged this long is delivered again
FETCH_BATCH = 256       # messages a partition's consumer asks for at a time
REBALANCE_S = 2.0       # how often the live collectors are counted and leases taken or freed
                        # (the session's heartbeat: a lease outlives it at least twice)
COMMIT_S = 1.0          # a group commit at most this often (what is pending waits no longer)
RETAIN_S = 60.0         # a plug's ack is retained again at most this often (below)


class ClusterCollector:
    def __init__(self, settings, password, parts):
        s = settings
        self.s = s
        self.store = parts.store
        self.firmware = parts.firmware
        self.listeners = [p for p in (parts.firmware, parts.watch) if p is not None]
        self.http = parts.http
        self.sink = parts.sink
        self.sending = False     # this collector holds the sink's duty (_sink_duty)
        self.broker_link = parts.link
        self.complaints = parts.complaints
        self.notifier = Notifier()
        self.password = password
        self.partitions = s.cluster_partitions
        self.name = s.cluster_name or "%s-%d" % (socket.gethostname(), os.getpid())
        self.commit_interval_s = min(s.commit_interval_s, COMMIT_S)
        self.owned = {}          # partition -> its fetch task
        self.unacked = []        # JetStream messages taken, to acknowledge after the commit
        self.failed = False
        self._stop = False
        self._loop = None
        self._statuses = []      # nodes that said "online", from the MQTT thread
        self.online = set()      # the nodes whose retained status says online
        self.mqtt = None
        self.nc = None
        self._last_ack = {}      # node -> its latest ack, not yet retained
        self._retained_at = {}   # node -> when its ack was last retained (monotonic s)

    # -- MQTT: acks out, statuses in ----------------------------------------------------------

    def _mqtt(self):
        """The MQTT client for acks and statuses: the gateways tried in turn, from the one the
        broker setting names (a gateway's node stopped: the next one's)."""
        urls = list(self.s.cluster_mqtt or (self.s.broker,))
        self._gateways = [parse_broker(u)[:2] for u in urls]
        first = parse_broker(self.s.broker)[:2]
        self._gateway = self._gateways.index(first) if first in self._gateways else 0
        client, host, port = client_for(urls[self._gateway],
                                        "%s-%s" % (self.s.client_id, self.name)[:64],
                                        self.s.ca, self.password)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        client.connect_async(host, port, keepalive=30)
        client.loop_start()
        return client

    def _on_disconnect(self, client, userdata, flags, rc, properties):
        self.broker_link.down("the connection to %s:%d was lost (%s)" % (self.host, self.port,
                                                                           rc))
        if not self._stop:  # the next attempt to the next gateway (this only says where)
            self._gateway = (self._gateway + 1) % len(self._gateways)
            client.connect_async(self.host, self.port, keepalive=30)

    def _on_connect(self, client, userdata, flags, rc, properties):
        if rc.is_failure:
            self.broker_link.down("the gateway refused the connection (%s)" % rc)
            return
        self.broker_link.up()
        client.subscribe([("%s/+/status" % self.s.base_topic, 0)])  # retained: QoS 0 will do
        for listener in self.listeners:
            client.subscribe(listener.topics())

    def _on_message(self, client, userdata, msg):
        if any([listener.take(msg.topic, msg.payload) for listener in self.listeners]):
            return
        if msg.topic.endswith("/status"):
            node = msg.topic.split("/")[-2]
            if NODE_ID.match(node):
                self._loop.call_soon_threadsafe(self._status_of, node, msg.payload == b"online")

    def _status_of(self, node, online):
        if online:
            self.online.add(node)
            self._statuses.append(node)
        else:
            self.online.discard(node)

    async def _ack_commit(self, node, payload):
        """A commit's ack: live over NATS, retained through the gateway now and then."""
        now = time.monotonic()
        if now - self._retained_at.get(node, -RETAIN_S) >= RETAIN_S or self.nc is None:
            self._retained_at[node] = now
            self._last_ack.pop(node, None)
            self._ack(node, payload, retain=True)
        else:
            self._last_ack[node] = payload
            await self.nc.publish(subject("%s/%s/ack" % (self.s.base_topic, node)),
                                  payload.encode() if isinstance(payload, str) else payload)

    def _retain_acks(self, nodes=None):
        """The latest acks not yet retained (of `nodes`, or every plug's), retained now."""
        for node in list(self._last_ack) if nodes is None else nodes:
            payload = self._last_ack.pop(node, None)
            if payload is not None:
                self._retained_at[node] = time.monotonic()
                self._ack(node, payload, retain=True)

    def _ack(self, node, payload, retain):
        self.mqtt.publish("%s/%s/ack" % (self.s.base_topic, node), payload, qos=1,
                          retain=retain)

    def _answer_clocks(self):
        """The clock (and the energy total) for each plug that came online, if it is ours."""
        nodes, self._statuses = self._statuses, []
        for node in nodes:
            if partition_of(node, self.partitions) in self.owned:
                energy = self.store.last_energy(node)
                self._ack(node, wire.encode_clock(int(time.time()),
                                                  max(5, round(self.commit_interval_s)),
                                                  energy.get("energy_wh", -1),
                                                  energy.get("energy_time", 0)), retain=False)

    # -- NATS: the partitions this collector owns ---------------------------------------------

    async def _connect(self, nats, user):
        """The cluster's NATS connection and the readings stream, tried until they work (the
        cluster may be electing its leaders, or not up yet) or the collector is stopped."""
        from nats.errors import Error as NatsError
        wait_s = 1.0
        while not self._stop:
            nc = None
            try:
                nc = await nats.connect(list(self.s.cluster_nats), user=user,
                                        password=self.password, name=self.name,
                                        max_reconnect_attempts=-1, connect_timeout=5)
                js = nc.jetstream()
                await self._stream(js)
                return nc, js
            except (NatsError, OSError, asyncio.TimeoutError) as e:
                log.warning("the NATS cluster %s is not ready (%s); trying again in %.0f s",
                            ", ".join(self.s.cluster_nats), e or type(e).__name__, wait_s)
                if nc is not None:
                    await nc.close()
                await asyncio.sleep(wait_s)
                wait_s = min(wait_s * 2, 30.0)
        return None, None

    async def _stream(self, js):
        from nats.js.api import RetentionPolicy, StreamConfig
        from nats.js.errors import BadRequestError
        config = StreamConfig(name=READINGS_STREAM, subjects=["%s.>" % PARTITION_PREFIX],
                              retention=RetentionPolicy.WORK_QUEUE,
                              num_replicas=min(3, len(self.s.cluster_nats)))
        try:
            await js.add_stream(config)
        except BadRequestError:
            pass  # it is there already (made by another collector)

    async def _fetch(self, js, p):
        """The partition's consumer, pulled until the partition is let go."""
        from nats.errors import Error as NatsError, TimeoutError as NatsTimeout
        from nats.js.api import AckPolicy, ConsumerConfig
        sub = await js.pull_subscribe(
            "%s.%d.>" % (PARTITION_PREFIX, p), durable="wlp%d" % p, stream=READINGS_STREAM,
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=ACK_WAIT_S,
                                  max_ack_pending=100000, mem_storage=True))
        me = asyncio.current_task()
        try:
            # while the partition is this task's: nats-py's fetch can take a cancellation for
            # its own timeout, so a cancelled task must also see it is no longer the owner
            while self.owned.get(p) is me:
                try:
                    msgs = await sub.fetch(FETCH_BATCH, timeout=1)
                except (NatsTimeout, asyncio.TimeoutError):
                    continue  # nothing came
                except NatsError as e:  # the cluster is electing, or the connection moves
                    log.warning("partition %d: fetching failed (%s); trying again", p,
                                e or type(e).__name__)
                    await asyncio.sleep(1)
                    continue
                if self.owned.get(p) is not me:  # let go while fetching: the next owner's
                    for m in msgs:
                        await m.nak()
                    break
                for m in msgs:
                    self._take(m)
        finally:
            try:
                await sub.unsubscribe()
            except NatsError:
                pass  # the connection is closing: the consumer lives on in the cluster

    def _take(self, m):
        # wlpart.<p>.<base>.<node>.readings -> <base>/<node>/readings, as the plug published it
        topic = "/".join(m.subject.split(".")[2:])
        self.store.take(topic, m.data)
        self.unacked.append(m)
        for node, resend in self.store.resends():
            self._ack(node, resend, retain=False)

    async def _rebalance(self, js):
        """Hold a fair share of the partitions: ceil(P / live collectors)."""
        live = max(self.store.committer.members(), 1)
        share = math.ceil(self.partitions / live)
        if len(self.owned) > share:
            # take no more from them, commit what was taken, and only then let the leases go
            let_go = sorted(self.owned)[share:]
            for p in let_go:
                self.owned.pop(p).cancel()
            await self._commit("a collector joined")
            for p in let_go:
                self._retain_acks(self._nodes_of(p))
                self.store.forget_nodes(self._nodes_of(p))
                self.store.committer.release(p)
                log.info("partition %d handed over (%d collectors live)", p, live)
            return
        if len(self.owned) == share:
            return
        taken_elsewhere = self.store.committer.owned_elsewhere()
        start = (self.member * self.partitions // max(live, 1)) % self.partitions
        for k in range(self.partitions):
            p = (start + k) % self.partitions
            if len(self.owned) >= share:
                break
            if p in self.owned or p in taken_elsewhere or not self.store.committer.take_lease(p):
                continue
            self.store.reload_nodes(self.store.committer.states(self._nodes_of(p)))
            self.owned[p] = asyncio.ensure_future(self._fetch(js, p))
            # its plugs that came online while no collector owned it: their clock now
            self._statuses += [n for n in self.online if partition_of(n, self.partitions) == p]
            log.info("partition %d taken (%d of %d, %d collectors live)", p, len(self.owned),
                     share, live)

    def _sink_duty(self):
        """The InfluxDB sink runs in one collector of the cluster: the one whose session holds
        SINK_DUTY, taken at a rebalance when it is free, gone with the session as the
        partitions' leases are (a collector killed, or paused past its lease). It follows
        the whole database, its cursor in it (service.sink), so the next holder goes on where
        the last one's cursor was; a point written twice is one point in InfluxDB."""
        if self.sink is None or self.sending or self.sink.running():
            return  # (running: the thread of a duty lost is still ending a write)
        if self.store.committer.take_duty(SINK_DUTY):
            self.sending = True
            log.info("InfluxDB sink: this collector writes the cluster's readings")
            self.sink.start()
        else:
            self.sink.link.elsewhere("another collector of the cluster writes")

    def _stop_sink(self):
        if self.sending:
            self.sink.stop()
            self.sending = False

    def _nodes_of(self, p):
        return [n for n in self.store.committer.node_names()
                if partition_of(n, self.partitions) == p]

    async def _commit(self, why):
        """The group commit; then the acks to the plugs and to JetStream, in that order."""
        done = self.store.commit()
        acked, self.unacked = self.unacked, []
        if done is not None:
            for node, _, ack in done.acks:  # only now: every record it covers is durable
                await self._ack_commit(node, ack)
        for m in acked:
            await m.ack()
        if done is not None:
            log.debug("commit (%s): %d points; acked %d plugs", why, done.points,
                      len(done.acks))

    def _start_over(self):
        """Join the live collectors with no partition: nodes are kept only once owned."""
        self.store.recover({})
        self.store.forget_nodes(list(self.store.nodes_state.state))
        self.member = self.store.committer.join(self.s.cluster_lease_s)

    def _status(self, span_s, counted):
        try:
            st = self.store.status()
        except StoreUnavailable as e:
            log.info("status: partitions none; %s", e)
            return counted
        log.info("status: %d readings in %.0f s from %d plugs; partitions %s; %d commits, %d "
                 "points pending", st["readings"] - counted, span_s, st["plugs_heard"],
                 ",".join(map(str, sorted(self.owned))) or "none", st["commits"],
                 st["pending_points"])
        self.complaints.flush()
        return st["readings"]

    def _lost(self, why):
        """The leases are gone: forget everything that was not committed and start afresh."""
        dropped = self.store.discard_pending()
        for task in self.owned.values():
            task.cancel()
        self.owned, self.unacked, self._last_ack = {}, [], {}
        self._stop_sink()
        log.error("%s: the %d readings not yet committed are left to the partitions' new "
                  "owners; joining again", why, dropped)

    # -- the loop -----------------------------------------------------------------------------

    @property
    def connected(self):  # what systemd's status line says (systemd.py)
        return self.mqtt is not None and self.mqtt.is_connected()

    @property
    def host(self):
        return self._gateways[self._gateway][0] if self.mqtt else "?"

    @property
    def port(self):
        return self._gateways[self._gateway][1] if self.mqtt else 0

    def stop(self, *_):
        self._stop = True

    def run(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.stop)
        asyncio.run(self._run())

    async def _run(self):
        import nats
        self._loop = asyncio.get_running_loop()
        user = parse_broker(self.s.broker)[2]
        if self.http is not None and not self.http.start(on_failure=self.stop):
            self.failed = True
            return
        nc, js = await self._connect(nats, user)
        self.nc = nc
        if nc is None:
            return
        self.mqtt = self._mqtt()
        self.notifier.started(self)
        joined, join_at, join_wait_s = False, 0.0, 1.0
        last_commit = last_rebalance = 0.0
        last_status, counted = time.monotonic(), 0
        try:
            while not self._stop:
                await asyncio.sleep(0.05)
                now = time.monotonic()
                try:
                    if not joined and now >= join_at:  # at the start; the leases lost
                        self._start_over()
                        joined, join_wait_s = True, 1.0
                        log.info("cluster collector %s (member %d) on %d partitions, "
                                 "committing every %.1f s", self.name, self.member,
                                 self.partitions, self.commit_interval_s)
                    if joined and now - last_rebalance >= REBALANCE_S:
                        last_rebalance = now
                        await self._rebalance(js)
                        self._sink_duty()
                    self._answer_clocks()
                    if joined and now - last_commit >= self.commit_interval_s:
                        last_commit = now
                        await self._commit("interval")
                except LeaseLost as e:
                    self._lost(str(e))
                    self.store.committer.reset()
                    joined, join_at = False, now
                except StoreUnavailable as e:
                    if not joined:  # the database is away: join when it is back
                        log.error("%s; trying again in %.0f s", e, join_wait_s)
                        join_at, join_wait_s = now + join_wait_s, min(join_wait_s * 2, 10.0)
                    else:
                        log.error("%s; trying again", e)
                self.notifier.tick(self)
                if now - last_status >= self.s.status_interval_s:
                    last_status, counted = now, self._status(now - last_status, counted)
        finally:
            self.notifier.stopping(self)
            self._stop_sink()
            try:
                await self._commit("shutdown")
            except StoreUnavailable as e:
                log.error("the last commit failed (%s): the broker delivers those readings "
                          "again", e)
            self._retain_acks()
            tasks, self.owned = list(self.owned.values()), {}
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self.http is not None:
                self.http.stop()
            await nc.close()
            close(self.mqtt)
            self.store.close()
            log.info("cluster collector %s stopped", self.name)
