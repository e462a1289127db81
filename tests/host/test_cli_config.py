"""test_cli_config.py - every verb runs from the config file (issue 21 item 3: only `collect`
read it; feeds, export, energy and nodes needed --data, plug and ota --broker and
--password-file, and energy ignored the config's timezone and [tariff]): the file --config
names, else $WATTLOG_CONFIG's, else /etc/wattlog/wattlog.toml when it is there; a flag given
wins; and times a feed cannot hold are refused in one line (item 6). Real files, the real CLI
(in this process, where the user would see stdout and stderr)."""

import json
import os

import pytest

from batches import T0
from wattlog import cli, settings
from wattlog.cli import common
from wattlog.store.commit import Committer
from wattlog.complaints import Complaints
from wattlog.settings import SettingsError

DAY_S = 86400


@pytest.fixture
def data(tmp_path):
    """A data directory with a plug whose energy counter ran 0.5 kWh an hour (one reading a
    minute) from an hour before local midnight in Berlin (23:00 UTC) for two days and more,
    and another plug's power feed with one missing slot."""
    c = Committer(str(tmp_path / "data"), Complaints())
    start = 1795129200 - 3600  # 2026-11-19T23:00+01:00
    energy = {start + k * 60: 0.5 * k / 60 for k in range(50 * 60 + 1)}
    c.commit({("plug-1", "energy"): energy}, {"plug-1": 60})
    c.commit({("plug-2", "power"): {T0: 100.5, T0 + 10: float("nan"), T0 + 20: 229.26}},
             {"plug-2": 10})
    c.close()
    return tmp_path / "data"


@pytest.fixture
def config(tmp_path, data, monkeypatch):
    """A config naming the data, Berlin's days and a tariff; $WATTLOG_CONFIG points at it."""
    (tmp_path / "op.password").write_text("operator-secret\n")
    path = tmp_path / "etc" / "wattlog.toml"
    path.parent.mkdir()
    path.write_text('broker = "mqtt://wattlog-collector@10.0.0.5:1884"\n'
                    'data = "%s"\ntimezone = "Europe/Berlin"\n[http]\n'
                    'operator_password_file = "%s"\n[tariff]\nprice = 0.30\ncurrency = "EUR"\n'
                    % (data, tmp_path / "op.password"))
    monkeypatch.setenv("WATTLOG_CONFIG", str(path))
    return path


def run(capsys, *argv):
    cli.main(list(argv))
    return capsys.readouterr()


def test_the_reading_verbs_take_the_data_directory_from_the_config(config, data, capsys,
                                                                   tmp_path):
    feeds = run(capsys, "feeds").out
    assert "plug-1" in feeds and "energy" in feeds
    assert run(capsys, "export", "--feed", "plug-2/power").out.splitlines() == [
        "time,power_W", "%d,100.5" % T0, "%d,229.26" % (T0 + 20)]
    assert run(capsys, "nodes").out == "no node has been acknowledged yet in %s\n" % data
    (tmp_path / "other").mkdir()
    assert run(capsys, "feeds", "--data", str(tmp_path / "other")).out == \
        "no feeds yet in %s\n" % (tmp_path / "other")  # the flag wins


def test_energy_counts_the_configs_days_and_tariff_and_a_flag_wins(config, capsys):
    """Berlin's days (from 23:00 UTC), 12 kWh each, at the config's 0.30 EUR; --timezone and
    --tariff win over the config."""
    out = run(capsys, "energy", "--from", "2026-11-20", "--to", "2026-11-22").out
    rows = out.splitlines()
    assert rows[0].split() == ["day", "plug-1", "kWh", "EUR", "total", "kWh", "total", "EUR"]
    assert rows[1].split() == ["2026-11-20", "12.000", "3.60", "12.000", "3.60"], out
    assert rows[2].split() == ["2026-11-21", "12.000", "3.60", "12.000", "3.60"], out
    out = run(capsys, "energy", "--from", "2026-11-20", "--to", "2026-11-22", "--timezone",
              "UTC", "--tariff", "0.5").out
    rows = out.splitlines()  # UTC days: each starts an hour into Berlin's
    assert rows[1].split()[:3] == ["2026-11-20", "12.000", "6.00"], out
    assert rows[1].split()[:3] != rows[0].split()[:3]


def test_plug_and_ota_log_in_as_the_operator_with_the_configs_broker(config, tmp_path):
    """The config names the collector's login; plug and ota take its broker as
    wattlog-operator, with the config's operator password file; --broker wins (its password
    then comes from --password-file or the environment); ota's plugs are the config's
    directory's."""
    parse = cli.build_parser().parse_args
    s, url, password = common.operator(parse(["plug", "status", "plug-1"]))
    assert (url, password) == ("mqtt://wattlog-operator@10.0.0.5:1884", "operator-secret")
    assert s.tariff == {"price": 0.30, "currency": "EUR"}
    (tmp_path / "other.password").write_text("other-secret\n")
    _, url, password = common.operator(parse(["ota", "--all", "--broker", "mqtt://me@10.0.0.6",
                                            "--password-file",
                                            str(tmp_path / "other.password")]))
    assert (url, password) == ("mqtt://me@10.0.0.6", "other-secret")
    assert common.provisioned_dir(s) == str(config.parent)


def test_without_the_environment_the_default_path_is_read_when_it_is_there(
        tmp_path, data, monkeypatch):
    """/etc/wattlog/wattlog.toml (here moved into tmp_path) is read when it exists; when it
    does not, the verbs run on flags and defaults; when this user may not read it, they run so
    and say once why its settings are not used."""
    monkeypatch.delenv("WATTLOG_CONFIG")
    default = tmp_path / "default.toml"
    monkeypatch.setattr(settings, "DEFAULT_PATH", str(default))
    assert settings.for_command(None) == (settings.Settings(), None)  # not there
    default.write_text('data = "%s"\n' % data)
    s, note = settings.for_command(None)
    assert (s.data_dir, s.path, note) == (str(data), str(default), None)
    default.unlink()
    default.mkdir()  # there, but not a file this user can read
    s, note = settings.for_command(None)
    assert s == settings.Settings() and note == (
        "%s cannot be read (Is a directory), so its settings are not used: run as root (sudo),"
        " or give --config FILE" % default)


def test_a_config_that_is_named_must_load(tmp_path, monkeypatch, capsys):
    """--config or $WATTLOG_CONFIG naming a file that is not there: one line, exit 78."""
    monkeypatch.setenv("WATTLOG_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(SystemExit) as e:
        cli.main(["feeds"])
    assert e.value.code == 78
    assert capsys.readouterr().err == "wattlog feeds: cannot read the config file %s (No such " \
                                      "file or directory)\n" % (tmp_path / "nope.toml")
    with pytest.raises(SettingsError, match="cannot read the config file .*other.toml"):
        settings.for_command(str(tmp_path / "other.toml"))


def test_collect_without_a_config_nor_data_says_which_config_it_looked_for(tmp_path,
                                                                          monkeypatch):
    monkeypatch.delenv("WATTLOG_CONFIG")
    monkeypatch.setattr(settings, "DEFAULT_PATH", str(tmp_path / "none.toml"))
    with pytest.raises(cli.CliError, match="no config file at %s: give --config FILE"
                       % (tmp_path / "none.toml")):
        cli.cmd_collect(cli.build_parser().parse_args(["collect"]))


@pytest.mark.parametrize("argv, said", [
    (["--start=99999999999999"], "--start 99999999999999 is not a time a feed can hold (1970 "
                                 "to 2106)"),
    (["--end=99999999999999"], "--end 99999999999999 is not a time a feed can hold"),
    (["--start=-99999999999"], "--start -99999999999 is not a time a feed can hold"),
    (["--start=9999-12-31"], "--start 9999-12-31 is not a time a feed can hold"),
    (["--start=tomorrow"], "--start: 'tomorrow' is not a time"),
    (["--start", str(T0 + 20), "--end", str(T0)], "--start 2026-11-20T11:20:20+01:00 is not "
                                                  "before --end 2026-11-20T11:20:00+01:00"),
])
def test_export_refuses_times_it_cannot_use_in_one_line_with_status_2(config, capsys, argv,
                                                                       said):
    """Issue 21 item 6: --start=99999999999999 was a traceback (year out of range), start
    after end printed "no data" with exit status 0."""
    with pytest.raises(SystemExit) as e:
        cli.main(["export", "--feed", "plug-2/power"] + argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and said in err, err
    assert "Traceback" not in err


def test_export_to_a_far_end_prints_only_the_data(config, capsys):
    """--end years ahead printed an empty row per slot up to it (3.4 million rows for
    2027-12-31, 10 minutes of them for the year 5138): without --fill only the slots with data
    come out; --fill is asked for and gets every slot."""
    out = run(capsys, "export", "--feed", "plug-2/power", "--end=2106-01-01").out
    assert out.splitlines() == ["time,power_W", "%d,100.5" % T0, "%d,229.26" % (T0 + 20)]
    out = run(capsys, "export", "--feed", "plug-2/power", "--start", str(T0), "--end",
              str(T0 + 3600), "--fill").out
    assert len(out.splitlines()) == 1 + 360 and out.splitlines()[-1] == "%d," % (T0 + 3590)
    doc = json.loads(run(capsys, "export", "--feed", "plug-2/power", "--format", "json",
                         "--end=2040-01-01").out)
    assert doc["data"] == [[T0, 100.5], [T0 + 20, 229.26]]
    assert os.environ["WATTLOG_CONFIG"] == str(config)
