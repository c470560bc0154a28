/* Joining tensors: dlpack.cat(list, dim) and dlpack.stack(list, dim).
 *
 * The list is read raw (lua_rawlen, lua_rawgeti: no __len or __index runs), every entry
 * checked and kept in a private table, so that the script cannot change what is joined nor
 * let the collector take a tensor midway. Mixed dtypes promote as the arithmetic does
 * (dlp_promote). Then the result is allocated (finalizers may run and release an entry: each
 * is checked live after it), and each entry is copied, converting, into its place through the
 * iteration engine, with no Lua call in between. */
#include <limits.h>
#include <string.h>

#include "internal.h"

typedef struct Copy {
  dlp_RowFn row;
} Copy;

static void copy_row(void *ctx, char *const *data, const int64_t *steps, int64_t n) {
  ((const Copy *)ctx)->row(data[0], steps[0], data[1], steps[1], n);
}

static int join(lua_State *L, int stack, const char *what) {
  int64_t shape[DLP_MAX_NDIM], cstrides[DLP_MAX_NDIM];
  /* cat(a, b, dim), torch7's spelling, would otherwise be blamed on its third argument */
  if (dlp_tensor_test(L, 1))
    return luaL_argerror(L, 1, lua_pushfstring(L, "%s takes a table of tensors: %s({a, b}, dim)", what, what));
  dlp_check_no_more(L, 3, what, "a list of tensors and a dimension");
  if (!lua_istable(L, 1))
    return luaL_argerror(L, 1, lua_pushfstring(L, "a table of tensors expected, got %s", luaL_typename(L, 1)));
  size_t n = lua_rawlen(L, 1);
  if (n == 0) return luaL_argerror(L, 1, "the list of tensors is empty");
  if (n > INT_MAX / 2) return luaL_argerror(L, 1, "too many tensors");
  lua_settop(L, 2);
  /* holds the entries until the copies are done; grown as they are read, since a sparse list's
   * length (lua_rawlen's border) may be far more than it holds */
  lua_newtable(L);
  int hold = 3, dtype = -1, ndim = 0, dim = 0;
  const dlp_Tensor *first = NULL;
  DLDevice on = {kDLCPU, 0}; /* where the result goes: the entries' CUDA device, or the host */
  int first_cuda = 0;
  for (int i = 1; i <= (int)n && !first_cuda; i++) { /* raw reads: no Lua code runs */
    lua_rawgeti(L, 1, i);
    const dlp_Tensor *t = dlp_tensor_test(L, -1);
    if (t && t->dl.device.device_type == kDLCUDA) {
      on = t->dl.device;
      first_cuda = i;
    }
    lua_pop(L, 1);
  }
  for (int i = 1; i <= (int)n; i++) {
    lua_rawgeti(L, 1, i);
    const dlp_Tensor *t = dlp_tensor_test(L, -1);
    if (!t) return luaL_error(L, "%s: list[%d] is %s, not a tensor", what, i, luaL_typename(L, -1));
    if (!t->owner) return luaL_error(L, "%s: list[%d] was released", what, i);
    if (on.device_type == kDLCUDA && (t->dl.device.device_type != kDLCUDA || t->dl.device.device_id != on.device_id)) {
      dlp_push_device_name(L, on);
      dlp_push_device_name(L, t->dl.device);
      return luaL_error(L, "%s: operands on different devices: list[%d] is on %s, list[%d] on %s (move one with :to "
                        "first)", what, first_cuda, lua_tostring(L, -2), i, lua_tostring(L, -1));
    }
    if (on.device_type != kDLCUDA) dlp_check_host(L, t, what);
    dlp_check_computes(L, t->dtype, what);
    if (!first) {
      first = t;
      ndim = t->dl.ndim;
      if (!stack && ndim == 0)
        return luaL_error(L, "%s: list[1] is 0-d; cat joins along a dimension (use stack)", what);
      if (stack && ndim >= DLP_MAX_NDIM)
        return luaL_error(L, "%s: the result would have more than %d dimensions", what, DLP_MAX_NDIM);
      dim = lua_isnoneornil(L, 2) ? 0 : dlp_check_dim(L, 2, ndim, stack);
      dtype = t->dtype;
    } else {
      int same = t->dl.ndim == ndim;
      for (int d = 0; same && d < ndim; d++) same = t->dl.shape[d] == first->dl.shape[d] || (!stack && d == dim);
      if (!same) {
        if (stack) lua_pushliteral(L, "stack takes tensors of one shape");
        else lua_pushfstring(L, "only dimension %d may differ", dim + 1);
        dlp_push_shape(L, first->dl.ndim, first->dl.shape);
        dlp_push_shape(L, t->dl.ndim, t->dl.shape);
        return luaL_error(L, "%s: list[1] has shape %s, list[%d] %s (%s)", what, lua_tostring(L, -2), i,
                          lua_tostring(L, -1), lua_tostring(L, -3));
      }
      dtype = dlp_promote(dtype, t->dtype);
    }
    lua_rawseti(L, hold, i);
  }
  /* NumPy promotes the dtypes together, the highest kinds first (as dlp_promote_many) */
  if (n > 1) {
    dtype = -1;
    for (int kind = 4; kind >= 0; kind--)
      for (int i = 1; i <= (int)n; i++) {
        lua_rawgeti(L, hold, i);
        int d = ((const dlp_Tensor *)lua_touserdata(L, -1))->dtype;
        lua_pop(L, 1);
        if (dlp_dtype_kind(d) == kind) dtype = dtype < 0 ? d : dlp_promote(dtype, d);
      }
  }
  /* the result's shape */
  int rdim = ndim + stack;
  for (int d = 0, k = 0; d < rdim; d++) shape[d] = stack && d == dim ? (int64_t)n : first->dl.shape[k++];
  if (!stack) {
    int64_t total = 0;
    for (int i = 1; i <= (int)n; i++) {
      lua_rawgeti(L, hold, i);
      const dlp_Tensor *t = lua_touserdata(L, -1);
      lua_pop(L, 1);
      if (!dlp_add(total, t->dl.shape[dim], &total))
        return luaL_error(L, "%s: the joined dimension would be larger than fits in 64 bits", what);
    }
    shape[dim] = total;
  }
  dlp_Tensor *r = dlp_tensor_new(L, dtype, 0, on, rdim, shape, 0, what);
  /* no Lua code runs from here on: lua_rawgeti and lua_pop do not allocate */
  for (int i = 1; i <= (int)n; i++) {
    lua_rawgeti(L, hold, i);
    dlp_live(L, lua_touserdata(L, -1), what);
    lua_pop(L, 1);
  }
  if (dlp_numel(r) == 0) return 1;
  int64_t itemsize = dlp_dtypes[dtype].itemsize;
  dlp_contiguous_strides(rdim, shape, cstrides);
  char *base = dlp_first_element(r);
  int64_t at = 0; /* cat: where along dim the next entry goes */
  for (int i = 1; i <= (int)n; i++) {
    lua_rawgeti(L, hold, i);
    const dlp_Tensor *t = lua_touserdata(L, -1);
    lua_pop(L, 1);
    int64_t strides[2][DLP_MAX_NDIM];
    char *data[2];
    /* the destination: the result's (byte) strides less the stacked dimension, from its place */
    for (int d = 0, k = 0; d < rdim; d++) {
      if (stack && d == dim) continue;
      strides[0][k++] = cstrides[d] * itemsize;
    }
    dlp_broadcast_strides(t, ndim, t->dl.shape, strides[1]);
    data[0] = base + (stack ? (int64_t)(i - 1) : at) * cstrides[dim] * itemsize;
    data[1] = dlp_first_element(t);
    if (!stack) at += t->dl.shape[dim];
    if (on.device_type == kDLCUDA) { /* a copy or conversion kernel into the entry's place */
      int family, sizes[2] = {(int)itemsize, (int)dlp_dtypes[t->dtype].itemsize};
      const char *kernel = dlp_cuda_copy_kernel(L, dtype, t->dtype, &family, what);
      dlp_Tensor *tensors[2] = {r, (dlp_Tensor *)t};
      dlp_run_on_cuda(L, what, NULL, 2, ndim, t->dl.shape, data, (const int64_t(*)[DLP_MAX_NDIM])strides, tensors, NULL,
                      sizes, kernel, family);
      continue;
    }
    Copy c = {dlp_row_function(dtype, t->dtype)};
    dlp_Iter it;
    dlp_iter_init(&it, 2, ndim, t->dl.shape, data, (const int64_t(*)[DLP_MAX_NDIM])strides, 1);
    dlp_iter_run(&it, copy_row, &c);
  }
  return 1;
}

static int l_cat(lua_State *L) { return join(L, 0, "dlpack.cat"); }
static int l_stack(lua_State *L) { return join(L, 1, "dlpack.stack"); }

void dlp_join_register(lua_State *L, int module, int methods, int meta) {
  static const luaL_Reg functions[] = {{"cat", l_cat}, {"stack", l_stack}, {NULL, NULL}};
  (void)methods;
  (void)meta;
  dlp_register(L, module, functions);
}
