/*
 * dlpack for Lua 5.4: the C API for hosts (game and robotics engines) and for
 * sibling C modules.
 *
 * A host links libdlpack_lua.a, opens the module with
 *   luaL_requiref(L, "dlpack", luaopen_dlpack, 0);
 * and calls the functions below. A C module loaded with `require` (which
 * dlopens it RTLD_LOCAL, so these symbols are not visible to it) gets the same
 * functions from the table stored in the Lua registry under DLPACK_LUA_API_KEY.
 *
 * Ownership in one line each: "push" functions take ownership of the managed
 * tensor (its deleter runs exactly once, also when they raise); "export"
 * functions return a new managed tensor the caller owns and must delete; its
 * deleter may be called from any thread, also after lua_close.
 */
#ifndef DLPACK_LUA_H
#define DLPACK_LUA_H

#include <stdint.h>
#include "dlpack_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Inside the guard: upstream Lua's headers have none, so a C++ host that links a
 * Lua built as C finds lua_* with C linkage (lua.hpp does the same). */
#include <lua.h>

#if defined(_WIN32)
#define DLPACK_LUA_API __declspec(dllexport)
#else
#define DLPACK_LUA_API __attribute__((visibility("default")))
#endif

#define DLPACK_LUA_VERSION "0.1.0"

/* Marker contained in every "cannot be exchanged as asked" error message
 * (the Python world's BufferError); argument errors never contain it. */
#define DLPACK_LUA_BUFFER_ERROR "dlpack.BufferError"

/* Metatable name of tensors (luaL_checkudata works with it). */
#define DLPACK_LUA_TENSOR_MT "dlpack.Tensor"

/* Result codes of the capsule functions. */
#define DLPACK_LUA_OK 0
#define DLPACK_LUA_NOT_A_CAPSULE 1 /* the pointer is not a capsule of this module */
#define DLPACK_LUA_CONSUMED 2      /* the capsule was consumed or released already */

/* Open the module: pushes the `dlpack` table (use with luaL_requiref). */
DLPACK_LUA_API int luaopen_dlpack(lua_State *L);
/* Same table; the name `require "dlpack.core"` looks for. */
DLPACK_LUA_API int luaopen_dlpack_core(lua_State *L);
/* Open `dlpack.unsafe` (raw pointers): luaL_requiref(L, "dlpack.unsafe", dlpack_lua_open_unsafe, 0).
 * Not named luaopen_*, so that `require` alone never reaches it; hosts that run untrusted scripts
 * leave it out. */
DLPACK_LUA_API int dlpack_lua_open_unsafe(lua_State *L);

/* Open `dlpack.ipc` (tensors shared between processes, docs/ipc.md) the same way:
 * luaL_requiref(L, "dlpack.ipc", dlpack_lua_open_ipc, 0). Not named luaopen_* either: it opens sockets. */
DLPACK_LUA_API int dlpack_lua_open_ipc(lua_State *L);

/* Push a versioned managed tensor as a tensor, taking ownership; raises (after calling its deleter) if invalid or
 * if the dlpack module is not open in L, and raises for NULL. */
DLPACK_LUA_API void dlpack_lua_push_versioned(lua_State *L, DLManagedTensorVersioned *managed);
/* Push a legacy managed tensor as a tensor, as dlpack_lua_push_versioned. */
DLPACK_LUA_API void dlpack_lua_push_legacy(lua_State *L, DLManagedTensor *managed);

/* Borrow the DLTensor of the tensor at idx (valid while the tensor is alive and unreleased); raises if not a tensor. */
DLPACK_LUA_API const DLTensor *dlpack_lua_check_tensor(lua_State *L, int idx, uint64_t *flags);
/* As dlpack_lua_check_tensor, but returns NULL for anything that is not a live tensor; flags may be NULL. */
DLPACK_LUA_API const DLTensor *dlpack_lua_test_tensor(lua_State *L, int idx, uint64_t *flags);

/* Export the tensor at idx as a new owned versioned managed tensor (flags carry READ_ONLY); raises on error,
 * also (a dlpack.BufferError) for memory a Lua value owns (dlpack.unsafe.wrap), which cannot outlive L. */
DLPACK_LUA_API DLManagedTensorVersioned *dlpack_lua_export_versioned(lua_State *L, int idx);
/* Export the tensor at idx as a new owned legacy managed tensor; raises for read-only tensors and, as above,
 * for memory a Lua value owns. */
DLPACK_LUA_API DLManagedTensor *dlpack_lua_export_legacy(lua_State *L, int idx);

/* Push a capsule owning a managed tensor, for the script running in L (what a C producer's __dlpack returns); it is
 * handed back (deleter called) when L closes if nobody consumed it. Takes ownership; raises (after calling the deleter)
 * when the module is not open in L, L is closing, or too many capsules are unconsumed. versioned: 1 for
 * DLManagedTensorVersioned. */
DLPACK_LUA_API void dlpack_lua_push_capsule(lua_State *L, void *managed, int versioned);
/* From now on, capsules that scripts in L make (to_dlpack, __dlpack, dlpack.unsafe.adopt) are handed back when L closes,
 * as push_capsule's are, instead of staying consumable by other states until the last one closes: for hosts whose
 * states pass no capsules to each other, sandboxes first (a script then leaves nothing behind). Raises unless the
 * module is open in L. */
DLPACK_LUA_API void dlpack_lua_isolate_capsules(lua_State *L);
/* Make a capsule (a light userdata) owning a managed tensor, for the host itself (passing a tensor between states or
 * threads): never handed back, the host consumes it. NULL when managed is NULL or too many are unconsumed. No
 * lua_State needed. */
DLPACK_LUA_API void *dlpack_lua_capsule_new(void *managed, int versioned);
/* Consume a capsule: on DLPACK_LUA_OK *managed and *versioned are set (where not NULL) and the caller owns the
 * tensor. Any thread. */
DLPACK_LUA_API int dlpack_lua_capsule_consume(void *capsule, void **managed, int *versioned);

/* The cudaStream_t (CUstream) of the dlpack.cuda.Stream at idx; raises if it is not an open stream. */
DLPACK_LUA_API void *dlpack_lua_check_stream(lua_State *L, int idx);
/* Push a non-owning dlpack.cuda.Stream for a host's cudaStream_t on device (the host keeps it alive). */
DLPACK_LUA_API void dlpack_lua_push_stream(lua_State *L, void *stream, int device);

/* dlpack.ipc for hosts that have their own sockets and descriptors (docs/ipc.md). Each takes ownership of fd:
 * it is closed if they raise. Push a dlpack.ipc channel for a connected AF_UNIX SOCK_SEQPACKET socket
 * (SO_PASSCRED, SO_PASSSEC and SO_PASSPIDFD are turned off on it). */
DLPACK_LUA_API void dlpack_lua_push_channel(lua_State *L, int fd);
/* Push a cpu tensor on the memfd fd (sealed against shrinking and growing, checked as a received one is) with the
 * layout's dtype, shape and strides (NULL: row-major); layout->byte_offset is the file offset of its first element,
 * layout->data is ignored. flags: READ_ONLY and IS_SUBBYTE_TYPE_PADDED. Raises naming what is wrong. */
DLPACK_LUA_API void dlpack_lua_push_shared(lua_State *L, int fd, const DLTensor *layout, uint64_t flags);
/* For a shareable tensor at idx (t.shareable): a new descriptor of its memfd (close-on-exec; the caller closes it),
 * and in *offset the file offset of its first element. -1 for anything else. */
DLPACK_LUA_API int dlpack_lua_shared_fd(lua_State *L, int idx, uint64_t *offset);

/* A host's job system for the module's large CPU operations (docs/api.md, "Threads"), so that the module
 * never starts threads of its own to compete with the host's. Once set, an operation that splits its work
 * calls parallel_for(job_ctx, n_tasks, task, task_ctx) instead of using the module's pool: it must call
 * task(task_ctx, i) exactly once for every i in [0, n_tasks), on any threads (the calling one too), in any
 * order, at the same time or not, and return only when every call has returned. Tasks run C loops only:
 * they never touch a lua_State, never raise and never call parallel_for again (a split inside a task runs
 * inline). parallel_for itself must not raise, and must not run Lua code in the lua_State that computes
 * (no collection step, no coroutine of it resumed) before it returns: a finalizer could free the memory the
 * tasks use. parallel_for may be called from several threads at once (one per lua_State computing).
 * Process-wide, for every lua_State; NULL goes back to the module's own pool (dlpack.set_num_threads).
 * Set it before scripts compute, or while no operation runs: job_ctx must stay valid until it is replaced
 * and every call in flight has returned. */
typedef void (*dlpack_lua_task)(void *task_ctx, int64_t i);
typedef void (*dlpack_lua_parallel_for)(void *job_ctx, int64_t n_tasks, dlpack_lua_task task, void *task_ctx);
DLPACK_LUA_API void dlpack_lua_set_parallel_for(dlpack_lua_parallel_for parallel_for, void *job_ctx);

/* The registry key of the function table below (a light userdata to a static struct). */
#define DLPACK_LUA_API_KEY "dlpack.api"
/* Version of the function table; new fields are only ever appended (2 added the stream functions,
 * 3 push_capsule and isolate_capsules, 4 the dlpack.ipc functions, 5 set_parallel_for). */
#define DLPACK_LUA_API_VERSION 5

typedef struct dlpack_lua_api {
  int version; /* DLPACK_LUA_API_VERSION of the module that filled it */
  void (*push_versioned)(lua_State *L, DLManagedTensorVersioned *managed);
  void (*push_legacy)(lua_State *L, DLManagedTensor *managed);
  const DLTensor *(*check_tensor)(lua_State *L, int idx, uint64_t *flags);
  const DLTensor *(*test_tensor)(lua_State *L, int idx, uint64_t *flags);
  DLManagedTensorVersioned *(*export_versioned)(lua_State *L, int idx);
  DLManagedTensor *(*export_legacy)(lua_State *L, int idx);
  void *(*capsule_new)(void *managed, int versioned);
  int (*capsule_consume)(void *capsule, void **managed, int *versioned);
  /* version >= 2 */
  void *(*check_stream)(lua_State *L, int idx);
  void (*push_stream)(lua_State *L, void *stream, int device);
  /* version >= 3 */
  void (*push_capsule)(lua_State *L, void *managed, int versioned);
  void (*isolate_capsules)(lua_State *L);
  /* version >= 4 */
  void (*push_channel)(lua_State *L, int fd);
  void (*push_shared)(lua_State *L, int fd, const DLTensor *layout, uint64_t flags);
  int (*shared_fd)(lua_State *L, int idx, uint64_t *offset);
  /* version >= 5 */
  void (*set_parallel_for)(dlpack_lua_parallel_for parallel_for, void *job_ctx);
} dlpack_lua_api;

/* Fetch the table from the registry of L (NULL if dlpack was not opened in L). */
static inline const dlpack_lua_api *dlpack_lua_get_api(lua_State *L) {
  const dlpack_lua_api *api;
  lua_getfield(L, LUA_REGISTRYINDEX, DLPACK_LUA_API_KEY);
  api = (const dlpack_lua_api *)lua_touserdata(L, -1);
  lua_pop(L, 1);
  return api;
}

#ifdef __cplusplus
}
#endif

#endif /* DLPACK_LUA_H */
