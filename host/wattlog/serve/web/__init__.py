"""wattlog.serve.web - the dashboard: its page (index.html, app.js, style.css) and page.py, which
adds the routes that serve it to the collector's HTTP side (api.py)."""
