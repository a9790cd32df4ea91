/*
 * grad_rules.h - the gradient table: per op of graph/ops.h its gradient
 * rule (a builder that adds the backward nodes through the autodiff
 * context, passes/autodiff.h) or the reason it has none.
 */
#ifndef GCC_PASSES_GRAD_RULES_H
#define GCC_PASSES_GRAD_RULES_H

#include "graph/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gcc_grad_ctx;

/* Builds the backward nodes of `node`. dy[k] is the gradient value of
 * output k (-1 if no gradient flows into it). For every input k with
 * gcc_grad_wanted(ctx, input), sets dx[k] to the value holding the
 * gradient contribution (or -1). See passes/autodiff.h. */
typedef gcc_status (*gcc_grad_fn)(struct gcc_grad_ctx *ctx, int node, const int *dy, int *dx,
                                  gcc_diag *d);

/* One entry of the table: exactly one of the two is set. */
/* Puts forward node `node` in its training form before the backward is
 * built (autodiff, TRAIN mode only): BatchNormalization normalises with the
 * batch's statistics and updates its running estimates; Dropout draws its
 * masks (its key from the training spec's seed). */
typedef gcc_status (*gcc_train_fn)(gcc_graph *g, int node, gcc_diag *d);

typedef struct gcc_grad_rule {
  gcc_grad_fn fn;     /* the builder */
  const char *none;   /* no gradient (it stops here), and why */
  gcc_train_fn train; /* optional: the op behaves differently in training */
  /* with `train`: puts the node in its evaluation form (autodiff, every
   * other mode), whatever the graph's builder set: evaluation never updates
   * state such as BatchNormalization's running statistics */
  gcc_train_fn eval;
  /* with `eval`: in its evaluation form the node's one output is its input
   * 0 (Dropout): autodiff removes the node and its readers read the input,
   * as ONNX Runtime's Dropout elimination does, unless the output is a
   * graph output or the training spec's loss or prediction */
  unsigned char eval_identity;
} gcc_grad_rule;

/* The entry of op `op`; NULL when `op` is out of range. */
const gcc_grad_rule *gcc_grad_rule_of(int op);

gcc_status gcc_grad_gemm(struct gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d);
gcc_status gcc_grad_matmul(struct gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d);
gcc_status gcc_grad_add(struct gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d);
gcc_status gcc_grad_relu(struct gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d);
gcc_status gcc_grad_identity(struct gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d);
gcc_status gcc_grad_reshape(struct gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d);
gcc_status gcc_grad_sce(struct gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d);
gcc_status gcc_grad_softmax(struct gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d);
gcc_status gcc_grad_mse(struct gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d);
/* Conv: dX = ConvGradData(dY, W), dW = ConvGradFilter(dY, X), dB = ConvGradBias(dY). */
gcc_status gcc_grad_conv(struct gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d);
/* MaxPool: dX = MaxPoolGrad(dY, X, Y) (the CPU recomputes the argmax from X;
 * cuDNN's pooling backward reads Y too). */
gcc_status gcc_grad_max_pool(struct gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d);
/* AveragePool: dX = AveragePoolGrad(dY). */
gcc_status gcc_grad_average_pool(struct gcc_grad_ctx *c, int node, const int *dy, int *dx,
                                 gcc_diag *d);
/* The import set (issue 15): Sub, Mul, Div (broadcast, reduced by
 * ReduceSumTo), Sigmoid, Tanh, Sqrt, LeakyRelu, Clip, LogSoftmax, LRN (their
 * *Grad ops), Concat and Pad (constant mode: a cropping Pad), Transpose (the
 * inverse permutation), ConvTranspose (Conv, ConvGradFilter, ConvGradBias). */
#define GCC_GRAD_DECL(name)                                                                        \
  gcc_status gcc_grad_##name(struct gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d);
GCC_GRAD_DECL(sub)
GCC_GRAD_DECL(mul)
GCC_GRAD_DECL(div)
GCC_GRAD_DECL(sigmoid)
GCC_GRAD_DECL(tanh)
GCC_GRAD_DECL(sqrt)
GCC_GRAD_DECL(leaky_relu)
GCC_GRAD_DECL(clip)
GCC_GRAD_DECL(log_softmax)
GCC_GRAD_DECL(lrn)
GCC_GRAD_DECL(concat)
GCC_GRAD_DECL(transpose)
GCC_GRAD_DECL(pad)
GCC_GRAD_DECL(conv_transpose)
/* BatchNormalization (training form): dX, dscale, dB by BatchNormGrad(dY, X,
 * scale) with output = 0, 1, 2; the running mean and var get none. */
GCC_GRAD_DECL(batch_norm)
/* LayerNormalization: dX, dScale, dB by LayerNormGrad(dY, X, Scale) with
 * output = 0, 1, 2; no gradient through Mean and InvStdDev (an error). */
GCC_GRAD_DECL(layer_norm)
/* Dropout (training form): dX = DropoutGrad(dY) with the node's ratio and key;
 * the identity in evaluation form. */
GCC_GRAD_DECL(dropout)
/* Attention: dQ, dK, dV by one AttentionGrad(Q, K, V, O, L, dO [, mask]). */
GCC_GRAD_DECL(attention)
#undef GCC_GRAD_DECL

#ifdef __cplusplus
}
#endif

#endif /* GCC_PASSES_GRAD_RULES_H */
