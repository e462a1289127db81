"""wattnode - the node library of wattlog: MicroPython firmware for metering plugs.

__version__ is the one place the version of wattlog is written: the collector
(wattlog.__version__), pyproject.toml (setuptools reads it from here), manifest.py and the
Home Assistant discovery (discovery.py) all take it from here.
"""

__version__ = "0.1.0"


def forget(*names):
    """Unload one-shot submodules (config and board after start-up, discovery after it is
    sent, commands after a command, the update's parts after an update): their code and
    globals go back to the heap at the next collection, and the next import loads them again.
    A name may be a subpackage's module ("ota.trial"): it is dropped from that subpackage;
    a subpackage ("ota") goes with all its modules.
    A module is only freed when nothing else holds it or its functions: the caller must not
    keep either. On a plug whose modules are frozen into the firmware the code stays in flash
    anyway, but each module's globals are still on the heap; loaded from .mpy files, all of
    it is."""
    import sys
    for name in names:
        full = __name__ + "." + name
        if hasattr(sys.modules.get(full), "__path__"):  # a package goes with its modules
            for sub in [m for m in sys.modules if m.startswith(full + ".")]:
                sys.modules.pop(sub)
        sys.modules.pop(full, None)
        cut = full.rfind(".")
        try:
            delattr(sys.modules[full[:cut]], full[cut + 1:])
        except (AttributeError, KeyError):  # MicroPython: KeyError for a missing attribute
            pass
