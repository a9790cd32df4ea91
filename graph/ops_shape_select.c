/*
 * ops_shape_select.c - shape and dtype inference of the selection ops:
 * Trilu (ONNX Trilu-14) and ArgMax / ArgMin (ONNX ArgMax-13 / ArgMin-13);
 * see graph/ops.h.
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
