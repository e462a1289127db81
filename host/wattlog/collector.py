"""collector.py - the collector service: readings in over MQTT, PHPFina feeds out, delayed commits.
(About 450 lines, one concern: the one thread's loop and the MQTT callbacks it runs, which
share that thread's state: connected, back-off, the start-up marker, what is held back.)

One thread drives paho's network loop (client.loop), the ingest and the commits, so they never
race and an exception stops the service with a traceback instead of killing a thread quietly.

Commits happen when the oldest pending reading has waited commit_interval_s (default 300 s:
few writes, a long SD-card life), when some feed has a whole 4 KiB page (1024 slots) pending,
and at SIGTERM/SIGINT, after which the service exits: a clean stop leaves nothing unwritten.
What a plug on trial sends (a new version, confirmed only if its readings are acknowledged:
firmware.py) is committed at once; a rollback's count of lost slots is added to the plug's lost
readings (nodes.py). A commit that fails (disk full, I/O error) is logged, its points stay pending, and it is
tried again one commit interval later.

The MQTT session is persistent (clean_session False, a fixed client id) and the readings are
QoS 1, so the broker keeps batches for the collector while it restarts. The link to the
broker (broker_link, links.py: up since it connected, or down since it was lost, with the
latest reason) is in /api/health and the dashboard's header.

Start-up: the data directory is locked and checked at once (commit.py), but nothing in it is
cut until the collector knows what the plugs were told: at its first connection it subscribes
to <base>/+/ack (QoS 0), publishes a marker on <base>/<client id>/ack (an ack topic no plug
reads) and gathers the retained acks until the marker comes back; mosquitto queues a
subscription's retained messages and the client's later publishes to it in order, so by then
every retained ack is in. Then commit.py's recover() decides what may be cut, the ack
subscription is dropped, and the readings that arrived meanwhile are taken in.

Acks (nodes.py): after each commit, every node heard from since the last one gets a retained
{"boot", "seq", "time"} on <base>/<node>/ack: its records below seq are on disk, so it may
free them. A hole in what a node sent is asked for again on the same topic, not retained:
{"boot", "seq", "resend", "time"}.

Clock service: when a plug says "online" on <base>/<node>/status, the collector answers on
<base>/<node>/ack with {"time": <unix s>, "clock": true, "commit_s": <commit interval>} and,
when it holds any, "energy_wh" and "energy_time": the node's largest energy total pending or
on disk and when it was true (a plug back from a power cut resumes from it), not
retained, so the answer is always fresh: a plug whose RTC is unset and that has no NTP server
on the LAN takes its time from it (lib/wattnode/clock.py), and every plug learns how long an
ack may take (it sends again what the broker accepted and no ack covered after three commit
intervals: lib/wattnode/link.py).
"""

import logging
import os
import signal
import time

import paho.mqtt.client as mqtt

from wattlog.store.ingest import NODE_ID
from wattlog.mqtt import client_for, parse_broker
from wattlog.store.nodes import parse_ack
from wattlog.fleet.provision import COLLECTOR
from wattlog.systemd import Notifier
from wattnode import wire

log = logging.getLogger("wattlog")
PAGE_SLOTS = 4096 // 4
MARKER_WAIT_S = 15.0
UPTIME_TOPIC = "$SYS/broker/uptime"  # mosquitto's, retained; the ACL lets the collector read it


class Collector:
    def __init__(self, settings, password, parts):
        """settings: settings.Settings; password: the broker's (from its file); parts: the
        service's parts, made once by service.build()."""
        s = settings
        self.commit_interval_s = s.commit_interval_s
        self.summary_interval_s = s.summary_interval_s
        self._flushed_at = time.monotonic()
        self.status_interval_s = s.status_interval_s
        self.base_topic = s.base_topic
        self.complaints = parts.complaints
        self.notifier = Notifier()  # systemd's notify protocol, when it runs us (systemd.py)
        # the data directory is locked and checked, nothing changed yet: store.recover() runs
        # once the broker's retained acks are known (recover(), when the start-up marker
        # comes back)
        self.store = parts.store
        # each plug's version and last update result, for `wattlog nodes` (firmware.py)
        self.firmware = parts.firmware
        # the appliances' runs (runs/part.py): a listener, ticked by the loop
        self.runs = parts.runs
        self.listeners = [p for p in (parts.firmware, parts.watch, parts.runs) if p is not None]
        self._retained = {}     # node -> the retained ack the broker holds (start-up only)
        self._held_back = []    # (topic, payload) that came before recover(): taken after it
        self._marker = None     # start-up: when it comes back, the retained acks are in
        self._marker_at = None
        self.client_id = s.client_id
        self._marker_topic = "%s/%s/ack" % (s.base_topic, s.client_id)
        self.client, self.host, self.port = client_for(s.broker, s.client_id, s.ca, password,
                                                       clean_session=False)
        self.user = parse_broker(s.broker)[2]
        self.password_file = s.password_file  # named when the broker refuses the login
        self._lost_at = None    # monotonic time of the last drop, until the broker's uptime
        self._taken = 0         # drops that were another client taking this login
        self._refused_logins = 0
        # the link to the broker, as /api/health and the dashboard's header say it (links.py)
        self.broker_link = parts.link
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_subscribe
        self.connected = False
        self.failed = False
        self._stop = False
        self._retry_at = 0.0
        self._backoff_s = 0.0
        self._failed_commit_at = None
        self._connected_at = 0.0
        self._quick_drops = 0
        self.sink = parts.sink  # the InfluxDB sink (sink.py): its own thread, from recover() on
        self.http = parts.http  # the HTTP side (serve/app.py): its own thread, run() starts it

    def _http_failed(self):
        self.failed = True
        self._stop = True

    # -- MQTT --------------------------------------------------------------------------------

    def _on_connect(self, client, userdata, flags, reason_code, properties):
        if reason_code.is_failure:
            self._back_off()
            if reason_code in ("Not authorized", "Bad user name or password"):
                self._refused_logins += 1
                if self._refused_logins == 1 or self._refused_logins % 20 == 0:
                    log.error("broker %s:%d refused the login%s (%s, %d time%s so far); trying "
                              "again every %.0f s", self.host, self.port, self._whose(),
                              reason_code, self._refused_logins,
                              "" if self._refused_logins == 1 else "s", self._backoff_s)
                self.broker_link.down("the broker refused the login of %s (%s)"
                                      % (self.user or "an anonymous client", reason_code))
            else:
                log.error("broker %s:%d refused the connection (%s); trying again in %.0f s",
                          self.host, self.port, reason_code, self._backoff_s)
                self.broker_link.down("the broker refused the connection (%s)" % reason_code)
            return
        self.connected = True
        self._refused_logins = 0
        self.broker_link.up()
        self._connected_at = time.monotonic()
        base = self.base_topic
        client.subscribe([("%s/+/readings" % base, 1), ("%s/+/status" % base, 1)])
        for listener in self.listeners:  # firmware; the plug watch for the HTTP side
            client.subscribe(listener.topics())
        if self._lost_at is not None:  # why was it lost? the broker's uptime tells (_uptime)
            client.subscribe(UPTIME_TOPIC, 0)
        if not self.store.recovered:
            # Start-up: the acks the broker retains (what the plugs were told, to check
            # commit.json against), then a marker on an ack topic no plug reads. mosquitto
            # queues a subscription's retained messages and later publishes to the same client
            # in order, so when the marker comes back every retained ack is in.
            self._marker = os.urandom(8).hex().encode()
            self._marker_at = time.monotonic()
            client.subscribe("%s/+/ack" % base, 0)
            client.publish(self._marker_topic, self._marker, qos=0)
        if self.runs is not None:  # discovery and run states, retained: again after a reconnect
            self._publish(self.runs.announce())
        log.info("connected to %s:%d", self.host, self.port)

    def _whose(self):
        """Whose login the broker refused, and what to check, for its error line."""
        if self.user is None:
            return (": the broker wants a user and password: give broker = "
                    "\"mqtt://wattlog-collector@HOST\" and password_file in the config")
        return (" of %s: the password %s is not the one the broker has for that user "
                "(wattlog provision writes both: copy its passwd to the broker and restart it)"
                % (self.user, "in " + self.password_file if self.password_file else
                   "given ($WATTLOG_MQTT_PASSWORD or the URL)"))

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties):
        if any(rc.is_failure for rc in reason_codes):
            log.error("the broker refused a subscription to %s/+/readings, /status or /ack "
                      "(%s): check the collector's ACL", self.base_topic, reason_codes)

    def recover(self, retained):
        """The retained acks are in: make the files agree with them (commit.py), then take the
        readings that came meanwhile."""
        log.info("the broker retains acks for %d plugs; checking the data against them",
                 len(retained))
        try:
            self.store.recover(retained)
        except OSError as e:
            log.error("cannot make %s agree with what was acknowledged (%s); stopping with "
                      "nothing changed past that point", self.store.data_dir, e)
            self.failed = True
            self._stop = True
            return
        self.client.unsubscribe("%s/+/ack" % self.base_topic)
        self._retained = None
        held, self._held_back = self._held_back, []
        for topic, payload in held:
            self._readings(topic, payload)
        self.flush_summaries("start-up")  # new or stale summaries made now, with progress
        log.info("listening on %s/+/readings", self.base_topic)
        self.notifier.started(self)
        if self.sink is not None:
            self.sink.start()

    def _marker_overdue(self, now):
        """The marker never came back (an ACL that does not let the collector read or write
        <base>/+/ack): start with the acks gathered so far rather than never."""
        if not self.store.recovered and self.connected and self._marker_at is not None \
                and now - self._marker_at > MARKER_WAIT_S:
            log.error("no answer on %s within %.0f s: the broker's ACL must let the user %s "
                      "read and write %s/+/ack (is that the collector's login, %s?); starting "
                      "without checking commit.json against the acks the plugs were given",
                      self._marker_topic, MARKER_WAIT_S, self.user, self.base_topic, COLLECTOR)
            self.recover(self._retained)

    def _uptime(self, payload):
        """The broker's uptime ("123 seconds", retained) after a reconnect: a broker up longer
        than the connection was down did not restart, so it closed a working connection on
        purpose: mosquitto does that when another client logs in with the same client id,
        which use_username_as_clientid makes the user name (provision.py)."""
        lost_at, self._lost_at = self._lost_at, None
        self.client.unsubscribe(UPTIME_TOPIC)
        try:
            up_s = int(payload.split()[0])
        except (ValueError, IndexError):
            return
        if lost_at is None:
            return
        if up_s <= time.monotonic() - lost_at + 2:
            log.info("the broker had restarted (up %d s)", up_s)
            return
        self._taken += 1
        if self._taken in (1, 10) or self._taken % 100 == 0:
            log.error("another client logged in as %s took this connection (%d time%s so far): "
                      "is a second collector running with this user? Stop it, or give it a "
                      "user of its own (wattlog provision); the two take each other's place "
                      "until one stops", self.user, self._taken, "" if self._taken == 1 else "s")

    def _on_disconnect(self, client, userdata, flags, reason_code, properties):
        if self.connected and not self._stop:
            self._lost_at = time.monotonic()
            why = "the connection closed" if reason_code == "Unspecified error" else reason_code
            log.warning("lost the broker %s:%d (%s); reconnecting", self.host, self.port, why)
            self.broker_link.down("the connection was lost (%s)" % why)
            if time.monotonic() - self._connected_at < 2.0:
                self._quick_drops += 1
                self._back_off()  # two clients taking each other's place: not 5 times a second
                if self._quick_drops == 3:
                    log.error("the broker keeps dropping this collector right after it connects: "
                              "another client is logged in with the same client id %r, or as "
                              "the same user (a second collector?)", self.client_id)
            else:  # it had held: reconnect at once, and back off afresh if that fails
                self._quick_drops = 0
                self._backoff_s = 0.0
        self.connected = False

    def _on_message(self, client, userdata, msg):
        try:
            topic = msg.topic
        except UnicodeDecodeError:
            self.complaints("bad-node", "ignored a message whose topic is not UTF-8")
            return
        if topic == UPTIME_TOPIC:
            self._uptime(msg.payload)
            return
        taken = [listener.take(topic, msg.payload) for listener in self.listeners]
        if any(taken):  # each listener sees the message: two take a discovery config
            return
        if topic.endswith("/status"):
            self._on_status(topic, msg.payload)
        elif topic.endswith("/ack"):
            if self._retained is None:
                return  # after start-up: our own acks, echoed until the unsubscribe is through
            if topic == self._marker_topic and msg.payload == self._marker:
                self.recover(self._retained)
            elif msg.retain:
                ack = parse_ack(msg.payload)
                node = topic.split("/")[-2]
                if ack is not None and NODE_ID.match(node):
                    self._retained[node] = ack
        elif not self.store.recovered:
            self._held_back.append((topic, msg.payload))
        else:
            self._readings(topic, msg.payload)

    def _readings(self, topic, payload):
        kept = self.store.take(topic, payload)
        for node, resend in self.store.resends():
            self._ack(node, resend, retain=False)
        if kept and self._failed_commit_at is None and \
                self.firmware.on_trial(topic.split("/")[-2]):
            self.commit("a plug on trial")  # its ack confirms the new version (firmware.py)

    def _ack(self, node, payload, retain):
        """payload: one of wattnode.wire's ack payloads, as its encoders make them."""
        self.client.publish("%s/%s/ack" % (self.base_topic, node), payload, qos=1, retain=retain)

    def _publish(self, messages):
        for topic, payload, retain in messages:
            self.client.publish(topic, payload, qos=1, retain=retain)

    def _on_status(self, topic, payload):
        node = topic.split("/")[-2]
        if payload == b"online" and NODE_ID.match(node):
            # commit_s: the plug resends what it handed the broker if no ack comes within
            # a few commit intervals (lib/wattnode/link.py); energy_wh: a plug back from a
            # power cut resumes its total from it (lib/wattnode/energy.py)
            energy = self.store.last_energy(node)
            self._ack(node, wire.encode_clock(int(time.time()), round(self.commit_interval_s),
                                              energy.get("energy_wh", -1),
                                              energy.get("energy_time", 0)), retain=False)

    def _connect_when_due(self, now):
        if now < self._retry_at:
            return
        try:
            self.client.connect(self.host, self.port, keepalive=60)
            return
        except OSError as e:
            self._back_off()
            log.warning("cannot reach the broker at %s:%d (%s); trying again in %.0f s",
                        self.host, self.port, e, self._backoff_s)
            self.broker_link.down("cannot reach it (%s)" % (e.strerror or e))

    def _back_off(self):
        self._backoff_s = min(max(self._backoff_s * 2, 1.0), 30.0)
        self._retry_at = time.monotonic() + self._backoff_s

    # -- the loop ----------------------------------------------------------------------------

    def stop(self, *_):
        self._stop = True

    def run(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.stop)
        started = last_status = time.monotonic()
        counted = 0
        log.info("collecting into %s, committing every %.0f s", self.store.data_dir,
                 self.commit_interval_s)
        try:
            if self.http is not None and not self.http.start(on_failure=self._http_failed):
                self.failed = self._stop = True  # it cannot listen: api.py said why
            while not self._stop:
                now = time.monotonic()
                if self.client.socket() is None:
                    self._connect_when_due(now)
                if self.client.loop(timeout=0.2) != mqtt.MQTT_ERR_SUCCESS:
                    time.sleep(0.2)
                self._marker_overdue(time.monotonic())
                self._commit_if_due(time.monotonic())
                self._flush_if_due(time.monotonic())
                if self.runs is not None and self.connected and self.store.recovered:
                    self._publish(self.runs.tick())  # readings taken, not yet committed too
                self.notifier.tick(self)
                if time.monotonic() - last_status >= self.status_interval_s:
                    last_status, counted = self._status(last_status, counted)
        finally:
            self.notifier.stopping(self)
            if self.sink is not None:
                self.sink.stop()
            if self.http is not None:
                self.http.stop()  # no request reads the files while they are closed
            clean = self.commit("shutdown") and self.store.recovered
            if clean:
                self.flush_summaries("shutdown")
            if self.runs is not None:
                self.runs.close()
            if self.client.socket() is not None:
                self.client.disconnect()
                self.client.loop(timeout=0.5)
            st = self.store.status()
            self.store.close(clean=clean)
            log.info("stopped after %.0f s: %d readings in %d batches, %d commits%s",
                     time.monotonic() - started, st["readings"], st["batches"], st["commits"],
                     self._refused())

    def _flush_if_due(self, now):
        if self.store.recovered and now - self._flushed_at >= self.summary_interval_s:
            self.flush_summaries("interval")

    def flush_summaries(self, why):
        """The summaries (rollup.py) up to what is committed; False if that failed (it is
        tried again one summary interval later; queries read the .dat meanwhile)."""
        self._flushed_at = time.monotonic()
        t0 = time.monotonic()
        step = []

        def progress(done, total):  # a rebuild of many feeds says how far it has got
            if total >= 20 and done * 10 // total > len(step):
                step.append(done)
                log.info("summaries: %d of %d feeds", done, total)
        try:
            written = self.store.flush_summaries(progress)
        except OSError as e:
            log.error("could not write the summaries (%s); queries read the feeds themselves "
                      "until the next try in %.0f s", e, self.summary_interval_s)
            return False
        log.info("summaries flushed (%s): %d bytes in %.2f s", why, written,
                 time.monotonic() - t0)
        return True

    def _commit_if_due(self, now):
        oldest = self.store.oldest_pending()
        if oldest is None:
            return
        if self._failed_commit_at is not None and now - self._failed_commit_at < self.commit_interval_s:
            return
        if now - oldest >= self.commit_interval_s:
            self.commit("interval")
        elif self.store.fullest_pending() >= PAGE_SLOTS:
            self.commit("a full page")

    def commit(self, why):
        """Commit what is pending; False if that failed (it stays pending)."""
        try:
            done = self.store.commit()
        except OSError as e:
            log.error("commit failed (%s); keeping %d plugs' points in memory and trying again "
                      "in %.0f s", e, self.store.status()["plugs_pending"],
                      self.commit_interval_s)
            self._failed_commit_at = time.monotonic()
            return False
        self._failed_commit_at = None
        if done is None:
            return True
        for node, _, ack in done.acks:  # only now: every record it covers is on disk
            self._ack(node, ack, retain=True)
        log.info("commit (%s): %d points to %d feeds, %d bytes; acked %s", why, done.points,
                 done.feeds, done.bytes,
                 ", ".join("%s %d" % (n, seq) for n, seq, _ in done.acks) or "nothing")
        return True

    def _status(self, since, counted):
        now = time.monotonic()
        self.complaints.flush()
        st = self.store.status()
        new = st["readings"] - counted
        log.info("status: %d readings in %.0f s (%.0f/s) from %d nodes; %d commits%s", new,
                 now - since, new / max(now - since, 1e-9), st["plugs_heard"], st["commits"],
                 self._refused())
        return now, st["readings"]

    def _refused(self):
        totals = self.complaints.totals
        return "; refused so far: " + ", ".join("%s %d" % kv for kv in sorted(totals.items())) \
            if totals else ""
