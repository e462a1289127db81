"""wattlog - the collector: MQTT readings from wattnode plugs into emoncms PHPFina feeds."""

from wattnode import __version__  # noqa: F401  (one version for node and collector)
