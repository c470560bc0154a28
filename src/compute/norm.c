/* norm: NumPy's linalg.norm, composed of the module's own reductions and elementwise functions;
 * the matrix norms of singular values (2, -2, 'nuc') from a one-sided Jacobi SVD here.
 * It is a Lua chunk (compiled once per state, when the module opens) because every step is a
 * call of another function of the module on a whole tensor: the chunk calls the tensor methods
 * as they were when the module opened (M: a script that changes dlpack.Tensor does not change
 * norm), and the work is theirs (C loops). Each reduction keeps its dims, so that the last steps
 * (sqrt, the 1/p power) round in the result's dtype, as NumPy's; the reduced dims are dropped at
 * the end. */
#include <math.h>
#include <string.h>

#include "internal.h"

static const char norm_chunk[] =
    "local what = 'dlpack.norm'\n"
    "local KIND = {bool = 'i', int8 = 'i', int16 = 'i', int32 = 'i', int64 = 'i', uint8 = 'i', uint16 = 'i',\n"
    "  uint32 = 'i', uint64 = 'i', float16 = 'f', bfloat16 = 'f', float32 = 'f', float64 = 'f',\n"
    "  complex64 = 'c', complex128 = 'c'}\n"
    "local huge = 1 / 0\n"
    "local function fail(msg) raise(what .. ': ' .. msg) end\n"
    "local function dim_of(d, nd)\n"
    "  if kind_of(d) ~= 'number' or d % 1 ~= 0 then fail('dim must be an integer') end\n"
    "  if d < 0 then d = d + nd + 1 end\n"
    "  if d < 1 or d > nd then fail('dimension ' .. d .. ' out of range (tensor has ' .. nd .. ')') end\n"
    "  return d\n"
    "end\n"
    "-- max of |x| (x >= 0) along d, 0 where nothing is reduced (NumPy's max with initial=0 in norm)\n"
    "local function amax(x, d, keep)\n"
    "  if M.numel(x) == 0 then return M.sum(x, d, keep) end\n"
    "  return (M.max(x, d, keep))\n"
    "end\n"
    "return function(t, ord, dim, keepdim, extra)\n"
    "  if extra ~= nil then fail('unexpected argument (dlpack.norm takes (t [, ord [, dim [, keepdim]]]))') end\n"
    "  local is_tensor, nd = is_tensor_fn(t)\n"
    "  if not is_tensor then fail('a tensor expected, got ' .. kind_of(t)) end\n"
    "  if keepdim ~= nil and kind_of(keepdim) ~= 'boolean' then fail('keepdim must be true, false or nil') end\n"
    "  if ord ~= nil and kind_of(ord) ~= 'number' and ord ~= 'fro' and ord ~= 'nuc' then\n"
    "    fail(\"ord must be a number, 'fro', 'nuc' or nil\")\n"
    "  end\n"
    "  local dims\n"
    "  if dim == nil then\n"
    "    if ord ~= nil and nd ~= 1 and nd ~= 2 then fail('an ord needs a 1-d or 2-d tensor, or dim') end\n"
    "    if ord == nil then dims = {} for k = 1, nd do dims[k] = k end\n"
    "    else dims = nd == 1 and {1} or {1, 2} end\n"
    "  elseif kind_of(dim) == 'number' then dims = {dim_of(dim, nd)}\n"
    "  elseif pair(dim) then\n"
    "    local d1, d2 = pair(dim)\n"
    "    dims = {dim_of(d1, nd), dim_of(d2, nd)}\n"
    "    if dims[1] == dims[2] then fail('dimension ' .. dims[1] .. ' given twice') end\n"
    "  else fail('dim must be a number, a table of two numbers or nil') end\n"
    "  t = as_cpu(t) -- pinned and managed memory: viewed as cpu memory, computed there\n"
    "  local kind = KIND[t.dtype]\n"
    "  if not kind then fail(t.dtype .. ' tensors do not compute (convert them first)') end\n"
    "  local x = kind == 'i' and M.to(t, 'float64') or t\n"
    "  local a = M.abs(x)\n"
    "  if kind == 'c' then a = M.to(a, t.dtype == 'complex64' and 'float32' or 'float64') end\n"
    "  local keep = {keepdim = true}\n"
    "  local r\n"
    "  if #dims == 1 or (dim == nil and ord == nil) then -- a vector norm (over every element without ord)\n"
    "    local d = #dims == 1 and dims[1] or dims\n"
    "    if ord == 'fro' or ord == 'nuc' then fail(\"ord '\" .. ord .. \"' is for matrices\") end\n"
    "    if ord == nil or ord == 2 then r = M.sqrt(M.sum(a * a, d, keep))\n"
    "    elseif ord == huge then r = amax(a, d, keep)\n"
    "    elseif ord == -huge then r = (M.min(a, d, keep))\n"
    "    elseif ord == 0 then r = M.sum(M.to(M.ne(a, 0), a.dtype), d, keep)\n"
    "    elseif ord == 1 then r = M.sum(a, d, keep)\n"
    "    else r = M.pow(M.sum(M.pow(a, ord), d, keep), 1 / ord) end\n"
    "  else -- a matrix norm over dims[1] (rows) and dims[2] (columns)\n"
    "    local rows, cols = dims[1], dims[2]\n"
    "    if ord == nil or ord == 'fro' then r = M.sqrt(M.sum(a * a, dims, keep))\n"
    "    elseif ord == 1 then r = amax(M.sum(a, rows, keep), cols, keep)\n"
    "    elseif ord == -1 then r = (M.min(M.sum(a, rows, keep), cols, keep))\n"
    "    elseif ord == huge then r = amax(M.sum(a, cols, keep), rows, keep)\n"
    "    elseif ord == -huge then r = (M.min(M.sum(a, cols, keep), rows, keep))\n"
    "    elseif ord == 2 or ord == -2 or ord == 'nuc' then\n"
    "      if kind == 'c' then fail('matrix ord ' .. ord .. ' of complex tensors is not supported') end\n"
    "      r = singular_norm(x, rows, cols, ord == 2 and 1 or ord == -2 and 2 or 3)\n"
    "    else fail('matrix ord ' .. kind_of(ord) .. ' ' .. (kind_of(ord) == 'number' and ord or '') ..\n"
    "              ' is not supported (fro, nuc, 1, -1, 2, -2, inf, -inf)') end\n"
    "  end\n"
    "  if keepdim then return r end\n"
    "  if dim == nil and ord == nil or (dim == nil and #dims == nd) then return M.item(M.to(r, 'cpu')) end\n"
    "  local hi, lo = dims[1], dims[2] -- one or two dims are left to drop, kept with size 1\n"
    "  if lo and lo > hi then hi, lo = lo, hi end\n"
    "  r = M.squeeze(r, hi)\n"
    "  if lo then r = M.squeeze(r, lo) end\n"
    "  return r\n"
    "end\n";

/* ---- singular values ---- */

/* The singular values of the m x n matrix (m >= n) in a (column-major, columns m apart), into
 * sv[0 .. n): one-sided Jacobi (Hestenes): pairs of columns rotated until every pair is
 * orthogonal to working precision; the singular values are then the columns' lengths. The
 * matrix is scaled by its largest magnitude first (no overflow in the sums of squares). */
static void singular_values(double *a, int64_t m, int64_t n, double *sv) {
  double scale = 0;
  for (int64_t k = 0; k < m * n; k++) scale = fabs(a[k]) > scale ? fabs(a[k]) : scale;
  if (scale > 0)
    for (int64_t k = 0; k < m * n; k++) a[k] /= scale;
  for (int sweep = 0, rotated = 1; rotated && sweep < 80; sweep++) {
    rotated = 0;
    for (int64_t p = 0; p < n - 1; p++)
      for (int64_t q = p + 1; q < n; q++) {
        double *ap = a + p * m, *aq = a + q * m, alpha = 0, beta = 0, gamma = 0;
        for (int64_t i = 0; i < m; i++) {
          alpha += ap[i] * ap[i];
          beta += aq[i] * aq[i];
          gamma += ap[i] * aq[i];
        }
        if (gamma == 0 || fabs(gamma) <= 1e-15 * sqrt(alpha * beta)) continue;
        rotated = 1;
        double zeta = (beta - alpha) / (2 * gamma);
        double t = (zeta >= 0 ? 1 : -1) / (fabs(zeta) + sqrt(1 + zeta * zeta));
        double c = 1 / sqrt(1 + t * t), s = c * t;
        for (int64_t i = 0; i < m; i++) {
          double x = ap[i], y = aq[i];
          ap[i] = c * x - s * y;
          aq[i] = s * x + c * y;
        }
      }
  }
  for (int64_t j = 0; j < n; j++) {
    double sum = 0, *aj = a + j * m;
    for (int64_t i = 0; i < m; i++) sum += aj[i] * aj[i];
    sv[j] = sqrt(sum) * scale;
  }
}

/* singular_norm(x, rows, cols, which): the norms of the matrices of the real tensor x over its
 * dims rows and cols (1-based; the others batch): which 1 the largest singular value (ord 2), 2
 * the smallest (-2), 3 their sum ('nuc'), computed in float64 on the host (a CUDA tensor is
 * copied there, the result back), as a tensor of x's dtype (float64 for integers, as the chunk
 * gives them) and shape, rows and cols kept with size 1. NumPy's edges: an empty matrix gives 0
 * (ord 2, 'nuc') or raises (-2), NaN raises (its SVD does not converge), infinity gives NaN. */
static int l_singular_norm(lua_State *L) {
  const char *what = "dlpack.norm";
  DLDevice cpu = {kDLCPU, 0};
  dlp_Tensor *x = dlp_tensor_check(L, 1);
  int rows = (int)dlp_checkinteger(L, 2) - 1, cols = (int)dlp_checkinteger(L, 3) - 1;
  int which = (int)dlp_checkinteger(L, 4), ndim = x->dl.ndim, dtype = x->dtype;
  DLDevice on = x->dl.device;
  int64_t m = x->dl.shape[rows], n = x->dl.shape[cols], shape[DLP_MAX_NDIM], batch = 1;
  lua_settop(L, 1);
  if (which == 2 && (m == 0 || n == 0)) { /* errors without a position, as the chunk's raise gives them */
    lua_pushfstring(L, "%s: ord -2 of an empty matrix (%I x %I): it has no singular values", what, (lua_Integer)m,
                    (lua_Integer)n);
    return lua_error(L);
  }
  /* a view with the batch dims first, then rows, then cols: walked in row-major order */
  dlp_Tensor *v = dlp_view_new(L, 1, ndim, what); /* 2 */
  for (int i = 0, k = 0; i < ndim; i++) {
    if (i == rows || i == cols) continue;
    v->dl.shape[k] = x->dl.shape[i];
    v->dl.strides[k++] = x->dl.strides[i];
    batch *= x->dl.shape[i];
  }
  v->dl.shape[ndim - 2] = m, v->dl.strides[ndim - 2] = x->dl.strides[rows];
  v->dl.shape[ndim - 1] = n, v->dl.strides[ndim - 1] = x->dl.strides[cols];
  dlp_tensor_seal(L, v, what);
  for (int i = 0; i < ndim; i++) shape[i] = i == rows || i == cols ? 1 : x->dl.shape[i];
  dlp_Tensor *mats = dlp_clone(L, 2, DLP_FLOAT64, cpu, NULL, what);                        /* 3 */
  dlp_Tensor *r = dlp_tensor_new(L, DLP_FLOAT64, 0, cpu, ndim, shape, 0, what);            /* 4 */
  int64_t tall = m >= n ? m : n, wide = m >= n ? n : m, work_n = tall * wide + wide;
  dlp_Tensor *work = dlp_tensor_new(L, DLP_FLOAT64, 0, cpu, 1, &work_n, 0, what);          /* 5 */
  /* from here on only the module's own tensors are read */
  const double *all = (const double *)(const void *)dlp_first_element(mats);
  double *out = (double *)(void *)dlp_first_element(r), *a = (double *)(void *)dlp_first_element(work);
  double *sv = a + tall * wide;
  for (int64_t b = 0; b < batch; b++) {
    if (wide == 0) { /* an empty matrix: no singular value, and nothing to walk (its other size may be 2^62) */
      out[b] = 0;
      continue;
    }
    const double *mat = all + b * m * n; /* row-major m x n */
    int nan = 0;
    for (int64_t i = 0; i < m; i++) /* column-major tall x wide: the matrix, or its transpose */
      for (int64_t j = 0; j < n; j++) {
        double e = mat[i * n + j];
        nan |= e != e;
        if (m >= n) a[j * m + i] = e;
        else a[i * n + j] = e;
      }
    if (nan) {
      lua_pushfstring(L, "%s: the singular values of a matrix holding NaN are not defined (NumPy: SVD did not "
                      "converge)", what);
      return lua_error(L);
    }
    int inf = 0;
    for (int64_t k = 0; k < tall * wide; k++) inf |= isinf(a[k]);
    singular_values(a, tall, wide, sv);
    double result = which == 2 ? INFINITY : 0;
    for (int64_t j = 0; j < wide; j++) {
      if (which == 1) result = sv[j] > result ? sv[j] : result;
      else if (which == 2) result = sv[j] < result ? sv[j] : result;
      else result += sv[j];
    }
    out[b] = inf ? NAN : result;
  }
  dlp_clone(L, 4, dtype, on, NULL, what);
  return 1;
}

/* The chunk's environment: no global of the state (a host may open no library), these only. */
static int l_is_tensor(lua_State *L) { /* whether v is a tensor of this module, and its dims */
  dlp_Tensor *t = dlp_tensor_test(L, 1);
  lua_pushboolean(L, t != NULL);
  lua_pushinteger(L, t ? t->dl.ndim : 0);
  return 2;
}
static int l_raise(lua_State *L) { /* the message, without a position (as the C functions') */
  lua_settop(L, 1);
  return lua_error(L);
}
static int l_kind_of(lua_State *L) {
  lua_pushstring(L, luaL_typename(L, 1));
  return 1;
}
static int l_as_cpu(lua_State *L) { /* t, or its cpu view when pinned or managed memory */
  lua_settop(L, 1);
  dlp_host_as_cpu(L, 1, "dlpack.norm");
  return 1;
}
static int l_pair(lua_State *L) { /* a plain table of two entries: them, read raw; else nothing */
  if (!lua_istable(L, 1) || lua_getmetatable(L, 1) || lua_rawlen(L, 1) != 2) return 0;
  lua_rawgeti(L, 1, 1);
  lua_rawgeti(L, 1, 2);
  return 2;
}

void dlp_norm_register(lua_State *L, int module, int methods, int meta) {
  static const luaL_Reg env[] = {
      {"is_tensor_fn", l_is_tensor}, {"raise", l_raise}, {"kind_of", l_kind_of}, {"pair", l_pair},
      {"singular_norm", l_singular_norm}, {"as_cpu", l_as_cpu}, {NULL, NULL},
  };
  (void)meta;
  if (luaL_loadbuffer(L, norm_chunk, sizeof norm_chunk - 1, "=dlpack.norm") != LUA_OK) lua_error(L);
  lua_newtable(L);
  dlp_push_metatable(L); /* the module's convention: the tensor metatable as upvalue 1 */
  luaL_setfuncs(L, env, 1);
  dlp_push_methods(L); /* M */
  lua_setfield(L, -2, "M");
#if LUA_VERSION_NUM >= 502
  lua_setupvalue(L, -2, 1); /* _ENV */
#else
  lua_setfenv(L, -2);
#endif
  lua_call(L, 0, 1);
  lua_pushvalue(L, -1);
  lua_setfield(L, module, "norm");
  lua_setfield(L, methods, "norm");
}
