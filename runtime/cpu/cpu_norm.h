/*
 * cpu_norm.h - the CPU kernels of LayerNormalization and LayerNormGrad
 * (graph/ops.h), named by the CPU op table (runtime/cpu/cpu_ops.c).
 *
 * X is seen as [rows, D] (gcc_layer_norm_dims: rows the product of the dims
 * before `axis`, D of the rest); Scale and B hold D floats. Legend: r a row,
 * j a column of the normalised D, xhat = (x - mean_r) * rstd_r with the
 * row's mean and biased variance var_r, rstd_r = 1 / sqrt(var_r + eps).
 *
 * Arithmetic: the row statistics are float64 sums of the float32 inputs (8
 * fixed partial sums per row, combined in a fixed order, so the compiler
 * vectorises them and the bits do not depend on the ISA's lane count or on
 * the threads), the results rounded to float32 once. Threads: the plan's CPU
 * thread count (gcc_cpu_ctx.max_threads) on the OpenMP pool oneDNN uses,
 * rows split between them; every row and every column sum is computed in
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
 *                            column sums go to its own float64 row of the
 *                            workspace (chunks in parallel), then the chunks
 *                            are added in chunk order per column (columns in
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
/* Bytes of float64 partial sums LayerNormGrad's dScale / dB need (chunks x
 * D); 0 for dX. */
size_t gcc_cpu_layer_norm_grad_workspace(const gcc_graph *g, int node);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_CPU_NORM_H */
