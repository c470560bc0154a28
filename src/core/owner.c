/* Owners: the reference-counted holders of tensor memory.
 *
 * An owner lives in C, not in any lua_State: tensors, views and exported
 * managed tensors each hold one reference, so memory exported to another
 * library outlives the state that made it, and the last release (which may
 * happen on any thread) frees the block or calls the producer's deleter.
 * An owner also records the addresses its memory spans: no tensor on it may
 * reach outside them (dlp_tensor_seal). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* DLPack asks for 256-byte aligned data (the alignment CUDA uses). */
#define DLP_ALIGNMENT 256
/* Zeroed blocks this large come straight from the kernel, whose fresh pages are already zero
 * (and cost nothing until touched). Everything else comes from the C allocator, which reuses
 * freed blocks: a loop making and dropping tensors then pays no page faults. */
#define MAP_ZEROED_THRESHOLD ((size_t)32 << 20)

/* Blocks this large are aligned to 2 MiB and offered to the kernel for transparent huge pages
 * (as NumPy does from 4 MiB): a loop streaming through them then misses the TLB 512 times less
 * often, which is most of the difference between 3 and 5 GB/s on a virtual machine. */
#define HUGE_PAGE_THRESHOLD ((size_t)4 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

static void advise_huge_pages(void *p, size_t nbytes) {
  if (nbytes >= HUGE_PAGE_THRESHOLD) dlp_pages_advise_huge(p, nbytes);
}

/* ---- a small cache of freed blocks ----
 * Lua frees a tensor's memory only when the collector finds it, long after NumPy would have,
 * so an expression like (x / 255 - mean) / std on camera frames would otherwise get fresh pages
 * for every temporary and pay a page fault for every 4 KiB it writes (on a virtual machine, the
 * larger part of the time). Freed blocks from 256 KiB to 32 MiB wait here, up to 8 of them and
 * 64 MiB in all, for an allocation of the same size; the oldest is freed first. Builds with a
 * sanitizer, and DLPACK_LUA_BLOCK_CACHE=0 (read once, for valgrind), free at once, so that a
 * use after free stays visible to them. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CACHE_BUILD 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define CACHE_BUILD 0
#endif
#endif
#ifndef CACHE_BUILD
#define CACHE_BUILD 1
#endif
#define CACHE_SLOTS 8
#define CACHE_MIN ((size_t)256 << 10)
#define CACHE_MAX ((size_t)32 << 20)
#define CACHE_TOTAL ((size_t)64 << 20)

static struct {
  void *block;
  size_t nbytes;
  unsigned long age;
} cache[CACHE_SLOTS];
static size_t cache_bytes;
static unsigned long cache_clock;
static dlp_mutex cache_lock = DLP_MUTEX_INIT;
static dlp_once_flag cache_once = DLP_ONCE_INIT;
static int cache_enabled;

static void cache_init(void) {
  const char *env = getenv("DLPACK_LUA_BLOCK_CACHE");
  cache_enabled = CACHE_BUILD && !(env && strcmp(env, "0") == 0);
}

static void *cache_take(size_t nbytes) {
  void *p = NULL;
  dlp_call_once(&cache_once, cache_init);
  if (!cache_enabled || nbytes < CACHE_MIN || nbytes > CACHE_MAX) return NULL;
  dlp_mutex_lock(&cache_lock);
  for (int i = 0; i < CACHE_SLOTS && !p; i++)
    if (cache[i].block && cache[i].nbytes == nbytes) {
      p = cache[i].block;
      cache[i].block = NULL;
      cache_bytes -= nbytes;
    }
  dlp_mutex_unlock(&cache_lock);
  return p;
}

/* Keep p for reuse; 0 when the caller frees it. */
static int cache_put(void *p, size_t nbytes) {
  void *evicted[CACHE_SLOTS];
  int n = 0, kept = 0;
  dlp_call_once(&cache_once, cache_init);
  if (!cache_enabled || nbytes < CACHE_MIN || nbytes > CACHE_MAX) return 0;
  dlp_mutex_lock(&cache_lock);
  for (;;) { /* make room: the oldest blocks go until it fits and a slot is free */
    int free_slot = -1, oldest = -1;
    for (int i = 0; i < CACHE_SLOTS; i++) {
      if (!cache[i].block) free_slot = i;
      else if (oldest < 0 || cache[i].age < cache[oldest].age) oldest = i;
    }
    if (free_slot >= 0 && cache_bytes + nbytes <= CACHE_TOTAL) {
      cache[free_slot].block = p;
      cache[free_slot].nbytes = nbytes;
      cache[free_slot].age = ++cache_clock;
      cache_bytes += nbytes;
      kept = 1;
      break;
    }
    if (oldest < 0) break;
    evicted[n++] = cache[oldest].block;
    cache_bytes -= cache[oldest].nbytes;
    cache[oldest].block = NULL;
  }
  dlp_mutex_unlock(&cache_lock);
  for (int i = 0; i < n; i++) dlp_aligned_free(evicted[i]);
  return kept;
}

static void *allocate(size_t nbytes, int zeroed, int *mapped) {
  void *p;
  *mapped = zeroed && nbytes >= MAP_ZEROED_THRESHOLD;
  if (*mapped) {
    if ((p = dlp_pages_map(nbytes)) == NULL) return NULL;
    advise_huge_pages(p, nbytes);
    return p;
  }
  if ((p = cache_take(nbytes)) == NULL) {
    if ((p = dlp_aligned_alloc(nbytes >= HUGE_PAGE_THRESHOLD ? HUGE_PAGE : DLP_ALIGNMENT, nbytes)) == NULL) return NULL;
    advise_huge_pages(p, nbytes);
  }
  if (zeroed) memset(p, 0, nbytes);
  return p;
}

static void deallocate(void *p, size_t nbytes, int mapped) {
  if (mapped) dlp_pages_unmap(p, nbytes);
  else if (!cache_put(p, nbytes)) dlp_aligned_free(p);
}

static void init_owner(dlp_Owner *o, void *memory, DLDevice device, void *managed, int versioned, size_t nbytes,
                       uintptr_t lo, uintptr_t hi) {
  atomic_init(&o->refs, 1);
  o->memory = memory;
  o->device = device;
  o->managed = managed;
  o->versioned = versioned;
  o->nbytes = nbytes;
  o->mapped = 0;
  o->lua_owned = 0;
  o->lo = lo;
  o->hi = hi;
  atomic_init(&o->stream, NULL);
  o->fd = -1;
  o->fd_offset = 0;
  o->inline_memory = 0;
}

static dlp_Owner *new_owner(void *memory, DLDevice device, void *managed, int versioned, size_t nbytes,
                            uintptr_t lo, uintptr_t hi) {
  dlp_Owner *o = malloc(sizeof *o);
  if (o) init_owner(o, memory, device, managed, versioned, nbytes, lo, hi);
  return o;
}

/* Blocks up to this size lie in their owner's own allocation: one malloc (served from the
 * allocator's per-thread cache) instead of an aligned allocation and a malloc, which were most of
 * the cost of making a small tensor. */
#define INLINE_BLOCK 256

/* ---- a free list of small blocks ----
 * The collector frees tensors in bursts: a generational collection of a 10 MiB Lua heap frees
 * about 14,000 small tensors at once. The C allocator keeps only a few freed blocks of a size at
 * hand and sorts and merges the rest, then splits them again for the next tensors: that was half
 * the time of a 3-element add. Owners with up to SMALL_BLOCK bytes of data all have one size
 * (415 bytes) and come back here, up to SMALL_KEPT of them (13 MiB); DLPACK_LUA_BLOCK_CACHE=0
 * and sanitizer builds, as for the block cache, free them at once. */
#define SMALL_BLOCK 64
#define SMALL_KEPT 32768
#define SMALL_SIZE (sizeof(dlp_Owner) + DLP_ALIGNMENT - 1 + SMALL_BLOCK)

static struct {
  void *head; /* each free block's first word points to the next */
  int count;
} small_blocks;
static dlp_mutex small_lock = DLP_MUTEX_INIT;

static char *small_take(void) {
  char *p = NULL;
  dlp_call_once(&cache_once, cache_init);
  if (!cache_enabled) return malloc(SMALL_SIZE);
  dlp_mutex_lock(&small_lock);
  if ((p = small_blocks.head) != NULL) {
    memcpy(&small_blocks.head, p, sizeof(void *));
    small_blocks.count--;
  }
  dlp_mutex_unlock(&small_lock);
  return p ? p : malloc(SMALL_SIZE);
}

static void small_put(void *p) {
  int kept = 0;
  if (cache_enabled) { /* set: p came from small_take */
    dlp_mutex_lock(&small_lock);
    if (small_blocks.count < SMALL_KEPT) {
      memcpy(p, &small_blocks.head, sizeof(void *));
      small_blocks.head = p;
      small_blocks.count++;
      kept = 1;
    }
    dlp_mutex_unlock(&small_lock);
  }
  if (!kept) free(p);
}

static dlp_Owner *new_owner_inline(size_t nbytes, int zeroed) {
  DLDevice cpu = {kDLCPU, 0};
  char *base = nbytes <= SMALL_BLOCK ? small_take() : malloc(sizeof(dlp_Owner) + DLP_ALIGNMENT - 1 + nbytes);
  if (!base) return NULL;
  uintptr_t first = (uintptr_t)(base + sizeof(dlp_Owner));
  char *memory = base + ((first + DLP_ALIGNMENT - 1) & ~(uintptr_t)(DLP_ALIGNMENT - 1)) - (uintptr_t)base;
  if (zeroed) memset(memory, 0, nbytes);
  dlp_Owner *o = (dlp_Owner *)(void *)base;
  init_owner(o, memory, cpu, NULL, 0, nbytes, (uintptr_t)memory, (uintptr_t)memory + nbytes);
  o->inline_memory = 1;
  return o;
}

dlp_Owner *dlp_owner_new_memory(size_t nbytes, int zeroed) {
  DLDevice cpu = {kDLCPU, 0};
  void *memory = NULL;
  int mapped = 0;
  if (nbytes > 0 && nbytes <= INLINE_BLOCK) return new_owner_inline(nbytes, zeroed);
  if (nbytes > 0 && !(memory = allocate(nbytes, zeroed, &mapped))) return NULL;
  dlp_Owner *o = dlp_owner_new_block(memory, cpu, nbytes);
  if (!o && memory) deallocate(memory, nbytes, mapped);
  if (o) o->mapped = (unsigned char)mapped;
  return o;
}

dlp_Owner *dlp_owner_new_block(void *memory, DLDevice device, size_t nbytes) {
  return new_owner(memory, device, NULL, 0, nbytes, (uintptr_t)memory, (uintptr_t)memory + nbytes);
}

dlp_Owner *dlp_owner_new_managed(void *managed, int versioned, size_t nbytes, uintptr_t lo, uintptr_t hi) {
  DLDevice none = {kDLCPU, 0};
  return new_owner(NULL, none, managed, versioned, nbytes, lo, hi);
}

void dlp_owner_retain(dlp_Owner *o) {
  atomic_fetch_add_explicit(&o->refs, 1, memory_order_relaxed);
}

void dlp_managed_delete(void *managed, int versioned) {
  if (versioned) {
    DLManagedTensorVersioned *m = managed;
    if (m->deleter) m->deleter(m);
  } else {
    DLManagedTensor *m = managed;
    if (m->deleter) m->deleter(m);
  }
}

void dlp_owner_release(dlp_Owner *o) {
  if (atomic_fetch_sub_explicit(&o->refs, 1, memory_order_acq_rel) != 1) return;
  if (o->managed) dlp_managed_delete(o->managed, o->versioned);
  else if (o->fd >= 0) dlp_ipc_unmap(o);
  else if (o->memory && o->device.device_type == kDLCPU) {
    if (!o->inline_memory) deallocate(o->memory, o->nbytes, o->mapped); /* else it goes with o */
  }
  else if (o->memory) dlp_cuda_free_after(o->device, o->memory, atomic_load(&o->stream)); /* in stream order */
  dlp_CudaStream *s = atomic_load(&o->stream);
  if (s) dlp_cuda_stream_release(s);
  if (o->inline_memory && o->nbytes <= SMALL_BLOCK) small_put(o);
  else free(o);
  dlp_cuda_reap(); /* memory held for GPU work that completed since goes too */
}
