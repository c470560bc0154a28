/* Shape functions composed from the module's own: split, chunk and unbind (tables of views),
 * hstack, vstack and concatenate (cat), outer (mul), tile and repeat (expand and a copy),
 * repeat_interleave, roll (cat of two views), tril and triu (where with a mask), diag, and the
 * dtype shorthands t:float() ... (to). Each reads its arguments first (plain numbers and
 * tensors: no script code runs), then calls the module's functions, which check everything
 * again; so these work on every device the functions they call work on. */
#include <string.h>

#include "internal.h"

/* Call the method `name` of the tensor at idx with the nargs values on top of the stack; leaves
 * its one result. */
static void call_method(lua_State *L, int idx, const char *name, int nargs) {
  idx = lua_absindex(L, idx);
  lua_getfield(L, idx, name); /* the methods table through __index: no script code */
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
    lua_Integer size = luaL_checkinteger(L, 2);
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
    while (start < n) {
      int64_t len = n - start < size ? n - start : size;
      if (count >= INT32_MAX) return luaL_argerror(L, 2, "too many pieces");
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
  lua_Integer pieces = luaL_checkinteger(L, 2);
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
    if (nd < at_least_2d) { /* 0-d -> {1, 1}, 1-d {n} -> {1, n}, as NumPy's atleast_2d */
      lua_createtable(L, 2, 0);
      lua_pushinteger(L, 1);
      lua_rawseti(L, -2, 1);
      lua_pushinteger(L, nd == 0 ? 1 : t->dl.shape[0]);
      lua_rawseti(L, -2, 2);
      call_method(L, -2, "reshape", 1);
      lua_remove(L, -2);
      nd = 2;
    } else if (nd == 0) { /* hstack: 0-d -> {1} */
      lua_pushinteger(L, 1);
      call_method(L, -2, "reshape", 1);
      lua_remove(L, -2);
      nd = 1;
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
  call_method(L, 1, "ravel", 0); /* 3 */
  lua_pushinteger(L, -1);
  lua_pushinteger(L, 1);
  call_method(L, 3, "reshape", 2); /* 4 */
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
  if (2 * m <= DLP_MAX_NDIM) {
    push_sizes(L, 2 * m, inter);
    call_method(L, 1, "reshape", 1); /* 2: a view of a contiguous t, else a copy */
    push_sizes(L, 2 * m, want);
    call_method(L, 2, "expand", 1); /* 3 */
    call_method(L, 3, "contiguous", 0);
    push_sizes(L, m, final_shape);
    call_method(L, -2, "view", 1);
    return 1;
  }
  /* more than DLP_MAX_NDIM / 2 dimensions (the expanded view would need twice as many): one
   * dimension at a time, with cat */
  int64_t pad[DLP_MAX_NDIM];
  for (int i = 0; i < m; i++) pad[i] = i < m - nd ? 1 : t->dl.shape[i - (m - nd)];
  push_sizes(L, m, pad);
  call_method(L, 1, "reshape", 1); /* 2: the padded tensor */
  for (int i = 0; i < m; i++) {
    int64_t r = i < m - k ? 1 : reps[i - (m - k)];
    if (r == 1) continue;
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
  lua_Integer n = luaL_checkinteger(L, 2);
  if (n < 0) return luaL_argerror(L, 2, "the number of repeats must not be negative");
  int flat = lua_isnoneornil(L, 3);
  lua_settop(L, 3);
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
  call_method(L, -1, "contiguous", 0);
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
    shifts[0] = luaL_checkinteger(L, 2);
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
  if (flat) {
    call_method(L, 1, "ravel", 0);
    dims[0] = 0;
  } else {
    lua_pushvalue(L, 1);
  }
  int work = lua_gettop(L);
  for (int i = 0; i < ndims; i++) {
    const dlp_Tensor *w = check_tensor(L, work, "roll");
    if (w->dl.ndim <= dims[i]) return luaL_error(L, "roll: dimension %d is gone", (int)dims[i] + 1);
    int64_t n = w->dl.shape[dims[i]];
    if (n == 0) continue;
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
  }
  if (flat) {
    lua_pushstring(L, "shape");
    lua_gettable(L, 1);
    call_method(L, work, "reshape", 1);
  } else if (lua_rawequal(L, work, 1)) { /* nothing moved: a copy all the same, as NumPy */
    call_method(L, work, "clone", 0);
  }
  return 1;
}

/* tril and triu: where(mask, t, 0), mask the elements on and below (above) the k-th diagonal of
 * the last two dimensions, made as column - row <= k (>= k) from two ranges on t's device. */
static int triangle(lua_State *L, int upper, const char *what) {
  dlp_check_no_more(L, 3, what, "a tensor and a diagonal");
  dlp_Tensor *t = check_tensor(L, 1, what);
  lua_Integer k = luaL_optinteger(L, 2, 0);
  if (t->dl.ndim < 2) return luaL_error(L, "%s: expects at least 2 dimensions, got %d", what, t->dl.ndim);
  int64_t rows = t->dl.shape[t->dl.ndim - 2], cols = t->dl.shape[t->dl.ndim - 1];
  int is_bool = t->dtype == DLP_BOOL;
  lua_settop(L, 2);
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
  lua_Integer k = luaL_optinteger(L, 2, 0);
  lua_settop(L, 2);
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
    {"concatenate", l_concatenate}, {"hstack", l_hstack}, {"vstack", l_vstack}, {NULL, NULL},
  };
  static const char *const shorthands[][2] = {
    {"float", "float32"}, {"double", "float64"}, {"half", "float16"}, {"bfloat16", "bfloat16"},
    {"long", "int64"}, {"int", "int32"}, {"short", "int16"}, {"char", "int8"}, {"byte", "uint8"}, {"bool", "bool"},
  };
  static const char *const used[] = {"cat", "mul", "sub", "le", "ge", "where", "arange", "zeros"};
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
