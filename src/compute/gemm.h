/* The module's own matrix-product kernel (gemm.c), called by matmul.c. */
#ifndef DLP_GEMM_H
#define DLP_GEMM_H

#include <stddef.h>
#include <stdint.h>

/* C (M x N, rows of N contiguous elements) = A (M x K) . B (K x N), all of the compute dtype cd:
 * DLP_FLOAT32, DLP_FLOAT64, DLP_UINT32 or DLP_UINT64. Strides count elements, of any sign. The
 * floats read A and B with any strides; the integers need csa = csb = 1 (rows contiguous).
 * rows: the rows of C in each part that runs as a task, dlp_gemm_rows(cd, M, N, K); scratch:
 * dlp_gemm_scratch(cd, M, N, K, rows) bytes, any alignment. M, N, K > 0. */
typedef struct dlp_Gemm {
  int cd;
  int64_t M, N, K;
  const void *A, *B;
  int64_t rsa, csa, rsb, csb;
  void *C;
  void *scratch;
  int64_t rows;
} dlp_Gemm;

int64_t dlp_gemm_rows(int cd, int64_t M, int64_t N, int64_t K);
size_t dlp_gemm_scratch(int cd, int64_t M, int64_t N, int64_t K, int64_t rows);
void dlp_gemm(const dlp_Gemm *g);

#endif
