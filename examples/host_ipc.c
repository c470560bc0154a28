/*
 * examples/host_ipc.c: a C host that has its own sockets and shared memory, and hands them to
 * Lua scripts through dlpack.ipc's C API (docs/ipc.md, docs/c-api.md).
 *
 *   make build/host-ipc && ./build/host-ipc        (prints TAP; exit status 1 on failure)
 *
 * 1. The host made a socket pair (an engine's own connection to another process, say) and gives
 *    one end to a script in state A and the other to a script in state B: a tensor A sends
 *    arrives in B on the same memory (dlpack_lua_push_channel).
 * 2. The host has a sealed memfd of its own (a camera driver's frame) and lends it to a script as
 *    a tensor (dlpack_lua_push_shared); it gets the memfd of a script's shareable tensor back
 *    (dlpack_lua_shared_fd) and maps it itself.
 * 3. Descriptors that are not what the functions need are refused and closed.
 */
#define _GNU_SOURCE /* memfd_create, F_ADD_SEALS */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "dlpack_lua.h"

#define PLAN 14
static int tests_run, tests_failed;

static void check(int ok, const char *what) {
  ++tests_run;
  if (!ok) ++tests_failed;
  printf("%sok %d - %s\n", ok ? "" : "not ", tests_run, what);
}

/* Run a chunk with nargs arguments already pushed; abort on error. */
static void run(lua_State *L, const char *code, int nargs, int nresults) {
  if (luaL_loadstring(L, code) != LUA_OK) {
    printf("Bail out! %s\n", lua_tostring(L, -1));
    exit(1);
  }
  lua_insert(L, -nargs - 1);
  if (lua_pcall(L, nargs, nresults, 0) != LUA_OK) {
    printf("Bail out! %s\n", lua_tostring(L, -1));
    exit(1);
  }
}

static lua_State *new_state(void) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  luaL_requiref(L, "dlpack", luaopen_dlpack, 1);
  lua_pop(L, 1);
  luaL_requiref(L, "dlpack.ipc", dlpack_lua_open_ipc, 0); /* scripts need ipc.empty; the channel alone would not */
  lua_pop(L, 1);
  return L;
}

static int push_channel(lua_State *L) {
  dlpack_lua_push_channel(L, (int)lua_tointeger(L, 1));
  return 1;
}

static int push_shared(lua_State *L) {
  dlpack_lua_push_shared(L, (int)lua_tointeger(L, 1), lua_touserdata(L, 2), 0);
  return 1;
}

static int push_shared_padded(lua_State *L) {
  dlpack_lua_push_shared(L, (int)lua_tointeger(L, 1), lua_touserdata(L, 2), DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED);
  return 1;
}

/* Call a C API function that raises, protected; the error message, or NULL when it did not raise. */
static const char *protected(lua_State *L, lua_CFunction f, int fd, const DLTensor *layout) {
  lua_pushcfunction(L, f);
  lua_pushinteger(L, fd);
  lua_pushlightuserdata(L, (void *)layout);
  if (lua_pcall(L, 2, 1, 0) == LUA_OK) {
    lua_pop(L, 1);
    return NULL;
  }
  static char msg[512];
  snprintf(msg, sizeof msg, "%s", lua_tostring(L, -1));
  lua_pop(L, 1);
  return msg;
}

/* How many descriptors this process has open. */
static int open_descriptors(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) abort();
  while (readdir(d)) n++;
  closedir(d);
  return n;
}

static int is_closed(int fd) {
  return fcntl(fd, F_GETFD) < 0 && errno == EBADF;
}

int main(void) {
  printf("1..%d\n", PLAN);
  lua_State *A = new_state(), *B = new_state();

  /* 1. The host's socket pair, one end to each script. */
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) abort();
  dlpack_lua_push_channel(A, pair[0]);
  dlpack_lua_push_channel(B, pair[1]);
  run(A, "local ch = ...; sent = require('dlpack.ipc').zeros({2, 3}, 'int32'); sent[2][3] = 7; ch:send(sent)\n"
         "channel = ch", 1, 0);
  run(B, "local ch = ...; got = ch:recv(5); got[1][1] = 11; return got[2][3], got.shareable", 1, 2);
  check(lua_tointeger(B, -2) == 7 && lua_toboolean(B, -1), "a tensor sent on one end arrives at the other");
  lua_pop(B, 2);
  run(A, "return sent[1][1]", 0, 1);
  check(lua_tointeger(A, -1) == 11, "on the same memory: what B wrote, A reads");
  lua_pop(A, 1);

  /* 2. The host's own memfd, lent as a tensor. */
  int frame = memfd_create("frame", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  float *pixels;
  if (frame < 0 || ftruncate(frame, 4096) != 0 || fcntl(frame, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) abort();
  pixels = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, frame, 0);
  if (pixels == MAP_FAILED) abort();
  for (int i = 0; i < 8; i++) pixels[16 + i] = (float)i;
  int64_t shape[2] = {2, 4};
  DLTensor layout = {NULL, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, NULL, 64}; /* from byte 64 on */
  dlpack_lua_push_shared(A, dup(frame), &layout, 0);
  run(A, "local t = ...; local s = t:sum(); t[1][1] = -1; return s, t.shareable", 1, 2);
  check(lua_tonumber(A, -2) == 28 && lua_toboolean(A, -1) && pixels[16] == -1,
        "dlpack_lua_push_shared lends the host's memfd: the script reads and writes it");
  lua_pop(A, 2);

  /* The memfd of a script's shareable tensor, back in the host. */
  run(A, "return sent[2]", 0, 1);
  uint64_t offset = 0;
  int fd = dlpack_lua_shared_fd(A, -1, &offset);
  int32_t *mapped = fd >= 0 ? mmap(NULL, 24, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  check(mapped != MAP_FAILED && offset == 12 && mapped[offset / 4 + 2] == 7,
        "dlpack_lua_shared_fd gives the memfd and the offset of sent[2]");
  if (mapped != MAP_FAILED) munmap(mapped, 24);
  if (fd >= 0) close(fd);
  lua_pop(A, 1);
  lua_pushinteger(A, 1);
  check(dlpack_lua_shared_fd(A, -1, NULL) == -1, "dlpack_lua_shared_fd gives -1 for what is not a shareable tensor");
  lua_pop(A, 1);

  /* 3. Wrong descriptors: refused with a clear error, and closed. */
  int unsealed = memfd_create("unsealed", MFD_CLOEXEC);
  if (unsealed < 0 || ftruncate(unsealed, 4096) != 0) abort();
  const char *err = protected(A, push_shared, unsealed, &layout);
  check(err && strstr(err, "not sealed") && is_closed(unsealed), "an unsealed memfd is refused, and closed");
  int pipes[2];
  if (pipe(pipes) != 0) abort();
  err = protected(A, push_channel, pipes[0], NULL);
  check(err && strstr(err, "SOCK_SEQPACKET") && is_closed(pipes[0]), "a pipe is no channel: refused, and closed");
  close(pipes[1]);
  int64_t too_long[1] = {2000};
  DLTensor beyond = {NULL, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, too_long, NULL, 0};
  int copy = dup(frame);
  err = protected(A, push_shared, copy, &beyond);
  check(err && strstr(err, "outside") && is_closed(copy), "a layout beyond the memfd's end is refused, and closed");
  int64_t negative[2] = {2, -4};
  DLTensor bad_shape = {NULL, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, negative, NULL, 0};
  int first = dup(frame), second = dup(frame);
  const char *negative_err = protected(A, push_shared, first, &bad_shape);
  check(negative_err && strstr(negative_err, "negative size") && is_closed(first) &&
        (err = protected(A, push_shared_padded, second, &layout)) && strstr(err, "not a sub-byte dtype") &&
        is_closed(second),
        "layouts that a message could not carry either are refused (a negative size, the sub-byte flag on float32)");

  int no_layout = dup(frame);
  err = protected(A, push_shared, no_layout, NULL);
  check(err && strstr(err, "no layout") && is_closed(no_layout), "a NULL layout is refused, and closed (it crashed)");

  /* A socket that is not connected (one that listens, one never connected) is no channel either. */
  int listening = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), loose = socket(AF_UNIX, SOCK_SEQPACKET, 0);
  struct sockaddr_un any = {AF_UNIX, {0}}; /* this length: an abstract name the kernel picks */
  if (listening < 0 || loose < 0 || bind(listening, (struct sockaddr *)&any, sizeof(sa_family_t)) != 0 ||
      listen(listening, 1) != 0)
    abort();
  const char *listening_err = protected(A, push_channel, listening, NULL);
  err = protected(A, push_channel, loose, NULL);
  check(listening_err && strstr(listening_err, "not connected") && is_closed(listening) && err &&
        strstr(err, "not connected") && is_closed(loose),
        "a listening or an unconnected socket is refused, and closed (it made a channel that failed later)");

  /* A host's socket that asks for the sender's credentials (or a pidfd) with every message: that
   * control message took the room of the descriptor (every message was lost), a pidfd leaked. */
  lua_gc(A, LUA_GCCOLLECT, 0); /* garbage tensors of the tests above hold descriptors */
  int talker[2], one = 1, before = open_descriptors();
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, talker) != 0 ||
      setsockopt(talker[1], SOL_SOCKET, SO_PASSCRED, &one, sizeof one) != 0)
    abort();
  setsockopt(talker[1], SOL_SOCKET, 76 /* SO_PASSPIDFD, Linux 6.5 */, &one, sizeof one); /* where there is one */
  dlpack_lua_push_channel(A, talker[0]);
  dlpack_lua_push_channel(A, talker[1]);
  run(A, "local a, b = ...; local ipc = require('dlpack.ipc'); local t = ipc.zeros({2}, 'int8'); t[2] = 5\n"
         "a:send(t); a:send(t); local ok1, r = pcall(b.recv, b, 5); local ok2, s = pcall(b.recv, b, 5)\n"
         "local got = ok1 and ok2 and r[2] == 5 and s[2] == 5; a:close(); b:close(); t:release()\n"
         "if ok1 then r:release() end; if ok2 then s:release() end; return got",
      2, 1);
  lua_gc(A, LUA_GCCOLLECT, 0);
  check(lua_toboolean(A, -1) && open_descriptors() == before,
        "a socket with SO_PASSCRED (and SO_PASSPIDFD) receives, and leaks no descriptor");
  lua_pop(A, 1);

  /* A state where the module is not open, though another library took the name dlpack.Tensor. */
  lua_State *C = luaL_newstate();
  luaL_newmetatable(C, DLPACK_LUA_TENSOR_MT);
  lua_pop(C, 1);
  int lent = dup(frame), end[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, end) != 0) abort();
  const char *shared_err = protected(C, push_shared, lent, &layout);
  err = protected(C, push_channel, end[0], NULL);
  check(shared_err && strstr(shared_err, "not open") && is_closed(lent) && err && strstr(err, "not open") &&
        is_closed(end[0]),
        "a state without the module is refused, whatever its registry holds (a tensor without metatable leaked)");
  close(end[1]);
  lua_close(C);

  lua_close(A);
  lua_close(B);
  check(pixels[17] == 1, "the host's memory outlives the states that used it");
  munmap(pixels, 4096);
  close(frame);
  if (tests_run != PLAN) printf("# ran %d tests, planned %d\n", tests_run, PLAN);
  return tests_failed == 0 && tests_run == PLAN ? 0 : 1;
}
