"""plugs.py - the HTTP side's plugs and collector: plug health (/api/plugs, /api/plugs/<node>),
the collector's health (/api/health) and Prometheus metrics (/metrics), the live stream
(/api/stream, Server-Sent Events) and the actions (relay, commands) that need the token.

A plug's health joins two sources, each plain data: what the store holds of it
(store.plug(node): boots, acked seq, gaps, losses) and what it publishes, as heard
(plugwatch.PlugWatch: status, state, firmware, log lines, meter faults), with its runs' state
and the days its duty cycle was above its normal (runs/report.py health). Actions go through
the broker as wattlog-operator, so the broker's ACL still decides, and are answered when the
plug's own state or log says it happened (or 504 after ACTION_TIMEOUT_S).
"""

import asyncio
import functools
import json
import secrets

from aiohttp import web

from wattlog.fleet.provision import OPERATOR
from wattlog.fleet.session import Session, SessionError
from wattlog.mqtt import with_user
from wattlog.serve import plugwatch
from wattlog.serve.params import ApiError, json_body, node_id, shown

ACTION_TIMEOUT_S = 10.0
COMMANDS = ("info", "interval", "calibration", "reboot")
RELAY = ("ON", "OFF", "TOGGLE")
KEEPALIVE_S = 15.0
STATUS = {"unreachable": 502, "login": 502, "timeout": 504, "publish": 403}  # SessionError's


def add_routes(router, api):
    for path, handler in (("/api/plugs", plugs), ("/api/plugs/{node}", plug),
                          ("/api/health", health), ("/api/stream", stream),
                          ("/metrics", prometheus)):
        router.add_get(path, functools.partial(handler, api))
    router.add_post("/api/plugs/{node}/relay", functools.partial(relay, api))
    router.add_post("/api/plugs/{node}/cmd", functools.partial(command, api))


def plug_health(node, stored, seen):
    """One plug's health: the store's record of it (or None) and what it publishes (or None)."""
    out = {"node": node, "online": None, "status": None, "last_seen": None, "boot": None,
           "boots": None, "acked_seq": None, "gaps": None, "lost": None, "ring_drops": None,
           "meter_faults": None, "firmware": None, "update": None, "state": None,
           "broadlink": None, "spill": None}
    if stored is not None:
        out.update({k: stored[k] for k in ("last_seen", "boots", "acked_seq", "gaps", "lost",
                                           "ring_drops")},
                   boot=None if stored["boot"] is None else "%08x" % stored["boot"])
    if seen is not None:
        info = seen["info"] or {}
        out.update(broadlink=info.get("broadlink"),  # the SP3S protocol's mode, if asked
                   spill=plugwatch.spill(info),  # what it holds on its flash
                   status=seen["status"], online=seen["status"] == "online",
                   firmware=seen["firmware"], update=seen["update"],
                   state=seen["state"],
                   state_heard=None if seen.get("heard") is None else int(seen["heard"]),
                   meter_faults={"reported": seen["faults"], "last": seen["fault_note"],
                                 "counters": info.get("meter_faults")},
                   log=[{"time": t, "text": text} for t, text in seen["log"]])
    return out


async def plugs(api, request):
    seen = api.watch.snapshot()
    stored = api.store.nodes()
    return web.json_response({"plugs": [dict(plug_health(n, stored.get(n), seen.get(n)),
                                             runs=await _runs(api, n))
                                        for n in sorted(set(seen) | set(stored))]})


async def _runs(api, node):
    """The plug's run state and its days above its normal duty cycle (runs/report.py), or
    None when runs are off."""
    if api.runs is None:
        return None
    from wattlog.runs.report import health
    return await api.loop.run_in_executor(None, health, api.runs, api.store, api.timezone,
                                          node)


async def plug(api, request):
    node = node_id(request)
    seen = api.watch.snapshot(node)
    stored = api.store.plug(node)
    if seen is None and stored is None:
        raise ApiError(404, "no plug %s has reported here; GET /api/plugs lists them"
                       % shown(node))
    return web.json_response(dict(plug_health(node, stored, seen), runs=await _runs(api, node)))


async def health(api, request):
    st = api.store.status()
    out = {k: st.get(k) for k in ("data_dir", "ready", "last_commit", "commits",
                                  "pending_points", "pending_age_s", "readings",
                                  "lost_readings", "refused")}
    out.update(started=int(api.started), uptime_s=int(api.now() - api.started))
    out.update({k: v for k, v in st.items() if k.startswith("disk_")})
    out.update(api.writes.report())
    out.update(api.links())
    return web.json_response(out)


async def prometheus(api, request):
    body, content_type = api.metrics.exposition(request.headers.get("Accept"))
    return web.Response(body=body, headers={"Content-Type": content_type})


def event(kind, data):
    return ("event: %s\ndata: %s\n\n" % (kind, json.dumps(data))).encode()


async def stream(api, request):
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Cache-Control": "no-cache"})
    await resp.prepare(request)
    q = api.subscribe()
    try:
        await resp.write(event("links", api.links()))
        for node, seen in sorted(api.watch.snapshot().items()):
            if seen["state"] is not None:
                await resp.write(event("state", dict(seen["state"], node=node,
                                                     online=seen["status"] == "online")))
        while True:
            try:
                got = await asyncio.wait_for(q.get(), KEEPALIVE_S)
            except asyncio.TimeoutError:
                await resp.write(b": keep-alive\n\n")
                continue
            if got is None or q.overflowed:
                break  # stopping, or a client too slow to keep up: it may reconnect
            kind, node, data = got
            if kind in ("state", "status"):
                await resp.write(event(kind, dict(data, node=node)))
            elif kind == "links":
                await resp.write(event(kind, api.links()))
    except ConnectionResetError:
        pass
    finally:
        api.unsubscribe(q)
    return resp


# -- actions ----------------------------------------------------------------------------------

def _online(api, node):
    seen = api.watch.snapshot(node)
    if seen is None:
        raise ApiError(404, "no plug %s has reported here" % shown(node))
    if seen["status"] != "online":
        raise ApiError(409, "%s is offline; it cannot be told anything now" % node)
    return seen


async def _act(api, node, topic, payload, done):
    """Publish as the operator, then wait for the event done(kind, data) accepts."""
    if api.operator_password is None:
        raise ApiError(503, "this collector has no operator login, so it cannot switch or "
                       "command plugs: give it wattlog-operator's password file "
                       "(--operator-password-file; `wattlog provision` writes it)")
    q = api.subscribe()
    try:
        async with api.acting:
            await api.loop.run_in_executor(None, _publish, api, topic, payload)
        deadline = api.loop.time() + ACTION_TIMEOUT_S
        while True:
            try:
                got = await asyncio.wait_for(q.get(), max(deadline - api.loop.time(), 0))
            except asyncio.TimeoutError:
                raise ApiError(504, "%s did not answer within %.0f s (if it never does: "
                               "the collector's broker user must read %s/+/state and "
                               "log; `wattlog provision` again updates the ACL)"
                               % (node, ACTION_TIMEOUT_S, api.base))
            if got is None:
                raise ApiError(503, "the collector is stopping")
            if got[1] == node and done(got[0], got[2]):
                return got[2]
    finally:
        api.unsubscribe(q)


def _publish(api, topic, payload):
    """One QoS 1 publish as wattlog-operator, in its session (fleet/session.py: a refusal by
    the ACL comes back in words); runs in a worker thread."""
    url = with_user(api.broker_url, OPERATOR)
    try:
        with Session(url, "wattlog-http", api.operator_password, api.ca,
                     ACTION_TIMEOUT_S) as session:
            session.publish(topic, payload)
    except SessionError as e:
        raise ApiError(STATUS[e.kind], str(e)) from None


async def relay(api, request):
    api.authorize(request)
    node = node_id(request)
    want = str((await json_body(request)).get("relay", "")).upper()
    if want not in RELAY:
        raise ApiError(400, 'give {"relay": "ON"}, "OFF" or "TOGGLE"')
    before = (_online(api, node)["state"] or {}).get("relay")
    expect = want if want != "TOGGLE" else ("OFF" if before == "ON" else "ON")
    state = await _act(api, node, "%s/%s/relay/set" % (api.base, node), want,
                       lambda kind, d: kind == "state" and d.get("relay") == expect)
    return web.json_response({"node": node, "relay": expect, "state": state})


async def command(api, request):
    api.authorize(request)
    node = node_id(request)
    body = await json_body(request)
    if body.get("cmd") not in COMMANDS:
        raise ApiError(400, "cmd must be one of %s" % ", ".join(COMMANDS))
    _online(api, node)
    body["id"] = secrets.token_hex(4)
    mark = "(id %s)" % body["id"]
    said = await _act(api, node, "%s/%s/cmd" % (api.base, node), json.dumps(body),
                      lambda kind, d: kind == "log" and d["text"].endswith(mark))
    return web.json_response({"node": node, "answer": said["text"][:-len(mark)].rstrip()})
