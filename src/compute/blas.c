/* The system's CBLAS, found at run time (as cuda.c finds the CUDA driver): no build-time
 * dependency, and a module that works, more slowly, where no BLAS is installed. The first
 * matrix product of the process opens the first of the libraries below that exports
 * cblas_sgemm and cblas_dgemm, once for every thread and lua_State (dlp_call_once), and keeps
 * it loaded for the life of the process (OpenBLAS's threads must not outlive its code).
 *
 * DLPACK_LUA_BLAS, read once at that point, chooses: unset or empty, the search below;
 * "none", no BLAS (the module's own kernel does every product: the specs compare both);
 * anything else, that library alone (a file name the system searches for, or a path).
 *
 * OpenBLAS picks its kernels once, when it is loaded, from the processor's model; a release
 * older than the processor falls back to generic SSE3 kernels (Debian's 0.3.21 takes its
 * "Prescott" kernels on recent Xeons: 6 times slower than the AVX-512 ones). So, unless the
 * process set OPENBLAS_CORETYPE itself or DLPACK_LUA_BLAS_CORETYPE says otherwise, the module
 * sets OPENBLAS_CORETYPE to the kernels the processor can run (SkylakeX with AVX-512, Haswell
 * with AVX2 and FMA) while it opens the library, and removes it again once the library has
 * read it (children of the process see the environment it had). Other BLAS libraries ignore
 * the variable. POSIX only: on Windows the DLL reads its own C runtime's environment. */
#ifndef _WIN32
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
#endif
#include <ctype.h>
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
  void *handle;
  char reason[256];
} loaded = {DLP_ONCE_INIT, {NULL, NULL, NULL}, NULL, ""};

static char library[256];

/* What the module knows of the library it opened, for dlpack.blas(). */
static struct {
  char chosen[32];       /* the OPENBLAS_CORETYPE the module set while opening, "" none */
  const char *chosen_by; /* who chose it: "dlpack", "DLPACK_LUA_BLAS_CORETYPE", "OPENBLAS_CORETYPE",
                          * "OpenBLAS" (its own pick) */
  char corename[64];     /* the kernels OpenBLAS runs (openblas_get_corename), "" unknown */
  char config[256];      /* openblas_get_config: version and build options, "" unknown */
} details = {"", "OpenBLAS", "", ""};

/* The OpenBLAS core type whose kernels this processor runs and the system lets it use (GCC's
 * and Clang's check reads XGETBV: the system saves the AVX and AVX-512 registers), or NULL.
 * SkylakeX's kernels are built for Skylake-SP, whose AVX-512 has the F, CD, BW, DQ and VL parts. */
static const char *processor_coretype(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return NULL;
}

/* Before the library is opened: set OPENBLAS_CORETYPE where the module chooses (see the top). */
static void choose_coretype(void) {
  const char *mine = getenv("DLPACK_LUA_BLAS_CORETYPE"), *theirs = getenv("OPENBLAS_CORETYPE");
  if (theirs && *theirs) {
    details.chosen_by = "OPENBLAS_CORETYPE";
    return;
  }
  if (mine && strcmp(mine, "keep") == 0) return;
  const char *type = mine && *mine ? mine : processor_coretype();
#ifndef _WIN32
  if (type && strlen(type) < sizeof details.chosen && setenv("OPENBLAS_CORETYPE", type, 1) == 0) {
    snprintf(details.chosen, sizeof details.chosen, "%s", type);
    details.chosen_by = mine && *mine ? "DLPACK_LUA_BLAS_CORETYPE" : "dlpack";
  }
#else
  (void)type;
#endif
}

static int same_name(const char *a, const char *b) {
  for (; *a && tolower((unsigned char)*a) == tolower((unsigned char)*b); a++, b++) continue;
  return *a == *b;
}

/* After: the environment as it was, and what OpenBLAS says it runs. */
static void read_coretype(void) {
#ifndef _WIN32
  if (details.chosen[0]) unsetenv("OPENBLAS_CORETYPE");
#endif
  if (!loaded.blas.sgemm) return;
  void *lib = loaded.handle, *corename = dlp_library_symbol(lib, "openblas_get_corename"),
       *config = dlp_library_symbol(lib, "openblas_get_config");
  char *(*get)(void);
  if (corename) {
    memcpy(&get, &corename, sizeof get);
    snprintf(details.corename, sizeof details.corename, "%s", get());
    /* an OpenBLAS the process had loaded already, or a name it does not know: its own pick */
    if (details.chosen[0] && !same_name(details.chosen, details.corename)) details.chosen_by = "OpenBLAS";
  }
  if (config) {
    memcpy(&get, &config, sizeof get);
    snprintf(details.config, sizeof details.config, "%s", get());
  }
}

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
  loaded.handle = lib;
  return 1;
}

static void search(void) {
  const char *choice = getenv("DLPACK_LUA_BLAS");
  if (choice && *choice) {
    try_open(choice, 0);
    return;
  }
  for (int i = 0; candidates[i]; i++)
    if (try_open(candidates[i], strcmp(candidates[i], "libblas.so.3") == 0)) return;
  if (strstr(loaded.reason, "reference")) return; /* the reason to tell */
  snprintf(loaded.reason, sizeof loaded.reason, "no CBLAS found (tried " CANDIDATE_NAMES ")");
}

static void load_blas(void) {
  const char *choice = getenv("DLPACK_LUA_BLAS");
  if (choice && strcmp(choice, "none") == 0) {
    snprintf(loaded.reason, sizeof loaded.reason, "DLPACK_LUA_BLAS=none");
    return;
  }
  choose_coretype();
  search();
  read_coretype();
}

const dlp_Blas *dlp_blas(void) {
  dlp_call_once(&loaded.once, load_blas);
  return loaded.blas.sgemm ? &loaded.blas : NULL;
}

static void set_field(lua_State *L, const char *name, const char *value) {
  if (!*value) return;
  lua_pushstring(L, value);
  lua_setfield(L, -2, name);
}

/* dlpack.blas(): the library the matrix products use and a table of details, or nil and why
 * none is. */
static int l_blas(lua_State *L) {
  const dlp_Blas *b = dlp_blas();
  if (b) {
    lua_pushstring(L, b->name);
    lua_createtable(L, 0, 6);
    set_field(L, "library", b->name);
    set_field(L, "coretype", details.corename);
    if (details.corename[0]) {
      set_field(L, "coretype_by", details.chosen_by);
      set_field(L, "coretype_set", details.chosen);
    }
    set_field(L, "config", details.config);
    void *threads = dlp_library_symbol(loaded.handle, "openblas_get_num_threads");
    if (threads) {
      int (*get)(void);
      memcpy(&get, &threads, sizeof get);
      lua_pushinteger(L, get());
      lua_setfield(L, -2, "threads");
    }
    return 2;
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
