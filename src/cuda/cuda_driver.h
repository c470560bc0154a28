/* The part of the CUDA driver API this module calls, resolved with dlsym at run time.
 *
 * Nothing links against libcuda: cuda.c opens it (or the library named by the
 * environment variable DLPACK_LUA_CUDA_DRIVER, which the specs point at a fake
 * driver) the first time CUDA is needed. When the toolkit's cuda.h is found at
 * build time (DLPACK_LUA_HAVE_CUDA_H) its types are used and every pointer type
 * below is checked against the real prototype; otherwise the few types needed
 * are declared here with the driver's ABI. */
#ifndef DLPACK_LUA_CUDA_DRIVER_H
#define DLPACK_LUA_CUDA_DRIVER_H

#include <stddef.h>

#ifdef DLPACK_LUA_HAVE_CUDA_H
#include <cuda.h>
#else
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef int CUdevice_attribute; /* an enum in the driver's ABI */
#define CUDA_SUCCESS 0
#define CUDA_ERROR_NOT_READY 600
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_DEFAULT 0x0
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_MEM_ATTACH_GLOBAL 0x1
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED 115
/* Virtual memory management (dlpack.ipc): memory exportable as a POSIX file descriptor. */
typedef unsigned long long CUmemGenericAllocationHandle;
typedef int CUmemAllocationHandleType;        /* an enum in the driver's ABI */
typedef int CUmemAllocationGranularity_flags; /* likewise */
typedef struct CUmemLocation_st {
  int type; /* CU_MEM_LOCATION_TYPE_* */
  int id;   /* the device ordinal */
} CUmemLocation;
typedef struct CUmemAllocationProp_st {
  int type;                 /* CU_MEM_ALLOCATION_TYPE_* */
  int requestedHandleTypes; /* CU_MEM_HANDLE_TYPE_* bits */
  CUmemLocation location;
  void *win32HandleMetaData; /* Windows only: NULL */
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
} CUmemAllocationProp;
typedef struct CUmemAccessDesc_st {
  CUmemLocation location;
  int flags; /* CU_MEM_ACCESS_FLAGS_* */
} CUmemAccessDesc;
#define CU_MEM_ALLOCATION_TYPE_PINNED 0x1
#define CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 0x1
#define CU_MEM_LOCATION_TYPE_DEVICE 0x1
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 0x3
#define CU_MEM_ALLOC_GRANULARITY_MINIMUM 0x0
#endif

/* X(name in the library, parameter list) for every function used; name##_fn is its pointer type. */
#define DLP_CUDA_FUNCTIONS(X)                                                                   \
  X(cuInit, (unsigned int flags))                                                               \
  X(cuDeviceGetCount, (int *count))                                                             \
  X(cuDeviceGet, (CUdevice *device, int ordinal))                                               \
  X(cuDevicePrimaryCtxRetain, (CUcontext *ctx, CUdevice device))                                \
  X(cuCtxGetCurrent, (CUcontext *ctx))                                                          \
  X(cuCtxSetCurrent, (CUcontext ctx))                                                           \
  X(cuGetErrorString, (CUresult error, const char **text))                                      \
  X(cuMemAlloc_v2, (CUdeviceptr *ptr, size_t bytes))                                            \
  X(cuMemFree_v2, (CUdeviceptr ptr))                                                            \
  X(cuMemHostAlloc, (void **ptr, size_t bytes, unsigned int flags))                             \
  X(cuMemFreeHost, (void *ptr))                                                                 \
  X(cuMemAllocManaged, (CUdeviceptr *ptr, size_t bytes, unsigned int flags))                    \
  X(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream))           \
  X(cuMemsetD8Async, (CUdeviceptr dst, unsigned char value, size_t count, CUstream stream))     \
  X(cuPointerGetAttribute, (void *data, int attribute, CUdeviceptr ptr))                        \
  X(cuStreamCreateWithPriority, (CUstream *stream, unsigned int flags, int priority))           \
  X(cuStreamDestroy_v2, (CUstream stream))                                                      \
  X(cuStreamSynchronize, (CUstream stream))                                                     \
  X(cuStreamQuery, (CUstream stream))                                                           \
  X(cuStreamWaitEvent, (CUstream stream, CUevent event, unsigned int flags))                    \
  X(cuEventCreate, (CUevent *event, unsigned int flags))                                        \
  X(cuEventRecord, (CUevent event, CUstream stream))                                            \
  X(cuEventSynchronize, (CUevent event))                                                        \
  X(cuEventQuery, (CUevent event))                                                              \
  X(cuEventElapsedTime, (float *ms, CUevent start, CUevent end))                                \
  X(cuEventDestroy_v2, (CUevent event))                                                         \
  X(cuCtxSynchronize, (void))                                                                   \
  X(cuModuleLoadData, (CUmodule *module, const void *image))                                    \
  X(cuModuleGetFunction, (CUfunction *function, CUmodule module, const char *name))             \
  X(cuLaunchKernel, (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, \
                     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,    \
                     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)) \
  X(cuMemGetAllocationGranularity,                                                              \
    (size_t *granularity, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags option)) \
  X(cuMemCreate, (CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, \
                  unsigned long long flags))                                                    \
  X(cuMemRelease, (CUmemGenericAllocationHandle handle))                                        \
  X(cuMemAddressReserve, (CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,    \
                          unsigned long long flags))                                            \
  X(cuMemAddressFree, (CUdeviceptr ptr, size_t size))                                           \
  X(cuMemMap, (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, \
               unsigned long long flags))                                                       \
  X(cuMemUnmap, (CUdeviceptr ptr, size_t size))                                                 \
  X(cuMemSetAccess, (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count))  \
  X(cuMemExportToShareableHandle, (void *shareable, CUmemGenericAllocationHandle handle,        \
                                   CUmemAllocationHandleType type, unsigned long long flags))   \
  X(cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle *handle, void *os_handle,     \
                                     CUmemAllocationHandleType type))

/* Functions a driver may lack (the stream-ordered allocator came with CUDA 11.2): NULL when
 * missing, and the module works without them (cuMemAlloc_v2, cuMemFree_v2 and its holds). */
#define DLP_CUDA_OPTIONAL_FUNCTIONS(X)                                                          \
  X(cuDeviceGetAttribute, (int *value, CUdevice_attribute attribute, CUdevice device))          \
  X(cuMemAllocAsync, (CUdeviceptr *ptr, size_t bytes, CUstream stream))                         \
  X(cuMemFreeAsync, (CUdeviceptr ptr, CUstream stream))

#define DLP_CUDA_TYPEDEF(name, params) typedef CUresult (*name##_fn) params;
DLP_CUDA_FUNCTIONS(DLP_CUDA_TYPEDEF)
DLP_CUDA_OPTIONAL_FUNCTIONS(DLP_CUDA_TYPEDEF)
#undef DLP_CUDA_TYPEDEF

/* The driver's functions, filled by dlp_cuda_driver() (cuda.c). */
typedef struct dlp_CudaDriver {
#define DLP_CUDA_FIELD(name, params) name##_fn name;
  DLP_CUDA_FUNCTIONS(DLP_CUDA_FIELD)
  DLP_CUDA_OPTIONAL_FUNCTIONS(DLP_CUDA_FIELD)
#undef DLP_CUDA_FIELD
} dlp_CudaDriver;

#endif
