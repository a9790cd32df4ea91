// torchvision_zoo_test: torchvision classifiers exported with both of
// PyTorch's ONNX exporters (bench/export_torchvision_zoo.py writes them, with
// PyTorch's eval() logits for a fixed input, into a cache folder; nothing is
// exported or downloaded at test time) are imported and run on the CPU
// (issue 30). The folder is $GCC_TRAIN_ZOO_DIR (pass it with
// --test_env=GCC_TRAIN_ZOO_DIR=DIR); without it the test is skipped with a
// message saying how to make it.
//
// Every model that imports must give PyTorch's logits within
// 1e-4 * max |logit| (float32 in both, deep chains of convolutions with
// different summation orders; the bound). A model the importer
// refuses must be refused as unsupported (GCC_ERR_UNSUPPORTED naming the
// op or variant), never with another error. PyTorch's logits must differ
// between the two rows of the input (by more than 1e-3 of the largest):
// input-independent logits would make the comparison say little. The test prints the table:
// model, exporter, imports (or why not), max error over the bound.
#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

extern "C" {
#include "datasets/npy.h"
#include "graph/ir.h"
#include "onnx/import.h"
#include "runtime/plan.h"
}
#include "tests/testutil.h"

namespace {

void *BindWeights(void *user, const gcc_graph *g, int v) {
  const gcc_graph *m = static_cast<const gcc_graph *>(user);
  int mv = gcc_graph_find(m, g->values[v].name);
  return mv >= 0 ? m->values[mv].data : nullptr;
}

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

TEST(TorchvisionZoo, ImportedModelsMatchPyTorch) {
  const char *dir = std::getenv("GCC_TRAIN_ZOO_DIR");
  DIR *dp = dir ? opendir(dir) : nullptr;
  if (!dp)
    GTEST_SKIP() << "no exported models: run bench/export_torchvision_zoo.py --dir DIR and "
                    "bazel test //tests:torchvision_zoo_test --test_env=GCC_TRAIN_ZOO_DIR=DIR"
                 << (dir ? std::string(" (") + dir + " cannot be opened)" : "");
  std::vector<std::string> files;
  while (dirent *e = readdir(dp)) {
    std::string f = e->d_name;
    if (f.size() > 5 && f.compare(f.size() - 5, 5, ".onnx") == 0)
      files.push_back(f);
  }
  closedir(dp);
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty()) << dir << " holds no .onnx file";
  std::printf("[zoo] %-22s %-12s %-8s %s\n", "model", "exporter", "imports", "max error / bound");
  int matched = 0;
  for (const std::string &f : files) {
    std::string stem = f.substr(0, f.size() - 5);
    size_t dot = stem.find('.');
    ASSERT_NE(dot, std::string::npos) << f << ": expected MODEL.EXPORTER.onnx";
    std::string model = stem.substr(0, dot), exporter = stem.substr(dot + 1);
    SCOPED_TRACE(f);
    std::string path = std::string(dir) + "/" + f, err;
    Array x, want;
    ASSERT_TRUE(ReadNpy(std::string(dir) + "/" + model + ".input.npy", &x, &err)) << err;
    ASSERT_TRUE(ReadNpy(std::string(dir) + "/" + model + ".logits.npy", &want, &err)) << err;
    // the reference must depend on the input (rows 0 and 1 differ), else a
    // match says little: bench/export_torchvision_zoo.py perturbs the weights
    ASSERT_GE(x.shape.dims[0], 2);
    size_t classes = want.v.size() / (size_t)x.shape.dims[0];
    double spread = 0, peak = 0;
    for (size_t i = 0; i < classes; i++) {
      spread = std::max(spread, (double)std::fabs(want.v[i] - want.v[classes + i]));
      peak = std::max(peak, (double)std::fabs(want.v[i]));
    }
    EXPECT_GT(spread, 1e-3 * peak) << "PyTorch's logits do not depend on the input";
    gcc_test::Bytes bytes;
    ASSERT_TRUE(gcc_test::ReadFile(path, &bytes)) << path;
    gcc_onnx_options o{};
    gcc_graph *g = nullptr;
    gcc_diag d{};
    gcc_status st = gcc_onnx_import(bytes.data(), bytes.size(), path.c_str(), &o, &g, nullptr, &d);
    if (st != GCC_OK) {
      EXPECT_EQ(st, GCC_ERR_UNSUPPORTED) << d.msg;
      std::string why = d.msg;
      size_t at = why.find(f);
      if (at != std::string::npos)
        why = why.substr(at + f.size());
      std::printf("[zoo] %-22s %-12s %-8s %.160s\n", model.c_str(), exporter.c_str(), "no",
                  why.c_str());
      continue;
    }
    int64_t batch = x.shape.dims[0];
    gcc_options opt{};
    opt.mode = GCC_MODE_EVAL;
    opt.batch_size = batch;
    opt.device = GCC_DEV_CPU;
    opt.n_cuda_devices = 1;
    gcc_plan_config cfg{};
    cfg.threads = 2;
    cfg.readback_ring = 1;
    gcc_plan *p = nullptr;
    ASSERT_EQ(gcc_plan_compile(g, &opt, &cfg, BindWeights, g, &p, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_plan_bind_input(p, g->values[g->inputs[0]].name, x.v.data(), &d), GCC_OK)
        << d.msg;
    ASSERT_EQ(gcc_plan_run(p, 0, &d), GCC_OK) << d.msg;
    const gcc_tensor *t = gcc_plan_tensor(p, g->values[g->outputs[0]].name);
    ASSERT_NE(t, nullptr);
    ASSERT_EQ((size_t)t->numel, want.v.size());
    const float *y = static_cast<const float *>(t->data);
    double amax = 0, err_max = 0;
    for (float w : want.v)
      amax = std::max(amax, (double)std::fabs(w));
    for (size_t i = 0; i < want.v.size(); i++)
      err_max = std::max(err_max, std::fabs((double)y[i] - want.v[i]));
    double bound = 1e-4 * amax;
    EXPECT_LE(err_max, bound) << "max |logit| " << amax;
    matched += err_max <= bound;
    std::printf("[zoo] %-22s %-12s %-8s %.3g (%.3g / %.3g)\n", model.c_str(), exporter.c_str(),
                "yes", err_max / bound, err_max, bound);
    gcc_plan_free(p);
    gcc_graph_free(g);
  }
  std::printf("[zoo] %d of %zu exports import and match\n", matched, files.size());
}

} // namespace
