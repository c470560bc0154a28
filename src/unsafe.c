/* dlpack.unsafe: raw pointers in and out. Everything here trusts its caller; a host that
 * runs untrusted scripts does not open it (the rest of the module accepts no raw pointer). */
#include "internal.h"

static int check_name(lua_State *L, int arg) {
  static const char *const names[] = {"dltensor", "dltensor_versioned", NULL};
  return luaL_checkoption(L, arg, NULL, names);
}

/* adopt(ptr, name) -> capsule owning the managed tensor at ptr */
static int l_adopt(lua_State *L) {
  void *managed = lua_touserdata(L, 1);
  if (lua_type(L, 1) != LUA_TLIGHTUSERDATA || !managed) luaL_argexpected(L, 0, 1, "non-NULL light userdata");
  int versioned = check_name(L, 2);
  void *capsule = dlp_capsule_new(managed, versioned, 1);
  if (!capsule) return luaL_error(L, "unsafe.adopt: too many unconsumed capsules");
  lua_pushlightuserdata(L, capsule);
  return 1;
}

/* take(cap) -> ptr, name: consumes the capsule; the caller must call the deleter */
static int l_take(lua_State *L) {
  int versioned;
  void *managed = dlp_capsule_take(L, 1, &versioned, "unsafe.take");
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
  lua_pushlightuserdata(L, (void *)(uintptr_t)luaL_checkinteger(L, 1));
  return 1;
}

void dlp_unsafe_register(lua_State *L, int module) {
  static const luaL_Reg functions[] = {
    {"adopt", l_adopt}, {"take", l_take}, {"address", l_address}, {"pointer", l_pointer}, {"wrap_stream", dlp_cuda_wrap_stream}, {NULL, NULL},
  };
  dlp_register(L, module, functions);
}
