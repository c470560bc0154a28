/* Declarations shared by the C files of the module; not installed. */
#ifndef DLPACK_LUA_INTERNAL_H
#define DLPACK_LUA_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>
#include <lauxlib.h>

#include "dlpack_lua.h"

/* Tensors with more dimensions than this are refused (NumPy's NPY_MAXDIMS is 64). */
#define DLP_MAX_NDIM 64
/* CUDA device ids this module handles (0 to 63). */
#define DLP_MAX_CUDA_DEVICES 64

#define DLP_FLAG_READ_ONLY DLPACK_FLAG_BITMASK_READ_ONLY
#define DLP_FLAG_IS_COPIED DLPACK_FLAG_BITMASK_IS_COPIED
#define DLP_FLAG_SUBBYTE_PADDED DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED

/* ---- module.c: errors and per-state records ---- */

/* One per lua_State that opened the module, in its registry; finalised by lua_close. */
typedef struct dlp_State {
  size_t external_bytes; /* tensor bytes made or imported since the last full collection */
} dlp_State;

dlp_State *dlp_state(lua_State *L);
/* Add functions to the table at absolute index `table`. */
void dlp_register(lua_State *L, int table, const luaL_Reg *functions);

/* Raise an error marked DLPACK_LUA_BUFFER_ERROR: "cannot be exchanged as asked". */
int dlp_buffer_error(lua_State *L, const char *fmt, ...);

/* ---- dtype.c ---- */

typedef enum {
  DLP_BOOL, DLP_INT8, DLP_INT16, DLP_INT32, DLP_INT64,
  DLP_UINT8, DLP_UINT16, DLP_UINT32, DLP_UINT64,
  DLP_FLOAT16, DLP_BFLOAT16, DLP_FLOAT32, DLP_FLOAT64,
  DLP_COMPLEX64, DLP_COMPLEX128,
  DLP_FLOAT8_E3M4, DLP_FLOAT8_E4M3, DLP_FLOAT8_E4M3B11FNUZ, DLP_FLOAT8_E4M3FN,
  DLP_FLOAT8_E4M3FNUZ, DLP_FLOAT8_E5M2, DLP_FLOAT8_E5M2FNUZ, DLP_FLOAT8_E8M0FNU,
  DLP_FLOAT6_E2M3FN, DLP_FLOAT6_E3M2FN, DLP_FLOAT4_E2M1FN,
  DLP_NDTYPES
} dlp_Dtype;

typedef struct dlp_DtypeInfo {
  const char *name;
  uint8_t code;     /* DLDataTypeCode */
  uint8_t bits;
  uint8_t itemsize; /* bytes one element takes when stored one per byte or more */
  uint8_t access;   /* 1 when elements can be read and written from Lua */
} dlp_DtypeInfo;

extern const dlp_DtypeInfo dlp_dtypes[DLP_NDTYPES];

int dlp_dtype_from_dl(DLDataType t); /* -1 when not a dtype this module knows */
DLDataType dlp_dtype_to_dl(int dtype);
int dlp_dtype_is_subbyte(int dtype);
int dlp_check_dtype(lua_State *L, int arg);                 /* a dtype name */
int dlp_opt_dtype(lua_State *L, int arg, int def);
int dlp_test_dtype_name(const char *name);                  /* -1 when unknown */

/* One element as a value every element-accessible dtype converts through. */
typedef struct dlp_Scalar {
  enum { DLP_S_INT, DLP_S_UINT, DLP_S_FLOAT, DLP_S_COMPLEX } kind;
  int64_t i;
  uint64_t u;
  double re, im;
} dlp_Scalar;

void dlp_load(int dtype, const void *p, dlp_Scalar *s);  /* element -> scalar */
void dlp_store(int dtype, void *p, const dlp_Scalar *s); /* scalar -> element, C-like conversion */
void dlp_push_element(lua_State *L, int dtype, const void *p);
/* Convert the Lua value at idx to an element, strictly (integers must fit); raises naming `what`. */
void dlp_check_element(lua_State *L, int idx, int dtype, void *out, const char *what);
void dlp_check_access(lua_State *L, int dtype);            /* raises unless element access works */

/* ---- device.c ---- */

int dlp_device_is_valid_type(int32_t device_type);
int dlp_device_is_host(DLDevice d);        /* the CPU can read and write it */
int dlp_device_equal(DLDevice a, DLDevice b);
DLDevice dlp_check_device(lua_State *L, int arg);          /* a device string */
DLDevice dlp_opt_device(lua_State *L, int arg, DLDevice def);
int dlp_test_device_name(const char *s, DLDevice *out);    /* 1 when s names a device */
void dlp_push_device_name(lua_State *L, DLDevice d);       /* canonical form */
const char *dlp_device_type_name(int32_t device_type);
void dlp_push_device_types(lua_State *L);                  /* the dlpack.device_type table */

/* ---- owner.c: who frees the memory, shared by tensors, views and exports ---- */

typedef struct dlp_CudaStream dlp_CudaStream;

typedef struct dlp_Owner dlp_Owner;
struct dlp_Owner {
  atomic_long refs;
  void *memory;   /* a block this module allocated (on `device`), or NULL */
  DLDevice device;
  void *managed;  /* a producer's managed tensor whose deleter runs on the last release */
  int versioned;
  size_t nbytes;  /* memory held, for the garbage collector's accounting */
  /* CUDA: the stream the last work on this memory was issued on (NULL: the legacy default stream) */
  _Atomic(dlp_CudaStream *) stream;
};

dlp_Owner *dlp_owner_new_memory(size_t nbytes, int zeroed); /* cpu; NULL when out of memory */
dlp_Owner *dlp_owner_new_block(void *memory, DLDevice device, size_t nbytes); /* takes memory */
void dlp_owner_set_stream(dlp_Owner *o, dlp_CudaStream *s);  /* cuda.c; retains s, releases the old one */
dlp_Owner *dlp_owner_new_managed(void *managed, int versioned, size_t nbytes);
void dlp_owner_retain(dlp_Owner *o);
void dlp_owner_release(dlp_Owner *o);                       /* any thread */
void dlp_managed_delete(void *managed, int versioned);      /* calls a producer's deleter if any */

/* ---- tensor.c ---- */

typedef struct dlp_Tensor {
  DLTensor dl;      /* shape and strides point into dims[] */
  dlp_Owner *owner; /* NULL once released */
  uint64_t flags;   /* DLPack flag bits: READ_ONLY, IS_SUBBYTE_TYPE_PADDED */
  int dtype;        /* dlp_Dtype */
  int64_t dims[];   /* shape[ndim] then strides[ndim] */
} dlp_Tensor;

dlp_Tensor *dlp_tensor_push(lua_State *L, int ndim);        /* unowned, filled by the caller */
dlp_Tensor *dlp_tensor_test(lua_State *L, int idx);         /* NULL unless a tensor (live or not) */
dlp_Tensor *dlp_tensor_check(lua_State *L, int idx);        /* a live tensor, else raises */
/* A new contiguous tensor with fresh memory (host devices only). */
dlp_Tensor *dlp_tensor_new(lua_State *L, int dtype, DLDevice device, int ndim,
                           const int64_t *shape, int zeroed);
/* A view: shares t's owner, copies its dtype, device, data, offset and flags; caller fills shape/strides. */
dlp_Tensor *dlp_tensor_view(lua_State *L, const dlp_Tensor *t, int ndim);
/* A view with t's shape and strides, labelled with device (pinned/managed memory relabelled as cpu). */
dlp_Tensor *dlp_tensor_alias(lua_State *L, const dlp_Tensor *t, DLDevice device);
int64_t dlp_numel(const dlp_Tensor *t);
int dlp_is_contiguous(const dlp_Tensor *t);
void dlp_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);
size_t dlp_storage_bytes(int dtype, int64_t numel, uint64_t flags);
char *dlp_first_element(const dlp_Tensor *t);               /* data + byte_offset, for host memory */
void dlp_check_host(lua_State *L, const dlp_Tensor *t, const char *what);
void dlp_check_writable(lua_State *L, const dlp_Tensor *t, const char *what);
int dlp_check_dim(lua_State *L, int arg, int ndim, int extra); /* 1-based, negative from the end -> 0-based */
int64_t dlp_check_index(lua_State *L, int arg, int64_t size);   /* 1-based, negative from the end -> 0-based */
void dlp_check_shape(lua_State *L, int arg, int *ndim, int64_t *shape);
void dlp_gc_account(lua_State *L, size_t nbytes);           /* tell the collector about outside memory */
/* Each subsystem adds its functions to the module table, the tensor methods and the
 * tensor metatable, given as absolute stack indices. */
void dlp_tensor_register(lua_State *L, int module, int methods, int meta);

/* ---- views.c ---- */
void dlp_views_register(lua_State *L, int methods);

/* ---- copy.c ---- */

/* Copy src's elements into dst (same shape), converting dtype; safe when they overlap. Copies that
 * involve CUDA device memory go through dlp_cuda_copy, on stream (NULL: synchronously). */
void dlp_copy_on(lua_State *L, dlp_Tensor *dst, const dlp_Tensor *src, dlp_CudaStream *stream);
void dlp_copy_into(lua_State *L, dlp_Tensor *dst, const dlp_Tensor *src);
dlp_Tensor *dlp_clone(lua_State *L, const dlp_Tensor *t, int dtype, DLDevice device);
/* Call fn(ptr, ud) for each element of t in row-major order. */
/* Set every element of t to the Lua value at idx (strictly converted). */
void dlp_fill(lua_State *L, dlp_Tensor *t, int idx, const char *what);
void dlp_foreach(const dlp_Tensor *t, void (*fn)(char *p, void *ud), void *ud);
void dlp_copy_register(lua_State *L, int methods);

/* ---- format.c ---- */
void dlp_format_register(lua_State *L, int module, int methods, int meta);

/* ---- capsule.c ---- */
void *dlp_capsule_new(void *managed, int versioned, int from_lua);
int dlp_capsule_consume(void *capsule, void **managed, int *versioned);
int dlp_capsule_state(void *p, int *versioned, int *consumed);
void dlp_capsule_state_opened(void);
void dlp_capsule_state_closed(void);                       /* the last one hands back script capsules */
void *dlp_capsule_take(lua_State *L, int arg, int *versioned, const char *what); /* consume or raise */
void dlp_capsule_register(lua_State *L, int module);
void dlp_unsafe_register(lua_State *L, int module);

/* ---- protocol.c ---- */
DLManagedTensorVersioned *dlp_export_versioned(lua_State *L, dlp_Tensor *t, uint64_t extra_flags);
DLManagedTensor *dlp_export_legacy(lua_State *L, dlp_Tensor *t);
void dlp_import(lua_State *L, void *managed, int versioned); /* push a tensor; owns managed */
void dlp_protocol_register(lua_State *L, int module, int methods, int meta);

/* ---- cuda.c ---- */
void dlp_cuda_register(lua_State *L, int module);         /* the dlpack.cuda table */
int dlp_device_is_cuda(DLDevice d);                        /* cuda:N, cuda_host or cuda_managed */
/* Allocate on a CUDA device, pinned or managed memory; raises (naming CUDA) when impossible. */
void *dlp_cuda_alloc(lua_State *L, DLDevice device, size_t nbytes, int zeroed);
void dlp_cuda_free(DLDevice device, void *memory);          /* any thread */
/* Copy src into dst (same shape) where either is CUDA device memory; on stream (NULL: synchronously). */
void dlp_cuda_copy(lua_State *L, dlp_Tensor *dst, const dlp_Tensor *src, dlp_CudaStream *stream);
/* The stream at idx: a stream object, or a DLPack stream integer (1, 2, a handle > 2). NULL: -1 ("none"). */
dlp_CudaStream *dlp_cuda_check_stream(lua_State *L, int idx, DLDevice on, const char *what);
void dlp_cuda_stream_retain(dlp_CudaStream *s);
void dlp_cuda_stream_release(dlp_CudaStream *s);            /* any thread */
uintptr_t dlp_cuda_stream_handle(const dlp_CudaStream *s);  /* the DLPack integer for it */
/* Make `consumer` wait for the pending work on o's memory (DLPack producer rule). */
void dlp_cuda_order_for_consumer(lua_State *L, dlp_Owner *o, DLDevice device, dlp_CudaStream *consumer);
dlp_CudaStream *dlp_cuda_legacy(DLDevice on);               /* the legacy default stream for memory on `on` */
void dlp_cuda_settle(void);                                 /* wait for asynchronous copies, release their buffers */
/* C API: the stream object at idx, and a wrapped (non-owning) stream object for a host's stream. */
dlp_CudaStream *dlp_cuda_test_stream_object(lua_State *L, int idx);
void dlp_cuda_push_wrapped(lua_State *L, uintptr_t handle, int device);

/* ---- hostapi.c ---- */
void dlp_hostapi_register(lua_State *L);                    /* the registry function table */

#endif
