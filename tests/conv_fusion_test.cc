// Conv -> Relu fused into one cuDNN call (issue 29): the fusion pass makes
// a float32 Conv whose output only a Relu reads one CUDNN group with it
// (codegen/fusion.h gcc_fusion_conv_relu), the plan hands the call the
// Relu's output, and the backend runs cudnnConvolutionBiasActivationForward
// (IMPLICIT_PRECOMP_GEMM) or the convolution and cudnnActivationForward.
// On the host backend (tests/host_backend.h) the call is the CPU Conv
// kernel followed by max(y, 0): its results are compared with a float64
// reference of ONNX Conv then Relu, within the float32 bound of the
// convolution's reduction. Where the Conv's output is read by something
// else too, nothing is fused and that output holds the pre-activation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "codegen/fusion.h"
#include "graph/builder.h"
#include "graph/ops.h"
#include "runtime/plan.h"
}
#include "tests/run_plans.h"

namespace {

struct ConvCase {
  int64_t n, c, h, w, m, k, stride, pad;
  bool bias;
  bool expose_conv; // the Conv's output is a graph output too: no fusion
};

struct Built {
  gcc_graph *g = nullptr;
  std::vector<float> wt, b;
};

Built Build(const ConvCase &cc, uint32_t seed) {
  Built r;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  r.wt.resize((size_t)(cc.m * cc.c * cc.k * cc.k));
  for (float &v : r.wt)
    v = u(rng);
  r.b.resize((size_t)cc.m);
  for (float &v : r.b)
    v = u(rng);
  gcc_builder *b = gcc_builder_new("conv_relu", 1);
  int64_t xd[4] = {GCC_BATCH_DIM, cc.c, cc.h, cc.w}, wd[4] = {cc.m, cc.c, cc.k, cc.k},
          bd[1] = {cc.m};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 4, xd);
  int W = gcc_build_const(b, "w", GCC_DT_FLOAT32, 4, wd, r.wt.data());
  int ins[3] = {x, W, cc.bias ? gcc_build_const(b, "b", GCC_DT_FLOAT32, 1, bd, r.b.data()) : -1};
  int y = gcc_build_op(b, GCC_OP_CONV, "conv", "conv_out", ins, cc.bias ? 3 : 2);
  int64_t st[2] = {cc.stride, cc.stride}, pd[4] = {cc.pad, cc.pad, cc.pad, cc.pad};
  gcc_build_set_ints(b, y, "strides", st, 2);
  gcc_build_set_ints(b, y, "pads", pd, 4);
  int z = gcc_build_relu(b, "relu", y);
  gcc_build_output(b, z);
  if (cc.expose_conv)
    gcc_build_output(b, y);
  gcc_diag d{};
  EXPECT_EQ(gcc_builder_finish(b, &r.g, &d), GCC_OK) << d.msg;
  return r;
}

// The float64 reference of conv(X, W) + B at every output, and the bound
// of a float32 evaluation: the K = c * k * k products summed in any order
// and the bias added, |err| <= (K + 1) u (sum |x w| + |b|) with u = 2^-24
// (Higham, the error of recursive or pairwise summation is below gamma_K).
void Reference(const ConvCase &cc, const std::vector<float> &x, const Built &bt,
               std::vector<double> *y, std::vector<double> *bound, int64_t *oh_out) {
  int64_t oh = (cc.h + 2 * cc.pad - cc.k) / cc.stride + 1;
  int64_t ow = (cc.w + 2 * cc.pad - cc.k) / cc.stride + 1;
  *oh_out = oh;
  y->assign((size_t)(cc.n * cc.m * oh * ow), 0.0);
  bound->assign(y->size(), 0.0);
  const double u = std::ldexp(1.0, -24), K = (double)(cc.c * cc.k * cc.k);
  for (int64_t n = 0; n < cc.n; n++)
    for (int64_t m = 0; m < cc.m; m++)
      for (int64_t i = 0; i < oh; i++)
        for (int64_t j = 0; j < ow; j++) {
          double s = cc.bias ? bt.b[(size_t)m] : 0.0, a = std::fabs(s);
          for (int64_t c = 0; c < cc.c; c++)
            for (int64_t p = 0; p < cc.k; p++)
              for (int64_t q = 0; q < cc.k; q++) {
                int64_t hi = i * cc.stride - cc.pad + p, wi = j * cc.stride - cc.pad + q;
                if (hi < 0 || hi >= cc.h || wi < 0 || wi >= cc.w)
                  continue;
                double t = (double)x[(size_t)(((n * cc.c + c) * cc.h + hi) * cc.w + wi)] *
                           (double)bt.wt[(size_t)(((m * cc.c + c) * cc.k + p) * cc.k + q)];
                s += t;
                a += std::fabs(t);
              }
          size_t o = (size_t)(((n * cc.m + m) * oh + i) * ow + j);
          (*y)[o] = s;
          (*bound)[o] = (K + 1) * u * a;
        }
}

int FusedGroups(const gcc_graph *model, int64_t batch) {
  gcc_options o{};
  o.mode = GCC_MODE_EVAL;
  o.batch_size = batch;
  o.device = GCC_DEV_CUDA(0);
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  FILE *sink = fopen("/dev/null", "w");
  o.warn_file = sink;
  gcc_graph *g = nullptr;
  gcc_mem_plan mem{};
  gcc_diag d{};
  EXPECT_EQ(gcc_compile_graph(model, &o, &g, &mem, &d), GCC_OK) << d.msg;
  fclose(sink);
  int fused = 0;
  for (int i = 0; g && i < g->n_nodes; i++) {
    int r = gcc_fusion_conv_relu(g, i);
    if (r < 0)
      continue;
    fused++;
    EXPECT_EQ(g->nodes[r].op, GCC_OP_RELU);
    EXPECT_EQ(g->nodes[i].group, g->nodes[r].group);
    EXPECT_EQ(g->groups[g->nodes[i].group].kind, GCC_GROUP_CUDNN);
  }
  gcc_mem_plan_free(&mem);
  gcc_graph_free(g);
  return fused;
}

TEST(ConvReluFusion, FusedCallMatchesTheFloat64ReferenceOfConvThenRelu) {
  const ConvCase cases[] = {
      {2, 3, 9, 9, 4, 3, 1, 1, true, false},  // 3x3, pad 1
      {3, 5, 11, 7, 6, 3, 2, 0, true, false}, // stride 2, no pad, non-square
      {2, 4, 8, 8, 8, 1, 1, 0, true, false},  // 1x1
      {2, 3, 9, 9, 4, 3, 1, 1, false, false}, // no bias: convolution + activation
      {2, 3, 9, 9, 4, 3, 1, 1, true, true},   // the Conv's output is read too: not fused
  };
  gcc_host_test::HostBackend *hb = gcc_test::SharedHostBackend();
  for (const ConvCase &cc : cases) {
    SCOPED_TRACE("c " + std::to_string(cc.c) + " m " + std::to_string(cc.m) + " k " +
                 std::to_string(cc.k) + " s " + std::to_string(cc.stride) +
                 (cc.bias ? " bias" : " no bias") + (cc.expose_conv ? " conv exposed" : ""));
    Built bt = Build(cc, 7 + (uint32_t)cc.k);
    ASSERT_NE(bt.g, nullptr);
    EXPECT_EQ(FusedGroups(bt.g, cc.n), cc.expose_conv ? 0 : 1);
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x((size_t)(cc.n * cc.c * cc.h * cc.w));
    for (float &v : x)
      v = u(rng);
    x[0] = NAN; // NaN propagates through the ReLU, as torch.relu
    std::vector<double> ref, bound;
    int64_t oh = 0;
    Reference(cc, x, bt, &ref, &bound, &oh);
    std::vector<gcc_test::PlanOutput> out;
    int before = hb->conv_relu_calls;
    ASSERT_EQ(gcc_test::RunPlan(bt.g, {x.data()}, cc.n, true, &out), "");
    EXPECT_EQ(hb->conv_relu_calls - before, cc.expose_conv ? 0 : 1);
    ASSERT_EQ(out.size(), cc.expose_conv ? 2u : 1u);
    ASSERT_EQ(out[0].f32.size(), ref.size());
    int nan = 0, zeros = 0;
    for (size_t i = 0; i < ref.size(); i++) {
      float got = out[0].f32[i];
      if (std::isnan(ref[i])) {
        EXPECT_TRUE(std::isnan(got)) << i;
        nan++;
        continue;
      }
      double want = ref[i] > 0 ? ref[i] : 0.0;
      zeros += want == 0.0;
      // max(., 0) is 1-Lipschitz: the convolution's bound holds after it
      ASSERT_LE(std::fabs((double)got - want), bound[i]) << "output " << i;
      if (cc.expose_conv) { // the pre-activation, negative values and all
        ASSERT_LE(std::fabs((double)out[1].f32[i] - ref[i]), bound[i]) << "conv output " << i;
      }
    }
    EXPECT_GT(nan, 0);   // the NaN reached the outputs of image 0
    EXPECT_GT(zeros, 0); // the ReLU cut something
    EXPECT_LT(zeros, (int)ref.size());
    gcc_graph_free(bt.g);
  }
}

} // namespace
