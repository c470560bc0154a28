/* A vectorised sort of 32-bit values for AVX-512 processors (sort.c calls it for lines sorted for
 * their values only).
 *
 * Each element becomes the unsigned key sort_rules.h defines (descending flips it), the keys are
 * sorted by a quicksort whose partitions and small sorts run 16 keys at a time in ZMM registers,
 * and the keys are turned back into elements. Equal keys are equal elements but for -0.0 and 0.0
 * (one key) and NaNs (one key, whatever their sign and payload); when a line has -0.0 or NaN, the
 * runs of those two keys are refilled with the input's zeros and NaNs in input order, which gives
 * exactly the stable sort's result. So the sort of the keys need not be stable.
 *
 * The quicksort: the pivot is the median of 16 keys sampled across the range (64 for long ranges);
 * the partition reads 8 registers at a time from whichever end of the unread part has less room
 * before it, and writes the keys below the pivot after those already written at the left end, the
 * others before those at the right end (VPCOMPRESSD). The first and last 128 keys are read before
 * anything is written, so that each side always has room for the next 128. A range of up to 256
 * keys is sorted in registers by a bitonic network (the range padded with the largest key). When
 * the pivot is the range's least key, its copies are split off by a second partition (at pivot +
 * 1): they are in place, so every partition makes progress however many keys repeat. Ranges that
 * still recurse too deep go through a heap sort. No pass only makes or decodes keys: the first
 * partition of a long contiguous line reads the elements and writes their keys into the result,
 * and each range, once sorted, is written back as elements. The two sides of that first partition
 * are sorted on two threads (threads.c) when the line is long and the module has more than one. */
#include "compute/sort_avx512.h"
#include "internal.h" /* dlp_parallel_for */

#if DLP_HAVE_SORT32_AVX512
#include <immintrin.h>
#include <string.h>

#define AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))
#define INLINE static inline __attribute__((always_inline)) AVX512

#define SMALL 256 /* ranges up to this many keys: the network (16 registers) */
#define SIGN 0x80000000u

/* ---- keys ----
 * A line's keys and what turns them back: the kind of its elements, and the bits every key is
 * flipped by (all for descending). */
typedef struct Line {
  int kind;
  uint32_t flip;
} Line;

/* The key of the bits b of one element */
static uint32_t key_of(const Line *line, uint32_t b) {
  if (line->kind == DLP_SORT32_FLOAT) {
    int nan = (b & ~SIGN) > 0x7f800000u, negzero = b == SIGN;
    b = nan ? UINT32_MAX : negzero ? SIGN : b ^ ((uint32_t)((int32_t)b >> 31) | SIGN);
  } else if (line->kind == DLP_SORT32_INT) {
    b ^= SIGN;
  }
  return b ^ line->flip;
}

/* The keys of 16 elements (bits); *special: the lanes of NaN or -0.0 */
INLINE __m512i keys_of(const Line *line, __m512i v, __mmask16 *special) {
  const __m512i sign = _mm512_set1_epi32((int)SIGN);
  *special = 0;
  if (line->kind == DLP_SORT32_FLOAT) {
    __m512i key = _mm512_xor_si512(v, _mm512_or_si512(_mm512_srai_epi32(v, 31), sign));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_andnot_si512(sign, v), _mm512_set1_epi32(0x7f800000));
    __mmask16 negzero = _mm512_cmpeq_epi32_mask(v, sign);
    *special = nan | negzero;
    key = _mm512_mask_mov_epi32(key, nan, _mm512_set1_epi32(-1));
    v = _mm512_mask_mov_epi32(key, negzero, sign);
  } else if (line->kind == DLP_SORT32_INT) {
    v = _mm512_xor_si512(v, sign);
  }
  return _mm512_xor_si512(v, _mm512_set1_epi32((int)line->flip));
}

/* The elements of 16 keys (a NaN's key gives 0x7fffffff, -0.0's 0.0) */
INLINE __m512i values_of(const Line *line, __m512i key) {
  const __m512i sign = _mm512_set1_epi32((int)SIGN);
  key = _mm512_xor_si512(key, _mm512_set1_epi32((int)line->flip));
  if (line->kind == DLP_SORT32_FLOAT) /* negative keys were flipped whole, the others' sign bit */
    return _mm512_xor_si512(key, _mm512_or_si512(_mm512_andnot_si512(_mm512_srai_epi32(key, 31),
                                                                     _mm512_set1_epi32(0x7fffffff)), sign));
  return line->kind == DLP_SORT32_INT ? _mm512_xor_si512(key, sign) : key;
}

/* Keys of n elements at p (step bytes apart) into d; returns whether some float is NaN or -0.0 */
AVX512 static int make_keys(const Line *line, const char *p, int64_t step, int64_t n, uint32_t *d) {
  __mmask16 special = 0;
  if (step == 4) {
    for (int64_t i = 0; i < n; i += 16) {
      __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1), s;
      __m512i key = keys_of(line, _mm512_maskz_loadu_epi32(m, p + 4 * i), &s);
      special |= s & m;
      _mm512_mask_storeu_epi32(d + i, m, key);
    }
    return special != 0;
  }
  for (int64_t i = 0; i < n; i++) {
    uint32_t b;
    memcpy(&b, p + i * step, 4);
    special |= line->kind == DLP_SORT32_FLOAT && ((b & ~SIGN) > 0x7f800000u || b == SIGN);
    d[i] = key_of(line, b);
  }
  return special != 0;
}

/* The n keys at d made elements again */
AVX512 static void unmake_keys(const Line *line, int64_t n, uint32_t *d) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_epi32(d + i, m, values_of(line, _mm512_maskz_loadu_epi32(m, d + i)));
  }
}

/* ---- the bitonic network ----
 * Keys at positions i and i ^ j are compared, for block sizes k = 2, 4, ... and j = k/2 ... 1;
 * position i keeps the larger when (i & j) != 0 differs from (i & k) != 0 (blocks whose bit k is
 * set sort downwards until the last merge). Lanes of one register are paired by shuffles; for
 * j >= 16 whole registers are. */

/* The 16 lanes with bit j (1, 2, 4 or 8) of their number set */
static const __mmask16 lanes_with_bit[9] = {0, 0xAAAA, 0xCCCC, 0, 0xF0F0, 0, 0, 0, 0xFF00};

INLINE __m512i partner(__m512i v, int j) {
  switch (j) {
    case 1: return _mm512_shuffle_epi32(v, (_MM_PERM_ENUM)0xB1);
    case 2: return _mm512_shuffle_epi32(v, (_MM_PERM_ENUM)0x4E);
    case 4: return _mm512_shuffle_i32x4(v, v, 0xB1);
    default: return _mm512_shuffle_i32x4(v, v, 0x4E);
  }
}

/* One step (k, j) over register number reg of the network */
INLINE __m512i lane_step(__m512i v, int reg, int k, int j) {
  __mmask16 high = k < 16 ? lanes_with_bit[k] : (reg * 16) & k ? 0xFFFF : 0;
  __m512i p = partner(v, j);
  return _mm512_mask_max_epu32(_mm512_min_epu32(v, p), (__mmask16)(lanes_with_bit[j] ^ high), v, p);
}

/* The register networks' loops run a number of times known once regs is a constant: GCC unrolls them
 * fully when asked. Clang unrolls such loops by itself and fails (-Wpass-failed) to honour the request
 * on the nested ones, so it gets none. */
#define PRAGMA(text) _Pragma(#text)
#if defined(__clang__)
#define UNROLL(n)
#else
#define UNROLL(n) PRAGMA(GCC unroll n)
#endif

INLINE void network(__m512i *r, const int regs) {
UNROLL(16)
  for (int k = 2; k <= 16 * regs; k *= 2) {
UNROLL(16)
    for (int j = k / 2; j >= 16; j /= 2) {
UNROLL(16)
      for (int a = 0; a < regs; a++) {
        int b = a ^ (j / 16);
        if (b < a) continue;
        __m512i lo = _mm512_min_epu32(r[a], r[b]), hi = _mm512_max_epu32(r[a], r[b]);
        int up = ((a * 16) & k) == 0;
        r[a] = up ? lo : hi;
        r[b] = up ? hi : lo;
      }
    }
UNROLL(16)
    for (int j = k < 16 ? k / 2 : 8; j >= 1; j /= 2) {
UNROLL(16)
      for (int a = 0; a < regs; a++) r[a] = lane_step(r[a], a, k, j);
    }
  }
}

/* Sort the n <= 16 * regs keys at a in registers, and write them back as elements */
INLINE void sort_in_registers(const Line *line, uint32_t *a, int64_t n, const int regs) {
  __m512i r[16];
  const __m512i top = _mm512_set1_epi32(-1);
UNROLL(16)
  for (int i = 0; i < regs; i++) {
    int64_t have = n - 16 * i;
    __mmask16 m = have >= 16 ? 0xFFFF : have <= 0 ? 0 : (__mmask16)((1u << have) - 1);
    r[i] = _mm512_mask_loadu_epi32(top, m, a + 16 * i);
  }
  network(r, regs);
UNROLL(16)
  for (int i = 0; i < regs; i++) {
    int64_t have = n - 16 * i;
    __mmask16 m = have >= 16 ? 0xFFFF : have <= 0 ? 0 : (__mmask16)((1u << have) - 1);
    _mm512_mask_storeu_epi32(a + 16 * i, m, values_of(line, r[i]));
  }
}

AVX512 static void sort_small(const Line *line, uint32_t *a, int64_t n) {
  if (n <= 16) sort_in_registers(line, a, n, 1);
  else if (n <= 32) sort_in_registers(line, a, n, 2);
  else if (n <= 64) sort_in_registers(line, a, n, 4);
  else if (n <= 128) sort_in_registers(line, a, n, 8);
  else sort_in_registers(line, a, n, 16);
}

/* ---- the quicksort ---- */

/* The median of 64 keys */
AVX512 static uint32_t median_of(const uint32_t *sample) {
  __m512i r[4];
  for (int i = 0; i < 4; i++) r[i] = _mm512_loadu_si512(sample + 16 * i);
  network(r, 4);
  return (uint32_t)_mm_cvtsi128_si32(_mm512_castsi512_si128(r[2])); /* the 33rd of 64 */
}

/* The keys of v (those in `valid`) below the pivot written at a[left...], the others before
 * a[right]. In the main loop (full) each side has room for 16 more: one register holding the keys
 * below in its first lanes and the others in its last is stored whole at both places. */
#define SPLIT(v, valid, full)                                                                      \
  do {                                                                                             \
    __mmask16 below_ = _mm512_mask_cmplt_epu32_mask(valid, v, pivot_v);                            \
    __mmask16 above_ = (__mmask16)(~below_ & (valid));                                             \
    int nb_ = __builtin_popcount(below_), na_ = __builtin_popcount(above_);                        \
    if (full) {                                                                                    \
      __m512i ends_ = _mm512_permutexvar_epi32(reverse, _mm512_maskz_compress_epi32(above_, v));   \
      ends_ = _mm512_mask_compress_epi32(ends_, below_, v);                                        \
      _mm512_storeu_si512(a + left, ends_);                                                        \
      _mm512_storeu_si512(a + right - 16, ends_);                                                  \
    } else {                                                                                       \
      _mm512_mask_storeu_epi32(a + left, (__mmask16)((1u << nb_) - 1), _mm512_maskz_compress_epi32(below_, v)); \
      _mm512_mask_storeu_epi32(a + right - na_, (__mmask16)((1u << na_) - 1),                      \
                               _mm512_maskz_compress_epi32(above_, v));                            \
    }                                                                                              \
    left += nb_;                                                                                   \
    right -= na_;                                                                                  \
  } while (0)

#define VECTORS 8              /* registers read at a time from one end */
#define BLOCK (16 * VECTORS)

/* Partition a[0..n) (n >= 2 * BLOCK) around pivot: returns m, with a[0..m) below it and a[m..n)
 * not. The first and last BLOCK keys are read before anything is written; then each side has room
 * for the next BLOCK whichever end they are read from. */
AVX512 static int64_t partition(uint32_t *a, int64_t n, uint32_t pivot) {
  const __m512i pivot_v = _mm512_set1_epi32((int)pivot);
  const __m512i reverse = _mm512_set_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i first[VECTORS], last[VECTORS], v[VECTORS];
UNROLL(8)
  for (int i = 0; i < VECTORS; i++) {
    first[i] = _mm512_loadu_si512(a + 16 * i);
    last[i] = _mm512_loadu_si512(a + n - BLOCK + 16 * i);
  }
  /* unread: [from, to); written: [0, left) and [right, n) */
  int64_t from = BLOCK, to = n - BLOCK, left = 0, right = n;
  while (to - from >= BLOCK) {
    int from_left = from - left <= right - to; /* the side with less room (no branch: either is likely) */
    const uint32_t *src = a + (from_left ? from : to - BLOCK);
    from += from_left ? BLOCK : 0;
    to -= from_left ? 0 : BLOCK;
UNROLL(8)
    for (int i = 0; i < VECTORS; i++) v[i] = _mm512_loadu_si512(src + 16 * i);
UNROLL(8)
    for (int i = 0; i < VECTORS; i++) SPLIT(v[i], 0xFFFF, 1);
  }
  /* the rest (under BLOCK), and the first and last BLOCK, fill [left, right) exactly */
  int64_t rest = to - from;
  __mmask16 valid[VECTORS];
UNROLL(8)
  for (int i = 0; i < VECTORS; i++) {
    int64_t have = rest - 16 * i;
    valid[i] = have >= 16 ? 0xFFFF : have <= 0 ? 0 : (__mmask16)((1u << have) - 1);
    v[i] = _mm512_maskz_loadu_epi32(valid[i], a + from + 16 * i);
  }
UNROLL(8)
  for (int i = 0; i < VECTORS; i++) SPLIT(v[i], valid[i], 0);
UNROLL(8)
  for (int i = 0; i < VECTORS; i++) SPLIT(first[i], 0xFFFF, 0);
UNROLL(8)
  for (int i = 0; i < VECTORS; i++) SPLIT(last[i], 0xFFFF, 0);
  return left;
}
static void sift_down(uint32_t *a, int64_t i, int64_t n) {
  uint32_t key = a[i];
  for (int64_t c; (c = 2 * i + 1) < n; i = c) {
    if (c + 1 < n && a[c + 1] > a[c]) c++;
    if (a[c] <= key) break;
    a[i] = a[c];
  }
  a[i] = key;
}

static void heap_sort(uint32_t *a, int64_t n) {
  for (int64_t i = n / 2; i-- > 0;) sift_down(a, i, n);
  for (int64_t end = n - 1; end > 0; end--) {
    uint32_t t = a[0];
    a[0] = a[end];
    a[end] = t;
    sift_down(a, 0, end);
  }
}

/* A pivot for a[0..n) (n > SMALL): the median of 16 keys spread over it, of 64 for long ranges
 * (where a better split saves more) */
AVX512 static uint32_t pivot_of(const uint32_t *a, int64_t n) {
  const __m512i lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  if (n <= 32768) {
    int gap = (int)(n / 16);
    __m512i r = _mm512_i32gather_epi32(_mm512_add_epi32(_mm512_mullo_epi32(lanes, _mm512_set1_epi32(gap)),
                                                        _mm512_set1_epi32(gap / 2)), a, 4);
    network(&r, 1);
    return (uint32_t)_mm_extract_epi32(_mm512_extracti32x4_epi32(r, 2), 0); /* the 9th of 16 */
  }
  uint32_t sample[64];
  int64_t gap = n / 64;
  for (int i = 0; i < 64; i++) sample[i] = a[i * gap + gap / 2];
  return median_of(sample);
}

/* Sort the keys a[0..n) and write them back as elements */
AVX512 static void quicksort(const Line *line, uint32_t *a, int64_t n, int depth) {
  while (n > SMALL) {
    if (depth-- == 0) {
      heap_sort(a, n);
      unmake_keys(line, n, a);
      return;
    }
    uint32_t pivot = pivot_of(a, n);
    int64_t m = partition(a, n, pivot);
    if (m == 0) { /* the pivot is the least key: its copies go first, and stay there */
      m = pivot == UINT32_MAX ? n : partition(a, n, pivot + 1);
      unmake_keys(line, m, a);
      a += m;
      n -= m;
      continue;
    }
    if (m < n - m) { /* the smaller side by recursion, the larger by the loop */
      quicksort(line, a, m, depth);
      a += m;
      n -= m;
    } else {
      quicksort(line, a + m, n - m, depth);
      n = m;
    }
  }
  sort_small(line, a, n);
}

/* The first partition of a long contiguous line p of n elements, made keys on the way into d
 * (nothing needs buffering: the keys go elsewhere); returns m as partition does, and whether
 * some float is NaN or -0.0. */
AVX512 static int64_t partition_from(const Line *line, const char *p, int64_t n, uint32_t *a, int *special) {
  uint32_t sample[64], b;
  int64_t gap = n / 64;
  for (int i = 0; i < 64; i++) {
    memcpy(&b, p + 4 * (i * gap + gap / 2), 4);
    sample[i] = key_of(line, b);
  }
  const __m512i pivot_v = _mm512_set1_epi32((int)median_of(sample));
  const __m512i reverse = _mm512_set_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int64_t left = 0, right = n, i = 0;
  __mmask16 any = 0, s;
  /* while 32 are left to write, the whole-register stores at both ends do not overlap */
  for (; n - i >= 32; i += 16) {
    __m512i v = keys_of(line, _mm512_loadu_si512(p + 4 * i), &s);
    any |= s;
    SPLIT(v, 0xFFFF, 1);
  }
  for (; i < n; i += 16) {
    __mmask16 valid = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    __m512i v = keys_of(line, _mm512_maskz_loadu_epi32(valid, p + 4 * i), &s);
    any |= s & valid;
    SPLIT(v, valid, 0);
  }
  *special = any != 0;
  return left;
}
#undef SPLIT

/* The two sides of the first partition of a long line, one task each (any split gives the same
 * result: the sorted keys are unique, whoever sorts them) */
typedef struct Sides {
  const Line *line;
  uint32_t *a;
  int64_t m, n;
  int depth;
} Sides;

static void sort_side(void *ctx, int64_t i) {
  const Sides *s = ctx;
  if (i == 0) quicksort(s->line, s->a, s->m, s->depth);
  else quicksort(s->line, s->a + s->m, s->n - s->m, s->depth);
}

/* The first place in the sorted elements d[0..n) whose key is not below `key` */
static int64_t first_not_below(const Line *line, const uint32_t *d, int64_t n, uint32_t key) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (key_of(line, d[mid]) < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

void dlp_sort32_avx512(int kind, const char *p, int64_t step, int64_t n, int descending, uint32_t *d) {
  Line line = {kind, descending ? UINT32_MAX : 0};
  int special, depth = 8;
  for (int64_t m = n; m > 1; m /= 2) depth += 2;
#ifdef DLPACK_LUA_TEST_SORT_DEPTH
  /* the test build (build/gen): the first partition's sides go to the heap sort (spec/sort_spec.lua) */
  depth = DLPACK_LUA_TEST_SORT_DEPTH;
#endif
  if (step == 4 && n > SMALL) {
    int64_t m = partition_from(&line, p, n, d, &special);
    Sides sides = {&line, d, m, n, depth};
    if (n >= 2 * DLP_TASK_ELEMENTS && dlp_parallel_enabled()) {
      dlp_parallel_for(2, sort_side, &sides);
    } else {
      sort_side(&sides, 0);
      sort_side(&sides, 1);
    }
  } else {
    special = make_keys(&line, p, step, n, d);
    quicksort(&line, d, n, depth);
  }
  if (special) { /* the runs of zeros and NaNs refilled with the input's, in their order */
    int64_t zeros = first_not_below(&line, d, n, SIGN ^ line.flip);
    int64_t nans = first_not_below(&line, d, n, UINT32_MAX ^ line.flip);
    for (int64_t i = 0; i < n; i++) {
      uint32_t b;
      memcpy(&b, p + i * step, 4);
      if ((b & ~SIGN) == 0) d[zeros++] = b;
      else if ((b & ~SIGN) > 0x7f800000u) d[nans++] = b;
    }
  }
}

#else /* never called: sort.c's vector_sort is never set */
void dlp_sort32_avx512(int kind, const char *p, int64_t step, int64_t n, int descending, uint32_t *d) {
  (void)kind, (void)p, (void)step, (void)n, (void)descending, (void)d;
}
#endif
