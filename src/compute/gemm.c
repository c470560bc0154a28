/* The module's own matrix-product kernel, C (M x N) = A (M x K) . B (K x N), for the products
 * CBLAS does not compute (no BLAS found, DLPACK_LUA_BLAS=none, the integer dtypes, sizes beyond
 * CBLAS's 32-bit integers). matmul.c plans the call; gemm.h says what it gets.
 *
 * float32 and float64: the loops of GotoBLAS and BLIS. A KC x NC block of B and an MC x KC
 * block of A are copied ("packed") into scratch memory in the order the innermost loop reads
 * them: slivers of NR columns of B and MR rows of A, k after k, zero-padded at the edges. The
 * micro-kernel then keeps an MR x NR tile of C in vector registers through KC steps, each a
 * load of NR elements of B and MR broadcasts of A multiplied and added into the tile. Packing
 * reads any strides, so transposed and strided operands cost one copy of a block, not a
 * temporary of the whole matrix. The micro-kernel is written once with the compiler's vector
 * types and built three times: AVX-512 (16 floats a register) and AVX2 with FMA, chosen at run
 * time from what the processor has and the system enables, and a portable build with 16-byte
 * vectors (SSE2, NEON). Each element of C is the sum over K in blocks of KC, each block summed
 * in order of k (fused multiply-adds on AVX2 and AVX-512, so the builds may differ in the last
 * bits), then added to the sum of the blocks before it.
 *
 * Integers: unsigned arithmetic, exact in any order; a tile of C accumulates in registers while
 * blocks of A and B (rows contiguous) are read in place. The AVX2 build doubles the lanes.
 *
 * Large products split the rows of C into parts run as tasks (dlp_parallel_for): for the floats,
 * each step of the blocks packs B's block once, then each part packs its own blocks of A; for the
 * integers each part is a product of its own rows. How rows are grouped changes no element's
 * arithmetic, so the bits are the same on any number of threads. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compute/gemm.h"
#include "internal.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define X86_KERNELS 1
#include <immintrin.h>
#endif

#define KC 256

/* ---- float32 and float64: packed blocks and a register micro-kernel ---- */

/* Copy rows [i0, i0 + mc) x columns [k0, k0 + kc) of A (element strides rs, cs) into slivers of
 * MR rows, k-major: dst[s * MR * kc + k * MR + r] = A[i0 + s * MR + r][k0 + k], 0 past the end. */
#define DEFINE_PACKS(T)                                                                                      \
  static void pack_a_##T(T *dst, const T *A, int64_t rs, int64_t cs, int64_t mc, int64_t kc, int mr_) {      \
    for (int64_t i = 0; i < mc; i += mr_) {                                                                \
      int64_t rows = mc - i < mr_ ? mc - i : mr_;                                                          \
      for (int64_t k = 0; k < kc; k++) {                                                                   \
        const T *src = A + i * rs + k * cs;                                                                \
        int64_t r = 0;                                                                                     \
        for (; r < rows; r++) dst[r] = src[r * rs];                                                        \
        for (; r < mr_; r++) dst[r] = 0;                                                                   \
        dst += mr_;                                                                                        \
      }                                                                                                    \
    }                                                                                                      \
  }                                                                                                        \
  static void pack_b_##T(T *dst, const T *B, int64_t rs, int64_t cs, int64_t kc, int64_t nc, int nr_) {      \
    for (int64_t j = 0; j < nc; j += nr_) {                                                                \
      int64_t cols = nc - j < nr_ ? nc - j : nr_;                                                          \
      for (int64_t k = 0; k < kc; k++) {                                                                   \
        const T *src = B + k * rs + j * cs;                                                                \
        int64_t v = 0;                                                                                     \
        if (cs == 1)                                                                                       \
          for (; v < cols; v++) dst[v] = src[v];                                                           \
        else                                                                                               \
          for (; v < cols; v++) dst[v] = src[v * cs];                                                      \
        for (; v < nr_; v++) dst[v] = 0;                                                                   \
        dst += nr_;                                                                                        \
      }                                                                                                    \
    }                                                                                                      \
  }
DEFINE_PACKS(float)
DEFINE_PACKS(double)
#undef DEFINE_PACKS

#define UNROLL _Pragma("GCC unroll 32")

/* One step of a float product: the columns [j0, j0 + nc) of C from the k0 block of kc rows of B,
 * packed at pb (by one task), then the rows of C split into parts that run as tasks, each packing
 * its blocks of A into a scratch of its own (pa + part * pa_bytes). */
typedef struct FloatStep {
  const dlp_Gemm *g;
  int64_t j0, nc, k0, kc;
  int64_t rows; /* per part, the last one's fewer */
  char *pa, *pb;
  size_t pa_bytes;
  const struct FloatKernel *kernel;
} FloatStep;

typedef struct FloatKernel {
  void (*pack_b)(const FloatStep *st);
  void (*rows)(const FloatStep *st, int64_t lo, int64_t hi, char *pa);
} FloatKernel;

/* name##_tile: the MR x NR tile at c (row stride ldc; its first mr x nr elements exist) from kc
 * steps of the packed slivers a and b; `first` stores it, else adds it to what c holds.
 * name: the FloatKernel of a build, its steps as FloatStep says. V is a vector of L = NR / NV
 * elements of T; SPLAT(x) a V of x, FMA(a, b, c) a * b + c. Which rows share a tile or a block
 * changes no element's arithmetic: the split into parts does not change a bit. */
#define DEFINE_FLOAT_GEMM(name, T, V, MR, NV, MC, NC, SPLAT, FMA, ATTR)                                     \
  ATTR static void name##_tile(int64_t kc, const T *a, const T *b, T *c, int64_t ldc, int64_t mr, int64_t nr,  \
                               int first) {                                                                  \
    enum { L = sizeof(V) / sizeof(T), NR = NV * L };                                                         \
    V acc[MR][NV];                                                                                           \
    UNROLL for (int r = 0; r < MR; r++) UNROLL for (int v = 0; v < NV; v++) acc[r][v] = SPLAT((T)0);        \
    for (int64_t k = 0; k < kc; k++, a += MR, b += NR) {                                                     \
      V bv[NV];                                                                                              \
      UNROLL for (int v = 0; v < NV; v++) memcpy(&bv[v], b + v * L, sizeof(V));                              \
      UNROLL for (int r = 0; r < MR; r++) {                                                                  \
        V av = SPLAT(a[r]);                                                                                  \
        UNROLL for (int v = 0; v < NV; v++) acc[r][v] = FMA(av, bv[v], acc[r][v]);                           \
      }                                                                                                      \
    }                                                                                                        \
    if (mr == MR && nr == NR) {                                                                              \
      UNROLL for (int r = 0; r < MR; r++) UNROLL for (int v = 0; v < NV; v++) {                              \
        T *p = c + r * ldc + v * L;                                                                          \
        V x = acc[r][v];                                                                                     \
        if (!first) {                                                                                        \
          V old;                                                                                             \
          memcpy(&old, p, sizeof(V));                                                                        \
          x = old + x;                                                                                       \
        }                                                                                                    \
        memcpy(p, &x, sizeof(V));                                                                            \
      }                                                                                                      \
    } else {                                                                                                 \
      T tile[MR][NR];                                                                                        \
      memcpy(tile, acc, sizeof tile);                                                                        \
      for (int64_t r = 0; r < mr; r++)                                                                       \
        for (int64_t v = 0; v < nr; v++) c[r * ldc + v] = first ? tile[r][v] : c[r * ldc + v] + tile[r][v]; \
    }                                                                                                        \
  }                                                                                                          \
  /* B's block of this step packed, in slivers of NR columns */                                           \
  ATTR static void name##_pack_b(const FloatStep *st) {                                                      \
    const dlp_Gemm *g = st->g;                                                                               \
    pack_b_##T((T *)(void *)st->pb, (const T *)g->B + st->k0 * g->rsb + st->j0 * g->csb, g->rsb, g->csb, st->kc, \
               st->nc, NV * (int)(sizeof(V) / sizeof(T)));                                                   \
  }                                                                                                          \
  /* rows [lo, hi) of C in this step: their blocks of A packed into pa, each tile from the packed B */       \
  ATTR static void name##_rows(const FloatStep *st, int64_t lo, int64_t hi, char *pa_) {                      \
    enum { NR = NV * (sizeof(V) / sizeof(T)) };                                                              \
    const dlp_Gemm *g = st->g;                                                                               \
    T *pa = (T *)(void *)pa_, *C = g->C;                                                                      \
    const T *A = g->A, *pb = (const T *)(const void *)st->pb;                                                \
    int64_t kc = st->kc, nc = st->nc, ldc = g->N;                                                            \
    for (int64_t i0 = lo; i0 < hi; i0 += MC) {                                                               \
      int64_t mc = hi - i0 < MC ? hi - i0 : MC;                                                              \
      pack_a_##T(pa, A + i0 * g->rsa + st->k0 * g->csa, g->rsa, g->csa, mc, kc, MR);                         \
      for (int64_t j = 0; j < nc; j += NR)                                                                   \
        for (int64_t i = 0; i < mc; i += MR)                                                                 \
          name##_tile(kc, pa + i * kc, pb + j * kc, C + (i0 + i) * ldc + st->j0 + j, ldc,                    \
                      mc - i < MR ? mc - i : MR, nc - j < NR ? nc - j : NR, st->k0 == 0);                    \
    }                                                                                                        \
  }                                                                                                          \
  static const FloatKernel name = {name##_pack_b, name##_rows};

/* the portable build: 16-byte vectors, a multiply then an add */
typedef float f32x4 __attribute__((vector_size(16)));
typedef double f64x2 __attribute__((vector_size(16)));
#define SPLAT_F32X4(x) ((f32x4){(x), (x), (x), (x)})
#define SPLAT_F64X2(x) ((f64x2){(x), (x)})
#define MUL_ADD(a, b, c) ((a) * (b) + (c))
DEFINE_FLOAT_GEMM(gemm_f32_plain, float, f32x4, 4, 2, 128, 1024, SPLAT_F32X4, MUL_ADD, )
DEFINE_FLOAT_GEMM(gemm_f64_plain, double, f64x2, 4, 2, 128, 1024, SPLAT_F64X2, MUL_ADD, )

#ifdef X86_KERNELS
typedef float f32x8 __attribute__((vector_size(32)));
typedef double f64x4 __attribute__((vector_size(32)));
typedef float f32x16 __attribute__((vector_size(64)));
typedef double f64x8 __attribute__((vector_size(64)));
#define AVX2 __attribute__((target("avx2,fma")))
#define AVX512 __attribute__((target("avx512f")))
#define SPLAT_F32X8(x) ((f32x8)_mm256_set1_ps(x))
#define SPLAT_F64X4(x) ((f64x4)_mm256_set1_pd(x))
#define SPLAT_F32X16(x) ((f32x16)_mm512_set1_ps(x))
#define SPLAT_F64X8(x) ((f64x8)_mm512_set1_pd(x))
#define FMA_F32X8(a, b, c) ((f32x8)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#define FMA_F64X4(a, b, c) ((f64x4)_mm256_fmadd_pd((__m256d)(a), (__m256d)(b), (__m256d)(c)))
#define FMA_F32X16(a, b, c) ((f32x16)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#define FMA_F64X8(a, b, c) ((f64x8)_mm512_fmadd_pd((__m512d)(a), (__m512d)(b), (__m512d)(c)))
/* 16 registers: a 6 x 2 tile of accumulators, 2 of B and a broadcast */
DEFINE_FLOAT_GEMM(gemm_f32_avx2, float, f32x8, 6, 2, 96, 2048, SPLAT_F32X8, FMA_F32X8, AVX2)
DEFINE_FLOAT_GEMM(gemm_f64_avx2, double, f64x4, 6, 2, 96, 1024, SPLAT_F64X4, FMA_F64X4, AVX2)
/* 32 registers: 12 x 2 accumulators */
DEFINE_FLOAT_GEMM(gemm_f32_avx512, float, f32x16, 12, 2, 144, 2048, SPLAT_F32X16, FMA_F32X16, AVX512)
DEFINE_FLOAT_GEMM(gemm_f64_avx512, double, f64x8, 12, 2, 96, 1024, SPLAT_F64X8, FMA_F64X8, AVX512)
#endif
#undef DEFINE_FLOAT_GEMM
#undef UNROLL

/* ---- the integers: blocks read in place, rows contiguous ----
 * NC columns of B by KC rows stay in cache while every MR x NR tile of C accumulates in
 * registers (the fixed-size inner loops are unrolled and vectorised by the compiler). lda, ldb,
 * ldc are element strides between rows, of any sign. */

#define NC 512

#define DEFINE_GEMM(name, T, MR, NR, ATTR)                                                                 \
  ATTR static void name(int64_t M, int64_t N, int64_t K, const void *A_, int64_t lda, const void *B_, int64_t ldb, \
                        void *C_, int64_t ldc) {                                                           \
    const T *A = A_, *B = B_;                                                                              \
    T *C = C_;                                                                                             \
    for (int64_t j0 = 0; j0 < N; j0 += NC) {                                                               \
      int64_t jn = N - j0 < NC ? N - j0 : NC;                                                              \
      for (int64_t k0 = 0; k0 < K; k0 += KC) {                                                             \
        int64_t kc = K - k0 < KC ? K - k0 : KC;                                                            \
        for (int64_t i = 0; i < M; i += MR) {                                                              \
          int64_t mr = M - i < MR ? M - i : MR;                                                            \
          const T *a = A + i * lda + k0;                                                                   \
          for (int64_t j = j0; j < j0 + jn; j += NR) {                                                     \
            int64_t nr = j0 + jn - j < NR ? j0 + jn - j : NR;                                              \
            const T *b = B + k0 * ldb + j;                                                                 \
            T acc[MR][NR];                                                                                 \
            memset(acc, 0, sizeof acc);                                                                    \
            if (mr == MR && nr == NR) {                                                                    \
              for (int64_t k = 0; k < kc; k++) {                                                           \
                const T *row = b + k * ldb;                                                                \
                for (int r = 0; r < MR; r++) {                                                             \
                  T av = a[r * lda + k];                                                                   \
                  for (int v = 0; v < NR; v++) acc[r][v] += av * row[v];                                   \
                }                                                                                          \
              }                                                                                            \
            } else {                                                                                       \
              for (int64_t k = 0; k < kc; k++) {                                                           \
                const T *row = b + k * ldb;                                                                \
                for (int r = 0; r < mr; r++) {                                                             \
                  T av = a[r * lda + k];                                                                   \
                  for (int v = 0; v < nr; v++) acc[r][v] += av * row[v];                                   \
                }                                                                                          \
              }                                                                                            \
            }                                                                                              \
            for (int r = 0; r < mr; r++) {                                                                 \
              T *c = C + (i + r) * ldc + j;                                                                \
              if (k0 == 0)                                                                                 \
                for (int v = 0; v < nr; v++) c[v] = acc[r][v];                                             \
              else                                                                                         \
                for (int v = 0; v < nr; v++) c[v] += acc[r][v];                                            \
            }                                                                                              \
          }                                                                                                \
        }                                                                                                  \
      }                                                                                                    \
    }                                                                                                      \
  }

DEFINE_GEMM(gemm_u32, uint32_t, 4, 8, )
DEFINE_GEMM(gemm_u64, uint64_t, 4, 4, )
#ifdef X86_KERNELS
DEFINE_GEMM(gemm_u32_avx2, uint32_t, 4, 16, AVX2)
DEFINE_GEMM(gemm_u64_avx2, uint64_t, 4, 8, AVX2)
#endif
#undef DEFINE_GEMM
#undef NC

/* ---- which build runs ---- */

enum { PLAIN, WITH_AVX2, WITH_AVX512 };

static struct {
  dlp_once_flag once;
  int build;
} chosen = {DLP_ONCE_INIT, PLAIN};

/* The widest build the processor runs (GCC's and Clang's checks read XGETBV too: the system
 * must save the wider registers), at most the one DLPACK_LUA_GEMM names ("avx2" or "portable":
 * the specs run every build on one machine). */
static void choose_build(void) {
  const char *limit = getenv("DLPACK_LUA_GEMM");
  int most = !limit ? WITH_AVX512 : strcmp(limit, "avx2") == 0 ? WITH_AVX2 : strcmp(limit, "portable") == 0 ? PLAIN
                                                                                                          : WITH_AVX512;
  (void)most;
#ifdef X86_KERNELS
  if (most >= WITH_AVX512 && __builtin_cpu_supports("avx512f")) chosen.build = WITH_AVX512;
  else if (most >= WITH_AVX2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) chosen.build = WITH_AVX2;
#endif
}

static int build_for_this_cpu(void) {
  dlp_call_once(&chosen.once, choose_build);
  return chosen.build;
}

/* The packed blocks' sizes, in elements, for MR, NR, MC, NC of the build that runs. */
static void float_blocks(int cd, int64_t *mr, int64_t *nr, int64_t *mc, int64_t *nc) {
  int build = build_for_this_cpu(), f32 = cd == DLP_FLOAT32;
  *mr = build == WITH_AVX512 ? 12 : build == WITH_AVX2 ? 6 : 4;
  *nr = build == WITH_AVX512 ? (f32 ? 32 : 16) : build == WITH_AVX2 ? (f32 ? 16 : 8) : (f32 ? 8 : 4);
  *mc = build == WITH_AVX512 ? (f32 ? 144 : 96) : build == WITH_AVX2 ? 96 : 128;
  *nc = build == WITH_AVX512 || build == WITH_AVX2 ? (f32 ? 2048 : 1024) : 1024;
}

/* Rows per part of C, a multiple of mr (or all M: one part), for products of at least 2^21
 * multiply-adds: at most 16 parts of at least three slivers of mr rows, as many as share out
 * evenly among the pool's threads now (width; 0 under a host's job system, whose width is not
 * known: then as many as allowed). Of the splits whose busiest thread has the fewest slivers,
 * the one in the most parts, which a thread slowed by others' work hands on best: 512 rows of
 * 12-row slivers on 2 threads are 4 parts of 132 rows, where 11 parts of 48 gave one thread 288
 * rows and the other 224. Only the time depends on it: a part's rows are computed as alone. */
#define PARTS_MAX 16
#define PART_WORK (2.0 * 1024 * 1024)
static int64_t rows_per_part(int64_t M, int64_t N, int64_t K, int64_t mr, int width) {
  int64_t slivers = (M + mr - 1) / mr, most = slivers / 3;
  if (most > PARTS_MAX) most = PARTS_MAX;
  if (most < 2 || width == 1 || (double)M * (double)N * (double)K < PART_WORK) return M;
  int64_t best = (slivers + most - 1) / most, best_load = -1;
  for (int64_t parts = width > 1 ? width : most; parts <= most; parts += width > 1 ? width : most) {
    int64_t per = (slivers + parts - 1) / parts, made = (slivers + per - 1) / per;
    int64_t load = width > 1 ? (made + width - 1) / width * per : per;
    if (best_load < 0 || load <= best_load) best = per, best_load = load;
  }
  return best * mr;
}

int64_t dlp_gemm_rows(int cd, int64_t M, int64_t N, int64_t K) {
  int64_t mr = 4, nr, mc, nc;
  if (cd == DLP_FLOAT32 || cd == DLP_FLOAT64) float_blocks(cd, &mr, &nr, &mc, &nc);
  return rows_per_part(M, N, K, mr, dlp_parallel_width());
}

/* The bytes of B's block and of one part's block of A (rows: the part's), rounded up to 64. */
static size_t round64(size_t n) { return (n + 63) / 64 * 64; }
static size_t b_block_bytes(int cd, int64_t N, int64_t K, int64_t nr, int64_t nc) {
  return round64((size_t)((N < nc ? (N + nr - 1) / nr * nr : nc) * (K < KC ? K : KC)) * dlp_dtypes[cd].itemsize);
}
static size_t a_block_bytes(int cd, int64_t rows, int64_t K, int64_t mr, int64_t mc) {
  return round64((size_t)((rows < mc ? (rows + mr - 1) / mr * mr : mc) * (K < KC ? K : KC)) * dlp_dtypes[cd].itemsize);
}

size_t dlp_gemm_scratch(int cd, int64_t M, int64_t N, int64_t K, int64_t rows) {
  if (cd != DLP_FLOAT32 && cd != DLP_FLOAT64) return 0;
  int64_t mr, nr, mc, nc, parts = (M + rows - 1) / rows;
  float_blocks(cd, &mr, &nr, &mc, &nc);
  /* B's block, then each part's block of A, each at a multiple of 64 bytes */
  return 64 + b_block_bytes(cd, N, K, nr, nc) + (size_t)parts * a_block_bytes(cd, rows, K, mr, mc);
}

static char *aligned64(char *p) { return p + (64 - (uintptr_t)p % 64) % 64; }

static void float_part(void *ctx, int64_t part) {
  const FloatStep *st = ctx;
  int64_t lo = part * st->rows, hi = st->g->M - lo < st->rows ? st->g->M : lo + st->rows;
  st->kernel->rows(st, lo, hi, st->pa + (size_t)part * st->pa_bytes);
}

static void float_product(const dlp_Gemm *g, const FloatKernel *kernel) {
  int64_t mr, nr, mc, nc_max;
  float_blocks(g->cd, &mr, &nr, &mc, &nc_max);
  FloatStep st = {g, 0, 0, 0, 0, g->rows, NULL, NULL, 0, kernel};
  int64_t parts = (g->M + st.rows - 1) / st.rows;
  st.pb = aligned64(g->scratch);
  st.pa = st.pb + b_block_bytes(g->cd, g->N, g->K, nr, nc_max);
  st.pa_bytes = a_block_bytes(g->cd, st.rows, g->K, mr, mc);
  for (st.j0 = 0; st.j0 < g->N; st.j0 += nc_max) {
    st.nc = g->N - st.j0 < nc_max ? g->N - st.j0 : nc_max;
    for (st.k0 = 0; st.k0 < g->K; st.k0 += KC) {
      st.kc = g->K - st.k0 < KC ? g->K - st.k0 : KC;
      kernel->pack_b(&st);
      dlp_parallel_for(parts, float_part, &st);
    }
  }
}

/* The integers: each part of the rows one call of the kernel on them (no scratch). */
typedef struct IntProduct {
  const dlp_Gemm *g;
  int64_t rows;
  void (*kernel)(int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, const void *B, int64_t ldb, void *C,
                 int64_t ldc);
} IntProduct;

static void int_part(void *ctx, int64_t part) {
  const IntProduct *ip = ctx;
  const dlp_Gemm *g = ip->g;
  int64_t lo = part * ip->rows, rows = g->M - lo < ip->rows ? g->M - lo : ip->rows;
  size_t isz = dlp_dtypes[g->cd].itemsize;
  ip->kernel(rows, g->N, g->K, (const char *)g->A + lo * g->rsa * (int64_t)isz, g->rsa, g->B, g->rsb,
             (char *)g->C + lo * g->N * (int64_t)isz, g->N);
}

void dlp_gemm(const dlp_Gemm *g) {
  int build = build_for_this_cpu(), f32 = g->cd == DLP_FLOAT32;
  if (g->cd == DLP_FLOAT32 || g->cd == DLP_FLOAT64) {
    const FloatKernel *kernel = f32 ? &gemm_f32_plain : &gemm_f64_plain;
#ifdef X86_KERNELS
    if (build == WITH_AVX512) kernel = f32 ? &gemm_f32_avx512 : &gemm_f64_avx512;
    else if (build == WITH_AVX2) kernel = f32 ? &gemm_f32_avx2 : &gemm_f64_avx2;
#endif
    float_product(g, kernel);
    return;
  }
  IntProduct ip = {g, g->rows, g->cd == DLP_UINT32 ? gemm_u32 : gemm_u64};
#ifdef X86_KERNELS
  if (build != PLAIN) ip.kernel = g->cd == DLP_UINT32 ? gemm_u32_avx2 : gemm_u64_avx2;
#endif
  dlp_parallel_for((g->M + ip.rows - 1) / ip.rows, int_part, &ip);
}
