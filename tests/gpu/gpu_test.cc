// gpu_test: the CUDA backend on a real GPU. Every test skips, saying why,
// when no usable CUDA device exists (this project's CI has none); on a
// machine with a GPU, bench/gpu_check.sh runs them.
//
// The same comparisons as tests/device_plan_test.cc, on the device itself:
// training steps of the MNIST MLP on cuda:0 against the CPU backend (losses
// and parameters), CUDA Graph replay, training after an evaluation with
// graphs (MLP, and the CIFAR CNN evaluated at a larger batch than it
// trains at), evaluation, a bad label found by the loss kernel, and the
// out-of-memory message of a plan that cannot fit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
}

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

} // namespace
