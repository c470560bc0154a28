/*
 * spec/fuzz/shim.c: preloaded into the fuzzer's process by spec/fuzz/asan.sh.
 * - dlclose does nothing: Lua unloads C modules when a state closes, and a leak's
 *   stack then names no function of theirs.
 * - The first time() of the process answers a fixed value: Lua seeds its string
 *   hashes with it (and with addresses, fixed by running without address
 *   randomisation) when the first lua_State is made, so that a seed's run, its
 *   collections included, is the same every time. Later calls tell the time.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <time.h>

int dlclose(void *handle);
int dlclose(void *handle) {
  (void)handle;
  return 0;
}

static atomic_int time_calls;

time_t time(time_t *out) {
  struct timespec now = {0, 0};
  time_t t = 1;
  if (atomic_fetch_add(&time_calls, 1) > 0) {
    clock_gettime(CLOCK_REALTIME, &now);
    t = now.tv_sec;
  }
  if (out) *out = t;
  return t;
}
