"""vectors.py - the shared wire test vectors (tests/vectors/wire.json) as bytes and fields."""

import json
from binascii import unhexlify

_HERE = __file__.rsplit("/", 1)[0] if "/" in __file__ else "."
_PATH = _HERE + "/../vectors/wire.json"


def load():
    with open(_PATH) as f:
        doc = json.load(f)
    for group in ("batches", "bad"):
        for v in doc[group]:
            v["bytes"] = unhexlify(v["hex"].replace(" ", ""))
    return doc
