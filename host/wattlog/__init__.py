"""wattlog - the collector: MQTT readings from wattnode plugs into emoncms PHPFina feeds."""

__version__ = "0.1.0"
