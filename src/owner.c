/* Owners: the reference-counted holders of tensor memory.
 *
 * An owner lives in C, not in any lua_State: tensors, views and exported
 * managed tensors each hold one reference, so memory exported to another
 * library outlives the state that made it, and the last release (which may
 * happen on any thread) frees the block or calls the producer's deleter. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* DLPack asks for 256-byte aligned data (the alignment CUDA uses). */
#define DLP_ALIGNMENT 256

dlp_Owner *dlp_owner_new_memory(size_t nbytes, int zeroed) {
  dlp_Owner *o = malloc(sizeof *o);
  if (!o) return NULL;
  o->memory = NULL;
  if (nbytes > 0) {
    if (posix_memalign(&o->memory, DLP_ALIGNMENT, nbytes) != 0) {
      free(o);
      return NULL;
    }
    if (zeroed) memset(o->memory, 0, nbytes);
  }
  atomic_init(&o->refs, 1);
  o->managed = NULL;
  o->versioned = 0;
  o->nbytes = nbytes;
  return o;
}

dlp_Owner *dlp_owner_new_managed(void *managed, int versioned, size_t nbytes) {
  dlp_Owner *o = malloc(sizeof *o);
  if (!o) return NULL;
  atomic_init(&o->refs, 1);
  o->memory = NULL;
  o->managed = managed;
  o->versioned = versioned;
  o->nbytes = nbytes;
  return o;
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
  free(o->memory);
  free(o);
}
