/*
 * bench/baselines.c: the C loops `make bench` compares the module with (build/bench/baselines.so,
 * built with the module's own flags). Each works on the memory of tensors passed to it, found
 * through the module's registry function table, so module and baseline touch the same buffers.
 * Every function takes a repeat count n and runs the loop n times, so that one Lua call times
 * many iterations.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#ifndef _WIN32
#include <dlfcn.h>
#endif

#include "compat.h"

#include "dlpack_lua.h"

DLPACK_LUA_API int luaopen_bench_baselines(lua_State *L);

static char *data_of(lua_State *L, int idx, int64_t *numel) {
  const dlpack_lua_api *api = dlpack_lua_get_api(L);
  const DLTensor *t;
  if (!api) luaL_error(L, "require \"dlpack\" first");
  t = api->check_tensor(L, idx, NULL);
  if (numel) {
    *numel = 1;
    for (int i = 0; i < t->ndim; i++) *numel *= t->shape[i];
  }
  return (char *)t->data + t->byte_offset;
}

static size_t bytes_of(lua_State *L, int idx, size_t itemsize) {
  int64_t n;
  data_of(L, idx, &n);
  return (size_t)n * itemsize;
}

/* memset(t, byte, nbytes_per_element, n) */
static int b_memset(lua_State *L) {
  char *p = data_of(L, 1, NULL);
  int byte = (int)luaL_checkinteger(L, 2);
  size_t bytes = bytes_of(L, 1, (size_t)luaL_checkinteger(L, 3));
  for (lua_Integer k = luaL_checkinteger(L, 4); k > 0; k--) memset(p, byte, bytes);
  return 0;
}

/* memcpy(dst, src, bytes, n) */
static int b_memcpy(lua_State *L) {
  char *d = data_of(L, 1, NULL), *s = data_of(L, 2, NULL);
  size_t bytes = (size_t)luaL_checkinteger(L, 3);
  for (lua_Integer k = luaL_checkinteger(L, 4); k > 0; k--) memcpy(d, s, bytes);
  return 0;
}

/* memcpy from a Lua string into a tensor: copy_string(dst, s, n) */
static int b_copy_string(lua_State *L) {
  char *d = data_of(L, 1, NULL);
  size_t len;
  const char *s = luaL_checklstring(L, 2, &len);
  for (lua_Integer k = luaL_checkinteger(L, 3); k > 0; k--) memcpy(d, s, len);
  return 0;
}

/* malloc + memset + free(bytes, n) and malloc + memcpy + free(src, n) */
static int b_malloc_memset_free(lua_State *L) {
  size_t bytes = (size_t)luaL_checkinteger(L, 1);
  for (lua_Integer k = luaL_checkinteger(L, 2); k > 0; k--) {
    char *p = malloc(bytes);
    if (!p) return luaL_error(L, "out of memory");
    memset(p, 0, bytes);
    __asm__ volatile("" : : "r"(p) : "memory"); /* the memset is not optimised away */
    free(p);
  }
  return 0;
}

static int b_malloc_memcpy_free(lua_State *L) {
  const char *s = data_of(L, 1, NULL);
  size_t bytes = (size_t)luaL_checkinteger(L, 2);
  for (lua_Integer k = luaL_checkinteger(L, 3); k > 0; k--) {
    char *p = malloc(bytes);
    if (!p) return luaL_error(L, "out of memory");
    memcpy(p, s, bytes);
    __asm__ volatile("" : : "r"(p) : "memory");
    free(p);
  }
  return 0;
}

/* ---- conversions: plain C cast loops and the usual bit tricks ---- */

static int b_f64_to_f32(lua_State *L) {
  int64_t n;
  float *d = (float *)data_of(L, 1, &n);
  const double *s = (const double *)data_of(L, 2, NULL);
  for (lua_Integer k = luaL_checkinteger(L, 3); k > 0; k--)
    for (int64_t i = 0; i < n; i++) d[i] = (float)s[i];
  return 0;
}

static int b_i32_to_f64(lua_State *L) {
  int64_t n;
  double *d = (double *)data_of(L, 1, &n);
  const int32_t *s = (const int32_t *)data_of(L, 2, NULL);
  for (lua_Integer k = luaL_checkinteger(L, 3); k > 0; k--)
    for (int64_t i = 0; i < n; i++) d[i] = (double)s[i];
  return 0;
}

/* float32 -> binary16, round to nearest even (finite inputs; inf and NaN kept) */
static uint16_t f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000, a = x & 0x7FFFFFFF;
  if (a >= 0x7F800000) return (uint16_t)(sign | 0x7C00 | (a > 0x7F800000 ? 0x200 : 0));
  if (a >= 0x477FF000) return (uint16_t)(sign | 0x7C00); /* rounds to infinity */
  if (a < 0x38800000) { /* subnormal or zero */
    float v;
    uint32_t magic = 0x3F000000; /* 0.5: adding it rounds the subnormal bits into place */
    memcpy(&v, &a, 4);
    float m;
    memcpy(&m, &magic, 4);
    v += m;
    uint32_t r;
    memcpy(&r, &v, 4);
    return (uint16_t)(sign | (r - magic));
  }
  uint32_t odd = (a >> 13) & 1;
  a += 0xC8000FFF + odd; /* rebias the exponent (-112 << 23) and round to nearest even */
  return (uint16_t)(sign | (a >> 13));
}

static int b_f32_to_f16(lua_State *L) {
  int64_t n;
  uint16_t *d = (uint16_t *)data_of(L, 1, &n);
  const float *s = (const float *)data_of(L, 2, NULL);
  for (lua_Integer k = luaL_checkinteger(L, 3); k > 0; k--)
    for (int64_t i = 0; i < n; i++) d[i] = f32_to_f16(s[i]);
  return 0;
}

/* binary16 -> float32, bit by bit (subnormals through one exact multiply) */
static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FF, bits;
  float f;
  if (e == 0) {
    f = (float)m * 0x1p-24f;
    memcpy(&bits, &f, 4);
    bits |= sign;
  } else {
    bits = sign | (e == 31 ? 0x7F800000 : (e + 112) << 23) | (m << 13);
  }
  memcpy(&f, &bits, 4);
  return f;
}

static int b_f16_to_f32(lua_State *L) {
  int64_t n;
  float *d = (float *)data_of(L, 1, &n);
  const uint16_t *s = (const uint16_t *)data_of(L, 2, NULL);
  for (lua_Integer k = luaL_checkinteger(L, 3); k > 0; k--)
    for (int64_t i = 0; i < n; i++) d[i] = f16_to_f32(s[i]);
  return 0;
}

static int b_f32_to_bf16(lua_State *L) {
  int64_t n;
  uint16_t *d = (uint16_t *)data_of(L, 1, &n);
  const uint32_t *s = (const uint32_t *)data_of(L, 2, NULL);
  for (lua_Integer k = luaL_checkinteger(L, 3); k > 0; k--)
    for (int64_t i = 0; i < n; i++) {
      uint32_t x = s[i];
      d[i] = (x & 0x7FFFFFFF) > 0x7F800000 ? (uint16_t)((x >> 16) | 0x40)
                                           : (uint16_t)((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
    }
  return 0;
}

/* ---- layout changes: 32x32-blocked copies ---- */

#define BLOCK 32

/* dst (rows x cols, contiguous) = transpose of src (cols x rows, contiguous), float32 */
static void transpose_f32(float *d, const float *s, int64_t rows, int64_t cols) {
  for (int64_t i0 = 0; i0 < rows; i0 += BLOCK)
    for (int64_t j0 = 0; j0 < cols; j0 += BLOCK) {
      int64_t i1 = i0 + BLOCK < rows ? i0 + BLOCK : rows, j1 = j0 + BLOCK < cols ? j0 + BLOCK : cols;
      for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j1; j++) d[i * cols + j] = s[j * rows + i];
    }
}

/* transpose(dst, src, n): src is rows x cols, dst cols x rows */
static int b_transpose(lua_State *L) {
  const dlpack_lua_api *api = dlpack_lua_get_api(L);
  const DLTensor *dt = api->check_tensor(L, 1, NULL), *st = api->check_tensor(L, 2, NULL);
  float *d = (float *)((char *)dt->data + dt->byte_offset);
  const float *s = (const float *)((char *)st->data + st->byte_offset);
  for (lua_Integer k = luaL_checkinteger(L, 3); k > 0; k--) transpose_f32(d, s, dt->shape[0], dt->shape[1]);
  return 0;
}

/* permute3(src, n): malloc, then dst[c][a][b] = src[a][b][c] (float32, contiguous src a x b x c),
 * blocked over (b, c), then free: a clone of src:permute({3, 1, 2}) */
static int b_permute3(lua_State *L) {
  const dlpack_lua_api *api = dlpack_lua_get_api(L);
  const DLTensor *st = api->check_tensor(L, 1, NULL);
  const float *s = (const float *)((char *)st->data + st->byte_offset);
  int64_t A = st->shape[0], B = st->shape[1], C = st->shape[2];
  for (lua_Integer k = luaL_checkinteger(L, 2); k > 0; k--) {
    float *d = malloc((size_t)(A * B * C) * sizeof(float));
    if (!d) return luaL_error(L, "out of memory");
    for (int64_t a = 0; a < A; a++)
      for (int64_t b0 = 0; b0 < B; b0 += BLOCK)
        for (int64_t c0 = 0; c0 < C; c0 += BLOCK) {
          int64_t b1 = b0 + BLOCK < B ? b0 + BLOCK : B, c1 = c0 + BLOCK < C ? c0 + BLOCK : C;
          for (int64_t c = c0; c < c1; c++)
            for (int64_t b = b0; b < b1; b++) d[(c * A + a) * B + b] = s[(a * B + b) * C + c];
        }
    __asm__ volatile("" : : "r"(d) : "memory");
    free(d);
  }
  return 0;
}

/* ---- computing: the loops a C programmer writes for the same work ---- */

/* add_f32(c, a, b, n): c[i] = a[i] + b[i], float32, contiguous */
static int b_add_f32(lua_State *L) {
  int64_t len;
  float *restrict c = (float *)data_of(L, 1, &len);
  const float *restrict a = (const float *)data_of(L, 2, NULL), *restrict b = (const float *)data_of(L, 3, NULL);
  for (lua_Integer k = luaL_checkinteger(L, 4); k > 0; k--) {
    for (int64_t i = 0; i < len; i++) c[i] = a[i] + b[i];
    __asm__ volatile("" : : "r"(c) : "memory");
  }
  return 0;
}

/* NumPy's pairwise summation (numpy/_core/src/umath/loops_utils.h.src): blocks of up to 128
 * elements summed in 8 interleaved accumulators, halves above that; the accuracy the contract
 * asks of a float sum, in the shape a C programmer would vectorise. */
static float pairwise_f32(const float *a, int64_t n) {
  if (n < 8) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i];
    return s;
  }
  if (n <= 128) {
    float r[8];
    int64_t i;
    for (int j = 0; j < 8; j++) r[j] = a[j];
    for (i = 8; i < n - n % 8; i += 8)
      for (int j = 0; j < 8; j++) r[j] += a[i + j];
    float s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++) s += a[i];
    return s;
  }
  int64_t half = n / 2;
  half -= half % 8;
  return pairwise_f32(a, half) + pairwise_f32(a + half, n - half);
}

/* sum_f32(a, n) -> the sum of the last repeat */
static int b_sum_f32(lua_State *L) {
  int64_t len;
  const float *a = (const float *)data_of(L, 1, &len);
  float s = 0.0f;
  for (lua_Integer k = luaL_checkinteger(L, 2); k > 0; k--) {
    s = pairwise_f32(a, len);
    __asm__ volatile("" : : "r"(a) : "memory");
  }
  lua_pushnumber(L, (lua_Number)s);
  return 1;
}

/* sum_f32_threads(a, n, threads) -> the sum of the last repeat: pairwise sums of `threads`
 * equal parts on as many threads (started for each repeat), added in order. What a second
 * core brings to a loop that reads memory, on this machine: the bound of the module's rows. */
typedef struct SumPart {
  pthread_t thread;
  const float *a;
  int64_t n;
  float sum;
} SumPart;

static void *sum_part(void *arg) {
  SumPart *p = arg;
  p->sum = pairwise_f32(p->a, p->n);
  return NULL;
}

static int b_sum_f32_threads(lua_State *L) {
  int64_t len;
  const float *a = (const float *)data_of(L, 1, &len);
  lua_Integer threads = luaL_checkinteger(L, 3);
  SumPart parts[8];
  float s = 0.0f;
  luaL_argcheck(L, threads >= 1 && threads <= 8, 3, "1 to 8 threads");
  for (lua_Integer k = luaL_checkinteger(L, 2); k > 0; k--) {
    for (int i = 0; i < threads; i++) {
      int64_t lo = len * i / threads, hi = len * (i + 1) / threads;
      parts[i].a = a + lo;
      parts[i].n = hi - lo;
      if (pthread_create(&parts[i].thread, NULL, sum_part, &parts[i]) != 0) {
        while (i-- > 0) pthread_join(parts[i].thread, NULL); /* they write into parts[] */
        return luaL_error(L, "pthread_create failed");
      }
    }
    s = 0.0f;
    for (int i = 0; i < threads; i++) {
      pthread_join(parts[i].thread, NULL);
      s += parts[i].sum;
    }
  }
  lua_pushnumber(L, (lua_Number)s);
  return 1;
}

/* normalize_frame(out, frame, mean, std, n): out (C x H x W float32, contiguous) =
 * (frame (H x W x C uint8, contiguous) / 255 - mean[c]) / std[c]; mean, std float32 {C} */
static int b_normalize_frame(lua_State *L) {
  const dlpack_lua_api *api = dlpack_lua_get_api(L);
  const DLTensor *ft = api->check_tensor(L, 2, NULL);
  float *restrict out = (float *)data_of(L, 1, NULL);
  const uint8_t *restrict frame = (const uint8_t *)data_of(L, 2, NULL);
  const float *mean = (const float *)data_of(L, 3, NULL), *sd = (const float *)data_of(L, 4, NULL);
  int64_t H = ft->shape[0], W = ft->shape[1], C = ft->shape[2];
  for (lua_Integer k = luaL_checkinteger(L, 5); k > 0; k--) {
    for (int64_t c = 0; c < C; c++) {
      const float m = mean[c], d = sd[c];
      float *restrict o = out + c * H * W;
      for (int64_t p = 0; p < H * W; p++) o[p] = ((float)frame[p * C + c] / 255.0f - m) / d;
    }
    __asm__ volatile("" : : "r"(out) : "memory");
  }
  return 0;
}

/* ---- the floor of an exchange: a finalised userdata and a malloc ---- */

typedef struct Floor {
  void *block;
} Floor;

static int floor_gc(lua_State *L) {
  Floor *f = lua_touserdata(L, 1);
  free(f->block);
  f->block = NULL;
  return 0;
}

/* floor(): what an exchange cannot do without, as one call from Lua: a userdata of a small
 * tensor's size with a __gc metatable, holding a malloc'd block of an export's size (freed by
 * __gc) */
static int b_floor(lua_State *L) {
  Floor *f = lua_newuserdatauv(L, 96, 0);
  f->block = malloc(112);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_setmetatable(L, -2);
  return 1;
}

/* ---- a minimal checked array: the C __index / __newindex t[i] is compared with ---- */

typedef struct Array {
  int64_t n;
  double v[];
} Array;

static Array *check_array(lua_State *L) {
  Array *a = lua_touserdata(L, 1);
  if (!a || !lua_getmetatable(L, 1) || !lua_rawequal(L, -1, lua_upvalueindex(1)))
    luaL_argexpected(L, 0, 1, "bench array");
  lua_pop(L, 1);
  return a;
}

static int array_index(lua_State *L) {
  Array *a = check_array(L);
  lua_Integer i = luaL_checkinteger(L, 2);
  luaL_argcheck(L, i >= 1 && i <= a->n, 2, "index out of range");
  lua_pushnumber(L, a->v[i - 1]);
  return 1;
}

static int array_newindex(lua_State *L) {
  Array *a = check_array(L);
  lua_Integer i = luaL_checkinteger(L, 2);
  luaL_argcheck(L, i >= 1 && i <= a->n, 2, "index out of range");
  a->v[i - 1] = luaL_checknumber(L, 3);
  return 0;
}

/* array(n): a userdata of n doubles (zeros) with that __index and __newindex */
static int b_array(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  Array *a = lua_newuserdatauv(L, sizeof(Array) + (size_t)n * sizeof(double), 0);
  a->n = n;
  memset(a->v, 0, (size_t)n * sizeof(double));
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_setmetatable(L, -2);
  return 1;
}

/* ---- dlpack.ipc (bench/ipc_echo.lua): a tensor's bytes through the channel's own socket ---- */

/* Write the nbytes at p to the socket fd in records of at most chunk bytes (a SOCK_SEQPACKET
 * record must fit the socket's buffer, so a 6 MB message goes in pieces). */
static void write_all(lua_State *L, int fd, const char *p, size_t nbytes, size_t chunk) {
  size_t done = 0;
  while (done < nbytes) {
    size_t len = nbytes - done < chunk ? nbytes - done : chunk;
    ssize_t k = send(fd, p + done, len, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) luaL_error(L, "send: %s", strerror(errno));
    done += (size_t)k;
  }
}

/* Read nbytes into p from the socket fd (records of any size up to what is left). */
static void read_all(lua_State *L, int fd, char *p, size_t nbytes) {
  size_t done = 0;
  while (done < nbytes) {
    ssize_t k = recv(fd, p + done, nbytes - done, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) luaL_error(L, "recv: %s", strerror(errno));
    if (k == 0) luaL_error(L, "recv: the peer closed the socket");
    done += (size_t)k;
  }
}

/* bytes_out_in(fd, src, dst, nbytes, chunk, n): n times, write the nbytes of tensor src to the
 * socket fd, then read as many back into tensor dst (the echo side runs bytes_in_out). */
static int b_bytes_out_in(lua_State *L) {
  int fd = (int)luaL_checkinteger(L, 1);
  const char *src = data_of(L, 2, NULL);
  char *dst = data_of(L, 3, NULL);
  size_t nbytes = (size_t)luaL_checkinteger(L, 4), chunk = (size_t)luaL_checkinteger(L, 5);
  for (lua_Integer k = luaL_checkinteger(L, 6); k > 0; k--) {
    write_all(L, fd, src, nbytes, chunk);
    read_all(L, fd, dst, nbytes);
  }
  return 0;
}

/* bytes_in_out(fd, buf, nbytes, chunk, n): the echo side: n times, read nbytes into tensor buf,
 * then write them back. */
static int b_bytes_in_out(lua_State *L) {
  int fd = (int)luaL_checkinteger(L, 1);
  char *buf = data_of(L, 2, NULL);
  size_t nbytes = (size_t)luaL_checkinteger(L, 3), chunk = (size_t)luaL_checkinteger(L, 4);
  for (lua_Integer k = luaL_checkinteger(L, 5); k > 0; k--) {
    read_all(L, fd, buf, nbytes);
    write_all(L, fd, buf, nbytes, chunk);
  }
  return 0;
}

#ifndef _WIN32
/* gemm(library, c, a, b, n): C = A . B through the CBLAS of library (float32 or float64, square,
 * contiguous), on one thread where it is OpenBLAS: the product the module's own kernel is
 * measured against. The library stays loaded. */
static int b_gemm(lua_State *L) {
  typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                           float *, int);
  typedef void (*dgemm_fn)(int, int, int, int, int, int, double, const double *, int, const double *, int, double,
                           double *, int);
  const dlpack_lua_api *api = dlpack_lua_get_api(L);
  void *lib = dlopen(luaL_checkstring(L, 1), RTLD_NOW | RTLD_LOCAL);
  if (!lib) return luaL_error(L, "%s", dlerror());
  const DLTensor *ct = api->check_tensor(L, 2, NULL);
  char *c = data_of(L, 2, NULL), *a = data_of(L, 3, NULL), *b = data_of(L, 4, NULL);
  int n = (int)ct->shape[0], f32 = ct->dtype.bits == 32;
  void *threads = dlsym(lib, "openblas_set_num_threads"), *fn = dlsym(lib, f32 ? "cblas_sgemm" : "cblas_dgemm");
  if (!fn) return luaL_error(L, "no CBLAS in %s", luaL_checkstring(L, 1));
  if (threads) {
    void (*set)(int);
    memcpy(&set, &threads, sizeof set);
    set(1);
  }
  sgemm_fn s;
  dgemm_fn d;
  memcpy(&s, &fn, sizeof s);
  memcpy(&d, &fn, sizeof d);
  for (lua_Integer k = luaL_checkinteger(L, 5); k > 0; k--) {
    if (f32) s(101, 111, 111, n, n, n, 1.0f, (float *)a, n, (float *)b, n, 0.0f, (float *)c, n);
    else d(101, 111, 111, n, n, n, 1.0, (double *)a, n, (double *)b, n, 0.0, (double *)c, n);
  }
  return 0;
}
#endif

/* now(): a monotonic clock in seconds, finer than os.clock */
static int b_now(lua_State *L) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
  return 1;
}

int luaopen_bench_baselines(lua_State *L) {
  static const luaL_Reg plain[] = {
    {"memset", b_memset}, {"memcpy", b_memcpy}, {"copy_string", b_copy_string},
    {"malloc_memset_free", b_malloc_memset_free}, {"malloc_memcpy_free", b_malloc_memcpy_free},
    {"f64_to_f32", b_f64_to_f32}, {"i32_to_f64", b_i32_to_f64}, {"f32_to_f16", b_f32_to_f16},
    {"f16_to_f32", b_f16_to_f32},
    {"f32_to_bf16", b_f32_to_bf16}, {"transpose", b_transpose}, {"permute3", b_permute3}, {"now", b_now},
    {"add_f32", b_add_f32}, {"sum_f32", b_sum_f32}, {"sum_f32_threads", b_sum_f32_threads}, {"normalize_frame", b_normalize_frame},
    {"bytes_out_in", b_bytes_out_in}, {"bytes_in_out", b_bytes_in_out},
#ifndef _WIN32
    {"gemm", b_gemm},
#endif
    {NULL, NULL},
  };
  luaL_newlib(L, plain);
  /* floor: its metatable as upvalue */
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, floor_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcclosure(L, b_floor, 1);
  lua_setfield(L, -2, "floor");
  /* array: one metatable, shared by its constructor and metamethods as upvalue 1 */
  lua_newtable(L);
  lua_pushvalue(L, -1);
  lua_pushcclosure(L, array_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pushvalue(L, -1);
  lua_pushcclosure(L, array_newindex, 1);
  lua_setfield(L, -2, "__newindex");
  lua_pushcclosure(L, b_array, 1);
  lua_setfield(L, -2, "array");
  return 1;
}
