/*
 * import_ops_elementwise.c - ONNX -> gcc IR converters of the folded ops (Constant,
 * ConstantOfShape, Identity, Dropout) and the elementwise ops (Relu, Add, Sub,
 * Mul, Div, Sigmoid, Tanh, Sqrt, LeakyRelu, Clip, Sum). See onnx/import_ops.c.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/loader.h"
#include "graph/ops.h"
#include "onnx/import_ops_internal.h"

/* ---- folded ops -------------------------------------------------------------------- */

gcc_status cv_constant(nctx *c, gcc_diag *d) {
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

/* ConstantOfShape whose shape holds the batch N (a shape value, onnx/
 * import_ops_shapecalc.c): the fill value broadcast by an IR Expand whose
 * batch dim comes from a graph input (graph/ops.h GCC_OP_EXPAND: a shape
 * entry 0 is input 1's dim 0). An entry k * N with k != 1 is refused. */
static gcc_status fill_batch_shape(nctx *c, const sdim *t, int64_t nd, int dt, const void *fill,
                                   gcc_diag *d) {
  tshape s = {(int)nd, {{0, 0}}};
  int64_t ir_shape[GCC_MAX_DIMS];
  gcc_shape one = {(int)nd, {0}};
  for (int i = 0; i < nd; i++) {
    one.dims[i] = 1;
    if (t[i].sym && t[i].v != 1)
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "shape entry %d is %" PRId64 " x the batch size (only the batch size "
                      "itself is supported)",
                      i, t[i].v);
    if (!t[i].sym && (t[i].v < 1 || t[i].v > ((int64_t)1 << 40)))
      return node_err(c, d, GCC_ERR_UNSUPPORTED, "shape entry %d is %" PRId64, i, t[i].v);
    s.d[i] = t[i];
    ir_shape[i] = t[i].sym ? 0 : t[i].v;
  }
  int batch_from = -1; /* a graph input whose dim 0 is the symbolic batch */
  for (int i = 0; i < c->I->n_v && batch_from < 0; i++)
    if (c->I->v[i].is_input && c->I->v[i].sh.ndim > 0 && c->I->v[i].sh.d[0].sym &&
        c->I->v[i].sh.d[0].v == 1)
      batch_from = i;
  gcc_dtype gdt = onnx_to_gcc_dtype(dt);
  if (batch_from < 0 || gdt == GCC_DT_UNDEFINED)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    batch_from < 0 ? "a shape with the batch size but no graph input has it"
                                   : "a value of dtype %s (float, int64, int32, bool)",
                    onnx_dtype_name(dt));
  char name[300];
  snprintf(name, sizeof name, "%s/value", c->ir_name);
  for (int k = 1; gcc_graph_find(c->I->g, name) >= 0; k++)
    snprintf(name, sizeof name, "%s/value_%d", c->ir_name, k);
  int ins[2], node;
  GCC_TRY(gcc_graph_add_value(c->I->g, name, gdt, &one, GCC_VALUE_CONST, fill, onnx_dtype_size(dt),
                              &ins[0], d));
  GCC_TRY(ir_of(c, batch_from, &ins[1], d));
  GCC_TRY(emit(c, GCC_OP_EXPAND, ins, 2, 0, dt, &s, NULL, &node, d));
  return gcc_node_set_ints(c->I->g, node, "shape", ir_shape, (int)nd) ? oom(d) : GCC_OK;
}

/* ConstantOfShape (9, 20, 21): the shape a constant or a shape value
 * computed at import; folded to a constant unless the shape holds the
 * batch (fill_batch_shape). */
gcc_status cv_constant_of_shape(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "value", (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 1, d));
  const sdim *sd;
  int64_t nd;
  if (has_symv(c, 0)) {
    GCC_TRY(sym_in(c, 0, &sd, &nd, d));
  } else {
    const int64_t *dims;
    GCC_TRY(const_ints(c, in_idx(c, 0), "shape input", &dims, &nd, d));
    sdim *t = malloc((size_t)(nd > 0 ? nd : 1) * sizeof *t);
    if (!t)
      return oom(d);
    GCC_TRY(pool_add(c->I, t, d));
    for (int64_t i = 0; i < nd; i++)
      t[i] = (sdim){dims[i], 0};
    sd = t;
  }
  if (nd > GCC_MAX_DIMS)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "%" PRId64 " dims (at most %d)", nd, GCC_MAX_DIMS);
  int batch = 0;
  tshape s = {(int)nd, {{0, 0}}};
  uint64_t numel = 1;
  for (int i = 0; i < nd; i++) {
    batch |= sd[i].sym;
    if (sd[i].sym)
      continue;
    if (sd[i].v < 0 || sd[i].v > ((int64_t)1 << 40))
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "shape entry %d is %" PRId64, i, sd[i].v);
    s.d[i] = (sdim){sd[i].v, 0};
    numel *= (uint64_t)sd[i].v;
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
  if (batch)
    return fill_batch_shape(c, sd, nd, dt, fill, d);
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

gcc_status cv_identity(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  GCC_TRY(need_inputs(c, 1, 1, d));
  set_alias(c, 0, in_idx(c, 0));
  mark_folded(c);
  return GCC_OK;
}

/* Dropout. Imported for training (gcc_onnx_options.train) it is the IR
 * Dropout (torch.nn.Dropout: inverted dropout with the ratio in training,
 * the identity in evaluation); otherwise it is folded away as the identity
 * (ONNX: "If training_mode is false, the output is the input"). Which of
 * the two is decided by the import, not by the export's mode: exports made
 * with TrainingMode.TRAINING (training_mode = true), PRESERVE or EVAL (no
 * training_mode, or no Dropout at all) and opset 1-6's is_test all import
 * alike. The ratio (attribute before opset 12, an input from 12) must be a
 * constant in [0, 1]; the mask output must be unused. */
gcc_status cv_dropout(nctx *c, gcc_diag *d) {
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
    if (is_test != 0 && is_test != 1)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "is_test %" PRId64 " is not 0 or 1", is_test);
  }
  if (c->ver >= 12 && in_idx(c, 2) >= 0) {
    double tm; /* the export's mode: what decides is the import's */
    GCC_TRY(const_scalar(c, in_idx(c, 2), "training_mode input", &tm, d));
  }
  GCC_TRY(unused_outputs(c, 1, "mask", d));
  if (!c->I->train) { /* the ratio does not matter */
    set_alias(c, 0, in_idx(c, 0));
    mark_folded(c);
    return GCC_OK;
  }
  float ratio = 0.5f;
  if (c->ver < 12) {
    GCC_TRY(a_float(c, "ratio", 0.5f, &ratio, d));
  } else if (in_idx(c, 1) >= 0) {
    double r;
    GCC_TRY(const_scalar(c, in_idx(c, 1), "ratio input", &r, d));
    ratio = (float)r;
  }
  if (!(ratio >= 0.0f && ratio <= 1.0f))
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "ratio %g is outside [0, 1]", (double)ratio);
  GCC_TRY(need_float(c, 0, d));
  int64_t seed;
  GCC_TRY(a_int(c, "seed", 0, &seed, d));
  int x, node;
  GCC_TRY(in_ir(c, 0, &x, d));
  GCC_TRY(emit(c, GCC_OP_DROPOUT, &x, 1, 0, F32, in_sh(c, 0), NULL, &node, d));
  if (gcc_node_set_float(c->I->g, node, "ratio", ratio) ||
      (seed && gcc_node_set_int(c->I->g, node, "seed", seed)))
    return oom(d);
  return GCC_OK;
}

/* ---- elementwise ------------------------------------------------------------------- */

gcc_status no_consumed_inputs(nctx *c, gcc_diag *d) {
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

gcc_status cv_relu(nctx *c, gcc_diag *d) {
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

gcc_status cv_add(nctx *c, gcc_diag *d) {
  if (has_aff(c, 0) || has_aff(c, 1)) /* as_strided's indices over N */
    return aff_arith(c, '+', d);
  if (sym_arith_applies(c)) /* shape arithmetic: folded */
    return sym_arith(c, '+', d);
  if (c->ver >= 7 && fold_f32_applies(c)) /* float constants: folded */
    return fold_f32(c, '+', d);
  return binary(c, GCC_OP_ADD, d);
}
gcc_status cv_sub(nctx *c, gcc_diag *d) {
  if (sym_arith_applies(c)) /* shape arithmetic: folded */
    return sym_arith(c, '-', d);
  if (c->ver >= 7 && fold_f32_applies(c)) /* float constants: folded */
    return fold_f32(c, '-', d);
  return binary(c, GCC_OP_SUB, d);
}
gcc_status cv_mul(nctx *c, gcc_diag *d) {
  if (has_aff(c, 0) || has_aff(c, 1)) /* as_strided's indices over N */
    return aff_arith(c, '*', d);
  if (sym_arith_applies(c)) /* shape arithmetic: folded */
    return sym_arith(c, '*', d);
  if (c->ver >= 7 && fold_f32_applies(c)) /* float constants: folded */
    return fold_f32(c, '*', d);
  int x, tanh_form;
  if (onnx_gelu_pattern(c, &x, &tanh_form))
    return cv_gelu_pattern(c, x, tanh_form, d);
  return binary(c, GCC_OP_MUL, d);
}
gcc_status cv_div(nctx *c, gcc_diag *d) {
  if (sym_arith_applies(c)) /* shape arithmetic: folded */
    return sym_arith(c, '/', d);
  if (c->ver >= 7 && fold_f32_applies(c)) /* float constants: folded */
    return fold_f32(c, '/', d);
  return binary(c, GCC_OP_DIV, d);
}
/* Pow: float base and exponent. An int64 / int32 constant exponent (x^3
 * as some exporters write it) is converted to float (exactly, below 2^24);
 * other integer operands are refused naming the dtype. */
gcc_status cv_pow(nctx *c, gcc_diag *d) {
  GCC_TRY(need_inputs(c, 2, 2, d));
  GCC_TRY(need_float(c, 0, d));
  ival *e = imp_val(c->I, in_idx(c, 1));
  int64_t n = tshape_static_numel(&e->sh);
  if (c->ver >= 7 && e->is_const && e->data && n >= 0 &&
      (e->onnx_dt == I64 || e->onnx_dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT32)) {
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    if (!f)
      return oom(d);
    int wide = e->onnx_dt == I64, exact = 1;
    for (int64_t i = 0; i < n; i++) {
      int64_t v = wide ? ((const int64_t *)e->data)[i] : ((const int32_t *)e->data)[i];
      exact &= v >= -(1 << 24) && v <= (1 << 24);
      f[i] = (float)v;
    }
    if (!exact) {
      free(f);
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "the integer exponent is not exactly a float32 (|B| > 2^24)");
    }
    gcc_shape gs = {e->sh.ndim, {0}};
    for (int i = 0; i < e->sh.ndim; i++)
      gs.dims[i] = e->sh.d[i].v;
    char name[620];
    snprintf(name, sizeof name, "%s/exponent", c->ir_name);
    for (int k = 1; gcc_graph_find(c->I->g, name) >= 0; k++)
      snprintf(name, sizeof name, "%s/exponent_%d", c->ir_name, k);
    int ins[2], node;
    gcc_status st = gcc_graph_add_value(c->I->g, name, GCC_DT_FLOAT32, &gs, GCC_VALUE_CONST, f,
                                        (size_t)n * sizeof *f, &ins[1], d);
    free(f);
    GCC_TRY(st);
    GCC_TRY(allow_attrs(c, d, (char *)NULL));
    GCC_TRY(in_ir(c, 0, &ins[0], d));
    tshape s;
    if (!tshape_broadcast(in_sh(c, 0), &e->sh, &s))
      return node_err(c, d, GCC_ERR_SHAPE, "operands do not broadcast");
    return emit(c, GCC_OP_POW, ins, 2, 0, F32, &s, NULL, &node, d);
  }
  GCC_TRY(need_float(c, 1, d));
  return binary(c, GCC_OP_POW, d);
}

gcc_status cv_sigmoid(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, c->ver == 1 ? "consumed_inputs" : NULL, (char *)NULL));
  GCC_TRY(no_consumed_inputs(c, d));
  return unary(c, GCC_OP_SIGMOID, d);
}

gcc_status cv_tanh(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, c->ver == 1 ? "consumed_inputs" : NULL, (char *)NULL));
  GCC_TRY(no_consumed_inputs(c, d));
  return unary(c, GCC_OP_TANH, d);
}

gcc_status cv_sqrt(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, c->ver == 1 ? "consumed_inputs" : NULL, (char *)NULL));
  GCC_TRY(no_consumed_inputs(c, d));
  if (fold_f32_applies(c)) /* a float constant: folded */
    return fold_f32(c, 'q', d);
  return unary(c, GCC_OP_SQRT, d);
}

gcc_status cv_leaky_relu(nctx *c, gcc_diag *d) {
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
gcc_status cv_clip(nctx *c, gcc_diag *d) {
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
/* Sum, Max, Min: any number of float inputs (opset 8 on: broadcast), a
 * chain of the binary op from the left; one input is an alias of it. */
static gcc_status variadic(nctx *c, int op, gcc_diag *d) {
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
    GCC_TRY(emit(c, op, ins, 2, k == n - 1 ? 0 : -1, F32, &r, &acc, &node, d));
    s = r;
  }
  return GCC_OK;
}

gcc_status cv_sum(nctx *c, gcc_diag *d) {
  return variadic(c, GCC_OP_ADD, d);
}
/* Max, Min of several inputs: the binary ops chained from the left, so a
 * tie of more than two inputs shares the gradient as the chain of
 * torch.maximum calls does (1/2 at each tied step). */
gcc_status cv_max(nctx *c, gcc_diag *d) {
  if (fold_int_applies(c)) /* integer constants and shapes: folded */
    return fold_int_minmax(c, 1, d);
  return variadic(c, GCC_OP_MAX, d);
}
gcc_status cv_min(nctx *c, gcc_diag *d) {
  if (fold_int_applies(c)) /* integer constants and shapes: folded */
    return fold_int_minmax(c, 0, d);
  return variadic(c, GCC_OP_MIN, d);
}

/* A float32 scalar constant of the IR, named "<node>/<what>" (made unique). */
static gcc_status scalar_const(nctx *c, const char *what, float value, int *v, gcc_diag *d) {
  gcc_graph *g = c->I->g;
  char base[600], name[620];
  snprintf(base, sizeof base, "%s/%s", c->ir_name, what);
  snprintf(name, sizeof name, "%s", base);
  for (int k = 1; gcc_graph_find(g, name) >= 0; k++)
    snprintf(name, sizeof name, "%s_%d", base, k);
  gcc_shape scalar = {0, {0}};
  return gcc_graph_add_value(g, name, GCC_DT_FLOAT32, &scalar, GCC_VALUE_CONST, &value,
                             sizeof value, v, d);
}

/* max(0, min(1, alpha x + beta)) as Clip(Add(Mul(x, alpha), beta), 0, 1)
 * into output 0 (`x_times`: then multiplied by x, HardSwish). */
static gcc_status hard_sigmoid_of(nctx *c, float alpha, float beta, int x_times, gcc_diag *d) {
  GCC_TRY(need_inputs(c, 1, 1, d));
  GCC_TRY(need_float(c, 0, d));
  const tshape *s = in_sh(c, 0);
  int x, av, bv, t1, t2, t3, node;
  GCC_TRY(in_ir(c, 0, &x, d));
  GCC_TRY(scalar_const(c, "alpha", alpha, &av, d));
  GCC_TRY(scalar_const(c, "beta", beta, &bv, d));
  int m[2] = {x, av};
  GCC_TRY(emit(c, GCC_OP_MUL, m, 2, -1, F32, s, &t1, &node, d));
  int a[2] = {t1, bv};
  GCC_TRY(emit(c, GCC_OP_ADD, a, 2, -1, F32, s, &t2, &node, d));
  GCC_TRY(emit(c, GCC_OP_CLIP, &t2, 1, x_times ? -1 : 0, F32, s, &t3, &node, d));
  if (gcc_node_set_float(c->I->g, node, "min", 0.0f) ||
      gcc_node_set_float(c->I->g, node, "max", 1.0f))
    return oom(d);
  if (!x_times)
    return GCC_OK;
  int p[2] = {x, t3};
  return emit(c, GCC_OP_MUL, p, 2, 0, F32, s, NULL, &node, d);
}

/* HardSigmoid (alpha default 0.2, beta 0.5; nn.Hardsigmoid exports 1/6, 0.5). */
gcc_status cv_hard_sigmoid(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "alpha", "beta", c->ver == 1 ? "consumed_inputs" : NULL, (char *)NULL));
  GCC_TRY(no_consumed_inputs(c, d));
  float alpha, beta;
  GCC_TRY(a_float(c, "alpha", 0.2f, &alpha, d));
  GCC_TRY(a_float(c, "beta", 0.5f, &beta, d));
  return hard_sigmoid_of(c, alpha, beta, 0, d);
}

/* HardSwish: x max(0, min(1, x / 6 + 1 / 2)) (nn.Hardswish). */
gcc_status cv_hard_swish(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, (char *)NULL));
  return hard_sigmoid_of(c, 1.0f / 6.0f, 0.5f, 1, d);
}
