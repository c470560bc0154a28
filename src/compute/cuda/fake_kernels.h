/* The kernels of kernels.cu compiled as C, by name: what the fake driver of the specs
 * (spec/c/fakecuda.c) runs for cuLaunchKernel. Not part of the module. */
#ifndef DLPACK_LUA_FAKE_KERNELS_H
#define DLPACK_LUA_FAKE_KERNELS_H

#include <stddef.h>

#include "compute/cuda/args.h"

typedef struct dlp_FakeKernel {
  const char *name;
  void (*run)(const dlp_ElementwiseArgs *args); /* one thread (dlp_fake_thread) of a launch */
} dlp_FakeKernel;
extern const dlp_FakeKernel dlp_fake_kernels[]; /* ends with {NULL, NULL} */

#endif
