"""The narrow element types (float16, bfloat16, 8-bit floats, float4, 4-/2-bit integers): their
formats, their C storage, and their numpy arrays' raw bits.

tinyc keeps such a tensor exactly as numpy / ml_dtypes (the ONNX reference's types) store it, so
an array crosses the C boundary as its bytes: float16 and bfloat16 are a uint16_t bit pattern,
every other narrow type one element per byte (uint8_t; the value in the low bits, int4/int2 as their
two's complement low bits). The C conversions live in runtime_c/include/tinyc_fp.h.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes  # noqa: F401  (registers bfloat16, float8_*, int4 ... as numpy dtype names)
import numpy as np

#: C kind codes of tinyc_fp.h (TINYC_MF_*).
IEEE, FN, FNUZ, NONE = 0, 1, 2, 3


@dataclass(frozen=True)
class MiniFloat:
    """A small float format: exponent bits, mantissa bits, bias and which patterns are special."""

    E: int
    M: int
    bias: int
    kind: int


#: The small float formats tinyc_mf_to_f32 / tinyc_f32_to_mf convert (float16 and bfloat16 have
#: their own helpers in tinyc_fp.h, but share the description).
MINIFLOATS: dict[str, MiniFloat] = {
    "float16": MiniFloat(5, 10, 15, IEEE),
    "bfloat16": MiniFloat(8, 7, 127, IEEE),
    "float8_e4m3fn": MiniFloat(4, 3, 7, FN),
    "float8_e4m3fnuz": MiniFloat(4, 3, 8, FNUZ),
    "float8_e5m2": MiniFloat(5, 2, 15, IEEE),
    "float8_e5m2fnuz": MiniFloat(5, 2, 16, FNUZ),
    "float4_e2m1fn": MiniFloat(2, 1, 1, NONE),
}
#: The 8-bit floats (ONNX Cast's `saturate` applies to these).
FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
#: float8 e8m0 (a power of two: exponent only, no sign; ONNX's MX scale type), converted by
#: tinyc_e8m0_to_f32 / tinyc_f32_to_e8m0.
E8M0 = "float8_e8m0fnu"
#: Cast's round_mode values for e8m0, as the C helper numbers them.
E8M0_ROUND = {"nearest": 0, "up": 1, "down": 2}
#: Narrow integers: (bits, signed).
INTN: dict[str, tuple[int, bool]] = {"int4": (4, True), "uint4": (4, False), "int2": (2, True), "uint2": (2, False)}

#: C storage type of each narrow type (the numpy bits, unchanged).
STORAGE_CTYPES: dict[str, str] = {
    **{name: "uint16_t" if MINIFLOATS[name].E + MINIFLOATS[name].M > 8 else "uint8_t" for name in MINIFLOATS},
    **{name: "uint8_t" for name in INTN},
    E8M0: "uint8_t",
}
STORAGE_BYTES: dict[str, int] = {name: 2 if c == "uint16_t" else 1 for name, c in STORAGE_CTYPES.items()}


def is_narrow(dtype: str) -> bool:
    """Whether `dtype` is stored as bits tinyc's arithmetic kernels do not compute on directly."""
    return dtype in STORAGE_CTYPES


def is_narrow_float(dtype: str) -> bool:
    return dtype in MINIFLOATS or dtype == E8M0


def intn_range(dtype: str) -> tuple[int, int]:
    bits, signed = INTN[dtype]
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def storage_view(a: np.ndarray) -> np.ndarray:
    """The array's raw bits as uint8/uint16 (what C reads); other arrays unchanged."""
    name = str(a.dtype)
    if name not in STORAGE_CTYPES:
        return a
    return np.ascontiguousarray(a).view(np.uint16 if STORAGE_BYTES[name] == 2 else np.uint8)


def from_storage(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Raw bits (as `storage_view` gives them, or bytes loaded without their dtype) as `dtype`."""
    if dtype not in STORAGE_CTYPES:
        return raw.astype(dtype, copy=False)
    bits = np.ascontiguousarray(raw)
    if bits.dtype.kind == "V" or bits.dtype.itemsize != STORAGE_BYTES[dtype]:
        bits = bits.view(np.uint16 if STORAGE_BYTES[dtype] == 2 else np.uint8)
    return bits.view(np.dtype(dtype))
