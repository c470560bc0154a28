/* Tensors: the userdata, creation, properties, element access and release. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <lualib.h>

#include "internal.h"

/* The tensor metatable. Every C function of the module is a closure whose first upvalue is it
 * (dlp_register), so finding it costs no lookup; the C API for hosts, called from outside the
 * module, passes it explicitly (the _with forms), from the registry, where it is also kept under
 * this address (besides its name, for luaL_checkudata in other modules). */
static const char metatable_key = 0;
#define METATABLE lua_upvalueindex(1)

void dlp_push_metatable(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &metatable_key);
}

/* node is the track member of a dlp_Tensor, so the enclosing object is as aligned as its type: the cast goes
 * through void * (Clang's -Wcast-align warns on any char * to T *). */
static void close_tracked_tensor(dlp_Tracked *node) {
  dlp_tensor_release((dlp_Tensor *)(void *)((char *)node - offsetof(dlp_Tensor, track)));
}

dlp_Tensor *dlp_tensor_push_with(lua_State *L, int ndim, int metatable) {
  size_t size = sizeof(dlp_Tensor) + 2 * (size_t)ndim * sizeof(int64_t);
  metatable = lua_absindex(L, metatable);
  dlp_State *st = dlp_state_for_new(L, "a tensor");
  dlp_Tensor *t = lua_newuserdatauv(L, size, 0);
  memset(t, 0, size);
  t->dl.ndim = ndim;
  t->dl.shape = t->dims;
  t->dl.strides = t->dims + ndim;
  lua_pushvalue(L, metatable);
  lua_setmetatable(L, -2);
  if (st) dlp_track(st, &t->track, close_tracked_tensor);
  return t;
}

dlp_Tensor *dlp_tensor_push(lua_State *L, int ndim) {
  return dlp_tensor_push_with(L, ndim, METATABLE);
}

/* Every call of the module tests its tensors: the metatables are compared by address (two
 * lua_topointer cost less than a lua_rawequal, which goes through the general equality). A light
 * userdata is never a tensor, whatever debug.setmetatable gave all of them. */
dlp_Tensor *dlp_tensor_test_with(lua_State *L, int idx, int metatable) {
  void *p = lua_touserdata(L, idx);
  if (!p || lua_type(L, idx) != LUA_TUSERDATA || !lua_getmetatable(L, idx)) return NULL;
  int same = lua_topointer(L, -1) == lua_topointer(L, metatable < 0 && metatable > LUA_REGISTRYINDEX ? metatable - 1
                                                                                                      : metatable);
  lua_pop(L, 1);
  return same ? p : NULL;
}

dlp_Tensor *dlp_tensor_test(lua_State *L, int idx) {
  return dlp_tensor_test_with(L, idx, METATABLE);
}

dlp_Tensor *dlp_tensor_arg(lua_State *L, int idx) {
  dlp_Tensor *t = dlp_tensor_test(L, idx);
  if (!t) luaL_typeerror(L, idx, DLPACK_LUA_TENSOR_MT);
  return t;
}

dlp_Tensor *dlp_tensor_check_with(lua_State *L, int idx, int metatable) {
  dlp_Tensor *t = dlp_tensor_test_with(L, idx, metatable);
  if (!t) luaL_typeerror(L, idx, DLPACK_LUA_TENSOR_MT);
  if (!t->owner) luaL_argerror(L, idx, "tensor was released");
  return t;
}

dlp_Tensor *dlp_tensor_check(lua_State *L, int idx) {
  return dlp_tensor_check_with(L, idx, METATABLE);
}

void dlp_live(lua_State *L, const dlp_Tensor *t, const char *what) {
  if (!t->owner) luaL_error(L, "%s: the tensor was released (while the call was running)", what);
}

void dlp_tensor_release(dlp_Tensor *t) {
  dlp_Owner *o = t->owner;
  dlp_untrack(&t->track);
  if (o) {
    t->owner = NULL;
    dlp_owner_release(o);
  }
}

int64_t dlp_numel(const dlp_Tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->dl.ndim; i++)
    if (t->dl.shape[i] == 0) return 0; /* before multiplying: {2^62, 4, 0} is empty */
  for (int i = 0; i < t->dl.ndim; i++) n *= t->dl.shape[i]; /* fits: checked when t was made */
  return n;
}

int64_t dlp_walk_stride(const dlp_Tensor *t, int i) {
  /* when t has elements, stride * (size - 1) * itemsize fits (dlp_tensor_seal) */
  if (t->dl.shape[i] <= 1 || dlp_numel(t) == 0) return 0;
  return t->dl.strides[i] * (int64_t)dlp_dtypes[t->dtype].itemsize;
}

/* -1 when the bytes do not fit int64: a view with stride 0 ({1} expanded to {2^62}) has more
 * elements than the memory it covers, and only its element count was checked when it was made. */
int64_t dlp_nbytes(const dlp_Tensor *t) {
  int64_t bytes = 0;
  return dlp_bytes_of(t->dtype, dlp_numel(t), t->flags, &bytes) ? bytes : -1;
}

/* Strides of size-1 dimensions say nothing about layout, and an empty tensor is contiguous. */
int dlp_is_contiguous(const dlp_Tensor *t) {
  int64_t expected = 1;
  for (int i = 0; i < t->dl.ndim; i++)
    if (t->dl.shape[i] == 0) return 1; /* before multiplying: an empty shape's other sizes may be anything */
  for (int i = t->dl.ndim - 1; i >= 0; i--) {
    if (t->dl.shape[i] == 1) continue;
    if (t->dl.strides[i] != expected) return 0;
    expected *= t->dl.shape[i];
  }
  return 1;
}

/* Integer arithmetic: data may be NULL (empty tensors) or an opaque device handle. */
static uintptr_t first_address(const dlp_Tensor *t) {
  return (uintptr_t)t->dl.data + (uintptr_t)t->dl.byte_offset;
}

char *dlp_first_element(const dlp_Tensor *t) {
  return (char *)first_address(t);
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

/* ---- views: every tensor that shares memory is made and checked here ---- */

dlp_Tensor *dlp_view_new(lua_State *L, int idx, int ndim, const char *what) {
  idx = lua_absindex(L, idx);
  dlp_Tensor *v = dlp_tensor_push(L, ndim); /* first: this allocation may run finalizers */
  const dlp_Tensor *t = lua_touserdata(L, idx);
  if (t->owner && t->owner->lua_owned) dlp_keep_copy(L, idx, -1);
  dlp_live(L, t, what);
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

void dlp_view_move(lua_State *L, dlp_Tensor *v, int64_t index, int64_t stride, const char *what) {
  int64_t delta, offset;
  if (dlp_numel(v) == 0) return;
  if (!dlp_mul(index, stride, &delta) || !dlp_mul(delta, dlp_dtypes[v->dtype].itemsize, &delta)) goto overflow;
  if (dlp_device_is_addressable(v->dl.device)) {
    v->dl.data = (void *)(first_address(v) + (uintptr_t)delta); /* range-checked by dlp_tensor_seal */
    v->dl.byte_offset = 0;
    return;
  }
  if (v->dl.byte_offset > INT64_MAX || !dlp_add((int64_t)v->dl.byte_offset, delta, &offset)) goto overflow;
  if (offset < 0) {
    dlp_tensor_release(v);
    luaL_error(L, "%s: the view would start before the memory of an opaque device handle", what);
  }
  v->dl.byte_offset = (uint64_t)offset;
  return;
overflow:
  dlp_tensor_release(v);
  luaL_error(L, "%s: offset beyond 64 bits", what);
}

void dlp_tensor_seal(lua_State *L, dlp_Tensor *v, const char *what) {
  dlp_Span span;
  if (!dlp_span_of(v->dl.ndim, v->dl.shape, v->dl.strides, v->dtype, v->flags, &span)) {
    dlp_tensor_release(v);
    luaL_error(L, "%s: the result would have more than 2^63 elements or reach beyond 64-bit offsets", what);
  }
  if (span.numel == 0) return; /* reaches no memory */
  uintptr_t first = first_address(v), below = (uintptr_t)0 - (uintptr_t)span.lo;
  const dlp_Owner *o = v->owner;
  int inside = first >= o->lo && first - o->lo >= below && first <= o->hi && o->hi - first >= (uintptr_t)span.hi;
  /* packed sub-byte elements have no byte address: such tensors start where their memory does */
  if (dlp_is_packed(v->dtype, v->flags)) inside = inside && first == o->lo;
  if (!inside) {
    dlp_tensor_release(v);
    luaL_error(L, "%s: the result would reach outside the tensor's memory", what);
  }
}

dlp_Tensor *dlp_tensor_alias(lua_State *L, int idx, DLDevice device, const char *what) {
  const dlp_Tensor *t = lua_touserdata(L, idx);
  dlp_Tensor *v = dlp_view_new(L, idx, t->dl.ndim, what);
  memcpy(v->dims, t->dims, 2 * (size_t)t->dl.ndim * sizeof(int64_t));
  v->dl.device = device;
  return v;
}

/* The registry table, weak in its keys (tensors), that holds the Lua owners of wrapped memory:
 * a value stays alive while any tensor on its memory does (on 5.2 and later an ephemeron table
 * also keeps it through those tensors' finalizers). */
static const char keep_key = 0;

/* The registry value at key, made by make() the first time. */
static void push_registry_table(lua_State *L, const char *key, void (*make)(lua_State *L)) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, key) != LUA_TNIL) return;
  lua_pop(L, 1);
  make(L);
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, key);
}

/* A table weak in its keys. */
static void make_weak_keyed(lua_State *L) {
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "k");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
}

static void push_keep_table(lua_State *L) {
  push_registry_table(L, &keep_key, make_weak_keyed);
}

void dlp_keep(lua_State *L, int tensor, int value) {
  tensor = lua_absindex(L, tensor);
  value = lua_absindex(L, value);
  push_keep_table(L);
  lua_pushvalue(L, tensor);
  lua_pushvalue(L, value);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

void dlp_keep_copy(lua_State *L, int from, int to) {
  from = lua_absindex(L, from);
  to = lua_absindex(L, to);
  push_keep_table(L);
  lua_pushvalue(L, from);
  lua_rawget(L, -2);
  dlp_keep(L, to, -1);
  lua_pop(L, 2);
}

/* Wrapped memory is freed by its Lua owner's finalizer, and a script's finalizer that runs in
 * the same cycle, before the owner's, could make views of it that outlive the owner. So an
 * owner of wrapped memory gets a guard: a table {owner} with a finalizer, reachable only
 * through the owner (guards[owner], an ephemeron table). The guard is newer than its owner, so
 * Lua finalizes it first (finalizers run in the reverse order objects were marked): it
 * releases every tensor kept for that owner, and whatever a script kept then says "released"
 * before the owner frees the memory. A call in progress finds its tensor released (dlp_live)
 * after the allocation that ran the finalizers. Lua 5.1 and LuaJIT have neither ephemerons
 * nor finalizers on tables: no guard there (README, "Memory a Lua value owns"). */
#if LUA_VERSION_NUM >= 502
static const char guards_key = 0, guard_mt_key = 0;

static int guard_gc(lua_State *L) {
  lua_rawgeti(L, 1, 1); /* the owner */
  push_keep_table(L);
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    dlp_Tensor *t = lua_touserdata(L, -2);
    if (t && lua_rawequal(L, -1, -4)) dlp_tensor_release(t);
    lua_pop(L, 1);
  }
  return 0;
}

static void make_guard_metatable(lua_State *L) {
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, guard_gc);
  lua_setfield(L, -2, "__gc");
}

void dlp_keep_guard(lua_State *L, int owner) {
  int type = lua_type(L, owner);
  /* only tables and full userdata have finalizers that could free the memory */
  if (type != LUA_TTABLE && type != LUA_TUSERDATA) return;
  owner = lua_absindex(L, owner);
  push_registry_table(L, &guards_key, make_weak_keyed);
  lua_pushvalue(L, owner);
  if (lua_rawget(L, -2) == LUA_TNIL) {
    lua_pop(L, 1);
    lua_createtable(L, 1, 0);
    lua_pushvalue(L, owner);
    lua_rawseti(L, -2, 1);
    push_registry_table(L, &guard_mt_key, make_guard_metatable);
    lua_setmetatable(L, -2);
    lua_pushvalue(L, owner);
    lua_pushvalue(L, -2);
    lua_rawset(L, -4); /* guards[owner] = guard */
  }
  lua_pop(L, 2);
}
#else
void dlp_keep_guard(lua_State *L, int owner) {
  (void)L, (void)owner;
}
#endif

/* Lua cannot see tensor memory. Memory new to this state (a block allocated here, a producer's
 * tensor imported for the first time) makes the collector take a step as if that many bytes of
 * Lua objects had been allocated, so that a loop making and dropping tensors paces the collector
 * by its real memory use. Memory already known (an export of this module coming back, a view)
 * costs nothing. No step is taken while the script has stopped the collector, and no full
 * collection is ever forced: an exchange costs the same whatever the size of the Lua heap. */
void dlp_gc_account(lua_State *L, size_t nbytes) {
  size_t kb = nbytes / 1024;
  if (kb == 0 || !dlp_gc_running(L)) return;
  if (dlp_state_external(L, nbytes)) lua_gc(L, LUA_GCCOLLECT, 0);
  else dlp_gc_step(L, kb);
}

lua_Integer dlp_checkinteger(lua_State *L, int arg) {
  if (lua_type(L, arg) != LUA_TNUMBER) luaL_typeerror(L, arg, "number");
  return luaL_checkinteger(L, arg);
}

lua_Integer dlp_optinteger(lua_State *L, int arg, lua_Integer def) {
  return lua_isnoneornil(L, arg) ? def : dlp_checkinteger(L, arg);
}

lua_Number dlp_optnumber(lua_State *L, int arg, lua_Number def) {
  if (lua_isnoneornil(L, arg)) return def;
  if (lua_type(L, arg) != LUA_TNUMBER) luaL_typeerror(L, arg, "number");
  return lua_tonumber(L, arg);
}

int dlp_check_dim(lua_State *L, int arg, int ndim, int extra) {
  lua_Integer d = dlp_checkinteger(L, arg);
  lua_Integer n = ndim + extra;
  if (d < 0) d += n + 1;
  if (d < 1 || d > n)
    return luaL_argerror(L, arg, lua_pushfstring(L, "dimension %I out of range (tensor has %d)",
                                                 dlp_checkinteger(L, arg), ndim));
  return (int)(d - 1);
}

int64_t dlp_check_index(lua_State *L, int arg, int64_t size) {
  lua_Integer i = dlp_checkinteger(L, arg);
  lua_Integer k = i < 0 ? i + size + 1 : i;
  if (k < 1 || k > size)
    return luaL_argerror(L, arg, lua_pushfstring(L, "index %I out of range (size %I; indices start at 1, "
                                                 "negative ones count from the end)", i, (lua_Integer)size));
  return k - 1;
}

/* A size, stride or element count. Lua 5.1, 5.2 and LuaJIT hold an integer beyond 2^53 only
 * when its low bits are zero: one a double would round raises, as element reads do, rather than
 * coming back changed (a narrow by the rounded size would drop elements). */
static void push_size(lua_State *L, int64_t v, const char *what) {
#if !DLP_LUA_INTEGERS
  if (!dlp_int64_is_double(v))
    luaL_error(L, "%s %I has no exact Lua number in %s (numbers are doubles: beyond 2^53 they hold only some "
                  "integers)", what, (lua_Integer)v, LUA_VERSION);
#else
  (void)what;
#endif
  lua_pushinteger(L, (lua_Integer)v);
}

/* What a value is, for messages: a number itself, a string quoted as one, else its type; runs no
 * metamethod. */
static const char *describe(lua_State *L, int idx) {
  int type = lua_type(L, idx);
  if (type == LUA_TNUMBER) {
    lua_pushvalue(L, idx);
    return lua_tostring(L, -1); /* converts the copy, not the value at idx */
  }
  if (type == LUA_TSTRING) return lua_pushfstring(L, "the string '%s'", lua_tostring(L, idx));
  return luaL_typename(L, idx);
}

int dlp_check_integers(lua_State *L, int arg, int64_t *out, int max, int64_t min, const char *what) {
  lua_Integer n;
  luaL_checktype(L, arg, LUA_TTABLE);
  n = luaL_len(L, arg);
  if (n < 0 || n > max)
    return luaL_argerror(L, arg, lua_pushfstring(L, "%s has a length of %I (0 to %d entries)", what, n, max));
  for (lua_Integer i = 1; i <= n; i++) {
    int isint;
    lua_geti(L, arg, i);
    lua_Integer v = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &isint) : (isint = 0);
    if (!isint || v < min)
      luaL_argerror(L, arg, lua_pushfstring(L, "%s[%I] must be %s, got %s", what, i,
                                            min == 0 ? "a non-negative integer" : min == -1 ? "a size or -1"
                                                                                             : "an integer",
                                            describe(L, -1)));
    lua_pop(L, 1);
    out[i - 1] = v;
  }
  return (int)n;
}

int dlp_check_shape(lua_State *L, int arg, int64_t *shape) {
  int64_t numel;
  int ndim = dlp_check_integers(L, arg, shape, DLP_MAX_NDIM, 0, "shape");
  if (!dlp_numel_of(ndim, shape, &numel)) luaL_argerror(L, arg, "shape has more elements than fit in 64 bits");
  return ndim;
}

dlp_Tensor *dlp_tensor_new(lua_State *L, int dtype, uint64_t flags, DLDevice device, int ndim,
                           const int64_t *shape, int alloc, const char *what) {
  dlp_Tensor *t;
  dlp_Owner *o;
  int64_t numel, bytes;
  if (!dlp_numel_of(ndim, shape, &numel)) luaL_error(L, "%s: the shape has more elements than fit in 64 bits", what);
  if (!dlp_bytes_of(dtype, numel, flags, &bytes) || (uint64_t)bytes > PTRDIFF_MAX / 2)
    luaL_error(L, "%s: %I elements of %s are too many bytes", what, (lua_Integer)numel, dlp_dtypes[dtype].name);
  if (device.device_type != kDLCPU && !dlp_device_is_cuda(device)) {
    dlp_push_device_name(L, device);
    luaL_error(L, "%s: cannot allocate memory on device %s (only cpu and CUDA memory can be allocated)", what,
               lua_tostring(L, -1));
  }
  t = dlp_tensor_push(L, ndim); /* first, so that a failure below leaves nothing behind */
  if (alloc & DLP_ALLOC_SHAREABLE) {
    o = dlp_ipc_new_owner(L, device, (size_t)bytes, what);
  } else if (device.device_type == kDLCPU) {
    o = dlp_owner_new_memory((size_t)bytes, alloc & DLP_ALLOC_ZEROED);
  } else {
    void *memory = dlp_cuda_alloc(L, device, (size_t)bytes, alloc & DLP_ALLOC_ZEROED, what);
    o = dlp_owner_new_block(memory, device, (size_t)bytes);
    if (!o) dlp_cuda_free(device, memory);
  }
  if (!o) luaL_error(L, "%s: not enough memory for a tensor of %I bytes", what, (lua_Integer)bytes);
  t->owner = o;
  t->dl.data = o->memory;
  t->dl.device = device;
  t->dl.dtype = dlp_dtype_to_dl(dtype);
  t->dtype = dtype;
  t->flags = flags & DLP_FLAG_SUBBYTE_PADDED;
  if (ndim > 0) memcpy(t->dl.shape, shape, (size_t)ndim * sizeof(int64_t)); /* shape may be NULL for 0-d */
  dlp_contiguous_strides(ndim, shape, t->dl.strides);
  dlp_gc_account(L, (size_t)bytes);
  if (alloc & DLP_ALLOC_SHAREABLE) dlp_ipc_account_descriptor(L);
  return t;
}

/* ---- creation ---- */

/* The byte size of shape (argument 1) in dtype must fit: an argument error naming the caller. */
static void check_bytes(lua_State *L, int ndim, const int64_t *shape, int dtype) {
  int64_t numel, bytes;
  dlp_numel_of(ndim, shape, &numel); /* fits: dlp_check_shape */
  if (!dlp_bytes_of(dtype, numel, 0, &bytes) || (uint64_t)bytes > PTRDIFF_MAX / 2)
    luaL_argerror(L, 1, lua_pushfstring(L, "%I elements of %s are too many bytes", (lua_Integer)numel,
                                        dlp_dtypes[dtype].name));
}

int dlp_create(lua_State *L, int alloc, const char *what) {
  int64_t shape[DLP_MAX_NDIM];
  int next, ndim = dlp_check_shape_args(L, 1, shape, &next);
  dlp_check_no_more(L, next + 2, what, "a shape, a dtype and a device");
  int dtype = dlp_opt_dtype(L, next, DLP_FLOAT32);
  check_bytes(L, ndim, shape, dtype);
  DLDevice device = {kDLCPU, 0};
  if (!lua_isnoneornil(L, next + 1)) device = dlp_check_device(L, next + 1, next + 1, NULL);
  dlp_tensor_new(L, dtype, 0, device, ndim, shape, alloc, what);
  return 1;
}

static int l_empty(lua_State *L) { return dlp_create(L, 0, "dlpack.empty"); }
static int l_zeros(lua_State *L) { return dlp_create(L, DLP_ALLOC_ZEROED, "dlpack.zeros"); }

/* A new tensor of the shape at 1 (ones: also numbers), every element the value at `value` (0:
 * one, as true for bool), the dtype and device after them. */
static int create_filled(lua_State *L, int value, const char *what) {
  int64_t shape[DLP_MAX_NDIM];
  unsigned char element[16];
  DLDevice device = {kDLCPU, 0};
  int next = 3, ndim = value ? dlp_check_shape(L, 1, shape) : dlp_check_shape_args(L, 1, shape, &next);
  dlp_check_no_more(L, next + 2, what,
                    value ? "a shape, a value, a dtype and a device" : "a shape, a dtype and a device");
  if (value) luaL_checkany(L, value);
  int dtype = dlp_opt_dtype(L, next, DLP_FLOAT32);
  if (!lua_isnoneornil(L, next + 1)) device = dlp_check_device(L, next + 1, next + 1, NULL);
  if (value) dlp_check_element(L, value, dtype, element, what); /* before allocating anything */
  else dlp_one_element(L, dtype, element);
  check_bytes(L, ndim, shape, dtype);
  dlp_tensor_filled(L, dtype, device, ndim, shape, element, what);
  return 1;
}

static int l_full(lua_State *L) { return create_filled(L, 2, "dlpack.full"); }
static int l_ones(lua_State *L) { return create_filled(L, 0, "dlpack.ones"); }

/* dlpack.arange([start,] stop [, step] [, dtype]), as NumPy's: start, start + step, ... strictly
 * before stop, ceil((stop - start) / step) elements (none when that is not positive). The
 * numbers are int64 when all are integers, float64 otherwise, unless a dtype is given. */

/* The elements of an integer range, or -1 when there are 2^63 or more. */
static int64_t integer_count(int64_t start, int64_t stop, int64_t step) {
  uint64_t span, by, n;
  if (step > 0 ? stop <= start : stop >= start) return 0;
  /* the distance and the step as unsigned magnitudes: both fit in 64 bits */
  span = step > 0 ? (uint64_t)stop - (uint64_t)start : (uint64_t)start - (uint64_t)stop;
  by = step > 0 ? (uint64_t)step : (uint64_t)0 - (uint64_t)step;
  n = span / by + (span % by != 0);
  return n > INT64_MAX ? -1 : (int64_t)n;
}

static dlp_Tensor *new_range(lua_State *L, int dtype, DLDevice device, const int64_t *shape) {
  int64_t bytes;
  if (!dlp_bytes_of(dtype, shape[0], 0, &bytes) || (uint64_t)bytes > PTRDIFF_MAX / 2)
    luaL_error(L, "dlpack.arange: %I elements of %s are too many bytes", (lua_Integer)shape[0], dlp_dtypes[dtype].name);
  return dlp_tensor_new(L, dtype, 0, device, 1, shape, 0, "dlpack.arange");
}

static int l_arange(lua_State *L) {
  static const char *const names[] = {"start", "stop", "step"};
  int top = lua_gettop(L), n = 0, all_integers = 1, arg[3];
  int64_t count, shape[1];
  while (n < 3 && n < top && lua_type(L, n + 1) == LUA_TNUMBER) all_integers &= lua_isinteger(L, ++n);
  if (n == 0) return luaL_typeerror(L, 1, "number");
  if (lua_type(L, n + 1) == LUA_TNUMBER)
    return luaL_argerror(L, n + 1, "a dtype name expected (arange takes at most start, stop and step)");
  for (int k = n + 3; k <= top; k++)
    if (!lua_isnil(L, k))
      return luaL_argerror(L, k, "unexpected argument (arange takes start, stop, step, a dtype and a device)");
  int dtype = dlp_opt_dtype(L, n + 1, all_integers ? DLP_INT64 : DLP_FLOAT64);
  DLDevice device = {kDLCPU, 0};
  if (!lua_isnoneornil(L, n + 2)) device = dlp_check_device(L, n + 2, n + 2, NULL);
  int on_cuda = device.device_type == kDLCUDA;
  const char *name = dlp_dtypes[dtype].name;
  if (dtype == DLP_BOOL) return luaL_argerror(L, n + 1, "arange of bool is not supported");
  dlp_check_access(L, dtype);
  int integer_dtype = dtype >= DLP_INT8 && dtype <= DLP_UINT64;
  /* arg[k]: the stack index of start, stop and step (0: the default, 0 or 1) */
  arg[0] = n == 1 ? 0 : 1;
  arg[1] = n == 1 ? 1 : 2;
  arg[2] = n == 3 ? 3 : 0;
  if (integer_dtype || all_integers) {
    int64_t v[3];
    for (int k = 0; k < 3; k++) {
      int isint = 1;
      v[k] = arg[k] ? lua_tointegerx(L, arg[k], &isint) : k == 2;
      lua_Number x = isint ? 0 : lua_tonumber(L, arg[k]);
      if (!isint && x == floor(x)) /* integral: beyond int64, where arange counts */
        return luaL_argerror(L, arg[k], lua_pushfstring(L, "%s %s is out of range (arange counts in int64)", names[k],
                                                        lua_tostring(L, arg[k])));
      if (!isint)
        return luaL_argerror(L, arg[k], lua_pushfstring(L, "%s must be an integer for dtype %s, got %s", names[k],
                                                        name, lua_tostring(L, arg[k])));
    }
    if (v[2] == 0) return luaL_argerror(L, arg[2], "step must not be 0");
    if ((count = integer_count(v[0], v[1], v[2])) < 0)
      return luaL_error(L, "dlpack.arange: the range has 2^63 elements or more");
    /* the values run monotonically from the first to the last, both within [start, stop) */
    int64_t last = (int64_t)((uint64_t)v[0] + (uint64_t)(count ? count - 1 : 0) * (uint64_t)v[2]);
    if (integer_dtype && count > 0) { /* values, not bits: a uint64 range takes no negatives */
      dlp_check_integer_range(L, dtype, v[0], "dlpack.arange");
      dlp_check_integer_range(L, dtype, last, "dlpack.arange");
    }
    shape[0] = count;
    dlp_Tensor *t = new_range(L, dtype, device, shape);
    if (on_cuda) {
      int64_t params[6] = {v[0], 0, v[2], 0, 0, 0};
      dlp_range_on_cuda(L, t, 0, params, "dlpack.arange");
      return 1;
    }
    dlp_check_host(L, t, "dlpack.arange");
    char *p = dlp_first_element(t);
    dlp_Scalar s = {DLP_S_INT, 0, 0, 0, 0};
    for (int64_t i = 0; i < count; i++, p += dlp_dtypes[dtype].itemsize) {
      s.i = (int64_t)((uint64_t)v[0] + (uint64_t)i * (uint64_t)v[2]); /* in range: see last */
      dlp_store(dtype, p, &s);
    }
    return 1;
  }
  double v[3];
  for (int k = 0; k < 3; k++) {
    v[k] = arg[k] ? (double)lua_tonumber(L, arg[k]) : k == 2;
    if (!isfinite(v[k]))
      return luaL_argerror(L, arg[k], lua_pushfstring(L, "%s must be a finite number, got %s", names[k],
                                                      isnan(v[k]) ? "nan" : v[k] > 0 ? "inf" : "-inf"));
  }
  if (v[2] == 0) return luaL_argerror(L, arg[2], "step must not be 0");
  double c = ceil((v[1] - v[0]) / v[2]); /* the difference may overflow to an infinity */
  if (!(c < 0x1p63)) return luaL_error(L, "dlpack.arange: the range has 2^63 elements or more");
  shape[0] = count = c > 0 ? (int64_t)c : 0;
  dlp_Tensor *t = new_range(L, dtype, device, shape);
  if (on_cuda) {
    double params[6] = {v[0], v[2], 0, 0, 0, 0};
    dlp_range_on_cuda(L, t, 1, params, "dlpack.arange");
    return 1;
  }
  dlp_check_host(L, t, "dlpack.arange");
  char *p = dlp_first_element(t);
  dlp_Scalar s = {DLP_S_FLOAT, 0, 0, 0, 0};
  for (int64_t i = 0; i < count; i++, p += dlp_dtypes[dtype].itemsize) {
    s.re = v[0] + (double)i * v[2];
    dlp_store(dtype, p, &s);
  }
  return 1;
}

/* ---- element access ----
 * These run no Lua code between checking the tensor and touching its memory: indices and
 * values are numbers read straight from the stack. */

/* The address of element idx[0..ndim-1] (0-based, already checked). */
static char *element_at(const dlp_Tensor *t, const int64_t *idx) {
  int64_t off = 0; /* t has elements: within the span checked when t was made */
  for (int i = 0; i < t->dl.ndim; i++) off += idx[i] * dlp_walk_stride(t, i);
  return dlp_offset(dlp_first_element(t), off);
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
  char *p = check_element(L, t, 2, "set");
  dlp_check_element(L, nargs + 1, t->dtype, p, "set");
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

/* t[i] on an n-d tensor (n > 1): the view t:select(1, i), pushed. */
static dlp_Tensor *push_row(lua_State *L, const dlp_Tensor *t, int64_t i, const char *what) {
  if (dlp_is_packed(t->dtype, t->flags))
    luaL_error(L, "%s: rows of packed %s tensors are not addressable (views of them are refused)", what,
               dlp_dtypes[t->dtype].name);
  dlp_Tensor *v = dlp_view_new(L, 1, t->dl.ndim - 1, what);
  memcpy(v->dl.shape, t->dl.shape + 1, (size_t)(t->dl.ndim - 1) * sizeof(int64_t));
  memcpy(v->dl.strides, t->dl.strides + 1, (size_t)(t->dl.ndim - 1) * sizeof(int64_t));
  dlp_view_move(L, v, i, t->dl.strides[0], what);
  dlp_tensor_seal(L, v, what);
  return v;
}

static int push_property(lua_State *L, dlp_Tensor *t, const char *k) {
  if (strcmp(k, "shape") == 0 || strcmp(k, "strides") == 0) {
    const int64_t *v = k[1] == 'h' ? t->dl.shape : t->dl.strides;
    lua_createtable(L, t->dl.ndim, 0);
    for (int i = 0; i < t->dl.ndim; i++) {
      push_size(L, v[i], k[1] == 'h' ? "size" : "stride");
      lua_rawseti(L, -2, i + 1);
    }
  } else if (strcmp(k, "ndim") == 0) lua_pushinteger(L, t->dl.ndim);
  else if (strcmp(k, "dtype") == 0) lua_pushstring(L, dlp_dtypes[t->dtype].name);
  else if (strcmp(k, "device") == 0) dlp_push_device_name(L, t->dl.device);
  else if (strcmp(k, "itemsize") == 0) lua_pushinteger(L, dlp_dtypes[t->dtype].itemsize);
  else if (strcmp(k, "nbytes") == 0) {
    int64_t bytes = dlp_nbytes(t);
    if (bytes >= 0) lua_pushinteger(L, bytes);
    else lua_pushnumber(L, (lua_Number)dlp_numel(t) * (lua_Number)dlp_dtypes[t->dtype].bits / 8); /* beyond 2^63 */
  }
  else if (strcmp(k, "byte_offset") == 0) lua_pushinteger(L, (lua_Integer)t->dl.byte_offset);
  else if (strcmp(k, "readonly") == 0) lua_pushboolean(L, (t->flags & DLP_FLAG_READ_ONLY) != 0);
  else if (strcmp(k, "shareable") == 0) lua_pushboolean(L, dlp_is_shareable(t));
  else return 0;
  return 1;
}

/* The tensor at 1 for the metamethods. They can also be called directly, with anything at 1:
 * that raises. */
static dlp_Tensor *self_of(lua_State *L) {
  return dlp_tensor_arg(L, 1);
}

/* The element t[i] of a live 1-d tensor the CPU can read, for an integer i in range; NULL when
 * any of that does not hold (the caller then takes the path that says why). */
static char *fast_element(lua_State *L, const dlp_Tensor *t) {
  int isint;
  lua_Integer i = lua_tointegerx(L, 2, &isint);
  if (!isint || t->dl.ndim != 1 || !t->owner || !dlp_dtypes[t->dtype].access || !dlp_device_is_host(t->dl.device))
    return NULL;
  int64_t n = t->dl.shape[0]; /* only now: a 0-d tensor has no shape[0] */
  if (i < 0) i = n + (i + 1); /* n + 1 could overflow: n may be 2^63 - 1 in an empty tensor */
  if (i < 1 || i > n) return NULL;
  return dlp_offset(dlp_first_element(t), (i - 1) * t->dl.strides[0] * (int64_t)dlp_dtypes[t->dtype].itemsize);
}

/* t[i] (0-based, in range) of a live tensor at 1 with dimensions: an element of a 1-d tensor, a
 * view of a row of an n-d one; pushed. */
static int push_item(lua_State *L, const dlp_Tensor *t, int64_t i, const char *what) {
  if (t->dl.ndim > 1) {
    push_row(L, t, i, what);
    return 1;
  }
  dlp_check_host(L, t, what);
  dlp_check_access(L, t->dtype);
  dlp_push_element(L, t->dtype, element_at(t, &i));
  return 1;
}

/* ---- iteration ----
 * Lua 5.4's ipairs has no metamethod: its iterator reads t[1], t[2], ... through __index and
 * stops at the first nil. So __index answers nil for t[n + 1] when, and only when, the function
 * that asked is that iterator (upvalue 3 of __index); t[n + 1] written in a script still raises.
 * pairs(t) goes through __pairs, whose iterator gives the same keys and values (and so does
 * __ipairs, which Lua 5.2's ipairs asks instead of __index). */

/* The iterator function ipairs returns, found in a private state so that no script can change
 * what is found (nil when it cannot be made). Its address is the same in every state. */
static void push_ipairs_iterator(lua_State *L) {
  lua_CFunction f = NULL;
  lua_State *P = luaL_newstate();
  if (P) {
    lua_pushcfunction(P, luaopen_base);
    if (lua_pcall(P, 0, 0, 0) == LUA_OK && lua_getglobal(P, "ipairs") == LUA_TFUNCTION) {
      lua_newtable(P);
      if (lua_pcall(P, 1, 1, 0) == LUA_OK) f = lua_tocfunction(P, -1);
    }
    lua_close(P);
  }
  if (f) lua_pushcfunction(L, f);
  else lua_pushnil(L);
}

/* Whether the function that called the running metamethod is ipairs' iterator. */
static int called_by_ipairs(lua_State *L) {
  lua_Debug ar;
  int same;
  if (lua_isnil(L, lua_upvalueindex(3)) || !lua_getstack(L, 1, &ar) || !lua_getinfo(L, "f", &ar)) return 0;
  same = lua_rawequal(L, -1, lua_upvalueindex(3));
  lua_pop(L, 1);
  return same;
}

/* The iterator of pairs(t): (t, i) -> i + 1, t[i + 1], for i from 0 to n - 1; nil at i = n. */
static int l_pairs_next(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  lua_Integer i = dlp_checkinteger(L, 2);
  if (t->dl.ndim == 0) return luaL_error(L, "cannot iterate over a 0-d tensor (use t:item())");
  if (i < 0 || i > t->dl.shape[0])
    return luaL_argerror(L, 2, lua_pushfstring(L, "key %I out of range (size %I)", i, (lua_Integer)t->dl.shape[0]));
  if (i == t->dl.shape[0]) return lua_pushnil(L), 1;
  lua_settop(L, 1);
  lua_pushinteger(L, i + 1);
  return 1 + push_item(L, t, i, "pairs");
}

/* __pairs: the iterator (upvalue 2), the tensor, 0 */
static int l_pairs(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  if (t->dl.ndim == 0) return luaL_error(L, "cannot iterate over a 0-d tensor (use t:item())");
  lua_pushvalue(L, lua_upvalueindex(2));
  lua_pushvalue(L, 1);
  lua_pushinteger(L, 0);
  return 3;
}

/* __index: integers index elements, strings name methods (upvalue 2) or properties. */
static int l_index(lua_State *L) {
  dlp_Tensor *t = self_of(L);
  char *p;
  if (lua_type(L, 2) == LUA_TNUMBER && (p = fast_element(L, t))) {
    dlp_push_element(L, t->dtype, p);
    return 1;
  }
  if (lua_type(L, 2) == LUA_TSTRING) {
    size_t len;
    const char *k = lua_tolstring(L, 2, &len);
    int cut = strlen(k) != len; /* an embedded NUL: no property has that name */
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(2)) != LUA_TNIL) return 1;
    if (!t->owner) return luaL_error(L, "tensor was released (reading field '%s')", k);
    if (!cut && push_property(L, t, k)) return 1;
    if (!cut && strcmp(k, "T") == 0) { /* NumPy's transpose, a view */
      lua_settop(L, 1);
      dlp_push_reversed(L);
      return 1;
    }
    /* "__" names stay free for protocols that probe values for optional fields */
    if (k[0] == '_' && k[1] == '_') return lua_pushnil(L), 1;
    return luaL_error(L, "a tensor has no field or method %s%s", dlp_push_quoted(L, k, len),
                      cut ? " (the name contains an embedded NUL)" : "");
  }
  if (!t->owner) return luaL_error(L, "tensor was released");
  if (lua_type(L, 2) != LUA_TNUMBER)
    return luaL_error(L, "tensors are indexed with integers or field names, not %s", luaL_typename(L, 2));
  if (t->dl.ndim == 0)
    return luaL_error(L, called_by_ipairs(L) ? "cannot iterate over a 0-d tensor (use t:item())"
                                             : "cannot index a 0-d tensor (use t:item())");
  int isint;
  lua_Integer k = lua_tointegerx(L, 2, &isint);
  if (isint && k > 0 && k - 1 == t->dl.shape[0] && called_by_ipairs(L)) return lua_pushnil(L), 1; /* the end */
  return push_item(L, t, dlp_check_index(L, 2, t->dl.shape[0]), "index");
}

/* __newindex: t[i] = v sets an element (1-d) or fills/copies the sub-tensor t[i]. */
static int l_newindex(lua_State *L) {
  dlp_Tensor *t = self_of(L);
  char *p;
  if (lua_type(L, 2) == LUA_TNUMBER && !(t->flags & DLP_FLAG_READ_ONLY) && (p = fast_element(L, t))) {
    dlp_check_element(L, 3, t->dtype, p, "assignment"); /* runs no Lua code */
    return 0;
  }
  if (!t->owner) return luaL_argerror(L, 1, "tensor was released");
  if (lua_type(L, 2) == LUA_TSTRING)
    return luaL_error(L, "cannot assign to field '%s' of a tensor", lua_tostring(L, 2));
  if (lua_type(L, 2) != LUA_TNUMBER)
    return luaL_error(L, "cannot assign to a tensor with a %s key (an index is a number)", luaL_typename(L, 2));
  dlp_check_writable(L, t, "assignment");
  if (t->dl.ndim == 0) return luaL_error(L, "cannot index a 0-d tensor (use t:fill(v))");
  int64_t i = dlp_check_index(L, 2, t->dl.shape[0]);
  if (t->dl.ndim == 1) {
    dlp_check_host(L, t, "assignment");
    p = element_at(t, &i);
    dlp_check_element(L, 3, t->dtype, p, "assignment");
    return 0;
  }
  lua_settop(L, 3);
  dlp_Tensor *row = push_row(L, t, i, "assignment"); /* at 4 */
  dlp_Tensor *src = dlp_tensor_test(L, 3);
  if (src) {
    if (!src->owner) return luaL_error(L, "assignment: the source tensor was released");
    dlp_copy(L, row, src, NULL, "assignment");
  } else {
    dlp_fill(L, row, 3, "assignment");
  }
  dlp_tensor_release(row);
  return 0;
}

static int l_len(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  if (t->dl.ndim == 0) return luaL_error(L, "# is not defined for a 0-d tensor");
  push_size(L, t->dl.shape[0], "size");
  return 1;
}

/* One idempotent finaliser behind release(), __close and __gc. */
static int l_release(lua_State *L) {
  dlp_tensor_release(self_of(L));
  return 0;
}

static int l_dim(lua_State *L) {
  lua_pushinteger(L, dlp_tensor_check(L, 1)->dl.ndim);
  return 1;
}

static int l_numel(lua_State *L) {
  push_size(L, dlp_numel(dlp_tensor_check(L, 1)), "element count");
  return 1;
}

static int size_or_stride(lua_State *L, int strides) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  const int64_t *v = strides ? t->dl.strides : t->dl.shape;
  if (lua_isnoneornil(L, 2)) return push_property(L, t, strides ? "strides" : "shape");
  push_size(L, v[dlp_check_dim(L, 2, t->dl.ndim, 0)], strides ? "stride" : "size");
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

/* __newindex of a metatable view; upvalue 1 is the metatable */
static int l_metatable_readonly(lua_State *L) {
  lua_getfield(L, lua_upvalueindex(1), "__name");
  return luaL_error(L, "the metatable of %s objects is read-only", lua_tostring(L, -1));
}

void dlp_push_metatable_view(lua_State *L, int meta) {
  meta = lua_absindex(L, meta);
  lua_newtable(L);
  lua_createtable(L, 0, 3);
  lua_pushvalue(L, meta);
  lua_setfield(L, -2, "__index");
  lua_pushvalue(L, meta);
  lua_pushcclosure(L, l_metatable_readonly, 1);
  lua_setfield(L, -2, "__newindex");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
}

/* Lua turns what __lt and __le return into a boolean, so `t > 0.5` cannot give a mask: say what does. */
static int l_compare_operator(lua_State *L) {
  return luaL_error(L, "dlpack: comparison operators cannot return tensors in Lua; use t:gt(x), t:lt(x), t:ge(x), "
                       "t:le(x) (or dlpack.gt(a, b)...), and dlpack.equal(a, b) for a boolean");
}

void dlp_tensor_register(lua_State *L, int module, int methods, int meta) {
  static const luaL_Reg functions[] = {
    {"empty", l_empty}, {"zeros", l_zeros}, {"ones", l_ones}, {"full", l_full}, {"arange", l_arange},
    {NULL, NULL},
  };
  static const luaL_Reg method_list[] = {
    {"get", l_get}, {"set", l_set}, {"item", l_item}, {"dim", l_dim}, {"numel", l_numel}, {"size", l_size},
    {"stride", l_stride}, {"is_contiguous", l_is_contiguous}, {"data_ptr", l_data_ptr}, {"release", l_release},
    {NULL, NULL},
  };
  static const luaL_Reg metamethods[] = {
    {"__len", l_len}, {"__gc", l_release}, {"__close", l_release}, {"__lt", l_compare_operator},
    {"__le", l_compare_operator}, {NULL, NULL},
  };
  /* their second upvalue is the methods table, the third ipairs' iterator */
  static const luaL_Reg with_methods[] = {{"__index", l_index}, {"__newindex", l_newindex}, {NULL, NULL}};
  lua_pushvalue(L, meta);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &metatable_key);
  dlp_register(L, module, functions);
  dlp_register(L, methods, method_list);
  dlp_register(L, meta, metamethods);
  lua_pushvalue(L, meta);
  lua_pushvalue(L, meta);
  lua_pushvalue(L, methods);
  push_ipairs_iterator(L);
  luaL_setfuncs(L, with_methods, 3);
  /* __pairs: its second upvalue is its iterator */
  lua_pushvalue(L, meta);
  lua_pushvalue(L, meta);
  lua_pushcclosure(L, l_pairs_next, 1);
  lua_pushcclosure(L, l_pairs, 2);
  /* Lua 5.2's ipairs (and 5.3's, built with LUA_COMPAT_IPAIRS) asks __ipairs: the same walk */
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "__ipairs");
  lua_setfield(L, -2, "__pairs");
  lua_pop(L, 1);
  dlp_push_metatable_view(L, meta);
  lua_setfield(L, meta, "__metatable");
}
