/* CUDA: the driver, contexts, stream records, memory and copies (the Lua objects of
 * dlpack.cuda are in stream.c). The driver library (libcuda.so.1, nvcuda.dll) is opened the first
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
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_private.h"

#ifdef _WIN32
#define CUDA_DRIVER_NAME "nvcuda.dll"
#else
#define CUDA_DRIVER_NAME "libcuda.so.1"
#endif


#ifdef DLPACK_LUA_HAVE_CUDA_H
/* The optional functions of cuda_driver.h against the toolkit's prototypes (ipc_cuda.c checks
 * those of dlpack.ipc). */
#define DLP_SAME_PROTOTYPE(name, params)                                       \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&name), name##_fn), \
                 #name ": cuda_driver.h disagrees with cuda.h");
DLP_CUDA_OPTIONAL_FUNCTIONS(DLP_SAME_PROTOTYPE)
#undef DLP_SAME_PROTOTYPE
#endif

dlp_CudaState dlp_cuda = {DLP_ONCE_INIT, 0, 0, "", {0}, DLP_MUTEX_INIT, {0}};

static void load_driver(void) {
  const char *path = getenv("DLPACK_LUA_CUDA_DRIVER");
  const char *missing = NULL;
  void *lib, *elapsed_v2;
  char why[200];
  int rc;
  if (!path || !*path) path = CUDA_DRIVER_NAME;
  lib = dlp_library_open(path, 0, why, sizeof why);
  if (!lib) {
    snprintf(dlp_cuda.reason, sizeof dlp_cuda.reason, "the CUDA driver (%s) cannot be loaded: %s", path, why);
    return;
  }
#define DLP_CUDA_LOAD(name, params) \
  if (!(*(void **)&dlp_cuda.fn.name = dlp_library_symbol(lib, #name)) && !missing) missing = #name;
  DLP_CUDA_FUNCTIONS(DLP_CUDA_LOAD)
#undef DLP_CUDA_LOAD
#define DLP_CUDA_LOAD_OPTIONAL(name, params) *(void **)&dlp_cuda.fn.name = dlp_library_symbol(lib, #name);
  DLP_CUDA_OPTIONAL_FUNCTIONS(DLP_CUDA_LOAD_OPTIONAL) /* NULL where the driver lacks them */
#undef DLP_CUDA_LOAD_OPTIONAL
  /* drivers of CUDA 12.8 and later have a _v2 with the same signature */
  if ((elapsed_v2 = dlp_library_symbol(lib, "cuEventElapsedTime_v2"))) *(void **)&dlp_cuda.fn.cuEventElapsedTime = elapsed_v2;
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
  dlp_library_close(lib);
}

int dlp_cuda_ready(void) {
  dlp_call_once(&dlp_cuda.once, load_driver);
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
  dlp_mutex_lock(&dlp_cuda.lock);
  if (!dlp_cuda.contexts[device]) {
    CUdevice dev;
    rc = dlp_cuda.fn.cuDeviceGet(&dev, device);
    if (rc == CUDA_SUCCESS) rc = dlp_cuda.fn.cuDevicePrimaryCtxRetain(&dlp_cuda.contexts[device], dev);
  }
  ctx = dlp_cuda.contexts[device];
  dlp_mutex_unlock(&dlp_cuda.lock);
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

/* ---- the stream-ordered allocator ----
 *
 * Where the driver has cuMemAllocAsync and cuMemFreeAsync and a device answers
 * CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, the device memory this module allocates (kDLCUDA,
 * dlp_cuda_alloc) comes from the device's memory pool, allocated on the device's legacy stream
 * (the stream an owner with no stream recorded stands for: every later use orders itself after
 * it), and is freed with cuMemFreeAsync on the stream of its last use (the owner's recorded
 * stream): the driver frees it once the work queued there before it ran, and no hold, no later
 * call of this module is needed. Elsewhere (an old driver, a device without pools) cuMemAlloc_v2
 * and cuMemFree_v2 with the holds below. Each device is asked once, at its first allocation; a
 * failed question counts as no pools. */

static atomic_int pools[MAX_DEVICES]; /* 0: not asked yet, 1: pools, -1: none */

static int has_pools(int device) {
  int answer = atomic_load(&pools[device]);
  if (answer == 0) {
    CUdevice dev;
    int value = 0;
    answer = -1;
    if (dlp_cuda.fn.cuMemAllocAsync && dlp_cuda.fn.cuMemFreeAsync && dlp_cuda.fn.cuDeviceGetAttribute &&
        dlp_cuda.fn.cuDeviceGet(&dev, device) == CUDA_SUCCESS &&
        dlp_cuda.fn.cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev) == CUDA_SUCCESS &&
        value)
      answer = 1;
    atomic_store(&pools[device], answer);
  }
  return answer > 0;
}

/* Was memory on device d allocated from its pool (and so freed in stream order)? */
static int pooled(DLDevice d) {
  return d.device_type == kDLCUDA && d.device_id >= 0 && d.device_id < MAX_DEVICES && atomic_load(&pools[d.device_id]) > 0;
}

/* An owner of a block dlp_cuda_alloc made from a pool: freed in stream order, never held. */
static int stream_freed(const dlp_Owner *o) {
  return o && o->memory && !o->managed && o->fd < 0 && !o->lua_owned && pooled(o->device);
}

/* ---- stream records: shared by stream objects and by the memory they ordered ---- */

/* Handles 1 and 2 name the legacy and per-thread default streams of whichever context is
 * current, so there is one record of each per device. */
static dlp_CudaStream default_streams[2][MAX_DEVICES];
static dlp_once_flag default_streams_once = DLP_ONCE_INIT;

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
  dlp_call_once(&default_streams_once, fill_default_streams);
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
  dlp_mutex_lock(&dlp_cuda.lock);
  old = atomic_load(&o->stream);
  atomic_store(&o->stream, s);
  dlp_mutex_unlock(&dlp_cuda.lock);
  if (old) dlp_cuda_stream_release(old);
}

/* The stream of the pending work on o's memory (on device d), retained. Device memory with no
 * stream recorded was last used on its device's legacy stream; host memory has no pending work
 * unless an asynchronous copy recorded one (NULL). */
static dlp_CudaStream *owner_stream(dlp_Owner *o, DLDevice d) {
  dlp_CudaStream *s;
  dlp_mutex_lock(&dlp_cuda.lock);
  s = atomic_load(&o->stream);
  if (!s && d.device_type == kDLCUDA) s = dlp_cuda_default_stream(CU_STREAM_LEGACY, dlp_cuda_device_of(d));
  if (s) dlp_cuda_stream_retain(s);
  dlp_mutex_unlock(&dlp_cuda.lock);
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
  /* freed once unused; in its context when that can be entered, and without it otherwise (the
   * driver destroys an event from any context) rather than leaked */
  dlp_cuda_enter(producer->device, &scope);
  dlp_cuda.fn.cuEventDestroy_v2(ev);
  dlp_cuda_leave(&scope);
  return rc;
}

void dlp_cuda_order_for_consumer(lua_State *L, dlp_Owner *o, DLDevice device, dlp_CudaStream *consumer,
                                 const char *what) {
  CUresult rc;
  if (!consumer) return; /* -1: the consumer asked for no synchronisation */
  dlp_cuda_require(L, what);
  dlp_CudaStream *pending = owner_stream(o, device);
  rc = dlp_cuda_make_wait(dlp_cuda_on_device(consumer, dlp_cuda_device_of(device)), pending);
  if (pending) dlp_cuda_stream_release(pending);
  if (rc != CUDA_SUCCESS) dlp_cuda_check(L, rc, lua_pushfstring(L, "%s (ordering the consumer's stream)", what));
}

/* ---- memory that queued work reads or writes, held until that work completed ----
 *
 * API.md's rule (PyTorch's record_stream, DLPack issue #176): memory that queued GPU work uses
 * is not freed, nor handed back to its producer, before that work completed. So every
 * asynchronous copy holds (a reference to) each owner it touches, of any device: source,
 * destination, staging buffers, temporaries; a synchronous one does when its synchronisation
 * failed; an export made for a consumer stream does when its deleter runs (the consumer's work
 * on that stream may still use the memory). A hold ends when an event recorded behind the work
 * answers CUDA_SUCCESS; NOT_READY and every other error keep it (completion unknown: keeping is
 * safe, freeing is not). When no event can be recorded the stream is synchronised instead, and
 * when that fails too the memory is kept for good (it leaks, on a device that is failing). */

#define HELD_MAX 4

struct dlp_CudaHold {
  struct dlp_CudaHold *next;
  CUevent done; /* recorded behind the work on stream `on` of `device`, with that context current */
  CUstream on;
  int device;
  int n;
  dlp_Owner *owners[HELD_MAX];
  void *block; /* a block no owner holds yet (dlp_cuda_alloc's), freed when the work completed */
  DLDevice block_device;
  dlp_CudaStream *stream; /* exports: the consumer's stream, retained */
  dlp_thread_id thread;       /* exports: the thread that made the export */
};
typedef struct dlp_CudaHold Hold;

/* Holds whose work is queued, oldest first, and those kept for good; their own lock, never held
 * while owners are released (a release may free, call a deleter, or drain). */
static dlp_mutex holds_lock = DLP_MUTEX_INIT;
static Hold *holds, **holds_tail = &holds;
static Hold *kept_for_good;
static atomic_int holds_count;
/* Whether this thread is inside drain (a release made by a drain does not drain again). A thread
 * key (platform.h), not _Thread_local: a dlopened module's own TLS block is dynamic TLS, which LeakSanitizer's
 * bookkeeping misreads on some glibc versions (its tracer crashed at exit, whatever the module
 * did). Without a key (PTHREAD_KEYS_MAX taken), drains nest: correct, since each takes its holds
 * off the list first. */
static dlp_thread_key draining_key;
static int have_draining_key;
static void make_draining_key(void) {
  have_draining_key = dlp_thread_key_create(&draining_key);
}

static Hold *hold_new(void) {
  return calloc(1, sizeof(Hold));
}

static void hold_owner(Hold *h, dlp_Owner *o) {
  if (h->n < HELD_MAX) {
    dlp_owner_retain(o);
    h->owners[h->n++] = o;
  }
}

/* The work completed: let go of everything h holds. */
static void hold_free(Hold *h) {
  for (int i = 0; i < h->n; i++) dlp_owner_release(h->owners[i]);
  if (h->block) dlp_cuda_free(h->block_device, h->block);
  if (h->stream) dlp_cuda_stream_release(h->stream);
  free(h);
}

/* Hold what h holds until the work issued on stream (of device) so far completed. Returns
 * CUDA_SUCCESS when h waits for its event, or when the stream was synchronised instead (h let
 * go); otherwise the synchronisation's error, and h is kept for good. Takes h. */
static CUresult hold_commit(Hold *h, CUstream stream, int device) {
  dlp_CudaScope scope;
  CUevent ev = NULL;
  CUresult rc = dlp_cuda_enter(device, &scope);
  if (rc == CUDA_SUCCESS) {
    if ((rc = dlp_cuda.fn.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING)) == CUDA_SUCCESS &&
        (rc = dlp_cuda.fn.cuEventRecord(ev, stream)) != CUDA_SUCCESS)
      dlp_cuda.fn.cuEventDestroy_v2(ev);
    if (rc != CUDA_SUCCESS) rc = dlp_cuda.fn.cuStreamSynchronize(stream); /* no event: wait now */
    else h->done = ev;
  }
  dlp_cuda_leave(&scope);
  if (h->done) {
    h->on = stream;
    h->device = device;
    h->next = NULL;
    dlp_mutex_lock(&holds_lock);
    *holds_tail = h;
    holds_tail = &h->next;
    atomic_fetch_add(&holds_count, 1);
    dlp_mutex_unlock(&holds_lock);
    return CUDA_SUCCESS;
  }
  if (rc == CUDA_SUCCESS) {
    hold_free(h);
    return CUDA_SUCCESS;
  }
  dlp_mutex_lock(&holds_lock);
  h->next = kept_for_good;
  kept_for_good = h;
  dlp_mutex_unlock(&holds_lock);
  return rc;
}

dlp_CudaHold *dlp_cuda_hold_new(void) { return hold_new(); }
/* launch.c's holds: pool memory is not held (it records the stream and is freed in its order) */
void dlp_cuda_hold_owner(dlp_CudaHold *h, dlp_Owner *o) {
  if (!stream_freed(o)) hold_owner(h, o);
}
CUresult dlp_cuda_hold_commit(dlp_CudaHold *h, CUstream stream, int device) {
  if (h->n == 0 && !h->block) { /* nothing to hold */
    free(h);
    return CUDA_SUCCESS;
  }
  return hold_commit(h, stream, device);
}
dlp_CudaStream *dlp_cuda_owner_stream(dlp_Owner *o, DLDevice d) { return owner_stream(o, d); }

/* Did h's work complete? (Waits for it first with wait.) With its event's device current. */
static int hold_completed(Hold *h, int wait) {
  dlp_CudaScope scope;
  CUresult rc = dlp_cuda_enter(h->device, &scope);
  if (rc == CUDA_SUCCESS && wait) rc = dlp_cuda.fn.cuEventSynchronize(h->done);
  if (rc == CUDA_SUCCESS) rc = dlp_cuda.fn.cuEventQuery(h->done);
  if (rc == CUDA_SUCCESS) dlp_cuda.fn.cuEventDestroy_v2(h->done);
  dlp_cuda_leave(&scope);
  return rc == CUDA_SUCCESS;
}

/* Let go of the holds (the oldest `limit` of them) whose work completed; with wait, wait for each
 * first. A drain takes the holds it looks at off the list, so drains on several threads never
 * look at the same one. Work on a stream completes in order: once a hold on a stream is not
 * ready, the later ones on that stream are not asked. */
static void drain(int wait, int limit) {
  Hold *mine = NULL, **mine_tail = &mine, *kept = NULL, **kept_tail = &kept, *h;
  struct { CUstream on; int device; } busy[8];
  int nbusy = 0;
  static dlp_once_flag once = DLP_ONCE_INIT;
  if (atomic_load(&holds_count) == 0) return;
  dlp_call_once(&once, make_draining_key);
  if (have_draining_key && dlp_thread_key_get(draining_key)) return;
  if (have_draining_key) dlp_thread_key_set(draining_key, &draining_key);
  dlp_mutex_lock(&holds_lock);
  for (int n = 0; holds && n < limit; n++) {
    h = holds;
    holds = h->next;
    *mine_tail = h;
    mine_tail = &h->next;
  }
  if (!holds) holds_tail = &holds;
  *mine_tail = NULL;
  dlp_mutex_unlock(&holds_lock);
  while ((h = mine)) {
    int known_busy = 0;
    mine = h->next;
    for (int i = 0; i < nbusy && !known_busy; i++) known_busy = busy[i].on == h->on && busy[i].device == h->device;
    if (!known_busy && hold_completed(h, wait)) {
      atomic_fetch_sub(&holds_count, 1);
      hold_free(h);
    } else {
      if (!known_busy && nbusy < 8) {
        busy[nbusy].on = h->on;
        busy[nbusy++].device = h->device;
      }
      h->next = NULL;
      *kept_tail = h;
      kept_tail = &h->next;
    }
  }
  if (kept) { /* back in front: they are older than any hold added meanwhile */
    dlp_mutex_lock(&holds_lock);
    *kept_tail = holds;
    if (!holds) holds_tail = kept_tail;
    holds = kept;
    dlp_mutex_unlock(&holds_lock);
  }
  if (have_draining_key) dlp_thread_key_set(draining_key, NULL);
}

void dlp_cuda_drain_pending(int wait) {
  drain(wait, INT_MAX);
}

/* Owners are released all the time: a look at the oldest few holds only. */
void dlp_cuda_reap(void) {
  drain(0, 4);
}

void dlp_cuda_settle(void) {
  if (dlp_cuda.available) drain(1, INT_MAX);
}

/* ---- exports made for a consumer stream ---- */

dlp_CudaHold *dlp_cuda_hold_for_consumer(dlp_CudaStream *consumer, DLDevice device) {
  Hold *h = hold_new();
  if (!h) return NULL;
  h->stream = dlp_cuda_on_device(consumer, dlp_cuda_device_of(device));
  dlp_cuda_stream_retain(h->stream);
  h->thread = dlp_thread_self();
  return h;
}

/* The consumer called the deleter: o (the export's reference, taken) goes after the work the
 * consumer queued on its stream so far. The per-thread default stream of another thread is
 * another stream: there the legacy stream, which waits for every blocking stream, stands in. */
void dlp_cuda_release_after(dlp_CudaHold *h, dlp_Owner *o) {
  CUstream stream = h->stream->handle;
  dlp_CudaScope scope;
  CUresult idle;
  if (stream == CU_STREAM_PER_THREAD && !dlp_thread_equal(h->thread, dlp_thread_self())) stream = CU_STREAM_LEGACY;
  dlp_cuda_reap(); /* deleters may come after the last lua_State closed: nothing else would drain */
  /* Pool memory whose last reference is the export's (no other can appear: a reference comes from
   * a holder) is freed on the consumer's stream, behind the consumer's work, once that stream
   * waited for the work this module queued on the memory: nothing to hold, no later call of the
   * module needed. A reference left elsewhere keeps the hold below (the consumer's stream may be
   * gone by the time the memory is freed). A consumer's stream of another device: the memory's
   * device's legacy stream waits for it and frees (give_back). */
  if (stream == h->stream->handle && stream_freed(o) && atomic_load(&o->refs) == 1) {
    dlp_CudaStream *pending = owner_stream(o, o->device);
    CUresult rc = dlp_cuda_make_wait(h->stream, pending);
    if (pending) dlp_cuda_stream_release(pending);
    if (rc == CUDA_SUCCESS) {
      dlp_owner_set_stream(o, h->stream);
      hold_free(h); /* holds the stream alone */
      dlp_owner_release(o); /* cuMemFreeAsync on the consumer's stream */
      return;
    }
  }
  h->owners[0] = o;
  h->n = 1;
  /* a consumer that waited for its work leaves nothing to hold for */
  idle = dlp_cuda_enter(h->stream->device, &scope);
  if (idle == CUDA_SUCCESS) idle = dlp_cuda.fn.cuStreamQuery(stream);
  dlp_cuda_leave(&scope);
  if (idle == CUDA_SUCCESS) hold_free(h);
  else hold_commit(h, stream, h->stream->device);
}

void dlp_cuda_hold_drop(dlp_CudaHold *h) {
  hold_free(h); /* holds nothing yet but the stream */
}

/* ---- memory ---- */

/* Free block p of device (dlp_cuda_alloc's), with device's context current, once the work issued so
 * far on `last` (the stream of its last use; NULL: the device's legacy stream) completed. Pool
 * memory: cuMemFreeAsync on that stream, or, when the last use is on another device's stream, on
 * this device's legacy stream made to wait for it (an event). When no stream-ordered free can be
 * queued, the stream (else the whole device) is synchronised and the block freed at once; when
 * that fails too, the block is kept for good (a device that is failing). Other memory: cuMemFree_v2, which waits for the
 * device's work itself. */
static void give_back(int device, CUdeviceptr p, const dlp_CudaStream *last) {
  const dlp_CudaStream *on = last ? last : dlp_cuda_default_stream(CU_STREAM_LEGACY, device);
  dlp_CudaScope scope;
  CUresult rc = CUDA_SUCCESS;
  if (atomic_load(&pools[device]) <= 0) { /* asked at the block's allocation */
    dlp_cuda.fn.cuMemFree_v2(p);
    return;
  }
  if (on->device != device) {
    const dlp_CudaStream *legacy = dlp_cuda_default_stream(CU_STREAM_LEGACY, device);
    if ((rc = dlp_cuda_make_wait(legacy, on)) == CUDA_SUCCESS) on = legacy;
  }
  if (rc == CUDA_SUCCESS && dlp_cuda.fn.cuMemFreeAsync(p, on->handle) == CUDA_SUCCESS) return;
  rc = dlp_cuda_enter(on->device, &scope);
  if (rc == CUDA_SUCCESS && dlp_cuda.fn.cuStreamSynchronize(on->handle) != CUDA_SUCCESS)
    rc = dlp_cuda.fn.cuCtxSynchronize(); /* a stream that is gone (a foreign one): all of the device's work */
  dlp_cuda_leave(&scope);
  if (rc == CUDA_SUCCESS) dlp_cuda.fn.cuMemFree_v2(p);
}

/* Zero a new block on its device's legacy stream (its context current) and wait; on failure the
 * block is freed, but only once the memset is known not to be queued any more: pool memory by a
 * free queued behind the memset, other memory through a hold. */
static CUresult zero_block(CUdeviceptr d, size_t nbytes, DLDevice device) {
  int ordered = pooled(device);
  Hold *h = ordered ? NULL : hold_new(); /* before the memset: nothing can fail for want of memory after it */
  CUresult rc = h || ordered ? dlp_cuda.fn.cuMemsetD8Async(d, 0, nbytes, CU_STREAM_LEGACY) : 2; /* OUT_OF_MEMORY */
  if (rc != CUDA_SUCCESS) { /* nothing queued */
    free(h);
    give_back(device.device_id, d, NULL);
    return rc;
  }
  rc = dlp_cuda.fn.cuStreamSynchronize(CU_STREAM_LEGACY);
  if (rc == CUDA_SUCCESS || ordered) {
    free(h);
    if (rc != CUDA_SUCCESS) give_back(device.device_id, d, NULL); /* after the memset, on its stream */
    return rc;
  }
  h->block = (void *)(uintptr_t)d;
  h->block_device = device;
  hold_commit(h, CU_STREAM_LEGACY, dlp_cuda_device_of(device));
  return rc;
}

void *dlp_cuda_alloc(lua_State *L, DLDevice device, size_t nbytes, int zeroed, const char *what) {
  dlp_CudaScope scope;
  CUresult rc;
  CUdeviceptr d = 0;
  void *p = NULL;
  dlp_cuda_require(L, what);
  dlp_cuda_check_device(L, dlp_cuda_device_of(device), what);
  dlp_cuda_drain_pending(0);
  if (nbytes == 0) return NULL;
  rc = dlp_cuda_enter(dlp_cuda_device_of(device), &scope);
  if (rc == CUDA_SUCCESS) {
    if (device.device_type == kDLCUDA) {
      /* pool memory: on the legacy stream, which an owner with no stream recorded stands for */
      if (has_pools(device.device_id)) rc = dlp_cuda.fn.cuMemAllocAsync(&d, nbytes, CU_STREAM_LEGACY);
      else rc = dlp_cuda.fn.cuMemAlloc_v2(&d, nbytes);
      p = (void *)(uintptr_t)d;
      if (rc == CUDA_SUCCESS && zeroed) rc = zero_block(d, nbytes, device);
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
  dlp_cuda_check(L, rc, what);
  return p;
}

void dlp_cuda_free_after(DLDevice device, void *memory, const dlp_CudaStream *last) {
  dlp_CudaScope scope;
  if (dlp_cuda_enter(dlp_cuda_device_of(device), &scope) == CUDA_SUCCESS) {
    if (device.device_type == kDLCUDAHost) dlp_cuda.fn.cuMemFreeHost(memory);
    else if (device.device_type == kDLCUDA) give_back(device.device_id, (CUdeviceptr)(uintptr_t)memory, last);
    else dlp_cuda.fn.cuMemFree_v2((CUdeviceptr)(uintptr_t)memory);
  }
  dlp_cuda_leave(&scope);
}

void dlp_cuda_free(DLDevice device, void *memory) {
  dlp_cuda_free_after(device, memory, NULL);
}

/* ---- copies between host and device, and between devices ----
 *
 * Every check of the host copy (copy.c) holds for every pair of devices: same shape and a
 * writable destination (dlp_copy), dtypes that convert, live tensors, the sub-byte packing of
 * both sides, overlapping views. The CUDA side must be contiguous: host sides that differ from it
 * in dtype, packing or layout go through host staging tensors with the device side's dtype and
 * packing (the host copy converts and repacks), and two CUDA sides must agree on both. */

static void check_contiguous(lua_State *L, const dlp_Tensor *t, const char *what) {
  if (!dlp_is_contiguous(t))
    luaL_error(L, "%s: the CUDA tensor must be contiguous (its strides are not row-major)", what);
}

static int packing_differs(const dlp_Tensor *a, const dlp_Tensor *b) {
  return dlp_is_packed(a->dtype, a->flags) != dlp_is_packed(b->dtype, b->flags);
}

/* Queued work never touches memory a Lua value owns (dlpack.unsafe.wrap): the value may be
 * collected before the work runs, whatever holds its owner. */
static int needs_staging(const dlp_Tensor *host, const dlp_Tensor *device) {
  return host->dtype != device->dtype || packing_differs(host, device) || !dlp_is_contiguous(host) ||
         (host->owner && host->owner->lua_owned);
}

static CUresult copy_bytes(const dlp_Tensor *to, const dlp_Tensor *from, size_t bytes, CUstream stream) {
  return dlp_cuda.fn.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dlp_first_element(to),
                                   (CUdeviceptr)(uintptr_t)dlp_first_element(from), bytes, stream);
}

/* A copy kernel between two tensors of one device, on the copy's stream when that is on their
 * device; a stream of another device (which a driver copy takes) waits for the kernel, run on the
 * stream of the tensors' pending work, so that the copy is still done when that stream is. */
static void copy_kernel(lua_State *L, dlp_Tensor *dst, dlp_Tensor *src, dlp_CudaStream *stream, const char *what) {
  int device = dlp_cuda_device_of(dst->dl.device);
  dlp_CudaStream *on = stream ? dlp_cuda_on_device(stream, device) : NULL, *done;
  CUresult rc;
  if (!on || on->device == device) {
    dlp_copy_on_cuda(L, dst, src, stream, what);
    return;
  }
  dlp_copy_on_cuda(L, dst, src, NULL, what);
  done = owner_stream(dst->owner, dst->dl.device);
  rc = dlp_cuda_make_wait(on, done);
  if (done) dlp_cuda_stream_release(done);
  dlp_cuda_check(L, rc, what);
}

void dlp_cuda_copy(lua_State *L, dlp_Tensor *dst, dlp_Tensor *src, dlp_CudaStream *stream,
                   const char *what) {
  DLDevice cpu = {kDLCPU, 0};
  int dst_host = dlp_device_is_host(dst->dl.device), src_host = dlp_device_is_host(src->dl.device);
  dlp_Tensor *from = src, *to = dst, *tmp = NULL;
  int top = lua_gettop(L);
  dlp_CudaScope scope;
  CUresult rc;
  if (!dst_host && !dlp_device_is_cuda(dst->dl.device)) dlp_check_host(L, dst, what);
  if (!src_host && !dlp_device_is_cuda(src->dl.device)) dlp_check_host(L, src, what);
  dlp_cuda_require(L, what);
  dlp_cuda_drain_pending(0);
  if (dst->dl.device.device_type == kDLCUDA && src->dl.device.device_type == kDLCUDA &&
      dst->dl.device.device_id == src->dl.device.device_id &&
      (dst->dtype != src->dtype || !dlp_is_contiguous(dst) || !dlp_is_contiguous(src)) &&
      dst->dtype <= DLP_COMPLEX128 && src->dtype <= DLP_COMPLEX128) {
    dlp_live(L, src, what);
    dlp_live(L, dst, what);
    copy_kernel(L, dst, src, stream, what); /* one device, converting or strided: a kernel */
    return;
  }
  /* a strided device side is scattered (or gathered) on its device through a contiguous
   * temporary there, which the driver's copy fills (or empties) */
  int scatter = !dst_host && !dlp_is_contiguous(dst) && dst->dl.device.device_type == kDLCUDA &&
                dst->dtype <= DLP_COMPLEX128;
  if (scatter || (!src_host && !dlp_is_contiguous(src) && src->dl.device.device_type == kDLCUDA &&
                  src->dtype <= DLP_COMPLEX128)) {
    dlp_Tensor *side = scatter ? dst : src;
    dlp_Tensor *packed = dlp_tensor_new(L, side->dtype, 0, side->dl.device, side->dl.ndim, side->dl.shape, 0, what);
    if (scatter) {
      dlp_cuda_copy(L, packed, src, stream, what);
      copy_kernel(L, dst, packed, stream, what);
    } else {
      copy_kernel(L, packed, src, stream, what);
      dlp_cuda_copy(L, dst, packed, stream, what);
    }
    dlp_tensor_release(packed);
    lua_settop(L, top);
    return;
  }
  if (!dst_host) check_contiguous(L, dst, what);
  if (!src_host) check_contiguous(L, src, what);
  if (!dst_host && !src_host) {
    if (dst->dtype != src->dtype)
      luaL_error(L, "%s: cannot convert %s to %s between CUDA devices (convert on the host)", what,
                 dlp_dtypes[src->dtype].name, dlp_dtypes[dst->dtype].name);
    if (packing_differs(dst, src))
      luaL_error(L, "%s: cannot copy %s %s into %s %s between CUDA devices (repack on the host)", what,
                 dlp_is_packed(src->dtype, src->flags) ? "packed" : "padded", dlp_dtypes[src->dtype].name,
                 dlp_is_packed(dst->dtype, dst->flags) ? "packed" : "padded", dlp_dtypes[dst->dtype].name);
  } else if (dst->dtype != src->dtype && !dlp_row_function(dst->dtype, src->dtype)) {
    luaL_error(L, "%s: cannot convert %s to %s (only byte-for-byte copies of the same dtype)", what,
               dlp_dtypes[src->dtype].name, dlp_dtypes[dst->dtype].name);
  }
  /* staging tensors and the temporary are allocated before any memory is taken */
  if (src_host && needs_staging(src, dst))
    from = dlp_tensor_new(L, dst->dtype, dst->flags & DLP_FLAG_SUBBYTE_PADDED, cpu, src->dl.ndim, src->dl.shape, 0, what);
  if (dst_host && needs_staging(dst, src))
    to = dlp_tensor_new(L, src->dtype, src->flags & DLP_FLAG_SUBBYTE_PADDED, cpu, dst->dl.ndim, dst->dl.shape, 0, what);
  /* overlapping views of one block go through a temporary on the device: the driver's copies
   * must not overlap */
  if (!dst_host && !src_host && dlp_overlaps(dst, src))
    tmp = dlp_tensor_new(L, src->dtype, src->flags & DLP_FLAG_SUBBYTE_PADDED, src->dl.device, src->dl.ndim,
                         src->dl.shape, 0, what);
  if (from != src) { /* host to host on the CPU: after the queued work that writes src, if any */
    dlp_CudaStream *pending = src->owner ? owner_stream(src->owner, src->dl.device) : NULL;
    if (pending) {
      rc = dlp_cuda_enter(pending->device, &scope);
      if (rc == CUDA_SUCCESS) rc = dlp_cuda.fn.cuStreamSynchronize(pending->handle);
      dlp_cuda_leave(&scope);
      dlp_cuda_stream_release(pending);
      dlp_cuda_check(L, rc, what);
    }
    dlp_copy(L, from, src, NULL, what); /* converts, repacks, checks src live */
  }
  dlp_live(L, src, what);
  dlp_live(L, dst, what);
  int device = dlp_cuda_device_of(dst_host ? src->dl.device : dst->dl.device);
  dlp_CudaStream *s = dlp_cuda_on_device(stream ? stream : dlp_cuda_default_stream(CU_STREAM_LEGACY, device), device);
  size_t bytes = (size_t)dlp_nbytes(from);
  if ((size_t)dlp_nbytes(to) != bytes || (tmp && (size_t)dlp_nbytes(tmp) != bytes))
    luaL_error(L, "%s: %I bytes would be copied into %I (the layouts do not match)", what, (lua_Integer)bytes,
               (lua_Integer)dlp_nbytes(to));
  Hold *held = bytes ? hold_new() : NULL; /* before any work: nothing can fail for want of memory after it */
  if (bytes && !held) luaL_error(L, "%s: not enough memory", what);
  dlp_CudaStream *after_src = owner_stream(src->owner, src->dl.device);
  dlp_CudaStream *after_dst = owner_stream(dst->owner, dst->dl.device);
  dlp_CudaStream *after_tmp = tmp ? owner_stream(tmp->owner, tmp->dl.device) : NULL; /* its allocation */
  int queued = 0, sync = !stream || to != dst;
  /* the copy waits for what is pending on both blocks */
  rc = dlp_cuda_make_wait(s, after_src);
  if (rc == CUDA_SUCCESS) rc = dlp_cuda_make_wait(s, after_dst);
  if (rc == CUDA_SUCCESS && tmp && pooled(tmp->dl.device)) rc = dlp_cuda_make_wait(s, after_tmp);
  if (rc == CUDA_SUCCESS) rc = dlp_cuda_enter(s->device, &scope);
  else scope.changed = 0;
  if (rc == CUDA_SUCCESS && bytes > 0) {
    if (tmp && (rc = copy_bytes(tmp, from, bytes, s->handle)) == CUDA_SUCCESS) queued = 1;
    if (rc == CUDA_SUCCESS && (rc = copy_bytes(to, tmp ? tmp : from, bytes, s->handle)) == CUDA_SUCCESS) queued = 1;
  }
  if (queued && rc == CUDA_SUCCESS && sync) rc = dlp_cuda.fn.cuStreamSynchronize(s->handle);
  dlp_cuda_leave(&scope);
  if (queued && !(sync && rc == CUDA_SUCCESS)) {
    /* queued work reads or writes these (also when a synchronisation failed): held until it
     * completed, but for pool memory, which records s below and is freed in s's order */
    if (!stream_freed(from->owner)) hold_owner(held, from->owner);
    if (!stream_freed(to->owner)) hold_owner(held, to->owner);
    if (tmp && !stream_freed(tmp->owner)) hold_owner(held, tmp->owner);
    if (held->n) {
      CUresult held_rc = hold_commit(held, s->handle, s->device);
      if (rc == CUDA_SUCCESS) rc = held_rc;
    } else {
      free(held);
    }
  } else {
    free(held);
  }
  if (after_src) dlp_cuda_stream_release(after_src);
  if (after_dst) dlp_cuda_stream_release(after_dst);
  if (after_tmp) dlp_cuda_stream_release(after_tmp);
  if (queued || (stream && rc == CUDA_SUCCESS)) {
    /* later work on either block waits for this copy (a write into src too), also when it failed
     * after work was queued; s waited for their earlier work, so nothing older is lost */
    dlp_owner_set_stream(dst->owner, s);
    dlp_owner_set_stream(src->owner, s);
    if (tmp && queued) dlp_owner_set_stream(tmp->owner, s);
  }
  dlp_cuda_check(L, rc, what);
  if (tmp) dlp_tensor_release(tmp);
  if (from != src) dlp_tensor_release(from);
  if (to != dst) {
    dlp_copy(L, dst, to, NULL, what); /* convert, repack or scatter on the host */
    dlp_tensor_release(to);
  }
  lua_settop(L, top);
}
