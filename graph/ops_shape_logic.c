/*
 * ops_shape_logic.c - shape and dtype inference of the comparisons (Equal,
 * Less, Greater, LessOrEqual, GreaterOrEqual), the logical ops (Not, And,
 * Or, Xor) and Where with its gradient ops. Semantics: graph/ops.h.
 */
#include <inttypes.h>
#include <stdio.h>

#include "graph/ops_internal.h"

static gcc_status dtype_err(gcc_graph *g, int node, int k, const char *want, gcc_diag *d) {
  char desc[600];
  gcc_value *v = in_val(g, node, k);
  return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: %s: input %d ('%s') has dtype %s, expected %s",
                      g->source, gcc_node_desc(g, node, desc, sizeof desc), k, v->name,
                      gcc_dtype_name(v->dtype), want);
}

/* A and B of one dtype (float32 / 16-bit floats, int64, int32; bool when
 * `bool_ok`), C bool of the broadcast shape. */
static gcc_status compare(gcc_graph *g, int node, int bool_ok, gcc_diag *d) {
  gcc_value *a = in_val(g, node, 0), *b = in_val(g, node, 1);
  gcc_dtype t = a->dtype;
  int ok = gcc_dtype_is_float(t) || t == GCC_DT_INT64 || t == GCC_DT_INT32 ||
           (t == GCC_DT_BOOL && bool_ok);
  if (!ok)
    return dtype_err(g, node, 0,
                     bool_ok ? "float32, int64, int32 or bool" : "float32, int64 or int32", d);
  GCC_TRY(need_dtype(g, node, 1, t, d));
  gcc_shape r;
  if (!gcc_broadcast_shapes(&a->shape, &b->shape, &r))
    return shape_err(g, node, d, "operands do not broadcast:", &a->shape, &b->shape);
  set_out(g, node, 0, GCC_DT_BOOL, &r);
  return GCC_OK;
}

/* Less, Greater, LessOrEqual, GreaterOrEqual: ordered dtypes only. */
gcc_status shape_compare(gcc_graph *g, int node, gcc_diag *d) {
  return compare(g, node, 0, d);
}

/* Equal: bool too (ONNX Equal-11+). */
gcc_status shape_equal(gcc_graph *g, int node, gcc_diag *d) {
  return compare(g, node, 1, d);
}

/* Not (X), And / Or / Xor (A, B): bool in, bool out, broadcast. */
gcc_status shape_logic(gcc_graph *g, int node, gcc_diag *d) {
  int n = g->nodes[node].n_inputs;
  gcc_shape r = in_val(g, node, 0)->shape;
  for (int k = 0; k < n; k++) {
    GCC_TRY(need_dtype(g, node, k, GCC_DT_BOOL, d));
    gcc_shape t;
    if (!gcc_broadcast_shapes(&r, &in_val(g, node, k)->shape, &t))
      return shape_err(g, node, d, "operands do not broadcast:", &r, &in_val(g, node, k)->shape);
    r = t;
  }
  set_out(g, node, 0, GCC_DT_BOOL, &r);
  return GCC_OK;
}

/* Where (cond, X, Y): cond bool; X and Y of one dtype (a float, int64,
 * int32 or bool); Z of that dtype and the three shapes broadcast. */
gcc_status shape_where(gcc_graph *g, int node, gcc_diag *d) {
  gcc_value *c = in_val(g, node, 0), *x = in_val(g, node, 1), *y = in_val(g, node, 2);
  GCC_TRY(need_dtype(g, node, 0, GCC_DT_BOOL, d));
  gcc_dtype t = x->dtype;
  if (!gcc_dtype_is_float(t) && t != GCC_DT_INT64 && t != GCC_DT_INT32 && t != GCC_DT_BOOL)
    return dtype_err(g, node, 1, "float32, int64, int32 or bool", d);
  GCC_TRY(need_dtype(g, node, 2, t, d));
  gcc_shape cx, r;
  if (!gcc_broadcast_shapes(&c->shape, &x->shape, &cx))
    return shape_err(g, node, d, "condition and X do not broadcast:", &c->shape, &x->shape);
  if (!gcc_broadcast_shapes(&cx, &y->shape, &r))
    return shape_err(g, node, d, "condition, X and Y do not broadcast:", &cx, &y->shape);
  set_out(g, node, 0, t, &r);
  return GCC_OK;
}

/* WhereGradX / WhereGradY (cond, dZ): cond bool broadcasting to dZ (a
 * float); the result has dZ's dtype and shape. */
gcc_status shape_where_grad(gcc_graph *g, int node, gcc_diag *d) {
  gcc_value *c = in_val(g, node, 0), *dz = in_val(g, node, 1);
  GCC_TRY(need_dtype(g, node, 0, GCC_DT_BOOL, d));
  gcc_dtype t;
  GCC_TRY(need_same_float(g, node, 1, 1, &t, d));
  gcc_shape r;
  if (!gcc_broadcast_shapes(&c->shape, &dz->shape, &r) || !gcc_shape_equal(&r, &dz->shape))
    return shape_err(g, node, d, "the condition does not broadcast to dZ:", &c->shape, &dz->shape);
  set_out(g, node, 0, t, &dz->shape);
  return GCC_OK;
}
