// train_import_test: ONNX models exported by PyTorch in training mode
// (tests/fixtures/make_train_import_fixtures.py: a ResNet-style network with
// BasicBlocks, projection shortcut, global average pool and Linear; a
// MobileNet-style one with a depthwise convolution, ReLU6 as Clip and
// Dropout(0.25) before its classifier) are imported for training
// (gcc_onnx_options.train: BatchNormalization kept, running statistics as
// state; Dropout kept, inverted dropout in training) and given PyTorch's
// recipe (CrossEntropyLoss, SGD with momentum and weight decay) and the
// fixture's seed, and trained 3 steps on the fixture's batch, on the CPU and
// through a CUDA plan on the host backend (generated kernels emulated). The
// losses, every parameter and every BatchNorm running statistic must match
// PyTorch's to 1e-4 relative (|got - want| <= 1e-4 max(|want|, 1e-2):
// float32 in both, three steps of a deep-ish chain). PyTorch's reference
// applies the dropout masks gcc-train draws (Philox, graph/philox.h,
// computed by the script from the seed and the node's name): a mask that
// differs in one element of the 64 changes the losses beyond the tolerance.
// The MobileNet-style model exported with TrainingMode.PRESERVE trains as
// the TRAINING export does; exported with EVAL (no Dropout node left,
// BatchNorms folded into the Convs by PyTorch) it trains as PyTorch trains
// what that file holds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

extern "C" {
#include "codegen/kernel_cache.h"
#include "graph/ir.h"
#include "graph/ops.h"
#include "onnx/import.h"
#include "graph/loader.h"
#include "graph/util.h"
#include "runtime/session.h"
}
#include "tests/fixture.h"
#include "tests/host_backend.h"
#include "tests/onnx_builder.h"
#include "tests/testutil.h"
#include "tests/test_kernel_cache.h"

namespace {

using gcc_test::Fixture;

constexpr double kRtol = 1e-4, kFloor = 1e-2;

// The imported graph plus cross-entropy on its logits and the recipe.
gcc_graph *ImportForTraining(const std::string &onnx, const Fixture &fx, std::string *err) {
  gcc_test::Bytes bytes;
  if (!gcc_test::ReadFile(onnx, &bytes)) {
    *err = "cannot read " + onnx;
    return nullptr;
  }
  gcc_onnx_options o{};
  o.train = 1;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  if (gcc_onnx_import(bytes.data(), bytes.size(), onnx.c_str(), &o, &g, nullptr, &d) != GCC_OK) {
    *err = d.msg;
    return nullptr;
  }
  int logits = gcc_graph_find(g, "logits");
  gcc_shape ls = {1, {GCC_BATCH_DIM}};
  int labels = -1, loss = -1, node = -1;
  int ins[2] = {logits, -1};
  if (logits < 0 ||
      gcc_graph_add_value(g, "labels", GCC_DT_INT64, &ls, GCC_VALUE_INPUT, nullptr, 0, &labels,
                          &d) != GCC_OK ||
      gcc_graph_add_input(g, labels) != GCC_OK) {
    *err = logits < 0 ? "no logits" : d.msg;
    gcc_graph_free(g);
    return nullptr;
  }
  ins[1] = labels;
  gcc_shape scalar = {0, {0}};
  if (gcc_graph_add_value(g, "loss", GCC_DT_FLOAT32, &scalar, GCC_VALUE_ACTIVATION, nullptr, 0,
                          &loss, &d) != GCC_OK ||
      gcc_graph_add_node(g, "loss", GCC_OP_SOFTMAX_CROSS_ENTROPY, ins, 2, &loss, 1, &node, &d) !=
          GCC_OK ||
      gcc_graph_add_output(g, loss) != GCC_OK || gcc_graph_link(g, &d) != GCC_OK ||
      gcc_graph_toposort(g, &d) != GCC_OK) {
    *err = d.msg;
    gcc_graph_free(g);
    return nullptr;
  }
  gcc_training *t = &g->training;
  t->present = 1;
  t->loss = gcc_strdup("loss");
  t->prediction = gcc_strdup("logits");
  t->input = gcc_strdup("input");
  t->target = gcc_strdup("labels");
  t->opt.kind = GCC_OPT_SGD;
  t->opt.lr = static_cast<float>(fx.Get("lr").f64()[0]);
  t->opt.momentum = static_cast<float>(fx.Get("momentum").f64()[0]);
  t->opt.weight_decay = static_cast<float>(fx.Get("weight_decay").f64()[0]);
  t->batch_size = 4;
  t->epochs = 1;
  t->seed = static_cast<uint64_t>(fx.Get("seed").i64()[0]); // the dropout masks
  return g;
}

// Trains the model `onnx` (tests/fixtures/ONNX.onnx) with the recipe and
// batch of fixture `name` and compares with its PyTorch reference; the
// reference of an export without Dropout (TrainingMode.EVAL) is only its
// losses (`loss_prefix` "eval_export.").
void TrainAndCompare(const std::string &name, bool cuda, const std::string &onnx = "",
                     int want_dropouts = -1, const std::string &loss_prefix = "") {
  const std::string file = onnx.empty() ? name : onnx;
  SCOPED_TRACE(file + (cuda ? " (CUDA plan, host backend)" : " (CPU)"));
  Fixture fx;
  std::string err;
  ASSERT_TRUE(Fixture::Load(gcc_test::Runfile("tests/fixtures/" + name + ".fix"), &fx, &err))
      << err;
  gcc_graph *g = ImportForTraining(gcc_test::Runfile("tests/fixtures/" + file + ".onnx"), fx, &err);
  ASSERT_NE(g, nullptr) << err;
  int n_state = 0, n_bn = 0, n_drop = 0;
  for (int v = 0; v < g->n_values; v++)
    n_state += g->values[v].state;
  for (int i = 0; i < g->n_nodes; i++) {
    n_bn += g->nodes[i].op == GCC_OP_BATCH_NORM;
    if (g->nodes[i].op == GCC_OP_DROPOUT) {
      n_drop++;
      const gcc_attr *ratio = gcc_node_attr(&g->nodes[i], "ratio");
      ASSERT_NE(ratio, nullptr) << g->nodes[i].name;
      EXPECT_EQ(ratio->f, 0.25f) << g->nodes[i].name;
    }
  }
  if (loss_prefix.empty()) { // an EVAL export has its BatchNorms folded into the Convs
    EXPECT_GT(n_bn, 0);
  }
  EXPECT_EQ(n_state, 2 * n_bn) << "each BatchNormalization keeps its running mean and var";
  if (want_dropouts >= 0) {
    EXPECT_EQ(n_drop, want_dropouts);
  }

  static gcc_host_test::HostBackend *hb = new gcc_host_test::HostBackend();
  gcc_session_options so{};
  so.threads = 1;
  so.opt = g->training.opt;
  if (cuda) {
    so.backend = &hb->be;
    so.device = GCC_DEV_CUDA(0);
    so.plan.sm = 90;
    so.plan.sm_count = 4;
    so.plan.compile = gcc_kernel_cache_hook;
    so.plan.compile_user = gcc_test::TestKernelCache();
  }
  gcc_session *s = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_session_create(g, &so, &s, &d), GCC_OK) << d.msg;
  const float *x = fx.Get("x").f32();
  const int64_t *labels = fx.Get("labels").i64();
  for (int step = 1; step <= 3; ++step) {
    float loss = 0;
    ASSERT_EQ(gcc_session_train_step(s, x, labels, 4, &loss, &d), GCC_OK) << d.msg;
    double want = fx.Get(loss_prefix + "loss." + std::to_string(step)).f64()[0];
    EXPECT_LE(std::fabs(loss - want), kRtol * std::max(std::fabs(want), kFloor))
        << "step " << step << " loss " << loss << ", PyTorch " << want;
  }
  if (!loss_prefix.empty()) { // only the losses are recorded for this export
    gcc_session_destroy(s);
    gcc_graph_free(g);
    return;
  }
  int checked = 0;
  double worst = 0;
  for (const std::string &rname : fx.Names()) {
    if (rname.rfind("final.", 0) != 0)
      continue;
    const gcc_test::FixtureArray &rec = fx.Get(rname);
    std::string pname = rname.substr(6);
    float *p = nullptr;
    int64_t n = 0;
    ASSERT_EQ(gcc_session_param(s, pname.c_str(), &p, &n, &d), GCC_OK) << pname << ": " << d.msg;
    ASSERT_EQ(n, rec.numel()) << pname;
    const float *want = rec.f32();
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      double tol = kRtol * std::max(std::fabs((double)want[i]), kFloor);
      double e = std::fabs((double)p[i] - want[i]);
      worst = std::max(worst, e / tol);
      if (!(e <= tol) && bad++ < 3)
        ADD_FAILURE() << pname << "[" << i << "] = " << p[i] << ", PyTorch " << want[i];
    }
    checked++;
  }
  EXPECT_GT(checked, 10);
  // evaluation uses the running estimates: PyTorch's model.eval() logits
  float eval_loss = 0;
  int64_t correct = 0;
  const gcc_tensor *pred = nullptr;
  ASSERT_EQ(gcc_session_eval_batch(s, x, labels, 4, &eval_loss, &correct, &pred, &d), GCC_OK)
      << d.msg;
  ASSERT_NE(pred, nullptr);
  const gcc_test::FixtureArray &el = fx.Get("eval_logits");
  ASSERT_EQ(pred->numel, el.numel());
  for (int64_t i = 0; i < el.numel(); ++i) {
    double want = el.f32()[i], got = static_cast<const float *>(pred->data)[i];
    EXPECT_LE(std::fabs(got - want), kRtol * std::max(std::fabs(want), kFloor))
        << "eval logits[" << i << "] = " << got << ", PyTorch " << want;
  }
  // the trained model keeps the running statistics as state through a save
  gcc_graph *trained = nullptr;
  ASSERT_EQ(gcc_session_export(s, &trained, &d), GCC_OK) << d.msg;
  uint8_t *bytes = nullptr;
  size_t nbytes = 0;
  ASSERT_EQ(gcc_model_serialize(trained, &bytes, &nbytes, &d), GCC_OK) << d.msg;
  gcc_graph *back = nullptr;
  ASSERT_EQ(gcc_model_parse(bytes, nbytes, "trained.pb", &back, &d), GCC_OK) << d.msg;
  free(bytes);
  int states = 0;
  for (int v = 0; v < back->n_values; v++) {
    if (!back->values[v].state)
      continue;
    states++;
    const gcc_test::FixtureArray &want = fx.Get(std::string("final.") + back->values[v].name);
    const float *got = static_cast<const float *>(back->values[v].data);
    for (int64_t i = 0; i < want.numel(); ++i)
      EXPECT_LE(std::fabs(got[i] - want.f32()[i]),
                kRtol * std::max(std::fabs((double)want.f32()[i]), kFloor))
          << back->values[v].name << "[" << i << "] in the saved model";
  }
  EXPECT_EQ(states, n_state);
  gcc_graph_free(back);
  gcc_graph_free(trained);
  std::printf("[train_import] %s%s: %d tensors after 3 steps, worst error %.3f of the tolerance\n",
              name.c_str(), cuda ? " (CUDA plan)" : "", checked, worst);
  gcc_session_destroy(s);
  gcc_graph_free(g);
}

TEST(TrainImport, ResNetStyleMatchesPyTorchOnTheCpu) {
  TrainAndCompare("resnet_tiny", false);
}
TEST(TrainImport, ResNetStyleMatchesPyTorchOnTheCudaPlan) {
  TrainAndCompare("resnet_tiny", true);
}
TEST(TrainImport, MobileNetStyleMatchesPyTorchOnTheCpu) {
  TrainAndCompare("mobilenet_tiny", false, "", 1);
}
TEST(TrainImport, MobileNetStyleMatchesPyTorchOnTheCudaPlan) {
  TrainAndCompare("mobilenet_tiny", true, "", 1);
}
// Exports made with TrainingMode.PRESERVE (of model.train()) and EVAL
// import and train alike: PRESERVE is the TRAINING graph (Dropout trains);
// EVAL has no Dropout left (PyTorch removes it, and folds BatchNorm into
// the Convs), and trains as PyTorch does that model.
TEST(TrainImport, MobileNetPreserveExportTrainsAsTheTrainingExport) {
  TrainAndCompare("mobilenet_tiny", false, "mobilenet_tiny_preserve", 1);
}
TEST(TrainImport, MobileNetEvalExportTrainsWithoutDropout) {
  TrainAndCompare("mobilenet_tiny", false, "mobilenet_tiny_eval", 0, "eval_export.");
}

// ---- shared initializers (issue 30) -------------------------------------------------

// Conv -> BN -> Relu -> Conv -> BN -> GlobalAveragePool -> Flatten -> Gemm,
// BatchNorms as a fresh nn.BatchNorm2d has them (weight and running_var
// ones, bias and running_mean zeros). `shared`: every BN input reads one of
// two initializers "ones" / "zeros", as the TorchScript exporter's
// deduplication of equal initializers writes them; otherwise each input has
// its own initializer of the same values.
std::vector<uint8_t> FreshBnNet(bool shared) {
  gcc_test::OnnxModel m(14);
  constexpr int64_t kC = 3;
  m.Input("input", {gcc_test::kBatch, 2, 5, 5});
  auto fill = [](int64_t n, float scale, float off) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; i++)
      v[i] = off + scale * (float)((i * 5) % 11);
    return v;
  };
  m.Init("w1", {kC, 2, 3, 3}, fill(kC * 2 * 9, 0.05f, -0.25f));
  m.Init("w2", {kC, kC, 3, 3}, fill(kC * kC * 9, -0.04f, 0.2f));
  m.Init("fc.w", {4, kC}, fill(4 * kC, 0.1f, -0.5f));
  m.Init("fc.b", {4}, fill(4, 0.1f, -0.1f));
  std::vector<float> ones(kC, 1.0f), zeros(kC, 0.0f);
  if (shared) {
    m.Init("ones", {kC}, ones);
    m.Init("zeros", {kC}, zeros);
  }
  auto bn = [&](const std::string &p, const std::string &x, const std::string &y) {
    std::vector<std::string> in = {x, "ones", "zeros", "zeros", "ones"};
    if (!shared) {
      in = {x, p + ".weight", p + ".bias", p + ".running_mean", p + ".running_var"};
      m.Init(in[1], {kC}, ones);
      m.Init(in[2], {kC}, zeros);
      m.Init(in[3], {kC}, zeros);
      m.Init(in[4], {kC}, ones);
    }
    m.Node("BatchNormalization", in, {y}, {m.Float("momentum", 0.9f), m.Int("training_mode", 1)},
           p);
  };
  m.Node("Conv", {"input", "w1"}, {"c1"}, {m.Ints("pads", {1, 1, 1, 1})}, "conv1");
  bn("bn1", "c1", "b1");
  m.Node("Relu", {"b1"}, {"r1"}, {}, "relu1");
  m.Node("Conv", {"r1", "w2"}, {"c2"}, {m.Ints("pads", {1, 1, 1, 1})}, "conv2");
  bn("bn2", "c2", "b2");
  m.Node("GlobalAveragePool", {"b2"}, {"p"}, {}, "pool");
  m.Node("Flatten", {"p"}, {"f"}, {}, "flatten");
  m.Node("Gemm", {"f", "fc.w", "fc.b"}, {"logits"}, {m.Int("transB", 1)}, "fc");
  m.Output("logits");
  return m.Bytes();
}

// Imports `bytes` for training with cross-entropy and SGD (momentum), trains
// 3 steps on a fixed batch of 4 and returns the 3 losses and the evaluation
// logits after them (which read the running statistics).
void TrainFreshBnNet(const std::vector<uint8_t> &bytes, std::vector<float> *out, int *n_params,
                     int *n_state) {
  gcc_onnx_options o{};
  o.train = 1;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_onnx_import(bytes.data(), bytes.size(), "fresh_bn.onnx", &o, &g, nullptr, &d),
            GCC_OK)
      << d.msg;
  // every initializer is read by one node: no parameter or statistic shared
  std::vector<int> readers(g->n_values, 0);
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_inputs; k++)
      if (g->nodes[i].inputs[k] >= 0)
        readers[g->nodes[i].inputs[k]]++;
  *n_params = *n_state = 0;
  for (int v = 0; v < g->n_values; v++) {
    if (g->values[v].kind != GCC_VALUE_PARAM)
      continue;
    EXPECT_EQ(readers[v], 1) << g->values[v].name << " is read by " << readers[v] << " inputs";
    (g->values[v].state ? *n_state : *n_params) += 1;
  }
  int logits = gcc_graph_find(g, "logits"), labels = -1, loss = -1, node = -1;
  ASSERT_GE(logits, 0);
  gcc_shape ls = {1, {GCC_BATCH_DIM}}, scalar = {0, {0}};
  ASSERT_EQ(
      gcc_graph_add_value(g, "labels", GCC_DT_INT64, &ls, GCC_VALUE_INPUT, nullptr, 0, &labels, &d),
      GCC_OK);
  ASSERT_EQ(gcc_graph_add_input(g, labels), GCC_OK);
  int ins[2] = {logits, labels};
  ASSERT_EQ(gcc_graph_add_value(g, "loss", GCC_DT_FLOAT32, &scalar, GCC_VALUE_ACTIVATION, nullptr,
                                0, &loss, &d),
            GCC_OK);
  ASSERT_EQ(
      gcc_graph_add_node(g, "loss", GCC_OP_SOFTMAX_CROSS_ENTROPY, ins, 2, &loss, 1, &node, &d),
      GCC_OK);
  ASSERT_EQ(gcc_graph_add_output(g, loss), GCC_OK);
  ASSERT_EQ(gcc_graph_link(g, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_graph_toposort(g, &d), GCC_OK) << d.msg;
  gcc_training *t = &g->training;
  t->present = 1;
  t->loss = gcc_strdup("loss");
  t->prediction = gcc_strdup("logits");
  t->input = gcc_strdup("input");
  t->target = gcc_strdup("labels");
  t->opt.kind = GCC_OPT_SGD;
  t->opt.lr = 0.1f;
  t->opt.momentum = 0.9f;
  t->batch_size = 4;
  t->epochs = 1;
  gcc_session_options so{};
  so.threads = 1;
  so.opt = g->training.opt;
  gcc_session *s = nullptr;
  ASSERT_EQ(gcc_session_create(g, &so, &s, &d), GCC_OK) << d.msg;
  std::vector<float> x(4 * 2 * 5 * 5);
  for (size_t i = 0; i < x.size(); i++)
    x[i] = (float)((i * 7) % 13) / 13.0f - 0.4f;
  const int64_t y[4] = {0, 3, 1, 2};
  for (int step = 0; step < 3; step++) {
    float l = 0;
    ASSERT_EQ(gcc_session_train_step(s, x.data(), y, 4, &l, &d), GCC_OK) << d.msg;
    out->push_back(l);
  }
  float eval_loss = 0;
  int64_t correct = 0;
  const gcc_tensor *pred = nullptr;
  ASSERT_EQ(gcc_session_eval_batch(s, x.data(), y, 4, &eval_loss, &correct, &pred, &d), GCC_OK)
      << d.msg;
  ASSERT_NE(pred, nullptr);
  const float *p = static_cast<const float *>(pred->data);
  out->insert(out->end(), p, p + pred->numel);
  gcc_session_destroy(s);
  gcc_graph_free(g);
}

// The TorchScript exporter stores equal initializers once; importing for
// training gives each parameter and running statistic its own copy, so the
// deduplicated file trains as the one with distinct initializers (which
// PyTorch's model is): the same losses over 3 SGD steps and the same
// evaluation logits (the running statistics updated per BatchNorm). Same
// ops in the same order on the same machine: equal to float32 rounding of a
// different arena layout, 1e-6 relative (nothing reassociates: expected
// bit-equal).
TEST(TrainImport, SharedInitializersTrainAsDistinctOnes) {
  std::vector<float> shared, distinct;
  int np_s = 0, ns_s = 0, np_d = 0, ns_d = 0;
  TrainFreshBnNet(FreshBnNet(true), &shared, &np_s, &ns_s);
  TrainFreshBnNet(FreshBnNet(false), &distinct, &np_d, &ns_d);
  EXPECT_EQ(np_s, np_d) << "parameters";
  EXPECT_EQ(ns_s, 4) << "two running statistics per BatchNormalization";
  EXPECT_EQ(ns_d, 4);
  ASSERT_EQ(shared.size(), distinct.size());
  ASSERT_EQ(shared.size(), 3u + 16u);
  for (size_t i = 0; i < shared.size(); i++)
    EXPECT_LE(std::fabs(shared[i] - distinct[i]), 1e-6 * std::max(1.0f, std::fabs(distinct[i])))
        << (i < 3 ? "loss of step " + std::to_string(i + 1)
                  : "eval logit " + std::to_string(i - 3));
  EXPECT_NE(shared[0], shared[2]) << "the loss moves: the test trains";
}

} // namespace
