/*
 * builder.h - a C API to build models in code (the reference models in
 * models/ are written with it).
 *
 * Errors are sticky: after the first failure every call returns -1 and does
 * nothing, and gcc_builder_finish() reports the first error. So model code
 * reads as a plain sequence of layers, like a PyTorch module's forward().
 *
 * Parameter initialisation follows PyTorch's nn.Linear.reset_parameters():
 * weight ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform_ with a = sqrt(5)),
 * bias ~ U(-1/sqrt(in), 1/sqrt(in)), drawn from the builder's own seeded
 * PCG32 (graph/rng.h), so the same seed always writes the same file.
 */
#ifndef GCC_GRAPH_BUILDER_H
#define GCC_GRAPH_BUILDER_H

#include <stdint.h>

#include "graph/ir.h"
#include "graph/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gcc_builder {
  gcc_graph *g;
  gcc_status status;
  gcc_diag diag;
  gcc_rng rng;
} gcc_builder;

/* Starts a graph called `name`; parameters are drawn from `seed`.
 * NULL when out of memory. */
gcc_builder *gcc_builder_new(const char *name, uint64_t seed);

/* A graph input; dims[0] may be GCC_BATCH_DIM (-1). Returns the value. */
int gcc_build_input(gcc_builder *b, const char *name, gcc_dtype dt, int ndim, const int64_t *dims);

/* A float32 parameter of the given shape with `data` (copied; NULL = 0s). */
int gcc_build_param(gcc_builder *b, const char *name, int ndim, const int64_t *dims,
                    const float *data);

/* A constant initializer (not trained) of dtype `dt` and the given shape with
 * `data` (numel elements of dt, copied; NULL = 0s): PyTorch's buffers, such
 * as CrossEntropyLoss's class weights. Unlike gcc_build_param it gets no
 * gradient, no optimizer state and no update; a float32 one is written with
 * Tensor.constant = true so that it stays a constant when the file is read
 * back (graph/graph.proto). Returns the value. */
int gcc_build_const(gcc_builder *b, const char *name, gcc_dtype dt, int ndim, const int64_t *dims,
                    const void *data);

/* nn.Linear(in, out) on x of shape (N, in): parameters "<name>.weight"
 * (out, in) and "<name>.bias" (out), node Gemm(x, W, b, transB = 1) named
 * `name`. Returns the output (N, out). */
int gcc_build_linear(gcc_builder *b, const char *name, int x, int64_t in, int64_t out);

/* nn.Conv2d(in_c, out_c, kernel_size = k, stride, padding) on x (N, in_c,
 * H, W), NCHW: parameters "<name>.weight" (out_c, in_c, k, k) and
 * "<name>.bias" (out_c), both U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
 * fan_in = in_c * k * k (PyTorch's Conv2d.reset_parameters), node
 * Conv(x, W, b) named `name`. Returns the output (N, out_c, oh, ow). */
int gcc_build_conv2d(gcc_builder *b, const char *name, int x, int64_t in_c, int64_t out_c,
                     int64_t k, int64_t stride, int64_t padding);

/* nn.MaxPool2d(k, stride) on NCHW x: node MaxPool named `name`. */
int gcc_build_max_pool2d(gcc_builder *b, const char *name, int x, int64_t k, int64_t stride);

/* A node of op `op` (graph/ops.h) with one output called `out_name`. */
int gcc_build_op(gcc_builder *b, int op, const char *node_name, const char *out_name,
                 const int *inputs, int n_inputs);

int gcc_build_relu(gcc_builder *b, const char *name, int x);
int gcc_build_flatten(gcc_builder *b, const char *name, int x, int64_t axis);
/* nn.CrossEntropyLoss(weight = class_weight or none, reduction = "mean"). */
int gcc_build_cross_entropy(gcc_builder *b, const char *name, int logits, int labels,
                            int class_weight);
/* nn.MSELoss(reduction = "mean"). */
int gcc_build_mse(gcc_builder *b, const char *name, int pred, int target);

/* Sets attributes of the node that produced value `v`. */
void gcc_build_set_int(gcc_builder *b, int v, const char *attr, int64_t x);
void gcc_build_set_float(gcc_builder *b, int v, const char *attr, float x);
void gcc_build_set_ints(gcc_builder *b, int v, const char *attr, const int64_t *x, int n);

void gcc_build_output(gcc_builder *b, int v);

/* Training spec: strings are copied. inline_inputs/inline_targets: float32
 * data tensors carried in the model (dataset "inline"), or NULL;
 * inline_labels instead of inline_targets: int64 class indices (the
 * targets of a classifier's CrossEntropy), shape inline_targets_shape. */
typedef struct gcc_build_training_spec {
  const char *loss, *prediction, *input, *target, *dataset;
  gcc_optimizer opt;
  int64_t batch_size, epochs;
  int n_norm;
  float mean[GCC_MAX_CHANNELS], std[GCC_MAX_CHANNELS];
  uint64_t seed;
  const float *inline_inputs;
  gcc_shape inline_inputs_shape;
  const float *inline_targets;
  const int64_t *inline_labels;
  gcc_shape inline_targets_shape;
} gcc_build_training_spec;

void gcc_build_training(gcc_builder *b, const gcc_build_training_spec *t);

/* Validates the graph (topological order, shapes) and hands it over in
 * *out; frees the builder in every case. Returns the first error. */
gcc_status gcc_builder_finish(gcc_builder *b, gcc_graph **out, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_GRAPH_BUILDER_H */
