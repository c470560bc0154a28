/* Indexing with tensors: nonzero, argwhere, count_nonzero, masked_select, index_select, gather,
 * scatter (and scatter_), take.
 *
 * Index tensors hold 1-based indices, negative ones counting from the end as t[i] does (-1 is
 * the last); 0 and anything beyond the size raise naming the index and the size. Every index is
 * checked before anything a script can see is written: into a fresh result the check rides
 * along with the copy (an error drops the result); into out= or in place (scatter_) a first
 * pass checks them all and a second one writes.
 *
 * One loop does the work of gather, index_select, take and scatter: the iteration engine walks
 * the index tensor's shape with three operands, the destination, the index and the source; the
 * indexed dimension is strided 0 in whichever side it picks from, and the loop moves that side
 * by (index - 1) times that dimension's stride. gather, index_select and take (flat or along a
 * dim) differ only in where the index's dims lie on the result's and so share gather_into, on
 * the host and on CUDA devices. The functions that count before they know
 * their result's size (nonzero, masked_select) read a private alias of their operands, which
 * holds the memory while the result is allocated (finalizers may release the tensors then).
 *
 * On CUDA devices gather, index_select, take and scatter run as kernels (kernels.cu, family 42):
 * a flag kernel checks the indices first (a set flag is looked for on a host copy of the index,
 * to name the bad one as the host does), then each thread writes its own elements. nonzero,
 * argwhere and masked_select count with running sums of truth flags (in blocks, a pass per
 * level: the same sums on every run) and put each element at its slot; count_nonzero sums the
 * flags along one dim after another. Nothing is copied behind the script's back. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "compute/cuda/args.h"
#include "internal.h"

static const DLDevice host = {kDLCPU, 0};

/* The tensor at arg, named `name` in errors (a live one is checked again before its memory is read). */
static dlp_Tensor *tensor_arg(lua_State *L, int arg, const char *name, const char *what) {
  dlp_Tensor *t = dlp_tensor_test(L, arg);
  if (!t) luaL_error(L, "%s: %s must be a tensor, got %s", what, name, luaL_typename(L, arg));
  if (!t->owner) luaL_error(L, "%s: %s was released", what, name);
  return t;
}

static void check_index_dtype(lua_State *L, const dlp_Tensor *index, const char *what) {
  int kind = dlp_dtype_kind(index->dtype);
  if (kind != 1 && kind != 2)
    luaL_error(L, "%s: index must have an integer dtype, got %s", what, dlp_dtypes[index->dtype].name);
}

/* Byte strides for walking t over `shape` (t's own ndim; each size at most t's), with dimension
 * `zero` (-1: none) strided 0. */
static void walk_strides(const dlp_Tensor *t, int zero, int64_t *strides) {
  for (int i = 0; i < t->dl.ndim; i++) strides[i] = i == zero ? 0 : dlp_walk_stride(t, i);
}

/* ---- the picking loop: gather, index_select, take, scatter ---- */

typedef struct Pick {
  int64_t size; /* of the indexed dimension (take: of the flattened tensor) */
  int64_t step; /* bytes between its elements, in the source (gathering) or destination (scattering) */
  int itemsize;
  int write;    /* 0: check the indices only */
  int scatter;  /* the index moves the destination (data[0]) instead of the source (data[2]) */
  int failed;   /* an index out of range was met: bad (or bad_unsigned when it is beyond int64) */
  int bad_is_unsigned;
  int64_t bad;
  uint64_t bad_unsigned;
  /* split gathers (run_pick): this task's number, and the lowest number of a task that failed,
   * shared: a task after it stops (the error is known), one before it runs on */
  int64_t task;
  atomic_llong *first_failed;
} Pick;

static inline void copy_element(char *d, const char *s, int itemsize) {
  switch (itemsize) {
  case 1: *d = *s; break;
  case 2: memcpy(d, s, 2); break;
  case 4: memcpy(d, s, 4); break;
  case 8: memcpy(d, s, 8); break;
  default: memcpy(d, s, 16); break;
  }
}

static void pick_failed(Pick *p) {
  p->failed = 1;
  if (!p->first_failed) return;
  long long first = atomic_load_explicit(p->first_failed, memory_order_relaxed);
  while (p->task < first &&
         !atomic_compare_exchange_weak_explicit(p->first_failed, &first, p->task, memory_order_relaxed,
                                                memory_order_relaxed)) {
  }
}

/* Whether the pass stops: this task met a bad index, or an earlier task did. */
static inline int pick_stopped(const Pick *p) {
  return p->failed || (p->first_failed && atomic_load_explicit(p->first_failed, memory_order_relaxed) < p->task);
}

/* The 0-based index k of the index value v (type T), checked against size: out of range, the
 * pass stops with the value kept for the error. */
#define PICK_INDEX(T, IS_UNSIGNED, v, k)                                                           \
  if (IS_UNSIGNED) {                                                                               \
    if ((uint64_t)v - 1 >= (uint64_t)size) { /* 0 wraps to the largest */                         \
      pick_failed(p);                                                                              \
      p->bad_is_unsigned = 1;                                                                      \
      p->bad_unsigned = (uint64_t)v;                                                               \
      return;                                                                                      \
    }                                                                                              \
    k = (int64_t)v - 1;                                                                            \
  } else {                                                                                         \
    int64_t w = (int64_t)v;                                                                        \
    k = w < 0 ? w + size : w - 1; /* no overflow: size >= 0 */                                     \
    if ((uint64_t)k >= (uint64_t)size) {                                                           \
      pick_failed(p);                                                                              \
      p->bad = w;                                                                                  \
      return;                                                                                      \
    }                                                                                              \
  }

/* How many indices ahead a gather asks for its source element: random reads of a large source
 * wait on memory, and the hardware cannot guess the next address. */
#define GATHER_AHEAD 16

/* A gather into a contiguous destination from contiguous indices, elements of SIZE bytes. The
 * prefetch's address is only a hint (a bad index is caught when its turn comes; a prefetch
 * never faults), made in unsigned arithmetic. */
#define GATHER_CONTIGUOUS(T, IS_UNSIGNED, SIZE)                                                    \
  for (int64_t i = 0; i < n; i++, s += steps[2]) {                                                \
    T v;                                                                                           \
    int64_t k;                                                                                     \
    memcpy(&v, x + i * (int64_t)sizeof v, sizeof v);                                               \
    if (i + GATHER_AHEAD < n) {                                                                    \
      T ahead;                                                                                     \
      memcpy(&ahead, x + (i + GATHER_AHEAD) * (int64_t)sizeof ahead, sizeof ahead);                \
      __builtin_prefetch((const void *)((uintptr_t)s + (uintptr_t)steps[2] * GATHER_AHEAD +         \
                                        ((uint64_t)(int64_t)ahead - 1) * (uint64_t)step));         \
    }                                                                                              \
    PICK_INDEX(T, IS_UNSIGNED, v, k)                                                               \
    memcpy(d + i * SIZE, dlp_offset(s, k * step), SIZE);                                           \
  }

/* One loop per index dtype. */
#define PICK_LOOP(NAME, T, IS_UNSIGNED)                                                             \
  static void NAME(void *ctx, char *const *data, const int64_t *steps, int64_t n) {               \
    Pick *p = ctx;                                                                                \
    if (pick_stopped(p)) return;                                                                  \
    char *d = data[0];                                                                            \
    const char *x = data[1], *s = data[2];                                                        \
    int64_t size = p->size, step = p->step;                                                       \
    int itemsize = p->itemsize, write = p->write, scatter = p->scatter;                           \
    if (write && !scatter && steps[0] == itemsize && steps[1] == (int64_t)sizeof(T)) {           \
      if (itemsize == 4) {                                                                        \
        GATHER_CONTIGUOUS(T, IS_UNSIGNED, 4)                                                      \
        return;                                                                                   \
      }                                                                                           \
      if (itemsize == 8) {                                                                        \
        GATHER_CONTIGUOUS(T, IS_UNSIGNED, 8)                                                      \
        return;                                                                                   \
      }                                                                                           \
    }                                                                                             \
    for (int64_t i = 0; i < n; i++, d += steps[0], x += steps[1], s += steps[2]) {                \
      T v;                                                                                        \
      int64_t k;                                                                                  \
      memcpy(&v, x, sizeof v);                                                                    \
      PICK_INDEX(T, IS_UNSIGNED, v, k)                                                            \
      if (!write) continue;                                                                       \
      if (scatter) copy_element(dlp_offset(d, k * step), s, itemsize);                            \
      else copy_element(d, dlp_offset(s, k * step), itemsize);                                    \
    }                                                                                             \
  }

PICK_LOOP(pick_i8, int8_t, 0)
PICK_LOOP(pick_i16, int16_t, 0)
PICK_LOOP(pick_i32, int32_t, 0)
PICK_LOOP(pick_i64, int64_t, 0)
PICK_LOOP(pick_u8, uint8_t, 1)
PICK_LOOP(pick_u16, uint16_t, 1)
PICK_LOOP(pick_u32, uint32_t, 1)
PICK_LOOP(pick_u64, uint64_t, 1)

static dlp_IterLoop pick_loop(int index_dtype) {
  switch (index_dtype) {
  case DLP_INT8: return pick_i8;
  case DLP_INT16: return pick_i16;
  case DLP_INT32: return pick_i32;
  case DLP_INT64: return pick_i64;
  case DLP_UINT8: return pick_u8;
  case DLP_UINT16: return pick_u16;
  case DLP_UINT32: return pick_u32;
  default: return pick_u64;
  }
}

/* The error for the index a pass stopped at; dim is 0-based, -1 for take's flat indices. */
static int index_error(lua_State *L, const Pick *p, int dim, const char *what) {
  char value[32];
  if (p->bad_is_unsigned) snprintf(value, sizeof value, "%" PRIu64, p->bad_unsigned);
  else snprintf(value, sizeof value, "%" PRId64, p->bad);
  const char *hint = (p->bad_is_unsigned ? p->bad_unsigned == 0 : p->bad == 0) ? "; indices start at 1" : "";
  if (dim < 0)
    return luaL_error(L, "%s: index %s out of range (%I elements%s)", what, value, (lua_Integer)p->size, hint);
  return luaL_error(L, "%s: index %s out of range for dimension %d (size %I%s)", what, value, dim + 1,
                    (lua_Integer)p->size, hint);
}

/* How pick runs: checking while writing (into a private destination, dropped on error), checking
 * every index before writing any, or only checking. */
enum { PICK_FUSED, PICK_CHECK_FIRST, PICK_CHECK_ONLY };

/* A large gather runs in tasks (compute/threads.c), each with a Pick of its own: the first task
 * that met a bad index says which (the walk stops at the first one, as on one thread), and the
 * tasks after it stop at their next row or do not start (a bad first index made a gather on 2
 * threads do all its work for an error, 100 times one thread's time). Scatters stay on one
 * thread: the last write of a destination element wins. */
#define PICK_TASKS 64
static void run_pick(const dlp_Iter *it, dlp_IterLoop loop, Pick *p) {
  Pick parts[PICK_TASKS];
  atomic_llong first_failed;
  int64_t tasks = p->scatter ? 0 : dlp_iter_split(it, PICK_TASKS, p->write ? p->itemsize : 0);
  if (!tasks) {
    dlp_iter_run(it, loop, p);
    return;
  }
  atomic_init(&first_failed, PICK_TASKS);
  for (int64_t i = 0; i < tasks; i++) {
    parts[i] = *p;
    parts[i].task = i;
    parts[i].first_failed = &first_failed;
  }
  dlp_iter_run_tasks(it, tasks, loop, parts, sizeof *parts);
  for (int64_t i = 0; i < tasks; i++)
    if (parts[i].failed) {
      *p = parts[i];
      return;
    }
}

/* Run the picking loop over `shape` (ndim) with the operands' data and byte strides; row-major
 * order when `ordered` (scatter: the last write wins). Raises for an index out of range. */
static void pick(lua_State *L, Pick *p, int index_dtype, int ndim, const int64_t *shape, char *const *data,
                 const int64_t (*strides)[DLP_MAX_NDIM], int mode, int ordered, int dim, const char *what) {
  dlp_Iter it;
  dlp_IterLoop loop = pick_loop(index_dtype);
  dlp_iter_init(&it, 3, ndim, shape, data, strides, !ordered);
  p->failed = 0;
  if (mode != PICK_FUSED) {
    p->write = 0;
    run_pick(&it, loop, p);
    if (p->failed) index_error(L, p, dim, what);
    if (mode == PICK_CHECK_ONLY) return;
  }
  p->write = 1;
  run_pick(&it, loop, p);
  if (p->failed) index_error(L, p, dim, what);
}

/* ---- on CUDA devices ---- */

#define INDEX_FAMILY 42

/* One launch of an indexing kernel over `shape` (walked in the engine's order: every kernel here
 * writes elements that depend on no other's), operands at data with byte strides, elements of
 * sizes[k] bytes, params in the value slots (kernels.cu's P(0) .. P(5)). */
static void launch_index(lua_State *L, const char *kernel, int nops, int ndim, const int64_t *shape, char *const *data,
                         const int64_t (*strides)[DLP_MAX_NDIM], dlp_Tensor *const *tensors, const int *sizes,
                         const int64_t *params, const char *what) {
  dlp_launch_with_params(L, what, kernel, INDEX_FAMILY, nops, ndim, shape, data, strides, tensors, sizes, params);
}

static const char *size_kernel(const char *const *names, int itemsize) {
  switch (itemsize) {
  case 1: return names[0];
  case 2: return names[1];
  case 4: return names[2];
  case 8: return names[3];
  default: return names[4];
  }
}
static const char *const gather_kernels[] = {"dlp_gather_1", "dlp_gather_2", "dlp_gather_4", "dlp_gather_8",
                                             "dlp_gather_16"};
static const char *const scatter_kernels[] = {"dlp_scatter_1", "dlp_scatter_2", "dlp_scatter_4", "dlp_scatter_8",
                                              "dlp_scatter_16"};

/* Raises, naming the first bad index as the host does, unless every index of the CUDA tensor at
 * stack index idx is in 1 .. size (dim as index_error takes it). A flag kernel, then the flag
 * read back (a synchronisation); the index is looked through on the host only when it is set. */
static void check_on_device(lua_State *L, int idx, int64_t size, int dim, const char *what) {
  static const char *const kernels[] = {
    [DLP_INT8] = "dlp_index_check_i8", [DLP_INT16] = "dlp_index_check_i16", [DLP_INT32] = "dlp_index_check_i32",
    [DLP_INT64] = "dlp_index_check_i64", [DLP_UINT8] = "dlp_index_check_u8", [DLP_UINT16] = "dlp_index_check_u16",
    [DLP_UINT32] = "dlp_index_check_u32", [DLP_UINT64] = "dlp_index_check_u64"};
  dlp_Tensor *index = lua_touserdata(L, idx);
  int top = lua_gettop(L), ndim = index->dl.ndim;
  unsigned char none = 0;
  int64_t strides[3][DLP_MAX_NDIM], params[6] = {size, 0, 0, 0, 0, 0};
  if (dlp_numel(index) == 0) return;
  dlp_Tensor *flag = dlp_tensor_new(L, DLP_BOOL, 0, index->dl.device, 0, NULL, 0, what);
  dlp_fill_on_cuda(L, flag, &none, NULL, what);
  char *data[2] = {dlp_first_element(flag), dlp_first_element(index)};
  dlp_Tensor *tensors[2] = {flag, index};
  int sizes[2] = {1, dlp_dtypes[index->dtype].itemsize};
  for (int i = 0; i < ndim; i++) strides[0][i] = 0;
  walk_strides(index, -1, strides[1]);
  launch_index(L, kernels[index->dtype], 2, ndim, index->dl.shape, data, (const int64_t(*)[DLP_MAX_NDIM])strides,
               tensors, sizes, params, what);
  dlp_Tensor *seen = dlp_clone(L, top + 1, DLP_BOOL, host, NULL, what); /* waits for the kernel */
  int bad = *(const unsigned char *)dlp_first_element(seen) != 0;
  dlp_tensor_release(seen);
  dlp_tensor_release(flag);
  lua_settop(L, top);
  if (!bad) return;
  dlp_Tensor *copy = dlp_clone(L, idx, index->dtype, host, NULL, what);
  Pick p = {size, 0, 1, 0, 0, 0, 0, 0, 0, 0, NULL};
  char *hdata[3] = {NULL, dlp_first_element(copy), NULL};
  for (int i = 0; i < ndim; i++) strides[0][i] = strides[2][i] = 0;
  walk_strides(copy, -1, strides[1]);
  pick(L, &p, copy->dtype, ndim, copy->dl.shape, hdata, (const int64_t(*)[DLP_MAX_NDIM])strides, PICK_CHECK_ONLY, 0,
       dim, what);
  luaL_error(L, "%s: an index is out of range (its device's check and the host's disagree)", what);
}

/* The checked indices at stack index idx as int64 on their device: the tensor itself, or a
 * converted copy, pushed (also when `copy`: the writes could change the original). */
static dlp_Tensor *device_indices(lua_State *L, int idx, int copy, const char *what) {
  dlp_Tensor *index = lua_touserdata(L, idx);
  if (index->dtype == DLP_INT64 && !copy) return index;
  dlp_Tensor *c = dlp_tensor_new(L, DLP_INT64, 0, index->dl.device, index->dl.ndim, index->dl.shape, 0, what);
  dlp_copy_on_cuda(L, c, index, NULL, what);
  return c;
}

/* A gathering launch: r[...] = src at index along the dimension P(0) bytes apart, P(1) long;
 * strides as pick's (operand 1 the int64 indices). */
static void gather_on_device(lua_State *L, dlp_Tensor *r, dlp_Tensor *index, dlp_Tensor *src, int ndim,
                             const int64_t *shape, const int64_t (*strides)[DLP_MAX_NDIM], int64_t step, int64_t size,
                             const char *what) {
  int itemsize = dlp_dtypes[r->dtype].itemsize, sizes[3] = {itemsize, 8, itemsize};
  int64_t params[6] = {step, size, 0, 0, 0, 0};
  char *data[3] = {dlp_first_element(r), dlp_first_element(index), dlp_first_element(src)};
  dlp_Tensor *tensors[3] = {r, index, src};
  launch_index(L, size_kernel(gather_kernels, itemsize), 3, ndim, shape, data, strides, tensors, sizes, params, what);
}

void dlp_select_slices_on_cuda(lua_State *L, dlp_Tensor *r, dlp_Tensor *t, dlp_Tensor *perm, const char *what) {
  int64_t strides[3][DLP_MAX_NDIM];
  walk_strides(r, -1, strides[0]);
  for (int i = 0; i < t->dl.ndim; i++) strides[1][i] = i == 0 ? dlp_walk_stride(perm, 0) : 0;
  walk_strides(t, 0, strides[2]);
  gather_on_device(L, r, perm, t, t->dl.ndim, r->dl.shape, (const int64_t(*)[DLP_MAX_NDIM])strides,
                   dlp_walk_stride(t, 0), t->dl.shape[0], what);
}

/* ---- results with out= ---- */

typedef struct Result {
  dlp_Tensor *into; /* where the picking writes: out itself or a fresh tensor */
  int out;          /* stack index of out, 0 when none */
  int fresh;        /* stack index of the fresh tensor, 0 when none */
  int direct;       /* into is out (its indices are checked before anything is written) */
} Result;

/* A tensor written in place or as out= must not repeat elements: which of the aliased writes
 * stays would depend on the walk (the elementwise functions refuse the same). */
static void check_no_repeats(lua_State *L, const dlp_Tensor *t, const char *name, const char *what) {
  for (int i = 0; i < t->dl.ndim && dlp_numel(t) > 0; i++)
    if (t->dl.shape[i] > 1 && dlp_walk_stride(t, i) == 0)
      luaL_error(L, "%s: %s repeats elements (an expanded view) and cannot be written", what, name);
}

/* The destination of a result of rdtype and rshape on device `on`: out (from opts) when it can
 * take the values directly, else a fresh contiguous tensor, pushed (copied into out at
 * result_finish). Call after every argument is read; it may allocate (finalizers may run). */
static void result_begin(lua_State *L, Result *r, const dlp_ComputeOptions *o, int rdtype, int ndim,
                         const int64_t *rshape, DLDevice on, dlp_Tensor *const *inputs, int ninputs, const char *what) {
  r->out = o->out;
  r->direct = 0;
  r->fresh = 0;
  if (o->out) {
    dlp_Tensor *out = lua_touserdata(L, o->out);
    dlp_check_out(L, out, rdtype, ndim, rshape, 0, what);
    r->direct = out->dtype == rdtype;
    for (int k = 0; k < ninputs && r->direct; k++) r->direct = !dlp_overlaps(out, inputs[k]);
    if (r->direct) {
      r->into = out;
      return;
    }
  }
  r->into = dlp_tensor_new(L, rdtype, 0, on, ndim, rshape, 0, what);
  r->fresh = lua_gettop(L);
}

/* Pushes the result (out, or the fresh tensor). */
static void result_finish(lua_State *L, Result *r, const char *what) {
  if (r->out && !r->direct) dlp_copy(L, lua_touserdata(L, r->out), r->into, NULL, what);
  lua_pushvalue(L, r->out ? r->out : r->fresh);
}

/* ---- gather, index_select, take ---- */

/* What gather, index_select and take share: r->into, walked over `shape` (ndim), gets the
 * elements of src picked along one of its dims (`size` long, `step` bytes apart; take's flat
 * walk: every element, itemsize apart) by the index at stack index index_at, whose dims lie on
 * the result's dims at .. at + its ndim - 1 (strided 0 along the others); src_strides walks src
 * over shape, 0 where the index picks. Every index is checked, also when the result is empty;
 * dim names the dimension in errors (-1: take's flat indices). Pushes the result. */
static void gather_into(lua_State *L, Result *r, dlp_Tensor *src, int index_at, int at, int ndim,
                        const int64_t *shape, const int64_t *src_strides, int64_t size, int64_t step, int gpu, int dim,
                        const char *what) {
  int64_t strides[3][DLP_MAX_NDIM];
  dlp_Tensor *index = lua_touserdata(L, index_at);
  walk_strides(r->into, -1, strides[0]);
  for (int i = 0; i < ndim; i++) strides[2][i] = src_strides[i];
  if (gpu >= 0) {
    check_on_device(L, index_at, size, dim, what); /* every index, also when the result is empty */
    index = device_indices(L, index_at, 0, what);
  }
  for (int i = 0; i < ndim; i++)
    strides[1][i] = i >= at && i - at < index->dl.ndim ? dlp_walk_stride(index, i - at) : 0;
  if (gpu >= 0) {
    gather_on_device(L, r->into, index, src, ndim, shape, (const int64_t(*)[DLP_MAX_NDIM])strides, step, size, what);
    result_finish(L, r, what);
    return;
  }
  dlp_live(L, src, what);
  dlp_live(L, index, what);
  dlp_live(L, r->into, what);
  Pick p = {size, step, dlp_dtypes[src->dtype].itemsize, 0, 0, 0, 0, 0, 0, 0, NULL};
  char *data[3] = {dlp_first_element(r->into), dlp_first_element(index), dlp_first_element(src)};
  int empty = 0;
  for (int i = 0; i < ndim; i++) empty |= shape[i] == 0;
  if (empty && dlp_numel(index) > 0) { /* an empty result: the indices still count */
    int64_t istrides[3][DLP_MAX_NDIM] = {{0}, {0}, {0}}, ishape[DLP_MAX_NDIM] = {1};
    int indim = index->dl.ndim ? index->dl.ndim : 1; /* a 0-d index is walked as one element */
    for (int i = 0; i < index->dl.ndim; i++) ishape[i] = index->dl.shape[i];
    walk_strides(index, -1, istrides[1]);
    pick(L, &p, index->dtype, indim, ishape, data, (const int64_t(*)[DLP_MAX_NDIM])istrides, PICK_CHECK_ONLY, 0, dim,
         what);
  }
  pick(L, &p, index->dtype, ndim, shape, data, (const int64_t(*)[DLP_MAX_NDIM])strides,
       r->direct ? PICK_CHECK_FIRST : PICK_FUSED, 0, dim, what);
  result_finish(L, r, what);
}

/* t:gather(dim, index [, opts]): r[i][j] = t[index[i][j]][j] (dim 1), torch's: index has t's
 * number of dims and fits in t outside dim; the result has index's shape. */
static int l_gather(lua_State *L) {
  const char *what = "gather";
  dlp_ComputeOptions o;
  int64_t src_strides[DLP_MAX_NDIM];
  Result r;
  dlp_check_no_more(L, 5, what, "a tensor, a dim, an index and an options table");
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  int dim = dlp_check_dim(L, 2, t->dl.ndim, 0);
  dlp_Tensor *index = tensor_arg(L, 3, "index", what);
  dlp_read_compute_options(L, 4, DLP_COPT_OUT, &o, what);
  dlp_Tensor *operands[3] = {t, index, o.out ? lua_touserdata(L, o.out) : NULL};
  int gpu = dlp_compute_device(L, operands, 3, what);
  check_index_dtype(L, index, what);
  dlp_check_computes(L, t->dtype, what);
  int ndim = t->dl.ndim, fits = index->dl.ndim == ndim;
  for (int i = 0; fits && i < ndim; i++) fits = i == dim || index->dl.shape[i] <= t->dl.shape[i];
  if (!fits) {
    dlp_push_shape(L, index->dl.ndim, index->dl.shape);
    dlp_push_shape(L, ndim, t->dl.shape);
    return luaL_error(L, "%s: index of shape %s does not fit a tensor of shape %s (the same number of dims, "
                      "sizes at most the tensor's outside dim %d)", what, lua_tostring(L, -2), lua_tostring(L, -1),
                      dim + 1);
  }
  result_begin(L, &r, &o, t->dtype, ndim, index->dl.shape, gpu >= 0 ? t->dl.device : host, operands, 2, what);
  walk_strides(t, dim, src_strides);
  gather_into(L, &r, t, 3, 0, ndim, index->dl.shape, src_strides, t->dl.shape[dim], dlp_walk_stride(t, dim), gpu, dim,
              what);
  return 1;
}

/* t:index_select(dim, index [, opts]): the slices of t along dim that index (0-d or 1-d) names,
 * in its order (torch's; a 0-d index keeps the dim with size 1). */
static int l_index_select(lua_State *L) {
  const char *what = "index_select";
  dlp_ComputeOptions o;
  int64_t src_strides[DLP_MAX_NDIM], shape[DLP_MAX_NDIM];
  Result r;
  dlp_check_no_more(L, 5, what, "a tensor, a dim, an index and an options table");
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  int dim = dlp_check_dim(L, 2, t->dl.ndim, 0);
  dlp_Tensor *index = tensor_arg(L, 3, "index", what);
  dlp_read_compute_options(L, 4, DLP_COPT_OUT, &o, what);
  dlp_Tensor *operands[3] = {t, index, o.out ? lua_touserdata(L, o.out) : NULL};
  int gpu = dlp_compute_device(L, operands, 3, what);
  check_index_dtype(L, index, what);
  dlp_check_computes(L, t->dtype, what);
  if (index->dl.ndim > 1)
    return luaL_error(L, "%s: index must be 0-d or 1-d, got %d dims", what, index->dl.ndim);
  int ndim = t->dl.ndim;
  for (int i = 0; i < ndim; i++) shape[i] = i == dim ? (index->dl.ndim ? index->dl.shape[0] : 1) : t->dl.shape[i];
  result_begin(L, &r, &o, t->dtype, ndim, shape, gpu >= 0 ? t->dl.device : host, operands, 2, what);
  walk_strides(t, dim, src_strides);
  gather_into(L, &r, t, 3, dim, ndim, shape, src_strides, t->dl.shape[dim], dlp_walk_stride(t, dim), gpu, dim, what);
  return 1;
}

/* dlpack.take(t, index [, dim] [, opts]): NumPy's take. Without dim, t's elements at the flat
 * (row-major) indices of index, any shape, which the result has; with dim (np.take's axis), the
 * slices of t along dim at index's indices: the result's shape is t's with dim replaced by
 * index's shape (a 0-d index drops it). */
static int l_take(lua_State *L) {
  const char *what = "take";
  dlp_ComputeOptions o;
  int64_t src_strides[DLP_MAX_NDIM], shape[DLP_MAX_NDIM];
  Result r;
  int has_dim = lua_type(L, 3) == LUA_TNUMBER, opts = has_dim || (lua_isnil(L, 3) && !lua_isnoneornil(L, 4)) ? 4 : 3;
  dlp_check_no_more(L, opts + 1, what, "a tensor, an index, a dim and an options table");
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  dlp_Tensor *index = tensor_arg(L, 2, "index", what);
  int dim = has_dim ? dlp_check_dim(L, 3, t->dl.ndim, 0) : -1;
  dlp_read_compute_options(L, opts, DLP_COPT_OUT, &o, what);
  dlp_Tensor *operands[3] = {t, index, o.out ? lua_touserdata(L, o.out) : NULL};
  int gpu = dlp_compute_device(L, operands, 3, what);
  check_index_dtype(L, index, what);
  dlp_check_computes(L, t->dtype, what);
  DLDevice on = gpu >= 0 ? t->dl.device : host;
  int itemsize = dlp_dtypes[t->dtype].itemsize;
  if (dim < 0) {
    dlp_Tensor *flat = t;
    if (!dlp_is_contiguous(t)) flat = dlp_clone(L, 1, t->dtype, on, NULL, what); /* row-major, private */
    result_begin(L, &r, &o, t->dtype, index->dl.ndim, index->dl.shape, on, operands, 2, what);
    for (int i = 0; i < index->dl.ndim; i++) src_strides[i] = 0;
    gather_into(L, &r, flat, 2, 0, index->dl.ndim, index->dl.shape, src_strides, dlp_numel(flat), itemsize, gpu, -1,
                what);
    return 1;
  }
  int ndim = t->dl.ndim - 1 + index->dl.ndim, k = 0;
  if (ndim > DLP_MAX_NDIM)
    return luaL_error(L, "%s: the result would have %d dims (at most %d)", what, ndim, DLP_MAX_NDIM);
  for (int i = 0; i < t->dl.ndim; i++) {
    if (i != dim) {
      src_strides[k] = dlp_walk_stride(t, i);
      shape[k++] = t->dl.shape[i];
      continue;
    }
    for (int j = 0; j < index->dl.ndim; j++) {
      src_strides[k] = 0;
      shape[k++] = index->dl.shape[j];
    }
  }
  result_begin(L, &r, &o, t->dtype, ndim, shape, on, operands, 2, what);
  gather_into(L, &r, t, 2, dim, ndim, shape, src_strides, t->dl.shape[dim], dlp_walk_stride(t, dim), gpu, dim, what);
  return 1;
}

/* ---- scatter ---- */

/* t:scatter_(dim, index, src) in place, and scatter(t, dim, index, src) on a copy: t[index[i][j]][j]
 * = src[i][j] (dim 1), torch's; src a tensor (converted by the same_kind rule) or a value. Index
 * elements are visited in row-major order: of duplicate indices the last one's value stays (on
 * a CUDA device each thread walks one line along dim in order, which gives the same). */
static int scatter(lua_State *L, int inplace) {
  const char *what = inplace ? "scatter_" : "scatter";
  int64_t strides[3][DLP_MAX_NDIM];
  unsigned char value[16];
  dlp_check_no_more(L, 5, what, "a tensor, a dim, an index and a source");
  lua_settop(L, 4);
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  int dim = dlp_check_dim(L, 2, t->dl.ndim, 0);
  dlp_Tensor *index = tensor_arg(L, 3, "index", what);
  dlp_Tensor *src = dlp_tensor_test(L, 4);
  if (src && !src->owner) return luaL_error(L, "%s: src was released", what);
  if (!src && lua_isnil(L, 4)) return luaL_error(L, "%s: src must be a tensor or a value, got nil", what);
  dlp_Tensor *operands[3] = {t, index, src};
  int gpu = dlp_compute_device(L, operands, 3, what);
  DLDevice on = gpu >= 0 ? t->dl.device : host;
  check_index_dtype(L, index, what);
  dlp_check_computes(L, t->dtype, what);
  if (inplace) {
    dlp_check_writable(L, t, what);
    check_no_repeats(L, t, "the tensor", what);
  }
  int ndim = t->dl.ndim, fits = index->dl.ndim == ndim && (!src || src->dl.ndim == ndim);
  for (int i = 0; fits && i < ndim; i++)
    fits = (i == dim || index->dl.shape[i] <= t->dl.shape[i]) && (!src || index->dl.shape[i] <= src->dl.shape[i]);
  if (!fits) {
    dlp_push_shape(L, index->dl.ndim, index->dl.shape);
    dlp_push_shape(L, ndim, t->dl.shape);
    if (src) dlp_push_shape(L, src->dl.ndim, src->dl.shape);
    else lua_pushliteral(L, "(a value)");
    return luaL_error(L, "%s: index of shape %s does not fit a tensor of shape %s and a src of shape %s (the same "
                      "number of dims, sizes at most src's, and the tensor's outside dim %d)", what,
                      lua_tostring(L, -3), lua_tostring(L, -2), lua_tostring(L, -1), dim + 1);
  }
  /* everything that allocates: the copy written to, and private copies of the operands that are
   * converted or that the writes could change */
  int dest = 1;
  if (!inplace) {
    dlp_clone(L, 1, t->dtype, on, NULL, what);
    dest = lua_gettop(L);
  }
  dlp_Tensor *d = lua_touserdata(L, dest);
  if (src) {
    if (src->dtype != t->dtype && !dlp_can_cast_same_kind(src->dtype, t->dtype))
      return luaL_error(L, "%s: cannot write %s values into %s (same_kind casting)", what, dlp_dtypes[src->dtype].name,
                        dlp_dtypes[t->dtype].name);
    if (src->dtype != t->dtype || (inplace && dlp_overlaps(src, t))) src = dlp_clone(L, 4, t->dtype, on, NULL, what);
  } else {
    dlp_check_element(L, 4, t->dtype, value, what);
    if (gpu >= 0) src = dlp_tensor_filled(L, t->dtype, on, 0, NULL, value, what); /* 0-d: read at every index */
  }
  int index_at = 3;
  if (gpu < 0 && inplace && dlp_overlaps(index, t)) {
    index = dlp_clone(L, 3, index->dtype, host, NULL, what);
    index_at = lua_gettop(L);
  }
  walk_strides(d, dim, strides[0]);
  if (src && src->dl.ndim == ndim) walk_strides(src, -1, strides[2]);
  else for (int i = 0; i < ndim; i++) strides[2][i] = 0; /* a value (on a device: a 0-d tensor of it) */
  if (gpu >= 0) {
    /* one thread per line along dim (the iteration's dim has size 1), walking its indices in order */
    int64_t shape[DLP_MAX_NDIM], params[6];
    int itemsize = dlp_dtypes[t->dtype].itemsize, sizes[3] = {itemsize, 8, itemsize};
    check_on_device(L, index_at, d->dl.shape[dim], dim, what);
    dlp_Tensor *i64 = device_indices(L, index_at, inplace && dlp_overlaps(index, t), what);
    walk_strides(i64, -1, strides[1]);
    for (int i = 0; i < ndim; i++) shape[i] = i == dim ? (index->dl.shape[i] > 0) : index->dl.shape[i];
    params[0] = dlp_walk_stride(d, dim);
    params[1] = d->dl.shape[dim];
    params[2] = index->dl.shape[dim];
    params[3] = dlp_walk_stride(i64, dim);
    params[4] = src->dl.ndim ? dlp_walk_stride(src, dim) : 0;
    params[5] = 0;
    char *data[3] = {dlp_first_element(d), dlp_first_element(i64), dlp_first_element(src)};
    dlp_Tensor *tensors[3] = {d, i64, src};
    launch_index(L, size_kernel(scatter_kernels, itemsize), 3, ndim, shape, data,
                 (const int64_t(*)[DLP_MAX_NDIM])strides, tensors, sizes, params, what);
    lua_pushvalue(L, dest);
    return 1;
  }
  dlp_live(L, d, what);
  dlp_live(L, index, what);
  if (src) dlp_live(L, src, what);
  Pick p = {d->dl.shape[dim], dlp_walk_stride(d, dim), dlp_dtypes[t->dtype].itemsize, 0, 1, 0, 0, 0, 0, 0, NULL};
  char *data[3] = {dlp_first_element(d), dlp_first_element(index), src ? dlp_first_element(src) : (char *)value};
  walk_strides(index, -1, strides[1]);
  pick(L, &p, index->dtype, ndim, index->dl.shape, data, (const int64_t(*)[DLP_MAX_NDIM])strides,
       PICK_CHECK_FIRST, 1, dim, what);
  lua_pushvalue(L, dest);
  return 1;
}
static int l_scatter(lua_State *L) { return scatter(L, 0); }
static int l_scatter_(lua_State *L) { return scatter(L, 1); }

/* ---- nonzero, argwhere, count_nonzero, masked_select ---- */

/* How an element's truth is read: any nonzero byte, except that floats ignore their sign bits
 * (-0.0 is zero; NaN is true), either part of a complex. */
enum { TRUTH_BYTES, TRUTH_F16, TRUTH_F32, TRUTH_F64, TRUTH_C64, TRUTH_C128 };

static int truth_kind(int dtype) {
  switch (dtype) {
  case DLP_FLOAT16: case DLP_BFLOAT16: return TRUTH_F16;
  case DLP_FLOAT32: return TRUTH_F32;
  case DLP_FLOAT64: return TRUTH_F64;
  case DLP_COMPLEX64: return TRUTH_C64;
  case DLP_COMPLEX128: return TRUTH_C128;
  default: return TRUTH_BYTES;
  }
}

static inline int is_true(const char *p, int kind, int itemsize) {
  uint16_t h;
  uint32_t f[2];
  uint64_t g[2];
  switch (kind) {
  case TRUTH_F16: memcpy(&h, p, 2); return (h & 0x7fffu) != 0;
  case TRUTH_F32: memcpy(f, p, 4); return (f[0] & 0x7fffffffu) != 0;
  case TRUTH_F64: memcpy(g, p, 8); return (g[0] & 0x7fffffffffffffffu) != 0;
  case TRUTH_C64: memcpy(f, p, 8); return ((f[0] | f[1]) & 0x7fffffffu) != 0;
  case TRUTH_C128: memcpy(g, p, 16); return ((g[0] | g[1]) & 0x7fffffffffffffffu) != 0;
  default:
    for (int i = 0; i < itemsize; i++)
      if (p[i]) return 1;
    return 0;
  }
}

typedef struct Truth {
  int kind, itemsize;
  int64_t count;
  char *cursor; /* masked_select: where the next element goes (out_step bytes apart), room for `room` more */
  int64_t room;
  int out_itemsize;
  int64_t out_step;
} Truth;

/* data[0]: the elements whose truth is counted */
static void count_loop(void *ctx, char *const *data, const int64_t *steps, int64_t n) {
  Truth *c = ctx;
  const char *x = data[0];
  int64_t count = 0;
  for (int64_t i = 0; i < n; i++, x += steps[0]) count += is_true(x, c->kind, c->itemsize);
  c->count += count;
}

/* data[0]: an int64 count per output element (strided 0 along the counted dims), data[1] the elements */
static void count_into_loop(void *ctx, char *const *data, const int64_t *steps, int64_t n) {
  const Truth *c = ctx;
  char *o = data[0];
  const char *x = data[1];
  for (int64_t i = 0; i < n; i++, o += steps[0], x += steps[1]) {
    int64_t v;
    memcpy(&v, o, 8);
    v += is_true(x, c->kind, c->itemsize);
    memcpy(o, &v, 8);
  }
}

/* data[0]: the mask, data[1] the elements selected to the cursor */
static void select_loop(void *ctx, char *const *data, const int64_t *steps, int64_t n) {
  Truth *c = ctx;
  const char *m = data[0], *x = data[1];
  for (int64_t i = 0; i < n; i++, m += steps[0], x += steps[1])
    if (is_true(m, c->kind, c->itemsize) && c->room > 0) { /* a finalizer may have changed the mask */
      c->room--;
      copy_element(c->cursor, x, c->out_itemsize);
      c->cursor += c->out_step;
    }
}

static int64_t count_true(const dlp_Tensor *t, int ndim, const int64_t *shape, const int64_t *strides) {
  Truth c = {truth_kind(t->dtype), dlp_dtypes[t->dtype].itemsize, 0, NULL, 0, 0, 0};
  dlp_Iter it;
  char *data[1] = {dlp_first_element(t)};
  dlp_iter_init(&it, 1, ndim, shape, data, (const int64_t(*)[DLP_MAX_NDIM])strides, 1);
  dlp_iter_run(&it, count_loop, &c);
  return c.count;
}

/* ---- counting on CUDA devices (kernels.cu: truth flags, running sums, compaction) ---- */

static const char *truth_kernel(int dtype) {
  switch (dtype) {
  case DLP_FLOAT16: case DLP_BFLOAT16: return "dlp_truth_f16";
  case DLP_FLOAT32: return "dlp_truth_f32";
  case DLP_FLOAT64: return "dlp_truth_f64";
  case DLP_COMPLEX64: return "dlp_truth_c64";
  case DLP_COMPLEX128: return "dlp_truth_c128";
  default: break;
  }
  switch (dlp_dtypes[dtype].itemsize) {
  case 1: return "dlp_truth_b1";
  case 2: return "dlp_truth_b2";
  case 4: return "dlp_truth_b4";
  default: return "dlp_truth_b8";
  }
}

static const int64_t no_params[6] = {0, 0, 0, 0, 0, 0};

/* A new contiguous int64 tensor of `shape` on src's device, pushed: 1 where src (a CUDA tensor
 * walked with src_strides over shape) is true, else 0. */
static dlp_Tensor *truth_on_device(lua_State *L, dlp_Tensor *src, int ndim, const int64_t *shape,
                                   const int64_t *src_strides, const char *what) {
  int64_t strides[2][DLP_MAX_NDIM];
  dlp_Tensor *flags = dlp_tensor_new(L, DLP_INT64, 0, src->dl.device, ndim, shape, 0, what);
  int sizes[2] = {8, dlp_dtypes[src->dtype].itemsize};
  char *data[2] = {dlp_first_element(flags), dlp_first_element(src)};
  dlp_Tensor *tensors[2] = {flags, src};
  walk_strides(flags, -1, strides[0]);
  for (int i = 0; i < ndim; i++) strides[1][i] = src_strides[i];
  launch_index(L, truth_kernel(src->dtype), 2, ndim, shape, data, (const int64_t(*)[DLP_MAX_NDIM])strides, tensors,
               sizes, no_params, what);
  return flags;
}

#define SCAN_BLOCK 1024

/* The int64s of the contiguous CUDA tensor at idx made their running sums, in place: the sums of
 * blocks, scanned the same way, then each block from the sum of those before it. */
void dlp_scan_on_device(lua_State *L, int idx, const char *what) {
  dlp_Tensor *x = lua_touserdata(L, idx);
  int64_t n = dlp_numel(x), blocks = (n + SCAN_BLOCK - 1) / SCAN_BLOCK;
  int64_t strides[2][DLP_MAX_NDIM] = {{8}, {8}}, params[6] = {n, SCAN_BLOCK, 0, 0, 0, 0};
  int top = lua_gettop(L), sizes[2] = {8, 8};
  if (n == 0) return;
  dlp_Tensor *sums = dlp_tensor_new(L, DLP_INT64, 0, x->dl.device, 1, &blocks, 0, what);
  char *data[2] = {dlp_first_element(sums), dlp_first_element(x)};
  dlp_Tensor *tensors[2] = {sums, x};
  launch_index(L, "dlp_scan_sums", 2, 1, &blocks, data, (const int64_t(*)[DLP_MAX_NDIM])strides, tensors, sizes,
               params, what);
  if (blocks > 1) dlp_scan_on_device(L, top + 1, what);
  char *back[2] = {data[1], data[0]};
  dlp_Tensor *order[2] = {x, sums};
  launch_index(L, "dlp_scan_apply", 2, 1, &blocks, back, (const int64_t(*)[DLP_MAX_NDIM])strides, order, sizes,
               params, what);
  lua_settop(L, top);
}

/* The last int64 of the CUDA tensor at idx (not empty), read back (a synchronisation). */
int64_t dlp_last_on_device(lua_State *L, int idx, const char *what) {
  dlp_Tensor *x = lua_touserdata(L, idx);
  int top = lua_gettop(L);
  int64_t v;
  dlp_Tensor *last = dlp_view_new(L, idx, 0, what);
  dlp_view_move(L, last, dlp_numel(x) - 1, 1, what);
  dlp_tensor_seal(L, last, what);
  dlp_Tensor *copy = dlp_clone(L, top + 1, DLP_INT64, host, NULL, what);
  memcpy(&v, dlp_first_element(copy), 8);
  dlp_tensor_release(copy);
  dlp_tensor_release(last);
  lua_settop(L, top);
  return v;
}

/* nonzero and argwhere of the CUDA tensor at 1, pushed: the running sums of its truth flags give
 * each true element its row; the flat indices are put there, then turned into one column per
 * dim. */
static int nonzero_on_device(lua_State *L, int as_tuple, const char *what) {
  dlp_Tensor *t = lua_touserdata(L, 1);
  int ndim = t->dl.ndim, sizes[2] = {8, 8}, flags = lua_gettop(L) + 1;
  int64_t strides[2][DLP_MAX_NDIM], numel = dlp_numel(t), n = 0, shape[2];
  walk_strides(t, -1, strides[1]);
  truth_on_device(L, t, ndim, t->dl.shape, strides[1], what); /* flags */
  if (numel > 0) {
    dlp_scan_on_device(L, flags, what);
    n = dlp_last_on_device(L, flags, what);
  }
  dlp_Tensor *flat = dlp_tensor_new(L, DLP_INT64, 0, t->dl.device, 1, &n, 0, what); /* flags + 1 */
  dlp_Tensor *columns[DLP_MAX_NDIM];
  if (as_tuple) {
    lua_createtable(L, ndim, 0); /* flags + 2 */
    for (int i = 0; i < ndim; i++) {
      columns[i] = dlp_tensor_new(L, DLP_INT64, 0, t->dl.device, 1, &n, 0, what);
      lua_rawseti(L, flags + 2, i + 1);
    }
  } else {
    shape[0] = n;
    shape[1] = ndim;
    dlp_Tensor *r = dlp_tensor_new(L, DLP_INT64, 0, t->dl.device, 2, shape, 0, what); /* flags + 2 */
    for (int i = 0; i < ndim; i++) columns[i] = r;
  }
  if (n == 0) return 1;
  int64_t zero[2][DLP_MAX_NDIM] = {{0}, {8}};
  char *data[2] = {dlp_first_element(flat), dlp_first_element(lua_touserdata(L, flags))};
  dlp_Tensor *tensors[2] = {flat, lua_touserdata(L, flags)};
  launch_index(L, "dlp_compact", 2, 1, &numel, data, (const int64_t(*)[DLP_MAX_NDIM])zero, tensors, sizes, no_params,
               what);
  int64_t inner = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    int64_t params[6] = {inner, t->dl.shape[i], as_tuple ? 8 : 8 * (int64_t)ndim, 0, 0, 0};
    char *cdata[2] = {dlp_offset(dlp_first_element(columns[i]), as_tuple ? 0 : 8 * (int64_t)i),
                      dlp_first_element(flat)};
    dlp_Tensor *ctensors[2] = {columns[i], flat};
    launch_index(L, "dlp_unravel", 2, 1, &n, cdata, (const int64_t(*)[DLP_MAX_NDIM])zero, ctensors, sizes, params,
                 what);
    inner *= t->dl.shape[i];
  }
  return 1;
}

/* count_nonzero of the CUDA tensor t over the dims `counted`: its truth flags summed along one
 * counted dim after another (kept with size 1), then viewed without them unless keepdim; over
 * every dim without keepdim, the count read back as a Lua integer. */
static int count_on_device(lua_State *L, dlp_Tensor *t, const char *counted, int keepdim, int all, const char *what) {
  int ndim = t->dl.ndim, sizes[2] = {8, 8}, rdim = 0;
  int64_t shape[DLP_MAX_NDIM], strides[2][DLP_MAX_NDIM] = {{0}}, rshape[DLP_MAX_NDIM];
  walk_strides(t, -1, strides[1]);
  dlp_Tensor *cur = truth_on_device(L, t, ndim, t->dl.shape, strides[1], what);
  for (int i = 0; i < ndim; i++) shape[i] = t->dl.shape[i];
  for (int d = ndim - 1; d >= 0; d--) {
    if (!counted[d]) continue;
    int64_t params[6] = {dlp_walk_stride(cur, d), shape[d], 0, 0, 0, 0};
    shape[d] = 1;
    dlp_Tensor *sum = dlp_tensor_new(L, DLP_INT64, 0, t->dl.device, ndim, shape, 0, what);
    char *data[2] = {dlp_first_element(sum), dlp_first_element(cur)};
    dlp_Tensor *tensors[2] = {sum, cur};
    walk_strides(sum, -1, strides[0]);
    walk_strides(cur, d, strides[1]);
    launch_index(L, "dlp_sum_along", 2, ndim, shape, data, (const int64_t(*)[DLP_MAX_NDIM])strides, tensors, sizes,
                 params, what);
    cur = sum;
  }
  if (all && !keepdim) {
    lua_pushinteger(L, (lua_Integer)dlp_last_on_device(L, lua_gettop(L), what));
    return 1;
  }
  if (keepdim) return 1;
  for (int i = 0; i < ndim; i++)
    if (!counted[i]) rshape[rdim++] = shape[i];
  dlp_Tensor *v = dlp_view_new(L, lua_gettop(L), rdim, what);
  for (int i = 0; i < rdim; i++) v->dl.shape[i] = rshape[i];
  dlp_contiguous_strides(rdim, rshape, v->dl.strides);
  dlp_tensor_seal(L, v, what);
  return 1;
}

/* The options of nonzero (as_tuple, out) and argwhere (out), read raw (no Lua code runs); out,
 * when given, is pushed and its stack index returned (else 0). */
static int read_nonzero_options(lua_State *L, int arg, int *as_tuple, const char *what) {
  int out = 0;
  if (as_tuple) *as_tuple = 0;
  if (lua_isnoneornil(L, arg)) return 0;
  if (!lua_istable(L, arg))
    return luaL_argerror(L, arg, lua_pushfstring(L, "an options table expected, got %s", luaL_typename(L, arg)));
  lua_pushnil(L);
  while (lua_next(L, arg)) {
    size_t len = 0;
    const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &len) : NULL;
    if (!key) luaL_error(L, "%s: option names are strings, got a %s key", what, luaL_typename(L, -2));
    if (len == 3 && memcmp(key, "out", 3) == 0) {
      dlp_Tensor *o = dlp_tensor_test(L, -1);
      if (!o) luaL_error(L, "%s: out must be a tensor, got %s", what, luaL_typename(L, -1));
      if (!o->owner) luaL_error(L, "%s: out was released", what);
      out = 1;
    } else if (len == 8 && memcmp(key, "as_tuple", 8) == 0 && as_tuple) { /* nonzero only */
      if (!lua_isboolean(L, -1))
        luaL_error(L, "%s: as_tuple must be true or false, got %s", what, luaL_typename(L, -1));
      *as_tuple = lua_toboolean(L, -1);
    } else {
      luaL_error(L, "%s: unknown option %s", what, dlp_push_quoted(L, key, len));
    }
    lua_pop(L, 1);
  }
  if (!out) return 0;
  if (as_tuple && *as_tuple) luaL_error(L, "%s: out= takes the {n, ndim} result; as_tuple gives a table (drop one)", what);
  lua_pushliteral(L, "out");
  lua_rawget(L, arg);
  return lua_gettop(L);
}

/* nonzero(t [, opts]) and argwhere(t [, opts]): an int64 {n, ndim} tensor of the 1-based indices
 * of t's nonzero elements, row-major, or out= holding them (of that shape: the count is known
 * before anything is written); nonzero(t, {as_tuple = true}): a table of ndim 1-d tensors
 * (NumPy's). */
static int nonzero(lua_State *L, int argwhere) {
  const char *what = argwhere ? "argwhere" : "nonzero";
  int64_t strides[DLP_MAX_NDIM], shape[2];
  char *columns[DLP_MAX_NDIM];
  dlp_ComputeOptions o = {0};
  Result r;
  int as_tuple = 0;
  dlp_check_no_more(L, 3, what, "a tensor and an options table");
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  o.out = read_nonzero_options(L, 2, argwhere ? NULL : &as_tuple, what);
  dlp_Tensor *out = o.out ? lua_touserdata(L, o.out) : NULL, *operands[2] = {t, out};
  int gpu = dlp_compute_device(L, operands, 2, what);
  dlp_check_computes(L, t->dtype, what);
  int ndim = t->dl.ndim;
  if (as_tuple && ndim == 0) return luaL_error(L, "%s: as_tuple needs a tensor of at least one dim", what);
  if (out) lua_replace(L, 2); /* the stack: t, out (or nil) */
  lua_settop(L, 2);
  o.out = out ? 2 : 0;
  if (gpu >= 0) {
    nonzero_on_device(L, as_tuple, what); /* pushes its result */
    if (!out) return 1;
    dlp_Tensor *fresh = lua_touserdata(L, -1);
    dlp_check_out(L, out, DLP_INT64, fresh->dl.ndim, fresh->dl.shape, 0, what);
    dlp_copy(L, out, fresh, NULL, what);
    lua_pushvalue(L, 2);
    return 1;
  }
  const dlp_Tensor *a = dlp_tensor_alias(L, 1, host, what); /* 3: holds the memory from here on */
  walk_strides(a, -1, strides);
  int64_t n = count_true(a, ndim, a->dl.shape, strides), step;
  if (as_tuple) {
    lua_createtable(L, ndim, 0);
    for (int i = 0; i < ndim; i++) {
      dlp_Tensor *c = dlp_tensor_new(L, DLP_INT64, 0, host, 1, &n, 0, what);
      columns[i] = dlp_first_element(c);
      lua_rawseti(L, -2, i + 1);
    }
    step = 8;
  } else {
    shape[0] = n;
    shape[1] = ndim;
    dlp_Tensor *inputs[1] = {(dlp_Tensor *)a};
    result_begin(L, &r, &o, DLP_INT64, 2, shape, host, inputs, 1, what);
    dlp_live(L, r.into, what);
    for (int i = 0; i < ndim; i++) columns[i] = dlp_offset(dlp_first_element(r.into), dlp_walk_stride(r.into, 1) * i);
    step = dlp_walk_stride(r.into, 0);
  }
  /* row-major over t: an odometer of 1-based indices */
  int64_t at[DLP_MAX_NDIM];
  const char *p = dlp_first_element(a);
  int kind = truth_kind(a->dtype), itemsize = dlp_dtypes[a->dtype].itemsize;
  for (int i = 0; i < ndim; i++) at[i] = 1;
  /* bounded by the elements too: a finalizer run by the allocations may have changed them */
  int64_t found = 0, numel = dlp_numel(a);
  for (int64_t e = 0; e < numel && found < n; e++) {
    if (is_true(p, kind, itemsize)) {
      for (int i = 0; i < ndim; i++) {
        memcpy(columns[i], &at[i], 8);
        columns[i] += step;
      }
      found++;
    }
    for (int i = ndim - 1; i >= 0; i--) {
      p += strides[i];
      if (++at[i] <= a->dl.shape[i]) break;
      p -= strides[i] * a->dl.shape[i];
      at[i] = 1;
    }
  }
  if (!as_tuple) result_finish(L, &r, what);
  return 1;
}
static int l_nonzero(lua_State *L) { return nonzero(L, 0); }
static int l_argwhere(lua_State *L) { return nonzero(L, 1); }

/* The counts of t's true elements along the dims `counted` as a new int64 tensor of rshape
 * (rdim dims: the uncounted ones, and the counted ones as 1 when keepdim), pushed. */
static void count_into(lua_State *L, dlp_Tensor *t, const char *counted, int keepdim, int rdim,
                       const int64_t *rshape, const char *what) {
  int64_t strides[2][DLP_MAX_NDIM];
  int ndim = t->dl.ndim;
  dlp_Tensor *r = dlp_tensor_new(L, DLP_INT64, 0, host, rdim, rshape, DLP_ALLOC_ZEROED, what);
  dlp_live(L, t, what);
  for (int i = 0, k = 0; i < ndim; i++) { /* the result's strides on t's dims: 0 along the counted */
    if (counted[i] && !keepdim) {
      strides[0][i] = 0;
      continue;
    }
    strides[0][i] = counted[i] ? 0 : dlp_walk_stride(r, k);
    k++;
  }
  walk_strides(t, -1, strides[1]);
  Truth c = {truth_kind(t->dtype), dlp_dtypes[t->dtype].itemsize, 0, NULL, 0, 0, 0};
  char *data[2] = {dlp_first_element(r), dlp_first_element(t)};
  dlp_Iter it;
  dlp_iter_init(&it, 2, ndim, t->dl.shape, data, (const int64_t(*)[DLP_MAX_NDIM])strides, 1);
  dlp_iter_run(&it, count_into_loop, &c);
}

/* count_nonzero(t [, dim [, opts]]): over every dim a Lua integer; with dim (a number or a table
 * of them) an int64 tensor, keepdim as the reductions take it; with out= (of the result's shape:
 * 0-d over every dim) the counts are written there and out returned. */
static int l_count_nonzero(lua_State *L) {
  const char *what = "count_nonzero";
  dlp_ComputeOptions o;
  int64_t dims[DLP_MAX_NDIM], shape[DLP_MAX_NDIM], strides[DLP_MAX_NDIM];
  char counted[DLP_MAX_NDIM] = {0};
  dlp_check_no_more(L, 4, what, "a tensor, a dim and an options table");
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  int ndim = t->dl.ndim, ndims = -1;
  if (lua_istable(L, 2)) {
    ndims = dlp_check_integers(L, 2, dims, DLP_MAX_NDIM, INT64_MIN, "dim");
    lua_pushnil(L);
    if (ndims == 0 && lua_next(L, 2)) /* raw: the options in the place of dim */
      return luaL_argerror(L, 2, "dim is a table with no list entries (options go third)");
    lua_settop(L, 3);
  } else if (!lua_isnoneornil(L, 2)) {
    dims[0] = dlp_checkinteger(L, 2);
    ndims = 1;
  }
  dlp_read_compute_options(L, 3, DLP_COPT_KEEPDIM | DLP_COPT_OUT, &o, what);
  dlp_Tensor *out = o.out ? lua_touserdata(L, o.out) : NULL, *operands[2] = {t, out};
  int gpu = dlp_compute_device(L, operands, 2, what);
  dlp_check_computes(L, t->dtype, what);
  for (int k = 0; k < ndims; k++) {
    int64_t d = dims[k] < 0 ? dims[k] + ndim + 1 : dims[k];
    if (d < 1 || d > ndim)
      return luaL_error(L, "%s: dimension %I out of range (tensor has %d)", what, (lua_Integer)dims[k], ndim);
    if (counted[d - 1]) return luaL_error(L, "%s: dimension %I given twice", what, (lua_Integer)dims[k]);
    counted[d - 1] = 1;
  }
  for (int i = 0; i < ndim && ndims < 0; i++) counted[i] = 1;
  int rdim = 0;
  for (int i = 0; i < ndim; i++)
    if (!counted[i] || o.keepdim) shape[rdim++] = counted[i] ? 1 : t->dl.shape[i];
  if (out) { /* checked before the counting; the counts (few: one per result element) then copied in */
    dlp_check_out(L, out, DLP_INT64, rdim, shape, 0, what);
    if (gpu >= 0) count_on_device(L, t, counted, o.keepdim, 0, what);
    else count_into(L, t, counted, o.keepdim, rdim, shape, what);
    dlp_copy(L, out, lua_touserdata(L, -1), NULL, what);
    lua_pushvalue(L, o.out);
    return 1;
  }
  if (gpu >= 0) return count_on_device(L, t, counted, o.keepdim, ndims < 0, what);
  if (ndims < 0 && !o.keepdim) {
    dlp_live(L, t, what);
    walk_strides(t, -1, strides);
    lua_pushinteger(L, (lua_Integer)count_true(t, ndim, t->dl.shape, strides));
    return 1;
  }
  count_into(L, t, counted, o.keepdim, rdim, shape, what);
  return 1;
}

/* masked_select(t, mask [, opts]): the elements of t where mask (any dtype, nonzero is true; t
 * and mask broadcast together) is true, row-major, as a 1-d tensor; or out= holding them (of
 * that size: the count is known before anything is written). */
static int l_masked_select(lua_State *L) {
  const char *what = "masked_select";
  int64_t shape[DLP_MAX_NDIM], strides[2][DLP_MAX_NDIM], numel;
  dlp_ComputeOptions o;
  Result res;
  dlp_check_no_more(L, 4, what, "a tensor, a mask and an options table");
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  dlp_Tensor *mask = tensor_arg(L, 2, "mask", what);
  dlp_read_compute_options(L, 3, DLP_COPT_OUT, &o, what);
  dlp_Tensor *out = o.out ? lua_touserdata(L, o.out) : NULL, *operands[3] = {t, mask, out};
  int gpu = dlp_compute_device(L, operands, 3, what);
  dlp_check_computes(L, t->dtype, what);
  dlp_check_computes(L, mask->dtype, what);
  int ndim = dlp_broadcast_shapes(L, 2, (const dlp_Tensor *const *)operands, shape, what);
  if (!dlp_numel_of(ndim, shape, &numel))
    return luaL_error(L, "%s: the broadcast shape has more elements than fit in 64 bits", what);
  if (out) lua_replace(L, 3); /* the stack: t, mask, out (or nil) */
  lua_settop(L, 3);
  o.out = out ? 3 : 0;
  if (gpu >= 0) { /* the running sums of the mask's truth give each selected element its slot */
    int64_t n = 0, s3[3][DLP_MAX_NDIM];
    int itemsize = dlp_dtypes[t->dtype].itemsize, sizes[3] = {itemsize, 8, itemsize};
    dlp_broadcast_strides(mask, ndim, shape, strides[0]);
    dlp_Tensor *flags = truth_on_device(L, mask, ndim, shape, strides[0], what); /* 4 */
    if (numel > 0) {
      dlp_scan_on_device(L, 4, what);
      n = dlp_last_on_device(L, 4, what);
    }
    if (out) dlp_check_out(L, out, t->dtype, 1, &n, 0, what);
    dlp_Tensor *r = dlp_tensor_new(L, t->dtype, 0, t->dl.device, 1, &n, 0, what);
    static const char *const select_kernels[] = {"dlp_select_1", "dlp_select_2", "dlp_select_4", "dlp_select_8",
                                                 "dlp_select_16"};
    char *data[3] = {dlp_first_element(r), dlp_first_element(flags), dlp_first_element(t)};
    dlp_Tensor *tensors[3] = {r, flags, t};
    for (int i = 0; i < ndim; i++) s3[0][i] = 0;
    walk_strides(flags, -1, s3[1]);
    dlp_broadcast_strides(t, ndim, shape, s3[2]);
    if (n > 0)
      launch_index(L, size_kernel(select_kernels, itemsize), 3, ndim, shape, data,
                   (const int64_t(*)[DLP_MAX_NDIM])s3, tensors, sizes, no_params, what);
    if (!out) return 1;
    dlp_copy(L, out, r, NULL, what); /* the selection's kernel writes a contiguous result */
    lua_pushvalue(L, 3);
    return 1;
  }
  const dlp_Tensor *ta = dlp_tensor_alias(L, 1, host, what), *ma = dlp_tensor_alias(L, 2, host, what);
  dlp_broadcast_strides(ma, ndim, shape, strides[0]);
  dlp_broadcast_strides(ta, ndim, shape, strides[1]);
  int64_t n = count_true(ma, ndim, shape, strides[0]);
  dlp_Tensor *inputs[2] = {(dlp_Tensor *)ta, (dlp_Tensor *)ma};
  result_begin(L, &res, &o, t->dtype, 1, &n, host, inputs, 2, what);
  dlp_live(L, res.into, what);
  Truth c = {truth_kind(ma->dtype), dlp_dtypes[ma->dtype].itemsize, 0, dlp_first_element(res.into), n,
             dlp_dtypes[ta->dtype].itemsize, dlp_walk_stride(res.into, 0)};
  char *data[2] = {dlp_first_element(ma), dlp_first_element(ta)};
  dlp_Iter it;
  dlp_iter_init(&it, 2, ndim, shape, data, (const int64_t(*)[DLP_MAX_NDIM])strides, 0);
  if (n > 0) dlp_iter_run(&it, select_loop, &c);
  result_finish(L, &res, what);
  return 1;
}

void dlp_index_register(lua_State *L, int module, int methods, int meta) {
  static const luaL_Reg functions[] = {
    {"nonzero", l_nonzero}, {"argwhere", l_argwhere}, {"count_nonzero", l_count_nonzero},
    {"masked_select", l_masked_select}, {"index_select", l_index_select}, {"gather", l_gather},
    {"scatter", l_scatter}, {"take", l_take}, {NULL, NULL},
  };
  static const luaL_Reg method_list[] = {
    {"nonzero", l_nonzero}, {"argwhere", l_argwhere}, {"count_nonzero", l_count_nonzero},
    {"masked_select", l_masked_select}, {"index_select", l_index_select}, {"gather", l_gather},
    {"scatter", l_scatter}, {"scatter_", l_scatter_}, {"take", l_take}, {NULL, NULL},
  };
  (void)meta;
  dlp_register(L, module, functions);
  dlp_register(L, methods, method_list);
}
