// nanoGPT's GPT written in PyTorch and exported with PyTorch's default ONNX
// exporter (tests/fixtures/make_gpt_export_fixture.py: dynamo=True, opset
// 18, 2 layers, 2 heads, 32 wide, block 16, vocabulary 84): gcc-train
// imports it (the dynamo exporter's views reshape to Concat(Shape(idx)[0],
// ...) with allowzero = 1), computes PyTorch's logits, and trains it from
// the command line on the Shakespeare bytes (--loss cross-entropy --dataset
// text, with and without --grad-accum).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "graph/ir.h"
#include "onnx/model_file.h"
}
#include "tests/fixture.h"
#include "tests/run_plans.h"
#include "tests/subprocess.h"
#include "tests/testutil.h"

namespace {

using gcc_test::Fixture;

// The initial model's logits (8, 16, 84) on the fixture's first batch, on
// the CPU plan, against PyTorch's (float32 both). Each logit is ln_f's
// output (a LayerNorm over 32) dotted with a wte row (32 terms), after two
// blocks of 32- to 128-term dot products, softmax over at most 16 keys and
// LayerNorms over 32: different summation orders give a few float32
// epsilons per operation, amplified by LayerNorm's 1/std (~50 here: the
// residual stream starts at N(0, 0.02) weights). 1e-4 of the largest logit
// is ~1700 float32 epsilons of it: above that rounding, below any wrong
// term (a missing mask lets a position see the future: changes of order 1e-2
// relative; a wrong weight order, of order 1).
TEST(GptExport, ImportsAndComputesPyTorchsLogits) {
  std::string looked, err;
  std::string onnx = gcc_test::FindRunfile("tests/fixtures/gpt_export.onnx", &looked);
  std::string fix = gcc_test::FindRunfile("tests/fixtures/gpt_export.fix", &looked);
  ASSERT_FALSE(onnx.empty() || fix.empty()) << looked;
  Fixture fx;
  ASSERT_TRUE(Fixture::Load(fix, &fx, &err)) << err;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_open(onnx.c_str(), &g, nullptr, &d), GCC_OK) << d.msg;
  const gcc_test::FixtureArray &idx = fx.Get("idx"), &want = fx.Get("logits0");
  ASSERT_EQ(idx.dims.size(), 3u);
  const int64_t B = idx.dims[1], T = idx.dims[2];
  std::vector<gcc_test::PlanOutput> outs;
  std::string e = gcc_test::RunPlan(g, {idx.i64()}, B, false, &outs);
  gcc_graph_free(g);
  ASSERT_EQ(e, "") << e;
  ASSERT_EQ(outs.size(), 1u);
  ASSERT_EQ(outs[0].f32.size(), (size_t)want.numel());
  ASSERT_EQ(want.numel(), B * T * 84);
  double m = 0, diff = 0;
  for (int64_t i = 0; i < want.numel(); i++) {
    m = std::max(m, std::fabs((double)want.f32()[i]));
    diff = std::max(diff, std::fabs((double)outs[0].f32[i] - want.f32()[i]));
  }
  EXPECT_GT(m, 0.01);
  EXPECT_LE(diff, 1e-4 * m);
  std::printf("[gpt_export] logits: max |diff| %.3g of max |logit| %.3g\n", diff, m);
}

gcc_test::ProcResult Train(const std::vector<std::string> &args) {
  gcc_test::ProcOptions o;
  o.timeout_s = 120;
  return gcc_test::RunRunfile("cli/gcc-train", args, o);
}

// The README's command on the exported model: the recipe flags make it
// trainable (the loss over the B*T tokens, the targets, AdamW); 20 steps
// lower the loss from ln 84 = 4.43 (PyTorch's run of the same recipe:
// 4.41 -> 3.53, tests/fixtures/gpt_export.fix).
TEST(GptExport, TrainsFromTheCommandLine) {
  std::string looked;
  std::string onnx = gcc_test::FindRunfile("tests/fixtures/gpt_export.onnx", &looked);
  std::string text = gcc_test::FindRunfile("data/shakespeare/input.txt", &looked);
  ASSERT_FALSE(onnx.empty() || text.empty()) << looked;
  for (const char *accum : {"1", "2"}) {
    gcc_test::ProcResult r = Train({onnx,
                                    "--loss",
                                    "cross-entropy",
                                    "--dataset",
                                    "text",
                                    "--data",
                                    text,
                                    "--optimizer",
                                    "adamw",
                                    "--lr",
                                    "3e-3",
                                    "--betas",
                                    "0.9,0.99",
                                    "--weight-decay",
                                    "0.1",
                                    "--clip-grad-norm",
                                    "1.0",
                                    "--batch-size",
                                    "8",
                                    "--grad-accum",
                                    accum,
                                    "--max-steps",
                                    "20",
                                    "--eval-batches",
                                    "4",
                                    "--device",
                                    "cpu",
                                    "--threads",
                                    "1",
                                    "--no-output"});
    ASSERT_EQ(r.exit_code, 0) << r;
    size_t at = r.out.find("step 20: train loss ");
    ASSERT_NE(at, std::string::npos) << r.out;
    double loss = std::atof(r.out.c_str() + at + 20);
    EXPECT_LT(loss, 3.9) << r.out;
    EXPECT_GT(loss, 2.5) << r.out;
  }
}

} // namespace
