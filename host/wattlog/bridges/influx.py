"""influx.py - the InfluxDB side of the sink: where to write (the URL), what to write (the
schemas, as line protocol) and the write itself (one HTTP POST a batch).

URLs (`wattlog collect --influx URL`; the secret is never in it, always in a file):

    influx://[USER@]HOST[:PORT]/DATABASE[?rp=POLICY]   InfluxDB 1.x: POST /write?db=&rp=
    influxs://...                                       the same over HTTPS
    influxv2://HOST[:PORT]/ORG/BUCKET                   InfluxDB 2.x and 3.x: POST /api/v2/write
    influxv2s://...                                     the same over HTTPS

The port defaults to 8086. 1.x: the password of USER comes from a file, sent as HTTP basic
auth (never in the query string, which servers log); without USER nothing is sent (a server
with auth-enabled = false). 2.x/3.x: the token comes from a file ("Authorization: Token").
Every write is precision=s: a point's time is its slot's start, in unix seconds.

Schemas (Schema.lines):
  default  measurement per channel, tag node, field value:
               power,node=plug-a value=512.5 1795170000     (W; voltage V, current A,
                                                              energy kWh)
           One point per stored slot of one feed, so a point is written by exactly one feed's
           cursor and rewriting it is exact (same series, same time). A per-channel measurement
           keeps the unit of a field obvious, and one query draws every plug
           (GROUP BY "node").
  sp3s     measurement = the plug's name, field usage = power in W, no tags, power only:
               washer usage=512.5 1795170000
           what the SP3S setup wattlog replaces wrote (the influxdb Python client, one
           measurement per plug), so its Grafana panels (SELECT mean("usage") FROM "washer"
           ...) keep working. The name is the node id, or the name given for it (names=).

Line protocol escaping (InfluxDB's rules): in a measurement, comma and space take a
backslash; in tag keys, tag values and field keys, comma, equals sign and space do. Values
are written as float32's shortest text (the files hold float32: 229.99, not
229.99000549316406), which reads back as the same float32.

The client: InfluxData's own `influxdb-client` speaks only the v2 API (/api/v2/write), which
InfluxDB 1.x has only from 1.8 on (Debian's influxdb is 1.6.7); `influxdb` (the 1.x client
the SP3S setup used) is archived and unmaintained; `influxdb3-python` needs pyarrow for a
write a plain POST does. So this is http.client from the standard library: a write is one
POST of text, one keep-alive connection, a timeout on every socket operation.
"""

import base64
import http.client
import ssl
import urllib.parse

import numpy as np

SCHEMAS = ("default", "sp3s")
DEFAULT_PORT = 8086
TIMEOUT_S = 10.0  # for each socket operation of a write
_SCHEMES = {"influx": (1, False), "influxs": (1, True), "influxv2": (2, False),
            "influxv2s": (2, True)}


class InfluxError(ValueError):
    """A URL, a schema or a secret file that cannot be used; the message says what to do."""


class WriteFailed(Exception):
    """A write that did not go through. kind: what the collector folds complaints by;
    retry: False when sending the same points again cannot help (InfluxDB refused them)."""

    def __init__(self, kind, sentence, retry=True):
        super().__init__(sentence)
        self.kind = kind
        self.retry = retry


# -- line protocol ---------------------------------------------------------------------------

def escape_measurement(name):
    return name.replace("\\", "\\\\").replace(",", "\\,").replace(" ", "\\ ")


def escape_key(text):
    """A tag key, tag value or field key."""
    return (text.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")
            .replace(" ", "\\ "))


class Schema:
    def __init__(self, name="default", names=None):
        if name not in SCHEMAS:
            raise InfluxError("the InfluxDB schema %r is not one of %s"
                              % (name, ", ".join(SCHEMAS)))
        self.name = name
        self.names = dict(names or {})
        for node, measurement in self.names.items():
            if not measurement or "\n" in measurement:
                raise InfluxError("the InfluxDB name for %s must be one line of text" % node)

    def series(self, node, channel):
        """The text before the field value ("power,node=a value=" / "washer usage="), or None
        when this schema does not carry that channel."""
        if self.name == "default":
            return "%s,node=%s value=" % (escape_measurement(channel), escape_key(node))
        if channel != "power":
            return None
        return "%s usage=" % escape_measurement(self.names.get(node, node))

    @staticmethod
    def lines(series, times, values):
        """Line-protocol lines for one series; NaN and infinite values are left out."""
        keep = np.isfinite(values)
        return ["%s%s %d" % (series, v, t) for t, v in zip(times[keep].tolist(),
                                                           values[keep].astype(np.float32))]


# -- where to write --------------------------------------------------------------------------

class Target:
    """A parsed --influx URL: version 1 (database, rp, user) or 2 (org, bucket)."""

    def __init__(self, url):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in _SCHEMES:
            raise InfluxError("%r is not an InfluxDB URL: use influx://[USER@]HOST[:PORT]/"
                              "DATABASE[?rp=POLICY] (1.x) or influxv2://HOST[:PORT]/ORG/BUCKET "
                              "(2.x, 3.x)" % _redact(url))
        self.version, self.tls = _SCHEMES[parts.scheme]
        if parts.password is not None:
            raise InfluxError("the InfluxDB URL %s holds a password: put it in a file and give "
                              "--influx-password-file (ps shows a command line)" % _redact(url))
        try:
            self.port = parts.port or DEFAULT_PORT
        except ValueError:
            raise InfluxError("the InfluxDB URL %s has a bad port" % url) from None
        self.host = parts.hostname
        if not self.host:
            raise InfluxError("the InfluxDB URL %s names no host" % url)
        self.user = urllib.parse.unquote(parts.username) if parts.username else None
        path = [urllib.parse.unquote(p) for p in parts.path.split("/") if p]
        query = dict(urllib.parse.parse_qsl(parts.query))
        self.rp = self.database = self.org = self.bucket = None
        if self.version == 1:
            if len(path) != 1 or set(query) - {"rp"}:
                raise InfluxError("the InfluxDB 1.x URL %s must name one database and at most "
                                  "?rp=POLICY: influx://[USER@]HOST[:PORT]/DATABASE" % url)
            self.database, self.rp = path[0], query.get("rp")
            params = {"db": self.database, "precision": "s"}
            if self.rp:
                params["rp"] = self.rp
            self.path = "/write?" + urllib.parse.urlencode(params)
        else:
            if len(path) != 2 or query or self.user:
                raise InfluxError("the InfluxDB 2.x/3.x URL %s must be influxv2://HOST[:PORT]/"
                                  "ORG/BUCKET (the token comes from a file)" % url)
            self.org, self.bucket = path
            self.path = "/api/v2/write?" + urllib.parse.urlencode(
                {"org": self.org, "bucket": self.bucket, "precision": "s"})

    def __str__(self):
        where = "%s://%s:%d" % ("https" if self.tls else "http", self.host, self.port)
        if self.version == 1:
            return "%s (database %s%s)" % (where, self.database,
                                          ", retention policy %s" % self.rp if self.rp else "")
        return "%s (org %s, bucket %s)" % (where, self.org, self.bucket)

    def key(self, schema):
        """What a cursor is kept under: the place the points go and their shape, no user."""
        return "%s %s %s" % ("https" if self.tls else "http",
                             "%s:%d%s" % (self.host, self.port, self.path), schema.name)

    def needs_secret(self):
        return self.version == 2 or self.user is not None


def _redact(url):
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(":" + parts.password + "@", ":***@", 1)


def read_secret(path, what="password"):
    """The first line of a secret file; InfluxError naming the file, never its content."""
    try:
        with open(path, "rb") as f:
            secret = f.readline().rstrip(b"\r\n").decode()
    except OSError as e:
        raise InfluxError("cannot read the InfluxDB %s file %s (%s)" % (what, path, e.strerror)) \
            from None
    except UnicodeDecodeError:
        raise InfluxError("the InfluxDB %s file %s is not UTF-8 text" % (what, path)) from None
    if not secret:
        raise InfluxError("the InfluxDB %s file %s is empty" % (what, path))
    return secret


# -- the write -------------------------------------------------------------------------------

class Writer:
    """POSTs line protocol to one target over one kept-alive connection."""

    def __init__(self, target, secret=None, timeout_s=TIMEOUT_S):
        if target.needs_secret() and secret is None:
            raise InfluxError("InfluxDB at %s needs a %s: give --influx-password-file FILE"
                              % (target, "token" if target.version == 2 else "password"))
        self.target = target
        self.timeout_s = timeout_s
        self.headers = {"Content-Type": "text/plain; charset=utf-8"}
        if target.version == 2:
            self.headers["Authorization"] = "Token " + secret
        elif target.user is not None:
            self.headers["Authorization"] = "Basic " + base64.b64encode(
                ("%s:%s" % (target.user, secret)).encode()).decode()
        self._conn = None

    def _connection(self):
        if self._conn is None:
            t = self.target
            if t.tls:
                self._conn = http.client.HTTPSConnection(t.host, t.port, timeout=self.timeout_s,
                                                         context=ssl.create_default_context())
            else:
                self._conn = http.client.HTTPConnection(t.host, t.port, timeout=self.timeout_s)
        return self._conn

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def write(self, lines):
        """Send lines (a list of str); WriteFailed says in one sentence why not."""
        body = "\n".join(lines).encode()
        where = str(self.target)
        try:
            conn = self._connection()
            conn.request("POST", self.target.path, body, self.headers)
            resp = conn.getresponse()
            text = resp.read(2000).decode("utf-8", "replace")
            if resp.will_close:
                self.close()
        except TimeoutError:
            self.close()
            raise WriteFailed("influx-timeout", "InfluxDB at %s did not answer within %.0f s"
                              % (where, self.timeout_s)) from None
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise WriteFailed("influx-unreachable", "cannot write to InfluxDB at %s (%s)"
                              % (where, getattr(e, "strerror", None) or e or type(e).__name__)) \
                from None
        if resp.status in (200, 204):
            return
        raise _refusal(resp.status, resp.reason, text, where, self.target)


def _refusal(status, reason, text, where, target):
    said = " ".join(text.split())[:200]
    if status in (401, 403):
        return WriteFailed("influx-http-%d" % status, "InfluxDB at %s answered %d %s: check the "
                           "user%s and the password file" % (where, status, reason,
                                                             " (%s)" % target.user
                                                             if target.user else ""))
    if status == 404:
        return WriteFailed("influx-http-404", "InfluxDB at %s answered 404 (%s): create the %s "
                           "first" % (where, said or reason,
                                      "database (CREATE DATABASE %s)" % target.database
                                      if target.version == 1 else "bucket"))
    if status in (400, 413, 422):  # the same points would be refused again
        return WriteFailed("influx-refused", "InfluxDB at %s refused points: %d %s" % (
            where, status, said or reason), retry=False)
    return WriteFailed("influx-http-%d" % status, "InfluxDB at %s answered %d %s%s" % (
        where, status, reason, ": " + said if said else ""))


def parse_names(texts):
    """--influx-name flags ("NODE=MEASUREMENT" each) as {node: measurement}; InfluxError."""
    table = {}
    for text in texts:
        node, sep, name = text.partition("=")
        if not sep or not node or not name:
            raise InfluxError("--influx-name %r is not NODE=MEASUREMENT" % text)
        table[node] = name
    return table


def configure(url, schema="default", secret_file=None, names=(), timeout_s=TIMEOUT_S):
    """(Writer, Schema) from what a user gives (flags, or the config file's [influx]):
    names as "NODE=MEASUREMENT" texts or a {node: measurement} table. InfluxError in words."""
    target = Target(url)
    table = dict(names) if isinstance(names, dict) else parse_names(names)
    if secret_file is not None and not target.needs_secret():
        raise InfluxError("an InfluxDB password file without a user: give influx://USER@HOST"
                          "[:PORT]/DATABASE")
    secret = read_secret(secret_file, "token" if target.version == 2 else "password") \
        if secret_file else None
    return Writer(target, secret, timeout_s), Schema(schema, table)
