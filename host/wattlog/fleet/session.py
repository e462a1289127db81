"""session.py - the operator's MQTT session: what `wattlog plug`, `wattlog ota` and the HTTP
API's relay and commands say to the plugs goes through one of these, and a broker that
refuses says so in the same words whichever of them asked.

- MQTT 5: a login the broker refuses comes back with its reason, and so does a publish the
  ACL refuses ("Not authorized"), where MQTT 3.1.1 answers a refused publish like an accepted
  one and the tool would wait for a plug that never hears it.
- Every step waits for its answer at most timeout_s: open() for the CONNACK, subscribe() for
  the SUBACK, publish() for the PUBACK (QoS 1). The broker answers a client's packets in
  order, so once a SUBACK is in, the retained messages of every subscription made before it
  are in too.
- paho reconnects by itself after a cut (a broker restart, a login of the same client id
  elsewhere): the subscriptions are made again on every connection, in their order.
- Messages go to on_message(topic, payload, retain) if given, else to a queue read with
  next(deadline_s).

The errors (SessionError, its `kind` for the HTTP status):
  unreachable  cannot reach the broker at HOST:PORT (why)
  timeout      the broker at HOST:PORT did not answer <step> within N s
  login        the broker at HOST:PORT refused the login of USER (reason): check the user
               name and its password file
  publish      the broker refused to let USER <what> (reason): <how to be allowed>
"""

import queue
import threading
import time

import paho.mqtt.client as mqtt

from wattlog.fleet.logins import OPERATOR
from wattlog.mqtt import client_for, parse_broker
from wattlog.mqtt import close


class SessionError(Exception):
    def __init__(self, kind, text):
        super().__init__(text)
        self.kind = kind


class Session:
    def __init__(self, url, client_id, password=None, ca=None, timeout_s=10.0,
                 on_message=None):
        self.user = parse_broker(url)[2]
        self.client, self.host, self.port = client_for(url, client_id, ca, password,
                                                       protocol=mqtt.MQTTv5)
        self.timeout_s = timeout_s
        self.messages = queue.Queue()
        self._on_message = on_message
        self._topics = []       # every subscription made, remade on each connection
        self._answers = {}      # mid (or "connect") -> its answer, once in
        self._unwaited = set()  # mids of send() and of resubscriptions: answers let go
        self._opened = False    # the first CONNACK is open()'s; later ones are reconnects
        self._cond = threading.Condition()
        c = self.client
        c.on_connect = self._connected
        c.on_subscribe = lambda c, u, mid, codes, p: self._answer(mid, codes)
        c.on_publish = lambda c, u, mid, rc, p: self._answer(mid, rc)
        c.on_message = self._message

    def open(self):
        try:
            self.client.connect(self.host, self.port, keepalive=30)
        except OSError as e:
            raise SessionError("unreachable", "cannot reach the broker at %s:%d (%s)"
                               % (self.host, self.port, e)) from None
        self.client.loop_start()
        try:
            rc = self._wait("connect", "the login")
        except SessionError:
            self.close()
            raise
        self._opened = not rc.is_failure
        if rc.is_failure:
            self.close()
            raise SessionError("login", "the broker at %s:%d refused the login of %s (%s): "
                                        "check the user name and its password file"
                               % (self.host, self.port, self.user or "an anonymous client", rc))
        return self

    def subscribe(self, topics):
        """topics: [(filter, qos)]; returns once the broker has granted them."""
        self._topics.append(topics)
        self._wait(self.client.subscribe(topics)[1], "a subscription")

    def publish(self, topic, payload, what=None):
        """QoS 1, returned once the broker has it; refused: SessionError("publish") saying
        what the user may not do (`what`, else "publish on <topic>")."""
        info = self.client.publish(topic, payload, qos=1)
        rc = self._wait(info.mid, "the publish on %s" % topic)
        if rc.is_failure:
            how = ("log in as %s, whose ACL allows it" % OPERATOR if self.user != OPERATOR else
                   "the broker's ACL does not give it this topic: give mosquitto the acl "
                   "`wattlog provision` writes")
            raise SessionError("publish", "the broker refused to let %s %s (%s): %s"
                               % (self.user, what or "publish on " + topic, rc, how))

    def send(self, topic, payload):
        """QoS 1, not waited for: for a stream whose pace the other side sets (an update's
        chunks, which the plug asks for); its PUBACK is let go."""
        mid = self.client.publish(topic, payload, qos=1).mid
        with self._cond:
            if self._answers.pop(mid, None) is None:
                self._unwaited.add(mid)

    def next(self, deadline_s):
        """The next message (topic, payload, retain), or None at time.monotonic() deadline_s."""
        left = deadline_s - time.monotonic()
        if left <= 0:
            return None
        try:
            return self.messages.get(timeout=left)
        except queue.Empty:
            return None

    def close(self):
        close(self.client)

    def __enter__(self):
        return self.open()

    def __exit__(self, *exc):
        self.close()

    def _connected(self, client, userdata, flags, rc, properties):
        if not rc.is_failure:
            for topics in self._topics:  # again, after a reconnect (none yet at the first)
                mid = client.subscribe(topics)[1]
                with self._cond:
                    self._unwaited.add(mid)
        if not self._opened:
            self._answer("connect", rc)

    def _message(self, client, userdata, m):
        if self._on_message is not None:
            self._on_message(m.topic, m.payload, m.retain)
        else:
            self.messages.put((m.topic, m.payload, m.retain))

    def _answer(self, key, value):
        with self._cond:
            if key in self._unwaited:
                self._unwaited.discard(key)
                return
            self._answers[key] = value
            self._cond.notify_all()

    def _wait(self, key, step):
        with self._cond:
            if not self._cond.wait_for(lambda: key in self._answers, self.timeout_s):
                raise SessionError("timeout", "the broker at %s:%d did not answer %s within "
                                              "%.0f s" % (self.host, self.port, step,
                                                          self.timeout_s))
            return self._answers.pop(key)
