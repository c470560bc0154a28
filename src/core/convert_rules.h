/* The conversion of one element between the real dtypes (bool, the integers, float16, bfloat16,
 * float32, float64), and between them and complex64 and complex128 (at the end), written once
 * for both devices: convert.c builds the CPU's row kernels from it and src/compute/cuda/kernels.cu
 * the CUDA conversion kernels (and, as C, the fake driver's).
 * In the subset of C11 and CUDA C++ that both compilers take (ops.h's DLP_RULE).
 *
 * The rules are C casts': integers wrap, floats truncate toward zero and saturate (NaN gives 0),
 * anything becomes bool as "!= 0", and float16/bfloat16 round to nearest even straight from the
 * source value; 64-bit integers reach float32 and bfloat16 in one rounding (odd rounding through
 * a double where a second rounding could go the other way).
 *
 * DLP_REAL_DTYPES(X) calls X(ENUM, name, storage type, class) for each dtype; a value loaded
 * from storage with DLP_LOAD_<name> converts to dtype d with DLP_CONVERT(d, class, v), which
 * picks to_<d>_<class>: the classes are small (integers a float32 holds exactly: bool, 8- and
 * 16-bit, int32 through an int32), u32, i64, u64, flt (float16, bfloat16, float32 as float) and
 * dbl (float64). */
#ifndef DLPACK_LUA_CONVERT_RULES_H
#define DLPACK_LUA_CONVERT_RULES_H

#include "compute/complex_rules.h" /* dlp_c64, dlp_c128; ops.h: DLP_RULE, <math.h>, <stdint.h>, <string.h> */

#define DLP_REAL_DTYPES(X)                                                                     \
  X(BOOL, bool, uint8_t, small) X(INT8, int8, int8_t, small) X(INT16, int16, int16_t, small)      \
  X(INT32, int32, int32_t, small) X(INT64, int64, int64_t, i64) X(UINT8, uint8, uint8_t, small)    \
  X(UINT16, uint16, uint16_t, small) X(UINT32, uint32, uint32_t, u32) X(UINT64, uint64, uint64_t, u64) \
  X(FLOAT16, float16, uint16_t, flt) X(BFLOAT16, bfloat16, uint16_t, flt) X(FLOAT32, float32, float, flt) \
  X(FLOAT64, float64, double, dbl)
/* The same list again with a source bound, X(source..., destination...): a macro cannot expand
 * inside its own expansion, so the pairs need a second list. */
#define DLP_REAL_DESTINATIONS(X, S, s, ST, sc)                                                 \
  X(S, s, ST, sc, BOOL, bool, uint8_t, small) X(S, s, ST, sc, INT8, int8, int8_t, small)        \
  X(S, s, ST, sc, INT16, int16, int16_t, small) X(S, s, ST, sc, INT32, int32, int32_t, small)   \
  X(S, s, ST, sc, INT64, int64, int64_t, i64) X(S, s, ST, sc, UINT8, uint8, uint8_t, small)     \
  X(S, s, ST, sc, UINT16, uint16, uint16_t, small) X(S, s, ST, sc, UINT32, uint32, uint32_t, u32) \
  X(S, s, ST, sc, UINT64, uint64, uint64_t, u64) X(S, s, ST, sc, FLOAT16, float16, uint16_t, flt) \
  X(S, s, ST, sc, BFLOAT16, bfloat16, uint16_t, flt) X(S, s, ST, sc, FLOAT32, float32, float, flt) \
  X(S, s, ST, sc, FLOAT64, float64, double, dbl)

/* ---- float16 and bfloat16, bit by bit ---- */

DLP_RULE float dlp_rule_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FF, bits;
  float f;
  if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float */
    f = (float)m * 0x1p-24f;
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

DLP_RULE float dlp_rule_bfloat_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Drop the low `drop` bits of the magnitude a (an IEEE bit pattern without its sign, finite),
 * rounding to nearest even; a carry out of the mantissa lands in the exponent, as it should. */
DLP_RULE uint64_t dlp_rule_round_bits(uint64_t a, int drop) {
  uint64_t half = (uint64_t)1 << (drop - 1), rest = a & ((half << 1) - 1), kept = a >> drop;
  return kept + (rest > half || (rest == half && (kept & 1)));
}

DLP_RULE uint16_t dlp_rule_half_from_float(float f) { /* round to nearest even */
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t a = x & 0x7FFFFFFF;
  if (a > 0x7F800000) return sign | 0x7E00;              /* NaN */
  if (a >= 0x477FF000) return sign | 0x7C00;             /* 65520 and up round to infinity */
  if (a < 0x38800000) {                                  /* below 2^-14: a subnormal half */
    float m = fabsf(f) * 0x1p24f;                        /* exact scaling: the half's mantissa */
    return sign | (uint16_t)(m + 0x1p23f - 0x1p23f);     /* rounded to an integer, to nearest even */
  }
  /* rebias the exponent (-112 << 23), then drop 13 bits rounding to nearest even */
  return sign | (uint16_t)((a + 0xC8000FFF + ((a >> 13) & 1)) >> 13);
}

DLP_RULE uint16_t dlp_rule_half_from_double(double d) {
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
  return sign | (uint16_t)(dlp_rule_round_bits(a, 42) - ((uint64_t)1008 << 10));
}

DLP_RULE uint16_t dlp_rule_bfloat_from_float(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)(((x >> 16) & 0x8000) | 0x7FC0); /* NaN */
  return (uint16_t)((x + 0x7FFF + ((x >> 16) & 1)) >> 16); /* to nearest even; a carry makes infinity */
}

DLP_RULE uint16_t dlp_rule_bfloat_from_double(double d) {
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
  return sign | (uint16_t)(dlp_rule_round_bits(a, 45) - ((uint64_t)896 << 7));
}

/* ---- 64-bit integers to narrow floats in one rounding ----
 * An integer as a double rounded to odd: exact below 2^53; beyond, the last of its 53 bits is set
 * when any bit dropped was. Rounding that double once more, to a float of 24 bits or fewer
 * (float32, bfloat16, float16), then gives the integer correctly rounded, as if rounded once:
 * through a double rounded to nearest, 2^62 + 2^38 + 1 would become 2^62 in float32, not 2^62 + 2^39.
 * (float16 needs none of it: from 65520 up every integer is infinity there, and below 2^53 a
 * double is exact.) */
DLP_RULE double dlp_rule_odd_double_beyond_2_53(uint64_t v) {
  int drop = 1; /* bits beyond 53: 1 to 11 */
  while (v >> drop >= (uint64_t)1 << 53) drop++;
  uint64_t kept = v >> drop | ((v & (((uint64_t)1 << drop) - 1)) != 0);
  return (double)kept * (double)((uint64_t)1 << drop); /* kept has 53 bits, times a power of two: exact */
}

DLP_RULE double dlp_rule_odd_double_u(uint64_t v) {
  return v < (uint64_t)1 << 53 ? (double)v : dlp_rule_odd_double_beyond_2_53(v);
}

DLP_RULE double dlp_rule_odd_double_i(int64_t v) {
  if (v > -((int64_t)1 << 53) && v < (int64_t)1 << 53) return (double)v;
  double d = dlp_rule_odd_double_beyond_2_53(v < 0 ? 0 - (uint64_t)v : (uint64_t)v);
  return v < 0 ? -d : d;
}

/* v as a double that a second rounding, dropping the low `drop` bits of its 52-bit fraction
 * (29 for float32, 45 for bfloat16), rounds as if it rounded v once. The double rounded to
 * nearest does, unless it is a midpoint of the narrow float (only there can the second rounding
 * go the other way); then the one rounded to odd. So the fast conversion serves all but a few. */
DLP_RULE int dlp_rule_is_midpoint(double d, int drop) {
  uint64_t bits;
  memcpy(&bits, &d, sizeof bits);
  return (bits & (((uint64_t)1 << drop) - 1)) == (uint64_t)1 << (drop - 1);
}
DLP_RULE double dlp_rule_once_double_i(int64_t v, int drop) {
  double d = (double)v;
  return dlp_rule_is_midpoint(d, drop) ? dlp_rule_odd_double_i(v) : d;
}
DLP_RULE double dlp_rule_once_double_u(uint64_t v, int drop) {
  double d = (double)v;
  return dlp_rule_is_midpoint(d, drop) ? dlp_rule_odd_double_u(v) : d;
}

/* ---- loads: the value each dtype's storage converts from ---- */

#define DLP_LOAD_bool(v) ((int32_t)((v) != 0))
#define DLP_LOAD_int8(v) ((int32_t)(v))
#define DLP_LOAD_int16(v) ((int32_t)(v))
#define DLP_LOAD_int32(v) ((int32_t)(v))
#define DLP_LOAD_int64(v) ((int64_t)(v))
#define DLP_LOAD_uint8(v) ((int32_t)(v))
#define DLP_LOAD_uint16(v) ((int32_t)(v))
#define DLP_LOAD_uint32(v) ((uint32_t)(v))
#define DLP_LOAD_uint64(v) ((uint64_t)(v))
#define DLP_LOAD_float16(v) dlp_rule_half_to_float(v)
#define DLP_LOAD_bfloat16(v) dlp_rule_bfloat_to_float(v)
#define DLP_LOAD_float32(v) ((float)(v))
#define DLP_LOAD_float64(v) ((double)(v))

/* ---- conversions to each dtype from each class of value ---- */

#define DLP_CONVERT(d, class, v) DLP_CONVERT_(d, class, v)
#define DLP_CONVERT_(d, class, v) to_##d##_##class(v)

/* floats to integers: truncated toward zero, saturated, NaN -> 0 (the 64-bit limits are not
 * doubles: compared against powers of two) */
#define DLP_SATURATE(name, T, lo, hi) \
  DLP_RULE T name(double v) { return v != v ? 0 : v <= (double)(lo) ? (T)(lo) : v >= (double)(hi) ? (T)(hi) : (T)v; }
DLP_SATURATE(dlp_rule_sat_int8, int8_t, -128, 127)
DLP_SATURATE(dlp_rule_sat_int16, int16_t, -32768, 32767)
DLP_SATURATE(dlp_rule_sat_int32, int32_t, -2147483647 - 1, 2147483647)
DLP_SATURATE(dlp_rule_sat_uint8, uint8_t, 0, 255)
DLP_SATURATE(dlp_rule_sat_uint16, uint16_t, 0, 65535)
DLP_SATURATE(dlp_rule_sat_uint32, uint32_t, 0, 4294967295u)
DLP_RULE int64_t dlp_rule_sat_int64(double v) {
  return v != v ? 0 : v >= 0x1p63 ? INT64_MAX : v < -0x1p63 ? INT64_MIN : (int64_t)v;
}
DLP_RULE uint64_t dlp_rule_sat_uint64(double v) {
  return v != v || v <= 0 ? 0 : v >= 0x1p64 ? UINT64_MAX : (uint64_t)v;
}

/* integers wrap: from any integer as its two's complement bits */
#define DLP_TO_INTEGER(d, T)                                                                  \
  DLP_RULE T to_##d##_small(int32_t v) { return (T)(uint64_t)(int64_t)v; }                    \
  DLP_RULE T to_##d##_u32(uint32_t v) { return (T)(uint64_t)v; }                              \
  DLP_RULE T to_##d##_i64(int64_t v) { return (T)(uint64_t)v; }                               \
  DLP_RULE T to_##d##_u64(uint64_t v) { return (T)v; }                                        \
  DLP_RULE T to_##d##_flt(float v) { return dlp_rule_sat_##d((double)v); }                    \
  DLP_RULE T to_##d##_dbl(double v) { return dlp_rule_sat_##d(v); }
DLP_TO_INTEGER(int8, int8_t)
DLP_TO_INTEGER(int16, int16_t)
DLP_TO_INTEGER(int32, int32_t)
DLP_TO_INTEGER(int64, int64_t)
DLP_TO_INTEGER(uint8, uint8_t)
DLP_TO_INTEGER(uint16, uint16_t)
DLP_TO_INTEGER(uint32, uint32_t)
DLP_TO_INTEGER(uint64, uint64_t)

DLP_RULE uint8_t to_bool_small(int32_t v) { return v != 0; }
DLP_RULE uint8_t to_bool_u32(uint32_t v) { return v != 0; }
DLP_RULE uint8_t to_bool_i64(int64_t v) { return v != 0; }
DLP_RULE uint8_t to_bool_u64(uint64_t v) { return v != 0; }
DLP_RULE uint8_t to_bool_flt(float v) { return v != 0; }
DLP_RULE uint8_t to_bool_dbl(double v) { return v != 0; }

/* 64-bit integers reach float32 in one rounding, through once_double: C's own conversion would
 * do it in one where the compiler and the machine follow Annex F, but not every one does
 * (valgrind's emulation rounds through a double; older MSVC's uint64 conversion too). */
DLP_RULE float to_float32_small(int32_t v) { return (float)v; }
DLP_RULE float to_float32_u32(uint32_t v) { return (float)dlp_rule_once_double_i((int64_t)v, 29); }
DLP_RULE float to_float32_i64(int64_t v) { return (float)dlp_rule_once_double_i(v, 29); }
DLP_RULE float to_float32_u64(uint64_t v) { return (float)dlp_rule_once_double_u(v, 29); }
DLP_RULE float to_float32_flt(float v) { return v; }
DLP_RULE float to_float32_dbl(double v) { return (float)v; }

DLP_RULE double to_float64_small(int32_t v) { return (double)v; }
DLP_RULE double to_float64_u32(uint32_t v) { return (double)v; }
DLP_RULE double to_float64_i64(int64_t v) { return (double)v; }
DLP_RULE double to_float64_u64(uint64_t v) { return (double)v; }
DLP_RULE double to_float64_flt(float v) { return (double)v; }
DLP_RULE double to_float64_dbl(double v) { return v; }

DLP_RULE uint16_t to_float16_small(int32_t v) { return dlp_rule_half_from_double((double)v); }
DLP_RULE uint16_t to_float16_u32(uint32_t v) { return dlp_rule_half_from_double((double)v); }
DLP_RULE uint16_t to_float16_i64(int64_t v) { return dlp_rule_half_from_double((double)v); }
DLP_RULE uint16_t to_float16_u64(uint64_t v) { return dlp_rule_half_from_double((double)v); }
DLP_RULE uint16_t to_float16_flt(float v) { return dlp_rule_half_from_float(v); }
DLP_RULE uint16_t to_float16_dbl(double v) { return dlp_rule_half_from_double(v); }

DLP_RULE uint16_t to_bfloat16_small(int32_t v) { return dlp_rule_bfloat_from_double((double)v); }
DLP_RULE uint16_t to_bfloat16_u32(uint32_t v) { return dlp_rule_bfloat_from_double((double)v); }
DLP_RULE uint16_t to_bfloat16_i64(int64_t v) { return dlp_rule_bfloat_from_double(dlp_rule_once_double_i(v, 45)); }
DLP_RULE uint16_t to_bfloat16_u64(uint64_t v) { return dlp_rule_bfloat_from_double(dlp_rule_once_double_u(v, 45)); }
DLP_RULE uint16_t to_bfloat16_flt(float v) { return dlp_rule_bfloat_from_float(v); }
DLP_RULE uint16_t to_bfloat16_dbl(double v) { return dlp_rule_bfloat_from_double(v); }

/* ---- complex64 and complex128 (complex_rules.h's pairs) ----
 * A real value becomes the real part, converted as to float32 (complex64) or float64
 * (complex128), the imaginary part 0; a complex value gives a real dtype its real part, converted
 * as a float64 is (bool: either part nonzero); between the two widths each part converts. */
#define DLP_TO_COMPLEX64(s, sc, v) dlp_cmake_c64(DLP_CONVERT(float32, sc, DLP_LOAD_##s(v)), 0)
#define DLP_TO_COMPLEX128(s, sc, v) dlp_cmake_c128(DLP_CONVERT(float64, sc, DLP_LOAD_##s(v)), 0)
#define DLP_FROM_COMPLEX(d, z) DLP_CONVERT(d, dbl, DLP_COMPLEX_PART_##d((double)(z).re, (double)(z).im))
#define DLP_COMPLEX_PART_bool(re, im) ((re) != 0 || (im) != 0 ? 1.0 : 0.0)
#define DLP_COMPLEX_PART_int8(re, im) (re)
#define DLP_COMPLEX_PART_int16(re, im) (re)
#define DLP_COMPLEX_PART_int32(re, im) (re)
#define DLP_COMPLEX_PART_int64(re, im) (re)
#define DLP_COMPLEX_PART_uint8(re, im) (re)
#define DLP_COMPLEX_PART_uint16(re, im) (re)
#define DLP_COMPLEX_PART_uint32(re, im) (re)
#define DLP_COMPLEX_PART_uint64(re, im) (re)
#define DLP_COMPLEX_PART_float16(re, im) (re)
#define DLP_COMPLEX_PART_bfloat16(re, im) (re)
#define DLP_COMPLEX_PART_float32(re, im) (re)
#define DLP_COMPLEX_PART_float64(re, im) (re)
#define DLP_COMPLEX128_FROM_64(z) dlp_cmake_c128((double)(z).re, (double)(z).im)
#define DLP_COMPLEX64_FROM_128(z) dlp_cmake_c64((float)(z).re, (float)(z).im)

#endif
