/* Layout arithmetic: element counts, storage sizes, strides and the byte span a tensor's
 * elements cover. Every size, offset and extent the module computes goes through these
 * functions, which check each step for overflow; a caller that gets 0 back raises. */
#include "internal.h"

int dlp_add(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_add_overflow(a, b, out);
}

int dlp_mul(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

int dlp_numel_of(int ndim, const int64_t *shape, int64_t *numel) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++)
    if (shape[i] < 0) return 0;
  for (int i = 0; i < ndim; i++)
    if (shape[i] == 0) return *numel = 0, 1; /* empty, whatever the other sizes: {2^62, 4, 0} too */
  for (int i = 0; i < ndim; i++)
    if (!dlp_mul(n, shape[i], &n)) return 0;
  *numel = n;
  return 1;
}

int dlp_is_packed(int dtype, uint64_t flags) {
  return dlp_dtypes[dtype].bits < 8 && !(flags & DLP_FLAG_SUBBYTE_PADDED);
}

int dlp_bytes_of(int dtype, int64_t numel, uint64_t flags, int64_t *bytes) {
  if (numel < 0) return 0;
  if (dlp_is_packed(dtype, flags)) {
    /* ceil(numel * bits / 8), without forming numel * bits */
    int64_t bits = dlp_dtypes[dtype].bits, whole = numel / 8 * bits, rest = (numel % 8 * bits + 7) / 8;
    return dlp_add(whole, rest, bytes);
  }
  return dlp_mul(numel, dlp_dtypes[dtype].itemsize, bytes);
}

void dlp_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
  /* Only an empty shape ({0, 2^40, 2^40}) can overflow here, and strides say nothing about
   * empty tensors: saturate. */
  int64_t step = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    strides[i] = step;
    if (shape[i] > 1 && !dlp_mul(step, shape[i], &step)) step = INT64_MAX;
  }
}

int dlp_span_of(int ndim, const int64_t *shape, const int64_t *strides, int dtype, uint64_t flags,
                dlp_Span *span) {
  int64_t numel, itemsize = dlp_dtypes[dtype].itemsize, lo = 0, hi = 0;
  if (!dlp_numel_of(ndim, shape, &numel)) return 0;
  span->numel = numel;
  span->lo = span->hi = 0;
  if (numel == 0) return 1; /* touches no memory, whatever its strides */
  if (dlp_is_packed(dtype, flags)) {
    /* packed elements have no byte address of their own: only contiguous layouts exist */
    int64_t expected = 1;
    for (int i = ndim - 1; i >= 0; i--) {
      if (shape[i] != 1 && strides[i] != expected) return 0;
      expected *= shape[i];
    }
    return dlp_bytes_of(dtype, numel, flags, &span->hi);
  }
  for (int i = 0; i < ndim; i++) {
    int64_t reach;
    if (shape[i] == 1) continue;
    if (!dlp_mul(strides[i], shape[i] - 1, &reach) || !dlp_mul(reach, itemsize, &reach)) return 0;
    if (!(reach < 0 ? dlp_add(lo, reach, &lo) : dlp_add(hi, reach, &hi))) return 0;
  }
  if (!dlp_add(hi, itemsize, &hi)) return 0;
  span->lo = lo;
  span->hi = hi;
  return 1;
}
