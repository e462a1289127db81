"""test_wire.py - CPython reads and writes the same bytes as MicroPython (shared vectors)."""

import json
import pathlib

import numpy as np
import pytest

from wattnode import wire

VECTORS = json.loads((pathlib.Path(__file__).parents[1] / "vectors" / "wire.json").read_text())


def raw(v):
    return bytes.fromhex(v["hex"].replace(" ", ""))


@pytest.mark.parametrize("v", VECTORS["batches"], ids=lambda v: v["name"])
def test_vectors_round_trip(v):
    """Encoding the fields gives the vector bytes; decoding the bytes gives the fields."""
    h = v["header"]
    assert wire.decode_header(raw(v)) == (h["count"], h["interval_s"], h["boot"], h["seq"],
                                          h["dropped"], h["held"])
    assert [list(wire.unpack_record(raw(v), i)) for i in range(h["count"])] == v["records"]
    buf = bytearray(len(raw(v)))
    wire.pack_header(buf, 0, h["count"], h["interval_s"], h["boot"], h["seq"], h["dropped"],
                     h["held"])
    for i, r in enumerate(v["records"]):
        wire.pack_record(buf, wire.HEADER_SIZE + i * wire.RECORD_SIZE, *r)
    assert bytes(buf) == raw(v)


@pytest.mark.parametrize("v", VECTORS["batches"], ids=lambda v: v["name"])
def test_units_and_the_collector_s_columns_are_the_vector_units(v):
    """wire.units gives each record in W, V, A and kWh (None: missing), and the collector's
    numpy decoding of the same batch (ingest.py, its columns from wire.FIELDS) stores the
    same values (NaN: missing)."""
    from wattlog.store.ingest import Ingest
    h = v["header"]
    for (t_s, power_dw, energy_wh, voltage_cv, current_ma), want in zip(v["records"], v["units"]):
        assert wire.units(power_dw, voltage_cv, current_ma, energy_wh) == tuple(want)
    last = (v["records"][-1][0] + wire.EPOCH_UNIX)
    ingest = Ingest(lambda *a: None, lambda node: None, max_age_s=2 ** 32, clock=lambda: last)
    assert ingest.handle("wattlog/vec/readings", raw(v)) == h["count"]
    (_, values), = ingest.pending["vec"]
    want = [[float("nan") if u is None else u for u in row] for row in v["units"]]
    np.testing.assert_array_equal(values, np.array(want))  # NaN where NaN, else exactly


@pytest.mark.parametrize("v", VECTORS["bad"], ids=lambda v: v["name"])
def test_malformed_vectors_are_refused(v):
    with pytest.raises(ValueError, match=v["error"]):
        wire.decode_header(raw(v))


ACKS = json.loads((pathlib.Path(__file__).parents[1] / "vectors" / "acks.json").read_text())
KINDS = {"ack": wire.ACK, "resend": wire.RESEND, "clock": wire.CLOCK}
ENCODERS = {"ack": wire.encode_ack, "resend": wire.encode_resend, "clock": wire.encode_clock}


def ack_bytes(v):
    return bytes.fromhex(v["hex"]) if "hex" in v else v["payload"].encode()


@pytest.mark.parametrize("v", ACKS["good"], ids=lambda v: v["name"])
def test_ack_vectors_parse_and_encode(v):
    """A good ack parses to its kind and fields (bytes, as from the broker, and text); the
    collector's encoder gives exactly its payload."""
    for payload in (ack_bytes(v), v["payload"]):
        assert wire.parse_ack(payload) == (KINDS[v["kind"]], v["fields"])
    if "encode" in v:
        assert ENCODERS[v["encode"][0]](*v["encode"][1:]) == v["payload"]


@pytest.mark.parametrize("v", ACKS["bad"], ids=lambda v: v["name"])
def test_malformed_acks_are_refused(v):
    with pytest.raises(wire.AckError) as e:
        wire.parse_ack(ack_bytes(v))
    assert v["error"] in str(e.value)
