/*
 * ops_shape_layers.c - shape inference of the ops of ONNX import (issue 14): LRN,
 * BatchNormalization, LayerNormalization, Dropout, Concat, Transpose, Pad, ConvTranspose, and
 * their gradients.
 */
#include "graph/ops_internal.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- ops of ONNX import (issue 14) ----------------------------------- */

static const char *node_d(gcc_graph *g, int node, char *buf, size_t cap) {
  return gcc_node_desc(g, node, buf, cap);
}

/* ONNX LRN: X [N, C, ...] -> same shape. */
gcc_status shape_lrn(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_dtype(g, node, 0, GCC_DT_FLOAT32, d));
  gcc_value *x = in_val(g, node, 0);
  char desc[600];
  if (x->shape.ndim < 3)
    return shape_err(g, node, d, "LRN takes X [N, C, D1, ...] of rank >= 3, got", &x->shape, NULL);
  if (g->nodes[node].av[LRN_SIZE].i < 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: size must be >= 1", g->source,
                        node_d(g, node, desc, sizeof desc));
  set_out(g, node, 0, GCC_DT_FLOAT32, &x->shape);
  return GCC_OK;
}

/* LRNGrad (dY, X, Y): three float32 tensors of the forward's shape. */
gcc_status shape_lrn_grad(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(shape_relu_grad(g, node, d)); /* dY and X: float32, same shape */
  GCC_TRY(need_dtype(g, node, 2, GCC_DT_FLOAT32, d));
  gcc_value *x = in_val(g, node, 1), *y = in_val(g, node, 2);
  if (!gcc_shape_equal(&x->shape, &y->shape))
    return shape_err(g, node, d, "X and Y differ in shape:", &x->shape, &y->shape);
  return shape_lrn(g, node, d);
}

/* X [N, C, D1, ...] float32 (rank >= 2) and input k a float32 [C]. */
static gcc_status need_channel_vec(gcc_graph *g, int node, int k, const gcc_value *x, gcc_diag *d) {
  GCC_TRY(need_dtype(g, node, k, GCC_DT_FLOAT32, d));
  gcc_value *v = in_val(g, node, k);
  if (!v || v->shape.ndim != 1 || v->shape.dims[0] != x->shape.dims[1]) {
    gcc_shape c = {1, {x->shape.dims[1]}};
    return shape_err(g, node, d,
                     "a per-channel input must be [C] of X's channels:", v ? &v->shape : &c,
                     &x->shape);
  }
  return GCC_OK;
}

/* BatchNormalization (X, scale, B, mean, var): X [N, C, ...], the rest [C]
 * float32; Y of X's float dtype (a 16-bit X: float32 parameters, running
 * statistics and arithmetic, as cuDNN's batch norm under torch.autocast). */
gcc_status shape_batch_norm(gcc_graph *g, int node, gcc_diag *d) {
  gcc_dtype dt;
  GCC_TRY(need_same_float(g, node, 0, 0, &dt, d));
  gcc_value *x = in_val(g, node, 0);
  if (x->shape.ndim < 2)
    return shape_err(g, node, d, "BatchNormalization takes X [N, C, D1, ...], got", &x->shape,
                     NULL);
  for (int k = 1; k < 5; k++)
    GCC_TRY(need_channel_vec(g, node, k, x, d));
  set_out(g, node, 0, dt, &x->shape);
  return GCC_OK;
}

/* BatchNormGrad (dY, X, scale) -> dX [X's shape] of dY's and X's float
 * dtype, or dscale / dB [C] float32 (the gradients of float32 parameters). */
gcc_status shape_batch_norm_grad(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(shape_elem_grad(g, node, d)); /* dY and X: one float dtype, one shape */
  gcc_dtype dt = in_val(g, node, 0)->dtype;
  gcc_value *x = in_val(g, node, 1);
  if (x->shape.ndim < 2)
    return shape_err(g, node, d, "BatchNormGrad takes X [N, C, D1, ...], got", &x->shape, NULL);
  GCC_TRY(need_channel_vec(g, node, 2, x, d));
  int64_t which = g->nodes[node].av[BN_GRAD_OUTPUT].i;
  if (which < 0 || which > 2) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: %s: output must be 0 (dX), 1 (dscale) or 2 (dB)", g->source,
                        gcc_node_desc(g, node, desc, sizeof desc));
  }
  gcc_shape c = {1, {x->shape.dims[1]}};
  set_out(g, node, 0, which == 0 ? dt : GCC_DT_FLOAT32, which == 0 ? &x->shape : &c);
  return GCC_OK;
}

void gcc_layer_norm_dims(const gcc_shape *x, int64_t axis, int64_t *rows, int64_t *d,
                         int *axis_out) {
  int a = (int)(axis < 0 ? axis + x->ndim : axis);
  int64_t r = 1, n = 1;
  for (int k = 0; k < x->ndim; k++) {
    if (k < a)
      r *= x->dims[k];
    else
      n *= x->dims[k];
  }
  *rows = r;
  *d = n;
  if (axis_out)
    *axis_out = a;
}

/* X float32 of rank >= 1 with `axis` in [-rank, rank), and input k (when
 * present) a float32 of shape X.dims[axis:] (Scale, B). *a: the axis. */
static gcc_status need_ln_param(gcc_graph *g, int node, int k, const gcc_value *x, int a,
                                const char *what, gcc_diag *d) {
  gcc_value *v = in_val(g, node, k);
  if (!v)
    return GCC_OK;
  GCC_TRY(need_dtype(g, node, k, GCC_DT_FLOAT32, d));
  gcc_shape want = {x->shape.ndim - a, {0}};
  for (int q = a; q < x->shape.ndim; q++)
    want.dims[q - a] = x->shape.dims[q];
  if (!gcc_shape_equal(&v->shape, &want)) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s must have the normalised shape X.dims[%d:] =", what, a);
    return shape_err(g, node, d, msg, &want, &v->shape);
  }
  return GCC_OK;
}

static gcc_status need_ln_axis(gcc_graph *g, int node, int xin, int *a, gcc_diag *d) {
  gcc_value *x = in_val(g, node, xin);
  int64_t axis = g->nodes[node].av[LN_AXIS].i, r = x->shape.ndim;
  if (r < 1)
    return shape_err(g, node, d, "LayerNormalization takes X of rank >= 1, got", &x->shape, NULL);
  if (axis < -r || axis >= r) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: %s: axis %" PRId64 " is out of range for X of rank %" PRId64
                        " (it must be in [%" PRId64 ", %" PRId64 "))",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc), axis, r, -r, r);
  }
  *a = (int)(axis < 0 ? axis + r : axis);
  return GCC_OK;
}

/* LayerNormalization (X, Scale, B?) -> Y [X's shape], Mean, InvStdDev
 * [X.dims[:axis], 1, ...]: float32 (the autocast pass keeps it there). */
gcc_status shape_layer_norm(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_dtype(g, node, 0, GCC_DT_FLOAT32, d));
  gcc_value *x = in_val(g, node, 0);
  int a = 0;
  GCC_TRY(need_ln_axis(g, node, 0, &a, d));
  if (g->nodes[node].av[LN_STASH_TYPE].i != 1) {
    char desc[600];
    return gcc_diag_set(
        d, GCC_ERR_UNSUPPORTED,
        "%s: %s: stash_type %" PRId64 " is not supported (1, float32 statistics, only)", g->source,
        gcc_node_desc(g, node, desc, sizeof desc), g->nodes[node].av[LN_STASH_TYPE].i);
  }
  GCC_TRY(need_ln_param(g, node, 1, x, a, "Scale", d));
  GCC_TRY(need_ln_param(g, node, 2, x, a, "B", d));
  gcc_shape xs = x->shape, st = x->shape;
  for (int q = a; q < st.ndim; q++)
    st.dims[q] = 1;
  set_out(g, node, LN_OUT_Y, GCC_DT_FLOAT32, &xs);
  for (int k = 1; k < g->nodes[node].n_outputs; k++)
    set_out(g, node, k, GCC_DT_FLOAT32, &st);
  return GCC_OK;
}

/* LayerNormGrad (dY, X, Scale) -> dX [X's shape] or dScale / dB [Scale's
 * shape], float32. */
gcc_status shape_layer_norm_grad(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(shape_relu_grad(g, node, d)); /* dY and X: float32, same shape */
  gcc_value *x = in_val(g, node, 1);
  int a = 0;
  GCC_TRY(need_ln_axis(g, node, 1, &a, d));
  GCC_TRY(need_ln_param(g, node, 2, x, a, "Scale", d));
  int64_t which = g->nodes[node].av[LN_GRAD_OUTPUT].i;
  if (which < 0 || which > 2) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: %s: output must be 0 (dX), 1 (dScale) or 2 (dB)", g->source,
                        gcc_node_desc(g, node, desc, sizeof desc));
  }
  gcc_shape xs = x->shape, ss = in_val(g, node, 2)->shape;
  set_out(g, node, 0, GCC_DT_FLOAT32, which == 0 ? &xs : &ss);
  return GCC_OK;
}

/* LayerNormGradAll (dY, X, Scale [, R]) -> dX [X's shape], dScale, dB
 * [Scale's shape], float32: the outputs the bits of `outputs` name (1 dX, 2
 * dScale, 4 dB), in that order; R float32 of X's shape, only with dX. */
gcc_status shape_layer_norm_grad_all(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(shape_relu_grad(g, node, d)); /* dY and X: float32, same shape */
  gcc_value *x = in_val(g, node, LN_GRAD_ALL_IN_X), *r = in_val(g, node, LN_GRAD_ALL_IN_R);
  int a = 0;
  GCC_TRY(need_ln_axis(g, node, LN_GRAD_ALL_IN_X, &a, d));
  GCC_TRY(need_ln_param(g, node, LN_GRAD_ALL_IN_SCALE, x, a, "Scale", d));
  const int64_t mask = g->nodes[node].av[LN_GRAD_ALL_OUTPUTS].i;
  const int n = (int)((mask & 1) + ((mask >> 1) & 1) + ((mask >> 2) & 1));
  char desc[600];
  if (mask < 1 || mask > 7 || n != g->nodes[node].n_outputs)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: %s: outputs %" PRId64 " must name (bits 1 dX, 2 dScale, 4 dB) "
                        "as many outputs as the node has (%d)",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc), mask,
                        g->nodes[node].n_outputs);
  if (r) {
    GCC_TRY(need_dtype(g, node, LN_GRAD_ALL_IN_R, GCC_DT_FLOAT32, d));
    if (!gcc_shape_equal(&r->shape, &x->shape))
      return shape_err(g, node, d, "R and X differ in shape:", &r->shape, &x->shape);
    if (!(mask & LN_GRAD_ALL_DX))
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: %s: R is added to dX, which is not an output", g->source,
                          gcc_node_desc(g, node, desc, sizeof desc));
  }
  gcc_shape xs = x->shape, ss = in_val(g, node, LN_GRAD_ALL_IN_SCALE)->shape;
  int k = 0;
  for (int bit = 0; bit < 3; bit++)
    if (mask & (1 << bit))
      set_out(g, node, k++, GCC_DT_FLOAT32, bit == 0 ? &xs : &ss);
  return GCC_OK;
}

/* Dropout (X) -> Y: float32, any shape; ratio in [0, 1]. DropoutGrad (dY)
 * -> dX: the same. */
gcc_status shape_dropout(gcc_graph *g, int node, gcc_diag *d) {
  float p = g->nodes[node].av[DROPOUT_RATIO].f; /* DROPOUT_GRAD_RATIO too */
  if (!(p >= 0.0f && p <= 1.0f)) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: ratio %g is outside [0, 1]", g->source,
                        gcc_node_desc(g, node, desc, sizeof desc), (double)p);
  }
  return shape_unary_same(g, node, d);
}

/* ONNX Concat: equal ranks and dims but along axis. */
gcc_status shape_concat(gcc_graph *g, int node, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  gcc_value *x0 = in_val(g, node, 0);
  int64_t axis = n->av[CONCAT_AXIS].i, r = x0->shape.ndim;
  char desc[600];
  if (r < 1 || axis < -r || axis >= r)
    return gcc_diag_set(d, GCC_ERR_SHAPE,
                        "%s: %s: axis %" PRId64 " is out of range for rank %" PRId64, g->source,
                        node_d(g, node, desc, sizeof desc), axis, r);
  if (axis < 0)
    axis += r;
  gcc_shape y = x0->shape;
  y.dims[axis] = 0;
  for (int k = 0; k < n->n_inputs; k++) {
    gcc_value *v = in_val(g, node, k);
    if (!v)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: input %d is empty", g->source,
                          node_d(g, node, desc, sizeof desc), k);
    GCC_TRY(need_dtype(g, node, k, x0->dtype, d));
    GCC_TRY(need_copyable(g, node, k, d));
    int ok = v->shape.ndim == r;
    for (int i = 0; ok && i < r; i++)
      ok = i == axis || v->shape.dims[i] == x0->shape.dims[i];
    if (!ok)
      return shape_err(g, node, d, "inputs differ in a dim other than the axis:", &x0->shape,
                       &v->shape);
    y.dims[axis] += v->shape.dims[axis];
  }
  set_out(g, node, 0, x0->dtype, &y);
  return GCC_OK;
}

/* ONNX Transpose: Y.dims[i] = X.dims[perm[i]]; perm a permutation. */
gcc_status shape_transpose(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_copyable(g, node, 0, d));
  gcc_value *x = in_val(g, node, 0);
  const gcc_attr *p = &g->nodes[node].av[TRANSPOSE_PERM];
  int seen[GCC_MAX_DIMS] = {0}, ok = p->n_ints == x->shape.ndim;
  gcc_shape y = {x->shape.ndim, {0}};
  for (int i = 0; ok && i < p->n_ints; i++) {
    ok = p->ints[i] >= 0 && p->ints[i] < x->shape.ndim && !seen[p->ints[i]];
    if (ok) {
      seen[p->ints[i]] = 1;
      y.dims[i] = x->shape.dims[p->ints[i]];
    }
  }
  if (!ok) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: %s: perm is not a permutation of the %d dims",
                        g->source, node_d(g, node, desc, sizeof desc), x->shape.ndim);
  }
  set_out(g, node, 0, x->dtype, &y);
  return GCC_OK;
}

/* ONNX Pad (constant, edge, reflect): pads [b0, b1, ..., e0, e1, ...]; a
 * negative pad crops (constant mode). */
gcc_status shape_pad(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_movable(g, node, 0, d));
  const gcc_node *n = &g->nodes[node];
  gcc_value *x = in_val(g, node, 0);
  const gcc_attr *p = &n->av[PAD_PADS];
  const char *mode = n->av[PAD_MODE].s ? n->av[PAD_MODE].s : "constant";
  int r = x->shape.ndim, constant = strcmp(mode, "constant") == 0;
  char desc[600];
  if (!constant && strcmp(mode, "edge") != 0 && strcmp(mode, "reflect") != 0)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: %s: mode '%s' is not supported (constant, edge, reflect)", g->source,
                        node_d(g, node, desc, sizeof desc), mode);
  if (p->n_ints != 2 * r)
    return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: %s: pads has %d entries for rank %d (2 * rank)",
                        g->source, node_d(g, node, desc, sizeof desc), p->n_ints, r);
  gcc_shape y = x->shape;
  for (int i = 0; i < r; i++) {
    int64_t b = p->ints[i], e = p->ints[i + r], in = x->shape.dims[i];
    if (!constant && (b < 0 || e < 0 || (strcmp(mode, "reflect") == 0 && (b >= in || e >= in))))
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                          "%s: %s: %s padding needs pads >= 0%s (dim %d: %" PRId64 ", %" PRId64
                          " for %" PRId64 ")",
                          g->source, node_d(g, node, desc, sizeof desc), mode,
                          strcmp(mode, "reflect") == 0 ? " and < the dim" : "", i, b, e, in);
    y.dims[i] = in + b + e;
    if (y.dims[i] <= 0)
      return shape_err(g, node, d, "the pads crop a dim to nothing:", &x->shape, NULL);
  }
  set_out(g, node, 0, x->dtype, &y);
  return GCC_OK;
}

/* ONNX ConvTranspose, 2-D: X [N, C, H, W], W [C, M / group, kh, kw], B [M]
 * -> Y [N, M, (H - 1) s - pt - pb + d (kh - 1) + 1 + output_padding, ...];
 * X, W, B, Y of one float dtype (16 bits: float32 accumulation). */
gcc_status shape_conv_transpose(gcc_graph *g, int node, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  gcc_dtype dt;
  GCC_TRY(need_same_float(g, node, 0, n->n_inputs - 1, &dt, d));
  GCC_TRY(need_rank(g, node, 0, 4, "ConvTranspose takes a 4-D NCHW input X, got", d));
  GCC_TRY(need_rank(g, node, 1, 4, "ConvTranspose takes a 4-D filter W [C, M / group, kh, kw], got",
                    d));
  gcc_value *x = in_val(g, node, 0), *w = in_val(g, node, 1), *b = in_val(g, node, 2);
  int64_t group = n->av[CONV_GROUP].i;
  if (group < 1 || x->shape.dims[1] != w->shape.dims[0] || w->shape.dims[0] % group != 0)
    return shape_err(g, node, d,
                     "X and W do not agree (C = W.dims[0], divisible by group):", &x->shape,
                     &w->shape);
  int64_t m = w->shape.dims[1] * group;
  if (b && (b->shape.ndim != 1 || b->shape.dims[0] != m))
    return shape_err(g, node, d, "bias B must be [M] = [W.dims[1] * group], got", &b->shape,
                     &w->shape);
  gcc_window2d win;
  gcc_window2d_of(n, &w->shape, &win);
  const gcc_attr *op = &n->av[CONVT_OUTPUT_PADDING];
  int64_t oph = ints_at(op, 0, 0), opw = ints_at(op, 1, 0);
  char desc[600];
  if ((op->n_ints && op->n_ints != 2) || oph < 0 || opw < 0 || (oph >= win.sh && oph >= win.dh) ||
      (opw >= win.sw && opw >= win.dw) || win.sh < 1 || win.sw < 1 || win.dh < 1 || win.dw < 1 ||
      win.pt < 0 || win.pb < 0 || win.pl < 0 || win.pr < 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: %s: strides and dilations must be >= 1, pads >= 0 and "
                        "output_padding (2 entries) smaller than the stride or dilation",
                        g->source, node_d(g, node, desc, sizeof desc));
  int64_t oh = (x->shape.dims[2] - 1) * win.sh - win.pt - win.pb + win.dh * (win.kh - 1) + 1 + oph;
  int64_t ow = (x->shape.dims[3] - 1) * win.sw - win.pl - win.pr + win.dw * (win.kw - 1) + 1 + opw;
  if (oh <= 0 || ow <= 0)
    return shape_err(g, node, d, "the pads leave no output for", &x->shape, &w->shape);
  gcc_shape y = {4, {x->shape.dims[0], m, oh, ow}};
  set_out(g, node, 0, dt, &y);
  return GCC_OK;
}
