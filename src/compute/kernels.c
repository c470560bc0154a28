/* The typed inner loops of the elementwise functions: one loop per (operation, compute dtype),
 * generated from one expression each. Every loop takes the iteration engine's row (iter.c):
 * operand k at data[k] (the output first), steps[k] bytes apart, n elements. A loop whose
 * operands are aligned and contiguous, or a contiguous one against a broadcast scalar, runs as a
 * plain indexed loop the compiler vectorises (this file is compiled with -O3, see the Makefile);
 * anything else goes element by element through memcpy, since producers need not align data.
 *
 * Compute dtypes: bool, the eight integers, float32, float64, complex64 and complex128 (float16
 * and bfloat16 compute in float32: elementwise.c converts them in blocks). Integer arithmetic wraps, done in unsigned
 * types (signed overflow is undefined in C); divisors and exponents that would trap or that
 * NumPy refuses are checked by elementwise.c before any loop runs. Float rules are NumPy's:
 * maximum/minimum propagate NaN, floor division and remainder follow npy_divmod, round is to
 * nearest even. Complex rules are complex_rules.h's, shared with the CUDA kernels. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"
/* complex pow beyond the integral powers: the C library's cpow, which NumPy calls (complex_rules.h's
 * exp(b log a), run on CUDA devices, is within a few units in the last place of it, not within
 * NumPy's test's bound for every operand) */
#include <complex.h>
/* C11's CMPLX and CMPLXF build a complex value from its parts without arithmetic, so an infinite or NaN
 * part stays as given (x + y*I would turn (inf, 0) into (inf, nan)). MinGW-w64's <complex.h> lacks them,
 * and glibc's defines them only for compilers that claim GCC >= 4.7, which Clang does not; GCC and Clang
 * both have __builtin_complex. */
#if !defined(CMPLX)
#define CMPLX(x, y) __builtin_complex((double)(x), (double)(y))
#endif
#if !defined(CMPLXF)
#define CMPLXF(x, y) __builtin_complex((float)(x), (float)(y))
#endif
#define DLP_CPOW_c64 cpow_libm_c64
#define DLP_CPOW_c128 cpow_libm_c128
#include "compute/complex_rules.h"
/* unused in the kernel groups without complex pow, which Clang warns about for a .c file's static inline */
#define CPOW_LIBM(s, T, R, F, MAKE)                                                    \
  __attribute__((unused)) static inline T cpow_libm_##s(T a, T b) {                    \
    T r;                                                                               \
    if (dlp_cpow_exact_##s(a, b, &r)) return r;                                        \
    R _Complex p = cpow##F(MAKE(a.re, a.im), MAKE(b.re, b.im));                        \
    return dlp_cmake_##s(creal##F(p), cimag##F(p));                                    \
  }
CPOW_LIBM(c64, dlp_c64, float, f, CMPLXF)
CPOW_LIBM(c128, dlp_c128, double, , CMPLX)

/* The file is compiled once per group of compute dtypes, so that a parallel build compiles the
 * groups at the same time (see the Makefile): DLP_KERNELS_GROUP 0 (the default) holds bool, the
 * integers and the mixed comparisons, and, outside the AVX2 copy, the dispatch below; 1 the floats;
 * 2 complex64 and complex128. Each group's object looks up its loops by dlp_kernel_group<N>, its
 * AVX2 copy (DLP_KERNELS_AVX2) by dlp_kernel_group<N>_avx2, the floats' AVX-512 copy
 * (DLP_KERNELS_AVX512) by dlp_kernel_group1_avx512. */
#ifndef DLP_KERNELS_GROUP
#define DLP_KERNELS_GROUP 0
#endif
#if defined(DLP_KERNELS_AVX512)
#define GROUP_LOOKUP(n) GROUP_LOOKUP_(n, _avx512)
#elif defined(DLP_KERNELS_AVX2)
#define GROUP_LOOKUP(n) GROUP_LOOKUP_(n, _avx2)
#else
#define GROUP_LOOKUP(n) GROUP_LOOKUP_(n, )
#endif
#define GROUP_LOOKUP_(n, isa) GROUP_LOOKUP__(n, isa)
#define GROUP_LOOKUP__(n, isa) dlp_kernel_group##n##isa

#define ALIGNED(p, T) ((((uintptr_t)(p)) & (_Alignof(T) - 1)) == 0)

/* A loop over n elements for out = EXPR(x, y), x of type TX from data[1], y of type TY from
 * data[2], the result of type R; EXPR sees the values x and y. LOOP2: both inputs of type T. */
#define LOOP2(T, R, EXPR) LOOP2_TYPES(T, T, R, EXPR)
#define LOOP2_TYPES(TX, TY, R, EXPR)                                                                   \
  char *o = data[0];                                                                                   \
  const char *a = data[1], *b = data[2];                                                               \
  int64_t so = steps[0], sa = steps[1], sb = steps[2];                                                 \
  (void)ctx;                                                                                           \
  if (so == (int64_t)sizeof(R) && ALIGNED(o, R) && ALIGNED(a, TX) && ALIGNED(b, TY)) {               \
    R *restrict po = (R *)(void *)o;                                                                   \
    const TX *pa = (const TX *)(const void *)a;                                                        \
    const TY *pb = (const TY *)(const void *)b;                                                        \
    if (sa == (int64_t)sizeof(TX) && sb == (int64_t)sizeof(TY)) {                                      \
      for (int64_t i = 0; i < n; i++) { TX x = pa[i]; TY y = pb[i]; po[i] = (EXPR); }                  \
      return;                                                                                          \
    }                                                                                                  \
    if (sa == (int64_t)sizeof(TX) && sb == 0) {                                                        \
      TY y = pb[0];                                                                                    \
      for (int64_t i = 0; i < n; i++) { TX x = pa[i]; po[i] = (EXPR); }                                \
      return;                                                                                          \
    }                                                                                                  \
    if (sa == 0 && sb == (int64_t)sizeof(TY)) {                                                        \
      TX x = pa[0];                                                                                    \
      for (int64_t i = 0; i < n; i++) { TY y = pb[i]; po[i] = (EXPR); }                                \
      return;                                                                                          \
    }                                                                                                  \
  }                                                                                                    \
  for (int64_t i = 0; i < n; i++, o += so, a += sa, b += sb) {                                         \
    TX x;                                                                                              \
    TY y;                                                                                              \
    R r;                                                                                               \
    memcpy(&x, a, sizeof x);                                                                           \
    memcpy(&y, b, sizeof y);                                                                           \
    r = (EXPR);                                                                                        \
    memcpy(o, &r, sizeof r);                                                                           \
  }

#define LOOP1(T, R, EXPR)                                                                              \
  char *o = data[0];                                                                                   \
  const char *a = data[1];                                                                             \
  int64_t so = steps[0], sa = steps[1];                                                                \
  (void)ctx;                                                                                           \
  if (so == (int64_t)sizeof(R) && sa == (int64_t)sizeof(T) && ALIGNED(o, R) && ALIGNED(a, T)) {      \
    R *restrict po = (R *)(void *)o;                                                                   \
    const T *pa = (const T *)(const void *)a;                                                          \
    for (int64_t i = 0; i < n; i++) { T x = pa[i]; po[i] = (EXPR); }                                   \
    return;                                                                                            \
  }                                                                                                    \
  for (int64_t i = 0; i < n; i++, o += so, a += sa) {                                                  \
    T x;                                                                                               \
    R r;                                                                                               \
    memcpy(&x, a, sizeof x);                                                                           \
    r = (EXPR);                                                                                        \
    memcpy(o, &r, sizeof r);                                                                           \
  }

#define DEF2(name, T, R, EXPR) \
  static void name(void *ctx, char *const *data, const int64_t *steps, int64_t n) { LOOP2(T, R, EXPR) }
#define DEF1(name, T, R, EXPR) \
  static void name(void *ctx, char *const *data, const int64_t *steps, int64_t n) { LOOP1(T, R, EXPR) }

/* where: out = NORM(c ? x : y), with c a bool at data[1] and x, y of type T at data[2], data[3]. */
#define DEFWHERE(name, T, NORM)                                                                              \
  static void name(void *ctx, char *const *data, const int64_t *steps, int64_t n) {                    \
    char *o = data[0];                                                                                 \
    const char *c = data[1], *a = data[2], *b = data[3];                                               \
    (void)ctx;                                                                                         \
    for (int64_t i = 0; i < n; i++, o += steps[0], c += steps[1], a += steps[2], b += steps[3]) {      \
      T v;                                                                                             \
      memcpy(&v, *c ? a : b, sizeof v);                                                                \
      v = NORM(v);                                                                                     \
      memcpy(o, &v, sizeof v);                                                                         \
    }                                                                                                  \
  }

/* clamp: out = min(max(x, lo), hi), x, lo, hi of type T at data[1], data[2], data[3] (NumPy's clip,
 * NaN propagating for floats); scalar bounds over a contiguous x run as a plain indexed loop. */
#define DEFCLAMP(name, T, MAXF, MINF)                                                                  \
  static void name(void *ctx, char *const *data, const int64_t *steps, int64_t n) {                    \
    char *o = data[0];                                                                                 \
    const char *a = data[1], *lo = data[2], *hi = data[3];                                             \
    (void)ctx;                                                                                         \
    if (steps[0] == (int64_t)sizeof(T) && steps[1] == (int64_t)sizeof(T) && steps[2] == 0 &&           \
        steps[3] == 0 && ALIGNED(o, T) && ALIGNED(a, T)) {                                             \
      T *restrict po = (T *)(void *)o;                                                                 \
      const T *pa = (const T *)(const void *)a;                                                        \
      T l, h;                                                                                          \
      memcpy(&l, lo, sizeof l);                                                                        \
      memcpy(&h, hi, sizeof h);                                                                        \
      for (int64_t i = 0; i < n; i++) { T x = pa[i], m = MAXF(x, l); po[i] = MINF(m, h); }             \
      return;                                                                                          \
    }                                                                                                  \
    for (int64_t i = 0; i < n; i++, o += steps[0], a += steps[1], lo += steps[2], hi += steps[3]) {    \
      T x, l, h, m, r;                                                                                 \
      memcpy(&x, a, sizeof x);                                                                         \
      memcpy(&l, lo, sizeof l);                                                                        \
      memcpy(&h, hi, sizeof h);                                                                        \
      m = MAXF(x, l);                                                                                  \
      r = MINF(m, h);                                                                                  \
      memcpy(o, &r, sizeof r);                                                                         \
    }                                                                                                  \
  }


/* ---- the loops, per operation: ops.h's lists ---- */

#define DEF_MIXED(name, TX, TY, EXPR) \
  static void name(void *ctx, char *const *data, const int64_t *steps, int64_t n) { LOOP2_TYPES(TX, TY, b8, EXPR) }
#if DLP_KERNELS_GROUP == 0
#define INT_LOOPS(s, T) DLP_INT_OPS(DEF2, DEF1, DEFCLAMP, s, T) DLP_COMPARE_OPS(DEF2, DEF1, DEFWHERE, s, T)
DLP_INTS(INT_LOOPS)
DLP_BOOL_OPS(DEF2, DEF1, DEFCLAMP, DEFWHERE)
DLP_MIXED_OPS(DEF_MIXED)
#elif DLP_KERNELS_GROUP == 1
#define FLOAT_LOOPS(s, T, F) DLP_FLOAT_OPS(DEF2, DEF1, DEFCLAMP, s, T, F) DLP_COMPARE_OPS(DEF2, DEF1, DEFWHERE, s, T)
DLP_FLOATS(FLOAT_LOOPS)
#ifdef DLP_KERNELS_AVX512
/* float32 exp and sigmoid in the AVX-512 build, 16 lanes at a time: ops.h's vexp_f32 (the same
 * reduction x = k ln2 + r, |r| <= ln2/2, and Cephes' polynomial) with fused multiply-adds, and
 * 2^k applied by VSCALEFPS, which rounds once into the subnormals and overflows to infinity by
 * itself. Within 1 ulp of the correctly rounded result, as vexp_f32 (checked on every float32:
 * docs/api.md); the bits may differ from the other builds' in the last place. */
#include <immintrin.h>
static inline __m512 exp_zmm(__m512 x) {
  __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f)); /* NaN: -104 */
  __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fmadd_ps(k, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  y = _mm512_scalef_ps(y, k);
  __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_mask_blend_ps(nan, y, x);
}
/* log: x = m 2^e with m in [sqrt(1/2), sqrt(2)) (VGETEXPPS and VGETMANTPS, subnormals included),
 * log m = f - f^2/2 + f^3 P(f) with f = m - 1 (Cephes' logf polynomial), e ln2 added in two parts. */
static inline __m512 log_zmm(__m512 x) {
  __m512 e = _mm512_getexp_ps(x), m = _mm512_getmant_ps(x, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_zero);
  __mmask16 big = _mm512_cmp_ps_mask(m, _mm512_set1_ps(1.41421356f), _CMP_GT_OQ);
  m = _mm512_mask_mul_ps(m, big, m, _mm512_set1_ps(0.5f));
  e = _mm512_mask_add_ps(e, big, e, _mm512_set1_ps(1.0f));
  __m512 f = _mm512_sub_ps(m, _mm512_set1_ps(1.0f)), z = _mm512_mul_ps(f, f);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(7.0376836292e-2f), f, _mm512_set1_ps(-1.1514610310e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.1676998740e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(-1.2420140846e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.4249322787e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(-1.6668057665e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.0000714765e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(-2.4999993993e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(3.3333331174e-1f));
  __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, f), z);
  y = _mm512_fmadd_ps(e, _mm512_set1_ps(-2.12194440e-4f), y);
  y = _mm512_fmadd_ps(z, _mm512_set1_ps(-0.5f), y);
  y = _mm512_add_ps(f, y);
  y = _mm512_fmadd_ps(e, _mm512_set1_ps(0.693359375f), y);
  /* log 0 = -inf, log of a negative = NaN, log inf = inf, NaN stays */
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ), y, _mm512_set1_ps(-INFINITY));
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), y, _mm512_set1_ps(NAN));
  __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(INFINITY), _CMP_EQ_OQ) | _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_mask_blend_ps(keep, y, x);
}
/* tanh on |x|, the sign put back at the end: Cephes' odd polynomial below 0.625, 1 - 2 / (e^2|x| + 1)
 * above (1 from 44 on, where e^2|x| overflows) */
static inline __m512 tanh_zmm(__m512 x) {
  __m512 sign = _mm512_and_ps(x, _mm512_set1_ps(-0.0f)), a = _mm512_andnot_ps(_mm512_set1_ps(-0.0f), x);
  __m512 s = _mm512_mul_ps(a, a);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(-5.70498872745e-3f), s, _mm512_set1_ps(2.06390887954e-2f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-5.37397155531e-2f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(1.33314422036e-1f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-3.33332819422e-1f));
  __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, s), a, a);
  __m512 one = _mm512_set1_ps(1.0f);
  __m512 large = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(exp_zmm(_mm512_add_ps(a, a)), one)));
  __m512 y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(0.625f), _CMP_LT_OQ), large, small);
  return _mm512_or_ps(y, sign);
}
/* sin and cos: j = |x| 4/pi rounded up to even, r = |x| - j pi/4 with pi/4 in three floats (each
 * product exact inside a fused multiply-add, the first difference exact for |x| below 2^13), and
 * Cephes' sinf or cosf polynomial on r by j's octant. Lanes of larger |x| (or inf or NaN) go to
 * the C library (DEF_ZMM1_SINCOS). */
#define SINCOS_LIMIT 8192.0f
static inline __m512 sincos_zmm(__m512 x, int cosine) {
  __m512 a = _mm512_andnot_ps(_mm512_set1_ps(-0.0f), x);
  __m512i j = _mm512_cvttps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(1.27323954473516f)));
  j = _mm512_and_si512(_mm512_add_epi32(j, _mm512_set1_epi32(1)), _mm512_set1_epi32(~1));
  __m512 y = _mm512_cvtepi32_ps(j);
  __m512 r = _mm512_fnmadd_ps(y, _mm512_set1_ps(0x1.921fb6p-1f), a); /* exact: a and j pi/4 are close */
  r = _mm512_fnmadd_ps(y, _mm512_set1_ps(-0x1.777a5cp-26f), r);
  r = _mm512_fnmadd_ps(y, _mm512_set1_ps(-0x1.ee59dap-51f), r);
  __m512 z = _mm512_mul_ps(r, r);
  __m512 ps = _mm512_fmadd_ps(_mm512_set1_ps(-1.9515295891e-4f), z, _mm512_set1_ps(8.3321608736e-3f));
  ps = _mm512_fmadd_ps(ps, z, _mm512_set1_ps(-1.6666654611e-1f));
  __m512 sin_r = _mm512_fmadd_ps(_mm512_mul_ps(ps, z), r, r);
  __m512 pc = _mm512_fmadd_ps(_mm512_set1_ps(2.443315711809948e-5f), z, _mm512_set1_ps(-1.388731625493765e-3f));
  pc = _mm512_fmadd_ps(pc, z, _mm512_set1_ps(4.166664568298827e-2f));
  __m512 cos_r = _mm512_fmadd_ps(_mm512_mul_ps(pc, z), z, _mm512_fnmadd_ps(z, _mm512_set1_ps(0.5f), _mm512_set1_ps(1.0f)));
  /* the octant j (even): sin x = sin r, cos r, -sin r, -cos r for j mod 8 = 0, 2, 4, 6; cos x the
   * same two octants on (j + 2) */
  if (cosine) j = _mm512_add_epi32(j, _mm512_set1_epi32(2));
  __mmask16 swap = _mm512_test_epi32_mask(j, _mm512_set1_epi32(2));
  __m512i negate = _mm512_slli_epi32(_mm512_and_si512(j, _mm512_set1_epi32(4)), 29);
  __m512 v = _mm512_mask_blend_ps(swap, sin_r, cos_r);
  v = _mm512_xor_ps(v, _mm512_castsi512_ps(negate));
  /* sin(-x) = -sin x */
  if (!cosine) v = _mm512_xor_ps(v, _mm512_and_ps(x, _mm512_set1_ps(-0.0f)));
  return v;
}
static inline __m512 sin_zmm(__m512 x) { return sincos_zmm(x, 0); }
static inline __m512 cos_zmm(__m512 x) { return sincos_zmm(x, 1); }
static inline __m512 sigmoid_zmm(__m512 x) {
  __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp_zmm(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}
/* Contiguous operands (any alignment) run through the vector function, the last n % 16 under a
 * mask (masked lanes are neither read nor written); strided ones through the table's loop. */
#define DEF_ZMM1(name, VECTOR, SCALAR_LOOP)                                                       \
  static void name(void *ctx, char *const *data, const int64_t *steps, int64_t n) {              \
    if (steps[0] != 4 || steps[1] != 4) {                                                        \
      SCALAR_LOOP(ctx, data, steps, n);                                                          \
      return;                                                                                    \
    }                                                                                            \
    char *o = data[0];                                                                           \
    const char *a = data[1];                                                                     \
    int64_t i = 0;                                                                               \
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(o + 4 * i, VECTOR(_mm512_loadu_ps(a + 4 * i))); \
    if (i < n) {                                                                                 \
      __mmask16 m = (__mmask16)((1u << (n - i)) - 1);                                            \
      _mm512_mask_storeu_ps(o + 4 * i, m, VECTOR(_mm512_maskz_loadu_ps(m, a + 4 * i)));          \
    }                                                                                            \
  }
DEF_ZMM1(exp_f32_zmm, exp_zmm, exp_f32)
DEF_ZMM1(sigmoid_f32_zmm, sigmoid_zmm, sigmoid_f32)
DEF_ZMM1(log_f32_zmm, log_zmm, log_f32)
DEF_ZMM1(tanh_f32_zmm, tanh_zmm, tanh_f32)
/* sin and cos: lanes beyond SINCOS_LIMIT (and inf, NaN) are left unwritten by the vector store
 * and computed by the C library's from the input, still in place when out= is the input */
#define DEF_ZMM1_SINCOS(name, VECTOR, LIBM, SCALAR_LOOP)                                          \
  static void name(void *ctx, char *const *data, const int64_t *steps, int64_t n) {              \
    if (steps[0] != 4 || steps[1] != 4) {                                                        \
      SCALAR_LOOP(ctx, data, steps, n);                                                          \
      return;                                                                                    \
    }                                                                                            \
    char *o = data[0];                                                                           \
    const char *a = data[1];                                                                     \
    for (int64_t i = 0; i < n; i += 16) {                                                        \
      __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);         \
      __m512 x = _mm512_maskz_loadu_ps(m, a + 4 * i);                                            \
      __mmask16 distant = m & _mm512_cmp_ps_mask(_mm512_andnot_ps(_mm512_set1_ps(-0.0f), x),      \
                                             _mm512_set1_ps(SINCOS_LIMIT), _CMP_NLT_UQ);         \
      _mm512_mask_storeu_ps(o + 4 * i, m & (__mmask16)~distant, VECTOR(x));                       \
      for (int64_t l = i; distant; l++, distant >>= 1) {                                          \
        if (!(distant & 1)) continue;                                                             \
        float v;                                                                                 \
        memcpy(&v, a + 4 * l, 4);                                                                \
        v = LIBM(v);                                                                             \
        memcpy(o + 4 * l, &v, 4);                                                                \
      }                                                                                          \
    }                                                                                            \
  }
DEF_ZMM1_SINCOS(sin_f32_zmm, sin_zmm, sinf, sin_f32)
DEF_ZMM1_SINCOS(cos_f32_zmm, cos_zmm, cosf, cos_f32)
/* float32 pow for x > 0 finite and y finite: 2^(y log2 x) in float64, rounded once to float32.
 * log2 x = e + log(m)/ln2 with m in [sqrt(1/2), sqrt(2)] and log m = 2 atanh(f), f = (m-1)/(m+1),
 * |f| <= 0.1716, its series through f^15; 2^t = 2^k e^(r ln2) with r = t - k in [-1/2, 1/2] and
 * e^s's Taylor series through s^10. Both are good to about 1e-13, far below float32's half unit in
 * the last place: the result is the correctly rounded one except where the exact value lies that
 * close to a tie, and within 1 ulp always (checked in spec/cpu_spec.lua). Results a float32 holds
 * exactly (8 = 2^3, 3 = 9^0.5) come out exact. About 2.7 times the C library's speed, not
 * NumPy's (whose float32 pow computes in float32): two float64 halves of 16 lanes, about 90
 * vector operations. */
/* c[0] x^(n-1) + ... + c[n-1], by Horner's rule with fused multiply-adds */
static inline __m512d horner_pd(__m512d x, const double *c, int n) {
  __m512d p = _mm512_set1_pd(c[0]);
  for (int i = 1; i < n; i++) p = _mm512_fmadd_pd(p, x, _mm512_set1_pd(c[i]));
  return p;
}
static inline __m512d log2_zmm_pd(__m512d x) {
  __m512d e = _mm512_getexp_pd(x), m = _mm512_getmant_pd(x, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_zero);
  __mmask8 big = _mm512_cmp_pd_mask(m, _mm512_set1_pd(1.4142135623730951), _CMP_GT_OQ);
  m = _mm512_mask_mul_pd(m, big, m, _mm512_set1_pd(0.5));
  e = _mm512_mask_add_pd(e, big, e, _mm512_set1_pd(1.0));
  __m512d one = _mm512_set1_pd(1.0);
  __m512d f = _mm512_div_pd(_mm512_sub_pd(m, one), _mm512_add_pd(m, one)), z = _mm512_mul_pd(f, f);
  static const double atanh_series[] = {1.0 / 15, 1.0 / 13, 1.0 / 11, 1.0 / 9, 1.0 / 7, 1.0 / 5, 1.0 / 3, 1.0};
  __m512d p = horner_pd(z, atanh_series, 8);
  /* 2 f p / ln 2 */
  return _mm512_fmadd_pd(_mm512_mul_pd(f, p), _mm512_set1_pd(2.8853900817779268), e);
}
static inline __m512d exp2_zmm_pd(__m512d t) {
  t = _mm512_min_pd(_mm512_max_pd(t, _mm512_set1_pd(-300.0)), _mm512_set1_pd(300.0)); /* beyond: 0 or inf */
  __m512d k = _mm512_roundscale_pd(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d s = _mm512_mul_pd(_mm512_sub_pd(t, k), _mm512_set1_pd(0.69314718055994531));
  static const double taylor[] = {1.0 / 3628800, 1.0 / 362880, 1.0 / 40320, 1.0 / 5040, 1.0 / 720, 1.0 / 120,
                                  1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0};
  __m512d p = horner_pd(s, taylor, 11);
  return _mm512_scalef_pd(p, k);
}
static inline __m256 pow_half(__m256 x, __m256 y) {
  __m512d t = _mm512_mul_pd(_mm512_cvtps_pd(y), log2_zmm_pd(_mm512_cvtps_pd(x)));
  return _mm512_cvtpd_ps(exp2_zmm_pd(t));
}
static inline __m512 pow_zmm(__m512 x, __m512 y) {
  __m256 lo = pow_half(_mm512_castps512_ps256(x), _mm512_castps512_ps256(y));
  __m256 hi = pow_half(_mm512_extractf32x8_ps(x, 1), _mm512_extractf32x8_ps(y, 1));
  return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}
/* Contiguous output; each input contiguous or one value for the row (a Lua number's step is 0).
 * Lanes the formula does not serve (x <= 0, inf or NaN; y inf or NaN) are left unwritten by the
 * vector store and computed by the C library's powf, as the other builds do. */
static void pow_f32_zmm(void *ctx, char *const *data, const int64_t *steps, int64_t n) {
  if (steps[0] != 4 || (steps[1] != 4 && steps[1] != 0) || (steps[2] != 4 && steps[2] != 0)) {
    pow_f32(ctx, data, steps, n);
    return;
  }
  char *o = data[0];
  const char *a = data[1], *b = data[2];
  float a0, b0;
  memcpy(&a0, a, 4);
  memcpy(&b0, b, 4);
  const __m512 inf = _mm512_set1_ps(INFINITY), magnitude = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    __m512 x = steps[1] ? _mm512_maskz_loadu_ps(m, a + 4 * i) : _mm512_set1_ps(a0);
    __m512 y = steps[2] ? _mm512_maskz_loadu_ps(m, b + 4 * i) : _mm512_set1_ps(b0);
    __mmask16 served = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ) &
                       _mm512_cmp_ps_mask(x, inf, _CMP_LT_OQ) &
                       _mm512_cmp_ps_mask(_mm512_and_ps(y, magnitude), inf, _CMP_LT_OQ);
    /* unserved lanes compute on 1s, so that no lane raises a floating-point exception */
    __m512 ones = _mm512_set1_ps(1.0f);
    __m512 r = pow_zmm(_mm512_mask_blend_ps(served, ones, x), _mm512_mask_blend_ps(served, ones, y));
    _mm512_mask_storeu_ps(o + 4 * i, m & served, r);
    for (__mmask16 rest = m & (__mmask16)~served; rest; rest &= (__mmask16)(rest - 1)) {
      int l = __builtin_ctz(rest);
      float u = a0, v = b0, w;
      if (steps[1]) memcpy(&u, a + 4 * (i + l), 4);
      if (steps[2]) memcpy(&v, b + 4 * (i + l), 4);
      w = powf(u, v);
      memcpy(o + 4 * (i + l), &w, 4);
    }
  }
}
#endif
#else
/* ---- complex: complex_rules.h's lists, as the CUDA kernels ---- */

#define COMPLEX_LOOPS(s, T, R) DLP_COMPLEX_OPS(DEF2, DEF1, DEFWHERE, s, T, R)
DLP_COMPLEXES(COMPLEX_LOOPS)
/* asin, acos, atan, sinh and cosh of complex numbers: the C library's (NumPy calls the same), on
 * the CPU only; on CUDA devices they raise (not in complex_rules.h's shared rules yet) */
#define CPU_ONLY_COMPLEX(s, T, R, F, MAKE)                                                   \
  static inline T casin_libm_##s(T a) { return from_libm_##s(casin##F(MAKE(a.re, a.im))); }  \
  static inline T cacos_libm_##s(T a) { return from_libm_##s(cacos##F(MAKE(a.re, a.im))); }  \
  static inline T catan_libm_##s(T a) { return from_libm_##s(catan##F(MAKE(a.re, a.im))); }  \
  static inline T csinh_libm_##s(T a) { return from_libm_##s(csinh##F(MAKE(a.re, a.im))); }  \
  static inline T ccosh_libm_##s(T a) { return from_libm_##s(ccosh##F(MAKE(a.re, a.im))); }  \
  DEF1(asin_##s, T, T, casin_libm_##s(x))                                                    \
  DEF1(acos_##s, T, T, cacos_libm_##s(x))                                                    \
  DEF1(atan_##s, T, T, catan_libm_##s(x))                                                    \
  DEF1(sinh_##s, T, T, csinh_libm_##s(x))                                                    \
  DEF1(cosh_##s, T, T, ccosh_libm_##s(x))
static inline dlp_c64 from_libm_c64(float _Complex p) { return dlp_cmake_c64(crealf(p), cimagf(p)); }
static inline dlp_c128 from_libm_c128(double _Complex p) { return dlp_cmake_c128(creal(p), cimag(p)); }
CPU_ONLY_COMPLEX(c64, dlp_c64, float, f, CMPLXF)
CPU_ONLY_COMPLEX(c128, dlp_c128, double, , CMPLX)
#define CPU_ONLY_ROWS(ROW) \
  [DLP_OP_ASIN] = ROW(asin), [DLP_OP_ACOS] = ROW(acos), [DLP_OP_ATAN] = ROW(atan), [DLP_OP_SINH] = ROW(sinh), \
  [DLP_OP_COSH] = ROW(cosh),
#endif

/* ---- the table: the loop of each operation for each compute dtype (NULL: none) ---- */

/* The row of an operation: its loops for bool, int8 .. int64, uint8 .. uint64, float32, float64;
 * INTS() and FLOATS() keep the loops of this object's group, the others are NULL here. */
#if DLP_KERNELS_GROUP == 0
#define INTS(loop) loop
#define FLOATS(loop) NULL
#else
#define INTS(loop) NULL
#define FLOATS(loop) loop
#endif
#define ROW_ALL(op) {INTS(op##_b), INTS(op##_i8), INTS(op##_i16), INTS(op##_i32), INTS(op##_i64), INTS(op##_u8), \
                     INTS(op##_u16), INTS(op##_u32), INTS(op##_u64), FLOATS(op##_f32), FLOATS(op##_f64)}
#define ROW_NUM(op) {NULL, INTS(op##_i8), INTS(op##_i16), INTS(op##_i32), INTS(op##_i64), INTS(op##_u8), \
                     INTS(op##_u16), INTS(op##_u32), INTS(op##_u64), FLOATS(op##_f32), FLOATS(op##_f64)}
#define ROW_INT_BOOL(op) {INTS(op##_b), INTS(op##_i8), INTS(op##_i16), INTS(op##_i32), INTS(op##_i64), INTS(op##_u8), \
                          INTS(op##_u16), INTS(op##_u32), INTS(op##_u64), NULL, NULL}
#define ROW_INT(op) {NULL, INTS(op##_i8), INTS(op##_i16), INTS(op##_i32), INTS(op##_i64), INTS(op##_u8), \
                     INTS(op##_u16), INTS(op##_u32), INTS(op##_u64), NULL, NULL}
#define ROW_FLOAT(op) {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, FLOATS(op##_f32), FLOATS(op##_f64)}
/* integers keep their value: floor, ceil, round and trunc of an integer dtype are the integer */
#define ROW_ROUNDING(op) {INTS(same_b), INTS(same_i8), INTS(same_i16), INTS(same_i32), INTS(same_i64), \
                          INTS(same_u8), INTS(same_u16), INTS(same_u32), INTS(same_u64), \
                          FLOATS(op##_f32), FLOATS(op##_f64)}
#define ROW_CLASSIFY(op, ints) {INTS(ints##_b), INTS(ints##_i8), INTS(ints##_i16), INTS(ints##_i32), \
                                INTS(ints##_i64), INTS(ints##_u8), INTS(ints##_u16), INTS(ints##_u32), \
                                INTS(ints##_u64), FLOATS(op##_f32), FLOATS(op##_f64)}

#define OP_TABLE(ROW_ALL, ROW_NUM, ROW_INT_BOOL, ROW_INT, ROW_FLOAT, ROW_ROUNDING, ROW_CLASSIFY) \
  { \
  [DLP_OP_ADD] = ROW_ALL(add), \
  [DLP_OP_SUB] = ROW_NUM(sub), \
  [DLP_OP_MUL] = ROW_ALL(mul), \
  [DLP_OP_DIV] = ROW_FLOAT(div), \
  [DLP_OP_IDIV] = ROW_NUM(idiv), \
  [DLP_OP_MOD] = ROW_NUM(mod), \
  [DLP_OP_POW] = ROW_NUM(pow), \
  [DLP_OP_MAXIMUM] = ROW_ALL(max), \
  [DLP_OP_MINIMUM] = ROW_ALL(min), \
  [DLP_OP_EQ] = ROW_ALL(eq), \
  [DLP_OP_NE] = ROW_ALL(ne), \
  [DLP_OP_LT] = ROW_ALL(lt), \
  [DLP_OP_LE] = ROW_ALL(le), \
  [DLP_OP_GT] = ROW_ALL(gt), \
  [DLP_OP_GE] = ROW_ALL(ge), \
  [DLP_OP_LOGICAL_AND] = ROW_ALL(land), \
  [DLP_OP_LOGICAL_OR] = ROW_ALL(lor), \
  [DLP_OP_LOGICAL_XOR] = ROW_ALL(lxor), \
  [DLP_OP_BAND] = ROW_INT_BOOL(band), \
  [DLP_OP_BOR] = ROW_INT_BOOL(bor), \
  [DLP_OP_BXOR] = ROW_INT_BOOL(bxor), \
  [DLP_OP_SHL] = ROW_INT(shl), \
  [DLP_OP_SHR] = ROW_INT(shr), \
  [DLP_OP_WHERE] = ROW_ALL(where), \
  [DLP_OP_CLAMP] = ROW_ALL(clamp), \
  [DLP_OP_NEG] = ROW_NUM(neg), \
  [DLP_OP_ABS] = ROW_ALL(abs), \
  [DLP_OP_SIGN] = ROW_NUM(sign), \
  [DLP_OP_SQRT] = ROW_FLOAT(sqrt), \
  [DLP_OP_EXP] = ROW_FLOAT(exp), \
  [DLP_OP_LOG] = ROW_FLOAT(log), \
  [DLP_OP_LOG1P] = ROW_FLOAT(log1p), \
  [DLP_OP_EXPM1] = ROW_FLOAT(expm1), \
  [DLP_OP_SIN] = ROW_FLOAT(sin), \
  [DLP_OP_COS] = ROW_FLOAT(cos), \
  [DLP_OP_TAN] = ROW_FLOAT(tan), \
  [DLP_OP_TANH] = ROW_FLOAT(tanh), \
  [DLP_OP_SIGMOID] = ROW_FLOAT(sigmoid), \
  [DLP_OP_FLOOR] = ROW_ROUNDING(floor), \
  [DLP_OP_CEIL] = ROW_ROUNDING(ceil), \
  [DLP_OP_ROUND] = ROW_ROUNDING(round), \
  [DLP_OP_TRUNC] = ROW_ROUNDING(trunc), \
  [DLP_OP_ISNAN] = ROW_CLASSIFY(isnan, false), \
  [DLP_OP_ISINF] = ROW_CLASSIFY(isinf, false), \
  [DLP_OP_ISFINITE] = ROW_CLASSIFY(isfinite, true), \
  [DLP_OP_LOGICAL_NOT] = ROW_ALL(lnot), \
  [DLP_OP_BNOT] = ROW_INT_BOOL(bnot), \
  [DLP_OP_LOG2] = ROW_FLOAT(log2), \
  [DLP_OP_LOG10] = ROW_FLOAT(log10), \
  [DLP_OP_ASIN] = ROW_FLOAT(asin), \
  [DLP_OP_ACOS] = ROW_FLOAT(acos), \
  [DLP_OP_ATAN] = ROW_FLOAT(atan), \
  [DLP_OP_SINH] = ROW_FLOAT(sinh), \
  [DLP_OP_COSH] = ROW_FLOAT(cosh), \
  [DLP_OP_ERF] = ROW_FLOAT(erf), \
  [DLP_OP_RSQRT] = ROW_FLOAT(rsqrt), \
  [DLP_OP_RECIPROCAL] = ROW_NUM(recip), \
  [DLP_OP_SQUARE] = ROW_NUM(square), \
  [DLP_OP_ATAN2] = ROW_FLOAT(atan2), \
  [DLP_OP_HYPOT] = ROW_FLOAT(hypot), \
  }
/* complex64 and complex128 (compute indices DLP_NCOMPUTE and one more): the operations NumPy 2
 * defines for complex, less those that order (maximum, minimum, clamp, the comparisons lt le gt
 * ge, which NumPy orders lexicographically: the module refuses them, as its reductions do) */
#define COMPLEX_TABLE(ROW, MORE) \
  { \
  [DLP_OP_ADD] = ROW(add), [DLP_OP_SUB] = ROW(sub), [DLP_OP_MUL] = ROW(mul), [DLP_OP_DIV] = ROW(div), \
  [DLP_OP_POW] = ROW(pow), [DLP_OP_EQ] = ROW(eq), [DLP_OP_NE] = ROW(ne), [DLP_OP_LOGICAL_AND] = ROW(land), \
  [DLP_OP_LOGICAL_OR] = ROW(lor), [DLP_OP_LOGICAL_XOR] = ROW(lxor), [DLP_OP_WHERE] = ROW(where), \
  [DLP_OP_NEG] = ROW(neg), [DLP_OP_ABS] = ROW(abs), [DLP_OP_SIGN] = ROW(sign), [DLP_OP_SQRT] = ROW(sqrt), \
  [DLP_OP_EXP] = ROW(exp), [DLP_OP_LOG] = ROW(log), [DLP_OP_LOG1P] = ROW(log1p), [DLP_OP_EXPM1] = ROW(expm1), \
  [DLP_OP_SIN] = ROW(sin), [DLP_OP_COS] = ROW(cos), [DLP_OP_TAN] = ROW(tan), [DLP_OP_TANH] = ROW(tanh), \
  [DLP_OP_ROUND] = ROW(round), [DLP_OP_ISNAN] = ROW(isnan), [DLP_OP_ISINF] = ROW(isinf), \
  [DLP_OP_ISFINITE] = ROW(isfinite), [DLP_OP_LOGICAL_NOT] = ROW(lnot), [DLP_OP_LOG2] = ROW(log2), \
  [DLP_OP_LOG10] = ROW(log10), [DLP_OP_RECIPROCAL] = ROW(recip), [DLP_OP_SQUARE] = ROW(square), MORE(ROW) \
  }
#if DLP_KERNELS_GROUP < 2
static const dlp_IterLoop loops[DLP_OP_COUNT][DLP_NCOMPUTE] =
  OP_TABLE(ROW_ALL, ROW_NUM, ROW_INT_BOOL, ROW_INT, ROW_FLOAT, ROW_ROUNDING, ROW_CLASSIFY);
#if defined(DLP_KERNELS_AVX512) && DLP_KERNELS_GROUP == 1
/* the loops written with AVX-512 intrinsics (above) in place of the table's */
static dlp_IterLoop loop_at(int op, int k) {
  if (k == 9) {
    switch (op) {
      case DLP_OP_EXP: return exp_f32_zmm;
      case DLP_OP_SIGMOID: return sigmoid_f32_zmm;
      case DLP_OP_LOG: return log_f32_zmm;
      case DLP_OP_TANH: return tanh_f32_zmm;
      case DLP_OP_SIN: return sin_f32_zmm;
      case DLP_OP_COS: return cos_f32_zmm;
      case DLP_OP_POW: return pow_f32_zmm;
      default: break;
    }
  }
  return loops[op][k];
}
#else
static dlp_IterLoop loop_at(int op, int k) { return loops[op][k]; }
#endif
#else

#define ROW_COMPLEX(op) {op##_c64, op##_c128}
static const dlp_IterLoop complex_loops[DLP_OP_COUNT][2] = COMPLEX_TABLE(ROW_COMPLEX, CPU_ONLY_ROWS);

static dlp_IterLoop loop_at(int op, int k) { return complex_loops[op][k - DLP_NCOMPUTE]; }
#endif

/* The loops of this object's group, by operation and compute index (of a dtype of the group). */
dlp_IterLoop GROUP_LOOKUP(DLP_KERNELS_GROUP)(int op, int k);
dlp_IterLoop GROUP_LOOKUP(DLP_KERNELS_GROUP)(int op, int k) { return loop_at(op, k); }

#if DLP_KERNELS_GROUP == 0
/* the mixed loops of eq ne lt le gt ge: [op - DLP_OP_EQ][0] int64 first, [1] uint64 first */
static const dlp_IterLoop mixed_loops[6][2] = {
  {INTS(eq_i64_u64), INTS(eq_u64_i64)}, {INTS(ne_i64_u64), INTS(ne_u64_i64)}, {INTS(lt_i64_u64), INTS(lt_u64_i64)},
  {INTS(le_i64_u64), INTS(le_u64_i64)}, {INTS(gt_i64_u64), INTS(gt_u64_i64)}, {INTS(ge_i64_u64), INTS(ge_u64_i64)},
};

#ifdef DLP_KERNELS_AVX2
/* This file compiled a second time with -mavx2 (see the Makefile): the same loops, twice as wide. */
dlp_IterLoop dlp_mixed_kernel_avx2(int op, int x_unsigned);
dlp_IterLoop dlp_mixed_kernel_avx2(int op, int x_unsigned) { return mixed_loops[op - DLP_OP_EQ][x_unsigned]; }
#else
int dlp_compute_index(int dtype) {
  switch (dtype) {
    case DLP_BOOL: return 0;
    case DLP_INT8: return 1;
    case DLP_INT16: return 2;
    case DLP_INT32: return 3;
    case DLP_INT64: return 4;
    case DLP_UINT8: return 5;
    case DLP_UINT16: return 6;
    case DLP_UINT32: return 7;
    case DLP_UINT64: return 8;
    case DLP_FLOAT32: return 9;
    case DLP_FLOAT64: return 10;
    case DLP_COMPLEX64: return DLP_NCOMPUTE;
    case DLP_COMPLEX128: return DLP_NCOMPUTE + 1;
    default: return -1;
  }
}


/* The same table as names of the CUDA kernels (kernels.cu names them dlp_<loop>). */
#define N(op, t) "dlp_" #op "_" #t
#define NAME_ALL(op) {N(op, b), N(op, i8), N(op, i16), N(op, i32), N(op, i64), N(op, u8), N(op, u16), N(op, u32), \
                      N(op, u64), N(op, f32), N(op, f64)}
#define NAME_NUM(op) {NULL, N(op, i8), N(op, i16), N(op, i32), N(op, i64), N(op, u8), N(op, u16), N(op, u32), \
                      N(op, u64), N(op, f32), N(op, f64)}
#define NAME_INT_BOOL(op) {N(op, b), N(op, i8), N(op, i16), N(op, i32), N(op, i64), N(op, u8), N(op, u16), \
                           N(op, u32), N(op, u64), NULL, NULL}
#define NAME_INT(op) {NULL, N(op, i8), N(op, i16), N(op, i32), N(op, i64), N(op, u8), N(op, u16), N(op, u32), \
                      N(op, u64), NULL, NULL}
#define NAME_FLOAT(op) {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, N(op, f32), N(op, f64)}
#define NAME_ROUNDING(op) {N(same, b), N(same, i8), N(same, i16), N(same, i32), N(same, i64), N(same, u8), \
                           N(same, u16), N(same, u32), N(same, u64), N(op, f32), N(op, f64)}
#define NAME_CLASSIFY(op, ints) {N(ints, b), N(ints, i8), N(ints, i16), N(ints, i32), N(ints, i64), N(ints, u8), \
                                 N(ints, u16), N(ints, u32), N(ints, u64), N(op, f32), N(op, f64)}
static const char *const kernel_names[DLP_OP_COUNT][DLP_NCOMPUTE] =
  OP_TABLE(NAME_ALL, NAME_NUM, NAME_INT_BOOL, NAME_INT, NAME_FLOAT, NAME_ROUNDING, NAME_CLASSIFY);
#define NO_ROWS(ROW)
#define NAME_COMPLEX(op) {N(op, c64), N(op, c128)}
static const char *const complex_names[DLP_OP_COUNT][2] = COMPLEX_TABLE(NAME_COMPLEX, NO_ROWS);
static const char *const mixed_names[6][2] = {
  {N(eq, i64_u64), N(eq, u64_i64)}, {N(ne, i64_u64), N(ne, u64_i64)}, {N(lt, i64_u64), N(lt, u64_i64)},
  {N(le, i64_u64), N(le, u64_i64)}, {N(gt, i64_u64), N(gt, u64_i64)}, {N(ge, i64_u64), N(ge, u64_i64)},
};

const char *dlp_kernel_name(int op, int compute_dtype, int *family) {
  int k = dlp_compute_index(compute_dtype);
  if (op < 0 || op >= DLP_OP_COUNT || k < 0) return NULL;
  if (k >= DLP_NCOMPUTE) { /* complex64, complex128: families 32 and 33 */
    *family = 32 + k - DLP_NCOMPUTE;
    return complex_names[op][k - DLP_NCOMPUTE];
  }
  *family = k;
  return kernel_names[op][k];
}

const char *dlp_mixed_kernel_name(int op, int x_unsigned, int *family) {
  if (op < DLP_OP_EQ || op > DLP_OP_GE) return NULL;
  *family = DLP_NCOMPUTE; /* the mixed family follows the compute types' */
  return mixed_names[op - DLP_OP_EQ][!!x_unsigned];
}

dlp_IterLoop dlp_kernel_group1(int op, int k);
dlp_IterLoop dlp_kernel_group2(int op, int k);
#if DLP_HAVE_AVX2_KERNELS
dlp_IterLoop dlp_kernel_group0_avx2(int op, int k);
dlp_IterLoop dlp_kernel_group1_avx2(int op, int k);
dlp_IterLoop dlp_kernel_group2_avx2(int op, int k);
dlp_IterLoop dlp_mixed_kernel_avx2(int op, int x_unsigned);
#endif
#if DLP_HAVE_AVX512_KERNELS
dlp_IterLoop dlp_kernel_group1_avx512(int op, int k);
#endif

/* The loops are chosen at run time by platform.h's dlp_cpu_level: on AVX-512 processors the
 * AVX-512 copy of the floats and the AVX2 copy of the others (see the Makefile), on AVX2 ones the
 * AVX2 copy. Results are the same bit for bit (no FMA contraction, the same operations in the
 * same order), but for the AVX-512 build's float32 exp and sigmoid, a last place apart at most. */
dlp_IterLoop dlp_kernel(int op, int compute_dtype) {
  int k = dlp_compute_index(compute_dtype);
  if (op < 0 || op >= DLP_OP_COUNT || k < 0) return NULL;
  int group = k < 9 ? 0 : k < DLP_NCOMPUTE ? 1 : 2; /* bool and the integers, the floats, complex */
#if DLP_HAVE_AVX512_KERNELS
  if (group == 1 && dlp_cpu_level() >= DLP_CPU_AVX512) return dlp_kernel_group1_avx512(op, k);
#endif
#if DLP_HAVE_AVX2_KERNELS
  if (dlp_cpu_has_avx2()) {
    static dlp_IterLoop (*const groups_avx2[3])(int, int) = {dlp_kernel_group0_avx2, dlp_kernel_group1_avx2,
                                                               dlp_kernel_group2_avx2};
    return groups_avx2[group](op, k);
  }
#endif
  static dlp_IterLoop (*const groups[3])(int, int) = {dlp_kernel_group0, dlp_kernel_group1, dlp_kernel_group2};
  return groups[group](op, k);
}
dlp_IterLoop dlp_mixed_kernel(int op, int x_unsigned) {
  if (op < DLP_OP_EQ || op > DLP_OP_GE) return NULL;
  x_unsigned = !!x_unsigned;
#if DLP_HAVE_AVX2_KERNELS
  if (dlp_cpu_has_avx2()) return dlp_mixed_kernel_avx2(op, x_unsigned);
#endif
  return mixed_loops[op - DLP_OP_EQ][x_unsigned];
}

/* dlpack.cpu() -> the level whose loops run, the level the processor and system allow, the
 * output bytes from which elementwise results are stored past the cache (0: never) */
static int l_cpu(lua_State *L) {
  lua_pushstring(L, dlp_cpu_level_name(dlp_cpu_level()));
  lua_pushstring(L, dlp_cpu_level_name(dlp_cpu_detected_level()));
  lua_pushinteger(L, (lua_Integer)dlp_stream_from());
  return 3;
}

void dlp_kernels_register(lua_State *L, int module) {
  static const luaL_Reg functions[] = {{"cpu", l_cpu}, {NULL, NULL}};
  dlp_register(L, module, functions);
}
#endif
#endif
