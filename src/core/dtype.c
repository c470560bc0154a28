/* Element types: names, DLPack codes, and element conversion to and from Lua values. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

const dlp_DtypeInfo dlp_dtypes[DLP_NDTYPES] = {
  [DLP_BOOL] = {"bool", kDLBool, 8, 1, 1},
  [DLP_INT8] = {"int8", kDLInt, 8, 1, 1},
  [DLP_INT16] = {"int16", kDLInt, 16, 2, 1},
  [DLP_INT32] = {"int32", kDLInt, 32, 4, 1},
  [DLP_INT64] = {"int64", kDLInt, 64, 8, 1},
  [DLP_UINT8] = {"uint8", kDLUInt, 8, 1, 1},
  [DLP_UINT16] = {"uint16", kDLUInt, 16, 2, 1},
  [DLP_UINT32] = {"uint32", kDLUInt, 32, 4, 1},
  [DLP_UINT64] = {"uint64", kDLUInt, 64, 8, 1},
  [DLP_FLOAT16] = {"float16", kDLFloat, 16, 2, 1},
  [DLP_BFLOAT16] = {"bfloat16", kDLBfloat, 16, 2, 1},
  [DLP_FLOAT32] = {"float32", kDLFloat, 32, 4, 1},
  [DLP_FLOAT64] = {"float64", kDLFloat, 64, 8, 1},
  [DLP_COMPLEX64] = {"complex64", kDLComplex, 64, 8, 0},
  [DLP_COMPLEX128] = {"complex128", kDLComplex, 128, 16, 0},
  [DLP_FLOAT8_E3M4] = {"float8_e3m4", kDLFloat8_e3m4, 8, 1, 0},
  [DLP_FLOAT8_E4M3] = {"float8_e4m3", kDLFloat8_e4m3, 8, 1, 0},
  [DLP_FLOAT8_E4M3B11FNUZ] = {"float8_e4m3b11fnuz", kDLFloat8_e4m3b11fnuz, 8, 1, 0},
  [DLP_FLOAT8_E4M3FN] = {"float8_e4m3fn", kDLFloat8_e4m3fn, 8, 1, 0},
  [DLP_FLOAT8_E4M3FNUZ] = {"float8_e4m3fnuz", kDLFloat8_e4m3fnuz, 8, 1, 0},
  [DLP_FLOAT8_E5M2] = {"float8_e5m2", kDLFloat8_e5m2, 8, 1, 0},
  [DLP_FLOAT8_E5M2FNUZ] = {"float8_e5m2fnuz", kDLFloat8_e5m2fnuz, 8, 1, 0},
  [DLP_FLOAT8_E8M0FNU] = {"float8_e8m0fnu", kDLFloat8_e8m0fnu, 8, 1, 0},
  [DLP_FLOAT6_E2M3FN] = {"float6_e2m3fn", kDLFloat6_e2m3fn, 6, 1, 0},
  [DLP_FLOAT6_E3M2FN] = {"float6_e3m2fn", kDLFloat6_e3m2fn, 6, 1, 0},
  [DLP_FLOAT4_E2M1FN] = {"float4_e2m1fn", kDLFloat4_e2m1fn, 4, 1, 0},
};

int dlp_dtype_from_dl(DLDataType t) {
  if (t.lanes != 1) return -1;
  for (int i = 0; i < DLP_NDTYPES; i++)
    if (dlp_dtypes[i].code == t.code && dlp_dtypes[i].bits == t.bits) return i;
  return -1;
}

DLDataType dlp_dtype_to_dl(int dtype) {
  DLDataType t;
  t.code = dlp_dtypes[dtype].code;
  t.bits = dlp_dtypes[dtype].bits;
  t.lanes = 1;
  return t;
}

/* torch's names for some dtypes, accepted wherever a dtype name is; t.dtype gives the canonical one. */
static const struct { const char *name; int dtype; } dtype_aliases[] = {
  {"float", DLP_FLOAT32}, {"double", DLP_FLOAT64}, {"half", DLP_FLOAT16}, {"long", DLP_INT64},
  {"int", DLP_INT32}, {"short", DLP_INT16}, {"byte", DLP_UINT8}, {"char", DLP_INT8},
};

int dlp_test_dtype_name(const char *name, size_t len) {
  for (int i = 0; i < DLP_NDTYPES; i++)
    if (strlen(dlp_dtypes[i].name) == len && memcmp(dlp_dtypes[i].name, name, len) == 0) return i;
  for (size_t i = 0; i < sizeof dtype_aliases / sizeof dtype_aliases[0]; i++)
    if (strlen(dtype_aliases[i].name) == len && memcmp(dtype_aliases[i].name, name, len) == 0)
      return dtype_aliases[i].dtype;
  return -1;
}

const char *dlp_push_dtype_error(lua_State *L, const char *name, size_t len) {
  const char *quoted = dlp_push_quoted(L, name, len);
  if (memchr(name, '\0', len)) return lua_pushfstring(L, "dtype name %s contains an embedded NUL", quoted);
  /* The known names, so that a typo is answered with the spelling that works. */
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 0; i < DLP_NDTYPES; i++) {
    if (i) luaL_addstring(&b, ", ");
    luaL_addstring(&b, dlp_dtypes[i].name);
  }
  for (size_t i = 0; i < sizeof dtype_aliases / sizeof dtype_aliases[0]; i++) {
    luaL_addstring(&b, ", ");
    luaL_addstring(&b, dtype_aliases[i].name);
  }
  luaL_pushresult(&b);
  return lua_pushfstring(L, "unknown dtype %s (known: %s)", quoted, lua_tostring(L, -1));
}

int dlp_check_dtype(lua_State *L, int arg) {
  size_t len;
  const char *name = luaL_checklstring(L, arg, &len);
  int dtype = dlp_test_dtype_name(name, len);
  if (dtype < 0) return luaL_argerror(L, arg, dlp_push_dtype_error(L, name, len));
  return dtype;
}

int dlp_opt_dtype(lua_State *L, int arg, int def) {
  return lua_isnoneornil(L, arg) ? def : dlp_check_dtype(L, arg);
}

void dlp_check_access(lua_State *L, int dtype) {
  if (!dlp_dtypes[dtype].access)
    luaL_error(L, "element access is not supported for dtype %s (it can still be created, copied "
               "byte for byte and exchanged)", dlp_dtypes[dtype].name);
}

/* ---- scalars: the common value every element converts through ---- */

/* Typed loads through memcpy: producer data need not be aligned (compilers emit plain loads). */
#define DEFINE_LOAD(name, type) \
  static type name(const void *p) { type v; memcpy(&v, p, sizeof v); return v; }
DEFINE_LOAD(load_i8, int8_t)
DEFINE_LOAD(load_i16, int16_t)
DEFINE_LOAD(load_i32, int32_t)
DEFINE_LOAD(load_i64, int64_t)
DEFINE_LOAD(load_u8, uint8_t)
DEFINE_LOAD(load_u16, uint16_t)
DEFINE_LOAD(load_u32, uint32_t)
DEFINE_LOAD(load_u64, uint64_t)
DEFINE_LOAD(load_f32, float)
DEFINE_LOAD(load_f64, double)
#undef DEFINE_LOAD

void dlp_load(int dtype, const void *p, dlp_Scalar *s) {
  const char *c = p;
  s->kind = DLP_S_INT;
  s->im = 0;
  switch (dtype) {
    case DLP_BOOL: s->i = load_u8(p) != 0; return;
    case DLP_INT8: s->i = load_i8(p); return;
    case DLP_INT16: s->i = load_i16(p); return;
    case DLP_INT32: s->i = load_i32(p); return;
    case DLP_INT64: s->i = load_i64(p); return;
    case DLP_UINT8: s->i = load_u8(p); return;
    case DLP_UINT16: s->i = load_u16(p); return;
    case DLP_UINT32: s->i = load_u32(p); return;
    case DLP_UINT64: s->kind = DLP_S_UINT; s->u = load_u64(p); return;
    default: break;
  }
  s->kind = DLP_S_FLOAT;
  switch (dtype) {
    case DLP_FLOAT16: s->re = dlp_half_to_float(load_u16(p)); return;
    case DLP_BFLOAT16: s->re = dlp_bfloat_to_float(load_u16(p)); return;
    case DLP_FLOAT32: s->re = load_f32(p); return;
    case DLP_FLOAT64: s->re = load_f64(p); return;
    case DLP_COMPLEX64: s->kind = DLP_S_COMPLEX; s->re = load_f32(c); s->im = load_f32(c + 4); return;
    case DLP_COMPLEX128: s->kind = DLP_S_COMPLEX; s->re = load_f64(c); s->im = load_f64(c + 8); return;
    default: s->re = 0; return;
  }
}

/* A float to int64 without undefined behaviour: truncated, saturated, NaN -> 0. */
static int64_t float_to_i64(double d) {
  if (isnan(d)) return 0;
  if (d >= 9223372036854775808.0) return INT64_MAX;
  if (d < -9223372036854775808.0) return INT64_MIN;
  return (int64_t)d;
}

static uint64_t float_to_u64(double d) {
  if (isnan(d) || d <= 0) return 0;
  if (d >= 18446744073709551616.0) return UINT64_MAX;
  return (uint64_t)d;
}

static int64_t clamp_i64(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/* s's real value as a double for the floats narrower than double: an integer rounded to odd, so
 * that it reaches them in one rounding (convert.c) */
static double narrow_value(const dlp_Scalar *s) {
  if (s->kind == DLP_S_FLOAT || s->kind == DLP_S_COMPLEX) return s->re;
  return s->kind == DLP_S_UINT ? dlp_uint64_to_odd_double(s->u) : dlp_int64_to_odd_double(s->i);
}

#define STORE(type, p, value) do { type v_ = (type)(value); memcpy((p), &v_, sizeof v_); } while (0)

void dlp_store(int dtype, void *p, const dlp_Scalar *s) {
  int is_float = s->kind == DLP_S_FLOAT || s->kind == DLP_S_COMPLEX;
  double d = is_float ? s->re : s->kind == DLP_S_UINT ? (double)s->u : (double)s->i;
  /* Integers wrap as in C; floats are truncated and saturate at the target's limits. */
  uint64_t bits = is_float ? 0 : s->kind == DLP_S_UINT ? s->u : (uint64_t)s->i;
  switch (dtype) {
    case DLP_BOOL: STORE(uint8_t, p, is_float ? (s->re != 0 || s->im != 0) : bits != 0); return;
    case DLP_INT8: STORE(int8_t, p, is_float ? clamp_i64(float_to_i64(d), INT8_MIN, INT8_MAX) : (int8_t)bits); return;
    case DLP_INT16: STORE(int16_t, p, is_float ? clamp_i64(float_to_i64(d), INT16_MIN, INT16_MAX) : (int16_t)bits); return;
    case DLP_INT32: STORE(int32_t, p, is_float ? clamp_i64(float_to_i64(d), INT32_MIN, INT32_MAX) : (int32_t)bits); return;
    case DLP_INT64: STORE(int64_t, p, is_float ? float_to_i64(d) : (int64_t)bits); return;
    case DLP_UINT8: STORE(uint8_t, p, is_float ? (uint64_t)clamp_i64(float_to_i64(d), 0, UINT8_MAX) : bits); return;
    case DLP_UINT16: STORE(uint16_t, p, is_float ? (uint64_t)clamp_i64(float_to_i64(d), 0, UINT16_MAX) : bits); return;
    case DLP_UINT32: STORE(uint32_t, p, is_float ? (uint64_t)clamp_i64(float_to_i64(d), 0, UINT32_MAX) : bits); return;
    case DLP_UINT64: STORE(uint64_t, p, is_float ? float_to_u64(d) : bits); return;
    case DLP_FLOAT16: STORE(uint16_t, p, dlp_half_from_double(narrow_value(s))); return;
    case DLP_BFLOAT16: STORE(uint16_t, p, dlp_bfloat_from_double(narrow_value(s))); return;
    case DLP_FLOAT32: STORE(float, p, narrow_value(s)); return;
    case DLP_FLOAT64: STORE(double, p, d); return;
    case DLP_COMPLEX64: { float pair[2] = {(float)narrow_value(s), (float)s->im}; memcpy(p, pair, sizeof pair); return; }
    case DLP_COMPLEX128: { double pair[2] = {d, s->im}; memcpy(p, pair, sizeof pair); return; }
    default: return;
  }
}
#undef STORE

int dlp_int64_is_double(int64_t v) {
  double d = (double)v;
  return d < 9223372036854775808.0 && (int64_t)d == v;
}

#if !DLP_LUA_INTEGERS
/* Whether the integer element s is a double exactly, so that a Lua number gives it back
 * unchanged: every integer up to 2^53, and beyond those whose low bits are zeros. */
static int is_exact_double(const dlp_Scalar *s) {
  if (s->kind == DLP_S_UINT) {
    double d = (double)s->u;
    return d < 18446744073709551616.0 && (uint64_t)d == s->u;
  }
  return dlp_int64_is_double(s->i);
}
#endif

void dlp_push_element(lua_State *L, int dtype, const void *p) {
  dlp_Scalar s;
  dlp_check_access(L, dtype);
  dlp_load(dtype, p, &s);
  if (dtype == DLP_BOOL) lua_pushboolean(L, s.i != 0);
#if !DLP_LUA_INTEGERS
  /* every Lua number is a double: an integer it does not hold would come back changed */
  else if (s.kind != DLP_S_FLOAT && !is_exact_double(&s)) {
    char digits[24];
    if (s.kind == DLP_S_INT) snprintf(digits, sizeof digits, "%lld", (long long)s.i);
    else snprintf(digits, sizeof digits, "%llu", (unsigned long long)s.u);
    luaL_error(L, "%s element %s has no exact Lua number in %s (numbers are doubles: beyond 2^53 they "
               "hold only some integers)", dlp_dtypes[dtype].name, digits, LUA_VERSION);
  }
  else if (s.kind == DLP_S_INT) lua_pushnumber(L, (lua_Number)s.i);
  else if (s.kind == DLP_S_UINT) lua_pushnumber(L, (lua_Number)s.u);
#else
  else if (s.kind == DLP_S_INT) lua_pushinteger(L, (lua_Integer)s.i);
  /* uint64 from 2^63 up: the negative Lua integer with the same 64 bits (as string.unpack's "J") */
  else if (s.kind == DLP_S_UINT) lua_pushinteger(L, (lua_Integer)s.u);
#endif
  else lua_pushnumber(L, (lua_Number)s.re);
}

static const int64_t int_min[] = {
  [DLP_INT8] = INT8_MIN, [DLP_INT16] = INT16_MIN, [DLP_INT32] = INT32_MIN, [DLP_INT64] = INT64_MIN,
};
static const int64_t int_max[] = {
  [DLP_INT8] = INT8_MAX, [DLP_INT16] = INT16_MAX, [DLP_INT32] = INT32_MAX, [DLP_INT64] = INT64_MAX,
};
static const uint64_t uint_max[] = {
  [DLP_UINT8] = UINT8_MAX, [DLP_UINT16] = UINT16_MAX, [DLP_UINT32] = UINT32_MAX, [DLP_UINT64] = UINT64_MAX,
};

/* The article for a dtype name, by its first sound: "an int8", "a uint8", "a float32". */
static const char *article(const char *name) {
  return name[0] == 'i' ? "an" : "a";
}

/* The number at idx as text for a message (a copy is converted, never the value itself). */
static const char *number_text(lua_State *L, int idx) {
  lua_Number n = lua_tonumber(L, idx);
  if (n != n) return "nan"; /* not "-nan" */
  lua_pushvalue(L, idx);
  return lua_tostring(L, -1);
}

int dlp_integer_fits(int dtype, int64_t v) {
  return dtype >= DLP_UINT8 ? v >= 0 && (uint64_t)v <= uint_max[dtype] : v >= int_min[dtype] && v <= int_max[dtype];
}

void dlp_check_integer_range(lua_State *L, int dtype, int64_t v, const char *what) {
  if (!dlp_integer_fits(dtype, v)) luaL_error(L, "%s: %I is out of range for %s", what, (lua_Integer)v, dlp_dtypes[dtype].name);
}

/* The Lua number at idx as an element of integer dtype `dtype`, into s. Floats go by value:
 * integral and within the dtype's range, up to 2^64 for uint64. On Lua 5.3 and later, integers
 * go by value too except for uint64, which takes an integer's 64 bits (as string.pack's "J"
 * does): the negative integers stand for 2^63 to 2^64 - 1, as uint64 reads give them. */
static void check_integer(lua_State *L, int idx, int dtype, const char *what, dlp_Scalar *s) {
  const char *name = dlp_dtypes[dtype].name;
  if (lua_type(L, idx) != LUA_TNUMBER)
    luaL_error(L, "%s: %s %s element takes an integer, got %s", what, article(name), name, luaL_typename(L, idx));
#if DLP_LUA_INTEGERS
  if (lua_isinteger(L, idx)) {
    s->kind = dtype == DLP_UINT64 ? DLP_S_UINT : DLP_S_INT;
    s->i = lua_tointeger(L, idx);
    s->u = (uint64_t)s->i;
    if (dtype != DLP_UINT64) dlp_check_integer_range(L, dtype, s->i, what);
    return;
  }
#endif
  lua_Number n = lua_tonumber(L, idx);
  if (n != floor(n)) luaL_error(L, "%s: %s is not an integer (dtype %s)", what, number_text(L, idx), name);
  if (n >= -9223372036854775808.0 && n < 9223372036854775808.0) {
    s->kind = DLP_S_INT;
    s->i = (int64_t)n;
    dlp_check_integer_range(L, dtype, s->i, what);
  } else if (dtype == DLP_UINT64 && n >= 0 && n < 18446744073709551616.0) {
    s->kind = DLP_S_UINT;
    s->u = (uint64_t)n;
  } else {
    luaL_error(L, "%s: %s is out of range for %s", what, number_text(L, idx), name);
  }
}

/* A Lua integer subtype (5.3 on); never before, where lua_isinteger is compat.h's "integral". */
#if DLP_LUA_INTEGERS
#define IS_LUA_INTEGER(L, idx) lua_isinteger((L), (idx))
#else
#define IS_LUA_INTEGER(L, idx) 0
#endif

void dlp_check_element(lua_State *L, int idx, int dtype, void *out, const char *what) {
  dlp_Scalar s;
  /* the elements most written, stored at once with the one rounding dlp_store makes: a number
   * into float64, a float into float32 (an integer reaches float32 rounded to odd first) */
  if (lua_type(L, idx) == LUA_TNUMBER && (dtype == DLP_FLOAT64 || (dtype == DLP_FLOAT32 && !IS_LUA_INTEGER(L, idx)))) {
    double d = (double)lua_tonumber(L, idx);
    float f = (float)d;
    if (dtype == DLP_FLOAT64) memcpy(out, &d, sizeof d);
    else memcpy(out, &f, sizeof f);
    return;
  }
  const char *name = dlp_dtypes[dtype].name;
  dlp_check_access(L, dtype);
  s.im = 0;
  if (dtype == DLP_BOOL) {
    if (!lua_isboolean(L, idx))
      luaL_error(L, "%s: a bool element takes true or false, got %s", what, luaL_typename(L, idx));
    s.kind = DLP_S_INT;
    s.i = lua_toboolean(L, idx);
  } else if (dtype >= DLP_INT8 && dtype <= DLP_UINT64) {
    check_integer(L, idx, dtype, what, &s);
  } else {
    if (lua_type(L, idx) != LUA_TNUMBER)
      luaL_error(L, "%s: %s %s element takes a number, got %s", what, article(name), name, luaL_typename(L, idx));
    s.kind = DLP_S_FLOAT;
    s.re = (double)lua_tonumber(L, idx);
    if (IS_LUA_INTEGER(L, idx)) { /* rounded once, to the element's dtype (dlp_store) */
      s.kind = DLP_S_INT;
      s.i = lua_tointeger(L, idx);
    }
  }
  dlp_store(dtype, out, &s);
}

/* ---- type promotion for computing (NumPy 2's result_type) ---- */

/* Kinds in NumPy's order for same_kind casts: bool < unsigned < signed < float < complex. */
enum { KIND_BOOL, KIND_UINT, KIND_INT, KIND_FLOAT, KIND_COMPLEX };

int dlp_dtype_computes(int dtype) { return dtype >= DLP_BOOL && dtype <= DLP_COMPLEX128; }

int dlp_dtype_kind(int dtype) {
  if (dtype == DLP_BOOL) return KIND_BOOL;
  if (dtype >= DLP_INT8 && dtype <= DLP_INT64) return KIND_INT;
  if (dtype >= DLP_UINT8 && dtype <= DLP_UINT64) return KIND_UINT;
  if (dtype >= DLP_FLOAT16 && dtype <= DLP_FLOAT64) return KIND_FLOAT;
  return KIND_COMPLEX;
}

void dlp_check_computes(lua_State *L, int dtype, const char *what) {
  if (!dlp_dtype_computes(dtype))
    luaL_error(L, "%s: dtype %s does not compute; convert with t:to('float32') first", what, dlp_dtypes[dtype].name);
}

/* The smallest float (0: float16, 1: float32, 2: float64) that holds every value of an integer dtype. */
static int float_rank_for_integer(int dtype) {
  int bits = dlp_dtypes[dtype].bits;
  return bits <= 8 ? 0 : bits <= 16 ? 1 : 2;
}

static int float_rank(int dtype) { /* float16 and bfloat16 0, float32 1, float64 2 */
  return dtype == DLP_FLOAT64 ? 2 : dtype == DLP_FLOAT32 ? 1 : 0;
}

int dlp_promote(int a, int b) {
  if (!dlp_dtype_computes(a) || !dlp_dtype_computes(b)) return -1;
  if (a == b) return a;
  int ka = dlp_dtype_kind(a), kb = dlp_dtype_kind(b);
  if (ka > kb || (ka == kb && dlp_dtypes[a].bits < dlp_dtypes[b].bits)) { /* a: the higher kind, or wider */
    int t = a; a = b; b = t;
    t = ka; ka = kb; kb = t;
  }
  /* now kind(a) <= kind(b) */
  if (ka == KIND_BOOL) return b;
  if (ka == kb) {
    if (ka == KIND_FLOAT && dlp_dtypes[a].bits == dlp_dtypes[b].bits) return DLP_FLOAT32; /* float16 + bfloat16 */
    return dlp_dtypes[a].bits > dlp_dtypes[b].bits ? a : b;
  }
  if (ka == KIND_UINT && kb == KIND_INT) { /* a signed type that holds both, else float64 */
    int bits = dlp_dtypes[a].bits;
    if (dlp_dtypes[b].bits > bits) return b;
    return bits == 8 ? DLP_INT16 : bits == 16 ? DLP_INT32 : bits == 32 ? DLP_INT64 : DLP_FLOAT64;
  }
  static const int floats[3] = {DLP_FLOAT16, DLP_FLOAT32, DLP_FLOAT64};
  int need = ka == KIND_FLOAT ? float_rank(a) : float_rank_for_integer(a); /* a: integer or float */
  if (kb == KIND_FLOAT) return need <= float_rank(b) ? b : floats[need];
  /* complex: complex64 holds what float32 holds */
  return need <= 1 && b == DLP_COMPLEX64 ? DLP_COMPLEX64 : DLP_COMPLEX128;
}

int dlp_can_cast_same_kind(int from, int to) {
  if (from == to) return 1;
  if (dlp_promote(from, to) == to) return 1; /* a safe cast */
  return dlp_dtype_kind(from) <= dlp_dtype_kind(to);
}

/* NumPy promotes several dtypes as if the highest kinds came first (bool < unsigned < signed <
 * float < complex): uint16, int8 and float16 give float32, where pairing from the left would
 * give float64 (int32 first). Checked against numpy.result_type for every triple and quadruple. */
int dlp_promote_many(int n, const int *dtypes) {
  if (n <= 2) return n == 1 ? dtypes[0] : dlp_promote(dtypes[0], dtypes[1]); /* the same, faster */
  int result = -1;
  for (int kind = 4; kind >= 0; kind--)
    for (int k = 0; k < n; k++)
      if (dlp_dtype_kind(dtypes[k]) == kind) result = result < 0 ? dtypes[k] : dlp_promote(result, dtypes[k]);
  return result;
}
