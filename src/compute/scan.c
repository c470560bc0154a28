/* Scans and softmax along one dimension: cumsum cumprod (NumPy's accumulate: integers and bools
 * in int64, unsigned integers in uint64, unless dtype= says otherwise; each step rounded to the
 * result's dtype, as NumPy's float16 loop does) and softmax log_softmax (torch's: a float result,
 * the line's maximum subtracted before exp, so that no exp overflows).
 *
 * A line is converted into the result's memory (or a scratch line) in the dtype the scan runs
 * in, and scanned there in place. out= gets the result through a copy, so that it may alias the
 * input. On a CUDA device the scans run the same way: the input converted into the result by the
 * copy kernels, then each line scanned in place by one thread, in the CPU's order (kernels.cu,
 * family 46), so that floats give the CPU's bits; only few long lines are scanned in chunks,
 * which floats round differently (scan_lines). */
#include <math.h>
#include <string.h>

#include "compute/cuda/args.h"
#include "compute/ops.h"
#include "internal.h"

enum { K_BOOL, K_UINT, K_INT, K_FLOAT, K_COMPLEX }; /* dlp_dtype_kind */

/* ---- scans in place: n elements of the result's dtype, step bytes apart ---- */

#define SCAN_LOOP(T, combine)                     \
  do {                                            \
    T acc;                                        \
    memcpy(&acc, p, sizeof acc);                  \
    for (int64_t i = 1; i < n; i++) {             \
      T x;                                        \
      memcpy(&x, p + i * step, sizeof x);         \
      acc = (T)(combine);                         \
      memcpy(p + i * step, &acc, sizeof acc);     \
    }                                             \
  } while (0)

static float half_value(int dtype, uint16_t h) {
  return dtype == DLP_FLOAT16 ? dlp_half_to_float(h) : dlp_bfloat_to_float(h);
}
static uint16_t half_round(int dtype, float f) {
  return dtype == DLP_FLOAT16 ? dlp_half_from_double(f) : dlp_bfloat_from_double(f);
}

static void scan_in_place(int dtype, int prod, char *p, int64_t step, int64_t n) {
  if (n < 2) return;
  switch (dtype) {
    case DLP_BOOL:
      if (prod) SCAN_LOOP(uint8_t, acc && x);
      else SCAN_LOOP(uint8_t, acc || x);
      break;
    case DLP_INT8: case DLP_UINT8:
      if (prod) SCAN_LOOP(uint8_t, (unsigned)acc * x);
      else SCAN_LOOP(uint8_t, acc + x);
      break;
    case DLP_INT16: case DLP_UINT16:
      if (prod) SCAN_LOOP(uint16_t, (unsigned)acc * x);
      else SCAN_LOOP(uint16_t, acc + x);
      break;
    case DLP_INT32: case DLP_UINT32:
      if (prod) SCAN_LOOP(uint32_t, acc * x);
      else SCAN_LOOP(uint32_t, acc + x);
      break;
    case DLP_INT64: case DLP_UINT64:
      if (prod) SCAN_LOOP(uint64_t, acc * x);
      else SCAN_LOOP(uint64_t, acc + x);
      break;
    case DLP_FLOAT16: case DLP_BFLOAT16: {
      uint16_t acc;
      memcpy(&acc, p, 2);
      for (int64_t i = 1; i < n; i++) {
        uint16_t x;
        memcpy(&x, p + i * step, 2);
        float a = half_value(dtype, acc), b = half_value(dtype, x);
        acc = half_round(dtype, prod ? a * b : a + b);
        memcpy(p + i * step, &acc, 2);
      }
      break;
    }
    case DLP_FLOAT32:
      if (prod) SCAN_LOOP(float, acc * x);
      else SCAN_LOOP(float, acc + x);
      break;
    case DLP_FLOAT64:
      if (prod) SCAN_LOOP(double, acc * x);
      else SCAN_LOOP(double, acc + x);
      break;
    case DLP_COMPLEX64: {
      float acc[2], x[2];
      memcpy(acc, p, 8);
      for (int64_t i = 1; i < n; i++) {
        memcpy(x, p + i * step, 8);
        if (prod) dlp_cmul_f32(&acc[0], &acc[1], x[0], x[1]);
        else acc[0] += x[0], acc[1] += x[1];
        memcpy(p + i * step, acc, 8);
      }
      break;
    }
    default: { /* complex128 */
      double acc[2], x[2];
      memcpy(acc, p, 16);
      for (int64_t i = 1; i < n; i++) {
        memcpy(x, p + i * step, 16);
        if (prod) dlp_cmul_f64(&acc[0], &acc[1], x[0], x[1]);
        else acc[0] += x[0], acc[1] += x[1];
        memcpy(p + i * step, acc, 16);
      }
    }
  }
}
#undef SCAN_LOOP

typedef struct ScanLine {
  int dtype, prod;
  int64_t n, in_step, out_step;
  dlp_RowFn convert;
} ScanLine;

static void scan_line(void *ctx, char *const *p, char *unused) {
  const ScanLine *s = ctx;
  (void)unused; /* a scan keeps nothing but its output */
  s->convert(p[1], s->out_step, p[0], s->in_step, s->n);
  scan_in_place(s->dtype, s->prod, p[1], s->out_step, s->n);
}

/* ---- arguments ---- */

/* The dimension at arg, 0-based (-1: a 0-d tensor, one line of one element). */
static int line_dim(lua_State *L, int arg, const dlp_Tensor *t) {
  if (t->dl.ndim == 0) {
    lua_Integer d = dlp_checkinteger(L, arg);
    if (d != 1 && d != -1)
      luaL_argerror(L, arg, lua_pushfstring(L, "dimension %I out of range (tensor has 0)", d));
    return -1;
  }
  return dlp_check_dim(L, arg, t->dl.ndim, 0);
}

/* Where t's results go: the CUDA device it computes on, else the CPU (pinned and managed memory
 * compute on the CPU, and their results are cpu tensors, as the other computing functions' are;
 * a cuda_host result would need the CUDA driver to allocate it). */
static DLDevice result_device(const dlp_Tensor *t) {
  DLDevice cpu = {kDLCPU, 0};
  return dlp_device_is_host(t->dl.device) ? cpu : t->dl.device;
}

/* The result tensor: a new contiguous one of t's shape, or shape {n} (cumsum without dim), on
 * result_device(t). */
static dlp_Tensor *new_result(lua_State *L, const dlp_Tensor *t, int flat, int dtype, const char *what) {
  int64_t n = dlp_numel(t);
  if (flat) return dlp_tensor_new(L, dtype, 0, result_device(t), 1, &n, 0, what);
  return dlp_tensor_new(L, dtype, 0, result_device(t), t->dl.ndim, t->dl.shape, 0, what);
}

/* Raise unless out has the result's shape; copy r into it (converting, overlap-safe). */
static void into_out(lua_State *L, int out_idx, int r_idx, const char *what) {
  dlp_Tensor *out = dlp_tensor_check(L, out_idx), *r = dlp_tensor_check(L, r_idx);
  int same = out->dl.ndim == r->dl.ndim;
  for (int i = 0; same && i < r->dl.ndim; i++) same = out->dl.shape[i] == r->dl.shape[i];
  if (!same) {
    const char *want = dlp_push_shape(L, r->dl.ndim, r->dl.shape);
    luaL_error(L, "%s: out has shape %s, the result has shape %s", what,
               dlp_push_shape(L, out->dl.ndim, out->dl.shape), want);
  }
  dlp_check_writable(L, out, what);
  if (!dlp_can_cast_same_kind(r->dtype, out->dtype))
    luaL_error(L, "%s: cannot write the %s result into out of dtype %s", what, dlp_dtypes[r->dtype].name,
               dlp_dtypes[out->dtype].name);
  dlp_copy(L, out, r, NULL, what);
  lua_pushvalue(L, out_idx);
}

static void check_cpu(lua_State *L, const dlp_Tensor *t, const char *what) {
  dlp_check_host(L, t, what);
  dlp_check_computes(L, t->dtype, what);
}

/* ---- scans on a CUDA device (kernels.cu, family 46) ---- */

/* The kernel of pass `pass` (0 a whole line, 1 the chunks, 2 the join) of a scan of dtype: a
 * name that stays (the launcher keeps loaded kernels by their name's address). NULL: none. */
#define SCAN_NAME(k, s, pass) "dlp_" k "_" s pass
#define SCAN_NAMES(k, pass)                                                                              \
  {[DLP_BOOL] = SCAN_NAME(k, "b8", pass), [DLP_INT8] = SCAN_NAME(k, "u8", pass),                          \
   [DLP_UINT8] = SCAN_NAME(k, "u8", pass), [DLP_INT16] = SCAN_NAME(k, "u16", pass),                       \
   [DLP_UINT16] = SCAN_NAME(k, "u16", pass), [DLP_INT32] = SCAN_NAME(k, "u32", pass),                     \
   [DLP_UINT32] = SCAN_NAME(k, "u32", pass), [DLP_INT64] = SCAN_NAME(k, "u64", pass),                     \
   [DLP_UINT64] = SCAN_NAME(k, "u64", pass), [DLP_FLOAT16] = SCAN_NAME(k, "f16", ""),                     \
   [DLP_BFLOAT16] = SCAN_NAME(k, "bf16", ""), [DLP_FLOAT32] = SCAN_NAME(k, "f32", pass),                  \
   [DLP_FLOAT64] = SCAN_NAME(k, "f64", pass), [DLP_COMPLEX64] = SCAN_NAME(k, "c64", pass),                \
   [DLP_COMPLEX128] = SCAN_NAME(k, "c128", pass)}
static const char *scan_kernel(int dtype, int prod, int pass) {
  static const char *const kernels[3][2][DLP_COMPLEX128 + 1] = {
    {SCAN_NAMES("cumsum", ""), SCAN_NAMES("cumprod", "")},
    {SCAN_NAMES("cumsum", "_chunks"), SCAN_NAMES("cumprod", "_chunks")},
    {SCAN_NAMES("cumsum", "_apply"), SCAN_NAMES("cumprod", "_apply")},
  };
  return dtype >= 0 && dtype <= DLP_COMPLEX128 ? kernels[pass][prod][dtype] : NULL;
}
#undef SCAN_NAMES
#undef SCAN_NAME

/* Few lines this long or longer are scanned in chunks (a thread per chunk, not per line). */
#define FEW_LINES 16384

/* One launch of a scan kernel over `shape`: operand 0 x (byte strides xs), operand 1 the chunks'
 * totals (NULL: none), the parameters args.h names. */
static void launch_scan(lua_State *L, const char *kernel, int ndim, const int64_t *shape, dlp_Tensor *x,
                        const int64_t *xs, dlp_Tensor *totals, const int64_t *ts, const int64_t *params,
                        const char *what) {
  static const int64_t none[2] = {0, 0};
  int64_t strides[4][DLP_MAX_NDIM];
  int size = (int)dlp_dtypes[x->dtype].itemsize, sizes[4] = {size, totals ? size : 16, 16, 16};
  char *data[4] = {dlp_first_element(x), totals ? dlp_first_element(totals) : NULL, NULL, NULL};
  dlp_Tensor *tensors[4] = {x, totals, NULL, NULL};
  const void *values[4] = {NULL, none, params, params + 2};
  for (int i = 0; i < ndim; i++) {
    strides[0][i] = xs[i];
    strides[1][i] = totals ? ts[i] : 0;
    strides[2][i] = strides[3][i] = 0;
  }
  dlp_run_on_cuda(L, what, NULL, 4, ndim, shape, data, (const int64_t(*)[DLP_MAX_NDIM])strides, tensors, values, sizes,
                  kernel, DLP_SCAN_FAMILY);
}

/* Each line along dim of the CUDA tensor at idx (contiguous, not empty) scanned in place: one
 * thread per line; or, for few long lines (not float16 or bfloat16), each chunk of
 * DLP_SCAN_CHUNK elements scanned by a thread, the chunks' totals scanned the same way (a
 * tensor of them), then each chunk joined with the total before it. */
static void scan_lines(lua_State *L, int idx, int dim, int prod, const char *what) {
  dlp_Tensor *x = lua_touserdata(L, idx);
  int ndim = x->dl.ndim, top = lua_gettop(L);
  int64_t shape[DLP_MAX_NDIM], xs[DLP_MAX_NDIM], ts[DLP_MAX_NDIM];
  int64_t n = x->dl.shape[dim], lines = dlp_numel(x) / n, step = dlp_walk_stride(x, dim);
  if (n < 2) return;
  for (int i = 0; i < ndim; i++) {
    shape[i] = i == dim ? 1 : x->dl.shape[i];
    xs[i] = dlp_walk_stride(x, i);
  }
  int half = x->dtype == DLP_FLOAT16 || x->dtype == DLP_BFLOAT16;
  if (half || n < 2 * DLP_SCAN_CHUNK || lines >= FEW_LINES) {
    int64_t params[4] = {n, step, 0, 0};
    launch_scan(L, scan_kernel(x->dtype, prod, 0), ndim, shape, x, xs, NULL, NULL, params, what);
    return;
  }
  int64_t chunks = (n + DLP_SCAN_CHUNK - 1) / DLP_SCAN_CHUNK;
  shape[dim] = chunks;
  dlp_Tensor *totals = dlp_tensor_new(L, x->dtype, 0, x->dl.device, ndim, shape, 0, what);
  for (int i = 0; i < ndim; i++) ts[i] = dlp_walk_stride(totals, i);
  xs[dim] = step * DLP_SCAN_CHUNK;
  int64_t params[4] = {n, step, chunks, ts[dim]};
  launch_scan(L, scan_kernel(x->dtype, prod, 1), ndim, shape, x, xs, totals, ts, params, what);
  scan_lines(L, top + 1, dim, prod, what);
  launch_scan(L, scan_kernel(x->dtype, prod, 2), ndim, shape, x, xs, totals, ts, params, what);
  dlp_tensor_release(totals); /* held until the kernels ran */
  lua_settop(L, top);
}

/* r (new, contiguous, on t's device, at stack index r_idx) = the scan of t: t converted into r
 * (flat: walked in row-major order into r's one dimension), then each line of r scanned. */
static void scan_on_device(lua_State *L, dlp_Tensor *t, int r_idx, int flat, int dim, int prod, const char *what) {
  dlp_Tensor *r = lua_touserdata(L, r_idx);
  int64_t strides[2][DLP_MAX_NDIM], step = dlp_dtypes[r->dtype].itemsize;
  if (!scan_kernel(r->dtype, prod, 0))
    luaL_error(L, "%s: %s is not scanned on CUDA devices", what, dlp_dtypes[r->dtype].name);
  if (dlp_numel(t) == 0) return;
  if (flat && t->dl.ndim != 1) { /* the conversion writes r's elements in t's row-major order */
    int family, sizes[2] = {(int)step, (int)dlp_dtypes[t->dtype].itemsize};
    const char *convert = dlp_cuda_copy_kernel(L, r->dtype, t->dtype, &family, what);
    char *data[2] = {dlp_first_element(r), dlp_first_element(t)};
    dlp_Tensor *tensors[2] = {r, t};
    int64_t at = step;
    for (int i = t->dl.ndim - 1; i >= 0; i--) {
      strides[0][i] = at;
      at *= t->dl.shape[i];
    }
    dlp_broadcast_strides(t, t->dl.ndim, t->dl.shape, strides[1]);
    dlp_run_on_cuda(L, what, NULL, 2, t->dl.ndim, t->dl.shape, data, (const int64_t(*)[DLP_MAX_NDIM])strides, tensors,
                    NULL, sizes, convert, family);
  } else {
    dlp_copy_on_cuda(L, r, t, NULL, what);
  }
  if (flat || dim >= 0) scan_lines(L, r_idx, flat ? 0 : dim, prod, what);
}

/* cumsum(t [, dim [, opts{dtype, out}]]) and cumprod: dim nil scans the elements in row-major
 * order into a 1-D result, as NumPy's axis=None. */
static int scan(lua_State *L, int prod, const char *what) {
  dlp_ComputeOptions o;
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  if (lua_istable(L, 2) && lua_isnoneornil(L, 3)) {
    lua_settop(L, 2);
    lua_pushnil(L);
    lua_insert(L, 2);
  }
  dlp_check_no_more(L, 4, what, "(t [, dim [, opts]])");
  lua_settop(L, 3);
  dlp_read_compute_options(L, 3, DLP_COPT_DTYPE | DLP_COPT_OUT, &o, what); /* pushes out */
  int out_idx = o.out;
  int flat = lua_isnoneornil(L, 2);
  int dim = flat ? 0 : line_dim(L, 2, t);
  dlp_Tensor *operands[2] = {t, out_idx ? dlp_tensor_check(L, out_idx) : NULL};
  int gpu = dlp_compute_device(L, operands, 2, what) >= 0;
  dlp_check_computes(L, t->dtype, what);
  int dtype = o.dtype;
  if (dtype < 0) {
    int kind = dlp_dtype_kind(t->dtype);
    dtype = kind == K_BOOL || kind == K_INT ? DLP_INT64 : kind == K_UINT ? DLP_UINT64 : t->dtype;
  }
  if (!dlp_row_function(dtype, t->dtype))
    luaL_error(L, "%s: %s does not convert to %s", what, dlp_dtypes[t->dtype].name, dlp_dtypes[dtype].name);
  if (gpu) {
    new_result(L, t, flat, dtype, what);
    int r_idx = lua_gettop(L);
    scan_on_device(L, t, r_idx, flat, dim, prod, what);
    if (out_idx) into_out(L, out_idx, r_idx, what);
    return 1;
  }
  if (flat && t->dl.ndim != 1) { /* row-major order: a contiguous copy, scanned as one line */
    dlp_clone(L, 1, t->dtype, result_device(t), NULL, what);
    lua_replace(L, 1);
    t = dlp_tensor_check(L, 1);
  }
  dlp_Tensor *r = new_result(L, t, flat, dtype, what);
  int r_idx = lua_gettop(L);
  dlp_live(L, t, what);
  ScanLine s = {dtype, prod, 1, 0, 0, dlp_row_function(dtype, t->dtype)};
  if (flat) {
    s.n = dlp_numel(t);
    s.in_step = t->dl.ndim == 1 ? dlp_walk_stride(t, 0) : dlp_dtypes[t->dtype].itemsize;
    s.out_step = dlp_dtypes[dtype].itemsize;
    char *p[2] = {dlp_first_element(t), dlp_first_element(r)};
    if (s.n > 0) scan_line(&s, p, NULL);
  } else if (dim < 0) {
    char *p[2] = {dlp_first_element(t), dlp_first_element(r)};
    scan_line(&s, p, NULL);
  } else if (dlp_numel(t) > 0) { /* an empty tensor's other sizes may be up to 2^63 - 1 lines of none */
    const dlp_Tensor *ops[2] = {t, r};
    s.n = t->dl.shape[dim];
    s.in_step = dlp_walk_stride(t, dim);
    s.out_step = dlp_walk_stride(r, dim);
    dlp_each_line(2, ops, dim, scan_line, &s, dlp_line_parts(t, dim), NULL, 0); /* r is new: lines of its own */
  }
  if (out_idx) into_out(L, out_idx, r_idx, what);
  return 1;
}

static int l_cumsum(lua_State *L) { return scan(L, 0, "dlpack.cumsum"); }
static int l_cumprod(lua_State *L) { return scan(L, 1, "dlpack.cumprod"); }

/* ---- softmax ---- */

/* exp for float32 in a form the vectoriser takes (Cephes' expf: a degree-5 polynomial on
 * x - n ln 2, |x - n ln 2| <= ln 2 / 2, scaled by 2^n through the exponent bits; within 2 ulp).
 * Beyond its range: 0 below -87.33 (the float32 denormals are not produced), inf above 88.72. */
static inline float exp_f32(float x) {
  float c = x > -87.33654f ? x : -87.33654f; /* NaN too: it takes the last line's select */
  c = c < 88.3762626647949f ? c : 88.3762626647949f;
  float t = c * 1.44269504088896341f + 12582912.0f; /* round(c / ln 2) in the low mantissa bits */
  float n = t - 12582912.0f;
  float r = c - n * 0.693359375f - n * -2.12194440e-4f;
  float q = 1.9875691500e-4f;
  q = q * r + 1.3981999507e-3f;
  q = q * r + 8.3334519073e-3f;
  q = q * r + 4.1665795894e-2f;
  q = q * r + 1.6666665459e-1f;
  q = q * r + 5.0000001201e-1f;
  q = q * r * r + r + 1.0f;
  int32_t bits = ((int32_t)n + 127) * (1 << 23);
  float scale;
  memcpy(&scale, &bits, 4);
  float e = q * scale;
  e = x < -87.33654f ? 0.0f : e;
  e = x > 88.72283f ? INFINITY : e;
  return x != x ? x : e;
}

/* exp(x[i] - m) into y (which may be x), their sum returned (8 partial sums: a loop the
 * vectoriser takes); and the maximum of x with whether x holds a NaN, likewise */
#define DEFINE_LINE_LOOPS(exp_sum, max_of, ATTR)                                                      \
  ATTR static float exp_sum(float *y, const float *x, int64_t n, float m) {                          \
    float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                         \
    int64_t i = 0;                                                                                     \
    for (; i + 8 <= n; i += 8)                                                                         \
      for (int j = 0; j < 8; j++) {                                                                    \
        float e = exp_f32(x[i + j] - m);                                                               \
        y[i + j] = e;                                                                                  \
        part[j] += e;                                                                                  \
      }                                                                                                \
    float sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7])); \
    for (; i < n; i++) {                                                                               \
      y[i] = exp_f32(x[i] - m);                                                                        \
      sum += y[i];                                                                                     \
    }                                                                                                  \
    return sum;                                                                                        \
  }                                                                                                    \
  ATTR static float max_of(const float *x, int64_t n, int *nan) {                                      \
    float lane[8];                                                                                     \
    int bad[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                             \
    int64_t i = 0;                                                                                     \
    for (int j = 0; j < 8; j++) lane[j] = x[0];                                                        \
    for (; i + 8 <= n; i += 8)                                                                         \
      for (int j = 0; j < 8; j++) {                                                                    \
        float v = x[i + j];                                                                            \
        lane[j] = v > lane[j] ? v : lane[j];                                                           \
        bad[j] |= v != v;                                                                              \
      }                                                                                                \
    float m = lane[0];                                                                                 \
    int b = bad[0];                                                                                    \
    for (int j = 1; j < 8; j++) m = lane[j] > m ? lane[j] : m, b |= bad[j];                            \
    for (; i < n; i++) m = x[i] > m ? x[i] : m, b |= x[i] != x[i];                                     \
    *nan = b;                                                                                          \
    return m;                                                                                          \
  }
DEFINE_LINE_LOOPS(exp_sum_plain, max_plain, )
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
DEFINE_LINE_LOOPS(exp_sum_avx2, max_lanes_avx2, __attribute__((target("avx2"))))
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
/* max_lanes_avx2 in vectors of 8 lanes, four of them at a time (a compare and a select each: one
 * chain of them waited on itself), the same maximum: the greatest non-NaN value (which of two
 * equal zeros does not matter, x - m is the same), and whether there is a NaN. GCC does not
 * vectorise the selects at -O2, and the first pass over a line waits on memory the most. */
__attribute__((target("avx2"))) static float max_avx2(const float *x, int64_t n, int *nan) {
  if (n < 32) return max_lanes_avx2(x, n, nan);
  v8f lane[4];
  v8i bad = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int k = 0; k < 4; k++)
    for (int j = 0; j < 8; j++) lane[k][j] = x[0];
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; k++) {
      v8f v;
      memcpy(&v, x + i + 8 * k, sizeof v);
      v8i greater = v > lane[k];
      lane[k] = (v8f)((greater & (v8i)v) | (~greater & (v8i)lane[k]));
      bad |= v != v;
    }
  float m = lane[0][0];
  int b = 0;
  for (int k = 0; k < 4; k++)
    for (int j = 0; j < 8; j++) m = lane[k][j] > m ? lane[k][j] : m, b |= bad[j] != 0;
  for (; i < n; i++) m = x[i] > m ? x[i] : m, b |= x[i] != x[i];
  *nan = b;
  return m;
}

/* exp_sum_avx2 with AVX-512: exp_f32 on 16 lanes, each operation the same (multiplies and adds
 * rounded apart, as this file compiles without contraction; the same clamps and selects), and the
 * 8 partial sums taking the low 8 lanes, then the high 8: the same bits, in half the operations. */
#include <immintrin.h>
__attribute__((target("avx512f"))) static float exp_sum_avx512(float *y, const float *x, int64_t n, float m) {
  const __m512 lo_clamp = _mm512_set1_ps(-87.33654f), hi_clamp = _mm512_set1_ps(88.3762626647949f);
  const __m512 shifter = _mm512_set1_ps(12582912.0f), zero = _mm512_setzero_ps();
  __m256 part = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_sub_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(m));
    __m512 c = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, lo_clamp, _CMP_GT_OQ), lo_clamp, v);
    c = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(c, hi_clamp, _CMP_LT_OQ), hi_clamp, c);
    __m512 t = _mm512_add_ps(_mm512_mul_ps(c, _mm512_set1_ps(1.44269504088896341f)), shifter);
    __m512 k = _mm512_sub_ps(t, shifter);
    __m512 r = _mm512_sub_ps(_mm512_sub_ps(c, _mm512_mul_ps(k, _mm512_set1_ps(0.693359375f))),
                             _mm512_mul_ps(k, _mm512_set1_ps(-2.12194440e-4f)));
    __m512 q = _mm512_set1_ps(1.9875691500e-4f);
    q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(1.3981999507e-3f));
    q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(8.3334519073e-3f));
    q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(4.1665795894e-2f));
    q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(1.6666665459e-1f));
    q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(5.0000001201e-1f));
    q = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(q, r), r), r), _mm512_set1_ps(1.0f));
    __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(k), _mm512_set1_epi32(127)), 23);
    __m512 e = _mm512_mul_ps(q, _mm512_castsi512_ps(bits));
    e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, lo_clamp, _CMP_LT_OQ), e, zero);
    e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, _mm512_set1_ps(88.72283f), _CMP_GT_OQ), e,
                             _mm512_set1_ps(INFINITY));
    e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), e, v);
    _mm512_storeu_ps(y + i, e);
    part = _mm256_add_ps(part, _mm512_castps512_ps256(e));
    part = _mm256_add_ps(part, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
  }
  float lane[8];
  _mm256_storeu_ps(lane, part);
  if (i + 8 <= n) { /* one more group of 8, as the other build's loop */
    for (int j = 0; j < 8; j++) {
      float e = exp_f32(x[i + j] - m);
      y[i + j] = e;
      lane[j] += e;
    }
    i += 8;
  }
  float sum = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  for (; i < n; i++) {
    y[i] = exp_f32(x[i] - m);
    sum += y[i];
  }
  return sum;
}
static float exp_sum_f32(float *y, const float *x, int64_t n, float m) {
  return dlp_cpu_level() >= DLP_CPU_AVX512 ? exp_sum_avx512(y, x, n, m)
         : dlp_cpu_has_avx2()              ? exp_sum_avx2(y, x, n, m)
                                           : exp_sum_plain(y, x, n, m);
}
static float max_f32(const float *x, int64_t n, int *nan) {
  return dlp_cpu_has_avx2() ? max_avx2(x, n, nan) : max_plain(x, n, nan);
}
#else
static float exp_sum_f32(float *y, const float *x, int64_t n, float m) { return exp_sum_plain(y, x, n, m); }
static float max_f32(const float *x, int64_t n, int *nan) { return max_plain(x, n, nan); }
#endif
#undef DEFINE_LINE_LOOPS

typedef struct SoftmaxLine {
  int log, wide;               /* log_softmax; computing in float64 */
  int direct_in, direct_out;   /* float32 rows read / written where they are */
  int64_t n, in_step, out_step;
  dlp_RowFn load, store;       /* the input into the compute dtype, the compute dtype into the result */
} SoftmaxLine;

/* line: the part's scratch, n elements of float64 or 2n of float32 */
static void softmax_line(void *ctx, char *const *p, char *line) {
  const SoftmaxLine *s = ctx;
  int64_t n = s->n;
  if (n == 0) return;
  if (s->wide) {
    s->load(line, 8, p[0], s->in_step, n);
    double *x = (double *)(void *)line, m = x[0];
    for (int64_t i = 1; i < n; i++) m = x[i] > m || x[i] != x[i] ? x[i] : m;
    if (m != m) { /* NaN: every result is NaN */
      for (int64_t i = 0; i < n; i++) x[i] = m;
    } else {
      double sum = 0;
      if (m == -INFINITY) m = 0; /* every element -inf: NaN below, as torch */
      for (int64_t i = 0; i < n; i++) sum += exp(x[i] - m);
      if (s->log) {
        double logsum = log(sum);
        for (int64_t i = 0; i < n; i++) x[i] = (x[i] - m) - logsum;
      } else {
        double inv = 1 / sum;
        for (int64_t i = 0; i < n; i++) x[i] = exp(x[i] - m) * inv;
      }
    }
    s->store(p[1], s->out_step, line, 8, n);
  } else {
    /* float32 lines read and written in place when they are (aligned) rows of float32 */
    const float *x = (const float *)(const void *)line;
    float *y = (float *)(void *)line;
    if (s->direct_in && (uintptr_t)p[0] % 4 == 0) x = (const float *)(const void *)p[0];
    else s->load(line, 4, p[0], s->in_step, n);
    int direct_out = s->direct_out && (uintptr_t)p[1] % 4 == 0, nan;
    if (direct_out) y = (float *)(void *)p[1];
    float m = max_f32(x, n, &nan);
    if (nan) {
      for (int64_t i = 0; i < n; i++) y[i] = NAN;
    } else if (s->log) {
      if (m == -INFINITY) m = 0;
      float sum = exp_sum_f32((float *)(void *)line + n, x, n, m); /* the exps in the scratch's second half */
      float logsum = logf(sum);
      for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) - logsum; /* torch's order: x - m is exact near m */
    } else {
      if (m == -INFINITY) m = 0;
      float inv = 1 / exp_sum_f32(y, x, n, m);
      for (int64_t i = 0; i < n; i++) y[i] *= inv;
    }
    if (!direct_out) s->store(p[1], s->out_step, line, 4, n);
  }
}

/* softmax on a CUDA device, composed of the computing functions that run there (the tensors'
 * methods): x in the compute dtype, m its max along dim, e = exp(x - m), s = sum(e) along dim;
 * softmax e / s, log_softmax (x - m) - log(s); then the result's dtype. The stack holds the
 * steps' tensors until the call returns. */
static int call_method(lua_State *L, int self, const char *name, int nargs) {
  int base = lua_gettop(L) - nargs; /* the arguments are on top */
  dlp_push_method(L, name); /* as it was when the module opened */
  lua_pushvalue(L, self);
  for (int i = 1; i <= nargs; i++) lua_pushvalue(L, base + i);
  lua_call(L, nargs + 1, 1);
  if (nargs > 0) lua_replace(L, base + 1); /* the result where the arguments began */
  lua_settop(L, base + 1);
  return base + 1;
}

static int softmax_on_device(lua_State *L, int log, int dim, int dtype, int cdtype) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  int x = 1;
  if (t->dtype != dtype && dtype != cdtype) { /* float16/bfloat16 from another dtype: rounded to it first */
    lua_pushstring(L, dlp_dtypes[dtype].name);
    x = call_method(L, x, "to", 1);
  }
  lua_pushstring(L, dlp_dtypes[cdtype].name);
  x = call_method(L, x, "to", 1);
  int m = x, e, sum, r;
  if (dim >= 0 && dlp_numel(t) > 0) {
    lua_pushinteger(L, dim + 1);
    lua_createtable(L, 0, 1);
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "keepdim");
    m = call_method(L, x, "max", 2);
  }
  lua_pushvalue(L, m);
  int d = call_method(L, x, "sub", 1);
  e = call_method(L, d, "exp", 0);
  sum = e;
  if (dim >= 0) {
    lua_pushinteger(L, dim + 1);
    lua_createtable(L, 0, 1);
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "keepdim");
    sum = call_method(L, e, "sum", 2);
  }
  if (log) {
    int ls = call_method(L, sum, "log", 0);
    lua_pushvalue(L, ls);
    r = call_method(L, d, "sub", 1);
  } else {
    lua_pushvalue(L, sum);
    r = call_method(L, e, "div", 1);
  }
  lua_pushstring(L, dlp_dtypes[dtype].name);
  call_method(L, r, "to", 1);
  return 1;
}

/* softmax(t, dim [, opts{dtype}]) and log_softmax: dtype converts the input first (torch's);
 * without it floats keep their dtype and integers and bools give float32. float16 and bfloat16
 * compute in float32, rounded once. */
static int softmax(lua_State *L, int log, const char *what) {
  dlp_ComputeOptions o;
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  if (lua_isnoneornil(L, 2)) luaL_argerror(L, 2, "dim expected (the dimension whose lines sum to 1)");
  dlp_read_compute_options(L, 3, DLP_COPT_DTYPE, &o, what);
  dlp_check_no_more(L, 4, what, "(t, dim [, opts])");
  lua_settop(L, 3);
  int dim = line_dim(L, 2, t);
  int dtype = o.dtype >= 0 ? o.dtype : dlp_dtype_kind(t->dtype) == K_FLOAT ? t->dtype : DLP_FLOAT32;
  if (dlp_dtype_kind(dtype) != K_FLOAT || dlp_dtype_kind(t->dtype) == K_COMPLEX)
    luaL_error(L, "%s: the result is a real float (float16, bfloat16, float32, float64), not %s", what,
               dlp_dtypes[dlp_dtype_kind(t->dtype) == K_COMPLEX ? t->dtype : dtype].name);
  SoftmaxLine s;
  s.log = log;
  s.wide = dtype == DLP_FLOAT64;
  int cdtype = s.wide ? DLP_FLOAT64 : DLP_FLOAT32;
  if (t->dl.device.device_type == kDLCUDA) {
    dlp_check_computes(L, t->dtype, what);
    return softmax_on_device(L, log, dim, dtype, cdtype);
  }
  check_cpu(L, t, what);
  /* the input reaches the compute dtype through the result's dtype (torch converts first) */
  dlp_Tensor *r = new_result(L, t, 0, dtype, what);
  int r_idx = lua_gettop(L);
  int64_t n = dim < 0 ? 1 : t->dl.shape[dim];
  if (dlp_numel(t) == 0) n = 0;
  if ((uint64_t)n > SIZE_MAX / 16) luaL_error(L, "%s: a line of %I elements is too long", what, (lua_Integer)n);
  /* a scratch of n float64 or 2n float32 for each part of the lines (parts <= the lines: it fits) */
  int64_t parts = dim < 0 ? 1 : dlp_line_parts(t, dim);
  size_t line_bytes = (size_t)(n > 0 ? n : 1) * 8;
  if (line_bytes > SIZE_MAX / (size_t)parts) parts = 1;
  char *scratch = lua_newuserdatauv(L, line_bytes * (size_t)parts, 0);
  dlp_Tensor *mid = NULL;
  if (t->dtype != dtype && dtype != cdtype) /* float16/bfloat16 from another dtype: rounded to it first */
    mid = new_result(L, t, 0, dtype, what);
  dlp_live(L, t, what);
  if (mid) {
    dlp_copy(L, mid, t, NULL, what);
    t = mid;
  }
  s.n = n;
  s.load = dlp_row_function(cdtype, t->dtype);
  s.store = dlp_row_function(dtype, cdtype);
  if (!s.load) luaL_error(L, "%s: %s does not convert to %s", what, dlp_dtypes[t->dtype].name, dlp_dtypes[cdtype].name);
  s.direct_in = s.direct_out = 0;
  if (dim < 0) {
    char *p[2] = {dlp_first_element(t), dlp_first_element(r)};
    s.in_step = s.out_step = 0;
    softmax_line(&s, p, scratch);
  } else if (dlp_numel(t) > 0) { /* an empty tensor's other sizes may be up to 2^63 - 1 lines of none */
    const dlp_Tensor *ops[2] = {t, r};
    s.in_step = dlp_walk_stride(t, dim);
    s.out_step = dlp_walk_stride(r, dim);
    s.direct_in = t->dtype == DLP_FLOAT32 && s.in_step == 4;
    s.direct_out = dtype == DLP_FLOAT32 && s.out_step == 4;
    dlp_each_line(2, ops, dim, softmax_line, &s, parts, scratch, line_bytes); /* r is new: lines of its own */
  }
  lua_pushvalue(L, r_idx);
  return 1;
}

static int l_softmax(lua_State *L) { return softmax(L, 0, "dlpack.softmax"); }
static int l_log_softmax(lua_State *L) { return softmax(L, 1, "dlpack.log_softmax"); }

void dlp_scan_register(lua_State *L, int module, int methods, int meta) {
  static const luaL_Reg functions[] = {
      {"cumsum", l_cumsum}, {"cumprod", l_cumprod}, {"softmax", l_softmax}, {"log_softmax", l_log_softmax},
      {NULL, NULL},
  };
  (void)meta;
  dlp_register(L, module, functions);
  dlp_register(L, methods, functions);
}
