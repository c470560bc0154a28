/* examples/minimal.c: the smallest C host (docs/c-api.md). It lends a float
 * buffer to a script, which doubles it in place and returns a new tensor; the
 * host exports that tensor, closes Lua, reads it and frees it.
 *
 *   cc examples/minimal.c -Isrc $(pkg-config --cflags lua5.4) build/libdlpack_lua.a \
 *      $(pkg-config --libs lua5.4) -ldl -lm -pthread -o minimal && ./minimal
 */
#include <stdio.h>
#include <stdlib.h>

#include <lauxlib.h>
#include <lualib.h>

#include "dlpack_lua.h"

static float pixels[4] = {1, 2, 3, 4};
static int64_t shape[1] = {4};

/* The buffer is the host's: the deleter only frees the wrapper. */
static void wrapper_deleter(DLManagedTensorVersioned *self) { free(self); }

static DLManagedTensorVersioned *lend_pixels(void) {
  DLManagedTensorVersioned *m = calloc(1, sizeof *m);
  if (m == NULL) abort();
  m->version.major = DLPACK_MAJOR_VERSION;
  m->version.minor = DLPACK_MINOR_VERSION;
  m->deleter = wrapper_deleter;
  m->dl_tensor.data = pixels;
  m->dl_tensor.device.device_type = kDLCPU;
  m->dl_tensor.ndim = 1;
  m->dl_tensor.dtype.code = kDLFloat;
  m->dl_tensor.dtype.bits = 32;
  m->dl_tensor.dtype.lanes = 1;
  m->dl_tensor.shape = shape; /* strides NULL: row-major */
  return m;
}

int main(void) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  luaL_requiref(L, "dlpack", luaopen_dlpack, 1); /* scripts can also require "dlpack" */
  lua_pop(L, 1);

  dlpack_lua_push_versioned(L, lend_pixels()); /* takes ownership of the wrapper */
  lua_setglobal(L, "pixels");
  if (luaL_dostring(L, "for i = 1, #pixels do pixels[i] = pixels[i] * 2 end\n"
                       "return require('dlpack').tensor({10, 20, 30}, 'int32')") != LUA_OK) {
    fprintf(stderr, "%s\n", lua_tostring(L, -1));
    return 1;
  }
  DLManagedTensorVersioned *out = dlpack_lua_export_versioned(L, -1); /* ours now */
  lua_close(L); /* the lent buffer is handed back here; `out` stays valid */

  const int32_t *v = out->dl_tensor.data;
  printf("pixels %g %g %g %g, result %d %d %d\n", pixels[0], pixels[1], pixels[2], pixels[3], v[0], v[1], v[2]);
  int ok = pixels[3] == 8 && v[2] == 30;
  out->deleter(out);
  return ok ? 0 : 1;
}
