/* CUDA: found at run time. The driver library is opened with dlopen the first
 * time it is needed, so the module loads and works on machines with no GPU,
 * no driver and no toolkit; there dlpack.cuda.is_available() says why not. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "internal.h"

typedef int (*cuInit_fn)(unsigned int flags);
typedef int (*cuDeviceGetCount_fn)(int *count);

static struct {
  pthread_once_t once;
  int available;
  int device_count;
  char reason[256];
} driver = {PTHREAD_ONCE_INIT, 0, 0, ""};

static void load_driver(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    snprintf(driver.reason, sizeof driver.reason, "the CUDA driver (libcuda.so.1) cannot be loaded: %s",
             why ? why : "not found");
    return;
  }
  cuInit_fn init = (cuInit_fn)dlsym(lib, "cuInit");
  cuDeviceGetCount_fn count = (cuDeviceGetCount_fn)dlsym(lib, "cuDeviceGetCount");
  int rc;
  if (!init || !count) {
    snprintf(driver.reason, sizeof driver.reason, "libcuda.so.1 lacks cuInit or cuDeviceGetCount");
  } else if ((rc = init(0)) != 0) {
    snprintf(driver.reason, sizeof driver.reason, "cuInit failed with CUDA error %d (no GPU or driver mismatch?)", rc);
  } else if ((rc = count(&driver.device_count)) != 0 || driver.device_count == 0) {
    snprintf(driver.reason, sizeof driver.reason, "the CUDA driver reports no devices");
    driver.device_count = 0;
  } else {
    driver.available = 1;
    return; /* the library stays loaded for the process */
  }
  dlclose(lib);
}

static int l_is_available(lua_State *L) {
  pthread_once(&driver.once, load_driver);
  lua_pushboolean(L, driver.available);
  if (driver.available) return 1;
  lua_pushstring(L, driver.reason);
  return 2;
}

static int l_device_count(lua_State *L) {
  pthread_once(&driver.once, load_driver);
  lua_pushinteger(L, driver.device_count);
  return 1;
}

void dlp_cuda_register(lua_State *L, int module) {
  static const luaL_Reg functions[] = {
    {"is_available", l_is_available}, {"device_count", l_device_count}, {NULL, NULL},
  };
  luaL_newlib(L, functions);
  lua_pushinteger(L, 1);
  lua_setfield(L, -2, "legacy_stream");
  lua_pushinteger(L, 2);
  lua_setfield(L, -2, "per_thread_stream");
  lua_setfield(L, module, "cuda");
}
