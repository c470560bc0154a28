/* dlpack.unsafe: raw pointers in and out. Everything here trusts its caller; a host that
 * runs untrusted scripts does not open it (the rest of the module accepts no raw pointer). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static int check_name(lua_State *L, int arg) {
  static const char *const names[] = {"dltensor", "dltensor_versioned", NULL};
  return dlp_check_option(L, arg, names, "capsule name");
}

/* adopt(ptr, name) -> capsule owning the managed tensor at ptr */
static int l_adopt(lua_State *L) {
  void *managed = lua_touserdata(L, 1);
  if (lua_type(L, 1) != LUA_TLIGHTUSERDATA || !managed) luaL_argexpected(L, 0, 1, "non-NULL light userdata");
  int versioned = check_name(L, 2);
  dlp_state_for_new(L, "a capsule");
  void *capsule = dlp_capsule_new(managed, versioned, dlp_capsule_holder(L));
  if (!capsule) return luaL_error(L, "dlpack.unsafe.adopt: too many unconsumed capsules");
  lua_pushlightuserdata(L, capsule);
  return 1;
}

/* take(cap) -> ptr, name: consumes the capsule; the caller must call the deleter */
static int l_take(lua_State *L) {
  int versioned;
  void *managed = dlp_capsule_take(L, 1, &versioned, "dlpack.unsafe.take");
  lua_pushlightuserdata(L, managed);
  lua_pushstring(L, versioned ? "dltensor_versioned" : "dltensor");
  return 2;
}

/* address(ptr) -> the integer address of a light userdata (0 for NULL); pointer(address) -> the
 * light userdata. For embedders that cannot pass light userdata, such as Python's lupa. */
static int l_address(lua_State *L) {
  luaL_checktype(L, 1, LUA_TLIGHTUSERDATA);
  lua_pushinteger(L, (lua_Integer)(uintptr_t)lua_touserdata(L, 1));
  return 1;
}

static int l_pointer(lua_State *L) {
  lua_pushlightuserdata(L, (void *)(uintptr_t)dlp_checkinteger(L, 1));
  return 1;
}

/* A wrap whose owner is a tensor of this module also holds that tensor's memory: releasing the
 * owner tensor (release(), __close) frees its memory while the Lua value, which is all a wrap
 * keeps, lives on. The hold is a managed tensor of the wrap's owner, whose deleter lets go. */
typedef struct OwnerHold {
  DLManagedTensorVersioned managed; /* only its deleter and context are used */
  dlp_Owner *held;
} OwnerHold;

static void release_hold(DLManagedTensorVersioned *self) {
  OwnerHold *h = self->manager_ctx;
  dlp_owner_release(h->held);
  free(h);
}

/* wrap(ptr, shape, dtype [, strides], owner) -> a cpu tensor on memory the Lua value `owner`
 * owns, with no copy. ptr is light userdata or an integer address (lua/dlpack/unsafe.lua turns
 * LuaJIT FFI pointers into one); strides count elements (row-major when absent). Every tensor on
 * the memory keeps owner alive; exports copy it (see check_exportable in protocol.c). */
static int l_wrap(lua_State *L) {
  int64_t shape[DLP_MAX_NDIM], strides[DLP_MAX_NDIM];
  dlp_Span span;
  void *p;
  int owner = lua_gettop(L) >= 5 ? 5 : 4;
  if (lua_type(L, 1) == LUA_TLIGHTUSERDATA) {
    p = lua_touserdata(L, 1);
  } else {
    int isint;
    lua_Integer address = lua_tointegerx(L, 1, &isint);
    luaL_argexpected(L, isint, 1, "light userdata or an integer address");
    p = (void *)(uintptr_t)address;
  }
  int ndim = dlp_check_shape(L, 2, shape);
  int dtype = dlp_check_dtype(L, 3);
  if (owner == 5 && !lua_isnil(L, 4)) {
    if (dlp_check_integers(L, 4, strides, DLP_MAX_NDIM, INT64_MIN, "strides") != ndim)
      return luaL_argerror(L, 4, "strides must have one entry per dimension");
  } else {
    dlp_contiguous_strides(ndim, shape, strides);
  }
  luaL_checkany(L, owner);
  if (!dlp_span_of(ndim, shape, strides, dtype, 0, &span))
    return luaL_error(L, "dlpack.unsafe.wrap: the layout reaches beyond 64-bit offsets");
  if (span.numel > 0 && !p) return luaL_argerror(L, 1, "NULL pointer for a non-empty tensor");
  dlp_Tensor *t = dlp_tensor_push(L, ndim);
  dlp_keep(L, -1, owner);
  /* no Lua code runs from here on: an owner tensor live now stays live until it is held */
  const dlp_Tensor *owner_tensor = dlp_tensor_test(L, owner);
  OwnerHold *hold = NULL;
  if (owner_tensor && owner_tensor->owner) {
    if (!(hold = calloc(1, sizeof *hold))) return luaL_error(L, "dlpack.unsafe.wrap: not enough memory");
    hold->managed.manager_ctx = hold;
    hold->managed.deleter = release_hold;
    hold->held = owner_tensor->owner;
  }
  uintptr_t first = (uintptr_t)p;
  dlp_Owner *o = dlp_owner_new_managed(hold ? &hold->managed : NULL, hold != NULL, (size_t)(span.hi - span.lo),
                                       first + (uintptr_t)span.lo, first + (uintptr_t)span.hi);
  if (!o) {
    free(hold);
    return luaL_error(L, "dlpack.unsafe.wrap: not enough memory");
  }
  if (hold) dlp_owner_retain(hold->held);
  o->lua_owned = 1;
  t->owner = o;
  t->dl.data = p;
  t->dl.device.device_type = kDLCPU;
  t->dl.dtype = dlp_dtype_to_dl(dtype);
  t->dtype = dtype;
  memcpy(t->dl.shape, shape, (size_t)ndim * sizeof(int64_t));
  memcpy(t->dl.strides, strides, (size_t)ndim * sizeof(int64_t));
  dlp_tensor_seal(L, t, "dlpack.unsafe.wrap");
  dlp_keep_guard(L, owner);
  return 1;
}

void dlp_unsafe_register(lua_State *L, int module) {
  static const luaL_Reg functions[] = {
    {"adopt", l_adopt},
    {"take", l_take},
    {"address", l_address},
    {"pointer", l_pointer},
    {"wrap", l_wrap},
    {"wrap_stream", dlp_cuda_wrap_stream},
    {NULL, NULL},
  };
  dlp_register(L, module, functions);
}
