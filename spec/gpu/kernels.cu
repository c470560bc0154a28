/*
 * spec/gpu/kernels.cu: the Lua C module `gpu_kernels`, what the CUDA suite
 * (spec/cuda/suite.lua, through spec/cuda/probe.lua) and the interop test use on
 * a real GPU to put long-running and checkable work on streams the dlpack module
 * made or wrapped, and to look at CUDA memory without the module.
 *
 *   nvcc -shared -Xcompiler -fPIC -arch=sm_90 -I/usr/include/lua5.4 -Isrc \
 *        -o build/gpu/gpu_kernels.so spec/gpu/kernels.cu
 *
 * Streams are passed as integers (`s.handle` of a dlpack.cuda.Stream, or 1 / 2
 * for the legacy and per-thread default streams): the runtime's cudaStream_t is
 * the driver's CUstream. Device pointers are passed as light userdata
 * (`t:data_ptr()`) or integers. Every function that launches takes the device
 * ordinal last (default 0) and makes it current first, since a kernel must be
 * launched on the device its stream belongs to. Launch errors raise.
 *
 *   sleep(stream, ms [, device])              spin one thread for about ms milliseconds
 *   fill(ptr, n, value, stream [, device])    ptr[0..n) = value (float32)
 *   count_ne(ptr, n, value, out, stream [, device])
 *                                             *out += number of ptr[i] != value
 *                                             (out: an int32 in device, managed or pinned memory)
 *   stream_create([device]) -> handle         a foreign stream (cudaStreamCreateWithFlags, non-blocking)
 *   stream_synchronize(handle [, device])     cudaStreamSynchronize
 *   stream_destroy(handle [, device])
 *   synchronize([device])                     cudaDeviceSynchronize
 *   now() -> seconds                          a monotonic wall clock (CLOCK_MONOTONIC)
 *   write(stream, ptr, bytes, delay_ms [, device])
 *                                             a delay_ms sleep, then bytes copied to ptr, on the stream
 *                                             (device: default the one ptr belongs to)
 *   pending(stream [, device]) -> boolean     the stream has unfinished work
 *   read(ptr, n) -> string                    n bytes at ptr now, on a stream of its own (waits for no
 *                                             other stream)
 *   allocation(ptr) -> {kind =, device =}     kind "device", "host" or "managed"; nil for other memory
 *   sync_all()                                every device synchronized; write's staging memory freed
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
#include <lua.hpp>

/* Spin until the GPU's global nanosecond timer has moved ns forward. The
 * global timer does not depend on the SM clock (which boosts and throttles),
 * so the duration holds across GPUs; clock64() would need the clock rate. */
__global__ void sleep_kernel(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

__global__ void fill_kernel(float *p, long long n, float v) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    p[i] = v;
}

__global__ void count_ne_kernel(const float *p, long long n, float v, int *out) {
  int local = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    local += p[i] != v;
  if (local) atomicAdd(out, local);
}

static void check(lua_State *L, cudaError_t rc, const char *what) {
  if (rc != cudaSuccess) luaL_error(L, "gpu_kernels.%s: %s (%s)", what, cudaGetErrorString(rc), cudaGetErrorName(rc));
}

static void *opt_pointer(lua_State *L, int idx) {
  if (lua_islightuserdata(L, idx)) return lua_touserdata(L, idx);
  return (void *)(uintptr_t)luaL_checkinteger(L, idx);
}

static cudaStream_t to_stream(lua_State *L, int idx) {
  return (cudaStream_t)(uintptr_t)luaL_checkinteger(L, idx);
}

static void use_device(lua_State *L, int idx, const char *what) {
  check(L, cudaSetDevice((int)luaL_optinteger(L, idx, 0)), what);
}

static void launched(lua_State *L, const char *what) {
  check(L, cudaGetLastError(), what);
}

static int grid_for(long long n) {
  long long blocks = (n + 255) / 256;
  return (int)(blocks < 1 ? 1 : blocks > 4096 ? 4096 : blocks);
}

static int l_sleep(lua_State *L) {
  cudaStream_t s = to_stream(L, 1);
  double ms = luaL_checknumber(L, 2);
  use_device(L, 3, "sleep");
  sleep_kernel<<<1, 1, 0, s>>>((unsigned long long)(ms * 1e6));
  launched(L, "sleep");
  return 0;
}

static int l_fill(lua_State *L) {
  float *p = (float *)opt_pointer(L, 1);
  long long n = (long long)luaL_checkinteger(L, 2);
  float v = (float)luaL_checknumber(L, 3);
  cudaStream_t s = to_stream(L, 4);
  use_device(L, 5, "fill");
  if (n > 0) {
    fill_kernel<<<grid_for(n), 256, 0, s>>>(p, n, v);
    launched(L, "fill");
  }
  return 0;
}

static int l_count_ne(lua_State *L) {
  const float *p = (const float *)opt_pointer(L, 1);
  long long n = (long long)luaL_checkinteger(L, 2);
  float v = (float)luaL_checknumber(L, 3);
  int *out = (int *)opt_pointer(L, 4);
  cudaStream_t s = to_stream(L, 5);
  use_device(L, 6, "count_ne");
  if (n > 0) {
    count_ne_kernel<<<grid_for(n), 256, 0, s>>>(p, n, v, out);
    launched(L, "count_ne");
  }
  return 0;
}

static int l_stream_create(lua_State *L) {
  cudaStream_t s;
  use_device(L, 1, "stream_create");
  check(L, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream_create");
  lua_pushinteger(L, (lua_Integer)(uintptr_t)s);
  return 1;
}

static int l_stream_synchronize(lua_State *L) {
  cudaStream_t s = to_stream(L, 1);
  use_device(L, 2, "stream_synchronize");
  check(L, cudaStreamSynchronize(s), "stream_synchronize");
  return 0;
}

static int l_stream_destroy(lua_State *L) {
  cudaStream_t s = to_stream(L, 1);
  use_device(L, 2, "stream_destroy");
  check(L, cudaStreamDestroy(s), "stream_destroy");
  return 0;
}

static int l_synchronize(lua_State *L) {
  use_device(L, 1, "synchronize");
  check(L, cudaDeviceSynchronize(), "synchronize");
  return 0;
}

static int l_now(lua_State *L) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
  return 1;
}

static cudaPointerAttributes attributes_of(lua_State *L, const void *p, const char *what) {
  cudaPointerAttributes a;
  check(L, cudaPointerGetAttributes(&a, p), what);
  return a;
}

/* Pinned staging buffers of write(): freed by sync_all(), when no copy can still read them. */
static void *staging[4096];
static int staged;

static int l_write(lua_State *L) {
  cudaStream_t s = to_stream(L, 1);
  void *p = opt_pointer(L, 2);
  size_t n;
  const char *bytes = luaL_checklstring(L, 3, &n);
  double ms = luaL_checknumber(L, 4);
  int device = lua_isnoneornil(L, 5) ? attributes_of(L, p, "write").device : (int)luaL_checkinteger(L, 5);
  if (staged == (int)(sizeof staging / sizeof staging[0])) return luaL_error(L, "gpu_kernels.write: call sync_all()");
  check(L, cudaSetDevice(device), "write");
  void *host;
  check(L, cudaMallocHost(&host, n ? n : 1), "write");
  staging[staged++] = host;
  memcpy(host, bytes, n);
  sleep_kernel<<<1, 1, 0, s>>>((unsigned long long)(ms * 1e6));
  launched(L, "write");
  check(L, cudaMemcpyAsync(p, host, n, cudaMemcpyDefault, s), "write");
  return 0;
}

static int l_pending(lua_State *L) {
  cudaStream_t s = to_stream(L, 1);
  use_device(L, 2, "pending");
  cudaError_t rc = cudaStreamQuery(s);
  if (rc == cudaErrorNotReady) {
    lua_pushboolean(L, 1);
    return 1;
  }
  check(L, rc, "pending");
  lua_pushboolean(L, 0);
  return 1;
}

static int l_read(lua_State *L) {
  static cudaStream_t own[64]; /* per device: non-blocking, so it waits for no other stream */
  const void *p = opt_pointer(L, 1);
  lua_Integer n = luaL_checkinteger(L, 2);
  luaL_argcheck(L, n >= 0, 2, "negative size");
  int device = attributes_of(L, p, "read").device;
  luaL_argcheck(L, device >= 0 && device < 64, 1, "not CUDA memory");
  check(L, cudaSetDevice(device), "read");
  if (!own[device]) check(L, cudaStreamCreateWithFlags(&own[device], cudaStreamNonBlocking), "read");
  luaL_Buffer b;
  char *out = luaL_buffinitsize(L, &b, (size_t)n);
  check(L, cudaMemcpyAsync(out, p, (size_t)n, cudaMemcpyDefault, own[device]), "read");
  check(L, cudaStreamSynchronize(own[device]), "read");
  luaL_pushresultsize(&b, (size_t)n);
  return 1;
}

static int l_allocation(lua_State *L) {
  cudaPointerAttributes a = attributes_of(L, opt_pointer(L, 1), "allocation");
  const char *kind = a.type == cudaMemoryTypeDevice ? "device" : a.type == cudaMemoryTypeHost ? "host"
                   : a.type == cudaMemoryTypeManaged ? "managed" : NULL;
  if (!kind) {
    lua_pushnil(L);
    return 1;
  }
  lua_createtable(L, 0, 2);
  lua_pushstring(L, kind);
  lua_setfield(L, -2, "kind");
  lua_pushinteger(L, a.device);
  lua_setfield(L, -2, "device");
  return 1;
}

static int l_sync_all(lua_State *L) {
  int n = 0;
  check(L, cudaGetDeviceCount(&n), "sync_all");
  for (int d = 0; d < n; d++) {
    check(L, cudaSetDevice(d), "sync_all");
    check(L, cudaDeviceSynchronize(), "sync_all");
  }
  while (staged > 0) check(L, cudaFreeHost(staging[--staged]), "sync_all");
  return 0;
}

extern "C" __attribute__((visibility("default"))) int luaopen_gpu_kernels(lua_State *L) {
  static const luaL_Reg functions[] = {
      {"sleep", l_sleep},
      {"fill", l_fill},
      {"count_ne", l_count_ne},
      {"stream_create", l_stream_create},
      {"stream_synchronize", l_stream_synchronize},
      {"stream_destroy", l_stream_destroy},
      {"synchronize", l_synchronize},
      {"now", l_now},
      {"write", l_write},
      {"pending", l_pending},
      {"read", l_read},
      {"allocation", l_allocation},
      {"sync_all", l_sync_all},
      {NULL, NULL},
  };
  luaL_newlib(L, functions);
  return 1;
}
