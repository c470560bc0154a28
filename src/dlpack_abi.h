/*
 * The DLPack C ABI, version 1.3, written from the published standard
 * (dmlc/dlpack include/dlpack/dlpack.h, version 1.x).
 *
 * A system <dlpack/dlpack.h> of version 1.x is used instead when the build
 * defines DLPACK_LUA_SYSTEM_HEADER (the Makefile does so when it finds one).
 * The include guard is the standard header's own, so a host that includes the
 * standard header first gets its declarations and this file adds nothing.
 */
#ifndef DLPACK_LUA_ABI_H
#define DLPACK_LUA_ABI_H

#ifdef DLPACK_LUA_SYSTEM_HEADER
#include <dlpack/dlpack.h>
#endif

#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_

#include <stddef.h>
#include <stdint.h>

#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 3

#ifdef __cplusplus
extern "C" {
#endif

/* major: ABI layout of DLManagedTensorVersioned; minor: new enum values only. */
typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

#ifdef __cplusplus
typedef enum : int32_t {
#else
typedef enum {
#endif
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,     /* pinned host memory (cudaMallocHost) */
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,    /* pinned host memory (hipMallocHost) */
  kDLExtDev = 12,
  kDLCUDAManaged = 13, /* cudaMallocManaged */
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMAIA = 17,
  kDLTrn = 18
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id; /* 0 for CPU, pinned and managed memory */
} DLDevice;

typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
  kDLFloat8_e3m4 = 7U,
  kDLFloat8_e4m3 = 8U,
  kDLFloat8_e4m3b11fnuz = 9U,
  kDLFloat8_e4m3fn = 10U,
  kDLFloat8_e4m3fnuz = 11U,
  kDLFloat8_e5m2 = 12U,
  kDLFloat8_e5m2fnuz = 13U,
  kDLFloat8_e8m0fnu = 14U,
  kDLFloat6_e2m3fn = 15U,
  kDLFloat6_e3m2fn = 16U,
  kDLFloat4_e2m1fn = 17U
} DLDataTypeCode;

typedef struct {
  uint8_t code;   /* a DLDataTypeCode */
  uint8_t bits;   /* bits of one lane */
  uint16_t lanes; /* 1 for scalars */
} DLDataType;

typedef struct {
  void *data;           /* opaque on some devices; use data + byte_offset */
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;       /* may be NULL when ndim == 0 */
  int64_t *strides;     /* in elements; non-NULL when ndim != 0 (v1.2+) */
  uint64_t byte_offset; /* bytes from data to the first element */
} DLTensor;

/* Legacy form: no version, no flags. */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self); /* frees self as well */
} DLManagedTensor;

#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1UL << 2UL)

/* Current form. Everything up to and including flags is stable across majors. */
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self); /* frees self as well */
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

#ifdef __cplusplus
}
#endif

#endif /* DLPACK_DLPACK_H_ */

/* Headers of v1.0/v1.1 have no typedef for the versioned struct, nor these flags. */
#if defined(DLPACK_MINOR_VERSION) && DLPACK_MAJOR_VERSION == 1 && DLPACK_MINOR_VERSION < 2 \
    && !defined(DLPACK_LUA_VERSIONED_TYPEDEF)
#define DLPACK_LUA_VERSIONED_TYPEDEF
typedef struct DLManagedTensorVersioned DLManagedTensorVersioned;
#endif
#ifndef DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1UL << 2UL)
#endif

#endif /* DLPACK_LUA_ABI_H */
