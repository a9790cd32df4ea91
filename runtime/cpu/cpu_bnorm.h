/*
 * cpu_bnorm.h - the CPU kernels of BatchNormalization and BatchNormGrad
 * (graph/ops.h), named by the CPU op table (runtime/cpu/cpu_ops.c).
 * Semantics: PyTorch's nn.BatchNorm2d / native_batch_norm and
 * native_batch_norm_backward (ONNX BatchNormalization, training_mode 0 and 1).
 *
 * X is float32 [N, C, D1, ...] (NCHW for 4 dims; [N, C] and [N, C, L] too):
 * channel c has m = N * prod(D) elements, N planes of prod(D) contiguous
 * floats. Scale, B, running mean and running var hold C floats. Legend:
 * mean_c and var_c the batch mean and biased variance of channel c, rstd_c =
 * 1 / sqrt(var_c + eps), xhat = (x - mean_c) rstd_c.
 *
 *   gcc_cpu_batch_norm       training (attribute training 1): Y = xhat
 *                            Scale + B with the batch statistics; the running
 *                            mean and var (inputs 3, 4, updated in place)
 *                            take mom * old + (1 - mom) * the batch's (the
 *                            unbiased variance m / (m - 1) var_c, as
 *                            PyTorch). Evaluation: the running statistics
 *                            normalise, nothing is updated.
 *   gcc_cpu_batch_norm_grad  BatchNormGrad(dY, X, Scale), attribute output:
 *                            0: dX = Scale rstd / m (m dY - sum dY - xhat
 *                            sum dY xhat); 1: dScale = sum dY xhat; 2: dB =
 *                            sum dY (sums over the channel's m elements).
 *
 * Arithmetic: every channel's sums are float64 sums of the float32 values in
 * one pass, of x - s (s the channel's first element: shifting by a sample
 * keeps E[(x-s)^2] - E[x-s]^2 free of cancellation for data whose mean is
 * not many standard deviations from its samples), in 8 fixed partial sums
 * per plane, combined in a fixed order, so the compiler vectorises them and
 * the bits do not depend on the ISA's lane count; results are rounded to
 * float32 once. Threads: the plan's CPU thread count (gcc_cpu_ctx.max_threads)
 * on the OpenMP pool oneDNN uses, channels split between them; a channel is
 * computed by one thread in the same order whatever the split, so results are
 * bitwise the same for any thread count, run after run.
 * Passes over memory: training forward 2 (statistics, Y), dX 2 (X and dY
 * together, then dX), dScale 1, dB 1 (dY only), evaluation forward 1.
 * Errors: none (shapes are checked by graph/ops.c); GCC_OK.
 */
#ifndef GCC_RUNTIME_CPU_BNORM_H
#define GCC_RUNTIME_CPU_BNORM_H

#include "graph/status.h"
#include "runtime/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

gcc_status gcc_cpu_batch_norm(const gcc_kernel_args *a);
gcc_status gcc_cpu_batch_norm_grad(const gcc_kernel_args *a);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_CPU_BNORM_H */
