// imported_graphs.h - the ONNX fixtures of tests/fixtures (PyTorch
// training-mode exports: tests/fixtures/make_train_import_fixtures.py)
// imported for training with a recipe, for suites that need real imported
// models (mixed precision, NVRTC) rather than PyTorch's reference numbers
// (tests/train_import_test.cc compares with those).
#ifndef GCC_TESTS_IMPORTED_GRAPHS_H_
#define GCC_TESTS_IMPORTED_GRAPHS_H_

#include <gtest/gtest.h>

#include <string>

extern "C" {
#include "graph/ir.h"
#include "graph/util.h"
#include "onnx/import.h"
}
#include "tests/test_graphs.h"
#include "tests/testutil.h"

namespace gcc_test {

// An ONNX model of tests/fixtures (PyTorch's training-mode export:
// BatchNormalization kept with its running statistics as state, Dropout
// kept) with cross-entropy on its logits, SGD lr 0.05 momentum 0.9, as
// tests/train_import_test.cc trains them.
inline gcc_graph *ImportForTraining(const std::string &name) {
  std::string path = Runfile("tests/fixtures/" + name + ".onnx");
  Bytes bytes;
  EXPECT_TRUE(ReadFile(path, &bytes)) << path;
  gcc_onnx_options o{};
  o.train = 1;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  EXPECT_EQ(gcc_onnx_import(bytes.data(), bytes.size(), path.c_str(), &o, &g, nullptr, &d), GCC_OK)
      << d.msg;
  if (!g)
    return nullptr;
  int logits = gcc_graph_find(g, "logits"), labels = -1, loss = -1, node = -1;
  gcc_shape ls = {1, {GCC_BATCH_DIM}}, scalar = {0, {0}};
  bool ok = logits >= 0 &&
            gcc_graph_add_value(g, "labels", GCC_DT_INT64, &ls, GCC_VALUE_INPUT, nullptr, 0,
                                &labels, &d) == GCC_OK &&
            gcc_graph_add_input(g, labels) == GCC_OK &&
            gcc_graph_add_value(g, "loss", GCC_DT_FLOAT32, &scalar, GCC_VALUE_ACTIVATION, nullptr,
                                0, &loss, &d) == GCC_OK;
  int ins[2] = {logits, labels};
  ok = ok &&
       gcc_graph_add_node(g, "loss", GCC_OP_SOFTMAX_CROSS_ENTROPY, ins, 2, &loss, 1, &node, &d) ==
           GCC_OK &&
       gcc_graph_add_output(g, loss) == GCC_OK && gcc_graph_link(g, &d) == GCC_OK &&
       gcc_graph_toposort(g, &d) == GCC_OK;
  if (!ok) {
    ADD_FAILURE() << name << ": " << (logits < 0 ? "no logits" : d.msg);
    gcc_graph_free(g);
    return nullptr;
  }
  gcc_training *t = &g->training;
  t->present = 1;
  t->loss = gcc_strdup("loss");
  t->prediction = gcc_strdup("logits");
  t->input = gcc_strdup("input");
  t->target = gcc_strdup("labels");
  t->opt = Opt(GCC_OPT_SGD, 0.05f, 0.9f);
  t->batch_size = 4;
  t->epochs = 1;
  t->seed = 7; // the dropout masks
  return g;
}

} // namespace gcc_test

#endif // GCC_TESTS_IMPORTED_GRAPHS_H_
