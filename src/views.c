/* Views: new shapes and strides over the same memory; nothing here copies elements
 * except reshape of a non-contiguous tensor. Views work on every device: they only
 * change metadata, and move the first element through byte_offset. */
#include <string.h>

#include "internal.h"

/* Elements of packed sub-byte dtypes (fp4, fp6) have no byte address of their own. */
static dlp_Tensor *check_viewable(lua_State *L, const char *what) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  if (dlp_dtype_is_subbyte(t->dtype) && !(t->flags & DLP_FLAG_SUBBYTE_PADDED))
    luaL_error(L, "%s: views of packed %s tensors are not supported", what, dlp_dtypes[t->dtype].name);
  return t;
}

static void move_first(dlp_Tensor *v, int64_t elements) {
  int64_t delta = elements * (int64_t)dlp_dtypes[v->dtype].itemsize;
  v->dl.byte_offset = (uint64_t)((int64_t)v->dl.byte_offset + delta);
}

/* A view of t with the same dimensions, to be edited. */
static dlp_Tensor *same_view(lua_State *L, const dlp_Tensor *t) {
  return dlp_tensor_alias(L, t, t->dl.device);
}

/* Read a shape table at arg where one entry may be -1, for `numel` elements. */
static int infer_shape(lua_State *L, int arg, int64_t numel, int64_t *shape) {
  int ndim = 0, unknown = -1;
  int64_t known = 1;
  luaL_checktype(L, arg, LUA_TTABLE);
  lua_Integer n = luaL_len(L, arg);
  if (n > DLP_MAX_NDIM) luaL_argerror(L, arg, "too many dimensions");
  for (lua_Integer i = 1; i <= n; i++) {
    int isint;
    lua_geti(L, arg, i);
    lua_Integer v = lua_tointegerx(L, -1, &isint);
    lua_pop(L, 1);
    if (!isint || v < -1) luaL_argerror(L, arg, lua_pushfstring(L, "shape[%I] must be a size or -1", i));
    if (v == -1) {
      if (unknown >= 0) luaL_argerror(L, arg, "only one dimension can be -1");
      unknown = (int)(i - 1);
    } else if (__builtin_mul_overflow(known, v, &known)) {
      luaL_argerror(L, arg, "shape has too many elements");
    }
    shape[ndim++] = v;
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

static void push_reshaped(lua_State *L, const dlp_Tensor *t, int ndim, const int64_t *shape) {
  dlp_Tensor *v = dlp_tensor_view(L, t, ndim);
  memcpy(v->dl.shape, shape, (size_t)ndim * sizeof(int64_t));
  dlp_contiguous_strides(ndim, shape, v->dl.strides);
}

static int l_view(lua_State *L) {
  int64_t shape[DLP_MAX_NDIM];
  dlp_Tensor *t = check_viewable(L, "view");
  int ndim = infer_shape(L, 2, dlp_numel(t), shape);
  if (!dlp_is_contiguous(t))
    return luaL_error(L, "view: the tensor is not contiguous (use reshape, or contiguous() first)");
  push_reshaped(L, t, ndim, shape);
  return 1;
}

static int l_reshape(lua_State *L) {
  int64_t shape[DLP_MAX_NDIM];
  dlp_Tensor *t = check_viewable(L, "reshape");
  int ndim = infer_shape(L, 2, dlp_numel(t), shape);
  if (!dlp_is_contiguous(t)) {
    dlp_check_host(L, t, "reshape");
    t = dlp_clone(L, t, t->dtype, t->dl.device);
  }
  push_reshaped(L, t, ndim, shape);
  return 1;
}

static int l_transpose(lua_State *L) {
  dlp_Tensor *t = check_viewable(L, "transpose");
  int a = dlp_check_dim(L, 2, t->dl.ndim, 0), b = dlp_check_dim(L, 3, t->dl.ndim, 0);
  dlp_Tensor *v = same_view(L, t);
  v->dl.shape[a] = t->dl.shape[b];
  v->dl.shape[b] = t->dl.shape[a];
  v->dl.strides[a] = t->dl.strides[b];
  v->dl.strides[b] = t->dl.strides[a];
  return 1;
}

static int l_permute(lua_State *L) {
  int seen[DLP_MAX_NDIM] = {0}, perm[DLP_MAX_NDIM];
  dlp_Tensor *t = check_viewable(L, "permute");
  luaL_checktype(L, 2, LUA_TTABLE);
  if (luaL_len(L, 2) != t->dl.ndim)
    return luaL_argerror(L, 2, lua_pushfstring(L, "expected %d dimensions", t->dl.ndim));
  for (int i = 0; i < t->dl.ndim; i++) {
    int isint;
    lua_geti(L, 2, i + 1);
    lua_Integer d = lua_tointegerx(L, -1, &isint);
    lua_pop(L, 1);
    if (d < 0) d += t->dl.ndim + 1;
    if (!isint || d < 1 || d > t->dl.ndim)
      return luaL_argerror(L, 2, lua_pushfstring(L, "entry %d is not a dimension of a %d-d tensor", i + 1, t->dl.ndim));
    perm[i] = (int)d - 1;
    if (seen[perm[i]]++) return luaL_argerror(L, 2, "not a permutation (a dimension repeats)");
  }
  dlp_Tensor *v = dlp_tensor_view(L, t, t->dl.ndim);
  for (int i = 0; i < t->dl.ndim; i++) {
    v->dl.shape[i] = t->dl.shape[perm[i]];
    v->dl.strides[i] = t->dl.strides[perm[i]];
  }
  return 1;
}

static int l_narrow(lua_State *L) {
  dlp_Tensor *t = check_viewable(L, "narrow");
  int d = dlp_check_dim(L, 2, t->dl.ndim, 0);
  int64_t size = t->dl.shape[d];
  lua_Integer start = luaL_checkinteger(L, 3), length = luaL_checkinteger(L, 4);
  if (start < 0) start += size + 1;
  if (length < 0 || start < 1 || start > size + 1 || start - 1 + length > size)
    return luaL_error(L, "narrow: start %I, length %I out of range for dimension %d of size %I",
                      luaL_checkinteger(L, 3), length, d + 1, (lua_Integer)size);
  dlp_Tensor *v = same_view(L, t);
  v->dl.shape[d] = length;
  if (length > 0) move_first(v, (start - 1) * t->dl.strides[d]);
  return 1;
}

static int l_select(lua_State *L) {
  dlp_Tensor *t = check_viewable(L, "select");
  int d = dlp_check_dim(L, 2, t->dl.ndim, 0);
  int64_t i = dlp_check_index(L, 3, t->dl.shape[d]);
  dlp_Tensor *v = dlp_tensor_view(L, t, t->dl.ndim - 1);
  for (int k = 0, j = 0; k < t->dl.ndim; k++) {
    if (k == d) continue;
    v->dl.shape[j] = t->dl.shape[k];
    v->dl.strides[j++] = t->dl.strides[k];
  }
  move_first(v, i * t->dl.strides[d]);
  return 1;
}

/* slice(dim, first, last [, step]): inclusive bounds as string.sub; negative step walks back. */
static int l_slice(lua_State *L) {
  dlp_Tensor *t = check_viewable(L, "slice");
  int d = dlp_check_dim(L, 2, t->dl.ndim, 0);
  int64_t size = t->dl.shape[d], count;
  lua_Integer first = luaL_checkinteger(L, 3), last = luaL_checkinteger(L, 4);
  lua_Integer step = luaL_optinteger(L, 5, 1);
  if (step == 0) return luaL_argerror(L, 5, "step must not be 0");
  if (first < 0) first += size + 1;
  if (last < 0) last += size + 1;
  if (step > 0 ? first > last : first < last) {
    /* empty: bounds may sit one past either end, as string.sub allows */
    if (first < 0 || first > size + 1 || last < 0 || last > size + 1)
      return luaL_error(L, "slice: bounds %I, %I out of range for size %I", luaL_checkinteger(L, 3),
                        luaL_checkinteger(L, 4), (lua_Integer)size);
    count = 0;
  } else {
    if (first < 1 || first > size || last < 1 || last > size)
      return luaL_error(L, "slice: bounds %I, %I out of range for size %I", luaL_checkinteger(L, 3),
                        luaL_checkinteger(L, 4), (lua_Integer)size);
    count = (step > 0 ? last - first : first - last) / (step > 0 ? step : -step) + 1;
  }
  dlp_Tensor *v = same_view(L, t);
  v->dl.shape[d] = count;
  v->dl.strides[d] = t->dl.strides[d] * step;
  if (count > 0) move_first(v, (first - 1) * t->dl.strides[d]);
  return 1;
}

static int l_squeeze(lua_State *L) {
  dlp_Tensor *t = check_viewable(L, "squeeze");
  int only = lua_isnoneornil(L, 2) ? -1 : dlp_check_dim(L, 2, t->dl.ndim, 0);
  int ndim = 0;
  for (int k = 0; k < t->dl.ndim; k++)
    if (!(t->dl.shape[k] == 1 && (only < 0 || only == k))) ndim++;
  dlp_Tensor *v = dlp_tensor_view(L, t, ndim);
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
  dlp_Tensor *v = dlp_tensor_view(L, t, t->dl.ndim + 1);
  for (int k = 0, j = 0; k <= t->dl.ndim; k++) {
    if (k == d) {
      v->dl.shape[k] = 1;
      v->dl.strides[k] = d < t->dl.ndim ? t->dl.strides[d] * t->dl.shape[d] : 1;
    } else {
      v->dl.shape[k] = t->dl.shape[j];
      v->dl.strides[k] = t->dl.strides[j++];
    }
  }
  return 1;
}

/* expand(shape): size-1 dimensions (and new leading ones) repeat with stride 0; -1 keeps a size. */
static int l_expand(lua_State *L) {
  dlp_Tensor *t = check_viewable(L, "expand");
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_Integer n = luaL_len(L, 2);
  if (n < t->dl.ndim || n > DLP_MAX_NDIM)
    return luaL_argerror(L, 2, lua_pushfstring(L, "expected %d to %d sizes", t->dl.ndim, DLP_MAX_NDIM));
  int ndim = (int)n, lead = ndim - t->dl.ndim;
  dlp_Tensor *v = dlp_tensor_view(L, t, ndim);
  for (int k = 0; k < ndim; k++) {
    int isint;
    lua_geti(L, 2, k + 1);
    lua_Integer want = lua_tointegerx(L, -1, &isint);
    lua_pop(L, 1);
    int64_t have = k < lead ? 1 : t->dl.shape[k - lead];
    int64_t stride = k < lead ? 0 : t->dl.strides[k - lead];
    if (!isint || want < -1 || (want == -1 && k < lead))
      return luaL_argerror(L, 2, lua_pushfstring(L, "shape[%d] must be a size (or -1 for an existing one)", k + 1));
    if (want == -1) want = have;
    if (want != have) {
      if (have != 1)
        return luaL_argerror(L, 2, lua_pushfstring(L, "cannot expand dimension %d from %I to %I", k + 1,
                                                   (lua_Integer)have, want));
      stride = 0;
    }
    v->dl.shape[k] = want;
    v->dl.strides[k] = stride;
  }
  return 1;
}

static int l_as_readonly(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  dlp_Tensor *v = same_view(L, t);
  v->flags |= DLP_FLAG_READ_ONLY;
  return 1;
}

void dlp_views_register(lua_State *L, int methods) {
  static const luaL_Reg method_list[] = {
    {"view", l_view}, {"reshape", l_reshape}, {"transpose", l_transpose}, {"permute", l_permute},
    {"narrow", l_narrow}, {"select", l_select}, {"slice", l_slice}, {"squeeze", l_squeeze},
    {"unsqueeze", l_unsqueeze}, {"expand", l_expand}, {"as_readonly", l_as_readonly}, {NULL, NULL},
  };
  dlp_register(L, methods, method_list);
}
