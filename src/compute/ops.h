/* The operations of the computing functions, written once for both devices: the scalar rules
 * (NumPy's, see kernels.c) and, per family of compute types, the element expression of every
 * operation. kernels.c compiles the lists into the CPU loops; cuda/kernels.cu compiles the same
 * lists into CUDA kernels (and, for the fake driver of the specs, into C run by a loop over the
 * grid). This header is in the subset of C11 and CUDA C++ that both compilers take, and needs
 * nothing but the C library's math.
 *
 * A list calls, for each operation of the family,
 *   B(name, T, R, EXPR)      binary: x and y of type T, the result (R)(EXPR)
 *   U(name, T, R, EXPR)      unary: x of type T
 *   C(name, T, MAXF, MINF)   clamp: MINF(MAXF(x, lo), hi)
 *   W(name, T, NORM)         where: NORM(c ? x : y)
 *   M(name, TX, TY, EXPR)    binary of two types (int64 against uint64)
 * where name is the operation's short name and the family's suffix (add_f32). */
#ifndef DLPACK_LUA_OPS_H
#define DLPACK_LUA_OPS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define DLP_RULE static __device__ __forceinline__
#else
#define DLP_RULE static inline
#endif

typedef uint8_t b8; /* bool elements: any nonzero byte is true (see the bool list) */

/* ---- the scalar rules the expressions use ---- */

/* NumPy's floor division and remainder of floats (npy_divmod): a divisor of 0 gives a / b and
 * NaN; the quotient is rounded so that a == floordiv * b + mod as nearly as possible. */
DLP_RULE double floordiv_f64(double a, double b) {
  if (b == 0) return a / b;
  double mod = fmod(a, b), div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return copysign(0.0, a / b);
  double fl = floor(div);
  return div - fl > 0.5 ? fl + 1.0 : fl;
}
DLP_RULE double rem_f64(double a, double b) {
  if (b == 0) return fmod(a, b);
  double mod = fmod(a, b);
  if (mod != 0) return (b < 0) != (mod < 0) ? mod + b : mod;
  return copysign(0.0, b);
}
DLP_RULE float floordiv_f32(float a, float b) {
  if (b == 0) return a / b;
  float mod = fmodf(a, b), div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0f;
  if (div == 0) return copysignf(0.0f, a / b);
  float fl = floorf(div);
  return div - fl > 0.5f ? fl + 1.0f : fl;
}
DLP_RULE float rem_f32(float a, float b) {
  if (b == 0) return fmodf(a, b);
  float mod = fmodf(a, b);
  if (mod != 0) return (b < 0) != (mod < 0) ? mod + b : mod;
  return copysignf(0.0f, b);
}

/* NaN-propagating maximum and minimum (NumPy's maximum, minimum). */
#define FMAX(x, y) ((x) != (x) ? (x) : (y) != (y) ? (y) : (x) > (y) ? (x) : (y))
#define FMIN(x, y) ((x) != (x) ? (x) : (y) != (y) ? (y) : (x) < (y) ? (x) : (y))
#define MAX(x, y) ((x) > (y) ? (x) : (y))
#define MIN(x, y) ((x) < (y) ? (x) : (y))
/* sign of a float: 0 for both zeros, NaN for NaN (NumPy's) */
#define SIGN(x) ((x) > 0 ? 1 : (x) < 0 ? -1 : (x) == 0 ? 0 : (x))

/* Integer rules, per type: wrapping arithmetic through the unsigned type U; floor division and
 * remainder with the divisor's sign (b is never 0 here; b == -1 wraps as NumPy's does); powers
 * by squaring (exponents are never negative here); shifts past the width give 0 (or -1 for a
 * negative value shifted right), as NumPy's npy_lshift and npy_rshift. */
#define INTEGER_RULES(T, U, SIGNED, LT0)                                                                    \
  DLP_RULE T add_##T(T a, T b) { return (T)((U)a + (U)b); }                                       \
  DLP_RULE T sub_##T(T a, T b) { return (T)((U)a - (U)b); }                                       \
  DLP_RULE T mul_##T(T a, T b) { return (T)(U)(1u * (U)a * (U)b); } /* 1u: never in int */                                       \
  DLP_RULE T neg_##T(T a) { return (T)((U)0 - (U)a); }                                            \
  DLP_RULE T floordiv_##T(T a, T b) {                                                             \
    if (b == 0) return 0; /* unreachable but for dtype= narrowing a divisor to 0: no trap */            \
    if (SIGNED && b == (T)-1) return neg_##T(a);                                                       \
    T q = (T)(a / b);                                                                                  \
    if (SIGNED && (a % b != 0) && (LT0(a) != LT0(b))) q = (T)(q - 1);                                \
    return q;                                                                                          \
  }                                                                                                    \
  DLP_RULE T mod_##T(T a, T b) {                                                                  \
    if (b == 0 || (SIGNED && b == (T)-1)) return 0;                                                    \
    T r = (T)(a % b);                                                                                  \
    if (SIGNED && r != 0 && (LT0(r) != LT0(b))) r = (T)(r + b);                                      \
    return r;                                                                                          \
  }                                                                                                    \
  DLP_RULE T pow_##T(T a, T b) {                                                                  \
    U result = 1, base = (U)a;                                                                         \
    for (U e = (U)b; e; e >>= 1) {                                                                     \
      if (e & 1) result = (U)(1u * result * base);                                                     \
      base = (U)(1u * base * base);                                                                    \
    }                                                                                                  \
    return (T)result;                                                                                  \
  }                                                                                                    \
  DLP_RULE T shl_##T(T a, T b) { return (U)b < sizeof(T) * 8 ? (T)((U)a << (U)b) : 0; }           \
  DLP_RULE T shr_##T(T a, T b) {                                                                  \
    if ((U)b < sizeof(T) * 8) return (T)(a >> (U)b);                                                   \
    return LT0(a) ? (T)-1 : 0;                                                                \
  }                                                                                                    \
  DLP_RULE T abs_##T(T a) { return LT0(a) ? neg_##T(a) : a; }                                   \
  DLP_RULE T sign_##T(T a) { return (T)((a > 0) - LT0(a)); }                                    \
  /* 1 / a truncated, as NumPy's integer reciprocal (a is never 0 here: elementwise.c raises) */         \
  DLP_RULE T recip_##T(T a) { return a == 1 ? (T)1 : (SIGNED && a == (T)-1) ? (T)-1 : (T)0; }

#define SIGNED_LT0(v) ((v) < 0)
#define UNSIGNED_LT0(v) ((void)(v), 0) /* no type-limits warning for "unsigned < 0" */
INTEGER_RULES(int8_t, uint8_t, 1, SIGNED_LT0)
INTEGER_RULES(int16_t, uint16_t, 1, SIGNED_LT0)
INTEGER_RULES(int32_t, uint32_t, 1, SIGNED_LT0)
INTEGER_RULES(int64_t, uint64_t, 1, SIGNED_LT0)
INTEGER_RULES(uint8_t, uint8_t, 0, UNSIGNED_LT0)
INTEGER_RULES(uint16_t, uint16_t, 0, UNSIGNED_LT0)
INTEGER_RULES(uint32_t, uint32_t, 0, UNSIGNED_LT0)
INTEGER_RULES(uint64_t, uint64_t, 0, UNSIGNED_LT0)

/* exp for float32, written for the vectoriser (libm's expf is a call per element): x = k ln2 + r
 * with |r| <= ln2/2 (Cody and Waite's two-part ln2), exp(r) by Cephes' degree-7 polynomial, and
 * 2^k applied as two exact powers of two so that results down to the subnormals come out right.
 * Every branch is a select. Within 1 ulp of the correctly rounded result (spec/elementwise_spec). */
DLP_RULE float vexp_f32(float x) {
  float xc = x != x ? 0.0f : x < -104.0f ? -104.0f : x > 89.0f ? 89.0f : x;
  /* k = x / ln2 rounded to an integer, which adding 1.5 * 2^23 leaves in the low mantissa bits */
  float shifted = xc * 1.44269504088896341f + 12582912.0f, k = shifted - 12582912.0f;
  int32_t ki;
  memcpy(&ki, &shifted, 4);
  ki -= 0x4B400000;
  float r = xc - k * 0.693359375f + k * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t k1 = ki / 2, k2 = ki - k1; /* each in [-75, 64]: normal powers of two */
  uint32_t b1 = (uint32_t)(k1 + 127) << 23, b2 = (uint32_t)(k2 + 127) << 23;
  float s1, s2;
  memcpy(&s1, &b1, 4);
  memcpy(&s2, &b2, 4);
  float y = p * s1 * s2;
  y = x > 88.72283935546875f ? INFINITY : y;
  y = x < -103.972084045410156f ? 0.0f : y;
  return x != x ? x : y;
}

DLP_RULE float logistic_f32(float x) { return 1.0f / (1.0f + vexp_f32(-x)); }
DLP_RULE double logistic_f64(double x) { return 1.0 / (1.0 + exp(-x)); }


/* allclose's test, in float64: |x - y| <= atol + rtol * |y| (NumPy's isclose); an infinity is
 * close only to itself, NaN to nothing. */
DLP_RULE b8 dlp_rule_isclose(double x, double y, double rtol, double atol) {
  return x == y || (x - x == 0 && y - y == 0 && fabs(x - y) <= atol + rtol * fabs(y));
}

/* linspace's element i of count, from start a to stop b (create.c computes step = delta / div,
 * div = count - 1, delta = b - a): NumPy's order of operations; integer dtypes take the floor */
DLP_RULE double dlp_rule_linspace(int64_t i, int64_t count, double a, double b, double step, double div, double delta,
                                  int integer) {
  double y = (double)i;
  if (count == 1) y = y * delta;
  else if (step == 0) y = y / div * delta; /* NumPy's way for a step that underflows to 0 */
  else y = y * step;
  y = y + a;
  if (count > 1 && i == count - 1) y = b;
  return integer ? floor(y) : y;
}

/* ---- the element expressions, per family ---- */

/* every integer type, DO(suffix, C type); the two float types */
#define DLP_INTS(DO) DO(i8, int8_t) DO(i16, int16_t) DO(i32, int32_t) DO(i64, int64_t) \
                     DO(u8, uint8_t) DO(u16, uint16_t) DO(u32, uint32_t) DO(u64, uint64_t)
#define DLP_FLOATS(DO) DO(f32, float, f) DO(f64, double, )

/* integers: arithmetic wraps; same, false and true serve the rounding and classifying functions
 * (an integer is its own floor and never NaN) */
#define DLP_INT_OPS(B, U, C, s, T) \
  C(clamp_##s, T, MAX, MIN) \
  B(add_##s, T, T, add_##T(x, y)) \
  B(sub_##s, T, T, sub_##T(x, y)) \
  B(mul_##s, T, T, mul_##T(x, y)) \
  B(idiv_##s, T, T, floordiv_##T(x, y)) \
  B(mod_##s, T, T, mod_##T(x, y)) \
  B(pow_##s, T, T, pow_##T(x, y)) \
  B(max_##s, T, T, MAX(x, y)) \
  B(min_##s, T, T, MIN(x, y)) \
  B(band_##s, T, T, x & y) \
  B(bor_##s, T, T, x | y) \
  B(bxor_##s, T, T, x ^ y) \
  B(shl_##s, T, T, shl_##T(x, y)) \
  B(shr_##s, T, T, shr_##T(x, y)) \
  U(neg_##s, T, T, neg_##T(x)) \
  U(abs_##s, T, T, abs_##T(x)) \
  U(sign_##s, T, T, sign_##T(x)) \
  U(bnot_##s, T, T, ~x) \
  U(same_##s, T, T, x) \
  U(false_##s, T, b8, 0 * x) \
  U(true_##s, T, b8, 1 + 0 * x) \
  U(recip_##s, T, T, recip_##T(x)) \
  U(square_##s, T, T, mul_##T(x, x))

#define EXP_f32 vexp_f32
#define EXP_f64 exp
#define DLP_FLOAT_OPS(B, U, C, s, T, F) \
  C(clamp_##s, T, FMAX, FMIN) \
  B(add_##s, T, T, x + y) \
  B(sub_##s, T, T, x - y) \
  B(mul_##s, T, T, x * y) \
  B(div_##s, T, T, x / y) \
  B(idiv_##s, T, T, floordiv_##s(x, y)) \
  B(mod_##s, T, T, rem_##s(x, y)) \
  B(pow_##s, T, T, pow##F(x, y)) \
  B(max_##s, T, T, FMAX(x, y)) \
  B(min_##s, T, T, FMIN(x, y)) \
  U(neg_##s, T, T, -x) \
  U(abs_##s, T, T, fabs##F(x)) \
  U(sign_##s, T, T, SIGN(x)) \
  U(sqrt_##s, T, T, sqrt##F(x)) \
  U(exp_##s, T, T, EXP_##s(x)) \
  U(log_##s, T, T, log##F(x)) \
  U(log1p_##s, T, T, log1p##F(x)) \
  U(expm1_##s, T, T, expm1##F(x)) \
  U(sin_##s, T, T, sin##F(x)) \
  U(cos_##s, T, T, cos##F(x)) \
  U(tan_##s, T, T, tan##F(x)) \
  U(tanh_##s, T, T, tanh##F(x)) \
  U(sigmoid_##s, T, T, logistic_##s(x)) \
  U(floor_##s, T, T, floor##F(x)) \
  U(ceil_##s, T, T, ceil##F(x)) \
  U(round_##s, T, T, nearbyint##F(x)) \
  U(trunc_##s, T, T, trunc##F(x)) \
  U(isnan_##s, T, b8, x != x) \
  U(isinf_##s, T, b8, x - x != x - x && x == x) \
  U(isfinite_##s, T, b8, x - x == x - x) \
  U(log2_##s, T, T, log2##F(x)) \
  U(log10_##s, T, T, log10##F(x)) \
  U(asin_##s, T, T, asin##F(x)) \
  U(acos_##s, T, T, acos##F(x)) \
  U(atan_##s, T, T, atan##F(x)) \
  U(sinh_##s, T, T, sinh##F(x)) \
  U(cosh_##s, T, T, cosh##F(x)) \
  U(erf_##s, T, T, erf##F(x)) \
  U(rsqrt_##s, T, T, 1 / sqrt##F(x)) \
  U(recip_##s, T, T, 1 / x) \
  U(square_##s, T, T, x * x) \
  B(atan2_##s, T, T, atan2##F(x, y)) \
  B(hypot_##s, T, T, hypot##F(x, y))

/* bool: add is or, mul and, maximum or, minimum and (NumPy's bool loops). A bool byte need not
 * be 0 or 1 (frombytes, a producer's 0/255 mask): every bool expression reads a byte as true when
 * it is nonzero (TRUTH) and writes 0 or 1, as NumPy's do. */
#define TRUTH(v) ((b8)((v) != 0))
#define BMAX(x, y) TRUTH((x) | (y))
#define BMIN(x, y) (TRUTH(x) & TRUTH(y))
#define DLP_SAME(v) (v)
#define DLP_BOOL_OPS(B, U, C, W) \
  C(clamp_b, b8, BMAX, BMIN) \
  B(add_b, b8, b8, BMAX(x, y)) \
  B(mul_b, b8, b8, BMIN(x, y)) \
  B(max_b, b8, b8, BMAX(x, y)) \
  B(min_b, b8, b8, BMIN(x, y)) \
  B(band_b, b8, b8, BMIN(x, y)) \
  B(bor_b, b8, b8, BMAX(x, y)) \
  B(bxor_b, b8, b8, TRUTH(x) ^ TRUTH(y)) \
  U(abs_b, b8, b8, TRUTH(x)) \
  U(bnot_b, b8, b8, !x) \
  U(same_b, b8, b8, TRUTH(x)) \
  U(false_b, b8, b8, 0 * x) \
  U(true_b, b8, b8, 1 + 0 * x) \
  B(eq_b, b8, b8, TRUTH(x) == TRUTH(y)) \
  B(ne_b, b8, b8, TRUTH(x) != TRUTH(y)) \
  B(lt_b, b8, b8, TRUTH(x) < TRUTH(y)) \
  B(le_b, b8, b8, TRUTH(x) <= TRUTH(y)) \
  B(gt_b, b8, b8, TRUTH(x) > TRUTH(y)) \
  B(ge_b, b8, b8, TRUTH(x) >= TRUTH(y)) \
  B(land_b, b8, b8, TRUTH(x) & TRUTH(y)) \
  B(lor_b, b8, b8, BMAX(x, y)) \
  B(lxor_b, b8, b8, TRUTH(x) ^ TRUTH(y)) \
  U(lnot_b, b8, b8, !x) \
  W(where_b, b8, TRUTH)

/* comparisons, logic and where, for the integers and floats */
#define DLP_COMPARE_OPS(B, U, W, s, T) \
  B(eq_##s, T, b8, x == y) \
  B(ne_##s, T, b8, x != y) \
  B(lt_##s, T, b8, x < y) \
  B(le_##s, T, b8, x <= y) \
  B(gt_##s, T, b8, x > y) \
  B(ge_##s, T, b8, x >= y) \
  B(land_##s, T, b8, (x != 0) & (y != 0)) \
  B(lor_##s, T, b8, (x != 0) | (y != 0)) \
  B(lxor_##s, T, b8, (x != 0) ^ (y != 0)) \
  U(lnot_##s, T, b8, x == 0) \
  W(where_##s, T, DLP_SAME)

/* int64 against uint64, exactly (NumPy 2's mixed loops; their promoted dtype, float64, would
 * round both beyond 2^53): a negative int64 is below every uint64, the others compare as
 * uint64. x is the first operand's type, y the second's. */
#define DLP_MIXED_OPS(M) \
  M(eq_i64_u64, int64_t, uint64_t, (x >= 0) & ((uint64_t)x == y)) \
  M(ne_i64_u64, int64_t, uint64_t, (x < 0) | ((uint64_t)x != y)) \
  M(lt_i64_u64, int64_t, uint64_t, (x < 0) | ((uint64_t)x < y)) \
  M(le_i64_u64, int64_t, uint64_t, (x < 0) | ((uint64_t)x <= y)) \
  M(gt_i64_u64, int64_t, uint64_t, (x >= 0) & ((uint64_t)x > y)) \
  M(ge_i64_u64, int64_t, uint64_t, (x >= 0) & ((uint64_t)x >= y)) \
  M(eq_u64_i64, uint64_t, int64_t, (y >= 0) & (x == (uint64_t)y)) \
  M(ne_u64_i64, uint64_t, int64_t, (y < 0) | (x != (uint64_t)y)) \
  M(lt_u64_i64, uint64_t, int64_t, (y >= 0) & (x < (uint64_t)y)) \
  M(le_u64_i64, uint64_t, int64_t, (y >= 0) & (x <= (uint64_t)y)) \
  M(gt_u64_i64, uint64_t, int64_t, (y < 0) | (x > (uint64_t)y)) \
  M(ge_u64_i64, uint64_t, int64_t, (y < 0) | (x >= (uint64_t)y))


/* ---- reductions: the rules reduce.c and the CUDA kernels (cuda/kernels.cu) share ----
 * How an element joins an accumulator, how two partial results join, and how an accumulated
 * value is finished (stride-0 repeats, means, variances). The CPU walks each output's elements
 * in its own order (pairwise sums, see reduce.c); the kernels in slices joined in a fixed order:
 * the same rules, so that integers, bool, min/max and the arg reductions agree exactly. */

/* min/max and the arg reductions: x beats the best b when greater (max) or less (min), or when it
 * is NaN and b is not: NaN wins and stays (NumPy's maximum/argmax). Walking in order, x replaces
 * b only when it beats it, so the first of equal values (and the first NaN) stays. Two
 * candidates met out of order (partial results: v at position vi, the best b at bi): v replaces
 * b when it beats b or, neither beating the other (equal, or both NaN), comes first. */
#define DLP_BEATS_MAX(x, b, ISNAN) ((x) > (b) || (ISNAN(x) && !ISNAN(b)))
#define DLP_BEATS_MIN(x, b, ISNAN) ((x) < (b) || (ISNAN(x) && !ISNAN(b)))
#define DLP_NEVER_NAN(x) 0
#define DLP_IS_NAN(x) ((x) != (x))
#define DLP_REPLACES(BEATS, v, vi, b, bi, ISNAN) (BEATS(v, b, ISNAN) || (!BEATS(b, v, ISNAN) && (vi) < (bi)))

/* any and all: an element counts as its truth (nonzero; NaN is true), joined by or / and */
#define DLP_ANY_JOIN(a, x) ((b8)((a) | (x)))
#define DLP_ALL_JOIN(a, x) ((b8)((a) & (x)))

/* var and std: the squared deviation of x from the mean m, summed */
#define DLP_SQDEV(x, m) (((x) - (m)) * ((x) - (m)))

/* products of complex numbers (NumPy's formula), in place: a *= b */
DLP_RULE void dlp_cmul_f32(float *re, float *im, float bre, float bim) {
  float r = *re * bre - *im * bim, i = *re * bim + *im * bre;
  *re = r;
  *im = i;
}
DLP_RULE void dlp_cmul_f64(double *re, double *im, double bre, double bim) {
  double r = *re * bre - *im * bim, i = *re * bim + *im * bre;
  *re = r;
  *im = i;
}

/* A sum or product over `rep` copies of the accumulated value v (reduced dims of stride 0: the
 * copies are not walked). Integers wrap (powers by squaring); floats multiply by rep, or raise
 * to it, in double and round once; complex products by squaring in complex128. */
DLP_RULE uint64_t dlp_upow(uint64_t b, uint64_t e) {
  uint64_t r = 1;
  for (; e; e >>= 1, b *= b)
    if (e & 1) r *= b;
  return r;
}
DLP_RULE void dlp_cpow_f64(double *re, double *im, uint64_t e) {
  double rre = 1, rim = 0, bre = *re, bim = *im;
  for (; e; e >>= 1) {
    if (e & 1) dlp_cmul_f64(&rre, &rim, bre, bim);
    if (e > 1) dlp_cmul_f64(&bre, &bim, bre, bim);
  }
  *re = rre;
  *im = rim;
}
DLP_RULE uint64_t dlp_repeat_u64(int prod, uint64_t v, int64_t rep) {
  return prod ? dlp_upow(v, (uint64_t)rep) : v * (uint64_t)rep;
}
DLP_RULE float dlp_repeat_f32(int prod, float v, int64_t rep) {
  return (float)(prod ? pow(v, (double)rep) : v * (double)rep);
}
DLP_RULE double dlp_repeat_f64(int prod, double v, int64_t rep) {
  return prod ? pow(v, (double)rep) : v * (double)rep;
}
/* complex: re and im in double (complex64's converted by the caller) */
DLP_RULE void dlp_repeat_c128(int prod, double *re, double *im, int64_t rep) {
  if (prod) {
    dlp_cpow_f64(re, im, (uint64_t)rep);
  } else {
    *re *= (double)rep;
    *im *= (double)rep;
  }
}

/* mean, var, std: the accumulated value times `scale`, over `divisor` (mean: 1 / count; var:
 * repeats / max(N - correction, 0)), in the accumulator's precision as NumPy divides; std takes
 * the square root. Complex means divide each part by the divisor (dlp_divide_part_*). */
DLP_RULE float dlp_divide_f32(float v, double scale, double divisor, int root) {
  v = (float)(v * (float)scale) / (float)divisor;
  return root ? sqrtf(v) : v;
}
DLP_RULE double dlp_divide_f64(double v, double scale, double divisor, int root) {
  v = v * scale / divisor;
  return root ? sqrt(v) : v;
}
DLP_RULE float dlp_divide_part_f32(float v, double divisor) { return v / (float)divisor; }
DLP_RULE double dlp_divide_part_f64(double v, double divisor) { return v / divisor; }

/* ---- allclose's test (elementwise.c's loops and the CUDA kernels) ----
 * |x - y| <= atol + rtol * |y| in float64 (NumPy's isclose); an infinity is close only to itself,
 * NaN to nothing. Complex: the magnitudes of x - y and y, finite when both parts are. */
DLP_RULE b8 dlp_close_f64(double x, double y, double rtol, double atol) {
  return x == y || (isfinite(x) && isfinite(y) && fabs(x - y) <= atol + rtol * fabs(y));
}
DLP_RULE b8 dlp_close_c128(double xr, double xi, double yr, double yi, double rtol, double atol) {
  int finite = isfinite(xr) && isfinite(xi) && isfinite(yr) && isfinite(yi);
  return (xr == yr && xi == yi) || (finite && hypot(xr - yr, xi - yi) <= atol + rtol * hypot(yr, yi));
}

#endif
