// gpu_test: the CUDA backend on a real GPU. Every test skips, saying why,
// when no usable CUDA device exists (this project's CI has none); on a
// machine with a GPU, bench/gpu_check.sh runs them.
//
// The same comparisons as tests/device_plan_test.cc, on the device itself:
// training steps of the MNIST MLP on cuda:0 against the CPU backend (losses
// and parameters), CUDA Graph replay, training after an evaluation with
// graphs (MLP, and the CIFAR CNN evaluated at a larger batch than it
// trains at), evaluation, a bad label found by the loss kernel, and the
// out-of-memory message of a plan that cannot fit. Issue 29's parts: the
// parallel BatchNorm kernels in a residual block trained on the GPU against
// the CPU and bitwise run to run, and the cuDNN algorithm choice timed by
// cudnnFind on the device, cached on disk and reused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "models/models.h"
#include "deploy/bundle.h"
#include "deploy/export.h"
#include "runtime/cuda/cuda_backend.h"
#include "deploy/gcc_api.h"
#include "runtime/device.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/arch_check.h"
#include "runtime/session.h"
#include "codegen/kernel_cache.h"
#include "runtime/cuda/cudnn_conv.h"
}

#include <cstring>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/test_graphs.h"

namespace {

const gcc_kernel_cache_config kKernelCache = {nullptr, 1};

class Gpu : public ::testing::Test {
protected:
  void SetUp() override {
    char reason[512] = "";
    if (gcc_cuda_device_count(reason, sizeof reason) == 0)
      GTEST_SKIP() << "no usable CUDA device: " << reason;
    gcc_diag d{};
    ASSERT_EQ(gcc_device_info_cuda(0, &info_, &d), GCC_OK) << d.msg;
    if (gcc_cuda_check_supported(&info_, &d) != GCC_OK)
      GTEST_SKIP() << d.msg;
    ASSERT_EQ(gcc_cuda_backend_create(0, &backend_, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &model_, &d), GCC_OK) << d.msg;
  }
  void TearDown() override {
    gcc_graph_free(model_);
    gcc_cuda_backend_destroy(backend_);
  }
  gcc_session_options Options(bool on_gpu, bool graphs, int pending) const {
    gcc_session_options so{};
    so.threads = 2;
    so.opt = model_->training.opt;
    if (on_gpu) {
      so.backend = gcc_cuda_backend_table(backend_);
      so.device = GCC_DEV_CUDA(0);
      so.plan.sm = info_.cc_major * 10 + info_.cc_minor;
      so.plan.sm_count = info_.units;
      so.plan.compile = gcc_kernel_cache_hook;
      so.plan.compile_user = (void *)&kKernelCache;
      so.plan.cuda_graph = graphs;
      so.max_pending = pending;
    }
    return so;
  }
  gcc_device_info info_{};
  gcc_cuda_backend *backend_ = nullptr;
  gcc_graph *model_ = nullptr;
};

struct Batch {
  std::vector<float> x;
  std::vector<int64_t> y;
};

Batch MakeBatch(int rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  Batch b{std::vector<float>(rows * 784), std::vector<int64_t>(rows)};
  for (float &v : b.x)
    v = n(rng);
  for (int64_t &v : b.y)
    v = rng() % 10;
  return b;
}

double MaxRelErr(const float *a, const float *b, int64_t n) {
  double m = 0, e = 0;
  for (int64_t i = 0; i < n; i++) {
    m = std::max(m, std::fabs((double)b[i]));
    e = std::max(e, std::fabs((double)a[i] - (double)b[i]));
  }
  return m > 0 ? e / m : e;
}

void TrainBoth(const gcc_graph *model, const gcc_session_options &gpu_o,
               const gcc_session_options &cpu_o, int steps, gcc_plan **plan_out) {
  gcc_diag d{};
  gcc_session *gpu = nullptr, *cpu = nullptr;
  ASSERT_EQ(gcc_session_create(model, &gpu_o, &gpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(model, &cpu_o, &cpu, &d), GCC_OK) << d.msg;
  std::vector<float> gl, cl;
  for (int s = 0; s < steps; s++) {
    Batch b = MakeBatch(64, 1000 + s);
    float l = 0;
    ASSERT_EQ(gcc_session_train_step(cpu, b.x.data(), b.y.data(), 64, &l, &d), GCC_OK) << d.msg;
    cl.push_back(l);
    ASSERT_EQ(gcc_session_train_step_async(gpu, b.x.data(), b.y.data(), 64, &d), GCC_OK) << d.msg;
    if ((s + 1) % gpu_o.max_pending == 0 || s == steps - 1) {
      std::vector<float> got(gpu_o.max_pending);
      int n = 0;
      ASSERT_EQ(gcc_session_collect_losses(gpu, got.data(), (int)got.size(), &n, &d), GCC_OK)
          << d.msg;
      gl.insert(gl.end(), got.begin(), got.begin() + n);
    }
  }
  ASSERT_EQ(gl.size(), cl.size());
  for (size_t s = 0; s < gl.size(); s++) // cuBLAS sums in another order: 1e-3 relative
    EXPECT_NEAR(gl[s], cl[s], 1e-3 * std::max(1.0f, std::fabs(cl[s]))) << "step " << s;
  for (int v = 0; v < model->n_values; v++) {
    if (model->values[v].kind != GCC_VALUE_PARAM)
      continue;
    int64_t n = 0;
    float *a = nullptr;
    gcc_session_param(gpu, model->values[v].name, &a, &n, nullptr);
    float *b = nullptr;
    gcc_session_param(cpu, model->values[v].name, &b, &n, nullptr);
    ASSERT_TRUE(a && b);
    EXPECT_LE(MaxRelErr(a, b, n), 1e-3) << model->values[v].name;
  }
  if (plan_out) {
    ASSERT_EQ(gcc_session_plan(gpu, GCC_MODE_TRAIN, 64, plan_out, &d), GCC_OK);
    EXPECT_GT(gcc_plan_graph_replays(*plan_out), 0) << gcc_plan_graph_note(*plan_out);
  }
  Batch e = MakeBatch(1000, 7);
  float l1 = 0, l2 = 0;
  int64_t c1 = 0, c2 = 0;
  ASSERT_EQ(gcc_session_eval_batch(gpu, e.x.data(), e.y.data(), 1000, &l1, &c1, nullptr, &d),
            GCC_OK)
      << d.msg;
  ASSERT_EQ(gcc_session_eval_batch(cpu, e.x.data(), e.y.data(), 1000, &l2, &c2, nullptr, &d),
            GCC_OK)
      << d.msg;
  EXPECT_NEAR(l1, l2, 1e-3 * std::max(1.0f, std::fabs(l2)));
  EXPECT_NEAR((double)c1, (double)c2, 3.0);
  if (plan_out)
    *plan_out = nullptr; // owned by the session, freed below
  gcc_session_destroy(gpu);
  gcc_session_destroy(cpu);
}

TEST_F(Gpu, MlpTrainingStepsMatchTheCpuBackend) {
  TrainBoth(model_, Options(true, false, 1), Options(false, false, 1), 20, nullptr);
}

TEST_F(Gpu, CudaGraphReplayMatchesTheCpuBackend) {
  gcc_plan *p = nullptr;
  TrainBoth(model_, Options(true, true, 10), Options(false, false, 1), 40, &p);
}

// The CIFAR-10 CNN through cuDNN (convolutions, poolings and their
// gradients), cuBLASLt and the generated kernels, against the CPU backend.
TEST_F(Gpu, CifarCnnThroughCudnnMatchesTheCpuBackend) {
  gcc_graph *cnn = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_cifar_cnn(GCC_CIFAR_CNN_SEED, &cnn, &d), GCC_OK) << d.msg;
  gcc_session_options go = Options(true, true, 1), co = Options(false, false, 1);
  go.opt = co.opt = cnn->training.opt;
  gcc_session *gpu = nullptr, *cpu = nullptr;
  ASSERT_EQ(gcc_session_create(cnn, &go, &gpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(cnn, &co, &cpu, &d), GCC_OK) << d.msg;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int s = 0; s < 10; s++) {
    std::vector<float> x(64 * 3 * 32 * 32);
    std::vector<int64_t> y(64);
    for (float &v : x)
      v = nd(rng);
    for (int64_t &v : y)
      v = rng() % 10;
    float l1 = 0, l2 = 0;
    ASSERT_EQ(gcc_session_train_step(gpu, x.data(), y.data(), 64, &l1, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_train_step(cpu, x.data(), y.data(), 64, &l2, &d), GCC_OK) << d.msg;
    EXPECT_NEAR(l1, l2, 1e-3 * std::max(1.0f, std::fabs(l2))) << "step " << s;
  }
  gcc_session_destroy(gpu);
  gcc_session_destroy(cpu);
  gcc_graph_free(cnn);
}

// The layout pass (issue 29, --layout nhwc): the CIFAR CNN's convolutions,
// poolings, ReLUs and their gradients channels-last through cuDNN's
// CUDNN_TENSOR_NHWC descriptors (KRSC filters), with the boundary
// conversions as generated kernels. Against the CPU within the bound of the
// NCHW test above (cuDNN's NHWC algorithms sum in yet another order: 1e-3
// relative over 10 steps), and bitwise run to run (deterministic
// algorithms, the default). (The 16-bit test below runs NHWC too: --layout
// auto is NHWC for bf16 and fp16.)
TEST_F(Gpu, CifarCnnInNhwcThroughCudnnMatchesTheCpuAndRepeatsBitwise) {
  gcc_graph *cnn = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_cifar_cnn(GCC_CIFAR_CNN_SEED, &cnn, &d), GCC_OK) << d.msg;
  gcc_session_options go = Options(true, true, 1), co = Options(false, false, 1);
  go.opt = co.opt = cnn->training.opt;
  go.layout = GCC_LAYOUT_CHOOSE_NHWC;
  gcc_session *gpu = nullptr, *gpu2 = nullptr, *cpu = nullptr;
  ASSERT_EQ(gcc_session_create(cnn, &go, &gpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(cnn, &go, &gpu2, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(cnn, &co, &cpu, &d), GCC_OK) << d.msg;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int s = 0; s < 10; s++) {
    std::vector<float> x(64 * 3 * 32 * 32);
    std::vector<int64_t> y(64);
    for (float &v : x)
      v = nd(rng);
    for (int64_t &v : y)
      v = rng() % 10;
    float l1 = 0, l1b = 0, l2 = 0;
    ASSERT_EQ(gcc_session_train_step(gpu, x.data(), y.data(), 64, &l1, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_train_step(gpu2, x.data(), y.data(), 64, &l1b, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_train_step(cpu, x.data(), y.data(), 64, &l2, &d), GCC_OK) << d.msg;
    EXPECT_NEAR(l1, l2, 1e-3 * std::max(1.0f, std::fabs(l2))) << "step " << s;
    EXPECT_EQ(l1, l1b) << "step " << s;
  }
  gcc_plan *p = nullptr;
  ASSERT_EQ(gcc_session_plan(gpu, GCC_MODE_TRAIN, 64, &p, &d), GCC_OK) << d.msg;
  int nhwc = 0;
  const gcc_graph *pg = gcc_plan_graph(p);
  for (int v = 0; v < pg->n_values; v++)
    nhwc += pg->values[v].layout == GCC_LAYOUT_NHWC;
  EXPECT_GT(nhwc, 0);
  gcc_session_destroy(gpu);
  gcc_session_destroy(gpu2);
  gcc_session_destroy(cpu);
  gcc_graph_free(cnn);
}

// Mixed precision (issue 19) through cuDNN with 16-bit tensors: the CIFAR
// CNN's convolutions, max poolings and their gradients in bfloat16 and
// float16 on the GPU against the CPU plan's emulation of the same roundings.
// They differ where cuDNN and cuBLASLt sum in another order than the CPU
// (one 16-bit unit of an element) and where cuDNN adds a convolution's bias
// to the 16-bit stored result (README, Mixed precision): the losses within
// 2e-2 relative over 10 steps (tests/precision_test's host-emulated
// tolerance for bfloat16).
TEST_F(Gpu, CifarCnnInSixteenBitsThroughCudnnTracksTheCpu) {
  for (int precision : {GCC_PRECISION_BF16, GCC_PRECISION_FP16}) {
    SCOPED_TRACE(gcc_precision_name(precision));
    gcc_graph *cnn = nullptr;
    gcc_diag d{};
    ASSERT_EQ(gcc_model_cifar_cnn(GCC_CIFAR_CNN_SEED, &cnn, &d), GCC_OK) << d.msg;
    gcc_session_options go = Options(true, true, 1), co = Options(false, false, 1);
    go.opt = co.opt = cnn->training.opt;
    go.precision = co.precision = precision;
    gcc_session *gpu = nullptr, *cpu = nullptr;
    ASSERT_EQ(gcc_session_create(cnn, &go, &gpu, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_create(cnn, &co, &cpu, &d), GCC_OK) << d.msg;
    std::mt19937 rng(9);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int s = 0; s < 10; s++) {
      std::vector<float> x(64 * 3 * 32 * 32);
      std::vector<int64_t> y(64);
      for (float &v : x)
        v = nd(rng);
      for (int64_t &v : y)
        v = rng() % 10;
      float l1 = 0, l2 = 0;
      ASSERT_EQ(gcc_session_train_step(gpu, x.data(), y.data(), 64, &l1, &d), GCC_OK) << d.msg;
      ASSERT_EQ(gcc_session_train_step(cpu, x.data(), y.data(), 64, &l2, &d), GCC_OK) << d.msg;
      EXPECT_NEAR(l1, l2, 2e-2 * std::max(1.0f, std::fabs(l2))) << "step " << s;
    }
    gcc_session_destroy(gpu);
    gcc_session_destroy(cpu);
    gcc_graph_free(cnn);
  }
}

// Issue 21: a session's training, evaluation and last-batch plans each keep
// their own CUDA Graphs, so training after an evaluation (captured on its
// later batches) goes on learning as on the CPU; the losses after the
// evaluation are not stuck at one value.
TEST_F(Gpu, TrainEvaluateTrainWithCudaGraphsMatchesTheCpu) {
  gcc_diag d{};
  gcc_session *gpu = nullptr, *cpu = nullptr;
  gcc_session_options go = Options(true, true, 1), co = Options(false, false, 1);
  ASSERT_EQ(gcc_session_create(model_, &go, &gpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(model_, &co, &cpu, &d), GCC_OK) << d.msg;
  std::vector<float> after;
  uint32_t seed = 3000;
  for (int phase = 0; phase < 3; phase++) {
    for (int s = 0; s < (phase == 1 ? 4 : 8); s++) {
      int rows = phase == 1 ? 1000 : (s == 7 ? 32 : 64); // a short last batch: a third plan
      Batch b = MakeBatch(rows, seed++);
      float l1 = 0, l2 = 0;
      if (phase == 1) {
        int64_t c1 = 0, c2 = 0;
        ASSERT_EQ(gcc_session_eval_batch(gpu, b.x.data(), b.y.data(), rows, &l1, &c1, nullptr, &d),
                  GCC_OK)
            << d.msg;
        ASSERT_EQ(gcc_session_eval_batch(cpu, b.x.data(), b.y.data(), rows, &l2, &c2, nullptr, &d),
                  GCC_OK)
            << d.msg;
        EXPECT_NEAR((double)c1, (double)c2, 3.0);
      } else {
        ASSERT_EQ(gcc_session_train_step(gpu, b.x.data(), b.y.data(), rows, &l1, &d), GCC_OK)
            << d.msg;
        ASSERT_EQ(gcc_session_train_step(cpu, b.x.data(), b.y.data(), rows, &l2, &d), GCC_OK)
            << d.msg;
        if (phase == 2)
          after.push_back(l1);
      }
      EXPECT_NEAR(l1, l2, 1e-3 * std::max(1.0f, std::fabs(l2)))
          << (phase == 1 ? "evaluation " : "training ") << "phase " << phase << " step " << s;
    }
  }
  std::sort(after.begin(), after.end());
  EXPECT_GT(std::unique(after.begin(), after.end()) - after.begin(), 1)
      << "the training loss is stuck after the evaluation";
  gcc_plan *p = nullptr;
  ASSERT_EQ(gcc_session_plan(gpu, GCC_MODE_TRAIN, 64, &p, &d), GCC_OK) << d.msg;
  EXPECT_GT(gcc_plan_graph_replays(p), 0) << gcc_plan_graph_note(p);
  gcc_session_destroy(gpu);
  gcc_session_destroy(cpu);
}

// Issue 21: the CIFAR CNN trains at batch 4 with CUDA Graphs, evaluates a
// batch of 1000 (larger convolutions, a larger cuDNN workspace), trains
// again: each plan's graphs use that plan's own workspace. Run twice, the
// GPU session gives the same losses bit for bit (deterministic cuDNN
// algorithms).
TEST_F(Gpu, CifarCnnTrainEvaluateAtOneThousandTrainAgainIsDeterministic) {
  gcc_graph *cnn = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_cifar_cnn(GCC_CIFAR_CNN_SEED, &cnn, &d), GCC_OK) << d.msg;
  gcc_session_options go = Options(true, true, 1), co = Options(false, false, 1);
  go.opt = co.opt = cnn->training.opt;
  std::vector<float> runs[2], cpu_losses;
  for (int run = 0; run < 2; run++) {
    gcc_session *gpu = nullptr, *cpu = nullptr;
    ASSERT_EQ(gcc_session_create(cnn, &go, &gpu, &d), GCC_OK) << d.msg;
    if (run == 0) {
      ASSERT_EQ(gcc_session_create(cnn, &co, &cpu, &d), GCC_OK) << d.msg;
    }
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int s = 0; s < 11; s++) {
      int rows = s == 5 ? 1000 : 4;
      std::vector<float> x(rows * 3 * 32 * 32);
      std::vector<int64_t> y(rows);
      for (float &v : x)
        v = nd(rng);
      for (int64_t &v : y)
        v = rng() % 10;
      float l1 = 0, l2 = 0;
      int64_t c1 = 0, c2 = 0;
      if (s == 5) {
        ASSERT_EQ(gcc_session_eval_batch(gpu, x.data(), y.data(), rows, &l1, &c1, nullptr, &d),
                  GCC_OK)
            << d.msg;
        if (cpu) {
          ASSERT_EQ(gcc_session_eval_batch(cpu, x.data(), y.data(), rows, &l2, &c2, nullptr, &d),
                    GCC_OK)
              << d.msg;
        }
      } else {
        ASSERT_EQ(gcc_session_train_step(gpu, x.data(), y.data(), rows, &l1, &d), GCC_OK)
            << "step " << s << ": " << d.msg;
        if (cpu) {
          ASSERT_EQ(gcc_session_train_step(cpu, x.data(), y.data(), rows, &l2, &d), GCC_OK)
              << d.msg;
        }
      }
      runs[run].push_back(l1);
      if (cpu) {
        cpu_losses.push_back(l2);
        EXPECT_NEAR(l1, l2, 1e-3 * std::max(1.0f, std::fabs(l2))) << "step " << s;
      }
    }
    gcc_session_destroy(gpu);
    gcc_session_destroy(cpu);
  }
  for (size_t s = 0; s < runs[0].size(); s++)
    EXPECT_EQ(runs[0][s], runs[1][s]) << "step " << s << " differs between two GPU runs";
  gcc_graph_free(cnn);
}

// gcc-run's path: a bundle exported with a cubin for this GPU runs on it
// without NVRTC (the kernels come from the bundle) and gives the CPU
// session's logits; 10 rows are padded to the exported batch of 64. Also
// for --export-precision bf16 and fp16 bundles (16-bit kernels and
// weights): cuBLASLt sums in its own order, so a 16-bit value may round to
// its neighbour and the logits agree with the CPU's to a few 16-bit units
// (2^-8 relative in bfloat16, 2^-11 in float16) rather than bit for bit.
TEST_F(Gpu, ExportedBundleRunsOnTheGpuFromItsCubin) {
  const int precisions[3] = {GCC_PRECISION_FP32, GCC_PRECISION_BF16, GCC_PRECISION_FP16};
  const double tolerance[3] = {1e-4, 8 * 0x1p-8, 8 * 0x1p-11};
  for (int k = 0; k < 3; k++) {
    SCOPED_TRACE(gcc_precision_name(precisions[k]));
    gcc_diag d{};
    gcc_export_options eo{};
    eo.archs[0] = info_.cc_major * 10 + info_.cc_minor;
    eo.n_archs = 1;
    eo.batch_sizes[0] = 1;
    eo.batch_sizes[1] = 64;
    eo.n_batch_sizes = 2;
    eo.precision = precisions[k];
    std::string path = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") +
                       "/gpu_test." + gcc_precision_name(precisions[k]) + ".gccx";
    ASSERT_EQ(gcc_export_bundle(model_, &eo, path.c_str(), &d), GCC_OK) << d.msg;
    gccx_bundle *b = nullptr;
    ASSERT_EQ(gccx_bundle_open(path.c_str(), &b, &d), GCC_OK) << d.msg;
    gccx_session_options go{"cuda", 1, 64}, co{"cpu", 1, 64}; // device, threads, max_batch
    gccx_session *gs = nullptr, *cs = nullptr;
    char note[256];
    ASSERT_EQ(gccx_session_create(b, &go, &gs, note, sizeof note, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gccx_session_create(b, &co, &cs, note, sizeof note, &d), GCC_OK) << d.msg;
    Batch x = MakeBatch(10, 5);
    const float *lg = nullptr, *lc = nullptr;
    int64_t rg = 0, rc = 0, cols = 0;
    for (gccx_session *s : {gs, cs}) {
      ASSERT_EQ(gccx_set_input(s, "image", x.x.data(), 10, &d), GCC_OK) << d.msg;
      ASSERT_EQ(gccx_run(s, &d), GCC_OK) << d.msg;
    }
    ASSERT_EQ(gccx_get_output(gs, "logits", &lg, &rg, &cols, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gccx_get_output(cs, "logits", &lc, &rc, &cols, &d), GCC_OK) << d.msg;
    EXPECT_EQ(rg, 10);
    EXPECT_EQ(rc, 10);
    EXPECT_LE(MaxRelErr(lg, lc, 10 * cols), tolerance[k]);
    gccx_session_destroy(&gs);
    gccx_session_destroy(&cs);
    gccx_bundle_close(&b);
  }
}

// Bundles replay CUDA Graphs (issue 29): one batch size, run 6 times, is
// launched twice (the first use of each input slot), captured twice and
// replayed twice, every run giving the first run's logits bit for bit (one
// GPU, one plan: the same kernels on the same data) and the CPU's within
// the fp32 bound above; gcc-run's pipelined order (run i, set i + 1, read
// i) over 5 batches ending in a partial one (padded to the plan of 64)
// gives the batches run one at a time bit for bit.
TEST_F(Gpu, ExportedBundleReplaysItsForwardFromCudaGraphs) {
  gcc_diag d{};
  gcc_export_options eo{};
  eo.archs[0] = info_.cc_major * 10 + info_.cc_minor;
  eo.n_archs = 1;
  eo.batch_sizes[0] = 64;
  eo.n_batch_sizes = 1;
  std::string path =
      std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/gpu_test.graphs.gccx";
  ASSERT_EQ(gcc_export_bundle(model_, &eo, path.c_str(), &d), GCC_OK) << d.msg;
  gccx_bundle *b = nullptr;
  ASSERT_EQ(gccx_bundle_open(path.c_str(), &b, &d), GCC_OK) << d.msg;
  gccx_session_options go{"cuda", 1, 64}, co{"cpu", 1, 64};
  gccx_session *gs = nullptr, *cs = nullptr;
  char note[256];
  ASSERT_EQ(gccx_session_create(b, &go, &gs, note, sizeof note, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gccx_session_create(b, &co, &cs, note, sizeof note, &d), GCC_OK) << d.msg;
  Batch x = MakeBatch(5 * 64, 11);
  const float *p = nullptr;
  int64_t r = 0, cols = 0;
  ASSERT_EQ(gccx_set_input(cs, "image", x.x.data(), 64, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gccx_run(cs, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gccx_get_output(cs, "logits", &p, &r, &cols, &d), GCC_OK) << d.msg;
  std::vector<float> cpu(p, p + 64 * cols), first;
  for (int run = 0; run < 6; run++) {
    ASSERT_EQ(gccx_set_input(gs, "image", x.x.data(), 64, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gccx_run(gs, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gccx_get_output(gs, "logits", &p, &r, &cols, &d), GCC_OK) << d.msg;
    if (run == 0) {
      first.assign(p, p + 64 * cols);
      EXPECT_LE(MaxRelErr(p, cpu.data(), 64 * cols), 1e-4);
    } else {
      EXPECT_EQ(std::memcmp(p, first.data(), first.size() * sizeof(float)), 0) << "run " << run;
    }
  }
  gccx_run_stats st{};
  ASSERT_EQ(gccx_session_stats(gs, &st, &d), GCC_OK);
  EXPECT_EQ(st.runs, 6);
  EXPECT_EQ(st.captures, 2) << st.graph_note;
  EXPECT_EQ(st.replays, 4) << st.graph_note;
  EXPECT_STREQ(st.graph_note, "");
  // one at a time, then pipelined: 4 x 64 rows and 40
  const int64_t n = 4 * 64 + 40;
  std::vector<std::vector<float>> ref;
  for (int64_t at = 0; at < n; at += 64) {
    int64_t rows = std::min<int64_t>(64, n - at);
    ASSERT_EQ(gccx_set_input(gs, "image", x.x.data() + at * 784, rows, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gccx_run(gs, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gccx_get_output(gs, "logits", &p, &r, &cols, &d), GCC_OK) << d.msg;
    ASSERT_EQ(r, rows);
    ref.emplace_back(p, p + rows * cols);
  }
  ASSERT_EQ(gccx_set_input(gs, "image", x.x.data(), 64, &d), GCC_OK) << d.msg;
  for (int64_t at = 0, i = 0; at < n; at += 64, i++) {
    ASSERT_EQ(gccx_run(gs, &d), GCC_OK) << d.msg;
    if (at + 64 < n) {
      int64_t next = std::min<int64_t>(64, n - at - 64);
      ASSERT_EQ(gccx_set_input(gs, "image", x.x.data() + (at + 64) * 784, next, &d), GCC_OK)
          << d.msg;
    }
    ASSERT_EQ(gccx_get_output(gs, "logits", &p, &r, &cols, &d), GCC_OK) << d.msg;
    ASSERT_EQ((size_t)(r * cols), ref[(size_t)i].size());
    EXPECT_EQ(std::memcmp(p, ref[(size_t)i].data(), ref[(size_t)i].size() * sizeof(float)), 0)
        << "batch " << i;
  }
  gccx_session_destroy(&gs);
  gccx_session_destroy(&cs);
  gccx_bundle_close(&b);
}

TEST_F(Gpu, ABadLabelIsReportedByTheLossKernel) {
  gcc_diag d{};
  gcc_session *gpu = nullptr;
  gcc_session_options o = Options(true, false, 1);
  ASSERT_EQ(gcc_session_create(model_, &o, &gpu, &d), GCC_OK) << d.msg;
  Batch b = MakeBatch(64, 3);
  b.y[17] = 10;
  float l = 0;
  EXPECT_EQ(gcc_session_train_step(gpu, b.x.data(), b.y.data(), 64, &l, &d),
            GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("row 17"), std::string::npos) << d.msg;
  gcc_session_destroy(gpu);
}

TEST_F(Gpu, APlanLargerThanTheDeviceGetsTheOutOfMemoryMessage) {
  gcc_diag d{};
  gcc_session *gpu = nullptr;
  gcc_session_options o = Options(true, false, 1);
  ASSERT_EQ(gcc_session_create(model_, &o, &gpu, &d), GCC_OK) << d.msg;
  gcc_plan *p = nullptr;
  // 2^26 rows x 784 floats: far beyond any GPU's memory
  EXPECT_EQ(gcc_session_plan(gpu, GCC_MODE_TRAIN, (int64_t)1 << 26, &p, &d), GCC_ERR_OUT_OF_MEMORY);
  EXPECT_NE(std::string(d.msg).find("bytes are free"), std::string::npos) << d.msg;
  gcc_session_destroy(gpu);
}

// Every parameter and running statistic of `s`, by name, as float32 bits.
std::vector<std::vector<float>> Params(gcc_session *s, const gcc_graph *g) {
  std::vector<std::vector<float>> out;
  for (int v = 0; v < g->n_values; v++) {
    if (g->values[v].kind != GCC_VALUE_PARAM)
      continue;
    float *p = nullptr;
    int64_t n = 0;
    gcc_session_param(s, g->values[v].name, &p, &n, nullptr);
    out.emplace_back(p, p + (p ? n : 0));
  }
  return out;
}

// The BatchNorm training kernels reduce in float32 over many blocks per
// channel in a fixed order (no atomics): the GPU's losses track the CPU's
// (float64 serial sums) within the 1e-3 relative the other CPU comparisons
// here use (cuDNN's and cuBLASLt's summation orders dominate it: a float32
// sum of 65,536 terms in the tree's order is within ~300 u = 2e-5 relative
// of exact, tests/batchnorm_kernels_test's bound), and two GPU sessions
// store the same bits in every parameter and running statistic after ten
// steps, with and without CUDA Graphs.
TEST_F(Gpu, ResidualBatchNormBlockMatchesTheCpuAndRepeatsBitwise) {
  gcc_graph *g = gcc_test::ResidualBnBlock(32);
  ASSERT_NE(g, nullptr);
  gcc_diag d{};
  gcc_session_options co = Options(false, false, 1);
  co.opt = g->training.opt;
  std::vector<gcc_session *> gpus;
  for (bool graphs : {true, true, false}) {
    gcc_session_options go = Options(true, graphs, 1);
    go.opt = g->training.opt;
    gcc_session *s = nullptr;
    ASSERT_EQ(gcc_session_create(g, &go, &s, &d), GCC_OK) << d.msg;
    gpus.push_back(s);
  }
  gcc_session *cpu = nullptr;
  ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int step = 0; step < 10; step++) {
    std::vector<float> x(64 * 3 * 32 * 32);
    std::vector<int64_t> y(64);
    for (float &v : x)
      v = nd(rng);
    for (int64_t &v : y)
      v = rng() % 10;
    float lc = 0;
    ASSERT_EQ(gcc_session_train_step(cpu, x.data(), y.data(), 64, &lc, &d), GCC_OK) << d.msg;
    for (size_t k = 0; k < gpus.size(); k++) {
      float lg = 0;
      ASSERT_EQ(gcc_session_train_step(gpus[k], x.data(), y.data(), 64, &lg, &d), GCC_OK) << d.msg;
      EXPECT_NEAR(lg, lc, 1e-3 * std::max(1.0f, std::fabs(lc))) << "step " << step << " gpu " << k;
    }
  }
  std::vector<std::vector<float>> ref = Params(gpus[0], g), cp = Params(cpu, g);
  for (size_t k = 1; k < gpus.size(); k++) {
    std::vector<std::vector<float>> got = Params(gpus[k], g);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); i++)
      EXPECT_TRUE(got[i].size() == ref[i].size() &&
                  memcmp(got[i].data(), ref[i].data(), ref[i].size() * sizeof(float)) == 0)
          << "parameter " << i << " of session " << k << " differs in its bits";
  }
  ASSERT_EQ(cp.size(), ref.size());
  for (size_t i = 0; i < ref.size(); i++) { // ten steps amplify the orders' 1e-6: 1e-3 of max
    ASSERT_EQ(cp[i].size(), ref[i].size());
    EXPECT_LE(MaxRelErr(ref[i].data(), cp[i].data(), (int64_t)ref[i].size()), 1e-3)
        << "parameter " << i;
  }
  for (gcc_session *s : gpus)
    gcc_session_destroy(s);
  gcc_session_destroy(cpu);
  gcc_graph_free(g);
}

// cuDNN's algorithms chosen by cudnnFindConvolution*Algorithm on the device
// (every direction timed, not the v7 heuristics), deterministic ones only by
// default, written to the disk cache; a second convolution of the same shape
// reads the same choice from the cache without searching.
TEST_F(Gpu, ConvolutionAlgorithmsAreTimedOnTheDeviceCachedAndReused) {
  const char *tmp = getenv("TEST_TMPDIR");
  std::string tmpl = std::string(tmp && tmp[0] ? tmp : "/tmp") + "/cudnn_choice_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  ASSERT_NE(mkdtemp(buf.data()), nullptr);
  gcc_cudnn_choice_cache cache{buf.data(), 1};
  gcc_diag d{};
  cudnnHandle_t h = nullptr;
  ASSERT_EQ(gcc_cudnn_handle_create(&h, &d), GCC_OK) << d.msg;
  gcc_conv2d_shape sh{};
  sh.n = 64; // ResNet-50's layer1 3x3 convolution at batch 64
  sh.c = 64;
  sh.h = sh.w = 56;
  sh.m = 64;
  sh.win = gcc_window2d{3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
  int algos[2][3];
  for (int k = 0; k < 2; k++) {
    gcc_cudnn_conv *c = nullptr;
    ASSERT_EQ(gcc_cudnn_conv_create(&sh, &c, &d), GCC_OK) << d.msg;
    gcc_cudnn_choice_info info{};
    ASSERT_EQ(gcc_cudnn_conv_prepare_cached(c, h, (size_t)256 << 20, &cache, &info, &d), GCC_OK)
        << d.msg;
    EXPECT_EQ(info.hit, k) << info.note;
    EXPECT_EQ(info.searched, 1 - k) << info.note;
    gcc_cudnn_conv_algorithms(c, &algos[k][0], &algos[k][1], &algos[k][2]);
    float chosen[3], fastest[3];
    gcc_cudnn_conv_choice_times(c, chosen, fastest);
    char summary[512];
    gcc_cudnn_conv_choice_summary(c, summary, sizeof summary);
    for (int dir = 0; dir < 3; dir++) {
      EXPECT_GT(chosen[dir], 0.0f) << "direction " << dir << " not timed: " << summary;
      EXPECT_LE(fastest[dir], chosen[dir]) << summary;
    }
    printf("choice %d (%s): %s\n", k, k ? "cache hit" : "timed", summary);
    gcc_cudnn_conv_destroy(c);
  }
  for (int dir = 0; dir < 3; dir++)
    EXPECT_EQ(algos[0][dir], algos[1][dir]) << "direction " << dir;
  gcc_cudnn_handle_destroy(h);
  std::string rm = std::string("rm -rf '") + buf.data() + "'";
  EXPECT_EQ(system(rm.c_str()), 0);
}

} // namespace
