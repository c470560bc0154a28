/* The module entry points (luaopen_dlpack = luaopen_dlpack_core, and dlpack_lua_open_unsafe), and
 * the per-state record with the cleanup the module does at lua_close. */
#include <stdarg.h>
#include <string.h>

#include "internal.h"

_Static_assert(sizeof(DLPackVersion) == 8, "DLPackVersion is 8 bytes");
_Static_assert(sizeof(DLDevice) == 8, "DLDevice is 8 bytes");
_Static_assert(sizeof(DLDataType) == 4, "DLDataType is 4 bytes");
_Static_assert(offsetof(DLDataType, lanes) == 2, "DLDataType.lanes at 2");
#if UINTPTR_MAX > 0xFFFFFFFFu
_Static_assert(sizeof(DLTensor) == 48, "DLTensor is 48 bytes");
_Static_assert(offsetof(DLTensor, device) == 8, "DLTensor.device at 8");
_Static_assert(offsetof(DLTensor, ndim) == 16, "DLTensor.ndim at 16");
_Static_assert(offsetof(DLTensor, dtype) == 20, "DLTensor.dtype at 20");
_Static_assert(offsetof(DLTensor, shape) == 24, "DLTensor.shape at 24");
_Static_assert(offsetof(DLTensor, strides) == 32, "DLTensor.strides at 32");
_Static_assert(offsetof(DLTensor, byte_offset) == 40, "DLTensor.byte_offset at 40");
_Static_assert(sizeof(DLManagedTensor) == 64, "DLManagedTensor is 64 bytes");
_Static_assert(offsetof(DLManagedTensor, manager_ctx) == 48, "DLManagedTensor.manager_ctx at 48");
_Static_assert(offsetof(DLManagedTensor, deleter) == 56, "DLManagedTensor.deleter at 56");
_Static_assert(sizeof(DLManagedTensorVersioned) == 80, "DLManagedTensorVersioned is 80 bytes");
_Static_assert(offsetof(DLManagedTensorVersioned, manager_ctx) == 8, "manager_ctx at 8");
_Static_assert(offsetof(DLManagedTensorVersioned, deleter) == 16, "deleter at 16");
_Static_assert(offsetof(DLManagedTensorVersioned, flags) == 24, "flags at 24");
_Static_assert(offsetof(DLManagedTensorVersioned, dl_tensor) == 32, "dl_tensor at 32");
#endif

int dlp_buffer_error(lua_State *L, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lua_pushstring(L, DLPACK_LUA_BUFFER_ERROR ": ");
  const char *message = lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  if (!message) return lua_error(L); /* 5.5: out of memory, its error message pushed */
  lua_concat(L, 2);
  return lua_error(L);
}

void dlp_register(lua_State *L, int table, const luaL_Reg *functions) {
  lua_pushvalue(L, table);
  dlp_push_metatable(L);
  luaL_setfuncs(L, functions, 1);
  lua_pop(L, 1);
}

void dlp_new_class(lua_State *L, const char *mt, const luaL_Reg *methods, lua_CFunction index, lua_CFunction close,
                   lua_CFunction tostring) {
  if (!luaL_newmetatable(L, mt)) { /* made before in this state: objects made since keep it */
    lua_pop(L, 1);
    return;
  }
  int meta = lua_gettop(L);
  lua_newtable(L);
  dlp_register(L, lua_gettop(L), methods);
  if (index) lua_pushcclosure(L, index, 1); /* over the methods */
  lua_setfield(L, meta, "__index");
  lua_pushcfunction(L, close);
  lua_setfield(L, meta, "__gc");
  lua_pushcfunction(L, close);
  lua_setfield(L, meta, "__close");
  if (tostring) {
    lua_pushcfunction(L, tostring);
    lua_setfield(L, meta, "__tostring");
  }
  dlp_push_metatable_view(L, meta);
  lua_setfield(L, meta, "__metatable");
  lua_pop(L, 1);
}

/* ---- the per-state record, and what the module's cleanup at lua_close does ---- */

static const char state_key = 0;
static atomic_uint_fast64_t last_state_id;

dlp_State *dlp_state(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &state_key);
  dlp_State *st = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return st;
}

/* Lua 5.4's generational collector frees only young garbage in its minor collections, and the
 * steps dlp_gc_account asks for are minor ones: a temporary that lived through two of them (the
 * operands of an expression such as (x / 255 - mean) / std) grows old, and old garbage waits for
 * a major collection, which only the Lua heap's own growth brings on. Tensors' memory is outside
 * that heap, so a frame loop reached a gigabyte before one came. A full collection is therefore
 * asked for after each 64 MiB of new tensor memory, or four times the Lua heap when that is
 * larger, so that its cost stays a fraction of the work that made the garbage. */
#define EXTERNAL_MIN ((size_t)64 << 20)

int dlp_state_external(lua_State *L, size_t nbytes) {
  dlp_State *st = dlp_state(L);
  if (!st) return 0;
  st->external += nbytes;
  size_t heap = (size_t)lua_gc(L, LUA_GCCOUNT, 0) * 1024 * 4;
  if (st->external < (heap > EXTERNAL_MIN ? heap : EXTERNAL_MIN)) return 0;
  st->external = 0;
  return 1;
}

/* Each shareable block holds a descriptor (dlpack.ipc), and a process has about a thousand of
 * them, while the collector sees a few bytes of userdata for each: a loop receiving small tensors
 * would run out of descriptors long before the collector ran. So a full collection every 128. */
#define DESCRIPTORS_PER_COLLECTION 128

int dlp_state_descriptor(lua_State *L) {
  dlp_State *st = dlp_state(L);
  if (!st || ++st->descriptors < DESCRIPTORS_PER_COLLECTION) return 0;
  st->descriptors = 0;
  return 1;
}

void dlp_untrack(dlp_Tracked *node) {
  if (!node->pprev) return;
  *node->pprev = node->next;
  if (node->next) node->next->pprev = node->pprev;
  node->pprev = NULL;
  node->next = NULL;
}

void dlp_track(dlp_State *st, dlp_Tracked *node, void (*close)(dlp_Tracked *self)) {
  node->close = close;
  node->next = st->tracked;
  if (node->next) node->next->pprev = &node->next;
  node->pprev = &st->tracked;
  st->tracked = node;
}

dlp_State *dlp_state_for_new(lua_State *L, const char *kind) {
  if (dlp_gc_runs_normally(L)) return NULL; /* no finalizer is running: nothing to watch */
  dlp_State *st = dlp_state(L);
  if (st && st->closing)
    luaL_error(L, "cannot make %s: this lua_State is closing (lua_close ran the dlpack module's cleanup, "
                  "and what finalizers make after it would never be released)", kind);
  return st;
}

/* Runs at lua_close (the record is in the registry until then). Finalizers made before the
 * module run after this; see dlp_state_for_new. */
static int state_gc(lua_State *L) {
  dlp_State *st = lua_touserdata(L, 1);
  st->closing = 1; /* first: nothing released below can make more */
  while (st->tracked) {
    dlp_Tracked *node = st->tracked;
    dlp_untrack(node);
    node->close(node);
  }
  /* capsules first: their deleters may put memory on hold behind queued work, which settle frees */
  dlp_capsule_state_closed(st->id);
  dlp_cuda_settle();
  return 0;
}

static void state_open(lua_State *L) {
  if (dlp_state(L)) return;
  dlp_State *st = lua_newuserdatauv(L, sizeof *st, 0);
  st->id = atomic_fetch_add(&last_state_id, 1) + 1;
  st->closing = 0;
  st->isolated = 0;
  st->tracked = NULL;
  st->external = 0;
  st->descriptors = 0;
  st->files_denied = 0;
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, state_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  /* right after the finaliser is in place, so it always balances: lua_rawsetp may raise (out of
   * memory), and the record's finaliser runs then all the same */
  dlp_capsule_state_opened();
  lua_rawsetp(L, LUA_REGISTRYINDEX, &state_key);
}

/* The whole string is searched: a message may hold a NUL before the marker. */
static int l_is_buffer_error(lua_State *L) {
  static const char marker[] = DLPACK_LUA_BUFFER_ERROR;
  size_t len = 0, m = sizeof marker - 1;
  const char *s = lua_type(L, 1) == LUA_TSTRING ? lua_tolstring(L, 1, &len) : NULL;
  int found = 0;
  for (size_t i = 0; s && !found && i + m <= len; i++) found = memcmp(s + i, marker, m) == 0;
  lua_pushboolean(L, found);
  return 1;
}

/* Marks the tensor metatable as this copy of the library's. Another copy (another file, maybe
 * another version: a script may point package.cpath at any) would share the metatables, whose
 * names are the same, but not their layouts nor its capsule table: it is refused. */
static const char library_identity = 0;

static void check_one_library(lua_State *L) {
  int top = lua_gettop(L);
  if (luaL_getmetatable(L, DLPACK_LUA_TENSOR_MT) != LUA_TNIL && lua_rawgetp(L, -1, &library_identity) == LUA_TNIL)
    luaL_error(L, "dlpack: another copy of the dlpack library (another file) is open in this lua_State already");
  lua_settop(L, top);
}

/* The tensor methods as they were when the module opened: functions made of them call these, so
 * that a script changing dlpack.Tensor (which adds methods to every tensor) does not change them. */
static const char methods_key = 0;

void dlp_push_methods(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &methods_key);
}

void dlp_push_method(lua_State *L, const char *name) {
  dlp_push_methods(L);
  lua_pushstring(L, name);
  lua_rawget(L, -2);
  lua_remove(L, -2);
}

DLPACK_LUA_API int luaopen_dlpack(lua_State *L) {
  int module, methods, meta;
  /* Exported tensors carry deleters that point into this library, and other libraries may call
   * them after lua_close, which unloads the modules that `require` loaded: stay loaded. */
  static dlp_once_flag pinned = DLP_ONCE_INIT;
  dlp_call_once(&pinned, dlp_library_pin_self);
  check_one_library(L);
  lua_newtable(L);
  module = lua_gettop(L);
  lua_newtable(L);
  methods = lua_gettop(L);
  /* opened before in this state (a second require): the same metatable keeps older tensors valid */
  luaL_newmetatable(L, DLPACK_LUA_TENSOR_MT);
  meta = lua_gettop(L);
  lua_pushboolean(L, 1);
  lua_rawsetp(L, meta, &library_identity);
  dlp_tensor_register(L, module, methods, meta);
  dlp_views_register(L, methods);
  dlp_create_register(L, module, methods, meta);
  dlp_random_register(L, module, methods, meta);
  dlp_flip_register(L, module, methods, meta);
  dlp_blas_register(L, module, methods, meta);
  dlp_matmul_register(L, module, methods, meta);
  dlp_join_register(L, module, methods, meta);
  dlp_index_register(L, module, methods, meta);
  dlp_copy_register(L, methods);
  dlp_format_register(L, module, methods, meta);
  dlp_reduce_register(L, module, methods, meta);
  dlp_threads_register(L, module);
  dlp_sort_register(L, module, methods, meta);
  dlp_scan_register(L, module, methods, meta);
  dlp_capsule_register(L, module);
  dlp_protocol_register(L, module, methods, meta);
  dlp_cuda_register(L, module);
  dlp_elementwise_register(L, module, methods, meta);
  dlp_kernels_register(L, module);
  dlp_shape_register(L, module, methods, meta); /* after the functions it calls */
  /* the methods as they are now, for the functions made of them (dlp_push_method): norm's too */
  lua_newtable(L);
  for (lua_pushnil(L); lua_next(L, methods); lua_pop(L, 1)) {
    lua_pushvalue(L, -2);
    lua_pushvalue(L, -2);
    lua_rawset(L, -5);
  }
  lua_rawsetp(L, LUA_REGISTRYINDEX, &methods_key);
  dlp_norm_register(L, module, methods, meta);
  dlp_hostapi_register(L);
  dlp_npy_register(L, module);
  state_open(L);
  lua_pushvalue(L, methods);
  lua_setfield(L, module, "Tensor"); /* the methods, for extension from Lua */
  lua_pushliteral(L, DLPACK_LUA_VERSION);
  lua_setfield(L, module, "_VERSION");
  lua_createtable(L, 0, 2);
  lua_pushinteger(L, DLPACK_MAJOR_VERSION);
  lua_setfield(L, -2, "major");
  lua_pushinteger(L, DLPACK_MINOR_VERSION);
  lua_setfield(L, -2, "minor");
  lua_setfield(L, module, "DLPACK_VERSION");
  dlp_push_device_types(L);
  lua_setfield(L, module, "device_type");
  lua_pushliteral(L, DLPACK_LUA_BUFFER_ERROR);
  lua_setfield(L, module, "BufferError");
  static const luaL_Reg functions[] = {{"is_buffer_error", l_is_buffer_error}, {NULL, NULL}};
  dlp_register(L, module, functions);
  lua_settop(L, module);
  return 1;
}

/* `require`'s entry point: the Lua that calls it must be the Lua this module is built for
 * (hosts that link the static library call luaopen_dlpack, built with their own Lua). */
DLPACK_LUA_API int luaopen_dlpack_core(lua_State *L) {
  dlp_check_runtime(L, DLP_CALLER());
  return luaopen_dlpack(L);
}

/* The module opened in L, unless this copy of it is open there already: a second open would
 * make a new dlpack.Tensor and point the tensors' __index at it, away from the one scripts hold. */
void dlp_open_once(lua_State *L) {
  int top = lua_gettop(L);
  int opened = luaL_getmetatable(L, DLPACK_LUA_TENSOR_MT) != LUA_TNIL &&
               lua_rawgetp(L, -1, &library_identity) != LUA_TNIL && dlp_state(L) != NULL;
  lua_settop(L, top);
  if (opened) return;
  luaopen_dlpack(L);
  lua_pop(L, 1);
}

/* Not a luaopen_ name on purpose: `require` only ever calls luaopen_* functions, whatever a
 * script does to package.cpath, package.searchers or package.loaded, so no script that can
 * only call `require` reaches it. A host opens it through C, or lua/dlpack/unsafe.lua through
 * package.loadlib, which a sandbox removes (README, "Safety"). */
DLPACK_LUA_API int dlpack_lua_open_unsafe(lua_State *L) {
  /* the tensor and stream metatables first: opened before dlpack (a host's luaL_requiref in any
   * order), wrap and wrap_stream made objects without one, which nothing ever released */
  dlp_open_once(L);
  lua_newtable(L);
  dlp_unsafe_register(L, lua_gettop(L));
  state_open(L);
  return 1;
}
