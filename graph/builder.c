/*
 * builder.c - the model-building API (builder.h): values and nodes added
 * by name, initializers drawn from the builder's seeded generator, the
 * first error kept and reported by gcc_builder_finish.
 */
#include "graph/builder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/loader.h"
#include "graph/ops.h"
#include "graph/util.h"

gcc_builder *gcc_builder_new(const char *name, uint64_t seed) {
  gcc_builder *b = calloc(1, sizeof *b);
  if (!b)
    return NULL;
  b->g = gcc_graph_new(name, "<builder>");
  if (!b->g) {
    free(b);
    return NULL;
  }
  gcc_rng_seed(&b->rng, seed, 0x6363u);
  return b;
}

static int fail(gcc_builder *b, gcc_status s) {
  if (b->status == GCC_OK)
    b->status = s;
  return -1;
}

int gcc_build_input(gcc_builder *b, const char *name, gcc_dtype dt, int ndim, const int64_t *dims) {
  if (b->status != GCC_OK)
    return -1;
  gcc_shape s = {ndim, {0}};
  for (int i = 0; i < ndim && i < GCC_MAX_DIMS; i++)
    s.dims[i] = dims[i];
  int v;
  gcc_status st = gcc_graph_add_value(b->g, name, dt, &s, GCC_VALUE_INPUT, NULL, 0, &v, &b->diag);
  if (st != GCC_OK)
    return fail(b, st);
  if (gcc_graph_add_input(b->g, v) != GCC_OK)
    return fail(b, gcc_diag_set(&b->diag, GCC_ERR_OUT_OF_MEMORY, "out of memory"));
  return v;
}

int gcc_build_param(gcc_builder *b, const char *name, int ndim, const int64_t *dims,
                    const float *data) {
  if (b->status != GCC_OK)
    return -1;
  gcc_shape s = {ndim, {0}};
  for (int i = 0; i < ndim && i < GCC_MAX_DIMS; i++)
    s.dims[i] = dims[i];
  size_t bytes = (size_t)gcc_shape_numel(&s, NULL) * sizeof(float);
  int v;
  gcc_status st = gcc_graph_add_value(b->g, name, GCC_DT_FLOAT32, &s, GCC_VALUE_PARAM, data, bytes,
                                      &v, &b->diag);
  return st == GCC_OK ? v : fail(b, st);
}

int gcc_build_const(gcc_builder *b, const char *name, gcc_dtype dt, int ndim, const int64_t *dims,
                    const void *data) {
  if (b->status != GCC_OK)
    return -1;
  if (ndim < 0 || ndim > GCC_MAX_DIMS || !gcc_dtype_supported(dt))
    return fail(b, gcc_diag_set(&b->diag, GCC_ERR_INVALID_ARGUMENT,
                                "constant '%s': bad dtype or rank", name ? name : ""));
  gcc_shape s = {ndim, {0}};
  for (int i = 0; i < ndim; i++)
    s.dims[i] = dims[i];
  int64_t numel = gcc_shape_numel(&s, NULL);
  if (numel <= 0)
    return fail(b, gcc_diag_set(&b->diag, GCC_ERR_INVALID_ARGUMENT,
                                "constant '%s': dims must be > 0", name ? name : ""));
  size_t bytes = (size_t)numel * gcc_dtype_size(dt);
  int v;
  gcc_status st =
      gcc_graph_add_value(b->g, name, dt, &s, GCC_VALUE_CONST, data, bytes, &v, &b->diag);
  return st == GCC_OK ? v : fail(b, st);
}

int gcc_build_op(gcc_builder *b, int op, const char *node_name, const char *out_name,
                 const int *inputs, int n_inputs) {
  if (b->status != GCC_OK)
    return -1;
  int out, node;
  gcc_status st = gcc_graph_add_value(b->g, out_name, GCC_DT_UNDEFINED, NULL, GCC_VALUE_ACTIVATION,
                                      NULL, 0, &out, &b->diag);
  if (st == GCC_OK)
    st = gcc_graph_add_node(b->g, node_name, op, inputs, n_inputs, &out, 1, &node, &b->diag);
  return st == GCC_OK ? out : fail(b, st);
}

int gcc_build_linear(gcc_builder *b, const char *name, int x, int64_t in, int64_t out) {
  if (b->status != GCC_OK)
    return -1;
  size_t nw = (size_t)(in * out);
  float *w = malloc(nw * sizeof *w), *bias = malloc((size_t)out * sizeof *bias);
  if (!w || !bias) {
    free(w);
    free(bias);
    return fail(b, gcc_diag_set(&b->diag, GCC_ERR_OUT_OF_MEMORY, "out of memory"));
  }
  float bound = 1.0f / sqrtf((float)in);
  for (size_t i = 0; i < nw; i++)
    w[i] = (2.0f * gcc_rng_uniform(&b->rng) - 1.0f) * bound;
  for (int64_t i = 0; i < out; i++)
    bias[i] = (2.0f * gcc_rng_uniform(&b->rng) - 1.0f) * bound;
  char wn[256], bn[256], on[256];
  snprintf(wn, sizeof wn, "%s.weight", name);
  snprintf(bn, sizeof bn, "%s.bias", name);
  snprintf(on, sizeof on, "%s.out", name);
  int64_t wd[2] = {out, in}, bd[1] = {out};
  int W = gcc_build_param(b, wn, 2, wd, w);
  int B = gcc_build_param(b, bn, 1, bd, bias);
  free(w);
  free(bias);
  int ins[3] = {x, W, B};
  int y = gcc_build_op(b, GCC_OP_GEMM, name, on, ins, 3);
  gcc_build_set_int(b, y, "transB", 1);
  return y;
}

int gcc_build_conv2d(gcc_builder *b, const char *name, int x, int64_t in_c, int64_t out_c,
                     int64_t k, int64_t stride, int64_t padding) {
  if (b->status != GCC_OK)
    return -1;
  int64_t fan_in = in_c * k * k;
  size_t nw = (size_t)(out_c * fan_in);
  float *w = malloc(nw * sizeof *w), *bias = malloc((size_t)out_c * sizeof *bias);
  if (!w || !bias) {
    free(w);
    free(bias);
    return fail(b, gcc_diag_set(&b->diag, GCC_ERR_OUT_OF_MEMORY, "out of memory"));
  }
  /* kaiming_uniform_(a = sqrt(5)) gives bound sqrt(6 / ((1 + 5) fan_in)) */
  float bound = 1.0f / sqrtf((float)fan_in);
  for (size_t i = 0; i < nw; i++)
    w[i] = (2.0f * gcc_rng_uniform(&b->rng) - 1.0f) * bound;
  for (int64_t i = 0; i < out_c; i++)
    bias[i] = (2.0f * gcc_rng_uniform(&b->rng) - 1.0f) * bound;
  char wn[256], bn[256], on[256];
  snprintf(wn, sizeof wn, "%s.weight", name);
  snprintf(bn, sizeof bn, "%s.bias", name);
  snprintf(on, sizeof on, "%s.out", name);
  int64_t wd[4] = {out_c, in_c, k, k}, bd[1] = {out_c};
  int W = gcc_build_param(b, wn, 4, wd, w);
  int B = gcc_build_param(b, bn, 1, bd, bias);
  free(w);
  free(bias);
  int ins[3] = {x, W, B};
  int y = gcc_build_op(b, GCC_OP_CONV, name, on, ins, 3);
  int64_t strides[2] = {stride, stride}, pads[4] = {padding, padding, padding, padding};
  if (stride != 1)
    gcc_build_set_ints(b, y, "strides", strides, 2);
  if (padding != 0)
    gcc_build_set_ints(b, y, "pads", pads, 4);
  return y;
}

int gcc_build_max_pool2d(gcc_builder *b, const char *name, int x, int64_t k, int64_t stride) {
  char on[256];
  snprintf(on, sizeof on, "%s.out", name);
  int y = gcc_build_op(b, GCC_OP_MAX_POOL, name, on, &x, 1);
  int64_t ks[2] = {k, k}, st[2] = {stride, stride};
  gcc_build_set_ints(b, y, "kernel_shape", ks, 2);
  gcc_build_set_ints(b, y, "strides", st, 2);
  return y;
}

static int unary(gcc_builder *b, int op, const char *name, int x) {
  char on[256];
  snprintf(on, sizeof on, "%s.out", name);
  return gcc_build_op(b, op, name, on, &x, 1);
}

int gcc_build_relu(gcc_builder *b, const char *name, int x) {
  return unary(b, GCC_OP_RELU, name, x);
}

int gcc_build_flatten(gcc_builder *b, const char *name, int x, int64_t axis) {
  int y = unary(b, GCC_OP_FLATTEN, name, x);
  gcc_build_set_int(b, y, "axis", axis);
  return y;
}

int gcc_build_cross_entropy(gcc_builder *b, const char *name, int logits, int labels,
                            int class_weight) {
  int ins[3] = {logits, labels, class_weight};
  return gcc_build_op(b, GCC_OP_SOFTMAX_CROSS_ENTROPY, name, name, ins, class_weight >= 0 ? 3 : 2);
}

int gcc_build_mse(gcc_builder *b, const char *name, int pred, int target) {
  int ins[2] = {pred, target};
  return gcc_build_op(b, GCC_OP_MEAN_SQUARED_ERROR, name, name, ins, 2);
}

void gcc_build_set_int(gcc_builder *b, int v, const char *attr, int64_t x) {
  if (b->status != GCC_OK || v < 0)
    return;
  if (gcc_node_set_int(b->g, b->g->values[v].producer, attr, x) != GCC_OK)
    fail(b, gcc_diag_set(&b->diag, GCC_ERR_OUT_OF_MEMORY, "out of memory"));
}

void gcc_build_set_float(gcc_builder *b, int v, const char *attr, float x) {
  if (b->status != GCC_OK || v < 0)
    return;
  if (gcc_node_set_float(b->g, b->g->values[v].producer, attr, x) != GCC_OK)
    fail(b, gcc_diag_set(&b->diag, GCC_ERR_OUT_OF_MEMORY, "out of memory"));
}

void gcc_build_set_ints(gcc_builder *b, int v, const char *attr, const int64_t *x, int n) {
  if (b->status != GCC_OK || v < 0)
    return;
  if (gcc_node_set_ints(b->g, b->g->values[v].producer, attr, x, n) != GCC_OK)
    fail(b, gcc_diag_set(&b->diag, GCC_ERR_OUT_OF_MEMORY, "out of memory"));
}

void gcc_build_output(gcc_builder *b, int v) {
  if (b->status != GCC_OK || v < 0)
    return;
  if (gcc_graph_add_output(b->g, v) != GCC_OK)
    fail(b, gcc_diag_set(&b->diag, GCC_ERR_OUT_OF_MEMORY, "out of memory"));
}

void gcc_build_training(gcc_builder *b, const gcc_build_training_spec *t) {
  if (b->status != GCC_OK)
    return;
  gcc_training *tr = &b->g->training;
  tr->present = 1;
  tr->loss = gcc_strdup(t->loss);
  tr->prediction = gcc_strdup(t->prediction);
  tr->input = gcc_strdup(t->input);
  tr->target = gcc_strdup(t->target);
  tr->dataset = gcc_strdup(t->dataset);
  tr->opt = t->opt;
  tr->batch_size = t->batch_size;
  tr->epochs = t->epochs;
  tr->n_mean = tr->n_std = t->n_norm;
  for (int i = 0; i < t->n_norm && i < GCC_MAX_CHANNELS; i++) {
    tr->mean[i] = t->mean[i];
    tr->std[i] = t->std[i];
  }
  tr->seed = t->seed;
  if (t->inline_inputs) {
    size_t ni = (size_t)gcc_shape_numel(&t->inline_inputs_shape, NULL) * sizeof(float);
    int labels = t->inline_labels != NULL;
    size_t nt = (size_t)gcc_shape_numel(&t->inline_targets_shape, NULL) *
                (labels ? sizeof(int64_t) : sizeof(float));
    gcc_status s = gcc_graph_add_value(b->g, "training.inline_data.inputs", GCC_DT_FLOAT32,
                                       &t->inline_inputs_shape, GCC_VALUE_CONST, t->inline_inputs,
                                       ni, &tr->inline_inputs, &b->diag);
    if (s == GCC_OK)
      s = gcc_graph_add_value(
          b->g, "training.inline_data.targets", labels ? GCC_DT_INT64 : GCC_DT_FLOAT32,
          &t->inline_targets_shape, GCC_VALUE_CONST,
          labels ? (const void *)t->inline_labels : (const void *)t->inline_targets, nt,
          &tr->inline_targets, &b->diag);
    if (s != GCC_OK)
      fail(b, s);
  }
  if ((t->loss && !tr->loss) || (t->dataset && !tr->dataset))
    fail(b, gcc_diag_set(&b->diag, GCC_ERR_OUT_OF_MEMORY, "out of memory"));
}

gcc_status gcc_builder_finish(gcc_builder *b, gcc_graph **out, gcc_diag *d) {
  *out = NULL;
  gcc_status s = b->status;
  if (s != GCC_OK) {
    if (d)
      *d = b->diag;
    gcc_graph_free(b->g);
    free(b);
    return s;
  }
  /* round-trip through the wire format: the model is checked exactly as a
   * file would be, by the loader */
  uint8_t *bytes = NULL;
  size_t n = 0;
  s = gcc_model_serialize(b->g, &bytes, &n, d);
  if (s == GCC_OK)
    s = gcc_model_parse(bytes, n, b->g->name, out, d);
  free(bytes);
  gcc_graph_free(b->g);
  free(b);
  return s;
}
