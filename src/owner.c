/* Owners: the reference-counted holders of tensor memory.
 *
 * An owner lives in C, not in any lua_State: tensors, views and exported
 * managed tensors each hold one reference, so memory exported to another
 * library outlives the state that made it, and the last release (which may
 * happen on any thread) frees the block or calls the producer's deleter.
 * An owner also records the addresses its memory spans: no tensor on it may
 * reach outside them (dlp_tensor_seal). */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

/* DLPack asks for 256-byte aligned data (the alignment CUDA uses). */
#define DLP_ALIGNMENT 256
/* Zeroed blocks this large come straight from the kernel, whose fresh pages are already zero
 * (and cost nothing until touched). Everything else comes from the C allocator, which reuses
 * freed blocks: a loop making and dropping tensors then pays no page faults. */
#define MAP_ZEROED_THRESHOLD ((size_t)32 << 20)

static void *allocate(size_t nbytes, int zeroed, int *mapped) {
  void *p;
  *mapped = zeroed && nbytes >= MAP_ZEROED_THRESHOLD;
  if (*mapped) {
    p = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
  }
  if (posix_memalign(&p, DLP_ALIGNMENT, nbytes) != 0) return NULL;
  if (zeroed) memset(p, 0, nbytes);
  return p;
}

static void deallocate(void *p, size_t nbytes, int mapped) {
  if (mapped) munmap(p, nbytes);
  else free(p);
}

static dlp_Owner *new_owner(void *memory, DLDevice device, void *managed, int versioned, size_t nbytes,
                            uintptr_t lo, uintptr_t hi) {
  dlp_Owner *o = malloc(sizeof *o);
  if (!o) return NULL;
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
  return o;
}

dlp_Owner *dlp_owner_new_memory(size_t nbytes, int zeroed) {
  DLDevice cpu = {kDLCPU, 0};
  void *memory = NULL;
  int mapped = 0;
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
  else if (o->memory && o->device.device_type == kDLCPU) deallocate(o->memory, o->nbytes, o->mapped);
  else if (o->memory) dlp_cuda_free(o->device, o->memory);
  dlp_CudaStream *s = atomic_load(&o->stream);
  if (s) dlp_cuda_stream_release(s);
  free(o);
  dlp_cuda_reap(); /* memory held for GPU work that completed since goes too */
}
