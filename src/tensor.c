/* Tensors: the userdata, creation, properties, element access and release. */
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

dlp_Tensor *dlp_tensor_push(lua_State *L, int ndim) {
  size_t size = sizeof(dlp_Tensor) + 2 * (size_t)ndim * sizeof(int64_t);
  dlp_Tensor *t = lua_newuserdatauv(L, size, 0);
  memset(t, 0, size);
  t->dl.ndim = ndim;
  t->dl.shape = t->dims;
  t->dl.strides = t->dims + ndim;
  luaL_setmetatable(L, DLPACK_LUA_TENSOR_MT);
  return t;
}

dlp_Tensor *dlp_tensor_test(lua_State *L, int idx) {
  return luaL_testudata(L, idx, DLPACK_LUA_TENSOR_MT);
}

dlp_Tensor *dlp_tensor_check(lua_State *L, int idx) {
  dlp_Tensor *t = luaL_checkudata(L, idx, DLPACK_LUA_TENSOR_MT);
  if (!t->owner) luaL_argerror(L, idx, "tensor was released");
  return t;
}

void dlp_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
  int64_t step = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    strides[i] = step;
    step *= shape[i] > 0 ? shape[i] : 1;
  }
}

int64_t dlp_numel(const dlp_Tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->dl.ndim; i++) n *= t->dl.shape[i];
  return n;
}

/* Strides of size-1 dimensions say nothing about layout, and an empty tensor is contiguous. */
int dlp_is_contiguous(const dlp_Tensor *t) {
  int64_t expected = 1;
  if (dlp_numel(t) == 0) return 1;
  for (int i = t->dl.ndim - 1; i >= 0; i--) {
    if (t->dl.shape[i] == 1) continue;
    if (t->dl.strides[i] != expected) return 0;
    expected *= t->dl.shape[i];
  }
  return 1;
}

size_t dlp_storage_bytes(int dtype, int64_t numel, uint64_t flags) {
  int bits = dlp_dtypes[dtype].bits;
  if (bits < 8 && !(flags & DLP_FLAG_SUBBYTE_PADDED)) return (size_t)((numel * bits + 7) / 8);
  return (size_t)numel * dlp_dtypes[dtype].itemsize;
}

char *dlp_first_element(const dlp_Tensor *t) {
  return t->dl.data ? (char *)t->dl.data + t->dl.byte_offset : NULL;
}

void dlp_check_host(lua_State *L, const dlp_Tensor *t, const char *what) {
  if (!dlp_device_is_host(t->dl.device)) {
    dlp_push_device_name(L, t->dl.device);
    luaL_error(L, "%s: the tensor is on device %s, whose memory the CPU cannot access", what,
               lua_tostring(L, -1));
  }
}

void dlp_check_writable(lua_State *L, const dlp_Tensor *t, const char *what) {
  if (t->flags & DLP_FLAG_READ_ONLY) luaL_error(L, "%s: the tensor is read-only", what);
}

/* Lua cannot see tensor memory. A step "as if" n bytes were allocated paces the collector,
 * and a full collection once the bytes made since the last one exceed the Lua heap (and
 * 32 MiB) bounds what dropped tensors hold, at a cost proportional to what was allocated. */
#define FULL_GC_MIN_BYTES ((size_t)32 << 20)

void dlp_gc_account(lua_State *L, size_t nbytes) {
  size_t kb = nbytes / 1024, heap;
  dlp_State *st;
  if (kb == 0) return;
  lua_gc(L, LUA_GCSTEP, kb > INT_MAX ? INT_MAX : (int)kb);
  st = dlp_state(L);
  st->external_bytes += nbytes;
  heap = (size_t)lua_gc(L, LUA_GCCOUNT) * 1024;
  if (st->external_bytes > FULL_GC_MIN_BYTES && st->external_bytes > heap) {
    st->external_bytes = 0;
    lua_gc(L, LUA_GCCOLLECT);
  }
}

int dlp_check_dim(lua_State *L, int arg, int ndim, int extra) {
  lua_Integer d = luaL_checkinteger(L, arg);
  lua_Integer n = ndim + extra;
  if (d < 0) d += n + 1;
  if (d < 1 || d > n)
    return luaL_argerror(L, arg, lua_pushfstring(L, "dimension %I out of range (tensor has %d)",
                                                 luaL_checkinteger(L, arg), ndim));
  return (int)(d - 1);
}

int64_t dlp_check_index(lua_State *L, int arg, int64_t size) {
  lua_Integer i = luaL_checkinteger(L, arg);
  lua_Integer k = i < 0 ? i + size + 1 : i;
  if (k < 1 || k > size)
    return luaL_argerror(L, arg, lua_pushfstring(L, "index %I out of range (size %I)", i, (lua_Integer)size));
  return k - 1;
}

void dlp_check_shape(lua_State *L, int arg, int *ndim, int64_t *shape) {
  lua_Integer n;
  int64_t numel = 1;
  luaL_checktype(L, arg, LUA_TTABLE);
  n = luaL_len(L, arg);
  if (n > DLP_MAX_NDIM)
    luaL_argerror(L, arg, lua_pushfstring(L, "shape has %I dimensions (at most %d)", n, DLP_MAX_NDIM));
  for (lua_Integer i = 1; i <= n; i++) {
    int isint;
    lua_Integer v;
    lua_geti(L, arg, i);
    v = lua_tointegerx(L, -1, &isint);
    if (!isint || v < 0)
      luaL_argerror(L, arg, lua_pushfstring(L, "shape[%I] must be a non-negative integer, got %s", i,
                                            luaL_tolstring(L, -1, NULL)));
    lua_pop(L, 1);
    shape[i - 1] = v;
    if (v != 0 && numel != 0 && __builtin_mul_overflow(numel, v, &numel))
      luaL_argerror(L, arg, "shape has more elements than fit in 64 bits");
    if (v == 0) numel = 0;
  }
  *ndim = (int)n;
}

dlp_Tensor *dlp_tensor_new(lua_State *L, int dtype, DLDevice device, int ndim, const int64_t *shape,
                           int zeroed) {
  dlp_Tensor *t;
  dlp_Owner *o;
  int64_t numel = 1;
  size_t nbytes;
  for (int i = 0; i < ndim; i++) numel *= shape[i]; /* shapes reaching here were checked for overflow */
  if (numel > (int64_t)(SIZE_MAX / 16)) luaL_error(L, "tensor of %I elements is too large", (lua_Integer)numel);
  if (device.device_type != kDLCPU && !dlp_device_is_cuda(device)) {
    dlp_push_device_name(L, device);
    luaL_error(L, "cannot allocate memory on device %s (only cpu and CUDA memory can be allocated)",
               lua_tostring(L, -1));
  }
  nbytes = dlp_storage_bytes(dtype, numel, 0);
  t = dlp_tensor_push(L, ndim); /* first, so that a failure below leaves nothing behind */
  if (device.device_type == kDLCPU) {
    o = dlp_owner_new_memory(nbytes, zeroed);
  } else {
    void *memory = dlp_cuda_alloc(L, device, nbytes, zeroed);
    o = dlp_owner_new_block(memory, device, nbytes);
    if (!o) dlp_cuda_free(device, memory);
  }
  if (!o) luaL_error(L, "not enough memory for a tensor of %I bytes", (lua_Integer)nbytes);
  t->owner = o;
  t->dl.data = o->memory;
  t->dl.device = device;
  t->dl.dtype = dlp_dtype_to_dl(dtype);
  t->dtype = dtype;
  memcpy(t->dl.shape, shape, (size_t)ndim * sizeof(int64_t));
  dlp_contiguous_strides(ndim, shape, t->dl.strides);
  dlp_gc_account(L, nbytes);
  return t;
}

dlp_Tensor *dlp_tensor_view(lua_State *L, const dlp_Tensor *t, int ndim) {
  dlp_Tensor *v = dlp_tensor_push(L, ndim);
  v->dl.data = t->dl.data;
  v->dl.device = t->dl.device;
  v->dl.dtype = t->dl.dtype;
  v->dl.byte_offset = t->dl.byte_offset;
  v->dtype = t->dtype;
  v->flags = t->flags;
  dlp_owner_retain(t->owner);
  v->owner = t->owner;
  return v;
}

dlp_Tensor *dlp_tensor_alias(lua_State *L, const dlp_Tensor *t, DLDevice device) {
  dlp_Tensor *v = dlp_tensor_view(L, t, t->dl.ndim);
  memcpy(v->dims, t->dims, 2 * (size_t)t->dl.ndim * sizeof(int64_t));
  v->dl.device = device;
  return v;
}

/* ---- creation ---- */

/* The byte size of a shape (argument 1) of dtype must fit in memory sizes. */
static void check_size(lua_State *L, int ndim, const int64_t *shape, int dtype) {
  int64_t numel = 1;
  for (int i = 0; i < ndim; i++) numel *= shape[i];
  if (numel > (int64_t)(SIZE_MAX / 16) || (size_t)numel > PTRDIFF_MAX / dlp_dtypes[dtype].itemsize)
    luaL_argerror(L, 1, lua_pushfstring(L, "%I elements of %s are too many bytes", (lua_Integer)numel,
                                        dlp_dtypes[dtype].name));
}

static int create(lua_State *L, int zeroed) {
  int64_t shape[DLP_MAX_NDIM];
  int ndim;
  dlp_check_shape(L, 1, &ndim, shape);
  int dtype = dlp_opt_dtype(L, 2, DLP_FLOAT32);
  DLDevice cpu = {kDLCPU, 0};
  DLDevice device = dlp_opt_device(L, 3, cpu);
  check_size(L, ndim, shape, dtype);
  dlp_tensor_new(L, dtype, device, ndim, shape, zeroed);
  return 1;
}

static int l_empty(lua_State *L) { return create(L, 0); }
static int l_zeros(lua_State *L) { return create(L, 1); }

static int l_full(lua_State *L) {
  int64_t shape[DLP_MAX_NDIM];
  int ndim;
  unsigned char value[16];
  DLDevice cpu = {kDLCPU, 0};
  dlp_check_shape(L, 1, &ndim, shape);
  luaL_checkany(L, 2);
  int dtype = dlp_opt_dtype(L, 3, DLP_FLOAT32);
  DLDevice device = dlp_opt_device(L, 4, cpu);
  dlp_check_element(L, 2, dtype, value, "dlpack.full"); /* before allocating anything */
  check_size(L, ndim, shape, dtype);
  dlp_Tensor *t = dlp_tensor_new(L, dtype, device, ndim, shape, 0);
  if (dlp_device_is_host(device)) {
    dlp_fill(L, t, 2, "dlpack.full");
  } else { /* fill on the host, then one copy to the device */
    dlp_Tensor *staging = dlp_tensor_new(L, dtype, cpu, ndim, shape, 0);
    dlp_fill(L, staging, 2, "dlpack.full");
    dlp_cuda_copy(L, t, staging, NULL);
    lua_pop(L, 1);
  }
  return 1;
}

/* ---- element access ---- */

/* The address of element idx[0..ndim-1] (0-based, already checked). */
static char *element_at(const dlp_Tensor *t, const int64_t *idx) {
  int64_t off = 0;
  for (int i = 0; i < t->dl.ndim; i++) off += idx[i] * t->dl.strides[i];
  return dlp_first_element(t) + off * (int64_t)dlp_dtypes[t->dtype].itemsize;
}

/* Indices at stack positions first..first+ndim-1 of t. */
static char *check_element(lua_State *L, const dlp_Tensor *t, int first, const char *what) {
  int64_t idx[DLP_MAX_NDIM];
  dlp_check_host(L, t, what);
  dlp_check_access(L, t->dtype);
  for (int i = 0; i < t->dl.ndim; i++) idx[i] = dlp_check_index(L, first + i, t->dl.shape[i]);
  return element_at(t, idx);
}

static int l_get(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  if (lua_gettop(L) - 1 != t->dl.ndim)
    return luaL_error(L, "get: expected %d indices for a %d-d tensor, got %d", t->dl.ndim, t->dl.ndim,
                      lua_gettop(L) - 1);
  dlp_push_element(L, t->dtype, check_element(L, t, 2, "get"));
  return 1;
}

static int l_set(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  int nargs = lua_gettop(L) - 1;
  if (nargs != t->dl.ndim + 1)
    return luaL_error(L, "set: expected %d indices and a value for a %d-d tensor, got %d arguments",
                      t->dl.ndim, t->dl.ndim, nargs);
  dlp_check_writable(L, t, "set");
  dlp_check_element(L, nargs + 1, t->dtype, check_element(L, t, 2, "set"), "set");
  return 0;
}

static int l_item(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  if (dlp_numel(t) != 1)
    return luaL_error(L, "item: the tensor has %I elements, not 1", (lua_Integer)dlp_numel(t));
  dlp_check_host(L, t, "item");
  dlp_push_element(L, t->dtype, dlp_first_element(t));
  return 1;
}

/* t[i] on a 1-d tensor is the element; on an n-d tensor the view t:select(1, i). */
static int index_integer(lua_State *L, dlp_Tensor *t) {
  int64_t i;
  if (t->dl.ndim == 0) return luaL_error(L, "cannot index a 0-d tensor (use t:item())");
  i = dlp_check_index(L, 2, t->dl.shape[0]);
  if (t->dl.ndim == 1) {
    dlp_check_host(L, t, "index");
    dlp_check_access(L, t->dtype);
    dlp_push_element(L, t->dtype, element_at(t, &i));
    return 1;
  }
  dlp_Tensor *v = dlp_tensor_view(L, t, t->dl.ndim - 1);
  v->dl.byte_offset += (uint64_t)(i * t->dl.strides[0] * (int64_t)dlp_dtypes[t->dtype].itemsize);
  memcpy(v->dl.shape, t->dl.shape + 1, (size_t)(t->dl.ndim - 1) * sizeof(int64_t));
  memcpy(v->dl.strides, t->dl.strides + 1, (size_t)(t->dl.ndim - 1) * sizeof(int64_t));
  return 1;
}

static int push_property(lua_State *L, dlp_Tensor *t, const char *k) {
  if (strcmp(k, "shape") == 0 || strcmp(k, "strides") == 0) {
    const int64_t *v = k[1] == 'h' ? t->dl.shape : t->dl.strides;
    lua_createtable(L, t->dl.ndim, 0);
    for (int i = 0; i < t->dl.ndim; i++) {
      lua_pushinteger(L, v[i]);
      lua_rawseti(L, -2, i + 1);
    }
  } else if (strcmp(k, "ndim") == 0) lua_pushinteger(L, t->dl.ndim);
  else if (strcmp(k, "dtype") == 0) lua_pushstring(L, dlp_dtypes[t->dtype].name);
  else if (strcmp(k, "device") == 0) dlp_push_device_name(L, t->dl.device);
  else if (strcmp(k, "itemsize") == 0) lua_pushinteger(L, dlp_dtypes[t->dtype].itemsize);
  else if (strcmp(k, "nbytes") == 0) lua_pushinteger(L, (lua_Integer)dlp_storage_bytes(t->dtype, dlp_numel(t), t->flags));
  else if (strcmp(k, "byte_offset") == 0) lua_pushinteger(L, (lua_Integer)t->dl.byte_offset);
  else if (strcmp(k, "readonly") == 0) lua_pushboolean(L, (t->flags & DLP_FLAG_READ_ONLY) != 0);
  else return 0;
  return 1;
}

/* __index: integers index elements, strings name methods (upvalue 1) or properties. */
static int l_index(lua_State *L) {
  dlp_Tensor *t = luaL_checkudata(L, 1, DLPACK_LUA_TENSOR_MT);
  if (lua_type(L, 2) == LUA_TSTRING) {
    const char *k = lua_tostring(L, 2);
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
    if (!t->owner) return luaL_error(L, "tensor was released (reading field '%s')", k);
    if (push_property(L, t, k)) return 1;
    lua_pushnil(L);
    return 1;
  }
  if (!t->owner) return luaL_error(L, "tensor was released");
  if (lua_type(L, 2) != LUA_TNUMBER)
    return luaL_error(L, "tensors are indexed with integers or field names, not %s", luaL_typename(L, 2));
  return index_integer(L, t);
}

/* __newindex: t[i] = v sets an element (1-d) or fills/copies the sub-tensor t[i]. */
static int l_newindex(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  if (lua_type(L, 2) != LUA_TNUMBER)
    return luaL_error(L, "cannot assign to field '%s' of a tensor", luaL_tolstring(L, 2, NULL));
  dlp_check_writable(L, t, "assignment");
  if (t->dl.ndim == 0) return luaL_error(L, "cannot index a 0-d tensor (use t:fill(v))");
  if (t->dl.ndim == 1) {
    int64_t i = dlp_check_index(L, 2, t->dl.shape[0]);
    dlp_check_host(L, t, "assignment");
    dlp_check_element(L, 3, t->dtype, element_at(t, &i), "assignment");
    return 0;
  }
  lua_settop(L, 3);
  index_integer(L, t); /* the sub-view, at 4 */
  dlp_Tensor *v = lua_touserdata(L, 4);
  dlp_Tensor *src = dlp_tensor_test(L, 3);
  if (src) {
    if (!src->owner) return luaL_error(L, "assignment: the source tensor was released");
    dlp_copy_into(L, v, src);
  } else {
    dlp_fill(L, v, 3, "assignment");
  }
  return 0;
}

static int l_len(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  if (t->dl.ndim == 0) return luaL_error(L, "# is not defined for a 0-d tensor");
  lua_pushinteger(L, t->dl.shape[0]);
  return 1;
}

/* One idempotent finaliser behind release(), __close and __gc. */
static int l_release(lua_State *L) {
  dlp_Tensor *t = luaL_checkudata(L, 1, DLPACK_LUA_TENSOR_MT);
  if (t->owner) {
    dlp_Owner *o = t->owner;
    t->owner = NULL;
    t->dl.data = NULL;
    dlp_owner_release(o);
  }
  return 0;
}

static int l_numel(lua_State *L) {
  lua_pushinteger(L, dlp_numel(dlp_tensor_check(L, 1)));
  return 1;
}

static int size_or_stride(lua_State *L, int strides) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  const int64_t *v = strides ? t->dl.strides : t->dl.shape;
  if (lua_isnoneornil(L, 2)) return push_property(L, t, strides ? "strides" : "shape");
  lua_pushinteger(L, v[dlp_check_dim(L, 2, t->dl.ndim, 0)]);
  return 1;
}

static int l_size(lua_State *L) { return size_or_stride(L, 0); }
static int l_stride(lua_State *L) { return size_or_stride(L, 1); }

static int l_is_contiguous(lua_State *L) {
  lua_pushboolean(L, dlp_is_contiguous(dlp_tensor_check(L, 1)));
  return 1;
}

static int l_data_ptr(lua_State *L) {
  lua_pushlightuserdata(L, dlp_first_element(dlp_tensor_check(L, 1)));
  return 1;
}

void dlp_tensor_register(lua_State *L, int module, int methods, int meta) {
  static const luaL_Reg functions[] = {
    {"empty", l_empty}, {"zeros", l_zeros}, {"full", l_full}, {NULL, NULL},
  };
  static const luaL_Reg method_list[] = {
    {"get", l_get}, {"set", l_set}, {"item", l_item}, {"numel", l_numel}, {"size", l_size},
    {"stride", l_stride}, {"is_contiguous", l_is_contiguous}, {"data_ptr", l_data_ptr},
    {"release", l_release}, {NULL, NULL},
  };
  static const luaL_Reg metamethods[] = {
    {"__newindex", l_newindex}, {"__len", l_len}, {"__gc", l_release}, {"__close", l_release},
    {NULL, NULL},
  };
  dlp_register(L, module, functions);
  dlp_register(L, methods, method_list);
  dlp_register(L, meta, metamethods);
  lua_pushvalue(L, methods);
  lua_pushcclosure(L, l_index, 1);
  lua_setfield(L, meta, "__index");
}
