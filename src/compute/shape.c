/* Shape functions composed from the module's own: split, chunk and unbind (tables of views),
 * hstack, vstack and concatenate (cat), outer (mul), tile and repeat (expand and a copy),
 * repeat_interleave, roll (cat of two views), tril and triu (where with a mask), diag, einsum
 * (views, sums and matmul) and the dtype shorthands t:float() ... (to). Each reads its arguments first (plain numbers and
 * tensors: no script code runs), then calls the module's functions, which check everything
 * again; so these work on every device the functions they call work on. Pinned and managed memory
 * is first viewed as cpu memory (dlp_host_as_cpu): those functions compute it on the CPU into cpu
 * tensors, and so do these. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* Call the method `name` of the tensor at idx with the nargs values on top of the stack; leaves
 * its one result. */
static void call_method(lua_State *L, int idx, const char *name, int nargs) {
  idx = lua_absindex(L, idx);
  dlp_push_method(L, name); /* as it was when the module opened: no script code */
  lua_insert(L, -1 - nargs);
  lua_pushvalue(L, idx);
  lua_insert(L, -1 - nargs); /* method, tensor, args */
  lua_call(L, nargs + 1, 1);
}

/* Call the module's function `name` (upvalue 2: the module's functions as they were when it
 * opened, so that a script replacing dlpack.cat changes nothing here) with the nargs values
 * on top of the stack; leaves its one result. */
static void call_function(lua_State *L, const char *name, int nargs) {
  lua_pushstring(L, name);
  lua_rawget(L, lua_upvalueindex(2));
  lua_insert(L, -1 - nargs);
  lua_call(L, nargs, 1);
}

/* A table of n sizes (a shape argument), pushed. */
static void push_sizes(lua_State *L, int n, const int64_t *sizes) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushinteger(L, sizes[i]);
    lua_rawseti(L, -2, i + 1);
  }
}

static dlp_Tensor *check_tensor(lua_State *L, int arg, const char *what) {
  dlp_Tensor *t = dlp_tensor_test(L, arg);
  if (!t) luaL_error(L, "%s: a tensor expected at argument %d, got %s", what, arg, luaL_typename(L, arg));
  if (!t->owner) luaL_error(L, "%s: the tensor was released", what);
  return t;
}

/* ---- tables of views ---- */

/* split(t, size | sizes [, dim]): torch's split: pieces of `size` along dim (the last one
 * shorter), or of the sizes listed, which must add up to the dimension's size. */
static int l_split(lua_State *L) {
  int64_t sizes[DLP_MAX_NDIM];
  dlp_check_no_more(L, 4, "split", "a tensor, a size or sizes, and a dimension");
  dlp_Tensor *t = check_tensor(L, 1, "split");
  int d = lua_isnoneornil(L, 3) ? 0 : dlp_check_dim(L, 3, t->dl.ndim, 0);
  if (t->dl.ndim == 0) return luaL_error(L, "split: a 0-d tensor has no dimension to split");
  int64_t n = t->dl.shape[d];
  lua_settop(L, 3);
  lua_newtable(L); /* 4: the pieces */
  if (lua_type(L, 2) == LUA_TNUMBER) {
    lua_Integer size = dlp_checkinteger(L, 2);
    if (size < 1 && !(size == 0 && n == 0))
      return luaL_argerror(L, 2, "the size of the pieces must be at least 1");
    int64_t start = 0, count = 0;
    if (n == 0) { /* one empty piece, as torch */
      lua_pushinteger(L, d + 1);
      lua_pushinteger(L, 1);
      lua_pushinteger(L, 0);
      call_method(L, 1, "narrow", 3);
      lua_rawseti(L, 4, 1);
      return 1;
    }
    if (n / size + (n % size != 0) > INT32_MAX / 2) return luaL_argerror(L, 2, "too many pieces for a table");
    while (start < n) {
      int64_t len = n - start < size ? n - start : size;
      lua_pushinteger(L, d + 1);
      lua_pushinteger(L, start + 1);
      lua_pushinteger(L, len);
      call_method(L, 1, "narrow", 3);
      lua_rawseti(L, 4, (lua_Integer)++count);
      start += len;
    }
    return 1;
  }
  if (!lua_istable(L, 2))
    return luaL_argerror(L, 2, lua_pushfstring(L, "a size or a table of sizes expected, got %s", luaL_typename(L, 2)));
  int count = dlp_check_integers(L, 2, sizes, DLP_MAX_NDIM, 0, "sizes");
  int64_t start = 0;
  for (int i = 0; i < count; i++) {
    if (sizes[i] > n - start)
      return luaL_argerror(L, 2, lua_pushfstring(L, "the sizes add up to more than dimension %d's %I", d + 1,
                                                 (lua_Integer)n));
    start += sizes[i];
  }
  if (start != n)
    return luaL_argerror(L, 2, lua_pushfstring(L, "the sizes add up to %I, dimension %d has %I", (lua_Integer)start,
                                               d + 1, (lua_Integer)n));
  start = 0;
  for (int i = 0; i < count; i++) {
    lua_pushinteger(L, d + 1);
    lua_pushinteger(L, start + 1);
    lua_pushinteger(L, sizes[i]);
    call_method(L, 1, "narrow", 3);
    lua_rawseti(L, 4, i + 1);
    start += sizes[i];
  }
  return 1;
}

/* chunk(t, n [, dim]): torch's chunk: at most n pieces of ceil(size / n) elements along dim. */
static int l_chunk(lua_State *L) {
  dlp_check_no_more(L, 4, "chunk", "a tensor, a number of pieces and a dimension");
  dlp_Tensor *t = check_tensor(L, 1, "chunk");
  lua_Integer pieces = dlp_checkinteger(L, 2);
  if (pieces < 1) return luaL_argerror(L, 2, "the number of pieces must be at least 1");
  int d = lua_isnoneornil(L, 3) ? 0 : dlp_check_dim(L, 3, t->dl.ndim, 0);
  if (t->dl.ndim == 0) return luaL_error(L, "chunk: a 0-d tensor has no dimension to split");
  int64_t n = t->dl.shape[d], size = n / pieces + (n % pieces != 0);
  lua_settop(L, 1);
  lua_pushinteger(L, size > 0 ? size : 0);
  lua_pushinteger(L, d + 1);
  return l_split(L);
}

/* unbind(t [, dim]): the slices of t along dim, each a view without that dimension. */
static int l_unbind(lua_State *L) {
  dlp_check_no_more(L, 3, "unbind", "a tensor and a dimension");
  dlp_Tensor *t = check_tensor(L, 1, "unbind");
  if (t->dl.ndim == 0) return luaL_error(L, "unbind: a 0-d tensor has no dimension to unbind");
  int d = lua_isnoneornil(L, 2) ? 0 : dlp_check_dim(L, 2, t->dl.ndim, 0);
  int64_t n = t->dl.shape[d];
  if (n > INT32_MAX) return luaL_error(L, "unbind: %I slices do not fit in a table", (lua_Integer)n);
  lua_settop(L, 2);
  lua_createtable(L, (int)n, 0);
  for (int64_t i = 0; i < n; i++) {
    lua_pushinteger(L, d + 1);
    lua_pushinteger(L, i + 1);
    call_method(L, 1, "select", 2);
    lua_rawseti(L, 3, (lua_Integer)(i + 1));
  }
  return 1;
}

/* ---- joining (NumPy's names over cat) ---- */

/* The list at 1 read raw into a new table of its tensors (pushed), each given at least
 * `at_least_2d` dimensions (2: vstack's rows) or 1; the most dimensions into *ndim_max. */
static int read_list(lua_State *L, const char *what, int at_least_2d, int *ndim_max) {
  if (!lua_istable(L, 1))
    return luaL_argerror(L, 1, lua_pushfstring(L, "a table of tensors expected, got %s", luaL_typename(L, 1)));
  size_t n = lua_rawlen(L, 1);
  if (n == 0) return luaL_argerror(L, 1, "the list of tensors is empty");
  if (n > INT32_MAX / 2) return luaL_argerror(L, 1, "too many tensors");
  lua_createtable(L, (int)n, 0);
  int list = lua_gettop(L);
  *ndim_max = 0;
  for (int i = 1; i <= (int)n; i++) {
    lua_rawgeti(L, 1, i);
    dlp_Tensor *t = dlp_tensor_test(L, -1);
    if (!t) return luaL_error(L, "%s: list[%d] is %s, not a tensor", what, i, luaL_typename(L, -1));
    if (!t->owner) return luaL_error(L, "%s: list[%d] was released", what, i);
    int nd = t->dl.ndim;
    /* views: 0-d -> {1} (hstack) or {1, 1}, 1-d {n} -> {1, n} (vstack), as NumPy's atleast_2d */
    for (; nd < (at_least_2d ? 2 : 1); nd++) {
      lua_pushinteger(L, 1);
      call_method(L, -2, "unsqueeze", 1);
      lua_remove(L, -2);
    }
    if (nd > *ndim_max) *ndim_max = nd;
    lua_rawseti(L, list, i);
  }
  return (int)n;
}

/* concatenate(list [, dim]): cat, dim 1 by default (NumPy's axis=0) */
static int l_concatenate(lua_State *L) {
  dlp_check_no_more(L, 3, "concatenate", "a list of tensors and a dimension");
  lua_settop(L, 2);
  if (lua_isnil(L, 2)) {
    lua_pushinteger(L, 1);
    lua_replace(L, 2);
  }
  call_function(L, "cat", 2);
  return 1;
}

/* hstack(list): along dimension 2, or 1 for 1-d tensors (NumPy's); 0-d ones count as {1} */
static int l_hstack(lua_State *L) {
  int ndim;
  dlp_check_no_more(L, 2, "hstack", "a list of tensors");
  read_list(L, "hstack", 0, &ndim);
  lua_pushinteger(L, ndim <= 1 ? 1 : 2);
  call_function(L, "cat", 2);
  return 1;
}

/* vstack(list): along dimension 1, 0-d and 1-d tensors first made rows {1, n} (NumPy's) */
static int l_vstack(lua_State *L) {
  int ndim;
  dlp_check_no_more(L, 2, "vstack", "a list of tensors");
  read_list(L, "vstack", 2, &ndim);
  lua_pushinteger(L, 1);
  call_function(L, "cat", 2);
  return 1;
}

/* ---- products and copies ---- */

/* outer(a, b): a's elements (flattened) down, b's across: mul({m, 1}, {n}) */
static int l_outer(lua_State *L) {
  dlp_check_no_more(L, 3, "outer", "two tensors");
  check_tensor(L, 1, "outer");
  check_tensor(L, 2, "outer");
  lua_settop(L, 2);
  dlp_host_as_cpu(L, 1, "outer");
  dlp_host_as_cpu(L, 2, "outer");
  call_method(L, 1, "ravel", 0); /* 3 */
  lua_pushinteger(L, 2);
  call_method(L, 3, "unsqueeze", 1); /* 4: {m, 1}, a view */
  call_method(L, 2, "ravel", 0);   /* 5 */
  call_function(L, "mul", 2);
  return 1;
}

/* The shape of the tensor at idx with size-1 dimensions inserted before each one, expanded to
 * reps (both padded to the same length with leading 1s), copied contiguous and viewed as the
 * tiled shape: NumPy's tile (torch's repeat). */
static int tile(lua_State *L, const char *what) {
  int64_t reps[DLP_MAX_NDIM], inter[2 * DLP_MAX_NDIM], want[2 * DLP_MAX_NDIM], final_shape[DLP_MAX_NDIM];
  dlp_Tensor *t = check_tensor(L, 1, what);
  int next, k = dlp_check_integer_args(L, 2, reps, DLP_MAX_NDIM, 0, "repeats", &next);
  dlp_check_no_more(L, next, what, "a tensor and repeats (a table or numbers)");
  int nd = t->dl.ndim, m = k > nd ? k : nd;
  int64_t numel = 1;
  for (int i = 0; i < m; i++) {
    int64_t s = i < m - nd ? 1 : t->dl.shape[i - (m - nd)], r = i < m - k ? 1 : reps[i - (m - k)];
    if (!dlp_mul(s, r, &final_shape[i]) || !dlp_mul(numel, final_shape[i], &numel))
      return luaL_error(L, "%s: the result would have more elements than fit in 64 bits", what);
    inter[2 * i] = 1, inter[2 * i + 1] = s;
    want[2 * i] = r, want[2 * i + 1] = s;
  }
  lua_settop(L, 1);
  dlp_host_as_cpu(L, 1, what);
  t = check_tensor(L, 1, what); /* the view, when it replaced t */
  call_method(L, 1, "contiguous", 0); /* 2: t itself when contiguous (views of it follow) */
  if (2 * m <= DLP_MAX_NDIM) {
    push_sizes(L, 2 * m, inter);
    call_method(L, 2, "view", 1); /* 3 */
    push_sizes(L, 2 * m, want);
    call_method(L, 3, "expand", 1); /* 4 */
    call_method(L, 4, "clone", 0); /* a copy also when every repeat is 1 (NumPy's tile) */
    push_sizes(L, m, final_shape);
    call_method(L, -2, "view", 1);
    return 1;
  }
  /* more than DLP_MAX_NDIM / 2 dimensions (the expanded view would need twice as many): one
   * dimension at a time, with cat */
  int64_t pad[DLP_MAX_NDIM];
  for (int i = 0; i < m; i++) pad[i] = i < m - nd ? 1 : t->dl.shape[i - (m - nd)];
  push_sizes(L, m, pad);
  call_method(L, 2, "view", 1); /* 3: the padded tensor */
  int copied = 0;
  for (int i = 0; i < m; i++) {
    int64_t r = i < m - k ? 1 : reps[i - (m - k)];
    if (r == 1) continue;
    copied = 1;
    if (r > INT32_MAX / 2) return luaL_error(L, "%s: %I repeats of a dimension are too many", what, (lua_Integer)r);
    lua_createtable(L, (int)r, 0);
    for (int j = 1; j <= (int)r; j++) {
      lua_pushvalue(L, -2);
      lua_rawseti(L, -2, j);
    }
    lua_pushinteger(L, i + 1);
    call_function(L, "cat", 2);
    lua_remove(L, -2);
  }
  if (!copied) call_method(L, 3, "clone", 0);
  return 1;
}
static int l_tile(lua_State *L) { return tile(L, "tile"); }
static int l_repeat(lua_State *L) { return tile(L, "repeat"); }

/* repeat_interleave(t, n [, dim]): each element n times in a row along dim (NumPy's repeat;
 * without dim, of the flattened tensor). */
static int l_repeat_interleave(lua_State *L) {
  int64_t shape[DLP_MAX_NDIM];
  dlp_check_no_more(L, 4, "repeat_interleave", "a tensor, a number of repeats and a dimension");
  dlp_Tensor *t = check_tensor(L, 1, "repeat_interleave");
  lua_Integer n = dlp_checkinteger(L, 2);
  if (n < 0) return luaL_argerror(L, 2, "the number of repeats must not be negative");
  int flat = lua_isnoneornil(L, 3);
  lua_settop(L, 3);
  dlp_host_as_cpu(L, 1, "repeat_interleave");
  t = check_tensor(L, 1, "repeat_interleave");
  if (flat) {
    call_method(L, 1, "ravel", 0);
    lua_replace(L, 1);
    t = check_tensor(L, 1, "repeat_interleave");
  }
  int d = flat ? 0 : dlp_check_dim(L, 3, t->dl.ndim, 0);
  if (t->dl.ndim == 0) return luaL_error(L, "repeat_interleave: a 0-d tensor has no dimension");
  if (t->dl.ndim >= DLP_MAX_NDIM) return luaL_error(L, "repeat_interleave: already %d dimensions", DLP_MAX_NDIM);
  int nd = t->dl.ndim;
  for (int i = 0; i < nd; i++) shape[i] = t->dl.shape[i];
  if (!dlp_mul(shape[d], n, &shape[d])) return luaL_error(L, "repeat_interleave: too many elements");
  int64_t numel;
  if (!dlp_numel_of(nd, shape, &numel)) return luaL_error(L, "repeat_interleave: too many elements");
  lua_pushinteger(L, d + 2);
  call_method(L, 1, "unsqueeze", 1); /* 4 */
  int64_t want[DLP_MAX_NDIM];
  for (int i = 0, j = 0; i <= nd; i++) want[i] = i == d + 1 ? n : t->dl.shape[j++];
  push_sizes(L, nd + 1, want);
  call_method(L, 4, "expand", 1);
  call_method(L, -1, "clone", 0); /* a copy also when n is 1 (NumPy's repeat) */
  push_sizes(L, nd, shape);
  call_method(L, -2, "view", 1);
  return 1;
}

/* roll(t, shifts [, dims]): elements shifted along dims, those past the end coming back at the
 * start (NumPy's roll); without dims, of the flattened tensor, shaped back. */
static int l_roll(lua_State *L) {
  int64_t shifts[DLP_MAX_NDIM], dims[DLP_MAX_NDIM];
  dlp_check_no_more(L, 4, "roll", "a tensor, shifts and dimensions");
  dlp_Tensor *t = check_tensor(L, 1, "roll");
  int count, ndims;
  if (lua_type(L, 2) == LUA_TNUMBER) {
    shifts[0] = dlp_checkinteger(L, 2);
    count = 1;
  } else {
    count = dlp_check_integers(L, 2, shifts, DLP_MAX_NDIM, INT64_MIN, "shifts");
  }
  int flat = lua_isnoneornil(L, 3);
  if (flat) {
    if (count != 1) return luaL_argerror(L, 2, "without dims, one shift");
    ndims = 1;
  } else if (lua_type(L, 3) == LUA_TNUMBER) {
    dims[0] = dlp_check_dim(L, 3, t->dl.ndim, 0);
    ndims = 1;
  } else {
    ndims = dlp_check_integers(L, 3, dims, DLP_MAX_NDIM, INT64_MIN, "dims");
    for (int i = 0; i < ndims; i++) {
      int64_t d = dims[i] < 0 ? dims[i] + t->dl.ndim + 1 : dims[i];
      if (d < 1 || d > t->dl.ndim)
        return luaL_argerror(L, 3, lua_pushfstring(L, "dims[%d] is not a dimension of a %d-d tensor", i + 1,
                                                   t->dl.ndim));
      dims[i] = d - 1;
    }
  }
  if (!flat && ndims != count)
    return luaL_error(L, "roll: %d shifts for %d dimensions (give one shift per dimension)", count, ndims);
  lua_settop(L, 1);
  dlp_host_as_cpu(L, 1, "roll");
  if (flat) {
    call_method(L, 1, "ravel", 0);
    dims[0] = 0;
  } else {
    lua_pushvalue(L, 1);
  }
  int work = lua_gettop(L), moved = 0;
  for (int i = 0; i < ndims; i++) {
    const dlp_Tensor *w = check_tensor(L, work, "roll");
    if (w->dl.ndim <= dims[i]) return luaL_error(L, "roll: dimension %d is gone", (int)dims[i] + 1);
    int64_t n = w->dl.shape[dims[i]];
    if (n == 0 || dlp_numel(w) == 0) continue; /* nothing moves */
    int64_t s = shifts[i] % n;
    if (s < 0) s += n;
    if (s == 0) continue;
    lua_createtable(L, 2, 0);
    lua_pushinteger(L, dims[i] + 1);
    lua_pushinteger(L, n - s + 1);
    lua_pushinteger(L, s);
    call_method(L, work, "narrow", 3);
    lua_rawseti(L, -2, 1);
    lua_pushinteger(L, dims[i] + 1);
    lua_pushinteger(L, 1);
    lua_pushinteger(L, n - s);
    call_method(L, work, "narrow", 3);
    lua_rawseti(L, -2, 2);
    lua_pushinteger(L, dims[i] + 1);
    call_function(L, "cat", 2);
    lua_replace(L, work);
    moved = 1;
  }
  if (!moved) { /* a copy all the same, as NumPy */
    call_method(L, 1, "clone", 0);
  } else if (flat) { /* cat's result is contiguous */
    lua_pushstring(L, "shape");
    lua_gettable(L, 1);
    call_method(L, work, "view", 1);
  }
  return 1;
}

/* tril and triu: where(mask, t, 0), mask the elements on and below (above) the k-th diagonal of
 * the last two dimensions, made as column - row <= k (>= k) from two ranges on t's device. */
static int triangle(lua_State *L, int upper, const char *what) {
  dlp_check_no_more(L, 3, what, "a tensor and a diagonal");
  dlp_Tensor *t = check_tensor(L, 1, what);
  lua_Integer k = dlp_optinteger(L, 2, 0);
  if (t->dl.ndim < 2) return luaL_error(L, "%s: expects at least 2 dimensions, got %d", what, t->dl.ndim);
  int64_t rows = t->dl.shape[t->dl.ndim - 2], cols = t->dl.shape[t->dl.ndim - 1];
  int is_bool = t->dtype == DLP_BOOL;
  lua_settop(L, 2);
  dlp_host_as_cpu(L, 1, what);
  lua_pushstring(L, "device");
  lua_gettable(L, 1); /* 3 */
  /* rows as a column {rows, 1}, columns as a row {cols}, int64 on t's device */
  lua_pushinteger(L, 0);
  lua_pushinteger(L, rows);
  lua_pushinteger(L, 1);
  lua_pushstring(L, "int64");
  lua_pushvalue(L, 3);
  call_function(L, "arange", 5);
  lua_pushinteger(L, rows);
  lua_pushinteger(L, 1);
  call_method(L, -3, "view", 2);
  lua_remove(L, -2); /* 4 */
  lua_pushinteger(L, 0);
  lua_pushinteger(L, cols);
  lua_pushinteger(L, 1);
  lua_pushstring(L, "int64");
  lua_pushvalue(L, 3);
  call_function(L, "arange", 5); /* 5 */
  lua_pushvalue(L, 4);
  call_function(L, "sub", 2); /* 6: column - row */
  lua_pushinteger(L, k);
  call_function(L, upper ? "ge" : "le", 2); /* 7: the mask */
  lua_pushvalue(L, 1);
  if (is_bool) lua_pushboolean(L, 0);
  else lua_pushinteger(L, 0);
  call_function(L, "where", 3);
  return 1;
}
static int l_tril(lua_State *L) { return triangle(L, 0, "tril"); }
static int l_triu(lua_State *L) { return triangle(L, 1, "triu"); }

/* diag(t [, k]): a vector's elements on the k-th diagonal of a new square matrix (zeros
 * elsewhere), or a matrix's k-th diagonal as a new vector (NumPy's diag, a copy). */
static int l_diag(lua_State *L) {
  dlp_check_no_more(L, 3, "diag", "a tensor and a diagonal");
  dlp_Tensor *t = check_tensor(L, 1, "diag");
  lua_Integer k = dlp_optinteger(L, 2, 0);
  lua_settop(L, 2);
  dlp_host_as_cpu(L, 1, "diag");
  t = check_tensor(L, 1, "diag"); /* the view, when it replaced t */
  if (t->dl.ndim == 2) {
    call_method(L, 1, "diagonal", 1);
    call_method(L, -1, "clone", 0);
    return 1;
  }
  if (t->dl.ndim != 1) return luaL_error(L, "diag: expects 1 or 2 dimensions, got %d", t->dl.ndim);
  int64_t n = t->dl.shape[0], size, ak = k < 0 ? -(k + 1) : k; /* ak + 1 = |k| with no overflow */
  if (!dlp_add(n, ak, &size) || !dlp_add(size, k < 0, &size) || !dlp_mul(size, size, &ak))
    return luaL_error(L, "diag: the matrix would have more elements than fit in 64 bits");
  int64_t shape[2] = {size, size};
  push_sizes(L, 2, shape);
  lua_pushstring(L, "dtype");
  lua_gettable(L, 1);
  lua_pushstring(L, "device");
  lua_gettable(L, 1);
  call_function(L, "zeros", 3); /* 3 */
  lua_pushvalue(L, 2);
  call_method(L, 3, "diagonal", 1);
  lua_pushvalue(L, 1);
  call_method(L, -2, "copy", 1);
  lua_settop(L, 3);
  return 1;
}


/* ---- einsum ---- */

/* Labels: 'a'..'z' are 0..25, 'A'..'Z' 26..51, the dimensions '...' stands for 52 on (right
 * aligned across the operands, as they broadcast). */
#define LETTERS 52
#define LABELS (LETTERS + DLP_MAX_NDIM)
#define MAX_OPERANDS 32

typedef struct Term {
  int n;                      /* labels, one per dimension */
  int label[DLP_MAX_NDIM];
} Term;

static int label_of(int c) {
  if (c >= 'a' && c <= 'z') return c - 'a';
  if (c >= 'A' && c <= 'Z') return c - 'A' + 26;
  return -1;
}

/* ASCII order of the letters (NumPy's implicit output sorts them so: 'A' before 'a') */
static int ascii_of(int label) { return label < 26 ? 'a' + label : 'A' + label - 26; }

/* Parse the subscripts of one term (s up to end) for a tensor of ndim dimensions (-1: the
 * output, with `ell` dimensions for '...'); the dims '...' stands for take labels LETTERS on.
 * Returns how many dims '...' stood for, or raises. */
static int parse_term(lua_State *L, const char *s, const char *end, int ndim, int ell, Term *t, int *has_ell,
                      const char *which) {
  int letters = 0, dots = 0, count = 0;
  for (const char *p = s; p < end; p++) {
    if (*p == ' ') continue;
    if (*p == '.') {
      if (dots || end - p < 3 || p[1] != '.' || p[2] != '.')
        luaL_error(L, "einsum: %s: '.' only as one '...'", which);
      dots = 1;
      p += 2;
      continue;
    }
    if (label_of((unsigned char)*p) < 0) luaL_error(L, "einsum: %s: invalid subscript '%c'", which, *p);
    letters++;
  }
  *has_ell = dots;
  if (ndim >= 0) {
    if (!dots && letters != ndim)
      luaL_error(L, "einsum: %s has %d dimensions, its subscripts name %d", which, ndim, letters);
    if (dots && letters > ndim)
      luaL_error(L, "einsum: %s has %d dimensions, its subscripts name %d and '...'", which, ndim, letters);
    count = dots ? ndim - letters : 0;
  } else {
    count = dots ? ell : 0;
    ell = count;
    if (letters + count > DLP_MAX_NDIM) luaL_error(L, "einsum: the output would have more than %d dimensions",
                                                   DLP_MAX_NDIM);
  }
  t->n = 0;
  for (const char *p = s; p < end; p++) {
    if (*p == ' ') continue;
    if (*p == '.') {
      for (int j = 0; j < count; j++) t->label[t->n++] = LETTERS + j; /* operands' renumbered by the caller */
      p += 2;
      continue;
    }
    t->label[t->n++] = label_of((unsigned char)*p);
  }
  return count;
}

/* A view of the tensor at idx with one dimension per distinct label of term (repeated labels:
 * the diagonal, strides added), each of the label's size (a size-1 dimension repeats: stride 0);
 * pushed, and its labels into out. */
static void diagonal_view(lua_State *L, int idx, const Term *term, const int64_t *size, Term *out) {
  const dlp_Tensor *t = check_tensor(L, idx, "einsum");
  int64_t shape[DLP_MAX_NDIM], strides[DLP_MAX_NDIM];
  int n = 0, numel_zero = dlp_numel(t) == 0;
  for (int i = 0; i < term->n; i++) {
    int j = 0;
    while (j < n && out->label[j] != term->label[i]) j++;
    int64_t stride = t->dl.shape[i] == 1 ? 0 : t->dl.strides[i];
    if (j == n) {
      out->label[n] = term->label[i];
      shape[n] = size[term->label[i]];
      strides[n++] = stride;
    } else if (t->dl.shape[i] != t->dl.shape[j] && !numel_zero) {
      luaL_error(L, "einsum: a repeated subscript '%c' names dimensions of sizes %I and %I",
                 ascii_of(term->label[i]), (lua_Integer)t->dl.shape[j], (lua_Integer)t->dl.shape[i]);
    } else if (!numel_zero && !dlp_add(strides[j], stride, &strides[j])) {
      luaL_error(L, "einsum: the diagonal's stride does not fit in 64 bits");
    }
  }
  out->n = n;
  dlp_Tensor *v = dlp_view_new(L, idx, n, "einsum");
  for (int i = 0; i < n; i++) {
    v->dl.shape[i] = shape[i];
    v->dl.strides[i] = numel_zero ? 1 : strides[i];
  }
  dlp_tensor_seal(L, v, "einsum");
}

static int has_label(const Term *t, int label) {
  for (int i = 0; i < t->n; i++)
    if (t->label[i] == label) return 1;
  return 0;
}

/* The tensor at the top (labels *t) permuted to the labels of `order` (the same set); replaces it. */
static void permute_to(lua_State *L, Term *t, const Term *order) {
  int same = 1;
  lua_createtable(L, order->n, 0);
  for (int i = 0; i < order->n; i++) {
    int j = 0;
    while (t->label[j] != order->label[i]) j++;
    same &= j == i;
    lua_pushinteger(L, j + 1);
    lua_rawseti(L, -2, i + 1);
  }
  if (same || order->n < 2) {
    lua_pop(L, 1);
  } else {
    call_method(L, -2, "permute", 1);
    lua_remove(L, -2);
  }
  *t = *order;
}

/* The tensor at the top (labels *t, sizes by label) summed over its labels not in `keep`, in
 * `dtype` (einsum keeps the operands' promoted dtype); replaces it. */
static void sum_out(lua_State *L, Term *t, const Term *keep, const int64_t *size, int dtype) {
  Term kept;
  int64_t shape[DLP_MAX_NDIM];
  int summed = 0;
  kept.n = 0;
  lua_newtable(L);
  for (int i = 0; i < t->n; i++) {
    if (has_label(keep, t->label[i])) {
      shape[kept.n] = size[t->label[i]];
      kept.label[kept.n++] = t->label[i];
    } else {
      lua_pushinteger(L, i + 1);
      lua_rawseti(L, -2, ++summed);
    }
  }
  if (!summed) {
    lua_pop(L, 1);
    return;
  }
  lua_createtable(L, 0, 2);
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, "keepdim");
  lua_pushstring(L, dlp_dtypes[dtype].name);
  lua_setfield(L, -2, "dtype");
  call_method(L, -3, "sum", 2);
  push_sizes(L, kept.n, shape);
  call_method(L, -2, "view", 1);
  lua_replace(L, -3);
  lua_pop(L, 1);
  *t = kept;
}

/* The tensor at the top made contiguous and viewed as {lead..., merged...} (the batch sizes,
 * then the products of the label groups: {batch..., L, C}); replaces it. */
static void merge_to(lua_State *L, int nlead, const int64_t *lead, int nmerged, const int64_t *merged) {
  int64_t shape[DLP_MAX_NDIM];
  for (int i = 0; i < nlead; i++) shape[i] = lead[i];
  for (int i = 0; i < nmerged; i++) shape[nlead + i] = merged[i];
  call_method(L, -1, "contiguous", 0);
  push_sizes(L, nlead + nmerged, shape);
  call_method(L, -2, "view", 1);
  lua_replace(L, -3);
  lua_pop(L, 1);
}

/* einsum(subscripts, a, b, ... [, opts]): NumPy's einsum: explicit ('ij,jk->ik') or implicit
 * output (the labels that occur once, in ASCII order), repeated labels within a term for
 * diagonals, '...' for broadcast dimensions, size-1 dimensions broadcasting. Computed as views
 * (diagonals, broadcasting), sums of the labels only one operand has, then a matmul per further
 * operand (batch labels, the labels it contracts, the ones each side keeps), in the operands'
 * promoted dtype. With opts.dtype or opts.out, NumPy's casting='safe': the computing dtype is
 * opts.dtype, else the operands' and out's promoted together; each operand is converted to it
 * first, and the result copied into out (its shape and dtype checked before anything is
 * computed; through a temporary when out overlaps an operand). */
static int l_einsum(lua_State *L) {
  Term in[MAX_OPERANDS], out, cur, want;
  int64_t size[LABELS], rshape[DLP_MAX_NDIM];
  int count[LABELS] = {0}, dtypes[MAX_OPERANDS + 1], has_ell, any_ell = 0, ell = 0;
  dlp_ComputeOptions o;
  size_t len;
  const char *spec = luaL_checklstring(L, 1, &len);
  int n = lua_gettop(L) - 1;
  if (n >= 1 && lua_istable(L, n + 1)) { /* a tensor is a userdata: a table is the options */
    dlp_read_compute_options(L, n + 1, DLP_COPT_OUT | DLP_COPT_DTYPE, &o, "einsum");
    n--;
  } else {
    dlp_read_compute_options(L, 0, 0, &o, "einsum");
  }
  if (n < 1) return luaL_error(L, "einsum: no operands");
  if (n > MAX_OPERANDS) return luaL_error(L, "einsum: at most %d operands", MAX_OPERANDS);
  if (strlen(spec) != len) return luaL_argerror(L, 1, "the subscripts contain an embedded NUL");
  for (int k = 0; k < n; k++) dtypes[k] = check_tensor(L, k + 2, "einsum")->dtype;
  for (int k = 0; k < n; k++) dlp_host_as_cpu(L, k + 2, "einsum");
  const char *arrow = strstr(spec, "->"), *end = arrow ? arrow : spec + len, *p = spec;
  for (int k = 0; k < n; k++) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *term_end = comma ? comma : end;
    if (!comma && k < n - 1) return luaL_error(L, "einsum: %d operands, the subscripts name %d", n, k + 1);
    if (comma && k == n - 1) return luaL_error(L, "einsum: %d operands, the subscripts name more", n);
    const dlp_Tensor *t = lua_touserdata(L, k + 2);
    char which[32];
    snprintf(which, sizeof which, "operand %d", k + 1);
    int e = parse_term(L, p, term_end, t->dl.ndim, 0, &in[k], &has_ell, which);
    any_ell |= has_ell;
    if (e > ell) ell = e;
    p = term_end + 1;
  }
  for (int i = 0; i < LABELS; i++) size[i] = 1;
  for (int k = 0; k < n; k++) { /* ellipsis labels right aligned: renumber with the largest count */
    const dlp_Tensor *t = lua_touserdata(L, k + 2);
    int e = 0;
    for (int i = 0; i < in[k].n; i++) e += in[k].label[i] >= LETTERS;
    for (int i = 0; i < in[k].n; i++) {
      int *l = &in[k].label[i];
      if (*l >= LETTERS) *l += ell - e;
      int64_t s = t->dl.shape[i];
      count[*l]++;
      if (s != 1) {
        if (size[*l] != 1 && size[*l] != s)
          return luaL_error(L, "einsum: subscript '%c' names sizes %I and %I", *l < LETTERS ? ascii_of(*l) : '.',
                            (lua_Integer)size[*l], (lua_Integer)s);
        size[*l] = s;
      }
    }
  }
  if (arrow) {
    parse_term(L, arrow + 2, spec + len, -1, ell, &out, &has_ell, "the output");
    if (!has_ell && ell > 0)
      return luaL_error(L, "einsum: the operands have dimensions for '...', the output names no '...'");
    for (int i = 0; i < out.n; i++) {
      if (out.label[i] < LETTERS && !count[out.label[i]])
        return luaL_error(L, "einsum: output subscript '%c' names no operand's dimension", ascii_of(out.label[i]));
      for (int j = 0; j < i; j++)
        if (out.label[j] == out.label[i])
          return luaL_error(L, "einsum: output subscript '%c' repeats", ascii_of(out.label[i]));
    }
  } else {
    out.n = 0;
    for (int j = 0; j < ell; j++) out.label[out.n++] = LETTERS + j;
    for (int c = 'A'; c <= 'z'; c++) {
      int l = label_of(c);
      if (l >= 0 && count[l] == 1) {
        if (out.n >= DLP_MAX_NDIM) return luaL_error(L, "einsum: more than %d output dimensions", DLP_MAX_NDIM);
        out.label[out.n++] = l;
      }
    }
  }
  (void)any_ell;
  /* NumPy's: the computing dtype is opts.dtype, else the operands' promoted with out's (out
   * accumulates the sums), and out must take it safely (and give it back safely with dtype) */
  dlp_Tensor *out_t = o.out ? lua_touserdata(L, o.out) : NULL;
  if (out_t) dtypes[n] = out_t->dtype;
  int dtype = o.dtype >= 0 ? o.dtype : dlp_promote_many(n + (out_t != NULL), dtypes);
  if (dtype < 0) return luaL_error(L, "einsum: the operands' dtypes do not compute");
  if (out_t) {
    dlp_Tensor *devices[MAX_OPERANDS + 1];
    for (int k = 0; k < n; k++) devices[k] = lua_touserdata(L, k + 2);
    devices[n] = out_t;
    dlp_compute_device(L, devices, n + 1, "einsum");
    for (int i = 0; i < out.n; i++) rshape[i] = size[out.label[i]];
    dlp_check_out(L, out_t, dtype, out.n, rshape, 1, "einsum");
    if (dlp_promote(out_t->dtype, dtype) != dtype)
      return luaL_error(L, "einsum: an out of %s does not cast to dtype %s safely (NumPy's einsum sums into out: "
                        "give them one dtype)", dlp_dtypes[out_t->dtype].name, dlp_dtypes[dtype].name);
  }
  if (o.dtype >= 0 || out_t)
    for (int k = 0; k < n; k++) {
      if (dlp_promote(dtypes[k], dtype) != dtype)
        return luaL_error(L, "einsum: operand %d is %s, which does not cast to %s safely (NumPy's einsum casts "
                          "so)", k + 1, dlp_dtypes[dtypes[k]].name, dlp_dtypes[dtype].name);
      if (dtypes[k] == dtype) continue;
      lua_pushstring(L, dlp_dtypes[dtype].name);
      call_method(L, k + 2, "to", 1);
      lua_replace(L, k + 2);
    }
  int base = lua_gettop(L);
  for (int k = 0; k < n; k++) diagonal_view(L, k + 2, &in[k], size, &in[k]); /* base + 1 .. base + n */
  /* the labels wanted after operand k: the output's and those of the operands after it */
  for (int k = 0; k < n; k++) {
    want = out;
    for (int j = k + 1; j < n; j++)
      for (int i = 0; i < in[j].n; i++)
        if (!has_label(&want, in[j].label[i])) want.label[want.n++] = in[j].label[i];
    if (k == 0) {
      lua_pushvalue(L, base + 1);
      cur = in[0];
      sum_out(L, &cur, &want, size, dtype);
      continue;
    }
    /* operand k's own labels that no one else wants: summed first */
    Term b = in[k], keep_b = want;
    for (int i = 0; i < cur.n; i++)
      if (!has_label(&keep_b, cur.label[i])) keep_b.label[keep_b.n++] = cur.label[i];
    lua_pushvalue(L, base + 1 + k);
    sum_out(L, &b, &keep_b, size, dtype);
    /* batch: both, wanted; contracted: both, not wanted; left: cur only; right: b only */
    Term batch, left, right, contr, order_a, order_b;
    int64_t lead[DLP_MAX_NDIM], merged[2];
    batch.n = left.n = right.n = contr.n = 0;
    for (int i = 0; i < cur.n; i++) {
      int l = cur.label[i];
      if (has_label(&b, l)) {
        if (has_label(&want, l)) batch.label[batch.n++] = l;
        else contr.label[contr.n++] = l;
      } else {
        left.label[left.n++] = l;
      }
    }
    for (int i = 0; i < b.n; i++)
      if (!has_label(&cur, b.label[i])) right.label[right.n++] = b.label[i];
    if (batch.n + 2 > DLP_MAX_NDIM || batch.n + left.n + right.n > DLP_MAX_NDIM)
      return luaL_error(L, "einsum: an intermediate result would have more than %d dimensions", DLP_MAX_NDIM);
    int64_t lsize = 1, csize = 1, rsize = 1;
    for (int i = 0; i < batch.n; i++) lead[i] = size[batch.label[i]];
    for (int i = 0; i < left.n; i++)
      if (!dlp_mul(lsize, size[left.label[i]], &lsize)) return luaL_error(L, "einsum: too many elements");
    for (int i = 0; i < contr.n; i++)
      if (!dlp_mul(csize, size[contr.label[i]], &csize)) return luaL_error(L, "einsum: too many elements");
    for (int i = 0; i < right.n; i++)
      if (!dlp_mul(rsize, size[right.label[i]], &rsize)) return luaL_error(L, "einsum: too many elements");
    order_a = batch;
    for (int i = 0; i < left.n; i++) order_a.label[order_a.n++] = left.label[i];
    for (int i = 0; i < contr.n; i++) order_a.label[order_a.n++] = contr.label[i];
    order_b = batch;
    for (int i = 0; i < contr.n; i++) order_b.label[order_b.n++] = contr.label[i];
    for (int i = 0; i < right.n; i++) order_b.label[order_b.n++] = right.label[i];
    lua_pushvalue(L, -2); /* cur */
    permute_to(L, &cur, &order_a);
    merged[0] = lsize, merged[1] = csize;
    merge_to(L, batch.n, lead, 2, merged);
    lua_pushvalue(L, -2); /* b */
    permute_to(L, &b, &order_b);
    merged[0] = csize, merged[1] = rsize;
    merge_to(L, batch.n, lead, 2, merged);
    lua_pushstring(L, "matmul");
    lua_rawget(L, lua_upvalueindex(2));
    lua_insert(L, -3);
    lua_call(L, 2, 1);
    /* {batch..., L, R} as {batch..., left..., right...} */
    int64_t shape[DLP_MAX_NDIM];
    cur = batch;
    for (int i = 0; i < batch.n; i++) shape[i] = lead[i];
    for (int i = 0; i < left.n; i++) shape[cur.n] = size[left.label[i]], cur.label[cur.n++] = left.label[i];
    for (int i = 0; i < right.n; i++) shape[cur.n] = size[right.label[i]], cur.label[cur.n++] = right.label[i];
    call_method(L, -1, "contiguous", 0);
    push_sizes(L, cur.n, shape);
    call_method(L, -2, "view", 1);
    lua_replace(L, -5); /* over the old cur */
    lua_settop(L, lua_gettop(L) - 3);
  }
  permute_to(L, &cur, &out);
  if (o.out) {
    dlp_copy(L, lua_touserdata(L, o.out), check_tensor(L, -1, "einsum"), NULL, "einsum");
    lua_pushvalue(L, o.out);
  }
  return 1;
}

/* ---- dtype shorthands: t:float() is t:to("float32") (t itself when it is float32) ---- */

static int l_shorthand(lua_State *L) {
  dlp_check_no_more(L, 2, lua_tostring(L, lua_upvalueindex(3)), "no argument");
  check_tensor(L, 1, lua_tostring(L, lua_upvalueindex(3)));
  lua_settop(L, 1);
  lua_pushvalue(L, lua_upvalueindex(4));
  call_method(L, 1, "to", 1);
  return 1;
}

void dlp_shape_register(lua_State *L, int module, int methods, int meta) {
  static const luaL_Reg both[] = {
    {"split", l_split}, {"chunk", l_chunk}, {"unbind", l_unbind}, {"tile", l_tile}, {"repeat", l_repeat},
    {"repeat_interleave", l_repeat_interleave}, {"roll", l_roll}, {"tril", l_tril}, {"triu", l_triu},
    {"diag", l_diag}, {"outer", l_outer}, {NULL, NULL},
  };
  static const luaL_Reg functions[] = {
    {"concatenate", l_concatenate}, {"hstack", l_hstack}, {"vstack", l_vstack}, {"einsum", l_einsum}, {NULL, NULL},
  };
  static const char *const shorthands[][2] = {
    {"float", "float32"}, {"double", "float64"}, {"half", "float16"}, {"bfloat16", "bfloat16"},
    {"long", "int64"}, {"int", "int32"}, {"short", "int16"}, {"char", "int8"}, {"byte", "uint8"}, {"bool", "bool"},
  };
  static const char *const used[] = {"cat", "mul", "sub", "le", "ge", "where", "arange", "zeros", "matmul"};
  lua_createtable(L, 0, 8); /* the functions called by name, upvalue 2 (1: the tensor metatable) */
  for (size_t i = 0; i < sizeof used / sizeof used[0]; i++) {
    lua_getfield(L, module, used[i]);
    lua_setfield(L, -2, used[i]);
  }
  int fns = lua_gettop(L);
  for (int pass = 0; pass < 2; pass++)
    for (const luaL_Reg *r = pass ? functions : both; r->name; r++) {
      lua_pushvalue(L, meta);
      lua_pushvalue(L, fns);
      lua_pushcclosure(L, r->func, 2);
      if (!pass) {
        lua_pushvalue(L, -1);
        lua_setfield(L, methods, r->name);
      }
      lua_setfield(L, module, r->name);
    }
  for (size_t i = 0; i < sizeof shorthands / sizeof shorthands[0]; i++) {
    lua_pushvalue(L, meta);
    lua_pushvalue(L, fns);
    lua_pushstring(L, shorthands[i][0]);
    lua_pushstring(L, shorthands[i][1]);
    lua_pushcclosure(L, l_shorthand, 4);
    lua_setfield(L, methods, shorthands[i][0]);
  }
  lua_pop(L, 1);
}
