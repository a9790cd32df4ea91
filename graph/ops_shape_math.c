/*
 * ops_shape_math.c - shape and dtype functions of the pointwise math ops of
 * the Transformer blocks (Gelu, Pow and their gradients). See graph/ops.c.
 */
#include <string.h>

#include "graph/ops_internal.h"

int gcc_gelu_is_tanh(const gcc_node *n) {
  const char *s = n->n_av > GELU_APPROXIMATE ? n->av[GELU_APPROXIMATE].s : NULL;
  return s && strcmp(s, "tanh") == 0;
}

static gcc_status need_approximate(gcc_graph *g, int node, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  const char *s = n->av[GELU_APPROXIMATE].s;
  if (s && (strcmp(s, "none") == 0 || strcmp(s, "tanh") == 0))
    return GCC_OK;
  char desc[600];
  return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                      "%s: %s: attribute 'approximate' is '%s'; it must be \"none\" or \"tanh\" "
                      "(ONNX Gelu-20, torch.nn.GELU)",
                      g->source, gcc_node_desc(g, node, desc, sizeof desc), s ? s : "");
}

gcc_status shape_gelu(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_approximate(g, node, d));
  return shape_unary_same(g, node, d);
}

gcc_status shape_gelu_grad(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_approximate(g, node, d));
  return shape_elem_grad(g, node, d);
}

/* GeluAux (X): Y and D both X's dtype and shape. */
gcc_status shape_gelu_aux(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(shape_gelu(g, node, d));
  const gcc_value *y = &g->values[g->nodes[node].outputs[0]];
  const gcc_shape s = y->shape;
  set_out(g, node, 1, y->dtype, &s);
  return GCC_OK;
}

/* Pow (A, B): one float dtype, broadcast. */
gcc_status shape_pow(gcc_graph *g, int node, gcc_diag *d) {
  gcc_dtype dt;
  GCC_TRY(need_same_float(g, node, 0, 1, &dt, d));
  gcc_value *a = in_val(g, node, 0), *b = in_val(g, node, 1);
  gcc_shape r;
  if (!gcc_broadcast_shapes(&a->shape, &b->shape, &r))
    return shape_err(g, node, d, "operands do not broadcast:", &a->shape, &b->shape);
  set_out(g, node, 0, dt, &r);
  return GCC_OK;
}

/* PowGradBase / PowGradExponent (dY, A, B): A and B broadcast to dY's
 * shape, the output has it. */
gcc_status shape_pow_grad(gcc_graph *g, int node, gcc_diag *d) {
  gcc_dtype dt;
  GCC_TRY(need_same_float(g, node, 0, 2, &dt, d));
  gcc_value *dy = in_val(g, node, 0), *a = in_val(g, node, 1), *b = in_val(g, node, 2);
  gcc_shape r;
  if (!gcc_broadcast_shapes(&a->shape, &b->shape, &r))
    return shape_err(g, node, d, "A and B do not broadcast:", &a->shape, &b->shape);
  if (!gcc_shape_equal(&r, &dy->shape))
    return shape_err(g, node, d, "A and B broadcast to a shape other than dY's:", &r, &dy->shape);
  set_out(g, node, 0, dt, &dy->shape);
  return GCC_OK;
}

/* PRelu (X, slope): one float dtype, slope unidirectionally broadcast to X
 * (ONNX PRelu-7+); Y has X's shape. */
gcc_status shape_prelu(gcc_graph *g, int node, gcc_diag *d) {
  gcc_dtype dt;
  GCC_TRY(need_same_float(g, node, 0, 1, &dt, d));
  gcc_value *x = in_val(g, node, 0), *s = in_val(g, node, 1);
  gcc_shape r;
  if (!gcc_broadcast_shapes(&x->shape, &s->shape, &r) || !gcc_shape_equal(&r, &x->shape))
    return shape_err(g, node, d, "the slope does not broadcast to X:", &s->shape, &x->shape);
  set_out(g, node, 0, dt, &x->shape);
  return GCC_OK;
}

/* PReluGrad / PReluGradSlope (dY, X, slope): X of dY's shape, the slope
 * broadcast to it; the output has dY's shape. */
gcc_status shape_prelu_grad(gcc_graph *g, int node, gcc_diag *d) {
  gcc_dtype dt;
  GCC_TRY(need_same_float(g, node, 0, 2, &dt, d));
  gcc_value *dy = in_val(g, node, 0), *x = in_val(g, node, 1), *s = in_val(g, node, 2);
  gcc_shape r;
  if (!gcc_shape_equal(&x->shape, &dy->shape))
    return shape_err(g, node, d, "X's shape is not dY's:", &x->shape, &dy->shape);
  if (!gcc_broadcast_shapes(&x->shape, &s->shape, &r) || !gcc_shape_equal(&r, &x->shape))
    return shape_err(g, node, d, "the slope does not broadcast to X:", &s->shape, &x->shape);
  set_out(g, node, 0, dt, &dy->shape);
  return GCC_OK;
}
