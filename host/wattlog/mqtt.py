"""mqtt.py - an MQTT client for the broker a URL names: the collector's and `wattlog plug`'s.

  mqtt://[USER@]HOST[:PORT]       plain, port 1883 unless given
  mqtts://[USER@]HOST[:PORT]      TLS, port 8883; the broker's certificate is checked against
                                  --ca (wattlog provision makes one) or the system's CAs
The password comes from a file or the environment (cli.py), never from the command line, where
`ps` shows it; one in the URL (USER:PASS@) still works, and redact() keeps it out of every
message.
"""

import urllib.parse

import paho.mqtt.client as mqtt


def client_for(url, client_id, ca=None, password=None, protocol=mqtt.MQTTv311, **kw):
    """A paho client set up for the broker URL (credentials, TLS with the CA file for mqtts);
    returns (client, host, port). `password` (from a file or the environment: never a command
    line) goes with the URL's user, in place of a password in the URL, which still works but
    shows in `ps`."""
    host, port, user, url_password = parse_broker(url)
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                         protocol=protocol, **kw)
    if user is not None:
        client.username_pw_set(user, url_password if password is None else password)
    if url.startswith("mqtts://"):
        client.tls_set(ca_certs=ca)  # the system's CAs when no CA file is given
    return client, host, port


def close(client):
    """Disconnect and end the client's network thread (loop_start()'s). paho 2.1's loop_stop()
    reads its thread, then joins it; a thread that ends by itself in between (it does, at once,
    after disconnect()) sets it to None as it ends, and the join raises AttributeError: the
    thread has ended then, as wanted (seen in a test run beside another)."""
    client.disconnect()
    try:
        client.loop_stop()
    except AttributeError:
        pass


def parse_broker(url):
    """mqtt[s]://[USER[:PASS]@]HOST[:PORT] -> (host, port, user, password); mqtts is TLS.
    An error names the URL without its password."""
    parts = urllib.parse.urlsplit(url if "://" in url else "mqtt://" + url)
    try:
        port = parts.port
    except ValueError:  # not a number, or out of range
        port = None
        parts = parts._replace(netloc="")
    if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
        raise ValueError("broker %s: expected mqtt://[USER@]HOST[:PORT] (mqtts:// for TLS)"
                         % redact(url))
    return (parts.hostname, port or (8883 if parts.scheme == "mqtts" else 1883),
            urllib.parse.unquote(parts.username) if parts.username else None,
            urllib.parse.unquote(parts.password) if parts.password else None)


def with_user(url, user):
    """The broker URL with `user` in place of its user (and without its password, if any):
    the config names the collector's login; `wattlog plug` and `ota` log in as the operator."""
    host, port, _, _ = parse_broker(url)
    host = "[%s]" % host if ":" in host else host
    return "%s://%s@%s:%d" % ("mqtts" if url.startswith("mqtts://") else "mqtt",
                              urllib.parse.quote(user, safe=""), host, port)


def redact(url):
    """The URL as it may be shown: the password, if any, replaced by ***."""
    head, at, host = url.rpartition("@")
    if not at:
        return repr(url)
    scheme, sep, userinfo = head.partition("://")
    if not sep:
        scheme, userinfo = "", head
    user, colon, _ = userinfo.partition(":")
    return repr(scheme + sep + user + (":***" if colon else "") + "@" + host)
