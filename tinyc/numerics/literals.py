"""The exact C spelling of a number, for kernel constants and weight tables.

Generated code must be bit-exact with the golden models, so a float32 constant is printed with
enough digits to round-trip (and NaN/Inf through <math.h> macros), and an integer with the suffix
or macro its C type needs (INT32_MIN cannot be written as a negative literal).
"""

from __future__ import annotations

import math

import numpy as np


def _c_real(v: float, digits: int, suffix: str) -> str:
    """`v` with enough significant digits to round-trip; inf/nan via <math.h> macros."""
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    text = f"{v:.{digits}g}"
    if "e" not in text and "." not in text and "n" not in text:
        text += ".0"
    return text + suffix


def c_float(value: float | np.floating) -> str:
    """Exact float32 literal (9 significant digits round-trip); inf/nan via <math.h> macros."""
    return _c_real(float(np.float32(value)), 9, "f")


def c_double(value: float | np.floating) -> str:
    """Exact float64 literal (17 significant digits round-trip), no suffix; inf/nan via <math.h>."""
    return _c_real(float(value), 17, "")


def c_int(value: int, ctype: str = "int32_t") -> str:
    """An integer literal of C type `ctype`: 64-bit values through INT64_C/UINT64_C (a plain literal
    may be too wide for `long`), the most negative int32 as INT32_MIN (``-2147483648`` is a negation
    of a literal that does not fit int), unsigned with a `u` suffix."""
    v = int(value)
    if ctype in ("int64_t",):
        return f"INT64_C({v})" if v != -(2**63) else "INT64_MIN"
    if ctype in ("uint64_t",):
        return f"UINT64_C({v})"
    if ctype == "int32_t" and v == -(2**31):
        return "INT32_MIN"
    if ctype in ("uint32_t",):
        return f"{v}u"
    return str(v)


def c_literal(value: object, ctype: str) -> str:
    """`value` as a literal of the C type `ctype` (float/double or an integer type)."""
    if ctype == "double":
        return c_double(float(value))  # type: ignore[arg-type]
    if ctype == "float":
        return c_float(float(value))  # type: ignore[arg-type]
    return c_int(int(value), ctype)  # type: ignore[call-overload]
