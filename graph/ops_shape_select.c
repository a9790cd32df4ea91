/*
 * ops_shape_select.c - shape and dtype inference of the selection ops:
 * Trilu (ONNX Trilu-14), ArgMax / ArgMin (ONNX ArgMax-13 / ArgMin-13) and
 * ReduceMin (ONNX ReduceMin-13) with its gradient; see graph/ops.h.
 */
#include <inttypes.h>
#include <stdio.h>

#include "graph/ops_internal.h"

/* Y of X's shape and dtype; X of rank >= 2. */
gcc_status shape_trilu(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_movable(g, node, 0, d));
  gcc_value *x = in_val(g, node, 0);
  if (x->shape.ndim < 2)
    return shape_err(g, node, d, "X must have rank >= 2:", &x->shape, NULL);
  set_out(g, node, 0, x->dtype, &x->shape);
  return GCC_OK;
}

/* int64 Y: X's shape with dim `axis` 1 (keepdims) or removed. X float32,
 * int64 or int32 (a 16-bit float under autocast is compared in float). */
gcc_status shape_arg(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_movable(g, node, 0, d));
  gcc_value *x = in_val(g, node, 0);
  const gcc_node *n = &g->nodes[node];
  int r = x->shape.ndim;
  int64_t axis = n->av[ARG_AXIS].i, a = axis < 0 ? axis + r : axis;
  if (r < 1 || a < 0 || a >= r) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: %s: axis %" PRId64 " is outside [-%d, %d)",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc), axis, r, r);
  }
  gcc_shape y = {0, {0}};
  for (int i = 0; i < r; i++) {
    if (i == a && !n->av[ARG_KEEPDIMS].i)
      continue;
    y.dims[y.ndim++] = i == a ? 1 : x->shape.dims[i];
  }
  set_out(g, node, 0, GCC_DT_INT64, &y);
  return GCC_OK;
}

/* ---- ReduceMin ------------------------------------------------------------ */

gcc_status gcc_reduce_min_resolve(const gcc_node *n, const char *source, const gcc_shape *x,
                                  int *red, gcc_shape *y, gcc_diag *d) {
  const gcc_attr *ax = &n->av[REDUCE_MIN_AXES];
  const char *src = source ? source : "<model>";
  int r = x->ndim;
  for (int i = 0; i < r; i++)
    red[i] = 0;
  if (r < 1 || ax->n_ints < 1)
    return gcc_diag_set(d, GCC_ERR_SHAPE,
                        "%s: node '%s' (%s): X of rank %d and %d axes (rank >= 1 and at least "
                        "one axis expected)",
                        src, n->name, gcc_op_name(n->op), r, ax->n_ints);
  for (int k = 0; k < ax->n_ints; k++) {
    int64_t a = ax->ints[k] < 0 ? ax->ints[k] + r : ax->ints[k];
    if (a < 0 || a >= r || red[a])
      return gcc_diag_set(d, GCC_ERR_SHAPE,
                          "%s: node '%s' (%s): axis %" PRId64 " is outside [-%d, %d) or repeated",
                          src, n->name, gcc_op_name(n->op), ax->ints[k], r, r);
    red[a] = 1;
  }
  int keep = n->av[REDUCE_MIN_KEEPDIMS].i != 0;
  y->ndim = 0;
  for (int i = 0; i < r; i++) {
    if (red[i] && x->dims[i] < 1)
      return gcc_diag_set(d, GCC_ERR_SHAPE,
                          "%s: node '%s' (%s): reduced dim %d is empty or the symbolic batch", src,
                          n->name, gcc_op_name(n->op), i);
    if (!red[i])
      y->dims[y->ndim++] = x->dims[i];
    else if (keep)
      y->dims[y->ndim++] = 1;
  }
  return GCC_OK;
}

gcc_status shape_reduce_min(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_dtype(g, node, 0, GCC_DT_FLOAT32, d));
  gcc_value *x = in_val(g, node, 0);
  int red[GCC_MAX_DIMS];
  gcc_shape y;
  GCC_TRY(gcc_reduce_min_resolve(&g->nodes[node], g->source, &x->shape, red, &y, d));
  set_out(g, node, 0, GCC_DT_FLOAT32, &y);
  return GCC_OK;
}

gcc_status shape_reduce_min_grad(gcc_graph *g, int node, gcc_diag *d) {
  for (int k = 0; k < 3; k++)
    GCC_TRY(need_dtype(g, node, k, GCC_DT_FLOAT32, d));
  gcc_value *dy = in_val(g, node, 0), *x = in_val(g, node, 1), *yv = in_val(g, node, 2);
  int red[GCC_MAX_DIMS];
  gcc_shape y;
  GCC_TRY(gcc_reduce_min_resolve(&g->nodes[node], g->source, &x->shape, red, &y, d));
  if (!gcc_shape_equal(&y, &dy->shape) || !gcc_shape_equal(&y, &yv->shape))
    return shape_err(g, node, d, "dY and Y must have ReduceMin's output shape, got", &dy->shape,
                     &y);
  set_out(g, node, 0, GCC_DT_FLOAT32, &x->shape);
  return GCC_OK;
}
