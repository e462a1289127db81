"""mp32run.py - runs a script as __main__ on the WebAssembly port, for tools/lib/mp32.mjs.

    run(path)   execute the script as __main__ (after the runner set sys.path and sys.argv)
    step()      resume the generator the script left in its global `mp32_steps`, once
After each call `status` is the exit status (sys.exit's, 1 after an uncaught exception, whose
traceback goes to stderr, 0 at the end), or None while there are steps left.

Why steps: this port's garbage collector runs only between calls from JavaScript (it cannot
scan the wasm stack for roots), and grows the heap until then. A script that runs long leaves
a generator in `mp32_steps`; the runner calls step() until it ends, and the garbage of each
step is collected before the next one (tests/device/run.py yields after every test).
"""

import gc
import sys

import __main__

status = None


def _call(fn):
    """fn()'s exit status: None if it returned, and so the script goes on."""
    try:
        fn()
        return None
    except StopIteration:  # the steps have ended
        return 0
    except SystemExit as e:  # as the unix port: sys.exit(n), sys.exit(), sys.exit("why")
        code = e.args[0] if e.args else None
        if code is None or isinstance(code, int):
            return int(code or 0)
        print(code, file=sys.stderr)
        return 1
    except BaseException as e:  # an uncaught exception ends the script, as on any port
        sys.print_exception(e, sys.stderr)
        return 1
    finally:
        gc.collect()  # only asks: the collection happens when this call returns to JavaScript


def run(path):
    global status
    g = __main__.__dict__
    g["__file__"] = path
    with open(path) as f:
        code = compile(f.read(), path, "exec")
    status = _call(lambda: exec(code, g))
    if status is None and "mp32_steps" not in g:
        status = 0


def step():
    global status
    status = _call(lambda: next(__main__.__dict__["mp32_steps"]))
