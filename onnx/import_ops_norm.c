/*
 * import_ops_norm.c - the ONNX normalisation layers of Transformer models:
 * LayerNormalization (opset 17; nn.LayerNorm as both of PyTorch's exporters
 * write it). See onnx/import_ops.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "graph/ops.h"
#include "onnx/import_ops_internal.h"

/* LayerNormalization-17 (X, Scale, B?) -> Y (, Mean, InvStdDev): the IR op
 * of the same name (graph/ops.h). Attributes axis (default -1), epsilon
 * (1e-5) and stash_type (1: float32 statistics, the only one taken). Scale
 * and B must have the normalised shape X.dims[axis:] (what the exporters
 * write for nn.LayerNorm's weight and bias), and those dims must not depend
 * on the symbolic batch. Mean and InvStdDev become outputs of the IR node
 * when a node or the graph reads them. */
gcc_status cv_layer_norm(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "axis", "epsilon", "stash_type", (char *)NULL));
  GCC_TRY(need_inputs(c, 2, 3, d));
  const int has_b = n_in(c) > 2 && in_idx(c, 2) >= 0;
  for (int k = 0; k < 2 + has_b; k++)
    GCC_TRY(need_float(c, k, d));
  int64_t axis, stash;
  float eps;
  GCC_TRY(a_int(c, "axis", -1, &axis, d));
  GCC_TRY(a_float(c, "epsilon", 1e-5f, &eps, d));
  GCC_TRY(a_int(c, "stash_type", 1, &stash, d));
  if (stash != 1)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "stash_type %" PRId64 " is not supported (1, float32 statistics, only)", stash);
  const tshape *x = in_sh(c, 0);
  char a[128], b[128];
  if (x->ndim < 1)
    return node_err(c, d, GCC_ERR_SHAPE, "X must have rank >= 1, got a scalar");
  GCC_TRY(norm_axis(c, axis, x->ndim, 0, "axis", &axis, d));
  for (int i = (int)axis; i < x->ndim; i++)
    if (x->d[i].sym)
      return node_err(c, d, GCC_ERR_SHAPE,
                      "X %s has a batch-dependent dim among the normalised dims [%" PRId64
                      ", %d): give the input a fixed batch",
                      tshape_str(x, a, sizeof a), axis, x->ndim);
  tshape norm = {x->ndim - (int)axis, {{0, 0}}};
  for (int i = (int)axis; i < x->ndim; i++)
    norm.d[i - axis] = x->d[i];
  for (int k = 1; k < 2 + has_b; k++) {
    const tshape *p = in_sh(c, k);
    int same = p->ndim == norm.ndim;
    for (int i = 0; same && i < p->ndim; i++)
      same = !p->d[i].sym && p->d[i].v == norm.d[i].v;
    if (!same)
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "%s %s must have the normalised shape X.dims[%" PRId64
                      ":] = %s (a broadcast one is not supported)",
                      k == 1 ? "Scale" : "B", tshape_str(p, a, sizeof a), axis,
                      tshape_str(&norm, b, sizeof b));
  }
  int ins[3], node;
  for (int k = 0; k < 2 + has_b; k++)
    GCC_TRY(in_ir(c, k, &ins[k], d));
  GCC_TRY(emit(c, GCC_OP_LAYER_NORM, ins, 2 + has_b, 0, F32, x, NULL, &node, d));
  gcc_graph *g = c->I->g;
  if (gcc_node_set_int(g, node, "axis", axis) || gcc_node_set_float(g, node, "epsilon", eps))
    return oom(d);
  /* Mean and InvStdDev: X.dims[:axis] then ones; the IR node has them up to
   * the last one read */
  int last = 0;
  for (int k = 1; k < 3; k++)
    if (out_used(c, k))
      last = k;
  tshape st = *x;
  for (int i = (int)axis; i < st.ndim; i++)
    st.d[i] = (sdim){1, 0};
  for (int k = 1; k <= last; k++)
    GCC_TRY(emit_output(c, node, k, F32, &st, d));
  return GCC_OK;
}
