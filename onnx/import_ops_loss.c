/*
 * import_ops_loss.c - ONNX -> gcc IR converters of the losses:
 * NegativeLogLikelihoodLoss (12, 13) and SoftmaxCrossEntropyLoss (12, 13),
 * what PyTorch's exporters write for F.nll_loss and F.cross_entropy. See
 * onnx/import_ops.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "graph/ops.h"
#include "onnx/import_ops_internal.h"

#define I32 ONNX__TENSOR_PROTO__DATA_TYPE__INT32

static int same_dim(sdim a, sdim b) {
  return a.sym == b.sym && a.v == b.v;
}

/* The checks both ops share: input 0 float (N, C, d1..dk), input 1 int64 /
 * int32 (N, d1..dk), input 2 (optional) float (C) not depending on the
 * batch; reduction none | sum | mean. *red: the reduction; *ignore: the
 * ignore_index or NLL_NO_IGNORE; *has_w: a weight is given. */
static gcc_status loss_common(nctx *c, const char *what, char *red, size_t cap, int64_t *ignore,
                              int *has_w, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "reduction", "ignore_index", (char *)NULL));
  GCC_TRY(need_inputs(c, 2, 3, d));
  GCC_TRY(need_float(c, 0, d));
  *has_w = n_in(c) > 2 && in_idx(c, 2) >= 0;
  if (*has_w)
    GCC_TRY(need_float(c, 2, d));
  int tdt = in_dt(c, 1);
  if (tdt != I64 && tdt != I32)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "%s have dtype %s (int64 or int32)", what,
                    onnx_dtype_name(tdt));
  GCC_TRY(a_string(c, "reduction", "mean", red, cap, d));
  if (strcmp(red, "none") != 0 && strcmp(red, "sum") != 0 && strcmp(red, "mean") != 0)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                    "reduction '%s' is not one of \"none\", \"sum\", \"mean\"", red);
  *ignore = NLL_NO_IGNORE;
  if (attr(c, "ignore_index"))
    GCC_TRY(a_int(c, "ignore_index", 0, ignore, d));
  const tshape *x = in_sh(c, 0), *t = in_sh(c, 1);
  char a[128], b[128];
  if (x->ndim < 2)
    return node_err(c, d, GCC_ERR_SHAPE, "input %s must be (N, C) or (N, C, d1, ..., dk)",
                    tshape_str(x, a, sizeof a));
  int ok = t->ndim == x->ndim - 1 && same_dim(t->d[0], x->d[0]);
  for (int i = 2; ok && i < x->ndim; i++)
    ok = same_dim(t->d[i - 1], x->d[i]);
  if (!ok)
    return node_err(c, d, GCC_ERR_SHAPE, "%s %s must be (N, d1, ..., dk) for input %s", what,
                    tshape_str(t, a, sizeof a), tshape_str(x, b, sizeof b));
  if (x->d[1].sym)
    return node_err(c, d, GCC_ERR_SHAPE, "input %s has a batch-dependent class dim",
                    tshape_str(x, a, sizeof a));
  if (*has_w) {
    const tshape *w = in_sh(c, 2);
    if (w->ndim != 1 || !same_dim(w->d[0], x->d[1]))
      return node_err(c, d, GCC_ERR_SHAPE, "weight %s must be (C) for input %s",
                      tshape_str(w, a, sizeof a), tshape_str(x, b, sizeof b));
  }
  return GCC_OK;
}

/* The IR NegativeLogLikelihoodLoss of IR values x (log-probabilities), the
 * node's input 1 (target) and 2 (weight) into ONNX output 0. */
static gcc_status emit_nll(nctx *c, int x, const char *red, int64_t ignore, int has_w,
                           gcc_diag *d) {
  int ins[3] = {x, -1, -1}, node;
  GCC_TRY(in_ir(c, 1, &ins[1], d));
  if (has_w)
    GCC_TRY(in_ir(c, 2, &ins[2], d));
  tshape scalar = {0, {{0, 0}}};
  const tshape *s = strcmp(red, "none") == 0 ? in_sh(c, 1) : &scalar;
  GCC_TRY(emit(c, GCC_OP_NLL_LOSS, ins, has_w ? 3 : 2, 0, F32, s, NULL, &node, d));
  if (gcc_node_set_string(c->I->g, node, "reduction", red))
    return oom(d);
  if (ignore != NLL_NO_IGNORE && gcc_node_set_int(c->I->g, node, "ignore_index", ignore))
    return oom(d);
  return GCC_OK;
}

/* NegativeLogLikelihoodLoss (12, 13): input (N, C, d1..dk) of
 * log-probabilities, target (N, d1..dk), weight (C) optional; reduction
 * (default mean) and ignore_index: the IR op of the same name (graph/ops.h;
 * opsets 12 and 13 differ only in the types they allow). */
gcc_status cv_nll_loss(nctx *c, gcc_diag *d) {
  char red[16];
  int64_t ignore;
  int has_w, x;
  GCC_TRY(loss_common(c, "target", red, sizeof red, &ignore, &has_w, d));
  GCC_TRY(in_ir(c, 0, &x, d));
  return emit_nll(c, x, red, ignore, has_w, d);
}

/* SoftmaxCrossEntropyLoss (12, 13): scores (N, C, d1..dk), labels (N,
 * d1..dk), weights (C) optional -> output (, log_prob): LogSoftmax over the
 * class axis 1 (the optional log_prob output when the node names it), then
 * NegativeLogLikelihoodLoss with the same reduction and ignore_index, which
 * is ONNX's own definition of the op (its function body) and
 * torch.nn.functional.cross_entropy's. */
gcc_status cv_softmax_cross_entropy_loss(nctx *c, gcc_diag *d) {
  char red[16];
  int64_t ignore;
  int has_w, x, lp, node;
  GCC_TRY(loss_common(c, "labels", red, sizeof red, &ignore, &has_w, d));
  GCC_TRY(in_ir(c, 0, &x, d));
  int named = n_out(c) > 1 && out_idx(c, 1) >= 0;
  GCC_TRY(emit(c, GCC_OP_LOG_SOFTMAX, &x, 1, named ? 1 : -1, F32, in_sh(c, 0), &lp, &node, d));
  if (named)
    lp = imp_val(c->I, out_idx(c, 1))->ir;
  if (gcc_node_set_int(c->I->g, node, "axis", 1))
    return oom(d);
  return emit_nll(c, lp, red, ignore, has_w, d);
}
