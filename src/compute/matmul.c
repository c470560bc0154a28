/* Matrix products: dlpack.matmul and dlpack.dot (NumPy's rules), over any strided layout.
 *
 * Every product is computed in one of four types: float64 (float64 results), float32
 * (float32, float16 and bfloat16 results: computed in float32, rounded once), uint32 (the
 * integers of 32 bits or less) or uint64 (64-bit integers and bool). Unsigned arithmetic wraps
 * modulo 2^32 or 2^64, which is the integer type's own wrapping once truncated to it, with no
 * undefined behaviour on signed overflow; bool is "any product nonzero", the count of true
 * products being nonzero (in 64 bits it cannot wrap to 0). float32 and float64 go through
 * the system's CBLAS when blas.c found one, the rest and every size CBLAS cannot take (its
 * integers are 32-bit) through the module's own kernel (gemm.c).
 *
 * An operand that is already a matrix of the compute type with a layout the kernel (floats:
 * any nonzero strides that are whole elements; integers: unit stride along its rows) or CBLAS (unit
 * stride along either dimension, the other one at least as large as the size: transposed views
 * go as CblasTrans) can read is read in place; any
 * other (converted dtypes, negative or zero strides) is packed into a contiguous temporary,
 * once per distinct matrix of a batch. The result is fresh contiguous memory, so it never
 * overlaps an operand. Operands are read, the result and the temporaries allocated, and only
 * then are the operands' memory taken (internal.h's rules).
 *
 * Operands on a CUDA device compute there, through cuBLAS or the module's own CUDA kernel: the
 * section "CUDA tensors" below. */
#include <limits.h>
#include <string.h>

#include "compute/cuda/args.h"
#include "compute/gemm.h"
#include "internal.h"

/* ---- the plan of one call ---- */

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

/* One operand seen as a batch of rows x cols matrices. */
typedef struct Side {
  const dlp_Tensor *t;
  int64_t rows, cols;
  int64_t rs, cs;      /* byte strides of the matrix dimensions (0 where the size is 1) */
  int direct;          /* read in place (else packed) */
  int trans;           /* CBLAS: CBLAS_NO_TRANS or CBLAS_TRANS */
  int64_t ld;          /* element stride between rows (of the transposed matrix when trans) */
  int64_t cstep;       /* the module's kernel: element stride between columns */
  int64_t bs[DLP_MAX_NDIM]; /* byte strides along the batch dimensions (0: broadcast) */
} Side;

typedef struct Plan {
  int dtype, cd;       /* result and compute dtypes */
  size_t isz;          /* the compute type's size */
  int64_t M, N, K;
  int nb;              /* batch dimensions */
  int64_t batch[DLP_MAX_NDIM];
  Side a, b;
  const dlp_Blas *blas; /* NULL: the module's kernel */
  int cbuf;            /* the result goes through a compute-type buffer (another dtype) */
  int gpu;             /* the CUDA device of the operands, -1: the host */
  int64_t gemm_rows;   /* the kernel's rows per part (dlp_gemm_rows), fixed with its scratch */
} Plan;

/* int64 and int32 elements are read and written as the unsigned integers they equal modulo
 * 2^64 and 2^32 */
static int same_bits(int dtype, int cd) {
  return dtype == cd || (dtype == DLP_INT64 && cd == DLP_UINT64) || (dtype == DLP_INT32 && cd == DLP_UINT32);
}

/* Integers of 32 bits or less compute in uint32 (the result modulo 2^8 or 2^16 is the same);
 * bool in uint64, where a count of true products never wraps to 0. */
static int compute_dtype(int dtype) {
  if (dtype == DLP_FLOAT64) return DLP_FLOAT64;
  if (dtype == DLP_FLOAT32 || dtype == DLP_FLOAT16 || dtype == DLP_BFLOAT16) return DLP_FLOAT32;
  if (dtype == DLP_BOOL || dlp_dtypes[dtype].bits == 64) return DLP_UINT64;
  return DLP_UINT32;
}

/* Can CBLAS read the matrix of s in place? Sets trans and ld. */
static int blas_layout(Side *s, size_t isz) {
  int64_t rows = s->rows, cols = s->cols, rs = s->rs / (int64_t)isz, cs = s->cs / (int64_t)isz;
  if ((cols == 1 || cs == 1) && (rows == 1 || rs >= cols)) {
    s->trans = CBLAS_NO_TRANS;
    s->ld = rows == 1 ? cols : rs;
  } else if ((rows == 1 || rs == 1) && (cols == 1 || cs >= rows)) {
    s->trans = CBLAS_TRANS;
    s->ld = cols == 1 ? rows : cs;
  } else {
    return 0;
  }
  return s->ld <= INT_MAX;
}

/* Decide whether s is read in place, for the kernel (floats: strides of whole elements, not 0;
 * integers: rows contiguous, any row stride) or CBLAS. */
static void choose_layout(const Plan *p, Side *s) {
  int64_t isz = (int64_t)p->isz;
  s->direct = 0;
  s->trans = CBLAS_NO_TRANS;
  s->ld = s->cols;
  s->cstep = 1;
  /* elements may sit at any address (producers need not align them): typed reads need it */
  if (!same_bits(s->t->dtype, p->cd) || (uintptr_t)dlp_first_element(s->t) % p->isz != 0) return;
  if (p->blas) { /* A, B, C hold aligned elements: direct operands are checked (operand_plan), the rest
                   * are scratch at multiples of the itemsize, so the pointers convert through void * */
    s->direct = blas_layout(s, p->isz);
    if (!s->direct) {
      s->trans = CBLAS_NO_TRANS;
      s->ld = s->cols;
    }
  } else if ((p->cd == DLP_FLOAT32 || p->cd == DLP_FLOAT64) && s->rs % isz == 0 && s->cs % isz == 0 &&
             (s->rows == 1 || s->rs != 0) && (s->cols == 1 || s->cs != 0)) {
    /* not an expanded (stride 0) one: its copy's size is checked (dlpack.zeros({1}):expand({2^62})
     * raises, as with CBLAS, rather than computing for years) */
    s->direct = 1;
    s->ld = s->rs / isz;
    s->cstep = s->cs / isz;
  } else if (s->cols == 1 || s->cs == isz) {
    s->direct = 1;
    s->ld = s->rs / isz;
  }
}

/* Pack the rows x cols matrix at src (byte strides rs, cs) into contiguous rows of the compute
 * dtype, converting; along whichever dimension the source steps through faster. */
static void pack(char *dst, int cd, size_t isz, const char *src, int dtype, int64_t rows, int64_t cols, int64_t rs,
                 int64_t cs) {
  dlp_RowFn f = dlp_row_function(cd, dtype);
  int64_t mr = rs < 0 ? -rs : rs, mc = cs < 0 ? -cs : cs;
  if (rows > 1 && cols > 1 && mr < mc) {
    for (int64_t j = 0; j < cols; j++) f(dst + j * isz, cols * (int64_t)isz, dlp_offset(src, j * cs), rs, rows);
  } else {
    for (int64_t i = 0; i < rows; i++)
      f(dst + i * cols * (int64_t)isz, (int64_t)isz, dlp_offset(src, i * rs), cs, cols);
  }
}

/* One product: a and b point at the first elements of this batch's matrices, c at the result's
 * M x N elements (contiguous); pa, pb, cb the temporaries the plan needs, gs the kernel's. */
static void product(const Plan *p, const char *a, const char *b, char *c, char *pa, char *pb, char *cb, char *gs,
                    int pack_a, int pack_b) {
  const Side *sa = &p->a, *sb = &p->b;
  const char *A = a, *B = b;
  int64_t lda = sa->ld, ldb = sb->ld, csa = sa->cstep, csb = sb->cstep;
  if (!sa->direct) {
    if (pack_a) pack(pa, p->cd, p->isz, a, sa->t->dtype, p->M, p->K, sa->rs, sa->cs);
    A = pa;
    lda = p->K;
    csa = 1;
  }
  if (!sb->direct) {
    if (pack_b) pack(pb, p->cd, p->isz, b, sb->t->dtype, p->K, p->N, sb->rs, sb->cs);
    B = pb;
    ldb = p->N;
    csb = 1;
  }
  char *C = p->cbuf ? cb : c;
  if (p->blas) {
    int ta = sa->direct ? sa->trans : CBLAS_NO_TRANS, tb = sb->direct ? sb->trans : CBLAS_NO_TRANS;
    if (p->cd == DLP_FLOAT32)
      p->blas->sgemm(CBLAS_ROW_MAJOR, ta, tb, (int)p->M, (int)p->N, (int)p->K, 1.0f, (const void *)A, (int)lda,
                     (const void *)B, (int)ldb, 0.0f, (void *)C, (int)p->N);
    else
      p->blas->dgemm(CBLAS_ROW_MAJOR, ta, tb, (int)p->M, (int)p->N, (int)p->K, 1.0, (const void *)A, (int)lda,
                     (const void *)B, (int)ldb, 0.0, (void *)C, (int)p->N);
  } else {
    dlp_Gemm g = {p->cd, p->M, p->N, p->K, A, B, lda, csa, ldb, csb, C, gs, p->gemm_rows};
    dlp_gemm(&g);
  }
  if (p->cbuf) {
    int64_t n = p->M * p->N;
    dlp_row_function(p->dtype, p->cd)(c, dlp_dtypes[p->dtype].itemsize, cb, (int64_t)p->isz, n);
  }
}

/* ---- reading the operands ---- */

static void shapes_error(lua_State *L, const dlp_Tensor *a, const dlp_Tensor *b, const char *what, const char *why) {
  dlp_push_shape(L, a->dl.ndim, a->dl.shape);
  dlp_push_shape(L, b->dl.ndim, b->dl.shape);
  luaL_error(L, "%s: shapes %s and %s %s", what, lua_tostring(L, -2), lua_tostring(L, -1), why);
}

static const dlp_Tensor *operand(lua_State *L, int arg, const char *what) {
  dlp_Tensor *t = dlp_tensor_test(L, arg);
  if (!t) {
    if (lua_type(L, arg) == LUA_TNUMBER || lua_type(L, arg) == LUA_TBOOLEAN)
      luaL_error(L, "%s: operand %d is a Lua %s; matrix products take tensors (use mul to scale)", what, arg,
                 luaL_typename(L, arg));
    luaL_error(L, "%s: operand %d must be a tensor, got %s", what, arg, luaL_typename(L, arg));
  }
  if (!t->owner) luaL_error(L, "%s: operand %d was released", what, arg);
  dlp_check_computes(L, t->dtype, what);
  if (dlp_dtype_kind(t->dtype) == 4)
    luaL_error(L, "%s: operand %d is %s; complex matrix products are not supported (yet)", what, arg,
               dlp_dtypes[t->dtype].name);
  if (t->dl.ndim == 0)
    luaL_error(L, "%s: operand %d is 0-d; matrix products take 1-d or more (use mul to scale)", what, arg);
  return t;
}

/* Fill the plan from the operands at 1 and 2; returns the result's ndim and shape. */
static int plan_of(lua_State *L, Plan *p, int64_t *shape, const char *what) {
  const dlp_Tensor *a = operand(L, 1, what), *b = operand(L, 2, what);
  dlp_Tensor *both[2] = {(dlp_Tensor *)a, (dlp_Tensor *)b};
  int an = a->dl.ndim, bn = b->dl.ndim;
  int gpu = dlp_compute_device(L, both, 2, what);
  memset(p, 0, sizeof *p);
  p->gpu = gpu;
  p->a.t = a;
  p->b.t = b;
  p->dtype = dlp_promote(a->dtype, b->dtype);
  p->cd = compute_dtype(p->dtype);
  p->isz = dlp_dtypes[p->cd].itemsize;
  /* a 1-d a is a row (1 x K), a 1-d b a column (K x 1) */
  p->M = an == 1 ? 1 : a->dl.shape[an - 2];
  p->K = a->dl.shape[an - 1];
  p->N = bn == 1 ? 1 : b->dl.shape[bn - 1];
  int64_t kb = bn == 1 ? b->dl.shape[0] : b->dl.shape[bn - 2];
  if (kb != p->K) {
    lua_pushfstring(L, "do not multiply: the inner sizes differ (%I and %I)", (lua_Integer)p->K, (lua_Integer)kb);
    shapes_error(L, a, b, what, lua_tostring(L, -1));
  }
  p->a.rows = p->M;
  p->a.cols = p->K;
  p->a.rs = an == 1 ? 0 : dlp_walk_stride(a, an - 2);
  p->a.cs = dlp_walk_stride(a, an - 1);
  p->b.rows = p->K;
  p->b.cols = p->N;
  p->b.rs = dlp_walk_stride(b, bn == 1 ? 0 : bn - 2);
  p->b.cs = bn == 1 ? 0 : dlp_walk_stride(b, bn - 1);
  /* the batch dimensions broadcast as NumPy's */
  int na = an > 2 ? an - 2 : 0, nbb = bn > 2 ? bn - 2 : 0;
  p->nb = na > nbb ? na : nbb;
  for (int i = 0; i < p->nb; i++) {
    int ia = i - (p->nb - na), ib = i - (p->nb - nbb);
    int64_t sa = ia >= 0 ? a->dl.shape[ia] : 1, sb = ib >= 0 ? b->dl.shape[ib] : 1;
    if (sa != sb && sa != 1 && sb != 1) shapes_error(L, a, b, what, "do not broadcast (their batch dimensions)");
    p->batch[i] = sa == 1 ? sb : sa;
    p->a.bs[i] = ia >= 0 ? dlp_walk_stride(a, ia) : 0;
    p->b.bs[i] = ib >= 0 ? dlp_walk_stride(b, ib) : 0;
  }
  int ndim = 0;
  for (int i = 0; i < p->nb; i++) shape[ndim++] = p->batch[i];
  if (an > 1) shape[ndim++] = p->M;
  if (bn > 1) shape[ndim++] = p->N;
  if (gpu >= 0) return ndim; /* cuda_product plans the rest */
  /* CBLAS takes int sizes: larger products go to the kernel */
  const dlp_Blas *blas = p->cd == DLP_FLOAT32 || p->cd == DLP_FLOAT64 ? dlp_blas() : NULL;
  if (blas && p->M <= INT_MAX && p->N <= INT_MAX && p->K <= INT_MAX) p->blas = blas;
  else p->gemm_rows = dlp_gemm_rows(p->cd, p->M, p->N, p->K);
  choose_layout(p, &p->a);
  choose_layout(p, &p->b);
  p->cbuf = !same_bits(p->dtype, p->cd);
  return ndim;
}

/* A userdata for the temporaries (the packed operands, the compute-type result, the kernel's
 * blocks), pushed (an allocation: before any memory is taken); raises when their size does not
 * fit. */
static char *scratch(lua_State *L, const Plan *p, char *t[4], const char *what) {
  int64_t na = 0, nb = 0, nc = 0, total = 0; /* read only when ok, else luaL_error raises */
  size_t ng = p->blas ? 0 : dlp_gemm_scratch(p->cd, p->M, p->N, p->K, p->gemm_rows); /* bounded by the blocks */
  int ok = (p->a.direct || dlp_mul(p->M, p->K, &na)) && (p->b.direct || dlp_mul(p->K, p->N, &nb)) &&
           (!p->cbuf || dlp_mul(p->M, p->N, &nc)) && dlp_add(na, nb, &total) && dlp_add(total, nc, &total) &&
           dlp_mul(total, (int64_t)p->isz, &total) && dlp_add(total, (int64_t)ng, &total) &&
           (uint64_t)total <= PTRDIFF_MAX / 2;
  if (!ok) luaL_error(L, "%s: the temporaries of this product would take more bytes than fit", what);
  char *base = lua_newuserdatauv(L, (size_t)total, 0);
  t[0] = base;
  t[1] = base + na * (int64_t)p->isz;
  t[2] = base + (na + nb) * (int64_t)p->isz;
  t[3] = base + (na + nb + nc) * (int64_t)p->isz;
  return base;
}

/* Every batch of the product into out (the result's M x N matrices, contiguous). */
static void run_plan(const Plan *p, char *out, char *const t[4]) {
  int64_t idx[DLP_MAX_NDIM] = {0};
  const char *a = dlp_first_element(p->a.t), *b = dlp_first_element(p->b.t);
  const char *last_a = NULL, *last_b = NULL;
  int64_t step = p->M * p->N * (int64_t)dlp_dtypes[p->dtype].itemsize;
  for (;;) {
    /* a broadcast operand's matrix is packed once */
    product(p, a, b, out, t[0], t[1], t[2], t[3], a != last_a, b != last_b);
    last_a = a;
    last_b = b;
    out += step;
    int i = p->nb - 1;
    for (; i >= 0; i--) { /* bs * (size - 1) fits: the operands have elements */
      if (++idx[i] < p->batch[i]) {
        a = dlp_offset(a, p->a.bs[i]);
        b = dlp_offset(b, p->b.bs[i]);
        break;
      }
      a = dlp_offset(a, -p->a.bs[i] * (p->batch[i] - 1));
      b = dlp_offset(b, -p->b.bs[i] * (p->batch[i] - 1));
      idx[i] = 0;
    }
    if (i < 0) return;
  }
}

/* ---- CUDA tensors ----
 * Operands on one CUDA device compute there, into a new contiguous tensor on that device, on the
 * stream of their pending work (as the elementwise functions: src/cuda/launch.c), with the dtypes,
 * shapes and errors of the host path. float products whose operands are both of the result's
 * dtype (float32, float64, float16, bfloat16) and in a layout cuBLAS reads in place (the one
 * CBLAS would read: unit stride along one dimension) go through cuBLAS when cublas.c found it;
 * every other product (integers, bool, mixed dtypes, other layouts, sizes beyond int) through
 * the module's own kernel (kernels.cu, family 27), which reads any strides and converts as it
 * reads. */

_Static_assert((int)DLP_KD_BOOL == (int)DLP_BOOL && (int)DLP_KD_UINT64 == (int)DLP_UINT64 &&
                 (int)DLP_KD_FLOAT16 == (int)DLP_FLOAT16 && (int)DLP_KD_FLOAT64 == (int)DLP_FLOAT64,
               "args.h's dtype numbers are the module's");

/* Can cuBLAS read the matrix of s, of the product's dtype, in place? Sets trans and ld. */
static int cublas_side(Side *s, int dtype) {
  size_t isz = dlp_dtypes[dtype].itemsize;
  if (s->t->dtype != dtype || (uintptr_t)dlp_first_element(s->t) % isz != 0) return 0;
  for (int i = 0; i < DLP_MAX_NDIM; i++)
    if (s->bs[i] % (int64_t)isz != 0) return 0;
  return blas_layout(s, isz);
}

/* The cuBLAS calls of p into g (its addresses are filled later); 0 when cuBLAS cannot take p. The
 * batch dimensions are merged where all three operands step evenly across them; the innermost
 * one left is a strided batch, the others are walked. */
static int cublas_plan(const Plan *p, dlp_CudaGemm *g) {
  Side a = p->a, b = p->b;
  int dtype = p->dtype;
  int64_t isz = dlp_dtypes[dtype].itemsize, size[DLP_MAX_NDIM], step[3][DLP_MAX_NDIM], c_step = p->M * p->N;
  int nd = 0;
  if (dtype != DLP_FLOAT32 && dtype != DLP_FLOAT64 && dtype != DLP_FLOAT16 && dtype != DLP_BFLOAT16) return 0;
  if (p->M > INT_MAX || p->N > INT_MAX || p->K > INT_MAX || !cublas_side(&a, dtype) || !cublas_side(&b, dtype))
    return 0;
  if (!dlp_cuda_blas_ready()) return 0;
  memset(g, 0, sizeof *g);
  int64_t cs[DLP_MAX_NDIM];
  for (int i = p->nb - 1; i >= 0; i--) { /* the result's strides (elements): contiguous */
    cs[i] = c_step;
    c_step *= p->batch[i]; /* fits: the result has that many elements */
  }
  for (int i = 0; i < p->nb; i++) {
    int64_t e[3] = {a.bs[i] / isz, b.bs[i] / isz, cs[i]};
    if (p->batch[i] == 1) continue;
    int merges = nd > 0;
    for (int k = 0; k < 3 && merges; k++) merges = step[k][nd - 1] == e[k] * p->batch[i];
    if (merges) {
      size[nd - 1] *= p->batch[i];
    } else {
      size[nd++] = p->batch[i];
    }
    for (int k = 0; k < 3; k++) step[k][nd - 1] = e[k];
  }
  g->dtype = dtype;
  g->m = (int)p->M, g->n = (int)p->N, g->k = (int)p->K;
  g->trans_a = a.trans == CBLAS_TRANS, g->trans_b = b.trans == CBLAS_TRANS;
  g->lda = (int)a.ld, g->ldb = (int)b.ld;
  g->count = 1;
  if (nd > 0) {
    if (size[nd - 1] > INT_MAX) return 0;
    g->count = (int)size[nd - 1];
    g->stride_a = step[0][nd - 1], g->stride_b = step[1][nd - 1], g->stride_c = step[2][nd - 1];
    g->nouter = nd - 1;
    for (int i = 0; i < nd - 1; i++) {
      g->outer[i] = size[i];
      for (int k = 0; k < 3; k++) g->outer_step[k][i] = step[k][i] * isz;
    }
  }
  return 1;
}

/* The module's kernel: one launch over the result's elements (args.h says what it gets). */
static void kernel_args(lua_State *L, const Plan *p, dlp_Tensor *const ops[3], dlp_ElementwiseArgs *args,
                        const char *what) {
  int nd = p->nb + 2, dtypes[3] = {p->dtype, p->a.t->dtype, p->b.t->dtype};
  int64_t shape[DLP_MAX_NDIM], strides[3][DLP_MAX_NDIM], step = dlp_dtypes[p->dtype].itemsize;
  int64_t ksteps[3] = {0, p->a.cs, p->b.rs};
  char *data[3];
  dlp_Iter it;
  for (int i = 0; i < p->nb; i++) {
    shape[i] = p->batch[i];
    strides[1][i] = p->a.bs[i];
    strides[2][i] = p->b.bs[i];
  }
  shape[nd - 2] = p->M, shape[nd - 1] = p->N;
  strides[1][nd - 2] = p->a.rs, strides[1][nd - 1] = 0;
  strides[2][nd - 2] = 0, strides[2][nd - 1] = p->b.cs;
  for (int i = nd - 1; i >= 0; i--) { /* the result: contiguous */
    strides[0][i] = step;
    step *= shape[i];
  }
  for (int k = 0; k < 3; k++) data[k] = dlp_first_element(ops[k]);
  dlp_iter_init(&it, 3, nd, shape, data, (const int64_t(*)[DLP_MAX_NDIM])strides, 1);
  memset(args, 0, sizeof *args);
  args->numel = it.numel;
  args->ndim = it.ndim;
  for (int i = 0; i < it.ndim; i++) args->shape[i] = it.shape[i];
  args->value[0][0] = (uint64_t)p->K;
  for (int k = 0; k < 3; k++) {
    /* a kernel reads elements as their C type: they must sit at multiples of its size */
    int64_t size = dlp_dtypes[dtypes[k]].itemsize;
    int misaligned = (uintptr_t)it.data[k] % (uintptr_t)size != 0 || ksteps[k] % size != 0;
    for (int i = 0; i < it.ndim; i++) {
      args->strides[k][i] = it.strides[k][i];
      misaligned |= it.strides[k][i] % size != 0;
    }
    if (misaligned)
      luaL_error(L, "%s: a CUDA operand's elements are not aligned to their size (%d bytes)", what, (int)size);
    args->data[k] = (uint64_t)(uintptr_t)it.data[k];
    args->value[k][1] = (uint64_t)dtypes[k];
    if (k > 0) args->value[k][0] = (uint64_t)ksteps[k];
  }
}

static void kernel_product(lua_State *L, const Plan *p, dlp_Tensor *const ops[3], const char *what) {
  static const char *const names[] = {"dlp_matmul_f32", "dlp_matmul_f64", "dlp_matmul_u32", "dlp_matmul_u64"};
  dlp_ElementwiseArgs args;
  dlp_CudaLaunch launch;
  kernel_args(L, p, ops, &args, what);
  memset(&launch, 0, sizeof launch);
  launch.what = what;
  launch.family = DLP_MATMUL_FAMILY;
  launch.kernel = names[p->cd == DLP_FLOAT32 ? 0 : p->cd == DLP_FLOAT64 ? 1 : p->cd == DLP_UINT32 ? 2 : 3];
  launch.args = &args;
  launch.noperands = 3;
  for (int k = 0; k < 3; k++) launch.operands[k] = ops[k];
  launch.stream = dlp_cuda_compute_stream(launch.operands, 3, NULL);
  dlp_cuda_launch(L, &launch); /* takes the stream; raises only after letting go of what it took */
}

/* The product of p on its CUDA device: pushes the result (a Lua value for two 1-d operands). */
static int cuda_product(lua_State *L, const Plan *p, int ndim, const int64_t *shape, int scalar, int computes,
                        const char *what) {
  DLDevice on = {kDLCUDA, p->gpu}, cpu = {kDLCPU, 0};
  dlp_CudaGemm g;
  if (scalar && !computes) { /* k = 0: the zero of the dtype, nothing to compute */
    uint64_t zero[2] = {0, 0};
    dlp_push_element(L, p->dtype, zero);
    return 1;
  }
  int blas = computes && cublas_plan(p, &g);
  /* allocations first (they may run finalizers, which may release the operands); k = 0: zeros */
  dlp_Tensor *host = scalar ? dlp_tensor_new(L, p->dtype, 0, cpu, 0, shape, 0, what) : NULL;
  dlp_Tensor *r = dlp_tensor_new(L, p->dtype, 0, on, scalar ? 0 : ndim, shape, computes ? 0 : DLP_ALLOC_ZEROED, what);
  if (computes) {
    dlp_Tensor *ops[3] = {r, (dlp_Tensor *)p->a.t, (dlp_Tensor *)p->b.t};
    dlp_live(L, p->a.t, what);
    dlp_live(L, p->b.t, what);
    if (blas) {
      g.c = dlp_first_element(r);
      g.a = dlp_first_element(p->a.t);
      g.b = dlp_first_element(p->b.t);
      dlp_cuda_gemm(L, what, dlp_cuda_compute_stream(ops, 3, NULL), ops, &g);
    } else {
      kernel_product(L, p, ops, what);
    }
  }
  if (scalar) { /* read back: a synchronous copy, after the product */
    dlp_cuda_copy(L, host, r, NULL, what);
    dlp_push_element(L, p->dtype, dlp_first_element(host));
  }
  return 1;
}

static int matmul(lua_State *L, int dot, const char *what) {
  Plan p;
  int64_t shape[DLP_MAX_NDIM];
  char *temps[4];
  dlp_check_no_more(L, 3, what, "two tensors");
  if (dot) {
    for (int arg = 1; arg <= 2; arg++) {
      const dlp_Tensor *t = dlp_tensor_test(L, arg);
      if (t && t->dl.ndim == 0)
        luaL_error(L, "%s: operand %d is 0-d; NumPy's dot multiplies then, use mul", what, arg);
      if (t && t->dl.ndim > 2)
        luaL_error(L, "%s: operand %d has %d dimensions; dot takes 1-d and 2-d tensors (use matmul for batches "
                      "of matrices)", what, arg, t->dl.ndim);
    }
  }
  int ndim = plan_of(L, &p, shape, what);
  int scalar = p.a.t->dl.ndim == 1 && p.b.t->dl.ndim == 1;
  int64_t numel;
  if (!dlp_numel_of(ndim, shape, &numel)) luaL_error(L, "%s: the result would have more elements than fit", what);
  int computes = numel > 0 && p.K > 0;
  if (p.gpu >= 0) return cuda_product(L, &p, ndim, shape, scalar, computes, what);
  /* allocations first (they may run finalizers, which may release the operands) */
  uint64_t value[2] = {0, 0}; /* a scalar result: one element of any dtype, aligned */
  char *out = (char *)value;
  if (!scalar) {
    DLDevice cpu = {kDLCPU, 0};
    dlp_Tensor *r = dlp_tensor_new(L, p.dtype, 0, cpu, ndim, shape, !computes, what);
    out = dlp_first_element(r);
  }
  if (computes) {
    scratch(L, &p, temps, what);
    dlp_live(L, p.a.t, what);
    dlp_live(L, p.b.t, what);
    run_plan(&p, out, temps);
    lua_pop(L, 1); /* the temporaries */
  }
  if (scalar) dlp_push_element(L, p.dtype, value); /* k = 0: the zero of the dtype */
  return 1;
}

static int l_matmul(lua_State *L) { return matmul(L, 0, "dlpack.matmul"); }
static int l_dot(lua_State *L) { return matmul(L, 1, "dlpack.dot"); }
static int m_matmul(lua_State *L) { return matmul(L, 0, "matmul"); }
static int m_dot(lua_State *L) { return matmul(L, 1, "dot"); }

void dlp_matmul_register(lua_State *L, int module, int methods, int meta) {
  static const luaL_Reg functions[] = {{"matmul", l_matmul}, {"dot", l_dot}, {NULL, NULL}};
  static const luaL_Reg method_list[] = {{"matmul", m_matmul}, {"dot", m_dot}, {NULL, NULL}};
  (void)meta;
  dlp_register(L, module, functions);
  dlp_register(L, methods, method_list);
}
