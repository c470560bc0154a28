/* Elementwise functions: arithmetic, comparisons, logic, bitwise, math, where, clamp,
 * masked_fill, equal, allclose, the Lua operators and the in-place `_` methods. One driver
 * serves them all: operands read (operands.c), result dtype chosen by NumPy 2's rules, shapes
 * broadcast, the output allocated or checked, inputs that overlap the output copied first, then
 * the iteration engine (iter.c) runs the typed loop (kernels.c), converting operands whose dtype
 * is not the loop's in blocks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "compute/ops.h"
#include "internal.h"

/* How an operation chooses its dtypes from the promoted dtype P of its inputs. */
enum {
  RULE_ARITH,    /* result P; bool only where the op has a bool loop (else int8, as NumPy) */
  RULE_DIV,      /* true division: result P for floats, float64 for integers and bool */
  RULE_COMPARE,  /* result bool, computed in P */
  RULE_BITWISE,  /* integers and bool only, result P */
  RULE_SHIFT,    /* integers only (bool computes as int8), result P */
  RULE_FLOATFN,  /* result: P for floats, the smallest float holding an integer P */
  RULE_KEEP,     /* result P (neg abs sign floor ceil round trunc) */
  RULE_CLASSIFY, /* result bool, computed in P */
  RULE_WHERE,    /* cond any dtype, result the promoted dtype of the two values */
};

typedef struct OpInfo {
  const char *name;
  int arity; /* inputs */
  int rule;
} OpInfo;

static const OpInfo ops[DLP_OP_COUNT] = {
  [DLP_OP_ADD] = {"add", 2, RULE_ARITH}, [DLP_OP_SUB] = {"sub", 2, RULE_ARITH},
  [DLP_OP_MUL] = {"mul", 2, RULE_ARITH}, [DLP_OP_DIV] = {"div", 2, RULE_DIV},
  [DLP_OP_IDIV] = {"idiv", 2, RULE_ARITH}, [DLP_OP_MOD] = {"mod", 2, RULE_ARITH},
  [DLP_OP_POW] = {"pow", 2, RULE_ARITH}, [DLP_OP_MAXIMUM] = {"maximum", 2, RULE_ARITH},
  [DLP_OP_MINIMUM] = {"minimum", 2, RULE_ARITH}, [DLP_OP_EQ] = {"eq", 2, RULE_COMPARE},
  [DLP_OP_NE] = {"ne", 2, RULE_COMPARE}, [DLP_OP_LT] = {"lt", 2, RULE_COMPARE},
  [DLP_OP_LE] = {"le", 2, RULE_COMPARE}, [DLP_OP_GT] = {"gt", 2, RULE_COMPARE},
  [DLP_OP_GE] = {"ge", 2, RULE_COMPARE}, [DLP_OP_LOGICAL_AND] = {"logical_and", 2, RULE_COMPARE},
  [DLP_OP_LOGICAL_OR] = {"logical_or", 2, RULE_COMPARE}, [DLP_OP_LOGICAL_XOR] = {"logical_xor", 2, RULE_COMPARE},
  [DLP_OP_BAND] = {"band", 2, RULE_BITWISE}, [DLP_OP_BOR] = {"bor", 2, RULE_BITWISE},
  [DLP_OP_BXOR] = {"bxor", 2, RULE_BITWISE}, [DLP_OP_SHL] = {"shl", 2, RULE_SHIFT},
  [DLP_OP_SHR] = {"shr", 2, RULE_SHIFT}, [DLP_OP_WHERE] = {"where", 3, RULE_WHERE},
  [DLP_OP_CLAMP] = {"clamp", 3, RULE_ARITH},
  [DLP_OP_NEG] = {"neg", 1, RULE_KEEP}, [DLP_OP_ABS] = {"abs", 1, RULE_KEEP},
  [DLP_OP_SIGN] = {"sign", 1, RULE_KEEP}, [DLP_OP_SQRT] = {"sqrt", 1, RULE_FLOATFN},
  [DLP_OP_EXP] = {"exp", 1, RULE_FLOATFN}, [DLP_OP_LOG] = {"log", 1, RULE_FLOATFN},
  [DLP_OP_LOG1P] = {"log1p", 1, RULE_FLOATFN}, [DLP_OP_EXPM1] = {"expm1", 1, RULE_FLOATFN},
  [DLP_OP_SIN] = {"sin", 1, RULE_FLOATFN}, [DLP_OP_COS] = {"cos", 1, RULE_FLOATFN},
  [DLP_OP_TAN] = {"tan", 1, RULE_FLOATFN}, [DLP_OP_TANH] = {"tanh", 1, RULE_FLOATFN},
  [DLP_OP_SIGMOID] = {"sigmoid", 1, RULE_FLOATFN}, [DLP_OP_FLOOR] = {"floor", 1, RULE_KEEP},
  [DLP_OP_CEIL] = {"ceil", 1, RULE_KEEP}, [DLP_OP_ROUND] = {"round", 1, RULE_KEEP},
  [DLP_OP_TRUNC] = {"trunc", 1, RULE_KEEP}, [DLP_OP_ISNAN] = {"isnan", 1, RULE_CLASSIFY},
  [DLP_OP_ISINF] = {"isinf", 1, RULE_CLASSIFY}, [DLP_OP_ISFINITE] = {"isfinite", 1, RULE_CLASSIFY},
  [DLP_OP_LOGICAL_NOT] = {"logical_not", 1, RULE_CLASSIFY}, [DLP_OP_BNOT] = {"bnot", 1, RULE_BITWISE},
  [DLP_OP_LOG2] = {"log2", 1, RULE_FLOATFN}, [DLP_OP_LOG10] = {"log10", 1, RULE_FLOATFN},
  [DLP_OP_ASIN] = {"asin", 1, RULE_FLOATFN}, [DLP_OP_ACOS] = {"acos", 1, RULE_FLOATFN},
  [DLP_OP_ATAN] = {"atan", 1, RULE_FLOATFN}, [DLP_OP_SINH] = {"sinh", 1, RULE_FLOATFN},
  [DLP_OP_COSH] = {"cosh", 1, RULE_FLOATFN}, [DLP_OP_ERF] = {"erf", 1, RULE_FLOATFN},
  [DLP_OP_RSQRT] = {"rsqrt", 1, RULE_FLOATFN}, [DLP_OP_RECIPROCAL] = {"reciprocal", 1, RULE_ARITH},
  [DLP_OP_SQUARE] = {"square", 1, RULE_ARITH}, [DLP_OP_ATAN2] = {"atan2", 2, RULE_FLOATFN},
  [DLP_OP_HYPOT] = {"hypot", 2, RULE_FLOATFN},
};

/* The dtype a loop computes a result dtype in: float16 and bfloat16 in float32. */
static int compute_dtype_of(int dtype) {
  return dtype == DLP_FLOAT16 || dtype == DLP_BFLOAT16 ? DLP_FLOAT32 : dtype;
}

/* The smallest float dtype that holds every value of an integer or bool dtype; others as they are. */
static int float_holding(int dtype) {
  int kind = dlp_dtype_kind(dtype), bits = dlp_dtypes[dtype].bits;
  if (kind > 2) return dtype;
  return bits <= 8 ? DLP_FLOAT16 : bits <= 16 ? DLP_FLOAT32 : DLP_FLOAT64;
}

static int is_integer(int dtype) { int k = dlp_dtype_kind(dtype); return k == 1 || k == 2; }

/* ---- the run: a loop over rows, converting operands in blocks ---- */

#define BLOCK 512

typedef struct Run {
  dlp_IterLoop kernel;
  void *kernel_ctx;
  int nops, converts, periodic;
  /* inputs: storage -> loop dtype; the output: loop -> storage. Where the dtype the function
   * computes is float16 or bfloat16 (computed in float32), values go through it: convert_mid
   * first (inputs: storage -> mid; the output: loop -> mid), then convert from mid. */
  dlp_RowFn convert[DLP_ITER_MAX_OPS], convert_mid[DLP_ITER_MAX_OPS];
  int64_t size[DLP_ITER_MAX_OPS];      /* the loop dtype's itemsize per operand */
  int64_t mid_size[DLP_ITER_MAX_OPS];
  /* a periodic input repeats `period` elements, `pstep` bytes apart, along the row (fold_periodic) */
  int64_t period[DLP_ITER_MAX_OPS], pstep[DLP_ITER_MAX_OPS];
  int stream; /* the output is larger than the cache: its rows go to memory past it (run_streamed) */
} Run;

/* One row: the kernel straight on the operands when no operand needs converting or tiling; else
 * block by block, inputs converted into buffers and periodic inputs read from a tile that repeats
 * their period to the block's length, the output converted back from its buffer. */
static void run_row(const Run *r, char *const *data, const int64_t *steps, int64_t n) {
  if (!r->converts && !r->periodic) {
    r->kernel(r->kernel_ctx, data, steps, n);
    return;
  }
  double buffers[DLP_ITER_MAX_OPS][2 * BLOCK]; /* 16 bytes an element: the widest loop dtype, complex128 */
  double mid[2 * BLOCK]; /* values on their way through the mid dtype (float16 or bfloat16; sized for any) */
  char *ptr[DLP_ITER_MAX_OPS];
  int64_t step[DLP_ITER_MAX_OPS], block = BLOCK;
  for (int k = 1; k < r->nops; k++) /* a tile holds whole periods: blocks are as long as a tile */
    if (r->period[k]) {
      int64_t p = r->period[k];
      block = BLOCK / p * p;
      char *tile = (char *)buffers[k];
      if (r->convert_mid[k]) {
        r->convert_mid[k]((char *)mid, r->mid_size[k], data[k], r->pstep[k], p);
        r->convert[k](tile, r->size[k], (char *)mid, r->mid_size[k], p);
      } else if (r->convert[k]) r->convert[k](tile, r->size[k], data[k], r->pstep[k], p);
      else for (int64_t i = 0; i < p; i++) memcpy(tile + i * r->size[k], data[k] + i * r->pstep[k], (size_t)r->size[k]);
      for (int64_t i = p; i < block; i++) memcpy(tile + i * r->size[k], tile + (i - p) * r->size[k], (size_t)r->size[k]);
    }
  for (int64_t start = 0; start < n; start += block) {
    int64_t m = n - start < block ? n - start : block;
    for (int k = 0; k < r->nops; k++) {
      char *at = dlp_offset(data[k], start * steps[k]);
      if (r->period[k]) {
        ptr[k] = (char *)buffers[k];
        step[k] = r->size[k];
      } else if (r->convert[k]) {
        ptr[k] = (char *)buffers[k];
        step[k] = r->size[k];
        if (k > 0 && r->convert_mid[k]) {
          r->convert_mid[k]((char *)mid, r->mid_size[k], at, steps[k], m);
          r->convert[k](ptr[k], step[k], (char *)mid, r->mid_size[k], m);
        } else if (k > 0) {
          r->convert[k](ptr[k], step[k], at, steps[k], m);
        }
      } else {
        ptr[k] = at;
        step[k] = steps[k];
      }
    }
    r->kernel(r->kernel_ctx, ptr, step, m);
    if (r->convert_mid[0]) {
      r->convert_mid[0]((char *)mid, r->mid_size[0], ptr[0], step[0], m);
      r->convert[0](dlp_offset(data[0], start * steps[0]), steps[0], (char *)mid, r->mid_size[0], m);
    } else if (r->convert[0]) {
      r->convert[0](dlp_offset(data[0], start * steps[0]), steps[0], ptr[0], step[0], m);
    }
  }
}

/* ---- outputs larger than the cache ----
 * A store into memory first reads the line it writes into the cache: for an add, a third more
 * traffic than the operands' bytes. An output larger than the processor's last-level cache would
 * not stay there anyway, so its rows are computed a chunk at a time into a buffer in the first
 * level and stored from there with non-temporal stores, which write whole lines to memory
 * without reading them (x86-64; elsewhere the chunk is copied). Measured on a 2-core AMD EPYC,
 * one thread: add of two float32 16M into a third, 6.3-6.9 ms with plain stores in a C loop,
 * 5.1-5.3 ms through chunks of 256 bytes stored so. Which runs stream: streamable. */

/* Small chunks keep the loads and the stores going at once: in a C test on that machine chunks
 * of 256 bytes ran at 5.3 ms, of 8 KiB at 7.5-8.3 ms (the stores then come in bursts the loads
 * wait for). The test build streams outputs of 4 KiB and more, so that the specs' layouts go
 * this way. */
#define STREAM_CHUNK 256
#ifdef DLPACK_LUA_TEST_TASK_ELEMENTS
#define STREAM_LEAST ((int64_t)4096)
#else
#define STREAM_LEAST ((int64_t)4 << 20)
#endif
#define STREAM_UNKNOWN ((int64_t)32 << 20) /* where the system does not say its cache's size */

static int64_t stream_from = -1; /* output bytes from which rows stream (0: never) */
/* Rows shorter than a chunk keep plain stores; DLPACK_LUA_STREAM_FROM below a chunk streams
 * them too (so that a test of small tensors goes this way). */
static int64_t stream_row_least = STREAM_CHUNK;

/* DLPACK_LUA_STREAM_FROM (bytes; 0 turns streaming off) where set, else the largest cache's
 * size, at least STREAM_LEAST (STREAM_UNKNOWN where the system does not say); never off x86-64.
 * The test build: STREAM_LEAST. */
static void find_stream_from(void) {
  int64_t from = 0;
#if defined(__SSE2__) && (defined(__x86_64__) || defined(_M_X64))
  const char *set = getenv("DLPACK_LUA_STREAM_FROM");
  char *end;
  long long v = set ? strtoll(set, &end, 10) : -1;
  if (set && end != set && *end == '\0' && v >= 0) {
    from = v;
  } else {
#ifdef DLPACK_LUA_TEST_TASK_ELEMENTS
    from = STREAM_LEAST;
#else
    size_t cache = dlp_last_level_cache();
    from = cache == 0 || cache >= (size_t)INT64_MAX ? STREAM_UNKNOWN
           : cache > (size_t)STREAM_LEAST             ? (int64_t)cache
                                                      : STREAM_LEAST;
#endif
  }
#endif
  stream_from = from;
  if (from > 0 && from < STREAM_CHUNK) stream_row_least = from;
}

static dlp_once_flag stream_once = DLP_ONCE_INIT;

int64_t dlp_stream_from(void) {
  dlp_call_once(&stream_once, find_stream_from);
  return stream_from;
}

static int streams(int64_t out_bytes) {
  int64_t from = dlp_stream_from();
  return from > 0 && out_bytes >= from;
}

/* n bytes from an aligned chunk to dst, past the caches where dst allows (16-byte stores). */
static void store_past_cache(char *dst, const char *chunk, int64_t n) {
#if defined(__SSE2__)
  int64_t head = (int64_t)((16 - (uintptr_t)dst % 16) % 16);
  if (head > n) head = n;
  memcpy(dst, chunk, (size_t)head);
  int64_t i = head;
  for (; i + 16 <= n; i += 16) _mm_stream_si128((__m128i *)(void *)(dst + i), _mm_loadu_si128((const void *)(chunk + i)));
  memcpy(dst + i, chunk + i, (size_t)(n - i));
#else
  memcpy(dst, chunk, (size_t)n);
#endif
}

/* A row of a contiguous output in chunks: each computed by the kernel into a buffer, then stored
 * past the cache (the run converts nothing and has no periodic input: streamable). */
static void run_streamed(const Run *r, char *const *data, const int64_t *steps, int64_t n) {
  _Alignas(64) char chunk[STREAM_CHUNK];
  char *ptr[DLP_ITER_MAX_OPS];
  int64_t step[DLP_ITER_MAX_OPS], size = steps[0], per = STREAM_CHUNK / size;
  ptr[0] = chunk;
  step[0] = size;
  for (int k = 1; k < r->nops; k++) step[k] = steps[k];
  for (int64_t start = 0; start < n; start += per) {
    int64_t m = n - start < per ? n - start : per;
    for (int k = 1; k < r->nops; k++) ptr[k] = dlp_offset(data[k], start * steps[k]);
    r->kernel(r->kernel_ctx, ptr, step, m);
    store_past_cache(dlp_offset(data[0], start * size), chunk, m * size);
  }
#if defined(__SSE2__)
  _mm_sfence(); /* the stores are seen before the task is done (they are weakly ordered) */
#endif
}

/* Whether the run's rows may stream: a loop cheap enough that memory bounds it, which storing
 * past the cache speeds up (float32 16M on one thread of the AMD EPYC: add 7.7-8.0 -> 5.3-5.9 ms,
 * mul 7.8-8.1 -> 5.3-5.9, int32 add 6.9-7.1 -> 5.2-5.7; an integer mod, which computes longer,
 * 72 -> 76 ms, and exp 4.3 -> 5.2 stay with plain stores), without conversions or periodic inputs (whose buffers and
 * tiles each chunk would fill again), into an output no input overlaps (in place, the output's
 * lines are in the cache already, just read, and a store past it would evict them: a:add_(b)
 * 4.6 -> 5.4 ms). */
static int streamable(int op, const Run *r, const dlp_Tensor *out, dlp_Tensor *const *source, int n) {
  if (r->converts || r->periodic) return 0;
  for (int k = 0; k < n; k++)
    if (source[k] && dlp_overlaps(out, source[k])) return 0;
  switch (op) {
    case DLP_OP_ADD: case DLP_OP_SUB: case DLP_OP_MUL: case DLP_OP_MAXIMUM: case DLP_OP_MINIMUM:
    case DLP_OP_EQ: case DLP_OP_NE: case DLP_OP_LT: case DLP_OP_LE: case DLP_OP_GT: case DLP_OP_GE:
    case DLP_OP_LOGICAL_AND: case DLP_OP_LOGICAL_OR: case DLP_OP_LOGICAL_XOR:
    case DLP_OP_BAND: case DLP_OP_BOR: case DLP_OP_BXOR:
      return 1;
    default:
      return 0;
  }
}

static void run_rows(void *ctx, char *const *data, const int64_t *steps, int64_t n) {
  const Run *r = ctx;
  /* a run that streams converts nothing: the output's itemsize is the loop's, size[0] */
  if (r->stream && steps[0] == r->size[0] && n * steps[0] >= stream_row_least) run_streamed(r, data, steps, n);
  else run_row(r, data, steps, n);
}

/* The conversions of one operand from dtype `from` to `to` through `mid` (-1: none), into r. */
static void plan_conversion(Run *r, int k, int from, int mid, int to) {
  if (from == to && (mid < 0 || mid == from)) return;
  r->converts = 1;
  if (mid >= 0 && mid != from && mid != to) {
    r->convert_mid[k] = dlp_row_function(mid, from);
    r->mid_size[k] = dlp_dtypes[mid].itemsize;
    r->convert[k] = dlp_row_function(to, mid);
  } else {
    r->convert[k] = dlp_row_function(to, from);
  }
}

/* Broadcasting a short row ({480, 640, 3} + {3}) leaves the iteration engine rows of 3 elements,
 * where a call per row costs more than the work. When every operand either runs on contiguously
 * from the innermost dimension into the next (the output among them) or repeats its innermost
 * row along the next one (stride 0 there), the two dimensions become one long row, and the
 * repeating inputs are read from a tile of their period (run_rows). */
#define MAX_PERIOD 16

static void fold_periodic(dlp_Iter *it, Run *r) {
  int nd = it->ndim, inner = nd - 1, outer = nd - 2;
  if (nd < 2 || it->shape[inner] > MAX_PERIOD) return;
  int64_t p = it->shape[inner], periodic = 0;
  for (int k = 0; k < it->nops; k++) {
    int64_t span;
    if (dlp_mul(it->strides[k][inner], p, &span) && span == it->strides[k][outer]) continue;
    if (k == 0 || it->strides[k][outer] != 0) return;
    periodic = 1;
  }
  if (!periodic) return;
  for (int k = 0; k < it->nops; k++) {
    if (it->strides[k][outer] == 0 && k > 0) {
      r->period[k] = p;
      r->pstep[k] = it->strides[k][inner];
      r->periodic = 1;
      it->strides[k][outer] = 0; /* the tile stands for the whole row */
    } else {
      it->strides[k][outer] = it->strides[k][inner];
    }
  }
  it->shape[outer] *= p; /* fits: the output holds that many elements */
  it->ndim = nd - 1;
}

/* ---- operands ---- */

typedef struct Operand {
  dlp_Tensor *t;         /* NULL for a Lua scalar */
  int weak;              /* the scalar's kind: DLP_WEAK_* */
  lua_Integer i;         /* its value, by kind */
  lua_Number f;
  union {
    unsigned char bytes[16]; /* the scalar in the loop dtype (complex128 the widest) */
    double align;           /* aligned for the loops' fast paths */
  } value;
} Operand;

enum { WEAK_NONE, WEAK_BOOL, WEAK_INT, WEAK_FLOAT };

/* The operand at idx: a tensor (live or not: checked once everything is read) or a Lua number or
 * boolean. Runs no Lua code. */
static void read_operand(lua_State *L, int idx, Operand *op, const char *what) {
  memset(op, 0, sizeof *op);
  if ((op->t = dlp_tensor_test(L, idx)) != NULL) { /* tensors first: the common case */
    /* dlp_live's message is for a release while the call runs; this one came released */
    if (!op->t->owner) luaL_error(L, "%s: the tensor was released before the call", what);
    return;
  }
  switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN:
      op->weak = WEAK_BOOL;
      op->i = lua_toboolean(L, idx);
      return;
    case LUA_TNUMBER: {
      int isint = 0;
#if DLP_LUA_INTEGERS
      isint = lua_isinteger(L, idx);
      if (isint) op->i = lua_tointeger(L, idx);
#else
      /* numbers are doubles: an integral one in int64's range counts as an integer */
      lua_Number x = lua_tonumber(L, idx);
      if (x == floor(x) && x >= -9223372036854775808.0 && x < 9223372036854775808.0) {
        isint = 1;
        op->i = (lua_Integer)x;
      }
#endif
      op->weak = isint ? WEAK_INT : WEAK_FLOAT;
      op->f = lua_tonumber(L, idx);
      return;
    }
    default:
      luaL_error(L, "%s: a tensor, number or boolean expected, got %s", what, luaL_typename(L, idx));
  }
}

/* NumPy 2's promotion of a weak Lua scalar with the dtype P of the tensors (-1: none). */
static int promote_weak(int p, int weak) {
  int kind = p < 0 ? -1 : dlp_dtype_kind(p);
  switch (weak) {
    case WEAK_BOOL: return p < 0 ? DLP_BOOL : p;
    case WEAK_INT: return p < 0 || kind == 0 ? DLP_INT64 : p;
    case WEAK_FLOAT: return p < 0 || kind <= 2 ? DLP_FLOAT64 : p;
    default: return p;
  }
}

/* The promoted dtype of n operands, tensors first, then the weak scalars. */
static int promote_operands(const Operand *o, int n) {
  int p = -1, dtypes[3], count = 0;
  for (int k = 0; k < n; k++)
    if (o[k].t) dtypes[count++] = o[k].t->dtype;
  if (count) p = dlp_promote_many(count, dtypes);
  for (int k = 0; k < n; k++)
    if (!o[k].t) p = promote_weak(p, o[k].weak);
  return p;
}

/* Store the scalar op as an element of dtype (the result's) and then of the loop's dtype. An
 * integer that the dtype cannot hold raises (NumPy 2's OverflowError). */
static void scalar_value(lua_State *L, Operand *op, int dtype, int loop_dtype, const char *what) {
  dlp_Scalar s;
  unsigned char element[16];
  memset(&s, 0, sizeof s);
  if (op->weak == WEAK_FLOAT ||
      (!DLP_LUA_INTEGERS && op->weak == WEAK_INT && !is_integer(dtype) && dtype != DLP_BOOL)) {
    /* where numbers are doubles, an integral one is stored as the double it is into a float
     * dtype: the same value, but -0.0 keeps its sign (-i of an integer 0 is -0.0 there too) */
    s.kind = DLP_S_FLOAT;
    s.re = op->f;
  } else {
    if (op->weak == WEAK_INT && is_integer(dtype) && !dlp_integer_fits(dtype, op->i))
      luaL_error(L, "%s: %I is out of range for %s (a Lua number takes the tensor's dtype)", what, op->i,
                 dlp_dtypes[dtype].name);
    s.kind = DLP_S_INT;
    s.i = op->i;
  }
  dlp_store(dtype, element, &s);
  dlp_row_function(loop_dtype, dtype)((char *)op->value.bytes, 0, (const char *)element, 0, 1);
}

/* Whether any element of t (host memory, live), as a loop reads it, is all zero bytes (integer
 * and bool dtypes) or, with `negative`, has its sign bit set (signed integers). A loop of another
 * dtype than t's reads it converted (convert_mid, then convert, as run_rows does): the question
 * is asked of those values, in that dtype (an int16 divisor of 256 is 0 in int8). */
typedef struct Scan {
  dlp_RowFn convert, convert_mid; /* NULL: t is read as it is */
  int64_t size, mid_size;         /* the read dtype's itemsize; the mid dtype's */
  int negative, found;
} Scan;

/* Whether the element at p, of s->size bytes, is what s looks for. */
static int scan_hits(const Scan *s, const char *p) {
  static const unsigned char zero[16];
  if (s->negative) return (p[s->size - 1] & 0x80) != 0; /* little-endian: the last byte has the sign */
  return memcmp(p, zero, (size_t)s->size) == 0;
}

static void scan_row(void *ctx, char *const *data, const int64_t *steps, int64_t n) {
  Scan *s = ctx;
  double buffer[2 * BLOCK], mid[2 * BLOCK]; /* as run_rows' */
  for (int64_t start = 0; start < n && !s->found; start += BLOCK) {
    int64_t m = n - start < BLOCK ? n - start : BLOCK, step = steps[0];
    const char *p = dlp_offset(data[0], start * steps[0]);
    if (s->convert_mid) {
      s->convert_mid((char *)mid, s->mid_size, p, step, m);
      p = (const char *)mid, step = s->mid_size;
    }
    if (s->convert) {
      s->convert((char *)buffer, s->size, p, step, m);
      p = (const char *)buffer, step = s->size;
    }
    for (int64_t i = 0; i < m && !s->found; i++, p += step) s->found = scan_hits(s, p);
  }
}

static int tensor_has(const dlp_Tensor *t, Scan *s) {
  int64_t strides[1][DLP_MAX_NDIM], shape[DLP_MAX_NDIM];
  char *data[1] = {dlp_first_element(t)};
  dlp_Iter it;
  s->found = 0;
  for (int i = 0; i < t->dl.ndim; i++) { /* an expanded dimension repeats its elements: one look is enough */
    strides[0][i] = dlp_walk_stride(t, i);
    shape[i] = strides[0][i] == 0 && t->dl.shape[i] > 0 ? 1 : t->dl.shape[i];
  }
  dlp_iter_init(&it, 1, t->dl.ndim, shape, data, (const int64_t(*)[DLP_MAX_NDIM])strides, 1);
  dlp_iter_run(&it, scan_row, s);
  return s->found;
}

/* Whether input k of the run (operand k + 1: a tensor, or a scalar already in the loop dtype)
 * has a zero or, with `negative`, a negative element, as the loop will read it. */
static int input_has(const Run *r, int k, const dlp_Tensor *source, const unsigned char *scalar, int negative) {
  Scan s = {r->convert[k + 1], r->convert_mid[k + 1], r->size[k + 1], r->mid_size[k + 1], negative, 0};
  return source ? tensor_has(source, &s) : scan_hits(&s, (const char *)scalar);
}

/* Comparisons of a signed integer with uint64 (NumPy promotes them to float64, which rounds
 * beyond 2^53) compare exactly: each side is read as int64 or uint64 (`want`), and the loop is
 * the mixed one (NULL when the operands are not such a pair). Weak Lua integers count as
 * signed: they promoted to float64 only when the unsigned tensor could not hold them. */
static dlp_IterLoop mixed_integer_compare(const Operand *in, int p, int op, int want[3]) {
  if (p != DLP_FLOAT64 || op < DLP_OP_EQ || op > DLP_OP_GE) return NULL;
  int is_signed[2];
  for (int k = 0; k < 2; k++) {
    int kind = in[k].t ? dlp_dtype_kind(in[k].t->dtype) : in[k].weak == WEAK_INT ? 2 : -1;
    if (kind != 1 && kind != 2) return NULL;
    is_signed[k] = kind == 2;
  }
  for (int k = 0; k < 2; k++) want[k] = is_signed[k] ? DLP_INT64 : DLP_UINT64;
  return dlp_mixed_kernel(op, !is_signed[0]);
}

/* A temporary on t's device holding t converted to `to`, through `mid` first when the CPU loop
 * would (plan_conversion); pushed. */
static dlp_Tensor *converted_on_cuda(lua_State *L, dlp_Tensor *t, int mid, int to, dlp_CudaStream *stream,
                                     const char *what) {
  dlp_Tensor *from = t, *r;
  if (mid >= 0 && mid != t->dtype && mid != to) {
    from = dlp_tensor_new(L, mid, 0, t->dl.device, t->dl.ndim, t->dl.shape, 0, what);
    dlp_copy_on_cuda(L, from, t, stream, what);
  }
  r = dlp_tensor_new(L, to, 0, t->dl.device, t->dl.ndim, t->dl.shape, 0, what);
  dlp_copy_on_cuda(L, r, from, stream, what);
  if (from != t) dlp_tensor_release(from);
  return r;
}

/* Whether an element of t (device memory, of integer dtype `dtype`, at `data` with `strides` over
 * `shape`) is zero, or with `negative` below zero: a kernel sets a flag byte on the device, which is
 * read back (a synchronisation). */
static int device_has(lua_State *L, dlp_Tensor *t, char *data, int ndim, const int64_t *shape, const int64_t *strides,
                      int dtype, int negative, dlp_CudaStream *stream, const char *what) {
  static const char *const zero[] = {NULL, "dlp_has_zero_i8", "dlp_has_zero_i16", "dlp_has_zero_i32",
                                     "dlp_has_zero_i64", "dlp_has_zero_u8", "dlp_has_zero_u16", "dlp_has_zero_u32",
                                     "dlp_has_zero_u64"};
  static const char *const below[] = {NULL, "dlp_has_negative_i8", "dlp_has_negative_i16", "dlp_has_negative_i32",
                                      "dlp_has_negative_i64"};
  int family = dlp_compute_index(dtype), sizes[2] = {1, (int)dlp_dtypes[dtype].itemsize};
  int64_t s[2][DLP_MAX_NDIM];
  DLDevice cpu = {kDLCPU, 0};
  unsigned char none = 0;
  dlp_Tensor *flag = dlp_tensor_new(L, DLP_BOOL, 0, t->dl.device, 0, NULL, 0, what);
  dlp_fill_on_cuda(L, flag, &none, stream, what);
  char *ptrs[2] = {dlp_first_element(flag), data};
  dlp_Tensor *tensors[2] = {flag, t};
  for (int i = 0; i < ndim; i++) {
    s[0][i] = 0;
    s[1][i] = strides[i];
  }
  dlp_run_on_cuda(L, what, stream, 2, ndim, shape, ptrs, (const int64_t(*)[DLP_MAX_NDIM])s, tensors, NULL, sizes,
                  negative ? below[family] : zero[family], family);
  dlp_Tensor *host = dlp_clone(L, lua_gettop(L), DLP_BOOL, cpu, NULL, what); /* waits for the kernel */
  int found = *(const unsigned char *)dlp_first_element(host) != 0;
  dlp_tensor_release(host);
  dlp_tensor_release(flag);
  lua_pop(L, 2);
  return found;
}

/* Whether the call is one contiguous row on the CPU: a new output (row-major), and every tensor
 * input of the result's shape, row-major too. Small tensors are mostly that, and then the walk
 * is numel elements at each operand's itemsize (a scalar's step is 0): the iteration engine's
 * set-up, broadcast strides and the ordering and merging of dimensions, which cost more than
 * the work on a few elements, is not needed. */
static int one_row(const Operand *in, int n, int ndim, const int64_t *shape) {
  for (int k = 0; k < n; k++) {
    const dlp_Tensor *t = in[k].t;
    if (!t) continue;
    if (t->dl.ndim != ndim) return 0;
    for (int i = 0; i < ndim; i++)
      if (t->dl.shape[i] != shape[i]) return 0;
    if (!dlp_is_contiguous(t)) return 0;
  }
  return 1;
}

/* allclose's tests */
static void isclose_f64(void *ctx, char *const *data, const int64_t *steps, int64_t n);
static void isclose_c128(void *ctx, char *const *data, const int64_t *steps, int64_t n);

/* ---- the driver ---- */

typedef struct Call {
  int op;
  const char *what;  /* the name in messages */
  int first;         /* stack index of the first input */
  int out;           /* stack index of the output tensor, 0: a new one */
  int inplace;       /* the output is the first input (t:add_(u)) */
  int dtype;         /* opts.dtype, -1 when absent */
  int stream;        /* stack index of opts.stream, 0 when absent */
  void *kernel_ctx;  /* for loops that take parameters (allclose) */
  dlp_IterLoop kernel; /* a loop other than the op's (allclose), computing in `loop_dtype` */
  int loop_dtype;
} Call;

/* Run c; pushes and returns the result tensor (the output). */
static dlp_Tensor *elementwise(lua_State *L, const Call *c) {
  const OpInfo *info = &ops[c->op];
  Operand in[3];
  const dlp_Tensor *tensors[4];
  int64_t shape[DLP_MAX_NDIM];
  int n = info->arity, ntensors = 0, top = lua_gettop(L);
  for (int k = 0; k < n; k++) read_operand(L, c->first + k, &in[k], c->what);
  dlp_Tensor *all[4] = {c->out ? dlp_tensor_test(L, c->out) : NULL, in[0].t, n > 1 ? in[1].t : NULL,
                        n > 2 ? in[2].t : NULL};
  int gpu = dlp_compute_device(L, all, n + 1, c->what);
  dlp_CudaStream *stream = NULL; /* opts.stream (kept by a holder on the stack), else the operands' */
  if (c->stream) {
    DLDevice on = {gpu < 0 ? kDLCPU : kDLCUDA, gpu < 0 ? 0 : gpu};
    stream = dlp_cuda_check_stream(L, c->stream, on, -1, c->what);
  }
  for (int k = 0; k < n; k++)
    if (in[k].t) {
      dlp_check_computes(L, in[k].t->dtype, c->what);
      tensors[ntensors++] = in[k].t;
    }

  /* dtypes: p the promoted inputs (where: of the two values), loop the loop's, result the output's */
  int p = info->rule == RULE_WHERE ? promote_operands(in + 1, 2) : promote_operands(in, n);
  if (info->rule == RULE_COMPARE) /* uint8 < 300 compares values (NumPy 2), where uint8 + 300 raises */
    for (int k = 0; k < n; k++)
      if (!in[k].t && in[k].weak == WEAK_INT && is_integer(p) && !dlp_integer_fits(p, in[k].i)) p = dlp_promote(p, DLP_INT64);
  if (c->dtype >= 0) p = c->dtype;
  int result = p, kind = dlp_dtype_kind(p);
  switch (info->rule) {
    case RULE_ARITH:
      if (p == DLP_BOOL && !dlp_kernel(c->op, DLP_BOOL)) {
        if (c->op == DLP_OP_SUB)
          luaL_error(L, "%s: bool tensors do not subtract (use logical_xor)", c->what);
        result = DLP_INT8;
      }
      break;
    case RULE_DIV:
      if (c->dtype >= 0 && kind <= 2)
        luaL_error(L, "%s: true division computes in a float dtype, got dtype %s", c->what, dlp_dtypes[p].name);
      if (kind <= 2) result = DLP_FLOAT64;
      break;
    case RULE_COMPARE: case RULE_CLASSIFY:
      result = DLP_BOOL;
      break;
    case RULE_BITWISE:
      if (kind > 2) luaL_error(L, "%s: takes integer and bool dtypes, got %s", c->what, dlp_dtypes[p].name);
      break;
    case RULE_SHIFT:
      if (kind > 2) luaL_error(L, "%s: takes integer dtypes, got %s", c->what, dlp_dtypes[p].name);
      if (kind == 0) result = DLP_INT8;
      break;
    case RULE_FLOATFN:
      if (c->dtype >= 0 && kind <= 2)
        luaL_error(L, "%s: computes in a float dtype, got dtype %s", c->what, dlp_dtypes[p].name);
      result = float_holding(p);
      /* two tensors (atan2, hypot): NumPy takes the first loop both cast to safely, int8 with
       * uint8 float16 where their promoted int16 would give float32 */
      if (n == 2 && c->dtype < 0 && in[0].t && in[1].t)
        result = dlp_promote(float_holding(in[0].t->dtype), float_holding(in[1].t->dtype));
      break;
    case RULE_KEEP:
      if (p == DLP_BOOL && (c->op == DLP_OP_NEG || c->op == DLP_OP_SIGN)) /* NumPy has no loop for them */
        luaL_error(L, "%s: takes numbers, got bool (use logical_not)", c->what);
      if (c->op == DLP_OP_ABS && kind == 4) /* the magnitude: complex64 gives float32, as NumPy */
        result = p == DLP_COMPLEX64 ? DLP_FLOAT32 : DLP_FLOAT64;
      break;
    default:
      break;
  }
  /* the dtype the inputs are read as, and the one the loop writes (abs of complex: a real one) */
  int reads_p = info->rule == RULE_COMPARE || info->rule == RULE_CLASSIFY || (c->op == DLP_OP_ABS && kind == 4);
  int in_dtype = reads_p ? p : result;
  int loop_in = c->kernel ? c->loop_dtype : compute_dtype_of(in_dtype);
  int loop_out = info->rule == RULE_COMPARE || info->rule == RULE_CLASSIFY ? DLP_BOOL
                 : reads_p && !c->kernel ? compute_dtype_of(result) : loop_in;
  dlp_IterLoop kernel = c->kernel ? c->kernel : dlp_kernel(c->op, loop_in);
  /* each input is converted to mid[k] (the dtype the function computes: float16 before float32),
   * then read by the loop as want[k]; -1: straight to want[k] */
  int want[3] = {loop_in, loop_in, loop_in}, mid[3] = {in_dtype, in_dtype, in_dtype};
  if (info->rule == RULE_WHERE) want[0] = DLP_BOOL, mid[0] = -1;
  dlp_IterLoop mixed = c->dtype < 0 && !c->kernel ? mixed_integer_compare(in, p, c->op, want) : NULL;
  if (mixed) {
    kernel = mixed;
    mid[0] = mid[1] = -1;
  }
  if (!kernel && dlp_dtype_kind(in_dtype) == 4) {
    int ordered = c->op == DLP_OP_MAXIMUM || c->op == DLP_OP_MINIMUM || c->op == DLP_OP_CLAMP ||
                  (c->op >= DLP_OP_LT && c->op <= DLP_OP_GE);
    luaL_error(L, "%s: %s is not supported (%s)", c->what, dlp_dtypes[in_dtype].name,
               ordered ? "complex numbers have no order" : "not defined for complex numbers");
  }
  if (!kernel) luaL_error(L, "%s: not defined for %s", c->what, dlp_dtypes[in_dtype].name);
  for (int k = 0; k < n; k++) /* scalars: in the dtype they take, then the loop's */
    if (!in[k].t) scalar_value(L, &in[k], mid[k] < 0 ? want[k] : mid[k], want[k], c->what);

  /* the output; new tensors go on the device the loop runs on: the CPU for pinned and managed
   * memory too, which only the CUDA driver allocates */
  DLDevice on = {gpu < 0 ? kDLCPU : kDLCUDA, gpu < 0 ? 0 : gpu};
  int ndim = dlp_broadcast_shapes(L, ntensors, tensors, shape, c->what);
  dlp_Tensor *out = NULL;
  if (c->out) {
    out = lua_touserdata(L, c->out);
    dlp_check_writable(L, out, c->what);
    dlp_check_computes(L, out->dtype, c->what);
    int same = out->dl.ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = out->dl.shape[i] == shape[i];
    if (!same) {
      dlp_push_shape(L, out->dl.ndim, out->dl.shape);
      dlp_push_shape(L, ndim, shape);
      luaL_error(L, "%s: %s has shape %s, the result %s", c->what, c->inplace ? "the tensor" : "out",
                 lua_tostring(L, -2), lua_tostring(L, -1));
    }
    for (int i = 0; i < ndim && dlp_numel(out) > 0; i++)
      if (shape[i] > 1 && dlp_walk_stride(out, i) == 0)
        luaL_error(L, "%s: %s repeats elements (an expanded view) and cannot be written elementwise", c->what,
                   c->inplace ? "the tensor" : "out");
    if (c->inplace && !dlp_can_cast_same_kind(result, out->dtype))
      luaL_error(L, "%s: the result dtype %s cannot be cast to %s in place (same_kind rule)", c->what,
                 dlp_dtypes[result].name, dlp_dtypes[out->dtype].name);
    lua_pushvalue(L, c->out);
  } else {
    out = dlp_tensor_new(L, result, 0, on, ndim, shape, 0, c->what);
  }
  int out_idx = lua_gettop(L);
  int row = !c->out && gpu < 0 && one_row(in, n, ndim, shape);

  /* inputs that overlap the output other than element for element are read into temporaries
   * first (NumPy's rule), on `on`; allocated before any memory is taken */
  int64_t strides[DLP_ITER_MAX_OPS][DLP_MAX_NDIM], row_steps[DLP_ITER_MAX_OPS];
  char *data[DLP_ITER_MAX_OPS];
  dlp_Tensor *source[3] = {NULL, NULL, NULL};
  if (!row) dlp_broadcast_strides(out, ndim, shape, strides[0]);
  for (int k = 0; k < n; k++) {
    if (!in[k].t) continue;
    source[k] = in[k].t;
    if (c->out && dlp_overlaps(out, in[k].t)) {
      int same = dlp_first_element(out) == dlp_first_element(in[k].t) && in[k].t->dl.ndim == ndim;
      dlp_broadcast_strides(in[k].t, ndim, shape, strides[k + 1]);
      for (int i = 0; same && i < ndim; i++) same = strides[k + 1][i] == strides[0][i];
      if (!same)
        source[k] = dlp_tensor_new(L, in[k].t->dtype, 0, on, in[k].t->dl.ndim, in[k].t->dl.shape, 0,
                                   c->what);
    }
  }
  /* from here on no Lua code runs until the loop is done (dlp_copy into a fresh temporary
   * allocates nothing) */
  dlp_live(L, out, c->what);
  for (int k = 0; k < n; k++)
    if (in[k].t) dlp_live(L, in[k].t, c->what);
  for (int k = 0; k < n; k++)
    if (source[k] && source[k] != in[k].t) {
      if (gpu >= 0) dlp_copy_on_cuda(L, source[k], in[k].t, stream, c->what);
      else dlp_copy(L, source[k], in[k].t, NULL, c->what);
    }

  Run run;
  memset(&run, 0, sizeof run);
  run.kernel = kernel;
  run.kernel_ctx = c->kernel_ctx;
  run.nops = n + 1;
  data[0] = dlp_first_element(out);
  row_steps[0] = dlp_dtypes[out->dtype].itemsize;
  run.size[0] = dlp_dtypes[loop_out].itemsize;
  /* results are rounded to the result dtype before going into an out of another (NumPy) */
  plan_conversion(&run, 0, loop_out, result, out->dtype);
  for (int k = 0; k < n; k++) {
    run.size[k + 1] = dlp_dtypes[want[k]].itemsize;
    if (!source[k]) {
      data[k + 1] = (char *)in[k].value.bytes;
      row_steps[k + 1] = 0;
      for (int i = 0; i < ndim; i++) strides[k + 1][i] = 0;
      continue;
    }
    data[k + 1] = dlp_first_element(source[k]);
    row_steps[k + 1] = dlp_dtypes[source[k]->dtype].itemsize;
    if (!row) dlp_broadcast_strides(source[k], ndim, shape, strides[k + 1]);
    plan_conversion(&run, k + 1, source[k]->dtype, mid[k], want[k]);
  }

  /* integer division by zero and negative integer powers raise before anything is written,
   * decided on the divisor (reciprocal's: its one input) and exponent as the loop reads them
   * (converted to its dtype) */
  int dv_k = c->op == DLP_OP_RECIPROCAL ? 0 : 1;
  int divides = is_integer(loop_in) && (c->op == DLP_OP_IDIV || c->op == DLP_OP_MOD || c->op == DLP_OP_RECIPROCAL);
  int powers = c->op == DLP_OP_POW && dlp_dtype_kind(loop_in) == 2;
  if (gpu < 0 || !source[dv_k]) { /* a CUDA divisor is checked on the device, once converted */
    if (divides && input_has(&run, dv_k, source[dv_k], in[dv_k].value.bytes, 0))
      luaL_error(L, "%s: integer division by zero", c->what);
    if (powers && input_has(&run, 1, source[1], in[1].value.bytes, 1))
      luaL_error(L, "%s: integers to negative integer powers are not allowed", c->what);
  }

  int64_t numel = dlp_numel(out);
  if (gpu >= 0) {
    int family = 0, sizes[DLP_ITER_MAX_OPS];
    const char *name = mixed ? dlp_mixed_kernel_name(c->op, want[0] == DLP_UINT64, &family)
                       : c->kernel == isclose_f64 ? "dlp_isclose_f64" /* its tolerances: operand 3 */
                       : c->kernel == isclose_c128 ? "dlp_isclose_c128"
                       : c->kernel ? NULL : dlp_kernel_name(c->op, loop_in, &family);
    int isclose = c->kernel == isclose_f64 || c->kernel == isclose_c128;
    if (isclose) dlp_kernel_name(DLP_OP_EQ, c->loop_dtype, &family); /* the family of its compute dtype */
    if (!name) luaL_error(L, "%s: does not run on CUDA devices yet", c->what);
    /* operands the CPU loop converts in blocks are converted whole into device temporaries
     * first (through the same dtypes), and a result the loop would convert is written to one */
    dlp_Tensor *ops_t[DLP_ITER_MAX_OPS] = {out, source[0], source[1], source[2]}, *temps[DLP_ITER_MAX_OPS] = {NULL};
    for (int k = 0; k < n; k++)
      if (source[k] && (run.convert[k + 1] || run.convert_mid[k + 1])) {
        ops_t[k + 1] = temps[k + 1] = converted_on_cuda(L, source[k], mid[k], want[k], stream, c->what);
        data[k + 1] = dlp_first_element(temps[k + 1]);
        dlp_broadcast_strides(temps[k + 1], ndim, shape, strides[k + 1]);
      }
    if (run.convert[0] || run.convert_mid[0]) {
      ops_t[0] = temps[0] = dlp_tensor_new(L, loop_out, 0, out->dl.device, ndim, shape, 0, c->what);
      data[0] = dlp_first_element(temps[0]);
      dlp_broadcast_strides(temps[0], ndim, shape, strides[0]);
    }
    if ((divides || powers) && source[dv_k]) { /* zeros (negative exponents) of a CUDA divisor, as read */
      /* every element of the divisor, as on the CPU, also when the broadcast result is empty */
      const dlp_Tensor *dv = ops_t[dv_k + 1];
      int64_t own[DLP_MAX_NDIM];
      for (int i = 0; i < dv->dl.ndim; i++) own[i] = dv->dl.strides[i] * (int64_t)dlp_dtypes[dv->dtype].itemsize;
      if (divides &&
          device_has(L, ops_t[dv_k + 1], data[dv_k + 1], dv->dl.ndim, dv->dl.shape, own, want[dv_k], 0, stream, c->what))
        luaL_error(L, "%s: integer division by zero", c->what);
      if (powers && device_has(L, ops_t[2], data[2], dv->dl.ndim, dv->dl.shape, own, want[1], 1, stream, c->what))
        luaL_error(L, "%s: integers to negative integer powers are not allowed", c->what);
    }
    sizes[0] = (int)dlp_dtypes[ops_t[0]->dtype].itemsize;
    for (int k = 0; k < n; k++) sizes[k + 1] = (int)dlp_dtypes[want[k]].itemsize;
    const void *values[DLP_ITER_MAX_OPS] = {NULL, in[0].value.bytes, in[1].value.bytes, in[2].value.bytes};
    int nops = n + 1;
    if (isclose) { /* rtol and atol ride as a 16-byte scalar operand */
      values[3] = c->kernel_ctx;
      sizes[3] = 16;
      ops_t[3] = NULL;
      nops = 4;
    }
    dlp_run_on_cuda(L, c->what, stream, nops, ndim, shape, data, (const int64_t(*)[DLP_MAX_NDIM])strides, ops_t, values,
                    sizes, name, family);
    if (temps[0]) { /* rounded to the result dtype before going into an out of another, as on the CPU */
      dlp_Tensor *rounded = converted_on_cuda(L, temps[0], -1, result, stream, c->what);
      dlp_copy_on_cuda(L, out, rounded, stream, c->what);
      dlp_tensor_release(rounded);
    }
    for (int k = 0; k <= n; k++)
      if (temps[k]) dlp_tensor_release(temps[k]);
  } else if (row && numel < DLP_TASK_ELEMENTS) { /* a small row is one call of the loop: no walk, no tasks */
    if (numel > 0) run_rows(&run, data, row_steps, numel);
  } else {
    dlp_Iter it;
    if (row) {
      dlp_iter_init_row(&it, n + 1, numel, data, row_steps);
    } else {
      dlp_iter_init(&it, n + 1, ndim, shape, data, (const int64_t(*)[DLP_MAX_NDIM])strides, 1);
      fold_periodic(&it, &run);
    }
    int64_t period = 1; /* a task starts a tile's period from its first element */
    for (int k = 1; k < run.nops; k++)
      if (run.period[k]) period = run.period[k];
    run.stream = streamable(c->op, &run, out, source, n) && streams(numel * run.size[0]);
    dlp_iter_run_parallel(&it, run_rows, &run, dlp_dtypes[out->dtype].itemsize, period);
  }
  for (int k = 0; k < n; k++)
    if (source[k] && source[k] != in[k].t) dlp_tensor_release(source[k]);
  if (out_idx != top + 1) { /* the result goes right above the arguments */
    lua_pushvalue(L, out_idx);
    lua_replace(L, top + 1);
  }
  lua_settop(L, top + 1); /* temporaries (overlapping inputs' copies) go */
  return out;
}

/* ---- the common small call ----
 * Two live tensors of one dtype and one shape, row-major, in host memory, no options: the result
 * has their dtype (bool for comparisons), nothing is converted, broadcast or overlapped, and the
 * loop runs once over the row. elementwise() decides the same, at several times the cost of the
 * work on a few elements. Pushes the result and returns 1; returns 0, having pushed nothing and
 * run no Lua code, when the call is not that one (the driver then decides, and raises). */
static int same_shape_call(lua_State *L, int op) {
  const OpInfo *info = &ops[op];
  dlp_Tensor *a, *b;
  if (info->arity != 2 || lua_gettop(L) != 2 || !(a = dlp_tensor_test(L, 1)) || !(b = dlp_tensor_test(L, 2)))
    return 0;
  int dtype = a->dtype, kind = dlp_dtype_kind(dtype), ndim = a->dl.ndim, result;
  if (!a->owner || !b->owner || b->dtype != dtype || a->dl.device.device_type != kDLCPU ||
      b->dl.device.device_type != kDLCPU || !dlp_dtype_computes(dtype) || compute_dtype_of(dtype) != dtype)
    return 0;
  switch (info->rule) {
    case RULE_ARITH: /* bool has rules of its own; integer division, modulo and powers check operands */
      if (kind == 0 || (kind <= 2 && (op == DLP_OP_IDIV || op == DLP_OP_MOD || op == DLP_OP_POW))) return 0;
      result = dtype;
      break;
    case RULE_DIV:
      if (kind <= 2) return 0;
      result = dtype;
      break;
    case RULE_COMPARE:
      result = DLP_BOOL;
      break;
    default:
      return 0;
  }
  dlp_IterLoop kernel = dlp_kernel(op, dtype);
  if (!kernel || b->dl.ndim != ndim) return 0;
  for (int i = 0; i < ndim; i++)
    if (a->dl.shape[i] != b->dl.shape[i]) return 0;
  int64_t numel = dlp_numel(a);
  if (numel >= DLP_TASK_ELEMENTS || !dlp_is_contiguous(a) || !dlp_is_contiguous(b)) return 0;
  DLDevice cpu = {kDLCPU, 0};
  dlp_Tensor *out = dlp_tensor_new(L, result, 0, cpu, ndim, a->dl.shape, 0, info->name);
  dlp_live(L, a, info->name); /* the allocation may have run a finalizer that released one */
  dlp_live(L, b, info->name);
  char *data[3] = {dlp_first_element(out), dlp_first_element(a), dlp_first_element(b)};
  int64_t steps[3] = {dlp_dtypes[result].itemsize, dlp_dtypes[dtype].itemsize, dlp_dtypes[dtype].itemsize};
  if (numel > 0) kernel(NULL, data, steps, numel);
  return 1;
}

/* ---- the Lua functions ---- */

/* dlpack.NAME(a [, b [, c]] [, opts]) and a:NAME(...): the op is the closure's second upvalue. */
static int l_elementwise(lua_State *L) {
  Call c;
  memset(&c, 0, sizeof c);
  c.op = (int)lua_tointeger(L, lua_upvalueindex(2));
  if (same_shape_call(L, c.op)) return 1;
  c.what = ops[c.op].name;
  c.first = 1;
  int n = ops[c.op].arity;
  dlp_ComputeOptions o;
  if (lua_gettop(L) > n) { /* an options table (or more arguments), checked and read */
    dlp_check_no_more(L, n + 2, c.what, n == 1 ? "a tensor and an options table" : "operands and an options table");
    dlp_read_compute_options(L, n + 1, DLP_COPT_OUT | DLP_COPT_DTYPE | DLP_COPT_STREAM, &o, c.what);
  } else {
    dlp_read_compute_options(L, 0, 0, &o, c.what); /* the defaults */
  }
  c.out = o.out;
  c.dtype = o.dtype;
  c.stream = o.stream;
  elementwise(L, &c);
  return 1;
}

/* t:NAME_(...): in place, the result cast into t by the same_kind rule; returns t. */
static int l_inplace(lua_State *L) {
  Call c;
  memset(&c, 0, sizeof c);
  c.op = (int)lua_tointeger(L, lua_upvalueindex(2));
  c.what = lua_tostring(L, lua_upvalueindex(3));
  c.first = 1;
  c.inplace = 1;
  c.dtype = -1;
  int n = ops[c.op].arity;
  dlp_check_no_more(L, n + 1, c.what, n == 1 ? "no argument" : "its operands");
  dlp_tensor_check(L, 1);
  c.out = 1;
  elementwise(L, &c);
  return 1;
}

/* Lua operators: __add(a, b) and the like; __unm and __bnot get the operand twice. */
static int l_operator(lua_State *L) {
  Call c;
  memset(&c, 0, sizeof c);
  c.op = (int)lua_tointeger(L, lua_upvalueindex(2));
  c.what = ops[c.op].name;
  c.first = 1;
  c.dtype = -1;
  lua_settop(L, ops[c.op].arity);
  if (same_shape_call(L, c.op)) return 1;
  elementwise(L, &c);
  return 1;
}

/* ---- clamp, masked_fill, equal, allclose ---- */

/* clamp(t, lo, hi [, opts]) and t:clamp_(lo, hi): min(max(t, lo), hi) in one pass (NumPy's clip:
 * lo > hi gives hi), or maximum or minimum alone when a bound is nil; the result dtype promotes t
 * with the bounds given. */
static int clamp(lua_State *L, int inplace) {
  const char *what = inplace ? "clamp_" : "clamp";
  dlp_ComputeOptions o;
  Call c;
  if (inplace) {
    dlp_check_no_more(L, 4, what, "two bounds");
    dlp_tensor_check(L, 1);
    dlp_read_compute_options(L, 0, 0, &o, what);
  } else {
    dlp_check_no_more(L, 5, what, "a tensor, two bounds and an options table");
    dlp_read_compute_options(L, 4, DLP_COPT_OUT | DLP_COPT_DTYPE | DLP_COPT_STREAM, &o, what);
  }
  int lo = !lua_isnoneornil(L, 2), hi = !lua_isnoneornil(L, 3);
  if (!dlp_tensor_test(L, 1)) luaL_error(L, "%s: a tensor expected, got %s", what, luaL_typename(L, 1));
  if (!lo && !hi) luaL_error(L, "%s: give a lower bound, an upper bound or both", what);
  memset(&c, 0, sizeof c);
  c.what = what;
  c.dtype = o.dtype;
  c.stream = o.stream;
  c.inplace = inplace;
  c.out = inplace ? 1 : o.out;
  c.first = lua_gettop(L) + 1;
  lua_pushvalue(L, 1);
  if (lo && hi) {
    c.op = DLP_OP_CLAMP;
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 3);
  } else {
    c.op = lo ? DLP_OP_MAXIMUM : DLP_OP_MINIMUM;
    lua_pushvalue(L, lo ? 2 : 3);
  }
  elementwise(L, &c);
  return 1;
}
static int l_clamp(lua_State *L) { return clamp(L, 0); }
static int l_clamp_(lua_State *L) { return clamp(L, 1); }

/* t:masked_fill(mask, v): where mask is nonzero (any dtype, broadcast to t), t's element becomes
 * v, cast by the same_kind rule; in place, returns t. */
static int l_masked_fill(lua_State *L) {
  Call c;
  dlp_check_no_more(L, 4, "masked_fill", "a mask and a value");
  dlp_tensor_check(L, 1);
  luaL_checkany(L, 3);
  lua_settop(L, 3);
  lua_pushvalue(L, 2); /* where(mask, v, t) into t */
  lua_pushvalue(L, 3);
  lua_pushvalue(L, 1);
  memset(&c, 0, sizeof c);
  c.op = DLP_OP_WHERE;
  c.what = "masked_fill";
  c.first = 4;
  c.out = 1;
  c.inplace = 1;
  c.dtype = -1;
  elementwise(L, &c);
  lua_settop(L, 1);
  return 1;
}

/* Whether every element of the bool tensor at the top of the stack is true; pops it. A CUDA
 * tensor is asked on its device (the `all` reduction's kernels). */
static int all_true(lua_State *L, const char *what) {
  dlp_Tensor *t = lua_touserdata(L, -1);
  int found;
  if (t->dl.device.device_type == kDLCUDA) {
    found = !dlp_reduce_all(L, -1, what);
  } else {
    Scan s = {NULL, NULL, dlp_dtypes[t->dtype].itemsize, 0, 0, 0};
    found = dlp_numel(t) > 0 && tensor_has(t, &s);
  }
  lua_pop(L, 1);
  return !found;
}

static int same_shape(const dlp_Tensor *a, const dlp_Tensor *b) {
  if (a->dl.ndim != b->dl.ndim) return 0;
  for (int i = 0; i < a->dl.ndim; i++)
    if (a->dl.shape[i] != b->dl.shape[i]) return 0;
  return 1;
}

/* dlpack.equal(a, b): same shape and equal values (after promotion; NaN is unequal). */
static int l_equal(lua_State *L) {
  Call c;
  dlp_check_no_more(L, 3, "equal", "two tensors");
  dlp_Tensor *a = dlp_tensor_check(L, 1), *b = dlp_tensor_check(L, 2);
  if (!same_shape(a, b)) {
    /* operands on different devices raise naming both, whatever their shapes */
    dlp_Tensor *both[2] = {a, b};
    if (a->dl.device.device_type != b->dl.device.device_type || a->dl.device.device_id != b->dl.device.device_id)
      dlp_compute_device(L, both, 2, "equal");
    lua_pushboolean(L, 0);
    return 1;
  }
  memset(&c, 0, sizeof c);
  c.op = DLP_OP_EQ;
  c.what = "equal";
  c.first = 1;
  c.dtype = -1;
  elementwise(L, &c);
  lua_pushboolean(L, all_true(L, "equal"));
  return 1;
}

/* allclose's test in float64 (ops.h, as the CUDA kernel dlp_isclose_f64); ctx: rtol, atol */
static void isclose_f64(void *ctx, char *const *data, const int64_t *steps, int64_t n) {
  const double *tol = ctx;
  char *o = data[0];
  const char *a = data[1], *b = data[2];
  for (int64_t i = 0; i < n; i++, o += steps[0], a += steps[1], b += steps[2]) {
    double x, y;
    memcpy(&x, a, sizeof x);
    memcpy(&y, b, sizeof y);
    unsigned char r = dlp_rule_isclose(x, y, tol[0], tol[1]);
    memcpy(o, &r, 1);
  }
}

/* The same test for complex operands, in complex128 (ops.h's dlp_close_c128, as the CUDA kernel
 * dlp_isclose_c128). */
static void isclose_c128(void *ctx, char *const *data, const int64_t *steps, int64_t n) {
  const double *tol = ctx;
  char *o = data[0];
  const char *a = data[1], *b = data[2];
  for (int64_t i = 0; i < n; i++, o += steps[0], a += steps[1], b += steps[2]) {
    double x[2], y[2];
    memcpy(x, a, sizeof x);
    memcpy(y, b, sizeof y);
    b8 r = dlp_close_c128(x[0], x[1], y[0], y[1], tol[0], tol[1]);
    memcpy(o, &r, 1);
  }
}

static int l_allclose(lua_State *L) {
  Call c;
  double tol[2];
  dlp_check_no_more(L, 5, "allclose", "two tensors, rtol and atol");
  int is_complex = dlp_dtype_kind(dlp_tensor_check(L, 1)->dtype) == 4 ||
                   dlp_dtype_kind(dlp_tensor_check(L, 2)->dtype) == 4;
  tol[0] = dlp_optnumber(L, 3, 1e-5);
  tol[1] = dlp_optnumber(L, 4, 1e-8);
  if (!(tol[0] >= 0) || !(tol[1] >= 0) || isinf(tol[0]) || isinf(tol[1]))
    luaL_error(L, "allclose: rtol and atol must be finite and non-negative");
  lua_settop(L, 2);
  memset(&c, 0, sizeof c);
  c.op = DLP_OP_EQ; /* its dtype rule: bool results, inputs read as their promoted dtype */
  c.what = "allclose";
  c.first = 1;
  c.dtype = is_complex ? DLP_COMPLEX128 : DLP_FLOAT64;
  c.kernel = is_complex ? isclose_c128 : isclose_f64;
  c.kernel_ctx = tol;
  c.loop_dtype = c.dtype;
  elementwise(L, &c);
  lua_pushboolean(L, all_true(L, "allclose"));
  return 1;
}

/* isclose(a, b [, rtol [, atol [, equal_nan]]]): allclose's test element by element, a bool
 * tensor of the broadcast shape (NumPy's isclose, computed in float64 or complex128); with
 * equal_nan, NaN is close to NaN: the result or'ed with isnan(a) and isnan(b). */
static int l_isclose(lua_State *L) {
  Call c;
  double tol[2];
  Operand probe;
  dlp_check_no_more(L, 6, "isclose", "two tensors, rtol, atol and equal_nan");
  int is_complex = 0;
  for (int k = 1; k <= 2; k++) {
    read_operand(L, k, &probe, "isclose");
    if (probe.t) is_complex |= dlp_dtype_kind(probe.t->dtype) == 4;
  }
  tol[0] = dlp_optnumber(L, 3, 1e-5);
  tol[1] = dlp_optnumber(L, 4, 1e-8);
  if (!(tol[0] >= 0) || !(tol[1] >= 0) || isinf(tol[0]) || isinf(tol[1]))
    luaL_error(L, "isclose: rtol and atol must be finite and non-negative");
  if (!lua_isnoneornil(L, 5) && lua_type(L, 5) != LUA_TBOOLEAN)
    luaL_argerror(L, 5, lua_pushfstring(L, "equal_nan: a boolean expected, got %s", luaL_typename(L, 5)));
  int equal_nan = lua_toboolean(L, 5);
  lua_settop(L, 2);
  memset(&c, 0, sizeof c);
  c.op = DLP_OP_EQ; /* its dtype rule: bool results, inputs read as their promoted dtype */
  c.what = "isclose";
  c.first = 1;
  c.dtype = is_complex ? DLP_COMPLEX128 : DLP_FLOAT64;
  c.kernel = is_complex ? isclose_c128 : isclose_f64;
  c.kernel_ctx = tol;
  c.loop_dtype = c.dtype;
  elementwise(L, &c); /* 3 */
  if (!equal_nan) return 1;
  static const struct { int op, first, out; } steps[] = {
    {DLP_OP_ISNAN, 1, 0},       /* 4: isnan(a) */
    {DLP_OP_ISNAN, 2, 0},       /* 5: isnan(b) */
    {DLP_OP_LOGICAL_AND, 4, 4}, /* 6: both, into 4 */
    {DLP_OP_LOGICAL_OR, 3, 3},  /* 7: close or both NaN, into 3 */
  };
  for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
    if (steps[k].op == DLP_OP_LOGICAL_OR) lua_settop(L, 4);
    memset(&c, 0, sizeof c);
    c.op = steps[k].op;
    c.what = "isclose";
    c.first = steps[k].first;
    c.out = steps[k].out;
    c.dtype = -1;
    elementwise(L, &c);
  }
  return 1;
}

/* ---- registration ---- */

static const struct {
  const char *meta;
  int op;
} operators[] = {
  {"__add", DLP_OP_ADD}, {"__sub", DLP_OP_SUB}, {"__mul", DLP_OP_MUL}, {"__div", DLP_OP_DIV},
  {"__mod", DLP_OP_MOD}, {"__pow", DLP_OP_POW}, {"__unm", DLP_OP_NEG},
#if LUA_VERSION_NUM >= 503
  {"__idiv", DLP_OP_IDIV}, {"__band", DLP_OP_BAND}, {"__bor", DLP_OP_BOR}, {"__bxor", DLP_OP_BXOR},
  {"__shl", DLP_OP_SHL}, {"__shr", DLP_OP_SHR}, {"__bnot", DLP_OP_BNOT},
#endif
};

/* Push a closure of fn with the tensor metatable (the module's convention), the op and a name. */
static void push_op_function(lua_State *L, int meta, lua_CFunction fn, int op, const char *name) {
  lua_pushvalue(L, meta);
  lua_pushinteger(L, op);
  lua_pushstring(L, name);
  lua_pushcclosure(L, fn, 3);
}

void dlp_elementwise_register(lua_State *L, int module, int methods, int meta) {
  for (int op = 0; op < DLP_OP_COUNT; op++) {
    const char *name = ops[op].name;
    push_op_function(L, meta, l_elementwise, op, name);
    lua_pushvalue(L, -1);
    lua_setfield(L, module, name);
    lua_setfield(L, methods, name);
    if (op == DLP_OP_WHERE) continue;
    lua_pushfstring(L, "%s_", name);
    push_op_function(L, meta, l_inplace, op, lua_tostring(L, -1));
    lua_setfield(L, methods, lua_tostring(L, -2));
    lua_pop(L, 1);
  }
  /* NumPy's older names of the inverse trigonometric functions (NumPy 2 has both): closures of
   * their own, so that Lua's messages name the one a script called */
  static const struct {
    const char *alias;
    int op;
  } aliases[] = {{"arcsin", DLP_OP_ASIN}, {"arccos", DLP_OP_ACOS}, {"arctan", DLP_OP_ATAN}, {"arctan2", DLP_OP_ATAN2}};
  for (size_t k = 0; k < sizeof aliases / sizeof aliases[0]; k++) {
    push_op_function(L, meta, l_elementwise, aliases[k].op, ops[aliases[k].op].name);
    lua_pushvalue(L, -1);
    lua_setfield(L, module, aliases[k].alias);
    lua_setfield(L, methods, aliases[k].alias);
  }
  for (size_t k = 0; k < sizeof operators / sizeof operators[0]; k++) {
    push_op_function(L, meta, l_operator, operators[k].op, ops[operators[k].op].name);
    lua_setfield(L, meta, operators[k].meta);
  }
  static const luaL_Reg functions[] = {
    {"clamp", l_clamp}, {"equal", l_equal}, {"allclose", l_allclose}, {"isclose", l_isclose}, {NULL, NULL},
  };
  static const luaL_Reg method_list[] = {
    {"clamp", l_clamp}, {"clamp_", l_clamp_}, {"masked_fill", l_masked_fill}, {"equal", l_equal},
    {"allclose", l_allclose}, {"isclose", l_isclose}, {NULL, NULL},
  };
  dlp_register(L, module, functions);
  dlp_register(L, methods, method_list);
}
