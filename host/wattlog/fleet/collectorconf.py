"""collectorconf.py - the collector's wattlog.toml as `wattlog provision` writes it (once: an
edited config is never overwritten), and the broker URL a client on this machine gives.
Relative file names, so systemd can hand the files over (service.py); no token or password is
ever a default.
"""

import os
import zoneinfo

from wattlog.fleet.logins import COLLECTOR, OPERATOR, password_file

TOKEN_FILE = "http.token"
CONFIG_FILE = "wattlog.toml"


def _local_zone():
    """This machine's IANA zone name (from /etc/localtime), or UTC."""
    name = os.path.realpath("/etc/localtime").partition("/zoneinfo/")[2]
    try:
        zoneinfo.ZoneInfo(name)
        return name
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return "UTC"


def collector_config(path, url, tls, base="wattlog", top="", tables=""):
    """wattlog.toml for a collector that logs in as wattlog-collector (settings.py); `top`:
    more settings (a cluster's store), `tables`: more tables at the end (its [cluster])."""
    return """# wattlog.toml - the collector's settings: wattlog collect --config %(path)s
# Written once by `wattlog provision`; yours to edit, it is never rewritten. Every key may be
# left out (settings.py lists them and their defaults); a command-line flag wins over it.
# Relative file names are read from this file's directory. After changing which files it
# names, run `sudo wattlog install-service --config %(path)s` again.
broker = "%(url)s"
password_file = "%(password)s"
%(ca)sbase_topic = "%(base)s"
data = "/var/lib/wattlog"
%(top)scommit_interval = 300        # seconds readings may wait in memory before they are written
summary_interval = "6h"      # how often the query summaries are written
timezone = "%(zone)s"      # whose days, weeks and months the energy figures count

[http]
listen = "127.0.0.1:8080"    # "0.0.0.0:8080" serves the LAN
read_open = true             # reading needs no token (think twice on the LAN); actions do
token_file = "%(token)s"
operator_password_file = "%(operator)s"  # relay switching logs in as wattlog-operator

# [tariff]                   # for the cost of the energy figures
# currency = "EUR"
# price = 0.30               # per kWh; or day and night prices:
# day_price = 0.32
# night_price = 0.22
# night_start = "22:00"
# night_end = "06:00"
""" % {"path": os.path.abspath(path), "url": url,
       "password": os.path.basename(password_file("", COLLECTOR)),
       "ca": 'ca = "ca.crt"\n' if tls else "", "base": base, "zone": _local_zone(),
       "token": TOKEN_FILE, "operator": os.path.basename(password_file("", OPERATOR)),
       "top": top} + tables


def collector_host(host, listen, tls):
    """The broker's address as a client on this machine uses it: the listen address when the
    broker listens on one address only (without TLS: a certificate names broker_host)."""
    if listen and not tls and listen not in ("0.0.0.0", "::"):
        return listen
    return host


def broker_url(user, host, port, tls=False):
    """The URL a client gives as --broker; the password goes in a file, never in here."""
    return "%s://%s@%s:%d" % ("mqtts" if tls else "mqtt", user, host, port)
