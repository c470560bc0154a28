/* What the CUDA files share: cuda.c (the driver, contexts, stream records, memory and copies),
 * stream.c (the dlpack.cuda table with its Stream and Event objects), launch.c (the computing
 * functions' kernels and other queued work), cublas.c (cuBLAS) and ipc_cuda.c. Not installed;
 * the rest of the module sees CUDA through internal.h only. */
#ifndef DLPACK_LUA_CUDA_PRIVATE_H
#define DLPACK_LUA_CUDA_PRIVATE_H

#include "cuda_driver.h"
#include "internal.h"

#define MAX_DEVICES DLP_MAX_CUDA_DEVICES

/* The driver, loaded once per process (dlp_cuda_ready). */
typedef struct dlp_CudaState {
  dlp_once_flag once;
  int available;
  int device_count;
  char reason[256];
  dlp_CudaDriver fn;
  dlp_mutex lock; /* contexts and owner streams */
  CUcontext contexts[MAX_DEVICES];
} dlp_CudaState;
extern dlp_CudaState dlp_cuda;

int dlp_cuda_ready(void);                                 /* loads the driver the first time */
void dlp_cuda_check(lua_State *L, CUresult rc, const char *what); /* raises on a CUDA error */
int dlp_cuda_check_device(lua_State *L, lua_Integer id, const char *what);

/* The device whose context serves memory on d (pinned and managed memory: device 0). */
static inline int dlp_cuda_device_of(DLDevice d) {
  return d.device_type == kDLCUDA ? d.device_id : 0;
}

/* dlp_cuda_enter makes device's primary context current, remembering the caller's, which
 * dlp_cuda_leave restores. */
typedef struct dlp_CudaScope {
  CUcontext saved;
  int changed;
} dlp_CudaScope;
CUresult dlp_cuda_enter(int device, dlp_CudaScope *scope);
void dlp_cuda_leave(dlp_CudaScope *scope);

/* A stream record, reference-counted: held by stream objects and by the memory whose last
 * work was issued on the stream. */
struct dlp_CudaStream {
  atomic_long refs;
  CUstream handle;
  int device;
  int owned;    /* created here: destroyed with the last reference */
  int is_static;
};
dlp_CudaStream *dlp_cuda_new_record(CUstream handle, int device, int owned); /* NULL: no memory */
dlp_CudaStream *dlp_cuda_default_stream(CUstream handle, int device);     /* handle 1 or 2 */
dlp_CudaStream *dlp_cuda_on_device(dlp_CudaStream *s, int device);
void dlp_cuda_stream_retain(dlp_CudaStream *s);
/* waiter waits for everything issued on producer so far (nothing when producer is NULL). */
CUresult dlp_cuda_make_wait(const dlp_CudaStream *waiter, const dlp_CudaStream *producer);
/* Let go of the memory held for queued work that completed; with wait, wait for all of it first. */
void dlp_cuda_drain_pending(int wait);

/* The stream of the pending work on o's memory (on device d), retained; NULL: none (host memory). */
dlp_CudaStream *dlp_cuda_owner_stream(dlp_Owner *o, DLDevice d);
/* Holds for launch.c: a new one (NULL: no memory), an owner added (at most 4; pool memory, freed
 * in stream order, is not held), and the hold committed behind the work issued on stream so far
 * (takes h; see cuda.c). */
dlp_CudaHold *dlp_cuda_hold_new(void);
void dlp_cuda_hold_owner(dlp_CudaHold *h, dlp_Owner *o);
CUresult dlp_cuda_hold_commit(dlp_CudaHold *h, CUstream stream, int device);

/* launch.c: work of the computing functions (a kernel launch, cuBLAS's products) on stream
 * (taken), after the pending work on each operand; the operands' memory is held until the work
 * ran, and their later work waits for it. `queue` puts the work on `stream` of `device` (its
 * context current) and sets *queued once anything is on the stream; it returns CUDA_SUCCESS or
 * a CUDA error, or writes why (whylen bytes) for an error of another library. dlp_cuda_run
 * raises naming `what` only after letting go of what it took. */
typedef struct dlp_CudaWork {
  const char *what;
  dlp_CudaStream *stream;
  dlp_Tensor *operands[4];
  int noperands;
  CUresult (*queue)(void *ctx, CUstream stream, int device, int *queued, char *why, size_t whylen);
  void *ctx;
} dlp_CudaWork;
void dlp_cuda_run(lua_State *L, const dlp_CudaWork *work);

/* cublas.c: dlpack.cuda.blas() */
int dlp_cuda_l_blas(lua_State *L);

/* The PTX of the kernel families (generated from src/compute/cuda/ptx/ into the build). */
#define DLP_KERNEL_FAMILIES 45
extern const char *const dlp_kernel_ptx[DLP_KERNEL_FAMILIES];

#endif
