// torchvision_zoo_test: torchvision classifiers exported with both of
// PyTorch's ONNX exporters (bench/export_torchvision_zoo.py writes them, with
// PyTorch's eval() logits for a fixed input and PyTorch's 3-step training
// references, into a cache folder; nothing is exported or downloaded at test
// time) are imported, run and trained (issue 30). The folder is
// $GCC_TRAIN_ZOO_DIR (pass it with --test_env=GCC_TRAIN_ZOO_DIR=DIR); without
// it the tests are skipped with a message saying how to make it.
// $GCC_TRAIN_ZOO_MODELS=a,b,... restricts them to those models.
//
// Inference (MODEL.EXPORTER.onnx, EXPORTER torchscript or dynamo): every
// model that imports must give PyTorch's logits within 1e-4 * max |logit|
// on the CPU plan and on the CUDA plan with the host backend (generated
// kernels host-emulated, cuDNN/cuBLASLt calls as CPU kernels): float32 in
// both, deep chains of convolutions with different summation orders; the
// issue's bound. A model the importer refuses must be refused as
// unsupported (GCC_ERR_UNSUPPORTED naming the op or variant), never with
// another error. PyTorch's logits must differ between the two rows of the
// input (by more than 1e-3 of the largest): input-independent logits would
// make the comparison say little.
//
// Training (MODEL.torchscript.train.onnx: TrainingMode.TRAINING; the dynamo
// exporter has no training form, so MODEL.dynamo.onnx, whose BatchNorms it
// folded into the Convs, trains as that folded network): imported for
// training, given cross-entropy and the reference's SGD recipe, trained 3
// steps on the reference's batch of 2 on the CPU; the losses and every
// parameter and running statistic must match PyTorch's
// (MODEL.EXPORTER.train.fix, PyTorch float32) within train_import_test's
// bound, |got - want| <= 1e-4 max(|want|, 1e-2) (a running mean in units of
// its channel's standard deviation), or within 4 times the spread between
// the reference's NCHW and channels_last runs where that is larger (see
// kAlt: batch-2 training BatchNorms amplify rounding in some networks).
//
// Both tests print their table rows ("[zoo] ..."), which bench/RESULTS.md
// collects.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
#include "datasets/npy.h"
#include "graph/ir.h"
#include "graph/util.h"
#include "onnx/import.h"
#include "runtime/session.h"
}
#include "tests/fixture.h"
#include "tests/run_plans.h"
#include "tests/testutil.h"

namespace {

const char *const kExporters[] = {"torchscript", "dynamo"};

struct Array {
  gcc_shape shape{};
  std::vector<float> v;
};

bool ReadNpy(const std::string &path, Array *a, std::string *err) {
  float *data = nullptr;
  gcc_diag d{};
  if (gcc_npy_read_f32(path.c_str(), &a->shape, &data, &d) != GCC_OK) {
    *err = d.msg;
    return false;
  }
  a->v.assign(data, data + gcc_shape_numel(&a->shape, nullptr));
  free(data);
  return true;
}

bool Exists(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// The first line of an exporter's error file (the exception's last line
// would be better, but the first names the failing step).
std::string ExportError(const std::string &path) {
  FILE *f = std::fopen(path.c_str(), "r");
  if (!f)
    return "";
  std::string last, line;
  char buf[512];
  while (std::fgets(buf, sizeof buf, f)) {
    line = buf;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r'))
      line.pop_back();
    if (!line.empty() && line[0] != ' ')
      last = line;
  }
  std::fclose(f);
  return last;
}

// The models the cache folder holds (one MODEL.input.npy each), or skips.
std::string ZooDir(std::vector<std::string> *models) {
  const char *dir = std::getenv("GCC_TRAIN_ZOO_DIR");
  DIR *dp = dir ? opendir(dir) : nullptr;
  if (!dp)
    return std::string("no exported models: run bench/export_torchvision_zoo.py --dir DIR and "
                       "bazel test //tests:torchvision_zoo_test --test_env=GCC_TRAIN_ZOO_DIR=DIR") +
           (dir ? std::string(" (") + dir + " cannot be opened)" : "");
  std::set<std::string> only;
  if (const char *m = std::getenv("GCC_TRAIN_ZOO_MODELS")) {
    std::stringstream ss(m);
    std::string item;
    while (std::getline(ss, item, ','))
      if (!item.empty())
        only.insert(item);
  }
  const std::string suffix = ".input.npy";
  while (dirent *e = readdir(dp)) {
    std::string f = e->d_name;
    if (f.size() > suffix.size() &&
        f.compare(f.size() - suffix.size(), suffix.size(), suffix) == 0) {
      std::string model = f.substr(0, f.size() - suffix.size());
      if (only.empty() || only.count(model))
        models->push_back(model);
    }
  }
  closedir(dp);
  std::sort(models->begin(), models->end());
  if (models->empty())
    return std::string(dir) + " holds no MODEL.input.npy";
  return "";
}

gcc_graph *Import(const std::string &path, bool train, gcc_status *st, std::string *err) {
  gcc_test::Bytes bytes;
  if (!gcc_test::ReadFile(path, &bytes)) {
    *st = GCC_ERR_IO;
    *err = "cannot read " + path;
    return nullptr;
  }
  gcc_onnx_options o{};
  o.train = train;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  *st = gcc_onnx_import(bytes.data(), bytes.size(), path.c_str(), &o, &g, nullptr, &d);
  if (*st != GCC_OK) {
    std::string why = d.msg;
    size_t slash = path.rfind('/');
    std::string base = path.substr(slash + 1);
    size_t at = why.find(base);
    *err = at != std::string::npos ? why.substr(at + base.size()) : why;
    return nullptr;
  }
  return g;
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(TorchvisionZoo, EvalExportsMatchPyTorchOnCpuAndCudaPlans) {
  std::vector<std::string> models;
  std::string skip = ZooDir(&models);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  const std::string dir = std::getenv("GCC_TRAIN_ZOO_DIR");
  std::printf("[zoo] %-20s %-12s %-8s %s\n", "model", "exporter", "imports",
              "max error / bound: CPU plan, CUDA plan (host)");
  int rows = 0, matched = 0;
  for (const std::string &model : models) {
    std::string err;
    Array x, want;
    ASSERT_TRUE(ReadNpy(dir + "/" + model + ".input.npy", &x, &err)) << err;
    ASSERT_TRUE(ReadNpy(dir + "/" + model + ".logits.npy", &want, &err)) << err;
    // the reference must depend on the input (rows 0 and 1 differ), else a
    // match says little: bench/export_torchvision_zoo.py perturbs the weights
    ASSERT_GE(x.shape.dims[0], 2);
    int64_t batch = x.shape.dims[0];
    size_t classes = want.v.size() / (size_t)batch;
    double spread = 0, amax = 0;
    for (size_t i = 0; i < classes; i++)
      spread = std::max(spread, (double)std::fabs(want.v[i] - want.v[classes + i]));
    for (float w : want.v)
      amax = std::max(amax, (double)std::fabs(w));
    EXPECT_GT(spread, 1e-3 * amax) << model << ": PyTorch's logits do not depend on the input";
    const double bound = 1e-4 * amax;
    for (const char *exporter : kExporters) {
      std::string stem = dir + "/" + model + "." + exporter;
      SCOPED_TRACE(model + "." + exporter + ".onnx");
      rows++;
      if (!Exists(stem + ".onnx")) {
        std::printf("[zoo] %-20s %-12s %-8s export failed: %.200s\n", model.c_str(), exporter, "-",
                    ExportError(stem + ".error.txt").c_str());
        continue;
      }
      auto t0 = std::chrono::steady_clock::now();
      gcc_status st;
      gcc_graph *g = Import(stem + ".onnx", false, &st, &err);
      if (!g) {
        EXPECT_EQ(st, GCC_ERR_UNSUPPORTED) << err;
        std::printf("[zoo] %-20s %-12s %-8s %.200s\n", model.c_str(), exporter, "no", err.c_str());
        continue;
      }
      double ratio[2] = {0, 0};
      bool ok = true;
      for (int cuda = 0; cuda < 2; cuda++) {
        std::vector<gcc_test::PlanOutput> outs;
        std::string e = gcc_test::RunPlan(g, {x.v.data()}, batch, cuda != 0, &outs, 2);
        EXPECT_EQ(e, "") << (cuda ? "CUDA plan" : "CPU plan");
        if (!e.empty() || outs.empty() || outs[0].f32.size() != want.v.size()) {
          ADD_FAILURE() << (cuda ? "CUDA plan: " : "CPU plan: ") << e << " ("
                        << (outs.empty() ? 0 : outs[0].f32.size()) << " logits, want "
                        << want.v.size() << ")";
          ok = false;
          ratio[cuda] = NAN;
          continue;
        }
        double err_max = 0;
        for (size_t i = 0; i < want.v.size(); i++)
          err_max = std::max(err_max, std::fabs((double)outs[0].f32[i] - want.v[i]));
        EXPECT_LE(err_max, bound) << (cuda ? "CUDA plan" : "CPU plan") << ": max |logit| " << amax;
        ok &= err_max <= bound;
        ratio[cuda] = err_max / bound;
      }
      matched += ok;
      std::printf("[zoo] %-20s %-12s %-8s %.3g, %.3g (%.0f s)\n", model.c_str(), exporter, "yes",
                  ratio[0], ratio[1], Seconds(t0));
      std::fflush(stdout);
      gcc_graph_free(g);
    }
  }
  std::printf("[zoo] %d of %d exports import and match on both plans\n", matched, rows);
}

// ---- training -----------------------------------------------------------------------

constexpr double kRtol = 1e-4, kFloor = 1e-2; // train_import_test's bound
// The reference's second float32 run (channels_last: the convolutions sum in
// another order) differs from its first by what this computation makes of
// float32 rounding; gcc-train's float32 steps, a third summation order, are
// allowed kAlt times that spread where it exceeds the plain bound (two
// samples of a rounding spread underestimate its range: a margin of 4).
constexpr double kAlt = 4;

// Adds labels, cross-entropy on "logits" and the reference's recipe.
std::string AddLossAndRecipe(gcc_graph *g, const gcc_test::Fixture &fx) {
  gcc_diag d{};
  int logits = gcc_graph_find(g, "logits");
  if (logits < 0)
    return "no value 'logits'";
  gcc_shape ls = {1, {GCC_BATCH_DIM}}, scalar = {0, {0}};
  int labels = -1, loss = -1, node = -1;
  if (gcc_graph_add_value(g, "labels", GCC_DT_INT64, &ls, GCC_VALUE_INPUT, nullptr, 0, &labels,
                          &d) != GCC_OK ||
      gcc_graph_add_input(g, labels) != GCC_OK)
    return d.msg;
  int ins[2] = {logits, labels};
  if (gcc_graph_add_value(g, "loss", GCC_DT_FLOAT32, &scalar, GCC_VALUE_ACTIVATION, nullptr, 0,
                          &loss, &d) != GCC_OK ||
      gcc_graph_add_node(g, "loss", GCC_OP_SOFTMAX_CROSS_ENTROPY, ins, 2, &loss, 1, &node, &d) !=
          GCC_OK ||
      gcc_graph_add_output(g, loss) != GCC_OK || gcc_graph_link(g, &d) != GCC_OK ||
      gcc_graph_toposort(g, &d) != GCC_OK)
    return d.msg;
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
  t->batch_size = fx.Get("labels").numel();
  t->epochs = 1;
  return "";
}

// Trains `g` 3 steps on the CPU and compares with the reference; returns the
// worst error over its tolerance (losses, parameters, running statistics)
// and the number of tensors compared, or sets *err.
double TrainAndCompare(gcc_graph *g, const gcc_test::Fixture &fx, int *tensors, double *sensitivity,
                       std::string *err) {
  *sensitivity = 0;
  *err = AddLossAndRecipe(g, fx);
  if (!err->empty())
    return NAN;
  gcc_session_options so{};
  so.threads = 2;
  so.opt = g->training.opt;
  gcc_session *s = nullptr;
  gcc_diag d{};
  if (gcc_session_create(g, &so, &s, &d) != GCC_OK) {
    *err = std::string("session: ") + d.msg;
    return NAN;
  }
  const gcc_test::FixtureArray &xa = fx.Get("x");
  const float *x = xa.f32();
  const int64_t *labels = fx.Get("labels").i64();
  int64_t batch = fx.Get("labels").numel();
  double worst = 0;
  for (int step = 1; step <= 3; ++step) {
    float loss = 0;
    if (gcc_session_train_step(s, x, labels, batch, &loss, &d) != GCC_OK) {
      *err = std::string("step ") + std::to_string(step) + ": " + d.msg;
      gcc_session_destroy(s);
      return NAN;
    }
    double want = fx.Get("loss." + std::to_string(step)).f64()[0];
    double alt = fx.Get("alt.loss." + std::to_string(step)).f64()[0];
    double tol = std::max(kRtol * std::max(std::fabs(want), kFloor), kAlt * std::fabs(alt - want));
    double e = std::fabs(loss - want);
    *sensitivity =
        std::max(*sensitivity, std::fabs(alt - want) / (kRtol * std::max(std::fabs(want), kFloor)));
    worst = std::max(worst, e / tol);
    EXPECT_LE(e, tol) << "step " << step << " loss " << loss << ", PyTorch " << want;
  }
  *tensors = 0;
  std::vector<std::pair<double, std::string>> by_tensor;
  for (const std::string &rname : fx.Names()) {
    if (rname.rfind("final.", 0) != 0)
      continue;
    const gcc_test::FixtureArray &rec = fx.Get(rname);
    std::string pname = rname.substr(6);
    float *p = nullptr;
    int64_t n = 0;
    if (gcc_session_param(s, pname.c_str(), &p, &n, &d) != GCC_OK) {
      ADD_FAILURE() << pname << ": " << d.msg;
      worst = INFINITY;
      continue;
    }
    EXPECT_EQ(n, rec.numel()) << pname;
    if (n != rec.numel())
      continue;
    const float *want = rec.f32();
    std::string aname = "alt." + pname;
    if (!fx.Has(aname) || fx.Get(aname).numel() != n) {
      ADD_FAILURE() << pname << ": no " << aname << " of " << n << " elements in the reference";
      continue;
    }
    const float *alt = fx.Get(aname).f32();
    // a running mean is compared in units of its channel's standard
    // deviation (sqrt of the running variance), the scale of the activations
    // it averages: deep layers' means are near 0 and their float32 error is
    // that of sums of activations of that scale, not of the mean's own size
    const float *var = nullptr;
    const std::string mean_suffix = ".running_mean";
    if (rname.size() > mean_suffix.size() &&
        rname.compare(rname.size() - mean_suffix.size(), mean_suffix.size(), mean_suffix) == 0) {
      std::string vname = rname.substr(0, rname.size() - mean_suffix.size()) + ".running_var";
      if (fx.Has(vname) && fx.Get(vname).numel() == n)
        var = fx.Get(vname).f32();
    }
    int bad = 0;
    double tensor_worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      double scale = std::max(std::fabs((double)want[i]), kFloor);
      if (var)
        scale = std::max(scale, std::sqrt(std::max(0.0, (double)var[i])));
      double plain = kRtol * scale, spread = std::fabs((double)alt[i] - want[i]);
      *sensitivity = std::max(*sensitivity, spread / plain);
      double tol = std::max(plain, kAlt * spread);
      double e = std::fabs((double)p[i] - want[i]);
      tensor_worst = std::max(tensor_worst, e / tol);
      if (!(e <= tol) && bad++ < 2)
        ADD_FAILURE() << pname << "[" << i << "] = " << p[i] << ", PyTorch " << want[i];
    }
    worst = std::max(worst, tensor_worst);
    by_tensor.push_back({tensor_worst, pname});
    ++*tensors;
  }
  std::sort(by_tensor.rbegin(), by_tensor.rend());
  for (size_t i = 0; i < by_tensor.size() && i < 4 && by_tensor[i].first > 1; i++)
    std::printf("[zoo-train]   %s: error %.3g of the tolerance\n", by_tensor[i].second.c_str(),
                by_tensor[i].first);
  gcc_session_destroy(s);
  return worst;
}

TEST(TorchvisionZoo, ExportsTrainAsPyTorchForThreeSgdSteps) {
  std::vector<std::string> models;
  std::string skip = ZooDir(&models);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  const std::string dir = std::getenv("GCC_TRAIN_ZOO_DIR");
  std::printf("[zoo-train] %-20s %-12s %-8s %s\n", "model", "exporter", "trains",
              "worst error / tolerance over 3 SGD steps (losses, parameters, statistics)");
  int rows = 0, matched = 0;
  for (const char *exporter : kExporters) {
    for (const std::string &model : models) {
      std::string stem = dir + "/" + model + "." + exporter;
      std::string onnx = stem + (std::string(exporter) == "dynamo" ? ".onnx" : ".train.onnx");
      SCOPED_TRACE(onnx);
      rows++;
      if (!Exists(onnx) || !Exists(stem + ".train.fix")) {
        bool dynamo = std::string(exporter) == "dynamo";
        std::string why =
            ExportError(stem + (dynamo && !Exists(onnx) ? "" : ".train") + ".error.txt");
        std::printf("[zoo-train] %-20s %-12s %-8s no export or reference: %.200s\n", model.c_str(),
                    exporter, "-", why.c_str());
        continue;
      }
      auto t0 = std::chrono::steady_clock::now();
      gcc_test::Fixture fx;
      std::string err;
      ASSERT_TRUE(gcc_test::Fixture::Load(stem + ".train.fix", &fx, &err)) << err;
      gcc_status st;
      gcc_graph *g = Import(onnx, true, &st, &err);
      if (!g) {
        EXPECT_EQ(st, GCC_ERR_UNSUPPORTED) << err;
        std::printf("[zoo-train] %-20s %-12s %-8s %.200s\n", model.c_str(), exporter, "no",
                    err.c_str());
        continue;
      }
      int tensors = 0;
      double sensitivity = 0;
      double worst = TrainAndCompare(g, fx, &tensors, &sensitivity, &err);
      gcc_graph_free(g);
      EXPECT_EQ(err, "");
      if (!err.empty()) {
        std::printf("[zoo-train] %-20s %-12s %-8s %.200s\n", model.c_str(), exporter, "no",
                    err.c_str());
        continue;
      }
      EXPECT_GT(tensors, 0);
      matched += worst <= 1;
      std::printf("[zoo-train] %-20s %-12s %-8s %.3g (%d tensors; PyTorch NCHW vs channels_last "
                  "%.3g plain tolerances; %.0f s)\n",
                  model.c_str(), exporter, worst <= 1 ? "yes" : "MISMATCH", worst, tensors,
                  sensitivity, Seconds(t0));
      std::fflush(stdout);
    }
  }
  std::printf("[zoo-train] %d of %d exports train as PyTorch\n", matched, rows);
}

} // namespace
