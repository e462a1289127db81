"""testrun.py - run the test suites and end with one line: N passed, N failed[, N skipped],
then each suite's wall time and the whole run's: "... (device 10 s, host 25 s, e2e 150 s;
185 s in all)".

    tools/test                      device, host and e2e suites, in that order
    tools/test host e2e             only those suites
    tools/test e2e -- -k pipeline   arguments after -- go to pytest

device  tests/device/ on the MicroPython unix port (unittest from micropython-lib), then
        device32: the same on a 32-bit MicroPython (tools/lib/mp32.mjs, the WebAssembly port)
host    tests/host/   pytest: wire, storage engine, ingest, commits, CLI
e2e     tests/e2e/    pytest: a real mosquitto, the real firmware via tools/simnode, the collector;
                      WATTLOG_TEST_WORKERS (default 6) tests at a time (pytest-xdist): they
                      spend most of their time waiting on plugs and brokers, each its own
                      (measured on 2 cores: 6 workers left the CPU 53 % idle, and took the
                      suite from 572 s with 4 to 423 s, each test as long as with 4)
Exit status 1 if any test failed or a suite could not run to its end.
"""

import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUITES = ("device", "device32", "host", "e2e")
DEVICE_RUNNERS = {"device": ["micropython"],
                  "device32": ["node", "tools/lib/mp32.mjs", "--copy", "tests", "--copy", "boards"]}


def run_device(suite):
    # the suite's files in a folder of its own (tests/device/scratch.py): a second run beside
    # this one, from another clone, would otherwise share /tmp's
    with tempfile.TemporaryDirectory(prefix="wattnode-device-") as scratch:
        proc = subprocess.run(DEVICE_RUNNERS[suite] + ["tests/device/run.py"], cwd=REPO,
                              env=dict(os.environ, WATTNODE_TEST_DIR=scratch),
                              capture_output=True, text=True, timeout=600)
    sys.stdout.write(proc.stdout + proc.stderr)
    m = re.search(r"device tests: (\d+) passed, (\d+) failed, (\d+) skipped", proc.stdout)
    if not m:
        print("device suite did not finish (exit status %d)" % proc.returncode)
        return 0, 1, 0
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def run_pytest(suite, extra):
    report = os.path.join(REPO, "build", "test-results", suite + ".xml")
    os.makedirs(os.path.dirname(report), exist_ok=True)
    if os.path.exists(report):
        os.remove(report)
    workers = int(os.environ.get("WATTLOG_TEST_WORKERS", "6"))
    # one test at a time to each worker: the long real-time tests, collected first
    # (tests/e2e/conftest.py), start first instead of queueing behind each other; a module
    # marked xdist_group runs on one worker, so its costly module fixture is made once
    parallel = ["-n", str(workers), "--maxschedchunk", "1", "--dist", "loadgroup"] \
        if suite == "e2e" and workers > 1 else []
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests/" + suite, "-q",
                           "--junitxml=" + report] + parallel + extra, cwd=REPO)
    if proc.returncode not in (0, 1) or not os.path.exists(report):
        print("%s suite did not finish (pytest exit status %d)" % (suite, proc.returncode))
        return 0, 1, 0
    total = failed = skipped = 0
    for ts in ET.parse(report).getroot().iter("testsuite"):
        total += int(ts.get("tests", 0))
        failed += int(ts.get("failures", 0)) + int(ts.get("errors", 0))
        skipped += int(ts.get("skipped", 0))
    return total - failed - skipped, failed, skipped


def main(argv):
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    unknown = [a for a in argv if a not in SUITES]
    if unknown:
        sys.exit("tools/test: unknown suite %s; the suites are %s" % (unknown, ", ".join(SUITES)))
    chosen = [s for s in SUITES if s in argv or s == "device32" and "device" in argv] or list(SUITES)
    totals = [0, 0, 0]
    lines = []
    times = []
    began = time.monotonic()
    for suite in chosen:
        print("== %s tests" % suite, flush=True)
        t0 = time.monotonic()
        counts = run_device(suite) if suite in DEVICE_RUNNERS else run_pytest(suite, extra)
        took_s = time.monotonic() - t0
        lines.append("%-6s %d passed, %d failed, %d skipped in %.0f s"
                     % ((suite,) + counts + (took_s,)))
        times.append("%s %.0f s" % (suite, took_s))
        totals = [a + b for a, b in zip(totals, counts)]
    print("\n".join(["=="] + lines))
    passed, failed, skipped = totals
    print("%d passed, %d failed%s (%s; %.0f s in all)"
          % (passed, failed, ", %d skipped" % skipped if skipped else "", ", ".join(times),
             time.monotonic() - began))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
