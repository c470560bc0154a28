/* The ordered keys of sorting, written once for both devices: sort.c's radix sort on the CPU and
 * the sorting kernels of cuda/kernels.cu. In the subset of C11 and CUDA C++ that both compilers
 * take (ops.h's DLP_RULE).
 *
 * An element becomes an unsigned key whose order is the elements' order (NumPy's): unsigned
 * integers are their bits, signed ones their bits with the sign bit flipped, floats their bits
 * with every bit flipped when negative and the sign bit flipped otherwise, so that -inf < ... <
 * -0.0 < 0.0 < ... < inf; -0.0 takes 0.0's key (they are equal) and every NaN the largest key
 * (NaN after everything). Descending order flips every bit of every key.
 *
 * Then NumPy's arithmetic of median and quantile (its linear method) on the elements of a sorted
 * line, as doubles. */
#ifndef DLPACK_LUA_SORT_RULES_H
#define DLPACK_LUA_SORT_RULES_H

#include "compute/cuda/args.h" /* DLP_KD_*: the dtypes' numbers */
#include "core/convert_rules.h"  /* and ops.h */

/* A float's bits b (type T, sign bit `sign`, NaN above `inf`) made its key, without branches
 * (the CPU's loops vectorise); `special` is or'ed with whether the element is NaN or -0.0, whose
 * keys do not give their bits back. */
#define DLP_FLOAT_KEY(T, b, sign, inf, special)                                    \
  do {                                                                             \
    T neg_ = (T)0 - (T)((b & sign) != 0), key_ = (T)(b ^ (neg_ | sign));           \
    int nan_ = (T)(b & ~sign) > (T)(inf), negzero_ = b == sign;                    \
    special |= nan_ | negzero_;                                                    \
    key_ = nan_ ? (T)~(T)0 : key_;                                                 \
    b = negzero_ ? sign : key_;                                                    \
  } while (0)

#define DLP_SIGN16 ((uint16_t)0x8000u)
#define DLP_SIGN32 0x80000000u
#define DLP_SIGN64 ((uint64_t)1 << 63)
#define DLP_HALF_INF 0x7c00u
#define DLP_BFLOAT_INF 0x7f80u
#define DLP_FLOAT_INF 0x7f800000u
#define DLP_DOUBLE_INF ((uint64_t)0x7ff0000000000000u)

/* The keys of single elements (the kernels'), from their bits */
#define DLP_FLOAT_KEY_RULE(name, T, sign, inf) \
  DLP_RULE uint64_t name(T b) {                \
    int special_ = 0;                          \
    DLP_FLOAT_KEY(T, b, sign, inf, special_);  \
    (void)special_;                            \
    return b;                                  \
  }
DLP_FLOAT_KEY_RULE(dlp_key_float16, uint16_t, DLP_SIGN16, DLP_HALF_INF)
DLP_FLOAT_KEY_RULE(dlp_key_bfloat16, uint16_t, DLP_SIGN16, DLP_BFLOAT_INF)
DLP_FLOAT_KEY_RULE(dlp_key_float32, uint32_t, DLP_SIGN32, DLP_FLOAT_INF)
DLP_FLOAT_KEY_RULE(dlp_key_float64, uint64_t, DLP_SIGN64, DLP_DOUBLE_INF)
#undef DLP_FLOAT_KEY_RULE

/* ---- median and quantile ---- */

/* x rounded to the float dtype d (DLP_KD_*) and back: NumPy's operations on float32, float16 and
 * bfloat16 round each result once, which an operation in float64 followed by this gives exactly. */
DLP_RULE double dlp_round_to(int d, double x) {
  switch (d) {
    case DLP_KD_FLOAT32: return (float)x;
    case DLP_KD_FLOAT16: return dlp_rule_half_to_float(dlp_rule_half_from_double(x));
    case DLP_KD_BFLOAT16: return dlp_rule_bfloat_to_float(dlp_rule_bfloat_from_double(x));
    default: return x;
  }
}

/* The median of a line of n (d the result's dtype) from its elements a at (n - 1) / 2 and b at
 * n / 2: np.mean of the middle one or two (float16 and bfloat16 summed in float32). */
DLP_RULE double dlp_median_of(int d, int64_t n, double a, double b) {
  int acc = d == DLP_KD_FLOAT16 || d == DLP_KD_BFLOAT16 ? DLP_KD_FLOAT32 : d;
  return n % 2 ? a : dlp_round_to(d, dlp_round_to(acc, dlp_round_to(acc, a + b) / 2));
}

/* Where quantile q falls in a sorted line of n (n > 0): between the elements at *below and
 * *above, *gamma of the way. */
DLP_RULE void dlp_quantile_place(double q, int64_t n, int64_t *below, int64_t *above, double *gamma) {
  double v = q * (double)(n - 1), prev = floor(v);
  int end = v >= (double)(n - 1);
  *below = end ? n - 1 : (int64_t)prev;
  *above = end ? n - 1 : *below + 1;
  *gamma = v - prev;
}

/* NumPy's _lerp, from the nearer end: a and b the elements below and above, diff = b - a in their
 * own dtype, t = gamma as it multiplies (rounded to d when q was a weak scalar); d the result's. */
DLP_RULE double dlp_lerp(int d, double gamma, double t, double a, double b, double diff) {
  return gamma >= 0.5 ? dlp_round_to(d, b - dlp_round_to(d, diff * dlp_round_to(d, 1 - t)))
                      : dlp_round_to(d, a + dlp_round_to(d, diff * t));
}

/* b - a for signed integers of `size` bytes: wrapping in their own dtype, as NumPy subtracts */
DLP_RULE double dlp_wrapped_difference(int64_t a, int64_t b, int size) {
  uint64_t w = (uint64_t)b - (uint64_t)a;
  switch (size) {
    case 1: return (double)(int8_t)(uint8_t)w;
    case 2: return (double)(int16_t)(uint16_t)w;
    case 4: return (double)(int32_t)(uint32_t)w;
    default: return (double)(int64_t)w;
  }
}

#endif
