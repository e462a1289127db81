"""app.py - the collector's HTTP side (aiohttp): the application, its routes, its one error
shape, the token, and the thread it runs in.
(About 310 lines: the application, its routes in one place and the thread it runs in.)

    GET  /api                      the endpoints, whether actions are on, the plugs in the
                                   order their data was first stored (the dashboard's colours)
    GET  /api/feeds, /api/series, /api/series.csv, /api/energy        series.py
    GET  /api/plugs, /api/plugs/<node>, /api/health, /api/stream, /metrics   plugs.py
    GET  /api/runs                 the appliances' runs                  runs.py
    POST /api/plugs/<node>/relay, /api/plugs/<node>/cmd   (token)      plugs.py
    /emoncms/feed/...              emoncms's feed API (emoncms.py)
    /, /web/...                    the dashboard's page and files (web/page.py)

A new route goes in the module of its resource; a handler is short: it checks its parameters
(params.py) and asks the store (its interface, store/__init__.py) or the plug watch.

Threads: the collector's one thread drives MQTT, ingest and commits; this server runs its own
asyncio loop in another (Server.start/stop), so no request can delay a commit or an ack. It
takes no lock the collector holds over file I/O: the store's reads copy what they need of the
collector's memory in one step each. What the plugs publish (status, state, firmware, log
lines) comes from plugwatch.PlugWatch, fed by the collector's MQTT thread; the links to the
broker and InfluxDB are links.Link objects their owners' threads set.

Security: every action (relay, commands) needs the token, sent as `Authorization: Bearer
<token>` (a header: a page on another site cannot send it, and no CORS header is ever given),
compared with hmac.compare_digest. There is no default token: without a token file actions
are refused with a sentence saying how to make one. Reading is open unless read_open is
False. Every bad parameter is a 4xx with {"error": "<one sentence>"}; an unexpected failure
is a 500, logged, and the server carries on.
"""

import asyncio
import hmac
import logging
import os
import threading
import time
import zoneinfo

from aiohttp import web

from wattlog.periods import EnergyError, Tariff
from wattlog.serve import emoncms, plugs, runs, series
from wattlog.serve.diskwrites import WriteMeter
from wattlog.serve.metrics import Metrics
from wattlog.serve.params import ApiError
from wattlog.serve.web import page
from wattlog.store.query import QueryError

log = logging.getLogger("wattlog")
SSE_QUEUE = 1000  # events a slow stream client may lag by before it is dropped


def read_first_line(path, what):
    """The first line of a secret file (a token, a password); ValueError naming the file,
    never its content."""
    try:
        with open(path, "rb") as f:
            text = f.readline().rstrip(b"\r\n").decode()
    except OSError as e:
        raise ValueError("cannot read the %s file %s (%s)" % (what, path, e.strerror)) from None
    except UnicodeDecodeError:
        raise ValueError("the %s file %s is not UTF-8 text" % (what, path)) from None
    if not text.strip():
        raise ValueError("the %s file %s is empty" % (what, path))
    return text.strip()


class Api:
    """What the handlers share: the store (its interface), the plug watch, the settings of
    the HTTP side, the collector's links and the live stream's queues."""

    def __init__(self, store, watch, *, broker_url=None, ca=None, read_open=True, token=None,
                 operator_password=None, timezone="UTC", tariff=None, base_topic="wattlog",
                 broker_link=None, sink=None, runs=None):
        self.store = store
        self.watch = watch
        self.read_open = read_open
        self.token = token.encode() if token else None
        self.base = base_topic
        self.broker_url, self.ca = broker_url, ca
        self.operator_password = operator_password
        try:
            self.tz = zoneinfo.ZoneInfo(timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError("timezone %r is not a time zone: use a name such as Europe/Berlin "
                             "or UTC" % timezone) from None
        self.timezone = timezone
        self.tariff = Tariff.from_settings(tariff)  # EnergyError: a ValueError
        self.writes = WriteMeter(self.tz)
        self.broker_link = broker_link  # links.Link: the collector's, None without a collector
        self.sink = sink                # the InfluxDB sink (bridges/sink.py), if it is on
        self.runs = runs                # the appliances' runs (runs/part.py), if they are on
        self.metrics = Metrics(store, watch, self.writes, sink)
        self.started = self.now()
        self.loop = None
        self.acting = None          # asyncio.Lock: one operator login at a time
        self._queues = set()        # one asyncio.Queue per open stream or waiting action
        self._sampler = None        # the task that samples write_bytes

    @staticmethod
    def now():
        return time.time()

    def app(self):
        app = web.Application(middlewares=[self._errors], client_max_size=64 * 1024)
        app.router.add_get("/api", self.index)
        series.add_routes(app.router, self)
        plugs.add_routes(app.router, self)
        runs.add_routes(app.router, self)
        emoncms.add_routes(app, self.store, timezone=self.timezone)
        page.add_routes(app)
        app.on_startup.append(self._started)
        app.on_shutdown.append(self._closing)
        return app

    async def index(self, request):
        return web.json_response({"endpoints": [
            "GET /api/feeds", "GET /api/series?feed=&start=&end=&points=",
            "GET /api/series.csv?feed=&start=&end=[&points=]",
            "GET /api/energy?by=day|week|month|year&start=&end=", "GET /api/plugs",
            "GET /api/plugs/<node>", "GET /api/health", "GET /api/stream", "GET /metrics",
            "GET /api/runs?plug=&since=&until=",
            "POST /api/plugs/<node>/relay", "POST /api/plugs/<node>/cmd"],
            "read_open": self.read_open, "actions": self.token is not None,
            "plugs": self.store.plug_order()})

    # -- the loop's life ---------------------------------------------------------------------

    async def _started(self, app):
        self.loop = asyncio.get_running_loop()
        self.acting = asyncio.Lock()
        self.watch.listen(self._from_mqtt)
        for link in self._links_watched():
            link.listen(self._from_link)
        self._sampler = asyncio.ensure_future(self._sample_writes())

    async def _closing(self, app):
        self.watch.unlisten(self._from_mqtt)
        for link in self._links_watched():
            link.unlisten(self._from_link)
        self._sampler.cancel()
        for q in list(self._queues):
            q.put_nowait(None)  # every open stream ends

    async def _sample_writes(self):
        while True:
            await asyncio.sleep(self.writes.next_sample_s())
            self.writes.sample()

    # -- the collector's links and the events the stream and the actions wait for ------------

    def _links_watched(self):
        return [link for link in (self.broker_link, self.sink and self.sink.link) if link]

    def links(self):
        """The collector's links as /api/health and the stream give them: "broker" (None
        without a collector), "influx" (None without a sink: with its lag and points sent)."""
        influx = None
        if self.sink is not None:
            influx = dict(self.sink.link.status(), behind_points=self.sink.behind,
                          sent_points=self.sink.sent)
        return {"broker": self.broker_link.status() if self.broker_link else None,
                "influx": influx}

    def _from_link(self, status):
        """Called in the thread that owns the link: hand the change to this loop."""
        self._hand_over(("links", None, None))

    def _from_mqtt(self, kind, node, data):
        """Called in the collector's MQTT thread: hand the event to this loop, nothing more."""
        self._hand_over((kind, node, data))

    def _hand_over(self, event):
        try:
            self.loop.call_soon_threadsafe(self._fan_out, event)
        except RuntimeError:
            pass  # the loop has closed: the server is stopping

    def _fan_out(self, event):
        for q in list(self._queues):
            try:
                q.put_nowait(event)
            except asyncio.QueueFull:
                q.overflowed = True

    def subscribe(self):
        """A queue of (kind, node, data) events: the plugs' messages and link changes."""
        q = asyncio.Queue(SSE_QUEUE)
        q.overflowed = False
        self._queues.add(q)
        return q

    def unsubscribe(self, q):
        self._queues.discard(q)

    # -- errors and the token ----------------------------------------------------------------

    @web.middleware
    async def _errors(self, request, handler):
        try:
            if not self.read_open and request.method == "GET" and not page.is_page(request):
                self.authorize(request)  # the page's files hold no data: it asks for the token
            return await handler(request)
        except ApiError as e:
            headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else None
            return web.json_response({"error": str(e)}, status=e.status, headers=headers)
        except (QueryError, EnergyError) as e:  # they say it in words
            return web.json_response({"error": str(e)}, status=400)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            what = {404: "there is no such endpoint; GET /api lists them",
                    405: "this endpoint does not take %s" % request.method,
                    413: "the request body is too large"}.get(e.status, e.reason)
            return web.json_response({"error": what}, status=e.status)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except OSError as e:  # a file that went away or cannot be read just now
            return web.json_response({"error": "cannot read %s now (%s)" % (
                os.path.basename(e.filename or "a file"), e.strerror or e)}, status=503)
        except Exception:  # one request failed; the server and the collector carry on
            log.exception("HTTP %s %s failed", request.method, request.path)
            return web.json_response({"error": "the server failed on this request; the "
                                      "collector's log says why"}, status=500)

    def authorize(self, request):
        if self.token is None:
            raise ApiError(403, "no HTTP token is set, so this is refused: `wattlog provision` "
                           "makes one (http.token); give it to the collector with "
                           "--http-token-file or token_file in the [http] settings")
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise ApiError(401, "this needs the token: send the header "
                           "`Authorization: Bearer <token>`")
        if not hmac.compare_digest(given.strip().encode("utf-8", "replace"), self.token):
            raise ApiError(403, "the token is wrong")


# -- the thread -------------------------------------------------------------------------------

def parse_listen(text):
    """"HOST:PORT", "[v6]:PORT" or ":PORT" (127.0.0.1) -> (host, port); ValueError in words."""
    host, colon, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("listen %r is not HOST:PORT (e.g. 127.0.0.1:8080)" % text)
    return host, int(port)


class Server:
    """The API on its own thread and event loop. start(on_failure) returns True once it
    listens (False after saying why it cannot); stop() ends the streams and the thread.
    on_failure() is called if the thread ever dies, so the collector stops loudly rather than
    serve nothing quietly."""

    def __init__(self, api, listen):
        self.api = api
        self.host, self.port = parse_listen(listen)
        self.on_failure = None
        self._thread = None
        self._loop = None
        self._ready = threading.Event()
        self._error = None

    def start(self, on_failure=None):
        self.on_failure = on_failure
        self._thread = threading.Thread(target=self._run, name="wattlog-http", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            self._error = "the HTTP API did not start within 30 s"
        if self._error is not None:
            log.error("%s", self._error)
            return False
        return True

    def _run(self):
        loop = self._loop = asyncio.new_event_loop()
        runner = web.AppRunner(self.api.app(), access_log=None, shutdown_timeout=2.0)
        try:
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, self.host, self.port)
            loop.run_until_complete(site.start())
            self.port = runner.addresses[0][1]
        except OSError as e:
            self._error = "the HTTP API cannot listen on %s:%d (%s)" % (
                self.host, self.port, e.strerror or e)
            self._ready.set()
            loop.run_until_complete(runner.cleanup())
            loop.close()
            return
        log.info("HTTP API on http://%s:%d/api (reading %s, actions %s)", self.host, self.port,
                 "open" if self.api.read_open else "with the token",
                 "with the token" if self.api.token else "refused: no token file")
        self._ready.set()
        try:
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
        except Exception:
            log.exception("the HTTP API failed")
            if self.on_failure:
                self.on_failure()
        finally:
            loop.close()

    def stop(self):
        if self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(15)
