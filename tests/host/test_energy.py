"""test_energy.py - kWh and cost per plug per local day, week, month and year, from the energy
counter feeds the collector writes (made here through its own commit path): days of 23 and 25
hours when Berlin changes its clocks, a day/night tariff split at the night's local edges, a
counter reset counted from the new value, an outage counted where the next reading lands and a
short gap interpolated, empty periods null, ISO weeks, month and year ends, each plug's share,
readings not yet committed, and `wattlog energy` printing the same numbers as energy_table."""

import datetime
import zoneinfo

import numpy as np
import pytest

from wattlog import cli
from wattlog.store.commit import Committer
from wattlog.complaints import Complaints
from wattlog.energy import energy_table
from wattlog.periods import EnergyError, Tariff
from wattlog.store import open_reader

BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")
KWH_PER_SLOT = 0.01  # 3.6 kW at 10 s slots
HOUR = 3.6           # kWh an hour


def local(*args):
    return int(datetime.datetime(*args, tzinfo=BERLIN).timestamp())


def commit(data_dir, plugs, interval=10):
    """plugs: {node: (slot times, counter values in kWh)} through Committer.commit."""
    c = Committer(str(data_dir), Complaints())
    c.commit({(node, "energy"): tv for node, tv in plugs.items()},
             {node: interval for node in plugs})
    c.close(clean=True)


def steady(t0, t1, per_slot=KWH_PER_SLOT, base=100.0, interval=10):
    t = np.arange(t0, t1, interval)
    return t, base + per_slot * np.arange(len(t))


def row(table, node):
    return [p for p in table["plugs"] if p["node"] == node][0]


def by_label(table, node, key="kwh"):
    return dict(zip([p["label"] for p in table["periods"]], row(table, node)[key]))


@pytest.mark.parametrize("day, hours", [((2026, 3, 29), 23), ((2026, 10, 25), 25),
                                        ((2026, 3, 30), 24)])
def test_a_day_when_clocks_change_has_23_or_25_hours_of_energy(tmp_path, day, hours):
    """A steady 3.6 kW load gives 3.6 kWh per local hour: 82.8 kWh on the spring day, 90 on
    the autumn day, 86.4 on a plain one; the periods say 23, 25, 24 hours."""
    d = datetime.date(*day)
    t0 = local(d.year, d.month, d.day) - 86400
    commit(tmp_path, {"plug-a": steady(t0, t0 + 3 * 86400 + 3600)})
    midnight = local(d.year, d.month, d.day)
    table = energy_table(str(tmp_path), "day", "Europe/Berlin", None, start=midnight,
                         end=midnight + 3600, now=t0 + 4 * 86400)
    assert [p["hours"] for p in table["periods"]] == [hours]
    assert table["periods"][0]["label"] == d.isoformat()
    assert row(table, "plug-a")["kwh"][0] == pytest.approx(HOUR * hours, abs=1e-3)


def test_day_and_night_prices_split_at_the_nights_local_edges(tmp_path):
    """night 22:00-06:00: a plain day has 8 night hours and 16 day hours; the spring day has
    only 7 night hours (02:00-03:00 does not exist)."""
    t0 = local(2026, 3, 27)
    commit(tmp_path, {"plug-a": steady(t0 - 3600, t0 + 4 * 86400)})
    tariff = Tariff.from_settings({"currency": "EUR", "day_price": 0.32, "night_price": 0.22,
                                   "night_start": "22:00", "night_end": "06:00"})
    table = energy_table(str(tmp_path), "day", "Europe/Berlin", tariff, start=t0,
                         end=t0 + 3 * 86400 - 3600, now=t0 + 5 * 86400)
    night, day = by_label(table, "plug-a", "kwh_night"), by_label(table, "plug-a", "kwh_day")
    cost = by_label(table, "plug-a", "cost")
    assert night["2026-03-27"] == pytest.approx(8 * HOUR, abs=1e-3)
    assert day["2026-03-27"] == pytest.approx(16 * HOUR, abs=1e-3)
    assert cost["2026-03-27"] == pytest.approx(8 * HOUR * 0.22 + 16 * HOUR * 0.32, abs=1e-3)
    assert night["2026-03-29"] == pytest.approx(7 * HOUR, abs=1e-3)
    assert day["2026-03-29"] == pytest.approx(16 * HOUR, abs=1e-3)
    assert table["totals"]["cost"] == row(table, "plug-a")["cost"]
    assert table["tariff"]["night_start"] == "22:00"


def test_a_counter_that_goes_down_is_a_reset_counted_from_the_new_value(tmp_path):
    """100 kWh and rising, then 0.5 kWh and rising (a new plug under the old id): the drop
    adds nothing, both halves' increases count, and the table says a reset was seen."""
    t0 = local(2026, 5, 4)
    t, v = steady(t0 - 600, t0 + 86400 + 600)
    half = len(t) // 2
    v[half:] = 0.5 + KWH_PER_SLOT * np.arange(len(t) - half)
    commit(tmp_path, {"plug-a": (t, v)})
    table = energy_table(str(tmp_path), "day", "Europe/Berlin", None, start=t0,
                         end=t0 + 86400, now=t0 + 2 * 86400)
    assert row(table, "plug-a")["kwh"][0] == pytest.approx(8640 * KWH_PER_SLOT - KWH_PER_SLOT,
                                                           abs=1e-3)
    assert any("reset" in note for note in table["notes"])


def test_an_outage_lands_on_the_next_reading_and_a_short_gap_is_interpolated(tmp_path):
    """plug-a misses 23:00-01:00: the two hours' energy (the counter kept counting) goes to the
    day of the reading after the outage. plug-b misses 4 slots around midnight: the counter at
    midnight is interpolated, so each day gets its own share. plug-c is silent from June 1
    12:00 to June 3: June 2 is null, June 3 gets the 36 hours of the outage besides its own,
    also when the question starts inside the outage. The total counts only days with data."""
    d0 = local(2026, 6, 1)
    t, v = steady(d0 - 86400, d0 + 3 * 86400)
    keep = (t < d0 + 23 * 3600) | (t >= d0 + 25 * 3600 - 10)  # readings land at 23:00, 01:00
    t2, v2 = steady(d0 - 86400, d0 + 3 * 86400)
    keep2 = (t2 < d0 + 86400 - 30) | (t2 >= d0 + 86400 + 10)
    t3, v3 = steady(d0 - 86400, d0 + 3 * 86400)
    keep3 = (t3 < d0 + 12 * 3600) | (t3 >= d0 + 2 * 86400)   # nothing from June 1 12:00
    commit(tmp_path, {"plug-a": (t[keep], v[keep]), "plug-b": (t2[keep2], v2[keep2]),
                      "plug-c": (t3[keep3], v3[keep3])})
    table = energy_table(str(tmp_path), "day", "Europe/Berlin", None, start=d0,
                         end=d0 + 3 * 86400, now=d0 + 4 * 86400)
    a, b, c = (by_label(table, n) for n in ("plug-a", "plug-b", "plug-c"))
    assert a["2026-06-01"] == pytest.approx(23 * HOUR, abs=1e-3)
    assert a["2026-06-02"] == pytest.approx(25 * HOUR, abs=1e-3)
    assert b["2026-06-01"] == pytest.approx(24 * HOUR, abs=1e-3)
    assert b["2026-06-02"] == pytest.approx(24 * HOUR, abs=1e-3)
    assert c["2026-06-02"] is None
    assert c["2026-06-03"] == pytest.approx(60 * HOUR, abs=1e-3)  # the outage lands on June 3
    assert row(table, "plug-c")["share"][1] is None
    assert table["totals"]["kwh"][1] == pytest.approx(a["2026-06-02"] + b["2026-06-02"], abs=1e-3)
    # asked from inside the outage, the reading before it is still found
    later = energy_table(str(tmp_path), "day", "Europe/Berlin", None, start=d0 + 86400,
                         end=d0 + 3 * 86400, now=d0 + 4 * 86400)
    assert by_label(later, "plug-c")["2026-06-03"] == pytest.approx(60 * HOUR, abs=1e-3)


def test_periods_with_no_data_are_null_not_zero(tmp_path):
    t0 = local(2026, 7, 6)
    commit(tmp_path, {"plug-a": steady(t0, t0 + 86400)})
    table = energy_table(str(tmp_path), "day", "Europe/Berlin", Tariff.parse("0.30"),
                         start=t0 - 2 * 86400, end=t0 + 3 * 86400, now=t0 + 5 * 86400)
    kwh = row(table, "plug-a")["kwh"]
    assert kwh[0] is None and kwh[1] is None and kwh[3] is None and kwh[4] is None
    assert kwh[2] == pytest.approx(8639 * KWH_PER_SLOT, abs=1e-3)
    assert row(table, "plug-a")["cost"][0] is None and table["totals"]["kwh"][0] is None
    assert table["totals"]["cost"][2] == pytest.approx(0.3 * kwh[2], abs=1e-3)


def test_weeks_start_on_monday_and_months_and_years_at_their_first_midnight(tmp_path):
    """Hourly readings across Sunday 2026-12-27 .. Sunday 2027-01-10: ISO weeks 2026-W52,
    2026-W53, 2027-W01; months and years split at Berlin's midnight of the 1st."""
    t0 = local(2026, 12, 20)
    commit(tmp_path, {"plug-a": steady(t0, local(2027, 1, 11), per_slot=1.0, interval=3600)},
           interval=3600)
    path = str(tmp_path)
    start, end, now = local(2026, 12, 27), local(2027, 1, 11), local(2027, 2, 1)
    weeks = energy_table(path, "week", "Europe/Berlin", None, start=start, end=end, now=now)
    assert [p["label"] for p in weeks["periods"]] == ["2026-W52", "2026-W53", "2027-W01"]
    assert weeks["periods"][1]["start"] == local(2026, 12, 28)
    assert row(weeks, "plug-a")["kwh"][1:3] == [pytest.approx(168.0), pytest.approx(168.0)]
    months = energy_table(path, "month", "Europe/Berlin", None, start=start, end=end, now=now)
    assert [p["label"] for p in months["periods"]] == ["2026-12", "2027-01"]
    years = energy_table(path, "year", "Europe/Berlin", None, start=start, end=end, now=now)
    assert [p["label"] for p in years["periods"]] == ["2026", "2027"]
    assert years["periods"][1]["start"] == local(2027, 1, 1)
    # the first reading lands at 2026-12-20 01:00, 287 hours before the year ends; the last
    # at 2027-01-11 00:00 (the slot stamped 2027-01-10 23:00 ends then)
    assert row(years, "plug-a")["kwh"] == [pytest.approx(287.0), pytest.approx(240.0)]
    assert row(months, "plug-a")["kwh"] == row(years, "plug-a")["kwh"]


def test_each_plug_has_its_share_of_the_total(tmp_path):
    t0 = local(2026, 8, 3)
    commit(tmp_path, {"plug-a": steady(t0 - 60, t0 + 86400 + 60),
                      "plug-b": steady(t0 - 60, t0 + 86400 + 60, per_slot=3 * KWH_PER_SLOT)})
    table = energy_table(str(tmp_path), "day", "Europe/Berlin", None, start=t0,
                         end=t0 + 86400, now=t0 + 2 * 86400)
    assert row(table, "plug-a")["share"] == [pytest.approx(0.25)]
    assert row(table, "plug-b")["total_share"] == pytest.approx(0.75)
    assert row(table, "plug-a")["total_kwh"] == pytest.approx(24 * HOUR, abs=1e-3)
    assert table["totals"]["total_kwh"] == pytest.approx(
        row(table, "plug-a")["total_kwh"] + row(table, "plug-b")["total_kwh"], abs=1e-5)


def test_readings_not_yet_committed_count(tmp_path):
    """The store's pending(node, channel) readings are laid over the stored slots: the day
    that has only pending readings has energy."""
    t0 = local(2026, 9, 7)
    commit(tmp_path, {"plug-a": steady(t0, t0 + 86400)})
    pt, pv = steady(t0 + 86400, t0 + 86400 + 3600, base=100 + 8640 * KWH_PER_SLOT)
    asked = []

    def pending(node, channel):
        asked.append((node, channel))
        return (pt, pv) if node == "plug-a" else None
    store = open_reader(str(tmp_path))
    store.pending = pending  # a collector's store, whose readings wait for their commit
    table = energy_table(store, "day", "Europe/Berlin", None, start=t0,
                         end=t0 + 2 * 86400, now=t0 + 2 * 86400)
    assert ("plug-a", "energy") in asked
    assert row(table, "plug-a")["kwh"][1] == pytest.approx(360 * KWH_PER_SLOT, abs=1e-3)
    without = energy_table(str(tmp_path), "day", "Europe/Berlin", None, start=t0,
                           end=t0 + 2 * 86400, now=t0 + 2 * 86400)
    assert row(without, "plug-a")["kwh"][1] is None


def test_wattlog_energy_prints_the_numbers_of_energy_table(tmp_path, capsys):
    t0 = local(2026, 3, 28)
    commit(tmp_path, {"plug-a": steady(t0, t0 + 3 * 86400),
                      "plug-b": steady(t0 + 3600, t0 + 2 * 86400, per_slot=0.003)})
    args = ["energy", "--data", str(tmp_path), "--timezone", "Europe/Berlin", "--tariff",
            "day=0.32,night=0.22,night_hours=22-06", "--from", "2026-03-29",
            "--to", "2026-04-01"]
    assert cli.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    table = energy_table(str(tmp_path), "day", "Europe/Berlin",
                         Tariff.parse("day=0.32,night=0.22,night_hours=22-06"),
                         start=local(2026, 3, 29), end=local(2026, 4, 1))
    body = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    for k, period in enumerate(table["periods"]):
        cells = body[period["label"]]
        cells = cells[1:] if cells[0].startswith("(") else cells
        want = []
        for line in table["plugs"] + [table["totals"]]:
            for value, digits in ((line["kwh"][k], 3), (line["cost"][k], 2)):
                want.append("-" if value is None else "%.*f" % (digits, value))
        assert cells == want
    assert body["total"] == ["%.*f" % (d, v) for p in table["plugs"] + [table["totals"]]
                             for v, d in ((p["total_kwh"], 3), (p["total_cost"], 2))]
    assert "(23h)" in "\n".join(lines)


@pytest.mark.parametrize("settings, words", [
    ({"price": 0.3, "night_price": 0.2}, "both price and night_price"),
    ({"day_price": 0.3, "night_price": 0.2, "night_start": "22:00"}, "lacks night_end"),
    ({"price": "cheap"}, "price 'cheap' is not a price"),
    ({"price": -1}, "is not a price"),
    ({"prise": 0.3}, "'prise' is unknown"),
    ({"day_price": 0.3, "night_price": 0.2, "night_start": "25:00", "night_end": "06:00"},
     "night_start '25:00' is not a time of day"),
    ({"day_price": 0.3, "night_price": 0.2, "night_start": "22:00", "night_end": "22:00"},
     "both 22:00"),
])
def test_a_wrong_tariff_is_refused_naming_the_key(settings, words):
    with pytest.raises(EnergyError, match=words):
        Tariff.from_settings(settings)


def test_bad_questions_are_refused_in_words(tmp_path, capsys):
    commit(tmp_path, {"plug-a": steady(local(2026, 1, 5), local(2026, 1, 6))})
    with pytest.raises(EnergyError, match="not a time zone"):
        energy_table(str(tmp_path), "day", "Mars/Olympus", None)
    with pytest.raises(EnergyError, match="by must be one of"):
        energy_table(str(tmp_path), "hour", "UTC", None)
    with pytest.raises(EnergyError, match="must come after"):
        energy_table(str(tmp_path), "day", "UTC", None, start=10**9, end=10**9 - 5)
    with pytest.raises(SystemExit) as e:  # a value given on the command line: status 2
        cli.main(["energy", "--data", str(tmp_path), "--tariff", "x=1"])
    assert e.value.code == 2 and capsys.readouterr().err.startswith(
        "wattlog energy: tariff 'x=1'")
