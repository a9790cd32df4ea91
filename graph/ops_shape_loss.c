/*
 * ops_shape_loss.c - shape and dtype inference of NegativeLogLikelihoodLoss
 * (ONNX NegativeLogLikelihoodLoss-13/22, torch.nn.functional.nll_loss) and
 * its gradient (graph/ops.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "graph/ops_internal.h"

static gcc_status nll_reduction(gcc_graph *g, int node, int idx, gcc_diag *d) {
  const char *r = g->nodes[node].av[idx].s;
  if (strcmp(r, "none") != 0 && strcmp(r, "sum") != 0 && strcmp(r, "mean") != 0) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: %s: reduction '%s' is not one of \"none\", \"sum\", \"mean\"",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc), r);
  }
  return GCC_OK;
}

/* input (N, C, d1..dk) float32, target (N, d1..dk) int64 / int32, weight
 * (C) float32 when given; input k of the node is the target. */
static gcc_status nll_check(gcc_graph *g, int node, const gcc_shape *x, int tk, gcc_diag *d) {
  gcc_value *t = in_val(g, node, tk), *w = in_val(g, node, tk + 1);
  char desc[600];
  if (t->dtype != GCC_DT_INT64 && t->dtype != GCC_DT_INT32)
    return gcc_diag_set(
        d, GCC_ERR_UNSUPPORTED, "%s: %s: target '%s' must be int64 or int32 class indices, got %s",
        g->source, gcc_node_desc(g, node, desc, sizeof desc), t->name, gcc_dtype_name(t->dtype));
  if (x->ndim < 2)
    return shape_err(g, node, d, "input must be (N, C) or (N, C, d1, ..., dk), got", x, NULL);
  int ok = t->shape.ndim == x->ndim - 1 && t->shape.dims[0] == x->dims[0];
  for (int i = 2; ok && i < x->ndim; i++)
    ok = t->shape.dims[i - 1] == x->dims[i];
  if (!ok)
    return shape_err(
        g, node, d, "target must be (N, d1, ..., dk) for input (N, C, d1, ..., dk):", &t->shape, x);
  if (w) {
    GCC_TRY(need_dtype(g, node, tk + 1, GCC_DT_FLOAT32, d));
    if (w->shape.ndim != 1 || w->shape.dims[0] != x->dims[1])
      return shape_err(g, node, d, "weight must be (C) for input (N, C, ...):", &w->shape, x);
  }
  return GCC_OK;
}

gcc_status shape_nll(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_dtype(g, node, 0, GCC_DT_FLOAT32, d));
  GCC_TRY(nll_reduction(g, node, NLL_REDUCTION, d));
  GCC_TRY(nll_check(g, node, &in_val(g, node, 0)->shape, 1, d));
  int none = strcmp(g->nodes[node].av[NLL_REDUCTION].s, "none") == 0;
  set_out(g, node, 0, GCC_DT_FLOAT32, none ? &in_val(g, node, 1)->shape : &kScalar);
  return GCC_OK;
}

gcc_status shape_nll_grad(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_dtype(g, node, 0, GCC_DT_FLOAT32, d));
  GCC_TRY(nll_reduction(g, node, NLL_GRAD_REDUCTION, d));
  const gcc_attr *sa = &g->nodes[node].av[NLL_GRAD_SHAPE];
  if (sa->n_ints < 2 || sa->n_ints > GCC_MAX_DIMS) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: %s: shape has %d dims (2 to 8)", g->source,
                        gcc_node_desc(g, node, desc, sizeof desc), sa->n_ints);
  }
  gcc_shape x = {sa->n_ints, {0}};
  for (int i = 0; i < sa->n_ints; i++) {
    if (sa->ints[i] < 0)
      return shape_err(g, node, d, "shape has a negative dim:", &x, NULL);
    x.dims[i] = sa->ints[i];
  }
  GCC_TRY(nll_check(g, node, &x, 1, d));
  gcc_value *dy = in_val(g, node, 0);
  int none = strcmp(g->nodes[node].av[NLL_GRAD_REDUCTION].s, "none") == 0;
  const gcc_shape *want = none ? &in_val(g, node, 1)->shape : &kScalar;
  if (none ? !gcc_shape_equal(&dy->shape, want) : gcc_shape_numel(&dy->shape, NULL) != 1)
    return shape_err(g, node, d, "dY must have the shape of the loss, got", &dy->shape, want);
  set_out(g, node, 0, GCC_DT_FLOAT32, &x);
  return GCC_OK;
}
