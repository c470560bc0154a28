/* Exchange: exporting tensors as managed tensors, importing (and validating) what
 * producers hand over, to_dlpack, from_dlpack, __dlpack and __dlpack_device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- export ---- */

/* One allocation per export: the managed struct, its owner reference, shape and strides. */
typedef struct ExportVersioned {
  DLManagedTensorVersioned managed;
  dlp_Owner *owner;
  int64_t dims[];
} ExportVersioned;

typedef struct ExportLegacy {
  DLManagedTensor managed;
  dlp_Owner *owner;
  int64_t dims[];
} ExportLegacy;

/* Deleters may run on any thread, after lua_close too: they touch no lua_State. */
static void delete_versioned(DLManagedTensorVersioned *self) {
  ExportVersioned *e = self->manager_ctx;
  dlp_owner_release(e->owner);
  free(e);
}

static void delete_legacy(DLManagedTensor *self) {
  ExportLegacy *e = self->manager_ctx;
  dlp_owner_release(e->owner);
  free(e);
}

/* Pointers on these devices are plain addresses, so the first element's address is exported
 * with byte_offset 0 (several consumers ignore byte_offset); elsewhere data may be opaque. */
static int addressable(DLDevice d) {
  return dlp_device_is_host(d) || d.device_type == kDLCUDA || d.device_type == kDLROCM;
}

static void fill_dltensor(DLTensor *out, const dlp_Tensor *t, int64_t *dims) {
  *out = t->dl;
  if (addressable(t->dl.device)) {
    out->data = dlp_first_element(t);
    out->byte_offset = 0;
  }
  memcpy(dims, t->dims, 2 * (size_t)t->dl.ndim * sizeof(int64_t));
  out->shape = dims;
  out->strides = dims + t->dl.ndim;
}

DLManagedTensorVersioned *dlp_export_versioned(lua_State *L, dlp_Tensor *t, uint64_t extra_flags) {
  ExportVersioned *e = malloc(sizeof *e + 2 * (size_t)t->dl.ndim * sizeof(int64_t));
  if (!e) luaL_error(L, "not enough memory to export a tensor");
  e->managed.version.major = DLPACK_MAJOR_VERSION;
  e->managed.version.minor = DLPACK_MINOR_VERSION;
  e->managed.manager_ctx = e;
  e->managed.deleter = delete_versioned;
  e->managed.flags = (t->flags & (DLP_FLAG_READ_ONLY | DLP_FLAG_SUBBYTE_PADDED)) | extra_flags;
  fill_dltensor(&e->managed.dl_tensor, t, e->dims);
  e->owner = t->owner;
  dlp_owner_retain(t->owner);
  return &e->managed;
}

DLManagedTensor *dlp_export_legacy(lua_State *L, dlp_Tensor *t) {
  if (t->flags & DLP_FLAG_READ_ONLY)
    dlp_buffer_error(L, "cannot export a read-only tensor as a legacy DLManagedTensor, which cannot say "
                        "read-only (ask for max_version >= {1, 0}, or copy = true)");
  if (t->flags & DLP_FLAG_SUBBYTE_PADDED)
    dlp_buffer_error(L, "cannot export a padded sub-byte tensor as a legacy DLManagedTensor");
  ExportLegacy *e = malloc(sizeof *e + 2 * (size_t)t->dl.ndim * sizeof(int64_t));
  if (!e) luaL_error(L, "not enough memory to export a tensor");
  e->managed.manager_ctx = e;
  e->managed.deleter = delete_legacy;
  fill_dltensor(&e->managed.dl_tensor, t, e->dims);
  e->owner = t->owner;
  dlp_owner_retain(t->owner);
  return &e->managed;
}

/* ---- import ---- */

/* Check a producer's DLTensor; on failure write why into msg and return 0. */
static int validate(const DLTensor *dl, uint64_t flags, char *msg, size_t len, int *dtype, size_t *nbytes) {
  int64_t numel = 1, lo = 0, hi = 0;
  if (dl->ndim < 0 || dl->ndim > DLP_MAX_NDIM)
    return snprintf(msg, len, "ndim %d is out of range (0 to %d)", (int)dl->ndim, DLP_MAX_NDIM), 0;
  if (dl->ndim > 0 && !dl->shape) return snprintf(msg, len, "shape is NULL for ndim %d", (int)dl->ndim), 0;
  if (!dlp_device_is_valid_type(dl->device.device_type))
    return snprintf(msg, len, "unknown device type %d", (int)dl->device.device_type), 0;
  if (dl->device.device_id < 0) return snprintf(msg, len, "negative device id %d", (int)dl->device.device_id), 0;
  if (dl->device.device_type == kDLCUDA && dl->device.device_id >= DLP_MAX_CUDA_DEVICES)
    return snprintf(msg, len, "CUDA device id %d is beyond %d", (int)dl->device.device_id, DLP_MAX_CUDA_DEVICES), 0;
  *dtype = dlp_dtype_from_dl(dl->dtype);
  if (*dtype < 0)
    return snprintf(msg, len, "unsupported dtype (code %d, bits %d, lanes %d)", dl->dtype.code, dl->dtype.bits,
                    dl->dtype.lanes), 0;
  for (int i = 0; i < dl->ndim; i++) {
    if (dl->shape[i] < 0) return snprintf(msg, len, "shape[%d] is negative (%lld)", i + 1, (long long)dl->shape[i]), 0;
    if (__builtin_mul_overflow(numel, dl->shape[i], &numel))
      return snprintf(msg, len, "the element count overflows 64 bits"), 0;
  }
  if (numel == 0) {
    *nbytes = 0;
    return 1; /* empty: data may be NULL and strides say nothing */
  }
  if (!dl->data) return snprintf(msg, len, "data is NULL for %lld elements", (long long)numel), 0;
  int64_t itemsize = dlp_dtypes[*dtype].itemsize;
  if (dlp_dtype_is_subbyte(*dtype) && !(flags & DLP_FLAG_SUBBYTE_PADDED)) {
    int64_t expected = 1;
    for (int i = dl->ndim - 1; dl->strides && i >= 0; i--) {
      if (dl->shape[i] != 1 && dl->strides[i] != expected)
        return snprintf(msg, len, "packed %s data must be contiguous", dlp_dtypes[*dtype].name), 0;
      expected *= dl->shape[i];
    }
    *nbytes = dlp_storage_bytes(*dtype, numel, flags);
    return 1;
  }
  /* The lowest and highest element offsets the strides reach must not overflow. */
  for (int i = 0; dl->strides && i < dl->ndim; i++) {
    int64_t reach;
    if (dl->shape[i] == 1) continue;
    if (__builtin_mul_overflow(dl->strides[i], dl->shape[i] - 1, &reach) ||
        __builtin_add_overflow(reach > 0 ? hi : lo, reach, reach > 0 ? &hi : &lo))
      return snprintf(msg, len, "strides reach beyond 64-bit offsets"), 0;
  }
  if (!dl->strides) hi = numel - 1;
  if (__builtin_mul_overflow(hi, itemsize, &hi) || __builtin_mul_overflow(lo, itemsize, &lo) ||
      dl->byte_offset > (uint64_t)INT64_MAX || (uintptr_t)dl->data + dl->byte_offset < (uintptr_t)dl->data ||
      (uint64_t)hi > UINTPTR_MAX - ((uintptr_t)dl->data + dl->byte_offset) ||
      (uint64_t)-lo > (uintptr_t)dl->data + dl->byte_offset)
    return snprintf(msg, len, "data, byte_offset and strides address memory beyond the address space"), 0;
  *nbytes = (size_t)(hi - lo) + (size_t)itemsize;
  return 1;
}

typedef struct ImportArgs {
  const DLTensor *dl;
  dlp_Owner *owner;
  uint64_t flags;
  int dtype;
} ImportArgs;

/* Runs protected: if making the userdata fails, the caller still owns the owner. */
static int push_imported(lua_State *L) {
  ImportArgs *a = lua_touserdata(L, 1);
  const DLTensor *dl = a->dl;
  dlp_Tensor *t = dlp_tensor_push(L, dl->ndim);
  t->dl.data = dl->data;
  t->dl.device = dl->device;
  t->dl.dtype = dl->dtype;
  t->dl.byte_offset = dl->byte_offset;
  t->dtype = a->dtype;
  t->flags = a->flags;
  if (dl->ndim > 0) memcpy(t->dl.shape, dl->shape, (size_t)dl->ndim * sizeof(int64_t));
  if (dl->ndim > 0 && dl->strides) memcpy(t->dl.strides, dl->strides, (size_t)dl->ndim * sizeof(int64_t));
  else dlp_contiguous_strides(dl->ndim, t->dl.shape, t->dl.strides);
  t->owner = a->owner;
  return 1;
}

void dlp_import(lua_State *L, void *managed, int versioned) {
  char msg[160];
  const DLTensor *dl;
  uint64_t flags = 0;
  ImportArgs a;
  size_t nbytes = 0;
  if (versioned) {
    DLManagedTensorVersioned *m = managed;
    if (m->version.major != DLPACK_MAJOR_VERSION) {
      lua_Integer major = m->version.major;
      dlp_managed_delete(managed, versioned); /* the only other field a foreign major allows */
      dlp_buffer_error(L, "unsupported DLPack major version %I (this module speaks %d.%d)", major,
                       DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION);
    }
    dl = &m->dl_tensor;
    flags = m->flags & (DLP_FLAG_READ_ONLY | DLP_FLAG_IS_COPIED | DLP_FLAG_SUBBYTE_PADDED);
  } else {
    dl = &((DLManagedTensor *)managed)->dl_tensor;
  }
  if (!validate(dl, flags, msg, sizeof msg, &a.dtype, &nbytes)) {
    dlp_managed_delete(managed, versioned);
    dlp_buffer_error(L, "invalid tensor from producer: %s", msg);
  }
  /* Our own export coming back: share its owner rather than stacking a second one on it. */
  if (versioned && ((DLManagedTensorVersioned *)managed)->deleter == delete_versioned) {
    a.owner = ((ExportVersioned *)((DLManagedTensorVersioned *)managed)->manager_ctx)->owner;
    dlp_owner_retain(a.owner);
  } else if (!versioned && ((DLManagedTensor *)managed)->deleter == delete_legacy) {
    a.owner = ((ExportLegacy *)((DLManagedTensor *)managed)->manager_ctx)->owner;
    dlp_owner_retain(a.owner);
  } else {
    a.owner = dlp_owner_new_managed(managed, versioned, nbytes);
    if (!a.owner) {
      dlp_managed_delete(managed, versioned);
      luaL_error(L, "not enough memory to import a tensor");
    }
    managed = NULL; /* the owner has it now */
  }
  a.dl = dl;
  a.flags = flags;
  lua_pushcfunction(L, push_imported);
  lua_pushlightuserdata(L, &a);
  int status = lua_pcall(L, 1, 1, 0);
  if (managed) dlp_managed_delete(managed, versioned); /* after push_imported read its fields */
  if (status != LUA_OK) {
    dlp_owner_release(a.owner);
    lua_error(L);
  }
  dlp_gc_account(L, nbytes);
}

/* ---- options shared by to_dlpack, __dlpack and from_dlpack ---- */

typedef struct ExportOptions {
  int legacy;      /* a legacy DLManagedTensor was asked for */
  int copy;        /* 1 always, 0 never, -1 when needed */
  int has_device;  /* a target device was named */
  DLDevice device;
  dlp_CudaStream *consumer; /* the stream the consumer will use; NULL: none, or no streams */
} ExportOptions;

/* max_version as {major, minor} or {major = , minor = }; returns the major (-1 when absent). */
static lua_Integer max_version_major(lua_State *L, int opts) {
  lua_Integer major;
  int isint;
  if (lua_getfield(L, opts, "max_version") == LUA_TNIL) {
    lua_pop(L, 1);
    return -1;
  }
  if (!lua_istable(L, -1)) luaL_error(L, "max_version must be a table {major, minor}, got %s", luaL_typename(L, -1));
  if (lua_geti(L, -1, 1) == LUA_TNIL) {
    lua_pop(L, 1);
    lua_getfield(L, -1, "major");
  }
  major = lua_tointegerx(L, -1, &isint);
  if (!isint || major < 0) luaL_error(L, "max_version: the major version must be a non-negative integer");
  lua_pop(L, 2);
  return major;
}

/* A device as a string or as {device_type, device_id} (the Python protocol's dl_device). */
static DLDevice check_device_value(lua_State *L, int idx, const char *what) {
  DLDevice d;
  if (lua_type(L, idx) == LUA_TSTRING) {
    if (!dlp_test_device_name(lua_tostring(L, idx), &d))
      luaL_error(L, "%s: unknown device '%s'", what, lua_tostring(L, idx));
    return d;
  }
  if (!lua_istable(L, idx)) luaL_error(L, "%s must be a device string or {device_type, device_id}", what);
  lua_geti(L, idx, 1);
  lua_geti(L, idx < 0 ? idx - 1 : idx, 2);
  int ok1, ok2;
  lua_Integer type = lua_tointegerx(L, -2, &ok1), id = lua_tointegerx(L, -1, &ok2);
  lua_pop(L, 2);
  if (!ok1 || !ok2) luaL_error(L, "%s must be {device_type, device_id} with two integers", what);
  if (!dlp_device_is_valid_type((int32_t)type) || type != (int32_t)type)
    dlp_buffer_error(L, "%s: unsupported device type %I", what, type);
  if (id < 0 || id > INT32_MAX) dlp_buffer_error(L, "%s: invalid device id %I", what, id);
  d.device_type = (DLDeviceType)type;
  d.device_id = (int32_t)id;
  return d;
}

static int check_copy_option(lua_State *L, int opts) {
  int copy = -1;
  int type = lua_getfield(L, opts, "copy");
  if (type == LUA_TBOOLEAN) copy = lua_toboolean(L, -1);
  else if (type != LUA_TNIL) luaL_error(L, "copy must be true, false or nil, got %s", luaL_typename(L, -1));
  lua_pop(L, 1);
  return copy;
}

/* Devices whose work is ordered by streams (DLPack: CUDA and ROCm; managed memory too). */
static int has_streams(DLDevice d) {
  return d.device_type == kDLCUDA || d.device_type == kDLCUDAManaged || d.device_type == kDLROCM;
}

/* The consumer's stream for work on device, from the value at idx (nil: the default). Pushes one
 * value that keeps the stream alive. NULL means "no synchronisation" (-1) or a device without
 * streams; ROCm streams cannot be ordered by this module. */
static dlp_CudaStream *consumer_stream(lua_State *L, int idx, DLDevice device, const char *what) {
  int isint = 0, given = idx != 0 && !lua_isnoneornil(L, idx);
  lua_Integer v = given ? lua_tointegerx(L, idx, &isint) : 0;
  if (!has_streams(device) || device.device_type == kDLROCM) {
    if (given && !(isint && v == -1)) {
      dlp_push_device_name(L, device);
      luaL_error(L, "%s: stream must be nil for a tensor on %s%s", what, lua_tostring(L, -1),
                 device.device_type == kDLROCM ? " (ROCm streams are not supported)" : ", which has no streams");
    }
    lua_pushnil(L);
    return NULL;
  }
  if (!given) { /* None: the producer assumes the legacy default stream */
    lua_pushnil(L);
    return dlp_cuda_legacy(device);
  }
  return dlp_cuda_check_stream(L, idx, device, what);
}

/* opts at index `opts` (or none). python_defaults: an absent max_version means legacy. */
static ExportOptions read_export_options(lua_State *L, int opts, const dlp_Tensor *t, int python_defaults,
                                         const char *what) {
  ExportOptions o = {python_defaults, -1, 0, {kDLCPU, 0}, NULL};
  if (lua_isnoneornil(L, opts)) {
    o.consumer = consumer_stream(L, 0, t->dl.device, what);
    return o;
  }
  luaL_checktype(L, opts, LUA_TTABLE);
  lua_Integer major = max_version_major(L, opts);
  if (major >= 0) o.legacy = major == 0;
  o.copy = check_copy_option(L, opts);
  if (lua_getfield(L, opts, "dl_device") != LUA_TNIL || (lua_pop(L, 1), lua_getfield(L, opts, "device")) != LUA_TNIL) {
    o.device = check_device_value(L, -1, what);
    o.has_device = 1;
  }
  lua_getfield(L, opts, "stream");
  o.consumer = consumer_stream(L, lua_gettop(L), t->dl.device, what);
  return o;
}

/* Memory this module can copy between: host-accessible, or CUDA (when CUDA is there). */
static int copyable(DLDevice d) {
  return dlp_device_is_host(d) || dlp_device_is_cuda(d);
}

/* ---- producing ---- */

/* The tensor to export for options o: t itself, a relabelled view or a copy (pushed). */
static dlp_Tensor *prepare_export(lua_State *L, dlp_Tensor *t, const ExportOptions *o, uint64_t *extra,
                                  const char *what) {
  DLDevice target = o->has_device ? o->device : t->dl.device;
  int same = dlp_device_equal(target, t->dl.device);
  int relabel = !same && target.device_type == kDLCPU && dlp_device_is_host(t->dl.device);
  int move = !same && !relabel;
  *extra = 0;
  if (move || o->copy == 1) {
    dlp_push_device_name(L, t->dl.device);
    dlp_push_device_name(L, target);
    if (!copyable(t->dl.device) || !copyable(target))
      dlp_buffer_error(L, "%s: cannot copy a tensor on %s to %s", what, lua_tostring(L, -2), lua_tostring(L, -1));
    if (o->copy == 0)
      dlp_buffer_error(L, "%s: exporting a tensor on %s to %s needs a copy, and copy = false", what,
                       lua_tostring(L, -2), lua_tostring(L, -1));
    lua_pop(L, 2);
    *extra = DLP_FLAG_IS_COPIED;
    return dlp_clone(L, t, t->dtype, target); /* synchronous: nothing pending for the consumer */
  }
  if (relabel) return dlp_tensor_alias(L, t, target);
  if (has_streams(t->dl.device)) dlp_cuda_order_for_consumer(L, t->owner, t->dl.device, o->consumer);
  lua_pushvalue(L, 1);
  return t;
}

static int export_capsule(lua_State *L, int python_defaults, const char *what) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  uint64_t extra;
  void *managed, *capsule;
  ExportOptions o = read_export_options(L, 2, t, python_defaults, what);
  dlp_Tensor *e = prepare_export(L, t, &o, &extra, what);
  if (o.legacy) managed = dlp_export_legacy(L, e);
  else managed = dlp_export_versioned(L, e, extra);
  capsule = dlp_capsule_new(managed, !o.legacy, 1);
  if (!capsule) {
    dlp_managed_delete(managed, !o.legacy);
    return luaL_error(L, "%s: too many unconsumed capsules", what);
  }
  lua_pushlightuserdata(L, capsule);
  return 1;
}

static int l_to_dlpack(lua_State *L) {
  return export_capsule(L, 0, "to_dlpack");
}

/* The Lua form of Python's __dlpack__: an absent max_version asks for a legacy capsule. */
static int l_dlpack(lua_State *L) {
  return export_capsule(L, 1, "__dlpack");
}

static int l_dlpack_device(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  lua_pushinteger(L, t->dl.device.device_type);
  lua_pushinteger(L, t->dl.device.device_id);
  return 2;
}

/* ---- consuming ---- */

/* Call x's __dlpack and import what it returns; leaves the tensor on top. stream: index of
 * opts.stream, or 0. As a consumer this module always names its stream on CUDA, never 0. */
static void import_from_producer(lua_State *L, int x, int copy, int stream) {
  DLDevice device = {kDLCPU, 0};
  dlp_CudaStream *consumer;
  if (luaL_getmetafield(L, x, "__dlpack") == LUA_TNIL)
    luaL_argerror(L, x, lua_pushfstring(L, "a capsule or a value with __dlpack expected, got %s", luaL_typename(L, x)));
  int is_c = lua_iscfunction(L, -1);
  if (luaL_getmetafield(L, x, "__dlpack_device") != LUA_TNIL) {
    int ok1, ok2;
    lua_pushvalue(L, x);
    lua_call(L, 1, 2);
    device.device_type = (DLDeviceType)lua_tointegerx(L, -2, &ok1);
    device.device_id = (int32_t)lua_tointegerx(L, -1, &ok2);
    if (!ok1 || !ok2) luaL_error(L, "from_dlpack: __dlpack_device must return two integers");
    lua_pop(L, 2);
  }
  consumer = consumer_stream(L, stream, device, "from_dlpack");
  lua_insert(L, -2); /* keep the stream below the function */
  lua_pushvalue(L, x);
  lua_createtable(L, 0, 3);
  lua_createtable(L, 2, 2);
  lua_pushinteger(L, DLPACK_MAJOR_VERSION);
  lua_pushvalue(L, -1);
  lua_rawseti(L, -3, 1);
  lua_setfield(L, -2, "major");
  lua_pushinteger(L, DLPACK_MINOR_VERSION);
  lua_pushvalue(L, -1);
  lua_rawseti(L, -3, 2);
  lua_setfield(L, -2, "minor");
  lua_setfield(L, -2, "max_version");
  if (copy >= 0) {
    lua_pushboolean(L, copy);
    lua_setfield(L, -2, "copy");
  }
  if (has_streams(device) && device.device_type != kDLROCM) {
    lua_pushinteger(L, consumer ? (lua_Integer)dlp_cuda_stream_handle(consumer) : -1);
    lua_setfield(L, -2, "stream");
  }
  lua_call(L, 2, 2);
  if (lua_type(L, -2) == LUA_TLIGHTUSERDATA && lua_type(L, -1) == LUA_TSTRING && is_c) {
    /* the raw form of a C producer that does not link this module: we own the pointer now */
    const char *name = lua_tostring(L, -1);
    void *managed = lua_touserdata(L, -2);
    int versioned = strcmp(name, "dltensor_versioned") == 0;
    if (!managed || (!versioned && strcmp(name, "dltensor") != 0))
      luaL_error(L, "from_dlpack: __dlpack returned a pointer named '%s' (expected dltensor or dltensor_versioned)", name);
    lua_pop(L, 2);
    dlp_import(L, managed, versioned);
  } else {
    int versioned, consumed;
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TLIGHTUSERDATA || !dlp_capsule_state(lua_touserdata(L, -1), &versioned, &consumed))
      luaL_error(L, "from_dlpack: __dlpack must return a capsule, got %s", luaL_typename(L, -1));
    void *managed = dlp_capsule_take(L, -1, &versioned, "from_dlpack");
    lua_pop(L, 1);
    dlp_import(L, managed, versioned);
  }
  /* the producer ordered its work before our stream: what follows on this memory is there */
  dlp_Tensor *t = lua_touserdata(L, -1);
  if (consumer && dlp_device_is_cuda(t->dl.device)) dlp_owner_set_stream(t->owner, consumer);
  lua_remove(L, -2); /* the stream keeper */
}

static int l_from_dlpack(lua_State *L) {
  int copy = -1, stream = 0, has_device = 0;
  DLDevice target = {kDLCPU, 0};
  luaL_checkany(L, 1);
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    copy = check_copy_option(L, 2);
    if (lua_getfield(L, 2, "device") != LUA_TNIL) {
      target = check_device_value(L, -1, "from_dlpack: device");
      has_device = 1;
    }
    if (lua_getfield(L, 2, "stream") != LUA_TNIL) stream = lua_gettop(L);
    else lua_pop(L, 1);
  }
  dlp_Tensor *own = dlp_tensor_test(L, 1);
  if (own) {
    /* one of ours: share its owner directly, as an export and import would */
    if (!own->owner) return luaL_argerror(L, 1, "tensor was released");
    dlp_CudaStream *consumer = consumer_stream(L, stream, own->dl.device, "from_dlpack");
    if (has_streams(own->dl.device)) dlp_cuda_order_for_consumer(L, own->owner, own->dl.device, consumer);
    dlp_tensor_alias(L, own, own->dl.device);
  } else if (lua_type(L, 1) == LUA_TLIGHTUSERDATA) {
    int versioned;
    void *managed = dlp_capsule_take(L, 1, &versioned, "from_dlpack");
    dlp_import(L, managed, versioned);
  } else {
    import_from_producer(L, 1, copy, stream);
  }
  dlp_Tensor *t = lua_touserdata(L, -1);
  if (!has_device) target = t->dl.device;
  if (dlp_device_equal(target, t->dl.device)) {
    if (copy == 1 && !(t->flags & DLP_FLAG_IS_COPIED)) dlp_clone(L, t, t->dtype, t->dl.device);
  } else if (target.device_type == kDLCPU && dlp_device_is_host(t->dl.device)) {
    /* pinned and managed memory is CPU memory: relabel it rather than copy */
    if (copy == 1) dlp_clone(L, t, t->dtype, target);
    else dlp_tensor_alias(L, t, target);
  } else {
    dlp_push_device_name(L, t->dl.device);
    dlp_push_device_name(L, target);
    if (copy == 0)
      return dlp_buffer_error(L, "from_dlpack: cannot move a tensor from %s to %s without copying (copy = false)",
                              lua_tostring(L, -2), lua_tostring(L, -1));
    if (!copyable(t->dl.device) || !copyable(target))
      return dlp_buffer_error(L, "from_dlpack: cannot copy a tensor from %s to %s", lua_tostring(L, -2),
                              lua_tostring(L, -1));
    lua_pop(L, 2);
    dlp_clone(L, t, t->dtype, target); /* we import natively, then copy ourselves */
  }
  return 1;
}

void dlp_protocol_register(lua_State *L, int module, int methods, int meta) {
  static const luaL_Reg functions[] = {{"to_dlpack", l_to_dlpack}, {"from_dlpack", l_from_dlpack}, {NULL, NULL}};
  static const luaL_Reg protocol[] = {{"__dlpack", l_dlpack}, {"__dlpack_device", l_dlpack_device}, {NULL, NULL}};
  dlp_register(L, module, functions);
  dlp_register(L, meta, protocol);
  dlp_register(L, methods, protocol);
}
