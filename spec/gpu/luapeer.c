/*
 * spec/gpu/luapeer.c: Lua (with dlpack) inside a running Python, without Python's
 * headers or libpython: a plain shared library that spec/gpu/luapeer_ctypes.py
 * loads with ctypes and wraps as the `luapeer` module of spec/peers/peers.c (the
 * same functions: open, close, run, export, device, capsule_name, lua_version).
 *
 * Why: a GPU machine may have PyTorch and CuPy in a Python that cannot be
 * embedded (no python3-config, no libpython for it), but any python3 can load
 * this with ctypes. Build (the static library and Lua's shared library):
 *
 *   cc -shared -fPIC -std=c11 -I/usr/include/lua5.4 -Isrc -o build/gpu/libluapeer.so \
 *      spec/gpu/luapeer.c build/libdlpack_lua.a -llua5.4 -ldl -lm -pthread
 *
 * Load it RTLD_GLOBAL so that C modules Lua requires (gpu_kernels) find Lua's
 * symbols. Everything here runs on the Python thread that holds the GIL.
 *
 * Python capsules: Python renames a capsule "used_*" before lp_arg_managed
 * (ownership passes to Lua, whose push calls the deleter exactly once, also
 * when it raises). Capsules made by lp_export carry lp_capsule_destructor, which
 * calls the deleter only while the capsule is unconsumed; it finds
 * PyCapsule_IsValid / PyCapsule_GetPointer in the running process with dlsym.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "dlpack_lua.h"

#define LP_API __attribute__((visibility("default")))

static const char VERSIONED[] = "dltensor_versioned", LEGACY[] = "dltensor";
static const char USED_VERSIONED[] = "used_dltensor_versioned", USED_LEGACY[] = "used_dltensor";

static lua_State *L;
static char *result; /* the last run's results as JSON, or its error message */

/* Arguments of the next lp_run, in order. */
#define MAX_ARGS 16
static struct {
  enum { A_NIL, A_BOOL, A_INT, A_NUM, A_STR, A_MANAGED } kind;
  long long i;
  double d;
  char *s;
  void *managed;
  int versioned;
} args[MAX_ARGS];
static int nargs;

/* Lua values -> JSON (results of lp_run). Tensors and other userdata cannot
 * leave Lua, as in peers.c: keep them in Lua globals. */
static const char JSON_LUA[] =
    "local function esc(s)\n"
    "  return '\"' .. s:gsub('[%c\"\\\\]', function(c)\n"
    "    return string.format('\\\\u%04x', c:byte())\n"
    "  end) .. '\"'\n"
    "end\n"
    "local function enc(v, depth)\n"
    "  local t = type(v)\n"
    "  if depth > 32 then error('Lua table nested too deep') end\n"
    "  if v == nil then return 'null'\n"
    "  elseif t == 'boolean' then return tostring(v)\n"
    "  elseif math.type(v) == 'integer' then return string.format('%d', v)\n"
    "  elseif t == 'number' then\n"
    "    if v ~= v then return 'NaN' elseif v == math.huge then return 'Infinity'\n"
    "    elseif v == -math.huge then return '-Infinity' end\n"
    "    local s = string.format('%.17g', v)\n"
    "    return s:find('[%.eEn]') and s or s .. '.0'\n"
    "  elseif t == 'string' then return esc(v)\n"
    "  elseif t == 'table' then\n"
    "    local n, parts = #v, {}\n"
    "    if n > 0 or next(v) == nil then\n"
    "      for i = 1, n do parts[i] = enc(v[i], depth + 1) end\n"
    "      return '[' .. table.concat(parts, ',') .. ']'\n"
    "    end\n"
    "    for k, x in pairs(v) do parts[#parts + 1] = esc(tostring(k)) .. ':' .. enc(x, depth + 1) end\n"
    "    return '{' .. table.concat(parts, ',') .. '}'\n"
    "  elseif t == 'userdata' and not getmetatable(v) then\n"
    "    return string.format('%d', tonumber(string.format('%p', v)))\n"
    "  end\n"
    "  error('cannot return a Lua ' .. t .. ' to Python (keep tensors in Lua globals)')\n"
    "end\n"
    "return function(...)\n"
    "  local n, parts = select('#', ...), {}\n"
    "  for i = 1, n do parts[i] = enc((select(i, ...)), 0) end\n"
    "  return '[' .. table.concat(parts, ',') .. ']'\n"
    "end\n";

static void set_result(const char *s, size_t n) {
  free(result);
  result = malloc(n + 1);
  if (result) {
    memcpy(result, s, n);
    result[n] = '\0';
  }
}

static int traceback(lua_State *S) {
  const char *msg = lua_tostring(S, 1);
  luaL_traceback(S, S, msg ? msg : luaL_tolstring(S, 1, NULL), 1);
  return 1;
}

static void drop_args(int from) {
  for (int i = from; i < nargs; i++) {
    if (args[i].kind == A_STR) free(args[i].s);
    if (args[i].kind == A_MANAGED && args[i].managed) {
      if (args[i].versioned) {
        DLManagedTensorVersioned *m = args[i].managed;
        if (m->deleter) m->deleter(m);
      } else {
        DLManagedTensor *m = args[i].managed;
        if (m->deleter) m->deleter(m);
      }
    }
  }
  nargs = from < nargs ? from : nargs;
}

LP_API int lp_open(void) {
  if (L != NULL) return 0;
  L = luaL_newstate();
  if (L == NULL) return 1;
  luaL_openlibs(L);
  luaL_requiref(L, "dlpack", luaopen_dlpack, 1);
  lua_pop(L, 1);
  if (luaL_loadstring(L, JSON_LUA) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK) {
    set_result(lua_tostring(L, -1), strlen(lua_tostring(L, -1)));
    lua_close(L);
    L = NULL;
    return 1;
  }
  lua_setfield(L, LUA_REGISTRYINDEX, "luapeer.json");
  return 0;
}

LP_API void lp_close(void) {
  if (L != NULL) lua_close(L);
  L = NULL;
}

LP_API int lp_is_open(void) { return L != NULL; }

LP_API const char *lp_result(void) { return result ? result : ""; }

LP_API const char *lp_capsule_name(int versioned, int used) {
  return versioned ? (used ? USED_VERSIONED : VERSIONED) : (used ? USED_LEGACY : LEGACY);
}

LP_API const char *lp_lua_version(void) {
  static char v[64];
  snprintf(v, sizeof v, "%s, dlpack_lua %s", LUA_RELEASE, DLPACK_LUA_VERSION);
  return v;
}

static int add_arg(int kind) {
  if (nargs == MAX_ARGS) return -1;
  memset(&args[nargs], 0, sizeof args[nargs]);
  args[nargs].kind = kind;
  return nargs++;
}

LP_API int lp_arg_nil(void) { return add_arg(A_NIL) < 0; }
LP_API int lp_arg_bool(int b) {
  int i = add_arg(A_BOOL);
  if (i >= 0) args[i].i = b;
  return i < 0;
}
LP_API int lp_arg_int(long long v) {
  int i = add_arg(A_INT);
  if (i >= 0) args[i].i = v;
  return i < 0;
}
LP_API int lp_arg_num(double v) {
  int i = add_arg(A_NUM);
  if (i >= 0) args[i].d = v;
  return i < 0;
}
LP_API int lp_arg_str(const char *s) {
  int i = add_arg(A_STR);
  if (i >= 0) args[i].s = strdup(s);
  return i < 0;
}
/* Takes ownership of managed (its deleter runs if it never reaches Lua). */
LP_API int lp_arg_managed(void *managed, int versioned) {
  int i = add_arg(A_MANAGED);
  if (i < 0) {
    if (versioned) ((DLManagedTensorVersioned *)managed)->deleter(managed);
    else ((DLManagedTensor *)managed)->deleter(managed);
    return 1;
  }
  args[i].managed = managed;
  args[i].versioned = versioned;
  return 0;
}
LP_API void lp_args_reset(void) { drop_args(0); }

/* In protected mode: push every argument; a managed one is handed over (and
 * forgotten here) before the push that owns it from then on. */
static int push_args(lua_State *S) {
  lua_settop(S, 0);
  luaL_checkstack(S, nargs + 2, "too many arguments");
  for (int i = 0; i < nargs; i++) {
    switch (args[i].kind) {
    case A_NIL: lua_pushnil(S); break;
    case A_BOOL: lua_pushboolean(S, (int)args[i].i); break;
    case A_INT: lua_pushinteger(S, (lua_Integer)args[i].i); break;
    case A_NUM: lua_pushnumber(S, args[i].d); break;
    case A_STR: lua_pushstring(S, args[i].s); break;
    case A_MANAGED: {
      void *m = args[i].managed;
      args[i].managed = NULL;
      if (args[i].versioned) dlpack_lua_push_versioned(S, m);
      else dlpack_lua_push_legacy(S, m);
      break;
    }
    }
  }
  return nargs;
}

/* Run `code` with the pending arguments; 0 on success (lp_result(): a JSON
 * list of the results), 1 on a Lua error (lp_result(): the message). */
LP_API int lp_run(const char *code) {
  if (L == NULL) {
    drop_args(0);
    set_result("the Lua state is closed (call luapeer.open())", 45);
    return 1;
  }
  int base = lua_gettop(L), ok = 0;
  lua_pushcfunction(L, traceback);
  lua_pushcfunction(L, push_args);
  if (lua_pcall(L, 0, LUA_MULTRET, base + 1) == LUA_OK) {
    int n = lua_gettop(L) - (base + 1);
    if (luaL_loadbuffer(L, code, strlen(code), "=luapeer") == LUA_OK) {
      lua_insert(L, base + 2);
      if (lua_pcall(L, n, LUA_MULTRET, base + 1) == LUA_OK) {
        int nres = lua_gettop(L) - (base + 1);
        lua_getfield(L, LUA_REGISTRYINDEX, "luapeer.json");
        lua_insert(L, base + 2);
        ok = lua_pcall(L, nres, 1, base + 1) == LUA_OK;
      }
    }
  }
  drop_args(0);
  size_t len;
  const char *s = lua_tolstring(L, -1, &len);
  if (s == NULL) s = "(error object is not a string)", len = strlen(s);
  set_result(s, len);
  lua_settop(L, base);
  return ok ? 0 : 1;
}

typedef struct {
  const char *expr;
  int versioned, copy, has_stream, has_device, dl_type, dl_id;
  long long stream;
  void *managed;
  int out_versioned;
} export_req;

/* In protected mode: dlpack.to_dlpack(expr, opts), then consume the capsule. */
static int export_fn(lua_State *S) {
  export_req *r = lua_touserdata(S, 1);
  lua_getglobal(S, "dlpack");
  lua_getfield(S, -1, "to_dlpack");
  lua_pushfstring(S, "return %s", r->expr);
  if (luaL_loadstring(S, lua_tostring(S, -1)) != LUA_OK) return lua_error(S);
  lua_remove(S, -2);
  lua_call(S, 0, 1);
  int tensor = lua_gettop(S);
  lua_createtable(S, 0, 4);
  lua_createtable(S, 2, 0);
  lua_pushinteger(S, r->versioned ? 1 : 0);
  lua_rawseti(S, -2, 1);
  lua_pushinteger(S, r->versioned ? 3 : 8);
  lua_rawseti(S, -2, 2);
  lua_setfield(S, -2, "max_version");
  if (r->copy >= 0) {
    lua_pushboolean(S, r->copy);
    lua_setfield(S, -2, "copy");
  }
  if (r->has_stream && r->stream > 2) {
    /* a raw handle from Python: the safe API takes -1, 1, 2 and stream objects, so it is
     * wrapped by dlpack.unsafe on the tensor's device, as a host does */
    luaL_loadstring(S, "local t, h = ...\n"
                       "local id = tonumber(t.device:match(':(%d+)$')) or 0\n"
                       "return require('dlpack.unsafe').wrap_stream(h, id)");
    lua_pushvalue(S, tensor);
    lua_pushinteger(S, (lua_Integer)r->stream);
    lua_call(S, 2, 1);
    lua_setfield(S, -2, "stream");
  } else if (r->has_stream) {
    lua_pushinteger(S, (lua_Integer)r->stream);
    lua_setfield(S, -2, "stream");
  }
  if (r->has_device) {
    lua_createtable(S, 2, 0);
    lua_pushinteger(S, r->dl_type);
    lua_rawseti(S, -2, 1);
    lua_pushinteger(S, r->dl_id);
    lua_rawseti(S, -2, 2);
    lua_setfield(S, -2, "dl_device");
  }
  lua_call(S, 2, 1);
  int rc = dlpack_lua_capsule_consume(lua_touserdata(S, -1), &r->managed, &r->out_versioned);
  if (rc != DLPACK_LUA_OK) return luaL_error(S, "dlpack_lua_capsule_consume returned %d", rc);
  return 0;
}

/* Export the tensor `expr` evaluates to: 0 and *managed / *versioned on success;
 * 1 and lp_result() the message on error. copy: -1 absent, else 0/1. */
LP_API int lp_export(const char *expr, int versioned, int copy, int has_stream, long long stream, int has_device,
                     int dl_type, int dl_id, void **managed, int *out_versioned) {
  if (L == NULL) {
    set_result("the Lua state is closed (call luapeer.open())", 45);
    return 1;
  }
  export_req r = {expr, versioned, copy, has_stream, has_device, dl_type, dl_id, stream, NULL, 0};
  int base = lua_gettop(L);
  lua_pushcfunction(L, traceback);
  lua_pushcfunction(L, export_fn);
  lua_pushlightuserdata(L, &r);
  int ok = lua_pcall(L, 1, 0, base + 1) == LUA_OK;
  if (!ok) {
    const char *s = lua_tostring(L, -1);
    set_result(s ? s : "(error)", strlen(s ? s : "(error)"));
  }
  lua_settop(L, base);
  *managed = r.managed;
  *out_versioned = r.out_versioned;
  return ok ? 0 : 1;
}

/* (device_type, device_id) of the tensor `expr` evaluates to; 0 on success. */
static int device_fn(lua_State *S) {
  int *out = lua_touserdata(S, 1);
  const char *expr = lua_touserdata(S, 2);
  lua_pushfstring(S, "return %s", expr);
  if (luaL_loadstring(S, lua_tostring(S, -1)) != LUA_OK) return lua_error(S);
  lua_call(S, 0, 1);
  const DLTensor *t = dlpack_lua_check_tensor(S, -1, NULL);
  out[0] = t->device.device_type;
  out[1] = t->device.device_id;
  return 0;
}

LP_API int lp_device(const char *expr, int *type_and_id) {
  if (L == NULL) {
    set_result("the Lua state is closed (call luapeer.open())", 45);
    return 1;
  }
  int base = lua_gettop(L);
  lua_pushcfunction(L, traceback);
  lua_pushcfunction(L, device_fn);
  lua_pushlightuserdata(L, type_and_id);
  lua_pushlightuserdata(L, (void *)expr);
  int ok = lua_pcall(L, 2, 0, base + 1) == LUA_OK;
  if (!ok) set_result(lua_tostring(L, -1), strlen(lua_tostring(L, -1)));
  lua_settop(L, base);
  return ok ? 0 : 1;
}

/* The destructor of capsules made from lp_export: delete only while unconsumed. */
typedef int (*IsValid_fn)(void *capsule, const char *name);
typedef void *(*GetPointer_fn)(void *capsule, const char *name);

LP_API void lp_capsule_destructor(void *capsule) {
  static IsValid_fn is_valid;
  static GetPointer_fn get_pointer;
  if (is_valid == NULL) {
    is_valid = (IsValid_fn)dlsym(RTLD_DEFAULT, "PyCapsule_IsValid");
    get_pointer = (GetPointer_fn)dlsym(RTLD_DEFAULT, "PyCapsule_GetPointer");
    if (is_valid == NULL || get_pointer == NULL) return; /* leak rather than guess */
  }
  if (is_valid(capsule, VERSIONED)) {
    DLManagedTensorVersioned *m = get_pointer(capsule, VERSIONED);
    if (m->deleter) m->deleter(m);
  } else if (is_valid(capsule, LEGACY)) {
    DLManagedTensor *m = get_pointer(capsule, LEGACY);
    if (m->deleter) m->deleter(m);
  }
}

/* The flags of a versioned managed tensor (READ_ONLY = 1, IS_COPIED = 2). */
LP_API unsigned long long lp_flags(void *managed) { return ((DLManagedTensorVersioned *)managed)->flags; }
