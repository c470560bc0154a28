/* The operands and options of the computing functions (elementwise, reductions, matmul): read
 * into C values before any tensor memory is touched, and refused the same way everywhere. */
#include <math.h>
#include <string.h>

#include "internal.h"

static const char *const compute_option_names[] = {"out", "dtype", "keepdim", "correction", "stream", NULL};

/* Every key of the table at arg must be an allowed option: a raw walk (lua_next runs no Lua code). */
static void check_option_keys(lua_State *L, int arg, unsigned allowed, const char *what) {
  lua_pushnil(L);
  while (lua_next(L, arg)) {
    int known = -1;
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING) {
      size_t len;
      const char *key = lua_tolstring(L, -1, &len);
      for (int i = 0; compute_option_names[i]; i++)
        if ((allowed & (1u << i)) && strlen(compute_option_names[i]) == len && memcmp(key, compute_option_names[i], len) == 0)
          known = i;
      if (known < 0)
        luaL_error(L, "%s: unknown option %s", what, dlp_push_quoted(L, key, len));
    } else {
      luaL_error(L, "%s: option names are strings, got a %s key", what, luaL_typename(L, -1));
    }
  }
}

void dlp_read_compute_options(lua_State *L, int arg, unsigned allowed, dlp_ComputeOptions *o, const char *what) {
  o->out = 0;
  o->dtype = -1;
  o->keepdim = 0;
  o->has_correction = 0;
  o->correction = 0;
  o->stream = 0;
  if (arg == 0 || lua_isnoneornil(L, arg)) return;
  arg = lua_absindex(L, arg);
  if (!lua_istable(L, arg))
    luaL_argerror(L, arg, lua_pushfstring(L, "an options table expected, got %s", luaL_typename(L, arg)));
  check_option_keys(L, arg, allowed, what);
  if (allowed & DLP_COPT_DTYPE) {
    int type = lua_getfield(L, arg, "dtype");
    if (type == LUA_TSTRING) {
      size_t len;
      const char *name = lua_tolstring(L, -1, &len);
      if ((o->dtype = dlp_test_dtype_name(name, len)) < 0)
        luaL_argerror(L, arg, lua_pushfstring(L, "dtype: %s", dlp_push_dtype_error(L, name, len)));
      dlp_check_computes(L, o->dtype, what);
    } else if (type != LUA_TNIL) {
      luaL_argerror(L, arg, lua_pushfstring(L, "dtype: a dtype name expected, got %s", luaL_typename(L, -1)));
    }
    lua_pop(L, 1);
  }
  if (allowed & DLP_COPT_KEEPDIM) {
    int type = lua_getfield(L, arg, "keepdim");
    if (type == LUA_TBOOLEAN) o->keepdim = lua_toboolean(L, -1);
    else if (type != LUA_TNIL)
      luaL_argerror(L, arg, lua_pushfstring(L, "keepdim must be true, false or nil, got %s", luaL_typename(L, -1)));
    lua_pop(L, 1);
  }
  if (allowed & DLP_COPT_CORRECTION) {
    int type = lua_getfield(L, arg, "correction");
    if (type == LUA_TNUMBER) {
      o->correction = lua_tonumber(L, -1);
      if (!isfinite(o->correction))
        luaL_argerror(L, arg, "correction must be a finite number");
      o->has_correction = 1;
    } else if (type != LUA_TNIL) {
      luaL_argerror(L, arg, lua_pushfstring(L, "correction must be a number, got %s", luaL_typename(L, -1)));
    }
    lua_pop(L, 1);
  }
  if (allowed & DLP_COPT_STREAM) { /* the value stays on the stack (read once the device is known) */
    if (lua_getfield(L, arg, "stream") == LUA_TNIL) lua_pop(L, 1);
    else o->stream = lua_gettop(L);
  }
  if (allowed & DLP_COPT_OUT) { /* last: the value stays on the stack, which keeps it alive */
    if (lua_getfield(L, arg, "out") == LUA_TNIL) {
      lua_pop(L, 1);
    } else {
      if (!dlp_tensor_test(L, -1))
        luaL_argerror(L, arg, lua_pushfstring(L, "out must be a tensor, got %s", luaL_typename(L, -1)));
      if (!dlp_tensor_test(L, -1)->owner) luaL_argerror(L, arg, "out: the tensor was released");
      o->out = lua_gettop(L);
    }
  }
}

/* An out= that receives a result of rdtype and rshape (internal.h). */
void dlp_check_out(lua_State *L, const dlp_Tensor *out, int rdtype, int ndim, const int64_t *rshape, int safe,
                   const char *what) {
  int same = out->dl.ndim == ndim;
  for (int i = 0; same && i < ndim; i++) same = out->dl.shape[i] == rshape[i];
  if (!same) {
    dlp_push_shape(L, out->dl.ndim, out->dl.shape);
    dlp_push_shape(L, ndim, rshape);
    luaL_error(L, "%s: out has shape %s, the result %s", what, lua_tostring(L, -2), lua_tostring(L, -1));
  }
  dlp_check_writable(L, out, what);
  /* repeated elements: which of the aliased writes stays would depend on the walk */
  for (int i = 0; i < out->dl.ndim && dlp_numel(out) > 0; i++)
    if (out->dl.shape[i] > 1 && dlp_walk_stride(out, i) == 0)
      luaL_error(L, "%s: out repeats elements (an expanded view) and cannot be written", what);
  if (safe ? dlp_promote(rdtype, out->dtype) != out->dtype : !dlp_can_cast_same_kind(rdtype, out->dtype))
    luaL_error(L, "%s: cannot write %s values into an out of %s (%s casting)", what, dlp_dtypes[rdtype].name,
               dlp_dtypes[out->dtype].name, safe ? "safe" : "same_kind");
}

/* The tensor at idx made a cpu view when it is pinned or managed memory (internal.h). */
void dlp_host_as_cpu(lua_State *L, int idx, const char *what) {
  const dlp_Tensor *t = dlp_tensor_test(L, idx);
  if (!t || !t->owner || t->dl.device.device_type == kDLCPU || !dlp_device_is_host(t->dl.device)) return;
  DLDevice cpu = {kDLCPU, 0};
  idx = lua_absindex(L, idx);
  dlp_tensor_alias(L, idx, cpu, what);
  lua_replace(L, idx);
}

/* The device of a computing function's tensors (internal.h). */
int dlp_compute_device(lua_State *L, dlp_Tensor *const *t, int n, const char *what) {
  const dlp_Tensor *first = NULL;
  for (int k = 0; k < n && !first; k++)
    if (t[k] && t[k]->dl.device.device_type == kDLCUDA) first = t[k];
  if (!first) {
    for (int k = 0; k < n; k++)
      if (t[k] && t[k]->dl.device.device_type != kDLCPU) dlp_check_host(L, t[k], what);
    return -1;
  }
  for (int k = 0; k < n; k++)
    if (t[k] && (t[k]->dl.device.device_type != kDLCUDA || t[k]->dl.device.device_id != first->dl.device.device_id)) {
      dlp_push_device_name(L, first->dl.device);
      dlp_push_device_name(L, t[k]->dl.device);
      luaL_error(L, "%s: operands on different devices: %s and %s (move one with :to first)", what,
                 lua_tostring(L, -2), lua_tostring(L, -1));
    }
  dlp_push_device_name(L, first->dl.device);
  dlp_cuda_require(L, lua_pushfstring(L, "%s (operands on %s)", what, lua_tostring(L, -1)));
  lua_pop(L, 2);
  return first->dl.device.device_id;
}
