/*
 * grad_rules.c - the gradient table and the backward of each differentiable
 * op, expressed with ops of the same enum so that every backward node has
 * a kernel of its own on each backend.
 */
#include "passes/grad_rules.h"

#include <stdio.h>
#include <string.h>

#include "graph/philox.h"
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

/* Value v viewed with `ndim` dims `dims` (a Reshape node). */
static gcc_status reshape_to(gcc_grad_ctx *c, int fwd, const char *what, int v, const int64_t *dims,
                             int ndim, int *out, gcc_diag *d) {
  int node;
  GCC_TRY(emit(c, GCC_OP_RESHAPE, fwd, what, &v, 1, &node, out, d));
  GCC_TRY(gcc_node_set_ints(gcc_grad_graph(c), node, "shape", dims, ndim));
  return gcc_grad_finish(c, node, d);
}

/* Value v with its last two dims swapped (a Transpose node). */
static gcc_status swap_last2(gcc_grad_ctx *c, int fwd, const char *what, int v, int *out,
                             gcc_diag *d) {
  int ndim = gcc_grad_graph(c)->values[v].shape.ndim, node;
  int64_t perm[GCC_MAX_DIMS];
  for (int i = 0; i < ndim; i++)
    perm[i] = i;
  perm[ndim - 2] = ndim - 1;
  perm[ndim - 1] = ndim - 2;
  GCC_TRY(emit(c, GCC_OP_TRANSPOSE, fwd, what, &v, 1, &node, out, d));
  GCC_TRY(gcc_node_set_ints(gcc_grad_graph(c), node, "perm", perm, ndim));
  return gcc_grad_finish(c, node, d);
}

static gcc_status matmul_node(gcc_grad_ctx *c, int fwd, const char *what, int a, int b, int *out,
                              gcc_diag *d) {
  int in[2] = {a, b}, node;
  GCC_TRY(emit(c, GCC_OP_MATMUL, fwd, what, in, 2, &node, out, d));
  return gcc_grad_finish(c, node, d);
}

/* Y = A B (numpy.matmul), G = dY:
 *   A [M,K], B [K,N]: dA = G B^T, dB = A^T G, one Gemm each;
 *   A [...,M,K], B [K,N] (the Linear layer of a Transformer): the batch dims
 *     fold into the rows: G2 = G as [-1,N], dA = (G2 B^T) viewed as A,
 *     dB = A2^T G2 with A2 = A as [-1,K] -- Gemms only, the batch sum inside
 *     the GEMM reduction;
 *   otherwise (batch dims on B, or on both, broadcast): dA =
 *     sum_to(G B^T, shape(A)), dB = sum_to(A^T G, shape(B)) with batched
 *     MatMuls of the last-two-dims transposes, the sum over broadcast batch
 *     dims by ReduceSumTo (torch.matmul's backward).
 * 1-D operands (promoted by numpy.matmul) are not supported: a clear error. */
gcc_status gcc_grad_matmul(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int A = g->nodes[node].inputs[0], B = g->nodes[node].inputs[1], G = dy[0];
  if (G < 0)
    return GCC_OK;
  int wa = gcc_grad_wanted(c, A), wb = gcc_grad_wanted(c, B);
  if (!wa && !wb)
    return GCC_OK;
  const gcc_shape sa = g->values[A].shape, sb = g->values[B].shape;
  if (sa.ndim < 2 || sb.ndim < 2) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: %s: the gradient of a MatMul with a 1-D operand is not supported "
                        "(reshape the vector to a 1-row or 1-column matrix)",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc));
  }
  if (sa.ndim == 2 && sb.ndim == 2) {
    if (wa)
      GCC_TRY(gemm_node(c, node, "dA", G, B, 0, 1, 1.0f, &dx[0], d));
    if (wb)
      GCC_TRY(gemm_node(c, node, "dB", A, G, 1, 0, 1.0f, &dx[1], d));
    return GCC_OK;
  }
  if (sb.ndim == 2) {
    const int64_t K = sb.dims[0], N = sb.dims[1];
    const int64_t g2d[2] = {-1, N}, a2d[2] = {-1, K};
    int G2, t;
    GCC_TRY(reshape_to(c, node, "dY_rows", G, g2d, 2, &G2, d));
    if (wa) {
      GCC_TRY(gemm_node(c, node, "dA_rows", G2, B, 0, 1, 1.0f, &t, d));
      GCC_TRY(reshape_to(c, node, "dA", t, sa.dims, sa.ndim, &dx[0], d));
    }
    if (wb) {
      int A2;
      GCC_TRY(reshape_to(c, node, "A_rows", A, a2d, 2, &A2, d));
      GCC_TRY(gemm_node(c, node, "dB", A2, G2, 1, 0, 1.0f, &dx[1], d));
    }
    return GCC_OK;
  }
  if (wa) {
    int Bt, t;
    GCC_TRY(swap_last2(c, node, "B_T", B, &Bt, d));
    GCC_TRY(matmul_node(c, node, "dA_full", G, Bt, &t, d));
    GCC_TRY(sum_to(c, node, "dA", t, A, 1.0f, &dx[0], d));
  }
  if (wb) {
    int At, t;
    GCC_TRY(swap_last2(c, node, "A_T", A, &At, d));
    GCC_TRY(matmul_node(c, node, "dB_full", At, G, &t, d));
    GCC_TRY(sum_to(c, node, "dB", t, B, 1.0f, &dx[1], d));
  }
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

/* ---- ops of the ONNX import set (issue 15) ----------------------------- */

/* One-output binary node op(a, b) (Mul, Div: broadcast, so its output has
 * G's shape when G is the forward output's gradient). */
static gcc_status binary(gcc_grad_ctx *c, int op, int fwd, const char *what, int a, int b, int *out,
                         gcc_diag *d) {
  int in[2] = {a, b}, n2;
  GCC_TRY(emit(c, op, fwd, what, in, 2, &n2, out, d));
  return gcc_grad_finish(c, n2, d);
}

/* Y = A - B (broadcast): dA = sum_to(G, A), dB = -sum_to(G, B). */
gcc_status gcc_grad_sub(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int A = g->nodes[node].inputs[0], B = g->nodes[node].inputs[1], G = dy[0];
  if (G < 0)
    return GCC_OK;
  if (gcc_grad_wanted(c, A))
    GCC_TRY(sum_to(c, node, "dA", G, A, 1.0f, &dx[0], d));
  if (gcc_grad_wanted(c, B))
    GCC_TRY(sum_to(c, node, "dB", G, B, -1.0f, &dx[1], d));
  return GCC_OK;
}

/* Y = A * B (broadcast): dA = sum_to(G * B, A), dB = sum_to(G * A, B). */
gcc_status gcc_grad_mul(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int A = g->nodes[node].inputs[0], B = g->nodes[node].inputs[1], G = dy[0], t;
  if (G < 0)
    return GCC_OK;
  if (gcc_grad_wanted(c, A)) {
    GCC_TRY(binary(c, GCC_OP_MUL, node, "dA_full", G, B, &t, d));
    GCC_TRY(sum_to(c, node, "dA", t, A, 1.0f, &dx[0], d));
  }
  if (gcc_grad_wanted(c, B)) {
    GCC_TRY(binary(c, GCC_OP_MUL, node, "dB_full", G, A, &t, d));
    GCC_TRY(sum_to(c, node, "dB", t, B, 1.0f, &dx[1], d));
  }
  return GCC_OK;
}

/* Y = A / B (broadcast): dA = sum_to(G / B, A), dB = -sum_to(G * Y / B, B)
 * (= -G A / B^2, read from Y as PyTorch's div backward does). */
gcc_status gcc_grad_div(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int A = g->nodes[node].inputs[0], B = g->nodes[node].inputs[1], Y = g->nodes[node].outputs[0];
  int G = dy[0], t, t2;
  if (G < 0)
    return GCC_OK;
  if (gcc_grad_wanted(c, A)) {
    GCC_TRY(binary(c, GCC_OP_DIV, node, "dA_full", G, B, &t, d));
    GCC_TRY(sum_to(c, node, "dA", t, A, 1.0f, &dx[0], d));
  }
  if (gcc_grad_wanted(c, B)) {
    GCC_TRY(binary(c, GCC_OP_MUL, node, "dB_gy", G, Y, &t, d));
    GCC_TRY(binary(c, GCC_OP_DIV, node, "dB_full", t, B, &t2, d));
    GCC_TRY(sum_to(c, node, "dB", t2, B, -1.0f, &dx[1], d));
  }
  return GCC_OK;
}

/* dX = op(G, Y or X) with the forward's attributes: the pointwise and row
 * gradients of Sigmoid, Tanh, Sqrt (from Y), LeakyRelu, Clip (from X),
 * LogSoftmax (from Y). */
static gcc_status unary_grad(gcc_grad_ctx *c, int node, const int *dy, int *dx, int op, int from_y,
                             gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0], Y = g->nodes[node].outputs[0];
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  int in[2] = {dy[0], from_y ? Y : X}, n2;
  GCC_TRY(emit(c, op, node, "dX", in, 2, &n2, &dx[0], d));
  g = gcc_grad_graph(c);
  GCC_TRY(copy_attrs(g, node, n2));
  return gcc_grad_finish(c, n2, d);
}

gcc_status gcc_grad_sigmoid(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  return unary_grad(c, node, dy, dx, GCC_OP_SIGMOID_GRAD, 1, d);
}

gcc_status gcc_grad_tanh(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  return unary_grad(c, node, dy, dx, GCC_OP_TANH_GRAD, 1, d);
}

gcc_status gcc_grad_sqrt(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  return unary_grad(c, node, dy, dx, GCC_OP_SQRT_GRAD, 1, d);
}

gcc_status gcc_grad_leaky_relu(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  return unary_grad(c, node, dy, dx, GCC_OP_LEAKY_RELU_GRAD, 0, d);
}

gcc_status gcc_grad_clip(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  return unary_grad(c, node, dy, dx, GCC_OP_CLIP_GRAD, 0, d);
}

gcc_status gcc_grad_log_softmax(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  return unary_grad(c, node, dy, dx, GCC_OP_LOG_SOFTMAX_GRAD, 1, d);
}

/* Gelu: dX = GeluGrad(G, X) with the forward's `approximate`. */
static gcc_status gcc_grad_gelu(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  return unary_grad(c, node, dy, dx, GCC_OP_GELU_GRAD, 0, d);
}

/* Erf: dX = ErfGrad(G, X) = G 2 / sqrt(pi) exp(-X^2). */
static gcc_status gcc_grad_erf(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  return unary_grad(c, node, dy, dx, GCC_OP_ERF_GRAD, 0, d);
}

/* Exp: dX = G * Y (PyTorch: grad * result). */
static gcc_status gcc_grad_exp(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0], Y = g->nodes[node].outputs[0];
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  return binary(c, GCC_OP_MUL, node, "dX", dy[0], Y, &dx[0], d);
}

/* Log: dX = G / X. */
static gcc_status gcc_grad_log(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0];
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  return binary(c, GCC_OP_DIV, node, "dX", dy[0], X, &dx[0], d);
}

/* Neg: dX = -G. */
static gcc_status gcc_grad_neg(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0], n2;
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  GCC_TRY(emit(c, GCC_OP_NEG, node, "dX", &dy[0], 1, &n2, &dx[0], d));
  return gcc_grad_finish(c, n2, d);
}

/* Abs: dX = AbsGrad(G, X) = G sgn(X). */
static gcc_status gcc_grad_abs(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  return unary_grad(c, node, dy, dx, GCC_OP_ABS_GRAD, 0, d);
}

/* Elu, Selu, Celu, Softplus, Softsign, ThresholdedRelu: dX = <Op>Grad(G, X)
 * (the attributes copied). */
static gcc_status gcc_grad_elu(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  return unary_grad(c, node, dy, dx, GCC_OP_ELU_GRAD, 0, d);
}
static gcc_status gcc_grad_selu(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  return unary_grad(c, node, dy, dx, GCC_OP_SELU_GRAD, 0, d);
}
static gcc_status gcc_grad_celu(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  return unary_grad(c, node, dy, dx, GCC_OP_CELU_GRAD, 0, d);
}
static gcc_status gcc_grad_softplus(gcc_grad_ctx *c, int node, const int *dy, int *dx,
                                    gcc_diag *d) {
  return unary_grad(c, node, dy, dx, GCC_OP_SOFTPLUS_GRAD, 0, d);
}
static gcc_status gcc_grad_softsign(gcc_grad_ctx *c, int node, const int *dy, int *dx,
                                    gcc_diag *d) {
  return unary_grad(c, node, dy, dx, GCC_OP_SOFTSIGN_GRAD, 0, d);
}
static gcc_status gcc_grad_thresholded_relu(gcc_grad_ctx *c, int node, const int *dy, int *dx,
                                            gcc_diag *d) {
  return unary_grad(c, node, dy, dx, GCC_OP_THRESHOLDED_RELU_GRAD, 0, d);
}

/* Sin: dX = G cos(X); Cos: dX = G (-sin(X)). */
static gcc_status sin_cos_grad(gcc_grad_ctx *c, int node, const int *dy, int *dx, int is_cos,
                               gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0], t, t2, n2;
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  GCC_TRY(emit(c, is_cos ? GCC_OP_SIN : GCC_OP_COS, node, "dX_d", &X, 1, &n2, &t, d));
  GCC_TRY(gcc_grad_finish(c, n2, d));
  if (is_cos) {
    GCC_TRY(emit(c, GCC_OP_NEG, node, "dX_neg", &t, 1, &n2, &t2, d));
    GCC_TRY(gcc_grad_finish(c, n2, d));
    t = t2;
  }
  return binary(c, GCC_OP_MUL, node, "dX", dy[0], t, &dx[0], d);
}
static gcc_status gcc_grad_sin(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  return sin_cos_grad(c, node, dy, dx, 0, d);
}
static gcc_status gcc_grad_cos(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  return sin_cos_grad(c, node, dy, dx, 1, d);
}

/* Z = Where(cond, X, Y): dX = sum_to(WhereGradX(cond, G), X), dY =
 * sum_to(WhereGradY(cond, G), Y) (torch's where backward: the gradient
 * goes to the branch each element was taken from, summed over the
 * broadcast dims as Add's); the condition gets none (bool). */
static gcc_status gcc_grad_where(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int C = g->nodes[node].inputs[0], G = dy[0], t, n2;
  if (G < 0)
    return GCC_OK;
  int in[2] = {C, G};
  static const int ops[2] = {GCC_OP_WHERE_GRAD_X, GCC_OP_WHERE_GRAD_Y};
  static const char *const full[2] = {"dX_full", "dY_full"}, *const name[2] = {"dX", "dY"};
  for (int k = 0; k < 2; k++) {
    int V = g->nodes[node].inputs[1 + k];
    if (!gcc_grad_wanted(c, V))
      continue;
    GCC_TRY(emit(c, ops[k], node, full[k], in, 2, &n2, &t, d));
    GCC_TRY(gcc_grad_finish(c, n2, d));
    GCC_TRY(sum_to(c, node, name[k], t, V, 1.0f, &dx[1 + k], d));
    g = gcc_grad_graph(c);
  }
  return GCC_OK;
}

/* Y = PRelu(X, slope): dX = PReluGrad(G, X, slope), dslope =
 * sum_to(PReluGradSlope(G, X, slope), slope) (ReduceSumTo over the
 * broadcast dims: torch's PReLU weight gradient). */
static gcc_status gcc_grad_prelu(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0], S = g->nodes[node].inputs[1], G = dy[0], t, n2;
  if (G < 0)
    return GCC_OK;
  int in[3] = {G, X, S};
  if (gcc_grad_wanted(c, X)) {
    GCC_TRY(emit(c, GCC_OP_PRELU_GRAD, node, "dX", in, 3, &n2, &dx[0], d));
    GCC_TRY(gcc_grad_finish(c, n2, d));
  }
  if (gcc_grad_wanted(c, S)) {
    GCC_TRY(emit(c, GCC_OP_PRELU_GRAD_SLOPE, node, "dslope_full", in, 3, &n2, &t, d));
    GCC_TRY(gcc_grad_finish(c, n2, d));
    GCC_TRY(sum_to(c, node, "dslope", t, S, 1.0f, &dx[1], d));
  }
  return GCC_OK;
}

/* Reciprocal: dX = -G Y^2 (PyTorch: -grad * (result * result).conj()). */
static gcc_status gcc_grad_reciprocal(gcc_grad_ctx *c, int node, const int *dy, int *dx,
                                      gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0], Y = g->nodes[node].outputs[0], t, t2, n2;
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  GCC_TRY(binary(c, GCC_OP_MUL, node, "dX_gy", dy[0], Y, &t, d));
  GCC_TRY(binary(c, GCC_OP_MUL, node, "dX_gyy", t, Y, &t2, d));
  GCC_TRY(emit(c, GCC_OP_NEG, node, "dX", &t2, 1, &n2, &dx[0], d));
  return gcc_grad_finish(c, n2, d);
}

/* Y = A^B (broadcast): dA = sum_to(PowGradBase(G, A, B), A), dB =
 * sum_to(PowGradExponent(G, A, B), B), each only where wanted (a constant
 * exponent gets none). */
static gcc_status gcc_grad_pow(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int A = g->nodes[node].inputs[0], B = g->nodes[node].inputs[1], G = dy[0], t, n2;
  if (G < 0)
    return GCC_OK;
  int in[3] = {G, A, B};
  if (gcc_grad_wanted(c, A)) {
    GCC_TRY(emit(c, GCC_OP_POW_GRAD_BASE, node, "dA_full", in, 3, &n2, &t, d));
    GCC_TRY(gcc_grad_finish(c, n2, d));
    GCC_TRY(sum_to(c, node, "dA", t, A, 1.0f, &dx[0], d));
  }
  if (gcc_grad_wanted(c, B)) {
    GCC_TRY(emit(c, GCC_OP_POW_GRAD_EXPONENT, node, "dB_full", in, 3, &n2, &t, d));
    GCC_TRY(gcc_grad_finish(c, n2, d));
    GCC_TRY(sum_to(c, node, "dB", t, B, 1.0f, &dx[1], d));
  }
  return GCC_OK;
}

/* Y = max(A, B) or min(A, B) (broadcast): dA = sum_to(op(G, A, B), A), dB
 * = sum_to(op(G, B, A), B), op = MaxGrad / MinGrad (the winner gets G,
 * each of a tie G / 2: torch.maximum's backward). */
static gcc_status min_max_grad(gcc_grad_ctx *c, int node, const int *dy, int *dx, int op,
                               gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int A = g->nodes[node].inputs[0], B = g->nodes[node].inputs[1], G = dy[0], t, n2;
  if (G < 0)
    return GCC_OK;
  if (gcc_grad_wanted(c, A)) {
    int in[3] = {G, A, B};
    GCC_TRY(emit(c, op, node, "dA_full", in, 3, &n2, &t, d));
    GCC_TRY(gcc_grad_finish(c, n2, d));
    GCC_TRY(sum_to(c, node, "dA", t, A, 1.0f, &dx[0], d));
  }
  if (gcc_grad_wanted(c, B)) {
    int in[3] = {G, B, A};
    GCC_TRY(emit(c, op, node, "dB_full", in, 3, &n2, &t, d));
    GCC_TRY(gcc_grad_finish(c, n2, d));
    GCC_TRY(sum_to(c, node, "dB", t, B, 1.0f, &dx[1], d));
  }
  return GCC_OK;
}

static gcc_status gcc_grad_max(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  return min_max_grad(c, node, dy, dx, GCC_OP_MAX_GRAD, d);
}

static gcc_status gcc_grad_min(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  return min_max_grad(c, node, dy, dx, GCC_OP_MIN_GRAD, d);
}

/* LRN: dX = LRNGrad(G, X, Y). */
gcc_status gcc_grad_lrn(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0], Y = g->nodes[node].outputs[0];
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  int in[3] = {dy[0], X, Y}, n2;
  GCC_TRY(emit(c, GCC_OP_LRN_GRAD, node, "dX", in, 3, &n2, &dx[0], d));
  g = gcc_grad_graph(c);
  GCC_TRY(copy_attrs(g, node, n2));
  return gcc_grad_finish(c, n2, d);
}

/* G cropped by a constant Pad with pads `pads` (negative: crop). */
static gcc_status crop(gcc_grad_ctx *c, int fwd, const char *what, int G, const int64_t *pads,
                       int n_pads, int *out, gcc_diag *d) {
  int n2;
  GCC_TRY(emit(c, GCC_OP_PAD, fwd, what, &G, 1, &n2, out, d));
  GCC_TRY(gcc_node_set_ints(gcc_grad_graph(c), n2, "pads", pads, n_pads));
  return gcc_grad_finish(c, n2, d);
}

/* Concat along axis: dX_k is G's slab of X_k (a Pad with negative pads
 * cropping the other inputs' slabs away). */
gcc_status gcc_grad_concat(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  const gcc_node *n = &g->nodes[node];
  int n_in = n->n_inputs, G = dy[0];
  if (G < 0)
    return GCC_OK;
  const gcc_shape ys = g->values[n->outputs[0]].shape;
  int r = ys.ndim;
  int64_t axis = n->av[CONCAT_AXIS].i;
  if (axis < 0)
    axis += r;
  int64_t off = 0;
  for (int k = 0; k < n_in; k++) {
    g = gcc_grad_graph(c);
    int X = g->nodes[node].inputs[k];
    int64_t len = g->values[X].shape.dims[axis];
    if (gcc_grad_wanted(c, X)) {
      int64_t pads[2 * GCC_MAX_DIMS] = {0};
      pads[axis] = -off;
      pads[axis + r] = -(ys.dims[axis] - off - len);
      char what[32];
      snprintf(what, sizeof what, "dX%d", k);
      if (len == ys.dims[axis])
        dx[k] = G;
      else
        GCC_TRY(crop(c, node, what, G, pads, 2 * r, &dx[k], d));
    }
    off += len;
  }
  return GCC_OK;
}

/* Transpose by perm: dX = Transpose(G) by the inverse permutation. */
gcc_status gcc_grad_transpose(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0];
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  const gcc_attr *p = &g->nodes[node].av[TRANSPOSE_PERM];
  int64_t inv[GCC_MAX_DIMS];
  int np = p->n_ints;
  for (int i = 0; i < np; i++)
    inv[p->ints[i]] = i;
  int n2;
  GCC_TRY(emit(c, GCC_OP_TRANSPOSE, node, "dX", &dy[0], 1, &n2, &dx[0], d));
  GCC_TRY(gcc_node_set_ints(gcc_grad_graph(c), n2, "perm", inv, np));
  return gcc_grad_finish(c, n2, d);
}

/* Pad, constant mode: dX = G with the pads undone (negated pads: cropped
 * where X was padded, zero-filled where X was cropped). Edge and reflect
 * modes have no gradient here. */
gcc_status gcc_grad_pad(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  const gcc_node *n = &g->nodes[node];
  int X = n->inputs[0];
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  const char *mode = n->av[PAD_MODE].s ? n->av[PAD_MODE].s : "constant";
  if (strcmp(mode, "constant") != 0) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: %s: the gradient of Pad in mode '%s' is not supported (constant "
                        "mode only)",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc), mode);
  }
  int64_t pads[2 * GCC_MAX_DIMS];
  int np = n->av[PAD_PADS].n_ints;
  for (int i = 0; i < np; i++)
    pads[i] = -n->av[PAD_PADS].ints[i];
  return crop(c, node, "dX", dy[0], pads, np, &dx[0], d);
}

/* Y = ConvTranspose(X, W) + B, the adjoint of Conv with the same window:
 *   dX = Conv(G, W) (the convolution it is the adjoint of),
 *   dW = ConvGradFilter(X, G) (that convolution's filter gradient with X
 *        in the place of its output gradient and G of its input),
 *   dB = ConvGradBias(G). */
gcc_status gcc_grad_conv_transpose(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  const gcc_node *n = &g->nodes[node];
  int X = n->inputs[0], W = n->inputs[1], B = n->n_inputs > 2 ? n->inputs[2] : -1, G = dy[0];
  if (G < 0)
    return GCC_OK;
  const gcc_attr *opad = &n->av[CONVT_OUTPUT_PADDING];
  gcc_window2d win;
  gcc_window2d_of(n, &g->values[W].shape, &win);
  if (opad->n_ints == 2 && (opad->ints[0] >= win.sh || opad->ints[1] >= win.sw)) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: %s: the gradient of a ConvTranspose whose output_padding is not "
                        "smaller than its stride is not supported",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc));
  }
  /* the window attributes Conv and ConvGradFilter share (not output_padding) */
  static const int kWin[] = {CONV_STRIDES, CONV_PADS, CONV_DILATIONS, CONV_GROUP,
                             CONV_KERNEL_SHAPE};
  for (int pass = 0; pass < 2; pass++) {
    int in_x = pass == 0 ? X : W;
    if (!gcc_grad_wanted(c, in_x))
      continue;
    int in[2] = {G, W}, n2;
    if (pass == 1) {
      in[0] = X;
      in[1] = G;
    }
    GCC_TRY(emit(c, pass == 0 ? GCC_OP_CONV : GCC_OP_CONV_GRAD_FILTER, node,
                 pass == 0 ? "dX" : "dW", in, 2, &n2, &dx[pass], d));
    g = gcc_grad_graph(c);
    for (size_t k = 0; k < sizeof kWin / sizeof kWin[0]; k++) {
      gcc_attr a = g->nodes[node].av[kWin[k]];
      if (a.type == GCC_ATTR_INTS && a.n_ints > 0)
        GCC_TRY(gcc_node_set_ints(g, n2, a.name, a.ints, a.n_ints));
      else if (a.type == GCC_ATTR_INT)
        GCC_TRY(gcc_node_set_int(g, n2, a.name, a.i));
    }
    if (pass == 1)
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

/* BatchNormalization in training: the batch statistics normalise, so the
 * gradient flows through them (PyTorch's native_batch_norm_backward):
 * BatchNormGrad(G, X, scale) with output 0 (dX), 1 (dscale), 2 (dB). The
 * running mean and var are state (no gradient). */
gcc_status gcc_grad_batch_norm(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int G = dy[0];
  if (G < 0)
    return GCC_OK;
  if (!g->nodes[node].av[BN_TRAINING].i) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: %s: the gradient of BatchNormalization in evaluation form is not "
                        "supported",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc));
  }
  static const char *const what[3] = {"dX", "dscale", "dB"};
  for (int k = 0; k < 3; k++) {
    g = gcc_grad_graph(c);
    const gcc_node *n = &g->nodes[node];
    if (!gcc_grad_wanted(c, n->inputs[k]))
      continue;
    int in[3] = {G, n->inputs[0], n->inputs[1]}, n2;
    float eps = n->av[BN_EPSILON].f;
    GCC_TRY(emit(c, GCC_OP_BATCH_NORM_GRAD, node, what[k], in, 3, &n2, &dx[k], d));
    g = gcc_grad_graph(c);
    GCC_TRY(gcc_node_set_float(g, n2, "epsilon", eps));
    GCC_TRY(gcc_node_set_int(g, n2, "output", k));
    GCC_TRY(gcc_grad_finish(c, n2, d));
  }
  return GCC_OK;
}

/* Training form of BatchNormalization: batch statistics, running estimates
 * updated in place. */
static gcc_status train_batch_norm(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(gcc_node_set_int(g, node, "training", 1));
  return gcc_op_resolve_attrs(g, node, d);
}

/* Evaluation form: the running estimates normalise and stay as they are
 * (nn.BatchNorm2d in eval()), even in a graph built with `training` set. */
static gcc_status eval_batch_norm(gcc_graph *g, int node, gcc_diag *d) {
  if (!g->nodes[node].av[BN_TRAINING].i)
    return GCC_OK;
  GCC_TRY(gcc_node_set_int(g, node, "training", 0));
  return gcc_op_resolve_attrs(g, node, d);
}

/* Dropout: in training dX = DropoutGrad(G) (the same mask, redrawn from the
 * node's ratio and key at the same step), in evaluation form the identity. */
gcc_status gcc_grad_dropout(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  const gcc_node *n = &g->nodes[node];
  int G = dy[0];
  if (G < 0 || !gcc_grad_wanted(c, n->inputs[0]))
    return GCC_OK;
  if (!n->av[DROPOUT_TRAINING].i) {
    dx[0] = G;
    return GCC_OK;
  }
  float ratio = n->av[DROPOUT_RATIO].f;
  int64_t key = n->av[DROPOUT_KEY].i;
  int n2;
  GCC_TRY(emit(c, GCC_OP_DROPOUT_GRAD, node, "dX", &G, 1, &n2, &dx[0], d));
  g = gcc_grad_graph(c);
  GCC_TRY(gcc_node_set_float(g, n2, "ratio", ratio));
  GCC_TRY(gcc_node_set_int(g, n2, "key", key));
  return gcc_grad_finish(c, n2, d);
}

/* Evaluation form of Dropout: the identity (nn.Dropout in eval()), even in a
 * graph whose file sets `training`. */
static gcc_status eval_dropout(gcc_graph *g, int node, gcc_diag *d) {
  if (!g->nodes[node].av[DROPOUT_TRAINING].i)
    return GCC_OK;
  GCC_TRY(gcc_node_set_int(g, node, "training", 0));
  return gcc_op_resolve_attrs(g, node, d);
}

/* Training form of Dropout: masks from the run's seed (the training spec's),
 * the node's name and its own seed (graph/philox.h gcc_dropout_key). */
static gcc_status train_dropout(gcc_graph *g, int node, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  uint64_t key = gcc_dropout_key(g->training.seed, n->name, n->av[DROPOUT_SEED].i);
  GCC_TRY(gcc_node_set_int(g, node, "training", 1));
  GCC_TRY(gcc_node_set_int(g, node, "key", (int64_t)key));
  return gcc_op_resolve_attrs(g, node, d);
}

/* Evaluation form of Attention: no dropout on the probabilities
 * (scaled_dot_product_attention with dropout_p = 0, as nn.Module.eval()
 * models call it). */
static gcc_status eval_attention(gcc_graph *g, int node, gcc_diag *d) {
  if (!g->nodes[node].av[ATTN_TRAINING].i)
    return GCC_OK;
  GCC_TRY(gcc_node_set_int(g, node, "training", 0));
  return gcc_op_resolve_attrs(g, node, d);
}

/* Training form of Attention: the dropout mask's key as Dropout's (the run's
 * seed, the node's name and its own seed), so a fused node draws the mask
 * a Dropout of that name and seed would. */
static gcc_status train_attention(gcc_graph *g, int node, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  uint64_t key = gcc_dropout_key(g->training.seed, n->name, n->av[ATTN_SEED].i);
  GCC_TRY(gcc_node_set_int(g, node, "training", 1));
  GCC_TRY(gcc_node_set_int(g, node, "key", (int64_t)key));
  return gcc_op_resolve_attrs(g, node, d);
}

/* LayerNormalization: the row statistics normalise, so the gradient flows
 * through them (PyTorch's native_layer_norm_backward): LayerNormGrad(G, X,
 * Scale) with output 0 (dX), 1 (dScale), 2 (dB), each recomputing the row
 * statistics from X. Mean and InvStdDev (the optional outputs) are
 * statistics: a loss that depends on them has no gradient here. */
gcc_status gcc_grad_layer_norm(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  for (int k = 1; k < g->nodes[node].n_outputs; k++)
    if (dy[k] >= 0) {
      char desc[600];
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                          "%s: %s: the gradient through output %d (%s) is not supported: the "
                          "loss may depend on Y only",
                          g->source, gcc_node_desc(g, node, desc, sizeof desc), k,
                          k == LN_OUT_MEAN ? "Mean" : "InvStdDev");
    }
  int G = dy[0];
  if (G < 0)
    return GCC_OK;
  static const char *const what[3] = {"dX", "dScale", "dB"};
  for (int k = 0; k < 3; k++) {
    g = gcc_grad_graph(c);
    const gcc_node *n = &g->nodes[node];
    if (k >= n->n_inputs || n->inputs[k] < 0 || !gcc_grad_wanted(c, n->inputs[k]))
      continue;
    int in[3] = {G, n->inputs[0], n->inputs[1]}, n2;
    int64_t axis = n->av[LN_AXIS].i;
    float eps = n->av[LN_EPSILON].f;
    GCC_TRY(emit(c, GCC_OP_LAYER_NORM_GRAD, node, what[k], in, 3, &n2, &dx[k], d));
    g = gcc_grad_graph(c);
    GCC_TRY(gcc_node_set_int(g, n2, "axis", axis));
    GCC_TRY(gcc_node_set_float(g, n2, "epsilon", eps));
    GCC_TRY(gcc_node_set_int(g, n2, "output", k));
    GCC_TRY(gcc_grad_finish(c, n2, d));
  }
  return GCC_OK;
}

/* Gather and GatherElements: dX = GRAD_OP(G, indices) with X's shape and the
 * node's axis (the attribute in slot `axis_slot`), zeros of data's shape with
 * G's rows or elements added at their indices (a deterministic scatter-add);
 * no gradient for the indices (integers). */
static gcc_status scatter_add_grad(gcc_grad_ctx *c, int node, const int *dy, int *dx, int grad_op,
                                   int axis_slot, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0], I = g->nodes[node].inputs[1];
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  const gcc_shape xs = g->values[X].shape;
  int64_t axis = g->nodes[node].av[axis_slot].i;
  int in[2] = {dy[0], I}, n2;
  GCC_TRY(emit(c, grad_op, node, "dX", in, 2, &n2, &dx[0], d));
  g = gcc_grad_graph(c);
  GCC_TRY(gcc_node_set_ints(g, n2, "shape", xs.dims, xs.ndim));
  GCC_TRY(gcc_node_set_int(g, n2, "axis", axis));
  return gcc_grad_finish(c, n2, d);
}

/* Gather: dX = GatherGrad(G, indices), G's rows added at their indices. */
static gcc_status gcc_grad_gather(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  return scatter_add_grad(c, node, dy, dx, GCC_OP_GATHER_GRAD, GATHER_AXIS, d);
}

/* ReduceSumTo (the IR of an imported ReduceSum / ReduceMean over any axes):
 * dX = scale * G broadcast back to X's shape (torch sum / mean backward:
 * an expand), an Expand of G then, for scale != 1, a ReduceSumTo of X's
 * own shape that only scales. */
static gcc_status gcc_grad_reduce_sum_to(gcc_grad_ctx *c, int node, const int *dy, int *dx,
                                         gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0];
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  const float scale = g->nodes[node].av[REDUCE_SUM_TO_SCALE].f;
  const gcc_shape xs = g->values[X].shape;
  int64_t dims[GCC_MAX_DIMS];
  int like = 0; /* a symbolic dim (the batch): Expand reads it from X */
  for (int i = 0; i < xs.ndim; i++) {
    dims[i] = xs.dims[i] < 1 ? 0 : xs.dims[i];
    like |= xs.dims[i] < 1;
  }
  int in[2] = {dy[0], X}, n2, ex;
  GCC_TRY(emit(c, GCC_OP_EXPAND, node, scale == 1.0f ? "dX" : "dX.expanded", in, like ? 2 : 1, &n2,
               &ex, d));
  g = gcc_grad_graph(c);
  GCC_TRY(gcc_node_set_ints(g, n2, "shape", dims, xs.ndim));
  GCC_TRY(gcc_grad_finish(c, n2, d));
  return sum_to(c, node, "dX", ex, X, scale, &dx[0], d);
}

/* GatherElements: dX = GatherElementsGrad(G, indices), G's elements added at
 * their indices in row-major order. */
static gcc_status gcc_grad_gather_elements(gcc_grad_ctx *c, int node, const int *dy, int *dx,
                                           gcc_diag *d) {
  return scatter_add_grad(c, node, dy, dx, GCC_OP_GATHER_ELEMENTS_GRAD, GATHER_ELEMENTS_AXIS, d);
}

/* ReduceMin: dX = ReduceMinGrad(G, X, Y) with the same axes and keepdims
 * (torch amin backward: G split evenly among the tied minima). */
static gcc_status gcc_grad_reduce_min(gcc_grad_ctx *c, int node, const int *dy, int *dx,
                                      gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0];
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  const gcc_attr *ax = &g->nodes[node].av[REDUCE_MIN_AXES];
  int64_t axes[GCC_MAX_DIMS], keep = g->nodes[node].av[REDUCE_MIN_KEEPDIMS].i;
  int n_axes = ax->n_ints;
  for (int k = 0; k < n_axes && k < GCC_MAX_DIMS; k++)
    axes[k] = ax->ints[k];
  int in[3] = {dy[0], X, g->nodes[node].outputs[0]}, n2;
  GCC_TRY(emit(c, GCC_OP_REDUCE_MIN_GRAD, node, "dX", in, 3, &n2, &dx[0], d));
  g = gcc_grad_graph(c);
  GCC_TRY(gcc_node_set_ints(g, n2, "axes", axes, n_axes));
  GCC_TRY(gcc_node_set_int(g, n2, "keepdims", keep));
  return gcc_grad_finish(c, n2, d);
}

/* Trilu: dX = Trilu(G) with the same upper and k (the mask is linear and
 * its own adjoint), as torch.triu's backward. */
static gcc_status gcc_grad_trilu(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0], n2;
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  int64_t upper = g->nodes[node].av[TRILU_UPPER].i, k = g->nodes[node].av[TRILU_K].i;
  GCC_TRY(emit(c, GCC_OP_TRILU, node, "dX", &dy[0], 1, &n2, &dx[0], d));
  g = gcc_grad_graph(c);
  GCC_TRY(gcc_node_set_int(g, n2, "upper", upper));
  GCC_TRY(gcc_node_set_int(g, n2, "k", k));
  return gcc_grad_finish(c, n2, d);
}

/* Slice: dX = SliceGrad(G) with Slice's attributes and X's shape. */
static gcc_status gcc_grad_slice(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0];
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  const gcc_shape xs = g->values[X].shape;
  int n2;
  GCC_TRY(emit(c, GCC_OP_SLICE_GRAD, node, "dX", &dy[0], 1, &n2, &dx[0], d));
  g = gcc_grad_graph(c);
  static const char *const names[] = {"starts", "ends", "axes", "steps"};
  for (int k = 0; k < 4; k++) {
    const gcc_attr a = g->nodes[node].av[SLICE_STARTS + k];
    if (a.n_ints)
      GCC_TRY(gcc_node_set_ints(g, n2, names[k], a.ints, a.n_ints));
  }
  GCC_TRY(gcc_node_set_ints(g, n2, "shape", xs.dims, xs.ndim));
  return gcc_grad_finish(c, n2, d);
}

/* Expand: dX = dY summed back to X's shape (ReduceSumTo), as a broadcast
 * operand of Add. */
static gcc_status gcc_grad_expand(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  int X = g->nodes[node].inputs[0];
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  return sum_to(c, node, "dX", dy[0], X, 1.0f, &dx[0], d);
}

/* Attention: dQ, dK, dV by one AttentionGrad(Q, K, V, O, L, dO [, mask])
 * (FlashAttention-2's backward: the probabilities recomputed from L). The
 * mask gets no gradient; nor does L (nothing but AttentionGrad reads it in
 * the graphs the attention pass makes). */
gcc_status gcc_grad_attention(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  const gcc_node *n = &g->nodes[node];
  char desc[600];
  if (dy[1] >= 0)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: %s: a gradient flows into the logsumexp output L; only O has a "
                        "gradient rule",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc));
  int has_mask = n->n_inputs > ATTN_IN_MASK && n->inputs[ATTN_IN_MASK] >= 0;
  if (has_mask && gcc_grad_wanted(c, n->inputs[ATTN_IN_MASK]))
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: %s: the mask '%s' would need a gradient; the fused attention gives "
                        "none (a constant or input mask is expected)",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc),
                        g->values[n->inputs[ATTN_IN_MASK]].name);
  int want[3], any = 0;
  for (int k = 0; k < 3; k++)
    any |= want[k] = gcc_grad_wanted(c, n->inputs[k]);
  if (dy[0] < 0 || !any)
    return GCC_OK;
  int in[7] = {n->inputs[ATTN_IN_Q],
               n->inputs[ATTN_IN_K],
               n->inputs[ATTN_IN_V],
               n->outputs[0],
               n->outputs[1],
               dy[0],
               has_mask ? n->inputs[ATTN_IN_MASK] : -1};
  int64_t causal = n->av[ATTN_IS_CAUSAL].i;
  float scale = n->av[ATTN_SCALE].f;
  /* the evaluation form has no dropout: its gradient is p = 0's */
  float drop = n->av[ATTN_TRAINING].i ? n->av[ATTN_DROPOUT_P].f : 0.0f;
  int64_t key = n->av[ATTN_KEY].i;
  static const char *const outs[3] = {"dQ", "dK", "dV"};
  char hint[512];
  snprintf(hint, sizeof hint, "%s/grad", n->name);
  int n2, o[3];
  GCC_TRY(gcc_grad_add_node_n(c, GCC_OP_ATTENTION_GRAD, hint, outs, 3, in, has_mask ? 7 : 6, &n2, o,
                              d));
  g = gcc_grad_graph(c);
  GCC_TRY(gcc_node_set_int(g, n2, "is_causal", causal));
  GCC_TRY(gcc_node_set_float(g, n2, "scale", scale));
  GCC_TRY(gcc_node_set_float(g, n2, "dropout_p", drop));
  GCC_TRY(gcc_node_set_int(g, n2, "key", key));
  for (int k = 0; k < 3; k++)
    if (want[k])
      dx[k] = o[k];
  return gcc_grad_finish(c, n2, d);
}

/* NegativeLogLikelihoodLoss: dInput = NegativeLogLikelihoodLossGrad(dY,
 * target[, weight]) with the forward's reduction and ignore_index and the
 * input's shape; no gradient for the target (integers) and none for the
 * class weight: PyTorch's nll_loss does not differentiate its weight
 * (derivatives.yaml), so a weight that is a parameter (an ONNX initializer
 * imported for training: PyTorch's exporters write F.cross_entropy's
 * weight buffer as one) gets none and stays as it is. */
static gcc_status gcc_grad_nll(gcc_grad_ctx *c, int node, const int *dy, int *dx, gcc_diag *d) {
  gcc_graph *g = gcc_grad_graph(c);
  const gcc_node *n = &g->nodes[node];
  int X = n->inputs[0], W = n->n_inputs > 2 ? n->inputs[2] : -1;
  GCC_TRY(no_target_grad(c, node, n->inputs[1], d));
  if (dy[0] < 0 || !gcc_grad_wanted(c, X))
    return GCC_OK;
  const gcc_shape xs = g->values[X].shape;
  int in[3] = {dy[0], n->inputs[1], W}, n2;
  GCC_TRY(emit(c, GCC_OP_NLL_LOSS_GRAD, node, "dinput", in, W >= 0 ? 3 : 2, &n2, &dx[0], d));
  g = gcc_grad_graph(c);
  GCC_TRY(copy_attrs(g, node, n2));
  GCC_TRY(gcc_node_set_ints(g, n2, "shape", xs.dims, xs.ndim));
  return gcc_grad_finish(c, n2, d);
}

/* ---- the table -------------------------------------------------------- */

#define NO_GRAD_INTERNAL "an internal gradient op: no second derivatives"
/* comparisons and logical ops: their bool outputs are constants to autodiff
 * (no rule, so nothing that depends on a parameter flows through them) */
#define NOT_DIFFERENTIABLE "a comparison or logical op: its bool output is piecewise constant"

_Static_assert(GCC_OP_COUNT == 124, "a new op: add its gradient rule to kGradRules");

static const gcc_grad_rule kGradRules[GCC_OP_COUNT] = {
    [GCC_OP_GEMM] = {.fn = gcc_grad_gemm},
    [GCC_OP_MATMUL] = {.fn = gcc_grad_matmul},
    [GCC_OP_ADD] = {.fn = gcc_grad_add},
    [GCC_OP_RELU] = {.fn = gcc_grad_relu},
    [GCC_OP_RELU_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_IDENTITY] = {.fn = gcc_grad_identity},
    [GCC_OP_RESHAPE] = {.fn = gcc_grad_reshape},
    [GCC_OP_FLATTEN] = {.fn = gcc_grad_reshape},
    [GCC_OP_REDUCE_SUM_TO] = {.fn = gcc_grad_reduce_sum_to},
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
    [GCC_OP_SUB] = {.fn = gcc_grad_sub},
    [GCC_OP_MUL] = {.fn = gcc_grad_mul},
    [GCC_OP_DIV] = {.fn = gcc_grad_div},
    [GCC_OP_SIGMOID] = {.fn = gcc_grad_sigmoid},
    [GCC_OP_TANH] = {.fn = gcc_grad_tanh},
    [GCC_OP_SQRT] = {.fn = gcc_grad_sqrt},
    [GCC_OP_LEAKY_RELU] = {.fn = gcc_grad_leaky_relu},
    [GCC_OP_CLIP] = {.fn = gcc_grad_clip},
    [GCC_OP_LOG_SOFTMAX] = {.fn = gcc_grad_log_softmax},
    [GCC_OP_LRN] = {.fn = gcc_grad_lrn},
    [GCC_OP_CONCAT] = {.fn = gcc_grad_concat},
    [GCC_OP_TRANSPOSE] = {.fn = gcc_grad_transpose},
    [GCC_OP_PAD] = {.fn = gcc_grad_pad},
    [GCC_OP_CONV_TRANSPOSE] = {.fn = gcc_grad_conv_transpose},
    [GCC_OP_SIGMOID_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_TANH_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_SQRT_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_LEAKY_RELU_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_CLIP_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_LOG_SOFTMAX_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_LRN_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_ALL_REDUCE] = {.none = "a collective over gradients, made after autodiff"},
    [GCC_OP_BATCH_NORM] = {.fn = gcc_grad_batch_norm,
                           .train = train_batch_norm,
                           .eval = eval_batch_norm},
    [GCC_OP_BATCH_NORM_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_DROPOUT] = {.fn = gcc_grad_dropout,
                        .train = train_dropout,
                        .eval = eval_dropout,
                        .eval_identity = 1},
    [GCC_OP_DROPOUT_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_CAST] = {.none = "made by the autocast pass, after autodiff"},
    [GCC_OP_AMP_NON_FINITE_CHECK] = {.none = "fp16 loss scaling: made by autodiff, after the "
                                             "backward"},
    [GCC_OP_AMP_UPDATE_SCALE] = {.none = "fp16 loss scaling: made by autodiff, after the updates"},
    [GCC_OP_LAYER_NORM] = {.fn = gcc_grad_layer_norm},
    [GCC_OP_LAYER_NORM_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_GATHER] = {.fn = gcc_grad_gather},
    [GCC_OP_GATHER_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_SLICE] = {.fn = gcc_grad_slice},
    [GCC_OP_SLICE_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_EXPAND] = {.fn = gcc_grad_expand},
    [GCC_OP_GRAD_NORM] = {.none = "gradient clipping: made by autodiff, after the backward"},
    [GCC_OP_ATTENTION] = {.fn = gcc_grad_attention,
                          .train = train_attention,
                          .eval = eval_attention},
    [GCC_OP_ATTENTION_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_GELU] = {.fn = gcc_grad_gelu},
    [GCC_OP_GELU_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_ERF] = {.fn = gcc_grad_erf},
    [GCC_OP_ERF_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_EXP] = {.fn = gcc_grad_exp},
    [GCC_OP_LOG] = {.fn = gcc_grad_log},
    [GCC_OP_NEG] = {.fn = gcc_grad_neg},
    [GCC_OP_ABS] = {.fn = gcc_grad_abs},
    [GCC_OP_ABS_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_POW] = {.fn = gcc_grad_pow},
    [GCC_OP_POW_GRAD_BASE] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_POW_GRAD_EXPONENT] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_RECIPROCAL] = {.fn = gcc_grad_reciprocal},
    [GCC_OP_MAX] = {.fn = gcc_grad_max},
    [GCC_OP_MIN] = {.fn = gcc_grad_min},
    [GCC_OP_MAX_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_MIN_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_ELU] = {.fn = gcc_grad_elu},
    [GCC_OP_ELU_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_SELU] = {.fn = gcc_grad_selu},
    [GCC_OP_SELU_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_CELU] = {.fn = gcc_grad_celu},
    [GCC_OP_CELU_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_SOFTPLUS] = {.fn = gcc_grad_softplus},
    [GCC_OP_SOFTPLUS_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_SOFTSIGN] = {.fn = gcc_grad_softsign},
    [GCC_OP_SOFTSIGN_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_THRESHOLDED_RELU] = {.fn = gcc_grad_thresholded_relu},
    [GCC_OP_THRESHOLDED_RELU_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_SIN] = {.fn = gcc_grad_sin},
    [GCC_OP_COS] = {.fn = gcc_grad_cos},
    [GCC_OP_PRELU] = {.fn = gcc_grad_prelu},
    [GCC_OP_PRELU_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_PRELU_GRAD_SLOPE] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_TRILU] = {.fn = gcc_grad_trilu},
    [GCC_OP_ARG_MAX] = {.none = "an index (int64): no gradient, as torch.argmax"},
    [GCC_OP_ARG_MIN] = {.none = "an index (int64): no gradient, as torch.argmin"},
    [GCC_OP_NLL_LOSS] = {.fn = gcc_grad_nll},
    [GCC_OP_NLL_LOSS_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_EQUAL] = {.none = NOT_DIFFERENTIABLE},
    [GCC_OP_LESS] = {.none = NOT_DIFFERENTIABLE},
    [GCC_OP_GREATER] = {.none = NOT_DIFFERENTIABLE},
    [GCC_OP_LESS_OR_EQUAL] = {.none = NOT_DIFFERENTIABLE},
    [GCC_OP_GREATER_OR_EQUAL] = {.none = NOT_DIFFERENTIABLE},
    [GCC_OP_NOT] = {.none = NOT_DIFFERENTIABLE},
    [GCC_OP_AND] = {.none = NOT_DIFFERENTIABLE},
    [GCC_OP_OR] = {.none = NOT_DIFFERENTIABLE},
    [GCC_OP_XOR] = {.none = NOT_DIFFERENTIABLE},
    [GCC_OP_WHERE] = {.fn = gcc_grad_where},
    [GCC_OP_WHERE_GRAD_X] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_WHERE_GRAD_Y] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_GATHER_ELEMENTS] = {.fn = gcc_grad_gather_elements},
    [GCC_OP_GATHER_ELEMENTS_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_REDUCE_MIN] = {.fn = gcc_grad_reduce_min},
    [GCC_OP_REDUCE_MIN_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_ATTENTION_PACKED] = {.none = "made by a lowering pass after autodiff (its backward "
                                         "is AttentionPackedGrad, made by the same pass)"},
    [GCC_OP_ATTENTION_PACKED_GRAD] = {.none = NO_GRAD_INTERNAL},
    [GCC_OP_GELU_AUX] = {.none = "made by a lowering pass after autodiff (its backward is the "
                                 "Mul of dY by its second output, made by the same pass)"},
    [GCC_OP_LAYER_NORM_GRAD_ALL] = {.none = NO_GRAD_INTERNAL},
};

const gcc_grad_rule *gcc_grad_rule_of(int op) {
  if (op < 0 || op >= GCC_OP_COUNT)
    return NULL;
  return &kGradRules[op];
}
