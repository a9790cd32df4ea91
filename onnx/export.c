/*
 * export.c - an inference graph as an ONNX ModelProto (onnx/export.h).
 *
 * The graph is cloned twice and each clone bound to a batch (1 and 2) and
 * shape-inferred: the first gives every node its resolved attributes
 * (gcc_node.av, defaults filled in) and every value a shape, the second
 * tells which dims of the outputs follow the batch. The ModelProto is then
 * built from protobuf-c structs held in a pool (initializers point at the
 * clone's tensor bytes, not copies) and packed once.
 */
#include "onnx/export.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "graph/outfile.h"
#include "onnx/onnx.pb-c.h"

/* ---- the state of one export ------------------------------------------- */

typedef struct ex {
  const gcc_graph *src; /* the graph given (its inputs keep the symbolic batch) */
  gcc_graph *g;         /* clone at batch 1: resolved attributes, shapes */
  gcc_graph *g2;        /* clone at batch 2: which output dims follow the batch */
  void **pool;          /* every allocation below, freed at the end */
  int n_pool, cap_pool;
  char *emitted; /* per value of g: its initializer is written */
  Onnx__NodeProto **nodes;
  size_t n_nodes;
  Onnx__TensorProto **inits;
  size_t n_inits, cap_inits;
  char **made; /* names of the constants the export adds */
  int n_made, cap_made;
  char desc[512]; /* the node being written, for messages */
  int opset;      /* above GCC_ONNX_EXPORT_OPSET when a node's ONNX op needs it (Gelu: 20) */
} ex;

static gcc_status oom(gcc_diag *d) {
  return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (ONNX export)");
}

static void *ex_alloc(ex *E, size_t n) {
  if (E->n_pool == E->cap_pool) {
    int cap = E->cap_pool ? 2 * E->cap_pool : 256;
    void **p = realloc(E->pool, (size_t)cap * sizeof *p);
    if (!p)
      return NULL;
    E->pool = p;
    E->cap_pool = cap;
  }
  void *m = calloc(1, n ? n : 1);
  if (m)
    E->pool[E->n_pool++] = m;
  return m;
}

static char *ex_str(ex *E, const char *s) {
  size_t n = strlen(s) + 1;
  char *c = ex_alloc(E, n);
  if (c)
    memcpy(c, s, n);
  return c;
}

static void ex_free(ex *E) {
  for (int i = 0; i < E->n_pool; i++)
    free(E->pool[i]);
  free(E->pool);
  free(E->emitted);
  free(E->nodes);
  free(E->inits);
  free(E->made);
  gcc_graph_free(E->g);
  gcc_graph_free(E->g2);
}

/* ONNX TensorProto.DataType of an IR dtype, 0 when ONNX has none. */
static int onnx_dtype_of(gcc_dtype t) {
  static const int k[GCC_DT_COUNT] = {
      [GCC_DT_FLOAT32] = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT,
      [GCC_DT_INT64] = ONNX__TENSOR_PROTO__DATA_TYPE__INT64,
      [GCC_DT_INT32] = ONNX__TENSOR_PROTO__DATA_TYPE__INT32,
      [GCC_DT_FLOAT16] = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16,
      [GCC_DT_BFLOAT16] = ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16,
      [GCC_DT_FLOAT64] = ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE,
      [GCC_DT_UINT8] = ONNX__TENSOR_PROTO__DATA_TYPE__UINT8,
      [GCC_DT_BOOL] = ONNX__TENSOR_PROTO__DATA_TYPE__BOOL,
  };
  return t > GCC_DT_UNDEFINED && t < GCC_DT_COUNT ? k[t] : 0;
}

static gcc_status dtype_err(ex *E, const gcc_value *v, gcc_diag *d) {
  return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                      "%s: value '%s' is %s, which ONNX export does not write", E->src->source,
                      v->name, gcc_dtype_name(v->dtype));
}

/* A name no value of the graph and no constant made so far has: base,
 * base_1, base_2, ... */
static char *unique_name(ex *E, const char *base) {
  char buf[512];
  for (int k = 0;; k++) {
    if (k == 0)
      snprintf(buf, sizeof buf, "%s", base);
    else
      snprintf(buf, sizeof buf, "%s_%d", base, k);
    int taken = gcc_graph_find(E->g, buf) >= 0;
    for (int i = 0; i < E->n_made && !taken; i++)
      taken = strcmp(E->made[i], buf) == 0;
    if (taken)
      continue;
    if (E->n_made == E->cap_made) {
      int cap = E->cap_made ? 2 * E->cap_made : 16;
      char **m = realloc(E->made, (size_t)cap * sizeof *m);
      if (!m)
        return NULL;
      E->made = m;
      E->cap_made = cap;
    }
    char *s = ex_str(E, buf);
    if (s)
      E->made[E->n_made++] = s;
    return s;
  }
}

static gcc_status add_init(ex *E, Onnx__TensorProto *t, gcc_diag *d) {
  if (E->n_inits == E->cap_inits) {
    size_t cap = E->cap_inits ? 2 * E->cap_inits : 64;
    Onnx__TensorProto **p = realloc(E->inits, cap * sizeof *p);
    if (!p)
      return oom(d);
    E->inits = p;
    E->cap_inits = cap;
  }
  E->inits[E->n_inits++] = t;
  return GCC_OK;
}

/* A TensorProto named `name` of ONNX type `onnx_dt` and dims, whose
 * raw_data points at `data` (not copied: it must outlive the packing). */
static Onnx__TensorProto *tensor(ex *E, const char *name, int onnx_dt, const int64_t *dims,
                                 int ndim, const void *data, size_t bytes) {
  Onnx__TensorProto *t = ex_alloc(E, sizeof *t);
  int64_t *dv = ex_alloc(E, (size_t)(ndim ? ndim : 1) * sizeof *dv);
  if (!t || !dv)
    return NULL;
  onnx__tensor_proto__init(t);
  t->name = (char *)name;
  t->has_data_type = 1;
  t->data_type = onnx_dt;
  if (ndim > 0)
    memcpy(dv, dims, (size_t)ndim * sizeof *dv);
  t->n_dims = (size_t)ndim;
  t->dims = dv;
  t->has_raw_data = 1;
  t->raw_data.len = bytes;
  t->raw_data.data = (uint8_t *)data;
  return t;
}

/* The initializer of value v (a parameter, a running statistic or a
 * constant), written once. */
static gcc_status value_init(ex *E, int v, gcc_diag *d) {
  if (E->emitted[v])
    return GCC_OK;
  const gcc_value *val = &E->g->values[v];
  int dt = onnx_dtype_of(val->dtype);
  if (!dt)
    return dtype_err(E, val, d);
  int64_t numel = gcc_shape_numel(&val->shape, NULL);
  if (numel < 0 || val->data_bytes != (size_t)numel * gcc_dtype_size(val->dtype) ||
      (numel > 0 && !val->data))
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: initializer '%s' holds %zu bytes, not the %" PRId64
                        " elements of its shape (a graph without its weights?)",
                        E->src->source, val->name, val->data_bytes, numel);
  Onnx__TensorProto *t =
      tensor(E, val->name, dt, val->shape.dims, val->shape.ndim, val->data, val->data_bytes);
  if (!t)
    return oom(d);
  E->emitted[v] = 1;
  return add_init(E, t, d);
}

/* A constant the export adds (a Reshape's shape, a Clip's bounds, a Pad's
 * pads and value): its bytes copied into the pool, its name made from the
 * node's. Returns the name, or NULL (out of memory). */
static const char *const_init(ex *E, const char *node_name, const char *what, int onnx_dt,
                              const int64_t *dims, int ndim, const void *data, size_t bytes,
                              gcc_diag *d) {
  char base[400];
  snprintf(base, sizeof base, "%s_%s", node_name, what);
  char *name = unique_name(E, base);
  void *copy = ex_alloc(E, bytes);
  if (!name || !copy) {
    oom(d);
    return NULL;
  }
  memcpy(copy, data, bytes);
  Onnx__TensorProto *t = tensor(E, name, onnx_dt, dims, ndim, copy, bytes);
  if (!t || add_init(E, t, d) != GCC_OK) {
    oom(d);
    return NULL;
  }
  return name;
}

/* ---- attributes and extra inputs ----------------------------------------- */

#define MAX_ATTRS 8

static Onnx__AttributeProto *new_attr(ex *E, Onnx__NodeProto *np, const char *name, int type) {
  if (np->n_attribute >= MAX_ATTRS)
    return NULL;
  Onnx__AttributeProto *a = ex_alloc(E, sizeof *a);
  if (!a)
    return NULL;
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1;
  a->type = (Onnx__AttributeProto__AttributeType)type;
  np->attribute[np->n_attribute++] = a;
  return a;
}

static gcc_status attr_int(ex *E, Onnx__NodeProto *np, const char *name, int64_t v, gcc_diag *d) {
  Onnx__AttributeProto *a = new_attr(E, np, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  if (!a)
    return oom(d);
  a->has_i = 1;
  a->i = v;
  return GCC_OK;
}

static gcc_status attr_float(ex *E, Onnx__NodeProto *np, const char *name, float v, gcc_diag *d) {
  Onnx__AttributeProto *a = new_attr(E, np, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  if (!a)
    return oom(d);
  a->has_f = 1;
  a->f = v;
  return GCC_OK;
}

static gcc_status attr_ints(ex *E, Onnx__NodeProto *np, const char *name, const int64_t *v, int n,
                            gcc_diag *d) {
  Onnx__AttributeProto *a = new_attr(E, np, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  int64_t *c = ex_alloc(E, (size_t)(n ? n : 1) * sizeof *c);
  if (!a || !c)
    return oom(d);
  if (n > 0)
    memcpy(c, v, (size_t)n * sizeof *c);
  a->n_ints = (size_t)n;
  a->ints = c;
  return GCC_OK;
}

static gcc_status attr_string(ex *E, Onnx__NodeProto *np, const char *name, const char *v,
                              gcc_diag *d) {
  Onnx__AttributeProto *a = new_attr(E, np, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  char *c = ex_str(E, v);
  if (!a || !c)
    return oom(d);
  a->has_s = 1;
  a->s.len = strlen(c);
  a->s.data = (uint8_t *)c;
  return GCC_OK;
}

/* Appends input `name` to the node (room was made for the extra inputs). */
static void add_input(Onnx__NodeProto *np, const char *name) {
  np->input[np->n_input++] = (char *)name;
}

static gcc_status extra_const(ex *E, Onnx__NodeProto *np, const char *what, int onnx_dt,
                              const int64_t *dims, int ndim, const void *data, size_t bytes,
                              gcc_diag *d) {
  const char *name = const_init(E, np->name, what, onnx_dt, dims, ndim, data, bytes, d);
  if (!name)
    return GCC_ERR_OUT_OF_MEMORY;
  add_input(np, name);
  return GCC_OK;
}

/* ---- the table: what each IR op writes besides its inputs and outputs ----- */

typedef gcc_status (*ex_fn)(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d);

static gcc_status ex_gemm(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  GCC_TRY(attr_float(E, np, "alpha", n->av[GEMM_ALPHA].f, d));
  GCC_TRY(attr_float(E, np, "beta", n->av[GEMM_BETA].f, d));
  GCC_TRY(attr_int(E, np, "transA", n->av[GEMM_TRANS_A].i, d));
  return attr_int(E, np, "transB", n->av[GEMM_TRANS_B].i, d);
}

static gcc_status ex_axis(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  return attr_int(E, np, "axis", n->av[0].i, d); /* Softmax, LogSoftmax, Flatten, Concat, Gather */
}

static gcc_status ex_reshape(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  const gcc_attr *s = &n->av[RESHAPE_SHAPE];
  int64_t dim = s->n_ints;
  return extra_const(E, np, "shape", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, &dim, 1, s->ints,
                     (size_t)s->n_ints * sizeof(int64_t), d);
}

/* Slice-13: starts, ends, axes and steps as int64 inputs */
static gcc_status ex_slice(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  static const char *const what[] = {"starts", "ends", "axes", "steps"};
  const int k_n = n->av[SLICE_STARTS].n_ints;
  int64_t axes[GCC_MAX_DIMS], steps[GCC_MAX_DIMS], dim = k_n;
  for (int k = 0; k < k_n; k++) {
    axes[k] = n->av[SLICE_AXES].n_ints ? n->av[SLICE_AXES].ints[k] : k;
    steps[k] = n->av[SLICE_STEPS].n_ints ? n->av[SLICE_STEPS].ints[k] : 1;
  }
  const int64_t *vals[] = {n->av[SLICE_STARTS].ints, n->av[SLICE_ENDS].ints, axes, steps};
  for (int i = 0; i < 4; i++)
    GCC_TRY(extra_const(E, np, what[i], ONNX__TENSOR_PROTO__DATA_TYPE__INT64, &dim, 1, vals[i],
                        (size_t)k_n * sizeof(int64_t), d));
  return GCC_OK;
}

/* Expand-13: the shape as an int64 input */
static gcc_status ex_expand(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  const gcc_attr *s = &n->av[EXPAND_SHAPE];
  int64_t dim = s->n_ints;
  for (int i = 0; i < s->n_ints; i++)
    if (s->ints[i] == 0)
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                          "node '%s' (Expand): expands to the batch size (a 0 in its shape); "
                          "the export writes static shapes only",
                          n->name);
  return extra_const(E, np, "shape", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, &dim, 1, s->ints,
                     (size_t)s->n_ints * sizeof(int64_t), d);
}

static gcc_status window_attrs(ex *E, const gcc_window2d *w, Onnx__NodeProto *np, int dilations,
                               gcc_diag *d) {
  int64_t k[2] = {w->kh, w->kw}, s[2] = {w->sh, w->sw}, p[4] = {w->pt, w->pl, w->pb, w->pr};
  int64_t dl[2] = {w->dh, w->dw};
  GCC_TRY(attr_ints(E, np, "kernel_shape", k, 2, d));
  GCC_TRY(attr_ints(E, np, "strides", s, 2, d));
  GCC_TRY(attr_ints(E, np, "pads", p, 4, d));
  return dilations ? attr_ints(E, np, "dilations", dl, 2, d) : GCC_OK;
}

static gcc_status ex_conv(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  gcc_window2d w;
  gcc_window2d_of(n, &E->g->values[n->inputs[1]].shape, &w);
  GCC_TRY(window_attrs(E, &w, np, 1, d));
  return attr_int(E, np, "group", n->av[CONV_GROUP].i, d);
}

static gcc_status ex_conv_transpose(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  GCC_TRY(ex_conv(E, n, np, d));
  const gcc_attr *op = &n->av[CONVT_OUTPUT_PADDING];
  return op->n_ints > 0 ? attr_ints(E, np, "output_padding", op->ints, op->n_ints, d) : GCC_OK;
}

static gcc_status ex_max_pool(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  gcc_window2d w;
  gcc_window2d_of(n, NULL, &w);
  GCC_TRY(window_attrs(E, &w, np, 1, d));
  return attr_int(E, np, "ceil_mode", n->av[POOL_CEIL_MODE].i, d);
}

static gcc_status ex_average_pool(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  gcc_window2d w;
  gcc_window2d_of(n, NULL, &w);
  if (w.dh != 1 || w.dw != 1)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: %s: dilations %" PRId64 "x%" PRId64
                        ": ONNX AveragePool has no dilations before opset 19 (the export writes "
                        "opset %d)",
                        E->src->source, E->desc, w.dh, w.dw, GCC_ONNX_EXPORT_OPSET);
  GCC_TRY(window_attrs(E, &w, np, 0, d));
  GCC_TRY(attr_int(E, np, "ceil_mode", n->av[POOL_CEIL_MODE].i, d));
  return attr_int(E, np, "count_include_pad", n->av[POOL_COUNT_INCLUDE_PAD].i, d);
}

static gcc_status ex_leaky_relu(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  return attr_float(E, np, "alpha", n->av[LEAKY_RELU_ALPHA].f, d);
}

/* Elu, Celu, ThresholdedRelu: alpha; Selu: alpha and gamma (graph/ops.h ACT_*). */
static gcc_status ex_alpha(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  return attr_float(E, np, "alpha", n->av[ACT_ALPHA].f, d);
}

static gcc_status ex_selu(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  GCC_TRY(attr_float(E, np, "alpha", n->av[ACT_ALPHA].f, d));
  return attr_float(E, np, "gamma", n->av[ACT_GAMMA].f, d);
}

static gcc_status ex_clip(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  float lo = n->av[CLIP_MIN].f, hi = n->av[CLIP_MAX].f;
  GCC_TRY(
      extra_const(E, np, "min", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, NULL, 0, &lo, sizeof lo, d));
  return extra_const(E, np, "max", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, NULL, 0, &hi, sizeof hi,
                     d);
}

static gcc_status ex_lrn(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  GCC_TRY(attr_int(E, np, "size", n->av[LRN_SIZE].i, d));
  GCC_TRY(attr_float(E, np, "alpha", n->av[LRN_ALPHA].f, d));
  GCC_TRY(attr_float(E, np, "beta", n->av[LRN_BETA].f, d));
  return attr_float(E, np, "bias", n->av[LRN_BIAS].f, d);
}

static gcc_status ex_transpose(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  const gcc_attr *p = &n->av[TRANSPOSE_PERM];
  return attr_ints(E, np, "perm", p->ints, p->n_ints, d);
}

static gcc_status ex_pad(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  const gcc_attr *p = &n->av[PAD_PADS];
  const char *mode = n->av[PAD_MODE].s ? n->av[PAD_MODE].s : "constant";
  GCC_TRY(attr_string(E, np, "mode", mode, d));
  int64_t dim = p->n_ints;
  GCC_TRY(extra_const(E, np, "pads", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, &dim, 1, p->ints,
                      (size_t)p->n_ints * sizeof(int64_t), d));
  if (strcmp(mode, "constant") != 0)
    return GCC_OK;
  /* constant_value: a scalar of the data's own type */
  gcc_dtype dt = E->g->values[n->inputs[0]].dtype;
  float f = n->av[PAD_VALUE].f;
  if (dt == GCC_DT_INT64 || dt == GCC_DT_INT32) { /* an integer tensor pads with an integer */
    int64_t i64 = isfinite(f) ? (int64_t)f : 0;
    int32_t i32 = (int32_t)i64;
    return dt == GCC_DT_INT64 ? extra_const(E, np, "value", ONNX__TENSOR_PROTO__DATA_TYPE__INT64,
                                            NULL, 0, &i64, sizeof i64, d)
                              : extra_const(E, np, "value", ONNX__TENSOR_PROTO__DATA_TYPE__INT32,
                                            NULL, 0, &i32, sizeof i32, d);
  }
  return extra_const(E, np, "value", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, NULL, 0, &f, sizeof f,
                     d);
}

static gcc_status ex_gelu(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  return attr_string(E, np, "approximate", gcc_gelu_is_tanh(n) ? "tanh" : "none", d);
}

static gcc_status ex_batch_norm(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  GCC_TRY(attr_float(E, np, "epsilon", n->av[BN_EPSILON].f, d));
  return attr_float(E, np, "momentum", n->av[BN_MOMENTUM].f, d);
}

/* LayerNormalization-17: axis, epsilon; stash_type 1 is ONNX's default */
static gcc_status ex_layer_norm(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  GCC_TRY(attr_int(E, np, "axis", n->av[LN_AXIS].i, d));
  return attr_float(E, np, "epsilon", n->av[LN_EPSILON].f, d);
}

/* Trilu-14: upper, and k as an int64 scalar input */
static gcc_status ex_trilu(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  int64_t k = n->av[TRILU_K].i;
  GCC_TRY(attr_int(E, np, "upper", n->av[TRILU_UPPER].i, d));
  return extra_const(E, np, "k", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, NULL, 0, &k, sizeof k, d);
}

/* ArgMax-13 / ArgMin-13: axis, keepdims, select_last_index */
static gcc_status ex_arg(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  GCC_TRY(attr_int(E, np, "axis", n->av[ARG_AXIS].i, d));
  GCC_TRY(attr_int(E, np, "keepdims", n->av[ARG_KEEPDIMS].i, d));
  return attr_int(E, np, "select_last_index", n->av[ARG_SELECT_LAST_INDEX].i, d);
}

/* ReduceMin-13: axes and keepdims attributes */
static gcc_status ex_reduce_min(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  const gcc_attr *ax = &n->av[REDUCE_MIN_AXES];
  GCC_TRY(attr_ints(E, np, "axes", ax->ints, ax->n_ints, d));
  return attr_int(E, np, "keepdims", n->av[REDUCE_MIN_KEEPDIMS].i, d);
}

/* NegativeLogLikelihoodLoss-13: reduction, and ignore_index when one is set */
static gcc_status ex_nll(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  GCC_TRY(attr_string(E, np, "reduction", n->av[NLL_REDUCTION].s, d));
  if (n->av[NLL_IGNORE_INDEX].i == NLL_NO_IGNORE)
    return GCC_OK;
  return attr_int(E, np, "ignore_index", n->av[NLL_IGNORE_INDEX].i, d);
}

/* Cast: `to` in ONNX's numbering */
static gcc_status ex_cast(ex *E, const gcc_node *n, Onnx__NodeProto *np, gcc_diag *d) {
  int to = onnx_dtype_of((gcc_dtype)n->av[CAST_TO].i);
  if (!to)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "node '%s' (Cast) casts to %s, which ONNX export "
                        "does not write",
                        n->name, gcc_dtype_name((gcc_dtype)n->av[CAST_TO].i));
  return attr_int(E, np, "to", to, d);
}

typedef struct export_entry {
  gcc_onnx_export_op pub;
  ex_fn fn;  /* attributes and extra inputs; NULL: none */
  int opset; /* the opset the ONNX op appears in, when above GCC_ONNX_EXPORT_OPSET; 0: none */
} export_entry;

#define MAP(onnx_type)                                                                             \
  { {onnx_type, NULL, 0}, NULL }
#define MAP_A(onnx_type, fn)                                                                       \
  { {onnx_type, NULL, 1}, fn }
#define NONE(why)                                                                                  \
  { {NULL, why, 0}, NULL }
#define TRAINING(what) NONE(what " (made by autodiff for training; never in an inference graph)")
#define MAP_SINCE(onnx_type, fn, since)                                                            \
  { {onnx_type, NULL, 1}, fn, since }

/* Every entry names its fields; a new op fails the _Static_assert until it
 * has one here (tests/op_tables_test checks none is left empty). */
_Static_assert(GCC_OP_COUNT == 124, "a new op: add its ONNX mapping to kOnnxExport");
static const export_entry kOnnxExport[GCC_OP_COUNT] = {
    [GCC_OP_GEMM] = MAP_A("Gemm", ex_gemm),
    [GCC_OP_MATMUL] = MAP("MatMul"),
    [GCC_OP_ADD] = MAP("Add"),
    [GCC_OP_RELU] = MAP("Relu"),
    [GCC_OP_RELU_GRAD] = TRAINING("the gradient of Relu"),
    [GCC_OP_IDENTITY] = MAP("Identity"),
    [GCC_OP_RESHAPE] = MAP_A("Reshape", ex_reshape),
    [GCC_OP_FLATTEN] = MAP_A("Flatten", ex_axis),
    [GCC_OP_REDUCE_SUM_TO] = TRAINING("a broadcast's gradient"),
    [GCC_OP_SOFTMAX_CROSS_ENTROPY] = NONE("a training loss (the inference graph ends at the "
                                          "prediction)"),
    [GCC_OP_SOFTMAX_CROSS_ENTROPY_GRAD] = TRAINING("the loss gradient"),
    [GCC_OP_MEAN_SQUARED_ERROR] = NONE("a training loss (the inference graph ends at the "
                                       "prediction)"),
    [GCC_OP_MEAN_SQUARED_ERROR_GRAD] = TRAINING("the loss gradient"),
    [GCC_OP_SGD] = TRAINING("an optimizer update"),
    [GCC_OP_ADAM] = TRAINING("an optimizer update"),
    [GCC_OP_COPY] = NONE("a copy between devices (made by copy insertion; never in a model)"),
    [GCC_OP_SOFTMAX] = MAP_A("Softmax", ex_axis),
    [GCC_OP_SOFTMAX_GRAD] = TRAINING("the gradient of Softmax"),
    [GCC_OP_CONV] = MAP_A("Conv", ex_conv),
    [GCC_OP_CONV_GRAD_DATA] = TRAINING("the gradient of Conv"),
    [GCC_OP_CONV_GRAD_FILTER] = TRAINING("the gradient of Conv"),
    [GCC_OP_CONV_GRAD_BIAS] = TRAINING("the gradient of Conv"),
    [GCC_OP_MAX_POOL] = MAP_A("MaxPool", ex_max_pool),
    [GCC_OP_MAX_POOL_GRAD] = TRAINING("the gradient of MaxPool"),
    [GCC_OP_AVERAGE_POOL] = MAP_A("AveragePool", ex_average_pool),
    [GCC_OP_AVERAGE_POOL_GRAD] = TRAINING("the gradient of AveragePool"),
    [GCC_OP_SUB] = MAP("Sub"),
    [GCC_OP_MUL] = MAP("Mul"),
    [GCC_OP_DIV] = MAP("Div"),
    [GCC_OP_SIGMOID] = MAP("Sigmoid"),
    [GCC_OP_TANH] = MAP("Tanh"),
    [GCC_OP_SQRT] = MAP("Sqrt"),
    [GCC_OP_LEAKY_RELU] = MAP_A("LeakyRelu", ex_leaky_relu),
    [GCC_OP_CLIP] = MAP_A("Clip", ex_clip),
    [GCC_OP_LOG_SOFTMAX] = MAP_A("LogSoftmax", ex_axis),
    [GCC_OP_LRN] = MAP_A("LRN", ex_lrn),
    [GCC_OP_CONCAT] = MAP_A("Concat", ex_axis),
    [GCC_OP_TRANSPOSE] = MAP_A("Transpose", ex_transpose),
    [GCC_OP_PAD] = MAP_A("Pad", ex_pad),
    [GCC_OP_CONV_TRANSPOSE] = MAP_A("ConvTranspose", ex_conv_transpose),
    [GCC_OP_ALL_REDUCE] = NONE("a data-parallel gradient all-reduce (made for training)"),
    [GCC_OP_SIGMOID_GRAD] = TRAINING("the gradient of Sigmoid"),
    [GCC_OP_TANH_GRAD] = TRAINING("the gradient of Tanh"),
    [GCC_OP_SQRT_GRAD] = TRAINING("the gradient of Sqrt"),
    [GCC_OP_LEAKY_RELU_GRAD] = TRAINING("the gradient of LeakyRelu"),
    [GCC_OP_CLIP_GRAD] = TRAINING("the gradient of Clip"),
    [GCC_OP_LOG_SOFTMAX_GRAD] = TRAINING("the gradient of LogSoftmax"),
    [GCC_OP_LRN_GRAD] = TRAINING("the gradient of LRN"),
    [GCC_OP_BATCH_NORM] = MAP_A("BatchNormalization", ex_batch_norm),
    [GCC_OP_BATCH_NORM_GRAD] = TRAINING("the gradient of BatchNormalization"),
    /* evaluation form: the identity (nn.Dropout in eval(), ONNX Dropout without
     * training_mode), written as the Identity it is */
    [GCC_OP_DROPOUT] = MAP("Identity"),
    [GCC_OP_DROPOUT_GRAD] = TRAINING("the gradient of Dropout"),
    /* an imported Cast (a mask to float, ...); the autocast pass's come after export */
    [GCC_OP_CAST] = MAP_A("Cast", ex_cast),
    [GCC_OP_AMP_NON_FINITE_CHECK] = NONE("fp16 loss scaling's gradient check (made for "
                                         "training)"),
    [GCC_OP_AMP_UPDATE_SCALE] = NONE("fp16 loss scaling's scale update (made for training)"),
    [GCC_OP_LAYER_NORM] = MAP_A("LayerNormalization", ex_layer_norm),
    [GCC_OP_LAYER_NORM_GRAD] = TRAINING("the gradient of LayerNormalization"),
    [GCC_OP_GATHER] = MAP_A("Gather", ex_axis),
    [GCC_OP_GATHER_GRAD] = TRAINING("the gradient of Gather"),
    [GCC_OP_SLICE] = MAP_A("Slice", ex_slice),
    [GCC_OP_SLICE_GRAD] = TRAINING("the gradient of Slice"),
    [GCC_OP_EXPAND] = MAP_A("Expand", ex_expand),
    [GCC_OP_GRAD_NORM] = NONE("gradient clipping's norm (made for training)"),
    [GCC_OP_ATTENTION] = NONE("the fused attention (GCC_OPF_FUSED) is made by the attention pass "
                              "when a plan is compiled; a model keeps the MatMul -> Softmax -> "
                              "MatMul chain it came from (ONNX has Attention from opset 23, "
                              "export writes 17)"),
    [GCC_OP_ATTENTION_GRAD] = TRAINING("the gradient of Attention"),
    /* ONNX has Gelu from opset 20: a graph with one is written at opset 20 */
    [GCC_OP_GELU] = MAP_SINCE("Gelu", ex_gelu, 20),
    [GCC_OP_GELU_GRAD] = TRAINING("the gradient of Gelu"),
    [GCC_OP_ERF] = MAP("Erf"),
    [GCC_OP_ERF_GRAD] = TRAINING("the gradient of Erf"),
    [GCC_OP_EXP] = MAP("Exp"),
    [GCC_OP_LOG] = MAP("Log"),
    [GCC_OP_NEG] = MAP("Neg"),
    [GCC_OP_ABS] = MAP("Abs"),
    [GCC_OP_ABS_GRAD] = TRAINING("the gradient of Abs"),
    [GCC_OP_POW] = MAP("Pow"),
    [GCC_OP_POW_GRAD_BASE] = TRAINING("a gradient of Pow"),
    [GCC_OP_POW_GRAD_EXPONENT] = TRAINING("a gradient of Pow"),
    [GCC_OP_RECIPROCAL] = MAP("Reciprocal"),
    [GCC_OP_MAX] = MAP("Max"),
    [GCC_OP_MIN] = MAP("Min"),
    [GCC_OP_MAX_GRAD] = TRAINING("the gradient of Max"),
    [GCC_OP_MIN_GRAD] = TRAINING("the gradient of Min"),
    [GCC_OP_ELU] = MAP_A("Elu", ex_alpha),
    [GCC_OP_ELU_GRAD] = TRAINING("the gradient of Elu"),
    [GCC_OP_SELU] = MAP_A("Selu", ex_selu),
    [GCC_OP_SELU_GRAD] = TRAINING("the gradient of Selu"),
    [GCC_OP_CELU] = MAP_A("Celu", ex_alpha),
    [GCC_OP_CELU_GRAD] = TRAINING("the gradient of Celu"),
    [GCC_OP_SOFTPLUS] = MAP("Softplus"),
    [GCC_OP_SOFTPLUS_GRAD] = TRAINING("the gradient of Softplus"),
    [GCC_OP_SOFTSIGN] = MAP("Softsign"),
    [GCC_OP_SOFTSIGN_GRAD] = TRAINING("the gradient of Softsign"),
    [GCC_OP_THRESHOLDED_RELU] = MAP_A("ThresholdedRelu", ex_alpha),
    [GCC_OP_THRESHOLDED_RELU_GRAD] = TRAINING("the gradient of ThresholdedRelu"),
    [GCC_OP_SIN] = MAP("Sin"),
    [GCC_OP_COS] = MAP("Cos"),
    [GCC_OP_PRELU] = MAP("PRelu"),
    [GCC_OP_PRELU_GRAD] = TRAINING("a gradient of PRelu"),
    [GCC_OP_PRELU_GRAD_SLOPE] = TRAINING("a gradient of PRelu"),
    [GCC_OP_TRILU] = MAP_A("Trilu", ex_trilu),
    [GCC_OP_ARG_MAX] = MAP_A("ArgMax", ex_arg),
    [GCC_OP_ARG_MIN] = MAP_A("ArgMin", ex_arg),
    /* SoftmaxCrossEntropyLoss is imported as LogSoftmax + this: exported so */
    [GCC_OP_NLL_LOSS] = MAP_A("NegativeLogLikelihoodLoss", ex_nll),
    [GCC_OP_NLL_LOSS_GRAD] = TRAINING("the gradient of NegativeLogLikelihoodLoss"),
    [GCC_OP_EQUAL] = MAP("Equal"),
    [GCC_OP_LESS] = MAP("Less"),
    [GCC_OP_GREATER] = MAP("Greater"),
    [GCC_OP_LESS_OR_EQUAL] = MAP("LessOrEqual"),
    [GCC_OP_GREATER_OR_EQUAL] = MAP("GreaterOrEqual"),
    [GCC_OP_NOT] = MAP("Not"),
    [GCC_OP_AND] = MAP("And"),
    [GCC_OP_OR] = MAP("Or"),
    [GCC_OP_XOR] = MAP("Xor"),
    [GCC_OP_WHERE] = MAP("Where"),
    [GCC_OP_WHERE_GRAD_X] = TRAINING("a gradient of Where"),
    [GCC_OP_WHERE_GRAD_Y] = TRAINING("a gradient of Where"),
    [GCC_OP_GATHER_ELEMENTS] = MAP_A("GatherElements", ex_axis),
    [GCC_OP_GATHER_ELEMENTS_GRAD] = TRAINING("the gradient of GatherElements"),
    [GCC_OP_REDUCE_MIN] = MAP_A("ReduceMin", ex_reduce_min),
    [GCC_OP_REDUCE_MIN_GRAD] = TRAINING("the gradient of ReduceMin"),
    [GCC_OP_ATTENTION_PACKED] = NONE("made from Attention by the CPU's packed-attention lowering "
                                     "(codegen/packed_attention.c) after every pass an export "
                                     "sees; never in an exported graph"),
    [GCC_OP_ATTENTION_PACKED_GRAD] = TRAINING("the gradient of AttentionPacked"),
    [GCC_OP_GELU_AUX] = NONE("made from Gelu and GeluGrad by the CPU's gelu-aux lowering "
                             "(passes/gelu_aux.c) in a training plan, after every pass an "
                             "export sees; never in an exported graph"),
    [GCC_OP_LAYER_NORM_GRAD_ALL] = TRAINING("the gradient of LayerNormalization"),
};

const gcc_onnx_export_op *gcc_onnx_export_op_of(int op) {
  if (op < 0 || op >= GCC_OP_COUNT)
    return NULL;
  return &kOnnxExport[op].pub;
}

/* ---- the graph ------------------------------------------------------------ */

/* A ValueInfoProto of a tensor: elem type and dims (dim i: dims[i], or
 * the symbolic "N" when sym[i], or no value when dims[i] < 0). */
static Onnx__ValueInfoProto *value_info(ex *E, const char *name, int onnx_dt, int ndim,
                                        const int64_t *dims, const int *sym) {
  Onnx__ValueInfoProto *vi = ex_alloc(E, sizeof *vi);
  Onnx__TypeProto *tp = ex_alloc(E, sizeof *tp);
  Onnx__TypeProto__Tensor *tt = ex_alloc(E, sizeof *tt);
  Onnx__TensorShapeProto *sp = ex_alloc(E, sizeof *sp);
  Onnx__TensorShapeProto__Dimension **dv = ex_alloc(E, (size_t)(ndim ? ndim : 1) * sizeof *dv);
  if (!vi || !tp || !tt || !sp || !dv)
    return NULL;
  onnx__value_info_proto__init(vi);
  onnx__type_proto__init(tp);
  onnx__type_proto__tensor__init(tt);
  onnx__tensor_shape_proto__init(sp);
  for (int i = 0; i < ndim; i++) {
    Onnx__TensorShapeProto__Dimension *dm = ex_alloc(E, sizeof *dm);
    if (!dm)
      return NULL;
    onnx__tensor_shape_proto__dimension__init(dm);
    if (sym[i]) {
      dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      dm->dim_param = "N";
    } else if (dims[i] >= 0) {
      dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      dm->dim_value = dims[i];
    }
    dv[i] = dm;
  }
  sp->n_dim = (size_t)ndim;
  sp->dim = dv;
  tt->has_elem_type = 1;
  tt->elem_type = onnx_dt;
  tt->shape = sp;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  vi->name = (char *)name;
  vi->type = tp;
  return vi;
}

/* The kind of each initializer the graph has, as PyTorch's dynamo exporter
 * writes it (the ValueInfoProto's metadata_props, ONNX IR 10 field 4, an
 * unknown field to the ONNX 1.12 schema compiled here, packed by hand):
 * "pkg.torch.export.graph_signature.InputSpec.kind" PARAMETER for a
 * parameter, BUFFER for a running statistic or a constant. gcc-train's
 * import reads it back (onnx/import.h, train): a parameter that several
 * nodes read stays one parameter (tied weights), a buffer is not trained. */
static gcc_status kind_infos(ex *E, Onnx__GraphProto *gp, gcc_diag *d) {
  const gcc_graph *g = E->g;
  size_t n = 0;
  for (int v = 0; v < g->n_values; v++)
    n += E->emitted[v] != 0;
  if (!n)
    return GCC_OK;
  Onnx__ValueInfoProto **vis = ex_alloc(E, n * sizeof *vis);
  if (!vis)
    return oom(d);
  size_t k = 0;
  for (int v = 0; v < g->n_values; v++) {
    const gcc_value *x = &g->values[v];
    if (!E->emitted[v])
      continue;
    int sym[GCC_MAX_DIMS] = {0};
    Onnx__ValueInfoProto *vi =
        value_info(E, x->name, onnx_dtype_of(x->dtype), x->shape.ndim, x->shape.dims, sym);
    Onnx__StringStringEntryProto e = ONNX__STRING_STRING_ENTRY_PROTO__INIT;
    e.key = "pkg.torch.export.graph_signature.InputSpec.kind";
    e.value = x->kind == GCC_VALUE_PARAM && !x->state ? "PARAMETER" : "BUFFER";
    size_t len = onnx__string_string_entry_proto__get_packed_size(&e);
    ProtobufCMessageUnknownField *f = ex_alloc(E, sizeof *f);
    uint8_t *data = ex_alloc(E, len + 10);
    if (!vi || !f || !data)
      return oom(d);
    /* protobuf-c writes an unknown field's tag, then its bytes as they are:
     * a length-delimited one keeps its length varint in them */
    size_t at = 0;
    for (size_t l = len; at == 0 || l; l >>= 7)
      data[at++] = (uint8_t)((l & 0x7f) | (l >> 7 ? 0x80 : 0));
    onnx__string_string_entry_proto__pack(&e, data + at);
    f->tag = 4;
    f->wire_type = PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED;
    f->len = at + len;
    f->data = data;
    vi->base.n_unknown_fields = 1;
    vi->base.unknown_fields = f;
    vis[k++] = vi;
  }
  gp->n_value_info = k;
  gp->value_info = vis;
  return GCC_OK;
}

/* The clones, bound and shape-inferred. */
static gcc_status prepare(ex *E, const gcc_graph *g, gcc_diag *d) {
  if (g->training.present)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: the graph has a training spec; ONNX export writes an inference graph "
                        "(gcc_inference_graph: the model pruned to its prediction)",
                        g->source);
  if (g->n_inputs < 1 || g->n_outputs < 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: the graph has %d inputs and %d outputs",
                        g->source, g->n_inputs, g->n_outputs);
  gcc_graph **cl[2] = {&E->g, &E->g2};
  for (int k = 0; k < 2; k++) {
    GCC_TRY(gcc_graph_clone(g, cl[k], d));
    GCC_TRY(gcc_graph_bind_batch(*cl[k], k + 1, d));
    GCC_TRY(gcc_infer_shapes(*cl[k], d));
  }
  E->emitted = calloc((size_t)(E->g->n_values ? E->g->n_values : 1), 1);
  E->nodes = calloc((size_t)(E->g->n_nodes ? E->g->n_nodes : 1), sizeof *E->nodes);
  return E->emitted && E->nodes ? GCC_OK : oom(d);
}

static gcc_status write_node(ex *E, int i, gcc_diag *d) {
  const gcc_graph *g = E->g;
  const gcc_node *n = &g->nodes[i];
  gcc_node_desc(g, i, E->desc, sizeof E->desc);
  const export_entry *m = n->op >= 0 && n->op < GCC_OP_COUNT ? &kOnnxExport[n->op] : NULL;
  if (!m || !m->pub.onnx)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: %s has no ONNX counterpart: %s",
                        E->src->source, E->desc, m && m->pub.none ? m->pub.none : "an unknown op");
  Onnx__NodeProto *np = ex_alloc(E, sizeof *np);
  int n_in = n->n_inputs;
  while (n_in > 0 && n->inputs[n_in - 1] < 0)
    n_in--; /* trailing omitted inputs are left out */
  char **ins = ex_alloc(E, (size_t)(n_in + 4) * sizeof *ins);
  char **outs = ex_alloc(E, (size_t)(n->n_outputs ? n->n_outputs : 1) * sizeof *outs);
  Onnx__AttributeProto **attrs = ex_alloc(E, MAX_ATTRS * sizeof *attrs);
  if (!np || !ins || !outs || !attrs)
    return oom(d);
  onnx__node_proto__init(np);
  np->name = n->name;
  np->op_type = (char *)m->pub.onnx;
  np->input = ins;
  np->output = outs;
  np->attribute = attrs;
  for (int k = 0; k < n_in; k++) {
    int v = n->inputs[k];
    if (v < 0) {
      add_input(np, "");
      continue;
    }
    const gcc_value *val = &g->values[v];
    if (!onnx_dtype_of(val->dtype))
      return dtype_err(E, val, d);
    if (val->kind == GCC_VALUE_PARAM || val->kind == GCC_VALUE_CONST)
      GCC_TRY(value_init(E, v, d));
    add_input(np, val->name);
  }
  for (int k = 0; k < n->n_outputs; k++) {
    const gcc_value *val = &g->values[n->outputs[k]];
    if (!onnx_dtype_of(val->dtype))
      return dtype_err(E, val, d);
    outs[np->n_output++] = val->name;
  }
  if (m->fn)
    GCC_TRY(m->fn(E, n, np, d));
  if (m->opset > E->opset)
    E->opset = m->opset;
  E->nodes[E->n_nodes++] = np;
  return GCC_OK;
}

/* Builds the whole ModelProto into *mp (its parts in the pool). */
static gcc_status build(ex *E, const gcc_onnx_export_options *o, Onnx__ModelProto *mp,
                        Onnx__GraphProto *gp, gcc_diag *d) {
  const gcc_graph *g = E->g;
  for (int i = 0; i < g->n_nodes; i++)
    GCC_TRY(write_node(E, i, d));
  Onnx__ValueInfoProto **ins = ex_alloc(E, (size_t)g->n_inputs * sizeof *ins);
  Onnx__ValueInfoProto **outs = ex_alloc(E, (size_t)g->n_outputs * sizeof *outs);
  if (!ins || !outs)
    return oom(d);
  int sym[GCC_MAX_DIMS];
  for (int k = 0; k < g->n_inputs; k++) {
    const gcc_value *v = &E->src->values[E->src->inputs[k]];
    if (!onnx_dtype_of(v->dtype))
      return dtype_err(E, v, d);
    for (int i = 0; i < v->shape.ndim; i++)
      sym[i] = v->shape.dims[i] == GCC_BATCH_DIM;
    ins[k] = value_info(E, v->name, onnx_dtype_of(v->dtype), v->shape.ndim, v->shape.dims, sym);
    if (!ins[k])
      return oom(d);
  }
  for (int k = 0; k < g->n_outputs; k++) {
    const gcc_value *v1 = &g->values[g->outputs[k]], *v2 = &E->g2->values[E->g2->outputs[k]];
    if (!onnx_dtype_of(v1->dtype))
      return dtype_err(E, v1, d);
    int64_t dims[GCC_MAX_DIMS];
    for (int i = 0; i < v1->shape.ndim; i++) {
      int64_t a = v1->shape.dims[i], b = v2->shape.ndim == v1->shape.ndim ? v2->shape.dims[i] : -1;
      sym[i] = a != b && i == 0 && a == 1 && b == 2;
      dims[i] = a == b ? a : -1; /* a dim that follows the batch otherwise: no value */
    }
    outs[k] = value_info(E, v1->name, onnx_dtype_of(v1->dtype), v1->shape.ndim, dims, sym);
    if (!outs[k])
      return oom(d);
    /* an output that is an initializer or an input needs no node, but an
     * initializer must still be written */
    if (v1->kind == GCC_VALUE_PARAM || v1->kind == GCC_VALUE_CONST)
      GCC_TRY(value_init(E, g->outputs[k], d));
  }
  onnx__graph_proto__init(gp);
  gp->name = g->name && g->name[0] ? g->name : "gcc-train";
  gp->n_node = E->n_nodes;
  gp->node = E->nodes;
  gp->n_initializer = E->n_inits;
  gp->initializer = E->inits;
  gp->n_input = (size_t)g->n_inputs;
  gp->input = ins;
  gp->n_output = (size_t)g->n_outputs;
  gp->output = outs;
  GCC_TRY(kind_infos(E, gp, d));

  Onnx__OperatorSetIdProto *opset = ex_alloc(E, sizeof *opset);
  Onnx__OperatorSetIdProto **opsets = ex_alloc(E, sizeof *opsets);
  if (!opset || !opsets)
    return oom(d);
  onnx__operator_set_id_proto__init(opset);
  opset->domain = "";
  opset->has_version = 1;
  opset->version = E->opset > GCC_ONNX_EXPORT_OPSET ? E->opset : GCC_ONNX_EXPORT_OPSET;
  opsets[0] = opset;
  onnx__model_proto__init(mp);
  mp->has_ir_version = 1;
  /* IR version 9 came with opset 19 (ONNX 1.14) */
  mp->ir_version = opset->version >= 19 ? 9 : GCC_ONNX_EXPORT_IR_VERSION;
  mp->n_opset_import = 1;
  mp->opset_import = opsets;
  mp->producer_name = "gcc-train";
  if (o && o->producer_version)
    mp->producer_version = (char *)o->producer_version;
  if (o && o->doc_string)
    mp->doc_string = (char *)o->doc_string;
  mp->graph = gp;
  return GCC_OK;
}

static gcc_status export_any(const gcc_graph *g, const gcc_onnx_export_options *o, uint8_t **bytes,
                             size_t *size, gcc_diag *d) {
  if (!g)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "ONNX export: no graph");
  ex E;
  memset(&E, 0, sizeof E);
  E.src = g;
  Onnx__ModelProto mp = ONNX__MODEL_PROTO__INIT;
  Onnx__GraphProto gp = ONNX__GRAPH_PROTO__INIT;
  gcc_status s = prepare(&E, g, d);
  if (s == GCC_OK)
    s = build(&E, o, &mp, &gp, d);
  if (s == GCC_OK && bytes) {
    *size = onnx__model_proto__get_packed_size(&mp);
    *bytes = malloc(*size ? *size : 1);
    if (!*bytes)
      s = oom(d);
    else
      onnx__model_proto__pack(&mp, *bytes);
  }
  ex_free(&E);
  return s;
}

gcc_status gcc_onnx_export_check(const gcc_graph *g, gcc_diag *d) {
  return export_any(g, NULL, NULL, NULL, d);
}

gcc_status gcc_onnx_export_memory(const gcc_graph *g, const gcc_onnx_export_options *o,
                                  uint8_t **bytes, size_t *size, gcc_diag *d) {
  if (!bytes || !size)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "ONNX export: no output buffer");
  *bytes = NULL;
  *size = 0;
  return export_any(g, o, bytes, size, d);
}

gcc_status gcc_onnx_export_file(const gcc_graph *g, const gcc_onnx_export_options *o,
                                const char *path, const char *what, gcc_diag *d) {
  if (!path)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "ONNX export: no path");
  uint8_t *bytes;
  size_t size;
  GCC_TRY(gcc_onnx_export_memory(g, o, &bytes, &size, d));
  gcc_status s = gcc_outfile_write_all(path, what ? what : path, bytes, size, d);
  free(bytes);
  return s;
}
