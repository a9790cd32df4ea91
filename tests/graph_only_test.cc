// graph_only_test: the IR stands on its own. This test depends on //graph
// alone (no pass, backend or CUDA library in its link): it loads every
// committed model, binds the batch and infers every shape.
#include <gtest/gtest.h>

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

} // namespace
