/* Views: new shapes and strides over the same memory; nothing here copies elements
 * except reshape of a non-contiguous tensor and flatten/ravel of dimensions that do not merge. Views work on every device: they only
 * change metadata, and move the first element through dlp_view_move. Each method reads
 * its arguments first, then makes the view (dlp_view_new checks the source is still
 * live after allocating), computes with checked arithmetic, and seals it. */
#include <string.h>

#include "internal.h"

/* Elements of packed sub-byte dtypes (fp4, fp6) have no byte address of their own. */
static dlp_Tensor *check_viewable(lua_State *L, const char *what) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  if (dlp_is_packed(t->dtype, t->flags))
    luaL_error(L, "%s: views of packed %s tensors are not supported", what, dlp_dtypes[t->dtype].name);
  return t;
}

/* A view of the tensor at 1 with the same dimensions, to be edited. */
static dlp_Tensor *same_view(lua_State *L, const dlp_Tensor *t, const char *what) {
  return dlp_tensor_alias(L, 1, t->dl.device, what);
}

/* Read a shape at arg (a table or numbers) where one entry may be -1, for `numel` elements; no
 * argument may follow it. */
static int infer_shape(lua_State *L, int arg, int64_t numel, int64_t *shape, const char *what) {
  int unknown = -1, next;
  int64_t known = 1;
  int ndim = dlp_check_integer_args(L, arg, shape, DLP_MAX_NDIM, -1, "shape", &next);
  dlp_check_no_more(L, next, what, "a shape (a table or sizes)");
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == -1) {
      if (unknown >= 0) luaL_argerror(L, arg, "only one dimension can be -1");
      unknown = i;
    } else if (!dlp_mul(known, shape[i], &known)) {
      luaL_argerror(L, arg, "shape has more elements than fit in 64 bits");
    }
  }
  if (unknown >= 0) {
    if (known == 0 || numel % known != 0)
      luaL_argerror(L, arg, lua_pushfstring(L, "cannot infer the -1 dimension for %I elements", (lua_Integer)numel));
    shape[unknown] = numel / known;
    known = numel;
  }
  if (known != numel)
    luaL_argerror(L, arg, lua_pushfstring(L, "shape has %I elements, the tensor %I", (lua_Integer)known,
                                          (lua_Integer)numel));
  return ndim;
}

/* A contiguous view of the tensor at idx with the given shape (same number of elements). */
static void push_reshaped(lua_State *L, int idx, int ndim, const int64_t *shape, const char *what) {
  dlp_Tensor *v = dlp_view_new(L, idx, ndim, what);
  memcpy(v->dl.shape, shape, (size_t)ndim * sizeof(int64_t));
  dlp_contiguous_strides(ndim, shape, v->dl.strides);
  dlp_tensor_seal(L, v, what);
}

static int l_view(lua_State *L) {
  int64_t shape[DLP_MAX_NDIM];
  dlp_Tensor *t = check_viewable(L, "view");
  int ndim = infer_shape(L, 2, dlp_numel(t), shape, "view");
  if (!dlp_is_contiguous(t))
    return luaL_error(L, "view: the tensor is not contiguous (use reshape, or contiguous() first)");
  push_reshaped(L, 1, ndim, shape, "view");
  return 1;
}

static int l_reshape(lua_State *L) {
  int64_t shape[DLP_MAX_NDIM];
  dlp_Tensor *t = check_viewable(L, "reshape");
  int ndim = infer_shape(L, 2, dlp_numel(t), shape, "reshape");
  int source = 1;
  if (!dlp_is_contiguous(t)) { /* a contiguous copy on t's device (CUDA: a kernel) */
    lua_settop(L, 2);
    dlp_clone(L, 1, t->dtype, t->dl.device, NULL, "reshape");
    source = 3;
  }
  push_reshaped(L, source, ndim, shape, "reshape");
  return 1;
}

static int l_transpose(lua_State *L) {
  dlp_Tensor *t = check_viewable(L, "transpose");
  int a = dlp_check_dim(L, 2, t->dl.ndim, 0), b = dlp_check_dim(L, 3, t->dl.ndim, 0);
  dlp_Tensor *v = same_view(L, t, "transpose");
  v->dl.shape[a] = t->dl.shape[b];
  v->dl.shape[b] = t->dl.shape[a];
  v->dl.strides[a] = t->dl.strides[b];
  v->dl.strides[b] = t->dl.strides[a];
  return 1;
}

static int l_permute(lua_State *L) {
  int64_t perm[DLP_MAX_NDIM];
  int seen[DLP_MAX_NDIM] = {0};
  dlp_Tensor *t = check_viewable(L, "permute");
  int next, n = dlp_check_integer_args(L, 2, perm, DLP_MAX_NDIM, INT64_MIN, "permutation", &next);
  dlp_check_no_more(L, next, "permute", "a permutation (a table or dimensions)");
  if (n != t->dl.ndim) return luaL_argerror(L, 2, lua_pushfstring(L, "expected %d dimensions", t->dl.ndim));
  for (int i = 0; i < n; i++) {
    int64_t d = perm[i] < 0 ? perm[i] + n + 1 : perm[i];
    if (d < 1 || d > n)
      return luaL_argerror(L, 2, lua_pushfstring(L, "entry %d is not a dimension of a %d-d tensor", i + 1, n));
    perm[i] = d - 1;
    if (seen[d - 1]++) return luaL_argerror(L, 2, "not a permutation (a dimension repeats)");
  }
  dlp_Tensor *v = dlp_view_new(L, 1, n, "permute");
  for (int i = 0; i < n; i++) {
    v->dl.shape[i] = t->dl.shape[perm[i]];
    v->dl.strides[i] = t->dl.strides[perm[i]];
  }
  return 1;
}

static int l_narrow(lua_State *L) {
  dlp_Tensor *t = check_viewable(L, "narrow");
  int d = dlp_check_dim(L, 2, t->dl.ndim, 0);
  int64_t size = t->dl.shape[d];
  lua_Integer start = dlp_checkinteger(L, 3), length = dlp_checkinteger(L, 4);
  /* start may be size + 1 when length is 0; size may be 2^63 - 1 (when another size is 0), so
   * size + 1 is never formed */
  if (start < 0) start = size + (start + 1);
  if (length < 0 || start < 1 || start - 1 > size || length > size - (start - 1))
    return luaL_argerror(L, 3, lua_pushfstring(L, "start %I, length %I out of range for dimension %d of size %I",
                                              dlp_checkinteger(L, 3), length, d + 1, (lua_Integer)size));
  dlp_Tensor *v = same_view(L, t, "narrow");
  v->dl.shape[d] = length;
  dlp_view_move(L, v, start - 1, t->dl.strides[d], "narrow");
  dlp_tensor_seal(L, v, "narrow");
  return 1;
}

static int l_select(lua_State *L) {
  dlp_Tensor *t = check_viewable(L, "select");
  int d = dlp_check_dim(L, 2, t->dl.ndim, 0);
  int64_t i = dlp_check_index(L, 3, t->dl.shape[d]);
  dlp_Tensor *v = dlp_view_new(L, 1, t->dl.ndim - 1, "select");
  for (int k = 0, j = 0; k < t->dl.ndim; k++) {
    if (k == d) continue;
    v->dl.shape[j] = t->dl.shape[k];
    v->dl.strides[j++] = t->dl.strides[k];
  }
  dlp_view_move(L, v, i, t->dl.strides[d], "select");
  dlp_tensor_seal(L, v, "select");
  return 1;
}

/* slice(dim, first, last [, step]): inclusive bounds as string.sub; negative step walks back. */
static int l_slice(lua_State *L) {
  dlp_Tensor *t = check_viewable(L, "slice");
  int d = dlp_check_dim(L, 2, t->dl.ndim, 0);
  int64_t size = t->dl.shape[d], count, stride = t->dl.strides[d];
  lua_Integer first = dlp_checkinteger(L, 3), last = dlp_checkinteger(L, 4);
  lua_Integer step = dlp_optinteger(L, 5, 1);
  if (step == 0) return luaL_argerror(L, 5, "step must not be 0");
  /* size may be 2^63 - 1 (when another size is 0): size + 1 is never formed */
  if (first < 0) first = size + (first + 1);
  if (last < 0) last = size + (last + 1);
  if (step > 0 ? first > last : first < last) {
    /* empty: bounds may sit one past either end, as string.sub allows */
    if (first < 0 || first - 1 > size || last < 0 || last - 1 > size)
      return luaL_argerror(L, 3, lua_pushfstring(L, "bounds %I, %I out of range for size %I", dlp_checkinteger(L, 3),
                                                dlp_checkinteger(L, 4), (lua_Integer)size));
    count = 0;
  } else {
    if (first < 1 || first > size || last < 1 || last > size)
      return luaL_argerror(L, 3, lua_pushfstring(L, "bounds %I, %I out of range for size %I", dlp_checkinteger(L, 3),
                                                dlp_checkinteger(L, 4), (lua_Integer)size));
    /* |last - first| < size; a step of any size (math.mininteger too) divides it safely */
    int64_t distance = step > 0 ? last - first : first - last;
    count = step > 0 ? distance / step + 1 : (step < -distance ? 1 : distance / -step + 1);
    /* the new stride matters only when there are two elements or more (and t has elements: an
     * empty tensor's strides may be anything) */
    if (count > 1 && dlp_numel(t) > 0 && !dlp_mul(stride, step, &stride))
      return luaL_argerror(L, 5, lua_pushfstring(L, "step %I makes a stride beyond 64 bits", step));
  }
  dlp_Tensor *v = same_view(L, t, "slice");
  v->dl.shape[d] = count;
  v->dl.strides[d] = stride;
  dlp_view_move(L, v, first - 1, t->dl.strides[d], "slice");
  dlp_tensor_seal(L, v, "slice");
  return 1;
}

static int l_squeeze(lua_State *L) {
  dlp_check_no_more(L, 3, "squeeze", "at most a dimension");
  dlp_Tensor *t = check_viewable(L, "squeeze");
  int only = lua_isnoneornil(L, 2) ? -1 : dlp_check_dim(L, 2, t->dl.ndim, 0);
  int ndim = 0;
  for (int k = 0; k < t->dl.ndim; k++)
    if (!(t->dl.shape[k] == 1 && (only < 0 || only == k))) ndim++;
  dlp_Tensor *v = dlp_view_new(L, 1, ndim, "squeeze");
  for (int k = 0, j = 0; k < t->dl.ndim; k++) {
    if (t->dl.shape[k] == 1 && (only < 0 || only == k)) continue;
    v->dl.shape[j] = t->dl.shape[k];
    v->dl.strides[j++] = t->dl.strides[k];
  }
  return 1;
}

static int l_unsqueeze(lua_State *L) {
  dlp_Tensor *t = check_viewable(L, "unsqueeze");
  int d = dlp_check_dim(L, 2, t->dl.ndim, 1);
  if (t->dl.ndim >= DLP_MAX_NDIM) return luaL_error(L, "unsqueeze: already %d dimensions", DLP_MAX_NDIM);
  dlp_Tensor *v = dlp_view_new(L, 1, t->dl.ndim + 1, "unsqueeze");
  for (int k = 0, j = 0; k <= t->dl.ndim; k++) {
    if (k == d) {
      /* a size-1 dimension's stride says nothing; PyTorch's choice when it fits, else 1 */
      int64_t stride = 1;
      if (d < t->dl.ndim && !dlp_mul(t->dl.strides[d], t->dl.shape[d], &stride)) stride = 1;
      v->dl.shape[k] = 1;
      v->dl.strides[k] = stride;
    } else {
      v->dl.shape[k] = t->dl.shape[j];
      v->dl.strides[k] = t->dl.strides[j++];
    }
  }
  return 1;
}

/* expand(shape): size-1 dimensions (and new leading ones) repeat with stride 0; -1 keeps a size. */
static int l_expand(lua_State *L) {
  int64_t want[DLP_MAX_NDIM], numel;
  dlp_Tensor *t = check_viewable(L, "expand");
  int next, ndim = dlp_check_integer_args(L, 2, want, DLP_MAX_NDIM, -1, "shape", &next);
  dlp_check_no_more(L, next, "expand", "a shape (a table or sizes)");
  if (ndim < t->dl.ndim)
    return luaL_argerror(L, 2, lua_pushfstring(L, "expected %d to %d sizes", t->dl.ndim, DLP_MAX_NDIM));
  int lead = ndim - t->dl.ndim;
  for (int k = 0; k < ndim; k++) {
    int64_t have = k < lead ? 1 : t->dl.shape[k - lead];
    if (want[k] == -1) {
      if (k < lead) return luaL_argerror(L, 2, lua_pushfstring(L, "shape[%d] is new and cannot be -1", k + 1));
      want[k] = have;
    }
    if (want[k] != have && have != 1)
      return luaL_argerror(L, 2, lua_pushfstring(L, "cannot expand dimension %d from %I to %I", k + 1,
                                                 (lua_Integer)have, (lua_Integer)want[k]));
  }
  if (!dlp_numel_of(ndim, want, &numel))
    return luaL_argerror(L, 2, "the expanded tensor would have more elements than fit in 64 bits");
  dlp_Tensor *v = dlp_view_new(L, 1, ndim, "expand");
  for (int k = 0; k < ndim; k++) {
    int64_t have = k < lead ? 1 : t->dl.shape[k - lead];
    v->dl.shape[k] = want[k];
    v->dl.strides[k] = want[k] != have || k < lead ? 0 : t->dl.strides[k - lead];
  }
  dlp_tensor_seal(L, v, "expand");
  return 1;
}

static int l_as_readonly(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  dlp_Tensor *v = same_view(L, t, "as_readonly");
  v->flags |= DLP_FLAG_READ_ONLY;
  return 1;
}

/* flip(dims): dims a dimension, a table of them, or nil for all (NumPy's flip); each flipped
 * dimension is walked backwards: its stride negated, the first element its last one. */
static int flip(lua_State *L, const char *what) {
  int64_t dims[DLP_MAX_NDIM];
  int flipped[DLP_MAX_NDIM] = {0};
  dlp_check_no_more(L, 3, what, "a dimension or a table of dimensions");
  dlp_Tensor *t = check_viewable(L, what);
  int ndim = t->dl.ndim;
  if (lua_isnoneornil(L, 2)) {
    for (int d = 0; d < ndim; d++) flipped[d] = 1;
  } else if (lua_type(L, 2) == LUA_TNUMBER) {
    flipped[dlp_check_dim(L, 2, ndim, 0)] = 1;
  } else {
    if (!lua_istable(L, 2))
      return luaL_argerror(L, 2, lua_pushfstring(L, "a dimension or a table of dimensions expected, got %s",
                                                 luaL_typename(L, 2)));
    int n = dlp_check_integers(L, 2, dims, DLP_MAX_NDIM, INT64_MIN, "dims");
    for (int i = 0; i < n; i++) {
      int64_t d = dims[i] < 0 ? dims[i] + ndim + 1 : dims[i];
      if (d < 1 || d > ndim)
        return luaL_argerror(L, 2, lua_pushfstring(L, "dims[%d] is not a dimension of a %d-d tensor", i + 1, ndim));
      if (flipped[d - 1]++)
        return luaL_argerror(L, 2, lua_pushfstring(L, "dimension %d repeats", (int)d));
    }
  }
  int64_t numel = dlp_numel(t);
  dlp_Tensor *v = same_view(L, t, what);
  for (int d = 0; d < ndim; d++) {
    int64_t size = t->dl.shape[d], stride = t->dl.strides[d];
    /* only dimensions that step matter (and an empty tensor's strides may be anything) */
    if (!flipped[d] || size <= 1 || numel == 0) continue;
    if (stride == INT64_MIN) {
      dlp_tensor_release(v);
      return luaL_error(L, "%s: stride of dimension %d cannot be negated", what, d + 1);
    }
    v->dl.strides[d] = -stride;
    dlp_view_move(L, v, size - 1, stride, what);
  }
  dlp_tensor_seal(L, v, what);
  return 1;
}

static int l_flip(lua_State *L) { return flip(L, "flip"); }
static int l_flip_function(lua_State *L) { return flip(L, "dlpack.flip"); }

void dlp_flip_register(lua_State *L, int module, int methods, int meta) {
  static const luaL_Reg functions[] = {{"flip", l_flip_function}, {NULL, NULL}};
  static const luaL_Reg method_list[] = {{"flip", l_flip}, {NULL, NULL}};
  (void)meta;
  dlp_register(L, module, functions);
  dlp_register(L, methods, method_list);
}


/* flatten([start [, end]]): dimensions start..end (1-based, negative from the end; all by
 * default) merged into one, torch's flatten; a 0-d tensor gives one element. A view when the
 * merged dimensions walk memory with one stride (ravel's rule), else a contiguous copy. */
static int flatten(lua_State *L, int whole, const char *what) {
  dlp_check_no_more(L, whole ? 2 : 4, what, whole ? "no argument" : "at most two dimensions");
  dlp_Tensor *t = check_viewable(L, what);
  int ndim = t->dl.ndim;
  if (ndim == 0) {
    int64_t one = 1;
    push_reshaped(L, 1, 1, &one, what);
    return 1;
  }
  int s = whole || lua_isnoneornil(L, 2) ? 0 : dlp_check_dim(L, 2, ndim, 0);
  int e = whole || lua_isnoneornil(L, 3) ? ndim - 1 : dlp_check_dim(L, 3, ndim, 0);
  if (s > e) return luaL_error(L, "%s: start dimension %d comes after end dimension %d", what, s + 1, e + 1);
  int64_t size = 1, stride = 1, numel = dlp_numel(t);
  int mergeable = 1, inner = -1; /* inner: the innermost merged dimension of size > 1 */
  for (int i = e; i >= s; i--) {
    if (!dlp_mul(size, t->dl.shape[i], &size))
      return luaL_error(L, "%s: the merged dimension would have more elements than fit in 64 bits", what);
    if (t->dl.shape[i] == 1) continue;
    if (inner >= 0) {
      int64_t want;
      if (!dlp_mul(t->dl.strides[inner], t->dl.shape[inner], &want) || want != t->dl.strides[i]) mergeable = 0;
    } else {
      stride = t->dl.strides[i];
    }
    inner = i;
  }
  if (numel == 0) stride = 1;
  int source = 1;
  if (!mergeable && numel > 0) { /* a contiguous copy, where every merge is a view */
    lua_settop(L, 1);
    dlp_clone(L, 1, t->dtype, t->dl.device, NULL, what);
    source = 2;
    t = lua_touserdata(L, 2);
    stride = 1;
    for (int i = e + 1; i < ndim; i++) stride *= t->dl.shape[i]; /* fits: numel does */
  }
  dlp_Tensor *v = dlp_view_new(L, source, ndim - (e - s), what);
  for (int i = 0, j = 0; i < ndim; i++) {
    if (i > s && i <= e) continue;
    v->dl.shape[j] = i == s ? size : t->dl.shape[i];
    v->dl.strides[j++] = i == s ? stride : t->dl.strides[i];
  }
  dlp_tensor_seal(L, v, what);
  return 1;
}
static int l_flatten(lua_State *L) { return flatten(L, 0, "flatten"); }
static int l_ravel(lua_State *L) { return flatten(L, 1, "ravel"); }

/* The tensor at 1 with its dimensions reversed (NumPy's t.T), a view; pushed. */
void dlp_push_reversed(lua_State *L) {
  dlp_Tensor *t = check_viewable(L, "T");
  int n = t->dl.ndim;
  dlp_Tensor *v = dlp_view_new(L, 1, n, "T");
  for (int i = 0; i < n; i++) {
    v->dl.shape[i] = t->dl.shape[n - 1 - i];
    v->dl.strides[i] = t->dl.strides[n - 1 - i];
  }
}

/* t:t(): a matrix transposed, a vector or 0-d tensor as it is (torch's t) */
static int l_t(lua_State *L) {
  dlp_check_no_more(L, 2, "t", "no argument");
  dlp_Tensor *t = check_viewable(L, "t");
  if (t->dl.ndim > 2) return luaL_error(L, "t: expects a tensor of at most 2 dimensions, got %d", t->dl.ndim);
  lua_settop(L, 1);
  dlp_push_reversed(L);
  return 1;
}

/* diagonal([k [, dim1, dim2]]): the k-th diagonal of dimensions dim1 and dim2 (1 and 2 by default;
 * k > 0 above the main one), a view whose last dimension runs along it (NumPy's diagonal). */
static int l_diagonal(lua_State *L) {
  dlp_check_no_more(L, 5, "diagonal", "an offset and two dimensions");
  dlp_Tensor *t = check_viewable(L, "diagonal");
  int ndim = t->dl.ndim;
  if (ndim < 2) return luaL_error(L, "diagonal: expects at least 2 dimensions, got %d", ndim);
  lua_Integer k = dlp_optinteger(L, 2, 0);
  int a = lua_isnoneornil(L, 3) ? 0 : dlp_check_dim(L, 3, ndim, 0);
  int b = lua_isnoneornil(L, 4) ? 1 : dlp_check_dim(L, 4, ndim, 0);
  if (a == b) return luaL_error(L, "diagonal: dim1 and dim2 must differ (both %d)", a + 1);
  int64_t rows = t->dl.shape[a], cols = t->dl.shape[b], count, stride = 0;
  /* the diagonal starts at row max(-k, 0), column max(k, 0) */
  int64_t r0 = k < 0 ? (k < -rows ? rows : -k) : 0, c0 = k > 0 ? (k > cols ? cols : k) : 0;
  count = rows - r0 < cols - c0 ? rows - r0 : cols - c0;
  if (count > 1 && !dlp_add(t->dl.strides[a], t->dl.strides[b], &stride))
    return luaL_error(L, "diagonal: the diagonal's stride does not fit in 64 bits");
  dlp_Tensor *v = dlp_view_new(L, 1, ndim - 1, "diagonal");
  for (int i = 0, j = 0; i < ndim; i++) {
    if (i == a || i == b) continue;
    v->dl.shape[j] = t->dl.shape[i];
    v->dl.strides[j++] = t->dl.strides[i];
  }
  v->dl.shape[ndim - 2] = count;
  v->dl.strides[ndim - 2] = count > 1 ? stride : 1;
  if (count > 0) {
    dlp_view_move(L, v, r0, t->dl.strides[a], "diagonal");
    dlp_view_move(L, v, c0, t->dl.strides[b], "diagonal");
  }
  dlp_tensor_seal(L, v, "diagonal");
  return 1;
}

void dlp_views_register(lua_State *L, int methods) {
  static const luaL_Reg method_list[] = {
    {"view", l_view}, {"reshape", l_reshape}, {"transpose", l_transpose}, {"permute", l_permute},
    {"narrow", l_narrow}, {"select", l_select}, {"slice", l_slice}, {"squeeze", l_squeeze},
    {"unsqueeze", l_unsqueeze}, {"expand", l_expand}, {"as_readonly", l_as_readonly}, {"flatten", l_flatten},
    {"ravel", l_ravel}, {"t", l_t}, {"diagonal", l_diagonal}, {NULL, NULL},
  };
  dlp_register(L, methods, method_list);
}
