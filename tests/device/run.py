"""run.py - run the device tests on the MicroPython unix port.

    micropython tests/device/run.py [test_module ...]      (tools/test runs it)

Uses unittest from micropython-lib (fetched by tools/setup). unittest.main() cannot be used:
it ends with sys.exit(False), which the unix port turns into exit status 1 even when every
test passed. This runner prints the failures, then one line
    device tests: N passed, N failed, N skipped
and exits 1 if anything failed.
"""

import os
import sys

import unittest

CWD = os.getcwd()
HERE = __file__.rsplit("/", 1)[0] if "/" in __file__ else "."
HERE = HERE if HERE.startswith("/") else CWD + "/" + HERE
sys.path.insert(0, HERE)
# absolute paths, so tests that change directory (as a plug's flash root) still import
sys.path[:] = [p if p.startswith("/") or p in ("", ".frozen") else CWD + "/" + p for p in sys.path]


def main():
    names = sys.argv[1:] or sorted(f[:-3] for f in os.listdir(HERE)
                                   if f.startswith("test_") and f.endswith(".py"))
    suite = unittest.TestSuite()
    for name in names:
        module = __import__(name)
        for attr in dir(module):
            obj = getattr(module, attr)
            if isinstance(obj, type) and issubclass(obj, unittest.TestCase) and obj is not unittest.TestCase:
                suite.addTest(obj)
    result = unittest.TestRunner().run(suite)
    for text in result.exceptions:
        print("-" * 70)
        print(text)
    failed = result.failuresNum + result.errorsNum
    passed = result.testsRun - failed - result.skippedNum
    print("device tests: %d passed, %d failed, %d skipped" % (passed, failed, result.skippedNum))
    sys.exit(1 if failed else 0)


main()
