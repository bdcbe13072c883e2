/*
 * tinyc SIMD micro-kernel helpers: the Cortex-M DSP extension (M4 / M7 / M33) and Helium (MVE,
 * Cortex-M55), used by the int8 convolution and matrix kernels for their "dsp" and "mve" forms.
 *
 * Every helper has two bodies with the same result bit for bit:
 *  - on a core that has the extension (__ARM_FEATURE_DSP / __ARM_FEATURE_MVE) the ACLE intrinsic
 *    from <arm_acle.h> / <arm_mve.h> (one instruction each: SXTB16, SMLAD, VLDRB, VMLADAV, ...);
 *  - everywhere else an exact portable C99 emulation of that instruction, so the very same kernel
 *    code runs (and is tested, with sanitizers) on the host.
 * Define TINYC_SIMD_EMULATE to force the emulation on an Arm core too.
 *
 * Packed values follow ACLE: an int8x4 / int16x2 is an int32_t whose byte / halfword i sits at
 * bits [8i, 8i+8) / [16i, 16i+16) (little endian, as loaded from memory on Cortex-M).
 *
 * The emulations have no undefined and no implementation-defined behaviour: bit manipulation in
 * uint32_t, sums in int64_t, wrapped to int32_t the way the instructions wrap (the kernels only
 * use them where the int32 sums provably cannot wrap, see tinyc/ops/qconv.py `_mac_forms`).
 * Unaligned reads go through memcpy (a single LDR on Cortex-M, which allows unaligned LDR).
 */
#ifndef TINYC_SIMD_H
#define TINYC_SIMD_H

#include <stdint.h>
#include <string.h>

#include "tinyc_q.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TINYC_SIMD_INLINE static inline

#if defined(__ARM_FEATURE_DSP) && !defined(TINYC_SIMD_EMULATE)
#define TINYC_HAVE_DSP 1
#include <arm_acle.h>
#else
#define TINYC_HAVE_DSP 0
#endif

#if defined(__ARM_FEATURE_MVE) && !defined(TINYC_SIMD_EMULATE)
#define TINYC_HAVE_MVE 1
#include <arm_mve.h>
#else
#define TINYC_HAVE_MVE 0
#endif

/* uint32_t -> int32_t modulo 2^32 without implementation-defined conversion (compiles to nothing). */
TINYC_SIMD_INLINE int32_t tinyc_simd_u2i(uint32_t v)
{
    return v < 0x80000000u ? (int32_t)v : (int32_t)(v - 0x80000000u) - INT32_MAX - 1;
}

/* int64_t -> int32_t modulo 2^32 (how the accumulating instructions wrap). */
TINYC_SIMD_INLINE int32_t tinyc_simd_wrap(int64_t v)
{
    return tinyc_simd_u2i((uint32_t)((uint64_t)v & 0xFFFFFFFFu));
}

/* ------------------------------------------------------------------------------------------- */
/* DSP extension: SXTB16, SXTB16 ROR #8, SMLAD                                                  */
/* ------------------------------------------------------------------------------------------- */

/* Four int8 values from memory (any alignment) as a packed int8x4. */
TINYC_SIMD_INLINE int32_t tinyc_read_s8x4(const int8_t *p)
{
#if TINYC_HAVE_DSP
    int32_t v;
    memcpy(&v, p, 4);
    return v;
#else
    const uint32_t v = (uint32_t)(uint8_t)p[0] | ((uint32_t)(uint8_t)p[1] << 8) |
                       ((uint32_t)(uint8_t)p[2] << 16) | ((uint32_t)(uint8_t)p[3] << 24);
    return tinyc_simd_u2i(v);
#endif
}

/* Four uint8 values x from memory as the packed int8x4 of x - 128 (flipping bit 7 of each byte). */
TINYC_SIMD_INLINE int32_t tinyc_read_u8x4_off(const uint8_t *p)
{
#if TINYC_HAVE_DSP
    uint32_t v;
    memcpy(&v, p, 4);
    return (int32_t)(v ^ 0x80808080u);
#else
    const uint32_t v = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
    return tinyc_simd_u2i(v ^ 0x80808080u);
#endif
}

#if !TINYC_HAVE_DSP
/* sign-extend the byte at bits [s, s+8) of v into a 16-bit field (as an unsigned bit pattern) */
TINYC_SIMD_INLINE uint32_t tinyc_simd_sx8to16(uint32_t v, unsigned s)
{
    const uint32_t b = (v >> s) & 0xFFu;
    return (b & 0x80u) ? (b | 0xFF00u) : b;
}

/* the signed value of the halfword at bits [s, s+16) of v */
TINYC_SIMD_INLINE int32_t tinyc_simd_h16(uint32_t v, unsigned s)
{
    const uint32_t h = (v >> s) & 0xFFFFu;
    return (h & 0x8000u) ? (int32_t)h - 65536 : (int32_t)h;
}
#endif

/* SXTB16: bytes 0 and 2 of x sign-extended into halfwords 0 and 1. */
TINYC_SIMD_INLINE int32_t tinyc_sxtb16(int32_t x)
{
#if TINYC_HAVE_DSP
    return __sxtb16(x);
#else
    const uint32_t v = (uint32_t)x;
    return tinyc_simd_u2i(tinyc_simd_sx8to16(v, 0) | (tinyc_simd_sx8to16(v, 16) << 16));
#endif
}

/* SXTB16 of x rotated right by 8: bytes 1 and 3 of x sign-extended into halfwords 0 and 1. */
TINYC_SIMD_INLINE int32_t tinyc_sxtb16_ror8(int32_t x)
{
#if TINYC_HAVE_DSP
#if defined(__GNUC__)
    /* one SXTB16 with its ROR #8 operand (compilers emit a separate rotate for __sxtb16(__ror(x, 8))) */
    int32_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x));
    return r;
#else
    return __sxtb16(__ror((uint32_t)x, 8));
#endif
#else
    const uint32_t v = (uint32_t)x;
    return tinyc_simd_u2i(tinyc_simd_sx8to16(v, 8) | (tinyc_simd_sx8to16(v, 24) << 16));
#endif
}

/* SMLAD: acc + x.h0 * y.h0 + x.h1 * y.h1 (signed 16-bit halves), modulo 2^32. */
TINYC_SIMD_INLINE int32_t tinyc_smlad(int32_t x, int32_t y, int32_t acc)
{
#if TINYC_HAVE_DSP
    return __smlad(x, y, acc);
#else
    const uint32_t a = (uint32_t)x, b = (uint32_t)y;
    return tinyc_simd_wrap((int64_t)acc + (int64_t)tinyc_simd_h16(a, 0) * tinyc_simd_h16(b, 0) +
                           (int64_t)tinyc_simd_h16(a, 16) * tinyc_simd_h16(b, 16));
#endif
}

/* SMLABB / SMLATT: acc + the bottom (top) signed halfwords of x and y, modulo 2^32. Depthwise
 * lanes are channels, so each product needs its own accumulator: SMLAD would sum two channels. */
TINYC_SIMD_INLINE int32_t tinyc_smlabb(int32_t x, int32_t y, int32_t acc)
{
#if TINYC_HAVE_DSP
    return __smlabb(x, y, acc);
#else
    return tinyc_simd_wrap((int64_t)acc + (int64_t)tinyc_simd_h16((uint32_t)x, 0) * tinyc_simd_h16((uint32_t)y, 0));
#endif
}

TINYC_SIMD_INLINE int32_t tinyc_smlatt(int32_t x, int32_t y, int32_t acc)
{
#if TINYC_HAVE_DSP
    return __smlatt(x, y, acc);
#else
    return tinyc_simd_wrap((int64_t)acc + (int64_t)tinyc_simd_h16((uint32_t)x, 16) * tinyc_simd_h16((uint32_t)y, 16));
#endif
}

/* PKHBT x, y, LSL #16: halfword 0 of x, halfword 0 of y on top (plain C; compilers emit PKHBT). */
TINYC_SIMD_INLINE int32_t tinyc_pkhbt16(int32_t x, int32_t y)
{
    return tinyc_simd_u2i(((uint32_t)x & 0xFFFFu) | ((uint32_t)y << 16));
}

/* PKHTB x, y, ASR #16: halfword 1 of y below, halfword 1 of x on top. */
TINYC_SIMD_INLINE int32_t tinyc_pkhtb16(int32_t x, int32_t y)
{
    return tinyc_simd_u2i(((uint32_t)x & 0xFFFF0000u) | ((uint32_t)y >> 16));
}

/* Two int16 values from memory (any alignment) as a packed int16x2. */
TINYC_SIMD_INLINE int32_t tinyc_read_s16x2(const int16_t *p)
{
#if TINYC_HAVE_DSP
    int32_t v;
    memcpy(&v, p, 4);
    return v;
#else
    return tinyc_simd_u2i((uint32_t)(uint16_t)p[0] | ((uint32_t)(uint16_t)p[1] << 16));
#endif
}

/* ------------------------------------------------------------------------------------------- */
/* Helium (MVE): 16 x int8 dot products (VMLADAVA), 4 x int32 lanes (VLDRB.S32, VLDRW)         */
/* ------------------------------------------------------------------------------------------- */

#if TINYC_HAVE_MVE
typedef int8x16_t tinyc_s8x16;
typedef int32x4_t tinyc_s32x4;
typedef mve_pred16_t tinyc_pred16;
#else
typedef struct { int8_t v[16]; } tinyc_s8x16;
typedef struct { int32_t v[4]; } tinyc_s32x4;
typedef uint16_t tinyc_pred16; /* one bit per byte lane, as MVE's VPR.P0 */
#endif

/* VCTP.8 n: the first min(n, 16) byte lanes active. */
TINYC_SIMD_INLINE tinyc_pred16 tinyc_vctp8(uint32_t n)
{
#if TINYC_HAVE_MVE
    return vctp8q(n);
#else
    return (tinyc_pred16)(n >= 16u ? 0xFFFFu : ((1u << n) - 1u));
#endif
}

/* VCTP.32 n: the first min(n, 4) word lanes active (4 predicate bits each). */
TINYC_SIMD_INLINE tinyc_pred16 tinyc_vctp32(uint32_t n)
{
#if TINYC_HAVE_MVE
    return vctp32q(n);
#else
    return (tinyc_pred16)(n >= 4u ? 0xFFFFu : ((1u << (4u * n)) - 1u));
#endif
}

/* VLDRB.8: 16 int8. */
TINYC_SIMD_INLINE tinyc_s8x16 tinyc_vld_s8(const int8_t *p)
{
#if TINYC_HAVE_MVE
    return vld1q_s8(p);
#else
    tinyc_s8x16 r;
    int i;
    for (i = 0; i < 16; ++i) {
        r.v[i] = p[i];
    }
    return r;
#endif
}

/* VLDRB.8 with zeroing predication: inactive lanes are 0 and their bytes are not read. */
TINYC_SIMD_INLINE tinyc_s8x16 tinyc_vld_s8_z(const int8_t *p, tinyc_pred16 m)
{
#if TINYC_HAVE_MVE
    return vldrbq_z_s8(p, m);
#else
    tinyc_s8x16 r;
    int i;
    for (i = 0; i < 16; ++i) {
        r.v[i] = ((m >> i) & 1u) ? p[i] : 0;
    }
    return r;
#endif
}

/* 16 uint8 x as int8 x - 128 (VLDRB.8 then VEOR with 0x80 per lane). */
TINYC_SIMD_INLINE tinyc_s8x16 tinyc_vld_u8_off(const uint8_t *p)
{
#if TINYC_HAVE_MVE
    return vreinterpretq_s8_u8(veorq_u8(vld1q_u8(p), vdupq_n_u8(0x80)));
#else
    tinyc_s8x16 r;
    int i;
    for (i = 0; i < 16; ++i) {
        r.v[i] = (int8_t)((int32_t)p[i] - 128);
    }
    return r;
#endif
}

/* The same with zeroing predication: inactive lanes are 0 and their bytes are not read. */
TINYC_SIMD_INLINE tinyc_s8x16 tinyc_vld_u8_off_z(const uint8_t *p, tinyc_pred16 m)
{
#if TINYC_HAVE_MVE
    return vreinterpretq_s8_u8(veorq_m_u8(vdupq_n_u8(0), vldrbq_z_u8(p, m), vdupq_n_u8(0x80), m));
#else
    tinyc_s8x16 r;
    int i;
    for (i = 0; i < 16; ++i) {
        r.v[i] = ((m >> i) & 1u) ? (int8_t)((int32_t)p[i] - 128) : 0;
    }
    return r;
#endif
}

/* VMLADAVA.S8: acc + sum of the 16 lane products, modulo 2^32. */
TINYC_SIMD_INLINE int32_t tinyc_vmladava_s8(int32_t acc, tinyc_s8x16 a, tinyc_s8x16 b)
{
#if TINYC_HAVE_MVE
    return vmladavaq_s8(acc, a, b);
#else
    int64_t s = acc;
    int i;
    for (i = 0; i < 16; ++i) {
        s += (int64_t)a.v[i] * b.v[i];
    }
    return tinyc_simd_wrap(s);
#endif
}

/* VLDRB.S32: 4 int8 sign-extended into int32 lanes; _z: inactive lanes 0, not read. */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vld_s8_s32(const int8_t *p)
{
#if TINYC_HAVE_MVE
    return vldrbq_s32(p);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = p[i];
    }
    return r;
#endif
}

TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vld_s8_s32_z(const int8_t *p, tinyc_pred16 m)
{
#if TINYC_HAVE_MVE
    return vldrbq_z_s32(p, m);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = ((m >> (4 * i)) & 1u) ? p[i] : 0;
    }
    return r;
#endif
}

/* VLDRW.32 of 4 int32. */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vld_s32(const int32_t *p)
{
#if TINYC_HAVE_MVE
    return vld1q_s32(p);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = p[i];
    }
    return r;
#endif
}

/* VSTRW.32 of 4 int32 lanes. */
TINYC_SIMD_INLINE void tinyc_vst_s32(int32_t *p, tinyc_s32x4 v)
{
#if TINYC_HAVE_MVE
    vst1q_s32(p, v);
#else
    int i;
    for (i = 0; i < 4; ++i) {
        p[i] = v.v[i];
    }
#endif
}

/* ------------------------------------------------------------------------------------------- */
/* Helium (MVE): requantization of 4 int32 lanes (VQDMULH / VQRDMULH, VSHL / VRSHL) and the      */
/* narrowing int8 stores (VSTRB.32, scatter). Lane for lane equal to the scalar tinyc_q.h forms. */
/* ------------------------------------------------------------------------------------------- */

#if TINYC_HAVE_MVE
typedef uint32x4_t tinyc_u32x4;
#else
typedef struct { uint32_t v[4]; } tinyc_u32x4;
#endif

/* VDUP.32: x in all 4 lanes. */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vdup_s32(int32_t x)
{
#if TINYC_HAVE_MVE
    return vdupq_n_s32(x);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = x;
    }
    return r;
#endif
}

/* The vector (a, b, c, d): four scalar accumulators into one register, as the two dual-lane VMOVs
 * (q[2], q[0] <- a, c; q[3], q[1] <- b, d); GCC 12 builds a vector literal through the stack
 * (4 stores + a VLDRW) and vsetq_lane as 4 VMOVs. */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vset4_s32(int32_t a, int32_t b, int32_t c, int32_t d)
{
#if TINYC_HAVE_MVE && defined(__GNUC__) && !defined(__clang__)
    int32x4_t r;
    __asm__("vmov %q0[2], %q0[0], %1, %3\n\tvmov %q0[3], %q0[1], %2, %4" : "=&w"(r) : "r"(a), "r"(b), "r"(c), "r"(d));
    return r;
#elif TINYC_HAVE_MVE
    const int32x4_t r = {a, b, c, d};
    return r;
#else
    tinyc_s32x4 r;
    r.v[0] = a;
    r.v[1] = b;
    r.v[2] = c;
    r.v[3] = d;
    return r;
#endif
}

/* The unsigned vector (a, b, c, d): scatter offsets. */
TINYC_SIMD_INLINE tinyc_u32x4 tinyc_vset4_u32(uint32_t a, uint32_t b, uint32_t c, uint32_t d)
{
#if TINYC_HAVE_MVE
    const uint32x4_t r = {a, b, c, d};
    return r;
#else
    tinyc_u32x4 r;
    r.v[0] = a;
    r.v[1] = b;
    r.v[2] = c;
    r.v[3] = d;
    return r;
#endif
}

/* VADD.I32 per lane, modulo 2^32. */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vadd_s32(tinyc_s32x4 a, tinyc_s32x4 b)
{
#if TINYC_HAVE_MVE
    return vaddq_s32(a, b);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = tinyc_simd_wrap((int64_t)a.v[i] + b.v[i]);
    }
    return r;
#endif
}

/* tinyc_q_mbqm_r per lane (TFLite's MultiplyByQuantizedMultiplier, multiplier in [0, 2^31),
 * right shift r = -nrsh in [0, 31]): VQRDMULH is srdhm exactly (no saturation: mul >= 0), then
 * rounding_divide_by_pot, which rounds half away from zero, as VRSHL (half up) after subtracting
 * 1 from negative lanes that shift (the sign of h & nrsh; VQADD keeps INT32_MIN, same result). */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vmbqm_r(tinyc_s32x4 acc, tinyc_s32x4 mul, tinyc_s32x4 nrsh)
{
#if TINYC_HAVE_MVE
    const int32x4_t h = vqrdmulhq_s32(acc, mul);
    const int32x4_t fix = vshrq_n_s32(vandq_s32(h, nrsh), 31);
    return vrshlq_s32(vqaddq_s32(h, fix), nrsh);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = tinyc_q_mbqm_r(acc.v[i], mul.v[i], -nrsh.v[i]);
    }
    return r;
#endif
}

/* tinyc_q_mbqm_even_r per lane (one rounding of acc * mul / 2^(31 + r), half to even), for
 * multipliers in [0, 2^31) and 1 <= r = -nrsh <= 30; mask = 2^r - 1, hm1 = 2^(r-1) - 1 per lane
 * (compile-time tables). t = floor(p / 2^31) is VQDMULH, p's low word VMUL; q = t >> r; the
 * result is q + ((t & mask) + hm1 + ((q & 1) | (rem != 0))) >> r with rem = p mod 2^31 (the
 * derivation is tinyc_q_mbqm_even_r's in tinyc_q.h: the same sum, without a 64-bit shift). */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vmbqm_even_r(tinyc_s32x4 acc, tinyc_s32x4 mul, tinyc_s32x4 nrsh,
                                                  tinyc_s32x4 mask, tinyc_s32x4 hm1)
{
#if TINYC_HAVE_MVE
    const int32x4_t t = vqdmulhq_s32(acc, mul);
    const uint32x4_t lo = vreinterpretq_u32_s32(vmulq_s32(acc, mul));
    const int32x4_t q = vshlq_s32(t, nrsh);
    const int32x4_t nz = vreinterpretq_s32_u32(vminq_u32(vshlq_n_u32(lo, 1), vdupq_n_u32(1)));
    const int32x4_t bump = vorrq_s32(vandq_s32(q, vdupq_n_s32(1)), nz);
    const int32x4_t low = vaddq_s32(vaddq_s32(vandq_s32(t, mask), hm1), bump);
    return vaddq_s32(q, vshlq_s32(low, nrsh));
#else
    tinyc_s32x4 r;
    int i;
    (void)mask;
    (void)hm1;
    for (i = 0; i < 4; ++i) {
        r.v[i] = tinyc_q_mbqm_even_r(acc.v[i], mul.v[i], -nrsh.v[i]);
    }
    return r;
#endif
}

/* clamp(v, lo, hi) + zp per lane (VMAX, VMIN, VADD): the output stage after the requantization. */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vclamp_add(tinyc_s32x4 v, int32_t lo, int32_t hi, int32_t zp)
{
#if TINYC_HAVE_MVE
    return vaddq_n_s32(vminq_s32(vmaxq_s32(v, vdupq_n_s32(lo)), vdupq_n_s32(hi)), zp);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = (v.v[i] < lo ? lo : (v.v[i] > hi ? hi : v.v[i])) + zp;
    }
    return r;
#endif
}

/* VSTRB.32: the low byte of each lane to p[0..3] (values already in the int8 / uint8 range);
 * _p: only the lanes active in m (VCTP.32). */
TINYC_SIMD_INLINE void tinyc_vst_s32_s8(int8_t *p, tinyc_s32x4 v)
{
#if TINYC_HAVE_MVE
    vstrbq_s32(p, v);
#else
    int i;
    for (i = 0; i < 4; ++i) {
        p[i] = (int8_t)v.v[i];
    }
#endif
}

TINYC_SIMD_INLINE void tinyc_vst_s32_s8_p(int8_t *p, tinyc_s32x4 v, tinyc_pred16 m)
{
#if TINYC_HAVE_MVE
    vstrbq_p_s32(p, v, m);
#else
    int i;
    for (i = 0; i < 4; ++i) {
        if ((m >> (4 * i)) & 1u) {
            p[i] = (int8_t)v.v[i];
        }
    }
#endif
}

TINYC_SIMD_INLINE void tinyc_vst_s32_u8(uint8_t *p, tinyc_s32x4 v)
{
#if TINYC_HAVE_MVE
    vstrbq_u32(p, vreinterpretq_u32_s32(v));
#else
    int i;
    for (i = 0; i < 4; ++i) {
        p[i] = (uint8_t)v.v[i];
    }
#endif
}

TINYC_SIMD_INLINE void tinyc_vst_s32_u8_p(uint8_t *p, tinyc_s32x4 v, tinyc_pred16 m)
{
#if TINYC_HAVE_MVE
    vstrbq_p_u32(p, vreinterpretq_u32_s32(v), m);
#else
    int i;
    for (i = 0; i < 4; ++i) {
        if ((m >> (4 * i)) & 1u) {
            p[i] = (uint8_t)v.v[i];
        }
    }
#endif
}

/* VSTRB.32 scatter: the low byte of lane i to base[off[i]] (4 pixels of one channel: off = j * OC);
 * _p: only the active lanes. */
TINYC_SIMD_INLINE void tinyc_vscatter_s32_s8(int8_t *base, tinyc_u32x4 off, tinyc_s32x4 v)
{
#if TINYC_HAVE_MVE
    vstrbq_scatter_offset_s32(base, off, v);
#else
    int i;
    for (i = 0; i < 4; ++i) {
        base[off.v[i]] = (int8_t)v.v[i];
    }
#endif
}

TINYC_SIMD_INLINE void tinyc_vscatter_s32_s8_p(int8_t *base, tinyc_u32x4 off, tinyc_s32x4 v, tinyc_pred16 m)
{
#if TINYC_HAVE_MVE
    vstrbq_scatter_offset_p_s32(base, off, v, m);
#else
    int i;
    for (i = 0; i < 4; ++i) {
        if ((m >> (4 * i)) & 1u) {
            base[off.v[i]] = (int8_t)v.v[i];
        }
    }
#endif
}

TINYC_SIMD_INLINE void tinyc_vscatter_s32_u8(uint8_t *base, tinyc_u32x4 off, tinyc_s32x4 v)
{
#if TINYC_HAVE_MVE
    vstrbq_scatter_offset_u32(base, off, vreinterpretq_u32_s32(v));
#else
    int i;
    for (i = 0; i < 4; ++i) {
        base[off.v[i]] = (uint8_t)v.v[i];
    }
#endif
}

TINYC_SIMD_INLINE void tinyc_vscatter_s32_u8_p(uint8_t *base, tinyc_u32x4 off, tinyc_s32x4 v, tinyc_pred16 m)
{
#if TINYC_HAVE_MVE
    vstrbq_scatter_offset_p_u32(base, off, vreinterpretq_u32_s32(v), m);
#else
    int i;
    for (i = 0; i < 4; ++i) {
        if ((m >> (4 * i)) & 1u) {
            base[off.v[i]] = (uint8_t)v.v[i];
        }
    }
#endif
}

/* ------------------------------------------------------------------------------------------- */
/* DSP dense convolution: helpers of the unrolled SMLAD micro-kernel (simd_dot.j2)                */
/* ------------------------------------------------------------------------------------------- */

/* Makes the optimizer forget what pointer p holds (no instruction is emitted), so that the loads
 * of an unrolled micro-kernel stay inside their channel loop: GCC otherwise hoists a pixel's
 * loop-invariant input words out of it and spills them to the stack (more instructions). */
#if defined(__GNUC__)
#define TINYC_SIMD_OPAQUE(p) __asm__("" : "+r"(p))
#else
#define TINYC_SIMD_OPAQUE(p) ((void)0)
#endif

/* n bytes from src to dst (the buffers do not overlap), a 32-bit word at a time (unaligned word
 * accesses are fine on M3 / M4 / M7 / M55): the im2col gather of the dense kernels. */
TINYC_SIMD_INLINE void tinyc_simd_copy8(void *dst, const void *src, int32_t n)
{
    uint8_t *d = (uint8_t *)dst;
    const uint8_t *s = (const uint8_t *)src;
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint32_t v;
        memcpy(&v, s + i, 4);
        memcpy(d + i, &v, 4);
    }
    for (; i < n; ++i) {
        d[i] = s[i];
    }
}

/* n bytes of value v at dst, a word at a time (the padding taps of the im2col gather). */
TINYC_SIMD_INLINE void tinyc_simd_fill8(void *dst, uint8_t v, int32_t n)
{
    uint8_t *d = (uint8_t *)dst;
    const uint32_t w = 0x01010101u * v;
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        memcpy(d + i, &w, 4);
    }
    for (; i < n; ++i) {
        d[i] = v;
    }
}

/* ------------------------------------------------------------------------------------------- */
/* MVE dense convolution (qconv/mve_dense.j2): im2col copies, the first      VMLADAV of a sum,    */
/* the requantization with one channel's scalar multiplier / shift for 4 pixels, the int8 clamp. */
/* ------------------------------------------------------------------------------------------- */

/* VSTRB.8 of 16 int8; _p: only the byte lanes active in m. */
TINYC_SIMD_INLINE void tinyc_vst_s8(int8_t *p, tinyc_s8x16 v)
{
#if TINYC_HAVE_MVE
    vst1q_s8(p, v);
#else
    int i;
    for (i = 0; i < 16; ++i) {
        p[i] = v.v[i];
    }
#endif
}

TINYC_SIMD_INLINE void tinyc_vst_s8_p(int8_t *p, tinyc_s8x16 v, tinyc_pred16 m)
{
#if TINYC_HAVE_MVE
    vstrbq_p_s8(p, v, m);
#else
    int i;
    for (i = 0; i < 16; ++i) {
        if ((m >> i) & 1u) {
            p[i] = v.v[i];
        }
    }
#endif
}

/* VMLADAV.S8: the sum of the 16 lane products (no accumulator to initialise). */
TINYC_SIMD_INLINE int32_t tinyc_vmladav_s8(tinyc_s8x16 a, tinyc_s8x16 b)
{
#if TINYC_HAVE_MVE
    return vmladavq_s8(a, b);
#else
    int32_t s = 0;
    int i;
    for (i = 0; i < 16; ++i) {
        s += (int32_t)a.v[i] * b.v[i];
    }
    return s;
#endif
}

/* VADD.I32 Qd, Qn, Rm: x added to every lane, modulo 2^32. */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vadd_n_s32(tinyc_s32x4 a, int32_t x)
{
#if TINYC_HAVE_MVE
    return vaddq_n_s32(a, x);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = tinyc_simd_wrap((int64_t)a.v[i] + x);
    }
    return r;
#endif
}

/* tinyc_vmbqm_r with one multiplier and right shift for all lanes, r = -nrsh in [1, 31] (so every
 * lane shifts: the fix for negative lanes is h >> 31 alone): VQRDMULH Rm, VSHR, VQADD, VRSHL Rm. */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vmbqm_r_n(tinyc_s32x4 acc, int32_t mul, int32_t nrsh)
{
#if TINYC_HAVE_MVE
    const int32x4_t h = vqrdmulhq_n_s32(acc, mul);
    return vrshlq_n_s32(vqaddq_s32(h, vshrq_n_s32(h, 31)), nrsh);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = tinyc_q_mbqm_r(acc.v[i], mul, -nrsh);
    }
    return r;
#endif
}

/* tinyc_q_mbqm_even_r per lane with one multiplier and shift for all lanes, 1 <= r = -nrsh <= 30.
 * With p = acc * mul, t = floor(p / 2^31) (VQDMULH) and rem = p mod 2^31 (p's low word VMUL, shifted
 * left by 1: zero iff rem == 0), half to even of p / 2^(31+r) is floor((t + 2^(r-1) - c) / 2^r),
 * c = 1 when rem == 0 and bit r of t is 0 (tinyc_q_mbqm_even_r's derivation): VRSHL of t - c.
 * (t - c cannot wrap: |p| < 2^62 keeps t > INT32_MIN.) 9 vector instructions, no tables. */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vmbqm_even_r_s(tinyc_s32x4 acc, int32_t mul, int32_t nrsh)
{
#if TINYC_HAVE_MVE
    const int32x4_t one = vdupq_n_s32(1);
    const int32x4_t t = vqdmulhq_n_s32(acc, mul);
    const uint32x4_t lo2 = vshlq_n_u32(vreinterpretq_u32_s32(vmulq_n_s32(acc, mul)), 1);
    const int32x4_t even = vbicq_s32(one, vshlq_r_s32(t, nrsh));                  /* 1 - bit r of t */
    const int32x4_t c = vbicq_s32(even, vreinterpretq_s32_u32(vminq_u32(lo2, vdupq_n_u32(1))));
    return vrshlq_n_s32(vsubq_s32(t, c), nrsh);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = tinyc_q_mbqm_even_r(acc.v[i], mul, -nrsh);
    }
    return r;
#endif
}

/* tinyc_vmbqm_even_r_s with a multiplier and shift per lane (1 <= r <= 31 in every lane): the MVE
 * fully connected kernel's 4 output columns (qmatmul/tiled.c.j2). */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vmbqm_even_r_v(tinyc_s32x4 acc, tinyc_s32x4 mul, tinyc_s32x4 nrsh)
{
#if TINYC_HAVE_MVE
    const int32x4_t one = vdupq_n_s32(1);
    const int32x4_t t = vqdmulhq_s32(acc, mul);
    const uint32x4_t lo2 = vshlq_n_u32(vreinterpretq_u32_s32(vmulq_s32(acc, mul)), 1);
    const int32x4_t even = vbicq_s32(one, vshlq_s32(t, nrsh));
    const int32x4_t c = vbicq_s32(even, vreinterpretq_s32_u32(vminq_u32(lo2, vdupq_n_u32(1))));
    return vrshlq_s32(vsubq_s32(t, c), nrsh);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = tinyc_q_mbqm_even_r(acc.v[i], mul.v[i], -nrsh.v[i]);
    }
    return r;
#endif
}

/* No loads move across it (an empty asm with a memory clobber; no instruction): between the
 * blocks of an unrolled dot product it keeps GCC from loading every input vector of a channel
 * first and spilling most of them to the stack (MVE has 8 Q registers). */
#if defined(__GNUC__)
#define TINYC_SIMD_LOAD_FENCE() __asm__ __volatile__("" ::: "memory")
#else
#define TINYC_SIMD_LOAD_FENCE() ((void)0)
#endif

/* clamp(v + zp, -128, 127) per lane (VQADD Rm, VQSHL #24, VSHR #24: no clamp constants): the
 * int8 output stage when the activation clamp is the whole int8 range. */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vsat_add_s8(tinyc_s32x4 v, int32_t zp)
{
#if TINYC_HAVE_MVE
    return vshrq_n_s32(vqshlq_n_s32(vqaddq_n_s32(v, zp), 24), 24);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        const int64_t s = (int64_t)v.v[i] + zp;
        r.v[i] = (int32_t)(s < -128 ? -128 : (s > 127 ? 127 : s));
    }
    return r;
#endif
}

/* clamp(v + zp, 0, 255) per lane (VQADD Rm, VQSHLU #24, VSHR.U32 #24): the same for uint8. */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vsat_add_u8(tinyc_s32x4 v, int32_t zp)
{
#if TINYC_HAVE_MVE
    return vreinterpretq_s32_u32(vshrq_n_u32(vqshluq_n_s32(vqaddq_n_s32(v, zp), 24), 24));
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        const int64_t s = (int64_t)v.v[i] + zp;
        r.v[i] = (int32_t)(s < 0 ? 0 : (s > 255 ? 255 : s));
    }
    return r;
#endif
}

/* ------------------------------------------------------------------------------------------- */
/* int8 elementwise (q_add.c.j2 / q_avgpool.c.j2): the requantization of a sum with one      */
/* multiplier (SMMLA / VQDMLASH: high word plus a rounding-and-zero-point constant), int8        */
/* saturation folded into the shift (SSAT / VQSHL #24), table lookups (VLDRW gather).            */
/* ------------------------------------------------------------------------------------------- */

/* SMMLA: c + floor(a * b / 2^32), modulo 2^32 (the high word of c * 2^32 + a * b). */
TINYC_SIMD_INLINE int32_t tinyc_smmla(int32_t a, int32_t b, int32_t c)
{
#if TINYC_HAVE_DSP && defined(__GNUC__)
    int32_t r;
    __asm__("smmla %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
#else
    return tinyc_simd_wrap((int64_t)c + tinyc_q_asr64((int64_t)a * b, 32));
#endif
}

/* SMMLAR: c + floor((a * b + 2^31) / 2^32), modulo 2^32 (rounded high word of c * 2^32 + a * b). */
TINYC_SIMD_INLINE int32_t tinyc_smmlar(int32_t a, int32_t b, int32_t c)
{
#if TINYC_HAVE_DSP && defined(__GNUC__)
    int32_t r;
    __asm__("smmlar %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
#else
    return tinyc_simd_wrap((int64_t)c + tinyc_q_asr64((int64_t)a * b + ((int64_t)1 << 31), 32));
#endif
}

/* SSAT #8: x clamped to [-128, 127] (the compiler folds a preceding arithmetic shift into it).
 * The builtin rather than ACLE's __ssat macro: one tuning build once rejected the macro's
 * immediate check (not reproduced); the builtin is the same instruction. */
TINYC_SIMD_INLINE int32_t tinyc_sat_s8(int32_t x)
{
#if TINYC_HAVE_DSP && defined(__GNUC__)
    return __builtin_arm_ssat(x, 8);
#else
    return x < -128 ? -128 : (x > 127 ? 127 : x);
#endif
}

/* VLDRB.U32: 4 bytes zero-extended into 32-bit lanes (table indices: the byte of an int8 q is
 * q mod 256); _z: inactive lanes 0, not read. */
TINYC_SIMD_INLINE tinyc_u32x4 tinyc_vld_u8_u32(const int8_t *p)
{
#if TINYC_HAVE_MVE
    return vldrbq_u32((const uint8_t *)p);
#else
    tinyc_u32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = (uint8_t)p[i];
    }
    return r;
#endif
}

TINYC_SIMD_INLINE tinyc_u32x4 tinyc_vld_u8_u32_z(const int8_t *p, tinyc_pred16 m)
{
#if TINYC_HAVE_MVE
    return vldrbq_z_u32((const uint8_t *)p, m);
#else
    tinyc_u32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = ((m >> (4 * i)) & 1u) ? (uint8_t)p[i] : 0u;
    }
    return r;
#endif
}

/* VLDRW.U32 gather, offsets shifted by 2: base[idx[i]] per lane (a 256-entry table lookup). */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vgather_s32(const int32_t *base, tinyc_u32x4 idx)
{
#if TINYC_HAVE_MVE
    return vldrwq_gather_shifted_offset_s32(base, idx);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = base[idx.v[i]];
    }
    return r;
#endif
}

/* VMLA.I32 Qda, Qn, Rm: acc + a * s per lane, modulo 2^32. */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vmla_n_s32(tinyc_s32x4 acc, tinyc_s32x4 a, int32_t s)
{
#if TINYC_HAVE_MVE
    return vmlaq_n_s32(acc, a, s);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = tinyc_simd_wrap((int64_t)acc.v[i] + (int64_t)a.v[i] * s);
    }
    return r;
#endif
}

/* VMLAS.I32 Qda, Qn, Rm: a * b + s per lane, modulo 2^32. */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vmlas_n_s32(tinyc_s32x4 a, tinyc_s32x4 b, int32_t s)
{
#if TINYC_HAVE_MVE
    return vmlasq_n_s32(a, b, s);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = tinyc_simd_wrap((int64_t)a.v[i] * b.v[i] + s);
    }
    return r;
#endif
}

/* VQDMLASH.S32 Qda, Qn, Rm: c + floor(2 * a * b / 2^32) = c + floor(a * b / 2^31) per lane,
 * saturated to int32 (the high word of 2 * a * b + c * 2^32). */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vqdmlash_s32(tinyc_s32x4 a, tinyc_s32x4 b, int32_t c)
{
#if TINYC_HAVE_MVE
    return vqdmlashq_n_s32(a, b, c);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        const int64_t s = (int64_t)c + tinyc_q_asr64((int64_t)a.v[i] * b.v[i], 31);
        r.v[i] = (int32_t)(s > INT32_MAX ? INT32_MAX : (s < INT32_MIN ? INT32_MIN : s));
    }
    return r;
#endif
}

/* VQRDMLASH.S32 Qda, Qn, Rm: c + floor((2 * a * b + 2^31) / 2^32) per lane (c plus gemmlowp's
 * srdhm(a, b)), saturated to int32. */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vqrdmlash_s32(tinyc_s32x4 a, tinyc_s32x4 b, int32_t c)
{
#if TINYC_HAVE_MVE
    return vqrdmlashq_n_s32(a, b, c);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        const int64_t s = (int64_t)c + tinyc_q_asr64((int64_t)a.v[i] * b.v[i] + ((int64_t)1 << 30), 31);
        r.v[i] = (int32_t)(s > INT32_MAX ? INT32_MAX : (s < INT32_MIN ? INT32_MIN : s));
    }
    return r;
#endif
}

/* floor(v / 2^r) clamped to [-128, 127] per lane, 0 <= r <= 24 (VQSHL Rm by 24 - r, VSHR #24:
 * the saturating left shift clamps exactly where the quotient leaves the int8 range). */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vsat_shr_s8(tinyc_s32x4 v, int32_t r)
{
#if TINYC_HAVE_MVE
    return vshrq_n_s32(vqshlq_r_s32(v, 24 - r), 24);
#else
    tinyc_s32x4 o;
    int i;
    for (i = 0; i < 4; ++i) {
        const int32_t q = tinyc_q_asr(v.v[i], (int)r);
        o.v[i] = q < -128 ? -128 : (q > 127 ? 127 : q);
    }
    return o;
#endif
}

/* VSHL.S32 Qda, Rm with a negative count: floor(v / 2^r) per lane, 0 <= r <= 31. */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vshr_r_s32(tinyc_s32x4 v, int32_t r)
{
#if TINYC_HAVE_MVE
    return vshlq_r_s32(v, -r);
#else
    tinyc_s32x4 o;
    int i;
    for (i = 0; i < 4; ++i) {
        o.v[i] = tinyc_q_asr(v.v[i], (int)r);
    }
    return o;
#endif
}

/* VMAX / VMIN with a broadcast scalar. */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vmax_n_s32(tinyc_s32x4 v, int32_t lo)
{
#if TINYC_HAVE_MVE
    return vmaxq_s32(v, vdupq_n_s32(lo));
#else
    tinyc_s32x4 o;
    int i;
    for (i = 0; i < 4; ++i) {
        o.v[i] = v.v[i] < lo ? lo : v.v[i];
    }
    return o;
#endif
}

TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vmin_n_s32(tinyc_s32x4 v, int32_t hi)
{
#if TINYC_HAVE_MVE
    return vminq_s32(v, vdupq_n_s32(hi));
#else
    tinyc_s32x4 o;
    int i;
    for (i = 0; i < 4; ++i) {
        o.v[i] = v.v[i] > hi ? hi : v.v[i];
    }
    return o;
#endif
}
/* (end of the int8 elementwise helpers) */

/* ------------------------------------------------------------------------------------------- */
/* Helium (MVE) depthwise QConv (templates/kernels/qconv/mve_dw.c.j2): 8 int16 lanes  */
/* (VLDRB.S16 / .U16), widening VMULLB / VMULLT into int32, requantization without ties         */
/* (VQDMULH + VRSHL), saturating narrowing pairs (VQMOVNB / VQMOVNT), VSTRB.16.                 */
/* ------------------------------------------------------------------------------------------- */

#if TINYC_HAVE_MVE
typedef int16x8_t tinyc_s16x8;
#else
typedef struct { int16_t v[8]; } tinyc_s16x8;
#endif

/* VCTP.16 n: the first min(n, 8) halfword lanes active (2 predicate bits each). */
TINYC_SIMD_INLINE tinyc_pred16 tinyc_vctp16(uint32_t n)
{
#if TINYC_HAVE_MVE
    return vctp16q(n);
#else
    return (tinyc_pred16)(n >= 8u ? 0xFFFFu : ((1u << (2u * n)) - 1u));
#endif
}

/* VLDRB.S16: 8 int8 sign-extended into int16 lanes; _z: inactive lanes 0, not read. */
TINYC_SIMD_INLINE tinyc_s16x8 tinyc_vld_s8_s16(const int8_t *p)
{
#if TINYC_HAVE_MVE
    return vldrbq_s16(p);
#else
    tinyc_s16x8 r;
    int i;
    for (i = 0; i < 8; ++i) {
        r.v[i] = p[i];
    }
    return r;
#endif
}

TINYC_SIMD_INLINE tinyc_s16x8 tinyc_vld_s8_s16_z(const int8_t *p, tinyc_pred16 m)
{
#if TINYC_HAVE_MVE
    return vldrbq_z_s16(p, m);
#else
    tinyc_s16x8 r;
    int i;
    for (i = 0; i < 8; ++i) {
        r.v[i] = ((m >> (2 * i)) & 1u) ? p[i] : 0;
    }
    return r;
#endif
}

/* VLDRB.U16: 8 uint8 zero-extended into int16 lanes (0..255); _z: inactive lanes 0, not read. */
TINYC_SIMD_INLINE tinyc_s16x8 tinyc_vld_u8_s16(const uint8_t *p)
{
#if TINYC_HAVE_MVE
    return vreinterpretq_s16_u16(vldrbq_u16(p));
#else
    tinyc_s16x8 r;
    int i;
    for (i = 0; i < 8; ++i) {
        r.v[i] = (int16_t)p[i];
    }
    return r;
#endif
}

TINYC_SIMD_INLINE tinyc_s16x8 tinyc_vld_u8_s16_z(const uint8_t *p, tinyc_pred16 m)
{
#if TINYC_HAVE_MVE
    return vreinterpretq_s16_u16(vldrbq_z_u16(p, m));
#else
    tinyc_s16x8 r;
    int i;
    for (i = 0; i < 8; ++i) {
        r.v[i] = ((m >> (2 * i)) & 1u) ? (int16_t)p[i] : 0;
    }
    return r;
#endif
}

/* VDUP.16: x in all 8 lanes. */
TINYC_SIMD_INLINE tinyc_s16x8 tinyc_vdup_s16(int16_t x)
{
#if TINYC_HAVE_MVE
    return vdupq_n_s16(x);
#else
    tinyc_s16x8 r;
    int i;
    for (i = 0; i < 8; ++i) {
        r.v[i] = x;
    }
    return r;
#endif
}

/* VMULLB.S16 / VMULLT.S16: the products of the even (bottom) / odd (top) int16 lanes as int32. */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vmullb_s16(tinyc_s16x8 a, tinyc_s16x8 b)
{
#if TINYC_HAVE_MVE
    return vmullbq_int_s16(a, b);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = (int32_t)a.v[2 * i] * b.v[2 * i];
    }
    return r;
#endif
}

TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vmullt_s16(tinyc_s16x8 a, tinyc_s16x8 b)
{
#if TINYC_HAVE_MVE
    return vmulltq_int_s16(a, b);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = (int32_t)a.v[2 * i + 1] * b.v[2 * i + 1];
    }
    return r;
#endif
}

/* VQDMULH.S32 then VRSHL.S32 (nrsh = -r per lane, 1 <= r <= 31): floor(acc * mul / 2^31), then
 * divided by 2^r rounding half up: round(acc * mul / 2^(31 + r)) half up, computed exactly (no
 * saturation: mul >= 0). Equal to tinyc_q_mbqm_even_r where no tie can occur (the kernel proves
 * that at compile time, tinyc/ops/_qconv_mve_dw.py). */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vmbqm_even_nt(tinyc_s32x4 acc, tinyc_s32x4 mul, tinyc_s32x4 nrsh)
{
#if TINYC_HAVE_MVE
    return vrshlq_s32(vqdmulhq_s32(acc, mul), nrsh);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        const int64_t p = (int64_t)acc.v[i] * mul.v[i];
        const int64_t t = p >= 0 ? (p >> 31) : ~(~p >> 31);
        const int e = (int)-nrsh.v[i];
        const int64_t s = t + ((int64_t)1 << (e - 1));
        r.v[i] = (int32_t)(s >= 0 ? (s >> e) : ~(~s >> e));
    }
    return r;
#endif
}

/* VQMOVNB.S32 + VQMOVNT.S32: lanes 2i / 2i + 1 = e[i] / o[i] saturated to int16 (the even and odd
 * channels back in channel order). */
TINYC_SIMD_INLINE tinyc_s16x8 tinyc_vqmovn_eo_s32(tinyc_s32x4 e, tinyc_s32x4 o)
{
#if TINYC_HAVE_MVE
    return vqmovntq_s32(vqmovnbq_s32(vreinterpretq_s16_s32(e), e), o);
#else
    tinyc_s16x8 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[2 * i] = (int16_t)(e.v[i] < -32768 ? -32768 : (e.v[i] > 32767 ? 32767 : e.v[i]));
        r.v[2 * i + 1] = (int16_t)(o.v[i] < -32768 ? -32768 : (o.v[i] > 32767 ? 32767 : o.v[i]));
    }
    return r;
#endif
}

/* clamp(v, lo, hi) + zp per int16 lane (VMAX.S16, VMIN.S16, VADD.I16); lo, hi, lo + zp and hi + zp
 * within int16. */
TINYC_SIMD_INLINE tinyc_s16x8 tinyc_vclamp_add_s16(tinyc_s16x8 v, int16_t lo, int16_t hi, int16_t zp)
{
#if TINYC_HAVE_MVE
    return vaddq_n_s16(vminq_s16(vmaxq_s16(v, vdupq_n_s16(lo)), vdupq_n_s16(hi)), zp);
#else
    tinyc_s16x8 r;
    int i;
    for (i = 0; i < 8; ++i) {
        r.v[i] = (int16_t)((v.v[i] < lo ? lo : (v.v[i] > hi ? hi : v.v[i])) + zp);
    }
    return r;
#endif
}

/* VSTRB.16: the low byte of each int16 lane to p[0..7] (values already in the int8 / uint8
 * range); _p: only the lanes active in m (VCTP.16). */
TINYC_SIMD_INLINE void tinyc_vst_s16_s8(int8_t *p, tinyc_s16x8 v)
{
#if TINYC_HAVE_MVE
    vstrbq_s16(p, v);
#else
    int i;
    for (i = 0; i < 8; ++i) {
        p[i] = (int8_t)v.v[i];
    }
#endif
}

TINYC_SIMD_INLINE void tinyc_vst_s16_s8_p(int8_t *p, tinyc_s16x8 v, tinyc_pred16 m)
{
#if TINYC_HAVE_MVE
    vstrbq_p_s16(p, v, m);
#else
    int i;
    for (i = 0; i < 8; ++i) {
        if ((m >> (2 * i)) & 1u) {
            p[i] = (int8_t)v.v[i];
        }
    }
#endif
}

TINYC_SIMD_INLINE void tinyc_vst_s16_u8(uint8_t *p, tinyc_s16x8 v)
{
#if TINYC_HAVE_MVE
    vstrbq_u16(p, vreinterpretq_u16_s16(v));
#else
    int i;
    for (i = 0; i < 8; ++i) {
        p[i] = (uint8_t)v.v[i];
    }
#endif
}

TINYC_SIMD_INLINE void tinyc_vst_s16_u8_p(uint8_t *p, tinyc_s16x8 v, tinyc_pred16 m)
{
#if TINYC_HAVE_MVE
    vstrbq_p_u16(p, vreinterpretq_u16_s16(v), m);
#else
    int i;
    for (i = 0; i < 8; ++i) {
        if ((m >> (2 * i)) & 1u) {
            p[i] = (uint8_t)v.v[i];
        }
    }
#endif
}
/* (end of the MVE depthwise helpers) */

#ifdef __cplusplus
}
#endif
#endif /* TINYC_SIMD_H */
