"""test_broadlink.py - the SP3S protocol module (wattnode/broadlink.py) on MicroPython: the
datagrams python-broadlink 0.19 sends (built here byte by byte from its source's layout, not
with its code) get the answers it reads; malformed ones are dropped or answered with the
protocol's error code; sessions are evicted least recently used and an unknown one is
"expired"; auth is rate-limited; read mode never switches; service() allocates nothing while
no datagram waits. Garbage and time per request are measured and printed.

On the 32-bit WebAssembly port (a plug's 31-bit small ints, 4-byte pointers) AES comes from the
stand-in tests/device/run.py puts on the path there (support32/cryptolib.py, proven by
test_cryptolib_standin.py); values past 2**30, which are heap objects on such a port (session
ids, the power, the counters, a week of ticks), are exercised here."""

import gc
import socket
import time
import unittest
from binascii import unhexlify

import micropython

from netrig import free_udp_port
from rig import need_sockets

try:
    import cryptolib
    from wattnode import broadlink
except ImportError:
    cryptolib = None

MAC = b"\x02\x00\x00\x00\x00\x01"
INIT_KEY = unhexlify("097628343fe99e23765c1513accf8b02")  # the protocol's public key and IV
IV = unhexlify("562e17996d093d28ddb3ba695a2e6f58")


def csum(buf):
    s = 0xBEAF
    for b in buf:
        s += b
    return s & 0xFFFF


def aes(key, data, encrypt):
    a = cryptolib.aes(bytes(key), 2, IV)
    return a.encrypt(bytes(data)) if encrypt else a.decrypt(bytes(data))


def request(command, payload, key, session=0, count=0x8001, corrupt=None):
    """A datagram as python-broadlink's Device.send_packet builds it."""
    p = bytearray(0x38)
    p[0:8] = b"\x5a\xa5\xaa\x55\x5a\xa5\xaa\x55"
    p[0x24:0x26] = b"\x7a\x94"
    p[0x26] = command
    p[0x28] = count & 0xFF
    p[0x29] = count >> 8
    p[0x2A:0x30] = bytes(reversed(MAC))
    p[0x30:0x34] = session.to_bytes(4, "little")
    pc = csum(payload)
    if corrupt == "payload":
        pc ^= 1
    p[0x34] = pc & 0xFF
    p[0x35] = pc >> 8
    payload = bytes(payload) + bytes((16 - len(payload)) % 16)
    p.extend(aes(key, payload, True))
    c = csum(p)
    if corrupt == "outer":
        c ^= 1
    p[0x20] = c & 0xFF
    p[0x21] = c >> 8
    return bytes(p)


def hello(corrupt=False):
    p = bytearray(0x30)
    p[0x26] = 6
    c = csum(p) ^ (1 if corrupt else 0)
    p[0x20] = c & 0xFF
    p[0x21] = c >> 8
    return bytes(p)


def error(answer):
    e = answer[0x22] | answer[0x23] << 8
    return e - 0x10000 if e & 0x8000 else e


def garbage(fn):
    """The bytes fn() allocates, the collector held off."""
    gc.collect()
    gc.disable()
    try:
        before = gc.mem_alloc()
        fn()
        return gc.mem_alloc() - before
    finally:
        gc.enable()


class Plug:
    """What the server reads and drives: the newest slot's power, the relay, the log;
    `fresh`: the 20 random bytes (session id, key) of each auth to come, then a counter's."""

    def __init__(self, mode="read", fresh=()):
        self.power_dw = 12345
        self.on = False
        self.switches = []
        self.logs = []
        self.srv = broadlink.Server(mode, 0, MAC, "plug-bl", self.urandom, lambda: self.power_dw,
                                    lambda: self.on, self.switch, self.logs.append)
        self.n = 0
        self.fresh = list(fresh)

    def urandom(self, n):
        if self.fresh:
            return self.fresh.pop(0)
        self.n += 1
        return bytes((self.n + i) & 0xFF for i in range(n))

    def switch(self, on, who):
        self.switches.append((on, who))
        self.on = on

    def ask(self, datagram):
        """The answer's bytes (b"": dropped), checked as python-broadlink checks them."""
        n = self.srv.answer(datagram, ADDR)
        out = bytes(self.srv._out[:n])
        if n:
            real = (csum(out) - out[0x20] - out[0x21]) & 0xFFFF
            assert out[0x20] | out[0x21] << 8 == real, "answer checksum"
        return out

    def auth(self):
        ans = self.ask(request(0x65, auth_payload(), INIT_KEY))
        assert error(ans) == 0, error(ans)
        plain = aes(INIT_KEY, ans[0x38:], False)
        return int.from_bytes(plain[0:4], "little"), plain[4:20]

    def command(self, session, key, payload, corrupt=None, count=0x8001):
        ans = self.ask(request(0x6A, payload, key, session, count=count, corrupt=corrupt))
        if error(ans):
            return error(ans), None
        return 0, aes(key, ans[0x38:], False)


ADDR = b"\x02\x00\x30\x39\x7f\x00\x00\x01" + bytes(8)  # 127.0.0.1:12345 as the unix port gives it


def auth_payload():
    p = bytearray(0x50)
    p[0x04:0x14] = b"\x31" * 16
    p[0x1E] = 1
    p[0x2D] = 1
    p[0x30:0x36] = b"Test 1"
    return p


ENERGY = bytes([8, 0, 254, 1, 5, 1, 0, 0, 0, 45])
CHECK = bytes([1]) + bytes(15)


def set_power(on):
    p = bytearray(16)
    p[0] = 2
    p[4] = 1 if on else 0
    return p


def watts(plain):
    """python-broadlink's sp3s.get_energy(): bytes 7..5 as hex digits, / 100."""
    return int("%02x%02x%02x" % (plain[7], plain[6], plain[5])) / 100


class TestBroadlink(unittest.TestCase):
    def setUp(self):
        if cryptolib is None:
            raise unittest.SkipTest("this port has no cryptolib (AES)")

    def test_hello_names_an_sp3s_eu_with_the_plug_s_mac(self):
        plug = Plug()
        ans = plug.ask(hello())
        self.assertEqual(len(ans), 0x80)
        self.assertEqual(ans[0x34] | ans[0x35] << 8, 0x947A)
        self.assertEqual(bytes(reversed(ans[0x3A:0x40])), MAC)
        self.assertEqual(ans[0x40:0x47], b"plug-bl")
        self.assertEqual((ans[0x47], ans[0x7F]), (0, 0))  # name ends; not locked
        self.assertEqual(plug.ask(hello(corrupt=True)), b"")

    def test_auth_then_check_power_energy_and_version(self):
        plug = Plug()
        session, key = plug.auth()
        self.assertNotEqual(session, 0)
        self.assertNotEqual(key, INIT_KEY)
        err, plain = plug.command(session, key, CHECK)
        self.assertEqual((err, plain[4]), (0, 0))
        plug.on = True
        self.assertEqual(plug.command(session, key, CHECK)[1][4], 1)
        self.assertEqual(watts(plug.command(session, key, ENERGY)[1]), 1234.5)
        plug.power_dw = 100000  # 10 kW: more than six digits hold
        self.assertEqual(watts(plug.command(session, key, ENERGY)[1]), 9999.99)
        plug.power_dw = -5
        self.assertEqual(watts(plug.command(session, key, ENERGY)[1]), 0)
        plug.power_dw = -2147483648  # wire.POWER_MISSING: no slot yet
        self.assertEqual(plug.command(session, key, ENERGY)[0], broadlink.ERR_READ)
        plain = plug.command(session, key, bytes([0x68]))[1]
        self.assertEqual(plain[4] | plain[5] << 8, plug.srv.firmware)

    def test_malformed_datagrams_are_dropped_or_answered_with_the_error_code(self):
        plug = Plug()
        session, key = plug.auth()
        good = request(0x6A, CHECK, key, session)
        for bad in (request(0x6A, CHECK, key, session, corrupt="outer"), good[:0x40],
                    good + bytes(16 * 6), good[:0x37], b"", bytes(0x30), b"\x5a" * 0x48):
            self.assertEqual(plug.ask(bad), b"", bad)
        self.assertEqual(plug.srv.dropped, 7)
        ping = bytearray(0x30)
        ping[0x26] = 1
        self.assertEqual(plug.ask(bytes(ping)), b"")  # python-broadlink's ping(): not an error
        self.assertEqual(plug.srv.dropped, 7)
        self.assertEqual(len(plug.logs), 1)  # said once
        self.assertIn("127.0.0.1:12345", plug.logs[0])
        self.assertEqual(plug.command(session, key, CHECK, corrupt="payload")[0],
                         broadlink.ERR_STRUCTURE)
        for unknown in (bytes([3]) + bytes(15), bytes(4) + b"new name" + bytes(0x44),
                        bytes([8, 0, 254, 1, 5, 1, 0, 0, 0, 44])):
            self.assertEqual(plug.command(session, key, unknown)[0], broadlink.ERR_NOT_SUPPORTED)
        self.assertEqual(error(plug.ask(request(0x66, CHECK, key, session))),
                         broadlink.ERR_NOT_SUPPORTED)
        self.assertEqual(plug.command(session ^ 1, key, CHECK)[0], broadlink.ERR_EXPIRED)
        self.assertEqual(plug.command(0, key, CHECK)[0], broadlink.ERR_EXPIRED)
        self.assertEqual(plug.command(session, key, CHECK)[0], 0)  # still good

    def test_read_mode_never_switches_control_mode_does(self):
        plug = Plug("read")
        session, key = plug.auth()
        self.assertEqual(plug.command(session, key, set_power(True))[0],
                         broadlink.ERR_NOT_SUPPORTED)
        self.assertEqual((plug.on, plug.switches), (False, []))
        plug = Plug("control")
        session, key = plug.auth()
        err, plain = plug.command(session, key, set_power(True))
        self.assertEqual((err, plain[4], plug.on), (0, 1, True))
        self.assertEqual(plug.switches, [(True, "127.0.0.1:12345")])
        plug.command(session, key, set_power(False))
        self.assertFalse(plug.on)

    def test_sessions_are_evicted_least_recently_used_and_auth_is_rate_limited(self):
        plug = Plug()
        plug.srv._uses = (1 << 30) - 3  # the use counter crosses 2**30 (a heap int on a plug)
        sessions = []
        for _ in range(broadlink.SLOTS):
            plug.srv._tokens = broadlink.AUTH_BURST  # as if the rate limit had refilled
            sessions.append(plug.auth())
        plug.command(sessions[0][0], sessions[0][1], CHECK)  # the first is used again
        plug.srv._tokens = broadlink.AUTH_BURST
        plug.auth()  # evicts the second, the least recently used
        self.assertEqual(plug.command(sessions[1][0], sessions[1][1], CHECK)[0], broadlink.ERR_EXPIRED)
        for s, k in [sessions[0]] + sessions[2:]:
            self.assertEqual(plug.command(s, k, CHECK)[0], 0)
        answered = 0
        for _ in range(20):  # well within AUTH_EVERY_MS
            answered += 1 if plug.ask(request(0x65, auth_payload(), INIT_KEY)) else 0
        self.assertTrue(answered <= broadlink.AUTH_BURST, answered)
        self.assertTrue(plug.srv.auth_limited >= 20 - broadlink.AUTH_BURST)

    def test_values_past_a_32_bit_plug_s_small_ints_are_exact(self):
        """Session ids of 2**30 and more (ids are 4 random bytes), the all-zero id (taken as
        "no session", so never handed out), the packet count at 0xFFFF, checksums that wrap
        past 16 bits, the largest power a wire record holds, and counters past 2**30."""
        ids = (b"\xff\xff\xff\xff", b"\x00\x00\x00\x40", b"\x00\x00\x00\x80", bytes(4))
        plug = Plug(fresh=[i + bytes(range(16)) for i in ids])
        plug.srv.requests = (1 << 30) - 1
        sessions = []
        for _ in ids:
            plug.srv._tokens = broadlink.AUTH_BURST
            sessions.append(plug.auth())
        self.assertEqual([s for s, _ in sessions], [0xFFFFFFFF, 1 << 30, 1 << 31, 1])
        self.assertEqual(plug.srv.requests, (1 << 30) + 3)
        for session, key in sessions:
            ans = plug.ask(request(0x6A, CHECK, key, session, count=0xFFFF))
            self.assertEqual((error(ans), ans[0x28:0x2A], ans[0x30:0x34]),
                             (0, b"\xff\xff", session.to_bytes(4, "little")))
            self.assertEqual(plug.command(session ^ (1 << 31), key, CHECK)[0],
                             broadlink.ERR_EXPIRED)
        session, key = sessions[0]
        for power_dw, w in ((98765, 9876.5), (99999, 9999.9), (2147483647, 9999.99)):
            plug.power_dw = power_dw
            self.assertEqual(watts(plug.command(session, key, ENERGY)[1]), w)
        # 0xBEAF + 80 * 0xFF wraps: the payload checksum is still the client's
        self.assertEqual(plug.command(session, key, b"\xff" * 0x50)[0],
                         broadlink.ERR_NOT_SUPPORTED)

    def test_auth_is_answered_after_a_week_without_one(self):
        """ticks_ms wraps at 2**30 ms (12.4 days) on a 32-bit plug, and ticks_diff turns
        negative past half of that: a week's wait must refill the auth limit, not empty it."""
        plug = Plug()
        for _ in range(broadlink.AUTH_BURST):
            plug.auth()
        self.assertEqual(plug.ask(request(0x65, auth_payload(), INIT_KEY)), b"")  # limited
        for days in (1, 7, 13):
            plug.srv._tokens = 0
            ago = time.ticks_ms()
            for _ in range(days):  # ticks_add takes less than half a period at a time
                ago = time.ticks_add(ago, -86400 * 1000)
            plug.srv._refill_ms = ago
            self.assertNotEqual(plug.ask(request(0x65, auth_payload(), INIT_KEY)), b"", days)
            answered = sum(1 for _ in range(20)
                           if plug.ask(request(0x65, auth_payload(), INIT_KEY)))
            self.assertTrue(answered < broadlink.AUTH_BURST, (days, answered))  # limited again

    def test_garbage_and_time_per_request(self):
        plug = Plug()
        session, key = plug.auth()
        datagram = request(0x6A, ENERGY, key, session)
        srv = plug.srv
        srv.answer(datagram, ADDR)
        total = garbage(lambda: srv.answer(datagram, ADDR))
        src = memoryview(datagram)[0x38:]
        plain = memoryview(bytearray(16))
        out = memoryview(bytearray(16))

        def two_aes():  # what a request asks of cryptolib
            cryptolib.aes(key, 2, IV).decrypt(src, plain)
            cryptolib.aes(key, 2, IV).encrypt(plain, out)
        own = total - garbage(two_aes)
        standin = hasattr(cryptolib, "__file__")  # the built-in module has none
        n = 200
        t0 = time.ticks_us()
        for _ in range(n):
            srv.answer(datagram, ADDR)
        us = time.ticks_diff(time.ticks_us(), t0) // n
        note = " (AES by the tests' stand-in: not a plug's)" if standin else ""
        print("\n    broadlink get_energy: %d bytes of garbage, %d of them not cryptolib's; %d us a "
              "request%s" % (total, own, us, note))
        # the unix port: 1056 bytes, 416 not cryptolib's (memoryviews); the 32-bit port: 208
        self.assertTrue(own < 512, own)
        if not standin:
            self.assertTrue(total < 2048, total)

    def test_service_allocates_nothing_while_no_datagram_waits_and_answers_one(self):
        need_sockets()
        srv = Plug().srv
        srv.port = free_udp_port(range(47300, 47400))
        srv.open()
        try:
            gc.collect()
            srv.service()
            micropython.heap_lock()
            try:
                for _ in range(100):
                    srv.service()
            finally:
                micropython.heap_unlock()
            client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            client.settimeout(2)
            client.sendto(hello(), socket.getaddrinfo("127.0.0.1", srv.port)[0][-1])
            deadline = time.ticks_add(time.ticks_ms(), 2000)
            while srv.requests == 0 and time.ticks_diff(deadline, time.ticks_ms()) > 0:
                srv.service()
            ans = client.recv(256)
            client.close()
            self.assertEqual(ans[0x34] | ans[0x35] << 8, 0x947A)
        finally:
            srv.close()


class TestBroadlinkConfig(unittest.TestCase):
    def test_the_mode_is_off_by_default_and_a_bad_one_is_reported_and_off(self):
        from wattnode import config
        cfg, problems = config.check({})
        self.assertEqual((cfg["broadlink"], cfg["broadlink_port"], problems), ("off", 80, []))
        cfg, problems = config.check({"broadlink": "on", "broadlink_port": 0})
        self.assertEqual((cfg["broadlink"], cfg["broadlink_port"]), ("off", 80))
        self.assertEqual([p[1] for p in problems], ["broadlink", "broadlink_port"])
        self.assertIn("must be one of off, read, control", problems[0][2])
        cfg, problems = config.check({"broadlink": "control", "broadlink_port": 47123})
        self.assertEqual((cfg["broadlink"], cfg["broadlink_port"], problems),
                         ("control", 47123, []))
