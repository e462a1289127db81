"""broadlink.py - the plug answers the Broadlink SP3S-EU local protocol (opt-in), so scripts
written for an SP3S (python-broadlink's sp3s.get_energy(), broadlink_cli --energy) keep working.
(About 350 lines, one concern: one protocol, its framing, its encryption and its four answers, with
the byte table it needs.)

config "broadlink": "off" (default: this module is not even imported), "read" (discovery,
auth, check_power, get_energy, firmware version; set_power answers "not supported") or
"control" (set_power switches the relay through Node.on_relay, the path and rules of an MQTT
relay/set, and the log topic says which address switched it). The protocol's initial key is
public: anyone on the LAN can authenticate, so "control" lets anyone on the LAN switch the plug,
as the SP3S did. Wi-Fi setup, name and lock are never implemented (answered "not supported").

Datagrams (UDP port "broadlink_port", 80 on a plug), as python-broadlink 0.19 sends them:
  hello     0x30 bytes, 0x26 = 6, checksum at 0x20 -> 0x80 bytes: devtype 0x34, MAC (reversed)
            0x3A, name 0x40 (NUL-ended), lock flag 0x7F
  ping      0x30 bytes, 0x26 = 1: no answer (a real SP3S's watchdog for its cloud)
  command   0x38-byte header + AES-128-CBC payload (length a multiple of 16):
    0x00 5a a5 aa 55 5a a5 aa 55   0x20 checksum u16 (sum of the datagram from 0xBEAF, this
    field counted as 0)   0x22 error i16 (answers)   0x24 devtype   0x26 command (answer:
    + 0x384)   0x28 count (echoed)   0x2A MAC reversed   0x30 session id   0x34 checksum of
    the plain payload (from 0xBEAF)   0x38 the encrypted payload
  0x65 auth: payload under the public key -> a fresh session id (4 bytes) and key (16 bytes),
            under the public key. Limited to AUTH_BURST, then one every AUTH_EVERY_MS; more
            are dropped (the client retries every second). SLOTS sessions; the least
            recently used is evicted. An unknown session id gets -7 "control key expired":
            the client authenticates again (after a reboot every session is unknown).
  0x6A command, under the session key, plain payload[0]:
            1 check_power -> [4] relay;  2 set_power [4] -> -4 in read mode;
            8 get_energy (the SP3S request 08 00 fe 01 05 01 00 00 00 2d) -> bytes 7..5 the
              newest slot's mean power as 6 decimal digits (BCD), 0.01 W, capped at 9999.99;
              -10 "read error" while no slot has a power;
            0x68 firmware version -> [4..5] (wattnode's version, major*10000+minor*100+patch)
            anything else -4 "command not supported"; a bad payload checksum -6.
A datagram too short or long, of a length that is not header + 16*n, or with a bad checksum
is dropped (counted; the first is said on the log topic).

Memory: the answer is built in a preallocated buffer, sessions live in preallocated
bytearrays (ids are compared as bytes: on a plug an int of 2**30 or more is a heap object).
service() allocates nothing when no datagram waits (select.poll.ipoll). A request allocates
the datagram and address recvfrom returns, two cryptolib.aes objects and a few memoryview
slices (tests/device/test_broadlink.py measures it: about 1 KiB on the 64-bit unix port). service() takes at most PER_TURN datagrams a loop turn, so a
flood cannot starve sampling; what the kernel cannot queue is lost, as UDP is.
"""

import select
import socket
import time
from binascii import unhexlify

import cryptolib
from micropython import const

from wattnode import __version__, wire

DEVTYPE = const(0x947A)  # SP3S-EU
PER_TURN = const(4)
SLOTS = const(4)
AUTH_BURST = const(3)
AUTH_EVERY_MS = const(500)
HEADER = const(0x38)
PLAIN_MAX = const(0x50)
HELLO_SIZE = const(0x30)
HELLO_ANSWER = const(0x80)
OK = const(0)
ERR_NOT_SUPPORTED = const(-4)
ERR_STRUCTURE = const(-6)
ERR_EXPIRED = const(-7)
ERR_READ = const(-10)
_AUTH = const(0x65)
_COMMAND = const(0x6A)
_HELLO = const(6)
_PING = const(1)
_ANSWER_OFFSET = const(0x384)
_CBC = const(2)
_NO_SKIP = const(-2)
_INIT_KEY = unhexlify("097628343fe99e23765c1513accf8b02")
_IV = unhexlify("562e17996d093d28ddb3ba695a2e6f58")
_MAGIC = b"\x5a\xa5\xaa\x55\x5a\xa5\xaa\x55"
_ENERGY_REQUEST = b"\x08\x00\xfe\x01\x05\x01\x00\x00\x00\x2d"


def checksum(buf, start, end, skip):
    """Sum of buf[start:end] from 0xBEAF, the two bytes at `skip` left out (_NO_SKIP: none),
    in 16 bits."""
    s = 0xBEAF
    for i in range(start, end):
        if i != skip and i != skip + 1:
            s += buf[i]
    return s & 0xFFFF


def _u16(buf, off):
    return buf[off] | buf[off + 1] << 8


def _put16(buf, off, v):
    buf[off] = v & 0xFF
    buf[off + 1] = (v >> 8) & 0xFF


def _bcd(v):
    return (v // 10) << 4 | v % 10


def who(addr):
    """A recvfrom address as "ip:port" (a tuple on the ESP32, a sockaddr on the unix port)."""
    if isinstance(addr, tuple):
        return "%s:%d" % addr
    return "%d.%d.%d.%d:%d" % (addr[4], addr[5], addr[6], addr[7], addr[2] << 8 | addr[3])


class Server:
    def __init__(self, mode, port, mac, name, urandom, power_dw, relay_on, switch, log):
        """mode "read" or "control"; power_dw() the newest slot's mean (wire.POWER_MISSING:
        none), relay_on() the relay, switch(on, who) in control mode, log(text) the log topic."""
        self.mode = mode
        self.port = port
        self._mac = bytes(reversed(mac))
        self._name = name.encode()[:0x3E]
        self._urandom = urandom
        self._power_dw = power_dw
        self._relay_on = relay_on
        self._switch = switch
        self._log = log
        major, minor, patch = (int(x) for x in __version__.split("."))
        self.firmware = major * 10000 + minor * 100 + patch
        self._out = bytearray(HELLO_ANSWER)
        self._plain = bytearray(PLAIN_MAX)
        self._plain_mv = memoryview(self._plain)
        self._ids = bytearray(4 * SLOTS)  # all zero: id 0 is no session
        self._keys = bytearray(16 * SLOTS)
        self._keys_mv = memoryview(self._keys)
        self._used = [0] * SLOTS
        self._uses = 0
        self._tokens = AUTH_BURST
        self._refill_ms = time.ticks_ms()
        self.requests = self.dropped = self.errors = self.auths = self.auth_limited = 0
        self.switched = 0
        self._said_drop = False
        self.sock = None
        self._poll = None

    def open(self):
        """Bind the UDP port (non-blocking); OSError when it cannot."""
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(socket.getaddrinfo("0.0.0.0", self.port)[0][-1])
            s.setblocking(False)
        except OSError:
            s.close()
            raise
        self.sock = s
        self._poll = select.poll()
        self._poll.register(s, select.POLLIN)

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def counts(self):
        return {"requests": self.requests, "dropped": self.dropped, "errors": self.errors,
                "auths": self.auths, "auth_limited": self.auth_limited, "switched": self.switched}

    def service(self):
        """Answer at most PER_TURN waiting datagrams; allocates nothing when none waits."""
        if self._poll is None:
            return
        for _ in range(PER_TURN):
            ready = False
            for _ in self._poll.ipoll(0):
                ready = True
            if not ready:
                return
            try:
                data, addr = self.sock.recvfrom(HEADER + PLAIN_MAX + 1)
            except OSError:
                return
            n = self.answer(data, addr)
            if n:
                try:
                    self.sock.sendto(memoryview(self._out)[:n], addr)
                except OSError:
                    pass  # the client retries; UDP promises nothing more

    def answer(self, data, addr):
        """The answer to one datagram, in self._out: its length (0: none, dropped)."""
        self.requests += 1
        n = len(data)
        if n == HELLO_SIZE and data[0x26] == _PING:
            return 0  # python-broadlink's ping(): it feeds an SP3S's cloud watchdog; no answer
        if n == HELLO_SIZE and data[0x26] == _HELLO:
            if _u16(data, 0x20) != checksum(data, 0, n, 0x20):
                return self._drop(addr)
            return self._hello()
        if n < HEADER + 16 or n > HEADER + PLAIN_MAX or (n - HEADER) % 16 \
                or data[0:8] != _MAGIC or _u16(data, 0x20) != checksum(data, 0, n, 0x20):
            return self._drop(addr)
        command = _u16(data, 0x26)
        if command == _AUTH:
            return self._auth(data, n)
        if command != _COMMAND:
            return self._header(data, ERR_NOT_SUPPORTED, 0)
        slot = self._session(data)
        if slot < 0:
            return self._header(data, ERR_EXPIRED, 0)
        plain = self._decrypt(data, n, self._keys_mv[slot * 16:slot * 16 + 16])
        if plain < 0:
            return self._header(data, ERR_STRUCTURE, 0)
        return self._command(data, slot, plain, addr)

    def _drop(self, addr):
        self.dropped += 1
        if not self._said_drop:
            self._said_drop = True
            self._log("broadlink: dropped a datagram from %s (not a well-formed request: length "
                      "or checksum); more are counted in info's broadlink counts" % who(addr))
        return 0

    def _hello(self):
        out = self._out
        for i in range(HELLO_ANSWER):
            out[i] = 0
        out[0x26] = 7
        _put16(out, 0x34, DEVTYPE)
        out[0x3A:0x40] = self._mac
        out[0x40:0x40 + len(self._name)] = self._name
        _put16(out, 0x20, checksum(out, 0, HELLO_ANSWER, 0x20))
        return HELLO_ANSWER

    def _decrypt(self, data, n, key):
        """Decrypt the payload into self._plain; its length, or -1 on a bad payload checksum."""
        size = n - HEADER
        cryptolib.aes(key, _CBC, _IV).decrypt(memoryview(data)[HEADER:n], self._plain_mv[:size])
        if checksum(self._plain, 0, size, _NO_SKIP) != _u16(data, 0x34):
            return -1
        return size

    def _session(self, data):
        ids = self._ids
        for slot in range(SLOTS):
            o = slot * 4
            if ids[o] == data[0x30] and ids[o + 1] == data[0x31] and ids[o + 2] == data[0x32] \
                    and ids[o + 3] == data[0x33] and (ids[o] | ids[o + 1] | ids[o + 2] | ids[o + 3]):
                self._uses += 1
                self._used[slot] = self._uses
                return slot
        return -1

    def _auth(self, data, n):
        now = time.ticks_ms()
        gained = time.ticks_diff(now, self._refill_ms) // AUTH_EVERY_MS
        if gained < 0 or gained >= AUTH_BURST:  # full; ticks_diff turns negative after half
            self._tokens = AUTH_BURST  # a ticks period without an auth (6.2 days on a plug)
            self._refill_ms = now
        elif gained:
            self._tokens = min(AUTH_BURST, self._tokens + gained)
            self._refill_ms = time.ticks_add(self._refill_ms, gained * AUTH_EVERY_MS)
        if self._tokens <= 0:
            self.auth_limited += 1
            return 0
        self._tokens -= 1
        if self._decrypt(data, n, _INIT_KEY) < 0:
            return self._header(data, ERR_STRUCTURE, 0)
        slot = 0
        for i in range(1, SLOTS):
            if self._used[i] < self._used[slot]:
                slot = i
        fresh = self._urandom(20)
        if not (fresh[0] | fresh[1] | fresh[2] | fresh[3]):
            fresh = b"\x01" + fresh[1:]  # id 0 is no session
        self._ids[slot * 4:slot * 4 + 4] = fresh[0:4]
        self._keys[slot * 16:slot * 16 + 16] = fresh[4:20]
        self._uses += 1
        self._used[slot] = self._uses
        self.auths += 1
        plain = self._plain
        for i in range(32):
            plain[i] = 0
        plain[0:20] = fresh
        return self._header(data, OK, 32, _INIT_KEY)

    def _command(self, data, slot, size, addr):
        p = self._plain
        key = self._keys_mv[slot * 16:slot * 16 + 16]
        op = p[0]
        if op == 1:
            on = self._relay_on()
        elif op == 2:
            if self.mode != "control":
                return self._header(data, ERR_NOT_SUPPORTED, 0)
            on = bool(p[4])
            if on != self._relay_on():
                self.switched += 1
            self._switch(on, who(addr))
            on = self._relay_on()
        elif op == 8 and size >= 16 and p[0:10] == _ENERGY_REQUEST:
            return self._energy(data, key)
        elif op == 0x68:
            for i in range(16):
                p[i] = 0
            p[0] = 0x68
            _put16(p, 4, self.firmware)
            return self._header(data, OK, 16, key)
        else:
            return self._header(data, ERR_NOT_SUPPORTED, 0)
        for i in range(1, 16):
            p[i] = 0
        p[4] = 1 if on else 0
        return self._header(data, OK, 16, key)

    def _energy(self, data, key):
        power_dw = self._power_dw()
        if power_dw == wire.POWER_MISSING:  # no slot has a power yet
            return self._header(data, ERR_READ, 0)
        cw = min(max(power_dw, 0) * 10, 999999)
        p = self._plain
        for i in range(10, 16):
            p[i] = 0
        p[5] = _bcd(cw % 100)
        p[6] = _bcd(cw // 100 % 100)
        p[7] = _bcd(cw // 10000)
        return self._header(data, OK, 16, key)

    def _header(self, data, error, size, key=None):
        """The answer's header (and `size` bytes of self._plain, encrypted with `key`)."""
        out = self._out
        for i in range(HEADER):
            out[i] = 0
        out[0:8] = _MAGIC
        _put16(out, 0x22, error & 0xFFFF)
        _put16(out, 0x24, DEVTYPE)
        _put16(out, 0x26, _u16(data, 0x26) + _ANSWER_OFFSET)
        out[0x28] = data[0x28]
        out[0x29] = data[0x29]
        out[0x2A:0x30] = self._mac
        for i in range(0x30, 0x34):
            out[i] = data[i]
        if error:
            self.errors += 1
        if size:
            _put16(out, 0x34, checksum(self._plain, 0, size, _NO_SKIP))
            cryptolib.aes(key, _CBC, _IV).encrypt(self._plain_mv[:size],
                                                  memoryview(out)[HEADER:HEADER + size])
        _put16(out, 0x20, checksum(out, 0, HEADER + size, 0x20))
        return HEADER + size
