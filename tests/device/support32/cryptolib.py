"""cryptolib.py - a stand-in for MicroPython's built-in cryptolib (AES-128-CBC only), for the
device tests on the 32-bit WebAssembly port, which is built without it.

Why it exists: the ESP32 firmware has cryptolib, and wattnode/broadlink.py uses it for the
SP3S protocol; the 32-bit port the device tests run on (tools/lib/mp32.mjs) has none, so
without this the broadlink tests could not run on the port whose ints and pointers are a
plug's size. The plug never uses it: it lives under tests/, tests/device/run.py puts
tests/device/support32 on sys.path only on the WebAssembly port and only when `import
cryptolib` fails there, and tools/build ships lib/wattnode alone (tests/host/test_build.py
checks that no cryptolib goes into build/device). tests/device/test_cryptolib_standin.py proves
it: the FIPS-197 and NIST SP 800-38A AES-128 known answers on every port, and the same bytes
as the real module for random keys, IVs and messages on the unix port. Written for wattlog
from FIPS-197's definitions; the tables are computed at import, not typed in.

The interface, as docs.micropython.org's cryptolib and the unix port's module behave:
    aes(key, mode, IV)      key 16 bytes (AES-128; other sizes: ValueError("key")), mode 2
                            (CBC; anything else: ValueError("mode")), IV 16 bytes
                            (ValueError("IV")); bytes-like, copied
    encrypt(in_buf[, out_buf]) / decrypt(in_buf[, out_buf])
                            in_buf a multiple of 16 bytes (ValueError("blksize % 16")); the
                            result is new bytes, or written into out_buf (at least as long,
                            else ValueError("output too small"); it may be in_buf itself) and
                            out_buf returned. The chain goes on from one call to the next; an
                            object does one direction (ValueError("can't encrypt & decrypt")).

Design: byte-wide arithmetic only. On a 32-bit port an int of 2**30 or more is a heap object,
so the usual 32-bit-word ("T-table") AES would allocate on every round; here every value is a
byte and every table a 256-byte bytes object: the S-box and its inverse, and the GF(2^8)
multiples by 2, 3 (MixColumns) and 9, 11, 13, 14 (InvMixColumns). The state is column-major
(byte 4*c + r is row r of column c, FIPS-197 §3.4) in a bytearray the object keeps; a block
allocates nothing. About 250 us a block on the WebAssembly port (85 on the unix port), 100 us
an object (the key schedule): a broadlink request costs under 1 ms.
"""


def _xtime(a):
    """a times x in GF(2^8) modulo x^8 + x^4 + x^3 + x + 1 (FIPS-197 §4.2.1)."""
    a <<= 1
    return a ^ 0x11B if a & 0x100 else a


def _times(a, b):
    p = 0
    while b:
        if b & 1:
            p ^= a
        a = _xtime(a)
        b >>= 1
    return p


def _sboxes():
    """The S-box (FIPS-197 §5.1.1: the multiplicative inverse, then the affine map) and its
    inverse. Inverses from powers of the generator 3: log[3**i] = i."""
    power = bytearray(256)
    log = bytearray(256)
    x = 1
    for i in range(255):
        power[i] = x
        log[x] = i
        x ^= _xtime(x)  # x * 3
    sbox = bytearray(256)
    inverse_sbox = bytearray(256)
    for a in range(256):
        b = power[(255 - log[a]) % 255] if a else 0
        s = b
        for _ in range(4):  # s = b ^ rotl(b, 1) ^ rotl(b, 2) ^ rotl(b, 3) ^ rotl(b, 4) ^ 0x63
            b = (b << 1 | b >> 7) & 0xFF
            s ^= b
        s ^= 0x63
        sbox[a] = s
        inverse_sbox[s] = a
    return bytes(sbox), bytes(inverse_sbox)


_SBOX, _INV_SBOX = _sboxes()
_M2, _M3, _M9, _M11, _M13, _M14 = (bytes(_times(a, k) for a in range(256))
                                   for k in (2, 3, 9, 11, 13, 14))
# ShiftRows: byte 4*c + r comes from column (c + r) % 4; InvShiftRows from (c - r) % 4
_SHIFT = bytes(4 * ((i // 4 + i % 4) % 4) + i % 4 for i in range(16))
_INV_SHIFT = bytes(4 * ((i // 4 - i % 4) % 4) + i % 4 for i in range(16))
_ROUNDS = 10
_CBC = 2


def _expand(key):
    """The 11 round keys of AES-128 (FIPS-197 §5.2), 176 bytes."""
    rk = bytearray(16 * (_ROUNDS + 1))
    rk[0:16] = key
    rcon = 1
    for i in range(16, len(rk), 4):
        t0, t1, t2 = rk[i - 4], rk[i - 3], rk[i - 2]
        t3 = rk[i - 1]
        if i % 16 == 0:  # RotWord, SubWord, Rcon
            t0, t1, t2 = _SBOX[t1] ^ rcon, _SBOX[t2], _SBOX[t3]
            t3 = _SBOX[rk[i - 4]]
            rcon = _xtime(rcon)
        rk[i] = rk[i - 16] ^ t0
        rk[i + 1] = rk[i - 15] ^ t1
        rk[i + 2] = rk[i - 14] ^ t2
        rk[i + 3] = rk[i - 13] ^ t3
    return rk


def _encrypt_block(s, rk, t):
    """Encrypts the 16 bytes of s in place (t: 16 bytes of scratch)."""
    sbox, shift, m2, m3 = _SBOX, _SHIFT, _M2, _M3
    for i in range(16):
        s[i] ^= rk[i]
    k = 16
    for _ in range(_ROUNDS - 1):
        for i in range(16):  # SubBytes and ShiftRows
            t[i] = sbox[s[shift[i]]]
        for c in range(0, 16, 4):  # MixColumns and AddRoundKey
            a0 = t[c]
            a1 = t[c + 1]
            a2 = t[c + 2]
            a3 = t[c + 3]
            s[c] = m2[a0] ^ m3[a1] ^ a2 ^ a3 ^ rk[k + c]
            s[c + 1] = a0 ^ m2[a1] ^ m3[a2] ^ a3 ^ rk[k + c + 1]
            s[c + 2] = a0 ^ a1 ^ m2[a2] ^ m3[a3] ^ rk[k + c + 2]
            s[c + 3] = m3[a0] ^ a1 ^ a2 ^ m2[a3] ^ rk[k + c + 3]
        k += 16
    for i in range(16):
        t[i] = sbox[s[shift[i]]]
    for i in range(16):
        s[i] = t[i] ^ rk[k + i]


def _decrypt_block(s, rk, t):
    """Decrypts the 16 bytes of s in place (t: 16 bytes of scratch)."""
    inv, shift, m9, m11, m13, m14 = _INV_SBOX, _INV_SHIFT, _M9, _M11, _M13, _M14
    k = 16 * _ROUNDS
    for i in range(16):
        s[i] ^= rk[k + i]
    for _ in range(_ROUNDS - 1):
        k -= 16
        for i in range(16):  # InvShiftRows, InvSubBytes and AddRoundKey
            t[i] = inv[s[shift[i]]] ^ rk[k + i]
        for c in range(0, 16, 4):  # InvMixColumns
            a0 = t[c]
            a1 = t[c + 1]
            a2 = t[c + 2]
            a3 = t[c + 3]
            s[c] = m14[a0] ^ m11[a1] ^ m13[a2] ^ m9[a3]
            s[c + 1] = m9[a0] ^ m14[a1] ^ m11[a2] ^ m13[a3]
            s[c + 2] = m13[a0] ^ m9[a1] ^ m14[a2] ^ m11[a3]
            s[c + 3] = m11[a0] ^ m13[a1] ^ m9[a2] ^ m14[a3]
    for i in range(16):
        t[i] = inv[s[shift[i]]] ^ rk[i]
    for i in range(16):
        s[i] = t[i]


class aes:
    def __init__(self, key, mode, IV=None):
        if mode != _CBC:
            raise ValueError("mode")
        if len(key) != 16:
            raise ValueError("key")
        if IV is None or len(IV) != 16:
            raise ValueError("IV")
        self._rk = _expand(key)
        self._chain = bytearray(IV)  # the IV, then the last ciphertext block
        self._s = bytearray(16)
        self._t = bytearray(16)
        self._direction = 0  # 1 encrypt, 2 decrypt, 0 neither yet

    def encrypt(self, in_buf, out_buf=None):
        return self._cbc(in_buf, out_buf, 1)

    def decrypt(self, in_buf, out_buf=None):
        return self._cbc(in_buf, out_buf, 2)

    def _cbc(self, src, out, direction):
        n = len(src)
        if n % 16:
            raise ValueError("blksize % 16")
        if self._direction and self._direction != direction:
            raise ValueError("can't encrypt & decrypt")
        self._direction = direction
        if out is None:
            result = bytearray(n)
            self._cbc(src, result, direction)
            return bytes(result)
        if len(out) < n:
            raise ValueError("output too small")
        chain, s, t, rk = self._chain, self._s, self._t, self._rk
        for o in range(0, n, 16):
            if direction == 1:
                for i in range(16):
                    s[i] = src[o + i] ^ chain[i]
                _encrypt_block(s, rk, t)
                for i in range(16):
                    chain[i] = out[o + i] = s[i]
            else:
                for i in range(16):
                    s[i] = src[o + i]
                _decrypt_block(s, rk, t)
                for i in range(16):
                    c = src[o + i]  # read before out[o + i] is written: out may be src
                    out[o + i] = s[i] ^ chain[i]
                    chain[i] = c
        return out
