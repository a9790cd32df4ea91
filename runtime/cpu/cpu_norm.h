/*
 * cpu_norm.h - the CPU kernels of LayerNormalization and LayerNormGrad
 * (graph/ops.h), named by the CPU op table (runtime/cpu/cpu_ops.c).
 *
 * X is seen as [rows, D] (gcc_layer_norm_dims: rows the product of the dims
 * before `axis`, D of the rest); Scale and B hold D floats. Legend: r a row,
 * j a column of the normalised D, xhat = (x - mean_r) * rstd_r with the
 * row's mean and biased variance var_r, rstd_r = 1 / sqrt(var_r + eps).
 *
 * Arithmetic: float32, as PyTorch's CPU LayerNorm. A row's sums (the mean,
 * the variance around it, dX's sum of g and of g (x - mean)) run in 2 x 16
 * float32 lanes combined in a fixed tree (each within (D / 32 + 5) u of its
 * terms' absolute sum, u = 2^-24); the variance in a second pass over the
 * row (from L1), rstd from it in float64 and rounded once. The kernels are
 * compiled for AVX-512, AVX2 and baseline x86-64, all three adding every
 * lane in the same order without FMA (GCC, -std=c11), so the ISA does not
 * change the bits; on a CPU with AVX2 but not AVX-512 the row sums run as
 * two 8-float halves per 16 lanes (cpu_parallel.h), the same bits too. Threads: the plan's CPU thread count
 * (gcc_cpu_ctx.max_threads) on the OpenMP pool oneDNN uses, rows split
 * between them; every row and every column sum is computed in
 * the same order whatever the split, so results are bitwise the same for
 * any thread count, run after run.
 *
 *   gcc_cpu_layer_norm       Y, and Mean / InvStdDev when the node has them
 *                            (rounded to float32)
 *   gcc_cpu_layer_norm_grad  output 0: dX = rstd (g - mean_j(g) - xhat
 *                            mean_j(g xhat)), g = dY Scale, per row;
 *                            output 1: dScale[j] = sum_r dY xhat;
 *                            output 2: dB[j] = sum_r dY.
 *                            dScale and dB: the rows are cut into at most
 *                            GCC_LN_CHUNKS chunks of consecutive rows (the
 *                            cut depends on the shape only); each chunk's
 *                            column sums (its rows in order, float32) go to
 *                            its own float32 row of the workspace (chunks in
 *                            parallel), then the chunks are added in chunk
 *                            order per column in float64 (columns in
 *                            parallel). No atomics, no race.
 * Errors: none (shapes are checked by graph/ops.c); GCC_OK.
 */
#ifndef GCC_RUNTIME_CPU_NORM_H
#define GCC_RUNTIME_CPU_NORM_H

#include <stddef.h>
#include <stdint.h>

#include "graph/ir.h"
#include "runtime/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most chunks the column sums of LayerNormGrad's dScale / dB use. */
#define GCC_LN_CHUNKS 64

/* Chunks and rows per chunk of the column sums over `rows` rows. */
void gcc_ln_chunks(int64_t rows, int64_t *n_chunks, int64_t *rows_per_chunk);

gcc_status gcc_cpu_layer_norm(const gcc_kernel_args *a);
gcc_status gcc_cpu_layer_norm_grad(const gcc_kernel_args *a);
/* Bytes of float32 partial sums LayerNormGrad's dScale / dB need (chunks x
 * D); 0 for dX. */
size_t gcc_cpu_layer_norm_grad_workspace(const gcc_graph *g, int node);

/* LayerNormGradAll (dY, X, Scale [, R]) -> the outputs its `outputs` bits
 * name (dX, dScale, dB; graph/ops.h): per chunk of rows (gcc_ln_chunks, as
 * LayerNormGrad's column sums) the rows' statistics once, then dX and the
 * chunk's dScale / dB column sums in the same pass over dY and X, the
 * chunks then added as LayerNormGrad does. Each output is bitwise
 * LayerNormGrad's (the same sums in the same lanes and order); with R, dX
 * is LayerNormGrad's float32 dX + R (Add's bits). */
gcc_status gcc_cpu_layer_norm_grad_all(const gcc_kernel_args *a);
/* Bytes of the float32 partial sums (chunks x D per column sum wanted). */
size_t gcc_cpu_layer_norm_grad_all_workspace(const gcc_graph *g, int node);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_CPU_NORM_H */
