/* Random tensors: dlpack.rand, randn, randint, and the generator behind them, manual_seed.
 *
 * The generator is xoshiro256** (Blackman and Vigna), one per lua_State (its coroutines share
 * it), seeded through splitmix64 from a 64-bit seed: 0 until dlpack.manual_seed(n) says
 * otherwise. Every number is computed from the generator's 64-bit outputs with integer
 * arithmetic and IEEE-754 double operations (one rounding each: no fused multiply-add), and the
 * logarithm randn needs is computed here from those operations, not taken from the C library,
 * whose log may differ in the last bit between platforms: the same seed gives the same numbers
 * on every platform and Lua version. docs/api.md ("Random numbers") gives each step, so that
 * another implementation can reproduce them. */
#include <math.h>
#include <string.h>

#include "compute/random_rules.h"
#include "internal.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define DEFAULT_SEED 0

/* ---- the generator ---- */

typedef struct Generator {
  uint64_t s[4];
} Generator;

static uint64_t splitmix64(uint64_t *x) {
  return dlp_rule_mix64(*x += DLP_GOLDEN);
}

/* splitmix64's first four outputs: never all zero (it is a bijection of its counter). */
static void seed_generator(Generator *g, uint64_t seed) {
  uint64_t x = seed;
  for (int k = 0; k < 4; k++) g->s[k] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

static uint64_t next(Generator *g) {
  uint64_t *s = g->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

/* The registry holds each state's generator under this address: a userdata without a metatable,
 * checked by its size too, in case a script with the debug library put something else there. */
static const char generator_key = 0;

/* L's generator, pushed (the caller keeps it on the stack while it draws), made the first time
 * (an allocation: call it before taking tensor memory). */
static Generator *generator(lua_State *L) {
  Generator *g = NULL;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &generator_key) == LUA_TUSERDATA && lua_rawlen(L, -1) == sizeof *g) {
    if (lua_getmetatable(L, -1)) lua_pop(L, 1); /* not one of ours */
    else g = lua_touserdata(L, -1);
  }
  if (g) return g;
  lua_pop(L, 1);
  g = lua_newuserdatauv(L, sizeof *g, 0);
  seed_generator(g, DEFAULT_SEED);
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &generator_key);
  return g;
}

/* dlpack.manual_seed(n): n an integer (on Lua 5.1, 5.2 and LuaJIT an integral number within
 * int64); a negative seed is its 64 bits as two's complement. */
static int l_manual_seed(lua_State *L) {
  int isint;
  dlp_check_no_more(L, 2, "dlpack.manual_seed", "a seed");
  if (lua_type(L, 1) != LUA_TNUMBER) return luaL_typeerror(L, 1, "number");
  lua_Integer n = lua_tointegerx(L, 1, &isint);
  if (!isint) {
    lua_Number x = lua_tonumber(L, 1);
    lua_pushvalue(L, 1);
    return luaL_argerror(L, 1, lua_pushfstring(L, "the seed must be an integer from -2^63 to 2^63 - 1, got %s",
                                               x != x ? "nan" : lua_tostring(L, -1)));
  }
  seed_generator(generator(L), (uint64_t)n);
  return 0;
}

/* ---- drawing ---- */

/* A uniform integer in [0, range), range >= 1: Lemire's multiply-and-reject, unbiased. */
static uint64_t below(Generator *g, uint64_t range) {
  uint64_t low, high = dlp_rule_mul_wide(next(g), range, &low);
  if (low < range) {
    uint64_t threshold = (0 - range) % range; /* 2^64 mod range: the draws that would bias */
    while (low < threshold) high = dlp_rule_mul_wide(next(g), range, &low);
  }
  return high;
}

/* Store the double v as an element of the float dtype at p (rounded to nearest even). */
static void put_float(int dtype, char *p, double v) {
  switch (dtype) {
    case DLP_FLOAT64: memcpy(p, &v, sizeof v); return;
    case DLP_FLOAT32: { float f = (float)v; memcpy(p, &f, sizeof f); return; }
    case DLP_FLOAT16: { uint16_t h = dlp_half_from_double(v); memcpy(p, &h, sizeof h); return; }
    default: { uint16_t h = dlp_bfloat_from_double(v); memcpy(p, &h, sizeof h); return; }
  }
}

/* Uniform in [0, 1): as many of the top bits of one output as the dtype has significant bits
 * (53, 24, 11, 8), times 2^-bits; every value is exact in the dtype. */
static void fill_uniform(Generator *g, int dtype, char *p, int64_t n) {
  size_t itemsize = dlp_dtypes[dtype].itemsize;
  int bits = dtype == DLP_FLOAT64 ? 53 : dtype == DLP_FLOAT32 ? 24 : dtype == DLP_FLOAT16 ? 11 : 8;
  for (int64_t i = 0; i < n; i++, p += itemsize) put_float(dtype, p, dlp_rule_uniform(next(g), bits));
}

/* Standard normal: Marsaglia's polar method. u, v in [-1, 1) (signed_unit, u first), s = u*u +
 * v*v, drawn again until 0 < s < 1; then u * r and v * r with r = sqrt(-2 log(s) / s) are two
 * elements, in that order (an odd count drops the last v * r). Computed in double, then rounded. */
static void fill_normal(Generator *g, int dtype, char *p, int64_t n) {
  size_t itemsize = dlp_dtypes[dtype].itemsize;
  for (int64_t i = 0; i < n; i += 2) {
    double u, v, s;
    do {
      u = dlp_rule_signed_unit(next(g));
      v = dlp_rule_signed_unit(next(g));
      s = u * u + v * v;
    } while (s >= 1 || s == 0);
    double r = dlp_rule_polar_scale(s);
    put_float(dtype, p, u * r);
    p += itemsize;
    if (i + 1 < n) {
      put_float(dtype, p, v * r);
      p += itemsize;
    }
  }
}

/* ---- CUDA tensors: a counter-based draw per element, on the device ---- */

/* Fill t (CUDA device memory, contiguous, new) with `kernel`: one draw of g is the key, from which
 * each element's draws are computed on the device (random_rules.h); lo and range for randint. */
static void fill_on_cuda(lua_State *L, Generator *g, dlp_Tensor *t, const char *kernel, uint64_t lo, uint64_t range,
                         const char *what) {
  if (dlp_numel(t) == 0) return; /* an empty tensor draws nothing */
  uint64_t params[6] = {next(g), 0, lo, 0, range, 0}; /* the key, lo and range: value slots 1 to 3 */
  dlp_generate_on_cuda(L, t, kernel, 26, params, what);
}

/* The device a random tensor goes to (the argument at arg, none: the CPU). */
static DLDevice random_device(lua_State *L, int arg) {
  DLDevice cpu = {kDLCPU, 0};
  return lua_isnoneornil(L, arg) ? cpu : dlp_check_device(L, arg, arg, NULL);
}

/* ---- the functions ---- */

/* dlpack.rand(shape [, dtype]) and randn: shape a table or numbers (rand(2, 3, "float64")). */
static int random_floats(lua_State *L, int normal, const char *what) {
  int64_t shape[DLP_MAX_NDIM];
  int next_arg, ndim = dlp_check_shape_args(L, 1, shape, &next_arg);
  dlp_check_no_more(L, next_arg + 2, what, "a shape, a dtype and a device");
  int dtype = dlp_opt_dtype(L, next_arg, DLP_FLOAT32);
  DLDevice device = random_device(L, next_arg + 1);
  if (dtype < DLP_FLOAT16 || dtype > DLP_FLOAT64)
    return luaL_argerror(L, next_arg, lua_pushfstring(L, "%s makes float16, bfloat16, float32 or float64, not %s%s",
                                                      what, dlp_dtypes[dtype].name,
                                                      dtype <= DLP_UINT64 ? " (use dlpack.randint)" : ""));
  Generator *g = generator(L);
  dlp_Tensor *t = dlp_tensor_new(L, dtype, 0, device, ndim, shape, 0, what);
  if (device.device_type == kDLCUDA) {
    static const char *const kernels[2][4] = {
      {"dlp_rand_float16", "dlp_rand_bfloat16", "dlp_rand_float32", "dlp_rand_float64"},
      {"dlp_randn_float16", "dlp_randn_bfloat16", "dlp_randn_float32", "dlp_randn_float64"}};
    fill_on_cuda(L, g, t, kernels[normal][dtype - DLP_FLOAT16], 0, 0, what);
    return 1;
  }
  dlp_check_host(L, t, what);
  (normal ? fill_normal : fill_uniform)(g, dtype, dlp_first_element(t), dlp_numel(t));
  return 1;
}

static int l_rand(lua_State *L) { return random_floats(L, 0, "dlpack.rand"); }
static int l_randn(lua_State *L) { return random_floats(L, 1, "dlpack.randn"); }

/* A bound of randint: an integer within int64. */
static int64_t check_bound(lua_State *L, int arg, const char *name) {
  int isint;
  if (lua_type(L, arg) != LUA_TNUMBER) return luaL_typeerror(L, arg, "number");
  lua_Integer v = lua_tointegerx(L, arg, &isint);
  if (!isint) {
    lua_Number x = lua_tonumber(L, arg);
    lua_pushvalue(L, arg);
    luaL_argerror(L, arg, lua_pushfstring(L, "%s must be an integer from -2^63 to 2^63 - 1, got %s", name,
                                          x != x ? "nan" : lua_tostring(L, -1)));
  }
  return v;
}

/* The smallest and largest values of an integer dtype or bool (uint64: those within int64). */
static void integer_limits(int dtype, int64_t *lo, int64_t *hi) {
  int bits = dlp_dtypes[dtype].bits;
  if (dtype == DLP_BOOL) *lo = 0, *hi = 1;
  else if (dtype >= DLP_UINT8) *lo = 0, *hi = bits == 64 ? INT64_MAX : (int64_t)((UINT64_C(1) << bits) - 1);
  else *lo = bits == 64 ? INT64_MIN : -(INT64_C(1) << (bits - 1)), *hi = bits == 64 ? INT64_MAX : -*lo - 1;
}

/* dlpack.randint(lo, hi, shape [, dtype]): uniform integers in [lo, hi), one draw each (more when
 * Lemire's method rejects one). */
static int l_randint(lua_State *L) {
  int64_t shape[DLP_MAX_NDIM], min, max;
  int64_t lo = check_bound(L, 1, "lo"), hi = check_bound(L, 2, "hi");
  int next_arg, ndim = dlp_check_shape_args(L, 3, shape, &next_arg);
  dlp_check_no_more(L, next_arg + 2, "dlpack.randint", "lo, hi, a shape, a dtype and a device");
  int dtype = dlp_opt_dtype(L, next_arg, DLP_INT64);
  DLDevice device = random_device(L, next_arg + 1);
  if (dtype > DLP_UINT64)
    return luaL_argerror(L, next_arg, lua_pushfstring(L, "dlpack.randint makes integers or bool, not %s",
                                                      dlp_dtypes[dtype].name));
  if (lo >= hi)
    return luaL_argerror(L, 2, lua_pushfstring(L, "hi must be greater than lo (lo %I, hi %I)", (lua_Integer)lo,
                                               (lua_Integer)hi));
  integer_limits(dtype, &min, &max);
  if (lo < min || hi - 1 > max)
    return luaL_error(L, "dlpack.randint: the range [%I, %I) does not fit %s (%I to %I)", (lua_Integer)lo,
                      (lua_Integer)hi, dlp_dtypes[dtype].name, (lua_Integer)min, (lua_Integer)max);
  Generator *g = generator(L);
  dlp_Tensor *t = dlp_tensor_new(L, dtype, 0, device, ndim, shape, 0, "dlpack.randint");
  uint64_t range = (uint64_t)hi - (uint64_t)lo; /* 1 to 2^64 - 1 */
  if (device.device_type == kDLCUDA) {
    static const char *const kernels[] = {"dlp_randint_bool", "dlp_randint_int8", "dlp_randint_int16",
                                          "dlp_randint_int32", "dlp_randint_int64", "dlp_randint_uint8",
                                          "dlp_randint_uint16", "dlp_randint_uint32", "dlp_randint_uint64"};
    fill_on_cuda(L, g, t, kernels[dtype], (uint64_t)lo, range, "dlpack.randint");
    return 1;
  }
  dlp_check_host(L, t, "dlpack.randint");
  size_t itemsize = dlp_dtypes[dtype].itemsize;
  char *p = dlp_first_element(t);
  dlp_Scalar s = {DLP_S_INT, 0, 0, 0, 0};
  for (int64_t i = 0, n = dlp_numel(t); i < n; i++, p += itemsize) {
    s.i = (int64_t)((uint64_t)lo + below(g, range)); /* within [lo, hi): no wrap */
    dlp_store(dtype, p, &s);
  }
  return 1;
}

/* A random permutation of 0..n-1 into perm: Fisher-Yates from the end (for i from n - 1 down to
 * 1, swap perm[i] with perm[j], j = below(i + 1)), so that the same seed gives the same order
 * everywhere. */
static void permutation(Generator *g, int64_t *perm, int64_t n) {
  for (int64_t i = 0; i < n; i++) perm[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)below(g, (uint64_t)i + 1), v = perm[i];
    perm[i] = perm[j];
    perm[j] = v;
  }
}

/* dlpack.randperm(n [, dtype [, device]]): 1..n in a random order (torch7's 1-based habit), int64
 * by default; an integer dtype that holds n. Drawn on the host, then copied to a CUDA device. */
static int l_randperm(lua_State *L) {
  const char *what = "dlpack.randperm";
  int64_t n = check_bound(L, 1, "n"), min, max;
  dlp_check_no_more(L, 4, what, "n, a dtype and a device");
  int dtype = dlp_opt_dtype(L, 2, DLP_INT64);
  DLDevice device = random_device(L, 3), cpu = {kDLCPU, 0};
  if (n < 0) return luaL_argerror(L, 1, "n must not be negative");
  if (dtype == DLP_BOOL || dtype > DLP_UINT64)
    return luaL_argerror(L, 2, lua_pushfstring(L, "%s makes integers, not %s", what, dlp_dtypes[dtype].name));
  integer_limits(dtype, &min, &max);
  if (n > max) return luaL_error(L, "%s: %I does not fit %s", what, (lua_Integer)n, dlp_dtypes[dtype].name);
  Generator *g = generator(L);
  dlp_Tensor *perm = dlp_tensor_new(L, DLP_INT64, 0, cpu, 1, &n, 0, what);
  dlp_Tensor *t = dlp_tensor_new(L, dtype, 0, cpu, 1, &n, 0, what);
  int64_t *p = (int64_t *)(void *)dlp_first_element(perm);
  permutation(g, p, n);
  for (int64_t i = 0; i < n; i++) p[i] += 1;
  dlp_row_function(dtype, DLP_INT64)(dlp_first_element(t), dlp_dtypes[dtype].itemsize, (const char *)p, 8, n);
  if (device.device_type != kDLCPU) {
    dlp_Tensor *d = dlp_tensor_new(L, dtype, 0, device, 1, &n, 0, what);
    dlp_copy(L, d, t, NULL, what);
  }
  return 1;
}

/* shuffle of the CUDA tensor t: the permutation drawn on the host as for a host tensor, copied to
 * t's device, and the slices gathered there (index_select's kernel). */
static int shuffle_on_device(lua_State *L, dlp_Tensor *t, const char *what) {
  DLDevice cpu = {kDLCPU, 0};
  int64_t n = t->dl.shape[0], numel = dlp_numel(t), m = numel == 0 ? 0 : n;
  if (dlp_dtypes[t->dtype].bits < 8) /* the host's result packs them, two or more to a byte */
    return luaL_error(L, "%s: %s is not shuffled on CUDA devices (copy to the host with t:to(\"cpu\"))", what,
                      dlp_dtypes[t->dtype].name);
  dlp_compute_device(L, &t, 1, what);
  Generator *g = generator(L);
  dlp_Tensor *perm = dlp_tensor_new(L, DLP_INT64, 0, cpu, 1, &m, 0, what);
  dlp_Tensor *on_device = dlp_tensor_new(L, DLP_INT64, 0, t->dl.device, 1, &m, 0, what);
  dlp_Tensor *r = dlp_tensor_new(L, t->dtype, 0, t->dl.device, t->dl.ndim, t->dl.shape, 0, what);
  int r_idx = lua_gettop(L);
  dlp_live(L, t, what);
  if (numel > 0) {
    int64_t *p = (int64_t *)(void *)dlp_first_element(perm);
    permutation(g, p, n);
    for (int64_t k = 0; k < n; k++) p[k] += 1;
    dlp_copy(L, on_device, perm, NULL, what);
    dlp_select_slices_on_cuda(L, r, t, on_device, what);
  }
  lua_pushvalue(L, r_idx);
  return 1;
}

/* dlpack.shuffle(t) and t:shuffle(): a new contiguous tensor holding t's slices along dim 1 in
 * the order of a random permutation drawn as randperm's (NumPy's random.permutation; t is left
 * as it is). */
static int l_shuffle(lua_State *L) {
  const char *what = "dlpack.shuffle";
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  dlp_check_no_more(L, 2, what, "a tensor");
  if (t->dl.ndim == 0) return luaL_argerror(L, 1, "a 0-d tensor has no dimension to shuffle");
  if (t->dl.device.device_type == kDLCUDA) return shuffle_on_device(L, t, what);
  dlp_check_host(L, t, what);
  DLDevice cpu = {kDLCPU, 0};
  int64_t n = t->dl.shape[0], numel = dlp_numel(t), m = numel == 0 ? 0 : n;
  Generator *g = generator(L);
  dlp_Tensor *perm = dlp_tensor_new(L, DLP_INT64, 0, cpu, 1, &m, 0, what);
  dlp_Tensor *src = dlp_tensor_new(L, t->dtype, 0, cpu, t->dl.ndim, t->dl.shape, 0, what);
  dlp_Tensor *r = dlp_tensor_new(L, t->dtype, 0, cpu, t->dl.ndim, t->dl.shape, 0, what);
  dlp_live(L, t, what);
  if (numel > 0) {
    int64_t *p = (int64_t *)(void *)dlp_first_element(perm);
    size_t slice = (size_t)(numel / n) * dlp_dtypes[t->dtype].itemsize;
    permutation(g, p, n);
    dlp_gather(dlp_first_element(src), t); /* row-major: slice k at k * slice */
    for (int64_t k = 0; k < n; k++)
      memcpy(dlp_first_element(r) + (size_t)k * slice, dlp_first_element(src) + (size_t)p[k] * slice, slice);
  }
  (void)r;
  return 1;
}

void dlp_random_register(lua_State *L, int module, int methods, int meta) {
  static const luaL_Reg functions[] = {
    {"rand", l_rand}, {"randn", l_randn}, {"randint", l_randint}, {"manual_seed", l_manual_seed},
    {"randperm", l_randperm}, {"shuffle", l_shuffle}, {NULL, NULL},
  };
  static const luaL_Reg tensor_methods[] = {{"shuffle", l_shuffle}, {NULL, NULL}};
  (void)meta;
  dlp_register(L, module, functions);
  dlp_register(L, methods, tensor_methods);
}
