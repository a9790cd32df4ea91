/*
 * import_ops_select.c - ONNX -> gcc IR converters of the selection ops:
 * Size (folded: the element count of a shape known at import), Neg of
 * integer constants and shape values (folded), Trilu, ArgMax and ArgMin.
 * See onnx/import_ops.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "onnx/import_ops_internal.h"

#define I32 ONNX__TENSOR_PROTO__DATA_TYPE__INT32

/* Size (1, 13, 19, 21): an int64 scalar, the element count of the input,
 * whatever its dtype. Every dim is known at import except the symbolic
 * batch N, so it is folded: a constant, or a shape value v * N (onnx/
 * import_ops_shapecalc.c) that the shape arithmetic after it folds in turn;
 * nothing runs per step. */
gcc_status cv_size(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 1, d));
  const tshape *x = in_sh(c, 0);
  sdim n;
  char a[128];
  if (!tshape_numel(x, &n))
    return node_err(c, d, GCC_ERR_SHAPE,
                    "the element count of %s is a product of batch dims or "
                    "overflows int64",
                    tshape_str(x, a, sizeof a));
  tshape s = {0, {{0, 0}}};
  GCC_TRY(set_sym(c, 0, &s, &n, 1, d));
  mark_folded(c);
  return GCC_OK;
}

int sym_neg_applies(nctx *c) {
  if (n_in(c) != 1 || in_idx(c, 0) < 0)
    return 0;
  const ival *x = imp_val(c->I, in_idx(c, 0));
  return x->symv != NULL || (x->is_const && x->onnx_dt == I64);
}

/* -x element by element (a multiple of N stays one: its factor negated). */
gcc_status sym_neg(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  const sdim *vals;
  int64_t n;
  GCC_TRY(sym_in(c, 0, &vals, &n, d));
  sdim *r = malloc((size_t)(n > 0 ? n : 1) * sizeof *r);
  if (!r)
    return oom(d);
  for (int64_t i = 0; i < n; i++) {
    if (vals[i].v == INT64_MIN) {
      free(r);
      return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                      "element %" PRId64 " is the smallest int64, "
                      "whose negation overflows",
                      i);
    }
    r[i] = (sdim){-vals[i].v, vals[i].sym};
  }
  gcc_status s = set_sym(c, 0, in_sh(c, 0), r, n, d);
  free(r);
  GCC_TRY(s);
  mark_folded(c);
  return GCC_OK;
}

/* Trilu (14): X of rank >= 2 (float, int64, int32), `upper` (default 1)
 * and the optional int64 scalar input k (default 0), which must be a
 * constant: it becomes the IR node's attribute. A constant X that is not
 * a weight is folded. */
gcc_status cv_trilu(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "upper", (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 2, d));
  GCC_TRY(need_computable(c, 0, d));
  const tshape *x = in_sh(c, 0);
  char a[128];
  if (x->ndim < 2)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "input %s must have rank >= 2",
                    tshape_str(x, a, sizeof a));
  int64_t upper, k = 0;
  GCC_TRY(a_int(c, "upper", 1, &upper, d));
  if (upper != 0 && upper != 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "upper is %" PRId64 " (0 or 1)", upper);
  if (n_in(c) > 1 && in_idx(c, 1) >= 0) {
    const int64_t *kv;
    int64_t n;
    GCC_TRY(const_ints(c, in_idx(c, 1), "k input", &kv, &n, d));
    if (n != 1)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "k has %" PRId64 " elements (a scalar)", n);
    k = kv[0];
  }
  const ival *xv = imp_val(c->I, in_idx(c, 0));
  int64_t numel = tshape_static_numel(x);
  if (xv->is_const && !xv->trainable && xv->data && numel > 0) {
    /* a constant (the causal mask PyTorch's exporter builds from ones):
     * folded; upper keeps j - i >= k, lower keeps j - i <= k, else 0 */
    size_t es = onnx_dtype_size(xv->onnx_dt);
    uint8_t *o = malloc((size_t)numel * es);
    if (!o)
      return oom(d);
    int64_t rows = x->d[x->ndim - 2].v, cols = x->d[x->ndim - 1].v;
    for (int64_t e = 0; e < numel; e++) {
      int64_t j = e % cols, i = (e / cols) % rows;
      int keep = upper ? j - i >= k : j - i <= k;
      if (keep)
        memcpy(o + (size_t)e * es, (const uint8_t *)xv->data + (size_t)e * es, es);
      else
        memset(o + (size_t)e * es, 0, es);
    }
    GCC_TRY(set_const(c, 0, xv->onnx_dt, x, o, (size_t)numel * es, d));
    mark_folded(c);
    return GCC_OK;
  }
  int xi, node;
  GCC_TRY(in_ir(c, 0, &xi, d));
  GCC_TRY(emit(c, GCC_OP_TRILU, &xi, 1, 0, in_dt(c, 0), x, NULL, &node, d));
  if (gcc_node_set_int(c->I->g, node, "upper", upper) || gcc_node_set_int(c->I->g, node, "k", k))
    return oom(d);
  return GCC_OK;
}

/* ArgMax / ArgMin (1, 11, 12, 13): axis (default 0, negative from the end
 * since 11), keepdims (default 1), select_last_index (since 12, default 0);
 * X float, int64 or int32; Y int64. */
static gcc_status cv_arg(nctx *c, int op, gcc_diag *d) {
  if (c->ver >= 12)
    GCC_TRY(allow_attrs(c, d, "axis", "keepdims", "select_last_index", (char *)NULL));
  else
    GCC_TRY(allow_attrs(c, d, "axis", "keepdims", (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 1, d));
  GCC_TRY(need_computable(c, 0, d));
  const tshape *x = in_sh(c, 0);
  int64_t axis, keepdims, last;
  GCC_TRY(a_int(c, "axis", 0, &axis, d));
  GCC_TRY(a_int(c, "keepdims", 1, &keepdims, d));
  GCC_TRY(a_int(c, "select_last_index", 0, &last, d));
  if (keepdims != 0 && keepdims != 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "keepdims is %" PRId64 " (0 or 1)", keepdims);
  if (last != 0 && last != 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "select_last_index is %" PRId64 " (0 or 1)", last);
  if (x->ndim < 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "input must have rank >= 1");
  if (c->ver < 11 && axis < 0)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                    "axis %" PRId64 " is negative (allowed from opset 11)", axis);
  int64_t ax = 0;
  GCC_TRY(norm_axis(c, axis, x->ndim, 0, "axis", &ax, d));
  tshape s = {0, {{0, 0}}};
  for (int i = 0; i < x->ndim; i++) {
    if (i == ax && !keepdims)
      continue;
    s.d[s.ndim++] = i == ax ? (sdim){1, 0} : x->d[i];
  }
  int xi, node;
  GCC_TRY(in_ir(c, 0, &xi, d));
  GCC_TRY(emit(c, op, &xi, 1, 0, I64, &s, NULL, &node, d));
  gcc_graph *g = c->I->g;
  if (gcc_node_set_int(g, node, "axis", ax) || gcc_node_set_int(g, node, "keepdims", keepdims) ||
      gcc_node_set_int(g, node, "select_last_index", last))
    return oom(d);
  return GCC_OK;
}

gcc_status cv_arg_max(nctx *c, gcc_diag *d) {
  return cv_arg(c, GCC_OP_ARG_MAX, d);
}

gcc_status cv_arg_min(nctx *c, gcc_diag *d) {
  return cv_arg(c, GCC_OP_ARG_MIN, d);
}
