/* dlpack.ipc on CUDA devices: device memory that another process can map.
 *
 * Such memory comes from the driver's virtual memory management: cuMemCreate makes a physical
 * allocation (pinned, on one device) whose handle can be exported as a POSIX file descriptor;
 * cuMemAddressReserve and cuMemMap give it device addresses, cuMemSetAccess makes them readable
 * and writable on the device. The handle is released as soon as the mapping holds the memory;
 * the owner keeps the exported descriptor (o->fd, which makes the memory shareable and is what
 * send passes on) and the mapping (o->memory, o->nbytes: the whole allocation). A receiver
 * imports the descriptor, maps all of the allocation the same way and keeps the descriptor too,
 * so that it can forward the tensor. The driver counts the mappings of every process: the
 * physical memory goes with the last one.
 *
 * The message's layout is checked by ipc.c before this file maps anything (docs/ipc.md, the
 * threat model): here, the device, the size against the granularity, and what the driver says.
 * Only ipc.c calls it, and only on Linux, the one system with dlpack.ipc. */
#ifdef __linux__
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cuda_private.h"

#ifdef DLPACK_LUA_HAVE_CUDA_H
/* The declarations of cuda_driver.h against the toolkit's prototypes, where cuda.h is there. */
#define DLP_SAME_PROTOTYPE(name)                                               \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&name), name##_fn), \
                 #name ": cuda_driver.h disagrees with cuda.h")
DLP_SAME_PROTOTYPE(cuCtxSynchronize);
DLP_SAME_PROTOTYPE(cuMemGetAllocationGranularity);
DLP_SAME_PROTOTYPE(cuMemCreate);
DLP_SAME_PROTOTYPE(cuMemRelease);
DLP_SAME_PROTOTYPE(cuMemAddressReserve);
DLP_SAME_PROTOTYPE(cuMemAddressFree);
DLP_SAME_PROTOTYPE(cuMemMap);
DLP_SAME_PROTOTYPE(cuMemUnmap);
DLP_SAME_PROTOTYPE(cuMemSetAccess);
DLP_SAME_PROTOTYPE(cuMemExportToShareableHandle);
DLP_SAME_PROTOTYPE(cuMemImportFromShareableHandle);
#undef DLP_SAME_PROTOTYPE
#endif

static void prop_for(int device, CUmemAllocationProp *prop) {
  memset(prop, 0, sizeof *prop);
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = device;
}

/* The sizes cuMemCreate takes on device (its context current): multiples of *granularity. */
static CUresult granularity_of(int device, size_t *granularity) {
  CUmemAllocationProp prop;
  prop_for(device, &prop);
  CUresult rc = dlp_cuda.fn.cuMemGetAllocationGranularity(granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (rc == CUDA_SUCCESS && (*granularity == 0 || (*granularity & (*granularity - 1)))) rc = 1; /* INVALID_VALUE */
  return rc;
}

/* What is made step by step, undone in reverse by undo (with the device's context current). */
typedef struct Mapping {
  CUmemGenericAllocationHandle handle;
  CUdeviceptr base;
  size_t size;
  int has_handle, reserved, mapped;
} Mapping;

static void undo(Mapping *m) {
  if (m->mapped) dlp_cuda.fn.cuMemUnmap(m->base, m->size);
  if (m->reserved) dlp_cuda.fn.cuMemAddressFree(m->base, m->size);
  if (m->has_handle) dlp_cuda.fn.cuMemRelease(m->handle);
  m->mapped = m->reserved = m->has_handle = 0;
}

/* Give m's allocation (m->handle, m->size bytes) addresses readable and writable on device,
 * then let go of the handle: the mapping holds the memory. */
static CUresult map_all(Mapping *m, int device, size_t granularity, const char **step) {
  CUmemAccessDesc access;
  CUresult rc;
  memset(&access, 0, sizeof access);
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  *step = "cuMemAddressReserve";
  if ((rc = dlp_cuda.fn.cuMemAddressReserve(&m->base, m->size, granularity, 0, 0)) != CUDA_SUCCESS) return rc;
  m->reserved = 1;
  *step = "cuMemMap";
  if ((rc = dlp_cuda.fn.cuMemMap(m->base, m->size, 0, m->handle, 0)) != CUDA_SUCCESS) return rc;
  m->mapped = 1;
  *step = "cuMemSetAccess";
  if ((rc = dlp_cuda.fn.cuMemSetAccess(m->base, m->size, &access, 1)) != CUDA_SUCCESS) return rc;
  *step = "cuMemRelease";
  if ((rc = dlp_cuda.fn.cuMemRelease(m->handle)) != CUDA_SUCCESS) return rc;
  m->has_handle = 0;
  return CUDA_SUCCESS;
}

static const char *error_text(CUresult rc) {
  const char *text = NULL;
  if (dlp_cuda.fn.cuGetErrorString) dlp_cuda.fn.cuGetErrorString(rc, &text);
  return text ? text : "unknown error";
}

dlp_Owner *dlp_ipc_cuda_new_owner(lua_State *L, DLDevice device, size_t nbytes, const char *what) {
  dlp_CudaScope scope;
  Mapping m;
  CUmemAllocationProp prop;
  size_t granularity = 0;
  int fd = -1, too_big = 0, no_memory = 0;
  const char *step = "cuCtxSetCurrent";
  dlp_Owner *o = NULL;
  dlp_cuda_require(L, what);
  int dev = dlp_cuda_check_device(L, device.device_id, what);
  dlp_cuda_drain_pending(0);
  memset(&m, 0, sizeof m);
  prop_for(dev, &prop);
  CUresult rc = dlp_cuda_enter(dev, &scope);
  if (rc == CUDA_SUCCESS) {
    step = "cuMemGetAllocationGranularity";
    rc = granularity_of(dev, &granularity);
  }
  if (rc == CUDA_SUCCESS) { /* at least one granule: an empty tensor has a descriptor to send too */
    if (nbytes > SIZE_MAX - granularity) too_big = 1, rc = 2; /* OUT_OF_MEMORY */
    else m.size = (nbytes ? (nbytes + granularity - 1) / granularity : 1) * granularity;
  }
  if (rc == CUDA_SUCCESS) {
    step = "cuMemCreate";
    if ((rc = dlp_cuda.fn.cuMemCreate(&m.handle, m.size, &prop, 0)) == CUDA_SUCCESS) m.has_handle = 1;
  }
  if (rc == CUDA_SUCCESS) {
    step = "cuMemExportToShareableHandle";
    rc = dlp_cuda.fn.cuMemExportToShareableHandle(&fd, m.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (rc != CUDA_SUCCESS) fd = -1;
  }
  if (rc == CUDA_SUCCESS) rc = map_all(&m, dev, granularity, &step);
  if (rc == CUDA_SUCCESS) { /* zeroed, and done before anyone sees it */
    step = "zeroing";
    if ((rc = dlp_cuda.fn.cuMemsetD8Async(m.base, 0, m.size, CU_STREAM_LEGACY)) == CUDA_SUCCESS)
      rc = dlp_cuda.fn.cuStreamSynchronize(CU_STREAM_LEGACY);
  }
  if (rc == CUDA_SUCCESS && !(o = dlp_owner_new_block((void *)(uintptr_t)m.base, device, m.size)))
    no_memory = 1, rc = 2; /* OUT_OF_MEMORY */
  if (rc != CUDA_SUCCESS) undo(&m); /* the unmap waits for a memset still queued */
  dlp_cuda_leave(&scope);
  if (rc != CUDA_SUCCESS) {
    if (fd >= 0) close(fd);
    if (too_big) luaL_error(L, "%s: %I bytes of shareable CUDA memory are too many", what, (lua_Integer)nbytes);
    if (no_memory) luaL_error(L, "%s: not enough memory", what);
    luaL_error(L, "%s: cannot make %I bytes of shareable memory on cuda:%d: %s failed with CUDA error %d (%s)", what,
               (lua_Integer)m.size, dev, step, (int)rc, error_text(rc));
  }
  fcntl(fd, F_SETFD, FD_CLOEXEC); /* as every descriptor of dlpack.ipc */
  o->fd = fd;
  o->fd_offset = 0;
  return o;
}

dlp_Owner *dlp_ipc_cuda_import(int fd, DLDevice device, uint64_t size, char *why, size_t whylen) {
  dlp_CudaScope scope;
  Mapping m;
  size_t granularity = 0;
  const char *step = "cuCtxSetCurrent";
  dlp_Owner *o = NULL;
  memset(&m, 0, sizeof m);
  if (!dlp_cuda_ready()) {
    snprintf(why, whylen, "a tensor on cuda:%d arrived, but CUDA is not available: %s", (int)device.device_id,
             dlp_cuda.reason);
    close(fd);
    return NULL;
  }
  int dev = device.device_id;
  if (device.device_type != kDLCUDA || dev < 0 || dev >= dlp_cuda.device_count) {
    snprintf(why, whylen, "the message names CUDA device %d, and this process sees %d", dev, dlp_cuda.device_count);
    close(fd);
    return NULL;
  }
  CUresult rc = dlp_cuda_enter(dev, &scope);
  if (rc == CUDA_SUCCESS) {
    step = "cuMemGetAllocationGranularity";
    rc = granularity_of(dev, &granularity);
  }
  if (rc == CUDA_SUCCESS && (size == 0 || size > SIZE_MAX || size % granularity != 0)) {
    dlp_cuda_leave(&scope);
    snprintf(why, whylen, "the size %llu is not a positive multiple of cuda:%d's allocation granularity (%zu bytes)",
             (unsigned long long)size, dev, granularity);
    close(fd);
    return NULL;
  }
  m.size = (size_t)size;
  if (rc == CUDA_SUCCESS) {
    step = "cuMemImportFromShareableHandle (the descriptor is not a CUDA allocation this driver can import)";
    rc = dlp_cuda.fn.cuMemImportFromShareableHandle(&m.handle, (void *)(uintptr_t)fd,
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (rc == CUDA_SUCCESS) m.has_handle = 1;
  }
  if (rc == CUDA_SUCCESS) {
    rc = map_all(&m, dev, granularity, &step);
    if (rc != CUDA_SUCCESS && m.reserved && !m.mapped)
      step = "cuMemMap (is the allocation smaller than the size the message says?)";
  }
  if (rc == CUDA_SUCCESS && !(o = dlp_owner_new_block((void *)(uintptr_t)m.base, device, m.size))) {
    undo(&m);
    dlp_cuda_leave(&scope);
    snprintf(why, whylen, "not enough memory");
    close(fd);
    return NULL;
  }
  if (rc != CUDA_SUCCESS) undo(&m);
  dlp_cuda_leave(&scope);
  if (rc != CUDA_SUCCESS) {
    snprintf(why, whylen, "%s failed with CUDA error %d (%s)", step, (int)rc, error_text(rc));
    close(fd);
    return NULL;
  }
  o->fd = fd;
  o->fd_offset = 0;
  return o;
}

/* Wait for the work queued on s so far (its device's context current). */
static CUresult sync_stream(const dlp_CudaStream *s) {
  dlp_CudaScope scope;
  CUresult rc = dlp_cuda_enter(s->device, &scope);
  if (rc == CUDA_SUCCESS) rc = dlp_cuda.fn.cuStreamSynchronize(s->handle);
  dlp_cuda_leave(&scope);
  return rc;
}

/* The stream o's last work was issued on, retained; NULL when none was recorded. */
static dlp_CudaStream *recorded_stream(dlp_Owner *o) {
  dlp_mutex_lock(&dlp_cuda.lock);
  dlp_CudaStream *s = atomic_load(&o->stream);
  if (s) dlp_cuda_stream_retain(s);
  dlp_mutex_unlock(&dlp_cuda.lock);
  return s;
}

void dlp_ipc_cuda_settle(lua_State *L, dlp_Owner *o, DLDevice device, dlp_CudaStream *stream, int whole_device,
                         const char *what) {
  dlp_CudaScope scope;
  CUresult rc = CUDA_SUCCESS;
  const char *step = "cuStreamSynchronize";
  if (!stream && !whole_device) return; /* stream = -1: the caller ordered the work itself */
  dlp_CudaStream *pending = recorded_stream(o);
  if (pending) {
    rc = sync_stream(pending);
    dlp_cuda_stream_release(pending);
  }
  if (rc == CUDA_SUCCESS && stream) rc = sync_stream(stream);
  if (rc == CUDA_SUCCESS && whole_device) {
    step = "cuCtxSynchronize";
    rc = dlp_cuda_enter(dlp_cuda_device_of(device), &scope);
    if (rc == CUDA_SUCCESS) rc = dlp_cuda.fn.cuCtxSynchronize();
    dlp_cuda_leave(&scope);
  }
  if (rc != CUDA_SUCCESS)
    luaL_error(L, "%s: waiting for the work queued on the tensor (%s) failed with CUDA error %d (%s)", what, step,
               (int)rc, error_text(rc));
}

void dlp_ipc_cuda_unmap(dlp_Owner *o) {
  dlp_CudaScope scope;
  int dev = dlp_cuda_device_of(o->device);
  CUdeviceptr base = (CUdeviceptr)(uintptr_t)o->memory;
  /* work queued on the memory completes before its addresses go (the legacy stream when none
   * was recorded; another thread's per-thread stream is not this thread's: the whole context) */
  dlp_CudaStream *s = atomic_load(&o->stream); /* the last reference: nobody changes it now */
  if (s && s->handle != CU_STREAM_PER_THREAD) sync_stream(s);
  if (dlp_cuda_enter(dev, &scope) == CUDA_SUCCESS) {
    if (!s) dlp_cuda.fn.cuStreamSynchronize(CU_STREAM_LEGACY);
    else if (s->handle == CU_STREAM_PER_THREAD) dlp_cuda.fn.cuCtxSynchronize();
    dlp_cuda.fn.cuMemUnmap(base, o->nbytes);
    dlp_cuda.fn.cuMemAddressFree(base, o->nbytes);
  }
  dlp_cuda_leave(&scope);
  close(o->fd);
}
#endif
