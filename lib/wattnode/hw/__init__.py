"""hw - the node's hardware layer: everything that differs between one board and another.

A board object offers
    clock              time_s()   RTC time in seconds since the wire epoch (2020-01-01 UTC);
                                  clock.py decides whether it can be trusted
                       ticks_ms() a monotonic millisecond counter (time.ticks_diff() applies)
                       set_time(wire_s), wait(deadline_s, max_ms, poll_ms=0)
    output(gpio, value) / input(gpio, pull_up)   machine.Pin-like: value(), value(v)
    pixel(gpio)        a WS2812 LED: colour((r, g, b))
    uart(rx, tx, baud, parity)   parity "even" or None; any(), readinto(buf), write(buf)
    counter(gpio)      a hardware pulse counter: take() -> pulses since the last take()
    rtc                RTC memory (survives soft and watchdog resets): read(), write(buf)
    watchdog(ms)       feed() at least every ms, or the plug resets; there is one per plug and
                       it cannot be stopped: a later watchdog(ms) re-arms it with the new ms
    repl               True if a Ctrl-C hands the plug to a REPL (a plug), False if it ends
                       the process (on the unix port), so the node sends what it holds first
    wifi_up()          True when the network is usable (starts connecting if it is not)
    wireless           True when the network is Wi-Fi, which config.json's wifi must name (a
                       plug says at every boot when it names none: start.py)
    rssi_dbm()         the Wi-Fi signal received from the access point, in dBm (an int, e.g.
                       -60), or None when not connected or the radio cannot say
    ntp(host)          set the RTC from an NTP server; OSError if it does not answer
    mac(), urandom(n), reset(soft=False)

Implementations are imported only when a board file names them ("hal"), so the unix port
never imports ESP32-only modules. LAYERS maps each name to the module whose Board(board, cfg)
is that layer: "esp32" -> hw/esp32.py (machine, network, esp32). Another package may add its
own layer to it before the node starts (a board for the unix port, say).
"""

LAYERS = {"esp32": "wattnode.hw.esp32"}


def load(board, cfg):
    hal = board.get("hal", "esp32")
    module = LAYERS.get(hal)
    if module is None:
        raise ValueError("board %r: no hardware layer %r; the layers are %s"
                         % (board.get("name"), hal, ", ".join(sorted(LAYERS))))
    return __import__(module, None, None, ("Board",)).Board(board, cfg)
