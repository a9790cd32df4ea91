// test_graphs.h - the small training graphs and training specs that several
// suites build with graph/builder.h (models/ holds the tutorials' models).
#ifndef GCC_TESTS_TEST_GRAPHS_H_
#define GCC_TESTS_TEST_GRAPHS_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graph/builder.h"
#include "graph/ir.h"

namespace gcc_test {

// An optimizer of `kind` (SGD or Adam) with learning rate `lr`; SGD's
// momentum and the weight decay as given, Adam's betas and eps at PyTorch's
// defaults (0.9, 0.999, 1e-8).
inline gcc_optimizer Opt(gcc_opt_kind kind, float lr, float momentum = 0.0f,
                         float weight_decay = 0.0f) {
  gcc_optimizer o{};
  o.kind = kind;
  o.lr = lr;
  o.momentum = momentum;
  o.weight_decay = weight_decay;
  o.beta1 = 0.9f;
  o.beta2 = 0.999f;
  o.eps = 1e-8f;
  return o;
}

// Gives the builder's graph a training spec on an inline dataset (values
// named `loss`, `prediction` (may be NULL), `input`, `target`; one epoch of
// batches of `batch_size`) and finishes it: the graph, or NULL with a test
// failure.
inline gcc_graph *FinishInlineTraining(gcc_builder *b, const char *loss, const char *prediction,
                                       const char *input, const char *target,
                                       const gcc_optimizer &opt, int64_t batch_size = 8) {
  gcc_build_training_spec ts{};
  ts.loss = loss;
  ts.prediction = prediction;
  ts.input = input;
  ts.target = target;
  ts.dataset = "inline";
  ts.opt = opt;
  ts.batch_size = batch_size;
  ts.epochs = 1;
  gcc_build_training(b, &ts);
  gcc_graph *g = nullptr;
  gcc_diag d{};
  EXPECT_EQ(gcc_builder_finish(b, &g, &d), GCC_OK) << d.msg;
  return g;
}

// A regression model whose GEMMs have shapes cuBLASLt offers no epilogue
// for (issue 21): BGRADB with one output column (fc2's dW, as
// models/linear.pb's) and DRELU with k = 1 (the ReLU gradient through a
// layer of one output). x [N, 3] -> Linear(3, 8) -> ReLU -> Linear(8, 1),
// MSE against y [N, 1], SGD lr 0.05, batch 8.
inline gcc_graph *TinyRegressor() {
  gcc_builder *b = gcc_builder_new("tiny_regressor", 5);
  int64_t xd[2] = {GCC_BATCH_DIM, 3}, yd[2] = {GCC_BATCH_DIM, 1};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, xd);
  int y = gcc_build_input(b, "y", GCC_DT_FLOAT32, 2, yd);
  int h = gcc_build_relu(b, "relu1", gcc_build_linear(b, "fc1", x, 3, 8));
  int pred = gcc_build_linear(b, "fc2", h, 8, 1);
  int loss = gcc_build_mse(b, "loss", pred, y);
  gcc_build_output(b, loss);
  return FinishInlineTraining(b, "loss", "fc2.out", "x", "y", Opt(GCC_OPT_SGD, 0.05f));
}

// The ops torch.autocast leaves in their input's dtype, as MixedOpsNet and
// precision_test's MixedOpsChain use them on `in` [N, 4, 9, 9]: MaxPool(3,
// stride 2, pad 1), AveragePool(3, stride 2, pad 1, count_include_pad 0) and
// AveragePool(2, stride 2, pads (0, 0, 1, 1): asymmetric, cuDNN cannot, a
// generated kernel) -> Concat (channels) [N, 12, 5, 5] ("concat", also
// returned in *cat) -> Transpose (H, W) -> Pad (constant 0.25, 1 each side of
// H and W) [N, 12, 7, 7], the node named `pad_name`, whose value it returns.
inline int PoolConcatTransposePad(gcc_builder *b, int in, const char *pad_name, int *cat_out) {
  const int64_t k3[2] = {3, 3}, k2[2] = {2, 2}, s2[2] = {2, 2}, p1[4] = {1, 1, 1, 1};
  const int64_t pasym[4] = {0, 0, 1, 1};
  int mp = gcc_build_op(b, GCC_OP_MAX_POOL, "maxpool", "maxpool.out", &in, 1);
  gcc_build_set_ints(b, mp, "kernel_shape", k3, 2);
  gcc_build_set_ints(b, mp, "strides", s2, 2);
  gcc_build_set_ints(b, mp, "pads", p1, 4);
  int ap = gcc_build_op(b, GCC_OP_AVERAGE_POOL, "avgpool", "avgpool.out", &in, 1);
  gcc_build_set_ints(b, ap, "kernel_shape", k3, 2);
  gcc_build_set_ints(b, ap, "strides", s2, 2);
  gcc_build_set_ints(b, ap, "pads", p1, 4);
  int aa = gcc_build_op(b, GCC_OP_AVERAGE_POOL, "avgpool_asym", "avgpool_asym.out", &in, 1);
  gcc_build_set_ints(b, aa, "kernel_shape", k2, 2);
  gcc_build_set_ints(b, aa, "strides", s2, 2);
  gcc_build_set_ints(b, aa, "pads", pasym, 4);
  int cat_in[3] = {mp, ap, aa};
  int cat = gcc_build_op(b, GCC_OP_CONCAT, "concat", "concat.out", cat_in, 3);
  gcc_build_set_int(b, cat, "axis", 1);
  const int64_t perm[4] = {0, 1, 3, 2}, pads[8] = {0, 0, 1, 1, 0, 0, 1, 1};
  int tr = gcc_build_op(b, GCC_OP_TRANSPOSE, "transpose", "transpose.out", &cat, 1);
  gcc_build_set_ints(b, tr, "perm", perm, 4);
  int pd = gcc_build_op(b, GCC_OP_PAD, pad_name, (std::string(pad_name) + ".out").c_str(), &tr, 1);
  gcc_build_set_ints(b, pd, "pads", pads, 8);
  gcc_build_set_float(b, pd, "value", 0.25f);
  *cat_out = cat;
  return pd;
}

// The ops torch.autocast leaves in their input's dtype, and ConvTranspose,
// in one small classifier (issue 19's mixed-precision kernels): image
// [N, 3, 9, 9] -> Conv(3 -> 4, 3x3, pad 1) -> BatchNormalization (running
// statistics as state) -> ReLU, then MaxPool(3, stride 2, pad 1),
// AveragePool(3, stride 2, pad 1, count_include_pad 0) and AveragePool(2,
// stride 2, pads (0, 0, 1, 1): asymmetric, cuDNN cannot, a generated
// kernel) of it -> Concat (channels) [N, 12, 5, 5] -> Transpose (H, W) ->
// Pad (constant 0.25, 1 each side of H and W) [N, 12, 7, 7] ->
// ConvTranspose(12 -> 2, 3x3, stride 2, pad 1) [N, 2, 13, 13] -> global
// AveragePool (13x13) -> Flatten -> Linear(2, 5) -> CrossEntropy against
// label [N]; SGD lr 0.05 momentum 0.9. Parameters drawn from a fixed seed.
inline gcc_graph *MixedOpsNet() {
  gcc_builder *b = gcc_builder_new("mixed_ops_net", 11);
  int64_t xd[4] = {GCC_BATCH_DIM, 3, 9, 9}, yd[1] = {GCC_BATCH_DIM};
  int x = gcc_build_input(b, "image", GCC_DT_FLOAT32, 4, xd);
  int y = gcc_build_input(b, "label", GCC_DT_INT64, 1, yd);
  int c1 = gcc_build_conv2d(b, "conv1", x, 3, 4, 3, 1, 1);
  int64_t cd[1] = {4};
  const float scale[4] = {1.0f, 0.75f, 1.25f, 0.5f}, shift[4] = {0.1f, -0.2f, 0.0f, 0.3f};
  const float mean[4] = {0.0f, 0.1f, -0.1f, 0.0f}, var[4] = {1.0f, 0.5f, 2.0f, 1.0f};
  int bn_in[5] = {c1, gcc_build_param(b, "bn.scale", 1, cd, scale),
                  gcc_build_param(b, "bn.bias", 1, cd, shift),
                  gcc_build_param(b, "bn.running_mean", 1, cd, mean),
                  gcc_build_param(b, "bn.running_var", 1, cd, var)};
  int r = gcc_build_relu(b, "relu1", gcc_build_op(b, GCC_OP_BATCH_NORM, "bn", "bn.out", bn_in, 5));
  int cat = -1;
  int pd = PoolConcatTransposePad(b, r, "pad", &cat);
  const int64_t s2[2] = {2, 2}, p1[4] = {1, 1, 1, 1};
  int64_t wd[4] = {12, 2, 3, 3}, bd[1] = {2};
  float w[12 * 2 * 9];
  uint32_t st = 12345u;
  for (float &v : w) { // a fixed LCG: U(-1/3, 1/3)
    st = st * 1664525u + 1013904223u;
    v = ((float)(st >> 8) / 16777216.0f - 0.5f) * (2.0f / 3.0f);
  }
  const float bt[2] = {0.05f, -0.05f};
  int ct_in[3] = {pd, gcc_build_param(b, "convt.weight", 4, wd, w),
                  gcc_build_param(b, "convt.bias", 1, bd, bt)};
  int ct = gcc_build_op(b, GCC_OP_CONV_TRANSPOSE, "convt", "convt.out", ct_in, 3);
  gcc_build_set_ints(b, ct, "strides", s2, 2);
  gcc_build_set_ints(b, ct, "pads", p1, 4);
  const int64_t k13[2] = {13, 13};
  int gp = gcc_build_op(b, GCC_OP_AVERAGE_POOL, "gap", "gap.out", &ct, 1);
  gcc_build_set_ints(b, gp, "kernel_shape", k13, 2);
  int logits = gcc_build_linear(b, "fc", gcc_build_flatten(b, "flatten", gp, 1), 2, 5);
  int loss = gcc_build_cross_entropy(b, "loss", logits, y, -1);
  gcc_build_output(b, loss);
  gcc_graph *g =
      FinishInlineTraining(b, "loss", "fc.out", "image", "label", Opt(GCC_OPT_SGD, 0.05f, 0.9f));
  if (g) // PyTorch's buffers: updated by the forward in training, not by SGD
    for (int v = 0; v < g->n_values; v++)
      if (strstr(g->values[v].name, "bn.running_") == g->values[v].name)
        g->values[v].state = 1;
  return g;
}

// x [N, 1000] + b -> logits -> Softmax over the classes -> LogSoftmax over
// the batch (axis 0: lines strided by 1000), the prediction; and the
// cross-entropy of the 1000 classes. Softmax and LogSoftmax: a block per
// line; the loss: a block per row, then one block sums the rows.
inline gcc_graph *WideSoftmaxModel() {
  gcc_builder *b = gcc_builder_new("wide_softmax", 5);
  int64_t xd[2] = {GCC_BATCH_DIM, 1000}, yd[1] = {GCC_BATCH_DIM}, bd[1] = {1000};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, xd);
  int y = gcc_build_input(b, "label", GCC_DT_INT64, 1, yd);
  std::vector<float> bias(1000);
  for (size_t i = 0; i < bias.size(); i++)
    bias[i] = 0.001f * (float)(i % 97) - 0.05f;
  int in[2] = {x, gcc_build_param(b, "b", 1, bd, bias.data())};
  int logits = gcc_build_op(b, GCC_OP_ADD, "add_b", "logits", in, 2);
  int sm = gcc_build_op(b, GCC_OP_SOFTMAX, "softmax", "softmax.out", &logits, 1);
  gcc_build_set_int(b, sm, "axis", 1);
  int lsm = gcc_build_op(b, GCC_OP_LOG_SOFTMAX, "lsm", "lsm.out", &sm, 1);
  gcc_build_set_int(b, lsm, "axis", 0);
  int loss = gcc_build_cross_entropy(b, "loss", logits, y, -1);
  gcc_build_output(b, lsm);
  gcc_build_output(b, loss);
  return FinishInlineTraining(b, "loss", "lsm.out", "x", "label", Opt(GCC_OPT_SGD, 0.1f));
}

// A residual block as ResNet's (issue 29): x [N, 3, hw, hw] -> Conv(3 -> 16,
// 3x3, pad 1) -> BatchNormalization -> ReLU -> Conv(16 -> 16) ->
// BatchNormalization -> + the first ReLU's output -> ReLU -> global average
// pool -> Linear(16, 10) -> cross-entropy; SGD lr 0.05, momentum 0.9. At
// batch 64 and hw 32 each BatchNorm reduces 65,536 values per channel, which
// the generated kernels (codegen/emit_batchnorm.c) cut into many blocks per
// channel.
inline gcc_graph *ResidualBnBlock(int64_t hw) {
  gcc_builder *b = gcc_builder_new("residual_bn_block", 29);
  int64_t xd[4] = {GCC_BATCH_DIM, 3, hw, hw}, yd[1] = {GCC_BATCH_DIM}, cd[1] = {16};
  int x = gcc_build_input(b, "image", GCC_DT_FLOAT32, 4, xd);
  int y = gcc_build_input(b, "label", GCC_DT_INT64, 1, yd);
  std::vector<float> one(16, 1.0f), zero(16, 0.0f), scale(16), shift(16);
  for (int i = 0; i < 16; i++) {
    scale[i] = 0.75f + 0.05f * (float)i;
    shift[i] = 0.02f * (float)(i % 5) - 0.04f;
  }
  auto bn = [&](const char *name, int in) {
    std::string n(name);
    int bn_in[5] = {in, gcc_build_param(b, (n + ".scale").c_str(), 1, cd, scale.data()),
                    gcc_build_param(b, (n + ".bias").c_str(), 1, cd, shift.data()),
                    gcc_build_param(b, (n + ".running_mean").c_str(), 1, cd, zero.data()),
                    gcc_build_param(b, (n + ".running_var").c_str(), 1, cd, one.data())};
    return gcc_build_op(b, GCC_OP_BATCH_NORM, name, (n + ".out").c_str(), bn_in, 5);
  };
  int r1 = gcc_build_relu(b, "relu1", bn("bn1", gcc_build_conv2d(b, "conv1", x, 3, 16, 3, 1, 1)));
  int b2 = bn("bn2", gcc_build_conv2d(b, "conv2", r1, 16, 16, 3, 1, 1));
  int add_in[2] = {b2, r1};
  int r2 = gcc_build_relu(b, "relu2",
                          gcc_build_op(b, GCC_OP_ADD, "residual", "residual.out", add_in, 2));
  const int64_t khw[2] = {hw, hw};
  int gp = gcc_build_op(b, GCC_OP_AVERAGE_POOL, "gap", "gap.out", &r2, 1);
  gcc_build_set_ints(b, gp, "kernel_shape", khw, 2);
  int logits = gcc_build_linear(b, "fc", gcc_build_flatten(b, "flatten", gp, 1), 16, 10);
  gcc_build_output(b, gcc_build_cross_entropy(b, "loss", logits, y, -1));
  gcc_graph *g =
      FinishInlineTraining(b, "loss", "fc.out", "image", "label", Opt(GCC_OPT_SGD, 0.05f, 0.9f));
  if (g) // PyTorch's buffers: updated by the forward in training, not by SGD
    for (int v = 0; v < g->n_values; v++)
      if (strstr(g->values[v].name, ".running_") != nullptr)
        g->values[v].state = 1;
  return g;
}

} // namespace gcc_test

#endif // GCC_TESTS_TEST_GRAPHS_H_
