/*
 * cpu_parallel.h - contiguous ranges of a pointwise kernel's elements (or
 * rows) split over the plan's CPU threads (gcc_cpu_ctx.max_threads) on the
 * OpenMP pool oneDNN, LayerNormalization and the fused attention use
 * (libgomp), for the kernels of the libraries built without -fopenmp
 * (cpu_kernels.c, cpu_math.c, cpu_index.c, cpu_optim.c).
 *
 * Determinism: the cut depends on the element count, the alignment and the
 * thread count only, and the kernels that use it compute every element the
 * same way whatever range it falls in (no reductions across a cut), so the
 * results are bitwise the same for any thread count, run after run.
 */
#ifndef GCC_RUNTIME_CPU_PARALLEL_H
#define GCC_RUNTIME_CPU_PARALLEL_H

#include <stdint.h>

#include "runtime/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* fn(arg, part, begin, end): the elements [begin, end) of part `part` (0 ..
 * parts - 1, parts <= the threads asked for). */
typedef void (*gcc_cpu_range_fn)(void *arg, int part, int64_t begin, int64_t end);

/* The threads a pointwise kernel over `work` elements uses: 1 below
 * GCC_CPU_PARALLEL_MIN_WORK (an OpenMP region costs more than such a loop)
 * or when the environment sets GCC_CPU_POINTWISE_PARALLEL=0 (for
 * comparisons, and for machines shared with other work, where a parallel
 * region waits for its second thread to be scheduled), else the plan's
 * (a->ctx->max_threads; 1 without a context). The results are the same
 * bits either way. */
#define GCC_CPU_PARALLEL_MIN_WORK 32768
int gcc_cpu_pointwise_threads(const gcc_kernel_args *a, int64_t work);

/* Cuts [0, n) into at most `threads` (and at most GCC_CPU_PARALLEL_MAX_PARTS)
 * parts of consecutive elements whose boundaries are multiples of `align`
 * (>= 1; the last part ends at n) and runs fn on every non-empty part, the
 * parts in parallel when there are two or more, else on the calling thread.
 * Returns the number of parts (0 when n <= 0: fn is not called). */
#define GCC_CPU_PARALLEL_MAX_PARTS 64
int gcc_cpu_parallel_for(int threads, int64_t n, int64_t align, gcc_cpu_range_fn fn, void *arg);

#ifdef __cplusplus
}
#endif

#endif
