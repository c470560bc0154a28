/* The Lua a module is loaded into must be the Lua it is built for.
 *
 * Lua's C API differs between versions in layout, not in names, so a module built for one Lua
 * links and loads in a process that runs another, and then corrupts that Lua's state: lupa
 * loads lupa.lua54 with global symbols and then runs a Lua 5.5 LuaRuntime, whose `require`
 * calls a Lua 5.4 module; the module's calls reach lupa.lua54's functions, on a 5.5 state.
 * luaL_checkversion cannot see it: it asks the Lua the module's calls reach (5.4 here), which
 * answers with its own version, not the state's.
 *
 * What can be asked safely is the code that called luaopen_dlpack_core: `require` of the Lua
 * that runs the state. The shared library (or program) holding that return address is looked
 * up, and its own exported lua_version is called with NULL, which every Lua from 5.2 on answers
 * without reading a state (5.1 has none: a Lua object without it is 5.1). When that Lua, or the
 * one the module's own calls reach, is not the Lua the module is built for, the error is
 * raised through the caller's own lua_pushstring and lua_error, whose signatures are the same
 * in every version: a clear Lua error in the right Lua, before any other call.
 *
 * What it cannot see: a caller that exports no Lua symbols (a host program linking Lua
 * statically without exporting it, which calls luaopen_dlpack_core itself; it was compiled
 * against one Lua and links the module against the same). luaL_checkversion then runs as usual. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* The text examples/dlpack_lupa.py finds in the module file to pick the lupa runtime. */
static const char built_for[] = "dlpack_lua built for " LUA_VERSION;

typedef void (*Function)(void);

/* dlp_library_export_at (platform.h) as a function pointer; NULL when there is none. */
static Function exported_by(const void *address, const char *name) {
  void *symbol = dlp_library_export_at(address, name);
  Function fn = NULL;
  if (symbol) memcpy(&fn, &symbol, sizeof fn); /* POSIX and Windows: function pointers convert */
  return fn;
}

/* The LUA_VERSION_NUM of the Lua in the object holding `address` (504 for Lua 5.4), 0 when that
 * object exports no Lua. lua_version returns the number from 5.4 on (the only ones with
 * lua_newuserdatauv), a pointer to it in 5.2, 5.3 and LuaJIT. */
static int version_at(const void *address) {
  if (!exported_by(address, "lua_pushstring") || !exported_by(address, "lua_error")) return 0;
  Function version = exported_by(address, "lua_version");
  if (!version) return exported_by(address, "lua_setfenv") ? 501 : 0; /* 5.1 has no lua_version */
  if (exported_by(address, "lua_newuserdatauv")) return (int)((lua_Number(*)(lua_State *))version)(NULL);
  return (int)*((const lua_Number *(*)(lua_State *))version)(NULL);
}

void dlp_check_runtime(lua_State *L, const void *caller) {
  int running = version_at(caller);
  int reached = version_at((const void *)lua_pushstring);
  const char *built = built_for + sizeof "dlpack_lua"; /* "built for Lua 5.4" */
  char message[300];
  if (running == 0 || (running == LUA_VERSION_NUM && (reached == LUA_VERSION_NUM || reached == 0))) {
#if LUA_VERSION_NUM >= 502
    luaL_checkversion(L);
#endif
    return;
  }
  if (running != LUA_VERSION_NUM)
    snprintf(message, sizeof message, "dlpack: this module is %s and cannot load into Lua %d.%d: build it for that Lua",
             built, running / 100, running % 100);
  else
    snprintf(message, sizeof message,
             "dlpack: this module is %s, but the Lua C API it reaches in this process is Lua %d.%d's "
             "(another Lua was loaded with global symbols first)", built, reached / 100, reached % 100);
  /* through the caller's own functions: the module's reach another Lua */
  ((const char *(*)(lua_State *, const char *))exported_by(caller, "lua_pushstring"))(L, message);
  ((int (*)(lua_State *))exported_by(caller, "lua_error"))(L);
}
