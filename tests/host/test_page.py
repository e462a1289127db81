"""test_page.py - the dashboard's files as the collector serves them (web/page.py through
api.py): a real aiohttp server on a free loopback port (test_api.py's Served), asked with
urllib. The page in a real browser is tests/e2e/test_dashboard.py."""

import gzip
import os
import re
import urllib.error
import urllib.request

import pytest

from served import Served
from wattlog.serve.web import page


def get(served, path, headers=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (served.server.port, path),
                                 headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


@pytest.fixture
def closed(tmp_path):
    s = Served(tmp_path, read_open=False)
    yield s
    s.close()


def test_the_page_loads_without_the_token_when_reading_needs_it(closed):
    """With read_open = false the data needs the token, but the page (which holds none) must
    load, or a browser could never ask for the token."""
    status, headers, body = get(closed, "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b'src="/web/app.js"' in body and b"https://" not in body  # nothing from outside
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert "unsafe-inline" not in headers["Content-Security-Policy"]
    imported = set()
    for name in os.listdir(page.WEB_DIR):
        if name.endswith(".js"):
            with open(os.path.join(page.WEB_DIR, name)) as f:
                imported |= set(re.findall(r'^import .* from "\./([\w.]+)";$', f.read(), re.M))
    assert imported and imported <= set(page.OWN), imported - set(page.OWN)  # each module served
    for path in ["/web/" + name for name in page.OWN] + ["/web/lib/uPlot.iife.min.js",
                                                        "/web/lib/uPlot.min.css"]:
        status, headers, body = get(closed, path, {"Accept-Encoding": "gzip"})
        assert status == 200 and headers["Content-Encoding"] == "gzip", path
        assert len(gzip.decompress(body)) > len(body)
    assert get(closed, "/api/feeds")[0] == 401


def test_only_the_pages_own_files_are_served(closed):
    for path in ("/web/page.py", "/web/__init__.py", "/web/lib/package.json",
                 "/web/..%2fapi.py", "/web/lib/..%2f..%2fpackage.json"):
        status, headers, body = get(closed, path)
        assert status == 404 and body.startswith(b'{"error": ') and b"import" not in body, path


def test_a_missing_chart_library_is_said_in_a_sentence(closed, monkeypatch):
    monkeypatch.delenv("WATTLOG_UPLOT_DIR", raising=False)
    monkeypatch.setattr(page, "LIB_DIRS", ())
    status, headers, body = get(closed, "/web/lib/uPlot.iife.min.js")
    assert status == 404 and b"uPlot) is not installed here: reinstall wattlog from a build " \
        b"that carries it" in body
    assert get(closed, "/")[0] == 200
