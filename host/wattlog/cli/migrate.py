"""migrate.py - `wattlog migrate`: a single Pi's data directory copied into the cluster's
PostgreSQL store (store/migrate.py does the copy), with progress per plug and overall, and
what it did in a few lines. The collector must be stopped; interrupted, a run again goes on
where this one stopped.
"""

from wattlog.cli.common import CliError, Progress, UsageError, command_settings


def cmd_migrate(args):
    from wattlog.serve.app import read_first_line
    from wattlog.store.migrate import Refused, Source, Target, migrate
    from wattlog.store.postgres import StoreUnavailable
    s = command_settings(args, ("store_password_file",))
    if not s.store:
        raise UsageError("say where to: --to postgresql://USER@HOST[:PORT]/DATABASE (or store "
                         "in the config)")
    scheme, _, rest = s.store.partition("://")
    if scheme not in ("postgresql", "postgres") or not rest:
        raise UsageError("--to %s is not a postgresql://USER@HOST[:PORT]/DATABASE URL" % scheme)
    if ":" in rest.split("@")[0] and "@" in rest:
        raise UsageError("--to holds a password: give it in a file of its own (mode 0600) with "
                         "--store-password-file FILE, never on the command line")
    try:
        password = read_first_line(s.store_password_file, "database password") \
            if s.store_password_file else None
    except ValueError as e:
        raise CliError(str(e)) from None
    source = target = None
    shown = Progress("migrate")
    try:
        source = Source(s.data_dir)
        target = Target(s.store, password)
        done = migrate(source, target, lambda step: _said(shown, step))
    except Refused as e:
        raise (UsageError if e.usage else CliError)(str(e)) from None
    except StoreUnavailable as e:
        raise CliError(str(e)) from None
    except KeyboardInterrupt:
        raise CliError("interrupted: what was copied stands; run this again to go on from "
                       "there") from None
    finally:
        shown.close()
        for part in (source, target):
            if part is not None:
                part.close()
    _report(s, done)


def _said(shown, step):
    shown(step.done, step.total, "%s (%d of %d plugs) %d%%, %d readings"
          % (step.node, step.plug, step.plugs, step.slots_done * 100 // max(step.slots, 1),
             step.rows))
    if step.slots_done == step.slots:
        shown.note("%s copied" % step.node)


def _report(s, done):
    for note in done.notes:
        print("note: " + note)
    for node, channel, was, now, why in done.moved:
        print("note: %s/%s is feed %d in the database (%d in the files: %s); emoncms API URLs "
              "with %d need %d" % (node, channel, now, was, why, was, now))
    if not done.rows:
        print("nothing to copy: every reading of the %d plugs in %s is in %s already%s"
              % (done.plugs, s.data_dir, s.store, " (%d slots compared)" % done.slots
                 if done.slots else ""))
        return
    print("copied %d readings (%d values) of %d plugs from %s into %s in %.1f s (%.0f "
          "readings/s)%s; summaries brought up in %.1f s"
          % (done.rows, done.values, done.plugs, s.data_dir, s.store, done.copy_s,
             done.rows / max(done.copy_s, 1e-9),
             "" if done.moved else ", every feed id kept", done.summaries_s))
