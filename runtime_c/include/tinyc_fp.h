/*
 * tinyc narrow element types: float16, bfloat16, the 8-bit floats (float8 e4m3fn, e4m3fnuz, e5m2,
 * e5m2fnuz), float4 e2m1 and the 4-/2-bit integers, converted to and from float32 and integers.
 *
 * Storage is the bit pattern numpy / ml_dtypes use (tinyc/numerics/dtypes.py), so arrays cross the
 * C boundary unchanged: float16 and bfloat16 in a uint16_t; each 8-bit float, float4, int4, uint4,
 * int2 and uint2 in its own uint8_t (one element per byte, the value in the low bits, the high bits
 * zero; a signed 4-/2-bit integer is its two's complement low nibble / low two bits, not sign-extended).
 *
 * Conversions equal ml_dtypes' (the ONNX reference's) bit for bit: round to nearest even, overflow to
 * infinity (float16, bfloat16, e5m2) or NaN (e4m3fn and the FNUZ types, which have no infinity),
 * saturate to the largest finite value when asked (ONNX Cast's `saturate`) and always for float4,
 * which has neither infinity nor NaN. The FNUZ types have no negative zero and one NaN (0x80).
 * Float-to-narrow-integer conversion truncates and gives 0 outside the type's range (ml_dtypes'
 * rule); integer-to-narrow-integer conversion keeps the low bits. Portable C99 (also OpenCL C):
 * bits through a union, no libm.
 */
#ifndef TINYC_FP_H
#define TINYC_FP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef TINYC_FP_INLINE
#define TINYC_FP_INLINE static inline
#endif

/* Kinds of a small float format: which bit patterns are special. */
#define TINYC_MF_IEEE 0 /* all-ones exponent: infinity (mantissa 0) or NaN (e5m2, float16, bfloat16) */
#define TINYC_MF_FN 1   /* no infinity; all ones (exponent and mantissa) is NaN (e4m3fn) */
#define TINYC_MF_FNUZ 2 /* no infinity, no -0: the pattern of -0 (sign bit alone) is the one NaN */
#define TINYC_MF_NONE 3 /* no infinity, no NaN (float4 e2m1): overflow always saturates */

typedef union {
    float f;
    uint32_t u;
} tinyc_fp_bits32;

TINYC_FP_INLINE uint32_t tinyc_f32_bits(float f)
{
    tinyc_fp_bits32 b;
    b.f = f;
    return b.u;
}

TINYC_FP_INLINE float tinyc_bits_f32(uint32_t u)
{
    tinyc_fp_bits32 b;
    b.u = u;
    return b.f;
}

/* A small float (E exponent bits, M mantissa bits, exponent bias, kind) to float32: exact. */
TINYC_FP_INLINE float tinyc_mf_to_f32(uint32_t bits, int E, int M, int bias, int kind)
{
    const uint32_t sign = (bits >> (E + M)) & 1u;
    const uint32_t e = (bits >> M) & ((1u << E) - 1u);
    const uint32_t m = bits & ((1u << M) - 1u);
    const uint32_t s32 = sign << 31;
    if (kind == TINYC_MF_FNUZ && sign && e == 0 && m == 0)
        return tinyc_bits_f32(0x7fc00000u);
    if (kind == TINYC_MF_IEEE && e == (1u << E) - 1u)
        return tinyc_bits_f32(s32 | 0x7f800000u | (m << (23 - M)));
    if (kind == TINYC_MF_FN && e == (1u << E) - 1u && m == (1u << M) - 1u)
        return tinyc_bits_f32(s32 | 0x7fc00000u);
    if (e == 0) {
        /* subnormal: m * 2^(1 - bias - M), exact in float32 (the product of two exact values) */
        const float unit = tinyc_bits_f32((uint32_t)(127 + 1 - bias - M) << 23);
        const float v = (float)m * unit;
        return sign ? -v : v;
    }
    return tinyc_bits_f32(s32 | ((e + 127u - (uint32_t)bias) << 23) | (m << (23 - M)));
}

/* float32 to a small float's bits (see tinyc_mf_to_f32), rounding to nearest even. */
TINYC_FP_INLINE uint32_t tinyc_f32_to_mf(float f, int E, int M, int bias, int kind, int saturate)
{
    const uint32_t u = tinyc_f32_bits(f);
    const uint32_t sign = u >> 31;
    const uint32_t a = u & 0x7fffffffu;
    const uint32_t top = sign << (E + M);
    const uint32_t inf_code = ((1u << E) - 1u) << M;
    uint32_t max_code = inf_code - 1u; /* IEEE: the largest finite magnitude */
    uint32_t r;
    if (kind == TINYC_MF_FN)
        max_code = (1u << (E + M)) - 2u;
    else if (kind == TINYC_MF_FNUZ || kind == TINYC_MF_NONE)
        max_code = (1u << (E + M)) - 1u;
    if (a > 0x7f800000u) { /* NaN */
        if (kind == TINYC_MF_IEEE)
            return top | inf_code | (1u << (M - 1)) | ((a & 0x7fffffu) >> (23 - M));
        if (kind == TINYC_MF_FN)
            return top | max_code | 1u;
        if (kind == TINYC_MF_FNUZ)
            return 1u << (E + M);
        return (sign ^ 1u) << (E + M); /* float4: ml_dtypes' zero of the opposite sign */
    }
    if (a == 0x7f800000u) {
        r = max_code + 1u; /* overflow, handled below */
    } else {
        const int e32 = (int)(a >> 23);
        const uint32_t sig = e32 ? ((a & 0x7fffffu) | 0x800000u) : (a & 0x7fffffu);
        const int ue = e32 ? e32 - 127 : -126;
        const int te = ue + bias;
        int shift;
        uint32_t x;
        if (te >= 1) { /* normal: exponent and mantissa round together (a carry bumps the exponent) */
            x = ((uint32_t)te << 23) | (a & 0x7fffffu);
            shift = 23 - M;
        } else { /* subnormal in the target */
            x = sig;
            shift = 23 - M + 1 - te;
        }
        if (shift > 25) {
            r = 0u;
        } else {
            const uint32_t halfway = 1u << (shift - 1);
            const uint32_t rem = x & ((1u << shift) - 1u);
            r = x >> shift;
            if (rem > halfway || (rem == halfway && (r & 1u)))
                r += 1u;
        }
    }
    if (r > max_code) {
        if (saturate || kind == TINYC_MF_NONE)
            r = max_code;
        else if (kind == TINYC_MF_IEEE)
            r = inf_code;
        else if (kind == TINYC_MF_FN)
            r = max_code + 1u;
        else
            return 1u << (E + M); /* FNUZ NaN */
    }
    if (kind == TINYC_MF_FNUZ && r == 0u)
        return 0u;
    return top | r;
}

/* float8 e8m0 (a power of two, 2^(bits - 127); 0xff is NaN; no sign, no zero) to float32: exact. */
TINYC_FP_INLINE float tinyc_e8m0_to_f32(uint32_t bits)
{
    if (bits == 0xffu)
        return tinyc_bits_f32(0x7fc00000u);
    return tinyc_bits_f32(bits ? bits << 23 : 0x00400000u); /* 2^-127 is a float32 subnormal */
}

/* float32 to e8m0 as ONNX's reference (onnx.numpy_helper.to_float8e8m0): the float's exponent field,
 * the sign ignored, NaN/inf to NaN; round_mode 0 "nearest" (its guard/round/sticky rule), 1 "up" (any
 * fraction), 2 "down"; saturate keeps 0xfe from rounding up into NaN. */
TINYC_FP_INLINE uint8_t tinyc_f32_to_e8m0(float f, int round_mode, int saturate)
{
    const uint32_t u = tinyc_f32_bits(f);
    const uint32_t e = (u >> 23) & 0xffu;
    uint32_t inc = 0u;
    if (e == 0xffu)
        return 0xffu;
    if (round_mode == 0)
        inc = ((u >> 22) & 1u) && (((u >> 21) & 1u) || (u & 0x1fffffu) || e > 0u);
    else if (round_mode == 1)
        inc = (u & 0x7fffffu) != 0u;
    if (saturate && e == 0xfeu)
        inc = 0u;
    return (uint8_t)(e + inc);
}

/* float16 <-> float32 (numpy's rules, NaN payloads kept as numpy keeps them). */
TINYC_FP_INLINE float tinyc_f16_to_f32(uint16_t h) { return tinyc_mf_to_f32(h, 5, 10, 15, TINYC_MF_IEEE); }

TINYC_FP_INLINE uint16_t tinyc_f32_to_f16(float f)
{
    const uint32_t a = tinyc_f32_bits(f) & 0x7fffffffu;
    if (a > 0x7f800000u) { /* numpy: keep the top payload bits, stay a NaN */
        uint32_t h = 0x7c00u + ((a & 0x7fffffu) >> 13);
        if (h == 0x7c00u)
            h += 1u;
        return (uint16_t)((tinyc_f32_bits(f) >> 16 & 0x8000u) | h);
    }
    return (uint16_t)tinyc_f32_to_mf(f, 5, 10, 15, TINYC_MF_IEEE, 0);
}

/* bfloat16 <-> float32: bfloat16 is float32's top half (round to nearest even; NaN made quiet). */
TINYC_FP_INLINE float tinyc_bf16_to_f32(uint16_t b) { return tinyc_bits_f32((uint32_t)b << 16); }

TINYC_FP_INLINE uint16_t tinyc_f32_to_bf16(float f)
{
    const uint32_t u = tinyc_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* float (already truncated toward zero by the caller's range test) to a narrow integer: ml_dtypes
 * truncates, and gives 0 for NaN and for values whose truncation is outside [lo, hi]. */
TINYC_FP_INLINE uint8_t tinyc_f32_to_intn(float f, int lo, int hi, int bits)
{
    if (!(f > (float)(lo - 1) && f < (float)(hi + 1)))
        return 0u;
    return (uint8_t)((uint32_t)(int32_t)f & ((1u << bits) - 1u));
}

/* A narrow integer's value from its bits (sign-extended when signed). */
TINYC_FP_INLINE int32_t tinyc_intn_value(uint32_t bits, int nbits, int is_signed)
{
    const uint32_t v = bits & ((1u << nbits) - 1u);
    const uint32_t s = 1u << (nbits - 1);
    return is_signed ? (int32_t)(v ^ s) - (int32_t)s : (int32_t)v;
}

#if !defined(__OPENCL_VERSION__) || defined(cl_khr_fp64)
/* double to float32 rounding to odd: a later round-to-nearest-even to a format with at least two
 * fewer mantissa bits is then the correctly rounded double -> narrow conversion (no double rounding). */
TINYC_FP_INLINE float tinyc_f64_to_f32_odd(double d)
{
    const float f = (float)d;
    uint32_t u;
    if (d != d || (double)f == d)
        return f;
    u = tinyc_f32_bits(f);
    if (d > 0 ? (double)f > d : (double)f < d)
        u -= 1u; /* one step toward zero: the truncation */
    return tinyc_bits_f32(u | 1u);
}

TINYC_FP_INLINE uint8_t tinyc_f64_to_intn(double f, int lo, int hi, int bits)
{
    if (!(f > (double)(lo - 1) && f < (double)(hi + 1)))
        return 0u;
    return (uint8_t)((uint32_t)(int32_t)f & ((1u << bits) - 1u));
}
#endif

#ifdef __cplusplus
}
#endif
#endif /* TINYC_FP_H */
