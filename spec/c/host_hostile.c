/*
 * spec/c/host_hostile.c: the C API given what a careless or hostile host may pass; it prints TAP
 * (stage 30, and under valgrind in stage 60):
 *   - NULL managed tensors to the push functions raise, and dlpack_lua_capsule_new(NULL) makes
 *     no capsule (a script would consume NULL);
 *   - a push into a lua_State where the module is not open raises and runs the deleter once;
 *   - dlpack_lua_capsule_consume with NULL out parameters;
 *   - the module's own export, edited by the host before it is pushed back (ndim over 64, a
 *     negative size, a smaller view, NULL strides as DLPack 1.1 producers send), is checked as
 *     any producer's;
 *   - the sub-byte padded flag on a float32 tensor is ignored (it says nothing there);
 *   - dlpack_lua_check_stream names the argument's absolute place;
 *   - dlpack.save past the file size limit raises, and a SIGXFSZ handler of the host's still runs.
 *   make build/host-hostile && ./build/host-hostile
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "dlpack_lua.h"
#include "tap.h"

static lua_State *new_state(int open_module) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  if (open_module) {
    luaL_requiref(L, "dlpack", luaopen_dlpack, 1);
    lua_pop(L, 1);
  }
  return L;
}

/* A producer's float32 {2, 3} tensor over static memory, counting its deleter's calls. */
static float cells[6] = {1, 2, 3, 4, 5, 6};
static int64_t shape23[2] = {2, 3};
static int deletes;
static void count_delete(DLManagedTensorVersioned *self) {
  (void)self;
  deletes++;
}
static DLManagedTensorVersioned producer(uint64_t flags) {
  DLManagedTensorVersioned m;
  memset(&m, 0, sizeof m);
  m.version.major = DLPACK_MAJOR_VERSION;
  m.version.minor = DLPACK_MINOR_VERSION;
  m.deleter = count_delete;
  m.flags = flags;
  m.dl_tensor.data = cells;
  m.dl_tensor.device.device_type = kDLCPU;
  m.dl_tensor.ndim = 2;
  m.dl_tensor.dtype.code = kDLFloat;
  m.dl_tensor.dtype.bits = 32;
  m.dl_tensor.dtype.lanes = 1;
  m.dl_tensor.shape = shape23;
  return m;
}

static volatile sig_atomic_t xfsz_count;
static void count_xfsz(int sig) {
  (void)sig;
  xfsz_count++;
}

/* Each call below runs in lua_pcall: the action picked by name, its error message kept. */
static const char *action;
static DLManagedTensorVersioned *pending;
static int64_t big_shape[100], big_strides[100];

static int act(lua_State *L) {
  if (!strcmp(action, "push_versioned NULL")) dlpack_lua_push_versioned(L, NULL);
  else if (!strcmp(action, "push_legacy NULL")) dlpack_lua_push_legacy(L, NULL);
  else if (!strcmp(action, "push")) dlpack_lua_push_versioned(L, pending);
  else if (!strcmp(action, "check_stream")) {
    lua_pushinteger(L, 1);
    lua_pushnil(L);
    dlpack_lua_check_stream(L, -1);
  } else {
    /* the module's own export of zeros({2, 3}), edited as the action says, pushed back */
    if (luaL_dostring(L, "return require('dlpack').zeros({2, 3}, 'float32')") != LUA_OK) return lua_error(L);
    if (!strcmp(action, "legacy NULL strides")) {
      DLManagedTensor *m = dlpack_lua_export_legacy(L, -1);
      m->dl_tensor.strides = NULL;
      dlpack_lua_push_legacy(L, m);
      return 1;
    }
    DLManagedTensorVersioned *m = dlpack_lua_export_versioned(L, -1);
    if (!strcmp(action, "ndim 100")) {
      for (int i = 0; i < 100; i++) big_shape[i] = 1, big_strides[i] = 0x4141414141414141LL;
      m->dl_tensor.ndim = 100;
      m->dl_tensor.shape = big_shape;
      m->dl_tensor.strides = big_strides;
    } else if (!strcmp(action, "negative size")) {
      m->dl_tensor.shape[0] = -2;
    } else if (!strcmp(action, "first row")) {
      m->dl_tensor.shape[0] = 1;
    } else {
      m->dl_tensor.strides = NULL;
    }
    dlpack_lua_push_versioned(L, m);
  }
  return 1;
}

/* Runs action in L; returns its error message (static), or NULL when it returned. */
static const char *attempt(lua_State *L, const char *what) {
  static char message[512];
  action = what;
  lua_pushcfunction(L, act);
  if (lua_pcall(L, 0, 1, 0) == LUA_OK) return NULL;
  snprintf(message, sizeof message, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "(no message)");
  lua_pop(L, 1);
  printf("# %s: %s\n", what, message);
  return message;
}

/* The tensor on top: its shape and strides as "{2, 3} {3, 1}" through the module's own methods. */
static int layout_is(lua_State *L, const char *want) {
  lua_setglobal(L, "t");
  if (luaL_dostring(L, "local s, d = t:size(), t:stride()\n"
                       "return string.format('{%d, %d} {%d, %d} %s', s[1], s[2], d[1], d[2], t.dtype)") != LUA_OK)
    return 0;
  int same = strcmp(lua_tostring(L, -1), want) == 0;
  if (!same) printf("# layout %s, expected %s\n", lua_tostring(L, -1), want);
  lua_pop(L, 1);
  return same;
}

int main(void) {
  lua_State *L = new_state(1);
  const char *e;

  e = attempt(L, "push_versioned NULL");
  check(e && strstr(e, "dlpack_lua_push_versioned: the managed tensor is NULL"), "push_versioned(L, NULL) raises");
  e = attempt(L, "push_legacy NULL");
  check(e && strstr(e, "dlpack_lua_push_legacy: the managed tensor is NULL"), "push_legacy(L, NULL) raises");
  check(dlpack_lua_capsule_new(NULL, 1) == NULL && dlpack_lua_capsule_new(NULL, 0) == NULL,
        "capsule_new(NULL) makes no capsule");

  {
    lua_State *bare = new_state(0);
    DLManagedTensorVersioned m = producer(0);
    deletes = 0;
    pending = &m;
    e = attempt(bare, "push");
    check(e && strstr(e, "the dlpack module is not open in this lua_State") && deletes == 1,
          "a push into a lua_State without the module raises, and the deleter ran once");
    lua_close(bare);
    check(deletes == 1, "... and not again at lua_close");
  }

  {
    DLManagedTensorVersioned m = producer(0);
    void *capsule = dlpack_lua_capsule_new(&m, 1);
    check(capsule && dlpack_lua_capsule_consume(capsule, NULL, NULL) == DLPACK_LUA_OK,
          "capsule_consume with NULL out parameters consumes");
    check(dlpack_lua_capsule_consume(capsule, NULL, NULL) == DLPACK_LUA_CONSUMED, "... once");
  }

  e = attempt(L, "ndim 100");
  check(e && strstr(e, "ndim 100 is out of range"), "an own export edited to ndim 100 and pushed back is refused");
  e = attempt(L, "negative size");
  check(e && strstr(e, "shape[1] is negative"), "an own export edited to a negative size is refused");
  e = attempt(L, "first row");
  check(!e && layout_is(L, "{1, 3} {3, 1} float32"), "an own export edited to a view of its first row comes back so");
  e = attempt(L, "versioned NULL strides");
  check(!e && layout_is(L, "{2, 3} {3, 1} float32"), "an own export given NULL strides comes back row-major");
  e = attempt(L, "legacy NULL strides");
  check(!e && layout_is(L, "{2, 3} {3, 1} float32"), "... also a legacy one");

  {
    static DLManagedTensorVersioned m; /* the tensor's: it lives until lua_close */
    m = producer(DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED);
    deletes = 0;
    pending = &m;
    e = attempt(L, "push");
    int legacy_ok = 0;
    if (!e) {
      DLManagedTensor *out = dlpack_lua_export_legacy(L, -1);
      legacy_ok = out && out->dl_tensor.dtype.bits == 32;
      if (out) out->deleter(out);
      lua_pop(L, 1);
    }
    check(legacy_ok, "the padded flag on float32 is ignored: the tensor exports as legacy");
  }

  e = attempt(L, "check_stream");
  check(e && strstr(e, "bad argument #2") && strstr(e, "dlpack.cuda.Stream"),
        "check_stream(L, -1) names argument #2");

  {
    struct sigaction on_xfsz, before;
    struct rlimit limit, saved;
    char path[64], chunk[160];
    memset(&on_xfsz, 0, sizeof on_xfsz);
    on_xfsz.sa_handler = count_xfsz;
    sigemptyset(&on_xfsz.sa_mask);
    snprintf(path, sizeof path, "/tmp/dlpack-host-hostile-%ld.npy", (long)getpid());
    snprintf(chunk, sizeof chunk, "return select(2, pcall(require('dlpack').save, '%s', "
                                  "require('dlpack').zeros({1000000}, 'uint8')))", path);
    getrlimit(RLIMIT_FSIZE, &saved);
    limit = saved;
    limit.rlim_cur = 65536;
    xfsz_count = 0;
    sigaction(SIGXFSZ, &on_xfsz, &before);
    setrlimit(RLIMIT_FSIZE, &limit);
    int ran = luaL_dostring(L, chunk) == LUA_OK;
    setrlimit(RLIMIT_FSIZE, &saved);
    sigaction(SIGXFSZ, &before, NULL);
    const char *why = ran ? lua_tostring(L, -1) : NULL;
    check(why && strstr(why, "File too large") && xfsz_count == 1,
          "save past ulimit -f raises 'File too large', and the host's SIGXFSZ handler ran once");
    if (why) printf("# %s (handler ran %d times)\n", why, (int)xfsz_count);
    lua_settop(L, 0);
    remove(path);
    }

  lua_close(L);
  check(deletes == 1, "the padded producer's deleter ran once, at lua_close");
  return done_testing();
}
