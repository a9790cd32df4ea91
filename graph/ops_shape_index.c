/*
 * ops_shape_index.c - shape and dtype inference of the indexing ops: Gather
 * (ONNX Gather-13) and its gradient GatherGrad (graph/ops.h).
 */
#include <inttypes.h>

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
  GCC_TRY(need_movable(g, node, 0, d));
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
