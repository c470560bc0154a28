/* Reductions: sum prod mean var std min max argmin argmax any all, over all dimensions or some,
 * on the iteration engine (iter.c). The output (an accumulator laid out as the result) is an
 * operand with byte stride 0 along the reduced dimensions, so the engine hands the loops either
 * rows of one reduced line (the output steps 0: a pairwise sum of a long contiguous row when the
 * input is contiguous there) or rows across the kept dimensions (the reduced dimension outer:
 * each row is added into a row of the output), as NumPy's reductions do.
 *
 * Accumulators: integer sums and products in 64 bits (wrapping, as NumPy's int64/uint64), floats
 * in their own type with float16/bfloat16 in float32 (rounded once at the end), floats summed
 * pairwise (NumPy's pairwise_sum: blocks of up to 128 elements with 8 accumulators, recursive
 * halving above). Inputs of another dtype than the accumulator are converted in chunks of CHUNK
 * elements (dlp_row_function), as NumPy buffers. min/max and the arg reductions walk each
 * output's elements in row-major order of the reduced dimensions, so that the first of equal
 * values (and the first NaN) wins whatever the layout.
 *
 * Reduced dimensions along which the input does not move (stride 0: expanded tensors) are not
 * walked: a sum over them is the value times their size, a product its power, min/max/any/all
 * the value itself, mean unchanged and var's squared deviations counted that many times. So a
 * reduction over an expanded dimension of 2^62 elements costs nothing. */
#include <math.h>
#include <string.h>

#include "internal.h"

enum { R_SUM, R_PROD, R_MEAN, R_VAR, R_STD, R_MIN, R_MAX, R_ARGMIN, R_ARGMAX, R_ANY, R_ALL };
static const char *const op_names[] = {"dlpack.sum", "dlpack.prod", "dlpack.mean", "dlpack.var",
                                       "dlpack.std", "dlpack.min", "dlpack.max", "dlpack.argmin",
                                       "dlpack.argmax", "dlpack.any", "dlpack.all"};

enum { K_BOOL, K_UINT, K_INT, K_FLOAT, K_COMPLEX }; /* dlp_dtype_kind */

#define CHUNK 512     /* elements converted at a time into the accumulator's dtype */
#define PW_BLOCK 128  /* NumPy's PW_BLOCKSIZE */
#define ARG_BLOCK 256 /* elements checked at once for one that beats the best so far */

static int is_ordered(int op) { return op >= R_MIN && op <= R_ARGMAX; }
static int is_arg(int op) { return op == R_ARGMIN || op == R_ARGMAX; }
static int wants_max(int op) { return op == R_MAX || op == R_ARGMAX; }

/* ---- loads (elements may sit at any address) and accumulator access (aligned buffers) ---- */

#define DEFINE_LD(name, T) \
  static inline T name(const char *p) { T v; memcpy(&v, p, sizeof v); return v; }
DEFINE_LD(ld_i8, int8_t)
DEFINE_LD(ld_i16, int16_t)
DEFINE_LD(ld_i32, int32_t)
DEFINE_LD(ld_i64, int64_t)
DEFINE_LD(ld_u8, uint8_t)
DEFINE_LD(ld_u16, uint16_t)
DEFINE_LD(ld_u32, uint32_t)
DEFINE_LD(ld_u64, uint64_t)
DEFINE_LD(ld_f32, float)
DEFINE_LD(ld_f64, double)
#undef DEFINE_LD

/* element i of an accumulator buffer, `step` bytes apart */
#define AT(T, a, i, step) (*(T *)(void *)((a) + (i) * (step)))

/* ---- pairwise sums: f(x, m) is summed over n elements, `step` bytes apart ---- */

#define PLAIN(x, m) (x)
#define SQDEV(x, m) (((x) - (m)) * ((x) - (m)))

/* One block of 8 to PW_BLOCK elements, with 8 accumulators as NumPy (r[j] sums the elements j
 * mod 8). The contiguous blocks of float32 and float64 hold the 8 accumulators in SSE-sized
 * vectors (GCC's and Clang's vector extensions), lane for lane the same sums. */
#define PW_LEAF(T, load, f, STEP)                                                                \
  do {                                                                                          \
    T r[8];                                                                                     \
    int64_t i;                                                                                  \
    for (int j = 0; j < 8; j++) r[j] = f(load(p + j * (STEP)), m);                              \
    for (i = 8; i < n - n % 8; i += 8)                                                          \
      for (int j = 0; j < 8; j++) r[j] += f(load(p + (i + j) * (STEP)), m);                     \
    T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));                  \
    for (; i < n; i++) res += f(load(p + i * (STEP)), m);                                       \
    return res;                                                                                 \
  } while (0)

#if defined(__GNUC__)
/* Vectors of GCC's and Clang's extensions: SSE-sized everywhere, AVX2-sized on x86 when the CPU
 * has AVX2 (chosen at run time: the kernels are compiled for both; no FMA, so the same sums). */
typedef float v4f __attribute__((vector_size(16)));
typedef double v2d __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
typedef int64_t v2l __attribute__((vector_size(16)));
#if defined(__x86_64__) || defined(__i386__)
#define HAVE_AVX2_VARIANT 1
typedef float v8f __attribute__((vector_size(32)));
typedef double v4d __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef int64_t v4l __attribute__((vector_size(32)));
#define AVX2 __attribute__((target("avx2")))
static int have_avx2(void) { return dlp_cpu_has_avx2(); }
#endif

/* The 8 accumulators r[0..7] of PW_LEAF in vectors of `lanes` elements, lane for lane. */
#define DEFINE_LEAF(name, ATTR, T, V, lanes, load, f)                                              \
  ATTR static T name(const char *p, int64_t n, T m) {                                             \
    V a[8 / lanes], x, mv;                                                                        \
    T r[8];                                                                                       \
    int64_t i;                                                                                    \
    for (int k = 0; k < lanes; k++) mv[k] = m;                                                    \
    (void)mv;                                                                                     \
    for (int k = 0; k < 8 / lanes; k++) {                                                         \
      memcpy(&x, p + (int64_t)sizeof(V) * k, sizeof(V));                                          \
      a[k] = f(x, mv);                                                                            \
    }                                                                                             \
    for (i = 8; i < n - n % 8; i += 8)                                                            \
      for (int k = 0; k < 8 / lanes; k++) {                                                       \
        memcpy(&x, p + i * (int64_t)sizeof(T) + (int64_t)sizeof(V) * k, sizeof(V));              \
        a[k] += f(x, mv);                                                                         \
      }                                                                                           \
    for (int k = 0; k < 8; k++) r[k] = a[k / lanes][k % lanes];                                   \
    T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));                    \
    for (; i < n; i++) res += f(load(p + i * (int64_t)sizeof(T)), m);                             \
    return res;                                                                                   \
  }
#define NO_ATTR
DEFINE_LEAF(leaf_f32_sse, NO_ATTR, float, v4f, 4, ld_f32, PLAIN)
DEFINE_LEAF(leaf_sq_f32_sse, NO_ATTR, float, v4f, 4, ld_f32, SQDEV)
DEFINE_LEAF(leaf_f64_sse, NO_ATTR, double, v2d, 2, ld_f64, PLAIN)
DEFINE_LEAF(leaf_sq_f64_sse, NO_ATTR, double, v2d, 2, ld_f64, SQDEV)
#ifdef HAVE_AVX2_VARIANT
DEFINE_LEAF(leaf_f32_avx2, AVX2, float, v8f, 8, ld_f32, PLAIN)
DEFINE_LEAF(leaf_sq_f32_avx2, AVX2, float, v8f, 8, ld_f32, SQDEV)
DEFINE_LEAF(leaf_f64_avx2, AVX2, double, v4d, 4, ld_f64, PLAIN)
DEFINE_LEAF(leaf_sq_f64_avx2, AVX2, double, v4d, 4, ld_f64, SQDEV)
#define CONTIGUOUS_LEAF(leaf) return have_avx2() ? leaf##_avx2(p, n, m) : leaf##_sse(p, n, m)
#else
#define CONTIGUOUS_LEAF(leaf) return leaf##_sse(p, n, m)
#endif
#undef DEFINE_LEAF
#else
#define CONTIGUOUS_LEAF(leaf) /* the portable loop below */
#endif

#define DEFINE_PAIRWISE(name, T, load, f, leaf)                                                  \
  static T name(const char *p, int64_t step, int64_t n, T m) {                                  \
    if (n < 8) {                                                                                \
      T res = 0;                                                                                \
      for (int64_t i = 0; i < n; i++) res += f(load(p + i * step), m);                          \
      return res;                                                                               \
    }                                                                                           \
    if (n <= PW_BLOCK) {                                                                        \
      if (step == (int64_t)sizeof(T)) {                                                         \
        CONTIGUOUS_LEAF(leaf);                                                                  \
        PW_LEAF(T, load, f, (int64_t)sizeof(T));                                                \
      }                                                                                         \
      PW_LEAF(T, load, f, step);                                                                \
    }                                                                                           \
    int64_t n2 = n / 2;                                                                         \
    n2 -= n2 % 8;                                                                               \
    return name(p, step, n2, m) + name(p + n2 * step, step, n - n2, m);                         \
  }
DEFINE_PAIRWISE(pw_f32, float, ld_f32, PLAIN, leaf_f32)
DEFINE_PAIRWISE(pw_f64, double, ld_f64, PLAIN, leaf_f64)
DEFINE_PAIRWISE(pw_sq_f32, float, ld_f32, SQDEV, leaf_sq_f32)
DEFINE_PAIRWISE(pw_sq_f64, double, ld_f64, SQDEV, leaf_sq_f64)
#undef DEFINE_PAIRWISE
#undef PW_LEAF

/* ---- sum, prod, any, all, var's squared deviations: fold n elements of x (the accumulator's
 * dtype) into acc; astep 0: all into one accumulator, else elementwise into a row ---- */

/* a[i] += x[i] over contiguous rows (the reduced dimension outer: a row added into the output) */
#if defined(__GNUC__)
#define DEFINE_ADD_ROWS(name, T, V, load)                                                         \
  static void name(char *a, const char *x, int64_t n) {                                        \
    int64_t i = 0;                                                                             \
    for (; i + (int64_t)(sizeof(V) / sizeof(T)) <= n; i += (int64_t)(sizeof(V) / sizeof(T))) { \
      V u, v;                                                                                  \
      memcpy(&u, a + i * (int64_t)sizeof(T), sizeof(V));                                       \
      memcpy(&v, x + i * (int64_t)sizeof(T), sizeof(V));                                       \
      u += v;                                                                                  \
      memcpy(a + i * (int64_t)sizeof(T), &u, sizeof(V));                                       \
    }                                                                                          \
    for (; i < n; i++) AT(T, a, i, (int64_t)sizeof(T)) += load(x + i * (int64_t)sizeof(T));    \
  }
DEFINE_ADD_ROWS(add_rows_f32, float, v4f, ld_f32)
DEFINE_ADD_ROWS(add_rows_f64, double, v2d, ld_f64)
#undef DEFINE_ADD_ROWS
#else
static void add_rows_f32(char *a, const char *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) AT(float, a, i, 4) += ld_f32(x + i * 4);
}
static void add_rows_f64(char *a, const char *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) AT(double, a, i, 8) += ld_f64(x + i * 8);
}
#endif

static void fold_sum(int acc_dtype, char *a, int64_t as, const char *x, int64_t xs, int64_t n) {
  switch (acc_dtype) {
    case DLP_FLOAT32:
      if (as == 0) AT(float, a, 0, 0) += pw_f32(x, xs, n, 0);
      else if (as == 4 && xs == 4) add_rows_f32(a, x, n);
      else for (int64_t i = 0; i < n; i++) AT(float, a, i, as) += ld_f32(x + i * xs);
      break;
    case DLP_FLOAT64:
      if (as == 0) AT(double, a, 0, 0) += pw_f64(x, xs, n, 0);
      else if (as == 8 && xs == 8) add_rows_f64(a, x, n);
      else for (int64_t i = 0; i < n; i++) AT(double, a, i, as) += ld_f64(x + i * xs);
      break;
    case DLP_COMPLEX64:
      if (as == 0) {
        AT(float, a, 0, 0) += pw_f32(x, xs, n, 0);
        AT(float, a + 4, 0, 0) += pw_f32(x + 4, xs, n, 0);
      } else {
        for (int64_t i = 0; i < n; i++) {
          AT(float, a, i, as) += ld_f32(x + i * xs);
          AT(float, a + 4, i, as) += ld_f32(x + i * xs + 4);
        }
      }
      break;
    case DLP_COMPLEX128:
      if (as == 0) {
        AT(double, a, 0, 0) += pw_f64(x, xs, n, 0);
        AT(double, a + 8, 0, 0) += pw_f64(x + 8, xs, n, 0);
      } else {
        for (int64_t i = 0; i < n; i++) {
          AT(double, a, i, as) += ld_f64(x + i * xs);
          AT(double, a + 8, i, as) += ld_f64(x + i * xs + 8);
        }
      }
      break;
    default: /* int64 and uint64: wrapping, as unsigned arithmetic */
      if (as == 0) {
        uint64_t s = 0;
        for (int64_t i = 0; i < n; i++) s += ld_u64(x + i * xs);
        AT(uint64_t, a, 0, 0) += s;
      } else {
        for (int64_t i = 0; i < n; i++) AT(uint64_t, a, i, as) += ld_u64(x + i * xs);
      }
  }
}

static void cmul_f64(double *re, double *im, double bre, double bim) {
  double r = *re * bre - *im * bim, i = *re * bim + *im * bre;
  *re = r;
  *im = i;
}

static void fold_prod(int acc_dtype, char *a, int64_t as, const char *x, int64_t xs, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const char *p = x + i * xs;
    char *q = a + i * as;
    switch (acc_dtype) {
      case DLP_FLOAT32: AT(float, q, 0, 0) *= ld_f32(p); break;
      case DLP_FLOAT64: AT(double, q, 0, 0) *= ld_f64(p); break;
      case DLP_COMPLEX64: {
        float *c = (float *)(void *)q, re = c[0], im = c[1], bre = ld_f32(p), bim = ld_f32(p + 4);
        c[0] = re * bre - im * bim;
        c[1] = re * bim + im * bre;
        break;
      }
      case DLP_COMPLEX128: {
        double *c = (double *)(void *)q;
        cmul_f64(&c[0], &c[1], ld_f64(p), ld_f64(p + 8));
        break;
      }
      default: AT(uint64_t, q, 0, 0) *= ld_u64(p);
    }
  }
}

static void fold_any_all(int all, char *a, int64_t as, const char *x, int64_t xs, int64_t n) {
  if (as == 0) {
    uint8_t r = AT(uint8_t, a, 0, 0);
    if (r != all) return; /* decided */
    for (int64_t i = 0; i < n; i++)
      if ((ld_u8(x + i * xs) != 0) != all) {
        AT(uint8_t, a, 0, 0) = (uint8_t)!all;
        return;
      }
  } else if (all) {
    for (int64_t i = 0; i < n; i++) AT(uint8_t, a, i, as) &= ld_u8(x + i * xs) != 0;
  } else {
    for (int64_t i = 0; i < n; i++) AT(uint8_t, a, i, as) |= ld_u8(x + i * xs) != 0;
  }
}

/* sum of (x - mean)^2; the mean buffer is laid out as the accumulator (same steps) */
static void fold_sqdev(int acc_dtype, char *a, int64_t as, const char *mean, const char *x, int64_t xs, int64_t n) {
  if (acc_dtype == DLP_FLOAT32) {
    if (as == 0) AT(float, a, 0, 0) += pw_sq_f32(x, xs, n, AT(float, mean, 0, 0));
    else
      for (int64_t i = 0; i < n; i++) {
        float d = ld_f32(x + i * xs) - AT(float, mean, i, as);
        AT(float, a, i, as) += d * d;
      }
  } else {
    if (as == 0) AT(double, a, 0, 0) += pw_sq_f64(x, xs, n, AT(double, mean, 0, 0));
    else
      for (int64_t i = 0; i < n; i++) {
        double d = ld_f64(x + i * xs) - AT(double, mean, i, as);
        AT(double, a, i, as) += d * d;
      }
  }
}

/* ---- min, max, argmin, argmax ----
 * rows: n elements of one output (the output steps 0), at positions pos.. of its reduced
 * elements (pos 0: the first, which starts the search); cols: n outputs, one element each, all
 * at position pos. x beats the best b when greater (max) or less (min), or when it is the first
 * NaN: NaN wins and stays, as NumPy's maximum/argmax. */
#define BEATS_MAX(x, b, ISNAN) ((x) > (b) || (ISNAN(x) && !ISNAN(b)))
#define BEATS_MIN(x, b, ISNAN) ((x) < (b) || (ISNAN(x) && !ISNAN(b)))
#define NEVER_NAN(x) 0
#define FLOAT_NAN(x) ((x) != (x))

#define DEFINE_ORDERED(name, T, load, ISNAN, BEATS, HIT)                                             \
  static void name##_rows(char *vp, char *ip, const char *x, int64_t xs, int64_t n, int64_t pos) {  \
    T b;                                                                                            \
    int64_t bi, j = 0;                                                                              \
    if (pos == 0) {                                                                                 \
      b = load(x);                                                                                  \
      bi = 0;                                                                                       \
      j = 1;                                                                                        \
    } else {                                                                                        \
      b = AT(T, vp, 0, 0);                                                                          \
      bi = AT(int64_t, ip, 0, 0);                                                                   \
    }                                                                                               \
    if (xs == (int64_t)sizeof(T)) {                                                                 \
      /* a block where no element beats b (none greater, none NaN) is skipped */                   \
      for (; j + ARG_BLOCK <= n && !ISNAN(b); j += ARG_BLOCK) {                                     \
        if (!HIT(x + j * (int64_t)sizeof(T), b)) continue;                                          \
        for (int64_t i = j; i < j + ARG_BLOCK; i++) {                                               \
          T v = load(x + i * (int64_t)sizeof(T));                                                   \
          if (BEATS(v, b, ISNAN)) {                                                                 \
            b = v;                                                                                  \
            bi = pos + i;                                                                           \
            if (ISNAN(b)) break;                                                                    \
          }                                                                                         \
        }                                                                                           \
      }                                                                                             \
    }                                                                                               \
    for (; j < n && !ISNAN(b); j++) {                                                               \
      T v = load(x + j * xs);                                                                       \
      if (BEATS(v, b, ISNAN)) {                                                                     \
        b = v;                                                                                      \
        bi = pos + j;                                                                               \
      }                                                                                             \
    }                                                                                               \
    AT(T, vp, 0, 0) = b;                                                                            \
    AT(int64_t, ip, 0, 0) = bi;                                                                     \
  }                                                                                                 \
  static void name##_cols(char *vp, int64_t vs, char *ip, int64_t is, const char *x, int64_t xs,   \
                          int64_t n, int64_t pos) {                                                 \
    for (int64_t j = 0; j < n; j++) {                                                               \
      T v = load(x + j * xs);                                                                       \
      if (pos == 0 || BEATS(v, AT(T, vp, j, vs), ISNAN)) {                                          \
        AT(T, vp, j, vs) = v;                                                                       \
        AT(int64_t, ip, j, is) = pos;                                                               \
      }                                                                                             \
    }                                                                                               \
  }
/* Does any of the ARG_BLOCK elements at x beat b? */
#define DEFINE_HIT(name, T, load, CMP)                     \
  static int name(const char *x, T b) {                   \
    int hit = 0;                                          \
    for (int i = 0; i < ARG_BLOCK; i++) hit |= load(x + i * (int64_t)sizeof(T)) CMP b; \
    return hit;                                           \
  }
#if defined(__GNUC__)
#define DEFINE_HIT_FLOAT(name, ATTR, T, V, M, lanes, NOT_CMP)                                  \
  ATTR static int name(const char *x, T b) {                                                \
    V bv = {0}, v, w;                                                                       \
    M hit = {0}, hit2 = {0};                                                                \
    for (int k = 0; k < lanes; k++) bv[k] = b;                                              \
    for (int i = 0; i < ARG_BLOCK; i += 2 * lanes) {                                        \
      memcpy(&v, x + i * (int64_t)sizeof(T), sizeof(V));                                    \
      memcpy(&w, x + (i + lanes) * (int64_t)sizeof(T), sizeof(V));                          \
      hit |= ~(v NOT_CMP bv); /* greater (less), or NaN: b is not NaN here */              \
      hit2 |= ~(w NOT_CMP bv);                                                              \
    }                                                                                       \
    hit |= hit2;                                                                            \
    for (int k = 1; k < lanes; k++) hit[0] |= hit[k];                                       \
    return hit[0] != 0;                                                                     \
  }
DEFINE_HIT_FLOAT(hit_o_f32_max_sse, NO_ATTR, float, v4f, v4i, 4, <=)
DEFINE_HIT_FLOAT(hit_o_f32_min_sse, NO_ATTR, float, v4f, v4i, 4, >=)
DEFINE_HIT_FLOAT(hit_o_f64_max_sse, NO_ATTR, double, v2d, v2l, 2, <=)
DEFINE_HIT_FLOAT(hit_o_f64_min_sse, NO_ATTR, double, v2d, v2l, 2, >=)
#ifdef HAVE_AVX2_VARIANT
DEFINE_HIT_FLOAT(hit_o_f32_max_avx2, AVX2, float, v8f, v8i, 8, <=)
DEFINE_HIT_FLOAT(hit_o_f32_min_avx2, AVX2, float, v8f, v8i, 8, >=)
DEFINE_HIT_FLOAT(hit_o_f64_max_avx2, AVX2, double, v4d, v4l, 4, <=)
DEFINE_HIT_FLOAT(hit_o_f64_min_avx2, AVX2, double, v4d, v4l, 4, >=)
#define HIT_DISPATCH(name, T) \
  static int name(const char *x, T b) { return have_avx2() ? name##_avx2(x, b) : name##_sse(x, b); }
#else
#define HIT_DISPATCH(name, T) \
  static int name(const char *x, T b) { return name##_sse(x, b); }
#endif
HIT_DISPATCH(hit_o_f32_max, float)
HIT_DISPATCH(hit_o_f32_min, float)
HIT_DISPATCH(hit_o_f64_max, double)
HIT_DISPATCH(hit_o_f64_min, double)
#undef HIT_DISPATCH
#undef DEFINE_HIT_FLOAT
#else
#define DEFINE_HIT_FLOAT(name, T, load, CMP)               \
  static int name(const char *x, T b) {                   \
    int hit = 0;                                          \
    for (int i = 0; i < ARG_BLOCK; i++) {                 \
      T v = load(x + i * (int64_t)sizeof(T));             \
      hit |= (v CMP b) | (v != v);                        \
    }                                                     \
    return hit;                                           \
  }
DEFINE_HIT_FLOAT(hit_o_f32_max, float, ld_f32, >)
DEFINE_HIT_FLOAT(hit_o_f32_min, float, ld_f32, <)
DEFINE_HIT_FLOAT(hit_o_f64_max, double, ld_f64, >)
DEFINE_HIT_FLOAT(hit_o_f64_min, double, ld_f64, <)
#undef DEFINE_HIT_FLOAT
#endif
#define DEFINE_MINMAX(name, T, load, ISNAN)                          \
  DEFINE_HIT(hit_##name##_max, T, load, >)                          \
  DEFINE_HIT(hit_##name##_min, T, load, <)                          \
  DEFINE_ORDERED(name##_max, T, load, ISNAN, BEATS_MAX, hit_##name##_max) \
  DEFINE_ORDERED(name##_min, T, load, ISNAN, BEATS_MIN, hit_##name##_min)
#define DEFINE_MINMAX_FLOAT(name, T, load)                              \
  DEFINE_ORDERED(name##_max, T, load, FLOAT_NAN, BEATS_MAX, hit_##name##_max) \
  DEFINE_ORDERED(name##_min, T, load, FLOAT_NAN, BEATS_MIN, hit_##name##_min)
DEFINE_MINMAX(o_i8, int8_t, ld_i8, NEVER_NAN)
DEFINE_MINMAX(o_i16, int16_t, ld_i16, NEVER_NAN)
DEFINE_MINMAX(o_i32, int32_t, ld_i32, NEVER_NAN)
DEFINE_MINMAX(o_i64, int64_t, ld_i64, NEVER_NAN)
DEFINE_MINMAX(o_u8, uint8_t, ld_u8, NEVER_NAN)
DEFINE_MINMAX(o_u16, uint16_t, ld_u16, NEVER_NAN)
DEFINE_MINMAX(o_u32, uint32_t, ld_u32, NEVER_NAN)
DEFINE_MINMAX(o_u64, uint64_t, ld_u64, NEVER_NAN)
DEFINE_MINMAX_FLOAT(o_f32, float, ld_f32)
DEFINE_MINMAX_FLOAT(o_f64, double, ld_f64)
#undef DEFINE_MINMAX_FLOAT
#undef DEFINE_HIT
#undef DEFINE_MINMAX
#undef DEFINE_ORDERED

typedef void (*RowsFn)(char *vp, char *ip, const char *x, int64_t xs, int64_t n, int64_t pos);
typedef void (*ColsFn)(char *vp, int64_t vs, char *ip, int64_t is, const char *x, int64_t xs, int64_t n,
                       int64_t pos);

static void ordered_kernels(int acc_dtype, int max, RowsFn *rows, ColsFn *cols) {
#define PICK(D, name)                                         \
  case D:                                                     \
    *rows = max ? name##_max_rows : name##_min_rows;          \
    *cols = max ? name##_max_cols : name##_min_cols;          \
    return;
  switch (acc_dtype) {
    PICK(DLP_INT8, o_i8)
    PICK(DLP_INT16, o_i16)
    PICK(DLP_INT32, o_i32)
    PICK(DLP_INT64, o_i64)
    PICK(DLP_UINT8, o_u8)
    PICK(DLP_UINT16, o_u16)
    PICK(DLP_UINT32, o_u32)
    PICK(DLP_UINT64, o_u64)
    PICK(DLP_FLOAT32, o_f32)
    default: PICK(DLP_FLOAT64, o_f64)
  }
#undef PICK
}

/* ---- the walk ---- */

typedef struct Walk {
  int op, acc_dtype, nops;
  dlp_RowFn conv1, conv2;   /* input -> mid -> accumulator; conv1 NULL: no conversion */
  int64_t mid_size, acc_size;
  int64_t m, K;              /* reduced elements walked per output; outputs */
  int64_t pos, visited;      /* arg rows: position in the current output; cols: elements seen */
  RowsFn rows;
  ColsFn cols;
  _Alignas(16) char buf1[CHUNK * 16];
  _Alignas(16) char buf2[CHUNK * 16];
} Walk;

/* operands: data[0] the accumulator, data[1] the index or mean buffer (when nops is 3), the
 * input last; x is the input's run, converted */
static void fold(Walk *w, char *const *data, const int64_t *steps, int nops, const char *x, int64_t xs, int64_t n) {
  switch (w->op) {
    case R_SUM: case R_MEAN: fold_sum(w->acc_dtype, data[0], steps[0], x, xs, n); break;
    case R_PROD: fold_prod(w->acc_dtype, data[0], steps[0], x, xs, n); break;
    case R_ANY: case R_ALL: fold_any_all(w->op == R_ALL, data[0], steps[0], x, xs, n); break;
    case R_VAR: case R_STD:
      if (nops == 3) fold_sqdev(w->acc_dtype, data[0], steps[0], data[1], x, xs, n);
      else fold_sum(w->acc_dtype, data[0], steps[0], x, xs, n); /* the first pass: the mean */
      break;
    default:
      if (steps[0] == 0) {
        w->rows(data[0], data[1], x, xs, n, w->pos);
        w->pos += n;
        if (w->pos == w->m) w->pos = 0;
      } else {
        w->cols(data[0], steps[0], data[1], steps[1], x, xs, n, w->visited / w->K);
        w->visited += n;
      }
  }
}

static void walk_loop(void *ctx, char *const *data, const int64_t *steps, int64_t n) {
  Walk *w = ctx;
  int nops = w->nops, in = nops - 1;
  if (!w->conv1) {
    fold(w, data, steps, nops, data[in], steps[in], n);
    return;
  }
  for (int64_t off = 0; off < n; off += CHUNK) {
    int64_t cn = n - off < CHUNK ? n - off : CHUNK;
    char *d[DLP_ITER_MAX_OPS];
    for (int k = 0; k < nops; k++) d[k] = dlp_offset(data[k], off * steps[k]);
    if (w->conv2) {
      w->conv1(w->buf1, w->mid_size, d[in], steps[in], cn);
      w->conv2(w->buf2, w->acc_size, w->buf1, w->mid_size, cn);
      fold(w, d, steps, nops, w->buf2, w->acc_size, cn);
    } else {
      w->conv1(w->buf1, w->acc_size, d[in], steps[in], cn);
      fold(w, d, steps, nops, w->buf1, w->acc_size, cn);
    }
  }
}

/* ---- finishing: stride-0 repeats, means, variances ---- */

static uint64_t upow(uint64_t b, uint64_t e) {
  uint64_t r = 1;
  for (; e; e >>= 1, b *= b)
    if (e & 1) r *= b;
  return r;
}

static void cpow_f64(double *re, double *im, uint64_t e) {
  double rre = 1, rim = 0, bre = *re, bim = *im;
  for (; e; e >>= 1) {
    if (e & 1) cmul_f64(&rre, &rim, bre, bim);
    if (e > 1) cmul_f64(&bre, &bim, bre, bim);
  }
  *re = rre;
  *im = rim;
}

/* The sum or product of `rep` copies of each accumulator (the walked value of each). */
static void repeat(int op, int acc_dtype, char *a, int64_t K, int64_t rep) {
  double r = (double)rep;
  for (int64_t i = 0; i < K; i++) {
    char *p = a + i * dlp_dtypes[acc_dtype].itemsize;
    switch (acc_dtype) {
      case DLP_FLOAT32:
        AT(float, p, 0, 0) = (float)(op == R_SUM ? AT(float, p, 0, 0) * r : pow(AT(float, p, 0, 0), r));
        break;
      case DLP_FLOAT64: {
        double *v = &AT(double, p, 0, 0);
        *v = op == R_SUM ? *v * r : pow(*v, r);
        break;
      }
      case DLP_COMPLEX64: {
        float *c = (float *)(void *)p;
        double re = c[0], im = c[1];
        if (op == R_SUM) re *= r, im *= r;
        else cpow_f64(&re, &im, (uint64_t)rep);
        c[0] = (float)re;
        c[1] = (float)im;
        break;
      }
      case DLP_COMPLEX128: {
        double *c = (double *)(void *)p;
        if (op == R_SUM) c[0] *= r, c[1] *= r;
        else cpow_f64(&c[0], &c[1], (uint64_t)rep);
        break;
      }
      default: {
        uint64_t *v = &AT(uint64_t, p, 0, 0);
        *v = op == R_SUM ? *v * (uint64_t)rep : upow(*v, (uint64_t)rep);
      }
    }
  }
}

/* Each accumulator times `scale`, over `divisor` (mean: 1 / count; var: repeats / max(N - c, 0)),
 * in the accumulator's precision as NumPy divides; std takes the square root. */
static void divide(int acc_dtype, char *a, int64_t K, double scale, double divisor, int root) {
  for (int64_t i = 0; i < K; i++) {
    switch (acc_dtype) {
      case DLP_FLOAT32: {
        float *v = &AT(float, a, i, 4);
        *v = (float)(*v * (float)scale) / (float)divisor;
        if (root) *v = sqrtf(*v);
        break;
      }
      case DLP_FLOAT64: {
        double *v = &AT(double, a, i, 8);
        *v = *v * scale / divisor;
        if (root) *v = sqrt(*v);
        break;
      }
      case DLP_COMPLEX64: {
        float *v = &AT(float, a, i, 8);
        v[0] = v[0] / (float)divisor;
        v[1] = v[1] / (float)divisor;
        break;
      }
      default: {
        double *v = &AT(double, a, i, 16);
        v[0] = v[0] / divisor;
        v[1] = v[1] / divisor;
      }
    }
  }
}

/* The row-major position among all reduced dimensions of the position q among those walked. */
static int64_t full_position(int64_t q, int nr, const int64_t *size, const int *walked) {
  int64_t at = 0, mult = 1;
  for (int k = nr - 1; k >= 0; k--) {
    if (walked[k]) {
      at += q % size[k] * mult;
      q /= size[k];
    }
    mult *= size[k];
  }
  return at;
}

/* ---- arguments ---- */

/* The dim argument at 2: sets reduced[i] for the dimensions it names (all for nil). */
static int read_dims(lua_State *L, int ndim, int *reduced) {
  int64_t dims[DLP_MAX_NDIM];
  int n;
  int type = lua_type(L, 2);
  for (int i = 0; i < ndim; i++) reduced[i] = type <= LUA_TNIL;
  if (type <= LUA_TNIL) return 0;
  if (type == LUA_TNUMBER) {
    int isint;
    lua_Integer v = lua_tointegerx(L, 2, &isint);
    if (!isint) luaL_argerror(L, 2, "dim must be an integer");
    dims[0] = (int64_t)v;
    n = 1;
  } else if (type == LUA_TTABLE) {
    n = dlp_check_integers(L, 2, dims, DLP_MAX_NDIM, INT64_MIN, "dim");
    if (n == 0 && (lua_pushnil(L), lua_next(L, 2))) /* {out = r} where dim goes: opts misplaced, not "no dims" */
      luaL_argerror(L, 2, "dim is a table with named keys, not a list of dimensions (opts come after dim: "
                          "t:sum(nil, opts))");
  } else {
    return luaL_argerror(L, 2, lua_pushfstring(L, "dim must be a number, a table of dimensions or nil, got %s",
                                               luaL_typename(L, 2)));
  }
  for (int k = 0; k < n; k++) {
    int64_t d = dims[k];
    if (d < -(int64_t)ndim || d > ndim || d == 0)
      luaL_argerror(L, 2, lua_pushfstring(L, "dimension %I out of range (tensor has %d)", (lua_Integer)d, ndim));
    d = d < 0 ? d + ndim : d - 1;
    if (reduced[d])
      luaL_argerror(L, 2, lua_pushfstring(L, "dimension %I given twice", (lua_Integer)dims[k]));
    reduced[d] = 1;
  }
  return 1;
}

/* The result and accumulator dtypes of op on an input of dtype `in` (opt: opts.dtype or -1). */
static void choose_dtypes(lua_State *L, int op, int in, int opt, int *result, int *acc, const char *what) {
  int kind = dlp_dtype_kind(in);
  if (kind == K_COMPLEX && (is_ordered(op) || op == R_VAR || op == R_STD))
    luaL_error(L, "%s: %s tensors are not supported (%s)", what, dlp_dtypes[in].name,
               is_ordered(op) ? "complex numbers have no order" : "take those of the real and imaginary parts");
  switch (op) {
    case R_SUM: case R_PROD:
      *result = opt >= 0 ? opt : kind == K_BOOL || kind == K_INT ? DLP_INT64 : kind == K_UINT ? DLP_UINT64 : in;
      break;
    case R_MEAN: case R_VAR: case R_STD:
      if (opt >= 0 && (dlp_dtype_kind(opt) < K_FLOAT || (op != R_MEAN && dlp_dtype_kind(opt) == K_COMPLEX)))
        luaL_error(L, "%s: dtype %s cannot hold the result (a %s dtype is needed)", what, dlp_dtypes[opt].name,
                   op == R_MEAN ? "float or complex" : "float");
      *result = opt >= 0 ? opt : kind < K_FLOAT ? DLP_FLOAT64 : in;
      break;
    case R_ARGMIN: case R_ARGMAX: *result = DLP_INT64; break;
    case R_ANY: case R_ALL: *result = DLP_BOOL; break;
    default: *result = in;
  }
  int base = is_ordered(op) ? in : *result;
  switch (dlp_dtype_kind(base)) {
    case K_BOOL: *acc = is_ordered(op) ? DLP_UINT8 : op == R_ANY || op == R_ALL ? DLP_BOOL : DLP_INT64; break;
    case K_INT: *acc = is_ordered(op) ? base : DLP_INT64; break;
    case K_UINT: *acc = is_ordered(op) ? base : DLP_UINT64; break;
    case K_FLOAT: *acc = base == DLP_FLOAT64 ? DLP_FLOAT64 : DLP_FLOAT32; break;
    default: *acc = base;
  }
}

/* Push the element at p (dtype) as a Lua value, as element reads do: on Lua 5.1, 5.2 and LuaJIT
 * an integer a double cannot hold exactly raises rather than coming back rounded. */
static void push_value(lua_State *L, int dtype, const void *p) {
  dlp_push_element(L, dtype, p);
}

/* a * b, or INT64_MAX when that does not fit: an empty tensor's other sizes may multiply past
 * 64 bits ({0, 2^40, 2^40}), and then only whether a count is 0 matters */
static int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t r;
  return dlp_mul(a, b, &r) ? r : INT64_MAX;
}

static int reduce(lua_State *L, int op) {
  const char *what = op_names[op];
  int reduced[DLP_MAX_NDIM], result_dtype, acc_dtype, ndim, keep_shape_ndim = 0;
  int64_t out_shape[DLP_MAX_NDIM], m = 1, K = 1, rep = 1;
  dlp_ComputeOptions o;
  unsigned allowed = DLP_COPT_KEEPDIM;
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  ndim = t->dl.ndim;
  int has_dim = read_dims(L, ndim, reduced);
  if (op <= R_STD) allowed |= DLP_COPT_DTYPE;
  if (op == R_VAR || op == R_STD) allowed |= DLP_COPT_CORRECTION;
  dlp_read_compute_options(L, 3, allowed, &o, what);
  dlp_check_no_more(L, 4, what, "(t [, dim [, opts]])");
  lua_settop(L, 3);
  dlp_check_host(L, t, what);
  dlp_check_computes(L, t->dtype, what);
  choose_dtypes(L, op, t->dtype, o.dtype, &result_dtype, &acc_dtype, what);
  for (int i = 0; i < ndim; i++) {
    if (reduced[i]) {
      m = saturating_mul(m, t->dl.shape[i]); /* exact unless the tensor is empty */
      if (o.keepdim) out_shape[keep_shape_ndim++] = 1;
    } else {
      K = saturating_mul(K, t->dl.shape[i]);
      out_shape[keep_shape_ndim++] = t->dl.shape[i];
    }
  }
  if (m == 0 && is_ordered(op))
    luaL_error(L, "%s: the reduction of an empty tensor or dimension has no identity", what);
  /* a Lua value over all dimensions (complex results, which Lua has no number for, stay 0-d tensors) */
  int full = !has_dim && !o.keepdim && dlp_dtype_kind(result_dtype) != K_COMPLEX;

  /* allocate: results, then the accumulators that are not a result */
  _Alignas(16) char local[4][16];
  char *res = local[0], *acc = local[1], *aux = local[2]; /* aux: the index (min/max) or the mean (var) */
  int first_result = lua_gettop(L) + 1, nresults = 1;
  memset(local, 0, sizeof local);
  if (!full) {
    DLDevice cpu = {kDLCPU, 0};
    dlp_Tensor *r = dlp_tensor_new(L, result_dtype, 0, cpu, keep_shape_ndim, out_shape, 0, what);
    res = r->dl.data;
    if (op == R_MIN || op == R_MAX) {
      r = dlp_tensor_new(L, DLP_INT64, 0, cpu, keep_shape_ndim, out_shape, 0, what);
      aux = r->dl.data;
      nresults = 2;
    }
    if (is_arg(op)) aux = res;
    if (acc_dtype == result_dtype && !is_arg(op)) acc = res;
    else acc = dlp_tensor_new(L, acc_dtype, 0, cpu, keep_shape_ndim, out_shape, 0, what)->dl.data;
    if (op == R_VAR || op == R_STD)
      aux = dlp_tensor_new(L, acc_dtype, 0, cpu, keep_shape_ndim, out_shape, 0, what)->dl.data;
  }
  dlp_live(L, t, what);

  /* the walk: the accumulator with stride 0 along the reduced dimensions; reduced dimensions the
   * input does not move along are left out (rep counts their elements) */
  Walk wl, *w = &wl;
  int64_t shape[DLP_MAX_NDIM], in_st[DLP_MAX_NDIM], out_el[DLP_MAX_NDIM], rsize[DLP_MAX_NDIM];
  int walked[DLP_MAX_NDIM], nr = 0, any_dropped = 0;
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    shape[i] = t->dl.shape[i];
    in_st[i] = dlp_walk_stride(t, i);
    out_el[i] = reduced[i] ? 0 : s;
    if (!reduced[i]) s = saturating_mul(s, shape[i]);
  }
  for (int i = 0; i < ndim; i++) {
    if (!reduced[i]) continue;
    rsize[nr] = shape[i];
    walked[nr] = !(in_st[i] == 0 && shape[i] > 1);
    if (!walked[nr]) {
      rep = saturating_mul(rep, shape[i]);
      shape[i] = 1;
      any_dropped = 1;
    }
    nr++;
  }
  w->op = op;
  w->nops = is_ordered(op) ? 3 : 2;
  w->acc_dtype = acc_dtype;
  w->acc_size = dlp_dtypes[acc_dtype].itemsize;
  w->m = m / rep;
  w->K = K;
  w->pos = 0;
  w->visited = 0;
  w->conv1 = w->conv2 = NULL;
  if (t->dtype != acc_dtype) {
    int mid = result_dtype;
    if ((op == R_SUM || op == R_PROD || op == R_MEAN) && mid != t->dtype && mid != acc_dtype) {
      w->conv1 = dlp_row_function(mid, t->dtype);
      w->conv2 = dlp_row_function(acc_dtype, mid);
      w->mid_size = dlp_dtypes[mid].itemsize;
    } else {
      w->conv1 = dlp_row_function(acc_dtype, t->dtype);
    }
  }
  if (is_ordered(op)) ordered_kernels(acc_dtype, wants_max(op), &w->rows, &w->cols);

  /* initial values: the identities (min/max start from their first element) */
  for (int64_t i = 0; i < K; i++) {
    char *p = acc + i * w->acc_size;
    if (op == R_PROD) {
      switch (acc_dtype) {
        case DLP_FLOAT32: AT(float, p, 0, 0) = 1; break;
        case DLP_FLOAT64: AT(double, p, 0, 0) = 1; break;
        case DLP_COMPLEX64: AT(float, p, 0, 0) = 1, AT(float, p + 4, 0, 0) = 0; break;
        case DLP_COMPLEX128: AT(double, p, 0, 0) = 1, AT(double, p + 8, 0, 0) = 0; break;
        default: AT(uint64_t, p, 0, 0) = 1;
      }
    } else {
      memset(p, 0, (size_t)w->acc_size);
      if (op == R_ALL) AT(uint8_t, p, 0, 0) = 1;
    }
  }

  dlp_Iter it;
  char *data[3];
  int64_t st[DLP_ITER_MAX_OPS][DLP_MAX_NDIM];
  int in_op = is_ordered(op) ? 2 : 1;
  data[0] = acc;
  data[1] = aux;
  data[in_op] = dlp_first_element(t);
  if (is_ordered(op)) {
    /* the reduced dimensions inner (each output's elements in a row) or, when the input steps
     * fastest along a kept dimension, outer (rows of outputs); each in the tensor's order */
    int order[DLP_MAX_NDIM], n = 0, outer = 0;
    int64_t fastest = INT64_MAX;
    if (K > 1)
      for (int i = 0; i < ndim; i++) {
        int64_t a = in_st[i] < 0 ? -in_st[i] : in_st[i];
        if (shape[i] > 1 && a != 0 && a < fastest) fastest = a, outer = !reduced[i];
      }
    for (int pass = 0; pass < 2; pass++)
      for (int i = 0; i < ndim; i++)
        if ((reduced[i] != 0) == (pass == 0 ? outer : !outer)) order[n++] = i;
    int64_t pshape[DLP_MAX_NDIM];
    for (int k = 0; k < ndim; k++) {
      int i = order[k];
      pshape[k] = shape[i];
      st[0][k] = out_el[i] * w->acc_size;
      st[1][k] = out_el[i] * 8;
      st[2][k] = in_st[i];
    }
    dlp_iter_init(&it, 3, ndim, pshape, data, (const int64_t(*)[DLP_MAX_NDIM])st, 0);
    dlp_iter_run(&it, walk_loop, w);
    /* indices: 1-based, among all the reduced dimensions */
    for (int64_t i = 0; i < K; i++) {
      int64_t *p = &AT(int64_t, aux, i, 8);
      *p = (any_dropped ? full_position(*p, nr, rsize, walked) : *p) + 1;
    }
  } else {
    for (int i = 0; i < ndim; i++) {
      st[0][i] = st[1][i] = out_el[i] * w->acc_size;
      st[2][i] = in_st[i];
    }
    if (op == R_VAR || op == R_STD) {
      /* two passes: the mean into aux, then the squared deviations from it */
      const int64_t(*sp)[DLP_MAX_NDIM] = (const int64_t(*)[DLP_MAX_NDIM])st;
      char *d[3] = {aux, aux, data[1]};
      int64_t st2[2][DLP_MAX_NDIM];
      if (K > 0) memset(aux, 0, (size_t)(K * w->acc_size)); /* K == 0: aux may be NULL (an empty result) */
      d[1] = dlp_first_element(t);
      for (int i = 0; i < ndim; i++) st2[0][i] = st[0][i], st2[1][i] = in_st[i];
      w->nops = 2;
      dlp_iter_init(&it, 2, ndim, shape, d, (const int64_t(*)[DLP_MAX_NDIM])st2, 1);
      dlp_iter_run(&it, walk_loop, w);
      divide(acc_dtype, aux, K, 1, (double)w->m, 0);
      d[0] = acc;
      d[1] = aux;
      d[2] = dlp_first_element(t);
      w->nops = 3;
      dlp_iter_init(&it, 3, ndim, shape, d, sp, 1);
      dlp_iter_run(&it, walk_loop, w);
      double divisor = (double)m - o.correction;
      divide(acc_dtype, acc, K, (double)rep, divisor > 0 ? divisor : 0, op == R_STD);
    } else {
      for (int i = 0; i < ndim; i++) st[1][i] = in_st[i];
      data[1] = dlp_first_element(t);
      dlp_iter_init(&it, 2, ndim, shape, data, (const int64_t(*)[DLP_MAX_NDIM])st, 1);
      dlp_iter_run(&it, walk_loop, w);
      if (rep > 1 && (op == R_SUM || op == R_PROD)) repeat(op, acc_dtype, acc, K, rep);
      if (op == R_MEAN) divide(acc_dtype, acc, K, 1, (double)w->m, 0);
    }
  }
  /* the accumulators into the results' dtype (values of min/max: exact) */
  if (acc != res && !is_arg(op))
    dlp_row_function(result_dtype, acc_dtype)(res, dlp_dtypes[result_dtype].itemsize, acc, w->acc_size, K);
  if (full) {
    if (is_arg(op)) push_value(L, DLP_INT64, aux);
    else push_value(L, result_dtype, res);
    return 1;
  }
  for (int k = 0; k < nresults; k++) lua_pushvalue(L, first_result + k);
  return nresults;
}

static int l_sum(lua_State *L) { return reduce(L, R_SUM); }
static int l_prod(lua_State *L) { return reduce(L, R_PROD); }
static int l_mean(lua_State *L) { return reduce(L, R_MEAN); }
static int l_var(lua_State *L) { return reduce(L, R_VAR); }
static int l_std(lua_State *L) { return reduce(L, R_STD); }
static int l_min(lua_State *L) { return reduce(L, R_MIN); }
static int l_max(lua_State *L) { return reduce(L, R_MAX); }
static int l_argmin(lua_State *L) { return reduce(L, R_ARGMIN); }
static int l_argmax(lua_State *L) { return reduce(L, R_ARGMAX); }
static int l_any(lua_State *L) { return reduce(L, R_ANY); }
static int l_all(lua_State *L) { return reduce(L, R_ALL); }

void dlp_reduce_register(lua_State *L, int module, int methods, int meta) {
  static const luaL_Reg functions[] = {
      {"sum", l_sum}, {"prod", l_prod}, {"mean", l_mean}, {"var", l_var}, {"std", l_std},
      {"min", l_min}, {"max", l_max}, {"argmin", l_argmin}, {"argmax", l_argmax},
      {"any", l_any}, {"all", l_all}, {NULL, NULL},
  };
  (void)meta;
  dlp_register(L, module, functions);
  dlp_register(L, methods, functions);
}
