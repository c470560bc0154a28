/* .npy files: dlpack.save(path, t) and dlpack.load(path [, opts]), NumPy's format (numpy/lib/
 * format.py, NEP 1): the magic "\x93NUMPY", a version (1.0, 2.0 or 3.0), the length of the
 * header (2 bytes in 1.0, 4 after), the header (a Python dict literal: 'descr', 'fortran_order',
 * 'shape'), padded with spaces to a newline so that the data starts at a multiple of 64, then
 * the elements.
 *
 * A file is input from anywhere: the header is read by a strict parser of the literal NumPy
 * writes (not by an evaluator), every number in it is range-checked, and the data it describes
 * must be in the file before a byte of it is read or mapped. With {mmap = true} the file is
 * mapped read-only and the tensor (read-only) is a view of the mapping, which goes when the
 * last tensor on it does; a save over a file this process maps is refused (the list of mapped
 * files below), but a file that another process truncates after that is the caller's risk (a
 * touch of a page past its new end is SIGBUS), as it is with NumPy's mmap_mode.
 *
 * Both open files by path, which a sandbox does not grant (a script that can write a file can
 * overwrite the host's): dlpack.deny_file_access(), which a host calls before its scripts run,
 * turns them off for good in that lua_State (the flag is in its record, which no script reaches,
 * and which a second `require` of the module finds again). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define WHAT_SAVE "dlpack.save"
#define WHAT_LOAD "dlpack.load"

#define MAGIC "\x93NUMPY"
#define MAGIC_LEN 6
/* NumPy's alignment of the data (format.ARRAY_ALIGN) */
#define DATA_ALIGN 64
/* No header of a plain array comes near this (64 dimensions of 19 digits are 1.4 KB); a longer
 * one is refused before it is read, whatever its stated length (up to 4 GiB in 2.0). */
#define MAX_HEADER ((uint32_t)1 << 20)

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define NATIVE_ORDER '>'
#else
#define NATIVE_ORDER '<'
#endif

/* The descr of each dtype, without its byte order; NULL: NumPy has no such type (bfloat16 and
 * the 8-, 6- and 4-bit floats live in the ml_dtypes package, which np.save writes as void). */
static const char *const descr_of[DLP_NDTYPES] = {
  [DLP_BOOL] = "b1", [DLP_INT8] = "i1", [DLP_INT16] = "i2", [DLP_INT32] = "i4", [DLP_INT64] = "i8",
  [DLP_UINT8] = "u1", [DLP_UINT16] = "u2", [DLP_UINT32] = "u4", [DLP_UINT64] = "u8",
  [DLP_FLOAT16] = "f2", [DLP_FLOAT32] = "f4", [DLP_FLOAT64] = "f8", [DLP_COMPLEX64] = "c8",
  [DLP_COMPLEX128] = "c16",
};

/* ---- the open file, in a box whose finaliser closes it if an error leaves it open ---- */

#define FILE_MT "dlpack.npy.file"

typedef struct Box {
  FILE *f;
} Box;

static int box_gc(lua_State *L) {
  Box *b = lua_touserdata(L, 1);
  if (b->f) fclose(b->f);
  b->f = NULL;
  return 0;
}

/* A closed box, pushed: made before the file is opened, so that no error can lose the file. */
static Box *push_box(lua_State *L) {
  Box *b = lua_newuserdatauv(L, sizeof *b, 0);
  b->f = NULL;
  luaL_getmetatable(L, FILE_MT);
  lua_setmetatable(L, -2);
  return b;
}

/* The path argument: a string without an embedded NUL (C would cut it at the NUL). Raises first
 * when file access is denied in this state. */
static const char *check_path(lua_State *L, int arg, const char *what) {
  dlp_State *st = dlp_state(L);
  if (!st || st->files_denied)
    luaL_error(L, "%s: file access is denied in this lua_State (dlpack.deny_file_access)", what);
  size_t len;
  const char *path = luaL_checklstring(L, arg, &len);
  if (strlen(path) != len)
    luaL_argerror(L, arg, lua_pushfstring(L, "the path %s contains an embedded NUL", dlp_push_quoted(L, path, len)));
  return path;
}

/* fread and fwrite in pieces of at most 1 GiB (some C libraries take no more at once). */
#define PIECE ((size_t)1 << 30)

static int read_all(FILE *f, char *p, size_t n) {
  for (size_t done = 0, k; done < n; done += k) {
    size_t want = n - done < PIECE ? n - done : PIECE;
    if ((k = fread(p + done, 1, want, f)) != want) return 0;
  }
  return 1;
}

static int write_all(FILE *f, const char *p, size_t n) {
  for (size_t done = 0, k; done < n; done += k) {
    size_t want = n - done < PIECE ? n - done : PIECE;
    if ((k = fwrite(p + done, 1, want, f)) != want) return 0;
  }
  return 1;
}

/* ---- the header: a strict parser of the dict literal NumPy writes ----
 * {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } with the keys in any order, each
 * once, strings in either quote and without escapes, spaces (and tabs, newlines) between the
 * tokens, a trailing comma allowed in the dict and the tuple, and only spaces and newlines after
 * the closing brace. Anything else is refused, naming what and where. */

typedef struct Header {
  int dtype;
  int swap;    /* the elements are in the other byte order */
  int fortran; /* column-major */
  int ndim;
  int64_t shape[DLP_MAX_NDIM];
} Header;

typedef struct Parser {
  const char *s, *end;
  const char *start;
  char *why;
  size_t whylen;
} Parser;

static int fail(Parser *p, const char *fmt, const char *detail) {
  char text[160];
  snprintf(text, sizeof text, fmt, detail);
  snprintf(p->why, p->whylen, "the header %s (at byte %d of the dictionary)", text, (int)(p->s - p->start));
  return 0;
}

static void skip_space(Parser *p) {
  while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r')) p->s++;
}

static int accept(Parser *p, char c) {
  skip_space(p);
  if (p->s < p->end && *p->s == c) return p->s++, 1;
  return 0;
}

/* A quoted string into out (size n): 1, or 0 with why. */
static int parse_string(Parser *p, char *out, size_t n, const char *what) {
  skip_space(p);
  if (p->s >= p->end || (*p->s != '\'' && *p->s != '"')) return fail(p, "has no string where %s belongs", what);
  char quote = *p->s++;
  if (!memchr(p->s, quote, (size_t)(p->end - p->s))) return fail(p, "ends inside %s (no closing quote)", what);
  size_t k = 0;
  for (; p->s < p->end && *p->s != quote; p->s++) {
    if (*p->s == '\\') return fail(p, "has an escape in %s (not written by NumPy; refused)", what);
    if (*p->s == '\n' || *p->s == '\r') return fail(p, "has a line break inside %s", what);
    if (k + 1 >= n) return fail(p, "has %s that is too long", what);
    out[k++] = *p->s;
  }
  p->s++;
  out[k] = 0;
  return 1;
}

static int is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static int parse_bool(Parser *p, int *out) {
  skip_space(p);
  size_t left = (size_t)(p->end - p->s);
  for (int v = 0; v < 2; v++) {
    const char *word = v ? "True" : "False";
    size_t n = strlen(word);
    if (left >= n && memcmp(p->s, word, n) == 0 && (left == n || !is_name_char(p->s[n]))) {
      p->s += n;
      *out = v;
      return 1;
    }
  }
  return fail(p, "has a 'fortran_order' that is not True or False%s", "");
}

/* A decimal size as Python writes it: no sign, no leading zero, no underscore; fits int64. */
static int parse_size(Parser *p, int64_t *out) {
  skip_space(p);
  if (p->s < p->end && *p->s == '-') return fail(p, "has a negative dimension in 'shape'%s", "");
  if (p->s >= p->end || *p->s < '0' || *p->s > '9') return fail(p, "has no integer where a dimension belongs%s", "");
  if (*p->s == '0' && p->s + 1 < p->end && is_name_char(p->s[1]))
    return fail(p, "has a dimension with a leading zero or a prefix (not a Python integer literal)%s", "");
  int64_t v = 0;
  for (; p->s < p->end && *p->s >= '0' && *p->s <= '9'; p->s++) {
    int digit = *p->s - '0';
    if (v > (INT64_MAX - digit) / 10) return fail(p, "has a dimension that does not fit in 64 bits%s", "");
    v = v * 10 + digit;
  }
  if (p->s < p->end && is_name_char(*p->s))
    return fail(p, "has a dimension that is not a plain decimal integer%s", "");
  *out = v;
  return 1;
}

/* (), (n,), (n, m), (n, m,) */
static int parse_shape(Parser *p, Header *h) {
  if (!accept(p, '(')) return fail(p, "has a 'shape' that is not a tuple%s", "");
  h->ndim = 0;
  if (accept(p, ')')) return 1;
  for (;;) {
    if (h->ndim == DLP_MAX_NDIM)
      return fail(p, "has a 'shape' of more than 64 dimensions (the most a tensor has)%s", "");
    if (!parse_size(p, &h->shape[h->ndim++])) return 0;
    if (accept(p, ',')) {
      if (accept(p, ')')) return 1;
      continue;
    }
    if (accept(p, ')')) {
      if (h->ndim == 1) return fail(p, "has a 'shape' (n) that is a number, not a tuple (n,)%s", "");
      return 1;
    }
    return fail(p, "has a 'shape' with something other than ',' or ')' after a dimension%s", "");
  }
}

/* The descr of a plain array: a byte order and a type code with its size. */
static int parse_descr(Parser *p, Header *h) {
  char d[32];
  skip_space(p);
  if (p->s < p->end && *p->s == '[')
    return fail(p, "describes a structured dtype (a list of fields), which is not supported%s", "");
  if (!parse_string(p, d, sizeof d, "'descr'")) return 0;
  char order = d[0];
  if (order != '<' && order != '>' && order != '|' && order != '=')
    return fail(p, "has a descr '%s' without a byte order ('<', '>' or '|'), which NumPy always writes", d);
  if (d[1] == 'O')
    return fail(p, "has descr '%s': an object array (pickled Python objects), which cannot be loaded", d);
  for (int i = 0; i < DLP_NDTYPES; i++)
    if (descr_of[i] && strcmp(d + 1, descr_of[i]) == 0) {
      int one_byte = dlp_dtypes[i].itemsize == 1;
      if (order == '|' && !one_byte) return fail(p, "has descr '%s': '|' (no byte order) is for one-byte types", d);
      h->dtype = i;
      h->swap = !one_byte && order != '=' && order != '|' && order != NATIVE_ORDER;
      return 1;
    }
  return fail(p, "has descr '%s', which is not a dtype this module has (plain bool, integer, float16/32/64 and "
                 "complex64/128 arrays only)", d);
}

static int parse_header(const char *text, size_t len, Header *h, char *why, size_t whylen) {
  Parser p = {text, text + len, text, why, whylen};
  int seen[3] = {0, 0, 0};
  static const char *const keys[3] = {"descr", "fortran_order", "shape"};
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c >= 0x80 || (c < 0x20 && c != '\n' && c != '\r' && c != '\t')) {
      snprintf(why, whylen, "the header has a%s byte 0x%02x at byte %d (plain arrays have ASCII headers)",
               c >= 0x80 ? " non-ASCII" : " control", c, (int)i);
      return 0;
    }
  }
  if (!accept(&p, '{')) return fail(&p, "is not a dictionary literal (no '{')%s", "");
  while (!accept(&p, '}')) {
    char key[32];
    int k;
    if (!parse_string(&p, key, sizeof key, "a key")) return 0;
    for (k = 0; k < 3 && strcmp(key, keys[k]) != 0; k++) {}
    if (k == 3) return fail(&p, "has the key '%s' (a .npy header has 'descr', 'fortran_order' and 'shape' only)", key);
    if (seen[k]++) return fail(&p, "has the key '%s' twice", key);
    if (!accept(&p, ':')) return fail(&p, "has no ':' after the key '%s'", key);
    if (!(k == 0 ? parse_descr(&p, h) : k == 1 ? parse_bool(&p, &h->fortran) : parse_shape(&p, h))) return 0;
    if (accept(&p, ',')) continue;
    if (accept(&p, '}')) break;
    return fail(&p, "has something other than ',' or '}' after the value of '%s'", key);
  }
  for (int k = 0; k < 3; k++)
    if (!seen[k]) return fail(&p, "lacks the key '%s'", keys[k]);
  skip_space(&p);
  if (p.s != p.end) return fail(&p, "has trailing garbage after the dictionary%s", "");
  return 1;
}

/* ---- reading a file's preamble and header ---- */

typedef struct Npy {
  Header h;
  int64_t file_size;
  int64_t data_offset; /* where the elements start */
  int64_t nbytes;      /* of the elements */
} Npy;

static uint32_t little_endian(const unsigned char *b, int n) {
  uint32_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | b[i];
  return v;
}

/* Read and check everything before the elements, leaving f at the first of them: 1, or 0 with
 * why. Runs no Lua code. */
static int read_npy(FILE *f, Npy *n, char *why, size_t whylen) {
  unsigned char pre[12];
  if ((n->file_size = dlp_file_size(f, why, whylen)) < 0) return 0;
  if (n->file_size < 10)
    return snprintf(why, whylen, "the file is too short to be a .npy file (%d bytes)", (int)n->file_size), 0;
  if (!read_all(f, (char *)pre, 8)) return snprintf(why, whylen, "reading the file failed"), 0;
  if (memcmp(pre, MAGIC, MAGIC_LEN) != 0)
    return snprintf(why, whylen, "not a .npy file (it does not start with \\x93NUMPY)"), 0;
  int major = pre[6], minor = pre[7];
  if (major < 1 || major > 3 || minor != 0)
    return snprintf(why, whylen, "unsupported .npy format version %d.%d (1.0, 2.0 and 3.0 are read)", major, minor), 0;
  int lenbytes = major == 1 ? 2 : 4, start = 8 + lenbytes;
  if (n->file_size < start) return snprintf(why, whylen, "the file ends inside the header length"), 0;
  if (!read_all(f, (char *)pre + 8, (size_t)lenbytes)) return snprintf(why, whylen, "reading the file failed"), 0;
  uint32_t hlen = little_endian(pre + 8, lenbytes);
  if (hlen > MAX_HEADER)
    return snprintf(why, whylen, "the header length %lu is more than this reader takes (1 MiB)",
                    (unsigned long)hlen), 0;
  if ((int64_t)start + hlen > n->file_size)
    return snprintf(why, whylen, "the header length %lu runs past the end of the file (%lld bytes)",
                    (unsigned long)hlen, (long long)n->file_size), 0;
  char *text = malloc(hlen ? hlen : 1);
  if (!text) return snprintf(why, whylen, "not enough memory for the header"), 0;
  int ok = read_all(f, text, hlen);
  if (!ok) snprintf(why, whylen, "reading the file failed");
  else ok = parse_header(text, hlen, &n->h, why, whylen);
  free(text);
  if (!ok) return 0;
  int64_t numel;
  n->data_offset = (int64_t)start + hlen;
  if (!dlp_numel_of(n->h.ndim, n->h.shape, &numel))
    return snprintf(why, whylen, "the header's shape has more elements than fit in 64 bits"), 0;
  if (!dlp_bytes_of(n->h.dtype, numel, 0, &n->nbytes) || (uint64_t)n->nbytes > PTRDIFF_MAX / 2)
    return snprintf(why, whylen, "the header's shape has %lld elements of %s: too many bytes", (long long)numel,
                    dlp_dtypes[n->h.dtype].name), 0;
  if (n->nbytes > n->file_size - n->data_offset)
    return snprintf(why, whylen, "the header says %lld bytes of data from byte %lld, the file has %lld: it is short "
                    "or truncated", (long long)n->nbytes, (long long)n->data_offset,
                    (long long)(n->file_size - n->data_offset)), 0;
  return 1;
}

/* Column-major strides (only an empty shape overflows: saturated, as dlp_contiguous_strides does). */
static void fortran_strides(int ndim, const int64_t *shape, int64_t *strides) {
  int64_t step = 1;
  for (int i = 0; i < ndim; i++) {
    strides[i] = step;
    if (shape[i] > 1 && !dlp_mul(step, shape[i], &step)) step = INT64_MAX;
  }
}

static void byte_swap(char *p, int64_t nbytes, int width) {
  for (int64_t at = 0; at + width <= nbytes; at += width)
    for (int i = 0; i < width / 2; i++) {
      char c = p[at + i];
      p[at + i] = p[at + width - 1 - i];
      p[at + width - 1 - i] = c;
    }
}

/* ---- mapped files: the owner of a mapping is a producer's managed tensor whose deleter unmaps ---- */

typedef struct Mapping {
  DLManagedTensorVersioned managed;
  void *base;
  size_t length;
  /* in the list below while mapped, when the system says which file it is */
  uint64_t file[2];
  struct Mapping *next, **pprev;
} Mapping;

/* The files this process maps, by device and inode: dlpack.save refuses to write one of them,
 * since cutting a file under its mapping makes a touch of the pages past the new end SIGBUS (a
 * save of a mapped tensor onto its own file killed the process). Process-wide, under a lock: a
 * mapped tensor may outlive its lua_State, and an export's deleter may run on any thread. */
static dlp_mutex mapped_lock = DLP_MUTEX_INIT;
static Mapping *mapped_files;

static void list_mapping_locked(Mapping *map) {
  map->next = mapped_files;
  if (map->next) map->next->pprev = &map->next;
  map->pprev = &mapped_files;
  mapped_files = map;
}

static int is_mapped_locked(const uint64_t file[2]) {
  const Mapping *m = mapped_files;
  while (m && !(m->file[0] == file[0] && m->file[1] == file[1])) m = m->next;
  return m != NULL;
}

static void unmap_deleter(DLManagedTensorVersioned *m) {
  Mapping *map = m->manager_ctx;
  if (map->pprev) {
    dlp_mutex_lock(&mapped_lock);
    *map->pprev = map->next;
    if (map->next) map->next->pprev = map->pprev;
    dlp_mutex_unlock(&mapped_lock);
  }
  dlp_file_unmap(map->base, map->length);
  free(map);
}

/* A mapping holds no memory of this process (its pages are the file's, which the system drops
 * and reads again at will), so it is not counted as tensor memory: mapping a large file would
 * then cost a full collection, and mapping is to be O(1) in the file's size. What a process has
 * few of is mappings (65530 on Linux by default): a full collection every 128 new ones, as for
 * the descriptors of dlpack.ipc. */
static void account_mapping(lua_State *L) {
  if (dlp_state_descriptor(L) && dlp_gc_running(L)) lua_gc(L, LUA_GCCOLLECT, 0);
}

/* The tensor on a read-only mapping of the file in box (whose header n describes), pushed. */
static dlp_Tensor *push_mapped(lua_State *L, Box *box, const Npy *n, const char *path) {
  char why[200];
  dlp_Tensor *t = dlp_tensor_push(L, n->h.ndim); /* first: it may run finalizers (a save among them) */
  size_t length = (size_t)(n->data_offset + n->nbytes);
  Mapping *map = malloc(sizeof *map);
  if (!map) luaL_error(L, WHAT_LOAD ": not enough memory");
  memset(map, 0, sizeof *map);
  /* the size again, the mapping and its place in the list under the lock a save truncates
   * under: a save (by a finalizer above, or on another thread) cuts the file before the size is
   * read here, or finds the file listed, never in between */
  int known = dlp_file_identity(box->f, map->file);
  dlp_mutex_lock(&mapped_lock);
  int64_t size = dlp_file_size(box->f, why, sizeof why);
  void *base = size >= (int64_t)length ? dlp_file_map_readonly(box->f, length, why, sizeof why) : NULL;
  if (base && known) list_mapping_locked(map);
  dlp_mutex_unlock(&mapped_lock);
  if (!base) {
    free(map);
    if (size >= 0 && size < (int64_t)length)
      luaL_error(L, WHAT_LOAD ": '%s' got shorter while it was loaded (%I bytes, %I needed)", path, (lua_Integer)size,
                 (lua_Integer)length);
    luaL_error(L, WHAT_LOAD ": cannot map '%s': %s", path, why);
    return NULL;
  }
  map->base = base;
  map->length = length;
  map->managed.version.major = DLPACK_MAJOR_VERSION;
  map->managed.version.minor = DLPACK_MINOR_VERSION;
  map->managed.manager_ctx = map;
  map->managed.deleter = unmap_deleter;
  map->managed.flags = DLP_FLAG_READ_ONLY;
  char *data = (char *)base + n->data_offset;
  dlp_Owner *o = dlp_owner_new_managed(&map->managed, 1, length, (uintptr_t)data, (uintptr_t)data + (size_t)n->nbytes);
  if (!o) {
    unmap_deleter(&map->managed);
    luaL_error(L, WHAT_LOAD ": not enough memory");
    return NULL;
  }
  t->owner = o;
  t->dl.data = data;
  t->dl.device.device_type = kDLCPU;
  t->dl.dtype = dlp_dtype_to_dl(n->h.dtype);
  t->dtype = n->h.dtype;
  t->flags = DLP_FLAG_READ_ONLY;
  return t;
}

/* The tensor with the elements read from box's file, pushed (writable). */
static dlp_Tensor *push_read(lua_State *L, Box *box, const Npy *n, const char *path) {
  DLDevice cpu = {kDLCPU, 0};
  dlp_Tensor *t = dlp_tensor_new(L, n->h.dtype, 0, cpu, n->h.ndim, n->h.shape, 0, WHAT_LOAD);
  /* a new tensor no script has seen: no finalizer can release it, and fread runs no Lua code */
  if (n->nbytes > 0 && !read_all(box->f, dlp_first_element(t), (size_t)n->nbytes))
    luaL_error(L, WHAT_LOAD ": reading '%s' failed (%s)", path, feof(box->f) ? "the file got shorter" : "read error");
  if (n->h.swap) {
    int width = dlp_dtypes[n->h.dtype].itemsize; /* a complex number swaps as its two parts */
    byte_swap(dlp_first_element(t), n->nbytes, n->h.dtype >= DLP_COMPLEX64 ? width / 2 : width);
  }
  return t;
}

static void read_load_options(lua_State *L, int arg, int *mmap, int *has_device, DLDevice *device) {
  *mmap = 0;
  *has_device = 0;
  if (lua_isnoneornil(L, arg)) return;
  luaL_checktype(L, arg, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, arg)) { /* the keys it has, raw: unknown ones are refused */
    size_t len;
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &len) : NULL;
    if (!k || !((len == 4 && memcmp(k, "mmap", 4) == 0) || (len == 6 && memcmp(k, "device", 6) == 0)))
      luaL_argerror(L, arg, lua_pushfstring(L, "unknown option %s (load takes mmap and device)",
                                            k ? dlp_push_quoted(L, k, len) : luaL_typename(L, -2)));
    lua_pop(L, 1);
  }
  lua_getfield(L, arg, "mmap"); /* the two options as every option is read: __index may give them */
  if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
    luaL_argerror(L, arg, lua_pushfstring(L, "mmap must be a boolean, got %s", luaL_typename(L, -1)));
  *mmap = lua_toboolean(L, -1);
  lua_getfield(L, arg, "device");
  if (!lua_isnil(L, -1)) {
    *device = dlp_check_device(L, -1, arg, "device");
    *has_device = 1;
  }
  lua_pop(L, 2);
}

/* dlpack.load(path [, {mmap = bool, device = d}]) */
static int l_load(lua_State *L) {
  char why[300];
  int mmap, has_device;
  DLDevice device;
  Npy n;
  const char *path = check_path(L, 1, WHAT_LOAD);
  read_load_options(L, 2, &mmap, &has_device, &device);
  dlp_check_no_more(L, 3, WHAT_LOAD, "a path and an options table");
  lua_settop(L, 2);
  Box *box = push_box(L); /* at 3 */
  if ((box->f = dlp_file_open(path, 0)) == NULL)
    return luaL_error(L, WHAT_LOAD ": cannot open '%s': %s", path, strerror(errno));
  int ok = read_npy(box->f, &n, why, sizeof why);
  if (!ok || (mmap && n.h.swap)) { /* closed now, not when the collector finds the box */
    fclose(box->f);
    box->f = NULL;
  }
  if (!ok) return luaL_error(L, WHAT_LOAD ": '%s': %s", path, why);
  if (mmap && n.h.swap)
    return luaL_error(L, WHAT_LOAD ": '%s' is %s in the other byte order (descr '%c%s'): it cannot be mapped as "
                         "it is; load it without mmap, which swaps the bytes", path, dlp_dtypes[n.h.dtype].name,
                      NATIVE_ORDER == '<' ? '>' : '<', descr_of[n.h.dtype]);
  dlp_Tensor *t;
  if (mmap && n.nbytes > 0) {
    t = push_mapped(L, box, &n, path);
  } else {
    t = push_read(L, box, &n, path);
    if (mmap) t->flags |= DLP_FLAG_READ_ONLY; /* empty: nothing to map, read-only all the same */
  }
  if (n.h.fortran) fortran_strides(n.h.ndim, n.h.shape, t->dl.strides);
  else dlp_contiguous_strides(n.h.ndim, n.h.shape, t->dl.strides);
  memcpy(t->dl.shape, n.h.shape, (size_t)n.h.ndim * sizeof(int64_t));
  dlp_tensor_seal(L, t, WHAT_LOAD);
  fclose(box->f);
  box->f = NULL;
  if (mmap && n.nbytes > 0) account_mapping(L);
  if (has_device && device.device_type != kDLCPU) { /* the copy (at 5) is the result */
    dlp_clone(L, 4, n.h.dtype, device, NULL, WHAT_LOAD);
    dlp_tensor_release(t);
  }
  return 1;
}

/* ---- saving ---- */

/* The preamble and header of t (a contiguous row-major array) into out: its length. */
static size_t format_header(const dlp_Tensor *t, char *out, size_t size) {
  char shape[DLP_MAX_NDIM * 22 + 4];
  size_t k = 0;
  shape[k++] = '(';
  for (int i = 0; i < t->dl.ndim; i++)
    k += (size_t)snprintf(shape + k, sizeof shape - k, i ? ", %lld" : "%lld", (long long)t->dl.shape[i]);
  if (t->dl.ndim == 1) shape[k++] = ',';
  shape[k++] = ')';
  shape[k] = 0;
  char order = dlp_dtypes[t->dtype].itemsize == 1 ? '|' : NATIVE_ORDER;
  /* 64 dimensions of 19 digits make 1.4 KB: a header always fits version 1.0's 16-bit length */
  size_t dict = (size_t)snprintf(out + 10, size - 10, "{'descr': '%c%s', 'fortran_order': False, 'shape': %s, }",
                                 order, descr_of[t->dtype], shape);
  size_t total = 10 + dict + 1;                   /* with the newline */
  size_t padded = (total + DATA_ALIGN - 1) / DATA_ALIGN * DATA_ALIGN;
  memset(out + 10 + dict, ' ', padded - total);
  out[padded - 1] = '\n';
  memcpy(out, MAGIC "\x01\x00", 8);
  out[8] = (char)((padded - 10) & 0xff);
  out[9] = (char)((padded - 10) >> 8);
  return padded;
}

/* dlpack.save(path, t) */
static int l_save(lua_State *L) {
  char header[DLP_MAX_NDIM * 22 + 128];
  const char *path = check_path(L, 1, WHAT_SAVE);
  dlp_Tensor *t = dlp_tensor_check(L, 2);
  dlp_check_no_more(L, 3, WHAT_SAVE, "a path and a tensor");
  if (!descr_of[t->dtype])
    return luaL_error(L, WHAT_SAVE ": %s has no .npy descr (NumPy has no such type): convert first, "
                         "e.g. t:to('float32')",
                      dlp_dtypes[t->dtype].name);
  lua_settop(L, 2);
  int src = 2;
  /* a CUDA tensor comes through the host; a strided one is written in row-major order */
  if (!dlp_device_is_host(t->dl.device) || !dlp_is_contiguous(t)) {
    DLDevice cpu = {kDLCPU, 0};
    dlp_clone(L, 2, t->dtype, cpu, NULL, WHAT_SAVE);
    src = 3;
  }
  Box *box = push_box(L);
  if ((box->f = dlp_file_open(path, 1)) == NULL)
    return luaL_error(L, WHAT_SAVE ": cannot open '%s': %s", path, strerror(errno));
  uint64_t file[2];
  int known = dlp_file_identity(box->f, file);
  dlp_mutex_lock(&mapped_lock); /* looked at and cut at once (see push_mapped) */
  int mapped = known && is_mapped_locked(file), cut = !mapped && dlp_file_truncate(box->f), cut_err = errno;
  dlp_mutex_unlock(&mapped_lock);
  if (!cut) { /* closed now, not when the collector finds the box */
    fclose(box->f);
    box->f = NULL;
    if (mapped)
      return luaL_error(L, WHAT_SAVE ": '%s' is mapped by a tensor of this process (dlpack.load with mmap = true), "
                           "which writing it would cut from under; save to another path, or release that tensor first",
                        path);
    return luaL_error(L, WHAT_SAVE ": cannot truncate '%s': %s", path, strerror(cut_err));
  }
  dlp_Tensor *s = lua_touserdata(L, src);
  dlp_live(L, s, WHAT_SAVE); /* no Lua code runs from here to the last byte written */
  size_t hlen = format_header(s, header, sizeof header);
  int64_t nbytes = dlp_nbytes(s);
  dlp_WriteQuiet quiet; /* a FIFO's reader that leaves early, ulimit -f: an error, not a killed process */
  dlp_write_quiet_begin(&quiet);
  int ok = write_all(box->f, header, hlen) && (nbytes == 0 || write_all(box->f, dlp_first_element(s), (size_t)nbytes));
  int err = ok ? 0 : errno;
  if (fclose(box->f) != 0 && ok) ok = 0, err = errno; /* a full disk may show only here */
  box->f = NULL;
  dlp_write_quiet_end(&quiet);
  if (!ok) return luaL_error(L, WHAT_SAVE ": writing '%s' failed: %s", path, strerror(err));
  if (src == 3) dlp_tensor_release(lua_touserdata(L, 3)); /* the copy's memory goes now */
  return 0;
}

/* dlpack.deny_file_access(): from now on save and load raise in this lua_State; no undoing it. */
static int l_deny_file_access(lua_State *L) {
  dlp_State *st = dlp_state(L);
  if (st) st->files_denied = 1;
  return 0;
}

void dlp_npy_register(lua_State *L, int module) {
  static const luaL_Reg functions[] = {
    {"save", l_save}, {"load", l_load}, {"deny_file_access", l_deny_file_access}, {NULL, NULL},
  };
  if (luaL_newmetatable(L, FILE_MT)) {
    lua_pushcfunction(L, box_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  dlp_register(L, module, functions);
}
