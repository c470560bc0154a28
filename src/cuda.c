/* CUDA: the driver, contexts, stream records, memory and copies (the Lua objects of
 * dlpack.cuda are in stream.c). The driver library is opened with dlopen the first
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

#include "cuda_private.h"


dlp_CudaState dlp_cuda = {PTHREAD_ONCE_INIT, 0, 0, "", {0}, PTHREAD_MUTEX_INITIALIZER, {0}};

static void load_driver(void) {
  const char *path = getenv("DLPACK_LUA_CUDA_DRIVER");
  const char *missing = NULL;
  void *lib, *elapsed_v2;
  int rc;
  if (!path || !*path) path = "libcuda.so.1";
  lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    snprintf(dlp_cuda.reason, sizeof dlp_cuda.reason, "the CUDA driver (%s) cannot be loaded: %s", path,
             why ? why : "not found");
    return;
  }
#define DLP_CUDA_LOAD(name, params) \
  if (!(*(void **)&dlp_cuda.fn.name = dlsym(lib, #name)) && !missing) missing = #name;
  DLP_CUDA_FUNCTIONS(DLP_CUDA_LOAD)
#undef DLP_CUDA_LOAD
  /* drivers of CUDA 12.8 and later have a _v2 with the same signature */
  if ((elapsed_v2 = dlsym(lib, "cuEventElapsedTime_v2"))) *(void **)&dlp_cuda.fn.cuEventElapsedTime = elapsed_v2;
  if (missing) {
    snprintf(dlp_cuda.reason, sizeof dlp_cuda.reason, "the CUDA driver %s lacks %s (too old?)", path, missing);
  } else if ((rc = dlp_cuda.fn.cuInit(0)) != CUDA_SUCCESS) {
    snprintf(dlp_cuda.reason, sizeof dlp_cuda.reason, "cuInit failed with CUDA error %d (no GPU, or driver mismatch)", rc);
  } else if (dlp_cuda.fn.cuDeviceGetCount(&dlp_cuda.device_count) != CUDA_SUCCESS || dlp_cuda.device_count == 0) {
    snprintf(dlp_cuda.reason, sizeof dlp_cuda.reason, "the CUDA driver reports no devices");
    dlp_cuda.device_count = 0;
  } else {
    if (dlp_cuda.device_count > MAX_DEVICES) dlp_cuda.device_count = MAX_DEVICES;
    dlp_cuda.available = 1;
    return; /* the library stays loaded for the process */
  }
  dlclose(lib);
}

int dlp_cuda_ready(void) {
  pthread_once(&dlp_cuda.once, load_driver);
  return dlp_cuda.available;
}

void dlp_cuda_require(lua_State *L, const char *what) {
  if (!dlp_cuda_ready()) luaL_error(L, "%s: CUDA is not available: %s", what, dlp_cuda.reason);
}

void dlp_cuda_check(lua_State *L, CUresult rc, const char *what) {
  const char *text = NULL;
  if (rc == CUDA_SUCCESS) return;
  if (dlp_cuda.fn.cuGetErrorString) dlp_cuda.fn.cuGetErrorString(rc, &text);
  luaL_error(L, "%s: CUDA error %d (%s)", what, (int)rc, text ? text : "unknown error");
}

int dlp_cuda_check_device(lua_State *L, lua_Integer id, const char *what) {
  if (id < 0 || id >= dlp_cuda.device_count)
    luaL_error(L, "%s: no CUDA device %I (this machine has %d)", what, id, dlp_cuda.device_count);
  return (int)id;
}

/* ---- contexts ---- */

/* Make device's primary context current, remembering the caller's. */
CUresult dlp_cuda_enter(int device, dlp_CudaScope *scope) {
  CUcontext ctx, current = NULL;
  CUresult rc = CUDA_SUCCESS;
  scope->changed = 0;
  if (device < 0 || device >= dlp_cuda.device_count) return 101; /* CUDA_ERROR_INVALID_DEVICE */
  pthread_mutex_lock(&dlp_cuda.lock);
  if (!dlp_cuda.contexts[device]) {
    CUdevice dev;
    rc = dlp_cuda.fn.cuDeviceGet(&dev, device);
    if (rc == CUDA_SUCCESS) rc = dlp_cuda.fn.cuDevicePrimaryCtxRetain(&dlp_cuda.contexts[device], dev);
  }
  ctx = dlp_cuda.contexts[device];
  pthread_mutex_unlock(&dlp_cuda.lock);
  if (rc != CUDA_SUCCESS) return rc;
  dlp_cuda.fn.cuCtxGetCurrent(&current);
  scope->saved = current;
  if (current != ctx) {
    rc = dlp_cuda.fn.cuCtxSetCurrent(ctx);
    scope->changed = rc == CUDA_SUCCESS;
  }
  return rc;
}

void dlp_cuda_leave(dlp_CudaScope *scope) {
  if (scope->changed) dlp_cuda.fn.cuCtxSetCurrent(scope->saved);
}

/* ---- stream records: shared by stream objects and by the memory they ordered ---- */

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

dlp_CudaStream *dlp_cuda_default_stream(CUstream handle, int device) {
  pthread_once(&default_streams_once, fill_default_streams);
  return &default_streams[handle == CU_STREAM_PER_THREAD][device];
}

/* A stream to use for work on device: the default streams stand for that device's own. */
dlp_CudaStream *dlp_cuda_on_device(dlp_CudaStream *s, int device) {
  if (s->handle == CU_STREAM_LEGACY || s->handle == CU_STREAM_PER_THREAD) return dlp_cuda_default_stream(s->handle, device);
  return s;
}

void dlp_cuda_stream_retain(dlp_CudaStream *s) {
  if (!s->is_static) atomic_fetch_add(&s->refs, 1);
}

void dlp_cuda_stream_release(dlp_CudaStream *s) {
  if (s->is_static || atomic_fetch_sub(&s->refs, 1) != 1) return;
  if (s->owned) {
    dlp_CudaScope scope; /* the driver lets pending work finish before it frees the stream */
    if (dlp_cuda_enter(s->device, &scope) == CUDA_SUCCESS) dlp_cuda.fn.cuStreamDestroy_v2(s->handle);
    dlp_cuda_leave(&scope);
  }
  free(s);
}

uintptr_t dlp_cuda_stream_handle(const dlp_CudaStream *s) {
  return (uintptr_t)s->handle;
}

dlp_CudaStream *dlp_cuda_new_record(CUstream handle, int device, int owned) {
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
  if (s) dlp_cuda_stream_retain(s);
  pthread_mutex_lock(&dlp_cuda.lock);
  old = atomic_load(&o->stream);
  atomic_store(&o->stream, s);
  pthread_mutex_unlock(&dlp_cuda.lock);
  if (old) dlp_cuda_stream_release(old);
}

/* The stream of the pending work on o's memory (on device d), retained. Device memory with no
 * stream recorded was last used on its device's legacy stream; host memory has no pending work
 * unless an asynchronous copy recorded one (NULL). */
static dlp_CudaStream *owner_stream(dlp_Owner *o, DLDevice d) {
  dlp_CudaStream *s;
  pthread_mutex_lock(&dlp_cuda.lock);
  s = atomic_load(&o->stream);
  if (!s && d.device_type == kDLCUDA) s = dlp_cuda_default_stream(CU_STREAM_LEGACY, dlp_cuda_device_of(d));
  if (s) dlp_cuda_stream_retain(s);
  pthread_mutex_unlock(&dlp_cuda.lock);
  return s;
}

/* waiter waits for everything issued on producer so far (nothing when producer is NULL): an event
 * recorded in the producer's context (events live on their stream's device), waited on in the
 * waiter's. */
CUresult dlp_cuda_make_wait(const dlp_CudaStream *waiter, const dlp_CudaStream *producer) {
  CUevent ev;
  CUresult rc;
  dlp_CudaScope scope;
  if (!producer || (waiter->handle == producer->handle && waiter->device == producer->device)) return CUDA_SUCCESS;
  rc = dlp_cuda_enter(producer->device, &scope);
  if (rc == CUDA_SUCCESS && (rc = dlp_cuda.fn.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING)) == CUDA_SUCCESS &&
      (rc = dlp_cuda.fn.cuEventRecord(ev, producer->handle)) != CUDA_SUCCESS)
    dlp_cuda.fn.cuEventDestroy_v2(ev);
  dlp_cuda_leave(&scope);
  if (rc != CUDA_SUCCESS) return rc;
  rc = dlp_cuda_enter(waiter->device, &scope);
  if (rc == CUDA_SUCCESS) rc = dlp_cuda.fn.cuStreamWaitEvent(waiter->handle, ev, 0);
  dlp_cuda_leave(&scope);
  if (dlp_cuda_enter(producer->device, &scope) == CUDA_SUCCESS) dlp_cuda.fn.cuEventDestroy_v2(ev); /* freed once unused */
  dlp_cuda_leave(&scope);
  return rc;
}

void dlp_cuda_order_for_consumer(lua_State *L, dlp_Owner *o, DLDevice device, dlp_CudaStream *consumer) {
  CUresult rc;
  if (!consumer) return; /* -1: the consumer asked for no synchronisation */
  dlp_cuda_require(L, "export");
  dlp_CudaStream *pending = owner_stream(o, device);
  rc = dlp_cuda_make_wait(dlp_cuda_on_device(consumer, dlp_cuda_device_of(device)), pending);
  if (pending) dlp_cuda_stream_release(pending);
  dlp_cuda_check(L, rc, "export (ordering the consumer's stream)");
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
void dlp_cuda_drain_pending(int wait) {
  Pending **link, *p;
  pthread_mutex_lock(&dlp_cuda.lock);
  link = &pending_list;
  while ((p = *link)) {
    if (wait) dlp_cuda.fn.cuEventSynchronize(p->done);
    if (dlp_cuda.fn.cuEventQuery(p->done) == CUDA_ERROR_NOT_READY) {
      link = &p->next;
      continue;
    }
    *link = p->next;
    pthread_mutex_unlock(&dlp_cuda.lock);
    dlp_CudaScope scope;
    if (dlp_cuda_enter(p->device, &scope) == CUDA_SUCCESS) dlp_cuda.fn.cuEventDestroy_v2(p->done);
    dlp_cuda_leave(&scope);
    dlp_owner_release(p->owner);
    free(p);
    pthread_mutex_lock(&dlp_cuda.lock);
    link = &pending_list;
  }
  pthread_mutex_unlock(&dlp_cuda.lock);
}

/* Hold o until the work issued on stream so far is done (caller's context is current). */
static CUresult hold_until_done(dlp_Owner *o, CUstream stream, int device) {
  Pending *p = malloc(sizeof *p);
  CUresult rc;
  if (!p) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
  rc = dlp_cuda.fn.cuEventCreate(&p->done, CU_EVENT_DISABLE_TIMING);
  if (rc == CUDA_SUCCESS && (rc = dlp_cuda.fn.cuEventRecord(p->done, stream)) != CUDA_SUCCESS)
    dlp_cuda.fn.cuEventDestroy_v2(p->done);
  if (rc != CUDA_SUCCESS) {
    free(p);
    return rc;
  }
  dlp_owner_retain(o);
  p->owner = o;
  p->device = device;
  pthread_mutex_lock(&dlp_cuda.lock);
  p->next = pending_list;
  pending_list = p;
  pthread_mutex_unlock(&dlp_cuda.lock);
  return CUDA_SUCCESS;
}

void dlp_cuda_settle(void) {
  if (dlp_cuda.available) dlp_cuda_drain_pending(1);
}

/* ---- memory ---- */

void *dlp_cuda_alloc(lua_State *L, DLDevice device, size_t nbytes, int zeroed) {
  dlp_CudaScope scope;
  CUresult rc;
  CUdeviceptr d = 0;
  void *p = NULL;
  dlp_cuda_require(L, "allocate");
  dlp_cuda_check_device(L, dlp_cuda_device_of(device), "allocate");
  dlp_cuda_drain_pending(0);
  if (nbytes == 0) return NULL;
  rc = dlp_cuda_enter(dlp_cuda_device_of(device), &scope);
  if (rc == CUDA_SUCCESS) {
    if (device.device_type == kDLCUDA) {
      rc = dlp_cuda.fn.cuMemAlloc_v2(&d, nbytes);
      p = (void *)(uintptr_t)d;
      if (rc == CUDA_SUCCESS && zeroed) {
        rc = dlp_cuda.fn.cuMemsetD8Async(d, 0, nbytes, CU_STREAM_LEGACY);
        if (rc == CUDA_SUCCESS) rc = dlp_cuda.fn.cuStreamSynchronize(CU_STREAM_LEGACY);
        if (rc != CUDA_SUCCESS) dlp_cuda.fn.cuMemFree_v2(d);
      }
    } else if (device.device_type == kDLCUDAHost) {
      rc = dlp_cuda.fn.cuMemHostAlloc(&p, nbytes, CU_MEMHOSTALLOC_PORTABLE);
      if (rc == CUDA_SUCCESS && zeroed) memset(p, 0, nbytes);
    } else {
      rc = dlp_cuda.fn.cuMemAllocManaged(&d, nbytes, CU_MEM_ATTACH_GLOBAL);
      p = (void *)(uintptr_t)d;
      if (rc == CUDA_SUCCESS && zeroed) memset(p, 0, nbytes);
    }
  }
  dlp_cuda_leave(&scope);
  dlp_cuda_check(L, rc, "allocate");
  return p;
}

void dlp_cuda_free(DLDevice device, void *memory) {
  dlp_CudaScope scope;
  if (dlp_cuda_enter(dlp_cuda_device_of(device), &scope) == CUDA_SUCCESS) {
    if (device.device_type == kDLCUDAHost) dlp_cuda.fn.cuMemFreeHost(memory);
    else dlp_cuda.fn.cuMemFree_v2((CUdeviceptr)(uintptr_t)memory);
  }
  dlp_cuda_leave(&scope);
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
  dlp_CudaScope scope;
  CUresult rc;
  if (!dst_host && !dlp_device_is_cuda(dst->dl.device)) dlp_check_host(L, dst, "copy");
  if (!src_host && !dlp_device_is_cuda(src->dl.device)) dlp_check_host(L, src, "copy");
  dlp_cuda_require(L, "copy");
  dlp_cuda_drain_pending(0);
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
  int device = dlp_cuda_device_of(dst_host ? src->dl.device : dst->dl.device);
  dlp_CudaStream *s = dlp_cuda_on_device(stream ? stream : dlp_cuda_default_stream(CU_STREAM_LEGACY, device), device);
  size_t bytes = (size_t)dlp_nbytes(from);
  dlp_CudaStream *after_src = owner_stream(src->owner, src->dl.device);
  dlp_CudaStream *after_dst = owner_stream(dst->owner, dst->dl.device);
  /* the copy waits for what is pending on both blocks */
  rc = dlp_cuda_make_wait(s, after_src);
  if (rc == CUDA_SUCCESS) rc = dlp_cuda_make_wait(s, after_dst);
  if (rc == CUDA_SUCCESS) rc = dlp_cuda_enter(s->device, &scope);
  else scope.changed = 0;
  if (rc == CUDA_SUCCESS && bytes > 0)
    rc = dlp_cuda.fn.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dlp_first_element(to),
                                 (CUdeviceptr)(uintptr_t)dlp_first_element(from), bytes, s->handle);
  if (rc == CUDA_SUCCESS && (!stream || to != dst)) rc = dlp_cuda.fn.cuStreamSynchronize(s->handle);
  else if (rc == CUDA_SUCCESS) {
    /* asynchronous: host memory involved must outlive the copy */
    if (src_host) rc = hold_until_done(from->owner, s->handle, device);
    if (rc == CUDA_SUCCESS && dst_host) rc = hold_until_done(to->owner, s->handle, device);
  }
  dlp_cuda_leave(&scope);
  if (after_src) dlp_cuda_stream_release(after_src);
  if (after_dst) dlp_cuda_stream_release(after_dst);
  dlp_cuda_check(L, rc, "copy");
  if (stream) dlp_owner_set_stream(dst->owner, s);
  if (to != dst) dlp_copy(L, dst, to, NULL, "copy"); /* convert or scatter on the host */
  lua_settop(L, top);
}
