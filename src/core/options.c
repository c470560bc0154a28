/* Options: the one reader of the option tables of t:to, t:copy, to_dlpack, __dlpack and
 * from_dlpack, so that each option means the same and is refused the same everywhere; and the
 * checks of the names and trailing arguments scripts pass. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

const char *dlp_push_quoted(lua_State *L, const char *s, size_t len) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addchar(&b, '\'');
  for (const char *nul; (nul = memchr(s, '\0', len)) != NULL; len -= (size_t)(nul - s) + 1, s = nul + 1) {
    luaL_addlstring(&b, s, (size_t)(nul - s));
    luaL_addstring(&b, "\\0");
  }
  luaL_addlstring(&b, s, len);
  luaL_addchar(&b, '\'');
  luaL_pushresult(&b);
  return lua_tostring(L, -1);
}

const char *dlp_push_shape(lua_State *L, int ndim, const int64_t *shape) {
  luaL_Buffer b;
  char buf[32];
  luaL_buffinit(L, &b);
  luaL_addchar(&b, '{');
  for (int i = 0; i < ndim; i++) {
    snprintf(buf, sizeof buf, i ? ", %lld" : "%lld", (long long)shape[i]);
    luaL_addstring(&b, buf);
  }
  luaL_addchar(&b, '}');
  luaL_pushresult(&b);
  return lua_tostring(L, -1);
}

int dlp_check_option(lua_State *L, int arg, const char *const names[], const char *what) {
  size_t len;
  const char *s = luaL_checklstring(L, arg, &len);
  for (int i = 0; names[i]; i++)
    if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0) return i;
  const char *quoted = dlp_push_quoted(L, s, len);
  if (memchr(s, '\0', len))
    return luaL_argerror(L, arg, lua_pushfstring(L, "%s %s contains an embedded NUL", what, quoted));
  return luaL_argerror(L, arg, lua_pushfstring(L, "invalid %s %s", what, quoted));
}

void dlp_check_no_more(lua_State *L, int first, const char *what, const char *how) {
  for (int k = first, top = lua_gettop(L); k <= top; k++)
    if (!lua_isnil(L, k)) luaL_argerror(L, k, lua_pushfstring(L, "unexpected argument (%s takes %s)", what, how));
}

static void read_dtype(lua_State *L, int arg, dlp_Options *o) {
  int type = lua_getfield(L, arg, "dtype");
  if (type == LUA_TSTRING) {
    size_t len;
    const char *name = lua_tolstring(L, -1, &len);
    if ((o->dtype = dlp_test_dtype_name(name, len)) < 0)
      luaL_argerror(L, arg, lua_pushfstring(L, "dtype: %s", dlp_push_dtype_error(L, name, len)));
  } else if (type != LUA_TNIL) {
    luaL_argerror(L, arg, lua_pushfstring(L, "dtype: a dtype name expected, got %s", luaL_typename(L, -1)));
  }
  lua_pop(L, 1);
}

/* dl_device (the protocol's name) or device */
static void read_device(lua_State *L, int arg, dlp_Options *o) {
  const char *field = "dl_device";
  if (lua_getfield(L, arg, field) == LUA_TNIL) {
    lua_pop(L, 1);
    field = "device";
    lua_getfield(L, arg, field);
  }
  if (!lua_isnil(L, -1)) {
    o->device = dlp_check_device(L, -1, arg, field);
    o->has_device = 1;
  }
  lua_pop(L, 1);
}

static void read_copy(lua_State *L, int arg, dlp_Options *o) {
  int type = lua_getfield(L, arg, "copy");
  if (type == LUA_TBOOLEAN) o->copy = lua_toboolean(L, -1);
  else if (type != LUA_TNIL)
    luaL_argerror(L, arg, lua_pushfstring(L, "copy must be true, false or nil, got %s", luaL_typename(L, -1)));
  lua_pop(L, 1);
}

/* max_version as {major, minor} or {major = , minor = }; only the major matters here */
static void read_max_version(lua_State *L, int arg, dlp_Options *o) {
  int isint;
  if (lua_getfield(L, arg, "max_version") == LUA_TNIL) {
    lua_pop(L, 1);
    return;
  }
  if (!lua_istable(L, -1))
    luaL_argerror(L, arg, lua_pushfstring(L, "max_version must be a table {major, minor}, got %s",
                                          luaL_typename(L, -1)));
  if (lua_geti(L, -1, 1) == LUA_TNIL) {
    lua_pop(L, 1);
    lua_getfield(L, -1, "major");
  }
  lua_Integer major = lua_tointegerx(L, -1, &isint);
  if (!isint || major < 0)
    luaL_argerror(L, arg, "max_version: the major version must be a non-negative integer");
  o->max_major = major;
  lua_pop(L, 2);
}

void dlp_read_options(lua_State *L, int arg, unsigned allowed, dlp_Options *o) {
  o->dtype = -1;
  o->has_device = 0;
  o->device.device_type = kDLCPU;
  o->device.device_id = 0;
  o->copy = -1;
  o->max_major = -1;
  o->stream = 0;
  if (arg == 0 || lua_isnoneornil(L, arg)) return;
  luaL_checktype(L, arg, LUA_TTABLE);
  if (allowed & DLP_OPT_DTYPE) read_dtype(L, arg, o);
  if (allowed & DLP_OPT_DEVICE) read_device(L, arg, o);
  if (allowed & DLP_OPT_COPY) read_copy(L, arg, o);
  if (allowed & DLP_OPT_MAX_VERSION) read_max_version(L, arg, o);
  if (allowed & DLP_OPT_STREAM) {
    if (lua_getfield(L, arg, "stream") == LUA_TNIL) lua_pop(L, 1);
    else o->stream = lua_gettop(L);
  }
}
