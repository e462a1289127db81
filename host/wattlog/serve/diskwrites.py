"""diskwrites.py - the bytes the collector writes towards the disk (the SD card's wear), per day
in the collector's time zone, as measured: /api/health and the dashboard's Health view.

    meter = WriteMeter(zoneinfo.ZoneInfo("Europe/Berlin"))
    meter.sample()              # every SAMPLE_S, at each local midnight, at each health request
    meter.report()              # {"written_per_day": [{"day", "bytes", "measured_s", "whole"}],
                                #  "written_per_day_average": bytes or None, ...}
    meter.first, meter.last     # write_bytes at the start and at the latest sample (metrics.py)

What it reads: this process's write_bytes in /proc/self/io, what it sent towards the disk:
the data directory's commits and summaries nearly all of it.

Design notes:
- A day's figure is what was measured in it: each span between two samples is counted on
  the local day it lies in, and a span across midnight (a late sample) is split by time.
  measured_s says how much of the day was measured; a day is whole when all of it was (the
  collector ran from its midnight to the next: 23 or 25 h on a DST change day). The day the
  collector started is partial and holds the start-up's work (checking the files, rebuilding
  summaries), so it says little about a normal day; today is partial until it ends.
- written_per_day_average is the mean of the whole days, None until one has been measured:
  a few minutes after a start, scaled up to a day, would be mostly the start-up.
- Spans are measured on the monotonic clock and placed on the wall clock at their end: a
  clock set at boot (a Pi has no real-time clock; NTP steps it) moves no bytes to 1970.
"""

import collections
import datetime
import time

DAY_S = 86400


def read_write_bytes():
    """This process's write_bytes from /proc/self/io, or None where it cannot be read."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class WriteMeter:
    SAMPLE_S = 600
    DAYS = 14

    def __init__(self, tz, read=read_write_bytes, clock=time.time, monotonic=time.monotonic):
        self.tz = tz
        self.read, self.clock, self.monotonic = read, clock, monotonic
        self.first = self.last = read()
        self._at = monotonic()
        self.days = collections.OrderedDict()   # "YYYY-MM-DD" -> [bytes, measured_s]

    def _day(self, t):
        """(the local day holding unix time t, its start, its end)."""
        date = datetime.datetime.fromtimestamp(t, self.tz).date()
        start = datetime.datetime.combine(date, datetime.time(), self.tz).timestamp()
        end = datetime.datetime.combine(date + datetime.timedelta(days=1), datetime.time(),
                                        self.tz).timestamp()
        return date.isoformat(), start, end

    def sample(self):
        got = self.read()
        mono = self.monotonic()
        if got is None or self.last is None:
            return
        now = self.clock()
        span_s, written = mono - self._at, got - self.last
        self.last, self._at = got, mono
        a = now - span_s
        if span_s <= 0:
            a = now
        while True:
            day, _, end = self._day(a)
            b = min(end, now)
            part = written if span_s <= 0 else written * (b - a) / span_s
            slot = self.days.setdefault(day, [0.0, 0.0])
            slot[0] += part
            slot[1] += b - a
            if b >= now:
                break
            a = b
        while len(self.days) > self.DAYS:
            self.days.popitem(last=False)

    def next_sample_s(self):
        """Seconds to the next sample: SAMPLE_S, or just past the next local midnight if
        that comes first (so a day's bytes are measured up to its end)."""
        now = self.clock()
        return max(min(self.SAMPLE_S, self._day(now)[2] - now + 1.0), 1.0)

    def report(self):
        self.sample()
        if self.first is None:
            return {"written_per_day": None, "written_per_day_average": None,
                    "note": "/proc/self/io is not readable here"}
        days = []
        for day, (written, measured_s) in self.days.items():
            _, start, end = self._day(datetime.datetime.fromisoformat(day).replace(
                hour=12, tzinfo=self.tz).timestamp())
            days.append({"day": day, "bytes": round(written), "measured_s": round(measured_s),
                         "whole": measured_s >= end - start - 1.0})
        whole = [d["bytes"] for d in days if d["whole"]]
        return {"written_per_day": days, "written_since_start": self.last - self.first,
                "written_per_day_average": round(sum(whole) / len(whole)) if whole else None}
