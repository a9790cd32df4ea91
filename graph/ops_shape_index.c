/*
 * ops_shape_index.c - shape and dtype inference of the indexing ops: Gather
 * (ONNX Gather-13) and its gradient GatherGrad, GatherElements (ONNX
 * GatherElements-13) and GatherElementsGrad, Slice, SliceGrad and Expand
 * (graph/ops.h).
 */
#include <inttypes.h>
#include <stdio.h>

#include "graph/ops_internal.h"

static gcc_status need_indices(gcc_graph *g, int node, int k, gcc_diag *d) {
  gcc_value *v = in_val(g, node, k);
  if (v->dtype != GCC_DT_INT64 && v->dtype != GCC_DT_INT32) {
    char desc[600];
    return gcc_diag_set(
        d, GCC_ERR_UNSUPPORTED, "%s: %s: indices '%s' have dtype %s (int64 or int32 expected)",
        g->source, gcc_node_desc(g, node, desc, sizeof desc), v->name, gcc_dtype_name(v->dtype));
  }
  return GCC_OK;
}

/* The axis in [0, rank): a negative one counts from the end. */
static gcc_status gather_axis(gcc_graph *g, int node, int64_t axis, int rank, int64_t *out,
                              gcc_diag *d) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: %s: axis %" PRId64 " is outside [-%d, %d)",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc), axis, rank, rank);
  }
  *out = a;
  return GCC_OK;
}

/* Y = data.shape[:axis] + indices.shape + data.shape[axis + 1:] */
static gcc_status gather_out_shape(gcc_graph *g, int node, const gcc_shape *data, int64_t axis,
                                   const gcc_shape *idx, gcc_shape *y, gcc_diag *d) {
  if (data->ndim - 1 + idx->ndim > GCC_MAX_DIMS)
    return shape_err(g, node, d, "the output has more than 8 dims: data and indices", data, idx);
  y->ndim = 0;
  for (int i = 0; i < axis; i++)
    y->dims[y->ndim++] = data->dims[i];
  for (int i = 0; i < idx->ndim; i++)
    y->dims[y->ndim++] = idx->dims[i];
  for (int i = (int)axis + 1; i < data->ndim; i++)
    y->dims[y->ndim++] = data->dims[i];
  return GCC_OK;
}

gcc_status shape_gather(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_copyable(g, node, 0, d));
  GCC_TRY(need_indices(g, node, 1, d));
  gcc_value *x = in_val(g, node, 0), *ix = in_val(g, node, 1);
  if (x->shape.ndim < 1)
    return shape_err(g, node, d, "data must have rank >= 1, got", &x->shape, NULL);
  int64_t axis = 0;
  GCC_TRY(gather_axis(g, node, g->nodes[node].av[GATHER_AXIS].i, x->shape.ndim, &axis, d));
  if (x->shape.dims[axis] == 0)
    return shape_err(g, node, d, "the gathered axis of data is empty:", &x->shape, NULL);
  gcc_shape y;
  GCC_TRY(gather_out_shape(g, node, &x->shape, axis, &ix->shape, &y, d));
  set_out(g, node, 0, x->dtype, &y);
  return GCC_OK;
}

gcc_status shape_gather_grad(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_dtype(g, node, 0, GCC_DT_FLOAT32, d));
  GCC_TRY(need_indices(g, node, 1, d));
  const gcc_node *n = &g->nodes[node];
  const gcc_attr *sa = &n->av[GATHER_GRAD_SHAPE];
  gcc_value *dy = in_val(g, node, 0), *ix = in_val(g, node, 1);
  if (sa->n_ints < 1 || sa->n_ints > GCC_MAX_DIMS) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: %s: shape has %d dims (1 to 8)", g->source,
                        gcc_node_desc(g, node, desc, sizeof desc), sa->n_ints);
  }
  gcc_shape x = {sa->n_ints, {0}};
  for (int i = 0; i < sa->n_ints; i++) {
    if (sa->ints[i] < 0)
      return shape_err(g, node, d, "shape has a negative dim:", &x, NULL);
    x.dims[i] = sa->ints[i];
  }
  int64_t axis = 0;
  GCC_TRY(gather_axis(g, node, n->av[GATHER_GRAD_AXIS].i, x.ndim, &axis, d));
  gcc_shape y;
  GCC_TRY(gather_out_shape(g, node, &x, axis, &ix->shape, &y, d));
  if (!gcc_shape_equal(&y, &dy->shape))
    return shape_err(g, node, d, "dY must have the shape of Gather's output, got", &dy->shape, &y);
  set_out(g, node, 0, GCC_DT_FLOAT32, &x);
  return GCC_OK;
}

/* ---- GatherElements -------------------------------------------------------- */

/* indices of data's rank, no dim larger than data's but along the axis
 * (torch.gather's rule; ONNX's conformance cases keep to it too). */
static gcc_status gather_elements_check(gcc_graph *g, int node, const gcc_shape *data,
                                        int64_t axis_attr, const gcc_shape *idx, gcc_diag *d) {
  if (data->ndim < 1)
    return shape_err(g, node, d, "data must have rank >= 1, got", data, NULL);
  int64_t axis = 0;
  GCC_TRY(gather_axis(g, node, axis_attr, data->ndim, &axis, d));
  if (idx->ndim != data->ndim)
    return shape_err(g, node, d, "indices must have data's rank:", idx, data);
  for (int k = 0; k < data->ndim; k++)
    if (k != axis && idx->dims[k] > data->dims[k])
      return shape_err(g, node, d,
                       "indices are larger than data in a dim other than the axis:", idx, data);
  if (data->dims[axis] == 0)
    return shape_err(g, node, d, "the gathered axis of data is empty:", data, NULL);
  return GCC_OK;
}

gcc_status shape_gather_elements(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_copyable(g, node, 0, d));
  GCC_TRY(need_indices(g, node, 1, d));
  gcc_value *x = in_val(g, node, 0), *ix = in_val(g, node, 1);
  GCC_TRY(gather_elements_check(g, node, &x->shape, g->nodes[node].av[GATHER_ELEMENTS_AXIS].i,
                                &ix->shape, d));
  set_out(g, node, 0, x->dtype, &ix->shape);
  return GCC_OK;
}

gcc_status shape_gather_elements_grad(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_dtype(g, node, 0, GCC_DT_FLOAT32, d));
  GCC_TRY(need_indices(g, node, 1, d));
  const gcc_node *n = &g->nodes[node];
  const gcc_attr *sa = &n->av[GATHER_ELEMENTS_GRAD_SHAPE];
  gcc_value *dy = in_val(g, node, 0), *ix = in_val(g, node, 1);
  if (sa->n_ints < 1 || sa->n_ints > GCC_MAX_DIMS) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: %s: shape has %d dims (1 to 8)", g->source,
                        gcc_node_desc(g, node, desc, sizeof desc), sa->n_ints);
  }
  gcc_shape x = {sa->n_ints, {0}};
  for (int i = 0; i < sa->n_ints; i++) {
    if (sa->ints[i] < 1)
      return shape_err(g, node, d, "shape has a dim < 1:", &x, NULL);
    x.dims[i] = sa->ints[i];
  }
  GCC_TRY(gather_elements_check(g, node, &x, n->av[GATHER_ELEMENTS_GRAD_AXIS].i, &ix->shape, d));
  if (!gcc_shape_equal(&ix->shape, &dy->shape))
    return shape_err(g, node, d, "dY must have the indices' shape, got", &dy->shape, &ix->shape);
  set_out(g, node, 0, GCC_DT_FLOAT32, &x);
  return GCC_OK;
}

/* ---- Slice ---------------------------------------------------------------- */

/* Bounds at or past this are "to the end" on a symbolic dim (PyTorch's
 * exporters write INT64_MAX, some INT32_MAX). */
#define SLICE_TO_END INT32_MAX

gcc_status gcc_slice_resolve(const gcc_node *n, const char *source, const gcc_shape *x,
                             int64_t *start, int64_t *step, gcc_shape *y, gcc_diag *d) {
  const gcc_attr *st = &n->av[SLICE_STARTS], *en = &n->av[SLICE_ENDS], *ax = &n->av[SLICE_AXES],
                 *sp = &n->av[SLICE_STEPS];
  char desc[600];
  const char *src = source ? source : "<model>";
  snprintf(desc, sizeof desc, "node '%s' (%s)", n->name, gcc_op_name(n->op));
  int r = x->ndim, k_n = st->n_ints;
  if (en->n_ints != k_n || (ax->n_ints && ax->n_ints != k_n) || (sp->n_ints && sp->n_ints != k_n) ||
      k_n > r)
    return gcc_diag_set(d, GCC_ERR_SHAPE,
                        "%s: %s: starts, ends, axes and steps must have one entry per sliced "
                        "axis (got %d, %d, %d, %d for rank %d)",
                        src, desc, st->n_ints, en->n_ints, ax->n_ints, sp->n_ints, r);
  *y = *x;
  int seen[GCC_MAX_DIMS] = {0};
  for (int i = 0; i < r; i++) {
    start[i] = 0;
    step[i] = 1;
  }
  for (int k = 0; k < k_n; k++) {
    int64_t a = ax->n_ints ? ax->ints[k] : k, s = sp->n_ints ? sp->ints[k] : 1;
    a += a < 0 ? r : 0;
    if (a < 0 || a >= r || seen[a])
      return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: %s: axis %" PRId64 " is out of range or repeated",
                          src, desc, ax->n_ints ? ax->ints[k] : k);
    seen[a] = 1;
    if (s == 0)
      return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: %s: step 0 on axis %" PRId64, src, desc, a);
    int64_t dim = x->dims[a], b = st->ints[k], e = en->ints[k];
    if (dim < 0) { /* the symbolic batch: kept whole only */
      if (b != 0 || e < SLICE_TO_END || s != 1)
        return gcc_diag_set(d, GCC_ERR_SHAPE,
                            "%s: %s: axis %" PRId64 " is the symbolic batch: only a slice of "
                            "all of it is supported",
                            src, desc, a);
      continue;
    }
    b += b < 0 ? dim : 0;
    e += e < 0 ? dim : 0;
    int64_t len;
    if (s > 0) {
      b = b < 0 ? 0 : b > dim ? dim : b;
      e = e < 0 ? 0 : e > dim ? dim : e;
      len = e > b ? (e - b + s - 1) / s : 0;
    } else {
      b = b < 0 ? 0 : b > dim - 1 ? dim - 1 : b;
      e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
      len = b > e ? (b - e + (-s) - 1) / (-s) : 0;
    }
    if (len == 0)
      return gcc_diag_set(d, GCC_ERR_SHAPE,
                          "%s: %s: the slice of axis %" PRId64 " (dim %" PRId64 ") is empty "
                          "(zero-size tensors are not supported)",
                          src, desc, a, dim);
    start[a] = b;
    step[a] = s;
    y->dims[a] = len;
  }
  return GCC_OK;
}

gcc_status shape_slice(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_copyable(g, node, 0, d));
  gcc_value *x = in_val(g, node, 0);
  int64_t start[GCC_MAX_DIMS], step[GCC_MAX_DIMS];
  gcc_shape y;
  GCC_TRY(gcc_slice_resolve(&g->nodes[node], g->source, &x->shape, start, step, &y, d));
  set_out(g, node, 0, x->dtype, &y);
  return GCC_OK;
}

gcc_status shape_slice_grad(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_dtype(g, node, 0, GCC_DT_FLOAT32, d));
  const gcc_attr *sa = &g->nodes[node].av[SLICE_SHAPE];
  gcc_value *dy = in_val(g, node, 0);
  if (sa->n_ints < 1 || sa->n_ints > GCC_MAX_DIMS)
    return shape_err(g, node, d, "shape must have 1 to 8 dims; dY", &dy->shape, NULL);
  gcc_shape x = {sa->n_ints, {0}};
  for (int i = 0; i < sa->n_ints; i++)
    x.dims[i] = sa->ints[i];
  int64_t start[GCC_MAX_DIMS], step[GCC_MAX_DIMS];
  gcc_shape y;
  GCC_TRY(gcc_slice_resolve(&g->nodes[node], g->source, &x, start, step, &y, d));
  if (!gcc_shape_equal(&y, &dy->shape))
    return shape_err(g, node, d, "dY must have the shape of Slice's output, got", &dy->shape, &y);
  set_out(g, node, 0, GCC_DT_FLOAT32, &x);
  return GCC_OK;
}

/* ---- Expand --------------------------------------------------------------- */

gcc_status shape_expand(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_copyable(g, node, 0, d));
  gcc_value *x = in_val(g, node, 0);
  const gcc_attr *sa = &g->nodes[node].av[EXPAND_SHAPE];
  if (sa->n_ints > GCC_MAX_DIMS)
    return shape_err(g, node, d, "shape has more than 8 dims; X", &x->shape, NULL);
  gcc_shape t = {sa->n_ints, {0}}, y;
  gcc_value *like = in_val(g, node, 1);
  for (int i = 0; i < sa->n_ints; i++) {
    t.dims[i] = sa->ints[i];
    if (sa->ints[i] == 0 && like && like->shape.ndim > 0) /* the batch */
      t.dims[i] = like->shape.dims[0];
    else if (sa->ints[i] < 1)
      return shape_err(g, node, d, "shape must have dims >= 1 (0: the batch, with input `like`); X",
                       &x->shape, NULL);
  }
  if (!gcc_broadcast_shapes(&x->shape, &t, &y))
    return shape_err(g, node, d, "X does not broadcast to shape:", &x->shape, &t);
  set_out(g, node, 0, x->dtype, &y);
  return GCC_OK;
}
