"""test_cli.py - `wattlog feeds` and `wattlog export` show what is stored; errors are one line."""

import json
import subprocess
import sys
import time

import pytest

from batches import T0
from wattlog import cli
from wattlog import times
from wattlog.cli import common
from wattlog.store.commit import Committer
from wattlog.complaints import Complaints


@pytest.fixture
def data(tmp_path):
    c = Committer(str(tmp_path), Complaints())
    c.commit({("plug-1", "power"): {T0: 100.5, T0 + 10: float("nan"), T0 + 20: 229.26},
              ("plug-1", "energy"): {T0: 1.0}}, {"plug-1": 10})
    c.close()
    return str(tmp_path)


def run(capsys, *argv):
    cli.main(list(argv))
    return capsys.readouterr().out


def test_feeds_lists_every_feed(data, capsys):
    out = run(capsys, "feeds", "--data", data).splitlines()
    assert out[0].split() == ["id", "node", "channel", "unit", "interval", "start", "end", "points"]
    assert out[1].split() == ["1", "plug-1", "energy", "kWh", "10s", times.iso(T0), times.iso(T0), "1"]
    assert out[2].split() == ["2", "plug-1", "power", "W", "10s", times.iso(T0), times.iso(T0 + 20), "3"]


def test_export_csv_has_the_slots_with_data_and_with_fill_shows_missing_as_empty(data, capsys):
    """A row per slot that holds a reading; --fill asks for every slot of the range, empty
    where there is none (issue 21 item 6: a far --end printed millions of empty rows)."""
    out = run(capsys, "export", "--data", data, "--feed", "plug-1/power")
    assert out.splitlines() == ["time,power_W", "%d,100.5" % T0, "%d,229.26" % (T0 + 20)]
    out = run(capsys, "export", "--data", data, "--feed", "plug-1/power", "--fill")
    assert out.splitlines() == ["time,power_W", "%d,100.5" % T0, "%d," % (T0 + 10),
                                "%d,229.26" % (T0 + 20)]


def test_export_json_shows_missing_as_null_with_fill(data, capsys):
    doc = json.loads(run(capsys, "export", "--data", data, "--feed", "2", "--format", "json",
                         "--fill"))
    assert doc["unit"] == "W" and doc["interval"] == 10
    assert doc["data"] == [[T0, 100.5], [T0 + 10, None], [T0 + 20, 229.26]]
    doc = json.loads(run(capsys, "export", "--data", data, "--feed", "2", "--format", "json"))
    assert doc["data"] == [[T0, 100.5], [T0 + 20, 229.26]]


def test_export_range_is_start_inclusive_end_exclusive(data, capsys):
    out = run(capsys, "export", "--data", data, "--feed", "plug-1/power",
              "--start", str(T0 + 5), "--end", str(T0 + 20), "--fill")
    assert out.splitlines()[1:] == ["%d," % (T0 + 10)]
    out = run(capsys, "export", "--data", data, "--feed", "plug-1/power",
              "--start", str(T0), "--end", str(T0 + 21))
    assert out.splitlines()[1:] == ["%d,100.5" % T0, "%d,229.26" % (T0 + 20)]


@pytest.mark.parametrize("argv, words", [
    (["feeds", "--data", "/nonexistent"], "/nonexistent is not a data directory"),
    (["export", "--data", "DATA", "--feed", "nobody/power"], "no feed 'nobody/power'"),
])
def test_errors_are_one_line(data, argv, words):
    argv = [data if a == "DATA" else a for a in argv]
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_times_can_be_unix_iso_or_relative():
    assert times.parse_time("1795170000") == 1795170000
    assert times.parse_time("2026-11-21T08:00:00Z") == times.parse_time("2026-11-21T08:00") == 1795248000
    assert times.parse_time("2026-11-21T09:00:00+01:00") == 1795248000
    assert times.parse_time("-24h", now=1795248000) == 1795248000 - 86400
    assert times.parse_time("now-1.5d", now=1795248000) == 1795248000 - 129600
    assert times.parse_time("now", now=1795248000) == times.parse_time(" now ", now=1795248000) == 1795248000
    assert times.parse_time("now+1h", now=1795248000) == times.parse_time("-3600", now=1795255200)
    with pytest.raises(Exception, match="is not a time"):
        times.parse_time("yesterday")


def test_export_takes_now_and_a_zone_and_prints_iso_with_the_offset(data, capsys):
    """--end now works (only now-... did); times without a zone are read in --tz, and
    --times iso prints them with that zone's offset (the README says UTC otherwise)."""
    out = run(capsys, "export", "--data", data, "--feed", "plug-1/power", "--end", "now",
              "--tz", "Europe/Berlin", "--times", "iso", "--start", "2026-11-20T11:20:00",
              "--fill")
    rows = out.splitlines()[1:]
    assert rows[:3] == ["2026-11-20T11:20:00+01:00,100.5", "2026-11-20T11:20:10+01:00,",
                        "2026-11-20T11:20:20+01:00,229.26"]
    assert len(rows) >= (int(time.time()) - T0) // 10 - 1  # empty slots up to now
    assert times.iso(T0) == "2026-11-20T10:20:00Z"


def test_a_range_with_no_data_says_so(data, capsys):
    cli.main(["export", "--data", data, "--feed", "plug-1/power", "--start", "now-1h"])
    out, err = capsys.readouterr()
    assert out == "time,power_W\n"
    assert "export: no data from" in err and "plug-1/power holds 2026-11-20T10:20:00Z to" in err


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("wattlog 0.")


def test_a_read_only_data_directory_is_one_line(tmp_path):
    """`collect` on a directory it cannot write: one line naming it (was an OSError
    traceback)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(ro)]).returncode:
        pytest.skip("cannot mount a read-only tmpfs here (needs root)")
    try:
        proc = subprocess.run([sys.executable, "-m", "wattlog.cli", "collect", "--data",
                               str(ro / "data"), "--broker", "mqtt://u@127.0.0.1:1"],
                              capture_output=True, text=True, timeout=60)
    finally:
        subprocess.run(["umount", "-l", str(ro)])
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == ["wattlog collect: cannot use %s: Read-only file system; "
                                        "the file system is read-only" % (ro / "data")]


def test_provision_into_a_place_it_cannot_write_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "wattlog.cli", "provision", "--dir",
                           "/proc/wattlog", "--broker-host", "10.0.0.1", "plug-a"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1
    assert proc.stderr.startswith("wattlog provision: cannot use /proc/wattlog: ")


SECRET = "s3cret-Pa55"


@pytest.mark.parametrize("verb", [["collect", "--data", "DATA"], ["plug", "status", "plug-1"]])
@pytest.mark.parametrize("url", [
    "mqtt://collector:%s@" % SECRET,              # no host
    "mqtt://collector:%s@host:99999" % SECRET,    # port out of range
    "mqtt://collector:%s@host:port" % SECRET,     # port not a number
    "http://collector:%s@host" % SECRET,          # not MQTT
    "mqtt://collector:%s/x@" % SECRET,            # a password with a slash
])
def test_a_bad_broker_url_is_named_without_its_password(data, verb, url):
    """Issue 9 item 14: the error echoed the whole URL, password included."""
    argv = [data if a == "DATA" else a for a in verb] + ["--broker", url]
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    message = str(e.value)
    assert "expected mqtt://[USER@]HOST[:PORT]" in message and "\n" not in message
    assert SECRET not in message and "collector:***@" in message, message


def test_the_password_comes_from_a_file_or_the_environment(tmp_path, monkeypatch):
    """--password-file (its first line) wins over $WATTLOG_MQTT_PASSWORD; errors name the
    file, never its content."""
    monkeypatch.delenv(cli.PASSWORD_ENV, raising=False)
    assert common.broker_password(None) is None
    monkeypatch.setenv(cli.PASSWORD_ENV, "from-env")
    assert common.broker_password(None) == "from-env"
    pw = tmp_path / "collector.password"
    pw.write_text(SECRET + "\nsecond line\n")
    assert common.broker_password(str(pw)) == SECRET
    for content, words in ((b"", "is empty"), (b"\xff" + SECRET.encode(), "is not UTF-8 text")):
        pw.write_bytes(content)
        with pytest.raises(cli.CliError, match=words) as e:
            common.broker_password(str(pw))
        assert SECRET not in str(e.value)
    with pytest.raises(cli.CliError, match="cannot read the password file .*missing"):
        common.broker_password(str(tmp_path / "missing"))


def test_a_password_without_a_user_is_refused(data):
    with pytest.raises(SystemExit) as e:
        cli.main(["collect", "--data", data, "--broker", "mqtt://127.0.0.1:1", "--password-file",
                  __file__])
    assert "names no user: give mqtt://USER@HOST[:PORT]" in str(e.value)


def test_nodes_says_in_one_line_that_commit_json_is_damaged(data, capsys):
    with open(data + "/commit.json", "w") as f:
        f.write("[1, 2]")
    with pytest.raises(SystemExit) as e:
        cli.main(["nodes", "--data", data])
    assert "commit.json is damaged (it is list, not an object)" in str(e.value)
