/* Every difference between Lua 5.1, 5.2, 5.3, 5.4, 5.5 and LuaJIT 2.1 that the C code meets
 * lives here: the module and its test modules include this instead of <lua.h> and <lauxlib.h>,
 * and are written against the 5.4 C API.
 *
 * 5.1, LuaJIT and 5.2 get the 5.3 API from lua-compat-5.3 (Debian's lua-compat53-dev), used as
 * a header-only library (its functions compile static into each file that uses them); the few
 * 5.4 functions the module uses, the `%I` format, and a strict integer conversion for runtimes
 * whose numbers are all doubles are written below. Why lua-compat-5.3 rather than our own
 * shims: see README.md, "Lua versions". */
#ifndef DLPACK_LUA_COMPAT_H
#define DLPACK_LUA_COMPAT_H

#include <limits.h>
#include <lua.h>
#include <lauxlib.h>

#if LUA_VERSION_NUM < 503
#include <compat-5.3.h>
#endif

/* Whether Lua numbers have an integer subtype (5.3 and later). */
#define DLP_LUA_INTEGERS (LUA_VERSION_NUM >= 503)

/* ---- 5.4 functions, for 5.1 to 5.3 ---- */
#if LUA_VERSION_NUM < 504
/* The module asks for no user values (nuv is always 0). */
#define lua_newuserdatauv(L, size, nuv) ((void)(nuv), lua_newuserdata((L), (size)))
#define luaL_typeerror(L, arg, tname) \
  luaL_argerror((L), (arg), lua_pushfstring((L), "%s expected, got %s", (tname), luaL_typename((L), (arg))))
#define luaL_argexpected(L, cond, arg, tname) ((void)((cond) || luaL_typeerror((L), (arg), (tname))))
#endif

/* Whether the script let the collector run. PUC Lua 5.1 cannot say: the module paces the
 * collector there anyway (a loop of tensors would otherwise grow without bound), which restarts
 * a collector the script stopped. */
/* dlp_gc_runs_normally: whether the collector runs and no finalizer is running (5.2 and later
 * and LuaJIT stop it while a finalizer runs, and 5.4's lua_gc answers -1 then). PUC Lua 5.1
 * cannot say either: there the answer is always "maybe not" (0). */
#ifdef LUA_GCISRUNNING /* 5.2 and later, LuaJIT */
#define dlp_gc_running(L) lua_gc((L), LUA_GCISRUNNING, 0)
#define dlp_gc_runs_normally(L) (lua_gc((L), LUA_GCISRUNNING, 0) == 1)
#else
#define dlp_gc_running(L) ((void)(L), 1)
#define dlp_gc_runs_normally(L) ((void)(L), 0)
#endif

/* A collector step as if `kb` KiB of Lua objects had been allocated: 5.5 takes a size_t in
 * bytes, earlier versions an int in KiB. */
#if LUA_VERSION_NUM >= 505
#define dlp_gc_step(L, kb) lua_gc((L), LUA_GCSTEP, (size_t)(kb) * 1024)
#else
#define dlp_gc_step(L, kb) lua_gc((L), LUA_GCSTEP, (kb) > INT_MAX ? INT_MAX : (int)(kb))
#endif

/* ---- numbers without integers (5.1, LuaJIT, 5.2): every number is a double ---- */
#if !DLP_LUA_INTEGERS
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The largest integer below which every integer is a double exactly (2^53). */
#define DLP_EXACT_INTEGER 9007199254740992.0

/* A number with an integral value that fits int64 converts; anything else does not (5.3's
 * rule; lua-compat-5.3's version casts out-of-range doubles, which is undefined). */
static inline lua_Integer dlp_compat_tointegerx(lua_State *L, int idx, int *isnum) {
  int ok = 0;
  lua_Number n = lua_tonumberx(L, idx, &ok);
  ok = ok && n == floor(n) && n >= -9223372036854775808.0 && n < 9223372036854775808.0;
  if (isnum) *isnum = ok;
  return ok ? (lua_Integer)n : 0;
}
#undef lua_tointegerx
#define lua_tointegerx dlp_compat_tointegerx
#undef lua_tointeger
#define lua_tointeger(L, i) dlp_compat_tointegerx((L), (i), NULL)

/* "Is an integer" (dlpack.tensor's dtype inference): an integral number within +-2^53, the
 * integers that a double holds exactly and reads back unchanged. */
static inline int dlp_compat_isinteger(lua_State *L, int idx) {
  lua_Number n = lua_type(L, idx) == LUA_TNUMBER ? lua_tonumber(L, idx) : 0.5;
  return n == floor(n) && fabs(n) <= DLP_EXACT_INTEGER;
}
#undef lua_isinteger
#define lua_isinteger dlp_compat_isinteger

/* A length from __len: 5.2's luaL_len returns an int, lua-compat-5.3's casts out-of-range doubles. */
static inline lua_Integer dlp_compat_len(lua_State *L, int idx) {
  int ok;
  lua_len(L, idx);
  lua_Integer n = dlp_compat_tointegerx(L, -1, &ok);
  lua_pop(L, 1);
  if (!ok) luaL_error(L, "object length is not an integer");
  return n;
}
#undef luaL_len
#define luaL_len dlp_compat_len

/* luaL_checkinteger truncates 1.5 to 1 before 5.3: refuse it as 5.3 does. */
static inline lua_Integer dlp_compat_checkinteger(lua_State *L, int arg) {
  int ok;
  lua_Integer v = dlp_compat_tointegerx(L, arg, &ok);
  if (!ok) {
    if (lua_isnumber(L, arg)) luaL_argerror(L, arg, "number has no integer representation");
    else luaL_typeerror(L, arg, "number");
  }
  return v;
}
#undef luaL_checkinteger
#define luaL_checkinteger dlp_compat_checkinteger
#undef luaL_optinteger
#define luaL_optinteger(L, arg, d) (lua_isnoneornil((L), (arg)) ? (lua_Integer)(d) : luaL_checkinteger((L), (arg)))

/* lua_pushfstring has no %I before 5.3: these take 5.3's formats (%s %d %c %f %p %I %%). */
static inline const char *dlp_compat_pushvfstring(lua_State *L, const char *fmt, va_list ap) {
  luaL_Buffer b;
  char num[64];
  const char *pct;
  luaL_buffinit(L, &b);
  while ((pct = strchr(fmt, '%')) != NULL) {
    luaL_addlstring(&b, fmt, (size_t)(pct - fmt));
    num[0] = '\0';
    switch (pct[1]) {
      case 's': {
        const char *s = va_arg(ap, const char *);
        luaL_addstring(&b, s ? s : "(null)");
        break;
      }
      case 'd': snprintf(num, sizeof num, "%d", va_arg(ap, int)); break;
      case 'c': num[0] = (char)va_arg(ap, int), num[1] = '\0'; break;
      case 'f': snprintf(num, sizeof num, LUA_NUMBER_FMT, (double)va_arg(ap, lua_Number)); break;
      case 'p': snprintf(num, sizeof num, "%p", va_arg(ap, void *)); break;
      case 'I': snprintf(num, sizeof num, "%lld", (long long)va_arg(ap, lua_Integer)); break;
      default: num[0] = pct[1], num[1] = '\0'; break; /* "%%" */
    }
    luaL_addstring(&b, num);
    fmt = pct[1] ? pct + 2 : pct + 1;
  }
  luaL_addstring(&b, fmt);
  luaL_pushresult(&b);
  return lua_tostring(L, -1);
}

static inline const char *dlp_compat_pushfstring(lua_State *L, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const char *s = dlp_compat_pushvfstring(L, fmt, ap);
  va_end(ap);
  return s;
}

static inline int dlp_compat_error(lua_State *L, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  luaL_where(L, 1);
  dlp_compat_pushvfstring(L, fmt, ap);
  va_end(ap);
  lua_concat(L, 2);
  return lua_error(L);
}
#define lua_pushvfstring dlp_compat_pushvfstring
#define lua_pushfstring dlp_compat_pushfstring
#define luaL_error dlp_compat_error
#endif

#endif
