"""TFLite Micro's int8 unary kernels, emulated step for step in numpy to fill 256-entry tables.

Every int8 -> int8 elementwise kernel of TFLite Micro depends on one int8 input value only, so tinyc
runs it as a ``QLut`` (``y = table[x + 128]``) whose entries are computed here at compile time for all
256 inputs. Each function below reproduces what the TFLM kernel does, not what the real function is:
the same multipliers from the same float32/float64 expressions of the scales (``Prepare``), the same
gemmlowp fixed-point steps, the same rounding (TFLite's double-rounding ``MultiplyByQuantizedMultiplier``,
``std::round`` half away from zero), the same saturations and int16 wrap-arounds. Where TFLM
computes in float (ELU's table), float32 is emulated: each operation rounded to float32, ``expf`` as the
correctly rounded float32 of the exact exponential (what glibc's expf returns).

All functions return an int8 array of 256 entries, entry ``k`` for the input ``k - 128``; they raise
ValueError for parameters TFLM's Prepare rejects or that would need undefined C++ behaviour.
"""

from __future__ import annotations

import math

import numpy as np

from tinyc.numerics import gemmlowp
from tinyc.numerics.fixed_point import INT32_MAX, multiply_by_quantized_multiplier, quantize_multiplier, round_half_away

#: the 256 int8 inputs, as int64
Q = np.arange(-128, 128, dtype=np.int64)


def f32(v: float) -> float:
    """A Python float rounded to float32 (a C ``float``)."""
    return float(np.float32(v))


def round_away(v: np.ndarray | float) -> np.ndarray:
    """std::round / TfLiteRound: half away from zero, evaluated in float64."""
    return round_half_away(np.asarray(v, np.float64))


def _table(v: np.ndarray) -> np.ndarray:
    return np.clip(np.asarray(v, np.int64), -128, 127).astype(np.int8)


def mbqm(x: np.ndarray, multiplier: int, shift: int) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier (double rounding), int64 in and out."""
    return np.asarray(multiply_by_quantized_multiplier(np.asarray(x, np.int64), multiplier, shift)).astype(np.int64)


def qmul(real: float, what: str) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier of a non-negative real (float64)."""
    m, s = quantize_multiplier(real)
    if int(m) == 0 and real != 0.0:
        raise ValueError(f"{what} multiplier {real:g} is too small")
    return int(m), int(s)


def qmul_signed(real: float, what: str) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier of any real: a negative one keeps its sign in the multiplier (frexp's
    mantissa is negative), and only a positive mantissa that rounds up to 2^31 is halved."""
    if real >= 0:
        return qmul(real, what)
    q, e = math.frexp(real)
    m = int(round_away(q * float(1 << 31)))
    if e < -31:
        raise ValueError(f"{what} multiplier {real:g} is too small")
    return m, e


# -- LOGISTIC / TANH (gemmlowp fixed point, reference_integer_ops) ----------------------------------------
def _input_params(s_in: float) -> tuple[int, int, int]:
    """(multiplier, left_shift, range_radius) of TFLM's int8 logistic/tanh Prepare: the input in F4."""
    real = f32(s_in) * float(1 << 27)
    q, left_shift = math.frexp(real)
    mult = int(round_away(q * float(1 << 31)))
    if mult >= 1 << 31 or not 0 <= left_shift <= 31:
        raise ValueError(f"input scale {s_in:g} is outside what TFLite's int8 logistic/tanh handle")
    radius = int(math.floor(15.0 * float(1 << 27) / float(1 << left_shift)))
    return mult, left_shift, radius


def _newton_f2(a: np.ndarray) -> np.ndarray:
    """The F2 Newton-Raphson iterate of gemmlowp's 1/(1+a) and (1-a)/(1+a), a an F0 raw in [0, 1)."""
    half_den = gemmlowp.rounding_half_sum(a, INT32_MAX)
    x = gemmlowp.wrap32(1515870810 + gemmlowp.srdhm(half_den, -1010580540))
    for _ in range(3):
        one_minus = gemmlowp.wrap32((1 << 29) - gemmlowp.srdhm(half_den, x))
        x = gemmlowp.wrap32(x + gemmlowp.mul_by_pot(gemmlowp.srdhm(x, one_minus), 2))
    return x


def logistic_table(s_in: float, zp_in: int) -> np.ndarray:
    """reference_integer_ops::Logistic (output grid fixed by TFLM: zero point -128, scale 1/256)."""
    mult, shift, radius = _input_params(s_in)
    x = Q - zp_in
    a = mbqm(np.clip(x, -radius, radius), mult, shift)  # clipped values are overridden below
    pos = a > 0
    abs_a = np.where(pos, a, gemmlowp.wrap32(-a))
    e = gemmlowp.exp_on_negative_values(gemmlowp.wrap32(-abs_a), 4)
    r_pos = gemmlowp.mul_by_pot(_newton_f2(e), 1)  # Rescale<0>(ExactMulByPot<-1>(x)): F1 -> F0
    r_neg = gemmlowp.wrap32(INT32_MAX - r_pos)
    r = np.where(a == 0, 1 << 30, np.where(pos, r_pos, r_neg))
    y = np.clip(gemmlowp.rdbpot(r, 23) - 128, -128, 127)
    y = np.where(x <= -radius, -128, np.where(x >= radius, 127, y))
    return _table(y)


def tanh_table(s_in: float, zp_in: int) -> np.ndarray:
    """reference_integer_ops::Tanh: the result is tanh * 128 whatever the output grid says (TFLite's
    converter gives it scale 1/128, zero point 0)."""
    mult, shift, radius = _input_params(s_in)
    x = Q - zp_in
    a = mbqm(np.clip(x, -radius, radius), mult, shift)
    neg = a < 0
    n = np.where(neg, a, gemmlowp.wrap32(-a))  # -|a|
    e = gemmlowp.exp_on_negative_values(n, 5)  # ExactMulByPot<1>: the same raw read as F5
    t = gemmlowp.mul_by_pot(gemmlowp.wrap32(_newton_f2(e) - (1 << 29)), 2)  # Rescale<0>(x - F2::One())
    r = np.where(a == 0, 0, np.where(neg, gemmlowp.wrap32(-t), t))
    y = np.clip(gemmlowp.rdbpot(r, 24), -128, 127)
    y = np.where(x <= -radius, -128, np.where(x >= radius, 127, y))
    return _table(y)


# -- RELU / RELU6 / LEAKY_RELU -------------------------------------------------------------------------------
def relu_table(s_in: float, zp_in: int, s_out: float, zp_out: int) -> np.ndarray:
    """ReluQuantized: requantize to the output grid, clamp below at the output's zero point."""
    m, s = qmul(f32(s_in) / f32(s_out), "relu")
    y = zp_out + mbqm(Q - zp_in, m, s)
    return _table(np.clip(y, max(-128, zp_out), 127))


def relu6_table(s_in: float, zp_in: int) -> np.ndarray:
    """Relu6Quantized clamps the raw input to [zero, six] of the INPUT grid and ignores the output's."""
    six = int(round_away(np.float32(6.0) / np.float32(s_in))) + zp_in  # FloatToQuantizedType, float32
    six = max(-128, min(127, six))
    return _table(np.clip(Q, zp_in, six))


def leaky_relu_table(s_in: float, zp_in: int, s_out: float, zp_out: int, alpha: float) -> np.ndarray:
    """QuantizeLeakyRelu: identity multiplier s_in / s_out for x >= 0, s_in * alpha / s_out below (both
    computed in float32 as TFLM's Prepare does; a negative alpha gives a negative multiplier)."""
    fi, fo, fa = np.float32(s_in), np.float32(s_out), np.float32(alpha)
    real_alpha = float(np.float32(np.float32(fi * fa) / fo))
    m_a, s_a = qmul_signed(real_alpha, "alpha") if real_alpha else (0, 0)
    m_i, s_i = qmul(float(np.float32(fi / fo)), "identity")
    x = Q - zp_in
    y = np.where(x >= 0, mbqm(x, m_i, s_i), mbqm(x, m_a, s_a)) + zp_out
    return _table(y)


# -- HARD_SWISH (int16 fixed point) -----------------------------------------------------------------------------
def _sat16(x: np.ndarray) -> np.ndarray:
    return np.clip(x, -32768, 32767)


def _wrap16(x: np.ndarray) -> np.ndarray:
    return ((np.asarray(x, np.int64) + 32768) % 65536) - 32768


def _srdhm16(a: np.ndarray, b: int) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul for int16."""
    ab = np.asarray(a, np.int64) * b
    nudge = np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    t = ab + nudge
    q = np.where(t >= 0, t >> 15, -((-t) >> 15))  # C division truncates
    return np.where((np.asarray(a) == -32768) & (b == -32768), 32767, _wrap16(q))


def _sdhm16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """SaturatingDoublingHighMul (no rounding: C division toward zero)."""
    ab = np.asarray(a, np.int64) * np.asarray(b, np.int64)
    q = np.where(ab >= 0, ab >> 15, -((-ab) >> 15))
    return np.where((np.asarray(a) == -32768) & (np.asarray(b) == -32768), 32767, _wrap16(q))


def _rdbpot16(x: np.ndarray, e: int) -> np.ndarray:
    """gemmlowp's RoundingDivideByPOT on int16: the mask (2^e - 1) is truncated to int16, so for e >= 16 it is
    -1 and the result is (x >> e) + (x >= 0 ? 1 : 0) — what TFLM computes for tiny output multipliers."""
    x = np.asarray(x, np.int64)
    mask = int(_wrap16(np.asarray((1 << e) - 1)))
    remainder = _wrap16(x & mask)
    threshold = _wrap16((mask >> 1) + (x < 0))
    return _wrap16((x >> e) + (remainder > threshold))


def _to_int16_multiplier(m: int) -> int:
    """DownScaleInt32ToInt16Multiplier."""
    return 32767 if m >= INT32_MAX - (1 << 15) else (m + (1 << 15)) >> 16


def hard_swish_table(s_in: float, zp_in: int, s_out: float, zp_out: int) -> np.ndarray:
    """reference_ops::HardSwish for int8 (TFLM's HardSwishPrepare multipliers)."""
    hires = np.float32(np.float32(1.0 / 128.0) * np.float32(s_in))
    m_out, e_out = qmul(float(np.float32(hires / np.float32(s_out))), "output")
    m_rel, e_rel = qmul(float(np.float32(hires / np.float32(3.0 / 32768.0))), "reluish")
    if e_out > 0:
        raise ValueError("the output multiplier exceeds 1 (TFLM requires output_multiplier_exponent <= 0)")
    m_out16, m_rel16 = _to_int16_multiplier(m_out), _to_int16_multiplier(m_rel)
    v = _wrap16(Q - zp_in)
    v_hires = _wrap16(v * 128)
    pre_out = _srdhm16(v_hires, m_out16)
    r = v_hires
    if e_rel > 0:
        r = _sat16(r * (1 << (e_rel - 1)))
    r = _srdhm16(r, m_rel16)
    if e_rel > 0:
        r = _sat16(r * 2)
    if e_rel < 0:
        r = _rdbpot16(r, -e_rel)
    r = _wrap16((r + (1 << 15)) >> 1)
    pre = _sdhm16(r, pre_out)
    y = _wrap16(_rdbpot16(pre, -e_out) + zp_out)
    return _table(y)


# -- ELU (TFLM fills its own table in float32) ------------------------------------------------------------------
def elu_table(s_in: float, zp_in: int, s_out: float, zp_out: int) -> np.ndarray:
    """elu.cc PopulateLookupTable: deq = s_in * (q - zp) (float32), expf(deq) - 1 below 0, times 1/s_out
    (float32), std::round, + zero point, clamp."""
    deq = (np.float32(s_in) * (Q - zp_in).astype(np.float32)).astype(np.float32)
    with np.errstate(over="ignore"):  # exp of the large positive inputs, whose entries take the identity
        expm1 = (np.exp(deq.astype(np.float64)).astype(np.float32) - np.float32(1.0)).astype(np.float32)
    transformed = np.where(deq < 0, expm1, deq).astype(np.float32)
    inv = np.float32(np.float32(1.0) / np.float32(s_out))
    rescaled = round_away((transformed * inv).astype(np.float32)).astype(np.float32)
    return _table((rescaled + np.float32(zp_out)).astype(np.float64).astype(np.int64))


# -- ABS / RSQRT (elementwise.cc) -----------------------------------------------------------------------------
def abs_table(s_in: float, zp_in: int, s_out: float, zp_out: int) -> np.ndarray:
    """AbsEvalQuantized: |q - zp_in|, rescaled only when the two float32 scales differ."""
    v = np.abs(Q - zp_in)
    if np.float32(s_in) == np.float32(s_out):
        return _table(v + zp_out)
    m, s = qmul(f32(s_in) / f32(s_out), "abs")
    return _table(mbqm(v, m, s) + zp_out)


def _inv_sqrt(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GetInvSqrtQuantizedMultiplierExp(v, reverse_shift=-1) for 2 <= v < 2^29: (multiplier, left shift)."""
    clz = gemmlowp.count_leading_zeros(v)
    pairs = (clz - 1) // 2 - 1
    shift = 11 - pairs
    x_in = (v << (2 * pairs)) >> 1
    half_in = gemmlowp.rdbpot(x_in, 1)
    half_three = (1 << 28) + (1 << 27)
    x = np.full(v.shape, 1 << 28, np.int64)
    for _ in range(5):
        x3 = gemmlowp.mul_by_pot(gemmlowp.srdhm(gemmlowp.srdhm(x, x), x), 6)
        x = gemmlowp.mul_by_pot(gemmlowp.wrap32(gemmlowp.srdhm(half_three, x) - gemmlowp.srdhm(half_in, x3)), 3)
    x = gemmlowp.srdhm(x, 1518500250)
    x = np.where(shift < 0, gemmlowp.wrap32(x << np.maximum(-shift, 0)), x)
    shift = np.maximum(shift, 0)
    return x, -shift


def rsqrt_table(s_in: float, zp_in: int, s_out: float, zp_out: int) -> np.ndarray:
    """RsqrtEvalQuantized. TFLM fails the whole invocation on an input below the zero point (a negative
    real value); those entries (which no valid run reaches) hold 127, the kernel's value for zero."""
    m, s = qmul(1.0 / (math.sqrt(f32(s_in)) * f32(s_out)), "rsqrt")
    out = np.full(256, 127, np.int64)
    for k, q in enumerate(Q):
        v = int(q) - zp_in
        if v <= 0:
            continue
        if v == 1:
            inv, sh = INT32_MAX, 0
        else:
            a, b = _inv_sqrt(np.asarray([v], np.int64))
            inv, sh = int(a[0]), int(b[0])
        data = int(mbqm(np.asarray(1), inv, sh + 20))
        out[k] = int(mbqm(np.asarray(data), m, s - 20)) + zp_out
    return _table(out)


# -- QUANTIZE int8 -> int8 (requantize.h) ---------------------------------------------------------------------
def requantize_table(s_in: float, zp_in: int, s_out: float, zp_out: int) -> np.ndarray:
    """reference_ops::Requantize: mbqm(q - zp_in, M = s_in / s_out) + zp_out, clamped."""
    m, s = qmul(f32(s_in) / f32(s_out), "requantize")
    return _table(mbqm(Q - zp_in, m, s) + zp_out)
