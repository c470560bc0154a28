/* The arithmetic of the random functions, written once for the CPU's generator (random.c) and the
 * CUDA kernels (kernels.cu): the deterministic logarithm randn needs, Lemire's 128-bit product,
 * and the counter-based draws of CUDA tensors. In the subset of C11 and CUDA C++ both take
 * (ops.h's DLP_RULE); every operation is one IEEE-754 rounding (no fused multiply-add: the PTX is
 * built with -fmad=false and the C with contraction off), so the numbers are the same bits on
 * every platform and GPU. docs/api.md ("Random numbers") gives each step. */
#ifndef DLPACK_LUA_RANDOM_RULES_H
#define DLPACK_LUA_RANDOM_RULES_H

#include "compute/ops.h" /* DLP_RULE, <math.h>, <stdint.h> */

#define DLP_GOLDEN 0x9e3779b97f4a7c15u

/* splitmix64's output function */
DLP_RULE uint64_t dlp_rule_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

/* Draw `attempt` of element i of a CUDA tensor made with key `key` (one draw of the lua_State's
 * generator per call): splitmix64 used as a counter-based generator, the attempt choosing the
 * stream and the element the position in it. */
DLP_RULE uint64_t dlp_rule_counter_draw(uint64_t key, uint64_t i, uint64_t attempt) {
  uint64_t stream = dlp_rule_mix64(key + (attempt + 1) * DLP_GOLDEN);
  return dlp_rule_mix64(stream + (i + 1) * DLP_GOLDEN);
}

/* The high 64 bits of a * b (and the low ones in *low), from 32-bit halves. */
DLP_RULE uint64_t dlp_rule_mul_wide(uint64_t a, uint64_t b, uint64_t *low) {
  uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
  uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
  *low = (mid << 32) | (uint32_t)p00;
  return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}

/* The natural logarithm of x (positive, finite), from IEEE-754 operations alone: x = m * 2^e
 * with m in [sqrt(1/2), sqrt(2)), then log(m) = 2 atanh(f) with f = (m - 1) / (m + 1), by its
 * series to f^25 (|f| < 0.1716: the next term is below 2^-60 of the sum). Within about 2 ulp of
 * the true value, and the same bits everywhere. */
DLP_RULE double dlp_rule_det_log(double x) {
  int e;
  double m = frexp(x, &e); /* exact: x = m * 2^e, m in [0.5, 1) */
  if (m < 0.70710678118654752440) {
    m = m * 2;
    e = e - 1;
  }
  double f = (m - 1) / (m + 1), f2 = f * f, p = 1.0 / 25;
  for (int k = 11; k >= 0; k--) p = p * f2 + 1.0 / (2 * k + 1);
  return (double)e * 0.69314718055994530942 + 2 * f * p;
}

/* rand's value from a draw x: its top `bits` bits times 2^-bits (exact in the dtype) */
DLP_RULE double dlp_rule_uniform(uint64_t x, int bits) { return (double)(x >> (64 - bits)) * ldexp(1.0, -bits); }

/* randn's u and v from a draw x: in [-1, 1), exact */
DLP_RULE double dlp_rule_signed_unit(uint64_t x) { return (double)(x >> 11) * 0x1p-52 - 1; }

/* randn's scale of an accepted pair: sqrt(-2 log(s) / s) */
DLP_RULE double dlp_rule_polar_scale(double s) { return sqrt(-2 * dlp_rule_det_log(s) / s); }

/* randn's element i of a CUDA tensor: the polar method on the pair i / 2, attempt t drawing u
 * and v from the pair's two counters; the first element of the pair is u * r, the second v * r. */
DLP_RULE double dlp_rule_counter_normal(uint64_t key, uint64_t i) {
  uint64_t first = i - (i & 1);
  for (uint64_t t = 0;; t++) {
    double u = dlp_rule_signed_unit(dlp_rule_counter_draw(key, first, t));
    double v = dlp_rule_signed_unit(dlp_rule_counter_draw(key, first + 1, t));
    double s = u * u + v * v;
    if (s < 1 && s != 0) {
      double r = dlp_rule_polar_scale(s);
      return (i & 1) ? v * r : u * r;
    }
  }
}

/* randint's offset of element i of a CUDA tensor in [0, range): Lemire's method, attempt t from
 * the element's counter in stream t. */
DLP_RULE uint64_t dlp_rule_counter_below(uint64_t key, uint64_t i, uint64_t range) {
  uint64_t low, high = dlp_rule_mul_wide(dlp_rule_counter_draw(key, i, 0), range, &low);
  if (low < range) {
    uint64_t threshold = (0 - range) % range;
    for (uint64_t t = 1; low < threshold; t++) high = dlp_rule_mul_wide(dlp_rule_counter_draw(key, i, t), range, &low);
  }
  return high;
}

#endif
