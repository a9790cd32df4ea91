// graph_only_test: the IR stands on its own. This test depends on //graph
// alone (no pass, backend or CUDA library in its link): it loads every
// committed model, binds the batch and infers every shape.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "graph/loader.h"
#include "graph/ops.h"
}
#include "tests/testutil.h"

namespace {

struct Expect {
  const char *file;
  const char *output;        // the prediction: its shape depends on the batch
  std::vector<int64_t> dims; // at batch 32
};

TEST(GraphOnly, LoadsEveryModelAndInfersShapes) {
  const Expect models[] = {
      {"models/mnist_mlp.pb", "fc5.out", {32, 10}},
      {"models/mnist_cnn.pb", "fc3.out", {32, 10}},
      {"models/cifar_cnn.pb", "fc3.out", {32, 10}},
      {"models/linear.pb", "fc.out", {32, 1}},
  };
  for (const Expect &e : models) {
    std::string path = gcc_test::Runfile(e.file);
    ASSERT_FALSE(path.empty()) << e.file << " not in the runfiles";
    gcc_graph *g = nullptr;
    gcc_diag d = {};
    ASSERT_EQ(gcc_model_load(path.c_str(), &g, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_graph_bind_batch(g, 32, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_graph_toposort(g, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_infer_shapes(g, &d), GCC_OK) << e.file << ": " << d.msg;
    for (int v = 0; v < g->n_values; v++) {
      if (g->values[v].producer >= 0) {
        EXPECT_NE(g->values[v].dtype, GCC_DT_UNDEFINED) << e.file << ": " << g->values[v].name;
      }
    }
    int out = gcc_graph_find(g, e.output);
    ASSERT_GE(out, 0) << e.file << " has no value '" << e.output << "'";
    const gcc_shape &s = g->values[out].shape;
    ASSERT_EQ(s.ndim, static_cast<int>(e.dims.size())) << e.file;
    for (size_t i = 0; i < e.dims.size(); i++)
      EXPECT_EQ(s.dims[i], e.dims[i]) << e.file;
    double flops = 0;
    for (int i = 0; i < g->n_nodes; i++)
      flops += gcc_op_flops(g, i);
    EXPECT_GT(flops, 0) << e.file;
    gcc_graph_free(g);
  }
}

// gcc_graph_clone_borrowing_params: the copy's parameters are the source's
// bytes in place (read only, never freed through the copy), everything else
// is copied as gcc_graph_clone copies it; shape inference runs on the copy;
// freeing it, before or after gcc_graph_drop_param_data, leaves the source
// whole (the sanitizer build sees a double free or a read after one).
TEST(GraphOnly, CloneBorrowingParamsSharesOnlyTheParameters) {
  std::string path = gcc_test::Runfile("models/mnist_cnn.pb");
  ASSERT_FALSE(path.empty());
  gcc_graph *g = nullptr;
  gcc_diag d = {};
  ASSERT_EQ(gcc_model_load(path.c_str(), &g, &d), GCC_OK) << d.msg;
  std::vector<std::vector<unsigned char>> bytes(g->n_values);
  int params = 0;
  for (int v = 0; v < g->n_values; v++) {
    const unsigned char *b = static_cast<const unsigned char *>(g->values[v].data);
    if (b)
      bytes[v].assign(b, b + g->values[v].data_bytes);
    params += g->values[v].kind == GCC_VALUE_PARAM && b != nullptr;
    EXPECT_EQ(g->values[v].data_borrowed, 0) << g->values[v].name;
  }
  ASSERT_GT(params, 0);
  for (int drop = 0; drop < 2; drop++) {
    SCOPED_TRACE(drop ? "dropped, then freed" : "freed");
    gcc_graph *c = nullptr;
    ASSERT_EQ(gcc_graph_clone_borrowing_params(g, &c, &d), GCC_OK) << d.msg;
    ASSERT_EQ(c->n_values, g->n_values);
    for (int v = 0; v < g->n_values; v++) {
      const gcc_value *o = &g->values[v], *x = &c->values[v];
      ASSERT_STREQ(x->name, o->name);
      EXPECT_EQ(x->kind, o->kind) << o->name;
      EXPECT_EQ(x->data_bytes, o->data_bytes) << o->name;
      if (!o->data) {
        EXPECT_EQ(x->data, nullptr) << o->name;
      } else if (o->kind == GCC_VALUE_PARAM) {
        EXPECT_EQ(x->data, o->data) << o->name;
        EXPECT_EQ(x->data_borrowed, 1) << o->name;
      } else {
        EXPECT_NE(x->data, o->data) << o->name;
        EXPECT_EQ(x->data_borrowed, 0) << o->name;
        EXPECT_EQ(memcmp(x->data, o->data, o->data_bytes), 0) << o->name;
      }
    }
    ASSERT_EQ(gcc_graph_bind_batch(c, 8, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_infer_shapes(c, &d), GCC_OK) << d.msg;
    if (drop) {
      gcc_graph_drop_param_data(c);
      for (int v = 0; v < c->n_values; v++) {
        const gcc_value *x = &c->values[v];
        if (x->kind == GCC_VALUE_PARAM) {
          EXPECT_EQ(x->data, nullptr) << x->name;
          EXPECT_EQ(x->data_bytes, 0u) << x->name;
          EXPECT_EQ(x->data_borrowed, 0) << x->name;
        } else if (g->values[v].data) {
          EXPECT_NE(x->data, nullptr) << x->name; // a constant keeps its copy
        }
      }
    }
    gcc_graph_free(c);
    for (int v = 0; v < g->n_values; v++) {
      if (g->values[v].data) {
        ASSERT_EQ(g->values[v].data_bytes, bytes[v].size());
        EXPECT_EQ(memcmp(g->values[v].data, bytes[v].data(), bytes[v].size()), 0)
            << g->values[v].name;
      }
    }
  }
  // dropping a graph's own parameters frees them (the sanitizer build: no leak)
  gcc_graph *own = nullptr;
  ASSERT_EQ(gcc_graph_clone(g, &own, &d), GCC_OK) << d.msg;
  gcc_graph_drop_param_data(own);
  for (int v = 0; v < own->n_values; v++) {
    if (own->values[v].kind == GCC_VALUE_PARAM) {
      EXPECT_EQ(own->values[v].data, nullptr) << own->values[v].name;
    }
  }
  gcc_graph_free(own);
  gcc_graph_free(g);
}

} // namespace
