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

#endif
