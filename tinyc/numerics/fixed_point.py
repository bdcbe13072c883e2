"""The int8 integer arithmetic of tinyc: the numpy golden model.

This module is the executable form of ``docs/quantization.md``. Every target (the C in
``runtime_c/include/tinyc_q.h`` first) must equal it bit for bit, so each function here mirrors
one C function step by step, and the steps are the gemmlowp/TFLite/CMSIS-NN ones so that results
can be compared with those libraries.

Two kinds of function live here:

* **compile-time** helpers that turn float scales into integer parameters (``quantize_multiplier``,
  ``choose_qparams``, ``quantize_weights_per_channel``, ``quantize_bias``, ``build_lut``,
  ``add_params``). They may use floating point: they run on the host, once, and their output is
  what the C code receives as constants.
* **run-time** integer functions (``srdhm``, ``rounding_divide_by_pot``,
  ``multiply_by_quantized_multiplier``, ``requantize``, ``add_int8``, ``lut_lookup``). These use
  integers only (int64 internally so that int32 overflow can't silently wrap in numpy) and are the
  "one integer truth".

Conventions: ``shift`` is positive for a left shift (multiplier >= 1) and negative for a right
shift, as in TFLite. All run-time functions broadcast like numpy, so per-channel parameters are
arrays shaped to broadcast against the accumulator (e.g. ``multiplier[:, None, None]`` for NCHW).
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT8_MIN = -128
INT8_MAX = 127
#: Symmetric weights use [-127, 127] (not -128) so that negation is exact and |w| fits 7 bits,
#: which is what TFLite's int8 spec and CMSIS-NN assume.
WEIGHT_QMIN = -127
WEIGHT_QMAX = 127
#: TFLite's int8 Add pre-shifts both (zero-point-corrected) inputs left by 20 bits before rescaling:
#: 9-bit values << 20 stay below 2^29, leaving headroom for the sum, yet keep 20 fractional bits.
ADD_LEFT_SHIFT = 20

ArrayLike = npt.ArrayLike


def _i64(x: ArrayLike, name: str, lo: int = INT32_MIN, hi: int = INT32_MAX) -> np.ndarray:
    """Integer array as int64, checked to lie in [lo, hi] (default: int32) — the C types' domain."""
    a = np.asarray(x)
    if a.dtype.kind not in "iub":
        raise TypeError(f"{name} must be an integer array, got dtype {a.dtype}")
    a = a.astype(np.int64)
    if a.size and (a.min() < lo or a.max() > hi):
        raise ValueError(f"{name} outside [{lo}, {hi}]")
    return a


def _out(a: np.ndarray, dtype: type) -> np.ndarray | int:
    a = a.astype(dtype)
    return a if a.ndim else a.item()


# ----------------------------------------------------------------------------------------------
# compile time: real multiplier -> (int32 multiplier, shift)
# ----------------------------------------------------------------------------------------------


def quantize_multiplier(real: ArrayLike) -> tuple[np.ndarray | int, np.ndarray | int]:
    """Decompose a real multiplier M >= 0 as ``M ~= multiplier * 2**(shift - 31)``.

    ``multiplier`` is an int32 in [2^30, 2^31) (or 0) and ``shift`` an int in [-31, 31], positive
    meaning a left shift. This is TFLite's ``QuantizeMultiplier``: frexp gives M = q * 2^e with q in
    [0.5, 1); q * 2^31 is rounded half away from zero (``std::round``); a mantissa that rounds up to
    2^31 is halved and the exponent bumped. M == 0 gives (0, 0). A multiplier below 2^-32
    (e < -31) would need a right shift > 31, so — as TFLite does — it is flushed to (0, 0): every
    result is then 0 (the output zero point). The relative error is at most 2^-31 / 0.5 < 4.7e-10.

    Scalars give Python ints; arrays give int32 arrays (per-channel multipliers).
    Raises ValueError for negative, NaN or infinite M, and for M >= 2^31 (shift > 31).
    """
    m = np.asarray(real, dtype=np.float64)
    if not np.all(np.isfinite(m)) or np.any(m < 0):
        raise ValueError("real multiplier must be finite and >= 0")
    q, e = np.frexp(m)  # m = q * 2**e, q in [0.5, 1) (q = e = 0 for m = 0)
    e = e.astype(np.int64)
    # q * 2^31 is exact in float64 (a power-of-two scaling) and q >= 0, so floor(x + 0.5) is
    # round-half-away-from-zero with no intermediate rounding.
    q_fixed = np.floor(q * float(1 << 31) + 0.5).astype(np.int64)
    carry = q_fixed == (1 << 31)
    q_fixed = np.where(carry, q_fixed >> 1, q_fixed)
    e = e + carry
    tiny = e < -31
    q_fixed = np.where(tiny, 0, q_fixed)
    e = np.where(tiny, 0, e)
    if np.any(e > 31):
        raise ValueError("real multiplier >= 2^31 is not supported (shift would exceed 31)")
    return _out(q_fixed, np.int32), _out(e, np.int32)


def dequantize_multiplier(multiplier: ArrayLike, shift: ArrayLike) -> np.ndarray | float:
    """The real value ``multiplier * 2**(shift - 31)`` a (multiplier, shift) pair stands for."""
    r = np.ldexp(np.asarray(multiplier, dtype=np.float64), np.asarray(shift, dtype=np.int64) - 31)
    return r if np.ndim(r) else float(r)


# ----------------------------------------------------------------------------------------------
# run time: the gemmlowp primitives
# ----------------------------------------------------------------------------------------------


def srdhm(a: ArrayLike, b: ArrayLike) -> np.ndarray | int:
    """gemmlowp ``SaturatingRoundingDoublingHighMul``: the high 32 bits of 2*a*b, rounded.

    Step for step as gemmlowp: ab = a*b in int64; nudge = 2^30 if ab >= 0 else 1 - 2^30;
    result = (ab + nudge) / 2^31 with C's truncating division; the single overflowing input
    a == b == INT32_MIN gives INT32_MAX. Net effect: floor(a*b / 2^31 + 1/2), i.e. round half
    *up* (towards +inf) — note: not half away from zero.
    """
    a64 = _i64(a, "a")
    b64 = _i64(b, "b")
    ab = a64 * b64  # |ab| <= 2^62: exact in int64
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    t = ab + nudge
    q = np.where(t >= 0, t >> 31, -((-t) >> 31))  # truncating division by 2^31, as C does
    overflow = (a64 == b64) & (a64 == INT32_MIN)
    return _out(np.where(overflow, INT32_MAX, q), np.int32)


def rounding_divide_by_pot(x: ArrayLike, exponent: ArrayLike) -> np.ndarray | int:
    """gemmlowp ``RoundingDivideByPOT``: x / 2^exponent rounded half away from zero, 0 <= exponent <= 31.

    Step for step: mask = 2^exponent - 1; remainder = x & mask (two's complement bits);
    threshold = (mask >> 1) + (x < 0); result = (x >> exponent) + (remainder > threshold), with
    ``>>`` an arithmetic (flooring) shift.
    """
    x64 = _i64(x, "x")
    e = _i64(exponent, "exponent", 0, 31)
    mask = (np.int64(1) << e) - 1
    remainder = x64 & mask
    threshold = (mask >> 1) + (x64 < 0)
    return _out((x64 >> e) + (remainder > threshold), np.int32)


def saturating_left_shift(x: ArrayLike, shift: ArrayLike) -> np.ndarray | int:
    """x * 2^shift (0 <= shift <= 31) saturated to int32.

    TFLite writes ``x * (1 << left_shift)`` and leaves overflow undefined; tinyc saturates, which
    agrees with TFLite wherever TFLite is defined and, after the final clamp, gives the correct
    (float-reference) answer where it is not.
    """
    x64 = _i64(x, "x")
    s = _i64(shift, "shift", 0, 31)
    return _out(np.clip(x64 * (np.int64(1) << s), INT32_MIN, INT32_MAX), np.int32)


#: Requantization rounding modes (node attr ``rounding``; the C code gets the index):
#: "tflite" — TFLite/CMSIS-NN double rounding (srdhm, then a rounding shift), used for models tinyc
#: quantizes itself; "half_even" — one rounding of the exact product, half to even, which is what an
#: ONNX QDQ model means (DequantizeLinear -> float op -> QuantizeLinear rounds half to even), used for
#: QDQ/QOperator models imported as given.
ROUNDINGS: tuple[str, ...] = ("tflite", "half_even")


def rounding_code(mode: str) -> int:
    """The C constant for a rounding mode (TINYC_Q_ROUND_TFLITE = 0, TINYC_Q_ROUND_HALF_EVEN = 1)."""
    if mode not in ROUNDINGS:
        raise ValueError(f"unknown requantization rounding {mode!r} (known: {', '.join(ROUNDINGS)})")
    return ROUNDINGS.index(mode)


def rounding_of(attrs: dict) -> str:
    """A node's requantization rounding mode (attr ``rounding``; nodes without one use TFLite's)."""
    return str(attrs.get("rounding", "tflite"))


def rounding_context(attrs: dict) -> dict[str, object]:
    """Template variables for a node's requantization rounding (``rounding_of``): ``rounding``
    (the C constant) and ``rq_r`` (the branch-free helper the tiled kernels call)."""
    mode = rounding_of(attrs)
    return {"rounding": rounding_code(mode), "rq_r": "tinyc_q_mbqm_even_r" if mode == "half_even" else "tinyc_q_mbqm_r"}


def shift_round_half_even(x: ArrayLike, exponent: ArrayLike) -> np.ndarray:
    """x / 2^exponent rounded half to even, x int64 with |x| < 2^62, 0 <= exponent <= 62; int64.

    q = floor(x / 2^e); r = x - q * 2^e (the low e bits of x); q + (r > 2^(e-1) or (r == 2^(e-1) and q odd)).
    """
    x64 = np.asarray(x, dtype=np.int64)
    e = np.asarray(exponent, dtype=np.int64)
    q = x64 >> e
    r = x64 & ((np.int64(1) << e) - 1)
    half = np.int64(1) << np.maximum(e - 1, 0)  # e == 0: r == 0 < half, no rounding
    return q + ((r > half) | ((r == half) & ((q & 1) == 1)))


def multiply_by_quantized_multiplier(
    acc: ArrayLike, multiplier: ArrayLike, shift: ArrayLike, rounding: str = "tflite"
) -> np.ndarray | int:
    """acc * M in int32 with M = (multiplier, shift): TFLite's ``MultiplyByQuantizedMultiplier``.

    left = max(shift, 0), right = max(-shift, 0); x = saturating_left_shift(acc, left);
    "tflite": rounding_divide_by_pot(srdhm(x, multiplier), right). Two roundings (srdhm, then the
    shift) — the "double rounding" TFLite and CMSIS-NN use by default.
    "half_even": x * multiplier / 2^(31 + right) rounded once, half to even (int64 product,
    saturated to int32): the exact round(acc * M) an ONNX QDQ model specifies.
    """
    s = _i64(shift, "shift", -31, 31)
    left = np.maximum(s, 0)
    right = np.maximum(-s, 0)
    x = np.asarray(saturating_left_shift(acc, left))
    if rounding == "half_even":
        prod = x.astype(np.int64) * _i64(multiplier, "multiplier", 0, INT32_MAX)
        return _out(np.clip(shift_round_half_even(prod, 31 + right), INT32_MIN, INT32_MAX), np.int32)
    rounding_code(rounding)
    return rounding_divide_by_pot(np.asarray(srdhm(x, multiplier)), right)


def requantize(
    acc: ArrayLike,
    multiplier: ArrayLike,
    shift: ArrayLike,
    out_zp: ArrayLike,
    act_min: int = INT8_MIN,
    act_max: int = INT8_MAX,
    rounding: str = "tflite",
) -> np.ndarray | int:
    """int32 accumulator -> int8 output: clamp(mbqm(acc, multiplier, shift) + out_zp, act_min, act_max).

    The addition of the zero point is exact (no int32 wrap: the C clamps to
    [act_min - zp, act_max - zp] first, which is the same thing). A fused activation is folded
    into [act_min, act_max] (see ``activation_range``).
    """
    zp = _i64(out_zp, "out_zp", INT8_MIN, INT8_MAX)
    if not (INT8_MIN <= act_min <= act_max <= INT8_MAX):
        raise ValueError("need -128 <= act_min <= act_max <= 127")
    x = np.asarray(multiply_by_quantized_multiplier(acc, multiplier, shift, rounding)).astype(np.int64)
    return _out(np.clip(x + zp, act_min, act_max), np.int8)


# ----------------------------------------------------------------------------------------------
# compile time: scales, zero points, tensors
# ----------------------------------------------------------------------------------------------


def quantize(
    x: ArrayLike,
    scale: ArrayLike,
    zp: ArrayLike,
    qmin: int = INT8_MIN,
    qmax: int = INT8_MAX,
    rounding: str = "half_even",
) -> np.ndarray:
    """ONNX ``QuantizeLinear``: saturate(round(x / scale) + zp) to [qmin, qmax] (int8 by default).

    The ONNX spec rounds half to even (onnxruntime uses ``nearbyint``), so that is the default.
    The division is done in x's float type (float32 for float32 inputs, like onnxruntime).
    ``rounding="half_away"`` gives TFLite's ``std::round`` convention (used by ``build_lut``).
    Returns int8 when [qmin, qmax] fits int8, else int32.
    """
    xf = np.asarray(x)
    if xf.dtype.kind != "f":
        xf = xf.astype(np.float64)
    v = xf / np.asarray(scale, dtype=xf.dtype)
    v = _round(v, rounding)
    out = np.clip(v + np.asarray(zp, dtype=np.float64), qmin, qmax)
    return out.astype(np.int8 if (qmin >= INT8_MIN and qmax <= INT8_MAX) else np.int32)


def round_half_away(v: ArrayLike) -> np.ndarray:
    """C's ``round`` / TFLite's ``TfLiteRound``: half away from zero, in the input's float type."""
    a = np.asarray(v)
    return np.sign(a) * np.floor(np.abs(a) + 0.5)


def _round(v: np.ndarray, rounding: str) -> np.ndarray:
    if rounding == "half_even":
        return np.rint(v)
    if rounding == "half_away":
        return round_half_away(v)
    raise ValueError(f"rounding must be 'half_even' or 'half_away', got {rounding!r}")


def dequantize(q: ArrayLike, scale: ArrayLike, zp: ArrayLike, dtype: npt.DTypeLike = np.float32) -> np.ndarray:
    """ONNX ``DequantizeLinear``: (q - zp) * scale, in ``dtype`` (float32 like onnxruntime)."""
    d = np.asarray(q).astype(np.int64) - np.asarray(zp).astype(np.int64)
    return d.astype(dtype) * np.asarray(scale, dtype=dtype)


def choose_qparams(
    rmin: ArrayLike, rmax: ArrayLike, symmetric: bool = False, qmin: int = INT8_MIN, qmax: int = INT8_MAX
) -> tuple[np.ndarray, np.ndarray]:
    """(scale, zero_point) for a real range, as onnxruntime's quantizer (``compute_scale_zp``) does.

    The range is first widened to include 0, so that 0.0 (padding, ReLU's floor) is exactly
    representable. Symmetric: the range becomes [-a, a] with a = max(|rmin|, |rmax|), and with
    [qmin, qmax] = [-127, 127] the zero point is 0. scale = (rmax - rmin) / (qmax - qmin);
    zero_point = round_half_even(qmin - rmin / scale), which lies in [qmin, qmax] because
    rmin <= 0 <= rmax (clipped anyway against float rounding). TFLite instead picks the zero point
    from whichever of qmin/qmax gives the smaller float error; in exact arithmetic both agree.
    A degenerate range (all zero) gives scale 1, zero point 0. Scales are float32 when the range
    is float32 (they will be stored in a float32 initializer; requantization parameters must be
    derived from the stored value).
    """
    lo = np.asarray(rmin)
    hi = np.asarray(rmax)
    ft = np.result_type(lo.dtype, hi.dtype).type if lo.dtype.kind == "f" or hi.dtype.kind == "f" else np.float64
    lo = np.minimum(lo.astype(ft), 0)
    hi = np.maximum(hi.astype(ft), 0)
    if symmetric:
        a = np.maximum(np.abs(lo), np.abs(hi))
        lo, hi = -a, a
    scale = (hi - lo) / ft(qmax - qmin)
    degenerate = scale < np.finfo(ft).tiny
    safe = np.where(degenerate, ft(1), scale)
    zp = np.clip(np.rint(qmin - lo.astype(np.float64) / safe.astype(np.float64)), qmin, qmax)
    zp = np.where(degenerate, 0, zp)
    if symmetric and qmin == -qmax:
        zp = np.zeros_like(zp)
    return safe.astype(ft), zp.astype(np.int32)


def quantize_weights_per_channel(w: ArrayLike, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-output-channel int8 weights: returns (q int8, scale float32 [C]).

    scale[c] = max|w[c]| / 127 (float32, like onnxruntime); q = clip(round_half_even(w / scale),
    -127, 127); zero point 0. An all-zero channel gets scale 1.
    """
    wf = np.asarray(w, dtype=np.float32)
    red = tuple(i for i in range(wf.ndim) if i != axis % wf.ndim)
    absmax = np.max(np.abs(wf), axis=red)
    scale, _ = choose_qparams(-absmax, absmax, symmetric=True, qmin=WEIGHT_QMIN, qmax=WEIGHT_QMAX)
    shape = [1] * wf.ndim
    shape[axis % wf.ndim] = -1
    q = quantize(wf, scale.reshape(shape), 0, WEIGHT_QMIN, WEIGHT_QMAX)
    return q, scale


def quantize_bias(b: ArrayLike, s_in: ArrayLike, s_w: ArrayLike) -> np.ndarray:
    """int32 bias with scale s_in * s_w[c] and zero point 0, so it adds straight into the accumulator.

    As onnxruntime's quantizer: the bias scale is the float32 product, the division is float32,
    rounding half to even, saturated to int32.
    """
    bs = np.asarray(s_in, dtype=np.float32) * np.asarray(s_w, dtype=np.float32)
    v = np.rint(np.asarray(b, dtype=np.float32) / bs).astype(np.float64)
    return np.clip(v, INT32_MIN, INT32_MAX).astype(np.int32)


def requant_params(s_in: ArrayLike, s_w: ArrayLike, s_out: ArrayLike) -> tuple[np.ndarray | int, np.ndarray | int]:
    """(multiplier, shift) per channel for M = s_in * s_w[c] / s_out, computed in float64 from the
    (float32) scales as TFLite does (``static_cast<double>`` of each scale)."""
    m = (
        np.asarray(s_in, dtype=np.float32).astype(np.float64)
        * np.asarray(s_w, dtype=np.float32).astype(np.float64)
        / np.asarray(s_out, dtype=np.float32).astype(np.float64)
    )
    return quantize_multiplier(m)


def activation_range(
    kind: str | None, scale: float, zp: int, lo: float | None = None, hi: float | None = None
) -> tuple[int, int]:
    """Fold a fused activation into the int8 clamp [act_min, act_max], as TFLite's
    ``CalculateActivationRangeQuantized``: Relu -> [max(-128, zp), 127]; Relu6 ->
    [max(-128, zp), min(127, zp + round(6 / scale))]; Clip(lo, hi) -> the same with quantized
    bounds; None -> [-128, 127]. Bounds are quantized half to even (the ONNX QuantizeLinear rule,
    which is what onnxruntime computes for Clip -> QuantizeLinear); TFLite rounds half away from
    zero here, which differs only when bound / scale is exactly k + 1/2."""

    def q(v: float) -> int:
        return int(zp + np.rint(np.float32(v) / np.float32(scale)))

    if kind is None:
        return INT8_MIN, INT8_MAX
    if kind == "relu":
        return max(INT8_MIN, zp), INT8_MAX
    if kind == "relu6":
        lo, hi = 0.0, 6.0
    elif kind != "clip":
        raise ValueError(f"unknown activation {kind!r}")
    amin = INT8_MIN if lo is None else max(INT8_MIN, q(lo))
    amax = INT8_MAX if hi is None else min(INT8_MAX, q(hi))
    return amin, amax


# ----------------------------------------------------------------------------------------------
# unary ops: a 256-entry table
# ----------------------------------------------------------------------------------------------


def build_lut(
    fn: Callable[[np.ndarray], np.ndarray],
    s_in: float,
    zp_in: int,
    s_out: float,
    zp_out: int,
    rounding: str = "half_away",
) -> np.ndarray:
    """The int8 -> int8 table of a unary op: lut[q + 128] = quantize(fn(dequantize(q))).

    Every int8 input is dequantized (float64: (q - zp_in) * s_in), passed through ``fn`` (a
    vectorised numpy function of float64), divided by s_out, rounded (half away from zero by
    default, TFLite's ``LUTPopulate`` convention; ``"half_even"`` for ONNX QuantizeLinear's), offset by
    zp_out and clamped to [-128, 127]. The index is q + 128 so entry i is input i - 128. Built at
    compile time, so the target needs no floating point: ``lut_lookup`` is the whole run-time op.
    """
    q = np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.int64)
    x = (q - int(zp_in)).astype(np.float64) * float(s_in)
    y = np.asarray(fn(x), dtype=np.float64)
    v = _round(y / float(s_out), rounding) + int(zp_out)
    return np.clip(v, INT8_MIN, INT8_MAX).astype(np.int8)


def lut_lookup(lut: np.ndarray, q: ArrayLike) -> np.ndarray:
    """Run time of a LUT op: lut[q + 128]."""
    return np.asarray(lut, dtype=np.int8)[_i64(q, "q", INT8_MIN, INT8_MAX) + 128]


# ----------------------------------------------------------------------------------------------
# int8 Add (TFLite reference_integer_ops::Add / CMSIS-NN arm_elementwise_add_s8)
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AddParams:
    """Integer parameters of an int8 Add; field for field the C ``tinyc_q_add_params_t``."""

    in1_offset: int  # -zp1
    in1_multiplier: int
    in1_shift: int
    in2_offset: int  # -zp2
    in2_multiplier: int
    in2_shift: int
    out_multiplier: int
    out_shift: int
    out_zp: int
    act_min: int = INT8_MIN
    act_max: int = INT8_MAX
    left_shift: int = ADD_LEFT_SHIFT
    rounding: int = 0  # of the output stage: rounding_code(mode); the input stages are TFLite's


def add_params(
    s1: float,
    zp1: int,
    s2: float,
    zp2: int,
    s_out: float,
    zp_out: int,
    act_min: int = INT8_MIN,
    act_max: int = INT8_MAX,
) -> AddParams:
    """TFLite's int8 Add preparation: both inputs are brought to a common scale 2*max(s1, s2)/2^20.

    twice_max = 2 * max(s1, s2) (float64 from float32 scales); real_in_i = s_i / twice_max (<= 1/2);
    real_out = twice_max / (2^20 * s_out). Each is turned into (multiplier, shift) by
    ``quantize_multiplier``.
    """
    f1, f2, fo = (float(np.float32(v)) for v in (s1, s2, s_out))
    twice_max = 2.0 * max(f1, f2)
    m1, sh1 = quantize_multiplier(f1 / twice_max)
    m2, sh2 = quantize_multiplier(f2 / twice_max)
    mo, sho = quantize_multiplier(twice_max / (float(1 << ADD_LEFT_SHIFT) * fo))
    return AddParams(
        -int(zp1),
        int(m1),
        int(sh1),
        -int(zp2),
        int(m2),
        int(sh2),
        int(mo),
        int(sho),
        int(zp_out),
        int(act_min),
        int(act_max),
    )


def add_int8(q1: ArrayLike, q2: ArrayLike, p: AddParams) -> np.ndarray:
    """int8 + int8 -> int8 (broadcasting):
    a_i = (q_i + offset_i) << 20; a_i = mbqm(a_i, m_i, s_i); sum = a_1 + a_2;
    out = clamp(mbqm(sum, m_out, s_out) + zp_out, act_min, act_max).
    (|q + offset| <= 255, so the shifted value is < 2^28 and the sum cannot overflow.)"""
    a1 = (_i64(q1, "q1", INT8_MIN, INT8_MAX) + p.in1_offset) << p.left_shift
    a2 = (_i64(q2, "q2", INT8_MIN, INT8_MAX) + p.in2_offset) << p.left_shift
    s1 = np.asarray(multiply_by_quantized_multiplier(a1, p.in1_multiplier, p.in1_shift)).astype(np.int64)
    s2 = np.asarray(multiply_by_quantized_multiplier(a2, p.in2_multiplier, p.in2_shift)).astype(np.int64)
    return np.asarray(
        requantize(s1 + s2, p.out_multiplier, p.out_shift, p.out_zp, p.act_min, p.act_max, ROUNDINGS[p.rounding])
    )


# ----------------------------------------------------------------------------------------------
# int8 Mul and moving a tensor to another grid (QMul, QRequantize, QConcat)
# ----------------------------------------------------------------------------------------------


def mul_int8(
    q1: ArrayLike,
    q2: ArrayLike,
    zp1: int,
    zp2: int,
    multiplier: int,
    shift: int,
    out_zp: int,
    act_min: int = INT8_MIN,
    act_max: int = INT8_MAX,
    rounding: str = "tflite",
) -> np.ndarray:
    """int8 * int8 -> int8 (broadcasting), TFLite's reference_integer_ops::Mul:
    acc = (q1 - zp1) * (q2 - zp2) (|acc| <= 255 * 255 < 2^16: exact in int32);
    out = requantize(acc, multiplier, shift, out_zp, act_min, act_max) with (multiplier, shift)
    = ``requant_params(s1, s2, s_out)``, i.e. M = s1 * s2 / s_out."""
    acc = (_i64(q1, "q1", INT8_MIN, INT8_MAX) - int(zp1)) * (_i64(q2, "q2", INT8_MIN, INT8_MAX) - int(zp2))
    return np.asarray(requantize(acc, multiplier, shift, out_zp, act_min, act_max, rounding))


#: QRequantize pre-shifts (q - zp_in) left by up to 20 bits, as the int8 Add does, so that the
#: fixed-point product keeps fraction bits: without it mbqm rounds twice on a ~9-bit value and is
#: off by one (vs the exact round(x * M)) for ~5% of inputs; with it, essentially never.
RESCALE_LEFT_SHIFT = 20


def rescale_params(s_in: float, s_out: float) -> tuple[int, int, int] | None:
    """(multiplier, shift, left_shift) for M = s_in / s_out (float64 from the float32 scales), or None
    when the two float32 scales are equal: then moving between the grids is an exact zero-point shift.

    (multiplier, shift0) = quantize_multiplier(M); left_shift = clamp(31 + shift0, 0, 20) (so that
    the right shift stays <= 31); shift = shift0 - left_shift. Raises ValueError when M >= 2^31."""
    fi, fo = np.float32(s_in), np.float32(s_out)
    if fi == fo:
        return None
    m, s = quantize_multiplier(float(fi) / float(fo))
    k = max(0, min(RESCALE_LEFT_SHIFT, 31 + int(s)))
    return int(m), int(s) - k, k


def rescale(
    q: ArrayLike,
    in_zp: int,
    out_zp: int,
    qmin: int,
    qmax: int,
    multiplier: int | None = None,
    shift: int = 0,
    left_shift: int = 0,
) -> np.ndarray:
    """Move integers q (int8 or uint8 values) from grid (s_in, in_zp) to grid (s_out, out_zp).

    Equal scales (``multiplier`` None): clamp(q - in_zp + out_zp, qmin, qmax), exact.
    Otherwise, with (multiplier, shift, left_shift) from ``rescale_params``:
    clamp(mbqm((q - in_zp) * 2^left_shift, multiplier, shift) + out_zp, qmin, qmax).
    |q - in_zp| <= 255, so the pre-shifted value is < 2^28; the zero point is added after clamping
    to [qmin - out_zp, qmax - out_zp], so even a saturated mbqm cannot overflow.
    Returns int64 values in [qmin, qmax]."""
    x = _i64(q, "q", INT8_MIN, 255) - int(in_zp)
    if multiplier is None:
        return np.clip(x + int(out_zp), qmin, qmax)
    if not 0 <= left_shift <= RESCALE_LEFT_SHIFT:
        raise ValueError(f"left_shift must be in [0, {RESCALE_LEFT_SHIFT}]")
    r = np.asarray(multiply_by_quantized_multiplier(x << int(left_shift), multiplier, shift)).astype(np.int64)
    return np.clip(r, qmin - int(out_zp), qmax - int(out_zp)) + int(out_zp)
