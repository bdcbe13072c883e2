"""Target dialects: what differs between plain C, SIMD C and OpenCL C lives here and in
`templates/dialects/<name>.j2`, never in a kernel template."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Dialect:
    name: str
    macros: str  # template with kernel()/parallel_for()/... macros
    float_suffix: str = "f"


C99 = Dialect("c", "dialects/c.j2")
OPENCL = Dialect("opencl", "dialects/opencl.j2")
DIALECTS = {"c": C99, "opencl": OPENCL}


def c_float(value: float) -> str:
    """Exact float32 literal (9 significant digits round-trip); inf/nan via <math.h> macros."""
    v = float(np.float32(value))
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    text = f"{v:.9g}"
    if "e" not in text and "." not in text and "n" not in text:
        text += ".0"
    return f"{text}f"


def c_int(value: int, ctype: str = "int32_t") -> str:
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
    if ctype in ("float", "double"):
        return c_float(float(value))  # type: ignore[arg-type]
    return c_int(int(value), ctype)  # type: ignore[call-overload]
