"""data.py - the verbs that read or mend a data directory: feeds, nodes, export, energy and runs
read it through the storage interface (store/), repair and rebuild mend the PHPFina engine's
own files (feeds.json from the feeds' sidecars; the query summaries from the feeds) and the
runs derived from them.
(About 370 lines: one function per verb that reads or mends a data directory, each short.)
"""

import argparse
import json
import os
import sys
import time

import numpy as np

from wattlog.cli.common import (CliError, Progress, UsageError, command_settings, data_dir,
                                data_path,
                                print_table, reader)
from wattlog.store.commit import Committer, StartError
from wattlog.store.feeds import Registry, RegistryError
from wattlog.store.phpfina import FeedError
from wattlog.times import iso, storable_time, zone


def cmd_feeds(args):
    s = command_settings(args, ("store_password_file",))
    data = s.store or s.data_dir
    store = reader(s)
    rows = [("id", "node", "channel", "unit", "interval", "start", "end", "points")]
    for e in store.entries(quarantined=True):
        head = (str(e["id"]), e["node"], e["channel"], e["unit"], "%ds" % e["interval"])
        if e.get("quarantined"):
            rows.append(head + ("quarantined:", e["quarantined"], ""))
            continue
        try:
            feed = store.feed(e)
            n = feed.npoints()
            rows.append(head[:4] + ("%ds" % feed.interval, iso(feed.start),
                                    iso(feed.time(n - 1)) if n else "-", str(n)))
        except FeedError as err:
            rows.append(head + ("unreadable:", err.reason, ""))
    if len(rows) == 1:
        print("no feeds yet in %s" % data)
        return
    print_table(rows)


def cmd_nodes(args):
    """Per node, from the store: what is on disk and acknowledged, and what was lost; from
    firmware.json: the version it runs and its last over-the-air update's result; from the
    running collector's /api/plugs, when it serves HTTP: what each plug holds on its flash
    (its spill, as it said when it last connected)."""
    from wattlog.fleet import firmware
    s = command_settings(args, ("store_password_file",))
    data = s.store or s.data_dir
    stored = reader(s).nodes()
    plugs = ask_collector(s, s.data_dir, "/api/plugs", [],
                          "what the plugs hold on their flash is not shown")
    spills = {p.get("node"): p.get("spill") for p in (plugs or {}).get("plugs", [])}
    try:
        versions = firmware.read(s.data_dir) if os.path.isdir(s.data_dir) else {}
    except ValueError as e:
        raise CliError("%s; the collector makes it again from what the plugs announce"
                       % e) from None
    found = []
    for node in sorted(set(stored) | set(versions)):
        st = stored.get(node) or {"boot": None, "boots": 0, "acked_seq": None, "gaps": 0,
                                  "lost": 0, "ring_drops": 0, "last_seen": None}
        fw = versions.get(node) or {"firmware": None, "update": None}
        found.append(dict({k: st[k] for k in ("last_seen", "boot", "boots", "acked_seq", "gaps",
                                              "lost", "ring_drops")},
                          node=node, version=fw["firmware"], update=fw["update"],
                          spill=spills.get(node)))
    if args.json:  # the table's columns, for programs: unix seconds, whole numbers
        print(json.dumps(found))
        return
    if not found:
        print("no node has been acknowledged yet in %s" % data)
        return
    rows = [("node", "last seen", "boot", "boots", "acked seq", "gaps", "lost readings",
             "ring drops", "on flash", "version", "update")]
    for n in found:
        sp = n["spill"]
        rows.append((n["node"], iso(n["last_seen"]) if n["last_seen"] else "-",
                     "-" if n["boot"] is None else "%08x" % n["boot"], str(n["boots"]),
                     "-" if n["acked_seq"] is None else str(n["acked_seq"]), str(n["gaps"]),
                     str(n["lost"]), str(n["ring_drops"]),
                     "-" if sp is None else "%d" % sp["readings"] if not sp["oldest_slot"] else
                     "%d since %s" % (sp["readings"], iso(sp["oldest_slot"])),
                     n["version"] or "-", firmware.describe(n["update"])))
    print_table(rows)


def cmd_repair(args):
    """Rebuild a damaged feeds.json from the feeds' sidecar files (feeds.py)."""
    from wattlog.store import datalock
    from wattlog.store.feeds import rebuild
    data = data_path(args)
    try:
        lock = datalock.lock(data, "repair")
    except datalock.Locked as e:
        raise CliError(str(e)) from None
    try:
        try:
            Registry(data)
            if not args.force:
                print("%s is sound: nothing to repair (--force rebuilds it anyway)"
                      % os.path.join(data, "feeds.json"))
                return
        except RegistryError as e:
            print("%s" % e)
        registry, notes = rebuild(data)
        for note in notes:
            print("note: " + note)
        if not registry.entries:
            raise CliError("no feed sidecars (phpfina/<id>.json) in %s: nothing to rebuild "
                           "from; restore feeds.json from a backup" % data)
        old = registry.path
        if os.path.exists(old):
            kept = "%s.damaged-%s" % (old, time.strftime("%Y%m%dT%H%M%S", time.gmtime()))
            os.replace(old, kept)
            print("kept the old registry as %s" % kept)
        registry.save()
        active = registry.active()
        print("rebuilt %s: %d feeds of %d nodes (%d quarantined)"
              % (old, len(active), len({e["node"] for e in active}),
                 len(registry.entries) - len(active)))
    finally:
        os.close(lock)


def cmd_rebuild(args):
    """Recompute every feed's query summaries from its .dat (rollup.py), then every plug's
    runs from its first slot (runs/rebuild.py), with progress."""
    from wattlog.complaints import Complaints
    s = command_settings(args)
    data = data_dir(s.data_dir)
    try:
        committer = Committer(data, Complaints())
    except (RegistryError, StartError) as e:
        raise CliError(str(e)) from None
    shown = Progress("rebuild")
    try:
        written = committer.flush_summaries(
            lambda done, total: shown(done, total, "%d/%d feeds" % (done, total)), whole=True)
    finally:
        shown.close()
        committer.close()
    print("rebuilt the summaries of %d feeds in %s (%d bytes)"
          % (len(committer.feeds), os.path.join(data, "summaries"), written))
    if (s.runs or {}).get("enabled", True):
        rebuild_runs(s, data)


def rebuild_runs(s, data):
    """Every plug's runs found again from its readings (the collector stopped: the lock)."""
    from wattlog.periods import Tariff
    from wattlog.runs.rebuild import rebuild
    from wattlog.store import datalock
    try:
        lock = datalock.lock(data, "rebuild")
    except datalock.Locked as e:
        raise CliError(str(e)) from None
    try:
        found = rebuild(reader(s), data, s.runs, Tariff.from_settings(s.tariff), s.timezone)
    finally:
        os.close(lock)
    n, total = len(found), sum(found.values())
    print("rebuilt the runs of %d plug%s in %s (%d run%s)" % (
        n, "" if n == 1 else "s", os.path.join(data, "runs"), total, "" if total == 1 else "s"))


def cmd_runs(args):
    """What each appliance did: its runs, kWh and cost per run, runs per week, a cycling
    appliance's duty cycle (runs/report.py). The running collector's /api/runs when it
    serves HTTP (the run going on included), else the files in <data>/runs."""
    from wattlog.runs.records import Saved
    from wattlog.runs.report import report, text
    s = command_settings(args)
    data = data_dir(s.data_dir)
    tz = zone(s.timezone)
    try:
        since = storable_time(args.since, "--since", tz) if args.since else None
        until = storable_time(args.until, "--until", tz) if args.until else None
    except argparse.ArgumentTypeError as e:
        raise UsageError(str(e)) from None
    if since is not None and until is not None and until <= since:
        raise UsageError("--since %s is not before --until %s" % (iso(since, tz), iso(until, tz)))
    if not (s.runs or {}).get("enabled", True):
        raise CliError("runs are off in the config ([runs] enabled = false)")
    saved = Saved(data, (s.runs or {}).get("plugs"))
    if args.plug is not None and args.plug not in saved.nodes():
        raise CliError("no runs of a plug %r in %s; `wattlog runs` lists the plugs, and "
                       "`wattlog rebuild` finds them in the readings" % (args.plug, data))
    answer = ask_collector(s, data, "/api/runs", [(k, v) for k, v in (
        ("plug", args.plug), ("since", since), ("until", until)) if v is not None],
        "the run going on is not shown")
    if answer is None:
        answer = report(saved, reader(s), s.timezone, since, until, node=args.plug)
    if args.json:
        print(json.dumps(answer))
    elif not answer["plugs"]:
        print("no runs yet in %s: the collector finds them as readings arrive, `wattlog "
              "rebuild` in what is stored" % data)
    else:
        print(text(answer))


def value_text(v):
    """float32 in its shortest exact form; '' for NaN (no data)."""
    return "" if np.isnan(v) else np.format_float_positional(v, unique=True, trim="-")


def cmd_export(args):
    s = command_settings(args, ("store_password_file",))
    data = s.store or s.data_dir
    tz = args.tz or zone(s.timezone)
    store = reader(s)
    entry = store.lookup(args.feed)
    if entry is None:
        raise CliError("no feed %r in %s; `wattlog feeds` lists them" % (args.feed, data))
    if entry.get("quarantined"):
        raise CliError("feed %s is quarantined: %s" % (args.feed, entry["quarantined"]))
    try:
        feed = store.feed(entry)
    except FeedError as e:
        raise CliError(str(e)) from None
    try:
        start = feed.start if args.start is None else storable_time(args.start, "--start", tz)
        end = feed.end() if args.end is None else storable_time(args.end, "--end", tz)
    except argparse.ArgumentTypeError as e:
        raise UsageError(str(e)) from None
    if args.start is not None and args.end is not None and end <= start:
        raise UsageError("--start %s is not before --end %s: nothing lies between them"
                         % (iso(start, tz), iso(end, tz)))
    first = feed.first_at(start)
    stop = max(feed.first_at(end), first)  # slots before end
    if not args.fill:  # past the stored slots there is nothing to print
        stop = max(min(stop, feed.npoints()), first)
    if min(stop, feed.npoints()) <= first:
        sys.stderr.write("export: no data from %s to %s; %s holds %s\n" % (
            iso(start, tz), iso(end, tz), args.feed,
            "nothing yet" if not feed.npoints() else "%s to %s" % (
                iso(feed.start, tz), iso(feed.time(feed.npoints() - 1), tz))))
    write_export(feed, entry, first, stop, args, tz)


def write_export(feed, entry, first, stop, args, tz):
    """The slots first..stop as CSV or JSON on stdout: those with data, or with --fill every
    one (empty, or null, where there is none); a progress line on a terminal."""
    when = (lambda t: iso(int(t), tz)) if args.times == "iso" else (lambda t: "%d" % t)
    out = sys.stdout
    progress = sys.stderr.isatty() and stop - first > 200000
    chunk = 50000
    if args.format == "json":
        out.write('{"feed": %d, "node": %s, "channel": %s, "unit": %s, "interval": %d, "data": ['
                  % (feed.id, json.dumps(entry["node"]), json.dumps(entry["channel"]),
                     json.dumps(entry["unit"]), feed.interval))
    else:
        out.write("time,%s_%s\n" % (entry["channel"], entry["unit"]))
    sep = ""
    for lo in range(first, stop, chunk):
        hi = min(lo + chunk, stop)
        values = feed.read(lo, hi)
        times = feed.time(lo) + feed.interval * np.arange(hi - lo)
        if not args.fill:
            keep = ~np.isnan(values)
            times, values = times[keep], values[keep]
        if args.format == "json":
            for t, v in zip(times, values):
                text = value_text(v)
                out.write('%s[%s, %s]' % (sep, when(t) if args.times == "unix" else
                                          json.dumps(when(t)), text or "null"))
                sep = ", "
        else:
            out.write("".join("%s,%s\n" % (when(t), value_text(v)) for t, v in zip(times, values)))
        if progress:
            sys.stderr.write("\rexport: %3.0f%%" % (100.0 * (hi - first) / (stop - first)))
    if args.format == "json":
        out.write("]}\n")
    if progress:
        sys.stderr.write("\rexport: done      \n")


def cmd_energy(args):
    """kWh (and cost) per plug per local period, with totals: energy.energy_table, printed. The
    config's timezone and [tariff] count unless a flag says otherwise. When the config's
    collector serves HTTP, the table is its /api/energy: the readings it holds in memory, not
    yet committed, count too, so both say the same at the same moment."""
    from wattlog.energy import energy_table
    from wattlog.periods import EnergyError, Tariff
    s = command_settings(args, ("store_password_file",))
    data = s.store or s.data_dir
    try:
        tariff = Tariff.parse(args.tariff, args.currency) if args.tariff else \
            Tariff.from_settings(s.tariff) if s.tariff else None
        tz = zone(s.timezone)
        start = storable_time(args.start, "--from", tz) if args.start else None
        end = storable_time(args.end, "--to", tz) if args.end else None
    except (EnergyError, argparse.ArgumentTypeError) as e:
        raise UsageError(str(e)) from None
    if start is not None and end is not None and end <= start:
        raise UsageError("--from %s is not before --to %s" % (iso(start, tz), iso(end, tz)))
    table = None
    if s.http_listen and not args.tariff and not args.timezone:
        table = collector_energy(s, data, args.by, start, end)
    if table is None:
        try:
            table = energy_table(reader(s), args.by, s.timezone, tariff, start, end)
        except EnergyError as e:
            raise CliError(str(e)) from None
    for note in table["notes"]:
        print("note: " + note, file=sys.stderr)
    if not table["plugs"]:
        print("no energy feeds yet in %s" % data)
        return
    print(energy_text(table))


def collector_energy(s, data, by, start, end):
    """The running collector's /api/energy for the same question, or None when no collector
    writes `data` (then the files hold everything)."""
    return ask_collector(s, data, "/api/energy", [("by", by)] + [
        (k, v) for k, v in (("start", start), ("end", end)) if v])


def ask_collector(s, data, path, query,
                  without="the readings it has not committed yet are not counted"):
    """The running collector's answer to GET path?query, or None when no collector writes
    `data` (then the files hold everything). A collector that runs but does not answer is
    said in a note, with what the answer lacks `without` it."""
    import urllib.error
    import urllib.parse
    import urllib.request
    from wattlog.store import datalock
    if not s.http_listen or (not s.store and datalock.holder(data) is None):
        return None  # no collector writes the files: they hold everything
    host, _, port = s.http_listen.rpartition(":")
    host = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]", "::": "[::1]"}.get(host, host)
    request = urllib.request.Request("http://%s:%s%s?%s" % (host, port, path,
                                                           urllib.parse.urlencode(query)))
    if s.http_token_file:
        try:
            with open(s.http_token_file) as f:
                request.add_header("Authorization", "Bearer " + f.readline().strip())
        except OSError:
            pass  # reading may be open; if not, the answer says so below
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.load(answer)
    except (OSError, ValueError) as e:
        if not s.store:  # one runs (it holds the files' lock): its pending readings are missed
            print("note: the collector writing %s did not answer at %s (%s): %s"
                  % (data, s.http_listen, getattr(e, "reason", e), without), file=sys.stderr)
        return None


def energy_text(table):
    """The table as text: energy.cells() aligned, "-" where there is no data."""
    from wattlog.energy import cells
    c = cells(table)
    rows = [c["head"]] + c["rows"] + [c["total"], c["share"]]
    rows = [["-" if x is None else x for x in r] for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(c["head"]))]
    return "\n".join("  ".join(x.rjust(w) if i else x.ljust(w)
                               for i, (x, w) in enumerate(zip(r, widths))).rstrip()
                     for r in rows)
