"""params.py - the HTTP side's parameters, checked at the edge into typed values, and its one
error shape: ApiError(status, sentence) becomes {"error": "<sentence>"} with that status
(app.py's middleware). Names from requests (feeds, nodes) are matched against their grammar
and then looked up in the store; only the store's ids ever reach a file.
"""

import argparse
import re
import time

from wattlog.store.feeds import NODE_ID, UNITS
from wattlog.store.phpfina import FeedError
from wattlog.times import parse_time

MAX_PARAM = 64        # characters of any query parameter
MAX_AHEAD_S = 86400   # an end further ahead than this is a mistake
DAY_S = 86400


class ApiError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def shown(text, limit=40):
    """A request's value as it may be quoted back: short, printable."""
    text = text if len(text) <= limit else text[:limit] + "..."
    return repr(text)


def param(request, key, default=None, text=None):
    """Parameter `key` (or the given text, one of its values), at most MAX_PARAM long."""
    text = request.query.get(key) if text is None else text
    if text is None or text == "":
        return default
    if len(text) > MAX_PARAM:
        raise ApiError(400, "%s is too long (%d characters; at most %d)"
                       % (key, len(text), MAX_PARAM))
    return text


def when(request, key, default, tz):
    """A time parameter (times.py's forms, a zone-less one in `tz`) as unix seconds."""
    text = param(request, key)
    if text is None:
        return default
    try:
        t = parse_time(text, tz=tz)
    except argparse.ArgumentTypeError as e:  # times.py's sentence
        raise ApiError(400, "%s: %s" % (key, e)) from None
    except (ValueError, OverflowError):  # a date past what datetime can hold
        t = None
    if t is None or not 0 <= t < 1 << 32:
        raise ApiError(400, "%s %s is not a time from 1970 to 2106: use unix seconds, "
                       "now-24h or 2026-11-21T08:00" % (key, shown(text)))
    return t


def whole(request, key, default, lo, hi):
    """A whole-number parameter in [lo, hi]."""
    text = param(request, key)
    if text is None:
        return default
    if not re.fullmatch(r"\d{1,9}", text) or not lo <= int(text) <= hi:
        raise ApiError(400, "%s must be a whole number from %d to %d, not %s"
                       % (key, lo, hi, shown(text)))
    return int(text)


def span(request, tz):
    """(start, end) of start= and end= (default: the last 24 h), end after start and at most
    a day ahead."""
    now = int(time.time())
    end = when(request, "end", now, tz)
    start = when(request, "start", end - DAY_S, tz)
    if end <= start:
        raise ApiError(400, "start (%d) must come before end (%d)" % (start, end))
    if end > now + MAX_AHEAD_S:
        raise ApiError(400, "end (%d) lies more than a day ahead of now" % end)
    return start, end


def feed(request, store, given=None):
    """(entry, grid) of feed= (NODE/CHANNEL or an id; or `given`, one of several feed=
    values), looked up in the store."""
    name = param(request, "feed", text=given)
    if name is None:
        raise ApiError(400, "give feed=NODE/CHANNEL (e.g. plug-1/power) or a feed id; "
                       "GET /api/feeds lists them")
    node, slash, channel = name.partition("/")
    if not (re.fullmatch(r"[0-9]{1,9}", name) or (slash and NODE_ID.match(node)
                                                    and channel in UNITS)):
        raise ApiError(400, "feed %s is not NODE/CHANNEL (a node id is 1-32 of a-z, 0-9, "
                       "_ and -; a channel one of %s) nor a feed id"
                       % (shown(name), ", ".join(UNITS)))
    entry = store.lookup(name)
    if entry is None or entry.get("quarantined"):
        raise ApiError(404, "there is no feed %s%s; GET /api/feeds lists them" % (
            shown(name), " (it is quarantined)" if entry else ""))
    try:
        return entry, store.feed(entry)
    except FeedError as e:
        raise ApiError(503, "feed %d cannot be read now (%s)" % (entry["id"], e.reason))


def node_id(request):
    """The <node> of the path, checked against the node id grammar."""
    node = request.match_info["node"]
    if not NODE_ID.match(node):
        raise ApiError(400, "%s is not a node id: 1-32 of a-z, 0-9, _ and -" % shown(node))
    return node


async def json_body(request):
    """The request's body: a JSON object."""
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    return body
