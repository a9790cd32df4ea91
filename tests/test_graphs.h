// test_graphs.h - the small training graphs and training specs that several
// suites build with graph/builder.h (models/ holds the tutorials' models).
#ifndef GCC_TESTS_TEST_GRAPHS_H_
#define GCC_TESTS_TEST_GRAPHS_H_

#include <cstdint>

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

} // namespace gcc_test

#endif // GCC_TESTS_TEST_GRAPHS_H_
