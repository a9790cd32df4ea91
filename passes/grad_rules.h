/*
 * grad_rules.h - gradient builders, one per differentiable op (the `grad`
 * column of graph/ops.h). Each adds backward nodes to the graph through the
 * autodiff context (passes/autodiff.h); see gcc_grad_fn for the contract.
 */
#ifndef GCC_PASSES_GRAD_RULES_H
#define GCC_PASSES_GRAD_RULES_H

#include "graph/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

gcc_status gcc_grad_gemm(struct gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d);
gcc_status gcc_grad_matmul(struct gcc_grad_ctx *c, int node, const int *dy, int *dx,
                           gcc_diag *d);
gcc_status gcc_grad_add(struct gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d);
gcc_status gcc_grad_relu(struct gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d);
gcc_status gcc_grad_identity(struct gcc_grad_ctx *c, int node, const int *dy, int *dx,
                             gcc_diag *d);
gcc_status gcc_grad_reshape(struct gcc_grad_ctx *c, int node, const int *dy, int *dx,
                            gcc_diag *d);
gcc_status gcc_grad_sce(struct gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d);
gcc_status gcc_grad_softmax(struct gcc_grad_ctx *c, int node, const int *dy, int *dx,
                            gcc_diag *d);
gcc_status gcc_grad_mse(struct gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d);
/* Conv: dX = ConvGradData(dY, W), dW = ConvGradFilter(dY, X), dB = ConvGradBias(dY). */
gcc_status gcc_grad_conv(struct gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d);
/* MaxPool: dX = MaxPoolGrad(dY, X, Y) (the CPU recomputes the argmax from X;
 * cuDNN's pooling backward reads Y too). */
gcc_status gcc_grad_max_pool(struct gcc_grad_ctx *c, int node, const int *dy, int *dx,
                             gcc_diag *d);
/* AveragePool: dX = AveragePoolGrad(dY). */
gcc_status gcc_grad_average_pool(struct gcc_grad_ctx *c, int node, const int *dy, int *dx,
                                 gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_PASSES_GRAD_RULES_H */
