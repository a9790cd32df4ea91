// export_precision_test: bundles exported with --export-precision bf16 and
// fp16 (deploy/bundle.h "Format versions", issue 19), for the MNIST MLP and
// the MNIST CNN:
//  - the weights section takes about half the bytes of the float32 bundle's
//    (measured), every GEMM / convolution weight and bias is stored in 16
//    bits, and the reader gives back exactly the rounded float32 weights;
//  - the C API on the CPU (what gcc-run runs) computes exactly the logits of
//    the trained model's own evaluation plan at that precision (a training
//    session's, gcc_session_eval_batch), bit for bit; they are 16-bit
//    values that differ from the float32 bundle's, and most equal an
//    independent float64 reference with torch.autocast's roundings (all of
//    them in bfloat16);
//  - the bundle's kernels for sm_90, loaded from its cubin into a CUDA plan
//    on the host backend (generated kernels host-emulated through
//    tests/cuda_host_shim.h, cuBLASLt as column-major OpenBLAS, cuDNN as the
//    CPU kernels), give the CPU's outputs bit for bit, and the CUDA C the
//    bundle carries is the source such a plan generates;
//  - every 16-bit kernel of the bundle compiled for sm_80 and sm_90 (its
//    cubins), and its PTX passes ptxas for both;
//  - float32 bundles keep format version 1 and load as before; corrupt,
//    truncated and inconsistent 16-bit bundles are refused with a message
//    naming the file and what is wrong; a float16 export refuses weights
//    that float16 cannot hold.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "codegen/emit.h"
#include "graph/builder.h"
#include "graph/ops.h"
#include "codegen/nvrtc.h"
#include "deploy/bundle.h"
#include "deploy/bundle_internal.h"
#include "deploy/export.h"
#include "deploy/gcc_api.h"
#include "deploy/model_bundle.h"
#include "graph/graph.pb-c.h"
#include "graph/half.h"
#include "graph/loader.h"
#include "runtime/device.h"
#include "runtime/plan.h"
#include "runtime/session.h"
}
#include "tests/kernel_emulation.h"
#include "tests/run_plans.h"
#include "tests/testutil.h"

namespace {

using namespace gcc_test; // tests/testutil.h, tests/run_plans.h

constexpr int64_t kRows = 7; // the one exported batch size
const int kPrecisions[3] = {GCC_PRECISION_FP32, GCC_PRECISION_BF16, GCC_PRECISION_FP16};
const char *const kModels[2] = {"mnist_mlp", "mnist_cnn"};
const char *const kSectionNames[] = {"manifest",       "graph",         "weights",
                                     "plan.cpu",       "plan.sm_80.b7", "kernels.sm_80.b7",
                                     "cubin.sm_80.b7", "plan.sm_90.b7", "kernels.sm_90.b7",
                                     "cubin.sm_90.b7", "ptx.b7",        "source.b7"};

float Round16(float x, int precision) {
  return precision == GCC_PRECISION_BF16 ? gcc_round_bf16(x) : gcc_round_f16(x);
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Both models exported once at each precision: cubins for sm_80 and sm_90
// at batch size kRows.
class ExportPrecision : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    for (int m = 0; m < 2; m++) {
      std::string file = Runfile(std::string("models/") + kModels[m] + ".pb");
      ASSERT_FALSE(file.empty());
      gcc_diag d = {};
      ASSERT_EQ(gcc_model_load(file.c_str(), &models_[m], &d), GCC_OK) << d.msg;
      for (int p : kPrecisions) {
        gcc_export_options o = {};
        o.archs[0] = 80;
        o.archs[1] = 90;
        o.n_archs = 2;
        o.batch_sizes[0] = kRows;
        o.n_batch_sizes = 1;
        o.created = 1795000000;
        o.precision = p;
        std::string path = TmpPath(std::string(kModels[m]) + "." + gcc_precision_name(p) + ".gccx");
        ASSERT_EQ(gcc_export_bundle(models_[m], &o, path.c_str(), &d), GCC_OK)
            << kModels[m] << " " << gcc_precision_name(p) << ": " << d.msg;
        paths_[{m, p}] = path;
      }
    }
  }
  static void TearDownTestSuite() {
    for (gcc_graph *&g : models_) {
      gcc_graph_free(g);
      g = nullptr;
    }
  }

  static gcc_bundle *Read(int m, int p) {
    gcc_diag d = {};
    gcc_bundle *b = nullptr;
    EXPECT_EQ(gcc_bundle_read(paths_[{m, p}].c_str(), &b, &d), GCC_OK) << d.msg;
    return b;
  }
  static std::string Section(const gcc_bundle *b, const char *name) {
    const void *p = nullptr;
    size_t n = 0;
    gcc_diag d = {};
    EXPECT_EQ(gcc_bundle_section(b, name, &p, &n, &d), GCC_OK) << d.msg;
    return p ? std::string(static_cast<const char *>(p), n) : std::string();
  }
  // kRows images with every pixel value, normalized as the trainer's data
  // loader does (gcc_api.h gccx_set_input_images).
  static std::vector<float> Input(int m) {
    const gcc_graph *g = models_[m];
    std::vector<float> x(static_cast<size_t>(kRows * 784));
    std::mt19937 rng(static_cast<uint32_t>(17 + m));
    for (float &v : x)
      v = (static_cast<float>(rng() % 256) / 255.0f - g->training.mean[0]) / g->training.std[0];
    return x;
  }
  // The logits of a training session's evaluation plan at `precision`.
  static std::vector<float> SessionLogits(int m, int precision) {
    const gcc_graph *g = models_[m];
    gcc_session_options so = {};
    so.threads = 1;
    so.opt = g->training.opt;
    so.precision = precision;
    gcc_session *s = nullptr;
    gcc_diag d = {};
    EXPECT_EQ(gcc_session_create(g, &so, &s, &d), GCC_OK) << d.msg;
    if (!s)
      return {};
    std::vector<float> x = Input(m);
    std::vector<int64_t> labels(kRows, 0);
    float loss;
    int64_t correct;
    const gcc_tensor *pred = nullptr;
    EXPECT_EQ(gcc_session_eval_batch(s, x.data(), labels.data(), kRows, &loss, &correct, &pred, &d),
              GCC_OK)
        << d.msg;
    std::vector<float> out;
    if (pred) {
      const float *p = static_cast<const float *>(pred->data);
      out.assign(p, p + kRows * 10);
    }
    gcc_session_destroy(s);
    return out;
  }
  // The C API on the CPU (gcc-run's path): logits and probabilities.
  static void ApiOutputs(int m, int p, std::vector<float> *logits, std::vector<float> *probs) {
    gcc_diag d = {};
    gccx_bundle *b = nullptr;
    gccx_session *s = nullptr;
    ASSERT_EQ(gccx_bundle_open(paths_[{m, p}].c_str(), &b, &d), GCC_OK) << d.msg;
    gccx_session_options o = {"cpu", 1, kRows};
    ASSERT_EQ(gccx_session_create(b, &o, &s, nullptr, 0, &d), GCC_OK) << d.msg;
    std::vector<float> x = Input(m);
    const gcc_bundle_info *info = nullptr;
    ASSERT_EQ(gccx_bundle_info(b, &info, &d), GCC_OK);
    ASSERT_EQ(gccx_set_input(s, info->input.name, x.data(), kRows, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gccx_run(s, &d), GCC_OK) << d.msg;
    const float *l = nullptr, *q = nullptr;
    int64_t rows = 0, cols = 0;
    ASSERT_EQ(gccx_get_output(s, "logits", &l, &rows, &cols, &d), GCC_OK) << d.msg;
    ASSERT_EQ(rows * cols, kRows * 10);
    logits->assign(l, l + rows * cols);
    ASSERT_EQ(gccx_get_output(s, "probabilities", &q, &rows, &cols, &d), GCC_OK) << d.msg;
    probs->assign(q, q + rows * cols);
    gccx_session_destroy(&s);
    gccx_bundle_close(&b);
  }

  static gcc_graph *models_[2];
  static std::map<std::pair<int, int>, std::string> paths_;
};
gcc_graph *ExportPrecision::models_[2];
std::map<std::pair<int, int>, std::string> ExportPrecision::paths_;

// ---- the weights -----------------------------------------------------------

TEST_F(ExportPrecision, WeightsTakeHalfTheBytesAndReadBackAsTheRoundedWeights) {
  for (int m = 0; m < 2; m++) {
    gcc_bundle *b32 = Read(m, GCC_PRECISION_FP32);
    ASSERT_NE(b32, nullptr);
    const gcc_bundle_info *i32 = gcc_bundle_get_info(b32);
    EXPECT_EQ(i32->format_version, 1u);
    EXPECT_EQ(i32->precision, GCC_PRECISION_FP32);
    EXPECT_EQ(i32->n_weights_16bit, 0);
    size_t w32 = Section(b32, "weights").size();
    for (int p : {GCC_PRECISION_BF16, GCC_PRECISION_FP16}) {
      SCOPED_TRACE(std::string(kModels[m]) + " " + gcc_precision_name(p));
      gcc_bundle *b = Read(m, p);
      ASSERT_NE(b, nullptr);
      const gcc_bundle_info *i = gcc_bundle_get_info(b);
      EXPECT_EQ(i->format_version, 2u);
      EXPECT_EQ(ReadBytes(paths_[{m, p}])[8], 2); // the header's version
      EXPECT_EQ(i->precision, p);
      // every initializer of these models is a GEMM / convolution weight or bias
      EXPECT_EQ(i->n_weight_tensors, m == 0 ? 10 : 10);
      EXPECT_EQ(i->n_weights_16bit, i->n_weight_tensors);
      EXPECT_EQ(i->weight_bytes_fp32, i32->weight_bytes);
      EXPECT_EQ(2 * i->weight_bytes, i32->weight_bytes);
      size_t w16 = Section(b, "weights").size();
      double ratio = static_cast<double>(w16) / static_cast<double>(w32);
      printf("%s %s: weights section %zu bytes, float32 %zu bytes (%.4f); file %zu vs %zu\n",
             kModels[m], gcc_precision_name(p), w16, w32, ratio, ReadBytes(paths_[{m, p}]).size(),
             ReadBytes(paths_[{m, GCC_PRECISION_FP32}]).size());
      EXPECT_GE(ratio, 0.5);
      EXPECT_LE(ratio, 0.52); // names and dims are the rest
      // the reader's weights are the model's rounded to the 16-bit dtype
      const gcc_graph *g = gcc_bundle_graph(b);
      int checked = 0, moved = 0;
      for (int v = 0; v < g->n_values; v++) {
        if (!g->values[v].data)
          continue;
        int mv = gcc_graph_find(models_[m], g->values[v].name);
        ASSERT_GE(mv, 0);
        ASSERT_EQ(g->values[v].dtype, GCC_DT_FLOAT32) << "readers see float32 weights";
        const float *got = static_cast<const float *>(g->values[v].data);
        const float *orig = static_cast<const float *>(models_[m]->values[mv].data);
        int64_t n = gcc_shape_numel(&g->values[v].shape, nullptr);
        for (int64_t k = 0; k < n; k++) {
          ASSERT_EQ(Bits(got[k]), Bits(Round16(orig[k], p)))
              << g->values[v].name << "[" << k << "]";
          moved += got[k] != orig[k];
        }
        checked++;
      }
      EXPECT_EQ(checked, i->n_weight_tensors);
      EXPECT_GT(moved, 1000) << "the weights were not rounded";
      gcc_bundle_free(b);
    }
    gcc_bundle_free(b32);
  }
}

// ---- an independent reference of the 16-bit plan -------------------------------

// The forward pass of the exported model in float64 with the 16-bit plan's
// roundings, as torch.autocast places them: the network's input, the
// weights and biases of every GEMM and convolution, and every GEMM /
// convolution output rounded to nearest even to the 16-bit dtype (computed
// here with graph/half.h's rounding of the float32 nearest to the float64
// sum; a convolution's bias added after that rounding, and the sum rounded
// again); ReLU, max pooling and flatten on the rounded values. The plan sums
// in float32 in an order of its own, so a value whose sum falls near a
// 16-bit rounding boundary may round to the neighbouring 16-bit value, and
// that difference propagates; a worst-case interval of it (precision_test's
// ForwardInterval) is thousands of units wide after five layers of 784 to
// 64 features, so the test counts exact agreement instead.
struct Reference {
  std::vector<double> s;
  int64_t c = 0, h = 0, w = 0; // per row: c x h x w (features: h = w = 1)
};

// y = W x + b per row (W: out x (c h w)), or a convolution (W: out x c x k
// x k, stride 1, no padding) when `conv`, whose result is rounded before b
// is added and rounded again (a GPU's cudnnAddTensor, and the CPU plan's);
// W and b already rounded.
Reference Layer(const Reference &x, int64_t rows, const std::vector<double> &W,
                const std::vector<double> &b, int64_t out, bool conv, int64_t k, int precision) {
  Reference y;
  y.c = out;
  y.h = conv ? x.h - k + 1 : 1;
  y.w = conv ? x.w - k + 1 : 1;
  int64_t per_in = x.c * x.h * x.w, per_out = y.c * y.h * y.w;
  y.s.resize(static_cast<size_t>(rows * per_out));
  for (int64_t r = 0; r < rows; r++)
    for (int64_t o = 0; o < out; o++)
      for (int64_t i = 0; i < y.h; i++)
        for (int64_t j = 0; j < y.w; j++) {
          double sum = conv ? 0.0 : b[static_cast<size_t>(o)];
          if (conv) {
            for (int64_t ci = 0; ci < x.c; ci++)
              for (int64_t a = 0; a < k; a++)
                for (int64_t bb = 0; bb < k; bb++)
                  sum += W[static_cast<size_t>(((o * x.c + ci) * k + a) * k + bb)] *
                         x.s[static_cast<size_t>(r * per_in + (ci * x.h + i + a) * x.w + j + bb)];
          } else {
            for (int64_t q = 0; q < per_in; q++)
              sum +=
                  W[static_cast<size_t>(o * per_in + q)] * x.s[static_cast<size_t>(r * per_in + q)];
          }
          if (conv) // the bias added to the 16-bit result, rounded again (as cuDNN's)
            sum = Round16(static_cast<float>(sum), precision) + b[static_cast<size_t>(o)];
          y.s[static_cast<size_t>(r * per_out + (o * y.h + i) * y.w + j)] =
              Round16(static_cast<float>(sum), precision);
        }
  return y;
}

void Relu(Reference *x) {
  for (double &e : x->s)
    e = e > 0 ? e : 0;
}

Reference MaxPool2(const Reference &x, int64_t rows) {
  Reference y;
  y.c = x.c;
  y.h = x.h / 2;
  y.w = x.w / 2;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < x.c; c++)
      for (int64_t i = 0; i < y.h; i++)
        for (int64_t j = 0; j < y.w; j++) {
          double s = -INFINITY;
          for (int64_t a = 0; a < 2; a++)
            for (int64_t bb = 0; bb < 2; bb++)
              s = std::fmax(
                  s,
                  x.s[static_cast<size_t>(((r * x.c + c) * x.h + 2 * i + a) * x.w + 2 * j + bb)]);
          y.s.push_back(s);
        }
  return y;
}

// The logits of model m (kModels) at `precision` on x, from the model's
// float32 weights.
Reference ReferenceLogits(const gcc_graph *g, int m, const std::vector<float> &x, int precision) {
  auto param = [&](const std::string &name) {
    int v = gcc_graph_find(g, name.c_str());
    EXPECT_GE(v, 0) << name;
    const float *f = static_cast<const float *>(g->values[v].data);
    std::vector<double> out(static_cast<size_t>(gcc_shape_numel(&g->values[v].shape, nullptr)));
    for (size_t i = 0; i < out.size(); i++)
      out[i] = Round16(f[i], precision);
    return out;
  };
  auto outs = [&](const std::string &name) {
    return g->values[gcc_graph_find(g, name.c_str())].shape.dims[0];
  };
  Reference a;
  a.c = m == 0 ? 784 : 1;
  a.h = m == 0 ? 1 : 28;
  a.w = m == 0 ? 1 : 28;
  for (float f : x)
    a.s.push_back(Round16(f, precision)); // the input's cast
  if (m == 1) {
    a = Layer(a, kRows, param("conv1.weight"), param("conv1.bias"), 6, true, 5, precision);
    Relu(&a);
    a = MaxPool2(a, kRows);
    a = Layer(a, kRows, param("conv2.weight"), param("conv2.bias"), 16, true, 5, precision);
    Relu(&a);
    a = MaxPool2(a, kRows);
    a.c *= a.h * a.w; // flatten
    a.h = a.w = 1;
  }
  int n_fc = m == 0 ? 5 : 3;
  for (int l = 1; l <= n_fc; l++) {
    std::string fc = "fc" + std::to_string(l);
    a = Layer(a, kRows, param(fc + ".weight"), param(fc + ".bias"), outs(fc + ".weight"), false, 0,
              precision);
    if (l < n_fc)
      Relu(&a);
  }
  return a;
}

// ---- outputs -----------------------------------------------------------------

TEST_F(ExportPrecision, CpuOutputsAreTheModelsOwnEvaluationPlanBitForBit) {
  for (int m = 0; m < 2; m++) {
    std::vector<float> l32, p32;
    ApiOutputs(m, GCC_PRECISION_FP32, &l32, &p32);
    for (int p : {GCC_PRECISION_BF16, GCC_PRECISION_FP16}) {
      SCOPED_TRACE(std::string(kModels[m]) + " " + gcc_precision_name(p));
      std::vector<float> logits, probs;
      ApiOutputs(m, p, &logits, &probs);
      std::vector<float> want = SessionLogits(m, p);
      ASSERT_EQ(want.size(), logits.size());
      Reference ref = ReferenceLogits(models_[m], m, Input(m), p);
      ASSERT_EQ(ref.s.size(), want.size());
      int differ32 = 0, exact = 0;
      double farthest = 0;
      for (size_t k = 0; k < want.size(); k++) {
        EXPECT_EQ(Bits(logits[k]), Bits(want[k])) << "logit " << k; // bit for bit
        // the last GEMM stores its result in 16 bits: every logit is a 16-bit value
        EXPECT_EQ(Bits(logits[k]), Bits(Round16(logits[k], p))) << "logit " << k;
        differ32 += logits[k] != l32[k];
        // the float64 reference with the same roundings
        double ulp = std::ldexp(1.0, std::ilogb(std::fmax(std::fabs(ref.s[k]), 0x1p-14)) -
                                         (p == GCC_PRECISION_BF16 ? 7 : 10));
        farthest = std::fmax(farthest, std::fabs(logits[k] - ref.s[k]) / ulp);
        exact += logits[k] == ref.s[k];
      }
      printf("%s %s: %d of %zu logits equal the float64 reference's, the others within %g "
             "units in the last place\n",
             kModels[m], gcc_precision_name(p), exact, want.size(), farthest);
      EXPECT_GE(exact, static_cast<int>(want.size()) * 3 / 4);
      EXPECT_LE(farthest, 8.0);
      EXPECT_GT(differ32, static_cast<int>(want.size()) / 2) << "no 16-bit computation seen";
      for (int64_t r = 0; r < kRows; r++) { // float32 softmax of those logits
        double sum = 0;
        for (int j = 0; j < 10; j++)
          sum += probs[static_cast<size_t>(r * 10 + j)];
        EXPECT_NEAR(sum, 1.0, 1e-5);
      }
    }
  }
}

// The bundle's sm_90 cubin as the kernel image of a CUDA plan on the host
// backend (as a gccx session on a GPU loads it); its outputs.
std::string RunOnHostBackend(const gcc_bundle *b, const std::vector<float> &x,
                             std::vector<std::vector<float>> *outs) {
  const gcc_bundle_info *info = gcc_bundle_get_info(b);
  const gcc_graph *g = gcc_bundle_graph(b);
  gcc_diag d{};
  gcc_kernel_image img;
  const void *bytes = nullptr;
  size_t size = 0;
  const char *launches = nullptr;
  if (gcc_bundle_kernel_image(b, 90, kRows, "host-emulated cuda:0", &img, &bytes, &size, &launches,
                              &d) != GCC_OK)
    return d.msg;
  if (img.kind != GCC_IMAGE_CUBIN || img.arch != 90)
    return "not the sm_90 cubin";
  gcc_device_info h100;
  if (gcc_device_info_from_arch("sm_90", 0, &h100, &d) != GCC_OK)
    return d.msg;
  gcc_nvrtc_output image{};
  image.cubin = const_cast<void *>(bytes);
  image.cubin_size = size;
  gcc_options o{};
  o.mode = GCC_MODE_EVAL;
  o.batch_size = kRows;
  o.precision = info->precision;
  o.device = GCC_DEV_CUDA(0);
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  FILE *quiet = fopen("/dev/null", "w");
  o.warn_file = quiet;
  gcc_plan_config cfg{};
  cfg.threads = 1;
  cfg.readback_ring = 1;
  cfg.device = &SharedHostBackend()->be;
  cfg.sm = 90;
  cfg.sm_count = h100.units; // the export's: grids are part of the kernels
  cfg.image = &image;
  cfg.image_arch = img.arch;
  gcc_plan *p = nullptr;
  gcc_host_test::ModelWeights weights(g, SharedHostBackend());
  gcc_status s = gcc_plan_compile(g, &o, &cfg, gcc_host_test::ModelWeights::Bind, &weights, &p, &d);
  if (quiet)
    fclose(quiet);
  if (s != GCC_OK)
    return std::string("compile: ") + d.msg;
  std::string err;
  if (gcc_plan_bind_input(p, info->input.name, x.data(), &d) != GCC_OK)
    err = d.msg;
  if (err.empty() && gcc_plan_run(p, 0, &d) != GCC_OK)
    err = std::string("run: ") + d.msg;
  outs->clear();
  for (int k = 0; k < 2 && err.empty(); k++) {
    const gcc_tensor *t = gcc_plan_host_tensor(p, info->outputs[k].name, &d);
    if (!t || t->dtype != GCC_DT_FLOAT32) {
      err = std::string("output ") + info->outputs[k].name + " missing or not float32";
      break;
    }
    const float *f = static_cast<const float *>(t->data);
    outs->emplace_back(f, f + t->numel);
  }
  gcc_plan_free(p);
  return err;
}

TEST_F(ExportPrecision, HostEmulatedBundleKernelsMatchTheCpuBitForBit) {
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  gcc_host_test::HostBackend *hb = SharedHostBackend();
  for (int m = 0; m < 2; m++)
    for (int p : {GCC_PRECISION_BF16, GCC_PRECISION_FP16}) {
      SCOPED_TRACE(std::string(kModels[m]) + " " + gcc_precision_name(p));
      gcc_bundle *b = Read(m, p);
      ASSERT_NE(b, nullptr);
      // the CUDA C the bundle carries is what a plan of its graph generates
      gcc_device_info devs[2];
      gcc_device_info_cpu(&devs[0]);
      gcc_diag d{};
      ASSERT_EQ(gcc_device_info_from_arch("sm_90", 0, &devs[1], &d), GCC_OK);
      gcc_graph *cg = nullptr;
      char *report = nullptr;
      ASSERT_EQ(gcc_bundle_compile_for(gcc_bundle_graph(b), devs, 2, GCC_DEV_CUDA(0), kRows, p, &cg,
                                       &report, &d),
                GCC_OK)
          << d.msg;
      gcc_kernel_set ks{};
      ASSERT_EQ(gcc_codegen_emit(cg, GCC_DEV_CUDA(0), devs[1].units, &ks, &d), GCC_OK) << d.msg;
      EXPECT_EQ(std::string(ks.source), Section(b, "source.b7"));
      std::string rep = report, shipped = Section(b, "plan.sm_90.b7"); // but the model's name
      EXPECT_EQ(rep.substr(rep.find("\"mode\"")), shipped.substr(shipped.find("\"mode\"")));
      gcc_kernel_set_free(&ks);
      free(report);
      gcc_graph_free(cg);

      // The CPU's GEMMs on OpenBLAS (GCC_CPU_ONEDNN=0), whose order of
      // summation is the host backend's (the same sgemm, column-major), so
      // every float32 sum and every 16-bit rounding of it is the same. With
      // oneDNN (the default) the sums are taken in another order and a
      // 16-bit rounding can fall the other way: there the classes agree.
      std::vector<float> x = Input(m), l, q, l_dnnl, q_dnnl;
      setenv("GCC_CPU_ONEDNN", "0", 1);
      ApiOutputs(m, p, &l, &q);
      unsetenv("GCC_CPU_ONEDNN");
      ApiOutputs(m, p, &l_dnnl, &q_dnnl);
      std::vector<std::vector<float>> dev;
      int before = hb->gemms;
      ASSERT_EQ(RunOnHostBackend(b, x, &dev), "");
      EXPECT_GT(hb->gemms, before) << "no GEMM ran on the host backend";
      ASSERT_EQ(dev.size(), 2u);
      ASSERT_EQ(dev[0].size(), l.size());
      ASSERT_EQ(dev[1].size(), q.size());
      for (size_t k = 0; k < l.size(); k++) {
        EXPECT_EQ(Bits(dev[0][k]), Bits(l[k])) << "logit " << k;
        EXPECT_EQ(Bits(dev[1][k]), Bits(q[k])) << "probability " << k;
      }
      int differ = 0;
      double worst = 0; // in 16-bit units in the last place of the logit
      for (size_t k = 0; k < l.size(); k++) {
        differ += Bits(dev[0][k]) != Bits(l_dnnl[k]);
        double ulp = std::ldexp(1.0, std::ilogb(std::fmax(std::fabs(l_dnnl[k]), 0x1p-14)) -
                                         (p == GCC_PRECISION_BF16 ? 7 : 10));
        worst = std::fmax(worst, std::fabs((double)dev[0][k] - (double)l_dnnl[k]) / ulp);
      }
      for (int64_t r = 0; r < kRows; r++) {
        auto argmax = [&](const std::vector<float> &v) {
          return std::max_element(v.begin() + r * 10, v.begin() + r * 10 + 10) - v.begin();
        };
        EXPECT_EQ(argmax(dev[0]), argmax(l_dnnl)) << "row " << r;
      }
      printf("%s %s: against the oneDNN CPU plan %d of %zu logits differ, by %g units at most\n",
             kModels[m], gcc_precision_name(p), differ, l.size(), worst);
      gcc_bundle_free(b);
    }
  for (const std::string &v : hb->violations)
    ADD_FAILURE() << v;
  for (const std::string &v : hb->misaligned)
    ADD_FAILURE() << v;
}

// ---- the kernels ---------------------------------------------------------------

int Ptxas(const std::string &ptx, int sm, std::string *log) {
  static int counter = 0;
  std::string base =
      TmpDir() + "/export_ptxas_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  EXPECT_TRUE(WriteFile(base + ".ptx", ptx.data(), ptx.size()));
  std::string cmd = "/usr/local/cuda/bin/ptxas -arch=sm_" + std::to_string(sm) + " -o /dev/null " +
                    base + ".ptx > " + base + ".log 2>&1";
  int rc = system(cmd.c_str());
  *log = ReadText(base + ".log");
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST_F(ExportPrecision, EverySixteenBitKernelCompilesForSm80AndSm90) {
  for (int m = 0; m < 2; m++)
    for (int p : {GCC_PRECISION_BF16, GCC_PRECISION_FP16}) {
      SCOPED_TRACE(std::string(kModels[m]) + " " + gcc_precision_name(p));
      gcc_bundle *b = Read(m, p);
      ASSERT_NE(b, nullptr);
      std::string src = Section(b, "source.b7");
      // 16-bit loads and stores in the generated kernels
      EXPECT_NE(src.find(p == GCC_PRECISION_BF16 ? "__float2bfloat16_rn" : "__float2half_rn"),
                std::string::npos);
      EXPECT_NE(src.find(p == GCC_PRECISION_BF16 ? "cuda_bf16.h" : "cuda_fp16.h"),
                std::string::npos);
      for (int sm : {80, 90}) {
        std::string cubin = Section(b, ("cubin.sm_" + std::to_string(sm) + ".b7").c_str());
        ASSERT_GT(cubin.size(), 4u);
        EXPECT_EQ(cubin.substr(0, 4), "\x7f"
                                      "ELF");
        // the PTX of this architecture through ptxas (NVRTC made the cubin)
        gcc_nvrtc_output out{};
        gcc_diag d{};
        ASSERT_EQ(gcc_nvrtc_compile(src.c_str(), "export_precision_test", sm, &out, &d), GCC_OK)
            << d.msg;
        std::string log;
        EXPECT_EQ(Ptxas(std::string(out.ptx, out.ptx_size), sm, &log), 0) << log;
        gcc_nvrtc_output_free(&out);
      }
      std::string log; // the PTX the bundle carries, for compute_90
      EXPECT_EQ(Ptxas(Section(b, "ptx.b7"), 90, &log), 0) << log;
      gcc_bundle_free(b);
    }
}

// ---- bundles written before --export-precision ---------------------------------------

// tests/fixtures/v1_linear.gccx: written by gcc-train before bundles had a
// precision (format version 1, tests/fixtures/README.md).
TEST(ExportPrecisionOldBundles, AVersion1BundleStillLoadsAndComputesAsBefore) {
  std::string old_path = Runfile("tests/fixtures/v1_linear.gccx");
  ASSERT_FALSE(old_path.empty());
  gcc_diag d{};
  gcc_bundle *old_b = nullptr;
  ASSERT_EQ(gcc_bundle_read(old_path.c_str(), &old_b, &d), GCC_OK) << d.msg;
  const gcc_bundle_info *i = gcc_bundle_get_info(old_b);
  EXPECT_EQ(i->format_version, 1u);
  EXPECT_EQ(i->precision, GCC_PRECISION_FP32);
  EXPECT_EQ(i->n_weights_16bit, 0);
  EXPECT_EQ(i->weight_bytes, 16u); // Linear(3, 1): 3 weights and a bias
  EXPECT_EQ(i->n_cubin_archs, 1);
  EXPECT_EQ(i->cubin_archs[0], 90);
  // the weights are the committed model's
  gcc_graph *model = nullptr;
  ASSERT_EQ(gcc_model_load(Runfile("models/linear.pb").c_str(), &model, &d), GCC_OK) << d.msg;
  const gcc_graph *g = gcc_bundle_graph(old_b);
  for (const char *w : {"fc.weight", "fc.bias"}) {
    int a = gcc_graph_find(g, w), b = gcc_graph_find(model, w);
    ASSERT_GE(a, 0) << w;
    ASSERT_GE(b, 0) << w;
    ASSERT_EQ(g->values[a].data_bytes, model->values[b].data_bytes);
    EXPECT_EQ(memcmp(g->values[a].data, model->values[b].data, g->values[a].data_bytes), 0) << w;
  }
  // this version's reader regenerates the CUDA C the old bundle carries
  gcc_device_info devs[2];
  gcc_device_info_cpu(&devs[0]);
  ASSERT_EQ(gcc_device_info_from_arch("sm_90", 0, &devs[1], &d), GCC_OK);
  gcc_graph *cg = nullptr;
  char *report = nullptr;
  ASSERT_EQ(gcc_bundle_compile_for(g, devs, 2, GCC_DEV_CUDA(0), 2, i->precision, &cg, &report, &d),
            GCC_OK)
      << d.msg;
  gcc_kernel_set ks{};
  ASSERT_EQ(gcc_codegen_emit(cg, GCC_DEV_CUDA(0), devs[1].units, &ks, &d), GCC_OK) << d.msg;
  const void *src = nullptr;
  size_t src_size = 0;
  ASSERT_EQ(gcc_bundle_section(old_b, "source.b2", &src, &src_size, &d), GCC_OK) << d.msg;
  // The old bundle carries codegen version 2's CUDA C; version 3 (issue 29)
  // rewrote the Softmax kernel (a block per line), so this version's source
  // equals the old one but for that kernel: the Identity kernel of the
  // logits, unchanged, is the same text, and the bundle itself (its PTX and
  // cubin) still runs below.
  std::string now(ks.source), old_src(static_cast<const char *>(src), src_size);
  EXPECT_NE(old_src.find("codegen version 2."), std::string::npos);
  EXPECT_NE(now.find("codegen version " + std::to_string(GCC_CODEGEN_VERSION) + "."),
            std::string::npos);
  auto kernel = [](const std::string &text, const char *name) {
    size_t a = text.find(std::string("extern \"C\" __global__ void ") + name + "(");
    size_t b = a == std::string::npos ? a : text.find("#endif", a);
    return a == std::string::npos || b == std::string::npos ? std::string() : text.substr(a, b - a);
  };
  EXPECT_FALSE(kernel(old_src, "fused_logits_k1").empty());
  EXPECT_EQ(kernel(now, "fused_logits_k1"), kernel(old_src, "fused_logits_k1"));
  EXPECT_FALSE(kernel(now, "k_softmax_k3").empty());
  gcc_kernel_set_free(&ks);
  free(report);
  gcc_graph_free(cg);
  gcc_bundle_free(old_b);
  // the C API computes with it what it computes with a fresh export
  gcc_export_options o = {};
  uint8_t *bytes = nullptr;
  size_t size = 0;
  ASSERT_EQ(gcc_bundle_build(model, &o, nullptr, "linear.pb", &bytes, &size, &d), GCC_OK) << d.msg;
  gccx_bundle *fresh = nullptr, *old_api = nullptr;
  ASSERT_EQ(gccx_bundle_open_memory(bytes, size, "fresh", &fresh, &d), GCC_OK) << d.msg;
  free(bytes);
  ASSERT_EQ(gccx_bundle_open(old_path.c_str(), &old_api, &d), GCC_OK) << d.msg;
  const float x[6] = {0.5f, -0.25f, 1.0f, -1.0f, 0.75f, 0.125f};
  std::vector<float> out[2];
  gccx_bundle *bundles[2] = {old_api, fresh};
  for (int k = 0; k < 2; k++) {
    gccx_session_options so = {"cpu", 1, 2};
    gccx_session *s = nullptr;
    ASSERT_EQ(gccx_session_create(bundles[k], &so, &s, nullptr, 0, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gccx_set_input(s, "x", x, 2, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gccx_run(s, &d), GCC_OK) << d.msg;
    const float *l = nullptr;
    ASSERT_EQ(gccx_get_output(s, "logits", &l, nullptr, nullptr, &d), GCC_OK) << d.msg;
    out[k].assign(l, l + 2);
    gccx_session_destroy(&s);
  }
  EXPECT_EQ(out[0], out[1]);
  const float *w =
      static_cast<const float *>(model->values[gcc_graph_find(model, "fc.weight")].data);
  const float *b = static_cast<const float *>(model->values[gcc_graph_find(model, "fc.bias")].data);
  EXPECT_NEAR(out[0][0], b[0] + w[0] * x[0] + w[1] * x[1] + w[2] * x[2], 1e-6);
  gccx_bundle_close(&fresh);
  gccx_bundle_close(&old_api);
  gcc_graph_free(model);
}

// ---- what readers refuse ----------------------------------------------------------

struct Sec {
  std::string name, data;
};

std::vector<Sec> Sections(const gcc_bundle *b) {
  std::vector<Sec> v;
  for (const char *n : kSectionNames) {
    const void *p = nullptr;
    size_t size = 0;
    gcc_diag d{};
    EXPECT_EQ(gcc_bundle_section(b, n, &p, &size, &d), GCC_OK) << d.msg;
    v.push_back({n, std::string(static_cast<const char *>(p), size)});
  }
  return v;
}

std::vector<uint8_t> Pack(const std::vector<Sec> &secs, uint32_t version) {
  std::vector<gcc_bundle_section_ref> refs;
  for (const Sec &s : secs)
    refs.push_back({s.name.c_str(), s.data.data(), s.data.size()});
  uint8_t *bytes = nullptr;
  size_t size = 0;
  gcc_diag d{};
  EXPECT_EQ(gcc_bundle_pack_version(refs.data(), static_cast<int>(refs.size()), version, &bytes,
                                    &size, &d),
            GCC_OK);
  std::vector<uint8_t> out(bytes, bytes + size);
  free(bytes);
  return out;
}

gcc_status Parse(const std::vector<uint8_t> &bytes, std::string *msg) {
  gcc_diag d{};
  gcc_bundle *b = nullptr;
  gcc_status s = gcc_bundle_parse(bytes.data(), bytes.size(), "half.gccx", &b, &d);
  gcc_bundle_free(b);
  *msg = d.msg;
  if (s != GCC_OK) {
    EXPECT_NE(msg->find("half.gccx"), std::string::npos) << "the message names the file: " << *msg;
  }
  return s;
}

// `text` with the first `from` replaced by `to`.
std::string Replace(std::string text, const std::string &from, const std::string &to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos)
    text.replace(at, from.size(), to);
  return text;
}

// The manifest with section `name`'s listed size and SHA-256 made those of
// `data` (so that only the content checks can catch what changed).
std::string Relist(const std::string &manifest, const std::string &name, const std::string &data) {
  size_t at = manifest.find("\"name\": \"" + name + "\"");
  EXPECT_NE(at, std::string::npos);
  size_t bytes = manifest.find("\"bytes\": ", at), sha = manifest.find("\"sha256\": \"", at);
  size_t bytes_end = manifest.find_first_of(",\n}", bytes + 9);
  uint8_t h[32];
  char hex[65];
  EXPECT_EQ(gcc_bundle_sha256(name.c_str(), data.data(), data.size(), h), 1);
  gcc_bundle_hex(h, hex);
  std::string m = manifest;
  m.replace(sha + 11, 64, hex);
  m.replace(bytes + 9, bytes_end - bytes - 9, std::to_string(data.size()));
  return m;
}

TEST_F(ExportPrecision, CorruptTruncatedAndInconsistentSixteenBitBundlesAreRefused) {
  gcc_bundle *b = Read(0, GCC_PRECISION_BF16);
  ASSERT_NE(b, nullptr);
  std::vector<uint8_t> good = ReadBytes(paths_[{0, GCC_PRECISION_BF16}]);
  std::vector<Sec> secs = Sections(b);
  gcc_bundle_free(b);
  std::string msg;
  ASSERT_EQ(Parse(Pack(secs, 2), &msg), GCC_OK) << msg; // repacked as it was: fine
  // cut anywhere, or a bit flipped anywhere: refused, never a crash
  for (int k = 1; k < 48; k++) {
    size_t at = good.size() * static_cast<size_t>(k) / 48;
    std::vector<uint8_t> t(good.begin(), good.begin() + static_cast<long>(at));
    EXPECT_EQ(Parse(t, &msg), GCC_ERR_PARSE) << "cut at " << at;
    t = good;
    t[at] ^= static_cast<uint8_t>(1u << (k % 8));
    EXPECT_NE(Parse(t, &msg), GCC_OK) << "bit flipped at " << at;
  }
  auto with = [&](int i, const std::string &data) {
    std::vector<Sec> s = secs;
    s[static_cast<size_t>(i)].data = data;
    return s;
  };
  const std::string &manifest = secs[0].data;
  // the manifest of a version 2 bundle behind a version 1 header
  EXPECT_EQ(Parse(Pack(secs, 1), &msg), GCC_ERR_PARSE);
  EXPECT_NE(msg.find("format_version 2 differs from the header's 1"), std::string::npos) << msg;
  // a version 1 bundle (what a reader without 16-bit support reads) with 16-bit weights
  std::string v1 = Replace(manifest, "\"format_version\": 2", "\"format_version\": 1");
  EXPECT_EQ(Parse(Pack(with(0, v1), 1), &msg), GCC_ERR_PARSE);
  EXPECT_NE(msg.find("dtype bfloat16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a float32 bundle has no 16-bit weights"), std::string::npos) << msg;
  // no precision, or one that is not a bundle's
  for (const char *bad : {"\"precision\": \"fp8\"", "\"precision\": \"tf32\"", "\"precisio\": 1"}) {
    EXPECT_EQ(Parse(Pack(with(0, Replace(manifest, "\"precision\": \"bf16\"", bad)), 2), &msg),
              GCC_ERR_PARSE)
        << bad;
    EXPECT_NE(msg.find("needs \"precision\""), std::string::npos) << msg;
  }
  // bfloat16 weights in a bundle that says fp16
  EXPECT_EQ(
      Parse(
          Pack(with(0, Replace(manifest, "\"precision\": \"bf16\"", "\"precision\": \"fp16\"")), 2),
          &msg),
      GCC_ERR_PARSE);
  EXPECT_NE(msg.find("section 'weights': tensor 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dtype bfloat16"), std::string::npos) << msg;
  // a weights summary that is not the section's
  EXPECT_EQ(
      Parse(Pack(with(0, Replace(manifest, "\"tensors_16bit\": 10", "\"tensors_16bit\": 9")), 2),
            &msg),
      GCC_ERR_PARSE);
  EXPECT_NE(msg.find("manifest: \"weights\" says bfloat16"), std::string::npos) << msg;
  EXPECT_EQ(Parse(Pack(with(0, Replace(manifest, "\"weights\": {", "\"weightz\": {")), 2), &msg),
            GCC_ERR_PARSE);
  EXPECT_NE(msg.find("malformed \"weights\""), std::string::npos) << msg;
  // a 16-bit tensor two bytes short, with checksums and the manifest's list
  // made consistent: only its element count can tell
  Gcc__Graph *w = gcc__graph__unpack(nullptr, secs[2].data.size(),
                                     reinterpret_cast<const uint8_t *>(secs[2].data.data()));
  ASSERT_NE(w, nullptr);
  ASSERT_GT(w->n_initializers, 0u);
  ASSERT_EQ(w->initializers[0]->dtype, GCC__DATA_TYPE__DT_BFLOAT16);
  w->initializers[0]->raw_data.len -= 2;
  std::string shorter(gcc__graph__get_packed_size(w), '\0');
  gcc__graph__pack(w, reinterpret_cast<uint8_t *>(&shorter[0]));
  std::string name0 = w->initializers[0]->name;
  w->initializers[0]->raw_data.len += 2;
  gcc__graph__free_unpacked(w, nullptr);
  std::vector<Sec> s = with(2, shorter);
  s[0].data = Relist(manifest, "weights", shorter);
  EXPECT_EQ(Parse(Pack(s, 2), &msg), GCC_ERR_PARSE);
  EXPECT_NE(msg.find("section 'weights': bfloat16 tensor '" + name0 + "' has"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("not 2 per element"), std::string::npos) << msg;
  // a future version names both sides
  std::vector<uint8_t> t = good;
  t[8] = 4; // 3 is a tensor bundle
  EXPECT_EQ(Parse(t, &msg), GCC_ERR_UNSUPPORTED);
  EXPECT_NE(msg.find("bundle format version 4, but this gcc-train"), std::string::npos) << msg;
  EXPECT_NE(msg.find("reads versions 1 to 3"), std::string::npos) << msg;
}

// A weight that a float32 node reads as well stays float32: out =
// Gemm(x, W, b) + b, where the Add promotes to float32 and reads b itself.
// The CPU-only bundle (no NVRTC) computes exactly the graph's own bf16 plan.
TEST(ExportPrecisionRules, AWeightThatAFloat32NodeReadsStaysFloat32) {
  gcc_builder *bl = gcc_builder_new("shared_bias", 5);
  ASSERT_NE(bl, nullptr);
  int64_t xd[2] = {GCC_BATCH_DIM, 6};
  int x = gcc_build_input(bl, "x", GCC_DT_FLOAT32, 2, xd);
  int h = gcc_build_linear(bl, "fc", x, 6, 4);
  gcc_graph *g = nullptr;
  gcc_diag d{};
  int bias = -1;
  for (int v = 0; v < bl->g->n_values; v++)
    if (strcmp(bl->g->values[v].name, "fc.bias") == 0)
      bias = v;
  ASSERT_GE(bias, 0);
  int add_in[2] = {h, bias};
  int out = gcc_build_op(bl, GCC_OP_ADD, "add", "out", add_in, 2);
  gcc_build_output(bl, out);
  ASSERT_EQ(gcc_builder_finish(bl, &g, &d), GCC_OK) << d.msg;
  gcc_graph *ig = nullptr;
  ASSERT_EQ(gcc_inference_graph(g, &ig, &d), GCC_OK) << d.msg;
  std::vector<unsigned char> is16(static_cast<size_t>(ig->n_values));
  ASSERT_EQ(gcc_bundle_weights_16bit(ig, GCC_PRECISION_BF16, is16.data(), &d), GCC_OK) << d.msg;
  EXPECT_EQ(is16[static_cast<size_t>(gcc_graph_find(ig, "fc.weight"))], 1);
  EXPECT_EQ(is16[static_cast<size_t>(gcc_graph_find(ig, "fc.bias"))], 0);
  ASSERT_EQ(gcc_bundle_weights_16bit(ig, GCC_PRECISION_FP32, is16.data(), &d), GCC_OK);
  EXPECT_EQ(is16[static_cast<size_t>(gcc_graph_find(ig, "fc.weight"))], 0);
  gcc_export_options o = {};
  o.precision = GCC_PRECISION_BF16;
  uint8_t *bytes = nullptr;
  size_t size = 0;
  ASSERT_EQ(gcc_bundle_build(g, &o, nullptr, "shared.pb", &bytes, &size, &d), GCC_OK) << d.msg;
  gcc_bundle *b = nullptr;
  ASSERT_EQ(gcc_bundle_parse(bytes, size, "shared.gccx", &b, &d), GCC_OK) << d.msg;
  free(bytes);
  const gcc_bundle_info *i = gcc_bundle_get_info(b);
  EXPECT_EQ(i->n_weight_tensors, 2);
  EXPECT_EQ(i->n_weights_16bit, 1);
  EXPECT_EQ(i->weight_bytes, 24u * 2 + 4u * 4);
  EXPECT_EQ(i->weight_bytes_fp32, 24u * 4 + 4u * 4);
  // the bundle's CPU plan against the model's own at bf16
  std::vector<float> xv(3 * 6);
  for (size_t k = 0; k < xv.size(); k++)
    xv[k] = std::sin(0.7f * static_cast<float>(k)) * 3.0f;
  std::vector<PlanOutput> want, got;
  ASSERT_EQ(RunPlan(g, {xv.data()}, 3, false, &want, 1, GCC_PRECISION_BF16), "");
  ASSERT_EQ(RunPlan(gcc_bundle_graph(b), {xv.data()}, 3, false, &got, 1, GCC_PRECISION_BF16), "");
  ASSERT_EQ(got.size(), 2u); // logits, probabilities
  ASSERT_EQ(want[0].f32.size(), got[0].f32.size());
  int differ32 = 0;
  std::vector<PlanOutput> f32;
  ASSERT_EQ(RunPlan(g, {xv.data()}, 3, false, &f32, 1, GCC_PRECISION_FP32), "");
  for (size_t k = 0; k < want[0].f32.size(); k++) {
    EXPECT_EQ(Bits(got[0].f32[k]), Bits(want[0].f32[k])) << k;
    differ32 += got[0].f32[k] != f32[0].f32[k];
  }
  EXPECT_GT(differ32, 0);
  gcc_bundle_free(b);
  gcc_graph_free(ig);
  gcc_graph_free(g);
}

TEST_F(ExportPrecision, Fp16RefusesWeightsBeyondItsRange) {
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_graph_clone(models_[0], &g, &d), GCC_OK);
  int v = gcc_graph_find(g, "fc5.bias");
  ASSERT_GE(v, 0);
  static_cast<float *>(g->values[v].data)[3] = 70000.0f; // float16's largest finite: 65504
  gcc_export_options o = {};                             // CPU only: no NVRTC needed
  o.precision = GCC_PRECISION_FP16;
  uint8_t *bytes = nullptr;
  size_t size = 0;
  EXPECT_EQ(gcc_bundle_build(g, &o, nullptr, "big.pb", &bytes, &size, &d),
            GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(d.msg, "--export-precision fp16: weight 'fc5.bias' holds 70000"), nullptr)
      << d.msg;
  EXPECT_NE(strstr(d.msg, "65504"), nullptr) << d.msg;
  EXPECT_EQ(bytes, nullptr);
  o.precision = GCC_PRECISION_BF16; // bfloat16 has float32's range
  EXPECT_EQ(gcc_bundle_build(g, &o, nullptr, "big.pb", &bytes, &size, &d), GCC_OK) << d.msg;
  free(bytes);
  o.precision = GCC_PRECISION_TF32; // a math mode, not a storage format
  EXPECT_EQ(gcc_bundle_build(g, &o, nullptr, "big.pb", &bytes, &size, &d),
            GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(d.msg, "precision tf32"), nullptr) << d.msg;
  gcc_graph_free(g);
  // the flag's parser
  for (const char *ok : {"fp32", "bf16", "fp16"})
    EXPECT_EQ(gcc_export_parse_precision(ok, &o, &d), GCC_OK) << ok;
  EXPECT_EQ(o.precision, GCC_PRECISION_FP16);
  for (const char *bad : {"tf32", "FP16", "", "half"}) {
    EXPECT_EQ(gcc_export_parse_precision(bad, &o, &d), GCC_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(strstr(d.msg, "--export-precision"), nullptr) << d.msg;
  }
}

} // namespace
