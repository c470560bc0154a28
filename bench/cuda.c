/*
 * bench/cuda.c: the CUDA part of `make bench` (build/bench_cuda, run by bench/run.lua).
 *
 * Embeds Lua and the static dlpack library and measures, in one run:
 *   - host->device and device->host copy bandwidth from pinned memory through the
 *     module (t:copy(src, {stream = s}) then s:synchronize()) as a ratio to plain
 *     cuMemcpyHtoDAsync / cuMemcpyDtoHAsync on the same buffers and stream (goal >= 0.9);
 *   - the cost of a CUDA exchange with a stream wait: to_dlpack(t, {stream = C}) +
 *     from_dlpack, where t's pending work is on another stream P, so each export
 *     records an event on P and makes C wait for it (goal <= 10 us);
 *   - the rows of bench/cuda_rows.lua (matmul 8192^3 float32 and bfloat16, add and exp of
 *     256M float32 with out=, float32 -> float16, a transposed copy, a 1080p frame
 *     normalised, a 3-element add per call): each one's time and throughput alone, as the
 *     module gives them; bench/cuda_torch.py times the same rows against PyTorch in one
 *     process (rows the module cannot do on CUDA tensors yet print as skipped, with why).
 * The baseline calls the driver directly: libcuda.so.1 is opened with dlopen, as the
 * module does, so this builds and runs (and skips) on machines without CUDA.
 * Without a usable GPU it prints why it skips and exits 0.
 *
 *   cc -std=c11 -O2 -I/usr/include/lua5.4 -Isrc -o build/bench_cuda bench/cuda.c \
 *      build/libdlpack_lua.a -llua5.4 -ldl -lm -pthread
 * Environment: DLPACK_BENCH_MIB (copy size, default 256), DLPACK_BENCH_CUDA_SCALE (divides the
 * sides of bench/cuda_rows.lua's inputs, default 1).
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "dlpack_lua.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUstream;

static struct {
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuDeviceGet)(int *, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, int);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuMemcpyHtoDAsync_v2)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync_v2)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
} cu;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void skip(const char *why) {
  printf("cuda: skipped (%s)\n", why);
  exit(0);
}

static void check(CUresult rc, const char *what) {
  if (rc != 0) {
    fprintf(stderr, "bench_cuda: %s failed with CUDA error %d\n", what, rc);
    exit(1);
  }
}

static void lua_check(lua_State *L, int rc) {
  if (rc != LUA_OK) {
    fprintf(stderr, "bench_cuda: %s\n", lua_tostring(L, -1));
    exit(1);
  }
}

/* Set up in Lua: pinned H, device D (n bytes each), streams S, P, C, and the
 * functions the timings call. */
static const char SETUP[] =
    "local n = ...\n"
    "S, P, C = dlpack.cuda.Stream{}, dlpack.cuda.Stream{}, dlpack.cuda.Stream{}\n"
    "H = dlpack.empty({n}, 'uint8', 'cuda_host'):fill(1)\n"
    "D = dlpack.zeros({n}, 'uint8', 'cuda:0')\n"
    "T = dlpack.zeros({1024}, 'float32', 'cuda:0')\n"
    "local small = dlpack.zeros({1024}, 'float32', 'cuda_host')\n"
    "function h2d(reps) for _ = 1, reps do D:copy(H, {stream = S}) end S:synchronize() end\n"
    "function d2h(reps) for _ = 1, reps do H:copy(D, {stream = S}) end S:synchronize() end\n"
    "local to, from = dlpack.to_dlpack, dlpack.from_dlpack\n"
    "local wait, nowait = {stream = C}, {stream = -1}\n"
    "function exchange(reps)\n"
    "  T:copy(small, {stream = P}) -- T's pending work is on P: each export makes C wait\n"
    "  for _ = 1, reps do local _ = from(to(T, wait)) end\n"
    "end\n"
    "function exchange_nowait(reps) for _ = 1, reps do local _ = from(to(T, nowait)) end end\n"
    "local cpu = dlpack.zeros({1024}, 'float32')\n"
    "function exchange_cpu(reps) for _ = 1, reps do local _ = from(to(cpu)) end end\n"
    "function finish() P:synchronize() C:synchronize() S:synchronize() end\n"
    "return H:data_ptr(), D:data_ptr(), S.handle\n";

/* Best time of 5 runs of the Lua global function `fn`(reps). */
static double time_lua(lua_State *L, const char *fn, int reps) {
  double best = 1e30;
  for (int i = 0; i < 5; i++) {
    lua_getglobal(L, fn);
    lua_pushinteger(L, reps);
    double t0 = now();
    lua_check(L, lua_pcall(L, 1, 0, 0));
    double dt = now() - t0;
    if (dt < best) best = dt;
  }
  return best;
}

static double time_driver(int h2d, void *host, CUdeviceptr dev, size_t n, CUstream s, int reps) {
  double best = 1e30;
  for (int i = 0; i < 5; i++) {
    double t0 = now();
    for (int r = 0; r < reps; r++) {
      if (h2d) check(cu.cuMemcpyHtoDAsync_v2(dev, host, n, s), "cuMemcpyHtoDAsync");
      else check(cu.cuMemcpyDtoHAsync_v2(host, dev, n, s), "cuMemcpyDtoHAsync");
    }
    check(cu.cuStreamSynchronize(s), "cuStreamSynchronize");
    double dt = now() - t0;
    if (dt < best) best = dt;
  }
  return best;
}

/* Seconds of one call of the function at the top of the stack with `reps` (left there). */
static double time_call(lua_State *L, int reps, const char **error) {
  lua_pushvalue(L, -1);
  lua_pushinteger(L, reps);
  double t0 = now();
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    *error = lua_tostring(L, -1);
    return -1;
  }
  return now() - t0;
}

/* bench/cuda_rows.lua's rows, each alone: best of 5 batches of about 0.1 s. */
static void shared_rows(lua_State *L) {
  if (luaL_dofile(L, "bench/cuda_rows.lua") != LUA_OK) {
    printf("cuda: the rows of bench/cuda_rows.lua skipped (%s)\n", lua_tostring(L, -1));
    lua_settop(L, 0);
    return;
  }
  int rows = lua_gettop(L), n = (int)luaL_len(L, rows);
  lua_getfield(L, rows, "route");
  printf("cuda: the rows bench/cuda_torch.py times against PyTorch (here the module alone, best of 5); %s\n",
         lua_tostring(L, -1));
  lua_pop(L, 1);
  for (int i = 1; i <= n; i++) {
    const char *error = NULL;
    lua_rawgeti(L, rows, i);
    int row = lua_gettop(L);
    lua_getfield(L, row, "name");
    lua_getfield(L, row, "unit");
    lua_getfield(L, row, "work");
    const char *name = lua_tostring(L, row + 1), *unit = lua_tostring(L, row + 2);
    double work = lua_tonumber(L, row + 3);
    lua_getfield(L, row, "prepare");
    if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
      printf("%-58s skipped: %s\n", name, lua_tostring(L, -1));
    } else {
      lua_getfield(L, row, "run");
      double t = time_call(L, 1, &error), best = 1e30;
      int reps = 1;
      if (t > 0 && t < 0.1) reps = (int)(0.1 / t) + 1;
      for (int k = 0; k < 5 && !error; k++) {
        double dt = time_call(L, reps, &error) / reps;
        if (dt < best) best = dt;
      }
      if (error) {
        printf("%-58s failed: %s\n", name, error);
      } else if (strcmp(unit, "FLOP") == 0) {
        printf("%-58s %10.3f ms  %8.1f TFLOP/s\n", name, best * 1e3, work / best / 1e12);
      } else if (strcmp(unit, "B") == 0) {
        printf("%-58s %10.3f ms  %8.1f GB/s\n", name, best * 1e3, work / best / 1e9);
      } else {
        printf("%-58s %10.2f us a call\n", name, best * 1e6);
      }
    }
    lua_settop(L, row);
    lua_getfield(L, row, "release");
    lua_pcall(L, 0, 0, 0);
    lua_settop(L, rows);
  }
  lua_settop(L, 0);
}

int main(void) {
  const char *name = getenv("DLPACK_LUA_CUDA_DRIVER");
  void *lib = dlopen(name ? name : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  static char why[512];
  if (lib == NULL) {
    snprintf(why, sizeof why, "no CUDA driver: %s", dlerror());
    skip(why);
  }
#define LOAD(f)                                                     \
  if ((*(void **)&cu.f = dlsym(lib, #f)) == NULL) {                 \
    snprintf(why, sizeof why, "the CUDA driver lacks %s", #f);      \
    skip(why);                                                      \
  }
  LOAD(cuInit) LOAD(cuDeviceGet) LOAD(cuDevicePrimaryCtxRetain) LOAD(cuCtxSetCurrent)
  LOAD(cuMemcpyHtoDAsync_v2) LOAD(cuMemcpyDtoHAsync_v2) LOAD(cuStreamSynchronize)
#undef LOAD

  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  luaL_requiref(L, "dlpack", luaopen_dlpack, 1);
  lua_getfield(L, -1, "cuda");
  lua_getfield(L, -1, "is_available");
  lua_check(L, lua_pcall(L, 0, 2, 0));
  if (!lua_toboolean(L, -2)) {
    snprintf(why, sizeof why, "dlpack.cuda.is_available() is false: %s", lua_tostring(L, -1));
    skip(why);
  }
  lua_settop(L, 0);

  const char *mib = getenv("DLPACK_BENCH_MIB");
  size_t n = (size_t)(mib ? atol(mib) : 256) << 20;
  int reps = 8;
  lua_check(L, luaL_loadstring(L, SETUP));
  lua_pushinteger(L, (lua_Integer)n);
  lua_check(L, lua_pcall(L, 1, 3, 0));
  void *host = lua_touserdata(L, 1);
  CUdeviceptr dev = (CUdeviceptr)(uintptr_t)lua_touserdata(L, 2);
  CUstream s = (CUstream)(uintptr_t)lua_tointeger(L, 3);
  lua_settop(L, 0);

  int device;
  CUcontext ctx;
  check(cu.cuInit(0), "cuInit");
  check(cu.cuDeviceGet(&device, 0), "cuDeviceGet");
  check(cu.cuDevicePrimaryCtxRetain(&ctx, device), "cuDevicePrimaryCtxRetain");

  double gb = (double)n * reps / 1e9;
  printf("cuda: %zu MiB pinned <-> cuda:0, %d copies a run, best of 5\n", n >> 20, reps);
  for (int h2d = 1; h2d >= 0; h2d--) {
    time_lua(L, h2d ? "h2d" : "d2h", 1); /* warm up */
    check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    double base = time_driver(h2d, host, dev, n, s, reps);
    double mod = time_lua(L, h2d ? "h2d" : "d2h", reps);
    check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    double base2 = time_driver(h2d, host, dev, n, s, reps);
    if (base2 < base) base = base2;
    printf("%-44s %8.2f GB/s  %6.3fx %s (%.2f GB/s; goal >= 0.9)\n",
           h2d ? "copy host->device (t:copy, stream)" : "copy device->host (t:copy, stream)", gb / mod, base / mod,
           h2d ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync", gb / base);
  }

  int ex = 20000;
  time_lua(L, "exchange", 1000);
  double wait = time_lua(L, "exchange", ex) / ex;
  double nowait = time_lua(L, "exchange_nowait", ex) / ex;
  double cpu = time_lua(L, "exchange_cpu", ex) / ex;
  lua_getglobal(L, "finish");
  lua_check(L, lua_pcall(L, 0, 0, 0));
  printf("%-44s %8.2f us   (goal <= 10 us)\n", "to_dlpack{stream = C} + from_dlpack (wait)", wait * 1e6);
  printf("%-44s %8.2f us\n", "to_dlpack{stream = -1} + from_dlpack", nowait * 1e6);
  printf("%-44s %8.2f us\n", "to_dlpack + from_dlpack of a CPU tensor", cpu * 1e6);
  lua_settop(L, 0);
  shared_rows(L);
  lua_close(L);
  return 0;
}
