/*
 * cpu_dnnl.h - the CPU backend's library kernels: the ops whose entry in
 * the CPU op table (runtime/cpu/cpu_ops.c) has a `prepare` run on oneDNN
 * primitives (runtime/cpu/dnnl_ops.h) instead of the entry's own kernel:
 *   Gemm, MatMul                   -> matmul primitive (bias operand for an
 *                                     nn.Linear bias row; a hand-written
 *                                     AVX-512 GEMV at batch 1);
 *   Conv, ConvGradData,            -> convolution forward (with its bias),
 *   ConvGradFilter                    backward-data, backward-weights;
 *   MaxPool, MaxPoolGrad,          -> pooling forward / backward (the
 *   AveragePool, AveragePoolGrad      backward of MaxPool recomputes the
 *                                     argmax from X, as the graph's
 *                                     MaxPoolGrad reads X).
 * The op table's kernels (OpenBLAS GEMMs, im2col convolutions, loops) stay
 * the reference: they run every other op, every node whose shapes or
 * attributes the primitives do not cover (a Gemm whose C broadcasts other
 * than as a bias row or the full output; a descriptor oneDNN has no
 * implementation for), and every node when the environment variable
 * GCC_CPU_ONEDNN is "0" (for comparisons and benchmarks).
 *
 * Life: the plan runner calls prepare_node once per node when the plan is
 * built (runtime/backend.h). The first prepared node of a plan creates the
 * plan's oneDNN context (engine, stream, primitive cache) with the plan's
 * CPU thread count (gcc_cpu_ctx.max_threads), so a plan's kernels always
 * run on the same number of OpenMP threads and give the same bits run after
 * run. The primitive of each node comes from that context's cache (nodes of
 * the same shape share one). Scratchpads (scratchpad_mode = user, plus the
 * reorder buffers of blocked layouts) come from one buffer per plan, sized
 * at build time to the largest node's need: nodes run one at a time, so
 * they share it; nothing is allocated per step.
 */
#ifndef GCC_RUNTIME_CPU_CPU_DNNL_H
#define GCC_RUNTIME_CPU_CPU_DNNL_H

#include "graph/status.h"
#include "runtime/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 0 when the environment variable GCC_CPU_ONEDNN is "0" (the op table's
 * own kernels run everything), else 1. Read when each plan is built. */
int gcc_cpu_dnnl_enabled(void);

/* Prepare functions of the op table (gcc_cpu_op.prepare). Each creates the
 * node's primitive from its bound tensors' shapes and attributes and sets
 * a->prepared, or leaves a->prepared NULL (the entry's kernel runs) when
 * the node is outside what the primitive covers or oneDNN has no
 * implementation for it (dnnl_unimplemented). Errors: oneDNN's other
 * failures and GCC_ERR_OUT_OF_MEMORY, naming the node. */
gcc_status gcc_cpu_dnnl_gemm_prepare(gcc_kernel_args *a, gcc_diag *d);
gcc_status gcc_cpu_dnnl_matmul_prepare(gcc_kernel_args *a, gcc_diag *d);
gcc_status gcc_cpu_dnnl_conv_prepare(gcc_kernel_args *a, gcc_diag *d);
gcc_status gcc_cpu_dnnl_conv_grad_data_prepare(gcc_kernel_args *a, gcc_diag *d);
gcc_status gcc_cpu_dnnl_conv_grad_filter_prepare(gcc_kernel_args *a, gcc_diag *d);
gcc_status gcc_cpu_dnnl_max_pool_prepare(gcc_kernel_args *a, gcc_diag *d);
gcc_status gcc_cpu_dnnl_max_pool_grad_prepare(gcc_kernel_args *a, gcc_diag *d);
gcc_status gcc_cpu_dnnl_average_pool_prepare(gcc_kernel_args *a, gcc_diag *d);
gcc_status gcc_cpu_dnnl_average_pool_grad_prepare(gcc_kernel_args *a, gcc_diag *d);

/* After every node of the plan is prepared: the plan's GEMMs as a whole.
 * OpenBLAS (Debian's pthread build) keeps its workers spinning about 0.1 s
 * after a call: beside oneDNN's OpenMP threads on the same cores that slows
 * the nodes around it, and one node timed alone does not see it, so a node
 * is offered OpenBLAS only where it runs on one thread. Here the other
 * choice is made for all GEMMs at once: each node's own choice against
 * every GEMM on OpenBLAS at the plan's thread count (what the reference
 * kernels run), the plan's GEMM sequence timed both ways on the scratch
 * operands (cpu_choice.h, grouped: the per-node set first, then OpenBLAS),
 * cached under the key "<machine> plan gemms=N digest=<FNV-1a of each
 * node's shape and choice> candidates=onednn,openblas" (the entry's
 * "onednn" means each node's own choice). Offered only when no library
 * is forced (GCC_CPU_GEMM), every GEMM could be timed, the plan has no
 * other oneDNN primitive (a convolution's OpenMP threads beside OpenBLAS's)
 * and at least one GEMM would run on several OpenBLAS threads and is not
 * on OpenBLAS already. Each GEMM's name then ends with the whole plan's
 * choice ("[openblas: whole plan timed: all OpenBLAS (997 us against 1183
 * us); the node alone: onednn: ...]", or "[onednn: ...; whole plan cached:
 * each node's choice]"). After timing it waits 150 ms for
 * OpenBLAS's workers to stop spinning (they would slow the next plan's
 * timing). Frees the scratch
 * operands either way. Errors: a timing run's, naming the node. */
gcc_status gcc_cpu_dnnl_prepare_done(gcc_cpu_ctx *ctx, gcc_diag *d);

/* Runs a prepared node (a->prepared != NULL) on its bound tensors' current
 * data and the plan's scratch. Errors: oneDNN's, naming the node. */
gcc_status gcc_cpu_dnnl_run(const gcc_kernel_args *a);

/* "matmul (brg:avx512_core) 64x512x784 bias": the primitive and the
 * implementation oneDNN chose for a prepared node, NULL for another. */
const char *gcc_cpu_dnnl_name(const gcc_kernel_args *a);

/* Frees a node's primitive (a->prepared becomes NULL), and a plan's
 * oneDNN context and scratch (ctx->state becomes NULL) after its nodes. */
void gcc_cpu_dnnl_release(gcc_kernel_args *a);
void gcc_cpu_dnnl_release_ctx(gcc_cpu_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_CPU_CPU_DNNL_H */
