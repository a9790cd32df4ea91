// Gradient accumulation (--grad-accum K; runtime/session.h grad_accum,
// passes/passes.h gcc_accum_role): K micro-batches of B rows per optimizer
// step equal one step on the K * B rows within the float32 summation bound,
// on the CPU plan and on the host-emulated CUDA plan; clipping, fp16 loss
// scaling's skip decision and the step count act once per optimizer step;
// the command line's resumed run is the uninterrupted one; bad values are
// flag errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "codegen/kernel_cache.h"
#include "graph/ir.h"
#include "graph/ops.h"
#include "models/models.h"
#include "runtime/plan.h"
#include "runtime/session.h"
#include "tests/host_backend.h"
#include "tests/run_plans.h"
#include "tests/subprocess.h"
#include "tests/testutil.h"
#include "tests/test_kernel_cache.h"

using namespace gcc_test; // tests/testutil.h, tests/subprocess.h, tests/run_plans.h

namespace {

constexpr int64_t kV = 5, kT = 16, kB = 4; // micro-batches of 4 windows of 16 tokens
constexpr double kU = 0x1p-24;             // float32 unit roundoff

// gamma_n of Higham's summation bound: |fl(sum) - sum| <= gamma_{n-1} sum|t|
double Gamma(double n) {
  return n * kU / (1.0 - n * kU);
}

gcc_session *Session(const gcc_graph *g, bool cuda, int accum, const gcc_optimizer &opt,
                     int precision = 0) {
  gcc_session_options so{};
  so.threads = 1;
  so.opt = opt;
  so.grad_accum = accum;
  so.precision = precision;
  so.max_pending = 3;
  if (cuda) {
    so.backend = &SharedHostBackend()->be;
    so.device = GCC_DEV_CUDA(0);
    so.plan.sm = 90;
    so.plan.sm_count = 4;
    so.plan.compile = gcc_kernel_cache_hook;
    so.plan.compile_user = gcc_test::TestKernelCache();
    so.plan.cuda_graph = 1;
  }
  gcc_session *s = nullptr;
  gcc_diag d{};
  EXPECT_EQ(gcc_session_create(g, &so, &s, &d), GCC_OK) << d.msg;
  return s;
}

// `rows` one-hot windows (rows, T, V) and their targets, from `salt`.
void Batch(int64_t rows, int salt, std::vector<float> *x, std::vector<int64_t> *y) {
  x->assign((size_t)(rows * kT * kV), 0.0f);
  y->resize((size_t)(rows * kT));
  for (int64_t r = 0; r < rows * kT; r++) {
    (*x)[(size_t)(r * kV + (r * 7 + salt + r / 5) % kV)] = 1.0f;
    (*y)[(size_t)r] = (r * 3 + salt + r / 3) % kV;
  }
}

std::vector<float> Get(gcc_session *s, const char *name, bool grad) {
  float *p = nullptr;
  int64_t n = 0;
  gcc_diag d{};
  gcc_status st =
      grad ? gcc_session_grad(s, name, &p, &n, &d) : gcc_session_param(s, name, &p, &n, &d);
  EXPECT_EQ(st, GCC_OK) << d.msg;
  return p ? std::vector<float>(p, p + n) : std::vector<float>();
}

const char *const kParams[] = {"bigram.weight", "bigram.bias"};

// One SGD step (lr 0.1, clip_grad_norm_ 0.05, which clips) of the one-hot
// bigram (logits = x W^T + b over the B*T rows, the mean cross-entropy):
// K = 2 micro-batches of B windows against one batch of the same 2B windows.
void ExpectTwoMicroBatchesAreOneBatch(bool cuda) {
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_char_bigram_onehot_sized(kV, kT, 7, &g, &d), GCC_OK) << d.msg;
  gcc_optimizer opt{};
  opt.kind = GCC_OPT_SGD;
  opt.lr = 0.1f;
  opt.clip_grad_norm = 0.05f;
  std::vector<float> x;
  std::vector<int64_t> y;
  Batch(2 * kB, 1, &x, &y);
  gcc_session *acc = Session(g, cuda, 2, opt), *one = Session(g, cuda, 1, opt);
  ASSERT_TRUE(acc && one);
  std::map<std::string, std::vector<float>> p0;
  for (const char *n : kParams)
    p0[n] = Get(one, n, false);
  float la = NAN, l1 = NAN;
  ASSERT_EQ(gcc_session_train_step(acc, x.data(), y.data(), 2 * kB, &la, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_train_step(one, x.data(), y.data(), 2 * kB, &l1, &d), GCC_OK) << d.msg;
  EXPECT_EQ(gcc_session_steps(acc), 1);
  // The per-row losses and logit gradients are the same numbers in both (a
  // one-hot row times W is one weight, exactly; softmax is per row; the
  // seed 1/2 times 1/(B T) is 1/(2 B T) exactly: powers of two). Only the
  // order of the sums differs: each side is within gamma_{n-1} sum|t| of
  // the exact sum, n = 2 B T = 128 terms (+ 1 for the micro-batches' add).
  // The loss: terms ln-probabilities of one sign, sum|t| / n = the loss.
  const double n = 2.0 * kB * kT;
  EXPECT_NEAR(la, l1, 2.0 * Gamma(n + 1) * l1 + 2.0 * kU * l1) << "mean of micro-batch losses";
  // The gradients: row r contributes (p_r - onehot(y_r)) / (2 B T) to the
  // bias and, at its token's column, to W; each row's L1 norm is at most
  // 2 / (2 B T), so over a whole tensor sum|t| <= 2, and the L1 norm of the
  // difference is <= 2 gamma_n * 2. A missing 1/K doubles the gradient
  // (difference ~ the gradient's own L1, ~0.5), a lost micro-batch halves it.
  std::map<std::string, std::vector<float>> ga, g1;
  double gnorm2 = 0, dnorm2 = 0;
  for (const char *name : kParams) {
    ga[name] = Get(acc, name, true);
    g1[name] = Get(one, name, true);
    ASSERT_EQ(ga[name].size(), g1[name].size());
    double l1d = 0, l1g = 0;
    for (size_t i = 0; i < ga[name].size(); i++) {
      double e = (double)ga[name][i] - g1[name][i];
      l1d += std::fabs(e);
      l1g += std::fabs(g1[name][i]);
      gnorm2 += (double)g1[name][i] * g1[name][i];
      dnorm2 += e * e;
    }
    EXPECT_GT(l1g, 0.05) << name;
    EXPECT_LE(l1d, 4.0 * Gamma(n + 1)) << name << ": accumulated vs one batch, L1 " << l1d;
  }
  // The update, once, on the accumulated gradient clipped once: p - lr c g
  // with c = max_norm / (|g| + 1e-6) < 1. Between the two sessions c
  // differs by at most |dg| / |g| relative (triangle inequality) plus the
  // norm's own rounding (a sum of squares of 90 terms: gamma_90, and the
  // square root and division, 2u); each update rounds twice (2u of |p| and
  // of the step).
  double gnorm = std::sqrt(gnorm2), c = 0.05 / (gnorm + 1e-6);
  ASSERT_LT(c, 1.0) << "the test means to clip";
  double dc = c * (std::sqrt(dnorm2) / gnorm + Gamma(90) + 4 * kU);
  for (const char *name : kParams) {
    std::vector<float> pa = Get(acc, name, false), p1 = Get(one, name, false);
    for (size_t i = 0; i < pa.size(); i++) {
      double gi = std::fabs(g1[name][i]), dg = std::fabs((double)ga[name][i] - g1[name][i]);
      double bound =
          0.1 * (c * dg + gi * dc) + 4 * kU * (std::fabs(p0[name][i]) + 0.1 * c * gi) + 1e-12;
      ASSERT_NEAR(pa[i], p1[i], bound) << name << "[" << i << "]";
      // and the step was taken (once: twice would move it twice as far)
      double want = (double)p0[name][i] - 0.1 * c * g1[name][i];
      ASSERT_NEAR(pa[i], want, bound + 0.1 * c * gi * 1e-3 + 1e-9) << name << "[" << i << "]";
    }
  }
  gcc_session_destroy(acc);
  gcc_session_destroy(one);
  gcc_graph_free(g);
}

TEST(GradAccum, TwoMicroBatchesAreOneBatchOnTheCpu) {
  ExpectTwoMicroBatchesAreOneBatch(false);
}

TEST(GradAccum, TwoMicroBatchesAreOneBatchOnTheHostEmulatedCudaPlan) {
#ifdef GCC_NO_CUDA // tests/BUILD: defined in --config=cpu_only
  GTEST_SKIP() << "built without CUDA (--config=cpu_only): the host-emulated CUDA plan needs "
                  "the toolkit's NVRTC";
#endif
  ExpectTwoMicroBatchesAreOneBatch(true);
}

// The built-in GPT (tied wte, attention, LayerNorm, GELU; dropout 0): four
// micro-batches (FIRST, two MIDDLE, LAST plans) against one batch of the
// same rows, gradients only (no optimizer). Forward values of a row do not
// depend on the batch; the gradients are sums over the 4 B T = 128 tokens
// of products through 16- to 64-term dot products, summed in other orders:
// 1e-4 of each tensor's largest magnitude is ~1700 float32 epsilons, far
// above that rounding (and tests/lm_test's CPU/CUDA bound), far below a
// lost or doubled micro-batch (a quarter of the gradient).
void ExpectGptAccumulates(bool cuda) {
  const int64_t V = 6, T = 8, B = 2, K = 4;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_char_gpt_sized(V, T, 2, 2, 16, 0.0f, 5, &g, &d), GCC_OK) << d.msg;
  std::vector<int64_t> idx(K * B * T), tgt(K * B * T);
  for (int64_t i = 0; i < K * B * T; i++) {
    idx[i] = (i * 5 + i / T) % V;
    tgt[i] = (i * 3 + 1 + i / 7) % V;
  }
  gcc_optimizer none{};
  none.kind = GCC_OPT_NONE;
  gcc_session *acc = Session(g, cuda, (int)K, none), *one = Session(g, cuda, 1, none);
  ASSERT_TRUE(acc && one);
  float la = NAN, l1 = NAN;
  ASSERT_EQ(gcc_session_train_step(acc, idx.data(), tgt.data(), K * B, &la, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_train_step(one, idx.data(), tgt.data(), K * B, &l1, &d), GCC_OK) << d.msg;
  EXPECT_NEAR(la, l1, 1e-5 * l1);
  int checked = 0;
  for (int v = 0; v < g->n_values; v++) {
    if (g->values[v].kind != GCC_VALUE_PARAM || g->values[v].state)
      continue;
    const char *name = g->values[v].name;
    std::vector<float> a = Get(acc, name, true), b = Get(one, name, true);
    ASSERT_EQ(a.size(), b.size()) << name;
    double m = 0, e = 0;
    for (size_t i = 0; i < a.size(); i++) {
      m = std::max(m, std::fabs((double)b[i]));
      e = std::max(e, std::fabs((double)a[i] - b[i]));
    }
    EXPECT_GT(m, 0.0) << name;
    EXPECT_LE(e, 1e-4 * m) << name;
    checked++;
  }
  EXPECT_EQ(checked, 28);
  gcc_session_destroy(acc);
  gcc_session_destroy(one);
  gcc_graph_free(g);
}

TEST(GradAccum, GptGradientsOfFourMicroBatchesOnTheCpu) {
  ExpectGptAccumulates(false);
}

// (The host-emulated CUDA plans of this GPT take minutes to build four times
// over -- FIRST, MIDDLE, LAST and the one-batch plan; the bigram's above
// covers accumulation on the CUDA plan.)

// fp16 loss scaling decides once per optimizer step: a scale that
// overflows the float16 gradients skips the step and backs off once
// (x 0.5, not once per micro-step), counts one skipped step, and leaves the
// parameters as they were; the default scale applies the step.
TEST(GradAccum, LossScalingSkipsAndBacksOffOncePerStep) {
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_char_bigram_onehot_sized(kV, kT, 7, &g, &d), GCC_OK) << d.msg;
  std::vector<float> x;
  std::vector<int64_t> y;
  Batch(3 * kB, 2, &x, &y);
  for (float init : {3.0e38f, GCC_SCALER_INIT_SCALE}) {
    gcc_optimizer opt{};
    opt.kind = GCC_OPT_SGD;
    opt.lr = 0.1f;
    opt.scaler = {GCC_LOSS_SCALE_DYNAMIC, init, GCC_SCALER_GROWTH_FACTOR, GCC_SCALER_BACKOFF_FACTOR,
                  GCC_SCALER_GROWTH_INTERVAL};
    gcc_session *s = Session(g, false, 3, opt, GCC_PRECISION_FP16);
    ASSERT_NE(s, nullptr);
    std::vector<float> w0 = Get(s, "bigram.weight", false);
    float l = NAN;
    ASSERT_EQ(gcc_session_train_step(s, x.data(), y.data(), 3 * kB, &l, &d), GCC_OK) << d.msg;
    gcc_loss_scale_state st{};
    ASSERT_EQ(gcc_session_loss_scale(s, &st, &d), GCC_OK) << d.msg;
    EXPECT_EQ(gcc_session_steps(s), 1);
    std::vector<float> w1 = Get(s, "bigram.weight", false);
    if (init > 1e30f) {
      EXPECT_EQ(st.skipped_steps, 1);
      EXPECT_EQ(st.applied_steps, 0);
      EXPECT_EQ(st.scale, init * 0.5f);
      EXPECT_EQ(0, std::memcmp(w0.data(), w1.data(), w0.size() * sizeof(float)));
    } else {
      EXPECT_EQ(st.skipped_steps, 0);
      EXPECT_EQ(st.applied_steps, 1);
      EXPECT_EQ(st.scale, init);
      EXPECT_NE(0, std::memcmp(w0.data(), w1.data(), w0.size() * sizeof(float)));
    }
    gcc_session_destroy(s);
  }
  gcc_graph_free(g);
}

TEST(GradAccum, RowsThatAreNotKMicroBatchesAreAnError) {
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_char_bigram_onehot_sized(kV, kT, 7, &g, &d), GCC_OK) << d.msg;
  gcc_optimizer opt{};
  opt.kind = GCC_OPT_SGD;
  opt.lr = 0.1f;
  gcc_session *s = Session(g, false, 3, opt);
  ASSERT_NE(s, nullptr);
  std::vector<float> x;
  std::vector<int64_t> y;
  Batch(4, 0, &x, &y);
  float l = NAN;
  EXPECT_EQ(gcc_session_train_step(s, x.data(), y.data(), 4, &l, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("--grad-accum 3: a step of 4 rows is not 3 micro-batches"),
            std::string::npos)
      << d.msg;
  gcc_session_destroy(s);
  gcc_graph_free(g);
}

// ---- the command line --------------------------------------------------------

bool Has(const std::string &s, const std::string &needle) {
  return s.find(needle) != std::string::npos;
}

ProcResult Train(const std::vector<std::string> &args,
                 const std::vector<std::pair<std::string, std::string>> &env = {}) {
  ProcOptions o;
  o.timeout_s = 120;
  o.env = env;
  return RunRunfile("cli/gcc-train", args, o);
}

class GradAccumCli : public ::testing::Test {
protected:
  void SetUp() override {
    model_ = Runfile("models/char_bigram.pb");
    ASSERT_FALSE(model_.empty());
    // 3000 bytes of "abcde\n" in an irregular order (a fixed LCG), so that
    // windows at other offsets have other statistics
    std::string s;
    uint32_t r = 12345;
    for (int i = 0; i < 3000; i++) {
      r = r * 1664525u + 1013904223u;
      s += "abcde\n"[(r >> 16) % 6];
    }
    text_ = tmp_.file("abc.txt");
    ASSERT_TRUE(WriteText(text_, s));
  }
  std::string model_, text_;
  TempDir tmp_;
};

// Micro-batch k of step n is drawn from (seed, n K + k) only: a run resumed
// from a checkpoint (mid-epoch: an epoch of this file is 2 steps of 2 x 4 x
// 64 tokens) writes the model the uninterrupted run does, bit for bit; the
// steps, the evaluation points and the checkpoints count optimizer steps.
TEST_F(GradAccumCli, AResumedRunIsTheUninterruptedOne) {
  std::vector<std::string> common = {model_,
                                     "--data",
                                     text_,
                                     "--batch-size",
                                     "4",
                                     "--grad-accum",
                                     "2",
                                     "--seed",
                                     "3",
                                     "--device",
                                     "cpu",
                                     "--threads",
                                     "1",
                                     "--quiet",
                                     "--eval-batches",
                                     "2",
                                     "--lr",
                                     "3e-2"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = common;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  std::string full = tmp_.file("full.pb"), resumed = tmp_.file("resumed.pb"), ck = tmp_.file("ck");
  const std::vector<std::pair<std::string, std::string>> env = {{"GCC_CPU_GEMM", "onednn"}};
  ProcResult r = Train(with({"--max-steps", "7", "--output", full}), env);
  ASSERT_EQ(r.exit_code, 0) << r;
  r = Train(
      with({"--max-steps", "3", "--checkpoint-dir", ck, "--checkpoint-every", "3", "--no-output"}),
      env);
  ASSERT_EQ(r.exit_code, 0) << r;
  r = Train(with({"--max-steps", "7", "--resume", ck, "--output", resumed}), env);
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(ReadBytes(full), ReadBytes(resumed));
  // and it is not the run without accumulation
  std::string plain = tmp_.file("plain.pb");
  std::vector<std::string> a = with({"--max-steps", "7", "--output", plain});
  a[6] = "1";
  r = Train(a, env);
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_NE(ReadBytes(full), ReadBytes(plain));
}

TEST_F(GradAccumCli, CountsOptimizerStepsAndTokens) {
  ProcResult r = Train({model_, "--data", text_, "--batch-size", "2", "--grad-accum", "3",
                        "--max-steps", "4", "--eval-every", "2", "--eval-batches", "2", "--device",
                        "cpu", "--threads", "1", "--no-output"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(Has(r.out, "step 2: train loss ")) << r.out;
  EXPECT_TRUE(Has(r.out, "step 4: train loss ")) << r.out;
  EXPECT_FALSE(Has(r.out, "step 6: train loss ")) << r.out;
}

TEST_F(GradAccumCli, BadValuesAreFlagErrors) {
  for (const char *bad : {"0", "-2", "x"}) {
    ProcResult r = Train({model_, "--data", text_, "--grad-accum", bad, "--max-steps", "1",
                          "--device", "cpu", "--no-output"});
    EXPECT_EQ(r.exit_code, 2) << r;
    EXPECT_TRUE(Has(r.err, std::string("--grad-accum '") + bad + "': expected an integer >= 1"))
        << r.err;
  }
  // an image model trains on whole batches
  ProcResult r = Train({Runfile("models/mnist_mlp.pb"), "--grad-accum", "2", "--epochs", "1",
                        "--device", "cpu", "--no-output"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(Has(r.err, "--grad-accum 2: gradient accumulation is for token data "
                         "(--dataset text|tokens) only; --dataset mnist"))
      << r.err;
}

} // namespace
