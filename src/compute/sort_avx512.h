/* The AVX-512 sort of 32-bit values (sort_avx512.c), called by sort.c for lines sorted for their
 * values only. */
#ifndef DLP_SORT_AVX512_H
#define DLP_SORT_AVX512_H

#include <stdint.h>

enum { DLP_SORT32_UINT, DLP_SORT32_INT, DLP_SORT32_FLOAT }; /* how a 32-bit element is ordered */

/* Sort the n elements at p (step bytes apart; uint32, int32 or float32 as `kind`) into d
 * (contiguous, not overlapping p), ascending or descending, exactly as sort.c's stable radix
 * sort orders them: NaN after everything (before, descending), -0.0 equal to 0.0, and the zeros
 * and the NaNs each in their input order. Only where the processor has AVX-512 (F, DQ, BW, VL:
 * platform.h's DLP_CPU_AVX512), in builds where DLP_HAVE_SORT32_AVX512 is 1 (x86-64, GCC or Clang). */
void dlp_sort32_avx512(int kind, const char *p, int64_t step, int64_t n, int descending, uint32_t *d);

#if defined(__x86_64__) && defined(__GNUC__)
#define DLP_HAVE_SORT32_AVX512 1
#else
#define DLP_HAVE_SORT32_AVX512 0
#endif

#endif
