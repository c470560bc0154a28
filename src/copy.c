/* Copies and conversion: strided element loops, clone, contiguous, copy, to, fill. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Byte strides of t, and the number of elements; 0 elements means nothing to visit. */
static int64_t byte_strides(const dlp_Tensor *t, int64_t *bstrides) {
  int64_t itemsize = dlp_dtypes[t->dtype].itemsize;
  for (int i = 0; i < t->dl.ndim; i++) bstrides[i] = t->dl.strides[i] * itemsize;
  return dlp_numel(t);
}

/* Advance a row-major multi-index; moves *p by the byte strides. Pointers stay inside the tensor. */
static void advance(int ndim, const int64_t *shape, const int64_t *bstrides, int64_t *idx, char **p) {
  for (int d = ndim - 1; d >= 0; d--) {
    if (++idx[d] < shape[d]) {
      *p += bstrides[d];
      return;
    }
    *p -= bstrides[d] * (shape[d] - 1);
    idx[d] = 0;
  }
}

void dlp_foreach(const dlp_Tensor *t, void (*fn)(char *p, void *ud), void *ud) {
  int64_t bstrides[DLP_MAX_NDIM], idx[DLP_MAX_NDIM] = {0};
  int64_t n = byte_strides(t, bstrides);
  char *p = dlp_first_element(t);
  for (int64_t k = 0; k < n; k++) {
    fn(p, ud);
    if (k + 1 < n) advance(t->dl.ndim, t->dl.shape, bstrides, idx, &p);
  }
}

/* Element types that convert through dlp_Scalar (the rest copy byte for byte only). */
static int convertible(int dtype) {
  return dtype <= DLP_COMPLEX128;
}

/* One row (the innermost dimension) of a same-dtype copy, with typed moves for common sizes. */
static void copy_row(char *d, int64_t ds, const char *s, int64_t ss, int64_t n, size_t itemsize) {
#define COPY_ROW(type) \
  for (int64_t i = 0; i < n; i++, d += ds, s += ss) *(type *)d = *(const type *)s; \
  return
  if ((uintptr_t)d % itemsize == 0 && (uintptr_t)s % itemsize == 0 && ds % (int64_t)itemsize == 0 &&
      ss % (int64_t)itemsize == 0) {
    switch (itemsize) {
      case 1: COPY_ROW(uint8_t);
      case 2: COPY_ROW(uint16_t);
      case 4: COPY_ROW(uint32_t);
      case 8: COPY_ROW(uint64_t);
      default: break;
    }
  }
#undef COPY_ROW
  for (int64_t i = 0; i < n; i++, d += ds, s += ss) memcpy(d, s, itemsize);
}

static void convert_row(int dd, char *d, int64_t ds, int sd, const char *s, int64_t ss, int64_t n) {
  for (int64_t i = 0; i < n; i++, d += ds, s += ss) {
    dlp_Scalar v;
    dlp_load(sd, s, &v);
    dlp_store(dd, d, &v);
  }
}

/* dst and src have the same shape, are host memory and do not overlap. Rows of the
 * innermost dimension are copied in a tight loop; the outer dimensions are walked. */
static void copy_elements(dlp_Tensor *dst, const dlp_Tensor *src) {
  int64_t ds[DLP_MAX_NDIM], ss[DLP_MAX_NDIM], idx[DLP_MAX_NDIM] = {0}, sidx[DLP_MAX_NDIM] = {0};
  int64_t n = byte_strides(dst, ds);
  char *d = dlp_first_element(dst), *s = dlp_first_element(src);
  size_t itemsize = dlp_dtypes[dst->dtype].itemsize;
  int nd = dst->dl.ndim;
  byte_strides(src, ss);
  if (n == 0) return;
  if (dst->dtype == src->dtype && dlp_is_contiguous(dst) && dlp_is_contiguous(src)) {
    memcpy(d, s, dlp_storage_bytes(dst->dtype, n, dst->flags));
    return;
  }
  int64_t row = nd > 0 ? dst->dl.shape[nd - 1] : 1;
  int64_t drow = nd > 0 ? ds[nd - 1] : 0, srow = nd > 0 ? ss[nd - 1] : 0;
  int outer_nd = nd > 0 ? nd - 1 : 0;
  for (int64_t k = 0; k < n; k += row) {
    if (dst->dtype == src->dtype) copy_row(d, drow, s, srow, row, itemsize);
    else convert_row(dst->dtype, d, drow, src->dtype, s, srow, row);
    if (k + row < n) {
      advance(outer_nd, dst->dl.shape, ds, idx, &d);
      advance(outer_nd, src->dl.shape, ss, sidx, &s);
    }
  }
}

static void push_shape_string(lua_State *L, const dlp_Tensor *t) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addchar(&b, '{');
  for (int i = 0; i < t->dl.ndim; i++) {
    if (i) luaL_addstring(&b, ", ");
    lua_pushinteger(L, t->dl.shape[i]);
    luaL_addvalue(&b);
  }
  luaL_addchar(&b, '}');
  luaL_pushresult(&b);
}

void dlp_copy_on(lua_State *L, dlp_Tensor *dst, const dlp_Tensor *src, dlp_CudaStream *stream) {
  int same = dst->dl.ndim == src->dl.ndim;
  for (int i = 0; same && i < dst->dl.ndim; i++) same = dst->dl.shape[i] == src->dl.shape[i];
  if (!same) {
    push_shape_string(L, dst);
    push_shape_string(L, src);
    luaL_error(L, "copy: shapes differ (destination %s, source %s)", lua_tostring(L, -2), lua_tostring(L, -1));
  }
  dlp_check_writable(L, dst, "copy");
  if (!dlp_device_is_host(dst->dl.device) || !dlp_device_is_host(src->dl.device)) {
    dlp_cuda_copy(L, dst, src, stream); /* raises for devices other than CUDA's */
    return;
  }
  if (dst->dtype != src->dtype && !(convertible(dst->dtype) && convertible(src->dtype)))
    luaL_error(L, "copy: cannot convert %s to %s (only byte-for-byte copies of the same dtype)",
               dlp_dtypes[src->dtype].name, dlp_dtypes[dst->dtype].name);
  if (dlp_dtype_is_subbyte(src->dtype) && (!dlp_is_contiguous(dst) || !dlp_is_contiguous(src)))
    luaL_error(L, "copy: packed %s tensors can only be copied when contiguous", dlp_dtypes[src->dtype].name);
  if (dst->owner == src->owner && dlp_numel(src) > 0) {
    /* Same memory: go through a contiguous temporary so overlapping views copy correctly. */
    DLDevice cpu = {kDLCPU, 0};
    dlp_Tensor *tmp = dlp_tensor_new(L, src->dtype, cpu, src->dl.ndim, src->dl.shape, 0);
    copy_elements(tmp, src);
    copy_elements(dst, tmp);
    lua_pop(L, 1);
    return;
  }
  copy_elements(dst, src);
}

void dlp_copy_into(lua_State *L, dlp_Tensor *dst, const dlp_Tensor *src) {
  dlp_copy_on(L, dst, src, NULL);
}

static dlp_Tensor *clone_on(lua_State *L, const dlp_Tensor *t, int dtype, DLDevice device, dlp_CudaStream *stream) {
  dlp_Tensor *c = dlp_tensor_new(L, dtype, device, t->dl.ndim, t->dl.shape, 0);
  c->flags = t->flags & DLP_FLAG_SUBBYTE_PADDED;
  dlp_copy_on(L, c, t, stream);
  return c;
}

dlp_Tensor *dlp_clone(lua_State *L, const dlp_Tensor *t, int dtype, DLDevice device) {
  return clone_on(L, t, dtype, device, NULL);
}

typedef struct FillState {
  unsigned char value[16];
  size_t itemsize;
} FillState;

static void fill_one(char *p, void *ud) {
  FillState *f = ud;
  memcpy(p, f->value, f->itemsize);
}

void dlp_fill(lua_State *L, dlp_Tensor *t, int idx, const char *what) {
  FillState f;
  dlp_check_writable(L, t, what);
  dlp_check_host(L, t, what);
  dlp_check_element(L, idx, t->dtype, f.value, what);
  f.itemsize = dlp_dtypes[t->dtype].itemsize;
  dlp_foreach(t, fill_one, &f);
}

static int l_fill(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  luaL_checkany(L, 2);
  dlp_fill(L, t, 2, "fill");
  lua_settop(L, 1);
  return 1;
}

/* opts.stream at arg (a table or nil): the stream for copies that involve a CUDA device. */
static dlp_CudaStream *opt_stream(lua_State *L, int arg, const dlp_Tensor *a, const dlp_Tensor *b) {
  if (lua_isnoneornil(L, arg) || lua_getfield(L, arg, "stream") == LUA_TNIL) return NULL;
  if (dlp_device_is_host(a->dl.device) && dlp_device_is_host(b->dl.device))
    luaL_argerror(L, arg, "stream given for a copy between host devices, which have no streams");
  const dlp_Tensor *on = dlp_device_is_host(a->dl.device) ? b : a; /* the CUDA side names the device */
  return dlp_cuda_check_stream(L, lua_gettop(L), on->dl.device, "copy"); /* NULL for -1: synchronously */
}

/* t:copy(src [, {stream = s}]) */
static int l_copy(lua_State *L) {
  dlp_Tensor *dst = dlp_tensor_check(L, 1);
  dlp_Tensor *src = dlp_tensor_check(L, 2);
  if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TTABLE);
  dlp_copy_on(L, dst, src, opt_stream(L, 3, dst, src));
  lua_settop(L, 1);
  return 1;
}

static int l_clone(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  dlp_clone(L, t, t->dtype, t->dl.device); /* host, or CUDA when it is there */
  return 1;
}

static int l_contiguous(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  if (dlp_is_contiguous(t)) {
    lua_settop(L, 1);
    return 1;
  }
  dlp_clone(L, t, t->dtype, t->dl.device);
  return 1;
}

/* t:to(dtype | device | {dtype=, device=, copy=, stream=}) */
static int l_to(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  int dtype = t->dtype, copy = -1; /* -1: only when needed */
  DLDevice device = t->dl.device;
  dlp_CudaStream *stream = NULL;
  if (lua_type(L, 2) == LUA_TSTRING) {
    const char *s = lua_tostring(L, 2);
    int d = dlp_test_dtype_name(s);
    if (d >= 0) dtype = d;
    else if (!dlp_test_device_name(s, &device))
      return luaL_argerror(L, 2, lua_pushfstring(L, "'%s' is neither a dtype nor a device", s));
  } else {
    luaL_checktype(L, 2, LUA_TTABLE);
    if (lua_getfield(L, 2, "dtype") != LUA_TNIL && (dtype = dlp_test_dtype_name(luaL_tolstring(L, -1, NULL))) < 0)
      return luaL_argerror(L, 2, lua_pushfstring(L, "unknown dtype '%s'", lua_tostring(L, -1)));
    if (lua_getfield(L, 2, "device") != LUA_TNIL && !dlp_test_device_name(luaL_tolstring(L, -1, NULL), &device))
      return luaL_argerror(L, 2, lua_pushfstring(L, "unknown device '%s'", lua_tostring(L, -1)));
    if (lua_getfield(L, 2, "copy") != LUA_TNIL) copy = lua_toboolean(L, -1);
    if (lua_getfield(L, 2, "stream") != LUA_TNIL) {
      if (dlp_device_is_host(device) && dlp_device_is_host(t->dl.device))
        return luaL_argerror(L, 2, "stream given for a copy between host devices, which have no streams");
      DLDevice on = dlp_device_is_host(device) ? t->dl.device : device; /* the CUDA side names the device */
      stream = dlp_cuda_check_stream(L, lua_gettop(L), on, "to");
    }
  }
  int same_device = dlp_device_equal(device, t->dl.device);
  if (dtype == t->dtype && same_device && copy != 1) {
    lua_settop(L, 1);
    return 1;
  }
  if (dtype == t->dtype && copy != 1 && device.device_type == kDLCPU && dlp_device_is_host(t->dl.device)) {
    dlp_tensor_alias(L, t, device); /* pinned and managed memory is CPU memory */
    return 1;
  }
  if (copy == 0) {
    dlp_push_device_name(L, device);
    return dlp_buffer_error(L, "to: copy = false, but converting to %s on %s needs a copy",
                            dlp_dtypes[dtype].name, lua_tostring(L, -1));
  }
  clone_on(L, t, dtype, device, stream);
  return 1;
}

void dlp_copy_register(lua_State *L, int methods) {
  static const luaL_Reg method_list[] = {
    {"fill", l_fill}, {"copy", l_copy}, {"clone", l_clone}, {"contiguous", l_contiguous},
    {"to", l_to}, {NULL, NULL},
  };
  dlp_register(L, methods, method_list);
}
