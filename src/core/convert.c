/* Typed loops over one row of elements: conversion between the element types that convert
 * (bool, the integers, float16, bfloat16, float32, float64, complex64, complex128), same-type
 * moves and fills. One kernel per pair of dtypes, each a plain loop the compiler vectorises
 * when both rows are contiguous. The conversion of one element between real dtypes is
 * convert_rules.h's, shared with the CUDA kernels: integers wrap, floats truncate toward zero and
 * saturate (NaN gives 0), anything becomes bool as "~= 0", and float16/bfloat16 round to nearest
 * even straight from the source value; complex becomes real by its real part. Elements may sit at
 * any address (producers need not align them): every load and store goes through memcpy,
 * which compilers turn into plain moves. */
#include <math.h>
#include <string.h>

#include "core/convert_rules.h"
#include "internal.h"

/* ---- the exported scalar conversions (dtype.c, random.c, values.c use them) ---- */

float dlp_half_to_float(uint16_t h) { return dlp_rule_half_to_float(h); }
float dlp_bfloat_to_float(uint16_t h) { return dlp_rule_bfloat_to_float(h); }
uint16_t dlp_half_from_double(double d) { return dlp_rule_half_from_double(d); }
uint16_t dlp_bfloat_from_double(double d) { return dlp_rule_bfloat_from_double(d); }
double dlp_uint64_to_odd_double(uint64_t v) { return dlp_rule_odd_double_u(v); }
double dlp_int64_to_odd_double(int64_t v) { return dlp_rule_odd_double_i(v); }

/* ---- the kernels: one per (source, destination) pair ---- */

#define STORE(p, T, x) do { T v_ = (x); memcpy((p), &v_, sizeof v_); } while (0)
#define ROW(ssz, dsz, ...)                                                               \
  if (dstep == (dsz) && sstep == (ssz)) {                                                       \
    for (int64_t i = 0; i < n; i++) { const char *sp_ = sp + i * (ssz); char *dp_ = dp + i * (dsz); __VA_ARGS__ } \
  } else {                                                                                      \
    for (int64_t i = 0; i < n; i++) { const char *sp_ = sp + i * sstep; char *dp_ = dp + i * dstep; __VA_ARGS__ } \
  }

/* real to real: convert_rules.h, as the CUDA kernels do */
#define REAL_PAIR(S, s, ST, sc, D, d, DT, dc)                                                   \
  static void convert_##s##_##d(char *dp, int64_t dstep, const char *sp, int64_t sstep, int64_t n) { \
    ROW((int64_t)sizeof(ST), (int64_t)sizeof(DT),                                               \
        ST v; memcpy(&v, sp_, sizeof v); STORE(dp_, DT, DLP_CONVERT(d, sc, DLP_LOAD_##s(v)));) \
  }
#define REAL_PAIRS_FROM(S, s, ST, sc) DLP_REAL_DESTINATIONS(REAL_PAIR, S, s, ST, sc)
DLP_REAL_DTYPES(REAL_PAIRS_FROM)

/* complex: convert_rules.h's rules, as the CUDA kernels */
#define TO_COMPLEX(S, s, ST, sc)                                                                  \
  static void convert_##s##_complex64(char *dp, int64_t dstep, const char *sp, int64_t sstep, int64_t n) { \
    ROW((int64_t)sizeof(ST), 8, ST v; memcpy(&v, sp_, sizeof v); STORE(dp_, dlp_c64, DLP_TO_COMPLEX64(s, sc, v));) \
  }                                                                                               \
  static void convert_##s##_complex128(char *dp, int64_t dstep, const char *sp, int64_t sstep, int64_t n) { \
    ROW((int64_t)sizeof(ST), 16, ST v; memcpy(&v, sp_, sizeof v); STORE(dp_, dlp_c128, DLP_TO_COMPLEX128(s, sc, v));) \
  }
DLP_REAL_DTYPES(TO_COMPLEX)

#define FROM_COMPLEX(C, c, CT, unused, D, d, DT, dc)                                             \
  static void convert_##c##_##d(char *dp, int64_t dstep, const char *sp, int64_t sstep, int64_t n) { \
    ROW((int64_t)sizeof(CT), (int64_t)sizeof(DT), CT v; memcpy(&v, sp_, sizeof v);            \
        STORE(dp_, DT, DLP_FROM_COMPLEX(d, v));)                                                \
  }
DLP_REAL_DESTINATIONS(FROM_COMPLEX, COMPLEX64, complex64, dlp_c64, -)
DLP_REAL_DESTINATIONS(FROM_COMPLEX, COMPLEX128, complex128, dlp_c128, -)
static void convert_complex64_complex128(char *dp, int64_t dstep, const char *sp, int64_t sstep, int64_t n) {
  ROW(8, 16, dlp_c64 v; memcpy(&v, sp_, sizeof v); STORE(dp_, dlp_c128, DLP_COMPLEX128_FROM_64(v));)
}
static void convert_complex128_complex64(char *dp, int64_t dstep, const char *sp, int64_t sstep, int64_t n) {
  ROW(16, 8, dlp_c128 v; memcpy(&v, sp_, sizeof v); STORE(dp_, dlp_c64, DLP_COMPLEX64_FROM_128(v));)
}

/* float16 <-> float32 and float16 -> float64 with F16C's instructions, 8 elements at a time, when
 * the processor has them (dlp_cpu_has_f16c: the AVX2 level and F16C). They give convert_rules.h's
 * bits for every number, rounding to nearest even as the rules do; NaN is where they differ (the
 * hardware quiets a signalling NaN and keeps a float32 NaN's high payload bits, the rules keep a
 * float16 NaN's bits and make every float32 NaN 0x7E00 with its sign), so 8 elements holding a
 * NaN take the rules' loop, as do strided rows and the last few elements. */
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define HAVE_F16C_ROWS 1
#define F16C __attribute__((target("avx,f16c")))

/* Whether any of 8 float16 values is a NaN: a magnitude above infinity's (as signed 16-bit
 * numbers: magnitudes are below 2^15) */
F16C static int holds_nan_f16(__m128i h) {
  return _mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7FFF)), _mm_set1_epi16(0x7C00))) != 0;
}

F16C static void convert_float16_float32_f16c(char *dp, int64_t dstep, const char *sp, int64_t sstep, int64_t n) {
  int64_t i = 0;
  if (dstep == 4 && sstep == 2) {
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(sp + 2 * i));
      if (holds_nan_f16(h)) {
        convert_float16_float32(dp + 4 * i, 4, sp + 2 * i, 2, 8);
        continue;
      }
      _mm256_storeu_ps((float *)(void *)(dp + 4 * i), _mm256_cvtph_ps(h));
    }
  }
  convert_float16_float32(dp + i * dstep, dstep, sp + i * sstep, sstep, n - i);
}

/* float16 -> float64 through float32: both steps exact, so the rules' bits but for NaN, as above */
F16C static void convert_float16_float64_f16c(char *dp, int64_t dstep, const char *sp, int64_t sstep, int64_t n) {
  int64_t i = 0;
  if (dstep == 8 && sstep == 2) {
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(sp + 2 * i));
      if (holds_nan_f16(h)) {
        convert_float16_float64(dp + 8 * i, 8, sp + 2 * i, 2, 8);
        continue;
      }
      __m256 f = _mm256_cvtph_ps(h);
      _mm256_storeu_pd((double *)(void *)(dp + 8 * i), _mm256_cvtps_pd(_mm256_castps256_ps128(f)));
      _mm256_storeu_pd((double *)(void *)(dp + 8 * i + 32), _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)));
    }
  }
  convert_float16_float64(dp + i * dstep, dstep, sp + i * sstep, sstep, n - i);
}

F16C static void convert_float32_float16_f16c(char *dp, int64_t dstep, const char *sp, int64_t sstep, int64_t n) {
  int64_t i = 0;
  if (dstep == 2 && sstep == 4) {
    for (; i + 8 <= n; i += 8) {
      __m256 f = _mm256_loadu_ps((const float *)(const void *)(sp + 4 * i));
      if (_mm256_movemask_ps(_mm256_cmp_ps(f, f, _CMP_UNORD_Q))) {
        convert_float32_float16(dp + 2 * i, 2, sp + 4 * i, 4, 8);
        continue;
      }
      _mm_storeu_si128((__m128i *)(void *)(dp + 2 * i), _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT));
    }
  }
  convert_float32_float16(dp + i * dstep, dstep, sp + i * sstep, sstep, n - i);
}
#undef F16C
#endif

#define ENTRY(S, s, ST, sc, D, d, DT, dc) [DLP_##S][DLP_##D] = convert_##s##_##d,
#define ENTRIES_FROM(S, s, ST, sc) DLP_REAL_DESTINATIONS(ENTRY, S, s, ST, sc) \
  [DLP_##S][DLP_COMPLEX64] = convert_##s##_complex64, [DLP_##S][DLP_COMPLEX128] = convert_##s##_complex128,
static const dlp_RowFn converters[DLP_COMPLEX128 + 1][DLP_COMPLEX128 + 1] = {
  DLP_REAL_DTYPES(ENTRIES_FROM)
  DLP_REAL_DESTINATIONS(ENTRY, COMPLEX64, complex64, -, -)
  DLP_REAL_DESTINATIONS(ENTRY, COMPLEX128, complex128, -, -)
  [DLP_COMPLEX64][DLP_COMPLEX128] = convert_complex64_complex128,
  [DLP_COMPLEX128][DLP_COMPLEX64] = convert_complex128_complex64,
};
#undef ENTRIES_FROM
#undef ENTRY

/* ---- same-type moves and fills ---- */

#define DEFINE_MOVE(size)                                                                        \
  static void move_##size(char *d, int64_t ds, const char *s, int64_t ss, int64_t n) {          \
    if (n <= 0) return; /* an empty tensor's data may be NULL, which memcpy may not take */      \
    if (ds == size && ss == size) memcpy(d, s, (size_t)(n * size));                             \
    else for (int64_t i = 0; i < n; i++) memcpy(d + i * ds, s + i * ss, size);                  \
  }
DEFINE_MOVE(1)
DEFINE_MOVE(2)
DEFINE_MOVE(4)
DEFINE_MOVE(8)
DEFINE_MOVE(16)
#undef DEFINE_MOVE

dlp_RowFn dlp_row_function(int dst_dtype, int src_dtype) {
  if (dst_dtype == src_dtype) {
    switch (dlp_dtypes[dst_dtype].itemsize) {
      case 1: return move_1;
      case 2: return move_2;
      case 4: return move_4;
      case 8: return move_8;
      default: return move_16;
    }
  }
  if (dst_dtype > DLP_COMPLEX128 || src_dtype > DLP_COMPLEX128) return NULL;
#ifdef HAVE_F16C_ROWS
  if (src_dtype == DLP_FLOAT16 && dst_dtype == DLP_FLOAT32 && dlp_cpu_has_f16c()) return convert_float16_float32_f16c;
  if (src_dtype == DLP_FLOAT32 && dst_dtype == DLP_FLOAT16 && dlp_cpu_has_f16c()) return convert_float32_float16_f16c;
  if (src_dtype == DLP_FLOAT16 && dst_dtype == DLP_FLOAT64 && dlp_cpu_has_f16c()) return convert_float16_float64_f16c;
#endif
  return converters[src_dtype][dst_dtype];
}

#define DEFINE_FILL(size)                                                                        \
  static void fill_##size(char *d, int64_t ds, const void *value, int64_t n) {                  \
    char v[size];                                                                               \
    memcpy(v, value, size);                                                                     \
    if (ds == size) for (int64_t i = 0; i < n; i++) memcpy(d + i * size, v, size);              \
    else for (int64_t i = 0; i < n; i++) memcpy(d + i * ds, v, size);                           \
  }
DEFINE_FILL(2)
DEFINE_FILL(4)
DEFINE_FILL(8)
DEFINE_FILL(16)
#undef DEFINE_FILL

/* A value whose bytes are all the same fills a contiguous row with memset. */
void dlp_fill_row(char *d, int64_t ds, const void *value, int64_t n, size_t size) {
  const unsigned char *v = value;
  int same = 1;
  for (size_t k = 1; k < size; k++) same = same && v[k] == v[0];
  if (same && ds == (int64_t)size) {
    memset(d, v[0], (size_t)n * size);
    return;
  }
  switch (size) {
    case 1: for (int64_t i = 0; i < n; i++) d[i * ds] = (char)v[0]; return;
    case 2: fill_2(d, ds, value, n); return;
    case 4: fill_4(d, ds, value, n); return;
    case 8: fill_8(d, ds, value, n); return;
    default: fill_16(d, ds, value, n); return;
  }
}
