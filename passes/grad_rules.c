/*
 * grad_rules.c - the gradient table and the backward of each differentiable
 * op, expressed with ops of the same enum so that every backward node has
 * a kernel of its own on each backend.
 */
#include "passes/grad_rules.h"

#include <stdio.h>
#include <string.h>

#include "passes/autodiff.h"

static const char *node_name(gcc_grad_ctx *c, int node) {
  return gcc_grad_graph(c)->nodes[node].name;
}

/* One-output backward node with inputs `in`; returns its output in *out. */
static gcc_status emit(gcc_grad_ctx *c, int op, int fwd, const char *what, const int *in, int n_in,
                       int *node, int *out, gcc_diag *d) {
  char hint[512];
  snprintf(hint, sizeof hint, "%s/%s", node_name(c, fwd), what);
  return gcc_grad_add_node(c, op, hint, in, n_in, node, out, d);
}

/* dY summed down to the shape of value `target` (broadcast reduction), or
 * dY itself when the shapes already agree and scale == 1. */
static gcc_status sum_to(gcc_grad_ctx *c, int fwd, const char *what, int dy, int target,
                         float scale, int *out, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  if (scale == 1.0f && gcc_shape_equal(&g->values[dy].shape, &g->values[target].shape)) {
    *out = dy;
    return GCC_OK;
  }
  int node;
  GCC_TRY(emit(c, GCC_OP_REDUCE_SUM_TO, fwd, what, &dy, 1, &node, out, d));
  g = gcc_grad_graph(c);
  const gcc_shape *ts = &g->values[target].shape;
  GCC_TRY(gcc_node_set_ints(g, node, "shape", ts->dims, ts->ndim));
  if (scale != 1.0f)
    GCC_TRY(gcc_node_set_float(g, node, "scale", scale));
  return gcc_grad_finish(c, node, d);
}

static gcc_status gemm_node(gcc_grad_ctx *c, int fwd, const char *what, int a, int b, int ta,
                            int tb, float alpha, int *out, gcc_diag *d) {
  int in[2] = {a, b}, node;
  GCC_TRY(emit(c, GCC_OP_GEMM, fwd, what, in, 2, &node, out, d));
  gcc_graph *g = gcc_grad_graph(c);
  if (ta)
    GCC_TRY(gcc_node_set_int(g, node, "transA", 1));
  if (tb)
    GCC_TRY(gcc_node_set_int(g, node, "transB", 1));
  if (alpha != 1.0f)
    GCC_TRY(gcc_node_set_float(g, node, "alpha", alpha));
  return gcc_grad_finish(c, node, d);
}

/* Y = alpha op(A) op(B) + beta C. With G = dY:
 *   dA = alpha G op(B)^T      (transposed back when transA)
 *   dB = alpha op(A)^T G      (transposed back when transB)
 *   dC = beta sum_to(G, shape(C))
 * Each case below is one Gemm whose transposes realise the formula without
 * materialising a transpose. */
gcc_status gcc_grad_gemm(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  const gcc_node *n = &g->nodes[node];
  int A = n->inputs[0], B = n->inputs[1], C = n->n_inputs > 2 ? n->inputs[2] : -1;
  int ta = (int)n->av[GEMM_TRANS_A].i, tb = (int)n->av[GEMM_TRANS_B].i;
  float alpha = n->av[GEMM_ALPHA].f, beta = n->av[GEMM_BETA].f;
  int G = dy[0];
  if (G < 0)
    return GCC_OK;
  if (gcc_grad_wanted(c, A)) {
    if (!ta) /* dA[M,K] = G[M,N] op(B)^T */
      GCC_TRY(gemm_node(c, node, "dA", G, B, 0, !tb, alpha, &dx[0], d));
    else /* A[K,M]: dA = op(B) G^T */
      GCC_TRY(gemm_node(c, node, "dA", B, G, tb, 1, alpha, &dx[0], d));
  }
  if (gcc_grad_wanted(c, B)) {
    if (!tb) /* dB[K,N] = op(A)^T G */
      GCC_TRY(gemm_node(c, node, "dB", A, G, !ta, 0, alpha, &dx[1], d));
    else /* B[N,K]: dB = G^T op(A) */
      GCC_TRY(gemm_node(c, node, "dB", G, A, 1, ta, alpha, &dx[1], d));
  }
  if (C >= 0 && gcc_grad_wanted(c, C))
    GCC_TRY(sum_to(c, node, "dC", G, C, beta, &dx[2], d));
  return GCC_OK;
}

/* Y = A B: dA = G B^T, dB = A^T G. */
gcc_status gcc_grad_matmul(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int A = g->nodes[node].inputs[0], B = g->nodes[node].inputs[1], G = dy[0];
  if (G < 0)
    return GCC_OK;
  if (gcc_grad_wanted(c, A))
    GCC_TRY(gemm_node(c, node, "dA", G, B, 0, 1, 1.0f, &dx[0], d));
  if (gcc_grad_wanted(c, B))
    GCC_TRY(gemm_node(c, node, "dB", A, G, 1, 0, 1.0f, &dx[1], d));
  return GCC_OK;
}

/* Y = A + B (broadcast): dA = sum_to(G, A), dB = sum_to(G, B). */
gcc_status gcc_grad_add(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int A = g->nodes[node].inputs[0], B = g->nodes[node].inputs[1], G = dy[0];
  if (G < 0)
    return GCC_OK;
  if (gcc_grad_wanted(c, A))
    GCC_TRY(sum_to(c, node, "dA", G, A, 1.0f, &dx[0], d));
  if (gcc_grad_wanted(c, B))
    GCC_TRY(sum_to(c, node, "dB", G, B, 1.0f, &dx[1], d));
  return GCC_OK;
}

/* Y = max(X, 0): dX = G * (Y > 0); PyTorch's threshold_backward on the
 * result, so the mask is read from Y and X may be freed early. */
gcc_status gcc_grad_relu(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0], Y = g->nodes[node].outputs[0];
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  int in[2] = {dy[0], Y}, n2;
  GCC_TRY(emit(c, GCC_OP_RELU_GRAD, node, "dX", in, 2, &n2, &dx[0], d));
  return gcc_grad_finish(c, n2, d);
}

gcc_status gcc_grad_identity(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  (void)d;
  gcc_graph *g = gcc_grad_graph(c);
  if (dy[0] >= 0 && gcc_grad_wanted(c, g->nodes[node].inputs[0]))
    dx[0] = dy[0];
  return GCC_OK;
}

/* Reshape and Flatten: the gradient is G viewed with X's shape. */
gcc_status gcc_grad_reshape(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0];
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  int n2;
  GCC_TRY(emit(c, GCC_OP_RESHAPE, node, "dX", &dy[0], 1, &n2, &dx[0], d));
  g = gcc_grad_graph(c);
  const gcc_shape *xs = &g->values[X].shape;
  GCC_TRY(gcc_node_set_ints(g, n2, "shape", xs->dims, xs->ndim));
  return gcc_grad_finish(c, n2, d);
}

static gcc_status copy_attrs(gcc_graph *g, int from, int to) {
  const gcc_node *f = &g->nodes[from];
  for (int k = 0; k < f->n_av; k++) {
    const gcc_attr a = g->nodes[from].av[k];
    gcc_status s = GCC_OK;
    if (a.type == GCC_ATTR_STRING)
      s = gcc_node_set_string(g, to, a.name, a.s);
    else if (a.type == GCC_ATTR_INT)
      s = gcc_node_set_int(g, to, a.name, a.i);
    else if (a.type == GCC_ATTR_FLOAT)
      s = gcc_node_set_float(g, to, a.name, a.f);
    if (s != GCC_OK)
      return s;
  }
  return GCC_OK;
}

static gcc_status no_target_grad(gcc_grad_ctx *c, int node, int target, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  if (!gcc_grad_wanted(c, target))
    return GCC_OK;
  char desc[600];
  return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                      "%s: %s: the gradient with respect to its target/labels input '%s' "
                      "is not supported (targets must not depend on parameters)",
                      g->source, gcc_node_desc(g, node, desc, sizeof desc), g->values[target].name);
}

/* CrossEntropyLoss: dlogits = SoftmaxCrossEntropyGrad(dL, logits, labels, w). */
gcc_status gcc_grad_sce(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  const gcc_node *n = &g->nodes[node];
  int X = n->inputs[0];
  GCC_TRY(no_target_grad(c, node, n->inputs[1], d));
  if (n->n_inputs > 2 && n->inputs[2] >= 0 && gcc_grad_wanted(c, n->inputs[2]))
    GCC_TRY(no_target_grad(c, node, n->inputs[2], d));
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  int in[4] = {dy[0], X, n->inputs[1], n->n_inputs > 2 ? n->inputs[2] : -1};
  int n_in = n->n_inputs > 2 ? 4 : 3, n2;
  GCC_TRY(emit(c, GCC_OP_SOFTMAX_CROSS_ENTROPY_GRAD, node, "dlogits", in, n_in, &n2, &dx[0], d));
  g = gcc_grad_graph(c);
  GCC_TRY(copy_attrs(g, node, n2));
  return gcc_grad_finish(c, n2, d);
}

/* Y = softmax(X): dX = SoftmaxGrad(dY, Y) = Y * (dY - sum(dY * Y)) along
 * the same axis (read from Y, so X may be freed early). */
gcc_status gcc_grad_softmax(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0], Y = g->nodes[node].outputs[0];
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  int in[2] = {dy[0], Y}, n2;
  GCC_TRY(emit(c, GCC_OP_SOFTMAX_GRAD, node, "dX", in, 2, &n2, &dx[0], d));
  g = gcc_grad_graph(c);
  GCC_TRY(copy_attrs(g, node, n2));
  return gcc_grad_finish(c, n2, d);
}

/* MSELoss: dpred = MeanSquaredErrorGrad(dL, pred, target). */
gcc_status gcc_grad_mse(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  const gcc_node *n = &g->nodes[node];
  int P = n->inputs[0], T = n->inputs[1];
  GCC_TRY(no_target_grad(c, node, T, d));
  if (dy[0] < 0 || !gcc_grad_wanted(c, P))
    return GCC_OK;
  int in[3] = {dy[0], P, T}, n2;
  GCC_TRY(emit(c, GCC_OP_MEAN_SQUARED_ERROR_GRAD, node, "dpred", in, 3, &n2, &dx[0], d));
  g = gcc_grad_graph(c);
  GCC_TRY(copy_attrs(g, node, n2));
  return gcc_grad_finish(c, n2, d);
}

/* Copies the resolved window attributes (ints and int lists that were set
 * or defaulted) of forward node `from` to backward node `to`. */
static gcc_status copy_window_attrs(gcc_graph *g, int from, int to) {
  int n_av = g->nodes[from].n_av;
  for (int k = 0; k < n_av; k++) {
    gcc_attr a = g->nodes[from].av[k];
    gcc_status s = GCC_OK;
    if (a.type == GCC_ATTR_INTS && a.n_ints > 0)
      s = gcc_node_set_ints(g, to, a.name, a.ints, a.n_ints);
    else if (a.type == GCC_ATTR_INT)
      s = gcc_node_set_int(g, to, a.name, a.i);
    if (s != GCC_OK)
      return s;
  }
  return GCC_OK;
}

static gcc_status set_shape_attr(gcc_graph *g, int node, const char *name, int value) {
  const gcc_shape *s = &g->values[value].shape;
  return gcc_node_set_ints(g, node, name, s->dims, s->ndim);
}

/* Y = conv(X, W) + B (cross-correlation, as PyTorch and ONNX):
 *   dX = the transposed convolution of dY with W (ConvGradData),
 *   dW = the correlation of X with dY (ConvGradFilter),
 *   dB = dY summed over N, H, W (ConvGradBias). */
gcc_status gcc_grad_conv(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  const gcc_node *n = &g->nodes[node];
  int X = n->inputs[0], W = n->inputs[1], B = n->n_inputs > 2 ? n->inputs[2] : -1, G = dy[0];
  if (G < 0)
    return GCC_OK;
  if (gcc_grad_wanted(c, X)) {
    int in[2] = {G, W}, n2;
    GCC_TRY(emit(c, GCC_OP_CONV_GRAD_DATA, node, "dX", in, 2, &n2, &dx[0], d));
    g = gcc_grad_graph(c);
    GCC_TRY(copy_window_attrs(g, node, n2));
    GCC_TRY(set_shape_attr(g, n2, "input_shape", X));
    GCC_TRY(gcc_grad_finish(c, n2, d));
  }
  if (gcc_grad_wanted(c, W)) {
    int in[2] = {G, X}, n2;
    GCC_TRY(emit(c, GCC_OP_CONV_GRAD_FILTER, node, "dW", in, 2, &n2, &dx[1], d));
    g = gcc_grad_graph(c);
    GCC_TRY(copy_window_attrs(g, node, n2));
    GCC_TRY(set_shape_attr(g, n2, "filter_shape", W));
    GCC_TRY(gcc_grad_finish(c, n2, d));
  }
  if (B >= 0 && gcc_grad_wanted(c, B)) {
    int n2;
    GCC_TRY(emit(c, GCC_OP_CONV_GRAD_BIAS, node, "dB", &G, 1, &n2, &dx[2], d));
    GCC_TRY(gcc_grad_finish(c, n2, d));
  }
  return GCC_OK;
}

gcc_status gcc_grad_max_pool(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0];
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  int in[3] = {dy[0], X, g->nodes[node].outputs[0]}, n2;
  GCC_TRY(emit(c, GCC_OP_MAX_POOL_GRAD, node, "dX", in, 3, &n2, &dx[0], d));
  g = gcc_grad_graph(c);
  GCC_TRY(copy_window_attrs(g, node, n2));
  return gcc_grad_finish(c, n2, d);
}

gcc_status gcc_grad_average_pool(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0];
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  int n2;
  GCC_TRY(emit(c, GCC_OP_AVERAGE_POOL_GRAD, node, "dX", &dy[0], 1, &n2, &dx[0], d));
  g = gcc_grad_graph(c);
  GCC_TRY(copy_window_attrs(g, node, n2));
  GCC_TRY(set_shape_attr(g, n2, "input_shape", X));
  return gcc_grad_finish(c, n2, d);
}

/* ---- the table -------------------------------------------------------- */

#define NO_GRAD_INTERNAL "an internal gradient op: no second derivatives"
#define NO_GRAD_IMPORT   "forward only (ONNX import, issue 14): training imported models is issue 15"

_Static_assert(GCC_OP_COUNT == 41, "a new op: add its gradient rule to kGradRules");

static const gcc_grad_rule kGradRules[GCC_OP_COUNT] = {
    [GCC_OP_GEMM] = {.fn = gcc_grad_gemm},
    [GCC_OP_MATMUL] = {.fn = gcc_grad_matmul},
    [GCC_OP_ADD] = {.fn = gcc_grad_add},
    [GCC_OP_RELU] = {.fn = gcc_grad_relu},
    [GCC_OP_RELU_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_IDENTITY] = {.fn = gcc_grad_identity},
    [GCC_OP_RESHAPE] = {.fn = gcc_grad_reshape},
    [GCC_OP_FLATTEN] = {.fn = gcc_grad_reshape},
    [GCC_OP_REDUCE_SUM_TO] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_SOFTMAX_CROSS_ENTROPY] = {.fn = gcc_grad_sce},
    [GCC_OP_SOFTMAX_CROSS_ENTROPY_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_MEAN_SQUARED_ERROR] = {.fn = gcc_grad_mse},
    [GCC_OP_MEAN_SQUARED_ERROR_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_SGD] = {.none = "an optimizer update: runs after the backward"},
    [GCC_OP_ADAM] = {.none = "an optimizer update: runs after the backward"},
    [GCC_OP_COPY] = {.none = "made by copy insertion, after autodiff"},
    [GCC_OP_SOFTMAX] = {.fn = gcc_grad_softmax},
    [GCC_OP_SOFTMAX_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_CONV] = {.fn = gcc_grad_conv},
    [GCC_OP_CONV_GRAD_DATA] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_CONV_GRAD_FILTER] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_CONV_GRAD_BIAS] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_MAX_POOL] = {.fn = gcc_grad_max_pool},
    [GCC_OP_MAX_POOL_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_AVERAGE_POOL] = {.fn = gcc_grad_average_pool},
    [GCC_OP_AVERAGE_POOL_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_SUB] = {.none = NO_GRAD_IMPORT},
    [GCC_OP_MUL] = {.none = NO_GRAD_IMPORT},
    [GCC_OP_DIV] = {.none = NO_GRAD_IMPORT},
    [GCC_OP_SIGMOID] = {.none = NO_GRAD_IMPORT},
    [GCC_OP_TANH] = {.none = NO_GRAD_IMPORT},
    [GCC_OP_SQRT] = {.none = NO_GRAD_IMPORT},
    [GCC_OP_LEAKY_RELU] = {.none = NO_GRAD_IMPORT},
    [GCC_OP_CLIP] = {.none = NO_GRAD_IMPORT},
    [GCC_OP_LOG_SOFTMAX] = {.none = NO_GRAD_IMPORT},
    [GCC_OP_LRN] = {.none = NO_GRAD_IMPORT},
    [GCC_OP_CONCAT] = {.none = NO_GRAD_IMPORT},
    [GCC_OP_TRANSPOSE] = {.none = NO_GRAD_IMPORT},
    [GCC_OP_PAD] = {.none = NO_GRAD_IMPORT},
    [GCC_OP_CONV_TRANSPOSE] = {.none = NO_GRAD_IMPORT},
    [GCC_OP_ALL_REDUCE] = {.none = "a collective over gradients, made after autodiff"},
};

const gcc_grad_rule *gcc_grad_rule_of(int op) {
  if (op < 0 || op >= GCC_OP_COUNT)
    return NULL;
  return &kGradRules[op];
}
