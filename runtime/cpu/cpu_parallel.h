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

/* 1 where the hand-written vector kernels run their 8-float forms (ymm
 * registers; cpu_attention.c, cpu_math.c's exact GELU, cpu_loss.c's
 * SoftmaxCrossEntropy and cpu_norm.c's LayerNorm row sums):
 * a CPU with AVX2 and FMA but not AVX-512F. Their 16-float forms, written
 * with GCC's generic vectors, are one zmm register per vector in the
 * AVX-512 clones, but in the AVX2 clones GCC assembles their comparisons,
 * selections and broadcasts lane by lane through the stack (the attention
 * kernels ran 25-30x, the GELU 5-6x slower than on AVX-512, where 2x is the
 * vectors' width). 0 elsewhere: the 16-float forms (the baseline clones on
 * a CPU without AVX2), and always in builds without the ISA clones
 * (AddressSanitizer, not x86-64). Both forms group every sum alike and
 * fuse the same multiply-adds (the attention and the GELU fuse them, the
 * others none), so on one machine they give the same bits. */
int gcc_cpu_narrow_vectors(void);
/* For tests: on = 1 makes the 8-float forms run wherever the CPU has AVX2
 * and FMA (an AVX-512 machine too), on = 0 restores the machine's choice.
 * Not to be called while a kernel runs. Returns gcc_cpu_narrow_vectors(). */
int gcc_cpu_set_narrow_vectors(int on);

#ifdef __cplusplus
}
#endif

#endif
