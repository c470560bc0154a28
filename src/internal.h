/* Declarations shared by the C files of the module; not installed. */
#ifndef DLPACK_LUA_INTERNAL_H
#define DLPACK_LUA_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "compat.h" /* <lua.h> and <lauxlib.h>, for every Lua from 5.1 on */
#include "dlpack_lua.h"
#include "platform.h" /* threads, libraries and pages on POSIX and Windows */

/*
 * How the safe API stays safe (every file follows these rules; a script may be hostile):
 *
 * 1. Tensor metadata is immutable. Once the function that made a dlp_Tensor returns, its dl
 *    fields, dtype and flags never change; release() only clears `owner` (never `dl.data`).
 * 2. Lua code can run inside most Lua API calls: the metamethods of an argument (reading an
 *    option, a shape, a length, tostring), and finalizers, which run during any allocation
 *    (userdata, strings, tables, buffers) and during the collector steps this module takes.
 *    That code may release any tensor. So a function reads its arguments into C values first,
 *    then allocates what it will push, and only then takes the memory of its tensors
 *    (dlp_live, dlp_view_new), after which it makes no call that can run Lua code. Functions
 *    that must allocate while they read memory (totable, tostring) read a private alias
 *    (dlp_tensor_alias), which holds the memory until they drop it, or the collector does if
 *    they raise. A method's holders are allocated before the reference they hold is taken.
 * 3. Every size, offset and extent is computed by layout.c, which checks for overflow, and
 *    every tensor made here is checked to reach only memory its owner holds (dlp_tensor_seal).
 * 4. Numbers from scripts and producers are range-checked before they are used as sizes,
 *    indices or device ids; the raw-pointer functions live in dlpack.unsafe alone.
 */

/* Refuses (a Lua error) to open the module in a Lua other than the one it is built for, asking
 * the code that called the entry point (src/runtime.c); `caller` is DLP_CALLER() evaluated there. */
void dlp_check_runtime(lua_State *L, const void *caller);

/* Tensors with more dimensions than this are refused (NumPy's NPY_MAXDIMS is 64). */
#define DLP_MAX_NDIM 64
/* CUDA device ids this module handles (0 to 63). */
#define DLP_MAX_CUDA_DEVICES 64

#define DLP_FLAG_READ_ONLY DLPACK_FLAG_BITMASK_READ_ONLY
#define DLP_FLAG_IS_COPIED DLPACK_FLAG_BITMASK_IS_COPIED
#define DLP_FLAG_SUBBYTE_PADDED DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED

/* ---- module.c: errors and per-state records ---- */

/* Add functions to the table at absolute index `table`, as closures whose first upvalue is the
 * tensor metatable (every C function of the module is one: see tensor.c). */
void dlp_register(lua_State *L, int table, const luaL_Reg *functions);
/* The metatable mt of a class of the module's userdata (streams, events, channels, listeners),
 * made once per state: __index is the methods table (registered as dlp_register does), or index,
 * a closure over it; close is __gc and __close; __tostring when given; __metatable the read-only
 * view (dlp_push_metatable_view). Leaves the stack as it was. */
void dlp_new_class(lua_State *L, const char *mt, const luaL_Reg *methods, lua_CFunction index, lua_CFunction close,
                   lua_CFunction tostring);

/* Raise an error marked DLPACK_LUA_BUFFER_ERROR: "cannot be exchanged as asked". */
int dlp_buffer_error(lua_State *L, const char *fmt, ...);

/* Objects that hold memory or driver resources (tensors, stream and event objects) and that
 * the module's cleanup at lua_close may have to release itself: see dlp_state_for_new. */
typedef struct dlp_Tracked dlp_Tracked;
struct dlp_Tracked {
  dlp_Tracked *next, **pprev; /* pprev is NULL while not tracked */
  void (*close)(dlp_Tracked *self);
};
void dlp_untrack(dlp_Tracked *node); /* idempotent */

/* The module's record of a lua_State (its main thread and coroutines share it). */
typedef struct dlp_State {
  uint64_t id;          /* unique in the process, never 0 */
  int closing;          /* the module's cleanup at lua_close has run */
  int isolated;         /* its scripts' capsules go back when it closes (dlpack_lua_isolate_capsules) */
  dlp_Tracked *tracked; /* objects its cleanup releases */
  size_t external;      /* bytes of new tensor memory since the last full collection it asked for */
  unsigned descriptors; /* descriptors held by new tensors since then (dlpack.ipc) */
  int files_denied;     /* dlpack.deny_file_access() ran: save and load raise (npy.c) */
} dlp_State;

/* The record of L; NULL when the module was never opened in L. */
dlp_State *dlp_state(lua_State *L);
/* Opens the module in L (as luaopen_dlpack, nothing pushed) unless it is open there: what the
 * modules that need its metatables and record call (dlpack.unsafe, dlpack.ipc). */
void dlp_open_once(lua_State *L);
/* Push the tensor methods as they were when the module opened in L (a copy; norm's excepted),
 * and one of them by name. */
void dlp_push_methods(lua_State *L);
void dlp_push_method(lua_State *L, const char *name);
/* Call before making a tensor, capsule, stream or event (`kind` names it: "a tensor"). Lua runs
 * no finalizer for objects made during lua_close (5.1 to 5.4), and finalizers made before
 * `require "dlpack"` run after the module's cleanup. So: after that cleanup this raises; and
 * while the collector does not run normally (inside a finalizer, lua_close included, or
 * stopped by the script; always on Lua 5.1) it returns the record, and the caller passes the
 * new object to dlp_track so that the cleanup releases it if nothing else does. Else NULL. */
dlp_State *dlp_state_for_new(lua_State *L, const char *kind);
void dlp_track(dlp_State *st, dlp_Tracked *node, void (*close)(dlp_Tracked *self));
/* Count nbytes of new tensor memory; whether a full collection is due now (see module.c). */
int dlp_state_external(lua_State *L, size_t nbytes);
int dlp_state_descriptor(lua_State *L); /* the same for one new descriptor a tensor holds */

/* ---- layout.c: checked arithmetic (each returns 0 on overflow and writes nothing useful) ---- */

int dlp_add(int64_t a, int64_t b, int64_t *out);
int dlp_mul(int64_t a, int64_t b, int64_t *out);
int dlp_numel_of(int ndim, const int64_t *shape, int64_t *numel);      /* also 0 for a negative size */
int dlp_is_packed(int dtype, uint64_t flags);                          /* fp4/fp6 stored bit-packed */
int dlp_bytes_of(int dtype, int64_t numel, uint64_t flags, int64_t *bytes); /* storage of numel elements */
void dlp_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides); /* row-major */

/* The bytes a layout's elements cover, relative to its first element: [lo, hi), lo <= 0 < hi
 * (both 0 when it is empty). Packed sub-byte layouts must be contiguous. */
typedef struct dlp_Span {
  int64_t numel;
  int64_t lo, hi;
} dlp_Span;
int dlp_span_of(int ndim, const int64_t *shape, const int64_t *strides, int dtype, uint64_t flags,
                dlp_Span *span);

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
int dlp_check_dtype(lua_State *L, int arg);                 /* a dtype name */
int dlp_opt_dtype(lua_State *L, int arg, int def);
int dlp_test_dtype_name(const char *name, size_t len);      /* -1 when unknown; torch aliases too ("float") */
/* Why the string name (len bytes) is no dtype, pushed: unknown, or cut by an embedded NUL. */
const char *dlp_push_dtype_error(lua_State *L, const char *name, size_t len);

/* One element as a value every element-accessible dtype converts through. */
typedef struct dlp_Scalar {
  enum { DLP_S_INT, DLP_S_UINT, DLP_S_FLOAT, DLP_S_COMPLEX } kind;
  int64_t i;
  uint64_t u;
  double re, im;
} dlp_Scalar;

/* Elements may sit at any address (producers need not align them): these load and store bytewise. */
void dlp_load(int dtype, const void *p, dlp_Scalar *s);  /* element -> scalar */
void dlp_store(int dtype, void *p, const dlp_Scalar *s); /* scalar -> element, C-like conversion */
void dlp_push_element(lua_State *L, int dtype, const void *p);
/* Convert the Lua value at idx to an element in out, strictly (integers must fit; on 5.3+ a Lua
 * integer gives uint64 its 64 bits, as reads do); raises naming `what`. Runs no Lua code: it may
 * be called between dlp_live and the write. */
void dlp_check_element(lua_State *L, int idx, int dtype, void *out, const char *what);
/* Raises unless the integer value v fits the integer dtype (a value: negatives never fit uint64). */
void dlp_check_integer_range(lua_State *L, int dtype, int64_t v, const char *what);
int dlp_integer_fits(int dtype, int64_t v); /* the same test, for an integer dtype, without raising */
void dlp_check_access(lua_State *L, int dtype);            /* raises unless element access works */

/* Type promotion for computing (NumPy 2's result_type; bfloat16 promotes as float16 does, and
 * with float16 to float32). Dtypes that compute: bool, the integers, float16, bfloat16, float32,
 * float64, complex64, complex128; the 8-, 6- and 4-bit floats do not. */
int dlp_dtype_computes(int dtype);
int dlp_dtype_kind(int dtype);                 /* 0 bool, 1 unsigned, 2 signed, 3 float, 4 complex */
void dlp_check_computes(lua_State *L, int dtype, const char *what); /* raises: convert first */
int dlp_promote(int a, int b);                 /* -1 when either does not compute */
int dlp_promote_many(int n, const int *dtypes); /* NumPy's order-independent promotion of n >= 1 */
int dlp_can_cast_same_kind(int from, int to);  /* NumPy's casting='same_kind' */

/* ---- convert.c: typed loops over one row of elements ---- */

/* Copy n elements (converting when the dtypes differ) from s to d, each advancing by its stride
 * in bytes. */
typedef void (*dlp_RowFn)(char *d, int64_t dstep, const char *s, int64_t sstep, int64_t n);
dlp_RowFn dlp_row_function(int dst_dtype, int src_dtype);   /* NULL when they do not convert */
/* Set n elements of itemsize bytes each, dstep bytes apart, to the bytes at value. */
void dlp_fill_row(char *d, int64_t dstep, const void *value, int64_t n, size_t itemsize);
float dlp_half_to_float(uint16_t h);
float dlp_bfloat_to_float(uint16_t h);
uint16_t dlp_half_from_double(double d);
uint16_t dlp_bfloat_from_double(double d);
/* A 64-bit integer as a double rounded to odd, for one correct rounding to float32, float16 or
 * bfloat16 after it (a double rounded to nearest would round twice). */
double dlp_int64_to_odd_double(int64_t v);
/* Whether v is a double exactly: every integer up to 2^53, and beyond those whose low bits are zeros. */
int dlp_int64_is_double(int64_t v);
double dlp_uint64_to_odd_double(uint64_t v);

/* ---- device.c ---- */

/* Every DLDevice the module holds passed dlp_device_is_valid: a known type, an id >= 0, and
 * for the CUDA kinds an id below DLP_MAX_CUDA_DEVICES (cuda.c indexes tables with it). */
int dlp_device_is_valid(DLDevice d);
int dlp_device_is_valid_type(int64_t device_type);
int dlp_device_is_host(DLDevice d);        /* the CPU can read and write it */
int dlp_device_equal(DLDevice a, DLDevice b);
/* Its data pointers are plain addresses (elsewhere data may be an opaque handle: only
 * byte_offset may move). */
int dlp_device_is_addressable(DLDevice d);
int dlp_device_has_streams(DLDevice d);    /* work on it is ordered by streams (CUDA, managed, ROCm) */
int dlp_device_is_cuda(DLDevice d);        /* cuda:N, cuda_host or cuda_managed */
/* A device string ("cuda:1") or table ({device_type, device_id}) at idx; errors blame argument
 * arg, and name the option `field` when it is not NULL. */
DLDevice dlp_check_device(lua_State *L, int idx, int arg, const char *field);
/* Parse the device string s (len bytes) into out: DLP_DEVICE_OK, or what is wrong with it. */
enum { DLP_DEVICE_OK, DLP_DEVICE_UNKNOWN, DLP_DEVICE_NUL, DLP_DEVICE_NO_ID, DLP_DEVICE_BAD_ID, DLP_DEVICE_ID_RANGE };
int dlp_parse_device_name(const char *s, size_t len, DLDevice *out);
/* The message for a code of dlp_parse_device_name other than DLP_DEVICE_OK, pushed. */
const char *dlp_push_device_error(lua_State *L, const char *s, size_t len, int code);
void dlp_push_device_name(lua_State *L, DLDevice d);       /* canonical form */
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
  size_t nbytes;  /* memory held */
  unsigned char mapped; /* memory came from mmap (cpu) */
  unsigned char inline_memory; /* memory lies in this owner's own allocation (a small cpu block) */
  /* memory a Lua value owns (dlpack.unsafe.wrap): nothing to free, every tensor on it keeps that
   * value alive (dlp_keep), and it never leaves its lua_State (exports copy it) */
  unsigned char lua_owned;
  uintptr_t lo, hi; /* the addresses [lo, hi) that tensors on this memory may reach */
  /* CUDA: the stream the last work on this memory was issued on (NULL: the legacy default stream) */
  _Atomic(dlp_CudaStream *) stream;
  /* shareable memory (dlpack.ipc): the memfd that `memory` maps from file offset fd_offset, or -1;
   * on a CUDA device the driver's exported descriptor of the allocation mapped at `memory` (all
   * nbytes of it, fd_offset 0: ipc_cuda.c) */
  int fd;
  int64_t fd_offset;
};

dlp_Owner *dlp_owner_new_memory(size_t nbytes, int zeroed); /* cpu; NULL when out of memory */
dlp_Owner *dlp_owner_new_block(void *memory, DLDevice device, size_t nbytes); /* takes memory */
void dlp_owner_set_stream(dlp_Owner *o, dlp_CudaStream *s);  /* cuda.c; retains s, releases the old one */
dlp_Owner *dlp_owner_new_managed(void *managed, int versioned, size_t nbytes, uintptr_t lo, uintptr_t hi);
void dlp_owner_retain(dlp_Owner *o);
void dlp_owner_release(dlp_Owner *o);                       /* any thread */
void dlp_managed_delete(void *managed, int versioned);      /* calls a producer's deleter if any */

/* ---- tensor.c ---- */

typedef struct dlp_Tensor {
  DLTensor dl;      /* shape and strides point into dims[]; never changed after creation */
  dlp_Owner *owner; /* NULL once released */
  dlp_Tracked track; /* see dlp_state_for_new */
  uint64_t flags;   /* DLPack flag bits: READ_ONLY, IS_SUBBYTE_TYPE_PADDED */
  int dtype;        /* dlp_Dtype */
  int64_t dims[];   /* shape[ndim] then strides[ndim] */
} dlp_Tensor;

/* These find the tensor metatable in the first upvalue of the running C function (dlp_register);
 * the _with forms take it at a stack index, for the C API, which runs outside the module. */
void dlp_push_metatable(lua_State *L);                      /* from the registry */
dlp_Tensor *dlp_tensor_push(lua_State *L, int ndim);        /* unowned, filled by the caller */
dlp_Tensor *dlp_tensor_push_with(lua_State *L, int ndim, int metatable);
dlp_Tensor *dlp_tensor_test(lua_State *L, int idx);         /* NULL unless a tensor (live or not) */
dlp_Tensor *dlp_tensor_test_with(lua_State *L, int idx, int metatable);
dlp_Tensor *dlp_tensor_arg(lua_State *L, int idx);          /* a tensor (live or not), else raises */
dlp_Tensor *dlp_tensor_check(lua_State *L, int idx);        /* a live tensor, else raises */
dlp_Tensor *dlp_tensor_check_with(lua_State *L, int idx, int metatable);
/* Raises "<what>: ... released" unless t is live; call it after the last call that can run Lua
 * code and before touching t's memory. */
void dlp_live(lua_State *L, const dlp_Tensor *t, const char *what);
/* A new contiguous tensor with fresh memory (cpu or CUDA); flags may say SUBBYTE_PADDED; alloc:
 * 0, or DLP_ALLOC_ZEROED, or DLP_ALLOC_SHAREABLE (dlpack.ipc's memory, always zeroed). An
 * allocation: it may run finalizers. */
enum { DLP_ALLOC_ZEROED = 1, DLP_ALLOC_SHAREABLE = 2 };
dlp_Tensor *dlp_tensor_new(lua_State *L, int dtype, uint64_t flags, DLDevice device, int ndim,
                           const int64_t *shape, int alloc, const char *what);
/* empty/zeros(shape [, dtype [, device]]) with the arguments from 1 on: the new tensor, pushed. */
int dlp_create(lua_State *L, int alloc, const char *what);
/* A new view of the tensor at idx, pushed: allocated first, then the source is checked live and
 * its dtype, device, data, offset, flags and owner taken; the caller fills shape and strides,
 * may move the first element (dlp_view_move) and must finish with dlp_tensor_seal. */
dlp_Tensor *dlp_view_new(lua_State *L, int idx, int ndim, const char *what);
/* Move v's first element by index * stride elements (checked); an empty view does not move (its
 * strides may be anything a producer gave). Raises naming what on overflow. */
void dlp_view_move(lua_State *L, dlp_Tensor *v, int64_t index, int64_t stride, const char *what);
/* Check that v reaches only memory its owner holds; raises (and v holds nothing) otherwise. */
void dlp_tensor_seal(lua_State *L, dlp_Tensor *v, const char *what);
/* A view of the tensor at idx with its shape and strides, labelled with device (pinned and
 * managed memory relabelled as cpu). Private to the caller, it also holds memory for functions
 * that read it while they allocate. */
dlp_Tensor *dlp_tensor_alias(lua_State *L, int idx, DLDevice device, const char *what);
void dlp_tensor_release(dlp_Tensor *t);                     /* idempotent */
int64_t dlp_numel(const dlp_Tensor *t);                     /* fits: checked when t was made */
/* Bytes from one element to the next along dimension i, for walking t's elements: 0 when the
 * walk never steps along it (size 0 or 1, where strides say nothing and may be anything). */
int64_t dlp_walk_stride(const dlp_Tensor *t, int i);
/* p moved by n bytes, as integer arithmetic (p may be NULL for empty tensors). */
static inline char *dlp_offset(const char *p, int64_t n) { return (char *)((uintptr_t)p + (uintptr_t)n); }
/* |v|, for the byte strides of tensors the module accepted (whose extents fit in int64). */
static inline int64_t dlp_magnitude(int64_t v) { return v < 0 ? -v : v; }
int64_t dlp_nbytes(const dlp_Tensor *t);                    /* likewise */
int dlp_is_contiguous(const dlp_Tensor *t);
char *dlp_first_element(const dlp_Tensor *t);               /* data + byte_offset, for host memory */
void dlp_check_host(lua_State *L, const dlp_Tensor *t, const char *what);
void dlp_check_writable(lua_State *L, const dlp_Tensor *t, const char *what);
/* luaL_checkinteger, luaL_optinteger and luaL_optnumber without Lua's conversion of strings:
 * "2" is no size, index, dimension or tolerance here (docs/api.md, "Shapes as numbers"). */
lua_Integer dlp_checkinteger(lua_State *L, int arg);
lua_Integer dlp_optinteger(lua_State *L, int arg, lua_Integer def);
lua_Number dlp_optnumber(lua_State *L, int arg, lua_Number def);
int dlp_check_dim(lua_State *L, int arg, int ndim, int extra); /* 1-based, negative from the end -> 0-based */
int64_t dlp_check_index(lua_State *L, int arg, int64_t size);   /* 1-based, negative from the end -> 0-based */
/* A list of at most `max` integers (a shape, a permutation) from the table at arg, each at least
 * `min`; returns the count. Reads through metamethods, so call it before touching memory. */
int dlp_check_integers(lua_State *L, int arg, int64_t *out, int max, int64_t min, const char *what);
/* A shape (non-negative sizes whose product fits in int64) from the table at arg. */
int dlp_check_shape(lua_State *L, int arg, int64_t *shape);
/* Keep the value at `value` alive as long as the tensor userdata at `tensor` lives (a weak-keyed
 * registry table); dlp_keep_copy gives the tensor at `to` what the one at `from` keeps. Both can
 * allocate: call them before taking memory. */
void dlp_keep(lua_State *L, int tensor, int value);
void dlp_keep_copy(lua_State *L, int from, int to);
/* Guards the tensors kept for the Lua owner at index owner against its finalizer: they are
 * released just before it runs (Lua 5.2 and later; see tensor.c). */
void dlp_keep_guard(lua_State *L, int owner);
/* What getmetatable gives for the module's userdata (tensors, streams, events): a read-only view
 * of the metatable at `meta` (its fields read through, writes raise). A script that could write
 * the metatable could remove __gc, and every object, made before or after, would leak. */
void dlp_push_metatable_view(lua_State *L, int meta);
/* Tell the collector about memory new to this state (an allocation point: may run finalizers). */
void dlp_gc_account(lua_State *L, size_t nbytes);
/* Each subsystem adds its functions to the module table, the tensor methods and the
 * tensor metatable, given as absolute stack indices. */
void dlp_tensor_register(lua_State *L, int module, int methods, int meta);

/* ---- create.c: more ways to make tensors ---- */

/* A list of at most `max` integers, each at least `min`, given as a table at arg (read as
 * dlp_check_integers does) or as the numbers from arg on (torch7's zeros(2, 3), t:view(2, -1));
 * *next is the argument after the list. Raises naming `what` ("shape") and the argument. */
int dlp_check_integer_args(lua_State *L, int arg, int64_t *out, int max, int64_t min, const char *what, int *next);
/* A shape so given (non-negative sizes whose product fits in int64). */
int dlp_check_shape_args(lua_State *L, int arg, int64_t *shape, int *next);
/* The element 1 (true for bool) of dtype into out; raises for dtypes without element access. */
void dlp_one_element(lua_State *L, int dtype, void *out);
/* A new contiguous tensor, pushed, every element the itemsize bytes at element (on a CUDA
 * device: filled on the host, then copied). An allocation: it may run finalizers. */
dlp_Tensor *dlp_tensor_filled(lua_State *L, int dtype, DLDevice device, int ndim, const int64_t *shape,
                              const void *element, const char *what);
void dlp_create_register(lua_State *L, int module, int methods, int meta);

/* ---- random.c: rand, randn, randint and manual_seed (xoshiro256** per lua_State) ---- */
void dlp_random_register(lua_State *L, int module, int methods, int meta);

/* ---- views.c ---- */
void dlp_views_register(lua_State *L, int methods);
void dlp_flip_register(lua_State *L, int module, int methods, int meta); /* t:flip, dlpack.flip */
void dlp_push_reversed(lua_State *L); /* t.T of the tensor at 1: its dimensions reversed, a view */
void dlp_shape_register(lua_State *L, int module, int methods, int meta); /* shape.c: split, tile, tril... */

/* ---- copy.c ---- */

/* Copy src's elements into dst (same shape), converting dtype; correct when they overlap.
 * Both must stay on the stack. Copies that involve CUDA device memory go through dlp_cuda_copy,
 * on stream (NULL: synchronously). Allocates (a temporary, staging) before it takes memory. */
void dlp_copy(lua_State *L, dlp_Tensor *dst, dlp_Tensor *src, dlp_CudaStream *stream, const char *what);
/* Do the bytes a and b reach overlap? Host memory: by address, whoever owns it, and through two
 * of dlpack.ipc's mappings of one memfd by the file's offsets. Device memory: views of one owner.
 * Every writer that reads other tensors asks this (copy, elementwise out= and in place). */
int dlp_overlaps(const dlp_Tensor *a, const dlp_Tensor *b);
/* t's elements (host memory) in row-major order into out, which has room for them. */
void dlp_gather(char *out, const dlp_Tensor *t);
/* A contiguous copy of the tensor at idx with dtype on device, pushed. */
dlp_Tensor *dlp_clone(lua_State *L, int idx, int dtype, DLDevice device, dlp_CudaStream *stream,
                      const char *what);
/* Set every element of t to the Lua value at idx (strictly converted). */
void dlp_fill(lua_State *L, dlp_Tensor *t, int idx, const char *what);
void dlp_copy_register(lua_State *L, int methods);

/* ---- options.c: the option tables of to, copy, to_dlpack, __dlpack and from_dlpack ---- */

typedef struct dlp_Options {
  int dtype;            /* -1: not given */
  int has_device;       /* device or dl_device given */
  DLDevice device;
  int copy;             /* 1 always, 0 never, -1 (absent) when needed */
  int64_t max_major;    /* -1: max_version absent */
  int stream;           /* stack index of the stream value, 0 when absent */
} dlp_Options;

enum { DLP_OPT_DTYPE = 1, DLP_OPT_DEVICE = 2, DLP_OPT_COPY = 4, DLP_OPT_STREAM = 8, DLP_OPT_MAX_VERSION = 16 };

/* Read the options table at arg (0 or nil: none) into o, for the options `allowed` (others are
 * ignored); pushes the stream value when there is one (o->stream). Raises argument errors for
 * wrong values, BufferErrors for devices that cannot be reached. Reads through metamethods, so
 * call it before touching memory. */
void dlp_read_options(lua_State *L, int arg, unsigned allowed, dlp_Options *o);
/* Names a script passes are compared with their length: a NUL inside one ends it for C. */
const char *dlp_push_quoted(lua_State *L, const char *s, size_t len); /* 'name', a NUL as \0 */
const char *dlp_push_shape(lua_State *L, int ndim, const int64_t *shape); /* "{2, 3}", for messages */
/* The index in names (NULL-terminated) of the string argument arg, as luaL_checkoption, but
 * refusing a string with an embedded NUL (what: "capsule name"). */
int dlp_check_option(lua_State *L, int arg, const char *const names[], const char *what);
/* Raises unless the arguments from first on are all nil (what: the function, how: what it takes). */
void dlp_check_no_more(lua_State *L, int first, const char *what, const char *how);

/* ---- compute/threads.c: large CPU operations on several threads ----
 * dlp_parallel_for runs task(ctx, i) for every i in [0, n_tasks), on the host's job system, the
 * module's pool or the calling thread, in any order and at the same time, and returns when all
 * have returned. Call it after every Lua-side step of the operation: tasks run C loops only (no
 * lua_State, no Lua allocation, no error), each writing memory no other task writes. The split
 * into tasks depends on the operation's sizes only (DLP_TASK_ELEMENTS), never on the number of
 * threads, so that results are the same on any. dlp_parallel_enabled: whether splitting can pay
 * (more than one thread, or a host's job system, and not already inside a task). */
#ifdef DLPACK_LUA_TEST_TASK_ELEMENTS /* the test build's (Makefile: GEN_TASKS) */
#define DLP_TASK_ELEMENTS ((int64_t)DLPACK_LUA_TEST_TASK_ELEMENTS)
#else
#define DLP_TASK_ELEMENTS ((int64_t)1 << 16) /* the least work worth a task of its own */
#endif
typedef void (*dlp_TaskFn)(void *ctx, int64_t i);
void dlp_parallel_for(int64_t n_tasks, dlp_TaskFn task, void *ctx);
int dlp_parallel_enabled(void);
/* How many threads the pool now runs a job on (the caller among them); 0 under a host's job
 * system, whose width the module does not know. Only for splits whose results cannot depend on it. */
int dlp_parallel_width(void);
void dlp_threads_register(lua_State *L, int module); /* dlpack.set_num_threads, get_num_threads */

/* ---- iter.c: one walk over the elements of several operands (the computing functions') ----
 * The operands (the output first, by convention) share one shape; each has its own byte strides,
 * 0 along dimensions it is broadcast over. dlp_iter_init drops size-1 dimensions, orders the
 * others so that the innermost is the one the first operand steps through fastest (when `reorder`
 * is set), and merges dimensions that are contiguous in every operand. dlp_iter_run then calls
 * the loop once per innermost row: n elements, operand k at data[k], steps[k] bytes apart. */
#define DLP_ITER_MAX_OPS 4
typedef struct dlp_Iter {
  int nops, ndim;
  int64_t numel;                                   /* 0: nothing to visit */
  int64_t shape[DLP_MAX_NDIM];                     /* the innermost dimension last */
  int64_t strides[DLP_ITER_MAX_OPS][DLP_MAX_NDIM]; /* bytes */
  char *data[DLP_ITER_MAX_OPS];
} dlp_Iter;
typedef void (*dlp_IterLoop)(void *ctx, char *const *data, const int64_t *steps, int64_t n);
void dlp_iter_init(dlp_Iter *it, int nops, int ndim, const int64_t *shape, char *const *data,
                   const int64_t (*strides)[DLP_MAX_NDIM], int reorder);
void dlp_iter_init_row(dlp_Iter *it, int nops, int64_t n, char *const *data, const int64_t *steps);
void dlp_iter_run(const dlp_Iter *it, dlp_IterLoop loop, void *ctx);
/* dlp_iter_run split into tasks of consecutive elements (dlp_parallel_for) when the walk is large,
 * the threads are there and the output (operand 0, elements of out_itemsize bytes) writes no byte
 * twice; each task starts at a multiple of `align` elements along the innermost row. The loop must
 * keep nothing of its own between calls (ctx is shared by the tasks). */
void dlp_iter_run_parallel(const dlp_Iter *it, dlp_IterLoop loop, void *ctx, int64_t out_itemsize, int64_t align);
/* Whether a walk of `shape` (ndim) with these byte strides writes no byte twice: its dimensions,
 * by stride, each step past all the elements of the ones inside it (a sufficient test; a stride
 * of 0 fails it). Elements of itemsize bytes. */
int dlp_writes_each_byte_once(int ndim, const int64_t *shape, const int64_t *strides, int64_t itemsize);
/* dlp_iter_run split into tasks of consecutive elements, each task with a context of its own
 * (a loop that records what it met, such as the first bad index). dlp_iter_split says into how
 * many (at most max_tasks; 0: not split, when the walk is small, the threads are not there or the
 * output, operand 0 with elements of out_itemsize bytes, may write a byte twice; out_itemsize 0:
 * operand 0 is not written); dlp_iter_run_tasks runs them, task i on ctxs + i * ctx_size, tasks
 * of equal length (the last shorter) in the walk's order: the first task's elements come first. */
int64_t dlp_iter_split(const dlp_Iter *it, int64_t max_tasks, int64_t out_itemsize);
void dlp_iter_run_tasks(const dlp_Iter *it, int64_t tasks, dlp_IterLoop loop, void *ctxs, size_t ctx_size);
/* dlp_iter_run over elements [start, end) of the walk only, in row-major order of its dimensions
 * (0 < ndim, start < end <= numel). */
void dlp_iter_run_range(const dlp_Iter *it, int64_t start, int64_t end, dlp_IterLoop loop, void *ctx);
/* dlp_iter_run over indices [lo, hi) of dimension dim only (the others whole). */
void dlp_iter_run_slice(const dlp_Iter *it, int dim, int64_t lo, int64_t hi, dlp_IterLoop loop, void *ctx);
/* Call fn once per line along dimension dim (0-based) of the nops tensors (the same shape but
 * along dim, where each may have its own size): p[k] is where operand k's line starts (host memory).
 * With parts > 1 (dlp_line_parts of t[0], asked before the scratch was made: one per thread at
 * most) the lines are split into that many parts of consecutive lines at most, run as tasks
 * (dlp_parallel_for): fn then
 * keeps nothing between lines outside its part's scratch (scratch + part * scratch_bytes; NULL
 * when fn needs none), and every line's output is memory of its own (a new result). Each line is
 * computed as on one thread, so the results do not depend on the split. */
typedef void (*dlp_LineFn)(void *ctx, char *const *p, char *scratch);
int64_t dlp_line_parts(const dlp_Tensor *t, int dim); /* 1: one walk on this thread */
void dlp_each_line(int nops, const dlp_Tensor *const *t, int dim, dlp_LineFn fn, void *ctx, int64_t parts,
                   char *scratch, size_t scratch_bytes);
/* The broadcast shape of n shapes (NumPy's rule); raises naming the two shapes that differ. */
int dlp_broadcast_shapes(lua_State *L, int n, const dlp_Tensor *const *tensors, int64_t *shape, const char *what);
/* t's byte strides for walking it as `shape` (its own shape aligned at the last dimension): 0
 * along dimensions it is stretched over, and where it steps nowhere (dlp_walk_stride). */
void dlp_broadcast_strides(const dlp_Tensor *t, int ndim, const int64_t *shape, int64_t *strides);

/* ---- kernels.c: the typed inner loops of the elementwise functions ---- */
enum {
  /* two inputs */
  DLP_OP_ADD, DLP_OP_SUB, DLP_OP_MUL, DLP_OP_DIV, DLP_OP_IDIV, DLP_OP_MOD, DLP_OP_POW, DLP_OP_MAXIMUM,
  DLP_OP_MINIMUM, DLP_OP_EQ, DLP_OP_NE, DLP_OP_LT, DLP_OP_LE, DLP_OP_GT, DLP_OP_GE, DLP_OP_LOGICAL_AND,
  DLP_OP_LOGICAL_OR, DLP_OP_LOGICAL_XOR, DLP_OP_BAND, DLP_OP_BOR, DLP_OP_BXOR, DLP_OP_SHL, DLP_OP_SHR,
  /* three: where(cond, a, b), clamp(x, lo, hi) */
  DLP_OP_WHERE, DLP_OP_CLAMP,
  /* one input */
  DLP_OP_NEG, DLP_OP_ABS, DLP_OP_SIGN, DLP_OP_SQRT, DLP_OP_EXP, DLP_OP_LOG, DLP_OP_LOG1P, DLP_OP_EXPM1,
  DLP_OP_SIN, DLP_OP_COS, DLP_OP_TAN, DLP_OP_TANH, DLP_OP_SIGMOID, DLP_OP_FLOOR, DLP_OP_CEIL, DLP_OP_ROUND,
  DLP_OP_TRUNC, DLP_OP_ISNAN, DLP_OP_ISINF, DLP_OP_ISFINITE, DLP_OP_LOGICAL_NOT, DLP_OP_BNOT,
  /* more math, one input then two (appended: the lists keep the enum's order) */
  DLP_OP_LOG2, DLP_OP_LOG10, DLP_OP_ASIN, DLP_OP_ACOS, DLP_OP_ATAN, DLP_OP_SINH, DLP_OP_COSH, DLP_OP_ERF,
  DLP_OP_RSQRT, DLP_OP_RECIPROCAL, DLP_OP_SQUARE, DLP_OP_ATAN2, DLP_OP_HYPOT,
  DLP_OP_COUNT
};
/* The dtypes loops compute in: bool, int8 .. int64, uint8 .. uint64, float32, float64 (indices
 * 0 to DLP_NCOMPUTE - 1), then complex64 and complex128. */
#define DLP_NCOMPUTE 11
int dlp_compute_index(int dtype);            /* -1 when loops do not compute in it */
dlp_IterLoop dlp_kernel(int op, int compute_dtype); /* NULL when op has no loop for it */
/* The loop of a comparison (DLP_OP_EQ .. DLP_OP_GE) of int64 with uint64, exact: x_unsigned
 * says which one comes first (data[1]); NULL for other ops. */
dlp_IterLoop dlp_mixed_kernel(int op, int x_unsigned);
/* dlpack.cpu(): which build of the loops runs (platform.h's dlp_cpu_level) */
void dlp_kernels_register(lua_State *L, int module);
/* The CUDA kernel of the same loop (kernels.cu), and its family; NULL when there is none. */
const char *dlp_kernel_name(int op, int compute_dtype, int *family);
const char *dlp_mixed_kernel_name(int op, int x_unsigned, int *family);

/* ---- on_cuda.c: the computing functions' work on CUDA device memory, as kernels ----
 * dlp_run_on_cuda: one launch of `kernel` (of `family`) over nops operands as the iteration
 * engine would walk them (operand 0 the output; a NULL tensor is the scalar values[k], in the
 * kernel's type; sizes[k] the element size the kernel reads), on `stream` (NULL: the operands').
 * dlp_copy_on_cuda: dst = src (same shape, one device, any strides), converting between the real
 * dtypes; others raise. dlp_fill_on_cuda: every element of t set to `element` (t's dtype). */
void dlp_run_on_cuda(lua_State *L, const char *what, dlp_CudaStream *stream, int nops, int ndim, const int64_t *shape,
                     char *const *data, const int64_t (*strides)[DLP_MAX_NDIM], dlp_Tensor *const *tensors,
                     const void *const *values, const int *sizes, const char *kernel, int family);
void dlp_copy_on_cuda(lua_State *L, dlp_Tensor *dst, dlp_Tensor *src, dlp_CudaStream *stream, const char *what);
/* dlp_launch_with_params: likewise for kernels whose operands are all tensors (sizes[k] bytes an
 * element, checked aligned), on the operands' stream, with 6 int64 parameters in the launch's
 * value slots 1 to 3 (kernels.cu's P(0) .. P(5)). */
void dlp_launch_with_params(lua_State *L, const char *what, const char *kernel, int family, int nops, int ndim,
                            const int64_t *shape, char *const *data, const int64_t (*strides)[DLP_MAX_NDIM],
                            dlp_Tensor *const *tensors, const int *sizes, const int64_t *params);
/* index.c: the int64s of the contiguous CUDA tensor at idx made their running sums, in place
 * (kernels); the last int64 of the CUDA tensor at idx (not empty), read back (a synchronisation) */
void dlp_scan_on_device(lua_State *L, int idx, const char *what);
int64_t dlp_last_on_device(lua_State *L, int idx, const char *what);
/* t (a new contiguous CUDA tensor) filled with a range: kind 0 arange of int64 start and step, 1
 * arange of double start and step, 2 linspace (params: 48 bytes, as kernels.cu reads them); and
 * the diagonal of a new zeroed n x m CUDA tensor set to element (eye) */
void dlp_range_on_cuda(lua_State *L, dlp_Tensor *t, int kind, const void *params, const char *what);
/* every element of t (a new contiguous CUDA tensor) written by `kernel` (of `family`), which reads
 * its parameters from the launch's value slots 1 to 3 (params: 48 bytes) */
void dlp_generate_on_cuda(lua_State *L, dlp_Tensor *t, const char *kernel, int family, const void *params,
                          const char *what);
void dlp_diagonal_on_cuda(lua_State *L, dlp_Tensor *t, const void *element, const char *what);
/* the kernel (and its family) that copies src_dtype elements into dst_dtype ones; raises when none */
const char *dlp_cuda_copy_kernel(lua_State *L, int dst_dtype, int src_dtype, int *family, const char *what);
void dlp_fill_on_cuda(lua_State *L, dlp_Tensor *t, const void *element, dlp_CudaStream *stream, const char *what);

/* ---- operands.c: the operands and options of the computing functions ---- */

/* The options table of a computing function: out (elementwise), dtype, keepdim and correction
 * (reductions). Unknown keys are refused, so that a misspelt option is not silently dropped. */
typedef struct dlp_ComputeOptions {
  int out;           /* stack index of the out tensor, 0 when absent (the value stays there) */
  int dtype;         /* -1: not given */
  int keepdim;       /* 0 or 1 */
  int has_correction;
  double correction; /* var/std; finite */
  int stream;        /* stack index of the stream value, 0 when absent (checked with dlp_cuda_check_stream) */
} dlp_ComputeOptions;
enum { DLP_COPT_OUT = 1, DLP_COPT_DTYPE = 2, DLP_COPT_KEEPDIM = 4, DLP_COPT_CORRECTION = 8, DLP_COPT_STREAM = 16 };
/* Read the table at arg (none or nil: defaults) for the options `allowed`; what names the function. */
void dlp_read_compute_options(lua_State *L, int arg, unsigned allowed, dlp_ComputeOptions *o, const char *what);
/* Raises unless out can receive a result of rdtype and rshape: the same shape, writable, no
 * element repeated (an expanded view), a dtype rdtype casts to (same_kind, or safe when `safe`). */
void dlp_check_out(lua_State *L, const dlp_Tensor *out, int rdtype, int ndim, const int64_t *rshape, int safe,
                   const char *what);

/* The device a computing function runs on: the CUDA device whose memory the tensors are in (an
 * operand or out; NULL entries are skipped), or -1 for the host. Tensors on two devices raise
 * naming both (nothing is copied behind the script's back); host tensors must be readable by the
 * CPU; CUDA must be available. */
int dlp_compute_device(lua_State *L, dlp_Tensor *const *t, int n, const char *what);
/* Functions composed of others call this on their tensors first: a tensor of pinned or managed
 * memory (cuda_host, cuda_managed, rocm_host) at idx is replaced by a cpu view of it, so that
 * what they make on the way (copies, ranges, temporaries) is made on the CPU, where the functions
 * they call compute such memory, rather than on its device, which only a CUDA driver allocates. */
void dlp_host_as_cpu(lua_State *L, int idx, const char *what);

/* ---- sort.c: sort argsort topk median quantile unique; scan.c: cumsum cumprod softmax log_softmax ---- */
void dlp_sort_register(lua_State *L, int module, int methods, int meta);
void dlp_scan_register(lua_State *L, int module, int methods, int meta);
void dlp_norm_register(lua_State *L, int module, int methods, int meta); /* norm.c: linalg.norm */

/* ---- reduce.c: sum prod mean var std min max argmin argmax any all ---- */
void dlp_reduce_register(lua_State *L, int module, int methods, int meta);
/* Whether every element of the tensor at idx is true, as t:all() answers it (on its device: a CUDA
 * tensor's kernels run there); errors name `what`. For the functions that end in one (equal). */
int dlp_reduce_all(lua_State *L, int idx, const char *what);

/* ---- elementwise.c: arithmetic, comparisons, math, where, clamp, the operators ---- */
void dlp_elementwise_register(lua_State *L, int module, int methods, int meta);
/* The output bytes from which results are stored past the cache (0: never; run_streamed). */
int64_t dlp_stream_from(void);

/* ---- values.c: Lua values <-> tensors ---- */
void dlp_format_register(lua_State *L, int module, int methods, int meta);

/* ---- capsule.c ---- */
/* Who gets an unconsumed capsule back: nobody (a host's: DLP_CAPSULE_HOST), the producers of the
 * capsules scripts made when the last state closes (DLP_CAPSULE_SCRIPT), or the producer when
 * the state with that dlp_State id closes (a C producer's capsule for a script). */
#define DLP_CAPSULE_HOST 0
#define DLP_CAPSULE_SCRIPT UINT64_MAX
/* Who gets a capsule a script in L makes: DLP_CAPSULE_SCRIPT, or L's id when the host isolated it. */
uint64_t dlp_capsule_holder(lua_State *L);
void dlp_capsule_isolate(dlp_State *st); /* dlpack_lua_isolate_capsules */
void *dlp_capsule_new(void *managed, int versioned, uint64_t holder);
int dlp_capsule_consume(void *capsule, void **managed, int *versioned);
int dlp_capsule_state(void *p, int *versioned, int *consumed);
void dlp_capsule_state_opened(void);
/* The state with id `state` closed: its capsules go back, and the script capsules too when it
 * was the last one open. */
void dlp_capsule_state_closed(uint64_t state);
/* Push a capsule for managed that is handed back when L closes unless consumed first (the C
 * API's push_capsule); takes ownership: the deleter runs once if this raises. */
void dlp_capsule_push_for_state(lua_State *L, void *managed, int versioned, const char *what);
void *dlp_capsule_take(lua_State *L, int arg, int *versioned, const char *what); /* consume or raise */
/* look(managed, versioned) for a live capsule, called under the table's lock (so the tensor
 * cannot be consumed and freed meanwhile); -1 when it is not one. */
int dlp_capsule_peek(void *capsule, int (*look)(void *managed, int versioned));
void dlp_capsule_register(lua_State *L, int module);
void dlp_unsafe_register(lua_State *L, int module);

/* ---- protocol.c ---- */
/* Errors name `what`, the function that exports. */
DLManagedTensorVersioned *dlp_export_versioned(lua_State *L, dlp_Tensor *t, uint64_t extra_flags, const char *what);
DLManagedTensor *dlp_export_legacy(lua_State *L, dlp_Tensor *t, const char *what);
/* Push a tensor for a producer's managed tensor (the C API's push functions); owns it: its
 * deleter runs exactly once, also when this raises. */
void dlp_import(lua_State *L, void *managed, int versioned, const char *what);
void dlp_protocol_register(lua_State *L, int module, int methods, int meta);

/* ---- cuda.c ---- */
void dlp_cuda_register(lua_State *L, int module);         /* the dlpack.cuda table */
/* Allocate on a CUDA device, pinned or managed memory; raises (naming CUDA) when impossible. */
void *dlp_cuda_alloc(lua_State *L, DLDevice device, size_t nbytes, int zeroed, const char *what);
void dlp_cuda_free(DLDevice device, void *memory);          /* any thread */
/* The same, for memory whose last work was issued on `last` (an owner's recorded stream; NULL:
 * the legacy stream): device memory from a pool is freed in that stream's order (cuda.c). */
void dlp_cuda_free_after(DLDevice device, void *memory, const dlp_CudaStream *last);
/* Copy src into dst (same shape) where either is CUDA device memory; on stream (NULL: synchronously). */
void dlp_cuda_copy(lua_State *L, dlp_Tensor *dst, dlp_Tensor *src, dlp_CudaStream *stream, const char *what);
/* launch.c: a kernel of the computing functions (src/compute/cuda/kernels.cu) on `stream`, after
 * the pending work on each operand; the operands' memory is held until it ran, and their later
 * work waits for it; takes (releases) launch->stream. dlp_cuda_compute_stream: the stream a
 * computing function runs on (retained;
 * NULL when no operand is CUDA memory): `given` (opts.stream), else the first CUDA operand's. */
struct dlp_ElementwiseArgs;
typedef struct dlp_CudaLaunch {
  const char *what;
  int family;          /* the kernel's family (a compute type's index, kernels.cu) */
  const char *kernel;  /* its name, a static string */
  dlp_CudaStream *stream;
  dlp_Tensor *operands[4];
  int noperands;
  const struct dlp_ElementwiseArgs *args;
} dlp_CudaLaunch;
void dlp_cuda_launch(lua_State *L, const dlp_CudaLaunch *launch);
void dlp_cuda_require(lua_State *L, const char *what); /* raises when CUDA is not available */
dlp_CudaStream *dlp_cuda_compute_stream(dlp_Tensor *const *operands, int n, dlp_CudaStream *given);
/* The stream the value at idx names for work on device `on` (idx 0 or nil: `dflt`, a DLPack
 * stream value): a stream object, or one of the DLPack stream values -1, 1, 2 (integer handles
 * are raw pointers and refused). Devices without streams take nil or -1 only. Pushes one value
 * that holds the stream while the caller keeps it on the stack. NULL means -1: no ordering. */
dlp_CudaStream *dlp_cuda_check_stream(lua_State *L, int idx, DLDevice on, int dflt, const char *what);
void dlp_cuda_stream_release(dlp_CudaStream *s);            /* any thread */
uintptr_t dlp_cuda_stream_handle(const dlp_CudaStream *s);  /* the DLPack integer for it */
/* Make `consumer` wait for the pending work on o's memory (DLPack producer rule). */
void dlp_cuda_order_for_consumer(lua_State *L, dlp_Owner *o, DLDevice device, dlp_CudaStream *consumer,
                                 const char *what);
void dlp_cuda_settle(void);                                 /* wait for all queued work, let go of what it held */
void dlp_cuda_reap(void); /* owner.c, on every last release: cheaply let go of memory held for completed work */
/* An export made for a consumer stream: at the deleter, its memory is released after the work the
 * consumer queued on that stream by then (dlp_cuda_release_after, any thread, after lua_close
 * too; takes the owner reference and h). dlp_cuda_hold_drop: the export came back to this module. */
typedef struct dlp_CudaHold dlp_CudaHold;
dlp_CudaHold *dlp_cuda_hold_for_consumer(dlp_CudaStream *consumer, DLDevice device); /* NULL: no memory */
void dlp_cuda_release_after(dlp_CudaHold *h, dlp_Owner *o);
void dlp_cuda_hold_drop(dlp_CudaHold *h);
/* C API and dlpack.unsafe: the stream object at idx, and a wrapped (non-owning) stream object
 * for a foreign handle. */
dlp_CudaStream *dlp_cuda_test_stream_object(lua_State *L, int idx);
void dlp_cuda_push_wrapped(lua_State *L, uintptr_t handle, int device);
int dlp_cuda_wrap_stream(lua_State *L);                    /* dlpack.unsafe.wrap_stream */

/* cublas.c: cuBLAS, opened at run time (DLPACK_LUA_CUBLAS chooses; see there). A grid of matrix
 * products C = A B of one float dtype, each as CBLAS's row-major call would take it: for each
 * index of the outer dimensions, a strided batch of `count` products (count 1: one product). */
typedef struct dlp_CudaGemm {
  int dtype;            /* of a, b and c: DLP_FLOAT16, DLP_BFLOAT16, DLP_FLOAT32 or DLP_FLOAT64 */
  int trans_a, trans_b; /* the factor is stored transposed (CblasTrans) */
  int m, n, k;
  int lda, ldb;         /* elements between the rows (of the transposed matrix when trans); c: n */
  char *a, *b, *c;      /* the first product's matrices: device addresses of their first elements */
  int count;            /* products in a strided batch */
  int64_t stride_a, stride_b, stride_c; /* elements between the matrices of a batch */
  int nouter;           /* the batch repeats over these dimensions, */
  int64_t outer[DLP_MAX_NDIM];
  int64_t outer_step[3][DLP_MAX_NDIM]; /* moving a, b and c by these bytes */
} dlp_CudaGemm;
int dlp_cuda_blas_ready(void); /* whether cuBLAS was found (looked for the first time); any thread */
/* Queue g on stream (taken) as dlp_cuda_launch queues a kernel: operands are the result, a and b. */
void dlp_cuda_gemm(lua_State *L, const char *what, dlp_CudaStream *stream, dlp_Tensor *const operands[3],
                   const dlp_CudaGemm *g);

/* ---- blas.c: the system's CBLAS, opened at run time (DLPACK_LUA_BLAS chooses; see there) ---- */
typedef void (*dlp_SgemmFn)(int order, int transa, int transb, int m, int n, int k, float alpha, const float *a,
                            int lda, const float *b, int ldb, float beta, float *c, int ldc);
typedef void (*dlp_DgemmFn)(int order, int transa, int transb, int m, int n, int k, double alpha, const double *a,
                            int lda, const double *b, int ldb, double beta, double *c, int ldc);
typedef struct dlp_Blas {
  dlp_SgemmFn sgemm;
  dlp_DgemmFn dgemm;
  const char *name; /* the library, as it was opened */
} dlp_Blas;
const dlp_Blas *dlp_blas(void); /* NULL: none (the module's kernel computes); any thread */
void dlp_blas_register(lua_State *L, int module, int methods, int meta);

/* ---- matmul.c: dlpack.matmul, dlpack.dot ---- */
void dlp_matmul_register(lua_State *L, int module, int methods, int meta);

/* ---- join.c: dlpack.cat, dlpack.stack ---- */
void dlp_join_register(lua_State *L, int module, int methods, int meta);

/* ---- index.c: nonzero, argwhere, count_nonzero, masked_select, index_select, gather, scatter, take ---- */
void dlp_index_register(lua_State *L, int module, int methods, int meta);
/* r = the slices of t along dim 1 in the order of perm (1-D int64 of 1-based indices, each in range),
 * r, t and perm CUDA tensors of one device, r of t's dtype and shape: index_select's launch, unchecked */
void dlp_select_slices_on_cuda(lua_State *L, dlp_Tensor *r, dlp_Tensor *t, dlp_Tensor *perm, const char *what);

/* ---- ipc.c: dlpack.ipc, tensors shared between processes (docs/ipc.md) ---- */
int dlp_is_shareable(const dlp_Tensor *t);      /* t.shareable: its memory is a memfd's */
/* An owner of nbytes of fresh shareable memory on device (zeroed); raises naming what. */
dlp_Owner *dlp_ipc_new_owner(lua_State *L, DLDevice device, size_t nbytes, const char *what);
void dlp_ipc_unmap(dlp_Owner *o);               /* owner.c, on the last release: unmap, close fd */
/* Whether the host address ranges [a_lo, a_hi) and [b_lo, b_hi) reach the same bytes of one memfd
 * through two of this module's mappings of it (one block received twice, or sent and received in
 * one process); 0 at once when there are none. Any thread. */
int dlp_ipc_shares_file_bytes(uintptr_t a_lo, uintptr_t a_hi, uintptr_t b_lo, uintptr_t b_hi);
/* After a tensor holding a new descriptor is complete: collect when many were made (module.c). */
void dlp_ipc_account_descriptor(lua_State *L);

/* ---- ipc_cuda.c: shareable CUDA memory for dlpack.ipc (cuMemCreate, exported as a POSIX fd) ---- */
/* An owner of at least nbytes of zeroed device memory (rounded up to the granularity) whose fd is
 * the driver's exported descriptor; raises naming what. */
dlp_Owner *dlp_ipc_cuda_new_owner(lua_State *L, DLDevice device, size_t nbytes, const char *what);
/* Import the driver's descriptor fd (taken: kept by the owner, or closed) for an allocation of
 * size bytes and map all of it on device; NULL and why on failure, with nothing left behind. */
dlp_Owner *dlp_ipc_cuda_import(int fd, DLDevice device, uint64_t size, char *why, size_t whylen);
/* Before a send: wait for the work pending on o (device), and for stream's (NULL: none) or, with
 * whole_device, everything queued on the device's context; raises naming what. */
void dlp_ipc_cuda_settle(lua_State *L, dlp_Owner *o, DLDevice device, dlp_CudaStream *stream, int whole_device,
                         const char *what);
void dlp_ipc_cuda_unmap(dlp_Owner *o);          /* dlp_ipc_unmap for CUDA owners (any thread) */

/* ---- npy.c: dlpack.save and dlpack.load (NumPy's .npy files) ---- */
void dlp_npy_register(lua_State *L, int module);

/* ---- hostapi.c ---- */
void dlp_hostapi_register(lua_State *L);                    /* the registry function table */

#endif
