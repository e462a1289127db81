"""wattnode - the node library of wattlog: MicroPython firmware for metering plugs.

__version__ is the one place the version of wattlog is written: the collector
(wattlog.__version__), pyproject.toml (setuptools reads it from here), manifest.py and the
Home Assistant discovery (discovery.py) all take it from here.
"""

__version__ = "0.1.0"


def forget(*names):
    """Unload one-shot submodules (config and board after start-up, discovery after it is
    sent, commands after a command, ota after an update): their code and globals go back to
    the heap at the next collection, and the next import loads them again. A module is only
    freed when nothing else holds it or its functions: the caller must not keep either.
    On a plug whose modules are frozen into the firmware the code stays in flash anyway, but
    each module's globals are still on the heap; loaded from .mpy files, all of it is."""
    import sys
    package = sys.modules[__name__]
    for name in names:
        sys.modules.pop(__name__ + "." + name, None)
        try:
            delattr(package, name)
        except (AttributeError, KeyError):  # MicroPython: KeyError for a missing attribute
            pass
