/*
 * ops_shape_core.c - shape and dtype inference of the GEMMs, elementwise ops, views,
 * losses, optimizers, AllReduce and fp16 loss scaling (the table is in graph/ops.c).
 */
#include "graph/ops_internal.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gcc_broadcast_shapes(const gcc_shape *a, const gcc_shape *b, gcc_shape *out) {
  int n = a->ndim > b->ndim ? a->ndim : b->ndim;
  gcc_shape r = {n, {0}};
  for (int i = 0; i < n; i++) {
    int ia = a->ndim - n + i, ib = b->ndim - n + i;
    int64_t da = ia >= 0 ? a->dims[ia] : 1;
    int64_t db = ib >= 0 ? b->dims[ib] : 1;
    if (da == db || db == 1)
      r.dims[i] = da;
    else if (da == 1)
      r.dims[i] = db;
    else
      return 0;
  }
  *out = r;
  return 1;
}

/* ---- shape functions -------------------------------------------------- */

gcc_status shape_gemm(gcc_graph *g, int node, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  gcc_dtype dt; /* A, B, C and Y of one float dtype (16 bits: float32 accumulation) */
  GCC_TRY(need_same_float(g, node, 0, n->n_inputs - 1, &dt, d));
  gcc_value *a = in_val(g, node, 0), *b = in_val(g, node, 1), *c = in_val(g, node, 2);
  if (a->shape.ndim != 2 || b->shape.ndim != 2)
    return shape_err(g, node, d, "Gemm takes 2-D A and B, got", &a->shape, &b->shape);
  int ta = (int)n->av[GEMM_TRANS_A].i, tb = (int)n->av[GEMM_TRANS_B].i;
  int64_t m = ta ? a->shape.dims[1] : a->shape.dims[0];
  int64_t ka = ta ? a->shape.dims[0] : a->shape.dims[1];
  int64_t kb = tb ? b->shape.dims[1] : b->shape.dims[0];
  int64_t nn = tb ? b->shape.dims[0] : b->shape.dims[1];
  if (ka != kb)
    return shape_err(g, node, d,
                     "inner dimensions of A and B (after transA/transB) differ:", &a->shape,
                     &b->shape);
  gcc_shape y = {2, {m, nn}};
  if (c) {
    gcc_shape r;
    /* ONNX Gemm: C is unidirectionally broadcastable to (M, N) */
    if (!gcc_broadcast_shapes(&y, &c->shape, &r) || !gcc_shape_equal(&r, &y))
      return shape_err(g, node, d, "C does not broadcast to the output (M, N):", &c->shape, &y);
  }
  set_out(g, node, 0, dt, &y);
  return GCC_OK;
}

/* numpy.matmul: 1-D operands are promoted (and the added dim dropped),
 * leading (batch) dims broadcast. */
gcc_status shape_matmul(gcc_graph *g, int node, gcc_diag *d) {
  gcc_dtype dt;
  GCC_TRY(need_same_float(g, node, 0, 1, &dt, d));
  gcc_value *a = in_val(g, node, 0), *b = in_val(g, node, 1);
  const gcc_shape *sa = &a->shape, *sb = &b->shape;
  if (sa->ndim < 1 || sb->ndim < 1)
    return shape_err(g, node, d, "MatMul needs operands of at least one dim, got", sa, sb);
  int64_t k1 = sa->dims[sa->ndim - 1], k2 = sb->ndim == 1 ? sb->dims[0] : sb->dims[sb->ndim - 2];
  if (k1 != k2)
    return shape_err(g, node, d, "inner dimensions differ:", sa, sb);
  gcc_shape ba = {sa->ndim > 2 ? sa->ndim - 2 : 0, {0}},
            bb = {sb->ndim > 2 ? sb->ndim - 2 : 0, {0}};
  for (int i = 0; i < ba.ndim; i++)
    ba.dims[i] = sa->dims[i];
  for (int i = 0; i < bb.ndim; i++)
    bb.dims[i] = sb->dims[i];
  gcc_shape y;
  if (!gcc_broadcast_shapes(&ba, &bb, &y))
    return shape_err(g, node, d, "batch dims do not broadcast:", sa, sb);
  if (sa->ndim >= 2)
    y.dims[y.ndim++] = sa->dims[sa->ndim - 2];
  if (sb->ndim >= 2)
    y.dims[y.ndim++] = sb->dims[sb->ndim - 1];
  set_out(g, node, 0, dt, &y);
  return GCC_OK;
}

/* Add, Sub, Mul, Div: float32, or (on the CPU: integer values stay on the
 * host) int64 / int32 with both operands of the same dtype. */
gcc_status shape_add(gcc_graph *g, int node, gcc_diag *d) {
  gcc_value *a = in_val(g, node, 0), *b = in_val(g, node, 1);
  gcc_dtype dt =
      a->dtype == GCC_DT_INT64 || a->dtype == GCC_DT_INT32 || gcc_dtype_is_float(a->dtype)
          ? a->dtype
          : GCC_DT_FLOAT32;
  GCC_TRY(need_dtype(g, node, 0, dt, d));
  GCC_TRY(need_dtype(g, node, 1, dt, d));
  gcc_shape r;
  if (!gcc_broadcast_shapes(&a->shape, &b->shape, &r))
    return shape_err(g, node, d, "operands do not broadcast:", &a->shape, &b->shape);
  set_out(g, node, 0, dt, &r);
  return GCC_OK;
}

/* Concat, Transpose, Pad move elements of any computable dtype (float32,
 * the 16-bit floats of the autocast pass, int64, int32). */
gcc_status need_movable(gcc_graph *g, int node, int k, gcc_diag *d) {
  gcc_value *v = in_val(g, node, k);
  if (v && !gcc_dtype_is_float(v->dtype) && v->dtype != GCC_DT_INT64 && v->dtype != GCC_DT_INT32)
    return need_dtype(g, node, k, GCC_DT_FLOAT32, d);
  return GCC_OK;
}

/* Concat, Transpose, Slice, Expand, Gather, GatherElements copy elements of
 * any dtype need_movable takes, or bool (1 byte: the attention masks of the
 * PyTorch exporters). */
gcc_status need_copyable(gcc_graph *g, int node, int k, gcc_diag *d) {
  gcc_value *v = in_val(g, node, k);
  if (v && v->dtype == GCC_DT_BOOL)
    return GCC_OK;
  return need_movable(g, node, k, d);
}

/* Elementwise float ops: float32, or a 16-bit float computed in float32 and
 * stored in its own dtype. */
gcc_status shape_unary_same(gcc_graph *g, int node, gcc_diag *d) {
  gcc_dtype dt;
  GCC_TRY(need_same_float(g, node, 0, 0, &dt, d));
  gcc_value *x = in_val(g, node, 0);
  set_out(g, node, 0, dt, &x->shape);
  return GCC_OK;
}

/* The gradients of elementwise ops (dY, and Y or X): one float dtype, one
 * shape. */
gcc_status shape_elem_grad(gcc_graph *g, int node, gcc_diag *d) {
  gcc_dtype dt;
  GCC_TRY(need_same_float(g, node, 0, 1, &dt, d));
  gcc_value *dy = in_val(g, node, 0), *y = in_val(g, node, 1);
  if (!gcc_shape_equal(&dy->shape, &y->shape))
    return shape_err(g, node, d, "dY and Y differ in shape:", &dy->shape, &y->shape);
  set_out(g, node, 0, dt, &y->shape);
  return GCC_OK;
}

/* ONNX Cast between the float dtypes (`to`: a graph.proto DataType). */
static int castable(int64_t t) {
  return t > 0 && t < GCC_DT_COUNT &&
         (gcc_dtype_is_float((gcc_dtype)t) || t == GCC_DT_INT64 || t == GCC_DT_INT32 ||
          t == GCC_DT_BOOL);
}

gcc_status shape_cast(gcc_graph *g, int node, gcc_diag *d) {
  int64_t from = in_val(g, node, 0)->dtype;
  if (!castable(from))
    GCC_TRY(need_dtype(g, node, 0, GCC_DT_FLOAT32, d));
  int64_t to = g->nodes[node].av[CAST_TO].i;
  if (!castable(to)) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: %s: Cast to dtype %" PRId64
                        " (%s): this version casts between float32, float16, bfloat16, int64, "
                        "int32 and bool only",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc), to,
                        to >= 0 && to < GCC_DT_COUNT ? gcc_dtype_name((gcc_dtype)to) : "unknown");
  }
  set_out(g, node, 0, (gcc_dtype)to, &in_val(g, node, 0)->shape);
  return GCC_OK;
}

/* Identity copies any dtype on the CPU; generated kernels are float. */
gcc_status shape_identity(gcc_graph *g, int node, gcc_diag *d) {
  (void)d;
  gcc_value *x = in_val(g, node, 0);
  set_out(g, node, 0, x->dtype, &x->shape);
  return GCC_OK;
}

gcc_status shape_unary_any(gcc_graph *g, int node, gcc_diag *d) {
  (void)d;
  gcc_value *x = in_val(g, node, 0);
  set_out(g, node, 0, x->dtype, &x->shape);
  return GCC_OK;
}

/* Softmax: X float32 of rank >= 1, axis in [-rank, rank). */
static gcc_status check_softmax_axis(gcc_graph *g, int node, const gcc_value *x, gcc_diag *d) {
  int64_t axis = g->nodes[node].av[SOFTMAX_AXIS].i;
  if (x->shape.ndim < 1 || axis < -x->shape.ndim || axis >= x->shape.ndim) {
    char desc[600], sx[128];
    return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: %s: axis %" PRId64 " is out of range for %s",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc), axis,
                        gcc_shape_str(&x->shape, sx, sizeof sx));
  }
  return GCC_OK;
}

gcc_status shape_softmax(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_dtype(g, node, 0, GCC_DT_FLOAT32, d));
  gcc_value *x = in_val(g, node, 0);
  GCC_TRY(check_softmax_axis(g, node, x, d));
  set_out(g, node, 0, GCC_DT_FLOAT32, &x->shape);
  return GCC_OK;
}

gcc_status shape_relu_grad(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_dtype(g, node, 0, GCC_DT_FLOAT32, d));
  GCC_TRY(need_dtype(g, node, 1, GCC_DT_FLOAT32, d));
  gcc_value *dy = in_val(g, node, 0), *y = in_val(g, node, 1);
  if (!gcc_shape_equal(&dy->shape, &y->shape))
    return shape_err(g, node, d, "dY and Y differ in shape:", &dy->shape, &y->shape);
  set_out(g, node, 0, GCC_DT_FLOAT32, &y->shape);
  return GCC_OK;
}

gcc_status shape_softmax_grad(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(shape_relu_grad(g, node, d)); /* dY and Y: float32, same shape */
  return check_softmax_axis(g, node, in_val(g, node, 1), d);
}

gcc_status shape_reshape(gcc_graph *g, int node, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  gcc_value *x = in_val(g, node, 0);
  const gcc_attr *sa = &n->av[RESHAPE_SHAPE];
  char desc[600];
  if (sa->n_ints > GCC_MAX_DIMS)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: %s: more than %d dims", g->source,
                        gcc_node_desc(g, node, desc, sizeof desc), GCC_MAX_DIMS);
  gcc_shape y = {sa->n_ints, {0}};
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < sa->n_ints; i++) {
    int64_t v = sa->ints[i];
    if (v == 0) { /* ONNX: 0 copies the input dim (allowzero = 0) */
      if (i >= x->shape.ndim)
        return shape_err(g, node, d, "shape entry 0 has no input dim to copy; input", &x->shape,
                         NULL);
      v = x->shape.dims[i];
    } else if (v == -1) {
      if (infer >= 0)
        return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: %s: more than one -1 in shape", g->source,
                            gcc_node_desc(g, node, desc, sizeof desc));
      infer = i;
      continue;
    } else if (v < 0) {
      return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: %s: invalid shape entry %" PRId64, g->source,
                          gcc_node_desc(g, node, desc, sizeof desc), v);
    }
    y.dims[i] = v;
    known *= v;
  }
  int64_t total = gcc_shape_numel(&x->shape, NULL);
  if (infer >= 0) {
    if (known == 0 || total % known != 0) {
      gcc_shape t = y;
      t.dims[infer] = -1;
      return shape_err(g, node, d, "cannot reshape", &x->shape, &t);
    }
    y.dims[infer] = total / known;
  }
  if (gcc_shape_numel(&y, NULL) != total)
    return shape_err(g, node, d, "element counts differ when reshaping", &x->shape, &y);
  set_out(g, node, 0, x->dtype, &y);
  return GCC_OK;
}

gcc_status shape_flatten(gcc_graph *g, int node, gcc_diag *d) {
  gcc_value *x = in_val(g, node, 0);
  int64_t axis = g->nodes[node].av[FLATTEN_AXIS].i;
  if (axis < 0)
    axis += x->shape.ndim;
  if (axis < 0 || axis > x->shape.ndim) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: %s: axis %" PRId64 " out of range for rank %d",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc),
                        g->nodes[node].av[FLATTEN_AXIS].i, x->shape.ndim);
  }
  gcc_shape y = {2, {1, 1}};
  for (int i = 0; i < x->shape.ndim; i++)
    y.dims[i < axis ? 0 : 1] *= x->shape.dims[i];
  set_out(g, node, 0, x->dtype, &y);
  return GCC_OK;
}

/* float32, or a 16-bit float (the bias gradient of a 16-bit Gemm, autocast.c)
 * summed in float32 and stored in its own dtype, as torch.sum of a bfloat16
 * tensor is. */
gcc_status shape_reduce_sum_to(gcc_graph *g, int node, gcc_diag *d) {
  gcc_dtype dt;
  GCC_TRY(need_same_float(g, node, 0, 0, &dt, d));
  gcc_value *x = in_val(g, node, 0);
  const gcc_attr *sa = &g->nodes[node].av[REDUCE_SUM_TO_SHAPE];
  gcc_shape y = {sa->n_ints, {0}};
  if (sa->n_ints > GCC_MAX_DIMS)
    return shape_err(g, node, d, "target shape has too many dims for input", &x->shape, NULL);
  for (int i = 0; i < sa->n_ints; i++) {
    y.dims[i] = sa->ints[i];
    if (y.dims[i] == 0 && sa->n_ints == x->shape.ndim) /* 0 keeps the input's dim (its batch) */
      y.dims[i] = x->shape.dims[i];
  }
  gcc_shape r;
  if (!gcc_broadcast_shapes(&x->shape, &y, &r) || !gcc_shape_equal(&r, &x->shape))
    return shape_err(g, node, d, "target shape does not broadcast back to the input:", &y,
                     &x->shape);
  set_out(g, node, 0, dt, &y);
  return GCC_OK;
}

static gcc_status check_reduction(gcc_graph *g, int node, int idx, gcc_diag *d) {
  const char *r = g->nodes[node].av[idx].s;
  if (strcmp(r, "mean") != 0 && strcmp(r, "sum") != 0) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: %s: reduction '%s' is not supported (use \"mean\" or \"sum\")",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc), r);
  }
  return GCC_OK;
}

static gcc_status check_sce_inputs(gcc_graph *g, int node, int first, gcc_diag *d) {
  gcc_value *x = in_val(g, node, first), *t = in_val(g, node, first + 1),
            *w = in_val(g, node, first + 2);
  GCC_TRY(need_dtype(g, node, first, GCC_DT_FLOAT32, d));
  char desc[600];
  if (t->dtype != GCC_DT_INT64 && t->dtype != GCC_DT_INT32)
    return gcc_diag_set(
        d, GCC_ERR_UNSUPPORTED, "%s: %s: labels '%s' must be int64 or int32 class indices, got %s",
        g->source, gcc_node_desc(g, node, desc, sizeof desc), t->name, gcc_dtype_name(t->dtype));
  if (x->shape.ndim != 2)
    return shape_err(g, node, d, "logits must be 2-D (N, C), got", &x->shape, NULL);
  if (t->shape.ndim != 1 || t->shape.dims[0] != x->shape.dims[0])
    return shape_err(g, node, d, "labels must be (N) for logits (N, C):", &t->shape, &x->shape);
  if (w) {
    GCC_TRY(need_dtype(g, node, first + 2, GCC_DT_FLOAT32, d));
    if (w->shape.ndim != 1 || w->shape.dims[0] != x->shape.dims[1])
      return shape_err(g, node, d, "class weights must be (C) for logits (N, C):", &w->shape,
                       &x->shape);
  }
  return check_reduction(g, node, SCE_REDUCTION, d);
}

gcc_status shape_sce(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(check_sce_inputs(g, node, 0, d));
  set_out(g, node, 0, GCC_DT_FLOAT32, &kScalar);
  return GCC_OK;
}

static gcc_status need_scalar(gcc_graph *g, int node, int k, gcc_diag *d) {
  gcc_value *v = in_val(g, node, k);
  GCC_TRY(need_dtype(g, node, k, GCC_DT_FLOAT32, d));
  if (gcc_shape_numel(&v->shape, NULL) != 1)
    return shape_err(g, node, d, "the loss gradient must be a scalar, got", &v->shape, NULL);
  return GCC_OK;
}

gcc_status shape_sce_grad(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_scalar(g, node, 0, d));
  GCC_TRY(check_sce_inputs(g, node, 1, d));
  set_out(g, node, 0, GCC_DT_FLOAT32, &in_val(g, node, 1)->shape);
  return GCC_OK;
}

static gcc_status check_mse_inputs(gcc_graph *g, int node, int first, gcc_diag *d) {
  GCC_TRY(need_dtype(g, node, first, GCC_DT_FLOAT32, d));
  GCC_TRY(need_dtype(g, node, first + 1, GCC_DT_FLOAT32, d));
  gcc_value *p = in_val(g, node, first), *t = in_val(g, node, first + 1);
  if (!gcc_shape_equal(&p->shape, &t->shape))
    return shape_err(g, node, d, "prediction and target differ in shape:", &p->shape, &t->shape);
  return check_reduction(g, node, MSE_REDUCTION, d);
}

gcc_status shape_mse(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(check_mse_inputs(g, node, 0, d));
  set_out(g, node, 0, GCC_DT_FLOAT32, &kScalar);
  return GCC_OK;
}

gcc_status shape_mse_grad(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_scalar(g, node, 0, d));
  GCC_TRY(check_mse_inputs(g, node, 1, d));
  set_out(g, node, 0, GCC_DT_FLOAT32, &in_val(g, node, 1)->shape);
  return GCC_OK;
}

/* AllReduce: float32 gradients of any shape, no outputs */
gcc_status shape_all_reduce(gcc_graph *g, int node, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  for (int k = 0; k < n->n_inputs; k++)
    GCC_TRY(need_dtype(g, node, k, GCC_DT_FLOAT32, d));
  return GCC_OK;
}

double flops_all_reduce(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  double f = 0;
  for (int k = 0; k < n->n_inputs; k++)
    if (n->inputs[k] >= 0)
      f += (double)gcc_shape_numel(&g->values[n->inputs[k]].shape, NULL);
  return f;
}

/* float32 input k of one element (a loss-scaling scalar) */
static gcc_status need_one(gcc_graph *g, int node, int k, gcc_diag *d) {
  gcc_value *v = in_val(g, node, k);
  if (!v)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: node '%s' (%s): input %d is missing",
                        g->source, g->nodes[node].name, gcc_op_name(g->nodes[node].op), k);
  GCC_TRY(need_dtype(g, node, k, GCC_DT_FLOAT32, d));
  if (gcc_shape_numel(&v->shape, NULL) != 1)
    return shape_err(g, node, d, "a loss-scaling input must be a scalar, got", &v->shape, NULL);
  return GCC_OK;
}

/* inputs [0, scaler): the parameter, its gradient and state, of one
 * shape; from `scaler` on (loss scaling): scale, found_inf, applied_steps
 * (all three, or all -1 before a clip input); then (gradient clipping) the
 * GradNorm output, float32 (2) */
static gcc_status shape_optimizer(gcc_graph *g, int node, int scaler, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  gcc_value *p = in_val(g, node, 0);
  int clip = scaler + SCALER_N_IN;
  if (n->n_inputs > scaler && n->n_inputs != clip && n->n_inputs != clip + 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: node '%s' (%s): %d inputs; loss scaling adds %d to the first %d, "
                        "gradient clipping one more",
                        g->source, n->name, gcc_op_name(n->op), n->n_inputs, SCALER_N_IN, scaler);
  if (n->n_inputs > scaler) {
    int given = 0;
    for (int k = scaler; k < clip; k++)
      given += n->inputs[k] >= 0;
    if (given != 0 && given != SCALER_N_IN)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: node '%s' (%s): the loss scaling inputs are all given or none",
                          g->source, n->name, gcc_op_name(n->op));
  }
  for (int k = 0; k < n->n_inputs; k++) {
    if (k == clip) {
      GCC_TRY(need_dtype(g, node, k, GCC_DT_FLOAT32, d));
      if (gcc_shape_numel(&in_val(g, node, k)->shape, NULL) != 2)
        return shape_err(g, node, d, "the clip input (GradNorm's output) must hold 2 floats, got",
                         &in_val(g, node, k)->shape, NULL);
      continue;
    }
    if (k >= scaler) {
      if (n->inputs[k] >= 0)
        GCC_TRY(need_one(g, node, k, d));
      continue;
    }
    gcc_value *v = in_val(g, node, k);
    if (!v)
      continue;
    GCC_TRY(need_dtype(g, node, k, GCC_DT_FLOAT32, d));
    if (!gcc_shape_equal(&v->shape, &p->shape))
      return shape_err(g, node, d, "parameter and its gradient/state differ in shape:", &p->shape,
                       &v->shape);
  }
  if (n->n_outputs == 1) { /* the parameter's 16-bit copy (GCC_OPF_OPTIMIZER) */
    gcc_value *c = out_val(g, node, 0);
    if ((c->dtype != GCC_DT_BFLOAT16 && c->dtype != GCC_DT_FLOAT16) ||
        c->kind != GCC_VALUE_OPT_STATE) {
      char desc[600];
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: %s: output '%s' (%s, %s) must be the parameter's bfloat16 / "
                          "float16 copy, which --precision bf16|fp16 makes",
                          g->source, gcc_node_desc(g, node, desc, sizeof desc), c->name,
                          gcc_dtype_name(c->dtype), gcc_value_kind_name(c->kind));
    }
    c->shape = p->shape;
  }
  return GCC_OK;
}

gcc_status shape_sgd(gcc_graph *g, int node, gcc_diag *d) {
  return shape_optimizer(g, node, SGD_IN_SCALER, d);
}

gcc_status shape_adam(gcc_graph *g, int node, gcc_diag *d) {
  return shape_optimizer(g, node, ADAM_IN_SCALER, d);
}

/* AmpNonFiniteCheck: scratch [2], float32 gradients of any shape ->
 * found_inf [] */
gcc_status shape_amp_check(gcc_graph *g, int node, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  for (int k = 0; k < n->n_inputs; k++)
    GCC_TRY(need_dtype(g, node, k, GCC_DT_FLOAT32, d));
  if (gcc_shape_numel(&in_val(g, node, AMP_CHECK_IN_SCRATCH)->shape, NULL) != 2)
    return shape_err(g, node, d, "the check's scratch must hold 2 words, got",
                     &in_val(g, node, AMP_CHECK_IN_SCRATCH)->shape, NULL);
  set_out(g, node, 0, GCC_DT_FLOAT32, &kScalar);
  return GCC_OK;
}

double flops_amp_check(const gcc_graph *g, int node) {
  return flops_all_reduce(g, node) - 2.0; /* one comparison per gradient element */
}

/* GradNorm: ([scale] when scaled,) float32 gradients of any shape ->
 * [norm, coefficient] */
gcc_status shape_grad_norm(gcc_graph *g, int node, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  for (int k = 0; k < n->n_inputs; k++)
    GCC_TRY(need_dtype(g, node, k, GCC_DT_FLOAT32, d));
  if (n->n_av > GRAD_NORM_SCALED && n->av[GRAD_NORM_SCALED].i) {
    GCC_TRY(need_one(g, node, 0, d));
    if (n->n_inputs < 2)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: node '%s' (GradNorm): scaled needs the scale and a gradient",
                          g->source, n->name);
  }
  if (n->n_av > GRAD_NORM_MAX_NORM &&
      !(n->av[GRAD_NORM_MAX_NORM].f > 0.0f && isfinite(n->av[GRAD_NORM_MAX_NORM].f)))
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: node '%s' (GradNorm): max_norm must be a finite number > 0, got %g",
                        g->source, n->name, (double)n->av[GRAD_NORM_MAX_NORM].f);
  gcc_shape two = {1, {2}};
  set_out(g, node, 0, GCC_DT_FLOAT32, &two);
  return GCC_OK;
}

double flops_grad_norm(const gcc_graph *g, int node) {
  return 2.0 * flops_all_reduce(g, node); /* a multiply-add per gradient element */
}

/* AmpUpdateScale: four float32 scalars, updated in place */
gcc_status shape_amp_update(gcc_graph *g, int node, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  for (int k = 0; k < n->n_inputs; k++)
    GCC_TRY(need_one(g, node, k, d));
  if (n->n_av > AMP_UPDATE_GROWTH_INTERVAL &&
      (n->av[AMP_UPDATE_GROWTH_INTERVAL].i < 1 || !(n->av[AMP_UPDATE_GROWTH_FACTOR].f > 0.0f) ||
       !(n->av[AMP_UPDATE_BACKOFF_FACTOR].f > 0.0f)))
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: node '%s' (AmpUpdateScale): growth_interval must be >= 1 and the "
                        "factors > 0",
                        g->source, n->name);
  return GCC_OK;
}

double flops_amp_update(const gcc_graph *g, int node) {
  (void)g;
  (void)node;
  return 4.0;
}
