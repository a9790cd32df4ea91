/*
 * ops_flops.c - the FLOPs functions of the op table (graph/ops.c), for reports.
 */
#include "graph/ops_internal.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- flops ---------------------------------------------------------- */

double numel_out(const gcc_graph *g, int node) {
  const gcc_value *o = &g->values[g->nodes[node].outputs[0]];
  return (double)gcc_shape_numel(&o->shape, NULL);
}

double numel_in0(const gcc_graph *g, int node) {
  const gcc_value *x = &g->values[g->nodes[node].inputs[0]];
  return (double)gcc_shape_numel(&x->shape, NULL);
}

double flops_gemm(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  const gcc_value *a = &g->values[n->inputs[0]];
  const gcc_shape *y = &g->values[n->outputs[0]].shape;
  int64_t k =
      (n->n_av > GEMM_TRANS_A && n->av[GEMM_TRANS_A].i) ? a->shape.dims[0] : a->shape.dims[1];
  double f = 2.0 * (double)y->dims[0] * (double)y->dims[1] * (double)k;
  if (n->n_inputs > 2 && n->inputs[2] >= 0)
    f += (double)y->dims[0] * (double)y->dims[1];
  return f;
}

double flops_matmul(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  const gcc_value *a = &g->values[n->inputs[0]];
  const gcc_shape *y = &g->values[n->outputs[0]].shape;
  return 2.0 * (double)gcc_shape_numel(y, NULL) * (double)a->shape.dims[a->shape.ndim - 1];
}

double flops_lrn(const gcc_graph *g, int node) {
  return (double)(g->nodes[node].av[LRN_SIZE].i + 3) * numel_out(g, node);
}

/* BatchNormalization and its gradient: a few passes over X */
double flops_batch_norm(const gcc_graph *g, int node) {
  return 4.0 * numel_in0(g, node);
}

/* LayerNormalization and its gradient: about 8 operations per element of X
 * (two reductions, the normalisation, scale and shift) */
double flops_layer_norm(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  int x = gcc_op(n->op)->flags & GCC_OPF_INTERNAL ? n->inputs[1] : n->inputs[0];
  return 8.0 * (double)gcc_shape_numel(&g->values[x].shape, NULL);
}

/* ConvTranspose: the multiply-adds of the convolution it is the adjoint of */
double flops_conv_transpose(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  const gcc_shape *x = &g->values[n->inputs[0]].shape, *w = &g->values[n->inputs[1]].shape;
  return 2.0 * (double)gcc_shape_numel(x, NULL) * (double)w->dims[1] * (double)w->dims[2] *
         (double)w->dims[3];
}

/* softmax + log + pick: about 5 per logit (max, sub, exp, sum, scale) */
double flops_sce(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  int logits = gcc_op(n->op)->flags & GCC_OPF_LOSS ? n->inputs[0] : n->inputs[1];
  return 5.0 * (double)gcc_shape_numel(&g->values[logits].shape, NULL);
}

double flops_mse(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  int pred = gcc_op(n->op)->flags & GCC_OPF_LOSS ? n->inputs[0] : n->inputs[1];
  return 3.0 * (double)gcc_shape_numel(&g->values[pred].shape, NULL);
}

double flops_sgd(const gcc_graph *g, int node) {
  return 5.0 * numel_in0(g, node);
}
double flops_adam(const gcc_graph *g, int node) {
  return 14.0 * numel_in0(g, node);
}

/* 2 * N * M * oh * ow * C * kh * kw (+ the bias) for Conv; the gradients do
 * the same multiply-adds. */
static double conv_macs(const gcc_shape *y, const gcc_shape *w) {
  return (double)y->dims[0] * (double)w->dims[0] * (double)y->dims[2] * (double)y->dims[3] *
         (double)w->dims[1] * (double)w->dims[2] * (double)w->dims[3];
}

double flops_conv(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  return 2.0 * conv_macs(&g->values[n->outputs[0]].shape, &g->values[n->inputs[1]].shape);
}

double flops_conv_grad_data(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  return 2.0 * conv_macs(&g->values[n->inputs[0]].shape, &g->values[n->inputs[1]].shape);
}

double flops_conv_grad_filter(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  return 2.0 * conv_macs(&g->values[n->inputs[0]].shape, &g->values[n->outputs[0]].shape);
}

/* one compare or add per window element */
double flops_pool(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  const gcc_attr *k = &n->av[POOL_KERNEL_SHAPE];
  int is_grad = gcc_op(n->op)->flags & GCC_OPF_INTERNAL;
  const gcc_shape *y = &g->values[is_grad ? n->inputs[0] : n->outputs[0]].shape;
  double kk = k->n_ints == 2 ? (double)(k->ints[0] * k->ints[1]) : 1.0;
  return (double)gcc_shape_numel(y, NULL) * kk;
}

double gcc_op_flops(const gcc_graph *g, int node) {
  const gcc_op_desc *op = gcc_op(g->nodes[node].op);
  return op && op->flops ? op->flops(g, node) : 0.0;
}
