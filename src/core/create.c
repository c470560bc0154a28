/* More ways to make tensors: zeros_like, ones_like, empty_like, full_like, linspace, eye; the
 * reader of shapes given as a table or as numbers (torch7's zeros(2, 3)), and the filled tensor
 * that ones, full and the *_like functions share. empty, zeros, ones, full and arange stay in
 * tensor.c. Every function reads its arguments into C values first, allocates, then writes. */
#include <math.h>
#include <string.h>

#include "compute/ops.h"
#include "internal.h"

/* linspace computes as NumPy does, one rounding per operation: no fused multiply-add (GCC
 * contracts a * b + c outside the ISO modes, clang within an expression). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* ---- shapes as a table or as numbers ---- */

static const char *integer_kind(int64_t min) {
  return min == 0 ? "a non-negative integer" : min == -1 ? "a size or -1" : "an integer";
}

int dlp_check_integer_args(lua_State *L, int arg, int64_t *out, int max, int64_t min, const char *what, int *next) {
  int n = 0, type = lua_type(L, arg);
  if (type == LUA_TTABLE) {
    *next = arg + 1;
    return dlp_check_integers(L, arg, out, max, min, what);
  }
  if (type != LUA_TNUMBER)
    return luaL_argerror(L, arg, lua_pushfstring(L, "%s expected as a table or as numbers, got %s", what,
                                                 luaL_typename(L, arg)));
  for (int top = lua_gettop(L); arg + n <= top && lua_type(L, arg + n) == LUA_TNUMBER; n++) { /* read raw */
    int isint;
    if (n == max) luaL_argerror(L, arg + n, lua_pushfstring(L, "%s has more than %d entries", what, max));
    lua_Integer v = lua_tointegerx(L, arg + n, &isint);
    if (!isint || v < min) {
      lua_Number x = lua_tonumber(L, arg + n);
      lua_pushvalue(L, arg + n); /* a copy to convert to text */
      luaL_argerror(L, arg + n, lua_pushfstring(L, "%s[%d] must be %s, got %s", what, n + 1, integer_kind(min),
                                                x != x ? "nan" : lua_tostring(L, -1)));
    }
    out[n] = v;
  }
  *next = arg + n;
  return n;
}

int dlp_check_shape_args(lua_State *L, int arg, int64_t *shape, int *next) {
  int64_t numel;
  int ndim = dlp_check_integer_args(L, arg, shape, DLP_MAX_NDIM, 0, "shape", next);
  if (!dlp_numel_of(ndim, shape, &numel)) luaL_argerror(L, arg, "shape has more elements than fit in 64 bits");
  return ndim;
}

/* ---- filled tensors ---- */

void dlp_one_element(lua_State *L, int dtype, void *out) {
  dlp_Scalar one = {DLP_S_INT, 1, 1, 1, 0};
  dlp_check_access(L, dtype);
  dlp_store(dtype, out, &one);
}

dlp_Tensor *dlp_tensor_filled(lua_State *L, int dtype, DLDevice device, int ndim, const int64_t *shape,
                              const void *element, const char *what) {
  DLDevice cpu = {kDLCPU, 0};
  size_t itemsize = dlp_dtypes[dtype].itemsize;
  dlp_Tensor *t = dlp_tensor_new(L, dtype, 0, device, ndim, shape, 0, what);
  if (dlp_numel(t) == 0) return t; /* its memory may be NULL */
  if (dlp_device_is_host(device)) {
    dlp_fill_row(dlp_first_element(t), (int64_t)itemsize, element, dlp_numel(t), itemsize);
  } else if (device.device_type == kDLCUDA && !dlp_is_packed(dtype, t->flags)) { /* a kernel */
    dlp_fill_on_cuda(L, t, element, NULL, what);
  } else { /* fill on the host, then one copy to the device */
    dlp_Tensor *staging = dlp_tensor_new(L, dtype, 0, cpu, ndim, shape, 0, what);
    dlp_fill_row(dlp_first_element(staging), (int64_t)itemsize, element, dlp_numel(staging), itemsize);
    dlp_cuda_copy(L, t, staging, NULL, what);
    dlp_tensor_release(staging);
    lua_pop(L, 1);
  }
  return t;
}

/* ---- *_like ----
 * dlpack.zeros_like(t [, dtype [, device]]), ones_like, empty_like, full_like(t, v [, dtype [,
 * device]]): a new contiguous tensor of t's shape, with t's dtype and device unless given. Only
 * t's metadata is read (it never changes), never its memory: a release of t by a metamethod
 * while the other arguments are read changes nothing. */
enum { LIKE_EMPTY, LIKE_ZEROS, LIKE_ONES, LIKE_FULL };

static int like(lua_State *L, int kind, const char *what) {
  int64_t shape[DLP_MAX_NDIM];
  unsigned char element[16];
  int first = kind == LIKE_FULL ? 3 : 2; /* the dtype's argument */
  dlp_check_no_more(L, first + 2, what, kind == LIKE_FULL ? "a tensor, a value, a dtype and a device"
                                                         : "a tensor, a dtype and a device");
  const dlp_Tensor *t = dlp_tensor_check(L, 1);
  int ndim = t->dl.ndim, same = 0;
  memcpy(shape, t->dl.shape, (size_t)ndim * sizeof(int64_t));
  if (kind == LIKE_FULL) luaL_checkany(L, 2);
  int dtype = dlp_opt_dtype(L, first, t->dtype);
  DLDevice device = lua_isnoneornil(L, first + 1) ? t->dl.device : dlp_check_device(L, first + 1, first + 1, NULL);
  same = dtype == t->dtype;
  if (kind == LIKE_FULL) dlp_check_element(L, 2, dtype, element, what); /* runs no Lua code */
  else if (kind == LIKE_ONES) dlp_one_element(L, dtype, element);
  if (kind == LIKE_EMPTY || kind == LIKE_ZEROS) /* sub-byte floats stay padded when t's are */
    dlp_tensor_new(L, dtype, same ? t->flags & DLP_FLAG_SUBBYTE_PADDED : 0, device, ndim, shape,
                   kind == LIKE_ZEROS, what);
  else
    dlp_tensor_filled(L, dtype, device, ndim, shape, element, what);
  return 1;
}

static int l_empty_like(lua_State *L) { return like(L, LIKE_EMPTY, "dlpack.empty_like"); }
static int l_zeros_like(lua_State *L) { return like(L, LIKE_ZEROS, "dlpack.zeros_like"); }
static int l_ones_like(lua_State *L) { return like(L, LIKE_ONES, "dlpack.ones_like"); }
static int l_full_like(lua_State *L) { return like(L, LIKE_FULL, "dlpack.full_like"); }

/* ---- linspace ---- */

/* The number at arg, which must be a finite number (strings are not converted). */
static double check_finite(lua_State *L, int arg, const char *name) {
  if (lua_type(L, arg) != LUA_TNUMBER) return luaL_typeerror(L, arg, "number");
  double v = (double)lua_tonumber(L, arg);
  if (!isfinite(v))
    luaL_argerror(L, arg, lua_pushfstring(L, "%s must be a finite number, got %s", name,
                                          isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"));
  return v;
}

/* A count or size at arg: a non-negative integer. */
static int64_t check_count(lua_State *L, int arg, const char *name) {
  int isint;
  if (lua_type(L, arg) != LUA_TNUMBER) return luaL_typeerror(L, arg, "number");
  lua_Integer n = lua_tointegerx(L, arg, &isint);
  if (!isint || n < 0) {
    lua_Number x = lua_tonumber(L, arg);
    lua_pushvalue(L, arg);
    luaL_argerror(L, arg, lua_pushfstring(L, "%s must be a non-negative integer, got %s", name,
                                          x != x ? "nan" : lua_tostring(L, -1)));
  }
  return n;
}

/* Whether floor(v) fits the integer dtype (every value of a linspace lies between its ends). */
static int floor_fits(int dtype, double v) {
  static const double lo[] = {
    [DLP_INT8] = -128.0, [DLP_INT16] = -32768.0, [DLP_INT32] = -2147483648.0, [DLP_INT64] = -9223372036854775808.0,
    [DLP_UINT8] = 0, [DLP_UINT16] = 0, [DLP_UINT32] = 0, [DLP_UINT64] = 0,
  };
  static const double above[] = { /* the dtype's maximum plus one */
    [DLP_INT8] = 128.0, [DLP_INT16] = 32768.0, [DLP_INT32] = 2147483648.0, [DLP_INT64] = 9223372036854775808.0,
    [DLP_UINT8] = 256.0, [DLP_UINT16] = 65536.0, [DLP_UINT32] = 4294967296.0, [DLP_UINT64] = 18446744073709551616.0,
  };
  v = floor(v);
  return v >= lo[dtype] && v < above[dtype];
}

/* dlpack.linspace(a, b, n [, dtype]): NumPy's linspace (endpoint included), computed in float64
 * exactly as NumPy 2 does, then rounded to dtype (integer dtypes: floored first). */
static int l_linspace(lua_State *L) {
  dlp_check_no_more(L, 6, "dlpack.linspace", "a start, a stop, a count, a dtype and a device");
  double a = check_finite(L, 1, "start"), b = check_finite(L, 2, "stop");
  int64_t n = check_count(L, 3, "the count");
  int dtype = dlp_opt_dtype(L, 4, DLP_FLOAT32);
  DLDevice device = {kDLCPU, 0};
  if (!lua_isnoneornil(L, 5)) device = dlp_check_device(L, 5, 5, NULL);
  const char *name = dlp_dtypes[dtype].name;
  if (dtype == DLP_BOOL) return luaL_argerror(L, 4, "linspace of bool is not supported");
  dlp_check_access(L, dtype);
  int integer = dtype >= DLP_INT8 && dtype <= DLP_UINT64;
  double delta = b - a;
  if (!isfinite(delta))
    return luaL_error(L, "dlpack.linspace: stop - start overflows a double (start %f, stop %f)", (lua_Number)a,
                      (lua_Number)b);
  if (integer && n > 0 && (!floor_fits(dtype, a) || (n > 1 && !floor_fits(dtype, b))))
    return luaL_error(L, "dlpack.linspace: the values from %f to %f do not fit %s", (lua_Number)a, (lua_Number)b, name);
  dlp_Tensor *t = dlp_tensor_new(L, dtype, 0, device, 1, &n, 0, "dlpack.linspace");
  double div = (double)(n - 1), step = n > 1 ? delta / div : 0;
  if (device.device_type == kDLCUDA) { /* a, b | step, div | delta, the count (kernels.cu) */
    double params[6] = {a, b, step, div, delta, 0};
    memcpy(&params[5], &n, sizeof n);
    dlp_range_on_cuda(L, t, 2, params, "dlpack.linspace");
    return 1;
  }
  dlp_check_host(L, t, "dlpack.linspace");
  char *p = dlp_first_element(t);
  size_t itemsize = dlp_dtypes[dtype].itemsize;
  dlp_Scalar s = {DLP_S_FLOAT, 0, 0, 0, 0};
  for (int64_t i = 0; i < n; i++, p += itemsize) {
    s.re = dlp_rule_linspace(i, n, a, b, step, div, delta, integer); /* ops.h: as the CUDA kernel */
    dlp_store(dtype, p, &s);
  }
  return 1;
}

/* ---- eye ---- */

/* dlpack.eye(n [, m] [, dtype]): n x m (m defaults to n), ones on the diagonal. */
static int l_eye(lua_State *L) {
  unsigned char one[16];
  int64_t shape[2];
  int dtype_arg = lua_type(L, 2) == LUA_TSTRING ? 2 : 3; /* eye(n, dtype) too */
  dlp_check_no_more(L, dtype_arg + 2, "dlpack.eye", "n, m, a dtype and a device");
  shape[0] = check_count(L, 1, "n");
  shape[1] = dtype_arg == 2 || lua_isnoneornil(L, 2) ? shape[0] : check_count(L, 2, "m");
  int dtype = dlp_opt_dtype(L, dtype_arg, DLP_FLOAT32);
  DLDevice device = {kDLCPU, 0};
  if (!lua_isnoneornil(L, dtype_arg + 1)) device = dlp_check_device(L, dtype_arg + 1, dtype_arg + 1, NULL);
  dlp_one_element(L, dtype, one);
  dlp_Tensor *t = dlp_tensor_new(L, dtype, 0, device, 2, shape, 1, "dlpack.eye");
  if (device.device_type == kDLCUDA) {
    if (dlp_numel(t) > 0) dlp_diagonal_on_cuda(L, t, one, "dlpack.eye");
    return 1;
  }
  dlp_check_host(L, t, "dlpack.eye");
  size_t itemsize = dlp_dtypes[dtype].itemsize;
  int64_t diagonal = shape[0] < shape[1] ? shape[0] : shape[1];
  char *p = dlp_first_element(t);
  for (int64_t i = 0; i < diagonal; i++) /* element (i, i): within the n * m elements */
    memcpy(p + (size_t)(i * (shape[1] + 1)) * itemsize, one, itemsize);
  return 1;
}

void dlp_create_register(lua_State *L, int module, int methods, int meta) {
  static const luaL_Reg functions[] = {
    {"empty_like", l_empty_like}, {"zeros_like", l_zeros_like}, {"ones_like", l_ones_like},
    {"full_like", l_full_like}, {"linspace", l_linspace}, {"eye", l_eye}, {NULL, NULL},
  };
  (void)methods, (void)meta;
  dlp_register(L, module, functions);
}
