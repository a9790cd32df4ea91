// device_plan_test: the CUDA execution path without a GPU.
//
// runtime/plan.c (the runner every CUDA plan goes through: memory
// layout, argument binding, optimizer sections, ReLU bit-masks, input
// double-buffering, the read-back ring, CUDA Graph capture and replay) is
// driven here through a host backend that implements gcc_device_backend
// exactly as the CUDA backend's contract says:
//  - generated kernels: the plan's CUDA C compiled with the host compiler and
//    tests/cuda_host_shim.h (tests/kernel_emulation.h) and launched through
//    the same argument arrays cudaLaunchKernel would get; the cubin NVRTC made
//    for sm_90 is required to exist;
//  - GEMMs: the column-major call of codegen/gemm_map.h executed by OpenBLAS
//    in column-major mode (cblas_sgemm(CblasColMajor, ...) has cuBLAS's
//    semantics) plus the cuBLASLt epilogue written out in loops (bias, ReLU,
//    ReLU bit-mask, DRELU, bias gradients);
//  - capture records the issued work with its argument *values* and replay
//    re-issues the recording, as a CUDA Graph does; graphs are handles the
//    plan owns;
//  - what goes wrong on a GPU without an error is modelled and reported
//    (see HostBackend): freed memory touched by recorded work (a stale
//    cuDNN workspace, the graph of a freed plan), leaked graphs and GEMM
//    handles, GEMM operands less aligned than their algorithm assumes,
//    epilogues cuBLASLt does not offer, lazy module loading on a device of
//    a given compute capability, staging buffers rewritten under an
//    in-flight H2D copy.
// Every result is compared with the CPU backend (a CPU session of the same
// model): training losses and parameters after several steps, evaluation,
// training after evaluation with graphs, bad labels, out-of-memory
// messages. The tests named after issue 21 each failed before its fix.
#include <cblas.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <climits>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <memory>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "graph/builder.h"
#include "codegen/lowering.h"
#include "graph/ops.h"
#include "models/models.h"
#include "codegen/gemm_map.h"
#include "codegen/nvrtc.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/plan.h"
#include "runtime/checkpoint.h"
#include "runtime/session.h"
#include "runtime/trainer.h"
#include "codegen/kernel_cache.h"
}
#include <sys/stat.h>
#include "tests/host_backend.h"
#include "tests/kernel_emulation.h"
#include "tests/test_graphs.h"
#include "tests/testutil.h"
#include "tests/test_kernel_cache.h"

using gcc_test::FinishInlineTraining; // tests/test_graphs.h
using gcc_test::Opt;
using gcc_test::TinyRegressor;

namespace {

// NVRTC without the on-disk cache (the plans' kernel compiler)

using gcc_emu_test::EmulatedModule;
using gcc_emu_test::LaunchFn;

using gcc_host_test::ColMajorGemm;
using gcc_host_test::HostBackend;
using gcc_host_test::Recorded;

// ---- models and data -------------------------------------------------------

gcc_graph *SmallMlp(gcc_opt_kind kind, bool bias_free_last = false) {
  gcc_builder *b = gcc_builder_new("small_mlp", 11);
  int64_t xd[4] = {GCC_BATCH_DIM, 1, 6, 6}, yd[1] = {GCC_BATCH_DIM};
  int x = gcc_build_input(b, "image", GCC_DT_FLOAT32, 4, xd);
  int y = gcc_build_input(b, "label", GCC_DT_INT64, 1, yd);
  int h = gcc_build_flatten(b, "flatten", x, 1);
  h = gcc_build_relu(b, "relu1", gcc_build_linear(b, "fc1", h, 36, 24));
  h = gcc_build_relu(b, "relu2", gcc_build_linear(b, "fc2", h, 24, 16));
  int logits;
  if (bias_free_last) { // MatMul: no bias, no transpose
    int64_t wd[2] = {16, 5};
    std::vector<float> w(80);
    for (int i = 0; i < 80; i++)
      w[i] = 0.05f * (float)((i * 7) % 11 - 5);
    int W = gcc_build_param(b, "fc3.w", 2, wd, w.data());
    int in[2] = {h, W};
    logits = gcc_build_op(b, GCC_OP_MATMUL, "fc3", "fc3.out", in, 2);
  } else {
    logits = gcc_build_linear(b, "fc3", h, 16, 5);
  }
  int loss = gcc_build_cross_entropy(b, "loss", logits, y, -1);
  gcc_build_output(b, loss);
  return FinishInlineTraining(
      b, "loss", "fc3.out", "image", "label",
      Opt(kind, kind == GCC_OPT_ADAM ? 0.01f : 0.1f, 0.5f, kind == GCC_OPT_ADAM ? 1e-2f : 0.0f));
}

struct Batch {
  std::vector<float> x;
  std::vector<int64_t> y;
  int64_t rows;
};

Batch MakeBatch(int64_t rows, int64_t features, int classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  Batch b{std::vector<float>((size_t)(rows * features)), std::vector<int64_t>((size_t)rows), rows};
  for (float &v : b.x)
    v = n(rng);
  for (int64_t &v : b.y)
    v = (int64_t)(rng() % (uint32_t)classes);
  return b;
}

gcc_session_options CpuOptions(const gcc_graph *g) {
  gcc_session_options so{};
  so.threads = 1;
  so.opt = g->training.opt;
  return so;
}

// sm_count sizes the grids: 132 (an H100) emulates 4224 blocks of 256
// threads per launch, so the tests of big models use 4 (grids are
// grid-stride: any size computes the same).
gcc_session_options DeviceOptions(const gcc_graph *g, HostBackend *hb, bool graphs, int pending,
                                  int sm_count = 4) {
  gcc_session_options so = CpuOptions(g);
  so.backend = &hb->be;
  so.device = GCC_DEV_CUDA(0);
  so.plan.sm = 90;
  so.plan.sm_count = sm_count;
  so.plan.compile = gcc_kernel_cache_hook;
  so.plan.compile_user = gcc_test::TestKernelCache();
  so.plan.cuda_graph = graphs ? 1 : 0;
  so.max_pending = pending;
  return so;
}

double MaxRelErr(const float *a, const float *b, int64_t n) {
  double m = 0, e = 0;
  for (int64_t i = 0; i < n; i++) {
    m = std::max(m, std::fabs((double)b[i]));
    e = std::max(e, std::fabs((double)a[i] - (double)b[i]));
  }
  return m > 0 ? e / m : e;
}

void ExpectSameParameters(const gcc_graph *g, gcc_session *dev, gcc_session *cpu, double tol) {
  for (int v = 0; v < g->n_values; v++) {
    if (g->values[v].kind != GCC_VALUE_PARAM)
      continue;
    int64_t n1 = 0, n2 = 0;
    float *a = nullptr;
    gcc_session_param(dev, g->values[v].name, &a, &n1, nullptr);
    float *b = nullptr;
    gcc_session_param(cpu, g->values[v].name, &b, &n2, nullptr);
    ASSERT_TRUE(a && b) << g->values[v].name;
    ASSERT_EQ(n1, n2);
    EXPECT_LE(MaxRelErr(a, b, n1), tol) << g->values[v].name;
  }
}

// 16-bit plans: the updates of the parameters (from the model's initial
// values) of the device plan `dev` and the CPU plan `cpu`, both in 16 bits,
// against what 16 bits themselves do to them: `ref32`, the CPU plan in
// float32 on the same batches. Per tensor, max |dev - cpu| <= factor *
// max |cpu - ref32| + 2^-8 * (the largest update). Why not a fixed
// fraction: from the initial parameters the hidden layers' gradients are
// sums that cancel, so one bfloat16 unit in one activation moves them by
// far more than 2^-8 of themselves (measured on the MNIST MLP after 3
// steps: the bfloat16 and float32 CPU plans' updates of fc2.weight differ
// by 29% of the largest, the last layer's by 0.4%; two correct bfloat16
// plans that round at different points, e.g. a fallback epilogue that
// rounds D twice, by as much). Against that scale a wrong mask, bias or
// transpose shows (differences of the update's own size), a
// rounding-order difference does not.
void ExpectSameUpdates(const gcc_graph *g, gcc_session *dev, gcc_session *cpu, gcc_session *ref32,
                       double factor) {
  for (int v = 0; v < g->n_values; v++) {
    if (g->values[v].kind != GCC_VALUE_PARAM || !g->values[v].data)
      continue;
    int64_t n1 = 0, n2 = 0, n3 = 0;
    float *a = nullptr, *b = nullptr, *r = nullptr;
    gcc_session_param(dev, g->values[v].name, &a, &n1, nullptr);
    gcc_session_param(cpu, g->values[v].name, &b, &n2, nullptr);
    gcc_session_param(ref32, g->values[v].name, &r, &n3, nullptr);
    ASSERT_TRUE(a && b && r) << g->values[v].name;
    ASSERT_EQ(n1, n2);
    ASSERT_EQ(n1, n3);
    const float *p0 = static_cast<const float *>(g->values[v].data);
    double e = 0, u = 0, e16 = 0;
    for (int64_t i = 0; i < n1; i++) {
      e = std::max(e, std::fabs((double)a[i] - (double)b[i]));
      u = std::max(u, std::fabs((double)b[i] - (double)p0[i]));
      e16 = std::max(e16, std::fabs((double)b[i] - (double)r[i]));
    }
    EXPECT_LE(e, factor * e16 + 0x1p-8 * u)
        << g->values[v].name << ": the largest update is " << u << ", bfloat16 moves it by up to "
        << e16 << " from float32";
  }
}

// Trains `steps` steps (the last batch `last_rows` rows) on the device
// session and on a CPU session; losses and parameters must agree.
void TrainAndCompare(gcc_graph *g, bool graphs, int pending, int steps, int64_t rows,
                     int64_t last_rows, HostBackend *hb, double tol, int sm_count = 4) {
  gcc_diag d{};
  gcc_session *cpu = nullptr, *dev = nullptr;
  gcc_session_options co = CpuOptions(g), dso = DeviceOptions(g, hb, graphs, pending, sm_count);
  ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  std::vector<float> cpu_losses, dev_losses(steps);
  int collected = 0;
  for (int s = 0; s < steps; s++) {
    int64_t r = s == steps - 1 ? last_rows : rows;
    Batch b = MakeBatch(r, 36, 5, 100 + (uint32_t)s);
    float l = 0;
    ASSERT_EQ(gcc_session_train_step(cpu, b.x.data(), b.y.data(), r, &l, &d), GCC_OK) << d.msg;
    cpu_losses.push_back(l);
    ASSERT_EQ(gcc_session_train_step_async(dev, b.x.data(), b.y.data(), r, &d), GCC_OK) << d.msg;
    // the host buffers may be reused as soon as the call returns
    std::fill(b.x.begin(), b.x.end(), 1e30f);
    if ((s + 1) % pending == 0 || s == steps - 1) {
      int n = 0;
      ASSERT_EQ(gcc_session_collect_losses(dev, dev_losses.data() + collected, pending, &n, &d),
                GCC_OK)
          << d.msg;
      collected += n;
    }
  }
  ASSERT_EQ(collected, steps);
  for (int s = 0; s < steps; s++)
    EXPECT_NEAR(dev_losses[s], cpu_losses[s], 1e-5 * std::max(1.0f, std::fabs(cpu_losses[s])))
        << "step " << s;
  ExpectSameParameters(g, dev, cpu, tol);
  // evaluation: loss and correct count as on the CPU
  Batch e = MakeBatch(20, 36, 5, 999);
  float l1 = 0, l2 = 0;
  int64_t c1 = -2, c2 = -3;
  const gcc_tensor *p1 = nullptr, *p2 = nullptr;
  ASSERT_EQ(gcc_session_eval_batch(dev, e.x.data(), e.y.data(), 20, &l1, &c1, &p1, &d), GCC_OK)
      << d.msg;
  ASSERT_EQ(gcc_session_eval_batch(cpu, e.x.data(), e.y.data(), 20, &l2, &c2, &p2, &d), GCC_OK)
      << d.msg;
  EXPECT_NEAR(l1, l2, 1e-5 * std::max(1.0f, std::fabs(l2)));
  EXPECT_EQ(c1, c2);
  ASSERT_TRUE(p1 && p2);
  EXPECT_LE(MaxRelErr((const float *)p1->data, (const float *)p2->data, 100), tol);
  gcc_session_destroy(dev);
  gcc_session_destroy(cpu);
  EXPECT_EQ(hb->used, 0u) << "device memory leaked";
  EXPECT_TRUE(hb->graphs.empty()) << "CUDA Graphs leaked";
  EXPECT_TRUE(hb->prepared.empty()) << "prepared GEMMs leaked";
  for (const std::string &v : hb->violations)
    ADD_FAILURE() << v;
  for (const std::string &v : hb->misaligned)
    ADD_FAILURE() << v;
}

class DevicePlan : public ::testing::Test {
protected:
  void SetUp() override {
    if (gcc_emu_test::ShimPath().empty())
      GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  }
};

TEST_F(DevicePlan, SgdTrainingMatchesTheCpuBackendStepByStep) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  TrainAndCompare(g, /*graphs=*/false, /*pending=*/1, 6, 8, 5, &hb, 1e-5, /*sm_count=*/132);
  // every GEMM went through cuBLASLt epilogues, the forward ReLUs with bit-masks
  bool aux = false, drelu = false, bgradb = false;
  for (const std::string &e : hb.epilogues) {
    aux |= e == "CUBLASLT_EPILOGUE_RELU_AUX_BIAS";
    drelu |= e == "CUBLASLT_EPILOGUE_DRELU_BGRAD";
    bgradb |= e == "CUBLASLT_EPILOGUE_BGRADB";
  }
  EXPECT_TRUE(aux && drelu && bgradb);
  EXPECT_EQ(hb.captures, 0);
  gcc_graph_free(g);
}

// Checkpoints on a GPU (issue 16): written from the device mirror of the
// arena (parameters, gradients, Adam's moments) with the step count, read
// back into a new device session (uploaded), the run continues bitwise as
// the uninterrupted one does (Adam's bias correction follows the step).
TEST_F(DevicePlan, CheckpointFromTheDeviceMirrorResumesBitwise) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_ADAM);
  gcc_diag d{};
  gcc_session_options so = DeviceOptions(g, &hb, /*graphs=*/false, /*pending=*/1);
  auto steps = [&](gcc_session *s, int from, int to) {
    for (int k = from; k < to; k++) {
      Batch b = MakeBatch(8, 36, 5, 300 + (uint32_t)k);
      float l = 0;
      ASSERT_EQ(gcc_session_train_step(s, b.x.data(), b.y.data(), 8, &l, &d), GCC_OK) << d.msg;
    }
  };
  gcc_session *whole = nullptr, *first = nullptr, *resumed = nullptr;
  ASSERT_EQ(gcc_session_create(g, &so, &whole, &d), GCC_OK) << d.msg;
  steps(whole, 0, 10);
  ASSERT_EQ(gcc_session_create(g, &so, &first, &d), GCC_OK) << d.msg;
  steps(first, 0, 4);
  std::string dir = gcc_test::TmpPath("device_ckpt");
  ASSERT_EQ(gcc_checkpoint_write(dir.c_str(), first, g, 0, 4, 2, &d), GCC_OK) << d.msg;
  gcc_session_destroy(first);
  gcc_checkpoint ck{};
  ASSERT_EQ(gcc_checkpoint_find(dir.c_str(), &ck, nullptr, &d), GCC_OK) << d.msg;
  EXPECT_EQ(ck.step, 4);
  ASSERT_EQ(gcc_session_create(g, &so, &resumed, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_checkpoint_check(&ck, g, resumed, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_restore(resumed, ck.arena, ck.arena_size, ck.step, &d), GCC_OK) << d.msg;
  gcc_checkpoint_free(&ck);
  steps(resumed, 4, 10);
  const void *a = nullptr, *b = nullptr;
  size_t na = 0, nb = 0;
  ASSERT_EQ(gcc_session_arena(whole, &a, &na, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_arena(resumed, &b, &nb, &d), GCC_OK) << d.msg;
  ASSERT_EQ(na, nb);
  EXPECT_EQ(memcmp(a, b, na), 0) << "the resumed device run differs from the uninterrupted one";
  EXPECT_EQ(gcc_session_steps(resumed), 10);
  gcc_session_destroy(whole);
  gcc_session_destroy(resumed);
  gcc_graph_free(g);
  EXPECT_EQ(hb.used, 0u) << "device memory leaked";
}

// Dropout in training (issue 15): SmallMlp with a Dropout after each hidden
// ReLU (ratios 0.5 and 0.25, 1-D per row and the whole [N, 16] tensor), its
// masks keyed by the training spec's seed.
// (with_dropout false: the same network, parameters and initial weights
// without the two Dropouts)
gcc_graph *DropoutMlp(uint64_t seed, bool with_dropout = true) {
  gcc_builder *b = gcc_builder_new("dropout_mlp", 11);
  int64_t xd[4] = {GCC_BATCH_DIM, 1, 6, 6}, yd[1] = {GCC_BATCH_DIM};
  int x = gcc_build_input(b, "image", GCC_DT_FLOAT32, 4, xd);
  int y = gcc_build_input(b, "label", GCC_DT_INT64, 1, yd);
  int h = gcc_build_flatten(b, "flatten", x, 1);
  h = gcc_build_relu(b, "relu1", gcc_build_linear(b, "fc1", h, 36, 24));
  if (with_dropout) {
    h = gcc_build_op(b, GCC_OP_DROPOUT, "drop1", "drop1.out", &h, 1);
    gcc_build_set_float(b, h, "ratio", 0.5f);
  }
  h = gcc_build_relu(b, "relu2", gcc_build_linear(b, "fc2", h, 24, 16));
  if (with_dropout) {
    h = gcc_build_op(b, GCC_OP_DROPOUT, "drop2", "drop2.out", &h, 1);
    gcc_build_set_float(b, h, "ratio", 0.25f);
  }
  int logits = gcc_build_linear(b, "fc3", h, 16, 5);
  int loss = gcc_build_cross_entropy(b, "loss", logits, y, -1);
  gcc_build_output(b, loss);
  gcc_graph *g = FinishInlineTraining(b, "loss", "fc3.out", "image", "label",
                                      Opt(GCC_OPT_SGD, 0.1f, 0.5f, 0.0f));
  if (g)
    g->training.seed = seed;
  return g;
}

// The CUDA plan (generated Dropout kernels, emulated) draws the CPU's masks:
// the same losses and parameters; a plan with Dropout is never captured as
// a CUDA Graph (the step is a kernel argument), and evaluation (the
// identity) agrees too.
TEST_F(DevicePlan, DropoutTrainsAsOnTheCpuAndIsNeverCaptured) {
  HostBackend hb;
  gcc_graph *g = DropoutMlp(77);
  ASSERT_NE(g, nullptr);
  TrainAndCompare(g, /*graphs=*/true, /*pending=*/1, 6, 8, 5, &hb, 1e-5);
  EXPECT_EQ(hb.captures, 0);
  gcc_graph_free(g);
}

// Evaluation (nn.Module.eval()): the Dropouts leave the evaluation graph
// (autodiff's Dropout elimination: no copy of the activation) and the
// network evaluates as the one built without them, bitwise on one machine
// (the same GEMMs on the same bytes), on the CPU and on the CUDA plan.
TEST_F(DevicePlan, DropoutEvaluatesAsTheNetworkWithoutIt) {
  for (bool device : {false, true}) {
    SCOPED_TRACE(device ? "CUDA plan (host backend)" : "CPU");
    HostBackend hb;
    gcc_graph *g = DropoutMlp(77), *plain = DropoutMlp(77, /*with_dropout=*/false);
    ASSERT_TRUE(g && plain);
    gcc_diag d{};
    gcc_session_options so = device ? DeviceOptions(g, &hb, false, 1) : CpuOptions(g);
    gcc_session_options so2 = device ? DeviceOptions(plain, &hb, false, 1) : CpuOptions(plain);
    gcc_session *s = nullptr, *s2 = nullptr;
    ASSERT_EQ(gcc_session_create(g, &so, &s, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_create(plain, &so2, &s2, &d), GCC_OK) << d.msg;
    gcc_plan *p = nullptr;
    ASSERT_EQ(gcc_session_plan(s, GCC_MODE_EVAL, 20, &p, &d), GCC_OK) << d.msg;
    const gcc_graph *eg = gcc_plan_graph(p);
    int drops = 0;
    for (int i = 0; i < eg->n_nodes; i++)
      drops += eg->nodes[i].op == GCC_OP_DROPOUT;
    EXPECT_EQ(drops, 0);
    Batch e = MakeBatch(20, 36, 5, 999);
    float l1 = 0, l2 = 0;
    int64_t c1 = -2, c2 = -3;
    const gcc_tensor *p1 = nullptr, *p2 = nullptr;
    ASSERT_EQ(gcc_session_eval_batch(s, e.x.data(), e.y.data(), 20, &l1, &c1, &p1, &d), GCC_OK)
        << d.msg;
    ASSERT_EQ(gcc_session_eval_batch(s2, e.x.data(), e.y.data(), 20, &l2, &c2, &p2, &d), GCC_OK)
        << d.msg;
    EXPECT_EQ(std::memcmp(&l1, &l2, sizeof l1), 0) << l1 << " " << l2;
    EXPECT_EQ(c1, c2);
    ASSERT_TRUE(p1 && p2);
    EXPECT_EQ(std::memcmp(p1->data, p2->data, 100 * sizeof(float)), 0);
    gcc_session_destroy(s);
    gcc_session_destroy(s2);
    gcc_graph_free(g);
    gcc_graph_free(plain);
    EXPECT_EQ(hb.used, 0u) << "device memory leaked";
  }
}

// Determinism: two runs with one seed give bitwise the same losses and
// parameters, another seed other losses, and a run resumed from a
// checkpoint after 3 of 6 steps (the step count is saved: the masks of
// steps 3 to 5 follow it) ends bitwise where the uninterrupted one does;
// on the CPU and on the CUDA plan.
TEST_F(DevicePlan, DropoutMasksFollowTheSeedAndResumeBitwise) {
  for (bool device : {false, true}) {
    SCOPED_TRACE(device ? "CUDA plan (host backend)" : "CPU");
    HostBackend hb;
    gcc_graph *g = DropoutMlp(77), *g2 = DropoutMlp(78);
    ASSERT_TRUE(g && g2);
    gcc_diag d{};
    auto options = [&](const gcc_graph *m) {
      return device ? DeviceOptions(m, &hb, /*graphs=*/false, /*pending=*/1) : CpuOptions(m);
    };
    auto steps = [&](gcc_session *s, int from, int to, std::vector<float> *losses) {
      for (int k = from; k < to; k++) {
        Batch b = MakeBatch(8, 36, 5, 300 + (uint32_t)k);
        float l = 0;
        ASSERT_EQ(gcc_session_train_step(s, b.x.data(), b.y.data(), 8, &l, &d), GCC_OK) << d.msg;
        if (losses)
          losses->push_back(l);
      }
    };
    gcc_session_options so = options(g), so2 = options(g2);
    gcc_session *whole = nullptr, *again = nullptr, *other = nullptr, *first = nullptr,
                *resumed = nullptr;
    std::vector<float> lw, la, lo;
    ASSERT_EQ(gcc_session_create(g, &so, &whole, &d), GCC_OK) << d.msg;
    steps(whole, 0, 6, &lw);
    ASSERT_EQ(gcc_session_create(g, &so, &again, &d), GCC_OK) << d.msg;
    steps(again, 0, 6, &la);
    ASSERT_EQ(gcc_session_create(g2, &so2, &other, &d), GCC_OK) << d.msg;
    steps(other, 0, 6, &lo);
    ASSERT_EQ(lw.size(), 6u);
    ASSERT_EQ(la.size(), 6u);
    ASSERT_EQ(lo.size(), 6u);
    EXPECT_EQ(std::memcmp(lw.data(), la.data(), 6 * sizeof(float)), 0)
        << "two runs with one seed differ";
    EXPECT_NE(std::memcmp(lw.data(), lo.data(), 6 * sizeof(float)), 0)
        << "the seed changes nothing: the masks do not follow it";
    ASSERT_EQ(gcc_session_create(g, &so, &first, &d), GCC_OK) << d.msg;
    steps(first, 0, 3, nullptr);
    std::string dir = gcc_test::TmpPath(device ? "dropout_ckpt_dev" : "dropout_ckpt_cpu");
    ASSERT_EQ(gcc_checkpoint_write(dir.c_str(), first, g, 0, 3, 2, &d), GCC_OK) << d.msg;
    gcc_session_destroy(first);
    gcc_checkpoint ck{};
    ASSERT_EQ(gcc_checkpoint_find(dir.c_str(), &ck, nullptr, &d), GCC_OK) << d.msg;
    EXPECT_EQ(ck.step, 3);
    ASSERT_EQ(gcc_session_create(g, &so, &resumed, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_checkpoint_check(&ck, g, resumed, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_restore(resumed, ck.arena, ck.arena_size, ck.step, &d), GCC_OK) << d.msg;
    gcc_checkpoint_free(&ck);
    std::vector<float> lr;
    steps(resumed, 3, 6, &lr);
    ASSERT_EQ(lr.size(), 3u);
    EXPECT_EQ(std::memcmp(lr.data(), lw.data() + 3, 3 * sizeof(float)), 0)
        << "the resumed run's losses differ from the uninterrupted run's";
    const void *a = nullptr, *b = nullptr;
    size_t na = 0, nb = 0;
    ASSERT_EQ(gcc_session_arena(whole, &a, &na, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_arena(resumed, &b, &nb, &d), GCC_OK) << d.msg;
    ASSERT_EQ(na, nb);
    EXPECT_EQ(std::memcmp(a, b, na), 0) << "the resumed run differs from the uninterrupted one";
    for (gcc_session *s : {whole, again, other, resumed})
      gcc_session_destroy(s);
    gcc_graph_free(g);
    gcc_graph_free(g2);
    EXPECT_EQ(hb.used, 0u) << "device memory leaked";
  }
}

TEST_F(DevicePlan, CudaGraphReplayGivesTheSameTrainingAsIssuingEveryStep) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  // losses collected every 4 steps: 4 ring entries in flight
  TrainAndCompare(g, /*graphs=*/true, /*pending=*/4, 9, 8, 8, &hb, 1e-5);
  EXPECT_EQ(hb.captures, 2) << "one graph per input slot";
  EXPECT_GE(hb.replays, 6);
  gcc_graph_free(g);
}

TEST_F(DevicePlan, AdamPlansAreNotCapturedAndMatchTheCpuBackend) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_ADAM, /*bias_free_last=*/true);
  TrainAndCompare(g, /*graphs=*/true, /*pending=*/3, 7, 8, 3, &hb, 2e-5);
  EXPECT_EQ(hb.captures, 0);
  gcc_graph_free(g);
}

TEST_F(DevicePlan, MnistMlpPlanRunsTheSixteenLaunchesAndMatchesTheCpu) {
  HostBackend hb;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &g, &d), GCC_OK) << d.msg;
  gcc_session_options co = CpuOptions(g), dso = DeviceOptions(g, &hb, true, 2);
  gcc_session *cpu = nullptr, *dev = nullptr;
  ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  gcc_plan *p = nullptr;
  ASSERT_EQ(gcc_session_plan(dev, GCC_MODE_TRAIN, 16, &p, &d), GCC_OK) << d.msg;
  EXPECT_EQ(gcc_plan_launches(p), 16); // 14 cuBLASLt GEMMs, the loss and the optimizer kernel
  EXPECT_EQ(gcc_plan_copies(p), 3);    // image and label H2D, loss D2H
  EXPECT_STREQ(gcc_plan_graph_note(p), "");
  for (int s = 0; s < 4; s++) {
    Batch b = MakeBatch(16, 784, 10, 7 + (uint32_t)s);
    float l1 = 0, l2 = 0;
    ASSERT_EQ(gcc_session_train_step(dev, b.x.data(), b.y.data(), 16, &l1, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_train_step(cpu, b.x.data(), b.y.data(), 16, &l2, &d), GCC_OK) << d.msg;
    EXPECT_NEAR(l1, l2, 1e-5 * std::max(1.0f, std::fabs(l2))) << "step " << s;
  }
  EXPECT_GE(gcc_plan_graph_replays(p), 1);
  ExpectSameParameters(g, dev, cpu, 2e-5);
  gcc_session_destroy(dev);
  gcc_session_destroy(cpu);
  gcc_graph_free(g);
}

// The CIFAR-10 tutorial CNN on the device: convolutions and poolings go to
// the backend's library calls (cuDNN on a GPU), the rest to cuBLASLt and
// generated kernels; a few SGD steps and an evaluation against the CPU.
TEST_F(DevicePlan, CifarCnnWithLibraryConvolutionsMatchesTheCpuBackend) {
  HostBackend hb;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_cifar_cnn(GCC_CIFAR_CNN_SEED, &g, &d), GCC_OK) << d.msg;
  gcc_session_options co = CpuOptions(g), dso = DeviceOptions(g, &hb, true, 2);
  gcc_session *cpu = nullptr, *dev = nullptr;
  ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  for (int s = 0; s < 4; s++) {
    Batch b = MakeBatch(8, 3 * 32 * 32, 10, 77 + (uint32_t)s);
    float l1 = 0, l2 = 0;
    ASSERT_EQ(gcc_session_train_step(dev, b.x.data(), b.y.data(), 8, &l1, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_train_step(cpu, b.x.data(), b.y.data(), 8, &l2, &d), GCC_OK) << d.msg;
    EXPECT_NEAR(l1, l2, 1e-5 * std::max(1.0f, std::fabs(l2))) << "step " << s;
  }
  EXPECT_GT(hb.library_calls, 0);
  gcc_plan *p = nullptr;
  ASSERT_EQ(gcc_session_plan(dev, GCC_MODE_TRAIN, 8, &p, &d), GCC_OK) << d.msg;
  EXPECT_GE(gcc_plan_graph_replays(p), 1) << gcc_plan_graph_note(p);
  ExpectSameParameters(g, dev, cpu, 1e-5);
  Batch e = MakeBatch(16, 3 * 32 * 32, 10, 5);
  float l1 = 0, l2 = 0;
  int64_t c1 = -1, c2 = -2;
  ASSERT_EQ(gcc_session_eval_batch(dev, e.x.data(), e.y.data(), 16, &l1, &c1, nullptr, &d), GCC_OK)
      << d.msg;
  ASSERT_EQ(gcc_session_eval_batch(cpu, e.x.data(), e.y.data(), 16, &l2, &c2, nullptr, &d), GCC_OK)
      << d.msg;
  EXPECT_NEAR(l1, l2, 1e-5 * std::max(1.0f, std::fabs(l2)));
  EXPECT_EQ(c1, c2);
  gcc_session_destroy(dev);
  gcc_session_destroy(cpu);
  gcc_graph_free(g);
}

TEST_F(DevicePlan, ALabelOutOfRangeIsReportedWhenTheLossesAreCollected) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  gcc_session_options dso = DeviceOptions(g, &hb, false, 2);
  gcc_session *dev = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  Batch b = MakeBatch(8, 36, 5, 1);
  b.y[3] = 5; // classes are 0..4
  ASSERT_EQ(gcc_session_train_step_async(dev, b.x.data(), b.y.data(), 8, &d), GCC_OK) << d.msg;
  float losses[2];
  int n = 0;
  EXPECT_EQ(gcc_session_collect_losses(dev, losses, 2, &n, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("'loss'"), std::string::npos) << d.msg;
  EXPECT_NE(std::string(d.msg).find("row 3"), std::string::npos) << d.msg;
  gcc_session_destroy(dev);
  gcc_graph_free(g);
}

// gcc_session_param / _grad tell an unknown name from a device that fails
// to give the parameters back.
TEST_F(DevicePlan, SessionParamSaysWhetherTheNameIsUnknownOrTheDeviceFailed) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  gcc_session_options dso = DeviceOptions(g, &hb, false, 1);
  gcc_session *dev = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  Batch b = MakeBatch(8, 36, 5, 1);
  float loss = 0;
  ASSERT_EQ(gcc_session_train_step(dev, b.x.data(), b.y.data(), 8, &loss, &d), GCC_OK) << d.msg;
  float *p = nullptr;
  int64_t n = 0;
  EXPECT_EQ(gcc_session_param(dev, "no.such.weight", &p, &n, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("'no.such.weight' is not a parameter"), std::string::npos)
      << d.msg;
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(gcc_session_grad(dev, "no.such.weight", &p, &n, &d), GCC_ERR_INVALID_ARGUMENT);
  hb.fail_d2h = true; // the parameters are newer on the device: the copy back fails
  EXPECT_EQ(gcc_session_param(dev, "fc1.weight", &p, &n, &d), GCC_ERR_DEVICE);
  EXPECT_NE(std::string(d.msg).find("fc1.weight"), std::string::npos) << d.msg;
  EXPECT_NE(std::string(d.msg).find("cudaErrorIllegalAddress"), std::string::npos) << d.msg;
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(gcc_session_grad(dev, "fc1.weight", &p, &n, &d), GCC_ERR_DEVICE);
  hb.fail_d2h = false; // it recovers: the next read copies again
  EXPECT_EQ(gcc_session_param(dev, "fc1.weight", &p, &n, &d), GCC_OK) << d.msg;
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(n, 36 * 24);
  gcc_session_destroy(dev);
  gcc_graph_free(g);
}

TEST_F(DevicePlan, OutOfDeviceMemoryNamesRequestedFreeTotalAndTheLargestValues) {
  HostBackend hb;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &g, &d), GCC_OK) << d.msg;
  hb.limit = 8u << 20; // the persistent arena (6.9 MB) fits, a batch-4096 step does not
  gcc_session_options dso = DeviceOptions(g, &hb, false, 1);
  gcc_session *dev = nullptr;
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  gcc_plan *p = nullptr;
  EXPECT_EQ(gcc_session_plan(dev, GCC_MODE_TRAIN, 4096, &p, &d), GCC_ERR_OUT_OF_MEMORY);
  std::string m = d.msg;
  EXPECT_NE(m.find("out of memory on cuda:0"), std::string::npos) << m;
  EXPECT_NE(m.find("bytes are free"), std::string::npos) << m;
  EXPECT_NE(m.find(std::to_string(8u << 20)), std::string::npos) << m; // the total
  EXPECT_NE(m.find("fc1.out"), std::string::npos) << m; // 4096 x 512 floats: among the largest
  EXPECT_NE(m.find("--batch-size"), std::string::npos) << m;
  gcc_session_destroy(dev);
  EXPECT_EQ(hb.used, 0u);
  // the persistent arena itself
  hb.limit = 1u << 20;
  EXPECT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_ERR_OUT_OF_MEMORY);
  EXPECT_NE(std::string(d.msg).find("persistent arena"), std::string::npos) << d.msg;
  gcc_graph_free(g);
}

TEST_F(DevicePlan, BatchesGatheredFromAnUploadedDatasetTrainAsHostBatches) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  gcc_diag d{};
  const int64_t n = 29; // 3 batches of 8 and one of 5
  Batch all = MakeBatch(n, 36, 5, 4242);
  std::vector<int64_t> perm(n);
  for (int64_t i = 0; i < n; i++)
    perm[i] = (i * 11) % n; // 11 is prime to 29
  gcc_session *cpu = nullptr, *dev = nullptr;
  gcc_session_options co = CpuOptions(g), dso = DeviceOptions(g, &hb, true, 4);
  ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  EXPECT_EQ(gcc_session_upload_dataset(cpu, all.x.data(), all.y.data(), n, &d),
            GCC_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(gcc_session_upload_dataset(dev, all.x.data(), all.y.data(), n, &d), GCC_OK) << d.msg;
  std::vector<float> cl, dl(8);
  int got = 0;
  for (int epoch = 0; epoch < 2; epoch++) {
    if (epoch == 1)
      std::reverse(perm.begin(), perm.end());
    ASSERT_EQ(gcc_session_set_order(dev, perm.data(), &d), GCC_OK) << d.msg;
    for (int64_t first = 0; first < n; first += 8) {
      int64_t rows = std::min<int64_t>(8, n - first);
      Batch b{std::vector<float>(rows * 36), std::vector<int64_t>(rows), rows};
      for (int64_t r = 0; r < rows; r++) {
        std::memcpy(&b.x[r * 36], &all.x[perm[first + r] * 36], 36 * sizeof(float));
        b.y[r] = all.y[perm[first + r]];
      }
      float l = 0;
      ASSERT_EQ(gcc_session_train_step(cpu, b.x.data(), b.y.data(), rows, &l, &d), GCC_OK) << d.msg;
      cl.push_back(l);
      ASSERT_EQ(gcc_session_train_step_uploaded(dev, first, rows, &d), GCC_OK) << d.msg;
    }
    int k = 0;
    ASSERT_EQ(gcc_session_collect_losses(dev, dl.data() + got, 4, &k, &d), GCC_OK) << d.msg;
    got += k;
  }
  ASSERT_EQ(got, 8);
  for (int s = 0; s < 8; s++)
    EXPECT_NEAR(dl[s], cl[s], 1e-5 * std::max(1.0f, std::fabs(cl[s]))) << "step " << s;
  ExpectSameParameters(g, dev, cpu, 1e-5);
  EXPECT_EQ(gcc_session_train_step_uploaded(dev, 25, 8, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("outside the 29 uploaded samples"), std::string::npos) << d.msg;
  gcc_session_destroy(dev);
  gcc_session_destroy(cpu);
  gcc_graph_free(g);
}

std::string MnistDir() {
  for (const char *root : {(const char *)getenv("TEST_SRCDIR"), (const char *)"."}) {
    if (!root)
      continue;
    for (const char *ws : {"/gcc_train/", "/"}) {
      std::string p = std::string(root) + ws + "data/mnist";
      struct stat st;
      if (stat(p.c_str(), &st) == 0)
        return p;
    }
  }
  return "";
}

// The trainer on real MNIST (a slice of an epoch): the device session with
// the dataset uploaded and batches gathered on the device, losses collected
// every 10 steps, against the CPU session fed by the host data loader. The
// emulated device does its GEMMs with OpenBLAS, so the CPU session runs the
// op table's OpenBLAS kernels too (GCC_CPU_ONEDNN=0): over 40 steps the
// oneDNN kernels' other summation order moves the loss by about 3e-5.
TEST_F(DevicePlan, TrainerWithTheDatasetOnTheDeviceMatchesTheCpuTrainer) {
  struct ReferenceCpuKernels { // for this test only, even when an ASSERT returns early
    ReferenceCpuKernels() { setenv("GCC_CPU_ONEDNN", "0", 1); }
    ~ReferenceCpuKernels() { unsetenv("GCC_CPU_ONEDNN"); }
  } reference;
  std::string data = MnistDir();
  ASSERT_FALSE(data.empty()) << "data/mnist missing from the runfiles";
  HostBackend hb;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &g, &d), GCC_OK) << d.msg;
  gcc_train_report rep[2];
  for (int dev = 0; dev < 2; dev++) {
    gcc_session_options so = dev ? DeviceOptions(g, &hb, true, 10) : CpuOptions(g);
    gcc_session *s = nullptr;
    ASSERT_EQ(gcc_session_create(g, &so, &s, &d), GCC_OK) << d.msg;
    gcc_train_config cfg{};
    cfg.data_dir = data.c_str();
    cfg.epochs = 1;
    cfg.batch_size = 64;
    cfg.seed = 3;
    cfg.log_every = 10;
    cfg.max_steps = 40;
    cfg.eval_batch = 1000;
    cfg.quiet = 1;
    cfg.out = stdout;
    cfg.dataset_on_device = dev ? 1 : 2; // auto on the CPU: nothing to do
    cfg.note = stdout;
    ASSERT_EQ(gcc_train_run(s, g, &cfg, &rep[dev], &d), GCC_OK) << d.msg;
    EXPECT_EQ(rep[dev].dataset_on_device, dev);
    gcc_session_destroy(s);
  }
  EXPECT_EQ(rep[0].steps, 40);
  EXPECT_EQ(rep[1].steps, 40);
  EXPECT_NEAR(rep[1].final_train_loss, rep[0].final_train_loss, 1e-5);
  EXPECT_NEAR(rep[1].test_loss, rep[0].test_loss, 1e-5);
  EXPECT_EQ(rep[1].test_accuracy, rep[0].test_accuracy);
  EXPECT_GT(rep[0].test_accuracy, 0.3); // 40 steps learn something (chance: 0.1)
  gcc_graph_free(g);
}

// ---- issue 21: graphs, workspaces, cuBLASLt, small items ---------------------

struct Step {
  bool train;
  int64_t rows;
  uint32_t seed;
};

// Runs `steps` (training steps and evaluation batches, in order) on a device
// session and on a CPU session of `g`: every loss and correct count must agree.
void RunAndCompare(gcc_graph *g, HostBackend *hb, bool graphs, const std::vector<Step> &steps,
                   int64_t features, int classes, double tol, int sm_count = 4,
                   std::vector<float> *dev_out = nullptr) {
  gcc_diag d{};
  gcc_session *cpu = nullptr, *dev = nullptr;
  gcc_session_options co = CpuOptions(g), dso = DeviceOptions(g, hb, graphs, 1, sm_count);
  ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  for (size_t i = 0; i < steps.size(); i++) {
    const Step &s = steps[i];
    Batch b = MakeBatch(s.rows, features, classes, s.seed);
    float l1 = 0, l2 = 0;
    if (s.train) {
      ASSERT_EQ(gcc_session_train_step(cpu, b.x.data(), b.y.data(), s.rows, &l2, &d), GCC_OK)
          << d.msg;
      ASSERT_EQ(gcc_session_train_step(dev, b.x.data(), b.y.data(), s.rows, &l1, &d), GCC_OK)
          << "step " << i << ": " << d.msg;
    } else {
      int64_t c1 = -1, c2 = -2;
      ASSERT_EQ(gcc_session_eval_batch(cpu, b.x.data(), b.y.data(), s.rows, &l2, &c2, nullptr, &d),
                GCC_OK)
          << d.msg;
      ASSERT_EQ(gcc_session_eval_batch(dev, b.x.data(), b.y.data(), s.rows, &l1, &c1, nullptr, &d),
                GCC_OK)
          << "step " << i << ": " << d.msg;
      EXPECT_EQ(c1, c2) << "step " << i;
    }
    if (dev_out)
      dev_out->push_back(l1);
    EXPECT_NEAR(l1, l2, tol * std::max(1.0f, std::fabs(l2)))
        << (s.train ? "training" : "evaluation") << " step " << i << " (rows " << s.rows << ")";
  }
  ExpectSameParameters(g, dev, cpu, tol);
  gcc_session_destroy(dev);
  gcc_session_destroy(cpu);
}

std::string Violations(const HostBackend &hb) {
  std::string s;
  for (const std::string &v : hb.violations)
    s += "\n  " + v;
  return s;
}

// Issue 21, bug 1: a session's plans each keep their own CUDA Graphs. The
// evaluation plan (captured on its 3rd and 4th batch) must not replace the
// training plan's graphs: training after an evaluation goes on learning.
TEST_F(DevicePlan, TrainEvaluateTrainWithCudaGraphsMatchesTheCpu) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  std::vector<Step> steps;
  for (int i = 0; i < 6; i++)
    steps.push_back({true, 8, 300u + i});
  for (int i = 0; i < 4; i++)
    steps.push_back({false, 20, 400u + i});
  for (int i = 0; i < 6; i++)
    steps.push_back({true, 8, 500u + i});
  RunAndCompare(g, &hb, /*graphs=*/true, steps, 36, 5, 1e-5);
  EXPECT_GE(hb.replays, 8);
  EXPECT_TRUE(hb.violations.empty()) << Violations(hb);
  gcc_graph_free(g);
}

// A device session's plans run in one device step arena, as a CPU session's
// do (and as PyTorch's caching allocator serves training and evaluation from
// one pool): the session takes the first plan's arena over, a later plan
// that fits runs in it, a larger one allocates its own, which the plans
// after it share. Training steps left pending (two, with CUDA Graphs)
// while evaluations run in the same arena keep their losses (the read-back
// ring is the plan's own); every loss, evaluation and parameter is the CPU
// session's.
TEST_F(DevicePlan, PlansShareOneDeviceStepArenaAndTrainAsOnTheCpu) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  gcc_diag d{};
  gcc_session *cpu = nullptr, *dev = nullptr;
  gcc_session_options co = CpuOptions(g), dso = DeviceOptions(g, &hb, true, 2);
  ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  const size_t before = hb.used;
  gcc_plan *train = nullptr, *eval8 = nullptr, *eval400 = nullptr, *train4 = nullptr;
  ASSERT_EQ(gcc_session_plan(dev, GCC_MODE_TRAIN, 8, &train, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_plan(dev, GCC_MODE_EVAL, 8, &eval8, &d), GCC_OK) << d.msg;
  size_t tb = 0, eb = 0, bb = 0, sb = 0;
  int town = -1, eown = -1, bown = -1;
  void *ta = gcc_plan_device_arena(train, &tb, &town);
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(town, 0) << "the session took the training plan's arena over";
  EXPECT_EQ(gcc_plan_device_arena(eval8, &eb, &eown), ta) << "the evaluation plan runs in it";
  EXPECT_EQ(eown, 0);
  EXPECT_LE(eb, tb);
  // the device memory: the two plans' own allocations and one arena
  EXPECT_EQ(hb.used - before, gcc_plan_device_bytes(train) - tb + gcc_plan_device_bytes(eval8) -
                                  eb + ((tb + 255) / 256 * 256));
  ASSERT_EQ(gcc_session_plan(dev, GCC_MODE_EVAL, 400, &eval400, &d), GCC_OK) << d.msg;
  void *ba = gcc_plan_device_arena(eval400, &bb, &bown);
  ASSERT_NE(ba, nullptr);
  EXPECT_NE(ba, ta)
      << "an evaluation of 400 rows does not fit in the arena of a training step of 8";
  EXPECT_GT(bb, tb);
  EXPECT_EQ(bown, 0);
  ASSERT_EQ(gcc_session_plan(dev, GCC_MODE_TRAIN, 4, &train4, &d), GCC_OK) << d.msg;
  EXPECT_EQ(gcc_plan_device_arena(train4, &sb, nullptr), ba) << "later plans run in the newest";

  std::vector<float> cpu_losses, dev_losses;
  uint32_t seed = 900;
  auto evaluate = [&](int64_t rows) {
    Batch e = MakeBatch(rows, 36, 5, seed++);
    float l1 = 0, l2 = 0;
    int64_t c1 = -2, c2 = -3;
    const gcc_tensor *p1 = nullptr, *p2 = nullptr;
    ASSERT_EQ(gcc_session_eval_batch(dev, e.x.data(), e.y.data(), rows, &l1, &c1, &p1, &d), GCC_OK)
        << d.msg;
    ASSERT_EQ(gcc_session_eval_batch(cpu, e.x.data(), e.y.data(), rows, &l2, &c2, &p2, &d), GCC_OK)
        << d.msg;
    EXPECT_NEAR(l1, l2, 1e-5 * std::max(1.0f, std::fabs(l2))) << "evaluation of " << rows;
    EXPECT_EQ(c1, c2) << "evaluation of " << rows;
  };
  for (int round = 0; round < 3; round++)
    for (int64_t rows : {8, 4}) {
      // two training steps issued, then evaluations in the shared arena
      // before their losses are collected
      for (int k = 0; k < 2; k++) {
        Batch b = MakeBatch(rows, 36, 5, seed++);
        float l = 0;
        ASSERT_EQ(gcc_session_train_step(cpu, b.x.data(), b.y.data(), rows, &l, &d), GCC_OK)
            << d.msg;
        cpu_losses.push_back(l);
        ASSERT_EQ(gcc_session_train_step_async(dev, b.x.data(), b.y.data(), rows, &d), GCC_OK)
            << d.msg;
      }
      evaluate(8);
      evaluate(400);
      float got[2] = {0, 0};
      int n = 0;
      ASSERT_EQ(gcc_session_collect_losses(dev, got, 2, &n, &d), GCC_OK) << d.msg;
      ASSERT_EQ(n, 2);
      dev_losses.insert(dev_losses.end(), got, got + 2);
    }
  ASSERT_EQ(dev_losses.size(), cpu_losses.size());
  for (size_t i = 0; i < cpu_losses.size(); i++)
    EXPECT_NEAR(dev_losses[i], cpu_losses[i], 1e-5 * std::max(1.0f, std::fabs(cpu_losses[i])))
        << "step " << i;
  ExpectSameParameters(g, dev, cpu, 1e-5);
  gcc_session_destroy(dev);
  gcc_session_destroy(cpu);
  EXPECT_EQ(hb.used, 0u) << "device memory leaked";
  EXPECT_TRUE(hb.graphs.empty()) << "CUDA Graphs leaked";
  EXPECT_TRUE(hb.violations.empty()) << Violations(hb);
  gcc_graph_free(g);
}

// Issue 21, bug 1: a plan evicted from the session's cache (more than 8
// batch sizes) takes its graphs with it, before its memory goes; the plans
// that stay keep replaying their own graphs.
TEST_F(DevicePlan, EvictingAPlanLeavesTheOtherPlansReplayingTheirOwnGraphs) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  std::vector<Step> steps;
  uint32_t seed = 600;
  for (int i = 0; i < 4; i++)
    steps.push_back({true, 8, seed++});
  for (int i = 0; i < 4; i++)
    steps.push_back({false, 20, seed++});
  for (int64_t rows = 7; rows >= 1; rows--) // 7 more plans: the 9th evicts train b8
    for (int i = 0; i < 4; i++)
      steps.push_back({true, rows, seed++});
  for (int i = 0; i < 3; i++)
    steps.push_back({true, 7, seed++});
  for (int i = 0; i < 3; i++)
    steps.push_back({false, 20, seed++});
  RunAndCompare(g, &hb, /*graphs=*/true, steps, 36, 5, 1e-5);
  EXPECT_TRUE(hb.violations.empty()) << Violations(hb);
  EXPECT_EQ(hb.used, 0u);
  gcc_graph_free(g);
}

// Issue 21, bug 2: the CIFAR CNN trains at batch 4 with graphs, evaluates a
// batch of 1000 (larger convolutions: a larger cuDNN workspace), trains
// again: the training graphs must not run cuDNN on a freed workspace.
TEST_F(DevicePlan, CifarCnnTrainEvaluateAtOneThousandTrainAgainWithGraphs) {
  HostBackend hb;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_cifar_cnn(GCC_CIFAR_CNN_SEED, &g, &d), GCC_OK) << d.msg;
  std::vector<Step> steps;
  for (int i = 0; i < 5; i++)
    steps.push_back({true, 4, 700u + i});
  steps.push_back({false, 1000, 710});
  for (int i = 0; i < 4; i++)
    steps.push_back({true, 4, 720u + i});
  RunAndCompare(g, &hb, /*graphs=*/true, steps, 3 * 32 * 32, 10, 2e-5);
  EXPECT_TRUE(hb.violations.empty()) << Violations(hb);
  gcc_graph_free(g);
}

// Issue 21: a cuDNN workspace that cannot be allocated is out of memory,
// and leaves nothing half-prepared: with memory again, the next step runs.
// (The workspace is part of the plan's allocation, sized when the plan is
// built from every convolution of the plan.)
TEST_F(DevicePlan, AWorkspaceThatDoesNotFitIsOutOfMemoryAndTheNextStepRuns) {
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_cifar_cnn(GCC_CIFAR_CNN_SEED, &g, &d), GCC_OK) << d.msg;
  Batch b = MakeBatch(4, 3 * 32 * 32, 10, 31);
  size_t plan_bytes = 0, ws = 0;
  {
    HostBackend probe;
    gcc_session_options so = DeviceOptions(g, &probe, false, 1);
    gcc_session *s = nullptr;
    ASSERT_EQ(gcc_session_create(g, &so, &s, &d), GCC_OK) << d.msg;
    gcc_plan *p = nullptr;
    ASSERT_EQ(gcc_session_plan(s, GCC_MODE_TRAIN, 4, &p, &d), GCC_OK) << d.msg;
    plan_bytes = gcc_plan_device_bytes(p);
    ws = gcc_plan_workspace_bytes(p);
    gcc_session_destroy(s);
  }
  ASSERT_GT(ws, 0u);
  HostBackend hb;
  gcc_session_options co = CpuOptions(g), so = DeviceOptions(g, &hb, false, 1);
  gcc_session *cpu = nullptr, *dev = nullptr;
  ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(g, &so, &dev, &d), GCC_OK) << d.msg;
  hb.limit = hb.used + plan_bytes - ws / 2; // the plan fits but for half its workspace
  float l1 = 0, l2 = 0;
  EXPECT_EQ(gcc_session_train_step(dev, b.x.data(), b.y.data(), 4, &l1, &d), GCC_ERR_OUT_OF_MEMORY)
      << d.msg;
  EXPECT_NE(std::string(d.msg).find("cuDNN workspace"), std::string::npos) << d.msg;
  hb.limit = SIZE_MAX;
  ASSERT_EQ(gcc_session_train_step(dev, b.x.data(), b.y.data(), 4, &l1, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_train_step(cpu, b.x.data(), b.y.data(), 4, &l2, &d), GCC_OK) << d.msg;
  EXPECT_NEAR(l1, l2, 1e-5 * std::max(1.0f, std::fabs(l2)));
  gcc_session_destroy(dev);
  gcc_session_destroy(cpu);
  EXPECT_TRUE(hb.violations.empty()) << Violations(hb);
  gcc_graph_free(g);
}

void TrainRegressionAndCompare(gcc_graph *g, HostBackend *hb, int steps) {
  gcc_diag d{};
  gcc_session *cpu = nullptr, *dev = nullptr;
  gcc_session_options co = CpuOptions(g), dso = DeviceOptions(g, hb, true, 1);
  ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  for (int s = 0; s < steps; s++) {
    Batch b = MakeBatch(8, 3, 2, 800u + (uint32_t)s);
    std::vector<float> y(8);
    for (int i = 0; i < 8; i++)
      y[i] = b.x[i * 3] - 2.0f * b.x[i * 3 + 1];
    float l1 = 0, l2 = 0;
    ASSERT_EQ(gcc_session_train_step(cpu, b.x.data(), y.data(), 8, &l2, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_train_step(dev, b.x.data(), y.data(), 8, &l1, &d), GCC_OK)
        << "step " << s << ": " << d.msg;
    EXPECT_NEAR(l1, l2, 1e-5 * std::max(1.0f, std::fabs(l2))) << "step " << s;
  }
  ExpectSameParameters(g, dev, cpu, 1e-5);
  gcc_session_destroy(dev);
  gcc_session_destroy(cpu);
}

// (tests/fusion_test checks that the fusion pass does not form them.)
TEST_F(DevicePlan, ShapesCublasLtHasNoEpilogueForTrainAsOnTheCpu) {
  gcc_graph *lin = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_linear(1, &lin, &d), GCC_OK) << d.msg;
  gcc_graph *reg = TinyRegressor();
  HostBackend h1, h2;
  TrainRegressionAndCompare(lin, &h1, 5);
  TrainRegressionAndCompare(reg, &h2, 5);
  gcc_graph_free(reg);
  gcc_graph_free(lin);
}

// When cuBLASLt's heuristic offers no algorithm for a group's epilogue, the
// plan falls back to the plain GEMM and generated kernels for the
// epilogue's work. Each epilogue the MLP uses is refused in turn.
TEST_F(DevicePlan, EachEpilogueRefusedInTurnFallsBackAndMatchesTheCpu) {
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  for (gcc_epilogue e : {GCC_EPI_RELU_AUX_BIAS, GCC_EPI_DRELU_BGRAD, GCC_EPI_BGRADB, GCC_EPI_BIAS,
                         GCC_EPI_RELU_BIAS}) {
    SCOPED_TRACE(gcc_epilogue_name(e));
    HostBackend hb;
    hb.refuse.insert((int)e);
    TrainAndCompare(g, /*graphs=*/true, /*pending=*/2, 6, 8, 5, &hb, 1e-5);
    // a refused GEMM of a ReLU bit-mask takes the mask's other GEMMs along:
    // generated kernels write and read it
    bool mask = e == GCC_EPI_RELU_AUX_BIAS || e == GCC_EPI_DRELU_BGRAD;
    for (const std::string &used : hb.epilogues) {
      EXPECT_NE(used, gcc_epilogue_name(e));
      if (mask) {
        EXPECT_NE(used, "CUBLASLT_EPILOGUE_RELU_AUX_BIAS");
        EXPECT_NE(used, "CUBLASLT_EPILOGUE_DRELU_BGRAD");
      }
    }
  }
  gcc_graph_free(g);
}

// cuBLASLt's algorithms are chosen for the alignment of the real operands
// (and with the real bias and aux pointers set).
TEST_F(DevicePlan, EveryGemmRunsOnOperandsAlignedAsItsAlgorithmAssumes) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  TrainAndCompare(g, /*graphs=*/true, /*pending=*/2, 6, 8, 5, &hb, 1e-5);
  std::string m;
  for (const std::string &v : hb.misaligned)
    m += "\n  " + v;
  EXPECT_TRUE(hb.misaligned.empty()) << m;
  gcc_graph_free(g);
}

// The loss kernel's threads race to report bad labels: the reported row is
// the first, as the CPU backend reports it.
TEST_F(DevicePlan, TwoBadLabelsReportTheFirstRowAsTheCpuDoes) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  gcc_session_options co = CpuOptions(g), dso = DeviceOptions(g, &hb, false, 1);
  gcc_session *cpu = nullptr, *dev = nullptr;
  gcc_diag d{}, dc{};
  ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  Batch b = MakeBatch(8, 36, 5, 2);
  b.y[3] = 7;
  b.y[6] = -1;
  float l = 0;
  EXPECT_EQ(gcc_session_train_step(cpu, b.x.data(), b.y.data(), 8, &l, &dc),
            GCC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gcc_session_train_step(dev, b.x.data(), b.y.data(), 8, &l, &d),
            GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dc.msg).find("row 3"), std::string::npos) << dc.msg;
  EXPECT_NE(std::string(d.msg).find("row 3"), std::string::npos) << d.msg;
  gcc_session_destroy(dev);
  gcc_session_destroy(cpu);
  gcc_graph_free(g);
}

// A step that fails after its H2D was issued leaves the copy in flight: the
// plan is failed, and its pinned staging buffer is not written again.
TEST_F(DevicePlan, AStepFailingAfterItsCopyMarksThePlanFailed) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  gcc_session_options dso = DeviceOptions(g, &hb, false, 1);
  gcc_session *dev = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  float l = 0;
  for (int s = 0; s < 3; s++) {
    Batch b = MakeBatch(8, 36, 5, 50u + (uint32_t)s);
    ASSERT_EQ(gcc_session_train_step(dev, b.x.data(), b.y.data(), 8, &l, &d), GCC_OK) << d.msg;
  }
  hb.fail_gemm_at = hb.gemms; // the next step's first GEMM
  Batch b3 = MakeBatch(8, 36, 5, 53), b4 = MakeBatch(8, 36, 5, 54);
  EXPECT_EQ(gcc_session_train_step(dev, b3.x.data(), b3.y.data(), 8, &l, &d), GCC_ERR_DEVICE);
  EXPECT_NE(std::string(d.msg).find("injected"), std::string::npos) << d.msg;
  EXPECT_NE(gcc_session_train_step(dev, b4.x.data(), b4.y.data(), 8, &l, &d), GCC_OK);
  EXPECT_NE(std::string(d.msg).find("failed"), std::string::npos) << d.msg;
  gcc_session_destroy(dev);
  EXPECT_TRUE(hb.violations.empty()) << Violations(hb);
  gcc_graph_free(g);
}

// The README and runtime/plan.h say how far the host runs ahead: it waits
// for the plan's step i - 2 (the last user of step i's input slot and
// staging buffer) and for nothing else.
TEST_F(DevicePlan, TheHostWaitsForStepIMinusTwoAndNothingElse) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  gcc_session_options dso = DeviceOptions(g, &hb, true, 8);
  gcc_session *dev = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  for (int s = 0; s < 8; s++) {
    Batch b = MakeBatch(8, 36, 5, 20u + (uint32_t)s);
    ASSERT_EQ(gcc_session_train_step_async(dev, b.x.data(), b.y.data(), 8, &d), GCC_OK) << d.msg;
  }
  std::vector<std::pair<int, int>> want;
  for (int i = 2; i < 8; i++)
    want.push_back({i, i - 2});
  EXPECT_EQ(hb.step_waits, want);
  float losses[8];
  int n = 0;
  ASSERT_EQ(gcc_session_collect_losses(dev, losses, 8, &n, &d), GCC_OK) << d.msg;
  EXPECT_EQ(n, 8);
  gcc_session_destroy(dev);
  gcc_graph_free(g);
}

// The kernel image is chosen by the device's compute capability before it
// is loaded: lazy loading would only fail at the first launch. A plan
// compiled for sm_80 on an sm_90 device loads the PTX (compute_80 JITs on
// sm_90); the sm_80 cubin cannot run there.
TEST_F(DevicePlan, TheKernelImageIsChosenByComputeCapabilityBeforeLoading) {
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  {
    HostBackend hb;
    hb.be.arch = 90;
    gcc_diag d{};
    gcc_session *cpu = nullptr, *dev = nullptr;
    gcc_session_options co = CpuOptions(g), dso = DeviceOptions(g, &hb, true, 1);
    dso.plan.sm = 80;
    ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
    for (int s = 0; s < 3; s++) {
      Batch b = MakeBatch(8, 36, 5, 90u + (uint32_t)s);
      float l1 = 0, l2 = 0;
      ASSERT_EQ(gcc_session_train_step(cpu, b.x.data(), b.y.data(), 8, &l2, &d), GCC_OK) << d.msg;
      ASSERT_EQ(gcc_session_train_step(dev, b.x.data(), b.y.data(), 8, &l1, &d), GCC_OK) << d.msg;
      EXPECT_NEAR(l1, l2, 1e-5 * std::max(1.0f, std::fabs(l2)));
    }
    gcc_session_destroy(dev);
    gcc_session_destroy(cpu);
  }
  { // sm_90 kernels on an sm_86 device: neither the cubin nor the PTX runs
    HostBackend hb;
    hb.be.arch = 86;
    gcc_diag d{};
    gcc_session *dev = nullptr;
    gcc_session_options dso = DeviceOptions(g, &hb, true, 1);
    ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
    gcc_plan *p = nullptr;
    EXPECT_EQ(gcc_session_plan(dev, GCC_MODE_TRAIN, 8, &p, &d), GCC_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(d.msg).find("sm_86"), std::string::npos) << d.msg;
    EXPECT_NE(std::string(d.msg).find("compute_90"), std::string::npos) << d.msg;
    gcc_session_destroy(dev);
  }
  gcc_graph_free(g);
}

// ---- issue 19: ready for the first GPU ---------------------------------------

// Trains `g` on the host backend `hb` and on the CPU (3 steps of `rows`, one
// evaluation of `rows`): losses, correct counts and parameters agree within
// `tol`. Returns the fallback text (gcc_plan_fallback_text) of its training
// and evaluation plans in *fallbacks.
// `tol` bounds the parameters' relative difference (16-bit plans: the factor
// of ExpectSameUpdates), `loss_tol` the losses' (relative to max(1, |loss|));
// `precision` is the sessions' --precision.
void TrainRefusing(gcc_graph *g, HostBackend *hb, int64_t rows, int64_t features, int classes,
                   double tol, std::string *fallbacks, int precision = GCC_PRECISION_FP32,
                   double loss_tol = -1) {
  if (loss_tol < 0)
    loss_tol = tol;
  gcc_diag d{};
  gcc_session *cpu = nullptr, *dev = nullptr, *ref32 = nullptr;
  gcc_session_options co = CpuOptions(g), dso = DeviceOptions(g, hb, true, 1), ro = CpuOptions(g);
  co.precision = dso.precision = precision;
  ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  if (precision != GCC_PRECISION_FP32) { // what 16 bits do to the updates (ExpectSameUpdates)
    ASSERT_EQ(gcc_session_create(g, &ro, &ref32, &d), GCC_OK) << d.msg;
  }
  for (int s = 0; s < 4; s++) {
    bool train = s < 3;
    int64_t r = rows;
    Batch b = MakeBatch(r, features, classes, 900u + (uint32_t)s);
    float l1 = 0, l2 = 0;
    int64_t c1 = -1, c2 = -2;
    if (train) {
      float l3 = 0;
      if (ref32) {
        ASSERT_EQ(gcc_session_train_step(ref32, b.x.data(), b.y.data(), r, &l3, &d), GCC_OK)
            << d.msg;
      }
      ASSERT_EQ(gcc_session_train_step(cpu, b.x.data(), b.y.data(), r, &l2, &d), GCC_OK) << d.msg;
      ASSERT_EQ(gcc_session_train_step(dev, b.x.data(), b.y.data(), r, &l1, &d), GCC_OK)
          << "step " << s << ": " << d.msg;
    } else {
      ASSERT_EQ(gcc_session_eval_batch(cpu, b.x.data(), b.y.data(), r, &l2, &c2, nullptr, &d),
                GCC_OK)
          << d.msg;
      ASSERT_EQ(gcc_session_eval_batch(dev, b.x.data(), b.y.data(), r, &l1, &c1, nullptr, &d),
                GCC_OK)
          << d.msg;
      EXPECT_EQ(c1, c2);
    }
    EXPECT_NEAR(l1, l2, loss_tol * std::max(1.0f, std::fabs(l2))) << "step " << s;
  }
  if (precision == GCC_PRECISION_FP32)
    ExpectSameParameters(g, dev, cpu, tol);
  else
    ExpectSameUpdates(g, dev, cpu, ref32, tol);
  fallbacks->clear();
  const struct {
    gcc_mode mode;
    int64_t rows;
  } plans[] = {{GCC_MODE_TRAIN, rows}, {GCC_MODE_EVAL, rows}};
  for (const auto &pl : plans) {
    gcc_plan *p = nullptr;
    ASSERT_EQ(gcc_session_plan(dev, pl.mode, pl.rows, &p, &d), GCC_OK) << d.msg;
    char text[4096];
    gcc_plan_fallback_text(p, text, sizeof text);
    *fallbacks += text;
    for (int i = 0; i < gcc_plan_epilogue_fallbacks(p); i++) {
      const char *group = nullptr, *epi = nullptr, *why = nullptr;
      ASSERT_EQ(gcc_plan_epilogue_fallback(p, i, &group, &epi, &why), 0);
      EXPECT_TRUE(group && *group && epi && why && *why);
    }
    EXPECT_EQ(
        gcc_plan_epilogue_fallback(p, gcc_plan_epilogue_fallbacks(p), nullptr, nullptr, nullptr),
        -1);
  }
  gcc_session_destroy(dev);
  gcc_session_destroy(cpu);
  gcc_session_destroy(ref32);
  EXPECT_EQ(hb->used, 0u) << "device memory leaked";
  EXPECT_TRUE(hb->prepared.empty()) << "prepared GEMMs leaked";
  EXPECT_TRUE(hb->violations.empty()) << Violations(*hb);
}

// Issue 19: the MNIST MLP and both CNNs train with each cuBLASLt epilogue
// they use refused in turn by the (emulated) heuristic: the plan runs the
// plain GEMM and a generated kernel for the epilogue's work, says which
// groups fell back and why, and matches the CPU plan with the tolerances of
// the tests above (MLP 2e-5, CNNs 1e-5 relative). In bfloat16 (--precision
// bf16) the plans use the same epilogues (the bias gradients are 16-bit sums,
// passes/autocast.c), the fallback kernels read and write 16 bits, and the
// CPU plan rounds the same values: the two differ where float32 sums taken
// in other orders fall on two sides of a bfloat16 rounding boundary, and
// where the fallback rounds D twice (after the plain GEMM and after the
// epilogue, cuBLASLt once) or a fused DRELU_BGRAD sums D before rounding:
// each one bfloat16 unit (2^-8 relative) of one element. The losses agree
// within precision_test's derived 2e-2; the parameters' updates within 16
// times what bfloat16 itself moves them from float32 (ExpectSameUpdates:
// why not a fixed fraction). Measured: the fused plans within 1.1 times;
// with the ReLU bit-mask epilogues refused, whose fallback rounds each
// layer's output twice (a third of the elements then differ by one unit,
// GemmEpilogueFallback.Bf16KernelsDoWhatTheCublasLtEpiloguesDo), up to 9.4
// times (the MNIST CNN's fc2).
struct RefusalCase {
  const char *name;
  gcc_status (*make)(uint64_t, gcc_graph **, gcc_diag *);
  uint64_t seed;
  int64_t rows, features;
  double tol; // float32: the parameters' relative difference; 16 bits: ExpectSameUpdates' factor
  int precision = GCC_PRECISION_FP32;
  double loss_tol = -1; // -1: tol
};

// The 16-bit kernels of refused epilogues: a loaded kernel set with the
// fallback kernels whose operands are bfloat16.
bool LoadedBf16EpilogueKernels(const HostBackend &hb) {
  for (const std::string &src : hb.sources)
    if (src.find("gcc_epilogue_0") != std::string::npos &&
        src.find("__nv_bfloat16*") != std::string::npos) {
      return true;
    }
  return false;
}

void RefuseEachEpilogueInTurn(const RefusalCase &c) {
  {
    SCOPED_TRACE(c.name);
    gcc_graph *g = nullptr;
    gcc_diag d{};
    ASSERT_EQ(c.make(c.seed, &g, &d), GCC_OK) << d.msg;
    std::set<std::string> used;
    std::string text;
    const bool bf16 = c.precision == GCC_PRECISION_BF16;
    {
      HostBackend hb; // nothing refused: which epilogues the plans use
      TrainRefusing(g, &hb, c.rows, c.features, 10, c.tol, &text, c.precision, c.loss_tol);
      EXPECT_EQ(text, "");
      used.insert(hb.epilogues.begin(), hb.epilogues.end());
      // every GEMM in the operands' dtype (cuBLASLt prepared for it)
      for (const std::string &p : hb.prep_log)
        if (p.rfind("gemm ", 0) == 0) {
          EXPECT_NE(p.find(bf16 ? " bfloat16" : " float32"), std::string::npos) << p;
        }
    }
    used.erase("CUBLASLT_EPILOGUE_DEFAULT");
    EXPECT_GE(used.size(), 3u);
    int refused_any = 0;
    for (int e = 0; e <= GCC_EPI_BGRADB; e++) { // the cuBLASLt values, 1 .. 512
      if (!used.count(gcc_epilogue_name(e)))
        continue;
      SCOPED_TRACE(gcc_epilogue_name(e));
      HostBackend hb;
      hb.refuse.insert(e);
      TrainRefusing(g, &hb, c.rows, c.features, 10, c.tol, &text, c.precision, c.loss_tol);
      EXPECT_NE(text.find(std::string(gcc_epilogue_name(e)) + " not offered"), std::string::npos)
          << text;
      EXPECT_NE(text.find("cuBLASLt has no algorithm"), std::string::npos) << text;
      if (bf16) { // the refused GEMM was asked in 16 bits, its fallback runs in 16 bits
        EXPECT_NE(text.find("bfloat16 GEMM with " + std::string(gcc_epilogue_name(e))),
                  std::string::npos)
            << text;
        EXPECT_TRUE(LoadedBf16EpilogueKernels(hb));
      }
      for (const std::string &u : hb.epilogues)
        EXPECT_NE(u, gcc_epilogue_name(e));
      refused_any++;
    }
    EXPECT_EQ(refused_any, (int)used.size());
    {
      HostBackend hb;                           // all of them at once
      for (int e = 0; e <= GCC_EPI_BGRADB; e++) // the cuBLASLt values, 1 .. 512
        if (used.count(gcc_epilogue_name(e)))
          hb.refuse.insert(e);
      TrainRefusing(g, &hb, c.rows, c.features, 10, c.tol, &text, c.precision, c.loss_tol);
      for (const std::string &u : hb.epilogues)
        EXPECT_EQ(u, "CUBLASLT_EPILOGUE_DEFAULT");
      if (bf16) {
        EXPECT_TRUE(LoadedBf16EpilogueKernels(hb));
      }
    }
    gcc_graph_free(g);
  }
}

TEST_F(DevicePlan, MnistMlpTrainsWithEachEpilogueRefusedInTurnAsOnTheCpu) {
  RefuseEachEpilogueInTurn({"mnist_mlp", gcc_model_mnist_mlp, GCC_MNIST_MLP_SEED, 16, 784, 2e-5});
}

TEST_F(DevicePlan, CifarCnnTrainsWithEachEpilogueRefusedInTurnAsOnTheCpu) {
  RefuseEachEpilogueInTurn(
      {"cifar_cnn", gcc_model_cifar_cnn, GCC_CIFAR_CNN_SEED, 4, 3 * 32 * 32, 1e-5});
}

TEST_F(DevicePlan, MnistCnnTrainsWithEachEpilogueRefusedInTurnAsOnTheCpu) {
  RefuseEachEpilogueInTurn(
      {"mnist_cnn", gcc_model_mnist_cnn, GCC_MNIST_CNN_SEED, 4, 28 * 28, 1e-5});
}

TEST_F(DevicePlan, Bf16MnistMlpTrainsWithEachEpilogueRefusedInTurnWithinTheBf16Bound) {
  RefuseEachEpilogueInTurn({"mnist_mlp bf16", gcc_model_mnist_mlp, GCC_MNIST_MLP_SEED, 16, 784, 2.0,
                            GCC_PRECISION_BF16, 2e-2});
}

TEST_F(DevicePlan, Bf16MnistCnnTrainsWithEachEpilogueRefusedInTurnWithinTheBf16Bound) {
  RefuseEachEpilogueInTurn({"mnist_cnn bf16", gcc_model_mnist_cnn, GCC_MNIST_CNN_SEED, 4, 28 * 28,
                            16.0, GCC_PRECISION_BF16, 2e-2});
}

// Issue 19: a run whose data set is not a multiple of the batch size (MNIST:
// 60000 = 535 x 112 + 80; the test set 10000 = 3 x 3000 + 1000) prepares the
// plans of both training shapes and both evaluation shapes (cuBLASLt
// heuristics, cuDNN algorithms, workspaces) before the first CUDA Graph is
// captured, and no heuristic runs under capture (the host backend records a
// violation if one does).
void EveryBatchShapePreparedBeforeTheFirstCapture(int precision) {
  std::string data = MnistDir();
  ASSERT_FALSE(data.empty()) << "data/mnist missing from the runfiles";
  HostBackend hb;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &g, &d), GCC_OK) << d.msg;
  gcc_session_options so = DeviceOptions(g, &hb, true, 2);
  so.precision = precision;
  gcc_session *s = nullptr;
  ASSERT_EQ(gcc_session_create(g, &so, &s, &d), GCC_OK) << d.msg;
  gcc_train_config cfg{};
  cfg.data_dir = data.c_str();
  cfg.epochs = 1;
  cfg.batch_size = 112;
  cfg.seed = 4;
  cfg.log_every = 2;
  cfg.max_steps = 6;
  cfg.eval_batch = 3000;
  cfg.quiet = 1;
  cfg.out = stdout;
  cfg.note = stdout;
  gcc_train_report rep;
  ASSERT_EQ(gcc_train_run(s, g, &cfg, &rep, &d), GCC_OK) << d.msg;
  EXPECT_EQ(rep.steps, 6);
  EXPECT_GE(hb.captures, 1);
  auto first = [&](const std::string &what) -> size_t {
    for (size_t i = 0; i < hb.prep_log.size(); i++)
      if (hb.prep_log[i].find(what) != std::string::npos)
        return i;
    return SIZE_MAX;
  };
  // fc1's forward GEMM, column-major: m = 512 outputs, n = the batch rows, k = 784
  size_t capture = first("capture");
  ASSERT_NE(capture, SIZE_MAX);
  for (const char *shape :
       {"gemm 512x112x784", "gemm 512x80x784", "gemm 512x3000x784", "gemm 512x1000x784"}) {
    size_t at = first(shape);
    EXPECT_NE(at, SIZE_MAX) << shape << " never prepared";
    EXPECT_LT(at, capture) << shape << " prepared after the first capture";
    if (at != SIZE_MAX) { // and in the plan's dtype: a 16-bit plan's heuristic is a 16-bit one
      const char *dt = precision == GCC_PRECISION_BF16 ? " bfloat16" : " float32";
      EXPECT_NE(hb.prep_log[at].find(dt), std::string::npos) << hb.prep_log[at];
    }
  }
  if (precision == GCC_PRECISION_BF16) { // the 16-bit plans' epilogues, as in float32
    std::set<std::string> used(hb.epilogues.begin(), hb.epilogues.end());
    for (const char *e : {"CUBLASLT_EPILOGUE_RELU_AUX_BIAS", "CUBLASLT_EPILOGUE_BIAS",
                          "CUBLASLT_EPILOGUE_DRELU_BGRAD", "CUBLASLT_EPILOGUE_BGRADB"})
      EXPECT_TRUE(used.count(e)) << e;
  }
  EXPECT_TRUE(hb.violations.empty()) << Violations(hb);
  gcc_session_destroy(s);
  gcc_graph_free(g);
}

TEST_F(DevicePlan, EveryBatchShapeOfTheRunIsPreparedBeforeTheFirstCapture) {
  EveryBatchShapePreparedBeforeTheFirstCapture(GCC_PRECISION_FP32);
}

// The same in bfloat16: a 16-bit plan's GEMMs (with their epilogues, its
// casts and 16-bit kernels) are prepared for every shape before a capture.
TEST_F(DevicePlan, EveryBatchShapeOfABf16RunIsPreparedBeforeTheFirstCapture) {
  EveryBatchShapePreparedBeforeTheFirstCapture(GCC_PRECISION_BF16);
}

// The host backend's capture check itself: a heuristic asked while a
// capture is open is an error and a violation (as the CUDA backend refuses
// it: cudaStreamIsCapturing).
TEST(HostBackendCapture, AHeuristicDuringCaptureIsRefused) {
  HostBackend hb;
  gcc_diag d{};
  ASSERT_EQ(hb.be.capture_begin(hb.be.self, &d), GCC_OK);
  gcc_colmajor_gemm m{};
  m.m = m.n = m.k = m.lda = m.ldb = m.ldd = 4;
  m.c_value = m.bias_value = m.aux_group = -1;
  m.epilogue = GCC_EPI_DEFAULT;
  gcc_gemm_operands ops{};
  ops.align_a = ops.align_b = ops.align_c = ops.align_d = 16;
  void *pr = nullptr;
  EXPECT_NE(hb.be.gemm_prepare(hb.be.self, &m, &ops, &pr, &d), GCC_OK);
  EXPECT_EQ(pr, nullptr);
  void *graph = nullptr;
  ASSERT_EQ(hb.be.capture_end(hb.be.self, &graph, &d), GCC_OK);
  hb.be.graph_destroy(hb.be.self, graph);
  ASSERT_EQ(hb.violations.size(), 1u);
  EXPECT_NE(hb.violations[0].find("during a capture"), std::string::npos) << hb.violations[0];
}

// Issue 19: every kernel launch is checked against the device's limits when
// the plan is built (a fake device here), before anything is launched, and
// the message names the kernel and its node.
TEST_F(DevicePlan, ALaunchPastTheDeviceLimitsIsRefusedWhenThePlanIsBuilt) {
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  struct Limit {
    const char *what;
    int threads, grid;
    const char *says;
  } limits[] = {{"128 threads per block", 128, INT_MAX, "threads per block"},
                {"one block in x", 1024, 1, "cudaDevAttrMaxGridDimX"}};
  for (const Limit &l : limits) {
    SCOPED_TRACE(l.what);
    HostBackend hb;
    hb.max_threads = l.threads;
    hb.max_grid_x = l.grid;
    gcc_session_options so = DeviceOptions(g, &hb, true, 1);
    gcc_session *dev = nullptr;
    gcc_diag d{};
    ASSERT_EQ(gcc_session_create(g, &so, &dev, &d), GCC_OK) << d.msg;
    Batch b = MakeBatch(8, 36, 5, 3);
    float loss = 0;
    EXPECT_EQ(gcc_session_train_step(dev, b.x.data(), b.y.data(), 8, &loss, &d),
              GCC_ERR_UNSUPPORTED);
    std::string m = d.msg;
    EXPECT_NE(m.find(l.says), std::string::npos) << m;
    EXPECT_NE(m.find("kernel "), std::string::npos) << m;
    EXPECT_NE(m.find("node '"), std::string::npos) << m;
    EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
    EXPECT_EQ(hb.launches, 0) << "a kernel was launched before the check";
    gcc_session_destroy(dev);
    EXPECT_TRUE(hb.violations.empty()) << Violations(hb);
    EXPECT_EQ(hb.used, 0u);
  }
  { // the limits of an H100 let the same plan run
    HostBackend hb;
    hb.max_threads = 1024;
    hb.max_grid_x = 2147483647;
    TrainAndCompare(g, /*graphs=*/true, /*pending=*/2, 4, 8, 5, &hb, 1e-5);
  }
  gcc_graph_free(g);
}

// The same check covers 16-bit kernels: a bfloat16 plan's generated kernels
// (its casts and bfloat16 chains) and, with every epilogue refused, the
// 16-bit kernels that do the refused epilogues' work, each checked when the
// plan is built and named in the message.
TEST_F(DevicePlan, ALaunchPastTheDeviceLimitsIsRefusedForSixteenBitKernelsToo) {
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  for (bool epilogues : {false, true}) {
    SCOPED_TRACE(epilogues ? "the fallback kernels of refused epilogues" : "the plan's kernels");
    HostBackend hb;
    hb.max_threads = 128;
    if (epilogues) {
      hb.limit_prefix = "gcc_epilogue_";
      for (gcc_epilogue e : {GCC_EPI_RELU_AUX_BIAS, GCC_EPI_DRELU_BGRAD, GCC_EPI_BGRADB,
                             GCC_EPI_BIAS, GCC_EPI_RELU_BIAS, GCC_EPI_DRELU})
        hb.refuse.insert((int)e);
    }
    gcc_session_options so = DeviceOptions(g, &hb, true, 1);
    so.precision = GCC_PRECISION_BF16;
    gcc_session *dev = nullptr;
    gcc_diag d{};
    ASSERT_EQ(gcc_session_create(g, &so, &dev, &d), GCC_OK) << d.msg;
    Batch b = MakeBatch(8, 36, 5, 3);
    float loss = 0;
    EXPECT_EQ(gcc_session_train_step(dev, b.x.data(), b.y.data(), 8, &loss, &d),
              GCC_ERR_UNSUPPORTED);
    std::string m = d.msg;
    EXPECT_NE(m.find("threads per block"), std::string::npos) << m;
    EXPECT_NE(m.find(epilogues ? "kernel gcc_epilogue_" : "kernel "), std::string::npos) << m;
    if (epilogues) {
      EXPECT_NE(m.find("the epilogue of GEMM group"), std::string::npos) << m;
      EXPECT_TRUE(LoadedBf16EpilogueKernels(hb)) << "the refused epilogues' kernels in 16 bits";
    } else { // the first kernel of the plan reads or writes bfloat16
      ASSERT_FALSE(hb.sources.empty());
      EXPECT_NE(hb.sources[0].find("__nv_bfloat16"), std::string::npos);
    }
    EXPECT_EQ(hb.launches, 0) << "a kernel was launched before the check";
    gcc_session_destroy(dev);
    EXPECT_TRUE(hb.violations.empty()) << Violations(hb);
    EXPECT_EQ(hb.used, 0u);
  }
  gcc_graph_free(g);
}

// Issue 19: --profile on a device: every launch, GEMM, library call and copy
// of a step is bracketed by timing events (emulated here: host clock at
// record), read once the step is known to be done; the input H2D is timed
// on the copy stream with its bytes; every op runs inside an NVTX range
// named after its node or group; capture is off while profiling; the
// losses still match the CPU.
TEST_F(DevicePlan, ProfilingTimesEveryDeviceLaunchAndNamesEveryNode) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  std::string path = ::testing::TempDir() + "/device_profile.json";
  gcc_profiler *prof = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_profiler_create(path.c_str(), &prof, &d), GCC_OK) << d.msg;
  gcc_prof_track *track = gcc_profiler_track(prof, "main");
  gcc_session_options co = CpuOptions(g), dso = DeviceOptions(g, &hb, true, 2);
  gcc_session *cpu = nullptr, *dev = nullptr;
  ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_set_profiler(dev, prof, track, &d), GCC_OK) << d.msg;
  const int steps = 5;
  std::vector<float> dl(steps), cl(steps);
  int got = 0;
  for (int s = 0; s < steps; s++) {
    Batch b = MakeBatch(8, 36, 5, 40u + (uint32_t)s);
    ASSERT_EQ(gcc_session_train_step(cpu, b.x.data(), b.y.data(), 8, &cl[s], &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_train_step_async(dev, b.x.data(), b.y.data(), 8, &d), GCC_OK) << d.msg;
    if (s % 2 == 1 || s == steps - 1) {
      int n = 0;
      ASSERT_EQ(gcc_session_collect_losses(dev, dl.data() + got, 2, &n, &d), GCC_OK) << d.msg;
      got += n;
    }
  }
  ASSERT_EQ(got, steps);
  for (int s = 0; s < steps; s++)
    EXPECT_NEAR(dl[s], cl[s], 1e-5 * std::max(1.0f, std::fabs(cl[s]))) << "step " << s;
  gcc_plan *p = nullptr;
  ASSERT_EQ(gcc_session_plan(dev, GCC_MODE_TRAIN, 8, &p, &d), GCC_OK) << d.msg;
  EXPECT_EQ(hb.captures, 0);
  EXPECT_NE(std::string(gcc_plan_graph_note(p)).find("--profile"), std::string::npos)
      << gcc_plan_graph_note(p);
  gcc_plan_device_profile dp{};
  gcc_plan_device_profile_get(p, &dp);
  EXPECT_EQ(dp.steps, steps);
  EXPECT_DOUBLE_EQ(dp.h2d_bytes, steps * (8.0 * 36 * 4 + 8 * 8)); // image float32, label int64
  EXPECT_GE(dp.kernel_ms, 0.0);
  EXPECT_GT(dp.gemm_ms + dp.kernel_ms, 0.0);
  EXPECT_LE(dp.overlap_ms, dp.h2d_ms + 1e-9);
  // the ops of each step in NVTX ranges, each named after its node or group
  int ops = gcc_plan_num_steps(p);
  EXPECT_EQ((int)hb.ranges.size(), ops * steps);
  EXPECT_EQ(hb.range_depth, 0);
  const gcc_graph *pg = gcc_plan_graph(p);
  int named = 0;
  for (int gi = 0; gi < pg->n_groups; gi++)
    for (const std::string &r : hb.ranges)
      if (r.find(pg->groups[gi].name) != std::string::npos) {
        named++;
        break;
      }
  EXPECT_GE(named, gcc_plan_launches(p)) << "a launch without an NVTX range of its group";
  // the events: one per device op per step on the device track, and the H2D
  gcc_prof_summary sum{};
  ASSERT_EQ(gcc_session_set_profiler(dev, nullptr, nullptr, &d), GCC_OK);
  ASSERT_EQ(gcc_profiler_summary(prof, &sum, &d), GCC_OK) << d.msg;
  EXPECT_EQ(sum.count[GCC_PROF_OP] + sum.count[GCC_PROF_COPY], (int64_t)(ops + 1) * steps);
  bool gemm_row = false;
  for (int i = 0; i < sum.n_rows; i++)
    gemm_row |= std::string(sum.rows[i].op) == "Gemm (cuBLASLt)" && sum.rows[i].flops > 0;
  EXPECT_TRUE(gemm_row);
  gcc_prof_summary_free(&sum);
  EXPECT_EQ(gcc_profiler_write(prof, &d), GCC_OK) << d.msg;
  // profiling off: the plan captures again
  Batch b = MakeBatch(8, 36, 5, 77);
  float l = 0;
  for (int s = 0; s < 3; s++)
    ASSERT_EQ(gcc_session_train_step(dev, b.x.data(), b.y.data(), 8, &l, &d), GCC_OK) << d.msg;
  EXPECT_GE(hb.captures, 1);
  gcc_session_destroy(dev);
  gcc_session_destroy(cpu);
  gcc_profiler_destroy(prof);
  EXPECT_TRUE(hb.violations.empty()) << Violations(hb);
  gcc_graph_free(g);
}

// The kernels that do a refused epilogue's work (codegen/emit.h,
// gcc_codegen_gemm_epilogues) after the plain GEMM give what cuBLASLt's
// epilogue gives (the host backend's model of it, ColMajorGemm), for every
// epilogue the fusion pass forms, DRELU alone included; the source compiles
// with NVRTC for sm_80 and sm_90.
TEST(GemmEpilogueFallback, KernelsDoWhatTheCublasLtEpiloguesDo) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  const int64_t M = 37, N = 19, K = 23; // m not a multiple of 32: padding bits
  const gcc_epilogue kinds[] = {GCC_EPI_BIAS,  GCC_EPI_RELU_BIAS,   GCC_EPI_RELU_AUX_BIAS,
                                GCC_EPI_DRELU, GCC_EPI_DRELU_BGRAD, GCC_EPI_BGRADB};
  std::vector<gcc_epilogue_work> work;
  std::vector<gcc_colmajor_gemm> maps;
  for (int i = 0; i < 6; i++) {
    gcc_colmajor_gemm m{};
    m.trans_a = i % 2;
    m.trans_b = (i / 2) % 2;
    m.m = M, m.n = N, m.k = K;
    m.lda = m.trans_a ? K : M;
    m.ldb = m.trans_b ? N : K;
    m.ldd = M;
    m.alpha = 0.5f;
    m.c_value = -1;
    m.epilogue = kinds[i];
    m.aux_ld = 128;
    maps.push_back(m);
    gcc_epilogue_work w{};
    w.kind = (int)kinds[i];
    w.m = M, w.n = N, w.k = K, w.ldd = M, w.ldb = m.ldb, w.aux_ld = 128, w.trans_b = m.trans_b;
    work.push_back(w);
  }
  gcc_kernel_set ks{};
  gcc_diag d{};
  ASSERT_EQ(gcc_codegen_gemm_epilogues(work.data(), 6, 4, &ks, &d), GCC_OK) << d.msg;
  ASSERT_EQ(ks.n_kernels, 6);
  for (int sm : {80, 90}) {
    gcc_nvrtc_output o{};
    EXPECT_EQ(gcc_nvrtc_compile(ks.source, "gcc_epilogues.cu", sm, &o, &d), GCC_OK)
        << "sm_" << sm << ": " << d.msg;
    EXPECT_GT(o.cubin_size, 0u);
    gcc_nvrtc_output_free(&o);
  }
  EmulatedModule mod;
  std::string err;
  ASSERT_TRUE(mod.Compile(ks.source, "epilogues", &err)) << err;
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int i = 0; i < 6; i++) {
    const gcc_colmajor_gemm &m = maps[i];
    SCOPED_TRACE(gcc_epilogue_name(m.epilogue));
    std::vector<float> A(M * K), B(K * N), bias(std::max(M, N)), D0(M * N);
    for (float &v : A)
      v = u(rng);
    for (float &v : B)
      v = u(rng);
    for (float &v : bias)
      v = u(rng);
    std::vector<uint8_t> aux(128 / 8 * N);
    for (uint8_t &v : aux)
      v = (uint8_t)rng();
    // cuBLASLt's epilogue (the model)
    std::vector<float> Dref(M * N), bref = bias;
    std::vector<uint8_t> aref = aux;
    ColMajorGemm(m, A.data(), B.data(), nullptr, Dref.data(), bref.data(), aref.data());
    // the plain GEMM, then the kernel
    gcc_colmajor_gemm plain = m;
    plain.epilogue = GCC_EPI_DEFAULT;
    std::vector<float> D(M * N), b2 = bias;
    std::vector<uint8_t> a2 = aux;
    if (m.epilogue == GCC_EPI_RELU_AUX_BIAS)
      std::fill(a2.begin(), a2.end(), 0xA5); // the kernel writes every word
    ColMajorGemm(plain, A.data(), B.data(), nullptr, D.data(), nullptr, nullptr);
    const gcc_kernel_info &k = ks.kernels[i];
    std::vector<void *> vals(k.n_args), argv(k.n_args);
    for (int a = 0; a < k.n_args; a++) {
      std::string nm = k.args[a].name;
      vals[a] = nm == "d"                       ? (void *)D.data()
                : nm == "bias" || nm == "bgrad" ? (void *)b2.data()
                : nm == "aux"                   ? (void *)a2.data()
                                                : (void *)B.data();
      argv[a] = &vals[a];
    }
    ASSERT_TRUE(mod.Launch(k.name, (unsigned)k.grid_dim, (unsigned)k.block_dim, argv.data(), &err))
        << err;
    if (m.epilogue != GCC_EPI_BGRADB) {
      EXPECT_LE(MaxRelErr(D.data(), Dref.data(), M * N), 1e-6);
    }
    if (m.epilogue == GCC_EPI_DRELU_BGRAD || m.epilogue == GCC_EPI_BGRADB) {
      int64_t len = m.epilogue == GCC_EPI_BGRADB ? N : M;
      EXPECT_LE(MaxRelErr(b2.data(), bref.data(), len), 1e-6);
    }
    if (m.epilogue == GCC_EPI_RELU_AUX_BIAS)
      for (int64_t j = 0; j < N; j++)
        for (int64_t r = 0; r < 128; r++) {
          int64_t bit = j * 128 + r;
          int got = (a2[bit / 8] >> (bit % 8)) & 1, want = (aref[bit / 8] >> (bit % 8)) & 1;
          if (r < M)
            EXPECT_EQ(got, want) << "mask bit (" << r << ", " << j << ")";
          else
            EXPECT_EQ(got, 0) << "padding bit (" << r << ", " << j << ")";
        }
  }
  gcc_kernel_set_free(&ks);
}

// The same kernels for a bfloat16 GEMM (a mixed-precision plan's fallback):
// they read and write bfloat16 D, bias and bias gradient (float32 inside),
// against the host emulation of cuBLASLt's fused epilogue on the same 16-bit
// operands (ColMajorGemmOfDtype). The fallback rounds D twice (the plain
// GEMM's store, then the epilogue's), the fused epilogue once, and its
// DRELU_BGRAD sums D before the rounding: each element within one bfloat16
// unit of the magnitudes it sums, the mask the same wherever the sum is
// farther than that from zero.
TEST(GemmEpilogueFallback, Bf16KernelsDoWhatTheCublasLtEpiloguesDo) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  const int64_t M = 37, N = 19, K = 23;
  const gcc_epilogue kinds[] = {GCC_EPI_BIAS,  GCC_EPI_RELU_BIAS,   GCC_EPI_RELU_AUX_BIAS,
                                GCC_EPI_DRELU, GCC_EPI_DRELU_BGRAD, GCC_EPI_BGRADB};
  std::vector<gcc_epilogue_work> work;
  std::vector<gcc_colmajor_gemm> maps;
  for (int i = 0; i < 6; i++) {
    gcc_colmajor_gemm m{};
    m.trans_a = i % 2;
    m.trans_b = (i / 2) % 2;
    m.m = M, m.n = N, m.k = K;
    m.lda = m.trans_a ? K : M;
    m.ldb = m.trans_b ? N : K;
    m.ldd = M;
    m.alpha = 1.0f;
    m.c_value = -1;
    m.epilogue = kinds[i];
    m.aux_ld = 128;
    m.dtype = GCC_DT_BFLOAT16;
    maps.push_back(m);
    gcc_epilogue_work w{};
    w.kind = (int)kinds[i];
    w.m = M, w.n = N, w.k = K, w.ldd = M, w.ldb = m.ldb, w.aux_ld = 128, w.trans_b = m.trans_b;
    w.dtype = GCC_DT_BFLOAT16;
    work.push_back(w);
  }
  gcc_kernel_set ks{};
  gcc_diag d{};
  ASSERT_EQ(gcc_codegen_gemm_epilogues(work.data(), 6, 4, &ks, &d), GCC_OK) << d.msg;
  ASSERT_EQ(ks.n_kernels, 6);
  for (int sm : {80, 90}) {
    gcc_nvrtc_output o{};
    EXPECT_EQ(gcc_nvrtc_compile(ks.source, "gcc_epilogues.cu", sm, &o, &d), GCC_OK)
        << "sm_" << sm << ": " << d.msg;
    EXPECT_GT(o.cubin_size, 0u);
    gcc_nvrtc_output_free(&o);
  }
  EmulatedModule mod;
  std::string err;
  ASSERT_TRUE(mod.Compile(ks.source, "epilogues16", &err)) << err;
  std::mt19937 rng(22);
  std::uniform_real_distribution<float> u(-1, 1);
  auto bf = [](float f) { return gcc_f32_to_bf16(f); };
  auto fl = [](uint16_t h) { return gcc_bf16_to_f32(h); };
  for (int i = 0; i < 6; i++) {
    const gcc_colmajor_gemm &m = maps[i];
    SCOPED_TRACE(gcc_epilogue_name(m.epilogue));
    std::vector<uint16_t> A(M * K), B(K * N), bias(std::max(M, N));
    for (uint16_t &v : A)
      v = bf(u(rng));
    for (uint16_t &v : B)
      v = bf(u(rng));
    for (uint16_t &v : bias)
      v = bf(u(rng));
    std::vector<uint8_t> aux(128 / 8 * N);
    for (uint8_t &v : aux)
      v = (uint8_t)rng();
    // cuBLASLt's fused epilogue on 16-bit operands (the model)
    std::vector<uint16_t> Dref(M * N), bref = bias;
    std::vector<uint8_t> aref = aux;
    gcc_host_test::ColMajorGemmOfDtype(m, A.data(), B.data(), nullptr, Dref.data(), bref.data(),
                                       aref.data());
    // the plain 16-bit GEMM, then the kernel
    gcc_colmajor_gemm plain = m;
    plain.epilogue = GCC_EPI_DEFAULT;
    std::vector<uint16_t> D(M * N), b2 = bias;
    std::vector<uint8_t> a2 = aux;
    if (m.epilogue == GCC_EPI_RELU_AUX_BIAS)
      std::fill(a2.begin(), a2.end(), 0xA5);
    gcc_host_test::ColMajorGemmOfDtype(plain, A.data(), B.data(), nullptr, D.data(), nullptr,
                                       nullptr);
    // the float32 sums before any rounding, for the bounds
    std::vector<double> acc(M * N, 0.0), mag(M * N, 0.0);
    for (int64_t j = 0; j < N; j++)
      for (int64_t r = 0; r < M; r++)
        for (int64_t kk = 0; kk < K; kk++) {
          double a = fl(m.trans_a ? A[kk + r * m.lda] : A[r + kk * m.lda]);
          double b = fl(m.trans_b ? B[j + kk * m.ldb] : B[kk + j * m.ldb]);
          acc[r + j * M] += a * b;
          mag[r + j * M] += std::fabs(a * b);
        }
    const gcc_kernel_info &k = ks.kernels[i];
    std::vector<void *> vals(k.n_args), argv(k.n_args);
    for (int a = 0; a < k.n_args; a++) {
      std::string nm = k.args[a].name;
      vals[a] = nm == "d"                       ? (void *)D.data()
                : nm == "bias" || nm == "bgrad" ? (void *)b2.data()
                : nm == "aux"                   ? (void *)a2.data()
                                                : (void *)B.data();
      argv[a] = &vals[a];
    }
    ASSERT_TRUE(mod.Launch(k.name, (unsigned)k.grid_dim, (unsigned)k.block_dim, argv.data(), &err))
        << err;
    const double ulp = 0x1p-8; // a bfloat16 unit, relative
    bool bias_in = m.epilogue == GCC_EPI_BIAS || m.epilogue == GCC_EPI_RELU_BIAS ||
                   m.epilogue == GCC_EPI_RELU_AUX_BIAS;
    int exact = 0;
    if (m.epilogue != GCC_EPI_BGRADB)
      for (int64_t j = 0; j < N; j++)
        for (int64_t r = 0; r < M; r++) {
          size_t at = (size_t)(r + j * M);
          double x = acc[at] + (bias_in ? fl(bias[(size_t)r]) : 0.0);
          // the plain GEMM's rounding of the sum, then the epilogue's of x
          double slack = ulp * (mag[at] + std::fabs(x)) + 1e-30;
          double got = fl(D[at]), want = fl(Dref[at]);
          if (std::fabs(x) > slack) { // the same side of zero: the same ReLU and mask
            EXPECT_LE(std::fabs(got - want), slack) << "(" << r << ", " << j << ")";
          }
          exact += D[at] == Dref[at];
        }
    if (m.epilogue != GCC_EPI_BGRADB) { // (BIAS: 481 of 703 here)
      EXPECT_GE(exact, (int)(M * N / 2)) << "most elements round alike";
    }
    if (m.epilogue == GCC_EPI_DRELU_BGRAD || m.epilogue == GCC_EPI_BGRADB) {
      int64_t len = m.epilogue == GCC_EPI_BGRADB ? N : M;
      for (int64_t t = 0; t < len; t++) {
        double sm = 0; // the sum of magnitudes it adds
        if (m.epilogue == GCC_EPI_BGRADB)
          for (int64_t kk = 0; kk < K; kk++)
            sm += std::fabs(fl(m.trans_b ? B[t + kk * m.ldb] : B[kk + t * m.ldb]));
        else
          for (int64_t j = 0; j < N; j++)
            sm += mag[(size_t)(t + j * M)];
        EXPECT_LE(std::fabs(fl(b2[(size_t)t]) - fl(bref[(size_t)t])), 2 * ulp * sm + 1e-30)
            << "bias gradient " << t;
      }
    }
    if (m.epilogue == GCC_EPI_RELU_AUX_BIAS)
      for (int64_t j = 0; j < N; j++)
        for (int64_t r = 0; r < 128; r++) {
          int64_t bit = j * 128 + r;
          int got = (a2[bit / 8] >> (bit % 8)) & 1, want = (aref[bit / 8] >> (bit % 8)) & 1;
          if (r >= M) {
            EXPECT_EQ(got, 0) << "padding bit (" << r << ", " << j << ")";
            continue;
          }
          double x = acc[(size_t)(r + j * M)] + fl(bias[(size_t)r]);
          if (std::fabs(x) > ulp * mag[(size_t)(r + j * M)]) {
            EXPECT_EQ(got, want) << "mask bit (" << r << ", " << j << ")";
          }
        }
  }
  gcc_kernel_set_free(&ks);
}

// The mapping alone, for every transpose combination of Gemm, with alpha,
// a full C and beta: compared with the CPU backend's row-major Gemm.
TEST(GemmMap, EveryTransposeCombinationMatchesTheRowMajorCpuGemm) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int withc = 0; withc < 2; withc++) {
        const int64_t M = 5, N = 7, K = 3;
        gcc_graph *g = gcc_graph_new("gemm", "<test>");
        gcc_diag d{};
        gcc_shape sa{2, {ta ? K : M, ta ? M : K}}, sb{2, {tb ? N : K, tb ? K : N}}, sc{2, {M, N}};
        std::mt19937 rng(ta * 4 + tb * 2 + withc);
        std::uniform_real_distribution<float> u(-1, 1);
        std::vector<float> A(M * K), B(K * N), C(M * N);
        for (float &v : A)
          v = u(rng);
        for (float &v : B)
          v = u(rng);
        for (float &v : C)
          v = u(rng);
        int a, b, c = -1, y, node;
        ASSERT_EQ(gcc_graph_add_value(g, "A", GCC_DT_FLOAT32, &sa, GCC_VALUE_CONST, A.data(),
                                      A.size() * 4, &a, &d),
                  GCC_OK);
        ASSERT_EQ(gcc_graph_add_value(g, "B", GCC_DT_FLOAT32, &sb, GCC_VALUE_CONST, B.data(),
                                      B.size() * 4, &b, &d),
                  GCC_OK);
        if (withc) {
          ASSERT_EQ(gcc_graph_add_value(g, "C", GCC_DT_FLOAT32, &sc, GCC_VALUE_CONST, C.data(),
                                        C.size() * 4, &c, &d),
                    GCC_OK);
        }
        ASSERT_EQ(gcc_graph_add_value(g, "Y", GCC_DT_FLOAT32, &sc, GCC_VALUE_ACTIVATION, nullptr, 0,
                                      &y, &d),
                  GCC_OK);
        int ins[3] = {a, b, c};
        ASSERT_EQ(gcc_graph_add_node(g, "gemm", GCC_OP_GEMM, ins, withc ? 3 : 2, &y, 1, &node, &d),
                  GCC_OK);
        gcc_node_set_int(g, node, "transA", ta);
        gcc_node_set_int(g, node, "transB", tb);
        gcc_node_set_float(g, node, "alpha", 0.75f);
        gcc_node_set_float(g, node, "beta", 0.5f);
        ASSERT_EQ(gcc_graph_add_output(g, y), GCC_OK);
        ASSERT_EQ(gcc_graph_link(g, &d), GCC_OK) << d.msg;
        ASSERT_EQ(gcc_infer_shapes(g, &d), GCC_OK) << d.msg;
        g->nodes[node].device = GCC_DEV_CUDA(0);
        int grp = -1;
        ASSERT_EQ(gcc_graph_add_group(g, "gemm_k0", GCC_GROUP_GEMM, GCC_DEV_CUDA(0), &node, 1,
                                      GCC_EPI_DEFAULT, &grp, &d),
                  GCC_OK);
        gcc_colmajor_gemm m{};
        ASSERT_EQ(gcc_gemm_map(g, grp, &m, &d), GCC_OK) << d.msg;
        EXPECT_EQ(m.m, N);
        EXPECT_EQ(m.n, M);
        EXPECT_EQ(m.k, K);
        EXPECT_EQ(m.a_value, b);
        EXPECT_EQ(m.b_value, a);
        std::vector<float> got(M * N, 0.0f), want(M * N, 0.0f);
        ColMajorGemm(m, B.data(), A.data(), withc ? C.data() : nullptr, got.data(), nullptr,
                     nullptr);
        // the CPU backend's kernel on the same operands
        gcc_tensor tA{GCC_DT_FLOAT32, sa, M * K, A.data()}, tB{GCC_DT_FLOAT32, sb, K * N, B.data()};
        gcc_tensor tC{GCC_DT_FLOAT32, sc, M * N, C.data()},
            tY{GCC_DT_FLOAT32, sc, M * N, want.data()};
        gcc_tensor *in[3] = {&tA, &tB, withc ? &tC : nullptr}, *out[1] = {&tY};
        gcc_cpu_ctx ctx{};
        ctx.max_threads = 1;
        ctx.diag = &d;
        gcc_kernel_args ka{&g->nodes[node], in, withc ? 3 : 2, out, 1, &ctx, nullptr, 0, nullptr};
        ASSERT_EQ(gcc_cpu_gemm(&ka), GCC_OK) << d.msg;
        EXPECT_LE(MaxRelErr(got.data(), want.data(), M * N), 1e-6)
            << "transA " << ta << " transB " << tb << " C " << withc;
        gcc_graph_free(g);
      }
}

// What the runner tells cuBLASLt's heuristic for
// CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES: the largest power of two up
// to 256 dividing the address.
TEST(GemmMap, OperandAlignmentIsTheLargestPowerOfTwoUpTo256) {
  alignas(256) static char buf[1024];
  EXPECT_EQ(gcc_lt_alignment(buf), 256u);
  EXPECT_EQ(gcc_lt_alignment(buf + 512), 256u);
  EXPECT_EQ(gcc_lt_alignment(buf + 64), 64u);
  EXPECT_EQ(gcc_lt_alignment(buf + 128), 128u);
  EXPECT_EQ(gcc_lt_alignment(buf + 192), 64u);
  EXPECT_EQ(gcc_lt_alignment(buf + 4), 4u);
  EXPECT_EQ(gcc_lt_alignment(buf + 1), 1u);
  EXPECT_EQ(gcc_lt_alignment(nullptr), 256u);
}

TEST(GemmMap, BiasGradientOfOperandABecomesBgradbAfterTheSwap) {
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &g, &d), GCC_OK) << d.msg;
  gcc_options o{};
  o.mode = GCC_MODE_TRAIN;
  o.batch_size = 64;
  o.opt = g->training.opt;
  o.device = GCC_DEV_CUDA(0);
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  gcc_graph *c = nullptr;
  gcc_mem_plan mem{};
  ASSERT_EQ(gcc_compile_graph(g, &o, &c, &mem, &d), GCC_OK) << d.msg;
  int bgrad = 0, drelu = 0, relu_aux = 0;
  for (int gi = 0; gi < c->n_groups; gi++) {
    if (c->groups[gi].kind != GCC_GROUP_GEMM)
      continue;
    gcc_colmajor_gemm m{};
    ASSERT_EQ(gcc_gemm_map(c, gi, &m, &d), GCC_OK) << d.msg;
    if (c->groups[gi].epilogue == GCC_EPI_BGRADA) {
      EXPECT_EQ(m.epilogue, GCC_EPI_BGRADB);
      EXPECT_EQ(m.n, 10); // fc5.bias.grad: the columns of D^T = dW^T (64 x 10)
      bgrad++;
    }
    if (m.epilogue == GCC_EPI_DRELU_BGRAD) {
      EXPECT_GE(m.aux_group, 0);
      EXPECT_EQ(c->groups[m.aux_group].epilogue, GCC_EPI_RELU_AUX_BIAS);
      EXPECT_EQ(m.aux_ld % 128, 0);
      EXPECT_GE(m.aux_ld, m.m);
      drelu++;
    }
    relu_aux += m.epilogue == GCC_EPI_RELU_AUX_BIAS;
  }
  EXPECT_EQ(bgrad, 1);
  EXPECT_EQ(drelu, 4);
  EXPECT_EQ(relu_aux, 4);
  gcc_mem_plan_free(&mem);
  gcc_graph_free(c);
  gcc_graph_free(g);
}

// tests/gpu's residual BatchNorm block (issue 29) on the host-emulated CUDA
// plan, small: batch 8 of 3 x 8 x 8, so each BatchNorm reduces 512 values
// per channel in the generated kernels' float32 tree (float64 serial sums on
// the CPU). Three steps with CUDA Graphs: the losses and every parameter and
// running statistic track the CPU plan's within the 1e-5 relative of this
// file's other comparisons: the BatchNorm statistics' tree adds at most
// L + log2(256) + P + 2 <= 20 roundings (tests/batchnorm_kernels_test), 20 u
// = 1.2e-6, and the emulated GEMMs and convolutions sum up to 144 products in
// another order than the CPU's (<= 144 u = 8.6e-6 of sum |x w|). Bitwise
// run-to-run repeatability of these kernels is batchnorm_kernels_test's.
TEST_F(DevicePlan, ResidualBatchNormBlockMatchesTheCpu) {
  gcc_graph *g = gcc_test::ResidualBnBlock(8);
  ASSERT_NE(g, nullptr);
  gcc_diag d{};
  HostBackend hb;
  gcc_session *cpu = nullptr, *dev = nullptr;
  gcc_session_options co = CpuOptions(g), dso = DeviceOptions(g, &hb, /*graphs=*/true, 1);
  ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int step = 0; step < 3; step++) {
    std::vector<float> x(8 * 3 * 8 * 8);
    std::vector<int64_t> y(8);
    for (float &v : x)
      v = nd(rng);
    for (int64_t &v : y)
      v = rng() % 10;
    float lc = 0, ld = 0;
    ASSERT_EQ(gcc_session_train_step(cpu, x.data(), y.data(), 8, &lc, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_train_step(dev, x.data(), y.data(), 8, &ld, &d), GCC_OK) << d.msg;
    EXPECT_NEAR(ld, lc, 1e-5 * std::max(1.0f, std::fabs(lc))) << "step " << step;
  }
  ExpectSameParameters(g, dev, cpu, 1e-5);
  EXPECT_GT(hb.captures, 0);
  gcc_session_destroy(dev);
  gcc_session_destroy(cpu);
  EXPECT_EQ(hb.used, 0u) << "device memory leaked";
  gcc_graph_free(g);
}

} // namespace
