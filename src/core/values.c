/* Lua values <-> tensors: dlpack.tensor{...} (tables), totable, tobytes, frombytes, tostring. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* ---- dlpack.tensor(value [, dtype]) ----
 * Nested tables are read raw (lua_rawlen, lua_rawgeti): no metamethod runs. They are walked
 * twice, to infer the dtype and then to write; finalizers may change them in between (the
 * tensor's allocation runs the collector), so the second walk checks everything again. */

/* The shape of the nested table at idx, from its first entries. */
static int nested_shape(lua_State *L, int idx, int64_t *shape) {
  int ndim = 0;
  int64_t numel = 1;
  lua_pushvalue(L, idx);
  while (lua_type(L, -1) == LUA_TTABLE) {
    if (ndim == DLP_MAX_NDIM) luaL_error(L, "dlpack.tensor: more than %d levels of nesting", DLP_MAX_NDIM);
    shape[ndim] = (int64_t)lua_rawlen(L, -1);
    if (!dlp_mul(numel, shape[ndim], &numel))
      luaL_error(L, "dlpack.tensor: the nested tables have more elements than fit in 64 bits");
    if (shape[ndim++] == 0) break;
    lua_rawgeti(L, -1, 1);
    lua_remove(L, -2);
  }
  lua_pop(L, 1);
  return ndim;
}

enum { SEEN_BOOL = 1, SEEN_INT = 2, SEEN_FLOAT = 4 };

static void check_row(lua_State *L, const int64_t *shape, int dim) {
  if (lua_type(L, -1) != LUA_TTABLE || (int64_t)lua_rawlen(L, -1) != shape[dim])
    luaL_error(L, "dlpack.tensor: ragged nested tables (level %d should have %I entries)", dim + 1,
               (lua_Integer)shape[dim]);
}

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
  check_row(L, shape, dim);
  luaL_checkstack(L, 2, "nesting too deep");
  for (int64_t i = 1; i <= shape[dim]; i++) {
    lua_rawgeti(L, -1, i);
    check_nested(L, ndim, shape, dim + 1, seen);
    lua_pop(L, 1);
  }
}

/* Write the leaves of the table at the top into contiguous memory at *p (a tensor only this
 * function holds), checking shape and values again. */
static void write_nested(lua_State *L, int ndim, const int64_t *shape, int dim, int dtype, char **p) {
  if (dim == ndim) {
    if (lua_type(L, -1) == LUA_TTABLE) luaL_error(L, "dlpack.tensor: ragged nested tables (too deep at level %d)", dim + 1);
    dlp_check_element(L, -1, dtype, *p, "dlpack.tensor");
    *p += dlp_dtypes[dtype].itemsize;
    return;
  }
  check_row(L, shape, dim);
  for (int64_t i = 1; i <= shape[dim]; i++) {
    lua_rawgeti(L, -1, i);
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
  dlp_check_no_more(L, 3, "dlpack.tensor", "a value and a dtype; move the tensor with t:to(device)");
  if (src) {
    if (!src->owner) return luaL_argerror(L, 1, "tensor was released");
    dlp_check_host(L, src, "dlpack.tensor");
    dlp_clone(L, 1, dlp_opt_dtype(L, 2, src->dtype), cpu, NULL, "dlpack.tensor");
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
  dlp_Tensor *t = dlp_tensor_new(L, dtype, 0, cpu, ndim, shape, 0, "dlpack.tensor");
  char *p = dlp_first_element(t);
  lua_pushvalue(L, 1);
  write_nested(L, ndim, shape, 0, dtype, &p);
  lua_pop(L, 1);
  return 1;
}

/* ---- totable and tobytes: they allocate while they read, so they read a private alias ---- */

static void push_nested(lua_State *L, const dlp_Tensor *t, int dim, const char *p) {
  int64_t step = dlp_walk_stride(t, dim);
  luaL_checkstack(L, 3, "tensor too deep");
  lua_createtable(L, (int)(t->dl.shape[dim] < 1 << 24 ? t->dl.shape[dim] : 0), 0);
  for (int64_t i = 0; i < t->dl.shape[dim]; i++, p = dlp_offset(p, step)) {
    if (dim + 1 == t->dl.ndim) dlp_push_element(L, t->dtype, p);
    else push_nested(L, t, dim + 1, p);
    lua_rawseti(L, -2, i + 1);
  }
}

static int l_totable(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  dlp_check_no_more(L, 2, "totable", "no arguments");
  dlp_check_host(L, t, "totable");
  dlp_check_access(L, t->dtype);
  /* an empty tensor may have a size of 2^63 - 1 in front of its 0: refused, not walked for ever */
  for (int i = 0; i < t->dl.ndim && t->dl.shape[i] > 0; i++)
    if (t->dl.shape[i] > INT_MAX)
      return luaL_error(L, "totable: dimension %d has %I entries, more than a Lua table holds", i + 1,
                        (lua_Integer)t->dl.shape[i]);
  lua_settop(L, 1);
  dlp_Tensor *held = dlp_tensor_alias(L, 1, t->dl.device, "totable"); /* at 2 */
  if (held->dl.ndim == 0) dlp_push_element(L, held->dtype, dlp_first_element(held));
  else push_nested(L, held, 0, dlp_first_element(held));
  dlp_tensor_release(held);
  return 1;
}

#define SMALL_GATHER 1024 /* strided tensors of up to this many bytes are gathered on the C stack */

static int l_tobytes(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  dlp_check_no_more(L, 2, "tobytes", "no arguments");
  dlp_check_host(L, t, "tobytes");
  lua_settop(L, 1);
  dlp_Tensor *held = dlp_tensor_alias(L, 1, t->dl.device, "tobytes"); /* at 2 */
  int64_t n = dlp_numel(held), nbytes = dlp_nbytes(held);
  /* a view with stride 0 may have more bytes than int64 counts ({1} expanded to {2^62}) */
  if (nbytes < 0 || (uint64_t)nbytes > PTRDIFF_MAX / 2)
    return luaL_error(L, "tobytes: %I elements of %s are too many bytes", (lua_Integer)n, dlp_dtypes[held->dtype].name);
  size_t bytes = (size_t)nbytes;
  if (dlp_is_contiguous(held)) {
    lua_pushlstring(L, n ? dlp_first_element(held) : "", bytes);
  } else if (bytes <= SMALL_GATHER) {
    _Alignas(64) char small[SMALL_GATHER];
    dlp_gather(small, held);
    lua_pushlstring(L, small, bytes);
#if LUA_VERSION_NUM >= 505
  } else if (dlp_gc_runs_normally(L)) {
    /* Lua 5.5 takes a block from the state's allocator as a string's own (an external string):
     * the bytes are gathered once, where the string will live. The collector does not count
     * such a block: a step tells it of the bytes, as luaL_pushresult does. That step would run a
     * collector the script stopped: then the block below serves. */
    void *ud;
    lua_Alloc alloc = lua_getallocf(L, &ud);
    char *block = alloc(ud, NULL, LUA_TSTRING, bytes + 1);
    if (!block) return luaL_error(L, "tobytes: not enough memory for %I bytes", (lua_Integer)bytes);
    dlp_gather(block, held);
    block[bytes] = '\0';
    lua_pushexternalstring(L, block, bytes, alloc, ud); /* on a memory error it frees the block */
    lua_gc(L, LUA_GCSTEP, bytes);
#endif
  } else {
    /* gathered into a scratch block that a private tensor holds (so that an error cannot leak
     * it) and that is freed at once: the collector never sees it (packed tensors are contiguous) */
    dlp_Tensor *scratch = dlp_tensor_push(L, 0);
    if (!(scratch->owner = dlp_owner_new_memory(bytes, 0)))
      return luaL_error(L, "tobytes: not enough memory for %I bytes", (lua_Integer)bytes);
    dlp_gather(scratch->owner->memory, held);
    lua_pushlstring(L, scratch->owner->memory, bytes);
    dlp_tensor_release(scratch);
  }
  dlp_tensor_release(held);
  return 1;
}

static int l_frombytes(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  int dtype = dlp_check_dtype(L, 2);
  int64_t shape[DLP_MAX_NDIM], numel, bytes;
  dlp_check_no_more(L, 4, "dlpack.frombytes", "a string, a dtype and a shape");
  int ndim = 1, bits = dlp_dtypes[dtype].bits;
  const char *name = dlp_dtypes[dtype].name;
  DLDevice cpu = {kDLCPU, 0};
  if ((uint64_t)len > INT64_MAX / 2) return luaL_argerror(L, 1, "string too long");
  if (lua_isnoneornil(L, 3)) {
    shape[0] = (int64_t)len / bits * 8 + (int64_t)len % bits * 8 / bits; /* floor(len * 8 / bits) */
    /* only whole-byte dtypes can leave bytes over: 4- and 6-bit elements fill any string */
    if (dlp_bytes_of(dtype, shape[0], 0, &bytes) && bytes != (int64_t)len)
      return luaL_argerror(L, 1, lua_pushfstring(L, "the string has %I bytes, not a whole number of %s elements (%d "
                                                "bytes each): its length must be a multiple of %d",
                                                (lua_Integer)len, name, bits / 8, bits / 8));
  } else {
    ndim = dlp_check_shape(L, 3, shape);
  }
  dlp_numel_of(ndim, shape, &numel); /* fits: counted from len, or dlp_check_shape */
  if (!dlp_bytes_of(dtype, numel, 0, &bytes) || bytes != (int64_t)len)
    return luaL_argerror(L, 1, lua_pushfstring(L, "the shape %s holds %I %s element%s (%s), but the string has %I bytes",
                                              dlp_push_shape(L, ndim, shape), (lua_Integer)numel, name, numel == 1 ? "" : "s",
                                              dlp_bytes_of(dtype, numel, 0, &bytes)
                                                  ? lua_pushfstring(L, "%I bytes", (lua_Integer)bytes)
                                                  : "more bytes than fit in 64 bits",
                                              (lua_Integer)len));
  dlp_Tensor *t = dlp_tensor_new(L, dtype, 0, cpu, ndim, shape, 0, "dlpack.frombytes");
  if (len) memcpy(dlp_first_element(t), s, len); /* s is an argument: anchored */
  return 1;
}

/* ---- tostring ---- */

#define SUMMARY_THRESHOLD 1000 /* more elements (or rows) than this are shown as their corners */
#define EDGE_ITEMS 3
#define MAX_SHOWN 1000         /* elements and rows shown at most, whatever the dimensions */

#define LINE_WIDTH 80          /* no line is longer */
#define PREFIX "dlpack.Tensor("
#define PREFIX_LEN 14
#define ELEMENT_WIDTH 27       /* the widest element, a complex128: -1.79769e+308-1.79769e+308i */
/* Nested braces are shown up to this many dimensions (19): the deepest row then holds an element
 * of any width with every brace around it on one line. Deeper tensors are shown flattened. */
#define MAX_NESTED ((LINE_WIDTH - PREFIX_LEN - ELEMENT_WIDTH - 1) / 2)
#define FLAT_MARK "<flattened> "

/* A float as %.6g, but NaN as "nan" and the infinities as "inf" and "-inf" whatever the C
 * library prints (glibc gives "-nan" for the NaN that 0/0 makes); sign: "+" before positives. */
static void format_float(char *buf, size_t size, double x, int sign) {
  if (isnan(x)) snprintf(buf, size, "%snan", sign ? "+" : "");
  else if (isinf(x)) snprintf(buf, size, "%sinf", x < 0 ? "-" : sign ? "+" : "");
  else {
    snprintf(buf, size, sign ? "%+.6g" : "%.6g", x);
    if (!sign && !strpbrk(buf, ".e")) strcat(buf, ".0"); /* show floats as floats, as Lua does */
  }
}

/* One element as text into buf (at least 96 bytes); returns its length (ELEMENT_WIDTH at most). */
static size_t format_element(char *buf, int dtype, const char *p) {
  dlp_Scalar s;
  dlp_load(dtype, p, &s);
  if (dtype == DLP_BOOL) strcpy(buf, s.i ? "true" : "false");
  else if (s.kind == DLP_S_INT) snprintf(buf, 48, "%lld", (long long)s.i);
  else if (s.kind == DLP_S_UINT) snprintf(buf, 48, "%llu", (unsigned long long)s.u);
  else {
    format_float(buf, 48, s.re, 0);
    if (s.kind == DLP_S_COMPLEX) {
      size_t n = strlen(buf);
      format_float(buf + n, 47, s.im, 1);
      strcat(buf, "i");
    }
  }
  return strlen(buf);
}

typedef struct Printer {
  luaL_Buffer *b;
  const dlp_Tensor *t;
  int summarise;
  int budget; /* elements and rows left to show */
  int column; /* of the next character on the current line */
} Printer;

static void add_text(Printer *pr, const char *s, size_t n) {
  luaL_addlstring(pr->b, s, n);
  pr->column += (int)n;
}

/* A new line, indented to `column`. */
static void add_newline(Printer *pr, int column) {
  luaL_addchar(pr->b, '\n');
  for (int k = 0; k < column; k++) luaL_addchar(pr->b, ' ');
  pr->column = column;
}

/* What goes before an item of n characters that `after` characters follow on its line (a comma,
 * or the braces that close there and what comes after them): nothing before the first item;
 * ", " between items on one line, or ",\n" when the item and what follows would pass the line
 * width (always, when `wrap` is 0: between rows). New lines are indented to `column`. */
static void separate(Printer *pr, int *first, int wrap, int column, size_t n, int after) {
  if (*first) {
    *first = 0;
    return;
  }
  add_text(pr, ",", 1);
  if (!wrap || pr->column + 1 + (int)n + after > LINE_WIDTH) add_newline(pr, column);
  else add_text(pr, " ", 1);
}

/* The row at p of dimension dim, in braces; `tail` characters follow its closing brace on its line. */
static void add_nested(Printer *pr, int dim, const char *p, int tail) {
  const dlp_Tensor *t = pr->t;
  int64_t n = t->dl.shape[dim];
  int64_t step = dlp_walk_stride(t, dim);
  int last_dim = dim + 1 == t->dl.ndim, column = PREFIX_LEN + dim + 1, first = 1;
  char buf[96];
  add_text(pr, "{", 1);
  for (int64_t i = 0; i < n; i++) {
    if (pr->budget <= 0 || (pr->summarise && n > 2 * EDGE_ITEMS && i == EDGE_ITEMS)) {
      int ends = pr->budget <= 0; /* then "..." ends the row */
      separate(pr, &first, last_dim, column, 3, ends ? 1 + tail : 1);
      add_text(pr, "...", 3);
      if (ends) break;
      i = n - EDGE_ITEMS;
    }
    pr->budget--;
    int after = i == n - 1 ? 1 + tail : 1;
    if (last_dim) {
      size_t len = format_element(buf, t->dtype, dlp_offset(p, i * step));
      separate(pr, &first, 1, column, len, after);
      add_text(pr, buf, len);
    } else {
      separate(pr, &first, 0, column, 0, 0);
      add_nested(pr, dim + 1, dlp_offset(p, i * step), after);
    }
  }
  add_text(pr, "}", 1);
}

/* A tensor of more than MAX_NESTED dimensions: its elements in row-major order, in one pair of
 * braces (the first and last few of more than SUMMARY_THRESHOLD). */
static void add_flat(Printer *pr) {
  const dlp_Tensor *t = pr->t;
  int64_t n = dlp_numel(t);
  int first = 1, column = PREFIX_LEN + (int)sizeof FLAT_MARK; /* after the mark and its '{' */
  char buf[96];
  add_text(pr, FLAT_MARK "{", sizeof FLAT_MARK); /* sizeof counts the NUL: one more, the '{' */
  for (int64_t k = 0; k < n; k++) {
    int64_t rest = k, off = 0;
    if (n > SUMMARY_THRESHOLD && k == EDGE_ITEMS) {
      separate(pr, &first, 1, column, 3, 1);
      add_text(pr, "...", 3);
      k = n - EDGE_ITEMS;
      rest = k;
    }
    for (int d = t->dl.ndim - 1; d >= 0; d--) {
      off += rest % t->dl.shape[d] * dlp_walk_stride(t, d);
      rest /= t->dl.shape[d];
    }
    size_t len = format_element(buf, t->dtype, dlp_offset(dlp_first_element(t), off));
    separate(pr, &first, 1, column, len, k == n - 1 ? 2 : 1);
    add_text(pr, buf, len);
  }
  add_text(pr, "}", 1);
}

/* More than SUMMARY_THRESHOLD elements, or rows (an empty {10^6, 0} has a million rows). */
static int is_large(const dlp_Tensor *t) {
  int64_t rows = 1;
  for (int i = 0; i + 1 < t->dl.ndim; i++)
    if (t->dl.shape[i] > 0 && !dlp_mul(rows, t->dl.shape[i], &rows)) return 1;
  return dlp_numel(t) > SUMMARY_THRESHOLD || rows > SUMMARY_THRESHOLD;
}

/* ", key=value" after the description's shape: on its line when it fits with the ',' or ')' after
 * it, else on a new line under the first element. */
static void add_part(Printer *pr, const char *key, const char *value) {
  size_t k = strlen(key), v = strlen(value);
  add_text(pr, ",", 1);
  if (pr->column + 1 + (int)(k + v) + 1 > LINE_WIDTH) add_newline(pr, PREFIX_LEN);
  else add_text(pr, " ", 1);
  add_text(pr, key, k);
  add_text(pr, value, v);
}

/* "shape={2, 3}, dtype=float32, device=cpu[, readonly])" after the elements and their comma: on
 * their line when it all fits, else from a new line under the first element, where a long shape
 * wraps under its first size and the other parts go on new lines when they do not fit. */
static void add_description(Printer *pr, const char *device) {
  const dlp_Tensor *t = pr->t;
  const char *dtype = dlp_dtypes[t->dtype].name;
  int readonly = (t->flags & DLP_FLAG_READ_ONLY) != 0, column;
  size_t length = strlen("shape={}, dtype=, device=)") + strlen(dtype) + strlen(device) + (readonly ? 10 : 0);
  char size[24];
  for (int i = 0; i < t->dl.ndim; i++)
    length += (size_t)snprintf(size, sizeof size, "%lld", (long long)t->dl.shape[i]) + (i ? 2 : 0);
  if (pr->column + 1 + length > LINE_WIDTH) add_newline(pr, PREFIX_LEN);
  else add_text(pr, " ", 1);
  add_text(pr, "shape={", 7);
  column = pr->column;
  for (int i = 0; i < t->dl.ndim; i++) {
    int n = snprintf(size, sizeof size, "%lld", (long long)t->dl.shape[i]);
    if (i) add_text(pr, ",", 1);
    if (i && pr->column + 1 + n + (i + 1 < t->dl.ndim ? 1 : 2) > LINE_WIDTH) add_newline(pr, column); /* "," or "}," */
    else if (i) add_text(pr, " ", 1);
    add_text(pr, size, (size_t)n);
  }
  add_text(pr, "}", 1);
  add_part(pr, "dtype=", dtype);
  add_part(pr, "device=", device);
  if (readonly) add_part(pr, "readonly", "");
  add_text(pr, ")", 1);
}

static int l_tostring(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_arg(L, 1);
  luaL_Buffer b;
  char buf[96];
  if (!t->owner) {
    lua_pushstring(L, "dlpack.Tensor(released)");
    return 1;
  }
  lua_settop(L, 1);
  dlp_Tensor *held = dlp_tensor_alias(L, 1, t->dl.device, "tostring"); /* at 2: it allocates as it reads */
  dlp_push_device_name(L, held->dl.device);                                /* at 3 */
  luaL_buffinit(L, &b);
  Printer pr = {&b, held, is_large(held), MAX_SHOWN, 0};
  add_text(&pr, PREFIX, PREFIX_LEN);
  if (!dlp_device_is_host(held->dl.device) || held->dtype > DLP_COMPLEX128) {
    add_text(&pr, "<elements not shown>", 20);
  } else if (held->dl.ndim == 0) {
    size_t len = format_element(buf, held->dtype, dlp_first_element(held));
    add_text(&pr, buf, len);
  } else if (held->dl.ndim > MAX_NESTED) {
    add_flat(&pr);
  } else {
    add_nested(&pr, 0, dlp_first_element(held), 1);
  }
  add_text(&pr, ",", 1);
  add_description(&pr, lua_tostring(L, 3));
  luaL_pushresult(&b);
  dlp_tensor_release(held);
  return 1;
}

void dlp_format_register(lua_State *L, int module, int methods, int meta) {
  static const luaL_Reg functions[] = {{"tensor", l_tensor}, {"frombytes", l_frombytes}, {NULL, NULL}};
  static const luaL_Reg method_list[] = {{"totable", l_totable}, {"tobytes", l_tobytes}, {NULL, NULL}};
  static const luaL_Reg metamethods[] = {{"__tostring", l_tostring}, {NULL, NULL}};
  dlp_register(L, module, functions);
  dlp_register(L, methods, method_list);
  dlp_register(L, meta, metamethods);
}
