"""test_config.py - a bad config.json never stops the node: defaults, and the reasons in words."""

import json
import os
import unittest

from wattnode import config
import scratch

PATH = scratch.DIR + "/config.json"


def load(text):
    with open(PATH, "w") as f:
        f.write(text)
    problems = []
    cfg = config.load(PATH, problems)
    os.remove(PATH)
    return cfg, problems


class TestConfig(unittest.TestCase):
    def test_good_config_is_kept(self):
        cfg, problems = load(json.dumps({"node_id": "plug-1", "interval_s": 60,
                                         "broker": {"host": "10.0.0.2", "port": 1884}}))
        self.assertEqual(problems, [])
        self.assertEqual((cfg["node_id"], cfg["interval_s"]), ("plug-1", 60))
        self.assertEqual((cfg["broker"]["host"], cfg["broker"]["port"], cfg["broker"]["user"]),
                         ("10.0.0.2", 1884, None))

    def test_missing_or_broken_file_gives_defaults(self):
        problems = []
        cfg = config.load("/nonexistent/config.json", problems)
        self.assertEqual(cfg["interval_s"], 10)
        self.assertIn("missing", problems[0])
        cfg, problems = load("{not json")
        self.assertEqual(cfg["base_topic"], "wattlog")
        self.assertIn("not valid JSON", problems[0])

    def test_wrong_values_fall_back_and_are_named(self):
        cfg, problems = load(json.dumps({"interval_s": "10", "batch_max": 0,
                                         "broker": {"port": "1883"}, "colour": "red",
                                         "node_id": "Kitchen Plug"}))
        self.assertEqual((cfg["interval_s"], cfg["batch_max"], cfg["broker"]["port"]), (10, 64, 1883))
        self.assertEqual(cfg["node_id"], None)
        text = " | ".join(problems)
        for word in ("interval_s", "batch_max", "broker.port", "colour", "node_id"):
            self.assertIn(word, text)

    def test_problems_are_structured_and_said_in_words(self):
        """check() reports (file, key, what, fallback); say() words one as the boot log says
        it; about() picks what an edit of one key (or of a key inside it) would make wrong."""
        cfg, problems = config.check({"interval_s": 0, "colour": "red",
                                      "broker": {"port": "1883"},
                                      "calibration": {"power_gain": 9}}, "/flash/config.json")
        self.assertEqual(cfg["interval_s"], 10)
        self.assertIn(("/flash/config.json", "interval_s", "interval_s = 0 is outside 1..3600",
                       "using 10"), problems)
        self.assertEqual(sorted(p[1] for p in problems),
                         ["broker.port", "calibration", "colour", "interval_s"])
        said = [config.say(p) for p in problems]
        self.assertIn("/flash/config.json: interval_s = 0 is outside 1..3600; using 10", said)
        self.assertIn("/flash/config.json: config key 'colour' is unknown; ignored", said)
        self.assertIn("/flash/config.json: calibration power_gain = 9 must be a number in "
                      "0.5..2.0; running uncalibrated", said)
        self.assertEqual(config.about(problems, "broker"),
                         ["broker.port must be a int, not '1883'"])
        self.assertEqual(config.about(problems, "interval_s"),
                         ["interval_s = 0 is outside 1..3600"])
        self.assertEqual(config.about(problems, "batch_max"), [])

    def test_node_ids(self):
        for good in ("a", "plug-34ea34797bff", "x_y-z", "a" * 32):
            self.assertTrue(config.valid_node_id(good), good)
        for bad in ("", "A", "a/b", "a+b", "a#", "a b", "a" * 33, 5):
            self.assertFalse(config.valid_node_id(bad), bad)
