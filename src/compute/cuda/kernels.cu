/* The CUDA kernels of the elementwise functions: ops.h's element expressions, one kernel per
 * (operation, compute type), named dlp_<op>_<type> as the CPU loops are named <op>_<type>.
 *
 * Families: 0-11 the elementwise operations (by compute type), 12 the strided copies by element
 * size (and fills), 13-25 the conversions from each real dtype, 26 random tensors and ranges, 27
 * the matrix products, 28-31 the reductions (see "reductions" below), 32-33 the complex
 * operations (complex64, complex128), 34-35 the conversions from and to the complex dtypes, 42
 * indexing with tensors ("indexing with tensors" below), 44 sorting ("sorting" below), 46 the
 * scans (cumsum, cumprod). Compiled twice from this one source:
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
#include "compute/complex_rules.h" /* and ops.h */
#include "compute/random_rules.h"
#include "compute/sort_rules.h"
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
/* complex64 (family 32) and complex128 (33): complex_rules.h's list; its expressions have the
 * result's type already (a pair is not cast) */
#define KC2(name, T, R, EXPR) \
  KERNEL(dlp_##name) { EACH_ELEMENT(3, LOAD(T, 1, x) LOAD(T, 2, y) R r_ = EXPR; STORE(R, r_);) }
#define KC1(name, T, R, EXPR) \
  KERNEL(dlp_##name) { EACH_ELEMENT(2, LOAD(T, 1, x) R r_ = EXPR; STORE(R, r_);) }
#define COMPLEX_KERNELS(s, T, R) DLP_COMPLEX_OPS(KC2, KC1, KW, s, T, R)
#if FAMILY(32)
COMPLEX_KERNELS(c64, dlp_c64, float)
#endif
#if FAMILY(33)
COMPLEX_KERNELS(c128, dlp_c128, double)
/* allclose's test of complex operands, in complex128 (ops.h's dlp_close_c128); rtol and atol are
 * operand 3's 16 bytes */
KERNEL(dlp_isclose_c128) {
  uint64_t words[2] = {A.value[3][0], A.value[3][1]};
  double tol[2];
  memcpy(tol, words, sizeof tol);
  EACH_ELEMENT(3, LOAD(dlp_c128, 1, x) LOAD(dlp_c128, 2, y)
               STORE(b8, dlp_close_c128(x.re, x.im, y.re, y.im, tol[0], tol[1]));)
}
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
/* conversions from complex64 and complex128 (family 34) and to them from the real dtypes (35):
 * convert_rules.h's complex rules */
#define KFROM_COMPLEX(C, c, CT, unused, D, d, DT, dc) \
  KERNEL(dlp_convert_##c##_##d) { EACH_ELEMENT(2, LOAD(CT, 1, v) STORE(DT, DLP_FROM_COMPLEX(d, v));) }
#define KTO_COMPLEX(S, s, ST, sc)                                                                         \
  KERNEL(dlp_convert_##s##_complex64) {                                                                  \
    EACH_ELEMENT(2, LOAD(ST, 1, v) dlp_c64 z_ = DLP_TO_COMPLEX64(s, sc, v); STORE(dlp_c64, z_);)          \
  }                                                                                                      \
  KERNEL(dlp_convert_##s##_complex128) {                                                                 \
    EACH_ELEMENT(2, LOAD(ST, 1, v) dlp_c128 z_ = DLP_TO_COMPLEX128(s, sc, v); STORE(dlp_c128, z_);)       \
  }
#if FAMILY(34)
DLP_REAL_DESTINATIONS(KFROM_COMPLEX, COMPLEX64, complex64, dlp_c64, -)
DLP_REAL_DESTINATIONS(KFROM_COMPLEX, COMPLEX128, complex128, dlp_c128, -)
KERNEL(dlp_convert_complex64_complex128) {
  EACH_ELEMENT(2, LOAD(dlp_c64, 1, v) dlp_c128 z_ = DLP_COMPLEX128_FROM_64(v); STORE(dlp_c128, z_);)
}
KERNEL(dlp_convert_complex128_complex64) {
  EACH_ELEMENT(2, LOAD(dlp_c128, 1, v) dlp_c64 z_ = DLP_COMPLEX64_FROM_128(v); STORE(dlp_c64, z_);)
}
#endif
#if FAMILY(35)
DLP_REAL_DTYPES(KTO_COMPLEX)
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

/* ---- reductions (families 28 to 31) ----
 * The launches args.h describes (dlp_ReduceParams), by ops.h's rules: pass 1 folds slices of
 * each output's elements, merges join the partial results in a fixed order, and the last step
 * finishes each output (repeats, means, variances) and writes it in its dtype. Inputs of any
 * dtype are read as the accumulator (the conversions of core/convert_rules.h, as the CPU's).
 * Family 20: integer and bool accumulators; 21: float32; 22: float64; 23: complex. */
#if DLP_FAMILY < 0 || DLP_FAMILY >= 20
#include "core/convert_rules.h"

#ifdef __CUDACC__
#define RFN static __device__ __forceinline__
#pragma nv_diag_suppress 177 /* the helpers serve four families: each leaves some unused */
#else
#define RFN static inline
#endif
#define RP (A.reduce)
#define RD(T, address) (*(const T *)BYTES((address), (int64_t)sizeof(T), 0))
#define WR(T, address, v) (*(T *)BYTES((address), (int64_t)sizeof(T), 1) = (v))

typedef struct r_c64 { float re, im; } r_c64;
typedef struct r_c128 { double re, im; } r_c128;

RFN int64_t r_size(int dt) {
  return dt == DLP_KT_C128 ? 16 : dt == DLP_KT_I64 || dt == DLP_KT_U64 || dt == DLP_KT_F64 || dt == DLP_KT_C64 ? 8
         : dt == DLP_KT_I32 || dt == DLP_KT_U32 || dt == DLP_KT_F32 ? 4
         : dt == DLP_KT_I16 || dt == DLP_KT_U16 || dt == DLP_KT_F16 || dt == DLP_KT_BF16 ? 2 : 1;
}
RFN int r_is_float(int dt) { return dt >= DLP_KT_F16; }

/* ---- loads: the element of dtype dt at a, as each accumulator reads it ---- */

/* a float element (a complex one's real part) as a double, exactly */
RFN double r_real(int dt, uint64_t a) {
  switch (dt) {
    case DLP_KT_F16: return dlp_rule_half_to_float(RD(uint16_t, a));
    case DLP_KT_BF16: return dlp_rule_bfloat_to_float(RD(uint16_t, a));
    case DLP_KT_F32: case DLP_KT_C64: return RD(float, a);
    default: return RD(double, a);
  }
}
/* an integer or bool element, sign-extended to 64 bits (bool: 0 or 1) */
RFN uint64_t r_bits(int dt, uint64_t a) {
  switch (dt) {
    case DLP_KT_BOOL: return RD(uint8_t, a) != 0;
    case DLP_KT_I8: return (uint64_t)(int64_t)RD(int8_t, a);
    case DLP_KT_I16: return (uint64_t)(int64_t)RD(int16_t, a);
    case DLP_KT_I32: return (uint64_t)(int64_t)RD(int32_t, a);
    case DLP_KT_U8: return RD(uint8_t, a);
    case DLP_KT_U16: return RD(uint16_t, a);
    case DLP_KT_U32: return RD(uint32_t, a);
    default: return RD(uint64_t, a);
  }
}
/* int64 (sgn) or uint64: integers wrap, floats truncate and saturate, complex by its real part */
RFN uint64_t r_load_u64(int dt, uint64_t a, int sgn) {
  if (!r_is_float(dt)) return r_bits(dt, a);
  return sgn ? (uint64_t)dlp_rule_sat_int64(r_real(dt, a)) : dlp_rule_sat_uint64(r_real(dt, a));
}
RFN float r_load_f32(int dt, uint64_t a, int sgn) {
  (void)sgn;
  if (r_is_float(dt)) return (float)r_real(dt, a);
  uint64_t v = r_bits(dt, a);
  return dt == DLP_KT_U64 ? to_float32_u64(v) : to_float32_i64((int64_t)v);
}
RFN double r_load_f64(int dt, uint64_t a, int sgn) {
  (void)sgn;
  if (r_is_float(dt)) return r_real(dt, a);
  uint64_t v = r_bits(dt, a);
  return dt == DLP_KT_U64 ? (double)v : (double)(int64_t)v;
}
RFN double r_imag(int dt, uint64_t a) {
  return dt == DLP_KT_C64 ? (double)RD(float, a + 4) : dt == DLP_KT_C128 ? RD(double, a + 8) : 0.0;
}
RFN r_c64 r_load_c64(int dt, uint64_t a, int sgn) {
  r_c64 c;
  c.re = r_load_f32(dt, a, sgn);
  c.im = (float)r_imag(dt, a);
  return c;
}
RFN r_c128 r_load_c128(int dt, uint64_t a, int sgn) {
  r_c128 c;
  c.re = r_load_f64(dt, a, sgn);
  c.im = r_imag(dt, a);
  return c;
}
/* any, all: nonzero (either part of a complex one; NaN is true) */
RFN b8 r_load_b8(int dt, uint64_t a, int sgn) {
  (void)sgn;
  if (!r_is_float(dt)) return r_bits(dt, a) != 0;
  return r_real(dt, a) != 0 || r_imag(dt, a) != 0;
}
/* min, max: integers and bool as int64 or uint64, float16 and bfloat16 as float32 */
RFN uint64_t r_load_bits(int dt, uint64_t a, int sgn) { (void)sgn; return r_bits(dt, a); }
#define R_LOAD_INT(T) (T) r_load_bits
#define r_load_ord_f32(dt, a, sgn) r_load_f32(dt, a, sgn)
#define r_load_ord_f64(dt, a, sgn) r_load_f64(dt, a, sgn)

/* ---- stores: a finished value in the result's dtype ---- */

RFN void r_store_bits(int dt, uint64_t a, uint64_t v) {
  switch (dt) {
    case DLP_KT_BOOL: WR(uint8_t, a, (uint8_t)(v != 0)); break;
    case DLP_KT_I8: case DLP_KT_U8: WR(uint8_t, a, (uint8_t)v); break;
    case DLP_KT_I16: case DLP_KT_U16: WR(uint16_t, a, (uint16_t)v); break;
    case DLP_KT_I32: case DLP_KT_U32: WR(uint32_t, a, (uint32_t)v); break;
    default: WR(uint64_t, a, v);
  }
}
RFN void r_store_f32(int dt, uint64_t a, float v) {
  if (dt == DLP_KT_F16) WR(uint16_t, a, dlp_rule_half_from_float(v));
  else if (dt == DLP_KT_BF16) WR(uint16_t, a, dlp_rule_bfloat_from_float(v));
  else WR(float, a, v);
}
RFN void r_store_f64(int dt, uint64_t a, double v) { (void)dt; WR(double, a, v); }
RFN void r_store_c64(int dt, uint64_t a, r_c64 v) { (void)dt; WR(float, a, v.re); WR(float, a + 4, v.im); }
RFN void r_store_c128(int dt, uint64_t a, r_c128 v) { (void)dt; WR(double, a, v.re); WR(double, a + 8, v.im); }
RFN void r_store_b8(int dt, uint64_t a, b8 v) { (void)dt; WR(uint8_t, a, v); }
#define r_store_int(dt, a, v) r_store_bits(dt, a, (uint64_t)(v))
#define r_store_u64 r_store_bits

/* ---- each accumulator: joining and finishing (ops.h's rules) ---- */

RFN uint64_t r_add_u64(uint64_t a, uint64_t b) { return a + b; }
RFN uint64_t r_mul_u64(uint64_t a, uint64_t b) { return a * b; }
RFN float r_add_f32(float a, float b) { return a + b; }
RFN float r_mul_f32(float a, float b) { return a * b; }
RFN double r_add_f64(double a, double b) { return a + b; }
RFN double r_mul_f64(double a, double b) { return a * b; }
RFN r_c64 r_add_c64(r_c64 a, r_c64 b) { a.re += b.re; a.im += b.im; return a; }
RFN r_c64 r_mul_c64(r_c64 a, r_c64 b) { dlp_cmul_f32(&a.re, &a.im, b.re, b.im); return a; }
RFN r_c128 r_add_c128(r_c128 a, r_c128 b) { a.re += b.re; a.im += b.im; return a; }
RFN r_c128 r_mul_c128(r_c128 a, r_c128 b) { dlp_cmul_f64(&a.re, &a.im, b.re, b.im); return a; }
RFN b8 r_any_b8(b8 a, b8 b) { return DLP_ANY_JOIN(a, b); }
RFN b8 r_all_b8(b8 a, b8 b) { return DLP_ALL_JOIN(a, b); }
RFN float r_sqdev_f32(float a, float x, float m) { return a + DLP_SQDEV(x, m); }
RFN double r_sqdev_f64(double a, double x, double m) { return a + DLP_SQDEV(x, m); }

RFN uint64_t r_zero_u64(void) { return 0; }
RFN uint64_t r_one_u64(void) { return 1; }
RFN float r_zero_f32(void) { return 0; }
RFN float r_one_f32(void) { return 1; }
RFN double r_zero_f64(void) { return 0; }
RFN double r_one_f64(void) { return 1; }
RFN r_c64 r_zero_c64(void) { r_c64 c = {0, 0}; return c; }
RFN r_c64 r_one_c64(void) { r_c64 c = {1, 0}; return c; }
RFN r_c128 r_zero_c128(void) { r_c128 c = {0, 0}; return c; }
RFN r_c128 r_one_c128(void) { r_c128 c = {1, 0}; return c; }
RFN b8 r_false_b8(void) { return 0; }
RFN b8 r_true_b8(void) { return 1; }

/* finishing: a sum or product over the repeats, then times scale over divisor (and the root) */
RFN uint64_t r_finish_u64(uint64_t v, int prod, int flags, int64_t rep, double scale, double divisor) {
  (void)scale, (void)divisor;
  return flags & DLP_R_REPEAT ? dlp_repeat_u64(prod, v, rep) : v;
}
RFN float r_finish_f32(float v, int prod, int flags, int64_t rep, double scale, double divisor) {
  if (flags & DLP_R_REPEAT) v = dlp_repeat_f32(prod, v, rep);
  if (flags & DLP_R_DIVIDE) v = dlp_divide_f32(v, scale, divisor, flags & DLP_R_ROOT);
  return v;
}
RFN double r_finish_f64(double v, int prod, int flags, int64_t rep, double scale, double divisor) {
  if (flags & DLP_R_REPEAT) v = dlp_repeat_f64(prod, v, rep);
  if (flags & DLP_R_DIVIDE) v = dlp_divide_f64(v, scale, divisor, flags & DLP_R_ROOT);
  return v;
}
RFN r_c64 r_finish_c64(r_c64 v, int prod, int flags, int64_t rep, double scale, double divisor) {
  (void)scale;
  if (flags & DLP_R_REPEAT) {
    double re = v.re, im = v.im;
    dlp_repeat_c128(prod, &re, &im, rep);
    v.re = (float)re;
    v.im = (float)im;
  }
  if (flags & DLP_R_DIVIDE) {
    v.re = dlp_divide_part_f32(v.re, divisor);
    v.im = dlp_divide_part_f32(v.im, divisor);
  }
  return v;
}
RFN r_c128 r_finish_c128(r_c128 v, int prod, int flags, int64_t rep, double scale, double divisor) {
  (void)scale;
  if (flags & DLP_R_REPEAT) dlp_repeat_c128(prod, &v.re, &v.im, rep);
  if (flags & DLP_R_DIVIDE) {
    v.re = dlp_divide_part_f64(v.re, divisor);
    v.im = dlp_divide_part_f64(v.im, divisor);
  }
  return v;
}
RFN b8 r_finish_b8(b8 v, int prod, int flags, int64_t rep, double scale, double divisor) {
  (void)prod, (void)flags, (void)rep, (void)scale, (void)divisor;
  return v;
}

/* ---- walking ---- */

/* result: the byte offset (strides[k]) of index i, numbered in row-major order of dims [from, to) */
#define R_SPLIT(i, from, to, k, result)                                                               \
  do {                                                                                                \
    int64_t rest_ = (i);                                                                              \
    result = 0;                                                                                       \
    ROLLED                                                                                            \
    for (int d_ = (to) - 1; d_ >= (from); d_--) {                                                     \
      int64_t n_ = A.shape[d_];                                                                       \
      result += rest_ % n_ * A.strides[k][d_];                                                        \
      rest_ /= n_;                                                                                    \
    }                                                                                                 \
  } while (0)
/* the input's element at walked position r of the output whose kept offset is base */
#define R_AT(base, r, address)                                                                        \
  do {                                                                                                \
    int64_t off_;                                                                                     \
    if (A.ndim - RP.kept == 1) off_ = (r) * A.strides[1][A.ndim - 1];                                 \
    else R_SPLIT(r, RP.kept, A.ndim, 1, off_);                                                        \
    address = A.data[1] + (uint64_t)((base) + off_);                                                  \
  } while (0)

/* pass 1's items: output o, slice p of P */
#define R_ITEMS(...)                                                                                  \
  for (int64_t w_ = THREAD, step_ = THREADS; w_ < A.numel; w_ += step_) {                             \
    const int64_t K = RP.outputs, P = RP.parts;                                                       \
    const int inner_ = (RP.flags & DLP_R_REDUCED_INNER) != 0;                                         \
    const int64_t o = inner_ ? w_ / P : w_ % K, p = inner_ ? w_ % P : w_ / K;                         \
    int64_t base;                                                                                     \
    R_SPLIT(o, 0, RP.kept, 1, base);                                                                  \
    __VA_ARGS__                                                                                       \
  }
/* a merge's items: output o, partial results first .. end - 1, written as partial q */
#define R_MERGE_ITEMS(...)                                                                            \
  for (int64_t w_ = THREAD, step_ = THREADS; w_ < A.numel; w_ += step_) {                             \
    const int64_t K = RP.outputs, o = w_ % K, q = w_ / K, first = q * RP.group;                       \
    const int64_t end = first + RP.group < RP.parts ? first + RP.group : RP.parts;                    \
    __VA_ARGS__                                                                                       \
  }

/* the accumulator v of output o: finished and written as the result, or as partial q */
#define R_PUT(S, T, PROD, v, q)                                                                       \
  if (RP.flags & DLP_R_FINAL)                                                                         \
    r_store_##S(RP.out_dtype, A.data[0] + (uint64_t)(o * r_size(RP.out_dtype)),                       \
                r_finish_##S(v, PROD, RP.flags, RP.repeats, RP.scale, RP.divisor));                   \
  else                                                                                                \
    WR(T, A.data[0] + (uint64_t)(((q) * K + o) * (int64_t)sizeof(T)), v);
/* the best value b at walked position bi: the value and the 1-based index among all the reduced
 * dims, or partial q */
#define R_PUT_ORDERED(STORE, T, b, bi, q)                                                             \
  if (RP.flags & DLP_R_FINAL) {                                                                       \
    int64_t at_;                                                                                      \
    if (!(RP.flags & DLP_R_NO_VALUES)) STORE(RP.out_dtype, A.data[0] + (uint64_t)(o * r_size(RP.out_dtype)), b); \
    R_SPLIT(bi, RP.kept, A.ndim, 2, at_);                                                             \
    WR(int64_t, A.data[3] + (uint64_t)(o * 8), at_ + 1);                                              \
  } else {                                                                                            \
    WR(T, A.data[0] + (uint64_t)(((q) * K + o) * (int64_t)sizeof(T)), b);                             \
    WR(int64_t, A.data[3] + (uint64_t)(((q) * K + o) * 8), bi);                                       \
  }

/* acc: the partial results first .. end - 1 of output o joined pairwise, in order (a sum's rounding
 * errors grow with the log of the group, not its length): a binary counter of partial joins */
#define R_PAIRWISE(T, JOIN, acc)                                                                      \
  do {                                                                                                \
    T stack_[8]; /* groups of up to 128: at most 8 pending */                                        \
    int top_ = 0;                                                                                     \
    for (int64_t j = first; j < end; j++) {                                                           \
      T v_ = RD(T, A.data[1] + (uint64_t)((j * K + o) * (int64_t)sizeof(T)));                        \
      for (int64_t c_ = j - first; c_ & 1; c_ >>= 1) v_ = JOIN(stack_[--top_], v_);                   \
      stack_[top_++] = v_;                                                                            \
    }                                                                                                 \
    acc = stack_[--top_];                                                                             \
    while (top_ > 0) acc = JOIN(stack_[--top_], acc);                                                 \
  } while (0)

/* sum, prod, any, all: JOIN(acc, element) from INIT; merges JOIN the partials pairwise */
#define R_FOLD(name, S, T, INIT, JOIN, PROD)                                                          \
  KERNEL(dlp_##name) {                                                                                \
    R_ITEMS(T acc = INIT();                                                                           \
            for (int64_t r = p; r < RP.walked; r += P) {                                              \
              uint64_t at;                                                                            \
              R_AT(base, r, at);                                                                      \
              acc = JOIN(acc, r_load_##S(RP.in_dtype, at, RP.acc_dtype == DLP_KT_I64));               \
            }                                                                                         \
            R_PUT(S, T, PROD, acc, p))                                                                \
  }                                                                                                   \
  KERNEL(dlp_##name##_merge) { R_MERGE_ITEMS(T acc; R_PAIRWISE(T, JOIN, acc); R_PUT(S, T, PROD, acc, q)) }
/* var's second pass: the squared deviations from the means (data[2], one per output) */
#define R_SQDEV(name, S, T)                                                                           \
  KERNEL(dlp_##name) {                                                                                \
    R_ITEMS(T acc = 0, mean = RD(T, A.data[2] + (uint64_t)(o * (int64_t)sizeof(T)));                  \
            for (int64_t r = p; r < RP.walked; r += P) {                                              \
              uint64_t at;                                                                            \
              R_AT(base, r, at);                                                                      \
              acc = r_sqdev_##S(acc, r_load_##S(RP.in_dtype, at, 0), mean);                           \
            }                                                                                         \
            R_PUT(S, T, 0, acc, p))                                                                   \
  }                                                                                                   \
  KERNEL(dlp_##name##_merge) { R_MERGE_ITEMS(T acc; R_PAIRWISE(T, r_add_##S, acc); R_PUT(S, T, 0, acc, q)) }
/* min, max, argmin, argmax: each slice walked in order (it is never empty: parts <= walked) */
#define R_ORDERED(name, T, LOAD, STORE, BEATS, ISNAN)                                                 \
  KERNEL(dlp_##name) {                                                                                \
    R_ITEMS(uint64_t at;                                                                              \
            R_AT(base, p, at);                                                                        \
            T b = LOAD(RP.in_dtype, at, 1);                                                           \
            int64_t bi = p;                                                                           \
            for (int64_t r = p + P; r < RP.walked && !ISNAN(b); r += P) {                             \
              R_AT(base, r, at);                                                                      \
              T x = LOAD(RP.in_dtype, at, 1);                                                         \
              if (BEATS(x, b, ISNAN)) {                                                               \
                b = x;                                                                                \
                bi = r;                                                                               \
              }                                                                                       \
            }                                                                                         \
            R_PUT_ORDERED(STORE, T, b, bi, p))                                                        \
  }                                                                                                   \
  KERNEL(dlp_##name##_merge) {                                                                        \
    R_MERGE_ITEMS(T b = RD(T, A.data[1] + (uint64_t)((first * K + o) * (int64_t)sizeof(T)));         \
                  int64_t bi = RD(int64_t, A.data[2] + (uint64_t)((first * K + o) * 8));              \
                  for (int64_t j = first + 1; j < end; j++) {                                         \
                    T v = RD(T, A.data[1] + (uint64_t)((j * K + o) * (int64_t)sizeof(T)));            \
                    int64_t vi = RD(int64_t, A.data[2] + (uint64_t)((j * K + o) * 8));                \
                    if (DLP_REPLACES(BEATS, v, vi, b, bi, ISNAN)) {                                   \
                      b = v;                                                                          \
                      bi = vi;                                                                        \
                    }                                                                                 \
                  }                                                                                   \
                  R_PUT_ORDERED(STORE, T, b, bi, q))                                                  \
  }
#define R_ORDERED_PAIR(s, T, LOAD, STORE, ISNAN)                                                      \
  R_ORDERED(rmax_##s, T, LOAD, STORE, DLP_BEATS_MAX, ISNAN)                                           \
  R_ORDERED(rmin_##s, T, LOAD, STORE, DLP_BEATS_MIN, ISNAN)
#endif

/* The reduction kernels of each family, ENTRY(name) for pass 1 and its merge. */
/* min and max of the integers and bool compare in 64 bits: values read sign- or zero-extended
 * keep their order, and are written back in the input's dtype */
#define R_INT_ORDERED(X) X(i64, int64_t) X(u64, uint64_t)
#define R_INT_ORDERED_KERNELS(s, T) R_ORDERED_PAIR(s, T, R_LOAD_INT(T), r_store_int, DLP_NEVER_NAN)
#define R_FLOAT_KERNELS(s, T)                                                                         \
  R_FOLD(rsum_##s, s, T, r_zero_##s, r_add_##s, 0)                                                    \
  R_FOLD(rprod_##s, s, T, r_one_##s, r_mul_##s, 1)                                                    \
  R_SQDEV(rsqdev_##s, s, T)                                                                           \
  R_ORDERED_PAIR(s, T, r_load_ord_##s, r_store_##s, DLP_IS_NAN)
#define R_COMPLEX_KERNELS(s, T)                                                                       \
  R_FOLD(rsum_##s, s, T, r_zero_##s, r_add_##s, 0)                                                    \
  R_FOLD(rprod_##s, s, T, r_one_##s, r_mul_##s, 1)
#if FAMILY(28)
R_FOLD(rsum_u64, u64, uint64_t, r_zero_u64, r_add_u64, 0)
R_FOLD(rprod_u64, u64, uint64_t, r_one_u64, r_mul_u64, 1)
R_FOLD(rany_b8, b8, b8, r_false_b8, r_any_b8, 0)
R_FOLD(rall_b8, b8, b8, r_true_b8, r_all_b8, 0)
R_INT_ORDERED(R_INT_ORDERED_KERNELS)
#endif
#if FAMILY(29)
R_FLOAT_KERNELS(f32, float)
#endif
#if FAMILY(30)
R_FLOAT_KERNELS(f64, double)
#endif
#if FAMILY(31)
R_COMPLEX_KERNELS(c64, r_c64)
R_COMPLEX_KERNELS(c128, r_c128)
#endif

/* ---- indexing with tensors (family 42; src/compute/index.c) ----
 * These take their parameters in the launch's value slots (none of their operands is a scalar):
 * P(n) is the n-th int64 of value[1..3]. Indices are 1-based, negatives counting from the end.
 *   dlp_index_check_<s>: operand 0 a flag byte (strides 0) set when an index of operand 1 (of
 *     type s) is outside 1 .. P(0); every thread that sets it writes the same value.
 *   dlp_gather_<size>: operand 0 the result, 1 the int64 indices (checked before), 2 the source
 *     at the indexed dimension's first element, P(0) bytes per index step, P(1) the dim's size.
 *   dlp_scatter_<size>: each element of the launch is one line of the index along the indexed
 *     dimension, walked in order by one thread (so of duplicate indices the last write wins,
 *     and lines write disjoint elements): operand 0 the destination at the dimension's first
 *     element (P(0) bytes per step, P(1) the size), 1 the indices (P(3) bytes apart along the
 *     line), 2 the source (P(4) bytes apart), P(2) indices per line. */
#define P(n) ((int64_t)A.value[1 + (n) / 2][(n) % 2])
#define INDEX_AT(v, size) ((v) < 0 ? (v) + (size) : (v) - 1)
#define KCHECK_SIGNED(s, T)                                                                            \
  KERNEL(dlp_index_check_##s) {                                                                        \
    EACH_ELEMENT(2, int64_t v_ = *(const T *)BYTES(A.data[1] + (uint64_t)off[1], (int64_t)sizeof(T), 0); \
                 if ((uint64_t)INDEX_AT(v_, P(0)) >= (uint64_t)P(0))                                   \
                   *(b8 *)BYTES(A.data[0] + (uint64_t)off[0], 1, 1) = 1;)                              \
  }
#define KCHECK_UNSIGNED(s, T)                                                                          \
  KERNEL(dlp_index_check_##s) {                                                                        \
    EACH_ELEMENT(2, uint64_t v_ = *(const T *)BYTES(A.data[1] + (uint64_t)off[1], (int64_t)sizeof(T), 0); \
                 if (v_ - 1 >= (uint64_t)P(0)) *(b8 *)BYTES(A.data[0] + (uint64_t)off[0], 1, 1) = 1;)  \
  }
#define INDEX_CHECKS(SIGNED, UNSIGNED) SIGNED(i8, int8_t) SIGNED(i16, int16_t) SIGNED(i32, int32_t) \
  SIGNED(i64, int64_t) UNSIGNED(u8, uint8_t) UNSIGNED(u16, uint16_t) UNSIGNED(u32, uint32_t) UNSIGNED(u64, uint64_t)
#define KGATHER(n, T)                                                                                  \
  KERNEL(dlp_gather_##n) {                                                                             \
    EACH_ELEMENT(3, int64_t k_ = *(const int64_t *)BYTES(A.data[1] + (uint64_t)off[1], 8, 0);          \
                 k_ = INDEX_AT(k_, P(1));                                                              \
                 *(T *)BYTES(A.data[0] + (uint64_t)off[0], (int64_t)sizeof(T), 1) =                    \
                   *(const T *)BYTES(A.data[2] + (uint64_t)(off[2] + k_ * P(0)), (int64_t)sizeof(T), 0);) \
  }
#define KSCATTER(n, T)                                                                                 \
  KERNEL(dlp_scatter_##n) {                                                                            \
    EACH_ELEMENT(3, ROLLED for (int64_t j_ = 0; j_ < P(2); j_++) {                                     \
      int64_t k_ = *(const int64_t *)BYTES(A.data[1] + (uint64_t)(off[1] + j_ * P(3)), 8, 0);          \
      k_ = INDEX_AT(k_, P(1));                                                                         \
      *(T *)BYTES(A.data[0] + (uint64_t)(off[0] + k_ * P(0)), (int64_t)sizeof(T), 1) =                 \
        *(const T *)BYTES(A.data[2] + (uint64_t)(off[2] + j_ * P(4)), (int64_t)sizeof(T), 0);          \
    })                                                                                                 \
  }
#define INDEX_SIZES(K) K(1, uint8_t) K(2, uint16_t) K(4, uint32_t) K(8, uint64_t) K(16, bytes16)
/* The counting functions (nonzero, argwhere, count_nonzero, masked_select), deterministic:
 *   dlp_truth_<kind>: operand 0 an int64 flag per element (1 when operand 1's element is true:
 *     any nonzero bit, but for the sign bits of floats, so -0.0 is false and NaN true).
 *   dlp_sum_along: operand 0 = the sum of P(1) int64s of operand 1, P(0) bytes apart.
 *   dlp_scan_sums / dlp_scan_apply: an inclusive prefix sum of P(0) contiguous int64s in blocks of
 *     P(1), one thread per block (numel: the blocks): the blocks' sums (operand 0) of the values
 *     (operand 1); then, once the sums are scanned the same way, each block of operand 0 turned
 *     into running sums from the sum of the blocks before it (operand 1).
 *   dlp_compact: over the scanned flags (operand 1, numel of them), each true element's flat
 *     index i goes to slot (sum - 1) of operand 0, which only its thread writes.
 *   dlp_unravel: operand 0 one column of nonzero's result (P(2) bytes per row) of flat indices
 *     (operand 1): (i / P(0)) % P(1) + 1.
 *   dlp_select_<size>: operand 0 the result (strides 0), 1 the scanned flags of the launch's
 *     elements (contiguous), 2 the elements: each true one goes to slot (sum - 1). */
#define I64(address) (*(int64_t *)BYTES((address), 8, 0))
#define SET_I64(address, v) (*(int64_t *)BYTES((address), 8, 1) = (v))
#define KTRUTH(kind, T, TRUE)                                                                          \
  KERNEL(dlp_truth_##kind) {                                                                           \
    EACH_ELEMENT(2, T x = *(const T *)BYTES(A.data[1] + (uint64_t)off[1], (int64_t)sizeof(T), 0);      \
                 SET_I64(A.data[0] + (uint64_t)off[0], (TRUE) ? 1 : 0);)                               \
  }
#define SIGN64 0x7fffffffffffffffull
#define TRUTHS(K) K(b1, uint8_t, x != 0) K(b2, uint16_t, x != 0) K(b4, uint32_t, x != 0) K(b8, uint64_t, x != 0) \
  K(f16, uint16_t, (x & 0x7fffu) != 0) K(f32, uint32_t, (x & 0x7fffffffu) != 0) K(f64, uint64_t, (x & SIGN64) != 0) \
  K(c64, uint64_t, (x & 0x7fffffff7fffffffull) != 0) K(c128, bytes16, ((x.lo | x.hi) & SIGN64) != 0)
#define KSELECT(n, T)                                                                                  \
  KERNEL(dlp_select_##n) {                                                                             \
    EACH_ELEMENT(3, int64_t s_ = I64(A.data[1] + (uint64_t)off[1]);                                    \
                 int64_t before_ = off[1] > 0 ? I64(A.data[1] + (uint64_t)off[1] - 8) : 0;             \
                 if (s_ != before_) *(T *)BYTES(A.data[0] + (uint64_t)((s_ - 1) * (int64_t)sizeof(T)),  \
                                                (int64_t)sizeof(T), 1) =                               \
                   *(const T *)BYTES(A.data[2] + (uint64_t)off[2], (int64_t)sizeof(T), 0);)             \
  }
#if FAMILY(42)
INDEX_CHECKS(KCHECK_SIGNED, KCHECK_UNSIGNED)
INDEX_SIZES(KGATHER)
INDEX_SIZES(KSCATTER)
TRUTHS(KTRUTH)
INDEX_SIZES(KSELECT)
KERNEL(dlp_sum_along) {
  EACH_ELEMENT(2, int64_t sum_ = 0; ROLLED for (int64_t k_ = 0; k_ < P(1); k_++) sum_ +=
                  I64(A.data[1] + (uint64_t)(off[1] + k_ * P(0)));
               SET_I64(A.data[0] + (uint64_t)off[0], sum_);)
}
KERNEL(dlp_scan_sums) {
  for (int64_t b = THREAD, threads_ = THREADS; b < A.numel; b += threads_) {
    int64_t end_ = (b + 1) * P(1) < P(0) ? (b + 1) * P(1) : P(0), sum_ = 0;
    ROLLED for (int64_t i = b * P(1); i < end_; i++) sum_ += I64(A.data[1] + (uint64_t)i * 8);
    SET_I64(A.data[0] + (uint64_t)b * 8, sum_);
  }
}
KERNEL(dlp_scan_apply) {
  for (int64_t b = THREAD, threads_ = THREADS; b < A.numel; b += threads_) {
    int64_t end_ = (b + 1) * P(1) < P(0) ? (b + 1) * P(1) : P(0);
    int64_t run_ = b > 0 ? I64(A.data[1] + (uint64_t)(b - 1) * 8) : 0;
    ROLLED for (int64_t i = b * P(1); i < end_; i++) {
      run_ += I64(A.data[0] + (uint64_t)i * 8);
      SET_I64(A.data[0] + (uint64_t)i * 8, run_);
    }
  }
}
KERNEL(dlp_compact) {
  for (int64_t i = THREAD, threads_ = THREADS; i < A.numel; i += threads_) {
    int64_t s_ = I64(A.data[1] + (uint64_t)i * 8), before_ = i > 0 ? I64(A.data[1] + (uint64_t)(i - 1) * 8) : 0;
    if (s_ != before_) SET_I64(A.data[0] + (uint64_t)(s_ - 1) * 8, i);
  }
}
KERNEL(dlp_unravel) {
  for (int64_t r = THREAD, threads_ = THREADS; r < A.numel; r += threads_)
    SET_I64(A.data[0] + (uint64_t)(r * P(2)), I64(A.data[1] + (uint64_t)r * 8) / P(0) % P(1) + 1);
}
#endif

/* ---- scans (family 46; src/compute/scan.c, args.h) ----
 * Operand 0 holds the input already converted to the result's dtype s, scanned in place; each
 * step rounded to s as the CPU's loop rounds it (float16 and bfloat16 through float32).
 * Integers wrap (the low bits of a 64-bit product), bool is or / and.
 *   dlp_cumsum_<s>, dlp_cumprod_<s>: each element of the launch is one line (operand 0 at its
 *     first element), scanned in order by one thread: the CPU's bits.
 *   ..._chunks: each element of the launch is one chunk of a line (operand 0 at its first
 *     element, operand 1 at its total): the chunk scanned in order, its total written. Once the
 *     totals are scanned along each line (the kernel above), ..._apply joins each chunk but the
 *     first with the total of the chunks before it (the previous chunk's scanned total), x =
 *     total + x (total * x). Integers and bool give the CPU's bits; floats differ by rounding. */
#define SP(n) DLP_SCAN_PARAM(A, n)
#define SCAN_INTS(K) K(u8, uint8_t) K(u16, uint16_t) K(u32, uint32_t) K(u64, uint64_t)
#define SCAN_INT_STEPS(s, T)                                                                           \
  RFN T scan_sum_##s(T a, T b) { return (T)(a + b); }                                                  \
  RFN T scan_prod_##s(T a, T b) { return (T)((uint64_t)a * b); }
#define SCAN_HALF_STEPS(s, TO_FLOAT, FROM_DOUBLE)                                                      \
  RFN uint16_t scan_sum_##s(uint16_t a, uint16_t b) { return FROM_DOUBLE((double)(TO_FLOAT(a) + TO_FLOAT(b))); } \
  RFN uint16_t scan_prod_##s(uint16_t a, uint16_t b) { return FROM_DOUBLE((double)(TO_FLOAT(a) * TO_FLOAT(b))); }
#define SCAN_AT(T, address) (*(T *)BYTES((address), (int64_t)sizeof(T), 0))
#define SCAN_SET(T, address, v) (*(T *)BYTES((address), (int64_t)sizeof(T), 1) = (v))
/* elements 1 .. count - 1 from p_ (element 0 is acc_) made their running results */
#define SCAN_RUN(T, STEP, count)                                                                       \
  ROLLED for (int64_t j_ = 1; j_ < (count); j_++) {                                                    \
    uint64_t q_ = p_ + (uint64_t)(j_ * SP(1));                                                         \
    acc_ = STEP(acc_, SCAN_AT(T, q_));                                                                 \
    SCAN_SET(T, q_, acc_);                                                                             \
  }
/* the chunk of this element of the launch, and its length */
#define SCAN_CHUNK_OF                                                                                  \
  int64_t k_ = off[1] / SP(3) % SP(2);                                                                 \
  int64_t count_ = SP(0) - k_ * DLP_SCAN_CHUNK < DLP_SCAN_CHUNK ? SP(0) - k_ * DLP_SCAN_CHUNK : DLP_SCAN_CHUNK;
#define KSCAN(name, T, STEP)                                                                           \
  KERNEL(dlp_##name) {                                                                                 \
    EACH_ELEMENT(1, uint64_t p_ = A.data[0] + (uint64_t)off[0]; T acc_ = SCAN_AT(T, p_);                \
                 SCAN_RUN(T, STEP, SP(0)))                                                             \
  }
#define KSCAN_CHUNKS(name, T, STEP)                                                                    \
  KERNEL(dlp_##name##_chunks) {                                                                        \
    EACH_ELEMENT(2, SCAN_CHUNK_OF uint64_t p_ = A.data[0] + (uint64_t)off[0]; T acc_ = SCAN_AT(T, p_); \
                 SCAN_RUN(T, STEP, count_) SCAN_SET(T, A.data[1] + (uint64_t)off[1], acc_);)          \
  }                                                                                                    \
  KERNEL(dlp_##name##_apply) {                                                                         \
    EACH_ELEMENT(2, SCAN_CHUNK_OF if (k_ > 0) {                                                        \
      T before_ = SCAN_AT(T, A.data[1] + (uint64_t)(off[1] - SP(3)));                                  \
      ROLLED for (int64_t j_ = 0; j_ < count_; j_++) {                                                 \
        uint64_t q_ = A.data[0] + (uint64_t)(off[0] + j_ * SP(1));                                     \
        SCAN_SET(T, q_, STEP(before_, SCAN_AT(T, q_)));                                                \
      }                                                                                                \
    })                                                                                                 \
  }
#define KSCANS(s, T) KSCAN(cumsum_##s, T, scan_sum_##s) KSCAN(cumprod_##s, T, scan_prod_##s)
#define KSCANS_CHUNKED(s, T) KSCANS(s, T) \
  KSCAN_CHUNKS(cumsum_##s, T, scan_sum_##s) KSCAN_CHUNKS(cumprod_##s, T, scan_prod_##s)
/* float16 and bfloat16 lines are always scanned whole: chunks would round differently */
#define SCAN_HALF_TYPES(K) K(f16, uint16_t) K(bf16, uint16_t)
#define SCAN_CHUNKED_TYPES(K) K(b8, uint8_t) SCAN_INTS(K) K(f32, float) K(f64, double) K(c64, r_c64) K(c128, r_c128)
#if FAMILY(46)
RFN uint8_t scan_sum_b8(uint8_t a, uint8_t b) { return a || b; }
RFN uint8_t scan_prod_b8(uint8_t a, uint8_t b) { return a && b; }
SCAN_INTS(SCAN_INT_STEPS)
SCAN_HALF_STEPS(f16, dlp_rule_half_to_float, dlp_rule_half_from_double)
SCAN_HALF_STEPS(bf16, dlp_rule_bfloat_to_float, dlp_rule_bfloat_from_double)
#define scan_sum_f32 r_add_f32
#define scan_prod_f32 r_mul_f32
#define scan_sum_f64 r_add_f64
#define scan_prod_f64 r_mul_f64
#define scan_sum_c64 r_add_c64
#define scan_prod_c64 r_mul_c64
#define scan_sum_c128 r_add_c128
#define scan_prod_c128 r_mul_c128
SCAN_HALF_TYPES(KSCANS)
SCAN_CHUNKED_TYPES(KSCANS_CHUNKED)
#endif

/* ---- sorting (family 44; src/compute/sort.c) ----
 * Each line is sorted as (key, position) pairs (sort_rules.h's keys; the position breaks ties,
 * so that equal elements keep their order) by a bitonic network, one launch per step. P(n) as
 * for indexing.
 *   dlp_sort_keys_<s>: operand 0 the uint64 keys (contiguous, lines of P(0)), 1 the input, 2 the
 *     int64 positions (laid out as the keys): each element's key xor P(1), and its position in
 *     its line (from its slot in operand 0).
 *   dlp_sort_step: one step over every line (P(0) pairs each, in operands 0 and 1), padded to
 *     2 P(1) with elements greater than any (which never move): item w is pair w % P(1) of line
 *     w / P(1), in blocks of 2 P(2); a block's first step (P(3) = 1) pairs each element of its
 *     lower half with its mirror in the upper half, the others with the element P(2) above.
 *     Each thread owns its pair: the smaller goes below.
 *   dlp_sort_values_<size>: operand 0 the values, 1 the sorted positions, 2 the input at its
 *     line's first element (stride 0 along the line), P(0) bytes per position.
 *   dlp_sort_indices: operand 0 the 1-based positions of operand 1.
 *   dlp_quantile_<s>: operand 0 the float64 results, 1 the sorted line's first element (lines of
 *     P(0), P(1) bytes apart), 2 the float64 quantile (unless a median: P(3) = 1); P(2) the
 *     result's dtype (its rounding), P(4) 1 when q was a weak scalar (sort_rules.h's arithmetic).
 * unique (one item per sorted element, or per distinct value; every operand contiguous):
 *   dlp_unique_flags: operand 0 an int64 per sorted element, 1 where its key (operand 1) differs
 *     from the one before (always for the first): equal keys are equal elements.
 *   dlp_unique_take_<size>: with operand 1 the running sums of those flags (each element's value,
 *     1-based), the first element of each value (operand 2, the sorted elements) goes to slot
 *     value - 1 of operand 0, and its place to the same slot of operand 3 (the int64 starts).
 *   dlp_unique_counts: operand 0 the count of each value, from its start (operand 1) to the next
 *     one's (the last's: P(0), the element count).
 *   dlp_unique_inverse: each sorted element's value (operand 1) written to operand 0 at its
 *     1-based place in the input (operand 2) less 1: the places are a permutation. */
#define KSORTKEY(s, T, KEY)                                                                            \
  KERNEL(dlp_sort_keys_##s) {                                                                          \
    EACH_ELEMENT(3, T x = *(const T *)BYTES(A.data[1] + (uint64_t)off[1], (int64_t)sizeof(T), 0);      \
                 *(uint64_t *)BYTES(A.data[0] + (uint64_t)off[0], 8, 1) = (uint64_t)(KEY) ^ (uint64_t)P(1); \
                 SET_I64(A.data[2] + (uint64_t)off[2], off[0] / 8 % P(0));)                            \
  }
#define SORT_KEYS(K) K(bool, uint8_t, x != 0) K(u8, uint8_t, x) K(i8, uint8_t, x ^ 0x80u) K(u16, uint16_t, x) \
  K(i16, uint16_t, x ^ 0x8000u) K(u32, uint32_t, x) K(i32, uint32_t, x ^ DLP_SIGN32) K(u64, uint64_t, x)      \
  K(i64, uint64_t, x ^ DLP_SIGN64) K(f16, uint16_t, dlp_key_float16(x)) K(bf16, uint16_t, dlp_key_bfloat16(x)) \
  K(f32, uint32_t, dlp_key_float32(x)) K(f64, uint64_t, dlp_key_float64(x))
#define KSORTVALUES(n, T)                                                                              \
  KERNEL(dlp_sort_values_##n) {                                                                        \
    EACH_ELEMENT(3, int64_t at_ = I64(A.data[1] + (uint64_t)off[1]);                                   \
                 *(T *)BYTES(A.data[0] + (uint64_t)off[0], (int64_t)sizeof(T), 1) =                    \
                   *(const T *)BYTES(A.data[2] + (uint64_t)(off[2] + at_ * P(0)), (int64_t)sizeof(T), 0);) \
  }
#define SORT_SIZES(K) K(1, uint8_t) K(2, uint16_t) K(4, uint32_t) K(8, uint64_t)
#define SORTED_AT(T, k) (*(const T *)BYTES(A.data[1] + (uint64_t)(off[1] + (k) * P(1)), (int64_t)sizeof(T), 0))
#define KQUANTILE(s, T, ELEMENT, DIFFERENCE)                                                           \
  KERNEL(dlp_quantile_##s) {                                                                           \
    EACH_ELEMENT(3, int64_t n_ = P(0); int d_ = (int)P(2); double r_ = NAN;                            \
                 if (n_ > 0 && ELEMENT(SORTED_AT(T, n_ - 1)) == ELEMENT(SORTED_AT(T, n_ - 1))) {       \
                   if (P(3)) {                                                                         \
                     double a_ = ELEMENT(SORTED_AT(T, (n_ - 1) / 2)), b_ = ELEMENT(SORTED_AT(T, n_ / 2)); \
                     r_ = dlp_median_of(d_, n_, a_, b_);                                               \
                   } else {                                                                            \
                     int64_t i_, k_;                                                                   \
                     double gamma_, q_ = *(const double *)BYTES(A.data[2] + (uint64_t)off[2], 8, 0);   \
                     dlp_quantile_place(q_, n_, &i_, &k_, &gamma_);                                    \
                     T a_ = SORTED_AT(T, i_), b_ = SORTED_AT(T, k_);                                   \
                     r_ = dlp_lerp(d_, gamma_, P(4) ? dlp_round_to(d_, gamma_) : gamma_, ELEMENT(a_), ELEMENT(b_), \
                                   DIFFERENCE);                                                        \
                   }                                                                                   \
                 }                                                                                     \
                 *(double *)BYTES(A.data[0] + (uint64_t)off[0], 8, 1) = r_;)                           \
  }
#define AS_DOUBLE(x) ((double)(x))
#define BOOL_DOUBLE(x) ((double)((x) != 0))
#define HALF_DOUBLE(x) ((double)dlp_rule_half_to_float(x))
#define BFLOAT_DOUBLE(x) ((double)dlp_rule_bfloat_to_float(x))
#define QUANTILES(K) K(bool, uint8_t, BOOL_DOUBLE, 0) K(u8, uint8_t, AS_DOUBLE, (double)b_ - (double)a_)              \
  K(u16, uint16_t, AS_DOUBLE, (double)b_ - (double)a_) K(u32, uint32_t, AS_DOUBLE, (double)b_ - (double)a_)          \
  K(u64, uint64_t, AS_DOUBLE, (double)b_ - (double)a_) K(i8, int8_t, AS_DOUBLE, dlp_wrapped_difference(a_, b_, 1))  \
  K(i16, int16_t, AS_DOUBLE, dlp_wrapped_difference(a_, b_, 2))                                                    \
  K(i32, int32_t, AS_DOUBLE, dlp_wrapped_difference(a_, b_, 4))                                                    \
  K(i64, int64_t, AS_DOUBLE, dlp_wrapped_difference(a_, b_, 8))                                                    \
  K(f16, uint16_t, HALF_DOUBLE, dlp_round_to(DLP_KD_FLOAT16, HALF_DOUBLE(b_) - HALF_DOUBLE(a_)))                  \
  K(bf16, uint16_t, BFLOAT_DOUBLE, dlp_round_to(DLP_KD_BFLOAT16, BFLOAT_DOUBLE(b_) - BFLOAT_DOUBLE(a_)))          \
  K(f32, float, AS_DOUBLE, dlp_round_to(DLP_KD_FLOAT32, (double)b_ - (double)a_)) K(f64, double, AS_DOUBLE, b_ - a_)
#define AT64(k, i) I64(A.data[k] + (uint64_t)(i) * 8)
#define KUNIQUETAKE(n, T)                                                                              \
  KERNEL(dlp_unique_take_##n) {                                                                        \
    for (int64_t i = THREAD, threads_ = THREADS; i < A.numel; i += threads_) {                         \
      int64_t g_ = AT64(1, i), before_ = i > 0 ? AT64(1, i - 1) : 0;                                   \
      if (g_ == before_) continue;                                                                     \
      *(T *)BYTES(A.data[0] + (uint64_t)(g_ - 1) * sizeof(T), (int64_t)sizeof(T), 1) =                 \
        *(const T *)BYTES(A.data[2] + (uint64_t)i * sizeof(T), (int64_t)sizeof(T), 0);                 \
      SET_I64(A.data[3] + (uint64_t)(g_ - 1) * 8, i);                                                  \
    }                                                                                                  \
  }
#if FAMILY(44)
SORT_SIZES(KUNIQUETAKE)
KERNEL(dlp_unique_flags) {
  for (int64_t i = THREAD, threads_ = THREADS; i < A.numel; i += threads_)
    SET_I64(A.data[0] + (uint64_t)i * 8, i == 0 || AT64(1, i) != AT64(1, i - 1));
}
KERNEL(dlp_unique_counts) {
  for (int64_t j = THREAD, threads_ = THREADS; j < A.numel; j += threads_)
    SET_I64(A.data[0] + (uint64_t)j * 8, (j + 1 < A.numel ? AT64(1, j + 1) : P(0)) - AT64(1, j));
}
KERNEL(dlp_unique_inverse) {
  for (int64_t i = THREAD, threads_ = THREADS; i < A.numel; i += threads_)
    SET_I64(A.data[0] + (uint64_t)(AT64(2, i) - 1) * 8, AT64(1, i));
}
SORT_KEYS(KSORTKEY)
SORT_SIZES(KSORTVALUES)
QUANTILES(KQUANTILE)
KERNEL(dlp_sort_step) {
  for (int64_t w = THREAD, threads_ = THREADS; w < A.numel; w += threads_) {
    int64_t line = w / P(1), p = w % P(1), j = P(2), low = p / j * 2 * j, i = low + p % j;
    int64_t partner = P(3) ? low + 2 * j - 1 - p % j : i + j;
    if (partner >= P(0)) continue; /* a padding element: the greater, already above */
    uint64_t ka = (uint64_t)(line * P(0) + i) * 8, kb = (uint64_t)(line * P(0) + partner) * 8;
    uint64_t a = *(const uint64_t *)BYTES(A.data[0] + ka, 8, 0), b = *(const uint64_t *)BYTES(A.data[0] + kb, 8, 0);
    int64_t pa = I64(A.data[1] + ka), pb = I64(A.data[1] + kb);
    if (b < a || (b == a && pb < pa)) {
      *(uint64_t *)BYTES(A.data[0] + ka, 8, 1) = b;
      *(uint64_t *)BYTES(A.data[0] + kb, 8, 1) = a;
      SET_I64(A.data[1] + ka, pb);
      SET_I64(A.data[1] + kb, pa);
    }
  }
}
KERNEL(dlp_sort_indices) {
  EACH_ELEMENT(2, SET_I64(A.data[0] + (uint64_t)off[0], I64(A.data[1] + (uint64_t)off[1]) + 1);)
}
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
#define R_ENTRIES(name) {"dlp_" #name, dlp_##name}, {"dlp_" #name "_merge", dlp_##name##_merge},
#define R_INT_ENTRIES(s, T) R_ENTRIES(rmax_##s) R_ENTRIES(rmin_##s)
#define R_FLOAT_ENTRIES(s) R_ENTRIES(rsum_##s) R_ENTRIES(rprod_##s) R_ENTRIES(rsqdev_##s) R_ENTRIES(rmax_##s) \
  R_ENTRIES(rmin_##s)
#define R_COMPLEX_ENTRIES(s) R_ENTRIES(rsum_##s) R_ENTRIES(rprod_##s)
#define INDEX_CHECK_ENTRY(s, T) ENTRY(index_check_##s)
#define INDEX_PICK_ENTRIES(n, T) ENTRY(gather_##n) ENTRY(scatter_##n) ENTRY(select_##n)
#define TRUTH_ENTRY(kind, T, TRUE) ENTRY(truth_##kind)
#define SORT_KEY_ENTRY(s, T, KEY) ENTRY(sort_keys_##s)
#define SORT_VALUES_ENTRY(n, T) ENTRY(sort_values_##n)
#define QUANTILE_ENTRY(s, T, ELEMENT, DIFFERENCE) ENTRY(quantile_##s)
#define UNIQUE_TAKE_ENTRY(n, T) ENTRY(unique_take_##n)
#define COMPLEX_ENTRIES(s, T, R) DLP_COMPLEX_OPS(ENTRY, ENTRY, ENTRY, s, T, R)
#define FROM_COMPLEX_ENTRY(C, c, CT, unused, D, d, DT, dc) ENTRY(convert_##c##_##d)
#define TO_COMPLEX_ENTRIES(S, s, ST, sc) ENTRY(convert_##s##_complex64) ENTRY(convert_##s##_complex128)
#define SCAN_ENTRIES(s, T) ENTRY(cumsum_##s) ENTRY(cumprod_##s)
#define SCAN_CHUNK_ENTRY(name) ENTRY(name) ENTRY(name##_chunks) ENTRY(name##_apply)
#define SCAN_CHUNKED_ENTRIES(s, T) SCAN_CHUNK_ENTRY(cumsum_##s) SCAN_CHUNK_ENTRY(cumprod_##s)
const dlp_FakeKernel dlp_fake_kernels[] = {
  DLP_BOOL_OPS(ENTRY, ENTRY, ENTRY, ENTRY) DLP_INTS(INT_ENTRIES) DLP_FLOATS(FLOAT_ENTRIES) DLP_MIXED_OPS(ENTRY) COPIES(ENTRY)
  DLP_REAL_DTYPES(CONVERSION_ENTRIES) {"dlp_isclose_f64", dlp_isclose_f64},
  DLP_INTS(ZERO_FLAG_ENTRY) ENTRY(has_negative_i8) ENTRY(has_negative_i16) ENTRY(has_negative_i32)
  ENTRY(has_negative_i64) RANDOM_KERNELS(RAND_ENTRIES, RANDINT_ENTRY) RANGE_KERNELS(RANGE_ENTRIES) MATMULS(MATMUL_ENTRY)
  R_ENTRIES(rsum_u64) R_ENTRIES(rprod_u64) R_ENTRIES(rany_b8) R_ENTRIES(rall_b8) R_INT_ORDERED(R_INT_ENTRIES)
  R_FLOAT_ENTRIES(f32) R_FLOAT_ENTRIES(f64) R_COMPLEX_ENTRIES(c64) R_COMPLEX_ENTRIES(c128)
  INDEX_CHECKS(INDEX_CHECK_ENTRY, INDEX_CHECK_ENTRY) INDEX_SIZES(INDEX_PICK_ENTRIES) TRUTHS(TRUTH_ENTRY)
  DLP_COMPLEXES(COMPLEX_ENTRIES) ENTRY(isclose_c128) DLP_REAL_DTYPES(TO_COMPLEX_ENTRIES)
  DLP_REAL_DESTINATIONS(FROM_COMPLEX_ENTRY, COMPLEX64, complex64, -, -)
  DLP_REAL_DESTINATIONS(FROM_COMPLEX_ENTRY, COMPLEX128, complex128, -, -)
  ENTRY(convert_complex64_complex128) ENTRY(convert_complex128_complex64)
  ENTRY(sum_along) ENTRY(scan_sums) ENTRY(scan_apply) ENTRY(compact) ENTRY(unravel)
  SCAN_HALF_TYPES(SCAN_ENTRIES) SCAN_CHUNKED_TYPES(SCAN_CHUNKED_ENTRIES)
  SORT_KEYS(SORT_KEY_ENTRY) SORT_SIZES(SORT_VALUES_ENTRY) ENTRY(sort_step) ENTRY(sort_indices)
  QUANTILES(QUANTILE_ENTRY) SORT_SIZES(UNIQUE_TAKE_ENTRY) ENTRY(unique_flags) ENTRY(unique_counts) ENTRY(unique_inverse)
  {NULL, NULL},
};
#endif
