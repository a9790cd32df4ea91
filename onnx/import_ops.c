/*
 * import_ops.c - the ONNX op -> gcc IR mapping: one table (kOnnxOps) of op
 * types, their version histories and converters.
 *
 * A converter checks the node against the op version that applies
 * (c->ver), refuses every attribute and attribute value it does not handle,
 * tracks the output shapes (with the symbolic batch, see
 * onnx/import_internal.h) and either folds the node (its outputs become
 * constants or aliases) or emits IR nodes. Semantics are ONNX's operator
 * documentation (docs/Operators.md and docs/Changelog.md of the ONNX
 * repository) for each version.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/loader.h"
#include "graph/ops.h"
#include "onnx/import_internal.h"

#define F32 ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define I64 ONNX__TENSOR_PROTO__DATA_TYPE__INT64

/* ---- small helpers ---------------------------------------------------------------- */

static gcc_status oom(gcc_diag *d) {
  return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (ONNX import)");
}

static const tshape *in_sh(nctx *c, int k) {
  return &imp_val(c->I, in_idx(c, k))->sh;
}
static int in_dt(nctx *c, int k) {
  return imp_val(c->I, in_idx(c, k))->onnx_dt;
}

static gcc_status need_inputs(nctx *c, int lo, int hi, gcc_diag *d) {
  int n = n_in(c);
  if (n < lo || n > hi)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "takes %d to %d inputs, got %d", lo, hi, n);
  for (int k = 0; k < lo; k++)
    if (in_idx(c, k) < 0)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "required input %d is empty", k);
  return GCC_OK;
}

/* Outputs from `from` on must be absent or unused. */
static gcc_status unused_outputs(nctx *c, int from, const char *what, gcc_diag *d) {
  for (int k = from; k < n_out(c); k++)
    if (out_used(c, k))
      return node_err(c, d, GCC_ERR_UNSUPPORTED, "output %d (%s) is used; it is not supported", k,
                      what);
  return GCC_OK;
}

static gcc_status need_float(nctx *c, int k, gcc_diag *d) {
  int dt = in_dt(c, k);
  if (dt != F32)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "input %d ('%s') has dtype %s; this op is supported for float only", k,
                    imp_val(c->I, in_idx(c, k))->name, onnx_dtype_name(dt));
  return GCC_OK;
}

/* float, int64 or int32 (what Concat, Transpose, Pad and the integer
 * arithmetic of Add / Sub / Mul / Div take). */
static gcc_status need_computable(nctx *c, int k, gcc_diag *d) {
  int dt = in_dt(c, k);
  if (onnx_to_gcc_dtype(dt) == GCC_DT_UNDEFINED)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "input %d ('%s') has dtype %s (supported: float, int64, int32)", k,
                    imp_val(c->I, in_idx(c, k))->name, onnx_dtype_name(dt));
  return GCC_OK;
}

static gcc_status in_ir(nctx *c, int k, int *ir, gcc_diag *d) {
  return ir_of(c, in_idx(c, k), ir, d);
}

/* A normalised axis in [0, rank) (or [0, rank] when `inclusive`). */
static gcc_status norm_axis(nctx *c, int64_t axis, int rank, int inclusive, const char *what,
                            int64_t *out, gcc_diag *d) {
  int64_t hi = inclusive ? rank : rank - 1;
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a > hi)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "%s %" PRId64 " is out of range for rank %d", what,
                    axis, rank);
  *out = a;
  return GCC_OK;
}

/* IR operand for value `idx` with another shape `ns` of the same numel: a
 * constant gets a reshaped copy, anything else an IR Reshape. */
static gcc_status reshaped(nctx *c, int idx, const tshape *ns, int *ir, gcc_diag *d) {
  ival *v = imp_val(c->I, idx);
  if (v->is_const) {
    gcc_dtype dt = onnx_to_gcc_dtype(v->onnx_dt);
    if (dt == GCC_DT_UNDEFINED)
      return ir_of(c, idx, ir, d); /* gives the dtype error */
    gcc_shape s = {ns->ndim, {0}};
    for (int i = 0; i < ns->ndim; i++)
      s.dims[i] = ns->d[i].v;
    char base[600], name[620];
    snprintf(base, sizeof base, "%s/reshaped", v->name);
    snprintf(name, sizeof name, "%s", base);
    for (int k = 1; gcc_graph_find(c->I->g, name) >= 0; k++)
      snprintf(name, sizeof name, "%s_%d", base, k);
    int kind = (v->trainable && dt == GCC_DT_FLOAT32) ? GCC_VALUE_PARAM : GCC_VALUE_CONST;
    return gcc_graph_add_value(c->I->g, name, dt, &s, kind, v->data, v->bytes, ir, d);
  }
  int x;
  GCC_TRY(ir_of(c, idx, &x, d));
  return emit_reshape(c, x, ns, -1, v->onnx_dt, ir, d);
}

/* ---- folded ops -------------------------------------------------------------------- */

static gcc_status cv_constant(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "value", "value_float", "value_floats", "value_int", "value_ints",
                      "sparse_value", "value_string", "value_strings", (char *)NULL));
  if (n_in(c) != 0 || n_out(c) != 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "takes no inputs and has one output");
  if (c->n->n_attribute != 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "needs exactly one value attribute, got %zu",
                    c->n->n_attribute);
  const Onnx__AttributeProto *a = c->n->attribute[0];
  const char *an = a->name;
  if (strcmp(an, "sparse_value") == 0 || strncmp(an, "value_string", 12) == 0)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "attribute '%s' is not supported", an);
  if (c->ver < 12 && strcmp(an, "value") != 0)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "attribute '%s' needs opset 12", an);
  tshape s = {0, {{0, 0}}};
  void *data = NULL;
  size_t bytes;
  int dt;
  if (strcmp(an, "value") == 0) {
    if (!a->t)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "attribute 'value' holds no tensor");
    char what[512];
    snprintf(what, sizeof what, "%s: attribute 'value'", c->desc);
    GCC_TRY(read_tensor(c->I, a->t, what, &dt, &s, &data, &bytes, d));
  } else if (strcmp(an, "value_float") == 0 || strcmp(an, "value_int") == 0) {
    int is_f = an[6] == 'f';
    dt = is_f ? F32 : I64;
    bytes = is_f ? 4 : 8;
    data = malloc(bytes);
    if (!data)
      return oom(d);
    if (is_f)
      *(float *)data = a->f;
    else
      *(int64_t *)data = a->i;
  } else { /* value_floats, value_ints: 1-D */
    int is_f = an[6] == 'f';
    size_t n = is_f ? a->n_floats : a->n_ints;
    dt = is_f ? F32 : I64;
    bytes = n * (is_f ? 4 : 8);
    s.ndim = 1;
    s.d[0] = (sdim){(int64_t)n, 0};
    data = malloc(bytes ? bytes : 1);
    if (!data)
      return oom(d);
    if (bytes)
      memcpy(data, is_f ? (const void *)a->floats : (const void *)a->ints, bytes);
  }
  GCC_TRY(set_const(c, 0, dt, &s, data, bytes, d));
  mark_folded(c);
  return GCC_OK;
}

static gcc_status cv_constant_of_shape(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "value", (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 1, d));
  const int64_t *dims;
  int64_t nd;
  GCC_TRY(const_ints(c, in_idx(c, 0), "shape input", &dims, &nd, d));
  if (nd > GCC_MAX_DIMS)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "%" PRId64 " dims (at most %d)", nd, GCC_MAX_DIMS);
  tshape s = {(int)nd, {{0, 0}}};
  uint64_t numel = 1;
  for (int i = 0; i < nd; i++) {
    if (dims[i] < 0 || dims[i] > ((int64_t)1 << 40))
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "shape entry %d is %" PRId64, i, dims[i]);
    s.d[i] = (sdim){dims[i], 0};
    numel *= (uint64_t)dims[i];
    if (numel > ((uint64_t)1 << 34))
      return node_err(c, d, GCC_ERR_UNSUPPORTED, "the constant is too large");
  }
  int dt = F32;
  const void *fill = NULL;
  void *vdata = NULL;
  float zero = 0.0f;
  const Onnx__AttributeProto *a = attr(c, "value");
  if (a) {
    if (!a->t)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "attribute 'value' holds no tensor");
    char what[512];
    snprintf(what, sizeof what, "%s: attribute 'value'", c->desc);
    tshape vs;
    size_t vb;
    GCC_TRY(read_tensor(c->I, a->t, what, &dt, &vs, &vdata, &vb, d));
    GCC_TRY(pool_add(c->I, vdata, d));
    if (tshape_static_numel(&vs) != 1)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "attribute 'value' must hold one element");
    fill = vdata;
  } else {
    fill = &zero;
  }
  size_t es = onnx_dtype_size(dt);
  /* the folded constant is kept in the graph: no larger than a model file
   * may be (found by tools/fuzz.sh: a shape of 17 GB) */
  if (es && numel > GCC_MODEL_MAX_BYTES / es)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                    "the constant it makes has %llu elements, more than the %zu bytes a model "
                    "may hold",
                    (unsigned long long)numel, (size_t)GCC_MODEL_MAX_BYTES);
  size_t bytes = (size_t)numel * es;
  uint8_t *data = malloc(bytes ? bytes : 1);
  if (!data)
    return oom(d);
  for (uint64_t i = 0; i < numel; i++)
    memcpy(data + i * es, fill, es);
  GCC_TRY(set_const(c, 0, dt, &s, data, bytes, d));
  mark_folded(c);
  return GCC_OK;
}

static gcc_status cv_identity(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 1, d));
  set_alias(c, 0, in_idx(c, 0));
  mark_folded(c);
  return GCC_OK;
}

/* Dropout in inference is the identity (ONNX: "If training_mode is false,
 * the output is the input"); the ratio does not matter then. */
static gcc_status cv_dropout(nctx *c, gcc_diag *d) {
  if (c->ver == 1)
    GCC_TRY(allow_attrs(c, d, "is_test", "ratio", "consumed_inputs", (char *)NULL));
  else if (c->ver == 6)
    GCC_TRY(allow_attrs(c, d, "is_test", "ratio", (char *)NULL));
  else if (c->ver < 12)
    GCC_TRY(allow_attrs(c, d, "ratio", (char *)NULL));
  else
    GCC_TRY(allow_attrs(c, d, "seed", (char *)NULL));
  GCC_TRY(need_inputs(c, 1, c->ver >= 12 ? 3 : 1, d));
  if (attr(c, "consumed_inputs"))
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "attribute 'consumed_inputs' (opset 1 in-place "
                    "hints) is not supported");
  if (c->ver <= 6) {
    int64_t is_test;
    GCC_TRY(a_int(c, "is_test", 0, &is_test, d));
    if (!is_test)
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "is_test = 0 asks for training-mode dropout; only inference is supported");
  }
  if (c->ver >= 12 && in_idx(c, 2) >= 0) {
    double tm;
    GCC_TRY(const_scalar(c, in_idx(c, 2), "training_mode input", &tm, d));
    if (tm != 0.0)
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "training_mode is true; only inference dropout (the identity) is "
                      "supported");
  }
  GCC_TRY(unused_outputs(c, 1, "mask", d));
  set_alias(c, 0, in_idx(c, 0));
  mark_folded(c);
  return GCC_OK;
}

/* ---- elementwise ------------------------------------------------------------------- */

static gcc_status no_consumed_inputs(nctx *c, gcc_diag *d) {
  if (attr(c, "consumed_inputs"))
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "attribute 'consumed_inputs' (opset 1 in-place hints) is not supported");
  return GCC_OK;
}

static gcc_status unary_node(nctx *c, int op, int *node, gcc_diag *d) {
  GCC_TRY(need_inputs(c, 1, 1, d));
  GCC_TRY(need_float(c, 0, d));
  int x;
  GCC_TRY(in_ir(c, 0, &x, d));
  return emit(c, op, &x, 1, 0, F32, in_sh(c, 0), NULL, node, d);
}

static gcc_status unary(nctx *c, int op, gcc_diag *d) {
  int node;
  return unary_node(c, op, &node, d);
}

static gcc_status cv_relu(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, c->ver == 1 ? "consumed_inputs" : NULL, (char *)NULL));
  GCC_TRY(no_consumed_inputs(c, d));
  return unary(c, GCC_OP_RELU, d);
}

/* B's shape for the legacy broadcast of opsets < 7 (attributes broadcast
 * and axis): B's dims line up with A's from `axis` (default: the last
 * ones), the rest of A's dims are broadcast. */
static gcc_status legacy_broadcast(nctx *c, int a, int b, int *bir, tshape *out, gcc_diag *d) {
  int64_t bc, axis;
  GCC_TRY(a_int(c, "broadcast", 0, &bc, d));
  const tshape *sa = &imp_val(c->I, a)->sh, *sb = &imp_val(c->I, b)->sh;
  char x[128], y[128];
  if (!bc) {
    int same = sa->ndim == sb->ndim;
    for (int i = 0; same && i < sa->ndim; i++)
      same = sa->d[i].v == sb->d[i].v && sa->d[i].sym == sb->d[i].sym;
    if (!same)
      return node_err(c, d, GCC_ERR_SHAPE,
                      "without broadcast = 1 (opset %d) A and B need the same shape, got %s and "
                      "%s",
                      c->ver, tshape_str(sa, x, sizeof x), tshape_str(sb, y, sizeof y));
    *out = *sa;
    return ir_of(c, b, bir, d);
  }
  GCC_TRY(a_int(c, "axis", sa->ndim - sb->ndim, &axis, d));
  if (axis < 0)
    axis += sa->ndim;
  if (sb->ndim > sa->ndim || axis < 0 || axis + sb->ndim > sa->ndim)
    return node_err(c, d, GCC_ERR_SHAPE, "B %s does not line up with A %s at axis %" PRId64,
                    tshape_str(sb, y, sizeof y), tshape_str(sa, x, sizeof x), axis);
  tshape nb = *sb;
  for (int i = 0; i < sb->ndim; i++) {
    sdim ad = sa->d[axis + i], bd = sb->d[i];
    if (!(bd.v == 1 && !bd.sym) && !(ad.v == bd.v && ad.sym == bd.sym))
      return node_err(c, d, GCC_ERR_SHAPE, "B %s does not line up with A %s at axis %" PRId64,
                      tshape_str(sb, y, sizeof y), tshape_str(sa, x, sizeof x), axis);
  }
  int trailing = sa->ndim - (int)axis - sb->ndim;
  for (int i = 0; i < trailing; i++)
    nb.d[nb.ndim++] = (sdim){1, 0};
  *out = *sa;
  if (trailing == 0)
    return ir_of(c, b, bir, d);
  return reshaped(c, b, &nb, bir, d);
}

static gcc_status binary(nctx *c, int op, gcc_diag *d) {
  if (c->ver < 7)
    GCC_TRY(allow_attrs(c, d, "broadcast", "axis", c->ver == 1 ? "consumed_inputs" : NULL,
                        (char *)NULL));
  else
    GCC_TRY(allow_attrs(c, d, (char *)NULL));
  GCC_TRY(no_consumed_inputs(c, d));
  GCC_TRY(need_inputs(c, 2, 2, d));
  GCC_TRY(need_computable(c, 0, d));
  GCC_TRY(need_computable(c, 1, d));
  int dt = in_dt(c, 0);
  if (in_dt(c, 1) != dt)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "A is %s but B is %s", onnx_dtype_name(dt),
                    onnx_dtype_name(in_dt(c, 1)));
  int ins[2];
  tshape s;
  GCC_TRY(in_ir(c, 0, &ins[0], d));
  if (c->ver < 7) {
    GCC_TRY(legacy_broadcast(c, in_idx(c, 0), in_idx(c, 1), &ins[1], &s, d));
  } else {
    GCC_TRY(in_ir(c, 1, &ins[1], d));
    if (!tshape_broadcast(in_sh(c, 0), in_sh(c, 1), &s)) {
      char x[128], y[128];
      return node_err(c, d, GCC_ERR_SHAPE, "operands %s and %s do not broadcast",
                      tshape_str(in_sh(c, 0), x, sizeof x), tshape_str(in_sh(c, 1), y, sizeof y));
    }
  }
  int node;
  return emit(c, op, ins, 2, 0, dt, &s, NULL, &node, d);
}

static gcc_status cv_add(nctx *c, gcc_diag *d) {
  return binary(c, GCC_OP_ADD, d);
}
static gcc_status cv_sub(nctx *c, gcc_diag *d) {
  return binary(c, GCC_OP_SUB, d);
}
static gcc_status cv_mul(nctx *c, gcc_diag *d) {
  return binary(c, GCC_OP_MUL, d);
}
static gcc_status cv_div(nctx *c, gcc_diag *d) {
  return binary(c, GCC_OP_DIV, d);
}

static gcc_status cv_sigmoid(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, c->ver == 1 ? "consumed_inputs" : NULL, (char *)NULL));
  GCC_TRY(no_consumed_inputs(c, d));
  return unary(c, GCC_OP_SIGMOID, d);
}

static gcc_status cv_tanh(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, c->ver == 1 ? "consumed_inputs" : NULL, (char *)NULL));
  GCC_TRY(no_consumed_inputs(c, d));
  return unary(c, GCC_OP_TANH, d);
}

static gcc_status cv_sqrt(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, c->ver == 1 ? "consumed_inputs" : NULL, (char *)NULL));
  GCC_TRY(no_consumed_inputs(c, d));
  return unary(c, GCC_OP_SQRT, d);
}

static gcc_status cv_leaky_relu(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "alpha", c->ver == 1 ? "consumed_inputs" : NULL, (char *)NULL));
  GCC_TRY(no_consumed_inputs(c, d));
  float alpha;
  GCC_TRY(a_float(c, "alpha", 0.01f, &alpha, d));
  int node;
  GCC_TRY(unary_node(c, GCC_OP_LEAKY_RELU, &node, d));
  return gcc_node_set_float(c->I->g, node, "alpha", alpha) ? oom(d) : GCC_OK;
}

/* Clip: min and max are attributes before opset 11, optional (constant)
 * inputs from 11; absent bounds are the float limits. */
static gcc_status cv_clip(nctx *c, gcc_diag *d) {
  double lo = -FLT_MAX, hi = FLT_MAX;
  if (c->ver < 11) {
    GCC_TRY(allow_attrs(c, d, "min", "max", c->ver == 1 ? "consumed_inputs" : NULL, (char *)NULL));
    GCC_TRY(no_consumed_inputs(c, d));
    GCC_TRY(need_inputs(c, 1, 1, d));
    float f;
    GCC_TRY(a_float(c, "min", -FLT_MAX, &f, d));
    lo = f;
    GCC_TRY(a_float(c, "max", FLT_MAX, &f, d));
    hi = f;
  } else {
    GCC_TRY(allow_attrs(c, d, (char *)NULL));
    GCC_TRY(need_inputs(c, 1, 3, d));
    if (in_idx(c, 1) >= 0)
      GCC_TRY(const_scalar(c, in_idx(c, 1), "min input", &lo, d));
    if (in_idx(c, 2) >= 0)
      GCC_TRY(const_scalar(c, in_idx(c, 2), "max input", &hi, d));
  }
  GCC_TRY(need_float(c, 0, d));
  int x, node;
  GCC_TRY(in_ir(c, 0, &x, d));
  GCC_TRY(emit(c, GCC_OP_CLIP, &x, 1, 0, F32, in_sh(c, 0), NULL, &node, d));
  if (gcc_node_set_float(c->I->g, node, "min", (float)lo) ||
      gcc_node_set_float(c->I->g, node, "max", (float)hi))
    return oom(d);
  return GCC_OK;
}

/* Sum of n inputs: a chain of Adds (broadcasting from opset 8; before, the
 * shapes must be equal). */
static gcc_status cv_sum(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, c->ver == 1 ? "consumed_inputs" : NULL, (char *)NULL));
  GCC_TRY(no_consumed_inputs(c, d));
  int n = n_in(c);
  if (n < 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "needs at least one input");
  for (int k = 0; k < n; k++) {
    if (in_idx(c, k) < 0)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "input %d is empty", k);
    GCC_TRY(need_float(c, k, d));
  }
  if (n == 1) {
    set_alias(c, 0, in_idx(c, 0));
    mark_folded(c);
    return GCC_OK;
  }
  int acc;
  tshape s = *in_sh(c, 0);
  GCC_TRY(in_ir(c, 0, &acc, d));
  for (int k = 1; k < n; k++) {
    tshape r;
    char x[128], y[128];
    const tshape *sk = in_sh(c, k);
    int ok = tshape_broadcast(&s, sk, &r);
    if (ok && c->ver < 8) {
      ok = s.ndim == sk->ndim;
      for (int i = 0; ok && i < s.ndim; i++)
        ok = s.d[i].v == sk->d[i].v && s.d[i].sym == sk->d[i].sym;
    }
    if (!ok)
      return node_err(c, d, GCC_ERR_SHAPE, "input %d %s does not %s %s", k,
                      tshape_str(sk, y, sizeof y), c->ver < 8 ? "match" : "broadcast with",
                      tshape_str(&s, x, sizeof x));
    int ins[2] = {acc, -1}, node;
    GCC_TRY(in_ir(c, k, &ins[1], d));
    GCC_TRY(emit(c, GCC_OP_ADD, ins, 2, k == n - 1 ? 0 : -1, F32, &r, &acc, &node, d));
    s = r;
  }
  return GCC_OK;
}

/* ---- GEMMs ---------------------------------------------------------------------- */

static gcc_status cv_gemm(nctx *c, gcc_diag *d) {
  if (c->ver < 7)
    GCC_TRY(allow_attrs(c, d, "alpha", "beta", "transA", "transB", "broadcast", (char *)NULL));
  else
    GCC_TRY(allow_attrs(c, d, "alpha", "beta", "transA", "transB", (char *)NULL));
  GCC_TRY(need_inputs(c, c->ver < 11 ? 3 : 2, 3, d));
  for (int k = 0; k < n_in(c); k++)
    if (in_idx(c, k) >= 0)
      GCC_TRY(need_float(c, k, d));
  float alpha, beta;
  int64_t ta, tb, bc;
  GCC_TRY(a_float(c, "alpha", 1.0f, &alpha, d));
  GCC_TRY(a_float(c, "beta", 1.0f, &beta, d));
  GCC_TRY(a_int(c, "transA", 0, &ta, d));
  GCC_TRY(a_int(c, "transB", 0, &tb, d));
  GCC_TRY(a_int(c, "broadcast", 0, &bc, d));
  if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "transA and transB must be 0 or 1");
  const tshape *sa = in_sh(c, 0), *sb = in_sh(c, 1);
  char x[128], y[128];
  if (sa->ndim != 2 || sb->ndim != 2)
    return node_err(c, d, GCC_ERR_SHAPE, "A and B must be 2-D, got %s and %s",
                    tshape_str(sa, x, sizeof x), tshape_str(sb, y, sizeof y));
  sdim m = sa->d[ta ? 1 : 0], ka = sa->d[ta ? 0 : 1], kb = sb->d[tb ? 1 : 0],
       nn = sb->d[tb ? 0 : 1];
  if (ka.v != kb.v || ka.sym != kb.sym)
    return node_err(c, d, GCC_ERR_SHAPE, "inner dims of A %s and B %s differ",
                    tshape_str(sa, x, sizeof x), tshape_str(sb, y, sizeof y));
  tshape s = {2, {m, nn}};
  int ins[3] = {-1, -1, -1}, n = 2;
  GCC_TRY(in_ir(c, 0, &ins[0], d));
  GCC_TRY(in_ir(c, 1, &ins[1], d));
  int split = 0; /* C added by a separate node (below) */
  if (in_idx(c, 2) >= 0) {
    const tshape *sc = in_sh(c, 2);
    tshape r;
    int ok = tshape_broadcast(&s, sc, &r) && r.d[0].v == s.d[0].v && r.d[1].v == s.d[1].v &&
             r.d[0].sym == s.d[0].sym && r.ndim == 2;
    if (ok && c->ver < 7 && !bc)
      ok = sc->ndim == 2 && sc->d[0].v == m.v && sc->d[1].v == nn.v;
    if (!ok)
      return node_err(c, d, GCC_ERR_SHAPE, "C %s does not broadcast to (M, N) = %s",
                      tshape_str(sc, x, sizeof x), tshape_str(&s, y, sizeof y));
    /* a full (M, N) C, or a bias row with beta = 1, is one GEMM with its
     * epilogue on every backend (cuBLASLt takes nothing else); any other
     * broadcast C is added after the GEMM: Y = alpha A B + (beta C) */
    int full = sc->ndim == 2 && sc->d[0].v == m.v && sc->d[0].sym == m.sym && sc->d[1].v == nn.v;
    int row = (sc->ndim == 1 || (sc->ndim == 2 && sc->d[0].v == 1 && !sc->d[0].sym)) &&
              sc->d[sc->ndim - 1].v == nn.v && nn.v > 1;
    if (full || (row && beta == 1.0f)) {
      GCC_TRY(in_ir(c, 2, &ins[2], d));
      n = 3;
    } else {
      split = 1;
    }
  }
  int node, tmp;
  GCC_TRY(emit(c, GCC_OP_GEMM, ins, n, split ? -1 : 0, F32, &s, &tmp, &node, d));
  gcc_graph *g = c->I->g;
  if (gcc_node_set_float(g, node, "alpha", alpha) || gcc_node_set_float(g, node, "beta", beta) ||
      gcc_node_set_int(g, node, "transA", ta) || gcc_node_set_int(g, node, "transB", tb))
    return oom(d);
  if (!split)
    return GCC_OK;
  int cv;
  ival *C = imp_val(c->I, in_idx(c, 2));
  if (C->is_const) { /* beta C folded */
    int64_t cn = tshape_static_numel(&C->sh);
    float *sc = malloc((size_t)(cn > 0 ? cn : 1) * sizeof *sc);
    if (!sc)
      return oom(d);
    for (int64_t i = 0; i < cn; i++)
      sc[i] = beta * ((const float *)C->data)[i];
    gcc_shape cs = {C->sh.ndim, {0}};
    for (int i = 0; i < C->sh.ndim; i++)
      cs.dims[i] = C->sh.d[i].v;
    char base[600], name[620];
    snprintf(base, sizeof base, "%s/beta_C", c->ir_name);
    snprintf(name, sizeof name, "%s", base);
    for (int k = 1; gcc_graph_find(g, name) >= 0; k++)
      snprintf(name, sizeof name, "%s_%d", base, k);
    gcc_status st = gcc_graph_add_value(g, name, GCC_DT_FLOAT32, &cs, GCC_VALUE_CONST, sc,
                                        (size_t)(cn > 0 ? cn : 1) * sizeof *sc, &cv, d);
    free(sc);
    GCC_TRY(st);
  } else {
    GCC_TRY(in_ir(c, 2, &cv, d));
    if (beta != 1.0f) {
      char base[600], name[620];
      snprintf(base, sizeof base, "%s/beta", c->ir_name);
      snprintf(name, sizeof name, "%s", base);
      for (int k = 1; gcc_graph_find(g, name) >= 0; k++)
        snprintf(name, sizeof name, "%s_%d", base, k);
      gcc_shape one = {0, {0}};
      int bv, scaled;
      GCC_TRY(gcc_graph_add_value(g, name, GCC_DT_FLOAT32, &one, GCC_VALUE_CONST, &beta,
                                  sizeof beta, &bv, d));
      int mi[2] = {cv, bv};
      GCC_TRY(emit(c, GCC_OP_MUL, mi, 2, -1, F32, &C->sh, &scaled, &node, d));
      cv = scaled;
    }
  }
  int ai[2] = {tmp, cv};
  return emit(c, GCC_OP_ADD, ai, 2, 0, F32, &s, NULL, &node, d);
}

/* numpy.matmul's shape rule. */
static gcc_status cv_matmul(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  GCC_TRY(need_inputs(c, 2, 2, d));
  GCC_TRY(need_float(c, 0, d));
  GCC_TRY(need_float(c, 1, d));
  tshape a = *in_sh(c, 0), b = *in_sh(c, 1);
  char x[128], y[128];
  if (a.ndim < 1 || b.ndim < 1)
    return node_err(c, d, GCC_ERR_SHAPE, "operands must have at least one dim");
  int a1 = a.ndim == 1, b1 = b.ndim == 1;
  tshape pa = a, pb = b;
  if (a1) {
    pa.ndim = 2;
    pa.d[1] = a.d[0];
    pa.d[0] = (sdim){1, 0};
  }
  if (b1) {
    pb.ndim = 2;
    pb.d[1] = (sdim){1, 0};
  }
  sdim k1 = pa.d[pa.ndim - 1], k2 = pb.d[pb.ndim - 2];
  if (k1.v != k2.v || k1.sym != k2.sym)
    return node_err(c, d, GCC_ERR_SHAPE, "inner dims of %s and %s differ",
                    tshape_str(&a, x, sizeof x), tshape_str(&b, y, sizeof y));
  tshape ba = pa, bb = pb, batch;
  ba.ndim -= 2;
  bb.ndim -= 2;
  if (!tshape_broadcast(&ba, &bb, &batch))
    return node_err(c, d, GCC_ERR_SHAPE, "batch dims of %s and %s do not broadcast",
                    tshape_str(&a, x, sizeof x), tshape_str(&b, y, sizeof y));
  tshape s = batch;
  if (!a1)
    s.d[s.ndim++] = pa.d[pa.ndim - 2];
  if (!b1)
    s.d[s.ndim++] = pb.d[pb.ndim - 1];
  int ins[2], node;
  GCC_TRY(in_ir(c, 0, &ins[0], d));
  GCC_TRY(in_ir(c, 1, &ins[1], d));
  return emit(c, GCC_OP_MATMUL, ins, 2, 0, F32, &s, NULL, &node, d);
}

/* ---- windows: Conv and the pools ------------------------------------------------------ */

typedef struct window {
  int nsp; /* spatial dims: 1 or 2 */
  int64_t k[2], s[2], dl[2], pb[2], pe[2];
  int64_t out[2];
} window;

/* kernel (from the filter or kernel_shape), strides, dilations, pads and
 * auto_pad of a node over input spatial dims `in`; the output dims with
 * floor or ceil rounding (ceil: PyTorch's and ONNX Runtime's rule that the
 * last window starts inside the input or its left padding). */
static gcc_status read_window(nctx *c, const int64_t *in, int nsp, const int64_t *kernel,
                              int dilations_ok, int ceil_mode, window *w, gcc_diag *d) {
  const int64_t *v;
  int n;
  w->nsp = nsp;
  for (int i = 0; i < nsp; i++) {
    w->k[i] = kernel[i];
    w->s[i] = w->dl[i] = 1;
    w->pb[i] = w->pe[i] = 0;
  }
  GCC_TRY(a_ints(c, "strides", &v, &n, d));
  if (n >= 0 && n != nsp)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "strides has %d entries for %d spatial dims", n,
                    nsp);
  for (int i = 0; i < n; i++)
    w->s[i] = v[i];
  if (dilations_ok) {
    GCC_TRY(a_ints(c, "dilations", &v, &n, d));
    if (n >= 0 && n != nsp)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "dilations has %d entries for %d spatial dims",
                      n, nsp);
    for (int i = 0; i < n; i++)
      w->dl[i] = v[i];
  }
  GCC_TRY(a_ints(c, "pads", &v, &n, d));
  int has_pads = n >= 0;
  if (has_pads && n != 2 * nsp)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "pads has %d entries for %d spatial dims", n, nsp);
  for (int i = 0; has_pads && i < nsp; i++) {
    w->pb[i] = v[i];
    w->pe[i] = v[i + nsp];
  }
  for (int i = 0; i < nsp; i++)
    if (w->k[i] < 1 || w->s[i] < 1 || w->dl[i] < 1 || w->pb[i] < 0 || w->pe[i] < 0)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                      "kernel, strides and dilations must be >= 1 and pads >= 0");
  char ap[32];
  GCC_TRY(a_string(c, "auto_pad", "NOTSET", ap, sizeof ap, d));
  int same_upper = strcmp(ap, "SAME_UPPER") == 0, same_lower = strcmp(ap, "SAME_LOWER") == 0;
  if (strcmp(ap, "NOTSET") != 0 && strcmp(ap, "VALID") != 0 && !same_upper && !same_lower)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "auto_pad '%s' is not handled (NOTSET, VALID, SAME_UPPER, SAME_LOWER)", ap);
  if (strcmp(ap, "NOTSET") != 0 && has_pads) {
    int nonzero = 0;
    for (int i = 0; i < nsp; i++)
      nonzero |= w->pb[i] || w->pe[i];
    if (nonzero)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "auto_pad %s and explicit pads are both set",
                      ap);
  }
  for (int i = 0; i < nsp; i++) {
    int64_t span = (w->k[i] - 1) * w->dl[i] + 1;
    if (same_upper || same_lower) { /* out = ceil(in / stride) */
      int64_t out = (in[i] + w->s[i] - 1) / w->s[i];
      int64_t total = (out - 1) * w->s[i] + span - in[i];
      if (total < 0)
        total = 0;
      w->pb[i] = same_upper ? total / 2 : total - total / 2;
      w->pe[i] = total - w->pb[i];
      w->out[i] = out;
      continue;
    }
    if (strcmp(ap, "VALID") == 0)
      w->pb[i] = w->pe[i] = 0;
    int64_t room = in[i] + w->pb[i] + w->pe[i] - span;
    if (room < 0)
      return node_err(c, d, GCC_ERR_SHAPE,
                      "the window of %" PRId64
                      " (dilated) does not fit the padded input of %" PRId64,
                      span, in[i] + w->pb[i] + w->pe[i]);
    if (!ceil_mode) {
      w->out[i] = room / w->s[i] + 1;
    } else {
      w->out[i] = (room + w->s[i] - 1) / w->s[i] + 1;
      if ((w->out[i] - 1) * w->s[i] >= in[i] + w->pb[i])
        w->out[i]--;
    }
  }
  return GCC_OK;
}

/* The 2-D IR attributes of a window (1-D: over an H of 1). */
static gcc_status set_window_attrs(gcc_graph *g, int node, const window *w, int with_dilations,
                                   gcc_diag *d) {
  int64_t k[2], s[2], dl[2], p[4];
  int off = w->nsp == 1 ? 1 : 0;
  for (int i = 0; i < 2; i++) {
    int j = i - off;
    k[i] = j >= 0 ? w->k[j] : 1;
    s[i] = j >= 0 ? w->s[j] : 1;
    dl[i] = j >= 0 ? w->dl[j] : 1;
    p[i] = j >= 0 ? w->pb[j] : 0;
    p[i + 2] = j >= 0 ? w->pe[j] : 0;
  }
  if (gcc_node_set_ints(g, node, "kernel_shape", k, 2) ||
      gcc_node_set_ints(g, node, "strides", s, 2) || gcc_node_set_ints(g, node, "pads", p, 4) ||
      (with_dilations && gcc_node_set_ints(g, node, "dilations", dl, 2)))
    return oom(d);
  return GCC_OK;
}

/* X's spatial dims (rank 3: 1-D, rank 4: 2-D; the rest is refused). */
static gcc_status spatial(nctx *c, const tshape *x, const char *what, int64_t *in, int *nsp,
                          gcc_diag *d) {
  char sh[128];
  if (x->ndim != 3 && x->ndim != 4)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "%s over %s: only 1-D (N, C, L) and 2-D (N, C, H, W) inputs are supported",
                    what, tshape_str(x, sh, sizeof sh));
  *nsp = x->ndim - 2;
  for (int i = 0; i < *nsp; i++) {
    if (x->d[2 + i].sym)
      return node_err(c, d, GCC_ERR_SHAPE, "a spatial dim of %s depends on the batch",
                      tshape_str(x, sh, sizeof sh));
    in[i] = x->d[2 + i].v;
  }
  if (x->d[1].sym)
    return node_err(c, d, GCC_ERR_SHAPE, "the channels of %s depend on the batch",
                    tshape_str(x, sh, sizeof sh));
  return GCC_OK;
}

/* X as a 4-D IR operand: a 1-D input gets an H of 1. */
static gcc_status as_4d(nctx *c, int k, int nsp, int *ir, gcc_diag *d) {
  if (nsp == 2)
    return in_ir(c, k, ir, d);
  const tshape *x = in_sh(c, k);
  tshape s = {4, {x->d[0], x->d[1], {1, 0}, x->d[2]}};
  return reshaped(c, in_idx(c, k), &s, ir, d);
}

/* Emits `op` over 4-D operands and writes ONNX output 0 with `out` (a 1-D
 * result is reshaped back). Returns the IR node. */
static gcc_status emit_window_op(nctx *c, int op, const int *ins, int n, int nsp, const tshape *out,
                                 int *node, gcc_diag *d) {
  if (nsp == 2)
    return emit(c, op, ins, n, 0, F32, out, NULL, node, d);
  tshape s4 = {4, {out->d[0], out->d[1], {1, 0}, out->d[2]}};
  int tmp;
  GCC_TRY(emit(c, op, ins, n, -1, F32, &s4, &tmp, node, d));
  return emit_reshape(c, tmp, out, 0, F32, NULL, d);
}

static gcc_status emit_pad4(nctx *c, int x, const tshape *xs, const int64_t *pads, float value,
                            int *out, tshape *os, gcc_diag *d);

static gcc_status cv_conv(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "auto_pad", "dilations", "group", "kernel_shape", "pads", "strides",
                      (char *)NULL));
  GCC_TRY(need_inputs(c, 2, 3, d));
  for (int k = 0; k < n_in(c); k++)
    if (in_idx(c, k) >= 0)
      GCC_TRY(need_float(c, k, d));
  const tshape *x = in_sh(c, 0), *w = in_sh(c, 1);
  int64_t in[2];
  int nsp;
  char a[128], b[128];
  GCC_TRY(spatial(c, x, "Conv", in, &nsp, d));
  if (w->ndim != x->ndim || tshape_has_sym(w))
    return node_err(c, d, GCC_ERR_SHAPE, "filter W %s does not match input X %s",
                    tshape_str(w, a, sizeof a), tshape_str(x, b, sizeof b));
  int64_t group, kernel[2];
  GCC_TRY(a_int(c, "group", 1, &group, d));
  if (group < 1 || x->d[1].v % group != 0 || w->d[0].v % group != 0 ||
      w->d[1].v * group != x->d[1].v)
    return node_err(c, d, GCC_ERR_SHAPE,
                    "X %s and W %s do not agree with group = %" PRId64
                    " (C = W.dims[1] * group, M divisible by group)",
                    tshape_str(x, a, sizeof a), tshape_str(w, b, sizeof b), group);
  for (int i = 0; i < nsp; i++)
    kernel[i] = w->d[2 + i].v;
  const int64_t *ks;
  int nks;
  GCC_TRY(a_ints(c, "kernel_shape", &ks, &nks, d));
  if (nks >= 0) {
    int ok = nks == nsp;
    for (int i = 0; ok && i < nsp; i++)
      ok = ks[i] == kernel[i];
    if (!ok)
      return node_err(c, d, GCC_ERR_SHAPE, "kernel_shape does not match the filter %s",
                      tshape_str(w, a, sizeof a));
  }
  if (in_idx(c, 2) >= 0) {
    const tshape *bs = in_sh(c, 2);
    if (bs->ndim != 1 || bs->d[0].v != w->d[0].v || bs->d[0].sym)
      return node_err(c, d, GCC_ERR_SHAPE, "bias B %s must be [M] for filter %s",
                      tshape_str(bs, a, sizeof a), tshape_str(w, b, sizeof b));
  }
  window win;
  GCC_TRY(read_window(c, in, nsp, kernel, 1, 0, &win, d));
  tshape out = {x->ndim, {x->d[0], w->d[0]}};
  for (int i = 0; i < nsp; i++)
    out.d[2 + i] = (sdim){win.out[i], 0};
  int ins[3] = {-1, -1, -1}, n = in_idx(c, 2) >= 0 ? 3 : 2, node;
  GCC_TRY(as_4d(c, 0, nsp, &ins[0], d));
  GCC_TRY(as_4d(c, 1, nsp, &ins[1], d));
  if (n == 3)
    GCC_TRY(in_ir(c, 2, &ins[2], d));
  /* cuDNN takes one pad per dim: asymmetric pads (auto_pad SAME with an
   * even window, explicit ones) become an explicit zero Pad first */
  int asym = 0;
  for (int i = 0; i < nsp; i++)
    asym |= win.pb[i] != win.pe[i];
  if (asym) {
    int off = nsp == 1 ? 1 : 0;
    int64_t pads[8] = {0};
    tshape x4 = {4, {x->d[0], x->d[1], {1, 0}, {1, 0}}}, xp;
    for (int i = 0; i < nsp; i++) {
      pads[2 + off + i] = win.pb[i];
      pads[6 + off + i] = win.pe[i];
      x4.d[2 + off + i] = (sdim){in[i], 0};
      win.pb[i] = win.pe[i] = 0;
    }
    GCC_TRY(emit_pad4(c, ins[0], &x4, pads, 0.0f, &ins[0], &xp, d));
  }
  GCC_TRY(emit_window_op(c, GCC_OP_CONV, ins, n, nsp, &out, &node, d));
  GCC_TRY(set_window_attrs(c->I->g, node, &win, 1, d));
  if (gcc_node_set_int(c->I->g, node, "group", group))
    return oom(d);
  imp_val(c->I, out_idx(c, 0))->conv_node = node;
  return GCC_OK;
}

/* An IR Pad of 4-D IR value `x` (tracked shape `xs`) by pads[8] (ONNX
 * order: begins, then ends) with `value`; the result in *out, its shape in
 * *os. */
static gcc_status emit_pad4(nctx *c, int x, const tshape *xs, const int64_t *pads, float value,
                            int *out, tshape *os, gcc_diag *d) {
  *os = *xs;
  for (int i = 0; i < 4; i++)
    os->d[i].v += pads[i] + pads[i + 4];
  int node;
  GCC_TRY(emit(c, GCC_OP_PAD, &x, 1, -1, F32, os, out, &node, d));
  if (gcc_node_set_ints(c->I->g, node, "pads", pads, 8) ||
      gcc_node_set_float(c->I->g, node, "value", value))
    return oom(d);
  return GCC_OK;
}

/* MaxPool / AveragePool. The IR pools take floor rounding and pads of at
 * most half the kernel (PyTorch's rule); other windows (ceil_mode that
 * adds an output, larger pads) become an explicit Pad (-inf for MaxPool, 0
 * for AveragePool), the pool without padding, and for AveragePool a Mul by
 * the constant kh kw / divisor of each output position, the divisor
 * counting the window's taps inside the input (count_include_pad = 0) or
 * inside the explicitly padded input (1), as ONNX and PyTorch define it. */
static gcc_status pool(nctx *c, int op, int is_max, gcc_diag *d) {
  GCC_TRY(need_inputs(c, 1, 1, d));
  GCC_TRY(need_float(c, 0, d));
  const tshape *x = in_sh(c, 0);
  int64_t in[2];
  int nsp;
  GCC_TRY(spatial(c, x, c->n->op_type, in, &nsp, d));
  const int64_t *ks;
  int nks;
  GCC_TRY(a_ints(c, "kernel_shape", &ks, &nks, d));
  if (nks != nsp)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                    "kernel_shape needs %d entries (one per spatial dim)", nsp);
  int64_t ceil_mode = 0, cip = 0;
  GCC_TRY(a_int(c, "ceil_mode", 0, &ceil_mode, d));
  if (ceil_mode != 0 && ceil_mode != 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "ceil_mode must be 0 or 1");
  if (!is_max) {
    GCC_TRY(a_int(c, "count_include_pad", 0, &cip, d));
    if (cip != 0 && cip != 1)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "count_include_pad must be 0 or 1");
  }
  int dil_ok = is_max ? c->ver >= 10 : c->ver >= 19;
  window win;
  GCC_TRY(read_window(c, in, nsp, ks, dil_ok, (int)ceil_mode, &win, d));
  tshape out = {x->ndim, {x->d[0], x->d[1]}};
  for (int i = 0; i < nsp; i++)
    out.d[2 + i] = (sdim){win.out[i], 0};
  int direct = 1;
  int64_t span[2], pe2[2];
  for (int i = 0; i < nsp; i++) {
    span[i] = (win.k[i] - 1) * win.dl[i] + 1;
    int64_t floor_out = (in[i] + win.pb[i] + win.pe[i] - span[i]) / win.s[i] + 1;
    pe2[i] = (win.out[i] - 1) * win.s[i] + span[i] - in[i] - win.pb[i];
    direct &= floor_out == win.out[i] && 2 * win.pb[i] <= win.k[i] && 2 * win.pe[i] <= win.k[i];
  }
  int xi, node;
  GCC_TRY(as_4d(c, 0, nsp, &xi, d));
  if (direct) {
    GCC_TRY(emit_window_op(c, op, &xi, 1, nsp, &out, &node, d));
    GCC_TRY(set_window_attrs(c->I->g, node, &win, 1, d));
    if (cip && gcc_node_set_int(c->I->g, node, "count_include_pad", 1))
      return oom(d);
    return GCC_OK;
  }
  /* Pad + pool without padding (+ the divisor correction) */
  int off = nsp == 1 ? 1 : 0;
  int64_t pads[8] = {0};
  for (int i = 0; i < nsp; i++) {
    pads[2 + off + i] = win.pb[i];
    pads[6 + off + i] = pe2[i];
  }
  tshape x4 = {4, {x->d[0], x->d[1], {1, 0}, {1, 0}}}, xp;
  for (int i = 0; i < nsp; i++)
    x4.d[2 + off + i] = (sdim){in[i], 0};
  int padded;
  GCC_TRY(emit_pad4(c, xi, &x4, pads, is_max ? -INFINITY : 0.0f, &padded, &xp, d));
  window w0 = win;
  for (int i = 0; i < nsp; i++)
    w0.pb[i] = w0.pe[i] = 0;
  tshape o4 = {4, {x->d[0], x->d[1], {1, 0}, {1, 0}}};
  for (int i = 0; i < nsp; i++)
    o4.d[2 + off + i] = out.d[2 + i];
  /* the divisor correction of AveragePool, separable per dim */
  float *corr = NULL;
  int needs_corr = 0;
  int64_t oh = o4.d[2].v, ow = o4.d[3].v;
  if (!is_max) {
    int64_t cnt[2][4096];
    for (int i = 0; i < nsp; i++) {
      if (win.out[i] > 4096)
        return node_err(c, d, GCC_ERR_UNSUPPORTED, "more than 4096 outputs along a dim");
      int64_t lo = cip ? -win.pb[i] : 0, hi = cip ? in[i] + win.pe[i] : in[i];
      for (int64_t o = 0; o < win.out[i]; o++) {
        int64_t n = 0;
        for (int64_t j = 0; j < win.k[i]; j++) {
          int64_t t = o * win.s[i] - win.pb[i] + j * win.dl[i];
          n += t >= lo && t < hi;
        }
        if (n == 0)
          return node_err(c, d, GCC_ERR_UNSUPPORTED,
                          "an averaging window lies entirely outside the %s",
                          cip ? "padded input" : "input");
        cnt[i][o] = n;
      }
    }
    corr = malloc((size_t)(oh * ow) * sizeof *corr);
    if (!corr)
      return oom(d);
    double full = (double)win.k[0] * (nsp == 2 ? (double)win.k[1] : 1.0);
    for (int64_t yy = 0; yy < oh; yy++)
      for (int64_t xx = 0; xx < ow; xx++) {
        double n = nsp == 2 ? (double)cnt[0][yy] * (double)cnt[1][xx] : (double)cnt[0][xx];
        corr[yy * ow + xx] = (float)(full / n);
        needs_corr |= corr[yy * ow + xx] != 1.0f;
      }
  }
  int pooled;
  int last = is_max || !needs_corr;
  if (nsp == 2 && last) {
    GCC_TRY(emit(c, op, &padded, 1, 0, F32, &out, NULL, &node, d));
  } else {
    GCC_TRY(emit(c, op, &padded, 1, -1, F32, &o4, &pooled, &node, d));
  }
  GCC_TRY(set_window_attrs(c->I->g, node, &w0, 1, d));
  if (!is_max && gcc_node_set_int(c->I->g, node, "count_include_pad", 1)) {
    free(corr);
    return oom(d);
  }
  if (last) {
    free(corr);
    return nsp == 2 ? GCC_OK : emit_reshape(c, pooled, &out, 0, F32, NULL, d);
  }
  /* Mul by the correction [oh, ow] */
  char base[600], name[620];
  snprintf(base, sizeof base, "%s/divisor_correction", c->ir_name);
  snprintf(name, sizeof name, "%s", base);
  for (int k = 1; gcc_graph_find(c->I->g, name) >= 0; k++)
    snprintf(name, sizeof name, "%s_%d", base, k);
  gcc_shape cs = {2, {oh, ow}};
  int cv;
  gcc_status st = gcc_graph_add_value(c->I->g, name, GCC_DT_FLOAT32, &cs, GCC_VALUE_CONST, corr,
                                      (size_t)(oh * ow) * sizeof *corr, &cv, d);
  free(corr);
  GCC_TRY(st);
  int ins[2] = {pooled, cv};
  if (nsp == 2)
    return emit(c, GCC_OP_MUL, ins, 2, 0, F32, &out, NULL, &node, d);
  int scaled;
  GCC_TRY(emit(c, GCC_OP_MUL, ins, 2, -1, F32, &o4, &scaled, &node, d));
  return emit_reshape(c, scaled, &out, 0, F32, NULL, d);
}

static gcc_status cv_maxpool(nctx *c, gcc_diag *d) {
  if (c->ver < 8)
    GCC_TRY(allow_attrs(c, d, "auto_pad", "kernel_shape", "pads", "strides", (char *)NULL));
  else if (c->ver < 10)
    GCC_TRY(allow_attrs(c, d, "auto_pad", "kernel_shape", "pads", "strides", "storage_order",
                        (char *)NULL));
  else
    GCC_TRY(allow_attrs(c, d, "auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads",
                        "storage_order", "strides", (char *)NULL));
  /* storage_order only orders the Indices output */
  GCC_TRY(unused_outputs(c, 1, "Indices", d));
  return pool(c, GCC_OP_MAX_POOL, 1, d);
}

static gcc_status cv_avgpool(nctx *c, gcc_diag *d) {
  if (c->ver < 7)
    GCC_TRY(allow_attrs(c, d, "auto_pad", "kernel_shape", "pads", "strides", (char *)NULL));
  else if (c->ver < 10)
    GCC_TRY(allow_attrs(c, d, "auto_pad", "count_include_pad", "kernel_shape", "pads", "strides",
                        (char *)NULL));
  else if (c->ver < 19)
    GCC_TRY(allow_attrs(c, d, "auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads",
                        "strides", (char *)NULL));
  else
    GCC_TRY(allow_attrs(c, d, "auto_pad", "ceil_mode", "count_include_pad", "dilations",
                        "kernel_shape", "pads", "strides", (char *)NULL));
  return pool(c, GCC_OP_AVERAGE_POOL, 0, d);
}

/* GlobalAveragePool / GlobalMaxPool: the pool over the whole spatial
 * extent (a window of the input's size). */
static gcc_status global_pool(nctx *c, int op, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 1, d));
  GCC_TRY(need_float(c, 0, d));
  const tshape *x = in_sh(c, 0);
  int64_t in[2];
  int nsp;
  GCC_TRY(spatial(c, x, c->n->op_type, in, &nsp, d));
  window win = {nsp, {0}, {1, 1}, {1, 1}, {0}, {0}, {1, 1}};
  for (int i = 0; i < nsp; i++)
    win.k[i] = in[i];
  tshape out = {x->ndim, {x->d[0], x->d[1], {1, 0}, {1, 0}}};
  int xi, node;
  GCC_TRY(as_4d(c, 0, nsp, &xi, d));
  GCC_TRY(emit_window_op(c, op, &xi, 1, nsp, &out, &node, d));
  return set_window_attrs(c->I->g, node, &win, 0, d);
}

static gcc_status cv_global_avgpool(nctx *c, gcc_diag *d) {
  return global_pool(c, GCC_OP_AVERAGE_POOL, d);
}

static gcc_status cv_global_maxpool(nctx *c, gcc_diag *d) {
  return global_pool(c, GCC_OP_MAX_POOL, d);
}

/* BatchNormalization whose statistics are computed at run time (graph
 * inputs): Y = (X - mean) * (scale / sqrt(var + eps)) + B with IR ops, the
 * [C] vectors viewed as [C, 1, ...]. */
static gcc_status batchnorm_runtime(nctx *c, float eps, gcc_diag *d) {
  const tshape *x = in_sh(c, 0);
  int64_t ch = x->d[1].v;
  tshape cs = {x->ndim - 1, {{ch, 0}}};
  for (int i = 1; i < cs.ndim; i++)
    cs.d[i] = (sdim){1, 0};
  int p[4]; /* scale, B, mean, var as [C, 1, ...] */
  for (int k = 0; k < 4; k++)
    GCC_TRY(reshaped(c, in_idx(c, k + 1), &cs, &p[k], d));
  gcc_graph *g = c->I->g;
  char base[600], name[620];
  snprintf(base, sizeof base, "%s/epsilon", c->ir_name);
  snprintf(name, sizeof name, "%s", base);
  for (int j = 1; gcc_graph_find(g, name) >= 0; j++)
    snprintf(name, sizeof name, "%s_%d", base, j);
  gcc_shape one = {0, {0}};
  int ev, t1, t2, t3, t4, t5, node, xi;
  GCC_TRY(gcc_graph_add_value(g, name, GCC_DT_FLOAT32, &one, GCC_VALUE_CONST, &eps, sizeof eps, &ev,
                              d));
  GCC_TRY(in_ir(c, 0, &xi, d));
  int a1[2] = {p[3], ev};
  GCC_TRY(emit(c, GCC_OP_ADD, a1, 2, -1, F32, &cs, &t1, &node, d));
  GCC_TRY(emit(c, GCC_OP_SQRT, &t1, 1, -1, F32, &cs, &t2, &node, d));
  int a2[2] = {p[0], t2};
  GCC_TRY(emit(c, GCC_OP_DIV, a2, 2, -1, F32, &cs, &t3, &node, d));
  int a3[2] = {xi, p[2]};
  GCC_TRY(emit(c, GCC_OP_SUB, a3, 2, -1, F32, x, &t4, &node, d));
  int a4[2] = {t4, t3};
  GCC_TRY(emit(c, GCC_OP_MUL, a4, 2, -1, F32, x, &t5, &node, d));
  int a5[2] = {t5, p[1]};
  return emit(c, GCC_OP_ADD, a5, 2, 0, F32, x, NULL, &node, d);
}

/* BatchNormalization for training (gcc_onnx_options.train): the IR op, its
 * running mean and var (initializers) as state values. */
static gcc_status batchnorm_train(nctx *c, float eps, gcc_diag *d) {
  float momentum;
  GCC_TRY(a_float(c, "momentum", 0.9f, &momentum, d));
  if (!(momentum >= 0.0f && momentum <= 1.0f))
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "momentum %g is outside [0, 1]", (double)momentum);
  GCC_TRY(unused_outputs(c, 1, "running or saved statistics (training mode)", d));
  const tshape *x = in_sh(c, 0);
  char a[128];
  if (x->ndim < 2 || x->d[1].sym)
    return node_err(c, d, GCC_ERR_SHAPE, "X %s has no channel dim", tshape_str(x, a, sizeof a));
  int ins[5];
  for (int k = 0; k < 5; k++) {
    ival *pv = imp_val(c->I, in_idx(c, k));
    if (k >= 3 && !(pv->is_init && pv->is_const))
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "input %d ('%s', the running %s) must be an initializer to train", k,
                      pv->name, k == 3 ? "mean" : "variance");
    GCC_TRY(in_ir(c, k, &ins[k], d));
  }
  gcc_graph *g = c->I->g;
  for (int k = 3; k < 5; k++) {
    gcc_value *v = &g->values[ins[k]];
    if ((v->kind != GCC_VALUE_PARAM && v->kind != GCC_VALUE_CONST) ||
        imp_val(c->I, in_idx(c, k))->n_uses > 1)
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "the running statistic '%s' is also read by another node", v->name);
    v->kind = GCC_VALUE_PARAM;
    v->state = 1;
  }
  int node;
  GCC_TRY(emit(c, GCC_OP_BATCH_NORM, ins, 5, 0, F32, x, NULL, &node, d));
  if (gcc_node_set_float(g, node, "epsilon", eps) ||
      gcc_node_set_float(g, node, "momentum", momentum))
    return oom(d);
  c->I->rep->n_bn_train++;
  return GCC_OK;
}

/* BatchNormalization, inference form: Y = (X - mean) / sqrt(var + eps) *
 * scale + B per channel (dim 1). Folded into the Conv that produces X when
 * nothing else reads X and the statistics are constants. */
static gcc_status cv_batchnorm(nctx *c, gcc_diag *d) {
  switch (c->ver) {
  case 1:
    GCC_TRY(allow_attrs(c, d, "consumed_inputs", "epsilon", "is_test", "momentum", "spatial",
                        (char *)NULL));
    break;
  case 6:
    GCC_TRY(allow_attrs(c, d, "epsilon", "is_test", "momentum", "spatial", (char *)NULL));
    break;
  case 7: GCC_TRY(allow_attrs(c, d, "epsilon", "momentum", "spatial", (char *)NULL)); break;
  case 9: GCC_TRY(allow_attrs(c, d, "epsilon", "momentum", (char *)NULL)); break;
  default: GCC_TRY(allow_attrs(c, d, "epsilon", "momentum", "training_mode", (char *)NULL));
  }
  GCC_TRY(no_consumed_inputs(c, d));
  GCC_TRY(need_inputs(c, 5, 5, d));
  for (int k = 0; k < 5; k++)
    GCC_TRY(need_float(c, k, d));
  int64_t v;
  if (c->I->train) {
    GCC_TRY(a_int(c, "spatial", 1, &v, d));
    if (!v)
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "spatial = 0 (statistics per element, not per channel) is not supported");
    float eps;
    GCC_TRY(a_float(c, "epsilon", 1e-5f, &eps, d));
    return batchnorm_train(c, eps, d);
  }
  GCC_TRY(a_int(c, "is_test", 0, &v, d));
  if (c->ver <= 6 && !v && n_out(c) > 1)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "is_test = 0 with the running statistics as outputs is training mode; only "
                    "inference is supported");
  GCC_TRY(a_int(c, "spatial", 1, &v, d));
  if (!v)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "spatial = 0 (statistics per element, not per channel) is not supported");
  GCC_TRY(a_int(c, "training_mode", 0, &v, d));
  if (v)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "training_mode = 1 (batch statistics) is not supported; only inference");
  GCC_TRY(unused_outputs(c, 1, "running or saved statistics (training mode)", d));
  float eps;
  GCC_TRY(a_float(c, "epsilon", 1e-5f, &eps, d));
  const tshape *x = in_sh(c, 0);
  char a[128];
  if (x->ndim < 2 || x->d[1].sym)
    return node_err(c, d, GCC_ERR_SHAPE, "X %s has no channel dim", tshape_str(x, a, sizeof a));
  int64_t ch = x->d[1].v;
  const float *p[4];
  static const char *const names[4] = {"scale", "B", "mean", "var"};
  int all_const = 1;
  for (int k = 0; k < 4; k++) {
    ival *pv = imp_val(c->I, in_idx(c, k + 1));
    if (pv->sh.ndim != 1 || pv->sh.d[0].v != ch || pv->sh.d[0].sym)
      return node_err(c, d, GCC_ERR_SHAPE, "%s %s must be [C] = [%" PRId64 "]", names[k],
                      tshape_str(&pv->sh, a, sizeof a), ch);
    all_const &= pv->is_const;
    p[k] = pv->data;
  }
  if (!all_const)
    return batchnorm_runtime(c, eps, d);
  /* s = scale / sqrt(var + eps), t = B - mean * s, in double */
  double *s = malloc((size_t)ch * 2 * sizeof *s);
  if (!s)
    return oom(d);
  GCC_TRY(pool_add(c->I, s, d));
  double *t = s + ch;
  for (int64_t i = 0; i < ch; i++) {
    s[i] = (double)p[0][i] / sqrt((double)p[3][i] + (double)eps);
    t[i] = (double)p[1][i] - (double)p[2][i] * s[i];
  }
  int xi = in_idx(c, 0);
  ival *xv = imp_val(c->I, xi);
  gcc_graph *g = c->I->g;
  if (xv->conv_node >= 0 && xv->n_uses == 1 && !xv->is_output) {
    gcc_node *cn = &g->nodes[xv->conv_node];
    int wv = cn->inputs[1], bv = cn->n_inputs > 2 ? cn->inputs[2] : -1;
    const gcc_value *W = &g->values[wv];
    if ((W->kind == GCC_VALUE_PARAM || W->kind == GCC_VALUE_CONST) && W->data) {
      int64_t per = gcc_shape_numel(&W->shape, NULL) / ch;
      float *nw = malloc((size_t)(per * ch) * sizeof *nw), *nb = malloc((size_t)ch * sizeof *nb);
      if (!nw || !nb) {
        free(nw);
        free(nb);
        return oom(d);
      }
      const float *ow = W->data;
      const float *ob = bv >= 0 ? g->values[bv].data : NULL;
      for (int64_t m = 0; m < ch; m++) {
        for (int64_t j = 0; j < per; j++)
          nw[m * per + j] = (float)((double)ow[m * per + j] * s[m]);
        nb[m] = (float)((ob ? (double)ob[m] : 0.0) * s[m] + t[m]);
      }
      char base[600], wname[620], bname[620];
      snprintf(base, sizeof base, "%s/bn_folded", W->name);
      snprintf(wname, sizeof wname, "%s", base);
      for (int k = 1; gcc_graph_find(g, wname) >= 0; k++)
        snprintf(wname, sizeof wname, "%s_%d", base, k);
      snprintf(base, sizeof base, "%s/bias_bn_folded", g->nodes[xv->conv_node].name);
      snprintf(bname, sizeof bname, "%s", base);
      for (int k = 1; gcc_graph_find(g, bname) >= 0; k++)
        snprintf(bname, sizeof bname, "%s_%d", base, k);
      gcc_shape ws = W->shape, bs = {1, {ch}};
      int nwv, nbv;
      gcc_status st = gcc_graph_add_value(g, wname, GCC_DT_FLOAT32, &ws, GCC_VALUE_PARAM, nw,
                                          (size_t)(per * ch) * sizeof *nw, &nwv, d);
      if (st == GCC_OK)
        st = gcc_graph_add_value(g, bname, GCC_DT_FLOAT32, &bs, GCC_VALUE_PARAM, nb,
                                 (size_t)ch * sizeof *nb, &nbv, d);
      free(nw);
      free(nb);
      GCC_TRY(st);
      cn = &g->nodes[xv->conv_node]; /* adding values does not move nodes, but be safe */
      if (cn->n_inputs < 3) {
        int *ni = realloc(cn->inputs, 3 * sizeof *ni);
        if (!ni)
          return oom(d);
        cn->inputs = ni;
        cn->n_inputs = 3;
      }
      cn->inputs[1] = nwv;
      cn->inputs[2] = nbv;
      set_alias(c, 0, xi);
      c->I->rep->n_bn_folded++;
      mark_folded(c);
      return GCC_OK;
    }
  }
  /* not foldable: Y = X * s + t with s, t of shape [C, 1, ...] */
  tshape cs = {x->ndim - 1, {{ch, 0}}};
  for (int i = 1; i < cs.ndim; i++)
    cs.d[i] = (sdim){1, 0};
  gcc_shape gs = {cs.ndim, {ch}};
  for (int i = 1; i < cs.ndim; i++)
    gs.dims[i] = 1;
  float *sf = malloc((size_t)ch * 2 * sizeof *sf);
  if (!sf)
    return oom(d);
  for (int64_t i = 0; i < ch; i++) {
    sf[i] = (float)s[i];
    sf[ch + i] = (float)t[i];
  }
  int sv = -1, tv = -1;
  char base[600], name[620];
  gcc_status st = GCC_OK;
  for (int k = 0; k < 2 && st == GCC_OK; k++) {
    snprintf(base, sizeof base, "%s/%s", c->ir_name, k ? "shift" : "scale");
    snprintf(name, sizeof name, "%s", base);
    for (int j = 1; gcc_graph_find(g, name) >= 0; j++)
      snprintf(name, sizeof name, "%s_%d", base, j);
    st = gcc_graph_add_value(g, name, GCC_DT_FLOAT32, &gs, GCC_VALUE_CONST, sf + k * ch,
                             (size_t)ch * sizeof *sf, k ? &tv : &sv, d);
  }
  free(sf);
  GCC_TRY(st);
  int xir, scaled, node;
  GCC_TRY(ir_of(c, xi, &xir, d));
  int m1[2] = {xir, sv};
  GCC_TRY(emit(c, GCC_OP_MUL, m1, 2, -1, F32, x, &scaled, &node, d));
  int a1[2] = {scaled, tv};
  return emit(c, GCC_OP_ADD, a1, 2, 0, F32, x, NULL, &node, d);
}

/* ---- softmax ------------------------------------------------------------------- */

static gcc_status softmax_like(nctx *c, int op, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "axis", (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 1, d));
  GCC_TRY(need_float(c, 0, d));
  const tshape *x = in_sh(c, 0);
  int64_t axis;
  GCC_TRY(a_int(c, "axis", c->ver < 13 ? 1 : -1, &axis, d));
  GCC_TRY(norm_axis(c, axis, x->ndim, 0, "axis", &axis, d));
  int xi, node;
  GCC_TRY(in_ir(c, 0, &xi, d));
  if (c->ver >= 13 || axis == x->ndim - 1) {
    /* opset 13: along one axis; before, the input is coerced to 2-D at
     * `axis`, which is the same thing when axis is the last one */
    GCC_TRY(emit(c, op, &xi, 1, 0, F32, x, NULL, &node, d));
    return gcc_node_set_int(c->I->g, node, "axis", axis) ? oom(d) : GCC_OK;
  }
  /* opset < 13: softmax over the flattened dims [axis, rank) */
  tshape lo = {axis, {{0, 0}}}, hi = {x->ndim - (int)axis, {{0, 0}}};
  for (int i = 0; i < x->ndim; i++)
    if (i < axis)
      lo.d[i] = x->d[i];
    else
      hi.d[i - axis] = x->d[i];
  sdim a, b;
  if (!tshape_numel(&lo, &a) || !tshape_numel(&hi, &b) || b.sym)
    return node_err(c, d, GCC_ERR_SHAPE, "cannot coerce the input to 2-D at axis %" PRId64, axis);
  tshape flat = {2, {a, b}};
  int t1, t2;
  GCC_TRY(emit_reshape(c, xi, &flat, -1, F32, &t1, d));
  GCC_TRY(emit(c, op, &t1, 1, -1, F32, &flat, &t2, &node, d));
  if (gcc_node_set_int(c->I->g, node, "axis", 1))
    return oom(d);
  return emit_reshape(c, t2, x, 0, F32, NULL, d);
}

static gcc_status cv_softmax(nctx *c, gcc_diag *d) {
  return softmax_like(c, GCC_OP_SOFTMAX, d);
}
static gcc_status cv_log_softmax(nctx *c, gcc_diag *d) {
  return softmax_like(c, GCC_OP_LOG_SOFTMAX, d);
}

static gcc_status cv_lrn(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "alpha", "beta", "bias", "size", (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 1, d));
  GCC_TRY(need_float(c, 0, d));
  int64_t size;
  float alpha, beta, bias;
  if (!attr(c, "size"))
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "attribute 'size' is missing");
  GCC_TRY(a_int(c, "size", 1, &size, d));
  GCC_TRY(a_float(c, "alpha", 1e-4f, &alpha, d));
  GCC_TRY(a_float(c, "beta", 0.75f, &beta, d));
  GCC_TRY(a_float(c, "bias", 1.0f, &bias, d));
  if (size < 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "size must be >= 1");
  const tshape *x = in_sh(c, 0);
  char a[128];
  for (int i = 1; i < x->ndim; i++)
    if (x->d[i].sym)
      return node_err(c, d, GCC_ERR_SHAPE, "X %s has a batch-dependent dim past dim 0",
                      tshape_str(x, a, sizeof a));
  if (x->ndim < 3)
    return node_err(c, d, GCC_ERR_SHAPE, "X %s must be [N, C, D1, ...]",
                    tshape_str(x, a, sizeof a));
  int xi, node;
  GCC_TRY(in_ir(c, 0, &xi, d));
  GCC_TRY(emit(c, GCC_OP_LRN, &xi, 1, 0, F32, x, NULL, &node, d));
  gcc_graph *g = c->I->g;
  if (gcc_node_set_int(g, node, "size", size) || gcc_node_set_float(g, node, "alpha", alpha) ||
      gcc_node_set_float(g, node, "beta", beta) || gcc_node_set_float(g, node, "bias", bias))
    return oom(d);
  return GCC_OK;
}

/* ---- shape ops ------------------------------------------------------------------ */

static gcc_status cv_flatten(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "axis", (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 1, d));
  const tshape *x = in_sh(c, 0);
  int64_t axis;
  GCC_TRY(a_int(c, "axis", 1, &axis, d));
  if (axis < 0 && c->ver < 11)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "a negative axis needs opset 11");
  GCC_TRY(norm_axis(c, axis, x->ndim, 1, "axis", &axis, d));
  tshape lo = {(int)axis, {{0, 0}}}, hi = {x->ndim - (int)axis, {{0, 0}}};
  for (int i = 0; i < x->ndim; i++)
    if (i < axis)
      lo.d[i] = x->d[i];
    else
      hi.d[i - axis] = x->d[i];
  sdim a, b;
  if (!tshape_numel(&lo, &a) || !tshape_numel(&hi, &b))
    return node_err(c, d, GCC_ERR_SHAPE, "cannot flatten at axis %" PRId64, axis);
  tshape s = {2, {a, b}};
  int xi;
  GCC_TRY(in_ir(c, 0, &xi, d));
  return emit_reshape(c, xi, &s, 0, in_dt(c, 0), NULL, d);
}

/* ONNX Reshape's target: 0 copies the input dim (unless allowzero), -1 is
 * inferred from the element count. */
static gcc_status reshape_target(nctx *c, const tshape *x, const int64_t *t, int64_t n,
                                 int allowzero, tshape *out, gcc_diag *d) {
  char a[128];
  if (n > GCC_MAX_DIMS)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "%" PRId64 " dims (at most %d)", n, GCC_MAX_DIMS);
  out->ndim = (int)n;
  int infer = -1;
  for (int i = 0; i < n; i++) {
    if (t[i] == 0 && !allowzero) {
      if (i >= x->ndim)
        return node_err(c, d, GCC_ERR_SHAPE, "shape entry %d is 0 but the input %s has no dim %d",
                        i, tshape_str(x, a, sizeof a), i);
      out->d[i] = x->d[i];
    } else if (t[i] == -1) {
      if (infer >= 0)
        return node_err(c, d, GCC_ERR_SHAPE, "more than one -1 in the shape");
      infer = i;
      out->d[i] = (sdim){1, 0};
    } else if (t[i] <= 0) {
      return node_err(c, d, t[i] == 0 ? GCC_ERR_UNSUPPORTED : GCC_ERR_SHAPE,
                      "shape entry %d is %" PRId64 "%s", i, t[i],
                      t[i] == 0 ? " with allowzero (zero-size tensors are not supported)" : "");
    } else {
      out->d[i] = (sdim){t[i], 0};
    }
  }
  sdim nx, ny;
  if (!tshape_numel(x, &nx) || !tshape_numel(out, &ny))
    return node_err(c, d, GCC_ERR_SHAPE, "element count overflows");
  if (infer >= 0) {
    if (ny.sym && !nx.sym)
      return node_err(c, d, GCC_ERR_SHAPE, "cannot infer -1 from %s", tshape_str(x, a, sizeof a));
    if (ny.v == 0 || nx.v % ny.v != 0)
      return node_err(c, d, GCC_ERR_SHAPE, "cannot infer -1: %s does not divide",
                      tshape_str(x, a, sizeof a));
    out->d[infer] = (sdim){nx.v / ny.v, nx.sym && !ny.sym};
    if (!tshape_numel(out, &ny))
      return node_err(c, d, GCC_ERR_SHAPE, "element count overflows");
  }
  if (nx.v != ny.v || nx.sym != ny.sym) {
    char b[128];
    return node_err(c, d, GCC_ERR_SHAPE, "cannot reshape %s to %s (element counts differ%s)",
                    tshape_str(x, a, sizeof a), tshape_str(out, b, sizeof b),
                    nx.sym || ny.sym ? " for a symbolic batch N" : "");
  }
  return GCC_OK;
}

static gcc_status cv_reshape(nctx *c, gcc_diag *d) {
  if (c->ver == 1)
    GCC_TRY(allow_attrs(c, d, "shape", "consumed_inputs", (char *)NULL));
  else if (c->ver < 14)
    GCC_TRY(allow_attrs(c, d, (char *)NULL));
  else
    GCC_TRY(allow_attrs(c, d, "allowzero", (char *)NULL));
  GCC_TRY(no_consumed_inputs(c, d));
  GCC_TRY(need_inputs(c, c->ver == 1 ? 1 : 2, c->ver == 1 ? 1 : 2, d));
  const int64_t *t;
  int64_t n;
  if (c->ver == 1) {
    int ni;
    GCC_TRY(a_ints(c, "shape", &t, &ni, d));
    if (ni < 0)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "attribute 'shape' is missing");
    n = ni;
  } else {
    GCC_TRY(const_ints(c, in_idx(c, 1), "shape input", &t, &n, d));
  }
  int64_t allowzero;
  GCC_TRY(a_int(c, "allowzero", 0, &allowzero, d));
  tshape s;
  GCC_TRY(reshape_target(c, in_sh(c, 0), t, n, (int)allowzero, &s, d));
  ival *x = imp_val(c->I, in_idx(c, 0));
  if (x->is_const) { /* a constant reshaped is a constant */
    GCC_TRY(set_const(c, 0, x->onnx_dt, &s, NULL, x->bytes, d));
    ival *o = imp_val(c->I, out_idx(c, 0));
    if (o)
      o->data = x->data, o->trainable = x->trainable;
    mark_folded(c);
    return GCC_OK;
  }
  int xi;
  GCC_TRY(in_ir(c, 0, &xi, d));
  return emit_reshape(c, xi, &s, 0, x->onnx_dt, NULL, d);
}

/* The axes of Squeeze/Unsqueeze: an attribute before opset 13, an input
 * (a constant) from 13. *n = -1 when there are none. */
static gcc_status read_axes(nctx *c, const int64_t **axes, int64_t *n, gcc_diag *d) {
  if (c->ver < 13) {
    GCC_TRY(allow_attrs(c, d, "axes", (char *)NULL));
    GCC_TRY(need_inputs(c, 1, 1, d));
    int ni;
    GCC_TRY(a_ints(c, "axes", axes, &ni, d));
    *n = ni;
    return GCC_OK;
  }
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 2, d));
  *n = -1;
  if (in_idx(c, 1) < 0)
    return GCC_OK;
  return const_ints(c, in_idx(c, 1), "axes input", axes, n, d);
}

/* A reshape of input 0 to `s`: folded for a constant, an IR Reshape else. */
static gcc_status to_shape(nctx *c, const tshape *s, gcc_diag *d) {
  ival *x = imp_val(c->I, in_idx(c, 0));
  if (x->is_const) {
    GCC_TRY(set_const(c, 0, x->onnx_dt, s, NULL, x->bytes, d));
    ival *o = imp_val(c->I, out_idx(c, 0));
    if (o)
      o->data = x->data, o->trainable = x->trainable;
    mark_folded(c);
    return GCC_OK;
  }
  int xi;
  GCC_TRY(in_ir(c, 0, &xi, d));
  return emit_reshape(c, xi, s, 0, x->onnx_dt, NULL, d);
}

static gcc_status cv_squeeze(nctx *c, gcc_diag *d) {
  const int64_t *axes;
  int64_t n;
  GCC_TRY(read_axes(c, &axes, &n, d));
  const tshape *x = in_sh(c, 0);
  int drop[GCC_MAX_DIMS] = {0};
  char a[128];
  if (n < 0) {
    for (int i = 0; i < x->ndim; i++) {
      if (x->d[i].sym)
        return node_err(c, d, GCC_ERR_SHAPE,
                        "Squeeze without axes over %s: whether the symbolic batch dim is 1 is "
                        "not known at import; give the axes",
                        tshape_str(x, a, sizeof a));
      drop[i] = x->d[i].v == 1;
    }
  } else {
    for (int64_t k = 0; k < n; k++) {
      int64_t ax = 0;
      GCC_TRY(norm_axis(c, axes[k], x->ndim, 0, "axis", &ax, d));
      if (c->ver < 11 && axes[k] < 0)
        return node_err(c, d, GCC_ERR_INVALID_GRAPH, "a negative axis needs opset 11");
      if (drop[ax])
        return node_err(c, d, GCC_ERR_INVALID_GRAPH, "axis %" PRId64 " is listed twice", ax);
      if (x->d[ax].sym || x->d[ax].v != 1)
        return node_err(c, d, GCC_ERR_SHAPE, "dim %" PRId64 " of %s is not 1", ax,
                        tshape_str(x, a, sizeof a));
      drop[ax] = 1;
    }
  }
  tshape s = {0, {{0, 0}}};
  for (int i = 0; i < x->ndim; i++)
    if (!drop[i])
      s.d[s.ndim++] = x->d[i];
  return to_shape(c, &s, d);
}

static gcc_status cv_unsqueeze(nctx *c, gcc_diag *d) {
  const int64_t *axes;
  int64_t n;
  GCC_TRY(read_axes(c, &axes, &n, d));
  if (n < 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "needs axes");
  const tshape *x = in_sh(c, 0);
  int64_t rank = x->ndim + n;
  if (rank > GCC_MAX_DIMS)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "the result has %" PRId64 " dims (at most %d)", rank,
                    GCC_MAX_DIMS);
  int one[GCC_MAX_DIMS] = {0};
  for (int64_t k = 0; k < n; k++) {
    int64_t ax = 0;
    if (c->ver < 11 && axes[k] < 0)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "a negative axis needs opset 11");
    GCC_TRY(norm_axis(c, axes[k], (int)rank, 0, "axis", &ax, d));
    if (one[ax])
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "axis %" PRId64 " is listed twice", ax);
    one[ax] = 1;
  }
  tshape s = {(int)rank, {{0, 0}}};
  for (int i = 0, j = 0; i < rank; i++)
    s.d[i] = one[i] ? (sdim){1, 0} : x->d[j++];
  return to_shape(c, &s, d);
}

/* Concat: constants of any dtype are folded (shape computations); the rest
 * is an IR Concat (float). */
static gcc_status cv_concat(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "axis", (char *)NULL));
  int n = n_in(c);
  if (n < 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "needs at least one input");
  if (n > 64)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "%d inputs (at most 64)", n);
  int64_t axis;
  if (c->ver < 4) {
    GCC_TRY(a_int(c, "axis", 1, &axis, d));
  } else {
    if (!attr(c, "axis"))
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "attribute 'axis' is missing");
    GCC_TRY(a_int(c, "axis", 0, &axis, d));
  }
  const tshape *x0 = in_sh(c, 0);
  if (axis < 0 && c->ver < 11)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "a negative axis needs opset 11");
  GCC_TRY(norm_axis(c, axis, x0->ndim, 0, "axis", &axis, d));
  tshape s = *x0;
  s.d[axis].v = 0;
  int all_const = 1, dt = in_dt(c, 0);
  char a[128], b[128];
  for (int k = 0; k < n; k++) {
    if (in_idx(c, k) < 0)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "input %d is empty", k);
    const tshape *xk = in_sh(c, k);
    int ok = xk->ndim == x0->ndim && in_dt(c, k) == dt && xk->d[axis].sym == x0->d[axis].sym;
    for (int i = 0; ok && i < x0->ndim; i++)
      ok = i == axis || (xk->d[i].v == x0->d[i].v && xk->d[i].sym == x0->d[i].sym);
    if (!ok)
      return node_err(c, d, GCC_ERR_SHAPE,
                      "input %d %s does not match input 0 %s but along axis %" PRId64, k,
                      tshape_str(xk, a, sizeof a), tshape_str(x0, b, sizeof b), axis);
    s.d[axis].v += xk->d[axis].v;
    all_const &= imp_val(c->I, in_idx(c, k))->is_const;
  }
  if (all_const) {
    size_t es = onnx_dtype_size(dt);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; i++)
      outer *= s.d[i].v;
    for (int i = (int)axis + 1; i < s.ndim; i++)
      inner *= s.d[i].v;
    size_t bytes = (size_t)(outer * s.d[axis].v * inner) * es;
    uint8_t *data = malloc(bytes ? bytes : 1);
    if (!data)
      return oom(d);
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
      const ival *v = imp_val(c->I, in_idx(c, k));
      int64_t len = v->sh.d[axis].v * inner;
      for (int64_t o = 0; o < outer; o++)
        memcpy(data + (size_t)(o * s.d[axis].v * inner + off) * es,
               (const uint8_t *)v->data + (size_t)(o * len) * es, (size_t)len * es);
      off += len;
    }
    GCC_TRY(set_const(c, 0, dt, &s, data, bytes, d));
    mark_folded(c);
    return GCC_OK;
  }
  int ins[64];
  for (int k = 0; k < n; k++) {
    GCC_TRY(need_computable(c, k, d));
    GCC_TRY(in_ir(c, k, &ins[k], d));
  }
  if (n == 1) {
    set_alias(c, 0, in_idx(c, 0));
    mark_folded(c);
    return GCC_OK;
  }
  int node;
  GCC_TRY(emit(c, GCC_OP_CONCAT, ins, n, 0, dt, &s, NULL, &node, d));
  return gcc_node_set_int(c->I->g, node, "axis", axis) ? oom(d) : GCC_OK;
}

static gcc_status cv_transpose(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "perm", (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 1, d));
  const tshape *x = in_sh(c, 0);
  const int64_t *p;
  int np;
  GCC_TRY(a_ints(c, "perm", &p, &np, d));
  int64_t perm[GCC_MAX_DIMS];
  int seen[GCC_MAX_DIMS] = {0}, identity = 1;
  if (np >= 0 && np != x->ndim)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "perm has %d entries for rank %d", np, x->ndim);
  tshape s = {x->ndim, {{0, 0}}};
  for (int i = 0; i < x->ndim; i++) {
    perm[i] = np >= 0 ? p[i] : x->ndim - 1 - i; /* default: reverse the dims */
    if (perm[i] < 0 || perm[i] >= x->ndim || seen[perm[i]])
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "perm is not a permutation");
    seen[perm[i]] = 1;
    s.d[i] = x->d[perm[i]];
    identity &= perm[i] == i;
  }
  if (identity) {
    set_alias(c, 0, in_idx(c, 0));
    mark_folded(c);
    return GCC_OK;
  }
  GCC_TRY(need_computable(c, 0, d));
  int xi, node;
  GCC_TRY(in_ir(c, 0, &xi, d));
  GCC_TRY(emit(c, GCC_OP_TRANSPOSE, &xi, 1, 0, in_dt(c, 0), &s, NULL, &node, d));
  return gcc_node_set_ints(c->I->g, node, "perm", perm, x->ndim) ? oom(d) : GCC_OK;
}

/* Pad: pads, value and mode are attributes before opset 11; pads and the
 * constant value (optional) inputs from 11, and axes (optional) from 18. */
static gcc_status cv_pad(nctx *c, gcc_diag *d) {
  const tshape *x = in_sh(c, 0);
  int r = x->ndim;
  int64_t pads[2 * GCC_MAX_DIMS] = {0};
  double value = 0.0;
  char mode[32];
  if (c->ver < 11) {
    GCC_TRY(allow_attrs(c, d, c->ver == 1 ? "paddings" : "pads", "mode", "value", (char *)NULL));
    GCC_TRY(need_inputs(c, 1, 1, d));
    const int64_t *p;
    int np;
    GCC_TRY(a_ints(c, c->ver == 1 ? "paddings" : "pads", &p, &np, d));
    if (np != 2 * r)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "pads needs %d entries (2 * rank)", 2 * r);
    memcpy(pads, p, (size_t)np * sizeof *pads);
    float f;
    GCC_TRY(a_float(c, "value", 0.0f, &f, d));
    value = f;
  } else {
    GCC_TRY(allow_attrs(c, d, "mode", (char *)NULL));
    GCC_TRY(need_inputs(c, 2, c->ver >= 18 ? 4 : 3, d));
    const int64_t *p, *axes = NULL;
    int64_t np, nax = r;
    GCC_TRY(const_ints(c, in_idx(c, 1), "pads input", &p, &np, d));
    if (in_idx(c, 2) >= 0)
      GCC_TRY(const_scalar(c, in_idx(c, 2), "constant_value input", &value, d));
    if (in_idx(c, 3) >= 0)
      GCC_TRY(const_ints(c, in_idx(c, 3), "axes input", &axes, &nax, d));
    if (np != 2 * nax)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH,
                      "pads has %" PRId64 " entries for %" PRId64 " axes", np, nax);
    int seen[GCC_MAX_DIMS] = {0};
    for (int64_t k = 0; k < nax; k++) {
      int64_t ax = k;
      if (axes)
        GCC_TRY(norm_axis(c, axes[k], r, 0, "axis", &ax, d));
      if (seen[ax])
        return node_err(c, d, GCC_ERR_INVALID_GRAPH, "axis %" PRId64 " is listed twice", ax);
      seen[ax] = 1;
      pads[ax] = p[k];
      pads[ax + r] = p[k + nax];
    }
  }
  GCC_TRY(a_string(c, "mode", "constant", mode, sizeof mode, d));
  if (strcmp(mode, "constant") != 0 && strcmp(mode, "edge") != 0 && strcmp(mode, "reflect") != 0)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "mode '%s' is not handled (constant, edge, reflect)",
                    mode);
  tshape s = *x;
  char a[128];
  for (int i = 0; i < r; i++) {
    if (x->d[i].sym && (pads[i] || pads[i + r]))
      return node_err(c, d, GCC_ERR_UNSUPPORTED, "padding the batch dim of %s",
                      tshape_str(x, a, sizeof a));
    if (!x->d[i].sym)
      s.d[i].v += pads[i] + pads[i + r];
    if (s.d[i].v <= 0)
      return node_err(c, d, GCC_ERR_SHAPE, "the pads leave dim %d of %s empty", i,
                      tshape_str(x, a, sizeof a));
    if (strcmp(mode, "constant") != 0 &&
        (pads[i] < 0 || pads[i + r] < 0 ||
         (strcmp(mode, "reflect") == 0 && (pads[i] >= x->d[i].v || pads[i + r] >= x->d[i].v))))
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "%s padding of dim %d by %" PRId64 ", %" PRId64 " (pads must be >= 0%s)",
                      mode, i, pads[i], pads[i + r],
                      strcmp(mode, "reflect") == 0 ? " and smaller than the dim" : "");
  }
  GCC_TRY(need_computable(c, 0, d));
  int xi, node;
  GCC_TRY(in_ir(c, 0, &xi, d));
  GCC_TRY(emit(c, GCC_OP_PAD, &xi, 1, 0, in_dt(c, 0), &s, NULL, &node, d));
  gcc_graph *g = c->I->g;
  if (gcc_node_set_ints(g, node, "pads", pads, 2 * r) ||
      gcc_node_set_float(g, node, "value", (float)value) ||
      gcc_node_set_string(g, node, "mode", mode))
    return oom(d);
  return GCC_OK;
}

/* ConvTranspose, 1-D and 2-D: output_shape and auto_pad become pads (ONNX's
 * rule: total = stride (in - 1) + output_padding + (k - 1) dilation + 1 -
 * out; SAME_UPPER puts the odd unit at the end, otherwise at the start). */
static gcc_status cv_conv_transpose(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "auto_pad", "dilations", "group", "kernel_shape", "output_padding",
                      "output_shape", "pads", "strides", (char *)NULL));
  GCC_TRY(need_inputs(c, 2, 3, d));
  for (int k = 0; k < n_in(c); k++)
    if (in_idx(c, k) >= 0)
      GCC_TRY(need_float(c, k, d));
  const tshape *x = in_sh(c, 0), *w = in_sh(c, 1);
  int64_t in[2];
  int nsp;
  char a[128], b[128];
  GCC_TRY(spatial(c, x, "ConvTranspose", in, &nsp, d));
  int64_t group;
  GCC_TRY(a_int(c, "group", 1, &group, d));
  if (w->ndim != x->ndim || tshape_has_sym(w) || group < 1 || w->d[0].v != x->d[1].v ||
      x->d[1].v % group != 0)
    return node_err(c, d, GCC_ERR_SHAPE,
                    "filter W %s does not match X %s (W [C, M / group, k...], group %" PRId64 ")",
                    tshape_str(w, a, sizeof a), tshape_str(x, b, sizeof b), group);
  int64_t m = w->d[1].v * group;
  if (in_idx(c, 2) >= 0) {
    const tshape *bs = in_sh(c, 2);
    if (bs->ndim != 1 || bs->d[0].v != m)
      return node_err(c, d, GCC_ERR_SHAPE, "bias B %s must be [%" PRId64 "]",
                      tshape_str(bs, a, sizeof a), m);
  }
  int64_t k[2], s[2] = {1, 1}, dl[2] = {1, 1}, pb[2] = {0, 0}, pe[2] = {0, 0}, op[2] = {0, 0};
  for (int i = 0; i < nsp; i++)
    k[i] = w->d[2 + i].v;
  const int64_t *v;
  int nv;
#define READ(name, dst, len)                                                                       \
  GCC_TRY(a_ints(c, name, &v, &nv, d));                                                            \
  if (nv >= 0 && nv != (len))                                                                      \
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "%s has %d entries for %d spatial dims", name,    \
                    nv, nsp);                                                                      \
  for (int i = 0; i < nv && nv == (len); i++)                                                      \
    dst[i] = v[i];
  READ("strides", s, nsp);
  READ("dilations", dl, nsp);
  READ("output_padding", op, nsp);
  GCC_TRY(a_ints(c, "kernel_shape", &v, &nv, d));
  for (int i = 0; i < nv; i++)
    if (nv != nsp || v[i] != k[i])
      return node_err(c, d, GCC_ERR_SHAPE, "kernel_shape does not match the filter %s",
                      tshape_str(w, a, sizeof a));
  GCC_TRY(a_ints(c, "pads", &v, &nv, d));
  if (nv >= 0 && nv != 2 * nsp)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "pads has %d entries for %d spatial dims", nv,
                    nsp);
  for (int i = 0; i < nsp && nv > 0; i++) {
    pb[i] = v[i];
    pe[i] = v[i + nsp];
  }
#undef READ
  char ap[32];
  GCC_TRY(a_string(c, "auto_pad", "NOTSET", ap, sizeof ap, d));
  int upper = strcmp(ap, "SAME_UPPER") == 0, lower = strcmp(ap, "SAME_LOWER") == 0;
  if (!upper && !lower && strcmp(ap, "NOTSET") != 0 && strcmp(ap, "VALID") != 0)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "auto_pad '%s' is not handled", ap);
  const int64_t *os;
  int nos;
  GCC_TRY(a_ints(c, "output_shape", &os, &nos, d));
  if (nos >= 0 && nos != nsp && nos != nsp + 2)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "output_shape has %d entries", nos);
  for (int i = 0; i < nsp; i++) {
    if (s[i] < 1 || dl[i] < 1)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "strides and dilations must be >= 1");
    int64_t want = -1;
    if (nos >= 0)
      want = os[nos - nsp + i];
    else if (upper || lower)
      want = in[i] * s[i];
    if (strcmp(ap, "VALID") == 0)
      pb[i] = pe[i] = 0;
    if (want >= 0) {
      int64_t total = s[i] * (in[i] - 1) + op[i] + (k[i] - 1) * dl[i] + 1 - want;
      if (total < 0) { /* a larger output than the window reaches: output padding */
        op[i] -= total;
        total = 0;
      }
      if (upper) {
        pb[i] = total / 2;
        pe[i] = total - total / 2;
      } else {
        pb[i] = total - total / 2;
        pe[i] = total / 2;
      }
    }
  }
  tshape out = {x->ndim, {x->d[0], {m, 0}}};
  for (int i = 0; i < nsp; i++) {
    int64_t o = s[i] * (in[i] - 1) + op[i] + (k[i] - 1) * dl[i] + 1 - pb[i] - pe[i];
    if (o <= 0 || pb[i] < 0 || pe[i] < 0 || op[i] < 0)
      return node_err(c, d, GCC_ERR_SHAPE, "the pads leave no output");
    out.d[2 + i] = (sdim){o, 0};
  }
  int ins[3] = {-1, -1, -1}, n = in_idx(c, 2) >= 0 ? 3 : 2, node;
  GCC_TRY(as_4d(c, 0, nsp, &ins[0], d));
  GCC_TRY(as_4d(c, 1, nsp, &ins[1], d));
  if (n == 3)
    GCC_TRY(in_ir(c, 2, &ins[2], d));
  /* cuDNN takes one pad per dim: with asymmetric pads the transposed
   * convolution runs with the smaller pad on both sides and the surplus
   * is cropped (a Pad with negative pads) */
  int asym = 0;
  int64_t sym[2] = {pb[0], pb[1]}, crop[8] = {0};
  int off = nsp == 1 ? 1 : 0;
  for (int i = 0; i < nsp; i++)
    if (pb[i] != pe[i]) {
      asym = 1;
      sym[i] = pb[i] < pe[i] ? pb[i] : pe[i];
      crop[2 + off + i] = -(pb[i] - sym[i]);
      crop[6 + off + i] = -(pe[i] - sym[i]);
    }
  window win = {nsp,   {k[0], k[1]}, {s[0], s[1]}, {dl[0], dl[1]}, {pb[0], pb[1]}, {pe[0], pe[1]},
                {0, 0}};
  if (asym) {
    tshape full = {4, {x->d[0], {m, 0}, {1, 0}, {1, 0}}}, cropped;
    for (int i = 0; i < nsp; i++) {
      win.pb[i] = win.pe[i] = sym[i];
      full.d[2 + off + i] =
          (sdim){s[i] * (in[i] - 1) + op[i] + (k[i] - 1) * dl[i] + 1 - 2 * sym[i], 0};
    }
    int tmp;
    GCC_TRY(emit(c, GCC_OP_CONV_TRANSPOSE, ins, n, -1, F32, &full, &tmp, &node, d));
    GCC_TRY(set_window_attrs(c->I->g, node, &win, 1, d));
    int64_t op4[2] = {nsp == 1 ? 0 : op[0], nsp == 1 ? op[0] : op[1]};
    if (gcc_node_set_int(c->I->g, node, "group", group) ||
        gcc_node_set_ints(c->I->g, node, "output_padding", op4, 2))
      return oom(d);
    if (nsp == 2) {
      int pnode;
      GCC_TRY(emit(c, GCC_OP_PAD, &tmp, 1, 0, F32, &out, NULL, &pnode, d));
      return gcc_node_set_ints(c->I->g, pnode, "pads", crop, 8) ? oom(d) : GCC_OK;
    }
    int cr;
    GCC_TRY(emit_pad4(c, tmp, &full, crop, 0.0f, &cr, &cropped, d));
    return emit_reshape(c, cr, &out, 0, F32, NULL, d);
  }
  GCC_TRY(emit_window_op(c, GCC_OP_CONV_TRANSPOSE, ins, n, nsp, &out, &node, d));
  GCC_TRY(set_window_attrs(c->I->g, node, &win, 1, d));
  int64_t op4[2] = {nsp == 1 ? 0 : op[0], nsp == 1 ? op[0] : op[1]};
  if (gcc_node_set_int(c->I->g, node, "group", group) ||
      gcc_node_set_ints(c->I->g, node, "output_padding", op4, 2))
    return oom(d);
  return GCC_OK;
}

/* ---- the table ---------------------------------------------------------------- */

/* Alphabetical. versions: ONNX's since_version history of the op up to
 * opset 21 (onnx.defs.get_all_schemas_with_history). */
static const onnx_op_map kOnnxOps[] = {
    {"Add", {1, 6, 7, 13, 14}, cv_add, "Add"},
    {"AveragePool",
     {1, 7, 10, 11, 19},
     cv_avgpool,
     "AveragePool (Pad + AveragePool + Mul for ceil_mode)"},
    {"BatchNormalization", {1, 6, 7, 9, 14, 15}, cv_batchnorm, "folded into Conv, or Mul + Add"},
    {"Clip", {1, 6, 11, 12, 13}, cv_clip, "Clip"},
    {"Concat", {1, 4, 11, 13}, cv_concat, "Concat (folded for constants)"},
    {"Constant", {1, 9, 11, 12, 13, 19, 21}, cv_constant, "folded"},
    {"ConstantOfShape", {9, 20, 21}, cv_constant_of_shape, "folded"},
    {"Conv", {1, 11}, cv_conv, "Conv"},
    {"ConvTranspose", {1, 11}, cv_conv_transpose, "ConvTranspose"},
    {"Div", {1, 6, 7, 13, 14}, cv_div, "Div"},
    {"Dropout", {1, 6, 7, 10, 12, 13}, cv_dropout, "folded (identity)"},
    {"Flatten", {1, 9, 11, 13, 21}, cv_flatten, "Reshape"},
    {"Gemm", {1, 6, 7, 9, 11, 13}, cv_gemm, "Gemm"},
    {"GlobalAveragePool", {1}, cv_global_avgpool, "AveragePool"},
    {"GlobalMaxPool", {1}, cv_global_maxpool, "MaxPool"},
    {"Identity", {1, 13, 14, 16, 19, 21}, cv_identity, "folded"},
    {"LRN", {1, 13}, cv_lrn, "LRN"},
    {"LeakyRelu", {1, 6, 16}, cv_leaky_relu, "LeakyRelu"},
    {"LogSoftmax", {1, 11, 13}, cv_log_softmax, "LogSoftmax"},
    {"MatMul", {1, 9, 13}, cv_matmul, "MatMul"},
    {"MaxPool", {1, 8, 10, 11, 12}, cv_maxpool, "MaxPool (Pad + MaxPool for ceil_mode)"},
    {"Mul", {1, 6, 7, 13, 14}, cv_mul, "Mul"},
    {"Pad", {1, 2, 11, 13, 18, 19, 21}, cv_pad, "Pad"},
    {"Relu", {1, 6, 13, 14}, cv_relu, "Relu"},
    {"Reshape", {1, 5, 13, 14, 19, 21}, cv_reshape, "Reshape"},
    {"Sigmoid", {1, 6, 13}, cv_sigmoid, "Sigmoid"},
    {"Softmax", {1, 11, 13}, cv_softmax, "Softmax"},
    {"Sqrt", {1, 6, 13}, cv_sqrt, "Sqrt"},
    {"Squeeze", {1, 11, 13, 21}, cv_squeeze, "Reshape"},
    {"Sub", {1, 6, 7, 13, 14}, cv_sub, "Sub"},
    {"Sum", {1, 6, 8, 13}, cv_sum, "Add"},
    {"Tanh", {1, 6, 13}, cv_tanh, "Tanh"},
    {"Transpose", {1, 13, 21}, cv_transpose, "Transpose"},
    {"Unsqueeze", {1, 11, 13, 21}, cv_unsqueeze, "Reshape"},
};

const onnx_op_map *onnx_op_find(const char *op_type) {
  for (size_t i = 0; i < sizeof kOnnxOps / sizeof kOnnxOps[0]; i++)
    if (strcmp(kOnnxOps[i].op_type, op_type) == 0)
      return &kOnnxOps[i];
  return NULL;
}

int onnx_op_count(void) {
  return (int)(sizeof kOnnxOps / sizeof kOnnxOps[0]);
}

const onnx_op_map *onnx_op_at(int i) {
  return &kOnnxOps[i];
}
