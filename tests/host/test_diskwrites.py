"""test_diskwrites.py - bytes written per day (diskwrites.WriteMeter) as /api/health reports
them: a day's figure is what was measured in it, a day is whole only once it was measured
from midnight to midnight, and the average is over whole days only. A fake write counter
and clocks stand in for /proc/self/io and time (the meter takes them as arguments)."""

import datetime
import zoneinfo

from wattlog.serve.diskwrites import WriteMeter

BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")
RATE = 1000          # bytes a second after the start
START_UP = 50000000  # what the start-up writes (checks, summaries rebuilt) before the first sample


def local(*args):
    return datetime.datetime(*args, tzinfo=BERLIN).timestamp()


class Fake:
    """A process writing RATE bytes a second, START_UP at once after it started, with a
    monotonic clock and a wall clock that agree unless step() moves the wall clock."""

    def __init__(self, t):
        self.wall = self.mono = t
        self.written = 0

    def run(self, seconds):
        if self.written == 0:
            self.written = START_UP
        self.written += RATE * seconds
        self.wall += seconds
        self.mono += seconds

    def meter(self):
        return WriteMeter(BERLIN, read=lambda: self.written, clock=lambda: self.wall,
                          monotonic=lambda: self.mono)


def run_until(fake, meter, t, step_s=600):
    """Samples every step_s (at times that do not fall on midnight) until the wall clock
    reaches t."""
    while fake.wall < t:
        fake.run(min(step_s, t - fake.wall))
        meter.sample()


def test_the_start_day_is_partial_and_the_average_waits_for_a_whole_day():
    """A collector started at 14:02: its first day is partial (measured from 14:02) and holds
    the start-up's writes; no average until a day was measured whole; the next day, measured
    from midnight to midnight, is whole and holds that day's writes only; the average is that
    day's, not the start day's figure scaled up."""
    fake = Fake(local(2026, 11, 23, 14, 2, 7))
    meter = fake.meter()
    run_until(fake, meter, local(2026, 11, 23, 14, 12))
    early = meter.report()
    assert early["written_per_day_average"] is None
    [day] = early["written_per_day"]
    assert day["day"] == "2026-11-23" and day["whole"] is False
    assert day["bytes"] == START_UP + RATE * day["measured_s"]

    run_until(fake, meter, local(2026, 11, 24, 23, 59))
    assert meter.report()["written_per_day_average"] is None  # the 24th is not over yet
    run_until(fake, meter, local(2026, 11, 25, 3, 0))
    out = meter.report()
    days = {d["day"]: d for d in out["written_per_day"]}
    assert list(days) == ["2026-11-23", "2026-11-24", "2026-11-25"]
    first, whole, today = days["2026-11-23"], days["2026-11-24"], days["2026-11-25"]
    assert first["whole"] is False and today["whole"] is False and whole["whole"] is True
    assert first["measured_s"] == round(local(2026, 11, 24) - local(2026, 11, 23, 14, 2, 7))
    assert whole["measured_s"] == 86400 and whole["bytes"] == RATE * 86400
    assert today["measured_s"] == 3 * 3600
    assert out["written_per_day_average"] == RATE * 86400
    assert out["written_since_start"] == fake.written


def test_a_dst_day_is_whole_at_its_own_length():
    """The day the clocks go back is 25 h: whole once its 25 h were measured, with its 25 h
    of writes."""
    fake = Fake(local(2026, 10, 24, 9, 0))
    meter = fake.meter()
    run_until(fake, meter, local(2026, 10, 26, 1, 0), step_s=700)
    days = {d["day"]: d for d in meter.report()["written_per_day"]}
    assert days["2026-10-25"]["whole"] is True
    assert days["2026-10-25"]["measured_s"] == 25 * 3600
    assert days["2026-10-25"]["bytes"] == RATE * 25 * 3600


def test_a_clock_step_moves_no_bytes_to_days_not_measured():
    """A Pi sets its clock by NTP after the collector started: the wall clock jumps two days
    ahead between two samples. The span is placed where it ended, the days jumped over are
    not made up, and the day the step landed in is not whole."""
    fake = Fake(local(2026, 11, 20, 10, 0))
    meter = fake.meter()
    run_until(fake, meter, local(2026, 11, 20, 11, 0))
    fake.wall += 2 * 86400
    run_until(fake, meter, local(2026, 11, 23, 1, 0))
    days = {d["day"]: d for d in meter.report()["written_per_day"]}
    assert "2026-11-21" not in days
    assert days["2026-11-22"]["whole"] is False and days["2026-11-22"]["measured_s"] < 86400
    assert sum(d["bytes"] for d in days.values()) == fake.written


def test_the_sampler_wakes_just_past_midnight():
    """The next sample is due at SAMPLE_S, or just past the next local midnight if that is
    sooner, so a day's bytes are measured up to its end."""
    fake = Fake(local(2026, 11, 23, 23, 55))
    meter = fake.meter()
    assert meter.next_sample_s() == 5 * 60 + 1
    fake.run(3600)
    assert meter.next_sample_s() == WriteMeter.SAMPLE_S
