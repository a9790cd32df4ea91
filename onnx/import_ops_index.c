/*
 * import_ops_index.c - ONNX -> gcc IR converters of the indexing ops:
 * Gather. See onnx/import_ops.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "onnx/import_ops_internal.h"

#define I32 ONNX__TENSOR_PROTO__DATA_TYPE__INT32

static int64_t index_at(const ival *v, int64_t k) {
  return v->onnx_dt == I32 ? (int64_t)((const int32_t *)v->data)[k] : ((const int64_t *)v->data)[k];
}

/* Gather (1, 11, 13): Y = data.shape[:axis] + indices.shape +
 * data.shape[axis + 1:]. Constant data and indices (shape arithmetic: an
 * element of a shape vector) are folded; otherwise an IR Gather (an
 * embedding lookup of a weight by ids, an index select of an activation by
 * constant indices). Constant indices are checked against a known axis
 * here; the others when the step runs. */
gcc_status cv_gather(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "axis", (char *)NULL));
  GCC_TRY(need_inputs(c, 2, 2, d));
  GCC_TRY(need_computable(c, 0, d));
  int idt = in_dt(c, 1);
  if (idt != I64 && idt != I32)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "indices have dtype %s (int64 or int32)",
                    onnx_dtype_name(idt));
  const tshape *x = in_sh(c, 0), *q = in_sh(c, 1);
  char a[128], b[128];
  if (x->ndim < 1)
    return node_err(c, d, GCC_ERR_SHAPE, "data must have rank >= 1");
  if (x->ndim - 1 + q->ndim > GCC_MAX_DIMS)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "the output of data %s and indices %s has more "
                    "than %d dims",
                    tshape_str(x, a, sizeof a), tshape_str(q, b, sizeof b), GCC_MAX_DIMS);
  int64_t axis;
  GCC_TRY(a_int(c, "axis", 0, &axis, d));
  GCC_TRY(norm_axis(c, axis, x->ndim, 0, "axis", &axis, d));
  tshape s = {0, {{0, 0}}};
  for (int i = 0; i < axis; i++)
    s.d[s.ndim++] = x->d[i];
  for (int i = 0; i < q->ndim; i++)
    s.d[s.ndim++] = q->d[i];
  for (int i = (int)axis + 1; i < x->ndim; i++)
    s.d[s.ndim++] = x->d[i];
  const ival *xv = imp_val(c->I, in_idx(c, 0)), *iv = imp_val(c->I, in_idx(c, 1));
  sdim ns;
  if (!tshape_numel(&s, &ns))
    return node_err(c, d, GCC_ERR_SHAPE, "output %s has a product of batch dims",
                    tshape_str(&s, a, sizeof a));
  int64_t dim = x->d[axis].v, n_idx = tshape_static_numel(q);
  if (iv->is_const && !x->d[axis].sym)
    for (int64_t k = 0; k < n_idx; k++) {
      int64_t v = index_at(iv, k);
      if (v < -dim || v >= dim)
        return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                        "index %" PRId64 " at position %" PRId64 " is outside [-%" PRId64
                        ", %" PRId64 ") (axis %" PRId64 " of data %s)",
                        v, k, dim, dim, axis, tshape_str(x, a, sizeof a));
    }
  /* both known: fold (not a weight imported for training: it stays a
   * parameter that the gradient reaches) */
  if (xv->is_const && iv->is_const && !(xv->trainable && c->I->train)) {
    int dt = in_dt(c, 0);
    size_t es = onnx_dtype_size(dt);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; i++)
      outer *= x->d[i].v;
    for (int i = (int)axis + 1; i < x->ndim; i++)
      inner *= x->d[i].v;
    size_t bytes = (size_t)(outer * n_idx * inner) * es, row = (size_t)inner * es;
    uint8_t *data = malloc(bytes ? bytes : 1);
    if (!data)
      return oom(d);
    for (int64_t o = 0; o < outer; o++)
      for (int64_t j = 0; j < n_idx; j++) {
        int64_t v = index_at(iv, j);
        v += v < 0 ? dim : 0;
        memcpy(data + (size_t)(o * n_idx + j) * row,
               (const uint8_t *)xv->data + (size_t)(o * dim + v) * row, row);
      }
    GCC_TRY(set_const(c, 0, dt, &s, data, bytes, d));
    mark_folded(c);
    return GCC_OK;
  }
  int ins[2], node;
  GCC_TRY(in_ir(c, 0, &ins[0], d));
  GCC_TRY(in_ir(c, 1, &ins[1], d));
  GCC_TRY(emit(c, GCC_OP_GATHER, ins, 2, 0, in_dt(c, 0), &s, NULL, &node, d));
  return gcc_node_set_int(c->I->g, node, "axis", axis) ? oom(d) : GCC_OK;
}
