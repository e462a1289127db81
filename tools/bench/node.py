"""node.py - the node's figures on the MicroPython unix port (run by tools/bench/node).

  bytes per reading     whole MQTT PUBLISH packets over a loopback socket, full batches
  ring capacity         readings and hours at 10 s for the default ring (board.py)
  allocations           heap bytes allocated per sample (gc disabled, gc.mem_alloc before and
                        after) for each meter driver against its simulated chip: poll at the
                        driver's rhythm, slot close, ring append
  time                  microseconds per poll and per slot close, per driver; per batch publish
The unix port is a 64-bit build on a PC: times are relative, not an ESP32's.
"""

import gc
import json
import socket
import time

import wattsim
from wattnode import wire
from wattnode.board import SIZES
from wattnode.calib import Calibration
from wattnode.link import Link
from wattnode import meters
from wattnode.ring import Ring
from wattnode.sampler import Sampler
from wattsim.board import Board

wattsim.install()  # the simulated board and its chips, as tools/simnode plugs them in

HERE = __file__.rsplit("/", 1)[0] if "/" in __file__ else "."
REPO = HERE + "/../.."
SLOTS = 2000


def board(name):
    with open(REPO + "/boards/" + name + ".json") as f:
        b = json.load(f)
    b["hal"] = "sim"
    return b


def sampling(name, profile="washer"):
    b = board(name)
    hw = Board(b, sim={"profile": profile, "start": 1795000000 + 8 * 3600}, flash_dir="/tmp")
    meter = meters.create(b, hw, Calibration())
    ring = Ring(3072)
    s = Sampler(meter, ring, 10)
    clock = hw.clock
    s.start(clock.time_s(), clock.ticks_ms())
    step = meter.poll_ms or 10000
    polls = 0

    def slot():
        nonlocal polls
        end = (s.slot_end - clock.time_s()) * 1000 + clock.time_ms()
        while clock.time_ms() < end:
            clock.advance_ms(min(step, end - clock.time_ms()))
            meter.poll()
            polls += 1
        s.close(clock.time_s(), clock.ticks_ms())

    for _ in range(50):  # warm up: first-slot attribute stores, buffers filled
        slot()
    gc.collect()
    gc.disable()
    before = gc.mem_alloc()
    polls = 0
    t0 = time.ticks_us()
    for _ in range(SLOTS):
        slot()
    us = time.ticks_diff(time.ticks_us(), t0)
    allocated = gc.mem_alloc() - before
    gc.enable()
    # the slot close alone
    t0 = time.ticks_us()
    for _ in range(SLOTS):
        clock.advance_ms((s.slot_end - clock.time_s()) * 1000)
        s.close(clock.time_s(), clock.ticks_ms())
    close_us = time.ticks_diff(time.ticks_us(), t0) / SLOTS
    return allocated / SLOTS, us / max(polls, 1), close_us, polls // SLOTS


def main():
    print("wattnode bench on the MicroPython unix port")
    kib = SIZES["ring_kib"][2]
    ring = Ring(kib * 1024 // wire.RECORD_SIZE)
    print("  ring: %d KiB = %d readings of %d bytes = %.1f h at 10 s"
          % (kib, ring.capacity, wire.RECORD_SIZE, ring.capacity * 10 / 3600))
    for name, label in (("sim", "exact simulated meter"), ("devkit-bl0937", "BL0937 pulses"),
                        ("devkit-cse7766", "CSE7766 UART stream"), ("devkit-bl0942", "BL0942 UART polled")):
        per, poll_us, close_us, polls = sampling(name)
        print("  %-22s %5.1f bytes allocated per sample; %6.1f us per poll (%d polls a slot); "
              "%5.1f us per slot close + ring append" % (label, per, poll_us, polls, close_us))
    wire_bytes, per_batch_us = batch_figures()
    print("  on the wire: %.2f bytes per reading (64-reading batches, topic "
          "wattlog/plug-34ea34797bff/readings); %.0f us per batch publish" % (wire_bytes, per_batch_us))


class _Sink:
    """The broker end of a loopback TCP connection: reads and counts what the link sends."""

    def __init__(self):
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        for port in range(47000, 47100):
            try:
                self.srv.bind(socket.getaddrinfo("127.0.0.1", port)[0][-1])
                break
            except OSError:
                continue
        self.port = port
        self.srv.listen(1)
        self.buf = bytearray(8192)
        self.received = 0

    def accept(self):
        self.conn = self.srv.accept()[0]
        self.conn.setblocking(False)

    def drain(self):
        while True:
            try:
                n = self.conn.readinto(self.buf)
            except OSError:
                return
            if not n:
                return
            self.received += n


def batch_figures(batches=500):
    sink = _Sink()
    cfg = {"base_topic": "wattlog", "broker": {"host": "127.0.0.1", "port": sink.port,
           "user": None, "password": None}, "batch_max": 64, "batch_wait_s": 0,
           "discovery_prefix": "homeassistant"}
    ring = Ring(3072)
    link = Link("plug-34ea34797bff", cfg, ring, 10, 12345, lambda n: b"\x00" * n, {})
    sock = socket.socket()
    sock.connect(socket.getaddrinfo("127.0.0.1", sink.port)[0][-1])
    sink.accept()
    link.mq.sock = sock
    link.up = True
    sent = 0
    t0 = time.ticks_us()
    for k in range(batches):
        for i in range(64):
            ring.append(k * 640 + i * 10, 1000, 1, 23000, 500)
        link._send_batch()
        sent += 64
        ring.sent_to(ring.sent + link._inflight_n)  # what the PUBACK would do
        ring.release(ring.sent)                     # and the collector's ack
        link._inflight_n = 0
        sink.drain()
    us = time.ticks_diff(time.ticks_us(), t0)
    time.sleep_ms(50)
    sink.drain()
    return sink.received / sent, us / batches


main()
