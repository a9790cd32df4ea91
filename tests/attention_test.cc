// The fused scaled dot-product attention (graph/ops.h Attention,
// AttentionGrad; runtime/cpu/cpu_attention.c, codegen/emit_attention.c,
// passes/attention.c):
//  * against PyTorch's F.scaled_dot_product_attention, forward and backward
//    (tests/fixtures/attention_sdpa.fix, made by make_attention_fixture.py),
//    on the CPU plan and on the host-emulated CUDA plan;
//  * run-to-run determinism: the CPU plan bitwise equal over two runs and
//    over 1 and 2 threads; the generated kernels bitwise equal with the
//    threads of a block run in either order, no divergent barrier, and
//    compiled by NVRTC and ptxas for sm_80 and sm_90;
//  * the attention pass on chains built with MatMul, Transpose, Mul, Div,
//    Add and Softmax as the exporters write them, and the chains it must
//    leave alone.
//  Gradient checks by finite differences: tests/op_gradcheck_test.cc
//  (AttentionGrad.*).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "codegen/emit.h"
#include "codegen/nvrtc.h"
#include "graph/builder.h"
#include "graph/ops.h"
#include "graph/philox.h"
#include "runtime/compile.h"
#include "runtime/cpu/cpu_parallel.h"
#include "runtime/plan.h"
}
#include "tests/fixture.h"
#include "tests/kernel_emulation.h"
#include "tests/run_plans.h"
#include "tests/testutil.h"

namespace {

using gcc_test::PlanOutput;
using gcc_test::RunPlan;
using Dims = std::vector<int64_t>;

int64_t Numel(const Dims &d) {
  int64_t n = 1;
  for (int64_t x : d)
    n *= x;
  return n;
}

bool BuiltWithNvrtc() {
  int major = 0, minor = 0;
  return gcc_nvrtc_version(&major, &minor) == GCC_OK;
}

std::vector<float> Randn(std::mt19937_64 &g, int64_t n, float sd = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (float &x : v)
    x = nd(g);
  return v;
}

// Dropout's mask (graph/philox.h) of n elements under `key` at `step`:
// element f takes word f % 4 of block f / 4, kept when >= floor(p 2^32).
std::vector<int> DropoutKeep(int64_t n, float p, uint64_t key, int64_t step) {
  std::vector<int> keep(static_cast<size_t>(n));
  const double thr = std::floor(static_cast<double>(p) * 4294967296.0);
  for (int64_t f = 0; f < n; ++f) {
    unsigned w[4];
    gcc_dropout_block(key, f / 4, step, w);
    keep[f] = static_cast<double>(w[f % 4]) >= thr;
  }
  return keep;
}

// float64 softmax(Q K^T * scale + mask) V and each row's logsumexp over
// [B, H, T, D] (causal: key j visible to row i when j <= i). `keep`
// (optional): dropout p on the probabilities, element (bh, i, j) kept when
// keep[(bh Tq + i) Tk + j], then scaled by 1 / (1 - p); L is unchanged.
void RefAttention(const float *q, const float *k, const float *v, const float *mask, int64_t BH,
                  int64_t Tq, int64_t Tk, int64_t D, int64_t E, bool causal, double scale,
                  std::vector<double> *o, std::vector<double> *lse,
                  const std::vector<int> *keep = nullptr, double p = 0) {
  o->assign(static_cast<size_t>(BH * Tq * E), 0.0);
  lse->assign(static_cast<size_t>(BH * Tq), 0.0);
  std::vector<double> s(static_cast<size_t>(Tk));
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t i = 0; i < Tq; ++i) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < Tk; ++j) {
        double x = 0;
        for (int64_t d = 0; d < D; ++d)
          x += static_cast<double>(q[(bh * Tq + i) * D + d]) * k[(bh * Tk + j) * D + d];
        x = x * scale + (mask ? mask[i * Tk + j] : 0.0f);
        if (causal && j > i)
          x = -INFINITY;
        s[j] = x;
        mx = std::max(mx, x);
      }
      double sum = 0;
      for (int64_t j = 0; j < Tk; ++j)
        sum += std::exp(s[j] - mx);
      for (int64_t e = 0; e < E; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < Tk; ++j) {
          double pij = std::exp(s[j] - mx) / sum;
          if (keep)
            pij = (*keep)[(bh * Tq + i) * Tk + j] ? pij / (1.0 - p) : 0.0;
          acc += pij * v[(bh * Tk + j) * E + e];
        }
        (*o)[(bh * Tq + i) * E + e] = acc;
      }
      (*lse)[bh * Tq + i] = mx + std::log(sum);
    }
}

// A graph of inputs Q, K, V, dO (and a mask [Tq, Tk]) running Attention and
// AttentionGrad, outputs O, L, dQ, dK, dV.
gcc_graph *FusedGraph(const Dims &qd, const Dims &kd, const Dims &vd, bool mask, bool causal,
                      float scale) {
  gcc_builder *b = gcc_builder_new("attention", 1);
  int q = gcc_build_input(b, "Q", GCC_DT_FLOAT32, 4, qd.data());
  int k = gcc_build_input(b, "K", GCC_DT_FLOAT32, 4, kd.data());
  int v = gcc_build_input(b, "V", GCC_DT_FLOAT32, 4, vd.data());
  Dims od = qd;
  od[3] = vd[3];
  int dout = gcc_build_input(b, "dO", GCC_DT_FLOAT32, 4, od.data());
  int m = -1;
  if (mask) {
    int64_t md[2] = {qd[2], kd[2]};
    m = gcc_build_input(b, "M", GCC_DT_FLOAT32, 2, md);
  }
  gcc_graph *g = b->g;
  gcc_diag d{};
  int o = -1, l = -1, dq = -1, dk = -1, dv = -1, n1 = -1, n2 = -1;
  EXPECT_EQ(gcc_graph_add_temp(g, "O", GCC_VALUE_ACTIVATION, &o, &d), GCC_OK);
  EXPECT_EQ(gcc_graph_add_temp(g, "L", GCC_VALUE_ACTIVATION, &l, &d), GCC_OK);
  EXPECT_EQ(gcc_graph_add_temp(g, "dQ", GCC_VALUE_ACTIVATION, &dq, &d), GCC_OK);
  EXPECT_EQ(gcc_graph_add_temp(g, "dK", GCC_VALUE_ACTIVATION, &dk, &d), GCC_OK);
  EXPECT_EQ(gcc_graph_add_temp(g, "dV", GCC_VALUE_ACTIVATION, &dv, &d), GCC_OK);
  int in1[4] = {q, k, v, m}, out1[2] = {o, l};
  EXPECT_EQ(gcc_graph_add_node(g, "attn", GCC_OP_ATTENTION, in1, mask ? 4 : 3, out1, 2, &n1, &d),
            GCC_OK)
      << d.msg;
  int in2[7] = {q, k, v, o, l, dout, m}, out2[3] = {dq, dk, dv};
  EXPECT_EQ(gcc_graph_add_node(g, "attn_grad", GCC_OP_ATTENTION_GRAD, in2, mask ? 7 : 6, out2, 3,
                               &n2, &d),
            GCC_OK)
      << d.msg;
  for (int n : {n1, n2}) {
    if (causal) {
      EXPECT_EQ(gcc_node_set_int(g, n, "is_causal", 1), GCC_OK);
    }
    if (scale != 0.0f) {
      EXPECT_EQ(gcc_node_set_float(g, n, "scale", scale), GCC_OK);
    }
  }
  for (int x : {o, l, dq, dk, dv})
    gcc_build_output(b, x);
  gcc_graph *out = nullptr;
  EXPECT_EQ(gcc_builder_finish(b, &out, &d), GCC_OK) << d.msg;
  return out;
}

struct GraphFree {
  void operator()(gcc_graph *g) const { gcc_graph_free(g); }
};
using GraphPtr = std::unique_ptr<gcc_graph, GraphFree>;

// Largest |got - want| over the largest |want| (0 when want is all 0).
double MaxErr(const float *got, const double *want, int64_t n, double *max_ref) {
  double e = 0, m = 0;
  for (int64_t i = 0; i < n; ++i) {
    e = std::max(e, std::fabs(static_cast<double>(got[i]) - want[i]));
    m = std::max(m, std::fabs(want[i]));
  }
  *max_ref = m;
  return e;
}

// ---- PyTorch ---------------------------------------------------------------------

// The bound on |ours - PyTorch's float64| per tensor: float32 rounding
// (2^-24 relative per operation) accumulated over the longest chain of
// sums an element goes through (the D- and Dv-term dot products of the
// scores and dP, the Tk-term softmax sum and P V, the Tq- or Tk-term sums
// of dQ / dK / dV), times the largest magnitude involved (that of the
// reference tensor, at least 1: the scores and probabilities are O(1)),
// with a factor 8 for exp's few ulps and the cancellation in dP - D_i. The
// errors observed are printed; they use a few percent of it.
double Bound(int64_t terms, double max_ref) {
  return 8.0 * static_cast<double>(terms) * std::ldexp(1.0, -24) * std::max(1.0, max_ref);
}

TEST(Attention, MatchesPyTorchSdpaForwardAndBackward) {
  gcc_test::Fixture fx;
  std::string err;
  ASSERT_TRUE(
      gcc_test::Fixture::Load(gcc_test::Runfile("tests/fixtures/attention_sdpa.fix"), &fx, &err))
      << err;
  int cases = 0;
  for (int c = 0; fx.Has("c" + std::to_string(c) + ".q"); ++c, ++cases) {
    const std::string p = "c" + std::to_string(c) + ".";
    const auto &q = fx.Get(p + "q"), &k = fx.Get(p + "k"), &v = fx.Get(p + "v"),
               &dout = fx.Get(p + "do");
    const double *attr = fx.Get(p + "attr").f64();
    const bool causal = attr[0] != 0, has_mask = fx.Has(p + "mask");
    const float scale = static_cast<float>(attr[1]);
    GraphPtr g(FusedGraph(q.dims, k.dims, v.dims, has_mask, causal, scale));
    ASSERT_NE(g, nullptr);
    std::vector<const void *> ins = {q.f32(), k.f32(), v.f32(), dout.f32()};
    if (has_mask)
      ins.push_back(fx.Get(p + "mask").f32());
    const int64_t Tq = q.dims[2], Tk = k.dims[2], D = q.dims[3], E = v.dims[3];
    for (bool cuda : {false, true}) {
      if (cuda && !BuiltWithNvrtc())
        continue; // --config=cpu_only: no CUDA plan (the CPU half still runs)
      SCOPED_TRACE(p + (cuda ? " host-emulated CUDA plan" : " CPU plan"));
      std::vector<PlanOutput> outs;
      ASSERT_EQ(RunPlan(g.get(), ins, 1, cuda, &outs, 2), "");
      ASSERT_EQ(outs.size(), 5u);
      const char *names[] = {"o", "dq", "dk", "dv"};
      const int idx[] = {0, 2, 3, 4};
      const int64_t terms[] = {D + Tk, D + E + Tk, D + E + Tq, D + Tq};
      for (int t = 0; t < 4; ++t) {
        const auto &ref = fx.Get(p + names[t]);
        ASSERT_EQ(static_cast<int64_t>(outs[idx[t]].f32.size()), ref.numel()) << names[t];
        double mref = 0, e = MaxErr(outs[idx[t]].f32.data(), ref.f64(), ref.numel(), &mref);
        double tol = Bound(terms[t], mref);
        EXPECT_LE(e, tol) << names[t] << ": max |ours - PyTorch float64| " << e;
        std::printf("[attention] %s%-3s %-4s max err %.3g (bound %.3g, max |ref| %.3g)\n",
                    p.c_str(), names[t], cuda ? "cuda" : "cpu", e, tol, mref);
      }
      // PyTorch's own float32 result differs from the float64 one by its
      // rounding; ours stays within the same bound of it
      const auto &o32 = fx.Get(p + "o32");
      double e32 = 0, m32 = 0;
      for (int64_t i = 0; i < o32.numel(); ++i) {
        e32 = std::max(e32, std::fabs(static_cast<double>(outs[0].f32[i]) - o32.f32()[i]));
        m32 = std::max(m32, static_cast<double>(std::fabs(o32.f32()[i])));
      }
      EXPECT_LE(e32, 2 * Bound(D + Tk, m32)) << "O against PyTorch's float32 SDPA";
      // L: the rows' logsumexp against float64
      std::vector<double> ro, rl;
      RefAttention(q.f32(), k.f32(), v.f32(), has_mask ? fx.Get(p + "mask").f32() : nullptr,
                   q.dims[0] * q.dims[1], Tq, Tk, D, E, causal,
                   scale != 0.0f ? scale : 1.0 / std::sqrt(static_cast<double>(D)), &ro, &rl);
      double ml = 0,
             el = MaxErr(outs[1].f32.data(), rl.data(), static_cast<int64_t>(rl.size()), &ml);
      EXPECT_LE(el, Bound(D + Tk, ml)) << "L (logsumexp)";
    }
  }
  EXPECT_EQ(cases, 5) << "the fixture's cases (make_attention_fixture.py CASES)";
}

// ---- determinism -------------------------------------------------------------------

// Two key lengths: 80 (two key blocks: the two-pass backward) and 48 (one
// key block: the one-pass backward of a GPT's short context).
TEST(Attention, CpuPlanIsBitwiseDeterministicOverRunsAndThreads) {
  for (int64_t tk : {80, 48}) {
    const Dims qd = {3, 4, 96, 32}, kd = {3, 4, tk, 32}, vd = {3, 4, tk, 24};
    std::mt19937_64 r(7);
    std::vector<float> q = Randn(r, Numel(qd)), k = Randn(r, Numel(kd)), v = Randn(r, Numel(vd)),
                       dout = Randn(r, 3 * 4 * 96 * 24), mask = Randn(r, 96 * tk, 0.3f);
    for (bool causal : {false, true}) {
      GraphPtr g(FusedGraph(qd, kd, vd, true, causal, 0.0f));
      ASSERT_NE(g, nullptr);
      std::vector<const void *> ins = {q.data(), k.data(), v.data(), dout.data(), mask.data()};
      std::vector<PlanOutput> a, b, c;
      ASSERT_EQ(RunPlan(g.get(), ins, 1, false, &a, 2), "");
      ASSERT_EQ(RunPlan(g.get(), ins, 1, false, &b, 2), "");
      ASSERT_EQ(RunPlan(g.get(), ins, 1, false, &c, 1), "");
      ASSERT_EQ(a.size(), 5u);
      for (size_t t = 0; t < a.size(); ++t) {
        ASSERT_EQ(a[t].f32.size(), b[t].f32.size());
        EXPECT_EQ(std::memcmp(a[t].f32.data(), b[t].f32.data(), a[t].f32.size() * sizeof(float)), 0)
            << "output " << t << " differs between two runs (tk " << tk << ", causal " << causal
            << ")";
        EXPECT_EQ(std::memcmp(a[t].f32.data(), c[t].f32.data(), a[t].f32.size() * sizeof(float)), 0)
            << "output " << t << " differs between 2 threads and 1 (tk " << tk << ", causal "
            << causal << ")";
      }
    }
  }
}

// The kernels' 8-float forms (what a CPU with AVX2 but not AVX-512 runs;
// gcc_cpu_set_narrow_vectors(1) makes an AVX-512 machine run them too):
// within the float64 bound of PyTorch's SDPA on the fixture's cases, and
// bit for bit the machine's own forms, forward and backward, with and
// without a mask, causal or not, over one and two key blocks. The sums are
// grouped alike in both forms and both fuse multiply-adds, so the bits
// agree (on an AVX2 machine both runs take the 8-float forms; on one
// without AVX2, and in the ASan build, which has no ISA clones, neither
// does, and the test says so).
struct NarrowGuard {
  ~NarrowGuard() { gcc_cpu_set_narrow_vectors(0); }
};

TEST(Attention, Avx2FormsMatchPyTorchAndTheMachinesFormsBitwise) {
  NarrowGuard guard;
  gcc_test::Fixture fx;
  std::string err;
  ASSERT_TRUE(
      gcc_test::Fixture::Load(gcc_test::Runfile("tests/fixtures/attention_sdpa.fix"), &fx, &err))
      << err;
  bool narrow = false;
  for (int c = 0; fx.Has("c" + std::to_string(c) + ".q"); ++c) {
    const std::string p = "c" + std::to_string(c) + ".";
    const auto &q = fx.Get(p + "q"), &k = fx.Get(p + "k"), &v = fx.Get(p + "v"),
               &dout = fx.Get(p + "do");
    const double *attr = fx.Get(p + "attr").f64();
    const bool causal = attr[0] != 0, has_mask = fx.Has(p + "mask");
    GraphPtr g(FusedGraph(q.dims, k.dims, v.dims, has_mask, causal, static_cast<float>(attr[1])));
    ASSERT_NE(g, nullptr);
    std::vector<const void *> ins = {q.f32(), k.f32(), v.f32(), dout.f32()};
    if (has_mask)
      ins.push_back(fx.Get(p + "mask").f32());
    std::vector<PlanOutput> own, n8;
    gcc_cpu_set_narrow_vectors(0);
    ASSERT_EQ(RunPlan(g.get(), ins, 1, false, &own, 2), "");
    narrow = gcc_cpu_set_narrow_vectors(1) != 0;
    ASSERT_EQ(RunPlan(g.get(), ins, 1, false, &n8, 2), "");
    ASSERT_EQ(n8.size(), 5u);
    const int64_t Tq = q.dims[2], Tk = k.dims[2], D = q.dims[3], E = v.dims[3];
    const char *names[] = {"o", "dq", "dk", "dv"};
    const int idx[] = {0, 2, 3, 4};
    const int64_t terms[] = {D + Tk, D + E + Tk, D + E + Tq, D + Tq}; // as the test above
    for (int t = 0; t < 4; ++t) {
      const auto &ref = fx.Get(p + names[t]);
      double mref = 0, e = MaxErr(n8[idx[t]].f32.data(), ref.f64(), ref.numel(), &mref);
      EXPECT_LE(e, Bound(terms[t], mref)) << p << names[t] << ": 8-float forms against float64";
    }
    for (size_t t = 0; t < n8.size(); ++t)
      EXPECT_EQ(std::memcmp(n8[t].f32.data(), own[t].f32.data(), n8[t].f32.size() * sizeof(float)),
                0)
          << p << "output " << t << ": the 8-float forms differ from the machine's own";
  }
  for (int64_t tk : {80, 48}) {
    const Dims qd = {3, 4, 96, 32}, kd = {3, 4, tk, 32}, vd = {3, 4, tk, 24};
    std::mt19937_64 r(11);
    std::vector<float> q = Randn(r, Numel(qd)), k = Randn(r, Numel(kd)), v = Randn(r, Numel(vd)),
                       dout = Randn(r, 3 * 4 * 96 * 24), mask = Randn(r, 96 * tk, 0.3f);
    for (bool causal : {false, true}) {
      for (bool has_mask : {false, true}) {
        GraphPtr g(FusedGraph(qd, kd, vd, has_mask, causal, 0.0f));
        ASSERT_NE(g, nullptr);
        std::vector<const void *> ins = {q.data(), k.data(), v.data(), dout.data()};
        if (has_mask)
          ins.push_back(mask.data());
        std::vector<PlanOutput> own, n8;
        gcc_cpu_set_narrow_vectors(0);
        ASSERT_EQ(RunPlan(g.get(), ins, 1, false, &own, 2), "");
        gcc_cpu_set_narrow_vectors(1);
        ASSERT_EQ(RunPlan(g.get(), ins, 1, false, &n8, 2), "");
        ASSERT_EQ(n8.size(), 5u);
        for (size_t t = 0; t < n8.size(); ++t)
          EXPECT_EQ(
              std::memcmp(n8[t].f32.data(), own[t].f32.data(), n8[t].f32.size() * sizeof(float)), 0)
              << "output " << t << " (tk " << tk << ", causal " << causal << ", mask " << has_mask
              << "): the 8-float forms differ from the machine's own";
      }
    }
  }
  std::printf("[attention] 8-float forms %s\n",
              narrow ? "checked (this CPU has AVX2 and FMA)"
                     : "not available here (a CPU without AVX2 and FMA, or a build without the "
                       "ISA clones: ASan, not x86-64): both runs took the 16-float forms");
}

// Evaluation (what an inference plan runs): an Attention whose file says
// dropout_p 0.3 and even training 1 computes exactly the p = 0 op, bit for
// bit, on the CPU plan and the host-emulated CUDA plan.
TEST(Attention, EvaluationFormHasNoDropout) {
  const Dims qd = {2, 3, 40, 16}, kd = {2, 3, 70, 16}, vd = {2, 3, 70, 8};
  std::mt19937_64 r(13);
  std::vector<float> q = Randn(r, Numel(qd)), k = Randn(r, Numel(kd)), v = Randn(r, Numel(vd)),
                     dout = Randn(r, 2 * 3 * 40 * 8);
  GraphPtr plain(FusedGraph(qd, kd, vd, false, true, 0.0f));
  GraphPtr dropped(FusedGraph(qd, kd, vd, false, true, 0.0f));
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(dropped, nullptr);
  int an = dropped->values[gcc_graph_find(dropped.get(), "O")].producer;
  ASSERT_GE(an, 0);
  ASSERT_EQ(gcc_node_set_float(dropped.get(), an, "dropout_p", 0.3f), GCC_OK);
  ASSERT_EQ(gcc_node_set_int(dropped.get(), an, "training", 1), GCC_OK);
  ASSERT_EQ(gcc_node_set_int(dropped.get(), an, "key", 77), GCC_OK);
  gcc_diag d{};
  ASSERT_EQ(gcc_op_resolve_attrs(dropped.get(), an, &d), GCC_OK) << d.msg;
  ASSERT_EQ(dropped->nodes[an].av[ATTN_TRAINING].i, 1);
  ASSERT_EQ(dropped->nodes[an].av[ATTN_DROPOUT_P].f, 0.3f);
  // dropout_p outside [0, 1) is refused, naming the node
  {
    GraphPtr bad(FusedGraph(qd, kd, vd, false, true, 0.0f));
    ASSERT_EQ(gcc_node_set_float(bad.get(), an, "dropout_p", 1.0f), GCC_OK);
    std::vector<PlanOutput> outs;
    std::string err =
        RunPlan(bad.get(), {q.data(), k.data(), v.data(), dout.data()}, 1, false, &outs);
    EXPECT_NE(err.find("dropout_p 1 is outside [0, 1)"), std::string::npos) << err;
    EXPECT_NE(err.find("attn"), std::string::npos) << err;
  }
  std::vector<const void *> ins = {q.data(), k.data(), v.data(), dout.data()};
  for (bool cuda : {false, true}) {
    if (cuda && !BuiltWithNvrtc())
      continue;
    SCOPED_TRACE(cuda ? "host-emulated CUDA plan" : "CPU plan");
    std::vector<PlanOutput> a, b;
    ASSERT_EQ(RunPlan(plain.get(), ins, 1, cuda, &a, 2), "");
    ASSERT_EQ(RunPlan(dropped.get(), ins, 1, cuda, &b, 2), "");
    ASSERT_EQ(a.size(), 5u);
    ASSERT_EQ(b.size(), 5u);
    for (size_t t = 0; t < a.size(); ++t) {
      ASSERT_EQ(a[t].f32.size(), b[t].f32.size());
      EXPECT_EQ(std::memcmp(a[t].f32.data(), b[t].f32.data(), a[t].f32.size() * sizeof(float)), 0)
          << "output " << t;
    }
  }
}

// ---- AttentionPacked ---------------------------------------------------------------

// A graph of inputs P [B T, 3 H D] and dY [B T, H D] running AttentionPacked
// and AttentionPackedGrad, outputs O [B T, H D], L [B, H, T], dP.
gcc_graph *PackedGraph(int64_t B, int64_t H, int64_t T, int64_t D, bool causal, float drop,
                       int64_t key) {
  gcc_builder *b = gcc_builder_new("attention_packed", 1);
  const int64_t pd[2] = {B * T, 3 * H * D}, yd[2] = {B * T, H * D};
  int p = gcc_build_input(b, "P", GCC_DT_FLOAT32, 2, pd);
  int dy = gcc_build_input(b, "dY", GCC_DT_FLOAT32, 2, yd);
  gcc_graph *g = b->g;
  gcc_diag d{};
  int o = -1, l = -1, dp = -1, n1 = -1, n2 = -1;
  EXPECT_EQ(gcc_graph_add_temp(g, "O", GCC_VALUE_ACTIVATION, &o, &d), GCC_OK);
  EXPECT_EQ(gcc_graph_add_temp(g, "L", GCC_VALUE_ACTIVATION, &l, &d), GCC_OK);
  EXPECT_EQ(gcc_graph_add_temp(g, "dP", GCC_VALUE_ACTIVATION, &dp, &d), GCC_OK);
  int in1[1] = {p}, out1[2] = {o, l};
  EXPECT_EQ(gcc_graph_add_node(g, "attn", GCC_OP_ATTENTION_PACKED, in1, 1, out1, 2, &n1, &d),
            GCC_OK)
      << d.msg;
  int in2[4] = {p, o, l, dy};
  EXPECT_EQ(
      gcc_graph_add_node(g, "attn_grad", GCC_OP_ATTENTION_PACKED_GRAD, in2, 4, &dp, 1, &n2, &d),
      GCC_OK)
      << d.msg;
  for (int n : {n1, n2}) {
    EXPECT_EQ(gcc_node_set_int(g, n, "heads", H), GCC_OK);
    EXPECT_EQ(gcc_node_set_int(g, n, "seq", T), GCC_OK);
    EXPECT_EQ(gcc_node_set_int(g, n, "is_causal", causal ? 1 : 0), GCC_OK);
  }
  if (drop > 0.0f) { // the backward's dropout (the evaluation plan keeps an internal op's)
    EXPECT_EQ(gcc_node_set_float(g, n2, "dropout_p", drop), GCC_OK);
    EXPECT_EQ(gcc_node_set_int(g, n2, "key", key), GCC_OK);
  }
  for (int x : {o, l, dp})
    gcc_build_output(b, x);
  gcc_graph *out = nullptr;
  EXPECT_EQ(gcc_builder_finish(b, &out, &d), GCC_OK) << d.msg;
  return out;
}

// AttentionPacked / AttentionPackedGrad against Attention / AttentionGrad on
// the Q, K, V that the thirds of P split into heads are (PyTorch:
// q, k, v = p.split(C, -1); view(B, T, H, D).transpose(1, 2)): the same
// kernels with other strides, every sum in the same order, so the results
// are bitwise equal (tolerance 0). T 70 > 64 takes the two-pass backward,
// T <= 64 the one-pass one; D 24 has a column edge past 16; the backward
// with dropout redraws the same mask.
TEST(AttentionPacked, EqualsAttentionOnTheSplitThirdsBitwise) {
  struct Case {
    int64_t B, H, T, D;
    bool causal;
    float drop;
  } cases[] = {{2, 2, 5, 8, false, 0.0f},
               {3, 4, 70, 16, true, 0.2f},
               {2, 3, 70, 32, false, 0.1f},
               {3, 2, 33, 24, true, 0.0f},
               {2, 4, 64, 32, true, 0.3f}};
  for (const Case &c : cases) {
    const int64_t B = c.B, H = c.H, T = c.T, D = c.D, C = H * D;
    SCOPED_TRACE("B " + std::to_string(B) + " H " + std::to_string(H) + " T " + std::to_string(T) +
                 " D " + std::to_string(D) + " causal " + std::to_string(c.causal) + " dropout " +
                 std::to_string(c.drop));
    std::mt19937_64 r(static_cast<uint64_t>(B * 1000 + H * 100 + T + D));
    std::vector<float> P = Randn(r, B * T * 3 * C), dY = Randn(r, B * T * C);
    // [B, H, T, D] of column block `off` of rows of width `w`
    auto split = [&](const std::vector<float> &src, int64_t w, int64_t off) {
      std::vector<float> out(static_cast<size_t>(B * H * T * D));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t t = 0; t < T; ++t)
            for (int64_t d = 0; d < D; ++d)
              out[static_cast<size_t>(((b * H + h) * T + t) * D + d)] =
                  src[static_cast<size_t>((b * T + t) * w + off + h * D + d)];
      return out;
    };
    std::vector<float> q = split(P, 3 * C, 0), k = split(P, 3 * C, C), v = split(P, 3 * C, 2 * C),
                       dout = split(dY, C, 0);
    const Dims qd = {B, H, T, D};
    GraphPtr ref(FusedGraph(qd, qd, qd, false, c.causal, 0.0f));
    ASSERT_NE(ref, nullptr);
    const int64_t key = 4242;
    if (c.drop > 0.0f) {
      int gn = ref->values[gcc_graph_find(ref.get(), "dQ")].producer;
      ASSERT_EQ(gcc_node_set_float(ref.get(), gn, "dropout_p", c.drop), GCC_OK);
      ASSERT_EQ(gcc_node_set_int(ref.get(), gn, "key", key), GCC_OK);
    }
    GraphPtr pk(PackedGraph(B, H, T, D, c.causal, c.drop, key));
    ASSERT_NE(pk, nullptr);
    std::vector<PlanOutput> a, b;
    ASSERT_EQ(RunPlan(ref.get(), {q.data(), k.data(), v.data(), dout.data()}, 1, false, &a, 2), "");
    ASSERT_EQ(RunPlan(pk.get(), {P.data(), dY.data()}, 1, false, &b, 2), "");
    ASSERT_EQ(a.size(), 5u);
    ASSERT_EQ(b.size(), 3u);
    ASSERT_EQ(b[0].f32.size(), P.size() / 3);
    ASSERT_EQ(b[2].f32.size(), P.size());
    // O: packed rows against the transposed [B, H, T, D]; L as it is
    EXPECT_EQ(split(b[0].f32, C, 0), a[0].f32) << "O";
    EXPECT_EQ(b[1].f32, a[1].f32) << "L";
    EXPECT_EQ(split(b[2].f32, 3 * C, 0), a[2].f32) << "dQ";
    EXPECT_EQ(split(b[2].f32, 3 * C, C), a[3].f32) << "dK";
    EXPECT_EQ(split(b[2].f32, 3 * C, 2 * C), a[4].f32) << "dV";
    if (c.drop > 0.0f) { // the dropout did act: dV differs from the p = 0 one
      GraphPtr nod(FusedGraph(qd, qd, qd, false, c.causal, 0.0f));
      std::vector<PlanOutput> z;
      ASSERT_EQ(RunPlan(nod.get(), {q.data(), k.data(), v.data(), dout.data()}, 1, false, &z, 2),
                "");
      EXPECT_NE(z[4].f32, a[4].f32);
    }
  }
}

int Ptxas(const std::string &ptx, int sm, std::string *log) {
  std::string base =
      gcc_test::TmpDir() + "/attn_" + std::to_string(getpid()) + "_" + std::to_string(sm);
  std::ofstream(base + ".ptx") << ptx;
  std::string cmd = "/usr/local/cuda/bin/ptxas -arch=sm_" + std::to_string(sm) + " -o " + base +
                    ".cubin " + base + ".ptx > " + base + ".log 2>&1";
  int rc = system(cmd.c_str());
  std::ifstream in(base + ".log");
  log->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// The generated kernels launched one by one on the emulator with their
// threads in threadIdx order and reversed (a missing __syncthreads shows as
// different bits), against float64; and the same source through NVRTC and
// ptxas for sm_80 and sm_90.
TEST(Attention, GeneratedKernelsAreBarrierCleanAndCompileWithNvrtc) {
  if (!BuiltWithNvrtc())
    GTEST_SKIP() << "built without NVRTC (--config=cpu_only): no generated kernels";
  // head dims 64 and 136: two tile sizes (16 x 32 and 16 x 16 / 8 x 16);
  // D = 64 also with dropout 0.25 on the probabilities (the training form's
  // attributes set on the compiled nodes; the kernels take the step)
  const uint64_t dkey = 0x0123456789abcdefull;
  const long long dstep = 5;
  for (int run = 0; run < 3; ++run) {
    const int64_t D = run == 1 ? 136 : 64;
    const float drop = run == 2 ? 0.25f : 0.0f;
    SCOPED_TRACE("D = " + std::to_string(D) + ", dropout_p " + std::to_string(drop));
    const Dims qd = {1, 2, 21, D}, kd = {1, 2, 37, D}, vd = {1, 2, 37, D};
    std::mt19937_64 r(11);
    std::vector<float> q = Randn(r, Numel(qd), 0.3f), k = Randn(r, Numel(kd), 0.3f),
                       v = Randn(r, Numel(vd)), dout = Randn(r, Numel(qd)),
                       mask = Randn(r, 21 * 37, 0.5f);
    GraphPtr model(FusedGraph(qd, kd, vd, true, true, 0.0f));
    ASSERT_NE(model, nullptr);
    gcc_options o{};
    o.mode = GCC_MODE_EVAL;
    o.batch_size = 1;
    o.device = GCC_DEV_CUDA(0);
    o.device_explicit = 1;
    o.n_cuda_devices = 1;
    FILE *sink = fopen("/dev/null", "w");
    o.warn_file = sink;
    gcc_graph *g = nullptr;
    gcc_mem_plan mem{};
    gcc_diag d{};
    ASSERT_EQ(gcc_compile_graph(model.get(), &o, &g, &mem, &d), GCC_OK) << d.msg;
    fclose(sink);
    GraphPtr gp(g);
    for (int i = 0; i < g->n_nodes && drop > 0.0f; i++)
      if (g->nodes[i].op == GCC_OP_ATTENTION || g->nodes[i].op == GCC_OP_ATTENTION_GRAD) {
        if (g->nodes[i].op == GCC_OP_ATTENTION) {
          ASSERT_EQ(gcc_node_set_int(g, i, "training", 1), GCC_OK);
        }
        ASSERT_EQ(gcc_node_set_float(g, i, "dropout_p", drop), GCC_OK);
        ASSERT_EQ(gcc_node_set_int(g, i, "key", static_cast<int64_t>(dkey)), GCC_OK);
        ASSERT_EQ(gcc_op_resolve_attrs(g, i, &d), GCC_OK) << d.msg;
      }
    gcc_kernel_set ks;
    ASSERT_EQ(gcc_codegen_emit(g, GCC_DEV_CUDA(0), 132, &ks, &d), GCC_OK) << d.msg;
    ASSERT_EQ(ks.n_kernels, 4) << "Attention 1, AttentionGrad 3 (delta, kv, q)";
    // NVRTC and ptxas
    for (int sm : {80, 90}) {
      gcc_nvrtc_output nv{};
      ASSERT_EQ(gcc_nvrtc_compile(ks.source, "attention", sm, &nv, &d), GCC_OK) << d.msg << "\n"
                                                                                << ks.source;
      std::string ptx(nv.ptx, nv.ptx_size), log;
      for (int i = 0; i < ks.n_kernels; i++)
        EXPECT_NE(ptx.find(std::string(".entry ") + ks.kernels[i].name), std::string::npos);
      EXPECT_EQ(Ptxas(ptx, sm, &log), 0) << log;
      gcc_nvrtc_output_free(&nv);
    }
    // the emulator: buffers per value, the scratch, launches in order
    gcc_emu_test::EmulatedModule mod;
    std::string err;
    ASSERT_TRUE(mod.Compile(
        ks.source, "attention_" + std::to_string(D) + (drop > 0.0f ? "_dropout" : ""), &err))
        << err;
    std::map<int, std::vector<float>> buf;
    const std::map<std::string, const std::vector<float> *> in = {
        {"Q", &q}, {"K", &k}, {"V", &v}, {"dO", &dout}, {"M", &mask}};
    // a kernel reads the device copy of a graph input (copy insertion)
    auto root = [&](int val) {
      while (g->values[val].producer >= 0 &&
             (gcc_op(g->nodes[g->values[val].producer].op)->flags & GCC_OPF_COPY))
        val = g->nodes[g->values[val].producer].inputs[0];
      return val;
    };
    std::vector<int> outv; // O, L, dQ, dK, dV as the kernels write them
    for (int i = 0; i < g->n_nodes; i++)
      if (g->nodes[i].op == GCC_OP_ATTENTION || g->nodes[i].op == GCC_OP_ATTENTION_GRAD)
        for (int t = 0; t < g->nodes[i].n_outputs; t++)
          outv.push_back(g->nodes[i].outputs[t]);
    ASSERT_EQ(outv.size(), 5u);
    std::vector<float> results[2][5];
    for (int order = 0; order < 2; ++order) {
      buf.clear();
      size_t scratch_bytes = 0;
      for (int i = 0; i < ks.n_kernels; i++)
        scratch_bytes = std::max(scratch_bytes, ks.kernels[i].scratch_bytes);
      std::vector<float> scratch(scratch_bytes / sizeof(float) + 1, 0.0f);
      mod.SetReversedThreadOrder(order == 1);
      for (int i = 0; i < ks.n_kernels; i++) {
        const gcc_kernel_info &kn = ks.kernels[i];
        std::vector<void *> ptrs(static_cast<size_t>(kn.n_args));
        std::vector<void *> args(static_cast<size_t>(kn.n_args));
        for (int a = 0; a < kn.n_args; a++) {
          const gcc_kernel_arg &ka = kn.args[a];
          if (ka.kind == GCC_KARG_STEP) {
            args[a] = const_cast<long long *>(&dstep);
            continue;
          }
          if (ka.kind == GCC_KARG_SCRATCH) {
            ptrs[a] = scratch.data();
          } else {
            ASSERT_TRUE(ka.kind == GCC_KARG_INPUT || ka.kind == GCC_KARG_OUTPUT) << kn.name;
            std::vector<float> &bv = buf[ka.value];
            auto src = in.find(g->values[root(ka.value)].name);
            if (bv.empty() && ka.kind == GCC_KARG_INPUT && src != in.end())
              bv = *src->second;
            if (bv.empty())
              bv.assign(static_cast<size_t>(gcc_shape_numel(&g->values[ka.value].shape, NULL)),
                        std::nanf(""));
            ptrs[a] = bv.data();
          }
          args[a] = &ptrs[a];
        }
        ASSERT_TRUE(mod.Launch(kn.name, static_cast<unsigned>(kn.grid_dim),
                               static_cast<unsigned>(kn.block_dim), args.data(), &err))
            << err;
        EXPECT_EQ(mod.BarrierMismatches(), 0u) << kn.name;
      }
      for (int t = 0; t < 5; ++t)
        results[order][t] = buf[outv[t]];
    }
    mod.SetReversedThreadOrder(false);
    for (int t = 0; t < 5; ++t) {
      ASSERT_EQ(results[0][t].size(), results[1][t].size());
      EXPECT_EQ(std::memcmp(results[0][t].data(), results[1][t].data(),
                            results[0][t].size() * sizeof(float)),
                0)
          << "output " << t << " depends on the order of a block's threads";
    }
    // O and L against float64 (the gradients: tests/op_gradcheck_test.cc)
    std::vector<double> ro, rl;
    const std::vector<int> keep = DropoutKeep(2 * 21 * 37, drop, dkey, dstep);
    RefAttention(q.data(), k.data(), v.data(), mask.data(), 2, 21, 37, D, D, true,
                 1.0 / std::sqrt(static_cast<double>(D)), &ro, &rl, drop > 0.0f ? &keep : nullptr,
                 drop);
    double mo = 0,
           eo = MaxErr(results[0][0].data(), ro.data(), static_cast<int64_t>(ro.size()), &mo);
    EXPECT_LE(eo, Bound(D + 37, mo)) << "O";
    double ml = 0,
           el = MaxErr(results[0][1].data(), rl.data(), static_cast<int64_t>(rl.size()), &ml);
    EXPECT_LE(el, Bound(D + 37, ml)) << "L";
    gcc_kernel_set_free(&ks);
    gcc_mem_plan_free(&mem);
  }
}

// ---- the attention pass ----------------------------------------------------------------

// How the chain is written (each a way an exporter writes it).
struct Chain {
  bool div_scale = true;       // Div(S, sqrt(D)) after the MatMul; else Mul(S, 1/sqrt(D))
  bool split_scale = false;    // Mul(Q, c) and Mul(c, Transpose(K)), c = D^-1/4 (no scores scale)
  int mask = 0;                // 0 none, 1 constant causal -Inf triangle, 2 a mask input
  bool probs_output = false;   // P is also a graph output: must not fuse
  bool wrong_perm = false;     // Transpose perm (1, 0, 2, 3): must not fuse
  bool softmax_axis_2 = false; // Softmax over axis 2: must not fuse
  bool k_scaled_first = false; // split_scale with Transpose(Mul(K, c)) instead
  float dropout = -1;          // >= 0: Dropout("attn_drop", ratio) after the Softmax
};

const int64_t kB = 2, kH = 3, kT = 9, kD = 8;

gcc_graph *ChainGraph(const Chain &c) {
  gcc_builder *b = gcc_builder_new("chain", 1);
  int64_t d4[4] = {kB, kH, kT, kD};
  int q = gcc_build_input(b, "Q", GCC_DT_FLOAT32, 4, d4);
  // a wrong perm (1, 0, 3, 2) reads K as [H, B, T, D]: the MatMul is valid,
  // but the Transpose is not of the last two dims only
  int64_t k4[4] = {c.wrong_perm ? kH : kB, c.wrong_perm ? kB : kH, kT, kD};
  int k = gcc_build_input(b, "K", GCC_DT_FLOAT32, 4, k4);
  int v = gcc_build_input(b, "V", GCC_DT_FLOAT32, 4, d4);
  auto scalar = [&](const char *name, float x) {
    return gcc_build_const(b, name, GCC_DT_FLOAT32, 0, nullptr, &x);
  };
  if (c.split_scale && c.k_scaled_first) {
    int ck = scalar("c_k0", std::pow(static_cast<float>(kD), -0.25f));
    int i0[2] = {k, ck};
    k = gcc_build_op(b, GCC_OP_MUL, "k_scaled", "k_scaled.out", i0, 2);
  }
  int kt = gcc_build_op(b, GCC_OP_TRANSPOSE, "kt", "kt.out", &k, 1);
  int64_t perm[4] = {0, 1, 3, 2}, bad[4] = {1, 0, 3, 2};
  gcc_build_set_ints(b, kt, "perm", c.wrong_perm ? bad : perm, 4);
  if (c.split_scale) {
    int c1 = scalar("c_q", std::pow(static_cast<float>(kD), -0.25f));
    int i1[2] = {q, c1};
    q = gcc_build_op(b, GCC_OP_MUL, "q_scaled", "q_scaled.out", i1, 2);
    if (!c.k_scaled_first) {
      int c2 = scalar("c_k", std::pow(static_cast<float>(kD), -0.25f));
      int i2[2] = {c2, kt};
      kt = gcc_build_op(b, GCC_OP_MUL, "kt_scaled", "kt_scaled.out", i2, 2);
    }
  }
  int i3[2] = {q, kt};
  int s = gcc_build_op(b, GCC_OP_MATMUL, "qk", "qk.out", i3, 2);
  if (!c.split_scale) {
    int cs = c.div_scale ? scalar("sqrt_d", std::sqrt(static_cast<float>(kD)))
                         : scalar("inv_sqrt_d", 1.0f / std::sqrt(static_cast<float>(kD)));
    int i4[2] = {s, cs};
    s = gcc_build_op(b, c.div_scale ? GCC_OP_DIV : GCC_OP_MUL, "scale", "scale.out", i4, 2);
  }
  if (c.mask) {
    int m;
    int64_t md[2] = {kT, kT};
    if (c.mask == 1) {
      std::vector<float> tri(static_cast<size_t>(kT * kT));
      for (int64_t i = 0; i < kT; ++i)
        for (int64_t j = 0; j < kT; ++j)
          tri[i * kT + j] = j > i ? -INFINITY : 0.0f;
      m = gcc_build_const(b, "causal_mask", GCC_DT_FLOAT32, 2, md, tri.data());
    } else {
      m = gcc_build_input(b, "M", GCC_DT_FLOAT32, 2, md);
    }
    int i5[2] = {m, s}; // the mask first: Add is commutative
    s = gcc_build_op(b, GCC_OP_ADD, "add_mask", "add_mask.out", i5, 2);
  }
  int p = gcc_build_op(b, GCC_OP_SOFTMAX, "softmax", "softmax.out", &s, 1);
  gcc_build_set_int(b, p, "axis", c.softmax_axis_2 ? 2 : -1);
  if (c.dropout >= 0.0f) {
    p = gcc_build_op(b, GCC_OP_DROPOUT, "attn_drop", "attn_drop.out", &p, 1);
    gcc_build_set_float(b, p, "ratio", c.dropout);
  }
  int i6[2] = {p, v};
  int o = gcc_build_op(b, GCC_OP_MATMUL, "pv", "pv.out", i6, 2);
  gcc_build_output(b, o);
  if (c.probs_output)
    gcc_build_output(b, p);
  gcc_graph *g = nullptr;
  gcc_diag d{};
  EXPECT_EQ(gcc_builder_finish(b, &g, &d), GCC_OK) << d.msg;
  return g;
}

// The compiled graph's count of nodes of op `op`.
int CountOp(const gcc_graph *g, int op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; ++i)
    n += g->nodes[i].op == op;
  return n;
}

GraphPtr Compiled(const gcc_graph *model, gcc_mode mode) {
  gcc_options o{};
  o.mode = mode;
  o.batch_size = 1;
  FILE *sink = fopen("/dev/null", "w");
  o.warn_file = sink;
  gcc_graph *g = nullptr;
  gcc_mem_plan mem{};
  gcc_diag d{};
  EXPECT_EQ(gcc_compile_graph(model, &o, &g, &mem, &d), GCC_OK) << d.msg;
  fclose(sink);
  gcc_mem_plan_free(&mem);
  return GraphPtr(g);
}

TEST(AttentionPass, FusesTheExportersChains) {
  const struct {
    const char *what;
    Chain c;
    bool causal;
    int n_in;
  } cases[] = {
      {"Div by sqrt(D)", {}, false, 3},
      {"Mul by 1/sqrt(D)", {false, false, 0, false, false, false}, false, 3},
      {"Q and K scaled by D^-1/4, causal -Inf triangle",
       {true, true, 1, false, false, false},
       true,
       3},
      {"a mask input", {true, false, 2, false, false, false}, false, 4},
      {"Q scaled, and K before its Transpose, causal",
       {true, true, 1, false, false, false, true},
       true,
       3},
      {"causal, Dropout 0.1 on the probabilities (a training export)",
       {true, false, 1, false, false, false, false, 0.1f},
       true,
       3},
  };
  std::mt19937_64 r(5);
  const int64_t n = kB * kH * kT * kD;
  std::vector<float> q = Randn(r, n), k = Randn(r, n), v = Randn(r, n), m = Randn(r, kT * kT);
  for (int64_t x = 0; x < kT * kT; x += 5)
    m[x] = -INFINITY;
  for (const auto &tc : cases) {
    SCOPED_TRACE(tc.what);
    GraphPtr model(ChainGraph(tc.c));
    ASSERT_NE(model, nullptr);
    GraphPtr g = Compiled(model.get(), GCC_MODE_EVAL);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(CountOp(g.get(), GCC_OP_ATTENTION), 1);
    EXPECT_EQ(CountOp(g.get(), GCC_OP_SOFTMAX), 0);
    EXPECT_EQ(CountOp(g.get(), GCC_OP_MATMUL), 0);
    EXPECT_EQ(CountOp(g.get(), GCC_OP_TRANSPOSE), 0);
    EXPECT_EQ(CountOp(g.get(), GCC_OP_MUL), 0);
    EXPECT_EQ(CountOp(g.get(), GCC_OP_DIV), 0);
    EXPECT_EQ(CountOp(g.get(), GCC_OP_ADD), 0);
    EXPECT_EQ(CountOp(g.get(), GCC_OP_DROPOUT), 0);
    for (int i = 0; i < g->n_nodes; ++i) {
      const gcc_node &nd = g->nodes[i];
      if (nd.op != GCC_OP_ATTENTION)
        continue;
      EXPECT_EQ(nd.n_inputs, tc.n_in);
      EXPECT_EQ(nd.av[ATTN_IS_CAUSAL].i, tc.causal ? 1 : 0);
      // D^-1/4 squared, or 1 / sqrt(D): within a float32 rounding or two
      EXPECT_NEAR(nd.av[ATTN_SCALE].f, 1.0 / std::sqrt(static_cast<double>(kD)), 1e-7);
      EXPECT_STREQ(g->values[nd.outputs[0]].name, "pv.out");
      // the Dropout's ratio, and its name (the key's source); evaluation: off
      EXPECT_EQ(nd.av[ATTN_DROPOUT_P].f, tc.c.dropout >= 0.0f ? tc.c.dropout : 0.0f);
      EXPECT_STREQ(nd.name, tc.c.dropout >= 0.0f ? "attn_drop" : "pv");
      EXPECT_EQ(nd.av[ATTN_TRAINING].i, 0);
    }
    // the values: the fused plan against float64
    std::vector<const void *> ins = {q.data(), k.data(), v.data()};
    if (tc.c.mask == 2)
      ins.push_back(m.data());
    for (bool cuda : {false, true}) {
      if (cuda && !BuiltWithNvrtc())
        continue;
      std::vector<PlanOutput> outs;
      ASSERT_EQ(RunPlan(model.get(), ins, 1, cuda, &outs), "");
      std::vector<double> ro, rl;
      RefAttention(q.data(), k.data(), v.data(), tc.c.mask == 2 ? m.data() : nullptr, kB * kH, kT,
                   kT, kD, kD, tc.causal, 1.0 / std::sqrt(static_cast<double>(kD)), &ro, &rl);
      double mo = 0, e = MaxErr(outs[0].f32.data(), ro.data(), n, &mo);
      EXPECT_LE(e, Bound(kD + kT, mo)) << (cuda ? "CUDA plan" : "CPU plan");
    }
  }
}

TEST(AttentionPass, LeavesOtherChainsAlone) {
  const struct {
    const char *what;
    Chain c;
  } cases[] = {
      {"the probabilities are also a graph output", {true, false, 0, true, false, false}},
      {"the Transpose is not of the last two dims", {true, false, 0, false, true, false}},
      {"the Softmax is over another axis", {true, false, 0, false, false, true}},
  };
  for (const auto &tc : cases) {
    SCOPED_TRACE(tc.what);
    GraphPtr model(ChainGraph(tc.c));
    ASSERT_NE(model, nullptr);
    GraphPtr g = Compiled(model.get(), GCC_MODE_EVAL);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(CountOp(g.get(), GCC_OP_ATTENTION), 0);
    EXPECT_EQ(CountOp(g.get(), GCC_OP_SOFTMAX), 1);
    EXPECT_EQ(CountOp(g.get(), GCC_OP_MATMUL), 2);
  }
}

// A learned mask (Swin's relative-position bias: a parameter added to the
// scores) in a graph that trains: the fused Attention gives its mask no
// gradient, so the pass leaves the chain unfused and the bias gets its
// gradient through Add; the same graph compiled for evaluation fuses, with
// the bias as the mask input.
TEST(AttentionPass, LeavesAChainWithATrainedMaskUnfusedWhenTraining) {
  std::mt19937_64 r(11);
  const int64_t T = 8, n = T * kD;
  std::vector<float> q = Randn(r, n), k = Randn(r, n), v = Randn(r, n), bias = Randn(r, T * T);
  gcc_builder *b = gcc_builder_new("learned_bias", 1);
  int64_t d2[2] = {T, kD}, md[2] = {T, T};
  int qv = gcc_build_param(b, "Qp", 2, d2, q.data());
  int kv = gcc_build_param(b, "Kp", 2, d2, k.data());
  int vv = gcc_build_param(b, "Vp", 2, d2, v.data());
  int bv = gcc_build_param(b, "bias_table", 2, md, bias.data());
  int t = gcc_build_input(b, "target", GCC_DT_FLOAT32, 2, d2);
  int kt = gcc_build_op(b, GCC_OP_TRANSPOSE, "kt", "kt.out", &kv, 1);
  int64_t perm[2] = {1, 0};
  gcc_build_set_ints(b, kt, "perm", perm, 2);
  int i1[2] = {qv, kt};
  int s = gcc_build_op(b, GCC_OP_MATMUL, "qk", "qk.out", i1, 2);
  float sd = std::sqrt(static_cast<float>(kD));
  int c = gcc_build_const(b, "sqrt_d", GCC_DT_FLOAT32, 0, nullptr, &sd);
  int i2[2] = {s, c};
  s = gcc_build_op(b, GCC_OP_DIV, "scale", "scale.out", i2, 2);
  int i3[2] = {s, bv};
  s = gcc_build_op(b, GCC_OP_ADD, "add_bias", "add_bias.out", i3, 2);
  int p = gcc_build_op(b, GCC_OP_SOFTMAX, "softmax", "softmax.out", &s, 1);
  gcc_build_set_int(b, p, "axis", -1);
  int i4[2] = {p, vv};
  int o = gcc_build_op(b, GCC_OP_MATMUL, "pv", "pv.out", i4, 2);
  int loss = gcc_build_mse(b, "loss", o, t);
  gcc_build_output(b, loss);
  gcc_build_training_spec ts = {};
  ts.loss = "loss";
  ts.prediction = "pv.out";
  ts.opt.kind = GCC_OPT_SGD;
  ts.batch_size = 1;
  ts.epochs = 1;
  gcc_build_training(b, &ts);
  gcc_graph *graw = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_builder_finish(b, &graw, &d), GCC_OK) << d.msg;
  GraphPtr model(graw);
  for (gcc_mode mode : {GCC_MODE_TRAIN, GCC_MODE_EVAL}) {
    SCOPED_TRACE(mode == GCC_MODE_TRAIN ? "training" : "evaluation");
    gcc_options o{};
    o.mode = mode;
    o.batch_size = 1;
    o.opt.kind = GCC_OPT_NONE;
    FILE *sink = fopen("/dev/null", "w");
    o.warn_file = sink;
    gcc_graph *g = nullptr;
    gcc_mem_plan mem{};
    ASSERT_EQ(gcc_compile_graph(model.get(), &o, &g, &mem, &d), GCC_OK) << d.msg;
    fclose(sink);
    gcc_mem_plan_free(&mem);
    GraphPtr cg(g);
    const bool train = mode == GCC_MODE_TRAIN;
    EXPECT_EQ(CountOp(cg.get(), GCC_OP_ATTENTION), train ? 0 : 1);
    EXPECT_EQ(CountOp(cg.get(), GCC_OP_SOFTMAX), train ? 1 : 0);
    if (!train)
      continue;
    EXPECT_EQ(CountOp(cg.get(), GCC_OP_SOFTMAX_GRAD), 1);
    int grads = 0; // the bias's gradient exists
    for (int i = 0; i < cg->n_values; ++i)
      grads += cg->values[i].kind == GCC_VALUE_GRAD && cg->values[i].param_of >= 0 &&
               std::strcmp(cg->values[cg->values[i].param_of].name, "bias_table") == 0;
    EXPECT_EQ(grads, 1);
  }
}

// Training through the pass: the backward is one AttentionGrad (no
// SoftmaxGrad, no (T, T) tensor), and the gradients equal those of the same
// chain left unfused (its probabilities also a graph output). Single-head
// [T, D] operands: the MatMul gradient rule takes 2-D operands only.
//
// With dropout (issue 31): the chain MatMul -> Div -> Add(causal -Inf
// triangle) -> Softmax -> Dropout("drop", p, training) -> MatMul left
// unfused (Dropout's own kernels draw its mask) against the same chain
// fused by the attention pass (the Attention node takes the Dropout's
// ratio, seed and name) and against one Attention node written directly,
// named "drop" (is_causal, dropout_p p: the training form gives it the key
// a Dropout of that name gets), forward and dQ, dK, dV, on the CPU plan and
// on the host-emulated CUDA plan (the CPU plan at steps 0 and 3, the CUDA
// plan at step 3: the mask moves with the step).
enum ChainForm { kPassFused, kUnfused, kDirectFused };

// Training-graph storage: parameters (a device copy on the host backend)
// and their gradients.
struct TrainStore {
  gcc_host_test::HostBackend *hb = nullptr;
  std::map<std::string, std::vector<float>> param;
  std::map<std::string, float *> grad;
  std::map<std::string, size_t> grad_n;
  std::vector<void *> blocks;
  std::vector<std::vector<float>> host_grads;
  ~TrainStore() {
    for (void *p : blocks)
      hb->be.release(hb->be.self, p);
  }
  void *Alloc(size_t n) {
    if (!hb) {
      host_grads.emplace_back(n, std::nanf(""));
      return host_grads.back().data();
    }
    void *p = nullptr;
    gcc_diag d{};
    if (hb->be.alloc(hb->be.self, n * sizeof(float), &p, &d) != GCC_OK)
      return nullptr;
    blocks.push_back(p);
    return p;
  }
  static void *Bind(void *user, const gcc_graph *g, int v) {
    auto *s = static_cast<TrainStore *>(user);
    const gcc_value &val = g->values[v];
    const size_t n = static_cast<size_t>(gcc_shape_numel(&val.shape, NULL));
    if (val.kind == GCC_VALUE_PARAM) {
      if (!s->param.count(val.name))
        return nullptr;
      if (!s->hb)
        return s->param[val.name].data();
      void *p = s->Alloc(n);
      if (p)
        std::memcpy(p, s->param[val.name].data(), n * sizeof(float));
      return p;
    }
    if (val.kind == GCC_VALUE_GRAD && val.param_of >= 0) {
      float *p = static_cast<float *>(s->Alloc(n));
      s->grad[g->values[val.param_of].name] = p;
      s->grad_n[g->values[val.param_of].name] = n;
      return p;
    }
    return nullptr;
  }
};

TEST(AttentionPass, TrainingGradientsMatchTheUnfusedChain) {
  std::mt19937_64 r(9);
  const int64_t T = 23, n = T * kD;
  std::map<std::string, std::vector<float>> params = {
      {"Qp", Randn(r, n, 0.5f)}, {"Kp", Randn(r, n, 0.5f)}, {"Vp", Randn(r, n)}};
  std::vector<float> target = Randn(r, n);
  const uint64_t run_seed = 0x5eed31;
  auto build = [&](ChainForm form, float drop) {
    gcc_builder *b = gcc_builder_new("train", 1);
    int64_t d2[2] = {T, kD};
    int q = gcc_build_param(b, "Qp", 2, d2, params["Qp"].data());
    int k = gcc_build_param(b, "Kp", 2, d2, params["Kp"].data());
    int v = gcc_build_param(b, "Vp", 2, d2, params["Vp"].data());
    int t = gcc_build_input(b, "target", GCC_DT_FLOAT32, 2, d2);
    int o;
    if (form == kDirectFused) {
      gcc_graph *g = b->g;
      int l = -1, node = -1;
      gcc_diag d{};
      EXPECT_EQ(gcc_graph_add_temp(g, "drop.out", GCC_VALUE_ACTIVATION, &o, &d), GCC_OK);
      EXPECT_EQ(gcc_graph_add_temp(g, "drop.L", GCC_VALUE_ACTIVATION, &l, &d), GCC_OK);
      int ins[3] = {q, k, v}, outs[2] = {o, l};
      EXPECT_EQ(gcc_graph_add_node(g, "drop", GCC_OP_ATTENTION, ins, 3, outs, 2, &node, &d), GCC_OK)
          << d.msg;
      EXPECT_EQ(gcc_node_set_int(g, node, "is_causal", 1), GCC_OK);
      EXPECT_EQ(gcc_node_set_float(g, node, "dropout_p", drop), GCC_OK);
    } else {
      int kt = gcc_build_op(b, GCC_OP_TRANSPOSE, "kt", "kt.out", &k, 1);
      int64_t perm[2] = {1, 0};
      gcc_build_set_ints(b, kt, "perm", perm, 2);
      int i1[2] = {q, kt};
      int s = gcc_build_op(b, GCC_OP_MATMUL, "qk", "qk.out", i1, 2);
      float sd = std::sqrt(static_cast<float>(kD));
      int c = gcc_build_const(b, "sqrt_d", GCC_DT_FLOAT32, 0, nullptr, &sd);
      int i2[2] = {s, c};
      s = gcc_build_op(b, GCC_OP_DIV, "scale", "scale.out", i2, 2);
      if (drop > 0.0f) { // the causal -Inf triangle
        std::vector<float> tri(static_cast<size_t>(T * T));
        for (int64_t i = 0; i < T; ++i)
          for (int64_t j = 0; j < T; ++j)
            tri[i * T + j] = j > i ? -INFINITY : 0.0f;
        int64_t md[2] = {T, T};
        int m = gcc_build_const(b, "causal_mask", GCC_DT_FLOAT32, 2, md, tri.data());
        int i5[2] = {s, m};
        s = gcc_build_op(b, GCC_OP_ADD, "add_mask", "add_mask.out", i5, 2);
      }
      int p = gcc_build_op(b, GCC_OP_SOFTMAX, "softmax", "softmax.out", &s, 1);
      gcc_build_set_int(b, p, "axis", -1);
      int pd = p;
      if (drop > 0.0f) {
        pd = gcc_build_op(b, GCC_OP_DROPOUT, "drop", "drop.pout", &p, 1);
        gcc_build_set_float(b, pd, "ratio", drop);
      }
      int i3[2] = {pd, v};
      o = gcc_build_op(b, GCC_OP_MATMUL, "pv", "drop.out", i3, 2);
      if (form == kUnfused)
        gcc_build_output(b, p);
    }
    int loss = gcc_build_mse(b, "loss", o, t);
    gcc_build_output(b, loss);
    gcc_build_training_spec ts = {};
    ts.loss = "loss";
    ts.prediction = "drop.out";
    ts.opt.kind = GCC_OPT_SGD;
    ts.batch_size = 1;
    ts.epochs = 1;
    ts.seed = run_seed;
    gcc_build_training(b, &ts);
    gcc_graph *g = nullptr;
    gcc_diag d{};
    EXPECT_EQ(gcc_builder_finish(b, &g, &d), GCC_OK) << d.msg;
    return GraphPtr(g);
  };
  struct Result {
    std::vector<float> out;
    std::map<std::string, std::vector<float>> grad;
  };
  // runs `form` at `step`: the prediction and the gradients
  auto run = [&](ChainForm form, float drop, bool cuda, int64_t step, Result *res) {
    GraphPtr model = build(form, drop);
    ASSERT_NE(model, nullptr);
    gcc_options o{};
    o.mode = GCC_MODE_TRAIN;
    o.batch_size = 1;
    o.opt.kind = GCC_OPT_NONE;
    gcc_plan_config cfg{};
    cfg.threads = 1;
    FILE *quiet = fopen("/dev/null", "w");
    if (cuda) {
      o.device = GCC_DEV_CUDA(0);
      o.device_explicit = 1;
      o.n_cuda_devices = 1;
      o.warn_file = quiet;
      cfg.readback_ring = 1;
      cfg.device = &gcc_test::SharedHostBackend()->be;
      cfg.sm = 90;
      cfg.sm_count = 4;
      cfg.compile = gcc_kernel_cache_hook;
      cfg.compile_user = gcc_test::TestKernelCache();
    }
    TrainStore st;
    st.hb = cuda ? gcc_test::SharedHostBackend() : nullptr;
    st.param = params;
    gcc_plan *plan = nullptr;
    gcc_diag d{};
    gcc_status cs = gcc_plan_compile(model.get(), &o, &cfg, TrainStore::Bind, &st, &plan, &d);
    if (quiet)
      fclose(quiet);
    ASSERT_EQ(cs, GCC_OK) << d.msg;
    const gcc_graph *cg = gcc_plan_graph(plan);
    EXPECT_EQ(CountOp(cg, GCC_OP_ATTENTION_GRAD), form == kUnfused ? 0 : 1);
    EXPECT_EQ(CountOp(cg, GCC_OP_SOFTMAX_GRAD), form == kUnfused ? 1 : 0);
    EXPECT_EQ(CountOp(cg, GCC_OP_DROPOUT), form == kUnfused && drop > 0.0f ? 1 : 0);
    ASSERT_EQ(gcc_plan_bind_input(plan, "target", target.data(), &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_plan_run(plan, step, &d), GCC_OK) << d.msg;
    if (cuda) {
      ASSERT_NE(gcc_plan_host_tensor(plan, "loss", &d), nullptr) << d.msg; // waits
    }
    const gcc_tensor *y = gcc_plan_tensor(plan, "drop.out");
    ASSERT_TRUE(y && y->data);
    res->out.assign(static_cast<const float *>(y->data),
                    static_cast<const float *>(y->data) + y->numel);
    for (const auto &kv : st.grad)
      res->grad[kv.first].assign(kv.second, kv.second + st.grad_n[kv.first]);
    gcc_plan_free(plan);
  };
  // Both are float32 computations of the same values, each through sums of
  // at most 2 D + T terms (the D-term scores, the T-term softmax sum and
  // P V, the D-term dP and the T-term dQ / dK / dV sums) plus, with
  // dropout, one more rounding per probability (its 1 / (1 - p) factor):
  // each within 8 (2 D + T + 1) 2^-24 of the tensor's largest magnitude
  // (the factor 8 for exp's few ulps and the cancellation in dP - D_i, as
  // Bound), their difference within twice that.
  auto expect_close = [&](const std::vector<float> &a, const std::vector<float> &b,
                          const std::string &what) {
    ASSERT_EQ(a.size(), static_cast<size_t>(n)) << what;
    ASSERT_EQ(b.size(), static_cast<size_t>(n)) << what;
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; ++i) {
      e = std::max(e, std::fabs(static_cast<double>(a[i]) - b[i]));
      m = std::max(m, std::fabs(static_cast<double>(b[i])));
    }
    EXPECT_GT(m, 0.0) << what;
    std::printf("[attention] fused vs unfused %s: max |diff| %.3g, max |value| %.3g\n",
                what.c_str(), e, m);
    EXPECT_LE(e, 2 * 8 * static_cast<double>(2 * kD + T + 1) * std::ldexp(1.0, -24) * m) << what;
  };
  for (float drop : {0.0f, 0.2f}) {
    for (bool cuda : {false, true}) {
      if (cuda && (drop == 0.0f || !BuiltWithNvrtc()))
        continue; // without dropout: the CPU plan (the generated kernels: the gradcheck)
      for (int64_t step : {int64_t(0), int64_t(3)}) {
        if ((drop == 0.0f || cuda) && step != (drop == 0.0f ? 0 : 3))
          continue; // p = 0: step 0 only; the CUDA plan: step 3 only
        const std::string tag = std::string(cuda ? "cuda" : "cpu") + " p=" + std::to_string(drop) +
                                " step " + std::to_string(step);
        SCOPED_TRACE(tag);
        Result unfused;
        run(kUnfused, drop, cuda, step, &unfused);
        // the chain fused by the pass (its Dropout too); with dropout also an
        // Attention node written directly
        for (ChainForm form : {kPassFused, kDirectFused}) {
          if (form == kDirectFused && drop == 0.0f)
            continue;
          const std::string ftag =
              tag + (form == kPassFused ? " (attention pass)" : " (Attention node)");
          Result fused;
          run(form, drop, cuda, step, &fused);
          if (HasFatalFailure())
            return;
          expect_close(fused.out, unfused.out, "O " + ftag);
          for (const char *name : {"Qp", "Kp", "Vp"})
            expect_close(fused.grad[name], unfused.grad[name],
                         std::string("d") + name + " " + ftag);
        }
        if (drop > 0.0f) { // the mask is there: the same attention without dropout differs
          Result none;
          run(kDirectFused, 0.0f, cuda, step, &none);
          double diff = 0;
          for (int64_t i = 0; i < n; ++i)
            diff = std::max(diff, std::fabs(static_cast<double>(none.out[i]) - unfused.out[i]));
          EXPECT_GT(diff, 0.1) << "dropout changed nothing";
        }
      }
    }
  }
}

} // namespace
