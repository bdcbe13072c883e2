"""gemmlowp-style fixed-point natural logarithm, step for step, as TFLite Micro's int8 LOG_SOFTMAX uses it.

TFLite's ``log_x_for_x_greater_than_or_equal_to_1<OutputIntegerBits>(FixedPoint<int32, InputIntegerBits>)``
(``kernels/internal/common.h``) splits x into a power of two and a mantissa r in [sqrt(1/2), sqrt(2)) —
trying both x and x * sqrt(1/2) and keeping the better-conditioned one — then evaluates a rational
approximation of log(r) around 2^(-1/4) with one ``one_over_one_plus_x_for_x_in_0_1``. tinyc reproduces it
here in numpy (int64 internally, every raw + and - wrapped as int32 two's complement would be, every
saturating helper saturated) so the golden model of ``TflmLogSoftmax`` gives TFLite Micro's exact integers.
The helpers shared with softmax (srdhm, rdbpot, mul_by_pot, rounding_half_sum, one_over_one_plus_x) come
from ``tinyc/numerics/gemmlowp.py``.
"""

from __future__ import annotations

import numpy as np

from tinyc.numerics.fixed_point import INT32_MAX, INT32_MIN
from tinyc.numerics.gemmlowp import (
    ArrayLike,
    count_leading_zeros,
    mul_by_pot,
    one_over_one_plus_x_for_x_in_0_1,
    rdbpot,
    rounding_half_sum,
    srdhm,
    wrap32,
)

#: F0 raws of the constants TFLite's log uses (log 2, 2^(-1/4), 2^(-1/2), 1/4, and the rational fit).
LOG_2 = 1488522236
SQRT_SQRT_HALF = 1805811301
SQRT_HALF = 1518500250
ONE_QUARTER = 536870912
ALPHA_N = 117049297
ALPHA_D = 127690142
ALPHA_I = 1057819769
ALPHA_F = 638450708


def saturating_add(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """TFLite's SaturatingAddNonGemmlowp for int32: the sum clamped to the int32 range."""
    return np.clip(np.asarray(a, np.int64) + np.asarray(b, np.int64), INT32_MIN, INT32_MAX)


def saturating_sub(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """TFLite's SaturatingSub for int32: the difference clamped to the int32 range."""
    return np.clip(np.asarray(a, np.int64) - np.asarray(b, np.int64), INT32_MIN, INT32_MAX)


def _mul_by_pot_param(x: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOTParam with a per-element exponent >= 0: a saturating left shift."""
    return np.clip(x * (np.int64(1) << exponent), INT32_MIN, INT32_MAX)


def log_x_for_x_greater_than_or_equal_to_1(
    x: ArrayLike, input_integer_bits: int, output_integer_bits: int
) -> np.ndarray:
    """log(x) for x >= 1 given as an F<input_integer_bits> raw (int32 > 0); the result is an
    F<output_integer_bits> raw (int64 array), TFLite's log_x_for_x_greater_than_or_equal_to_1_impl."""
    z_a = np.asarray(x, np.int64)
    accum_bits = output_integer_bits + 1
    shifted_quarter = rdbpot(ONE_QUARTER, accum_bits)  # Rescale<accum_bits>(1/4 in F0)

    z_a_headroom_plus_1 = count_leading_zeros(z_a)
    r_a_tmp = _mul_by_pot_param(z_a, z_a_headroom_plus_1 - 1)
    r_a_raw = mul_by_pot(srdhm(r_a_tmp, SQRT_HALF), 1)
    z_a_pow_2_adj = saturating_add(
        _mul_by_pot_param(input_integer_bits - z_a_headroom_plus_1, np.int64(31 - accum_bits)), shifted_quarter
    )

    z_b = srdhm(z_a, SQRT_HALF)
    z_b_headroom = count_leading_zeros(z_b) - 1
    r_b_raw = _mul_by_pot_param(z_a, z_b_headroom)
    z_b_pow_2_adj = saturating_sub(
        _mul_by_pot_param(input_integer_bits - z_b_headroom, np.int64(31 - accum_bits)), shifted_quarter
    )

    r = np.minimum(r_a_raw, r_b_raw)
    z_pow_2_adj = np.maximum(z_a_pow_2_adj, z_b_pow_2_adj)

    p = rounding_half_sum(r, SQRT_SQRT_HALF)
    q = wrap32(r - SQRT_SQRT_HALF)
    q = wrap32(q + q)
    common_sq = srdhm(q, q)
    num = wrap32(srdhm(q, r) + srdhm(srdhm(q, common_sq), ALPHA_N))
    denom_minus_one = wrap32(srdhm(p, wrap32(wrap32(ALPHA_I + q) + srdhm(ALPHA_D, common_sq))) + srdhm(ALPHA_F, q))
    recip_denom = one_over_one_plus_x_for_x_in_0_1(denom_minus_one)
    num_scaled = rdbpot(num, accum_bits)  # Rescale<accum_bits>(num in F0)
    total = wrap32(srdhm(z_pow_2_adj, LOG_2) + srdhm(num_scaled, recip_denom))
    return mul_by_pot(total, accum_bits - output_integer_bits)  # Rescale<output_integer_bits>
