/*
 * ops_shape_window.c - the 2-D window of Conv and the pools, and the shape inference of
 * Conv, MaxPool, AveragePool and their gradients (NCHW).
 */
#include "graph/ops_internal.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- convolution and pooling (2-D, NCHW) ---------------------------- */

int64_t ints_at(const gcc_attr *a, int k, int64_t def) {
  return a->n_ints > k ? a->ints[k] : def;
}

void gcc_window2d_of(const gcc_node *n, const gcc_shape *filter, gcc_window2d *w) {
  int is_pool = filter == NULL;
  const gcc_attr *st = &n->av[is_pool ? POOL_STRIDES : CONV_STRIDES];
  const gcc_attr *pd = &n->av[is_pool ? POOL_PADS : CONV_PADS];
  const gcc_attr *dl = &n->av[is_pool ? POOL_DILATIONS : CONV_DILATIONS];
  if (is_pool) {
    w->kh = ints_at(&n->av[POOL_KERNEL_SHAPE], 0, 1);
    w->kw = ints_at(&n->av[POOL_KERNEL_SHAPE], 1, 1);
  } else {
    w->kh = filter->ndim == 4 ? filter->dims[2] : 1;
    w->kw = filter->ndim == 4 ? filter->dims[3] : 1;
  }
  w->sh = ints_at(st, 0, 1);
  w->sw = ints_at(st, 1, 1);
  w->pt = ints_at(pd, 0, 0);
  w->pl = ints_at(pd, 1, 0);
  w->pb = ints_at(pd, 2, 0);
  w->pr = ints_at(pd, 3, 0);
  w->dh = ints_at(dl, 0, 1);
  w->dw = ints_at(dl, 1, 1);
}

int64_t gcc_window_out_dim(int64_t in, int64_t k, int64_t stride, int64_t pad0, int64_t pad1,
                           int64_t dil) {
  int64_t span = in + pad0 + pad1 - dil * (k - 1) - 1;
  if (span < 0 || stride <= 0)
    return 0;
  return span / stride + 1;
}

/* Checks the attribute lists of a 2-D window (2 strides, 4 pads, 2
 * dilations when given; all in range) and returns the output (H, W) for
 * input (H, W) in *oh, *ow. */
static gcc_status window_check(gcc_graph *g, int node, const gcc_window2d *w, int is_pool,
                               int64_t h, int64_t wd, int64_t *oh, int64_t *ow, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  char desc[600];
  gcc_node_desc(g, node, desc, sizeof desc);
  struct {
    int pos, len;
    const char *name;
  } lists[3] = {{is_pool ? POOL_STRIDES : CONV_STRIDES, 2, "strides"},
                {is_pool ? POOL_PADS : CONV_PADS, 4, "pads"},
                {is_pool ? POOL_DILATIONS : CONV_DILATIONS, 2, "dilations"}};
  for (int i = 0; i < 3; i++) {
    const gcc_attr *a = &n->av[lists[i].pos];
    if (a->n_ints != 0 && a->n_ints != lists[i].len)
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                          "%s: %s: '%s' needs %d entries for a 2-D window, got %d", g->source, desc,
                          lists[i].name, lists[i].len, a->n_ints);
  }
  if (w->kh < 1 || w->kw < 1 || w->sh < 1 || w->sw < 1 || w->dh < 1 || w->dw < 1 || w->pt < 0 ||
      w->pl < 0 || w->pb < 0 || w->pr < 0)
    return gcc_diag_set(
        d, GCC_ERR_INVALID_GRAPH,
        "%s: %s: kernel, strides and dilations must be >= 1 and pads >= 0 "
        "(kernel %" PRId64 "x%" PRId64 ", strides %" PRId64 ",%" PRId64 ", pads %" PRId64
        ",%" PRId64 ",%" PRId64 ",%" PRId64 ", dilations %" PRId64 ",%" PRId64 ")",
        g->source, desc, w->kh, w->kw, w->sh, w->sw, w->pt, w->pl, w->pb, w->pr, w->dh, w->dw);
  *oh = gcc_window_out_dim(h, w->kh, w->sh, w->pt, w->pb, w->dh);
  *ow = gcc_window_out_dim(wd, w->kw, w->sw, w->pl, w->pr, w->dw);
  if (*oh <= 0 || *ow <= 0)
    return gcc_diag_set(d, GCC_ERR_SHAPE,
                        "%s: %s: the %" PRId64 "x%" PRId64 " window (dilations %" PRId64 ",%" PRId64
                        ") does not fit the padded %" PRId64 "x%" PRId64 " input",
                        g->source, desc, w->kh, w->kw, w->dh, w->dw, h + w->pt + w->pb,
                        wd + w->pl + w->pr);
  return GCC_OK;
}

gcc_status need_rank(gcc_graph *g, int node, int k, int rank, const char *what, gcc_diag *d) {
  gcc_value *v = in_val(g, node, k);
  if (v && v->shape.ndim != rank)
    return shape_err(g, node, d, what, &v->shape, NULL);
  return GCC_OK;
}

/* The group count of a conv gradient node: >= 1 and dividing both channel
 * counts (C of X, M of W), as the forward Conv's shape function checks. */
static gcc_status need_group(gcc_graph *g, int node, int64_t c, int64_t m, int64_t *group,
                             gcc_diag *d) {
  *group = g->nodes[node].av[CONV_GROUP].i;
  if (*group < 1 || c % *group != 0 || m % *group != 0) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: %s: group = %" PRId64 " does not divide the channels (%" PRId64
                        " in, %" PRId64 " out)",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc), *group, c, m);
  }
  return GCC_OK;
}

/* ONNX Conv, 2-D: X [N, C, H, W], W [M, C, kh, kw], B [M] -> Y [N, M, oh, ow]. */
gcc_status shape_conv(gcc_graph *g, int node, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  gcc_dtype dt; /* X, W, B, Y: one float dtype (16 bits: float32 accumulation) */
  GCC_TRY(need_same_float(g, node, 0, n->n_inputs - 1, &dt, d));
  GCC_TRY(need_rank(g, node, 0, 4, "Conv takes a 4-D NCHW input X, got", d));
  GCC_TRY(need_rank(g, node, 1, 4, "Conv takes a 4-D filter W [M, C / group, kh, kw], got", d));
  gcc_value *x = in_val(g, node, 0), *w = in_val(g, node, 1), *b = in_val(g, node, 2);
  int64_t group = n->av[CONV_GROUP].i;
  if (group < 1 || w->shape.dims[0] % group != 0 || x->shape.dims[1] != w->shape.dims[1] * group)
    return shape_err(g, node, d,
                     "X and W do not agree with group (C = W.dims[1] * group, M divisible by "
                     "group):",
                     &x->shape, &w->shape);
  const gcc_attr *ks = &n->av[CONV_KERNEL_SHAPE];
  if (ks->n_ints &&
      (ks->n_ints != 2 || ks->ints[0] != w->shape.dims[2] || ks->ints[1] != w->shape.dims[3])) {
    gcc_shape k = {ks->n_ints > GCC_MAX_DIMS ? GCC_MAX_DIMS : ks->n_ints, {0}};
    for (int i = 0; i < k.ndim; i++)
      k.dims[i] = ks->ints[i];
    return shape_err(g, node, d, "kernel_shape does not match the filter:", &k, &w->shape);
  }
  if (b && (b->shape.ndim != 1 || b->shape.dims[0] != w->shape.dims[0]))
    return shape_err(g, node, d, "bias B must be [M] for filter", &b->shape, &w->shape);
  gcc_window2d win;
  gcc_window2d_of(n, &w->shape, &win);
  int64_t oh = 0, ow = 0;
  GCC_TRY(window_check(g, node, &win, 0, x->shape.dims[2], x->shape.dims[3], &oh, &ow, d));
  gcc_shape y = {4, {x->shape.dims[0], w->shape.dims[0], oh, ow}};
  set_out(g, node, 0, dt, &y);
  return GCC_OK;
}

/* A shape attribute (input_shape / filter_shape) of 4 positive dims. */
static gcc_status shape_attr4(gcc_graph *g, int node, int pos, const char *name, gcc_shape *s,
                              gcc_diag *d) {
  const gcc_attr *a = &g->nodes[node].av[pos];
  int ok = a->n_ints == 4;
  for (int i = 0; ok && i < 4; i++)
    ok = a->ints[i] > 0;
  if (!ok) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: '%s' must be 4 dims > 0", g->source,
                        gcc_node_desc(g, node, desc, sizeof desc), name);
  }
  s->ndim = 4;
  for (int i = 0; i < 4; i++)
    s->dims[i] = a->ints[i];
  return GCC_OK;
}

/* Checks that dY has the shape the forward op gives for X and the window. */
static gcc_status check_dy(gcc_graph *g, int node, const gcc_shape *x, const gcc_window2d *w,
                           int is_pool, int64_t out_c, gcc_diag *d) {
  gcc_value *dy = in_val(g, node, 0);
  int64_t oh = 0, ow = 0;
  GCC_TRY(window_check(g, node, w, is_pool, x->dims[2], x->dims[3], &oh, &ow, d));
  gcc_shape want = {4, {x->dims[0], out_c, oh, ow}};
  if (!gcc_shape_equal(&dy->shape, &want))
    return shape_err(g, node, d, "dY does not have the forward output's shape:", &dy->shape, &want);
  return GCC_OK;
}

/* ConvGradData(dY, W): dX of shape input_shape. */
gcc_status shape_conv_grad_data(gcc_graph *g, int node, gcc_diag *d) {
  gcc_dtype dt;
  GCC_TRY(need_same_float(g, node, 0, 1, &dt, d));
  GCC_TRY(need_rank(g, node, 1, 4, "ConvGradData takes a 4-D filter W, got", d));
  gcc_value *w = in_val(g, node, 1);
  gcc_shape xs;
  int64_t group;
  GCC_TRY(shape_attr4(g, node, CONV_SHAPE, "input_shape", &xs, d));
  GCC_TRY(need_group(g, node, xs.dims[1], w->shape.dims[0], &group, d));
  if (xs.dims[1] != w->shape.dims[1] * group)
    return shape_err(g, node, d, "input_shape channels differ from the filter's:", &xs, &w->shape);
  gcc_window2d win;
  gcc_window2d_of(&g->nodes[node], &w->shape, &win);
  GCC_TRY(check_dy(g, node, &xs, &win, 0, w->shape.dims[0], d));
  set_out(g, node, 0, dt, &xs);
  return GCC_OK;
}

/* ConvGradFilter(dY, X): dW of shape filter_shape. */
gcc_status shape_conv_grad_filter(gcc_graph *g, int node, gcc_diag *d) {
  gcc_dtype dt;
  GCC_TRY(need_same_float(g, node, 0, 1, &dt, d));
  GCC_TRY(need_rank(g, node, 1, 4, "ConvGradFilter takes a 4-D NCHW input X, got", d));
  gcc_value *x = in_val(g, node, 1);
  gcc_shape ws;
  int64_t group;
  GCC_TRY(shape_attr4(g, node, CONV_SHAPE, "filter_shape", &ws, d));
  GCC_TRY(need_group(g, node, x->shape.dims[1], ws.dims[0], &group, d));
  if (x->shape.dims[1] != ws.dims[1] * group)
    return shape_err(g, node, d, "input channels of X and filter_shape differ:", &x->shape, &ws);
  gcc_window2d win;
  gcc_window2d_of(&g->nodes[node], &ws, &win);
  GCC_TRY(check_dy(g, node, &x->shape, &win, 0, ws.dims[0], d));
  set_out(g, node, 0, dt, &ws);
  return GCC_OK;
}

/* ConvGradBias(dY): [M], the sum of dY over N, H and W. */
gcc_status shape_conv_grad_bias(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_dtype(g, node, 0, GCC_DT_FLOAT32, d));
  GCC_TRY(need_rank(g, node, 0, 4, "ConvGradBias takes a 4-D NCHW dY, got", d));
  gcc_shape y = {1, {in_val(g, node, 0)->shape.dims[1]}};
  set_out(g, node, 0, GCC_DT_FLOAT32, &y);
  return GCC_OK;
}

static gcc_status pool_common(gcc_graph *g, int node, const gcc_shape *x, gcc_window2d *w,
                              int64_t *oh, int64_t *ow, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  char desc[600];
  if (n->av[POOL_KERNEL_SHAPE].n_ints != 2)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: %s: kernel_shape needs 2 entries, got %d",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc),
                        n->av[POOL_KERNEL_SHAPE].n_ints);
  if (n->av[POOL_CEIL_MODE].i != 0)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: %s: ceil_mode = 1 is not supported", g->source,
                        gcc_node_desc(g, node, desc, sizeof desc));
  gcc_window2d_of(n, NULL, w);
  GCC_TRY(window_check(g, node, w, 1, x->dims[2], x->dims[3], oh, ow, d));
  /* PyTorch's rule: a pad may be at most half the kernel, so that every
   * window holds at least one element of the input */
  if (2 * w->pt > w->kh || 2 * w->pb > w->kh || 2 * w->pl > w->kw || 2 * w->pr > w->kw)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: %s: pads must be at most half the kernel (PyTorch's rule)", g->source,
                        gcc_node_desc(g, node, desc, sizeof desc));
  return GCC_OK;
}

/* ONNX MaxPool / AveragePool, 2-D: X [N, C, H, W] -> Y [N, C, oh, ow], of
 * X's float dtype (16 bits: an average summed in float32). */
gcc_status shape_pool(gcc_graph *g, int node, gcc_diag *d) {
  gcc_dtype dt;
  GCC_TRY(need_same_float(g, node, 0, 0, &dt, d));
  GCC_TRY(need_rank(g, node, 0, 4, "pooling takes a 4-D NCHW input X, got", d));
  gcc_value *x = in_val(g, node, 0);
  gcc_window2d w;
  int64_t oh = 0, ow = 0;
  GCC_TRY(pool_common(g, node, &x->shape, &w, &oh, &ow, d));
  gcc_shape y = {4, {x->shape.dims[0], x->shape.dims[1], oh, ow}};
  set_out(g, node, 0, dt, &y);
  return GCC_OK;
}

/* MaxPoolGrad(dY, X, Y) -> dX [shape of X]: one float dtype. */
gcc_status shape_max_pool_grad(gcc_graph *g, int node, gcc_diag *d) {
  gcc_dtype dt;
  GCC_TRY(need_same_float(g, node, 0, 2, &dt, d));
  GCC_TRY(need_rank(g, node, 1, 4, "MaxPoolGrad takes a 4-D NCHW X, got", d));
  gcc_value *x = in_val(g, node, 1);
  gcc_window2d w;
  int64_t oh = 0, ow = 0;
  GCC_TRY(pool_common(g, node, &x->shape, &w, &oh, &ow, d));
  GCC_TRY(check_dy(g, node, &x->shape, &w, 1, x->shape.dims[1], d));
  gcc_value *y = in_val(g, node, 2), *dy = in_val(g, node, 0);
  if (!gcc_shape_equal(&y->shape, &dy->shape))
    return shape_err(g, node, d, "Y and dY differ in shape:", &y->shape, &dy->shape);
  set_out(g, node, 0, dt, &x->shape);
  return GCC_OK;
}

/* AveragePoolGrad(dY) -> dX [input_shape], of dY's float dtype. */
gcc_status shape_avg_pool_grad(gcc_graph *g, int node, gcc_diag *d) {
  gcc_dtype dt;
  GCC_TRY(need_same_float(g, node, 0, 0, &dt, d));
  gcc_shape xs;
  GCC_TRY(shape_attr4(g, node, POOL_SHAPE, "input_shape", &xs, d));
  gcc_window2d w;
  int64_t oh = 0, ow = 0;
  GCC_TRY(pool_common(g, node, &xs, &w, &oh, &ow, d));
  GCC_TRY(check_dy(g, node, &xs, &w, 1, xs.dims[1], d));
  set_out(g, node, 0, dt, &xs);
  return GCC_OK;
}
