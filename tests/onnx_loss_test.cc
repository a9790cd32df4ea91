// onnx_loss_test: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss
// (issue 30) in models PyTorch exported, against PyTorch's loss and
// gradients. tests/fixtures/nll_loss.fix and nll_{clf,seg}_{ts,dynamo}.onnx
// are made by tests/fixtures/make_nll_fixtures.py: a classifier whose
// forward returns F.cross_entropy(logits, target, weight=w, ignore_index=2)
// (both exporters write SoftmaxCrossEntropyLoss), and a 1x1 convolution
// whose forward returns F.nll_loss(log(softmax(.)), target, weight=w,
// ignore_index=-1, reduction='sum') over (N, C, H, W) (the TorchScript
// exporter writes NegativeLogLikelihoodLoss; the default exporter
// decomposes nll_loss into Equal, Not, Where and GatherElements). Each is
// imported for training (its initializers parameters), its output "loss"
// made the training loss, and one step of the backward run (no update) on
// the CPU and through the CUDA plan on the host backend (generated kernels
// host-emulated): the loss and every parameter's gradient must match
// PyTorch's. The class weight w (a buffer in PyTorch, an initializer in
// the file) gets no gradient, as in PyTorch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

extern "C" {
#include "codegen/kernel_cache.h"
#include "codegen/nvrtc.h"
#include "graph/ir.h"
#include "graph/ops.h"
#include "graph/util.h"
#include "onnx/export.h"
#include "onnx/import.h"
#include "onnx/onnx.pb-c.h"
#include "runtime/plan.h"
}
#include "tests/fixture.h"
#include "tests/host_backend.h"
#include "tests/run_plans.h"
#include "tests/testutil.h"
#include "tests/test_kernel_cache.h"

namespace {

using gcc_test::Fixture;

// Whether this build compiles CUDA kernels (not under --config=cpu_only,
// where the CUDA plan half does not run).
bool BuiltWithNvrtc() {
  int major = 0, minor = 0;
  return gcc_nvrtc_version(&major, &minor) == GCC_OK;
}

std::string Runfile(const std::string &rel) {
  std::string p = gcc_test::Runfile(rel);
  return p.empty() ? rel : p;
}

const Fixture &Fix() {
  static Fixture *f = [] {
    auto *fx = new Fixture();
    std::string err;
    if (!Fixture::Load(Runfile("tests/fixtures/nll_loss.fix"), fx, &err))
      ADD_FAILURE() << err;
    return fx;
  }();
  return *f;
}

// The ops of the file that the importer does not map ("" when none).
std::string MissingOps(const std::vector<uint8_t> &bytes) {
  Onnx__ModelProto *m = onnx__model_proto__unpack(nullptr, bytes.size(), bytes.data());
  if (!m || !m->graph)
    return "(does not parse)";
  std::string missing;
  for (size_t i = 0; i < m->graph->n_node; ++i) {
    const char *op = m->graph->node[i]->op_type;
    if (!gcc_onnx_op_supported(op) && missing.find(op) == std::string::npos)
      missing += std::string(missing.empty() ? "" : ", ") + op;
  }
  onnx__model_proto__free_unpacked(m, nullptr);
  return missing;
}

// Parameters and their gradients, in host memory (the CPU) or in the host
// backend's "device" memory (the CUDA plan); gradients start as NaN.
struct Persistent {
  const gcc_graph *model;
  gcc_host_test::HostBackend *hb; // nullptr: the CPU
  std::map<std::string, float *> grad;
  std::map<std::string, size_t> numel;
  std::vector<std::vector<float>> host;
  std::vector<void *> blocks;
  ~Persistent() {
    for (void *p : blocks)
      hb->be.release(hb->be.self, p);
  }
  float *Alloc(size_t n) {
    if (!hb) {
      host.emplace_back(n ? n : 1, 0.0f);
      return host.back().data();
    }
    void *p = nullptr;
    gcc_diag d{};
    if (hb->be.alloc(hb->be.self, (n ? n : 1) * sizeof(float), &p, &d) != GCC_OK)
      return nullptr;
    blocks.push_back(p);
    return static_cast<float *>(p);
  }
  static void *Bind(void *user, const gcc_graph *g, int v) {
    auto *s = static_cast<Persistent *>(user);
    const gcc_value &val = g->values[v];
    bool is_grad = val.kind == GCC_VALUE_GRAD && val.param_of >= 0;
    if (val.kind != GCC_VALUE_PARAM && !is_grad)
      return nullptr;
    const char *name = is_grad ? g->values[val.param_of].name : val.name;
    int mv = gcc_graph_find(s->model, name);
    if (mv < 0 || !s->model->values[mv].data)
      return nullptr;
    size_t n = static_cast<size_t>(gcc_shape_numel(&s->model->values[mv].shape, nullptr));
    float *p = s->Alloc(n);
    if (!p)
      return nullptr;
    if (is_grad) {
      for (size_t i = 0; i < n; ++i)
        p[i] = std::nanf("");
      s->grad[name] = p;
      s->numel[name] = n;
    } else {
      std::memcpy(p, s->model->values[mv].data, n * sizeof(float));
    }
    return p;
  }
};

// Imports tests/fixtures/<file> for training with "loss" as the training
// loss, runs the backward once and checks the loss and the gradients.
// With bad_pos >= 0 the target at that position is made 99 (outside [0,
// C), not ignore_index): the step must fail naming the position instead.
//
// `buffers`: float initializers that PyTorch holds as buffers or constants
// but the importer trains (it makes every float initializer a parameter:
// ONNX 1.12's ValueInfoProto has no metadata_props, where the default
// exporter writes each input's graph-signature kind). They must get a
// gradient (so that this list is emptied when the importer learns the
// difference); their values are not compared.
void CheckModel(const std::string &model, const std::string &file, bool cuda, int bad_pos = -1,
                const std::set<std::string> &buffers = {}) {
  SCOPED_TRACE(file + (cuda ? " (CUDA plan, host-emulated)" : " (CPU)"));
  if (cuda && !BuiltWithNvrtc())
    GTEST_SKIP() << "built without NVRTC (--config=cpu_only): no CUDA plan";
  const Fixture &fx = Fix();
  std::vector<uint8_t> bytes;
  std::string path = Runfile("tests/fixtures/" + file);
  ASSERT_TRUE(gcc_test::ReadFile(path, &bytes)) << path;
  std::string missing = MissingOps(bytes);
  if (!missing.empty())
    GTEST_SKIP() << file << " needs ops the importer does not map yet: " << missing;
  gcc_onnx_options io{};
  io.train = 1;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_onnx_import(bytes.data(), bytes.size(), path.c_str(), &io, &g, nullptr, &d), GCC_OK)
      << d.msg;
  std::unique_ptr<gcc_graph, void (*)(gcc_graph *)> own(g, gcc_graph_free);
  gcc_training *t = &g->training;
  t->present = 1;
  t->loss = gcc_strdup("loss");
  t->opt.kind = GCC_OPT_SGD; // the file needs one; no update runs (GCC_OPT_NONE below)
  t->batch_size = fx.Get(model + ".x").dims[0];
  t->epochs = 1;

  gcc_options o{};
  o.mode = GCC_MODE_TRAIN;
  o.batch_size = t->batch_size;
  o.opt.kind = GCC_OPT_NONE; // gradients only
  o.device = cuda ? GCC_DEV_CUDA(0) : GCC_DEV_CPU;
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  FILE *quiet = std::fopen("/dev/null", "w");
  o.warn_file = quiet;
  gcc_plan_config cfg{};
  cfg.threads = 1;
  cfg.readback_ring = 1;
  Persistent ps{g, nullptr, {}, {}, {}, {}};
  if (cuda) {
    ps.hb = gcc_test::SharedHostBackend();
    cfg.device = &ps.hb->be;
    cfg.sm = 90;
    cfg.sm_count = 4;
    cfg.compile = gcc_kernel_cache_hook;
    cfg.compile_user = gcc_test::TestKernelCache();
  }
  gcc_plan *p = nullptr;
  gcc_status st = gcc_plan_compile(g, &o, &cfg, Persistent::Bind, &ps, &p, &d);
  if (quiet)
    std::fclose(quiet);
  ASSERT_EQ(st, GCC_OK) << d.msg;
  std::unique_ptr<gcc_plan, void (*)(gcc_plan *)> plan(p, gcc_plan_free);
  ASSERT_EQ(gcc_plan_bind_input(p, "x", fx.Get(model + ".x").f32(), &d), GCC_OK) << d.msg;
  const auto &tg = fx.Get(model + ".target");
  std::vector<int64_t> target(tg.i64(), tg.i64() + tg.numel());
  if (bad_pos >= 0)
    target[static_cast<size_t>(bad_pos)] = 99;
  ASSERT_EQ(gcc_plan_bind_input(p, "target", target.data(), &d), GCC_OK) << d.msg;
  if (bad_pos >= 0) { // the CPU fails the run; the CUDA plan's flag fails the read-back
    gcc_diag dd{};
    if (gcc_plan_run(p, 0, &dd) == GCC_OK) {
      EXPECT_EQ(gcc_plan_host_tensor(p, "loss", &dd), nullptr);
    }
    const std::string want = "position " + std::to_string(bad_pos);
    EXPECT_NE(std::string(dd.msg).find(want), std::string::npos) << dd.msg;
    printf("%s %s, target 99 at %d: %s\n", file.c_str(), cuda ? "cuda" : "cpu", bad_pos, dd.msg);
    return;
  }
  ASSERT_EQ(gcc_plan_run(p, 0, &d), GCC_OK) << d.msg;
  const gcc_tensor *lt = gcc_plan_host_tensor(p, "loss", &d); // waits for the step
  ASSERT_NE(lt, nullptr) << d.msg;
  // Tolerances: float32 in both; the loss sums at most 18 terms of O(1)
  // after a GEMM or convolution of at most 8 products, each step rounding
  // at 2^-24 relative: errors of a few 1e-7; 1e-5 + 1e-5 |want| leaves
  // room for other summation orders (oneDNN, the emulated cuBLASLt), while
  // a wrong weight, ignore_index or mean denominator moves the loss and
  // the gradients by 1e-2 or more.
  const double want_loss = fx.Get(model + ".loss").f32()[0];
  const double got_loss = static_cast<const float *>(lt->data)[0];
  EXPECT_LE(std::fabs(got_loss - want_loss), 1e-5 + 1e-5 * std::fabs(want_loss))
      << "loss " << got_loss << ", PyTorch " << want_loss;
  int checked = 0;
  size_t buffers_seen = 0;
  for (const auto &kv : ps.grad) {
    const std::string rec = model + ".grad." + kv.first;
    if (buffers.count(kv.first)) {
      buffers_seen++;
      continue;
    }
    ASSERT_TRUE(fx.Has(rec)) << "parameter '" << kv.first << "' has a gradient but PyTorch's "
                             << "model has no such parameter (the class weight must get none)";
    const auto &want = fx.Get(rec);
    ASSERT_EQ(static_cast<size_t>(want.numel()), ps.numel[kv.first]) << rec;
    double worst = 0;
    for (size_t i = 0; i < ps.numel[kv.first]; ++i) {
      double w = want.f32()[i], e = std::fabs(kv.second[i] - w);
      worst = std::max(worst, e);
      ASSERT_LE(e, 1e-5 + 1e-5 * std::fabs(w))
          << rec << "[" << i << "]: " << kv.second[i] << ", PyTorch " << w;
    }
    printf("%s %s: %s max |error| %.3g\n", file.c_str(), cuda ? "cuda" : "cpu", rec.c_str(), worst);
    checked++;
  }
  // every PyTorch parameter got its gradient
  int want_params = 0;
  for (const char *pn :
       {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "conv.weight", "conv.bias"})
    want_params += fx.Has(model + ".grad." + pn);
  EXPECT_EQ(checked, want_params);
  EXPECT_EQ(buffers_seen, buffers.size()) << "a listed buffer got no gradient: update the list";
  printf("%s %s: loss %.9g, PyTorch %.9g\n", file.c_str(), cuda ? "cuda" : "cpu", got_loss,
         want_loss);
}

TEST(OnnxLoss, CrossEntropyOfAClassifierTorchScriptExport) {
  CheckModel("clf", "nll_clf_ts.onnx", false);
  CheckModel("clf", "nll_clf_ts.onnx", true);
}

TEST(OnnxLoss, CrossEntropyOfAClassifierDefaultExport) {
  CheckModel("clf", "nll_clf_dynamo.onnx", false);
  CheckModel("clf", "nll_clf_dynamo.onnx", true);
}

TEST(OnnxLoss, NllLossOverNCHWTorchScriptExport) {
  CheckModel("seg", "nll_seg_ts.onnx", false);
  CheckModel("seg", "nll_seg_ts.onnx", true);
}

// The default exporter decomposes nll_loss (Equal, Not, Where,
// GatherElements, ReduceSum): the loss and the convolution's gradients
// match PyTorch's. The class weight (folded into the initializer `view`)
// and Where's constant 0 (`scalar_tensor_default`) are trained too (see
// CheckModel): a known defect of the import of default-exporter files.
TEST(OnnxLoss, NllLossOverNCHWDefaultExport) {
  const std::set<std::string> buffers = {"view", "scalar_tensor_default"};
  CheckModel("seg", "nll_seg_dynamo.onnx", false, -1, buffers);
  CheckModel("seg", "nll_seg_dynamo.onnx", true, -1, buffers);
}

// A target outside [0, C) that is not ignore_index fails the step with a
// message naming its position, on the CPU (the kernel's check) and on the
// CUDA plan (the bad-label flag, read back after the step).
TEST(OnnxLoss, TargetOutOfRangeFailsTheStep) {
  CheckModel("clf", "nll_clf_ts.onnx", false, 5);
  CheckModel("clf", "nll_clf_ts.onnx", true, 5);
  CheckModel("seg", "nll_seg_ts.onnx", false, 13);
  CheckModel("seg", "nll_seg_ts.onnx", true, 13);
}

// ONNX export: the imported graphs (SoftmaxCrossEntropyLoss as LogSoftmax +
// NegativeLogLikelihoodLoss; NegativeLogLikelihoodLoss with its weight,
// ignore_index and reduction) written back and imported again give
// PyTorch's loss on the CPU, and the file holds NegativeLogLikelihoodLoss.
TEST(OnnxLoss, ExportRoundTrip) {
  const Fixture &fx = Fix();
  for (const char *model : {"clf", "seg"}) {
    SCOPED_TRACE(model);
    std::vector<uint8_t> bytes;
    std::string path = Runfile(std::string("tests/fixtures/nll_") + model + "_ts.onnx");
    ASSERT_TRUE(gcc_test::ReadFile(path, &bytes)) << path;
    gcc_graph *g = nullptr;
    gcc_diag d{};
    ASSERT_EQ(gcc_onnx_import(bytes.data(), bytes.size(), path.c_str(), nullptr, &g, nullptr, &d),
              GCC_OK)
        << d.msg;
    std::unique_ptr<gcc_graph, void (*)(gcc_graph *)> own(g, gcc_graph_free);
    uint8_t *out = nullptr;
    size_t size = 0;
    ASSERT_EQ(gcc_onnx_export_memory(g, nullptr, &out, &size, &d), GCC_OK) << d.msg;
    std::unique_ptr<uint8_t, void (*)(void *)> own_out(out, free);
    Onnx__ModelProto *m = onnx__model_proto__unpack(nullptr, size, out);
    ASSERT_NE(m, nullptr);
    int nll = 0;
    for (size_t i = 0; i < m->graph->n_node; ++i)
      nll += std::strcmp(m->graph->node[i]->op_type, "NegativeLogLikelihoodLoss") == 0;
    onnx__model_proto__free_unpacked(m, nullptr);
    EXPECT_EQ(nll, 1);
    gcc_graph *g2 = nullptr;
    ASSERT_EQ(gcc_onnx_import(out, size, "exported.onnx", nullptr, &g2, nullptr, &d), GCC_OK)
        << d.msg;
    std::unique_ptr<gcc_graph, void (*)(gcc_graph *)> own2(g2, gcc_graph_free);
    std::vector<gcc_test::PlanOutput> outs;
    const std::string x = std::string(model) + ".x", t = std::string(model) + ".target";
    ASSERT_EQ(
        gcc_test::RunPlan(g2, {fx.Get(x).f32(), fx.Get(t).i64()}, fx.Get(x).dims[0], false, &outs),
        "");
    ASSERT_EQ(outs.size(), 1u);
    const double want = fx.Get(std::string(model) + ".loss").f32()[0];
    // the same float32 computation as CheckModel's: 1e-5 + 1e-5 |want|
    EXPECT_LE(std::fabs(outs[0].f32[0] - want), 1e-5 + 1e-5 * std::fabs(want))
        << "loss " << outs[0].f32[0] << ", PyTorch " << want;
  }
}

} // namespace
