"""test_simplug.py - the simulated plug behaves as a plug does where the node cannot tell it
apart: the relay switches the load (an open relay draws nothing, for the exact meter and for
a simulated chip, and what was drawn until the switch stays counted), and a plug has the
MAC its settings give it. tests/e2e/test_demo.py checks both through MQTT."""

import os
import unittest

from wattnode import meters
from wattnode.calib import Calibration
from wattnode.relay import RELAY_FILE, Controls
from wattsim.board import Board
from rig import START_UNIX, Rig, board_file
import scratch

DIR = scratch.DIR


def plug(board, profile="constant:1000"):
    """A board with its meter and its relay switched by the node's own Controls."""
    try:
        os.remove(DIR + "/" + RELAY_FILE)
    except OSError:
        pass
    hw = Board(board, sim={"profile": profile, "start": START_UNIX}, flash_dir=DIR)
    meter = meters.create(board, hw, Calibration())
    return hw, meter, Controls(board, hw, "on", DIR)


class TestRelaySwitchesTheLoad(unittest.TestCase):
    def test_the_exact_meter_sees_nothing_while_the_relay_is_open(self):
        """1000 W switched off 5.5 s into a 10 s window: the time before the switch is
        counted to the millisecond (5.5 s), then 0 W and 0 A at the mains voltage; switched
        on, the load is back."""
        hw, meter, controls = plug(board_file("sim"))
        clock = hw.clock
        meter.take()
        clock.advance_ms(5500)
        controls.set(False)
        clock.advance_ms(4500)
        meter.poll()
        self.assertTrue(meter.take())
        self.assertEqual(meter.win_energy_dj, 55 * 1000)
        self.assertEqual((meter.power_dw, meter.current_ma), (0, 0))
        self.assertTrue(meter.voltage_cv > 22000)
        clock.advance_ms(10000)
        meter.poll()
        meter.take()
        self.assertEqual(meter.win_energy_dj, 0)
        controls.set(True)
        clock.advance_ms(10000)
        meter.poll()
        meter.take()
        self.assertEqual((meter.win_energy_dj, meter.power_dw), (10 * 10000, 10000))

    def test_a_simulated_chip_sees_nothing_while_the_relay_is_open(self):
        """A CSE7766 board: the chip's energy stops at the switch, to the millisecond, and
        its driver reads no power until the relay closes again (and no current: the chip
        flags it below its range, which the driver stores as missing)."""
        rig = Rig("devkit-cse7766", "constant:1000")
        controls = Controls(rig.board, rig.hw, "on", DIR)
        truth = rig.chip.truth
        rig.run(5500)
        at_switch = truth.energy_uj100(rig.clock.time_ms())
        self.assertEqual(at_switch, 10000 * 5500)
        controls.set(False)
        rig.run(4500)
        self.assertEqual(truth.energy_uj100(rig.clock.time_ms()), at_switch)
        ok, energy_dj, true_dj = rig.window(10000)
        self.assertEqual((energy_dj, true_dj), (0, 0))
        self.assertEqual((rig.meter.power_dw, rig.meter.win_current_ma), (0, -1))
        controls.set(True)
        ok, energy_dj, true_dj = rig.window(10000)
        self.assertEqual(true_dj, 10 * 10000)
        self.assertTrue(abs(energy_dj - true_dj) <= true_dj // 100, (energy_dj, true_dj))


class TestMac(unittest.TestCase):
    def test_the_plug_has_the_mac_its_settings_give_it(self):
        """tools/simnode gives each plug its own (from its node id: tests/e2e/test_demo.py);
        without one, a simulated plug says 02:00:00:00:00:01."""
        hw = Board(board_file("sim"), {"node_id": "washer"}, {"mac": "02a1b2c3d4e5"}, DIR)
        self.assertEqual(hw.mac(), b"\x02\xa1\xb2\xc3\xd4\xe5")
        self.assertEqual(Board(board_file("sim"), {"node_id": "washer"}, {}, DIR).mac(),
                         b"\x02\x00\x00\x00\x00\x01")
