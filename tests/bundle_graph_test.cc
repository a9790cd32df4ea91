// bundle_graph_test: bundles (the C API, deploy/gcc_api.h, as gcc-run uses
// it) on a GPU emulated on the host (tests/host_backend.h) replay their
// forward from CUDA Graphs and move each batch with one H2D and one D2H:
//  - outputs equal the CPU session's within the bound the device-plan tests
//    use (ExpectNearCpu), and every replay equals the first (launched) run
//    bit for bit;
//  - per batch size: the first use of each input slot is launched, the
//    second captured (2 graphs), every later run replayed: no launch, one
//    H2D (the input, from the pinned staging buffer the caller's rows were
//    written into), one D2H (both outputs), no device-wide synchronisation;
//  - gcc-run's order (run i, set i + 1, read i) issues batch i + 1's H2D
//    before the host waits for batch i (double buffering);
//  - a batch size change (the last partial batch, a new request size) is a
//    plan of its own with graphs of its own, and the first plan keeps
//    replaying;
//  - a capture that fails: the same outputs from launches, the reason in
//    gccx_session_stats, no graph leaked.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "deploy/export.h"
#include "deploy/gcc_api.h"
#include "deploy/gcc_api_internal.h"
#include "graph/loader.h"
#include "onnx/model_file.h"
#include "runtime/device.h"
}
#include "tests/host_backend.h"
#include "tests/kernel_emulation.h"
#include "tests/tensor_model.h"
#include "tests/testutil.h"

using namespace gcc_test; // tests/testutil.h

namespace {

constexpr int64_t kMax = 8, kSmall = 3, kPixels = 784, kClasses = 10;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// The MNIST MLP exported for sm_90 at batch sizes 3 and 8: runs of 1-3 rows
// pad to the plan of 3, runs of 4-8 to the plan of 8.
class BundleGraph : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    std::string model = Runfile("models/mnist_mlp.pb");
    ASSERT_FALSE(model.empty());
    gcc_diag d = {};
    gcc_graph *g = nullptr;
    ASSERT_EQ(gcc_model_load(model.c_str(), &g, &d), GCC_OK) << d.msg;
    gcc_export_options o = {};
    o.archs[0] = 90;
    o.n_archs = 1;
    o.batch_sizes[0] = kSmall;
    o.batch_sizes[1] = kMax;
    o.n_batch_sizes = 2;
    o.created = 1795000000;
    path_ = TmpPath("bundle_graph.gccx");
    ASSERT_EQ(gcc_export_bundle(g, &o, path_.c_str(), &d), GCC_OK) << d.msg;
    gcc_graph_free(g);
  }
  void SetUp() override {
    if (gcc_emu_test::ShimPath().empty())
      GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
    gcc_diag d = {};
    ASSERT_EQ(gccx_bundle_open(path_.c_str(), &b_, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_device_info_from_arch("sm_90", 0, &gpu_, &d), GCC_OK) << d.msg;
    pixels_.resize(5 * kMax * kPixels);
    for (size_t i = 0; i < pixels_.size(); i++)
      pixels_[i] = static_cast<uint8_t>((i * 37 + i / 784 * 11) % 256);
  }
  void TearDown() override {
    gccx_session_destroy(&gpu_s_);
    gccx_bundle_close(&b_);
    for (const std::string &v : hb_.violations)
      ADD_FAILURE() << v;
    for (const std::string &v : hb_.misaligned)
      ADD_FAILURE() << v;
    EXPECT_TRUE(hb_.graphs.empty()) << hb_.graphs.size() << " CUDA Graphs leaked";
  }
  void CreateGpu() {
    gcc_diag d = {};
    gccx_session_options o = {nullptr, 1, kMax};
    ASSERT_EQ(gccx_session_create_on(b_, &o, &hb_.be, &gpu_, &gpu_s_, &d), GCC_OK) << d.msg;
    EXPECT_STREQ(gccx_session_device(gpu_s_), "cuda:0");
  }
  // The CPU session's logits and probabilities of rows [first, first + rows).
  void Cpu(int64_t first, int64_t rows, std::vector<float> *l, std::vector<float> *q) {
    gcc_diag d = {};
    gccx_session *s = nullptr;
    gccx_session_options o = {"cpu", 1, kMax};
    ASSERT_EQ(gccx_session_create(b_, &o, &s, nullptr, 0, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gccx_set_input_images(s, &pixels_[first * kPixels], rows, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gccx_run(s, &d), GCC_OK) << d.msg;
    Read(s, rows, l, q);
    gccx_session_destroy(&s);
  }
  static void Read(gccx_session *s, int64_t rows, std::vector<float> *l, std::vector<float> *q) {
    gcc_diag d = {};
    const float *p = nullptr;
    int64_t r = 0, c = 0;
    ASSERT_EQ(gccx_get_output(s, "logits", &p, &r, &c, &d), GCC_OK) << d.msg;
    ASSERT_EQ(r, rows);
    ASSERT_EQ(c, kClasses);
    l->assign(p, p + rows * kClasses);
    ASSERT_EQ(gccx_get_output(s, "probabilities", &p, &r, &c, &d), GCC_OK) << d.msg;
    q->assign(p, p + rows * kClasses);
  }
  // One batch through the GPU session: set, run, read.
  void Gpu(int64_t first, int64_t rows, std::vector<float> *l, std::vector<float> *q) {
    gcc_diag d = {};
    ASSERT_EQ(gccx_set_input_images(gpu_s_, &pixels_[first * kPixels], rows, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gccx_run(gpu_s_, &d), GCC_OK) << d.msg;
    Read(gpu_s_, rows, l, q);
  }
  static void ExpectBitwise(const std::vector<float> &a, const std::vector<float> &b,
                            const char *what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t k = 0; k < a.size(); k++)
      EXPECT_EQ(Bits(a[k]), Bits(b[k])) << what << " " << k << ": " << a[k] << " vs " << b[k];
  }
  // The CPU session sums the float32 products of each GEMM (K = 784, then
  // the hidden width) in oneDNN's order, the host backend in OpenBLAS's
  // column-major order: two float32 sums of the same K terms differ by at
  // most 2 K 2^-24 sum|w x| (~1e-4 sum|w x|); here sum|w x| of a logit is
  // O(0.1), so 1e-5 max(1, |ref|), as tests/device_plan_test.cc's bound on
  // the same MLP's outputs (observed: ~1e-8).
  static void ExpectNearCpu(const std::vector<float> &a, const std::vector<float> &ref,
                            const char *what) {
    ASSERT_EQ(a.size(), ref.size()) << what;
    for (size_t k = 0; k < a.size(); k++)
      EXPECT_NEAR(a[k], ref[k], 1e-5 * std::max(1.0, std::fabs((double)ref[k])))
          << what << " " << k;
  }
  gccx_run_stats Stats() {
    gccx_run_stats st{};
    gcc_diag d = {};
    EXPECT_EQ(gccx_session_stats(gpu_s_, &st, &d), GCC_OK) << d.msg;
    return st;
  }

  static std::string path_;
  gccx_bundle *b_ = nullptr;
  gccx_session *gpu_s_ = nullptr;
  gcc_device_info gpu_{};
  gcc_host_test::HostBackend hb_;
  std::vector<uint8_t> pixels_;
};
std::string BundleGraph::path_;

TEST_F(BundleGraph, ReplaysEqualTheFirstRunBitForBitAndTheCpuWithinItsBound) {
  CreateGpu();
  std::vector<float> cl, cq;
  Cpu(0, kMax, &cl, &cq);
  std::vector<float> first_l, first_q;
  for (int run = 0; run < 6; run++) {
    SCOPED_TRACE("run " + std::to_string(run));
    int graphs = hb_.replays;
    std::vector<float> l, q;
    Gpu(0, kMax, &l, &q);
    // runs 0, 1: launched (first use of each input slot); 2, 3: captured and
    // launched from the graph; 4, 5: replayed
    EXPECT_EQ(hb_.replays - graphs, run < 2 ? 0 : 1);
    if (run == 0) {
      first_l = l;
      first_q = q;
      ExpectNearCpu(l, cl, "logit against the CPU");
      ExpectNearCpu(q, cq, "probability against the CPU");
    } else {
      ExpectBitwise(l, first_l, "logit against the first run");
      ExpectBitwise(q, first_q, "probability against the first run");
    }
  }
  gccx_run_stats st = Stats();
  EXPECT_EQ(st.runs, 6);
  EXPECT_EQ(st.replays, 4);
  EXPECT_EQ(st.captures, 2); // one per input slot
  EXPECT_EQ(st.plans, 1);
  EXPECT_STREQ(st.graph_note, "");
  EXPECT_EQ(hb_.captures, 2);
}

TEST_F(BundleGraph, AReplayedBatchIsOneH2dOneD2hAndNoDeviceSync) {
  CreateGpu();
  std::vector<float> l, q;
  for (int run = 0; run < 4; run++) // launched, launched, captured, captured
    Gpu(run * kMax, kMax, &l, &q);
  int h2d = hb_.h2d, d2h = hb_.d2h, syncs = hb_.device_syncs, replays = hb_.replays;
  const int kBatches = 5;
  for (int run = 0; run < kBatches; run++) {
    hb_.log.clear();
    Gpu((run % 5) * kMax, kMax, &l, &q);
    // the input H2D, the step replayed (no launch: no 'k'), the outputs' D2H
    EXPECT_EQ(hb_.log.find('k'), std::string::npos) << hb_.log;
    EXPECT_EQ(hb_.log.find('s'), std::string::npos) << hb_.log;
  }
  EXPECT_EQ(hb_.replays - replays, kBatches);
  EXPECT_EQ(hb_.h2d - h2d, kBatches);     // one per batch: the staged input
  EXPECT_EQ(hb_.d2h - d2h, kBatches);     // one per batch: logits and probabilities together
  EXPECT_EQ(hb_.device_syncs - syncs, 0); // the host waits for events, never the device
  // and the launched runs issued work launch by launch: the per-step count
  EXPECT_GT(hb_.launches + hb_.gemms, 0);
}

// gcc-run's loop: set batch 0; then per batch i: run i, set i + 1 (its H2D
// issued while the device computes i), read i. The outputs are those of
// batches run one at a time, and batch i + 1's H2D comes before the host's
// wait for batch i's outputs.
TEST_F(BundleGraph, PipelinedBatchesOverlapTheNextCopyAndMatchOneAtATime) {
  const int64_t n = 5 * kMax - 3; // four full batches and one of 5 rows (padded to 8)
  std::vector<std::vector<float>> ref_l, ref_q;
  CreateGpu();
  for (int64_t first = 0; first < n; first += kMax) {
    std::vector<float> l, q;
    Gpu(first, std::min(kMax, n - first), &l, &q);
    ref_l.push_back(l);
    ref_q.push_back(q);
  }
  gccx_session_destroy(&gpu_s_);
  CreateGpu();
  gcc_diag d = {};
  ASSERT_EQ(gccx_set_input_images(gpu_s_, &pixels_[0], kMax, &d), GCC_OK) << d.msg;
  int i = 0;
  for (int64_t first = 0; first < n; first += kMax, i++) {
    int64_t rows = std::min(kMax, n - first), next = first + kMax;
    hb_.log.clear();
    ASSERT_EQ(gccx_run(gpu_s_, &d), GCC_OK) << d.msg;
    if (next < n) {
      ASSERT_EQ(
          gccx_set_input_images(gpu_s_, &pixels_[next * kPixels], std::min(kMax, n - next), &d),
          GCC_OK)
          << d.msg;
    }
    std::vector<float> l, q;
    Read(gpu_s_, rows, &l, &q);
    ExpectBitwise(l, ref_l[i], "logit");
    ExpectBitwise(q, ref_q[i], "probability");
    if (next < n) { // the next batch's H2D, then the D2H of this one's outputs
      size_t h = hb_.log.rfind('h'), o = hb_.log.rfind('d');
      ASSERT_NE(h, std::string::npos) << hb_.log;
      ASSERT_NE(o, std::string::npos) << hb_.log;
      EXPECT_LT(h, o) << hb_.log;
    }
    EXPECT_EQ(hb_.log.find('s'), std::string::npos) << hb_.log;
  }
  gccx_run_stats st = Stats();
  EXPECT_EQ(st.runs, 5);
  EXPECT_EQ(st.plans, 1); // 5 rows pad to the plan of 8
  EXPECT_EQ(st.replays, 3);
}

TEST_F(BundleGraph, ABatchSizeChangeCapturesItsOwnGraphsAndKeepsTheFirstPlans) {
  CreateGpu();
  std::vector<float> l, q, cl, cq;
  for (int run = 0; run < 4; run++)
    Gpu(0, kMax, &l, &q);
  EXPECT_EQ(Stats().captures, 2);
  Cpu(kMax, 2, &cl, &cq);
  std::vector<float> first_l;
  for (int run = 0; run < 5; run++) { // 2 rows: the plan of 3
    Gpu(kMax, 2, &l, &q);
    ExpectNearCpu(l, cl, "logit of 2 rows against the CPU");
    ExpectNearCpu(q, cq, "probability of 2 rows against the CPU");
  }
  gccx_run_stats st = Stats();
  EXPECT_EQ(st.plans, 2);
  EXPECT_EQ(st.captures, 4);
  EXPECT_EQ(st.replays, 2 + 3);
  int captures = hb_.captures;
  Gpu(0, kMax, &l, &q); // back to 8 rows: replayed, nothing captured again
  EXPECT_EQ(hb_.captures, captures);
  EXPECT_EQ(Stats().replays, 2 + 3 + 1);
}

TEST_F(BundleGraph, AFailedCaptureFallsBackToLaunchesAndSaysWhy) {
  CreateGpu();
  std::vector<float> ref_l, ref_q, l, q;
  Gpu(0, kMax, &ref_l, &ref_q);
  hb_.fail_capture = true;
  for (int run = 1; run < 6; run++) {
    SCOPED_TRACE("run " + std::to_string(run));
    int kernels = hb_.launches + hb_.gemms;
    Gpu(0, kMax, &l, &q);
    EXPECT_GT(hb_.launches + hb_.gemms, kernels); // the step ran launch by launch
    ExpectBitwise(l, ref_l, "logit");
    ExpectBitwise(q, ref_q, "probability");
  }
  gccx_run_stats st = Stats();
  EXPECT_EQ(st.runs, 6);
  EXPECT_EQ(st.replays, 0);
  EXPECT_EQ(st.captures, 0);
  EXPECT_NE(std::string(st.graph_note).find("capture failed"), std::string::npos) << st.graph_note;
  EXPECT_NE(std::string(st.graph_note).find("cudaErrorStreamCaptureInvalidated"), std::string::npos)
      << st.graph_note;
  EXPECT_NE(std::string(st.graph_note).find("launches instead"), std::string::npos)
      << st.graph_note;
}

// Setting input twice before a run: the second waits for the first's H2D
// before rewriting the staging buffer (host_backend.h reports a rewrite in
// flight), and the run computes the second input.
TEST_F(BundleGraph, SettingTheInputAgainBeforeARunUsesTheNewRows) {
  CreateGpu();
  std::vector<float> ref_l, ref_q, l, q;
  Gpu(kMax, kMax, &ref_l, &ref_q);
  gcc_diag d = {};
  ASSERT_EQ(gccx_set_input_images(gpu_s_, &pixels_[0], kMax, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gccx_set_input_images(gpu_s_, &pixels_[kMax * kPixels], kMax, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gccx_run(gpu_s_, &d), GCC_OK) << d.msg;
  Read(gpu_s_, kMax, &l, &q);
  ExpectBitwise(l, ref_l, "logit");
  ASSERT_EQ(gccx_run(gpu_s_, &d), GCC_OK) << d.msg; // the same rows again
  Read(gpu_s_, kMax, &l, &q);
  ExpectBitwise(l, ref_l, "logit of the rerun");
}

// A tensor bundle (one (N, 3, 4) output, no softmax; tests/tensor_model.h)
// exported for sm_90 at batch size 4 runs on the emulated GPU: 3 rows pad
// to the plan of 4, and the output comes back with its 3 rows of T x C
// values, each within the float32 bound of the float64 reference, as the
// CPU session's.
TEST(BundleGraphTensor, ATensorBundleRunsOnTheGpuWithItsPaddedRowsCut) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  std::vector<float> w, b, gamma, beta;
  std::vector<uint8_t> onnx = TensorModel(&w, &b, &gamma, &beta);
  gcc_diag d = {};
  gcc_graph *g = nullptr;
  ASSERT_EQ(gcc_model_open_memory(onnx.data(), onnx.size(), "tensor.onnx", &g, nullptr, &d), GCC_OK)
      << d.msg;
  gcc_export_options o = {};
  o.archs[0] = 90;
  o.n_archs = 1;
  o.batch_sizes[0] = 4;
  o.n_batch_sizes = 1;
  std::string path = TmpPath("tensor.gccx");
  ASSERT_EQ(gcc_export_bundle(g, &o, path.c_str(), &d), GCC_OK) << d.msg;
  gcc_graph_free(g);
  gccx_bundle *bundle = nullptr;
  ASSERT_EQ(gccx_bundle_open(path.c_str(), &bundle, &d), GCC_OK) << d.msg;
  const gcc_bundle_info *info = nullptr;
  ASSERT_EQ(gccx_bundle_info(bundle, &info, &d), GCC_OK) << d.msg;
  EXPECT_EQ(info->kind, GCC_BUNDLE_TENSOR);
  EXPECT_EQ(info->format_version, 3u);
  EXPECT_EQ(info->n_cubin_archs, 1);
  constexpr int64_t kRows = 3;
  std::vector<float> x = TensorInput(kRows);
  std::vector<double> want, bound;
  TensorReference(x, w, b, gamma, beta, kRows, &want, &bound);
  gcc_device_info gpu{};
  ASSERT_EQ(gcc_device_info_from_arch("sm_90", 0, &gpu, &d), GCC_OK) << d.msg;
  gcc_host_test::HostBackend hb;
  for (int on_gpu = 0; on_gpu < 2; on_gpu++) {
    gccx_session_options so = {"cpu", 1, kRows};
    gccx_session *s = nullptr;
    if (on_gpu)
      ASSERT_EQ(gccx_session_create_on(bundle, &so, &hb.be, &gpu, &s, &d), GCC_OK) << d.msg;
    else
      ASSERT_EQ(gccx_session_create(bundle, &so, &s, nullptr, 0, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gccx_set_input(s, "x", x.data(), kRows, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gccx_run(s, &d), GCC_OK) << d.msg;
    const float *y = nullptr;
    int64_t rows = 0, cols = 0;
    ASSERT_EQ(gccx_get_output(s, "enc/y", &y, &rows, &cols, &d), GCC_OK) << d.msg;
    EXPECT_EQ(rows, kRows);
    ASSERT_EQ(cols, kT * kC);
    for (size_t i = 0; i < want.size(); i++)
      EXPECT_NEAR(y[i], want[i], bound[i]) << (on_gpu ? "gpu" : "cpu") << " value " << i;
    gccx_session_destroy(&s);
  }
  gccx_bundle_close(&bundle);
  for (const std::string &v : hb.violations)
    ADD_FAILURE() << v;
}

} // namespace
