"""page.py - the dashboard's files, served by the collector's HTTP side (api.py adds these
routes to its aiohttp app): / is index.html, /web/<file> the page's own scripts and style,
/web/lib/<file> the chart library (uPlot).

Design notes:
- Everything comes from the Pi: no CDN, no font service, nothing fetched at run time. The
  page's files hold no data, so they are served without the token even when reading needs
  it (is_page); the page then asks for the token and sends it as a header.
- uPlot (the npm package `uplot`, pinned in package-lock.json) is found in the first of:
  $WATTLOG_UPLOT_DIR; lib/ beside this file (a wheel carries it there: setup.py copies it at
  build time, and a build without it fails); node_modules/uplot/dist of the checkout this file
  lies in (tools/setup's `npm ci`, for an editable install); /usr/local/share/wattlog/uplot;
  /usr/share/wattlog/uplot (a distribution's package). Without them the page still shows the
  overview, health and the energy table, and says in a sentence that the charts need it.
- Only the named files are served (no directory listing, no paths from the request), gzip
  when the browser takes it, with a Content-Security-Policy that lets the page run nothing
  but its own files: markup that slipped into the page could not run a script.
"""

import os

from aiohttp import web

WEB_DIR = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(WEB_DIR))))
LIB_DIRS = (os.path.join(WEB_DIR, "lib"),
            os.path.join(CHECKOUT, "node_modules", "uplot", "dist"),
            "/usr/local/share/wattlog/uplot", "/usr/share/wattlog/uplot")
OWN = dict({name + ".js": "text/javascript" for name in
             ("app", "common", "overview", "history", "energy", "runs", "health")},
           **{"style.css": "text/css"})
LIB = {"uPlot.iife.min.js": "text/javascript", "uPlot.min.css": "text/css"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def lib_dir():
    """The directory holding uPlot's files, or None."""
    given = os.environ.get("WATTLOG_UPLOT_DIR")
    for d in ((given,) if given else ()) + LIB_DIRS:
        if os.path.isfile(os.path.join(d, "uPlot.iife.min.js")):
            return d
    return None


def is_page(request):
    return request.path == "/" or request.path.startswith("/web/")


def _file(request, path, kind, cache):
    try:
        with open(path, "rb") as f:
            body = f.read()
    except OSError:
        return web.json_response({"error": "the dashboard file %s is missing from this install"
                                  % os.path.basename(path)}, status=404)
    resp = web.Response(body=body, content_type=kind, charset="utf-8", headers={
        "Cache-Control": cache, "Content-Security-Policy": CSP,
        "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"})
    if "gzip" in request.headers.get("Accept-Encoding", ""):
        resp.enable_compression(web.ContentCoding.gzip)
    return resp


async def _index(request):
    return _file(request, os.path.join(WEB_DIR, "index.html"), "text/html", "no-cache")


async def _own(request):
    name = request.match_info["name"]
    if name not in OWN:
        return web.json_response({"error": "the dashboard has no file %r" % name[:40]},
                                 status=404)
    return _file(request, os.path.join(WEB_DIR, name), OWN[name], "no-cache")


async def _lib(request):
    name = request.match_info["name"]
    where = lib_dir()
    if name not in LIB or where is None:
        return web.json_response({"error": "the chart library (uPlot) is not installed here: "
                                  "reinstall wattlog from a build that carries it (pip "
                                  "install . in its clone), or run tools/setup in a clone"},
                                 status=404)
    return _file(request, os.path.join(where, name), LIB[name], "max-age=86400")


def add_routes(app):
    app.router.add_get("/", _index)
    app.router.add_get("/web/lib/{name}", _lib)
    app.router.add_get("/web/{name}", _own)
