/* The computing functions' work on CUDA device memory, as kernels (src/compute/cuda/kernels.cu,
 * launched by src/cuda/launch.c): one elementwise launch from what the CPU loop would be given,
 * and copies and dtype conversions between two tensors of one device, any strides. */
#include <string.h>

#include "compute/cuda/args.h"
#include "core/convert_rules.h"
#include "internal.h"

/* One launch of kernel over the operands: tensors (or, where NULL, Lua scalars from values) of
 * sizes[k] bytes an element, and, when params is not NULL, 6 int64 parameters in the value slots 1
 * to 3 (its operands are all tensors then). */
static void launch_kernel(lua_State *L, const char *what, dlp_CudaStream *stream, int nops, int ndim,
                          const int64_t *shape, char *const *data, const int64_t (*strides)[DLP_MAX_NDIM],
                          dlp_Tensor *const *tensors, const void *const *values, const int *sizes,
                          const int64_t *params, const char *kernel, int family) {
  dlp_ElementwiseArgs args;
  dlp_Iter it;
  dlp_CudaLaunch launch;
  memset(&args, 0, sizeof args);
  memset(&launch, 0, sizeof launch);
  dlp_iter_init(&it, nops, ndim, shape, data, strides, 1);
  args.numel = it.numel;
  args.ndim = it.ndim;
  for (int i = 0; i < it.ndim; i++) args.shape[i] = it.shape[i];
  for (int k = 0; k < nops; k++) /* a finalizer run by an allocation since may have released one */
    if (tensors[k]) dlp_live(L, tensors[k], what);
  for (int k = 0; k < nops; k++) {
    if (!tensors[k]) { /* a Lua scalar, already in the kernel's type */
      args.scalars |= 1 << k;
      memcpy(args.value[k], values[k], (size_t)sizes[k]);
      continue;
    }
    /* a kernel reads elements as its C type: they must sit at multiples of its size */
    int misaligned = (uintptr_t)it.data[k] % (uintptr_t)sizes[k] != 0;
    for (int i = 0; i < it.ndim; i++) {
      args.strides[k][i] = it.strides[k][i];
      misaligned |= it.strides[k][i] % sizes[k] != 0;
    }
    if (misaligned && it.numel > 0)
      luaL_error(L, "%s: a CUDA operand's elements are not aligned to their size (%d bytes)", what, sizes[k]);
    args.data[k] = (uint64_t)(uintptr_t)it.data[k];
    launch.operands[launch.noperands++] = tensors[k];
  }
  if (params)
    for (int n = 0; n < 6; n++) args.value[1 + n / 2][n % 2] = (uint64_t)params[n];
  launch.what = what;
  launch.kernel = kernel;
  launch.family = family;
  launch.args = &args;
  launch.stream = dlp_cuda_compute_stream(launch.operands, launch.noperands, stream);
  dlp_cuda_launch(L, &launch); /* takes the stream; raises only after letting go of what it took */
}

void dlp_run_on_cuda(lua_State *L, const char *what, dlp_CudaStream *stream, int nops, int ndim, const int64_t *shape,
                     char *const *data, const int64_t (*strides)[DLP_MAX_NDIM], dlp_Tensor *const *tensors,
                     const void *const *values, const int *sizes, const char *kernel, int family) {
  launch_kernel(L, what, stream, nops, ndim, shape, data, strides, tensors, values, sizes, NULL, kernel, family);
}

void dlp_launch_with_params(lua_State *L, const char *what, const char *kernel, int family, int nops, int ndim,
                            const int64_t *shape, char *const *data, const int64_t (*strides)[DLP_MAX_NDIM],
                            dlp_Tensor *const *tensors, const int *sizes, const int64_t *params) {
  launch_kernel(L, what, NULL, nops, ndim, shape, data, strides, tensors, NULL, sizes, params, kernel, family);
}

/* the kernels that convert between the real dtypes: [source][destination], a family per source
 * (13 + the source's dtype: kernels.cu) */
#define NAME(S, s, ST, sc, D, d, DT, dc) [DLP_##D] = "dlp_convert_" #s "_" #d,
#define NAMES_FROM(S, s, ST, sc) [DLP_##S] = {DLP_REAL_DESTINATIONS(NAME, S, s, ST, sc)},
static const char *const conversions[DLP_FLOAT64 + 1][DLP_FLOAT64 + 1] = {DLP_REAL_DTYPES(NAMES_FROM)};
#define CONVERSION_FAMILY(source) (13 + (source))
/* and those from complex64 and complex128 (family 34) and to them from the real dtypes (35) */
#define FROM_COMPLEX(S, s, ST, sc, D, d, DT, dc) [DLP_##D] = "dlp_convert_" #s "_" #d,
#define TO_COMPLEX(S, s, ST, sc) \
  [DLP_##S] = {[DLP_COMPLEX64] = "dlp_convert_" #s "_complex64", [DLP_COMPLEX128] = "dlp_convert_" #s "_complex128"},
static const char *const complex_conversions[DLP_COMPLEX128 + 1][DLP_COMPLEX128 + 1] = {
  DLP_REAL_DTYPES(TO_COMPLEX)
  [DLP_COMPLEX64] = {DLP_REAL_DESTINATIONS(FROM_COMPLEX, COMPLEX64, complex64, -, -)
                     [DLP_COMPLEX128] = "dlp_convert_complex64_complex128"},
  [DLP_COMPLEX128] = {DLP_REAL_DESTINATIONS(FROM_COMPLEX, COMPLEX128, complex128, -, -)
                      [DLP_COMPLEX64] = "dlp_convert_complex128_complex64"},
};
/* same-dtype copies by element size: family 12 */
static const char *const copies[] = {"dlp_copy_1", "dlp_copy_2", NULL, "dlp_copy_4", NULL, NULL, NULL, "dlp_copy_8",
                                     NULL, NULL, NULL, NULL, NULL, NULL, NULL, "dlp_copy_16"};

const char *dlp_cuda_copy_kernel(lua_State *L, int dst_dtype, int src_dtype, int *family, const char *what) {
  int size = (int)dlp_dtypes[src_dtype].itemsize;
  if (dst_dtype == src_dtype && !dlp_is_packed(src_dtype, 0) && size <= 16 && copies[size - 1]) {
    *family = 12;
    return copies[size - 1];
  }
  if (dst_dtype != src_dtype && src_dtype <= DLP_FLOAT64 && dst_dtype <= DLP_FLOAT64) {
    *family = CONVERSION_FAMILY(src_dtype);
    return conversions[src_dtype][dst_dtype];
  }
  if (dst_dtype != src_dtype && src_dtype <= DLP_COMPLEX128 && dst_dtype <= DLP_COMPLEX128) {
    *family = src_dtype > DLP_FLOAT64 ? 34 : 35;
    return complex_conversions[src_dtype][dst_dtype];
  }
  luaL_error(L, "%s: %s to %s is not copied on CUDA devices yet (copy through the host)", what,
             dlp_dtypes[src_dtype].name, dlp_dtypes[dst_dtype].name);
  return NULL;
}

void dlp_copy_on_cuda(lua_State *L, dlp_Tensor *dst, dlp_Tensor *src, dlp_CudaStream *stream, const char *what) {
  int ssize = (int)dlp_dtypes[src->dtype].itemsize, dsize = (int)dlp_dtypes[dst->dtype].itemsize;
  int sizes[2] = {dsize, ssize}, family;
  int64_t strides[2][DLP_MAX_NDIM];
  char *data[2] = {dlp_first_element(dst), dlp_first_element(src)};
  dlp_Tensor *tensors[2] = {dst, src};
  if (dlp_is_packed(src->dtype, src->flags) || dlp_is_packed(dst->dtype, dst->flags))
    luaL_error(L, "%s: packed %s is not copied on CUDA devices yet (copy through the host)", what,
               dlp_dtypes[src->dtype].name);
  const char *kernel = dlp_cuda_copy_kernel(L, dst->dtype, src->dtype, &family, what);
  if (dlp_overlaps(dst, src)) { /* views of one block: through a temporary, as on the host */
    dlp_Tensor *tmp = dlp_tensor_new(L, src->dtype, 0, src->dl.device, src->dl.ndim, src->dl.shape, 0, what);
    dlp_copy_on_cuda(L, tmp, src, stream, what);
    dlp_copy_on_cuda(L, dst, tmp, stream, what);
    dlp_tensor_release(tmp);
    lua_pop(L, 1);
    return;
  }
  dlp_broadcast_strides(dst, dst->dl.ndim, dst->dl.shape, strides[0]);
  dlp_broadcast_strides(src, dst->dl.ndim, dst->dl.shape, strides[1]);
  dlp_run_on_cuda(L, what, stream, 2, dst->dl.ndim, dst->dl.shape, data, (const int64_t(*)[DLP_MAX_NDIM])strides,
                  tensors, NULL, sizes, kernel, family);
}

void dlp_fill_on_cuda(lua_State *L, dlp_Tensor *t, const void *element, dlp_CudaStream *stream, const char *what) {
  int size = (int)dlp_dtypes[t->dtype].itemsize, sizes[2] = {size, size};
  int64_t strides[2][DLP_MAX_NDIM];
  char *data[2] = {dlp_first_element(t), NULL};
  dlp_Tensor *tensors[2] = {t, NULL};
  const void *values[2] = {NULL, element};
  if (dlp_is_packed(t->dtype, t->flags) || size > 16 || !copies[size - 1])
    luaL_error(L, "%s: %s is not filled on CUDA devices yet", what, dlp_dtypes[t->dtype].name);
  int64_t shape[DLP_MAX_NDIM];
  dlp_broadcast_strides(t, t->dl.ndim, t->dl.shape, strides[0]);
  for (int i = 0; i < t->dl.ndim; i++) { /* a dimension of stride 0 repeats one element: filled once */
    strides[1][i] = 0;
    shape[i] = strides[0][i] == 0 && t->dl.shape[i] > 0 ? 1 : t->dl.shape[i];
  }
  dlp_run_on_cuda(L, what, stream, 2, t->dl.ndim, shape, data, (const int64_t(*)[DLP_MAX_NDIM])strides, tensors,
                  values, sizes, copies[size - 1], 12);
}

/* ---- ranges: arange, linspace, eye (family 26) ---- */

#define RANGE_NAMES(prefix)                                                                          \
  {                                                                                                  \
    [DLP_INT8] = prefix "int8", [DLP_INT16] = prefix "int16", [DLP_INT32] = prefix "int32",          \
    [DLP_INT64] = prefix "int64", [DLP_UINT8] = prefix "uint8", [DLP_UINT16] = prefix "uint16",      \
    [DLP_UINT32] = prefix "uint32", [DLP_UINT64] = prefix "uint64", [DLP_FLOAT16] = prefix "float16", \
    [DLP_BFLOAT16] = prefix "bfloat16", [DLP_FLOAT32] = prefix "float32", [DLP_FLOAT64] = prefix "float64" \
  }
static const char *const range_kernels[3][DLP_FLOAT64 + 1] = {
  RANGE_NAMES("dlp_arange_int_"), RANGE_NAMES("dlp_arange_float_"), RANGE_NAMES("dlp_linspace_")};

void dlp_generate_on_cuda(lua_State *L, dlp_Tensor *t, const char *kernel, int family, const void *params,
                          const char *what) {
  int sizes[4] = {(int)dlp_dtypes[t->dtype].itemsize, 16, 16, 16};
  int64_t strides[4][DLP_MAX_NDIM] = {{0}};
  char *data[4] = {dlp_first_element(t), NULL, NULL, NULL};
  dlp_Tensor *tensors[4] = {t, NULL, NULL, NULL};
  const unsigned char *p = params;
  const void *values[4] = {NULL, p, p + 16, p + 32};
  dlp_broadcast_strides(t, t->dl.ndim, t->dl.shape, strides[0]);
  dlp_run_on_cuda(L, what, NULL, 4, t->dl.ndim, t->dl.shape, data, (const int64_t(*)[DLP_MAX_NDIM])strides, tensors,
                  values, sizes, kernel, family);
}

void dlp_range_on_cuda(lua_State *L, dlp_Tensor *t, int kind, const void *params, const char *what) {
  const char *kernel = t->dtype <= DLP_FLOAT64 ? range_kernels[kind][t->dtype] : NULL;
  if (!kernel) luaL_error(L, "%s: %s ranges are not made on CUDA devices", what, dlp_dtypes[t->dtype].name);
  dlp_generate_on_cuda(L, t, kernel, 26, params, what);
}

void dlp_diagonal_on_cuda(lua_State *L, dlp_Tensor *t, const void *element, const char *what) {
  int64_t rows = t->dl.shape[0], cols = t->dl.shape[1], n = rows < cols ? rows : cols, size = dlp_dtypes[t->dtype].itemsize;
  int64_t strides[2][DLP_MAX_NDIM] = {{(cols + 1) * size}, {0}};
  int sizes[2] = {(int)size, (int)size}, family;
  char *data[2] = {dlp_first_element(t), NULL};
  dlp_Tensor *tensors[2] = {t, NULL};
  const void *values[2] = {NULL, element};
  const char *kernel = dlp_cuda_copy_kernel(L, t->dtype, t->dtype, &family, what);
  dlp_run_on_cuda(L, what, NULL, 2, 1, &n, data, (const int64_t(*)[DLP_MAX_NDIM])strides, tensors, values, sizes,
                  kernel, family);
}
