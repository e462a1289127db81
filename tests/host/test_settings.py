"""test_settings.py - the collector's config file (settings.py): what provision writes loads,
every refusal is one line naming the file and the key, flags win over the file, and no
secret ever appears in a message. Real files throughout; the CLI runs in its own process where
the user would see its output."""

import json
import os
import subprocess
import sys

import pytest

from wattlog import cli, service, settings
from wattlog.cli import common
from wattlog.fleet.provision import COLLECTOR, OPERATOR, password_file, provision
from wattlog.systemd import CONFIG_EXIT, credentials
from wattlog.settings import Settings, SettingsError

SECRET = "hunter2-not-to-be-shown"


@pytest.fixture
def etc(tmp_path):
    """A provisioned directory, as /etc/wattlog is after `wattlog provision`."""
    d = tmp_path / "etc"
    provision(str(d), ["plug-a"], "192.168.1.10", progress=lambda text: None)
    return d


def config(tmp_path, text, name="wattlog.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_config_provision_writes_loads_with_its_files_beside_it(etc):
    """provision's wattlog.toml names its neighbours by relative name; they are read from the
    config's directory, and every file it names exists and holds a secret."""
    s = settings.load(str(etc / "wattlog.toml"))
    assert s.broker == "mqtt://wattlog-collector@192.168.1.10:1883"
    assert s.password_file == password_file(str(etc), COLLECTOR)
    assert s.operator_password_file == password_file(str(etc), OPERATOR)
    assert s.http_token_file == str(etc / "http.token")
    assert (s.http_listen, s.http_read_open, s.data_dir) == ("127.0.0.1:8080", True,
                                                             "/var/lib/wattlog")
    assert s.path == str(etc / "wattlog.toml") and s.tariff is None


def test_provision_makes_the_token_once_and_never_overwrites_the_config(etc):
    """The HTTP token is made once (0600 from creation) and kept; a config the user edited is
    left as it is by a later provision run (it used to have no config at all)."""
    token = (etc / "http.token").read_text()
    assert len(token.strip()) >= 32 and (etc / "http.token").stat().st_mode & 0o777 == 0o600
    assert (etc / "wattlog.toml").stat().st_mode & 0o777 == 0o600
    edited = (etc / "wattlog.toml").read_text() + '\n[tariff]\nprice = 0.30\n'
    (etc / "wattlog.toml").write_text(edited)
    provision(str(etc), ["plug-b"], "192.168.1.10", progress=lambda text: None)
    assert (etc / "http.token").read_text() == token
    assert (etc / "wattlog.toml").read_text() == edited
    assert settings.load(str(etc / "wattlog.toml")).tariff == {"price": 0.30}


def test_every_key_and_its_type(tmp_path):
    """Intervals take seconds or durations; http keys land in their fields; the [tariff]
    table is passed on as read."""
    (tmp_path / "pw").write_text("secret\n")
    (tmp_path / "tok").write_text("t" * 40 + "\n")
    s = settings.load(config(tmp_path, """
broker = "mqtts://wattlog-collector@pi.local"
password_file = "pw"
ca = "pw"
data = "data"
base_topic = "home"
client_id = "c1"
commit_interval = 60
summary_interval = "2h"
status_interval = 5.5
max_future = "1h"
max_age = "36h"
timezone = "Europe/Berlin"
[http]
listen = "[::1]:8080"
read_open = false
token_file = "tok"
operator_password_file = "pw"
[tariff]
currency = "EUR"
day_price = 0.32
night_price = 0.22
night_start = "22:00"
night_end = "06:00"
"""))
    assert s == Settings(
        broker="mqtts://wattlog-collector@pi.local", password_file=str(tmp_path / "pw"),
        ca=str(tmp_path / "pw"), data_dir=str(tmp_path / "data"), base_topic="home",
        client_id="c1", commit_interval_s=60.0, summary_interval_s=7200.0,
        status_interval_s=5.5, max_future_s=3600, max_age_s=129600.0, timezone="Europe/Berlin",
        http_listen="[::1]:8080", http_read_open=False, http_token_file=str(tmp_path / "tok"),
        operator_password_file=str(tmp_path / "pw"),
        tariff={"currency": "EUR", "day_price": 0.32, "night_price": 0.22,
                "night_start": "22:00", "night_end": "06:00"}, path=str(tmp_path / "wattlog.toml"))
    assert type(s.max_future_s) is int  # the ingest compares it with whole seconds
    assert Settings().http_listen is None and Settings().timezone == "UTC"  # no file: no HTTP


REFUSALS = [
    ('brokr = "mqtt://h"\n', "unknown key 'brokr' (known: base_topic, broker,"),
    ('password = "%s"\n' % SECRET, "unknown key 'password'"),
    ('[http]\nlisten = "127.0.0.1:8080"\ntoken = "%s"\n' % SECRET,
     "unknown key 'http.token' in [http]"),
    ('commit_interval = "soon"\n', "commit_interval must be seconds (a number, or a duration "
                                   "such as 90s, 15m, 36h, 7d), not text"),
    ("commit_interval = -5\n", "commit_interval must be seconds"),
    ("commit_interval = true\n", "commit_interval must be seconds"),
    ("data = 5\n", "data must be a directory, not a whole number"),
    ('password_file = ["%s"]\n' % SECRET, "password_file must be a file name, not a list"),
    ('[http]\nread_open = "yes"\n', "http.read_open must be true or false, not text"),
    ('[http]\nlisten = "8080"\n', "http.listen must be HOST:PORT"),
    ('http = "0.0.0.0"\n', "http must be a table ([http]), not text"),
    ('timezone = "Europe/Berln"\n', "timezone 'Europe/Berln' is not a time zone"),
    ("timezone = 1\n", "timezone must be a time zone such as Europe/Berlin or UTC, not a whole"),
    ('[tariff]\nprize = 0.3\n', "tariff key 'prize' is unknown"),
    ('broker = "http://me:%s@h"\n' % SECRET, "broker 'http://me:***@h': expected mqtt://"),
    ('broker = "mqtt://h"\nbroker = "mqtt://g"\n', "is not valid TOML: Cannot overwrite a value"),
    ('password_file = "missing.password"\n', "password_file %s cannot be read (No such file "
                                              "or directory)"),
    ('password_file = "."\n', "password_file %s cannot be read (Is a directory)"),
    ('password_file = "empty"\n', "password_file %s is empty"),
    ('[http]\ntoken_file = "short"\n', "http.token_file %s holds a token shorter than 16 "
                                        "characters: make one with wattlog provision"),
    ('[http]\noperator_password_file = "binary"\n', "http.operator_password_file %s is not "
                                                      "UTF-8 text"),
    ('ca = "nowhere/ca.crt"\n', "ca %s cannot be read (No such file or directory)"),
    ('[influx]\nurl = "influx://h/db"\nurll = "x"\n', "unknown key 'influx.urll' in [influx] "
                                                     "(known: names, password_file, schema,"),
    ('[influx]\nschema = "sp3s"\n', '[influx] has no url: give url = "influx://HOST:8086/'),
    ('influx = "influx://h/db"\n', "influx must be a table ([influx]), not text"),
    ('[influx]\nurl = "http://h/db"\n', "influx: 'http://h/db' is not an InfluxDB URL"),
    ('[influx]\nurl = "influx://me:%s@h/db"\n' % SECRET, "influx: the InfluxDB URL "
                                                         "influx://me:***@h/db holds a password"),
    ('[influx]\nurl = "influx://h/db"\nschema = "sp4s"\n', "influx: the InfluxDB schema 'sp4s' "
                                                          "is not one of default, sp3s"),
    ('[influx]\nurl = "influx://h/db"\ntimeout = 0\n', "influx.timeout must be seconds"),
    ('[influx]\nurl = "influx://h/db"\nnames = "washer"\n', "influx.names must be a table "
                                                           "([influx.names])"),
    ('[influx]\nurl = "influx://h/db"\n[influx.names]\n"Plug A" = "washer"\n',
     "influx.names.Plug A must be a node id"),
    ('[influx]\nurl = "influx://h/db"\n[influx.names]\nplug-a = 5\n',
     "influx.names.plug-a must be a node id (1-32 of a-z, 0-9, _ and -) = a measurement name"),
    ('[influx]\npassword_file = "empty"\nurl = "influx://u@h/db"\n',
     "influx.password_file %s is empty"),
    ('[influx]\npassword_file = "nope"\nurl = "influx://u@h/db"\n',
     "influx.password_file %s cannot be read (No such file or directory)"),
]


@pytest.mark.parametrize("text, words", REFUSALS, ids=[w.split()[0] for _, w in REFUSALS])
def test_a_bad_config_is_refused_in_one_line_naming_the_file_and_the_key(tmp_path, text, words):
    """Unknown keys (a typo would be a setting silently not set), wrong types, a time zone
    zoneinfo does not know, an unreadable or empty credentials file: one line, naming the file
    and the key (and the file it names), never the secret a wrong key might hold."""
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "short").write_text("abc\n")
    (tmp_path / "binary").write_bytes(b"\xff\xfe\n")
    path = config(tmp_path, text)
    named = text.split('"')[1] if "%s" in words else None
    with pytest.raises(SettingsError) as e:
        settings.load(path)
    message = str(e.value)
    assert message.startswith(path + ": ") or message.startswith(path + " is not"), message
    assert (words % os.path.join(str(tmp_path), named) if named else words) in message, message
    assert "\n" not in message and SECRET not in message, message


def test_the_influx_table_sets_the_sink(tmp_path):
    """[influx] and [influx.names] land in their fields, the password file read from the
    config's directory (and handed to the service by systemd like the others); the
    collector's sink is made from them (influx.py's own objects)."""
    (tmp_path / "influx.password").write_text("secret\n")
    path = config(tmp_path, """
data = "data"
[influx]
url = "influx://wattlog@db.local:8087/power?rp=year"
schema = "sp3s"
password_file = "influx.password"
timeout = "30s"
[influx.names]
plug-a = "Washing machine, left"
""")
    s = settings.load(path)
    assert (s.influx_url, s.influx_schema, s.influx_password_file, s.influx_timeout_s,
            s.influx_names) == ("influx://wattlog@db.local:8087/power?rp=year", "sp3s",
                                str(tmp_path / "influx.password"), 30.0,
                                {"plug-a": "Washing machine, left"})
    assert ("influx.password", str(tmp_path / "influx.password")) in credentials(s)  # systemd
    sink = service.sink(collect_settings(parse("--config", path)), None)  # no store read here
    assert (sink.writer.target.host, sink.writer.target.port, sink.writer.target.rp) == \
        ("db.local", 8087, "year")
    assert sink.schema.name == "sp3s" and sink.writer.timeout_s == 30.0
    assert sink.schema.series("plug-a", "power") == "Washing\\ machine\\,\\ left usage="
    assert Settings().influx_url is None and \
        service.sink(collect_settings(parse("--data", "d")), None) is None  # no table, no flag


def test_influx_flags_win_over_the_influx_table(tmp_path):
    """--influx, --influx-schema and --influx-timeout replace the config's; --influx-name
    wins for the node it names, the config's other names stay."""
    path = config(tmp_path, '[influx]\nurl = "influx://cfg/db"\nschema = "sp3s"\n'
                            'timeout = 30\n[influx.names]\nplug-a = "Washer"\nplug-b = "Fridge"\n')
    sink = service.sink(collect_settings(parse(
        "--config", path, "--data", str(tmp_path), "--influx", "influx://flag:9999/db2",
        "--influx-timeout", "3", "--influx-name", "plug-a=Dryer")), None)
    assert (sink.writer.target.host, sink.writer.target.port, sink.writer.target.database) == \
        ("flag", 9999, "db2")
    assert sink.writer.timeout_s == 3.0 and sink.schema.name == "sp3s"
    assert sink.schema.names == {"plug-a": "Dryer", "plug-b": "Fridge"}
    s = collect_settings(parse("--config", path, "--data", str(tmp_path), "--influx-schema",
                               "default"))
    assert service.sink(s, None).schema.name == "default"


def test_a_config_that_is_missing_or_not_toml_is_named(tmp_path):
    with pytest.raises(SettingsError, match=r"cannot read the config file .*nope.toml \(No such"):
        settings.load(str(tmp_path / "nope.toml"))
    with pytest.raises(SettingsError, match=r"wattlog.toml is not valid TOML: .*line 1"):
        settings.load(config(tmp_path, "broker = \n"))


def test_collect_refuses_a_bad_config_with_one_line_and_no_traceback(tmp_path):
    """What a user (or systemd's journal) sees: one line, exit status 78 (EX_CONFIG, which the
    unit does not restart on), no traceback, nothing written to the data directory."""
    path = config(tmp_path, 'data = "data"\ncommit_interval = "soon"\n')
    done = subprocess.run([sys.executable, "-m", "wattlog.cli", "collect", "--config", path],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == CONFIG_EXIT, done
    assert done.stderr == ("wattlog collect: %s: commit_interval must be seconds (a number, or "
                           "a duration such as 90s, 15m, 36h, 7d), not text\n" % path), done.stderr
    assert not (tmp_path / "data").exists()


def parse(*argv):
    return cli.build_parser().parse_args(["collect"] + list(argv))


def collect_settings(args):
    """What `wattlog collect` runs from (cli._settings, every file it reads checked)."""
    return common.command_settings(args, settings.FILES)


def test_a_flag_given_wins_over_the_config_and_the_config_over_the_default(tmp_path):
    """--commit-interval, --data and --broker given on the command line win; what they leave
    out comes from the config; what neither says is the default."""
    (tmp_path / "pw").write_text("from-the-config\n")
    path = config(tmp_path, 'broker = "mqtt://wattlog-collector@cfg"\npassword_file = "pw"\n'
                            'data = "/cfg/data"\ncommit_interval = 60\nbase_topic = "cfg"\n'
                            '[http]\nlisten = "127.0.0.1:8080"\n')
    s = collect_settings(parse("--config", path, "--commit-interval", "5",
                               "--data", "/flag/data", "--listen", "127.0.0.1:9999"))
    assert (s.commit_interval_s, s.data_dir, s.http_listen) == (5.0, "/flag/data",
                                                                "127.0.0.1:9999")
    assert (s.broker, s.base_topic, s.password_file) == ("mqtt://wattlog-collector@cfg", "cfg",
                                                         str(tmp_path / "pw"))
    assert (s.client_id, s.status_interval_s, s.max_future_s) == ("wattlog-collector", 60.0,
                                                                 3600)
    s = collect_settings(parse("--config", path))
    assert common.check_broker(s.broker, s.password_file) == "from-the-config"  # the config's file
    (tmp_path / "other").write_text("from-the-flag\n")
    s = collect_settings(parse("--config", path, "--password-file", str(tmp_path / "other")))
    assert common.check_broker(s.broker, s.password_file) == "from-the-flag"


def test_without_a_config_the_flags_and_defaults_are_as_before(tmp_path):
    s = collect_settings(parse("--data", str(tmp_path)))
    assert s == Settings(data_dir=str(tmp_path), path=os.environ["WATTLOG_CONFIG"])


def test_a_token_file_given_as_a_flag_is_checked_too(tmp_path):
    with pytest.raises(SettingsError, match="the command line: http.token_file .*nope cannot be "
                                            "read"):
        collect_settings(parse("--data", str(tmp_path), "--http-token-file",
                               str(tmp_path / "nope")))


def test_under_systemd_each_file_is_read_from_the_credentials_directory(tmp_path, monkeypatch):
    """systemd hands the service the config and each file it names (LoadCredential=, by file
    name) because the service user may not read /etc/wattlog: a config loaded from
    $CREDENTIALS_DIRECTORY reads its files there, whatever directory it names them in."""
    creds = tmp_path / "credentials"
    creds.mkdir()
    (creds / "wattlog-collector.password").write_text("pw\n")
    (creds / "http.token").write_text("t" * 32 + "\n")
    named = tmp_path / "etc" / "wattlog-collector.password"  # as written; never made: a test
    # reads nothing outside its folder (a machine may have /etc/wattlog: issue 21 item 18)
    path = config(creds, 'password_file = "%s"\ndata = "/var/lib/wattlog"\n[http]\n'
                         'token_file = "http.token"\n' % named)
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    s = settings.load(path)
    assert s.password_file == str(creds / "wattlog-collector.password")
    assert s.http_token_file == str(creds / "http.token") and s.data_dir == "/var/lib/wattlog"
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path / "elsewhere"))
    with pytest.raises(SettingsError, match="password_file %s cannot be read" % named):
        settings.load(path)  # not from there: the path as written


def test_no_default_password_or_token_exists(tmp_path):
    """Two provisioned directories share no secret: every password and the token are made
    fresh (issue 12 item 7: no default password exists)."""
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        provision(str(d), ["plug-a"], "h", progress=lambda text: None)
    ca, cb = (json.loads((d / "credentials.json").read_text()) for d in (a, b))
    assert not set(ca.values()) & set(cb.values())
    assert (a / "http.token").read_text() != (b / "http.token").read_text()


def test_the_tests_never_read_this_machines_config():
    """Every verb a test runs reads the session's empty config (tests/conftest.py), whatever
    /etc/wattlog holds on the machine that runs the tests (after the README's Pi install there,
    a test read the machine's config and failed): the default path is not consulted, and the
    processes a test starts inherit the same."""
    import tempfile
    path, named = settings.config_path()
    assert named and path != settings.DEFAULT_PATH
    assert os.path.realpath(path).startswith(os.path.realpath(tempfile.gettempdir()))
    child = subprocess.run([sys.executable, "-c", "from wattlog import settings; "
                            "print(settings.config_path()[0])"], capture_output=True, text=True,
                           check=True, timeout=60)
    assert child.stdout.strip() == path
