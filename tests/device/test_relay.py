"""test_relay.py - the relay keeps its state across a restart as configured, a short press
toggles it, a long one does not, and the LED tells connecting, online and error apart."""

import os
import unittest

from wattsim.board import Board
from wattnode.relay import CONNECTING, ERROR, ONLINE, RELAY_FILE, Controls
from rig import board_file
import scratch

DIR = scratch.DIR


def fresh(power_on="restore", led="gpio"):
    b = board_file("devkit-bl0937", led=led)
    hw = Board(b, sim={}, flash_dir=DIR)
    return Controls(b, hw, power_on, DIR), hw, b


class TestRelay(unittest.TestCase):
    def setUp(self):
        try:
            os.remove(DIR + "/" + RELAY_FILE)
        except OSError:
            pass

    def test_power_on_state(self):
        c, hw, b = fresh("off")
        self.assertEqual((c.on, hw.pins[b["pins"]["relay"]].value()), (False, 0))
        c, hw, b = fresh("on")
        self.assertEqual((c.on, hw.pins[b["pins"]["relay"]].value()), (True, 1))
        c, hw, b = fresh("restore")
        self.assertTrue(c.on)  # never set before: on, as a plug with no memory would be
        c.set(False)
        c, hw, b = fresh("restore")  # a power cut later
        self.assertEqual((c.on, hw.pins[b["pins"]["relay"]].value()), (False, 0))
        self.assertEqual(c.writes, 0)

    def test_flash_is_written_only_on_change(self):
        c, hw, b = fresh("off")
        for _ in range(5):
            c.set(True)
        c.set(False)
        self.assertEqual(c.writes, 2)

    def press(self, c, hw, b, held_ms, t):
        button = hw.pins[b["pins"]["button"]]  # inverted with pull-up: pressed reads 0
        toggled = False
        for level, dur in ((0, held_ms), (1, 200)):
            button.value(level)
            for _ in range(dur // 10):
                t += 10
                toggled = c.poll(t) or toggled
        return toggled, t

    def test_short_press_toggles_long_press_does_not(self):
        c, hw, b = fresh("off")
        t = 1000
        toggled, t = self.press(c, hw, b, 150, t)
        self.assertTrue(toggled and c.on)
        toggled, t = self.press(c, hw, b, 20, t)  # a 20 ms glitch is bounce, not a press
        self.assertFalse(toggled)
        toggled, t = self.press(c, hw, b, 5000, t)
        self.assertFalse(toggled)
        self.assertTrue(c.on)
        self.assertEqual(c.presses, 1)

    def test_led_states(self):
        c, hw, b = fresh("on")
        led = hw.pins[b["pins"]["led"]]
        c.show(ONLINE, 0)
        self.assertEqual(led.value(), 1)
        c.set(False)
        c.show(ONLINE, 0)
        self.assertEqual(led.value(), 0)
        seen = []
        for t in range(0, 2000, 125):
            c.show(CONNECTING, t)
            seen.append(led.value())
        self.assertEqual(sum(seen), 8)  # 1 Hz: on half the time
        self.assertEqual(seen[:8], [1] * 4 + [0] * 4)
        fast = []
        for t in range(0, 1000, 125):
            c.show(ERROR, t)
            fast.append(led.value())
        self.assertEqual(fast, [1, 0] * 4)  # 4 Hz

    def test_ws2812_colours(self):
        c, hw, b = fresh("on", led="ws2812")
        c.show(ONLINE, 0)
        self.assertEqual(c._pixel.rgb, (0, 40, 0))
        c.show(ERROR, 0)
        self.assertEqual(c._pixel.rgb, (60, 0, 0))
