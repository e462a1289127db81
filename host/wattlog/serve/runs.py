"""runs.py - the HTTP side's appliances' runs: GET /api/runs[?plug=&since=&until=], the answer
runs/report.py makes (what `wattlog runs` prints and the dashboard's Runs view draws): per
plug what was learned, its state, its finished runs with their cells, runs per week, and a
cycling appliance's duty cycle per day with the days above its normal flagged.
"""

import functools

from aiohttp import web

from wattlog.runs.report import report
from wattlog.serve.params import ApiError, param, shown, when
from wattlog.store.feeds import NODE_ID


def add_routes(router, api):
    router.add_get("/api/runs", functools.partial(runs, api))


async def runs(api, request):
    if api.runs is None:
        raise ApiError(404, "runs are off in this collector: its config says [runs] enabled = "
                       "false, or it is a cluster's collector, which finds no runs yet")
    node = param(request, "plug")
    if node is not None and (not NODE_ID.match(node) or node not in api.runs.nodes()):
        raise ApiError(404, "no runs of a plug %s here; GET /api/runs lists the plugs"
                       % shown(node))
    since = when(request, "since", None, api.tz)
    until = when(request, "until", None, api.tz)
    if since is not None and until is not None and until <= since:
        raise ApiError(400, "since (%d) must come before until (%d)" % (since, until))
    call = functools.partial(report, api.runs, api.store, api.timezone, since, until,
                             node=node)
    return web.json_response(await api.loop.run_in_executor(None, call))
