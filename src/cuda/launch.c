/* The kernels of the computing functions on CUDA devices: their PTX (src/compute/cuda/kernels.cu,
 * embedded in the module) loaded by the driver a family at a time, the first time a kernel of
 * the family runs on a device, and launches ordered on streams.
 *
 * Nothing loads before the first computing function on a CUDA tensor. A family's first load on a
 * device has the driver compile its PTX for that GPU (about a second for the largest family; the
 * driver keeps the result in its JIT cache, after which a load takes milliseconds): see
 * docs/gpu.md. Modules stay loaded with the primary context for the life of the process. */
#include <stdlib.h>
#include <string.h>

#include "compute/cuda/args.h"
#include "cuda/cuda_private.h"

#define THREADS_PER_BLOCK 256
#define MAX_BLOCKS 65535 /* a grid-stride loop covers any count with this many (within every GPU's limits) */

/* A kernel found once, by the address of its name (the names are static strings). */
typedef struct Kernel {
  struct Kernel *next;
  const char *name;
  CUfunction function;
} Kernel;

static struct {
  CUmodule modules[MAX_DEVICES][DLP_KERNEL_FAMILIES];
  Kernel *kernels[MAX_DEVICES][DLP_KERNEL_FAMILIES];
} loaded; /* under dlp_cuda.lock */

/* The function of kernel `name` of `family` on device (its context current); loads the family
 * the first time. */
static CUresult find_kernel(int device, int family, const char *name, CUfunction *out) {
  CUresult rc = CUDA_SUCCESS;
  Kernel *k;
  if (family < 0 || family >= DLP_KERNEL_FAMILIES || !dlp_kernel_ptx[family])
    return 500; /* CUDA_ERROR_NOT_FOUND: a family number without PTX */
  dlp_mutex_lock(&dlp_cuda.lock);
  for (k = loaded.kernels[device][family]; k; k = k->next)
    if (k->name == name) break;
  if (!k) {
    if (!loaded.modules[device][family])
      rc = dlp_cuda.fn.cuModuleLoadData(&loaded.modules[device][family], dlp_kernel_ptx[family]);
    k = rc == CUDA_SUCCESS ? calloc(1, sizeof *k) : NULL;
    if (rc == CUDA_SUCCESS && !k) rc = 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    if (k && (rc = dlp_cuda.fn.cuModuleGetFunction(&k->function, loaded.modules[device][family], name)) == CUDA_SUCCESS) {
      k->name = name;
      k->next = loaded.kernels[device][family];
      loaded.kernels[device][family] = k;
    } else {
      free(k);
      k = NULL;
    }
  }
  if (k) *out = k->function;
  dlp_mutex_unlock(&dlp_cuda.lock);
  return rc;
}

dlp_CudaStream *dlp_cuda_compute_stream(dlp_Tensor *const *operands, int n, dlp_CudaStream *given) {
  for (int k = 0; k < n; k++)
    if (operands[k] && operands[k]->dl.device.device_type == kDLCUDA) {
      if (!given) {
        /* the pending work may be on another device's stream (a copy given one): the kernel runs
         * on this device's legacy stream then, after that work (dlp_cuda_launch waits for it) */
        int device = operands[k]->dl.device.device_id;
        dlp_CudaStream *s = dlp_cuda_owner_stream(operands[k]->owner, operands[k]->dl.device);
        if (s && s->device != device) {
          dlp_cuda_stream_release(s);
          s = dlp_cuda_default_stream(CU_STREAM_LEGACY, device);
          dlp_cuda_stream_retain(s);
        }
        return s;
      }
      given = dlp_cuda_on_device(given, operands[k]->dl.device.device_id); /* the default streams: this device's */
      break;
    }
  if (given) dlp_cuda_stream_retain(given);
  return given;
}

void dlp_cuda_run(lua_State *L, const dlp_CudaWork *w) {
  dlp_CudaScope scope;
  CUresult rc = CUDA_SUCCESS;
  dlp_CudaStream *s = w->stream;
  int device = w->noperands ? w->operands[0]->dl.device.device_id : s->device, queued = 0;
  char why[256] = "";
  dlp_CudaHold *held;
  if (s->device != device) {
    dlp_cuda_stream_release(s);
    luaL_error(L, "%s: the stream is on cuda:%d, the operands on cuda:%d", w->what, s->device, device);
  }
  held = dlp_cuda_hold_new(); /* before any work: nothing can fail for want of memory after it */
  if (!held) {
    dlp_cuda_stream_release(s);
    luaL_error(L, "%s: not enough memory", w->what);
  }
  /* the work runs after the pending work on every operand */
  for (int k = 0; k < w->noperands && rc == CUDA_SUCCESS; k++) {
    dlp_CudaStream *pending = dlp_cuda_owner_stream(w->operands[k]->owner, w->operands[k]->dl.device);
    rc = dlp_cuda_make_wait(s, pending);
    if (pending) dlp_cuda_stream_release(pending);
  }
  if (rc == CUDA_SUCCESS) rc = dlp_cuda_enter(device, &scope);
  else scope.changed = 0;
  if (rc == CUDA_SUCCESS) rc = w->queue(w->ctx, s->handle, device, &queued, why, sizeof why);
  dlp_cuda_leave(&scope);
  if (queued) {
    /* the memory of every operand is held until the work ran (also when part of it failed to
     * queue); later work on it waits for it */
    for (int k = 0; k < w->noperands; k++) dlp_cuda_hold_owner(held, w->operands[k]->owner);
    CUresult held_rc = dlp_cuda_hold_commit(held, s->handle, device);
    if (rc == CUDA_SUCCESS && !why[0]) rc = held_rc;
    for (int k = 0; k < w->noperands; k++) dlp_owner_set_stream(w->operands[k]->owner, s);
  } else {
    free(held);
  }
  dlp_cuda_stream_release(s);
  if (why[0]) luaL_error(L, "%s: %s", w->what, why);
  if (rc != CUDA_SUCCESS) dlp_cuda_check(L, rc, w->what);
}

/* A kernel launch: one grid-stride grid over the elements, one argument (the struct). */
static CUresult queue_kernel(void *ctx, CUstream stream, int device, int *queued, char *why, size_t whylen) {
  const dlp_CudaLaunch *l = ctx;
  CUfunction fn = NULL;
  CUresult rc = find_kernel(device, l->family, l->kernel, &fn);
  (void)why;
  (void)whylen;
  if (rc == CUDA_SUCCESS) {
    int64_t blocks = (l->args->numel + THREADS_PER_BLOCK - 1) / THREADS_PER_BLOCK;
    void *params[1] = {(void *)l->args};
    rc = dlp_cuda.fn.cuLaunchKernel(fn, (unsigned)(blocks < MAX_BLOCKS ? blocks : MAX_BLOCKS), 1, 1,
                                    THREADS_PER_BLOCK, 1, 1, 0, stream, params, NULL);
    *queued = rc == CUDA_SUCCESS;
  }
  return rc;
}

void dlp_cuda_launch(lua_State *L, const dlp_CudaLaunch *l) {
  dlp_CudaWork w;
  /* nothing to launch: done, unless the stream is on another device, which raises as for any count */
  if (l->args->numel == 0 &&
      !(l->stream && l->noperands && l->stream->device != l->operands[0]->dl.device.device_id)) {
    dlp_cuda_stream_release(l->stream);
    return;
  }
  memset(&w, 0, sizeof w);
  w.what = l->what;
  w.stream = l->stream;
  w.noperands = l->noperands;
  for (int k = 0; k < l->noperands; k++) w.operands[k] = l->operands[k];
  w.queue = queue_kernel;
  w.ctx = (void *)l;
  dlp_cuda_run(L, &w);
}
