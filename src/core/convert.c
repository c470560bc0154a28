/* Typed loops over one row of elements: conversion between the element types that convert
 * (bool, the integers, float16, bfloat16, float32, float64, complex64, complex128), same-type
 * moves and fills. One kernel per pair of dtypes, each a plain loop the compiler vectorises
 * when both rows are contiguous. The conversion rules are those of C casts, written once per
 * destination type (store_*): integers wrap, floats truncate toward zero and saturate (NaN
 * gives 0), anything becomes bool as "~= 0", complex becomes real by its real part, and
 * float16/bfloat16 round to nearest even straight from the source value. Elements may sit at
 * any address (producers need not align them): every load and store goes through memcpy,
 * which compilers turn into plain moves. */
#include <math.h>
#include <string.h>

#include "core/convert_rules.h"
#include "internal.h"

/* ---- float16 and bfloat16, bit by bit (the rules: core/convert_rules.h) ---- */

float dlp_half_to_float(uint16_t h) { return dlp_f16_to_f32(h); }
float dlp_bfloat_to_float(uint16_t h) { return dlp_bf16_to_f32(h); }

/* Drop the low `drop` bits of the magnitude a (an IEEE bit pattern without its sign, finite),
 * rounding to nearest even; a carry out of the mantissa lands in the exponent, as it should. */
static uint64_t round_bits(uint64_t a, int drop) {
  uint64_t half = (uint64_t)1 << (drop - 1), rest = a & ((half << 1) - 1), kept = a >> drop;
  return kept + (rest > half || (rest == half && (kept & 1)));
}

static inline uint16_t float16_from_float(float f) { return dlp_f32_to_f16(f); }

uint16_t dlp_half_from_double(double d) {
  uint64_t x;
  memcpy(&x, &d, 8);
  uint16_t sign = (uint16_t)((x >> 48) & 0x8000);
  uint64_t a = x & 0x7FFFFFFFFFFFFFFF;
  if (a > 0x7FF0000000000000) return sign | 0x7E00;
  if (a >= 0x40EFFE0000000000) return sign | 0x7C00;      /* 65520 and up */
  if (a < 0x3F10000000000000) {                          /* below 2^-14 */
    double m = fabs(d) * 0x1p24;
    return sign | (uint16_t)(m + 0x1p52 - 0x1p52);
  }
  return sign | (uint16_t)(round_bits(a, 42) - ((uint64_t)1008 << 10));
}

static inline uint16_t bfloat16_from_float(float f) { return dlp_f32_to_bf16(f); }

uint16_t dlp_bfloat_from_double(double d) {
  uint64_t x;
  memcpy(&x, &d, 8);
  uint16_t sign = (uint16_t)((x >> 48) & 0x8000);
  uint64_t a = x & 0x7FFFFFFFFFFFFFFF;
  if (a > 0x7FF0000000000000) return sign | 0x7FC0;
  if (a >= 0x47EFFFF000000000) return sign | 0x7F80;      /* rounds past the largest bfloat16 */
  if (a < 0x3810000000000000) {                          /* below 2^-126: a subnormal bfloat16 */
    double m = fabs(d) * 0x1p133;
    return sign | (uint16_t)(m + 0x1p52 - 0x1p52);
  }
  return sign | (uint16_t)(round_bits(a, 45) - ((uint64_t)896 << 7));
}

/* 64-bit integers as doubles rounded to odd (core/convert_rules.h) */
double dlp_uint64_to_odd_double(uint64_t v) { return dlp_odd_double_u(v); }
double dlp_int64_to_odd_double(int64_t v) { return dlp_odd_double_i(v); }

/* ---- loads: each source type as the value it converts from ---- */

typedef struct Complex {
  double re, im;
} Complex;

#define DEFINE_LOAD(name, storage, value, expr) \
  static inline value name(const char *p) { storage v; memcpy(&v, p, sizeof v); return (value)(expr); }
DEFINE_LOAD(load_bool, uint8_t, uint8_t, v != 0)
DEFINE_LOAD(load_int8, int8_t, int8_t, v)
DEFINE_LOAD(load_int16, int16_t, int16_t, v)
DEFINE_LOAD(load_int32, int32_t, int32_t, v)
DEFINE_LOAD(load_int64, int64_t, int64_t, v)
DEFINE_LOAD(load_uint8, uint8_t, uint8_t, v)
DEFINE_LOAD(load_uint16, uint16_t, uint16_t, v)
DEFINE_LOAD(load_uint32, uint32_t, uint32_t, v)
DEFINE_LOAD(load_uint64, uint64_t, uint64_t, v)
DEFINE_LOAD(load_float16, uint16_t, float, dlp_half_to_float(v))
DEFINE_LOAD(load_bfloat16, uint16_t, float, dlp_bfloat_to_float(v))
DEFINE_LOAD(load_float32, float, float, v)
DEFINE_LOAD(load_float64, double, double, v)
#undef DEFINE_LOAD

static inline Complex load_complex64(const char *p) {
  float v[2];
  memcpy(v, p, sizeof v);
  return (Complex){v[0], v[1]};
}

static inline Complex load_complex128(const char *p) {
  Complex c;
  memcpy(&c, p, sizeof c);
  return c;
}

/* ---- conversions to each destination type, from each kind of value ---- */

/* floats to integers: truncated toward zero, saturated, NaN -> 0 */
#define DEFINE_SATURATE(name, type, lo, hi) \
  static inline type name(double v) { return v != v ? 0 : v <= (double)(lo) ? (lo) : v >= (double)(hi) ? (hi) : (type)v; }
DEFINE_SATURATE(sat_int8, int8_t, INT8_MIN, INT8_MAX)
DEFINE_SATURATE(sat_int16, int16_t, INT16_MIN, INT16_MAX)
DEFINE_SATURATE(sat_int32, int32_t, INT32_MIN, INT32_MAX)
DEFINE_SATURATE(sat_uint8, uint8_t, 0, UINT8_MAX)
DEFINE_SATURATE(sat_uint16, uint16_t, 0, UINT16_MAX)
DEFINE_SATURATE(sat_uint32, uint32_t, 0, UINT32_MAX)
#undef DEFINE_SATURATE
/* (the 64-bit ones, dlp_sat_i64 and dlp_sat_u64: core/convert_rules.h) */
/* Each to_<dtype>(x) picks the rule for the type of x: an integer (wraps, as uint64_t bits), a
 * float or double, or a Complex. */
#define INTEGER_TO(name, type, sat) \
  static inline type name##_from_bits(uint64_t v) { return (type)v; } \
  static inline type name##_from_real(double v) { return sat(v); } \
  static inline type name##_from_complex(Complex v) { return sat(v.re); }
INTEGER_TO(int8, int8_t, sat_int8)
INTEGER_TO(int16, int16_t, sat_int16)
INTEGER_TO(int32, int32_t, sat_int32)
INTEGER_TO(int64, int64_t, dlp_sat_i64) /* core/convert_rules.h */
INTEGER_TO(uint8, uint8_t, sat_uint8)
INTEGER_TO(uint16, uint16_t, sat_uint16)
INTEGER_TO(uint32, uint32_t, sat_uint32)
INTEGER_TO(uint64, uint64_t, dlp_sat_u64)
#undef INTEGER_TO
#define TO_INTEGER(name, x) \
  _Generic((x), float: name##_from_real, double: name##_from_real, Complex: name##_from_complex, \
           default: name##_from_bits)(x)

static inline uint8_t bool_from_bits(uint64_t v) { return v != 0; }
static inline uint8_t bool_from_real(double v) { return v != 0; }
static inline uint8_t bool_from_complex(Complex v) { return v.re != 0 || v.im != 0; }

/* 64-bit integers reach float32 in one rounding (core/convert_rules.h) */
static inline float float32_from_int(int64_t v) { return dlp_i64_to_f32(v); }
static inline float float32_from_uint(uint64_t v) { return dlp_u64_to_f32(v); }
static inline float float32_from_float(float v) { return v; }
static inline float float32_from_double(double v) { return (float)v; }
static inline float float32_from_complex(Complex v) { return (float)v.re; }
static inline float float32_from_int32(int32_t v) { return (float)v; } /* exact through double too */

static inline double float64_from_real(double v) { return v; }
static inline double float64_from_complex(Complex v) { return v.re; }

static inline uint16_t float16_from_double(double v) { return dlp_half_from_double(v); }
static inline uint16_t float16_from_complex(Complex v) { return dlp_half_from_double(v.re); }
static inline uint16_t bfloat16_from_double(double v) { return dlp_bfloat_from_double(v); }
static inline uint16_t bfloat16_from_complex(Complex v) { return dlp_bfloat_from_double(v.re); }
static inline uint16_t bfloat16_from_int(int64_t v) { return dlp_bfloat_from_double(dlp_once_double_i(v, 45)); }
static inline uint16_t bfloat16_from_uint(uint64_t v) { return dlp_bfloat_from_double(dlp_once_double_u(v, 45)); }

/* the imaginary part a value gives complex64 */
static inline float imag32_from_real(double v) { (void)v; return 0; }
static inline float imag32_from_complex(Complex v) { return (float)v.im; }

static inline Complex complex_from_real(double v) { return (Complex){v, 0}; }
static inline Complex complex_from_complex(Complex v) { return v; }

#define TO_BOOL(x) \
  _Generic((x), float: bool_from_real, double: bool_from_real, Complex: bool_from_complex, default: bool_from_bits)(x)
#define TO_FLOAT32(x) \
  _Generic((x), float: float32_from_float, double: float32_from_double, Complex: float32_from_complex, \
           int32_t: float32_from_int32, int16_t: float32_from_int32, int8_t: float32_from_int32, \
           uint16_t: float32_from_int32, uint8_t: float32_from_int32, uint64_t: float32_from_uint, \
           default: float32_from_int)(x)
#define TO_FLOAT64(x) _Generic((x), Complex: float64_from_complex, default: float64_from_real)(x)
#define TO_FLOAT16(x) \
  _Generic((x), float: float16_from_float, Complex: float16_from_complex, default: float16_from_double)(x)
#define TO_BFLOAT16(x) \
  _Generic((x), float: bfloat16_from_float, Complex: bfloat16_from_complex, int64_t: bfloat16_from_int, \
           uint64_t: bfloat16_from_uint, default: bfloat16_from_double)(x)
#define IMAG32(x) _Generic((x), Complex: imag32_from_complex, default: imag32_from_real)(x)
#define TO_COMPLEX(x) _Generic((x), Complex: complex_from_complex, default: complex_from_real)(x)

/* ---- stores ---- */

/* store_<dtype>(p, x): convert x (any value type) and store it */
#define store_bool(p, x) do { uint8_t v_ = TO_BOOL(x); memcpy((p), &v_, 1); } while (0)
#define store_int8(p, x) do { int8_t v_ = TO_INTEGER(int8, x); memcpy((p), &v_, 1); } while (0)
#define store_int16(p, x) do { int16_t v_ = TO_INTEGER(int16, x); memcpy((p), &v_, 2); } while (0)
#define store_int32(p, x) do { int32_t v_ = TO_INTEGER(int32, x); memcpy((p), &v_, 4); } while (0)
#define store_int64(p, x) do { int64_t v_ = TO_INTEGER(int64, x); memcpy((p), &v_, 8); } while (0)
#define store_uint8(p, x) do { uint8_t v_ = TO_INTEGER(uint8, x); memcpy((p), &v_, 1); } while (0)
#define store_uint16(p, x) do { uint16_t v_ = TO_INTEGER(uint16, x); memcpy((p), &v_, 2); } while (0)
#define store_uint32(p, x) do { uint32_t v_ = TO_INTEGER(uint32, x); memcpy((p), &v_, 4); } while (0)
#define store_uint64(p, x) do { uint64_t v_ = TO_INTEGER(uint64, x); memcpy((p), &v_, 8); } while (0)
#define store_float16(p, x) do { uint16_t v_ = TO_FLOAT16(x); memcpy((p), &v_, 2); } while (0)
#define store_bfloat16(p, x) do { uint16_t v_ = TO_BFLOAT16(x); memcpy((p), &v_, 2); } while (0)
#define store_float32(p, x) do { float v_ = TO_FLOAT32(x); memcpy((p), &v_, 4); } while (0)
#define store_float64(p, x) do { double v_ = TO_FLOAT64(x); memcpy((p), &v_, 8); } while (0)
#define store_complex64(p, x) do { float v_[2] = {TO_FLOAT32(x), IMAG32(x)}; memcpy((p), v_, 8); } while (0)
#define store_complex128(p, x) do { Complex c_ = TO_COMPLEX(x); memcpy((p), &c_, 16); } while (0)

/* ---- the kernels: one per (source, destination) pair ---- */

/* X(dtype enum suffix, name used above, itemsize) for every convertible dtype */
#define CONVERTIBLE(X)                                                                          \
  X(BOOL, bool, 1) X(INT8, int8, 1) X(INT16, int16, 2) X(INT32, int32, 4) X(INT64, int64, 8)    \
  X(UINT8, uint8, 1) X(UINT16, uint16, 2) X(UINT32, uint32, 4) X(UINT64, uint64, 8)             \
  X(FLOAT16, float16, 2) X(BFLOAT16, bfloat16, 2) X(FLOAT32, float32, 4) X(FLOAT64, float64, 8) \
  X(COMPLEX64, complex64, 8) X(COMPLEX128, complex128, 16)

#define KERNEL(S, s, ssz, D, d, dsz)                                                           \
  static void convert_##s##_##d(char *dp, int64_t dstep, const char *sp, int64_t sstep, int64_t n) { \
    if (dstep == dsz && sstep == ssz) {                                                         \
      for (int64_t i = 0; i < n; i++) store_##d(dp + i * dsz, load_##s(sp + i * ssz));          \
    } else {                                                                                    \
      for (int64_t i = 0; i < n; i++) store_##d(dp + i * dstep, load_##s(sp + i * sstep));      \
    }                                                                                           \
  }
/* The same dtypes again, with a source bound: a macro cannot expand inside its own expansion, so
 * the pairs need a second list. KERNELS_FROM defines a source's kernels, ENTRIES_FROM its row of
 * the table. */
#define EACH_DESTINATION(X, S, s, ssz)                                                           \
  X(S, s, ssz, BOOL, bool, 1) X(S, s, ssz, INT8, int8, 1) X(S, s, ssz, INT16, int16, 2)          \
  X(S, s, ssz, INT32, int32, 4) X(S, s, ssz, INT64, int64, 8)                                    \
  X(S, s, ssz, UINT8, uint8, 1) X(S, s, ssz, UINT16, uint16, 2)                                  \
  X(S, s, ssz, UINT32, uint32, 4) X(S, s, ssz, UINT64, uint64, 8)                                \
  X(S, s, ssz, FLOAT16, float16, 2) X(S, s, ssz, BFLOAT16, bfloat16, 2)                          \
  X(S, s, ssz, FLOAT32, float32, 4) X(S, s, ssz, FLOAT64, float64, 8)                            \
  X(S, s, ssz, COMPLEX64, complex64, 8) X(S, s, ssz, COMPLEX128, complex128, 16)
#define KERNELS_FROM(S, s, ssz) EACH_DESTINATION(KERNEL, S, s, ssz)
CONVERTIBLE(KERNELS_FROM)
#undef KERNELS_FROM
#undef KERNEL

#define ENTRY(S, s, ssz, D, d, dsz) [DLP_##S][DLP_##D] = convert_##s##_##d,
#define ENTRIES_FROM(S, s, ssz) EACH_DESTINATION(ENTRY, S, s, ssz)
static const dlp_RowFn converters[DLP_COMPLEX128 + 1][DLP_COMPLEX128 + 1] = {CONVERTIBLE(ENTRIES_FROM)};
#undef ENTRIES_FROM
#undef ENTRY
#undef EACH_DESTINATION

/* ---- same-type moves and fills ---- */

#define DEFINE_MOVE(size)                                                                        \
  static void move_##size(char *d, int64_t ds, const char *s, int64_t ss, int64_t n) {          \
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
