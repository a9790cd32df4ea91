// nanoGPT's GPT as model.py writes it -- q, k, v = c_attn(x).split(C, dim=2),
// F.scaled_dot_product_attention(is_causal=True), wpe(arange(t)) -- exported
// with PyTorch's default ONNX exporter (tests/fixtures/make_gpt_sdpa_fixture.py:
// dynamo=True, opset 18, 2 layers, 2 heads, 32 wide, block 16, vocabulary 84),
// as written (optimize=False: SplitToSequence/SequenceAt, Range, CastLike,
// the scale's Sqrt/Div of shapes, the mask's Trilu/Equal/Where) and as the
// exporter's optimizer leaves it (the default): every shape op folds at
// import, each layer's attention is the fused causal Attention op (on the
// CPU packed: AttentionPacked on c_attn's rows), and the logits are
// PyTorch's.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "graph/ir.h"
#include "graph/ops.h"
#include "onnx/model_file.h"
#include "runtime/compile.h"
}
#include "tests/fixture.h"
#include "tests/run_plans.h"
#include "tests/testutil.h"

namespace {

using gcc_test::Fixture;

int CountOp(const gcc_graph *g, int op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    n += g->nodes[i].op == op;
  return n;
}

// The initial model's logits (8, 16, 84) on the fixture's batch, on the CPU
// plan (and with also_cuda on the host-emulated CUDA plan), against PyTorch's (float32 both).
// The bound is tests/gpt_export_test's for the same network and weights:
// each logit comes through two blocks of 32- to 128-term dot products,
// softmax over at most 16 keys and LayerNorms over 32 (1/std ~50 at this
// initialisation), a few float32 epsilons per operation in another order;
// 1e-4 of the largest logit is ~1700 float32 epsilons of it, and a wrong
// scale (1/D instead of 1/sqrt(D)), a missing or transposed mask or q/k/v
// taken from the wrong third changes logits by 1e-2 relative or more.
void CheckLogits(const char *onnx_name, bool also_cuda) {
  SCOPED_TRACE(onnx_name);
  std::string looked, err;
  std::string onnx = gcc_test::FindRunfile(std::string("tests/fixtures/") + onnx_name, &looked);
  std::string fix = gcc_test::FindRunfile("tests/fixtures/gpt_sdpa.fix", &looked);
  ASSERT_FALSE(onnx.empty() || fix.empty()) << looked;
  Fixture fx;
  ASSERT_TRUE(Fixture::Load(fix, &fx, &err)) << err;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_open(onnx.c_str(), &g, nullptr, &d), GCC_OK) << d.msg;
  // nothing of the shape arithmetic, the sequence or the mask is left: the
  // graph computes embeddings, LayerNorms, MatMuls, Slices of q/k/v...
  for (int op : {GCC_OP_TRILU, GCC_OP_EQUAL, GCC_OP_WHERE, GCC_OP_SQRT, GCC_OP_CAST})
    EXPECT_EQ(CountOp(g, op), 0) << gcc_op(op)->name;
  // ... and the attention pass makes each layer's chain one causal Attention
  gcc_options o{};
  o.mode = GCC_MODE_EVAL;
  o.batch_size = 8;
  FILE *sink = fopen("/dev/null", "w");
  o.warn_file = sink;
  gcc_graph *cg = nullptr;
  gcc_mem_plan mem{};
  EXPECT_EQ(gcc_compile_graph(g, &o, &cg, &mem, &d), GCC_OK) << d.msg;
  if (sink)
    fclose(sink);
  gcc_mem_plan_free(&mem);
  if (cg) {
    // on the CPU, with q, k, v the exporter's Split of c_attn (Slices),
    // packed (passes/packed_attention.c): AttentionPacked reads c_attn
    EXPECT_EQ(CountOp(cg, GCC_OP_ATTENTION_PACKED), 2);
    EXPECT_EQ(CountOp(cg, GCC_OP_ATTENTION), 0);
    EXPECT_EQ(CountOp(cg, GCC_OP_SOFTMAX), 0);
    for (int i = 0; i < cg->n_nodes; i++)
      if (cg->nodes[i].op == GCC_OP_ATTENTION_PACKED) {
        EXPECT_EQ(cg->nodes[i].n_inputs, 1) << "the mask is is_causal, not an input";
        EXPECT_EQ(cg->nodes[i].av[ATTN_IS_CAUSAL].i, 1);
        // 1/sqrt(16) as sqrt(0.25) twice in float32: exact
        EXPECT_FLOAT_EQ(cg->nodes[i].av[ATTN_SCALE].f, 0.25f);
      }
    gcc_graph_free(cg);
  }
  const gcc_test::FixtureArray &idx = fx.Get("idx"), &want = fx.Get("logits");
  ASSERT_EQ(idx.dims.size(), 2u);
  const int64_t B = idx.dims[0], T = idx.dims[1];
  ASSERT_EQ(want.numel(), B * T * 84);
  for (bool cuda : {false, true}) {
#ifdef GCC_NO_CUDA // tests/BUILD: defined in --config=cpu_only (no NVRTC)
    if (cuda)
      continue;
#endif
    if (cuda && !also_cuda)
      continue;
    SCOPED_TRACE(cuda ? "host-emulated CUDA plan" : "CPU plan");
    std::vector<gcc_test::PlanOutput> outs;
    std::string e = gcc_test::RunPlan(g, {idx.i64()}, B, cuda, &outs);
    ASSERT_EQ(e, "") << e;
    ASSERT_EQ(outs.size(), 1u);
    ASSERT_EQ(outs[0].f32.size(), (size_t)want.numel());
    double m = 0, diff = 0;
    for (int64_t i = 0; i < want.numel(); i++) {
      m = std::max(m, std::fabs((double)want.f32()[i]));
      diff = std::max(diff, std::fabs((double)outs[0].f32[i] - want.f32()[i]));
    }
    EXPECT_GT(m, 0.01);
    EXPECT_LE(diff, 1e-4 * m);
    std::printf("[gpt_sdpa] %s, %s: max |diff| %.3g of max |logit| %.3g\n", onnx_name,
                cuda ? "cuda (host-emulated)" : "cpu", diff, m);
  }
  gcc_graph_free(g);
}

TEST(GptSdpaExport, AsWrittenImportsFoldsAndComputesPyTorchsLogits) {
  CheckLogits("gpt_sdpa.onnx", true);
}

TEST(GptSdpaExport, AsOptimizedImportsFoldsAndComputesPyTorchsLogits) {
  CheckLogits("gpt_sdpa_opt.onnx", false); // the same IR ops: the CPU plan only
}

} // namespace
