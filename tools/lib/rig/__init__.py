"""rig - the parts the end-to-end tests, the benches and tools/demo assemble a running wattlog
from, each started as a user starts it and stopped when its owner is done:

    Broker     a private mosquitto set up by `wattlog provision` (tools/lib/broker.py)
    Collector  `wattlog collect` in its own process, from flags or a config file, optionally
               storing into PostgreSQL (tools/lib/pgserver.py); its log, wait_for(text), stop()
    Recorder   a paho client that subscribes to topics and records every message; a test waits
               on it for a condition, with a bound (taken: the collector has taken what the
               broker held for it)
    SimPlug    tools/simnode: the real firmware on the MicroPython unix port, a simulated plug
    wait_until a condition polled until true, with a bound; its value (wait_answer: an
               answer asked for until it is the one wanted)
    scratch    a working folder, removed after a run that ends well, kept after a failure

Why tools/lib/rig and not tests/rig: the benches (tools/bench) and tools/demo start the same
parts, and tools/lib is what they and the tests already put on sys.path; nothing under tools/
imports from tests/. Every wait here is bounded and says what it waited for when it fails.
"""

from broker import Broker, free_port
from rig.collector import Collector
from rig.recorder import Recorder, taken
from rig.scratch import scratch
from rig.simplug import SimPlug, summaries, summary
from rig.wait import wait_answer, wait_until

__all__ = ["Broker", "Collector", "Recorder", "SimPlug", "free_port", "scratch", "summaries",
           "summary", "wait_answer", "wait_until"]
