"""vectors.py - the shared wire test vectors (tests/vectors/wire.json) as bytes and fields, and
the ack vectors (tests/vectors/acks.json) with every payload as bytes."""

import json
from binascii import unhexlify

_HERE = __file__.rsplit("/", 1)[0] if "/" in __file__ else "."
_PATH = _HERE + "/../vectors/wire.json"
_ACKS = _HERE + "/../vectors/acks.json"


def load():
    with open(_PATH) as f:
        doc = json.load(f)
    for group in ("batches", "bad"):
        for v in doc[group]:
            v["bytes"] = unhexlify(v["hex"].replace(" ", ""))
    return doc


def load_acks():
    with open(_ACKS) as f:
        doc = json.load(f)
    for group in ("good", "bad"):
        for v in doc[group]:
            v["bytes"] = unhexlify(v["hex"]) if "hex" in v else v["payload"].encode()
    return doc
