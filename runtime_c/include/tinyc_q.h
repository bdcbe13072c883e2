/*
 * tinyc int8 integer arithmetic (docs/quantization.md), the C twin of tinyc/numerics/fixed_point.py.
 *
 * Every function here must equal its numpy counterpart bit for bit (tests/test_quant_arith.py).
 * The steps are gemmlowp's / TFLite's / CMSIS-NN's, so results compare with those libraries.
 *
 * Portable C99 with no undefined and no implementation-defined behaviour:
 *  - no left shift of a negative value (multiplications by a power of two in int64 instead);
 *  - no right shift of a negative value (tinyc_q_asr computes floor(x / 2^e) via ~(~x >> e));
 *  - no int32 overflow (products in int64, sums clamped before they could wrap);
 *  - no 64-bit division, so Cortex-M builds need no __aeabi_ldivmod; no floating point; only <stdint.h>.
 * Compilers turn tinyc_q_asr into a single arithmetic shift.
 *
 * Conventions: shift > 0 is a left shift, shift < 0 a right shift; -31 <= shift <= 31;
 * multiplier in [2^30, 2^31) or 0 (as produced by quantize_multiplier).
 */
#ifndef TINYC_Q_H
#define TINYC_Q_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#define TINYC_Q_INLINE static inline
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L
#define TINYC_Q_INLINE static inline
#else
#define TINYC_Q_INLINE static
#endif

#define TINYC_Q_ADD_LEFT_SHIFT 20

/* floor(x / 2^e) for 0 <= e <= 31 — an arithmetic right shift, written without shifting a
 * negative number (~x = -x - 1 is non-negative when x < 0). */
TINYC_Q_INLINE int32_t tinyc_q_asr(int32_t x, int e)
{
    return x >= 0 ? (int32_t)(x >> e) : (int32_t)~(~x >> e);
}

TINYC_Q_INLINE int32_t tinyc_q_clamp(int32_t x, int32_t lo, int32_t hi)
{
    return x < lo ? lo : (x > hi ? hi : x);
}

/* gemmlowp SaturatingRoundingDoublingHighMul: (a*b + nudge) / 2^31 truncated, nudge = 2^30 for
 * a*b >= 0 else 1 - 2^30; INT32_MIN * INT32_MIN saturates to INT32_MAX.
 * Equals floor(a*b / 2^31 + 1/2) (ties towards +inf). */
TINYC_Q_INLINE int32_t tinyc_q_srdhm(int32_t a, int32_t b)
{
    int64_t ab, t;
    if (a == b && a == INT32_MIN) {
        return INT32_MAX;
    }
    ab = (int64_t)a * (int64_t)b;                 /* |ab| < 2^62 */
    t = ab + (ab >= 0 ? (int64_t)1 << 30 : (int64_t)1 - ((int64_t)1 << 30));
    /* C99 division truncates toward zero; do the same with shifts of non-negative values only. */
    return (int32_t)(t >= 0 ? (t >> 31) : -((-t) >> 31));
}

/* gemmlowp RoundingDivideByPOT: x / 2^e rounded half away from zero, 0 <= e <= 31.
 * remainder = x & mask; threshold = (mask >> 1) + (x < 0); asr(x, e) + (remainder > threshold). */
TINYC_Q_INLINE int32_t tinyc_q_rdbpot(int32_t x, int e)
{
    const uint32_t mask = ((uint32_t)1 << e) - 1u;
    const int32_t remainder = (int32_t)((uint32_t)x & mask);     /* <= 2^31 - 1: fits */
    const int32_t threshold = (int32_t)(mask >> 1) + (x < 0 ? 1 : 0);
    return tinyc_q_asr(x, e) + (remainder > threshold ? 1 : 0);
}

/* x * 2^s saturated to int32, 0 <= s <= 31 (TFLite leaves the overflow undefined).
 * 32-bit only: x * 2^s fits iff -2^(31-s) <= x < 2^(31-s); then x * 2^(s-1) * 2 cannot overflow. */
TINYC_Q_INLINE int32_t tinyc_q_shl_sat(int32_t x, int s)
{
    int32_t lim;
    if (s <= 0) {
        return x;
    }
    lim = (int32_t)((uint32_t)1 << (31 - s));
    if (x >= lim) {
        return INT32_MAX;
    }
    if (x < -lim) {
        return INT32_MIN;
    }
    return x * ((int32_t)1 << (s - 1)) * 2;
}

/* TFLite MultiplyByQuantizedMultiplier: rdbpot(srdhm(acc << left, multiplier), right). */
TINYC_Q_INLINE int32_t tinyc_q_mbqm(int32_t acc, int32_t multiplier, int32_t shift)
{
    const int left = shift > 0 ? (int)shift : 0;
    const int right = shift > 0 ? 0 : (int)-shift;
    return tinyc_q_rdbpot(tinyc_q_srdhm(tinyc_q_shl_sat(acc, left), multiplier), right);
}

/* Requantization rounding (arith.ROUNDINGS): TFLite's double rounding above, or one rounding of
 * the exact product, half to even — what an imported ONNX QDQ model specifies. */
#define TINYC_Q_ROUND_TFLITE 0
#define TINYC_Q_ROUND_HALF_EVEN 1

/* floor(x / 2^e), 0 <= e <= 63, without shifting a negative value. */
TINYC_Q_INLINE int64_t tinyc_q_asr64(int64_t x, int e)
{
    return x >= 0 ? (x >> e) : ~(~x >> e);
}

/* x / 2^e rounded half to even, |x| < 2^62, 0 <= e <= 62 (arith.shift_round_half_even):
 * q = floor(x / 2^e), r = the low e bits of x; q + (r > 2^(e-1) || (r == 2^(e-1) && q odd)). */
TINYC_Q_INLINE int64_t tinyc_q_shift_round_even(int64_t x, int e)
{
    const uint64_t mask = ((uint64_t)1 << e) - 1u;
    const int64_t q = tinyc_q_asr64(x, e);
    const int64_t r = (int64_t)((uint64_t)x & mask);
    const int64_t halfway = (int64_t)1 << (e > 0 ? e - 1 : 0);
    return q + ((r > halfway || (r == halfway && (q & 1))) ? 1 : 0);
}

/* acc * M rounded once, half to even: shl_sat(acc, left) * multiplier / 2^(31 + right), saturated
 * (arith.multiply_by_quantized_multiplier with rounding="half_even"). */
TINYC_Q_INLINE int32_t tinyc_q_mbqm_even(int32_t acc, int32_t multiplier, int32_t shift)
{
    const int left = shift > 0 ? (int)shift : 0;
    const int right = shift > 0 ? 0 : (int)-shift;
    const int64_t q = tinyc_q_shift_round_even((int64_t)tinyc_q_shl_sat(acc, left) * multiplier, 31 + right);
    return q > INT32_MAX ? INT32_MAX : (q < INT32_MIN ? INT32_MIN : (int32_t)q);
}

/* acc * M with the given rounding (a compile-time constant in generated code, so this folds). */
TINYC_Q_INLINE int32_t tinyc_q_mbqm_rnd(int32_t acc, int32_t multiplier, int32_t shift, int32_t rounding)
{
    return rounding == TINYC_Q_ROUND_HALF_EVEN ? tinyc_q_mbqm_even(acc, multiplier, shift)
                                               : tinyc_q_mbqm(acc, multiplier, shift);
}

/* int32 accumulator -> int8: clamp(mbqm(acc) + out_zp, act_min, act_max), the sum exact, with the
 * given rounding. -128 <= act_min <= act_max <= 127, -128 <= out_zp <= 127. */
TINYC_Q_INLINE int8_t tinyc_q_requantize_rnd(int32_t acc, int32_t multiplier, int32_t shift, int32_t out_zp,
                                             int32_t act_min, int32_t act_max, int32_t rounding)
{
    const int32_t x = tinyc_q_mbqm_rnd(acc, multiplier, shift, rounding);
    return (int8_t)(tinyc_q_clamp(x, act_min - out_zp, act_max - out_zp) + out_zp);
}

/* tinyc_q_requantize_rnd with TFLite's rounding (arith.requantize's default). */
TINYC_Q_INLINE int8_t tinyc_q_requantize(int32_t acc, int32_t multiplier, int32_t shift, int32_t out_zp,
                                         int32_t act_min, int32_t act_max)
{
    return tinyc_q_requantize_rnd(acc, multiplier, shift, out_zp, act_min, act_max, TINYC_Q_ROUND_TFLITE);
}

/* x as an int32 (two's complement), without the implementation-defined conversion of a value above
 * INT32_MAX; compilers emit nothing for it. */
TINYC_Q_INLINE int32_t tinyc_q_u2s(uint32_t x)
{
    return x <= 0x7FFFFFFFu ? (int32_t)x : (int32_t)(x - 0x80000000u) - INT32_MAX - 1;
}

/* tinyc_q_mbqm(acc, multiplier, -rshift) for multiplier in [0, 2^31), 0 <= rshift <= 31, in
 * 32-bit words (the tiled conv / fully connected kernels apply a positive shift beforehand).
 * Equal bit for bit: srdhm(a, m) (m != INT32_MIN) is h = floor((a*m + 2^30) / 2^31) (SMLAL and
 * two shifts), then rounding_divide_by_pot(h, r) rounds half away from zero: for r >= 1 that is
 * floor((h' + 2^(r-1)) / 2^r) with h' = h - (h < 0) (ties of a negative h go down), computed as
 * (floor(h' / 2^(r-1)) + 1) / 2 floored so that nothing overflows (|h| <= 2^31 - 2). About 11
 * instructions on a Cortex-M4 (arm-none-eabi-gcc 12 -O3) instead of 15. */
TINYC_Q_INLINE int32_t tinyc_q_mbqm_r(int32_t acc, int32_t multiplier, int32_t rshift)
{
    const int32_t h = (int32_t)tinyc_q_asr64((int64_t)acc * multiplier + ((int64_t)1 << 30), 31);
    const int r = (int)rshift;
    if (r == 0) {
        return h;
    }
    return tinyc_q_asr(tinyc_q_asr(h - (int32_t)((uint32_t)h >> 31), r - 1) + 1, 1);
}

/* tinyc_q_mbqm_even(acc, multiplier, -rshift), same domain (0 <= rshift <= 31), with no 64-bit
 * variable shift (a 32-bit core pays ~20 instructions for each). p = acc * M is below 2^62 in
 * magnitude; with S = 31 + r, half to even of p / 2^S is floor((p' + 2^(S-1)) / 2^S),
 * p' = p - 1 + b, b the parity of floor(p / 2^S) (p' rounds a tie down exactly when the quotient
 * is even). The words of 2p (SMULL, ADDS/ADC) are u0 = floor(p / 2^31) and lo2 = 2 (p mod 2^31);
 * b is bit r of u0, and u = floor(p' / 2^31) is u0 - 1 when p mod 2^31 == 0 and b == 0, else u0.
 * For r >= 1 the result is floor((u + 2^(r-1)) / 2^r) = (floor(u / 2^(r-1)) + 1) / 2 floored
 * (u <= 2^31 - 2: nothing overflows); for r == 0 it is u0 + ((p mod 2^31) + 2^30 - 1 + b) / 2^31.
 * About 12 instructions on a Cortex-M4 (arm-none-eabi-gcc 12 -O3) instead of 21. */
TINYC_Q_INLINE int32_t tinyc_q_mbqm_even_r(int32_t acc, int32_t multiplier, int32_t rshift)
{
#if defined(__ARM_FEATURE_MVE)
    /* On the M55 (Helium) the plain 64-bit form measured fewer instructions over a model than an
     * earlier 32-bit form (MLPerf ResNet-8: 8.51 M vs 9.33 M): it has 64-bit shifts (ASRL). */
    return (int32_t)tinyc_q_shift_round_even((int64_t)acc * multiplier, 31 + (int)rshift);
#else
    const uint64_t p2 = (uint64_t)((int64_t)acc * multiplier) << 1;
    const uint32_t lo2 = (uint32_t)p2;
    const int r = (int)rshift;
    int32_t u = tinyc_q_u2s((uint32_t)(p2 >> 32));
    if (r == 0) {
        return u + (int32_t)(((lo2 >> 1) + 0x3FFFFFFFu + ((uint32_t)u & 1u)) >> 31);
    }
    if ((lo2 | (((uint32_t)u >> r) << 31)) == 0u) {
        u -= 1;
    }
    return tinyc_q_asr(tinyc_q_asr(u, r - 1) + 1, 1);
#endif
}

/* Where tables live: plain memory in C; OpenCL C defines it as __global (its weights buffer). */
#ifndef TINYC_Q_TABLE
#define TINYC_Q_TABLE
#endif

/* 256-entry table of a unary op: entry i is the output for input i - 128. */
TINYC_Q_INLINE int8_t tinyc_q_lut(const TINYC_Q_TABLE int8_t *lut, int8_t x)
{
    return lut[(int32_t)x + 128];
}

/* int8 Add, TFLite reference_integer_ops::AddElementwise / CMSIS-NN arm_elementwise_add_s8. */
typedef struct {
    int32_t in1_offset;     /* -zp1 */
    int32_t in1_multiplier;
    int32_t in1_shift;
    int32_t in2_offset;     /* -zp2 */
    int32_t in2_multiplier;
    int32_t in2_shift;
    int32_t out_multiplier;
    int32_t out_shift;
    int32_t out_zp;
    int32_t act_min;
    int32_t act_max;
    int32_t left_shift;     /* TINYC_Q_ADD_LEFT_SHIFT */
    int32_t rounding;       /* of the output stage: TINYC_Q_ROUND_* */
} tinyc_q_add_params_t;

TINYC_Q_INLINE int8_t tinyc_q_add(int8_t a, int8_t b, const tinyc_q_add_params_t *p)
{
    /* |q + offset| <= 255, so (q + offset) * 2^20 < 2^28 and each rescaled term < 2^27. */
    const int32_t a1 = ((int32_t)a + p->in1_offset) * ((int32_t)1 << p->left_shift);
    const int32_t a2 = ((int32_t)b + p->in2_offset) * ((int32_t)1 << p->left_shift);
    const int32_t sum = tinyc_q_mbqm(a1, p->in1_multiplier, p->in1_shift)
                      + tinyc_q_mbqm(a2, p->in2_multiplier, p->in2_shift);
    return tinyc_q_requantize_rnd(sum, p->out_multiplier, p->out_shift, p->out_zp, p->act_min, p->act_max,
                                  p->rounding);
}

/* int8 Mul, TFLite reference_integer_ops::Mul: acc = (a - a_zp) * (b - b_zp), exact in int32
 * (|acc| <= 255 * 255), then requantize with M = s_a * s_b / s_out (arith.mul_int8). */
TINYC_Q_INLINE int8_t tinyc_q_mul(int8_t a, int8_t b, int32_t a_zp, int32_t b_zp, int32_t multiplier,
                                  int32_t shift, int32_t out_zp, int32_t act_min, int32_t act_max, int32_t rounding)
{
    const int32_t acc = ((int32_t)a - a_zp) * ((int32_t)b - b_zp);
    return tinyc_q_requantize_rnd(acc, multiplier, shift, out_zp, act_min, act_max, rounding);
}

/* Another grid (arith.rescale), q an int8 or uint8 value, 0 <= left_shift <= 20:
 * clamp(mbqm((q - in_zp) * 2^left_shift, multiplier, shift) + out_zp, qmin, qmax).
 * |q - in_zp| <= 255, so the pre-shifted value is < 2^28; clamping before the zero point is added
 * means a saturated mbqm cannot overflow. */
TINYC_Q_INLINE int32_t tinyc_q_rescale(int32_t q, int32_t in_zp, int32_t multiplier, int32_t shift,
                                       int32_t left_shift, int32_t out_zp, int32_t qmin, int32_t qmax)
{
    const int32_t x = tinyc_q_mbqm((q - in_zp) * ((int32_t)1 << left_shift), multiplier, shift);
    return tinyc_q_clamp(x, qmin - out_zp, qmax - out_zp) + out_zp;
}

/* The same scale, another zero point (arith.rescale without multiplier): exact. */
TINYC_Q_INLINE int32_t tinyc_q_shift_zp(int32_t q, int32_t in_zp, int32_t out_zp, int32_t qmin, int32_t qmax)
{
    return tinyc_q_clamp(q - in_zp + out_zp, qmin, qmax);
}

/* gemmlowp's reciprocal, as TFLite Micro's int8 Softmax computes it (tinyc/numerics/gemmlowp.py). */
TINYC_Q_INLINE int32_t tinyc_q_clz32(uint32_t x)
{
    int32_t n = 0;
    if (x == 0u) {
        return 32;
    }
    while ((x & 0x80000000u) == 0u) {
        x <<= 1;
        ++n;
    }
    return n;
}

/* RoundingHalfSum: (a + b + sign(a + b)) / 2, truncating, in int64. */
TINYC_Q_INLINE int32_t tinyc_q_rounding_half_sum(int32_t a, int32_t b)
{
    const int64_t s = (int64_t)a + (int64_t)b;
    return (int32_t)((s + (s >= 0 ? 1 : -1)) / 2);
}

/* 1 / (1 + a) for a in [0, 1) (F0 raw in and out): three Newton-Raphson steps in F2.
 * Every intermediate stays inside int32 for a in [0, 2^31). */
TINYC_Q_INLINE int32_t tinyc_q_one_over_one_plus_x(int32_t a)
{
    const int32_t half_den = tinyc_q_rounding_half_sum(a, INT32_MAX);
    int32_t x = 1515870810 + tinyc_q_srdhm(half_den, -1010580540);
    int32_t i;
    for (i = 0; i < 3; ++i) {
        const int32_t one_minus = ((int32_t)1 << 29) - tinyc_q_srdhm(half_den, x);
        x = x + tinyc_q_shl_sat(tinyc_q_srdhm(x, one_minus), 2);
    }
    return tinyc_q_shl_sat(x, 1);
}

/* TFLite GetReciprocal for x > 0 with `digits` integer bits: 1/x as an F0 raw in [0.5, 1) and,
 * in *bits_over_unit, how many bits x's value lies above 1. */
TINYC_Q_INLINE int32_t tinyc_q_reciprocal(int32_t x, int32_t digits, int32_t *bits_over_unit)
{
    const int32_t headroom_plus_one = tinyc_q_clz32((uint32_t)x);
    *bits_over_unit = digits - headroom_plus_one;
    return tinyc_q_one_over_one_plus_x((int32_t)(((uint32_t)x << headroom_plus_one) - 0x80000000u));
}

#ifdef __cplusplus
}
#endif
#endif /* TINYC_Q_H */
