// onnx_gelu_test: GELU (issue 30) against PyTorch. tests/fixtures/gelu.fix
// and the gelu_mlp_*.onnx files are made by tests/fixtures/make_gelu_fixtures.py
// (torch.nn.GELU both approximations, their autograd gradients, and a small
// MLP exported by torch.onnx.export's TorchScript exporter at opset 17 -- the
// erf / tanh formula spelled out in Div, Erf, Add, Mul or Mul, Add, Tanh --
// and at opset 20 -- the Gelu op). Every check runs on the CPU and through
// the CUDA plan on the host backend (the generated pointwise kernels
// host-emulated).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

extern "C" {
#include "graph/builder.h"
#include "graph/ops.h"
#include "onnx/export.h"
#include "onnx/import.h"
}
#include "tests/fixture.h"
#include "tests/onnx_builder.h"
#include "tests/run_plans.h"
#include "tests/testutil.h"

namespace {

using gcc_test::Fixture;
using gcc_test::FixtureArray;
using gcc_test::OnnxModel;
using gcc_test::PlanOutput;

std::string Runfile(const std::string &rel) {
  std::string p = gcc_test::Runfile(rel);
  return p.empty() ? rel : p;
}

const Fixture &Fix() {
  static Fixture *f = [] {
    auto *fx = new Fixture();
    std::string err;
    if (!Fixture::Load(Runfile("tests/fixtures/gelu.fix"), fx, &err))
      ADD_FAILURE() << err;
    return fx;
  }();
  return *f;
}

// |got - want| <= tol_abs + tol_rel |want| element by element.
void ExpectNear(const std::vector<float> &got, const FixtureArray &want, double tol_abs,
                double tol_rel, const std::string &what) {
  ASSERT_EQ(static_cast<int64_t>(got.size()), want.numel()) << what;
  const float *w = want.f32();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(static_cast<double>(got[i]) - w[i]);
    worst = std::max(worst, err);
    ASSERT_LE(err, tol_abs + tol_rel * std::fabs(w[i]))
        << what << ": element " << i << " got " << got[i] << " want " << w[i];
  }
  printf("%s: max |error| %.3g\n", what.c_str(), worst);
}

std::map<int, int> OpCounts(const gcc_graph *g) {
  std::map<int, int> c;
  for (int i = 0; i < g->n_nodes; ++i)
    c[g->nodes[i].op]++;
  return c;
}

// The MLP (Linear 8 -> 16, GELU, Linear 16 -> 4) as the TorchScript exporter
// writes it: at opset 17 the GELU formula becomes one Gelu node, at opset 20
// it is one. The output matches PyTorch's on the CPU and the CUDA plan.
// Tolerance: each output sums 16 products of O(1) terms after a GELU of
// O(4) inputs; float32 rounding of the two GEMMs (<= 24 terms, 2^-24
// relative each) and erff / tanhf (a few ulps) stay below 1e-6 in absolute
// terms here; 1e-5 + 1e-5 |want| leaves room for a different summation
// order (oneDNN / OpenBLAS / the host-emulated cuBLASLt), and a wrong
// approximation (erf vs tanh differ by up to 5e-4 on [-4, 4]) fails it.
TEST(OnnxGelu, TorchScriptExportsAtOpset17And20MatchPyTorch) {
  const Fixture &f = Fix();
  const FixtureArray &x = f.Get("mlp.x");
  for (const char *a : {"none", "tanh"}) {
    for (int opset : {17, 20}) {
      std::string file =
          std::string("tests/fixtures/gelu_mlp_") + a + "_opset" + std::to_string(opset) + ".onnx";
      SCOPED_TRACE(file);
      gcc_graph *g = nullptr;
      gcc_diag d{};
      ASSERT_EQ(gcc_onnx_import_file(Runfile(file).c_str(), &g, nullptr, &d), GCC_OK) << d.msg;
      std::map<int, int> ops = OpCounts(g);
      EXPECT_EQ(g->n_nodes, 3) << "Gemm, Gelu, Gemm";
      EXPECT_EQ(ops[GCC_OP_GELU], 1);
      EXPECT_EQ(ops[GCC_OP_GEMM], 2);
      for (int i = 0; i < g->n_nodes; ++i)
        if (g->nodes[i].op == GCC_OP_GELU) {
          const gcc_attr *ap = gcc_node_attr(&g->nodes[i], "approximate");
          ASSERT_NE(ap, nullptr);
          EXPECT_STREQ(ap->s, a);
        }
      for (bool cuda : {false, true}) {
        std::vector<PlanOutput> outs;
        std::string err = gcc_test::RunPlan(g, {x.bytes.data()}, x.dims[0], cuda, &outs);
        ASSERT_EQ(err, "") << (cuda ? "cuda" : "cpu");
        ExpectNear(outs[0].f32, f.Get(std::string("mlp.y_") + a), 1e-5, 1e-5,
                   std::string(a) + (cuda ? " cuda" : " cpu"));
      }
      gcc_graph_free(g);
    }
  }
}

// One node of Gelu or GeluGrad built in the IR, run on the CPU and the
// host-emulated CUDA plan against F.gelu and its autograd gradient on [-6,
// 6]. Tolerance: one pointwise evaluation in float32, erff / tanhf / expf
// within a few ulps and a handful of roundings: 4e-6 + 4e-6 |want| (|y| <=
// 6: an ulp is 4.8e-7).
TEST(OnnxGelu, ActivationAndGradientMatchPyTorch) {
  const Fixture &f = Fix();
  const FixtureArray &x = f.Get("act.x"), &dy = f.Get("act.dy");
  for (const char *a : {"none", "tanh"}) {
    for (bool grad : {false, true}) {
      SCOPED_TRACE(std::string(a) + (grad ? " GeluGrad" : " Gelu"));
      gcc_builder *b = gcc_builder_new("gelu", 1);
      ASSERT_NE(b, nullptr);
      int xi = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, x.dims.data());
      int y;
      if (grad) {
        int dyi = gcc_build_input(b, "dy", GCC_DT_FLOAT32, 2, dy.dims.data());
        int ins[2] = {dyi, xi};
        y = gcc_build_op(b, GCC_OP_GELU_GRAD, "gelu_grad", "dx", ins, 2);
      } else {
        y = gcc_build_op(b, GCC_OP_GELU, "gelu", "y", &xi, 1);
      }
      ASSERT_EQ(gcc_node_set_string(b->g, b->g->values[y].producer, "approximate", a), GCC_OK);
      gcc_build_output(b, y);
      gcc_graph *g = nullptr;
      gcc_diag d{};
      ASSERT_EQ(gcc_builder_finish(b, &g, &d), GCC_OK) << d.msg;
      std::vector<const void *> feeds = {x.bytes.data()};
      if (grad)
        feeds.push_back(dy.bytes.data());
      for (bool cuda : {false, true}) {
        std::vector<PlanOutput> outs;
        ASSERT_EQ(gcc_test::RunPlan(g, feeds, x.dims[0], cuda, &outs), "");
        ExpectNear(outs[0].f32, f.Get(std::string(grad ? "act.dx_" : "act.y_") + a), 4e-6, 4e-6,
                   std::string(a) + (grad ? " dx" : " y") + (cuda ? " cuda" : " cpu"));
      }
      gcc_graph_free(g);
    }
  }
}

// The erf pattern written by hand, variants the TorchScript exporter does
// not use but other writers do: Erf(x * (1 / sqrt 2)), the 0.5 applied to
// x first. One Gelu node; with an intermediate also read elsewhere (a graph
// output) nothing is fused and the formula runs as written.
TEST(OnnxGelu, ErfPatternVariantsAndASharedIntermediate) {
  const Fixture &f = Fix();
  const FixtureArray &x = f.Get("act.x");
  for (bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "the Erf output is also a graph output" : "fused");
    OnnxModel m(17);
    m.Input("x", x.dims);
    m.Init("inv_sqrt2", {}, {0.70710678f});
    m.Init("one", {}, {1.0f});
    m.Init("half", {}, {0.5f});
    m.Node("Mul", {"x", "inv_sqrt2"}, {"s"});
    m.Node("Erf", {"s"}, {"e"});
    m.Node("Add", {"one", "e"}, {"a"});
    m.Node("Mul", {"half", "x"}, {"hx"});
    m.Node("Mul", {"a", "hx"}, {"y"});
    m.Output("y");
    if (shared)
      m.Output("e");
    std::vector<uint8_t> bytes = m.Bytes();
    gcc_graph *g = nullptr;
    gcc_diag d{};
    ASSERT_EQ(gcc_onnx_import(bytes.data(), bytes.size(), "erf_pattern", nullptr, &g, nullptr, &d),
              GCC_OK)
        << d.msg;
    std::map<int, int> ops = OpCounts(g);
    EXPECT_EQ(ops[GCC_OP_GELU], shared ? 0 : 1);
    EXPECT_EQ(ops[GCC_OP_ERF], shared ? 1 : 0);
    EXPECT_EQ(g->n_nodes, shared ? 5 : 1);
    for (bool cuda : {false, true}) {
      std::vector<PlanOutput> outs;
      ASSERT_EQ(gcc_test::RunPlan(g, {x.bytes.data()}, x.dims[0], cuda, &outs), "");
      ExpectNear(outs[0].f32, f.Get("act.y_none"), 4e-6, 4e-6, cuda ? "cuda" : "cpu");
    }
    gcc_graph_free(g);
  }
}

// A graph with a Gelu exports at opset 20 (ONNX's first with Gelu) with its
// `approximate`, and imports back as the same node.
TEST(OnnxGelu, ExportWritesOpset20AndImportsBack) {
  for (const char *a : {"none", "tanh"}) {
    SCOPED_TRACE(a);
    gcc_builder *b = gcc_builder_new("gelu_export", 1);
    ASSERT_NE(b, nullptr);
    int64_t dims[2] = {GCC_BATCH_DIM, 3};
    int xi = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, dims);
    int y = gcc_build_op(b, GCC_OP_GELU, "gelu", "y", &xi, 1);
    ASSERT_EQ(gcc_node_set_string(b->g, b->g->values[y].producer, "approximate", a), GCC_OK);
    gcc_build_output(b, y);
    gcc_graph *g = nullptr, *back = nullptr;
    gcc_diag d{};
    ASSERT_EQ(gcc_builder_finish(b, &g, &d), GCC_OK) << d.msg;
    uint8_t *bytes = nullptr;
    size_t size = 0;
    ASSERT_EQ(gcc_onnx_export_memory(g, nullptr, &bytes, &size, &d), GCC_OK) << d.msg;
    gcc_onnx_report rep{};
    ASSERT_EQ(gcc_onnx_import(bytes, size, "exported", nullptr, &back, &rep, &d), GCC_OK) << d.msg;
    EXPECT_EQ(rep.opset, 20);
    ASSERT_EQ(back->n_nodes, 1);
    EXPECT_EQ(back->nodes[0].op, GCC_OP_GELU);
    const gcc_attr *ap = gcc_node_attr(&back->nodes[0], "approximate");
    ASSERT_NE(ap, nullptr);
    EXPECT_STREQ(ap->s, a);
    free(bytes);
    gcc_graph_free(back);
    gcc_graph_free(g);
  }
}

} // namespace
