"""wattnode - the node library of wattlog: MicroPython firmware for metering plugs.

__version__ is the one place the version of wattlog is written: the collector
(wattlog.__version__), pyproject.toml (setuptools reads it from here), manifest.py and the
Home Assistant discovery (discovery.py) all take it from here.
"""

__version__ = "0.1.0"
