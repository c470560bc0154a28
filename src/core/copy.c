/* Copies and conversion: strided element loops, clone, contiguous, copy, to, fill.
 * dlp_copy allocates what it needs (a temporary for overlapping views, CUDA staging)
 * before it takes the memory of its tensors, then copies without running Lua code. */
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <immintrin.h>
#if defined(__x86_64__) || defined(_M_X64)
#define AVX2_BLOCKS 1 /* chosen at run time: dlp_cpu_has_avx2 (platform.h) is x86-64's */
#endif
#endif

#include "internal.h"

/* ---- walking two layouts at once ----
 * Size-1 dimensions are dropped and dimensions contiguous in both layouts merged; then the
 * elements go row by row along the dimension the destination is contiguous in, through one
 * typed row function. When the source is contiguous along another dimension (a transpose,
 * a permutation), the two dimensions are walked in TILE x TILE blocks, so that both sides
 * stay in cache (dimensions of at least TILED_FROM elements each). Tiles of 128 rather than 64:
 * a longer run down the source's rows and along the destination's moved float32 transposes
 * whose rows are near a multiple of 4 KiB (whose lines share cache sets) 2-2.5x faster on one
 * thread of an AMD EPYC (1023^2 0.32 -> 0.16 ns an element, 1025^2 0.63 -> 0.25), 2000^2 to
 * 4096^2 1.15-1.35x faster, 1000^2 as fast; int16, uint8 and float64 1025^2 1.1-1.4x faster. */

#define TILE 128
#define TILED_FROM 16

typedef struct Walk {
  int ndim;
  int64_t shape[DLP_MAX_NDIM];
  int64_t ds[DLP_MAX_NDIM], ss[DLP_MAX_NDIM]; /* byte strides of the destination and source */
} Walk;

/* Moves an la x lb tile of one dtype across (tile_function below). */
typedef void (*TileFn)(char *d, int64_t dsb, const char *s, int64_t ssa, int64_t la, int64_t lb);

/* What each row does: a row function (copy or convert), or a fill with `value`. */
typedef struct Job {
  dlp_RowFn row;
  const void *value;
  size_t itemsize;
  TileFn tile; /* same dtype: what moves a tile (NULL: the tiles go row by row) */
} Job;

static void do_row(const Job *job, char *d, int64_t ds, const char *s, int64_t ss, int64_t n) {
  if (job->value) dlp_fill_row(d, ds, job->value, n, job->itemsize);
  else job->row(d, ds, s, ss, n);
}

/* Fill w from a shape and byte strides (ss may equal ds, for a walk of one layout); returns the
 * element count (0: nothing to visit). */
static int64_t simplify(Walk *w, int ndim, const int64_t *shape, const int64_t *ds, const int64_t *ss) {
  int64_t n = 1, dm, sm;
  int k = 0;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == 0) return 0;
    n *= shape[i];
    if (shape[i] == 1) continue;
    /* the dimension before merges into this one when it steps over it exactly, on both sides */
    if (k > 0 && dlp_mul(ds[i], shape[i], &dm) && dlp_mul(ss[i], shape[i], &sm) && w->ds[k - 1] == dm &&
        w->ss[k - 1] == sm) {
      w->shape[k - 1] *= shape[i];
      w->ds[k - 1] = ds[i];
      w->ss[k - 1] = ss[i];
      continue;
    }
    w->shape[k] = shape[i];
    w->ds[k] = ds[i];
    w->ss[k] = ss[i];
    k++;
  }
  w->ndim = k;
  return n;
}

/* The dimension whose byte stride is smallest in magnitude (-1 for none). */
static int fastest(const Walk *w, const int64_t *strides) {
  int best = -1;
  for (int i = 0; i < w->ndim; i++)
    if (best < 0 || dlp_magnitude(strides[i]) < dlp_magnitude(strides[best])) best = i;
  return best;
}

/* Visit every position of the dimensions other than a and b (b may equal a), calling visit
 * with the pointers there. */
typedef void (*Visit)(const Walk *w, int a, int b, const Job *job, char *d, const char *s);

static void walk_outer(const Walk *w, int a, int b, const Job *job, char *d, const char *s, Visit visit) {
  int64_t idx[DLP_MAX_NDIM] = {0};
  for (;;) {
    visit(w, a, b, job, d, s);
    int k = w->ndim - 1;
    for (; k >= 0; k--) {
      if (k == a || k == b) continue;
      if (++idx[k] < w->shape[k]) {
        d += w->ds[k];
        s += w->ss[k];
        break;
      }
      d -= w->ds[k] * (w->shape[k] - 1);
      s -= w->ss[k] * (w->shape[k] - 1);
      idx[k] = 0;
    }
    if (k < 0) return;
  }
}

static void visit_row(const Walk *w, int a, int b, const Job *job, char *d, const char *s) {
  (void)b;
  do_row(job, d, w->ds[a], s, w->ss[a], w->shape[a]);
}

/* ---- moving a tile of one dtype across: destination element (i, j) at d + i*size + j*dsb,
 * source element (i, j) at s + i*ssa + j*size ----
 * Each tile function moves an la x lb tile in B x B blocks transposed in registers, then the
 * columns and rows left over one element at a time; the moves copy bits as they are. Where the
 * processor has no blocks for a size (16 bytes without AVX2, every size without SSE2) the tiles
 * go row by row. */

#define INLINE static inline __attribute__((always_inline))

#define DEFINE_TILE(name, B, size, block, target)                                                           \
  target static void name(char *d, int64_t dsb, const char *s, int64_t ssa, int64_t la, int64_t lb) {        \
    int64_t i, j;                                                                                            \
    for (j = 0; j + B <= lb; j += B) {                                                                       \
      for (i = 0; i + B <= la; i += B) block(d + i * size + j * dsb, dsb, s + i * ssa + j * size, ssa);       \
      for (; i < la; i++)                                                                                    \
        for (int64_t k = j; k < j + B; k++) memcpy(d + i * size + k * dsb, s + i * ssa + k * size, size);     \
    }                                                                                                        \
    for (; j < lb; j++)                                                                                      \
      for (i = 0; i < la; i++) memcpy(d + i * size + j * dsb, s + i * ssa + j * size, size);                 \
  }

/* The loads and stores are the unaligned ones, so byte pointers go to them as void * (no
 * alignment claimed). */
#if defined(__SSE2__)
/* n rows of 16 bytes (n = 16 / width elements of width bytes) transposed by one step done
 * log2(n) times: rows k and k + n/2 interleaved into rows 2k and 2k + 1. A step rotates each
 * element's index bits (row bits, then column bits) left by one, so log2(n) steps swap the
 * row and the column. */
INLINE void block_sse2(char *d, int64_t dsb, const char *s, int64_t ssa, int n, int steps, int width) {
  __m128i r[16], t[16];
#pragma GCC unroll 16
  for (int k = 0; k < n; k++) r[k] = _mm_loadu_si128((const void *)(s + k * ssa));
  for (int step = 0; step < steps; step++) {
#pragma GCC unroll 8
    for (int k = 0; k < n / 2; k++) {
      __m128i a = r[k], b = r[k + n / 2];
      t[2 * k] = width == 1   ? _mm_unpacklo_epi8(a, b)
                 : width == 2 ? _mm_unpacklo_epi16(a, b)
                 : width == 4 ? _mm_unpacklo_epi32(a, b)
                              : _mm_unpacklo_epi64(a, b);
      t[2 * k + 1] = width == 1   ? _mm_unpackhi_epi8(a, b)
                     : width == 2 ? _mm_unpackhi_epi16(a, b)
                     : width == 4 ? _mm_unpackhi_epi32(a, b)
                                  : _mm_unpackhi_epi64(a, b);
    }
#pragma GCC unroll 16
    for (int k = 0; k < n; k++) r[k] = t[k];
  }
#pragma GCC unroll 16
  for (int k = 0; k < n; k++) _mm_storeu_si128((void *)(d + k * dsb), r[k]);
}
INLINE void block_1(char *d, int64_t dsb, const char *s, int64_t ssa) { block_sse2(d, dsb, s, ssa, 16, 4, 1); }
INLINE void block_2(char *d, int64_t dsb, const char *s, int64_t ssa) { block_sse2(d, dsb, s, ssa, 8, 3, 2); }
INLINE void block_4(char *d, int64_t dsb, const char *s, int64_t ssa) { block_sse2(d, dsb, s, ssa, 4, 2, 4); }
INLINE void block_8(char *d, int64_t dsb, const char *s, int64_t ssa) { block_sse2(d, dsb, s, ssa, 2, 1, 8); }
DEFINE_TILE(tile_1, 16, 1, block_1, )
DEFINE_TILE(tile_2, 8, 2, block_2, )
DEFINE_TILE(tile_4, 4, 4, block_4, )
DEFINE_TILE(tile_8, 2, 8, block_8, )
#endif

#if defined(AVX2_BLOCKS)
/* AVX2, chosen at run time: 8 x 8 blocks of 4 bytes, 4 x 4 of 8 bytes, 2 x 2 of 16 bytes. */
#define AVX2 __attribute__((target("avx2")))
AVX2 INLINE void block_4_avx2(char *d, int64_t dsb, const char *s, int64_t ssa) {
  __m256 r[8], t[8];
#pragma GCC unroll 8
  for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps((const void *)(s + k * ssa));
#pragma GCC unroll 4
  for (int k = 0; k < 8; k += 2) { /* t[k]: columns 0, 1, 4, 5 of rows k, k + 1, interleaved; t[k + 1]: 2, 3, 6, 7 */
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
#pragma GCC unroll 2
  for (int k = 0; k < 8; k += 4) { /* r[k + c]: column c, and c + 4 in the upper half, of rows k to k + 3 */
    r[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
    r[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
    r[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
    r[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    _mm256_storeu_ps((void *)(d + c * dsb), _mm256_permute2f128_ps(r[c], r[c + 4], 0x20));
    _mm256_storeu_ps((void *)(d + (c + 4) * dsb), _mm256_permute2f128_ps(r[c], r[c + 4], 0x31));
  }
}
AVX2 INLINE void block_8_avx2(char *d, int64_t dsb, const char *s, int64_t ssa) {
  __m256d r0 = _mm256_loadu_pd((const void *)s), r1 = _mm256_loadu_pd((const void *)(s + ssa));
  __m256d r2 = _mm256_loadu_pd((const void *)(s + 2 * ssa)), r3 = _mm256_loadu_pd((const void *)(s + 3 * ssa));
  __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1); /* columns 0, 2 and 1, 3 */
  __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
  _mm256_storeu_pd((void *)d, _mm256_permute2f128_pd(t0, t2, 0x20));
  _mm256_storeu_pd((void *)(d + dsb), _mm256_permute2f128_pd(t1, t3, 0x20));
  _mm256_storeu_pd((void *)(d + 2 * dsb), _mm256_permute2f128_pd(t0, t2, 0x31));
  _mm256_storeu_pd((void *)(d + 3 * dsb), _mm256_permute2f128_pd(t1, t3, 0x31));
}
AVX2 INLINE void block_16_avx2(char *d, int64_t dsb, const char *s, int64_t ssa) {
  __m256d r0 = _mm256_loadu_pd((const void *)s), r1 = _mm256_loadu_pd((const void *)(s + ssa));
  _mm256_storeu_pd((void *)d, _mm256_permute2f128_pd(r0, r1, 0x20));
  _mm256_storeu_pd((void *)(d + dsb), _mm256_permute2f128_pd(r0, r1, 0x31));
}
DEFINE_TILE(tile_4_avx2, 8, 4, block_4_avx2, AVX2)
DEFINE_TILE(tile_8_avx2, 4, 8, block_8_avx2, AVX2)
DEFINE_TILE(tile_16_avx2, 2, 16, block_16_avx2, AVX2)
#endif

/* The tile function for elements of size bytes (NULL: none, the tiles go row by row through the
 * job's row function, which moves the elements as they are too). */
static TileFn tile_function(size_t size) {
#if defined(AVX2_BLOCKS)
  if (dlp_cpu_has_avx2() && (size == 4 || size == 8 || size == 16))
    return size == 4 ? tile_4_avx2 : size == 8 ? tile_8_avx2 : tile_16_avx2;
#endif
  switch (size) {
#if defined(__SSE2__)
  case 1: return tile_1;
  case 2: return tile_2;
  case 4: return tile_4;
  case 8: return tile_8;
#endif
  default: return NULL;
  }
}

/* Rows along a, a TILE x TILE block of (a, b) at a time. */
static void visit_tiles(const Walk *w, int a, int b, const Job *job, char *d, const char *s) {
  int64_t na = w->shape[a], nb = w->shape[b];
  for (int64_t j0 = 0; j0 < nb; j0 += TILE) {
    int64_t lb = nb - j0 < TILE ? nb - j0 : TILE;
    for (int64_t i0 = 0; i0 < na; i0 += TILE) {
      int64_t la = na - i0 < TILE ? na - i0 : TILE;
      char *dp = d + i0 * w->ds[a] + j0 * w->ds[b];
      const char *sp = s + i0 * w->ss[a] + j0 * w->ss[b];
      /* the fast dimensions run forward on both sides (negative strides take the rows) */
      if (job->tile && w->ds[a] > 0 && w->ss[b] > 0) job->tile(dp, w->ds[b], sp, w->ss[a], la, lb);
      else for (int64_t j = 0; j < lb; j++) do_row(job, dp + j * w->ds[b], w->ds[a], sp + j * w->ss[b], w->ss[a], la);
    }
  }
}

/* ---- large walks on several threads (compute/threads.c) ----
 * A walk of at least three tasks' worth of destination bytes is cut along one dimension
 * (cut_dimension) into parts, whole tiles each when that dimension is tiled; the parts run as tasks. A copy
 * gives the same bytes however it is cut, so only a destination that some byte of would be
 * written twice (overlapping strides) stays on one thread, where the last write wins as before.
 * A copy moves a byte in a fraction of the time an op computes one, so its tasks are larger than
 * an op's: on a 2-core machine a conversion to float16 of 2 MiB took 1.4x its one-thread time
 * in two tasks (the second thread's wake-up is most of it), one of 8 MiB 0.7x. */

#define TASK_BYTES (DLP_TASK_ELEMENTS * 16) /* 1 MiB */

typedef struct Parts {
  const Walk *w;
  int a, b, k; /* the walk's row (and tile) dimensions; the one cut */
  int64_t per; /* indices of k per part, the last part's fewer */
  const Job *job;
  char *d;
  const char *s;
  Visit visit;
} Parts;

static void run_part(void *ctx, int64_t i) {
  const Parts *p = ctx;
  Walk part = *p->w;
  int64_t lo = i * p->per, left = part.shape[p->k] - lo;
  part.shape[p->k] = left < p->per ? left : p->per;
  walk_outer(&part, p->a, p->b, p->job, p->d + lo * part.ds[p->k], p->s + lo * part.ss[p->k], p->visit);
}

/* The dimension to cut: the largest, but for the rows' own (a part of each row, for every row,
 * made a copy of a narrowed {3000, 3001} 3 times slower on one thread), which is cut only when
 * it is the walk's one dimension, in whole cache lines. */
static int cut_dimension(const Walk *w, int a, Visit visit) {
  int k = -1;
  for (int i = 0; i < w->ndim; i++)
    if ((visit != visit_row || i != a) && (k < 0 || w->shape[i] > w->shape[k])) k = i;
  return k < 0 ? a : k;
}

static void walk_all(const Walk *w, int a, int b, const Job *job, char *d, const char *s, Visit visit, size_t dsize) {
  int k = cut_dimension(w, a, visit);
  int64_t numel = 1;
  for (int i = 0; i < w->ndim; i++) numel *= w->shape[i]; /* fits: at most the tensors' element count */
  /* a destination that writes each byte once has no more bytes than int64 counts */
  if (numel >= 3 * TASK_BYTES / (int64_t)dsize && dlp_writes_each_byte_once(w->ndim, w->shape, w->ds, (int64_t)dsize) &&
      dlp_parallel_enabled()) {
    int64_t per_index = numel / w->shape[k] * (int64_t)dsize;
    int64_t per = (TASK_BYTES + per_index - 1) / per_index; /* a task's worth */
    if (per < (w->shape[k] + 255) / 256) per = (w->shape[k] + 255) / 256; /* 256 parts at most */
    int64_t whole = visit == visit_tiles && (k == a || k == b) ? TILE  /* tiles */
                    : k == a && (int64_t)dsize < 64           ? 64 / (int64_t)dsize /* cache lines */
                                                               : 1;
    per = (per + whole - 1) / whole * whole;
    if (per < w->shape[k]) {
      Parts p = {w, a, b, k, per, job, d, s, visit};
      dlp_parallel_for((w->shape[k] + per - 1) / per, run_part, &p);
      return;
    }
  }
  walk_outer(w, a, b, job, d, s, visit);
}

/* Run job over the simplified walk w from d and s; dsize and ssize are the element sizes. */
static void run(const Walk *w, const Job *job, char *d, const char *s, size_t dsize, size_t ssize) {
  if (w->ndim == 0) { /* one element */
    do_row(job, d, (int64_t)dsize, s, (int64_t)ssize, 1);
    return;
  }
  int a = fastest(w, w->ds), b = fastest(w, w->ss);
  if (a != b && dlp_magnitude(w->ds[a]) == (int64_t)dsize && dlp_magnitude(w->ss[b]) == (int64_t)ssize &&
      w->shape[a] >= TILED_FROM && w->shape[b] >= TILED_FROM) {
    walk_all(w, a, b, job, d, s, visit_tiles, dsize);
    return;
  }
  if (dlp_magnitude(w->ds[a]) != (int64_t)dsize && dlp_magnitude(w->ss[b]) == (int64_t)ssize) a = b;
  walk_all(w, a, a, job, d, s, visit_row, dsize);
}

/* Byte strides of t for walking it (dlp_walk_stride). */
static void byte_strides(const dlp_Tensor *t, int64_t *strides) {
  for (int i = 0; i < t->dl.ndim; i++) strides[i] = dlp_walk_stride(t, i);
}

/* dst and src have the same shape and dtypes that convert into each other (or the same one),
 * are host memory and do not overlap. */
static void copy_elements(dlp_Tensor *dst, const dlp_Tensor *src) {
  int64_t ds[DLP_MAX_NDIM], ss[DLP_MAX_NDIM];
  Walk w;
  if (dst->dtype == src->dtype && dlp_is_contiguous(dst) && dlp_is_contiguous(src)) {
    int64_t bytes = dlp_nbytes(dst);
    if (bytes > 0) memcpy(dlp_first_element(dst), dlp_first_element(src), (size_t)bytes); /* packed ones too */
    return;
  }
  byte_strides(dst, ds);
  byte_strides(src, ss);
  /* a dimension of stride 0 in the destination keeps what is written last: only its last index is
   * copied (an expanded destination may have 2^63 - 1 elements); ss * (size - 1) fits, src is sealed */
  int64_t shape[DLP_MAX_NDIM];
  const char *from = dlp_first_element(src);
  for (int i = 0; i < dst->dl.ndim; i++) {
    shape[i] = dst->dl.shape[i];
    if (ds[i] == 0 && shape[i] > 1) {
      from += ss[i] * (shape[i] - 1);
      shape[i] = 1;
    }
  }
  if (!simplify(&w, dst->dl.ndim, shape, ds, ss)) return;
  size_t size = dlp_dtypes[dst->dtype].itemsize;
  Job job = {dlp_row_function(dst->dtype, src->dtype), NULL, size, dst->dtype == src->dtype ? tile_function(size) : NULL};
  run(&w, &job, dlp_first_element(dst), from, dlp_dtypes[dst->dtype].itemsize, dlp_dtypes[src->dtype].itemsize);
}

void dlp_gather(char *out, const dlp_Tensor *t) {
  int64_t ds[DLP_MAX_NDIM], ss[DLP_MAX_NDIM];
  Walk w;
  int64_t itemsize = dlp_dtypes[t->dtype].itemsize;
  byte_strides(t, ss);
  dlp_contiguous_strides(t->dl.ndim, t->dl.shape, ds);
  for (int i = 0; i < t->dl.ndim; i++) ds[i] *= itemsize; /* fits: the output is t's size */
  if (!simplify(&w, t->dl.ndim, t->dl.shape, ds, ss)) return;
  Job job = {dlp_row_function(t->dtype, t->dtype), NULL, (size_t)itemsize, tile_function((size_t)itemsize)};
  run(&w, &job, out, dlp_first_element(t), (size_t)itemsize, (size_t)itemsize);
}

/* ---- packed and padded sub-byte elements (fp4, fp6) ---- */

/* Element k of a packed buffer: bits k*bits .. k*bits+bits-1 of the little-endian bit stream. */
static unsigned get_packed(const unsigned char *p, int64_t k, int bits) {
  unsigned v = 0;
  for (int b = 0; b < bits; b++) {
    int64_t bit = k * bits + b;
    v |= (unsigned)((p[bit >> 3] >> (bit & 7)) & 1) << b;
  }
  return v;
}

static void put_packed(unsigned char *p, int64_t k, int bits, unsigned v) {
  for (int b = 0; b < bits; b++) {
    int64_t bit = k * bits + b;
    unsigned char mask = (unsigned char)(1u << (bit & 7));
    if ((v >> b) & 1) p[bit >> 3] |= mask;
    else p[bit >> 3] &= (unsigned char)~mask;
  }
}

/* Same dtype, one side packed (always contiguous) and the other padded (one element per byte,
 * any strides): element by element in row-major order. */
static void copy_repacked(dlp_Tensor *dst, const dlp_Tensor *src) {
  int packed_dst = dlp_is_packed(dst->dtype, dst->flags);
  const dlp_Tensor *padded = packed_dst ? src : dst;
  int64_t strides[DLP_MAX_NDIM], idx[DLP_MAX_NDIM] = {0};
  int64_t n = dlp_numel(padded);
  int bits = dlp_dtypes[dst->dtype].bits, nd = padded->dl.ndim;
  unsigned mask = (1u << bits) - 1;
  unsigned char *packed = (unsigned char *)dlp_first_element(packed_dst ? dst : src);
  char *p = dlp_first_element(padded);
  byte_strides(padded, strides);
  for (int64_t k = 0; k < n; k++) {
    if (packed_dst) put_packed(packed, k, bits, (unsigned char)*p & mask);
    else *p = (char)get_packed(packed, k, bits);
    for (int d = nd - 1; d >= 0; d--) { /* next element in row-major order */
      if (++idx[d] < padded->dl.shape[d]) {
        p += strides[d];
        break;
      }
      p -= strides[d] * (padded->dl.shape[d] - 1);
      idx[d] = 0;
    }
  }
}

/* ---- dlp_copy ---- */

/* Spans fit: checked when the tensors were made. Memory is compared by what it is, not by who
 * owns it: two imports of one producer's memory have different owners but may share bytes, and
 * two mappings of one memfd share bytes at different addresses (ipc.c translates them). CUDA
 * device addresses are unique in a process (unified addressing), so two tensors of one device
 * are compared by address too; tensors of different devices never overlap. */
int dlp_overlaps(const dlp_Tensor *a, const dlp_Tensor *b) {
  dlp_Span sa, sb;
  int host = dlp_device_is_host(a->dl.device);
  if (host != dlp_device_is_host(b->dl.device)) return 0;
  if (!host && (a->dl.device.device_type != b->dl.device.device_type ||
                a->dl.device.device_id != b->dl.device.device_id))
    return 0;
  dlp_span_of(a->dl.ndim, a->dl.shape, a->dl.strides, a->dtype, a->flags, &sa);
  dlp_span_of(b->dl.ndim, b->dl.shape, b->dl.strides, b->dtype, b->flags, &sb);
  if (sa.numel == 0 || sb.numel == 0) return 0;
  uintptr_t a0 = (uintptr_t)dlp_first_element(a), b0 = (uintptr_t)dlp_first_element(b);
  uintptr_t alo = a0 + (uintptr_t)sa.lo, ahi = a0 + (uintptr_t)sa.hi;
  uintptr_t blo = b0 + (uintptr_t)sb.lo, bhi = b0 + (uintptr_t)sb.hi;
  if (alo < bhi && blo < ahi) return 1;
  return host && dlp_ipc_shares_file_bytes(alo, ahi, blo, bhi);
}

void dlp_copy(lua_State *L, dlp_Tensor *dst, dlp_Tensor *src, dlp_CudaStream *stream, const char *what) {
  int top = lua_gettop(L);
  int same = dst->dl.ndim == src->dl.ndim;
  for (int i = 0; same && i < dst->dl.ndim; i++) same = dst->dl.shape[i] == src->dl.shape[i];
  if (!same) {
    dlp_push_shape(L, dst->dl.ndim, dst->dl.shape);
    dlp_push_shape(L, src->dl.ndim, src->dl.shape);
    luaL_error(L, "%s: shapes differ (destination %s, source %s)", what, lua_tostring(L, -2), lua_tostring(L, -1));
  }
  dlp_check_writable(L, dst, what);
  if (!dlp_device_is_host(dst->dl.device) || !dlp_device_is_host(src->dl.device)) {
    dlp_cuda_copy(L, dst, src, stream, what); /* raises for devices other than CUDA's */
    return;
  }
  if (!dlp_row_function(dst->dtype, src->dtype))
    luaL_error(L, "%s: cannot convert %s to %s (only byte-for-byte copies of the same dtype)", what,
               dlp_dtypes[src->dtype].name, dlp_dtypes[dst->dtype].name);
  dlp_live(L, dst, what);
  dlp_live(L, src, what);
  dlp_Tensor *from = src;
  if (dlp_overlaps(dst, src)) { /* through a contiguous temporary, allocated before memory is taken */
    DLDevice cpu = {kDLCPU, 0};
    from = dlp_tensor_new(L, src->dtype, src->flags & DLP_FLAG_SUBBYTE_PADDED, cpu, src->dl.ndim, src->dl.shape, 0,
                          what);
    dlp_live(L, src, what);
    copy_elements(from, src);
  }
  dlp_live(L, dst, what);
  if (dlp_is_packed(dst->dtype, dst->flags) != dlp_is_packed(from->dtype, from->flags)) copy_repacked(dst, from);
  else copy_elements(dst, from);
  if (from != src) dlp_tensor_release(from);
  lua_settop(L, top);
}

dlp_Tensor *dlp_clone(lua_State *L, int idx, int dtype, DLDevice device, dlp_CudaStream *stream, const char *what) {
  dlp_Tensor *t = lua_touserdata(L, idx);
  /* a padded sub-byte tensor stays padded (same dtype): its layout is the producer's choice */
  uint64_t flags = dtype == t->dtype ? t->flags & DLP_FLAG_SUBBYTE_PADDED : 0;
  dlp_Tensor *c = dlp_tensor_new(L, dtype, flags, device, t->dl.ndim, t->dl.shape, 0, what);
  c->flags = flags;
  dlp_copy(L, c, t, stream, what);
  return c;
}

void dlp_fill(lua_State *L, dlp_Tensor *t, int idx, const char *what) {
  unsigned char value[16];
  int64_t strides[DLP_MAX_NDIM];
  Walk w;
  dlp_check_writable(L, t, what);
  if (t->dl.device.device_type == kDLCUDA) {
    dlp_check_element(L, idx, t->dtype, value, what);
    dlp_fill_on_cuda(L, t, value, NULL, what); /* a kernel on the tensor's stream */
    return;
  }
  dlp_check_host(L, t, what);
  dlp_check_element(L, idx, t->dtype, value, what); /* runs no Lua code */
  dlp_live(L, t, what);
  byte_strides(t, strides);
  /* a dimension of stride 0 repeats one element: fill it once (an expanded tensor may have 2^63 - 1) */
  int64_t shape[DLP_MAX_NDIM];
  for (int i = 0; i < t->dl.ndim; i++) shape[i] = strides[i] == 0 && t->dl.shape[i] > 0 ? 1 : t->dl.shape[i];
  if (!simplify(&w, t->dl.ndim, shape, strides, strides)) return;
  size_t itemsize = dlp_dtypes[t->dtype].itemsize;
  Job job = {NULL, value, itemsize, NULL};
  run(&w, &job, dlp_first_element(t), dlp_first_element(t), itemsize, itemsize);
}

static int l_fill(lua_State *L) {
  dlp_check_no_more(L, 3, "fill", "one value");
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  luaL_checkany(L, 2);
  dlp_fill(L, t, 2, "fill");
  lua_settop(L, 1);
  return 1;
}

/* The device whose streams order a copy between a and b: the CUDA side. */
static DLDevice stream_device(DLDevice a, DLDevice b) {
  return dlp_device_is_host(a) ? b : a;
}

/* t:copy(src [, {stream = s}]) */
static int l_copy(lua_State *L) {
  dlp_Options o;
  dlp_check_no_more(L, 4, "copy", "a source tensor and an options table");
  dlp_Tensor *dst = dlp_tensor_check(L, 1);
  dlp_Tensor *src = dlp_tensor_check(L, 2);
  dlp_read_options(L, 3, DLP_OPT_STREAM, &o);
  dlp_CudaStream *s = dlp_cuda_check_stream(L, o.stream, stream_device(dst->dl.device, src->dl.device), -1, "copy");
  dlp_copy(L, dst, src, s, "copy");
  lua_settop(L, 1);
  return 1;
}

static int l_clone(lua_State *L) {
  dlp_check_no_more(L, 2, "clone", "no argument");
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  dlp_clone(L, 1, t->dtype, t->dl.device, NULL, "clone"); /* host, or CUDA when it is there */
  return 1;
}

static int l_contiguous(lua_State *L) {
  dlp_check_no_more(L, 2, "contiguous", "no argument");
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  if (dlp_is_contiguous(t)) {
    lua_settop(L, 1);
    return 1;
  }
  dlp_clone(L, 1, t->dtype, t->dl.device, NULL, "contiguous");
  return 1;
}

/* One string argument of t:to: a dtype or a device, into o; a second of the same kind raises. */
static void to_target(lua_State *L, int arg, dlp_Options *o) {
  size_t len;
  const char *s = lua_tolstring(L, arg, &len);
  int dtype = dlp_test_dtype_name(s, len), code;
  DLDevice device;
  if (dtype >= 0) {
    if (o->dtype >= 0) luaL_argerror(L, arg, "a second dtype (t:to takes a dtype and a device)");
    o->dtype = dtype;
    return;
  }
  code = dlp_parse_device_name(s, len, &device);
  if (code == DLP_DEVICE_NUL)
    luaL_argerror(L, arg,
                  lua_pushfstring(L, "dtype or device name %s contains an embedded NUL", dlp_push_quoted(L, s, len)));
  if (code == DLP_DEVICE_UNKNOWN)
    luaL_argerror(L, arg, lua_pushfstring(L, "%s is neither a dtype nor a device", dlp_push_quoted(L, s, len)));
  if (code != DLP_DEVICE_OK) luaL_argerror(L, arg, dlp_push_device_error(L, s, len, code));
  if (o->has_device) luaL_argerror(L, arg, "a second device (t:to takes a dtype and a device)");
  o->device = device;
  o->has_device = 1;
}

/* t:to(dtype | device | dtype, device | device, dtype | {dtype=, device=, copy=, stream=}) */
static int l_to(lua_State *L) {
  dlp_Options o;
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  if (lua_type(L, 2) == LUA_TSTRING) {
    dlp_read_options(L, 0, 0, &o); /* the defaults */
    to_target(L, 2, &o);
    if (!lua_isnoneornil(L, 3)) {
      if (lua_type(L, 3) != LUA_TSTRING)
        return luaL_argerror(L, 3, lua_pushfstring(L, "a dtype or device name expected, got %s", luaL_typename(L, 3)));
      to_target(L, 3, &o);
    }
    dlp_check_no_more(L, 4, "to", "a dtype, a device, both, or an options table");
  } else {
    luaL_checktype(L, 2, LUA_TTABLE);
    dlp_check_no_more(L, 3, "to", "a dtype, a device, both, or an options table");
    dlp_read_options(L, 2, DLP_OPT_DTYPE | DLP_OPT_DEVICE | DLP_OPT_COPY | DLP_OPT_STREAM, &o);
  }
  int dtype = o.dtype >= 0 ? o.dtype : t->dtype;
  DLDevice device = o.has_device ? o.device : t->dl.device;
  dlp_CudaStream *s = dlp_cuda_check_stream(L, o.stream, stream_device(device, t->dl.device), -1, "to");
  if (dtype == t->dtype && o.copy != 1) {
    if (dlp_device_equal(device, t->dl.device)) {
      lua_settop(L, 1);
      return 1;
    }
    if (device.device_type == kDLCPU && dlp_device_is_host(t->dl.device)) {
      dlp_tensor_alias(L, 1, device, "to"); /* pinned and managed memory is CPU memory */
      return 1;
    }
  }
  if (o.copy == 0) {
    dlp_push_device_name(L, device);
    return dlp_buffer_error(L, "to: copy = false, but converting to %s on %s needs a copy",
                            dlp_dtypes[dtype].name, lua_tostring(L, -1));
  }
  dlp_clone(L, 1, dtype, device, s, "to");
  return 1;
}

void dlp_copy_register(lua_State *L, int methods) {
  static const luaL_Reg method_list[] = {
    {"fill", l_fill}, {"copy", l_copy}, {"clone", l_clone}, {"contiguous", l_contiguous},
    {"to", l_to}, {NULL, NULL},
  };
  dlp_register(L, methods, method_list);
}
