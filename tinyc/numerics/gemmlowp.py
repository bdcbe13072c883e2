"""gemmlowp's fixed-point transcendental functions, step for step, as TFLite Micro's int8 kernels use them.

TFLite Micro's reference Softmax, Logistic and Tanh (and CMSIS-NN, which matches them) evaluate
exp, 1/(1+x), logistic and tanh on ``gemmlowp::FixedPoint<int32, IntegerBits>`` values: raw int32
numbers with ``31 - IntegerBits`` fractional bits, multiplied with ``SaturatingRoundingDoublingHighMul``.
tinyc reproduces them here in numpy (int64 internally, every step wrapped or saturated as int32
would be) so that compile-time tables (``exp_table``) and the golden model of the TFLite-Micro
softmax are those functions' exact values. The C side (``runtime_c/include/tinyc_q.h``) only needs
the reciprocal; everything depending on one int8 input difference becomes a table.

Names follow gemmlowp: ``F<k>`` is a FixedPoint with k integer bits.
"""

from __future__ import annotations

import numpy as np

from tinyc.numerics.fixed_point import INT32_MAX, INT32_MIN

ArrayLike = np.ndarray | int


def wrap32(x: ArrayLike) -> np.ndarray:
    """int64 -> the int32 value two's-complement arithmetic gives (gemmlowp's raw + and -)."""
    return ((np.asarray(x, np.int64) + (1 << 31)) % (1 << 32)) - (1 << 31)


def srdhm(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul: the product of two F-values' raws (int64 in, int64 out)."""
    a64, b64 = np.asarray(a, np.int64), np.asarray(b, np.int64)
    ab = a64 * b64
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    t = ab + nudge
    q = np.where(t >= 0, t >> 31, -((-t) >> 31))
    return np.where((a64 == INT32_MIN) & (b64 == INT32_MIN), INT32_MAX, q)


def rdbpot(x: ArrayLike, exponent: int | np.ndarray) -> np.ndarray:
    """RoundingDivideByPOT: x / 2^exponent rounded half away from zero."""
    x64 = np.asarray(x, np.int64)
    e = np.asarray(exponent, np.int64)
    mask = (np.int64(1) << e) - 1
    remainder = x64 & mask
    threshold = (mask >> 1) + (x64 < 0)
    return (x64 >> e) + (remainder > threshold)


def mul_by_pot(x: ArrayLike, exponent: int) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOT<exponent>: a saturating left shift, or a rounding right shift."""
    x64 = np.asarray(x, np.int64)
    if exponent >= 0:
        return np.clip(x64 * (1 << exponent), INT32_MIN, INT32_MAX)
    return rdbpot(x64, -exponent)


def rounding_half_sum(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """RoundingHalfSum for int32: (a + b + sign) / 2 with C's truncating division."""
    s = np.asarray(a, np.int64) + np.asarray(b, np.int64)
    t = s + np.where(s >= 0, 1, -1)
    return np.where(t >= 0, t // 2, -((-t) // 2))


def exp_on_interval_between_negative_one_quarter_and_0_excl(a: ArrayLike) -> np.ndarray:
    """exp(a) for an F0 a in [-1/4, 0): a Taylor expansion around -1/8 (gemmlowp's constants)."""
    constant_term = 1895147668  # exp(-1/8) in F0
    constant_1_over_3 = 715827883
    x = wrap32(np.asarray(a, np.int64) + (1 << 28))  # + 1/8
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    x4_over_4 = mul_by_pot(x4, -2)
    inner = mul_by_pot(wrap32(srdhm(wrap32(x4_over_4 + x3), constant_1_over_3) + x2), -1)
    return wrap32(constant_term + srdhm(constant_term, wrap32(x + inner)))


#: exp(-2^k) in F0 for the barrel shifter, k = -2 .. 4
_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535), (3, 720401), (4, 242))


def exp_on_negative_values(a: ArrayLike, integer_bits: int) -> np.ndarray:
    """exp(a) for a <= 0 given as an F<integer_bits> raw; the result is an F0 raw (int64 array)."""
    a = np.asarray(a, np.int64)
    frac = 31 - integer_bits
    one_quarter = 1 << (frac - 2)
    mask = one_quarter - 1
    a_mod = wrap32((a & mask) - one_quarter)
    result = exp_on_interval_between_negative_one_quarter_and_0_excl(mul_by_pot(a_mod, integer_bits))
    remainder = wrap32(a_mod - a)
    for exponent, multiplier in _BARREL:
        if integer_bits > exponent:
            bit = 1 << (frac + exponent)
            result = np.where((remainder & bit) != 0, srdhm(result, multiplier), result)
    if integer_bits > 5:
        clamp = -(1 << (36 - integer_bits))
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, INT32_MAX, result)


def one_over_one_plus_x_for_x_in_0_1(a: ArrayLike) -> np.ndarray:
    """1 / (1 + a) for an F0 a in [0, 1): Newton-Raphson in F2 (three steps), result F0."""
    half_denominator = rounding_half_sum(a, INT32_MAX)
    constant_48_over_17 = 1515870810
    constant_neg_32_over_17 = -1010580540
    f2_one = 1 << 29
    x = wrap32(constant_48_over_17 + srdhm(half_denominator, constant_neg_32_over_17))
    for _ in range(3):
        half_denominator_times_x = srdhm(half_denominator, x)
        one_minus = wrap32(f2_one - half_denominator_times_x)
        x = wrap32(x + mul_by_pot(srdhm(x, one_minus), 2))
    return mul_by_pot(x, 1)


def count_leading_zeros(x: ArrayLike) -> np.ndarray:
    """CountLeadingZeros of a uint32 (32 for 0)."""
    u = np.asarray(x, np.int64) & 0xFFFFFFFF
    n = np.full(u.shape, 32, np.int64)
    nz = u > 0
    n[nz] = 31 - np.floor(np.log2(u[nz].astype(np.float64))).astype(np.int64)
    # log2 of values just below a power of two can round up in float64: fix by checking the bit
    hi = np.where(nz, (u >> (31 - n)) & 1, 1)
    n = np.where(nz & (hi == 0), n + 1, n)
    return n


def get_reciprocal(x: ArrayLike, x_integer_digits: int) -> tuple[np.ndarray, np.ndarray]:
    """TFLite's GetReciprocal: (F0 raw of 1/x scaled into [0.5, 1), num_bits_over_unit)."""
    x64 = np.asarray(x, np.int64)
    headroom_plus_one = count_leading_zeros(x64)
    num_bits_over_unit = x_integer_digits - headroom_plus_one
    shifted = ((x64 & 0xFFFFFFFF) << headroom_plus_one) & 0xFFFFFFFF
    shifted_sum_minus_one = wrap32(shifted - (1 << 31))
    return one_over_one_plus_x_for_x_in_0_1(shifted_sum_minus_one), num_bits_over_unit
