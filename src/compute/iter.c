/* The iteration engine of the computing functions, after NumPy's ufunc loops and PyTorch's
 * TensorIterator: operands broadcast to one shape, size-1 dimensions dropped, the dimensions
 * ordered by how fast the first operand steps through them, and dimensions contiguous in every
 * operand merged, so that a contiguous operation becomes one long row and an inner loop the
 * compiler vectorises does all the work. Elementwise ops, reductions (the output strided 0 along
 * the reduced dimensions) and selection share it. */
#include <string.h>

#include "internal.h"

int dlp_broadcast_shapes(lua_State *L, int n, const dlp_Tensor *const *tensors, int64_t *shape, const char *what) {
  int ndim = 0, same = n > 0;
  for (int k = 1; k < n && same; k++) { /* the common case first: one shape (small calls notice the rest) */
    same = tensors[k]->dl.ndim == tensors[0]->dl.ndim;
    for (int i = 0; same && i < tensors[0]->dl.ndim; i++) same = tensors[k]->dl.shape[i] == tensors[0]->dl.shape[i];
  }
  if (same) {
    for (int i = 0; i < tensors[0]->dl.ndim; i++) shape[i] = tensors[0]->dl.shape[i];
    return tensors[0]->dl.ndim;
  }
  for (int k = 0; k < n; k++)
    if (tensors[k]->dl.ndim > ndim) ndim = tensors[k]->dl.ndim;
  for (int i = 0; i < ndim; i++) shape[i] = 1;
  for (int k = 0; k < n; k++) {
    const dlp_Tensor *t = tensors[k];
    int shift = ndim - t->dl.ndim;
    for (int i = 0; i < t->dl.ndim; i++) {
      int64_t size = t->dl.shape[i], *have = &shape[shift + i];
      if (size == *have || size == 1) continue;
      if (*have == 1) {
        *have = size;
        continue;
      }
      /* name the two shapes that do not broadcast: this one and the first with another size there */
      for (int j = 0; j < k; j++) {
        int at = tensors[j]->dl.ndim - (ndim - shift - i);
        if (at >= 0 && tensors[j]->dl.shape[at] != 1) {
          const char *first = dlp_push_shape(L, tensors[j]->dl.ndim, tensors[j]->dl.shape);
          luaL_error(L, "%s: shapes %s and %s do not broadcast", what, first,
                     dlp_push_shape(L, t->dl.ndim, t->dl.shape));
        }
      }
    }
  }
  return ndim;
}

void dlp_broadcast_strides(const dlp_Tensor *t, int ndim, const int64_t *shape, int64_t *strides) {
  int shift = ndim - t->dl.ndim;
  int64_t itemsize = dlp_dtypes[t->dtype].itemsize, empty = dlp_numel(t) == 0;
  for (int i = 0; i < ndim; i++) { /* dlp_walk_stride's, with t's element count found once */
    int j = i - shift;
    strides[i] = j < 0 || t->dl.shape[j] != shape[i] || t->dl.shape[j] <= 1 || empty ? 0 : t->dl.strides[j] * itemsize;
  }
}

void dlp_iter_init(dlp_Iter *it, int nops, int ndim, const int64_t *shape, char *const *data,
                   const int64_t (*strides)[DLP_MAX_NDIM], int reorder) {
  int order[DLP_MAX_NDIM], k = 0;
  it->nops = nops;
  it->numel = 1;
  for (int op = 0; op < nops; op++) it->data[op] = data[op];
  for (int i = 0; i < ndim; i++)
    if (shape[i] == 0) { /* before multiplying: an empty shape's other sizes may be anything */
      it->numel = 0;
      it->ndim = 0;
      return;
    }
  for (int i = 0; i < ndim; i++) {
    it->numel *= shape[i]; /* fits: the caller's shapes are checked tensors' */
    if (shape[i] > 1) order[k++] = i;
  }
  /* innermost last: a stable insertion sort, outermost first, by the first operand's stride and
   * then the others' (an operand that steps 0 along a dimension does not decide its place) */
  if (reorder) {
    for (int a = 1; a < k; a++) {
      int d = order[a], b = a;
      while (b > 0) {
        int e = order[b - 1], outer = 0, decided = 0;
        for (int op = 0; op < nops && !decided; op++) {
          int64_t sd = dlp_magnitude(strides[op][d]), se = dlp_magnitude(strides[op][e]);
          if (sd == 0 || se == 0 || sd == se) continue;
          decided = 1;
          outer = sd > se; /* d should come before e */
        }
        if (!outer) break;
        order[b] = e;
        b--;
      }
      order[b] = d;
    }
  }
  /* merge a dimension into the next one inwards when every operand steps over it exactly */
  int n = 0;
  for (int a = 0; a < k; a++) {
    int d = order[a];
    if (n > 0) {
      int merge = 1;
      for (int op = 0; op < nops && merge; op++) {
        int64_t span;
        merge = dlp_mul(strides[op][d], shape[d], &span) && span == it->strides[op][n - 1];
      }
      if (merge) {
        it->shape[n - 1] *= shape[d];
        for (int op = 0; op < nops; op++) it->strides[op][n - 1] = strides[op][d];
        continue;
      }
    }
    it->shape[n] = shape[d];
    for (int op = 0; op < nops; op++) it->strides[op][n] = strides[op][d];
    n++;
  }
  it->ndim = n;
}

/* What dlp_iter_init makes of a walk that is one row of n elements, each operand stepping by
 * steps[op] bytes, made without the work of finding that out (the caller knows it). */
void dlp_iter_init_row(dlp_Iter *it, int nops, int64_t n, char *const *data, const int64_t *steps) {
  it->nops = nops;
  it->numel = n;
  it->ndim = n > 1; /* one element is a walk of no dimensions, as dlp_iter_init drops size 1 */
  it->shape[0] = n;
  for (int op = 0; op < nops; op++) {
    it->data[op] = data[op];
    it->strides[op][0] = steps[op];
  }
}

void dlp_iter_run(const dlp_Iter *it, dlp_IterLoop loop, void *ctx) {
  char *ptr[DLP_ITER_MAX_OPS];
  int64_t index[DLP_MAX_NDIM], steps[DLP_ITER_MAX_OPS];
  int nops = it->nops, inner = it->ndim - 1;
  if (it->numel == 0) return;
  for (int op = 0; op < nops; op++) ptr[op] = it->data[op];
  if (it->ndim == 0) { /* one element */
    for (int op = 0; op < nops; op++) steps[op] = 0;
    loop(ctx, ptr, steps, 1);
    return;
  }
  for (int op = 0; op < nops; op++) steps[op] = it->strides[op][inner];
  for (int i = 0; i < inner; i++) index[i] = 0;
  for (;;) {
    loop(ctx, ptr, steps, it->shape[inner]);
    int i = inner - 1;
    for (; i >= 0; i--) { /* the odometer: step dimension i, or wrap it and carry outwards */
      for (int op = 0; op < nops; op++) ptr[op] = dlp_offset(ptr[op], it->strides[op][i]);
      if (++index[i] < it->shape[i]) break;
      for (int op = 0; op < nops; op++) ptr[op] = dlp_offset(ptr[op], -it->strides[op][i] * it->shape[i]);
      index[i] = 0;
    }
    if (i < 0) return;
  }
}

/* Elements [start, end) of the walk in row-major order of its dimensions: the odometer started at
 * start's index, the first and last rows cut short. */
void dlp_iter_run_range(const dlp_Iter *it, int64_t start, int64_t end, dlp_IterLoop loop, void *ctx) {
  char *row[DLP_ITER_MAX_OPS], *ptr[DLP_ITER_MAX_OPS];
  int64_t index[DLP_MAX_NDIM], steps[DLP_ITER_MAX_OPS];
  int nops = it->nops, inner = it->ndim - 1;
  int64_t rest = start;
  for (int i = inner; i >= 0; i--) {
    index[i] = rest % it->shape[i];
    rest /= it->shape[i];
  }
  for (int op = 0; op < nops; op++) {
    row[op] = it->data[op];
    for (int i = 0; i < inner; i++) row[op] = dlp_offset(row[op], index[i] * it->strides[op][i]);
    steps[op] = it->strides[op][inner];
  }
  int64_t col = index[inner], at = start;
  for (;;) {
    int64_t n = it->shape[inner] - col < end - at ? it->shape[inner] - col : end - at;
    for (int op = 0; op < nops; op++) ptr[op] = dlp_offset(row[op], col * steps[op]);
    loop(ctx, ptr, steps, n);
    at += n;
    if (at >= end) return;
    col = 0;
    for (int i = inner - 1; i >= 0; i--) { /* the odometer, as dlp_iter_run's */
      for (int op = 0; op < nops; op++) row[op] = dlp_offset(row[op], it->strides[op][i]);
      if (++index[i] < it->shape[i]) break;
      for (int op = 0; op < nops; op++) row[op] = dlp_offset(row[op], -it->strides[op][i] * it->shape[i]);
      index[i] = 0;
    }
  }
}

int dlp_writes_each_byte_once(int ndim, const int64_t *shape, const int64_t *strides, int64_t itemsize) {
  int64_t stride[DLP_MAX_NDIM], size[DLP_MAX_NDIM], extent = itemsize;
  for (int i = 0; i < ndim; i++) { /* insertion sort by stride, smallest first */
    int64_t s = dlp_magnitude(strides[i]), z = shape[i];
    int j = i;
    for (; j > 0 && stride[j - 1] > s; j--) stride[j] = stride[j - 1], size[j] = size[j - 1];
    stride[j] = s, size[j] = z;
  }
  for (int i = 0; i < ndim; i++) {
    int64_t span;
    if (stride[i] < extent || !dlp_mul(stride[i], size[i] - 1, &span) || span > INT64_MAX - extent) return 0;
    extent += span;
  }
  return 1;
}

/* Whether operand 0 writes no byte twice. */
static int writes_each_byte_once(const dlp_Iter *it, int64_t itemsize) {
  return dlp_writes_each_byte_once(it->ndim, it->shape, it->strides[0], itemsize);
}

typedef struct RangeTasks {
  const dlp_Iter *it;
  dlp_IterLoop loop;
  char *ctx;
  size_t ctx_size; /* 0: the tasks share ctx; else task i has ctx + i * ctx_size */
  int64_t chunk;   /* elements per task, the last one's fewer */
} RangeTasks;

static void range_task(void *ctx, int64_t i) {
  const RangeTasks *r = ctx;
  int64_t start = i * r->chunk, end = r->it->numel - start < r->chunk ? r->it->numel : start + r->chunk;
  dlp_iter_run_range(r->it, start, end, r->loop, r->ctx + (size_t)i * r->ctx_size);
}

int64_t dlp_iter_split(const dlp_Iter *it, int64_t max_tasks, int64_t out_itemsize) {
  if (it->numel < 2 * DLP_TASK_ELEMENTS || it->ndim == 0 || max_tasks < 2 ||
      (out_itemsize && !writes_each_byte_once(it, out_itemsize)) || !dlp_parallel_enabled())
    return 0;
  int64_t tasks = it->numel / DLP_TASK_ELEMENTS;
  return tasks < max_tasks ? tasks : max_tasks;
}

void dlp_iter_run_tasks(const dlp_Iter *it, int64_t tasks, dlp_IterLoop loop, void *ctxs, size_t ctx_size) {
  RangeTasks r = {it, loop, ctxs, ctx_size, (it->numel + tasks - 1) / tasks};
  dlp_parallel_for((it->numel + r.chunk - 1) / r.chunk, range_task, &r);
}

void dlp_iter_run_parallel(const dlp_Iter *it, dlp_IterLoop loop, void *ctx, int64_t out_itemsize, int64_t align) {
  if (it->numel < 2 * DLP_TASK_ELEMENTS || it->ndim == 0 || !dlp_parallel_enabled() ||
      !writes_each_byte_once(it, out_itemsize)) {
    dlp_iter_run(it, loop, ctx);
    return;
  }
  /* tasks of at least DLP_TASK_ELEMENTS, at most 256 of them, a multiple of align long (which
   * divides the innermost size, so each task starts at one) */
  int64_t chunk = it->numel / 256 > DLP_TASK_ELEMENTS ? it->numel / 256 : DLP_TASK_ELEMENTS;
  chunk = (chunk + align - 1) / align * align;
  RangeTasks r = {it, loop, ctx, 0, chunk};
  dlp_parallel_for((it->numel + chunk - 1) / chunk, range_task, &r);
}

void dlp_iter_run_slice(const dlp_Iter *it, int dim, int64_t lo, int64_t hi, dlp_IterLoop loop, void *ctx) {
  dlp_Iter part = *it;
  part.shape[dim] = hi - lo;
  part.numel = it->numel / it->shape[dim] * (hi - lo);
  for (int op = 0; op < it->nops; op++) part.data[op] = dlp_offset(it->data[op], lo * it->strides[op][dim]);
  dlp_iter_run(&part, loop, ctx);
}

/* Lines along one dimension: the engine walks the operands with that dimension's size set to 1,
 * and each element it visits starts a line (line functions: sort, scans, softmax). */
typedef struct LineWalk {
  dlp_LineFn fn;
  void *ctx;
  int nops;
  char *scratch; /* the part's own */
} LineWalk;

static void line_loop(void *ctx, char *const *data, const int64_t *steps, int64_t n) {
  const LineWalk *w = ctx;
  char *p[DLP_ITER_MAX_OPS];
  for (int64_t i = 0; i < n; i++) {
    for (int op = 0; op < w->nops; op++) p[op] = data[op] + i * steps[op];
    w->fn(w->ctx, p, w->scratch);
  }
}

/* Parts of whole lines: each at least a task's worth of elements, and one per thread of the pool
 * at most (8 under a host's job system): each part has a scratch of a line or more, so the
 * scratch grows with the threads, not with the tensor. Every line is computed alone, so how they
 * split changes no bit. */
#define HOST_LINE_PARTS 8
int64_t dlp_line_parts(const dlp_Tensor *t, int dim) {
  int64_t numel = dlp_numel(t), n = t->dl.shape[dim];
  if (numel < 2 * DLP_TASK_ELEMENTS || n == numel || !dlp_parallel_enabled()) return 1;
  int64_t lines = numel / n, least = (DLP_TASK_ELEMENTS + n - 1) / n; /* lines in a task's worth */
  int64_t parts = (lines + least - 1) / least, width = dlp_parallel_width();
  if (width <= 0) width = HOST_LINE_PARTS;
  return parts < width ? parts : width;
}

typedef struct LineParts {
  const dlp_Iter *it;
  LineWalk walk;
  int64_t per; /* lines per part, the last one's fewer */
  size_t scratch_bytes;
} LineParts;

static void line_part(void *ctx, int64_t i) {
  const LineParts *lp = ctx;
  LineWalk w = lp->walk;
  if (w.scratch) w.scratch += (size_t)i * lp->scratch_bytes;
  int64_t start = i * lp->per, end = lp->it->numel - start < lp->per ? lp->it->numel : start + lp->per;
  dlp_iter_run_range(lp->it, start, end, line_loop, &w);
}

void dlp_each_line(int nops, const dlp_Tensor *const *t, int dim, dlp_LineFn fn, void *ctx, int64_t parts,
                   char *scratch, size_t scratch_bytes) {
  int64_t shape[DLP_MAX_NDIM], st[DLP_ITER_MAX_OPS][DLP_MAX_NDIM];
  char *data[DLP_ITER_MAX_OPS];
  int ndim = t[0]->dl.ndim;
  for (int i = 0; i < ndim; i++) {
    shape[i] = i == dim ? 1 : t[0]->dl.shape[i];
    for (int op = 0; op < nops; op++) st[op][i] = dlp_walk_stride(t[op], i);
  }
  for (int op = 0; op < nops; op++) data[op] = dlp_first_element(t[op]);
  LineWalk w = {fn, ctx, nops, scratch};
  dlp_Iter it;
  dlp_iter_init(&it, nops, ndim, shape, data, (const int64_t(*)[DLP_MAX_NDIM])st, 1);
  if (parts < 2 || it.numel < 2) {
    dlp_iter_run(&it, line_loop, &w);
    return;
  }
  /* as many parts as were asked for at most (their scratch is there), each of whole lines */
  LineParts lp = {&it, w, (it.numel + parts - 1) / parts, scratch_bytes};
  dlp_parallel_for((it.numel + lp.per - 1) / lp.per, line_part, &lp);
}
