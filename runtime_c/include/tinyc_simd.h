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
/* Helium (MVE): 16 x int8 dot products (VMLADAVA), 4 x int32 lanes (VLDRB.S32, VMLA)          */
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

/* VLDRW.32 of 4 int32; _z: inactive lanes 0, not read. */
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

TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vld_s32_z(const int32_t *p, tinyc_pred16 m)
{
#if TINYC_HAVE_MVE
    return vldrwq_z_s32(p, m);
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = ((m >> (4 * i)) & 1u) ? p[i] : 0;
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

/* acc + a * b per lane, modulo 2^32 (VMUL.I32 then VADD.I32: MVE has no vector x vector VMLA). */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vmla_s32(tinyc_s32x4 acc, tinyc_s32x4 a, tinyc_s32x4 b)
{
#if TINYC_HAVE_MVE
    return vaddq_s32(acc, vmulq_s32(a, b));
#else
    tinyc_s32x4 r;
    int i;
    for (i = 0; i < 4; ++i) {
        r.v[i] = tinyc_simd_wrap((int64_t)acc.v[i] + (int64_t)a.v[i] * b.v[i]);
    }
    return r;
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

/* The vector (a, b, c, d): four scalar accumulators into one register (two VMOVs on MVE). */
TINYC_SIMD_INLINE tinyc_s32x4 tinyc_vset4_s32(int32_t a, int32_t b, int32_t c, int32_t d)
{
#if TINYC_HAVE_MVE
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

#ifdef __cplusplus
}
#endif
#endif /* TINYC_SIMD_H */
