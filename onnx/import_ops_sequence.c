/*
 * import_ops_sequence.c - the sequence ops as PyTorch's default exporter
 * writes them for `q, k, v = x.split(n, dim)`: SplitToSequence then
 * SequenceAt at constant positions. The sequence is no run-time value: it
 * is recorded at import (ival.seq: the tensor, the axis, the part sizes)
 * and each SequenceAt becomes the IR Slice of its part (and a Reshape
 * dropping the axis for keepdims 0), so nothing of the sequence runs per
 * step. Any other reader of a sequence is refused naming it (see
 * materialise in onnx/import.c). See onnx/import_ops.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "onnx/import_ops_internal.h"

/* SplitToSequence (11): input, optional split (a constant scalar: parts of
 * that size, the last smaller; or a 1-D constant: the sizes), axis
 * (default 0), keepdims (default 1; used only without split: parts of 1,
 * the axis dropped when 0). The split axis must not be the batch. */
gcc_status cv_split_to_sequence(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "axis", "keepdims", (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 2, d));
  const tshape *x = in_sh(c, 0);
  const ival *xv = imp_val(c->I, in_idx(c, 0));
  if (xv->symv || xv->seq)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "splits '%s', a %s", xv->name,
                    xv->seq ? "sequence" : "shape value holding the batch size");
  int64_t axis, keepdims;
  GCC_TRY(a_int(c, "axis", 0, &axis, d));
  GCC_TRY(a_int(c, "keepdims", 1, &keepdims, d));
  GCC_TRY(norm_axis(c, axis, x->ndim, 0, "axis", &axis, d));
  if (keepdims != 0 && keepdims != 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "keepdims is %" PRId64 " (0 or 1)", keepdims);
  if (x->d[axis].sym)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "splits axis %" PRId64 ", the batch", axis);
  int64_t dim = x->d[axis].v, n = 0;
  int64_t *sizes = NULL;
  int squeeze = 0;
  if (n_in(c) > 1 && in_idx(c, 1) >= 0) {
    const int64_t *sp;
    int64_t ns;
    GCC_TRY(const_ints(c, in_idx(c, 1), "split input", &sp, &ns, d));
    int scalar = in_sh(c, 1)->ndim == 0;
    if (scalar && (ns != 1 || sp[0] < 1))
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "split %" PRId64 " (a size >= 1)",
                      ns == 1 ? sp[0] : ns);
    n = scalar ? (dim + sp[0] - 1) / sp[0] : ns;
    sizes = malloc((size_t)(n > 0 ? n : 1) * sizeof *sizes);
    if (!sizes)
      return oom(d);
    GCC_TRY(pool_add(c->I, sizes, d));
    int64_t total = 0;
    for (int64_t k = 0; k < n; k++) {
      sizes[k] = scalar ? (k < n - 1 ? sp[0] : dim - sp[0] * (n - 1)) : sp[k];
      if (sizes[k] < 1)
        return node_err(c, d, GCC_ERR_UNSUPPORTED,
                        "part %" PRId64 " has size %" PRId64
                        " (zero-size tensors are not supported)",
                        k, sizes[k]);
      total += sizes[k];
    }
    if (total != dim)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                      "the parts add up to %" PRId64 ", not to the dim %" PRId64, total, dim);
  } else {
    n = dim;
    squeeze = keepdims == 0;
    sizes = malloc((size_t)(n > 0 ? n : 1) * sizeof *sizes);
    if (!sizes)
      return oom(d);
    GCC_TRY(pool_add(c->I, sizes, d));
    for (int64_t k = 0; k < n; k++)
      sizes[k] = 1;
  }
  int o = out_idx(c, 0);
  if (o < 0)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "has no output");
  ival *ov = imp_val(c->I, o);
  if (ov->is_output)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "the sequence '%s' is a graph output (sequences are not supported as values)",
                    ov->name);
  iseq *q = malloc(sizeof *q);
  if (!q)
    return oom(d);
  GCC_TRY(pool_add(c->I, q, d));
  *q = (iseq){in_idx(c, 0), (int)axis, squeeze, n, sizes};
  ov->seq = q;
  ov->onnx_dt = xv->onnx_dt;
  ov->sh = *x;
  ov->done = 1;
  mark_folded(c);
  return GCC_OK;
}

/* SequenceAt (11): the part at a constant position (negative from the
 * end) of a sequence made by SplitToSequence: an IR Slice of the split
 * tensor (and a Reshape for keepdims 0). */
gcc_status cv_sequence_at(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  GCC_TRY(need_inputs(c, 2, 2, d));
  const ival *sv = imp_val(c->I, in_idx(c, 0));
  if (!sv->seq)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "input '%s' is not a sequence made by SplitToSequence (the only sequence "
                    "this version reads)",
                    sv->name);
  const iseq *q = sv->seq;
  const int64_t *pos;
  int64_t np;
  GCC_TRY(const_ints(c, in_idx(c, 1), "position input", &pos, &np, d));
  if (np != 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "position has %" PRId64 " elements (a scalar)",
                    np);
  int64_t p = pos[0] < 0 ? pos[0] + q->n : pos[0];
  if (p < 0 || p >= q->n)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                    "position %" PRId64 " is outside [-%" PRId64 ", %" PRId64 ")", pos[0], q->n,
                    q->n);
  int64_t off = 0;
  for (int64_t k = 0; k < p; k++)
    off += q->sizes[k];
  int64_t b = off, e = off + q->sizes[p], ax = q->axis;
  if (!q->squeeze) {
    GCC_TRY(slice_of(c, q->src, 0, &b, &e, &ax, NULL, 1, d));
  } else {
    const ival *x = imp_val(c->I, q->src);
    tshape s = {0, {{0, 0}}};
    for (int i = 0; i < x->sh.ndim; i++)
      if (i != ax)
        s.d[s.ndim++] = x->sh.d[i];
    int tmp, xi, node;
    GCC_TRY(ir_of(c, q->src, &xi, d));
    tshape mid = x->sh;
    mid.d[ax] = (sdim){1, 0};
    GCC_TRY(emit(c, GCC_OP_SLICE, &xi, 1, -1, x->onnx_dt, &mid, &tmp, &node, d));
    gcc_graph *g = c->I->g;
    if (gcc_node_set_ints(g, node, "starts", &b, 1) || gcc_node_set_ints(g, node, "ends", &e, 1) ||
        gcc_node_set_ints(g, node, "axes", &ax, 1))
      return oom(d);
    GCC_TRY(emit_reshape(c, tmp, &s, 0, x->onnx_dt, NULL, d));
  }
  if (!c->n_ir)
    mark_folded(c);
  return GCC_OK;
}
