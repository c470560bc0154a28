/* The part of cuBLAS this module calls, resolved with dlsym at run time by src/cuda/cublas.c:
 * nothing links against libcublas. When the toolkit's cublas_api.h is found at build time
 * (DLPACK_LUA_HAVE_CUBLAS_H) its types are used and every pointer type below is checked against
 * the real prototype; otherwise the few types needed are declared here with cuBLAS's ABI (its
 * enums are ints). The fake driver of the specs (spec/c/fakecuda.c) exports the same functions,
 * always with the ABI types. */
#ifndef DLPACK_LUA_CUBLAS_H
#define DLPACK_LUA_CUBLAS_H

#include <stddef.h>

#include "cuda/cuda_driver.h"

#ifdef DLPACK_LUA_HAVE_CUBLAS_H
/* its half-precision headers test __cplusplus and _MSC_FULL_VER without defining them */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#include <cublas_api.h>
#pragma GCC diagnostic pop
#else
typedef int cublasStatus_t;
typedef struct cublasContext *cublasHandle_t;
typedef struct CUstream_st *cudaStream_t;
typedef int cublasOperation_t;
typedef int cublasMath_t;
typedef int cudaDataType;
typedef int cublasComputeType_t;
typedef int cublasGemmAlgo_t;
#define CUBLAS_STATUS_SUCCESS 0
#define CUBLAS_OP_N 0
#define CUBLAS_OP_T 1
#define CUDA_R_32F 0
#define CUDA_R_64F 1
#define CUDA_R_16F 2
#define CUDA_R_16BF 14
#define CUBLAS_COMPUTE_32F 68
#define CUBLAS_COMPUTE_64F 70
#define CUBLAS_GEMM_DEFAULT (-1)
#define CUBLAS_DEFAULT_MATH 0
#define CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION 16
#endif

/* X(name in the library, parameter list) for every function used; name##_fn is its pointer type. */
#define DLP_CUBLAS_FUNCTIONS(X)                                                                          \
  X(cublasCreate_v2, (cublasHandle_t *handle))                                                           \
  X(cublasDestroy_v2, (cublasHandle_t handle))                                                           \
  X(cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream))                                    \
  X(cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode))                                       \
  X(cublasGemmEx, (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, \
                   int k, const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,    \
                   cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,    \
                   cublasComputeType_t computeType, cublasGemmAlgo_t algo))                               \
  X(cublasGemmStridedBatchedEx,                                                                          \
    (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,       \
     const void *alpha, const void *A, cudaDataType Atype, int lda, long long int strideA, const void *B,  \
     cudaDataType Btype, int ldb, long long int strideB, const void *beta, void *C, cudaDataType Ctype,    \
     int ldc, long long int strideC, int batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo))

#define DLP_CUBLAS_TYPEDEF(name, params) typedef cublasStatus_t (*name##_fn) params;
DLP_CUBLAS_FUNCTIONS(DLP_CUBLAS_TYPEDEF)
#undef DLP_CUBLAS_TYPEDEF

#endif
