/* The system's CBLAS, found at run time (as cuda.c finds the CUDA driver): no build-time
 * dependency, and a module that works, more slowly, where no BLAS is installed. The first
 * matrix product of the process opens the first of the libraries below that exports
 * cblas_sgemm and cblas_dgemm, once for every thread and lua_State (dlp_call_once), and keeps
 * it loaded for the life of the process (OpenBLAS's threads must not outlive its code).
 *
 * DLPACK_LUA_BLAS, read once at that point, chooses: unset or empty, the search below;
 * "none", no BLAS (the module's own kernel does every product: the specs compare both);
 * anything else, that library alone (a file name the system searches for, or a path). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* OpenBLAS (Debian: libopenblas0-pthread, libopenblas0-openmp, libopenblas0-serial), ATLAS's
 * CBLAS, then whatever libblas.so.3 is when it is an optimised BLAS (OpenBLAS, BLIS, MKL or
 * ATLAS through Debian's alternatives), not the reference BLAS (libblas3), which exports the
 * CBLAS functions too but is slower than the module's kernel. On Windows, OpenBLAS under the
 * names its releases and MSYS2 give its DLL. All are LP64: their integers are 32-bit ints (the
 * ILP64 builds have other names: libopenblas64.so.0). */
#ifdef _WIN32
static const char *const candidates[] = {"libopenblas.dll", "openblas.dll", NULL};
#define CANDIDATE_NAMES "libopenblas.dll, openblas.dll"
#else
static const char *const candidates[] = {"libopenblas.so.0", "libcblas.so.3", "libblas.so.3", NULL};
#define CANDIDATE_NAMES "libopenblas.so.0, libcblas.so.3, libblas.so.3"
#endif

static struct {
  dlp_once_flag once;
  dlp_Blas blas;
  char reason[256];
} loaded = {DLP_ONCE_INIT, {NULL, NULL, NULL}, ""};

static char library[256];

/* A symbol each optimised BLAS has and the reference BLAS lacks (dlsym on the handle also
 * searches the libraries it needs: Debian's OpenBLAS libblas.so.3 is a wrapper of libopenblas). */
static const char *const optimised[] = {
  "openblas_get_config",      /* OpenBLAS */
  "bli_info_get_version_str", /* BLIS */
  "MKL_Get_Version",          /* Intel MKL */
  "ATL_buildinfo",            /* ATLAS */
  NULL,
};

/* Open name; with `fast`, only an optimised BLAS: the reference BLAS (libblas3) computes a 512 x
 * 512 float32 product 3 times slower than the module's own kernel, so the search passes it by. */
static int try_open(const char *name, int fast) {
  char why[200];
  void *lib = dlp_library_open(name, 1, why, sizeof why);
  if (!lib) {
    snprintf(loaded.reason, sizeof loaded.reason, "%s cannot be loaded: %s", name, why);
    return 0;
  }
  void *s = dlp_library_symbol(lib, "cblas_sgemm"), *d = dlp_library_symbol(lib, "cblas_dgemm");
  if (!s || !d) {
    snprintf(loaded.reason, sizeof loaded.reason, "%s exports no cblas_sgemm and cblas_dgemm", name);
    dlp_library_close(lib);
    return 0;
  }
  int known = !fast;
  for (int i = 0; !known && optimised[i]; i++) known = dlp_library_symbol(lib, optimised[i]) != NULL;
  if (!known) {
    snprintf(loaded.reason, sizeof loaded.reason,
             "%s is the reference BLAS, slower than the module's own kernel (DLPACK_LUA_BLAS=%s uses it)", name,
             name);
    dlp_library_close(lib);
    return 0;
  }
  /* a function pointer from an object pointer: POSIX and Windows guarantee it converts */
  memcpy(&loaded.blas.sgemm, &s, sizeof s);
  memcpy(&loaded.blas.dgemm, &d, sizeof d);
  snprintf(library, sizeof library, "%s", name);
  loaded.blas.name = library;
  return 1;
}

static void load_blas(void) {
  const char *choice = getenv("DLPACK_LUA_BLAS");
  if (choice && strcmp(choice, "none") == 0) {
    snprintf(loaded.reason, sizeof loaded.reason, "DLPACK_LUA_BLAS=none");
    return;
  }
  if (choice && *choice) {
    try_open(choice, 0);
    return;
  }
  for (int i = 0; candidates[i]; i++)
    if (try_open(candidates[i], strcmp(candidates[i], "libblas.so.3") == 0)) return;
  if (strstr(loaded.reason, "reference")) return; /* the reason to tell */
  snprintf(loaded.reason, sizeof loaded.reason, "no CBLAS found (tried " CANDIDATE_NAMES ")");
}

const dlp_Blas *dlp_blas(void) {
  dlp_call_once(&loaded.once, load_blas);
  return loaded.blas.sgemm ? &loaded.blas : NULL;
}

/* dlpack.blas(): the library the matrix products use, or nil and why none is. */
static int l_blas(lua_State *L) {
  const dlp_Blas *b = dlp_blas();
  if (b) {
    lua_pushstring(L, b->name);
    return 1;
  }
  lua_pushnil(L);
  lua_pushstring(L, loaded.reason);
  return 2;
}

void dlp_blas_register(lua_State *L, int module, int methods, int meta) {
  static const luaL_Reg functions[] = {{"blas", l_blas}, {NULL, NULL}};
  (void)methods;
  (void)meta;
  dlp_register(L, module, functions);
}
