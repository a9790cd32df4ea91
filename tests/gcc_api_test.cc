// The deployment C API (deploy/gcc_api.h): a bundle exported from the
// MNIST MLP must compute exactly the logits of the model's own CPU plan
// (a training session's forward pass), probabilities that are the float64
// softmax of those logits, normalize raw pixels exactly as the trainer's
// data loader, and reject every misuse (NULL and closed handles, wrong
// input or output names, row counts, runs without input, devices) with a
// message, never a crash.
#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "graph/loader.h"
#include "datasets/dataloader.h"
#include "datasets/dataset.h"
#include "runtime/device.h"
#include "runtime/cuda/cuda_device.h"
#include "deploy/export.h"
#include "deploy/bundle_internal.h"
#include "deploy/gcc_api.h"
#include "deploy/model_bundle.h"
#include "runtime/session.h"
#include "datasets/npy.h"
#include "tests/subprocess.h"
#include "tests/tensor_model.h"
#include "tests/testutil.h"

using namespace gcc_test; // tests/testutil.h, tensor_model.h, onnx_builder.h, subprocess.h

namespace {

constexpr int64_t kRows = 7, kPixels = 784;

class ApiTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    std::string model = Runfile("models/mnist_mlp.pb");
    ASSERT_FALSE(model.empty());
    gcc_diag d = {};
    ASSERT_EQ(gcc_model_load(model.c_str(), &model_, &d), GCC_OK) << d.msg;
    gcc_export_options o = {};
    o.archs[0] = 90;
    o.n_archs = 1;
    path_ = TmpPath("api.gccx");
    ASSERT_EQ(gcc_export_bundle(model_, &o, path_.c_str(), &d), GCC_OK) << d.msg;
    // images with every pixel value, different per row
    pixels_.resize(kRows * kPixels);
    for (int64_t i = 0; i < kRows * kPixels; i++)
      pixels_[static_cast<size_t>(i)] = static_cast<uint8_t>((i * 37 + i / 784 * 11) % 256);
    // what the trainer's data loader feeds: ((float)p / 255 - mean) / std
    normalized_.resize(pixels_.size());
    float mean = model_->training.mean[0], sd = model_->training.std[0];
    for (size_t i = 0; i < pixels_.size(); i++)
      normalized_[i] = (static_cast<float>(pixels_[i]) / 255.0f - mean) / sd;
  }
  static void TearDownTestSuite() {
    gcc_graph_free(model_);
    model_ = nullptr;
  }
  void SetUp() override {
    gcc_diag d = {};
    ASSERT_EQ(gccx_bundle_open(path_.c_str(), &b_, &d), GCC_OK) << d.msg;
  }
  void TearDown() override {
    gccx_session_destroy(&s_);
    gccx_bundle_close(&b_);
  }
  void Create(int64_t max_batch = kRows, const char *device = "cpu") {
    gccx_session_options o = {device, 1, max_batch};
    gcc_diag d = {};
    ASSERT_EQ(gccx_session_create(b_, &o, &s_, nullptr, 0, &d), GCC_OK) << d.msg;
  }
  // The model's logits from a training session's evaluation plan.
  static std::vector<float> SessionLogits() {
    gcc_session_options so = {};
    so.threads = 1;
    so.opt = model_->training.opt;
    gcc_session *s = nullptr;
    gcc_diag d = {};
    EXPECT_EQ(gcc_session_create(model_, &so, &s, &d), GCC_OK) << d.msg;
    std::vector<int64_t> labels(kRows, 0);
    float loss;
    int64_t correct;
    const gcc_tensor *pred = nullptr;
    EXPECT_EQ(gcc_session_eval_batch(s, normalized_.data(), labels.data(), kRows, &loss, &correct,
                                     &pred, &d),
              GCC_OK)
        << d.msg;
    const float *p = static_cast<const float *>(pred->data);
    std::vector<float> out(p, p + kRows * 10);
    gcc_session_destroy(s);
    return out;
  }

  static gcc_graph *model_;
  static std::string path_;
  static std::vector<uint8_t> pixels_;
  static std::vector<float> normalized_;
  gccx_bundle *b_ = nullptr;
  gccx_session *s_ = nullptr;
};
gcc_graph *ApiTest::model_ = nullptr;
std::string ApiTest::path_;
std::vector<uint8_t> ApiTest::pixels_;
std::vector<float> ApiTest::normalized_;

TEST_F(ApiTest, OutputsAreTheModelsCpuPlanAndItsSoftmax) {
  Create();
  gcc_diag d = {};
  ASSERT_EQ(gccx_set_input_images(s_, pixels_.data(), kRows, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gccx_run(s_, &d), GCC_OK) << d.msg;
  const float *logits = nullptr, *probs = nullptr;
  int64_t rows = 0, cols = 0;
  ASSERT_EQ(gccx_get_output(s_, "logits", &logits, &rows, &cols, &d), GCC_OK) << d.msg;
  EXPECT_EQ(rows, kRows);
  EXPECT_EQ(cols, 10);
  std::vector<float> want = SessionLogits();
  for (int64_t i = 0; i < kRows * 10; i++)
    EXPECT_EQ(logits[i], want[static_cast<size_t>(i)]) << "logit " << i; // bit for bit
  ASSERT_EQ(gccx_get_output(s_, "probabilities", &probs, &rows, &cols, &d), GCC_OK) << d.msg;
  for (int64_t r = 0; r < kRows; r++) {
    double mx = -INFINITY, se = 0, sum = 0;
    for (int64_t j = 0; j < 10; j++)
      mx = std::max(mx, static_cast<double>(logits[r * 10 + j]));
    for (int64_t j = 0; j < 10; j++)
      se += std::exp(static_cast<double>(logits[r * 10 + j]) - mx);
    for (int64_t j = 0; j < 10; j++) {
      double ref = std::exp(static_cast<double>(logits[r * 10 + j]) - mx) / se;
      EXPECT_NEAR(probs[r * 10 + j], ref, 1e-7 + 1e-6 * ref) << r << "," << j;
      sum += probs[r * 10 + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

TEST_F(ApiTest, FloatInputAndImageInputAgree) {
  Create();
  gcc_diag d = {};
  const float *a = nullptr, *b = nullptr;
  ASSERT_EQ(gccx_set_input_images(s_, pixels_.data(), kRows, &d), GCC_OK);
  ASSERT_EQ(gccx_run(s_, &d), GCC_OK);
  ASSERT_EQ(gccx_get_output(s_, "logits", &a, nullptr, nullptr, &d), GCC_OK);
  std::vector<float> first(a, a + kRows * 10);
  ASSERT_EQ(gccx_set_input(s_, "image", normalized_.data(), kRows, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gccx_run(s_, &d), GCC_OK);
  ASSERT_EQ(gccx_get_output(s_, "logits", &b, nullptr, nullptr, &d), GCC_OK);
  for (int64_t i = 0; i < kRows * 10; i++)
    EXPECT_EQ(first[static_cast<size_t>(i)], b[i]);
}

TEST_F(ApiTest, FewerRowsThanTheBatch) {
  Create();
  gcc_diag d = {};
  const float *full = nullptr, *part = nullptr;
  int64_t rows = 0;
  ASSERT_EQ(gccx_set_input_images(s_, pixels_.data(), kRows, &d), GCC_OK);
  ASSERT_EQ(gccx_run(s_, &d), GCC_OK);
  ASSERT_EQ(gccx_get_output(s_, "probabilities", &full, &rows, nullptr, &d), GCC_OK);
  std::vector<float> keep(full, full + kRows * 10);
  for (int64_t n : {3, 1, 3}) {
    ASSERT_EQ(gccx_set_input_images(s_, pixels_.data(), n, &d), GCC_OK);
    ASSERT_EQ(gccx_run(s_, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gccx_get_output(s_, "probabilities", &part, &rows, nullptr, &d), GCC_OK);
    EXPECT_EQ(rows, n);
    // other GEMM shapes (a GEMV for one row) may round differently
    for (int64_t i = 0; i < n * 10; i++)
      EXPECT_NEAR(part[i], keep[static_cast<size_t>(i)], 1e-6);
  }
}

TEST_F(ApiTest, MisuseIsReportedNotCrashed) {
  Create();
  gcc_diag d = {};
  const float *p = nullptr;
  EXPECT_EQ(gccx_run(s_, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(d.msg, "no input set"), nullptr) << d.msg;
  EXPECT_EQ(gccx_get_output(s_, "logits", &p, nullptr, nullptr, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(d.msg, "no results"), nullptr) << d.msg;
  EXPECT_EQ(gccx_set_input(s_, "pixels", normalized_.data(), 1, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(d.msg, "no input 'pixels' (its input is 'image')"), nullptr) << d.msg;
  EXPECT_EQ(gccx_set_input(s_, "image", normalized_.data(), 0, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(d.msg, "0 rows"), nullptr) << d.msg;
  EXPECT_EQ(gccx_set_input_images(s_, pixels_.data(), kRows + 1, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(d.msg, "1 to 7"), nullptr) << d.msg;
  EXPECT_EQ(gccx_set_input(s_, "image", nullptr, 1, &d), GCC_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(gccx_set_input_images(s_, pixels_.data(), 2, &d), GCC_OK);
  ASSERT_EQ(gccx_run(s_, &d), GCC_OK);
  EXPECT_EQ(gccx_get_output(s_, "loss", &p, nullptr, nullptr, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(d.msg, "no output 'loss' (its outputs are 'logits' and 'probabilities')"),
            nullptr)
      << d.msg;
  EXPECT_EQ(gccx_get_output(s_, "logits", nullptr, nullptr, nullptr, &d), GCC_ERR_INVALID_ARGUMENT);
  // the next input keeps the last run's results (a pipeline sets batch i + 1
  // before reading batch i), and they stay those of the rows that ran
  int64_t r = 0;
  ASSERT_EQ(gccx_get_output(s_, "logits", &p, &r, nullptr, &d), GCC_OK) << d.msg;
  std::vector<float> before(p, p + 2 * 10);
  ASSERT_EQ(gccx_set_input_images(s_, pixels_.data() + 784, 3, &d), GCC_OK);
  ASSERT_EQ(gccx_get_output(s_, "logits", &p, &r, nullptr, &d), GCC_OK) << d.msg;
  EXPECT_EQ(r, 2);
  EXPECT_EQ(std::vector<float>(p, p + 2 * 10), before);
  EXPECT_EQ(gccx_session_kernel_image(s_, nullptr, nullptr, nullptr, nullptr, &d),
            GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(d.msg, "runs on cpu"), nullptr) << d.msg;
  EXPECT_STREQ(gccx_session_device(s_), "cpu");
}

TEST_F(ApiTest, NullAndClosedHandles) {
  gcc_diag d = {};
  gccx_bundle *closed = nullptr;
  ASSERT_EQ(gccx_bundle_open(path_.c_str(), &closed, &d), GCC_OK);
  gccx_bundle_close(&closed);
  EXPECT_EQ(closed, nullptr);
  gccx_bundle_close(&closed); // twice: harmless
  gccx_bundle_close(nullptr);
  gccx_session *s = nullptr;
  gccx_session_options o = {"cpu", 1, 1};
  EXPECT_EQ(gccx_session_create(closed, &o, &s, nullptr, 0, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(d.msg, "closed or never opened"), nullptr) << d.msg;
  EXPECT_EQ(s, nullptr);
  const gcc_bundle_info *info = nullptr;
  EXPECT_EQ(gccx_bundle_info(nullptr, &info, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gccx_bundle_raw(nullptr), nullptr);
  const float *p;
  EXPECT_EQ(gccx_set_input(nullptr, "image", normalized_.data(), 1, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gccx_set_input_images(nullptr, pixels_.data(), 1, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gccx_run(nullptr, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(d.msg, "gccx_run: session handle is NULL"), nullptr) << d.msg;
  EXPECT_EQ(gccx_get_output(nullptr, "logits", &p, nullptr, nullptr, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gccx_session_device(nullptr), nullptr);
  gccx_session_destroy(&s);
  gccx_session_destroy(nullptr);
  EXPECT_EQ(gccx_bundle_open(nullptr, &closed, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gccx_bundle_open(path_.c_str(), nullptr, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gccx_run(nullptr, nullptr), GCC_ERR_INVALID_ARGUMENT); // a NULL diag is allowed
}

TEST_F(ApiTest, SessionOutlivesItsClosedBundle) {
  Create();
  gccx_bundle_close(&b_); // the session keeps the bundle alive
  gcc_diag d = {};
  const float *p = nullptr;
  ASSERT_EQ(gccx_set_input_images(s_, pixels_.data(), kRows, &d), GCC_OK);
  ASSERT_EQ(gccx_run(s_, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gccx_get_output(s_, "logits", &p, nullptr, nullptr, &d), GCC_OK);
  std::vector<float> want = SessionLogits();
  EXPECT_EQ(p[0], want[0]);
  gccx_session_destroy(&s_); // frees the bundle too (LeakSanitizer checks)
  EXPECT_EQ(s_, nullptr);
}

TEST_F(ApiTest, SessionsOnSeveralThreads) {
  // four threads create, run and destroy sessions of one bundle at once
  // (the bundle's reference count is atomic; ASan watches the frees)
  std::vector<float> want = SessionLogits();
  std::vector<int> ok(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++)
    threads.emplace_back([this, t, &ok, &want] {
      for (int round = 0; round < 3; round++) {
        gcc_diag d = {};
        gccx_session *s = nullptr;
        gccx_session_options o = {"cpu", 1, kRows};
        const float *p = nullptr;
        if (gccx_session_create(b_, &o, &s, nullptr, 0, &d) != GCC_OK ||
            gccx_set_input_images(s, pixels_.data(), kRows, &d) != GCC_OK ||
            gccx_run(s, &d) != GCC_OK ||
            gccx_get_output(s, "logits", &p, nullptr, nullptr, &d) != GCC_OK) {
          gccx_session_destroy(&s);
          return;
        }
        bool same = memcmp(p, want.data(), want.size() * sizeof(float)) == 0;
        gccx_session_destroy(&s);
        if (!same)
          return;
      }
      ok[static_cast<size_t>(t)] = 1;
    });
  for (std::thread &t : threads)
    t.join();
  for (int t = 0; t < 4; t++)
    EXPECT_EQ(ok[static_cast<size_t>(t)], 1) << "thread " << t;
}

TEST_F(ApiTest, CorruptBytesAndMissingFiles) {
  gcc_diag d = {};
  gccx_bundle *b = reinterpret_cast<gccx_bundle *>(&d);
  EXPECT_EQ(gccx_bundle_open("/nonexistent.gccx", &b, &d), GCC_ERR_IO);
  EXPECT_EQ(b, nullptr);
  const char junk[] = "GCCX but not really a bundle";
  EXPECT_EQ(gccx_bundle_open_memory(junk, sizeof junk, "junk.gccx", &b, &d), GCC_ERR_PARSE);
  EXPECT_NE(strstr(d.msg, "junk.gccx"), nullptr) << d.msg;
  EXPECT_EQ(b, nullptr);
}

TEST_F(ApiTest, Devices) {
  gcc_diag d = {};
  gccx_session_options o = {"tpu", 1, 1};
  EXPECT_EQ(gccx_session_create(b_, &o, &s_, nullptr, 0, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(d.msg, "tpu"), nullptr) << d.msg;
  char why[512];
  if (gcc_cuda_device_count(why, sizeof why) > 0)
    GTEST_SKIP() << "a CUDA GPU is present: the no-GPU device behaviour is not testable here";
  o.device = "cuda";
  EXPECT_EQ(gccx_session_create(b_, &o, &s_, nullptr, 0, &d), GCC_ERR_DEVICE);
  EXPECT_NE(strstr(d.msg, "no usable CUDA GPU"), nullptr) << d.msg;
  EXPECT_EQ(s_, nullptr);
  o.device = "auto";
  char note[768];
  ASSERT_EQ(gccx_session_create(b_, &o, &s_, note, sizeof note, &d), GCC_OK) << d.msg;
  EXPECT_STREQ(gccx_session_device(s_), "cpu");
  EXPECT_NE(strstr(note, "running on the CPU"), nullptr) << note;
}

} // namespace

// gccx_set_input_images on a 3-channel (NCHW) bundle with a different mean
// and std per channel (torchvision's CIFAR-10 values): every pixel is
// normalised with its own channel's mean and std, so the run gives the same
// logits, bit for bit, as gccx_set_input on the floats normalised here.
TEST(ApiImages, PerChannelNormalisationOfAnNchwBundle) {
  std::string model = Runfile("models/cifar_cnn.pb");
  ASSERT_FALSE(model.empty());
  gcc_graph *g = nullptr;
  gcc_diag d = {};
  ASSERT_EQ(gcc_model_load(model.c_str(), &g, &d), GCC_OK) << d.msg;
  const float mean[3] = {0.4914f, 0.4822f, 0.4465f}, sd[3] = {0.2470f, 0.2435f, 0.2616f};
  g->training.n_mean = g->training.n_std = 3;
  for (int c = 0; c < 3; c++) {
    g->training.mean[c] = mean[c];
    g->training.std[c] = sd[c];
  }
  gcc_export_options o = {};
  o.archs[0] = 90;
  o.n_archs = 1;
  std::string path = TmpPath("api_cifar.gccx");
  ASSERT_EQ(gcc_export_bundle(g, &o, path.c_str(), &d), GCC_OK) << d.msg;
  gcc_graph_free(g);
  constexpr int64_t kR = 3, kPlane = 32 * 32, kPer = 3 * kPlane;
  std::vector<uint8_t> pixels(kR * kPer);
  std::vector<float> norm(pixels.size());
  for (int64_t i = 0; i < kR * kPer; i++) {
    pixels[static_cast<size_t>(i)] = static_cast<uint8_t>((i * 29 + i / 97) % 256);
    int64_t c = (i / kPlane) % 3;
    norm[static_cast<size_t>(i)] =
        (static_cast<float>(pixels[static_cast<size_t>(i)]) / 255.0f - mean[c]) / sd[c];
  }
  gccx_bundle *b = nullptr;
  ASSERT_EQ(gccx_bundle_open(path.c_str(), &b, &d), GCC_OK) << d.msg;
  gccx_session_options so = {"cpu", 1, kR};
  gccx_session *s = nullptr;
  ASSERT_EQ(gccx_session_create(b, &so, &s, nullptr, 0, &d), GCC_OK) << d.msg;
  std::vector<float> from_floats, from_images;
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 0)
      ASSERT_EQ(gccx_set_input(s, "image", norm.data(), kR, &d), GCC_OK) << d.msg;
    else
      ASSERT_EQ(gccx_set_input_images(s, pixels.data(), kR, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gccx_run(s, &d), GCC_OK) << d.msg;
    const float *logits = nullptr;
    int64_t rows = 0, cols = 0;
    ASSERT_EQ(gccx_get_output(s, "logits", &logits, &rows, &cols, &d), GCC_OK) << d.msg;
    ASSERT_EQ(rows, kR);
    (pass == 0 ? from_floats : from_images).assign(logits, logits + rows * cols);
  }
  EXPECT_EQ(from_images, from_floats); // bit for bit
  gccx_session_destroy(&s);
  gccx_bundle_close(&b);
}

// ---- a tensor bundle: a model whose output is not classifier logits --------------------------

namespace {

// The MNIST bundle is a classifier: two outputs, logits and probabilities,
// in a version 1 bundle, as before tensor bundles existed.
TEST_F(ApiTest, AClassifierBundleListsLogitsAndProbabilities) {
  gcc_diag d = {};
  int n = 0;
  ASSERT_EQ(gccx_bundle_output_count(b_, &n, &d), GCC_OK) << d.msg;
  EXPECT_EQ(n, 2);
  const gcc_bundle_tensor *t = nullptr;
  ASSERT_EQ(gccx_bundle_output(b_, 1, &t, &d), GCC_OK) << d.msg;
  EXPECT_STREQ(t->name, "probabilities");
  ASSERT_EQ(t->shape.ndim, 2);
  EXPECT_EQ(t->shape.dims[0], -1);
  EXPECT_EQ(t->shape.dims[1], 10);
  const gcc_bundle_info *info = nullptr;
  ASSERT_EQ(gccx_bundle_info(b_, &info, &d), GCC_OK) << d.msg;
  EXPECT_EQ(info->kind, GCC_BUNDLE_CLASSIFIER);
  EXPECT_EQ(info->format_version, 1u);
  EXPECT_EQ(gccx_bundle_output(b_, 2, &t, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("the bundle has 2 (0 to 1)"), std::string::npos) << d.msg;
  EXPECT_EQ(gccx_bundle_output_count(nullptr, &n, &d), GCC_ERR_INVALID_ARGUMENT);
}

constexpr int64_t kTensorRows = 5;

TEST(ApiTensorBundle, OneOutputAsTheModelComputesIt) {
  std::vector<float> w, b, gamma, beta;
  std::vector<uint8_t> onnx = TensorModel(&w, &b, &gamma, &beta);
  std::vector<float> x = TensorInput(kTensorRows);
  std::vector<double> want, bound;
  TensorReference(x, w, b, gamma, beta, kTensorRows, &want, &bound);

  gcc_diag d = {};
  gccx_bundle *bundle = nullptr;
  ASSERT_EQ(gccx_bundle_open_memory(onnx.data(), onnx.size(), "tensor.onnx", &bundle, &d), GCC_OK)
      << d.msg;
  const gcc_bundle_info *info = nullptr;
  ASSERT_EQ(gccx_bundle_info(bundle, &info, &d), GCC_OK) << d.msg;
  EXPECT_EQ(info->kind, GCC_BUNDLE_TENSOR);
  EXPECT_EQ(info->format_version, 3u);
  int n = 0;
  ASSERT_EQ(gccx_bundle_output_count(bundle, &n, &d), GCC_OK) << d.msg;
  ASSERT_EQ(n, 1);
  const gcc_bundle_tensor *out = nullptr;
  ASSERT_EQ(gccx_bundle_output(bundle, 0, &out, &d), GCC_OK) << d.msg;
  EXPECT_STREQ(out->name, "enc/y");
  EXPECT_EQ(out->dtype, GCC_DT_FLOAT32);
  ASSERT_EQ(out->shape.ndim, 3);
  EXPECT_EQ(out->shape.dims[0], -1);
  EXPECT_EQ(out->shape.dims[1], kT);
  EXPECT_EQ(out->shape.dims[2], kC);
  EXPECT_EQ(gccx_bundle_output(bundle, 1, &out, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("the bundle has 1"), std::string::npos) << d.msg;

  gccx_session_options so = {"cpu", 1, kTensorRows};
  gccx_session *s = nullptr;
  ASSERT_EQ(gccx_session_create(bundle, &so, &s, nullptr, 0, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gccx_set_input(s, "x", x.data(), kTensorRows, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gccx_run(s, &d), GCC_OK) << d.msg;
  const float *y = nullptr;
  int64_t rows = 0, cols = 0;
  ASSERT_EQ(gccx_get_output(s, "enc/y", &y, &rows, &cols, &d), GCC_OK) << d.msg;
  ASSERT_EQ(rows, kTensorRows);
  ASSERT_EQ(cols, kT * kC); // values per row: T x C, row-major
  std::vector<float> api(y, y + rows * cols);
  for (size_t i = 0; i < want.size(); i++)
    EXPECT_NEAR(api[i], want[i], bound[i]) << "value " << i;
  // no softmax, no logits: a classifier's output names are refused by name
  EXPECT_EQ(gccx_get_output(s, "probabilities", &y, &rows, &cols, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("its output is 'enc/y'"), std::string::npos) << d.msg;
  gccx_session_destroy(&s);
  gccx_bundle_close(&bundle);

  // gcc-run on the ONNX file: batches of 2, 2 and 1 rows stitched into one
  // (5, T, C) array, in --output FILE.npy and --save-outputs DIR/enc_y.npy
  std::string model = TmpPath("tensor.onnx"), in = TmpPath("tensor_x.npy");
  ASSERT_TRUE(WriteFile(model, onnx.data(), onnx.size()));
  uint8_t *npy = nullptr;
  size_t npy_size = 0;
  gcc_shape xs = {3, {kTensorRows, kT, kC}};
  ASSERT_EQ(gcc_npy_encode_f32(&xs, x.data(), &npy, &npy_size, &d), GCC_OK) << d.msg;
  ASSERT_TRUE(WriteFile(in, npy, npy_size));
  free(npy);
  std::string ynpy = TmpPath("tensor_y.npy"), dir = TmpPath("tensor_outs");
  ProcResult r = RunRunfile("cli/gcc-run", {model, "--input", in, "--device", "cpu", "--batch-size",
                                            "2", "--output", ynpy, "--save-outputs", dir});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string &path : {ynpy, dir + "/enc_y.npy"}) {
    gcc_shape ys = {};
    float *got = nullptr;
    ASSERT_EQ(gcc_npy_read_f32(path.c_str(), &ys, &got, &d), GCC_OK) << d.msg;
    ASSERT_EQ(ys.ndim, 3) << path;
    EXPECT_EQ(ys.dims[0], kTensorRows);
    EXPECT_EQ(ys.dims[1], kT);
    EXPECT_EQ(ys.dims[2], kC);
    for (size_t i = 0; i < want.size(); i++)
      EXPECT_NEAR(got[i], want[i], bound[i]) << path << " value " << i;
    free(got);
  }
  // classifier-only requests name their flag (exit 2: a bad command line)
  struct Case {
    std::vector<std::string> extra;
    std::string says;
  } cases[] = {
      {{"--output", ynpy, "--labels", TmpPath("labels.idx")}, "--labels: "},
      {{"--output", TmpPath("p.csv")}, "it is written as a float32 .npy (--output FILE.npy)"},
      {{}, "give --output FILE.npy and/or --save-outputs"},
  };
  for (const Case &c : cases) {
    std::vector<std::string> args = {model, "--input", in, "--device", "cpu"};
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    r = RunRunfile("cli/gcc-run", args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("'enc/y' [N, 3, 4] is a tensor, not classifier logits"), std::string::npos)
        << r.err;
  }
  EXPECT_FALSE(Exists(TmpPath("p.csv")));
  // --info says what it is
  r = RunRunfile("cli/gcc-run", {model, "--info"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("format version 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("output enc/y float32 [N, 3, 4]\nkind tensor"), std::string::npos) << r.out;
}

// A version 3 manifest must say which kind it is, and list the outputs of
// that kind; the header's version decides what is read (a version 2 header
// is a classifier's, whatever the manifest says).
TEST(ApiTensorBundle, TheManifestsKindAndOutputsAreChecked) {
  std::vector<float> w, b, gamma, beta;
  std::vector<uint8_t> onnx = TensorModel(&w, &b, &gamma, &beta);
  gcc_diag d = {};
  gcc_bundle *good = nullptr;
  ASSERT_EQ(gcc_bundle_open_bytes(onnx.data(), onnx.size(), "tensor.onnx", &good, &d), GCC_OK)
      << d.msg;
  std::vector<std::string> names = {"manifest", "graph", "weights", "plan.cpu"};
  std::vector<std::string> data;
  for (const std::string &n : names) {
    const void *p = nullptr;
    size_t size = 0;
    ASSERT_EQ(gcc_bundle_section(good, n.c_str(), &p, &size, &d), GCC_OK) << d.msg;
    data.emplace_back(static_cast<const char *>(p), size);
  }
  gcc_bundle_free(good);
  // the manifest with `from` replaced by `to`, packed with header `version`
  auto parse = [&](const std::string &from, const std::string &to, uint32_t version,
                   std::string *msg) {
    std::string m = data[0];
    size_t at = m.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos)
      m.replace(at, from.size(), to);
    std::vector<gcc_bundle_section_ref> refs = {{"manifest", m.data(), m.size()}};
    for (size_t i = 1; i < names.size(); i++)
      refs.push_back({names[i].c_str(), data[i].data(), data[i].size()});
    uint8_t *bytes = nullptr;
    size_t size = 0;
    gcc_diag pd = {};
    EXPECT_EQ(gcc_bundle_pack_version(refs.data(), static_cast<int>(refs.size()), version, &bytes,
                                      &size, &pd),
              GCC_OK);
    gcc_bundle *out = nullptr;
    gcc_status st = gcc_bundle_parse(bytes, size, "forged", &out, &pd);
    free(bytes);
    gcc_bundle_free(out);
    *msg = pd.msg;
    return st;
  };
  std::string msg;
  EXPECT_EQ(parse("\"kind\": \"tensor\"", "\"kind\": \"tensor\"", 3, &msg), GCC_OK) << msg;
  EXPECT_EQ(parse("\"kind\": \"tensor\"", "\"kind\": \"logits\"", 3, &msg), GCC_ERR_PARSE);
  EXPECT_NE(msg.find("needs \"kind\": \"classifier\" or \"tensor\""), std::string::npos) << msg;
  EXPECT_EQ(parse("\"kind\": \"tensor\"", "\"kind\": \"classifier\"", 3, &msg), GCC_ERR_PARSE);
  EXPECT_NE(msg.find("'outputs' must list logits and probabilities"), std::string::npos) << msg;
  EXPECT_EQ(parse("\"format_version\": 3", "\"format_version\": 2", 2, &msg), GCC_ERR_PARSE);
  EXPECT_NE(msg.find("'outputs' must list logits and probabilities"), std::string::npos) << msg;
  std::string shape = "\"shape\": [\n        -1,\n        3,\n        4\n      ]";
  size_t out_at = data[0].find("\"outputs\"");
  ASSERT_NE(out_at, std::string::npos);
  ASSERT_NE(data[0].find(shape, out_at), std::string::npos) << data[0];
  data[0].replace(data[0].find(shape, out_at), shape.size(),
                  "\"shape\": [\n        2,\n        3,\n        4\n      ]");
  EXPECT_EQ(parse("\"kind\": \"tensor\"", "\"kind\": \"tensor\"", 3, &msg), GCC_ERR_PARSE);
  EXPECT_NE(msg.find("a tensor bundle's output needs the batch (-1) as dim 0"), std::string::npos)
      << msg;
}

// Outputs a bundle cannot return are refused, naming the output: one whose
// dim 0 is not the batch (it cannot be cut into rows; both shapes named),
// one that is not float32, and one that is the input itself.
TEST(ApiTensorBundle, OutputsABundleCannotReturnAreRefused) {
  OnnxModel m(13);
  m.Input("x", {kBatch, kT, kC});
  m.InitI64("shape", {3}, {1, -1, kC});
  m.Node("Reshape", {"x", "shape"}, {"y"});
  m.Output("y");
  std::vector<uint8_t> onnx = m.Bytes();
  gcc_diag d = {};
  gccx_bundle *bundle = nullptr;
  EXPECT_EQ(gccx_bundle_open_memory(onnx.data(), onnx.size(), "flat.onnx", &bundle, &d),
            GCC_ERR_INVALID_GRAPH);
  EXPECT_EQ(bundle, nullptr);
  std::string msg = d.msg;
  EXPECT_NE(msg.find("flat.onnx: output 'y' has the shape [1, 3, 4] at batch 1 and [1, 6, 4] at "
                     "batch 2"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("batch as the output's dim 0"), std::string::npos) << msg;

  OnnxModel a(13);
  a.Input("x", {kBatch, kT, kC});
  a.Node("ArgMax", {"x"}, {"i"}, {a.Int("axis", 2)});
  a.Output("i");
  onnx = a.Bytes();
  EXPECT_EQ(gccx_bundle_open_memory(onnx.data(), onnx.size(), "argmax.onnx", &bundle, &d),
            GCC_ERR_INVALID_GRAPH);
  EXPECT_NE(std::string(d.msg).find("argmax.onnx: output 'i' is int64; a bundle (and gcc-run) "
                                    "returns float32 outputs"),
            std::string::npos)
      << d.msg;

  gcc_graph *g = gcc_graph_new("io", "io.pb");
  ASSERT_NE(g, nullptr);
  gcc_shape xs = {3, {-1, kT, kC}};
  int x = -1;
  ASSERT_EQ(gcc_graph_add_value(g, "x", GCC_DT_FLOAT32, &xs, GCC_VALUE_INPUT, nullptr, 0, &x, &d),
            GCC_OK)
      << d.msg;
  ASSERT_EQ(gcc_graph_add_input(g, x), GCC_OK);
  ASSERT_EQ(gcc_graph_add_output(g, x), GCC_OK);
  gcc_graph *ig = nullptr;
  EXPECT_EQ(gcc_inference_graph(g, &ig, &d), GCC_ERR_INVALID_GRAPH);
  EXPECT_EQ(ig, nullptr);
  EXPECT_NE(std::string(d.msg).find("io.pb: output 'x' is the input itself"), std::string::npos)
      << d.msg;
  gcc_graph_free(g);
}

} // namespace
