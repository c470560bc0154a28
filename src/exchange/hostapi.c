/* The C API for hosts: the functions of dlpack_lua.h and their registry table. */
#include "internal.h"

DLPACK_LUA_API void dlpack_lua_push_versioned(lua_State *L, DLManagedTensorVersioned *managed) {
  dlp_import(L, managed, 1, "dlpack_lua_push_versioned");
}

DLPACK_LUA_API void dlpack_lua_push_legacy(lua_State *L, DLManagedTensor *managed) {
  dlp_import(L, managed, 0, "dlpack_lua_push_legacy");
}

/* The tensor at idx, or NULL; the C API runs outside the module, so the metatable comes from the
 * registry. */
static dlp_Tensor *test_tensor(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  dlp_push_metatable(L);
  dlp_Tensor *t = dlp_tensor_test_with(L, idx, -1);
  lua_pop(L, 1);
  return t;
}

static dlp_Tensor *check_tensor(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  dlp_push_metatable(L);
  dlp_Tensor *t = dlp_tensor_check_with(L, idx, -1);
  lua_pop(L, 1);
  return t;
}

DLPACK_LUA_API const DLTensor *dlpack_lua_test_tensor(lua_State *L, int idx, uint64_t *flags) {
  dlp_Tensor *t = test_tensor(L, idx);
  if (!t || !t->owner) return NULL;
  if (flags) *flags = t->flags;
  return &t->dl;
}

DLPACK_LUA_API const DLTensor *dlpack_lua_check_tensor(lua_State *L, int idx, uint64_t *flags) {
  dlp_Tensor *t = check_tensor(L, idx);
  if (flags) *flags = t->flags;
  return &t->dl;
}

DLPACK_LUA_API DLManagedTensorVersioned *dlpack_lua_export_versioned(lua_State *L, int idx) {
  return dlp_export_versioned(L, check_tensor(L, idx), 0, "dlpack_lua_export_versioned");
}

DLPACK_LUA_API DLManagedTensor *dlpack_lua_export_legacy(lua_State *L, int idx) {
  return dlp_export_legacy(L, check_tensor(L, idx), "dlpack_lua_export_legacy");
}

DLPACK_LUA_API void *dlpack_lua_capsule_new(void *managed, int versioned) {
  return managed ? dlp_capsule_new(managed, versioned, DLP_CAPSULE_HOST) : NULL; /* a script would consume NULL */
}

DLPACK_LUA_API void dlpack_lua_push_capsule(lua_State *L, void *managed, int versioned) {
  dlp_capsule_push_for_state(L, managed, versioned, "dlpack_lua_push_capsule");
}

DLPACK_LUA_API void dlpack_lua_isolate_capsules(lua_State *L) {
  dlp_State *st = dlp_state(L);
  if (!st) luaL_error(L, "dlpack_lua_isolate_capsules: the dlpack module is not open in this lua_State");
  dlp_capsule_isolate(st);
}

DLPACK_LUA_API int dlpack_lua_capsule_consume(void *capsule, void **managed, int *versioned) {
  void *m = NULL;
  int v = 0, r = dlp_capsule_consume(capsule, &m, &v);
  if (managed) *managed = m;
  if (versioned) *versioned = v;
  return r;
}

DLPACK_LUA_API void *dlpack_lua_check_stream(lua_State *L, int idx) {
  idx = lua_absindex(L, idx); /* the error names the argument's place */
  dlp_CudaStream *s = dlp_cuda_test_stream_object(L, idx);
  if (!s) luaL_argexpected(L, 0, idx, "open dlpack.cuda.Stream");
  return (void *)dlp_cuda_stream_handle(s);
}

DLPACK_LUA_API void dlpack_lua_push_stream(lua_State *L, void *stream, int device) {
  if (device < 0 || device >= DLP_MAX_CUDA_DEVICES) luaL_error(L, "dlpack_lua_push_stream: invalid device %d", device);
  dlp_cuda_push_wrapped(L, (uintptr_t)stream, device);
}

static const dlpack_lua_api api = {
  DLPACK_LUA_API_VERSION,
  dlpack_lua_push_versioned,
  dlpack_lua_push_legacy,
  dlpack_lua_check_tensor,
  dlpack_lua_test_tensor,
  dlpack_lua_export_versioned,
  dlpack_lua_export_legacy,
  dlpack_lua_capsule_new,
  dlpack_lua_capsule_consume,
  dlpack_lua_check_stream,
  dlpack_lua_push_stream,
  dlpack_lua_push_capsule,
  dlpack_lua_isolate_capsules,
  dlpack_lua_push_channel,
  dlpack_lua_push_shared,
  dlpack_lua_shared_fd,
  dlpack_lua_set_parallel_for,
};

void dlp_hostapi_register(lua_State *L) {
  lua_pushlightuserdata(L, (void *)&api);
  lua_setfield(L, LUA_REGISTRYINDEX, DLPACK_LUA_API_KEY);
}
