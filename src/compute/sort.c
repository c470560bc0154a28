/* Sorting: sort argsort topk median quantile, over one dimension of any strided layout.
 *
 * Each line along the dimension becomes a row of unsigned keys whose order is the elements' order
 * (NumPy's: NaN after everything, -0.0 equal to 0.0; descending flips every key, so NaN comes
 * first, as torch), and a least-significant-digit radix sort moves the keys with their positions:
 * stable, so equal elements keep their order (NumPy's kind='stable'), whatever is asked. Digits
 * that are the same in every key are skipped (a pass only moves keys that differ there). Short
 * lines go through an insertion sort. Sorted values are decoded from the keys when the mapping
 * is exact for the line (no NaN, no -0.0), else gathered from the input by position.
 *
 * Complex tensors raise: complex numbers have no order (NumPy's lexicographic order is not
 * followed, as in min/max/argmin/argmax). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/sort_avx512.h"
#include "compute/sort_rules.h"
#include "internal.h"

enum { K_BOOL, K_UINT, K_INT, K_FLOAT, K_COMPLEX }; /* dlp_dtype_kind */

#define SHORT_LINE 32 /* lines up to this length: insertion sort */

/* ---- keys ---- */

static int wide_keys(int dtype) { return dlp_dtypes[dtype].itemsize == 8; }

static uint32_t ld32(const char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t ld64(const char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint16_t ld16(const char *p) { uint16_t v; memcpy(&v, p, 2); return v; }

/* Keys of n elements from p (step bytes apart) into k, flipped by `flip`; returns whether some
 * element's key does not give it back. */
static int keys32(int dtype, const char *p, int64_t step, int64_t n, uint32_t flip, uint32_t *k) {
  int special = 0;
  switch (dtype) {
    case DLP_BOOL:
      for (int64_t i = 0; i < n; i++) k[i] = (uint32_t)(p[i * step] != 0) ^ flip;
      return 1; /* bools other than 0 and 1 */
    case DLP_UINT8: for (int64_t i = 0; i < n; i++) k[i] = (uint8_t)p[i * step] ^ flip; break;
    case DLP_INT8: for (int64_t i = 0; i < n; i++) k[i] = ((uint8_t)p[i * step] ^ 0x80u) ^ flip; break;
    case DLP_UINT16: for (int64_t i = 0; i < n; i++) k[i] = ld16(p + i * step) ^ flip; break;
    case DLP_INT16: for (int64_t i = 0; i < n; i++) k[i] = (ld16(p + i * step) ^ 0x8000u) ^ flip; break;
    case DLP_UINT32: for (int64_t i = 0; i < n; i++) k[i] = ld32(p + i * step) ^ flip; break;
    case DLP_INT32: for (int64_t i = 0; i < n; i++) k[i] = (ld32(p + i * step) ^ 0x80000000u) ^ flip; break;
    case DLP_FLOAT16:
      for (int64_t i = 0; i < n; i++) {
        uint16_t b = ld16(p + i * step);
        DLP_FLOAT_KEY(uint16_t, b, DLP_SIGN16, DLP_HALF_INF, special);
        k[i] = b ^ flip;
      }
      break;
    case DLP_BFLOAT16:
      for (int64_t i = 0; i < n; i++) {
        uint16_t b = ld16(p + i * step);
        DLP_FLOAT_KEY(uint16_t, b, DLP_SIGN16, DLP_BFLOAT_INF, special);
        k[i] = b ^ flip;
      }
      break;
    default: /* float32 */
      for (int64_t i = 0; i < n; i++) {
        uint32_t b = ld32(p + i * step);
        DLP_FLOAT_KEY(uint32_t, b, DLP_SIGN32, DLP_FLOAT_INF, special);
        k[i] = b ^ flip;
      }
  }
  return special;
}

static int keys64(int dtype, const char *p, int64_t step, int64_t n, uint64_t flip, uint64_t *k) {
  int special = 0;
  const uint64_t sign = (uint64_t)1 << 63;
  switch (dtype) {
    case DLP_UINT64: for (int64_t i = 0; i < n; i++) k[i] = ld64(p + i * step) ^ flip; break;
    case DLP_INT64: for (int64_t i = 0; i < n; i++) k[i] = (ld64(p + i * step) ^ sign) ^ flip; break;
    default: /* float64 */
      for (int64_t i = 0; i < n; i++) {
        uint64_t b = ld64(p + i * step);
        DLP_FLOAT_KEY(uint64_t, b, sign, DLP_DOUBLE_INF, special);
        k[i] = b ^ flip;
      }
  }
  return special;
}

/* The elements of n keys (flipped back by `flip`; no NaN, no -0.0: keys that give their bits
 * back) into d, step bytes apart. */
#define UNKEY_LOOP(T, expr)                 \
  for (int64_t i = 0; i < n; i++) {         \
    K key = k[i] ^ flip;                    \
    T b = (T)(expr);                        \
    memcpy(d + i * step, &b, sizeof b);     \
  }                                         \
  break

#define K uint32_t
static void unkeys32(int dtype, const uint32_t *k, int64_t n, uint32_t flip, char *d, int64_t step) {
  switch (dtype) {
    case DLP_UINT8: UNKEY_LOOP(uint8_t, key);
    case DLP_INT8: UNKEY_LOOP(uint8_t, key ^ 0x80u);
    case DLP_UINT16: UNKEY_LOOP(uint16_t, key);
    case DLP_INT16: UNKEY_LOOP(uint16_t, key ^ 0x8000u);
    case DLP_UINT32: UNKEY_LOOP(uint32_t, key);
    case DLP_INT32: UNKEY_LOOP(uint32_t, key ^ 0x80000000u);
    case DLP_FLOAT16: case DLP_BFLOAT16: UNKEY_LOOP(uint16_t, key & 0x8000u ? key ^ 0x8000u : ~key);
    default: UNKEY_LOOP(uint32_t, key & 0x80000000u ? key ^ 0x80000000u : ~key);
  }
}
#undef K
#define K uint64_t
static void unkeys64(int dtype, const uint64_t *k, int64_t n, uint64_t flip, char *d, int64_t step) {
  const uint64_t sign = (uint64_t)1 << 63;
  switch (dtype) {
    case DLP_UINT64: UNKEY_LOOP(uint64_t, key);
    case DLP_INT64: UNKEY_LOOP(uint64_t, key ^ sign);
    default: UNKEY_LOOP(uint64_t, key & sign ? key ^ sign : ~key);
  }
}
#undef K
#undef UNKEY_LOOP

/* ---- the radix sort of keys with their positions (stable) ---- */

/* LSD: sort n keys k (positions ix alongside, unless NULL) by their low `bits` bits in 8-bit
 * digits, using k2/ix2 (n each) and count (256 per digit); the result is left in k/ix or k2/ix2:
 * returns 1 for the second. Short runs go through an insertion sort.
 * MSD for long runs: one pass scatters the keys by their top varying 8 bits (of the low `bits`),
 * then each bucket is sorted by the bits below, the same way until it is small enough to stay in
 * the cache (LSD then); the result is left
 * in k2/ix2 (returns 1), or in k/ix when every key is the same (returns 0). */
#define DEFINE_RADIX(lsd, msd, K)                                                                   \
  static int lsd(K *k, int64_t *ix, K *k2, int64_t *ix2, int64_t n, int bits, int64_t *count) {   \
    if (n <= SHORT_LINE) {                                                                         \
      for (int64_t i = 1; i < n; i++) {                                                            \
        K key = k[i];                                                                              \
        int64_t pos = ix ? ix[i] : 0, j = i;                                                       \
        for (; j > 0 && k[j - 1] > key; j--) {                                                     \
          k[j] = k[j - 1];                                                                         \
          if (ix) ix[j] = ix[j - 1];                                                               \
        }                                                                                          \
        k[j] = key;                                                                                \
        if (ix) ix[j] = pos;                                                                       \
      }                                                                                            \
      return 0;                                                                                    \
    }                                                                                              \
    int passes = (bits + 7) / 8, flipped = 0;                                                      \
    memset(count, 0, sizeof(int64_t) * 256 * (size_t)passes);                                      \
    for (int64_t i = 0; i < n; i++)                                                                \
      for (int d = 0; d < passes; d++) count[d * 256 + (int64_t)((k[i] >> (d * 8)) & 255)]++;       \
    for (int d = 0; d < passes; d++) {                                                             \
      int64_t *c = count + d * 256, sum = 0;                                                       \
      if (c[(int64_t)((k[0] >> (d * 8)) & 255)] == n) continue; /* one digit: no move */            \
      for (int v = 0; v < 256; v++) {                                                              \
        int64_t here = c[v];                                                                       \
        c[v] = sum;                                                                                \
        sum += here;                                                                               \
      }                                                                                            \
      if (ix) {                                                                                    \
        for (int64_t i = 0; i < n; i++) {                                                          \
          int64_t to = c[(int64_t)((k[i] >> (d * 8)) & 255)]++;                                    \
          k2[to] = k[i];                                                                           \
          ix2[to] = ix[i];                                                                         \
        }                                                                                          \
        int64_t *it = ix;                                                                          \
        ix = ix2, ix2 = it;                                                                        \
      } else {                                                                                     \
        for (int64_t i = 0; i < n; i++) k2[c[(int64_t)((k[i] >> (d * 8)) & 255)]++] = k[i];          \
      }                                                                                            \
      K *kt = k;                                                                                   \
      k = k2, k2 = kt;                                                                             \
      flipped = !flipped;                                                                          \
    }                                                                                              \
    return flipped;                                                                                \
  }                                                                                                \
  static int msd(K *k, int64_t *ix, K *k2, int64_t *ix2, int64_t n, int bits, int64_t *count) {   \
    if (n < 65536) return lsd(k, ix, k2, ix2, n, bits, count);                                     \
    K diff = 0, low = bits >= (int)sizeof(K) * 8 ? (K)~(K)0 : (K)(((K)1 << bits) - 1);             \
    for (int64_t i = 0; i < n; i++) diff |= k[i] ^ k[0];                                           \
    diff &= low;                                                                                   \
    if (diff == 0) return 0;                                                                       \
    int top = bits - 1;                                                                            \
    while (!((diff >> top) & 1)) top--;                                                            \
    int shift = top + 1 > 8 ? top + 1 - 8 : 0;                                                     \
    int64_t *c = count + 256 * 8, start[257];                                                      \
    memset(c, 0, sizeof(int64_t) * 256);                                                           \
    for (int64_t i = 0; i < n; i++) c[(int64_t)((k[i] >> shift) & 255)]++;                         \
    int64_t sum = 0;                                                                               \
    for (int v = 0; v < 256; v++) {                                                                \
      start[v] = sum;                                                                              \
      sum += c[v];                                                                                 \
      c[v] = start[v];                                                                             \
    }                                                                                              \
    start[256] = n;                                                                                \
    for (int64_t i = 0; i < n; i++) {                                                              \
      int64_t to = c[(int64_t)((k[i] >> shift) & 255)]++;                                          \
      k2[to] = k[i];                                                                               \
      if (ix) ix2[to] = ix[i];                                                                     \
    }                                                                                              \
    for (int v = 0; v < 256 && shift > 0; v++) {                                                   \
      int64_t a = start[v], m = start[v + 1] - a;                                                  \
      if (m < 2) continue;                                                                         \
      if (msd(k2 + a, ix ? ix2 + a : NULL, k + a, ix ? ix + a : NULL, m, shift, count)) {          \
        memcpy(k2 + a, k + a, sizeof(K) * (size_t)m);                                              \
        if (ix) memcpy(ix2 + a, ix + a, sizeof(int64_t) * (size_t)m);                              \
      }                                                                                            \
    }                                                                                              \
    return 1;                                                                                      \
  }
DEFINE_RADIX(lsd32, radix32, uint32_t)
DEFINE_RADIX(lsd64, radix64, uint64_t)
#undef DEFINE_RADIX

/* ---- long lines of 32-bit keys, values only: passes of 11-bit digits ----
 * One pass over the elements counts the three digits of every key (made on the fly, not stored);
 * each digit that varies is then one scatter pass, the first reading the elements themselves and
 * the last writing the values decoded from the keys, so that no pass only makes or decodes keys:
 * three passes over 2048 buckets, where the 8-bit sort makes four. A line with NaN or -0.0 goes
 * the general way (its values are gathered by position).
 * The passes that do not write the result write into the scratch with a cache line of room
 * after each bucket: buckets of nearly equal size would otherwise start nearly a multiple of 4
 * KiB apart, so that the 2048 places written at once fall in a few cache sets and evict one
 * another (this alone doubles the time of a pass on some inputs). */
#define DIGIT_BITS 11
#define DIGITS (1 << DIGIT_BITS)
#define BUCKET_ROOM 16                  /* keys of room after each bucket in the scratch */
#define LONG_LINE 65536                 /* lines from this long (and below 2^32) sort this way */
#define LONG_SCRATCH(n) ((n) + DIGITS * BUCKET_ROOM) /* the keys the scratch holds */

/* The key of the bits b of a 32-bit element (no NaN, no -0.0) of kind K_UINT, K_INT or K_FLOAT,
 * as keys32 makes it, and back. */
static uint32_t key32(int kind, uint32_t b) {
  const uint32_t sign = 0x80000000u;
  return kind == K_FLOAT ? b ^ (((uint32_t)0 - (b >> 31)) | sign) : kind == K_INT ? b ^ sign : b;
}
static uint32_t unkey32(int kind, uint32_t key) {
  const uint32_t sign = 0x80000000u;
  return kind == K_FLOAT ? (key & sign ? key ^ sign : ~key) : kind == K_INT ? key ^ sign : key;
}

/* One scatter pass by the digit at `shift` of the keys LOAD(i), i from lo to hi, written as
 * STORE(key) at their bucket's next place. */
#define SCATTER(LOAD, STORE)                                     \
  for (int64_t i = lo; i < hi; i++) {                            \
    uint32_t key = LOAD(i);                                      \
    to[next[(key >> shift) & (DIGITS - 1)]++] = STORE(key);      \
  }

#define FROM_INPUT(i) (key32(kind, ld32(p + (i) * step)) ^ flip)
#define FROM_KEYS(i) (from[i])
#define AS_KEY(key) (key)
#define AS_VALUE(key) unkey32(kind, (key) ^ flip)

/* Sort the n elements at p (step bytes apart; kind as key32) into d (contiguous), using tmp
 * (LONG_SCRATCH(n) keys); returns 0, touching nothing of d, when the line has NaN or -0.0. */
static int sort_long32(int kind, const char *p, int64_t step, int64_t n, uint32_t flip, uint32_t *tmp, uint32_t *d) {
  uint32_t start[3][DIGITS + 1], next[DIGITS]; /* each digit's buckets' first places, then n */
  int special = 0;
  memset(start, 0, sizeof start);
  for (int64_t i = 0; i < n; i++) {
    uint32_t b = ld32(p + i * step);
    if (kind == K_FLOAT) special |= (b & 0x7fffffffu) > 0x7f800000u || b == 0x80000000u;
    uint32_t key = key32(kind, b) ^ flip;
    start[0][key & (DIGITS - 1)]++;
    start[1][(key >> DIGIT_BITS) & (DIGITS - 1)]++;
    start[2][key >> (2 * DIGIT_BITS)]++;
  }
  if (special) return 0;
  int digits[3], passes = 0;
  uint32_t first = key32(kind, ld32(p)) ^ flip;
  for (int digit = 0; digit < 3; digit++) {
    uint32_t *c = start[digit], sum = 0;
    if (c[(first >> (digit * DIGIT_BITS)) & (DIGITS - 1)] == (uint32_t)n) continue; /* one digit: no move */
    for (int v = 0; v <= DIGITS; v++) {
      uint32_t here = v < DIGITS ? c[v] : 0;
      c[v] = sum;
      sum += here;
    }
    digits[passes++] = digit;
  }
  if (passes == 0) { /* every key the same: so is every element */
    for (int64_t i = 0; i < n; i++) d[i] = ld32(p + i * step);
    return 1;
  }
  /* the last pass writes into d, the one before into tmp (with room), and so on back */
  const uint32_t *from = NULL;
  int roomy = 0; /* `from` is tmp: its buckets are those of the digit of the pass before */
  for (int j = 0; j < passes; j++) {
    int into_tmp = (passes - 1 - j) % 2, shift = digits[j] * DIGIT_BITS, last = j == passes - 1;
    uint32_t *to = into_tmp ? tmp : d;
    for (int v = 0; v < DIGITS; v++) next[v] = start[digits[j]][v] + (uint32_t)(into_tmp ? v * BUCKET_ROOM : 0);
    const uint32_t *was = roomy ? start[digits[j - 1]] : NULL;
    for (int u = 0; u < (roomy ? DIGITS : 1); u++) { /* the source's buckets, or all of it at once */
      int64_t lo = was ? was[u] + (int64_t)u * BUCKET_ROOM : 0, hi = was ? was[u + 1] + (int64_t)u * BUCKET_ROOM : n;
      if (j == 0 && last) SCATTER(FROM_INPUT, AS_VALUE)
      else if (j == 0) SCATTER(FROM_INPUT, AS_KEY)
      else if (last) SCATTER(FROM_KEYS, AS_VALUE)
      else SCATTER(FROM_KEYS, AS_KEY)
    }
    from = to;
    roomy = into_tmp;
  }
  return 1;
}
#undef SCATTER
#undef FROM_INPUT
#undef FROM_KEYS
#undef AS_KEY
#undef AS_VALUE

/* ---- one line ---- */

typedef struct SortLine {
  int dtype, itemsize, wide, descending;
  int values, indices;         /* which results are written (operands 1 and 2, or 1) */
  int64_t n, k;                /* the line's length, and how many of its sorted elements are written */
  int64_t in_step, val_step, idx_step;
  char *keys, *keys2;          /* n keys each, 4 or 8 bytes */
  int64_t *ix, *ix2, *count;
  int allocated, failed;       /* ix and ix2 were malloc'd (values only); that failed */
  int keys_in_values;          /* the values (a new contiguous line as wide as a key) hold the keys */
  int vector_sort;             /* values only of a 32-bit dtype, on an AVX-512 processor: sort_avx512.c */
} SortLine;

/* Sort the line at p: the positions in order, the keys alongside (*keys); *special as keysNN. */
static const int64_t *sort_line_keys(SortLine *s, const char *p, char *kbuf, const char **keys, int *special) {
  int64_t n = s->n, *ix = NULL;
  int second;
  if (s->wide)
    *special = keys64(s->dtype, p, s->in_step, n, s->descending ? ~(uint64_t)0 : 0, (uint64_t *)(void *)kbuf);
  else
    *special = keys32(s->dtype, p, s->in_step, n, s->descending ? ~(uint32_t)0 : 0, (uint32_t *)(void *)kbuf);
  if (s->indices || *special) { /* the positions are wanted, or the values gathered by them */
    if (!s->ix) { /* values only: the positions' room is taken when a line first needs it */
      s->ix = malloc(sizeof(int64_t) * 2 * (size_t)(n > 0 ? n : 1));
      if (!s->ix) {
        s->failed = 1;
        return NULL;
      }
      s->ix2 = s->ix + n;
      s->allocated = 1;
    }
    ix = s->ix;
    for (int64_t i = 0; i < n; i++) ix[i] = i;
  }
  if (s->wide)
    second = radix64((uint64_t *)(void *)kbuf, ix, (uint64_t *)(void *)s->keys2, s->ix2, n, 64, s->count);
  else
    second = radix32((uint32_t *)(void *)kbuf, ix, (uint32_t *)(void *)s->keys2, s->ix2, n, 32, s->count);
  *keys = second ? s->keys2 : kbuf;
  return second ? s->ix2 : s->ix;
}

static void gather(char *d, int64_t dstep, const char *src, int64_t sstep, const int64_t *ix, int64_t n, int size) {
  switch (size) {
    case 1: for (int64_t i = 0; i < n; i++) d[i * dstep] = src[ix[i] * sstep]; break;
    case 2: for (int64_t i = 0; i < n; i++) memcpy(d + i * dstep, src + ix[i] * sstep, 2); break;
    case 4: for (int64_t i = 0; i < n; i++) memcpy(d + i * dstep, src + ix[i] * sstep, 4); break;
    case 8: for (int64_t i = 0; i < n; i++) memcpy(d + i * dstep, src + ix[i] * sstep, 8); break;
    default: for (int64_t i = 0; i < n; i++) memcpy(d + i * dstep, src + ix[i] * sstep, (size_t)size);
  }
}

/* part: the SortLine of this part of the lines (run_sort's copies, given as the parts' scratch) */
static void sort_line(void *unused, char *const *p, char *part) {
  SortLine *s = (SortLine *)(void *)part;
  (void)unused;
  const char *keys;
  int special, op = 1;
  /* the values' own memory holds the keys when it can (contiguous, as wide as the keys) */
  char *kbuf = s->keys_in_values ? p[1] : s->keys;
  if (s->vector_sort) {
    int kind = dlp_dtype_kind(s->dtype);
    kind = kind == K_FLOAT ? DLP_SORT32_FLOAT : kind == K_INT ? DLP_SORT32_INT : DLP_SORT32_UINT;
    dlp_sort32_avx512(kind, p[0], s->in_step, s->n, s->descending, (uint32_t *)(void *)p[1]);
    return;
  }
  if (s->keys_in_values && !s->wide && !s->indices && s->n >= LONG_LINE && s->n <= (int64_t)UINT32_MAX / 2 &&
      sort_long32(dlp_dtype_kind(s->dtype), p[0], s->in_step, s->n, s->descending ? ~(uint32_t)0 : 0,
                  (uint32_t *)(void *)s->keys2, (uint32_t *)(void *)p[1]))
    return;
  const int64_t *ix = sort_line_keys(s, p[0], kbuf, &keys, &special);
  if (s->failed) return;
  if (s->values) {
    char *d = p[op++];
    if (special) {
      gather(d, s->val_step, p[0], s->in_step, ix, s->k, s->itemsize);
    } else if (s->wide) {
      unkeys64(s->dtype, (const uint64_t *)(const void *)keys, s->k, s->descending ? ~(uint64_t)0 : 0, d, s->val_step);
    } else {
      unkeys32(s->dtype, (const uint32_t *)(const void *)keys, s->k, s->descending ? ~(uint32_t)0 : 0, d, s->val_step);
    }
  }
  if (s->indices) {
    char *d = p[op];
    for (int64_t i = 0; i < s->k; i++) {
      int64_t v = ix[i] + 1;
      memcpy(d + i * s->idx_step, &v, 8);
    }
  }
}

/* ---- on CUDA devices (kernels.cu, family 44) ----
 * The lines' keys and positions go to two device temporaries, lines of n side by side; a bitonic
 * network sorts each line as (key, position) pairs, so equal keys keep their order as on the
 * CPU; the values are then gathered from the input by position. */

#define SORT_FAMILY 44

static const char *key_kernel(int dtype) {
  switch (dtype) {
    case DLP_BOOL: return "dlp_sort_keys_bool";
    case DLP_UINT8: return "dlp_sort_keys_u8";
    case DLP_INT8: return "dlp_sort_keys_i8";
    case DLP_UINT16: return "dlp_sort_keys_u16";
    case DLP_INT16: return "dlp_sort_keys_i16";
    case DLP_UINT32: return "dlp_sort_keys_u32";
    case DLP_INT32: return "dlp_sort_keys_i32";
    case DLP_UINT64: return "dlp_sort_keys_u64";
    case DLP_INT64: return "dlp_sort_keys_i64";
    case DLP_FLOAT16: return "dlp_sort_keys_f16";
    case DLP_BFLOAT16: return "dlp_sort_keys_bf16";
    case DLP_FLOAT32: return "dlp_sort_keys_f32";
    default: return "dlp_sort_keys_f64";
  }
}

static const char *values_kernel(int itemsize) {
  switch (itemsize) {
    case 1: return "dlp_sort_values_1";
    case 2: return "dlp_sort_values_2";
    case 4: return "dlp_sort_values_4";
    default: return "dlp_sort_values_8";
  }
}

/* As run_sort, for a CUDA tensor t (the results on its device); with keys_out, the sorted keys
 * (a uint64 tensor, lines side by side) are left pushed and set there. */
static void sort_on_device(lua_State *L, dlp_Tensor *t, int dim, int descending, int64_t k, dlp_Tensor *values,
                           dlp_Tensor *indices, dlp_Tensor **keys_out, const char *what) {
  int64_t n = dim < 0 ? 1 : t->dl.shape[dim], total = dlp_numel(t);
  int64_t shape[DLP_MAX_NDIM], strides[3][DLP_MAX_NDIM], line[DLP_MAX_NDIM], params[6] = {n, 0, 0, 0, 0, 0};
  int w = 0, itemsize = dlp_dtypes[t->dtype].itemsize;
  if (k == 0) return;
  /* the walk: the other dimensions in order, then the line's; line[]: the temporaries' strides */
  for (int i = 0; i < t->dl.ndim; i++)
    if (i != dim) shape[w++] = t->dl.shape[i];
  shape[w++] = n;
  line[w - 1] = 8;
  for (int i = w - 2; i >= 0; i--) line[i] = line[i + 1] * shape[i + 1];
  int top = lua_gettop(L);
  dlp_Tensor *keys = dlp_tensor_new(L, DLP_UINT64, 0, t->dl.device, 1, &total, 0, what);
  dlp_Tensor *pos = dlp_tensor_new(L, DLP_INT64, 0, t->dl.device, 1, &total, 0, what);
  dlp_live(L, t, what); /* then no Lua code runs: the launches allocate nothing the collector sees */
  for (int i = 0, o = 0; i < t->dl.ndim; i++)
    if (i != dim) strides[1][o++] = dlp_walk_stride(t, i);
  strides[1][w - 1] = dim < 0 ? 0 : dlp_walk_stride(t, dim);
  int64_t step = strides[1][w - 1];
  for (int i = 0; i < w; i++) strides[0][i] = strides[2][i] = line[i];
  {
    char *data[3] = {dlp_first_element(keys), dlp_first_element(t), dlp_first_element(pos)};
    dlp_Tensor *tensors[3] = {keys, t, pos};
    int sizes[3] = {8, itemsize, 8};
    params[1] = descending ? -1 : 0;
    dlp_launch_with_params(L, what, key_kernel(t->dtype), SORT_FAMILY, 3, w, shape, data,
                           (const int64_t(*)[DLP_MAX_NDIM])strides, tensors, sizes, params);
  }
  int64_t half = 1;
  while (half * 2 < n) half *= 2; /* the line padded to 2 half elements */
  int64_t pairs = total / n * half, eight[2][DLP_MAX_NDIM] = {{8}, {8}};
  for (int64_t size = 2; n > 1 && size <= 2 * half; size *= 2)
    for (int64_t j = size / 2; j >= 1; j /= 2) {
      int64_t step_params[6] = {n, half, j, j == size / 2, 0, 0};
      char *data[2] = {dlp_first_element(keys), dlp_first_element(pos)};
      dlp_Tensor *tensors[2] = {keys, pos};
      int sizes[2] = {8, 8};
      dlp_launch_with_params(L, what, "dlp_sort_step", SORT_FAMILY, 2, 1, &pairs, data,
                             (const int64_t(*)[DLP_MAX_NDIM])eight, tensors, sizes, step_params);
    }
  shape[w - 1] = k; /* the first k of each sorted line */
  if (values) {
    char *data[3] = {dlp_first_element(values), dlp_first_element(pos), dlp_first_element(t)};
    dlp_Tensor *tensors[3] = {values, pos, t};
    int sizes[3] = {itemsize, 8, itemsize};
    int64_t value_params[6] = {step, 0, 0, 0, 0, 0};
    for (int i = 0, o = 0; i < t->dl.ndim; i++)
      if (i != dim) strides[0][o++] = dlp_walk_stride(values, i);
    strides[0][w - 1] = dim < 0 ? 0 : dlp_walk_stride(values, dim);
    for (int i = 0; i < w; i++) strides[2][i] = i == w - 1 ? 0 : strides[1][i];
    for (int i = 0; i < w; i++) strides[1][i] = line[i];
    dlp_launch_with_params(L, what, values_kernel(itemsize), SORT_FAMILY, 3, w, shape, data,
                           (const int64_t(*)[DLP_MAX_NDIM])strides, tensors, sizes, value_params);
  }
  if (indices) {
    char *data[2] = {dlp_first_element(indices), dlp_first_element(pos)};
    dlp_Tensor *tensors[2] = {indices, pos};
    int sizes[2] = {8, 8};
    for (int i = 0, o = 0; i < t->dl.ndim; i++)
      if (i != dim) strides[0][o++] = dlp_walk_stride(indices, i);
    strides[0][w - 1] = dim < 0 ? 0 : dlp_walk_stride(indices, dim);
    for (int i = 0; i < w; i++) strides[1][i] = line[i];
    dlp_launch_with_params(L, what, "dlp_sort_indices", SORT_FAMILY, 2, w, shape, data,
                           (const int64_t(*)[DLP_MAX_NDIM])strides, tensors, sizes, params);
  }
  if (keys_out) *keys_out = keys;
  lua_settop(L, keys_out ? top + 1 : top);
}

/* ---- arguments ---- */

/* Every key of the options table at arg must be one of names (a raw walk: no Lua code runs). */
static void check_keys(lua_State *L, int arg, const char *const *names, const char *what) {
  lua_pushnil(L);
  while (lua_next(L, arg)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "%s: option names are strings, got a %s key", what, luaL_typename(L, -1));
    size_t len;
    const char *key = lua_tolstring(L, -1, &len);
    int known = 0;
    for (int i = 0; names[i] && !known; i++) known = strlen(names[i]) == len && memcmp(key, names[i], len) == 0;
    if (!known) luaL_error(L, "%s: unknown option %s", what, dlp_push_quoted(L, key, len));
  }
}

/* A boolean option (absent: def). */
static int flag(lua_State *L, int arg, const char *name, int def) {
  int type = lua_getfield(L, arg, name), v = def;
  if (type == LUA_TBOOLEAN) v = lua_toboolean(L, -1);
  else if (type != LUA_TNIL)
    luaL_argerror(L, arg, lua_pushfstring(L, "%s must be true, false or nil, got %s", name, luaL_typename(L, -1)));
  lua_pop(L, 1);
  return v;
}

/* The options table at arg (none or nil: an empty one is read), checked against names. */
static int options(lua_State *L, int arg, const char *const *names, const char *what) {
  if (lua_isnoneornil(L, arg)) return 0;
  if (!lua_istable(L, arg))
    luaL_argerror(L, arg, lua_pushfstring(L, "an options table expected, got %s", luaL_typename(L, arg)));
  check_keys(L, arg, names, what);
  return arg;
}

/* The dimension at arg (nil: the last), 0-based; a 0-d tensor is one line of one element. */
static int line_dim(lua_State *L, int arg, const dlp_Tensor *t) {
  int ndim = t->dl.ndim;
  if (lua_isnoneornil(L, arg)) return ndim - 1;
  if (ndim == 0) {
    lua_Integer d = dlp_checkinteger(L, arg);
    if (d != 1 && d != -1)
      luaL_argerror(L, arg, lua_pushfstring(L, "dimension %I out of range (tensor has 0)", d));
    return -1;
  }
  return dlp_check_dim(L, arg, ndim, 0);
}

static void check_sortable(lua_State *L, const dlp_Tensor *t, const char *what) {
  if (t->dl.device.device_type != kDLCUDA) dlp_check_host(L, t, what);
  dlp_check_computes(L, t->dtype, what);
  if (dlp_dtype_kind(t->dtype) == K_COMPLEX)
    luaL_error(L, "%s: %s tensors are not supported (complex numbers have no order)", what, dlp_dtypes[t->dtype].name);
}

/* The scratch of lines of n elements, freed at the end of the call (not left to the collector:
 * sorts of long lines would otherwise hold their scratch until a collection): the keys, and the
 * positions when indices are wanted. It is a block of the tensors' allocator, which gives large
 * blocks huge pages (a scatter to 2048 places of a line misses the TLB far less often) and keeps
 * freed ones for the next call of the same size. Returns its owner, NULL when out of memory. */
static dlp_Owner *scratch(SortLine *s, int64_t n) {
  int64_t ksize = s->wide ? 8 : 4, counts = 256 * 9;
  int64_t each = (s->keys_in_values ? 1 : 2) * ksize + (s->indices ? 16 : 0);
  int64_t m = n > 0 ? n : 1, room = !s->wide && n >= LONG_LINE ? 4 * (LONG_SCRATCH(n) - n) : 0;
  if ((uint64_t)m > (SIZE_MAX - (size_t)counts * 8) / 64 - (size_t)room) return NULL;
  /* the second keys come last: sort_long32's room after them */
  dlp_Owner *block = dlp_owner_new_memory((size_t)(counts * 8 + m * each + room), 0);
  if (!block) return NULL;
  char *base = block->memory;
  /* the 8-byte parts first (counts, positions), so that 4-byte keys of an odd count misalign nothing */
  char *next = base + counts * 8;
  s->count = (int64_t *)(void *)base;
  s->ix = s->ix2 = NULL;
  if (s->indices) {
    s->ix = (int64_t *)(void *)next;
    s->ix2 = s->ix + m;
    next += m * 16;
  }
  s->keys = s->keys_in_values ? NULL : next;
  s->keys2 = next + (s->keys_in_values ? 0 : m * ksize);
  return block;
}

/* Sort t along dim into the results (values and/or indices, each NULL when not wanted), whose
 * size along dim is k (the first k of each sorted line). */
static void run_sort(lua_State *L, dlp_Tensor *t, int dim, int descending, int64_t k, dlp_Tensor *values,
                     dlp_Tensor *indices, const char *what) {
  dlp_live(L, t, what);
  if (dlp_numel(t) == 0) return; /* the results are empty too (lines of none, or none of them) */
  if (t->dl.device.device_type == kDLCUDA) {
    sort_on_device(L, t, dim, descending, k, values, indices, NULL, what);
    return;
  }
  SortLine s;
  memset(&s, 0, sizeof s);
  s.dtype = t->dtype;
  s.itemsize = dlp_dtypes[t->dtype].itemsize;
  s.wide = wide_keys(t->dtype);
  s.descending = descending;
  s.n = dim < 0 ? 1 : t->dl.shape[dim];
  s.k = k;
  s.values = values != NULL;
  s.indices = indices != NULL;
  if (dim >= 0 && values) {
    s.val_step = dlp_walk_stride(values, dim);
    s.keys_in_values = k == s.n && s.val_step == s.itemsize && s.itemsize == (s.wide ? 8 : 4);
    s.vector_sort = DLP_HAVE_SORT32_AVX512 && s.keys_in_values && !s.wide && !indices &&
                    dlp_cpu_level() >= DLP_CPU_AVX512;
  }
  dlp_live(L, t, what); /* then no Lua code runs until the scratch is freed */
  const dlp_Tensor *ops[3] = {t, NULL, NULL};
  int nops = 1;
  if (values) ops[nops++] = values;
  if (indices) ops[nops++] = indices;
  if (dim >= 0) {
    s.in_step = dlp_walk_stride(t, dim);
    if (values) s.val_step = dlp_walk_stride(values, dim);
    if (indices) s.idx_step = dlp_walk_stride(indices, dim);
  }
  /* each part of the lines sorts with a SortLine and scratch of its own (the results are new
   * tensors: lines of their own); sort_avx512.c needs no scratch */
  int64_t parts = dim < 0 ? 1 : dlp_line_parts(t, dim);
  SortLine *part = malloc(sizeof *part * (size_t)parts);
  dlp_Owner **block = calloc((size_t)parts, sizeof *block);
  int failed = !part || !block;
  int64_t made = 0; /* the parts whose SortLine is set */
  while (!failed && made < parts) {
    part[made] = s;
    failed = !s.vector_sort && !(block[made] = scratch(&part[made], s.n));
    made++;
  }
  if (!failed) {
    if (dim < 0) { /* a 0-d tensor */
      char *p[3];
      for (int i = 0; i < nops; i++) p[i] = dlp_first_element(ops[i]);
      sort_line(NULL, p, (char *)part);
    } else {
      dlp_each_line(nops, ops, dim, sort_line, NULL, parts, (char *)part, sizeof *part);
    }
  }
  int scratch_failed = failed;
  for (int64_t i = 0; i < made; i++) {
    if (part[i].allocated) free(part[i].ix);
    if (block[i]) dlp_owner_release(block[i]);
    failed |= part[i].failed;
  }
  free(part);
  free(block);
  if (scratch_failed)
    luaL_error(L, "%s: not enough memory for the scratch of lines of %I elements", what, (lua_Integer)s.n);
  if (failed) luaL_error(L, "%s: not enough memory", what);
}

/* A new tensor of t's shape but for `size` along dim, on t's device (host memory: the CPU). */
static dlp_Tensor *result_like(lua_State *L, const dlp_Tensor *t, int dtype, int dim, int64_t size, const char *what) {
  int64_t shape[DLP_MAX_NDIM];
  DLDevice device = {kDLCPU, 0};
  if (t->dl.device.device_type == kDLCUDA) device = t->dl.device;
  for (int i = 0; i < t->dl.ndim; i++) shape[i] = i == dim ? size : t->dl.shape[i];
  return dlp_tensor_new(L, dtype, 0, device, t->dl.ndim, shape, 0, what);
}

/* sort(t [, dim [, opts]]) and argsort: opts may also come second (t:sort{descending = true}),
 * and a boolean there or third is `descending` (torch7's t:sort(dim, true)). */
static int sort_common(lua_State *L, int want_values, const char *what) {
  static const char *const sort_names[] = {"descending", "stable", "indices", NULL};
  static const char *const argsort_names[] = {"descending", "stable", NULL};
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  if ((lua_istable(L, 2) || lua_isboolean(L, 2)) && lua_isnoneornil(L, 3)) {
    lua_settop(L, 2);
    lua_pushnil(L);
    lua_insert(L, 2);
  }
  int descending = 0, want_indices = 1;
  if (lua_isboolean(L, 3)) {
    descending = lua_toboolean(L, 3);
  } else {
    int arg = options(L, 3, want_values ? sort_names : argsort_names, what);
    if (arg) {
      descending = flag(L, arg, "descending", 0);
      (void)flag(L, arg, "stable", 1); /* checked: every sort here is stable */
      if (want_values) want_indices = flag(L, arg, "indices", 1);
    }
  }
  dlp_check_no_more(L, 4, what, "(t [, dim [, opts]])");
  lua_settop(L, 3);
  int dim = line_dim(L, 2, t);
  check_sortable(L, t, what);
  int64_t n = dim < 0 ? 1 : t->dl.shape[dim];
  dlp_Tensor *values = want_values ? result_like(L, t, t->dtype, dim, n, what) : NULL;
  dlp_Tensor *indices = want_indices ? result_like(L, t, DLP_INT64, dim, n, what) : NULL;
  run_sort(L, t, dim, descending, n, values, indices, what);
  return want_values && want_indices ? 2 : 1;
}

static int l_sort(lua_State *L) { return sort_common(L, 1, "dlpack.sort"); }
static int l_argsort(lua_State *L) { return sort_common(L, 0, "dlpack.argsort"); }

/* topk(t, k [, dim [, opts{largest, sorted}]]): the k largest (or smallest) along dim, in order
 * (sorted = false is accepted: they come sorted anyway), with their 1-based positions. */
static int l_topk(lua_State *L) {
  static const char *const names[] = {"largest", "sorted", NULL};
  const char *what = "dlpack.topk";
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  lua_Integer k = dlp_checkinteger(L, 2);
  if (lua_istable(L, 3) && lua_isnoneornil(L, 4)) {
    lua_settop(L, 3);
    lua_pushnil(L);
    lua_insert(L, 3);
  }
  int largest = 1;
  int arg = options(L, 4, names, what);
  if (arg) {
    largest = flag(L, arg, "largest", 1);
    (void)flag(L, arg, "sorted", 1);
  }
  dlp_check_no_more(L, 5, what, "(t, k [, dim [, opts]])");
  lua_settop(L, 4);
  int dim = line_dim(L, 3, t);
  check_sortable(L, t, what);
  int64_t n = dim < 0 ? 1 : t->dl.shape[dim];
  if (k < 0 || k > n)
    luaL_argerror(L, 2, lua_pushfstring(L, "k = %I out of range (the dimension has %I elements)", k, (lua_Integer)n));
  dlp_Tensor *values = result_like(L, t, t->dtype, dim, k, what);
  dlp_Tensor *indices = result_like(L, t, DLP_INT64, dim, k, what);
  run_sort(L, t, dim, largest, k, values, indices, what);
  return 2;
}

/* ---- median and quantile: the sorted lines, then NumPy's arithmetic on their elements ---- */

static double element(int dtype, const char *p) {
  dlp_Scalar v;
  dlp_load(dtype, p, &v);
  return v.kind == DLP_S_INT ? (double)v.i : v.kind == DLP_S_UINT ? (double)v.u : v.re;
}

/* b - a in their own dtype, as NumPy's _lerp takes it: floats rounded to it, integers wrapping */
static double difference(int dtype, const char *pa, const char *pb) {
  dlp_Scalar a, b;
  dlp_load(dtype, pa, &a);
  dlp_load(dtype, pb, &b);
  if (a.kind == DLP_S_FLOAT) return dlp_round_to(dtype, b.re - a.re);
  if (dlp_dtype_kind(dtype) == K_UINT) return element(dtype, pb) - element(dtype, pa); /* sorted: b >= a */
  return dlp_wrapped_difference(a.i, b.i, (int)dlp_dtypes[dtype].itemsize);
}

typedef struct StatLine {
  int in_dtype, out_dtype, median, weak; /* weak: q a number (its gamma rounded to the dtype, NumPy's weak scalars) */
  int64_t n, in_step, out_step, nq;
  const double *q;
} StatLine;

static void stat_line(void *ctx, char *const *p, char *unused) {
  const StatLine *s = ctx;
  (void)unused;
  int64_t n = s->n;
  int d = s->out_dtype;
  dlp_Scalar out = {DLP_S_FLOAT, 0, 0, 0, 0};
  for (int64_t j = 0; j < s->nq; j++) {
    double r;
    if (n == 0) {
      r = NAN;
    } else if (element(s->in_dtype, p[0] + (n - 1) * s->in_step) != element(s->in_dtype, p[0] + (n - 1) * s->in_step)) {
      r = NAN; /* NaN sorts last: the line has one */
    } else if (s->median) {
      r = dlp_median_of(d, n, element(s->in_dtype, p[0] + ((n - 1) / 2) * s->in_step),
                        element(s->in_dtype, p[0] + (n / 2) * s->in_step));
    } else {
      int64_t i, k;
      double gamma;
      dlp_quantile_place(s->q[j], n, &i, &k, &gamma);
      const char *pa = p[0] + i * s->in_step, *pb = p[0] + k * s->in_step;
      r = dlp_lerp(d, gamma, s->weak ? dlp_round_to(d, gamma) : gamma, element(s->in_dtype, pa),
                   element(s->in_dtype, pb), difference(s->in_dtype, pa, pb));
    }
    out.re = r;
    dlp_store(d, p[1] + j * s->out_step, &out);
  }
}

/* A new 1-D contiguous copy of t's elements in row-major order, on t's device, pushed. */
static dlp_Tensor *flat_copy(lua_State *L, dlp_Tensor *t, const char *what) {
  int64_t n = dlp_numel(t);
  DLDevice cpu = {kDLCPU, 0};
  int cuda = t->dl.device.device_type == kDLCUDA;
  dlp_Tensor *flat = dlp_tensor_new(L, t->dtype, 0, cuda ? t->dl.device : cpu, 1, &n, 0, what);
  if (!cuda) {
    dlp_live(L, t, what);
    dlp_gather(dlp_first_element(flat), t);
    return flat;
  }
  dlp_Tensor *shaped = dlp_view_new(L, -1, t->dl.ndim, what); /* flat seen with t's shape */
  for (int i = 0; i < t->dl.ndim; i++) shaped->dl.shape[i] = t->dl.shape[i];
  dlp_contiguous_strides(t->dl.ndim, t->dl.shape, shaped->dl.strides);
  dlp_tensor_seal(L, shaped, what);
  dlp_live(L, t, what);
  dlp_copy_on_cuda(L, shaped, t, NULL, what);
  lua_pop(L, 1);
  return flat;
}

/* The sorted values of t along dim (-1: all its elements, in one line) pushed; *line_dim set to
 * the dimension the lines run along in it. */
static dlp_Tensor *sorted_lines(lua_State *L, dlp_Tensor *t, int dim, int *line, const char *what) {
  if (dim < 0) { /* one line of every element, in row-major order */
    int64_t n = dlp_numel(t);
    dlp_Tensor *flat = flat_copy(L, t, what);
    dlp_Tensor *v = dlp_tensor_new(L, t->dtype, 0, flat->dl.device, 1, &n, 0, what);
    run_sort(L, flat, 0, 0, n, v, NULL, what);
    lua_remove(L, -2);
    *line = 0;
    return v;
  }
  dlp_Tensor *v = result_like(L, t, t->dtype, dim, t->dl.shape[dim], what);
  run_sort(L, t, dim, 0, t->dl.shape[dim], v, NULL, what);
  *line = dim;
  return v;
}

static const char *quantile_kernel(int dtype) {
  switch (dtype) {
    case DLP_BOOL: return "dlp_quantile_bool";
    case DLP_UINT8: return "dlp_quantile_u8";
    case DLP_INT8: return "dlp_quantile_i8";
    case DLP_UINT16: return "dlp_quantile_u16";
    case DLP_INT16: return "dlp_quantile_i16";
    case DLP_UINT32: return "dlp_quantile_u32";
    case DLP_INT32: return "dlp_quantile_i32";
    case DLP_UINT64: return "dlp_quantile_u64";
    case DLP_INT64: return "dlp_quantile_i64";
    case DLP_FLOAT16: return "dlp_quantile_f16";
    case DLP_BFLOAT16: return "dlp_quantile_bf16";
    case DLP_FLOAT32: return "dlp_quantile_f32";
    default: return "dlp_quantile_f64";
  }
}

/* The statistic's end on a CUDA device, from the sorted lines v (along `line`; on the stack's top):
 * a kernel writes each quantile of each line in float64, in the result's order (the quantiles'
 * dimension first), converted to out_dtype after; the result (final's shape) pushed, or its one
 * element as a Lua value when `value`. q: nq quantiles (NULL: the median). */
static int statistic_on_device(lua_State *L, dlp_Tensor *v, int line, const double *q, int64_t nq, int number,
                               int out_dtype, int fn, const int64_t *final, int value, const char *what) {
  int64_t shape[DLP_MAX_NDIM], strides[3][DLP_MAX_NDIM];
  int w = 1;
  DLDevice cpu = {kDLCPU, 0};
  dlp_Tensor *tmp = dlp_tensor_new(L, DLP_FLOAT64, 0, v->dl.device, fn, final, 0, what);
  int res_idx = lua_gettop(L);
  dlp_Tensor *qd = tmp; /* a median reads no quantile */
  if (q && nq > 0) {
    dlp_Tensor *qh = dlp_tensor_new(L, DLP_FLOAT64, 0, cpu, 1, &nq, 0, what);
    memcpy(dlp_first_element(qh), q, sizeof(double) * (size_t)nq);
    qd = dlp_clone(L, lua_gettop(L), DLP_FLOAT64, v->dl.device, NULL, what);
  }
  dlp_Tensor *res = tmp;
  if (out_dtype != DLP_FLOAT64) {
    res = dlp_tensor_new(L, out_dtype, 0, v->dl.device, fn, final, 0, what);
    res_idx = lua_gettop(L);
  }
  /* the walk: the quantiles, then the lines in order */
  shape[0] = q ? nq : 1;
  strides[1][0] = 0;
  strides[2][0] = q ? 8 : 0;
  for (int i = 0; i < v->dl.ndim; i++)
    if (i != line) {
      shape[w] = v->dl.shape[i];
      strides[1][w] = dlp_walk_stride(v, i);
      strides[2][w++] = 0;
    }
  strides[0][w - 1] = 8;
  for (int i = w - 2; i >= 0; i--) strides[0][i] = strides[0][i + 1] * shape[i + 1];
  int64_t params[6] = {v->dl.shape[line], dlp_walk_stride(v, line), out_dtype, q == NULL, number, 0};
  char *data[3] = {dlp_first_element(tmp), dlp_first_element(v), dlp_first_element(qd)};
  dlp_Tensor *tensors[3] = {tmp, v, qd};
  int sizes[3] = {8, (int)dlp_dtypes[v->dtype].itemsize, 8};
  dlp_launch_with_params(L, what, quantile_kernel(v->dtype), SORT_FAMILY, 3, w, shape, data,
                         (const int64_t(*)[DLP_MAX_NDIM])strides, tensors, sizes, params);
  if (res != tmp) dlp_copy_on_cuda(L, res, tmp, NULL, what);
  if (value) { /* read back */
    dlp_Tensor *h = dlp_clone(L, res_idx, out_dtype, cpu, NULL, what);
    dlp_push_element(L, out_dtype, dlp_first_element(h));
    return 1;
  }
  lua_pushvalue(L, res_idx);
  return 1;
}

/* median and quantile: t, the dimension (nil: all), keepdim; nq quantiles q (median: nq = 1, q
 * unused); number: q was a number (the result has no quantile dimension). */
static int statistic(lua_State *L, dlp_Tensor *t, int dim_arg, int keepdim, const double *q, int64_t nq, int number,
                     int q_dtype, const char *what) {
  int median = q == NULL, dim = -1, line;
  if (!lua_isnoneornil(L, dim_arg)) {
    if (t->dl.ndim == 0) {
      lua_Integer d = dlp_checkinteger(L, dim_arg);
      if (d != 1 && d != -1) luaL_argerror(L, dim_arg, lua_pushfstring(L, "dimension %I out of range (tensor has 0)", d));
    } else {
      dim = dlp_check_dim(L, dim_arg, t->dl.ndim, 0);
    }
  }
  int full = dim < 0 && lua_isnoneornil(L, dim_arg);
  check_sortable(L, t, what);
  if (!median && nq > 0 && (dim < 0 ? dlp_numel(t) : t->dl.shape[dim]) == 0)
    luaL_error(L, "%s: the quantiles of an empty tensor or dimension are not defined", what);
  int kind = dlp_dtype_kind(t->dtype), out_dtype = kind == K_FLOAT ? t->dtype : DLP_FLOAT64;
  if (!number && q_dtype >= 0) out_dtype = dlp_promote(out_dtype, q_dtype);
  dlp_Tensor *v = sorted_lines(L, t, dim, &line, what);
  /* the result's shape: the line's dimension dropped (kept as 1 with keepdim, the whole shape's
   * when full), the quantiles' dimension in front unless q was a number */
  int64_t final[DLP_MAX_NDIM + 1];
  int fn = 0;
  if (!number) final[fn++] = nq;
  if (full) {
    for (int i = 0; keepdim && i < t->dl.ndim; i++) final[fn++] = 1;
  } else {
    for (int i = 0; i < t->dl.ndim; i++)
      if (i != dim) final[fn++] = t->dl.shape[i];
      else if (keepdim) final[fn++] = 1;
  }
  if (fn > DLP_MAX_NDIM) luaL_error(L, "%s: the result would have more than %d dimensions", what, DLP_MAX_NDIM);
  if (v->dl.device.device_type == kDLCUDA)
    return statistic_on_device(L, v, line, q, nq, number, out_dtype, fn, final, full && number && !keepdim, what);
  /* r: the quantiles' dimension where the line was (moved to the front below) */
  int64_t shape[DLP_MAX_NDIM];
  int ndim = v->dl.ndim;
  for (int i = 0; i < ndim; i++) shape[i] = i == line ? nq : v->dl.shape[i];
  DLDevice cpu = {kDLCPU, 0};
  dlp_Tensor *r = dlp_tensor_new(L, out_dtype, 0, cpu, ndim, shape, 0, what);
  dlp_live(L, v, what);
  StatLine s = {v->dtype, out_dtype, median, number, v->dl.shape[line], dlp_walk_stride(v, line),
                dlp_walk_stride(r, line), nq, q};
  const dlp_Tensor *ops[2] = {v, r};
  dlp_each_line(2, ops, line, stat_line, &s, 1, NULL, 0);
  if (full && number && !keepdim) { /* a Lua value */
    dlp_push_element(L, out_dtype, dlp_first_element(r));
    return 1;
  }
  dlp_Tensor *res = dlp_tensor_new(L, out_dtype, 0, cpu, fn, final, 0, what);
  /* r holds, for each quantile j and each kept position, its value at index j along `line`:
   * move that dimension to the front by a copy into res's order */
  int64_t numel = dlp_numel(res);
  if (numel > 0) {
    int64_t inner = 1, size = dlp_dtypes[out_dtype].itemsize;
    for (int i = line + 1; i < ndim; i++) inner *= r->dl.shape[i];
    int64_t outer = numel / (nq * inner);
    const char *src = dlp_first_element(r);
    char *dst = dlp_first_element(res);
    for (int64_t o = 0; o < outer; o++)
      for (int64_t j = 0; j < nq; j++)
        memcpy(dst + (j * outer + o) * inner * size, src + (o * nq + j) * inner * size, (size_t)(inner * size));
  }
  return 1;
}

/* median(t [, dim [, opts{keepdim}]]): NumPy's (the mean of the two middle elements of an even
 * line; NaN when the line has one); over all elements a Lua number. */
static int l_median(lua_State *L) {
  static const char *const names[] = {"keepdim", NULL};
  const char *what = "dlpack.median";
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  if (lua_istable(L, 2) && lua_isnoneornil(L, 3)) {
    lua_settop(L, 2);
    lua_pushnil(L);
    lua_insert(L, 2);
  }
  int arg = options(L, 3, names, what), keepdim = arg ? flag(L, arg, "keepdim", 0) : 0;
  dlp_check_no_more(L, 4, what, "(t [, dim [, opts]])");
  lua_settop(L, 3);
  return statistic(L, t, 2, keepdim, NULL, 1, 1, -1, what);
}

/* quantile(t, q [, dim [, opts{keepdim, method = "linear"}]]): q a number, a list of numbers or
 * a 0-d or 1-d float tensor, each in [0, 1]; NumPy's linear method. */
static int l_quantile(lua_State *L) {
  static const char *const names[] = {"keepdim", "method", NULL};
  const char *what = "dlpack.quantile";
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  if (lua_istable(L, 3) && lua_isnoneornil(L, 4)) {
    lua_settop(L, 3);
    lua_pushnil(L);
    lua_insert(L, 3);
  }
  int arg = options(L, 4, names, what), keepdim = 0;
  if (arg) {
    keepdim = flag(L, arg, "keepdim", 0);
    if (lua_getfield(L, arg, "method") != LUA_TNIL) {
      size_t len;
      const char *m = lua_tolstring(L, -1, &len);
      if (!lua_isstring(L, -1) || lua_type(L, -1) != LUA_TSTRING || len != 6 || memcmp(m, "linear", 6) != 0)
        luaL_argerror(L, arg, "method: only \"linear\" is supported");
    }
    lua_pop(L, 1);
  }
  dlp_check_no_more(L, 5, what, "(t, q [, dim [, opts]])");
  lua_settop(L, 4);
  if (t->dtype == DLP_BOOL) /* NumPy's lerp subtracts booleans, which it refuses */
    luaL_error(L, "%s: bool tensors are not supported (convert them first)", what);
  int64_t nq = 1;
  int number = 0, q_dtype = -1;
  double *q;
  if (lua_type(L, 2) == LUA_TNUMBER) {
    number = 1;
    q = lua_newuserdatauv(L, sizeof(double), 0);
    q[0] = lua_tonumber(L, 2);
  } else if (lua_type(L, 2) == LUA_TTABLE) { /* read raw: no metamethod runs */
    nq = (int64_t)lua_rawlen(L, 2);
    if (nq > (int64_t)1 << 40) luaL_argerror(L, 2, "too many quantiles");
    q = lua_newuserdatauv(L, sizeof(double) * (size_t)(nq > 0 ? nq : 1), 0);
    for (int64_t j = 0; j < nq; j++) {
      lua_rawgeti(L, 2, (lua_Integer)(j + 1));
      if (lua_type(L, -1) != LUA_TNUMBER) luaL_argerror(L, 2, "q must be a list of numbers");
      q[j] = lua_tonumber(L, -1);
      lua_pop(L, 1);
    }
    q_dtype = DLP_FLOAT64;
  } else {
    dlp_Tensor *qt = dlp_tensor_test(L, 2);
    if (!qt) return luaL_argerror(L, 2, lua_pushfstring(L, "q must be a number, a list or a tensor, got %s", luaL_typename(L, 2)));
    qt = dlp_tensor_check(L, 2);
    dlp_check_host(L, qt, what);
    if (qt->dl.ndim > 1 || dlp_dtype_kind(qt->dtype) != K_FLOAT)
      luaL_argerror(L, 2, "q must be a 0-d or 1-d float tensor");
    nq = dlp_numel(qt);
    number = qt->dl.ndim == 0;
    q = lua_newuserdatauv(L, sizeof(double) * (size_t)(nq > 0 ? nq : 1), 0);
    dlp_live(L, qt, what);
    for (int64_t j = 0; j < nq; j++) q[j] = element(qt->dtype, dlp_first_element(qt) + j * (qt->dl.ndim ? dlp_walk_stride(qt, 0) : 0));
    q_dtype = qt->dtype;
  }
  for (int64_t j = 0; j < nq; j++)
    if (!(q[j] >= 0 && q[j] <= 1)) luaL_argerror(L, 2, "quantiles must be in the range [0, 1]");
  return statistic(L, t, 3, keepdim, q, nq, number, number && q_dtype == DLP_FLOAT64 ? -1 : q_dtype, what);
}

/* ---- unique ---- */

/* Equal as NumPy's unique compares (equal_nan: every NaN is one value; -0.0 equals 0.0). */
static int same_element(int dtype, const char *pa, const char *pb) {
  dlp_Scalar a, b;
  dlp_load(dtype, pa, &a);
  dlp_load(dtype, pb, &b);
  if (a.kind == DLP_S_FLOAT) return a.re == b.re || (a.re != a.re && b.re != b.re);
  return a.kind == DLP_S_UINT ? a.u == b.u : a.i == b.i;
}

/* unique of a CUDA tensor (kernels.cu's "unique"): every element sorted with its place (the
 * keys kept: equal keys are equal elements, NaN with NaN and -0.0 with 0.0), each first of a run
 * of equal keys flagged, the flags' running sums giving each element its value's number; then
 * each value's first element and start taken, the counts from the starts, the inverse from the
 * places. Results as l_unique's. */
static int unique_on_device(lua_State *L, dlp_Tensor *t, int inverse, int counts, const char *what) {
  int64_t n = dlp_numel(t), m = 0, size = dlp_dtypes[t->dtype].itemsize, eights[4][DLP_MAX_NDIM];
  int sizes[4] = {(int)size, 8, (int)size, 8};
  int64_t params[6] = {n, 0, 0, 0, 0, 0}, eight_strides[3][DLP_MAX_NDIM] = {{8}, {8}, {8}};
  int eight[3] = {8, 8, 8};
  DLDevice device = t->dl.device;
  dlp_Tensor *flat = flat_copy(L, t, what);
  dlp_Tensor *sorted = dlp_tensor_new(L, t->dtype, 0, device, 1, &n, 0, what);
  dlp_Tensor *pos = dlp_tensor_new(L, DLP_INT64, 0, device, 1, &n, 0, what);
  dlp_Tensor *groups = dlp_tensor_new(L, DLP_INT64, 0, device, 1, &n, 0, what);
  int groups_idx = lua_gettop(L);
  dlp_Tensor *inv = inverse ? dlp_tensor_new(L, DLP_INT64, 0, device, t->dl.ndim, t->dl.shape, 0, what) : NULL;
  int inv_idx = lua_gettop(L);
  /* from here on only the module's own tensors are read */
  for (int k = 0; k < 4; k++) eights[k][0] = sizes[k];
  if (n > 0) {
    dlp_Tensor *keys;
    sort_on_device(L, flat, 0, 0, n, sorted, pos, &keys, what);
    char *data[2] = {dlp_first_element(groups), dlp_first_element(keys)};
    dlp_Tensor *tensors[2] = {groups, keys};
    dlp_launch_with_params(L, what, "dlp_unique_flags", SORT_FAMILY, 2, 1, &n, data,
                           (const int64_t(*)[DLP_MAX_NDIM])eight_strides, tensors, eight, params);
    dlp_scan_on_device(L, groups_idx, what);
    m = dlp_last_on_device(L, groups_idx, what);
  }
  dlp_Tensor *values = dlp_tensor_new(L, t->dtype, 0, device, 1, &m, 0, what);
  int values_idx = lua_gettop(L);
  dlp_Tensor *starts = dlp_tensor_new(L, DLP_INT64, 0, device, 1, &m, 0, what);
  dlp_Tensor *count = counts ? dlp_tensor_new(L, DLP_INT64, 0, device, 1, &m, 0, what) : NULL;
  int count_idx = lua_gettop(L);
  if (n > 0) {
    static const char *const takes[] = {"dlp_unique_take_1", "dlp_unique_take_2", NULL, "dlp_unique_take_4", NULL,
                                        NULL, NULL, "dlp_unique_take_8"};
    char *data[4] = {dlp_first_element(values), dlp_first_element(groups), dlp_first_element(sorted),
                     dlp_first_element(starts)};
    dlp_Tensor *tensors[4] = {values, groups, sorted, starts};
    dlp_launch_with_params(L, what, takes[size - 1], SORT_FAMILY, 4, 1, &n, data,
                           (const int64_t(*)[DLP_MAX_NDIM])eights, tensors, sizes, params);
    if (count) {
      char *cdata[2] = {dlp_first_element(count), dlp_first_element(starts)};
      dlp_Tensor *ctensors[2] = {count, starts};
      dlp_launch_with_params(L, what, "dlp_unique_counts", SORT_FAMILY, 2, 1, &m, cdata,
                             (const int64_t(*)[DLP_MAX_NDIM])eight_strides, ctensors, eight, params);
    }
    if (inv) {
      char *idata[3] = {dlp_first_element(inv), dlp_first_element(groups), dlp_first_element(pos)};
      dlp_Tensor *itensors[3] = {inv, groups, pos};
      dlp_launch_with_params(L, what, "dlp_unique_inverse", SORT_FAMILY, 3, 1, &n, idata,
                             (const int64_t(*)[DLP_MAX_NDIM])eight_strides, itensors, eight, params);
    }
  }
  lua_pushvalue(L, values_idx);
  if (inv) lua_pushvalue(L, inv_idx);
  if (count) lua_pushvalue(L, count_idx);
  return 1 + (inv != NULL) + (count != NULL);
}

/* ---- unique slices along a dim ---- */

/* NumPy's order of two elements for unique along an axis: numbers by value (-0.0 equals 0.0),
 * NaN after every number and equal to NaN for the order; *nan set when either is NaN (NumPy
 * then tells the slices apart: its slices compare as records, NaN unequal to NaN). */
static int compare_elements(int dtype, const char *pa, const char *pb, int *nan) {
  dlp_Scalar a, b;
  dlp_load(dtype, pa, &a);
  dlp_load(dtype, pb, &b);
  if (a.kind == DLP_S_FLOAT) {
    int an = a.re != a.re, bn = b.re != b.re;
    if (an || bn) {
      *nan = 1;
      return an - bn;
    }
    return (a.re > b.re) - (a.re < b.re);
  }
  if (a.kind == DLP_S_UINT) return (a.u > b.u) - (a.u < b.u);
  return (a.i > b.i) - (a.i < b.i);
}

typedef struct Rows {
  const char *data; /* n rows of `rest` contiguous elements */
  int64_t rest, size;
  int dtype;
} Rows;

/* Row i against row j, lexicographically; *nan as compare_elements sets it. */
static int compare_rows(const Rows *r, int64_t i, int64_t j, int *nan) {
  const char *a = r->data + i * r->rest * r->size, *b = r->data + j * r->rest * r->size;
  for (int64_t k = 0; k < r->rest; k++) {
    int c = compare_elements(r->dtype, a + k * r->size, b + k * r->size, nan);
    if (c) return c;
  }
  return 0;
}

/* order[0 .. n) sorted by row, stably (a merge sort; tmp has room for n). */
static void sort_rows(const Rows *r, int64_t *order, int64_t *tmp, int64_t n) {
  int nan = 0;
  for (int64_t width = 1; width < n; width *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * width) {
      int64_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) tmp[k++] = compare_rows(r, order[j], order[i], &nan) < 0 ? order[j++] : order[i++];
      while (i < mid) tmp[k++] = order[i++];
      while (j < hi) tmp[k++] = order[j++];
    }
    memcpy(order, tmp, (size_t)n * sizeof *order);
  }
}

/* A view of the tensor at idx with dimension `from` moved to `to` (the others in order), pushed. */
static dlp_Tensor *moved_view(lua_State *L, int idx, int from, int to, const char *what) {
  dlp_Tensor *t = lua_touserdata(L, idx);
  int ndim = t->dl.ndim, perm[DLP_MAX_NDIM];
  for (int i = 0, k = 0; i < ndim; i++) {
    if (i == to) continue;
    if (k == from) k++;
    perm[i] = k++;
  }
  perm[to] = from;
  dlp_Tensor *v = dlp_view_new(L, idx, ndim, what);
  for (int i = 0; i < ndim; i++) {
    v->dl.shape[i] = t->dl.shape[perm[i]];
    v->dl.strides[i] = t->dl.strides[perm[i]];
  }
  dlp_tensor_seal(L, v, what);
  return v;
}

/* unique(t, {dim = d, ...}): NumPy's unique with an axis: the distinct slices along dim, sorted
 * lexicographically (row-major over the other dims), as a tensor of t's shape with dim the
 * count; the inverse (1-based, one per slice of t: int64 {n}) and the counts as l_unique's. On
 * the host: a CUDA tensor is copied there, and the results back. */
static int unique_along(lua_State *L, int dim, int inverse, int counts, const char *what) {
  dlp_Tensor *t = lua_touserdata(L, 1);
  DLDevice cpu = {kDLCPU, 0}, on = dlp_device_is_host(t->dl.device) ? cpu : t->dl.device; /* pinned: cpu */
  int ndim = t->dl.ndim, dtype = t->dtype;
  int64_t n = t->dl.shape[dim], size = dlp_dtypes[dtype].itemsize, m = 0, shape[DLP_MAX_NDIM];
  int64_t rest = n > 0 ? dlp_numel(t) / n : 0;
  moved_view(L, 1, dim, 0, what);                       /* 3: t with dim first */
  dlp_Tensor *rows = dlp_clone(L, 3, dtype, cpu, NULL, what); /* 4: n rows of rest elements */
  int64_t sorted = rest > 0 ? n : 0; /* slices of no element are all equal: nothing to sort */
  dlp_Tensor *order = dlp_tensor_new(L, DLP_INT64, 0, cpu, 1, &sorted, 0, what);
  dlp_Tensor *tmp = dlp_tensor_new(L, DLP_INT64, 0, cpu, 1, &sorted, 0, what);
  dlp_Tensor *inv = inverse ? dlp_tensor_new(L, DLP_INT64, 0, cpu, 1, &n, 0, what) : NULL;
  int inv_idx = lua_gettop(L);
  /* from here on only the module's own tensors are read */
  Rows r = {dlp_first_element(rows), rest, size, dtype};
  int64_t *o = (int64_t *)(void *)dlp_first_element(order), *g = (int64_t *)(void *)dlp_first_element(tmp);
  for (int64_t i = 0; i < sorted; i++) o[i] = i;
  sort_rows(&r, o, g, sorted);
  for (int64_t i = 0; i < sorted; i++) { /* g[i]: the number of the distinct slice o[i] is */
    int nan = 0;
    m += i == 0 || compare_rows(&r, o[i - 1], o[i], &nan) != 0 || nan;
    g[i] = m - 1;
  }
  if (rest == 0) m = n > 0;
  for (int i = 0; i < ndim; i++) shape[i] = i == 0 ? m : rows->dl.shape[i];
  dlp_Tensor *values = dlp_tensor_new(L, dtype, 0, cpu, ndim, shape, 0, what); /* dim first */
  int values_idx = lua_gettop(L);
  dlp_Tensor *count = counts ? dlp_tensor_new(L, DLP_INT64, 0, cpu, 1, &m, DLP_ALLOC_ZEROED, what) : NULL;
  int count_idx = lua_gettop(L);
  char *out = dlp_first_element(values);
  int64_t *c = count ? (int64_t *)(void *)dlp_first_element(count) : NULL;
  int64_t *where = inv ? (int64_t *)(void *)dlp_first_element(inv) : NULL;
  for (int64_t i = 0; i < sorted; i++) {
    if (i == 0 || g[i] != g[i - 1]) memcpy(out + g[i] * rest * size, r.data + o[i] * rest * size, (size_t)(rest * size));
    if (c) c[g[i]]++;
    if (where) where[o[i]] = g[i] + 1;
  }
  if (rest == 0 && c && m) c[0] = n;
  for (int64_t i = 0; rest == 0 && where && i < n; i++) where[i] = 1;
  moved_view(L, values_idx, 0, dim, what); /* the values with dim back in its place */
  dlp_clone(L, lua_gettop(L), dtype, on, NULL, what);
  values_idx = lua_gettop(L);
  if (on.device_type != kDLCPU) {
    if (inv) inv_idx = (dlp_clone(L, inv_idx, DLP_INT64, on, NULL, what), lua_gettop(L));
    if (count) count_idx = (dlp_clone(L, count_idx, DLP_INT64, on, NULL, what), lua_gettop(L));
  }
  lua_pushvalue(L, values_idx);
  if (inv) lua_pushvalue(L, inv_idx);
  if (count) lua_pushvalue(L, count_idx);
  return 1 + (inv != NULL) + (count != NULL);
}

/* unique(t [, opts{return_inverse, return_counts, dim}]): NumPy's over every element: the
 * distinct values in order (1-D), then the 1-based position in them of each element of t (t's
 * shape) and how many times each occurs, when asked for, in that order; with dim, unique_along. */
static int l_unique(lua_State *L) {
  static const char *const names[] = {"return_inverse", "return_counts", "dim", NULL};
  const char *what = "dlpack.unique";
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  int arg = options(L, 2, names, what), inverse = 0, counts = 0, dim = -1;
  if (arg) {
    inverse = flag(L, arg, "return_inverse", 0);
    counts = flag(L, arg, "return_counts", 0);
    int type = lua_getfield(L, arg, "dim");
    if (type != LUA_TNIL) {
      if (!lua_isinteger(L, -1))
        luaL_argerror(L, arg, lua_pushfstring(L, "dim must be an integer or nil, got %s", type == LUA_TNUMBER ?
                                              "a number with a fraction" : luaL_typename(L, -1)));
      lua_Integer d = lua_tointeger(L, -1), nd = t->dl.ndim;
      if (d < -nd || d > nd || d == 0)
        luaL_argerror(L, arg, lua_pushfstring(L, "dim %I out of range (tensor has %d)", d, t->dl.ndim));
      dim = (int)(d < 0 ? d + nd : d - 1);
    }
    lua_pop(L, 1);
  }
  dlp_check_no_more(L, 3, what, "(t [, opts])");
  lua_settop(L, 2);
  check_sortable(L, t, what);
  if (dim >= 0) return unique_along(L, dim, inverse, counts, what);
  if (t->dl.device.device_type == kDLCUDA) return unique_on_device(L, t, inverse, counts, what);
  DLDevice cpu = {kDLCPU, 0};
  int64_t n = dlp_numel(t), size = dlp_dtypes[t->dtype].itemsize;
  dlp_Tensor *flat = dlp_tensor_new(L, t->dtype, 0, cpu, 1, &n, 0, what);
  dlp_Tensor *sorted = dlp_tensor_new(L, t->dtype, 0, cpu, 1, &n, 0, what);
  dlp_Tensor *pos = dlp_tensor_new(L, DLP_INT64, 0, cpu, 1, &n, 0, what);
  dlp_Tensor *inv = inverse ? dlp_tensor_new(L, DLP_INT64, 0, cpu, t->dl.ndim, t->dl.shape, 0, what) : NULL;
  int inv_idx = lua_gettop(L);
  dlp_live(L, t, what);
  dlp_gather(dlp_first_element(flat), t);
  run_sort(L, flat, 0, 0, n, sorted, pos, what);
  /* from here on only the module's own tensors are read: allocations may run finalizers */
  const char *v = dlp_first_element(sorted);
  int64_t m = 0;
  for (int64_t i = 0; i < n; i++) m += i == 0 || !same_element(flat->dtype, v + (i - 1) * size, v + i * size);
  dlp_Tensor *values = dlp_tensor_new(L, flat->dtype, 0, cpu, 1, &m, 0, what);
  int values_idx = lua_gettop(L);
  dlp_Tensor *count = counts ? dlp_tensor_new(L, DLP_INT64, 0, cpu, 1, &m, 0, what) : NULL;
  int count_idx = lua_gettop(L);
  char *out = dlp_first_element(values);
  int64_t *c = count ? (int64_t *)(void *)dlp_first_element(count) : NULL;
  int64_t *where = inv ? (int64_t *)(void *)dlp_first_element(inv) : NULL;
  const int64_t *p = (const int64_t *)(const void *)dlp_first_element(pos);
  int64_t g = -1;
  for (int64_t i = 0; i < n; i++) {
    if (i == 0 || !same_element(flat->dtype, v + (i - 1) * size, v + i * size)) {
      g++;
      memcpy(out + g * size, v + i * size, (size_t)size);
      if (c) c[g] = 0;
    }
    if (c) c[g]++;
    if (where) where[p[i] - 1] = g + 1; /* the positions are 1-based, row-major in t */
  }
  lua_pushvalue(L, values_idx);
  if (inv) lua_pushvalue(L, inv_idx);
  if (count) lua_pushvalue(L, count_idx);
  return 1 + (inv != NULL) + (count != NULL);
}

void dlp_sort_register(lua_State *L, int module, int methods, int meta) {
  static const luaL_Reg functions[] = {
      {"sort", l_sort}, {"argsort", l_argsort}, {"topk", l_topk}, {"median", l_median}, {"quantile", l_quantile},
      {"unique", l_unique}, {NULL, NULL},
  };
  (void)meta;
  dlp_register(L, module, functions);
  dlp_register(L, methods, functions);
}
