"""test_runs.py - the appliances' runs (host/wattlog/runs/) found from simulated appliances with
known truth (lib/wattsim/truth.py): a washer with pauses, a dishwasher with a long low-power
drying, a fridge with defrosts, a heat pump, a tv in standby and on, each measured with a
meter's noise and lost slots, sent as a plug sends them, taken by the collector's Store and
read by the runs part through the storage interface, as the collector's loop does.
"""

import json
import time

import numpy as np
import pytest

from appliances import IV, send, slots_w, truth_runs
from wattlog.complaints import Complaints
from wattlog.periods import Tariff
from wattlog.runs import check
from wattlog.runs.part import Runs
from wattlog.runs.rebuild import rebuild
from wattlog.runs.report import health, report, text
from wattlog.store import open_reader
from wattlog.store.files import Store
from wattlog.settings import _seconds

DAYS = 3
D0 = (int(time.time()) // 86400 - DAYS) * 86400   # a UTC midnight, DAYS days back
LEARN_S = 12 * 3600     # a new plug's first hours: its levels and cycling are being learned
PLUGS = {"washer": "washer", "dishwasher": "dishwasher", "fridge": "fridge",
         "heatpump": "heatpump", "tv": "tv", "idle": "constant:2"}
EVER = {"event_max_age_s": 100 * 86400}  # events for these days-old runs too


def part(store, data, options=None, tariff=None):
    """The runs part, taking each slot as it is at once: these readings come whole, in
    order (test_a_missing_slot_waits_for_its_resend tests the wait)."""
    return Runs(store, data, options, tariff, hole_wait_s=0)


def store_at(data):
    store = Store(str(data), Complaints(), max_age_s=40 * 86400)
    store.recover({})
    return store


def feed(store, runs, plugs, start, end, missing=0.01, seed=1, out=None, lost=None):
    """Each plug's readings of [start, end), an hour at a time, the runs part ticked after
    each hour and the store committed every 6 h; what the part published, in `out`, and the
    times of each plug's lost slots, in `lost` ({node: set}). Each hour's noise and lost
    slots are drawn for the whole hour, so the readings are the same however the span is
    cut."""
    a = start
    while a < end:
        hour = a - a % 3600
        b = min(hour + 3600, end)
        for k, (node, spec) in enumerate(plugs.items()):
            w = slots_w(spec, hour, hour + 3600, np.random.default_rng((seed, k, hour)),
                        missing)[(a - hour) // IV:(b - hour) // IV]
            send(store, node, a, w, (a - D0) // IV, take=runs.take)
            if lost is not None:
                lost.setdefault(node, set()).update(a + IV * np.flatnonzero(np.isnan(w)))
        tick(runs, out)
        if b % (6 * 3600) == 0:
            store.commit()
        a = b


def tick(runs, out=None):
    """Ticks until every plug's slots are read (the collector ticks every turn of its loop)."""
    while True:
        said = runs.tick()
        if out is not None:
            out.extend(said)
        if not runs.behind:
            return


def matched(found, want, spec=None, lost=()):
    """Found runs against the truth, both after the learning hours: (missing, extra, worst
    start error s, worst end error s, worst kWh error as a share of 1 %).

    The kWh error of a run is measured against 1 % of its truth plus what no meter reading
    tells: a slot lost at one of its edges (the slot just before or after its start or its
    end, `lost`) may have held anything from standby to the run's peak (a fridge's start is
    its inrush), and measure.py counts half the edge slot for it; so each such slot adds one
    slot at the run's true peak power (`spec`'s noiseless slots) to what the run may be off
    by. On a fridge's 72-slot cycle that slot alone is up to 2 %."""
    found = [r for r in found if r["start"] >= D0 + LEARN_S]
    want = [r for r in want if r[0] >= D0 + LEARN_S]
    if len(found) != len(want):
        return [(a, b) for a, b, _ in want], [(r["start"], r["end"]) for r in found], None, None, None
    starts = max((abs(r["start"] - a) for r, (a, _, _) in zip(found, want)), default=0)
    ends = max((abs(r["end"] - b) for r, (_, b, _) in zip(found, want)), default=0)

    def allowed_kwh(a, b, k):
        edges = len({a - IV, a, b - IV, b}.intersection(lost))
        peak_w = float(np.max(slots_w(spec, a, b))) if edges else 0.0
        return 0.01 * k + edges * peak_w * IV / 3.6e6

    kwh = max((abs(r["kwh"] - k) / allowed_kwh(a, b, k) * 0.01
               for r, (a, b, k) in zip(found, want)), default=0)
    return [], [], starts, ends, kwh


@pytest.fixture(scope="module")
def three_days(tmp_path_factory):
    data = tmp_path_factory.mktemp("runs") / "data"
    store = store_at(data)
    runs = part(store, str(data), {"events": True, **EVER}, Tariff(price=0.30))
    said = []
    lost = {}
    feed(store, runs, PLUGS, D0, D0 + DAYS * 86400, out=said, lost=lost)
    store.commit()
    yield store, runs, data, said, lost
    store.close()


@pytest.mark.parametrize("node", ["washer", "dishwasher", "fridge", "heatpump", "tv"])
def test_the_runs_found_are_the_runs_made(three_days, node):
    """With 1 % noise and 1 % of the slots lost: every run the appliance made is found and
    no other, its start and end within one slot of the truth and its kWh within 1 % (and
    what a slot lost at its edge may have held: matched()'s docstring): the
    washer's soak and pauses and the dishwasher's still drying do not split a run, the
    fridge's door light is no run and each defrost's heater and recovery are runs of their
    own."""
    store, runs, _, _, lost = three_days
    want = truth_runs(PLUGS[node], D0, D0 + DAYS * 86400)
    missing, extra, starts, ends, kwh = matched(runs.finished[node], want, PLUGS[node],
                                                lost[node])
    assert not missing and not extra, (missing, extra)
    assert starts <= IV and ends <= IV and kwh < 0.01, (starts, ends, kwh)
    assert len(want) >= {"fridge": 100, "heatpump": 40}.get(node, 3)


def test_no_run_on_standby_noise(three_days):
    """A plug that only ever stands by (2 W with its meter's noise) has no runs, and says it
    has seen no working level."""
    _, runs, _, _, _ = three_days
    assert runs.finished.get("idle", []) == []
    assert "no working level" in runs.learned("idle")["said"]


def test_no_run_when_a_relay_switches_a_standby_off_and_on(tmp_path):
    """A plug whose appliance stands by at 2 W, its relay off (0 W) for hours at a time: two
    levels, but no working one (nothing 5 W above standby), so no runs."""
    store = store_at(tmp_path)
    runs = part(store, str(tmp_path))
    w = np.where((np.arange(3 * 8640) // 1800) % 2 == 0, 2.0, 0.0)
    w += np.random.default_rng(3).normal(0.0, 0.05, len(w)) * (w > 0)
    send(store, "radio", D0, np.round(w, 1), take=runs.take)
    store.commit()
    tick(runs)
    assert runs.finished["radio"] == []


def test_a_pause_inside_a_wash_does_not_split_it(three_days):
    """Each wash holds its 6 min soak, below the run's stop level, and is one run."""
    store, runs, _, _, _ = three_days
    stop_w = runs.learned("washer")["thresholds"]["stop_w"]
    entry = store.lookup("washer/power")
    grid = store.feed(entry)
    for run in runs.finished["washer"]:
        w = store.read(entry, grid, grid.slot(run["start"]), grid.slot(run["end"]))
        quiet = np.flatnonzero(~(w > stop_w))
        longest = max((len(g) for g in np.split(quiet, np.flatnonzero(np.diff(quiet) > 1) + 1)),
                      default=0)
        assert longest * IV >= 5 * 60


def test_what_was_learned_is_said(three_days):
    """Each plug's levels, in words: the washer's standby under 1 W, the fridge cycling."""
    _, runs, _, _, _ = three_days
    said = runs.learned("fridge")["said"]
    assert said.startswith("fridge (other): standby 2") and "cycling" in said, said
    assert "ends after 3 min" in said
    assert "ends after 20 min" in runs.learned("washer")["said"]


def test_each_event_once_with_its_run(three_days):
    """run_started and run_finished once per run, the finished one with the run's kWh and
    cost as logged; the run state retained."""
    _, runs, _, said, _ = three_days
    events = [json.loads(p) for t, p, r in said if t == "wattlog/washer/event"]
    assert not any(r for t, p, r in said if t.endswith("/event"))
    started = [e["start"] for e in events if e["event"] == "run_started"]
    finished = [e for e in events if e["event"] == "run_finished"]
    assert started == [r["start"] for r in runs.finished["washer"]]
    assert [(e["start"], e["kwh"], e["cost"]) for e in finished] == \
        [(r["start"], r["kwh"], r["cost"]) for r in runs.finished["washer"]]
    assert abs(finished[0]["cost"] - finished[0]["kwh"] * 0.30) < 1e-6
    states = [json.loads(p)["state"] for t, p, r in said if t == "wattlog/washer/run" and r]
    assert {"running", "paused", "idle"} <= set(states) and states[-1] == "idle", states
    assert all(a != b for a, b in zip(states, states[1:]))  # said when it changes


def test_rebuild_finds_what_the_live_part_found(three_days, tmp_path):
    """`wattlog rebuild` reads the feeds from their first slot and finds the same runs, with
    the same kWh, as the part did while the readings came (the pending ones included)."""
    store, runs, data, _, _ = three_days
    found = rebuild(open_reader(str(data)), str(tmp_path), {}, Tariff(price=0.30))
    again = part(store_at(tmp_path / "other"), str(tmp_path))
    for node in ("washer", "fridge", "tv"):
        assert found[node] == len(runs.finished[node])
        assert again.finished[node] == runs.finished[node]


def test_a_restart_in_the_middle_of_a_run_finds_it_once(tmp_path):
    """The collector stops mid-wash, cleanly, or killed with its state last saved the day
    before (two washes have finished since and are logged): the next one goes on from the
    saved state, finds the same runs as an uninterrupted one, logs each once, and publishes
    run_started and run_finished once each."""
    plugs = {"washer": "washer:0800+1700"}
    mid = D0 + 86400 + 8 * 3600 + 1800             # 08:30 on the second day: washing
    end = D0 + 2 * 86400
    whole_store = store_at(tmp_path / "whole")
    whole = part(whole_store, str(tmp_path / "whole"), EVER)
    feed(whole_store, whole, plugs, D0, end)
    assert len(whole.finished["washer"]) == 4
    for killed in (False, True):
        data = tmp_path / ("killed" if killed else "stopped")
        store = store_at(data)
        said = []
        first = part(store, str(data), EVER)
        saved_at = D0 + 12 * 3600 if killed else mid
        feed(store, first, plugs, D0, saved_at, out=said)
        first.save()
        feed(store, first, plugs, saved_at, mid, out=said)
        if not killed:
            first.close()
        store.commit()
        second = part(store, str(data), EVER)
        assert second.detectors["washer"].cursor == saved_at
        feed(store, second, plugs, mid, end, out=said)
        assert second.finished["washer"] == whole.finished["washer"]
        with open(data / "runs" / "washer.runs.jsonl") as f:
            assert len(f.readlines()) == 4
        events = [json.loads(p) for t, p, _ in said if t.endswith("/event")]
        for kind in ("run_started", "run_finished"):
            starts = [e["start"] for e in events if e["event"] == kind]
            assert starts == [r["start"] for r in whole.finished["washer"]], (killed, kind)
        store.close()


def test_old_runs_fire_no_events(tmp_path):
    """Runs decided more than an hour ago (a backlog, a replayed day) are logged, their
    events recorded as given, and nothing is published."""
    store = store_at(tmp_path)
    runs = part(store, str(tmp_path))
    said = []
    feed(store, runs, {"washer": "washer"}, D0, D0 + 86400, out=said)
    assert len(runs.finished["washer"]) >= 1
    assert not [t for t, _, _ in said if t.endswith("/event")]


def test_cost_by_the_tariff_window_each_slot_lies_in(tmp_path):
    """A 1 kW run from 21:00 to 23:00 UTC with night from 22:00: 1 kWh by day, 1 by night."""
    store = store_at(tmp_path)
    day = D0 + 86400
    w = np.full(8640, 1.0)
    w[21 * 360:23 * 360] = 1000.0
    runs = part(store, str(tmp_path), EVER, Tariff.parse("day=0.30,night=0.10,night_hours=22-06"))
    send(store, "heater", day, w[:4320], take=runs.take)   # the first day's half: learning
    send(store, "heater", day + 43200, w[4320:], seq=4320, take=runs.take)
    store.commit()
    tick(runs)
    run, = runs.finished["heater"]
    assert (run["start"], run["end"]) == (day + 21 * 3600, day + 23 * 3600)
    assert run["kwh"] == pytest.approx(2.0) and run["cost"] == pytest.approx(0.40)


def test_a_fridge_day_above_its_normal_is_flagged(tmp_path):
    """A fridge that runs 12 min of every 40 for three weeks, then 20 min of 40 for a day (a
    door seal giving way): that day's duty cycle, 50 % against a normal of 30 %, is flagged;
    the days before are not; the trend rises."""
    store = store_at(tmp_path)
    runs = part(store, str(tmp_path), {"plugs": {"fridge": {"kind": "fridge"}}})
    days = 22
    start = (int(time.time()) // 86400 - days) * 86400
    seq = 0
    for d in range(days):
        on = 120 if d == days - 1 else 72          # slots on of every 240
        w = np.where(np.arange(8640) % 240 < on, 80.0, 2.0)
        seq = send(store, "fridge", start + d * 86400, w, seq=seq, take=runs.take)
        store.commit()
        tick(runs)
    answer = report(runs, store, "UTC", now=start + days * 86400, node="fridge")
    duty = answer["plugs"][0]["duty"]
    last = duty["days"][-1]
    assert duty["flagged"] == [last["day"]], duty["flagged"]
    assert last["duty"] == pytest.approx(0.5, abs=0.01)
    assert last["normal"] == pytest.approx(0.3, abs=0.01)
    assert duty["trend_pp_week"] > 0
    assert "duty cycle above its normal on " + last["day"] in text(answer)
    said = health(runs, store, "UTC", "fridge", now=start + days * 86400)  # plug health's
    assert said["cycling"] and said["flagged"] == [last["day"]], said
    assert last["day"] in said["note"] and "seal" in said["note"]


def test_the_config_table_is_checked_in_words():
    """A plug's kind and thresholds from [runs.<plug>]; a bad one is named."""
    got = check({"events": False, "washer": {"kind": "washer", "pause": "15m",
                                             "start_w": 50}}, _seconds)
    assert got["plugs"]["washer"] == {"kind": "washer", "pause_s": 900.0, "start_w": 50.0}
    assert got["events"] is False
    for table, words in (({"washer": {"kind": "kettle"}}, "runs.washer.kind must be one of"),
                         ({"washer": {"start_w": -1}}, "runs.washer.start_w must be watts"),
                         ({"washer": {"stop_w": 9, "start_w": 5}}, "must be below start_w"),
                         ({"Washer!": {"kind": "washer"}}, "named by its node id"),
                         ({"enable": True}, "runs.enable is not a setting")):
        with pytest.raises(ValueError, match=words):
            check(table, _seconds)


def test_a_threshold_set_by_the_owner_wins_and_is_said(tmp_path):
    """start_w set in the config: a 30 W load, below what the plug learned (half its 2 kW
    working level), is a run, and the sentence says the level was set."""
    store = store_at(tmp_path)
    runs = part(store, str(tmp_path), {"plugs": {"kettle": {"start_w": 20}}})
    w = np.full(8640, 0.5)
    w[3600:3700] = 2000.0
    w[5000:5100] = 30.0
    send(store, "kettle", D0, w, take=runs.take)
    store.commit()
    tick(runs)
    assert [r["start"] - D0 for r in runs.finished["kettle"]] == [36000, 50000]
    assert "a run starts above 20 W (set)" in runs.learned("kettle")["said"]


def test_readings_not_yet_committed_decide_a_run(tmp_path):
    """The run is found from what the store holds pending: no commit needed."""
    store = store_at(tmp_path)
    runs = part(store, str(tmp_path))
    w = np.full(4320, 1.0)
    w[2000:2200] = 500.0
    send(store, "lamp", D0, w[:100], take=runs.take)
    store.commit()  # the feed exists; everything after stays pending
    send(store, "lamp", D0 + 1000, w[100:], seq=100, take=runs.take)
    tick(runs)
    assert [(r["start"] - D0, r["end"] - D0) for r in runs.finished["lamp"]] == [(20000, 22000)]


def test_wattlog_runs_prints_each_run_as_every_view_shows_it(three_days, capsys):
    """`wattlog runs washer` says what was learned, then a row per run with the cells the API
    gives (kWh to 3 decimals, cost to 2), and the total; --json is /api/runs' answer."""
    from wattlog import cli
    store, runs, data, _, _ = three_days
    store.commit()
    runs.save()  # as the collector does every summary interval and when it stops
    cli.main(["runs", "washer", "--data", str(data)])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("washer (other): standby 0.8")
    assert out[1].split() == ["start", "end", "duration", "kWh", "cost", "peak", "W"]
    answer = report(runs, store, "UTC", node="washer")
    assert [line.split() for line in out[2:-1]] == [
        " ".join(c).split() for c in answer["plugs"][0]["cells"]]
    assert out[-1] == "  %d runs, %.3f kWh, %.2f EUR" % (len(runs.finished["washer"]), sum(
        r["kwh"] for r in runs.finished["washer"]), sum(r["cost"] for r in runs.finished["washer"]))
    cli.main(["runs", "--data", str(data), "--json", "--since", str(D0 + 86400)])
    got = json.loads(capsys.readouterr().out)
    assert [p["node"] for p in got["plugs"]] == sorted(PLUGS)
    assert [r["start"] for r in got["plugs"][-1]["runs"]] == [
        r["start"] for r in runs.finished["washer"] if r["start"] >= D0 + 86400]


def test_wattlog_runs_errors_are_one_line(three_days, capsys):
    from wattlog import cli
    _, _, data, _, _ = three_days
    for argv, words in ((["runs", "kettle"], "no runs of a plug 'kettle'"),
                        (["runs", "--since", "tomorrow"], "--since")):
        with pytest.raises(SystemExit) as e:
            cli.main(argv + ["--data", str(data)])
        assert words in str(e.value.code) + capsys.readouterr().err


def test_a_missing_slot_waits_for_its_resend(tmp_path):
    """Readings after a hole are not used until the hole has stayed empty for hole_wait_s:
    filled meanwhile (a resend), the run is whole; never filled, it is taken as missing."""
    now = [0.0]
    store = store_at(tmp_path)
    runs = Runs(store, str(tmp_path), hole_wait_s=60, monotonic=lambda: now[0])
    w = np.full(3000, 1.0)
    w[1000:1400] = 500.0                       # a 400-slot run; slots 1100-1199 come late
    w[2500:2600] = 800.0                       # another; slots 2300-2309 never come
    send(store, "oven", D0, w[:1100], take=runs.take)
    store.commit()
    send(store, "oven", D0 + 12000, w[1200:2000], seq=1200, take=runs.take)
    for _ in range(3):
        runs.tick()
    assert runs.detectors["oven"].cursor == D0 + 11000 and not runs.finished["oven"]
    now[0] = 30.0
    send(store, "oven", D0 + 11000, w[1100:1200], seq=1100, take=runs.take)  # the resend
    runs.tick()
    assert [(r["start"] - D0, r["end"] - D0) for r in runs.finished["oven"]] == [(10000, 14000)]
    assert runs.finished["oven"][0]["kwh"] == pytest.approx(400 * 10 * 500 / 3.6e6)
    send(store, "oven", D0 + 20000, w[2000:2300], seq=2000, take=runs.take)
    send(store, "oven", D0 + 23100, w[2310:], seq=2310, take=runs.take)
    runs.tick()
    assert runs.detectors["oven"].cursor == D0 + 23000
    now[0] = 100.0
    runs.tick()
    assert runs.detectors["oven"].cursor == D0 + 30000
    assert [r["start"] - D0 for r in runs.finished["oven"]] == [10000, 25000]


def test_wattlog_rebuild_finds_the_runs_again(tmp_path, capsys):
    """`wattlog rebuild` (the collector stopped) writes every plug's runs log and state anew
    from its feed: the runs the collector had found, and `wattlog runs` prints them."""
    from wattlog import cli
    store = store_at(tmp_path)
    runs = part(store, str(tmp_path))
    feed(store, runs, {"tv": "tv:1900"}, D0, D0 + 86400)
    store.commit()
    store.close()
    found = list(runs.finished["tv"])
    (tmp_path / "runs" / "tv.runs.jsonl").write_text("")
    cli.main(["rebuild", "--data", str(tmp_path)])
    assert "rebuilt the runs of 1 plug in %s (1 run)" % (tmp_path / "runs") in \
        capsys.readouterr().out
    cli.main(["runs", "tv", "--data", str(tmp_path), "--json"])
    assert json.loads(capsys.readouterr().out)["plugs"][0]["runs"] == found
