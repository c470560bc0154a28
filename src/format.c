/* Tensors to and from Lua values: tensor{...}, totable, tobytes, frombytes, tostring. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* ---- dlpack.tensor(value [, dtype]) ---- */

/* Walk the first entries to find the shape of nested table at idx. */
static int nested_shape(lua_State *L, int idx, int64_t *shape) {
  int ndim = 0;
  lua_pushvalue(L, idx);
  while (lua_type(L, -1) == LUA_TTABLE) {
    if (ndim == DLP_MAX_NDIM) luaL_error(L, "dlpack.tensor: more than %d levels of nesting", DLP_MAX_NDIM);
    shape[ndim] = (int64_t)luaL_len(L, -1);
    if (shape[ndim++] == 0) break;
    lua_geti(L, -1, 1);
    lua_remove(L, -2);
  }
  lua_pop(L, 1);
  return ndim;
}

enum { SEEN_BOOL = 1, SEEN_INT = 2, SEEN_FLOAT = 4 };

/* Check that the table at the top has the shape from level `dim` on; note the kinds of leaves. */
static void check_nested(lua_State *L, int ndim, const int64_t *shape, int dim, int *seen) {
  if (dim == ndim) {
    int type = lua_type(L, -1);
    if (type == LUA_TBOOLEAN) *seen |= SEEN_BOOL;
    else if (type == LUA_TNUMBER) *seen |= lua_isinteger(L, -1) ? SEEN_INT : SEEN_FLOAT;
    else if (type == LUA_TTABLE) luaL_error(L, "dlpack.tensor: ragged nested tables (too deep at level %d)", dim + 1);
    else luaL_error(L, "dlpack.tensor: elements must be numbers or booleans, got %s", luaL_typename(L, -1));
    return;
  }
  if (lua_type(L, -1) != LUA_TTABLE || luaL_len(L, -1) != shape[dim])
    luaL_error(L, "dlpack.tensor: ragged nested tables (level %d should have %I entries)", dim + 1,
               (lua_Integer)shape[dim]);
  luaL_checkstack(L, 2, "nesting too deep");
  for (int64_t i = 1; i <= shape[dim]; i++) {
    lua_geti(L, -1, i);
    check_nested(L, ndim, shape, dim + 1, seen);
    lua_pop(L, 1);
  }
}

/* Write the leaves of the table at the top into contiguous memory at *p. */
static void write_nested(lua_State *L, int ndim, const int64_t *shape, int dim, int dtype, char **p) {
  if (dim == ndim) {
    dlp_check_element(L, -1, dtype, *p, "dlpack.tensor");
    *p += dlp_dtypes[dtype].itemsize;
    return;
  }
  for (int64_t i = 1; i <= shape[dim]; i++) {
    lua_geti(L, -1, i);
    write_nested(L, ndim, shape, dim + 1, dtype, p);
    lua_pop(L, 1);
  }
}

static int l_tensor(lua_State *L) {
  int64_t shape[DLP_MAX_NDIM];
  int seen = 0, dtype, ndim;
  DLDevice cpu = {kDLCPU, 0};
  dlp_Tensor *src = dlp_tensor_test(L, 1);
  luaL_checkany(L, 1);
  if (src) {
    if (!src->owner) return luaL_argerror(L, 1, "tensor was released");
    dlp_check_host(L, src, "dlpack.tensor");
    dlp_clone(L, src, dlp_opt_dtype(L, 2, src->dtype), cpu);
    return 1;
  }
  ndim = nested_shape(L, 1, shape);
  lua_pushvalue(L, 1);
  check_nested(L, ndim, shape, 0, &seen);
  lua_pop(L, 1);
  if ((seen & SEEN_BOOL) && (seen & (SEEN_INT | SEEN_FLOAT)))
    return luaL_error(L, "dlpack.tensor: booleans mixed with numbers (pass a dtype?)");
  dtype = seen == SEEN_BOOL ? DLP_BOOL : seen == SEEN_INT ? DLP_INT64 : DLP_FLOAT64;
  dtype = dlp_opt_dtype(L, 2, dtype);
  dlp_check_access(L, dtype);
  dlp_Tensor *t = dlp_tensor_new(L, dtype, cpu, ndim, shape, 0);
  char *p = dlp_first_element(t);
  lua_pushvalue(L, 1);
  write_nested(L, ndim, shape, 0, dtype, &p);
  lua_pop(L, 1);
  return 1;
}

/* ---- totable ---- */

static void push_nested(lua_State *L, const dlp_Tensor *t, int dim, const char *p) {
  int64_t step = t->dl.strides[dim] * (int64_t)dlp_dtypes[t->dtype].itemsize;
  luaL_checkstack(L, 3, "tensor too deep");
  lua_createtable(L, (int)(t->dl.shape[dim] < 1 << 24 ? t->dl.shape[dim] : 0), 0);
  for (int64_t i = 0; i < t->dl.shape[dim]; i++, p += step) {
    if (dim + 1 == t->dl.ndim) dlp_push_element(L, t->dtype, p);
    else push_nested(L, t, dim + 1, p);
    lua_rawseti(L, -2, i + 1);
  }
}

static int l_totable(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  dlp_check_host(L, t, "totable");
  dlp_check_access(L, t->dtype);
  if (t->dl.ndim == 0) dlp_push_element(L, t->dtype, dlp_first_element(t));
  else push_nested(L, t, 0, dlp_first_element(t));
  return 1;
}

/* ---- bytes ---- */

typedef struct BytesState {
  luaL_Buffer *b;
  size_t itemsize;
} BytesState;

static void add_bytes(char *p, void *ud) {
  BytesState *s = ud;
  luaL_addlstring(s->b, p, s->itemsize);
}

static int l_tobytes(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  int64_t n = dlp_numel(t);
  dlp_check_host(L, t, "tobytes");
  if (dlp_is_contiguous(t)) {
    lua_pushlstring(L, n ? dlp_first_element(t) : "", dlp_storage_bytes(t->dtype, n, t->flags));
  } else {
    luaL_Buffer b;
    BytesState s = {&b, dlp_dtypes[t->dtype].itemsize};
    luaL_buffinit(L, &b);
    dlp_foreach(t, add_bytes, &s);
    luaL_pushresult(&b);
  }
  return 1;
}

static int l_frombytes(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  int dtype = dlp_check_dtype(L, 2);
  int64_t shape[DLP_MAX_NDIM];
  int ndim = 1;
  DLDevice cpu = {kDLCPU, 0};
  if (lua_isnoneornil(L, 3)) shape[0] = (int64_t)(len * 8 / dlp_dtypes[dtype].bits);
  else dlp_check_shape(L, 3, &ndim, shape);
  int64_t numel = 1;
  for (int i = 0; i < ndim; i++) numel *= shape[i];
  if (dlp_storage_bytes(dtype, numel, 0) != len)
    return luaL_error(L, "dlpack.frombytes: %I bytes do not make %I elements of %s", (lua_Integer)len,
                      (lua_Integer)numel, dlp_dtypes[dtype].name);
  dlp_Tensor *t = dlp_tensor_new(L, dtype, cpu, ndim, shape, 0);
  if (len) memcpy(dlp_first_element(t), s, len);
  return 1;
}

/* ---- tostring ---- */

#define SUMMARY_THRESHOLD 1000 /* more elements than this are shown as their corners */
#define EDGE_ITEMS 3

static void add_element(luaL_Buffer *b, lua_State *L, int dtype, const char *p) {
  char buf[64];
  dlp_Scalar s;
  dlp_load(dtype, p, &s);
  if (dtype == DLP_BOOL) luaL_addstring(b, s.i ? "true" : "false");
  else if (s.kind == DLP_S_INT) snprintf(buf, sizeof buf, "%lld", (long long)s.i), luaL_addstring(b, buf);
  else if (s.kind == DLP_S_UINT) snprintf(buf, sizeof buf, "%llu", (unsigned long long)s.u), luaL_addstring(b, buf);
  else {
    snprintf(buf, sizeof buf, "%.6g", s.re);
    if (!strpbrk(buf, ".eni")) strcat(buf, ".0"); /* show floats as floats, as Lua does */
    luaL_addstring(b, buf);
    if (s.kind == DLP_S_COMPLEX) {
      snprintf(buf, sizeof buf, "%+.6gi", s.im);
      luaL_addstring(b, buf);
    }
  }
  (void)L;
}

/* ", " between numbers; ",\n" and indentation between rows */
static void add_separator(luaL_Buffer *b, int last_dim, int column) {
  luaL_addchar(b, ',');
  if (last_dim) {
    luaL_addchar(b, ' ');
    return;
  }
  luaL_addchar(b, '\n');
  for (int k = 0; k < column; k++) luaL_addchar(b, ' ');
}

static void add_nested(luaL_Buffer *b, lua_State *L, const dlp_Tensor *t, int dim, const char *p,
                       int summarise, int indent) {
  int64_t n = t->dl.shape[dim];
  int64_t step = t->dl.strides[dim] * (int64_t)dlp_dtypes[t->dtype].itemsize;
  int last_dim = dim + 1 == t->dl.ndim;
  luaL_addchar(b, '{');
  for (int64_t i = 0; i < n; i++) {
    if (summarise && n > 2 * EDGE_ITEMS && i == EDGE_ITEMS) {
      luaL_addstring(b, "...");
      add_separator(b, last_dim, indent + dim + 1);
      i = n - EDGE_ITEMS;
    }
    if (last_dim) add_element(b, L, t->dtype, p + i * step);
    else add_nested(b, L, t, dim + 1, p + i * step, summarise, indent);
    if (i + 1 < n) add_separator(b, last_dim, indent + dim + 1);
  }
  luaL_addchar(b, '}');
}

static int l_tostring(lua_State *L) {
  static const char prefix[] = "dlpack.Tensor(";
  dlp_Tensor *t = luaL_checkudata(L, 1, DLPACK_LUA_TENSOR_MT);
  luaL_Buffer b;
  if (!t->owner) {
    lua_pushstring(L, "dlpack.Tensor(released)");
    return 1;
  }
  luaL_buffinit(L, &b);
  luaL_addstring(&b, prefix);
  if (!dlp_device_is_host(t->dl.device) || !(dlp_dtypes[t->dtype].access || t->dtype <= DLP_COMPLEX128)) {
    luaL_addstring(&b, "<elements not shown>");
  } else if (t->dl.ndim == 0) {
    add_element(&b, L, t->dtype, dlp_first_element(t));
  } else {
    add_nested(&b, L, t, 0, dlp_first_element(t), dlp_numel(t) > SUMMARY_THRESHOLD, (int)sizeof prefix - 1);
  }
  luaL_addstring(&b, ", shape={");
  for (int i = 0; i < t->dl.ndim; i++) {
    char buf[32];
    snprintf(buf, sizeof buf, i ? ", %lld" : "%lld", (long long)t->dl.shape[i]);
    luaL_addstring(&b, buf);
  }
  luaL_addstring(&b, "}, dtype=");
  luaL_addstring(&b, dlp_dtypes[t->dtype].name);
  luaL_addstring(&b, ", device=");
  dlp_push_device_name(L, t->dl.device);
  luaL_addvalue(&b);
  if (t->flags & DLP_FLAG_READ_ONLY) luaL_addstring(&b, ", readonly");
  luaL_addchar(&b, ')');
  luaL_pushresult(&b);
  return 1;
}

void dlp_format_register(lua_State *L, int module, int methods, int meta) {
  static const luaL_Reg functions[] = {{"tensor", l_tensor}, {"frombytes", l_frombytes}, {NULL, NULL}};
  static const luaL_Reg method_list[] = {{"totable", l_totable}, {"tobytes", l_tobytes}, {NULL, NULL}};
  dlp_register(L, module, functions);
  dlp_register(L, methods, method_list);
  lua_pushcfunction(L, l_tostring);
  lua_setfield(L, meta, "__tostring");
}
