/*
 * ops.c - the bottom op table: per op its name, arity, attribute schema,
 * shape and dtype inference, FLOPs and the source of its semantics. The
 * layers above keep their own tables keyed by the same enum (see ops.h);
 * nothing here knows about gradients, kernels or devices.
 */
#include "graph/ops.h"

#include <float.h>
#include <inttypes.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------- */

static gcc_value *in_val(gcc_graph *g, int node, int k) {
  if (k >= g->nodes[node].n_inputs)
    return NULL; /* an optional input left out */
  int v = g->nodes[node].inputs[k];
  return v >= 0 ? &g->values[v] : NULL;
}

static gcc_value *out_val(gcc_graph *g, int node, int k) {
  return &g->values[g->nodes[node].outputs[k]];
}

static gcc_status shape_err(gcc_graph *g, int node, gcc_diag *d, const char *what,
                            const gcc_shape *a, const gcc_shape *b) {
  char desc[600], sa[128], sb[128];
  gcc_shape_str(a, sa, sizeof sa);
  if (b)
    gcc_shape_str(b, sb, sizeof sb);
  return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: %s: %s %s%s%s", g->source,
                      gcc_node_desc(g, node, desc, sizeof desc), what, sa, b ? " and " : "",
                      b ? sb : "");
}

static gcc_status need_dtype(gcc_graph *g, int node, int k, gcc_dtype want, gcc_diag *d) {
  gcc_value *v = in_val(g, node, k);
  if (v && v->dtype != want) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: %s: input %d ('%s') has dtype %s, expected %s",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc), k, v->name,
                        gcc_dtype_name(v->dtype), gcc_dtype_name(want));
  }
  return GCC_OK;
}

/* Inputs first .. last (omitted ones skipped) of one float dtype: float32,
 * or float16 / bfloat16 (values the autocast pass made); into *dt. */
static gcc_status need_same_float(gcc_graph *g, int node, int first, int last, gcc_dtype *dt,
                                  gcc_diag *d) {
  gcc_value *v0 = in_val(g, node, first);
  *dt = v0 && gcc_dtype_is_float(v0->dtype) ? v0->dtype : GCC_DT_FLOAT32;
  for (int k = first; k <= last; k++)
    GCC_TRY(need_dtype(g, node, k, *dt, d));
  return GCC_OK;
}

static void set_out(gcc_graph *g, int node, int k, gcc_dtype dt, const gcc_shape *s) {
  gcc_value *o = out_val(g, node, k);
  o->dtype = dt;
  o->shape = *s;
}

static const gcc_shape kScalar = {0, {0}};

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

static gcc_status shape_gemm(gcc_graph *g, int node, gcc_diag *d) {
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
static gcc_status shape_matmul(gcc_graph *g, int node, gcc_diag *d) {
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
static gcc_status shape_add(gcc_graph *g, int node, gcc_diag *d) {
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
static gcc_status need_movable(gcc_graph *g, int node, int k, gcc_diag *d) {
  gcc_value *v = in_val(g, node, k);
  if (v && !gcc_dtype_is_float(v->dtype) && v->dtype != GCC_DT_INT64 && v->dtype != GCC_DT_INT32)
    return need_dtype(g, node, k, GCC_DT_FLOAT32, d);
  return GCC_OK;
}

/* Elementwise float ops: float32, or a 16-bit float computed in float32 and
 * stored in its own dtype. */
static gcc_status shape_unary_same(gcc_graph *g, int node, gcc_diag *d) {
  gcc_dtype dt;
  GCC_TRY(need_same_float(g, node, 0, 0, &dt, d));
  gcc_value *x = in_val(g, node, 0);
  set_out(g, node, 0, dt, &x->shape);
  return GCC_OK;
}

/* The gradients of elementwise ops (dY, and Y or X): one float dtype, one
 * shape. */
static gcc_status shape_elem_grad(gcc_graph *g, int node, gcc_diag *d) {
  gcc_dtype dt;
  GCC_TRY(need_same_float(g, node, 0, 1, &dt, d));
  gcc_value *dy = in_val(g, node, 0), *y = in_val(g, node, 1);
  if (!gcc_shape_equal(&dy->shape, &y->shape))
    return shape_err(g, node, d, "dY and Y differ in shape:", &dy->shape, &y->shape);
  set_out(g, node, 0, dt, &y->shape);
  return GCC_OK;
}

/* ONNX Cast between the float dtypes (`to`: a graph.proto DataType). */
static gcc_status shape_cast(gcc_graph *g, int node, gcc_diag *d) {
  gcc_dtype dt;
  GCC_TRY(need_same_float(g, node, 0, 0, &dt, d));
  int64_t to = g->nodes[node].av[CAST_TO].i;
  if (to < 0 || to >= GCC_DT_COUNT || !gcc_dtype_is_float((gcc_dtype)to)) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: %s: Cast to dtype %" PRId64
                        " (%s): this version casts between float32, float16 and bfloat16 only",
                        g->source, gcc_node_desc(g, node, desc, sizeof desc), to,
                        gcc_dtype_name((gcc_dtype)to));
  }
  set_out(g, node, 0, (gcc_dtype)to, &in_val(g, node, 0)->shape);
  return GCC_OK;
}

/* Identity copies any dtype on the CPU; generated kernels are float. */
static gcc_status shape_identity(gcc_graph *g, int node, gcc_diag *d) {
  (void)d;
  gcc_value *x = in_val(g, node, 0);
  set_out(g, node, 0, x->dtype, &x->shape);
  return GCC_OK;
}

static gcc_status shape_unary_any(gcc_graph *g, int node, gcc_diag *d) {
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

static gcc_status shape_softmax(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_dtype(g, node, 0, GCC_DT_FLOAT32, d));
  gcc_value *x = in_val(g, node, 0);
  GCC_TRY(check_softmax_axis(g, node, x, d));
  set_out(g, node, 0, GCC_DT_FLOAT32, &x->shape);
  return GCC_OK;
}

static gcc_status shape_relu_grad(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_dtype(g, node, 0, GCC_DT_FLOAT32, d));
  GCC_TRY(need_dtype(g, node, 1, GCC_DT_FLOAT32, d));
  gcc_value *dy = in_val(g, node, 0), *y = in_val(g, node, 1);
  if (!gcc_shape_equal(&dy->shape, &y->shape))
    return shape_err(g, node, d, "dY and Y differ in shape:", &dy->shape, &y->shape);
  set_out(g, node, 0, GCC_DT_FLOAT32, &y->shape);
  return GCC_OK;
}

static gcc_status shape_softmax_grad(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(shape_relu_grad(g, node, d)); /* dY and Y: float32, same shape */
  return check_softmax_axis(g, node, in_val(g, node, 1), d);
}

static gcc_status shape_reshape(gcc_graph *g, int node, gcc_diag *d) {
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

static gcc_status shape_flatten(gcc_graph *g, int node, gcc_diag *d) {
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
static gcc_status shape_reduce_sum_to(gcc_graph *g, int node, gcc_diag *d) {
  gcc_dtype dt;
  GCC_TRY(need_same_float(g, node, 0, 0, &dt, d));
  gcc_value *x = in_val(g, node, 0);
  const gcc_attr *sa = &g->nodes[node].av[REDUCE_SUM_TO_SHAPE];
  gcc_shape y = {sa->n_ints, {0}};
  if (sa->n_ints > GCC_MAX_DIMS)
    return shape_err(g, node, d, "target shape has too many dims for input", &x->shape, NULL);
  for (int i = 0; i < sa->n_ints; i++)
    y.dims[i] = sa->ints[i];
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

static gcc_status shape_sce(gcc_graph *g, int node, gcc_diag *d) {
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

static gcc_status shape_sce_grad(gcc_graph *g, int node, gcc_diag *d) {
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

static gcc_status shape_mse(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(check_mse_inputs(g, node, 0, d));
  set_out(g, node, 0, GCC_DT_FLOAT32, &kScalar);
  return GCC_OK;
}

static gcc_status shape_mse_grad(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_scalar(g, node, 0, d));
  GCC_TRY(check_mse_inputs(g, node, 1, d));
  set_out(g, node, 0, GCC_DT_FLOAT32, &in_val(g, node, 1)->shape);
  return GCC_OK;
}

/* AllReduce: float32 gradients of any shape, no outputs */
static gcc_status shape_all_reduce(gcc_graph *g, int node, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  for (int k = 0; k < n->n_inputs; k++)
    GCC_TRY(need_dtype(g, node, k, GCC_DT_FLOAT32, d));
  return GCC_OK;
}

static double flops_all_reduce(const gcc_graph *g, int node) {
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
 * shape; from `scaler` on (loss scaling): scale, found_inf, applied_steps */
static gcc_status shape_optimizer(gcc_graph *g, int node, int scaler, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  gcc_value *p = in_val(g, node, 0);
  if (n->n_inputs > scaler && n->n_inputs != scaler + SCALER_N_IN)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: node '%s' (%s): %d inputs; loss scaling adds %d to the first %d",
                        g->source, n->name, gcc_op_name(n->op), n->n_inputs, SCALER_N_IN, scaler);
  for (int k = 0; k < n->n_inputs; k++) {
    if (k >= scaler) {
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

static gcc_status shape_sgd(gcc_graph *g, int node, gcc_diag *d) {
  return shape_optimizer(g, node, SGD_IN_SCALER, d);
}

static gcc_status shape_adam(gcc_graph *g, int node, gcc_diag *d) {
  return shape_optimizer(g, node, ADAM_IN_SCALER, d);
}

/* AmpNonFiniteCheck: scratch [2], float32 gradients of any shape ->
 * found_inf [] */
static gcc_status shape_amp_check(gcc_graph *g, int node, gcc_diag *d) {
  const gcc_node *n = &g->nodes[node];
  for (int k = 0; k < n->n_inputs; k++)
    GCC_TRY(need_dtype(g, node, k, GCC_DT_FLOAT32, d));
  if (gcc_shape_numel(&in_val(g, node, AMP_CHECK_IN_SCRATCH)->shape, NULL) != 2)
    return shape_err(g, node, d, "the check's scratch must hold 2 words, got",
                     &in_val(g, node, AMP_CHECK_IN_SCRATCH)->shape, NULL);
  set_out(g, node, 0, GCC_DT_FLOAT32, &kScalar);
  return GCC_OK;
}

static double flops_amp_check(const gcc_graph *g, int node) {
  return flops_all_reduce(g, node) - 2.0; /* one comparison per gradient element */
}

/* AmpUpdateScale: four float32 scalars, updated in place */
static gcc_status shape_amp_update(gcc_graph *g, int node, gcc_diag *d) {
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

static double flops_amp_update(const gcc_graph *g, int node) {
  (void)g;
  (void)node;
  return 4.0;
}

/* ---- convolution and pooling (2-D, NCHW) ---------------------------- */

static int64_t ints_at(const gcc_attr *a, int k, int64_t def) {
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

static gcc_status need_rank(gcc_graph *g, int node, int k, int rank, const char *what,
                            gcc_diag *d) {
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
static gcc_status shape_conv(gcc_graph *g, int node, gcc_diag *d) {
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
static gcc_status shape_conv_grad_data(gcc_graph *g, int node, gcc_diag *d) {
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
static gcc_status shape_conv_grad_filter(gcc_graph *g, int node, gcc_diag *d) {
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
static gcc_status shape_conv_grad_bias(gcc_graph *g, int node, gcc_diag *d) {
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
static gcc_status shape_pool(gcc_graph *g, int node, gcc_diag *d) {
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
static gcc_status shape_max_pool_grad(gcc_graph *g, int node, gcc_diag *d) {
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
static gcc_status shape_avg_pool_grad(gcc_graph *g, int node, gcc_diag *d) {
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

/* ---- ops of ONNX import (issue 14) ----------------------------------- */

static const char *node_d(gcc_graph *g, int node, char *buf, size_t cap) {
  return gcc_node_desc(g, node, buf, cap);
}

/* ONNX LRN: X [N, C, ...] -> same shape. */
static gcc_status shape_lrn(gcc_graph *g, int node, gcc_diag *d) {
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
static gcc_status shape_lrn_grad(gcc_graph *g, int node, gcc_diag *d) {
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
static gcc_status shape_batch_norm(gcc_graph *g, int node, gcc_diag *d) {
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
static gcc_status shape_batch_norm_grad(gcc_graph *g, int node, gcc_diag *d) {
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

/* Dropout (X) -> Y: float32, any shape; ratio in [0, 1]. DropoutGrad (dY)
 * -> dX: the same. */
static gcc_status shape_dropout(gcc_graph *g, int node, gcc_diag *d) {
  float p = g->nodes[node].av[DROPOUT_RATIO].f; /* DROPOUT_GRAD_RATIO too */
  if (!(p >= 0.0f && p <= 1.0f)) {
    char desc[600];
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: ratio %g is outside [0, 1]", g->source,
                        gcc_node_desc(g, node, desc, sizeof desc), (double)p);
  }
  return shape_unary_same(g, node, d);
}

/* ONNX Concat: equal ranks and dims but along axis. */
static gcc_status shape_concat(gcc_graph *g, int node, gcc_diag *d) {
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
    GCC_TRY(need_movable(g, node, k, d));
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
static gcc_status shape_transpose(gcc_graph *g, int node, gcc_diag *d) {
  GCC_TRY(need_movable(g, node, 0, d));
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
static gcc_status shape_pad(gcc_graph *g, int node, gcc_diag *d) {
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
static gcc_status shape_conv_transpose(gcc_graph *g, int node, gcc_diag *d) {
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

/* ---- flops ---------------------------------------------------------- */

static double numel_out(const gcc_graph *g, int node) {
  const gcc_value *o = &g->values[g->nodes[node].outputs[0]];
  return (double)gcc_shape_numel(&o->shape, NULL);
}

static double numel_in0(const gcc_graph *g, int node) {
  const gcc_value *x = &g->values[g->nodes[node].inputs[0]];
  return (double)gcc_shape_numel(&x->shape, NULL);
}

static double flops_gemm(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  const gcc_value *a = &g->values[n->inputs[0]];
  const gcc_shape *y = &g->values[n->outputs[0]].shape;
  int64_t k =
      (n->n_av > GEMM_TRANS_A && n->av[GEMM_TRANS_A].i) ? a->shape.dims[0] : a->shape.dims[1];
  double f = 2.0 * (double)y->dims[0] * (double)y->dims[1] * (double)k;
  if (n->n_inputs > 2 && n->inputs[2] >= 0)
    f += (double)y->dims[0] * (double)y->dims[1];
  return f;
}

static double flops_matmul(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  const gcc_value *a = &g->values[n->inputs[0]];
  const gcc_shape *y = &g->values[n->outputs[0]].shape;
  return 2.0 * (double)gcc_shape_numel(y, NULL) * (double)a->shape.dims[a->shape.ndim - 1];
}

static double flops_lrn(const gcc_graph *g, int node) {
  return (double)(g->nodes[node].av[LRN_SIZE].i + 3) * numel_out(g, node);
}

/* BatchNormalization and its gradient: a few passes over X */
static double flops_batch_norm(const gcc_graph *g, int node) {
  return 4.0 * numel_in0(g, node);
}

/* ConvTranspose: the multiply-adds of the convolution it is the adjoint of */
static double flops_conv_transpose(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  const gcc_shape *x = &g->values[n->inputs[0]].shape, *w = &g->values[n->inputs[1]].shape;
  return 2.0 * (double)gcc_shape_numel(x, NULL) * (double)w->dims[1] * (double)w->dims[2] *
         (double)w->dims[3];
}

/* softmax + log + pick: about 5 per logit (max, sub, exp, sum, scale) */
static double flops_sce(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  int logits = gcc_op(n->op)->flags & GCC_OPF_LOSS ? n->inputs[0] : n->inputs[1];
  return 5.0 * (double)gcc_shape_numel(&g->values[logits].shape, NULL);
}

static double flops_mse(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  int pred = gcc_op(n->op)->flags & GCC_OPF_LOSS ? n->inputs[0] : n->inputs[1];
  return 3.0 * (double)gcc_shape_numel(&g->values[pred].shape, NULL);
}

static double flops_sgd(const gcc_graph *g, int node) {
  return 5.0 * numel_in0(g, node);
}
static double flops_adam(const gcc_graph *g, int node) {
  return 14.0 * numel_in0(g, node);
}

/* 2 * N * M * oh * ow * C * kh * kw (+ the bias) for Conv; the gradients do
 * the same multiply-adds. */
static double conv_macs(const gcc_shape *y, const gcc_shape *w) {
  return (double)y->dims[0] * (double)w->dims[0] * (double)y->dims[2] * (double)y->dims[3] *
         (double)w->dims[1] * (double)w->dims[2] * (double)w->dims[3];
}

static double flops_conv(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  return 2.0 * conv_macs(&g->values[n->outputs[0]].shape, &g->values[n->inputs[1]].shape);
}

static double flops_conv_grad_data(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  return 2.0 * conv_macs(&g->values[n->inputs[0]].shape, &g->values[n->inputs[1]].shape);
}

static double flops_conv_grad_filter(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  return 2.0 * conv_macs(&g->values[n->inputs[0]].shape, &g->values[n->outputs[0]].shape);
}

/* one compare or add per window element */
static double flops_pool(const gcc_graph *g, int node) {
  const gcc_node *n = &g->nodes[node];
  const gcc_attr *k = &n->av[POOL_KERNEL_SHAPE];
  int is_grad = gcc_op(n->op)->flags & GCC_OPF_INTERNAL;
  const gcc_shape *y = &g->values[is_grad ? n->inputs[0] : n->outputs[0]].shape;
  double kk = k->n_ints == 2 ? (double)(k->ints[0] * k->ints[1]) : 1.0;
  return (double)gcc_shape_numel(y, NULL) * kk;
}

double gcc_op_flops(const gcc_graph *g, int node) {
  const gcc_op_desc *op = gcc_op(g->nodes[node].op);
  return op && op->flops ? op->flops(g, node) : 0.0;
}

/* ---- the table -------------------------------------------------------- */

#define F(n, def)                                                                                  \
  { n, GCC_ATTR_FLOAT, 0, 0, def, NULL, 0, 0 }
#define FINF(n, def)                                                                               \
  { n, GCC_ATTR_FLOAT, 0, 0, def, NULL, 0, 1 } /* +-Inf allowed */
#define I(n, def)                                                                                  \
  { n, GCC_ATTR_INT, 0, def, 0, NULL, 0, 0 }
#define S(n, def)                                                                                  \
  { n, GCC_ATTR_STRING, 0, 0, 0, def, 0, 0 }
#define B(n, def)                                                                                  \
  { n, GCC_ATTR_INT, 0, def, 0, NULL, 1, 0 }
#define INTS_REQ(n)                                                                                \
  { n, GCC_ATTR_INTS, 1, 0, 0, NULL, 0, 0 }
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const gcc_attr_spec kGemmAttrs[] = {F("alpha", 1.0f), F("beta", 1.0f), B("transA", 0),
                                           B("transB", 0)};
static const gcc_attr_spec kReshapeAttrs[] = {INTS_REQ("shape")};
static const gcc_attr_spec kFlattenAttrs[] = {I("axis", 1)};
static const gcc_attr_spec kReduceSumToAttrs[] = {INTS_REQ("shape"), F("scale", 1.0f)};
static const gcc_attr_spec kSceAttrs[] = {S("reduction", "mean"), I("ignore_index", -100)};
static const gcc_attr_spec kMseAttrs[] = {S("reduction", "mean")};
static const gcc_attr_spec kSgdAttrs[] = {F("lr", 0.01f), F("momentum", 0.0f), F("dampening", 0.0f),
                                          F("weight_decay", 0.0f), B("nesterov", 0)};
static const gcc_attr_spec kCopyAttrs[] = {B("once", 0)};
static const gcc_attr_spec kAllReduceAttrs[] = {I("bucket", 0), B("mean", 1)};
static const gcc_attr_spec kSoftmaxAttrs[] = {I("axis", -1)};
static const gcc_attr_spec kAmpUpdateAttrs[] = {F("growth_factor", GCC_SCALER_GROWTH_FACTOR),
                                                F("backoff_factor", GCC_SCALER_BACKOFF_FACTOR),
                                                I("growth_interval", GCC_SCALER_GROWTH_INTERVAL)};
static const gcc_attr_spec kAdamAttrs[] = {F("lr", 0.001f),         F("beta1", 0.9f),
                                           F("beta2", 0.999f),      F("eps", 1e-8f),
                                           F("weight_decay", 0.0f), B("decoupled_weight_decay", 0)};

#define INTS(n)                                                                                    \
  { n, GCC_ATTR_INTS, 0, 0, 0, NULL, 0, 0 }
static const gcc_attr_spec kConvAttrs[] = {INTS("strides"), INTS("pads"), INTS("dilations"),
                                           I("group", 1), INTS("kernel_shape")};
static const gcc_attr_spec kConvGradDataAttrs[] = {INTS("strides"),      INTS("pads"),
                                                   INTS("dilations"),    I("group", 1),
                                                   INTS("kernel_shape"), INTS_REQ("input_shape")};
static const gcc_attr_spec kConvGradFilterAttrs[] = {
    INTS("strides"), INTS("pads"),         INTS("dilations"),
    I("group", 1),   INTS("kernel_shape"), INTS_REQ("filter_shape")};
static const gcc_attr_spec kMaxPoolAttrs[] = {INTS_REQ("kernel_shape"), INTS("strides"),
                                              INTS("pads"), INTS("dilations"), B("ceil_mode", 0)};
static const gcc_attr_spec kAvgPoolAttrs[] = {
    INTS_REQ("kernel_shape"), INTS("strides"),   INTS("pads"),
    INTS("dilations"),        B("ceil_mode", 0), B("count_include_pad", 0)};
static const gcc_attr_spec kAvgPoolGradAttrs[] = {
    INTS_REQ("kernel_shape"), INTS("strides"),           INTS("pads"),           INTS("dilations"),
    B("ceil_mode", 0),        B("count_include_pad", 0), INTS_REQ("input_shape")};

static const gcc_attr_spec kLeakyReluAttrs[] = {F("alpha", 0.01f)};
static const gcc_attr_spec kClipAttrs[] = {FINF("min", -FLT_MAX), FINF("max", FLT_MAX)};
static const gcc_attr_spec kLrnAttrs[] = {{"size", GCC_ATTR_INT, 1, 0, 0, NULL, 0, 0},
                                          F("alpha", 1e-4f),
                                          F("beta", 0.75f),
                                          F("bias", 1.0f)};
static const gcc_attr_spec kConcatAttrs[] = {{"axis", GCC_ATTR_INT, 1, 0, 0, NULL, 0, 0}};
static const gcc_attr_spec kTransposeAttrs[] = {INTS_REQ("perm")};
static const gcc_attr_spec kPadAttrs[] = {INTS_REQ("pads"), FINF("value", 0.0f),
                                          S("mode", "constant")};
static const gcc_attr_spec kBatchNormAttrs[] = {F("epsilon", 1e-5f), F("momentum", 0.9f),
                                                B("training", 0)};
static const gcc_attr_spec kBatchNormGradAttrs[] = {F("epsilon", 1e-5f), I("output", 0)};
static const gcc_attr_spec kDropoutAttrs[] = {F("ratio", 0.5f), I("seed", 0), B("training", 0),
                                              I("key", 0)};
static const gcc_attr_spec kDropoutGradAttrs[] = {F("ratio", 0.5f), I("key", 0)};
_Static_assert(DROPOUT_RATIO == 0 && DROPOUT_GRAD_RATIO == 0, "shape_dropout reads the ratio at 0");
static const gcc_attr_spec kCastAttrs[] = {{"to", GCC_ATTR_INT, 1, 0, 0, NULL, 0, 0}};
static const gcc_attr_spec kConvTransposeAttrs[] = {INTS("strides"),      INTS("pads"),
                                                    INTS("dilations"),    I("group", 1),
                                                    INTS("kernel_shape"), INTS("output_padding")};

/* Every entry names its fields. Adding an op to GCC_OP_LIST changes
 * GCC_OP_COUNT, which fails the _Static_assert below (and the one of every
 * other per-op table: passes/grad_rules.c, runtime/cpu/cpu_ops.c,
 * codegen/lowering.c, runtime/cuda/cuda_ops.c) until each table has been
 * given the op's entry; tests/op_tables_test checks that no entry is left
 * empty. */
_Static_assert(GCC_OP_COUNT == 55, "a new op: add its entry to kOps (and to every per-op table)");

static const gcc_op_desc kOps[GCC_OP_COUNT] = {
    [GCC_OP_GEMM] = {.name = "Gemm",
                     .min_inputs = 2,
                     .max_inputs = 3,
                     .n_outputs = 1,
                     .input_names = "A, B, C",
                     .attrs = kGemmAttrs,
                     .n_attrs = COUNT(kGemmAttrs),
                     .shape = shape_gemm,
                     .flops = flops_gemm,
                     .semantics = "ONNX Gemm: Y = alpha * op(A) op(B) + beta * C, C broadcast to "
                                  "(M, N)"},
    [GCC_OP_MATMUL] = {.name = "MatMul",
                       .min_inputs = 2,
                       .max_inputs = 2,
                       .n_outputs = 1,
                       .input_names = "A, B",
                       .shape = shape_matmul,
                       .flops = flops_matmul,
                       .semantics = "ONNX MatMul (numpy.matmul: 1-D operands promoted, batch dims "
                                    "broadcast)"},
    [GCC_OP_ADD] = {.name = "Add",
                    .min_inputs = 2,
                    .max_inputs = 2,
                    .n_outputs = 1,
                    .input_names = "A, B",
                    .shape = shape_add,
                    .flops = numel_out,
                    .semantics = "ONNX Add with multidirectional broadcasting"},
    [GCC_OP_RELU] = {.name = "Relu",
                     .min_inputs = 1,
                     .max_inputs = 1,
                     .n_outputs = 1,
                     .input_names = "X",
                     .shape = shape_unary_same,
                     .flops = numel_out,
                     .semantics = "ONNX Relu: max(x, 0)"},
    [GCC_OP_RELU_GRAD] = {.name = "ReluGrad",
                          .min_inputs = 2,
                          .max_inputs = 2,
                          .n_outputs = 1,
                          .input_names = "dY, Y",
                          .flags = GCC_OPF_INTERNAL,
                          .shape = shape_elem_grad,
                          .flops = numel_out,
                          .semantics = "dX = dY where Y > 0 else 0 (PyTorch threshold_backward)"},
    [GCC_OP_IDENTITY] = {.name = "Identity",
                         .min_inputs = 1,
                         .max_inputs = 1,
                         .n_outputs = 1,
                         .input_names = "X",
                         .shape = shape_identity,
                         .semantics = "ONNX Identity (a copy into storage of its own)"},
    [GCC_OP_RESHAPE] = {.name = "Reshape",
                        .min_inputs = 1,
                        .max_inputs = 1,
                        .n_outputs = 1,
                        .input_names = "X",
                        .attrs = kReshapeAttrs,
                        .n_attrs = COUNT(kReshapeAttrs),
                        .flags = GCC_OPF_ALIAS,
                        .shape = shape_reshape,
                        .semantics = "ONNX Reshape with the shape as an attribute (0 copies, -1 "
                                     "infers)"},
    [GCC_OP_FLATTEN] = {.name = "Flatten",
                        .min_inputs = 1,
                        .max_inputs = 1,
                        .n_outputs = 1,
                        .input_names = "X",
                        .attrs = kFlattenAttrs,
                        .n_attrs = COUNT(kFlattenAttrs),
                        .flags = GCC_OPF_ALIAS,
                        .shape = shape_flatten,
                        .semantics = "ONNX Flatten"},
    [GCC_OP_REDUCE_SUM_TO] = {.name = "ReduceSumTo",
                              .min_inputs = 1,
                              .max_inputs = 1,
                              .n_outputs = 1,
                              .input_names = "X",
                              .attrs = kReduceSumToAttrs,
                              .n_attrs = COUNT(kReduceSumToAttrs),
                              .flags = GCC_OPF_INTERNAL,
                              .shape = shape_reduce_sum_to,
                              .flops = numel_in0,
                              .semantics = "scale * sum over the dims that broadcasting expanded "
                                           "(PyTorch sum_to_size)"},
    [GCC_OP_SOFTMAX_CROSS_ENTROPY] = {.name = "SoftmaxCrossEntropy",
                                      .min_inputs = 2,
                                      .max_inputs = 3,
                                      .n_outputs = 1,
                                      .input_names = "logits, labels, weight",
                                      .attrs = kSceAttrs,
                                      .n_attrs = COUNT(kSceAttrs),
                                      .flags = GCC_OPF_LOSS,
                                      .shape = shape_sce,
                                      .flops = flops_sce,
                                      .semantics = "torch.nn.CrossEntropyLoss (class indices, "
                                                   "weight, ignore_index, reduction mean|sum)"},
    [GCC_OP_SOFTMAX_CROSS_ENTROPY_GRAD] = {.name = "SoftmaxCrossEntropyGrad",
                                           .min_inputs = 3,
                                           .max_inputs = 4,
                                           .n_outputs = 1,
                                           .input_names = "dloss, logits, labels, weight",
                                           .attrs = kSceAttrs,
                                           .n_attrs = COUNT(kSceAttrs),
                                           .flags = GCC_OPF_INTERNAL,
                                           .shape = shape_sce_grad,
                                           .flops = flops_sce,
                                           .semantics = "gradient of CrossEntropyLoss w.r.t. "
                                                        "the logits"},
    [GCC_OP_MEAN_SQUARED_ERROR] = {.name = "MeanSquaredError",
                                   .min_inputs = 2,
                                   .max_inputs = 2,
                                   .n_outputs = 1,
                                   .input_names = "prediction, target",
                                   .attrs = kMseAttrs,
                                   .n_attrs = COUNT(kMseAttrs),
                                   .flags = GCC_OPF_LOSS,
                                   .shape = shape_mse,
                                   .flops = flops_mse,
                                   .semantics = "torch.nn.MSELoss (reduction mean|sum)"},
    [GCC_OP_MEAN_SQUARED_ERROR_GRAD] = {.name = "MeanSquaredErrorGrad",
                                        .min_inputs = 3,
                                        .max_inputs = 3,
                                        .n_outputs = 1,
                                        .input_names = "dloss, prediction, target",
                                        .attrs = kMseAttrs,
                                        .n_attrs = COUNT(kMseAttrs),
                                        .flags = GCC_OPF_INTERNAL,
                                        .shape = shape_mse_grad,
                                        .flops = flops_mse,
                                        .semantics = "gradient of MSELoss w.r.t. the "
                                                     "prediction"},
    [GCC_OP_SGD] = {.name = "SGD",
                    .min_inputs = 2,
                    .max_inputs = SGD_IN_SCALER + SCALER_N_IN,
                    .n_outputs = 0,
                    .input_names = "param, grad, momentum_buffer, scale, found_inf, "
                                   "applied_steps",
                    .attrs = kSgdAttrs,
                    .n_attrs = COUNT(kSgdAttrs),
                    .flags = GCC_OPF_OPTIMIZER,
                    .opt_outputs = 1, /* the 16-bit copy */
                    .shape = shape_sgd,
                    .flops = flops_sgd,
                    .semantics = "torch.optim.SGD (momentum, dampening, weight_decay, "
                                 "nesterov)"},
    [GCC_OP_ADAM] = {.name = "Adam",
                     .min_inputs = 4,
                     .max_inputs = ADAM_IN_SCALER + SCALER_N_IN,
                     .n_outputs = 0,
                     .input_names = "param, grad, exp_avg, exp_avg_sq, scale, found_inf, "
                                    "applied_steps",
                     .attrs = kAdamAttrs,
                     .n_attrs = COUNT(kAdamAttrs),
                     .flags = GCC_OPF_OPTIMIZER,
                     .opt_outputs = 1, /* the 16-bit copy */
                     .shape = shape_adam,
                     .flops = flops_adam,
                     .semantics = "torch.optim.Adam (L2 weight_decay, bias-corrected moments)"},
    [GCC_OP_COPY] = {.name = "Copy",
                     .min_inputs = 1,
                     .max_inputs = 1,
                     .n_outputs = 1,
                     .input_names = "X",
                     .attrs = kCopyAttrs,
                     .n_attrs = COUNT(kCopyAttrs),
                     .flags = GCC_OPF_COPY,
                     .shape = shape_unary_any,
                     .semantics = "a copy of X to the node's device (H2D, D2H or D2D by the "
                                  "devices); once = 1: done when the session starts, not per "
                                  "step"},
    [GCC_OP_SOFTMAX] = {.name = "Softmax",
                        .min_inputs = 1,
                        .max_inputs = 1,
                        .n_outputs = 1,
                        .input_names = "X",
                        .attrs = kSoftmaxAttrs,
                        .n_attrs = COUNT(kSoftmaxAttrs),
                        .shape = shape_softmax,
                        .flops = numel_out,
                        .semantics = "ONNX Softmax (opset 13): exp(x - max) / sum exp(x - max) "
                                     "along axis (torch.softmax)"},
    [GCC_OP_SOFTMAX_GRAD] = {.name = "SoftmaxGrad",
                             .min_inputs = 2,
                             .max_inputs = 2,
                             .n_outputs = 1,
                             .input_names = "dY, Y",
                             .attrs = kSoftmaxAttrs,
                             .n_attrs = COUNT(kSoftmaxAttrs),
                             .flags = GCC_OPF_INTERNAL,
                             .shape = shape_softmax_grad,
                             .flops = numel_out,
                             .semantics = "dX = Y * (dY - sum(dY * Y) along axis) (PyTorch "
                                          "_softmax_backward_data)"},
    [GCC_OP_CONV] = {.name = "Conv",
                     .min_inputs = 2,
                     .max_inputs = 3,
                     .n_outputs = 1,
                     .input_names = "X, W, B",
                     .attrs = kConvAttrs,
                     .n_attrs = COUNT(kConvAttrs),
                     .shape = shape_conv,
                     .flops = flops_conv,
                     .semantics = "ONNX Conv, 2-D NCHW (torch.nn.Conv2d): group, strides, pads "
                                  "(top, left, bottom, right), dilations, optional bias"},
    [GCC_OP_CONV_GRAD_DATA] = {.name = "ConvGradData",
                               .min_inputs = 2,
                               .max_inputs = 2,
                               .n_outputs = 1,
                               .input_names = "dY, W",
                               .attrs = kConvGradDataAttrs,
                               .n_attrs = COUNT(kConvGradDataAttrs),
                               .flags = GCC_OPF_INTERNAL,
                               .shape = shape_conv_grad_data,
                               .flops = flops_conv_grad_data,
                               .semantics = "gradient of Conv w.r.t. X (PyTorch "
                                            "convolution_backward grad_input; "
                                            "cudnnConvolutionBackwardData)"},
    [GCC_OP_CONV_GRAD_FILTER] = {.name = "ConvGradFilter",
                                 .min_inputs = 2,
                                 .max_inputs = 2,
                                 .n_outputs = 1,
                                 .input_names = "dY, X",
                                 .attrs = kConvGradFilterAttrs,
                                 .n_attrs = COUNT(kConvGradFilterAttrs),
                                 .flags = GCC_OPF_INTERNAL,
                                 .shape = shape_conv_grad_filter,
                                 .flops = flops_conv_grad_filter,
                                 .semantics = "gradient of Conv w.r.t. W (PyTorch "
                                              "convolution_backward grad_weight; "
                                              "cudnnConvolutionBackwardFilter)"},
    [GCC_OP_CONV_GRAD_BIAS] = {.name = "ConvGradBias",
                               .min_inputs = 1,
                               .max_inputs = 1,
                               .n_outputs = 1,
                               .input_names = "dY",
                               .flags = GCC_OPF_INTERNAL,
                               .shape = shape_conv_grad_bias,
                               .flops = numel_in0,
                               .semantics = "gradient of Conv w.r.t. B: dY summed over N, H, W "
                                            "(cudnnConvolutionBackwardBias)"},
    [GCC_OP_MAX_POOL] = {.name = "MaxPool",
                         .min_inputs = 1,
                         .max_inputs = 1,
                         .n_outputs = 1,
                         .input_names = "X",
                         .attrs = kMaxPoolAttrs,
                         .n_attrs = COUNT(kMaxPoolAttrs),
                         .shape = shape_pool,
                         .flops = flops_pool,
                         .semantics = "ONNX MaxPool, 2-D NCHW, ceil_mode = 0 "
                                      "(torch.nn.MaxPool2d; padding is -inf)"},
    [GCC_OP_MAX_POOL_GRAD] = {.name = "MaxPoolGrad",
                              .min_inputs = 3,
                              .max_inputs = 3,
                              .n_outputs = 1,
                              .input_names = "dY, X, Y",
                              .attrs = kMaxPoolAttrs,
                              .n_attrs = COUNT(kMaxPoolAttrs),
                              .flags = GCC_OPF_INTERNAL,
                              .shape = shape_max_pool_grad,
                              .flops = flops_pool,
                              .semantics = "gradient of MaxPool: dY routed to the first maximum "
                                           "of each window, recomputed from X (PyTorch "
                                           "max_pool2d_with_indices_backward); Y, the forward "
                                           "output, is read by cudnnPoolingBackward"},
    [GCC_OP_AVERAGE_POOL] = {.name = "AveragePool",
                             .min_inputs = 1,
                             .max_inputs = 1,
                             .n_outputs = 1,
                             .input_names = "X",
                             .attrs = kAvgPoolAttrs,
                             .n_attrs = COUNT(kAvgPoolAttrs),
                             .shape = shape_pool,
                             .flops = flops_pool,
                             .semantics = "ONNX AveragePool, 2-D NCHW, ceil_mode = 0 "
                                          "(torch.nn.AvgPool2d; count_include_pad as ONNX, "
                                          "default 0)"},
    [GCC_OP_AVERAGE_POOL_GRAD] = {.name = "AveragePoolGrad",
                                  .min_inputs = 1,
                                  .max_inputs = 1,
                                  .n_outputs = 1,
                                  .input_names = "dY",
                                  .attrs = kAvgPoolGradAttrs,
                                  .n_attrs = COUNT(kAvgPoolGradAttrs),
                                  .flags = GCC_OPF_INTERNAL,
                                  .shape = shape_avg_pool_grad,
                                  .flops = flops_pool,
                                  .semantics = "gradient of AveragePool: dY / divisor spread "
                                               "over each window (PyTorch avg_pool2d_backward)"},
    /* ops of ONNX import: forward only (no gradient rule: training an
     * imported model is issue 15) */
    [GCC_OP_SUB] = {.name = "Sub",
                    .min_inputs = 2,
                    .max_inputs = 2,
                    .n_outputs = 1,
                    .input_names = "A, B",
                    .shape = shape_add,
                    .flops = numel_out,
                    .semantics = "ONNX Sub with multidirectional broadcasting"},
    [GCC_OP_MUL] = {.name = "Mul",
                    .min_inputs = 2,
                    .max_inputs = 2,
                    .n_outputs = 1,
                    .input_names = "A, B",
                    .shape = shape_add,
                    .flops = numel_out,
                    .semantics = "ONNX Mul with multidirectional broadcasting"},
    [GCC_OP_DIV] = {.name = "Div",
                    .min_inputs = 2,
                    .max_inputs = 2,
                    .n_outputs = 1,
                    .input_names = "A, B",
                    .shape = shape_add,
                    .flops = numel_out,
                    .semantics = "ONNX Div with multidirectional broadcasting (IEEE division)"},
    [GCC_OP_SIGMOID] = {.name = "Sigmoid",
                        .min_inputs = 1,
                        .max_inputs = 1,
                        .n_outputs = 1,
                        .input_names = "X",
                        .shape = shape_unary_same,
                        .flops = numel_out,
                        .semantics = "ONNX Sigmoid: 1 / (1 + exp(-x)) (torch.sigmoid)"},
    [GCC_OP_TANH] = {.name = "Tanh",
                     .min_inputs = 1,
                     .max_inputs = 1,
                     .n_outputs = 1,
                     .input_names = "X",
                     .shape = shape_unary_same,
                     .flops = numel_out,
                     .semantics = "ONNX Tanh (torch.tanh)"},
    [GCC_OP_SQRT] = {.name = "Sqrt",
                     .min_inputs = 1,
                     .max_inputs = 1,
                     .n_outputs = 1,
                     .input_names = "X",
                     .shape = shape_unary_same,
                     .flops = numel_out,
                     .semantics = "ONNX Sqrt (NaN for x < 0)"},
    [GCC_OP_LEAKY_RELU] = {.name = "LeakyRelu",
                           .min_inputs = 1,
                           .max_inputs = 1,
                           .n_outputs = 1,
                           .input_names = "X",
                           .attrs = kLeakyReluAttrs,
                           .n_attrs = COUNT(kLeakyReluAttrs),
                           .shape = shape_unary_same,
                           .flops = numel_out,
                           .semantics = "ONNX LeakyRelu: x < 0 ? alpha * x : x "
                                        "(torch.nn.LeakyReLU)"},
    [GCC_OP_CLIP] = {.name = "Clip",
                     .min_inputs = 1,
                     .max_inputs = 1,
                     .n_outputs = 1,
                     .input_names = "X",
                     .attrs = kClipAttrs,
                     .n_attrs = COUNT(kClipAttrs),
                     .shape = shape_unary_same,
                     .flops = numel_out,
                     .semantics = "ONNX Clip with min and max as attributes: x < min ? min : x > "
                                  "max ? max : x (NaN stays NaN; torch.clamp, ReLU6 is min 0 "
                                  "max 6)"},
    [GCC_OP_LOG_SOFTMAX] = {.name = "LogSoftmax",
                            .min_inputs = 1,
                            .max_inputs = 1,
                            .n_outputs = 1,
                            .input_names = "X",
                            .attrs = kSoftmaxAttrs,
                            .n_attrs = COUNT(kSoftmaxAttrs),
                            .shape = shape_softmax,
                            .flops = numel_out,
                            .semantics = "ONNX LogSoftmax (opset 13): x - max - log(sum exp(x - "
                                         "max)) along axis (torch.log_softmax)"},
    [GCC_OP_LRN] = {.name = "LRN",
                    .min_inputs = 1,
                    .max_inputs = 1,
                    .n_outputs = 1,
                    .input_names = "X",
                    .attrs = kLrnAttrs,
                    .n_attrs = COUNT(kLrnAttrs),
                    .shape = shape_lrn,
                    .flops = flops_lrn,
                    .semantics = "ONNX LRN: x / (bias + alpha / size * sum of x^2 over channels "
                                 "[c - (size - 1) / 2, c + size / 2])^beta "
                                 "(torch.nn.functional.local_response_norm)"},
    [GCC_OP_CONCAT] = {.name = "Concat",
                       .min_inputs = 1,
                       .max_inputs = 64,
                       .n_outputs = 1,
                       .input_names = "inputs",
                       .attrs = kConcatAttrs,
                       .n_attrs = COUNT(kConcatAttrs),
                       .shape = shape_concat,
                       .semantics = "ONNX Concat along axis (torch.cat)"},
    [GCC_OP_TRANSPOSE] = {.name = "Transpose",
                          .min_inputs = 1,
                          .max_inputs = 1,
                          .n_outputs = 1,
                          .input_names = "X",
                          .attrs = kTransposeAttrs,
                          .n_attrs = COUNT(kTransposeAttrs),
                          .shape = shape_transpose,
                          .semantics = "ONNX Transpose: Y.dims[i] = X.dims[perm[i]] "
                                       "(torch.permute, copied)"},
    [GCC_OP_PAD] = {.name = "Pad",
                    .min_inputs = 1,
                    .max_inputs = 1,
                    .n_outputs = 1,
                    .input_names = "X",
                    .attrs = kPadAttrs,
                    .n_attrs = COUNT(kPadAttrs),
                    .shape = shape_pad,
                    .semantics = "ONNX Pad with pads and the constant value as attributes; "
                                 "modes constant (negative pads crop), edge, reflect "
                                 "(torch.nn.functional.pad)"},
    [GCC_OP_CONV_TRANSPOSE] = {.name = "ConvTranspose",
                               .min_inputs = 2,
                               .max_inputs = 3,
                               .n_outputs = 1,
                               .input_names = "X, W, B",
                               .attrs = kConvTransposeAttrs,
                               .n_attrs = COUNT(kConvTransposeAttrs),
                               .shape = shape_conv_transpose,
                               .flops = flops_conv_transpose,
                               .semantics = "ONNX ConvTranspose, 2-D NCHW: the adjoint of Conv "
                                            "with the same window (torch.nn.ConvTranspose2d), "
                                            "groups, output_padding, optional bias"},
    [GCC_OP_ALL_REDUCE] = {.name = "AllReduce",
                           .min_inputs = 1,
                           .max_inputs = 1 << 20,
                           .n_outputs = 0,
                           .input_names = "grads",
                           .attrs = kAllReduceAttrs,
                           .n_attrs = COUNT(kAllReduceAttrs),
                           .flags = GCC_OPF_INTERNAL | GCC_OPF_COLLECTIVE,
                           .shape = shape_all_reduce,
                           .flops = flops_all_reduce,
                           .semantics = "torch.distributed.all_reduce (ReduceOp.SUM) of one "
                                        "DistributedDataParallel gradient bucket, in place; with "
                                        "mean = 1 each rank first weights its gradients by its "
                                        "rows / the global batch, so the sum is the gradient "
                                        "of the loss averaged over the global batch"},
    [GCC_OP_SIGMOID_GRAD] = {.name = "SigmoidGrad",
                             .min_inputs = 2,
                             .max_inputs = 2,
                             .n_outputs = 1,
                             .input_names = "dY, Y",
                             .flags = GCC_OPF_INTERNAL,
                             .shape = shape_elem_grad,
                             .flops = numel_out,
                             .semantics = "dX = dY * Y * (1 - Y) (PyTorch sigmoid_backward)"},
    [GCC_OP_TANH_GRAD] = {.name = "TanhGrad",
                          .min_inputs = 2,
                          .max_inputs = 2,
                          .n_outputs = 1,
                          .input_names = "dY, Y",
                          .flags = GCC_OPF_INTERNAL,
                          .shape = shape_elem_grad,
                          .flops = numel_out,
                          .semantics = "dX = dY * (1 - Y * Y) (PyTorch tanh_backward)"},
    [GCC_OP_SQRT_GRAD] = {.name = "SqrtGrad",
                          .min_inputs = 2,
                          .max_inputs = 2,
                          .n_outputs = 1,
                          .input_names = "dY, Y",
                          .flags = GCC_OPF_INTERNAL,
                          .shape = shape_elem_grad,
                          .flops = numel_out,
                          .semantics = "dX = dY / (2 Y) (PyTorch: grad / (2 * result))"},
    [GCC_OP_LEAKY_RELU_GRAD] = {.name = "LeakyReluGrad",
                                .min_inputs = 2,
                                .max_inputs = 2,
                                .n_outputs = 1,
                                .input_names = "dY, X",
                                .attrs = kLeakyReluAttrs,
                                .n_attrs = COUNT(kLeakyReluAttrs),
                                .flags = GCC_OPF_INTERNAL,
                                .shape = shape_elem_grad,
                                .flops = numel_out,
                                .semantics = "dX = X < 0 ? alpha * dY : dY (the derivative of "
                                             "LeakyRelu's x < 0 ? alpha x : x)"},
    [GCC_OP_CLIP_GRAD] = {.name = "ClipGrad",
                          .min_inputs = 2,
                          .max_inputs = 2,
                          .n_outputs = 1,
                          .input_names = "dY, X",
                          .attrs = kClipAttrs,
                          .n_attrs = COUNT(kClipAttrs),
                          .flags = GCC_OPF_INTERNAL,
                          .shape = shape_elem_grad,
                          .flops = numel_out,
                          .semantics = "dX = min <= X <= max ? dY : 0 (PyTorch clamp_backward)"},
    [GCC_OP_LOG_SOFTMAX_GRAD] = {.name = "LogSoftmaxGrad",
                                 .min_inputs = 2,
                                 .max_inputs = 2,
                                 .n_outputs = 1,
                                 .input_names = "dY, Y",
                                 .attrs = kSoftmaxAttrs,
                                 .n_attrs = COUNT(kSoftmaxAttrs),
                                 .flags = GCC_OPF_INTERNAL,
                                 .shape = shape_softmax_grad,
                                 .flops = numel_out,
                                 .semantics = "dX = dY - exp(Y) * sum(dY) along axis (PyTorch "
                                              "_log_softmax_backward_data)"},
    [GCC_OP_LRN_GRAD] = {.name = "LRNGrad",
                         .min_inputs = 3,
                         .max_inputs = 3,
                         .n_outputs = 1,
                         .input_names = "dY, X, Y",
                         .attrs = kLrnAttrs,
                         .n_attrs = COUNT(kLrnAttrs),
                         .flags = GCC_OPF_INTERNAL,
                         .shape = shape_lrn_grad,
                         .flops = flops_lrn,
                         .semantics = "the derivative of ONNX LRN: with S[c] = bias + alpha / size "
                                      "* sum of X^2 over c's window, dX[c] = dY[c] S[c]^-beta - "
                                      "2 alpha beta / size X[c] sum over the windows k that "
                                      "hold c of dY[k] Y[k] / S[k]"},
    [GCC_OP_BATCH_NORM] = {.name = "BatchNormalization",
                           .min_inputs = 5,
                           .max_inputs = 5,
                           .n_outputs = 1,
                           .input_names = "X, scale, B, running_mean, running_var",
                           .attrs = kBatchNormAttrs,
                           .n_attrs = COUNT(kBatchNormAttrs),
                           .shape = shape_batch_norm,
                           .flops = flops_batch_norm,
                           .semantics =
                               "ONNX BatchNormalization = torch.nn.BatchNorm2d (any rank >= 2, "
                               "per channel, dim 1). Evaluation: Y = scale (X - running_mean) / "
                               "sqrt(running_var + epsilon) + B. Training (`training`, set by "
                               "autodiff in the training graph only, cleared in evaluation, "
                               "refused in a model file): the batch's mean and biased variance "
                               "normalise, and "
                               "running = momentum running + (1 - momentum) batch statistic, with "
                               "the unbiased variance (n / (n - 1)) for running_var, in place "
                               "(ONNX's momentum 0.9 is PyTorch's momentum 0.1)",
                           .pass_attr = "training",
                           .pass_attr_why =
                               "autodiff sets it in the training graph only: a model file holds "
                               "the evaluation form, whose running statistics normalise and are "
                               "never updated (nn.BatchNorm2d in eval()), and gcc-train trains "
                               "it with batch statistics without the attribute"},
    [GCC_OP_BATCH_NORM_GRAD] = {.name = "BatchNormGrad",
                                .min_inputs = 3,
                                .max_inputs = 3,
                                .n_outputs = 1,
                                .input_names = "dY, X, scale",
                                .attrs = kBatchNormGradAttrs,
                                .n_attrs = COUNT(kBatchNormGradAttrs),
                                .flags = GCC_OPF_INTERNAL,
                                .shape = shape_batch_norm_grad,
                                .flops = flops_batch_norm,
                                .semantics =
                                    "the backward of training-mode BatchNormalization (PyTorch "
                                    "native_batch_norm_backward), the batch statistics recomputed "
                                    "from X: with xhat = (X - mean) invstd over the M = N D1 ... "
                                    "elements of a channel, dB = sum dY, dscale = sum dY xhat, dX "
                                    "= scale invstd / M (M dY - dB - xhat dscale)"},
    [GCC_OP_DROPOUT] = {.name = "Dropout",
                        .min_inputs = 1,
                        .max_inputs = 1,
                        .n_outputs = 1,
                        .input_names = "X",
                        .attrs = kDropoutAttrs,
                        .n_attrs = COUNT(kDropoutAttrs),
                        .shape = shape_dropout,
                        .flops = numel_out,
                        .semantics =
                            "torch.nn.Dropout(p = ratio) = ONNX Dropout-13 (ratio as an "
                            "attribute). Evaluation: Y = X. Training (`training` and `key`, set "
                            "by autodiff): inverted dropout, Y = X * mask / (1 - ratio), mask ~ "
                            "Bernoulli(1 - ratio) per element drawn from Philox-4x32-10 "
                            "(graph/philox.h) keyed by `key`, counter {element / 4, step}; "
                            "ratio 0: Y = X, ratio 1: Y = X * 0"},
    [GCC_OP_DROPOUT_GRAD] = {.name = "DropoutGrad",
                             .min_inputs = 1,
                             .max_inputs = 1,
                             .n_outputs = 1,
                             .input_names = "dY",
                             .attrs = kDropoutGradAttrs,
                             .n_attrs = COUNT(kDropoutGradAttrs),
                             .flags = GCC_OPF_INTERNAL,
                             .shape = shape_dropout,
                             .flops = numel_out,
                             .semantics =
                                 "the backward of training-mode Dropout (PyTorch's "
                                 "native_dropout_backward): dX = dY * mask / (1 - ratio), the mask "
                                 "of the Dropout with this ratio and key redrawn at the same step"},
    [GCC_OP_CAST] = {.name = "Cast",
                     .min_inputs = 1,
                     .max_inputs = 1,
                     .n_outputs = 1,
                     .input_names = "X",
                     .attrs = kCastAttrs,
                     .n_attrs = COUNT(kCastAttrs),
                     .flags = GCC_OPF_INTERNAL, /* made by the autocast pass */
                     .shape = shape_cast,
                     .flops = numel_out,
                     .semantics = "ONNX Cast between float32, float16 and bfloat16 (`to`: the "
                                  "graph.proto DataType); float32 -> 16 bits rounds to nearest, "
                                  "ties to even (PyTorch Tensor.to, CUDA __float2bfloat16_rn / "
                                  "__float2half_rn), 16 bits -> float32 is exact"},
    [GCC_OP_AMP_NON_FINITE_CHECK] = {.name = "AmpNonFiniteCheck",
                                     .min_inputs = 2,
                                     .max_inputs = 1 << 20,
                                     .n_outputs = 1,
                                     .input_names = "scratch, grads",
                                     .flags = GCC_OPF_INTERNAL, /* made by autodiff (fp16) */
                                     .shape = shape_amp_check,
                                     .flops = flops_amp_check,
                                     .semantics = "the found_inf of "
                                                  "torch._amp_foreach_non_finite_check_and_"
                                                  "unscale_ (torch.amp.GradScaler.unscale_): 1 "
                                                  "when any element of the scaled gradients is "
                                                  "Inf or NaN, else 0"},
    [GCC_OP_AMP_UPDATE_SCALE] = {.name = "AmpUpdateScale",
                                 .min_inputs = 4,
                                 .max_inputs = 4,
                                 .n_outputs = 0,
                                 .input_names = "scale, found_inf, growth_tracker, applied_steps",
                                 .attrs = kAmpUpdateAttrs,
                                 .n_attrs = COUNT(kAmpUpdateAttrs),
                                 /* updates its inputs in place after every other reader */
                                 .flags = GCC_OPF_OPTIMIZER | GCC_OPF_INTERNAL,
                                 .shape = shape_amp_update,
                                 .flops = flops_amp_update,
                                 .semantics = "torch._amp_update_scale_ "
                                              "(torch.amp.GradScaler.update: backoff on Inf/NaN, "
                                              "growth after growth_interval good steps), plus "
                                              "the count of optimizer steps not skipped"},
};

/* Every id of GCC_OP_LIST must have its entry, and names must match. */
#define GCC_OP_NAME_STR(id, name) #name,
static const char *const kOpNames[GCC_OP_COUNT] = {GCC_OP_LIST(GCC_OP_NAME_STR)};
#undef GCC_OP_NAME_STR

const gcc_op_desc *gcc_op(int op) {
  if (op < 0 || op >= GCC_OP_COUNT)
    return NULL;
  return &kOps[op];
}

const char *gcc_op_name(int op) {
  if (op < 0 || op >= GCC_OP_COUNT)
    return "?";
  return kOpNames[op];
}

int gcc_op_lookup(const char *name) {
  for (int i = 0; i < GCC_OP_COUNT; i++)
    if (kOps[i].name && strcmp(kOps[i].name, name) == 0 && strcmp(kOpNames[i], name) == 0)
      return i;
  return -1;
}

static const char *attr_type_name(gcc_attr_type t) {
  switch (t) {
  case GCC_ATTR_INT: return "int";
  case GCC_ATTR_FLOAT: return "float";
  case GCC_ATTR_STRING: return "string";
  case GCC_ATTR_INTS: return "ints";
  case GCC_ATTR_FLOATS: return "floats";
  default: return "undefined";
  }
}

gcc_status gcc_op_resolve_attrs(gcc_graph *g, int node, gcc_diag *d) {
  gcc_node *n = &g->nodes[node];
  const gcc_op_desc *op = gcc_op(n->op);
  char desc[600];
  gcc_node_desc(g, node, desc, sizeof desc);
  if (!op || !op->name)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: %s has no op descriptor", g->source, desc);
  if (n->n_inputs < op->min_inputs || n->n_inputs > op->max_inputs) {
    if (op->min_inputs == op->max_inputs)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s takes %d inputs (%s), got %d",
                          g->source, desc, op->min_inputs, op->input_names, n->n_inputs);
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s takes %d to %d inputs (%s), got %d",
                        g->source, desc, op->min_inputs, op->max_inputs, op->input_names,
                        n->n_inputs);
  }
  for (int k = 0; k < op->min_inputs; k++)
    if (n->inputs[k] < 0)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: required input %d (of %s) is empty",
                          g->source, desc, k, op->input_names);
  if (n->n_outputs < op->n_outputs || n->n_outputs > op->n_outputs + op->opt_outputs) {
    if (!op->opt_outputs)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s has %d outputs, got %d", g->source,
                          desc, op->n_outputs, n->n_outputs);
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s has %d to %d outputs, got %d", g->source,
                        desc, op->n_outputs, op->n_outputs + op->opt_outputs, n->n_outputs);
  }
  for (int k = 0; k < n->n_attrs; k++) {
    int found = 0;
    for (int j = 0; j < op->n_attrs; j++)
      if (strcmp(op->attrs[j].name, n->attrs[k].name) == 0)
        found = 1;
    if (!found)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: unknown attribute '%s'", g->source,
                          desc, n->attrs[k].name);
  }
  gcc_attr *av = calloc((size_t)(op->n_attrs ? op->n_attrs : 1), sizeof *av);
  if (!av)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (attributes)");
  gcc_status s = GCC_OK;
  for (int j = 0; j < op->n_attrs && s == GCC_OK; j++) {
    const gcc_attr_spec *sp = &op->attrs[j];
    const gcc_attr *a = gcc_node_attr(n, sp->name);
    gcc_attr *r = &av[j];
    r->type = sp->type;
    r->name = strdup(sp->name);
    if (!r->name) {
      s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (attributes)");
      break;
    }
    if (!a) {
      if (sp->required) {
        s = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: missing required attribute '%s' (%s)",
                         g->source, desc, sp->name, attr_type_name(sp->type));
        break;
      }
      r->i = sp->def_i;
      r->f = sp->def_f;
      if (sp->def_s && !(r->s = strdup(sp->def_s)))
        s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (attributes)");
      continue;
    }
    if (a->type != sp->type) {
      s = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                       "%s: %s: attribute '%s' must be of type %s, got %s", g->source, desc,
                       sp->name, attr_type_name(sp->type), attr_type_name(a->type));
      break;
    }
    if (sp->is_bool && a->i != 0 && a->i != 1) {
      s = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                       "%s: %s: attribute '%s' is %lld; it must be 0 or 1", g->source, desc,
                       sp->name, (long long)a->i);
      break;
    }
    if (sp->type == GCC_ATTR_FLOAT && (sp->allow_inf ? isnan(a->f) : !isfinite(a->f))) {
      s = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: attribute '%s' is %g; it must be %s",
                       g->source, desc, sp->name, (double)a->f,
                       sp->allow_inf ? "a number (+-Inf allowed)" : "finite");
      break;
    }
    r->i = a->i;
    r->f = a->f;
    if (a->s && !(r->s = strdup(a->s)))
      s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (attributes)");
    if (a->type == GCC_ATTR_INTS) {
      r->ints = malloc((size_t)(a->n_ints ? a->n_ints : 1) * sizeof *r->ints);
      if (!r->ints)
        s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (attributes)");
      else if (a->n_ints)
        memcpy(r->ints, a->ints, (size_t)a->n_ints * sizeof *r->ints);
      r->n_ints = a->n_ints;
    }
    if (a->type == GCC_ATTR_FLOATS) {
      r->floats = malloc((size_t)(a->n_floats ? a->n_floats : 1) * sizeof *r->floats);
      if (!r->floats)
        s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (attributes)");
      else if (a->n_floats)
        memcpy(r->floats, a->floats, (size_t)a->n_floats * sizeof *r->floats);
      r->n_floats = a->n_floats;
    }
  }
  if (s != GCC_OK) {
    for (int j = 0; j < op->n_attrs; j++) {
      free(av[j].name);
      free(av[j].s);
      free(av[j].ints);
      free(av[j].floats);
    }
    free(av);
    return s;
  }
  for (int j = 0; j < n->n_av; j++) {
    free(n->av[j].name);
    free(n->av[j].s);
    free(n->av[j].ints);
    free(n->av[j].floats);
  }
  free(n->av);
  n->av = av;
  n->n_av = op->n_attrs;
  return GCC_OK;
}

gcc_status gcc_infer_shapes(gcc_graph *g, gcc_diag *d) {
  for (int i = 0; i < g->n_nodes; i++) {
    GCC_TRY(gcc_op_resolve_attrs(g, i, d));
    const gcc_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_inputs; k++) {
      int v = n->inputs[k];
      if (v < 0)
        continue;
      if (g->values[v].dtype == GCC_DT_UNDEFINED) {
        char desc[600];
        return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                            "%s: %s: input '%s' has no dtype/shape (used before it is defined?)",
                            g->source, gcc_node_desc(g, i, desc, sizeof desc), g->values[v].name);
      }
    }
    GCC_TRY(gcc_op(n->op)->shape(g, i, d));
    for (int k = 0; k < n->n_outputs; k++) {
      gcc_value *o = &g->values[n->outputs[k]];
      int overflow = 0;
      if (gcc_shape_numel(&o->shape, &overflow) < 0 && overflow) {
        char desc[600];
        return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: %s: output '%s' element count overflows",
                            g->source, gcc_node_desc(g, i, desc, sizeof desc), o->name);
      }
    }
  }
  return GCC_OK;
}
