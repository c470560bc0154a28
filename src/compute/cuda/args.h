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

/* An elementwise launch: operand 0 the output, the others the inputs, each at data[k] with
 * strides[k] bytes per step along the dimensions of `shape` (0 where broadcast), the innermost
 * last; an input whose bit is set in `scalars` is the value value[k] instead (a Lua number,
 * already in the kernel's type). The elements are numbered in row-major order of `shape`. */
typedef struct dlp_ElementwiseArgs {
  int64_t numel;
  int32_t ndim;
  int32_t scalars;
  uint64_t data[DLP_KERNEL_MAX_OPS];
  int64_t shape[DLP_KERNEL_MAX_DIMS];
  int64_t strides[DLP_KERNEL_MAX_OPS][DLP_KERNEL_MAX_DIMS];
  uint64_t value[DLP_KERNEL_MAX_OPS][2];
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

/* Element types as the kernels name them: the numbers of the module's own dtypes (dlp_Dtype in
 * internal.h, which matmul.c checks against these), for the ones that compute. */
enum {
  DLP_KD_BOOL, DLP_KD_INT8, DLP_KD_INT16, DLP_KD_INT32, DLP_KD_INT64, DLP_KD_UINT8, DLP_KD_UINT16,
  DLP_KD_UINT32, DLP_KD_UINT64, DLP_KD_FLOAT16, DLP_KD_BFLOAT16, DLP_KD_FLOAT32, DLP_KD_FLOAT64
};

#endif
