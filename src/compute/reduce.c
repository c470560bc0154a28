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
#include <stdlib.h>
#include <string.h>

#include "compute/cuda/args.h"
#include "compute/ops.h"
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
#define SQDEV DLP_SQDEV /* ops.h */

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
#include <immintrin.h>
typedef float v8f __attribute__((vector_size(32)));
typedef double v4d __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef int64_t v4l __attribute__((vector_size(32)));
#define AVX2 __attribute__((target("avx2")))
static int have_avx2(void) { return dlp_cpu_has_avx2(); }
/* AVX-512 (F): the blocks min/max skip, checked 16 float32 (8 float64) lanes at a time, rows
 * added into rows of outputs (each element its own addition), and rows compared with rows of
 * min/max outputs. The pairwise sums
 * keep their AVX2 leaves: float32's 8 accumulators fill one AVX2 register (a wider one would
 * need another order of additions), and float64's in one AVX-512 register measured no faster
 * than in two AVX2 ones (one chain of dependent additions instead of two). */
typedef float v16f __attribute__((vector_size(64)));
typedef double v8d __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef int64_t v8l __attribute__((vector_size(64)));
#define AVX512 __attribute__((target("avx512f")))
static int have_avx512(void) { return dlp_cpu_level() >= DLP_CPU_AVX512; }
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

/* A long pairwise sum split into tasks (threads.c) at the recursion's own halves, the halves' sums
 * added back as the recursion adds them: the same sum bit for bit as one call, on any number of
 * threads. The split depends on n only: halves while they are at least DLP_TASK_ELEMENTS long,
 * at most PW_DEPTH times. */
#define PW_DEPTH 6
enum { PW_F32, PW_F64, PW_SQ_F32, PW_SQ_F64 };
typedef struct PwTasks {
  int kind;
  const char *p;
  int64_t step;
  double m;                                   /* the mean of the squared deviations */
  int64_t start[1 << PW_DEPTH], len[1 << PW_DEPTH];
  float f32[1 << PW_DEPTH];
  double f64[1 << PW_DEPTH];
  int count;
} PwTasks;

static int pw_splits(int64_t n, int depth) { return depth < PW_DEPTH && n >= 2 * DLP_TASK_ELEMENTS; }
static int64_t pw_half(int64_t n) { return n / 2 - n / 2 % 8; } /* DEFINE_PAIRWISE's */

static void pw_leaves(PwTasks *t, int64_t start, int64_t n, int depth) {
  if (pw_splits(n, depth)) {
    pw_leaves(t, start, pw_half(n), depth + 1);
    pw_leaves(t, start + pw_half(n), n - pw_half(n), depth + 1);
    return;
  }
  t->start[t->count] = start;
  t->len[t->count++] = n;
}

static void pw_task(void *ctx, int64_t i) {
  PwTasks *t = ctx;
  const char *p = t->p + t->start[i] * t->step;
  switch (t->kind) {
    case PW_F32: t->f32[i] = pw_f32(p, t->step, t->len[i], 0); break;
    case PW_F64: t->f64[i] = pw_f64(p, t->step, t->len[i], 0); break;
    case PW_SQ_F32: t->f32[i] = pw_sq_f32(p, t->step, t->len[i], (float)t->m); break;
    default: t->f64[i] = pw_sq_f64(p, t->step, t->len[i], t->m);
  }
}

static float pw_join_f32(const PwTasks *t, int64_t n, int depth, int *leaf) {
  if (!pw_splits(n, depth)) return t->f32[(*leaf)++];
  float a = pw_join_f32(t, pw_half(n), depth + 1, leaf);
  return a + pw_join_f32(t, n - pw_half(n), depth + 1, leaf);
}

static double pw_join_f64(const PwTasks *t, int64_t n, int depth, int *leaf) {
  if (!pw_splits(n, depth)) return t->f64[(*leaf)++];
  double a = pw_join_f64(t, pw_half(n), depth + 1, leaf);
  return a + pw_join_f64(t, n - pw_half(n), depth + 1, leaf);
}

/* The pairwise sum of kind `kind` over n elements at p: on several threads when it is long. */
static double pw_sum(int kind, const char *p, int64_t step, int64_t n, double m) {
  if (!pw_splits(n, 0) || !dlp_parallel_enabled()) {
    switch (kind) {
      case PW_F32: return pw_f32(p, step, n, 0);
      case PW_F64: return pw_f64(p, step, n, 0);
      case PW_SQ_F32: return pw_sq_f32(p, step, n, (float)m);
      default: return pw_sq_f64(p, step, n, m);
    }
  }
  PwTasks t;
  int leaf = 0;
  t.kind = kind, t.p = p, t.step = step, t.m = m, t.count = 0;
  pw_leaves(&t, 0, n, 0);
  dlp_parallel_for(t.count, pw_task, &t);
  return kind == PW_F32 || kind == PW_SQ_F32 ? (double)pw_join_f32(&t, n, 0, &leaf) : pw_join_f64(&t, n, 0, &leaf);
}

/* The wrapping sum of n 64-bit integers at x, in parts on several threads when it is long (any
 * split gives the same sum). */
typedef struct WrapTasks {
  const char *x;
  int64_t step, n, part_len;
  uint64_t part[64];
} WrapTasks;

static uint64_t wrapping_run(const char *x, int64_t step, int64_t n) {
  uint64_t s = 0;
  for (int64_t i = 0; i < n; i++) s += ld_u64(x + i * step);
  return s;
}

static void wrap_task(void *ctx, int64_t i) {
  WrapTasks *t = ctx;
  int64_t lo = i * t->part_len, len = t->n - lo < t->part_len ? t->n - lo : t->part_len;
  t->part[i] = wrapping_run(t->x + lo * t->step, t->step, len);
}

static uint64_t wrapping_sum(const char *x, int64_t step, int64_t n) {
  if (n < 2 * DLP_TASK_ELEMENTS || !dlp_parallel_enabled()) return wrapping_run(x, step, n);
  WrapTasks t = {x, step, n, 0, {0}};
  int64_t parts = n / DLP_TASK_ELEMENTS < 64 ? n / DLP_TASK_ELEMENTS : 64;
  t.part_len = (n + parts - 1) / parts;
  parts = (n + t.part_len - 1) / t.part_len;
  dlp_parallel_for(parts, wrap_task, &t);
  uint64_t s = 0;
  for (int64_t i = 0; i < parts; i++) s += t.part[i];
  return s;
}

/* ---- sum, prod, any, all, var's squared deviations: fold n elements of x (the accumulator's
 * dtype) into acc; astep 0: all into one accumulator, else elementwise into a row ---- */

/* a[i] += x[i] over contiguous rows (the reduced dimension outer: a row added into the output) */
#if defined(__GNUC__)
#define DEFINE_ADD_ROWS(name, ATTR, T, V, load)                                                   \
  ATTR static void name(char *a, const char *x, int64_t n) {                                   \
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
/* each element its own addition: the same sums at any width */
#ifdef HAVE_AVX2_VARIANT
DEFINE_ADD_ROWS(add_rows_f32_sse, NO_ATTR, float, v4f, ld_f32)
DEFINE_ADD_ROWS(add_rows_f64_sse, NO_ATTR, double, v2d, ld_f64)
DEFINE_ADD_ROWS(add_rows_f32_avx2, AVX2, float, v8f, ld_f32)
DEFINE_ADD_ROWS(add_rows_f64_avx2, AVX2, double, v4d, ld_f64)
DEFINE_ADD_ROWS(add_rows_f32_avx512, AVX512, float, v16f, ld_f32)
DEFINE_ADD_ROWS(add_rows_f64_avx512, AVX512, double, v8d, ld_f64)
#define ADD_ROWS_DISPATCH(name)                                                                          \
  static void name(char *a, const char *x, int64_t n) {                                                \
    if (have_avx512()) name##_avx512(a, x, n);                                                         \
    else if (have_avx2()) name##_avx2(a, x, n);                                                        \
    else name##_sse(a, x, n);                                                                          \
  }
ADD_ROWS_DISPATCH(add_rows_f32)
ADD_ROWS_DISPATCH(add_rows_f64)
#undef ADD_ROWS_DISPATCH
#else
DEFINE_ADD_ROWS(add_rows_f32, NO_ATTR, float, v4f, ld_f32)
DEFINE_ADD_ROWS(add_rows_f64, NO_ATTR, double, v2d, ld_f64)
#endif
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
      if (as == 0) AT(float, a, 0, 0) += (float)pw_sum(PW_F32, x, xs, n, 0);
      else if (as == 4 && xs == 4) add_rows_f32(a, x, n);
      else for (int64_t i = 0; i < n; i++) AT(float, a, i, as) += ld_f32(x + i * xs);
      break;
    case DLP_FLOAT64:
      if (as == 0) AT(double, a, 0, 0) += pw_sum(PW_F64, x, xs, n, 0);
      else if (as == 8 && xs == 8) add_rows_f64(a, x, n);
      else for (int64_t i = 0; i < n; i++) AT(double, a, i, as) += ld_f64(x + i * xs);
      break;
    case DLP_COMPLEX64:
      if (as == 0) {
        AT(float, a, 0, 0) += (float)pw_sum(PW_F32, x, xs, n, 0);
        AT(float, a + 4, 0, 0) += (float)pw_sum(PW_F32, x + 4, xs, n, 0);
      } else {
        for (int64_t i = 0; i < n; i++) {
          AT(float, a, i, as) += ld_f32(x + i * xs);
          AT(float, a + 4, i, as) += ld_f32(x + i * xs + 4);
        }
      }
      break;
    case DLP_COMPLEX128:
      if (as == 0) {
        AT(double, a, 0, 0) += pw_sum(PW_F64, x, xs, n, 0);
        AT(double, a + 8, 0, 0) += pw_sum(PW_F64, x + 8, xs, n, 0);
      } else {
        for (int64_t i = 0; i < n; i++) {
          AT(double, a, i, as) += ld_f64(x + i * xs);
          AT(double, a + 8, i, as) += ld_f64(x + i * xs + 8);
        }
      }
      break;
    default: /* int64 and uint64: wrapping, as unsigned arithmetic */
      if (as == 0) {
        AT(uint64_t, a, 0, 0) += wrapping_sum(x, xs, n);
      } else {
        for (int64_t i = 0; i < n; i++) AT(uint64_t, a, i, as) += ld_u64(x + i * xs);
      }
  }
}

/* n elements of x multiplied into one accumulator at a, one at a time, in a local: kept in
 * memory, each product would wait for the store of the one before (and threads whose
 * accumulators share a cache line would take it from each other at every element) */
static void prod_into_one(int acc_dtype, char *a, const char *x, int64_t xs, int64_t n) {
  switch (acc_dtype) {
    case DLP_FLOAT32: {
      float p = AT(float, a, 0, 0);
      for (int64_t i = 0; i < n; i++) p *= ld_f32(x + i * xs);
      AT(float, a, 0, 0) = p;
      break;
    }
    case DLP_FLOAT64: {
      double p = AT(double, a, 0, 0);
      for (int64_t i = 0; i < n; i++) p *= ld_f64(x + i * xs);
      AT(double, a, 0, 0) = p;
      break;
    }
    case DLP_COMPLEX64: {
      float re = AT(float, a, 0, 0), im = AT(float, a + 4, 0, 0);
      for (int64_t i = 0; i < n; i++) dlp_cmul_f32(&re, &im, ld_f32(x + i * xs), ld_f32(x + i * xs + 4));
      AT(float, a, 0, 0) = re, AT(float, a + 4, 0, 0) = im;
      break;
    }
    case DLP_COMPLEX128: {
      double re = AT(double, a, 0, 0), im = AT(double, a + 8, 0, 0);
      for (int64_t i = 0; i < n; i++) dlp_cmul_f64(&re, &im, ld_f64(x + i * xs), ld_f64(x + i * xs + 8));
      AT(double, a, 0, 0) = re, AT(double, a + 8, 0, 0) = im;
      break;
    }
    default: {
      uint64_t p = AT(uint64_t, a, 0, 0);
      for (int64_t i = 0; i < n; i++) p *= ld_u64(x + i * xs);
      AT(uint64_t, a, 0, 0) = p;
    }
  }
}

/* n elements of x multiplied into the accumulators at a, one at a time */
static void prod_run(int acc_dtype, char *a, int64_t as, const char *x, int64_t xs, int64_t n) {
  if (as == 0) {
    prod_into_one(acc_dtype, a, x, xs, n);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    const char *p = x + i * xs;
    char *q = a + i * as;
    switch (acc_dtype) {
      case DLP_FLOAT32: AT(float, q, 0, 0) *= ld_f32(p); break;
      case DLP_FLOAT64: AT(double, q, 0, 0) *= ld_f64(p); break;
      case DLP_COMPLEX64: {
        float *c = (float *)(void *)q;
        dlp_cmul_f32(&c[0], &c[1], ld_f32(p), ld_f32(p + 4));
        break;
      }
      case DLP_COMPLEX128: {
        double *c = (double *)(void *)q;
        dlp_cmul_f64(&c[0], &c[1], ld_f64(p), ld_f64(p + 8));
        break;
      }
      default: AT(uint64_t, q, 0, 0) *= ld_u64(p);
    }
  }
}

/* The accumulator at p set to 1, the identity of products. */
static void set_one(int acc_dtype, char *p) {
  switch (acc_dtype) {
    case DLP_FLOAT32: AT(float, p, 0, 0) = 1; break;
    case DLP_FLOAT64: AT(double, p, 0, 0) = 1; break;
    case DLP_COMPLEX64: AT(float, p, 0, 0) = 1, AT(float, p + 4, 0, 0) = 0; break;
    case DLP_COMPLEX128: AT(double, p, 0, 0) = 1, AT(double, p + 8, 0, 0) = 0; break;
    default: AT(uint64_t, p, 0, 0) = 1;
  }
}

/* A long product into one accumulator, in parts whose length depends on n only: each part
 * multiplied from 1, one element at a time, then the parts' products into the accumulator in
 * order. The parts run on several threads when there are; the product is the same on any number
 * (integers wrap: their product is the same for any split, one element at a time's). */
#define PROD_PARTS 64
typedef struct ProdTasks {
  int acc_dtype;
  const char *x;
  int64_t step, n, part_len;
  _Alignas(16) char part[PROD_PARTS][16];
} ProdTasks;

static void prod_task(void *ctx, int64_t i) {
  ProdTasks *t = ctx;
  int64_t lo = i * t->part_len, len = t->n - lo < t->part_len ? t->n - lo : t->part_len;
  set_one(t->acc_dtype, t->part[i]);
  prod_run(t->acc_dtype, t->part[i], 0, t->x + lo * t->step, t->step, len);
}

static void fold_prod(int acc_dtype, char *a, int64_t as, const char *x, int64_t xs, int64_t n) {
  if (as != 0 || n < 2 * DLP_TASK_ELEMENTS) {
    prod_run(acc_dtype, a, as, x, xs, n);
    return;
  }
  ProdTasks t;
  int64_t parts = n / DLP_TASK_ELEMENTS < PROD_PARTS ? n / DLP_TASK_ELEMENTS : PROD_PARTS;
  t.acc_dtype = acc_dtype, t.x = x, t.step = xs, t.n = n;
  t.part_len = (n + parts - 1) / parts;
  parts = (n + t.part_len - 1) / t.part_len;
  if (dlp_parallel_enabled()) dlp_parallel_for(parts, prod_task, &t);
  else for (int64_t i = 0; i < parts; i++) prod_task(&t, i);
  for (int64_t i = 0; i < parts; i++) prod_run(acc_dtype, a, 0, t.part[i], 0, 1);
}

static void fold_any_all(int all, char *a, int64_t as, const char *x, int64_t xs, int64_t n) {
  if (as == 0) {
    uint8_t r = AT(uint8_t, a, 0, 0);
    if (r != all) return; /* decided */
    for (int64_t i = 0; i < n; i++)
      if (TRUTH(ld_u8(x + i * xs)) != all) {
        AT(uint8_t, a, 0, 0) = (uint8_t)!all;
        return;
      }
  } else if (all) {
    for (int64_t i = 0; i < n; i++)
      AT(uint8_t, a, i, as) = DLP_ALL_JOIN(AT(uint8_t, a, i, as), TRUTH(ld_u8(x + i * xs)));
  } else {
    for (int64_t i = 0; i < n; i++)
      AT(uint8_t, a, i, as) = DLP_ANY_JOIN(AT(uint8_t, a, i, as), TRUTH(ld_u8(x + i * xs)));
  }
}

/* sum of (x - mean)^2; the mean buffer is laid out as the accumulator (same steps) */
static void fold_sqdev(int acc_dtype, char *a, int64_t as, const char *mean, const char *x, int64_t xs, int64_t n) {
  if (acc_dtype == DLP_FLOAT32) {
    if (as == 0) AT(float, a, 0, 0) += (float)pw_sum(PW_SQ_F32, x, xs, n, AT(float, mean, 0, 0));
    else
      for (int64_t i = 0; i < n; i++) {
        float d = ld_f32(x + i * xs) - AT(float, mean, i, as);
        AT(float, a, i, as) += d * d;
      }
  } else {
    if (as == 0) AT(double, a, 0, 0) += pw_sum(PW_SQ_F64, x, xs, n, AT(double, mean, 0, 0));
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
 * at position pos. x beats the best b by ops.h's rule (DLP_BEATS_MAX, DLP_BEATS_MIN): greater
 * (less), or the first NaN: NaN wins and stays, as NumPy's maximum/argmax. */
#define BEATS_MAX DLP_BEATS_MAX
#define BEATS_MIN DLP_BEATS_MIN
#define NEVER_NAN DLP_NEVER_NAN
#define FLOAT_NAN DLP_IS_NAN

#define DEFINE_ORDERED(name, T, load, ISNAN, BEATS, HIT, COLS)                                       \
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
    int64_t j = 0;                                                                                  \
    if (pos > 0 && vs == (int64_t)sizeof(T) && xs == (int64_t)sizeof(T) && is == 8) j = COLS(vp, ip, x, n, pos); \
    for (; j < n; j++) {                                                                            \
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
DEFINE_HIT_FLOAT(hit_o_f32_max_avx512, AVX512, float, v16f, v16i, 16, <=)
DEFINE_HIT_FLOAT(hit_o_f32_min_avx512, AVX512, float, v16f, v16i, 16, >=)
DEFINE_HIT_FLOAT(hit_o_f64_max_avx512, AVX512, double, v8d, v8l, 8, <=)
DEFINE_HIT_FLOAT(hit_o_f64_min_avx512, AVX512, double, v8d, v8l, 8, >=)
#define HIT_DISPATCH(name, T)                                                                  \
  static int name(const char *x, T b) {                                                        \
    return have_avx512() ? name##_avx512(x, b) : have_avx2() ? name##_avx2(x, b) : name##_sse(x, b); \
  }
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
/* Outputs in a row (the reduced dimension outer: a row of elements, one for each output), each
 * lane compared on its own by the cols loop's rule (greater or less, or the first NaN); lanes that
 * take the new element take its position too. Returns how many outputs were done (the rest go
 * through the loop). Float32, float64 and the integers with AVX2 or AVX-512; else none. */
#define NO_COLS(vp, ip, x, n, pos) 0
#if defined(HAVE_AVX2_VARIANT)
/* AVX2: the compare's lanes to a bit mask (movemask), so that a row that changes nothing (most
 * rows past the first few) stores nothing; the lanes that do are blended in, values and positions. */
#define DEFINE_COLS_F32_AVX2(name, CMP)                                                          \
  AVX2 static int64_t name(char *vp, char *ip, const char *x, int64_t n, int64_t pos) {          \
    __m256i at = _mm256_set1_epi64x(pos);                                                        \
    int64_t j = 0;                                                                               \
    for (; j + 8 <= n; j += 8) {                                                                 \
      __m256 v = _mm256_loadu_ps((const void *)(x + j * 4)), b = _mm256_loadu_ps((const void *)(vp + j * 4)); \
      __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, b, CMP),                                       \
                                 _mm256_and_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), _mm256_cmp_ps(b, b, _CMP_ORD_Q))); \
      if (!_mm256_movemask_ps(take)) continue;                                                   \
      _mm256_storeu_ps((void *)(vp + j * 4), _mm256_blendv_ps(b, v, take));                      \
      __m256i low = _mm256_cvtepi32_epi64(_mm_castps_si128(_mm256_castps256_ps128(take)));        \
      __m256i high = _mm256_cvtepi32_epi64(_mm_castps_si128(_mm256_extractf128_ps(take, 1)));     \
      void *p = ip + j * 8, *q = ip + (j + 4) * 8;                                               \
      _mm256_storeu_si256(p, _mm256_blendv_epi8(_mm256_loadu_si256(p), at, low));                \
      _mm256_storeu_si256(q, _mm256_blendv_epi8(_mm256_loadu_si256(q), at, high));               \
    }                                                                                            \
    return j;                                                                                    \
  }
#define DEFINE_COLS_F64_AVX2(name, CMP)                                                          \
  AVX2 static int64_t name(char *vp, char *ip, const char *x, int64_t n, int64_t pos) {          \
    __m256i at = _mm256_set1_epi64x(pos);                                                        \
    int64_t j = 0;                                                                               \
    for (; j + 4 <= n; j += 4) {                                                                 \
      __m256d v = _mm256_loadu_pd((const void *)(x + j * 8)), b = _mm256_loadu_pd((const void *)(vp + j * 8)); \
      __m256d take = _mm256_or_pd(_mm256_cmp_pd(v, b, CMP),                                      \
                                  _mm256_and_pd(_mm256_cmp_pd(v, v, _CMP_UNORD_Q), _mm256_cmp_pd(b, b, _CMP_ORD_Q))); \
      if (!_mm256_movemask_pd(take)) continue;                                                   \
      _mm256_storeu_pd((void *)(vp + j * 8), _mm256_blendv_pd(b, v, take));                      \
      void *p = ip + j * 8;                                                                      \
      _mm256_storeu_si256(p, _mm256_blendv_epi8(_mm256_loadu_si256(p), at, _mm256_castpd_si256(take))); \
    }                                                                                            \
    return j;                                                                                    \
  }
DEFINE_COLS_F32_AVX2(cols_o_f32_max_avx2, _CMP_GT_OQ)
DEFINE_COLS_F32_AVX2(cols_o_f32_min_avx2, _CMP_LT_OQ)
DEFINE_COLS_F64_AVX2(cols_o_f64_max_avx2, _CMP_GT_OQ)
DEFINE_COLS_F64_AVX2(cols_o_f64_min_avx2, _CMP_LT_OQ)
#undef DEFINE_COLS_F32_AVX2
#undef DEFINE_COLS_F64_AVX2
/* AVX-512's compares give a mask: the lanes to take are known without reducing a vector, and
 * only their values and positions are stored (a row that changes nothing stores nothing). */
#define DEFINE_COLS_AVX512(name, V, lanes, loadu, cmp_mask, mask_storeu, CMP)                    \
  AVX512 static int64_t name(char *vp, char *ip, const char *x, int64_t n, int64_t pos) {          \
    const int size = 64 / lanes;                                                                 \
    __m512i at = _mm512_set1_epi64(pos);                                                         \
    int64_t j = 0;                                                                               \
    for (; j + lanes <= n; j += lanes) {                                                         \
      V v = loadu((const void *)(x + j * size)), b = loadu((const void *)(vp + j * size));        \
      unsigned take = cmp_mask(v, b, CMP) | (cmp_mask(v, v, _CMP_UNORD_Q) & cmp_mask(b, b, _CMP_ORD_Q)); \
      if (!take) continue; /* most rows past the first few */                                 \
      mask_storeu((void *)(vp + j * size), take, v);                                            \
      for (int h = 0; h < lanes / 8; h++)                                                        \
        _mm512_mask_storeu_epi64((void *)(ip + (j + 8 * h) * 8), (__mmask8)(take >> (8 * h)), at); \
    }                                                                                            \
    return j;                                                                                    \
  }
DEFINE_COLS_AVX512(cols_o_f32_max_avx512, __m512, 16, _mm512_loadu_ps, _mm512_cmp_ps_mask, _mm512_mask_storeu_ps,
                   _CMP_GT_OQ)
DEFINE_COLS_AVX512(cols_o_f32_min_avx512, __m512, 16, _mm512_loadu_ps, _mm512_cmp_ps_mask, _mm512_mask_storeu_ps,
                   _CMP_LT_OQ)
DEFINE_COLS_AVX512(cols_o_f64_max_avx512, __m512d, 8, _mm512_loadu_pd, _mm512_cmp_pd_mask, _mm512_mask_storeu_pd,
                   _CMP_GT_OQ)
DEFINE_COLS_AVX512(cols_o_f64_min_avx512, __m512d, 8, _mm512_loadu_pd, _mm512_cmp_pd_mask, _mm512_mask_storeu_pd,
                   _CMP_LT_OQ)
#undef DEFINE_COLS_AVX512
/* Integers (AVX-512 only; BW for the 8- and 16-bit ones, which the AVX-512 level includes): no
 * NaN, so the compare alone; signed or unsigned by the compare's name (epi or epu). */
#define AVX512BW __attribute__((target("avx512f,avx512bw")))
#define DEFINE_COLS_INT_AVX512(name, bytes, cmp_mask, mask_storeu, CMP)                          \
  AVX512BW static int64_t name(char *vp, char *ip, const char *x, int64_t n, int64_t pos) {      \
    const int lanes = 64 / bytes;                                                                \
    __m512i at = _mm512_set1_epi64(pos);                                                         \
    int64_t j = 0;                                                                               \
    for (; j + lanes <= n; j += lanes) {                                                         \
      __m512i v = _mm512_loadu_si512((const void *)(x + j * bytes));                             \
      uint64_t take = cmp_mask(v, _mm512_loadu_si512((const void *)(vp + j * bytes)), CMP);      \
      if (!take) continue;                                                                       \
      mask_storeu((void *)(vp + j * bytes), take, v);                                            \
      for (int h = 0; h < lanes / 8; h++)                                                        \
        if ((uint8_t)(take >> (8 * h)))                                                          \
          _mm512_mask_storeu_epi64((void *)(ip + (j + 8 * h) * 8), (__mmask8)(take >> (8 * h)), at); \
    }                                                                                            \
    return j;                                                                                    \
  }
/* AVX2 compares signed lanes only, and by greater: unsigned lanes are compared with their sign
 * bits flipped, and less is greater with the operands swapped. The rare row that changes a lane
 * writes the positions one lane at a time (movemask gives a bit per byte). */
#define DEFINE_COLS_INT_AVX2(name, bytes, cmpgt, FLIP, LESS)                                       \
  AVX2 static int64_t name(char *vp, char *ip, const char *x, int64_t n, int64_t pos) {          \
    const int lanes = 32 / bytes;                                                                \
    const __m256i flip = FLIP;                                                                   \
    int64_t j = 0;                                                                               \
    for (; j + lanes <= n; j += lanes) {                                                         \
      __m256i v = _mm256_loadu_si256((const void *)(x + j * bytes));                             \
      __m256i b = _mm256_loadu_si256((const void *)(vp + j * bytes));                            \
      __m256i fv = _mm256_xor_si256(v, flip), fb = _mm256_xor_si256(b, flip);                    \
      __m256i take = LESS ? cmpgt(fb, fv) : cmpgt(fv, fb);                                       \
      uint32_t bits = (uint32_t)_mm256_movemask_epi8(take);                                      \
      if (!bits) continue;                                                                       \
      _mm256_storeu_si256((void *)(vp + j * bytes), _mm256_blendv_epi8(b, v, take));             \
      for (int k = 0; k < lanes; k++)                                                            \
        if ((bits >> (k * bytes)) & 1) memcpy(ip + (j + k) * 8, &pos, 8);                        \
    }                                                                                            \
    return j;                                                                                    \
  }
#define DEFINE_COLS_INT(name, bytes, cmp_mask, mask_storeu, cmpgt, FLIP)                                \
  DEFINE_COLS_INT_AVX512(cols_##name##_max_avx512, bytes, cmp_mask, mask_storeu, _MM_CMPINT_NLE)       \
  DEFINE_COLS_INT_AVX512(cols_##name##_min_avx512, bytes, cmp_mask, mask_storeu, _MM_CMPINT_LT)        \
  DEFINE_COLS_INT_AVX2(cols_##name##_max_avx2, bytes, cmpgt, FLIP, 0)                                  \
  DEFINE_COLS_INT_AVX2(cols_##name##_min_avx2, bytes, cmpgt, FLIP, 1)                                  \
  static int64_t cols_##name##_max(char *vp, char *ip, const char *x, int64_t n, int64_t pos) {         \
    return have_avx512() ? cols_##name##_max_avx512(vp, ip, x, n, pos)                                 \
           : have_avx2() ? cols_##name##_max_avx2(vp, ip, x, n, pos) : 0;                               \
  }                                                                                                     \
  static int64_t cols_##name##_min(char *vp, char *ip, const char *x, int64_t n, int64_t pos) {         \
    return have_avx512() ? cols_##name##_min_avx512(vp, ip, x, n, pos)                                 \
           : have_avx2() ? cols_##name##_min_avx2(vp, ip, x, n, pos) : 0;                               \
  }
#define SIGNED _mm256_setzero_si256()
DEFINE_COLS_INT(o_i8, 1, _mm512_cmp_epi8_mask, _mm512_mask_storeu_epi8, _mm256_cmpgt_epi8, SIGNED)
DEFINE_COLS_INT(o_i16, 2, _mm512_cmp_epi16_mask, _mm512_mask_storeu_epi16, _mm256_cmpgt_epi16, SIGNED)
DEFINE_COLS_INT(o_i32, 4, _mm512_cmp_epi32_mask, _mm512_mask_storeu_epi32, _mm256_cmpgt_epi32, SIGNED)
DEFINE_COLS_INT(o_i64, 8, _mm512_cmp_epi64_mask, _mm512_mask_storeu_epi64, _mm256_cmpgt_epi64, SIGNED)
DEFINE_COLS_INT(o_u8, 1, _mm512_cmp_epu8_mask, _mm512_mask_storeu_epi8, _mm256_cmpgt_epi8,
                _mm256_set1_epi8((char)0x80))
DEFINE_COLS_INT(o_u16, 2, _mm512_cmp_epu16_mask, _mm512_mask_storeu_epi16, _mm256_cmpgt_epi16,
                _mm256_set1_epi16((short)0x8000))
DEFINE_COLS_INT(o_u32, 4, _mm512_cmp_epu32_mask, _mm512_mask_storeu_epi32, _mm256_cmpgt_epi32,
                _mm256_set1_epi32(INT32_MIN))
DEFINE_COLS_INT(o_u64, 8, _mm512_cmp_epu64_mask, _mm512_mask_storeu_epi64, _mm256_cmpgt_epi64,
                _mm256_set1_epi64x(INT64_MIN))
#undef SIGNED
#undef DEFINE_COLS_INT
#undef DEFINE_COLS_INT_AVX2
#undef DEFINE_COLS_INT_AVX512
#define COLS_DISPATCH(name)                                                                         \
  static int64_t name(char *vp, char *ip, const char *x, int64_t n, int64_t pos) {                 \
    return have_avx512() ? name##_avx512(vp, ip, x, n, pos) : have_avx2() ? name##_avx2(vp, ip, x, n, pos) : 0; \
  }
COLS_DISPATCH(cols_o_f32_max)
COLS_DISPATCH(cols_o_f32_min)
COLS_DISPATCH(cols_o_f64_max)
COLS_DISPATCH(cols_o_f64_min)
#undef COLS_DISPATCH
#else
#define cols_o_f32_max NO_COLS
#define cols_o_f32_min NO_COLS
#define cols_o_f64_max NO_COLS
#define cols_o_f64_min NO_COLS
#define cols_o_i8_max NO_COLS
#define cols_o_i8_min NO_COLS
#define cols_o_i16_max NO_COLS
#define cols_o_i16_min NO_COLS
#define cols_o_i32_max NO_COLS
#define cols_o_i32_min NO_COLS
#define cols_o_i64_max NO_COLS
#define cols_o_i64_min NO_COLS
#define cols_o_u8_max NO_COLS
#define cols_o_u8_min NO_COLS
#define cols_o_u16_max NO_COLS
#define cols_o_u16_min NO_COLS
#define cols_o_u32_max NO_COLS
#define cols_o_u32_min NO_COLS
#define cols_o_u64_max NO_COLS
#define cols_o_u64_min NO_COLS
#endif
#define DEFINE_MINMAX(name, T, load, ISNAN)                          \
  DEFINE_HIT(hit_##name##_max, T, load, >)                          \
  DEFINE_HIT(hit_##name##_min, T, load, <)                          \
  DEFINE_ORDERED(name##_max, T, load, ISNAN, BEATS_MAX, hit_##name##_max, cols_##name##_max) \
  DEFINE_ORDERED(name##_min, T, load, ISNAN, BEATS_MIN, hit_##name##_min, cols_##name##_min)
#define DEFINE_MINMAX_FLOAT(name, T, load)                              \
  DEFINE_ORDERED(name##_max, T, load, FLOAT_NAN, BEATS_MAX, hit_##name##_max, cols_##name##_max) \
  DEFINE_ORDERED(name##_min, T, load, FLOAT_NAN, BEATS_MIN, hit_##name##_min, cols_##name##_min)
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

/* The walk of sum, prod, mean, var, std, any and all, split into tasks along a kept dimension (one
 * the accumulator steps along) when it is large: a task folds whole outputs, each output's
 * elements in the order one walk folds them, so results are the same bit for bit on any number of
 * threads. Each task has a copy of the walk (its conversion buffers). */
typedef struct WalkTasks {
  const dlp_Iter *it;
  const Walk *w;
  int dim;
  int64_t chunk;
} WalkTasks;

static void walk_task(void *ctx, int64_t i) {
  const WalkTasks *t = ctx;
  Walk own = *t->w;
  int64_t lo = i * t->chunk, size = t->it->shape[t->dim];
  dlp_iter_run_slice(t->it, t->dim, lo, size - lo < t->chunk ? size : lo + t->chunk, walk_loop, &own);
}

/* How many tasks a walk split along dim makes: one per DLP_TASK_ELEMENTS elements, at most 256
 * and the dim's size. Along the innermost dim (the rows the loops get: the reduced dim outer)
 * each task keeps rows of at least ROW_MIN elements: 16-element rows of a {4096, 1024} max(1)
 * cost 5 times the walk on one thread. */
#define ROW_MIN 512
static int64_t task_count(const dlp_Iter *it, int dim) {
  int64_t size = it->shape[dim], tasks = it->numel / DLP_TASK_ELEMENTS;
  if (tasks > 256) tasks = 256;
  if (dim == it->ndim - 1 && tasks > size / ROW_MIN) tasks = size / ROW_MIN;
  return tasks > size ? size : tasks;
}

/* The kept dimension (one the accumulator steps along) to split a large walk along: the one that
 * makes the most tasks (of those, the largest); -1 when none makes two. */
static int split_dimension(const dlp_Iter *it) {
  int dim = -1;
  int64_t best = 1;
  if (it->numel >= 2 * DLP_TASK_ELEMENTS)
    for (int i = 0; i < it->ndim; i++) {
      int64_t tasks = it->strides[0][i] != 0 && it->shape[i] > 1 ? task_count(it, i) : 0;
      if (tasks > best || (tasks == best && dim >= 0 && it->shape[i] > it->shape[dim])) dim = i, best = tasks;
    }
  return dim;
}

static void walk(const dlp_Iter *it, Walk *w) {
  int dim = split_dimension(it);
  if (dim < 0 || !dlp_parallel_enabled()) {
    dlp_iter_run(it, walk_loop, w);
    return;
  }
  int64_t size = it->shape[dim], tasks = task_count(it, dim);
  WalkTasks t = {it, w, dim, (size + tasks - 1) / tasks};
  dlp_parallel_for((size + t.chunk - 1) / t.chunk, walk_task, &t);
}

/* The walk of min, max, argmin and argmax on several threads. The best of a run of elements
 * joined with the best of the run after it (the later wins only when it beats the earlier:
 * greater or less, or a NaN after none) is what one walk over both finds, value and position, so
 * any split gives one walk's result bit for bit. Three splits:
 * - one output: tasks of consecutive positions, each into a slot of its own (positions from the
 *   task's start), the slots then joined in order by the cols loop;
 * - rows of at most ROWS_SPLIT_OUTPUTS outputs (the reduced dimensions outer): one task of
 *   consecutive rows per thread, each into outputs of its own, joined in order the same way.
 *   Split along the outputs instead, each task would read a part of every row: two cores reading
 *   halves of the 4 KiB rows of a {4096, 1024} float32 max(1) took longer than one core reading
 *   them whole; and 16 tasks of rows on 2 threads took twice as long as 2;
 * - otherwise tasks of whole outputs along the largest kept dimension (the cols loops count
 *   positions by the task's outputs). */
#define ORDERED_PARTS 64
#define ROWS_SPLIT_OUTPUTS 4096
#define ROWS_PARTS 8 /* under a host's job system */
enum { SPLIT_ONE_OUTPUT = -2, SPLIT_ROWS = -3 }; /* split_dimension's -1 is "none" */
typedef struct OrderedTasks {
  const dlp_Iter *it;
  const Walk *w;
  int dim; /* the kept dimension split, or SPLIT_ONE_OUTPUT or SPLIT_ROWS */
  int64_t chunk;
  char *rows; /* SPLIT_ROWS: the outputs of tasks 1 on (task 0 writes the walk's), rows_part */
  _Alignas(16) char value[ORDERED_PARTS][8]; /* the accumulators: real, at most 8 bytes */
  int64_t index[ORDERED_PARTS];
} OrderedTasks;

/* A part of the rows split: K positions, then K values (from an 8-byte boundary: positions
 * first keeps both aligned whatever the values' size). */
static int64_t rows_part_size(const Walk *w) {
  return w->K * 8 + ((w->K * w->acc_size + 7) & ~(int64_t)7);
}

static char *rows_part(const OrderedTasks *t, int64_t i) {
  return t->rows + (i - 1) * rows_part_size(t->w);
}

static void ordered_task(void *ctx, int64_t i) {
  OrderedTasks *t = ctx;
  Walk own = *t->w;
  dlp_Iter part = *t->it;
  if (t->dim == SPLIT_ONE_OUTPUT) {
    int64_t start = i * t->chunk, end = t->it->numel - start < t->chunk ? t->it->numel : start + t->chunk;
    part.data[0] = t->value[i];
    part.data[1] = (char *)&t->index[i];
    own.m = end - start;
    dlp_iter_run_range(&part, start, end, walk_loop, &own);
    t->index[i] += start;
    return;
  }
  int dim = t->dim == SPLIT_ROWS ? 0 : t->dim;
  int64_t lo = i * t->chunk, size = t->it->shape[dim], hi = size - lo < t->chunk ? size : lo + t->chunk;
  if (t->dim == SPLIT_ROWS && i > 0) {
    part.data[0] = rows_part(t, i) + t->w->K * 8;
    part.data[1] = rows_part(t, i);
  } else if (t->dim != SPLIT_ROWS) {
    own.K = t->w->K / size * (hi - lo);
  }
  dlp_iter_run_slice(&part, dim, lo, hi, walk_loop, &own);
}

/* The rows split's parts joined into the walk's outputs, in order: the cols loop marks the
 * outputs a part beats with an impossible position, which then becomes the part's own. */
static void join_rows(const OrderedTasks *t, int64_t tasks) {
  const dlp_Iter *it = t->it;
  const Walk *w = t->w;
  int64_t K = w->K, per_row = it->numel / it->shape[0] / K; /* positions per index of dimension 0 */
  char *acc = it->data[0];
  int64_t *idx = (int64_t *)(void *)it->data[1];
  for (int64_t i = 1; i < tasks; i++) {
    const int64_t *positions = (const int64_t *)(void *)rows_part(t, i);
    char *values = rows_part(t, i) + K * 8;
    w->cols(acc, w->acc_size, (char *)idx, 8, values, w->acc_size, K, INT64_MAX);
    for (int64_t j = 0; j < K; j++)
      if (idx[j] == INT64_MAX) idx[j] = positions[j] + i * t->chunk * per_row;
  }
}

/* min, max, argmin or argmax over the walk `it` into its operands 0 (the values) and 1 (the
 * positions among the walked elements), as dlp_iter_run(it, walk_loop, w) from a fresh w (pos and
 * visited 0) gives them, on several threads when the walk is large. */
static void ordered_walk(const dlp_Iter *it, Walk *w) {
  int large = it->numel >= 2 * DLP_TASK_ELEMENTS && it->ndim > 0;
  int rows = large && w->K > 1 && w->K <= ROWS_SPLIT_OUTPUTS && it->ndim >= 2 && it->shape[0] >= 2 &&
             it->strides[0][0] == 0 && it->strides[0][it->ndim - 1] != 0;
  int parallel = dlp_parallel_enabled();
  OrderedTasks t;
  int64_t tasks = 0;
  t.it = it, t.w = w, t.rows = NULL;
  t.dim = large && w->K == 1 ? SPLIT_ONE_OUTPUT : rows ? SPLIT_ROWS : split_dimension(it);
  if (parallel && t.dim == SPLIT_ONE_OUTPUT) {
    t.chunk = (it->numel + ORDERED_PARTS - 1) / ORDERED_PARTS;
    if (t.chunk < DLP_TASK_ELEMENTS) t.chunk = DLP_TASK_ELEMENTS;
    tasks = (it->numel + t.chunk - 1) / t.chunk;
  } else if (parallel && t.dim == SPLIT_ROWS) {
    int64_t size = it->shape[0], most = it->numel / DLP_TASK_ELEMENTS;
    tasks = dlp_parallel_width();
    if (tasks == 0) tasks = ROWS_PARTS;
    if (tasks > most) tasks = most;
    if (tasks > size) tasks = size;
    t.chunk = (size + tasks - 1) / tasks;
    tasks = (size + t.chunk - 1) / t.chunk;
    t.rows = malloc((size_t)((tasks - 1) * rows_part_size(w)));
    if (!t.rows) tasks = 0; /* one walk: it needs no more memory */
  } else if (parallel && t.dim >= 0) {
    int64_t size = it->shape[t.dim];
    tasks = task_count(it, t.dim);
    t.chunk = (size + tasks - 1) / tasks;
    tasks = (size + t.chunk - 1) / t.chunk;
  }
  if (tasks < 2) {
    free(t.rows);
    dlp_iter_run(it, walk_loop, w);
    return;
  }
  dlp_parallel_for(tasks, ordered_task, &t);
  if (t.dim == SPLIT_ROWS) {
    join_rows(&t, tasks);
    free(t.rows);
  } else if (t.dim == SPLIT_ONE_OUTPUT) {
    char *acc = it->data[0], *idx = it->data[1];
    memcpy(acc, t.value[0], (size_t)w->acc_size);
    memcpy(idx, &t.index[0], 8);
    for (int64_t i = 1; i < tasks; i++) w->cols(acc, 0, idx, 0, t.value[i], 0, 1, t.index[i]);
  }
}

/* ---- finishing: stride-0 repeats, means, variances ---- */

/* The sum or product of `rep` copies of each accumulator (the walked value of each), by ops.h's rules. */
static void repeat(int op, int acc_dtype, char *a, int64_t K, int64_t rep) {
  int prod = op == R_PROD;
  for (int64_t i = 0; i < K; i++) {
    char *p = a + i * dlp_dtypes[acc_dtype].itemsize;
    switch (acc_dtype) {
      case DLP_FLOAT32: AT(float, p, 0, 0) = dlp_repeat_f32(prod, AT(float, p, 0, 0), rep); break;
      case DLP_FLOAT64: AT(double, p, 0, 0) = dlp_repeat_f64(prod, AT(double, p, 0, 0), rep); break;
      case DLP_COMPLEX64: {
        float *c = (float *)(void *)p;
        double re = c[0], im = c[1];
        dlp_repeat_c128(prod, &re, &im, rep);
        c[0] = (float)re;
        c[1] = (float)im;
        break;
      }
      case DLP_COMPLEX128: {
        double *c = (double *)(void *)p;
        dlp_repeat_c128(prod, &c[0], &c[1], rep);
        break;
      }
      default: AT(uint64_t, p, 0, 0) = dlp_repeat_u64(prod, AT(uint64_t, p, 0, 0), rep);
    }
  }
}

/* Each accumulator times `scale`, over `divisor` (mean: 1 / count; var: repeats / max(N - c, 0)),
 * by ops.h's rules; std takes the square root. */
static void divide(int acc_dtype, char *a, int64_t K, double scale, double divisor, int root) {
  for (int64_t i = 0; i < K; i++) {
    switch (acc_dtype) {
      case DLP_FLOAT32: AT(float, a, i, 4) = dlp_divide_f32(AT(float, a, i, 4), scale, divisor, root); break;
      case DLP_FLOAT64: AT(double, a, i, 8) = dlp_divide_f64(AT(double, a, i, 8), scale, divisor, root); break;
      case DLP_COMPLEX64: {
        float *v = &AT(float, a, i, 8);
        v[0] = dlp_divide_part_f32(v[0], divisor);
        v[1] = dlp_divide_part_f32(v[1], divisor);
        break;
      }
      default: {
        double *v = &AT(double, a, i, 16);
        v[0] = dlp_divide_part_f64(v[0], divisor);
        v[1] = dlp_divide_part_f64(v[1], divisor);
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

/* ---- on CUDA devices ----
 * The same plan, run by the kernels of src/compute/cuda/kernels.cu (families 28 to 31; args.h
 * describes a launch). Pass 1 gives each output `parts` items, item p folding the output's walked
 * elements p, p + parts, ...; merges then join the partial results of each output `group` at a
 * time, in order, until one is left, and the last launch finishes and writes the results. The
 * order depends on the shape alone: a result does not change from run to run. When the input's
 * fastest dim is a reduced one, adjacent items fold adjacent slices of one output (so adjacent
 * threads read adjacent elements); else adjacent items are adjacent outputs. */

#define CUDA_ITEMS (1 << 18) /* pass 1 aims at this many items (threads), */
#define CUDA_PER_ITEM 8      /* each folding at least this many elements */
#define CUDA_GROUP 128       /* partial results a merge joins per item (at most 256: kernels.cu's R_PAIRWISE) */

typedef struct Plan { /* what reduce() decided, for reduce_cuda */
  int op, result_dtype, acc_dtype, full, keep_ndim;
  const int64_t *out_shape;
  const int *reduced;
  const int64_t *shape; /* t's, with 1 for the reduced dims not walked (stride 0) */
  const int64_t *in_st; /* t's byte strides (dlp_walk_stride) */
  int64_t m, K, rep;    /* reduced elements per output, outputs, copies of each walked one */
  double correction;
} Plan;

/* the element types kernels.cu names (args.h) are the module's */
#define SAME_CODE(k, d) ((int)(k) == (int)(d))
_Static_assert(SAME_CODE(DLP_KT_BOOL, DLP_BOOL) && SAME_CODE(DLP_KT_I64, DLP_INT64) &&
               SAME_CODE(DLP_KT_U64, DLP_UINT64) && SAME_CODE(DLP_KT_F16, DLP_FLOAT16) &&
               SAME_CODE(DLP_KT_BF16, DLP_BFLOAT16) && SAME_CODE(DLP_KT_F32, DLP_FLOAT32) &&
               SAME_CODE(DLP_KT_F64, DLP_FLOAT64) && SAME_CODE(DLP_KT_C64, DLP_COMPLEX64) &&
               SAME_CODE(DLP_KT_C128, DLP_COMPLEX128), "args.h's element types follow dlp_Dtype");
#undef SAME_CODE

typedef struct CudaKernel {
  const char *pass, *merge; /* static strings: launch.c finds a kernel by its name's address */
  int family, size;         /* the family; the size of a partial result */
} CudaKernel;
#define CK(name, family, size) {"dlp_" name, "dlp_" name "_merge", family, size}

enum { CK_SUM, CK_PROD, CK_SQDEV, CK_MAX, CK_MIN, CK_ANY, CK_ALL };

/* The kernel of `what` (CK_*) with accumulator acc_dtype (the CPU's: min and max of integers and
 * bool compare in 64 bits on the device, as int64 or uint64). */
static const CudaKernel *cuda_kernel(int what, int acc_dtype) {
  static const CudaKernel sum[] = {CK("rsum_u64", 28, 8), CK("rsum_f32", 29, 4), CK("rsum_f64", 30, 8),
                                   CK("rsum_c64", 31, 8), CK("rsum_c128", 31, 16)};
  static const CudaKernel prod[] = {CK("rprod_u64", 28, 8), CK("rprod_f32", 29, 4), CK("rprod_f64", 30, 8),
                                    CK("rprod_c64", 31, 8), CK("rprod_c128", 31, 16)};
  static const CudaKernel sqdev[] = {CK("rsqdev_f32", 29, 4), CK("rsqdev_f64", 30, 8)};
  static const CudaKernel max[] = {CK("rmax_i64", 28, 8), CK("rmax_u64", 28, 8), CK("rmax_f32", 29, 4),
                                   CK("rmax_f64", 30, 8)};
  static const CudaKernel min[] = {CK("rmin_i64", 28, 8), CK("rmin_u64", 28, 8), CK("rmin_f32", 29, 4),
                                   CK("rmin_f64", 30, 8)};
  static const CudaKernel any = CK("rany_b8", 28, 1), all = CK("rall_b8", 28, 1);
  int k = acc_dtype == DLP_FLOAT32 ? 1 : acc_dtype == DLP_FLOAT64 ? 2 : acc_dtype == DLP_COMPLEX64 ? 3
          : acc_dtype == DLP_COMPLEX128 ? 4 : 0;
  switch (what) {
    case CK_SUM: return &sum[k];
    case CK_PROD: return &prod[k];
    case CK_SQDEV: return &sqdev[k - 1];
    case CK_ANY: return &any;
    case CK_ALL: return &all;
    default: {
      int i = k ? k + 1 : dlp_dtype_kind(acc_dtype) == K_INT ? 0 : 1;
      return what == CK_MAX ? &max[i] : &min[i];
    }
  }
}

/* One launch of `kernel` over a's items, on the tensors it reads and writes (NULL: none). */
static void cuda_run(lua_State *L, dlp_ElementwiseArgs *a, const char *kernel, int family, dlp_Tensor *const *t,
                     int n, const char *what) {
  dlp_CudaLaunch launch;
  memset(&launch, 0, sizeof launch);
  for (int k = 0; k < n; k++)
    if (t[k]) launch.operands[launch.noperands++] = t[k];
  launch.what = what;
  launch.kernel = kernel;
  launch.family = family;
  launch.args = a;
  launch.stream = dlp_cuda_compute_stream(launch.operands, launch.noperands, NULL);
  dlp_cuda_launch(L, &launch); /* takes the stream; raises only after letting go of what it took */
}

static uint64_t device_address(const dlp_Tensor *t, int64_t offset) {
  return t ? (uint64_t)(uintptr_t)dlp_first_element(t) + (uint64_t)offset : 0;
}

/* Fold a's input (data[1]; the means at data[2] for var's second pass) with k into `values`
 * (and the indices into `indices`, min and max): pass 1, then merges, through `partials`, a
 * buffer of 2 * (K * parts) partial results (the values, then their indices at idx_offset). */
static void cuda_fold(lua_State *L, dlp_ElementwiseArgs *a, const CudaKernel *k, dlp_Tensor *input, dlp_Tensor *means,
                      dlp_Tensor *values, dlp_Tensor *indices, dlp_Tensor *partials, int64_t idx_offset,
                      const char *what) {
  dlp_ReduceParams *r = &a->reduce;
  int64_t K = r->outputs, P = r->parts, second = K * P; /* the second half: where odd levels write */
  int flags = r->flags;
  int final = P == 1;
  r->flags = (uint8_t)(flags | (final ? DLP_R_FINAL : 0));
  a->numel = K * P;
  a->data[0] = final ? device_address(values, 0) : device_address(partials, 0);
  a->data[1] = device_address(input, 0);
  a->data[2] = device_address(means, 0);
  a->data[3] = final ? device_address(indices, 0) : indices ? device_address(partials, idx_offset) : 0;
  dlp_Tensor *pass1[4] = {final ? values : partials, input, means, final ? indices : NULL};
  cuda_run(L, a, k->pass, k->family, pass1, 4, what);
  for (int level = 0; P > 1; level++) {
    int64_t Q = (P + CUDA_GROUP - 1) / CUDA_GROUP, from = level % 2 ? second : 0, to = level % 2 ? 0 : second;
    final = Q == 1;
    r->parts = P;
    r->group = CUDA_GROUP;
    r->flags = (uint8_t)((flags & ~DLP_R_REDUCED_INNER) | (final ? DLP_R_FINAL : 0));
    a->numel = K * Q;
    a->data[0] = final ? device_address(values, 0) : device_address(partials, to * k->size);
    a->data[1] = device_address(partials, from * k->size);
    a->data[2] = indices ? device_address(partials, idx_offset + from * 8) : 0;
    a->data[3] = !indices ? 0 : final ? device_address(indices, 0) : device_address(partials, idx_offset + to * 8);
    dlp_Tensor *merge[3] = {final ? values : NULL, partials, final ? indices : NULL};
    cuda_run(L, a, k->merge, k->family, merge, 3, what);
    P = Q;
  }
}

static int reduce_cuda(lua_State *L, dlp_Tensor *t, const Plan *pl, const char *what) {
  int op = pl->op, ndim = t->dl.ndim, in_dtype = t->dtype, acc = pl->acc_dtype;
  int64_t K = pl->K, m = pl->m, mw = pl->m / pl->rep;
  DLDevice dev = t->dl.device;
  /* The CPU converts through the result's dtype (a middle one): the kernels read the input as the
   * accumulator directly, which is the same when the middle dtype holds every value of the input's
   * (bool into int8, int8 into float16), and for integer sums and products into an integer dtype
   * (both wrap modulo its width alike); the others are not done on the device yet. */
  int in_kind = dlp_dtype_kind(t->dtype), out_kind = dlp_dtype_kind(pl->result_dtype);
  int wraps_alike = op != R_MEAN && (in_kind == 1 || in_kind == 2) && (out_kind == 1 || out_kind == 2);
  if ((op == R_SUM || op == R_PROD || op == R_MEAN) && pl->result_dtype != t->dtype &&
      pl->result_dtype != acc && dlp_promote(t->dtype, pl->result_dtype) != pl->result_dtype && !wraps_alike)
    luaL_error(L, "%s: CUDA tensors do not convert inside a computation yet (%s would be converted to %s); "
               "convert with :to first", what, dlp_dtypes[t->dtype].name, dlp_dtypes[pl->result_dtype].name);

  /* the launch: kept dims, then the walked reduced ones with their multipliers among all the
   * reduced dims; size-1 dims left out, dims that step into each other merged */
  dlp_ElementwiseArgs a;
  dlp_ReduceParams *r = &a.reduce;
  memset(&a, 0, sizeof a);
  int n = 0, element = (int)dlp_dtypes[in_dtype].itemsize, misaligned = 0;
  int64_t fastest = INT64_MAX, mult[DLP_MAX_NDIM], below = 1;
  int inner = 0;
  if (in_dtype == DLP_COMPLEX64 || in_dtype == DLP_COMPLEX128) element /= 2; /* read as their parts */
  for (int i = ndim - 1; i >= 0; i--)
    if (pl->reduced[i]) {
      mult[i] = below;
      below = saturating_mul(below, t->dl.shape[i]);
    }
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) r->kept = n;
    for (int i = 0; i < ndim; i++) {
      int64_t size = pl->shape[i], st = pl->in_st[i];
      if ((pl->reduced[i] != 0) != pass || size <= 1 || (pass == 1 && m == 0)) continue;
      misaligned |= st % element != 0;
      if ((st < 0 ? -st : st) < fastest && st != 0) fastest = st < 0 ? -st : st, inner = pass;
      if (n > (pass ? r->kept : 0) && a.strides[1][n - 1] == st * size &&
          (!pass || a.strides[2][n - 1] == mult[i] * size)) {
        a.shape[n - 1] *= size; /* fits: the elements walked */
        a.strides[1][n - 1] = st;
        a.strides[2][n - 1] = pass ? mult[i] : 0;
      } else {
        a.shape[n] = size;
        a.strides[1][n] = st;
        a.strides[2][n] = pass ? mult[i] : 0;
        n++;
      }
    }
  }
  a.ndim = n;
  r->outputs = K;
  r->walked = m == 0 ? 0 : mw;
  r->parts = 1;
  if (K > 0 && r->walked > CUDA_PER_ITEM && K < CUDA_ITEMS) {
    int64_t by_work = (r->walked + CUDA_PER_ITEM - 1) / CUDA_PER_ITEM, by_grid = (CUDA_ITEMS + K - 1) / K;
    r->parts = by_work < by_grid ? by_work : by_grid;
  }
  r->repeats = pl->rep;
  r->in_dtype = (uint8_t)in_dtype;
  r->out_dtype = (uint8_t)pl->result_dtype;
  r->acc_dtype = (uint8_t)acc;
  r->flags = (uint8_t)(inner || K == 1 ? DLP_R_REDUCED_INNER : 0);
  if (pl->rep > 1 && (op == R_SUM || op == R_PROD)) r->flags |= DLP_R_REPEAT;
  if (is_arg(op)) r->flags |= DLP_R_NO_VALUES;

  /* allocate: the results, then the partial results and var's means (temporaries) */
  const CudaKernel *k = cuda_kernel(op == R_SUM || op == R_MEAN || op == R_VAR || op == R_STD ? CK_SUM
                                    : op == R_PROD ? CK_PROD : op == R_ANY ? CK_ANY : op == R_ALL ? CK_ALL
                                    : wants_max(op) ? CK_MAX : CK_MIN, acc);
  int64_t shape0[1] = {0};
  int first_result = lua_gettop(L) + 1, nresults = 1;
  int keep_ndim = pl->full ? 0 : pl->keep_ndim;
  const int64_t *out_shape = pl->full ? shape0 : pl->out_shape;
  dlp_Tensor *values = NULL, *indices = NULL, *partials = NULL, *means = NULL;
  if (!is_arg(op)) values = dlp_tensor_new(L, pl->result_dtype, 0, dev, keep_ndim, out_shape, 0, what);
  if (is_ordered(op)) {
    indices = dlp_tensor_new(L, DLP_INT64, 0, dev, keep_ndim, out_shape, 0, what);
    nresults = is_arg(op) || pl->full ? 1 : 2;
  }
  int64_t idx_offset = 0;
  if (r->parts > 1) {
    int64_t slots = K * r->parts + K * ((r->parts + CUDA_GROUP - 1) / CUDA_GROUP);
    int64_t bytes = (slots * k->size + 15) / 16 * 16;
    idx_offset = bytes;
    if (indices) bytes += slots * 8;
    partials = dlp_tensor_new(L, DLP_UINT8, 0, dev, 1, &bytes, 0, what);
  }
  if (op == R_VAR || op == R_STD) means = dlp_tensor_new(L, acc, 0, dev, keep_ndim, out_shape, 0, what);
  dlp_live(L, t, what);
  /* a kernel reads elements as their C type: they must sit at multiples of its size */
  if (m > 0 && K > 0 && (misaligned || (uintptr_t)dlp_first_element(t) % (uintptr_t)element != 0))
    luaL_error(L, "%s: a CUDA operand's elements are not aligned to their size (%d bytes)", what, element);

  if (K > 0) {
    dlp_ElementwiseArgs pass = a;
    if (op == R_VAR || op == R_STD) {
      /* two passes: the means (sums over the walked elements, divided), then the squared
       * deviations from them, times the repeats, over max(N - correction, 0) */
      pass.reduce.flags |= DLP_R_DIVIDE;
      pass.reduce.scale = 1;
      pass.reduce.divisor = (double)mw;
      pass.reduce.out_dtype = (uint8_t)acc;
      cuda_fold(L, &pass, k, t, NULL, means, NULL, partials, idx_offset, what);
      double divisor = (double)m - pl->correction;
      pass = a;
      pass.reduce.flags |= DLP_R_DIVIDE | (op == R_STD ? DLP_R_ROOT : 0);
      pass.reduce.scale = (double)pl->rep;
      pass.reduce.divisor = divisor > 0 ? divisor : 0;
      cuda_fold(L, &pass, cuda_kernel(CK_SQDEV, acc), t, means, values, NULL, partials, idx_offset, what);
    } else {
      if (op == R_MEAN) {
        pass.reduce.flags |= DLP_R_DIVIDE;
        pass.reduce.scale = 1;
        pass.reduce.divisor = (double)mw;
      }
      cuda_fold(L, &pass, k, t, NULL, values, indices, partials, idx_offset, what);
    }
  }
  /* the temporaries go; their memory stays held until the kernels that use it ran */
  if (partials) dlp_tensor_release(partials);
  if (means) dlp_tensor_release(means);
  if (pl->full) { /* a Lua value: the 0-d result, copied back once the kernels ran */
    DLDevice cpu = {kDLCPU, 0};
    dlp_Tensor *result = is_arg(op) ? indices : values;
    dlp_Tensor *h = dlp_tensor_new(L, result->dtype, 0, cpu, 0, shape0, 0, what);
    dlp_cuda_copy(L, h, result, NULL, what);
    push_value(L, result->dtype, h->dl.data);
    return 1;
  }
  for (int i = 0; i < nresults; i++) lua_pushvalue(L, first_result + i);
  return nresults;
}

static int reduce_named(lua_State *L, int op, const char *what) {
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
  int gpu = t->dl.device.device_type == kDLCUDA; /* the device the reduction runs on */
  if (gpu) {
    dlp_push_device_name(L, t->dl.device);
    dlp_cuda_require(L, lua_pushfstring(L, "%s (a tensor on %s)", what, lua_tostring(L, -1)));
    lua_pop(L, 2);
  } else {
    dlp_check_host(L, t, what);
  }
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
  /* the walk: the accumulator with stride 0 along the reduced dimensions; reduced dimensions the
   * input does not move along are left out (rep counts their elements) */
  int64_t shape[DLP_MAX_NDIM], in_st[DLP_MAX_NDIM], out_el[DLP_MAX_NDIM], rsize[DLP_MAX_NDIM];
  int walked[DLP_MAX_NDIM], nr = 0, any_dropped = 0;
  int64_t s = 1;
  /* an empty input walks nothing: its output strides stay 0 (its other sizes may be up to 2^63 - 1,
   * whose products with an element's size overflow) */
  int empty = dlp_numel(t) == 0;
  for (int i = ndim - 1; i >= 0; i--) {
    shape[i] = t->dl.shape[i];
    in_st[i] = dlp_walk_stride(t, i);
    out_el[i] = reduced[i] || empty ? 0 : s;
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
  if (gpu) {
    Plan plan = {op, result_dtype, acc_dtype, full, keep_shape_ndim, out_shape, reduced, shape, in_st, m, K, rep,
                 o.correction};
    return reduce_cuda(L, t, &plan, what);
  }

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

  Walk wl, *w = &wl;
  w->op = op;
  w->nops = is_ordered(op) ? 3 : 2;
  w->acc_dtype = acc_dtype;
  w->acc_size = dlp_dtypes[acc_dtype].itemsize;
  w->m = m / rep;
  w->K = K;
  w->pos = 0;
  w->visited = 0;
  w->conv1 = w->conv2 = NULL;
  /* sum, prod and mean convert each element to the result's dtype first (NumPy's rule), also when
   * the accumulator is the input's own dtype: float32 summed with dtype float16 is rounded to
   * float16 element by element, then accumulated in float32 */
  int mid = result_dtype;
  if ((op == R_SUM || op == R_PROD || op == R_MEAN) && mid != t->dtype && mid != acc_dtype) {
    w->conv1 = dlp_row_function(mid, t->dtype);
    w->conv2 = dlp_row_function(acc_dtype, mid);
    w->mid_size = dlp_dtypes[mid].itemsize;
  } else if (t->dtype != acc_dtype) {
    w->conv1 = dlp_row_function(acc_dtype, t->dtype);
  }
  if (is_ordered(op)) ordered_kernels(acc_dtype, wants_max(op), &w->rows, &w->cols);

  /* initial values: the identities (min/max start from their first element) */
  for (int64_t i = 0; i < K; i++) {
    char *p = acc + i * w->acc_size;
    if (op == R_PROD) {
      set_one(acc_dtype, p);
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
    ordered_walk(&it, w);
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
      walk(&it, w);
      divide(acc_dtype, aux, K, 1, (double)w->m, 0);
      d[0] = acc;
      d[1] = aux;
      d[2] = dlp_first_element(t);
      w->nops = 3;
      dlp_iter_init(&it, 3, ndim, shape, d, sp, 1);
      walk(&it, w);
      double divisor = (double)m - o.correction;
      divide(acc_dtype, acc, K, (double)rep, divisor > 0 ? divisor : 0, op == R_STD);
    } else {
      for (int i = 0; i < ndim; i++) st[1][i] = in_st[i];
      data[1] = dlp_first_element(t);
      dlp_iter_init(&it, 2, ndim, shape, data, (const int64_t(*)[DLP_MAX_NDIM])st, 1);
      walk(&it, w);
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

static int reduce(lua_State *L, int op) { return reduce_named(L, op, op_names[op]); }

/* all() named `what` in its messages: a closure of the tensor metatable (the module's convention:
 * upvalue 1) and the name */
static int l_all_named(lua_State *L) { return reduce_named(L, R_ALL, lua_tostring(L, lua_upvalueindex(2))); }
int dlp_reduce_all(lua_State *L, int idx, const char *what) {
  idx = lua_absindex(L, idx);
  dlp_push_metatable(L);
  lua_pushstring(L, what);
  lua_pushcclosure(L, l_all_named, 2);
  lua_pushvalue(L, idx);
  lua_call(L, 1, 1);
  int all = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return all;
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
