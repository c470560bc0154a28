/* The conversion rules of one element that the CPU's conversions (convert.c) and the CUDA
 * kernels of the computing functions (src/compute/cuda/kernels.cu) share, written once: float16
 * and bfloat16 bits to and from float, floats to 64-bit integers (truncated, saturated, NaN 0),
 * and 64-bit integers to float32 in one rounding. In the subset of C11 and CUDA C++ that both
 * compilers take; nothing but the C library's math and memcpy. */
#ifndef DLPACK_LUA_CONVERT_RULES_H
#define DLPACK_LUA_CONVERT_RULES_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define DLP_CONV static __device__ __forceinline__
#else
#define DLP_CONV static inline
#endif

/* ---- float16 and bfloat16, bit by bit ---- */

DLP_CONV float dlp_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FF, bits;
  float f;
  if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float */
    f = (float)m * 5.9604644775390625e-08f;
    memcpy(&bits, &f, 4);
    bits |= sign;
  } else if (e == 31) {
    bits = sign | 0x7F800000 | (m << 13);
  } else {
    bits = sign | ((e + 112) << 23) | (m << 13);
  }
  memcpy(&f, &bits, 4);
  return f;
}

DLP_CONV float dlp_bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

DLP_CONV uint16_t dlp_f32_to_f16(float f) { /* round to nearest even */
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t a = x & 0x7FFFFFFF;
  if (a > 0x7F800000) return sign | 0x7E00;              /* NaN */
  if (a >= 0x477FF000) return sign | 0x7C00;             /* 65520 and up round to infinity */
  if (a < 0x38800000) {                                  /* below 2^-14: a subnormal half */
    float m = fabsf(f) * 16777216.0f;                    /* exact scaling (2^24): the half's mantissa */
    return sign | (uint16_t)(m + 8388608.0f - 8388608.0f); /* rounded to an integer (2^23), to nearest even */
  }
  /* rebias the exponent (-112 << 23), then drop 13 bits rounding to nearest even */
  return sign | (uint16_t)((a + 0xC8000FFF + ((a >> 13) & 1)) >> 13);
}

DLP_CONV uint16_t dlp_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)(((x >> 16) & 0x8000) | 0x7FC0); /* NaN */
  return (uint16_t)((x + 0x7FFF + ((x >> 16) & 1)) >> 16); /* to nearest even; a carry makes infinity */
}

/* ---- floats to 64-bit integers: truncated toward zero, saturated, NaN -> 0 (the limits are not
 * doubles: compared against the powers of two) ---- */

DLP_CONV int64_t dlp_sat_i64(double v) {
  return v != v ? 0 : v >= 9223372036854775808.0 ? INT64_MAX : v < -9223372036854775808.0 ? INT64_MIN : (int64_t)v;
}
DLP_CONV uint64_t dlp_sat_u64(double v) {
  return v != v || v <= 0 ? 0 : v >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)v;
}

/* ---- 64-bit integers to narrow floats in one rounding ----
 * An integer as a double rounded to odd: exact below 2^53; beyond, the last of its 53 bits is set
 * when any bit dropped was. Rounding that double once more, to a float of 24 bits or fewer
 * (float32, bfloat16, float16), then gives the integer correctly rounded, as if rounded once:
 * through a double rounded to nearest, 2^62 + 2^38 + 1 would become 2^62 in float32, not 2^62 + 2^39.
 * (float16 needs none of it: from 65520 up every integer is infinity there, and below 2^53 a
 * double is exact.) */
DLP_CONV double dlp_odd_double_beyond_2_53(uint64_t v) {
  int drop = 1; /* bits beyond 53: 1 to 11 */
  while (v >> drop >= (uint64_t)1 << 53) drop++;
  uint64_t kept = v >> drop | ((v & (((uint64_t)1 << drop) - 1)) != 0);
  return (double)kept * (double)((uint64_t)1 << drop); /* kept has 53 bits, times a power of two: exact */
}

DLP_CONV double dlp_odd_double_u(uint64_t v) {
  return v < (uint64_t)1 << 53 ? (double)v : dlp_odd_double_beyond_2_53(v);
}

DLP_CONV double dlp_odd_double_i(int64_t v) {
  if (v > -((int64_t)1 << 53) && v < (int64_t)1 << 53) return (double)v;
  double d = dlp_odd_double_beyond_2_53(v < 0 ? 0 - (uint64_t)v : (uint64_t)v);
  return v < 0 ? -d : d;
}

/* v as a double that a second rounding, dropping the low `drop` bits of its 52-bit fraction
 * (29 for float32, 45 for bfloat16), rounds as if it rounded v once. The double rounded to
 * nearest does, unless it is a midpoint of the narrow float (only there can the second rounding
 * go the other way); then the one rounded to odd. So the fast conversion serves all but a few. */
DLP_CONV int dlp_is_midpoint(double d, int drop) {
  uint64_t bits;
  memcpy(&bits, &d, sizeof bits);
  return (bits & (((uint64_t)1 << drop) - 1)) == (uint64_t)1 << (drop - 1);
}
DLP_CONV double dlp_once_double_i(int64_t v, int drop) {
  double d = (double)v;
  return dlp_is_midpoint(d, drop) ? dlp_odd_double_i(v) : d;
}
DLP_CONV double dlp_once_double_u(uint64_t v, int drop) {
  double d = (double)v;
  return dlp_is_midpoint(d, drop) ? dlp_odd_double_u(v) : d;
}

/* 64-bit integers reach float32 in one rounding, through once_double: C's own conversion would
 * do it in one where the compiler and the machine follow Annex F, but not every one does
 * (valgrind's emulation rounds through a double; older MSVC's uint64 conversion too). */
DLP_CONV float dlp_i64_to_f32(int64_t v) { return (float)dlp_once_double_i(v, 29); }
DLP_CONV float dlp_u64_to_f32(uint64_t v) { return (float)dlp_once_double_u(v, 29); }

#endif
