/* Copies and conversion: strided element loops, clone, contiguous, copy, to, fill.
 * dlp_copy allocates what it needs (a temporary for overlapping views, CUDA staging)
 * before it takes the memory of its tensors, then copies without running Lua code. */
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "internal.h"

/* ---- walking two layouts at once ----
 * Size-1 dimensions are dropped and dimensions contiguous in both layouts merged; then the
 * elements go row by row along the dimension the destination is contiguous in, through one
 * typed row function. When the source is contiguous along another dimension (a transpose,
 * a permutation), the two dimensions are walked in TILE x TILE blocks, so that both sides
 * stay in cache. */

#define TILE 32

typedef struct Walk {
  int ndim;
  int64_t shape[DLP_MAX_NDIM];
  int64_t ds[DLP_MAX_NDIM], ss[DLP_MAX_NDIM]; /* byte strides of the destination and source */
} Walk;

/* What each row does: a row function (copy or convert), or a fill with `value`. */
typedef struct Job {
  dlp_RowFn row;
  const void *value;
  size_t itemsize;
  int move; /* same dtype: a tile may be transposed in registers */
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

static int64_t magnitude(int64_t v) { return v < 0 ? -v : v; }

/* The dimension whose byte stride is smallest in magnitude (-1 for none). */
static int fastest(const Walk *w, const int64_t *strides) {
  int best = -1;
  for (int i = 0; i < w->ndim; i++)
    if (best < 0 || magnitude(strides[i]) < magnitude(strides[best])) best = i;
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

#if defined(__SSE2__)
/* Transpose an la x lb tile in registers, for elements of 4 or 8 bytes: destination element
 * (i, j) at d + i*size + j*dsb, source element at s + i*ssa + j*size. Returns 0 (nothing done)
 * for other sizes. The moves are shuffles: the bits are copied as they are. The loads and stores are
 * the unaligned ones, so the byte pointers go to them as void * (no alignment claimed). */
static int transpose_tile(char *d, int64_t dsb, const char *s, int64_t ssa, int64_t la, int64_t lb, size_t size) {
  int64_t i, j;
  if (size == 4) {
    for (j = 0; j + 4 <= lb; j += 4) {
      for (i = 0; i + 4 <= la; i += 4) {
        const char *q = s + i * ssa + j * 4;
        __m128 r0 = _mm_loadu_ps((const void *)q), r1 = _mm_loadu_ps((const void *)(q + ssa));
        __m128 r2 = _mm_loadu_ps((const void *)(q + 2 * ssa)), r3 = _mm_loadu_ps((const void *)(q + 3 * ssa));
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
        char *p = d + i * 4 + j * dsb;
        _mm_storeu_ps((void *)p, r0);
        _mm_storeu_ps((void *)(p + dsb), r1);
        _mm_storeu_ps((void *)(p + 2 * dsb), r2);
        _mm_storeu_ps((void *)(p + 3 * dsb), r3);
      }
      for (; i < la; i++) /* the last columns of these rows */
        for (int64_t k = j; k < j + 4; k++) memcpy(d + i * 4 + k * dsb, s + i * ssa + k * 4, 4);
    }
  } else if (size == 8) {
    for (j = 0; j + 2 <= lb; j += 2) {
      for (i = 0; i + 2 <= la; i += 2) {
        const char *q = s + i * ssa + j * 8;
        __m128d r0 = _mm_loadu_pd((const void *)q), r1 = _mm_loadu_pd((const void *)(q + ssa));
        char *p = d + i * 8 + j * dsb;
        _mm_storeu_pd((void *)p, _mm_unpacklo_pd(r0, r1));
        _mm_storeu_pd((void *)(p + dsb), _mm_unpackhi_pd(r0, r1));
      }
      for (; i < la; i++)
        for (int64_t k = j; k < j + 2; k++) memcpy(d + i * 8 + k * dsb, s + i * ssa + k * 8, 8);
    }
  } else {
    return 0;
  }
  for (; j < lb; j++) /* the last rows */
    for (i = 0; i < la; i++) memcpy(d + i * size + j * dsb, s + i * ssa + j * size, size);
  return 1;
}
#endif

/* Rows along a, a TILE x TILE block of (a, b) at a time. */
static void visit_tiles(const Walk *w, int a, int b, const Job *job, char *d, const char *s) {
  int64_t na = w->shape[a], nb = w->shape[b];
  for (int64_t j0 = 0; j0 < nb; j0 += TILE) {
    int64_t lb = nb - j0 < TILE ? nb - j0 : TILE;
    for (int64_t i0 = 0; i0 < na; i0 += TILE) {
      int64_t la = na - i0 < TILE ? na - i0 : TILE;
      char *dp = d + i0 * w->ds[a] + j0 * w->ds[b];
      const char *sp = s + i0 * w->ss[a] + j0 * w->ss[b];
#if defined(__SSE2__)
      /* the fast dimensions run forward on both sides (negative strides take the rows) */
      if (job->move && w->ds[a] > 0 && w->ss[b] > 0 &&
          transpose_tile(dp, w->ds[b], sp, w->ss[a], la, lb, job->itemsize))
        continue;
#endif
      for (int64_t j = 0; j < lb; j++) do_row(job, dp + j * w->ds[b], w->ds[a], sp + j * w->ss[b], w->ss[a], la);
    }
  }
}

/* Run job over the simplified walk w from d and s; dsize and ssize are the element sizes. */
static void run(const Walk *w, const Job *job, char *d, const char *s, size_t dsize, size_t ssize) {
  if (w->ndim == 0) { /* one element */
    do_row(job, d, (int64_t)dsize, s, (int64_t)ssize, 1);
    return;
  }
  int a = fastest(w, w->ds), b = fastest(w, w->ss);
  if (a != b && magnitude(w->ds[a]) == (int64_t)dsize && magnitude(w->ss[b]) == (int64_t)ssize &&
      w->shape[a] >= TILE / 2 && w->shape[b] >= TILE / 2) {
    walk_outer(w, a, b, job, d, s, visit_tiles);
    return;
  }
  if (magnitude(w->ds[a]) != (int64_t)dsize && magnitude(w->ss[b]) == (int64_t)ssize) a = b;
  walk_outer(w, a, a, job, d, s, visit_row);
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
  Job job = {dlp_row_function(dst->dtype, src->dtype), NULL, dlp_dtypes[dst->dtype].itemsize,
             dst->dtype == src->dtype};
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
  Job job = {dlp_row_function(t->dtype, t->dtype), NULL, (size_t)itemsize, 1};
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
  Job job = {NULL, value, itemsize, 0};
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
