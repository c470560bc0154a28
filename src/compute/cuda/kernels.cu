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
  for (int64_t i = THREAD, step = THREADS; i < A.numel; i += step) {                                  \
    int64_t off[DLP_KERNEL_MAX_OPS] = {0, 0, 0, 0}, rest = i;                                         \
    ROLLED                                                                                             \
    for (int d = A.ndim - 1; d >= 0; d--) {                                                            \
      int64_t n = A.shape[d], at = d > 0 ? rest % n : rest;                                            \
      rest = d > 0 ? rest / n : 0;                                                                     \
      for (int k = 0; k < (nops); k++) off[k] += at * A.strides[k][d];                                 \
    }                                                                                                  \
    __VA_ARGS__                                                                                        \
  }

/* operand k's element as a T (the scalar's value, or memory); the output's element set to v */
#define LOAD(T, k, var)                                                                                \
  T var;                                                                                               \
  if ((A.scalars >> (k)) & 1) {                                                                        \
    uint64_t word_ = A.value[k][0];                                                                    \
    memcpy(&var, &word_, sizeof var);                                                                  \
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

#define INT_KERNELS(s, T) DLP_INT_OPS(K2, K1, KC, s, T) DLP_COMPARE_OPS(K2, K1, KW, s, T)
#define FLOAT_KERNELS(s, T, F) DLP_FLOAT_OPS(K2, K1, KC, s, T, F) DLP_COMPARE_OPS(K2, K1, KW, s, T)

/* The families, numbered as the module's compute types (kernels.c, dlp_compute_index). */
#if FAMILY(0)
DLP_BOOL_OPS(K2, K1, KC, KW)
#endif
#if FAMILY(1)
INT_KERNELS(i8, int8_t)
#endif
#if FAMILY(2)
INT_KERNELS(i16, int16_t)
#endif
#if FAMILY(3)
INT_KERNELS(i32, int32_t)
#endif
#if FAMILY(4)
INT_KERNELS(i64, int64_t)
#endif
#if FAMILY(5)
INT_KERNELS(u8, uint8_t)
#endif
#if FAMILY(6)
INT_KERNELS(u16, uint16_t)
#endif
#if FAMILY(7)
INT_KERNELS(u32, uint32_t)
#endif
#if FAMILY(8)
INT_KERNELS(u64, uint64_t)
#endif
#if FAMILY(9)
FLOAT_KERNELS(f32, float, f)
#endif
#if FAMILY(10)
FLOAT_KERNELS(f64, double, )
#endif
#if FAMILY(11)
DLP_MIXED_OPS(KM)
#endif
/* strided copies by element size, any dtype of that size */
#define COPIES(K) K(copy_1, uint8_t, uint8_t, x) K(copy_2, uint16_t, uint16_t, x) K(copy_4, uint32_t, uint32_t, x) \
  K(copy_8, uint64_t, uint64_t, x)
#if FAMILY(12)
COPIES(K1)
#endif

/* ---- family 13: matrix products (src/compute/matmul.c, when cuBLAS is not used) ----
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
#if FAMILY(13)
#define MM_READ(T, address) (*(const T *)BYTES((address), (int64_t)sizeof(T), 0))
#define MM_WRITE(T, address, v) (*(T *)BYTES((address), (int64_t)sizeof(T), 1) = (v))

/* float16 and bfloat16 to and from float, bit for bit as src/core/convert.c does */
DLP_RULE float mm_from_half(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FF, bits;
  float f;
  if (e == 0) { /* zero or subnormal: m * 2^-24, exact */
    f = (float)m * 5.9604644775390625e-8f;
    memcpy(&bits, &f, 4);
    bits |= sign;
  } else if (e == 31) {
    bits = sign | 0x7F800000 | (m << 13);
  } else {
    bits = sign | ((e + 112) << 23) | (m << 13);
  }
  memcpy(&f, &bits, 4);
  return f;
}
DLP_RULE float mm_from_bfloat(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
DLP_RULE uint16_t mm_to_half(float f) { /* to nearest even */
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t a = x & 0x7FFFFFFF;
  if (a > 0x7F800000) return (uint16_t)(sign | 0x7E00);  /* NaN */
  if (a >= 0x477FF000) return (uint16_t)(sign | 0x7C00); /* 65520 and up: infinity */
  if (a < 0x38800000) {                                  /* a subnormal half: m * 2^-24 */
    float m = fabsf(f) * 16777216.0f;
    return (uint16_t)(sign | (uint16_t)(m + 8388608.0f - 8388608.0f));
  }
  return (uint16_t)(sign | (uint16_t)((a + 0xC8000FFFu + ((a >> 13) & 1)) >> 13));
}
DLP_RULE uint16_t mm_to_bfloat(float f) { /* to nearest even */
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)(((x >> 16) & 0x8000) | 0x7FC0);
  return (uint16_t)((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
}

/* an element of dtype t at p, as each compute type */
DLP_RULE float mm_load_f32(uint64_t p, int t) {
  switch (t) {
    case DLP_KD_BOOL: return MM_READ(uint8_t, p) != 0 ? 1.0f : 0.0f;
    case DLP_KD_INT8: return (float)MM_READ(int8_t, p);
    case DLP_KD_INT16: return (float)MM_READ(int16_t, p);
    case DLP_KD_UINT8: return (float)MM_READ(uint8_t, p);
    case DLP_KD_UINT16: return (float)MM_READ(uint16_t, p);
    case DLP_KD_FLOAT16: return mm_from_half(MM_READ(uint16_t, p));
    case DLP_KD_BFLOAT16: return mm_from_bfloat(MM_READ(uint16_t, p));
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
    case DLP_KD_FLOAT16: return (double)mm_from_half(MM_READ(uint16_t, p));
    case DLP_KD_BFLOAT16: return (double)mm_from_bfloat(MM_READ(uint16_t, p));
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
  if (t == DLP_KD_FLOAT16) MM_WRITE(uint16_t, p, mm_to_half(v));
  else if (t == DLP_KD_BFLOAT16) MM_WRITE(uint16_t, p, mm_to_bfloat(v));
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
#define FLOAT_ENTRIES(s, T, F) DLP_FLOAT_OPS(ENTRY, ENTRY, ENTRY, s, T, F) DLP_COMPARE_OPS(ENTRY, ENTRY, ENTRY, s, T)
const dlp_FakeKernel dlp_fake_kernels[] = {
  DLP_BOOL_OPS(ENTRY, ENTRY, ENTRY, ENTRY) DLP_INTS(INT_ENTRIES) DLP_FLOATS(FLOAT_ENTRIES) DLP_MIXED_OPS(ENTRY) COPIES(ENTRY) MATMULS(MATMUL_ENTRY)
  {NULL, NULL},
};
#endif
