/* cuBLAS, found at run time (as cuda.c finds the driver and blas.c the CBLAS): no build-time
 * dependency, and matrix products on CUDA tensors that work, through the module's own kernel
 * (src/compute/cuda/kernels.cu, family 27), where no cuBLAS is installed. The first float
 * product on a CUDA tensor opens the first of libcublas.so.13 and libcublas.so.12 (Windows:
 * cublas64_13.dll, cublas64_12.dll) that loads and exports every function of cublas.h, once for
 * every thread and lua_State, and keeps it loaded for the life of the process.
 *
 * DLPACK_LUA_CUBLAS, read once at that point, chooses: unset or empty, the search above (unless
 * DLPACK_LUA_CUDA_DRIVER names another driver than the system's: a system cuBLAS would talk to
 * the system's driver, not to that one, so then none is searched for); "none", no cuBLAS (the
 * module's kernel does every product: the specs run both); anything else, that library alone (a
 * file name the system searches for, or a path: the specs name the fake driver, which has the
 * functions too).
 *
 * Handles. One per device, made the first time a product runs there (with the device's primary
 * context current, which cuBLAS binds it to) and kept for the life of the process. A handle must
 * not be used by two threads at once: each is used under its own lock, which covers setting its
 * stream and queuing the products (both return at once: the products run on the stream).
 *
 * Math. The handles keep CUBLAS_DEFAULT_MATH: float32 products compute in float32, never in
 * TF32 (torch's default for matmul; cuBLAS uses TF32 only when asked), and with
 * CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION, so float16 and bfloat16 products accumulate
 * in float32 throughout and round once, as the CPU path does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cublas.h"
#include "cuda/cuda_private.h"

#ifdef DLPACK_LUA_HAVE_CUBLAS_H
/* The declarations of cublas.h against cuBLAS's own prototypes, where cublas_api.h is there. */
#define DLP_SAME_PROTOTYPE(name, params)                                      \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&name), name##_fn), \
                 #name ": cublas.h disagrees with cublas_api.h");
DLP_CUBLAS_FUNCTIONS(DLP_SAME_PROTOTYPE)
#undef DLP_SAME_PROTOTYPE
#endif

#ifdef _WIN32
static const char *const candidates[] = {"cublas64_13.dll", "cublas64_12.dll", NULL};
#define CANDIDATE_NAMES "cublas64_13.dll, cublas64_12.dll"
#else
static const char *const candidates[] = {"libcublas.so.13", "libcublas.so.12", NULL};
#define CANDIDATE_NAMES "libcublas.so.13, libcublas.so.12"
#endif

static struct {
  dlp_once_flag once;
  int available;
  char name[256], reason[300];
#define DLP_CUBLAS_FIELD(name, params) name##_fn name;
  struct {
    DLP_CUBLAS_FUNCTIONS(DLP_CUBLAS_FIELD)
  } fn;
#undef DLP_CUBLAS_FIELD
} cublas = {DLP_ONCE_INIT, 0, "", "", {0}};

/* One handle per device, each used under its lock (made when cuBLAS is loaded). */
static struct {
  dlp_mutex lock;
  cublasHandle_t handle;
} devices[MAX_DEVICES];

static int try_open(const char *name) {
  char why[200];
  const char *missing = NULL;
  void *lib = dlp_library_open(name, 1, why, sizeof why);
  if (!lib) {
    snprintf(cublas.reason, sizeof cublas.reason, "%s cannot be loaded: %s", name, why);
    return 0;
  }
#define DLP_CUBLAS_LOAD(name, params) \
  if (!(*(void **)&cublas.fn.name = dlp_library_symbol(lib, #name)) && !missing) missing = #name;
  DLP_CUBLAS_FUNCTIONS(DLP_CUBLAS_LOAD)
#undef DLP_CUBLAS_LOAD
  if (missing) {
    snprintf(cublas.reason, sizeof cublas.reason, "%s lacks %s (not a cuBLAS of CUDA 12 or later?)", name, missing);
    dlp_library_close(lib);
    return 0;
  }
  snprintf(cublas.name, sizeof cublas.name, "%s", name);
  return 1;
}

static void load_cublas(void) {
  const char *choice = getenv("DLPACK_LUA_CUBLAS"), *driver = getenv("DLPACK_LUA_CUDA_DRIVER");
  int found = 0;
  for (int d = 0; d < MAX_DEVICES; d++) dlp_mutex_init(&devices[d].lock);
  if (choice && strcmp(choice, "none") == 0) {
    snprintf(cublas.reason, sizeof cublas.reason, "DLPACK_LUA_CUBLAS=none");
  } else if (choice && *choice) {
    found = try_open(choice);
  } else if (driver && *driver) {
    snprintf(cublas.reason, sizeof cublas.reason,
             "DLPACK_LUA_CUDA_DRIVER names another CUDA driver, which a system cuBLAS would not use (set "
             "DLPACK_LUA_CUBLAS to a cuBLAS for it)");
  } else {
    for (int i = 0; candidates[i] && !found; i++) found = try_open(candidates[i]);
    if (!found) snprintf(cublas.reason, sizeof cublas.reason, "no cuBLAS found (tried " CANDIDATE_NAMES ")");
  }
  cublas.available = found;
}

int dlp_cuda_blas_ready(void) {
  dlp_call_once(&cublas.once, load_cublas);
  return cublas.available;
}

static const char *status_name(cublasStatus_t status) {
  switch ((int)status) {
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown status";
  }
}

/* The handle of device (its context current, its lock held): made the first time. A handle that
 * cannot be made is not remembered: the next product tries again (the failure may be memory). */
static cublasStatus_t device_handle(int device, cublasHandle_t *out, const char **step) {
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  if (!devices[device].handle) {
    cublasHandle_t h = NULL;
    *step = "cublasCreate";
    st = cublas.fn.cublasCreate_v2(&h);
    if (st == CUBLAS_STATUS_SUCCESS) {
      *step = "cublasSetMathMode";
      st = cublas.fn.cublasSetMathMode(
        h, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
      if (st == CUBLAS_STATUS_SUCCESS) devices[device].handle = h;
      else cublas.fn.cublasDestroy_v2(h);
    }
  }
  *out = devices[device].handle;
  return st;
}

static cudaDataType data_type(int dtype) {
  switch (dtype) {
    case DLP_FLOAT16: return CUDA_R_16F;
    case DLP_BFLOAT16: return CUDA_R_16BF;
    case DLP_FLOAT64: return CUDA_R_64F;
    default: return CUDA_R_32F;
  }
}

/* Every product of the grid g, on stream. Row-major C = A B is column-major C^T = B^T A^T: cuBLAS
 * gets b first, n and m swapped, and the factors' transpositions as CBLAS's row-major call would. */
static CUresult queue_gemms(void *ctx, CUstream stream, int device, int *queued, char *why, size_t whylen) {
  const dlp_CudaGemm *g = ctx;
  const char *step = "cublasCreate";
  cublasHandle_t h;
  int64_t idx[DLP_MAX_NDIM] = {0};
  const char *a = g->a, *b = g->b;
  char *c = g->c;
  float one_f = 1.0f, zero_f = 0.0f;
  double one_d = 1.0, zero_d = 0.0;
  int f64 = g->dtype == DLP_FLOAT64;
  const void *alpha = f64 ? (const void *)&one_d : (const void *)&one_f;
  const void *beta = f64 ? (const void *)&zero_d : (const void *)&zero_f;
  cudaDataType type = data_type(g->dtype);
  cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  cublasOperation_t ta = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasStatus_t st;
  dlp_mutex_lock(&devices[device].lock);
  st = device_handle(device, &h, &step);
  if (st == CUBLAS_STATUS_SUCCESS) {
    step = "cublasSetStream";
    st = cublas.fn.cublasSetStream_v2(h, (cudaStream_t)stream);
  }
  while (st == CUBLAS_STATUS_SUCCESS) {
    if (g->count == 1) {
      step = "cublasGemmEx";
      st = cublas.fn.cublasGemmEx(h, ta, tb, g->n, g->m, g->k, alpha, b, type, g->ldb, a, type, g->lda, beta, c, type,
                                  g->n, compute, CUBLAS_GEMM_DEFAULT);
    } else {
      step = "cublasGemmStridedBatchedEx";
      st = cublas.fn.cublasGemmStridedBatchedEx(h, ta, tb, g->n, g->m, g->k, alpha, b, type, g->ldb, g->stride_b,
                                                a, type, g->lda, g->stride_a, beta, c, type, g->n, g->stride_c,
                                                g->count, compute, CUBLAS_GEMM_DEFAULT);
    }
    if (st != CUBLAS_STATUS_SUCCESS) break;
    *queued = 1;
    int i = g->nouter - 1; /* the next product of the outer dimensions */
    for (; i >= 0; i--) {
      if (++idx[i] < g->outer[i]) {
        a = dlp_offset(a, g->outer_step[0][i]);
        b = dlp_offset(b, g->outer_step[1][i]);
        c = dlp_offset(c, g->outer_step[2][i]);
        break;
      }
      a = dlp_offset(a, -g->outer_step[0][i] * (g->outer[i] - 1));
      b = dlp_offset(b, -g->outer_step[1][i] * (g->outer[i] - 1));
      c = dlp_offset(c, -g->outer_step[2][i] * (g->outer[i] - 1));
      idx[i] = 0;
    }
    if (i < 0) break;
  }
  dlp_mutex_unlock(&devices[device].lock);
  if (st != CUBLAS_STATUS_SUCCESS)
    snprintf(why, whylen, "cuBLAS (%s) on cuda:%d: %s failed with %s (%d)%s", cublas.name, device, step,
             status_name(st), (int)st,
             strcmp(step, "cublasCreate") == 0 ? "; DLPACK_LUA_CUBLAS=none computes with the module's own kernel"
                                               : "");
  return CUDA_SUCCESS;
}

void dlp_cuda_gemm(lua_State *L, const char *what, dlp_CudaStream *stream, dlp_Tensor *const operands[3],
                   const dlp_CudaGemm *g) {
  dlp_CudaWork w;
  memset(&w, 0, sizeof w);
  w.what = what;
  w.stream = stream;
  w.noperands = 3;
  for (int k = 0; k < 3; k++) w.operands[k] = operands[k];
  w.queue = queue_gemms;
  w.ctx = (void *)g;
  dlp_cuda_run(L, &w);
}

/* dlpack.cuda.blas(): the cuBLAS library the products on CUDA tensors use, or nil and why none is. */
int dlp_cuda_l_blas(lua_State *L) {
  if (dlp_cuda_blas_ready()) {
    lua_pushstring(L, cublas.name);
    return 1;
  }
  lua_pushnil(L);
  lua_pushstring(L, cublas.reason);
  return 2;
}
