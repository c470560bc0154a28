/* The CUDA kernels of the elementwise functions: ops.h's element expressions, one kernel per
 * (operation, compute type), named dlp_<op>_<type> as the CPU loops are named <op>_<type>.
 *
 * Family 12 holds the strided copies, by element size, family 13 the matrix products. Compiled
 * twice from this one source:
 *   - as CUDA, to PTX, one file per family (DLP_FAMILY: a compute type, or the mixed integer
 *     comparisons), by `make ptx` with the toolkit; the PTX is kept in the repository under
 *     ptx/, embedded in the module and loaded by the driver a family at a time on first use
 *     (src/cuda/launch.c), so the module builds with no toolkit;
 *   - as C, every family at once, into the fake driver of the specs (spec/c/fakecuda.c), which
 *     runs a launch by calling each thread of the grid in turn and translates device addresses
 *     (bounds-checked) to its shadow memory. So `make test` runs these very kernels.
 *
 * Each thread walks elements i = thread, thread + threads, ... (args.h): the element's byte
 * offset in each operand comes from i by dividing through the shape, innermost last. */
#include "compute/cuda/args.h"
#include "compute/ops.h"
#include "compute/random_rules.h"
#include "core/convert_rules.h"

#ifndef DLP_FAMILY
#define DLP_FAMILY -1 /* every family: the fake driver's C */
#endif
#define FAMILY(n) (DLP_FAMILY < 0 || DLP_FAMILY == (n))

#ifdef __CUDACC__
#define KERNEL(name) extern "C" __global__ void name(const dlp_ElementwiseArgs A)
#define THREAD ((int64_t)blockIdx.x * blockDim.x + threadIdx.x)
#define THREADS ((int64_t)gridDim.x * blockDim.x)
#define BYTES(address, n, write) ((void *)(uintptr_t)(address))
#define ROLLED _Pragma("unroll 1") /* the walk over the dimensions stays a loop: small PTX */
#else
/* The fake driver's side: the thread being run and the grid's size, and the bytes of device
 * memory at an address (a launch that reaches outside its allocations is reported there). */
int64_t dlp_fake_thread(void);
int64_t dlp_fake_threads(void);
void *dlp_fake_device_bytes(uint64_t address, int64_t n, int write);
#define KERNEL(name) void name(const dlp_ElementwiseArgs *args); void name(const dlp_ElementwiseArgs *args)
#define A (*args)
#define THREAD dlp_fake_thread()
#define THREADS dlp_fake_threads()
#define BYTES(address, n, write) dlp_fake_device_bytes((address), (n), (write))
#define ROLLED
#endif

/* Run the statements for each element of the launch, with off[k] the element's byte offset in
 * operand k (of the first nops). */
#define EACH_ELEMENT(nops, ...)                                                                        \
  for (int64_t i = THREAD, stride_ = THREADS; i < A.numel; i += stride_) {                            \
    int64_t off[DLP_KERNEL_MAX_OPS] = {0, 0, 0, 0}, rest_ = i;                                        \
    ROLLED                                                                                             \
    for (int d_ = A.ndim - 1; d_ >= 0; d_--) {                                                         \
      int64_t n_ = A.shape[d_], at_ = d_ > 0 ? rest_ % n_ : rest_;                                     \
      rest_ = d_ > 0 ? rest_ / n_ : 0;                                                                 \
      for (int k_ = 0; k_ < (nops); k_++) off[k_] += at_ * A.strides[k_][d_];                          \
    }                                                                                                  \
    __VA_ARGS__                                                                                        \
  }

/* operand k's element as a T (the scalar's value, or memory); the output's element set to v */
#define LOAD(T, k, var)                                                                                \
  T var;                                                                                               \
  if ((A.scalars >> (k)) & 1) {                                                                        \
    uint64_t words_[2] = {A.value[k][0], A.value[k][1]};                                               \
    memcpy(&var, words_, sizeof var);                                                                  \
  } else {                                                                                             \
    var = *(const T *)BYTES(A.data[k] + (uint64_t)off[k], (int64_t)sizeof(T), 0);                      \
  }
#define STORE(R, v) (*(R *)BYTES(A.data[0] + (uint64_t)off[0], (int64_t)sizeof(R), 1) = (v))

#define K2(name, T, R, EXPR) \
  KERNEL(dlp_##name) { EACH_ELEMENT(3, LOAD(T, 1, x) LOAD(T, 2, y) STORE(R, (R)(EXPR));) }
#define K1(name, T, R, EXPR) \
  KERNEL(dlp_##name) { EACH_ELEMENT(2, LOAD(T, 1, x) STORE(R, (R)(EXPR));) }
#define KC(name, T, MAXF, MINF) \
  KERNEL(dlp_##name) { EACH_ELEMENT(4, LOAD(T, 1, x) LOAD(T, 2, l) LOAD(T, 3, h) T m = MAXF(x, l); STORE(T, MINF(m, h));) }
#define KW(name, T, NORM)                                                                              \
  KERNEL(dlp_##name) {                                                                                 \
    EACH_ELEMENT(4, LOAD(b8, 1, c) LOAD(T, 2, x) LOAD(T, 3, y) T v = c ? x : y; STORE(T, NORM(v));)    \
  }
#define KM(name, TX, TY, EXPR) \
  KERNEL(dlp_##name) { EACH_ELEMENT(3, LOAD(TX, 1, x) LOAD(TY, 2, y) STORE(b8, (b8)(EXPR));) }

/* the checks before integer division and powers: operand 0, a flag byte every element maps to
 * (strides 0), is set to 1 when an element is zero (or negative); the threads that set it all
 * write the same value */
#define KFLAG(name, T, COND) \
  KERNEL(dlp_##name) { EACH_ELEMENT(2, LOAD(T, 1, x) if (COND) STORE(b8, 1);) }
#define SIGNED_FLAGS(s, T) KFLAG(has_zero_##s, T, x == 0) KFLAG(has_negative_##s, T, x < 0)
#define UNSIGNED_FLAGS(s, T) KFLAG(has_zero_##s, T, x == 0)
#define INT_KERNELS(s, T) DLP_INT_OPS(K2, K1, KC, s, T) DLP_COMPARE_OPS(K2, K1, KW, s, T)
#define FLOAT_KERNELS(s, T, F) DLP_FLOAT_OPS(K2, K1, KC, s, T, F) DLP_COMPARE_OPS(K2, K1, KW, s, T)

/* The families, numbered as the module's compute types (kernels.c, dlp_compute_index). */
#if FAMILY(0)
DLP_BOOL_OPS(K2, K1, KC, KW)
#endif
#if FAMILY(1)
INT_KERNELS(i8, int8_t)
SIGNED_FLAGS(i8, int8_t)
#endif
#if FAMILY(2)
INT_KERNELS(i16, int16_t)
SIGNED_FLAGS(i16, int16_t)
#endif
#if FAMILY(3)
INT_KERNELS(i32, int32_t)
SIGNED_FLAGS(i32, int32_t)
#endif
#if FAMILY(4)
INT_KERNELS(i64, int64_t)
SIGNED_FLAGS(i64, int64_t)
#endif
#if FAMILY(5)
INT_KERNELS(u8, uint8_t)
UNSIGNED_FLAGS(u8, uint8_t)
#endif
#if FAMILY(6)
INT_KERNELS(u16, uint16_t)
UNSIGNED_FLAGS(u16, uint16_t)
#endif
#if FAMILY(7)
INT_KERNELS(u32, uint32_t)
UNSIGNED_FLAGS(u32, uint32_t)
#endif
#if FAMILY(8)
INT_KERNELS(u64, uint64_t)
UNSIGNED_FLAGS(u64, uint64_t)
#endif
#if FAMILY(9)
FLOAT_KERNELS(f32, float, f)
#endif
#if FAMILY(10)
FLOAT_KERNELS(f64, double, )
#endif
#if FAMILY(10)
/* allclose's test; rtol and atol are operand 3's 16 bytes */
KERNEL(dlp_isclose_f64) {
  uint64_t words[2] = {A.value[3][0], A.value[3][1]};
  double tol[2];
  memcpy(tol, words, sizeof tol);
  EACH_ELEMENT(3, LOAD(double, 1, x) LOAD(double, 2, y) STORE(b8, dlp_rule_isclose(x, y, tol[0], tol[1]));)
}
#endif
#if FAMILY(11)
DLP_MIXED_OPS(KM)
#endif
/* strided copies by element size, any dtype of that size */
typedef struct {
  uint64_t lo, hi;
} bytes16;
#define COPIES(K) K(copy_1, uint8_t, uint8_t, x) K(copy_2, uint16_t, uint16_t, x) K(copy_4, uint32_t, uint32_t, x) \
  K(copy_8, uint64_t, uint64_t, x) K(copy_16, bytes16, bytes16, x)
#if FAMILY(12)
COPIES(K1)
#endif
/* conversions between the real dtypes (convert_rules.h), dlp_convert_<source>_<destination>: a
 * family per source dtype, 13 (bool) to 25 (float64) in DLP_REAL_DTYPES' order */
#define KCONVERT(S, s, ST, sc, D, d, DT, dc) \
  KERNEL(dlp_convert_##s##_##d) { EACH_ELEMENT(2, LOAD(ST, 1, v) STORE(DT, DLP_CONVERT(d, sc, DLP_LOAD_##s(v)));) }
#define CONVERSIONS_FROM(S, s, ST, sc) DLP_REAL_DESTINATIONS(KCONVERT, S, s, ST, sc)
#if FAMILY(13)
CONVERSIONS_FROM(BOOL, bool, uint8_t, small)
#endif
#if FAMILY(14)
CONVERSIONS_FROM(INT8, int8, int8_t, small)
#endif
#if FAMILY(15)
CONVERSIONS_FROM(INT16, int16, int16_t, small)
#endif
#if FAMILY(16)
CONVERSIONS_FROM(INT32, int32, int32_t, small)
#endif
#if FAMILY(17)
CONVERSIONS_FROM(INT64, int64, int64_t, i64)
#endif
#if FAMILY(18)
CONVERSIONS_FROM(UINT8, uint8, uint8_t, small)
#endif
#if FAMILY(19)
CONVERSIONS_FROM(UINT16, uint16, uint16_t, small)
#endif
#if FAMILY(20)
CONVERSIONS_FROM(UINT32, uint32, uint32_t, u32)
#endif
#if FAMILY(21)
CONVERSIONS_FROM(UINT64, uint64, uint64_t, u64)
#endif
#if FAMILY(22)
CONVERSIONS_FROM(FLOAT16, float16, uint16_t, flt)
#endif
#if FAMILY(23)
CONVERSIONS_FROM(BFLOAT16, bfloat16, uint16_t, flt)
#endif
#if FAMILY(24)
CONVERSIONS_FROM(FLOAT32, float32, float, flt)
#endif
#if FAMILY(25)
CONVERSIONS_FROM(FLOAT64, float64, double, dbl)
#endif

/* random tensors (family 26): operand 0 the new contiguous tensor; the key (value[1]), randint's
 * lo (value[2]) and range (value[3]) ride as scalars */
#define KRAND(d, DT, BITS)                                                                            \
  KERNEL(dlp_rand_##d) {                                                                               \
    uint64_t key = A.value[1][0];                                                                      \
    EACH_ELEMENT(1, STORE(DT, DLP_CONVERT(d, dbl, dlp_rule_uniform(dlp_rule_counter_draw(key, (uint64_t)i, 0), BITS)));) \
  }                                                                                                    \
  KERNEL(dlp_randn_##d) {                                                                              \
    uint64_t key = A.value[1][0];                                                                      \
    EACH_ELEMENT(1, STORE(DT, DLP_CONVERT(d, dbl, dlp_rule_counter_normal(key, (uint64_t)i)));)         \
  }
#define KRANDINT(d, DT)                                                                               \
  KERNEL(dlp_randint_##d) {                                                                            \
    uint64_t key = A.value[1][0], lo = A.value[2][0], range = A.value[3][0];                           \
    EACH_ELEMENT(1, STORE(DT, DLP_CONVERT(d, i64, (int64_t)(lo + dlp_rule_counter_below(key, (uint64_t)i, range))));) \
  }
#define RANDOM_KERNELS(K, KI)                                                                        \
  K(float16, uint16_t, 11) K(bfloat16, uint16_t, 8) K(float32, float, 24) K(float64, double, 53)      \
  KI(bool, uint8_t) KI(int8, int8_t) KI(int16, int16_t) KI(int32, int32_t) KI(int64, int64_t)          \
  KI(uint8, uint8_t) KI(uint16, uint16_t) KI(uint32, uint32_t) KI(uint64, uint64_t)
/* ranges (family 26 too): arange's values from start and step (int64, or doubles), linspace's
 * from its start, stop, step, divisor, difference and count, as the CPU computes them (create.c,
 * tensor.c); the parameters ride in value[1..3] */
#define DOUBLES(k, x, y)                                                                              \
  double x, y;                                                                                         \
  {                                                                                                    \
    uint64_t w_[2] = {A.value[k][0], A.value[k][1]};                                                   \
    double d_[2];                                                                                      \
    memcpy(d_, w_, sizeof d_);                                                                         \
    x = d_[0], y = d_[1];                                                                              \
  }
#define KRANGE(d, DT)                                                                                 \
  KERNEL(dlp_arange_int_##d) {                                                                         \
    uint64_t start = A.value[1][0], step = A.value[2][0];                                              \
    EACH_ELEMENT(1, STORE(DT, DLP_CONVERT(d, i64, (int64_t)(start + (uint64_t)i * step)));)            \
  }                                                                                                    \
  KERNEL(dlp_arange_float_##d) {                                                                       \
    DOUBLES(1, start, step)                                                                            \
    EACH_ELEMENT(1, STORE(DT, DLP_CONVERT(d, dbl, start + (double)i * step));)                         \
  }                                                                                                    \
  KERNEL(dlp_linspace_##d) {                                                                           \
    DOUBLES(1, a, b)                                                                                   \
    DOUBLES(2, step, div)                                                                              \
    double delta;                                                                                      \
    {                                                                                                  \
      uint64_t w_ = A.value[3][0];                                                                     \
      memcpy(&delta, &w_, sizeof delta);                                                               \
    }                                                                                                  \
    int64_t count = (int64_t)A.value[3][1];                                                            \
    EACH_ELEMENT(1, STORE(DT, DLP_CONVERT(d, dbl, dlp_rule_linspace(i, count, a, b, step, div, delta, \
                                                                    IS_INTEGER_##d)));)                \
  }
#define IS_INTEGER_int8 1
#define IS_INTEGER_int16 1
#define IS_INTEGER_int32 1
#define IS_INTEGER_int64 1
#define IS_INTEGER_uint8 1
#define IS_INTEGER_uint16 1
#define IS_INTEGER_uint32 1
#define IS_INTEGER_uint64 1
#define IS_INTEGER_float16 0
#define IS_INTEGER_bfloat16 0
#define IS_INTEGER_float32 0
#define IS_INTEGER_float64 0
#define RANGE_KERNELS(K)                                                                             \
  K(int8, int8_t) K(int16, int16_t) K(int32, int32_t) K(int64, int64_t) K(uint8, uint8_t)              \
  K(uint16, uint16_t) K(uint32, uint32_t) K(uint64, uint64_t) K(float16, uint16_t)                     \
  K(bfloat16, uint16_t) K(float32, float) K(float64, double)
#if FAMILY(26)
RANDOM_KERNELS(KRAND, KRANDINT)
RANGE_KERNELS(KRANGE)
#endif

/* ---- family 27: matrix products (src/compute/matmul.c, when cuBLAS is not used) ----
 * One thread per element of the result (the grid-stride walk over the result's shape: batch
 * dimensions, rows, columns), which sums its K products one after the other, k = 0, 1, ...: the
 * same sum whatever the grid, so the same bits on every run. Any strides (negative, zero), any
 * dtype of either factor: each element is read as its dtype and converted to the compute type as
 * the CPU path's packing converts it (bool as 0 or 1, integers sign- or zero-extended, float16
 * and bfloat16 exactly), and the sum is stored as the result's dtype as the CPU converts its
 * result (integers truncated, bool as "nonzero", float16 and bfloat16 rounded to nearest even).
 * The compute types are the CPU's: f32 (float16, bfloat16 and float32 results), f64 (float64),
 * u32 (integer results of 32 bits or less, wrapping) and u64 (64-bit integers, and bool, whose
 * count of true products never wraps to 0). args.h says where K and the steps are. */
#if FAMILY(27)
#define MM_READ(T, address) (*(const T *)BYTES((address), (int64_t)sizeof(T), 0))
#define MM_WRITE(T, address, v) (*(T *)BYTES((address), (int64_t)sizeof(T), 1) = (v))

/* an element of dtype t at p, as each compute type */
DLP_RULE float mm_load_f32(uint64_t p, int t) {
  switch (t) {
    case DLP_KD_BOOL: return MM_READ(uint8_t, p) != 0 ? 1.0f : 0.0f;
    case DLP_KD_INT8: return (float)MM_READ(int8_t, p);
    case DLP_KD_INT16: return (float)MM_READ(int16_t, p);
    case DLP_KD_UINT8: return (float)MM_READ(uint8_t, p);
    case DLP_KD_UINT16: return (float)MM_READ(uint16_t, p);
    case DLP_KD_FLOAT16: return dlp_rule_half_to_float(MM_READ(uint16_t, p));
    case DLP_KD_BFLOAT16: return dlp_rule_bfloat_to_float(MM_READ(uint16_t, p));
    default: return MM_READ(float, p);
  }
}
DLP_RULE double mm_load_f64(uint64_t p, int t) {
  switch (t) {
    case DLP_KD_BOOL: return MM_READ(uint8_t, p) != 0 ? 1.0 : 0.0;
    case DLP_KD_INT8: return (double)MM_READ(int8_t, p);
    case DLP_KD_INT16: return (double)MM_READ(int16_t, p);
    case DLP_KD_INT32: return (double)MM_READ(int32_t, p);
    case DLP_KD_INT64: return (double)MM_READ(int64_t, p);
    case DLP_KD_UINT8: return (double)MM_READ(uint8_t, p);
    case DLP_KD_UINT16: return (double)MM_READ(uint16_t, p);
    case DLP_KD_UINT32: return (double)MM_READ(uint32_t, p);
    case DLP_KD_UINT64: return (double)MM_READ(uint64_t, p);
    case DLP_KD_FLOAT16: return (double)dlp_rule_half_to_float(MM_READ(uint16_t, p));
    case DLP_KD_BFLOAT16: return (double)dlp_rule_bfloat_to_float(MM_READ(uint16_t, p));
    case DLP_KD_FLOAT32: return (double)MM_READ(float, p);
    default: return MM_READ(double, p);
  }
}
/* integers (and bool, as 0 or 1) as the uint64_t they equal modulo 2^64 */
DLP_RULE uint64_t mm_load_u64(uint64_t p, int t) {
  switch (t) {
    case DLP_KD_BOOL: return MM_READ(uint8_t, p) != 0;
    case DLP_KD_INT8: return (uint64_t)(int64_t)MM_READ(int8_t, p);
    case DLP_KD_INT16: return (uint64_t)(int64_t)MM_READ(int16_t, p);
    case DLP_KD_INT32: return (uint64_t)(int64_t)MM_READ(int32_t, p);
    case DLP_KD_UINT8: return MM_READ(uint8_t, p);
    case DLP_KD_UINT16: return MM_READ(uint16_t, p);
    case DLP_KD_UINT32: return MM_READ(uint32_t, p);
    default: return MM_READ(uint64_t, p);
  }
}
DLP_RULE uint32_t mm_load_u32(uint64_t p, int t) { return (uint32_t)mm_load_u64(p, t); }

/* the sum v stored as dtype t at p */
DLP_RULE void mm_store_f32(uint64_t p, int t, float v) {
  if (t == DLP_KD_FLOAT16) MM_WRITE(uint16_t, p, dlp_rule_half_from_float(v));
  else if (t == DLP_KD_BFLOAT16) MM_WRITE(uint16_t, p, dlp_rule_bfloat_from_float(v));
  else MM_WRITE(float, p, v);
}
DLP_RULE void mm_store_f64(uint64_t p, int t, double v) {
  (void)t;
  MM_WRITE(double, p, v);
}
DLP_RULE void mm_store_u64(uint64_t p, int t, uint64_t v) {
  switch (t) {
    case DLP_KD_BOOL: MM_WRITE(uint8_t, p, (uint8_t)(v != 0)); break;
    case DLP_KD_INT8: case DLP_KD_UINT8: MM_WRITE(uint8_t, p, (uint8_t)v); break;
    case DLP_KD_INT16: case DLP_KD_UINT16: MM_WRITE(uint16_t, p, (uint16_t)v); break;
    case DLP_KD_INT32: case DLP_KD_UINT32: MM_WRITE(uint32_t, p, (uint32_t)v); break;
    default: MM_WRITE(uint64_t, p, v); break;
  }
}
DLP_RULE void mm_store_u32(uint64_t p, int t, uint32_t v) { mm_store_u64(p, t, v); }

#define MATMUL(s, T)                                                                                   \
  KERNEL(dlp_matmul_##s) {                                                                             \
    EACH_ELEMENT(3, T acc = 0;                                                                         \
      uint64_t pa = A.data[1] + (uint64_t)off[1], pb = A.data[2] + (uint64_t)off[2];                   \
      uint64_t sa = (uint64_t)DLP_MATMUL_STEP(A, 1), sb = (uint64_t)DLP_MATMUL_STEP(A, 2);             \
      int ta = DLP_MATMUL_DTYPE(A, 1), tb = DLP_MATMUL_DTYPE(A, 2);                                    \
      ROLLED                                                                                           \
      for (int64_t k = 0, kn = DLP_MATMUL_K(A); k < kn; k++, pa += sa, pb += sb)                       \
        acc = (T)(acc + (T)(mm_load_##s(pa, ta) * mm_load_##s(pb, tb)));                               \
      mm_store_##s(A.data[0] + (uint64_t)off[0], DLP_MATMUL_DTYPE(A, 0), acc);)                        \
  }
#define MATMULS(K) K(f32, float) K(f64, double) K(u32, uint32_t) K(u64, uint64_t)
MATMULS(MATMUL)
#endif

#ifndef __CUDACC__
/* The fake driver's table of the kernels by name. */
#include "compute/cuda/fake_kernels.h"
#define ENTRY(name, ...) {"dlp_" #name, dlp_##name},
#define MATMUL_ENTRY(s, T) ENTRY(matmul_##s)
#define INT_ENTRIES(s, T) DLP_INT_OPS(ENTRY, ENTRY, ENTRY, s, T) DLP_COMPARE_OPS(ENTRY, ENTRY, ENTRY, s, T)
#define ZERO_FLAG_ENTRY(s, T) ENTRY(has_zero_##s)
#define RAND_ENTRIES(d, DT, BITS) ENTRY(rand_##d) ENTRY(randn_##d)
#define RANDINT_ENTRY(d, DT) ENTRY(randint_##d)
#define RANGE_ENTRIES(d, DT) ENTRY(arange_int_##d) ENTRY(arange_float_##d) ENTRY(linspace_##d)
#define CONVERSION_ENTRY(S, s, ST, sc, D, d, DT, dc) {"dlp_convert_" #s "_" #d, dlp_convert_##s##_##d},
#define CONVERSION_ENTRIES(S, s, ST, sc) DLP_REAL_DESTINATIONS(CONVERSION_ENTRY, S, s, ST, sc)
#define FLOAT_ENTRIES(s, T, F) DLP_FLOAT_OPS(ENTRY, ENTRY, ENTRY, s, T, F) DLP_COMPARE_OPS(ENTRY, ENTRY, ENTRY, s, T)
const dlp_FakeKernel dlp_fake_kernels[] = {
  DLP_BOOL_OPS(ENTRY, ENTRY, ENTRY, ENTRY) DLP_INTS(INT_ENTRIES) DLP_FLOATS(FLOAT_ENTRIES) DLP_MIXED_OPS(ENTRY) COPIES(ENTRY)
  DLP_REAL_DTYPES(CONVERSION_ENTRIES) {"dlp_isclose_f64", dlp_isclose_f64},
  DLP_INTS(ZERO_FLAG_ENTRY) ENTRY(has_negative_i8) ENTRY(has_negative_i16) ENTRY(has_negative_i32)
  ENTRY(has_negative_i64) RANDOM_KERNELS(RAND_ENTRIES, RANDINT_ENTRY) RANGE_KERNELS(RANGE_ENTRIES) MATMULS(MATMUL_ENTRY)
  {NULL, NULL},
};
#endif
