"""wire.py - what the node and the collector say to each other: the byte layout of a batch of
readings, and the acks that answer it. Shared by both (MicroPython and CPython); the same
vectors (tests/vectors/wire.json, acks.json) pass on each.

A batch is one MQTT payload on wattlog/<node>/readings: a 24-byte header followed by `count`
16-byte records, all little-endian. The node's ring stores records exactly as they are sent,
so a batch is the header plus a slice of the ring.

Header (HEADER_SIZE = 24)
  off size type  field        meaning
   0   1   u8    version      VERSION (2); a decoder refuses any other
   1   1   u8    record_size  RECORD_SIZE (16); a decoder refuses any other
   2   2   u16   count        records that follow (1..MAX_COUNT)
   4   2   u16   interval_s   slot length in seconds, 1..3600
   6   2   u16   reserved     0
   8   4   u32   boot         random number drawn at each node boot
  12   4   u32   seq          sequence number of the first record (counts from 0 each boot)
  16   4   u32   dropped      records the node's ring overwrote unacknowledged since boot
  20   4   u32   held         oldest seq the node still holds: records below it are gone
                              from its ring (acknowledged, or dropped), so asking for them
                              again is pointless (the collector's gap accounting needs this)

Record (RECORD_SIZE = 16)
  off size type  field        meaning                                     missing value
   0   4   u32   t_s          slot start, seconds since 2020-01-01 00:00 UTC (EPOCH_UNIX)
   4   4   i32   power_dw     mean power over the slot, 0.1 W             POWER_MISSING
   8   4   u32   energy_wh    the node's energy counter at slot end, Wh   ENERGY_MISSING
  12   2   u16   voltage_cv   mean voltage over the slot, 0.01 V          U16_MISSING
  14   2   u16   current_ma   mean current over the slot, mA              U16_MISSING

In units (units(), FIELDS: the collector's columns, in the channel order power, voltage,
current, energy): a field divided by its scale, or None (NaN on the collector) where it holds
its missing value:
  field        scale   unit   missing
  power_dw     10      W      POWER_MISSING
  voltage_cv   100     V      U16_MISSING
  current_ma   1000    A      U16_MISSING
  energy_wh    1000    kWh    ENERGY_MISSING

Why integers and a 2020 epoch: on the ESP32 every float result and every int of 2**30 or more
is a heap object, so the node samples in fixed point and counts time from 2020 (2**30 s after
2020 is the year 2054). Power is the slot's mean (energy delta / slot length), so the stored
series integrates to the meter's energy.

Acks: a JSON object on <base>/<node>/ack, from the collector to the node (at most
256 bytes). The collector writes them with encode_ack/encode_resend/encode_clock, keys in
the order below; the node reads every one with parse_ack, which the collector also uses on
the acks the broker retains.

  kind    payload                                               retained  meaning
  ACK     {"boot": B, "seq": S, "time": T, "commit": C}         yes       boot B's records below S
                                                                          are on the collector's
                                                                          disk: free them
  RESEND  {"boot": B, "seq": S, "resend": R, "time": T}         no        the collector lacks boot
                                                                          B's records from R: send
                                                                          them again (S as in ACK)
  CLOCK   {"time": T, "clock": true, "commit_s": CS             no        the answer to the node's
           [, "energy_wh": E, "energy_time": TE]}                         "online" on its status

  field        value                 in                  meaning
  boot         u32                   ACK, RESEND         the boot id of the batches it answers
  seq          u32                   ACK, RESEND         every record below it is stored
  resend       u32                   RESEND              the first record the collector lacks
  time         u32, unix s           CLOCK; ACK, RESEND  the collector's clock when it was sent
                                     optional            (the clock of a plug with no NTP server)
  commit       u32                   ACK, optional       the commit's number (commit.json): the
                                                         retained acks say which one plugs heard
  commit_s     1..86400 s            CLOCK, optional     the collector's commit interval: the
                                                         node sends again what no ack covers
                                                         after 3 of them (encode_clock holds a
                                                         longer interval to a day)
  energy_wh    0..2**30 - 1          CLOCK, optional,    the largest energy total the collector
  energy_time  u32, unix s           both or neither     holds for the node, and when it was true

A payload with "clock" is a CLOCK (its value must be true), else one with "resend" a RESEND,
else an ACK. Values are JSON integers (not true, not 1.0). Optional fields may be absent (acks
retained by an older collector have no "commit"); keys not listed are ignored, so a newer
collector may add some. parse_ack refuses anything else with AckError saying why.

Updates (the package ota/ says the rest of their protocol): an ota/manifest message is
"<hmac hex>\n<manifest JSON>" with an "id" of 8 hex digits; manifest_id() finds it without
parsing the JSON. A plug that has no heap even for the update's code answers a manifest with
ota_refused(), on its retained ota/status, at once (the operator's `wattlog ota` would
otherwise wait for its timeout): {"id", "state": "refused", "running", "reason"}. Both are here,
loaded on every plug, because the node needs them exactly when nothing else can be loaded.
"""

import json
import struct

try:
    from micropython import const
except ImportError:  # CPython: the collector imports this module too
    def const(x):
        return x

VERSION = const(2)
HEADER_SIZE = const(24)
RECORD_SIZE = const(16)
MAX_COUNT = const(4096)
MAX_INTERVAL_S = const(3600)
EPOCH_UNIX = const(1577836800)  # 2020-01-01T00:00:00Z

POWER_MISSING = const(-2147483648)
ENERGY_MISSING = const(0xFFFFFFFF)
U16_MISSING = const(0xFFFF)

ACK = const(0)
RESEND = const(1)
CLOCK = const(2)
_ACK_MAX_BYTES = const(256)
_U32_MAX = const(0xFFFFFFFF)
_COMMIT_S_MAX = const(86400)
_ENERGY_WH_MAX = const(0x3FFFFFFF)  # below 2**30: a small int on the node

HEADER_FMT = "<BBHHHIIII"
RECORD_FMT = "<IiIHH"
# (record field, missing value, raw units per unit) in the channel order power, voltage,
# current, energy: the table above, read by units() here and, as numpy columns, by the
# collector's ingest
FIELDS = (("power_dw", POWER_MISSING, 10), ("voltage_cv", U16_MISSING, 100),
          ("current_ma", U16_MISSING, 1000), ("energy_wh", ENERGY_MISSING, 1000))


class BatchError(ValueError):
    """A malformed batch: `kind` is one word (truncated, oversized, version, record-size,
    count, interval, held), str() says what is wrong in words."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def pack_header(buf, off, count, interval_s, boot, seq, dropped, held):
    struct.pack_into(HEADER_FMT, buf, off, VERSION, RECORD_SIZE, count, interval_s, 0,
                     boot, seq, dropped, held)


def pack_record(buf, off, t_s, power_dw, energy_wh, voltage_cv, current_ma):
    struct.pack_into(RECORD_FMT, buf, off, t_s, power_dw, energy_wh, voltage_cv, current_ma)


def decode_header(data):
    """(count, interval_s, boot, seq, dropped, held) of a whole batch; BatchError saying what
    is wrong."""
    n = len(data)
    if n < HEADER_SIZE:
        raise BatchError("truncated", "truncated: %d bytes, shorter than the %d-byte header"
                         % (n, HEADER_SIZE))
    version, rsize, count, interval_s, _, boot, seq, dropped, held = \
        struct.unpack_from(HEADER_FMT, data, 0)
    if version != VERSION:
        raise BatchError("version", "unknown format version %d (this collector reads version %d)"
                         % (version, VERSION))
    if rsize != RECORD_SIZE:
        raise BatchError("record-size", "record size %d, expected %d" % (rsize, RECORD_SIZE))
    if count < 1 or count > MAX_COUNT:
        raise BatchError("count", "record count %d outside 1..%d" % (count, MAX_COUNT))
    body = n - HEADER_SIZE
    if body != count * RECORD_SIZE:
        kind = "truncated" if body < count * RECORD_SIZE else "oversized"
        raise BatchError(kind, "%s: header says %d records (%d bytes) but %d bytes follow"
                         % (kind, count, count * RECORD_SIZE, body))
    if interval_s < 1 or interval_s > MAX_INTERVAL_S:
        raise BatchError("interval", "interval %d s outside 1..%d" % (interval_s, MAX_INTERVAL_S))
    if held > seq:
        raise BatchError("held", "the node says it holds nothing before seq %d, yet sends %d"
                         % (held, seq))
    return count, interval_s, boot, seq, dropped, held


def unpack_record(data, i):
    """(t_s, power_dw, energy_wh, voltage_cv, current_ma) of record i of a batch."""
    return struct.unpack_from(RECORD_FMT, data, HEADER_SIZE + i * RECORD_SIZE)


def units(power_dw, voltage_cv, current_ma, energy_wh):
    """(W, V, A, kWh) of a record's fields, each None where the field holds its missing
    value (FIELDS). Floats: for people and JSON, never on the node's sampling path."""
    raw = (power_dw, voltage_cv, current_ma, energy_wh)
    return tuple(None if raw[i] == f[1] else raw[i] / f[2] for i, f in enumerate(FIELDS))


class AckError(ValueError):
    """A payload on the ack topic that is not an ack as the collector sends it; str() says why."""


def encode_ack(boot, seq, time_s, commit):
    return '{"boot": %d, "seq": %d, "time": %d, "commit": %d}' % (boot, seq, time_s, commit)


def encode_resend(boot, seq, resend, time_s):
    return '{"boot": %d, "seq": %d, "resend": %d, "time": %d}' % (boot, seq, resend, time_s)


def encode_clock(time_s, commit_s, energy_wh=-1, energy_time_s=0):
    """commit_s is held to 1..86400, so a collector that commits more rarely still gets its
    clock taken; the energy fields go only with an energy_wh the node takes (below 2**30)."""
    commit_s = min(max(int(commit_s), 1), _COMMIT_S_MAX)
    s = '{"time": %d, "clock": true, "commit_s": %d' % (time_s, commit_s)
    if 0 <= energy_wh <= _ENERGY_WH_MAX:
        s += ', "energy_wh": %d, "energy_time": %d' % (energy_wh, energy_time_s)
    return s + "}"


def _field(ack, key, high, low=0, optional=False):
    if key not in ack:
        if optional:
            return
        raise AckError("it has no %s" % key)
    v = ack[key]
    if type(v) is not int or v < low or v > high:
        raise AckError("its %s is %r, not a whole number in %d..%d" % (key, v, low, high))


def parse_ack(payload):
    """(kind, ack) of an ack payload (bytes or str): kind ACK, RESEND or CLOCK, ack the JSON
    object with every field of the table checked (optional ones may be absent); AckError
    saying what is wrong otherwise. One json.loads and a few comparisons: the node runs it on
    every ack."""
    if len(payload) > _ACK_MAX_BYTES:
        raise AckError("it is %d bytes long, longer than any ack" % len(payload))
    try:
        ack = json.loads(payload)
    except ValueError:
        raise AckError("it is not JSON") from None
    if type(ack) is not dict:
        raise AckError("it is not a JSON object")
    if "clock" in ack:
        if ack["clock"] is not True:
            raise AckError("its clock is %r, not true" % (ack["clock"],))
        _field(ack, "time", _U32_MAX)
        _field(ack, "commit_s", _COMMIT_S_MAX, 1, True)
        if "energy_wh" in ack or "energy_time" in ack:
            _field(ack, "energy_wh", _ENERGY_WH_MAX)
            _field(ack, "energy_time", _U32_MAX)
        return CLOCK, ack
    _field(ack, "boot", _U32_MAX)
    _field(ack, "seq", _U32_MAX)
    _field(ack, "time", _U32_MAX, 0, True)
    if "resend" in ack:
        _field(ack, "resend", _U32_MAX)
        return RESEND, ack
    _field(ack, "commit", _U32_MAX, 0, True)
    return ACK, ack


def manifest_id(msg):
    """The 8 hex digits after "id" in an ota/manifest message, found without parsing it (there
    may be no heap for that), or "?"; unauthenticated: it only names what is refused."""
    i = msg.find(b'"id"')
    i = msg.find(b'"', msg.find(b":", i) + 1) if i >= 0 else -1
    uid = msg[i + 1:i + 9] if i >= 0 else b""
    if len(uid) != 8 or any(c not in b"0123456789abcdef" for c in uid):
        return "?"
    return uid.decode()


def ota_refused(uid, running, reason):
    """The retained ota/status of a plug that cannot take the update `uid` (its manifest's id,
    manifest_id()'s) at all; running: its version; reason: one sentence, without quotes."""
    return '{"id": "%s", "state": "refused", "running": "%s", "reason": "%s"}' % (
        uid, running, reason)
