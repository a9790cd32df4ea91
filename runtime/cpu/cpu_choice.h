/*
 * cpu_choice.h - which library runs a CPU GEMM node, chosen by measurement
 * when the plan is built, as a GPU runtime times cuDNN's algorithms
 * (cudnnFindConvolutionForwardAlgorithm) and cuBLASLt's heuristics.
 *
 * A GEMM node (Gemm, MatMul of 2-D operands; forward and the backward GEMMs
 * autodiff makes, which are Gemm nodes too) has up to three candidates:
 *   GCC_CPU_LIB_ONEDNN    oneDNN's matmul primitive (runtime/cpu/dnnl_ops.h);
 *   GCC_CPU_LIB_OPENBLAS  the op table's own kernel (OpenBLAS cblas_sgemm);
 *   GCC_CPU_LIB_GEMV      the hand-written AVX-512 / AVX2 GEMV of dnnl_ops.c
 *                         (batch-1 rows without a full C only).
 * Which is fastest depends on the shape and the machine: at batch 64 the
 * MNIST MLP's GEMMs ran faster on OpenBLAS than on oneDNN 2.6 on an AVX-512
 * EPYC, the other way round on an AVX2 machine (issue 28).
 *
 * The choice for one node (gcc_cpu_choose), in this order:
 *   1. forced: the environment variable GCC_CPU_GEMM = onednn | openblas |
 *      gemv (gcc_cpu_lib_forced; the caller applies it, nothing is timed or
 *      cached). GCC_CPU_ONEDNN=0 keeps its meaning: the op table's kernels
 *      run every node and nothing is prepared or chosen at all;
 *   2. this process's memo: a key chosen before in this process gets the
 *      same library again, so two plans of one process run the same kernels
 *      (bitwise repeatable runs);
 *   3. the on-disk cache (below): a hit costs one small file read, no
 *      timing;
 *   4. timing: every candidate runs on the node's real shapes (scratch
 *      operands, not the plan's), once to warm up, then in rounds of one run
 *      each (the order rotating each round, so that a burst of load from
 *      other processes hits every candidate), at most GCC_CPU_CHOICE_ROUNDS
 *      rounds and no more after the node has spent the request's budget
 *      (at least one round: a budget of 0 is warm-up plus one round); the
 *      fastest by its minimum time wins (the minimum: other processes on
 *      the machine only ever add time), ties to the lower enum value. The
 *      result goes to the memo and the disk cache. Every node that can be
 *      timed is timed, so that a process which finds every choice on disk
 *      runs exactly what the process that timed them chose (a node left
 *      untimed for lack of time and timed by a later process could change
 *      the bits of a resumed run);
 *   5. untimed: when the request's budget is negative (the CPU backend: a
 *      GEMM too large to time, decided by its shape alone), or with one
 *      candidate, the lowest candidate (oneDNN) without timing; kept in the
 *      memo, not on disk.
 *
 * Key: the caller's text (the node's op, m, n, k, transposes, alpha, beta,
 * bias / full C and the candidate set) after the machine's: the CPU model
 * (CPUID's brand string; elsewhere /proc/cpuinfo "model name"), the ISA
 * oneDNN JITs for (dnnl_get_effective_cpu_isa, which DNNL_MAX_CPU_ISA
 * lowers), oneDNN's version, the thread count and the OpenMP wait policy
 * (gcc_cpu_choice_machine).
 *
 * Disk cache: the directory of the NVRTC kernel cache (codegen/
 * kernel_cache.h: the explicit `dir`, else $XDG_CACHE_HOME/gcc-train when
 * XDG_CACHE_HOME is absolute, else $HOME/.cache/gcc-train), one file per
 * key, `cpu-choice-<16 hex digits of the key's FNV-1a 64 hash>.txt`:
 *   gcc-train cpu choice 1\n
 *   key <the whole key>\n
 *   choice <onednn|openblas|gemv>\n
 *   us <lib>=<min microseconds> ... (the measurement, for people)\n
 * An entry is used only if all four lines are there in that order, its key
 * is the one asked for (a hash collision is a miss) and its choice is one of
 * the request's candidates; anything else (a truncated or edited file, a
 * directory or FIFO in its place, another format) is ignored, re-timed and
 * replaced, and out->note says why. Entries are written to a temporary file
 * and renamed into place. The environment variable GCC_CPU_CHOICE_CACHE=0
 * turns the disk cache off (timing and the memo remain). The cache never
 * makes a plan fail: an unusable directory leaves a note and times. With no
 * directory at all (neither an explicit `dir`, an absolute XDG_CACHE_HOME nor
 * HOME: a Bazel test's environment, some daemons) nothing keeps a timed
 * choice for the next process, so runs could choose differently and a
 * resumed run would not be bitwise the uninterrupted one: the choice is then
 * not timed but the first candidate (the lowest gcc_cpu_lib), and the note
 * says so.
 */
#ifndef GCC_RUNTIME_CPU_CPU_CHOICE_H
#define GCC_RUNTIME_CPU_CPU_CHOICE_H

#include <stddef.h>

#include "graph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gcc_cpu_lib {
  GCC_CPU_LIB_ONEDNN = 0,
  GCC_CPU_LIB_OPENBLAS = 1,
  GCC_CPU_LIB_GEMV = 2,
  GCC_CPU_LIB_COUNT = 3,
} gcc_cpu_lib;

/* Rounds of timing at most, and the timing budgets the CPU backend gives a
 * node and a whole plan (runtime/cpu/cpu_dnnl.c): once a plan has spent
 * its budget, each further node gets budget 0 (warm-up and one round:
 * about two runs of each candidate, as much as two training steps spend
 * in that GEMM). */
#define GCC_CPU_CHOICE_ROUNDS        5
#define GCC_CPU_CHOICE_NODE_BUDGET_S 0.020
#define GCC_CPU_CHOICE_PLAN_BUDGET_S 0.300
/* The whole plan's GEMMs together (runtime/cpu/cpu_dnnl.h,
 * gcc_cpu_dnnl_prepare_done): each node's own choice against every GEMM on
 * OpenBLAS at the plan's thread count, timed grouped. */
#define GCC_CPU_CHOICE_WHOLE_BUDGET_S 0.100

/* "onednn", "openblas", "gemv"; NULL for another value. */
const char *gcc_cpu_lib_name(int lib);

/* The library the environment variable `var` (GCC_CPU_GEMM for the CPU
 * backend) forces: *lib = -1 when it is unset, empty or "auto", else the
 * gcc_cpu_lib its value names. Errors: GCC_ERR_INVALID_ARGUMENT naming the
 * variable, its value and the accepted values. */
gcc_status gcc_cpu_lib_forced(const char *var, int *lib, gcc_diag *d);

/* The machine part of every key: "cpu=<model> isa=<oneDNN's ISA>
 * onednn=<version> threads=<threads> wait=<passive|spinN|active>" (wait:
 * OMP_WAIT_POLICY=passive; else GOMP_SPINCOUNT=N without OMP_WAIT_POLICY,
 * gcc-train's own default being N = 10000; else active), into buf
 * (truncated to size). */
void gcc_cpu_choice_machine(int threads, char *buf, size_t size);

/* Runs candidate `lib` once on the node's shapes (synchronously). */
typedef gcc_status (*gcc_cpu_candidate_fn)(void *user, int lib, gcc_diag *d);

typedef struct gcc_cpu_choice_req {
  const char *key;     /* the whole key, one line (no '\n'), at most 1000 bytes */
  unsigned candidates; /* bit (1u << lib) per candidate; at least one */
  gcc_cpu_candidate_fn run;
  void *user;      /* run's first argument */
  const char *dir; /* the cache directory; NULL: the default (above) */
  int use_disk;    /* 0: neither read nor write the disk cache */
  double budget_s; /* the most seconds timing may take (at least one
                      round); < 0: no timing (untimed, step 5) */
  int grouped;     /* 0: rounds rotate over the candidates (above); 1: each
                      candidate's warm-up and rounds run together, in enum
                      order, each with an equal share of the budget: for
                      candidates that leave threads spinning after a run
                      (OpenBLAS's pthread pool spins about 0.1 s), which
                      would slow the next candidate's run and not the
                      step that runs one of them alone */
} gcc_cpu_choice_req;

typedef enum gcc_cpu_choice_how {
  GCC_CPU_CHOICE_TIMED = 0,
  GCC_CPU_CHOICE_CACHED, /* from the disk cache */
  GCC_CPU_CHOICE_MEMO,   /* chosen before in this process */
  GCC_CPU_CHOICE_UNTIMED,
} gcc_cpu_choice_how;

typedef struct gcc_cpu_choice {
  int lib; /* the chosen gcc_cpu_lib */
  gcc_cpu_choice_how how;
  int rounds;                       /* timing rounds run (TIMED), else 0 */
  double min_us[GCC_CPU_LIB_COUNT]; /* TIMED: each candidate's fastest run, us; else 0 */
  double seconds;                   /* what the choice cost, timing and file I/O */
  char note[512];                   /* why the disk cache was not used, or "" */
} gcc_cpu_choice;

/* Chooses as above. Errors: GCC_ERR_INVALID_ARGUMENT for a NULL key or run,
 * a key with '\n' or longer than 1000 bytes, no candidate; the candidate's
 * own error when a timing run fails (nothing is cached then). Cache
 * problems are never errors (see out->note). */
gcc_status gcc_cpu_choose(const gcc_cpu_choice_req *r, gcc_cpu_choice *out, gcc_diag *d);

/* The path of the disk cache entry for `key` in `dir` (NULL: the default
 * directory). Errors: GCC_ERR_INVALID_ARGUMENT when no directory is known
 * (neither XDG_CACHE_HOME absolute nor HOME) or the path exceeds size. */
gcc_status gcc_cpu_choice_entry_path(const char *dir, const char *key, char *buf, size_t size,
                                     gcc_diag *d);

/* FNV-1a 64 of the string s (the disk cache's file names; callers digest
 * keys longer than a key may be). */
unsigned long long gcc_cpu_choice_hash(const char *s);

/* Forgets this process's memo (tests: the next choice reads the disk cache
 * or times again). */
void gcc_cpu_choice_forget(void);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_CPU_CPU_CHOICE_H */
