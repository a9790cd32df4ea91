// onnx_op_parity_test: the forward of every op ONNX import added (issue 14)
// against PyTorch (tests/fixtures/onnx_ops.fix, made by
// tests/fixtures/make_onnx_op_fixtures.py, whose docstring is the table of
// cases). Each case is a one-node ONNX model built here (weights as
// initializers, the rest as inputs), imported, and run on the CPU and
// through the CUDA plan on the host backend (generated kernels emulated on
// the host), both compared with PyTorch's output: |got - want| <= 1e-5 +
// 1e-5 |want|.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

extern "C" {
#include "onnx/import.h"
}
#include "tests/fixture.h"
#include "tests/onnx_builder.h"
#include "tests/run_plans.h"
#include "tests/testutil.h"

namespace {

// A committed test file: its runfile path, else `rel` (the open then fails naming it).
std::string Runfile(const std::string &rel) {
  std::string p = gcc_test::Runfile(rel);
  return p.empty() ? rel : p;
}

using gcc_test::Fixture;
using gcc_test::FixtureArray;
using gcc_test::OnnxModel;

const Fixture &Fix() {
  static Fixture *f = [] {
    auto *fx = new Fixture();
    std::string err;
    if (!Fixture::Load(Runfile("tests/fixtures/onnx_ops.fix"), fx, &err))
      ADD_FAILURE() << err;
    return fx;
  }();
  return *f;
}

std::vector<int64_t> Dims(const FixtureArray &a) {
  return a.dims;
}
std::vector<float> Vals(const FixtureArray &a) {
  return std::vector<float>(a.f32(), a.f32() + a.numel());
}

// One case: `inputs` are fixture tensors fed as graph inputs, `weights` as
// initializers; `build` adds the node (reading "<case>.<name>" values named
// by their short names) and names its output "y".
void Check(const std::string &name, int64_t opset, const std::vector<std::string> &inputs,
           const std::vector<std::string> &weights, const std::function<void(OnnxModel &)> &build) {
  SCOPED_TRACE(name);
  const Fixture &f = Fix();
  ASSERT_TRUE(f.Has(name + ".y")) << name;
  OnnxModel m(opset);
  std::vector<const void *> feeds;
  for (const std::string &in : inputs) {
    const FixtureArray &a = f.Get(name + "." + in);
    m.Input(in, Dims(a));
    feeds.push_back(a.bytes.data());
  }
  for (const std::string &w : weights) {
    const FixtureArray &a = f.Get(name + "." + w);
    m.Init(w, Dims(a), Vals(a));
  }
  build(m);
  m.Output("y");
  std::vector<uint8_t> bytes = m.Bytes();
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_onnx_import(bytes.data(), bytes.size(), name.c_str(), nullptr, &g, nullptr, &d),
            GCC_OK)
      << d.msg;
  const FixtureArray &want = f.Get(name + ".y");
  for (bool cuda : {false, true}) {
    std::vector<gcc_test::PlanOutput> outs;
    std::string err = gcc_test::RunPlan(g, feeds, 1, cuda, &outs);
    ASSERT_EQ(err, "") << (cuda ? "CUDA plan: " : "CPU: ") << err;
    ASSERT_EQ(outs.size(), 1u);
    ASSERT_EQ(outs[0].shape.ndim, (int)want.dims.size());
    for (int i = 0; i < outs[0].shape.ndim; i++)
      ASSERT_EQ(outs[0].shape.dims[i], want.dims[i]) << "dim " << i;
    double worst = 0;
    int64_t bad = 0;
    for (int64_t i = 0; i < want.numel(); i++) {
      double got = outs[0].f32[(size_t)i], w = want.f32()[i];
      double e = std::fabs(got - w);
      worst = std::max(worst, e);
      bad += !(e <= 1e-5 + 1e-5 * std::fabs(w));
    }
    EXPECT_EQ(bad, 0) << (cuda ? "CUDA plan" : "CPU") << ": max abs error " << worst;
  }
  gcc_graph_free(g);
}

TEST(OnnxOpParity, Convolutions) {
  Check("conv_group", 13, {"x"}, {"w", "b"}, [](OnnxModel &m) {
    m.Node("Conv", {"x", "w", "b"}, {"y"},
           {m.Int("group", 2), m.Ints("strides", {2, 2}), m.Ints("pads", {1, 1, 1, 1})});
  });
  Check("conv_depthwise", 13, {"x"}, {"w", "b"}, [](OnnxModel &m) {
    m.Node("Conv", {"x", "w", "b"}, {"y"}, {m.Int("group", 8), m.Ints("pads", {1, 1, 1, 1})});
  });
  Check("conv_depthwise_mult", 13, {"x"}, {"w"}, [](OnnxModel &m) {
    m.Node("Conv", {"x", "w"}, {"y"}, {m.Int("group", 3), m.Ints("dilations", {2, 2})});
  });
  Check("conv1d_dilated", 13, {"x"}, {"w", "b"}, [](OnnxModel &m) {
    m.Node("Conv", {"x", "w", "b"}, {"y"}, {m.Ints("pads", {2, 2}), m.Ints("dilations", {2})});
  });
  Check("conv_transpose", 13, {"x"}, {"w", "b"}, [](OnnxModel &m) {
    m.Node("ConvTranspose", {"x", "w", "b"}, {"y"},
           {m.Ints("strides", {2, 2}), m.Ints("pads", {1, 1, 1, 1}),
            m.Ints("output_padding", {1, 1})});
  });
  Check("conv_transpose_group", 13, {"x"}, {"w"}, [](OnnxModel &m) {
    m.Node("ConvTranspose", {"x", "w"}, {"y"}, {m.Int("group", 2), m.Ints("strides", {2, 2})});
  });
}

TEST(OnnxOpParity, Activations) {
  Check("leaky_relu", 16, {"x"}, {},
        [](OnnxModel &m) { m.Node("LeakyRelu", {"x"}, {"y"}, {m.Float("alpha", 0.1f)}); });
  Check("relu6", 13, {"x"}, {}, [](OnnxModel &m) { // ReLU6 as PyTorch exports it
    m.Init("lo", {}, {0.0f});
    m.Init("hi", {}, {6.0f});
    m.Node("Clip", {"x", "lo", "hi"}, {"y"});
  });
  Check("clip", 6, {"x"}, {}, [](OnnxModel &m) { // the attribute form
    m.Node("Clip", {"x"}, {"y"}, {m.Float("min", -0.5f), m.Float("max", 1.25f)});
  });
  Check("sigmoid", 13, {"x"}, {}, [](OnnxModel &m) { m.Node("Sigmoid", {"x"}, {"y"}); });
  Check("tanh", 13, {"x"}, {}, [](OnnxModel &m) { m.Node("Tanh", {"x"}, {"y"}); });
}

TEST(OnnxOpParity, SoftmaxAndLogSoftmax) {
  Check("softmax_axis1", 13, {"x"}, {},
        [](OnnxModel &m) { m.Node("Softmax", {"x"}, {"y"}, {m.Int("axis", 1)}); });
  Check("log_softmax_last", 13, {"x"}, {},
        [](OnnxModel &m) { m.Node("LogSoftmax", {"x"}, {"y"}); });
  Check("log_softmax_axis1", 13, {"x"}, {},
        [](OnnxModel &m) { m.Node("LogSoftmax", {"x"}, {"y"}, {m.Int("axis", 1)}); });
}

TEST(OnnxOpParity, Poolings) {
  Check("maxpool_ceil", 13, {"x"}, {}, [](OnnxModel &m) {
    m.Node("MaxPool", {"x"}, {"y"},
           {m.Ints("kernel_shape", {3, 3}), m.Ints("strides", {2, 2}), m.Ints("pads", {1, 1, 1, 1}),
            m.Int("ceil_mode", 1)});
  });
  Check("avgpool_ceil_incl", 13, {"x"}, {}, [](OnnxModel &m) {
    m.Node("AveragePool", {"x"}, {"y"},
           {m.Ints("kernel_shape", {3, 3}), m.Ints("strides", {2, 2}), m.Ints("pads", {1, 1, 1, 1}),
            m.Int("ceil_mode", 1), m.Int("count_include_pad", 1)});
  });
  Check("avgpool_excl", 13, {"x"}, {}, [](OnnxModel &m) {
    m.Node(
        "AveragePool", {"x"}, {"y"},
        {m.Ints("kernel_shape", {3, 3}), m.Ints("strides", {2, 2}), m.Ints("pads", {1, 1, 1, 1})});
  });
  Check("global_avg", 13, {"x"}, {},
        [](OnnxModel &m) { m.Node("GlobalAveragePool", {"x"}, {"y"}); });
  Check("global_max", 13, {"x"}, {}, [](OnnxModel &m) { m.Node("GlobalMaxPool", {"x"}, {"y"}); });
  Check("lrn", 13, {"x"}, {}, [](OnnxModel &m) {
    m.Node(
        "LRN", {"x"}, {"y"},
        {m.Int("size", 5), m.Float("alpha", 1e-4f), m.Float("beta", 0.75f), m.Float("bias", 2.0f)});
  });
}

TEST(OnnxOpParity, MatMulAndArithmetic) {
  Check("matmul_batched", 13, {"a", "b"}, {}, [](OnnxModel &m) {
    m.Node("MatMul", {"a", "b"}, {"y"});
  });
  Check("matmul_vec", 13, {"a", "b"}, {}, [](OnnxModel &m) {
    m.Node("MatMul", {"a", "b"}, {"y"});
  });
  Check("sub", 14, {"a", "b"}, {}, [](OnnxModel &m) { m.Node("Sub", {"a", "b"}, {"y"}); });
  Check("mul", 14, {"a", "b"}, {}, [](OnnxModel &m) { m.Node("Mul", {"a", "b"}, {"y"}); });
  Check("div", 14, {"a", "b"}, {}, [](OnnxModel &m) { m.Node("Div", {"a", "b"}, {"y"}); });
}

TEST(OnnxOpParity, LayoutOps) {
  Check("concat", 13, {"a", "b", "c"}, {}, [](OnnxModel &m) {
    m.Node("Concat", {"a", "b", "c"}, {"y"}, {m.Int("axis", 1)});
  });
  Check("transpose", 13, {"x"}, {}, [](OnnxModel &m) {
    m.Node("Transpose", {"x"}, {"y"}, {m.Ints("perm", {2, 0, 3, 1})});
  });
  Check("pad", 13, {"x"}, {}, [](OnnxModel &m) {
    // torch (1, 2, 0, 1) on (W, H) = ONNX begins (0, 0, 0, 1), ends (0, 0, 1, 2)
    m.InitI64("pads", {8}, {0, 0, 0, 1, 0, 0, 1, 2});
    m.Init("value", {}, {0.5f});
    m.Node("Pad", {"x", "pads", "value"}, {"y"});
  });
}

TEST(OnnxOpParity, BatchNormalizationAlone) {
  Check("batchnorm", 15, {"x"}, {"weight", "bias", "mean", "var"}, [](OnnxModel &m) {
    m.Node("BatchNormalization", {"x", "weight", "bias", "mean", "var"}, {"y"},
           {m.Float("epsilon", 1e-5f)});
  });
}

} // namespace
