/* dlpack.ipc: tensors shared between processes of one machine, without copying.
 *
 * Shareable memory is an anonymous memfd, sealed so that it can neither shrink nor grow, mapped
 * MAP_SHARED. A tensor on it crosses a SOCK_SEQPACKET Unix socket as one record (the layout, in
 * the wire format of docs/ipc.md) with the descriptor attached (SCM_RIGHTS); the receiver checks
 * everything the peer says before it maps the pages the layout reaches. The peer may be hostile:
 * see docs/ipc.md, "Threat model". Every descriptor and mapping has one owner at every moment,
 * so that no error path leaks one.
 *
 * dlpack.ipc is Linux's (memfd seals): on Windows and other systems the end of this file raises,
 * naming the system, where the rest of the module or a host would reach it (README, "Platforms"). */
#ifdef __linux__
#define _GNU_SOURCE /* memfd_create, accept4, MSG_CMSG_CLOEXEC, F_ADD_SEALS */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* Older C libraries lack these names; the values are Linux's. */
#ifndef F_ADD_SEALS
#define F_ADD_SEALS 1033
#define F_GET_SEALS 1034
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#define F_SEAL_WRITE 0x0008
#endif
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif
/* statfs's f_type of memfds (shmem) and of MFD_HUGETLB ones (<linux/magic.h>) */
#define SHMEM_MAGIC 0x01021994
#define HUGETLB_MAGIC 0x958458f6
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#define MFD_ALLOW_SEALING 0x0002U
#endif

#define CHANNEL_MT "dlpack.ipc.Channel"
#define LISTENER_MT "dlpack.ipc.Listener"

/* ---- the wire format (docs/ipc.md): version 1 ---- */

#define WIRE_MAGIC "DLIP"
#define WIRE_VERSION 1
#define WIRE_KIND_TENSOR 1
#define WIRE_HEADER 56 /* bytes before the shape */
#define WIRE_MAX (WIRE_HEADER + 16 * DLP_MAX_NDIM)
#define WIRE_FLAGS (DLP_FLAG_READ_ONLY | DLP_FLAG_SUBBYTE_PADDED)
/* Descriptors one recvmsg takes: more than one is an error, and these are the ones it can close
 * (the kernel drops those that do not fit, and says so with MSG_CTRUNC). */
#define MAX_RECEIVED_FDS 8

typedef struct Message {
  DLDevice device;
  int dtype; /* dlp_Dtype */
  int ndim;
  uint64_t flags, size, offset; /* offset: of the element at index (0, ..., 0) in the file */
  int64_t shape[DLP_MAX_NDIM], strides[DLP_MAX_NDIM];
} Message;

/* CUDA tensors (the group at the end of this file) */
static dlp_CudaStream *cuda_send_stream(lua_State *L, int idx, DLDevice device, int *whole_device);
static dlp_Owner *cuda_import(int fd, const Message *m, int *readonly, char *why, size_t whylen);

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint64_t get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* Format into why (whylen bytes) and return it: the error messages of the checks below. */
static const char *say(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static const char *say(char *why, size_t whylen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, whylen, fmt, ap);
  va_end(ap);
  return why;
}

/* CRC-32 as zlib computes it (reflected, polynomial 0xEDB88320); messages are small. */
static uint32_t crc32_of(const unsigned char *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  while (n--) {
    c ^= *p++;
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

static size_t encode(const Message *m, unsigned char *b) {
  size_t n = WIRE_HEADER + 16 * (size_t)m->ndim;
  DLDataType dt = dlp_dtype_to_dl(m->dtype);
  memcpy(b, WIRE_MAGIC, 4);
  b[4] = WIRE_VERSION, b[5] = 0;
  b[6] = WIRE_KIND_TENSOR, b[7] = 0;
  put32(b + 8, (uint32_t)n);
  put32(b + 12, 0);
  put32(b + 16, (uint32_t)m->device.device_type);
  put32(b + 20, (uint32_t)m->device.device_id);
  b[24] = dt.code, b[25] = dt.bits, b[26] = 1, b[27] = 0;
  put32(b + 28, (uint32_t)m->ndim);
  put64(b + 32, m->flags);
  put64(b + 40, m->size);
  put64(b + 48, m->offset);
  for (int i = 0; i < m->ndim; i++) {
    put64(b + WIRE_HEADER + 8 * i, (uint64_t)m->shape[i]);
    put64(b + WIRE_HEADER + 8 * (m->ndim + i), (uint64_t)m->strides[i]);
  }
  put32(b + 12, crc32_of(b, n));
  return n;
}

/* The checks on a layout that hold wherever it came from (a message, a host's DLTensor): the
 * device, the dtype (whose index goes into m->dtype), the flags and the shape. NULL when it is
 * valid, else why not. */
static const char *check_layout(Message *m, DLDataType dt, char *why, size_t whylen) {
  if (!(m->device.device_type == kDLCPU && m->device.device_id == 0) && m->device.device_type != kDLCUDA)
    return say(why, whylen, "device type %ld id %ld cannot be shared (cpu:0 and cuda only)",
               (long)m->device.device_type, (long)m->device.device_id);
  if (!dlp_device_is_valid(m->device)) return say(why, whylen, "device id %ld is out of range", (long)m->device.device_id);
  if (dt.lanes != 1) return say(why, whylen, "dtypes with %u lanes are not shared", (unsigned)dt.lanes);
  if ((m->dtype = dlp_dtype_from_dl(dt)) < 0)
    return say(why, whylen, "unknown dtype (code %u, %u bits)", (unsigned)dt.code, (unsigned)dt.bits);
  if (m->flags & ~(uint64_t)WIRE_FLAGS)
    return say(why, whylen, "unknown flags 0x%llx (READ_ONLY and IS_SUBBYTE_TYPE_PADDED only)",
               (unsigned long long)(m->flags & ~(uint64_t)WIRE_FLAGS));
  if ((m->flags & DLP_FLAG_SUBBYTE_PADDED) && dlp_dtypes[m->dtype].bits >= 8)
    return say(why, whylen, "the flag IS_SUBBYTE_TYPE_PADDED on %s, which is not a sub-byte dtype",
               dlp_dtypes[m->dtype].name);
  for (int i = 0; i < m->ndim; i++)
    if (m->shape[i] < 0) return say(why, whylen, "negative size %lld in the shape", (long long)m->shape[i]);
  int64_t numel;
  if (!dlp_numel_of(m->ndim, m->shape, &numel)) return "the shape has more elements than fit in 64 bits";
  return NULL;
}

/* NULL when the n bytes at b are a valid message (decoded into m), else why not (in why). */
static const char *decode(unsigned char *b, size_t n, Message *m, char *why, size_t whylen) {
  if (n < WIRE_HEADER) return say(why, whylen, "a message of %zu bytes is too short (at least %d)", n, WIRE_HEADER);
  if (n > WIRE_MAX) return say(why, whylen, "a message longer than %d bytes is not one", WIRE_MAX);
  if (memcmp(b, WIRE_MAGIC, 4) != 0) return "not a dlpack.ipc message (wrong magic)";
  unsigned version = b[4] | (unsigned)b[5] << 8, kind = b[6] | (unsigned)b[7] << 8;
  if (version != WIRE_VERSION)
    return say(why, whylen, "unsupported message version %u (this module speaks version %d)", version,
                    WIRE_VERSION);
  if (kind != WIRE_KIND_TENSOR) return say(why, whylen, "unknown message kind %u", kind);
  if (get32(b + 8) != n)
    return say(why, whylen, "the length field says %lu bytes, the message has %zu", (unsigned long)get32(b + 8), n);
  uint32_t crc = get32(b + 12);
  put32(b + 12, 0);
  if (crc32_of(b, n) != crc) return "the checksum does not match (a corrupt message)";
  uint32_t ndim = get32(b + 28);
  if (ndim > DLP_MAX_NDIM) return say(why, whylen, "ndim %lu is more than %d", (unsigned long)ndim, DLP_MAX_NDIM);
  if (n != WIRE_HEADER + 16 * (size_t)ndim)
    return say(why, whylen, "a message for ndim %lu has %zu bytes, not %zu", (unsigned long)ndim, n,
                    WIRE_HEADER + 16 * (size_t)ndim);
  m->ndim = (int)ndim;
  m->device.device_type = (DLDeviceType)(int32_t)get32(b + 16);
  m->device.device_id = (int32_t)get32(b + 20);
  DLDataType dt = {b[24], b[25], (uint16_t)(b[26] | b[27] << 8)};
  m->flags = get64(b + 32);
  m->size = get64(b + 40);
  m->offset = get64(b + 48);
  for (int i = 0; i < m->ndim; i++) {
    m->shape[i] = (int64_t)get64(b + WIRE_HEADER + 8 * i);
    m->strides[i] = (int64_t)get64(b + WIRE_HEADER + 8 * (m->ndim + i));
  }
  return check_layout(m, dt, why, whylen);
}

/* ---- shareable memory ---- */

static size_t page_size(void) {
  long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? (size_t)p : 4096;
}

int dlp_is_shareable(const dlp_Tensor *t) {
  return t->owner && t->owner->fd >= 0;
}

/* Where in its file the element at index (0, ..., 0) of a shareable tensor lies. */
static uint64_t file_offset_of(const dlp_Tensor *t) {
  const dlp_Owner *o = t->owner;
  uintptr_t first = (uintptr_t)dlp_first_element(t);
  return (uint64_t)o->fd_offset + (o->memory ? (uint64_t)(first - (uintptr_t)o->memory) : 0);
}

/* ---- the module's memfd mappings, for overlap (dlp_overlaps) ----
 * One block mapped twice in this process (the same tensor received twice, the sender's tensor
 * beside what it received of it) has two addresses and one set of pages, so writers decide
 * overlap on the file (st_dev, st_ino) and its offsets. Every cpu mapping made here is listed,
 * sorted by address, from mmap to munmap; an address range of any tensor, whoever owns it (a
 * re-import of a mapped tensor), translates through the list. Mappings are made and unmapped on
 * any thread: a mutex, and a count read without it so that a process with none pays nothing. */

typedef struct Mapping {
  uintptr_t base, end; /* [base, end) */
  dev_t dev;
  ino_t ino;
  uint64_t offset; /* of base in the file */
} Mapping;

static dlp_mutex mappings_lock = DLP_MUTEX_INIT;
static Mapping *mappings; /* sorted by base (mappings never overlap one another); freed when empty */
static size_t nmappings, mappings_cap;
static atomic_size_t mappings_live; /* nmappings, for the unlocked fast path */

/* The index of the first mapping whose base is above addr (under the lock). */
static size_t mapping_after(uintptr_t addr) {
  size_t lo = 0, hi = nmappings;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (mappings[mid].base <= addr) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* List length bytes at base, mapped from offset of the file st describes; 0 when out of memory. */
static int add_mapping(void *base, size_t length, const struct stat *st, uint64_t offset) {
  Mapping m = {(uintptr_t)base, (uintptr_t)base + length, st->st_dev, st->st_ino, offset};
  int ok = 1;
  dlp_mutex_lock(&mappings_lock);
  if (nmappings == mappings_cap) {
    size_t cap = mappings_cap ? 2 * mappings_cap : 16;
    Mapping *grown = realloc(mappings, cap * sizeof *grown);
    if (grown) mappings = grown, mappings_cap = cap;
    else ok = 0;
  }
  if (ok) {
    size_t i = mapping_after(m.base);
    memmove(mappings + i + 1, mappings + i, (nmappings - i) * sizeof *mappings);
    mappings[i] = m;
    atomic_store_explicit(&mappings_live, ++nmappings, memory_order_release);
  }
  dlp_mutex_unlock(&mappings_lock);
  return ok;
}

static void remove_mapping(void *base) {
  dlp_mutex_lock(&mappings_lock);
  size_t i = mapping_after((uintptr_t)base);
  if (i > 0 && mappings[i - 1].base == (uintptr_t)base) {
    memmove(mappings + i - 1, mappings + i, (nmappings - i) * sizeof *mappings);
    atomic_store_explicit(&mappings_live, --nmappings, memory_order_release);
    if (nmappings == 0) {
      free(mappings);
      mappings = NULL;
      mappings_cap = 0;
    }
  }
  dlp_mutex_unlock(&mappings_lock);
}

/* The part of [lo, hi) that mapping k covers, as file offsets [*flo, *fhi); 0 when none. */
static int file_range(size_t k, uintptr_t lo, uintptr_t hi, uint64_t *flo, uint64_t *fhi) {
  const Mapping *m = &mappings[k];
  uintptr_t from = lo > m->base ? lo : m->base, to = hi < m->end ? hi : m->end;
  if (from >= to) return 0;
  *flo = m->offset + (from - m->base);
  *fhi = m->offset + (to - m->base);
  return 1;
}

int dlp_ipc_shares_file_bytes(uintptr_t a_lo, uintptr_t a_hi, uintptr_t b_lo, uintptr_t b_hi) {
  if (atomic_load_explicit(&mappings_live, memory_order_acquire) == 0) return 0;
  int found = 0;
  dlp_mutex_lock(&mappings_lock);
  /* the mappings a range reaches: from the last one that starts at or below it */
  size_t a0 = mapping_after(a_lo), b0 = mapping_after(b_lo);
  a0 -= a0 > 0, b0 -= b0 > 0;
  for (size_t i = a0; !found && i < nmappings && mappings[i].base < a_hi; i++) {
    uint64_t alo = 0, ahi = 0, blo = 0, bhi = 0; /* (set by file_range before they are read) */
    if (!file_range(i, a_lo, a_hi, &alo, &ahi)) continue;
    for (size_t j = b0; !found && j < nmappings && mappings[j].base < b_hi; j++)
      found = mappings[j].ino == mappings[i].ino && mappings[j].dev == mappings[i].dev &&
              file_range(j, b_lo, b_hi, &blo, &bhi) && alo < bhi && blo < ahi;
  }
  dlp_mutex_unlock(&mappings_lock);
  return found;
}

void dlp_ipc_unmap(dlp_Owner *o) {
  if (o->device.device_type == kDLCUDA) {
    dlp_ipc_cuda_unmap(o);
    return;
  }
  if (o->memory && o->nbytes) {
    remove_mapping(o->memory); /* before munmap: the next mmap may reuse the addresses */
    munmap(o->memory, o->nbytes);
  }
  close(o->fd);
}

/* After a call that makes a descriptor failed: 1 when it failed for want of one (EMFILE, ENFILE)
 * and a full collection ran (garbage channels, listeners and tensors hold descriptors), the first
 * time (*collected): try once more. Its finalizers may have closed what the caller uses. */
static int collected_for_descriptor(lua_State *L, int *collected) {
  if (*collected || (errno != EMFILE && errno != ENFILE) || !dlp_gc_running(L)) return 0;
  *collected = 1;
  lua_gc(L, LUA_GCCOLLECT, 0);
  return 1;
}

dlp_Owner *dlp_ipc_new_owner(lua_State *L, DLDevice device, size_t nbytes, const char *what) {
  DLDevice cpu = {kDLCPU, 0};
  if (device.device_type == kDLCUDA) return dlp_ipc_cuda_new_owner(L, device, nbytes, what);
  if (device.device_type != kDLCPU) {
    dlp_push_device_name(L, device);
    luaL_error(L, "%s: shareable memory on %s is not supported (cpu and cuda:N only)", what, lua_tostring(L, -1));
  }
  /* A memfd is a file: growing it past RLIMIT_FSIZE sends SIGXFSZ, which kills the process. */
  struct rlimit fsize;
  if (getrlimit(RLIMIT_FSIZE, &fsize) == 0 && fsize.rlim_cur != RLIM_INFINITY && (rlim_t)nbytes > fsize.rlim_cur)
    luaL_error(L, "%s: %I bytes of shareable memory are more than this process's file size limit allows (%I "
                  "bytes, ulimit -f): it is a file (a memfd)", what, (lua_Integer)nbytes, (lua_Integer)fsize.rlim_cur);
  int fd, collected = 0;
  do fd = memfd_create("dlpack", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  while (fd < 0 && collected_for_descriptor(L, &collected));
  if (fd < 0)
    luaL_error(L, "%s: memfd_create failed: %s%s", what, strerror(errno),
               errno == EMFILE ? " (EMFILE: every shareable tensor holds a descriptor; see ulimit -n)" : "");
  /* Mode 0400: a peer given a read-only descriptor could otherwise reopen /proc/self/fd/N for
   * writing (a memfd is made 0777); this process keeps its own read-write descriptor. */
  fchmod(fd, 0400);
  void *p = NULL;
  int err = 0, listed = 0;
  struct stat st;
  if (ftruncate(fd, (off_t)nbytes) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
      fstat(fd, &st) != 0)
    err = errno;
  else if (nbytes > 0 && (p = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
    err = errno, p = NULL;
  else if (p && !(listed = add_mapping(p, nbytes, &st, 0)))
    err = ENOMEM;
  dlp_Owner *o = err ? NULL : dlp_owner_new_block(p, cpu, nbytes);
  if (!o) {
    if (listed) remove_mapping(p);
    if (p) munmap(p, nbytes);
    close(fd);
    if (!err) luaL_error(L, "%s: not enough memory", what);
    luaL_error(L, "%s: cannot make %I bytes of shareable memory: %s", what, (lua_Integer)nbytes, strerror(err));
  }
  o->fd = fd;
  o->fd_offset = 0;
  return o;
}

void dlp_ipc_account_descriptor(lua_State *L) {
  if (dlp_state_descriptor(L) && dlp_gc_running(L)) lua_gc(L, LUA_GCCOLLECT, 0);
}

/* Map the pages of the file at fd that m's layout reaches, after checking that they exist and
 * cannot stop existing (the threat model). Takes fd: on success the owner holds it, on failure
 * it is closed. NULL (and why) on failure; *readonly says how it was mapped. */
static dlp_Owner *map_shared(int fd, const Message *m, int *readonly, char *why, size_t whylen) {
  dlp_Span span;
  struct stat st;
  struct statfs fs = {0};
  int seals = fcntl(fd, F_GET_SEALS), seals_errno = errno;
  int access = fcntl(fd, F_GETFL);
  const char *err = NULL;
  if (seals < 0)
    err = seals_errno == EINVAL ? "the descriptor is not a memfd (it cannot be sealed)"
                                : say(why, whylen, "the descriptor is not a usable memfd (F_GET_SEALS: %s)",
                                      strerror(seals_errno));
  else if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
    err = "the memfd is not sealed against shrinking and growing (it could shrink under the mapping)";
  else if (fstat(fd, &st) != 0 || access < 0) err = "fstat failed on the descriptor";
  else if (!S_ISREG(st.st_mode)) err = "the descriptor is not a memfd";
  else if (fstatfs(fd, &fs) != 0 || (unsigned long)fs.f_type != SHMEM_MAGIC)
    /* hugetlb pages a peer punches out are not there again at the next touch: SIGBUS */
    err = (unsigned long)fs.f_type == HUGETLB_MAGIC ? "a hugetlb memfd is refused (its pages can vanish under the "
                                                       "mapping: SIGBUS)" : "the descriptor is not a memfd";
  else if ((uint64_t)st.st_size != m->size)
    err = say(why, whylen, "the message says %llu bytes, the memfd has %lld", (unsigned long long)m->size,
                   (long long)st.st_size);
  else if (!dlp_span_of(m->ndim, m->shape, m->strides, m->dtype, m->flags, &span))
    err = dlp_is_packed(m->dtype, m->flags) ? "packed sub-byte elements need a contiguous layout"
                                            : "the layout reaches beyond 64-bit offsets";
  int64_t lo = 0, hi = 0;
  if (!err && span.numel > 0 &&
      (m->offset > INT64_MAX || !dlp_add((int64_t)m->offset, span.lo, &lo) || !dlp_add((int64_t)m->offset, span.hi, &hi) ||
       lo < 0 || (uint64_t)hi > m->size))
    err = say(why, whylen, "the layout reaches outside the %llu bytes of the memfd", (unsigned long long)m->size);
  if (err) {
    if (err != why) snprintf(why, whylen, "%s", err);
    close(fd);
    return NULL;
  }
  *readonly = (m->flags & DLP_FLAG_READ_ONLY) || (access & O_ACCMODE) == O_RDONLY ||
              (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE));
  DLDevice cpu = {kDLCPU, 0};
  void *p = NULL;
  size_t start = 0, length = 0;
  if (span.numel > 0) {
    start = (size_t)lo & ~(page_size() - 1);
    length = (size_t)hi - start;
    p = mmap(NULL, length, *readonly ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
    if (p == MAP_FAILED) {
      snprintf(why, whylen, "mmap of the memfd failed: %s", strerror(errno));
      close(fd);
      return NULL;
    }
  }
  int listed = p && add_mapping(p, length, &st, start);
  dlp_Owner *o = !p || listed ? dlp_owner_new_block(p, cpu, length) : NULL;
  if (!o) {
    snprintf(why, whylen, "not enough memory");
    if (listed) remove_mapping(p);
    if (p) munmap(p, length);
    close(fd);
    return NULL;
  }
  o->fd = fd;
  o->fd_offset = (int64_t)start;
  /* packed sub-byte elements have no byte address: a tensor on them starts where its memory does
   * (dlp_tensor_seal), and the mapping starts at the page boundary before the first element */
  if (p && dlp_is_packed(m->dtype, m->flags)) o->lo = (uintptr_t)p + ((size_t)lo - start);
  return o;
}

/* A tensor with m's layout on o's mapping, pushed; takes *pending (the caller's slot for o, which
 * a finalizer may have emptied: then the tensor is released and this raises). */
static void push_mapped(lua_State *L, int metatable, const Message *m, int readonly, dlp_Owner **pending,
                        const char *what) {
  dlp_Tensor *t = dlp_tensor_push_with(L, m->ndim, metatable);
  dlp_Owner *o = *pending;
  if (!o) luaL_error(L, "%s: the channel was closed while the tensor was made", what);
  *pending = NULL;
  t->owner = o;
  t->dl.data = o->memory ? (char *)o->memory + (m->offset - (uint64_t)o->fd_offset) : NULL;
  t->dl.device = m->device;
  t->dl.dtype = dlp_dtype_to_dl(m->dtype);
  t->dtype = m->dtype;
  t->flags = (m->flags & DLP_FLAG_SUBBYTE_PADDED) | (readonly ? DLP_FLAG_READ_ONLY : 0);
  memcpy(t->dl.shape, m->shape, (size_t)m->ndim * sizeof(int64_t));
  memcpy(t->dl.strides, m->strides, (size_t)m->ndim * sizeof(int64_t));
  dlp_tensor_seal(L, t, what);
  dlp_gc_account(L, o->nbytes);
  dlp_ipc_account_descriptor(L);
}

/* A contiguous shareable copy of t, pushed: in cpu memory for a host tensor, on its device for a
 * cuda:N one (copied on stream, NULL: the legacy stream); other devices raise. */
static dlp_Tensor *push_shareable_copy(lua_State *L, dlp_Tensor *t, dlp_CudaStream *stream, const char *what) {
  int on_cuda = t->dl.device.device_type == kDLCUDA;
  if (!dlp_device_is_host(t->dl.device) && !on_cuda) {
    dlp_push_device_name(L, t->dl.device);
    luaL_error(L, "%s: tensors on %s cannot be shared (cpu and cuda:N memory only)", what, lua_tostring(L, -1));
  }
  DLDevice cpu = {kDLCPU, 0};
  dlp_Tensor *copy = dlp_tensor_new(L, t->dtype, t->flags, on_cuda ? t->dl.device : cpu, t->dl.ndim, t->dl.shape,
                                    DLP_ALLOC_SHAREABLE, what);
  dlp_copy(L, copy, t, on_cuda ? stream : NULL, what);
  return copy;
}

/* ---- time and waiting ---- */

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Seconds at arg: absent, nil or huge waits without end (-1); 0 polls. */
static double check_timeout(lua_State *L, int arg) {
  if (lua_isnoneornil(L, arg)) return -1;
  lua_Number s = luaL_checknumber(L, arg);
  if (!(s >= 0)) luaL_argerror(L, arg, "timeout must be a number of seconds, 0 or more");
  return s > 1e9 ? -1 : (double)s;
}

static int64_t deadline_of(double timeout) {
  return timeout < 0 ? -1 : now_ms() + (int64_t)(timeout * 1000 + 0.999);
}

/* Wait for events on fd until the deadline (-1: none). 1 ready, 0 timed out, -1 failed (errno).
 * A signal does not end the wait early. */
static int wait_for(int fd, short events, int64_t deadline, short *revents) {
  for (;;) {
    int ms = -1;
    if (deadline >= 0) {
      int64_t left = deadline - now_ms();
      ms = left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
    }
    struct pollfd p = {fd, events, 0};
    int n = poll(&p, 1, ms);
    if (n > 0) {
      if (revents) *revents = p.revents;
      return 1;
    }
    if (n == 0 && (ms == 0 || now_ms() >= deadline)) return 0;
    if (n < 0 && errno != EINTR) return -1;
  }
}

/* ---- channels and listeners ---- */

typedef struct Channel {
  int fd;              /* -1 once closed */
  dlp_Owner *pending;  /* a received block not yet in a tensor */
  dlp_Tracked track;   /* see dlp_state_for_new */
} Channel;

typedef struct Listener {
  int fd;
  int made_file;       /* close removes the socket file, if it is still the one it made */
  dev_t dev;
  ino_t ino;
  char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
  dlp_Tracked track;
} Listener;

static void close_channel(Channel *ch) {
  dlp_untrack(&ch->track);
  if (ch->pending) {
    dlp_owner_release(ch->pending);
    ch->pending = NULL;
  }
  if (ch->fd >= 0) close(ch->fd);
  ch->fd = -1;
}

static void close_listener(Listener *l) {
  struct stat st;
  dlp_untrack(&l->track);
  if (l->fd < 0) return;
  if (l->made_file && stat(l->path, &st) == 0 && st.st_dev == l->dev && st.st_ino == l->ino) unlink(l->path);
  close(l->fd);
  l->fd = -1;
}

/* node is the track member of a Channel (or Listener), so the enclosing object is as aligned as its type: the cast goes
 * through void * (Clang's -Wcast-align warns on any char * to T *). */
static void close_tracked_channel(dlp_Tracked *node) {
  close_channel((Channel *)(void *)((char *)node - offsetof(Channel, track)));
}
static void close_tracked_listener(dlp_Tracked *node) {
  close_listener((Listener *)(void *)((char *)node - offsetof(Listener, track)));
}

/* An allocation: made before the descriptor it will hold exists, so that nothing leaks. */
static Channel *push_channel(lua_State *L) {
  dlp_State *st = dlp_state_for_new(L, "a channel");
  Channel *ch = lua_newuserdatauv(L, sizeof *ch, 0);
  memset(ch, 0, sizeof *ch);
  ch->fd = -1;
  luaL_setmetatable(L, CHANNEL_MT);
  if (st) dlp_track(st, &ch->track, close_tracked_channel);
  return ch;
}

static Channel *check_channel(lua_State *L, int idx, const char *what) {
  Channel *ch = luaL_checkudata(L, idx, CHANNEL_MT);
  if (ch->fd < 0) luaL_error(L, "%s: the channel is closed", what);
  return ch;
}

/* The socket address for path (argument arg): a file, or the abstract namespace after '@'. */
static socklen_t check_address(lua_State *L, int arg, struct sockaddr_un *a) {
  size_t len;
  const char *path = luaL_checklstring(L, arg, &len);
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  if (len == 0 || memchr(path, '\0', len)) luaL_argerror(L, arg, "a socket path must be non-empty, with no NUL");
  if (len > sizeof a->sun_path - 1)
    luaL_argerror(L, arg, lua_pushfstring(L, "a socket path has at most %d bytes", (int)sizeof a->sun_path - 1));
  if (path[0] == '@') { /* abstract: a NUL, then the name */
    memcpy(a->sun_path + 1, path + 1, len - 1);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
  }
  memcpy(a->sun_path, path, len);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
}

/* listen(path) -> listener */
static int l_listen(lua_State *L) {
  struct sockaddr_un a;
  socklen_t alen = check_address(L, 1, &a);
  const char *path = lua_tostring(L, 1);
  dlp_State *st = dlp_state_for_new(L, "a listener");
  Listener *l = lua_newuserdatauv(L, sizeof *l, 0);
  memset(l, 0, sizeof *l);
  l->fd = -1;
  luaL_setmetatable(L, LISTENER_MT);
  if (st) dlp_track(st, &l->track, close_tracked_listener);
  snprintf(l->path, sizeof l->path, "%s", path);
  /* non-blocking: a connection another process sharing it (after a fork) takes between poll and
   * accept4 must not make accept wait past its timeout */
  int collected = 0;
  while ((l->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0)
    if (!collected_for_descriptor(L, &collected))
      return luaL_error(L, "dlpack.ipc.listen: socket failed: %s", strerror(errno));
  int rc = bind(l->fd, (struct sockaddr *)&a, alen), notsock = 0;
  if (rc != 0 && errno == EADDRINUSE && path[0] != '@') {
    /* a socket file nobody listens on any more (its process died): replace it */
    struct stat sb;
    /* non-blocking: a live listener whose queue is full answers EAGAIN (blocking, it hangs) */
    int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), refused = 0;
    if (probe >= 0 && lstat(path, &sb) == 0 && S_ISSOCK(sb.st_mode))
      refused = connect(probe, (struct sockaddr *)&a, alen) != 0 && errno == ECONNREFUSED;
    else if (lstat(path, &sb) == 0 && !S_ISSOCK(sb.st_mode))
      notsock = 1;
    if (probe >= 0) close(probe);
    if (refused && unlink(path) == 0) rc = bind(l->fd, (struct sockaddr *)&a, alen);
    else errno = EADDRINUSE;
  }
  if (rc != 0 || listen(l->fd, 64) != 0) {
    int err = errno;
    close(l->fd);
    l->fd = -1;
    return luaL_error(L, "dlpack.ipc.listen: cannot listen at '%s': %s", path,
                      notsock ? "a file that is not a socket is there (left alone)"
                      : err == EADDRINUSE ? "address in use (another listener has it)"
                                          : strerror(err));
  }
  struct stat sb;
  if (path[0] != '@' && stat(path, &sb) == 0) {
    l->made_file = 1;
    l->dev = sb.st_dev;
    l->ino = sb.st_ino;
  }
  return 1;
}

/* listener:accept([timeout]) -> channel, or nil when the timeout passed */
static int l_accept(lua_State *L) {
  Listener *l = luaL_checkudata(L, 1, LISTENER_MT);
  double timeout = check_timeout(L, 2);
  Channel *ch = push_channel(L); /* an allocation: a finalizer may close the listener */
  int64_t deadline = deadline_of(timeout);
  int collected = 0;
  for (;;) {
    if (l->fd < 0) return luaL_error(L, "accept: the listener is closed");
    int ready = wait_for(l->fd, POLLIN, deadline, NULL);
    if (ready < 0) return luaL_error(L, "accept: poll failed: %s", strerror(errno));
    if (ready == 0) {
      lua_pushnil(L);
      return 1;
    }
    ch->fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
    if (ch->fd >= 0) return 1;
    if (collected_for_descriptor(L, &collected)) continue; /* the connection waits meanwhile */
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
      return luaL_error(L, "accept: %s", strerror(errno));
  }
}

/* connect(path [, timeout]) -> channel; nil when nobody listened within the timeout */
static int l_connect(lua_State *L) {
  struct sockaddr_un a;
  socklen_t alen = check_address(L, 1, &a);
  double timeout = check_timeout(L, 2);
  int has_timeout = !lua_isnoneornil(L, 2);
  Channel *ch = push_channel(L);
  int64_t deadline = deadline_of(timeout);
  int collected = 0;
  for (;;) {
    /* non-blocking: a blocking connect to a listener whose queue is full waits without end */
    if ((ch->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0) {
      if (collected_for_descriptor(L, &collected)) continue;
      return luaL_error(L, "dlpack.ipc.connect: socket failed: %s", strerror(errno));
    }
    if (connect(ch->fd, (struct sockaddr *)&a, alen) == 0) {
      fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) & ~O_NONBLOCK); /* as accept's channels */
      return 1;
    }
    int err = errno;
    close(ch->fd);
    ch->fd = -1;
    int absent = err == ENOENT || err == ECONNREFUSED || err == EAGAIN;
    struct stat st;
    if (err == ECONNREFUSED && a.sun_path[0] && stat(a.sun_path, &st) == 0 && !S_ISSOCK(st.st_mode))
      return luaL_error(L, "dlpack.ipc.connect: cannot connect to '%s': it is not a socket (no listener "
                           "will appear there)", lua_tostring(L, 1));
    if (!absent || !has_timeout)
      return luaL_error(L, "dlpack.ipc.connect: cannot connect to '%s': %s", lua_tostring(L, 1),
                        err == EAGAIN ? "the listener's queue is full (it accepts nothing)"
                        : absent      ? "nobody listens there"
                                      : strerror(err));
    if (deadline >= 0 && now_ms() >= deadline) {
      lua_pushnil(L);
      return 1;
    }
    struct timespec pause = {0, 10 * 1000 * 1000}; /* a listener appears: try again in 10 ms */
    nanosleep(&pause, NULL);
  }
}

/* ---- send ---- */

typedef struct SendOptions {
  int copy;       /* -1 (absent): when not shareable; 1: always (a snapshot); 0: never (raise unless shareable) */
  int readonly;
  double timeout; /* seconds to wait while the peer's queue is full; -1: no limit */
} SendOptions;

static void read_send_options(lua_State *L, int arg, SendOptions *o) {
  o->copy = -1;
  o->readonly = 0;
  o->timeout = -1;
  if (lua_isnoneornil(L, arg)) return;
  luaL_checktype(L, arg, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, arg)) { /* raw: no metamethod runs */
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
    if (k && strcmp(k, "stream") == 0) { /* CUDA: kept at arg + 1 for cuda_send_stream */
      lua_replace(L, arg + 1);
      continue;
    }
    if (k && strcmp(k, "timeout") == 0) {
      if (!lua_isnumber(L, -1) || lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) >= 0))
        luaL_argerror(L, arg, "option timeout must be a number of seconds, 0 or more");
      o->timeout = lua_tonumber(L, -1) > 1e9 ? -1 : (double)lua_tonumber(L, -1);
      lua_pop(L, 1);
      continue;
    }
    int *field = k && strcmp(k, "copy") == 0 ? &o->copy : k && strcmp(k, "readonly") == 0 ? &o->readonly : NULL;
    if (!field) luaL_argerror(L, arg, "unknown option (send takes copy, readonly, stream and timeout)");
    if (!lua_isboolean(L, -1)) luaL_argerror(L, arg, lua_pushfstring(L, "option %s must be a boolean", k));
    *field = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
}

/* Send the n bytes at b with fd attached; 0, or an errno (ETIMEDOUT: the peer's queue stayed full
 * until the deadline, -1 for none). */
static int send_record(int sock, const unsigned char *b, size_t n, int fd, int64_t deadline) {
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } control;
  struct iovec iov = {(void *)b, n};
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  memset(&control, 0, sizeof control);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.buf;
  msg.msg_controllen = sizeof control.buf;
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  for (;;) {
    if (sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)n) return 0;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    int ready = wait_for(sock, POLLOUT, deadline, NULL);
    if (ready < 0) return errno;
    if (ready == 0) return ETIMEDOUT;
  }
}

static int is_closed_errno(int err) {
  return err == EPIPE || err == ECONNRESET || err == ENOTCONN;
}

/* ch:send(t [, opts]) -> true; false when opts.timeout passed with the peer's queue full */
static int l_send(lua_State *L) {
  SendOptions opts;
  Message m;
  unsigned char buf[WIRE_MAX];
  int whole_device;
  check_channel(L, 1, "send");
  dlp_tensor_arg(L, 2);
  lua_settop(L, 3);
  lua_pushnil(L); /* 4: opts.stream */
  read_send_options(L, 3, &opts);
  dlp_CudaStream *stream = cuda_send_stream(L, 4, dlp_tensor_arg(L, 2)->dl.device, &whole_device);
  dlp_Tensor *t = dlp_tensor_check(L, 2);
  int on_cuda = t->dl.device.device_type == kDLCUDA;
  if (t->flags & DLP_FLAG_READ_ONLY) opts.readonly = 1; /* what is read-only here stays so there */
  /* copy = true copies shareable memory too, as t:to{copy = true} and DLPack's copy=True do: the
   * receiver gets a snapshot, not the sender's memory */
  if (!dlp_is_shareable(t) || opts.copy == 1) {
    if (!opts.copy) return dlp_buffer_error(L, "send: the tensor is not in shareable memory and copy = false");
    if (on_cuda && whole_device) dlp_ipc_cuda_settle(L, t->owner, t->dl.device, NULL, 1, "send"); /* before the copy */
    t = push_shareable_copy(L, t, stream, "send"); /* on the stream given: after the work queued there */
  }
  Channel *ch = check_channel(L, 1, "send"); /* a finalizer may have closed it meanwhile */
  dlp_live(L, t, "send");
  dlp_Owner *o = t->owner;
  m.device = t->dl.device;
  m.dtype = t->dtype;
  m.ndim = t->dl.ndim;
  m.flags = (t->flags & DLP_FLAG_SUBBYTE_PADDED) | (opts.readonly ? DLP_FLAG_READ_ONLY : 0);
  m.size = (uint64_t)o->fd_offset + o->nbytes;
  struct stat st;
  if (on_cuda) dlp_ipc_cuda_settle(L, o, t->dl.device, stream, whole_device, "send"); /* m.size: the allocation's */
  else if (fstat(o->fd, &st) == 0) m.size = (uint64_t)st.st_size;
  m.offset = file_offset_of(t);
  memcpy(m.shape, t->dl.shape, (size_t)m.ndim * sizeof(int64_t));
  memcpy(m.strides, t->dl.strides, (size_t)m.ndim * sizeof(int64_t));
  size_t n = encode(&m, buf);
  int fd = o->fd;
  /* a read-only descriptor: the peer cannot map it writable (CUDA has none: docs/ipc.md, "CUDA tensors") */
  /* a descriptor that is read-only already goes as it is: reopening a received one made by another
   * user with mode 0400 is not allowed (EACCES) */
  if ((m.flags & DLP_FLAG_READ_ONLY) && !on_cuda && (fcntl(o->fd, F_GETFL) & O_ACCMODE) != O_RDONLY) {
    char proc[64];
    fchmod(o->fd, 0400); /* received memory: as dlp_ipc_new_owner does; not ours to change is no error */
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", o->fd);
    int collected = 0;
    while ((fd = open(proc, O_RDONLY | O_CLOEXEC)) < 0) {
      if (!collected_for_descriptor(L, &collected))
        return luaL_error(L, "send: cannot reopen the memory read-only (%s: %s)", proc, strerror(errno));
      /* its finalizers may have released t or closed the channel (o is t's while t lives) */
      ch = check_channel(L, 1, "send");
      dlp_live(L, t, "send");
    }
  }
  int err = send_record(ch->fd, buf, n, fd, deadline_of(opts.timeout));
  if (fd != o->fd) close(fd);
  if (err && is_closed_errno(err)) return luaL_error(L, "send: the peer closed the channel");
  if (err && err != ETIMEDOUT) return luaL_error(L, "send: %s", strerror(err));
  lua_pushboolean(L, !err);
  return 1;
}

/* ---- recv ---- */

/* Receive one record: its length (0 or more), -1 on end of file, -2 on a failure (errno);
 * every descriptor attached lands in fds (*nfds of them); *ctrunc when some were dropped. */
static ssize_t receive_record(int sock, unsigned char *b, size_t cap, int *fds, int *nfds, int *trunc, int *ctrunc) {
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * MAX_RECEIVED_FDS)];
  } control;
  struct iovec iov = {b, cap};
  struct msghdr msg;
  ssize_t n;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.buf;
  msg.msg_controllen = sizeof control.buf;
  *nfds = 0;
  /* A peer that closes with records of ours unread leaves ECONNRESET, which the kernel reports once,
   * before the records the peer sent that are still queued: those come next, then the end. */
  do n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  while (n < 0 && (errno == EINTR || errno == ECONNRESET));
  if (n < 0) return -2;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count && *nfds < MAX_RECEIVED_FDS; i++) memcpy(&fds[(*nfds)++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
  }
  *trunc = (msg.msg_flags & MSG_TRUNC) != 0;
  *ctrunc = (msg.msg_flags & MSG_CTRUNC) != 0;
  /* An empty record, or the end: a closed peer also hangs up. An empty record from a live peer
   * is a message too short to be one (decode says so), not the end of the channel. */
  if (n == 0 && *nfds == 0) {
    struct pollfd p = {sock, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP))) return -1;
  }
  return n;
}

/* Whether this process can take one more descriptor. The kernel cannot install a descriptor
 * attached to a message when none is free: it drops it (MSG_CTRUNC) and the message with it. So
 * recv checks first, and when none is free collects once (garbage tensors hold descriptors):
 * finalizers run then, and may close the channel (1 is returned then) or receive on it. */
static int descriptor_free(lua_State *L, Channel *ch) {
  int collected = 0;
  while (ch->fd >= 0) {
    int probe = fcntl(ch->fd, F_DUPFD_CLOEXEC, 0);
    if (probe >= 0) {
      close(probe);
      return 1;
    }
    int none = errno == EMFILE || errno == ENFILE;
    if (!collected_for_descriptor(L, &collected)) return !none;
  }
  return 1;
}

/* ch:recv([timeout]) -> tensor, or nil when the timeout passed */
static int l_recv(lua_State *L) {
  Channel *ch = check_channel(L, 1, "recv");
  double timeout = check_timeout(L, 2);
  unsigned char buf[WIRE_MAX + 1];
  int fds[MAX_RECEIVED_FDS], nfds, trunc, ctrunc, readonly = 0;
  char why[200];
  Message m;
  int64_t deadline = deadline_of(timeout);
  ssize_t n;
  /* This call's holder of the mapping until its tensor is made (its __gc releases it if that
   * raises): its own, since a finalizer run by an allocation may call recv on the channel too. */
  Channel *holder = NULL;
  for (;;) {
    if (ch->fd < 0) return luaL_error(L, "recv: the channel is closed");
    int ready = wait_for(ch->fd, POLLIN, deadline, NULL);
    if (ready < 0) return luaL_error(L, "recv: poll failed: %s", strerror(errno));
    if (ready == 0) {
      lua_pushnil(L);
      return 1;
    }
    if (!holder) { /* made once a message waits: an allocation, its finalizers may close or take */
      holder = push_channel(L);
      continue;
    }
    if (!descriptor_free(L, ch))
      return luaL_error(L, "recv: no descriptor is free in this process for the message's memory (EMFILE: "
                           "release received tensors, or see ulimit -n); the message waits");
    if (ch->fd < 0) continue;
    n = receive_record(ch->fd, buf, sizeof buf, fds, &nfds, &trunc, &ctrunc);
    if (n != -2 || (errno != EAGAIN && errno != EWOULDBLOCK)) break;
  }
  if (n == -1) return luaL_error(L, "recv: the peer closed the channel");
  if (n == -2) return luaL_error(L, "recv: %s", strerror(errno));
  const char *err = trunc ? "a message longer than the longest valid one (truncated)"
                  : ctrunc && nfds == MAX_RECEIVED_FDS ? "too many descriptors attached (the kernel dropped some)"
                  : ctrunc ? "the kernel dropped descriptors attached to it (more than one was, or this process "
                             "had none free: EMFILE, see ulimit -n)"
                  : decode(buf, (size_t)n, &m, why, sizeof why);
  if (!err && nfds != 1) err = say(why, sizeof why, "a message needs one descriptor, it came with %d", nfds);
  for (int i = err ? 0 : 1; i < nfds; i++) close(fds[i]);
  if (err) return luaL_error(L, "recv: %s", err);
  holder->pending = m.device.device_type == kDLCUDA ? cuda_import(fds[0], &m, &readonly, why, sizeof why)
                                                    : map_shared(fds[0], &m, &readonly, why, sizeof why);
  if (!holder->pending) return luaL_error(L, "recv: %s", why);
  /* the tensor's allocation may run finalizers, which may close the channel or recv on it */
  push_mapped(L, lua_upvalueindex(1), &m, readonly, &holder->pending, "recv");
  return 1;
}

/* ---- making shareable tensors ---- */

/* empty(shape [, dtype [, device]]), zeros(...): a fresh memfd reads as zeros, so they are the same */
static int l_empty(lua_State *L) { return dlp_create(L, DLP_ALLOC_SHAREABLE, "dlpack.ipc.empty"); }
static int l_zeros(lua_State *L) { return dlp_create(L, DLP_ALLOC_SHAREABLE, "dlpack.ipc.zeros"); }

/* share(t) -> t when shareable, else a contiguous shareable copy */
static int l_share(lua_State *L) {
  dlp_Tensor *t = dlp_tensor_check(L, 1);
  lua_settop(L, 1);
  if (dlp_is_shareable(t)) return 1;
  push_shareable_copy(L, t, NULL, "dlpack.ipc.share");
  return 1;
}

/* ---- the objects' other methods ---- */

static int l_channel_close(lua_State *L) {
  close_channel(luaL_checkudata(L, 1, CHANNEL_MT));
  return 0;
}

static int l_listener_close(lua_State *L) {
  close_listener(luaL_checkudata(L, 1, LISTENER_MT));
  return 0;
}

/* fileno() -> the descriptor, for a host's own poll loop; raises once closed */
static int l_channel_fileno(lua_State *L) {
  lua_pushinteger(L, check_channel(L, 1, "fileno")->fd);
  return 1;
}

static int l_listener_fileno(lua_State *L) {
  Listener *l = luaL_checkudata(L, 1, LISTENER_MT);
  if (l->fd < 0) return luaL_error(L, "fileno: the listener is closed");
  lua_pushinteger(L, l->fd);
  return 1;
}

static int l_channel_tostring(lua_State *L) {
  Channel *ch = luaL_checkudata(L, 1, CHANNEL_MT);
  if (ch->fd < 0) lua_pushliteral(L, "dlpack.ipc.Channel (closed)");
  else lua_pushfstring(L, "dlpack.ipc.Channel (fd %d)", ch->fd);
  return 1;
}

static int l_listener_tostring(lua_State *L) {
  Listener *l = luaL_checkudata(L, 1, LISTENER_MT);
  lua_pushfstring(L, "dlpack.ipc.Listener (%s%s)", l->path, l->fd < 0 ? ", closed" : "");
  return 1;
}

/* The two metatables, once per state. */
static void open_classes(lua_State *L) {
  static const luaL_Reg channel_methods[] = {
    {"send", l_send}, {"recv", l_recv}, {"close", l_channel_close}, {"fileno", l_channel_fileno}, {NULL, NULL},
  };
  static const luaL_Reg listener_methods[] = {
    {"accept", l_accept}, {"close", l_listener_close}, {"fileno", l_listener_fileno}, {NULL, NULL},
  };
  dlp_new_class(L, CHANNEL_MT, channel_methods, NULL, l_channel_close, l_channel_tostring);
  dlp_new_class(L, LISTENER_MT, listener_methods, NULL, l_listener_close, l_listener_tostring);
}

/* Not a luaopen_ name, as dlpack_lua_open_unsafe: `require` alone never reaches it (a sandbox
 * that removes package.loadlib leaves dlpack.ipc out; lua/dlpack/ipc.lua opens it). */
DLPACK_LUA_API int dlpack_lua_open_ipc(lua_State *L) {
  static const luaL_Reg functions[] = {
    {"empty", l_empty}, {"zeros", l_zeros}, {"share", l_share}, {"listen", l_listen}, {"connect", l_connect},
    {NULL, NULL},
  };
  dlp_open_once(L); /* the tensor metatable and the state record first */
  open_classes(L);
  lua_newtable(L);
  dlp_register(L, lua_gettop(L), functions);
  return 1;
}

/* ---- the C API (dlpack_lua.h) ---- */

typedef struct HostCall {
  int fd;
  int taken; /* an object holds fd now (it closes it) */
  const DLTensor *layout;
  uint64_t flags;
} HostCall;

static int push_channel_body(lua_State *L) {
  HostCall *c = lua_touserdata(L, 1);
  int type = 0, domain = 0;
  socklen_t len = sizeof type, dlen = sizeof domain;
  struct sockaddr_un peer;
  socklen_t plen = sizeof peer;
  if (getsockopt(c->fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
      getsockopt(c->fd, SOL_SOCKET, SO_DOMAIN, &domain, &dlen) != 0 || type != SOCK_SEQPACKET || domain != AF_UNIX)
    return luaL_error(L, "dlpack_lua_push_channel: the descriptor is not an AF_UNIX SOCK_SEQPACKET socket");
  /* a listening or never connected socket would make a channel whose every recv and send fails */
  if (getpeername(c->fd, (struct sockaddr *)&peer, &plen) != 0)
    return luaL_error(L, "dlpack_lua_push_channel: the socket is not connected (it listens, or never connected)");
  open_classes(L);
  push_channel(L)->fd = c->fd;
  c->taken = 1;
  fcntl(c->fd, F_SETFD, FD_CLOEXEC);
  /* Control messages of the host's options: the sender's credentials take the room of the
   * descriptor (the kernel drops it, and the message is lost), a pidfd would be a descriptor
   * recv never closes. Off: what the channel receives is its own (ENOPROTOOPT: no such option). */
  static const int options[] = {SO_PASSCRED, SO_PASSSEC, 76 /* SO_PASSPIDFD, Linux 6.5 */};
  int off = 0;
  for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
    setsockopt(c->fd, SOL_SOCKET, options[i], &off, sizeof off);
  return 1;
}

static int push_shared_body(lua_State *L) {
  HostCall *c = lua_touserdata(L, 1);
  const DLTensor *layout = c->layout;
  Message m;
  char why[200];
  int readonly = 0;
  struct stat st;
  const char *err = NULL;
  memset(&m, 0, sizeof m);
  if (!layout) return luaL_error(L, "dlpack_lua_push_shared: no layout (NULL)"); /* as a NULL managed tensor */
  m.device = layout->device;
  m.ndim = layout->ndim;
  m.flags = c->flags;
  if (m.device.device_type != kDLCPU) err = "a cpu layout (a host's cuda memory is not lent through a descriptor)";
  else if (m.ndim < 0 || m.ndim > DLP_MAX_NDIM) err = say(why, sizeof why, "ndim %d is not 0 to %d", m.ndim, DLP_MAX_NDIM);
  else if (m.ndim > 0 && !layout->shape) err = "the layout has no shape";
  else if (fstat(c->fd, &st) != 0) err = "the descriptor is not open";
  if (!err) {
    if (m.ndim > 0) memcpy(m.shape, layout->shape, (size_t)m.ndim * sizeof(int64_t));
    m.size = (uint64_t)st.st_size;
    m.offset = layout->byte_offset;
    err = check_layout(&m, layout->dtype, why, sizeof why);
  }
  if (err) return luaL_error(L, "dlpack_lua_push_shared: %s", err);
  if (layout->strides) memcpy(m.strides, layout->strides, (size_t)m.ndim * sizeof(int64_t));
  else dlp_contiguous_strides(m.ndim, m.shape, m.strides); /* (the element count fits: checked) */
  open_classes(L);
  Channel *holder = push_channel(L); /* holds the mapping while the tensor is allocated (its __gc frees it) */
  dlp_push_metatable(L);
  c->taken = 1;
  holder->pending = map_shared(c->fd, &m, &readonly, why, sizeof why);
  if (!holder->pending) return luaL_error(L, "dlpack_lua_push_shared: %s", why);
  push_mapped(L, -1, &m, readonly, &holder->pending, "dlpack_lua_push_shared");
  return 1;
}

/* Run body protected: a descriptor no object took yet is closed if it raises, then the error goes on. */
static void host_call(lua_State *L, lua_CFunction body, HostCall *c, const char *what) {
  /* the module's own record, not the name "dlpack.Tensor" in the registry, which any library may
   * take: without the module, the tensor would have no metatable, and its memory no finalizer */
  if (!dlp_state(L)) {
    close(c->fd);
    luaL_error(L, "%s: the dlpack module is not open in this lua_State", what);
  }
  lua_pushcfunction(L, body);
  lua_pushlightuserdata(L, c);
  if (lua_pcall(L, 1, 1, 0) != 0) {
    if (!c->taken) close(c->fd);
    lua_error(L);
  }
}

DLPACK_LUA_API void dlpack_lua_push_channel(lua_State *L, int fd) {
  HostCall c = {fd, 0, NULL, 0};
  host_call(L, push_channel_body, &c, "dlpack_lua_push_channel");
}

DLPACK_LUA_API void dlpack_lua_push_shared(lua_State *L, int fd, const DLTensor *layout, uint64_t flags) {
  HostCall c = {fd, 0, layout, flags};
  host_call(L, push_shared_body, &c, "dlpack_lua_push_shared");
}

DLPACK_LUA_API int dlpack_lua_shared_fd(lua_State *L, int idx, uint64_t *offset) {
  idx = lua_absindex(L, idx);
  dlp_push_metatable(L);
  dlp_Tensor *t = dlp_tensor_test_with(L, idx, -1);
  lua_pop(L, 1);
  if (!t || !dlp_is_shareable(t)) return -1;
  if (offset) *offset = file_offset_of(t);
  return fcntl(t->owner->fd, F_DUPFD_CLOEXEC, 0);
}

/* ---- CUDA tensors (docs/ipc.md, "CUDA tensors"; the driver's side is ipc_cuda.c) ---- */

/* opts.stream (at idx, nil when absent) for sending a tensor on device: the stream whose work the
 * send waits for (kept alive by a value this pushes), or NULL: with *whole_device, everything
 * queued on the device's context (no stream given), else nothing (-1). Streams on other devices
 * than CUDA's: nil or -1 only. */
static dlp_CudaStream *cuda_send_stream(lua_State *L, int idx, DLDevice device, int *whole_device) {
  *whole_device = lua_isnil(L, idx) && device.device_type == kDLCUDA;
  if (lua_isnil(L, idx)) {
    lua_pushnil(L);
    return NULL;
  }
  dlp_CudaStream *s = dlp_cuda_check_stream(L, idx, device, -1, "send");
  return device.device_type == kDLCUDA ? s : NULL;
}

/* recv's map_shared for a message about a CUDA tensor: the layout must lie inside the size the
 * message gives (the allocation's), which ipc_cuda.c checks against the device and the driver
 * checks against the allocation. Takes fd, as map_shared does. */
static dlp_Owner *cuda_import(int fd, const Message *m, int *readonly, char *why, size_t whylen) {
  dlp_Span span;
  int64_t lo = 0, hi = 0;
  if (!dlp_span_of(m->ndim, m->shape, m->strides, m->dtype, m->flags, &span)) {
    snprintf(why, whylen, "%s", dlp_is_packed(m->dtype, m->flags) ? "packed sub-byte elements need a contiguous layout"
                                                                  : "the layout reaches beyond 64-bit offsets");
    close(fd);
    return NULL;
  }
  if (m->offset > m->size ||
      (span.numel > 0 && (m->offset > INT64_MAX || !dlp_add((int64_t)m->offset, span.lo, &lo) ||
                          !dlp_add((int64_t)m->offset, span.hi, &hi) || lo < 0 || (uint64_t)hi > m->size))) {
    snprintf(why, whylen, "the layout reaches outside the %llu bytes of the CUDA allocation",
             (unsigned long long)m->size);
    close(fd);
    return NULL;
  }
  *readonly = (m->flags & DLP_FLAG_READ_ONLY) != 0;
  return dlp_ipc_cuda_import(fd, m->device, m->size, why, whylen);
}

#else /* not Linux */
#ifdef _WIN32
#include <io.h>
#define close _close
#define SYSTEM "Windows"
#else
#include <unistd.h>
#define SYSTEM "this system (it needs Linux's memfd seals)"
#endif

#include "internal.h"

#define NOT_HERE "dlpack.ipc is not available on " SYSTEM " (README, \"Platforms\")"

int dlp_is_shareable(const dlp_Tensor *t) {
  (void)t;
  return 0;
}

dlp_Owner *dlp_ipc_new_owner(lua_State *L, DLDevice device, size_t nbytes, const char *what) {
  (void)device, (void)nbytes;
  luaL_error(L, "%s: " NOT_HERE, what);
  return NULL;
}

void dlp_ipc_unmap(dlp_Owner *o) { (void)o; } /* no owner has a descriptor here */

int dlp_ipc_shares_file_bytes(uintptr_t a_lo, uintptr_t a_hi, uintptr_t b_lo, uintptr_t b_hi) {
  (void)a_lo, (void)a_hi, (void)b_lo, (void)b_hi;
  return 0;
}

void dlp_ipc_account_descriptor(lua_State *L) { (void)L; }

DLPACK_LUA_API int dlpack_lua_open_ipc(lua_State *L) { return luaL_error(L, NOT_HERE); }

/* They take ownership of fd (a C runtime descriptor on Windows) as on Linux: closed, since they raise. */
DLPACK_LUA_API void dlpack_lua_push_channel(lua_State *L, int fd) {
  close(fd);
  luaL_error(L, "dlpack_lua_push_channel: " NOT_HERE);
}

DLPACK_LUA_API void dlpack_lua_push_shared(lua_State *L, int fd, const DLTensor *layout, uint64_t flags) {
  (void)layout, (void)flags;
  close(fd);
  luaL_error(L, "dlpack_lua_push_shared: " NOT_HERE);
}

DLPACK_LUA_API int dlpack_lua_shared_fd(lua_State *L, int idx, uint64_t *offset) {
  (void)L, (void)idx, (void)offset;
  return -1; /* no tensor is shareable */
}
#endif
