"""phpnum.py - PHP's ways with numbers, as emoncms's answers show them (emoncms.py, emonfeed.py):
json_encode's floats (10 not 10.0, 1.0e-5), round() (half away from zero after rounding to 15
digits), is_numeric(), (int) of a string, and what PHP takes as true. The bytes of an answer
depend on them.
"""

import decimal
import json
import math
import re


_NUMERIC = re.compile(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*\Z")
_LEADING = re.compile(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def php_float_text(x):
    """A float as PHP's json_encode writes it (serialize_precision -1): the shortest digits
    that read back, no ".0" on whole numbers, exponent form below 1e-4 and from 1e17."""
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    sign = "-" if x < 0 else ""
    t = decimal.Decimal(repr(abs(x))).as_tuple()
    digits = "".join(map(str, t.digits))
    decpt = len(digits) + t.exponent           # value = 0.<digits> * 10**decpt
    digits = digits.rstrip("0") or "0"
    if decpt < -3 or decpt > 17:
        exp = decpt - 1
        return "%s%s.%se%s%d" % (sign, digits[0], digits[1:] or "0", "-" if exp < 0 else "+",
                                 abs(exp))
    if decpt <= 0:
        return "%s0.%s%s" % (sign, "0" * -decpt, digits)
    if len(digits) <= decpt:
        return sign + digits + "0" * (decpt - len(digits))
    return "%s%s.%s" % (sign, digits[:decpt], digits[decpt:])


def php_json(obj):
    """json_encode($obj) with PHP's default flags (floats as above, "/" escaped)."""
    if obj is None:
        return "null"
    if obj is True:
        return "true"
    if obj is False:
        return "false"
    if isinstance(obj, int):
        return str(obj)
    if isinstance(obj, float):
        return php_float_text(obj) if math.isfinite(obj) else "null"
    if isinstance(obj, str):
        return json.dumps(obj).replace("/", "\\/")
    if isinstance(obj, dict):
        return "{%s}" % ",".join("%s:%s" % (php_json(str(k)), php_json(v)) for k, v in obj.items())
    return "[%s]" % ",".join(php_json(v) for v in obj)


def php_round(x):
    """PHP's round(): half away from zero."""
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def php_round_dp(x, places):
    """PHP 8.2's round($x, $places): pre-rounded to 15 significant digits, then half away
    from zero at `places`."""
    if x == 0 or not math.isfinite(x):
        return x
    magnitude = math.floor(math.log10(abs(x)))
    precise = 14 - magnitude
    d = decimal.Decimal(repr(x))
    if not (precise > places and precise - 15 < places):
        if abs(x * 10.0 ** places) >= 1e15:
            return x
    else:
        d = d.quantize(decimal.Decimal(1).scaleb(-precise), rounding=decimal.ROUND_HALF_UP)
    return float(d.quantize(decimal.Decimal(1).scaleb(-places), rounding=decimal.ROUND_HALF_UP))


def is_numeric(text):
    return isinstance(text, str) and bool(_NUMERIC.match(text))


def php_int(text):
    """(int)$text: the leading number, cut toward zero; 0 if there is none."""
    m = _LEADING.match(text or "")
    if not m:
        return 0
    value = float(m.group(0))
    return int(value) if math.isfinite(value) and abs(value) < 2 ** 63 else 0


def php_truthy(text):
    return text not in (None, "", "0")
