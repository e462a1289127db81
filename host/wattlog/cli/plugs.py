"""plugs.py - the verbs that reach the plugs: plug (switch, status) and ota (updates) as
wattlog-operator (fleet/plug.py, fleet/ota.py), and provision, which makes every login, the
broker's files and each plug's config (fleet/provision.py).
"""

import os
import sys

from wattlog.cli.common import CliError, operator, provisioned_dir

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))  # a checkout's root: tools/build builds the node


def cmd_plug(args):
    from wattlog.fleet.plug import PlugError, run  # paho is only needed here
    s, url, password = operator(args)
    try:
        print(run(args.action, args.node, url, s.base_topic, args.timeout, s.ca, password))
    except (PlugError, ValueError) as e:
        raise CliError(str(e)) from None


def cmd_ota(args):
    import glob
    import subprocess
    from wattlog.fleet.ota import OtaError, next_serial, run, table
    from wattlog.fleet.provision import ProvisionError, read_ota_key
    s, url, password = operator(args)
    where = args.dir or provisioned_dir(s)
    nodes = sorted(os.path.basename(os.path.dirname(p)) for p in
                   glob.glob(os.path.join(where, "nodes", "*", "ota.key"))) \
        if args.all else args.nodes
    if not nodes:
        raise CliError("no plugs to update: name them, or --all with plugs provisioned in %s"
                       % where)
    build = args.build
    if build is None:
        tool = os.path.join(REPO, "tools", "build")
        if not os.path.exists(tool):
            raise CliError("this wattlog is not a checkout, so it cannot build the node: give "
                           "--build DIR (a folder tools/build made)")
        if subprocess.call([tool]) != 0:
            raise CliError("tools/build failed: the node does not compile; nothing was sent")
        build = os.path.join(REPO, "build", "device")
    try:
        keys = {n: read_ota_key(where, n) for n in nodes}
        results = run(nodes, keys, lambda node: next_serial(where, node), build, url,
                      password, s.ca, s.base_topic, args.parallel, args.trial, directory=where)
    except (OtaError, ProvisionError, ValueError) as e:
        raise CliError(str(e)) from None
    print(table(results))
    bad = [r["node"] for r in results if r["result"] != "confirmed"]
    if bad:
        raise CliError("%d of %d plugs not updated (%s): they run the version they ran"
                       % (len(bad), len(results), ", ".join(bad)))


def cmd_provision(args):
    from wattlog import settings
    from wattlog.fleet.provision import ProvisionError, main_text, provision
    from wattlog.systemd import executable
    directory = args.dir or os.path.dirname(os.path.abspath(settings.config_path(args.config)[0]))
    try:
        creds = provision(directory, args.nodes, args.broker_host, args.port, args.tls,
                          args.listen, progress=lambda text: print(text, file=sys.stderr),
                          broadlink=args.broadlink, wifi=wifi(args), ntp_host=args.ntp_host,
                          cluster=args.cluster, partitions=args.partitions,
                          nats_store=args.nats_store)
    except ProvisionError as e:
        raise CliError(str(e)) from None
    print(main_text(creds, directory, " ".join(executable())))


def wifi(args):
    """(ssid, password) from --wifi-ssid and --wifi-password-file or, in a terminal, a prompt
    (twice: a mistyped password is a plug that never joins); None without --wifi-ssid."""
    if args.wifi_ssid is None:
        if args.wifi_password_file:
            raise CliError("--wifi-password-file needs --wifi-ssid NAME: the network it is for")
        return None
    if args.wifi_password_file:
        try:
            with open(args.wifi_password_file, "rb") as f:
                return args.wifi_ssid, f.readline().rstrip(b"\r\n").decode()
        except OSError as e:
            raise CliError("cannot read the Wi-Fi password file %s (%s)"
                           % (args.wifi_password_file, e.strerror)) from None
        except UnicodeDecodeError:
            raise CliError("the Wi-Fi password file %s is not UTF-8 text"
                           % args.wifi_password_file) from None
    if not sys.stdin.isatty():
        raise CliError("--wifi-ssid %s needs its password: give --wifi-password-file FILE (the "
                       "first line; an empty one for an open network), or run provision in a "
                       "terminal to be asked" % args.wifi_ssid)
    import getpass
    first = getpass.getpass("Wi-Fi password for %s (empty for an open network): "
                            % args.wifi_ssid)
    if getpass.getpass("again: ") != first:
        raise CliError("the two Wi-Fi passwords differ: nothing was changed; run it again")
    return args.wifi_ssid, first
