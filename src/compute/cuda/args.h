/* What the module hands a CUDA kernel of the computing functions, and how a kernel walks its
 * elements. Shared by the host side (src/cuda/launch.c and the computing functions that fill the
 * arguments), the kernels (kernels.cu) and the fake driver of the specs, which compiles the same
 * kernels as C and runs a launch by calling every thread of its grid in turn. So the kernels keep
 * to what both can run: each thread walks the elements i = thread, thread + threads, ... (a
 * grid-stride loop: any grid covers any count), reads and writes only the elements of its own i,
 * and never waits for another thread. */
#ifndef DLPACK_LUA_KERNEL_ARGS_H
#define DLPACK_LUA_KERNEL_ARGS_H

#include <stdint.h>

#define DLP_KERNEL_MAX_OPS 4  /* the output and up to three inputs (where, clamp) */
#define DLP_KERNEL_MAX_DIMS 64 /* DLPack tensors here have at most 64 dimensions */

/* The element types as the module numbers them (internal.h's dlp_Dtype; reduce.c checks that
 * they agree): what a reduction's launch names its input and output dtypes by. */
enum {
  DLP_KT_BOOL, DLP_KT_I8, DLP_KT_I16, DLP_KT_I32, DLP_KT_I64, DLP_KT_U8, DLP_KT_U16, DLP_KT_U32, DLP_KT_U64,
  DLP_KT_F16, DLP_KT_BF16, DLP_KT_F32, DLP_KT_F64, DLP_KT_C64, DLP_KT_C128
};

/* A reduction's launch (kernels.cu, "reductions"; planned by reduce.c). K outputs, numbered in
 * row-major order of the kept dims, each the reduction of `walked` elements, numbered in
 * row-major order of the walked reduced dims. In the launch's dlp_ElementwiseArgs: shape[0 ..
 * kept - 1] are the kept dims and shape[kept .. ndim - 1] the walked reduced ones, strides[1]
 * the input's byte strides along them and strides[2][d] (d >= kept) the row-major multiplier of
 * reduced dim d among all the reduced dims (stride-0 ones included: what makes an index).
 *
 * Pass 1 (dlp_r<op>_<acc>): item (o, p), p < parts, folds output o's elements p, p + parts,
 * p + 2 parts, ... (numel = K * parts items); a merge (dlp_r<op>_<acc>_merge) joins partial
 * results p*group .. p*group + group - 1 of output o, in order (numel = K * ceil(parts / group)).
 * Partial results are laid out p * K + o, in the accumulator's type (indices: int64). data[0]:
 * the values written (partials, or the results when DLP_R_FINAL), data[3] the indices written
 * (min, max, argmin, argmax); data[1]: what is read (the input, or the partial values), data[2]:
 * the partial indices (a merge) or the means (var's second pass). */
enum {
  DLP_R_REDUCED_INNER = 1, /* item w is (w / parts, w % parts); else (w % K, w / K): adjacent items, adjacent elements */
  DLP_R_FINAL = 2,         /* write the results (finished, in out_dtype), not partials */
  DLP_R_REPEAT = 4,        /* a sum or product over `repeats` copies (stride-0 reduced dims) */
  DLP_R_DIVIDE = 8,        /* times scale, over divisor (mean, var) */
  DLP_R_ROOT = 16,         /* then the square root (std) */
  DLP_R_NO_VALUES = 32     /* argmin, argmax: the indices only */
};
typedef struct dlp_ReduceParams {
  int64_t outputs;  /* K */
  int64_t walked;   /* elements walked per output */
  int64_t parts;    /* pass 1: slices per output; a merge: the partial results it reads per output */
  int64_t group;    /* a merge: partial results joined per item */
  int64_t repeats;  /* elements each walked one stands for */
  double scale, divisor;
  int32_t kept;     /* kept dims, first in shape */
  uint8_t in_dtype, out_dtype, acc_dtype, flags;
} dlp_ReduceParams;

/* An elementwise launch: operand 0 the output, the others the inputs, each at data[k] with
 * strides[k] bytes per step along the dimensions of `shape` (0 where broadcast), the innermost
 * last; an input whose bit is set in `scalars` is the value value[k] instead (a Lua number,
 * already in the kernel's type). The elements are numbered in row-major order of `shape`. A
 * reduction's launch fills `reduce` instead of the values (scalars 0). */
typedef struct dlp_ElementwiseArgs {
  int64_t numel;
  int32_t ndim;
  int32_t scalars;
  uint64_t data[DLP_KERNEL_MAX_OPS];
  int64_t shape[DLP_KERNEL_MAX_DIMS];
  int64_t strides[DLP_KERNEL_MAX_OPS][DLP_KERNEL_MAX_DIMS];
  union {
    uint64_t value[DLP_KERNEL_MAX_OPS][2];
    dlp_ReduceParams reduce; /* no larger than the values: every launch passes the same struct */
  };
} dlp_ElementwiseArgs;

/* A matrix product (the kernels dlp_matmul_<compute type>, family DLP_MATMUL_FAMILY) takes the
 * same arguments: operand 0 the result (contiguous), 1 and 2 the factors a and b, each with its
 * byte strides along the result's dimensions (the batch dimensions, then the rows and columns of
 * the result: a steps 0 along the columns, b along the rows, either 0 along a batch dimension it
 * is broadcast over). A product has no scalar operands, so value[] says what an elementwise
 * launch does not need: every element of the result sums DLP_MATMUL_K products, stepping
 * DLP_MATMUL_STEP(k) bytes through operand k (1 or 2) from one to the next, and operand k holds
 * elements of the dtype DLP_MATMUL_DTYPE(k) (a dlp_KernelDtype), converted to and from the
 * compute type as the CPU path converts them (src/compute/matmul.c). */
#define DLP_MATMUL_FAMILY 27
#define DLP_MATMUL_K(args) ((int64_t)(args).value[0][0])
#define DLP_MATMUL_STEP(args, k) ((int64_t)(args).value[k][0])
#define DLP_MATMUL_DTYPE(args, k) ((int)(args).value[k][1])

/* A scan (the kernels dlp_cumsum_<s> and dlp_cumprod_<s>, and their passes _chunks and _apply;
 * family DLP_SCAN_FAMILY; src/compute/scan.c): operand 0 the result, operand 1 the chunks'
 * totals (or a scalar no kernel reads); value[2] and value[3] hold DLP_SCAN_PARAM(0 .. 3): a
 * line's length, the bytes between its elements, its number of chunks (of DLP_SCAN_CHUNK
 * elements, the last one shorter), and the bytes between one chunk's total and the next. */
#define DLP_SCAN_FAMILY 46
#define DLP_SCAN_CHUNK 1024
#define DLP_SCAN_PARAM(args, n) ((int64_t)(args).value[2 + (n) / 2][(n) % 2])

/* Element types as the kernels name them: the numbers of the module's own dtypes (dlp_Dtype in
 * internal.h, which matmul.c checks against these), for the ones that compute. */
enum {
  DLP_KD_BOOL, DLP_KD_INT8, DLP_KD_INT16, DLP_KD_INT32, DLP_KD_INT64, DLP_KD_UINT8, DLP_KD_UINT16,
  DLP_KD_UINT32, DLP_KD_UINT64, DLP_KD_FLOAT16, DLP_KD_BFLOAT16, DLP_KD_FLOAT32, DLP_KD_FLOAT64
};

#endif
