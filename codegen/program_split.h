/*
 * program_split.h - one generated translation unit (codegen/emit.h: all
 * kernels of a plan) split into several NVRTC programs, compiled in parallel
 * on several threads, each through the kernel cache under its own key.
 *
 * Why: NVRTC compiles one program on one thread; the ResNet-50 training
 * plan's 313 kernels took 18 s of CPU in one program. Split into programs of
 * a few kernels each, they compile on as many threads as there are cores,
 * and a change to one kernel recompiles only its program.
 *
 * How a source is split (gcc_program_split_source): the source is cut into
 * top-level items (a function, a declaration, a preprocessor block
 * #if...#endif with what it holds, with the comments and blank lines before
 * them), found by a scanner that knows comments, string and character
 * literals, braces and preprocessor conditionals. An item that defines an
 * `extern "C" __global__` function is a kernel item; an item that names a
 * kernel (a whole identifier: the host-emulation launcher `K_launch` that
 * calls K) belongs to that kernel; every other item (headers, the
 * generated __device__ helpers, typedefs) is shared and copied into every
 * program, in source order, so that every program compiles on its own
 * (unused inline helpers cost the compiler little). Kernels are dealt to
 * programs in the order they appear, in contiguous runs: program p holds
 * kernels [first, first + count). The number of programs depends only on
 * the number of kernels (GCC_PROGRAM_KERNELS per program, at most
 * GCC_PROGRAM_MAX), never on the thread count, so the programs, their
 * sources, names and cache keys are the same on every machine and every
 * run: output is deterministic.
 *
 * A source that cannot be split that way (an item names kernels of two
 * programs, a __global__ that is not extern "C", unbalanced braces or
 * #if/#endif) gives GCC_ERR_UNSUPPORTED with the reason; the caller then
 * compiles it as one program, as before.
 *
 * Thread safety: the functions keep no global state; gcc_compile_programs
 * calls `compile` from several threads at once (gcc_kernel_cache_hook and
 * gcc_nvrtc_compile allow that).
 */
#ifndef GCC_CODEGEN_PROGRAM_SPLIT_H
#define GCC_CODEGEN_PROGRAM_SPLIT_H

#include <stddef.h>

#include "codegen/kernel_image.h"
#include "graph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kernels per program (the last program may hold fewer), and the most
 * programs a source is split into (the GPU machine has 16 cores; more
 * programs than cores balance kernels of unequal cost). */
#define GCC_PROGRAM_KERNELS 8
#define GCC_PROGRAM_MAX     32

typedef struct gcc_program {
  char *source; /* NUL-terminated: the shared items and this program's kernels */
  int first;    /* its kernels are kernels [first, first + count) in source order */
  int count;
} gcc_program;

typedef struct gcc_program_split {
  gcc_program *programs;
  int n_programs;
  char **kernel_names; /* every kernel, in source order (n_kernels) */
  int n_kernels;
} gcc_program_split;

/* The number of programs for n_kernels kernels: ceil(n / GCC_PROGRAM_KERNELS)
 * clamped to [1, GCC_PROGRAM_MAX] (0 for n_kernels <= 0). */
int gcc_program_count(int n_kernels);

/* Splits `source` into gcc_program_count(kernels found) programs as the
 * header describes; `out` is zeroed first. Ownership: the caller frees out
 * with gcc_program_split_free (also after a failure). Errors:
 * GCC_ERR_INVALID_ARGUMENT (NULL source or out); GCC_ERR_UNSUPPORTED with
 * the reason when the source cannot be split (see above), or holds no
 * kernel; GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_program_split_source(const char *source, gcc_program_split *out, gcc_diag *d);

void gcc_program_split_free(gcc_program_split *s);

/* The program compiler (the plan's gcc_kernel_compile_fn:
 * gcc_kernel_cache_hook). */
typedef gcc_status (*gcc_program_compile_fn)(void *user, const char *source, const char *program,
                                             int sm, gcc_nvrtc_output *out, gcc_diag *d);

/* Compiles every program of `s` for sm_XX with `compile` on
 * min(threads, programs) threads (threads <= 0: the online CPUs), program p
 * named "<name>.p<p>.cu" where `name` is `program_name` without a trailing
 * ".cu" (NULL: "gcc_kernels"). outs[0 .. s->n_programs) are zeroed first and
 * filled; the caller frees each with gcc_nvrtc_output_free, also after a
 * failure. `threads_used` (may be NULL) gets the number of threads run.
 * A thread that cannot be started leaves its share to the others (fewer
 * threads, same outputs).
 * Errors: those of `compile`; when several programs fail, the lowest
 * program's error (deterministic whatever the threads' timing), its message
 * prefixed with the program's name and its first and last kernel;
 * GCC_ERR_INVALID_ARGUMENT (NULL s, compile or outs); GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_compile_programs(const gcc_program_split *s, const char *program_name, int sm,
                                int threads, gcc_program_compile_fn compile, void *user,
                                gcc_nvrtc_output *outs, int *threads_used, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_CODEGEN_PROGRAM_SPLIT_H */
