/*
 * emit.h - CUDA C code generation for fused groups (codegen/fusion.c).
 *
 * Every group of kind POINTWISE, LOSS or OPTIMIZER placed on a CUDA device
 * becomes one `extern "C" __global__` kernel. GEMM groups are cuBLASLt calls
 * and COPY groups cudaMemcpyAsync: no code is generated for them. All
 * kernels of a plan go into one translation unit (one NVRTC program).
 *
 * Conventions of the generated source:
 *  - shapes are compile-time constants (the plan is compiled for one batch
 *    size), indices are 64-bit (`long long`), loops are grid-stride, so any
 *    grid covers any size;
 *  - a kernel is named after what it fuses and starts with a comment
 *    listing its nodes;
 *  - pointwise kernels over equal-shaped, 16-byte aligned operands whose
 *    element count is a multiple of 4 use float4 loads and stores;
 *  - reductions are deterministic: no atomics in them; a loss kernel runs as
 *    one block and reduces in shared memory in a fixed order (its only
 *    atomic is the bad-label flag's atomicMin, whose result is the same in
 *    any order); BatchNormalization and BatchNormGrad reduce over many
 *    blocks per channel, LayerNormGrad's dScale and dB over many blocks per
 *    column (codegen/emit_layernorm.c): a group of several kernels (the kernel set holds
 *    them consecutively, in launch order, the last named after the group),
 *    the per-block partials passed through the plan's scratch
 *    (GCC_KARG_SCRATCH) and merged in index order by the next kernel;
 *  - the same source compiles as host C++ with tests/cuda_host_shim.h
 *    (GCC_HOST_EMULATION defined), which is how the tests run generated
 *    kernels without a GPU. For that build the source also defines, per
 *    kernel, `extern "C" void <kernel>_launch(unsigned grid, unsigned block,
 *    void **args)` that unpacks `args` exactly as cudaLaunchKernel would.
 */
#ifndef GCC_CODEGEN_EMIT_H
#define GCC_CODEGEN_EMIT_H

#include <stddef.h>
#include <stdint.h>

#include "graph/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever generated code changes for the same graph (part of the
 * kernel cache key). */
#define GCC_CODEGEN_VERSION 3

typedef enum gcc_karg_kind {
  GCC_KARG_INPUT = 0, /* const pointer to a value's storage (its dtype) */
  GCC_KARG_OUTPUT,    /* pointer to a value's storage, written */
  /* The optimizer kernel's sections hold exactly the parameters of its
   * group, in group order, each padded to GCC_ARENA_ALIGN bytes (the same
   * offsets in every section): the runtime lays the device's persistent
   * arena out that way per optimizer group. */
  GCC_KARG_PARAMS,      /* optimizer: float* base of the parameter section */
  GCC_KARG_GRADS,       /* optimizer: const float* base of the gradient section */
  GCC_KARG_STATE0,      /* optimizer: float* momentum buffer / Adam exp_avg section */
  GCC_KARG_STATE1,      /* optimizer: float* Adam exp_avg_sq section */
  GCC_KARG_NUMEL,       /* long long: elements of the flat sections */
  GCC_KARG_FIRST_STEP,  /* int: 1 on the first optimizer step (SGD momentum) */
  GCC_KARG_STEP_SIZE,   /* float: Adam lr / (1 - beta1^t) */
  GCC_KARG_BC2_SQRT,    /* float: Adam sqrt(1 - beta2^t) */
  GCC_KARG_LR,          /* float: the step's learning rate (the lr schedule's, else the
                          node's lr attribute) */
  GCC_KARG_BAD_LABEL,   /* int*: set by the host to GCC_BAD_LABEL_NONE; a loss
                           kernel lowers it (atomicMin) to the row of each label
                           outside [0, C) (and zeroes that row's gradient), so
                           it ends at the first such row whatever order the
                           threads run in; the host checks it after the step
                           and fails as the CPU backend does (same row) */
  GCC_KARG_I64,         /* long long set by the runtime per launch (the gather
                           kernel's first row, rows and 32-bit words per row) */
  GCC_KARG_STEP,        /* long long: the optimizer steps completed before this one
                           (gcc_plan_run's step): the Philox counter of Dropout's
                           mask; a kernel that takes it is launched, not replayed
                           from a CUDA Graph */
  GCC_KARG_FLAT_INPUTS, /* const float*: input 1 of the group's node, whose inputs from 1
                           on lie consecutively, each padded to GCC_ARENA_ALIGN bytes (the
                           flat gradient section: AmpNonFiniteCheck); the runtime checks
                           that layout when it builds the plan */
  GCC_KARG_PARAM_COPY,  /* optimizer: __nv_bfloat16* / __half* base of the section of the
                          parameters' 16-bit copies (--precision bf16|fp16), at the
                          parameters' element offsets: the kernel stores each updated
                          weight rounded to nearest even */
  GCC_KARG_SCRATCH,     /* float*: the plan's device scratch of gcc_kernel_info.scratch_bytes
                           (at least), one region shared by every kernel of the plan: a
                           group of several kernels (BatchNormalization, BatchNormGrad,
                           LayerNormGrad) passes its per-block partials from one kernel
                           to the next through it, in stream order */
  GCC_KARG_KIND_COUNT
} gcc_karg_kind;

/* The bad-label flag's "no bad label" value: every byte 0x7f (the host sets
 * it with a byte memset), above any row index a batch can have. */
#define GCC_BAD_LABEL_NONE      0x7f7f7f7f
#define GCC_BAD_LABEL_NONE_BYTE 0x7f

typedef struct gcc_kernel_arg {
  gcc_karg_kind kind;
  int value;        /* INPUT / OUTPUT: value index in the graph, else -1 */
  const char *name; /* the C parameter name (points into the kernel set) */
} gcc_kernel_arg;

typedef struct gcc_kernel_info {
  char *name;           /* the kernel's symbol */
  int group;            /* index in graph->groups */
  gcc_kernel_arg *args; /* in parameter order */
  int n_args;
  int64_t work_items;   /* elements the grid-stride loop covers */
  int block_dim;        /* threads per block the kernel MUST be launched with
                            (single-block kernels size shared memory by it) */
  int grid_dim;         /* blocks for `work_items` on the target (<= 65535) */
  int single_block;     /* 1: uses __syncthreads and must run as exactly one block */
  size_t dynamic_smem;  /* bytes of dynamic shared memory per launch (the
                          cudaLaunchKernel sharedMem argument); 0: none (the
                          generated kernels size their shared arrays statically) */
  size_t scratch_bytes; /* bytes of GCC_KARG_SCRATCH the kernel reads or writes; 0: none */
} gcc_kernel_info;

typedef struct gcc_kernel_set {
  char *source; /* the whole translation unit, NUL-terminated */
  gcc_kernel_info *kernels;
  int n_kernels;
  char **strings; /* storage of argument names */
  int n_strings;
} gcc_kernel_set;

/* Emits the kernels of every generated group on `device` of the fused graph
 * `g`. `sm_count` sizes the grids (blocks = min(ceil(work / block),
 * 32 * sm_count)). Errors: GCC_ERR_UNSUPPORTED naming the group and node
 * whose op has no code generator; GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_codegen_emit(const gcc_graph *g, int device, int sm_count, gcc_kernel_set *out,
                            gcc_diag *d);

void gcc_kernel_set_free(gcc_kernel_set *ks);

/* The name of the row-gather kernel of gcc_codegen_gather. */
#define GCC_GATHER_KERNEL "gcc_gather_rows"

/* A kernel set of one kernel, GCC_GATHER_KERNEL, that batches a dataset
 * held on the device (--dataset-on-device):
 *   dst[r][w] = src[perm[first + r]][w]  for r < rows, w < row_words,
 * rows of 32-bit words (a float32 image row, or an int64 label as 2 words).
 * Arguments: src (INPUT), perm (INPUT, long long), first, rows, row_words
 * (I64), dst (OUTPUT); grid-stride, so `max_work` (the largest rows x
 * row_words) only sizes the grid. Errors: GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_codegen_gather(int sm_count, int64_t max_work, gcc_kernel_set *out, gcc_diag *d);

/* The work of one cuBLASLt epilogue, for a GEMM group whose epilogue
 * cuBLASLt's heuristic did not offer: the plan runs the plain GEMM (D =
 * alpha op(A) op(B), no bias, no mask), then this kernel on the result.
 * Column-major, as codegen/gemm_map.h describes the matmul: D is m x n with
 * leading dimension ldd; op(B) is k x n (B stored n x k when trans_b, with
 * leading dimension ldb). `kind` is the cublasLtEpilogue_t value
 * (gcc_epilogue), and the kernel does what cuBLASLt documents for it:
 *   BIAS (4), RELU_BIAS (6)    D[i,j] = D[i,j] + bias[i], then max(., 0) for RELU
 *   RELU_AUX_BIAS (134)        as RELU_BIAS, and bit i + j * aux_ld of the
 *                              bit-mask aux = (D[i,j] + bias[i] > 0) (aux_ld a
 *                              multiple of 128; padding bits 0)
 *   DRELU (136)                D[i,j] = 0 where that bit of aux is 0
 *   DRELU_BGRAD (152)          as DRELU, then bgrad[i] = sum_j D[i,j]
 *   BGRADB (512)               bgrad[j] = sum_kk op(B)[kk,j]
 * Sums run in double, in index order, one thread per output: deterministic. */
typedef struct gcc_epilogue_work {
  int kind;
  int64_t m, n, k, ldd, ldb, aux_ld;
  int trans_b;
  /* the dtype of d, bias, b and bgrad (the GEMM's, gemm_map.h): float32 (0 reads
   * as float32), or bfloat16 / float16, loaded into float and stored rounded to
   * nearest even (a 16-bit D is then rounded twice: by the plain GEMM, and
   * after the epilogue; cuBLASLt's fused epilogue rounds once) */
  gcc_dtype dtype;
} gcc_epilogue_work;

/* One kernel per entry of w[0 .. n), named "gcc_epilogue_<i>", in one
 * translation unit. Arguments, in this order, by name: "d" (float*, OUTPUT;
 * not for BGRADB), "bias" (const float*, INPUT; BIAS variants), "aux"
 * (unsigned*: OUTPUT for RELU_AUX_BIAS, INPUT for DRELU*), "b" (const
 * float*, INPUT; BGRADB), "bgrad" (float*, OUTPUT; BGRAD variants); their
 * value fields are -1 (the runtime binds them). Errors:
 * GCC_ERR_INVALID_ARGUMENT for a kind without epilogue work (DEFAULT) or an
 * unknown one, or sizes <= 0; GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_codegen_gemm_epilogues(const gcc_epilogue_work *w, int n, int sm_count,
                                      gcc_kernel_set *out, gcc_diag *d);

/* The launch manifest of a kernel set as JSON (schema
 * "gcc-train.kernels/1"): per generated kernel its name, group kind, fused
 * nodes, grid and block, whether it must run as one block, and its
 * arguments (kind, value name, dtype, shape); per library call the library
 * ("cublasLt" for GEMM groups, with the epilogue; "cudnn" for CUDNN groups,
 * with the cuDNN function in "call") and nodes; and launches per step. A
 * malloc'ed string. Errors: GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_codegen_manifest(const gcc_graph *g, int device, const char *arch,
                                const gcc_kernel_set *ks, char **json, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_CODEGEN_EMIT_H */
