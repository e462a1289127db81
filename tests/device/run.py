"""run.py - run the device tests on MicroPython: the unix port, and a 32-bit port.

    micropython tests/device/run.py [test_module ...]                     (tools/test device)
    node tools/lib/mp32.mjs --copy tests --copy boards tests/device/run.py [test_module ...]
                                           (tools/test device32: the 32-bit WebAssembly port)

TestCase and its assertions come from micropython-lib's unittest (fetched by tools/setup); the
tests are run here, one at a time as CPython's unittest runs them: a new TestCase, setUp, the
test, tearDown (not after a setUp that failed); unittest.SkipTest from setUp or the test skips
it, and its reason is printed on the test's line. (unittest.main() ends with sys.exit(False),
which the unix port turns into exit status 1 even when every test passed, and micropython-lib
0.4's runner lets an exception in setUp end the whole run.) Prints the failures, then one line
    device tests: N passed, N failed, N skipped
and exits 1 if anything failed.

On the WebAssembly port, whose garbage collector runs only between calls from JavaScript, the
tests run as `mp32_steps`, one test a step (see tools/lib/mp32.mjs). That port is built without
cryptolib (the ESP32 firmware has it): there, and only when `import cryptolib` fails, support32/
goes on sys.path for its AES-128-CBC stand-in (support32/cryptolib.py says why; a plug never
has it).
"""

import io
import os
import sys

import unittest

CWD = os.getcwd()
HERE = __file__.rsplit("/", 1)[0] if "/" in __file__ else "."
HERE = HERE if HERE.startswith("/") else CWD + "/" + HERE
sys.path.insert(0, HERE)
# absolute paths, so tests that change directory (as a plug's flash root) still import
sys.path[:] = [p if p.startswith("/") or p in ("", ".frozen") else CWD + "/" + p for p in sys.path]
if sys.platform == "webassembly":
    try:
        import cryptolib  # noqa: F401
    except ImportError:
        sys.path.append(HERE + "/support32")


def cases(names):
    """(TestCase class, test method name) for every test in the named modules."""
    for name in names:
        module = __import__(name)
        for attr in dir(module):
            cls = getattr(module, attr)
            if isinstance(cls, type) and issubclass(cls, unittest.TestCase) and cls is not unittest.TestCase:
                for method in dir(cls):
                    if method.startswith("test"):
                        yield cls, method


def traceback(e):
    buf = io.StringIO()
    sys.print_exception(e, buf)
    return buf.getvalue()


def _nothing():
    pass


def run_one(cls, method):
    """Runs one test, printing its line; returns "ok", "skipped" or the failure's traceback."""
    print("%s (%s) ..." % (method, cls.__qualname__), end="")
    test = cls()
    try:
        getattr(test, "setUp", _nothing)()  # micropython-lib 0.4's TestCase has neither
        try:
            getattr(test, method)()
        finally:
            getattr(test, "tearDown", _nothing)()
    except unittest.SkipTest as e:
        print(" skipped:", e.args[0] if e.args else "")
        return "skipped"
    except Exception as e:  # a failed assertion or an error: the test fails, the run goes on
        print(" FAIL")
        return traceback(e)
    print(" ok")
    return "ok"


def steps(names):
    """Runs the tests, yielding after each one; ends the program with the summary."""
    passed = skipped = 0
    failures = []
    for cls, method in cases(names):
        outcome = run_one(cls, method)
        if outcome == "ok":
            passed += 1
        elif outcome == "skipped":
            skipped += 1
        else:
            failures.append(outcome)
        yield
    for text in failures:
        print("-" * 70)
        print(text)
    print("device tests: %d passed, %d failed, %d skipped" % (passed, len(failures), skipped))
    sys.exit(1 if failures else 0)


NAMES = sys.argv[1:] or sorted(f[:-3] for f in os.listdir(HERE) if f.startswith("test_") and f.endswith(".py"))
if sys.platform == "webassembly":
    mp32_steps = steps(NAMES)
else:
    for _ in steps(NAMES):
        pass
