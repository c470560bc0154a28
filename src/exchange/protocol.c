/* Exchange: exporting tensors as managed tensors, importing (and validating) what
 * producers hand over, to_dlpack, from_dlpack, __dlpack and __dlpack_device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- export ---- */

/* One allocation per export: the managed struct, its owner reference, shape and strides. An
 * export made for a consumer stream also has `after`: the consumer may still have work queued on
 * that stream that uses the memory when it calls the deleter, so the owner is released after it.
 * An export also keeps what it handed out (sent, and a copy of its shape and strides after them
 * in dims), so that one handed back as it was needs no check: the host owns it, and may have
 * edited it first. */
typedef struct ExportVersioned {
  DLManagedTensorVersioned managed;
  dlp_Owner *owner;
  dlp_CudaHold *after;
  int dtype;
  uint64_t sent_flags;
  DLTensor sent;
  int64_t dims[]; /* shape, strides, then their copies */
} ExportVersioned;

typedef struct ExportLegacy {
  DLManagedTensor managed;
  dlp_Owner *owner;
  dlp_CudaHold *after;
  int dtype;
  DLTensor sent;
  int64_t dims[];
} ExportLegacy;

static void release_export(dlp_Owner *owner, dlp_CudaHold *after) {
  if (after) dlp_cuda_release_after(after, owner);
  else dlp_owner_release(owner);
}

/* Deleters may run on any thread, after lua_close too: they touch no lua_State. */
static void delete_versioned(DLManagedTensorVersioned *self) {
  ExportVersioned *e = self->manager_ctx;
  release_export(e->owner, e->after);
  free(e);
}

static void delete_legacy(DLManagedTensor *self) {
  ExportLegacy *e = self->manager_ctx;
  release_export(e->owner, e->after);
  free(e);
}

/* On devices whose pointers are addresses the first element's address is exported with
 * byte_offset 0 (several consumers ignore byte_offset); elsewhere data may be opaque. */
static void fill_dltensor(DLTensor *out, const dlp_Tensor *t, int64_t *dims) {
  *out = t->dl;
  if (dlp_device_is_addressable(t->dl.device)) {
    out->data = dlp_first_element(t);
    out->byte_offset = 0;
  }
  for (int i = 0, n = 2 * t->dl.ndim; i < n; i++) dims[i] = dims[n + i] = t->dims[i]; /* few: no memcpy call */
  out->shape = dims;
  out->strides = dims + t->dl.ndim;
}

/* Whether dl is still the DLTensor an export sent, with the dims it sent. */
static int export_intact(const DLTensor *dl, const DLTensor *sent, const int64_t *dims) {
  int n = 2 * sent->ndim;
  if (dl->data != sent->data || dl->device.device_type != sent->device.device_type ||
      dl->device.device_id != sent->device.device_id || dl->ndim != sent->ndim || dl->dtype.code != sent->dtype.code ||
      dl->dtype.bits != sent->dtype.bits || dl->dtype.lanes != sent->dtype.lanes || dl->shape != dims ||
      dl->strides != dims + sent->ndim || dl->byte_offset != sent->byte_offset)
    return 0;
  for (int i = 0; i < n; i++)
    if (dims[i] != dims[n + i]) return 0;
  return 1;
}

/* Memory a Lua value owns (dlpack.unsafe.wrap) is freed when that value is collected, at the
 * latest by lua_close, while a consumer may call an export's deleter later or on another thread:
 * it is never exported as it is (to_dlpack and __dlpack copy it; the C API refuses). */
static void check_exportable(lua_State *L, const dlp_Tensor *t, const char *what) {
  if (t->owner->lua_owned)
    dlp_buffer_error(L, "%s: the memory is owned by a Lua value (dlpack.unsafe.wrap) and cannot outlive "
                        "its lua_State; export a copy (copy = true)", what);
}

/* Both run no Lua code: t is checked live, then referenced. */
DLManagedTensorVersioned *dlp_export_versioned(lua_State *L, dlp_Tensor *t, uint64_t extra_flags, const char *what) {
  dlp_live(L, t, what);
  check_exportable(L, t, what);
  ExportVersioned *e = malloc(sizeof *e + 4 * (size_t)t->dl.ndim * sizeof(int64_t));
  if (!e) luaL_error(L, "%s: not enough memory to export a tensor", what);
  e->managed.version.major = DLPACK_MAJOR_VERSION;
  e->managed.version.minor = DLPACK_MINOR_VERSION;
  e->managed.manager_ctx = e;
  e->managed.deleter = delete_versioned;
  e->managed.flags = (t->flags & (DLP_FLAG_READ_ONLY | DLP_FLAG_SUBBYTE_PADDED)) | extra_flags;
  fill_dltensor(&e->managed.dl_tensor, t, e->dims);
  e->sent = e->managed.dl_tensor;
  e->sent_flags = e->managed.flags;
  e->owner = t->owner;
  e->after = NULL;
  e->dtype = t->dtype;
  dlp_owner_retain(t->owner);
  return &e->managed;
}

DLManagedTensor *dlp_export_legacy(lua_State *L, dlp_Tensor *t, const char *what) {
  dlp_live(L, t, what);
  check_exportable(L, t, what);
  if (t->flags & DLP_FLAG_READ_ONLY)
    dlp_buffer_error(L, "%s: cannot export a read-only tensor as a legacy DLManagedTensor, which cannot say "
                        "read-only (ask for max_version >= {1, 0}, or copy = true)", what);
  if (t->flags & DLP_FLAG_SUBBYTE_PADDED)
    dlp_buffer_error(L, "%s: cannot export a padded sub-byte tensor as a legacy DLManagedTensor", what);
  ExportLegacy *e = malloc(sizeof *e + 4 * (size_t)t->dl.ndim * sizeof(int64_t));
  if (!e) luaL_error(L, "%s: not enough memory to export a tensor", what);
  e->managed.manager_ctx = e;
  e->managed.deleter = delete_legacy;
  fill_dltensor(&e->managed.dl_tensor, t, e->dims);
  e->sent = e->managed.dl_tensor;
  e->owner = t->owner;
  e->after = NULL;
  e->dtype = t->dtype;
  dlp_owner_retain(t->owner);
  return &e->managed;
}

/* ---- import ---- */

typedef struct Checked {
  int dtype;
  int64_t strides[DLP_MAX_NDIM]; /* the producer's, or row-major when it gave NULL */
  uintptr_t lo, hi;              /* the addresses its elements span */
  size_t nbytes;
} Checked;

/* Check a producer's DLTensor; on failure write why into msg and return 0. */
static int validate(const DLTensor *dl, uint64_t flags, char *msg, size_t len, Checked *c) {
  dlp_Span span;
  if (dl->ndim < 0 || dl->ndim > DLP_MAX_NDIM)
    return snprintf(msg, len, "ndim %d is out of range (0 to %d)", (int)dl->ndim, DLP_MAX_NDIM), 0;
  if (dl->ndim > 0 && !dl->shape) return snprintf(msg, len, "shape is NULL for ndim %d", (int)dl->ndim), 0;
  if (!dlp_device_is_valid(dl->device))
    return snprintf(msg, len, "unsupported device (type %d, id %d; CUDA ids go up to %d)", (int)dl->device.device_type,
                    (int)dl->device.device_id, DLP_MAX_CUDA_DEVICES - 1), 0;
  c->dtype = dlp_dtype_from_dl(dl->dtype);
  if (c->dtype < 0)
    return snprintf(msg, len, "unsupported dtype (code %d, bits %d, lanes %d)", dl->dtype.code, dl->dtype.bits,
                    dl->dtype.lanes), 0;
  for (int i = 0; i < dl->ndim; i++)
    if (dl->shape[i] < 0) return snprintf(msg, len, "shape[%d] is negative (%lld)", i + 1, (long long)dl->shape[i]), 0;
  if (dl->ndim > 0 && dl->strides) memcpy(c->strides, dl->strides, (size_t)dl->ndim * sizeof(int64_t));
  else dlp_contiguous_strides(dl->ndim, dl->shape, c->strides);
  if (!dlp_span_of(dl->ndim, dl->shape, c->strides, c->dtype, flags, &span))
    return snprintf(msg, len, dlp_is_packed(c->dtype, flags) ? "packed %s data must be contiguous"
                                                             : "the element count or the strides overflow 64 bits",
                    dlp_dtypes[c->dtype].name), 0;
  uintptr_t data = (uintptr_t)dl->data, first = data + (uintptr_t)dl->byte_offset;
  if (span.numel == 0) { /* empty: data may be NULL and strides say nothing */
    c->lo = c->hi = first;
    c->nbytes = 0;
    return 1;
  }
  if (!dl->data) return snprintf(msg, len, "data is NULL for %lld elements", (long long)span.numel), 0;
  if (dl->byte_offset > (uint64_t)INT64_MAX || first < data || first < (uintptr_t)0 - (uintptr_t)span.lo ||
      (uintptr_t)span.hi > UINTPTR_MAX - first)
    return snprintf(msg, len, "data, byte_offset and strides address memory beyond the address space"), 0;
  c->lo = first + (uintptr_t)span.lo;
  c->hi = first + (uintptr_t)span.hi;
  c->nbytes = (size_t)(c->hi - c->lo);
  return 1;
}

/* The ndim a managed tensor says it has, clamped to what a tensor can hold (a wrong one is
 * refused by validate later); 0 for a versioned one of a foreign major, whose fields cannot be
 * read. */
static int stated_ndim(void *managed, int versioned) {
  const DLTensor *dl;
  if (versioned) {
    DLManagedTensorVersioned *m = managed;
    if (m->version.major != DLPACK_MAJOR_VERSION) return 0;
    dl = &m->dl_tensor;
  } else {
    dl = &((DLManagedTensor *)managed)->dl_tensor;
  }
  return dl->ndim < 0 || dl->ndim > DLP_MAX_NDIM ? 0 : dl->ndim;
}

/* This module's own export, imported back: the new tensor takes over the export's reference to
 * its owner (no count changes hands), so nothing orders its release after a consumer stream. */
static void drop_export(void *managed, int versioned) {
  dlp_CudaHold *after;
  if (versioned) {
    ExportVersioned *e = ((DLManagedTensorVersioned *)managed)->manager_ctx;
    after = e->after;
    free(e);
  } else {
    ExportLegacy *e = ((DLManagedTensor *)managed)->manager_ctx;
    after = e->after;
    free(e);
  }
  if (after) dlp_cuda_hold_drop(after);
}

/* Fill t (pushed, owning nothing, made for `stated_ndim` dimensions) from the producer's
 * managed tensor, which it now owns: its deleter runs exactly once, at once if this raises.
 * Allocates nothing, so nothing can fail between taking the tensor and handing it to t. */
static void import_into(lua_State *L, dlp_Tensor *t, void *managed, int versioned, int *copied) {
  char msg[160];
  const DLTensor *dl;
  uint64_t flags = 0;
  Checked c;
  if (copied) *copied = 0;
  if (versioned) {
    DLManagedTensorVersioned *m = managed;
    if (m->version.major != DLPACK_MAJOR_VERSION) {
      lua_Integer major = m->version.major;
      dlp_managed_delete(managed, versioned); /* the only other field a foreign major allows */
      dlp_buffer_error(L, "unsupported DLPack major version %I (this module speaks %d.%d)", major,
                       DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION);
    }
    dl = &m->dl_tensor;
    flags = m->flags & (DLP_FLAG_READ_ONLY | DLP_FLAG_SUBBYTE_PADDED);
    if (copied) *copied = (m->flags & DLP_FLAG_IS_COPIED) != 0;
  } else {
    dl = &((DLManagedTensor *)managed)->dl_tensor;
  }
  /* Our own export coming back: its owner is shared rather than a second one stacked on it (its
   * memory is known to the collector already), and it is checked only if it was edited. */
  dlp_Owner *owner = NULL;
  int intact = 0;
  if (versioned && ((DLManagedTensorVersioned *)managed)->deleter == delete_versioned) {
    ExportVersioned *e = ((DLManagedTensorVersioned *)managed)->manager_ctx;
    owner = e->owner;
    intact = ((DLManagedTensorVersioned *)managed)->flags == e->sent_flags && export_intact(dl, &e->sent, e->dims);
    c.dtype = e->dtype;
  } else if (!versioned && ((DLManagedTensor *)managed)->deleter == delete_legacy) {
    ExportLegacy *e = ((DLManagedTensor *)managed)->manager_ctx;
    owner = e->owner;
    intact = export_intact(dl, &e->sent, e->dims);
    c.dtype = e->dtype;
  }
  if (intact) {
    for (int i = 0; i < dl->ndim; i++) c.strides[i] = dl->strides[i];
  } else if (!validate(dl, flags, msg, sizeof msg, &c) ||
             (dl->ndim != t->dl.ndim && snprintf(msg, sizeof msg, "ndim changed while it was imported"))) {
    dlp_managed_delete(managed, versioned);
    dlp_buffer_error(L, "invalid tensor from producer: %s", msg);
  }
  if (dlp_dtypes[c.dtype].bits >= 8) flags &= ~(uint64_t)DLP_FLAG_SUBBYTE_PADDED; /* it says nothing there */
  int shared = owner != NULL;
  if (!shared) {
    owner = dlp_owner_new_managed(managed, versioned, c.nbytes, c.lo, c.hi);
    if (!owner) {
      dlp_managed_delete(managed, versioned);
      luaL_error(L, "not enough memory to import a tensor");
    }
  }
  t->dl.data = dl->data;
  t->dl.device = dl->device;
  t->dl.dtype = dl->dtype;
  t->dl.byte_offset = dl->byte_offset;
  t->dtype = c.dtype;
  t->flags = flags;
  for (int i = 0; i < dl->ndim; i++) { /* a few dimensions: a loop costs less than memcpy calls */
    t->dl.shape[i] = dl->shape[i];
    t->dl.strides[i] = c.strides[i];
  }
  t->owner = owner;
  if (shared) drop_export(managed, versioned); /* our export: its reference is t's now */
  else dlp_gc_account(L, c.nbytes);            /* memory new to this state */
}

/* Consume the capsule at arg into a new tensor, pushed. The tensor is allocated before the
 * capsule is consumed, so that running out of memory leaves the capsule to its producer. */
static void import_capsule(lua_State *L, int arg, int *copied, const char *what) {
  int versioned;
  void *managed = NULL;
  arg = lua_absindex(L, arg);
  void *capsule = lua_type(L, arg) == LUA_TLIGHTUSERDATA ? lua_touserdata(L, arg) : NULL;
  int ndim = capsule ? dlp_capsule_peek(capsule, stated_ndim) : -1;
  if (ndim < 0) dlp_capsule_take(L, arg, &versioned, what); /* raises: not a capsule, or consumed */
  dlp_Tensor *t = dlp_tensor_push(L, ndim);
  if (dlp_capsule_consume(capsule, &managed, &versioned) != DLPACK_LUA_OK)
    dlp_capsule_take(L, arg, &versioned, what); /* raises: a finalizer consumed it while t was made */
  import_into(L, t, managed, versioned, copied);
}

/* push_empty_tensor(ndim, metatable) */
static int push_empty_tensor(lua_State *L) {
  dlp_tensor_push_with(L, (int)lua_tointeger(L, 1), 2);
  return 1;
}

void dlp_import(lua_State *L, void *managed, int versioned, const char *what) {
  if (!managed) luaL_error(L, "%s: the managed tensor is NULL", what);
  if (!dlp_state(L)) { /* without the module the tensor would have no metatable, and no finalizer */
    dlp_managed_delete(managed, versioned);
    luaL_error(L, "%s: the dlpack module is not open in this lua_State", what);
  }
  int ndim = stated_ndim(managed, versioned);
  /* the caller gave us the tensor: making its userdata must not raise before we own it */
  lua_pushcfunction(L, push_empty_tensor);
  lua_pushinteger(L, ndim);
  dlp_push_metatable(L);
  if (lua_pcall(L, 2, 1, 0) != LUA_OK) {
    dlp_managed_delete(managed, versioned);
    lua_error(L);
  }
  import_into(L, lua_touserdata(L, -1), managed, versioned, NULL);
}

/* Memory this module can copy between: host-accessible, or CUDA (when CUDA is there). */
static int copyable(DLDevice d) {
  return dlp_device_is_host(d) || dlp_device_is_cuda(d);
}

/* ---- producing: to_dlpack and __dlpack ---- */

/* The tensor to export, pushed: t itself (at 1), a relabelled view or a copy (*copied). */
static dlp_Tensor *prepare_export(lua_State *L, dlp_Tensor *t, const dlp_Options *o, dlp_CudaStream *consumer,
                                  int *copied, const char *what) {
  DLDevice target = o->has_device ? o->device : t->dl.device;
  int same = dlp_device_equal(target, t->dl.device);
  int relabel = !same && target.device_type == kDLCPU && dlp_device_is_host(t->dl.device);
  int lua_owned = t->owner && t->owner->lua_owned; /* options may have run code that released t */
  *copied = 0;
  if (lua_owned && o->copy == 0)
    dlp_buffer_error(L, "%s: the memory is owned by a Lua value (dlpack.unsafe.wrap) and leaves its lua_State "
                        "only as a copy, and copy = false", what);
  if ((!same && !relabel) || o->copy == 1 || lua_owned) {
    dlp_push_device_name(L, t->dl.device);
    dlp_push_device_name(L, target);
    if (!copyable(t->dl.device) || !copyable(target))
      dlp_buffer_error(L, "%s: cannot copy a tensor on %s to %s", what, lua_tostring(L, -2), lua_tostring(L, -1));
    if (o->copy == 0)
      dlp_buffer_error(L, "%s: exporting a tensor on %s to %s needs a copy, and copy = false", what,
                       lua_tostring(L, -2), lua_tostring(L, -1));
    lua_pop(L, 2);
    *copied = 1;
    return dlp_clone(L, 1, t->dtype, target, NULL, what); /* synchronous: nothing pending for the consumer */
  }
  if (relabel) return dlp_tensor_alias(L, 1, target, what);
  dlp_live(L, t, what);
  if (dlp_device_has_streams(t->dl.device)) dlp_cuda_order_for_consumer(L, t->owner, t->dl.device, consumer, what);
  lua_pushvalue(L, 1);
  return t;
}

/* A capsule for the export, pushed; the export goes back to its deleter if there is none. */
static int push_capsule(lua_State *L, void *managed, int versioned, const char *what) {
  void *capsule = dlp_capsule_new(managed, versioned, dlp_capsule_holder(L));
  if (!capsule) {
    dlp_managed_delete(managed, versioned);
    return luaL_error(L, "%s: too many unconsumed capsules", what);
  }
  lua_pushlightuserdata(L, capsule);
  return 1;
}

/* python_defaults: an absent max_version asks for a legacy capsule (Python's __dlpack__). */
static int export_capsule(lua_State *L, int python_defaults, const char *what) {
  dlp_Options o;
  int copied;
  void *managed;
  dlp_check_no_more(L, 3, what, "a tensor and an options table");
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  dlp_read_options(L, 2, DLP_OPT_DEVICE | DLP_OPT_COPY | DLP_OPT_STREAM | DLP_OPT_MAX_VERSION, &o);
  dlp_state_for_new(L, "a capsule"); /* capsules are not tracked: they go back when states close */
  int legacy = o.max_major < 0 ? python_defaults : o.max_major == 0;
  dlp_CudaStream *consumer = dlp_cuda_check_stream(L, o.stream, t->dl.device, 1, what);
  dlp_Tensor *e = prepare_export(L, t, &o, consumer, &copied, what);
  if (legacy) managed = dlp_export_legacy(L, e, what);
  else managed = dlp_export_versioned(L, e, copied ? DLP_FLAG_IS_COPIED : 0, what);
  if (consumer && dlp_device_has_streams(e->dl.device)) { /* the consumer's work on its stream goes first */
    dlp_CudaHold *after = dlp_cuda_hold_for_consumer(consumer, e->dl.device);
    if (!after) {
      dlp_managed_delete(managed, !legacy);
      return luaL_error(L, "%s: not enough memory", what);
    }
    if (legacy) ((ExportLegacy *)((DLManagedTensor *)managed)->manager_ctx)->after = after;
    else ((ExportVersioned *)((DLManagedTensorVersioned *)managed)->manager_ctx)->after = after;
  }
  return push_capsule(L, managed, !legacy, what);
}

static int l_to_dlpack(lua_State *L) {
  dlp_Tensor *t;
  /* The usual call, to_dlpack(t) of a live CPU tensor, skips the options' work (what
   * export_capsule does for it, without its calls into the Lua API). */
  if (lua_gettop(L) == 1 && (t = dlp_tensor_test(L, 1)) && t->owner && t->dl.device.device_type == kDLCPU &&
      !t->owner->lua_owned) {
    dlp_state_for_new(L, "a capsule");
    return push_capsule(L, dlp_export_versioned(L, t, 0, "dlpack.to_dlpack"), 1, "dlpack.to_dlpack");
  }
  return export_capsule(L, 0, "dlpack.to_dlpack");
}

static int l_dlpack(lua_State *L) {
  return export_capsule(L, 1, "__dlpack");
}

static int l_dlpack_device(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  lua_pushinteger(L, t->dl.device.device_type);
  lua_pushinteger(L, t->dl.device.device_id);
  return 2;
}

/* ---- consuming: from_dlpack ---- */

#define FROM_DLPACK "dlpack.from_dlpack" /* what messages call it */

/* What x's __dlpack_device says, checked: two integers naming a device this module knows. */
static DLDevice producer_device(lua_State *L, int x, int *stated) {
  DLDevice d = {kDLCPU, 0};
  *stated = luaL_getmetafield(L, x, "__dlpack_device") != LUA_TNIL;
  if (!*stated) return d;
  int ok1 = 0, ok2 = 0;
  lua_pushvalue(L, x);
  lua_call(L, 1, 2);
  lua_Integer type = lua_type(L, -2) == LUA_TNUMBER ? lua_tointegerx(L, -2, &ok1) : 0;
  lua_Integer id = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &ok2) : 0;
  if (!ok1 || !ok2) luaL_error(L, FROM_DLPACK ": __dlpack_device must return two integers");
  d.device_type = (DLDeviceType)(dlp_device_is_valid_type(type) ? type : 0);
  d.device_id = id < 0 || id > INT32_MAX ? -1 : (int32_t)id;
  if (!dlp_device_is_valid(d))
    dlp_buffer_error(L, FROM_DLPACK ": __dlpack_device names an unsupported device (type %I, id %I)", type, id);
  lua_pop(L, 2);
  return d;
}

/* Call x's __dlpack and import the capsule it returns; leaves the tensor on top. stream: index
 * of opts.stream, or 0. As a consumer this module always names its stream to a CUDA producer:
 * the stream given, or 1 (the legacy default), never 0. */
static void import_from_producer(lua_State *L, int x, int copy, int stream, int *copied) {
  int versioned, consumed;
  if (luaL_getmetafield(L, x, "__dlpack") == LUA_TNIL)
    luaL_argerror(L, x, lua_pushfstring(L, "a capsule or a value with __dlpack expected, got %s", luaL_typename(L, x)));
  int stated;
  DLDevice device = producer_device(L, x, &stated);
  dlp_CudaStream *consumer = dlp_cuda_check_stream(L, stream, device, 1, FROM_DLPACK); /* pushes its holder */
  lua_insert(L, -2); /* keep the holder below the function */
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
  if (consumer) { /* a device with streams */
    if (stream) lua_pushvalue(L, stream);
    else lua_pushinteger(L, 1);
    lua_setfield(L, -2, "stream");
  }
  lua_call(L, 2, 1);
  /* Only a capsule: a raw pointer could come from any C function (pairs, coroutine.wrap, ...) */
  if (lua_type(L, -1) != LUA_TLIGHTUSERDATA || !dlp_capsule_state(lua_touserdata(L, -1), &versioned, &consumed))
    luaL_error(L, FROM_DLPACK ": __dlpack must return a capsule, got %s", luaL_typename(L, -1));
  import_capsule(L, -1, copied, FROM_DLPACK);
  lua_remove(L, -2); /* the capsule */
  dlp_Tensor *t = lua_touserdata(L, -1);
  /* the stream asked for was the claimed device's: on other memory it orders nothing (and a
   * device that does not exist would fail every later use of the tensor, and its free) */
  if (dlp_device_has_streams(t->dl.device) && !dlp_device_equal(t->dl.device, device)) {
    dlp_tensor_release(t);
    dlp_push_device_name(L, t->dl.device);
    const char *got = lua_tostring(L, -1);
    if (!stated)
      luaL_error(L, FROM_DLPACK ": __dlpack gave a tensor on %s, and the producer has no __dlpack_device to name "
                    "that device (whose stream it must order its work before)", got);
    dlp_push_device_name(L, device);
    const char *said = lua_tostring(L, -1);
    if (strcmp(said, got) == 0) /* names without ids (cuda_managed) */
      said = lua_pushfstring(L, "%s with id %d", said, (int)device.device_id);
    luaL_error(L, FROM_DLPACK ": __dlpack_device said %s, but __dlpack gave a tensor on %s", said, got);
  }
  /* the producer ordered its work before our stream: what follows on this memory is there */
  if (consumer && dlp_device_is_cuda(t->dl.device)) dlp_owner_set_stream(t->owner, consumer);
  lua_remove(L, -2); /* the stream holder */
}

static int l_from_dlpack(lua_State *L) {
  dlp_Options o;
  int copied = 0;
  if (lua_gettop(L) == 1 && lua_type(L, 1) == LUA_TLIGHTUSERDATA) { /* a capsule, no options: nothing more to do */
    import_capsule(L, 1, NULL, FROM_DLPACK);
    return 1;
  }
  dlp_check_no_more(L, 3, FROM_DLPACK, "a capsule or a producer, and an options table");
  luaL_checkany(L, 1);
  dlp_read_options(L, 2, DLP_OPT_DEVICE | DLP_OPT_COPY | DLP_OPT_STREAM, &o);
  int type = lua_type(L, 1);
  dlp_Tensor *own = type == LUA_TUSERDATA ? dlp_tensor_test(L, 1) : NULL; /* a capsule is light userdata */
  if (own) {
    /* one of ours: share its owner directly, as an export and import would */
    if (!own->owner) return luaL_argerror(L, 1, "tensor was released");
    dlp_CudaStream *consumer = dlp_cuda_check_stream(L, o.stream, own->dl.device, 1, FROM_DLPACK);
    dlp_Tensor *t = dlp_tensor_alias(L, 1, own->dl.device, FROM_DLPACK);
    if (dlp_device_has_streams(t->dl.device))
      dlp_cuda_order_for_consumer(L, t->owner, t->dl.device, consumer, FROM_DLPACK);
  } else if (type == LUA_TLIGHTUSERDATA) {
    if (o.stream) return luaL_argerror(L, 2, "stream: a capsule was made already (pass the producer instead)");
    import_capsule(L, 1, &copied, FROM_DLPACK);
  } else {
    import_from_producer(L, 1, o.copy, o.stream, &copied);
  }
  int t_idx = lua_gettop(L);
  dlp_Tensor *t = lua_touserdata(L, t_idx);
  DLDevice target = o.has_device ? o.device : t->dl.device;
  if (dlp_device_equal(target, t->dl.device)) {
    /* copy = true gives memory nobody else holds: a fresh import the producer copied is that */
    if (o.copy == 1 && !copied) dlp_clone(L, t_idx, t->dtype, t->dl.device, NULL, FROM_DLPACK);
  } else if (target.device_type == kDLCPU && dlp_device_is_host(t->dl.device)) {
    /* pinned and managed memory is CPU memory: relabel it rather than copy */
    if (o.copy == 1) dlp_clone(L, t_idx, t->dtype, target, NULL, FROM_DLPACK);
    else dlp_tensor_alias(L, t_idx, target, FROM_DLPACK);
  } else {
    dlp_push_device_name(L, t->dl.device);
    dlp_push_device_name(L, target);
    if (o.copy == 0)
      return dlp_buffer_error(L, FROM_DLPACK ": cannot move a tensor from %s to %s without copying (copy = false)",
                              lua_tostring(L, -2), lua_tostring(L, -1));
    if (!copyable(t->dl.device) || !copyable(target))
      return dlp_buffer_error(L, FROM_DLPACK ": cannot copy a tensor from %s to %s", lua_tostring(L, -2),
                              lua_tostring(L, -1));
    lua_pop(L, 2);
    dlp_clone(L, t_idx, t->dtype, target, NULL, FROM_DLPACK); /* we import natively, then copy ourselves */
  }
  if (lua_gettop(L) > t_idx) dlp_tensor_release(t); /* only the result holds the memory now */
  return 1;
}

void dlp_protocol_register(lua_State *L, int module, int methods, int meta) {
  static const luaL_Reg functions[] = {{"to_dlpack", l_to_dlpack}, {"from_dlpack", l_from_dlpack}, {NULL, NULL}};
  static const luaL_Reg protocol[] = {{"__dlpack", l_dlpack}, {"__dlpack_device", l_dlpack_device}, {NULL, NULL}};
  dlp_register(L, module, functions);
  dlp_register(L, meta, protocol);
  dlp_register(L, methods, protocol);
}
