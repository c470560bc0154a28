/* CUDA: found at run time. The driver library is opened with dlopen the first
 * time it is needed, so the module loads and works on machines with no GPU,
 * no driver and no toolkit; there dlpack.cuda.is_available() says why not.
 *
 * Streams. Every block of CUDA memory remembers the stream its last work was
 * issued on (dlp_Owner.stream; NULL means the legacy default stream): the
 * stream of the last asynchronous copy into it, or, for imported tensors, the
 * stream this module passed to the producer. Exporting to a consumer stream
 * records an event there and makes the consumer's stream wait on it.
 *
 * Contexts. Each call runs with the primary context of the device it is about
 * current, and restores the caller's context afterwards, so host code that
 * manages its own contexts (PyTorch, CuPy) is not disturbed. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"
#include "internal.h"

#define MAX_DEVICES DLP_MAX_CUDA_DEVICES
#define STREAM_MT "dlpack.cuda.Stream"
#define EVENT_MT "dlpack.cuda.Event"

static struct {
  pthread_once_t once;
  int available;
  int device_count;
  char reason[256];
  dlp_CudaDriver fn;
  pthread_mutex_t lock; /* contexts, owner streams and pending host releases */
  CUcontext contexts[MAX_DEVICES];
} driver = {PTHREAD_ONCE_INIT, 0, 0, "", {0}, PTHREAD_MUTEX_INITIALIZER, {0}};

static void load_driver(void) {
  const char *path = getenv("DLPACK_LUA_CUDA_DRIVER");
  const char *missing = NULL;
  void *lib, *elapsed_v2;
  int rc;
  if (!path || !*path) path = "libcuda.so.1";
  lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    snprintf(driver.reason, sizeof driver.reason, "the CUDA driver (%s) cannot be loaded: %s", path,
             why ? why : "not found");
    return;
  }
#define DLP_CUDA_LOAD(name, params) \
  if (!(*(void **)&driver.fn.name = dlsym(lib, #name)) && !missing) missing = #name;
  DLP_CUDA_FUNCTIONS(DLP_CUDA_LOAD)
#undef DLP_CUDA_LOAD
  /* drivers of CUDA 12.8 and later have a _v2 with the same signature */
  if ((elapsed_v2 = dlsym(lib, "cuEventElapsedTime_v2"))) *(void **)&driver.fn.cuEventElapsedTime = elapsed_v2;
  if (missing) {
    snprintf(driver.reason, sizeof driver.reason, "the CUDA driver %s lacks %s (too old?)", path, missing);
  } else if ((rc = driver.fn.cuInit(0)) != CUDA_SUCCESS) {
    snprintf(driver.reason, sizeof driver.reason, "cuInit failed with CUDA error %d (no GPU, or driver mismatch)", rc);
  } else if (driver.fn.cuDeviceGetCount(&driver.device_count) != CUDA_SUCCESS || driver.device_count == 0) {
    snprintf(driver.reason, sizeof driver.reason, "the CUDA driver reports no devices");
    driver.device_count = 0;
  } else {
    if (driver.device_count > MAX_DEVICES) driver.device_count = MAX_DEVICES;
    driver.available = 1;
    return; /* the library stays loaded for the process */
  }
  dlclose(lib);
}

static int cuda_ready(void) {
  pthread_once(&driver.once, load_driver);
  return driver.available;
}

static void require_cuda(lua_State *L, const char *what) {
  if (!cuda_ready()) luaL_error(L, "%s: CUDA is not available: %s", what, driver.reason);
}

static void check(lua_State *L, CUresult rc, const char *what) {
  const char *text = NULL;
  if (rc == CUDA_SUCCESS) return;
  if (driver.fn.cuGetErrorString) driver.fn.cuGetErrorString(rc, &text);
  luaL_error(L, "%s: CUDA error %d (%s)", what, (int)rc, text ? text : "unknown error");
}

static int check_device_id(lua_State *L, lua_Integer id, const char *what) {
  if (id < 0 || id >= driver.device_count)
    luaL_error(L, "%s: no CUDA device %I (this machine has %d)", what, id, driver.device_count);
  return (int)id;
}

/* The device whose context serves memory on d (pinned and managed memory: device 0). */
static int device_of(DLDevice d) {
  return d.device_type == kDLCUDA ? d.device_id : 0;
}

/* ---- contexts ---- */

typedef struct Scope {
  CUcontext saved;
  int changed;
} Scope;

/* Make device's primary context current, remembering the caller's. */
static CUresult enter(int device, Scope *scope) {
  CUcontext ctx, current = NULL;
  CUresult rc = CUDA_SUCCESS;
  scope->changed = 0;
  if (device < 0 || device >= driver.device_count) return 101; /* CUDA_ERROR_INVALID_DEVICE */
  pthread_mutex_lock(&driver.lock);
  if (!driver.contexts[device]) {
    CUdevice dev;
    rc = driver.fn.cuDeviceGet(&dev, device);
    if (rc == CUDA_SUCCESS) rc = driver.fn.cuDevicePrimaryCtxRetain(&driver.contexts[device], dev);
  }
  ctx = driver.contexts[device];
  pthread_mutex_unlock(&driver.lock);
  if (rc != CUDA_SUCCESS) return rc;
  driver.fn.cuCtxGetCurrent(&current);
  scope->saved = current;
  if (current != ctx) {
    rc = driver.fn.cuCtxSetCurrent(ctx);
    scope->changed = rc == CUDA_SUCCESS;
  }
  return rc;
}

static void leave(Scope *scope) {
  if (scope->changed) driver.fn.cuCtxSetCurrent(scope->saved);
}

/* ---- stream records: shared by stream objects and by the memory they ordered ---- */

struct dlp_CudaStream {
  atomic_long refs;
  CUstream handle;
  int device;
  int owned;    /* created here: destroyed with the last reference */
  int is_static;
};

/* Handles 1 and 2 name the legacy and per-thread default streams of whichever context is
 * current, so there is one record of each per device. */
static dlp_CudaStream default_streams[2][MAX_DEVICES];
static pthread_once_t default_streams_once = PTHREAD_ONCE_INIT;

static void fill_default_streams(void) {
  for (int kind = 0; kind < 2; kind++)
    for (int device = 0; device < MAX_DEVICES; device++) {
      dlp_CudaStream *s = &default_streams[kind][device];
      atomic_init(&s->refs, 1);
      s->handle = kind ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
      s->device = device;
      s->owned = 0;
      s->is_static = 1;
    }
}

static dlp_CudaStream *default_stream(CUstream handle, int device) {
  pthread_once(&default_streams_once, fill_default_streams);
  return &default_streams[handle == CU_STREAM_PER_THREAD][device];
}

/* A stream to use for work on device: the default streams stand for that device's own. */
static dlp_CudaStream *on_device(dlp_CudaStream *s, int device) {
  if (s->handle == CU_STREAM_LEGACY || s->handle == CU_STREAM_PER_THREAD) return default_stream(s->handle, device);
  return s;
}

static void stream_retain(dlp_CudaStream *s) {
  if (!s->is_static) atomic_fetch_add(&s->refs, 1);
}

void dlp_cuda_stream_release(dlp_CudaStream *s) {
  if (s->is_static || atomic_fetch_sub(&s->refs, 1) != 1) return;
  if (s->owned) {
    Scope scope; /* the driver lets pending work finish before it frees the stream */
    if (enter(s->device, &scope) == CUDA_SUCCESS) driver.fn.cuStreamDestroy_v2(s->handle);
    leave(&scope);
  }
  free(s);
}

uintptr_t dlp_cuda_stream_handle(const dlp_CudaStream *s) {
  return (uintptr_t)s->handle;
}

static dlp_CudaStream *new_record(CUstream handle, int device, int owned) {
  dlp_CudaStream *s = malloc(sizeof *s);
  if (!s) return NULL;
  atomic_init(&s->refs, 1);
  s->handle = handle;
  s->device = device;
  s->owned = owned;
  s->is_static = 0;
  return s;
}

void dlp_owner_set_stream(dlp_Owner *o, dlp_CudaStream *s) {
  dlp_CudaStream *old;
  if (s) stream_retain(s);
  pthread_mutex_lock(&driver.lock);
  old = atomic_load(&o->stream);
  atomic_store(&o->stream, s);
  pthread_mutex_unlock(&driver.lock);
  if (old) dlp_cuda_stream_release(old);
}

/* The stream of the pending work on o's memory (on device d), retained. Device memory with no
 * stream recorded was last used on its device's legacy stream; host memory has no pending work
 * unless an asynchronous copy recorded one (NULL). */
static dlp_CudaStream *owner_stream(dlp_Owner *o, DLDevice d) {
  dlp_CudaStream *s;
  pthread_mutex_lock(&driver.lock);
  s = atomic_load(&o->stream);
  if (!s && d.device_type == kDLCUDA) s = default_stream(CU_STREAM_LEGACY, device_of(d));
  if (s) stream_retain(s);
  pthread_mutex_unlock(&driver.lock);
  return s;
}

/* waiter waits for everything issued on producer so far (nothing when producer is NULL): an event
 * recorded in the producer's context (events live on their stream's device), waited on in the
 * waiter's. */
static CUresult make_wait(const dlp_CudaStream *waiter, const dlp_CudaStream *producer) {
  CUevent ev;
  CUresult rc;
  Scope scope;
  if (!producer || (waiter->handle == producer->handle && waiter->device == producer->device)) return CUDA_SUCCESS;
  rc = enter(producer->device, &scope);
  if (rc == CUDA_SUCCESS && (rc = driver.fn.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING)) == CUDA_SUCCESS &&
      (rc = driver.fn.cuEventRecord(ev, producer->handle)) != CUDA_SUCCESS)
    driver.fn.cuEventDestroy_v2(ev);
  leave(&scope);
  if (rc != CUDA_SUCCESS) return rc;
  rc = enter(waiter->device, &scope);
  if (rc == CUDA_SUCCESS) rc = driver.fn.cuStreamWaitEvent(waiter->handle, ev, 0);
  leave(&scope);
  if (enter(producer->device, &scope) == CUDA_SUCCESS) driver.fn.cuEventDestroy_v2(ev); /* freed once unused */
  leave(&scope);
  return rc;
}

void dlp_cuda_order_for_consumer(lua_State *L, dlp_Owner *o, DLDevice device, dlp_CudaStream *consumer) {
  CUresult rc;
  if (!consumer) return; /* -1: the consumer asked for no synchronisation */
  require_cuda(L, "export");
  dlp_CudaStream *pending = owner_stream(o, device);
  rc = make_wait(on_device(consumer, device_of(device)), pending);
  if (pending) dlp_cuda_stream_release(pending);
  check(L, rc, "export (ordering the consumer's stream)");
}

/* ---- host memory kept alive until asynchronous copies that read or write it finish ---- */

typedef struct Pending {
  CUevent done;
  int device;
  dlp_Owner *owner;
  struct Pending *next;
} Pending;

static Pending *pending_list;

/* Release what finished copies held; with wait, wait for all of them first. */
static void drain_pending(int wait) {
  Pending **link, *p;
  pthread_mutex_lock(&driver.lock);
  link = &pending_list;
  while ((p = *link)) {
    if (wait) driver.fn.cuEventSynchronize(p->done);
    if (driver.fn.cuEventQuery(p->done) == CUDA_ERROR_NOT_READY) {
      link = &p->next;
      continue;
    }
    *link = p->next;
    pthread_mutex_unlock(&driver.lock);
    Scope scope;
    if (enter(p->device, &scope) == CUDA_SUCCESS) driver.fn.cuEventDestroy_v2(p->done);
    leave(&scope);
    dlp_owner_release(p->owner);
    free(p);
    pthread_mutex_lock(&driver.lock);
    link = &pending_list;
  }
  pthread_mutex_unlock(&driver.lock);
}

/* Hold o until the work issued on stream so far is done (caller's context is current). */
static CUresult hold_until_done(dlp_Owner *o, CUstream stream, int device) {
  Pending *p = malloc(sizeof *p);
  CUresult rc;
  if (!p) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
  rc = driver.fn.cuEventCreate(&p->done, CU_EVENT_DISABLE_TIMING);
  if (rc == CUDA_SUCCESS && (rc = driver.fn.cuEventRecord(p->done, stream)) != CUDA_SUCCESS)
    driver.fn.cuEventDestroy_v2(p->done);
  if (rc != CUDA_SUCCESS) {
    free(p);
    return rc;
  }
  dlp_owner_retain(o);
  p->owner = o;
  p->device = device;
  pthread_mutex_lock(&driver.lock);
  p->next = pending_list;
  pending_list = p;
  pthread_mutex_unlock(&driver.lock);
  return CUDA_SUCCESS;
}

void dlp_cuda_settle(void) {
  if (driver.available) drain_pending(1);
}

/* ---- memory ---- */

void *dlp_cuda_alloc(lua_State *L, DLDevice device, size_t nbytes, int zeroed) {
  Scope scope;
  CUresult rc;
  CUdeviceptr d = 0;
  void *p = NULL;
  require_cuda(L, "allocate");
  check_device_id(L, device_of(device), "allocate");
  drain_pending(0);
  if (nbytes == 0) return NULL;
  rc = enter(device_of(device), &scope);
  if (rc == CUDA_SUCCESS) {
    if (device.device_type == kDLCUDA) {
      rc = driver.fn.cuMemAlloc_v2(&d, nbytes);
      p = (void *)(uintptr_t)d;
      if (rc == CUDA_SUCCESS && zeroed) {
        rc = driver.fn.cuMemsetD8Async(d, 0, nbytes, CU_STREAM_LEGACY);
        if (rc == CUDA_SUCCESS) rc = driver.fn.cuStreamSynchronize(CU_STREAM_LEGACY);
        if (rc != CUDA_SUCCESS) driver.fn.cuMemFree_v2(d);
      }
    } else if (device.device_type == kDLCUDAHost) {
      rc = driver.fn.cuMemHostAlloc(&p, nbytes, CU_MEMHOSTALLOC_PORTABLE);
      if (rc == CUDA_SUCCESS && zeroed) memset(p, 0, nbytes);
    } else {
      rc = driver.fn.cuMemAllocManaged(&d, nbytes, CU_MEM_ATTACH_GLOBAL);
      p = (void *)(uintptr_t)d;
      if (rc == CUDA_SUCCESS && zeroed) memset(p, 0, nbytes);
    }
  }
  leave(&scope);
  check(L, rc, "allocate");
  return p;
}

void dlp_cuda_free(DLDevice device, void *memory) {
  Scope scope;
  if (enter(device_of(device), &scope) == CUDA_SUCCESS) {
    if (device.device_type == kDLCUDAHost) driver.fn.cuMemFreeHost(memory);
    else driver.fn.cuMemFree_v2((CUdeviceptr)(uintptr_t)memory);
  }
  leave(&scope);
}

/* ---- copies between host and device, and between devices ---- */

static void check_contiguous(lua_State *L, const dlp_Tensor *t) {
  if (!dlp_is_contiguous(t))
    luaL_error(L, "copy: the CUDA tensor must be contiguous (its strides are not row-major)");
}

void dlp_cuda_copy(lua_State *L, dlp_Tensor *dst, dlp_Tensor *src, dlp_CudaStream *stream) {
  DLDevice cpu = {kDLCPU, 0};
  int dst_host = dlp_device_is_host(dst->dl.device), src_host = dlp_device_is_host(src->dl.device);
  dlp_Tensor *from = src, *to = dst;
  int top = lua_gettop(L);
  Scope scope;
  CUresult rc;
  if (!dst_host && !dlp_device_is_cuda(dst->dl.device)) dlp_check_host(L, dst, "copy");
  if (!src_host && !dlp_device_is_cuda(src->dl.device)) dlp_check_host(L, src, "copy");
  require_cuda(L, "copy");
  drain_pending(0);
  if (!dst_host) check_contiguous(L, dst);
  if (!src_host) check_contiguous(L, src);
  if (!dst_host && !src_host && dst->dtype != src->dtype)
    luaL_error(L, "copy: cannot convert %s to %s between CUDA devices (convert on the host)",
               dlp_dtypes[src->dtype].name, dlp_dtypes[dst->dtype].name);
  /* Host sides that need converting or compacting go through contiguous host staging tensors,
   * allocated before any memory is taken. */
  if (src_host && (src->dtype != dst->dtype || !dlp_is_contiguous(src)))
    from = dlp_tensor_new(L, dst->dtype, src->flags & DLP_FLAG_SUBBYTE_PADDED, cpu, src->dl.ndim, src->dl.shape, 0);
  if (dst_host && (src->dtype != dst->dtype || !dlp_is_contiguous(dst)))
    to = dlp_tensor_new(L, src->dtype, src->flags & DLP_FLAG_SUBBYTE_PADDED, cpu, dst->dl.ndim, dst->dl.shape, 0);
  if (from != src) dlp_copy(L, from, src, NULL, "copy"); /* host to host: converts, checks src live */
  dlp_live(L, src, "copy");
  dlp_live(L, dst, "copy");
  int device = device_of(dst_host ? src->dl.device : dst->dl.device);
  dlp_CudaStream *s = on_device(stream ? stream : default_stream(CU_STREAM_LEGACY, device), device);
  size_t bytes = (size_t)dlp_nbytes(from);
  dlp_CudaStream *after_src = owner_stream(src->owner, src->dl.device);
  dlp_CudaStream *after_dst = owner_stream(dst->owner, dst->dl.device);
  /* the copy waits for what is pending on both blocks */
  rc = make_wait(s, after_src);
  if (rc == CUDA_SUCCESS) rc = make_wait(s, after_dst);
  if (rc == CUDA_SUCCESS) rc = enter(s->device, &scope);
  else scope.changed = 0;
  if (rc == CUDA_SUCCESS && bytes > 0)
    rc = driver.fn.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dlp_first_element(to),
                                 (CUdeviceptr)(uintptr_t)dlp_first_element(from), bytes, s->handle);
  if (rc == CUDA_SUCCESS && (!stream || to != dst)) rc = driver.fn.cuStreamSynchronize(s->handle);
  else if (rc == CUDA_SUCCESS) {
    /* asynchronous: host memory involved must outlive the copy */
    if (src_host) rc = hold_until_done(from->owner, s->handle, device);
    if (rc == CUDA_SUCCESS && dst_host) rc = hold_until_done(to->owner, s->handle, device);
  }
  leave(&scope);
  if (after_src) dlp_cuda_stream_release(after_src);
  if (after_dst) dlp_cuda_stream_release(after_dst);
  check(L, rc, "copy");
  if (stream) dlp_owner_set_stream(dst->owner, s);
  if (to != dst) dlp_copy(L, dst, to, NULL, "copy"); /* convert or scatter on the host */
  lua_settop(L, top);
}

/* ---- stream objects ---- */

typedef struct StreamObject {
  dlp_CudaStream *s; /* NULL once closed */
} StreamObject;

static StreamObject *push_stream_object(lua_State *L) {
  StreamObject *o = lua_newuserdatauv(L, sizeof *o, 0);
  o->s = NULL;
  luaL_setmetatable(L, STREAM_MT);
  return o;
}

static dlp_CudaStream *check_open_stream(lua_State *L, int idx) {
  StreamObject *o = luaL_checkudata(L, idx, STREAM_MT);
  if (!o->s) luaL_argerror(L, idx, "stream was closed");
  return o->s;
}

static int l_stream_new(lua_State *L) {
  lua_Integer device = 0, priority = 0;
  CUstream handle;
  Scope scope;
  CUresult rc;
  if (!lua_isnoneornil(L, 2)) { /* argument 1 is the Stream table (__call) */
    luaL_checktype(L, 2, LUA_TTABLE);
    if (lua_getfield(L, 2, "device") != LUA_TNIL) device = luaL_checkinteger(L, -1);
    if (lua_getfield(L, 2, "priority") != LUA_TNIL) priority = luaL_checkinteger(L, -1);
  }
  require_cuda(L, "Stream");
  check_device_id(L, device, "Stream");
  StreamObject *o = push_stream_object(L);
  rc = enter((int)device, &scope);
  if (rc == CUDA_SUCCESS) rc = driver.fn.cuStreamCreateWithPriority(&handle, CU_STREAM_NON_BLOCKING, (int)priority);
  leave(&scope);
  check(L, rc, "Stream");
  if (!(o->s = new_record(handle, (int)device, 1))) {
    if (enter((int)device, &scope) == CUDA_SUCCESS) driver.fn.cuStreamDestroy_v2(handle);
    leave(&scope);
    return luaL_error(L, "Stream: not enough memory");
  }
  return 1;
}

void dlp_cuda_push_wrapped(lua_State *L, uintptr_t handle, int device) {
  StreamObject *o = push_stream_object(L);
  if (!(o->s = new_record((CUstream)handle, device, 0))) luaL_error(L, "Stream.wrap: not enough memory");
}

/* dlpack.unsafe.wrap_stream(handle [, device]): a foreign cudaStream_t, given as an integer. */
int dlp_cuda_wrap_stream(lua_State *L) {
  uintptr_t handle;
  if (lua_type(L, 1) == LUA_TLIGHTUSERDATA) handle = (uintptr_t)lua_touserdata(L, 1);
  else handle = (uintptr_t)luaL_checkinteger(L, 1);
  lua_Integer device = luaL_optinteger(L, 2, 0);
  if (handle == 0) return luaL_argerror(L, 1, "stream 0 is ambiguous on CUDA (use 1 for the legacy default stream)");
  if (device < 0 || device >= MAX_DEVICES) return luaL_argerror(L, 2, "invalid device id");
  dlp_cuda_push_wrapped(L, handle, (int)device);
  return 1;
}

dlp_CudaStream *dlp_cuda_test_stream_object(lua_State *L, int idx) {
  StreamObject *o = luaL_testudata(L, idx, STREAM_MT);
  return o ? o->s : NULL;
}

dlp_CudaStream *dlp_cuda_check_stream(lua_State *L, int idx, DLDevice on, int dflt, const char *what) {
  int isint, device = device_of(on);
  lua_Integer v = dflt;
  StreamObject *holder, *o;
  if (idx) idx = lua_absindex(L, idx);
  if (idx && lua_isnil(L, idx)) idx = 0;
  if (!dlp_device_has_streams(on) || on.device_type == kDLROCM) {
    if (idx && !(lua_tointegerx(L, idx, &isint) == -1 && isint)) {
      dlp_push_device_name(L, on);
      luaL_error(L, "%s: stream must be nil or -1 for a tensor on %s%s", what, lua_tostring(L, -1),
                 on.device_type == kDLROCM ? " (ROCm streams are not supported)" : ", which has no streams");
    }
    lua_pushnil(L);
    return NULL;
  }
  /* the holder first: allocating it may run finalizers, which may close the stream given */
  holder = push_stream_object(L);
  if (idx && (o = luaL_testudata(L, idx, STREAM_MT))) {
    if (!o->s) luaL_error(L, "%s: the stream was closed", what);
    holder->s = on_device(o->s, device);
    stream_retain(holder->s);
    return holder->s;
  }
  if (idx) {
    v = lua_tointegerx(L, idx, &isint);
    if (!isint || !(v == -1 || v == 1 || v == 2))
      luaL_error(L, "%s: stream must be a dlpack.cuda.Stream or one of the DLPack values -1, 1, 2, got %s%s", what,
                 isint ? lua_pushfstring(L, "%I", v) : luaL_typename(L, idx),
                 isint && v > 2 ? " (integer handles are raw pointers: see dlpack.unsafe.wrap_stream)"
                 : isint && v == 0 ? " (stream 0 is ambiguous on CUDA; use 1, the legacy default)" : "");
  }
  if (v == -1) return NULL;
  holder->s = default_stream(v == 1 ? CU_STREAM_LEGACY : CU_STREAM_PER_THREAD, device);
  return holder->s;
}

static int stream_index(lua_State *L) {
  StreamObject *o = luaL_checkudata(L, 1, STREAM_MT);
  const char *k = luaL_checkstring(L, 2);
  if (lua_getfield(L, lua_upvalueindex(1), k) != LUA_TNIL) return 1;
  if (!o->s) return luaL_error(L, "stream was closed (reading field '%s')", k);
  if (strcmp(k, "handle") == 0) lua_pushinteger(L, (lua_Integer)(uintptr_t)o->s->handle);
  else if (strcmp(k, "device") == 0) lua_pushinteger(L, o->s->device);
  else if (strcmp(k, "owned") == 0) lua_pushboolean(L, o->s->owned);
  else lua_pushnil(L);
  return 1;
}

static int l_stream_close(lua_State *L) {
  StreamObject *o = luaL_checkudata(L, 1, STREAM_MT);
  if (o->s && !o->s->is_static) { /* the default streams own nothing: closing them does nothing */
    dlp_CudaStream *s = o->s;
    o->s = NULL;
    dlp_cuda_stream_release(s);
  }
  return 0;
}

/* Synchronize (or query) the stream at 1, with its device's context current. Streams can be
 * made without the driver (wrap, the default streams), so it is looked up only here. */
static CUresult stream_call(lua_State *L, const char *what, int query) {
  dlp_CudaStream *s = check_open_stream(L, 1);
  Scope scope;
  CUresult rc;
  require_cuda(L, what);
  rc = enter(s->device, &scope);
  if (rc == CUDA_SUCCESS) rc = query ? driver.fn.cuStreamQuery(s->handle) : driver.fn.cuStreamSynchronize(s->handle);
  leave(&scope);
  return rc;
}

static int l_stream_synchronize(lua_State *L) {
  check(L, stream_call(L, "synchronize", 0), "synchronize");
  drain_pending(0);
  return 0;
}

static int l_stream_query(lua_State *L) {
  CUresult rc = stream_call(L, "query", 1);
  if (rc != CUDA_ERROR_NOT_READY) check(L, rc, "query");
  lua_pushboolean(L, rc == CUDA_SUCCESS);
  return 1;
}

/* ---- events ---- */

typedef struct EventObject {
  CUevent ev; /* NULL once closed */
  int device;
} EventObject;

static EventObject *check_event(lua_State *L, int idx) {
  EventObject *e = luaL_checkudata(L, idx, EVENT_MT);
  if (!e->ev) luaL_argerror(L, idx, "event was closed");
  return e;
}

static EventObject *new_event(lua_State *L, int device, int timing) {
  EventObject *e = lua_newuserdatauv(L, sizeof *e, 0);
  Scope scope;
  CUresult rc;
  e->ev = NULL;
  e->device = device;
  luaL_setmetatable(L, EVENT_MT);
  rc = enter(device, &scope);
  if (rc == CUDA_SUCCESS) rc = driver.fn.cuEventCreate(&e->ev, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING);
  leave(&scope);
  if (rc != CUDA_SUCCESS) e->ev = NULL;
  check(L, rc, "Event");
  return e;
}

static int l_event_new(lua_State *L) {
  lua_Integer device = 0;
  int timing = 1;
  if (!lua_isnoneornil(L, 2)) { /* argument 1 is the Event table (__call) */
    luaL_checktype(L, 2, LUA_TTABLE);
    if (lua_getfield(L, 2, "device") != LUA_TNIL) device = luaL_checkinteger(L, -1);
    if (lua_getfield(L, 2, "timing") != LUA_TNIL) timing = lua_toboolean(L, -1);
    lua_settop(L, 2);
  }
  require_cuda(L, "Event");
  check_device_id(L, device, "Event");
  new_event(L, (int)device, timing);
  return 1;
}

static void record_event(lua_State *L, EventObject *e, dlp_CudaStream *s) {
  Scope scope;
  CUresult rc = enter(e->device, &scope);
  if (rc == CUDA_SUCCESS) rc = driver.fn.cuEventRecord(e->ev, s->handle);
  leave(&scope);
  check(L, rc, "record");
}

static int l_event_record(lua_State *L) {
  EventObject *e = check_event(L, 1);
  dlp_CudaStream *s = on_device(lua_isnoneornil(L, 2) ? default_stream(CU_STREAM_LEGACY, e->device)
                                                      : check_open_stream(L, 2), e->device);
  require_cuda(L, "record");
  record_event(L, e, s);
  lua_settop(L, 1);
  return 1;
}

static int event_call(lua_State *L, const char *what, CUresult (*fn)(CUevent)) {
  EventObject *e = check_event(L, 1);
  Scope scope;
  CUresult rc;
  require_cuda(L, what);
  rc = enter(e->device, &scope);
  if (rc == CUDA_SUCCESS) rc = fn(e->ev);
  leave(&scope);
  return rc;
}

static int l_event_synchronize(lua_State *L) {
  check(L, event_call(L, "synchronize", driver.fn.cuEventSynchronize), "synchronize");
  drain_pending(0);
  return 0;
}

static int l_event_query(lua_State *L) {
  CUresult rc = event_call(L, "query", driver.fn.cuEventQuery);
  if (rc != CUDA_ERROR_NOT_READY) check(L, rc, "query");
  lua_pushboolean(L, rc == CUDA_SUCCESS);
  return 1;
}

static int l_event_elapsed(lua_State *L) {
  EventObject *a = check_event(L, 1), *b = check_event(L, 2);
  float ms = 0;
  Scope scope;
  CUresult rc;
  require_cuda(L, "elapsed");
  rc = enter(a->device, &scope);
  if (rc == CUDA_SUCCESS) rc = driver.fn.cuEventElapsedTime(&ms, a->ev, b->ev);
  leave(&scope);
  check(L, rc, "elapsed");
  lua_pushnumber(L, ms);
  return 1;
}

static int l_event_close(lua_State *L) {
  EventObject *e = luaL_checkudata(L, 1, EVENT_MT);
  if (e->ev) {
    Scope scope;
    if (enter(e->device, &scope) == CUDA_SUCCESS) driver.fn.cuEventDestroy_v2(e->ev);
    leave(&scope);
    e->ev = NULL;
  }
  return 0;
}

/* s:wait(event or stream): work issued on s later waits for it. */
static int l_stream_wait(lua_State *L) {
  dlp_CudaStream *s = check_open_stream(L, 1);
  EventObject *e = luaL_testudata(L, 2, EVENT_MT);
  Scope scope;
  CUresult rc;
  require_cuda(L, "wait");
  if (!e) {
    dlp_CudaStream *other = check_open_stream(L, 2);
    rc = make_wait(s, other);
    scope.changed = 0;
  } else {
    if (!e->ev) return luaL_argerror(L, 2, "event was closed");
    rc = enter(s->device, &scope);
    if (rc == CUDA_SUCCESS) rc = driver.fn.cuStreamWaitEvent(s->handle, e->ev, 0);
  }
  leave(&scope);
  check(L, rc, "wait");
  lua_settop(L, 1);
  return 1;
}

/* s:record([event]) -> event */
static int l_stream_record(lua_State *L) {
  int device = check_open_stream(L, 1)->device;
  EventObject *e;
  require_cuda(L, "record");
  if (lua_isnoneornil(L, 2)) {
    e = new_event(L, device, 1);
  } else {
    e = check_event(L, 2);
    lua_settop(L, 2);
  }
  record_event(L, e, check_open_stream(L, 1)); /* again: making the event may have run finalizers */
  return 1;
}

static int l_stream_tostring(lua_State *L) {
  StreamObject *o = luaL_checkudata(L, 1, STREAM_MT);
  if (!o->s) lua_pushliteral(L, "dlpack.cuda.Stream(closed)");
  else lua_pushfstring(L, "dlpack.cuda.Stream(handle=%p, device=%d%s)", (void *)o->s->handle, o->s->device,
                       o->s->owned ? "" : ", wrapped");
  return 1;
}

/* ---- the dlpack.cuda table ---- */

static int l_is_available(lua_State *L) {
  lua_pushboolean(L, cuda_ready());
  if (driver.available) return 1;
  lua_pushstring(L, driver.reason);
  return 2;
}

static int l_device_count(lua_State *L) {
  cuda_ready();
  lua_pushinteger(L, driver.device_count);
  return 1;
}

static void push_static_stream(lua_State *L, dlp_CudaStream *s) {
  push_stream_object(L)->s = s;
}

static void new_class(lua_State *L, const char *mt, const luaL_Reg *methods, lua_CFunction index,
                      lua_CFunction close, lua_CFunction tostring) {
  luaL_newmetatable(L, mt);
  lua_newtable(L);
  luaL_setfuncs(L, methods, 0);
  if (index) lua_pushcclosure(L, index, 1);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, close);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, close);
  lua_setfield(L, -2, "__close");
  if (tostring) {
    lua_pushcfunction(L, tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
}

void dlp_cuda_register(lua_State *L, int module) {
  static const luaL_Reg functions[] = {{"is_available", l_is_available}, {"device_count", l_device_count}, {NULL, NULL}};
  static const luaL_Reg stream_methods[] = {
    {"synchronize", l_stream_synchronize}, {"query", l_stream_query}, {"wait", l_stream_wait},
    {"record", l_stream_record}, {"close", l_stream_close}, {NULL, NULL},
  };
  static const luaL_Reg event_methods[] = {
    {"record", l_event_record}, {"synchronize", l_event_synchronize}, {"query", l_event_query},
    {"elapsed", l_event_elapsed}, {"close", l_event_close}, {NULL, NULL},
  };
  new_class(L, STREAM_MT, stream_methods, stream_index, l_stream_close, l_stream_tostring);
  new_class(L, EVENT_MT, event_methods, NULL, l_event_close, NULL);
  luaL_newlib(L, functions);
  /* Stream(...) and Event(...) construct (foreign handles: dlpack.unsafe.wrap_stream) */
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, l_stream_new);
  lua_setfield(L, -2, "__call");
  lua_setmetatable(L, -2);
  lua_setfield(L, -2, "Stream");
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, l_event_new);
  lua_setfield(L, -2, "__call");
  lua_setmetatable(L, -2);
  lua_setfield(L, -2, "Event");
  push_static_stream(L, default_stream(CU_STREAM_LEGACY, 0));
  lua_setfield(L, -2, "legacy_stream");
  push_static_stream(L, default_stream(CU_STREAM_PER_THREAD, 0));
  lua_setfield(L, -2, "per_thread_stream");
  lua_setfield(L, module, "cuda");
}
