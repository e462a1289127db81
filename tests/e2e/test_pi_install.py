"""test_pi_install.py - the README's "Run it on your Pi", run as it is written (issue 21): a
pip install of this clone into a fresh virtualenv, `wattlog provision` answered at its Wi-Fi
prompt, mosquitto on the provisioned files, the collector from the config, two simulated plugs
from the provisioned configs, the verbs without flags, and the History view drawn in Chromium
from the installed wheel's own chart library.

The lines are taken out of README.md's first code block under "## Run it on your Pi" and run
with only these changes, so the README cannot drift from what works:
  - `sudo ` is dropped (the test runs as whoever runs it);
  - /etc/wattlog, /etc/mosquitto, /opt/wattlog and /var/lib/wattlog lie in a temporary folder
    (one mosquitto can reach when it drops to its user: not pytest's 0700 tmp_path), and the
    default config path is that folder's (WATTLOG_CONFIG, which every verb reads first);
  - the Pi's address is 127.0.0.1 with a free port (`--port P --listen 127.0.0.1` added to
    provision), and the dashboard's port a free one (the config's [http] listen, edited as an
    owner edits it, with its data directory);
  - `apt install` checks that the packages' commands are here (tools/setup installs them);
  - `systemctl restart mosquitto` starts mosquitto on a stand-in for Debian's main config
    (include_dir conf.d, where the line before copied provision's file);
  - `install-service`, on a machine without systemd, must refuse and say what to run, and the
    command it names is what runs the collector; with systemd (where the test must not
    install a service on the machine) `--print` shows the unit, and `collect` runs the same.
The install needs the package registries (pip and npm through their own configuration), as
the README's does. Real time: a real install, and plugs paced by the wall clock after their
catch-up.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from broker import free_port, mosquitto_path, wait_for_port
from helpers import REPO
from rig import wait_answer

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
WIFI = ("home", "correct horse battery")
PLUGS = ("plug-a", "plug-b")
BOOTED = os.path.isdir("/run/systemd/system")


def readme_block(heading):
    """The lines of the first ``` block after `heading` in README.md."""
    text = (REPO / "README.md").read_text()
    section = text[text.index(heading + "\n"):]
    block = section[section.index("```\n") + 4:]
    return [line for line in block[:block.index("```\n")].splitlines() if line.strip()]


class Pi:
    """The README's paths in a temporary folder, and the processes the lines start."""

    def __init__(self, root):
        self.root = root
        self.broker_port, self.http_port = free_port(), free_port()
        self.etc = os.path.join(root, "etc", "wattlog")
        self.env = dict(os.environ, WATTLOG_CONFIG=os.path.join(self.etc, "wattlog.toml"))
        self.env.pop("VIRTUAL_ENV", None)
        self.procs = []
        self.clone = os.path.join(root, "clone")

    def path(self, line):
        """A README line with its paths, address and port moved into the temporary folder."""
        for real in ("/etc/wattlog", "/etc/mosquitto", "/opt/wattlog", "/var/lib/wattlog"):
            line = line.replace(real, self.root + real)
        line = line.replace("192.168.1.10:1883", "127.0.0.1:%d" % self.broker_port)
        line = line.replace("--broker-host 192.168.1.10", "--broker-host 127.0.0.1 --port %d "
                            "--listen 127.0.0.1" % self.broker_port)
        return line.replace("sudo ", "")

    def run(self, command, timeout_s=600, **kw):
        done = subprocess.run(["bash", "-c", command], cwd=self.clone, env=self.env,
                              capture_output=True, text=True, timeout=timeout_s, **kw)
        assert done.returncode == 0, (command, done.stdout[-3000:], done.stderr[-3000:])
        return done

    def start(self, argv, log):
        out = open(os.path.join(self.root, log), "w")
        proc = subprocess.Popen(argv, cwd=self.clone, env=self.env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((proc, out))
        return proc

    def log(self, name):
        with open(os.path.join(self.root, name)) as f:
            return f.read()

    def wait_for(self, name, text, timeout_s=60):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.log(name):
                return
            time.sleep(0.2)
        raise AssertionError("%s never said %r:\n%s" % (name, text, self.log(name)[-3000:]))

    def stop(self):
        for proc, out in reversed(self.procs):  # plugs, then the collector, then the broker
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            out.close()


def copy_clone(dest):
    """What a fresh clone holds: the files git tracks, or would (as they are in this working
    tree: a change is tested before it is committed); no node_modules, no .venv."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = REPO / name
        if src.is_file():
            os.makedirs(os.path.dirname(os.path.join(dest, name)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, name))


def provision_at_a_terminal(pi, line):
    """The provision line on a pseudo-terminal, the Wi-Fi password typed at both prompts."""
    sys.path.insert(0, str(REPO / "tests" / "host"))
    from terminal import at_a_terminal
    status, shown = at_a_terminal(["/usr/bin/env", "bash", "-c", "cd %s && %s"
                                   % (pi.clone, line)], [WIFI[1], WIFI[1]], env=pi.env)
    assert status == 0, shown
    assert WIFI[1] not in shown
    return shown


def broker_main_config(pi):
    """A stand-in for Debian's /etc/mosquitto/mosquitto.conf: its conf.d, a log the test
    reads, no persistence file (the package's pid_file and /var/lib paths are the machine's)."""
    d = os.path.join(pi.root, "etc", "mosquitto")
    os.makedirs(os.path.join(d, "conf.d"), exist_ok=True)
    with open(os.path.join(d, "mosquitto.conf"), "w") as f:
        f.write("log_dest stderr\npersistence false\ninclude_dir %s\n" % os.path.join(d, "conf.d"))


def edit_config(pi):
    """The owner's edits of wattlog.toml: where the data goes, which port the page is on."""
    path = os.path.join(pi.etc, "wattlog.toml")
    with open(path) as f:
        text = f.read()
    text = text.replace('data = "/var/lib/wattlog"', 'data = "%s/var/lib/wattlog"' % pi.root)
    text = text.replace('listen = "127.0.0.1:8080"', 'listen = "127.0.0.1:%d"' % pi.http_port)
    with open(path, "w") as f:
        f.write(text)


@pytest.mark.realtime
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed: "
                                                         "run tools/setup")
def test_the_readme_pi_install_ends_in_plugs_a_page_and_commands_without_flags():
    """Every line of "Run it on your Pi" works as written (see the module docstring for the
    paths it moves): the wheel carries uPlot, so the History view draws (it said "The chart
    library (uPlot) did not load"); the provisioned plugs have the Wi-Fi and connect; the
    verbs need no flag the config holds, and `wattlog energy` equals /api/energy."""
    root = tempfile.mkdtemp(prefix="wattlog-pi-")
    os.chmod(root, 0o755)  # mosquitto, dropped to its user, reads the provisioned files
    pi = Pi(root)
    try:
        copy_clone(pi.clone)
        lines = readme_block("## Run it on your Pi")
        assert [line.split()[:2] for line in lines[:5]] == [
            ["sudo", "apt"], ["sudo", "python3"], ["sudo", "/opt/wattlog/bin/wattlog"],
            ["sudo", "cp"], ["sudo", "/opt/wattlog/bin/wattlog"]], lines
        for package in lines[0].split()[3:]:  # what apt installs, tools/setup has
            assert shutil.which({"python3-venv": "python3"}.get(package, package)) or \
                os.path.exists("/usr/sbin/" + package), package
        pi.run(pi.path(lines[1]))  # the venv and `pip install .`, in the copy of the clone
        venv = os.path.join(root, "opt", "wattlog")
        wattlog = os.path.join(venv, "bin", "wattlog")
        shown = provision_at_a_terminal(pi, pi.path(lines[2]))
        assert "sudo %s install-service" % wattlog in shown or "sudo %s collect" % wattlog in \
            shown  # the printed commands name the program by its full path
        for node in PLUGS:
            cfg = json.load(open(os.path.join(pi.etc, "nodes", node, "config.json")))
            assert cfg["wifi"] == {"ssid": WIFI[0], "password": WIFI[1]}
            assert cfg["ntp_host"] == "127.0.0.1"
        copy, restart = pi.path(lines[3]).split(" && ")
        assert restart == "systemctl restart mosquitto"
        broker_main_config(pi)
        pi.run(copy)
        broker = pi.start([mosquitto_path(), "-c", os.path.join(root, "etc", "mosquitto",
                                                                "mosquitto.conf")], "broker.log")
        wait_for_port(pi.broker_port, proc=broker)
        collect = install_or_what_it_says(pi, pi.path(lines[4]), wattlog)
        edit_config(pi)
        pi.start(collect, "collector.log")
        pi.wait_for("collector.log", "listening on wattlog/+/readings")
        assert "journalctl -u wattlog" in lines[5]
        start = int(time.time()) - 3 * 3600
        for node in PLUGS:
            pi.start([str(REPO / "tools" / "simnode")] + pi.path(
                "--id %s --broker 192.168.1.10:1883 --node-config "
                "/etc/wattlog/nodes/%s/config.json --wifi home" % (node, node)).split()
                + ["--speed", "max", "--start", str(start - start % 10), "--then-realtime",
                   "--profile", "constant:%d" % (500 if node == "plug-a" else 1200)],
                node + ".log")
        for node in PLUGS:  # connected over the simulated Wi-Fi, and caught up
            wait_for_api(pi, "/api/feeds", lambda got, node=node: any(
                f["node"] == node and f["channel"] == "energy" and f["last_time"] and
                f["last_time"] >= time.time() - 120 for f in got["feeds"]))
        verbs_without_flags(pi, wattlog)
        history_draws(pi)
    finally:
        pi.stop()
        shutil.rmtree(root, ignore_errors=True)


def install_or_what_it_says(pi, line, wattlog):
    """`install-service` as the README says; without systemd it refuses in one line naming
    the command to run instead, which is then what runs the collector."""
    if BOOTED:  # never install a service on the machine that runs the tests
        unit = pi.run(line + " --print").stdout
        assert "ExecStart=%s collect" % wattlog in unit
        return [wattlog, "collect"]
    done = subprocess.run(["bash", "-c", line], cwd=pi.clone, env=pi.env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "does not run systemd" in done.stderr and "nothing was changed" in done.stderr
    said = re.search(r"run `([^`]+)`", done.stderr).group(1)
    assert said == "%s collect --config %s" % (wattlog, os.path.join(pi.etc, "wattlog.toml"))
    return said.split()


def api(pi, path):
    import urllib.request
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (pi.http_port, path),
                                timeout=10) as r:
        return json.load(r)


def wait_for_api(pi, path, ok, timeout_s=120):
    return wait_answer(path, lambda: api(pi, path), ok, timeout_s, 0.5,
                       lambda: pi.log("collector.log")[-2000:])


def verbs_without_flags(pi, wattlog):
    """feeds, nodes and energy from the config alone; energy says what /api/energy says."""
    feeds = pi.run("%s feeds" % wattlog).stdout
    assert all(node in feeds for node in PLUGS), feeds
    pi.run("%s nodes" % wattlog)  # acked only after the first commit: it may list none yet
    for _ in range(3):  # a reading may land between the two questions: ask again
        now = int(time.time())
        printed = pi.run("%s energy --to %d" % (wattlog, now)).stdout
        table = api(pi, "/api/energy?by=day&end=%d" % now)
        wanted = [("%.3f" % p["total_kwh"]) for p in table["plugs"]]
        if all(w in printed.splitlines()[-2] for w in wanted):
            break
    assert all(w in printed.splitlines()[-2] for w in wanted), (printed, wanted)


def history_draws(pi):
    """The History view of the installed page draws both plugs with its own uPlot."""
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM,
                                     args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            lib = page.request.get("http://127.0.0.1:%d/web/lib/uPlot.iife.min.js"
                                   % pi.http_port)
            assert lib.ok and len(lib.body()) > 40000  # the wheel's copy, served
            page.goto("http://127.0.0.1:%d/#history?feeds=%s&start=%d&end=now"
                      % (pi.http_port, ",".join(PLUGS), time.time() - 3 * 3600))
            drawn = page.wait_for_function(
                """() => { const u = window.wattlog && window.wattlog.chart;
                   if (!u || !window.wattlogDrawn) return null;
                   return u.series.slice(1).map((s, i) => [s.label,
                     Array.from(u.data[i + 1]).filter((v) => v != null).length]); }""",
                timeout=60000).json_value()
            lines = {label: n for label, n in drawn if label in PLUGS}  # and each band's
            assert sorted(lines) == sorted(PLUGS) and min(lines.values()) > 50, drawn
            assert "did not load" not in page.inner_text("body")
            assert not errors, errors
        finally:
            browser.close()


def test_a_build_that_cannot_get_the_chart_library_fails_in_one_sentence(tmp_path):
    """A clone without node_modules on a machine without npm: the build stops with one
    sentence saying what to install, and makes no wheel (it made one whose History view
    could not draw)."""
    clone = tmp_path / "clone"
    copy_clone(str(clone))
    bare = tmp_path / "bin"  # a PATH with this Python and nothing else: no npm
    bare.mkdir()
    os.symlink(sys.executable, bare / "python3")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                           str(tmp_path / "wheels"), "."], cwd=clone, capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, PATH=str(bare)))
    assert done.returncode != 0 and not list((tmp_path / "wheels").glob("*.whl"))
    said = [line.strip() for line in (done.stdout + done.stderr).splitlines()
            if "wattlog's build:" in line]
    assert said == ["error: wattlog's build: the dashboard's chart library, uPlot 1.6.32, is "
                    "not in node_modules and npm is not installed to fetch it: install npm "
                    "(sudo apt install npm) or run `npm ci` in this clone, then build again"]


def test_a_chart_library_other_than_the_pinned_one_is_refused(tmp_path):
    """What npm fetches must be the tarball package-lock.json pins (its sha512): a lock whose
    integrity differs makes the build refuse, and nothing is copied."""
    import chartlib
    lock = json.loads((REPO / "package-lock.json").read_text())
    entry = lock["packages"]["node_modules/uplot"]
    entry["integrity"] = "sha512-" + "A" * 86 + "=="
    (tmp_path / "package-lock.json").write_text(json.dumps(lock))
    with pytest.raises(chartlib.ChartLibMissing, match="npm's uplot-1.6.32.tgz is not the one "
                                                        "package-lock.json pins"):
        chartlib.copy_into(str(tmp_path / "out"), repo=str(tmp_path))
    assert not (tmp_path / "out").exists()
    chartlib.copy_into(str(tmp_path / "good"), progress=lambda text: None)  # the real pin
    assert sorted(os.listdir(tmp_path / "good")) == sorted(chartlib.FILES)
