/*
 * import_ops_shape.c - ONNX -> gcc IR converters of Softmax, LogSoftmax, LRN and the
 * shape ops (Flatten, Reshape, Squeeze, Unsqueeze, Concat, Transpose, Pad). See onnx/import_ops.c.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/loader.h"
#include "graph/ops.h"
#include "onnx/import_ops_internal.h"

/* ---- softmax ------------------------------------------------------------------- */

static gcc_status softmax_like(nctx *c, int op, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "axis", (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 1, d));
  GCC_TRY(need_float(c, 0, d));
  const tshape *x = in_sh(c, 0);
  int64_t axis;
  GCC_TRY(a_int(c, "axis", c->ver < 13 ? 1 : -1, &axis, d));
  GCC_TRY(norm_axis(c, axis, x->ndim, 0, "axis", &axis, d));
  int xi, node;
  GCC_TRY(in_ir(c, 0, &xi, d));
  if (c->ver >= 13 || axis == x->ndim - 1) {
    /* opset 13: along one axis; before, the input is coerced to 2-D at
     * `axis`, which is the same thing when axis is the last one */
    GCC_TRY(emit(c, op, &xi, 1, 0, F32, x, NULL, &node, d));
    return gcc_node_set_int(c->I->g, node, "axis", axis) ? oom(d) : GCC_OK;
  }
  /* opset < 13: softmax over the flattened dims [axis, rank) */
  tshape lo = {axis, {{0, 0}}}, hi = {x->ndim - (int)axis, {{0, 0}}};
  for (int i = 0; i < x->ndim; i++)
    if (i < axis)
      lo.d[i] = x->d[i];
    else
      hi.d[i - axis] = x->d[i];
  sdim a, b;
  if (!tshape_numel(&lo, &a) || !tshape_numel(&hi, &b) || b.sym)
    return node_err(c, d, GCC_ERR_SHAPE, "cannot coerce the input to 2-D at axis %" PRId64, axis);
  tshape flat = {2, {a, b}};
  int t1, t2;
  GCC_TRY(emit_reshape(c, xi, &flat, -1, F32, &t1, d));
  GCC_TRY(emit(c, op, &t1, 1, -1, F32, &flat, &t2, &node, d));
  if (gcc_node_set_int(c->I->g, node, "axis", 1))
    return oom(d);
  return emit_reshape(c, t2, x, 0, F32, NULL, d);
}

gcc_status cv_softmax(nctx *c, gcc_diag *d) {
  return softmax_like(c, GCC_OP_SOFTMAX, d);
}
gcc_status cv_log_softmax(nctx *c, gcc_diag *d) {
  return softmax_like(c, GCC_OP_LOG_SOFTMAX, d);
}

gcc_status cv_lrn(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "alpha", "beta", "bias", "size", (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 1, d));
  GCC_TRY(need_float(c, 0, d));
  int64_t size;
  float alpha, beta, bias;
  if (!attr(c, "size"))
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "attribute 'size' is missing");
  GCC_TRY(a_int(c, "size", 1, &size, d));
  GCC_TRY(a_float(c, "alpha", 1e-4f, &alpha, d));
  GCC_TRY(a_float(c, "beta", 0.75f, &beta, d));
  GCC_TRY(a_float(c, "bias", 1.0f, &bias, d));
  if (size < 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "size must be >= 1");
  const tshape *x = in_sh(c, 0);
  char a[128];
  for (int i = 1; i < x->ndim; i++)
    if (x->d[i].sym)
      return node_err(c, d, GCC_ERR_SHAPE, "X %s has a batch-dependent dim past dim 0",
                      tshape_str(x, a, sizeof a));
  if (x->ndim < 3)
    return node_err(c, d, GCC_ERR_SHAPE, "X %s must be [N, C, D1, ...]",
                    tshape_str(x, a, sizeof a));
  int xi, node;
  GCC_TRY(in_ir(c, 0, &xi, d));
  GCC_TRY(emit(c, GCC_OP_LRN, &xi, 1, 0, F32, x, NULL, &node, d));
  gcc_graph *g = c->I->g;
  if (gcc_node_set_int(g, node, "size", size) || gcc_node_set_float(g, node, "alpha", alpha) ||
      gcc_node_set_float(g, node, "beta", beta) || gcc_node_set_float(g, node, "bias", bias))
    return oom(d);
  return GCC_OK;
}

/* ---- shape ops ------------------------------------------------------------------ */

gcc_status cv_flatten(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "axis", (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 1, d));
  const tshape *x = in_sh(c, 0);
  int64_t axis;
  GCC_TRY(a_int(c, "axis", 1, &axis, d));
  if (axis < 0 && c->ver < 11)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "a negative axis needs opset 11");
  GCC_TRY(norm_axis(c, axis, x->ndim, 1, "axis", &axis, d));
  tshape lo = {(int)axis, {{0, 0}}}, hi = {x->ndim - (int)axis, {{0, 0}}};
  for (int i = 0; i < x->ndim; i++)
    if (i < axis)
      lo.d[i] = x->d[i];
    else
      hi.d[i - axis] = x->d[i];
  sdim a, b;
  if (!tshape_numel(&lo, &a) || !tshape_numel(&hi, &b))
    return node_err(c, d, GCC_ERR_SHAPE, "cannot flatten at axis %" PRId64, axis);
  tshape s = {2, {a, b}};
  int xi;
  GCC_TRY(in_ir(c, 0, &xi, d));
  return emit_reshape(c, xi, &s, 0, in_dt(c, 0), NULL, d);
}

/* ONNX Reshape's target: 0 copies the input dim (unless allowzero), -1 is
 * inferred from the element count. */
static gcc_status reshape_target(nctx *c, const tshape *x, const int64_t *t, int64_t n,
                                 int allowzero, tshape *out, gcc_diag *d) {
  char a[128];
  if (n > GCC_MAX_DIMS)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "%" PRId64 " dims (at most %d)", n, GCC_MAX_DIMS);
  out->ndim = (int)n;
  int infer = -1;
  for (int i = 0; i < n; i++) {
    if (t[i] == 0 && !allowzero) {
      if (i >= x->ndim)
        return node_err(c, d, GCC_ERR_SHAPE, "shape entry %d is 0 but the input %s has no dim %d",
                        i, tshape_str(x, a, sizeof a), i);
      out->d[i] = x->d[i];
    } else if (t[i] == -1) {
      if (infer >= 0)
        return node_err(c, d, GCC_ERR_SHAPE, "more than one -1 in the shape");
      infer = i;
      out->d[i] = (sdim){1, 0};
    } else if (t[i] <= 0) {
      return node_err(c, d, t[i] == 0 ? GCC_ERR_UNSUPPORTED : GCC_ERR_SHAPE,
                      "shape entry %d is %" PRId64 "%s", i, t[i],
                      t[i] == 0 ? " with allowzero (zero-size tensors are not supported)" : "");
    } else {
      out->d[i] = (sdim){t[i], 0};
    }
  }
  sdim nx, ny;
  if (!tshape_numel(x, &nx) || !tshape_numel(out, &ny))
    return node_err(c, d, GCC_ERR_SHAPE, "element count overflows");
  if (infer >= 0) {
    if (ny.sym && !nx.sym)
      return node_err(c, d, GCC_ERR_SHAPE, "cannot infer -1 from %s", tshape_str(x, a, sizeof a));
    if (ny.v == 0 || nx.v % ny.v != 0)
      return node_err(c, d, GCC_ERR_SHAPE, "cannot infer -1: %s does not divide",
                      tshape_str(x, a, sizeof a));
    out->d[infer] = (sdim){nx.v / ny.v, nx.sym && !ny.sym};
    if (!tshape_numel(out, &ny))
      return node_err(c, d, GCC_ERR_SHAPE, "element count overflows");
  }
  if (nx.v != ny.v || nx.sym != ny.sym) {
    char b[128];
    return node_err(c, d, GCC_ERR_SHAPE, "cannot reshape %s to %s (element counts differ%s)",
                    tshape_str(x, a, sizeof a), tshape_str(out, b, sizeof b),
                    nx.sym || ny.sym ? " for a symbolic batch N" : "");
  }
  return GCC_OK;
}

gcc_status cv_reshape(nctx *c, gcc_diag *d) {
  if (c->ver == 1)
    GCC_TRY(allow_attrs(c, d, "shape", "consumed_inputs", (char *)NULL));
  else if (c->ver < 14)
    GCC_TRY(allow_attrs(c, d, (char *)NULL));
  else
    GCC_TRY(allow_attrs(c, d, "allowzero", (char *)NULL));
  GCC_TRY(no_consumed_inputs(c, d));
  GCC_TRY(need_inputs(c, c->ver == 1 ? 1 : 2, c->ver == 1 ? 1 : 2, d));
  const int64_t *t;
  int64_t n;
  if (c->ver == 1) {
    int ni;
    GCC_TRY(a_ints(c, "shape", &t, &ni, d));
    if (ni < 0)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "attribute 'shape' is missing");
    n = ni;
  } else if (has_symv(c, 1)) {
    GCC_TRY(sym_target(c, 1, in_sh(c, 0), 0, &t, &n, d));
  } else {
    GCC_TRY(const_ints(c, in_idx(c, 1), "shape input", &t, &n, d));
  }
  int64_t allowzero;
  GCC_TRY(a_int(c, "allowzero", 0, &allowzero, d));
  if (allowzero && has_symv(c, 1)) {
    /* a shape computed from the batch size (the dynamo exporter's view:
     * Concat(Shape(x)[0], T, ...) with allowzero = 1): sym_target wrote 0
     * for "the input's batch dim", which is no zero-size entry; a constant
     * 0 among the entries still is one */
    const sdim *tv;
    int64_t nv;
    GCC_TRY(sym_in(c, 1, &tv, &nv, d));
    for (int64_t i = 0; i < nv; i++)
      if (!tv[i].sym && tv[i].v == 0)
        return node_err(c, d, GCC_ERR_UNSUPPORTED,
                        "shape entry %" PRId64 " is 0 with allowzero (zero-size tensors are not "
                        "supported)",
                        i);
    allowzero = 0;
  }
  tshape s;
  GCC_TRY(reshape_target(c, in_sh(c, 0), t, n, (int)allowzero, &s, d));
  ival *x = imp_val(c->I, in_idx(c, 0));
  if (x->symv)
    return sym_reshape(c, &s, d);
  if (x->aff)
    return aff_reshape(c, &s, d);
  if (x->is_const) { /* a constant reshaped is a constant */
    GCC_TRY(set_const(c, 0, x->onnx_dt, &s, NULL, x->bytes, d));
    ival *o = imp_val(c->I, out_idx(c, 0));
    if (o)
      o->data = x->data, o->trainable = x->trainable;
    mark_folded(c);
    return GCC_OK;
  }
  int xi;
  GCC_TRY(in_ir(c, 0, &xi, d));
  return emit_reshape(c, xi, &s, 0, x->onnx_dt, NULL, d);
}

/* The axes of Squeeze/Unsqueeze: an attribute before opset 13, an input
 * (a constant) from 13. *n = -1 when there are none. */
static gcc_status read_axes(nctx *c, const int64_t **axes, int64_t *n, gcc_diag *d) {
  if (c->ver < 13) {
    GCC_TRY(allow_attrs(c, d, "axes", (char *)NULL));
    GCC_TRY(need_inputs(c, 1, 1, d));
    int ni;
    GCC_TRY(a_ints(c, "axes", axes, &ni, d));
    *n = ni;
    return GCC_OK;
  }
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 2, d));
  *n = -1;
  if (in_idx(c, 1) < 0)
    return GCC_OK;
  return const_ints(c, in_idx(c, 1), "axes input", axes, n, d);
}

/* A reshape of input 0 to `s`: folded for a constant, an IR Reshape else. */
static gcc_status to_shape(nctx *c, const tshape *s, gcc_diag *d) {
  ival *x = imp_val(c->I, in_idx(c, 0));
  if (x->symv)
    return sym_reshape(c, s, d);
  if (x->aff)
    return aff_reshape(c, s, d);
  if (x->is_const) {
    GCC_TRY(set_const(c, 0, x->onnx_dt, s, NULL, x->bytes, d));
    ival *o = imp_val(c->I, out_idx(c, 0));
    if (o)
      o->data = x->data, o->trainable = x->trainable;
    mark_folded(c);
    return GCC_OK;
  }
  int xi;
  GCC_TRY(in_ir(c, 0, &xi, d));
  return emit_reshape(c, xi, s, 0, x->onnx_dt, NULL, d);
}

gcc_status cv_squeeze(nctx *c, gcc_diag *d) {
  const int64_t *axes;
  int64_t n;
  GCC_TRY(read_axes(c, &axes, &n, d));
  const tshape *x = in_sh(c, 0);
  int drop[GCC_MAX_DIMS] = {0};
  char a[128];
  if (n < 0) {
    for (int i = 0; i < x->ndim; i++) {
      if (x->d[i].sym)
        return node_err(c, d, GCC_ERR_SHAPE,
                        "Squeeze without axes over %s: whether the symbolic batch dim is 1 is "
                        "not known at import; give the axes",
                        tshape_str(x, a, sizeof a));
      drop[i] = x->d[i].v == 1;
    }
  } else {
    for (int64_t k = 0; k < n; k++) {
      int64_t ax = 0;
      GCC_TRY(norm_axis(c, axes[k], x->ndim, 0, "axis", &ax, d));
      if (c->ver < 11 && axes[k] < 0)
        return node_err(c, d, GCC_ERR_INVALID_GRAPH, "a negative axis needs opset 11");
      if (drop[ax])
        return node_err(c, d, GCC_ERR_INVALID_GRAPH, "axis %" PRId64 " is listed twice", ax);
      if (x->d[ax].sym || x->d[ax].v != 1)
        return node_err(c, d, GCC_ERR_SHAPE, "dim %" PRId64 " of %s is not 1", ax,
                        tshape_str(x, a, sizeof a));
      drop[ax] = 1;
    }
  }
  tshape s = {0, {{0, 0}}};
  for (int i = 0; i < x->ndim; i++)
    if (!drop[i])
      s.d[s.ndim++] = x->d[i];
  return to_shape(c, &s, d);
}

gcc_status cv_unsqueeze(nctx *c, gcc_diag *d) {
  const int64_t *axes;
  int64_t n;
  GCC_TRY(read_axes(c, &axes, &n, d));
  if (n < 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "needs axes");
  const tshape *x = in_sh(c, 0);
  int64_t rank = x->ndim + n;
  if (rank > GCC_MAX_DIMS)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "the result has %" PRId64 " dims (at most %d)", rank,
                    GCC_MAX_DIMS);
  int one[GCC_MAX_DIMS] = {0};
  for (int64_t k = 0; k < n; k++) {
    int64_t ax = 0;
    if (c->ver < 11 && axes[k] < 0)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "a negative axis needs opset 11");
    GCC_TRY(norm_axis(c, axes[k], (int)rank, 0, "axis", &ax, d));
    if (one[ax])
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "axis %" PRId64 " is listed twice", ax);
    one[ax] = 1;
  }
  tshape s = {(int)rank, {{0, 0}}};
  for (int i = 0, j = 0; i < rank; i++)
    s.d[i] = one[i] ? (sdim){1, 0} : x->d[j++];
  return to_shape(c, &s, d);
}

/* Concat: constants of any dtype are folded (shape computations); the rest
 * is an IR Concat (float). */
gcc_status cv_concat(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "axis", (char *)NULL));
  int n = n_in(c);
  if (n < 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "needs at least one input");
  int64_t axis;
  if (c->ver < 4) {
    GCC_TRY(a_int(c, "axis", 1, &axis, d));
  } else {
    if (!attr(c, "axis"))
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "attribute 'axis' is missing");
    GCC_TRY(a_int(c, "axis", 0, &axis, d));
  }
  const tshape *x0 = in_sh(c, 0);
  if (axis < 0 && c->ver < 11)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "a negative axis needs opset 11");
  GCC_TRY(norm_axis(c, axis, x0->ndim, 0, "axis", &axis, d));
  for (int k = 0; k < n; k++)
    if (has_symv(c, k))
      return sym_concat(c, d);
  tshape s = *x0;
  s.d[axis].v = 0;
  int all_const = 1, dt = in_dt(c, 0);
  char a[128], b[128];
  for (int k = 0; k < n; k++) {
    if (in_idx(c, k) < 0)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "input %d is empty", k);
    const tshape *xk = in_sh(c, k);
    int ok = xk->ndim == x0->ndim && in_dt(c, k) == dt && xk->d[axis].sym == x0->d[axis].sym;
    for (int i = 0; ok && i < x0->ndim; i++)
      ok = i == axis || (xk->d[i].v == x0->d[i].v && xk->d[i].sym == x0->d[i].sym);
    if (!ok)
      return node_err(c, d, GCC_ERR_SHAPE,
                      "input %d %s does not match input 0 %s but along axis %" PRId64, k,
                      tshape_str(xk, a, sizeof a), tshape_str(x0, b, sizeof b), axis);
    s.d[axis].v += xk->d[axis].v;
    all_const &= imp_val(c->I, in_idx(c, k))->is_const;
  }
  if (all_const) {
    size_t es = onnx_dtype_size(dt);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; i++)
      outer *= s.d[i].v;
    for (int i = (int)axis + 1; i < s.ndim; i++)
      inner *= s.d[i].v;
    size_t bytes = (size_t)(outer * s.d[axis].v * inner) * es;
    uint8_t *data = malloc(bytes ? bytes : 1);
    if (!data)
      return oom(d);
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
      const ival *v = imp_val(c->I, in_idx(c, k));
      int64_t len = v->sh.d[axis].v * inner;
      for (int64_t o = 0; o < outer; o++)
        memcpy(data + (size_t)(o * s.d[axis].v * inner + off) * es,
               (const uint8_t *)v->data + (size_t)(o * len) * es, (size_t)len * es);
      off += len;
    }
    GCC_TRY(set_const(c, 0, dt, &s, data, bytes, d));
    mark_folded(c);
    return GCC_OK;
  }
  int *ins = malloc((size_t)n * sizeof *ins), node = -1;
  if (!ins)
    return oom(d);
  gcc_status st = GCC_OK;
  for (int k = 0; k < n && st == GCC_OK; k++) {
    st = need_movable(c, k, d);
    if (st == GCC_OK)
      st = in_ir(c, k, &ins[k], d);
  }
  if (st == GCC_OK && n == 1) {
    set_alias(c, 0, in_idx(c, 0));
    mark_folded(c);
  } else if (st == GCC_OK) {
    st = emit(c, GCC_OP_CONCAT, ins, n, 0, dt, &s, NULL, &node, d);
    if (st == GCC_OK && gcc_node_set_int(c->I->g, node, "axis", axis))
      st = oom(d);
  }
  free(ins);
  return st;
}

gcc_status cv_transpose(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "perm", (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 1, d));
  const tshape *x = in_sh(c, 0);
  const int64_t *p;
  int np;
  GCC_TRY(a_ints(c, "perm", &p, &np, d));
  int64_t perm[GCC_MAX_DIMS];
  int seen[GCC_MAX_DIMS] = {0}, identity = 1;
  if (np >= 0 && np != x->ndim)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "perm has %d entries for rank %d", np, x->ndim);
  tshape s = {x->ndim, {{0, 0}}};
  for (int i = 0; i < x->ndim; i++) {
    perm[i] = np >= 0 ? p[i] : x->ndim - 1 - i; /* default: reverse the dims */
    if (perm[i] < 0 || perm[i] >= x->ndim || seen[perm[i]])
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "perm is not a permutation");
    seen[perm[i]] = 1;
    s.d[i] = x->d[perm[i]];
    identity &= perm[i] == i;
  }
  if (identity) {
    set_alias(c, 0, in_idx(c, 0));
    mark_folded(c);
    return GCC_OK;
  }
  if (fold_const_applies(c, 0))
    return fold_transpose(c, perm, &s, d);
  GCC_TRY(need_movable(c, 0, d));
  int xi, node;
  GCC_TRY(in_ir(c, 0, &xi, d));
  GCC_TRY(emit(c, GCC_OP_TRANSPOSE, &xi, 1, 0, in_dt(c, 0), &s, NULL, &node, d));
  return gcc_node_set_ints(c->I->g, node, "perm", perm, x->ndim) ? oom(d) : GCC_OK;
}

/* Pad: pads, value and mode are attributes before opset 11; pads and the
 * constant value (optional) inputs from 11, and axes (optional) from 18. */
gcc_status cv_pad(nctx *c, gcc_diag *d) {
  const tshape *x = in_sh(c, 0);
  int r = x->ndim;
  int64_t pads[2 * GCC_MAX_DIMS] = {0};
  double value = 0.0;
  char mode[32];
  if (c->ver < 11) {
    GCC_TRY(allow_attrs(c, d, c->ver == 1 ? "paddings" : "pads", "mode", "value", (char *)NULL));
    GCC_TRY(need_inputs(c, 1, 1, d));
    const int64_t *p;
    int np;
    GCC_TRY(a_ints(c, c->ver == 1 ? "paddings" : "pads", &p, &np, d));
    if (np != 2 * r)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "pads needs %d entries (2 * rank)", 2 * r);
    memcpy(pads, p, (size_t)np * sizeof *pads);
    float f;
    GCC_TRY(a_float(c, "value", 0.0f, &f, d));
    value = f;
  } else {
    GCC_TRY(allow_attrs(c, d, "mode", (char *)NULL));
    GCC_TRY(need_inputs(c, 2, c->ver >= 18 ? 4 : 3, d));
    const int64_t *p, *axes = NULL;
    int64_t np, nax = r;
    GCC_TRY(const_ints(c, in_idx(c, 1), "pads input", &p, &np, d));
    if (in_idx(c, 2) >= 0)
      GCC_TRY(const_scalar(c, in_idx(c, 2), "constant_value input", &value, d));
    if (in_idx(c, 3) >= 0)
      GCC_TRY(const_ints(c, in_idx(c, 3), "axes input", &axes, &nax, d));
    if (np != 2 * nax)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                      "pads has %" PRId64 " entries for %" PRId64 " axes", np, nax);
    int seen[GCC_MAX_DIMS] = {0};
    for (int64_t k = 0; k < nax; k++) {
      int64_t ax = k;
      if (axes)
        GCC_TRY(norm_axis(c, axes[k], r, 0, "axis", &ax, d));
      if (seen[ax])
        return node_err(c, d, GCC_ERR_INVALID_GRAPH, "axis %" PRId64 " is listed twice", ax);
      seen[ax] = 1;
      pads[ax] = p[k];
      pads[ax + r] = p[k + nax];
    }
  }
  GCC_TRY(a_string(c, "mode", "constant", mode, sizeof mode, d));
  if (strcmp(mode, "constant") != 0 && strcmp(mode, "edge") != 0 && strcmp(mode, "reflect") != 0)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "mode '%s' is not handled (constant, edge, reflect)",
                    mode);
  tshape s = *x;
  char a[128];
  for (int i = 0; i < r; i++) {
    if (x->d[i].sym && (pads[i] || pads[i + r]))
      return node_err(c, d, GCC_ERR_UNSUPPORTED, "padding the batch dim of %s",
                      tshape_str(x, a, sizeof a));
    if (!x->d[i].sym)
      s.d[i].v += pads[i] + pads[i + r];
    if (s.d[i].v <= 0)
      return node_err(c, d, GCC_ERR_SHAPE, "the pads leave dim %d of %s empty", i,
                      tshape_str(x, a, sizeof a));
    if (strcmp(mode, "constant") != 0 &&
        (pads[i] < 0 || pads[i + r] < 0 ||
         (strcmp(mode, "reflect") == 0 && (pads[i] >= x->d[i].v || pads[i + r] >= x->d[i].v))))
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "%s padding of dim %d by %" PRId64 ", %" PRId64 " (pads must be >= 0%s)",
                      mode, i, pads[i], pads[i + r],
                      strcmp(mode, "reflect") == 0 ? " and smaller than the dim" : "");
  }
  GCC_TRY(need_computable(c, 0, d));
  int xi, node;
  GCC_TRY(in_ir(c, 0, &xi, d));
  GCC_TRY(emit(c, GCC_OP_PAD, &xi, 1, 0, in_dt(c, 0), &s, NULL, &node, d));
  gcc_graph *g = c->I->g;
  if (gcc_node_set_ints(g, node, "pads", pads, 2 * r) ||
      gcc_node_set_float(g, node, "value", (float)value) ||
      gcc_node_set_string(g, node, "mode", mode))
    return oom(d);
  return GCC_OK;
}
