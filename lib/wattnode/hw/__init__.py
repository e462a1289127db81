"""hw - the node's hardware layer: everything that differs between a plug and the simulator.

A board object offers
    clock            time_s() -> node seconds since the wire epoch (2020-01-01 UTC)
                     wait(deadline_s, max_ms) -> sleep until node time reaches deadline_s or
                                                 max_ms of real time have passed, if sooner
                     ended() -> True when a simulated run has reached its end
    relay            a machine.Pin-like object: value() reads, value(v) sets
    wifi_up()        True when the network is usable (starts connecting if it is not)
    mac()            6 bytes, the station MAC (the default node id derives from it)
    urandom(n)       n random bytes
Real-time intervals (MQTT keepalive, back-off) use time.ticks_ms(), which both ports have.

Implementations are imported only when a board file names them ("hal"), so the unix port
never imports ESP32-only modules: "sim" -> hw/sim.py.
"""


def load(board, cfg):
    hal = board.get("hal", "esp32")
    if hal == "sim":
        from wattnode.hw.sim import Board
        return Board(board, cfg)
    raise ValueError("board %r: no hardware layer %r on this port" % (board.get("name"), hal))
