"""test_cryptolib_standin.py - the AES-128-CBC stand-in (support32/cryptolib.py) that the
broadlink tests use on the 32-bit WebAssembly port, which has no cryptolib, is AES: the
FIPS-197 and NIST SP 800-38A known answers on every port, whole tables checked so that no
entry can be wrong unseen, and on the unix port the same bytes as the real module for random
keys, IVs and messages. The vectors run on the real module too where there is one, so a
mistyped vector cannot pass."""

import os
import unittest
from binascii import unhexlify

try:
    import cryptolib  # the real module (unix port, ESP32), or the stand-in on the 32-bit port
except ImportError:
    cryptolib = None

HERE = __file__.rsplit("/", 1)[0] if "/" in __file__ else "."
HERE = HERE if HERE.startswith("/") else os.getcwd() + "/" + HERE


def _load_standin():
    """The stand-in's globals, read from its file whatever `import cryptolib` gives here."""
    found = {"__name__": "cryptolib_standin"}
    with open(HERE + "/support32/cryptolib.py") as f:
        exec(f.read(), found)
    return found


STANDIN = _load_standin()
REAL = cryptolib if cryptolib is not None and not hasattr(cryptolib, "__file__") else None

# FIPS-197 Appendix C.1 (AES-128, one block) and Appendix B (the cipher example)
FIPS_C1 = ("000102030405060708090a0b0c0d0e0f", "00112233445566778899aabbccddeeff",
           "69c4e0d86a7b0430d8cdb78070b4c55a")
FIPS_B = ("2b7e151628aed2a6abf7158809cf4f3c", "3243f6a8885a308d313198a2e0370734",
          "3925841d02dc09fbdc118597196a0b32")
# FIPS-197 Appendix A.1: the last round key of the key 2b7e1516...
FIPS_A1_LAST = "d014f9a8c9ee2589e13f0cc8b6630ca6"
# NIST SP 800-38A F.2.1 / F.2.2: CBC-AES128, four blocks
SP_KEY = "2b7e151628aed2a6abf7158809cf4f3c"
SP_IV = "000102030405060708090a0b0c0d0e0f"
SP_PLAIN = ("6bc1bee22e409f96e93d7e117393172a" "ae2d8a571e03ac9c9eb76fac45af8e51"
            "30c81c46a35ce411e5fbc1191a0a52ef" "f69f2445df4f9b17ad2b417be66c3710")
SP_CIPHER = ("7649abac8119b246cee98e9b12e9197d" "5086cb9b507219ee95db113a917678b2"
             "73bed6b8e3c1743b7116e69e22229516" "3ff1caa1681fac09120eca307586e1a7")


def h(text):
    return unhexlify(text)


def implementations():
    """(name, aes class): the stand-in, and the real module where this port has one."""
    found = [("stand-in", STANDIN["aes"])]
    if REAL is not None:
        found.append(("cryptolib", REAL.aes))
    return found


class TestStandinKnownAnswers(unittest.TestCase):
    def test_single_blocks_give_the_fips_197_answers(self):
        for name, aes in implementations():
            for key, plain, cipher in (FIPS_C1, FIPS_B):
                # CBC with a zero IV is the bare cipher on one block
                self.assertEqual(aes(h(key), 2, bytes(16)).encrypt(h(plain)), h(cipher), name)
                self.assertEqual(aes(h(key), 2, bytes(16)).decrypt(h(cipher)), h(plain), name)
        self.assertEqual(bytes(STANDIN["_expand"](h(FIPS_B[0]))[160:]), h(FIPS_A1_LAST))

    def test_cbc_gives_the_sp_800_38a_answers_in_one_call_in_parts_and_in_place(self):
        key, iv, plain, cipher = h(SP_KEY), h(SP_IV), h(SP_PLAIN), h(SP_CIPHER)
        for name, aes in implementations():
            self.assertEqual(aes(key, 2, iv).encrypt(plain), cipher, name)
            self.assertEqual(aes(key, 2, iv).decrypt(cipher), plain, name)
            enc = aes(key, 2, iv)  # the chain goes on from call to call
            dec = aes(key, 2, iv)
            for o in range(0, 64, 16):
                self.assertEqual(enc.encrypt(plain[o:o + 16]), cipher[o:o + 16], (name, o))
                self.assertEqual(dec.decrypt(cipher[o:o + 16]), plain[o:o + 16], (name, o))
            buf = bytearray(plain)  # in place, through memoryviews, as broadlink.py calls it
            mv = memoryview(buf)
            self.assertIs(aes(key, 2, iv).encrypt(mv, mv), mv, name)
            self.assertEqual(bytes(buf), cipher, name)
            aes(key, 2, iv).decrypt(mv[0:64], mv[0:64])
            self.assertEqual(bytes(buf), plain, name)
            out = bytearray(80)  # a longer out_buf: the rest untouched
            aes(key, 2, iv).decrypt(cipher, out)
            self.assertEqual(bytes(out), plain + bytes(16), name)

    def test_what_cryptolib_refuses_the_stand_in_refuses(self):
        for name, aes in implementations():
            for args in ((bytes(15), 2, bytes(16)), (bytes(16), 2), (bytes(16), 2, bytes(15)),
                         (bytes(16), 3, bytes(16))):
                with self.assertRaises(ValueError):
                    aes(*args)
            a = aes(bytes(16), 2, bytes(16))
            with self.assertRaises(ValueError):
                a.encrypt(bytes(15))
            with self.assertRaises(ValueError):
                a.encrypt(bytes(16), bytearray(15))
            a.encrypt(bytes(16))
            with self.assertRaises(ValueError):  # one direction an object
                a.decrypt(bytes(16))

    def test_every_table_entry_is_right(self):
        """The known answers touch most entries, not surely all: the S-box must be a
        permutation with its inverse, and each multiple table what GF(2^8) gives, computed
        here bit by bit."""
        sbox, inverse = STANDIN["_SBOX"], STANDIN["_INV_SBOX"]
        # FIPS-197 §5.1.1 (S(0x53) = 0xED) and Figure 7
        self.assertEqual((sbox[0x00], sbox[0x53], sbox[0xFF]), (0x63, 0xED, 0x16))
        self.assertEqual(len(set(sbox)), 256)  # a permutation
        for a in range(256):
            self.assertEqual(inverse[sbox[a]], a)

        def times(a, k):
            p = 0
            for bit in range(8):
                if k >> bit & 1:
                    p ^= a
                a = (a << 1 ^ (0x1B if a & 0x80 else 0)) & 0xFF
            return p
        for k in (2, 3, 9, 11, 13, 14):
            table = STANDIN["_M%d" % k]
            self.assertEqual(list(table), [times(a, k) for a in range(256)], k)


class TestStandinAgainstTheRealModule(unittest.TestCase):
    def test_random_keys_ivs_and_messages_give_the_real_module_s_bytes(self):
        if REAL is None:
            raise unittest.SkipTest("this port has no real cryptolib to compare with")
        standin = STANDIN["aes"]
        for _ in range(200):
            key, iv = os.urandom(16), os.urandom(16)
            msg = os.urandom(16 * (1 + os.urandom(1)[0] % 5))  # 16 to 80 bytes, as the protocol
            for way in ("encrypt", "decrypt"):
                want = getattr(REAL.aes(key, 2, iv), way)(msg)
                self.assertEqual(getattr(standin(key, 2, iv), way)(msg), want, way)
                a = standin(key, 2, iv)  # in two calls, the second in place
                head = getattr(a, way)(msg[:16])
                rest = bytearray(msg[16:])
                getattr(a, way)(rest, rest)
                self.assertEqual(head + bytes(rest), want, way)
