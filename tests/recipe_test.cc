// Training recipes from flags (graph/recipe.h): the spec built on an
// imported ONNX model and laid over a native .pb's, every bad recipe refused
// naming its flag, and the command lines (gcc-import -o x.pb --loss ...,
// gcc-train model.onnx --loss ...) exiting 2 before any data is read.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <zip.h>
#include <zlib.h>

extern "C" {
#include "datasets/dataloader.h"
#include "datasets/dataset.h"
#include "datasets/npy.h"
#include "graph/loader.h"
#include "graph/ops.h"
#include "graph/recipe.h"
#include "graph/rng.h"
#include "onnx/model_file.h"
}
#include "tests/onnx_builder.h"
#include "tests/testutil.h"

using namespace gcc_test;

namespace {

// x (N, 4) -> Gemm (3 outputs) -> Relu -> y; or y (N, 3, 1) after an
// Unsqueeze when `three_d`.
std::vector<uint8_t> Mlp(bool three_d = false) {
  OnnxModel m(13);
  m.Input("x", {kBatch, 4});
  std::vector<float> w(12), b(3);
  for (int i = 0; i < 12; i++)
    w[i] = 0.1f * (float)(i % 5) - 0.2f;
  for (int i = 0; i < 3; i++)
    b[i] = 0.05f * (float)i;
  m.Init("W", {3, 4}, w);
  m.Init("B", {3}, b);
  m.Node("Gemm", {"x", "W", "B"}, {"h"}, {m.Int("transB", 1)});
  if (three_d) { /* (N, 3, 1, 1): neither (N, C) nor (B, T, V) logits */
    m.InitI64("axes", {2}, {2, 3});
    m.Node("Relu", {"h"}, {"r"});
    m.Node("Unsqueeze", {"r", "axes"}, {"y"});
  } else {
    m.Node("Relu", {"h"}, {"y"});
  }
  m.Output("y");
  return m.Bytes();
}

gcc_graph *Open(const std::vector<uint8_t> &bytes) {
  gcc_graph *g = nullptr;
  gcc_diag d{};
  EXPECT_EQ(gcc_model_open_memory(bytes.data(), bytes.size(), "mlp.onnx", &g, nullptr, &d), GCC_OK)
      << d.msg;
  return g;
}

struct Flags {
  std::vector<std::pair<std::string, std::string>> kv;
};

// Sets every flag; returns the first failure's status and message.
gcc_status Set(gcc_recipe *r, const Flags &f, std::string *msg) {
  gcc_recipe_init(r);
  for (const auto &p : f.kv) {
    gcc_diag d{};
    gcc_status s =
        gcc_recipe_set(r, p.first.c_str(), p.second.empty() ? nullptr : p.second.c_str(), &d);
    if (s != GCC_OK) {
      *msg = d.msg;
      return s;
    }
  }
  gcc_diag d{};
  gcc_status s = gcc_recipe_check(r, &d);
  *msg = d.msg;
  return s;
}

TEST(Recipe, BadValuesNameTheFlag) {
  struct Case {
    const char *flag, *value;
  } cases[] = {
      {"--lr", "0"},
      {"--lr", "-0.1"},
      {"--lr", "nan"},
      {"--lr", "inf"},
      {"--lr", "1e-50"},
      {"--lr", "abc"},
      {"--lr", ""},
      {"--momentum", "1"},
      {"--momentum", "-0.5"},
      {"--weight-decay", "-1"},
      {"--optimizer", "rmsprop"},
      {"--loss", "hinge"},
      {"--dataset", "imagenet"},
      {"--batch-size", "0"},
      {"--epochs", "-1"},
  };
  for (const Case &c : cases) {
    gcc_recipe r;
    gcc_recipe_init(&r);
    gcc_diag d{};
    EXPECT_EQ(gcc_recipe_set(&r, c.flag, c.value, &d), GCC_ERR_INVALID_ARGUMENT)
        << c.flag << " " << c.value;
    std::string want = std::string(c.flag) + " '" + c.value + "'";
    EXPECT_NE(std::string(d.msg).find(want), std::string::npos) << d.msg;
  }
}

TEST(Recipe, BadCombinationsNameTheFlag) {
  struct Case {
    Flags f;
    const char *flag;
  } cases[] = {
      {{{{"--optimizer", "adam"}, {"--momentum", "0.9"}}}, "--momentum"},
      {{{{"--optimizer", "adam"}, {"--nesterov", ""}}}, "--nesterov"},
      {{{{"--momentum", "0"}, {"--nesterov", ""}}}, "--nesterov"},
  };
  for (const Case &c : cases) {
    gcc_recipe r;
    std::string msg;
    EXPECT_EQ(Set(&r, c.f, &msg), GCC_ERR_INVALID_ARGUMENT) << c.flag;
    EXPECT_NE(msg.find(c.flag), std::string::npos) << msg;
  }
}

TEST(Recipe, BuildsTheSpecOfAnImportedModel) {
  gcc_graph *m = Open(Mlp());
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(m->training.present);
  gcc_recipe r;
  std::string msg;
  ASSERT_EQ(Set(&r,
                {{{"--loss", "cross-entropy"},
                  {"--lr", "0.05"},
                  {"--momentum", "0.9"},
                  {"--nesterov", ""},
                  {"--weight-decay", "5e-4"},
                  {"--batch-size", "32"},
                  {"--epochs", "3"},
                  {"--dataset", "cifar10"}}},
                &msg),
            GCC_OK)
      << msg;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_recipe_apply(m, &r, &g, &d), GCC_OK) << d.msg;
  const gcc_training &t = g->training;
  ASSERT_TRUE(t.present);
  EXPECT_STREQ(t.input, "x");
  EXPECT_STREQ(t.prediction, "y");
  EXPECT_STREQ(t.target, "target");
  EXPECT_STREQ(t.loss, "loss");
  EXPECT_STREQ(t.dataset, "cifar10");
  EXPECT_EQ(t.batch_size, 32);
  EXPECT_EQ(t.epochs, 3);
  EXPECT_EQ(t.opt.kind, GCC_OPT_SGD);
  EXPECT_FLOAT_EQ(t.opt.lr, 0.05f);
  EXPECT_FLOAT_EQ(t.opt.momentum, 0.9f);
  EXPECT_FLOAT_EQ(t.opt.weight_decay, 5e-4f);
  EXPECT_EQ(t.opt.nesterov, 1);
  int target = gcc_graph_find(g, "target"), loss = gcc_graph_find(g, "loss");
  ASSERT_GE(target, 0);
  ASSERT_GE(loss, 0);
  EXPECT_EQ(g->values[target].dtype, GCC_DT_INT64);
  ASSERT_EQ(g->values[target].shape.ndim, 1);
  EXPECT_EQ(g->values[target].shape.dims[0], GCC_BATCH_DIM);
  EXPECT_EQ(g->nodes[g->values[loss].producer].op, GCC_OP_SOFTMAX_CROSS_ENTROPY);
  // the model given is untouched
  EXPECT_FALSE(m->training.present);
  EXPECT_LT(gcc_graph_find(m, "target"), 0);

  // mse: a float32 target of the prediction's shape; adam's defaults
  gcc_graph *g2 = nullptr;
  ASSERT_EQ(Set(&r, {{{"--loss", "mse"}, {"--optimizer", "adam"}}}, &msg), GCC_OK) << msg;
  // class labels do not fit mse ...
  EXPECT_EQ(gcc_recipe_apply(m, &r, &g2, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("--loss mse"), std::string::npos) << d.msg;
  gcc_graph_free(g);
  gcc_graph_free(m);
}

TEST(Recipe, RefusesWhatDoesNotFitTheModel) {
  gcc_graph *m = Open(Mlp());
  gcc_graph *m3 = Open(Mlp(true));
  ASSERT_NE(m, nullptr);
  ASSERT_NE(m3, nullptr);
  struct Case {
    gcc_graph *model;
    Flags f;
    const char *want;
  } cases[] = {
      {m, {{{"--epochs", "2"}}}, "give --loss"},
      {m, {{{"--loss", "cross-entropy"}}}, "needs --lr"},
      {m3, {{{"--loss", "cross-entropy"}, {"--lr", "0.1"}}}, "cross-entropy needs logits (N, C)"},
  };
  for (const Case &c : cases) {
    gcc_recipe r;
    std::string msg;
    ASSERT_EQ(Set(&r, c.f, &msg), GCC_OK) << msg;
    gcc_graph *g = nullptr;
    gcc_diag d{};
    EXPECT_EQ(gcc_recipe_apply(c.model, &r, &g, &d), GCC_ERR_INVALID_ARGUMENT) << c.want;
    EXPECT_NE(std::string(d.msg).find(c.want), std::string::npos) << d.msg;
    EXPECT_EQ(g, nullptr);
  }
  gcc_graph_free(m);
  gcc_graph_free(m3);
}

TEST(Recipe, OverridesANativeSpec) {
  std::string path = Runfile("models/mnist_mlp.pb");
  gcc_graph *m = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_load(path.c_str(), &m, &d), GCC_OK) << d.msg;
  ASSERT_EQ(m->training.opt.kind, GCC_OPT_SGD);
  gcc_recipe r;
  std::string msg;
  // lr and epochs only: the rest of the spec stays
  ASSERT_EQ(Set(&r, {{{"--lr", "0.02"}, {"--epochs", "2"}}}, &msg), GCC_OK) << msg;
  gcc_graph *g = nullptr;
  ASSERT_EQ(gcc_recipe_apply(m, &r, &g, &d), GCC_OK) << d.msg;
  EXPECT_FLOAT_EQ(g->training.opt.lr, 0.02f);
  EXPECT_FLOAT_EQ(g->training.opt.momentum, m->training.opt.momentum);
  EXPECT_EQ(g->training.epochs, 2);
  EXPECT_EQ(g->training.batch_size, m->training.batch_size);
  EXPECT_STREQ(g->training.loss, m->training.loss);
  EXPECT_EQ(g->n_nodes, m->n_nodes);
  gcc_graph_free(g);
  // another optimizer takes its own defaults
  ASSERT_EQ(Set(&r, {{{"--optimizer", "adam"}}}, &msg), GCC_OK) << msg;
  ASSERT_EQ(gcc_recipe_apply(m, &r, &g, &d), GCC_OK) << d.msg;
  EXPECT_EQ(g->training.opt.kind, GCC_OPT_ADAM);
  EXPECT_FLOAT_EQ(g->training.opt.lr, 1e-3f);
  EXPECT_FLOAT_EQ(g->training.opt.beta2, 0.999f);
  // and an adam model refuses --momentum
  gcc_graph *g2 = nullptr;
  ASSERT_EQ(Set(&r, {{{"--momentum", "0.9"}}}, &msg), GCC_OK) << msg;
  EXPECT_EQ(gcc_recipe_apply(g, &r, &g2, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("--momentum"), std::string::npos) << d.msg;
  gcc_graph_free(g);
  // another loss than the model's is refused
  ASSERT_EQ(Set(&r, {{{"--loss", "mse"}}}, &msg), GCC_OK) << msg;
  EXPECT_EQ(gcc_recipe_apply(m, &r, &g2, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("--loss mse"), std::string::npos) << d.msg;
  gcc_graph_free(m);
}

// ---- command lines -----------------------------------------------------------------------

struct Result {
  int code = -1;
  std::string out, err;
};

Result Exec(const std::string &tool, const std::vector<std::string> &args) {
  Result r;
  std::string bin = Runfile("cli/" + tool);
  if (bin.empty()) {
    r.err = tool + " not found in the runfiles";
    return r;
  }
  static int n = 0;
  std::string out = TmpPath("o" + std::to_string(n)), err = TmpPath("e" + std::to_string(n));
  n++;
  pid_t pid = fork();
  if (pid == 0) {
    int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(o, 1);
    dup2(e, 2);
    unsetenv("BUILD_WORKING_DIRECTORY");
    std::vector<char *> argv = {const_cast<char *>(bin.c_str())};
    for (const std::string &a : args)
      argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadText(out);
  r.err = ReadText(err);
  return r;
}

std::ostream &operator<<(std::ostream &os, const Result &r) {
  return os << "exit " << r.code << "\n--- stdout ---\n" << r.out << "--- stderr ---\n" << r.err;
}

// A 784 -> 10 classifier on MNIST images (Flatten, Gemm).
std::string MnistOnnx() {
  OnnxModel m(13);
  m.Input("image", {kBatch, 1, 28, 28});
  std::vector<float> w(7840), b(10, 0.0f);
  for (size_t i = 0; i < w.size(); i++)
    w[i] = 0.01f * (float)((i * 7919) % 13) - 0.06f;
  m.Init("W", {10, 784}, w);
  m.Init("B", {10}, b);
  m.Node("Flatten", {"image"}, {"flat"}, {m.Int("axis", 1)});
  m.Node("Gemm", {"flat", "W", "B"}, {"logits"}, {m.Int("transB", 1)});
  m.Output("logits");
  std::string path = TmpPath("mnist_linear.onnx");
  std::vector<uint8_t> bytes = m.Bytes();
  EXPECT_TRUE(WriteFile(path, bytes.data(), bytes.size()));
  return path;
}

TEST(RecipeCli, BadRecipesExit2BeforeReadingData) {
  std::string onnx = MnistOnnx();
  // --data names a folder that does not exist: reading it would be exit 1
  const std::vector<std::vector<std::string>> cases = {
      {"--optimizer", "rmsprop"},
      {"--loss", "cross-entropy", "--lr", "0"},
      {"--loss", "cross-entropy", "--lr", "inf"},
      {"--loss", "cross-entropy", "--optimizer", "adam", "--momentum", "0.9"},
      {"--loss", "cross-entropy"},
      {"--epochs", "1"},
      {"--loss", "mse", "--lr", "0.1"},
  };
  const char *flags[] = {"--optimizer", "--lr", "--lr", "--momentum", "--lr", "--loss", "--loss"};
  for (size_t i = 0; i < cases.size(); i++) {
    std::vector<std::string> args = {onnx,          "--device", "cpu",
                                     "--no-output", "--data",   "/nonexistent/mnist"};
    args.insert(args.end(), cases[i].begin(), cases[i].end());
    Result r = Exec("gcc-train", args);
    EXPECT_EQ(r.code, 2) << r;
    EXPECT_NE(r.err.find(flags[i]), std::string::npos) << r;
    EXPECT_EQ(r.err.find("/nonexistent"), std::string::npos) << r;
    args[0] = onnx;
    std::vector<std::string> iargs = {onnx, "-o", TmpPath("bad.pb")};
    iargs.insert(iargs.end(), cases[i].begin(), cases[i].end());
    Result ri = Exec("gcc-import", iargs);
    EXPECT_EQ(ri.code, 2) << ri;
    EXPECT_NE(ri.err.find(flags[i]), std::string::npos) << ri;
  }
}

TEST(RecipeCli, ImportWritesATrainablePbThatTrainsAsTheOnnxDoes) {
  std::string onnx = MnistOnnx(), pb = TmpPath("trainable.pb");
  std::vector<std::string> recipe = {"--loss",     "cross-entropy", "--lr",         "0.05",
                                     "--momentum", "0.9",           "--batch-size", "50"};
  std::vector<std::string> args = {onnx, "-o", pb, "--quiet"};
  args.insert(args.end(), recipe.begin(), recipe.end());
  Result imp = Exec("gcc-import", args);
  ASSERT_EQ(imp.code, 0) << imp;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_load(pb.c_str(), &g, &d), GCC_OK) << d.msg;
  EXPECT_TRUE(g->training.present);
  EXPECT_EQ(g->training.batch_size, 50);
  EXPECT_FLOAT_EQ(g->training.opt.momentum, 0.9f);
  gcc_graph_free(g);
  // the .pb and the ONNX file with the same flags train identically
  std::string data = Runfile("data/mnist");
  std::vector<std::string> common = {"--device",    "cpu",    "--threads",   "1",
                                     "--max-steps", "30",     "--log-every", "10",
                                     "--no-output", "--data", data};
  std::vector<std::string> a1 = {pb};
  a1.insert(a1.end(), common.begin(), common.end());
  std::vector<std::string> a2 = {onnx};
  a2.insert(a2.end(), common.begin(), common.end());
  a2.insert(a2.end(), recipe.begin(), recipe.end());
  Result r1 = Exec("gcc-train", a1), r2 = Exec("gcc-train", a2);
  ASSERT_EQ(r1.code, 0) << r1;
  ASSERT_EQ(r2.code, 0) << r2;
  auto losses = [](const std::string &out) {
    std::string s;
    size_t p = 0;
    while ((p = out.find("] loss: ", p)) != std::string::npos) {
      size_t e = out.find('\n', p);
      s += out.substr(p, e - p) + ";";
      p = e;
    }
    return s;
  };
  EXPECT_FALSE(losses(r1.out).empty()) << r1;
  EXPECT_EQ(losses(r1.out), losses(r2.out)) << r1 << r2;
}

// image (N, 1, 28, 28) -> Conv (4 filters 3x3, pad 1, no bias) ->
// BatchNormalization (running mean 0, var 1) -> Relu -> GlobalAveragePool ->
// Flatten -> Gemm (10): a BatchNormalization after a Conv, which an
// inference import folds into it.
std::string ConvBnOnnx() {
  OnnxModel m(13);
  m.Input("image", {kBatch, 1, 28, 28});
  std::vector<float> w(4 * 9), fc(40), fb(10, 0.0f);
  for (size_t i = 0; i < w.size(); i++)
    w[i] = 0.1f * (float)((i * 5) % 7) - 0.25f;
  for (size_t i = 0; i < fc.size(); i++)
    fc[i] = 0.1f * (float)((i * 3) % 11) - 0.5f;
  m.Init("conv.weight", {4, 1, 3, 3}, w);
  m.Init("bn.weight", {4}, {1.0f, 0.5f, 1.5f, 0.8f});
  m.Init("bn.bias", {4}, {0.0f, 0.1f, -0.1f, 0.2f});
  m.Init("bn.running_mean", {4}, {0.0f, 0.0f, 0.0f, 0.0f});
  m.Init("bn.running_var", {4}, {1.0f, 1.0f, 1.0f, 1.0f});
  m.Init("fc.weight", {10, 4}, fc);
  m.Init("fc.bias", {10}, fb);
  m.Node("Conv", {"image", "conv.weight"}, {"c"},
         {m.Ints("kernel_shape", {3, 3}), m.Ints("pads", {1, 1, 1, 1})});
  m.Node("BatchNormalization", {"c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"},
         {"b"}, {m.Float("epsilon", 1e-5f), m.Float("momentum", 0.9f)});
  m.Node("Relu", {"b"}, {"r"});
  m.Node("GlobalAveragePool", {"r"}, {"p"});
  m.Node("Flatten", {"p"}, {"f"}, {m.Int("axis", 1)});
  m.Node("Gemm", {"f", "fc.weight", "fc.bias"}, {"logits"}, {m.Int("transB", 1)});
  m.Output("logits");
  std::string path = TmpPath("conv_bn.onnx");
  std::vector<uint8_t> bytes = m.Bytes();
  EXPECT_TRUE(WriteFile(path, bytes.data(), bytes.size()));
  return path;
}

int CountOp(const gcc_graph *g, int op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    n += g->nodes[i].op == op;
  return n;
}

// With a recipe, gcc-import and gcc-train import an ONNX BatchNormalization
// for training (nn.BatchNorm2d: the running mean and var are state, moved by
// the training steps and saved with the model); without one it is folded
// into the Conv before it. Every run says which.
TEST(RecipeCli, OnnxBatchNormTrainsWithARecipeAndIsFoldedWithout) {
  const std::string onnx = ConvBnOnnx(), inf = TmpPath("conv_bn.inference.pb"),
                    tr = TmpPath("conv_bn.trainable.pb"), out = TmpPath("conv_bn.trained.pb");
  const std::string trained_msg = "BatchNormalization: 1 node trained as nn.BatchNorm2d";
  Result ri = Exec("gcc-import", {onnx, "-o", inf});
  ASSERT_EQ(ri.code, 0) << ri;
  EXPECT_NE(ri.out.find("folded 1 BatchNormalization node into the preceding Conv"),
            std::string::npos)
      << ri;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_load(inf.c_str(), &g, &d), GCC_OK) << d.msg;
  EXPECT_EQ(CountOp(g, GCC_OP_BATCH_NORM), 0);
  gcc_graph_free(g);

  const std::vector<std::string> recipe = {"--loss",     "cross-entropy", "--lr",         "0.05",
                                           "--momentum", "0.9",           "--batch-size", "50"};
  std::vector<std::string> args = {onnx, "-o", tr};
  args.insert(args.end(), recipe.begin(), recipe.end());
  Result rt = Exec("gcc-import", args);
  ASSERT_EQ(rt.code, 0) << rt;
  EXPECT_NE(rt.out.find("kept 1 BatchNormalization node for training"), std::string::npos) << rt;
  EXPECT_EQ(rt.out.find("into the preceding Conv"), std::string::npos) << rt;
  ASSERT_EQ(gcc_model_load(tr.c_str(), &g, &d), GCC_OK) << d.msg;
  EXPECT_EQ(CountOp(g, GCC_OP_BATCH_NORM), 1);
  for (const char *name : {"bn.running_mean", "bn.running_var"}) {
    int v = gcc_graph_find(g, name);
    ASSERT_GE(v, 0) << name;
    EXPECT_EQ(g->values[v].kind, GCC_VALUE_PARAM) << name;
    EXPECT_TRUE(g->values[v].state) << name;
  }
  gcc_graph_free(g);

  // gcc-train on the ONNX file with the recipe, and on the trainable .pb:
  // both say so, train identically, and the saved model's running
  // statistics have moved from 0 and 1
  std::string data = Runfile("data/mnist");
  std::vector<std::string> common = {"--device",    "cpu", "--threads",         "1",
                                     "--max-steps", "20",  "--log-every",       "10",
                                     "--data",      data,  "--eval-batch-size", "2000"};
  std::vector<std::string> a1 = {onnx, "--output", out};
  a1.insert(a1.end(), common.begin(), common.end());
  a1.insert(a1.end(), recipe.begin(), recipe.end());
  std::vector<std::string> a2 = {tr, "--no-output"};
  a2.insert(a2.end(), common.begin(), common.end());
  Result r1 = Exec("gcc-train", a1), r2 = Exec("gcc-train", a2);
  ASSERT_EQ(r1.code, 0) << r1;
  ASSERT_EQ(r2.code, 0) << r2;
  EXPECT_NE(r1.out.find(trained_msg), std::string::npos) << r1;
  auto losses = [](const std::string &o) {
    std::string s;
    for (size_t p = 0; (p = o.find("] loss: ", p)) != std::string::npos;) {
      size_t e = o.find('\n', p);
      s += o.substr(p, e - p) + ";";
      p = e;
    }
    return s;
  };
  EXPECT_FALSE(losses(r1.out).empty()) << r1;
  EXPECT_EQ(losses(r1.out), losses(r2.out)) << r1 << r2;
  ASSERT_EQ(gcc_model_load(out.c_str(), &g, &d), GCC_OK) << d.msg;
  EXPECT_EQ(CountOp(g, GCC_OP_BATCH_NORM), 1);
  int mv = gcc_graph_find(g, "bn.running_mean"), vv = gcc_graph_find(g, "bn.running_var");
  ASSERT_GE(mv, 0);
  ASSERT_GE(vv, 0);
  EXPECT_TRUE(g->values[mv].state);
  const float *mean = static_cast<const float *>(g->values[mv].data);
  const float *var = static_cast<const float *>(g->values[vv].data);
  for (int c = 0; c < 4; c++) {
    EXPECT_GT(std::fabs(mean[c]), 1e-3f) << "running mean " << c << " never updated";
    EXPECT_GT(std::fabs(var[c] - 1.0f), 1e-3f) << "running var " << c << " never updated";
  }
  gcc_graph_free(g);

  // --dump-placement: without a recipe the BatchNormalization is frozen
  // (folded), with one it is in the training graph with its gradient
  Result p0 = Exec("gcc-train", {onnx, "--dump-placement", "--device", "cpu"});
  ASSERT_EQ(p0.code, 0) << p0;
  EXPECT_NE(p0.err.find("BatchNormalization: 1 node frozen, imported for inference (folded "
                        "into the Conv before it)"),
            std::string::npos)
      << p0;
  std::vector<std::string> a3 = {onnx, "--dump-placement", "--device", "cpu"};
  a3.insert(a3.end(), recipe.begin(), recipe.end());
  Result p1 = Exec("gcc-train", a3);
  ASSERT_EQ(p1.code, 0) << p1;
  EXPECT_NE(p1.err.find(trained_msg), std::string::npos) << p1;
  EXPECT_NE(p1.out.find("BatchNormGrad"), std::string::npos) << p1;
}

} // namespace

namespace {

TEST(Recipe, AdamWAndSchedules) {
  gcc_graph *m = Open(Mlp());
  ASSERT_NE(m, nullptr);
  gcc_recipe r;
  std::string msg;
  ASSERT_EQ(Set(&r,
                {{{"--loss", "cross-entropy"},
                  {"--optimizer", "adamw"},
                  {"--epochs", "10"},
                  {"--lr-schedule", "cosine"}}},
                &msg),
            GCC_OK)
      << msg;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_recipe_apply(m, &r, &g, &d), GCC_OK) << d.msg;
  const gcc_training &t = g->training;
  EXPECT_EQ(t.opt.kind, GCC_OPT_ADAM);
  EXPECT_EQ(t.opt.decoupled, 1);
  EXPECT_FLOAT_EQ(t.opt.lr, 1e-3f);           // torch.optim.AdamW's defaults
  EXPECT_FLOAT_EQ(t.opt.weight_decay, 1e-2f); // ...
  EXPECT_STREQ(gcc_optimizer_name(&t.opt), "adamw");
  EXPECT_EQ(t.sched.kind, GCC_SCHED_COSINE); // kept through the file round trip
  EXPECT_EQ(gcc_lr_schedule_t_max(&t), 10);
  EXPECT_DOUBLE_EQ(gcc_lr_at_epoch(&t, 0), (double)1e-3f);
  EXPECT_NEAR(gcc_lr_at_epoch(&t, 5), 0.5 * (double)1e-3f, 1e-15);
  gcc_graph_free(g);

  ASSERT_EQ(
      Set(&r, {{{"--loss", "cross-entropy"}, {"--lr", "0.1"}, {"--lr-schedule", "step:30"}}}, &msg),
      GCC_OK)
      << msg;
  ASSERT_EQ(gcc_recipe_apply(m, &r, &g, &d), GCC_OK) << d.msg;
  EXPECT_EQ(g->training.sched.step_size, 30);
  EXPECT_FLOAT_EQ(g->training.sched.gamma, 0.1f); // StepLR's default
  EXPECT_DOUBLE_EQ(gcc_lr_at_epoch(&g->training, 29), (double)0.1f);
  EXPECT_NEAR(gcc_lr_at_epoch(&g->training, 60), std::pow((double)0.1f, 3), 1e-15); // float gamma
  gcc_graph_free(g);
  gcc_graph_free(m);

  for (const char *bad : {"step", "step:0", "step:3:0", "step:3:-1", "step:3:nan", "cosine:0",
                          "cosine:5:1", "exp:0.9", ""}) {
    gcc_recipe_init(&r);
    EXPECT_EQ(gcc_recipe_set(&r, "--lr-schedule", bad, &d), GCC_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(std::string(d.msg).find("--lr-schedule '" + std::string(bad) + "'"),
              std::string::npos)
        << d.msg;
  }
}

// A step schedule resumed from a checkpoint in the middle gives the bytes
// of the run that was not interrupted (the lr of the epoch resumed at comes
// from the checkpoint's recipe and epoch); without the schedule the model
// differs, and another schedule is refused.
TEST(RecipeCli, LrScheduleResumesExactly) {
  std::string linear = Runfile("models/linear.pb");
  std::string dir = TmpPath("ck"), full = TmpPath("full.pb"), res = TmpPath("res.pb"),
              flat = TmpPath("flat.pb");
  std::vector<std::string> base = {linear, "--device", "cpu", "--threads", "1", "--epochs", "3"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  Result r1 = Exec("gcc-train", with({"--lr-schedule", "step:1:0.5", "--checkpoint-dir", dir,
                                      "--keep-checkpoints", "5", "--output", full}));
  ASSERT_EQ(r1.code, 0) << r1;
  EXPECT_NE(r1.out.find("epoch 3: lr 0.025"), std::string::npos) << r1;
  // linear.pb: 256 samples in batches of 16, so epoch 1 ends at step 16
  std::string ck = dir + "/ckpt-000000000016.gcck";
  Result r2 =
      Exec("gcc-train", with({"--lr-schedule", "step:1:0.5", "--resume", ck, "--output", res}));
  ASSERT_EQ(r2.code, 0) << r2;
  EXPECT_EQ(ReadText(full), ReadText(res));
  Result r3 = Exec("gcc-train", with({"--output", flat}));
  ASSERT_EQ(r3.code, 0) << r3;
  EXPECT_NE(ReadText(full), ReadText(flat));
  Result r4 = Exec("gcc-train", with({"--lr-schedule", "cosine", "--resume", ck, "--no-output"}));
  EXPECT_EQ(r4.code, 2) << r4;
  EXPECT_NE(r4.err.find("lr schedule is step:1:0.5, this run's is cosine:3"), std::string::npos)
      << r4;
}

// The GPT recipe's flags (issue 31; numerics against PyTorch in
// tests/gpt_recipe_test): the run header says them, a per-step
// warmup-cosine schedule resumed mid-epoch gives the bytes of the run that
// was not interrupted (the lr is a function of the optimizer steps, which
// the checkpoint keeps), another clip value is refused, and bad values exit
// 2 naming the flag.
TEST(RecipeCli, GptRecipeFlagsResumeExactly) {
  std::string linear = Runfile("models/linear.pb");
  std::string dir = TmpPath("ck_gpt"), full = TmpPath("full_gpt.pb"), res = TmpPath("res_gpt.pb");
  std::vector<std::string> base = {linear,
                                   "--device",
                                   "cpu",
                                   "--threads",
                                   "1",
                                   "--epochs",
                                   "3",
                                   "--optimizer",
                                   "adamw",
                                   "--lr",
                                   "0.05",
                                   "--betas",
                                   "0.9,0.95",
                                   "--weight-decay",
                                   "0.1",
                                   "--lr-schedule",
                                   "warmup-cosine:5:40:0.001"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  Result r1 = Exec("gcc-train",
                   with({"--clip-grad-norm", "0.5", "--checkpoint-dir", dir, "--checkpoint-every",
                         "10", "--keep-checkpoints", "5", "--output", full}));
  ASSERT_EQ(r1.code, 0) << r1;
  EXPECT_NE(r1.out.find("optimizer adamw: betas (0.9, 0.95), eps 1e-08, weight decay 0.1 on 1 "
                        "tensors of >= 2 dims"),
            std::string::npos)
      << r1;
  EXPECT_NE(r1.out.find("clip-grad-norm 0.5; lr schedule warmup-cosine:5:40:0.001 by optimizer "
                        "step"),
            std::string::npos)
      << r1;
  // linear.pb: 16 steps an epoch; step 20 is in the middle of epoch 2
  std::string ck = dir + "/ckpt-000000000020.gcck";
  Result r2 = Exec("gcc-train", with({"--clip-grad-norm", "0.5", "--resume", ck, "--output", res}));
  ASSERT_EQ(r2.code, 0) << r2;
  EXPECT_EQ(ReadText(full), ReadText(res));
  Result r3 = Exec("gcc-train", with({"--clip-grad-norm", "2", "--resume", ck, "--no-output"}));
  EXPECT_EQ(r3.code, 2) << r3;
  EXPECT_NE(r3.err.find("clip_grad_norm is 0.5, this run's is 2"), std::string::npos) << r3;
  for (auto bad :
       std::vector<std::pair<std::string, std::string>>{{"--betas", "0.9"},
                                                        {"--clip-grad-norm", "-1"},
                                                        {"--weight-decay-on", "some"},
                                                        {"--lr-schedule", "warmup-cosine:5:5:0"}}) {
    Result r = Exec("gcc-train", {linear, "--device", "cpu", bad.first, bad.second});
    EXPECT_EQ(r.code, 2) << r;
    EXPECT_NE(r.err.find(bad.first + " '" + bad.second + "'"), std::string::npos) << r;
  }
}

} // namespace

// ---- --dataset npy ---------------------------------------------------------------------

namespace {

// A .npy file of `descr` ("|u1", "<i8", "<f4") and shape `dims`.
std::string Npy(const std::string &descr, const std::vector<int64_t> &dims, const void *data,
                size_t elem) {
  std::string shape = "(";
  size_t n = 1;
  for (int64_t v : dims) {
    shape += std::to_string(v) + ", ";
    n *= (size_t)v;
  }
  shape += ")";
  std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + h.size() + 1) % 64 != 0)
    h += ' ';
  h += '\n';
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out += (char)(h.size() & 0xff);
  out += (char)(h.size() >> 8);
  out += h;
  out.append(static_cast<const char *>(data), n * elem);
  return out;
}

void Put(const std::string &path, const std::string &bytes) {
  ASSERT_TRUE(WriteFile(path, bytes.data(), bytes.size())) << path;
}

// The MNIST IDX files as .npy (uint8 (N, 1, 28, 28), int64 labels): the
// native loader and --dataset npy give identical losses, and so does the
// same data as a .npz (written with libzip, deflated).
TEST(RecipeCli, MnistAsNpyTrainsAsTheNativeLoader) {
  std::string data = Runfile("data/mnist"), dir = TmpPath("mnist-npy"), npz = TmpPath("mnist.npz");
  mkdir(dir.c_str(), 0755);
  zip_t *z = zip_open(npz.c_str(), ZIP_CREATE | ZIP_TRUNCATE, nullptr);
  ASSERT_NE(z, nullptr);
  std::vector<std::string> keep; // zip_source_buffer reads them at zip_close
  keep.reserve(4);
  for (int train : {1, 0}) {
    gcc_dataset ds{};
    gcc_diag d{};
    ASSERT_EQ(gcc_mnist_load(data.c_str(), train, &ds, &d), GCC_OK) << d.msg;
    std::vector<int64_t> y(ds.labels, ds.labels + ds.n);
    std::string xs = Npy("|u1", {ds.n, 1, 28, 28}, ds.images, 1);
    std::string ys = Npy("<i8", {ds.n}, y.data(), 8);
    std::string sfx = train ? "_train.npy" : "_test.npy";
    Put(dir + "/x" + sfx, xs);
    Put(dir + "/y" + sfx, ys);
    for (auto &p : {std::make_pair("x" + sfx, xs), std::make_pair("y" + sfx, ys)}) {
      keep.push_back(p.second);
      zip_source_t *src = zip_source_buffer(z, keep.back().data(), keep.back().size(), 0);
      ASSERT_NE(src, nullptr);
      zip_int64_t at = zip_file_add(z, p.first.c_str(), src, ZIP_FL_OVERWRITE);
      ASSERT_GE(at, 0);
      // the images stored (a quicker test), the labels deflated (numpy.savez_compressed)
      zip_set_file_compression(z, (zip_uint64_t)at,
                               p.first[0] == 'x' ? ZIP_CM_STORE : ZIP_CM_DEFLATE, 0);
    }
    gcc_dataset_free(&ds);
  }
  ASSERT_EQ(zip_close(z), 0);
  std::string model = Runfile("models/mnist_mlp.pb");
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {model, "--device",    "cpu", "--threads",  "1", "--max-steps",
                                  "30",  "--log-every", "10",  "--no-output"};
    a.insert(a.end(), extra.begin(), extra.end());
    return Exec("gcc-train", a);
  };
  Result native = run({"--data", data}), npy = run({"--dataset", "npy", "--data", dir}),
         zipped = run({"--dataset", "npy", "--data", npz});
  ASSERT_EQ(native.code, 0) << native;
  ASSERT_EQ(npy.code, 0) << npy;
  ASSERT_EQ(zipped.code, 0) << zipped;
  auto lines = [](const std::string &out) { // the loss and accuracy lines, not the timings
    std::string s, line;
    std::istringstream in(out);
    while (std::getline(in, line)) {
      if (line.rfind("[", 0) == 0)
        s += line + ";";
      else if (line.rfind("epoch ", 0) == 0)
        s += line.substr(0, line.find(", train loss")) + ";";
    }
    return s;
  };
  EXPECT_NE(lines(native.out).find("[1,    30] loss"), std::string::npos) << native;
  EXPECT_NE(lines(native.out).find("test accuracy"), std::string::npos) << native;
  EXPECT_EQ(lines(native.out), lines(npy.out)) << native << npy;
  EXPECT_EQ(lines(native.out), lines(zipped.out)) << native << zipped;
}

TEST(RecipeCli, NpyErrorsNameTheFileAndShape) {
  std::vector<uint8_t> x(6 * 4 * 4, 7);
  std::vector<int64_t> y = {0, 1, 2, 3, 4, 5}, y5 = {0, 1, 2, 3, 4};
  std::vector<float> xf(6 * 16, 0.5f);
  struct Case {
    std::string name, x, y, want;
  } cases[] = {
      {"short_y", Npy("|u1", {6, 4, 4}, x.data(), 1), Npy("<i8", {5}, y5.data(), 8),
       "y_train.npy: shape [5]; expected (6) class indices for"},
      {"float_x", Npy("<f4", {6, 4, 4}, xf.data(), 4), Npy("<i8", {6}, y.data(), 8),
       "x_train.npy: dtype '<f4' [6, 4, 4]"},
      {"float_y", Npy("|u1", {6, 4, 4}, x.data(), 1), Npy("<f4", {6}, xf.data(), 4),
       "y_train.npy: dtype '<f4' [6]"},
      {"no_test", Npy("|u1", {6, 4, 4}, x.data(), 1), Npy("<i8", {6}, y.data(), 8),
       "x_test.npy: cannot open"},
  };
  for (const Case &c : cases) {
    std::string dir = TmpPath("npy-" + c.name);
    mkdir(dir.c_str(), 0755);
    Put(dir + "/x_train.npy", c.x);
    Put(dir + "/y_train.npy", c.y);
    gcc_dataset tr{}, te{};
    gcc_diag d{};
    gcc_status s = gcc_npy_dataset_load(dir.c_str(), 1, &tr, &d);
    if (s == GCC_OK)
      s = gcc_npy_dataset_load(dir.c_str(), 0, &te, &d);
    EXPECT_NE(s, GCC_OK) << c.name;
    EXPECT_NE(std::string(d.msg).find(c.want), std::string::npos) << c.name << ": " << d.msg;
    gcc_dataset_free(&tr);
    gcc_dataset_free(&te);
  }
  // the good one: (N, H, W) uint8 is one channel
  gcc_dataset ds{};
  gcc_diag d{};
  std::string dir = TmpPath("npy-no_test");
  ASSERT_EQ(gcc_npy_dataset_load(dir.c_str(), 1, &ds, &d), GCC_OK) << d.msg;
  EXPECT_EQ(ds.n, 6);
  EXPECT_EQ(ds.channels, 1);
  EXPECT_EQ(ds.height, 4);
  EXPECT_EQ(ds.width, 4);
  EXPECT_EQ(ds.num_classes, 6);
  EXPECT_EQ(ds.labels[5], 5);
  gcc_dataset_free(&ds);
  // --dataset npy without --data: exit 2 before anything is read
  Result r = Exec("gcc-train", {Runfile("models/mnist_mlp.pb"), "--dataset", "npy", "--no-output",
                                "--device", "cpu"});
  EXPECT_EQ(r.code, 2) << r;
  EXPECT_NE(r.err.find("--dataset npy needs --data"), std::string::npos) << r;
}

// A zip archive written byte by byte (local headers, central directory, end
// record), every member stored with `method` (0: stored; another number
// declares a compression this reader lacks): what libzip will not write,
// such as two members of one name.
std::string StoredZip(const std::vector<std::pair<std::string, std::string>> &members,
                      uint16_t method = 0) {
  auto u16 = [](std::string *o, uint32_t v) {
    *o += (char)(v & 0xff);
    *o += (char)((v >> 8) & 0xff);
  };
  auto u32 = [&](std::string *o, uint32_t v) {
    u16(o, v & 0xffff);
    u16(o, v >> 16);
  };
  std::string out, central;
  for (const auto &m : members) {
    uint32_t crc = (uint32_t)crc32(0, (const Bytef *)m.second.data(), (uInt)m.second.size());
    uint32_t at = (uint32_t)out.size(), n = (uint32_t)m.second.size();
    u32(&out, 0x04034b50);
    u16(&out, 20); // version needed
    u16(&out, 0);  // flags
    u16(&out, method);
    u32(&out, 0); // time, date
    u32(&out, crc);
    u32(&out, n);
    u32(&out, n);
    u16(&out, (uint32_t)m.first.size());
    u16(&out, 0);
    out += m.first + m.second;
    u32(&central, 0x02014b50);
    u16(&central, 20);
    u16(&central, 20);
    u16(&central, 0);
    u16(&central, method);
    u32(&central, 0);
    u32(&central, crc);
    u32(&central, n);
    u32(&central, n);
    u16(&central, (uint32_t)m.first.size());
    u32(&central, 0); // extra, comment lengths
    u32(&central, 0); // disk, internal attributes
    u32(&central, 0); // external attributes
    u32(&central, at);
    central += m.first;
  }
  uint32_t cd_at = (uint32_t)out.size();
  out += central;
  u32(&out, 0x06054b50);
  u32(&out, 0);
  u16(&out, (uint32_t)members.size());
  u16(&out, (uint32_t)members.size());
  u32(&out, (uint32_t)central.size());
  u32(&out, cd_at);
  u16(&out, 0);
  return out;
}

// Input that numpy and this reader would read differently is refused as
// ambiguous (issue 32): a .npy header giving a key twice (numpy's dict keeps
// the last), a .npz with two members of one name (numpy reads the last,
// libzip the first). A member compressed with a method the reader lacks
// says so (it was "not a .npz (zip) archive").
TEST(RecipeCli, AmbiguousNpyAndNpzAreRefused) {
  std::vector<float> v = {1, 2, 3, 4};
  std::string good = Npy("<f4", {4}, v.data(), 4);
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'shape': (2,), }";
  while ((10 + h.size() + 1) % 64 != 0)
    h += ' ';
  h += '\n';
  std::string twice = std::string("\x93NUMPY\x01\x00", 8) + (char)(h.size() & 0xff) +
                      (char)(h.size() >> 8) + h + std::string((const char *)v.data(), 16);
  gcc_shape shape{};
  float *out = nullptr;
  gcc_diag d{};
  ASSERT_EQ(
      gcc_npy_parse_f32((const uint8_t *)good.data(), good.size(), "good.npy", &shape, &out, &d),
      GCC_OK)
      << d.msg;
  free(out);
  out = nullptr;
  EXPECT_EQ(
      gcc_npy_parse_f32((const uint8_t *)twice.data(), twice.size(), "twice.npy", &shape, &out, &d),
      GCC_ERR_PARSE);
  EXPECT_NE(std::string(d.msg).find("twice.npy: the .npy header gives 'shape' more than once"),
            std::string::npos)
      << d.msg;
  free(out);
  // .npz: the control reads; a duplicated member and an unknown method do not
  std::vector<uint8_t> x(6 * 4 * 4, 7);
  std::vector<int64_t> y = {0, 1, 2, 3, 4, 5};
  std::string xs = Npy("|u1", {6, 4, 4}, x.data(), 1), ys = Npy("<i8", {6}, y.data(), 8);
  std::string ok = TmpPath("ok.npz"), dup = TmpPath("dup.npz"), comp = TmpPath("comp.npz");
  Put(ok, StoredZip({{"x_train.npy", xs}, {"y_train.npy", ys}}));
  Put(dup, StoredZip({{"x_train.npy", xs}, {"y_train.npy", ys}, {"x_train.npy", xs}}));
  Put(comp, StoredZip({{"x_train.npy", xs}, {"y_train.npy", ys}}, 99));
  gcc_dataset ds{};
  ASSERT_EQ(gcc_npy_dataset_load(ok.c_str(), 1, &ds, &d), GCC_OK) << d.msg;
  EXPECT_EQ(ds.n, 6);
  gcc_dataset_free(&ds);
  EXPECT_EQ(gcc_npy_dataset_load(dup.c_str(), 1, &ds, &d), GCC_ERR_PARSE);
  EXPECT_NE(std::string(d.msg).find("holds 2 members named 'x_train.npy' (ambiguous"),
            std::string::npos)
      << d.msg;
  gcc_dataset_free(&ds);
  EXPECT_NE(gcc_npy_dataset_load(comp.c_str(), 1, &ds, &d), GCC_OK);
  // libzip refuses the archive itself (inconsistent) or its member; either
  // way the reason is libzip's, not "not a .npz"
  EXPECT_TRUE(std::string(d.msg).find("compressed with method 99, which this reader does not "
                                      "support") != std::string::npos ||
              std::string(d.msg).find("libzip cannot open: ") != std::string::npos)
      << d.msg;
  EXPECT_EQ(std::string(d.msg).find("not a .npz"), std::string::npos) << d.msg;
  gcc_dataset_free(&ds);
}

// The model of Mlp() on float rows, in float64: relu(x W^T + B), W and B as
// Mlp() fills them.
std::vector<double> MlpForward(const std::vector<float> &x, int64_t n) {
  std::vector<double> y((size_t)n * 3);
  for (int64_t r = 0; r < n; r++)
    for (int o = 0; o < 3; o++) {
      double s = 0.05 * o;
      for (int k = 0; k < 4; k++)
        s += (double)x[(size_t)(r * 4 + k)] * (0.1 * (double)((o * 4 + k) % 5) - 0.2);
      y[(size_t)(r * 3 + o)] = s > 0 ? s : 0;
    }
  return y;
}

// A folder of the four arrays (test set = the rows after the first n_train).
std::string NpyDir(const std::string &name, const std::string &xd, const std::vector<int64_t> &xs,
                   const void *x, size_t xe, const std::string &yd, const std::vector<int64_t> &ys,
                   const void *y, size_t ye, int64_t n_train) {
  std::string dir = TmpPath("npyrows-" + name);
  mkdir(dir.c_str(), 0755);
  size_t xrow = xe, yrow = ye;
  for (size_t i = 1; i < xs.size(); i++)
    xrow *= (size_t)xs[i];
  for (size_t i = 1; i < ys.size(); i++)
    yrow *= (size_t)ys[i];
  for (int train : {1, 0}) {
    std::vector<int64_t> xsh = xs, ysh = ys;
    int64_t first = train ? 0 : n_train, rows = train ? n_train : xs[0] - n_train;
    xsh[0] = ysh[0] = rows;
    std::string sfx = train ? "_train.npy" : "_test.npy";
    Put(dir + "/x" + sfx, Npy(xd, xsh, (const char *)x + first * xrow, xe));
    Put(dir + "/y" + sfx, Npy(yd, ysh, (const char *)y + first * yrow, ye));
  }
  return dir;
}

// The number after `key` in `s` (-1 when absent).
double After(const std::string &s, const std::string &key) {
  size_t at = s.find(key);
  return at == std::string::npos ? -1 : atof(s.c_str() + at + key.size());
}

// --dataset npy beyond uint8 images: float32 inputs fed as they are with
// int64 labels (cross-entropy) or float32 targets (mse), and uint8 inputs
// scaled by --mean/--std with float32 targets. The evaluation of the
// untrained model (--epochs 0, on x_test/y_test) gives the loss computed
// here in float64 from the model's weights; then a few epochs train.
TEST(RecipeCli, NpyFloatInputsAndRegressionTargets) {
  std::string model = TmpPath("npy_mlp.onnx");
  std::vector<uint8_t> mb = Mlp();
  ASSERT_TRUE(WriteFile(model, mb.data(), mb.size()));
  const int64_t n = 14, n_train = 9, n_test = n - n_train;
  std::vector<float> x((size_t)n * 4), yf((size_t)n * 3);
  std::vector<int64_t> yi((size_t)n);
  std::vector<uint8_t> xu((size_t)n * 4);
  for (size_t i = 0; i < x.size(); i++) {
    x[i] = (float)((i * 37) % 23) / 7.0f - 1.2f;
    xu[i] = (uint8_t)((i * 53) % 256);
  }
  for (size_t i = 0; i < yf.size(); i++)
    yf[i] = (float)((i * 11) % 9) / 4.0f - 0.5f;
  for (size_t i = 0; i < yi.size(); i++)
    yi[i] = (int64_t)((i * 5) % 3);
  std::vector<float> xt(x.begin() + n_train * 4, x.end());
  std::vector<double> out = MlpForward(xt, n_test);
  auto run = [&](const std::string &dir, std::vector<std::string> extra) {
    std::vector<std::string> a = {model,      "--dataset",   "npy",         "--data", dir,
                                  "--device", "cpu",         "--threads",   "1",      "--lr",
                                  "0.05",     "--no-output", "--log-every", "0"};
    a.insert(a.end(), extra.begin(), extra.end());
    return Exec("gcc-train", a);
  };
  { // float32 inputs, float32 targets: MSELoss over the test set
    std::string dir =
        NpyDir("f32_mse", "<f4", {n, 4}, x.data(), 4, "<f4", {n, 3}, yf.data(), 4, n_train);
    double want = 0;
    for (int64_t i = 0; i < n_test * 3; i++) {
      double e = out[(size_t)i] - yf[(size_t)(n_train * 3 + i)];
      want += e * e;
    }
    want /= (double)(n_test * 3);
    Result r = run(dir, {"--loss", "mse", "--epochs", "0"});
    ASSERT_EQ(r.code, 0) << r;
    EXPECT_NEAR(After(r.out, "final loss "), want, 2e-6) << r;
    Result t = run(dir, {"--loss", "mse", "--epochs", "20", "--batch-size", "3"});
    ASSERT_EQ(t.code, 0) << t;
    EXPECT_LT(After(t.out, "final loss "), want) << t;
  }
  { // float32 inputs, int64 labels: CrossEntropyLoss and accuracy
    std::string dir =
        NpyDir("f32_ce", "<f4", {n, 4}, x.data(), 4, "<i8", {n}, yi.data(), 8, n_train);
    double want = 0;
    int correct = 0;
    for (int64_t r = 0; r < n_test; r++) {
      const double *z = &out[(size_t)(r * 3)];
      double m = std::max(z[0], std::max(z[1], z[2]));
      double lse = m + std::log(std::exp(z[0] - m) + std::exp(z[1] - m) + std::exp(z[2] - m));
      int64_t label = yi[(size_t)(n_train + r)];
      want += lse - z[label];
      int best = 0;
      for (int j = 1; j < 3; j++)
        if (z[j] > z[best])
          best = j;
      correct += best == label;
    }
    want /= (double)n_test;
    Result r = run(dir, {"--loss", "cross-entropy", "--epochs", "0"});
    ASSERT_EQ(r.code, 0) << r;
    EXPECT_NEAR(After(r.out, "test loss "), want, 6e-5) << r;
    EXPECT_NEAR(After(r.out, "test accuracy "), 100.0 * correct / (double)n_test, 0.006) << r;
  }
  { // uint8 inputs scaled by --mean/--std, float32 targets
    std::string dir =
        NpyDir("u8_mse", "|u1", {n, 4}, xu.data(), 1, "<f4", {n, 3}, yf.data(), 4, n_train);
    std::vector<float> xs((size_t)n_test * 4);
    for (size_t i = 0; i < xs.size(); i++)
      xs[i] = ((float)xu[(size_t)n_train * 4 + i] / 255.0f - 0.5f) / 0.25f;
    std::vector<double> o = MlpForward(xs, n_test);
    double want = 0;
    for (int64_t i = 0; i < n_test * 3; i++) {
      double e = o[(size_t)i] - yf[(size_t)(n_train * 3 + i)];
      want += e * e;
    }
    want /= (double)(n_test * 3);
    Result r = run(dir, {"--loss", "mse", "--epochs", "0", "--mean", "0.5", "--std", "0.25"});
    ASSERT_EQ(r.code, 0) << r;
    EXPECT_NEAR(After(r.out, "final loss "), want, 2e-6) << r;
  }
}

// Every file of the data set is an input: an output that would replace one
// (--output, --predictions) is a command-line error (exit 2) before any
// step, and the file is unchanged (issue 32: both replaced the training
// data and exited 0). The same for a .npz, and the folder's other files
// stay writable.
TEST(RecipeCli, OutputsNeverReplaceTheDataSet) {
  std::string model = TmpPath("npy_mlp_safe.onnx");
  std::vector<uint8_t> mb = Mlp();
  ASSERT_TRUE(WriteFile(model, mb.data(), mb.size()));
  std::vector<float> x(10 * 4, 0.25f);
  std::vector<int64_t> y(10, 1);
  std::string dir = NpyDir("safe", "<f4", {10, 4}, x.data(), 4, "<i8", {10}, y.data(), 8, 6);
  std::vector<std::string> base = {model,    "--dataset",     "npy",      "--data", dir,
                                   "--loss", "cross-entropy", "--device", "cpu",    "--epochs",
                                   "1",      "--lr",          "0.1"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  for (const char *name : {"x_train.npy", "y_train.npy", "x_test.npy", "y_test.npy"}) {
    std::string f = dir + "/" + name, before = ReadText(f);
    for (const char *flag : {"--output", "--predictions"}) {
      Result r = Exec("gcc-train", with({flag, f}));
      EXPECT_EQ(r.code, 2) << r;
      EXPECT_NE(r.err.find(std::string(flag) + " " + f + " would replace"), std::string::npos) << r;
      EXPECT_EQ(r.out.find("epoch 1"), std::string::npos) << "trained first: " << r;
      EXPECT_EQ(ReadText(f), before) << name << " was replaced";
    }
  }
  Result ok = Exec("gcc-train", with({"--output", dir + "/trained.pb"}));
  EXPECT_EQ(ok.code, 0) << ok;
  // a .npz is one input
  std::string npz = TmpPath("safe.npz");
  zip_t *z = zip_open(npz.c_str(), ZIP_CREATE | ZIP_TRUNCATE, nullptr);
  ASSERT_NE(z, nullptr);
  std::vector<std::string> keep;
  keep.reserve(4);
  for (const char *name : {"x_train.npy", "y_train.npy", "x_test.npy", "y_test.npy"}) {
    keep.push_back(ReadText(dir + "/" + name));
    zip_source_t *src = zip_source_buffer(z, keep.back().data(), keep.back().size(), 0);
    ASSERT_NE(src, nullptr);
    ASSERT_GE(zip_file_add(z, name, src, ZIP_FL_OVERWRITE), 0);
  }
  ASSERT_EQ(zip_close(z), 0);
  std::string before = ReadText(npz);
  base[4] = npz;
  Result r = Exec("gcc-train", with({"--predictions", npz}));
  EXPECT_EQ(r.code, 2) << r;
  EXPECT_EQ(ReadText(npz), before);
}

// Bad values in the data are found at load, naming the file and the
// element (issue 32): a NaN or Inf (it was "the loss became nan (learning
// rate too high?)"), and a label outside the model's classes, one rule for
// int64, int32 and uint8 labels, rows and images alike (int32 -1 passed the
// load, int64 -1 was refused as outside [0, 255] with 3 classes).
TEST(RecipeCli, BadDataValuesAreNamedAtLoad) {
  std::string model = TmpPath("npy_mlp_values.onnx");
  std::vector<uint8_t> mb = Mlp();
  ASSERT_TRUE(WriteFile(model, mb.data(), mb.size()));
  const int64_t n = 8;
  std::vector<float> x((size_t)n * 4, 0.5f), xnan = x, yinf((size_t)n * 3, 0.25f);
  xnan[5] = NAN;
  yinf[(size_t)(6 * 3 + 1)] = INFINITY; // the test set's row 0 (6 training rows)
  std::vector<uint8_t> xu((size_t)n * 4, 9);
  std::vector<int64_t> y64 = {0, 1, 2, 0, 1, 2, 0, 1}, y64neg = y64, y64big = y64;
  y64neg[2] = -1;
  y64big[7] = 3; // the test set's index 1
  std::vector<int32_t> y32neg = {0, 1, -1, 0, 1, 2, 0, 1};
  struct Case {
    std::string name;
    std::string dir, loss, says;
  } cases[] = {
      {"nan", NpyDir("v_nan", "<f4", {n, 4}, xnan.data(), 4, "<i8", {n}, y64.data(), 8, 6),
       "cross-entropy", "/x_train.npy: element 5 (sample 1) is NaN: the data must be finite"},
      {"inf", NpyDir("v_inf", "<f4", {n, 4}, x.data(), 4, "<f4", {n, 3}, yinf.data(), 4, 6), "mse",
       "/y_test.npy: element 1 (sample 0) is +Inf"},
      {"i64", NpyDir("v_i64", "<f4", {n, 4}, x.data(), 4, "<i8", {n}, y64neg.data(), 8, 6),
       "cross-entropy", "/y_train.npy: label -1 at index 2 is not a class index"},
      {"i32", NpyDir("v_i32", "<f4", {n, 4}, x.data(), 4, "<i4", {n}, y32neg.data(), 4, 6),
       "cross-entropy", "/y_train.npy: label -1 at index 2 is not a class index"},
      {"big", NpyDir("v_big", "<f4", {n, 4}, x.data(), 4, "<i8", {n}, y64big.data(), 8, 6),
       "cross-entropy", "/y_test.npy: label 3 at index 1 is not a class index"},
      {"u8_i64", NpyDir("v_u8", "|u1", {n, 4}, xu.data(), 1, "<i8", {n}, y64neg.data(), 8, 6),
       "cross-entropy", "/y_train.npy: label -1 at index 2 is not a class index"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    Result r = Exec("gcc-train", {model, "--dataset", "npy", "--data", c.dir, "--loss", c.loss,
                                  "--lr", "0.1", "--device", "cpu", "--no-output"});
    EXPECT_EQ(r.code, 1) << r;
    EXPECT_NE(r.err.find(c.dir + c.says), std::string::npos) << r;
    if (c.says.find("label") != std::string::npos) {
      EXPECT_NE(r.err.find("(the model has 3 classes, 0 to 2)"), std::string::npos) << r;
    }
    EXPECT_EQ(r.out.find("epoch 1"), std::string::npos) << "trained first: " << r;
  }
}

// A shape or dtype that does not fit the model's input or target is an
// error naming the file with its shape and dtype and the model's value with
// its own (exit 3, before any step).
TEST(RecipeCli, NpyRowsThatDoNotFitTheModelNameBoth) {
  std::string model = TmpPath("npy_mlp_bad.onnx");
  std::vector<uint8_t> mb = Mlp();
  ASSERT_TRUE(WriteFile(model, mb.data(), mb.size()));
  std::vector<float> f(40 * 5, 0.25f);
  std::vector<int64_t> l(40, 1);
  struct Case {
    std::string name, xd;
    std::vector<int64_t> xs;
    std::string yd;
    std::vector<int64_t> ys;
    std::string loss, want1, want2;
  } cases[] = {
      {"wide_x",
       "<f4",
       {8, 5},
       "<f4",
       {8, 3},
       "mse",
       "x_train.npy: shape [6, 5] (float32)",
       "but input 'x' takes [N, 4] float32"},
      {"int_x",
       "<i8",
       {8, 4},
       "<f4",
       {8, 3},
       "mse",
       "x_train.npy: int64 '<i8' [6, 4]",
       "but input 'x' takes float32 [N, 4]"},
      {"float_labels",
       "<f4",
       {8, 4},
       "<f4",
       {8},
       "cross-entropy",
       "y_train.npy: float32 '<f4' [6]",
       "--loss mse"},
      {"int_targets",
       "<f4",
       {8, 4},
       "<i8",
       {8},
       "mse",
       "y_train.npy: int64 '<i8' [6]",
       "need --loss cross-entropy"},
      {"wide_y",
       "<f4",
       {8, 4},
       "<f4",
       {8, 4},
       "mse",
       "y_train.npy: float32 '<f4' [6, 4]",
       "takes float32 [N, 3]"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    std::string dir = NpyDir(c.name, c.xd, c.xs, f.data(), c.xd == "<i8" ? 8 : 4, c.yd, c.ys,
                             c.yd == "<i8" ? (const void *)l.data() : (const void *)f.data(),
                             c.yd == "<i8" ? 8 : 4, 6);
    Result r = Exec("gcc-train", {model, "--dataset", "npy", "--data", dir, "--loss", c.loss,
                                  "--lr", "0.1", "--device", "cpu", "--no-output"});
    EXPECT_EQ(r.code, 3) << r;
    EXPECT_NE(r.err.find(c.want1), std::string::npos) << r;
    EXPECT_NE(r.err.find(c.want2), std::string::npos) << r;
  }
}

// Partly missing CIFAR-10 data: the error names the missing batch file, in
// the loader and in gcc-train (exit 1, before training).
TEST(RecipeCli, MissingCifarBatchIsNamed) {
  std::string dir = TmpPath("cifar-partial");
  mkdir(dir.c_str(), 0755);
  std::string rec(3073, '\0');
  Put(dir + "/data_batch_1.bin", rec);
  gcc_dataset ds{};
  gcc_diag d{};
  EXPECT_EQ(gcc_cifar10_load(dir.c_str(), 1, &ds, &d), GCC_ERR_IO);
  EXPECT_NE(std::string(d.msg).find(dir + "/data_batch_2.bin"), std::string::npos) << d.msg;
  std::string model = Runfile("models/cifar_cnn.pb");
  Result r = Exec("gcc-train", {model, "--device", "cpu", "--no-output", "--data", dir});
  EXPECT_EQ(r.code, 1) << r;
  EXPECT_NE(r.err.find(dir + "/data_batch_2.bin"), std::string::npos) << r;
  EXPECT_EQ(r.out.find("loss"), std::string::npos) << r;
  // every training batch but no test batch: test_batch.bin is named
  for (int k = 2; k <= 5; k++)
    Put(dir + "/data_batch_" + std::to_string(k) + ".bin", rec);
  ASSERT_EQ(gcc_cifar10_load(dir.c_str(), 1, &ds, &d), GCC_OK) << d.msg;
  EXPECT_EQ(ds.n, 5);
  gcc_dataset_free(&ds);
  EXPECT_EQ(gcc_cifar10_load(dir.c_str(), 0, &ds, &d), GCC_ERR_IO);
  EXPECT_NE(std::string(d.msg).find(dir + "/test_batch.bin"), std::string::npos) << d.msg;
  r = Exec("gcc-train", {model, "--device", "cpu", "--no-output", "--data", dir});
  EXPECT_EQ(r.code, 1) << r;
  EXPECT_NE(r.err.find(dir + "/test_batch.bin"), std::string::npos) << r;
}

// CIFAR-10-format data (the binary batches: five training files of 8
// records and a test file of 8, pseudo-random pixels, every class) and the
// same arrays as .npy files (uint8 (N, 3, 32, 32), int64 labels) train
// models/cifar_cnn.pb to identical losses and accuracies for a seed.
TEST(RecipeCli, CifarAsNpyTrainsAsTheNativeLoader) {
  const int kPer = 8;
  std::string dir = TmpPath("cifar-small"), npy = TmpPath("cifar-small-npy");
  mkdir(dir.c_str(), 0755);
  mkdir(npy.c_str(), 0755);
  std::vector<uint8_t> xs[2];
  std::vector<int64_t> ys[2];
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int f = 0; f < 6; f++) {
    int train = f < 5;
    std::string file;
    for (int i = 0; i < kPer; i++) {
      int label = (f * kPer + i) * 7 % 10;
      file += (char)label;
      ys[train].push_back(label);
      for (int p = 0; p < 3072; p++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        uint8_t v = (uint8_t)(state >> 56);
        file += (char)v;
        xs[train].push_back(v);
      }
    }
    Put(dir + (train ? "/data_batch_" + std::to_string(f + 1) + ".bin" : "/test_batch.bin"), file);
  }
  for (int train : {1, 0}) {
    std::string sfx = train ? "_train.npy" : "_test.npy";
    int64_t n = (int64_t)ys[train].size();
    Put(npy + "/x" + sfx, Npy("|u1", {n, 3, 32, 32}, xs[train].data(), 1));
    Put(npy + "/y" + sfx, Npy("<i8", {n}, ys[train].data(), 8));
  }
  std::string model = Runfile("models/cifar_cnn.pb");
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {model,    "--device",    "cpu",         "--threads", "1",
                                  "--seed", "7",           "--log-every", "1",         "--lr",
                                  "0.01",   "--no-output", "--per-class", "off"};
    a.insert(a.end(), extra.begin(), extra.end());
    return Exec("gcc-train", a);
  };
  Result native = run({"--data", dir}), fromnpy = run({"--dataset", "npy", "--data", npy});
  ASSERT_EQ(native.code, 0) << native;
  ASSERT_EQ(fromnpy.code, 0) << fromnpy;
  auto lines = [](const std::string &out) { // the loss and accuracy lines, not the timings
    std::string s, line;
    std::istringstream in(out);
    while (std::getline(in, line)) {
      if (line.rfind("[", 0) == 0)
        s += line + ";";
      else if (line.rfind("epoch ", 0) == 0)
        s += line.substr(0, line.find(", train loss")) + ";";
    }
    return s;
  };
  // 2 epochs of 10 steps (batch 4), every step's loss
  EXPECT_NE(lines(native.out).find("[2,    10] loss"), std::string::npos) << native;
  EXPECT_NE(lines(native.out).find("test accuracy"), std::string::npos) << native;
  EXPECT_EQ(lines(native.out), lines(fromnpy.out)) << native << fromnpy;
}

} // namespace

// ---- --augment crop:N,flip -------------------------------------------------------------

namespace {

// torchvision's RandomCrop(padding=pad) + RandomHorizontalFlip written out
// on an explicitly padded image, with the loader's documented draws.
std::vector<float> Reference(const gcc_dataset &ds, int64_t i, int64_t epoch, uint64_t seed,
                             int pad) {
  int64_t H = ds.height, W = ds.width, PH = H + 2 * pad, PW = W + 2 * pad;
  gcc_rng r;
  gcc_rng_seed(&r, seed ^ GCC_AUGMENT_SALT, (uint64_t)(epoch * ds.n + i));
  int64_t dy = gcc_rng_below(&r, (uint32_t)(2 * pad + 1));
  int64_t dx = gcc_rng_below(&r, (uint32_t)(2 * pad + 1));
  bool flip = gcc_rng_uniform(&r) < 0.5f;
  std::vector<float> out;
  for (int64_t c = 0; c < ds.channels; c++) {
    std::vector<int> padded((size_t)(PH * PW), 0); // zero padding, in pixels
    for (int64_t y = 0; y < H; y++)
      for (int64_t x = 0; x < W; x++)
        padded[(size_t)((y + pad) * PW + x + pad)] =
            ds.images[((i * ds.channels + c) * H + y) * W + x];
    std::vector<int> crop((size_t)(H * W));
    for (int64_t y = 0; y < H; y++)
      for (int64_t x = 0; x < W; x++)
        crop[(size_t)(y * W + x)] = padded[(size_t)((y + dy) * PW + x + dx)];
    for (int64_t y = 0; y < H; y++)
      for (int64_t x = 0; x < W; x++) {
        int p = crop[(size_t)(y * W + (flip ? W - 1 - x : x))];
        out.push_back(((float)p / 255.0f - 0.5f) / 0.25f);
      }
  }
  return out;
}

TEST(Augment, RandomCropAndFlipAsTorchvision) {
  gcc_dataset ds{};
  ds.n = 10;
  ds.channels = 2;
  ds.height = 5;
  ds.width = 6;
  ds.num_classes = 10;
  ds.images = static_cast<uint8_t *>(malloc(10 * 2 * 5 * 6));
  ds.labels = static_cast<uint8_t *>(malloc(10));
  for (int i = 0; i < 10 * 60; i++)
    ds.images[i] = (uint8_t)(1 + (i * 37) % 250);
  for (int i = 0; i < 10; i++)
    ds.labels[i] = (uint8_t)i;
  gcc_dataloader_options o{};
  o.batch_size = 4;
  o.shuffle = 1;
  o.seed = 11;
  o.mean = 0.5f;
  o.std = 0.25f;
  o.crop_pad = 2;
  o.flip = 1;
  int moved = 0;
  for (int prefetch : {0, 1}) {
    o.prefetch = prefetch;
    gcc_dataloader *dl = nullptr;
    gcc_diag d{};
    ASSERT_EQ(gcc_dataloader_create(&ds, &o, &dl, &d), GCC_OK) << d.msg;
    for (int64_t epoch : {0, 3}) {
      ASSERT_EQ(gcc_dataloader_start_epoch(dl, epoch, &d), GCC_OK) << d.msg;
      for (;;) {
        gcc_batch b{};
        int has = 0;
        ASSERT_EQ(gcc_dataloader_next(dl, &b, &has, &d), GCC_OK) << d.msg;
        if (!has)
          break;
        for (int64_t r = 0; r < b.rows; r++) {
          int64_t i = b.labels[r]; // label i is sample i
          std::vector<float> want = Reference(ds, i, epoch, o.seed, o.crop_pad);
          std::vector<float> got(b.images + r * 60, b.images + (r + 1) * 60);
          EXPECT_EQ(got, want) << "sample " << i << ", epoch " << epoch;
          // how often the draws did something (flip or an offset other than the pad)
          std::vector<float> plain;
          for (int k = 0; k < 60; k++)
            plain.push_back(((float)ds.images[i * 60 + k] / 255.0f - 0.5f) / 0.25f);
          moved += got != plain;
        }
      }
    }
    gcc_dataloader_destroy(dl);
  }
  // 40 samples: a loader that ignored the options would move none
  EXPECT_GT(moved, 30);
  gcc_dataset_free(&ds);
}

TEST(Augment, BadFlagExits2) {
  for (const char *bad : {"crop:0", "crop:x", "rotate", ""}) {
    Result r = Exec("gcc-train", {Runfile("models/mnist_mlp.pb"), "--augment", bad, "--no-output"});
    EXPECT_EQ(r.code, 2) << r;
    EXPECT_NE(r.err.find("--augment '" + std::string(bad) + "'"), std::string::npos) << r;
  }
}

} // namespace
