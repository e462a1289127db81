"""test_wire.py - the wire format gives the documented bytes and refuses malformed batches."""

import struct
import unittest

from wattnode import wire
import vectors

V = vectors.load()


class TestWire(unittest.TestCase):
    def test_sizes_fit_the_design(self):
        """A record is at most 16 bytes (DESIGN.md); the formats are as long as the sizes say."""
        self.assertTrue(wire.RECORD_SIZE <= 16)
        self.assertEqual(struct.calcsize(wire.RECORD_FMT), wire.RECORD_SIZE)
        self.assertEqual(struct.calcsize(wire.HEADER_FMT), wire.HEADER_SIZE)
        self.assertEqual(wire.HEADER_SIZE, 24)

    def test_encoding_gives_the_vector_bytes(self):
        """Packing a vector's fields gives exactly its bytes."""
        for v in V["batches"]:
            h = v["header"]
            buf = bytearray(wire.HEADER_SIZE + h["count"] * wire.RECORD_SIZE)
            wire.pack_header(buf, 0, h["count"], h["interval_s"], h["boot"], h["seq"], h["dropped"],
                             h["held"])
            for i, r in enumerate(v["records"]):
                wire.pack_record(buf, wire.HEADER_SIZE + i * wire.RECORD_SIZE, *r)
            self.assertEqual(bytes(buf), v["bytes"], v["name"])

    def test_decoding_gives_the_vector_fields(self):
        """Decoding a vector's bytes gives its header and records."""
        for v in V["batches"]:
            h = v["header"]
            got = wire.decode_header(v["bytes"])
            self.assertEqual(got, (h["count"], h["interval_s"], h["boot"], h["seq"], h["dropped"],
                                  h["held"]))
            for i, r in enumerate(v["records"]):
                self.assertEqual(list(wire.unpack_record(v["bytes"], i)), r)

    def test_malformed_batches_are_refused_with_a_reason(self):
        """Each malformed vector raises ValueError whose message says what is wrong."""
        for v in V["bad"]:
            try:
                wire.decode_header(v["bytes"])
            except ValueError as e:
                self.assertIn(v["error"], str(e), v["name"])
            else:
                self.fail("accepted: " + v["name"])

    def test_records_in_units_are_the_vector_units(self):
        """wire.units gives each vector record in W, V, A and kWh, None where it is missing
        (within a float's rounding: an ESP32's floats are single precision)."""
        for v in V["batches"]:
            for r, want in zip(v["records"], v["units"]):
                t_s, power_dw, energy_wh, voltage_cv, current_ma = r
                got = wire.units(power_dw, voltage_cv, current_ma, energy_wh)
                self.assertEqual(len(got), 4)
                for g, w in zip(got, want):
                    if w is None:
                        self.assertEqual(g, None, v["name"])
                    else:
                        self.assertTrue(abs(g - w) <= abs(w) * 1e-6, (v["name"], got, want))

    def test_missing_markers_fit_their_fields(self):
        """The missing-value markers are the extremes of their fields, never a real reading."""
        self.assertEqual(wire.POWER_MISSING, -(2 ** 31))
        self.assertEqual(wire.ENERGY_MISSING, 2 ** 32 - 1)
        self.assertEqual(wire.U16_MISSING, 2 ** 16 - 1)


ACKS = vectors.load_acks()
KINDS = {"ack": wire.ACK, "resend": wire.RESEND, "clock": wire.CLOCK}
ENCODERS = {"ack": wire.encode_ack, "resend": wire.encode_resend, "clock": wire.encode_clock}


class TestAcks(unittest.TestCase):
    def test_good_acks_parse_to_their_kind_and_fields(self):
        """Each good vector parses to its kind and fields, as bytes (the node) and as text."""
        for v in ACKS["good"]:
            for payload in (v["bytes"], v["payload"]):
                kind, ack = wire.parse_ack(payload)
                self.assertEqual((kind, ack), (KINDS[v["kind"]], v["fields"]), v["name"])

    def test_the_encoders_give_the_vector_payloads(self):
        """What the collector sends is byte for byte the vector."""
        for v in ACKS["good"]:
            if "encode" in v:
                name, args = v["encode"][0], v["encode"][1:]
                self.assertEqual(ENCODERS[name](*args), v["payload"], v["name"])

    def test_bad_acks_are_refused_with_a_reason(self):
        for v in ACKS["bad"]:
            try:
                wire.parse_ack(v["bytes"])
            except wire.AckError as e:
                self.assertIn(v["error"], str(e), v["name"])
            else:
                self.fail("accepted: " + v["name"])
