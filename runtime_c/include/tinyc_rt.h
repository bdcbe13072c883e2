/*
 * tinyc runtime core: status codes and the small helpers generated kernels share.
 * Freestanding-friendly: needs only <stdint.h>, <stddef.h> and <math.h> for float kernels.
 */
#ifndef TINYC_RT_H
#define TINYC_RT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TINYC_OK = 0,
    TINYC_ERR_NULL_ARGUMENT = 1,
    TINYC_ERR_BAD_LAYER = 2,
    TINYC_ERR_ARENA_MISALIGNED = 3,  /* <m>_init: the arena is not <M>_ARENA_ALIGN-aligned */
    TINYC_ERR_ARENA_TOO_SMALL = 4,   /* <m>_init: fewer than <M>_ARENA_BYTES bytes */
    TINYC_ERR_NOT_INITIALISED = 5    /* a context used without a successful <m>_init */
} tinyc_status_t;

#if defined(__GNUC__) || defined(__clang__)
#define TINYC_ALIGN(n) __attribute__((aligned(n)))
#define TINYC_INLINE static __inline__ __attribute__((always_inline))
#else
#define TINYC_ALIGN(n)
#define TINYC_INLINE static
#endif

/* Marks the innermost loop of a kernel as the one to vectorise. Compilers left to guess
 * sometimes vectorise a reduction loop further out instead (with shuffles: several times
 * slower). Build with -fopenmp-simd -DTINYC_OMP_SIMD (the host project does) to use it;
 * without them it expands to nothing and the code stays plain, warning-free C99. */
#if defined(TINYC_OMP_SIMD)
#define TINYC_SIMD _Pragma("omp simd")
#else
#define TINYC_SIMD
#endif

/* The first statement of every generated kernel. Works around a GCC wrong-code bug (gcc 12.2,
 * x86-64 -O3 with AVX2, e.g. -march=native; no undefined behaviour involved: clean under ASan and
 * UBSan, clang exact). Kernels are static and called with constant pointers into the one arena,
 * so IPA-CP makes input and output addresses of one object; where the output stride is a multiple
 * of the input's, IVOPTs writes the vectorised output store through the input's induction
 * variable as MEM[0B + (-k * &arena) + iv * 8], the late pure-const pass (and ipa-modref) take that
 * for a NULL dereference, find the kernel pure, and the caller deletes the call: the outputs are
 * never written (seen on QConv and QMatMul). An empty volatile asm with a memory clobber, before
 * any store, gives the kernel side effects for those analyses and emits no instruction. Cortex-M
 * builds leave it out (arm-none-eabi-gcc 12.2 forms no such store there, and the barrier would
 * move a few prologue instructions). Covered by tests/test_mve_host_regression.py. */
#if defined(__GNUC__) && !defined(__clang__) && !(defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M')
#define TINYC_KERNEL_ENTRY() __asm__ __volatile__("" : : : "memory")
#else
#define TINYC_KERNEL_ENTRY() ((void)0)
#endif

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L
#define TINYC_RESTRICT restrict
#else
#define TINYC_RESTRICT
#endif

/* Human-readable name of a status code (for logs and the serial harness). */
const char *tinyc_status_str(tinyc_status_t status);

/* Copy `n` bytes; a tiny memcpy so bare-metal builds need no libc for it. */
void tinyc_copy(void *dst, const void *src, size_t n);

/* Float min/max with IEEE/ONNX (= onnxruntime) NaN semantics: a NaN in either argument gives
 * NaN (so Relu(NaN), Clip(NaN), MaxPool over a NaN are NaN, never a finite number); equal
 * arguments (0.0f and -0.0f) give b. The NaN test `a != a` costs one extra compare and still
 * vectorises (cmpunord + or + blend); it needs a build without -ffinite-math-only/-ffast-math. */
TINYC_INLINE float tinyc_minf(float a, float b) { return (a < b || a != a) ? a : b; }
TINYC_INLINE float tinyc_maxf(float a, float b) { return (a > b || a != a) ? a : b; }
TINYC_INLINE int32_t tinyc_mini(int32_t a, int32_t b) { return a < b ? a : b; }
TINYC_INLINE int32_t tinyc_maxi(int32_t a, int32_t b) { return a > b ? a : b; }

#ifdef __cplusplus
}
#endif
#endif /* TINYC_RT_H */
