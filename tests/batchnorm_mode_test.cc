// batchnorm_mode_test: who decides between BatchNormalization's two forms
// (graph/ops.c): the compiler, by mode, never the model. An ONNX model
// imported for training (gcc_onnx_options.train, what gcc-train and
// gcc-import ask for with a recipe) keeps BatchNormalization with its
// running statistics as state. Evaluation normalises with the running
// statistics and leaves them as they are even in a graph built with
// `training` set (autodiff clears it); a training step updates them as
// nn.BatchNorm2d does (checked against float64 arithmetic written out
// here); and a model file that sets `training` is refused when loaded,
// naming the node and the attribute.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "graph/ir.h"
#include "graph/loader.h"
#include "graph/ops.h"
#include "graph/recipe.h"
#include "onnx/import.h"
#include "runtime/session.h"
}
#include "tests/onnx_builder.h"

namespace {

using gcc_test::kBatch;
using gcc_test::OnnxModel;

constexpr int kC = 3, kRows = 4;
constexpr double kEps = 1e-5, kMomentum = 0.9; // ONNX's momentum (PyTorch's 0.1)
const std::vector<float> kScale = {1.5f, 0.5f, -0.75f}, kBias = {0.1f, -0.2f, 0.3f};
const std::vector<float> kMean = {0.3f, -0.1f, 0.0f}, kVar = {2.0f, 0.5f, 1.0f};
const float kX[kRows * kC] = {0.5f,  -1.0f, 2.0f, 1.5f, 0.25f, -0.5f,
                              -2.0f, 0.75f, 1.0f, 0.0f, 1.25f, 3.0f};
const int64_t kLabels[kRows] = {0, 1, 2, 1};

// x (N, 3) -> BatchNormalization -> y, the logits of a cross-entropy recipe
// (SGD, lr 0.1): imported for training, with `training` set on the IR node
// when `set_training` (as a graph builder might).
gcc_graph *Model(bool set_training, std::string *err) {
  OnnxModel m(13);
  m.Input("x", {kBatch, kC});
  m.Init("bn_scale", {kC}, kScale);
  m.Init("bn_bias", {kC}, kBias);
  m.Init("bn_mean", {kC}, kMean);
  m.Init("bn_var", {kC}, kVar);
  m.Node("BatchNormalization", {"x", "bn_scale", "bn_bias", "bn_mean", "bn_var"}, {"y"},
         {m.Float("epsilon", (float)kEps), m.Float("momentum", (float)kMomentum)}, "bn");
  m.Output("y");
  std::vector<uint8_t> bytes = m.Bytes();
  gcc_onnx_options o{};
  o.train = 1;
  gcc_graph *g = nullptr, *t = nullptr;
  gcc_onnx_report rep{};
  gcc_diag d{};
  if (gcc_onnx_import(bytes.data(), bytes.size(), "bn.onnx", &o, &g, &rep, &d) != GCC_OK) {
    *err = d.msg;
    return nullptr;
  }
  if (rep.n_bn_train != 1 || rep.n_bn_folded != 0) {
    *err = "the import did not keep the BatchNormalization for training";
    gcc_graph_free(g);
    return nullptr;
  }
  gcc_recipe r;
  gcc_recipe_init(&r);
  if (gcc_recipe_set(&r, "--loss", "cross-entropy", &d) != GCC_OK ||
      gcc_recipe_set(&r, "--lr", "0.1", &d) != GCC_OK ||
      gcc_recipe_apply(g, &r, &t, &d) != GCC_OK) {
    *err = d.msg;
    gcc_graph_free(g);
    return nullptr;
  }
  gcc_graph_free(g);
  if (set_training) {
    int bn = -1;
    for (int i = 0; i < t->n_nodes; i++)
      if (t->nodes[i].op == GCC_OP_BATCH_NORM)
        bn = i;
    if (bn < 0 || gcc_node_set_int(t, bn, "training", 1) != GCC_OK) {
      *err = "no BatchNormalization node";
      gcc_graph_free(t);
      return nullptr;
    }
  }
  return t;
}

// Y = scale (x - mean) / sqrt(var + eps) + B, in float64.
std::vector<double> EvalReference(const std::vector<double> &mean, const std::vector<double> &var) {
  std::vector<double> y(kRows * kC);
  for (int i = 0; i < kRows; i++)
    for (int c = 0; c < kC; c++)
      y[i * kC + c] = kScale[c] * (kX[i * kC + c] - mean[c]) / std::sqrt(var[c] + kEps) + kBias[c];
  return y;
}

std::vector<double> Param(gcc_session *s, const char *name) {
  float *p = nullptr;
  int64_t n = 0;
  gcc_diag d{};
  EXPECT_EQ(gcc_session_param(s, name, &p, &n, &d), GCC_OK) << name << ": " << d.msg;
  return p ? std::vector<double>(p, p + n) : std::vector<double>();
}

void ExpectNear(const std::vector<double> &got, const std::vector<double> &want,
                const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); i++)
    EXPECT_NEAR(got[i], want[i], 1e-5 * std::max(1.0, std::fabs(want[i])))
        << what << "[" << i << "]";
}

void EvalAndCheck(gcc_session *s, const std::vector<double> &mean, const std::vector<double> &var,
                  const std::string &what) {
  float loss = NAN;
  int64_t correct = -1;
  const gcc_tensor *pred = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_session_eval_batch(s, kX, kLabels, kRows, &loss, &correct, &pred, &d), GCC_OK)
      << d.msg;
  ASSERT_NE(pred, nullptr);
  const float *y = static_cast<const float *>(pred->data);
  ExpectNear(std::vector<double>(y, y + kRows * kC), EvalReference(mean, var), what + ": logits");
}

void EvaluationKeepsAndTrainingUpdates(bool set_training) {
  SCOPED_TRACE(set_training ? "graph built with training = 1" : "imported graph");
  std::string err;
  gcc_graph *g = Model(set_training, &err);
  ASSERT_NE(g, nullptr) << err;
  int mean_v = gcc_graph_find(g, "bn_mean"), var_v = gcc_graph_find(g, "bn_var");
  ASSERT_GE(mean_v, 0);
  ASSERT_GE(var_v, 0);
  EXPECT_EQ(g->values[mean_v].kind, GCC_VALUE_PARAM);
  EXPECT_TRUE(g->values[mean_v].state);
  EXPECT_TRUE(g->values[var_v].state);
  gcc_session_options so{};
  so.threads = 1;
  so.opt = g->training.opt;
  gcc_session *s = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_session_create(g, &so, &s, &d), GCC_OK) << d.msg;
  std::vector<double> mean(kMean.begin(), kMean.end()), var(kVar.begin(), kVar.end());
  // evaluation, twice: the running statistics normalise and stay
  for (int k = 0; k < 2; k++) {
    EvalAndCheck(s, mean, var, "evaluation " + std::to_string(k + 1));
    ExpectNear(Param(s, "bn_mean"), mean, "running mean after evaluation");
    ExpectNear(Param(s, "bn_var"), var, "running var after evaluation");
  }
  // a training step: running = momentum running + (1 - momentum) batch
  // statistic, the variance unbiased (n / (n - 1)) as nn.BatchNorm2d keeps it
  float loss = NAN;
  ASSERT_EQ(gcc_session_train_step(s, kX, kLabels, kRows, &loss, &d), GCC_OK) << d.msg;
  for (int c = 0; c < kC; c++) {
    double bm = 0, bv = 0;
    for (int i = 0; i < kRows; i++)
      bm += kX[i * kC + c] / (double)kRows;
    for (int i = 0; i < kRows; i++)
      bv += (kX[i * kC + c] - bm) * (kX[i * kC + c] - bm) / (double)(kRows - 1);
    mean[c] = kMomentum * mean[c] + (1 - kMomentum) * bm;
    var[c] = kMomentum * var[c] + (1 - kMomentum) * bv;
  }
  ExpectNear(Param(s, "bn_mean"), mean, "running mean after a training step");
  ExpectNear(Param(s, "bn_var"), var, "running var after a training step");
  // and evaluation then uses the updated ones (scale and B moved too: read
  // them back for the reference)
  std::vector<double> scale = Param(s, "bn_scale"), bias = Param(s, "bn_bias");
  ASSERT_EQ(scale.size(), (size_t)kC);
  float l2 = NAN;
  int64_t correct = -1;
  const gcc_tensor *pred = nullptr;
  ASSERT_EQ(gcc_session_eval_batch(s, kX, kLabels, kRows, &l2, &correct, &pred, &d), GCC_OK)
      << d.msg;
  const float *y = static_cast<const float *>(pred->data);
  for (int i = 0; i < kRows; i++)
    for (int c = 0; c < kC; c++) {
      double want = scale[c] * (kX[i * kC + c] - mean[c]) / std::sqrt(var[c] + kEps) + bias[c];
      EXPECT_NEAR(y[i * kC + c], want, 1e-5 * std::max(1.0, std::fabs(want))) << i << ", " << c;
    }
  ExpectNear(Param(s, "bn_mean"), mean, "running mean after the last evaluation");
  gcc_session_destroy(s);
  gcc_graph_free(g);
}

TEST(BatchNormMode, EvaluationKeepsTheRunningStatisticsAndTrainingUpdatesThem) {
  EvaluationKeepsAndTrainingUpdates(false);
}

TEST(BatchNormMode, TrainingSetByTheBuilderDoesNotMakeEvaluationUpdate) {
  EvaluationKeepsAndTrainingUpdates(true);
}

TEST(BatchNormMode, AModelFileThatSetsTrainingIsRefused) {
  std::string err;
  for (bool set : {true, false}) {
    gcc_graph *g = Model(set, &err);
    ASSERT_NE(g, nullptr) << err;
    if (!set) { // `training` = 0 written out explicitly is the evaluation form: fine
      for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == GCC_OP_BATCH_NORM) {
          ASSERT_EQ(gcc_node_set_int(g, i, "training", 0), GCC_OK);
        }
    }
    uint8_t *bytes = nullptr;
    size_t size = 0;
    gcc_diag d{};
    ASSERT_EQ(gcc_model_serialize(g, &bytes, &size, &d), GCC_OK) << d.msg;
    gcc_graph *back = nullptr;
    gcc_status s = gcc_model_parse(bytes, size, "bn.pb", &back, &d);
    free(bytes);
    if (set) {
      EXPECT_EQ(s, GCC_ERR_INVALID_GRAPH);
      EXPECT_NE(std::strstr(d.msg, "bn.pb: node 'bn' (BatchNormalization)"), nullptr) << d.msg;
      EXPECT_NE(std::strstr(d.msg, "attribute 'training' is set"), nullptr) << d.msg;
      EXPECT_EQ(back, nullptr);
    } else {
      EXPECT_EQ(s, GCC_OK) << d.msg;
    }
    gcc_graph_free(back);
    gcc_graph_free(g);
  }
}

} // namespace
