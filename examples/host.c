/*
 * examples/host.c: a C host (a game or robotics engine, say) that embeds Lua
 * and the dlpack module, and shares its own memory with scripts, zero copy.
 *
 *   make build/host && ./build/host        (prints TAP; exit status 1 on failure)
 *
 * 1. The host owns a camera frame (uint8 {480, 640, 3}). It lends it to a Lua
 *    script as a tensor, without copying: the script reads pixels, draws a red
 *    box into the host's buffer and returns a new float32 image it made.
 * 2. The host borrows that image (dlpack_lua_check_tensor), exports it as a
 *    DLManagedTensorVersioned it owns, closes Lua, reads the image and calls its
 *    deleter from another thread.
 * 3. A capsule made in one lua_State is consumed in another one.
 * Also: the host's CUDA stream handed to scripts as a dlpack.cuda.Stream.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "dlpack_lua.h"

enum { H = 480, W = 640, C = 3 };

/* ---- TAP ---------------------------------------------------------------- */

#define PLAN 19
static int tests_run, tests_failed;

static void check(int ok, const char *what) {
  ++tests_run;
  if (!ok) ++tests_failed;
  printf("%sok %d - %s\n", ok ? "" : "not ", tests_run, what);
}

/* Run a Lua chunk with nargs arguments already pushed; abort the test on error. */
static void run(lua_State *L, const char *code, int nargs, int nresults) {
  if (luaL_loadstring(L, code) != LUA_OK) {
    printf("Bail out! %s\n", lua_tostring(L, -1));
    exit(1);
  }
  lua_insert(L, -nargs - 1); /* the chunk goes below its arguments */
  if (lua_pcall(L, nargs, nresults, 0) != LUA_OK) {
    printf("Bail out! %s\n", lua_tostring(L, -1));
    exit(1);
  }
}

/* ---- Host memory lent to Lua ---------------------------------------------- */

/* One allocation holds the managed tensor, its shape and strides. The pixels
 * stay the host's: the deleter only says "dlpack no longer uses them". */
typedef struct {
  DLManagedTensorVersioned managed; /* first, so the deleter gets this struct */
  int64_t shape[3], strides[3];
} host_tensor;

static atomic_int frame_deletes, telemetry_deletes;

static void count_and_free(DLManagedTensorVersioned *self) {
  atomic_fetch_add((atomic_int *)self->manager_ctx, 1); /* may run on any thread */
  free(self);
}

static DLManagedTensorVersioned *lend(void *data, DLDataType dtype, int ndim,
                                      const int64_t *shape, atomic_int *counter) {
  host_tensor *h = calloc(1, sizeof *h);
  if (h == NULL) abort();
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; d--) { /* row-major */
    h->shape[d] = shape[d];
    h->strides[d] = stride;
    stride *= shape[d];
  }
  h->managed.version.major = DLPACK_MAJOR_VERSION;
  h->managed.version.minor = DLPACK_MINOR_VERSION;
  h->managed.manager_ctx = counter;
  h->managed.deleter = count_and_free;
  h->managed.dl_tensor.data = data;
  h->managed.dl_tensor.device.device_type = kDLCPU;
  h->managed.dl_tensor.ndim = ndim;
  h->managed.dl_tensor.dtype = dtype;
  h->managed.dl_tensor.shape = h->shape;
  h->managed.dl_tensor.strides = h->strides;
  return &h->managed;
}

/* The test pattern of the fake camera. */
static uint8_t pattern(int y, int x, int c) {
  return (uint8_t)(c == 0 ? x : c == 1 ? y : x + 2 * y);
}

/* ---- The script --------------------------------------------------------- */

static const char *const frame_script =
    "local frame = ...   -- uint8 {480, 640, 3}: the host's pixels, not a copy\n"
    "assert(frame.dtype == 'uint8' and frame.ndim == 3 and not frame.readonly)\n"
    "-- Read: mean brightness of rows 101..140, columns 201..240 (a view).\n"
    "local region = frame:narrow(1, 101, 40):narrow(2, 201, 40)\n"
    "local sum = 0\n"
    "for y = 1, 40 do for x = 1, 40 do for c = 1, 3 do\n"
    "  sum = sum + region:get(y, x, c)\n"
    "end end end\n"
    "-- Write: a red box, 2 pixels wide, around that region, into the host's buffer.\n"
    "local function paint(v)\n"
    "  v:select(3, 1):fill(255); v:select(3, 2):fill(0); v:select(3, 3):fill(0)\n"
    "end\n"
    "local top, left, h, w = 99, 199, 44, 44\n"
    "paint(frame:narrow(1, top, 2):narrow(2, left, w))\n"
    "paint(frame:narrow(1, top + h - 2, 2):narrow(2, left, w))\n"
    "paint(frame:narrow(1, top, h):narrow(2, left, 2))\n"
    "paint(frame:narrow(1, top, h):narrow(2, left + w - 2, 2))\n"
    "-- Make: a float32 {480, 640} image (the green channel, a cheap luminance);\n"
    "-- select gives a strided view, to() copies and converts it.\n"
    "local gray = frame:select(3, 2):to('float32')\n"
    "return gray, sum / (40 * 40 * 3), frame:data_ptr()\n";

static void *delete_on_thread(void *managed) {
  DLManagedTensorVersioned *m = managed;
  m->deleter(m);
  return NULL;
}

int main(void) {
  printf("1..%d\n", PLAN);
  static const DLDataType u8 = {kDLUInt, 8, 1}, f32 = {kDLFloat, 32, 1};

  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  luaL_requiref(L, "dlpack", luaopen_dlpack, 1); /* also sets the global `dlpack` */
  lua_pop(L, 1);

  /* C modules loaded with require (which cannot link us) find the same
   * functions in the registry. */
  const dlpack_lua_api *api = dlpack_lua_get_api(L);
  check(api != NULL && api->version >= 1, "dlpack_lua_get_api gives a table of version >= 1");
  lua_pushinteger(L, 42);
  check(api != NULL && api->test_tensor(L, -1, NULL) == NULL, "api->test_tensor gives NULL for a non-tensor");
  lua_pop(L, 1);

  /* The host's own CUDA stream (a cudaStream_t; any handle works without a GPU) becomes a
   * dlpack.cuda.Stream that scripts pass as opts.stream, and comes back as the same handle. */
  void *engine_stream = (void *)(uintptr_t)0x5eed;
  dlpack_lua_push_stream(L, engine_stream, 0);
  lua_getfield(L, -1, "handle");
  check(lua_tointeger(L, -1) == 0x5eed && dlpack_lua_check_stream(L, -2) == engine_stream,
        "a host stream wrapped with dlpack_lua_push_stream keeps its handle (s.handle, dlpack_lua_check_stream)");
  lua_pop(L, 2);
  check(api->version >= 2 && api->check_stream != NULL && api->push_stream != NULL,
        "the registry table (version >= 2) has the stream functions");

  /* 1. Lend the camera frame. */
  uint8_t *pixels = malloc((size_t)H * W * C);
  if (pixels == NULL) abort();
  double expected_mean = 0;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      for (int c = 0; c < C; c++) {
        pixels[((size_t)y * W + x) * C + c] = pattern(y, x, c);
        if (y >= 100 && y < 140 && x >= 200 && x < 240) expected_mean += pattern(y, x, c);
      }
  expected_mean /= 40 * 40 * 3;

  /* Push takes ownership of the managed tensor. From now on the script may keep
   * it as long as it likes; the host learns through the deleter when it is done.
   * Push raises (after calling the deleter) only for a malformed tensor; outside
   * lua_pcall that would be a panic, so a host lending tensors it did not build
   * itself pushes them from a C function called with lua_pcall. */
  dlpack_lua_push_versioned(L, lend(pixels, u8, 3, (const int64_t[]){H, W, C}, &frame_deletes));
  run(L, frame_script, 1, 3);

  check(lua_touserdata(L, -1) == pixels, "the script saw the host's buffer itself (same data_ptr)");
  check(lua_tonumber(L, -2) == expected_mean, "the script read the region's brightness through views");
  int changed = 0, red = 0;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) {
      const uint8_t *p = &pixels[((size_t)y * W + x) * C];
      if (p[0] != pattern(y, x, 0) || p[1] != pattern(y, x, 1) || p[2] != pattern(y, x, 2)) {
        changed++;
        red += p[0] == 255 && p[1] == 0 && p[2] == 0;
      }
    }
  check(changed == 44 * 44 - 40 * 40 && red == changed,
        "the script drew a red box in place: 336 pixels changed, all red");

  /* 2. Borrow the image the script made, then export it. */
  uint64_t flags = 1;
  const DLTensor *gray = dlpack_lua_check_tensor(L, -3, &flags);
  check(gray->ndim == 2 && gray->shape[0] == H && gray->shape[1] == W && gray->dtype.code == f32.code &&
            gray->dtype.bits == 32 && gray->strides[0] == W && gray->strides[1] == 1 && flags == 0,
        "dlpack_lua_check_tensor borrows a contiguous, writable float32 {480, 640}");

  DLManagedTensorVersioned *exported = dlpack_lua_export_versioned(L, -3);
  const float *image = (const float *)((const char *)exported->dl_tensor.data + exported->dl_tensor.byte_offset);
  check(exported->version.major == 1 && image == (const float *)((const char *)gray->data + gray->byte_offset) &&
            (exported->flags & DLPACK_FLAG_BITMASK_READ_ONLY) == 0,
        "dlpack_lua_export_versioned shares the memory (no copy), writable");

  lua_close(L); /* every Lua tensor is gone, and the script's hold on the frame */
  check(atomic_load(&frame_deletes) == 1, "the frame's deleter ran exactly once, by lua_close");

  int same = 1;
  const int64_t *st = exported->dl_tensor.strides;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      same &= image[y * st[0] + x * st[1]] == (float)pixels[((size_t)y * W + x) * C + 1];
  check(same, "the exported image is readable after lua_close and holds the green channel");

  pthread_t thread;
  int joined = pthread_create(&thread, NULL, delete_on_thread, exported) == 0 && pthread_join(thread, NULL) == 0;
  check(joined, "the exported image's deleter ran on another thread");
  free(pixels);

  /* 3. Capsules are not tied to a lua_State: make one in A, consume it in B. */
  float telemetry[4] = {1, 2, 3, 4};
  lua_State *A = luaL_newstate(), *B = luaL_newstate();
  luaL_openlibs(A);
  luaL_openlibs(B);
  luaL_requiref(A, "dlpack", luaopen_dlpack, 1);
  luaL_requiref(B, "dlpack", luaopen_dlpack, 1);
  lua_pop(A, 1);
  lua_pop(B, 1);

  dlpack_lua_push_versioned(A, lend(telemetry, f32, 1, (const int64_t[]){4}, &telemetry_deletes));
  run(A, "local t = ...; local cap = dlpack.to_dlpack(t); t:release(); return cap", 1, 1);
  void *capsule = lua_touserdata(A, -1); /* a light userdata: any state or thread may take it */
  lua_pop(A, 1);

  lua_pushlightuserdata(B, capsule);
  run(B, "held = dlpack.from_dlpack(...); held[1] = 42; return held:data_ptr()", 1, 1);
  check(lua_touserdata(B, -1) == telemetry && telemetry[0] == 42.0f,
        "state B consumed A's capsule: it writes the host's buffer");
  lua_pop(B, 1);

  lua_pushlightuserdata(A, capsule);
  run(A, "local cap = ...; local ok, err = pcall(dlpack.from_dlpack, cap)\n"
         "return not ok and tostring(err):find('consumed', 1, true) ~= nil, dlpack.capsule_info(cap).consumed",
      1, 2);
  check(lua_toboolean(A, -2), "consuming it again in state A raises an error containing 'consumed'");
  check(lua_toboolean(A, -1), "capsule_info in state A says consumed");
  lua_pop(A, 2);

  /* The same consume-once rule holds in C. */
  void *managed = NULL;
  int versioned = 0;
  check(dlpack_lua_capsule_consume(capsule, &managed, &versioned) == DLPACK_LUA_CONSUMED,
        "dlpack_lua_capsule_consume says DLPACK_LUA_CONSUMED too");

  lua_close(A);
  check(atomic_load(&telemetry_deletes) == 0, "closing A leaves B's tensor alive (deleter not run)");
  lua_close(B);
  check(atomic_load(&telemetry_deletes) == 1, "closing B runs the telemetry deleter exactly once");
  check(atomic_load(&frame_deletes) == 1, "the frame's deleter still ran exactly once");

  if (tests_run != PLAN) printf("# ran %d tests, planned %d\n", tests_run, PLAN);
  return tests_failed == 0 && tests_run == PLAN ? 0 : 1;
}
