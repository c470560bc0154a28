/*
 * fakecuda: a fake CUDA driver for the specs (test-only, never installed).
 *
 * One shared library that is both
 *   - a "libcuda" exporting exactly the driver functions of src/cuda/cuda_driver.h,
 *     its optional ones included (plus cuEventElapsedTime_v2), which the module dlopens when
 *     DLPACK_LUA_CUDA_DRIVER names this file, and
 *   - a Lua module (`require "fakecuda"`) that inspects and drives the same
 *     library instance: the dynamic loader hands the module's dlopen and Lua's
 *     require the same copy (same file), so they share every static below.
 *
 * The point is to make wrong stream ordering, wrong contexts and leaks
 * OBSERVABLE on a machine without a GPU:
 *
 *   Devices    FAKECUDA_DEVICES (default 2, at most 16; 0 makes cuInit fail
 *              with CUDA_ERROR_NO_DEVICE). Every function but cuGetErrorString
 *              needs cuInit first (else 3, NOT_INITIALIZED). One primary context
 *              per device; the current context is thread-local.
 *   Memory     cuMemAlloc_v2 returns an address range reserved with mmap
 *              PROT_NONE (Windows: VirtualAlloc MEM_RESERVE, PAGE_NOACCESS):
 *              the bytes live in a shadow buffer only the fake touches, so a
 *              module that reads or writes device memory from the CPU crashes
 *              instead of passing by luck. Pinned (cuMemHostAlloc)
 *              and managed memory are plain host memory. New memory is filled
 *              with 0xA5, never zero. Every allocation records its kind and the
 *              device of the context current when it was made (allocating
 *              without a current context is an error: 201, INVALID_CONTEXT).
 *              Frees must name the base of a live allocation of the right kind
 *              (else 1, INVALID_VALUE). Like the real driver, cuMemFree_v2 and
 *              cuMemFreeHost are synchronous: pending work of the device (all
 *              devices for pinned memory) runs first. Work still queued on
 *              another device's stream that reads or writes a freed device
 *              block is misuse (the driver does not wait for it): reported,
 *              then run before the free. cuMemcpyAsync between overlapping
 *              areas is misuse (undefined in the driver).
 *   Pools      the stream-ordered allocator. cuDeviceGetAttribute answers
 *              MEMORY_POOLS_SUPPORTED (115) with 1, or 0 when FAKECUDA_POOLS=0
 *              (then cuMemAllocAsync and cuMemFreeAsync are misuse, 801); other
 *              attributes answer 1 (INVALID_VALUE). cuMemAllocAsync makes a
 *              device block as cuMemAlloc_v2 does and queues an allocation item
 *              on the stream: work that uses the block and runs before that
 *              item ran (on another stream, not ordered after it by an event
 *              wait or a synchronisation) is misuse. cuMemFreeAsync (any device
 *              block of the stream's device) queues a free item: the block
 *              stays live (fake.live() counts it) until its stream reaches the
 *              item; work queued after the free is misuse (and not queued), as
 *              is a second free; work of another stream still queued when the
 *              free runs is misuse (reported, then run first). cuMemFree_v2 of
 *              cuMemAllocAsync's memory waits for nothing, as the driver's
 *              does: queued work that still uses it is misuse. Built with
 *              FAKECUDA_NO_ASYNC defined (build/old-driver/fakecuda.so), the
 *              library lacks the three functions, as an old driver does.
 *   VMM        cuMemCreate (granularity 2 MiB, POSIX file descriptors) makes a
 *              physical allocation backed by a sealed memfd named
 *              "fakecuda-vmm:N" (N its device); export dups that memfd and
 *              import maps the one it is given (any other descriptor: 1,
 *              INVALID_VALUE, not counted as misuse), so two processes that
 *              load the fake share device memory. cuMemAddressReserve gives
 *              PROT_NONE ranges; cuMemMap puts a mapping there that behaves
 *              as a cuMemAlloc_v2 block; copies and memsets into a mapping
 *              before cuMemSetAccess made it read/write are misuse, as are
 *              cuMemFree_v2 on one, cuMemAddressFree of a mapped range and
 *              releasing a handle twice; cuMemUnmap runs the device's work
 *              first, as cuMemFree_v2 does. On Windows, where dlpack.ipc does
 *              not exist, cuMemCreate, cuMemExportToShareableHandle and
 *              cuMemImportFromShareableHandle answer 801 (NOT_SUPPORTED).
 *   Streams    lazy FIFO queues. cuMemcpyAsync, cuMemsetD8Async,
 *              cuEventRecord and cuStreamWaitEvent only
 *              enqueue. Work runs only when forced: cuStreamSynchronize(s) runs
 *              s; cuEventSynchronize(e) runs e's stream up to e's record; a
 *              "wait for e" item first runs e's stream up to e when it executes;
 *              cuStreamDestroy_v2 runs the stream's work first; fake.run(s)
 *              plays the GPU making progress. cuStreamQuery/cuEventQuery run
 *              nothing and answer 600 (NOT_READY) while work is pending.
 *              The legacy stream (NULL or 1) is one queue per device (the
 *              current context's); the per-thread stream (2) one queue per
 *              thread and device. The legacy stream's implicit synchronisation
 *              with blocking streams is NOT modelled: it is a plain queue like
 *              any other, so the module must order streams with events (its
 *              own streams are non-blocking, where the real driver does not
 *              synchronise either).
 *              Enqueuing needs a current context (else 201). As with the real
 *              driver, copies and waits may be issued to a stream of another
 *              device than the current context's, but an event can only be
 *              recorded on a stream of its own device (else 400, as
 *              cudaEventRecord fails).
 *   cuBLAS     the functions of src/cuda/cublas.h, for the module's matrix products
 *              when DLPACK_LUA_CUBLAS names this library: handles bound to the
 *              current context's device, products checked (sizes, leading
 *              dimensions, types, no TF32, every matrix inside one device
 *              allocation of the handle's device, no overlap of the result with a
 *              factor) and queued like a launch on the handle's stream, run as a
 *              plain loop in float32 or float64 on the shadow memory (see there).
 *   Host fns   run by the thread that forces the queue, with the fake's lock
 *              held. A driver call from inside one is an error (800,
 *              NOT_PERMITTED), as the real driver forbids it.
 *   Errors     every misuse (bad frees, missing or wrong context, unknown or
 *              destroyed streams and events, double destroy, out-of-range
 *              copies, calls before cuInit, ...) increments fake.errors() and is
 *              logged (fake.error_log(); printed when FAKECUDA_VERBOSE is set).
 *   Windows    built as fakecuda.dll (MinGW-w64): LoadLibrary hands the module
 *              and require the same copy too; the lock and clock come from
 *              winpthreads, linked statically (the Makefile's TEST_LIBS).
 *   Memory of the fake itself stays reachable from its globals (destroyed
 *   streams and events are kept so that later use is detected), so valgrind and
 *   LeakSanitizer see no leak.
 *
 * Lua side (`local fake = require "fakecuda"`); pointers and handles are light
 * userdata or integers (or a table/userdata with a `handle` field):
 *   fake.live() -> {device =, host =, managed =, total =, bytes =, streams =, events =,
 *       handles =, reservations =, mapped =, async =, freeing =} (handles, reservations, mapped:
 *       cuMemCreate/Import handles not yet freed, cuMemAddressReserve ranges, cuMemMap mappings,
 *       which `device` counts too; async: blocks of cuMemAllocAsync; freeing: blocks whose
 *       cuMemFreeAsync has not run yet, which `device` counts too)
 *   fake.allocation(ptr) -> {kind =, device =, base =, size =, offset =, async =, pending =,
 *       freeing =} or nil (pending: its cuMemAllocAsync has not run yet)
 *   fake.pools() -> whether devices answer MEMORY_POOLS_SUPPORTED, whether this build has the
 *       stream-ordered allocator at all
 *   fake.errors() -> count; fake.error_log() -> {messages...} (the last 64)
 *   fake.pending(stream [, device]) -> queued items (legacy/per-thread: device
 *       of the current context, else 0, unless given)
 *   fake.run(stream [, device]) -> items executed; fake.sync_all() -> items executed
 *   fake.write(stream, ptr, bytes [, device]) enqueues a "kernel" writing bytes
 *   fake.copy(stream, dst, src, n [, device]) enqueues a copy, as cuMemcpyAsync (a consumer's work)
 *   fake.read(ptr, n) -> the n bytes of fake device memory now (no sync)
 *   fake.current_device() -> ordinal or nil; fake.set_current(ordinal or nil)
 *   fake.device_count(); fake.initialized()
 *   fake.calls(name) -> times the driver function was called
 *   fake.fail_next(name, code [, times [, after]]) the next call(s) of name return code (after
 *                                      `after` calls that succeed)
 *   fake.stream_info(stream [, device]) -> {kind =, device =, priority =, flags =,
 *       destroyed =, pending =} or nil
 *   fake.pointer_device(ptr) -> cuPointerGetAttribute(DEVICE_ORDINAL) as the module would call it
 *   fake.cublas_handles() -> {{device =, math_mode =, destroyed =, stream =}, ...} (newest first);
 *       fake.live().gemms counts the cuBLAS products queued, .launches the kernels run
 */
#define _GNU_SOURCE

#undef DLPACK_LUA_HAVE_CUDA_H /* always the ABI types of cuda_driver.h, never cuda.h */
#undef DLPACK_LUA_HAVE_CUBLAS_H /* and of cublas.h */
#include "cuda/cuda_driver.h"
#include "cuda/cublas.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _WIN32
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <malloc.h>
#include <windows.h>
#else
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

#include "compat.h"
#include "compute/cuda/fake_kernels.h"

/* ---- result codes ---- */
enum {
  E_SUCCESS = 0,
  E_INVALID_VALUE = 1,
  E_OUT_OF_MEMORY = 2,
  E_NOT_INITIALIZED = 3,
  E_NO_DEVICE = 100,
  E_INVALID_DEVICE = 101,
  E_INVALID_CONTEXT = 201,
  E_INVALID_IMAGE = 200,
  E_INVALID_HANDLE = 400,
  E_NOT_FOUND = 500,
  E_NOT_READY = 600,
  E_NOT_SUPPORTED = 801,
};

/* Every function the fake exports: those the module resolves (src/cuda/cuda_driver.h), its optional
 * ones (the stream-ordered allocator; left out of a build with FAKECUDA_NO_ASYNC defined, an old
 * driver's library), cuEventElapsedTime_v2, which the module prefers when a driver has it, and
 * cuBLAS's (src/cuda/cublas.h: they return a cublasStatus_t, an int as CUresult is here). */
#ifdef FAKECUDA_NO_ASYNC
#define FAKE_OPTIONAL(X)
#else
#define FAKE_OPTIONAL(X) DLP_CUDA_OPTIONAL_FUNCTIONS(X)
#endif
#define FAKE_FUNCTIONS(X)                                             \
  DLP_CUDA_FUNCTIONS(X)                                               \
  FAKE_OPTIONAL(X)                                                    \
  X(cuEventElapsedTime_v2, (float *ms, CUevent start, CUevent end)) \
  DLP_CUBLAS_FUNCTIONS(X)

/* function ids, for call counts and injected failures */
#define FID(name, params) F_##name,
enum { FAKE_FUNCTIONS(FID) F_COUNT };
#undef FID
#define FNAME(name, params) #name,
static const char *const fnames[F_COUNT] = {FAKE_FUNCTIONS(FNAME)};
#undef FNAME

#ifdef _WIN32
#define EXPORT __declspec(dllexport)
#else
#define EXPORT __attribute__((visibility("default")))
#endif
#define FPROTO(name, params) EXPORT CUresult name params;
FAKE_FUNCTIONS(FPROTO)
#undef FPROTO
EXPORT int luaopen_fakecuda(lua_State *L);

#define MAXDEV 16
#define LOGN 64

/* ---- state (all under one recursive lock) ---- */
#ifdef PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP
static pthread_mutex_t mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
#else /* winpthreads */
static pthread_mutex_t mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER;
#endif
static int initialized, ndev;
static int pools_on; /* CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: FAKECUDA_POOLS (default 1), 0 without the functions */
static unsigned long calls[F_COUNT];
static int fail_code[F_COUNT];
static unsigned fail_times[F_COUNT];
static unsigned fail_after[F_COUNT]; /* calls that succeed before the failures begin */
static unsigned long errors;
static char errlog[LOGN][240];
static unsigned long nlog;
static _Thread_local int cur = -1;    /* current context's device, -1 for none */

struct CUctx_st {
  int device;
  unsigned long retained;
};
static struct CUctx_st ctxs[MAXDEV];

enum { K_DEVICE, K_HOST, K_MANAGED };
static const char *const knames[] = {"device", "host", "managed"};
struct Phys;
typedef struct Alloc {
  uintptr_t base;
  size_t size, reserved;
  unsigned char *mem; /* where the bytes are (the shadow buffer for device memory) */
  int kind, device;
  struct Phys *phys; /* cuMemMap: the physical allocation mapped here (mem points into it), else NULL */
  int access;        /* cuMemMap: the CU_MEM_ACCESS_FLAGS_* that cuMemSetAccess gave (0: none yet) */
  int async;         /* made by cuMemAllocAsync */
  int pending;       /* cuMemAllocAsync: its stream has not reached the allocation yet */
  int freeing;       /* cuMemFreeAsync queued: freed when its stream reaches it */
} Alloc;
static Alloc *allocs;
static size_t nallocs, capallocs;

enum { OP_COPY, OP_SET, OP_RECORD, OP_WAIT, OP_WRITE, OP_LAUNCH, OP_GEMM, OP_ALLOC, OP_FREE };
typedef struct Item {
  struct Item *next;
  int op;
  uint64_t seq;
  uintptr_t dst, src;
  size_t n;
  unsigned char value;
  struct CUevent_st *event;
  uint64_t gen;
  struct CUstream_st *target;
  uint64_t point; /* OP_WAIT: the target's record point */
  unsigned char *bytes; /* OP_WRITE: the bytes; OP_LAUNCH: the kernel's arguments; OP_GEMM: a Gemm */
  struct CUfunc_st *function; /* OP_LAUNCH */
  unsigned blocks, threads;
  int device;
} Item;

enum { S_CREATED, S_LEGACY, S_PER_THREAD };
static const char *const snames[] = {"created", "legacy", "per_thread"};
struct CUstream_st {
  struct CUstream_st *next_all;
  int kind, device, priority, destroyed;
  unsigned flags;
  Item *head, *tail;
  size_t count;
  uint64_t enqueued, done;
};
static struct CUstream_st legacy[MAXDEV];
static struct CUstream_st *all_streams;  /* the streams in use: legacy, per-thread, created */
static struct CUstream_st *dead_streams; /* destroyed ones, kept so that a later use is detected */
static _Thread_local struct CUstream_st *ptds[MAXDEV];

struct CUevent_st {
  struct CUevent_st *next_all;
  int device, destroyed, recorded, completed;
  unsigned flags;
  struct CUstream_st *stream;
  uint64_t seq, gen;
  double ms;
};
static struct CUevent_st *all_events, *dead_events; /* likewise */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* MinGW's own C99 printf (the Makefile's __USE_MINGW_ANSI_STDIO) is GCC's gnu_printf there */
#ifdef __MINGW_PRINTF_FORMAT
#define PRINTF_LIKE __MINGW_PRINTF_FORMAT
#else
#define PRINTF_LIKE printf
#endif
__attribute__((format(PRINTF_LIKE, 1, 2))) static void misuse(const char *fmt, ...) {
  char *line = errlog[nlog++ % LOGN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof errlog[0], fmt, ap);
  va_end(ap);
  errors++;
  if (getenv("FAKECUDA_VERBOSE")) fprintf(stderr, "fakecuda: misuse: %s\n", line);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "fakecuda: out of memory\n");
    abort();
  }
  return p;
}

/* ---- the system: address ranges the CPU cannot touch, aligned host blocks ---- */
#ifdef _WIN32
static void *reserve_range(size_t n) { return VirtualAlloc(NULL, n, MEM_RESERVE, PAGE_NOACCESS); }
static void release_range(void *p, size_t n) {
  (void)n;
  VirtualFree(p, 0, MEM_RELEASE);
}
static size_t page_size(void) {
  SYSTEM_INFO si;
  GetSystemInfo(&si);
  return si.dwPageSize;
}
static void *host_alloc(size_t alignment, size_t n) { return _aligned_malloc(n, alignment); }
static void host_free(void *p) { _aligned_free(p); }
#else
static void *reserve_range(size_t n) {
  void *p = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}
static void release_range(void *p, size_t n) { munmap(p, n); }
static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }
static void *host_alloc(size_t alignment, size_t n) { return aligned_alloc(alignment, n); }
static void host_free(void *p) { free(p); }
#endif

/* ---- memory table ---- */
/* 1: [p, p+n) lies in allocation *out; -1: p is in *out but the range overflows it;
 * 0: p is in no allocation (host memory the fake cannot check). */
static int lookup(uintptr_t p, size_t n, Alloc **out) {
  for (size_t i = 0; i < nallocs; i++) {
    Alloc *a = &allocs[i];
    if (p >= a->base && p < a->base + a->size) {
      *out = a;
      return n <= a->size - (p - a->base) ? 1 : -1;
    }
  }
  *out = NULL;
  return 0;
}

static Alloc *find_base(uintptr_t p) {
  for (size_t i = 0; i < nallocs; i++)
    if (allocs[i].base == p) return &allocs[i];
  return NULL;
}

/* the CPU address of p's bytes (p untracked: p itself, host memory) */
static unsigned char *bytes_at(uintptr_t p) {
  Alloc *a;
  if (lookup(p, 0, &a) != 0 && a) return a->mem + (p - a->base);
  return (unsigned char *)p;
}

/* p lies in a block whose cuMemFreeAsync is queued: no later work may use it */
static int being_freed(uintptr_t p) {
  Alloc *a;
  return lookup(p, 0, &a) != 0 && a && a->freeing;
}

/* p lies in a cuMemMap mapping that cuMemSetAccess did not make readable and writable */
static int no_access(uintptr_t p) {
  Alloc *a;
  return lookup(p, 0, &a) != 0 && a && a->phys && a->access != CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

static Alloc *add_alloc(void) {
  if (nallocs == capallocs) {
    size_t cap = capallocs ? capallocs * 2 : 64;
    Alloc *n = realloc(allocs, cap * sizeof *n);
    if (!n) return NULL;
    allocs = n;
    capallocs = cap;
  }
  return &allocs[nallocs++];
}

static void phys_unmapped(struct Phys *p);

static void remove_alloc(Alloc *a) {
  if (a->phys) {
    phys_unmapped(a->phys); /* the address range stays reserved: cuMemAddressFree's */
  } else if (a->kind == K_DEVICE) {
    release_range((void *)a->base, a->reserved);
    free(a->mem);
  } else {
    host_free(a->mem);
  }
  *a = allocs[--nallocs];
}

/* ---- streams and queues ---- */
static void link_stream(struct CUstream_st *s) {
  s->next_all = all_streams;
  all_streams = s;
}

static void init_devices(void) {
  for (int d = 0; d < ndev; d++) {
    ctxs[d].device = d;
    legacy[d].kind = S_LEGACY;
    legacy[d].device = d;
    link_stream(&legacy[d]);
  }
}

static struct CUstream_st *per_thread(int device) {
  if (!ptds[device]) {
    struct CUstream_st *s = xmalloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->kind = S_PER_THREAD;
    s->device = device;
    link_stream(s); /* reachable after the thread ends */
    ptds[device] = s;
  }
  return ptds[device];
}

static struct CUstream_st *find_created(uintptr_t h) {
  for (struct CUstream_st *s = all_streams; s; s = s->next_all)
    if (s->kind == S_CREATED && (uintptr_t)s == h) return s;
  for (struct CUstream_st *s = dead_streams; s; s = s->next_all)
    if ((uintptr_t)s == h) return s;
  return NULL;
}

static struct CUevent_st *find_event(uintptr_t h) {
  for (struct CUevent_st *e = all_events; e; e = e->next_all)
    if ((uintptr_t)e == h) return e;
  for (struct CUevent_st *e = dead_events; e; e = e->next_all)
    if ((uintptr_t)e == h) return e;
  return NULL;
}

/* Destroyed streams and events move to their dead lists: the lists in use stay short (a long
 * fuzzing run makes hundreds of thousands of them). */
static void bury_stream(struct CUstream_st *s) {
  for (struct CUstream_st **l = &all_streams; *l; l = &(*l)->next_all)
    if (*l == s) {
      *l = s->next_all;
      s->next_all = dead_streams;
      dead_streams = s;
      return;
    }
}

static void bury_event(struct CUevent_st *e) {
  for (struct CUevent_st **l = &all_events; *l; l = &(*l)->next_all)
    if (*l == e) {
      *l = e->next_all;
      e->next_all = dead_events;
      dead_events = e;
      return;
    }
}

static Item *new_item(int op) {
  Item *it = xmalloc(sizeof *it);
  memset(it, 0, sizeof *it);
  it->op = op;
  return it;
}

static void enqueue(struct CUstream_st *s, Item *it) {
  it->seq = ++s->enqueued;
  it->next = NULL;
  if (s->tail)
    s->tail->next = it;
  else
    s->head = it;
  s->tail = it;
  s->count++;
}

static void run_to(struct CUstream_st *s, uint64_t seq);
static void run_kernel(const Item *it);
static size_t run_all(struct CUstream_st *s);
static int item_touches(const Item *it, uintptr_t lo, uintptr_t hi);
struct Gemm;
static void run_gemm(const struct Gemm *g);
static int gemm_touches(const struct Gemm *g, uintptr_t lo, uintptr_t hi);

/* Stream-ordered memory is usable only by work ordered after its allocation: here, when that
 * work runs, the allocation has run (the fake runs nothing early). */
static void check_allocated(const Item *it, const struct CUstream_st *s) {
  uintptr_t ptrs[2] = {it->dst, it->op == OP_COPY ? it->src : 0};
  for (int i = 0; i < 2; i++) {
    Alloc *a;
    if (it->n && ptrs[i] && lookup(ptrs[i], 0, &a) != 0 && a && a->pending)
      misuse("work on a %s stream of device %d uses %p before its stream reached its cuMemAllocAsync (not ordered "
             "after it)",
             snames[s->kind], s->device, (void *)ptrs[i]);
  }
}

/* s reached a cuMemFreeAsync of the block at base. Work queued on other streams that still reads
 * or writes it is not ordered before the free: reported, then run first, so that the fake itself
 * never touches freed memory. (Work queued after the free was reported when it was queued.) */
static void free_queued(struct CUstream_st *s, uintptr_t base) {
  Alloc *a = find_base(base);
  if (!a) return;
  uintptr_t lo = a->base, hi = a->base + a->size;
  for (struct CUstream_st *o = all_streams; o; o = o->next_all)
    if (o != s)
      for (Item *it = o->head; it; it = it->next)
        if (item_touches(it, lo, hi)) {
          misuse("cuMemFreeAsync(%p) ran on a %s stream of device %d while work queued on a %s stream of device %d "
                 "still uses the block (not ordered before the free)",
                 (void *)base, snames[s->kind], s->device, snames[o->kind], o->device);
          run_all(o);
          break;
        }
  if ((a = find_base(base)) != NULL) remove_alloc(a);
}

static void execute(Item *it, struct CUstream_st *s) {
  Alloc *a;
  switch (it->op) {
  case OP_ALLOC:
    if ((a = find_base(it->dst)) != NULL) a->pending = 0;
    break;
  case OP_FREE:
    free_queued(s, it->dst);
    break;
  default:
    check_allocated(it, s);
    break;
  }
  switch (it->op) {
  case OP_COPY:
    if (it->n) memmove(bytes_at(it->dst), bytes_at(it->src), it->n);
    break;
  case OP_SET:
    if (it->n) memset(bytes_at(it->dst), it->value, it->n);
    break;
  case OP_WRITE:
    if (it->n) memcpy(bytes_at(it->dst), it->bytes, it->n);
    break;
  case OP_RECORD:
    if (it->gen == it->event->gen) {
      it->event->completed = 1;
      it->event->ms = now_ms();
    }
    break;
  case OP_WAIT:
    run_to(it->target, it->point);
    break;
  case OP_LAUNCH:
    run_kernel(it);
    break;
  case OP_GEMM:
    run_gemm((const struct Gemm *)(const void *)it->bytes);
    break;
  }
}

/* Executes s's items up to sequence number seq (included). */
static void run_to(struct CUstream_st *s, uint64_t seq) {
  while (s->head && s->done < seq) {
    Item *it = s->head;
    s->head = it->next;
    if (!s->head) s->tail = NULL;
    s->count--;
    execute(it, s); /* a WAIT item may run other streams, never this one past s->done */
    s->done = it->seq;
    free(it->bytes);
    free(it);
  }
}

/* Does queued item it read or write a byte of [lo, hi)? */
static int ranges_meet(uintptr_t p, size_t n, uintptr_t lo, uintptr_t hi) { return n && p < hi && lo < p + n; }
static int item_touches(const Item *it, uintptr_t lo, uintptr_t hi) {
  switch (it->op) {
  case OP_COPY:
    return ranges_meet(it->dst, it->n, lo, hi) || ranges_meet(it->src, it->n, lo, hi);
  case OP_SET:
  case OP_WRITE:
    return ranges_meet(it->dst, it->n, lo, hi);
  case OP_LAUNCH: { /* the operands' first elements: enough to tell which blocks a launch uses */
    const dlp_ElementwiseArgs *a = (const dlp_ElementwiseArgs *)(const void *)it->bytes;
    for (int k = 0; k < DLP_KERNEL_MAX_OPS; k++)
      if (!((a->scalars >> k) & 1) && a->data[k] && ranges_meet((uintptr_t)a->data[k], 1, lo, hi)) return 1;
    return 0;
  }
  case OP_GEMM:
    return gemm_touches((const struct Gemm *)(const void *)it->bytes, lo, hi);
  default:
    return 0;
  }
}

static size_t run_all(struct CUstream_st *s) {
  size_t n = s->count;
  run_to(s, s->enqueued);
  return n;
}

/* runs every queue (of one device, or all when device < 0) */
static size_t run_device(int device) {
  size_t n = 0;
  for (int again = 1; again;) {
    again = 0;
    for (struct CUstream_st *s = all_streams; s; s = s->next_all)
      if ((device < 0 || s->device == device) && s->count) {
        n += run_all(s);
        again = 1;
      }
  }
  return n;
}

/* ---- entry and exit of every driver function ---- */
static CUresult enter(int f) {
  pthread_mutex_lock(&mu);
  calls[f]++;
  if (fail_times[f] && fail_after[f]) {
    fail_after[f]--;
  } else if (fail_times[f]) {
    fail_times[f]--;
    return fail_code[f];
  }
  if (!initialized && f != F_cuInit && f != F_cuGetErrorString) {
    misuse("%s called before cuInit", fnames[f]);
    return E_NOT_INITIALIZED;
  }
  return E_SUCCESS;
}

#define ENTER(f)                                                                                                       \
  do {                                                                                                                 \
    CUresult enter_rc_ = enter(F_##f);                                                                                 \
    if (enter_rc_ != E_SUCCESS) {                                                                                      \
      pthread_mutex_unlock(&mu);                                                                                       \
      return enter_rc_;                                                                                                \
    }                                                                                                                  \
  } while (0)
#define RETURN(rc)                                                                                                     \
  do {                                                                                                                 \
    CUresult ret_rc_ = (rc);                                                                                           \
    pthread_mutex_unlock(&mu);                                                                                         \
    return ret_rc_;                                                                                                    \
  } while (0)
/* misuse: log it and return code */
#define MISUSE(code, ...)                                                                                              \
  do {                                                                                                                 \
    misuse(__VA_ARGS__);                                                                                               \
    RETURN(code);                                                                                                      \
  } while (0)

/* The stream a handle names, for the driver function f. enqueue: the caller
 * adds work, which needs a current context of the stream's device. */
static struct CUstream_st *resolve(CUstream h, int f, int enqueue_work, CUresult *rc) {
  *rc = E_SUCCESS;
  if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    if (cur < 0) {
      misuse("%s on the %s stream without a current context", fnames[f],
             h == CU_STREAM_PER_THREAD ? "per-thread" : "legacy");
      *rc = E_INVALID_CONTEXT;
      return NULL;
    }
    return h == CU_STREAM_PER_THREAD ? per_thread(cur) : &legacy[cur];
  }
  struct CUstream_st *s = find_created((uintptr_t)h);
  if (!s) {
    misuse("%s on an unknown stream %p", fnames[f], (void *)h);
    *rc = E_INVALID_HANDLE;
    return NULL;
  }
  if (s->destroyed) {
    misuse("%s on a destroyed stream %p", fnames[f], (void *)h);
    *rc = E_INVALID_HANDLE;
    return NULL;
  }
  if (enqueue_work && cur < 0) {
    misuse("%s on a stream of device %d without a current context", fnames[f], s->device);
    *rc = E_INVALID_CONTEXT;
    return NULL;
  }
  /* Copies and stream waits may be issued to a stream of another device than the current
   * context's (the driver allows it; kernel launches may not): not a misuse. */
  return s;
}

#define RESOLVE(var, h, f, enq)                                                                                        \
  CUresult var##_rc;                                                                                                   \
  struct CUstream_st *var = resolve(h, F_##f, enq, &var##_rc);                                                         \
  if (!var) RETURN(var##_rc)

static struct CUevent_st *resolve_event(CUevent h, int f, CUresult *rc) {
  struct CUevent_st *e = find_event((uintptr_t)h);
  *rc = E_SUCCESS;
  if (!e) {
    misuse("%s on an unknown event %p", fnames[f], (void *)h);
    *rc = E_INVALID_HANDLE;
  } else if (e->destroyed) {
    misuse("%s on a destroyed event %p", fnames[f], (void *)h);
    *rc = E_INVALID_HANDLE;
    e = NULL;
  }
  return e;
}

#define RESOLVE_EVENT(var, h, f)                                                                                       \
  CUresult var##_rc;                                                                                                   \
  struct CUevent_st *var = resolve_event(h, F_##f, &var##_rc);                                                         \
  if (!var) RETURN(var##_rc)

#define NEED_CONTEXT(f)                                                                                                \
  do {                                                                                                                 \
    if (cur < 0) MISUSE(E_INVALID_CONTEXT, "%s without a current context", #f);                                        \
  } while (0)

/* FAKECUDA_EXIT_REPORT=1: at exit (after the host's lua_close) say on stderr what is still held:
 * device memory not even queued for freeing, streams and events. */
static void exit_report(void) {
  int held = 0, streams = 0, events = 0;
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < nallocs; i++) held += !allocs[i].freeing;
  for (struct CUstream_st *s = all_streams; s; s = s->next_all) streams += s->kind == S_CREATED && !s->destroyed;
  for (struct CUevent_st *e = all_events; e; e = e->next_all) events += !e->destroyed;
  pthread_mutex_unlock(&mu);
  fprintf(stderr, "fakecuda at exit: memory=%d streams=%d events=%d\n", held, streams, events);
}

/* ---- the driver ---- */
EXPORT CUresult cuInit(unsigned int flags) {
  ENTER(cuInit);
  if (flags != 0) MISUSE(E_INVALID_VALUE, "cuInit(flags = %u): flags must be 0", flags);
  if (!initialized) {
    const char *env = getenv("FAKECUDA_DEVICES");
    int n = env && *env ? atoi(env) : 2;
    if (n <= 0) RETURN(E_NO_DEVICE);
    ndev = n > MAXDEV ? MAXDEV : n;
#ifdef FAKECUDA_NO_ASYNC
    pools_on = 0;
#else
    const char *pools_env = getenv("FAKECUDA_POOLS");
    pools_on = !(pools_env && strcmp(pools_env, "0") == 0);
#endif
    init_devices();
    initialized = 1;
    if (getenv("FAKECUDA_EXIT_REPORT")) atexit(exit_report);
  }
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuDeviceGetCount(int *count) {
  ENTER(cuDeviceGetCount);
  if (!count) MISUSE(E_INVALID_VALUE, "cuDeviceGetCount(NULL)");
  *count = ndev;
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  ENTER(cuDeviceGet);
  if (!device) MISUSE(E_INVALID_VALUE, "cuDeviceGet(NULL, ...)");
  if (ordinal < 0 || ordinal >= ndev) RETURN(E_INVALID_DEVICE);
  *device = ordinal;
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device) {
  ENTER(cuDevicePrimaryCtxRetain);
  if (!ctx) MISUSE(E_INVALID_VALUE, "cuDevicePrimaryCtxRetain(NULL, ...)");
  if (device < 0 || device >= ndev) MISUSE(E_INVALID_DEVICE, "cuDevicePrimaryCtxRetain: invalid device %d", device);
  ctxs[device].retained++;
  *ctx = &ctxs[device];
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *ctx) {
  ENTER(cuCtxGetCurrent);
  if (!ctx) MISUSE(E_INVALID_VALUE, "cuCtxGetCurrent(NULL)");
  *ctx = cur < 0 ? NULL : &ctxs[cur];
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  ENTER(cuCtxSetCurrent);
  if (ctx == NULL) {
    cur = -1;
    RETURN(E_SUCCESS);
  }
  int d = -1;
  for (int i = 0; i < ndev; i++)
    if (ctx == &ctxs[i]) d = i;
  if (d < 0) MISUSE(E_INVALID_CONTEXT, "cuCtxSetCurrent(%p): not a context", (void *)ctx);
  if (!ctxs[d].retained) MISUSE(E_INVALID_CONTEXT, "cuCtxSetCurrent: device %d's primary context is not retained", d);
  cur = d;
  RETURN(E_SUCCESS);
}

static const struct {
  int code;
  const char *text;
} messages[] = {
  {0, "no error"},
  {1, "invalid argument"},
  {2, "out of memory"},
  {3, "initialization error"},
  {100, "no CUDA-capable device is detected"},
  {101, "invalid device ordinal"},
  {201, "invalid device context"},
  {400, "invalid resource handle"},
  {600, "device not ready"},
  {800, "operation not permitted"},
  {801, "operation not supported"},
  {999, "unknown error"},
};

EXPORT CUresult cuGetErrorString(CUresult error, const char **text) {
  ENTER(cuGetErrorString);
  if (!text) MISUSE(E_INVALID_VALUE, "cuGetErrorString(%d, NULL)", error);
  for (size_t i = 0; i < sizeof messages / sizeof messages[0]; i++)
    if (messages[i].code == error) {
      *text = messages[i].text;
      RETURN(E_SUCCESS);
    }
  *text = NULL; /* as the real driver does for an unknown code */
  RETURN(E_INVALID_VALUE);
}

static void fill_new(unsigned char *p, size_t n) { memset(p, 0xA5, n); }

/* A block of device memory on device (a PROT_NONE range, its bytes in a shadow buffer). */
static CUresult device_alloc(CUdeviceptr *ptr, size_t bytes, int device, Alloc **out) {
  size_t page = page_size();
  size_t reserved = (bytes + page - 1) / page * page;
  void *base = reserve_range(reserved);
  if (!base) return E_OUT_OF_MEMORY;
  unsigned char *mem = malloc(bytes);
  Alloc *a = mem ? add_alloc() : NULL;
  if (!a) {
    free(mem);
    release_range(base, reserved);
    return E_OUT_OF_MEMORY;
  }
  fill_new(mem, bytes);
  *a = (Alloc){(uintptr_t)base, bytes, reserved, mem, K_DEVICE, device, NULL, 0, 0, 0, 0};
  *ptr = (CUdeviceptr)(uintptr_t)base;
  if (out) *out = a;
  return E_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes) {
  ENTER(cuMemAlloc_v2);
  if (!ptr) MISUSE(E_INVALID_VALUE, "cuMemAlloc_v2(NULL, ...)");
  NEED_CONTEXT(cuMemAlloc_v2);
  if (bytes == 0) MISUSE(E_INVALID_VALUE, "cuMemAlloc_v2 of 0 bytes");
  RETURN(device_alloc(ptr, bytes, cur, NULL));
}

static CUresult host_like_alloc(void **out, size_t bytes, int kind) {
  size_t rounded = (bytes + 255) / 256 * 256;
  unsigned char *mem = host_alloc(256, rounded);
  Alloc *a = mem ? add_alloc() : NULL;
  if (!a) {
    if (mem) host_free(mem);
    return E_OUT_OF_MEMORY;
  }
  fill_new(mem, bytes);
  *a = (Alloc){(uintptr_t)mem, bytes, rounded, mem, kind, cur, NULL, 0, 0, 0, 0};
  *out = mem;
  return E_SUCCESS;
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *ptr, size_t bytes, unsigned int flags) {
  ENTER(cuMemAllocManaged);
  if (!ptr) MISUSE(E_INVALID_VALUE, "cuMemAllocManaged(NULL, ...)");
  NEED_CONTEXT(cuMemAllocManaged);
  if (bytes == 0) MISUSE(E_INVALID_VALUE, "cuMemAllocManaged of 0 bytes");
  if (flags != 1 && flags != 2) MISUSE(E_INVALID_VALUE, "cuMemAllocManaged: flags %u", flags);
  void *p = NULL;
  CUresult rc = host_like_alloc(&p, bytes, K_MANAGED);
  if (rc == E_SUCCESS) *ptr = (CUdeviceptr)(uintptr_t)p;
  RETURN(rc);
}

EXPORT CUresult cuMemHostAlloc(void **ptr, size_t bytes, unsigned int flags) {
  ENTER(cuMemHostAlloc);
  if (!ptr) MISUSE(E_INVALID_VALUE, "cuMemHostAlloc(NULL, ...)");
  NEED_CONTEXT(cuMemHostAlloc);
  if (bytes == 0) MISUSE(E_INVALID_VALUE, "cuMemHostAlloc of 0 bytes");
  if (flags & ~7u) MISUSE(E_INVALID_VALUE, "cuMemHostAlloc: flags %u", flags);
  RETURN(host_like_alloc(ptr, bytes, K_HOST));
}

static CUresult retire(int f, Alloc *a);

static CUresult free_alloc(int f, uintptr_t p, int host) {
  Alloc *a = find_base(p);
  if (!a) {
    Alloc *in;
    if (lookup(p, 0, &in) != 0)
      misuse("%s(%p): not the start of its allocation", fnames[f], (void *)p);
    else
      misuse("%s(%p): not a live allocation (double or bad free)", fnames[f], (void *)p);
    return E_INVALID_VALUE;
  }
  if (host != (a->kind == K_HOST)) {
    misuse("%s(%p): the block is %s memory", fnames[f], (void *)p, knames[a->kind]);
    return E_INVALID_VALUE;
  }
  if (a->phys) {
    misuse("%s(%p): the block was mapped by cuMemMap (cuMemUnmap it)", fnames[f], (void *)p);
    return E_INVALID_VALUE;
  }
  if (a->freeing) {
    misuse("%s(%p): a cuMemFreeAsync of the block is queued already (double free)", fnames[f], (void *)p);
    return E_INVALID_VALUE;
  }
  return retire(f, a);
}

/* Free a (a block, or a cuMemMap mapping) as the driver does: synchronously. */
static CUresult retire(int f, Alloc *a) {
  uintptr_t p = a->base;
  int host = a->kind == K_HOST;
  int device = a->device;
  if (a->async) {
    /* memory of cuMemAllocAsync: the driver does not wait for anything (cuda.h, cuMemFree) */
    if (a->pending) misuse("%s(%p): the block's cuMemAllocAsync has not run yet", fnames[f], (void *)p);
  } else {
    run_device(host ? -1 : device); /* synchronous, as the real driver is */
  }
  a = find_base(p);               /* the table may have moved */
  if (!a) return E_SUCCESS;
  /* The driver waits for the freeing device's work only (for none, with cuMemAllocAsync's
   * memory): work queued on another stream that still reads or writes the block would use freed
   * memory. Reported, then run first, so that the fake itself never touches freed memory. */
  uintptr_t lo = a->base, hi = a->base + a->size;
  for (struct CUstream_st *s = all_streams; s; s = s->next_all)
    for (Item *it = s->head; it; it = it->next)
      if (item_touches(it, lo, hi)) {
        misuse("%s(%p): the block is still used by work queued on a %s stream of device %d", fnames[f], (void *)p,
               snames[s->kind], s->device);
        run_all(s);
        break;
      }
  a = find_base(p);
  if (a) remove_alloc(a);
  return E_SUCCESS;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr) {
  ENTER(cuMemFree_v2);
  RETURN(free_alloc(F_cuMemFree_v2, (uintptr_t)ptr, 0));
}

EXPORT CUresult cuMemFreeHost(void *ptr) {
  ENTER(cuMemFreeHost);
  RETURN(free_alloc(F_cuMemFreeHost, (uintptr_t)ptr, 1));
}

#ifndef FAKECUDA_NO_ASYNC
EXPORT CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice device) {
  ENTER(cuDeviceGetAttribute);
  if (!value) MISUSE(E_INVALID_VALUE, "cuDeviceGetAttribute(NULL, ...)");
  if (device < 0 || device >= ndev) MISUSE(E_INVALID_DEVICE, "cuDeviceGetAttribute: invalid device %d", (int)device);
  if ((int)attribute != CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) RETURN(E_INVALID_VALUE); /* unknown to the fake */
  *value = pools_on;
  RETURN(E_SUCCESS);
}

/* Stream-ordered allocation: the block exists at once, but only work ordered after the
 * allocation item (on that stream, or after an event recorded behind it) may use it. */
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *ptr, size_t bytes, CUstream stream) {
  ENTER(cuMemAllocAsync);
  if (!ptr) MISUSE(E_INVALID_VALUE, "cuMemAllocAsync(NULL, ...)");
  RESOLVE(s, stream, cuMemAllocAsync, 1);
  if (!pools_on) MISUSE(E_NOT_SUPPORTED, "cuMemAllocAsync on device %d, which has no memory pools", s->device);
  if (bytes == 0) MISUSE(E_INVALID_VALUE, "cuMemAllocAsync of 0 bytes");
  Alloc *a;
  CUresult rc = device_alloc(ptr, bytes, s->device, &a);
  if (rc != E_SUCCESS) RETURN(rc);
  a->async = 1;
  a->pending = 1;
  Item *it = new_item(OP_ALLOC);
  it->dst = a->base;
  enqueue(s, it);
  RETURN(E_SUCCESS);
}

/* Stream-ordered free: the block goes when its stream reaches the free item; until then it counts
 * as live. Any block of device memory (cuMemAlloc_v2's too, as the real driver allows). */
EXPORT CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream stream) {
  ENTER(cuMemFreeAsync);
  RESOLVE(s, stream, cuMemFreeAsync, 1);
  if (!pools_on) MISUSE(E_NOT_SUPPORTED, "cuMemFreeAsync on device %d, which has no memory pools", s->device);
  Alloc *a = find_base((uintptr_t)ptr);
  if (!a) {
    Alloc *in;
    if (lookup((uintptr_t)ptr, 0, &in) != 0)
      MISUSE(E_INVALID_VALUE, "cuMemFreeAsync(%p): not the start of its allocation", (void *)(uintptr_t)ptr);
    MISUSE(E_INVALID_VALUE, "cuMemFreeAsync(%p): not a live allocation (double or bad free)", (void *)(uintptr_t)ptr);
  }
  if (a->kind != K_DEVICE || a->phys)
    MISUSE(E_INVALID_VALUE, "cuMemFreeAsync(%p): the block is %s memory", (void *)(uintptr_t)ptr,
           a->phys ? "cuMemMap'ed" : knames[a->kind]);
  if (a->freeing)
    MISUSE(E_INVALID_VALUE, "cuMemFreeAsync(%p): a free of the block is queued already (double free)",
           (void *)(uintptr_t)ptr);
  if (a->device != s->device)
    MISUSE(E_INVALID_VALUE, "cuMemFreeAsync(%p): a block of device %d on a stream of device %d",
           (void *)(uintptr_t)ptr, a->device, s->device);
  a->freeing = 1;
  Item *it = new_item(OP_FREE);
  it->dst = a->base;
  enqueue(s, it);
  RETURN(E_SUCCESS);
}
#endif

EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  ENTER(cuMemcpyAsync);
  RESOLVE(s, stream, cuMemcpyAsync, 1);
  Alloc *a;
  if (lookup((uintptr_t)dst, bytes, &a) < 0)
    MISUSE(E_INVALID_VALUE, "cuMemcpyAsync: %zu bytes to %p overflow its %s allocation", bytes, (void *)(uintptr_t)dst,
           knames[a->kind]);
  if (lookup((uintptr_t)src, bytes, &a) < 0)
    MISUSE(E_INVALID_VALUE, "cuMemcpyAsync: %zu bytes from %p overflow its %s allocation", bytes,
           (void *)(uintptr_t)src, knames[a->kind]);
  if (bytes && (!dst || !src)) MISUSE(E_INVALID_VALUE, "cuMemcpyAsync with a NULL pointer");
  if (bytes && (being_freed((uintptr_t)dst) || being_freed((uintptr_t)src)))
    MISUSE(E_INVALID_VALUE, "cuMemcpyAsync: %zu bytes from %p to %p use a block after its cuMemFreeAsync", bytes,
           (void *)(uintptr_t)src, (void *)(uintptr_t)dst);
  if (bytes && (no_access((uintptr_t)dst) || no_access((uintptr_t)src)))
    MISUSE(E_INVALID_VALUE, "cuMemcpyAsync: memory mapped by cuMemMap without read/write access (cuMemSetAccess)");
  /* undefined in the driver (the areas may not overlap): a copy between overlapping views must
   * go through a temporary */
  if (ranges_meet((uintptr_t)dst, bytes, (uintptr_t)src, (uintptr_t)src + bytes))
    MISUSE(E_INVALID_VALUE, "cuMemcpyAsync: %zu bytes from %p to %p overlap", bytes, (void *)(uintptr_t)src,
           (void *)(uintptr_t)dst);
  Item *it = new_item(OP_COPY);
  it->dst = (uintptr_t)dst;
  it->src = (uintptr_t)src;
  it->n = bytes;
  enqueue(s, it);
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count, CUstream stream) {
  ENTER(cuMemsetD8Async);
  RESOLVE(s, stream, cuMemsetD8Async, 1);
  Alloc *a;
  int in = lookup((uintptr_t)dst, count, &a);
  if (in == 0) MISUSE(E_INVALID_VALUE, "cuMemsetD8Async on %p, which is not CUDA memory", (void *)(uintptr_t)dst);
  if (in < 0) MISUSE(E_INVALID_VALUE, "cuMemsetD8Async: %zu bytes at %p overflow the allocation", count,
                     (void *)(uintptr_t)dst);
  if (count && no_access((uintptr_t)dst))
    MISUSE(E_INVALID_VALUE, "cuMemsetD8Async: memory mapped by cuMemMap without read/write access (cuMemSetAccess)");
  if (count && being_freed((uintptr_t)dst))
    MISUSE(E_INVALID_VALUE, "cuMemsetD8Async on %p after its cuMemFreeAsync", (void *)(uintptr_t)dst);
  Item *it = new_item(OP_SET);
  it->dst = (uintptr_t)dst;
  it->value = value;
  it->n = count;
  enqueue(s, it);
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr) {
  ENTER(cuPointerGetAttribute);
  if (!data) MISUSE(E_INVALID_VALUE, "cuPointerGetAttribute(NULL, ...)");
  Alloc *a;
  if (lookup((uintptr_t)ptr, 0, &a) == 0 || !a) RETURN(E_INVALID_VALUE); /* not CUDA memory: no misuse */
  switch (attribute) {
  case 1: /* CONTEXT */
    *(CUcontext *)data = &ctxs[a->device];
    break;
  case 2: /* MEMORY_TYPE: 1 host, 2 device */
    *(unsigned int *)data = a->kind == K_HOST ? 1u : 2u;
    break;
  case 6: /* DEVICE_POINTER */
    *(CUdeviceptr *)data = ptr;
    break;
  case 7: /* HOST_POINTER */
    if (a->kind == K_DEVICE) RETURN(E_INVALID_VALUE);
    *(void **)data = (void *)(uintptr_t)ptr;
    break;
  case 8: /* IS_MANAGED */
    *(unsigned int *)data = a->kind == K_MANAGED;
    break;
  case 9: /* DEVICE_ORDINAL */
    *(int *)data = a->device;
    break;
  default:
    RETURN(E_INVALID_VALUE);
  }
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuStreamCreateWithPriority(CUstream *stream, unsigned int flags, int priority) {
  ENTER(cuStreamCreateWithPriority);
  if (!stream) MISUSE(E_INVALID_VALUE, "cuStreamCreateWithPriority(NULL, ...)");
  NEED_CONTEXT(cuStreamCreateWithPriority);
  if (flags & ~1u) MISUSE(E_INVALID_VALUE, "cuStreamCreateWithPriority: flags %u", flags);
  struct CUstream_st *s = xmalloc(sizeof *s);
  memset(s, 0, sizeof *s);
  s->kind = S_CREATED;
  s->device = cur;
  s->flags = flags;
  s->priority = priority < -5 ? -5 : priority > 0 ? 0 : priority; /* clamped, as the driver does */
  link_stream(s);
  *stream = s;
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
  ENTER(cuStreamDestroy_v2);
  if (stream == NULL || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD)
    MISUSE(E_INVALID_HANDLE, "cuStreamDestroy_v2 on the built-in stream %p", (void *)stream);
  RESOLVE(s, stream, cuStreamDestroy_v2, 0);
  run_all(s); /* the real driver finishes pending work */
  s->destroyed = 1;
  bury_stream(s);
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuStreamSynchronize(CUstream stream) {
  ENTER(cuStreamSynchronize);
  RESOLVE(s, stream, cuStreamSynchronize, 0);
  run_all(s);
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuCtxSynchronize(void) {
  ENTER(cuCtxSynchronize);
  NEED_CONTEXT(cuCtxSynchronize);
  run_device(cur); /* every stream of the current context's device */
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuStreamQuery(CUstream stream) {
  ENTER(cuStreamQuery);
  RESOLVE(s, stream, cuStreamQuery, 0);
  RETURN(s->count ? E_NOT_READY : E_SUCCESS);
}

EXPORT CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  ENTER(cuStreamWaitEvent);
  RESOLVE(s, stream, cuStreamWaitEvent, 1);
  RESOLVE_EVENT(e, event, cuStreamWaitEvent);
  if (flags > 1) MISUSE(E_INVALID_VALUE, "cuStreamWaitEvent: flags %u", flags);
  if (e->recorded) { /* waiting for a never-recorded event is a no-op */
    Item *it = new_item(OP_WAIT);
    it->target = e->stream;
    it->point = e->seq;
    enqueue(s, it);
  }
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuEventCreate(CUevent *event, unsigned int flags) {
  ENTER(cuEventCreate);
  if (!event) MISUSE(E_INVALID_VALUE, "cuEventCreate(NULL, ...)");
  NEED_CONTEXT(cuEventCreate);
  if (flags & ~7u) MISUSE(E_INVALID_VALUE, "cuEventCreate: flags %u", flags);
  struct CUevent_st *e = xmalloc(sizeof *e);
  memset(e, 0, sizeof *e);
  e->device = cur;
  e->flags = flags;
  e->next_all = all_events;
  all_events = e;
  *event = e;
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuEventRecord(CUevent event, CUstream stream) {
  ENTER(cuEventRecord);
  RESOLVE_EVENT(e, event, cuEventRecord);
  RESOLVE(s, stream, cuEventRecord, 1);
  if (e->device != s->device)
    MISUSE(E_INVALID_HANDLE, "cuEventRecord: an event of device %d on a stream of device %d", e->device, s->device);
  Item *it = new_item(OP_RECORD);
  it->event = e;
  it->gen = ++e->gen;
  enqueue(s, it);
  e->recorded = 1;
  e->completed = 0;
  e->stream = s;
  e->seq = it->seq;
  RETURN(E_SUCCESS);
}

static int event_done(const struct CUevent_st *e) { return !e->recorded || e->stream->done >= e->seq; }

EXPORT CUresult cuEventSynchronize(CUevent event) {
  ENTER(cuEventSynchronize);
  RESOLVE_EVENT(e, event, cuEventSynchronize);
  if (e->recorded) run_to(e->stream, e->seq);
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuEventQuery(CUevent event) {
  ENTER(cuEventQuery);
  RESOLVE_EVENT(e, event, cuEventQuery);
  RETURN(event_done(e) ? E_SUCCESS : E_NOT_READY);
}

static CUresult elapsed(int f, float *ms, CUevent start, CUevent end) {
  if (!ms) MISUSE(E_INVALID_VALUE, "%s(NULL, ...)", fnames[f]);
  CUresult rc;
  struct CUevent_st *a = resolve_event(start, f, &rc);
  if (!a) RETURN(rc);
  struct CUevent_st *b = resolve_event(end, f, &rc);
  if (!b) RETURN(rc);
  /* not misuse: a user may ask for it; the driver answers with an error */
  if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) RETURN(E_INVALID_HANDLE);
  if (!a->recorded || !b->recorded) RETURN(E_INVALID_HANDLE);
  if (!event_done(a) || !event_done(b) || !a->completed || !b->completed) RETURN(E_NOT_READY);
  *ms = (float)(b->ms - a->ms);
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
  ENTER(cuEventElapsedTime);
  return elapsed(F_cuEventElapsedTime, ms, start, end);
}

EXPORT CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end) {
  ENTER(cuEventElapsedTime_v2);
  return elapsed(F_cuEventElapsedTime_v2, ms, start, end);
}

EXPORT CUresult cuEventDestroy_v2(CUevent event) {
  ENTER(cuEventDestroy_v2);
  RESOLVE_EVENT(e, event, cuEventDestroy_v2);
  e->destroyed = 1; /* kept, so that later use is detected */
  bury_event(e);
  RETURN(E_SUCCESS);
}

/* ---- modules and kernel launches ----
 * cuModuleLoadData takes a PTX image (text with a ".version" line; anything else: 200,
 * INVALID_IMAGE) for the current context's device. cuModuleGetFunction finds a kernel only when
 * the image declares it (".entry NAME(") AND the C build of src/compute/cuda/kernels.cu has it
 * (else 500, NOT_FOUND): the module's embedded PTX and the kernels the fake runs must agree.
 * cuLaunchKernel enqueues the launch (1-D grids and blocks only, the arguments one struct, copied
 * as the driver copies them); when the queue runs it, every thread of the grid is called in
 * turn. A kernel's reads and writes go through dlp_fake_device_bytes: an address outside every
 * live allocation, device memory of another device, or memory that a cuMemMap mapping does not
 * give access to is misuse (logged, then served from a scratch buffer so that nothing crashes). A
 * launch on a stream of another device than the current context's is misuse (the driver refuses
 * it). */
struct CUmod_st {
  struct CUmod_st *next;
  const char *image;
  int device;
};
struct CUfunc_st {
  struct CUfunc_st *next;
  struct CUmod_st *module;
  const dlp_FakeKernel *kernel;
};
static struct CUmod_st *modules;
static struct CUfunc_st *kernel_functions;
static unsigned long launches;
static unsigned last_grid, last_block; /* the dimensions of the last launch queued (fake.live()) */

static _Thread_local int64_t run_thread, run_threads;
static _Thread_local int kernel_device;
static _Thread_local const char *run_name;
static unsigned char scratch[64];

int64_t dlp_fake_thread(void);
int64_t dlp_fake_threads(void);
void *dlp_fake_device_bytes(uint64_t address, int64_t n, int write);
int64_t dlp_fake_thread(void) { return run_thread; }
int64_t dlp_fake_threads(void) { return run_threads; }

void *dlp_fake_device_bytes(uint64_t address, int64_t n, int write) {
  Alloc *a;
  int found = lookup((uintptr_t)address, (size_t)n, &a);
  if (found == 1 && (a->kind != K_DEVICE || a->device == kernel_device) && (!a->phys || a->access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
    return a->mem + (address - a->base);
  misuse("kernel %s %s %lld bytes at 0x%llx: %s", run_name, write ? "writes" : "reads", (long long)n,
         (unsigned long long)address,
         found == 0 ? "not in any live allocation" : found < 0 ? "past the end of its allocation"
         : a->kind == K_DEVICE && a->device != kernel_device ? "memory of another device" : "a mapping without access");
  memset(scratch, 0, sizeof scratch);
  return scratch;
}

static void run_kernel(const Item *it) {
  const dlp_ElementwiseArgs *args = (const dlp_ElementwiseArgs *)(const void *)it->bytes;
  run_threads = (int64_t)it->blocks * it->threads;
  kernel_device = it->device;
  run_name = it->function->kernel->name;
  for (run_thread = 0; run_thread < run_threads; run_thread++) it->function->kernel->run(args);
  launches++;
}

EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  ENTER(cuModuleLoadData);
  NEED_CONTEXT(cuModuleLoadData);
  if (!module || !image) MISUSE(E_INVALID_VALUE, "cuModuleLoadData with a NULL argument");
  if (!strstr((const char *)image, "\n.version ")) RETURN(E_INVALID_IMAGE);
  struct CUmod_st *m = xmalloc(sizeof *m);
  m->image = image;
  m->device = cur;
  m->next = modules;
  modules = m;
  *module = m;
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuModuleGetFunction(CUfunction *function, CUmodule module, const char *name) {
  ENTER(cuModuleGetFunction);
  struct CUmod_st *m = modules;
  while (m && m != module) m = m->next;
  if (!m) MISUSE(E_INVALID_HANDLE, "cuModuleGetFunction on an unknown module %p", (void *)module);
  if (!function || !name) MISUSE(E_INVALID_VALUE, "cuModuleGetFunction with a NULL argument");
  char entry[160];
  snprintf(entry, sizeof entry, ".entry %s(", name);
  if (!strstr(m->image, entry)) RETURN(E_NOT_FOUND);
  const dlp_FakeKernel *k = dlp_fake_kernels;
  while (k->name && strcmp(k->name, name) != 0) k++;
  if (!k->name) MISUSE(E_NOT_FOUND, "kernel %s is in the PTX but not in the fake's C build of kernels.cu", name);
  struct CUfunc_st *f = xmalloc(sizeof *f);
  f->module = m;
  f->kernel = k;
  f->next = kernel_functions;
  kernel_functions = f;
  *function = f;
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                               unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                               unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra) {
  ENTER(cuLaunchKernel);
  NEED_CONTEXT(cuLaunchKernel);
  struct CUfunc_st *fn = kernel_functions;
  while (fn && fn != f) fn = fn->next;
  if (!fn) MISUSE(E_INVALID_HANDLE, "cuLaunchKernel of an unknown function %p", (void *)f);
  if (fn->module->device != cur)
    MISUSE(E_INVALID_CONTEXT, "cuLaunchKernel of %s (loaded on device %d) with device %d current", fn->kernel->name,
           fn->module->device, cur);
  if (gridDimX == 0 || blockDimX == 0 || blockDimX > 1024 || gridDimY != 1 || gridDimZ != 1 || blockDimY != 1 ||
      blockDimZ != 1 || sharedMemBytes != 0 || !kernelParams || !kernelParams[0] || extra)
    MISUSE(E_INVALID_VALUE, "cuLaunchKernel of %s: grid %ux%ux%u, block %ux%ux%u, %u bytes shared, params %p, extra %p "
           "(the fake runs 1-D launches of one argument)", fn->kernel->name, gridDimX, gridDimY, gridDimZ, blockDimX,
           blockDimY, blockDimZ, sharedMemBytes, (void *)kernelParams, (void *)extra);
  RESOLVE(s, hStream, cuLaunchKernel, 1);
  if (s->device != cur)
    MISUSE(E_INVALID_CONTEXT, "cuLaunchKernel of %s on a stream of device %d with device %d current", fn->kernel->name,
           s->device, cur);
  Item *it = new_item(OP_LAUNCH);
  it->bytes = xmalloc(sizeof(dlp_ElementwiseArgs));
  memcpy(it->bytes, kernelParams[0], sizeof(dlp_ElementwiseArgs));
  it->function = fn;
  it->blocks = gridDimX;
  it->threads = blockDimX;
  last_grid = gridDimX;
  last_block = blockDimX;
  it->device = cur;
  enqueue(s, it);
  RETURN(E_SUCCESS);
}

/* ---- virtual memory management: cuMemCreate and friends (dlpack.ipc) ----
 * A physical allocation is a memfd named "fakecuda-vmm:N" (N: its device), sealed against
 * shrinking and growing and mapped MAP_SHARED as its shadow buffer; exporting it dups the memfd,
 * importing maps the memfd it is given, so two processes that load the fake share "device
 * memory" (a write on one side is seen on the other). Address ranges are PROT_NONE reservations,
 * as cuMemAlloc_v2's, so the module cannot touch the bytes from the CPU.
 * Windows has no memfd and the module no dlpack.ipc there (its only user of these functions):
 * cuMemCreate, cuMemExportToShareableHandle and cuMemImportFromShareableHandle answer 801
 * (CUDA_ERROR_NOT_SUPPORTED) after checking their arguments, so no Phys ever exists; the address
 * reservations work as on Linux. */
#define VMM_GRANULARITY ((size_t)2 << 20) /* as a real GPU's minimum granularity */
#define VMM_NAME "fakecuda-vmm:"

typedef struct Phys {
  struct Phys *next;
  int fd, device, requested, released;
  size_t size;
  unsigned char *mem;
  unsigned long maps;
} Phys;
static Phys *physes; /* live: not released, or still mapped */
typedef struct Reservation {
  struct Reservation *next;
  uintptr_t base;
  size_t size;
} Reservation;
static Reservation *reservations;

static Phys *find_phys(CUmemGenericAllocationHandle h) {
  for (Phys *p = physes; p; p = p->next)
    if ((uintptr_t)p == (uintptr_t)h) return p;
  return NULL;
}

static void phys_free_if_unused(Phys *p) {
  if (!p->released || p->maps) return;
  for (Phys **l = &physes; *l; l = &(*l)->next)
    if (*l == p) {
      *l = p->next;
      break;
    }
#ifndef _WIN32 /* a Phys exists only where cuMemCreate works */
  munmap(p->mem, p->size);
  close(p->fd);
#endif
  free(p);
}

static void phys_unmapped(Phys *p) {
  p->maps--;
  phys_free_if_unused(p);
}

#ifndef _WIN32
/* A Phys on the memfd fd (taken), mapped; NULL when out of memory (fd closed). */
static Phys *phys_new(int fd, size_t size, int device, int requested) {
  Phys *p = malloc(sizeof *p);
  void *mem = p ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (mem == MAP_FAILED) {
    free(p);
    close(fd);
    return NULL;
  }
  *p = (Phys){physes, fd, device, requested, 0, size, mem, 0};
  physes = p;
  return p;
}
#endif

static CUresult check_prop(int f, const CUmemAllocationProp *prop) {
  if (!prop) MISUSE(E_INVALID_VALUE, "%s: no CUmemAllocationProp", fnames[f]);
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
    MISUSE(E_INVALID_VALUE, "%s: allocation type %d (the fake knows PINNED only)", fnames[f], prop->type);
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    MISUSE(E_INVALID_VALUE, "%s: location type %d (the fake knows DEVICE only)", fnames[f], prop->location.type);
  if (prop->location.id < 0 || prop->location.id >= ndev)
    MISUSE(E_INVALID_DEVICE, "%s: no device %d", fnames[f], prop->location.id);
  if (prop->requestedHandleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    MISUSE(E_INVALID_VALUE, "%s: handle types 0x%x (the fake knows POSIX_FILE_DESCRIPTOR only)", fnames[f],
           (unsigned)prop->requestedHandleTypes);
  return E_SUCCESS; /* still locked: the caller goes on */
}

/* On misuse check_prop has unlocked already (MISUSE's RETURN): its caller returns at once. */
#define CHECK_PROP(f, prop)                                                                                            \
  do {                                                                                                                 \
    CUresult prop_rc_ = check_prop(F_##f, prop);                                                                       \
    if (prop_rc_ != E_SUCCESS) return prop_rc_;                                                                        \
  } while (0)

EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option) {
  ENTER(cuMemGetAllocationGranularity);
  if (!granularity) MISUSE(E_INVALID_VALUE, "cuMemGetAllocationGranularity(NULL, ...)");
  if (option != 0 && option != 1) MISUSE(E_INVALID_VALUE, "cuMemGetAllocationGranularity: option %d", (int)option);
  CHECK_PROP(cuMemGetAllocationGranularity, prop);
  *granularity = VMM_GRANULARITY;
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                            unsigned long long flags) {
  ENTER(cuMemCreate);
  if (!handle) MISUSE(E_INVALID_VALUE, "cuMemCreate(NULL, ...)");
  if (flags != 0) MISUSE(E_INVALID_VALUE, "cuMemCreate: flags %llu must be 0", flags);
  if (size == 0 || size % VMM_GRANULARITY)
    MISUSE(E_INVALID_VALUE, "cuMemCreate of %zu bytes, not a multiple of the granularity %zu", size, VMM_GRANULARITY);
  CHECK_PROP(cuMemCreate, prop);
#ifdef _WIN32
  RETURN(E_NOT_SUPPORTED);
#else
  char name[64];
  snprintf(name, sizeof name, VMM_NAME "%d", prop->location.id);
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) RETURN(E_OUT_OF_MEMORY);
  if (ftruncate(fd, (off_t)size) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    close(fd);
    RETURN(E_OUT_OF_MEMORY);
  }
  Phys *p = phys_new(fd, size, prop->location.id, prop->requestedHandleTypes);
  if (!p) RETURN(E_OUT_OF_MEMORY);
  fill_new(p->mem, size);
  *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
  RETURN(E_SUCCESS);
#endif
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  ENTER(cuMemRelease);
  Phys *p = find_phys(handle);
  if (!p || p->released) MISUSE(E_INVALID_VALUE, "cuMemRelease(0x%llx): not a live allocation handle", handle);
  p->released = 1; /* the memory goes with its last mapping */
  phys_free_if_unused(p);
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                    unsigned long long flags) {
  ENTER(cuMemAddressReserve);
  (void)addr; /* a hint */
  if (!ptr) MISUSE(E_INVALID_VALUE, "cuMemAddressReserve(NULL, ...)");
  if (flags != 0) MISUSE(E_INVALID_VALUE, "cuMemAddressReserve: flags %llu must be 0", flags);
  if (size == 0 || size % VMM_GRANULARITY || (alignment & (alignment - 1)))
    MISUSE(E_INVALID_VALUE, "cuMemAddressReserve of %zu bytes aligned to %zu", size, alignment);
  void *base = reserve_range(size);
  Reservation *r = base ? malloc(sizeof *r) : NULL;
  if (!r) {
    if (base) release_range(base, size);
    RETURN(E_OUT_OF_MEMORY);
  }
  *r = (Reservation){reservations, (uintptr_t)base, size};
  reservations = r;
  *ptr = (CUdeviceptr)(uintptr_t)base;
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  ENTER(cuMemAddressFree);
  Reservation **l = &reservations;
  while (*l && !((*l)->base == (uintptr_t)ptr && (*l)->size == size)) l = &(*l)->next;
  if (!*l) MISUSE(E_INVALID_VALUE, "cuMemAddressFree(%p, %zu): not a reservation", (void *)(uintptr_t)ptr, size);
  for (size_t i = 0; i < nallocs; i++)
    if (allocs[i].phys && allocs[i].base >= (uintptr_t)ptr && allocs[i].base < (uintptr_t)ptr + size)
      MISUSE(E_INVALID_VALUE, "cuMemAddressFree(%p): the range is still mapped", (void *)(uintptr_t)ptr);
  Reservation *r = *l;
  *l = r->next;
  release_range((void *)r->base, r->size);
  free(r);
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                         unsigned long long flags) {
  ENTER(cuMemMap);
  Phys *p = find_phys(handle);
  uintptr_t lo = (uintptr_t)ptr;
  if (!p || p->released) MISUSE(E_INVALID_VALUE, "cuMemMap: 0x%llx is not a live allocation handle", handle);
  if (flags != 0) MISUSE(E_INVALID_VALUE, "cuMemMap: flags %llu must be 0", flags);
  if (size == 0 || size % VMM_GRANULARITY || offset % VMM_GRANULARITY)
    MISUSE(E_INVALID_VALUE, "cuMemMap of %zu bytes at offset %zu: not multiples of the granularity", size, offset);
  if (offset > p->size || size > p->size - offset) RETURN(E_INVALID_VALUE); /* beyond the allocation: not misuse */
  Reservation *r = reservations;
  while (r && !(lo >= r->base && lo - r->base <= r->size && size <= r->size - (lo - r->base))) r = r->next;
  if (!r) MISUSE(E_INVALID_VALUE, "cuMemMap(%p, %zu): not inside a reservation", (void *)lo, size);
  for (size_t i = 0; i < nallocs; i++)
    if (ranges_meet(lo, size, allocs[i].base, allocs[i].base + allocs[i].size))
      MISUSE(E_INVALID_VALUE, "cuMemMap(%p, %zu): the range is mapped already", (void *)lo, size);
  Alloc *a = add_alloc();
  if (!a) RETURN(E_OUT_OF_MEMORY);
  *a = (Alloc){lo, size, size, p->mem + offset, K_DEVICE, p->device, p, 0, 0, 0, 0};
  p->maps++;
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  ENTER(cuMemUnmap);
  Alloc *a = find_base((uintptr_t)ptr);
  if (!a || !a->phys || a->size != size)
    MISUSE(E_INVALID_VALUE, "cuMemUnmap(%p, %zu): not a mapping made by cuMemMap", (void *)(uintptr_t)ptr, size);
  RETURN(retire(F_cuMemUnmap, a));
}

EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
  ENTER(cuMemSetAccess);
  if (!desc || count == 0) MISUSE(E_INVALID_VALUE, "cuMemSetAccess with no descriptor");
  int flags = 0;
  for (size_t i = 0; i < count; i++) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 || desc[i].location.id >= ndev)
      MISUSE(E_INVALID_DEVICE, "cuMemSetAccess: location %d:%d", desc[i].location.type, desc[i].location.id);
    if (desc[i].flags != 0 && desc[i].flags != 1 && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      MISUSE(E_INVALID_VALUE, "cuMemSetAccess: flags %d", desc[i].flags);
    flags |= desc[i].flags;
  }
  /* the range must be covered by mappings, each wholly inside it */
  size_t covered = 0;
  for (size_t i = 0; i < nallocs; i++)
    if (allocs[i].phys && ranges_meet(allocs[i].base, allocs[i].size, (uintptr_t)ptr, (uintptr_t)ptr + size)) {
      if (allocs[i].base < (uintptr_t)ptr || allocs[i].size > (uintptr_t)ptr + size - allocs[i].base)
        MISUSE(E_INVALID_VALUE, "cuMemSetAccess(%p, %zu) covers part of a mapping", (void *)(uintptr_t)ptr, size);
      covered += allocs[i].size;
    }
  if (size == 0 || covered != size)
    MISUSE(E_INVALID_VALUE, "cuMemSetAccess(%p, %zu): the range is not mapped", (void *)(uintptr_t)ptr, size);
  for (size_t i = 0; i < nallocs; i++)
    if (allocs[i].phys && ranges_meet(allocs[i].base, allocs[i].size, (uintptr_t)ptr, (uintptr_t)ptr + size))
      allocs[i].access = flags;
  RETURN(E_SUCCESS);
}

EXPORT CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle,
                                             CUmemAllocationHandleType type, unsigned long long flags) {
  ENTER(cuMemExportToShareableHandle);
  Phys *p = find_phys(handle);
  if (!shareable) MISUSE(E_INVALID_VALUE, "cuMemExportToShareableHandle(NULL, ...)");
  if (!p || p->released) MISUSE(E_INVALID_VALUE, "cuMemExportToShareableHandle: 0x%llx is not a live handle", handle);
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || !(p->requested & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
    MISUSE(E_INVALID_VALUE, "cuMemExportToShareableHandle: handle type %d (requested 0x%x at creation)", (int)type,
           (unsigned)p->requested);
  if (flags != 0) MISUSE(E_INVALID_VALUE, "cuMemExportToShareableHandle: flags %llu must be 0", flags);
#ifdef _WIN32
  RETURN(E_NOT_SUPPORTED); /* unreachable: no Phys exists on Windows */
#else
  int fd = dup(p->fd); /* a new descriptor each time, not close-on-exec, as the driver's */
  if (fd < 0) RETURN(E_OUT_OF_MEMORY);
  *(int *)shareable = fd;
  RETURN(E_SUCCESS);
#endif
}

#ifndef _WIN32

/* The device of a memfd made by cuMemCreate (of this process or another), from its name; -1 when
 * fd is not one (a peer's plain memfd, a pipe, a regular file: an error, not a misuse). */
static int vmm_device_of(int fd, size_t *size) {
  char link[64], target[128];
  struct stat st;
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) return -1;
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0) return -1;
  target[n] = '\0';
  if (strncmp(target, "/memfd:" VMM_NAME, strlen("/memfd:" VMM_NAME)) != 0) return -1;
  if (fstat(fd, &st) != 0 || st.st_size <= 0 || (size_t)st.st_size % VMM_GRANULARITY) return -1;
  int device = atoi(target + strlen("/memfd:" VMM_NAME));
  *size = (size_t)st.st_size;
  return device >= 0 && device < ndev ? device : -1;
}
#endif

EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os_handle,
                                               CUmemAllocationHandleType type) {
  ENTER(cuMemImportFromShareableHandle);
  if (!handle) MISUSE(E_INVALID_VALUE, "cuMemImportFromShareableHandle(NULL, ...)");
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    MISUSE(E_INVALID_VALUE, "cuMemImportFromShareableHandle: handle type %d", (int)type);
#ifdef _WIN32
  (void)os_handle;
  RETURN(E_NOT_SUPPORTED);
#else
  int fd = (int)(intptr_t)os_handle;
  size_t size = 0;
  int device = vmm_device_of(fd, &size);
  if (device < 0) RETURN(E_INVALID_VALUE);
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 0); /* the caller keeps fd: it may close it at once */
  if (own < 0) RETURN(E_OUT_OF_MEMORY);
  Phys *p = phys_new(own, size, device, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (!p) RETURN(E_OUT_OF_MEMORY);
  *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
  RETURN(E_SUCCESS);
#endif
}

/* ---- cuBLAS: the functions the module calls (src/cuda/cublas.h) ----
 * The module opens this library as its cuBLAS when DLPACK_LUA_CUBLAS names it, and gets the same
 * copy as the driver (same file). cublasCreate_v2 binds a handle to the current context's device
 * (none current: misuse); a handle is used with its device's context current, on a stream of its
 * device (cublasSetStream_v2: NULL, 1 and 2 name that device's default streams). cublasGemmEx
 * and cublasGemmStridedBatchedEx check their arguments as cuBLAS documents them (sizes, leading
 * dimensions, the type combinations the module may use: float32, float64, float16 and bfloat16
 * with float32 or float64 compute, never TF32), that every matrix of the batch lies in one live
 * device allocation of the handle's device, and that the result overlaps no factor nor another
 * result of the batch; then they enqueue the product like a launch, and it runs when its stream
 * runs: a plain loop in float32 (float64 for float64) on the shadow memory. Every misuse is counted
 * and logged as the driver's are. cublasDestroy_v2 runs its device's work first, as cuBLAS
 * synchronises. Handles are kept after their destruction, so that a later use is detected. */
enum { B_SUCCESS = 0, B_NOT_INITIALIZED = 1, B_INVALID_VALUE = 7, B_NOT_SUPPORTED = 15 };
enum { T_32F = 0, T_64F = 1, T_16F = 2, T_16BF = 14, C_32F = 68, C_64F = 70 };

struct cublasContext {
  struct cublasContext *next_all;
  int device, destroyed, math_mode;
  CUstream stream; /* as set: NULL, 1, 2 or a created stream */
};
static struct cublasContext *all_handles;
static unsigned long gemms; /* products enqueued */

typedef struct Gemm {
  int ta, tb, m, n, k, type, compute, count;
  int64_t lda, ldb, ldc, sa, sb, sc; /* elements */
  double alpha, beta;
  uintptr_t A, B, C;
} Gemm;

static size_t type_size(int type) { return type == T_64F ? 8 : type == T_32F ? 4 : 2; }

static float fake_from_half(uint16_t h) {
  int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  float v = e == 0 ? (float)m * 0x1p-24f : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 0x400), e - 25);
  return (h & 0x8000) ? -v : v;
}
static uint16_t fake_to_half(float f) { /* to nearest even, as src/core/convert.c */
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t a = x & 0x7FFFFFFF;
  if (a > 0x7F800000) return (uint16_t)(sign | 0x7E00);
  if (a >= 0x477FF000) return (uint16_t)(sign | 0x7C00);
  if (a < 0x38800000) return (uint16_t)(sign | (uint16_t)(fabsf(f) * 0x1p24f + 0x1p23f - 0x1p23f));
  return (uint16_t)(sign | (uint16_t)((a + 0xC8000FFFu + ((a >> 13) & 1)) >> 13));
}
static float fake_from_bfloat(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}
static uint16_t fake_to_bfloat(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)(((x >> 16) & 0x8000) | 0x7FC0);
  return (uint16_t)((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
}

static double gemm_load(int type, uintptr_t p) {
  unsigned char *b = bytes_at(p);
  uint16_t h;
  float f;
  double d;
  switch (type) {
  case T_64F: memcpy(&d, b, 8); return d;
  case T_32F: memcpy(&f, b, 4); return f;
  case T_16F: memcpy(&h, b, 2); return fake_from_half(h);
  default: memcpy(&h, b, 2); return fake_from_bfloat(h);
  }
}

static void gemm_store(int type, uintptr_t p, double v) {
  unsigned char *b = bytes_at(p);
  float f = (float)v;
  uint16_t h = type == T_16F ? fake_to_half(f) : fake_to_bfloat(f);
  if (type == T_64F) memcpy(b, &v, 8);
  else if (type == T_32F) memcpy(b, &f, 4);
  else memcpy(b, &h, 2);
}

/* The element (i, j) of op(X), X column-major with leading dimension ld. */
static uintptr_t op_at(uintptr_t base, int trans, int64_t ld, int64_t i, int64_t j, size_t es) {
  return base + (uintptr_t)((trans ? j + i * ld : i + j * ld) * (int64_t)es);
}

static void run_gemm(const Gemm *g) {
  size_t es = type_size(g->type);
  for (int b = 0; b < g->count; b++) {
    uintptr_t A = g->A + (uintptr_t)(g->sa * b * (int64_t)es), B = g->B + (uintptr_t)(g->sb * b * (int64_t)es);
    uintptr_t C = g->C + (uintptr_t)(g->sc * b * (int64_t)es);
    for (int64_t j = 0; j < g->n; j++)
      for (int64_t i = 0; i < g->m; i++) {
        double dacc = 0;
        float facc = 0;
        for (int64_t p = 0; p < g->k; p++) {
          double x = gemm_load(g->type, op_at(A, g->ta, g->lda, i, p, es));
          double y = gemm_load(g->type, op_at(B, g->tb, g->ldb, p, j, es));
          if (g->compute == C_64F) dacc += x * y;
          else facc += (float)x * (float)y;
        }
        uintptr_t c = C + (uintptr_t)((i + j * g->ldc) * (int64_t)es);
        double v = g->compute == C_64F ? g->alpha * dacc : (double)((float)g->alpha * facc);
        if (g->beta != 0) v += g->beta * gemm_load(g->type, c);
        gemm_store(g->type, c, v);
      }
  }
}

/* The bytes one matrix of the batch spans from its base: rows x cols, column-major with ld. */
static size_t matrix_span(int64_t rows, int64_t cols, int64_t ld, size_t es) {
  return rows == 0 || cols == 0 ? 0 : (size_t)((cols - 1) * ld + rows) * es;
}

/* Matrix x (0: A, 1: B, 2: C) of batch b: its base and span. */
static void gemm_matrix(const Gemm *g, int x, int b, uintptr_t *base, size_t *span) {
  size_t es = type_size(g->type);
  int64_t rows, cols;
  if (x == 0) {
    rows = g->ta ? g->k : g->m, cols = g->ta ? g->m : g->k;
    *base = g->A + (uintptr_t)(g->sa * b * (int64_t)es);
    *span = g->n ? matrix_span(rows, cols, g->lda, es) : 0;
  } else if (x == 1) {
    rows = g->tb ? g->n : g->k, cols = g->tb ? g->k : g->n;
    *base = g->B + (uintptr_t)(g->sb * b * (int64_t)es);
    *span = g->m ? matrix_span(rows, cols, g->ldb, es) : 0;
  } else {
    *base = g->C + (uintptr_t)(g->sc * b * (int64_t)es);
    *span = matrix_span(g->m, g->n, g->ldc, es);
  }
}

static int gemm_touches(const Gemm *g, uintptr_t lo, uintptr_t hi) {
  for (int b = 0; b < g->count; b++)
    for (int x = 0; x < 3; x++) {
      uintptr_t base;
      size_t span;
      gemm_matrix(g, x, b, &base, &span);
      if (ranges_meet(base, span, lo, hi)) return 1;
    }
  return 0;
}

static struct cublasContext *find_handle(cublasHandle_t h, int f) {
  for (struct cublasContext *c = all_handles; c; c = c->next_all)
    if (c == h) {
      if (!c->destroyed) return c;
      misuse("%s on a destroyed cuBLAS handle %p", fnames[f], (void *)h);
      return NULL;
    }
  misuse("%s on an unknown cuBLAS handle %p", fnames[f], (void *)h);
  return NULL;
}

#define RESOLVE_HANDLE(var, h, f)                            \
  struct cublasContext *var = find_handle(h, F_##f);          \
  if (!var) RETURN(B_NOT_INITIALIZED)

EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
  ENTER(cublasCreate_v2);
  if (!handle) MISUSE(B_INVALID_VALUE, "cublasCreate_v2(NULL)");
  if (cur < 0) MISUSE(B_NOT_INITIALIZED, "cublasCreate_v2 without a current context (a handle is bound to one)");
  struct cublasContext *c = xmalloc(sizeof *c);
  memset(c, 0, sizeof *c);
  c->device = cur;
  c->next_all = all_handles;
  all_handles = c;
  *handle = c;
  RETURN(B_SUCCESS);
}

EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  ENTER(cublasDestroy_v2);
  RESOLVE_HANDLE(c, handle, cublasDestroy_v2);
  run_device(c->device); /* cuBLAS synchronises the device */
  c->destroyed = 1;
  RETURN(B_SUCCESS);
}

EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  ENTER(cublasSetStream_v2);
  RESOLVE_HANDLE(c, handle, cublasSetStream_v2);
  CUstream h = (CUstream)stream;
  if (h != NULL && h != CU_STREAM_LEGACY && h != CU_STREAM_PER_THREAD) {
    struct CUstream_st *s = find_created((uintptr_t)h);
    if (!s || s->destroyed) MISUSE(B_INVALID_VALUE, "cublasSetStream_v2 with an unknown or destroyed stream %p", (void *)h);
    if (s->device != c->device)
      MISUSE(B_INVALID_VALUE, "cublasSetStream_v2: a stream of device %d for a handle of device %d", s->device,
             c->device);
  }
  c->stream = h;
  RETURN(B_SUCCESS);
}

EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  ENTER(cublasSetMathMode);
  RESOLVE_HANDLE(c, handle, cublasSetMathMode);
  if ((mode & ~0x10) < 0 || (mode & ~0x10) > 3) MISUSE(B_INVALID_VALUE, "cublasSetMathMode(%d): no such mode", mode);
  c->math_mode = mode;
  RETURN(B_SUCCESS);
}

/* Both products, locked: checks, then the item on the handle's stream. */
static cublasStatus_t enqueue_gemm(int f, cublasHandle_t handle, Gemm *g, const void *alpha, const void *beta,
                                   int atype, int btype) {
  struct cublasContext *c = find_handle(handle, f);
  if (!c) RETURN(B_NOT_INITIALIZED);
  if (cur != c->device)
    MISUSE(B_NOT_INITIALIZED, "%s on a handle of device %d with %s current", fnames[f], c->device,
           cur < 0 ? "no context" : "another device's context");
  CUresult rc;
  struct CUstream_st *s = resolve(c->stream, f, 1, &rc);
  if (!s) RETURN(B_INVALID_VALUE);
  if (s->device != c->device)
    MISUSE(B_INVALID_VALUE, "%s: the handle's stream is device %d's, the handle device %d's", fnames[f], s->device,
           c->device);
  if ((c->math_mode & 0xF) == 3)
    MISUSE(B_INVALID_VALUE, "%s with CUBLAS_TF32_TENSOR_OP_MATH: the module keeps TF32 off", fnames[f]);
  if (atype != g->type || btype != g->type ||
      !((g->compute == C_64F && g->type == T_64F) ||
        (g->compute == C_32F && (g->type == T_32F || g->type == T_16F || g->type == T_16BF))))
    MISUSE(B_NOT_SUPPORTED, "%s: types A %d, B %d, C %d with compute type %d (not one the module uses)", fnames[f],
           atype, btype, g->type, g->compute);
  if ((g->ta != 0 && g->ta != 1) || (g->tb != 0 && g->tb != 1) || g->m < 0 || g->n < 0 || g->k < 0 || g->count < 1)
    MISUSE(B_INVALID_VALUE, "%s: op %d, %d, sizes %d x %d x %d, batch %d", fnames[f], g->ta, g->tb, g->m, g->n, g->k,
           g->count);
  int64_t need_a = g->ta ? g->k : g->m, need_b = g->tb ? g->n : g->k;
  if (g->lda < (need_a > 1 ? need_a : 1) || g->ldb < (need_b > 1 ? need_b : 1) || g->ldc < (g->m > 1 ? g->m : 1))
    MISUSE(B_INVALID_VALUE, "%s: leading dimensions %lld, %lld, %lld for op %d, %d and sizes %d x %d x %d", fnames[f],
           (long long)g->lda, (long long)g->ldb, (long long)g->ldc, g->ta, g->tb, g->m, g->n, g->k);
  if (!alpha || !beta) MISUSE(B_INVALID_VALUE, "%s without alpha or beta", fnames[f]);
  if (g->compute == C_64F) {
    memcpy(&g->alpha, alpha, 8);
    memcpy(&g->beta, beta, 8);
  } else {
    float a32, b32;
    memcpy(&a32, alpha, 4);
    memcpy(&b32, beta, 4);
    g->alpha = a32, g->beta = b32;
  }
  static const char *const names[] = {"A", "B", "C"};
  for (int b = 0; b < g->count; b++)
    for (int x = 0; x < 3; x++) {
      uintptr_t base, obase;
      size_t span, ospan;
      Alloc *a;
      gemm_matrix(g, x, b, &base, &span);
      if (!span) continue;
      int in = lookup(base, span, &a);
      if (in != 1 || a->kind != K_DEVICE || a->device != c->device || (a->phys && a->access != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
        MISUSE(B_INVALID_VALUE, "%s: %s of product %d (%zu bytes at %p) is %s", fnames[f], names[x], b, span,
               (void *)base,
               in == 0 ? "not in any live allocation" : in < 0 ? "past the end of its allocation"
               : a->kind != K_DEVICE ? "not device memory" : a->device != c->device ? "memory of another device"
                                                           : "a mapping without access");
      if (x < 2) continue;
      for (int o = 0; o < 2; o++) {
        gemm_matrix(g, o, b, &obase, &ospan);
        if (ranges_meet(base, span, obase, obase + ospan))
          MISUSE(B_INVALID_VALUE, "%s: C of product %d overlaps its %s", fnames[f], b, names[o]);
      }
      if (b > 0) {
        gemm_matrix(g, 2, b - 1, &obase, &ospan);
        if (ranges_meet(base, span, obase, obase + ospan))
          MISUSE(B_INVALID_VALUE, "%s: the results of products %d and %d overlap", fnames[f], b - 1, b);
      }
    }
  Item *it = new_item(OP_GEMM);
  it->bytes = xmalloc(sizeof *g);
  memcpy(it->bytes, g, sizeof *g);
  it->device = cur;
  enqueue(s, it);
  gemms++;
  RETURN(B_SUCCESS);
}

EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                   int n, int k, const void *alpha, const void *A, cudaDataType Atype, int lda,
                                   const void *B, cudaDataType Btype, int ldb, const void *beta, void *C,
                                   cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                   cublasGemmAlgo_t algo) {
  ENTER(cublasGemmEx);
  (void)algo;
  Gemm g = {transa, transb, m, n, k, Ctype, computeType, 1, lda, ldb, ldc, 0, 0, 0, 0, 0,
            (uintptr_t)A, (uintptr_t)B, (uintptr_t)C};
  return enqueue_gemm(F_cublasGemmEx, handle, &g, alpha, beta, Atype, Btype);
}

EXPORT cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                                 cublasOperation_t transb, int m, int n, int k, const void *alpha,
                                                 const void *A, cudaDataType Atype, int lda, long long int strideA,
                                                 const void *B, cudaDataType Btype, int ldb, long long int strideB,
                                                 const void *beta, void *C, cudaDataType Ctype, int ldc,
                                                 long long int strideC, int batchCount,
                                                 cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  ENTER(cublasGemmStridedBatchedEx);
  (void)algo;
  Gemm g = {transa, transb, m, n, k, Ctype, computeType, batchCount, lda, ldb, ldc, strideA, strideB, strideC,
            0, 0, (uintptr_t)A, (uintptr_t)B, (uintptr_t)C};
  return enqueue_gemm(F_cublasGemmStridedBatchedEx, handle, &g, alpha, beta, Atype, Btype);
}

/* ---- the Lua module ---- */
static void lock(void) { pthread_mutex_lock(&mu); }
static void unlock(void) { pthread_mutex_unlock(&mu); }

/* A pointer or handle argument: light userdata, integer, or a value with a `handle` field. */
static uintptr_t arg_ptr(lua_State *L, int i) {
  switch (lua_type(L, i)) {
  case LUA_TLIGHTUSERDATA:
    return (uintptr_t)lua_touserdata(L, i);
  case LUA_TNUMBER:
    return (uintptr_t)luaL_checkinteger(L, i);
  case LUA_TTABLE:
  case LUA_TUSERDATA: {
    lua_getfield(L, i, "handle");
    if (!lua_isinteger(L, -1)) luaL_argerror(L, i, "no integer `handle` field");
    uintptr_t h = (uintptr_t)lua_tointeger(L, -1);
    lua_pop(L, 1);
    return h;
  }
  default:
    luaL_typeerror(L, i, "pointer (light userdata or integer)");
    return 0;
  }
}

static int opt_device(lua_State *L, int i) {
  lua_Integer d = luaL_optinteger(L, i, cur >= 0 ? cur : 0);
  luaL_argcheck(L, d >= 0 && d < (ndev ? ndev : 1), i, "no such device");
  return (int)d;
}

/* the stream handle h names (must be called locked); NULL if unknown */
static struct CUstream_st *lua_stream(uintptr_t h, int device) {
  if (!initialized) return NULL;
  if (h == 0 || h == 1) return &legacy[device];
  if (h == 2) return per_thread(device);
  return find_created(h);
}

static struct CUstream_st *check_stream(lua_State *L, int i, int device) {
  uintptr_t h = arg_ptr(L, i);
  lock();
  struct CUstream_st *s = lua_stream(h, device);
  unlock();
  if (!s) luaL_error(L, "fakecuda: unknown stream %p", (void *)h);
  return s;
}

static void set_int(lua_State *L, const char *k, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, k);
}

static void set_bool(lua_State *L, const char *k, int v) {
  lua_pushboolean(L, v);
  lua_setfield(L, -2, k);
}

static int l_live(lua_State *L) {
  lua_Integer n[3] = {0, 0, 0}, bytes = 0, streams = 0, events = 0;
  lock();
  for (size_t i = 0; i < nallocs; i++) {
    n[allocs[i].kind]++;
    bytes += (lua_Integer)allocs[i].size;
  }
  for (struct CUstream_st *s = all_streams; s; s = s->next_all) streams += s->kind == S_CREATED && !s->destroyed;
  for (struct CUevent_st *e = all_events; e; e = e->next_all) events += !e->destroyed;
  lua_Integer handles = 0, reserved = 0, mapped = 0, pooled = 0, freeing = 0;
  for (Phys *p = physes; p; p = p->next) handles++;
  for (Reservation *r = reservations; r; r = r->next) reserved++;
  for (size_t i = 0; i < nallocs; i++) {
    mapped += allocs[i].phys != NULL;
    pooled += allocs[i].async;
    freeing += allocs[i].freeing;
  }
  lua_Integer nmodules = 0, nlaunches = (lua_Integer)launches, ngemms = (lua_Integer)gemms;
  lua_Integer grid = last_grid, block = last_block;
  for (struct CUmod_st *m = modules; m; m = m->next) nmodules++;
  unlock();
  lua_createtable(L, 0, 16);
  set_int(L, "async", pooled);
  set_int(L, "freeing", freeing);
  set_int(L, "handles", handles);
  set_int(L, "reservations", reserved);
  set_int(L, "mapped", mapped);
  set_int(L, "device", n[K_DEVICE]);
  set_int(L, "host", n[K_HOST]);
  set_int(L, "managed", n[K_MANAGED]);
  set_int(L, "total", n[0] + n[1] + n[2]);
  set_int(L, "bytes", bytes);
  set_int(L, "streams", streams);
  set_int(L, "events", events);
  set_int(L, "launches", nlaunches);
  set_int(L, "gemms", ngemms);
  set_int(L, "modules", nmodules);
  set_int(L, "last_grid", grid);
  set_int(L, "last_block", block);
  return 1;
}

static int l_allocation(lua_State *L) {
  uintptr_t p = arg_ptr(L, 1);
  lock();
  Alloc *a;
  int in = lookup(p, 0, &a);
  Alloc copy = in && a ? *a : (Alloc){0};
  unlock();
  if (!in || !a) {
    lua_pushnil(L);
    return 1;
  }
  lua_createtable(L, 0, 8);
  lua_pushstring(L, knames[copy.kind]);
  lua_setfield(L, -2, "kind");
  set_bool(L, "async", copy.async);
  set_bool(L, "pending", copy.pending);
  set_bool(L, "freeing", copy.freeing);
  set_int(L, "device", copy.device);
  set_int(L, "base", (lua_Integer)copy.base);
  set_int(L, "size", (lua_Integer)copy.size);
  set_int(L, "offset", (lua_Integer)(p - copy.base));
  return 1;
}

static int l_errors(lua_State *L) {
  lock();
  lua_Integer n = (lua_Integer)errors;
  unlock();
  lua_pushinteger(L, n);
  return 1;
}

static int l_error_log(lua_State *L) {
  lock();
  unsigned long first = nlog > LOGN ? nlog - LOGN : 0;
  lua_createtable(L, (int)(nlog - first), 0);
  for (unsigned long i = first; i < nlog; i++) {
    lua_pushstring(L, errlog[i % LOGN]);
    lua_rawseti(L, -2, (lua_Integer)(i - first + 1));
  }
  unlock();
  return 1;
}

static int l_pending(lua_State *L) {
  struct CUstream_st *s = check_stream(L, 1, opt_device(L, 2));
  lock();
  lua_Integer n = (lua_Integer)s->count;
  unlock();
  lua_pushinteger(L, n);
  return 1;
}

static int l_run(lua_State *L) {
  struct CUstream_st *s = check_stream(L, 1, opt_device(L, 2));
  lock();
  size_t n = run_all(s);
  unlock();
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

static int l_sync_all(lua_State *L) {
  lock();
  size_t n = run_device(-1);
  unlock();
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

static int l_write(lua_State *L) {
  uintptr_t p = arg_ptr(L, 2);
  size_t n;
  const char *bytes = luaL_checklstring(L, 3, &n);
  lock();
  Alloc *a;
  int in = lookup(p, n, &a);
  int adev = in > 0 ? a->device : 0;
  unlock();
  if (in <= 0) return luaL_error(L, "fakecuda.write: %d bytes at %p are not inside one CUDA allocation", (int)n, (void *)p);
  struct CUstream_st *s = check_stream(L, 1, lua_isnoneornil(L, 4) ? adev : opt_device(L, 4));
  if (s->destroyed) return luaL_error(L, "fakecuda.write: the stream is destroyed");
  lock();
  lookup(p, n, &a);
  if (a->kind == K_DEVICE && s->device != a->device) {
    unlock();
    return luaL_error(L, "fakecuda.write: a kernel on device %d cannot write memory of device %d", s->device, adev);
  }
  if (n && being_freed(p)) { /* not queued: the fake would write freed memory */
    misuse("fakecuda.write to %p after its cuMemFreeAsync", (void *)p);
    unlock();
    return 0;
  }
  Item *it = new_item(OP_WRITE);
  it->dst = p;
  it->n = n;
  it->bytes = xmalloc(n);
  memcpy(it->bytes, bytes, n);
  enqueue(s, it);
  unlock();
  return 0;
}

/* fake.copy(stream, dst, src, n [, device]): a consumer's work on a stream, queued as
 * cuMemcpyAsync would queue it; either side may be memory the fake does not track. */
static int l_copy(lua_State *L) {
  uintptr_t dst = arg_ptr(L, 2), src = arg_ptr(L, 3);
  lua_Integer n = luaL_checkinteger(L, 4);
  luaL_argcheck(L, n >= 0, 4, "negative size");
  struct CUstream_st *s = check_stream(L, 1, opt_device(L, 5));
  Alloc *a;
  lock();
  int bad = s->destroyed || lookup(dst, (size_t)n, &a) < 0 || lookup(src, (size_t)n, &a) < 0 ||
            ranges_meet(dst, (size_t)n, src, src + (size_t)n);
  if (!bad && n && (being_freed(dst) || being_freed(src))) { /* not queued: it would use freed memory */
    misuse("fakecuda.copy: %d bytes from %p to %p use a block after its cuMemFreeAsync", (int)n, (void *)src, (void *)dst);
  } else if (!bad) {
    Item *it = new_item(OP_COPY);
    it->dst = dst;
    it->src = src;
    it->n = (size_t)n;
    enqueue(s, it);
  }
  unlock();
  if (bad) return luaL_error(L, "fakecuda.copy: a destroyed stream, overlapping areas or a copy beyond an allocation");
  return 0;
}

static int l_read(lua_State *L) {
  uintptr_t p = arg_ptr(L, 1);
  lua_Integer n = luaL_checkinteger(L, 2);
  luaL_argcheck(L, n >= 0, 2, "negative size");
  luaL_Buffer b;
  char *out = luaL_buffinitsize(L, &b, (size_t)n); /* before locking: it may raise */
  lock();
  Alloc *a;
  int in = lookup(p, (size_t)n, &a);
  if (in > 0) memcpy(out, bytes_at(p), (size_t)n);
  unlock();
  if (in <= 0)
    return luaL_error(L, "fakecuda.read: %d bytes at %p are not inside one CUDA allocation", (int)n, (void *)p);
  luaL_pushresultsize(&b, (size_t)n);
  return 1;
}

static int l_current_device(lua_State *L) {
  if (cur < 0)
    lua_pushnil(L);
  else
    lua_pushinteger(L, cur);
  return 1;
}

static int l_set_current(lua_State *L) {
  if (lua_isnoneornil(L, 1)) {
    cur = -1;
    return 0;
  }
  lua_Integer d = luaL_checkinteger(L, 1);
  lock();
  int ok = initialized && d >= 0 && d < ndev;
  if (ok) ctxs[d].retained++;
  unlock();
  luaL_argcheck(L, ok, 1, "no such device (or cuInit not called)");
  cur = (int)d;
  return 0;
}

static int l_device_count(lua_State *L) {
  lock();
  lua_pushinteger(L, ndev);
  unlock();
  return 1;
}

/* Whether the devices answer MEMORY_POOLS_SUPPORTED (FAKECUDA_POOLS, and a build with the
 * stream-ordered allocator), and whether this build exports its functions at all. */
static int l_pools(lua_State *L) {
  lock();
  lua_pushboolean(L, pools_on);
  unlock();
#ifdef FAKECUDA_NO_ASYNC
  lua_pushboolean(L, 0);
#else
  lua_pushboolean(L, 1);
#endif
  return 2;
}

static int l_initialized(lua_State *L) {
  lock();
  lua_pushboolean(L, initialized);
  unlock();
  return 1;
}

static int fid(lua_State *L, int i) {
  const char *name = luaL_checkstring(L, i);
  for (int f = 0; f < F_COUNT; f++)
    if (strcmp(fnames[f], name) == 0) return f;
  return luaL_argerror(L, i, lua_pushfstring(L, "no driver function named '%s'", name));
}

static int l_calls(lua_State *L) {
  int f = fid(L, 1);
  lock();
  lua_Integer n = (lua_Integer)calls[f];
  unlock();
  lua_pushinteger(L, n);
  return 1;
}

static int l_fail_next(lua_State *L) {
  int f = fid(L, 1);
  int code = (int)luaL_checkinteger(L, 2);
  lua_Integer times = luaL_optinteger(L, 3, 1);
  lua_Integer after = luaL_optinteger(L, 4, 0);
  luaL_argcheck(L, times >= 0, 3, "negative count");
  luaL_argcheck(L, after >= 0, 4, "negative count");
  lock();
  fail_code[f] = code;
  fail_times[f] = (unsigned)times;
  fail_after[f] = (unsigned)after;
  unlock();
  return 0;
}

static int l_stream_info(lua_State *L) {
  uintptr_t h = arg_ptr(L, 1);
  int device = opt_device(L, 2);
  lock();
  struct CUstream_st *s = lua_stream(h, device);
  struct CUstream_st copy = s ? *s : (struct CUstream_st){0};
  unlock();
  if (!s) {
    lua_pushnil(L);
    return 1;
  }
  lua_createtable(L, 0, 6);
  lua_pushstring(L, snames[copy.kind]);
  lua_setfield(L, -2, "kind");
  set_int(L, "device", copy.device);
  set_int(L, "priority", copy.priority);
  set_int(L, "flags", copy.flags);
  set_bool(L, "destroyed", copy.destroyed);
  set_int(L, "pending", (lua_Integer)copy.count);
  return 1;
}

/* fake.cublas_handles() -> {{device =, math_mode =, destroyed =, stream =}, ...}, newest first */
static int l_cublas_handles(lua_State *L) {
  lua_newtable(L);
  lock();
  int n = 0;
  for (struct cublasContext *c = all_handles; c; c = c->next_all) {
    lua_createtable(L, 0, 4);
    set_int(L, "device", c->device);
    set_int(L, "math_mode", c->math_mode);
    set_bool(L, "destroyed", c->destroyed);
    set_int(L, "stream", (lua_Integer)(uintptr_t)c->stream);
    lua_rawseti(L, -2, ++n);
  }
  unlock();
  return 1;
}

static int l_pointer_device(lua_State *L) {
  CUdeviceptr p = (CUdeviceptr)arg_ptr(L, 1);
  int ordinal = -1;
  CUresult rc = cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
  if (rc != E_SUCCESS) {
    lua_pushnil(L);
    lua_pushinteger(L, rc);
    return 2;
  }
  lua_pushinteger(L, ordinal);
  return 1;
}

EXPORT int luaopen_fakecuda(lua_State *L) {
  static const luaL_Reg functions[] = {
    {"live", l_live},
    {"allocation", l_allocation},
    {"errors", l_errors},
    {"error_log", l_error_log},
    {"pending", l_pending},
    {"run", l_run},
    {"sync_all", l_sync_all},
    {"write", l_write},
    {"copy", l_copy},
    {"read", l_read},
    {"current_device", l_current_device},
    {"set_current", l_set_current},
    {"device_count", l_device_count},
    {"initialized", l_initialized},
    {"pools", l_pools},
    {"calls", l_calls},
    {"fail_next", l_fail_next},
    {"stream_info", l_stream_info},
    {"pointer_device", l_pointer_device},
    {"cublas_handles", l_cublas_handles},
    {NULL, NULL},
  };
  luaL_newlib(L, functions);
  return 1;
}
