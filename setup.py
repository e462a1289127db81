"""setup.py - what pyproject.toml cannot say: a wheel carries the dashboard's chart library.

Everything else is in pyproject.toml. build_py copies uPlot (pinned by package-lock.json, found
in node_modules or fetched by `npm pack` and checked against the lock: tools/lib/chartlib.py)
into wattlog/serve/web/lib/, where serve/web/page.py looks first, so `pip install .` serves a
History view that draws, with nothing to copy by hand. Without it the build fails in one
sentence rather than make a wheel whose page cannot draw. An editable install (tools/setup's) serves the
clone's node_modules instead, and copies nothing.
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.errors import SetupError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools", "lib"))

import chartlib  # noqa: E402  (tools/lib is not a package)


class BuildWithChartLib(build_py):
    def run(self):
        super().run()
        if self.editable_mode:
            return
        try:
            chartlib.copy_into(os.path.join(self.build_lib, "wattlog", "serve", "web", "lib"),
                               progress=lambda text: self.announce(text, 2))
        except chartlib.ChartLibMissing as e:
            raise SetupError("wattlog's build: %s" % e) from None


setup(cmdclass={"build_py": BuildWithChartLib})
